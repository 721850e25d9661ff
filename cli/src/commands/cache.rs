//! `prova cache stats | prune | clean`.

use std::path::Path;

use anyhow::Context as _;
use prova_coordinator::workspace::Workspace;

use super::common;
use crate::args::{CacheCommand, CacheDirArgs};
use crate::exit::Code;

fn open(start: &Path, args: &CacheDirArgs) -> anyhow::Result<prova_coordinator::cache::Store> {
    let dir = match &args.cache_dir {
        Some(d) => d.clone(),
        None => {
            let start = start
                .canonicalize()
                .with_context(|| format!("cannot use directory {}", start.display()))?;
            common::cache_dir(&Workspace::load(&start)?, args)
        }
    };
    prova_coordinator::cache::Store::open(&dir)
        .with_context(|| format!("cannot open the cache at {}", dir.display()))
}

/// Runs a cache subcommand.
pub fn cache(start: &Path, cmd: CacheCommand) -> anyhow::Result<Code> {
    match cmd {
        CacheCommand::Stats { cache, check, json } => {
            let store = open(start, &cache)?;
            if check {
                store.integrity_check()?;
            }
            let s = store.stats()?;
            let entries: u64 = s.entries.values().sum();
            if json {
                let v = serde_json::json!({
                    "dir": store.dir(), "entries": s.entries, "referenced_bytes": s.referenced_bytes,
                    "blob_files": s.blob_files, "blob_bytes": s.blob_bytes, "quarantined": s.quarantined,
                    "tmp_items": s.tmp_items, "memo_rows": s.memo_rows, "index_bytes": s.index_bytes,
                    "oldest_used_ms": s.oldest_used_ms, "newest_used_ms": s.newest_used_ms,
                });
                common::print(&format!("{v}\n"))?;
            } else {
                let text = format!(
                    "cache       {}\nentries     {entries}\nblobs       {} files, {}\nindex       {}\nmemo rows   {}\nquarantine  {} blobs\n",
                    store.dir().display(),
                    s.blob_files,
                    fmt_bytes(s.blob_bytes),
                    fmt_bytes(s.index_bytes),
                    s.memo_rows,
                    s.quarantined,
                );
                common::print(&text)?;
                if check {
                    common::print("integrity check: ok\n")?;
                }
            }
        }
        CacheCommand::Prune { cache, max_size } => {
            let mut store = open(start, &cache)?;
            let p = store.prune(max_size)?;
            common::print(&format!(
                "pruned {} entries and {} blobs ({} freed); {} remain referenced\n",
                p.entries_deleted,
                p.blobs_deleted,
                fmt_bytes(p.bytes_freed),
                fmt_bytes(p.referenced_bytes)
            ))?;
        }
        CacheCommand::Clean { cache } => {
            let mut store = open(start, &cache)?;
            store.clean()?;
            common::print(&format!("cleaned {}\n", store.dir().display()))?;
        }
    }
    Ok(Code::Ok)
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
