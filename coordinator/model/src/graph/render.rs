//! Text forms of a graph: Graphviz `dot` and JSON (`prova graph --dot | --json`).

use std::fmt::Write as _;

use serde::Serialize;

use super::TaskGraph;
use crate::workspace::Workspace;

/// The graph in Graphviz dot: one node per task, an edge from each task to what it needs.
pub fn to_dot(g: &TaskGraph) -> String {
    let mut s = String::from(
        "digraph prova {\n  rankdir=LR;\n  node [shape=box, fontname=\"monospace\"];\n",
    );
    for n in &g.nodes {
        let style = if n.requested { ", style=bold" } else { "" };
        let _ = writeln!(s, "  {:?} [label={:?}{style}];", n.id.as_str(), n.id.as_str());
    }
    for n in &g.nodes {
        for &d in &n.deps {
            let _ = writeln!(s, "  {:?} -> {:?};", n.id.as_str(), g.nodes[d].id.as_str());
        }
    }
    s.push_str("}\n");
    s
}

#[derive(Serialize)]
struct JsonNode<'a> {
    id: &'a str,
    project: &'a str,
    project_dir: &'a str,
    task: &'a str,
    command: Option<String>,
    requested: bool,
    deps: Vec<&'a str>,
}

/// The graph as JSON: `{"tasks": [{id, project, project_dir, task, command, requested, deps}]}`
/// in topological order.
pub fn to_json(ws: &Workspace, g: &TaskGraph) -> serde_json::Value {
    let nodes: Vec<JsonNode<'_>> = g
        .topo_order()
        .into_iter()
        .map(|i| {
            let n = &g.nodes[i];
            let p = &ws.projects[n.project];
            JsonNode {
                id: n.id.as_str(),
                project: &p.name,
                project_dir: &p.dir,
                task: &n.name,
                command: p.tasks.get(&n.name).and_then(|t| t.command.as_ref()).map(|c| c.display()),
                requested: n.requested,
                deps: n.deps.iter().map(|&d| g.nodes[d].id.as_str()).collect(),
            }
        })
        .collect();
    serde_json::json!({ "tasks": nodes })
}
