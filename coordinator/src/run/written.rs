//! The cheap post-run check of a plain local run (issue 11, undeclared writes): before a
//! cached task runs in place, a stat snapshot of its project directory's files that are not
//! ignored (`.gitignore`, `.git/info/exclude`; `.git` and `.prova` never entered); after it
//! succeeded, another. A file that is new or changed (size, mtime, ctime, inode) and is not
//! a declared output was written by the task behind the cache's back — a hit would not
//! restore it (`tsconfig.tsbuildinfo` beside `dist/`) — and is named once in a warning.
//!
//! Bounded: a project of more than [`MAX_FILES`] files is not checked (nothing is said).
//! Honest about concurrency: a task whose run overlapped another in-place task of the same
//! or a nested project directory is not checked (their writes cannot be told apart).

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use prova_protocol::globs::PathGlobs;

/// Largest project directory checked.
pub(super) const MAX_FILES: usize = 20_000;

/// Most paths named in the warning; the rest are counted.
const MAX_NAMED: usize = 10;

/// A file's identity as the check compares it.
type Stamp = (u64, i64, i64, i64, i64, u64);

/// A stat snapshot of one project directory: workspace-relative path → stamp.
#[derive(Debug, Default)]
pub(super) struct Snapshot(BTreeMap<String, Stamp>);

impl Snapshot {
    /// The snapshot of `project_dir` (workspace-relative) in workspace `root`; `None` past
    /// [`MAX_FILES`] or when it cannot be listed.
    pub(super) fn take(root: &Path, project_dir: &str) -> Option<Self> {
        let dir = if project_dir.is_empty() { root.to_owned() } else { root.join(project_dir) };
        let walk = ignore::WalkBuilder::new(&dir)
            .hidden(false)
            .require_git(false)
            .parents(true)
            .filter_entry(|e| e.file_name() != ".git" && e.file_name() != ".prova")
            .build();
        let mut out = BTreeMap::new();
        for entry in walk {
            let Ok(entry) = entry else { continue };
            if !entry.file_type().is_some_and(|t| t.is_file()) {
                continue;
            }
            let Ok(rel) = entry.path().strip_prefix(root) else { continue };
            let Some(rel) = rel.to_str() else { continue };
            let Ok(m) = entry.metadata() else { continue };
            let stamp = (m.size(), m.mtime(), m.mtime_nsec(), m.ctime(), m.ctime_nsec(), m.ino());
            out.insert(rel.to_owned(), stamp);
            if out.len() > MAX_FILES {
                return None;
            }
        }
        Some(Self(out))
    }

    /// The files of `after` that are new or changed since `self` and are not matched by
    /// `outputs`, sorted.
    pub(super) fn written(&self, after: &Snapshot, outputs: &PathGlobs) -> Vec<String> {
        after
            .0
            .iter()
            .filter(|(p, s)| self.0.get(*p) != Some(s))
            .filter(|(p, _)| !outputs.is_match(p))
            .map(|(p, _)| p.clone())
            .collect()
    }
}

/// The check's state over one run: a snapshot per node taken at dispatch, and which nodes
/// overlapped another in-place task of an overlapping project directory.
#[derive(Debug)]
pub(super) struct Watch {
    root: PathBuf,
    before: Vec<Option<Snapshot>>,
    running: Vec<Option<String>>,
    tainted: Vec<bool>,
}

impl Watch {
    /// No snapshots yet, for a plan of `n` nodes in workspace `root`.
    pub(super) fn new(root: PathBuf, n: usize) -> Self {
        Self {
            root,
            before: (0..n).map(|_| None).collect(),
            running: vec![None; n],
            tainted: vec![false; n],
        }
    }

    /// `node` (a task in `project_dir`) is about to run in place: snapshot its project. Any
    /// in-place task of an overlapping directory still running taints both.
    pub(super) fn before_run(&mut self, node: usize, project_dir: &str, check: bool) {
        let Some(slot) = self.running.get_mut(node) else { return };
        *slot = Some(project_dir.to_owned());
        for (m, dir) in self.running.iter().enumerate() {
            if m != node && dir.as_deref().is_some_and(|d| overlaps(d, project_dir)) {
                self.tainted[m] = true;
                self.tainted[node] = true;
            }
        }
        self.before[node] = if check { Snapshot::take(&self.root, project_dir) } else { None };
    }

    /// `node` ended (`ok`: it succeeded): the warning to give, if it wrote files in its
    /// project that are neither outputs nor ignored.
    pub(super) fn after_run(
        &mut self,
        node: usize,
        task: &str,
        outputs: &PathGlobs,
        ok: bool,
    ) -> Option<String> {
        let dir = self.running.get_mut(node)?.take()?;
        let before = self.before[node].take()?;
        if !ok || std::mem::take(&mut self.tainted[node]) {
            return None;
        }
        let after = Snapshot::take(&self.root, &dir)?;
        let written = before.written(&after, outputs);
        if written.is_empty() {
            return None;
        }
        let mut named = written[..written.len().min(MAX_NAMED)].join(", ");
        if written.len() > MAX_NAMED {
            named.push_str(&format!(" and {} more", written.len() - MAX_NAMED));
        }
        Some(format!(
            "task {task} wrote files that are not declared outputs: {named} (declare them in outputs, or gitignore them)"
        ))
    }
}

fn overlaps(a: &str, b: &str) -> bool {
    let within = |x: &str, d: &str| d.is_empty() || x == d || x.starts_with(&format!("{d}/"));
    within(a, b) || within(b, a)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_and_changed_files_outside_outputs_and_ignores_are_named() {
        let d = tempfile::tempdir().unwrap();
        let r = d.path();
        std::fs::create_dir_all(r.join("p/src")).unwrap();
        std::fs::write(r.join("p/src/a.ts"), "a").unwrap();
        std::fs::write(r.join("p/.gitignore"), "*.log\n").unwrap();
        let outputs = PathGlobs::new("p", &["dist/**".to_owned()]).unwrap();
        let mut w = Watch::new(r.to_owned(), 2);
        w.before_run(0, "p", true);
        std::fs::create_dir_all(r.join("p/dist")).unwrap();
        std::fs::write(r.join("p/dist/out.js"), "js").unwrap();
        std::fs::write(r.join("p/state.tsbuildinfo"), "s").unwrap();
        std::fs::write(r.join("p/run.log"), "l").unwrap();
        std::fs::write(r.join("p/src/a.ts"), "changed").unwrap();
        let msg = w.after_run(0, "p#build", &outputs, true).unwrap();
        assert_eq!(
            msg,
            "task p#build wrote files that are not declared outputs: p/src/a.ts, p/state.tsbuildinfo (declare them in outputs, or gitignore them)"
        );
        // Overlapping runs are not judged; neither are failures.
        w.before_run(0, "p", true);
        w.before_run(1, "", true);
        std::fs::write(r.join("p/other"), "o").unwrap();
        assert_eq!(w.after_run(0, "p#build", &outputs, true), None);
        assert_eq!(w.after_run(1, "r#x", &outputs, false), None);
    }
}
