//! `prova why TASK` and `prova show TASK`: the task's current key against the cache. When the
//! current key has an entry the answer is "a hit" (a revert hits the older entry); only
//! otherwise is the key diffed against the task's newest entry.

use std::fmt::Write as _;
use std::path::Path;

use anyhow::Context as _;
use prova_coordinator::cache::TRUSTED;
use prova_coordinator::graph;
use prova_coordinator::keys::KeyComponents;
use prova_coordinator::prepare::{Prepared, prepare};
use prova_coordinator::selection::{self, ProjectFilter, Selection};
use prova_coordinator::workspace::Workspace;
use prova_protocol::TaskId;

use super::common;
use crate::args::TaskArgs;
use crate::exit::Code;

struct Inspected {
    ws: Workspace,
    prepared: Prepared,
    node: usize,
    /// The entry of the current key, else the task's newest entry.
    entry: Option<prova_coordinator::cache::Entry>,
    /// `entry` is the current key's: the next run is a hit.
    current: bool,
    /// The current key's entry is not the task's newest (its inputs went back to an older
    /// state).
    older: bool,
    /// Per upstream folded by outputs whose fingerprint moved since `entry`: the output
    /// paths that differ (added, changed, removed), when both entries are still cached.
    moved_outputs: Vec<(String, Vec<String>)>,
    /// Per upstream folded by key whose key moved since `entry`: what moved in that
    /// upstream's own key, when the cache still holds its entry under the old key.
    moved_keys: Vec<(String, Vec<String>)>,
    /// The upstreams folded by outputs that have no entry for their current key (what a
    /// pending key waits on).
    pending: Vec<String>,
    /// With a current entry: the upstreams folded by outputs whose current entry is newer
    /// than it — they re-ran since, with the bytes it folded (early cutoff).
    cutoff: Vec<String>,
}

fn inspect(start: &Path, args: &TaskArgs) -> anyhow::Result<Inspected> {
    let start = start
        .canonicalize()
        .with_context(|| format!("cannot use directory {}", start.display()))?;
    let ws = Workspace::load(&start)?;
    let id = TaskId::parse(&args.task).ok_or_else(|| {
        anyhow::anyhow!("`{}` is not a task id: write it as project#task", args.task)
    })?;
    let full = graph::build_graph(&ws)?;
    let sel = Selection {
        tasks: vec![args.task.clone()],
        projects: ProjectFilter::All,
        cwd: String::new(),
        allow_empty: false,
    };
    let g = selection::select(&ws, &full, &sel)?;
    // Read-only: inspecting must work on a read-only `.prova` and leave it as it was.
    let (cache, join) = common::open_cache_as(&ws, &args.cache, common::CacheMode::ReadOnly)?;
    let rt = common::runtime()?;
    let found = rt.block_on(async {
        let env = |k: &str| std::env::var(k).ok();
        let mut prepared = prepare(&ws, &g, &[], &env, &cache, None, None).await?;
        let node = prepared.plan.position(&id).ok_or_else(|| anyhow::anyhow!("no task {id}"))?;
        // Keys that fold an upstream's outputs are known once the upstream's entry is.
        let hits = prova_coordinator::keys::progressive::presolve(
            &prepared.plan,
            &mut prepared.keys,
            |ks| {
                let c = cache.clone();
                async move { c.call(move |s| s.get_entries(TRUSTED, &ks)).await? }
            },
        )
        .await?;
        let task = id.to_string();
        let key = prepared.key(node);
        // The entries of the upstreams now (their manifests name what moved).
        let ups = prepared.keys.output_upstreams(&prepared.plan, node);
        let now_upstream: Vec<(String, prova_coordinator::cache::Entry)> = ups
            .iter()
            .filter_map(|d| Some((prepared.plan.tasks[*d].id.to_string(), hits.get(d)?.clone())))
            .collect();
        let pending: Vec<String> = ups
            .iter()
            .filter(|d| !hits.contains_key(d))
            .map(|&d| prepared.plan.tasks[d].id.to_string())
            .collect();
        let (entry, current, older) = entry_for(&cache, task, key).await?;
        // The current key folds each upstream's fingerprint as it is now, so an upstream
        // entry newer than this one re-ran with the same bytes.
        let cutoff: Vec<String> = match (&entry, current) {
            (Some(e), true) => now_upstream
                .iter()
                .filter(|(_, up)| up.created_ms > e.created_ms)
                .map(|(t, _)| t.clone())
                .collect(),
            _ => Vec::new(),
        };
        let (moved_outputs, moved_keys) = match (&entry, current) {
            (Some(e), false) => (
                moved_outputs(&cache, e, now_upstream).await?,
                moved_keys(&cache, e, &prepared).await?,
            ),
            _ => (Vec::new(), Vec::new()),
        };
        let moved = (moved_outputs, moved_keys);
        Ok((prepared, node, entry, current, older, moved, pending, cutoff))
    });
    // The store closes (and a read-only one removes its staging directory) once the last
    // handle is gone: wait for it, or the process exits first and leaves it behind.
    drop(rt);
    drop(cache);
    let _ = join.join();
    found.map(
        |(prepared, node, entry, current, older, (moved_outputs, moved_keys), pending, cutoff)| {
            Inspected {
                ws,
                prepared,
                node,
                entry,
                current,
                older,
                moved_outputs,
                moved_keys,
                pending,
                cutoff,
            }
        },
    )
}

