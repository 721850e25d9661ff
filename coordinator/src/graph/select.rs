//! Narrowing the full graph to what a run asked for: task names (or `project#task` ids)
//! over a set of projects, plus everything those tasks depend on.

use std::collections::{BTreeSet, HashMap};

use globset::{GlobBuilder, GlobSetBuilder};
use prova_protocol::TaskId;

use super::{NodeIdx, TaskGraph, TaskNode, affected};
use crate::config::suggest;
use crate::workspace::Workspace;

/// Which projects a run covers.
#[derive(Clone, Debug, Default)]
pub enum ProjectFilter {
    /// Every project (`--all`).
    All,
    /// The union of named projects (`-p`), glob matches on dir or name (`--filter`) and
    /// projects affected since a git ref (`--affected`).
    Some {
        /// `-p NAME`.
        names: Vec<String>,
        /// `--filter GLOB`.
        globs: Vec<String>,
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
    /// A `--filter` glob does not compile.
    #[error("invalid --filter glob `{glob}`: {reason}")]
    BadFilter {
        /// The glob.
        glob: String,
        /// Why.
        reason: String,
    },
    /// `--affected` could not ask git.
    #[error(transparent)]
    Affected(#[from] affected::AffectedError),
    /// No task names were given.
    #[error("no task given: name one or more tasks, e.g. `prova run build`")]
    NoTasks,
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
    let (projects, affected) = selected_projects(ws, sel)?;
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
        let hit = affected::tasks_for_files(ws, &candidates, &a.files);
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
    Ok(closure(full, &roots))
}

/// What `--affected` found: the changed files, and the projects named otherwise (by `-p`
/// or `--filter`), whose tasks are selected whatever changed.
struct Affected {
    git_ref: String,
    files: BTreeSet<String>,
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

fn selected_projects(
    ws: &Workspace,
    sel: &Selection,
) -> Result<(BTreeSet<usize>, Option<Affected>), SelectError> {
    let all = || (0..ws.projects.len()).collect();
    match &sel.projects {
        ProjectFilter::All => Ok((all(), None)),
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
            Ok((found.map_or_else(all, |(i, _)| BTreeSet::from([i])), None))
        }
        ProjectFilter::Some { names, globs, affected: since } => {
            let mut out = BTreeSet::new();
            for name in names {
                match ws.projects.iter().position(|p| &p.name == name || &p.dir == name) {
                    Some(i) => {
                        out.insert(i);
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
            if !globs.is_empty() {
                let mut b = GlobSetBuilder::new();
                for g in globs {
                    let glob = GlobBuilder::new(g.trim_end_matches('/'))
                        .literal_separator(true)
                        .build()
                        .map_err(|e| SelectError::BadFilter {
                            glob: g.clone(),
                            reason: e.kind().to_string(),
                        })?;
                    // A glob that selects nothing is most likely a typo: say so (the run
                    // itself goes on and exits 0 when nothing at all is selected).
                    let one = glob.compile_matcher();
                    if !ws.projects.iter().any(|p| one.is_match(&p.dir) || one.is_match(&p.name)) {
                        tracing::warn!("--filter `{g}` matches no project (by directory or name)");
                    }
                    b.add(glob);
                }
                let set = b.build().map_err(|e| SelectError::BadFilter {
                    glob: globs.join(" "),
                    reason: e.to_string(),
                })?;
                for (i, p) in ws.projects.iter().enumerate() {
                    if set.is_match(&p.dir) || set.is_match(&p.name) {
                        out.insert(i);
                    }
                }
            }
            let Some(git_ref) = since else { return Ok((out, None)) };
            let files = affected::changed_files(&ws.root, git_ref)?;
            let projects = affected::projects_for_files(ws, &files);
            if projects.is_empty() {
                tracing::warn!("--affected {git_ref}: no project changed since {git_ref}");
            }
            let explicit = out.clone();
            out.extend(&projects);
            let found =
                Affected { git_ref: git_ref.clone(), files, explicit, projects: projects.len() };
            Ok((out, Some(found)))
        }
    }
}
