use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt, symlink};

use super::*;
use crate::artifact::mtime_ns;
use crate::artifact::test_support::{listing, set_mtime, stage, write};

/// A source tree with two files and a link under `p/dist`.
fn source() -> tempfile::TempDir {
    let src = tempfile::tempdir().unwrap();
    write(src.path(), "p/dist/a.js", b"fresh a", 0o644);
    write(src.path(), "p/dist/sub/b.bin", b"fresh b", 0o755);
    symlink("a.js", src.path().join("p/dist/link.js")).unwrap();
    set_mtime(&src.path().join("p/dist/a.js"), 1_600_000_000_123_456_789);
    src
}

#[test]
fn a_symlink_at_the_destination_is_replaced_not_followed() {
    let src = source();
    let ws = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    write(outside.path(), "secret", b"do not touch", 0o644);
    fs::create_dir_all(ws.path().join("p/dist")).unwrap();
    symlink(outside.path().join("secret"), ws.path().join("p/dist/a.js")).unwrap();

    let (m, staging) = stage(src.path(), &["dist"], ws.path());
    let stats = place(staging.path(), ws.path(), &m).unwrap();
    assert_eq!(stats.placed, 3);

    let dst = ws.path().join("p/dist/a.js");
    let meta = fs::symlink_metadata(&dst).unwrap();
    assert!(meta.is_file());
    assert_eq!(fs::read(&dst).unwrap(), b"fresh a");
    assert_eq!(mtime_ns(&meta), 1_600_000_000_123_456_789);
    assert_eq!(fs::read(outside.path().join("secret")).unwrap(), b"do not touch");
    assert_eq!(listing(outside.path()), ["secret"]);
}

#[test]
fn a_symlinked_parent_becomes_a_real_directory() {
    let src = source();
    let ws = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    write(outside.path(), "keep.txt", b"keep", 0o644);
    fs::create_dir_all(ws.path().join("p")).unwrap();
    symlink(outside.path(), ws.path().join("p/dist")).unwrap();

    let (m, staging) = stage(src.path(), &["dist"], ws.path());
    let stats = place(staging.path(), ws.path(), &m).unwrap();
    assert_eq!(stats.replaced, 1);

    let dist = fs::symlink_metadata(ws.path().join("p/dist")).unwrap();
    assert!(dist.is_dir() && !dist.file_type().is_symlink());
    assert_eq!(fs::read(ws.path().join("p/dist/sub/b.bin")).unwrap(), b"fresh b");
    assert_eq!(listing(outside.path()), ["keep.txt"]);
    assert_eq!(fs::read(outside.path().join("keep.txt")).unwrap(), b"keep");
}

#[test]
fn a_file_in_the_way_of_a_parent_is_replaced() {
    let src = source();
    let ws = tempfile::tempdir().unwrap();
    write(ws.path(), "p/dist/sub", b"a file where a dir goes", 0o644);
    let (m, staging) = stage(src.path(), &["dist"], ws.path());
    place(staging.path(), ws.path(), &m).unwrap();
    assert!(fs::symlink_metadata(ws.path().join("p/dist/sub")).unwrap().is_dir());
    assert_eq!(fs::read(ws.path().join("p/dist/sub/b.bin")).unwrap(), b"fresh b");
}

#[test]
fn a_directory_where_a_file_goes_is_removed() {
    let src = source();
    let ws = tempfile::tempdir().unwrap();
    write(ws.path(), "p/dist/a.js/inner/x", b"x", 0o644);
    let (m, staging) = stage(src.path(), &["dist"], ws.path());
    place(staging.path(), ws.path(), &m).unwrap();
    assert_eq!(fs::read(ws.path().join("p/dist/a.js")).unwrap(), b"fresh a");
}