/// The task's entry under its current `key` (`current`: true; `older`: a newer entry of
/// the task exists under another key), else its newest entry.
async fn entry_for(
    cache: &prova_coordinator::cache::CacheThread,
    task: String,
    key: Option<prova_protocol::Digest>,
) -> anyhow::Result<(Option<prova_coordinator::cache::Entry>, bool, bool)> {
    let found = cache
        .call(move |s| {
            let newest = s.latest_for_task(TRUSTED, &task)?;
            if let Some(key) = key
                && let Some(e) = s.get_entries(TRUSTED, &[key])?.remove(&key)
            {
                let older = newest.is_some_and(|n| n.key != key);
                return Ok::<_, prova_coordinator::cache::CacheError>((Some(e), true, older));
            }
            Ok((newest, false, false))
        })
        .await??;
    Ok(found)
}

/// For each upstream `old`'s key folded by outputs whose current entry (`now`) has other
/// outputs: the paths that differ between the entry `old` folded and the current one.
async fn moved_outputs(
    cache: &prova_coordinator::cache::CacheThread,
    old: &prova_coordinator::cache::Entry,
    now: Vec<(String, prova_coordinator::cache::Entry)>,
) -> anyhow::Result<Vec<(String, Vec<String>)>> {
    use prova_coordinator::keys::progressive::entry_fingerprint;
    use prova_protocol::manifest::OutputManifest;
    let Some(old) = rmp_decode(&old.components) else { return Ok(Vec::new()) };
    let mut out = Vec::new();
    for (task, entry) in now {
        let Some((_, was)) = old.upstream_outputs.iter().find(|(t, _)| *t == task) else {
            continue;
        };
        if entry_fingerprint(&entry) == Some(*was) {
            continue;
        }
        let (t, fp) = (task.clone(), *was);
        let Some(before) =
            cache.call(move |s| s.entry_with_fingerprint(TRUSTED, &t, &fp)).await??
        else {
            continue;
        };
        let (Ok(a), Ok(b)) = (
            rmp_serde::from_slice::<OutputManifest>(&before.manifest),
            rmp_serde::from_slice::<OutputManifest>(&entry.manifest),
        ) else {
            continue;
        };
        let d = a.diff(&b);
        let paths: Vec<String> = d.added.into_iter().chain(d.changed).chain(d.removed).collect();
        out.push((task, paths));
    }
    Ok(out)
}

