//! What a watch knows of the workspace at one moment: the selection's plan, each task's input
//! rules and declared outputs, and the file list. Loaded again before every cycle, so an
//! edited `prova.toml` (a new task, new outputs) is seen by the next one.

use std::collections::{BTreeSet, HashSet};
use std::path::Path;

use prova_coordinator::inputs::InputScope;
use prova_coordinator::run::TaskKind;
use prova_protocol::TaskId;
use prova_protocol::globs::{PathGlobs, is_within};

use crate::args::SelectArgs;
use crate::commands::common;

/// One changed path, workspace-relative.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct Change {
    /// The path (`/`-separated, relative to the workspace root).
    pub path: String,
    /// Whether the event was about a directory.
    pub dir: bool,
}

/// The plan of the selection and the rules a changed path is judged by.
pub(super) struct Snapshot {
    /// The workspace root (canonical).
    pub root: std::path::PathBuf,
    /// Task ids, by plan index.
    pub ids: Vec<TaskId>,
    /// Each task's project directory.
    dirs: Vec<String>,
    /// Each task's direct dependencies (plan indices).
    deps: Vec<Vec<usize>>,
    /// Each task's input rules.
    scopes: Vec<InputScope>,
    /// Each task's declared outputs.
    outputs: Vec<PathGlobs>,
    /// The workspace's files (git's list, as the keys see it).
    files: HashSet<String>,
    /// Persistent tasks nothing in the plan depends on: the servers watch keeps running.
    pub long_lived: Vec<usize>,
    /// What each cycle runs: every task that runs a command, long-lived ones left out.
    pub cycle: Vec<usize>,
}

impl Snapshot {
    /// Loads the workspace found from `start` and plans `select` in it.
    pub(super) fn load(start: &Path, select: &SelectArgs) -> anyhow::Result<Self> {
        let common::Loaded { ws, graph } = common::load(start, select)?;
        let env = |k: &str| std::env::var(k).ok();
        let plan = prova_coordinator::run::RunPlan::new(&ws, &graph, &[], &env);
        let (scopes, files) = prova_coordinator::prepare::input_scopes(&ws, &plan)?;
        let mut outputs = Vec::with_capacity(plan.tasks.len());
        for t in &plan.tasks {
            outputs.push(PathGlobs::new(&t.spec.project_dir, &t.spec.outputs)?);
        }
        let mut has_dependents = vec![false; plan.tasks.len()];
        for t in &plan.tasks {
            for &d in &t.deps {
                has_dependents[d] = true;
            }
        }
        let long_lived: Vec<usize> = (0..plan.tasks.len())
            .filter(|&i| plan.tasks[i].kind == TaskKind::Persistent && !has_dependents[i])
            .collect();
        let cycle = (0..plan.tasks.len())
            .filter(|&i| plan.tasks[i].kind != TaskKind::Group && !long_lived.contains(&i))
            .collect();
        Ok(Self {
            root: ws.root.clone(),
            ids: plan.tasks.iter().map(|t| t.id.clone()).collect(),
            dirs: plan.tasks.iter().map(|t| t.spec.project_dir.clone()).collect(),
            deps: plan.tasks.iter().map(|t| t.deps.clone()).collect(),
            scopes,
            outputs,
            files: files.all().iter().cloned().collect(),
            long_lived,
            cycle,
        })
    }

    /// The plan index of `id`.
    pub(super) fn position(&self, id: &TaskId) -> Option<usize> {
        self.ids.iter().position(|i| i == id)
    }

    /// Whether `id` is one of the long-lived persistent tasks.
    pub(super) fn is_long_lived(&self, id: &TaskId) -> bool {
        self.long_lived.iter().any(|&i| &self.ids[i] == id)
    }

    /// Whether a change at `c` is a task's own doing: inside a declared output, or (a
    /// directory) an output's root or a directory above one, which cleaning and restoring
    /// outputs create and remove.
    pub(super) fn is_output(&self, c: &Change) -> bool {
        self.outputs.iter().any(|g| {
            g.is_match(&c.path)
                || (c.dir
                    && g.roots().iter().any(|r| is_within(&c.path, r) || is_within(r, &c.path)))
        })
    }

