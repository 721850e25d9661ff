//! Narrowing the full graph to what a run asked for: task names (or `project#task` ids)
//! over a set of projects, plus everything those tasks depend on. A selection that names
//! nothing to run is an error ([`SelectError::Empty`]) unless `--allow-empty`, or unless it
//! read git (`--affected`, `--filter [ref]`): "nothing changed" is an answer, not a typo.

use std::collections::{BTreeSet, HashMap};

pub mod affected;

// The graph's own tests live here too: they build workspaces and select from them.
#[cfg(test)]
mod filter_tests;
#[cfg(test)]
mod graph_tests;

use prova_protocol::TaskId;

use crate::graph::filter::{self, FilterError, GitRange, ResolveError, Selector};
use crate::graph::{NodeIdx, TaskGraph, TaskNode};
use crate::suggest::suggest;
use crate::workspace::Workspace;

/// Which projects a run covers.
#[derive(Clone, Debug, Default)]
pub enum ProjectFilter {
    /// Every project (`--all`).
    All,
    /// The union of named projects (`-p`), `--filter` selectors (Turborepo's grammar:
    /// [`filter`]) and projects affected since a git ref (`--affected`), less the
    /// selectors' exclusions.
    Some {
        /// `--all` beside them: every project is in, before exclusions.
        all: bool,
        /// `-p NAME`.
        names: Vec<String>,
        /// `--filter SELECTOR`.
        filters: Vec<String>,
        /// `--affected REF`.
        affected: Option<String>,
    },
    /// No flag given: the project containing `cwd` (workspace-relative), or every project
    /// when run from the workspace root or outside any project.
    #[default]
    Cwd,
}

/// What a run asked for.
#[derive(Clone, Debug, Default)]
pub struct Selection {
    /// Task names (`build`) or ids (`web#build`).
    pub tasks: Vec<String>,
    /// Projects.
    pub projects: ProjectFilter,
    /// The invocation directory relative to the workspace root (`""` at the root).
    pub cwd: String,
    /// `--allow-empty`: a selection with nothing to run is a warning, not an error.
    pub allow_empty: bool,
}

/// A selection that names nothing real.
#[derive(Debug, thiserror::Error)]
pub enum SelectError {
    /// No task of that name in any project.
    #[error("no project has a task `{name}`{}", help_line(.help))]
    UnknownTask {
        /// The name.
        name: String,
        /// A did-you-mean.
        help: Option<String>,
    },
    /// `-p` names no project.
    #[error("unknown project `{name}`{}", help_line(.help))]
    UnknownProject {
        /// The name.
        name: String,
        /// A did-you-mean.
        help: Option<String>,
    },
    /// A `--filter` selector that cannot be read or names no project.
    #[error(transparent)]
    Filter(#[from] FilterError),
    /// `--affected` (or a `--filter [ref]`) could not ask git.
    #[error(transparent)]
    Affected(#[from] affected::AffectedError),
    /// No task names were given.
    #[error("no task given: name one or more tasks, e.g. `prova run build`")]
    NoTasks,
    /// The selection holds nothing to run (and `--allow-empty` was not given).
    #[error(
        "nothing to run: {why}\n  help: pass --allow-empty to exit 0 when a selection matches nothing"
    )]
    Empty {
        /// What matched nothing.
        why: String,
    },
}

impl From<ResolveError<affected::AffectedError>> for SelectError {
    fn from(e: ResolveError<affected::AffectedError>) -> Self {
        match e {
            ResolveError::Filter(e) => Self::Filter(e),
            ResolveError::Git(e) => Self::Affected(e),
        }
    }
}

fn help_line(help: &Option<String>) -> String {
    help.as_ref().map(|h| format!("\n  help: did you mean `{h}`?")).unwrap_or_default()
}

