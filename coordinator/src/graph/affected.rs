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

use super::TaskGraph;
use crate::plan::RunPlan;
use crate::workspace::Workspace;

/// Git could not answer.
#[derive(Debug, thiserror::Error)]
pub enum AffectedError {
    /// git is missing or failed.
    #[error("--affected {git_ref}: `git {args}` failed: {message}")]
    Git {
        /// The ref given.
        git_ref: String,
        /// The git arguments.
        args: String,
        /// What git said.
        message: String,
    },
    /// The workspace is not in a git work tree.
    #[error("--affected {git_ref}: {} is not inside a git repository", root.display())]
    NotARepo {
        /// The ref given.
        git_ref: String,
        /// The workspace root.
        root: std::path::PathBuf,
    },
    /// git does not know the ref.
    #[error(
        "--affected {git_ref}: git knows no commit `{git_ref}` (a typo, or a branch not fetched)"
    )]
    UnknownRef {
        /// The ref given.
        git_ref: String,
    },
}

/// Files changed since `git_ref`, workspace-relative.
pub fn changed_files(root: &Path, git_ref: &str) -> Result<BTreeSet<String>, AffectedError> {
    let mut files = BTreeSet::new();
    if git(root, git_ref, &["rev-parse", "--is-inside-work-tree"]).is_err() {
        return Err(AffectedError::NotARepo {
            git_ref: git_ref.to_owned(),
            root: root.to_path_buf(),
        });
    }
    let commit = format!("{git_ref}^{{commit}}");
    if git(root, git_ref, &["rev-parse", "--verify", "--quiet", commit.as_str()]).is_err() {
        return Err(AffectedError::UnknownRef { git_ref: git_ref.to_owned() });
    }
    // The merge base makes `origin/main` mean "since this branch forked", as CI expects;
    // fall back to the ref itself when there is no common ancestor.
    let base = git(root, git_ref, &["merge-base", git_ref, "HEAD"])
        .ok()
        .and_then(|s| s.lines().next().map(str::to_owned))
        .unwrap_or_else(|| git_ref.to_owned());
    for args in [
        vec!["diff", "--name-only", "--no-renames", "-z", base.as_str()],
        vec!["ls-files", "--others", "--exclude-standard", "-z"],
    ] {
        let out = git(root, git_ref, &args)?;
        files.extend(out.split('\0').filter(|s| !s.is_empty()).map(str::to_owned));
    }
    Ok(files)
}

fn git(root: &Path, git_ref: &str, args: &[&str]) -> Result<String, AffectedError> {
    let fail = |message: String| AffectedError::Git {
        git_ref: git_ref.to_owned(),
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
    with_dependents(ws, direct)
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
                || scopes.get(i).is_some_and(|s| files.iter().any(|f| s.represents(f)))
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
