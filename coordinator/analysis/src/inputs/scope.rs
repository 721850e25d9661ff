//! Each task's [`InputScope`]: the rules of [`super::select::resolve`] kept after the key
//! was folded, so that
//!
//! - a save can list the task's inputs again, and its project directory's entry names
//!   ([`InputScope::recheck`]): a file that became an input, or
//!   an entry that appeared or went, while it ran means its key no longer holds (brief §6);
//! - the inputs proof can ask what the key sees of each path a task touched:
//!   [`InputScope::represents`] (an input were it there, an output of the task or of an
//!   upstream its roots hold) and [`InputScope::lists`] (a directory whose entry names the
//!   key folds);
//! - `--affected` and `prova watch` can tell which tasks a changed path reaches.
//!
//! **Entry names.** A task that declares `inputs` also folds the names of its project
//! directory's entries: the file list's first components there, less what comes and goes
//! with runs ([`ProjectOutputs`]), less gitignored files added as declared inputs, less a
//! file deleted since git listed it ([`present`]). Tools list the directory they run in
//! (`tsc` matching `include`, config discovery probing `vite.config.*`, `.babelrc`, …), and
//! what such a listing sees is then keyed without folding any file's bytes. A README edit
//! keeps the key; a file added beside `package.json` moves it.

use std::collections::HashSet;
use std::path::Path;
use std::sync::{Arc, OnceLock};

use prova_protocol::globs::{PathGlobs, is_within};

use super::files::{FilesError, ListSource, enumerate_under};

/// What decides whether a path is one of a task's inputs — the rules of
/// [`super::select::resolve`] — so that after the task ran its inputs can be listed again
/// and compared with the ones its key folded, and a proof can judge what it touched.
#[derive(Clone, Debug)]
pub struct InputScope {
    /// The task's plan index.
    pub(super) task: usize,
    pub(super) shared: Arc<ScopeShared>,
    /// [`Self::held`], once asked (a proof asks it of every path a task touched).
    held: OnceLock<Vec<usize>>,
    /// [`Self::hidden`], once asked.
    hidden: OnceLock<Vec<usize>>,
    /// [`Self::upstreams`], once asked.
    upstreams: OnceLock<Vec<usize>>,
}

/// What [`InputScope::recheck`] found after a task ran.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Recheck {
    /// The first file that is an input now and was not folded.
    pub added: Option<String>,
    /// The project directory's entry names now, when the key folds them.
    pub entries: Option<Vec<String>>,
}

/// One task's own input rules.
#[derive(Debug)]
pub(super) struct Own {
    /// Its project directory.
    pub dir: String,
    /// Its project-relative patterns (`None`: only `//` patterns).
    pub project: Option<PathGlobs>,
    /// Project directories nested in its own (their files are not its inputs).
    pub nested: Vec<String>,
    /// Its `//` patterns, if any.
    pub workspace: Option<Arc<PathGlobs>>,
    /// The `package.json` of every project upstream of it (a JS project's task only).
    pub manifests: Vec<String>,
    /// The project directory's entry names its key folds, as the file list gave them at key
    /// time ([`entry_candidates`]); `None` when it folds none (it declares no `inputs`).
    pub names: Option<Vec<String>>,
    /// The outputs of every task of its project: left out of the entry names, as they come
    /// and go with runs (whichever tasks a run selects).
    pub outputs: Arc<ProjectOutputs>,
}

impl Own {
    /// Whether `path` is one of this task's own inputs were it there.
    fn matches(&self, path: &str) -> bool {
        self.project.as_ref().is_some_and(|g| {
            is_within(path, &self.dir)
                && g.is_match(path)
                && !self.nested.iter().any(|n| is_within(path, n))
        }) || self.workspace.as_ref().is_some_and(|g| g.is_match(path))
            || self.manifests.iter().any(|m| m == path)
    }
}

