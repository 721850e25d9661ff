//! `--affected REF`: the projects whose files changed since a git ref (committed, staged,
//! unstaged and untracked changes alike), plus every project that depends on them. A change
//! to a workspace-level file that every task reads (`prova.toml`, `fingerprint`, `inputs`)
//! affects every project.
//!
//! Then per task ([`tasks_for_files`]): a task of those projects is affected only when a
//! changed path is one its key can see — one of its inputs, task or workspace-wide, its
//! project's own config (`prova.toml`, `package.json`: its command may have changed) —
//! or when a task it depends on is affected. A README edit does not select a `build` whose
//! inputs are `src/**`.

use std::collections::{BTreeSet, HashMap};
use std::path::Path;
use std::process::Command;

use prova_protocol::globs::{PathGlobs, is_within};

use crate::graph::TaskGraph;
use crate::plan::RunPlan;
use crate::workspace::Workspace;

/// Git could not answer. `what` names the flag that asked (`--affected main`,
/// `--filter [main]`).
#[derive(Debug, thiserror::Error)]
pub enum AffectedError {
    /// git is missing or failed.
    #[error("{what}: `git {args}` failed: {message}")]
    Git {
        /// The flag and value that asked.
        what: String,
        /// The git arguments.
        args: String,
        /// What git said.
        message: String,
    },
    /// The workspace is not in a git work tree.
    #[error("{what}: {} is not inside a git repository", root.display())]
    NotARepo {
        /// The flag and value that asked.
        what: String,
        /// The workspace root.
        root: std::path::PathBuf,
    },
    /// git does not know the ref.
    #[error(
        "{what}: git knows no commit `{git_ref}`{}\n  help: pass a ref this repository has, e.g. \
         `{}` (since the last commit), `{}` (a local branch) or `{}`",
        why.as_ref().map(|w| format!(" ({w})")).unwrap_or_default(),
        example(flag, "HEAD~1"), example(flag, branch), example(flag, "<sha>")
    )]
    UnknownRef {
        /// The flag and value that asked.
        what: String,
        /// The flag alone, for the examples (`--affected`, `--filter`).
        flag: String,
        /// The ref given.
        git_ref: String,
        /// Why, when it can be told: no such remote, a branch not fetched, a local branch of
        /// that name.
        why: Option<String>,
        /// A local branch to show in the example: the checked-out one, else `main`.
        branch: String,
    },
}

impl AffectedError {
    /// The ref an [`AffectedError::UnknownRef`] names.
    pub fn unknown_ref(&self) -> Option<&str> {
        match self {
            Self::UnknownRef { git_ref, .. } => Some(git_ref),
            _ => None,
        }
    }
}

/// How `flag` takes `r`: `--affected main`, `--filter '[main]'`.
fn example(flag: &str, r: &str) -> String {
    if flag == "--filter" { format!("--filter '[{r}]'") } else { format!("{flag} {r}") }
}

/// Files changed since `git_ref` (`--affected`), workspace-relative.
pub fn changed_files(root: &Path, git_ref: &str) -> Result<BTreeSet<String>, AffectedError> {
    let asker = Asker { what: format!("--affected {git_ref}"), flag: "--affected" };
    changed_in(root, git_ref, None, &asker)
}

/// The files among [`changed_files`] that were added or deleted since `git_ref` (untracked
/// ones count as added): names that came or went, which a task folding its project
/// directory's entry names sees although they are not its inputs.
pub fn came_or_went(root: &Path, git_ref: &str) -> Result<BTreeSet<String>, AffectedError> {
    let asker = Asker { what: format!("--affected {git_ref}"), flag: "--affected" };
    changed_filtered(root, git_ref, None, &asker, Some("--diff-filter=AD"))
}

/// Who asks git, for the messages.
#[derive(Clone, Debug)]
pub struct Asker {
    /// The flag and value (`--filter ...[main]`).
    pub what: String,
    /// The flag alone, for the examples.
    pub flag: &'static str,
}

/// Files changed between `from` and `to`, workspace-relative: with `to`, the commits of
/// `from...to` (since their merge base); without, everything since the merge base of `from`
/// and `HEAD` — committed, staged, unstaged and untracked alike.
pub fn changed_in(
    root: &Path,
    from: &str,
    to: Option<&str>,
    asker: &Asker,
) -> Result<BTreeSet<String>, AffectedError> {
    changed_filtered(root, from, to, asker, None)
}