    /// The changes that matter to the selection: not outputs, about a file the keys see (in
    /// the file list now, or in `before`'s — a file removed or renamed away) and folded in
    /// some task's key, or a `prova.toml`.
    pub(super) fn relevant(&self, before: Option<&Snapshot>, changes: &[Change]) -> Vec<String> {
        let listed =
            |p: &str| self.files.contains(p) || before.is_some_and(|b| b.files.contains(p));
        let listed_under = |d: &str| {
            self.files
                .iter()
                .chain(before.into_iter().flat_map(|b| b.files.iter()))
                .any(|f| is_within(f, d) && f != d)
        };
        let mut out = BTreeSet::new();
        for c in changes {
            if self.is_output(c) || before.is_some_and(|b| b.is_output(c)) {
                continue;
            }
            if is_config(&c.path) {
                out.insert(c.path.clone());
                continue;
            }
            let seen = if c.dir { listed_under(&c.path) } else { listed(&c.path) };
            if seen && self.scopes.iter().any(|s| s.represents(&c.path)) {
                out.insert(c.path.clone());
                continue;
            }
            // A file that appeared or went where a key folds the entry names.
            let now = self.files.contains(&c.path);
            let came_or_went = before.is_some_and(|b| b.files.contains(&c.path) != now);
            if !c.dir && came_or_went && self.scopes.iter().any(|s| s.names_entry(&c.path)) {
                out.insert(c.path.clone());
            }
        }
        out.into_iter().collect()
    }

    /// Whether any of `paths` is folded in the key of task `i` or of a task upstream of it
    /// (or is the `prova.toml` of the workspace or of one of their projects).
    pub(super) fn touched(&self, i: usize, paths: &[String]) -> bool {
        let mut seen = HashSet::new();
        let mut stack = vec![i];
        while let Some(t) = stack.pop() {
            if !seen.insert(t) {
                continue;
            }
            let hit = paths.iter().any(|p| {
                if is_config(p) {
                    let dir = p.rsplit_once('/').map_or("", |(d, _)| d);
                    dir.is_empty() || dir == self.dirs[t]
                } else {
                    self.scopes[t].represents(p) || self.scopes[t].names_entry(p)
                }
            });
            if hit {
                return true;
            }
            stack.extend(self.deps[t].iter().copied());
        }
        false
    }
}

/// A `prova.toml`: the configuration every key and the plan come from.
fn is_config(path: &str) -> bool {
    path.rsplit('/').next() == Some("prova.toml")
}

#[cfg(test)]
mod tests {
    use super::{Change, Snapshot, is_config};
    use crate::args::SelectArgs;

    /// `a` and `b` build (output `out/**`); `srv#serve` is persistent and depends on `srv#build`.
    fn snapshot() -> (tempfile::TempDir, Snapshot) {
        let dir = tempfile::tempdir().unwrap();
        let write = |rel: &str, text: &str| {
            let p = dir.path().join(rel);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        };
        write(
            "prova.toml",
            "[workspace]\nprojects = [\"a\", \"b\", \"srv\"]\n[tasks.build]\ncommand = \"true\"\n\
             outputs = [\"out/**\"]\n",
        );
        write(
            "srv/prova.toml",
            "[tasks.serve]\ncommand = \"true\"\npersistent = true\ncache = false\n\
             deps = [\"build\"]\n",
        );
        for f in ["a/src.txt", "b/src.txt", "srv/src.txt", "notes.txt"] {
            write(f, "1\n");
        }
        let select = SelectArgs {
            tasks: vec!["build".into(), "serve".into()],
            all: true,
            projects: Vec::new(),
            filters: Vec::new(),
            affected: None,
            allow_empty: false,
        };
        let snap = Snapshot::load(dir.path(), &select).unwrap();
        (dir, snap)
    }

    fn file(p: &str) -> Change {
        Change { path: p.to_owned(), dir: false }
    }

    #[test]
    fn outputs_unlisted_files_and_files_no_key_folds_are_not_changes() {
        let (_dir, snap) = snapshot();
        let changes = [
            file("a/src.txt"),
            file("a/out/x"),
            Change { path: "a/out".into(), dir: true },
            file("a/never-existed.txt"),
            file("notes.txt"),
            file("srv/prova.toml"),
        ];
        assert_eq!(snap.relevant(None, &changes), ["a/src.txt", "srv/prova.toml"]);
    }

    #[test]
    fn a_server_is_touched_by_its_own_and_its_upstreams_inputs_only() {
        let (_dir, snap) = snapshot();
        let [serve] = snap.long_lived[..] else { panic!("{:?}", snap.long_lived) };
        assert_eq!(snap.ids[serve].as_str(), "srv#serve");
        assert_eq!(snap.cycle.len(), 3, "the builds, not the server");
        let p = |s: &str| vec![s.to_owned()];
        assert!(snap.touched(serve, &p("srv/src.txt")));
        assert!(snap.touched(serve, &p("srv/prova.toml")));
        assert!(snap.touched(serve, &p("prova.toml")));
        assert!(!snap.touched(serve, &p("a/src.txt")));
        assert!(!snap.touched(serve, &p("a/prova.toml")));
    }

    #[test]
    fn config_files_are_known_by_name() {
        assert!(is_config("prova.toml"));
        assert!(is_config("web/prova.toml"));
        assert!(!is_config("web/prova.toml.bak"));
        assert!(!is_config("web/notprova.toml"));
    }
}