/// The subgraph for `sel`: its requested nodes marked `requested`, plus their transitive
/// dependencies, re-indexed in the full graph's order.
pub fn select(ws: &Workspace, full: &TaskGraph, sel: &Selection) -> Result<TaskGraph, SelectError> {
    if sel.tasks.is_empty() {
        return Err(SelectError::NoTasks);
    }
    let Chosen { projects, affected, reads_git } = selected_projects(ws, sel)?;
    let all_names: BTreeSet<&str> = full.nodes.iter().map(|n| n.name.as_str()).collect();
    let mut roots: BTreeSet<NodeIdx> = BTreeSet::new();
    // Roots that only `--affected` brought in: refined per task below.
    let mut by_change: BTreeSet<NodeIdx> = BTreeSet::new();
    for t in &sel.tasks {
        if let Some(id) = TaskId::parse(t) {
            match full.index.get(&id) {
                Some(&i) => {
                    roots.insert(i);
                }
                None if ws.project(id.project()).is_none() => {
                    return Err(SelectError::UnknownProject {
                        name: id.project().to_owned(),
                        help: suggest(id.project(), ws.projects.iter().map(|p| p.name.as_str()))
                            .map(str::to_owned),
                    });
                }
                None => {
                    // Among that project's tasks: the name alone may exist elsewhere, and
                    // suggesting it back would be no help.
                    let own = ws.project(id.project()).into_iter().flat_map(|p| p.tasks.keys());
                    return Err(SelectError::UnknownTask {
                        name: t.clone(),
                        help: suggest(id.task(), own.map(String::as_str)).map(str::to_owned),
                    });
                }
            }
            continue;
        }
        if !all_names.contains(t.as_str()) {
            return Err(SelectError::UnknownTask {
                name: t.clone(),
                help: suggest(t, all_names.iter().copied()).map(str::to_owned),
            });
        }
        for &pi in &projects {
            if let Some(&i) = full.index.get(&TaskId::new(&ws.projects[pi].name, t)) {
                match &affected {
                    Some(a) if !a.explicit.contains(&pi) => by_change.insert(i),
                    _ => roots.insert(i),
                };
            }
        }
    }
    if let Some(a) = &affected
        && !by_change.is_empty()
    {
        // A task of an affected project is affected only if a changed path is one its key
        // can see, or one of its upstreams is affected (Turborepo's task-level rule).
        let candidates = closure(full, &by_change);
        let hit = affected::tasks_for_files(ws, &candidates, &a.files, &a.came_or_went);
        let before = by_change.len();
        by_change.retain(|&i| hit.contains(&full.nodes[i].id));
        tracing::info!(
            before,
            after = by_change.len(),
            "--affected: tasks whose inputs a change reaches"
        );
        if by_change.is_empty() && roots.is_empty() {
            tracing::warn!(
                "--affected {}: files changed in {} project(s), but none is an input of the tasks asked for",
                a.git_ref,
                a.projects
            );
        }
        roots.extend(by_change);
    }
    if roots.is_empty() && !reads_git {
        let why = empty_why(ws, sel, &projects);
        if !sel.allow_empty {
            return Err(SelectError::Empty { why });
        }
        tracing::warn!("nothing to run: {why}");
    }
    Ok(closure(full, &roots))
}

/// Why a selection that read no git holds nothing: no project, or none with the tasks.
fn empty_why(ws: &Workspace, sel: &Selection, projects: &BTreeSet<usize>) -> String {
    if projects.is_empty() {
        let flags: Vec<String> = match &sel.projects {
            ProjectFilter::Some { filters, .. } => {
                filters.iter().map(|f| format!("--filter '{f}'")).collect()
            }
            _ => Vec::new(),
        };
        return format!("the selection matches no project ({})", flags.join(" "));
    }
    let tasks: Vec<String> = sel.tasks.iter().map(|t| format!("`{t}`")).collect();
    let mut names: Vec<&str> =
        projects.iter().take(5).map(|&p| ws.projects[p].name.as_str()).collect();
    let more = projects.len().saturating_sub(names.len());
    let more = if more > 0 { format!(" and {more} more") } else { String::new() };
    if names.is_empty() {
        names.push("none");
    }
    let whence = match sel.projects {
        ProjectFilter::Cwd => ", from the current directory",
        _ => "",
    };
    format!(
        "no selected project has a task {} (selected: {}{more}{whence})",
        tasks.join(" or "),
        names.join(", ")
    )
}

/// The projects a selection covers.
struct Chosen {
    projects: BTreeSet<usize>,
    affected: Option<Affected>,
    /// Git decided part of it (`--affected`, `--filter [ref]`): empty may be the answer.
    reads_git: bool,
}

/// What `--affected` found: the changed files, and the projects named otherwise (by `-p`
/// or `--filter`), whose tasks are selected whatever changed.
struct Affected {
    git_ref: String,
    files: BTreeSet<String>,
    /// Those added or deleted ([`affected::came_or_went`]).
    came_or_went: BTreeSet<String>,
    explicit: BTreeSet<usize>,
    projects: usize,
}

