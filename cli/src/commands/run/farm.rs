//! The farm side of `prova run --remote`: dial (an unreachable farm falls back to local mode
//! unless the settings require it), then upload, submit, follow and download.

use prova_coordinator::layers::LocalLayer;
use prova_coordinator::prepare::Prepared;
use prova_protocol::events::{NoticeLevel, RunEvent};
use tokio::sync::mpsc;

use super::settings::FarmSettings;

/// Dials `--remote`. A farm that cannot be reached is one warning and `None`: the run goes
/// on locally, with the local cache — or, when the settings say it is required
/// (`--farm-required`, `--fallback none`, `[workspace] fallback = "none"`), an error
/// naming the address. A farm that answers and refuses is always an error.
pub(super) async fn dial(farm: &FarmSettings) -> anyhow::Result<Option<crate::remote::Session>> {
    match crate::remote::connect_to(&farm.target).await {
        Ok(s) => Ok(Some(s)),
        Err(e) => match e.downcast::<crate::remote::Unreachable>() {
            Ok(u) => match farm.required {
                Some(why) => Err(anyhow::anyhow!(
                    "{u}; the run needs the farm ({why}), so nothing ran locally"
                )),
                None => {
                    let why = if farm.fallback_named { " (--fallback local)" } else { "" };
                    crate::stdio::eprint_line(&format!(
                        "{}{u}; running locally{why} — --farm-required makes this an error",
                        crate::logfmt::WARNING
                    ));
                    Ok(None)
                }
            },
            Err(e) => Err(e),
        },
    }
}

/// The farm half of `prova run --remote`.
#[allow(clippy::too_many_arguments)] // the run's parts, each used once
pub(super) async fn remote_run(
    mut session: crate::remote::Session,
    farm: &FarmSettings,
    ws: &prova_coordinator::workspace::Workspace,
    prepared: &Prepared,
    cache: &prova_coordinator::cache::CacheThread,
    layer: &LocalLayer,
    options: prova_protocol::wire::RunOptionsWire,
    events: mpsc::Sender<RunEvent>,
) -> anyhow::Result<prova_protocol::events::RunSummary> {
    use crate::remote::{download, run as rrun};
    // Counted on the way: a coordinator lost mid-run is one line saying what was saved.
    let events = session.counting_saves(events);
    let root = ws.root.as_path();
    let result: anyhow::Result<prova_protocol::events::RunSummary> = async {
        let tasks = rrun::remote_tasks(root, prepared);
        let up = rrun::upload_missing(&mut session, root, &tasks, &prepared.trees).await?;
        tracing::info!(
            needed = up.needed,
            uploaded = up.blobs,
            bytes = up.bytes,
            "inputs uploaded"
        );
        let message = format!(
            "uploaded {} of {} input blobs to the farm ({} bytes)",
            up.blobs, up.needed, up.bytes
        );
        let _ =
            events.send(RunEvent::Notice { task: None, level: NoticeLevel::Info, message }).await;
        let wanted = rrun::wanted(&tasks, farm.download);
        let inputs = options.verify.contains(&prova_protocol::wire::Proof::Inputs);
        let mut judge = rrun::Judge::new(prepared.workspace_view(ws), prepared, inputs);
        let re = crate::remote::reattach::Resubmit {
            target: &farm.target,
            root,
            trees: &prepared.trees,
            window: farm.reattach,
        };
        let mut outcome = crate::remote::reattach::submit_reattaching(
            &mut session,
            &re,
            tasks,
            options,
            events.clone(),
            &mut judge,
        )
        .await?;
        judge.summary(&mut outcome.summary);
        let mut got =
            download::download(&session.conn, cache, layer, prepared, &outcome.artifacts, &wanted)
                .await?;
        // No success without outputs: exit 0 on the farm, yet nothing (or not all) came home.
        got.refused.extend(download::outputs_missing(
            &outcome.summary,
            prepared,
            &outcome.artifacts,
            &wanted,
        ));
        for (task, why) in &got.refused {
            let message = format!("its outputs were not brought home: {why}");
            let notice =
                RunEvent::Notice { task: Some(task.clone()), level: NoticeLevel::Warn, message };
            let _ = events.send(notice).await;
        }
        download::apply_refusals(&mut outcome.summary, &got.refused);
        if !wanted.is_empty() {
            let message = format!(
                "restored the outputs of {} tasks from the farm ({} blobs fetched)",
                got.restored, got.fetched
            );
            let _ = events
                .send(RunEvent::Notice { task: None, level: NoticeLevel::Info, message })
                .await;
        }
        session.conn.close(0u32.into(), b"done");
        Ok(outcome.summary)
    }
    .await;
    result.map_err(|e| session.explain(e))
}
