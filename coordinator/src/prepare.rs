//! Everything a run computes before its first task starts: the plan, the workspace file list,
//! each task's inputs, file digests (through the stat memo) and every task's key. The same
//! code serves local mode and a farm client (brief §4: the client computes every key).

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use prova_protocol::task::OwnedTask;
use prova_protocol::{Digest, TaskId};

use crate::cache::{CacheError, CacheThread};
use crate::graph::TaskGraph;
use crate::inputs::{self, FileList, InputSets};
use crate::keys::{self, PlanKeys};
use crate::plan::RunPlan;
use crate::workspace::Workspace;

/// Preparing a run failed.
#[derive(Debug, thiserror::Error)]
pub enum PrepareError {
    /// The file list could not be made.
    #[error(transparent)]
    Files(#[from] inputs::files::FilesError),
    /// A glob is bad.
    #[error(transparent)]
    Inputs(#[from] inputs::select::InputError),
    /// The cache failed.
    #[error(transparent)]
    Cache(#[from] CacheError),
    /// An installed tree could not be scanned.
    #[error(transparent)]
    Trees(#[from] crate::trees::TreeScanError),
}

/// Counters of the key pass, for `--json` and `-v`.
#[derive(Clone, Copy, Debug, Default, serde::Serialize)]
pub struct KeyStats {
    /// Files in the workspace list.
    pub files: usize,
    /// Files whose bytes were read.
    pub hashed: usize,
    /// Files answered by the stat memo.
    pub memo_hits: usize,
    /// Milliseconds spent enumerating, hashing and folding.
    pub elapsed_ms: u64,
}

/// What one task's exec root holds, from the workspace ([`Prepared::exec_root_inputs`]).
#[derive(Clone, Debug, Default)]
pub struct ExecRootInputs {
    /// Its input files and installed trees, sorted by path.
    pub inputs: Vec<prova_protocol::wire::InputRef>,
    /// The entries shown by name only (`TaskSpec::stand_ins`).
    pub stand_ins: Vec<prova_protocol::spec::StandIn>,
}

/// A plan with its keys.
#[derive(Clone, Debug)]
pub struct Prepared {
    /// The resolved tasks.
    pub plan: RunPlan,
    /// Every task's key and components.
    pub keys: PlanKeys,
    /// Tasks whose declared inputs match nothing.
    pub matched_nothing: Vec<TaskId>,
    /// `fingerprint` patterns that match no file, with where each was written.
    pub fingerprint_unmatched: Vec<(String, String)>,
    /// Recorded durations by task id (ms), for critical-path weights.
    pub durations: HashMap<String, u64>,
    /// Key pass counters.
    pub stats: KeyStats,
    /// The workspace's files (an undeclared read only counts when the path exists).
    pub files: std::sync::Arc<FileList>,
    /// Whether the keys fold declared env values keyed by a salt (`false`: no cache yet, so
    /// an env-declaring task's key moves once the first run makes one).
    pub salted: bool,
    /// Each task's input rules, by task id: for the local layer's recheck before a save
    /// ([`crate::layers::LocalLayer::with_input_scopes`]).
    pub input_scopes: std::sync::Arc<HashMap<String, inputs::InputScope>>,
    /// The workspace's installed trees ([`crate::trees`]), sorted by path.
    pub trees: Vec<crate::trees::ScannedTree>,
    /// By task: what its command may start that no key folds, in words
    /// ([`keys::binaries::Programs::unkeyed`]; shown by `prova why` and `prova show`).
    pub unkeyed_programs: HashMap<usize, Vec<String>>,
    /// By task: the words its command looks up on its `PATH` that are found nowhere there
    /// ([`keys::binaries::Programs::absent`]): a farm worker must not find them either.
    pub absent_programs: HashMap<usize, Vec<String>>,
    /// The files among each task's outputs that no clean or restore may delete, by task id
    /// ([`inputs::protect`]).
    pub protected: std::sync::Arc<inputs::protect::Protected>,
}

impl Prepared {
    /// The key of task `i`; `None` while an upstream it folds by outputs is unresolved
    /// ([`crate::keys::progressive`]).
    pub fn key(&self, i: usize) -> Option<Digest> {
        self.keys.key(i)
    }

    /// What each task's exec root holds ([`ExecRootInputs`]): its input files (path, digest,
    /// exec bit, and a symlink's target read from the workspace at `root`), sorted by path —
    /// its inputs, the workspace inputs, the workspace files folded per project (a
    /// lockfile), the installed trees its key folds (`tree` set, the manifest's digest), and
    /// the inputs of every upstream whose key its key folds ([`crate::plan::keyed_upstreams`]:
    /// in place it can read them, and does: `tsc` resolving a project reference reads the
    /// referenced project's sources) — and its stand-ins: the entries its key folds by name
    /// only — of its project directory, and of each such upstream's
    /// (`KeyComponents::entries`) — that none of those inputs lies at or in, each a directory
    /// where the file list has files below it (the names came from that list), else a file.
    pub fn exec_root_inputs(&self, root: &std::path::Path) -> Vec<ExecRootInputs> {
        use prova_protocol::key::InputKind;
        let comps = &self.keys.components;
        // Each task's own names, joined once: a task's upstreams share them.
        let names: Vec<Vec<prova_protocol::spec::StandIn>> = comps
            .iter()
            .map(|c| {
                let Some((dir, names)) = c.entries() else { return Vec::new() };
                names
                    .into_iter()
                    .map(|n| {
                        let path = prova_protocol::globs::join_rel(dir, n);
                        let dir = !self.files.under(&path).is_empty();
                        prova_protocol::spec::StandIn { path, dir }
                    })
                    .collect()
            })
            .collect();
        comps
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let trees = self.trees.iter().filter(|t| {
                    let pair = crate::trees::key_pair(&t.path, &t.digest);
                    c.config.contains(&pair)
                });
                let upstream = crate::plan::keyed_upstreams(&self.plan.tasks, i);
                // By reference first: upstreams share files (every project's manifests of
                // its upstreams), so only the distinct ones are copied.
                let mut files: Vec<_> = c
                    .inputs
                    .iter()
                    .chain(upstream.iter().flat_map(|&u| &comps[u].inputs))
                    .chain(&c.workspace)
                    .chain(&self.keys.unfolded)
                    .collect();
                files.sort_by(|a, b| a.path.cmp(&b.path));
                files.dedup_by(|a, b| a.path == b.path);
                let mut inputs: Vec<prova_protocol::wire::InputRef> = files
                    .into_iter()
                    .map(|f| prova_protocol::wire::InputRef {
                        path: f.path.clone(),
                        digest: f.digest,
                        exec: f.exec,
                        symlink: (f.kind == InputKind::Symlink)
                            .then(|| crate::keys::digests::link_target(root, &f.path).ok())
                            .flatten()
                            .and_then(|t| t.to_str().map(str::to_owned)),
                        tree: false,
                    })
                    .chain(trees.map(|t| prova_protocol::wire::InputRef {
                        path: t.path.clone(),
                        digest: t.digest,
                        exec: false,
                        symlink: None,
                        tree: true,
                    }))
                    .collect();
                inputs.sort_by(|a, b| a.path.cmp(&b.path));
                inputs.dedup_by(|a, b| a.path == b.path);
                let holds = |p: &str| {
                    // Sorted: a path at or in `p` sorts among those `p` begins.
                    let from = inputs.partition_point(|r| r.path.as_str() < p);
                    inputs[from..]
                        .iter()
                        .take_while(|r| r.path.starts_with(p))
                        .any(|r| prova_protocol::globs::is_within(&r.path, p))
                };
                let mut stand_ins: Vec<prova_protocol::spec::StandIn> = std::iter::once(i)
                    .chain(upstream.iter().copied())
                    .flat_map(|t| &names[t])
                    .filter(|s| !holds(&s.path))
                    .cloned()
                    .collect();
                // Tasks of one project fold the same names.
                stand_ins.sort_by(|a, b| a.path.cmp(&b.path));
                stand_ins.dedup_by(|a, b| a.path == b.path);
                ExecRootInputs { inputs, stand_ins }
            })
            .collect()
    }

    /// The installed trees each task's key folds, by task id.
    pub fn tree_paths(&self) -> HashMap<String, Vec<String>> {
        self.plan
            .tasks
            .iter()
            .zip(&self.keys.components)
            .map(|(t, c)| {
                let trees = c
                    .config
                    .iter()
                    .filter_map(|(k, _)| {
                        k.strip_prefix(crate::trees::KEY_PREFIX).map(str::to_owned)
                    })
                    .collect();
                (t.id.to_string(), trees)
            })
            .collect()
    }

    /// The workspace as the inputs proof judges a traced run of this plan against it.
    pub fn workspace_view(&self, ws: &Workspace) -> WorkspaceView {
        let installed = self
            .trees
            .iter()
            .map(|t| {
                let project = crate::trees::holder_project(&ws.projects, &t.path);
                (t.path.clone(), project.map(str::to_owned))
            })
            .collect();
        WorkspaceView {
            root: ws.root.clone(),
            files: self.files.clone(),
            scopes: self.input_scopes.clone(),
            trees: std::sync::Arc::new(self.tree_paths()),
            installed: std::sync::Arc::new(installed),
        }
    }

    /// Fills every planned task's `inputs` (what its exec root holds) and its spec's
    /// `stand_ins` ([`Self::exec_root_inputs`]).
    pub fn fill_inputs(&mut self, root: &std::path::Path) {
        for (i, r) in self.exec_root_inputs(root).into_iter().enumerate() {
            self.plan.tasks[i].spec.stand_ins = r.stand_ins;
            self.plan.tasks[i].inputs = r.inputs;
        }
    }

    /// Critical-path weights: recorded durations, 1 ms when unknown.
    pub fn weights(&self) -> Vec<u64> {
        self.plan
            .tasks
            .iter()
            .map(|t| self.durations.get(t.id.as_str()).copied().unwrap_or(1).max(1))
            .collect()
    }
}

/// The workspace's file list, started before [`prepare`] by a caller that has other
/// work first (a run loads its workspace, opens its cache): the listing — `git ls-files`, a
/// process, the longest wait of a warm run — overlaps it. Start it only once the workspace
/// lock is held, as `prepare` would: it must see the files the previous writer left.
pub struct Listing {
    task: OwnedTask<Result<FileList, inputs::files::FilesError>>,
    /// The workspace root listed.
    root: std::path::PathBuf,
    /// The nested repositories listed on their own.
    nested: Vec<String>,
    /// Installed trees walked for their stamps beside it (`crate::trees::prewalk`).
    trees: Option<OwnedTask<Result<crate::trees::Prewalked, crate::trees::TreeScanError>>>,
}

impl Listing {
    /// Starts listing `ws`'s files on `rt`'s blocking pool.
    pub fn start(rt: &tokio::runtime::Handle, ws: &Workspace) -> Listing {
        Self::start_at(rt, ws.root.clone(), nested_repos(ws))
    }

    /// Starts listing the files of the workspace at `root` before it is loaded (its projects,
    /// so its nested repositories, not known yet: `nested` are listed on their own). Whether
    /// the list is the loaded workspace's: [`Listing::fits`].
    pub fn start_at(
        rt: &tokio::runtime::Handle,
        root: std::path::PathBuf,
        nested: Vec<String>,
    ) -> Listing {
        let (r, n) = (root.clone(), nested.clone());
        let task = OwnedTask::spawn_blocking_on(rt, "prepare.enumerate", move || {
            inputs::enumerate(&r, &n)
        });
        Listing { task, root, nested, trees: None }
    }

    /// Also walks the installed trees at `dirs` (workspace paths) for their stamps, beside
    /// the list: the workspace's trees are known only once it is loaded, and a tree walked
    /// here that is not one of them is left unused.
    pub fn with_trees(mut self, rt: &tokio::runtime::Handle, dirs: Vec<String>) -> Listing {
        if !dirs.is_empty() {
            let root = self.root.clone();
            self.trees = Some(OwnedTask::spawn_blocking_on(rt, "prepare.prewalk", move || {
                crate::trees::prewalk(&root, &root.join(".prova").join("trees"), dirs)
            }));
        }
        self
    }

    /// Whether this is the list [`Listing::start`] would make for `ws`: the same root and
    /// the same nested repositories.
    pub fn fits(&self, ws: &Workspace) -> bool {
        self.root == ws.root && self.nested == nested_repos(ws)
    }
}

/// Builds the plan for `graph` and keys it, reading and refreshing the digest memo in `cache`.
/// Declared env values are keyed by `salt` — the farm's for a remote run — or, when `None`,
/// by `cache`'s own salt (brief §5: the keys are the keys of the cache they are probed in).
/// The file list is `listing`'s when a caller started one, else made here.
pub async fn prepare(
    ws: &Workspace,
    graph: &TaskGraph,
    args: &[String],
    env: &(dyn Fn(&str) -> Option<String> + Sync),
    cache: &CacheThread,
    salt: Option<keys::KeySalt>,
    listing: Option<Listing>,
) -> Result<Prepared, PrepareError> {
    let started = Instant::now();
    let plan = RunPlan::new(ws, graph, args, env);
    let scope = ws.root.to_string_lossy().into_owned();
    let memo_scope = scope.clone();
    // Taken before any file is read: a memo row stamped with it never claims a later moment
    // than its read (the racy-stat rule then errs towards hashing again).
    let now_ns = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos() as i64);
    let dirs: Vec<&str> = ws.projects.iter().map(|p| p.dir.as_str()).collect();
    let tree_dirs = crate::trees::tree_dirs(&ws.root, ws.settings.trees.as_deref(), &dirs);
    // What does not depend on the file list runs beside `git ls-files` (a process, the
    // largest wait of a warm run): the cache's reads, the installed trees' walk and the
    // programs' lookup.
    // One job on the cache thread for the three reads: each call is a hop between threads.
    let stored = async {
        let (memo, salt, durations) = cache
            .call(move |s| {
                let memo = s.memo_load(&memo_scope)?;
                let salt = match salt {
                    Some(salt) => Some(salt),
                    None => s.key_salt()?,
                };
                Ok::<_, CacheError>((memo, salt, s.durations()?))
            })
            .await??;
        Ok::<_, PrepareError>((memo, salt, durations))
    };
    // A list started before the workspace was loaded holds only if it is this workspace's
    // (the same root, the same nested repositories); trees walked beside it, if the root is.
    let (early_list, prewalked) = match listing {
        Some(l) if l.root == ws.root => {
            let fits = l.fits(ws);
            (fits.then_some(l.task), l.trees)
        }
        _ => (None, None),
    };
    let listed = async {
        let files = match early_list {
            Some(task) => listed_files(task).await?,
            None => enumerate_files(ws).await?,
        };
        tracing::info!(elapsed = ?started.elapsed(), files = files.len(), "files enumerated");
        Ok::<_, PrepareError>(files)
    };
    let trees = async {
        let tree_pass = scan_trees(ws, cache, now_ns, tree_dirs.clone(), prewalked).await?;
        tracing::info!(
            elapsed = ?started.elapsed(),
            trees = tree_pass.trees.len(),
            hashed = tree_pass.hashed,
            memo_hits = tree_pass.memo_hits,
            "installed trees"
        );
        Ok::<_, PrepareError>(tree_pass)
    };
    let programs = program_pairs(ws, &plan, env, cache, now_ns);
    let ((memo, salt, durations), files, tree_pass, programs) =
        tokio::try_join!(stored, listed, trees, programs)?;

    let files = with_unlisted_inputs(ws, &plan, files, &tree_dirs);
    let sets: InputSets = inputs::resolve(ws, &plan, &files)?;
    let protected = inputs::protect::protected(ws, &plan, &files)?;
    tracing::info!(elapsed = ?started.elapsed(), "inputs resolved");
    let pass = digest_inputs(ws, &files, &sets, memo, now_ns).await?;
    tracing::info!(elapsed = ?started.elapsed(), hashed = pass.hashed, memo_hits = pass.memo_hits, "digests");
    let mut plan_keys = keys::compute(
        ws,
        &plan,
        &files,
        &sets,
        &pass,
        env,
        salt.as_ref(),
        &tree_pass.trees,
        &programs.pairs,
    );
    tracing::info!(elapsed = ?started.elapsed(), "keys computed");
    let mut shadows = programs.shadows;
    if !shadows.is_empty() {
        plan_keys.shadows =
            (0..plan.tasks.len()).map(|ti| shadows.remove(&ti).unwrap_or_default()).collect();
    }
    if !pass.updates.is_empty() {
        let updates = pass.updates.clone();
        cache.call(move |s| s.memo_store(&scope, &updates)).await??;
    }
    let stats = KeyStats {
        files: files.len(),
        hashed: pass.hashed,
        memo_hits: pass.memo_hits,
        elapsed_ms: started.elapsed().as_millis() as u64,
    };
    let input_scopes =
        std::sync::Arc::new(plan.tasks.iter().map(|t| t.id.to_string()).zip(sets.scopes).collect());
    Ok(Prepared {
        protected: std::sync::Arc::new(protected),
        trees: tree_pass.trees,
        unkeyed_programs: programs.unkeyed,
        absent_programs: programs.absent,
        salted: salt.is_some(),
        input_scopes,
        plan,
        keys: plan_keys,
        matched_nothing: sets.matched_nothing,
        fingerprint_unmatched: sets.fingerprint_unmatched,
        durations,
        stats,
        files: std::sync::Arc::new(files),
    })
}

/// Lists the workspace's files (off the runtime: a walk or `git ls-files`).
async fn enumerate_files(ws: &Workspace) -> Result<FileList, PrepareError> {
    let root = ws.root.clone();
    let nested = nested_repos(ws);
    listed_files(OwnedTask::spawn_blocking("prepare.enumerate", move || {
        inputs::enumerate(&root, &nested)
    }))
    .await
}

/// The file list a listing task made.
async fn listed_files(
    task: OwnedTask<Result<FileList, inputs::files::FilesError>>,
) -> Result<FileList, PrepareError> {
    let files = task.join().await.map_err(|e| inputs::files::FilesError::Walk {
        dir: String::new(),
        message: e.to_string(),
    })??;
    Ok(files)
}

/// Digests every file some task or the workspace folds (off the runtime), through the
/// stat-keyed `memo`.
async fn digest_inputs(
    ws: &Workspace,
    files: &FileList,
    sets: &InputSets,
    memo: std::collections::HashMap<String, crate::cache::MemoRow>,
    now_ns: i64,
) -> Result<keys::digests::DigestPass, PrepareError> {
    let mut needed: Vec<u32> = sets.tasks.iter().flat_map(|t| t.files.iter().copied()).collect();
    needed.extend(&sets.fingerprint);
    needed.extend(&sets.workspace);
    needed.sort_unstable();
    needed.dedup();
    let paths: Vec<String> = needed.iter().map(|&i| files.all()[i as usize].clone()).collect();
    let root = ws.root.clone();
    let pass = OwnedTask::spawn_blocking("prepare.digest", move || {
        let refs: Vec<&str> = paths.iter().map(String::as_str).collect();
        keys::digests::digest_files(&root, &refs, &memo, now_ns)
    })
    .join()
    .await
    .map_err(|e| inputs::files::FilesError::Walk { dir: String::new(), message: e.to_string() })?;
    Ok(pass)
}

/// What the programs a plan's commands start contribute ([`keys::binaries`]).
#[derive(Default)]
struct ProgramPass {
    /// By task: the `binary:<word>` config pairs (path and digest, memoised by stat in the
    /// cache's memo).
    pairs: HashMap<usize, Vec<(String, String)>>,
    /// By task: what is not keyed, in words.
    unkeyed: HashMap<usize, Vec<String>>,
    /// By task: where its lookups passed over nothing executable
    /// ([`keys::binaries::Programs::shadows`]).
    shadows: HashMap<usize, Vec<PathBuf>>,
    /// By task: the words found nowhere on its `PATH` ([`keys::binaries::Programs::absent`]).
    absent: HashMap<usize, Vec<String>>,
}

/// The default runtime input of every task whose command starts programs outside the
/// workspace ([`keys::binaries`]). Nothing with `[workspace] runtime_binary = false`.
async fn program_pairs(
    ws: &Workspace,
    plan: &RunPlan,
    env: &(dyn Fn(&str) -> Option<String> + Sync),
    cache: &CacheThread,
    now_ns: i64,
) -> Result<ProgramPass, PrepareError> {
    use keys::binaries;
    if !ws.settings.runtime_binary {
        return Ok(ProgramPass::default());
    }
    let path_var = env("PATH");
    let commands: Vec<(usize, PathBuf, prova_protocol::spec::CommandLine)> = plan
        .tasks
        .iter()
        .enumerate()
        .filter(|&(ti, _)| plan.def(ws, ti).is_some_and(|d| d.command.is_some() && !d.portable))
        .map(|(ti, t)| (ti, ws.root.join(&t.spec.project_dir), t.spec.command.clone()))
        .collect();
    let root = ws.root.clone();
    // Reading a command and resolving what it starts stats files: on the blocking pool, each
    // distinct (directory, command) once.
    let found: Vec<(usize, binaries::Programs)> =
        OwnedTask::spawn_blocking("prepare.programs", move || {
            let started = Instant::now();
            let mut resolver = binaries::Resolver::new(&root);
            let mut seen: HashMap<(PathBuf, String), binaries::Programs> = HashMap::new();
            let found: Vec<_> = commands
                .into_iter()
                .map(|(ti, cwd, command)| {
                    let id = (cwd.clone(), format!("{command:?}"));
                    let p = seen
                        .entry(id)
                        .or_insert_with(|| resolver.programs(&cwd, &command, path_var.as_deref()));
                    (ti, p.clone())
                })
                .collect();
            tracing::debug!(elapsed = ?started.elapsed(), commands = found.len(), "programs resolved");
            found
        })
        .join()
        .await
        .map_err(|e| inputs::files::FilesError::Walk {
            dir: String::new(),
            message: e.to_string(),
        })?;
    let mut paths: Vec<PathBuf> =
        found.iter().flat_map(|(_, p)| p.found.iter().map(|(_, path)| path.clone())).collect();
    paths.sort();
    paths.dedup();
    let mut pass = ProgramPass::default();
    for (ti, p) in &found {
        if !p.unkeyed.is_empty() {
            pass.unkeyed.insert(*ti, p.unkeyed.clone());
        }
        if !p.shadows.is_empty() {
            pass.shadows.insert(*ti, p.shadows.clone());
        }
        if !p.absent.is_empty() {
            pass.absent.insert(*ti, p.absent.clone());
        }
    }
    if paths.is_empty() {
        return Ok(pass);
    }
    let names: Vec<String> = paths.iter().map(|p| p.to_string_lossy().into_owned()).collect();
    let memo = cache.call(move |s| s.memo_get(binaries::SCOPE, &names)).await??;
    let (digests, store) = OwnedTask::spawn_blocking("prepare.binaries", move || {
        binaries::digest_all(&paths, &memo, now_ns)
    })
    .join()
    .await
    .map_err(|e| inputs::files::FilesError::Walk { dir: String::new(), message: e.to_string() })?;
    if !store.is_empty() {
        cache.call(move |s| s.memo_store(binaries::SCOPE, &store)).await??;
    }
    for (ti, p) in found {
        let pairs: Vec<(String, String)> = p
            .found
            .iter()
            .filter_map(|(word, path)| Some(binaries::pair(word, path, digests.get(path)?)))
            .collect();
        if !pairs.is_empty() {
            pass.pairs.insert(ti, pairs);
        }
    }
    Ok(pass)
}

/// Each plan task's input rules, by plan index, and the workspace's file list, without keying
/// anything (no digest, no cache): what `prova watch` asks of a changed path (is it listed,
/// [`inputs::InputScope::represents`]). Lists the files as [`prepare`] does (git, plus the
/// declared inputs git ignores).
pub fn input_scopes(
    ws: &Workspace,
    plan: &RunPlan,
) -> Result<(Vec<inputs::InputScope>, FileList), PrepareError> {
    let files = inputs::enumerate(&ws.root, &nested_repos(ws))?;
    let dirs: Vec<&str> = ws.projects.iter().map(|p| p.dir.as_str()).collect();
    let tree_dirs = crate::trees::tree_dirs(&ws.root, ws.settings.trees.as_deref(), &dirs);
    let files = with_unlisted_inputs(ws, plan, files, &tree_dirs);
    let scopes = inputs::resolve(ws, plan, &files)?.scopes;
    Ok((scopes, files))
}

/// `files` with the declared inputs it leaves out (gitignored) added
/// ([`inputs::unlisted`]).
fn with_unlisted_inputs(
    ws: &Workspace,
    plan: &RunPlan,
    files: FileList,
    trees: &[String],
) -> FileList {
    let mut patterns: Vec<(String, Vec<String>)> = vec![
        (String::new(), ws.settings.fingerprint.clone()),
        (String::new(), ws.settings.inputs.clone()),
    ];
    for (i, t) in plan.tasks.iter().enumerate() {
        if let Some(pats) = plan.def(ws, i).and_then(|d| d.inputs.clone()) {
            patterns.push((t.spec.project_dir.clone(), pats));
        }
    }
    patterns.sort();
    patterns.dedup();
    let extra = inputs::unlisted::unlisted_inputs(&ws.root, &patterns, &files, trees);
    if extra.is_empty() {
        return files;
    }
    tracing::info!(files = extra.len(), "declared inputs the file list leaves out, added");
    files.adding(extra)
}

/// Scans the workspace's installed trees (`tree_dirs`) through their own memo scope, and
/// records the rows of the files it hashed.
async fn scan_trees(
    ws: &Workspace,
    cache: &CacheThread,
    now_ns: i64,
    tree_dirs: Vec<String>,
    prewalked: Option<OwnedTask<Result<crate::trees::Prewalked, crate::trees::TreeScanError>>>,
) -> Result<crate::trees::TreePass, PrepareError> {
    if tree_dirs.is_empty() {
        return Ok(crate::trees::TreePass::default());
    }
    let scope = crate::trees::memo_scope(&ws.root);
    let load_scope = scope.clone();
    let root = ws.root.clone();
    let store = root.join(".prova").join("trees");
    let walk_err = |e: tokio::task::JoinError| inputs::files::FilesError::Walk {
        dir: String::new(),
        message: e.to_string(),
    };
    // The walks first: a tree whose walk sees what the record says its digest was computed
    // from needs neither its files' memo rows nor a new manifest.
    // A walk that failed early is left to the walk below, which says why if the tree is one.
    let pre = match prewalked {
        Some(task) => task.join().await.ok().and_then(Result::ok),
        None => None,
    };
    let (r, s) = (root.clone(), store.clone());
    let walks = OwnedTask::spawn_blocking("prepare.trees", move || {
        crate::trees::walk_all(&r, &tree_dirs, &s, pre)
    })
    .join()
    .await
    .map_err(walk_err)??;
    let mut real_dirs: Vec<String> = ws.projects.iter().map(|p| p.dir.clone()).collect();
    real_dirs.sort();
    let pass = if walks.all_known() {
        // Nothing to read or hash: every digest is the recorded one.
        crate::trees::finish(&root, walks, &HashMap::new(), now_ns, &store, &real_dirs)?
    } else {
        let started = Instant::now();
        let memo = cache.call(move |s| s.memo_load(&load_scope)).await??;
        tracing::debug!(elapsed = ?started.elapsed(), rows = memo.len(), "tree memo loaded");
        OwnedTask::spawn_blocking("prepare.trees", move || {
            crate::trees::finish(&root, walks, &memo, now_ns, &store, &real_dirs)
        })
        .join()
        .await
        .map_err(walk_err)??
    };
    if !pass.updates.is_empty() {
        let updates = pass.updates.clone();
        cache.call(move |s| s.memo_store(&scope, &updates)).await??;
    }
    Ok(pass)
}

/// Project directories that are git repositories of their own.
fn nested_repos(ws: &Workspace) -> Vec<String> {
    ws.projects
        .iter()
        .filter(|p| !p.dir.is_empty() && ws.root.join(&p.dir).join(".git").exists())
        .map(|p| p.dir.clone())
        .collect()
}
/// The workspace as the inputs proof judges a traced run against it (the
/// judging is `crate::run::undeclared`'s).
#[derive(Clone, Debug)]
pub struct WorkspaceView {
    /// The workspace root.
    pub root: std::path::PathBuf,
    /// Its file list (the one the keys were computed from).
    pub files: std::sync::Arc<FileList>,
    /// Each task's input rules, by task id.
    pub scopes: std::sync::Arc<std::collections::HashMap<String, inputs::InputScope>>,
    /// The installed trees each task's key folds (workspace-relative directories), by task
    /// id: everything inside them is declared.
    pub trees: std::sync::Arc<std::collections::HashMap<String, Vec<String>>>,
    /// Every installed tree of the workspace, with the project whose directory holds it.
    pub installed: std::sync::Arc<Vec<(String, Option<String>)>>,
}
