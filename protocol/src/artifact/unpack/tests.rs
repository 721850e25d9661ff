//! The hostile-archive corpus: each archive is built by hand with raw headers (the `tar`
//! crate's setters refuse the names that matter), and each refusal is checked for its
//! specific error and for having written nothing outside the destination.

use std::io::Write;
use std::path::PathBuf;

use tar::{EntryType, Header};

use super::*;
use crate::artifact::test_support::{EvilTar, listing};

/// A scratch area: `root/dest` (the unpack destination) beside `root/canary` (must stay
/// empty), so escapes to `dest/..` or into a sibling are visible.
struct Scratch {
    root: tempfile::TempDir,
}

impl Scratch {
    fn new() -> Self {
        let root = tempfile::tempdir().unwrap();
        fs::create_dir(root.path().join("dest")).unwrap();
        fs::create_dir(root.path().join("canary")).unwrap();
        Self { root }
    }

    fn dest(&self) -> PathBuf {
        self.root.path().join("dest")
    }

    fn canary(&self) -> PathBuf {
        self.root.path().join("canary")
    }

    fn unpack(
        &self,
        archive: &[u8],
        limits: &UnpackLimits,
    ) -> Result<Vec<UnpackedEntry>, ArtifactError> {
        unpack(archive, &self.dest(), limits)
    }

    /// Unpacks expecting a refusal, and checks nothing appeared outside `dest`.
    fn refuse(&self, archive: &[u8], limits: &UnpackLimits) -> ArtifactError {
        let err = self.unpack(archive, limits).expect_err("hostile archive was accepted");
        assert!(listing(&self.canary()).is_empty(), "canary written: {err}");
        assert_eq!(listing(self.root.path()), ["canary", "dest"], "{err}");
        // A refused unpack may leave a partial tree in `dest`; start the next case afresh.
        fs::remove_dir_all(self.dest()).unwrap();
        fs::create_dir(self.dest()).unwrap();
        err
    }
}

fn limits(confine: &[&str]) -> UnpackLimits {
    UnpackLimits::new(confine.iter().map(|s| s.to_string()).collect())
}

fn whole() -> UnpackLimits {
    limits(&[""])
}

fn one(name: &[u8], kind: EntryType, link: &[u8]) -> Vec<u8> {
    let mut t = EvilTar::new();
    t.entry(name, kind, link, b"");
    t.zst()
}

#[test]
fn a_plain_archive_unpacks() {
    let s = Scratch::new();
    let mut t = EvilTar::new();
    t.entry(b"p/d", EntryType::Directory, b"", b"");
    t.file("p/d/a.txt", b"hello");
    t.symlink("p/l", "d/a.txt");
    let long = format!("p/{}/{}", "x".repeat(90), "y".repeat(90));
    t.file(&long, b"long");
    let got = s.unpack(&t.zst(), &limits(&["p"])).unwrap();
    let paths: Vec<&str> = got.iter().map(|e| e.path.as_str()).collect();
    assert_eq!(paths, ["p/d", "p/d/a.txt", "p/l", long.as_str()]);
    assert_eq!(fs::read(s.dest().join("p/d/a.txt")).unwrap(), b"hello");
    assert_eq!(fs::read_link(s.dest().join("p/l")).unwrap(), Path::new("d/a.txt"));
    assert_eq!(fs::read(s.dest().join(&long)).unwrap(), b"long");
    assert_eq!(got[1].digest, Some(Digest::of(b"hello")));
    assert_eq!(got[1].mode, 0o644);
}

