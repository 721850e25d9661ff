//! Which of the paths a traced run touched are undeclared inputs (`--verify=inputs`, issue
//! 11). The worker reports every failed lookup under the exec root and every directory the
//! task listed, with what it held there ([`ReadsReport`]); only the side holding the
//! workspace can tell which of those the task's key does not see:
//!
//! - a failed lookup of `p` is undeclared unless `p` is represented in the key
//!   ([`InputScope::represents`]: an input were it there, or an output of the task or of a
//!   task upstream; [`InputScope::upstream_input`]: an input of an upstream whose key it
//!   folds, which its exec roots hold) or is internal (`.git`, `.prova`). A `p` that is a
//!   workspace file, or a workspace directory with files the key does not represent, is
//!   named; so is a `p` that does not exist at all and is not ignored (`.gitignore`) — the
//!   task acts on its absence — unless it lies directly in a directory whose entry names
//!   the key folds ([`InputScope::lists`]: a file appearing there moves the key);
//! - a listed directory `d` is undeclared when the workspace holds an entry in it that the
//!   exec root did not (the listing the task saw was not the workspace's) and that the key
//!   does not represent; it is named `d/`. Where the key folds `d`'s entry names (its project
//!   directory, an upstream's whose key it folds), the root's stand-ins show them: it is
//!   named only when the root lacked a name the key folds that is still there;
//! - inside an installed tree ([`crate::trees`]) only the tree decides: a path in a tree the
//!   task sees is declared — unless the task failed to find a path that the tree holds (the
//!   tree was not there: never proven) —, a path in a tree it does not see is named when it
//!   exists, whatever `inputs` say (an input never lies inside a tree, so declaring it
//!   would bring nothing into the root), with [`Judged::advice`] instead of a pattern;
//! - an output of a transitive upstream that a task under `upstream_outputs = "direct"`
//!   does not hold ([`InputScope::hidden_upstream`]) is named, with advice, not a pattern.
//!
//! The same judgement serves a farm run: its coordinator has no workspace and hands what
//! the run touched to the client ([`Verdict::UndeclaredInputs`]'s `evidence`), which calls
//! [`WorkspaceView::judge`] and [`inputs_verdict`] as a local run does.

use std::collections::HashMap;

use ignore::Match;
use ignore::gitignore::Gitignore;
use prova_protocol::events::{MAX_CARRIED_PATHS, Verdict};
use prova_protocol::globs::PathGlobs;
use prova_protocol::work::ReadsReport;

use crate::inputs::files::ListSource;

/// The view is built before the run (`crate::prepare`, below this module); judged here.
pub use crate::prepare::WorkspaceView;

/// What the inputs proof found undeclared in one traced run.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Judged {
    /// The undeclared paths, sorted (`dir/`: a listing).
    pub paths: Vec<String>,
    /// Patterns for `inputs` that cover the paths `inputs` can declare ([`suggest_globs`]).
    pub suggest: Vec<String>,
    /// What to do about the paths inside installed trees, one sentence per tree.
    pub advice: Vec<String>,
}

impl WorkspaceView {
    /// The installed tree holding `p`, if any.
    fn tree_of(&self, p: &str) -> Option<&(String, Option<String>)> {
        self.installed.iter().find(|(t, _)| prova_protocol::globs::is_within(p, t))
    }

    /// The undeclared inputs among `reads` of `task` (in `project_dir`), with patterns and
    /// advice: see the module docs.
    pub fn judge(&self, task: &str, project_dir: &str, reads: &ReadsReport) -> Judged {
        let paths = self.undeclared(task, reads);
        let own = self.trees.get(task).map(Vec::as_slice).unwrap_or_default();
        let mut advice: Vec<String> = Vec::new();
        let mut declarable = Vec::new();
        let scope = self.scopes.get(task);
        for p in &paths {
            if let Some(up) = scope.and_then(|s| s.hidden_upstream(p)) {
                let words = format!(
                    "`{p}` is an output of `{up}`, not a direct dependency: under \
                     `upstream_outputs = \"direct\"` the exec root holds only direct \
                     dependencies' outputs, and `inputs` cannot bring an upstream's in; depend \
                     on `{up}`, or drop `upstream_outputs`"
                );
                if !advice.contains(&words) {
                    advice.push(words);
                }
                continue;
            }
            let Some((tree, holder)) = self.tree_of(p) else {
                match self.unlisted_dir(p) {
                    Some(true) => advice.push(format!(
                        "`{p}` holds only gitignored files, and a listing shows it: declare \
                         them (`\"{}\"` keys an ignored directory's files), or remove it",
                        as_pattern(project_dir, &format!("{p}/**"))
                    )),
                    Some(false) => advice.push(format!(
                        "`{p}` is an empty directory, and a listing shows it: a key folds \
                         files, not directories; remove it, or put a file in it"
                    )),
                    None => declarable.push(p.clone()),
                }
                continue;
            };
            let words = if own.contains(tree) {
                format!(
                    "`{tree}` is an installed tree this task sees, yet its exec root lacked                      it: a fault of prova's sandbox, not of the task"
                )
            } else {
                match holder {
                    Some(project) => format!(
                        "`{tree}` is the installed tree of project `{project}`, which this                          task's project does not depend on: `inputs` cannot bring an installed                          tree in; make `{project}` a dependency (`package.json` dependencies or                          `[project] deps`) and its tree is mounted and keyed"
                    ),
                    None => format!(
                        "`{tree}` is an installed tree only tasks of projects under `{}` see;                          `inputs` cannot bring an installed tree in",
                        crate::trees::holder(tree)
                    ),
                }
            };
            if !advice.contains(&words) {
                advice.push(words);
            }
        }
        let suggest = suggest_globs(project_dir, &declarable, |p| self.is_dir(p));
        Judged { paths, suggest, advice }
    }

