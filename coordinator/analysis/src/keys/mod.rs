//! Cache keys (brief §5): file digests with a stat memo ([`digests`]), the canonical key
//! components and their fold (`prova_protocol::key`, shared with the farm), [`compute`],
//! which folds everything of every task's key that is known before anything runs, and
//! [`progressive`], which completes a key once its upstreams are resolved (a dependent folds
//! its upstreams' output fingerprints, and unless it is confined their keys too: early
//! cutoff only where nothing but the outputs can be read). [`binaries`] keys the programs a
//! command starts, read by [`shell`].

pub mod binaries;
/// File digests live below this module (trees fold them too); re-exported for callers.
pub use crate::digests;
pub mod progressive;
pub mod runtime;
pub mod shell;

use prova_protocol::Digest;
use prova_protocol::spec::CommandLine;

pub use digests::{DigestPass, FileFacts, Stamp};
pub use prova_protocol::key::{
    self as components, InputFile, InputKind, KEY_VERSION, KeyComponents, KeySalt,
};

use crate::inputs::{FileList, InputSets};
use crate::plan::RunPlan;
use crate::workspace::Workspace;

/// The keys of a plan.
#[derive(Clone, Debug, Default)]
pub struct PlanKeys {
    /// Per task: its key; `None` while an upstream it folds by outputs is unresolved
    /// ([`progressive`]).
    pub keys: Vec<Option<Digest>>,
    /// Per task: what the key folds (upstreams filled in once keyed).
    pub components: Vec<KeyComponents>,
    /// Per task: its input files' stamps at key time (rechecked before a save).
    pub stamps: Vec<Vec<(String, Stamp)>>,
    /// Per task (empty: none for any): where its command's program lookups found nothing
    /// executable ([`binaries::Programs::shadows`]), rechecked before a save.
    pub shadows: Vec<Vec<std::path::PathBuf>>,
    /// Workspace-wide files the keys fold in another form (a lockfile keyed per project by
    /// its resolved externals): not in any key's `workspace` list, but every exec root
    /// holds them, as it holds the workspace inputs.
    pub unfolded: Vec<InputFile>,
    /// Per task, the upstreams it folds by outputs and by key ([`progressive`]), computed
    /// once.
    pub closures: std::sync::OnceLock<std::sync::Arc<Vec<progressive::Closure>>>,
}

/// The platform string folded into non-portable keys.
pub fn platform() -> String {
    format!("{}/{}", std::env::consts::OS, std::env::consts::ARCH)
}

