//! A farm worker's check of the program a task's key folded (`TaskSpec::programs`, the
//! default runtime input): the command's first word is resolved here as the client resolved
//! it (an absolute path as is, a bare name on the task's `PATH`, symlinks followed) and its
//! bytes' digest compared with the client's. Another build of the tool here would file, under
//! the client's key, what the client's machine does not produce — so a mismatch is the task's
//! error. A relative word (`../tools/x`, outside the client's workspace) cannot be found the
//! same way in an exec root and is not checked. The words the client found nowhere on its
//! `PATH` (`TaskSpec::absent_programs`) must be nowhere here either. The runner checks before
//! the run (a [`Mismatch`] refuses the task) and after a successful one (a change while it
//! ran withholds its outputs). Digests are memoised per process by stat.

use std::collections::HashMap;
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use prova_protocol::Digest;
use prova_protocol::spec::ProgramCheck;
use prova_protocol::task::OwnedTask;

/// A program's identity: a change of any of these reads it again.
type Stat = (PathBuf, u64, u64, u64, i64, i64);

fn memo() -> &'static Mutex<HashMap<Stat, Digest>> {
    static MEMO: OnceLock<Mutex<HashMap<Stat, Digest>>> = OnceLock::new();
    MEMO.get_or_init(Default::default)
}

/// Where `word` resolves with `path_var` (`None`: a relative word, not checked; `Some(None)`:
/// not found).
fn resolve(word: &str, path_var: Option<&str>) -> Option<Option<PathBuf>> {
    if word.starts_with('/') {
        return Some(std::fs::canonicalize(word).ok());
    }
    if word.contains('/') {
        return None;
    }
    let found = std::env::split_paths(path_var.unwrap_or_default())
        .filter(|d| d.is_absolute())
        .map(|d| d.join(word))
        .find(|p| std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.mode() & 0o111 != 0));
    Some(found.and_then(|p| std::fs::canonicalize(p).ok()))
}

fn digest(path: &Path) -> std::io::Result<Digest> {
    let m = std::fs::metadata(path)?;
    let stat = (
        path.to_path_buf(),
        m.dev(),
        m.ino(),
        m.size(),
        m.mtime() * 1_000_000_000 + m.mtime_nsec(),
        m.ctime() * 1_000_000_000 + m.ctime_nsec(),
    );
    if let Ok(memo) = memo().lock()
        && let Some(d) = memo.get(&stat)
    {
        return Ok(*d);
    }
    let d = Digest::of_file(path)?;
    if let Ok(mut memo) = memo().lock() {
        memo.insert(stat, d);
    }
    Ok(d)
}

/// A program the worker's lookup gives otherwise than the client's key says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mismatch {
    /// The word the command looks up.
    pub word: String,
    /// What it is here.
    pub here: String,
    /// What it was on the client.
    pub client: String,
}

impl Mismatch {
    /// Why the task does not run here (found before it ran).
    pub fn refusal(&self) -> String {
        format!(
            "program `{}` differs on this worker: here {}, on the client {}; the task's key is \
             the client's program, so it does not run here (install the same build on the \
             farm, set `portable = true` on the task, or `[workspace] runtime_binary = false`)",
            self.word, self.here, self.client
        )
    }

    /// Why the outputs of a run are not cached (found after it ran: the task or a neighbour
    /// installed, removed or rebuilt the program while it ran).
    pub fn changed_while_running(&self) -> String {
        format!(
            "program `{}` changed on this worker while the task ran: now {}, on the client {}; \
             the run may have started it, and its key says otherwise",
            self.word, self.here, self.client
        )
    }
}

/// The first program of the task that this worker's lookups give otherwise than the client:
/// one of `checks` resolved to other bytes or to nothing, or one of `absent` (found nowhere
/// on the client) found here. `env` is the task's environment (its `PATH` is searched).
pub fn mismatch_blocking(
    checks: &[ProgramCheck],
    absent: &[String],
    env: &[(String, String)],
) -> Option<Mismatch> {
    let path_var = env.iter().rev().find(|(k, _)| k == "PATH").map(|(_, v)| v.as_str());
    for check in checks {
        let Some(found) = resolve(&check.word, path_var) else { continue };
        let here = match found.as_deref().map(|p| (p, digest(p))) {
            Some((_, Ok(d))) if d == check.digest => continue,
            Some((p, Ok(d))) => format!("`{}` (digest {})", p.display(), &d.to_hex()[..12]),
            Some((p, Err(e))) => format!("`{}` cannot be read ({e})", p.display()),
            None => "not found on its PATH".to_owned(),
        };
        let client = format!("`{}` (digest {})", check.path, &check.digest.to_hex()[..12]);
        return Some(Mismatch { word: check.word.clone(), here, client });
    }
    for word in absent {
        // Only bare words are sent; anything else is not this lookup's to judge.
        if word.contains('/') {
            continue;
        }
        if let Some(Some(p)) = resolve(word, path_var) {
            return Some(Mismatch {
                word: word.clone(),
                here: format!("`{}`", p.display()),
                client: "found nowhere on its PATH (the key holds no program for it)".to_owned(),
            });
        }
    }
    None
}

