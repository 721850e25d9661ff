//! Building an exec-root placement: fetch what the worker lacks (a farm worker) or point at
//! the workspace and local cache (a local proof run), materialise the root, and wrap the
//! command in the sandbox (and the tracer, for an input-completeness proof).

use std::path::PathBuf;

use prova_protocol::Digest;
use prova_protocol::events::Perturbations;
use prova_protocol::task::OwnedTask;
use prova_protocol::wire::InputRef;
use prova_protocol::work::{Assignment, Isolation, Placement};

use crate::execroot::strays::{StrayCheck, Survey};
use crate::execroot::{
    ExecRoot, ExecRootError, ExecRootSpec, RootInput, RootSource, RootTree, StandInFiles,
};
use crate::remote::BlobError;
use crate::runner::WorkerContext;
use crate::sandbox;

/// A materialised exec root (removed when dropped).
pub struct PreparedRoot {
    /// The root.
    pub root: ExecRoot,
    /// What a determinism re-run holds while it runs: its own `TMPDIR`, libfaketime's
    /// segment (each removed when dropped, after the task).
    pub rerun: crate::perturb::RerunHeld,
    /// The perturbations applied while building the root (a re-run).
    pub perturbed: Perturbations,
    /// What the task may write beside its outputs, and the root as built, surveyed on the
    /// thread that built it (`execroot::strays`; `None` when there is nothing to watch).
    pub strays: Option<(StrayCheck, Survey)>,
    /// A worker without a sandbox: the task's use of its copies of installed trees, asked at
    /// the task's end whether they changed (`crate::treecopies`).
    pub tree_leases: Vec<crate::treecopies::TreeLease>,
}

/// The command line to run, and where its trace goes when traced.
pub struct Wrapped {
    /// The full argv.
    pub argv: Vec<String>,
    /// The strace output file.
    pub trace: Option<PathBuf>,
    /// For a determinism re-run: every perturbation applied, or not and why.
    pub perturbed: Option<Perturbations>,
}