    /// The undeclared inputs among `reads` of `task`, sorted and de-duplicated.
    pub fn undeclared(&self, task: &str, reads: &ReadsReport) -> Vec<String> {
        let scope = self.scopes.get(task);
        let trees = self.trees.get(task).map(Vec::as_slice).unwrap_or_default();
        // Inside an installed tree only the tree decides: an input never lies there.
        let represented = |p: &str| match self.tree_of(p) {
            Some((t, _)) => trees.contains(t),
            None => {
                scope.is_some_and(|s| s.represents(p) || s.upstream_input(p))
                    || trees.iter().any(|t| prova_protocol::globs::is_within(p, t))
            }
        };
        // A file an input pattern matches but the file list left out (gitignored: `src/**`
        // beside an ignored `src/cfg.local`) is no input — the key folds listed files only —
        // yet a run in place reads it (`cat src/*`): named.
        let unkeyed = |p: &str| {
            self.tree_of(p).is_none()
                && !trees.iter().any(|t| prova_protocol::globs::is_within(p, t))
                && !scope.is_some_and(|s| s.represents_output(p))
                && self.files.all().binary_search_by(|f| f.as_str().cmp(p)).is_err()
                && self.is_unlisted_file(p)
        };
        // A directory whose entry names the key folds: its listing, and an absence there.
        let lists = |d: &str| scope.is_some_and(|s| s.lists(d));
        let parent = |p: &str| p.rsplit_once('/').map_or("", |(d, _)| d).to_owned();
        let mut ignores = Ignores::new(self);
        let mut out = Vec::new();
        let missing: Vec<String> =
            reads.missing.iter().map(|p| self.through_trees(p, trees)).collect();
        let touched: Vec<String> =
            reads.touched.iter().map(|p| self.through_trees(p, trees)).collect();
        for p in &missing {
            if is_internal(p) {
                continue;
            }
            if self.tree_of(p).is_some() {
                // A tree holds what it holds: a lookup there that failed although the path
                // exists means the tree was not in the root (one the task does not see, or
                // one the sandbox lost); one that does not exist is an absence the tree's
                // digest keys.
                if std::fs::symlink_metadata(self.root.join(p)).is_ok() {
                    out.push(p.clone());
                }
                continue;
            }
            if represented(p) {
                if unkeyed(p) {
                    out.push(p.clone());
                }
                continue;
            }
            // An upstream's output its exec root does not hold (`upstream_outputs =
            // "direct"`): looked for, so wanted — named even where gitignored.
            if scope.is_some_and(|s| s.hidden_upstream(p).is_some()) {
                out.push(p.clone());
                continue;
            }
            let exists = self.files.all().binary_search(p).is_ok();
            let named = if exists {
                true
            } else {
                let under = self.files.under(p);
                if under.is_empty() {
                    !lists(&parent(p)) && !ignores.ignored(p)
                } else {
                    under.iter().any(|f| !represented(f))
                }
            };
            if named {
                out.push(p.clone());
            }
        }
        // What a survey run (the whole workspace visible) read: a workspace file the key
        // does not represent — listed or not: a gitignored file (another project's `dist`, an
        // installed package outside every declared tree) is read all the same. Directories it
        // merely stat'ed are not reads of their files.
        for p in &touched {
            if is_internal(p) || (represented(p) && !unkeyed(p)) {
                continue;
            }
            let listed = self.files.all().binary_search(p).is_ok();
            if listed || self.is_unlisted_file(p) {
                out.push(p.clone());
            }
        }
        for l in &reads.listed {
            if is_internal(&l.dir) {
                continue;
            }
            // A directory whose names the key folds: the root must have shown every one
            // still there (its stand-ins) — a worker that made none is not trusted to have.
            if let Some(names) = scope.and_then(|s| s.listed_names(&l.dir))
                && l.complete
            {
                let base = self.root.join(&l.dir);
                let unshown = names.iter().any(|n| {
                    l.entries.binary_search(n).is_err()
                        && std::fs::symlink_metadata(base.join(n)).is_ok()
                });
                if unshown {
                    out.push(if l.dir.is_empty() {
                        "./".to_owned()
                    } else {
                        format!("{}/", l.dir)
                    });
                }
            } else {
                let prefix = if l.dir.is_empty() { String::new() } else { format!("{}/", l.dir) };
                let hidden = self.files.under(&l.dir).iter().any(|f| {
                    let rest = &f[prefix.len()..];
                    let name = rest.split('/').next().unwrap_or(rest);
                    l.entries.binary_search_by(|e| e.as_str().cmp(name)).is_err() && !represented(f)
                });
                if hidden {
                    out.push(if l.dir.is_empty() { "./".to_owned() } else { prefix });
                }
            }
            if l.complete {
                self.unkeyed_entries(&l.dir, &l.entries, scope, trees, &mut out);
            }
        }
        // A path the task writes is an (undeclared) output, not an input.
        out.retain(|p| reads.wrote.binary_search(p).is_err());
        out.sort();
        out.dedup();
        out
    }