#[test]
fn parent_traversal() {
    let s = Scratch::new();
    let err = s.refuse(&one(b"../evil", EntryType::Regular, b""), &whole());
    assert!(matches!(err, ArtifactError::ParentTraversal { .. }), "{err}");
    let err = s.refuse(&one(b"a/../../evil", EntryType::Regular, b""), &whole());
    assert!(matches!(err, ArtifactError::ParentTraversal { .. }), "{err}");
    // The same through a GNU long name, which the header's own field would not show.
    let long = format!("{}/../../../evil", "a".repeat(120));
    let err = s.refuse(&one(long.as_bytes(), EntryType::Regular, b""), &whole());
    assert!(matches!(err, ArtifactError::ParentTraversal { .. }), "{err}");
    // And through a ustar prefix field (`prefix/name`).
    let mut h = Header::new_ustar();
    h.as_ustar_mut().unwrap().prefix[..5].copy_from_slice(b"../..");
    h.as_old_mut().name[..4].copy_from_slice(b"evil");
    h.set_entry_type(EntryType::Regular);
    h.set_mode(0o644);
    h.set_size(0);
    h.set_cksum();
    let mut t = EvilTar::new();
    t.raw(&h, b"");
    let err = s.refuse(&t.zst(), &whole());
    assert!(
        matches!(&err, ArtifactError::ParentTraversal { path } if path == "../../evil"),
        "{err}"
    );
}

#[test]
fn absolute_paths() {
    let s = Scratch::new();
    let err = s.refuse(&one(b"/abs/evil", EntryType::Regular, b""), &whole());
    assert!(matches!(err, ArtifactError::AbsolutePath { .. }), "{err}");
    assert!(!Path::new("/abs/evil").exists());
}

#[test]
fn unclean_paths() {
    let s = Scratch::new();
    for name in [&b"./a"[..], b"a//b", b"a/./b", b""] {
        let err = s.refuse(&one(name, EntryType::Regular, b""), &whole());
        assert!(matches!(err, ArtifactError::UncleanPath { .. }), "{name:?}: {err}");
    }
}

#[test]
fn non_utf8_paths() {
    let s = Scratch::new();
    let err = s.refuse(&one(b"p/bad\xff", EntryType::Regular, b""), &whole());
    assert!(matches!(err, ArtifactError::NonUtf8Path { .. }), "{err}");
}

#[test]
fn outside_the_confine_prefix() {
    let s = Scratch::new();
    let web = limits(&["apps/web"]);
    for name in ["apps/api/x", "apps/webx/y", "x", "apps"] {
        let mut t = EvilTar::new();
        t.file(name, b"x");
        let err = s.refuse(&t.zst(), &web);
        assert!(matches!(err, ArtifactError::OutsideConfine { .. }), "{name}: {err}");
    }
    // No confine prefix at all allows nothing.
    let mut t = EvilTar::new();
    t.file("a", b"x");
    let err = s.refuse(&t.zst(), &limits(&[]));
    assert!(matches!(err, ArtifactError::OutsideConfine { .. }), "{err}");
}

#[test]
fn symlink_to_an_absolute_path_then_a_file_through_it() {
    let s = Scratch::new();
    // `link -> /etc` then `link/passwd`: refused at the link.
    let mut t = EvilTar::new();
    t.symlink("link", "/etc");
    t.file("link/passwd", b"root::0:0::/:/bin/sh\n");
    let err = s.refuse(&t.zst(), &whole());
    assert!(
        matches!(&err, ArtifactError::LinkEscapes { path, target } if path == "link" && target == "/etc"),
        "{err}"
    );
    // The same at the canary, so a write-through would be seen.
    let mut t = EvilTar::new();
    t.symlink("link", s.canary().to_str().unwrap());
    t.file("link/pwned", b"x");
    let err = s.refuse(&t.zst(), &whole());
    assert!(matches!(err, ArtifactError::LinkEscapes { .. }), "{err}");
}

#[test]
fn a_file_below_a_symlink_from_the_archive() {
    // The link itself is harmless (inside the confine); writing below it is not.
    let s = Scratch::new();
    let mut t = EvilTar::new();
    t.symlink("p/link", "sub");
    t.file("p/link/x", b"x");
    let err = s.refuse(&t.zst(), &limits(&["p"]));
    assert!(
        matches!(&err, ArtifactError::WriteThroughLink { path, link } if path == "p/link/x" && link == "p/link"),
        "{err}"
    );
    // A directory entry below it too.
    let mut t = EvilTar::new();
    t.symlink("p/link", "sub");
    t.entry(b"p/link/d/", EntryType::Directory, b"", b"");
    let err = s.refuse(&t.zst(), &limits(&["p"]));
    assert!(matches!(err, ArtifactError::WriteThroughLink { .. }), "{err}");
}

