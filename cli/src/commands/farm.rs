//! `prova farm status`: the farm's workers, slots, queue and running tasks.

use std::fmt::Write as _;

use prova_protocol::transport::frame;
use prova_protocol::wire::{ClientMsg, CoordinatorReply};

use super::common;
use crate::args::FarmCommand;
use crate::exit::Code;

/// Runs a farm subcommand.
pub fn farm(cmd: FarmCommand) -> anyhow::Result<Code> {
    let FarmCommand::Status { remote, json } = cmd;
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
