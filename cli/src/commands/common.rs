//! Shared steps of the commands that work on a selection: load the workspace, build the
//! graph, select.

use std::path::Path;

use anyhow::Context as _;
use prova_coordinator::graph::{self, ProjectFilter, Selection, TaskGraph};
use prova_coordinator::workspace::Workspace;

use crate::args::SelectArgs;

/// A loaded workspace and the selected subgraph.
pub struct Loaded {
    /// The workspace.
    pub ws: Workspace,
    /// The selected tasks and their dependencies.
    pub graph: TaskGraph,
}

/// Loads the workspace found from `start` and selects what `sel` names.
pub fn load(start: &Path, sel: &SelectArgs) -> anyhow::Result<Loaded> {
    let start = start
        .canonicalize()
        .with_context(|| format!("cannot use directory {}", start.display()))?;
    let ws = Workspace::load(&start)?;
    let full = graph::build_graph(&ws)?;
    let cwd = start.strip_prefix(&ws.root).ok().and_then(|p| p.to_str()).unwrap_or("").to_owned();
    let projects = if sel.all {
        ProjectFilter::All
    } else if sel.projects.is_empty() && sel.filters.is_empty() && sel.affected.is_none() {
        ProjectFilter::Cwd
    } else {
        ProjectFilter::Some {
            names: sel.projects.clone(),
            globs: sel.filters.clone(),
            affected: sel.affected.clone(),
        }
    };
    let selection = Selection { tasks: sel.tasks.clone(), projects, cwd };
    let graph = graph::select(&ws, &full, &selection)?;
    Ok(Loaded { ws, graph })
}
