//! `prova cache stats | prune | clean`. Prune and clean take the workspace lock (when the
//! cache is the workspace's); clean also works on an index that cannot be opened.

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use prova_coordinator::cache::Store;
use prova_coordinator::workspace::Workspace;

use super::common;
use crate::args::{CacheCommand, CacheDirArgs, LockArgs};
use crate::exit::Code;
use crate::lock::WorkspaceLock;

/// The cache directory `args` name, and the workspace root when it was found from `start`
/// (no `--cache-dir` / `PROVA_CACHE_DIR`): the commands that write the cache take that
/// workspace's lock.
fn locate(start: &Path, args: &CacheDirArgs) -> anyhow::Result<(PathBuf, Option<PathBuf>)> {
    Ok(match &args.cache_dir {
        Some(d) => (d.clone(), None),
        None => {
            let start = start
                .canonicalize()
                .with_context(|| format!("cannot use directory {}", start.display()))?;
            let ws = Workspace::load(&start)?;
            (common::cache_dir(&ws, args), Some(ws.root))
        }
    })
}

fn open_dir(dir: &Path) -> anyhow::Result<Store> {
    Store::open(dir).with_context(|| format!("cannot open the cache at {}", dir.display()))
}

/// The workspace lock, when the cache is the workspace's.
fn lock(root: Option<&Path>, args: LockArgs) -> anyhow::Result<Option<WorkspaceLock>> {
    Ok(root.map(|r| crate::lock::acquire(r, !args.no_wait)).transpose()?)
}

/// `prova cache clean`: through the index when it opens; else (garbage, a truncated file, a
/// schema from a newer prova — what the open error tells the user to clean) by removing the
/// cache's files without opening it.
fn clean(dir: &Path) -> anyhow::Result<String> {
    let why = match Store::open(dir) {
        Ok(mut store) => match store.clean() {
            Ok(()) => return Ok(format!("cleaned {}\n", dir.display())),
            Err(e) if e.is_busy() => return Err(e.into()),
            Err(e) => e,
        },
        // Another process holds the index: it is in use, not broken.
        Err(e) if e.is_busy() => {
            return Err(anyhow::Error::new(e)
                .context(format!("cannot open the cache at {}", dir.display())));
        }
        Err(e) => e,
    };
    let c = Store::clean_dir(dir)
        .with_context(|| format!("cannot clean the cache at {}", dir.display()))?;
    let mut text = format!(
        "the index could not be used ({why}): removed it without reading it\n         removed {} index files, {} blobs, {} staged or quarantined items",
        c.index_files, c.blobs, c.other_items
    );
    if c.links > 0 {
        text.push_str(&format!(", {} symbolic links (not followed)", c.links));
    }
    text.push_str(&format!("\ncleaned {}\n", dir.display()));
    Ok(text)
}

/// Runs a cache subcommand.
pub fn cache(start: &Path, cmd: CacheCommand) -> anyhow::Result<Code> {
    match cmd {
        CacheCommand::Stats { cache, check, json } => {
            // Read-only: works on a read-only `.prova` and leaves it as it was.
            let (dir, root) = locate(start, &cache)?;
            let reapi = root.as_deref().map(reapi_status).transpose()?.flatten();
            let store = Store::open_read_only(&dir)
                .with_context(|| format!("cannot open the cache at {}", dir.display()))?;
            if check {
                store.integrity_check()?;
            }
            let s = store.stats()?;
            let entries: u64 = s.entries.values().sum();
            if json {
                let v = serde_json::json!({
                    "dir": dir, "entries": s.entries, "referenced_bytes": s.referenced_bytes,
                    "blob_files": s.blob_files, "blob_bytes": s.blob_bytes, "quarantined": s.quarantined,
                    "tmp_items": s.tmp_items, "memo_rows": s.memo_rows, "index_bytes": s.index_bytes,
                    "oldest_used_ms": s.oldest_used_ms, "newest_used_ms": s.newest_used_ms,
                    "reapi": reapi.as_ref().map(|(endpoint, status)| serde_json::json!({
                        "endpoint": endpoint, "reachable": status.is_ok(),
                        "error": status.as_ref().err(),
                    })),
                });
                common::print(&format!("{v}\n"))?;
            } else {
                let text = format!(
                    "cache       {}\nentries     {entries}\nblobs       {} files, {}\nindex       {}\nmemo rows   {}\nquarantine  {} blobs\n",
                    dir.display(),
                    s.blob_files,
                    fmt_bytes(s.blob_bytes),
                    fmt_bytes(s.index_bytes),
                    s.memo_rows,
                    s.quarantined,
                );
                common::print(&text)?;
                if let Some((endpoint, status)) = &reapi {
                    let state = match status {
                        Ok(()) => "reachable".to_owned(),
                        Err(e) => format!("unreachable: {e}"),
                    };
                    common::print(&format!("reapi       {endpoint} ({state})\n"))?;
                }
                if check {
                    common::print("integrity check: ok\n")?;
                }
            }
        }
        CacheCommand::Prune { cache, max_size, lock: wait } => {
            let (dir, root) = locate(start, &cache)?;
            let _lock = lock(root.as_deref(), wait)?;
            let mut store = open_dir(&dir)?;
            let p = store.prune(max_size)?;
            common::print(&format!(
                "pruned {} entries and {} blobs ({} freed); {} remain referenced\n",
                p.entries_deleted,
                p.blobs_deleted,
                fmt_bytes(p.bytes_freed),
                fmt_bytes(p.referenced_bytes)
            ))?;
        }
        CacheCommand::Clean { cache, lock: wait } => {
            let (dir, root) = locate(start, &cache)?;
            let _lock = lock(root.as_deref(), wait)?;
            common::print(&clean(&dir)?)?;
        }
    }
    Ok(Code::Ok)
}

/// The REAPI layer of the workspace at `root` (`[cache.reapi]`), if any: its endpoint and
/// whether it answers `GetCapabilities` (within 5 s at most).
fn reapi_status(root: &Path) -> anyhow::Result<Option<(String, Result<(), String>)>> {
    use prova_coordinator::layers::reapi::ReapiClient;
    let Some(mut cfg) = prova_coordinator::config::reapi::load(root)? else { return Ok(None) };
    cfg.timeout = cfg.timeout.min(std::time::Duration::from_secs(5));
    let endpoint = cfg.endpoint.to_string();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let status = rt.block_on(async {
        let client = ReapiClient::new(&cfg).map_err(|e| e.to_string())?;
        client.capabilities().await.map_err(|e| e.to_string())
    });
    Ok(Some((endpoint, status)))
}

/// `1.5 MiB`.
pub fn fmt_bytes(b: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 { format!("{b} B") } else { format!("{v:.1} {}", UNITS[u]) }
}