#[test]
fn symlinks_out_of_the_confine() {
    let s = Scratch::new();
    let p = limits(&["apps/web"]);
    for target in ["../../x", "../api/src", "..", "../../../../etc/passwd"] {
        let mut t = EvilTar::new();
        t.symlink("apps/web/l", target);
        let err = s.refuse(&t.zst(), &p);
        assert!(matches!(err, ArtifactError::LinkEscapes { .. }), "{target}: {err}");
    }
    // Lexically inside, really outside: `up` is `p`, so `up/../x` is `x`. `esc` sorts
    // before `up`, so only the final pass over all links can see it.
    let mut t = EvilTar::new();
    t.symlink("p/a/b/esc", "up/../x");
    t.symlink("p/a/b/up", "../..");
    let err = s.refuse(&t.zst(), &limits(&["p"]));
    assert!(
        matches!(&err, ArtifactError::LinkEscapes { path, .. } if path == "p/a/b/esc"),
        "{err}"
    );
    // Links inside the confine, also through another link, are fine.
    let ok = Scratch::new();
    let mut t = EvilTar::new();
    t.symlink("p/d", "sub");
    t.symlink("p/f", "d/file");
    t.symlink("p/x/up", "../y");
    ok.unpack(&t.zst(), &limits(&["p"])).unwrap();
}

#[test]
fn hardlinks_devices_fifos_and_other_types() {
    let s = Scratch::new();
    let err = s.refuse(&one(b"hl", EntryType::Link, b"/etc/passwd"), &whole());
    assert!(matches!(err, ArtifactError::Hardlink { .. }), "{err}");
    let err = s.refuse(&one(b"hl", EntryType::Link, b"other"), &whole());
    assert!(matches!(err, ArtifactError::Hardlink { .. }), "{err}");
    let err = s.refuse(&one(b"tty", EntryType::Char, b""), &whole());
    assert!(matches!(err, ArtifactError::Device { .. }), "{err}");
    let err = s.refuse(&one(b"sda", EntryType::Block, b""), &whole());
    assert!(matches!(err, ArtifactError::Device { .. }), "{err}");
    let err = s.refuse(&one(b"pipe", EntryType::Fifo, b""), &whole());
    assert!(matches!(err, ArtifactError::Fifo { .. }), "{err}");
    for kind in [b'S', b'7', b'x', b'g', b'Z'] {
        let err = s.refuse(&one(b"odd", EntryType::new(kind), b""), &whole());
        assert!(
            matches!(&err, ArtifactError::UnsupportedEntry { kind: k, .. } if *k == kind as char),
            "{err}"
        );
    }
}

#[test]
fn duplicate_paths() {
    let s = Scratch::new();
    let mut t = EvilTar::new();
    t.file("a", b"first");
    t.file("a", b"second");
    let err = s.refuse(&t.zst(), &whole());
    assert!(matches!(&err, ArtifactError::DuplicatePath { path } if path == "a"), "{err}");
    // A link then a file at the same path (would replace the link or write through it).
    let mut t = EvilTar::new();
    t.symlink("a", "b");
    t.file("a", b"x");
    let err = s.refuse(&t.zst(), &whole());
    assert!(matches!(err, ArtifactError::DuplicatePath { .. }), "{err}");
    // A file where a directory was already made.
    let mut t = EvilTar::new();
    t.file("d/x", b"x");
    t.file("d", b"x");
    let err = s.refuse(&t.zst(), &whole());
    assert!(matches!(err, ArtifactError::DuplicatePath { .. }), "{err}");
    // A file below a file.
    let mut t = EvilTar::new();
    t.file("f", b"x");
    t.file("f/x", b"x");
    let err = s.refuse(&t.zst(), &whole());
    assert!(matches!(err, ArtifactError::ParentNotDir { .. }), "{err}");
}

