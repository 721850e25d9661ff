//! The default runtime input: the program a task's command starts. A toolchain upgrade
//! (`node`, `tsc` installed globally, `rustc`) changes outputs without changing a file the key
//! sees; declaring `runtime = ["node --version"]` covers it, and by default prova also folds
//! the **resolved path and content digest of the command's first word** when it is a program
//! outside the workspace, as the config pair `binary:<word>`. A program inside the workspace
//! (`./node_modules/.bin/tsc`, `scripts/build.sh`) is a workspace file — its inputs and
//! installed trees key it. Shell builtins and keywords (`cd`, `echo`, `test`, `if`) start
//! nothing and are skipped; so are words the shell would expand (`$TOOL`).
//!
//! Digests are memoised in the cache's stat memo (scope [`SCOPE`], by absolute path), so a
//! warm run stats each program once and reads nothing. `[workspace] runtime_binary = false`
//! turns it off; a `portable = true` task never folds it (its outputs must not depend on the
//! machine, and a program's bytes differ per platform).

use std::collections::{BTreeMap, HashMap};
use std::ffi::OsStr;
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};

use prova_protocol::Digest;
use prova_protocol::spec::{CommandLine, ProgramCheck};

use super::digests::{Stamp, memo_row, row_proves_output};
use crate::cache::MemoRow;

/// The memo scope of program digests (paths in it are absolute).
pub const SCOPE: &str = "prova:binaries";

/// The config pair's name prefix.
pub const PREFIX: &str = "binary:";

/// Words `sh` runs itself: no program starts.
const BUILTINS: &[&str] = &[
    ".", ":", "[", "alias", "break", "case", "cd", "command", "continue", "do", "echo", "eval",
    "exec", "exit", "export", "false", "for", "getopts", "hash", "if", "printf", "pwd", "read",
    "readonly", "return", "set", "shift", "source", "test", "times", "trap", "true", "type",
    "ulimit", "umask", "unalias", "unset", "until", "wait", "while", "{", "(", "!",
];

/// The word naming the program `command` starts, if it names one a key can fold: an argv's
/// first element; a shell string's first word after `NAME=value` assignments, unless it is a
/// builtin or keyword or something the shell would expand.
pub fn first_word(command: &CommandLine) -> Option<String> {
    let word = match command {
        CommandLine::Argv(v) => v.first()?.clone(),
        CommandLine::Shell(s) => {
            let w = s.split_whitespace().find(|w| !is_assignment(w))?;
            if w.contains([
                '$', '`', '\'', '"', '*', '?', '[', '~', '(', ')', ';', '&', '|', '<', '>',
            ]) || BUILTINS.contains(&w)
            {
                return None;
            }
            w.to_owned()
        }
    };
    (!word.is_empty()).then_some(word)
}

fn is_assignment(w: &str) -> bool {
    w.split_once('=').is_some_and(|(name, _)| {
        !name.is_empty()
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            && !name.starts_with(|c: char| c.is_ascii_digit())
    })
}

/// Where `word` resolves for a task running in `cwd` of the workspace at `root` (a path
/// relative to `cwd`, else the first executable of that name on `path_var`), symlinks
/// followed — or `None` when it is not found or lies inside the workspace.
pub fn resolve(root: &Path, cwd: &Path, word: &str, path_var: Option<&OsStr>) -> Option<PathBuf> {
    let found = if word.contains('/') {
        Some(cwd.join(word))
    } else {
        std::env::split_paths(path_var?)
            .filter(|d| d.is_absolute())
            .map(|d| d.join(word))
            .find(|p| std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.mode() & 0o111 != 0))
    }?;
    let real = std::fs::canonicalize(found).ok()?;
    let root = std::fs::canonicalize(root).unwrap_or_else(|_| root.to_path_buf());
    (!real.starts_with(&root)).then_some(real)
}

/// Digests `paths`, reusing `memo` rows that are still valid. Returns the digests and the
/// rows to store (new or changed). A program that cannot be read is left out.
pub fn digest_all(
    paths: &[PathBuf],
    memo: &HashMap<String, MemoRow>,
    now_ns: i64,
) -> (BTreeMap<PathBuf, Digest>, Vec<(String, MemoRow)>) {
    let mut out = BTreeMap::new();
    let mut store = Vec::new();
    for p in paths {
        let name = p.to_string_lossy().into_owned();
        let Ok(meta) = std::fs::metadata(p) else { continue };
        let stamp = Stamp::of(&meta);
        // The ctime test of outputs: package managers pin programs' mtimes, ctime moves on
        // any write.
        if let Some(row) = memo.get(&name).filter(|r| row_proves_output(&stamp, r)) {
            out.insert(p.clone(), row.digest);
            continue;
        }
        let Ok(digest) = Digest::of_file(p) else { continue };
        out.insert(p.clone(), digest);
        store.push((name, memo_row(&stamp, digest, now_ns)));
    }
    (out, store)
}

