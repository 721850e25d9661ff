//! `prova ls [--json]`: the projects of the workspace, their project dependencies, and each
//! task with its command, its dependencies as written (`^build`, `lint`, `web#build`), its
//! outputs and whether it is persistent. The JSON document is stable (`schema_version` 1,
//! README "prova ls --json"): fields are only ever added.

use std::path::Path;

use prova_coordinator::workspace::{Project, TaskDef, Workspace};
use serde_json::{Value, json};

use crate::args::LsArgs;
use crate::exit::Code;

/// The version of the `prova ls --json` document.
pub const LS_SCHEMA_VERSION: u32 = 1;

/// Prints the listing.
pub fn ls(start: &Path, args: LsArgs) -> anyhow::Result<Code> {
    let ws = Workspace::load(start)?;
    let text = if args.json {
        let mut s = serde_json::to_string_pretty(&to_json(&ws))?;
        s.push('\n');
        s
    } else {
        to_text(&ws)
    };
    super::common::print(&text)?;
    Ok(Code::Ok)
}

/// The `--json` document.
pub fn to_json(ws: &Workspace) -> Value {
    let projects = ws.projects.iter().map(project_json).collect::<Vec<_>>();
    json!({
        "schema_version": LS_SCHEMA_VERSION,
        "root": ws.root.display().to_string(),
        "projects": projects,
    })
}

fn project_json(p: &Project) -> Value {
    let tasks = p.tasks.values().map(task_json).collect::<Vec<_>>();
    json!({
        "name": p.name,
        "dir": p.dir,
        "deps": p.deps.iter().map(|d| d.value.clone()).collect::<Vec<_>>(),
        "tasks": tasks,
    })
}

fn task_json(t: &TaskDef) -> Value {
    json!({
        "name": t.name,
        "command": t.command.as_ref().map(|c| c.display()),
        "deps": t.deps.iter().map(|d| d.value.clone()).collect::<Vec<_>>(),
        "outputs": t.outputs,
        "persistent": t.persistent,
        "cache": t.cache,
    })
}

/// The text listing: one line per project, one indented line per task.
pub fn to_text(ws: &Workspace) -> String {
    let mut out = String::new();
    for p in &ws.projects {
        let dir = if p.dir.is_empty() { "." } else { p.dir.as_str() };
        out.push_str(&format!("{} ({dir})", p.name));
        if !p.deps.is_empty() {
            let deps = p.deps.iter().map(|d| d.value.as_str()).collect::<Vec<_>>().join(", ");
            out.push_str(&format!("  depends on: {deps}"));
        }
        out.push('\n');
        if p.tasks.is_empty() {
            out.push_str("  (no tasks)\n");
        }
        for t in p.tasks.values() {
            let command = match &t.command {
                Some(c) => c.display(),
                None => "(group)".to_owned(),
            };
            out.push_str(&format!("  {}#{}: {command}", p.name, t.name));
            if !t.deps.is_empty() {
                let deps = t.deps.iter().map(|d| d.value.as_str()).collect::<Vec<_>>().join(", ");
                out.push_str(&format!("  [after {deps}]"));
            }
            if t.persistent {
                out.push_str("  (persistent)");
            }
            out.push('\n');
        }
    }
    if ws.projects.is_empty() {
        out.push_str("no projects: the [workspace] projects globs match no directory\n");
    }
    out
}
