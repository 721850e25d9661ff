//! `compare_on_disk`: outputs are current only when their digest is proven, by the output
//! memo or by hashing; nothing behind a symlink is judged or reported.

use std::fs;
use std::os::unix::fs::symlink;

use prova_protocol::artifact::collect_outputs;

use super::*;
use crate::cache::Store;

fn globs() -> PathGlobs {
    PathGlobs::new("p", &["dist/**".to_owned()]).unwrap()
}

/// A workspace with `p/dist/{a.txt, sub/b.txt}` at a pinned mtime, and its manifest.
fn setup() -> (tempfile::TempDir, OutputManifest) {
    let ws = tempfile::tempdir().unwrap();
    fs::create_dir_all(ws.path().join("p/dist/sub")).unwrap();
    fs::write(ws.path().join("p/dist/a.txt"), "AAAA").unwrap();
    fs::write(ws.path().join("p/dist/sub/b.txt"), "bb").unwrap();
    pin(ws.path(), "p/dist/a.txt");
    let m = collect_outputs(ws.path(), &globs()).unwrap();
    (ws, m)
}

fn pin(root: &Path, rel: &str) {
    let f = fs::File::options().write(true).open(root.join(rel)).unwrap();
    f.set_modified(UNIX_EPOCH + std::time::Duration::from_secs(1_600_000_000)).unwrap();
}

#[test]
fn same_stamps_other_bytes_is_not_current() {
    let (ws, m) = setup();
    assert_eq!(compare_on_disk(ws.path(), &m, &globs(), None).unwrap(), (true, vec![]));
    fs::write(ws.path().join("p/dist/a.txt"), "BBBB").unwrap();
    pin(ws.path(), "p/dist/a.txt");
    let (current, extras) = compare_on_disk(ws.path(), &m, &globs(), None).unwrap();
    assert!(!current, "B's bytes with A's size, mode and mtime passed as current");
    assert!(extras.is_empty());
}