/// [`changed_in`], the diff narrowed by `filter` (`--diff-filter=…`).
fn changed_filtered(
    root: &Path,
    from: &str,
    to: Option<&str>,
    asker: &Asker,
    filter: Option<&str>,
) -> Result<BTreeSet<String>, AffectedError> {
    let mut files = BTreeSet::new();
    if git(root, &asker.what, &["rev-parse", "--is-inside-work-tree"]).is_err() {
        return Err(AffectedError::NotARepo { what: asker.what.clone(), root: root.to_path_buf() });
    }
    for r in std::iter::once(from).chain(to) {
        let commit = format!("{r}^{{commit}}");
        if git(root, &asker.what, &["rev-parse", "--verify", "--quiet", commit.as_str()]).is_err() {
            return Err(AffectedError::UnknownRef {
                what: asker.what.clone(),
                flag: asker.flag.to_owned(),
                git_ref: r.to_owned(),
                why: why_unknown(root, r),
                branch: git(root, r, &["symbolic-ref", "--short", "-q", "HEAD"])
                    .ok()
                    .map(|b| b.trim().to_owned())
                    .filter(|b| !b.is_empty())
                    .unwrap_or_else(|| "main".to_owned()),
            });
        }
    }
    let head = to.unwrap_or("HEAD");
    // The merge base makes `origin/main` mean "since this branch forked", as CI expects;
    // fall back to the ref itself when there is no common ancestor.
    let base = git(root, &asker.what, &["merge-base", from, head])
        .ok()
        .and_then(|s| s.lines().next().map(str::to_owned))
        .unwrap_or_else(|| from.to_owned());
    let mut diff = vec!["diff", "--name-only", "--no-renames", "-z"];
    diff.extend(filter);
    diff.push(base.as_str());
    if let Some(to) = to {
        diff.push(to);
    }
    let mut asks = vec![diff];
    if to.is_none() {
        asks.push(vec!["ls-files", "--others", "--exclude-standard", "-z"]);
    }
    for args in asks {
        let out = git(root, &asker.what, &args)?;
        files.extend(out.split('\0').filter(|s| !s.is_empty()).map(str::to_owned));
    }
    Ok(files)
}

/// Why git may not know `r`: `origin/main` in a clone without that remote, or with the
/// remote but the branch not fetched (CI's shallow checkouts); a local branch of that name.
fn why_unknown(root: &Path, r: &str) -> Option<String> {
    let (remote, branch) = r.split_once('/')?;
    let remotes = git(root, r, &["remote"]).ok()?;
    if !remotes.lines().any(|l| l == remote) {
        let local = format!("refs/heads/{branch}");
        let has_local = git(root, r, &["rev-parse", "--verify", "--quiet", local.as_str()]).is_ok();
        return Some(if has_local {
            format!("this repository has no remote `{remote}`; its local branch is `{branch}`")
        } else {
            format!("this repository has no remote `{remote}`")
        });
    }
    Some(format!("not fetched: `git fetch {remote} {branch}`"))
}

fn git(root: &Path, what: &str, args: &[&str]) -> Result<String, AffectedError> {
    let fail = |message: String| AffectedError::Git {
        what: what.to_owned(),
        args: args.join(" "),
        message,
    };
    // `--relative` paths are relative to the cwd for diff; run at the root and ask for
    // paths relative to it.
    let out = Command::new("git")
        .arg("-C")
        .arg(root)
        .args(["-c", "core.quotepath=off"])
        .args(args)
        .args(if args[0] == "diff" { &["--relative"][..] } else { &[][..] })
        .output()
        .map_err(|e| fail(e.to_string()))?;
    if !out.status.success() {
        // git's first line says what is wrong; the rest is advice or usage text.
        let said = String::from_utf8_lossy(&out.stderr);
        return Err(fail(said.lines().next().unwrap_or_default().trim().to_owned()));
    }
    String::from_utf8(out.stdout).map_err(|e| fail(e.to_string()))
}

/// Project indices affected since `git_ref`: owners of changed files and their dependents.
pub fn affected_projects(ws: &Workspace, git_ref: &str) -> Result<BTreeSet<usize>, AffectedError> {
    let files = changed_files(&ws.root, git_ref)?;
    Ok(projects_for_files(ws, &files))
}

/// The projects owning `files` (deepest project dir wins), plus their transitive dependents;
/// every project when a workspace-wide file changed.
pub fn projects_for_files(ws: &Workspace, files: &BTreeSet<String>) -> BTreeSet<usize> {
    with_dependents(ws, owners(ws, files))
}

