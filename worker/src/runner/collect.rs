//! What an executed task leaves to report: what it read (its trace), what it wrote beside
//! its outputs in an exec root, and its outputs, collected, fingerprinted and packed (and
//! uploaded by a farm worker).

use std::path::Path;

use prova_protocol::globs::PathGlobs;
use prova_protocol::task::OwnedTask;
use prova_protocol::work::{
    Assignment, Finished, HandBack, Placement, ReadsReport, TRACE_READ_FAILED, WroteOutside,
};

use super::{WorkerContext, hand_back};
use crate::execroot::strays::{StrayCheck, Survey};
use crate::outputs;
use crate::rootprep::PreparedRoot;

/// What the task wrote outside its declared outputs since its root was surveyed
/// (`rootprep::PreparedRoot::strays`).
pub(super) async fn stray_writes(strays: Option<(StrayCheck, Survey)>) -> Option<WroteOutside> {
    strays.as_ref()?;
    OwnedTask::spawn_blocking("worker.stray-writes", move || compare_strays(strays))
        .join()
        .await
        .ok()
        .flatten()
}

/// The blocking half of [`stray_writes`].
fn compare_strays(strays: Option<(StrayCheck, Survey)>) -> Option<WroteOutside> {
    let (check, before) = strays?;
    check.compare(&before, &check.survey())
}

/// What a traced run read: its trace (then removed) settled against the root's installed
/// trees, lookups of the `workspace`'s paths (a local run's) taken as the root's. Nothing
/// without a trace or an exec root; `Err` (the report's `output_error`) when the trace could
/// not be read.
pub(super) async fn trace_reads(
    trace: Option<&Path>,
    exec_root: Option<&PreparedRoot>,
    workspace: Option<&Path>,
) -> Result<ReadsReport, String> {
    let (Some(t), Some(p)) = (trace, exec_root) else {
        return Ok(ReadsReport::default());
    };
    let (t2, r) = (t.to_owned(), p.root.path().to_owned());
    let stand_ins = p.root.stand_in_files().clone();
    let ws = workspace.map(Path::to_owned);
    let reads = OwnedTask::spawn_blocking("worker.trace-reads", move || {
        crate::sandbox::trace_reads_with(&t2, &r, &stand_ins, ws.as_deref())
    })
    .join()
    .await
    .map_err(|e| e.to_string())
    .and_then(|r| r.map_err(|e| e.to_string()));
    let _ = std::fs::remove_file(t);
    match reads {
        Ok(mut reads) => {
            // Lookups inside installed trees, settled against the trees here.
            crate::trees::settle_reads(&mut reads, p.root.trees());
            Ok(reads)
        }
        Err(e) => Err(format!("{TRACE_READ_FAILED}: {e}")),
    }
}

/// What the task wrote outside its outputs ([`stray_writes`], into `report`), then its
/// outputs collected, fingerprinted and packed, on one blocking thread; a farm worker uploads
/// the artifact and keeps it in its blob cache (a downstream task placed here needs it).
pub(super) async fn outputs(
    a: &Assignment,
    ctx: &WorkerContext,
    root: &Path,
    globs: PathGlobs,
    strays: Option<(StrayCheck, Survey)>,
    report: &mut Finished,
) {
    let farm = ctx.remote.is_some() && matches!(a.placement, Placement::ExecRoot { .. });
    let pack_to = match (&a.pack_to, farm) {
        (Some(p), _) => Some(p.clone()),
        (None, true) => Some(ctx.work_dir.join(crate::health::staging_name(a.attempt))),
        (None, false) => None,
    };
    let root2 = root.to_owned();
    let pack2 = pack_to.clone();
    let project = a.spec.project_dir.clone();
    let collected = OwnedTask::spawn_blocking("worker.collect-outputs", move || {
        (compare_strays(strays), outputs::collect(&root2, &globs, &project, pack2.as_deref()))
    })
    .join()
    .await;
    let collected = collected.map(|(strays, collected)| {
        report.wrote_outside = strays;
        collected
    });
    let (outs, missing) = match collected {
        Ok(Ok(x)) => x,
        // Where the outputs live only here, a failure to store them is this worker's: give
        // the assignment back so it runs where they can be stored (never a success without
        // them). In place, the outputs are in the workspace; only the cache misses them.
        Ok(Err(e @ outputs::OutputError::Pack(_))) if farm => {
            hand_back(report, HandBack::Outputs(e.to_string()));
            return;
        }
        // A full disk is this worker's health, not the outputs': said as such.
        Ok(Err(e @ outputs::OutputError::DiskFull { .. })) if farm => {
            hand_back(report, HandBack::NoDisk(e.to_string()));
            return;
        }
        Ok(Err(e)) => {
            report.output_error = Some(e.to_string());
            return;
        }
        Err(e) => {
            report.output_error = Some(format!("collecting outputs panicked: {e}"));
            return;
        }
    };
    if farm
        && let (Some(path), Some((digest, size)), Some(remote)) =
            (&pack_to, outs.artifact, &ctx.remote)
    {
        if let Err(e) = remote.upload(path, digest, size).await {
            let _ = std::fs::remove_file(path);
            hand_back(report, HandBack::Outputs(format!("uploading the artifact failed: {e}")));
            return;
        }
        keep_artifact(ctx, path, digest).await;
    }
    report.outputs = Some(outs);
    report.missing_literals = missing;
}

/// Files an uploaded artifact at `path` into the blob cache; without one (or when filing
/// fails), removes it: no staging file outlives an upload.
async fn keep_artifact(ctx: &WorkerContext, path: &Path, digest: prova_protocol::Digest) {
    match &ctx.blobs {
        Some(b) => {
            let (b, p) = (b.clone(), path.to_owned());
            let filed =
                OwnedTask::spawn_blocking("worker.blob-insert", move || b.insert_file(&p, &digest))
                    .join()
                    .await;
            if !matches!(filed, Ok(Ok(_))) {
                // Uploaded, just not kept here: no staging file outlives it.
                let _ = std::fs::remove_file(path);
            }
        }
        None => {
            let _ = std::fs::remove_file(path);
        }
    }
}
