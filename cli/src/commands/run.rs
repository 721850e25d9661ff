//! `prova run`: select, plan, then either print the plan (`--dry-run`) or run it in local
//! mode and report.

use std::io::Write as _;
use std::path::Path;

use prova_coordinator::run::{RunOptions, RunPlan, TaskKind};
use prova_protocol::events::RunEvent;
use tokio::sync::mpsc;

use crate::args::RunArgs;
use crate::exit::Code;
use crate::render::{Renderer, Style, summary};

/// Bound on run events waiting for the renderer.
const EVENT_QUEUE: usize = 1024;

/// Runs the selection.
pub fn run(start: &Path, args: RunArgs) -> anyhow::Result<Code> {
    let loaded = super::common::load(start, &args.select)?;
    let plan = RunPlan::new(&loaded.ws, &loaded.graph, &args.forward, &|k| std::env::var(k).ok());
    if args.dry_run {
        print_dry_run(&loaded.graph, &plan, args.json)?;
        return Ok(Code::Ok);
    }
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let options = RunOptions {
        concurrency: args.concurrency.unwrap_or(cores).max(1),
        continue_on_failure: args.keep_going,
    };
    let style = Style::new(args.output, args.json);
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let summary = rt.block_on(async move {
        let (tx, mut rx) = mpsc::channel::<RunEvent>(EVENT_QUEUE);
        let render = tokio::task::spawn_blocking(move || {
            let mut r = Renderer::new(std::io::stdout().lock(), style);
            let mut broken = false;
            while let Some(ev) = rx.blocking_recv() {
                if !broken && r.event(&ev).is_err() {
                    broken = true; // stdout closed: keep draining so the run is not blocked
                }
            }
            let _ = r.finish();
        });
        let summary = crate::local::run(plan, options, tx).await;
        let _ = render.await;
        summary
    })?;
    let mut out = std::io::stdout().lock();
    if args.json {
        let line = serde_json::json!({ "event": "summary", "summary": &summary });
        let _ = writeln!(out, "{line}");
    } else {
        let _ = write!(out, "{}", summary::text(&summary));
    }
    Ok(if summary.ok { Code::Ok } else { Code::Failed })
}

fn print_dry_run(
    graph: &prova_coordinator::graph::TaskGraph,
    plan: &RunPlan,
    json: bool,
) -> anyhow::Result<()> {
    let order = graph.topo_order();
    let mut out = std::io::stdout().lock();
    if json {
        let tasks: Vec<_> = order
            .iter()
            .map(|&i| {
                let t = &plan.tasks[i];
                serde_json::json!({
                    "id": t.id,
                    "kind": format!("{:?}", t.kind).to_lowercase(),
                    "command": (t.kind != TaskKind::Group).then(|| t.spec.command.display()),
                    "dir": t.spec.project_dir,
                    "deps": t.deps.iter().map(|&d| plan.tasks[d].id.as_str()).collect::<Vec<_>>(),
                })
            })
            .collect();
        writeln!(out, "{}", serde_json::json!({ "tasks": tasks }))?;
        return Ok(());
    }
    writeln!(out, "{} tasks would run, in this order:", order.len())?;
    for (n, &i) in order.iter().enumerate() {
        let t = &plan.tasks[i];
        let what = match t.kind {
            TaskKind::Group => "(group)".to_owned(),
            TaskKind::Persistent => format!("{}  (persistent)", t.spec.command.display()),
            TaskKind::Command => t.spec.command.display(),
        };
        let dir = if t.spec.project_dir.is_empty() { "." } else { t.spec.project_dir.as_str() };
        writeln!(out, "{:>4}. {}  [{}]  {}", n + 1, t.id, dir, what)?;
    }
    Ok(())
}
