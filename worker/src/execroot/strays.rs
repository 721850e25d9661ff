//! What a task wrote in its exec root outside its declared outputs.
//!
//! The sandbox binds each directory holding an output writable, with its other entries
//! bound read-only again ([`super::OutputLayout`]), so that `rm -rf dist && build` works.
//! That leaves the task free to create a new entry beside its outputs (`notes.txt`, a
//! `.cache/` directory, a symlink), and — where a glob root holds the task's own directory
//! (`**/*.js`), or a directory lies on the way between two writable ones — to change or
//! remove what was there. Such a write lands in the exec root and is dropped with it: the
//! task would pass without what it wrote, where in place it would have written into the
//! workspace. So the writable directories are surveyed before the task runs and after, and
//! every entry created, changed or removed that the declared outputs do not account for
//! is named ([`StrayCheck::compare`]); the task then fails.
//!
//! What the outputs account for is what the trace's undeclared-writes rule lets through
//! (`coordinator::run::undeclared::undeclared_writes`): a path a glob matches, anything
//! inside an output directory the task owns (a glob's literal root such as `dist`, or a
//! literal output), a directory on the way to one (`mkdir -p build/out`) — and, in a glob
//! root bound writable whole, directories (which only hold outputs), not other files.
//! Read-only entries and installed trees are not walked: the sandbox keeps them as they
//! were. Without a sandbox the whole root is writable, and walked (trees excepted).

use std::collections::{BTreeMap, HashSet};
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;

use prova_protocol::globs::{PathGlobs, is_within, join_rel};
use prova_protocol::work::{MAX_WROTE_OUTSIDE, WroteOutside};

use super::OutputLayout;

/// Most entries a survey records: beyond it the comparison would cost more memory than a
/// root is worth, and the check says it was not made (a log line) rather than guess.
pub const MAX_SURVEYED: usize = 200_000;

/// What the stat of one entry says about its content, without its ctime (a hardlinked
/// input's ctime moves when another root links the same blob).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Stamp {
    /// `st_mode` (kind and permission bits).
    mode: u32,
    size: u64,
    mtime: (i64, i64),
    ino: u64,
}

impl Stamp {
    fn of(m: &fs::Metadata) -> Self {
        Self { mode: m.mode(), size: m.size(), mtime: (m.mtime(), m.mtime_nsec()), ino: m.ino() }
    }

    fn is_dir(self) -> bool {
        self.mode & libc_s_ifmt() == libc_s_ifdir()
    }

    /// Whether `other` is the same entry as far as a task could have written it: a
    /// directory's own stamp moves with every entry made in it, so only its kind counts.
    fn same(self, other: Self) -> bool {
        if self.is_dir() && other.is_dir() { true } else { self == other }
    }
}

const fn libc_s_ifmt() -> u32 {
    0o170_000
}

const fn libc_s_ifdir() -> u32 {
    0o040_000
}

/// The writable directories of one exec root, surveyed ([`StrayCheck::survey`]).
#[derive(Clone, Debug, Default)]
pub struct Survey {
    entries: BTreeMap<String, Stamp>,
    /// The survey stopped at [`MAX_SURVEYED`] entries.
    truncated: bool,
}

/// Everything needed to survey an exec root's writable directories and judge what changed
/// in them; plain data, so a blocking task can own it.
#[derive(Clone, Debug)]
pub struct StrayCheck {
    root: PathBuf,
    /// The directories walked (workspace-relative): what the task may write.
    tops: Vec<String>,
    layout: OutputLayout,
    /// Workspace-relative entries never walked: bound read-only, or installed trees.
    skip: HashSet<String>,
    globs: PathGlobs,
}

impl StrayCheck {
    pub(super) fn new(
        root: PathBuf,
        tops: Vec<String>,
        layout: OutputLayout,
        skip: HashSet<String>,
        globs: PathGlobs,
    ) -> Self {
        Self { root, tops, layout, skip, globs }
    }

    /// Whether there is anything to survey (in a sandbox, a task without outputs can write
    /// nowhere).
    pub fn is_empty(&self) -> bool {
        self.tops.is_empty()
    }

    /// The entries of the writable directories now (output directories not walked).
    pub fn survey(&self) -> Survey {
        let mut s = Survey::default();
        for top in &self.tops {
            self.walk(top, &mut s);
        }
        s
    }

    fn walk(&self, dir: &str, s: &mut Survey) {
        let abs = if dir.is_empty() { self.root.clone() } else { self.root.join(dir) };
        let Ok(read) = fs::read_dir(&abs) else { return };
        let mut names: Vec<String> =
            read.filter_map(|e| e.ok()?.file_name().into_string().ok()).collect();
        names.sort();
        for name in names {
            let rel = join_rel(dir, &name);
            if self.skip.contains(&rel) {
                continue;
            }
            if s.entries.len() >= MAX_SURVEYED {
                s.truncated = true;
                return;
            }
            let Ok(m) = fs::symlink_metadata(self.root.join(&rel)) else { continue };
            let stamp = Stamp::of(&m);
            s.entries.insert(rel.clone(), stamp);
            // An output directory's contents are the task's own; a symlink is never followed.
            if m.is_dir() && !self.in_slot(&rel) {
                self.walk(&rel, s);
            }
        }
    }

