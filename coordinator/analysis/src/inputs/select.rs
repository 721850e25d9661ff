//! Each task's input files: its input globs (default: every file of its project) over the
//! workspace file list, minus files of nested projects, minus its own outputs and the
//! outputs of every task upstream of it — those are represented in the key by the upstream
//! task's key, which is what lets every key be computed before anything runs.
//!
//! Each task also gets an [`InputScope`] ([`super::scope`]): the same rules, kept so its
//! inputs can be listed again after it ran — a file that became one of its inputs meanwhile
//! means its key no longer holds (brief §6), which the stamps of the files it had cannot
//! show — and so a proof can judge what it touched. A task that declares `inputs` also gets
//! its project directory's entry names ([`TaskInputs::entries`]), which its key folds.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use prova_protocol::TaskId;
use prova_protocol::globs::{GlobError, PathGlobs, is_within};

use super::files::FileList;
pub use super::scope::InputScope;
use super::scope::{Own, ProjectOutputs, ScopeShared, entry_candidates};
use crate::plan::RunPlan;
use crate::workspace::Workspace;

/// One task's inputs.
#[derive(Clone, Debug, Default)]
pub struct TaskInputs {
    /// Indices into the run's [`FileList`], ascending.
    pub files: Vec<u32>,
    /// Whether the task declared `inputs` (rather than the whole-project default).
    pub declared: bool,
    /// A task that declared `inputs`: the entry names of its project directory the file
    /// list gives, less the outputs of its project's tasks (sorted). Its key folds those
    /// still on disk ([`super::scope::present`]); see [`super::scope`].
    pub entries: Option<Vec<String>>,
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
    /// `[workspace] fingerprint` patterns that match no listed file, with where each was
    /// written: folded as absent (the key changes when the file appears), warned about.
    pub fingerprint_unmatched: Vec<(String, String)>,
    /// Per plan task: how to list its inputs again (see [`InputScope`]).
    pub scopes: Vec<InputScope>,
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
    let everyone =
        [workspace_globs(&ws.settings.fingerprint)?, workspace_globs(&ws.settings.inputs)?];
    let mut out = InputSets {
        fingerprint: match_all(files, &everyone[0]),
        workspace: match_all(files, &everyone[1]),
        fingerprint_unmatched: unmatched_fingerprints(ws, files)?,
        ..InputSets::default()
    };
    let (outputs, producers) = output_index(plan)?;
    let mut project_dirs: Vec<&str> = ws.projects.iter().map(|p| p.dir.as_str()).collect();
    project_dirs.sort_unstable();
    let mut r = Resolver {
        ws,
        plan,
        files,
        project_dirs,
        outputs: &outputs,
        producers,
        upstream: HashMap::new(),
        ws_patterns: HashMap::new(),
        project_outputs: HashMap::new(),
    };
    let mut scopes = Vec::with_capacity(plan.tasks.len());
    for ti in 0..plan.tasks.len() {
        let (inputs, scope) = r.task(ti)?;
        if inputs.declared && inputs.files.is_empty() {
            out.matched_nothing.push(plan.tasks[ti].id.clone());
        }
        out.tasks.push(inputs);
        scopes.push(scope);
    }
    let lockfiles = out
        .fingerprint
        .iter()
        .map(|&i| files.all()[i as usize].clone())
        .filter(|p| crate::lockfile::is_lockfile(p))
        .collect();
    let shared = Arc::new(ScopeShared {
        source: files.source,
        nested_repos: files.nested_repos.clone(),
        listed: files.as_made(),
        everyone,
        outputs,
        deps: plan.tasks.iter().map(|t| t.deps.clone()).collect(),
        direct: plan.tasks.iter().map(crate::plan::direct_only).collect(),
        groups: plan.tasks.iter().map(|t| t.kind == crate::plan::TaskKind::Group).collect(),
        ids: plan.tasks.iter().map(|t| t.id.to_string()).collect(),
        confined: plan.tasks.iter().map(crate::plan::confined).collect(),
        own: scopes,
        lockfiles,
    });
    out.scopes = (0..plan.tasks.len()).map(|i| InputScope::new(i, Arc::clone(&shared))).collect();
    Ok(out)
}

