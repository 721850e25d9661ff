//! No output may be able to match a declared input (issue 27). A task's outputs are deleted
//! before it runs and replaced by every restore, so `outputs = ["dist/**", "src/**"]` beside
//! `inputs = ["src/**"]` deleted the sources — uncommitted edits included. Checked once at
//! load, after the projects are merged ([`check`]): each output include of each task against
//! every declared input include of the workspace —
//!
//! - the task's own `inputs` and every other task's (a `//` pattern of another project that
//!   points into this one included);
//! - `[workspace] inputs` and `[workspace] fingerprint` (inputs of every task);
//! - every installed tree (`[workspace] trees` or its default, [`tree_patterns`]): an input
//!   of every task that sees it, written by the package manager. An output in one
//!   (`node_modules/.cache/**`, `//node_modules/dep/**`) or holding one was cleaned before
//!   the run — installed packages deleted — and moved the tree's digest, its own key's input.
//!
//! Nor may two tasks' outputs be able to match one path ([`check_outputs`]): each one's clean
//! and restore replace everything its outputs match, so `bundle` (`dist/**`) deleted
//! `build`'s `dist/lib.js`, and a `bundle` that ran beside `build` could cache that file as
//! its own and restore a stale copy over a newer one later.
//!
//! Two patterns overlap when some path can match both ([`PathPattern::intersects`], decided
//! from the patterns, sound). An input list's exclusion that covers the output
//! ([`PathPattern::covers`]: `inputs = ["**/*", "!dist/**"]`) removes the overlap. The one
//! overlap that is meant: a task that depends (transitively) on the producer may declare the
//! producer's outputs as its inputs (`codegen` writes `gen/**`, `build` after it reads
//! `gen/**`); those files are the producer's by the graph, and the reader's key folds them
//! through the producer's. Default inputs ("every file of the project but outputs") are not
//! declared and never overlap. Output exclusions are not consulted, as in
//! [`super::outputs`]: they narrow what is cleaned, and a typo must never make an overlap
//! acceptable.
//!
//! Cost: inputs are indexed by their literal prefix; an output meets only the inputs whose
//! prefix lies on its prefix's path (its ancestors, found by hash lookups) or under it (a
//! range of the sorted index), so a large workspace stays near linear. The task graph (for
//! the dependency exemption) is built only when a pair overlaps; when the graph itself is
//! broken the check is left to the graph's error, which every command that runs tasks
//! reports first.

use std::collections::{BTreeMap, HashMap, HashSet};

use prova_protocol::TaskId;
use prova_protocol::globs::is_within;

use super::error::ConfigError;
use super::intersect::PathPattern;
use crate::workspace::{Workspace, tree_patterns};

/// Who declared an input pattern.
#[derive(Clone, Copy, Debug)]
enum Owner<'w> {
    /// Task `name` of the project at index `project`.
    Task { project: usize, name: &'w str },
    /// `[workspace] inputs`.
    Inputs,
    /// `[workspace] fingerprint`.
    Fingerprint,
    /// An installed tree (`[workspace] trees` or its default): an input of every task that
    /// sees it, and what the package manager wrote, never a task.
    Tree,
}

/// One declared input include and the exclusions of its list that apply to it.
#[derive(Debug)]
struct Input<'w> {
    owner: Owner<'w>,
    written: &'w str,
    shape: PathPattern,
    exclusions: Vec<PathPattern>,
    /// Inputs of one class have the same shape and exclusions (every project's build
    /// declaring `//packages/*/package.json`): one answer per output serves them all.
    class: usize,
}

