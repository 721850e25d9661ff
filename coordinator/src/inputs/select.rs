//! Each task's input files: its input globs (default: every file of its project) over the
//! workspace file list, minus files of nested projects, minus its own outputs and the
//! outputs of every task upstream of it — those are represented in the key by the upstream
//! task's key, which is what lets every key be computed before anything runs.

use std::collections::{HashMap, HashSet};

use prova_protocol::TaskId;
use prova_protocol::globs::{GlobError, PathGlobs, is_within};

use super::files::FileList;
use crate::run::RunPlan;
use crate::workspace::Workspace;

/// One task's inputs.
#[derive(Clone, Debug, Default)]
pub struct TaskInputs {
    /// Indices into the run's [`FileList`], ascending.
    pub files: Vec<u32>,
    /// Whether the task declared `inputs` (rather than the whole-project default).
    pub declared: bool,
}

/// The inputs of every task of a plan, and the workspace-wide inputs.
#[derive(Clone, Debug, Default)]
pub struct InputSets {
    /// Per plan task.
    pub tasks: Vec<TaskInputs>,
    /// `[workspace] fingerprint` files (indices), folded into every key.
    pub fingerprint: Vec<u32>,
    /// `[workspace] inputs` files (indices), folded into every key.
    pub workspace: Vec<u32>,
    /// Tasks whose declared inputs match no file: the quiet stale-hit trap, warned about.
    pub matched_nothing: Vec<TaskId>,
}

/// A bad glob, with the task it belongs to.
#[derive(Debug, thiserror::Error)]
#[error("{task}: {source}")]
pub struct InputError {
    /// Whose glob.
    pub task: String,
    /// The glob error.
    #[source]
    pub source: GlobError,
}

/// Resolves the inputs of every task in `plan`.
pub fn resolve(ws: &Workspace, plan: &RunPlan, files: &FileList) -> Result<InputSets, InputError> {
    let workspace_globs = |pats: &[String]| PathGlobs::new("", pats).map_err(err("[workspace]"));
    let fingerprint = match_all(files, &workspace_globs(&ws.settings.fingerprint)?);
    let workspace = match_all(files, &workspace_globs(&ws.settings.inputs)?);

    // Output globs of every task, and an index from each output root directory to the tasks
    // producing under it, so a file only meets the producers whose roots contain it.
    let mut outputs = Vec::with_capacity(plan.tasks.len());
    let mut producers: HashMap<String, Vec<usize>> = HashMap::new();
    for (i, t) in plan.tasks.iter().enumerate() {
        let g = PathGlobs::new(&t.spec.project_dir, &t.spec.outputs).map_err(err(t.id.as_str()))?;
        for r in g.roots() {
            producers.entry(r.clone()).or_default().push(i);
        }
        outputs.push(g);
    }
    let project_dirs: Vec<&str> = ws.projects.iter().map(|p| p.dir.as_str()).collect();
    let mut upstream_cache: HashMap<usize, HashSet<usize>> = HashMap::new();
    let mut ws_pattern_cache: HashMap<Vec<String>, Vec<u32>> = HashMap::new();
    let mut out = InputSets { fingerprint, workspace, ..InputSets::default() };

    for (ti, t) in plan.tasks.iter().enumerate() {
        let project = ws.project(t.id.project());
        let def = project.and_then(|p| p.tasks.get(t.id.task()));
        let dir = t.spec.project_dir.as_str();
        let declared = def.and_then(|d| d.inputs.clone());
        let (ws_pats, proj_pats): (Vec<String>, Vec<String>) = match &declared {
            Some(p) => p.iter().cloned().partition(|p| p.trim_start_matches('!').starts_with("//")),
            None => (Vec::new(), vec![String::new()]),
        };
        let nested: Vec<&str> =
            project_dirs.iter().copied().filter(|d| *d != dir && is_within(d, dir)).collect();
        let mut selected: Vec<u32> = Vec::new();
        if !proj_pats.is_empty() {
            // Exclusions written as `!//x` apply here too.
            let mut pats = proj_pats.clone();
            pats.extend(ws_pats.iter().filter(|p| p.starts_with('!')).cloned());
            let globs = PathGlobs::new(dir, &pats).map_err(err(t.id.as_str()))?;
            let base = index_of_first(files, dir);
            for (k, f) in files.under(dir).iter().enumerate() {
                if globs.is_match(f) && !nested.iter().any(|n| is_within(f, n)) {
                    selected.push((base + k) as u32);
                }
            }
        }
        let ws_includes: Vec<String> =
            ws_pats.iter().filter(|p| !p.starts_with('!')).cloned().collect();
        if !ws_includes.is_empty() {
            let key = ws_pats.clone();
            let hits = match ws_pattern_cache.get(&key) {
                Some(h) => h.clone(),
                None => {
                    let g = PathGlobs::new(dir, &ws_pats).map_err(err(t.id.as_str()))?;
                    let h = match_all(files, &g);
                    ws_pattern_cache.insert(key, h.clone());
                    h
                }
            };
            selected.extend(hits);
            selected.sort_unstable();
            selected.dedup();
        }
        // Drop own outputs and upstream outputs.
        selected.retain(|&fi| {
            let f = &files.all()[fi as usize];
            let mut prefix = Some(f.as_str());
            while let Some(p) = prefix {
                if let Some(ps) = producers.get(p) {
                    for &u in ps {
                        let relevant =
                            u == ti || upstream_of(plan, ti, &mut upstream_cache).contains(&u);
                        if relevant && outputs[u].is_match(f) {
                            return false;
                        }
                    }
                }
                prefix = if p.is_empty() {
                    None
                } else {
                    Some(p.rsplit_once('/').map_or("", |(d, _)| d))
                };
            }
            true
        });
        if declared.is_some() && selected.is_empty() {
            out.matched_nothing.push(t.id.clone());
        }
        out.tasks.push(TaskInputs { files: selected, declared: declared.is_some() });
    }
    Ok(out)
}

fn err(task: &str) -> impl Fn(GlobError) -> InputError + '_ {
    move |source| InputError { task: task.to_owned(), source }
}

fn index_of_first(files: &FileList, dir: &str) -> usize {
    if dir.is_empty() {
        return 0;
    }
    let prefix = format!("{dir}/");
    files.all().partition_point(|f| f.as_str() < prefix.as_str())
}

fn match_all(files: &FileList, globs: &PathGlobs) -> Vec<u32> {
    if globs.is_empty() {
        return Vec::new();
    }
    let mut out = Vec::new();
    for root in globs.roots() {
        let base = index_of_first(files, root);
        // A root may be a file (a literal path) or a directory.
        if let Ok(i) = files.all().binary_search(root)
            && globs.is_match(root)
        {
            out.push(i as u32);
        }
        for (k, f) in files.under(root).iter().enumerate() {
            if globs.is_match(f) {
                out.push((base + k) as u32);
            }
        }
    }
    out.sort_unstable();
    out.dedup();
    out
}

/// The transitive dependencies of task `t` (memoised).
fn upstream_of<'a>(
    plan: &RunPlan,
    t: usize,
    cache: &'a mut HashMap<usize, HashSet<usize>>,
) -> &'a HashSet<usize> {
    cache.entry(t).or_insert_with(|| {
        let mut seen = HashSet::new();
        let mut stack = plan.tasks[t].deps.clone();
        while let Some(d) = stack.pop() {
            if seen.insert(d) {
                stack.extend(plan.tasks[d].deps.iter().copied());
            }
        }
        seen
    })
}