#[test]
fn current_files_are_left_alone_and_stale_ones_rewritten() {
    let src = source();
    let ws = tempfile::tempdir().unwrap();
    let (m, staging) = stage(src.path(), &["dist"], ws.path());
    place(staging.path(), ws.path(), &m).unwrap();
    let a = ws.path().join("p/dist/a.js");
    let b = ws.path().join("p/dist/sub/b.bin");
    let ino_a = fs::metadata(&a).unwrap().ino();
    let ino_b = fs::metadata(&b).unwrap().ino();

    // Restoring again changes nothing on disk.
    let (m, staging) = stage(src.path(), &["dist"], ws.path());
    let stats = place(staging.path(), ws.path(), &m).unwrap();
    assert_eq!((stats.placed, stats.already_current), (0, 3));
    assert_eq!(fs::metadata(&a).unwrap().ino(), ino_a);
    assert_eq!(fs::metadata(&b).unwrap().ino(), ino_b);

    // A file edited since (its mtime moved) is stale and replaced; the others are not.
    fs::write(&a, b"edited!").unwrap();
    let (m, staging) = stage(src.path(), &["dist"], ws.path());
    let stats = place(staging.path(), ws.path(), &m).unwrap();
    assert_eq!((stats.placed, stats.already_current), (1, 2));
    assert_ne!(fs::metadata(&a).unwrap().ino(), ino_a);
    assert_eq!(fs::metadata(&b).unwrap().ino(), ino_b);
    assert_eq!(fs::read(&a).unwrap(), b"fresh a");
    assert_eq!(mtime_ns(&fs::metadata(&a).unwrap()), 1_600_000_000_123_456_789);

    // A mode change alone makes a file stale too.
    fs::set_permissions(&b, fs::Permissions::from_mode(0o644)).unwrap();
    let (m, staging) = stage(src.path(), &["dist"], ws.path());
    let stats = place(staging.path(), ws.path(), &m).unwrap();
    assert_eq!(stats.placed, 1);
    assert_eq!(fs::metadata(&b).unwrap().mode() & 0o7777, 0o755);
}

#[test]
fn directory_entries_get_mode_and_mtime() {
    let ws = tempfile::tempdir().unwrap();
    let staging = tempfile::tempdir_in(ws.path()).unwrap();
    fs::create_dir_all(staging.path().join("p/out/empty")).unwrap();
    let dir = |path: &str, mode: u32, mtime_ns: i64| ManifestEntry {
        path: path.to_owned(),
        kind: EntryKind::Dir,
        mode,
        size: 0,
        digest: None,
        mtime_ns,
        link_target: None,
    };
    let m = OutputManifest::new(vec![
        dir("p/out", 0o750, 1_000_000_000),
        dir("p/out/empty", 0o2755, 2_000_000_007),
    ]);
    let stats = place(staging.path(), ws.path(), &m).unwrap();
    assert_eq!(stats.dirs_created, 3);
    let out = fs::symlink_metadata(ws.path().join("p/out")).unwrap();
    assert_eq!((out.mode() & 0o7777, mtime_ns(&out)), (0o750, 1_000_000_000));
    let empty = fs::symlink_metadata(ws.path().join("p/out/empty")).unwrap();
    // setgid stripped.
    assert_eq!((empty.mode() & 0o7777, mtime_ns(&empty)), (0o755, 2_000_000_007));
}

#[test]
fn a_manifest_that_does_not_match_staging_is_refused() {
    let src = source();
    let ws = tempfile::tempdir().unwrap();
    let (mut m, staging) = stage(src.path(), &["dist"], ws.path());
    m.entries[0].size += 1;
    let err = place(staging.path(), ws.path(), &m).unwrap_err();
    assert!(matches!(err, ArtifactError::ManifestMismatch { .. }), "{err}");

    let (mut m, staging) = stage(src.path(), &["dist"], ws.path());
    m.entries.push(ManifestEntry {
        path: "p/dist/zzz".into(),
        kind: EntryKind::File,
        mode: 0o644,
        size: 0,
        digest: None,
        mtime_ns: 0,
        link_target: None,
    });
    let err = place(staging.path(), ws.path(), &m).unwrap_err();
    assert!(matches!(err, ArtifactError::ManifestMismatch { .. }), "{err}");

    let (mut m, staging) = stage(src.path(), &["dist"], ws.path());
    m.entries[0].path = "../escape".into();
    let err = place(staging.path(), ws.path(), &m).unwrap_err();
    assert!(matches!(err, ArtifactError::ParentTraversal { .. }), "{err}");
    m.entries[0].path = "/abs".into();
    let err = place(staging.path(), ws.path(), &m).unwrap_err();
    assert!(matches!(err, ArtifactError::AbsolutePath { .. }), "{err}");
}

#[test]
fn same_size_mode_and_mtime_but_other_bytes_is_rewritten() {
    let src = source();
    let ws = tempfile::tempdir().unwrap();
    let (m, staging) = stage(src.path(), &["dist"], ws.path());
    place(staging.path(), ws.path(), &m).unwrap();
    // Same length as "fresh a", same mode, and the mtime pinned back: only the bytes differ.
    let a = ws.path().join("p/dist/a.js");
    fs::write(&a, b"stale A").unwrap();
    set_mtime(&a, 1_600_000_000_123_456_789);
    let (m, staging) = stage(src.path(), &["dist"], ws.path());
    let stats = place(staging.path(), ws.path(), &m).unwrap();
    assert_eq!((stats.placed, stats.already_current), (1, 2));
    assert_eq!(fs::read(&a).unwrap(), b"fresh a");
}