/// The parts of every scope of a run that are the same for all tasks.
#[derive(Debug)]
pub(super) struct ScopeShared {
    /// How the workspace was listed, and its nested repositories.
    pub source: Option<ListSource>,
    pub nested_repos: Vec<String>,
    /// The listing as it was made ([`super::FileList::as_made`]): what a recheck's walk
    /// compares with before it asks git ([`super::relist`]).
    pub listed: Arc<[String]>,
    /// `[workspace] fingerprint` and `inputs`: inputs of every task.
    pub everyone: [PathGlobs; 2],
    /// Every plan task's outputs (never inputs of it or of what depends on it).
    pub outputs: Vec<PathGlobs>,
    /// Every plan task's direct dependencies.
    pub deps: Vec<Vec<usize>>,
    /// Per plan task: its exec roots hold its direct dependencies' outputs only
    /// ([`crate::plan::direct_only`]).
    pub direct: Vec<bool>,
    /// Per plan task: a group.
    pub groups: Vec<bool>,
    /// Per plan task: its id.
    pub ids: Vec<String>,
    /// Per plan task: confined (`sandbox = true`): its key folds its upstreams' bytes, not
    /// their keys ([`crate::plan::keyed_upstreams`]).
    pub confined: Vec<bool>,
    /// Per plan task: its own input rules.
    pub own: Vec<Own>,
    /// `fingerprint` lockfiles listed at key time: keyed per project (not among a key's
    /// files, see [`crate::lockfile`]) and guarded by their stamps, so never "added".
    pub lockfiles: HashSet<String>,
}

impl InputScope {
    pub(super) fn new(task: usize, shared: Arc<ScopeShared>) -> Self {
        Self {
            task,
            shared,
            held: OnceLock::new(),
            hidden: OnceLock::new(),
            upstreams: OnceLock::new(),
        }
    }

    fn own(&self) -> &Own {
        &self.shared.own[self.task]
    }

    /// The task's inputs and entry names listed again under `root` after it ran, in one
    /// listing of where its patterns can match (and of its project directory, when its key
    /// folds the names there): the first file that is an input now but is not in `known` (the
    /// inputs, task and workspace-wide, its key folded), and the entry names as they are now,
    /// by the rules the key folded them with ([`entry_candidates`], then [`present`]).
    pub fn recheck(&self, root: &Path, known: &HashSet<&str>) -> Result<Recheck, FilesError> {
        let sh = &self.shared;
        let own = self.own();
        let mut roots: Vec<&String> = sh.everyone.iter().flat_map(|g| g.roots()).collect();
        if let Some(g) = &own.project {
            roots.extend(g.roots());
        }
        if let Some(g) = &own.workspace {
            roots.extend(g.roots());
        }
        if own.names.is_some() {
            roots.push(&own.dir);
        }
        let dirs = outermost(roots);
        // Without starting git where a walk finds exactly what the run's listing held there
        // (no nested repository can be involved then: their listings come from their own
        // git).
        let quick = (sh.source == Some(ListSource::Git) && sh.nested_repos.is_empty())
            .then(|| super::relist::unchanged_under(root, &sh.listed, &dirs))
            .flatten();
        let files = match quick {
            Some(files) => files,
            None => {
                tracing::debug!(task = %sh.ids[self.task], "its inputs are listed again by git");
                enumerate_under(root, &sh.nested_repos, sh.source, &dirs)?
            }
        };
        let entries = own.names.as_ref().map(|_| {
            let names = entry_candidates(&files, &own.dir, |f| own.outputs.comes_and_goes(f));
            present(root, &own.dir, names)
        });
        let added = files
            .iter()
            .filter(|f| !known.contains(f.as_str()) && !sh.lockfiles.contains(f.as_str()))
            .find(|f| {
                let mine = sh.everyone.iter().any(|g| g.is_match(f))
                    || (own.project.as_ref().is_some_and(|g| {
                        is_within(f, &own.dir)
                            && g.is_match(f)
                            && !own.nested.iter().any(|n| is_within(f, n))
                    }) || own.workspace.as_ref().is_some_and(|g| g.is_match(f)))
                        && !self.is_output(f);
                // Only files and links are inputs (the digest pass skips anything else).
                mine && std::fs::symlink_metadata(root.join(f))
                    .is_ok_and(|m| m.is_file() || m.file_type().is_symlink())
            })
            .cloned();
        Ok(Recheck { added, entries })
    }