/// Folds what every task of `plan` keys on before anything runs, and keys, in dependency
/// order, the tasks whose upstreams are all folded by key (the others wait for
/// [`progressive`]). `env` reads the invoking environment;
/// declared env values are folded keyed by `salt`, the salt of the cache the keys are for
/// ([`components::env_value`]).
#[expect(
    clippy::too_many_arguments,
    reason = "the inputs of a key pass, each from its own step of prepare"
)]
pub fn compute(
    ws: &Workspace,
    plan: &RunPlan,
    files: &FileList,
    inputs: &InputSets,
    pass: &DigestPass,
    env: &dyn Fn(&str) -> Option<String>,
    salt: Option<&KeySalt>,
    trees: &[crate::trees::ScannedTree],
    programs: &std::collections::HashMap<usize, Vec<(String, String)>>,
) -> PlanKeys {
    let to_file = |i: &u32| -> Option<(InputFile, Stamp)> {
        let path = &files.all()[*i as usize];
        let f = pass.facts.get(path)?;
        Some((
            InputFile { path: path.clone(), kind: f.kind, exec: f.exec, digest: f.digest },
            f.stamp,
        ))
    };
    let mut workspace: Vec<(InputFile, Stamp)> =
        inputs.fingerprint.iter().chain(&inputs.workspace).filter_map(to_file).collect();
    workspace.sort_by(|a, b| a.0.path.cmp(&b.0.path));
    workspace.dedup_by(|a, b| a.0.path == b.0.path);
    // Workspace-wide files are rechecked before every task's save like its own inputs: a
    // lockfile rewritten while a task ran (an install inside a build) withholds its entry.
    let workspace_stamps: Vec<(String, Stamp)> =
        workspace.iter().map(|(f, s)| (f.path.clone(), *s)).collect();
    let workspace: Vec<InputFile> = workspace.into_iter().map(|(f, _)| f).collect();
    // A lockfile prova can read is folded per project (its resolved externals, as a config
    // pair) instead of whole; its stamps above still guard every save.
    let fingerprint: Vec<&str> =
        inputs.fingerprint.iter().map(|&i| files.all()[i as usize].as_str()).collect();
    let dirs: Vec<&str> = ws.projects.iter().map(|p| p.dir.as_str()).collect();
    // Memoised under the lockfile's digest (this pass's, through the stat memo): a warm run
    // neither reads nor parses an unchanged lockfile.
    let content =
        |path: &str| pass.facts.get(path).filter(|f| f.kind == InputKind::File).map(|f| f.digest);
    let memo_dir = ws.root.join(".prova").join("lockfiles");
    let memo = crate::lockfile::MemoSource { dir: &memo_dir, content: &content };
    let locks = crate::lockfile::Keyed::load_memoised(&ws.root, &fingerprint, &dirs, &memo);
    // Keyed per project, but still a file the task may read: exec roots hold it.
    let (keyed_locks, workspace): (Vec<InputFile>, Vec<InputFile>) =
        workspace.into_iter().partition(|f| locks.is_keyed(&f.path));

    let n = plan.tasks.len();
    let fold = Folding {
        ws,
        plan,
        env,
        salt,
        trees,
        programs,
        locks: &locks,
        // The projects each task reaches: their installed trees are the task's too. Only
        // read for a tree (a workspace without any is spared the walk of every closure).
        reach: if trees.is_empty() { Vec::new() } else { crate::trees::reach(ws, plan) },
        workspace: &workspace,
        entries: entries_on_disk(ws, plan, files, inputs, pass),
    };
    let mut components: Vec<Option<KeyComponents>> = vec![None; n];
    let mut stamps = vec![Vec::new(); n];
    for ti in topo(plan) {
        let mut files_in = Vec::new();
        if plan.tasks[ti].cacheable {
            stamps[ti].extend(workspace_stamps.iter().cloned());
        }
        for i in &inputs.tasks[ti].files {
            if let Some((f, s)) = to_file(i) {
                stamps[ti].push((f.path.clone(), s));
                files_in.push(f);
            }
        }
        components[ti] = Some(fold.components(ti, files_in));
    }
    let mut keys = PlanKeys {
        keys: vec![None; n],
        // The plan is acyclic (the graph module refuses cycles), so `topo` reached every
        // task; the fallback is never used.
        components: components.into_iter().map(|c| c.unwrap_or_else(empty_components)).collect(),
        stamps,
        shadows: Vec::new(),
        unfolded: keyed_locks,
        closures: Default::default(),
    };
    // Nothing is resolved yet: only keys whose upstreams are all folded by key.
    keys.settle_all(plan, &|_| None);
    keys
}

/// What every task's [`KeyComponents`] are folded from in one [`compute`] pass.
struct Folding<'a> {
    ws: &'a Workspace,
    plan: &'a RunPlan,
    env: &'a dyn Fn(&str) -> Option<String>,
    salt: Option<&'a KeySalt>,
    trees: &'a [crate::trees::ScannedTree],
    programs: &'a std::collections::HashMap<usize, Vec<(String, String)>>,
    locks: &'a crate::lockfile::Keyed,
    reach: Vec<Vec<String>>,
    workspace: &'a [InputFile],
    /// Per task, its project directory's entry names still on disk ([`entries_on_disk`]).
    entries: Vec<Option<Vec<String>>>,
}

/// Per task, the entry names of its project directory its key folds
/// ([`crate::inputs::TaskInputs::entries`]) less those gone from disk: a name is there when
/// the digest pass found a file at it or under it among the task's inputs (no system call),
/// else when it can be stat'ed ([`crate::inputs::scope::present`]).
fn entries_on_disk(
    ws: &Workspace,
    plan: &RunPlan,
    files: &FileList,
    inputs: &InputSets,
    pass: &DigestPass,
) -> Vec<Option<Vec<String>>> {
    inputs
        .tasks
        .iter()
        .enumerate()
        .map(|(ti, t)| {
            let names = t.entries.as_ref()?;
            let dir = plan.tasks[ti].spec.project_dir.as_str();
            let mine: Vec<&str> =
                t.files.iter().map(|&i| files.all()[i as usize].as_str()).collect();
            let (seen, unknown): (Vec<String>, Vec<String>) =
                names.iter().cloned().partition(|n| {
                    let path = prova_protocol::globs::join_rel(dir, n);
                    if pass.facts.contains_key(&path) {
                        return true;
                    }
                    // The task's inputs are sorted: those under `path/` are one run.
                    let prefix = format!("{path}/");
                    let from = mine.partition_point(|f| *f < prefix.as_str());
                    mine[from..]
                        .iter()
                        .take_while(|f| f.starts_with(&prefix))
                        .any(|f| pass.facts.contains_key(*f))
                });
            let mut out = seen;
            out.extend(crate::inputs::scope::present(&ws.root, dir, unknown));
            out.sort();
            Some(out)
        })
        .collect()
}