    /// Where `p`, inside one of `trees`, really leads: a link in an installed tree (an npm
    /// workspace's `node_modules/@s/a -> ../../packages/a`) can lead out of it, into the
    /// workspace, and what the task read there is judged like any workspace path. Links are
    /// followed component by component, lexically (at most 40); a path outside every tree,
    /// or through a link out of the workspace, is returned as it is.
    fn through_trees(&self, p: &str, trees: &[String]) -> String {
        use prova_protocol::globs::is_within;
        if !trees.iter().any(|t| is_within(p, t)) {
            return p.to_owned();
        }
        let mut queue: std::collections::VecDeque<String> =
            p.split('/').map(str::to_owned).collect();
        let mut parts: Vec<String> = Vec::new();
        let mut hops = 0;
        while let Some(c) = queue.pop_front() {
            match c.as_str() {
                "" | "." => continue,
                ".." => {
                    if parts.pop().is_none() {
                        return p.to_owned();
                    }
                    continue;
                }
                _ => parts.push(c),
            }
            let abs = self.root.join(parts.join("/"));
            match std::fs::symlink_metadata(&abs) {
                Ok(m) if m.file_type().is_symlink() => {
                    hops += 1;
                    let target = std::fs::read_link(&abs).ok();
                    let Some(t) = target.as_ref().and_then(|t| t.to_str()) else {
                        return p.to_owned();
                    };
                    if hops > 40 || t.starts_with('/') {
                        return p.to_owned();
                    }
                    parts.pop();
                    for tc in t.split('/').rev() {
                        queue.push_front(tc.to_owned());
                    }
                }
                Ok(_) => {}
                Err(_) => {
                    parts.extend(queue.drain(..).filter(|c| !c.is_empty() && c != "."));
                    break;
                }
            }
        }
        parts.join("/")
    }

    /// The entries of the workspace's directory `dir` that a listing of it in the root did
    /// not show (`shown`, sorted) and whose presence no key folds, pushed onto `out`: what
    /// the file list leaves out — an empty directory, one holding only gitignored files, a
    /// gitignored file or link — unless it is an output of the task or of a task upstream
    /// (`holds_outputs`), or lies in an installed tree the task sees. A run in place lists
    /// them (`ls src`, a generator enumerating directories), so its output may differ from
    /// the root's while no key moves when one appears. Listed files, and directories holding
    /// listed files, are judged by the caller. At most [`MAX_DIR_ENTRIES`] entries are read.
    fn unkeyed_entries(
        &self,
        dir: &str,
        shown: &[String],
        scope: Option<&crate::inputs::InputScope>,
        trees: &[String],
        out: &mut Vec<String>,
    ) {
        let Ok(entries) = std::fs::read_dir(self.root.join(dir)) else { return };
        for entry in entries.take(MAX_DIR_ENTRIES).flatten() {
            // A name that is not UTF-8 cannot be listed or keyed: the file list refuses it.
            let Ok(name) = entry.file_name().into_string() else { continue };
            if shown.binary_search(&name).is_ok() {
                continue;
            }
            let p = prova_protocol::globs::join_rel(dir, &name);
            if is_internal(&p)
                || self.files.all().binary_search(&p).is_ok()
                || !self.files.under(&p).is_empty()
            {
                continue;
            }
            if let Some((t, _)) = self.tree_of(&p) {
                if !trees.contains(t) {
                    out.push(p);
                }
                continue;
            }
            let is_dir = entry.file_type().is_ok_and(|t| t.is_dir());
            let theirs = scope.is_some_and(|s| {
                if is_dir { s.holds_outputs(&p) } else { s.represents_output(&p) }
            });
            if !theirs {
                out.push(p);
            }
        }
    }

    /// Whether `rel` is a directory of the workspace that holds no file the file list
    /// holds: empty, or holding only gitignored files. `Some(true)` when some file lies
    /// beneath, or more than [`MAX_DIR_ENTRIES`] entries do (not called empty unseen);
    /// `None` when `rel` is not such a directory.
    fn unlisted_dir(&self, rel: &str) -> Option<bool> {
        let path = self.root.join(rel);
        if !std::fs::symlink_metadata(&path).is_ok_and(|m| m.is_dir())
            || !self.files.under(rel).is_empty()
        {
            return None;
        }
        let mut todo = vec![path];
        let mut seen = 0;
        while let Some(d) = todo.pop() {
            let Ok(entries) = std::fs::read_dir(&d) else { continue };
            for e in entries.flatten() {
                seen += 1;
                if seen > MAX_DIR_ENTRIES {
                    return Some(true);
                }
                match e.file_type() {
                    Ok(t) if t.is_dir() => todo.push(e.path()),
                    Ok(_) => return Some(true),
                    Err(_) => {}
                }
            }
        }
        Some(false)
    }

