//! The task graph: `project#task` nodes and their edges, built from a loaded
//! [`Workspace`](crate::workspace::Workspace); narrowing it to what a run asked for is
//! [`crate::selection`]'s (above the plan and inputs, which `--affected` needs).
//!
//! - [`build`]: resolve every task's `deps` (`^task`, `task`, `project#task`) into edges;
//!   unknown names and cycles are errors with the file and line.
//! - [`filter`]: Turborepo's `--filter` grammar (`web...`, `...^core`, `{./apps/*}[main]`,
//!   `!docs`), parsed and matched without I/O.
//! - [`render`]: `--dry-run` order, `--dot`, `--json`.

pub mod build;
pub mod filter;
pub mod render;

use std::collections::HashMap;

use prova_protocol::TaskId;

use crate::location::Location;

pub use build::{GraphError, build_graph};

/// Index of a node in a [`TaskGraph`].
pub type NodeIdx = usize;

/// One task of one project.
#[derive(Clone, Debug)]
pub struct TaskNode {
    /// `project#task`.
    pub id: TaskId,
    /// Index of the project in `Workspace::projects`.
    pub project: usize,
    /// The task name.
    pub name: String,
    /// The nodes this one waits for, sorted, without duplicates.
    pub deps: Vec<NodeIdx>,
    /// Where each edge was declared (parallel to `deps`), for cycle messages.
    pub dep_at: Vec<Location>,
    /// Whether the user asked for this task (not only pulled in as a dependency): forwarded
    /// arguments go to requested tasks only.
    pub requested: bool,
}

/// A set of task nodes with edges; acyclic once built.
#[derive(Clone, Debug, Default)]
pub struct TaskGraph {
    /// The nodes.
    pub nodes: Vec<TaskNode>,
    /// Node by id.
    pub index: HashMap<TaskId, NodeIdx>,
}

impl TaskGraph {
    /// The node with this id.
    pub fn get(&self, id: &TaskId) -> Option<&TaskNode> {
        self.index.get(id).map(|&i| &self.nodes[i])
    }

    /// Number of nodes.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether there are no nodes.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// Reverse edges: `dependents[n]` are the nodes that wait for `n`.
    pub fn dependents(&self) -> Vec<Vec<NodeIdx>> {
        let mut out = vec![Vec::new(); self.nodes.len()];
        for (i, n) in self.nodes.iter().enumerate() {
            for &d in &n.deps {
                out[d].push(i);
            }
        }
        out
    }

    /// A topological order (dependencies first); ties broken by node index, so the order is
    /// stable for a given graph ([`topo_sort`]).
    pub fn topo_order(&self) -> Vec<NodeIdx> {
        topo_sort(self.nodes.len(), |i| &self.nodes[i].deps)
    }
}

/// The one topological sort: nodes `0..n` with every node after the nodes `deps(node)` names
/// (dependencies first); ties broken by node index, so the order is stable for a given graph.
/// Nodes on a cycle (never in a built graph) are left out. Used by the graph, the scheduler's
/// critical path and the keys.
pub fn topo_sort<'a>(n: usize, deps: impl Fn(NodeIdx) -> &'a [NodeIdx]) -> Vec<NodeIdx> {
    let mut dependents = vec![Vec::new(); n];
    let mut unmet = vec![0usize; n];
    for (i, u) in unmet.iter_mut().enumerate() {
        let d = deps(i);
        *u = d.len();
        for &dep in d {
            dependents[dep].push(i);
        }
    }
    let mut ready: std::collections::BTreeSet<NodeIdx> =
        (0..n).filter(|&i| unmet[i] == 0).collect();
    let mut order = Vec::with_capacity(n);
    while let Some(x) = ready.pop_first() {
        order.push(x);
        for &d in &dependents[x] {
            unmet[d] -= 1;
            if unmet[d] == 0 {
                ready.insert(d);
            }
        }
    }
    order
}