/// For each upstream `old` folded by key whose key is another now: what moved in that
/// upstream's key, diffing its entry under the old key (when still cached) against its
/// components now. An upstream's sources moved, say: the dependent folds them, since in
/// place it can read them.
async fn moved_keys(
    cache: &prova_coordinator::cache::CacheThread,
    old: &prova_coordinator::cache::Entry,
    prepared: &Prepared,
) -> anyhow::Result<Vec<(String, Vec<String>)>> {
    let Some(old) = rmp_decode(&old.components) else { return Ok(Vec::new()) };
    let mut out = Vec::new();
    for (task, was) in &old.upstream {
        // An upstream whose own key is still pending cannot say yet what moved in it.
        let Some(d) = TaskId::parse(task).and_then(|id| prepared.plan.position(&id)) else {
            continue;
        };
        if prepared.key(d).is_none_or(|k| k == *was) {
            continue;
        }
        let now = &prepared.keys.components[d];
        let k = *was;
        let Some(before) = cache.call(move |s| s.get_entries(TRUSTED, &[k])).await??.remove(&k)
        else {
            continue;
        };
        let Some(before) = rmp_decode(&before.components) else { continue };
        out.push((task.clone(), now.diff(&before)));
    }
    Ok(out)
}

/// The line `why` prints for an upstream whose key moved, naming up to a few of the things
/// that moved in it — but not those the dependent's own lines (`own`) name already (an env
/// var both fold): then it says the key moved by them.
fn key_line(task: &str, changes: &[String], own: &[String]) -> String {
    const NAMED: usize = 3;
    let fresh: Vec<&String> = changes.iter().filter(|c| !own.contains(c)).collect();
    if fresh.is_empty() {
        return format!("upstream `{task}` key changed (by the changes above)");
    }
    let mut named: Vec<String> = fresh.iter().take(NAMED).map(|c| (*c).clone()).collect();
    if fresh.len() > NAMED {
        named.push(format!("and {} more", fresh.len() - NAMED));
    }
    format!("upstream `{task}` key changed: {}", named.join("; "))
}

/// The line `why` prints for a moved upstream, naming up to a few of its changed outputs.
fn outputs_line(task: &str, paths: &[String]) -> String {
    const NAMED: usize = 5;
    let mut named: Vec<String> = paths.iter().take(NAMED).map(|p| format!("`{p}`")).collect();
    if paths.len() > NAMED {
        named.push(format!("and {} more", paths.len() - NAMED));
    }
    format!("upstream `{task}` outputs changed: {}", named.join(", "))
}

/// Per lockfile keyed per project (an `external:<lockfile>` config pair of `c`): the
/// external packages the task's project resolves to, read from the lockfile as it is now.
fn externals(
    ws: &Workspace,
    c: &KeyComponents,
) -> Vec<(String, Vec<prova_coordinator::lockfile::External>)> {
    let paths: Vec<&str> =
        c.config.iter().filter_map(|(k, _)| k.strip_prefix("external:")).collect();
    let Some(project) = TaskId::parse(&c.task).and_then(|id| ws.project(id.project()).cloned())
    else {
        return Vec::new();
    };
    if paths.is_empty() {
        return Vec::new();
    }
    let dirs: Vec<&str> = ws.projects.iter().map(|p| p.dir.as_str()).collect();
    let locks = prova_coordinator::lockfile::Keyed::load(&ws.root, &paths, &dirs);
    locks.externals_of(&project.dir).into_iter().map(|(p, e)| (p.to_owned(), e)).collect()
}

