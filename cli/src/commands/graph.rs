//! `prova graph`: the selected graph as Graphviz dot or JSON.

use std::path::Path;

use prova_coordinator::graph::render;

use crate::args::GraphArgs;
use crate::exit::Code;

/// Prints the graph.
pub fn graph(start: &Path, args: GraphArgs) -> anyhow::Result<Code> {
    let loaded = super::common::load(start, &args.select)?;
    let text = if args.json {
        let mut s = serde_json::to_string_pretty(&render::to_json(&loaded.ws, &loaded.graph))?;
        s.push('\n');
        s
    } else {
        render::to_dot(&loaded.graph)
    };
    super::common::print(&text)?;
    Ok(Code::Ok)
}