#[test]
fn empty_directories_are_current_or_extra_as_the_entry_holds_them() {
    let (ws, m) = setup();
    let dir = |d: &str| fs::create_dir_all(ws.path().join(d)).unwrap();
    // Stale empty directories a run would have cleaned: extras, deepest first, and `dist/old`
    // after its stale file. `dist/sub/empty` but not `dist/sub`, which holds the entry's file.
    dir("p/dist/stale/deeper");
    dir("p/dist/old");
    fs::write(ws.path().join("p/dist/old/x.txt"), "x").unwrap();
    dir("p/dist/sub/empty");
    let (current, extras) = compare_on_disk(ws.path(), &m, &globs(), None).unwrap();
    assert!(current);
    let want = [
        "p/dist/old/x.txt",
        "p/dist/old",
        "p/dist/stale/deeper",
        "p/dist/stale",
        "p/dist/sub/empty",
    ];
    let mut got = extras.clone();
    got.sort();
    let mut sorted = want.to_vec();
    sorted.sort_unstable();
    assert_eq!(got, sorted);
    // Removed in order: a directory after everything it held.
    let at = |p: &str| extras.iter().position(|e| e == p).unwrap();
    for (i, e) in extras.iter().enumerate() {
        for d in ["p/dist/old", "p/dist/stale", "p/dist/stale/deeper"] {
            if e.starts_with(&format!("{d}/")) {
                assert!(i < at(d), "{e} after {d}: {extras:?}");
            }
        }
    }
    remove_paths(ws.path(), &extras).unwrap();
    assert!(!ws.path().join("p/dist/stale").exists() && !ws.path().join("p/dist/old").exists());

    // An entry that holds an empty directory: current once it is there, and a file or link
    // in its place is an extra.
    dir("p/dist/sub/empty");
    let m = collect_outputs(ws.path(), &globs()).unwrap();
    assert!(m.entries.iter().any(|e| e.path == "p/dist/sub/empty" && e.kind == EntryKind::Dir));
    assert_eq!(compare_on_disk(ws.path(), &m, &globs(), None).unwrap(), (true, vec![]));
    fs::remove_dir(ws.path().join("p/dist/sub/empty")).unwrap();
    assert_eq!(compare_on_disk(ws.path(), &m, &globs(), None).unwrap(), (false, vec![]));
    symlink("../a.txt", ws.path().join("p/dist/sub/empty")).unwrap();
    let (current, extras) = compare_on_disk(ws.path(), &m, &globs(), None).unwrap();
    assert_eq!((current, extras), (false, vec!["p/dist/sub/empty".to_owned()]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn the_output_memo_answers_when_it_proves_the_stamps_and_is_recorded_otherwise() {
    let (ws, m) = setup();
    let cache_dir = tempfile::tempdir().unwrap();
    let (cache, _join) = CacheThread::spawn(Store::open(cache_dir.path()).unwrap()).unwrap();
    let scope = digests::outputs_scope(ws.path());
    let root = ws.path().to_owned();
    let check = {
        let (cache, root, m) = (cache.clone(), root.clone(), m.clone());
        move || {
            let (cache, root, m) = (cache.clone(), root.clone(), m.clone());
            OwnedTask::spawn_blocking("test.compare", move || {
                compare_on_disk(&root, &m, &globs(), Some(&cache))
            })
            .join()
        }
    };

    // No row: hashed, found current, rows recorded for both files.
    assert!(check().await.unwrap().unwrap().0);
    let s2 = scope.clone();
    let rows = cache.call(move |s| s.memo_load(&s2)).await.unwrap().unwrap();
    assert_eq!(rows.len(), 2);
    assert_eq!(rows["p/dist/a.txt"].digest, Digest::of(b"AAAA"));

    // A row that proves the stamps (recorded well after the ctime) is believed without
    // reading: plant one with a wrong digest and the file is judged by it.
    let meta = fs::symlink_metadata(root.join("p/dist/a.txt")).unwrap();
    let stamp = Stamp::of(&meta);
    let later = stamp.ctime_ns + 10 * digests::RACY_WINDOW_NS;
    let planted = digests::memo_row(&stamp, Digest::of(b"not these bytes"), later);
    let s2 = scope.clone();
    cache
        .call(move |s| s.memo_store(&s2, &[("p/dist/a.txt".to_owned(), planted)]))
        .await
        .unwrap()
        .unwrap();
    assert!(!check().await.unwrap().unwrap().0, "a proving row was not used");

    // Inside the racy window the row proves nothing: the file is hashed again.
    let racy = digests::memo_row(&stamp, Digest::of(b"not these bytes"), stamp.ctime_ns);
    let s2 = scope.clone();
    cache
        .call(move |s| s.memo_store(&s2, &[("p/dist/a.txt".to_owned(), racy)]))
        .await
        .unwrap()
        .unwrap();
    assert!(check().await.unwrap().unwrap().0, "a racy row was trusted");

    // A write moves ctime (and here the inode): the old row cannot vouch for new bytes.
    let proving = digests::memo_row(&stamp, Digest::of(b"AAAA"), later);
    let s2 = scope.clone();
    cache
        .call(move |s| s.memo_store(&s2, &[("p/dist/a.txt".to_owned(), proving)]))
        .await
        .unwrap()
        .unwrap();
    assert!(check().await.unwrap().unwrap().0);
    fs::write(root.join("p/dist/a.txt.new"), "BBBB").unwrap();
    fs::rename(root.join("p/dist/a.txt.new"), root.join("p/dist/a.txt")).unwrap();
    pin(&root, "p/dist/a.txt");
    assert!(!check().await.unwrap().unwrap().0, "B's bytes passed on A's row");
}

#[test]
fn nothing_behind_a_symlinked_output_dir_is_current_or_extra() {
    let (ws, m) = setup();
    let outside = tempfile::tempdir().unwrap();
    // The same files, and one more, behind `p/dist -> outside`.
    fs::rename(ws.path().join("p/dist"), outside.path().join("dist")).unwrap();
    fs::write(outside.path().join("dist/extra.txt"), "x").unwrap();
    symlink(outside.path().join("dist"), ws.path().join("p/dist")).unwrap();
    let (current, extras) = compare_on_disk(ws.path(), &m, &globs(), None).unwrap();
    assert!(!current, "files behind a symlinked dir were taken as current");
    assert!(extras.is_empty(), "paths behind a symlink were offered for removal: {extras:?}");

    // One level deeper: `p/dist/sub -> outside`.
    fs::remove_file(ws.path().join("p/dist")).unwrap();
    fs::create_dir_all(ws.path().join("p/dist")).unwrap();
    fs::copy(outside.path().join("dist/a.txt"), ws.path().join("p/dist/a.txt")).unwrap();
    symlink(outside.path().join("dist/sub"), ws.path().join("p/dist/sub")).unwrap();
    fs::write(outside.path().join("dist/sub/other.txt"), "o").unwrap();
    let (current, extras) = compare_on_disk(ws.path(), &m, &globs(), None).unwrap();
    assert!(!current);
    // The link itself is an output path the entry does not have (`dist/sub` is a directory
    // in the entry, but as a link it is removed and replaced): never what lies behind it.
    assert!(extras.iter().all(|e| !e.starts_with("p/dist/sub/")), "{extras:?}");
}

/// `p{i}/dist/out.txt` for `n` projects, pinned, with each project's outputs and the hit
/// (an entry whose manifest is the project's outputs as they are now).
fn many(n: usize) -> (tempfile::TempDir, Vec<super::super::HitQuery>) {
    let ws = tempfile::tempdir().unwrap();
    let mut hits = Vec::new();
    for i in 0..n {
        let dir = format!("p{i}");
        fs::create_dir_all(ws.path().join(&dir).join("dist")).unwrap();
        let rel = format!("{dir}/dist/out.txt");
        fs::write(ws.path().join(&rel), format!("out {i}")).unwrap();
        pin(ws.path(), &rel);
        let outputs = PathGlobs::new(&dir, &["dist/**".to_owned()]).unwrap();
        let m = collect_outputs(ws.path(), &outputs).unwrap();
        let entry = Entry {
            namespace: crate::cache::TRUSTED.to_owned(),
            key: Digest::of(rel.as_bytes()),
            task: format!("{dir}#build"),
            artifact: None,
            log: None,
            manifest: rmp_serde::to_vec_named(&m).unwrap(),
            components: Vec::new(),
            fingerprint: None,
            duration_ms: 0,
            created_ms: 0,
            last_used_ms: 0,
        };
        hits.push(super::super::HitQuery { entry, outputs, project_dir: dir });
    }
    (ws, hits)
}

/// Makes hits of [`many`] stale, one way each: `changed`'s bytes rewritten (same size, pinned
/// mtime), `gone`'s file removed, an extra file beside `extra`'s, `broken`'s manifest
/// undecodable. Returns the stale hits, sorted.
fn spoil(
    root: &Path,
    hits: &mut [super::super::HitQuery],
    changed: &[usize],
    (gone, extra, broken): (usize, usize, usize),
) -> Vec<usize> {
    for &i in changed {
        let rel = format!("p{i}/dist/out.txt");
        let old = fs::read_to_string(root.join(&rel)).unwrap();
        fs::write(root.join(&rel), old.replace("out", "OUT")).unwrap();
        pin(root, &rel);
    }
    fs::remove_file(root.join(format!("p{gone}/dist/out.txt"))).unwrap();
    fs::write(root.join(format!("p{extra}/dist/extra.txt")), "x").unwrap();
    hits[broken].entry.manifest = b"not a manifest".to_vec();
    let mut stale: Vec<usize> = changed.iter().copied().chain([gone, extra, broken]).collect();
    stale.sort_unstable();
    stale
}

/// Each of `n` resolved hits is in its place, and restored-as-current unless `stale`.
fn assert_answers(resolved: &[(Entry, Option<Restored>)], n: usize, stale: &[usize], what: &str) {
    assert_eq!(resolved.len(), n, "{what}");
    for (i, (entry, restored)) in resolved.iter().enumerate() {
        assert_eq!(entry.task, format!("p{i}#build"), "{what}: hit {i} out of its place");
        assert_eq!(restored.is_some(), !stale.contains(&i), "{what}: hit {i}: {restored:?}");
    }
}

/// The comparison spread over threads answers each hit in its place, as one thread does:
/// changed bytes, a missing file, an extra file and an undecodable manifest are not current,
/// wherever they fall among the chunks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hits_compared_on_many_threads_keep_their_order_and_their_answers() {
    let n = 300;
    let (ws, mut hits) = many(n);
    let root = ws.path();
    // Spread over the chunks, one of them the very last hit.
    let stale = spoil(root, &mut hits, &[3, 150, n - 1], (77, 201, 260));

    let cache_dir = tempfile::tempdir().unwrap();
    let (cache, _join) = CacheThread::spawn(Store::open(cache_dir.path()).unwrap()).unwrap();
    let memo = {
        let (root, hits) = (root.to_owned(), hits.clone());
        cache.call(move |s| memo_for_hits(s, &root, hits)).await.unwrap()
    };
    let one = compare_spread(root, &memo, 1, 1);
    for threads in [2, 3, 8] {
        let spread = compare_spread(root, &memo, threads, 1);
        assert_eq!(spread.len(), n);
        for (i, (a, b)) in one.iter().zip(&spread).enumerate() {
            let (a, b) = (a.as_ref().map(|x| (x.0, &x.1)), b.as_ref().map(|x| (x.0, &x.1)));
            assert_eq!(a, b, "hit {i} answered differently on {threads} threads");
        }
    }

    let layer = LocalLayer::new(cache.clone(), crate::cache::TRUSTED, root);
    let resolved = layer.resolve_current(hits).await.unwrap();
    assert_answers(&resolved, n, &stale, "spread");
    // Every file hashed on the way now has its row: the next run only stats them.
    let scope = digests::outputs_scope(root);
    let rows = cache.call(move |s| s.memo_load(&scope)).await.unwrap().unwrap();
    assert!(rows.len() >= n - stale.len(), "{} rows", rows.len());
}

/// A batch small enough for one job on the cache thread (memo read, comparison and answers
/// together) answers each hit as the spread comparison does: changed bytes, a missing file, an
/// extra file and an undecodable manifest are not current, in their places.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_small_batch_of_hits_is_answered_in_one_job_with_the_same_answers() {
    let n = 20;
    assert!(n <= COMPARE_CHUNK);
    let (ws, mut hits) = many(n);
    let root = ws.path();
    let stale = spoil(root, &mut hits, &[3, n - 1], (5, 11, 13));

    let cache_dir = tempfile::tempdir().unwrap();
    let (cache, _join) = CacheThread::spawn(Store::open(cache_dir.path()).unwrap()).unwrap();
    let layer = LocalLayer::new(cache.clone(), crate::cache::TRUSTED, root);
    for round in 0..2 {
        let resolved = layer.resolve_current(hits.clone()).await.unwrap();
        assert_answers(&resolved, n, &stale, &format!("round {round}"));
    }
    // The files hashed in the first round were recorded: the second answered from the rows.
    let scope = digests::outputs_scope(root);
    let rows = cache.call(move |s| s.memo_load(&scope)).await.unwrap().unwrap();
    assert!(rows.len() >= n - stale.len(), "{} rows", rows.len());
}