/// Checks every output of every task of `ws` against every declared input (module doc).
pub fn check(ws: &Workspace) -> Result<(), ConfigError> {
    let outputs = output_includes(ws);
    check_outputs(ws, &outputs)?;
    let dirs: Vec<&str> = ws.projects.iter().map(|p| p.dir.as_str()).collect();
    let trees = tree_patterns(&ws.root, ws.settings.trees.as_deref(), &dirs);
    let inputs = declared_inputs(ws, &trees);
    if inputs.is_empty() {
        return Ok(());
    }
    let mut by_prefix: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (i, input) in inputs.iter().enumerate() {
        by_prefix.entry(input.shape.prefix()).or_default().push(i);
    }
    let mut graph: Option<Option<Reach>> = None;
    // Per output: whether each class of inputs met so far can match it.
    let mut overlaps: HashMap<usize, bool> = HashMap::new();
    for o in &outputs {
        let out = &o.shape;
        overlaps.clear();
        for i in candidates(&by_prefix, out.prefix()) {
            let input = &inputs[i];
            let overlap = *overlaps.entry(input.class).or_insert_with(|| {
                out.intersects(&input.shape) && !input.exclusions.iter().any(|e| e.covers(out))
            });
            if !overlap {
                continue;
            }
            if let Owner::Task { project: qi, name: reader } = input.owner {
                let reach = graph.get_or_insert_with(|| Reach::new(ws));
                let Some(reach) = reach else { return Ok(()) };
                let consumer = TaskId::new(&ws.projects[qi].name, reader);
                if reach.depends_on(&consumer, &o.task_id(ws)) {
                    continue;
                }
            }
            return Err(ConfigError::OutputOverlapsInput {
                at: o.at(ws),
                pattern: o.written.to_owned(),
                task: o.task_id(ws).to_string(),
                input: describe(ws, input),
                help: Some(help(ws, &ws.projects[o.project].dir, o.written, out, input)),
            });
        }
    }
    Ok(())
}

/// One output include of one task, with its list's exclusions.
struct Output<'w> {
    project: usize,
    task: &'w str,
    /// Its index in the task's `outputs` (for where it was written).
    k: usize,
    written: &'w str,
    shape: PathPattern,
    exclusions: Vec<PathPattern>,
}

impl Output<'_> {
    /// The task, `project#task`.
    fn task_id(&self, ws: &Workspace) -> TaskId {
        TaskId::new(&ws.projects[self.project].name, self.task)
    }

    /// Where the pattern was written (the task's table when its outputs came from no file).
    fn at(&self, ws: &Workspace) -> Box<crate::location::Location> {
        let t = &ws.projects[self.project].tasks[self.task];
        Box::new(t.outputs_at.get(self.k).unwrap_or(&t.defined_at).clone())
    }
}

/// Every output include of every task, in project and task order, with its exclusions.
fn output_includes(ws: &Workspace) -> Vec<Output<'_>> {
    let mut all = Vec::new();
    for (project, p) in ws.projects.iter().enumerate() {
        for (task, t) in &p.tasks {
            let exclusions: Vec<PathPattern> = t
                .outputs
                .iter()
                .filter_map(|o| o.strip_prefix('!'))
                .map(|e| PathPattern::new(&p.dir, e))
                .collect();
            for (k, written) in t.outputs.iter().enumerate() {
                if written.starts_with('!') {
                    continue;
                }
                let shape = PathPattern::new(&p.dir, written);
                all.push(Output {
                    project,
                    task,
                    k,
                    written,
                    shape,
                    exclusions: exclusions.clone(),
                });
            }
        }
    }
    all
}