/// `prova why`: a hit when the current key has an entry; otherwise what moved since the
/// task's newest entry.
pub fn why(start: &Path, args: TaskArgs) -> anyhow::Result<Code> {
    let i = inspect(start, &args)?;
    let now = &i.prepared.keys.components[i.node];
    let key = i.prepared.key(i.node);
    let (verdict, changes): (&str, Vec<String>) = match &i.entry {
        _ if key.is_none() => (
            "pending: its key folds the outputs of an upstream that is not in the cache (it runs first)",
            i.pending.iter().map(|t| format!("waits on `{t}`")).collect(),
        ),
        None => ("no cache entry yet: the next run executes it", Vec::new()),
        Some(_) if i.current && !i.older => (
            "unchanged since its newest entry: the next run is a hit",
            i.cutoff
                .iter()
                .map(|t| format!("upstream `{t}` re-ran with identical outputs (early cutoff)"))
                .collect(),
        ),
        Some(_) if i.current => (
            "its current key has an older entry in the local cache (its inputs went back to an \
             earlier state): the next run is a hit",
            Vec::new(),
        ),
        Some(e) => match rmp_decode(&e.components) {
            Some(old) => {
                let mut d = now.diff(&old);
                for (task, paths) in &i.moved_outputs {
                    let plain = format!("upstream `{task}` outputs changed");
                    if let Some(line) = d.iter_mut().find(|l| **l == plain)
                        && !paths.is_empty()
                    {
                        *line = outputs_line(task, paths);
                    }
                }
                let own = d.clone();
                for (task, changes) in &i.moved_keys {
                    let plain = format!("upstream `{task}` key changed");
                    if let Some(line) = d.iter_mut().find(|l| **l == plain)
                        && !changes.is_empty()
                    {
                        *line = key_line(task, changes, &own);
                    }
                }
                let blocked = prova_coordinator::keys::progressive::blocked_cutoff(now, &old);
                if !blocked.is_empty() {
                    d.push(blocked_line(&args.task, &blocked));
                }
                ("changed since its newest entry", d)
            }
            None => {
                ("changed since its newest entry (written by another prova version)", Vec::new())
            }
        },
    };
    let unkeyed = i.prepared.unkeyed_programs.get(&i.node).cloned().unwrap_or_default();
    if args.json {
        let v = serde_json::json!({ "task": args.task, "key": key, "verdict": verdict, "changes": changes,
            "entry_key": i.entry.as_ref().map(|e| e.key), "not_keyed": unkeyed });
        common::print(&format!("{v}\n"))?;
    } else {
        let mut s = format!("{}: {verdict}\n", args.task);
        for c in &changes {
            let _ = writeln!(s, "  - {c}");
        }
        for u in &unkeyed {
            let _ = writeln!(s, "  not keyed: {u}");
        }
        common::print(&s)?;
    }
    Ok(Code::Ok)
}

/// Why a task whose upstreams kept their bytes still moved: it is not confined.
fn blocked_line(task: &str, upstreams: &[String]) -> String {
    let named: Vec<String> = upstreams.iter().map(|t| format!("`{t}`")).collect();
    format!(
        "no early cutoff: {} kept {} outputs byte-identical, but in place `{task}` can read \
         more of {} than {} declared outputs (sources), so its key folds {} key; `sandbox = \
         true` confines it and cuts it off",
        named.join(", "),
        if named.len() == 1 { "its" } else { "their" },
        if named.len() == 1 { "it" } else { "them" },
        if named.len() == 1 { "its" } else { "their" },
        if named.len() == 1 { "its" } else { "their" },
    )
}

