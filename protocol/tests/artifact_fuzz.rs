//! The artifact unpacker against mutated archives (issue 10: "a fuzz target for … the artifact
//! unpacker, run for a bounded time in CI"). A real archive is packed from a tree with files,
//! nested directories and symlinks; then thousands of mutations of it — of the zstd bytes,
//! and of the tar stream beneath (re-compressed, so the tar parser sees the damage rather
//! than zstd refusing it) — are unpacked into a fresh destination beside a canary directory.
//!
//! Errors are the expected outcome. What must hold for every case: no panic; nothing appears
//! outside the destination (the canary stays empty, the scratch root holds only the two);
//! nothing under the destination is a hard link, device or FIFO; every symlink the unpack
//! wrote stays inside the confine; and what it reports having written is what is on disk.
//! The count is fixed (deterministic seeds), so the run is bounded and repeatable.

#![allow(clippy::unwrap_used)] // the test's own fixtures: a failure there is a broken test

mod support;

use std::collections::BTreeSet;
use std::fs;
use std::io::Read;
use std::os::unix::fs::{MetadataExt, PermissionsExt, symlink};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Component, Path, PathBuf};

use prova_protocol::artifact::{UnpackLimits, collect_outputs, pack, unpack};
use prova_protocol::globs::PathGlobs;
use prova_protocol::manifest::EntryKind;
use support::XorShift;

/// Mutations per seed archive and kind: bounded so the suite stays well under a minute.
const CASES: u64 = 1500;

/// A project `app` with outputs under `app/dist`: files of several sizes (one past a tar
/// block, one with a long name), a nested directory, an executable, and symlinks inside.
fn seed_tree(root: &Path) -> Vec<u8> {
    let dist = root.join("app/dist");
    fs::create_dir_all(dist.join("nested/deeper")).unwrap();
    fs::write(dist.join("index.js"), b"console.log('hi')\n").unwrap();
    fs::write(dist.join("big.bin"), vec![7u8; 1500]).unwrap();
    fs::write(dist.join("empty"), b"").unwrap();
    let long = format!("nested/{}.txt", "n".repeat(120));
    fs::write(dist.join(long), b"long name\n").unwrap();
    fs::write(dist.join("nested/deeper/tool.sh"), b"#!/bin/sh\necho tool\n").unwrap();
    fs::set_permissions(dist.join("nested/deeper/tool.sh"), fs::Permissions::from_mode(0o755))
        .unwrap();
    symlink("index.js", dist.join("main.js")).unwrap();
    symlink("../index.js", dist.join("nested/up.js")).unwrap();
    let globs = PathGlobs::new("app", &["dist/**".to_owned()]).unwrap();
    let manifest = collect_outputs(root, &globs).unwrap();
    assert!(manifest.entries.len() >= 7, "{:?}", manifest.entries);
    let mut out = Vec::new();
    pack(root, &manifest, &mut out, 3).unwrap();
    out
}

fn mutate(rng: &mut XorShift, bytes: &[u8]) -> Vec<u8> {
    let mut b = bytes.to_vec();
    match rng.below(6) {
        // Flip a few bits.
        0 => {
            for _ in 0..=rng.below(4) {
                let i = rng.below(b.len());
                b[i] ^= 1 << rng.below(8);
            }
        }
        // Overwrite a byte with a value a header parser cares about.
        1 => {
            let i = rng.below(b.len());
            b[i] = [0, b'/', b'.', b'0', b'1', b'2', b'5', b'L', b'K', 0xff][rng.below(10)];
        }
        // Truncate.
        2 => b.truncate(rng.below(b.len())),
        // Duplicate a block-aligned span (repeats a header and its content).
        3 => {
            let start = rng.below(b.len() / 512 + 1) * 512;
            let end = (start + 512 * (1 + rng.below(3))).min(b.len());
            if start < end {
                let span = b[start..end].to_vec();
                b.splice(start..start, span);
            }
        }
        // Write `..`, `/` or a long run into a name field of some header.
        4 => {
            let start = rng.below(b.len() / 512 + 1) * 512;
            let frag: &[u8] =
                [&b"../"[..], b"/etc/x", b"app/../../", b"\0", &[b'a'; 100]][rng.below(5)];
            for (k, c) in frag.iter().enumerate() {
                if let Some(slot) = b.get_mut(start + k) {
                    *slot = *c;
                }
            }
        }
        // Zero a span.
        _ => {
            let i = rng.below(b.len());
            let n = rng.below(64).min(b.len() - i);
            b[i..i + n].fill(0);
        }
    }
    b
}

fn decompress(zst: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    zstd::stream::read::Decoder::new(zst).unwrap().read_to_end(&mut out).unwrap();
    out
}

fn compress(tar: &[u8]) -> Vec<u8> {
    zstd::encode_all(tar, 1).unwrap()
}

