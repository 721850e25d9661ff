//! `prova farm status`: the farm's workers, slots, queue and running tasks; `prova farm drain
//! WORKER`: take a worker out once its running tasks finish.

use std::fmt::Write as _;

use prova_protocol::WorkerId;
use prova_protocol::transport::frame;
use prova_protocol::wire::{ClientMsg, CoordinatorReply};

use super::common;
use crate::args::FarmCommand;
use crate::exit::Code;

/// Runs a farm subcommand.
pub fn farm(cmd: FarmCommand) -> anyhow::Result<Code> {
    let (remote, json) = match cmd {
        FarmCommand::Status { remote, json } => (remote, json),
        FarmCommand::Drain { worker, remote } => return drain(worker, &remote),
    };
    let rt = common::runtime()?;
    let status = rt.block_on(async {
        let mut s = crate::remote::connect(&remote).await?;
        frame::write_msg(&mut s.send, &ClientMsg::Status).await?;
        match frame::read_msg::<_, CoordinatorReply>(&mut s.recv).await? {
            Some(CoordinatorReply::Status(st)) => Ok(st),
            Some(CoordinatorReply::Error { message }) => {
                anyhow::bail!("the coordinator: {message}")
            }
            other => anyhow::bail!("unexpected reply: {other:?}"),
        }
    })?;
    if json {
        common::print(&format!("{}\n", serde_json::to_string(&status)?))?;
        return Ok(Code::Ok);
    }
    let mut out = format!(
        "{} workers, {} queued, {} runs\n",
        status.workers.len(),
        status.queued,
        status.runs
    );
    for w in &status.workers {
        let labels: Vec<String> = w.labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let _ = writeln!(
            out,
            "  {:<16} {}/{} busy  {:<14} sandbox {:<12} {}",
            w.id.0,
            w.busy,
            w.slots,
            w.platform,
            w.sandbox,
            labels.join(",")
        );
        for t in &w.running {
            let _ = writeln!(out, "      running {t}");
        }
    }
    common::print(&out)?;
    Ok(Code::Ok)
}

/// `prova farm drain WORKER`: the coordinator stops placing work there and dismisses the
/// worker once its running tasks are done.
fn drain(worker: String, remote: &crate::args::RemoteArgs) -> anyhow::Result<Code> {
    let rt = common::runtime()?;
    let running = rt.block_on(async {
        let mut s = crate::remote::connect(remote).await?;
        let msg = ClientMsg::Drain { worker: WorkerId(worker.clone()) };
        frame::write_msg(&mut s.send, &msg).await?;
        match frame::read_msg::<_, CoordinatorReply>(&mut s.recv).await? {
            Some(CoordinatorReply::Draining { running }) => Ok(running),
            Some(CoordinatorReply::Error { message }) => {
                anyhow::bail!("the coordinator: {message}")
            }
            other => anyhow::bail!("unexpected reply: {other:?}"),
        }
    })?;
    let tasks = if running == 1 { "task" } else { "tasks" };
    common::print(&format!(
        "draining {worker}: no new work; it leaves the farm once its {running} running {tasks} finish\n"
    ))?;
    Ok(Code::Ok)
}
