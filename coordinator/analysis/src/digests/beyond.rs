//! A symlink input that leads out of the workspace (`src/shared -> ../../../shared-lib`,
//! `config.json -> /etc/app/config.json`). Its text alone was keyed, so the bytes a task read
//! through it could change and the entry still hit: wrong bytes served. Its digest now also
//! folds what it leads to, read afresh on every run (the link's own stat stamps say nothing
//! of its target's, so the memo never answers for it):
//!
//! - a file: its bytes;
//! - a directory (an `npm link`ed package, its own `node_modules` included): every entry
//!   under it, sorted — path, kind, a link's text (never followed further), and a file's
//!   stat stamps (size, mtime, ctime, inode, mode: a write moves them, and a key out there is
//!   this machine's anyway), or its bytes when it changed within the racy window
//!   ([`super::RACY_WINDOW_NS`]), where a later write in the same tick could leave the stamps
//!   as they were — at most [`MAX_ENTRIES`] entries and [`MAX_BYTES`] bytes read; past either
//!   the digest folds the moment too, so it never hits (and never serves a wrong entry)
//!   rather than key part of the directory;
//! - nothing there (a dangling link): that absence, so the target appearing is a miss.
//!
//! A link inside the workspace keeps its text alone: what it leads to is a workspace path,
//! keyed as an input or named by the inputs proof when read undeclared.

use std::fs;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use prova_protocol::Digest;

use super::lexical;

/// Most entries of a directory outside the workspace folded into one link's digest.
pub(super) const MAX_ENTRIES: usize = 200_000;

/// Most file bytes read under such a directory (files changed within the racy window).
pub(super) const MAX_BYTES: u64 = 64 << 20;

/// Where symlink input `rel` leads, when that is outside the workspace at (canonical)
/// `root`: the link followed to the end, or, when that fails (dangling, a loop), its text's
/// own place. `None` inside the workspace, or when `rel` is not a link.
pub(crate) fn beyond(root: &Path, rel: &str) -> Option<PathBuf> {
    let abs = root.join(rel);
    let end = match fs::canonicalize(&abs) {
        Ok(p) => p,
        Err(_) => {
            let text = fs::read_link(&abs).ok()?;
            lexical(&if text.is_absolute() { text } else { abs.parent()?.join(text) })
        }
    };
    (!end.starts_with(root)).then_some(end)
}

/// The place link `rel` (workspace-relative, in a real directory: a walk that never follows
/// a link found it) sends a lookup to on its first hop, given its `text`: the leading `..`
/// taken against the link's directory — exact, since every directory above a real one is
/// its real parent — and the rest of the text as written, for the kernel to resolve. An
/// absolute text is itself. Links in different directories that lead to one place share it
/// (`packages/*/node_modules/dep -> ../../../dep` all give `packages/dep`). Workspace-relative
/// (it may begin with `..`); `None` for a text that is not UTF-8.
pub(crate) fn first_hop(rel: &str, text: &Path) -> Option<String> {
    use std::path::Component;
    if text.is_absolute() {
        return text.to_str().map(str::to_owned);
    }
    let mut base: Vec<&str> = rel.split('/').collect();
    base.pop();
    let mut up = 0;
    let mut comps = text.components().peekable();
    while let Some(c) = comps.peek() {
        match c {
            Component::ParentDir => {
                if base.pop().is_none() {
                    up += 1;
                }
            }
            Component::CurDir => {}
            _ => break,
        }
        comps.next();
    }
    let mut parts: Vec<&str> = vec![".."; up];
    parts.extend(base);
    for c in comps {
        parts.push(c.as_os_str().to_str()?);
    }
    Some(parts.join("/"))
}

/// Whether a link whose [`first_hop`] is `hop` may lead out of the tree at `tree` (both
/// workspace-relative): an absolute hop, one outside the tree, or one whose rest goes up
/// again (`sub/../..`: through a link of the tree, which the kernel follows before the `..`).
pub(crate) fn leaves(tree: &str, hop: &str) -> bool {
    Path::new(hop).is_absolute()
        || hop.split('/').skip_while(|c| *c == "..").any(|c| c == "..")
        || !hop.strip_prefix(tree).is_some_and(|r| r.starts_with('/'))
}