/// Why an exec root could not be prepared; its `Display` is the task's `SpawnFailed` reason.
#[derive(Debug, thiserror::Error)]
pub enum PrepareError {
    /// The assignment runs in place.
    #[error("not an exec-root placement")]
    NotExecRoot,
    /// This worker was started without a blob cache.
    #[error("this worker has no blob cache for exec roots")]
    NoBlobCache,
    /// A worker without a sandbox has no watched copies of installed trees to mirror.
    #[error("this worker has no sandbox and no watched copies of installed trees")]
    NoTreeCopies,
    /// Blobs are missing and there is no coordinator to ask.
    #[error("{missing} blobs are missing and this worker has no coordinator to fetch them from")]
    NoCoordinator {
        /// How many.
        missing: usize,
    },
    /// Fetching one blob failed.
    #[error("fetching {path} ({blob}) failed: {source}")]
    Fetch {
        /// The input's path, or "an upstream artifact".
        path: String,
        /// The blob's short digest.
        blob: String,
        /// Why.
        source: Box<BlobError>,
    },
    /// An upstream artifact left the blob cache between fetch and use.
    #[error("artifact {blob} vanished from the blob cache")]
    Vanished {
        /// Its short digest.
        blob: String,
    },
    /// The blocking build did not complete.
    #[error(transparent)]
    Join(#[from] tokio::task::JoinError),
    /// Building the root failed.
    #[error("building the exec root failed: {0}")]
    Build(#[from] ExecRootError),
    /// An installed tree's manifest is not in the blob cache, or not a valid manifest.
    #[error("installed tree `{path}`: {reason}")]
    Manifest {
        /// The tree's workspace path.
        path: String,
        /// Why.
        reason: String,
    },
    /// Materialising an installed tree failed.
    #[error("installed tree `{path}`: {source}")]
    Tree {
        /// The tree's workspace path.
        path: String,
        /// Why.
        source: Box<crate::trees::TreeError>,
    },
}

/// The checked manifest of tree input `t`, from the blob cache.
fn read_manifest(
    blobs: &crate::blobcache::BlobCache,
    t: &InputRef,
) -> Result<prova_protocol::tree::TreeManifest, PrepareError> {
    let bad = |reason: String| PrepareError::Manifest { path: t.path.clone(), reason };
    let file =
        blobs.path(&t.digest, false).ok_or_else(|| bad("its manifest is not here".into()))?;
    let len = std::fs::metadata(&file).map_err(|e| bad(e.to_string()))?.len();
    if len > prova_protocol::tree::MAX_MANIFEST_BYTES as u64 {
        return Err(bad(format!("its manifest is {len} bytes")));
    }
    let bytes = std::fs::read(&file).map_err(|e| bad(e.to_string()))?;
    prova_protocol::tree::TreeManifest::decode(&bytes, &t.path).map_err(|e| bad(e.to_string()))
}

/// Materialises the exec root of `a` (which must be an exec-root placement): the blobs it
/// needs fetched (a farm worker) or found on this machine (a local proof run), its installed
/// trees ready, then the root built — under another parent, its files in another order, for
/// a determinism re-run.
pub async fn prepare(a: &Assignment, ctx: &WorkerContext) -> Result<PreparedRoot, PrepareError> {
    let Placement::ExecRoot { inputs, upstream, local_source, local_blobs } = &a.placement else {
        return Err(PrepareError::NotExecRoot);
    };
    let Some(blobs) = ctx.blobs.clone() else {
        return Err(PrepareError::NoBlobCache);
    };
    let started = std::time::Instant::now();
    let (tree_refs, inputs): (Vec<&InputRef>, Vec<&InputRef>) = inputs.iter().partition(|i| i.tree);
    // Bring every blob the root needs into the blob cache (a farm worker), or find it on
    // this machine (a local proof run).
    let mut wanted: Vec<Digest> = Vec::new();
    if local_source.is_none() {
        // A tree's manifest first: its file blobs are known once it is here.
        wanted.extend(inputs.iter().filter(|i| i.symlink.is_none()).map(|i| i.digest));
        wanted.extend(tree_refs.iter().map(|t| t.digest));
    }
    if local_blobs.is_none() {
        wanted.extend(upstream.iter().map(|(d, _)| *d));
    }
    let fetched_blobs = fetch_missing(ctx, &blobs, wanted, &inputs).await?;
    let fetched = started.elapsed();
    let (trees, tree_leases) =
        ready_trees(ctx, &blobs, &tree_refs, local_source.as_deref()).await?;
    let trees_ready = started.elapsed();
    let mut spec = ExecRootSpec {
        trees,
        sandboxed: ctx.sandbox,
        inputs: inputs
            .iter()
            .map(|i| RootInput {
                path: i.path.clone(),
                source: match local_source {
                    Some(ws) => RootSource::File(ws.join(&i.path)),
                    None => RootSource::Blob(i.digest),
                },
                exec: i.exec,
                symlink: i.symlink.clone(),
            })
            .collect(),
        artifacts: upstream
            .iter()
            .map(|(d, _)| match local_blobs {
                Some(dir) => Ok(dir.join(&d.to_hex()[..2]).join(d.to_hex())),
                None => {
                    blobs.path(d, false).ok_or_else(|| PrepareError::Vanished { blob: d.short() })
                }
            })
            .collect::<Result<_, PrepareError>>()?,
        project_dir: a.spec.project_dir.clone(),
        outputs: a.spec.outputs.clone(),
        stand_ins: a.spec.stand_ins.clone(),
        // An empty file only where a read of one cannot go unseen into a saved entry: a
        // traced run names it, and a determinism re-run's outputs are compared, never saved.
        // A plain root's outputs are saved unseen: there no read of its bytes may succeed.
        stand_in_files: if (a.trace_reads && ctx.strace.is_some()) || a.perturb.is_some() {
            StandInFiles::Empty
        } else {
            StandInFiles::Sealed
        },
        prune_to: None,
    };
    let mut perturbed = Perturbations::default();
    let mut rerun = crate::perturb::RerunHeld::default();
    let parent = root_parent(a, ctx, &mut spec, &blobs, &mut perturbed, &mut rerun);
    let hint = root_hint(a);
    // A first execution's root on the worker's tmpfs, which may fill while it is made.
    let tmpfs = ctx.tmpfs_roots.clone().filter(|t| a.perturb.is_none() && t.holds(&parent));
    let fallback = ctx.work_dir.join(crate::shmroots::ROOTS);
    let sandboxed = ctx.sandbox;
    let (root, strays) = OwnedTask::spawn_blocking("worker.exec-root", move || {
        let mut spec = spec;
        // A parent on a shared tmpfs (the worker's directory there): pruned when the root
        // goes.
        spec.prune_to = match &tmpfs {
            Some(t) => t.owner_root(),
            None if parent.starts_with("/dev/shm") => crate::shmroots::owner_root(),
            None => None,
        };
        let made = ExecRoot::create(&parent, &hint, &spec, &blobs);
        let root = match (made, &tmpfs) {
            // The tmpfs ran short under the root itself: the work dir, for this root and
            // every later one.
            (Err(e), Some(t)) if crate::health::is_disk_full(&e) => {
                t.give_up(&format!("making an exec root there: {e}"));
                spec.prune_to = None;
                ExecRoot::create(&fallback, &hint, &spec, &blobs)
            }
            (made, _) => made,
        }?;
        // Surveyed here, not on a thread of its own: nothing writes into the root before the
        // task runs. The task runs under bubblewrap exactly when the worker sandboxes (`wrap`).
        let check = root.stray_check(sandboxed);
        let strays = (!check.is_empty()).then(|| {
            let before = check.survey();
            (check, before)
        });
        Ok::<_, crate::execroot::ExecRootError>((root, strays))
    })
    .join()
    .await??;
    // The set-up cost per task (bench/trees.sh reads it): inputs fetched, trees ready
    // (manifest read, blobs checked, materialised unless already there), root built.
    tracing::debug!(
        task = %a.spec.id,
        fetched_blobs,
        trees = tree_refs.len(),
        fetch = ?fetched,
        trees_ready = ?trees_ready,
        elapsed = ?started.elapsed(),
        "exec root prepared"
    );
    Ok(PreparedRoot { root, rerun, perturbed, strays, tree_leases })
}

/// Fetches what of `wanted` the blob cache lacks from the coordinator; how many that was.
async fn fetch_missing(
    ctx: &WorkerContext,
    blobs: &crate::blobcache::BlobCache,
    mut wanted: Vec<Digest>,
    inputs: &[&InputRef],
) -> Result<usize, PrepareError> {
    wanted.sort_unstable();
    wanted.dedup();
    let missing: Vec<Digest> = wanted.into_iter().filter(|d| !blobs.has(d)).collect();
    if !missing.is_empty() {
        let Some(remote) = &ctx.remote else {
            return Err(PrepareError::NoCoordinator { missing: missing.len() });
        };
        fetch_all(remote.as_ref(), blobs, &missing, inputs).await?;
    }
    Ok(missing.len())
}

/// The installed trees of the root: the workspace's own directory (a local proof run,
/// `local_source`), or the worker's one materialised copy of each digest, its missing file
/// blobs fetched first — without a sandbox, a watched copy the task leases
/// (`crate::treecopies`).
async fn ready_trees(
    ctx: &WorkerContext,
    blobs: &crate::blobcache::BlobCache,
    tree_refs: &[&InputRef],
    local_source: Option<&std::path::Path>,
) -> Result<(Vec<RootTree>, Vec<crate::treecopies::TreeLease>), PrepareError> {
    let mut trees = Vec::new();
    let mut leases = Vec::new();
    for t in tree_refs {
        let source = match local_source {
            Some(ws) => ws.join(&t.path),
            None => {
                let m = read_manifest(blobs, t)?;
                fetch_missing(ctx, blobs, m.blobs(), &[]).await?;
                let name = t.path.rsplit('/').next().unwrap_or(&t.path).to_owned();
                let (digest, blobs2, work) = (t.digest, blobs.clone(), ctx.work_dir.clone());
                let _pins = blobs.pin(&m.blobs());
                let tree_err = |e| PrepareError::Tree { path: t.path.clone(), source: Box::new(e) };
                if ctx.sandbox {
                    OwnedTask::spawn_blocking("worker.tree", move || {
                        crate::trees::TreeStore::new(&work).ensure(&digest, &name, &m, &blobs2)
                    })
                    .join()
                    .await?
                    .map_err(tree_err)?
                } else {
                    // Mirrored with symlinks a task can write through: a watched copy.
                    let copies = ctx.tree_copies.clone().ok_or(PrepareError::NoTreeCopies)?;
                    let path = t.path.clone();
                    let lease = OwnedTask::spawn_blocking("worker.tree", move || {
                        copies.acquire(&digest, &name, &m, &blobs2, &path)
                    })
                    .join()
                    .await?
                    .map_err(tree_err)?;
                    let dir = lease.dir.clone();
                    leases.push(lease);
                    dir
                }
            }
        };
        trees.push(RootTree { path: t.path.clone(), source });
    }
    Ok((trees, leases))
}

/// Where the root is made: under the work dir's `roots`, or — a determinism re-run — under
/// another parent, so the task sees another path, its files made in another order (on a
/// file system where that changes listings), its own `TMPDIR` and its own libfaketime
/// segment (`rerun`).
fn root_parent(
    a: &Assignment,
    ctx: &WorkerContext,
    spec: &mut ExecRootSpec,
    blobs: &crate::blobcache::BlobCache,
    perturbed: &mut Perturbations,
    rerun: &mut crate::perturb::RerunHeld,
) -> PathBuf {
    let Some(p) = &a.perturb else {
        return match &ctx.tmpfs_roots {
            Some(t) => t.parent(&ctx.work_dir, input_bytes(spec, blobs)),
            None => ctx.work_dir.join(crate::shmroots::ROOTS),
        };
    };
    let bytes = if p.shuffle_inputs { input_bytes(spec, blobs) } else { 0 };
    let plan = crate::perturb::plan_root(p, &ctx.work_dir, bytes, perturbed);
    if plan.shuffle {
        crate::perturb::shuffle(&mut spec.inputs, a.attempt.0);
    }
    if p.tmpdir {
        match crate::perturb::scratch(&ctx.work_dir, a) {
            Ok(s) => rerun.tmpdir = Some(s),
            Err(e) => tracing::warn!("making the re-run's TMPDIR failed: {e}"),
        }
    }
    if crate::perturb::shifts_clock(a) {
        match crate::clockshm::ClockSegment::create() {
            Ok(c) => rerun.clock = Some(c),
            Err(e) => rerun.clock_failed = Some(e.to_string()),
        }
    }
    plan.parent
}

/// The root directory's name hint: the task id, one safe character per character.
fn root_hint(a: &Assignment) -> String {
    a.spec
        .id
        .as_str()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || c == '-' { c } else { '_' })
        .collect()
}

/// Fetches `missing` into `blobs`, naming the input a failed fetch was for.
async fn fetch_all(
    remote: &dyn crate::remote::RemoteBlobs,
    blobs: &crate::blobcache::BlobCache,
    missing: &[Digest],
    inputs: &[&InputRef],
) -> Result<(), PrepareError> {
    use futures::stream::{self, StreamExt as _, TryStreamExt as _};
    // A few fetches in flight at once: one at a time, a 48k-blob installed tree took over
    // 80 s to arrive (a round trip each); the connection's stream credit bounds it too.
    stream::iter(missing.iter().copied())
        .map(|d| async move {
            remote.fetch(d, blobs).await.map_err(|source| {
                let path = inputs
                    .iter()
                    .find(|i| i.digest == d)
                    .map(|i| i.path.as_str())
                    .unwrap_or("an upstream artifact");
                PrepareError::Fetch {
                    path: path.to_owned(),
                    blob: d.short(),
                    source: Box::new(source),
                }
            })
        })
        .buffer_unordered(FETCHES_IN_FLIGHT)
        .try_collect::<()>()
        .await
}

/// Blob fetches one exec root keeps in flight.
const FETCHES_IN_FLIGHT: usize = 16;

/// The bytes an exec root's inputs take (one stat each), to see whether a tmpfs has room.
fn input_bytes(spec: &ExecRootSpec, blobs: &crate::blobcache::BlobCache) -> u64 {
    let file = |i: &RootInput| match &i.source {
        RootSource::File(p) => std::fs::metadata(p).map(|m| m.len()).unwrap_or(0),
        RootSource::Blob(d) => {
            blobs.path(d, i.exec).and_then(|p| std::fs::metadata(p).ok()).map_or(0, |m| m.len())
        }
    };
    let artifacts: u64 =
        spec.artifacts.iter().filter_map(|p| std::fs::metadata(p).ok()).map(|m| m.len() * 4).sum();
    spec.inputs.iter().filter(|i| i.symlink.is_none()).map(file).sum::<u64>() + artifacts
}

/// What a sandboxed task's environment adds, unless the task declares the name: a sandbox's
/// `HOME` is a fresh, empty tmpfs, so a tool that checks for its own updates when its last
/// check is not on record there does so in every execution — npm loads its registry client
/// and fails on the sandbox's absent network in every `npm run` (0.6 s of a 1.8 s traced
/// `npm run build`). They say nothing about a task's inputs and are never keyed, like the
/// rest of the baseline.
pub const SANDBOX_QUIET: &[(&str, &str)] =
    &[("npm_config_update_notifier", "false"), ("NO_UPDATE_NOTIFIER", "1")];

/// The directories of the task's `PATH` (in `env`) a sandbox of its exec root at `root` shows,
/// so the program the key folds is the one that runs: never the workspace, the cache, the
/// work dir or the root ([`sandbox::bwrap::path_dirs`]).
pub fn toolchain_dirs(
    ctx: &WorkerContext,
    env: &[(String, String)],
    root: &std::path::Path,
) -> Vec<PathBuf> {
    let Some((_, path_var)) = env.iter().rev().find(|(k, _)| k == "PATH") else {
        return Vec::new();
    };
    let mut hidden = hidden_places(ctx);
    hidden.push(root);
    hidden.retain(|h| !h.as_os_str().is_empty());
    sandbox::bwrap::path_dirs(path_var, &hidden)
}

/// The places a sandbox covers where a system path would show them
/// ([`sandbox::bwrap::masked_dirs`]).
pub fn masked_dirs(ctx: &WorkerContext) -> Vec<PathBuf> {
    sandbox::bwrap::masked_dirs(&hidden_places(ctx))
}

/// What a sandbox never shows a task: the workspace and the cache (`sandbox_hidden`) and
/// the worker's work dir.
fn hidden_places(ctx: &WorkerContext) -> Vec<&std::path::Path> {
    let mut hidden: Vec<&std::path::Path> =
        ctx.sandbox_hidden.iter().map(PathBuf::as_path).collect();
    hidden.push(ctx.work_dir.as_path());
    hidden
}

/// Wraps `argv` in the sandbox (when the worker has one) and the tracer (when asked and
/// available); adjusts `env` for the sandbox. Returns the argv and a word for the report.
pub fn wrap(
    a: &Assignment,
    ctx: &WorkerContext,
    p: &PreparedRoot,
    argv: Vec<String>,
    env: &mut Vec<(String, String)>,
) -> (Wrapped, Isolation) {
    let mut argv = argv;
    let isolation = if ctx.sandbox {
        let mut cfg = p.root.sandbox();
        cfg.network = a.spec.network;
        cfg.extra_ro = toolchain_dirs(ctx, env, &cfg.root);
        cfg.masked = masked_dirs(ctx);
        cfg.hostname = a.perturb.as_ref().and_then(|x| x.hostname.clone());
        cfg.uid = a.perturb.as_ref().and_then(|x| x.uid);
        if let Some(s) = &p.rerun.tmpdir {
            // The re-run's own TMPDIR, writable at its host path.
            cfg.writable.push(s.0.clone());
        }
        // The perturbed user and hostname exist inside (`whoami`, resolving the host), and
        // the machine's identity files are there (perturbed for a re-run).
        let user = a
            .perturb
            .as_ref()
            .and_then(|x| x.env.iter().find(|(k, _)| k == "USER").map(|(_, v)| v.clone()))
            .unwrap_or_else(|| "prova".to_owned());
        match sandbox::identity_overlays(&ctx.work_dir.join("identity"), &cfg, &user) {
            Ok(o) => cfg.overlays = o,
            Err(e) => tracing::warn!("writing the sandbox's passwd and hosts failed: {e}"),
        }
        // Its /etc files in one bind (sandbox/etc.rs); where that cannot be, one each.
        match sandbox::etc::etc_view(&ctx.work_dir.join("etc"), &cfg) {
            Ok(v) => cfg.etc = v,
            Err(e) => tracing::debug!("the sandbox's /etc is bound path by path: {e}"),
        }
        argv = sandbox::bwrap_argv(&cfg, &argv);
        // The host's HOME and TMPDIR do not exist inside the sandbox; its /tmp is private.
        for (k, v) in [("HOME", "/tmp"), ("TMPDIR", "/tmp")] {
            match env.iter_mut().find(|(name, _)| name == k) {
                Some(slot) => slot.1 = v.to_owned(),
                None => env.push((k.to_owned(), v.to_owned())),
            }
        }
        for (k, v) in SANDBOX_QUIET {
            // A declared name keeps its value, set or unset (`env` holds the set ones).
            if !a.spec.unset_env.iter().any(|n| n == k) && !env.iter().any(|(n, _)| n == k) {
                env.push(((*k).to_owned(), (*v).to_owned()));
            }
        }
        Isolation::Bwrap
    } else {
        Isolation::Unsandboxed
    };
    let trace = if let (true, Some(tracer)) = (a.trace_reads, ctx.strace) {
        // The pid keeps two runs sharing a work dir (attempt ids restart per run) apart.
        let file =
            ctx.work_dir.join("traces").join(format!("{}-{}.trace", std::process::id(), a.attempt));
        let _ = std::fs::create_dir_all(ctx.work_dir.join("traces"));
        // Only a sandbox's namespace is one strace translates pids out of.
        let tracer = if isolation.sandboxed() { tracer } else { sandbox::Tracer::Host };
        argv = sandbox::strace_argv(&file, &argv, tracer);
        Some(file)
    } else {
        None
    };
    let perturbed = a.perturb.as_ref().map(|_| {
        let mut out = p.perturbed.clone();
        let sandboxed = isolation.sandboxed();
        let wrapped = std::mem::take(&mut argv);
        argv = crate::perturb::apply(
            a,
            &ctx.config.baseline_env,
            sandboxed,
            &p.rerun,
            env,
            wrapped,
            &mut out,
        );
        out
    });
    (Wrapped { argv, trace, perturbed }, isolation)
}
