//! End-to-end: collect → pack → unpack → check → place restores the tree the manifest
//! describes, and collecting the restored tree gives the same manifest back.

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt, symlink};
use std::path::Path;

use super::*;
use crate::artifact::test_support::{globs, set_mtime, write};
use crate::manifest::{EntryKind, OutputManifest};

fn tree(root: &Path) {
    write(root, "p/dist/index.js", b"export default 1;\n", 0o644);
    write(root, "p/dist/bin/cli", b"#!/bin/sh\nexit 0\n", 0o755);
    write(root, "p/dist/ro.txt", b"read only", 0o444);
    write(root, "p/dist/empty", b"", 0o600);
    let long = format!("p/dist/{}/{}.map", "n".repeat(70), "m".repeat(70));
    write(root, &long, &(0..200_000u32).map(|i| (i % 251) as u8).collect::<Vec<_>>(), 0o644);
    symlink("index.js", root.join("p/dist/main.js")).unwrap();
    symlink("../dist/bin/cli", root.join("p/dist/bin/alias")).unwrap();
    symlink(format!("{}/x", "deep/".repeat(30)), root.join("p/dist/far")).unwrap();
    for (i, rel) in
        ["p/dist/index.js", "p/dist/bin/cli", "p/dist/main.js", &long].iter().enumerate()
    {
        set_mtime(&root.join(rel), 1_700_000_000_000_000_000 + i as i64 * 1_000_000_007);
    }
    // Empty directories: kept with their mode and mtime, one of them below another.
    for (rel, mode) in [("p/dist/cache", 0o750), ("p/dist/a/b", 0o755)] {
        fs::create_dir_all(root.join(rel)).unwrap();
        fs::set_permissions(root.join(rel), fs::Permissions::from_mode(mode)).unwrap();
        set_mtime(&root.join(rel), 1_600_000_000_000_000_000 + i64::from(mode));
    }
}

#[test]
fn round_trip_restores_bytes_modes_mtimes_and_links() {
    let src = tempfile::tempdir().unwrap();
    tree(src.path());
    let g = globs("p", &["dist"]);
    let manifest = collect_outputs(src.path(), &g).unwrap();
    assert_eq!(manifest.entries.len(), 10);
    let dirs: Vec<&str> =
        manifest.entries.iter().filter(|e| e.kind == EntryKind::Dir).map(|e| &*e.path).collect();
    assert_eq!(dirs, ["p/dist/a/b", "p/dist/cache"], "only the empty directories");
    let mut archive = Vec::new();
    pack(src.path(), &manifest, &mut archive, 3).unwrap();

    let ws = tempfile::tempdir().unwrap();
    fs::create_dir_all(ws.path().join(".prova/tmp")).unwrap();
    let staging = tempfile::tempdir_in(ws.path().join(".prova/tmp")).unwrap();
    let unpacked =
        unpack(&archive[..], staging.path(), &UnpackLimits::new(vec!["p".into()])).unwrap();
    check_unpacked(&unpacked, &manifest).unwrap();
    let stats = place(staging.path(), ws.path(), &manifest).unwrap();
    assert_eq!((stats.placed, stats.already_current), (8, 0), "the files and links placed");

    for e in &manifest.entries {
        let a = src.path().join(&e.path);
        let b = ws.path().join(&e.path);
        let (ma, mb) = (fs::symlink_metadata(&a).unwrap(), fs::symlink_metadata(&b).unwrap());
        assert_eq!(ma.file_type(), mb.file_type(), "{}", e.path);
        assert_eq!(mtime_ns(&mb), e.mtime_ns, "{}", e.path);
        match e.kind {
            EntryKind::File => {
                assert_eq!(fs::read(&a).unwrap(), fs::read(&b).unwrap(), "{}", e.path);
                assert_eq!(ma.mode() & 0o7777, mb.mode() & 0o7777, "{}", e.path);
            }
            EntryKind::Symlink => {
                assert_eq!(fs::read_link(&a).unwrap(), fs::read_link(&b).unwrap());
            }
            EntryKind::Dir => {
                assert!(mb.is_dir(), "{}", e.path);
                assert_eq!(ma.mode() & 0o7777, mb.mode() & 0o7777, "{}", e.path);
            }
        }
    }
    // Collecting the restored tree gives back the very same manifest, mtimes included.
    assert_eq!(collect_outputs(ws.path(), &g).unwrap(), manifest);
}

