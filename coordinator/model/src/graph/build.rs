//! Resolving `deps` into edges, and finding cycles.

use std::collections::{BTreeSet, HashMap, HashSet};

use prova_protocol::TaskId;

use super::{NodeIdx, TaskGraph, TaskNode};
use crate::location::Location;
use crate::suggest::suggest;
use crate::workspace::Workspace;

/// A dependency that names nothing, or a cycle.
#[derive(Debug, thiserror::Error)]
pub enum GraphError {
    /// `deps` names a task no project defines.
    #[error("{at}: unknown task `{name}` in deps of {task}{}", help_line(.help))]
    UnknownTask {
        /// Where the dep is written.
        at: Box<Location>,
        /// The task whose deps it is.
        task: TaskId,
        /// The unknown name.
        name: String,
        /// A did-you-mean.
        help: Option<String>,
    },
    /// `deps` names a project that does not exist.
    #[error("{at}: unknown project `{name}` in deps of {task}{}", help_line(.help))]
    UnknownProject {
        /// Where the dep is written.
        at: Box<Location>,
        /// The task whose deps it is.
        task: TaskId,
        /// The unknown project.
        name: String,
        /// A did-you-mean.
        help: Option<String>,
    },
    /// `deps` names a task the named (or own) project does not have.
    #[error("{at}: dependency `{dep}`: project `{project}` has no task `{name}`{}", help_line(.help))]
    MissingTask {
        /// Where the dep is written.
        at: Box<Location>,
        /// The dep as written.
        dep: String,
        /// The project that lacks it.
        project: String,
        /// The task name.
        name: String,
        /// A did-you-mean among that project's tasks.
        help: Option<String>,
    },
    /// The graph has a cycle.
    #[error("dependency cycle: {}\n{}", .cycle.iter().map(TaskId::as_str).collect::<Vec<_>>().join(" -> "), .edges.join("\n"))]
    Cycle {
        /// The tasks of the cycle, first repeated at the end.
        cycle: Vec<TaskId>,
        /// One line per edge: `a#build depends on b#build (file:line:col)`.
        edges: Vec<String>,
    },
}

fn help_line(help: &Option<String>) -> String {
    help.as_ref().map(|h| format!("\n  help: did you mean `{h}`?")).unwrap_or_default()
}

/// Builds the full graph of every task of every project, and checks it is acyclic.
pub fn build_graph(ws: &Workspace) -> Result<TaskGraph, GraphError> {
    let mut g = TaskGraph::default();
    for (pi, p) in ws.projects.iter().enumerate() {
        for name in p.tasks.keys() {
            let id = TaskId::new(&p.name, name);
            g.index.insert(id.clone(), g.nodes.len());
            g.nodes.push(TaskNode {
                id,
                project: pi,
                name: name.clone(),
                deps: Vec::new(),
                dep_at: Vec::new(),
                requested: false,
            });
        }
    }
    let project_by_name: HashMap<&str, usize> =
        ws.projects.iter().enumerate().map(|(i, p)| (p.name.as_str(), i)).collect();
    // Ordered, like every candidate list given to `suggest`: ties go to the first candidate,
    // so hash order would make the did-you-mean vary between runs.
    let all_task_names: BTreeSet<&str> =
        ws.projects.iter().flat_map(|p| p.tasks.keys().map(String::as_str)).collect();

    for node in 0..g.nodes.len() {
        let (pi, name) = (g.nodes[node].project, g.nodes[node].name.clone());
        let project = &ws.projects[pi];
        let Some(def) = project.tasks.get(&name) else { continue };
        let mut edges: Vec<(NodeIdx, Location)> = Vec::new();
        for dep in &def.deps {
            let raw = dep.value.as_str();
            let task_id = &g.nodes[node].id;
            if let Some(up) = raw.strip_prefix('^') {
                if !all_task_names.contains(up) {
                    return Err(unknown_task(dep.at.clone(), task_id, up, &all_task_names));
                }
                for target in upstream_providers(ws, &project_by_name, pi, up) {
                    let id = TaskId::new(&ws.projects[target].name, up);
                    if let Some(&t) = g.index.get(&id) {
                        edges.push((t, dep.at.clone()));
                    }
                }
            } else if let Some(id) = TaskId::parse(raw) {
                let Some(&qi) = project_by_name.get(id.project()) else {
                    return Err(GraphError::UnknownProject {
                        at: Box::new(dep.at.clone()),
                        task: task_id.clone(),
                        name: id.project().to_owned(),
                        help: suggest(id.project(), ws.project_names()).map(str::to_owned),
                    });
                };
                match g.index.get(&id) {
                    Some(&t) => edges.push((t, dep.at.clone())),
                    None => {
                        return Err(missing_task(dep.at.clone(), raw, ws, qi, id.task()));
                    }
                }
            } else {
                if !all_task_names.contains(raw) {
                    return Err(unknown_task(dep.at.clone(), task_id, raw, &all_task_names));
                }
                match g.index.get(&TaskId::new(&project.name, raw)) {
                    Some(&t) => edges.push((t, dep.at.clone())),
                    // A workspace default naming a task only some projects have applies to
                    // those that have it; the project's own config must name a real task.
                    None if !def.deps_from_project => {}
                    None => return Err(missing_task(dep.at.clone(), raw, ws, pi, raw)),
                }
            }
        }
        edges.sort_by_key(|(t, _)| *t);
        edges.dedup_by_key(|(t, _)| *t);
        let n = &mut g.nodes[node];
        n.deps = edges.iter().map(|(t, _)| *t).collect();
        n.dep_at = edges.into_iter().map(|(_, at)| at).collect();
    }
    check_acyclic(&g)?;
    Ok(g)
}