/// What a farm worker must reproduce of a key's config pairs: each program folded, with the
/// client's path and digest ([`ProgramCheck`]).
pub fn checks(config: &[(String, String)]) -> Vec<ProgramCheck> {
    config
        .iter()
        .filter_map(|(k, v)| {
            let word = k.strip_prefix(PREFIX)?;
            let (path, hex) = v.rsplit_once(' ')?;
            Some(ProgramCheck {
                word: word.to_owned(),
                path: path.to_owned(),
                digest: hex.parse().ok()?,
            })
        })
        .collect()
}

/// The config pair for `word` resolved to `path` with `digest`.
pub fn pair(word: &str, path: &Path, digest: &Digest) -> (String, String) {
    (format!("{PREFIX}{word}"), format!("{} {}", path.display(), digest.to_hex()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_word_is_the_program_unless_the_shell_runs_it_itself() {
        let sh = |s: &str| first_word(&CommandLine::Shell(s.into()));
        assert_eq!(sh("tsc -p . && cp a b").as_deref(), Some("tsc"));
        assert_eq!(sh("NODE_ENV=production node build.js").as_deref(), Some("node"));
        assert_eq!(sh("./scripts/build.sh").as_deref(), Some("./scripts/build.sh"));
        for none in ["cd web && tsc", "echo hi", "test -f x", "if true; then :; fi", "$TOOL x", ""]
        {
            assert_eq!(sh(none), None, "{none}");
        }
        let argv = CommandLine::Argv(vec!["node".into(), "x.js".into()]);
        assert_eq!(first_word(&argv).as_deref(), Some("node"));
    }

    #[test]
    fn a_program_inside_the_workspace_is_not_folded_one_on_path_is() {
        let ws = tempfile::tempdir().expect("ws");
        let bin = tempfile::tempdir().expect("bin");
        for dir in [ws.path(), bin.path()] {
            let tool = dir.join("tool");
            std::fs::write(&tool, "#!/bin/sh\n").expect("write");
            use std::os::unix::fs::PermissionsExt as _;
            std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        }
        let path = std::env::join_paths([bin.path()]).expect("PATH");
        assert_eq!(resolve(ws.path(), ws.path(), "./tool", Some(&path)), None);
        let found = resolve(ws.path(), ws.path(), "tool", Some(&path)).expect("on PATH");
        assert!(found.starts_with(std::fs::canonicalize(bin.path()).expect("canon")));
        assert_eq!(resolve(ws.path(), ws.path(), "absent-tool", Some(&path)), None);
    }

    #[test]
    fn a_memoised_digest_is_reused_until_the_program_changes() {
        let dir = tempfile::tempdir().expect("dir");
        let tool = dir.path().join("tool");
        std::fs::write(&tool, "v1").expect("write");
        let far_future = i64::MAX / 2;
        let (d1, store) = digest_all(std::slice::from_ref(&tool), &HashMap::new(), far_future);
        assert_eq!(store.len(), 1, "a new program is stored");
        let memo: HashMap<String, MemoRow> = store.into_iter().collect();
        let (d2, store) = digest_all(std::slice::from_ref(&tool), &memo, far_future);
        assert_eq!(d1, d2);
        assert!(store.is_empty(), "a valid row is reused, nothing read");
        std::fs::write(&tool, "v2 longer").expect("rewrite");
        let (d3, store) = digest_all(std::slice::from_ref(&tool), &memo, far_future);
        assert_ne!(d1, d3, "a changed program is read again");
        assert_eq!(store.len(), 1);
        // A row recorded in the same instant the file changed is not trusted.
        let racy: HashMap<String, MemoRow> = store
            .into_iter()
            .map(|(k, mut r)| {
                r.recorded_ns = r.mtime_ns;
                r.digest = Digest([7; 32]);
                (k, r)
            })
            .collect();
        let (d4, _) = digest_all(std::slice::from_ref(&tool), &racy, far_future);
        assert_eq!(d4, d3, "a racy row is re-read");
    }
}