    /// Whether `f` is an output of the task or of a task upstream of it (never its input).
    fn is_output(&self, f: &str) -> bool {
        let sh = &self.shared;
        sh.outputs[self.task].is_match(f)
            || self.upstreams().iter().any(|&u| sh.outputs[u].is_match(f))
    }

    /// The upstreams whose keys the task's key folds ([`crate::plan::keyed_upstreams`]).
    fn keyed(&self) -> &[usize] {
        if self.shared.confined[self.task] { &[] } else { self.upstreams() }
    }

    /// Every upstream, direct or transitive (sorted).
    fn upstreams(&self) -> &[usize] {
        self.upstreams.get_or_init(|| {
            let sh = &self.shared;
            crate::plan::held_upstreams(sh.deps.len(), self.task, false, |d| &sh.deps[d], |_| false)
        })
    }

    /// Whether a file at `path` (workspace-relative; it need not exist) is represented in the
    /// task's key: one of its inputs, task or workspace-wide, were it there, or an output of
    /// the task or of a task upstream of it (represented by that task's key). What
    /// `--affected` and `prova watch` ask of a changed path.
    pub fn represents(&self, path: &str) -> bool {
        let sh = &self.shared;
        if sh.everyone.iter().any(|g| g.is_match(path))
            || sh.outputs[self.task].is_match(path)
            || self.own().matches(path)
        {
            return true;
        }
        self.held().iter().any(|&d| sh.outputs[d].is_match(path))
    }

    /// Whether `path` is an output of the task or of a task upstream of it: represented
    /// through that task's key whether or not the file list holds it (outputs are mostly
    /// gitignored), unlike an input pattern, which keys only the files listed.
    pub fn represents_output(&self, path: &str) -> bool {
        let sh = &self.shared;
        sh.outputs[self.task].is_match(path)
            || self.held().iter().any(|&d| sh.outputs[d].is_match(path))
    }

    /// Whether directory `dir` lies in the outputs of the task or of a task upstream of it:
    /// an output directory (`PathGlobs::selects_dir`), one holding an output root (`dist`
    /// of `dist/esm/**`), or one inside a root. Its presence is theirs: a run cleans its own,
    /// and an upstream's key answers for its.
    pub fn holds_outputs(&self, dir: &str) -> bool {
        let sh = &self.shared;
        let holds = |g: &PathGlobs| {
            g.is_match(dir)
                || g.selects_dir(dir)
                || g.roots()
                    .iter()
                    .any(|r| !r.is_empty() && (is_within(r, dir) || is_within(dir, r)))
        };
        holds(&sh.outputs[self.task]) || self.held().iter().any(|&d| holds(&sh.outputs[d]))
    }

    /// Whether `path` is, were it there, an input of an upstream whose key the task's key
    /// folds ([`crate::plan::keyed_upstreams`]): keyed through that key, as a read of it in
    /// place is (`tsc` resolving a project reference reads the referenced project's
    /// sources), and its exec roots hold those inputs.
    pub fn upstream_input(&self, path: &str) -> bool {
        let sh = &self.shared;
        self.keyed().iter().any(|&u| sh.own[u].matches(path))
    }

    /// Whether the task's key folds the entry names of directory `dir` (workspace
    /// relative): its own project directory's when it declares `inputs`, and an upstream's
    /// whose key it folds ([`Self::upstream_input`]) when that one does. A listing of that
    /// directory is keyed — a traced root shows every name, a file it does not hold as an
    /// empty stand-in that the run may not touch — and so is the absence of a name there.
    pub fn lists(&self, dir: &str) -> bool {
        self.listed_names(dir).is_some()
    }

