//! `prova hermeticity` and `prova diff`: what the fingerprint ledger knows.

use std::fmt::Write as _;
use std::path::Path;

use anyhow::Context as _;
use prova_coordinator::cache::{Store, TRUSTED};
use prova_coordinator::hermeticity::{self, HermeticityReport};
use prova_coordinator::workspace::Workspace;
use prova_protocol::transport::frame;
use prova_protocol::wire::{ClientMsg, CoordinatorReply};

use super::common;
use crate::args::{HermeticityArgs, TaskArgs};
use crate::exit::Code;
use crate::render::plural;

/// Keys a local report lists at most.
const LIMIT: usize = 500;

fn open_local(start: &Path, args: &crate::args::CacheDirArgs) -> anyhow::Result<Store> {
    let dir = match &args.cache_dir {
        Some(d) => d.clone(),
        None => {
            let start = start
                .canonicalize()
                .with_context(|| format!("cannot use directory {}", start.display()))?;
            common::cache_dir(&Workspace::load(&start)?, args)
        }
    };
    // Read-only: a report must work on a read-only `.prova` and leave it as it was.
    Store::open_read_only(&dir)
        .with_context(|| format!("cannot open the cache at {}", dir.display()))
}

/// `prova hermeticity`: exits 1 when any key disagrees, so CI can gate on it.
pub fn hermeticity(start: &Path, args: HermeticityArgs) -> anyhow::Result<Code> {
    let report: HermeticityReport = if args.remote.remote.is_some() {
        let rt = common::runtime()?;
        rt.block_on(async {
            let mut s = crate::remote::connect(&args.remote).await?;
            frame::write_msg(&mut s.send, &ClientMsg::Hermeticity).await?;
            match frame::read_msg::<_, CoordinatorReply>(&mut s.recv).await? {
                Some(CoordinatorReply::Hermeticity(json)) => Ok(serde_json::from_str(&json)?),
                Some(CoordinatorReply::Error { message }) => {
                    anyhow::bail!("the coordinator: {message}")
                }
                other => anyhow::bail!("unexpected reply: {other:?}"),
            }
        })?
    } else {
        hermeticity::report(&open_local(start, &args.cache)?, LIMIT)?
    };
    if args.json {
        common::print(&format!("{}\n", serde_json::to_string(&report)?))?;
    } else {
        common::print(&text(&report))?;
    }
    Ok(if report.keys.is_empty() { Code::Ok } else { Code::Failed })
}

fn text(r: &HermeticityReport) -> String {
    if r.keys.is_empty() {
        return "every recorded execution agrees with the others of its key\n".to_owned();
    }
    let mut out = format!("{} whose executions disagree:\n", plural(r.keys.len(), "key"));
    for k in &r.keys {
        let what = match (k.nondeterministic, k.flaky) {
            (true, true) => "nondeterministic and flaky",
            (true, false) => "nondeterministic",
            (false, true) => "flaky",
            (false, false) if !k.rerun_failed_on.is_empty() => "failed when re-run perturbed",
            (false, false) => "disagreeing",
        };
        let _ = writeln!(out, "\n{} ({what}) key {}", k.task, k.key.short());
        for g in &k.fingerprints {
            let _ = writeln!(
                out,
                "  fingerprint {}  {} execution(s) on {} [{}]",
                g.fingerprint.short(),
                g.executions,
                g.workers.join(", "),
                g.platforms.join(", ")
            );
        }
        if !k.failed_on.is_empty() {
            let _ = writeln!(out, "  failed on {}", k.failed_on.join(", "));
        }
        if !k.retried_on.is_empty() {
            let tries = if k.failed_tries == 1 { "try" } else { "tries" };
            let _ = writeln!(
                out,
                "  {} failed {tries}, then passed on a retry on {}",
                k.failed_tries,
                k.retried_on.join(", ")
            );
        }
        if !k.rerun_failed_on.is_empty() {
            let _ =
                writeln!(out, "  a perturbed re-run failed on {}", k.rerun_failed_on.join(", "));
        }
        for (label, list) in [("changed", &k.changed), ("added", &k.added), ("removed", &k.removed)]
        {
            if !list.is_empty() {
                let _ = writeln!(out, "  {label}: {}", list.join(", "));
            }
        }
    }
    out
}

/// `prova diff TASK`: unpacks the canonical artifact and the diverging re-run's, and shows
/// the changed files again.
pub fn diff(start: &Path, args: TaskArgs) -> anyhow::Result<Code> {
    let store = open_local(start, &args.cache)?;
    let Some(key) = store.latest_divergent_key(&args.task)? else {
        common::print(&format!("{}: no recorded divergence\n", args.task))?;
        return Ok(Code::Ok);
    };
    let execs = store.executions_of(&key)?;
    let canonical =
        store.get_entry(TRUSTED, &key)?.and_then(|e| e.artifact.map(|(d, _)| (d, e.fingerprint)));
    let Some((first_artifact, first_fp)) = canonical else {
        anyhow::bail!(
            "{}: the entry of key {} is gone (pruned?), so its bytes cannot be shown",
            args.task,
            key.short()
        );
    };
    let other = execs.iter().rev().find(|e| {
        e.ok && e.fingerprint.is_some() && e.fingerprint != first_fp && e.artifact.is_some()
    });
    let Some(other) = other else {
        anyhow::bail!("{}: the diverging execution's artifact was not kept", args.task);
    };
    let Some(other_artifact) = other.artifact else { return Ok(Code::Ok) };
    let first_manifest: Option<prova_protocol::manifest::OutputManifest> = execs
        .iter()
        .find(|e| e.fingerprint == first_fp)
        .and_then(|e| e.manifest.as_ref())
        .and_then(|m| rmp_serde::from_slice(m).ok());
    let other_manifest: Option<prova_protocol::manifest::OutputManifest> =
        other.manifest.as_ref().and_then(|m| rmp_serde::from_slice(m).ok());
    let (Some(a), Some(b)) = (first_manifest, other_manifest) else {
        anyhow::bail!("{}: the manifests of the two executions were not recorded", args.task);
    };
    let d = a.diff(&b);
    let mut changed = d.changed.clone();
    changed.extend(d.added.iter().cloned());
    changed.extend(d.removed.iter().cloned());
    let (fa, fb) = (store.open_blob(&first_artifact)?, store.open_blob(&other_artifact)?);
    let (Some(fa), Some(fb)) = (fa, fb) else {
        anyhow::bail!("{}: an artifact blob is gone", args.task)
    };
    let scratch = store.tmp_dir();
    let files = prova_coordinator::layers::diff::compare(fa, fb, &changed, &scratch)?;
    let divergence = prova_protocol::events::Divergence {
        added: d.added,
        removed: d.removed,
        changed: d.changed,
        files,
        rerun_worker: Some(prova_protocol::WorkerId(other.worker.clone())),
        single_machine: false,
        modes: prova_coordinator::layers::diff::mode_changes(&a, &b, 0o077),
        perturbations: Default::default(),
        ignored: Vec::new(),
    };
    let head = format!(
        "{} key {}: first run vs {} on {}\n",
        args.task,
        key.short(),
        if other.rerun { "re-run" } else { "run" },
        other.worker
    );
    let body = crate::render::verdict_lines(
        &prova_protocol::events::Verdict::Nondeterministic(divergence),
        false,
    )
    .unwrap_or_default();
    common::print(&format!("{head}{body}"))?;
    Ok(Code::Ok)
}
