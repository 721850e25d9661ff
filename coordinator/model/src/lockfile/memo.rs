//! The lockfile memo: what a lockfile resolved to per project, kept under the lockfile's
//! content digest so a run whose lockfile did not change neither reads nor parses it
//! (issue 31: a 10,000-package `package-lock.json` was parsed on every warm run).
//!
//! One file per lockfile under the memo directory (`.prova/lockfiles/`), named by the
//! digest of the lockfile's workspace-relative path, holding the memo key and, per project
//! directory, the digest of its externals ([`super::digest_of`]). The key folds everything
//! the answer is a function of: [`MEMO_VERSION`], the path (its base name picks the parser),
//! the lockfile's content digest, the project directories asked for, and — for the formats
//! whose parser reads the projects' manifests (yarn v1, Cargo) — the manifests' text. A
//! stored key that differs in any of them is a miss: the file is parsed and the memo
//! rewritten. Anything unreadable, too large or malformed is a miss too, never an error.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use prova_protocol::Digest;
use prova_protocol::digest::Fold;

use super::Manifests;

/// Bumped when what a memo holds, or how a lockfile is resolved, changes.
pub const MEMO_VERSION: u64 = 1;

/// A memo file larger than this is not read (a miss).
const MAX_MEMO_BYTES: u64 = 64 << 20;

/// Whether the parser of `path`'s format reads the projects' manifests.
pub fn needs_manifests(path: &str) -> bool {
    let base = path.rsplit('/').next().unwrap_or(path);
    matches!(base, "yarn.lock" | "Cargo.lock")
}

/// The memo key of lockfile `path` with content `content`, for the projects at `dirs`
/// (`manifests`: only for the formats that [`needs_manifests`]).
pub fn key(path: &str, content: &Digest, dirs: &[&str], manifests: Option<&Manifests>) -> Digest {
    let mut f = Fold::new("prova lockfile memo");
    f.u64(MEMO_VERSION).str(path).digest(content);
    let mut sorted: Vec<&str> = dirs.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    f.u64(sorted.len() as u64);
    for d in sorted {
        f.str(d);
    }
    match manifests {
        None => {
            f.tag(0);
        }
        Some(m) => {
            f.tag(1).u64(m.by_dir.len() as u64);
            for (dir, files) in &m.by_dir {
                f.str(dir).u64(files.len() as u64);
                for (name, text) in files {
                    f.str(name).str(text);
                }
            }
        }
    }
    f.finish()
}

/// One lockfile's memo file.
#[derive(serde::Serialize, serde::Deserialize)]
struct Stored {
    /// The [`key`] it answers.
    key: Digest,
    /// Project directory (normalised) → the digest of its externals.
    digests: BTreeMap<String, Digest>,
}

/// The memo directory's file for lockfile `path`.
fn file_of(dir: &Path, path: &str) -> PathBuf {
    dir.join(format!("{}.json", Digest::of(path.as_bytes()).to_hex()))
}

/// The memoised per-project digests of lockfile `path` under `key`, if the memo holds them.
pub fn load(dir: &Path, path: &str, key: &Digest) -> Option<BTreeMap<String, Digest>> {
    use std::io::Read;
    let file = std::fs::File::open(file_of(dir, path)).ok()?;
    let mut bytes = Vec::new();
    file.take(MAX_MEMO_BYTES + 1).read_to_end(&mut bytes).ok()?;
    if bytes.len() as u64 > MAX_MEMO_BYTES {
        return None;
    }
    let stored: Stored = serde_json::from_slice(&bytes).ok()?;
    (stored.key == *key).then_some(stored.digests)
}