/// The projects owning `files` (deepest project dir wins); every project when a
/// workspace-wide file changed. What a `--filter [ref]` selects.
pub fn owners(ws: &Workspace, files: &BTreeSet<String>) -> BTreeSet<usize> {
    let mut wide: Vec<String> = ws.settings.fingerprint.clone();
    wide.extend(ws.settings.inputs.iter().cloned());
    let wide = PathGlobs::new("", &wide).unwrap_or_else(|_| PathGlobs::empty());
    let root_config =
        ws.config_file.strip_prefix(&ws.root).ok().and_then(|p| p.to_str()).unwrap_or("prova.toml");
    if files.iter().any(|f| f == root_config || wide.is_match(f)) {
        return (0..ws.projects.len()).collect();
    }
    let mut direct = BTreeSet::new();
    for f in files {
        let owner = ws
            .projects
            .iter()
            .enumerate()
            .filter(|(_, p)| is_within(f, &p.dir))
            .max_by_key(|(_, p)| p.dir.len());
        if let Some((i, _)) = owner {
            direct.insert(i);
        }
    }
    direct
}

/// `set` plus every project that depends on one of them, transitively.
pub fn with_dependents(ws: &Workspace, set: BTreeSet<usize>) -> BTreeSet<usize> {
    let by_name: HashMap<&str, usize> =
        ws.projects.iter().enumerate().map(|(i, p)| (p.name.as_str(), i)).collect();
    let mut dependents = vec![Vec::new(); ws.projects.len()];
    for (i, p) in ws.projects.iter().enumerate() {
        for d in &p.deps {
            if let Some(&q) = by_name.get(d.value.as_str()) {
                dependents[q].push(i);
            }
        }
    }
    let mut out = set.clone();
    let mut stack: Vec<usize> = set.into_iter().collect();
    while let Some(p) = stack.pop() {
        for &d in &dependents[p] {
            if out.insert(d) {
                stack.push(d);
            }
        }
    }
    out
}

/// The tasks of `graph` that a change to `files` reaches: a changed path its key can see
/// (its inputs by the rules of [`crate::inputs::InputScope::represents`], its project's
/// `prova.toml` or `package.json`, the root config), or an affected task upstream. When
/// the inputs cannot be resolved (an unreadable tree, a bad glob — which the run reports
/// next), every task is affected: selecting too much is never a stale result.
pub fn tasks_for_files(
    ws: &Workspace,
    graph: &TaskGraph,
    files: &BTreeSet<String>,
    came_or_went: &BTreeSet<String>,
) -> BTreeSet<prova_protocol::TaskId> {
    let everything = || graph.nodes.iter().map(|n| n.id.clone()).collect();
    let root_config =
        ws.config_file.strip_prefix(&ws.root).ok().and_then(|p| p.to_str()).unwrap_or("prova.toml");
    if files.iter().any(|f| f == root_config) {
        return everything();
    }
    let plan = RunPlan::new(ws, graph, &[], &|_| None);
    let scopes = match crate::prepare::input_scopes(ws, &plan) {
        Ok((scopes, _)) => scopes,
        Err(e) => {
            tracing::debug!(error = %e, "--affected: inputs not resolved; every task affected");
            return everything();
        }
    };
    let config_of = |dir: &str, name: &str| {
        if dir.is_empty() { name.to_owned() } else { format!("{dir}/{name}") }
    };
    let direct: Vec<bool> = graph
        .nodes
        .iter()
        .enumerate()
        .map(|(i, n)| {
            let dir = &ws.projects[n.project].dir;
            let own = [config_of(dir, "prova.toml"), config_of(dir, "package.json")];
            files.iter().any(|f| own.contains(f))
                || scopes.get(i).is_some_and(|s| {
                    files.iter().any(|f| s.represents(f))
                        || came_or_went.iter().any(|f| s.names_entry(f))
                })
        })
        .collect();
    // Affected = direct, or any dependency affected (memoised depth-first).
    let mut memo: Vec<Option<bool>> = vec![None; graph.nodes.len()];
    let mut out = BTreeSet::new();
    for start in 0..graph.nodes.len() {
        let mut stack = vec![(start, false)];
        while let Some((n, expanded)) = stack.pop() {
            if memo[n].is_some() {
                continue;
            }
            if expanded {
                let up = graph.nodes[n].deps.iter().any(|&d| memo[d] == Some(true));
                memo[n] = Some(direct[n] || up);
            } else {
                stack.push((n, true));
                stack.extend(
                    graph.nodes[n].deps.iter().filter(|&&d| memo[d].is_none()).map(|&d| (d, false)),
                );
            }
        }
        if memo[start] == Some(true) {
            out.insert(graph.nodes[start].id.clone());
        }
    }
    out
}
