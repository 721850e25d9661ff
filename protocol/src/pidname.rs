//! Names that say which process owns them: `<kind><pid>-<rest>`. What prova leaves in a
//! machine-wide place while it runs (a scratch store in `$TMPDIR`, libfaketime's shared segment
//! in `/dev/shm`) is removed when it is dropped, but a process killed outright drops nothing;
//! the pid in the name lets the next one judge what is abandoned: a pid `kill(pid, 0)`
//! answers "no such process" for. A pid reused by a live process keeps the name until that
//! one ends too: never judged abandoned while anything could own it.

use nix::errno::Errno;
use nix::sys::signal::kill;
use nix::unistd::Pid;

/// `<kind><this process's pid>-`: the start of a name this process owns.
pub fn prefix(kind: &str) -> String {
    format!("{kind}{}-", std::process::id())
}

/// The pid in a name `<kind><pid>-<rest>` (`rest` not empty).
pub fn owner(name: &str, kind: &str) -> Option<u32> {
    let (pid, rest) = name.strip_prefix(kind)?.split_once('-')?;
    if rest.is_empty() || !pid.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    pid.parse().ok().filter(|&p| p > 0)
}

/// Whether no process has `pid` (`kill(pid, 0)`: "no such process"). A process of another
/// user (`EPERM`) is alive.
pub fn gone(pid: u32) -> bool {
    let Ok(raw) = i32::try_from(pid) else { return false };
    matches!(kill(Pid::from_raw(raw), None), Err(Errno::ESRCH))
}

/// Whether `name` is of `kind` and its owner is another process, now gone.
pub fn abandoned(name: &str, kind: &str) -> bool {
    owner(name, kind).is_some_and(|pid| pid != std::process::id() && gone(pid))
}

/// The marker in the names of a restore's temporaries, each followed by `<pid>-…`: a
/// staging directory beside a project's outputs (`.prova-restore-<pid>-<random>`) and an
/// entry beside the one it replaces (`.<name>.prova-restore-<pid>-<n>`). A restore killed
/// outright leaves them in the workspace.
pub const RESTORE_TEMP: &str = ".prova-restore-";

/// The pid in the name of a restore's temporary ([`RESTORE_TEMP`]); `None` for any other.
pub fn restore_temp_owner(name: &str) -> Option<u32> {
    let at = name.find(RESTORE_TEMP)?;
    if !name.starts_with('.') {
        return None;
    }
    owner(&name[at..], RESTORE_TEMP)
}

/// Whether this process's user owns what `meta` describes.
pub fn owned(meta: &std::fs::Metadata) -> bool {
    use std::os::unix::fs::MetadataExt as _;
    meta.uid() == nix::unistd::geteuid().as_raw()
}

/// What [`sweep`] removes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Entries {
    /// Directories, with what they hold.
    Dirs,
    /// Plain files.
    Files,
}

/// Removes the `entries` in `parent` named `<kind><pid>-…` (for any of `kinds`) that this
/// user owns and whose process is gone, each without following a symlink (a symlink or an
/// entry of the other sort in its place is not ours to judge). One listing of `parent`.
/// Best effort: what cannot be read or removed stays. Returns how many went.
pub fn sweep(parent: &std::path::Path, kinds: &[&str], entries: Entries) -> usize {
    let Ok(listing) = std::fs::read_dir(parent) else { return 0 };
    let mut removed = 0;
    for entry in listing.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if !kinds.iter().any(|k| abandoned(name, k)) {
            continue;
        }
        let Ok(meta) = std::fs::symlink_metadata(entry.path()) else { continue };
        let gone = match entries {
            Entries::Dirs if meta.is_dir() && owned(&meta) => std::fs::remove_dir_all(entry.path()),
            Entries::Files if meta.is_file() && owned(&meta) => std::fs::remove_file(entry.path()),
            _ => continue,
        };
        match gone {
            Ok(()) => removed += 1,
            Err(e) => {
                tracing::debug!(path = %entry.path().display(), error = %e, "an abandoned temporary stays")
            }
        }
    }
    if removed > 0 {
        tracing::debug!(removed, ?kinds, "abandoned temporaries removed");
    }
    removed
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pid no process has: a child that has exited and been reaped.
    fn dead_pid() -> u32 {
        let mut child = std::process::Command::new("true").spawn().expect("spawn true");
        let pid = child.id();
        child.wait().expect("reaped");
        pid
    }

    #[test]
    fn names_say_whose_they_are() {
        assert_eq!(owner("prova-scratch-123-AbC", "prova-scratch-"), Some(123));
        assert_eq!(owner("prova-scratch-AbCdEf", "prova-scratch-"), None, "an older name");
        assert_eq!(owner("prova-scratch-123-", "prova-scratch-"), None);
        assert_eq!(owner("prova-scratch-0-x", "prova-scratch-"), None);
        assert_eq!(owner("prova-readonly-123-x", "prova-scratch-"), None);
        assert_eq!(owner("prova-scratch-99999999999-x", "prova-scratch-"), None);
        let mine = format!("{}x", prefix("k-"));
        assert_eq!(owner(&mine, "k-"), Some(std::process::id()));
    }

    #[test]
    fn a_restores_temporaries_say_whose_they_are() {
        assert_eq!(restore_temp_owner(".prova-restore-42-AbC"), Some(42));
        assert_eq!(restore_temp_owner(".main.js.prova-restore-42-7"), Some(42));
        assert_eq!(restore_temp_owner(".tsconfig.tsbuildinfo.prova-restore-9-0"), Some(9));
        assert_eq!(restore_temp_owner(".prova-restore-AbCdEf"), None, "an older name");
        assert_eq!(restore_temp_owner("main.js.prova-restore-42-7"), None, "not hidden");
        assert_eq!(restore_temp_owner("main.js"), None);
    }

    #[test]
    fn only_a_gone_owner_abandons() {
        let dead = dead_pid();
        assert!(abandoned(&format!("k-{dead}-a"), "k-"));
        assert!(!abandoned(&format!("{}a", prefix("k-")), "k-"), "this process");
        assert!(!abandoned("k-1-a", "k-"), "init is alive");
        assert!(!abandoned(&format!("j-{dead}-a"), "k-"), "another kind");
        assert!(!abandoned("k-older", "k-"));
    }
}
