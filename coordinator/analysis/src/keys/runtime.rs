//! Runtime inputs (`runtime = ["node --version"]` per task and in `[workspace]`): each
//! command runs once per process (memoised by the command, the resolved path of its first
//! word and that file's stat, so an upgraded binary runs it again), and the digest of its
//! stdout and exit is folded into the key as the config pair `runtime:<command>`, with the
//! stdout itself beside it when it is short and cannot be a secret (so `why` can say
//! `v20.11.0 → v22.1.0`). A farm worker repeats the command and refuses the task when its
//! result differs ([`checks`], sent in `TaskSpec::runtime`).

use std::collections::HashMap;
use std::io::Read as _;
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use prova_protocol::Digest;
use prova_protocol::key::{KeySalt, RUNTIME_PREFIX, runtime_digest, runtime_pair, runtime_script};
use prova_protocol::spec::RuntimeCheck;

use crate::workspace::{TaskDef, Workspace};

/// How long one runtime command may run.
const TIMEOUT: Duration = Duration::from_secs(30);
/// Most stdout bytes read from one command (a version line is a few dozen).
const MAX_OUTPUT: u64 = 64 * 1024;
/// Longest stdout kept beside the digest.
const MAX_SHOWN: usize = 80;

/// What one runtime command gave.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuntimeValue {
    /// [`runtime_digest`] of its stdout and exit (unsalted: what a worker compares).
    pub digest: Digest,
    /// Its stdout, trimmed, when short and not secret-looking.
    pub shown: Option<String>,
    /// Its stdout as read (at most [`MAX_OUTPUT`] bytes): what a REAPI bot's guard hashes.
    pub stdout: Vec<u8>,
    /// How it exited (`None`: killed or not started).
    pub code: Option<i32>,
}

impl RuntimeValue {
    /// The value of a command that gave nothing (not started, or killed).
    fn none() -> Self {
        Self { digest: runtime_digest(b"", None), shown: None, stdout: Vec::new(), code: None }
    }

    /// Whether its stdout may have been cut at [`MAX_OUTPUT`].
    pub fn truncated(&self) -> bool {
        self.stdout.len() as u64 >= MAX_OUTPUT
    }
}

/// The file a command's first word resolves to, and its stat: a change of either runs the
/// command again.
type Binary = Option<(PathBuf, u64, u64, u64, i64, i64)>;

fn memo() -> &'static Mutex<HashMap<(String, Binary), RuntimeValue>> {
    static MEMO: OnceLock<Mutex<HashMap<(String, Binary), RuntimeValue>>> = OnceLock::new();
    MEMO.get_or_init(Default::default)
}

/// The runtime commands of task `def`: the workspace's, then its own, each once, sorted.
pub fn commands(ws: &Workspace, def: Option<&TaskDef>) -> Vec<String> {
    let Some(def) = def.filter(|d| d.command.is_some()) else { return Vec::new() };
    let mut all: Vec<String> =
        ws.settings.runtime.iter().chain(&def.policy.runtime).cloned().collect();
    all.sort();
    all.dedup();
    all
}

/// The key's config pairs for task `def`'s runtime inputs (salted like env values).
pub fn config_pairs(
    ws: &Workspace,
    def: Option<&TaskDef>,
    salt: Option<&KeySalt>,
) -> Vec<(String, String)> {
    commands(ws, def)
        .iter()
        .map(|c| {
            let v = evaluate(&ws.root, c);
            let keyed = match salt {
                Some(s) => Digest::keyed(s, &v.digest.0),
                None => v.digest,
            };
            runtime_pair(c, &keyed, v.shown.as_deref())
        })
        .collect()
}

/// What a farm worker must reproduce for a task whose key folds `config` (its components'
/// config pairs): each runtime command with its result here (memoised: not run again).
pub fn checks(root: &Path, config: &[(String, String)]) -> Vec<RuntimeCheck> {
    config
        .iter()
        .filter_map(|(k, _)| k.strip_prefix(RUNTIME_PREFIX))
        .map(|command| {
            let v = evaluate(root, command);
            RuntimeCheck { command: command.to_owned(), digest: v.digest, shown: v.shown }
        })
        .collect()
}

/// Runs `command` (by `sh -c`, in `root`) unless this process already did with the same
/// binary.
pub fn evaluate(root: &Path, command: &str) -> RuntimeValue {
    let key = (command.to_owned(), binary(root, command));
    if let Ok(m) = memo().lock()
        && let Some(v) = m.get(&key)
    {
        return v.clone();
    }
    let v = run(root, command);
    if let Ok(mut m) = memo().lock() {
        m.insert(key, v.clone());
    }
    v
}

/// The first word of `command` resolved like a shell would (a path as is, relative to
/// `root`; else the first executable of that name on `PATH`), with its stat.
fn binary(root: &Path, command: &str) -> Binary {
    let word = command.split_whitespace().next()?;
    let path = if word.contains('/') {
        Some(root.join(word))
    } else {
        let path = std::env::var_os("PATH")?;
        std::env::split_paths(&path)
            .map(|d| d.join(word))
            .find(|p| std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.mode() & 0o111 != 0))
    }?;
    let m = std::fs::metadata(&path).ok()?;
    Some((path, m.dev(), m.ino(), m.size(), m.mtime_nsec() + m.mtime() * 1_000_000_000, m.ctime()))
}