/// What [`mismatch`] found: a program that differs, or a check that could not be made
/// (which counts against the task as a difference does).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Finding {
    /// A program differs.
    Differs(Mismatch),
    /// The check failed (why).
    Failed(String),
}

impl Finding {
    /// [`Mismatch::refusal`], or why the check failed.
    pub fn refusal(self) -> String {
        match self {
            Self::Differs(m) => m.refusal(),
            Self::Failed(why) => why,
        }
    }

    /// [`Mismatch::changed_while_running`], or why the check failed.
    pub fn changed_while_running(self) -> String {
        match self {
            Self::Differs(m) => m.changed_while_running(),
            Self::Failed(why) => why,
        }
    }
}

/// [`mismatch_blocking`] on the blocking pool (it stats and may read programs).
pub async fn mismatch(
    checks: &[ProgramCheck],
    absent: &[String],
    env: &[(String, String)],
) -> Option<Finding> {
    let (checks, absent, env) = (checks.to_vec(), absent.to_vec(), env.to_vec());
    OwnedTask::spawn_blocking("worker.programs", move || mismatch_blocking(&checks, &absent, &env))
        .join()
        .await
        .map_or_else(
            |e| Some(Finding::Failed(format!("checking the task's programs failed: {e}"))),
            |m| m.map(Finding::Differs),
        )
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt as _;

    use super::*;

    fn install(dir: &Path, body: &str) -> PathBuf {
        let p = dir.join("tool");
        let tmp = dir.join(".tool.tmp");
        std::fs::write(&tmp, body).expect("write");
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        std::fs::rename(&tmp, &p).expect("rename");
        p
    }

    #[test]
    fn the_same_program_passes_another_build_or_none_is_refused() {
        let dir = tempfile::tempdir().expect("dir");
        let tool = install(dir.path(), "#!/bin/sh\n# 1\n");
        let env = vec![("PATH".to_owned(), dir.path().display().to_string())];
        let check =
            |d: Digest| ProgramCheck { word: "tool".into(), path: "/opt/tool".into(), digest: d };
        let same = Digest::of_file(&tool).expect("digest");
        assert_eq!(mismatch_blocking(&[check(same)], &[], &env), None);
        install(dir.path(), "#!/bin/sh\n# 2, another build\n");
        let why = mismatch_blocking(&[check(same)], &[], &env).expect("another build differs");
        let why = why.refusal();
        assert!(why.contains("program `tool` differs") && why.contains("/opt/tool"), "{why}");
        let nowhere = [("PATH".to_owned(), "/nonexistent".to_owned())];
        let none = mismatch_blocking(&[check(same)], &[], &nowhere);
        assert!(none.is_some_and(|m| m.here.contains("not found")));
        // A relative word is not checked.
        let rel = ProgramCheck { word: "../x/tool".into(), path: "/w/x/tool".into(), digest: same };
        assert_eq!(mismatch_blocking(&[rel], &[], &env), None);
    }

    #[test]
    fn a_program_the_client_found_nowhere_must_be_nowhere_here() {
        let dir = tempfile::tempdir().expect("dir");
        let env = vec![("PATH".to_owned(), dir.path().display().to_string())];
        let absent = ["tool".to_owned()];
        assert_eq!(mismatch_blocking(&[], &absent, &env), None, "nowhere here either");
        // Not executable: not what a lookup starts.
        std::fs::write(dir.path().join("tool"), "data").expect("write");
        assert_eq!(mismatch_blocking(&[], &absent, &env), None);
        let tool = install(dir.path(), "#!/bin/sh\n");
        let m = mismatch_blocking(&[], &absent, &env).expect("found here");
        assert_eq!(m.word, "tool");
        assert!(m.here.contains(&tool.display().to_string()), "{m:?}");
        assert!(m.changed_while_running().contains("changed on this worker"), "{m:?}");
        // A word with a slash is not a PATH lookup.
        assert_eq!(mismatch_blocking(&[], &[format!("{}", tool.display())], &env), None);
    }
}