/// `[workspace] fingerprint` patterns (not exclusions) that match no listed file, with where
/// each was written.
fn unmatched_fingerprints(
    ws: &Workspace,
    files: &FileList,
) -> Result<Vec<(String, String)>, InputError> {
    let mut unmatched = Vec::new();
    for (i, p) in ws.settings.fingerprint.iter().enumerate() {
        if p.starts_with('!') {
            continue;
        }
        let one = PathGlobs::new("", std::slice::from_ref(p)).map_err(err("[workspace]"))?;
        if match_all(files, &one).is_empty() {
            let at = ws.settings.fingerprint_at.get(i).cloned().unwrap_or_default();
            unmatched.push((p.clone(), at));
        }
    }
    Ok(unmatched)
}

/// Output globs of every task, and an index from each output root directory to the tasks
/// producing under it, so a file only meets the producers whose roots contain it.
type OutputIndex = (Vec<PathGlobs>, HashMap<String, Vec<usize>>);

fn output_index(plan: &RunPlan) -> Result<OutputIndex, InputError> {
    let mut outputs = Vec::with_capacity(plan.tasks.len());
    let mut producers: HashMap<String, Vec<usize>> = HashMap::new();
    for (i, t) in plan.tasks.iter().enumerate() {
        let g = PathGlobs::new(&t.spec.project_dir, &t.spec.outputs).map_err(err(t.id.as_str()))?;
        for r in g.roots() {
            producers.entry(r.clone()).or_default().push(i);
        }
        outputs.push(g);
    }
    Ok((outputs, producers))
}

/// What [`resolve`] keeps across tasks: the indices and memos of one run.
struct Resolver<'a> {
    ws: &'a Workspace,
    plan: &'a RunPlan,
    files: &'a FileList,
    /// Every project directory, sorted.
    project_dirs: Vec<&'a str>,
    outputs: &'a [PathGlobs],
    producers: HashMap<String, Vec<usize>>,
    /// Transitive dependencies per task (memo of [`upstream_of`]).
    upstream: HashMap<usize, HashSet<usize>>,
    /// The files a set of `//` patterns matched, and its globs, by the patterns.
    ws_patterns: HashMap<Vec<String>, (Vec<u32>, Arc<PathGlobs>)>,
    /// Memo of [`Self::project_outputs`], by project index.
    project_outputs: HashMap<usize, Arc<ProjectOutputs>>,
}