/// Where a lookup sent to `hop` ([`first_hop`]) ends, when that is outside the workspace at
/// (canonical) `root`: followed to the end now, or, when that fails (dangling, a loop), the
/// hop's own place. `None` inside the workspace.
pub(crate) fn hop_beyond(root: &Path, hop: &str) -> Option<PathBuf> {
    let at = root.join(hop);
    let end = fs::canonicalize(&at).unwrap_or_else(|_| lexical(&at));
    (!end.starts_with(root)).then_some(end)
}

/// What is at `target` (outside the workspace), as bytes to fold into the link's digest.
pub(crate) fn state(target: &Path) -> Vec<u8> {
    let mut out = Vec::new();
    match fs::metadata(target) {
        Err(_) => out.extend_from_slice(b"absent"),
        Ok(m) if m.is_file() => {
            out.extend_from_slice(b"file\0");
            match Digest::of_file(target) {
                Ok(d) => out.extend_from_slice(d.to_string().as_bytes()),
                Err(_) => unbounded(&mut out),
            }
        }
        Ok(m) if m.is_dir() => {
            out.extend_from_slice(b"dir\0");
            walk(target, &mut out);
        }
        Ok(m) => {
            use std::os::unix::fs::MetadataExt as _;
            let _ = write!(out, "other\0{:o}", m.mode());
        }
    }
    out
}

/// Folds every entry under `dir` into `out` (see the module docs).
fn walk(dir: &Path, out: &mut Vec<u8>) {
    let (mut entries, mut bytes) = (0usize, 0u64);
    // Taken before any stat: a file changed after it is read, never trusted by its stamps.
    let now_ns = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(i64::MAX, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX));
    let mut todo = vec![PathBuf::new()];
    while let Some(sub) = todo.pop() {
        let Ok(rd) = fs::read_dir(dir.join(&sub)) else {
            unbounded(out);
            return;
        };
        let mut names: Vec<_> = rd.filter_map(Result::ok).map(|e| e.file_name()).collect();
        names.sort();
        // Subdirectories are pushed in reverse so they are walked in order.
        let mut subdirs = Vec::new();
        for name in names {
            entries += 1;
            if entries > MAX_ENTRIES {
                unbounded(out);
                return;
            }
            let rel = sub.join(&name);
            let abs = dir.join(&rel);
            let Ok(m) = fs::symlink_metadata(&abs) else { continue };
            out.extend_from_slice(rel.as_os_str().as_encoded_bytes());
            if m.file_type().is_symlink() {
                out.extend_from_slice(b"\0l\0");
                if let Ok(t) = fs::read_link(&abs) {
                    out.extend_from_slice(t.as_os_str().as_encoded_bytes());
                }
            } else if m.is_dir() {
                out.extend_from_slice(b"\0d");
                subdirs.push(rel);
            } else if m.is_file() {
                use std::os::unix::fs::MetadataExt as _;
                let changed_ns = (m.mtime() * 1_000_000_000 + m.mtime_nsec())
                    .max(m.ctime() * 1_000_000_000 + m.ctime_nsec());
                let _ = write!(
                    out,
                    "\0f\0{} {} {} {} {} {} {:o}",
                    m.len(),
                    m.mtime(),
                    m.mtime_nsec(),
                    m.ctime(),
                    m.ctime_nsec(),
                    m.ino(),
                    m.mode()
                );
                if changed_ns >= now_ns.saturating_sub(super::RACY_WINDOW_NS) {
                    bytes += m.len();
                    if bytes > MAX_BYTES {
                        unbounded(out);
                        return;
                    }
                    out.push(0);
                    match Digest::of_file(&abs) {
                        Ok(d) => out.extend_from_slice(d.to_string().as_bytes()),
                        Err(_) => unbounded(out),
                    }
                }
            }
            out.push(b'\n');
        }
        todo.extend(subdirs.into_iter().rev());
    }
}