#[test]
fn a_zstd_bomb_is_refused_quickly() {
    // 1 GiB of zeros in one entry, streamed into the encoder: tens of KiB compressed.
    const GIB: u64 = 1 << 30;
    let mut enc = zstd::Encoder::new(Vec::new(), 1).unwrap();
    let mut h = Header::new_gnu();
    h.as_old_mut().name[..4].copy_from_slice(b"bomb");
    h.set_entry_type(EntryType::Regular);
    h.set_mode(0o644);
    h.set_size(GIB);
    h.set_cksum();
    enc.write_all(h.as_bytes()).unwrap();
    std::io::copy(&mut std::io::repeat(0).take(GIB + 1024), &mut enc).unwrap();
    let bomb = enc.finish().unwrap();
    assert!(bomb.len() < 1 << 20, "bomb is {} bytes", bomb.len());

    let s = Scratch::new();
    let lim = UnpackLimits { max_total_bytes: 64 << 20, ..whole() };
    let started = std::time::Instant::now();
    let err = s.refuse(&bomb, &lim);
    assert!(matches!(err, ArtifactError::TooLarge { limit } if limit == 64 << 20), "{err}");
    // Refused from the declared size, before decompressing it.
    assert!(started.elapsed() < std::time::Duration::from_secs(10));
    assert!(listing(&s.dest()).is_empty());
}

#[test]
fn a_frame_asking_for_a_huge_window_is_refused() {
    // A 1 GiB window would make the decoder allocate that much before a byte comes out.
    let mut t = EvilTar::new();
    t.file("a", &[1u8; 300_000]);
    let tar_bytes = zstd::decode_all(&t.zst()[..]).unwrap();
    let mut enc = zstd::Encoder::new(Vec::new(), 3).unwrap();
    enc.window_log(30).unwrap();
    enc.write_all(&tar_bytes).unwrap();
    let wide = enc.finish().unwrap();
    let s = Scratch::new();
    let err = s.refuse(&wide, &whole());
    assert!(matches!(&err, ArtifactError::Corrupt(m) if m.contains("memory")), "{err}");
    // The frame itself is sound: with a 2^31 window allowed it decodes, so what refused it
    // was the window cap (zstd's own default, 2^27, refuses it too).
    assert!(zstd::decode_all(&wide[..]).is_err());
    let mut dec = zstd::stream::read::Decoder::new(&wide[..]).unwrap();
    dec.window_log_max(31).unwrap();
    let mut all = Vec::new();
    dec.read_to_end(&mut all).unwrap();
    assert_eq!(all, tar_bytes);
}

#[test]
fn decompressed_bytes_are_counted_beyond_declared_sizes() {
    // Each entry is small, but together the headers pass the cap: the byte counter, not the
    // declared sizes, trips.
    let s = Scratch::new();
    let mut t = EvilTar::new();
    for i in 0..100 {
        t.file(&format!("f{i}"), b"");
    }
    let lim = UnpackLimits { max_total_bytes: 8 * 1024, ..whole() };
    let err = s.refuse(&t.zst(), &lim);
    assert!(matches!(err, ArtifactError::TooLarge { .. }), "{err}");
}

#[test]
fn too_many_entries() {
    let s = Scratch::new();
    let mut t = EvilTar::new();
    for i in 0..11 {
        t.file(&format!("f{i}"), b"x");
    }
    let lim = UnpackLimits { max_entries: 10, ..whole() };
    let err = s.refuse(&t.zst(), &lim);
    assert!(matches!(err, ArtifactError::TooManyEntries { limit: 10 }), "{err}");
}

#[test]
fn too_long_paths_and_targets() {
    let s = Scratch::new();
    let lim = UnpackLimits { max_path_len: 200, ..whole() };
    let long = "a/".repeat(150) + "f";
    let err = s.refuse(&one(long.as_bytes(), EntryType::Regular, b""), &lim);
    assert!(matches!(err, ArtifactError::PathTooLong { limit: 200, .. }), "{err}");
    let err = s.refuse(&one(b"l", EntryType::Symlink, long.as_bytes()), &lim);
    assert!(matches!(err, ArtifactError::PathTooLong { .. }), "{err}");
    // A GNU long name of a megabyte is refused from its size, without reading it.
    let mut t = EvilTar::new();
    t.long(b'L', &vec![b'a'; 1 << 20]);
    t.file("x", b"");
    let err = s.refuse(&t.zst(), &lim);
    assert!(matches!(err, ArtifactError::PathTooLong { .. }), "{err}");
}