    /// Whether `rel` is a file (or symlink) in the workspace that its file list leaves out
    /// (gitignored).
    fn is_unlisted_file(&self, rel: &str) -> bool {
        prova_protocol::globs::is_clean_relative(rel)
            && std::fs::symlink_metadata(self.root.join(rel)).is_ok_and(|m| !m.is_dir())
    }

    /// Whether `rel` is a directory of the workspace (holds listed files).
    pub fn is_dir(&self, rel: &str) -> bool {
        let rel = rel.trim_end_matches('/');
        self.files.all().binary_search_by(|f| f.as_str().cmp(rel)).is_err()
            && !self.files.under(rel).is_empty()
    }
}

/// The inputs verdict of a traced run from what was judged undeclared, whether it wrote
/// outside its outputs (`wrote_outside`: that verdict is made apart) and how it failed;
/// `None` when those writes are the only finding. A run that failed is never proven
/// complete. At most [`MAX_CARRIED_PATHS`] paths are carried, the rest counted in `more`.
pub fn inputs_verdict(
    judged: Judged,
    wrote_outside: bool,
    failed: Option<String>,
    log_tail: Vec<String>,
) -> Option<Verdict> {
    let Judged { mut paths, suggest, advice } = judged;
    match (paths.is_empty(), failed) {
        (true, _) if wrote_outside => None,
        (true, None) => Some(Verdict::ProvenComplete),
        (true, Some(reason)) => Some(Verdict::SandboxFailed { reason, traced: true, log_tail }),
        (false, failed) => {
            let more = paths.len().saturating_sub(MAX_CARRIED_PATHS);
            paths.truncate(MAX_CARRIED_PATHS);
            Some(Verdict::UndeclaredInputs {
                paths,
                traced: true,
                more,
                failed,
                log_tail,
                suggest,
                advice,
                evidence: None,
            })
        }
    }
}

/// What of `reads` (a traced run of a task in `project_dir` with `outputs`, mounting the
/// installed `trees`) a client needs to judge it ([`WorkspaceView::judge`]), for a side
/// without the workspace (a farm coordinator): failed lookups outside the task's own
/// outputs, listings outside the mounted trees (files inside a tree are never listed
/// workspace files), what it read, and the writes among those lookups.
pub fn evidence(
    project_dir: &str,
    outputs: &[String],
    trees: &[&str],
    reads: &ReadsReport,
) -> ReadsReport {
    use prova_protocol::globs::is_within;
    let own = PathGlobs::new(project_dir, outputs).unwrap_or_else(|_| PathGlobs::empty());
    let missing: Vec<String> =
        reads.missing.iter().filter(|p| !is_internal(p) && !own.is_match(p)).cloned().collect();
    let wrote = reads.wrote.iter().filter(|w| missing.binary_search(w).is_ok()).cloned().collect();
    ReadsReport {
        traced: reads.traced,
        listed: reads
            .listed
            .iter()
            .filter(|l| !is_internal(&l.dir) && !trees.iter().any(|t| is_within(&l.dir, t)))
            .cloned()
            .collect(),
        touched: reads.touched.iter().filter(|p| !is_internal(p)).cloned().collect(),
        missing,
        wrote,
    }
}

/// Whether `reads` holds anything a workspace could judge undeclared.
pub fn anything_to_judge(reads: &ReadsReport) -> bool {
    !reads.missing.is_empty() || !reads.listed.is_empty() || !reads.touched.is_empty()
}

/// The paths among `reads.wrote` that lie outside the outputs `outputs` of a task in
/// `project_dir`, sorted: a write of a path its globs match, or of a directory on the way
/// to one of their roots (`mkdir -p dist`), is its own business.
pub fn undeclared_writes(
    project_dir: &str,
    outputs: &[String],
    reads: &ReadsReport,
) -> Vec<String> {
    let globs = PathGlobs::new(project_dir, outputs).unwrap_or_else(|_| PathGlobs::empty());
    let mut out: Vec<String> = reads
        .wrote
        .iter()
        .filter(|p| !is_internal(p))
        .filter(|p| {
            !globs.is_match(p)
                && !globs.roots().iter().any(|r| {
                    r == *p || r.starts_with(&format!("{p}/")) || p.starts_with(&format!("{r}/"))
                })
        })
        .cloned()
        .collect();
    out.sort();
    out.dedup();
    out
}

