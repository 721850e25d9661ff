//! `prova run --dry-run`: the plan in the order it would run, each task's key and what
//! would become of it (run, restored, not run, waiting on an upstream's outputs), as text
//! or one JSON object.

use std::collections::HashMap;
use std::fmt::Write as _;

use prova_coordinator::cache::Entry;
use prova_coordinator::graph::TaskGraph;
use prova_coordinator::prepare::Prepared;
use prova_coordinator::run::TaskKind;
use prova_protocol::wire::UpstreamMode;

use crate::render::plural;

/// The dry run's text (or JSON, with `json`).
pub(super) fn dry_run(
    graph: &TaskGraph,
    prepared: &Prepared,
    hits: &HashMap<usize, Entry>,
    upstreams: UpstreamMode,
    json: bool,
) -> String {
    let dry = Dry { prepared, hits, upstreams, order: graph.topo_order() };
    if json { dry.json() } else { dry.text() }
}

/// The plan and what the cache holds for it.
struct Dry<'a> {
    prepared: &'a Prepared,
    hits: &'a HashMap<usize, Entry>,
    upstreams: UpstreamMode,
    order: Vec<usize>,
}

impl Dry<'_> {
    /// `--only` restores a hit of a task not asked for and runs none; `--exclude-dependencies`
    /// does neither (run/excluded.rs).
    fn not_run(&self, i: usize) -> bool {
        let t = &self.prepared.plan.tasks[i];
        !t.requested
            && t.kind != TaskKind::Group
            && match self.upstreams {
                UpstreamMode::Run => false,
                UpstreamMode::Only => !self.hits.contains_key(&i),
                UpstreamMode::Exclude => true,
            }
    }

    fn cache_word(&self, i: usize) -> &'static str {
        match (self.prepared.plan.tasks[i].cacheable, self.hits.contains_key(&i)) {
            _ if self.not_run(i) => "not_run",
            (false, _) => "uncached",
            (true, true) => "hit",
            (true, false) if self.prepared.key(i).is_none() => "pending",
            (true, false) => "miss",
        }
    }

    /// A pending key waits on the upstreams it folds by outputs that will run first.
    fn waits_on(&self, i: usize) -> Vec<&str> {
        let plan = &self.prepared.plan;
        self.prepared
            .keys
            .output_upstreams(plan, i)
            .into_iter()
            .filter(|d| !self.hits.contains_key(d))
            .map(|d| plan.tasks[d].id.as_str())
            .collect()
    }

    fn json(&self) -> String {
        let plan = &self.prepared.plan;
        let tasks: Vec<_> = self
            .order
            .iter()
            .map(|&i| {
                let t = &plan.tasks[i];
                serde_json::json!({
                    "id": t.id,
                    "kind": format!("{:?}", t.kind).to_lowercase(),
                    "command": (t.kind != TaskKind::Group).then(|| t.spec.command.display()),
                    "dir": t.spec.project_dir,
                    "key": self.prepared.key(i),
                    "cache": self.cache_word(i),
                    "waits_on": self.prepared.key(i).is_none().then(|| self.waits_on(i)),
                    "deps": t.deps.iter().map(|&d| plan.tasks[d].id.as_str()).collect::<Vec<_>>(),
                })
            })
            .collect();
        format!("{}\n", serde_json::json!({ "tasks": tasks }))
    }

    /// A hit is restored, not run: the header says how many of each.
    fn header(&self) -> String {
        let order = &self.order;
        let restores = order.iter().filter(|&&i| self.cache_word(i) == "hit").count();
        let skipped = order.iter().filter(|&&i| self.not_run(i)).count();
        if restores == 0 && skipped == 0 {
            return format!("{} would run, in this order:\n", plural(order.len(), "task"));
        }
        let mut head = format!(
            "{}, in this order: {} would run, {} would restore from the cache",
            plural(order.len(), "task"),
            order.len() - restores - skipped,
            restores
        );
        if skipped > 0 {
            let _ = write!(head, ", {skipped} would not run (their outputs on disk are used)");
        }
        head.push('\n');
        head
    }

    fn text(&self) -> String {
        let mut out = self.header();
        for (n, &i) in self.order.iter().enumerate() {
            let t = &self.prepared.plan.tasks[i];
            let what = match t.kind {
                TaskKind::Group => "(group)".to_owned(),
                TaskKind::Persistent => format!("{}  (persistent)", t.spec.command.display()),
                TaskKind::Command => t.spec.command.display(),
            };
            let dir = if t.spec.project_dir.is_empty() { "." } else { t.spec.project_dir.as_str() };
            let key = self.prepared.key(i).map_or_else(|| "pending".to_owned(), |k| k.short());
            let fate = self.fate(i);
            let _ = writeln!(out, "{:>4}. {}  [{}]  {}  {} {}", n + 1, t.id, dir, what, key, fate);
        }
        out
    }

    /// What becomes of task `i`, after its key on its line.
    fn fate(&self, i: usize) -> String {
        match self.prepared.key(i) {
            _ if self.not_run(i) => match self.upstreams {
                UpstreamMode::Exclude => "not run (--exclude-dependencies)".to_owned(),
                _ => "not run (--only): not cached, its outputs on disk are used".to_owned(),
            },
            None if self.prepared.plan.tasks[i].cacheable => {
                let w = self.waits_on(i);
                let mut named: Vec<String> = w.iter().take(3).map(|t| format!("`{t}`")).collect();
                if w.len() > 3 {
                    named.push(format!("{} more", w.len() - 3));
                }
                format!("(waits on {})", named.join(", "))
            }
            _ => match self.cache_word(i) {
                "hit" => "hit: would restore".to_owned(),
                word => word.to_owned(),
            },
        }
    }
}