    /// The entry names the key folds for directory `dir` (the file list's, at key time:
    /// some may be gone since), when it folds them ([`Self::lists`]).
    pub fn listed_names(&self, dir: &str) -> Option<&[String]> {
        let sh = &self.shared;
        std::iter::once(self.task)
            .chain(self.keyed().iter().copied())
            .map(|t| &sh.own[t])
            .find(|o| o.names.is_some() && o.dir == dir)
            .and_then(|o| o.names.as_deref())
    }

    /// Whether a file appearing or going at `path` can move the entry names the task's key
    /// folds: `path` lies in its project directory and the key folds that directory's
    /// entries. What `prova watch` asks of a created or removed file.
    pub fn names_entry(&self, path: &str) -> bool {
        let own = self.own();
        own.names.is_some() && path != own.dir && is_within(path, &own.dir)
    }

    /// The upstreams whose outputs the task's exec roots hold (and its key folds, by key or
    /// by bytes): [`crate::plan::held_upstreams`].
    fn held(&self) -> &[usize] {
        self.held.get_or_init(|| {
            let sh = &self.shared;
            crate::plan::held_upstreams(
                sh.deps.len(),
                self.task,
                sh.direct[self.task],
                |d| &sh.deps[d],
                |d| sh.groups[d],
            )
        })
    }

    /// The upstream (its task id) whose outputs hold `path` although this task's exec roots
    /// do not (`upstream_outputs = "direct"`, `path` an output of a transitive upstream or a
    /// directory holding its outputs), if any: a read there is undeclared, and declaring it
    /// in `inputs` would not bring it in.
    pub fn hidden_upstream(&self, path: &str) -> Option<&str> {
        let sh = &self.shared;
        if !sh.direct[self.task] {
            return None;
        }
        // An output, or a directory holding outputs (`dist`, looked up before its files).
        let holds = |d: usize| {
            sh.outputs[d].is_match(path)
                || sh.outputs[d].roots().iter().any(|r| !r.is_empty() && is_within(r, path))
        };
        self.hidden().iter().copied().find(|&d| holds(d)).map(|d| sh.ids[d].as_str())
    }

    /// The upstreams, direct or transitive, whose outputs the task's exec roots do not hold.
    fn hidden(&self) -> &[usize] {
        self.hidden.get_or_init(|| {
            let sh = &self.shared;
            let held = self.held();
            crate::plan::held_upstreams(
                sh.deps.len(),
                self.task,
                false,
                |d| &sh.deps[d],
                |d| sh.groups[d],
            )
            .into_iter()
            .filter(|d| held.binary_search(d).is_err())
            .collect()
        })
    }
}

/// The outermost of `roots` (none inside another), sorted.
fn outermost(mut roots: Vec<&String>) -> Vec<String> {
    roots.sort();
    roots.dedup();
    let mut outer: Vec<String> = Vec::new();
    for r in roots {
        if !outer.iter().any(|o| is_within(r, o)) {
            outer.push(r.clone());
        }
    }
    outer
}

/// The entry names of directory `dir` that the file list `files` (sorted; only those under
/// `dir` count) gives: the first component below `dir` of each file that is not `dropped`
/// (an output of the task or of an upstream: it comes and goes with the runs). Sorted.
pub fn entry_candidates(
    files: &[String],
    dir: &str,
    mut dropped: impl FnMut(&str) -> bool,
) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for f in files {
        let rest = if dir.is_empty() {
            f.as_str()
        } else {
            match f.strip_prefix(dir).and_then(|r| r.strip_prefix('/')) {
                Some(r) => r,
                None => continue,
            }
        };
        let name = rest.split('/').next().unwrap_or(rest);
        if name.is_empty() || names.last().is_some_and(|n| n == name) || dropped(f) {
            continue;
        }
        names.push(name.to_owned());
    }
    names.sort();
    names.dedup();
    names
}