/// Patterns for a task in `project_dir` to add to its `inputs` that cover `paths` (the
/// undeclared inputs, workspace-relative; `dir/` a listed directory): a directory that was
/// listed, or several of whose files were read, as `dir/**`; a workspace directory named
/// itself (`is_dir`) likewise; a single file as itself. Patterns covered by another are
/// dropped; files directly in the project's (or the workspace's) own directory are never
/// widened to all of it. Relative to the project; `//…` outside it.
pub fn suggest_globs(
    project_dir: &str,
    paths: &[String],
    is_dir: impl Fn(&str) -> bool,
) -> Vec<String> {
    use std::collections::BTreeMap;
    let mut dirs: Vec<String> = Vec::new();
    let mut by_parent: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for p in paths {
        if let Some(d) = p.strip_suffix('/') {
            dirs.push(if d == "." { String::new() } else { d.to_owned() });
        } else if is_dir(p) {
            dirs.push(p.clone());
        } else {
            let parent = p.rsplit_once('/').map_or(String::new(), |(d, _)| d.to_owned());
            by_parent.entry(parent).or_default().push(p.clone());
        }
    }
    let mut files = Vec::new();
    for (parent, list) in by_parent {
        if list.len() >= 2 && !parent.is_empty() && parent != project_dir {
            dirs.push(parent);
        } else {
            files.extend(list);
        }
    }
    // The project's own directory or the workspace root, listed: too wide to suggest.
    dirs.retain(|d| !d.is_empty() && d != project_dir);
    dirs.sort();
    dirs.dedup();
    let covered = |p: &str, dirs: &[String]| dirs.iter().any(|d| p.starts_with(&format!("{d}/")));
    let kept: Vec<String> = dirs.iter().filter(|d| !covered(d, &dirs)).cloned().collect();
    let mut out: Vec<String> = kept.iter().map(|d| format!("{d}/**")).collect();
    out.extend(files.into_iter().filter(|f| !covered(f, &kept)));
    let mut out: Vec<String> = out.iter().map(|p| as_pattern(project_dir, p)).collect();
    out.sort();
    out.dedup();
    out
}

/// Workspace-relative `path` as an `inputs` pattern of a task in `project_dir`: relative to
/// the project, `//…` outside it.
fn as_pattern(project_dir: &str, path: &str) -> String {
    if project_dir.is_empty() {
        return path.to_owned();
    }
    match path.strip_prefix(project_dir).and_then(|r| r.strip_prefix('/')) {
        Some(rel) => rel.to_owned(),
        None => format!("//{path}"),
    }
}

/// Most entries read from one workspace directory when judging a listing of it.
const MAX_DIR_ENTRIES: usize = 10_000;

fn is_internal(path: &str) -> bool {
    path.split('/').any(|c| c == ".git" || c == ".prova")
}

/// `.gitignore` files along the paths asked about, read once each.
struct Ignores<'a> {
    view: &'a WorkspaceView,
    /// Workspace-relative directory → its `.gitignore`, if it has one.
    by_dir: HashMap<String, Option<Gitignore>>,
}

impl<'a> Ignores<'a> {
    fn new(view: &'a WorkspaceView) -> Self {
        Self { view, by_dir: HashMap::new() }
    }

    /// Whether `rel` (which need not exist) would be left out of the file list: below a
    /// directory the listing skips, or ignored by the `.gitignore` files above it (deeper
    /// ones decide; `!` re-includes), or by `.git/info/exclude`.
    fn ignored(&mut self, rel: &str) -> bool {
        let parts: Vec<&str> = rel.split('/').collect();
        if self.view.files.source != Some(ListSource::Git) && parts.contains(&"node_modules") {
            return true; // the walk never enters these
        }
        // An absent path could appear as a file or a directory: ignored as either counts
        // (`gen/` ignores a missing `gen` that a glob `gen/*.sh` probed).
        self.ignored_as(rel, &parts, false) || self.ignored_as(rel, &parts, true)
    }

    fn ignored_as(&mut self, rel: &str, parts: &[&str], is_dir: bool) -> bool {
        let mut ignored = false;
        if let Some(g) = self.load("\0exclude", ".git/info/exclude") {
            ignored = matches!(g.matched_path_or_any_parents(rel, is_dir), Match::Ignore(_));
        }
        for depth in 0..parts.len() {
            let dir = parts[..depth].join("/");
            let file =
                if dir.is_empty() { ".gitignore".to_owned() } else { format!("{dir}/.gitignore") };
            let Some(g) = self.load(&dir, &file) else { continue };
            match g.matched_path_or_any_parents(parts[depth..].join("/"), is_dir) {
                Match::Ignore(_) => ignored = true,
                Match::Whitelist(_) => ignored = false,
                Match::None => {}
            }
        }
        ignored
    }

