//! The divergence report of a failed determinism proof: for each changed output file, the
//! first lines of a unified diff (text) or sizes and digests (binary). Both artifacts are
//! unpacked (bounded) into scratch directories that are removed afterwards. Also the modes
//! that differ ([`mode_changes`]): the fingerprint folds only the exec bit, a restore sets
//! the whole mode.

use std::fs;
use std::io::Read;
use std::path::Path;

use prova_protocol::Digest;
use prova_protocol::artifact::{self, UnpackLimits};
use prova_protocol::events::{FileDivergence, ModeChange};
use prova_protocol::manifest::{EntryKind, OutputManifest};

use super::LayerError;

/// Files reported in detail (the rest are only named in the verdict's lists).
pub const MAX_FILES: usize = 20;
/// Bytes of each side read for a text diff; larger files get sizes and digests.
pub const MAX_TEXT_BYTES: u64 = 1 << 20;
/// Lines of unified diff kept per file.
pub const MAX_DIFF_LINES: usize = 40;
/// Bytes an artifact may unpack to for the comparison.
pub const MAX_UNPACK_BYTES: u64 = 4 << 30;

/// Compares `changed` files of two artifacts (first run `a`, re-run `b`).
pub fn compare(
    a: fs::File,
    b: fs::File,
    changed: &[String],
    scratch: &Path,
) -> Result<Vec<FileDivergence>, LayerError> {
    fs::create_dir_all(scratch)
        .map_err(|e| LayerError::Io { path: scratch.to_owned(), source: e })?;
    let dir_a = tempfile::Builder::new()
        .prefix("diff-a-")
        .tempdir_in(scratch)
        .map_err(|e| LayerError::Io { path: scratch.to_owned(), source: e })?;
    let dir_b = tempfile::Builder::new()
        .prefix("diff-b-")
        .tempdir_in(scratch)
        .map_err(|e| LayerError::Io { path: scratch.to_owned(), source: e })?;
    let mut limits = UnpackLimits::new(vec![String::new()]);
    limits.max_total_bytes = MAX_UNPACK_BYTES;
    artifact::unpack(std::io::BufReader::new(a), dir_a.path(), &limits)?;
    artifact::unpack(std::io::BufReader::new(b), dir_b.path(), &limits)?;
    Ok(changed.iter().take(MAX_FILES).map(|p| file(dir_a.path(), dir_b.path(), p)).collect())
}

fn file(a: &Path, b: &Path, rel: &str) -> FileDivergence {
    let (ba, sa) = read(&a.join(rel));
    let (bb, sb) = read(&b.join(rel));
    let diff = match (&ba, &bb) {
        (Some(x), Some(y)) => text_diff(rel, x, y),
        _ => None,
    };
    FileDivergence {
        path: rel.to_owned(),
        diff,
        sizes: (sa, sb),
        digests: (digest(&a.join(rel)), digest(&b.join(rel))),
    }
}

/// The file's bytes when small enough for a text diff, and its size.
fn read(p: &Path) -> (Option<Vec<u8>>, u64) {
    let Ok(meta) = fs::symlink_metadata(p) else { return (None, 0) };
    if !meta.is_file() || meta.len() > MAX_TEXT_BYTES {
        return (None, meta.len());
    }
    let mut buf = Vec::new();
    match fs::File::open(p).and_then(|f| f.take(MAX_TEXT_BYTES).read_to_end(&mut buf)) {
        Ok(_) => (Some(buf), meta.len()),
        Err(_) => (None, meta.len()),
    }
}

fn digest(p: &Path) -> Option<Digest> {
    fs::symlink_metadata(p).ok().filter(|m| m.is_file()).and_then(|_| Digest::of_file(p).ok())
}

/// A unified diff of two texts, first lines only; `None` for binary content.
pub fn text_diff(name: &str, a: &[u8], b: &[u8]) -> Option<String> {
    let (Ok(x), Ok(y)) = (std::str::from_utf8(a), std::str::from_utf8(b)) else { return None };
    if x.contains('\0') || y.contains('\0') {
        return None;
    }
    let diff = similar::TextDiff::from_lines(x, y);
    let full = diff
        .unified_diff()
        .context_radius(2)
        .header(&format!("{name} (first run)"), &format!("{name} (re-run)"))
        .to_string();
    let mut lines: Vec<&str> = full.lines().take(MAX_DIFF_LINES + 1).collect();
    let cut = lines.len() > MAX_DIFF_LINES;
    lines.truncate(MAX_DIFF_LINES);
    let mut out = lines.join("\n");
    if cut {
        out.push_str("\n…");
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_and_binary() {
        let d = text_diff("dist/a.txt", b"one\ntwo\n", b"one\nthree\n").unwrap();
        assert!(d.contains("-two") && d.contains("+three"), "{d}");
        assert!(text_diff("b", b"\x00\x01", b"\x00\x02").is_none());
        assert!(text_diff("c", &[0xff, 0xfe], b"x").is_none());
    }
}

// ---- mode changes (the fingerprint folds only the exec bit; restores set the whole mode) ----

/// Most mode changes a verdict names.
const MAX_MODES: usize = 20;

/// Entries in both trees whose permission bits differ, except where the re-run's mode is
/// the first run's with the re-run's `umask` cleared (the perturbation itself: a file made
/// with the default mode). Both manifests are sorted by path.
pub fn mode_changes(first: &OutputManifest, rerun: &OutputManifest, umask: u32) -> Vec<ModeChange> {
    let mut out = Vec::new();
    let mut b = rerun.entries.iter().peekable();
    for x in &first.entries {
        while b.peek().is_some_and(|y| y.path < x.path) {
            b.next();
        }
        let Some(y) = b.peek().filter(|y| y.path == x.path) else { continue };
        if x.kind != y.kind || x.kind == EntryKind::Symlink {
            continue;
        }
        let (m1, m2) = (x.mode & 0o7777, y.mode & 0o7777);
        if m1 != m2 && m2 != m1 & !umask && out.len() < MAX_MODES {
            out.push(ModeChange { path: x.path.clone(), modes: (m1, m2) });
        }
    }
    out
}

#[cfg(test)]
mod mode_tests {
    use super::*;
    use prova_protocol::manifest::ManifestEntry;

    fn file(path: &str, mode: u32) -> ManifestEntry {
        ManifestEntry {
            path: path.into(),
            kind: EntryKind::File,
            mode,
            size: 1,
            digest: Some(prova_protocol::Digest::of(b"x")),
            mtime_ns: 0,
            link_target: None,
        }
    }

    #[test]
    fn umask_explained_modes_are_not_changes() {
        let a = OutputManifest::new(vec![file("a", 0o644), file("b", 0o644), file("c", 0o640)]);
        let b = OutputManifest::new(vec![file("a", 0o600), file("b", 0o444), file("c", 0o604)]);
        let got = mode_changes(&a, &b, 0o077);
        assert_eq!(
            got,
            vec![
                ModeChange { path: "b".into(), modes: (0o644, 0o444) },
                ModeChange { path: "c".into(), modes: (0o640, 0o604) },
            ]
        );
    }
}