/// Records `digests` for lockfile `path` under `key` (written to a temporary file and
/// renamed, so a reader sees the old memo or the new one). A failure is logged and
/// otherwise ignored: the next run parses again.
pub fn store(dir: &Path, path: &str, key: &Digest, digests: BTreeMap<String, Digest>) {
    let write = || -> std::io::Result<()> {
        std::fs::create_dir_all(dir)?;
        let target = file_of(dir, path);
        let bytes = serde_json::to_vec(&Stored { key: *key, digests })
            .map_err(|e| std::io::Error::other(e.to_string()))?;
        let tmp = target.with_extension(format!("tmp{}", std::process::id()));
        std::fs::write(&tmp, bytes)?;
        std::fs::rename(&tmp, &target)
    };
    if let Err(e) = write() {
        tracing::debug!("{path}: lockfile memo not written ({e})");
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Keyed, MemoSource};
    use prova_protocol::Digest;

    const LOCK: &str = include_str!("../../../../examples/tsmono/package-lock.json");
    const DIRS: [&str; 3] = ["packages/core", "packages/fmt", "packages/app"];

    /// A workspace holding `lock` as its `package-lock.json`, and its memo directory.
    fn workspace(lock: &str) -> (tempfile::TempDir, std::path::PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("package-lock.json"), lock).unwrap();
        let memo = dir.path().join(".prova").join("lockfiles");
        (dir, memo)
    }

    fn load(root: &std::path::Path, memo: &std::path::Path, content: Option<Digest>) -> Keyed {
        let content = move |p: &str| (p == "package-lock.json").then_some(content).flatten();
        let src = MemoSource { dir: memo, content: &content };
        Keyed::load_memoised(root, &["package-lock.json"], &DIRS, &src)
    }

    fn pairs(k: &Keyed) -> Vec<Vec<(String, String)>> {
        DIRS.iter().chain(&["", "packages/unknown"]).map(|d| k.config_pairs(d)).collect()
    }

    #[test]
    fn an_unchanged_lockfile_is_answered_by_the_memo_without_a_parse() {
        let (ws, memo) = workspace(LOCK);
        let digest = Digest::of(LOCK.as_bytes());
        let first = load(ws.path(), &memo, Some(digest));
        assert_eq!(first.parsed, ["package-lock.json"]);
        assert!(first.is_keyed("package-lock.json"));
        let plain = Keyed::load(ws.path(), &["package-lock.json"], &DIRS);
        assert_eq!(pairs(&first), pairs(&plain), "a parse through the memo keys as one without");

        let second = load(ws.path(), &memo, Some(digest));
        assert!(second.parsed.is_empty(), "the same digest: the memo answers");
        assert!(second.is_keyed("package-lock.json"));
        assert_eq!(pairs(&second)[..DIRS.len()], pairs(&plain)[..DIRS.len()]);
        assert!(second.fallbacks.is_empty());

        // Not even read: the file replaced by bytes that do not parse, under the digest the
        // memo knows, still gets the memoised answer.
        std::fs::write(ws.path().join("package-lock.json"), "not json").unwrap();
        let third = load(ws.path(), &memo, Some(digest));
        assert!(third.parsed.is_empty() && third.fallbacks.is_empty());
        assert_eq!(pairs(&third)[..DIRS.len()], pairs(&plain)[..DIRS.len()]);
    }

    #[test]
    fn a_changed_lockfile_is_parsed_again_and_the_memo_rewritten() {
        let (ws, memo) = workspace(LOCK);
        load(ws.path(), &memo, Some(Digest::of(LOCK.as_bytes())));
        // core's external moves to another version: its key and its dependents' change.
        let moved = LOCK.replace("sha512-+FbBPE1o", "sha512-XFbBPE1o");
        assert_ne!(moved, LOCK);
        std::fs::write(ws.path().join("package-lock.json"), &moved).unwrap();
        let digest = Digest::of(moved.as_bytes());
        let after = load(ws.path(), &memo, Some(digest));
        assert_eq!(after.parsed, ["package-lock.json"], "a new digest: parsed");
        let plain = Keyed::load(ws.path(), &["package-lock.json"], &DIRS);
        assert_eq!(pairs(&after), pairs(&plain));
        let old = workspace(LOCK).0;
        let before = Keyed::load(old.path(), &["package-lock.json"], &DIRS);
        assert_ne!(after.config_pairs("packages/core"), before.config_pairs("packages/core"));
        // … and the memo now answers the new digest, not the old one.
        assert!(load(ws.path(), &memo, Some(digest)).parsed.is_empty());
        assert_eq!(load(ws.path(), &memo, Some(Digest::of(LOCK.as_bytes()))).parsed.len(), 1);
    }

    #[test]
    fn a_lockfile_rewritten_after_its_digest_was_taken_is_not_memoised_under_it() {
        let (ws, memo) = workspace(LOCK);
        let old = Digest::of(LOCK.as_bytes());
        let moved = LOCK.replace("sha512-+FbBPE1o", "sha512-XFbBPE1o");
        let expected = {
            let k = load(ws.path(), &memo, Some(old));
            std::fs::remove_dir_all(&memo).unwrap();
            pairs(&k)
        };
        // The digest pass saw the old bytes; an install rewrote the file before the parse.
        std::fs::write(ws.path().join("package-lock.json"), &moved).unwrap();
        let racing = load(ws.path(), &memo, Some(old));
        assert_eq!(racing.parsed.len(), 1);
        // Back to the old bytes: the answer must be the old bytes', from a parse or a memo
        // written from them — never the new bytes' filed under the old digest.
        std::fs::write(ws.path().join("package-lock.json"), LOCK).unwrap();
        let back = load(ws.path(), &memo, Some(old));
        assert_eq!(
            back.parsed.len(),
            1,
            "nothing was memoised under a digest the bytes did not have"
        );
        assert_eq!(pairs(&back), expected);
    }

    #[test]
    fn without_a_content_digest_or_with_a_broken_memo_the_file_is_parsed() {
        let (ws, memo) = workspace(LOCK);
        let digest = Digest::of(LOCK.as_bytes());
        // No digest (a symlinked lockfile, whose digest is its target's name): never memoised.
        assert_eq!(load(ws.path(), &memo, None).parsed.len(), 1);
        assert_eq!(load(ws.path(), &memo, None).parsed.len(), 1);
        load(ws.path(), &memo, Some(digest));
        for entry in std::fs::read_dir(&memo).unwrap() {
            std::fs::write(entry.unwrap().path(), "{\"key\": 1").unwrap();
        }
        let k = load(ws.path(), &memo, Some(digest));
        assert_eq!(k.parsed.len(), 1, "a memo that does not decode is a miss");
        assert!(k.fallbacks.is_empty());
        // Other projects asked about: another key.
        let src_content = move |_: &str| Some(digest);
        let src = MemoSource { dir: &memo, content: &src_content };
        let other =
            Keyed::load_memoised(ws.path(), &["package-lock.json"], &["packages/math"], &src);
        assert_eq!(other.parsed.len(), 1);
    }
}