fn inside(confine: &str, rel: &Path) -> bool {
    let mut depth: i64 = 0;
    for c in rel.components() {
        match c {
            Component::Normal(_) => depth += 1,
            Component::ParentDir => depth -= 1,
            Component::CurDir => {}
            _ => return false,
        }
        if depth < 0 {
            return false;
        }
    }
    confine.is_empty() || rel.starts_with(confine)
}

/// Every path under `dir`, relative, with its metadata checks applied.
fn check_tree(dest: &Path, confine: &str, case: &str) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    let mut stack = vec![PathBuf::new()];
    while let Some(rel) = stack.pop() {
        let abs = dest.join(&rel);
        for e in fs::read_dir(&abs).unwrap() {
            let e = e.unwrap();
            let child = rel.join(e.file_name());
            let meta = fs::symlink_metadata(e.path()).unwrap();
            let ft = meta.file_type();
            seen.insert(child.to_string_lossy().into_owned());
            if ft.is_dir() {
                stack.push(child);
            } else if ft.is_symlink() {
                let target = fs::read_link(e.path()).unwrap();
                assert!(target.is_relative(), "{case}: absolute link {child:?} -> {target:?}");
                let resolved = child.parent().unwrap_or(Path::new("")).join(&target);
                assert!(
                    inside(confine, &resolved),
                    "{case}: link {child:?} -> {target:?} leaves the confine"
                );
            } else {
                assert!(ft.is_file(), "{case}: {child:?} is neither file, dir nor link");
                assert_eq!(meta.nlink(), 1, "{case}: {child:?} is a hard link");
                assert_eq!(meta.mode() & 0o7000, 0, "{case}: {child:?} kept setuid/setgid/sticky");
            }
        }
    }
    seen
}

fn run_case(scratch: &Path, archive: &[u8], limits: &UnpackLimits, case: &str) -> bool {
    let dest = scratch.join("dest");
    let canary = scratch.join("canary");
    let _ = fs::remove_dir_all(&dest);
    fs::create_dir(&dest).unwrap();
    let result = catch_unwind(AssertUnwindSafe(|| unpack(archive, &dest, limits)));
    let Ok(result) = result else { panic!("{case}: unpack panicked") };
    assert_eq!(fs::read_dir(&canary).unwrap().count(), 0, "{case}: canary written");
    let mut top: Vec<String> = fs::read_dir(scratch)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    top.sort();
    assert_eq!(top, ["canary", "dest"], "{case}: wrote beside the destination");
    let confine = limits.confine.first().cloned().unwrap_or_default();
    let on_disk = check_tree(&dest, &confine, case);
    match result {
        Ok(entries) => {
            for e in &entries {
                assert!(on_disk.contains(&e.path), "{case}: reported {} not on disk", e.path);
                assert!(
                    inside(&confine, Path::new(&e.path)),
                    "{case}: {} outside the confine",
                    e.path
                );
                if e.kind == EntryKind::File {
                    let len = fs::metadata(dest.join(&e.path)).unwrap().len();
                    assert_eq!(len, e.size, "{case}: {} size", e.path);
                }
            }
            true
        }
        Err(_) => false,
    }
}

fn fuzz(seed: u64, tar_level: bool) {
    let src = tempfile::tempdir().unwrap();
    let archive = seed_tree(src.path());
    let scratch = tempfile::tempdir().unwrap();
    fs::create_dir(scratch.path().join("canary")).unwrap();
    let mut limits = UnpackLimits::new(vec!["app".to_owned()]);
    limits.max_total_bytes = 1 << 20;
    limits.max_entries = 64;
    assert!(run_case(scratch.path(), &archive, &limits, "the seed"), "the seed must unpack");
    let tar = decompress(&archive);
    let mut rng = XorShift::new(seed);
    let mut accepted = 0u64;
    for i in 0..CASES {
        let (bytes, case) = if tar_level {
            (compress(&mutate(&mut rng, &tar)), format!("tar mutation {i} (seed {seed})"))
        } else {
            (mutate(&mut rng, &archive), format!("zstd mutation {i} (seed {seed})"))
        };
        accepted += u64::from(run_case(scratch.path(), &bytes, &limits, &case));
    }
    // Some mutations (a flipped mode bit, a changed mtime) are still valid archives: the
    // checks above ran on real writes, not only on refusals.
    if tar_level {
        assert!(accepted > 0, "no tar-level mutation was accepted: the checks never saw a write");
    }
}

#[test]
fn mutated_zstd_streams_never_escape_or_panic() {
    fuzz(0x9e37_79b9_7f4a_7c15, false);
}

#[test]
fn mutated_tar_streams_never_escape_or_panic() {
    fuzz(0xd1b5_4a32_d192_ed03, true);
}

#[test]
fn a_second_seed_of_tar_mutations() {
    fuzz(0x2545_f491_4f6c_dd1d, true);
}