impl Resolver<'_> {
    /// Task `ti`'s inputs and scope.
    fn task(&mut self, ti: usize) -> Result<(TaskInputs, Own), InputError> {
        let t = &self.plan.tasks[ti];
        let dir = t.spec.project_dir.as_str();
        let declared = self.plan.def(self.ws, ti).and_then(|d| d.inputs.clone());
        let (ws_pats, proj_pats): (Vec<String>, Vec<String>) = match &declared {
            Some(p) => p.iter().cloned().partition(|p| p.trim_start_matches('!').starts_with("//")),
            None => (Vec::new(), vec![String::new()]),
        };
        let nested = nested_in(&self.project_dirs, dir);
        let mut selected: Vec<u32> = Vec::new();
        let mut project = None;
        if !proj_pats.is_empty() {
            // Exclusions written as `!//x` apply here too.
            let mut pats = proj_pats;
            pats.extend(ws_pats.iter().filter(|p| p.starts_with('!')).cloned());
            let globs = PathGlobs::new(dir, &pats).map_err(err(t.id.as_str()))?;
            let base = index_of_first(self.files, dir);
            for (k, f) in self.files.under(dir).iter().enumerate() {
                if globs.is_match(f) && !nested.iter().any(|n| is_within(f, n)) {
                    selected.push((base + k) as u32);
                }
            }
            project = Some(globs);
        }
        let workspace = self.workspace_patterns(ti, ws_pats, &mut selected)?;
        let manifests = self.upstream_manifests(ti, &mut selected);
        self.drop_outputs(ti, &mut selected);
        let outputs = self.project_outputs(t.project)?;
        let added = &self.files.added;
        let entries = declared.is_some().then(|| {
            entry_candidates(self.files.under(dir), dir, |f| {
                outputs.comes_and_goes(f) || added.binary_search_by(|a| a.as_str().cmp(f)).is_ok()
            })
        });
        let scope = Own {
            dir: dir.to_owned(),
            project,
            nested: nested.iter().map(|n| (*n).to_owned()).collect(),
            workspace,
            manifests,
            names: entries.clone(),
            outputs,
        };
        let inputs = TaskInputs { files: selected, declared: declared.is_some(), entries };
        Ok((inputs, scope))
    }

    /// Adds the files task `ti`'s `//` patterns match to `selected`; their globs, if the task
    /// has any pattern that is not an exclusion. Tasks with the same patterns share the match.
    fn workspace_patterns(
        &mut self,
        ti: usize,
        ws_pats: Vec<String>,
        selected: &mut Vec<u32>,
    ) -> Result<Option<Arc<PathGlobs>>, InputError> {
        if ws_pats.iter().all(|p| p.starts_with('!')) {
            return Ok(None);
        }
        let (hits, g) = match self.ws_patterns.get(&ws_pats) {
            Some(h) => h.clone(),
            None => {
                let t = &self.plan.tasks[ti];
                let g =
                    PathGlobs::new(&t.spec.project_dir, &ws_pats).map_err(err(t.id.as_str()))?;
                let h = (match_all(self.files, &g), Arc::new(g));
                self.ws_patterns.insert(ws_pats, h.clone());
                h
            }
        };
        selected.extend(hits);
        selected.sort_unstable();
        selected.dedup();
        Ok(Some(g))
    }

    /// A JS project's task resolves each workspace package it depends on through that
    /// package's `package.json` (`main`, `types`, `exports`): an input of the task, wherever
    /// it lies. Adds them to `selected` and returns their paths.
    fn upstream_manifests(&mut self, ti: usize, selected: &mut Vec<u32>) -> Vec<String> {
        let dir = self.plan.tasks[ti].spec.project_dir.as_str();
        let mut manifests = Vec::new();
        if self.files.all().binary_search(&manifest_in(dir)).is_err() {
            return manifests;
        }
        let plan = self.plan;
        let mut dirs: Vec<&str> = upstream_of(plan, ti, &mut self.upstream)
            .iter()
            .map(|&u| plan.tasks[u].spec.project_dir.as_str())
            .filter(|d| *d != dir)
            .collect();
        dirs.sort_unstable();
        dirs.dedup();
        for d in dirs {
            let m = manifest_in(d);
            if let Ok(i) = self.files.all().binary_search(&m) {
                selected.push(i as u32);
                manifests.push(m);
            }
        }
        selected.sort_unstable();
        selected.dedup();
        manifests
    }

    /// The outputs of every task of project `p` (in the workspace, not only this plan): the
    /// files that come and go with runs, left out of its entry names.
    fn project_outputs(&mut self, p: usize) -> Result<Arc<ProjectOutputs>, InputError> {
        if let Some(g) = self.project_outputs.get(&p) {
            return Ok(Arc::clone(g));
        }
        let project = &self.ws.projects[p];
        let mut pats: Vec<String> =
            project.tasks.values().flat_map(|d| d.outputs.iter().cloned()).collect();
        pats.sort();
        pats.dedup();
        let g = Arc::new(ProjectOutputs::new(&project.dir, &pats).map_err(err(&project.name))?);
        self.project_outputs.insert(p, Arc::clone(&g));
        Ok(g)
    }

    /// Drops from `selected` the outputs of task `ti` and of every task upstream of it.
    fn drop_outputs(&mut self, ti: usize, selected: &mut Vec<u32>) {
        let files = self.files;
        selected.retain(|&fi| !self.is_dropped(ti, &files.all()[fi as usize]));
    }

    /// Whether file `f` is an output of task `ti` or of a task upstream of it.
    fn is_dropped(&mut self, ti: usize, f: &str) -> bool {
        let mut prefix = Some(f);
        while let Some(p) = prefix {
            for &u in self.producers.get(p).into_iter().flatten() {
                let relevant =
                    u == ti || upstream_of(self.plan, ti, &mut self.upstream).contains(&u);
                if relevant && self.outputs[u].is_match(f) {
                    return true;
                }
            }
            prefix =
                if p.is_empty() { None } else { Some(p.rsplit_once('/').map_or("", |(d, _)| d)) };
        }
        false
    }
}

/// The `package.json` path of project directory `dir`.
fn manifest_in(dir: &str) -> String {
    if dir.is_empty() { "package.json".to_owned() } else { format!("{dir}/package.json") }
}

fn err(task: &str) -> impl Fn(GlobError) -> InputError + '_ {
    move |source| InputError { task: task.to_owned(), source }
}

/// Project dirs strictly inside `dir`, from the sorted `dirs` (a contiguous run after `dir/`).
fn nested_in<'a>(dirs: &[&'a str], dir: &str) -> Vec<&'a str> {
    if dir.is_empty() {
        return dirs.iter().copied().filter(|d| !d.is_empty()).collect();
    }
    let prefix = format!("{dir}/");
    let start = dirs.partition_point(|d| *d < prefix.as_str());
    dirs[start..].iter().copied().take_while(|d| d.starts_with(&prefix)).collect()
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