/// No two tasks' outputs may be able to match one path: each task's clean and restore
/// replace all its outputs match. An exclusion of either list that covers the other's
/// include ([`PathPattern::covers`]: `["dist/**", "!dist/types/**"]` beside
/// `["dist/types/**"]`) removes the overlap; one task naming a path twice is its own.
fn check_outputs(ws: &Workspace, all: &[Output<'_>]) -> Result<(), ConfigError> {
    let mut by_prefix: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (i, o) in all.iter().enumerate() {
        by_prefix.entry(o.shape.prefix()).or_default().push(i);
    }
    for (i, o) in all.iter().enumerate() {
        // Each pair once, reported at the later output.
        for j in candidates(&by_prefix, o.shape.prefix()).filter(|&j| j < i) {
            let other = &all[j];
            if (other.project, other.task) == (o.project, o.task)
                || !o.shape.intersects(&other.shape)
                || o.exclusions.iter().any(|e| e.covers(&other.shape))
                || other.exclusions.iter().any(|e| e.covers(&o.shape))
            {
                continue;
            }
            return Err(ConfigError::OutputsOverlap {
                at: o.at(ws),
                pattern: o.written.to_owned(),
                task: o.task_id(ws).to_string(),
                other: format!("output `{}` of task `{}`", other.written, other.task_id(ws)),
                help: Some(
                    "give each task its own outputs (`dist/**` and `dist-types/**`), or leave \
                     one's out of the other's with an exclusion (`\"dist/**\", \"!dist/types/**\"` \
                     beside `\"dist/types/**\"`)"
                        .to_owned(),
                ),
            });
        }
    }
    Ok(())
}

/// Every declared input include of `ws`, with the exclusions that apply to it, and each of
/// the installed `trees` (patterns of directories: the directory and everything under it). A
/// tree pattern that leaves the workspace names no tree (`trees::tree_dirs` expands none).
fn declared_inputs<'w>(ws: &'w Workspace, trees: &'w [String]) -> Vec<Input<'w>> {
    let mut out = Vec::new();
    for written in trees {
        let rel = written.trim_start_matches("//").trim_end_matches('/');
        if rel.starts_with('/') || rel.split('/').any(|c| c == "..") {
            continue;
        }
        let shape = PathPattern::new("", &format!("{rel}/**"));
        out.push(Input { owner: Owner::Tree, written, shape, exclusions: Vec::new(), class: 0 });
    }
    let s = &ws.settings;
    for (owner, list) in [(Owner::Inputs, &s.inputs), (Owner::Fingerprint, &s.fingerprint)] {
        push_list(&mut out, owner, "", list, |_| true);
    }
    for (pi, p) in ws.projects.iter().enumerate() {
        for (name, t) in &p.tasks {
            let Some(list) = &t.inputs else { continue };
            let owner = Owner::Task { project: pi, name };
            // As `inputs::select` applies them: a project-relative include is narrowed by
            // every exclusion of the list, a `//` one by the `//` exclusions only.
            push_list(&mut out, owner, &p.dir, list, |include| !include.starts_with("//"));
        }
    }
    let mut classes: HashMap<(&str, Vec<&str>), usize> = HashMap::new();
    for input in &mut out {
        let exclusions = input.exclusions.iter().map(PathPattern::text).collect();
        let n = classes.len();
        input.class = *classes.entry((input.shape.text(), exclusions)).or_insert(n);
    }
    out
}

fn push_list<'w>(
    out: &mut Vec<Input<'w>>,
    owner: Owner<'w>,
    dir: &str,
    list: &'w [String],
    all_exclusions_apply: impl Fn(&str) -> bool,
) {
    let exclusions: Vec<(&str, PathPattern)> = list
        .iter()
        .filter_map(|p| p.strip_prefix('!'))
        .map(|e| (e, PathPattern::new(dir, e)))
        .collect();
    for written in list.iter().filter(|p| !p.starts_with('!')) {
        let all = all_exclusions_apply(written);
        let exclusions = exclusions
            .iter()
            .filter(|(e, _)| all || e.starts_with("//"))
            .map(|(_, shape)| shape.clone())
            .collect();
        let shape = PathPattern::new(dir, written);
        out.push(Input { owner, written, shape, exclusions, class: 0 });
    }
}