/// The projects that provide `^task` for project `pi`: each dependency that has the task;
/// through a dependency that lacks it, that dependency's own dependencies (so a chain
/// `app -> types-only -> lib` still orders `lib#build` before `app#build`).
fn upstream_providers(
    ws: &Workspace,
    by_name: &HashMap<&str, usize>,
    pi: usize,
    task: &str,
) -> Vec<usize> {
    let mut out = Vec::new();
    let mut seen = HashSet::new();
    let mut stack: Vec<usize> = ws.projects[pi]
        .deps
        .iter()
        .filter_map(|d| by_name.get(d.value.as_str()).copied())
        .collect();
    while let Some(q) = stack.pop() {
        if q == pi || !seen.insert(q) {
            continue;
        }
        if ws.projects[q].tasks.contains_key(task) {
            out.push(q);
        } else {
            stack.extend(
                ws.projects[q].deps.iter().filter_map(|d| by_name.get(d.value.as_str()).copied()),
            );
        }
    }
    out.sort_unstable();
    out
}

fn unknown_task(at: Location, task: &TaskId, name: &str, all: &BTreeSet<&str>) -> GraphError {
    GraphError::UnknownTask {
        at: Box::new(at),
        task: task.clone(),
        name: name.to_owned(),
        help: suggest(name, all.iter().copied()).map(str::to_owned),
    }
}

fn missing_task(at: Location, dep: &str, ws: &Workspace, qi: usize, name: &str) -> GraphError {
    let q = &ws.projects[qi];
    GraphError::MissingTask {
        at: Box::new(at),
        dep: dep.to_owned(),
        project: q.name.clone(),
        name: name.to_owned(),
        help: suggest(name, q.tasks.keys().map(String::as_str)).map(str::to_owned),
    }
}

/// Finds a cycle with an iterative DFS and reports it by task ids and edge locations.
fn check_acyclic(g: &TaskGraph) -> Result<(), GraphError> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        New,
        Active,
        Done,
    }
    let mut mark = vec![Mark::New; g.nodes.len()];
    for root in 0..g.nodes.len() {
        if mark[root] != Mark::New {
            continue;
        }
        // Stack of (node, next edge index).
        let mut stack: Vec<(NodeIdx, usize)> = vec![(root, 0)];
        mark[root] = Mark::Active;
        while let Some(&mut (n, ref mut next)) = stack.last_mut() {
            if let Some(&d) = g.nodes[n].deps.get(*next) {
                *next += 1;
                match mark[d] {
                    Mark::New => {
                        mark[d] = Mark::Active;
                        stack.push((d, 0));
                    }
                    Mark::Active => {
                        let start = stack.iter().position(|(x, _)| *x == d).unwrap_or(0);
                        let path: Vec<NodeIdx> = stack[start..].iter().map(|(x, _)| *x).collect();
                        return Err(cycle_error(g, &path));
                    }
                    Mark::Done => {}
                }
            } else {
                mark[n] = Mark::Done;
                stack.pop();
            }
        }
    }
    Ok(())
}

fn cycle_error(g: &TaskGraph, path: &[NodeIdx]) -> GraphError {
    let mut cycle: Vec<TaskId> = path.iter().map(|&n| g.nodes[n].id.clone()).collect();
    cycle.push(g.nodes[path[0]].id.clone());
    let mut edges = Vec::new();
    for (i, &from) in path.iter().enumerate() {
        let to = path[(i + 1) % path.len()];
        let node = &g.nodes[from];
        let at = node.deps.iter().position(|&d| d == to).and_then(|k| node.dep_at.get(k));
        edges.push(match at {
            Some(at) => format!("  {} depends on {} ({at})", node.id, g.nodes[to].id),
            None => format!("  {} depends on {}", node.id, g.nodes[to].id),
        });
    }
    GraphError::Cycle { cycle, edges }
}
