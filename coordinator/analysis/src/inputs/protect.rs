//! The workspace files no clean or restore of a task may delete or overwrite, whatever its
//! outputs say (issue 27): a file git tracks, and a file a declared input of some task
//! matches — `[workspace] inputs` and `fingerprint`, or any task's `inputs` (a task that
//! depends on the producer excepted: it reads the producer's outputs by design, as in
//! [`crate::config::overlap`]). The load already refuses outputs that can match a declared
//! input; this is the second line, for what that check cannot see (a file git tracks in an
//! output directory) or a config it never judged.
//!
//! Decided on the coordinator, from the run's file list ([`super::FileList`]: tracked and
//! untracked-but-not-ignored files, plus the declared inputs git ignores): only listed files
//! that a task's output globs match are candidates, so the usual run — outputs gitignored,
//! nothing listed under them — asks git nothing more and builds no graph. The result goes
//! to the in-place clean ([`prova_protocol::work::Placement::InPlace`]) and to the local
//! layer's restore, by task id. Untracked files no declared input matches (a previous run's
//! outputs in a directory nobody ignored) stay the task's to delete.

use std::collections::{HashMap, HashSet};

use prova_protocol::TaskId;
use prova_protocol::globs::{PathGlobs, is_within};
use prova_protocol::work::ProtectedPath;

use super::files::{FileList, FilesError, ListSource, tracked_under};
use crate::config::overlap::Reach;
use crate::plan::RunPlan;
use crate::workspace::Workspace;

/// Protected paths by task id (only tasks with any).
pub type Protected = HashMap<String, Vec<ProtectedPath>>;

/// The protected paths among the outputs of each task of `plan`, by task id.
pub fn protected(
    ws: &Workspace,
    plan: &RunPlan,
    files: &FileList,
) -> Result<Protected, FilesError> {
    let mut candidates: Vec<(usize, &str)> = Vec::new();
    let mut roots: Vec<String> = Vec::new();
    for (ti, t) in plan.tasks.iter().enumerate() {
        if t.spec.outputs.is_empty() {
            continue;
        }
        // Checked at load: a list that does not compile here protects nothing from it —
        // and cleans nothing either, the worker compiles the same list.
        let Ok(globs) = PathGlobs::new(&t.spec.project_dir, &t.spec.outputs) else { continue };
        let before = candidates.len();
        for root in globs.roots() {
            let exact = files.all().binary_search(root).ok().map(|i| files.all()[i].as_str());
            for f in exact.into_iter().chain(files.under(root).iter().map(String::as_str)) {
                if globs.is_match(f) {
                    candidates.push((ti, f));
                }
            }
        }
        if candidates.len() > before {
            roots.extend(globs.roots().iter().cloned());
        }
    }
    if candidates.is_empty() {
        return Ok(Protected::new());
    }
    let tracked: HashSet<String> = match files.source {
        Some(ListSource::Git) => {
            roots.sort();
            roots.dedup();
            tracked_under(&ws.root, &files.nested_repos, &roots)?.into_iter().collect()
        }
        _ => HashSet::new(),
    };
    let readers = Readers::new(ws);
    let mut reach: Option<Option<Reach>> = None;
    let mut out = Protected::new();
    for (ti, f) in candidates {
        let producer = &plan.tasks[ti].id;
        let why = if let Some(list) = readers.everyone(f) {
            Some(format!("it is in `[workspace] {list}`, an input of every task"))
        } else if let Some(reader) = readers.reader_of(f, |reader| {
            // Without a graph (it does not build) no reader is excused.
            let reach = reach.get_or_insert_with(|| Reach::new(ws));
            reach.as_mut().is_none_or(|r| !r.depends_on(reader, producer))
        }) {
            Some(format!("it is an input of task `{reader}`"))
        } else if tracked.contains(f) {
            Some("git tracks it".to_owned())
        } else {
            None
        };
        if let Some(why) = why {
            let list = out.entry(producer.to_string()).or_default();
            list.push(ProtectedPath { path: f.to_owned(), why });
        }
    }
    Ok(out)
}