#[test]
fn corrupt_streams() {
    let s = Scratch::new();
    let err = s.refuse(b"definitely not zstd", &whole());
    assert!(matches!(err, ArtifactError::Corrupt(_)), "{err}");
    // A header with a bad checksum.
    let mut t = EvilTar::new();
    t.file("a", b"x");
    let mut tar_bytes = zstd::decode_all(&t.zst()[..]).unwrap();
    tar_bytes[0] = b'b';
    let bad = zstd::encode_all(&tar_bytes[..], 3).unwrap();
    let err = s.refuse(&bad, &whole());
    assert!(matches!(err, ArtifactError::Corrupt(_)), "{err}");
    // Truncated in the middle of a file's data.
    let mut t = EvilTar::new();
    t.file("a", &[1u8; 4096]);
    let tar_bytes = zstd::decode_all(&t.zst()[..]).unwrap();
    let cut = zstd::encode_all(&tar_bytes[..1024], 3).unwrap();
    let err = s.refuse(&cut, &whole());
    assert!(matches!(err, ArtifactError::Corrupt(_)), "{err}");
    // A long name with nothing after it.
    let mut t = EvilTar::new();
    t.long(b'L', b"dangling");
    let err = s.refuse(&t.zst(), &whole());
    assert!(matches!(err, ArtifactError::Corrupt(_)), "{err}");
}

#[test]
fn setuid_bits_are_stripped() {
    let s = Scratch::new();
    let mut h = Header::new_gnu();
    h.as_old_mut().name[..4].copy_from_slice(b"suid");
    h.set_entry_type(EntryType::Regular);
    h.set_mode(0o6755);
    h.set_size(1);
    h.set_cksum();
    let mut t = EvilTar::new();
    t.raw(&h, b"x");
    let got = s.unpack(&t.zst(), &whole()).unwrap();
    assert_eq!(got[0].mode, 0o755);
    let meta = fs::metadata(s.dest().join("suid")).unwrap();
    assert_eq!(meta.permissions().mode() & 0o7777, 0o755);
}

#[test]
fn the_destination_must_be_empty() {
    let s = Scratch::new();
    fs::write(s.dest().join("old"), b"x").unwrap();
    let mut t = EvilTar::new();
    t.file("a", b"x");
    let err = s.unpack(&t.zst(), &whole()).unwrap_err();
    assert!(matches!(err, ArtifactError::DestNotEmpty { .. }), "{err}");
}

#[test]
fn check_unpacked_compares_with_the_manifest() {
    use crate::manifest::ManifestEntry;
    let s = Scratch::new();
    let mut t = EvilTar::new();
    t.file("p/a", b"a");
    let got = s.unpack(&t.zst(), &whole()).unwrap();
    let entry = |content: &[u8]| ManifestEntry {
        path: "p/a".into(),
        kind: EntryKind::File,
        mode: 0o644,
        size: content.len() as u64,
        digest: Some(Digest::of(content)),
        mtime_ns: 5,
        link_target: None,
    };
    check_unpacked(&got, &OutputManifest::new(vec![entry(b"a")])).unwrap();
    let err = check_unpacked(&got, &OutputManifest::new(vec![entry(b"b")])).unwrap_err();
    assert!(matches!(err, ArtifactError::ManifestMismatch { .. }), "{err}");
    let err = check_unpacked(&got, &OutputManifest::default()).unwrap_err();
    assert!(matches!(err, ArtifactError::ManifestMismatch { .. }), "{err}");
    let mut other = entry(b"a");
    other.path = "p/b".into();
    let err = check_unpacked(&got, &OutputManifest::new(vec![entry(b"a"), other])).unwrap_err();
    assert!(matches!(err, ArtifactError::ManifestMismatch { .. }), "{err}");
}