    /// Inside an output the task owns outside every whole-bound glob root.
    fn in_slot(&self, path: &str) -> bool {
        self.layout.slots.iter().any(|(slot, _)| is_within(path, slot))
    }

    /// Whether the declared outputs account for a write at `path` (`dir`: it is a
    /// directory now, or was).
    fn accounted(&self, path: &str, dir: bool) -> bool {
        self.globs.is_match(path)
            || self.in_slot(path)
            || self.globs.roots().iter().any(|r| r != path && is_within(r, path))
            || (dir && self.layout.whole.iter().any(|w| is_within(path, w)))
    }

    /// What changed from `before` to `after` that the outputs do not account for, sorted;
    /// `None`: nothing, or a survey was truncated (then said in the log).
    pub fn compare(&self, before: &Survey, after: &Survey) -> Option<WroteOutside> {
        if before.truncated || after.truncated {
            tracing::warn!(
                root = %self.root.display(),
                "more than {MAX_SURVEYED} entries beside the outputs: writes outside them not checked"
            );
            return None;
        }
        let mut found: Vec<String> = Vec::new();
        let mut new_dirs: Vec<&str> = Vec::new();
        for (path, now) in &after.entries {
            if new_dirs.iter().any(|d| is_within(path, d)) {
                continue; // a new directory stands for what it holds
            }
            let was = before.entries.get(path);
            if was.is_some_and(|w| w.same(*now)) || self.accounted(path, now.is_dir()) {
                continue;
            }
            if was.is_none() && now.is_dir() {
                new_dirs.push(path);
            }
            found.push(path.clone());
        }
        for (path, was) in &before.entries {
            if !after.entries.contains_key(path)
                && !self.accounted(path, was.is_dir())
                && !found.iter().any(|f| is_within(path, f.as_str()))
            {
                found.push(format!("{path} (removed)"));
            }
        }
        if found.is_empty() {
            return None;
        }
        found.sort();
        let more = found.len().saturating_sub(MAX_WROTE_OUTSIDE) as u64;
        found.truncate(MAX_WROTE_OUTSIDE);
        Some(WroteOutside { paths: found, more })
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    fn check(dir: &std::path::Path, project: &str, outputs: &[&str]) -> StrayCheck {
        let outputs: Vec<String> = outputs.iter().map(|o| (*o).to_owned()).collect();
        let layout = OutputLayout::new(project, &outputs).unwrap();
        let globs = PathGlobs::new(project, &outputs).unwrap();
        StrayCheck::new(dir.to_owned(), layout.binds(), layout, HashSet::new(), globs)
    }

    fn write(root: &Path, rel: &str, text: &str) {
        let p = root.join(rel);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, text).unwrap();
    }

    #[test]
    fn a_file_beside_the_outputs_is_named_and_the_outputs_are_not() {
        let t = tempfile::tempdir().unwrap();
        write(t.path(), "p/package.json", "{}");
        fs::create_dir_all(t.path().join("p/dist")).unwrap();
        let c = check(t.path(), "p", &["dist/**", "tsconfig.tsbuildinfo"]);
        let before = c.survey();
        write(t.path(), "p/dist/a.js", "js");
        write(t.path(), "p/dist/sub/b.js", "js");
        write(t.path(), "p/tsconfig.tsbuildinfo", "state");
        assert_eq!(c.compare(&before, &c.survey()), None);
        write(t.path(), "p/notes.txt", "x");
        write(t.path(), "p/.cache/deep/x", "x");
        std::os::unix::fs::symlink("package.json", t.path().join("p/alias")).unwrap();
        let got = c.compare(&before, &c.survey()).unwrap();
        assert_eq!(got.paths, ["p/.cache", "p/alias", "p/notes.txt"]);
        assert_eq!(got.more, 0);
    }

    #[test]
    fn a_changed_or_removed_entry_is_named() {
        let t = tempfile::tempdir().unwrap();
        write(t.path(), "p/src/a.ts", "a");
        write(t.path(), "p/src/b.ts", "b");
        // `**/*.js` binds the whole project writable: its inputs are there to change.
        let c = check(t.path(), "p", &["**/*.js"]);
        let before = c.survey();
        write(t.path(), "p/src/a.ts", "changed");
        fs::remove_file(t.path().join("p/src/b.ts")).unwrap();
        write(t.path(), "p/lib/out.js", "js");
        let got = c.compare(&before, &c.survey()).unwrap();
        assert_eq!(got.paths, ["p/src/a.ts", "p/src/b.ts (removed)"]);
    }

    #[test]
    fn many_are_counted_not_listed() {
        let t = tempfile::tempdir().unwrap();
        fs::create_dir_all(t.path().join("p")).unwrap();
        let c = check(t.path(), "p", &["dist/**"]);
        let before = c.survey();
        for i in 0..MAX_WROTE_OUTSIDE + 7 {
            write(t.path(), &format!("p/f{i:04}"), "x");
        }
        let got = c.compare(&before, &c.survey()).unwrap();
        assert_eq!((got.paths.len(), got.more), (MAX_WROTE_OUTSIDE, 7));
    }
}