/// Every output of a project's tasks: what comes and goes with runs.
#[derive(Debug)]
pub struct ProjectOutputs {
    /// The output globs.
    pub globs: PathGlobs,
    /// Each pattern's literal prefix below the project directory (`p/dist` of `dist/**`).
    pub roots: Vec<String>,
}

impl ProjectOutputs {
    /// The outputs `patterns` (as written) of the tasks of project directory `dir`.
    pub fn new(dir: &str, patterns: &[String]) -> Result<Self, prova_protocol::globs::GlobError> {
        let globs = PathGlobs::new(dir, patterns)?;
        let mut roots = Vec::new();
        for p in patterns.iter().filter(|p| !p.starts_with('!')) {
            if let Some(r) = prova_protocol::globs::include_prefix(dir, p)?
                && r != dir
            {
                roots.push(r);
            }
        }
        Ok(Self { globs, roots })
    }

    /// Whether file `f` comes and goes with runs: an output, or an output's root or a
    /// directory on the way to one (`dist` of `dist/gen/**`, where a link or a file stands
    /// instead of the directory a restore makes again).
    pub fn comes_and_goes(&self, f: &str) -> bool {
        self.globs.is_match(f) || self.roots.iter().any(|r| is_within(r, f))
    }
}

/// `names` (entries of `dir` under `root`) less those no longer there: a file list made by
/// git names a tracked file deleted since, which a listing would not see.
pub fn present(root: &Path, dir: &str, mut names: Vec<String>) -> Vec<String> {
    let base = root.join(dir);
    names.retain(|n| std::fs::symlink_metadata(base.join(n)).is_ok());
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(v: &[&str]) -> Vec<String> {
        let mut v: Vec<String> = v.iter().map(|s| (*s).to_owned()).collect();
        v.sort();
        v
    }

    #[test]
    fn entry_names_are_first_components_less_outputs() {
        let files = list(&[
            "p/README.md",
            "p/package.json",
            "p/src/a.ts",
            "p/src/b/c.ts",
            "p/dist/a.js",
            "p/a.txt",
            "p/a/b.txt",
            "q/x",
            "p2/y",
        ]);
        let names = entry_candidates(&files, "p", |f| f.starts_with("p/dist/"));
        assert_eq!(names, ["README.md", "a", "a.txt", "package.json", "src"]);
        let root = entry_candidates(&files, "", |_| false);
        assert_eq!(root, ["p", "p2", "q"]);
        // A name stays while one of its files is not an output.
        let names = entry_candidates(&files, "p", |f| f == "p/src/a.ts");
        assert!(names.contains(&"src".to_owned()));
    }

    #[test]
    fn outputs_and_output_roots_come_and_go() {
        let pats = ["dist/**".to_owned(), "*.tsbuildinfo".to_owned(), "!dist/keep".to_owned()];
        let outputs = ProjectOutputs::new("p", &pats).unwrap();
        assert!(outputs.comes_and_goes("p/dist/a.js"));
        assert!(outputs.comes_and_goes("p/tsconfig.tsbuildinfo"));
        // A link standing where the output directory goes, or a directory on its way.
        assert!(outputs.comes_and_goes("p/dist"));
        let deep = ProjectOutputs::new("p", &["dist/gen/**".to_owned()]).unwrap();
        assert!(deep.comes_and_goes("p/dist"));
        assert!(deep.comes_and_goes("p/dist/gen"));
        // A file beside the outputs in that directory stays a name.
        assert!(!deep.comes_and_goes("p/dist/README.md"));
        // The project directory is the root of `*.tsbuildinfo`: not every name goes.
        assert!(!outputs.comes_and_goes("p/README.md"));
        assert!(!outputs.comes_and_goes("p/src/a.ts"));
    }

    #[test]
    fn present_drops_names_gone_from_disk() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("p/src")).unwrap();
        std::fs::write(dir.path().join("p/a.txt"), "").unwrap();
        let names = present(dir.path(), "p", vec!["a.txt".into(), "gone.md".into(), "src".into()]);
        assert_eq!(names, ["a.txt", "src"]);
    }
}