/// The inputs whose prefix lies on `prefix`'s path: at it, above it, or under it.
fn candidates<'a>(
    by_prefix: &'a BTreeMap<&str, Vec<usize>>,
    prefix: &'a str,
) -> impl Iterator<Item = usize> + 'a {
    let mut above: Vec<&str> = vec![prefix];
    let mut cur = prefix;
    while !cur.is_empty() {
        cur = cur.rfind('/').map_or("", |i| &cur[..i]);
        above.push(cur);
    }
    let at_or_above = above.into_iter().filter_map(|q| by_prefix.get(q)).flatten().copied();
    let under = by_prefix
        .range::<str, _>((std::ops::Bound::Excluded(prefix), std::ops::Bound::Unbounded))
        .take_while(move |(q, _)| prefix.is_empty() || q.starts_with(prefix))
        .filter(move |(q, _)| is_within(q, prefix) && **q != prefix)
        .flat_map(|(_, v)| v.iter().copied());
    at_or_above.chain(under)
}

/// Which tasks depend on which, from the full task graph (also what excuses a reader in
/// [`crate::inputs::protect`]).
pub struct Reach {
    graph: crate::graph::TaskGraph,
    /// Each asked node's transitive dependencies.
    upstream: HashMap<usize, HashSet<usize>>,
}

impl Reach {
    /// `None` when the graph does not build (its own error is reported where it is built).
    pub fn new(ws: &Workspace) -> Option<Self> {
        let graph = crate::graph::build_graph(ws).ok()?;
        Some(Self { graph, upstream: HashMap::new() })
    }

    /// Whether `consumer` depends on `producer`, directly or not.
    pub fn depends_on(&mut self, consumer: &TaskId, producer: &TaskId) -> bool {
        let (Some(&c), Some(&p)) = (self.graph.index.get(consumer), self.graph.index.get(producer))
        else {
            return false;
        };
        let graph = &self.graph;
        self.upstream
            .entry(c)
            .or_insert_with(|| {
                let mut seen = HashSet::new();
                let mut stack = graph.nodes[c].deps.clone();
                while let Some(d) = stack.pop() {
                    if seen.insert(d) {
                        stack.extend(graph.nodes[d].deps.iter().copied());
                    }
                }
                seen
            })
            .contains(&p)
    }
}

fn describe(ws: &Workspace, input: &Input<'_>) -> String {
    match input.owner {
        Owner::Task { project, name } => format!(
            "input `{}` of task `{}`",
            input.written,
            TaskId::new(&ws.projects[project].name, name)
        ),
        Owner::Inputs => {
            format!("`{}` of `[workspace] inputs` (an input of every task)", input.written)
        }
        Owner::Fingerprint => {
            format!("`{}` of `[workspace] fingerprint` (an input of every task)", input.written)
        }
        Owner::Tree => format!(
            "installed tree `{}` (`[workspace] trees`, by default `node_modules` at the root and \
             in every project), an input of every task that sees it",
            input.written
        ),
    }
}

/// What to write instead: the exclusion that would remove the overlap, in the terms of the
/// input's list.
fn help(ws: &Workspace, dir: &str, written: &str, out: &PathPattern, input: &Input<'_>) -> String {
    if let Owner::Tree = input.owner {
        return format!(
            "write them outside the tree (e.g. `.cache/**`, not `node_modules/.cache/**`): the \
             installed packages would go, and a key that folds the tree would fold the task's \
             own outputs; or, if `{}` does not hold installed dependencies, leave it out of \
             `[workspace] trees`",
            input.written
        );
    }
    let same_project = match input.owner {
        Owner::Task { project, .. } => ws.projects[project].dir == dir,
        _ => false,
    };
    let exclusion = if same_project && !written.starts_with("//") {
        format!("!{written}")
    } else {
        format!("!//{}", out.text())
    };
    format!(
        "name only what the task writes (e.g. `dist/**`) in `outputs`; if the input pattern is \
         meant to be that wide, leave the outputs out of it with `{exclusion}`; a task that \
         reads another's outputs must depend on it"
    )
}

#[cfg(test)]
#[path = "overlap_tests.rs"]
mod overlap_tests;