#[test]
fn symlinked_ancestors_at_any_depth_are_replaced() {
    let src = source();
    let ws = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    write(outside.path(), "b.bin", b"outside b", 0o644);
    write(outside.path(), "sub/b.bin", b"outside sub b", 0o644);
    // Depth 3 (`p/dist/sub`), and on a second run depth 1 (`p`) — the project dir itself.
    fs::create_dir_all(ws.path().join("p/dist")).unwrap();
    symlink(outside.path(), ws.path().join("p/dist/sub")).unwrap();
    let (m, staging) = stage(src.path(), &["dist"], ws.path());
    let stats = place(staging.path(), ws.path(), &m).unwrap();
    assert_eq!(stats.replaced, 1);
    assert!(fs::symlink_metadata(ws.path().join("p/dist/sub")).unwrap().is_dir());
    assert_eq!(fs::read(ws.path().join("p/dist/sub/b.bin")).unwrap(), b"fresh b");

    fs::remove_dir_all(ws.path().join("p")).unwrap();
    symlink(outside.path(), ws.path().join("p")).unwrap();
    let (m, staging) = stage(src.path(), &["dist"], ws.path());
    place(staging.path(), ws.path(), &m).unwrap();
    assert!(fs::symlink_metadata(ws.path().join("p")).unwrap().is_dir());
    assert_eq!(listing(outside.path()), ["b.bin", "sub"]);
    assert_eq!(fs::read(outside.path().join("b.bin")).unwrap(), b"outside b");
    assert_eq!(fs::read(outside.path().join("sub/b.bin")).unwrap(), b"outside sub b");
}

/// A staging directory on another file system than the workspace (`/dev/shm` is tmpfs; the
/// workspace lives beside the build in `target/`): `renameat` gives `EXDEV`, the entries are
/// copied beside their destination and renamed there.
#[test]
fn a_staging_dir_on_another_file_system_is_copied_across() {
    let Ok(shm) = tempfile::Builder::new().prefix("prova-xdev-").tempdir_in("/dev/shm") else {
        eprintln!("skipped: no /dev/shm for a second file system");
        return;
    };
    let ws = tempfile::tempdir_in(env!("CARGO_MANIFEST_DIR")).unwrap();
    let (d1, d2) =
        (fs::metadata(ws.path()).unwrap().dev(), fs::metadata(shm.path()).unwrap().dev());
    if d1 == d2 {
        eprintln!("skipped: /dev/shm and {} share st_dev {d1}", ws.path().display());
        return;
    }
    let src = source();
    let (m, staging) = stage(src.path(), &["dist"], shm.path());
    // A stale file and a link in the way: both replaced by the copies.
    write(ws.path(), "p/dist/sub/b.bin", b"stale", 0o600);
    fs::create_dir_all(ws.path().join("p/dist")).unwrap();
    symlink("elsewhere", ws.path().join("p/dist/link.js")).unwrap();
    let stats = place(staging.path(), ws.path(), &m).unwrap();
    assert_eq!((stats.placed, stats.copied_across_devices), (3, 3));
    let a = fs::symlink_metadata(ws.path().join("p/dist/a.js")).unwrap();
    assert_eq!(fs::read(ws.path().join("p/dist/a.js")).unwrap(), b"fresh a");
    assert_eq!((a.mode() & 0o7777, mtime_ns(&a)), (0o644, 1_600_000_000_123_456_789));
    let b = fs::symlink_metadata(ws.path().join("p/dist/sub/b.bin")).unwrap();
    assert_eq!(fs::read(ws.path().join("p/dist/sub/b.bin")).unwrap(), b"fresh b");
    assert_eq!(b.mode() & 0o7777, 0o755);
    assert_eq!(fs::read_link(ws.path().join("p/dist/link.js")).unwrap().to_str(), Some("a.js"));
    // No temporary names left behind.
    assert_eq!(listing(&ws.path().join("p/dist")), ["a.js", "link.js", "sub"]);
    assert_eq!(listing(&ws.path().join("p/dist/sub")), ["b.bin"]);
}
