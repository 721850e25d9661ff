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
