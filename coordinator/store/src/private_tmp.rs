//! The private temporary directories a store makes in the system's temporary directory (a
//! `--no-cache` run's scratch store, a read-only open's staging): each is removed with its
//! store, but a process killed outright (SIGKILL, the OOM killer) drops nothing, and its
//! directory — the blobs of every task the run executed — stayed in `/tmp` for good.
//!
//! So each name carries its owner's pid (`prova-scratch-<pid>-<random>`), and making one
//! first removes those of the same kind whose owner is gone: a pid `kill(pid, 0)` answers
//! "no such process" for, in a directory this user owns (another user's is neither ours to
//! judge nor to remove). A pid reused by a live process keeps the directory until that one
//! ends too: never removed while anything could own it.

use std::path::Path;

use prova_protocol::pidname;

/// Makes a private directory in `parent` named `<kind><pid>-<random>`, after removing the
/// directories of that kind whose owners are gone ([`pidname::sweep`]).
pub(crate) fn make(parent: &Path, kind: &str) -> std::io::Result<tempfile::TempDir> {
    pidname::sweep(parent, &[kind], pidname::Entries::Dirs);
    tempfile::Builder::new().prefix(&pidname::prefix(kind)).tempdir_in(parent)
}

#[cfg(test)]
mod tests {
    use std::fs;

    use super::*;

    /// A pid no process has: a child that has exited and been reaped.
    fn dead_pid() -> u32 {
        let mut child = std::process::Command::new("true").spawn().expect("spawn true");
        let pid = child.id();
        child.wait().expect("reaped");
        pid
    }

    #[test]
    fn only_the_directories_of_gone_owners_are_removed() {
        let parent = tempfile::tempdir().expect("a parent");
        let p = parent.path();
        let dead = dead_pid();
        let mk = |name: &str| {
            fs::create_dir_all(p.join(name).join("blobs")).expect("made");
            fs::write(p.join(name).join("blobs").join("b"), "bytes").expect("written");
        };
        mk(&format!("prova-scratch-{dead}-a"));
        mk(&format!("prova-scratch-{}-b", std::process::id()));
        mk("prova-scratch-1-c"); // init: alive
        mk("prova-scratch-older");
        mk(&format!("prova-readonly-{dead}-d"));
        fs::write(p.join(format!("prova-scratch-{dead}-file")), "not a dir").expect("a file");
        std::os::unix::fs::symlink(
            p.join("prova-scratch-older"),
            p.join(format!("prova-scratch-{dead}-link")),
        )
        .expect("a symlink");

        assert_eq!(pidname::sweep(p, &["prova-scratch-"], pidname::Entries::Dirs), 1);
        let mut left: Vec<String> = fs::read_dir(p)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        left.sort();
        let mut want = vec![
            format!("prova-readonly-{dead}-d"),
            "prova-scratch-1-c".to_owned(),
            format!("prova-scratch-{}-b", std::process::id()),
            format!("prova-scratch-{dead}-file"),
            format!("prova-scratch-{dead}-link"),
            "prova-scratch-older".to_owned(),
        ];
        want.sort();
        assert_eq!(left, want);
        assert!(p.join("prova-scratch-older").join("blobs").join("b").exists(), "followed a link");

        // Making one of a kind sweeps that kind first.
        let made = make(p, "prova-readonly-").expect("made");
        assert!(!p.join(format!("prova-readonly-{dead}-d")).exists());
        let name = made.path().file_name().unwrap().to_str().unwrap().to_owned();
        assert_eq!(pidname::owner(&name, "prova-readonly-"), Some(std::process::id()), "{name}");
    }
}