/// The nodes reachable from `roots` through deps, re-indexed; roots are marked requested.
pub fn closure(full: &TaskGraph, roots: &BTreeSet<NodeIdx>) -> TaskGraph {
    let mut keep = vec![false; full.nodes.len()];
    let mut stack: Vec<NodeIdx> = roots.iter().copied().collect();
    while let Some(n) = stack.pop() {
        if !keep[n] {
            keep[n] = true;
            stack.extend(full.nodes[n].deps.iter().copied());
        }
    }
    let mut remap: HashMap<NodeIdx, NodeIdx> = HashMap::new();
    let mut g = TaskGraph::default();
    for (i, node) in full.nodes.iter().enumerate() {
        if keep[i] {
            remap.insert(i, g.nodes.len());
            g.index.insert(node.id.clone(), g.nodes.len());
            g.nodes.push(TaskNode { requested: roots.contains(&i), ..node.clone() });
        }
    }
    for n in &mut g.nodes {
        n.deps = n.deps.iter().filter_map(|d| remap.get(d).copied()).collect();
    }
    g
}

fn selected_projects(ws: &Workspace, sel: &Selection) -> Result<Chosen, SelectError> {
    let all = || (0..ws.projects.len()).collect();
    let chosen = |projects| Chosen { projects, affected: None, reads_git: false };
    match &sel.projects {
        ProjectFilter::All => Ok(chosen(all())),
        ProjectFilter::Cwd => {
            // The deepest non-root project containing the cwd.
            let found = ws
                .projects
                .iter()
                .enumerate()
                .filter(|(_, p)| {
                    !p.dir.is_empty() && prova_protocol::globs::is_within(&sel.cwd, &p.dir)
                })
                .max_by_key(|(_, p)| p.dir.len());
            Ok(chosen(found.map_or_else(all, |(i, _)| BTreeSet::from([i]))))
        }
        ProjectFilter::Some { all: every, names, filters, affected: since } => {
            let mut base: BTreeSet<usize> = if *every { all() } else { BTreeSet::new() };
            for name in names {
                match ws.projects.iter().position(|p| &p.name == name || &p.dir == name) {
                    Some(i) => {
                        base.insert(i);
                    }
                    None => {
                        return Err(SelectError::UnknownProject {
                            name: name.clone(),
                            help: suggest(name, ws.projects.iter().map(|p| p.name.as_str()))
                                .map(str::to_owned),
                        });
                    }
                }
            }
            let selectors = filters
                .iter()
                .map(|f| Selector::parse(f, &sel.cwd))
                .collect::<Result<Vec<_>, _>>()?;
            let mut changes = |range: &GitRange| {
                let asker =
                    affected::Asker { what: format!("--filter [{range}]"), flag: "--filter" };
                let files =
                    affected::changed_in(&ws.root, &range.from, range.to.as_deref(), &asker)?;
                Ok(affected::owners(ws, &files))
            };
            let resolved = filter::resolve(ws, &selectors, &mut changes)?;
            // A glob that selects nothing is most likely a typo: say so (a literal name that
            // is no project is an error, above).
            for raw in &resolved.unmatched {
                tracing::warn!("--filter `{raw}` matches no project (by directory or name)");
            }
            let base_given = *every || !names.is_empty() || since.is_some();
            let explicit = resolved.apply(&base, base_given, ws.projects.len());
            let reads_git = resolved.reads_git || since.is_some();
            let Some(git_ref) = since else {
                return Ok(Chosen { projects: explicit, affected: None, reads_git });
            };
            let files = affected::changed_files(&ws.root, git_ref)?;
            let came_or_went = affected::came_or_went(&ws.root, git_ref)?;
            let mut projects = affected::projects_for_files(ws, &files);
            if projects.is_empty() {
                tracing::warn!("--affected {git_ref}: no project changed since {git_ref}");
            }
            projects.retain(|p| !resolved.excluded.contains(p));
            let mut out = explicit.clone();
            out.extend(&projects);
            let found = Affected {
                git_ref: git_ref.clone(),
                files,
                came_or_went,
                explicit,
                projects: projects.len(),
            };
            Ok(Chosen { projects: out, affected: Some(found), reads_git })
        }
    }
}
