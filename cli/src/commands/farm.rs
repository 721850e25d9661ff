//! `prova farm status`: the farm's workers, slots, queue and running tasks, each worker's
//! health and quarantine; `prova farm drain WORKER`: take a worker out once its running tasks
//! finish; `prova farm release WORKER`: end a worker's quarantine.

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
        FarmCommand::Release { worker, remote } => return release(worker, &remote),
    };
    let rt = common::runtime()?;
    let status = rt.block_on(async {
        let mut s = crate::remote::connect(&remote).await?;
        frame::write_msg(&mut s.send, &ClientMsg::Status).await?;
        let reply = frame::read_msg::<_, CoordinatorReply>(&mut s.recv).await?;
        s.close(b"done").await;
        match reply {
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
    let mut out = String::new();
    if let Some(c) = &status.coordinator {
        out.push_str(&coordinator_line(c));
    }
    let _ = writeln!(
        out,
        "{} workers, {} queued, {} runs",
        status.workers.len(),
        status.queued,
        status.runs
    );
    for w in &status.workers {
        let labels: Vec<String> = w.labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let _ = writeln!(
            out,
            "  {:<16} {}/{} busy  {:<14} sandbox {:<12} {:<12} {}",
            w.id.0,
            w.busy,
            w.slots,
            w.platform,
            w.sandbox,
            w.version,
            labels.join(",")
        );
        if w.silent {
            let _ = writeln!(out, "      silent: not heard from since a lease of it expired");
        }
        if let Some(why) = &w.quarantined {
            let _ = writeln!(out, "      quarantined: {why} (`prova farm release {}`)", w.id.0);
        }
        if let Some(h) = &w.health {
            let _ = writeln!(out, "      {}", health_line(h));
        }
        for t in &w.running {
            let _ = writeln!(out, "      running {t}");
        }
    }
    common::print(&out)?;
    Ok(Code::Ok)
}

/// `coordinator prova 0.1.0, up 1h 2m, cache 412 entries (86.8 MiB), hit rate 80% (380 of 475)`.
fn coordinator_line(c: &prova_protocol::wire::CoordinatorFacts) -> String {
    let up = humantime::format_duration(std::time::Duration::from_secs(c.uptime_secs));
    let rate = match c.hit_rate() {
        Some(r) => format!("hit rate {:.0}% ({} of {})", r * 100.0, c.hits, c.hits + c.misses),
        None => "no lookups yet".to_owned(),
    };
    format!(
        "coordinator {}, up {up}, cache {} entries ({}), {rate}\n",
        c.version,
        c.cache_entries,
        bytes(c.cache_bytes)
    )
}

/// `health: disk low: 800.0 KiB free, floor 1.0 MiB` or `health: ok (12.3 GiB free)`.
fn health_line(h: &prova_protocol::wire::WorkerHealth) -> String {
    match (&h.unfit, h.disk_free) {
        (Some(why), _) => format!("health: {why}, no work for it"),
        (None, Some(free)) => format!("health: ok ({} free)", bytes(free)),
        (None, None) => "health: ok".to_owned(),
    }
}

fn bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut i = 0;
    while v >= 1024.0 && i + 1 < UNITS.len() {
        v /= 1024.0;
        i += 1;
    }
    if i == 0 { format!("{n} B") } else { format!("{v:.1} {}", UNITS[i]) }
}

/// `prova farm drain WORKER`: the coordinator stops placing work there and dismisses the
/// worker once its running tasks are done.
fn drain(worker: String, remote: &crate::args::RemoteArgs) -> anyhow::Result<Code> {
    let rt = common::runtime()?;
    let running = rt.block_on(async {
        let mut s = crate::remote::connect(remote).await?;
        let msg = ClientMsg::Drain { worker: WorkerId(worker.clone()) };
        frame::write_msg(&mut s.send, &msg).await?;
        let reply = frame::read_msg::<_, CoordinatorReply>(&mut s.recv).await?;
        s.close(b"done").await;
        match reply {
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

/// `prova farm release WORKER`: the coordinator ends the worker's quarantine.
fn release(worker: String, remote: &crate::args::RemoteArgs) -> anyhow::Result<Code> {
    let rt = common::runtime()?;
    let was = rt.block_on(async {
        let mut s = crate::remote::connect(remote).await?;
        let msg = ClientMsg::Release { worker: WorkerId(worker.clone()) };
        frame::write_msg(&mut s.send, &msg).await?;
        let reply = frame::read_msg::<_, CoordinatorReply>(&mut s.recv).await?;
        s.close(b"done").await;
        match reply {
            Some(CoordinatorReply::Released { was }) => Ok(was),
            Some(CoordinatorReply::Error { message }) => {
                anyhow::bail!("the coordinator: {message}")
            }
            other => anyhow::bail!("unexpected reply: {other:?}"),
        }
    })?;
    match was {
        Some(why) => {
            common::print(&format!("released {worker} (it was quarantined: {why})\n"))?;
            Ok(Code::Ok)
        }
        None => {
            common::print(&format!("{worker} is not quarantined\n"))?;
            Ok(Code::Ok)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_coordinator_line_says_version_uptime_cache_and_hit_rate() {
        let c = prova_protocol::wire::CoordinatorFacts {
            version: "prova 0.1.0".into(),
            uptime_secs: 3_720,
            cache_entries: 412,
            cache_bytes: 91_000_000,
            hits: 380,
            misses: 95,
            held: None,
        };
        assert_eq!(
            coordinator_line(&c),
            "coordinator prova 0.1.0, up 1h 2m, cache 412 entries (86.8 MiB), hit rate 80% (380 of 475)\n"
        );
        let fresh =
            prova_protocol::wire::CoordinatorFacts { hits: 0, misses: 0, cache_bytes: 0, ..c };
        assert!(coordinator_line(&fresh).ends_with("(0 B), no lookups yet\n"));
    }
}