/// `prova show`: the key, every component, and the inputs with digests.
pub fn show(start: &Path, args: TaskArgs) -> anyhow::Result<Code> {
    let i = inspect(start, &args)?;
    let c = &i.prepared.keys.components[i.node];
    let key = i.prepared.key(i.node);
    let cached = i.current;
    let externals = externals(&i.ws, c);
    if args.json {
        let externals: Vec<serde_json::Value> = externals
            .iter()
            .flat_map(|(lockfile, list)| {
                list.iter().map(move |e| {
                    serde_json::json!({ "lockfile": lockfile, "name": e.name,
                    "version": e.version, "integrity": e.integrity })
                })
            })
            .collect();
        let v = serde_json::json!({ "task": args.task, "key": key, "cached": cached,
            "components": c, "externals": externals,
            "not_keyed": i.prepared.unkeyed_programs.get(&i.node) });
        common::print(&format!("{}\n", serde_json::to_string_pretty(&v)?))?;
        return Ok(Code::Ok);
    }
    let mut s = String::new();
    let _ = writeln!(s, "task      {}", c.task);
    let _ = writeln!(
        s,
        "key       {}{}",
        key.map_or_else(|| "(pending)".to_owned(), |k| k.to_string()),
        match (cached, !i.prepared.salted && !c.env.is_empty()) {
            _ if key.is_none() => "  (its key folds the outputs of an upstream not in the cache)",
            (true, _) => "  (in the cache)",
            (false, false) => "  (not in the cache)",
            // Declared env values fold keyed by the cache's salt, which the first run makes.
            (false, true) => "  (no cache yet: the first run's key folds `env` with its salt)",
        }
    );
    let _ = writeln!(s, "version   {}", c.version);
    let _ = writeln!(s, "command   {}", c.command);
    let _ = writeln!(s, "platform  {}", c.platform.as_deref().unwrap_or("(portable)"));
    for (k, v) in &c.config {
        let _ = writeln!(s, "config    {k} = {}", v.replace('\0', ", "));
    }
    for u in i.prepared.unkeyed_programs.get(&i.node).into_iter().flatten() {
        let _ = writeln!(s, "not keyed {u}");
    }
    for (k, v) in &c.env {
        let _ = writeln!(
            s,
            "env       {k} {}",
            v.map_or_else(|| "(unset)".to_owned(), |d| format!("sha:{}", d.short()))
        );
    }
    for (t, k) in &c.upstream {
        let _ = writeln!(s, "upstream  {t} key {}", k.short());
    }
    for (t, k) in &c.upstream_outputs {
        let _ = writeln!(s, "upstream  {t} outputs {}", k.short());
    }
    for t in &i.pending {
        let _ = writeln!(s, "upstream  {t} outputs (pending: not in the cache)");
    }
    if !c.args.is_empty() {
        let _ = writeln!(s, "args      {:?}", c.args);
    }
    for f in &c.workspace {
        let _ = writeln!(s, "workspace {} {}", f.digest.short(), f.path);
    }
    for (lockfile, list) in &externals {
        let _ = writeln!(s, "external  {lockfile}: {} packages", list.len());
        for e in list {
            let _ = writeln!(s, "  {}@{} {}", e.name, e.version, e.integrity);
        }
    }
    let _ = writeln!(s, "inputs    {} files", c.inputs.len());
    for f in &c.inputs {
        let mark = if f.exec { "x" } else { " " };
        let _ = writeln!(s, "  {} {mark} {}", f.digest.short(), f.path);
    }
    common::print(&s)?;
    Ok(Code::Ok)
}

fn rmp_decode(bytes: &[u8]) -> Option<KeyComponents> {
    rmp_serde::from_slice(bytes).ok()
}

#[cfg(test)]
mod tests {
    use super::key_line;

    fn strings(s: &[&str]) -> Vec<String> {
        s.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn an_upstream_key_line_names_what_the_dependents_own_lines_do_not() {
        let own = strings(&["env `MODE` changed", "upstream `lib#build` key changed"]);
        let lib = strings(&["env `MODE` changed", "input `lib/src/l.txt` changed"]);
        assert_eq!(
            key_line("lib#build", &lib, &own),
            "upstream `lib#build` key changed: input `lib/src/l.txt` changed"
        );
        // Moved by the same env var alone: said, not repeated.
        assert_eq!(
            key_line("lib#build", &lib[..1], &own),
            "upstream `lib#build` key changed (by the changes above)"
        );
        let many = strings(&["input `a` changed", "input `b` changed", "input `c` changed", "x"]);
        assert_eq!(
            key_line("lib#build", &many, &own),
            "upstream `lib#build` key changed: input `a` changed; input `b` changed; input `c` \
             changed; and 1 more"
        );
    }
}
