//! Shared steps of the commands that work on a selection: load the workspace, build the
//! graph, select.

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use prova_coordinator::config::discover::{self, Root};
use prova_coordinator::graph::{self, TaskGraph};
use prova_coordinator::selection::{self, ProjectFilter, Selection};
use prova_coordinator::workspace::Workspace;

use crate::args::SelectArgs;

/// A loaded workspace and the selected subgraph.
pub struct Loaded {
    /// The workspace.
    pub ws: Workspace,
    /// The selected tasks and their dependencies.
    pub graph: TaskGraph,
}

/// Loads the workspace found from `start` and selects what `sel` names.
pub fn load(start: &Path, sel: &SelectArgs) -> anyhow::Result<Loaded> {
    let (start, found) = find_root(start)?;
    load_found(&start, &found, sel)
}

/// `start` made canonical, and the workspace root found from it (the first step of
/// [`load`]).
pub fn find_root(start: &Path) -> anyhow::Result<(PathBuf, Root)> {
    let start = start
        .canonicalize()
        .with_context(|| format!("cannot use directory {}", start.display()))?;
    let found = discover::find_root(&start)?;
    Ok((start, found))
}

/// [`load`] from the root [`find_root`] found from `start` (canonical).
pub fn load_found(start: &Path, found: &Root, sel: &SelectArgs) -> anyhow::Result<Loaded> {
    let t = std::time::Instant::now();
    let ws = Workspace::load_found(found)?;
    tracing::info!(elapsed = ?t.elapsed(), projects = ws.projects.len(), "workspace loaded");
    let full = graph::build_graph(&ws)?;
    let cwd = start.strip_prefix(&ws.root).ok().and_then(|p| p.to_str()).unwrap_or("").to_owned();
    let narrowed = !sel.projects.is_empty() || !sel.filters.is_empty() || sel.affected.is_some();
    let projects = match (sel.all, narrowed) {
        (true, false) => ProjectFilter::All,
        (false, false) => ProjectFilter::Cwd,
        // `--all --filter '!docs'`: every project but docs.
        (all, true) => ProjectFilter::Some {
            all,
            names: sel.projects.clone(),
            filters: sel.filters.clone(),
            affected: sel.affected.clone(),
        },
    };
    let selection =
        Selection { tasks: sel.tasks.clone(), projects, cwd, allow_empty: sel.allow_empty };
    let graph = selection::select(&ws, &full, &selection)?;
    tracing::info!(elapsed = ?t.elapsed(), tasks = graph.len(), "graph selected");
    Ok(Loaded { ws, graph })
}

/// The cache directory for `ws`: `--cache-dir` / `PROVA_CACHE_DIR`, else
/// `<workspace>/.prova/cache`.
pub fn cache_dir(ws: &Workspace, args: &crate::args::CacheDirArgs) -> std::path::PathBuf {
    cache_dir_in(&ws.root, args, std::env::current_dir().ok().as_deref())
}

/// [`cache_dir`] for a workspace at `root`, a relative `--cache-dir` taken from `cwd`. Pure.
pub fn cache_dir_in(
    root: &Path,
    args: &crate::args::CacheDirArgs,
    cwd: Option<&Path>,
) -> std::path::PathBuf {
    match (&args.cache_dir, cwd) {
        (Some(d), _) if d.is_absolute() => d.clone(),
        (Some(d), Some(c)) => c.join(d),
        (Some(d), None) => d.clone(),
        (None, _) => root.join(".prova").join("cache"),
    }
}

/// How a command opens the cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CacheMode {
    /// Read and write (creating the directory and index if need be).
    ReadWrite,
    /// Read only: `SQLITE_OPEN_READ_ONLY`, nothing created or written (`--cache local:r`).
    ReadOnly,
    /// Not at all: an empty in-memory store over a private temporary directory
    /// (`--no-cache`).
    Scratch,
}

/// Opens the cache thread for `ws`, read-write.
pub fn open_cache(
    ws: &Workspace,
    args: &crate::args::CacheDirArgs,
) -> anyhow::Result<(prova_coordinator::cache::CacheThread, std::thread::JoinHandle<()>)> {
    open_cache_as(ws, args, CacheMode::ReadWrite)
}

/// Opens the cache thread for `ws` in `mode`.
pub fn open_cache_as(
    ws: &Workspace,
    args: &crate::args::CacheDirArgs,
    mode: CacheMode,
) -> anyhow::Result<(prova_coordinator::cache::CacheThread, std::thread::JoinHandle<()>)> {
    open_cache_in(&cache_dir(ws, args), mode)
}

/// Opens the cache thread on `dir` in `mode`.
pub fn open_cache_in(
    dir: &Path,
    mode: CacheMode,
) -> anyhow::Result<(prova_coordinator::cache::CacheThread, std::thread::JoinHandle<()>)> {
    use prova_coordinator::cache::CacheThread;
    let opened = match mode {
        CacheMode::ReadWrite => CacheThread::open(dir),
        CacheMode::ReadOnly => CacheThread::open_read_only(dir),
        CacheMode::Scratch => CacheThread::scratch(),
    };
    opened.with_context(|| format!("cannot open the cache at {}", dir.display()))
}

/// The key salt of the workspace's cache, read without writing (`None` when there is no
/// index yet): what a `--no-cache` run keys with, so its keys are the cache's keys.
pub fn stored_key_salt(
    ws: &Workspace,
    args: &crate::args::CacheDirArgs,
) -> Option<prova_coordinator::keys::KeySalt> {
    stored_key_salt_in(&cache_dir(ws, args))
}

/// [`stored_key_salt`] of the cache in `dir`.
pub fn stored_key_salt_in(dir: &Path) -> Option<prova_coordinator::keys::KeySalt> {
    let store = prova_coordinator::cache::Store::open_read_only(dir).ok()?;
    store.key_salt().ok().flatten()
}

/// A current-thread-free multi-thread runtime for a command.
pub fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread().enable_all().build()?)
}

/// Writes `text` to stdout; a closed pipe (`| head`) is not an error.
pub fn print(text: &str) -> anyhow::Result<()> {
    use std::io::Write as _;
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        r => Ok(r?),
    }
}