fn run(root: &Path, command: &str) -> RuntimeValue {
    let child = Command::new("sh")
        .arg("-c")
        .arg(runtime_script(command))
        .current_dir(root)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn();
    let mut child = match child {
        Ok(c) => c,
        Err(e) => {
            tracing::warn!("runtime input `{command}` could not start: {e}");
            return RuntimeValue::none();
        }
    };
    let (tx, rx) = std::sync::mpsc::channel();
    if let Some(out) = child.stdout.take() {
        let reader =
            std::thread::Builder::new().name("prova-runtime".to_owned()).spawn(move || {
                let mut buf = Vec::new();
                let _ = out.take(MAX_OUTPUT).read_to_end(&mut buf);
                let _ = tx.send(buf);
            });
        if let Err(e) = reader {
            tracing::warn!("runtime input `{command}`: no reader thread: {e}");
        }
    }
    let stdout = match rx.recv_timeout(TIMEOUT) {
        Ok(b) => b,
        Err(_) => {
            tracing::warn!("runtime input `{command}` did not finish within {TIMEOUT:?}");
            let _ = child.kill();
            let _ = child.wait();
            return RuntimeValue::none();
        }
    };
    let code = match child.wait() {
        Ok(s) => s.code(),
        Err(_) => None,
    };
    RuntimeValue {
        digest: runtime_digest(&stdout, code),
        shown: shown(&stdout, code),
        stdout,
        code,
    }
}

/// The stdout worth keeping beside the digest: one short line of version-like characters
/// that holds no value of this process's environment (a command that prints a token is
/// keyed, never stored in words).
fn shown(stdout: &[u8], code: Option<i32>) -> Option<String> {
    let text = std::str::from_utf8(stdout).ok()?.trim();
    let line = match code {
        Some(0) => text.to_owned(),
        Some(c) if text.is_empty() => format!("(exit {c})"),
        _ => return None,
    };
    let plain = |c: char| c.is_ascii_alphanumeric() || " ._:/()+,-@~".contains(c);
    if line.is_empty() || line.len() > MAX_SHOWN || !line.chars().all(plain) {
        return None;
    }
    // A long unbroken run of letters and digits is more token than version.
    if line.split([' ', '/', ':']).any(|w| w.len() >= 24) {
        return None;
    }
    let leaks = std::env::vars_os()
        .any(|(_, v)| v.to_str().is_some_and(|v| v.len() >= 6 && line.contains(v)));
    (!leaks).then_some(line)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_version_line_is_shown_and_a_token_is_not() {
        assert_eq!(shown(b"v20.11.0\n", Some(0)), Some("v20.11.0".to_owned()));
        assert_eq!(
            shown(b"rustc 1.85.0 (4d91de4e4 2025-02-17)\n", Some(0)).as_deref(),
            Some("rustc 1.85.0 (4d91de4e4 2025-02-17)")
        );
        assert_eq!(shown(b"ghp_0123456789abcdefghijklmnopqrstuv\n", Some(0)), None);
        assert_eq!(shown(b"a\nb\n", Some(0)), None, "one line only");
        assert_eq!(shown(&[b'x'; 200], Some(0)), None, "short only");
        assert_eq!(shown(b"KEY=value\n", Some(0)), None, "no assignments");
        assert_eq!(shown(b"", Some(127)).as_deref(), Some("(exit 127)"));
        assert_eq!(shown(b"", None), None);
    }

    #[test]
    fn a_command_runs_once_until_its_binary_changes() {
        let dir = tempfile::tempdir().expect("tempdir");
        let tool = dir.path().join("tool");
        let count = dir.path().join("count");
        let script = |v: &str| format!("#!/bin/sh\necho x >> {}\necho {v}\n", count.display());
        write_exec(&tool, &script("v1"));
        let cmd = "./tool --version";
        let a = evaluate(dir.path(), cmd);
        assert_eq!(a.shown.as_deref(), Some("v1"));
        assert_eq!(evaluate(dir.path(), cmd), a, "memoised");
        assert_eq!(std::fs::read_to_string(&count).unwrap_or_default().lines().count(), 1);
        // A new binary (another size, inode or time): run again, another digest.
        write_exec(&tool, &script("v22"));
        let b = evaluate(dir.path(), cmd);
        assert_eq!(b.shown.as_deref(), Some("v22"));
        assert_ne!(a.digest, b.digest);
        assert_eq!(std::fs::read_to_string(&count).unwrap_or_default().lines().count(), 2);
    }

    fn write_exec(path: &Path, text: &str) {
        use std::os::unix::fs::PermissionsExt as _;
        let tmp = path.with_extension("tmp");
        std::fs::write(&tmp, text).expect("write");
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        std::fs::rename(&tmp, path).expect("rename");
    }
}