#[test]
fn packing_the_restored_tree_gives_the_same_archive() {
    let src = tempfile::tempdir().unwrap();
    tree(src.path());
    let g = globs("p", &["dist"]);
    let manifest = collect_outputs(src.path(), &g).unwrap();
    let mut first = Vec::new();
    pack(src.path(), &manifest, &mut first, 3).unwrap();

    let ws = tempfile::tempdir().unwrap();
    let staging = tempfile::tempdir_in(ws.path()).unwrap();
    unpack(&first[..], staging.path(), &UnpackLimits::new(vec!["".into()])).unwrap();
    place(staging.path(), ws.path(), &manifest).unwrap();
    let again = collect_outputs(ws.path(), &g).unwrap();
    let mut second = Vec::new();
    pack(ws.path(), &again, &mut second, 3).unwrap();
    assert_eq!(first, second);
}

#[test]
fn check_relative_names_the_problem() {
    assert!(check_relative("a/b").is_ok());
    assert!(matches!(check_relative("/a"), Err(ArtifactError::AbsolutePath { .. })));
    assert!(matches!(check_relative("a/../b"), Err(ArtifactError::ParentTraversal { .. })));
    assert!(matches!(check_relative("a//b"), Err(ArtifactError::UncleanPath { .. })));
    assert!(matches!(check_relative(""), Err(ArtifactError::UncleanPath { .. })));
    assert_eq!(ancestors("a/b/c").collect::<Vec<_>>(), ["a", "a/b"]);
    assert_eq!(ancestors("a").count(), 0);
}

#[test]
fn mtimes_before_the_epoch_round_trip() {
    let d = tempfile::tempdir().unwrap();
    let f = d.path().join("f");
    fs::write(&f, b"x").unwrap();
    set_mtime_nofollow(&f, -1_500_000_001).unwrap();
    assert_eq!(mtime_ns(&fs::metadata(&f).unwrap()), -1_500_000_001);
    // On a link, the link's own mtime moves, not its target's.
    let l = d.path().join("l");
    symlink("f", &l).unwrap();
    set_mtime_nofollow(&l, 7).unwrap();
    assert_eq!(mtime_ns(&fs::symlink_metadata(&l).unwrap()), 7);
    assert_eq!(mtime_ns(&fs::metadata(&f).unwrap()), -1_500_000_001);
}

/// Two restores into one project at once (two tasks whose outputs share `p/out/…`) race to
/// create the same parent directories: neither may fail for finding one the other created.
#[test]
fn concurrent_restores_sharing_parent_directories_both_succeed() {
    let shared = "p/out/s1/s2/s3/s4/s5/s6/s7/s8";
    let staged = |name: &str| {
        let src = tempfile::tempdir().unwrap();
        write(src.path(), &format!("{shared}/{name}.txt"), name.as_bytes(), 0o644);
        let g = globs("p", &[&format!("out/**/{name}.txt")]);
        let manifest = collect_outputs(src.path(), &g).unwrap();
        let manifest = OutputManifest {
            entries: manifest.entries.into_iter().filter(|e| e.kind != EntryKind::Dir).collect(),
        };
        (src, manifest)
    };
    let (a_src, a) = staged("a");
    let (b_src, b) = staged("b");
    for round in 0..200 {
        let ws = tempfile::tempdir().unwrap();
        let barrier = std::sync::Barrier::new(2);
        std::thread::scope(|s| {
            for (src, m) in [(a_src.path(), &a), (b_src.path(), &b)] {
                let (ws, barrier) = (ws.path(), &barrier);
                s.spawn(move || {
                    // place() renames out of its staging dir: give each round its own copy.
                    let staging = tempfile::tempdir().unwrap();
                    for e in &m.entries {
                        let to = staging.path().join(&e.path);
                        fs::create_dir_all(to.parent().unwrap()).unwrap();
                        fs::copy(src.join(&e.path), &to).unwrap();
                        set_mtime(&to, e.mtime_ns);
                    }
                    barrier.wait();
                    place(staging.path(), ws, m).unwrap_or_else(|e| panic!("round {round}: {e}"));
                });
            }
        });
        assert_eq!(fs::read(ws.path().join(format!("{shared}/a.txt"))).unwrap(), b"a");
        assert_eq!(fs::read(ws.path().join(format!("{shared}/b.txt"))).unwrap(), b"b");
    }
}