/// Folds the moment: a digest that never repeats, for what could not be read whole.
fn unbounded(out: &mut Vec<u8>) {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let _ = write!(out, "\0unbounded\0{now}\0{}", std::process::id());
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    #[test]
    fn a_links_first_hop_takes_its_leading_dotdots_and_keeps_the_rest() {
        let hop = |rel: &str, text: &str| first_hop(rel, Path::new(text)).unwrap();
        assert_eq!(hop("packages/a/node_modules/@s/dep", "../../../dep"), "packages/dep");
        assert_eq!(hop("packages/b/node_modules/@s/dep", "../../../dep"), "packages/dep");
        assert_eq!(hop("node_modules/dep", "../vendor/./dep"), "vendor/dep");
        assert_eq!(hop("node_modules/dep", "../../../out"), "../../out");
        assert_eq!(
            hop("node_modules/.bin/x", "../x/bin/../cli.js"),
            "node_modules/x/bin/../cli.js"
        );
        assert_eq!(hop("node_modules/dep", "/abs/dep"), "/abs/dep");
        for (hop, out) in [
            ("packages/dep", true),
            ("node_modules/x/cli.js", false),
            ("node_modules/x/bin/../cli.js", true),
            ("node_modulesx/y", true),
            ("../../out", true),
            ("/abs/dep", true),
        ] {
            assert_eq!(leaves("node_modules", hop), out, "{hop}");
        }
    }

    #[test]
    fn only_links_that_leave_the_workspace_are_followed_and_what_is_there_is_folded() {
        let t = tempfile::tempdir().unwrap();
        let base = t.path().canonicalize().unwrap();
        let (ws, out) = (base.join("ws"), base.join("out"));
        fs::create_dir_all(ws.join("p/src")).unwrap();
        fs::create_dir_all(out.join("lib/deep")).unwrap();
        fs::write(out.join("cfg"), "v1").unwrap();
        fs::write(out.join("lib/deep/x.js"), "x").unwrap();
        symlink("../../../out/cfg", ws.join("p/src/cfg")).unwrap();
        symlink(out.join("lib"), ws.join("p/src/lib")).unwrap();
        symlink("../../../out/missing", ws.join("p/src/gone")).unwrap();
        symlink("../a.txt", ws.join("p/src/inside")).unwrap();
        symlink("cfg", ws.join("p/src/chain")).unwrap(); // inside, then out
        assert_eq!(beyond(&ws, "p/src/cfg"), Some(out.join("cfg")));
        assert_eq!(beyond(&ws, "p/src/lib"), Some(out.join("lib")));
        assert_eq!(beyond(&ws, "p/src/gone"), Some(out.join("missing")));
        assert_eq!(beyond(&ws, "p/src/chain"), Some(out.join("cfg")));
        assert_eq!(beyond(&ws, "p/src/inside"), None);
        // A file's bytes, a directory's entries, an absence: each change is another state.
        let (file, dir, gone) =
            (state(&out.join("cfg")), state(&out.join("lib")), state(&out.join("missing")));
        assert_eq!(state(&out.join("cfg")), file, "the same bytes, the same state");
        assert_eq!(state(&out.join("lib")), dir);
        fs::write(out.join("cfg"), "v2").unwrap();
        fs::write(out.join("lib/deep/x.js"), "y").unwrap();
        fs::write(out.join("missing"), "").unwrap();
        assert_ne!(state(&out.join("cfg")), file);
        assert_ne!(state(&out.join("lib")), dir);
        assert_ne!(state(&out.join("missing")), gone);
        let before = state(&out.join("lib"));
        fs::write(out.join("lib/new.js"), "").unwrap();
        assert_ne!(state(&out.join("lib")), before, "an entry added");
    }

    #[test]
    fn a_directory_past_the_bounds_never_gives_the_same_state_twice() {
        let t = tempfile::tempdir().unwrap();
        // Past the bytes read (every file here is fresh, so read), the same.
        let big = vec![0u8; 1 << 20];
        for i in 0..=(MAX_BYTES >> 20) {
            fs::write(t.path().join(format!("f{i}")), &big).unwrap();
        }
        assert_ne!(state(t.path()), state(t.path()));
    }
}