/// Every declared input list of the workspace, matched as [`super::select`] matches it.
struct Readers {
    /// `[workspace] fingerprint`, `inputs`.
    everyone: [(PathGlobs, &'static str); 2],
    /// Per task with declared inputs: its id, its project directory, its project-relative
    /// and its `//` patterns.
    tasks: Vec<(TaskId, String, Option<PathGlobs>, Option<PathGlobs>)>,
}

impl Readers {
    fn new(ws: &Workspace) -> Self {
        let list =
            |pats: &[String]| PathGlobs::new("", pats).unwrap_or_else(|_| PathGlobs::empty());
        let everyone = [
            (list(&ws.settings.fingerprint), "fingerprint"),
            (list(&ws.settings.inputs), "inputs"),
        ];
        let mut tasks = Vec::new();
        for p in &ws.projects {
            for (name, t) in &p.tasks {
                let Some(pats) = &t.inputs else { continue };
                let (ws_pats, proj_pats): (Vec<String>, Vec<String>) =
                    pats.iter().cloned().partition(|p| p.trim_start_matches('!').starts_with("//"));
                let mut own = proj_pats;
                own.extend(ws_pats.iter().filter(|p| p.starts_with('!')).cloned());
                let compile = |pats: &[String]| {
                    (pats.iter().any(|p| !p.starts_with('!')))
                        .then(|| PathGlobs::new(&p.dir, pats).ok())
                        .flatten()
                };
                tasks.push((
                    TaskId::new(&p.name, name),
                    p.dir.clone(),
                    compile(&own),
                    compile(&ws_pats),
                ));
            }
        }
        Self { everyone, tasks }
    }

    /// The `[workspace]` list that makes `f` an input of every task.
    fn everyone(&self, f: &str) -> Option<&'static str> {
        self.everyone.iter().find(|(g, _)| g.is_match(f)).map(|(_, name)| *name)
    }

    /// The first task whose declared inputs match `f` and that `counts`.
    fn reader_of(&self, f: &str, mut counts: impl FnMut(&TaskId) -> bool) -> Option<&TaskId> {
        self.tasks
            .iter()
            .filter(|(_, dir, own, ws)| {
                own.as_ref().is_some_and(|g| is_within(f, dir) && g.is_match(f))
                    || ws.as_ref().is_some_and(|g| g.is_match(f))
            })
            .map(|(id, ..)| id)
            .find(|id| counts(id))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn path_list(list: &Protected, task: &str) -> Vec<(String, String)> {
        list.get(task)
            .map(|v| v.iter().map(|p| (p.path.clone(), p.why.clone())).collect())
            .unwrap_or_default()
    }

    #[test]
    fn tracked_files_and_declared_inputs_among_outputs_are_protected() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let write = |rel: &str| {
            let p = root.join(rel);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, rel).unwrap();
        };
        std::fs::write(
            root.join("prova.toml"),
            "[workspace]\nprojects = [\"p\"]\n\n[tasks.build]\ncommand = \"true\"\n\
             outputs = [\"dist/**\"]\n\
             [tasks.codegen]\ncommand = \"true\"\noutputs = [\"schema/out/**\"]\n\
             [tasks.lint]\ncommand = \"true\"\ndeps = [\"codegen\"]\ninputs = [\"schema/**\"]\n",
        )
        .unwrap();
        for f in ["p/dist/old.js", "p/dist/committed.js", "p/dist/read.js", "p/schema/out/s.json"] {
            write(f);
        }
        let git = |args: &[&str]| {
            let ok = std::process::Command::new("git").arg("-C").arg(root).args(args).status();
            assert!(ok.is_ok_and(|s| s.success()), "git {args:?}");
        };
        git(&["init", "-q"]);
        git(&["add", "p/dist/committed.js"]);
        let mut ws = Workspace::load(root).unwrap_or_else(|e| panic!("{e}"));
        // What the load refuses, as a config it never judged would have it: `lint` (not
        // after `build`) reads a file among `build`'s outputs.
        let lint = ws.projects[0].tasks.get_mut("lint").unwrap();
        lint.inputs = Some(vec!["schema/**".to_owned(), "dist/read.js".to_owned()]);
        let graph = crate::graph::build_graph(&ws).unwrap();
        let plan = RunPlan::new(&ws, &graph, &[], &|_| None);
        let files = crate::inputs::enumerate(root, &[]).unwrap();
        let got = protected(&ws, &plan, &files).unwrap();
        assert_eq!(
            path_list(&got, "p#build"),
            [
                ("p/dist/committed.js".to_owned(), "git tracks it".to_owned()),
                ("p/dist/read.js".to_owned(), "it is an input of task `p#lint`".to_owned()),
            ]
        );
        // `lint` depends on `codegen`: `codegen`'s outputs are for it to read.
        assert!(path_list(&got, "p#codegen").is_empty(), "{got:?}");
        // Outside git nothing is tracked; the declared input still counts.
        std::fs::remove_dir_all(root.join(".git")).unwrap();
        let files = crate::inputs::enumerate(root, &[]).unwrap();
        let got = protected(&ws, &plan, &files).unwrap();
        assert_eq!(path_list(&got, "p#build").len(), 1, "{got:?}");
    }
}