impl Folding<'_> {
    /// Task `ti`'s components before its upstreams are folded, with its input files.
    fn components(&self, ti: usize, inputs: Vec<InputFile>) -> KeyComponents {
        let t = &self.plan.tasks[ti];
        let def = self.plan.def(self.ws, ti);
        let mut env: Vec<(String, Option<Digest>)> = def
            .map(|d| {
                d.env
                    .iter()
                    .map(|k| {
                        (k.clone(), (self.env)(k).map(|v| components::env_value(self.salt, &v)))
                    })
                    .collect()
            })
            .unwrap_or_default();
        env.sort();
        env.dedup_by(|a, b| a.0 == b.0);
        let portable = def.is_some_and(|d| d.portable);
        KeyComponents {
            version: KEY_VERSION,
            task: t.id.to_string(),
            command: match &t.spec.command {
                CommandLine::Shell(s) if def.is_some_and(|d| d.command.is_some()) => {
                    format!("sh:{s}")
                }
                CommandLine::Argv(v) if def.is_some_and(|d| d.command.is_some()) => {
                    format!("argv:{}", v.join("\0"))
                }
                _ => "group".to_owned(),
            },
            config: self.config(ti),
            env,
            inputs,
            workspace: self.workspace.to_vec(),
            // Filled by `PlanKeys::settle`.
            upstream: Vec::new(),
            upstream_outputs: Vec::new(),
            args: t.spec.args.clone(),
            platform: (!portable).then(platform),
        }
    }

    /// Task `ti`'s config pairs: its settings, its runtime, the programs its command starts,
    /// its project's resolved externals and the installed trees it can resolve into.
    fn config(&self, ti: usize) -> Vec<(String, String)> {
        let def = self.plan.def(self.ws, ti);
        let mut c = config_pairs(def);
        c.extend(runtime::config_pairs(self.ws, def, self.salt));
        c.extend(self.programs.get(&ti).into_iter().flatten().cloned());
        // What a listing of its project directory sees (see `inputs::scope`).
        if let Some(Some(names)) = self.entries.get(ti) {
            let dir = self.plan.tasks[ti].spec.project_dir.as_str();
            c.push(components::entries_pair(dir, names));
        }
        if let Some(p) = self.ws.projects.get(self.plan.tasks[ti].project) {
            c.extend(self.locks.config_pairs(&p.dir));
            // Each installed tree the task can resolve into, by its manifest digest.
            // And what its links that lead out of the workspace lead to.
            for tr in self
                .trees
                .iter()
                .filter(|tr| crate::trees::visible_to_any(&tr.path, &self.reach[ti]))
            {
                c.push(crate::trees::key_pair(&tr.path, &tr.digest));
                c.extend(crate::trees::beyond_pair(tr));
            }
            c.sort();
        }
        c
    }
}

fn empty_components() -> KeyComponents {
    KeyComponents {
        version: KEY_VERSION,
        task: String::new(),
        command: String::new(),
        config: Vec::new(),
        env: Vec::new(),
        inputs: Vec::new(),
        workspace: Vec::new(),
        upstream: Vec::new(),
        upstream_outputs: Vec::new(),
        args: Vec::new(),
        platform: None,
    }
}

/// The hashable config of a task: what changes its outputs. Retries, `cache` and `pass_env`
/// do not (a pass-through variable is, by declaration, not something the outputs depend on).
fn config_pairs(def: Option<&crate::workspace::TaskDef>) -> Vec<(String, String)> {
    let Some(d) = def else { return Vec::new() };
    let mut v = vec![
        ("network".to_owned(), d.network.to_string()),
        ("outputs".to_owned(), d.outputs.join("\0")),
        ("persistent".to_owned(), d.persistent.to_string()),
        ("portable".to_owned(), d.portable.to_string()),
        (
            "timeout".to_owned(),
            d.timeout.map_or_else(|| "none".to_owned(), |t| t.as_millis().to_string()),
        ),
    ];
    // Labels pick the machines that may run it (a pool with a GPU, a toolchain): a task
    // placed by other labels is another action. Absent when empty, so keys of tasks without
    // labels are unchanged.
    if !d.labels.is_empty() {
        let labels: Vec<String> = d.labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
        v.push(("labels".to_owned(), labels.join("\0")));
    }
    v.sort();
    v
}

/// Task indices with every task after its deps ([`crate::graph::topo_sort`]).
fn topo(plan: &RunPlan) -> Vec<usize> {
    crate::graph::topo_sort(plan.tasks.len(), |i| &plan.tasks[i].deps)
}