    /// The ignore file at workspace-relative `file`, cached under `key`.
    fn load(&mut self, key: &str, file: &str) -> Option<&Gitignore> {
        let root = &self.view.root;
        self.by_dir
            .entry(key.to_owned())
            .or_insert_with(|| {
                let path = root.join(file);
                if !path.is_file() {
                    return None;
                }
                // Matched relative to the directory holding the file (the repository root
                // for `info/exclude`); a malformed line is skipped, as git skips it.
                let base =
                    if key == "\0exclude" { root.clone() } else { path.parent()?.to_owned() };
                let mut b = ignore::gitignore::GitignoreBuilder::new(base);
                let _ = b.add(&path);
                b.build().ok()
            })
            .as_ref()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use prova_protocol::work::Listing;

    use crate::inputs::FileList;

    use super::*;

    fn view(root: &std::path::Path, files: &[&str]) -> WorkspaceView {
        let mut list = FileList::from_paths(files.iter().map(|f| (*f).to_owned()).collect());
        list.source = Some(ListSource::Walk);
        WorkspaceView {
            root: root.to_owned(),
            files: Arc::new(list),
            scopes: Arc::new(HashMap::new()),
            trees: Arc::new(HashMap::new()),
            installed: Arc::new(Vec::new()),
        }
    }

    #[test]
    fn missing_paths_existing_absent_ignored_and_internal() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join(".gitignore"), "*.log\n!keep.log\ngen/\n").unwrap();
        std::fs::create_dir_all(d.path().join("p")).unwrap();
        std::fs::write(d.path().join("p/.gitignore"), "tmp/\n").unwrap();
        let v = view(d.path(), &["p/a.txt", "p/docs/x.md", ".gitignore"]);
        let reads = ReadsReport {
            traced: true,
            missing: [
                "p/a.txt",          // a workspace file
                "p/docs",           // a workspace directory
                "p/config.local",   // nowhere: acting on its absence
                "p/build.log",      // ignored by the root's .gitignore
                "p/keep.log",       // re-included
                "p/tmp/x",          // ignored by p/.gitignore
                "p/.git/HEAD",      // internal
                "p/node_modules/x", // never listed by the walk
                "p/gen",            // ignored as a directory
            ]
            .map(String::from)
            .to_vec(),
            ..Default::default()
        };
        assert_eq!(
            v.undeclared("p#t", &reads),
            ["p/a.txt", "p/config.local", "p/docs", "p/keep.log"]
        );
    }

    #[test]
    fn reads_of_unlisted_files_are_named_unless_inside_a_declared_tree() {
        let d = tempfile::tempdir().unwrap();
        let r = d.path();
        for dir in ["node_modules/foo", "packages/core", "packages/app/dist", "other/dist"] {
            std::fs::create_dir_all(r.join(dir)).unwrap();
        }
        for f in ["node_modules/foo/index.js", "packages/core/package.json", "other/dist/x.js"] {
            std::fs::write(r.join(f), "x").unwrap();
        }
        // npm workspaces: the tree links back into the workspace.
        std::os::unix::fs::symlink("../packages/core", r.join("node_modules/core")).unwrap();
        let mut v = view(r, &["packages/core/src/a.ts"]);
        v.trees = Arc::new(HashMap::from([("app#t".to_owned(), vec!["node_modules".to_owned()])]));
        let touched = |p: &[&str]| ReadsReport {
            traced: true,
            touched: p.iter().map(|s| (*s).to_owned()).collect(),
            ..Default::default()
        };
        // Inside the tree it mounts: declared.
        assert!(v.undeclared("app#t", &touched(&["node_modules/foo/index.js"])).is_empty());
        // Through the tree's link, out into another project: the real path is named.
        assert_eq!(
            v.undeclared("app#t", &touched(&["node_modules/core/package.json"])),
            ["packages/core/package.json"]
        );
        let missing = ReadsReport {
            traced: true,
            missing: vec!["node_modules/core/package.json".into()],
            ..Default::default()
        };
        assert_eq!(v.undeclared("app#t", &missing), ["packages/core/package.json"]);
        // Gitignored (unlisted) files outside every tree: named all the same.
        assert_eq!(v.undeclared("app#t", &touched(&["other/dist/x.js"])), ["other/dist/x.js"]);
        // A task that does not mount the tree: its reads there are undeclared.
        assert_eq!(
            v.undeclared("lib#t", &touched(&["node_modules/foo/index.js"])),
            ["node_modules/foo/index.js"]
        );
        // A path that does not exist and is not listed is not a read of a file.
        assert!(v.undeclared("app#t", &touched(&["other/dist/gone.js"])).is_empty());
    }

    #[test]
    fn a_listing_is_undeclared_when_the_workspace_has_entries_the_root_lacked() {
        let d = tempfile::tempdir().unwrap();
        let v = view(d.path(), &["p/src/a.txt", "p/src/b.txt", "p/src/sub/c.txt", "top.txt"]);
        let listing = |dir: &str, entries: &[&str]| Listing {
            dir: dir.to_owned(),
            entries: entries.iter().map(|e| (*e).to_owned()).collect(),
            complete: true,
        };
        let reads = |listed| ReadsReport {
            traced: true,
            missing: Vec::new(),
            listed,
            ..Default::default()
        };
        assert_eq!(v.undeclared("p#t", &reads(vec![listing("p/src", &["a.txt"])])), ["p/src/"]);
        assert_eq!(
            v.undeclared("p#t", &reads(vec![listing("p/src", &["a.txt", "b.txt"])])),
            ["p/src/"],
            "sub/ is missing"
        );
        assert!(
            v.undeclared("p#t", &reads(vec![listing("p/src", &["a.txt", "b.txt", "new", "sub"])]))
                .is_empty(),
            "an extra entry (an output) hides nothing"
        );
        assert_eq!(v.undeclared("p#t", &reads(vec![listing("", &["p"])])), ["./"]);
        assert!(v.undeclared("p#t", &reads(vec![listing("q", &[])])).is_empty());
    }

    /// A view of a workspace on disk whose task `p#t` declares `inputs = ["src/**"]`.
    fn loaded(root: &std::path::Path) -> WorkspaceView {
        written(
            root,
            &[
                ("prova.toml", "[workspace]\nprojects = [\"p\"]\n"),
                ("p/prova.toml", "[tasks.t]\ncommand = \"ls\"\ninputs = [\"src/**\"]\n"),
                ("p/src/a.txt", "a"),
                ("p/README.md", "r"),
                ("p/docs/x.md", "x"),
            ],
        )
    }

    /// The view of the workspace `files` (path, text) make once written under `root`.
    fn written(root: &std::path::Path, files: &[(&str, &str)]) -> WorkspaceView {
        for (f, text) in files {
            std::fs::create_dir_all(root.join(f).parent().unwrap()).unwrap();
            std::fs::write(root.join(f), text).unwrap();
        }
        let ws = crate::workspace::Workspace::load(root).unwrap();
        let graph = crate::graph::build_graph(&ws).unwrap();
        let plan = crate::plan::RunPlan::new(&ws, &graph, &[], &|_| None);
        let (scopes, files) = crate::prepare::input_scopes(&ws, &plan).unwrap();
        WorkspaceView {
            root: root.to_owned(),
            files: Arc::new(files),
            scopes: Arc::new(plan.tasks.iter().map(|t| t.id.to_string()).zip(scopes).collect()),
            trees: Arc::new(HashMap::new()),
            installed: Arc::new(Vec::new()),
        }
    }

    #[test]
    fn a_listing_names_the_entries_no_key_folds_but_not_outputs() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path();
        let v = written(
            root,
            &[
                ("prova.toml", "[workspace]\nprojects = [\"p\"]\n"),
                (".gitignore", "*.local\np/src/ign/\np/src/gen/\n"),
                (
                    "p/prova.toml",
                    "[tasks.t]\ncommand = \"ls src\"\ninputs = [\"src/**\", \"!src/gen/**\"]\n\
                     outputs = [\"src/gen/**\"]\n",
                ),
                ("p/src/a.txt", "a"),
                ("p/src/x.local", "x"),
                ("p/src/ign/blob", "b"),
                ("p/src/gen/out.js", "o"),
            ],
        );
        std::fs::create_dir_all(root.join("p/src/empty")).unwrap();
        std::fs::create_dir_all(root.join("p/src/gen/sub")).unwrap();
        let listing = |entries: &[&str], complete| ReadsReport {
            traced: true,
            listed: vec![Listing {
                dir: "p/src".to_owned(),
                entries: entries.iter().map(|e| (*e).to_owned()).collect(),
                complete,
            }],
            ..Default::default()
        };
        // An empty directory, an ignored file, a directory of ignored files; not the
        // task's own output directory.
        assert_eq!(
            v.undeclared("p#t", &listing(&["a.txt"], true)),
            ["p/src/empty", "p/src/ign", "p/src/x.local"]
        );
        assert!(
            v.undeclared("p#t", &listing(&["a.txt", "empty", "ign", "x.local"], true)).is_empty()
        );
        // A listing cut short shows too little to judge what it lacked.
        assert!(v.undeclared("p#t", &listing(&["a.txt"], false)).is_empty());
        // Each with what to do about it.
        let judged = v.judge("p#t", "p", &listing(&["a.txt"], true));
        assert_eq!(judged.suggest, ["src/x.local"]);
        assert!(judged.advice.iter().any(|a| a.starts_with("`p/src/empty` is an empty directory")));
        assert!(judged.advice.iter().any(|a| a.contains("\"src/ign/**\"")), "{:?}", judged.advice);
    }

    #[test]
    fn a_listing_of_the_project_directory_is_judged_against_the_names_the_key_folds() {
        let d = tempfile::tempdir().unwrap();
        let v = loaded(d.path());
        let listing = |entries: &[&str]| ReadsReport {
            traced: true,
            listed: vec![Listing {
                dir: "p".to_owned(),
                entries: entries.iter().map(|e| (*e).to_owned()).collect(),
                complete: true,
            }],
            ..Default::default()
        };
        // The root showed every name (its stand-ins): keyed, not named.
        let all = ["README.md", "docs", "prova.toml", "src"];
        assert!(v.undeclared("p#t", &listing(&all)).is_empty());
        // A root without its stand-ins (a worker that made none): named.
        assert_eq!(v.undeclared("p#t", &listing(&["prova.toml", "src"])), ["p/"]);
        // A name gone from disk since the list was made need not be shown.
        std::fs::remove_file(d.path().join("p/README.md")).unwrap();
        assert!(v.undeclared("p#t", &listing(&["docs", "prova.toml", "src"])).is_empty());
        // An absent name there is keyed; one below it is not.
        let missing = |p: &[&str]| ReadsReport {
            traced: true,
            missing: p.iter().map(|s| (*s).to_owned()).collect(),
            ..Default::default()
        };
        assert!(v.undeclared("p#t", &missing(&["p/.babelrc"])).is_empty());
        assert_eq!(v.undeclared("p#t", &missing(&["p/docs/.babelrc"])), ["p/docs/.babelrc"]);
        // A listing of another directory is judged as before.
        let docs = ReadsReport {
            traced: true,
            listed: vec![Listing { dir: "p/docs".into(), entries: Vec::new(), complete: true }],
            ..Default::default()
        };
        assert_eq!(v.undeclared("p#t", &docs), ["p/docs/"]);
    }

    #[test]
    fn an_upstreams_inputs_and_names_are_keyed_unless_the_task_is_confined() {
        let d = tempfile::tempdir().unwrap();
        let files = [
            ("prova.toml", "[workspace]\nprojects = [\"lib\", \"app\", \"boxed\"]\n"),
            ("lib/prova.toml", "[tasks.build]\ncommand = \"true\"\ninputs = [\"src/**\"]\n"),
            ("lib/src/x.ts", "x"),
            ("lib/README.md", "r"),
            (
                "app/prova.toml",
                "[project]\ndeps = [\"lib\"]\n[tasks.build]\ncommand = \"true\"\n\
                 deps = [\"^build\"]\ninputs = [\"src/**\"]\n",
            ),
            ("app/src/a.ts", "a"),
            (
                "boxed/prova.toml",
                "[project]\ndeps = [\"lib\"]\n[tasks.build]\ncommand = \"true\"\n\
                 deps = [\"^build\"]\ninputs = [\"src/**\"]\noutputs = [\"dist/**\"]\n\
                 sandbox = true\n",
            ),
            ("boxed/src/a.ts", "a"),
        ];
        let v = written(d.path(), &files);
        let missing = |p: &[&str]| ReadsReport {
            traced: true,
            missing: p.iter().map(|s| (*s).to_owned()).collect(),
            ..Default::default()
        };
        let listing = |entries: &[&str]| ReadsReport {
            traced: true,
            listed: vec![Listing {
                dir: "lib".to_owned(),
                entries: entries.iter().map(|e| (*e).to_owned()).collect(),
                complete: true,
            }],
            ..Default::default()
        };
        // lib's input, there or not, and an absent name in its directory: keyed through its
        // key; its README's bytes are not.
        let probes = ["lib/src/x.ts", "lib/src/y.ts", "lib/.babelrc", "lib/README.md"];
        assert_eq!(v.undeclared("app#build", &missing(&probes)), ["lib/README.md"]);
        assert!(
            v.undeclared("app#build", &listing(&["README.md", "prova.toml", "src"])).is_empty()
        );
        assert_eq!(v.undeclared("app#build", &listing(&["prova.toml", "src"])), ["lib/"]);
        // A confined task keys lib's bytes only: all of it named, as before.
        assert_eq!(
            v.undeclared("boxed#build", &missing(&probes)),
            ["lib/.babelrc", "lib/README.md", "lib/src/x.ts", "lib/src/y.ts"]
        );
        // Its roots show none of lib's names: a listing there lacks them, and is named.
        assert_eq!(v.undeclared("boxed#build", &listing(&["src"])), ["lib/"]);
    }

    #[test]
    fn suggestions_widen_directories_and_keep_single_files() {
        let paths: Vec<String> = [
            "p/a.txt",
            "p/b/1.txt",
            "p/b/2.txt",
            "p/b/sub/3.txt",
            "p/gen/",
            "p/gen/x.ts",
            "p/conf",
            "libs/s/data.txt",
            "p/c.txt",
            "p/",
        ]
        .map(String::from)
        .to_vec();
        let got = suggest_globs("p", &paths, |p| p == "p/conf");
        assert_eq!(got, ["//libs/s/data.txt", "a.txt", "b/**", "c.txt", "conf/**", "gen/**"]);
        assert_eq!(suggest_globs("", &["x/1".into(), "x/2".into()], |_| false), ["x/**"]);
        assert_eq!(suggest_globs("p", &["p/one.txt".into()], |_| false), ["one.txt"]);
    }

    #[test]
    fn writes_inside_the_outputs_and_on_the_way_to_them_are_not_named() {
        let reads = ReadsReport {
            wrote: [
                "p",
                "p/dist",
                "p/dist/a/b.js",
                "p/state.tsbuildinfo",
                "p/src/x",
                "p/.git/index",
            ]
            .map(String::from)
            .to_vec(),
            ..Default::default()
        };
        assert_eq!(
            undeclared_writes("p", &["dist/**".to_owned()], &reads),
            ["p/src/x", "p/state.tsbuildinfo"]
        );
    }
}
