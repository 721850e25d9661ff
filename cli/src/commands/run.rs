//! `prova run`: select, take the workspace lock (not for `--dry-run`), open the cache as the
//! cache flags say (read-only for `local:r`, not at all for `--no-cache`), prepare (keys),
//! then either print the plan (`--dry-run`) or run it, locally or on a farm, and report.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::Path;

use prova_coordinator::layers::LocalLayer;
use prova_coordinator::prepare::{Prepared, prepare};
use prova_coordinator::run::{CachePolicy, RunCache, RunOptions, TaskKind, VerifyOptions};
use prova_coordinator::scheduler::defaults::RunDefaults;
use prova_protocol::TaskId;
use prova_protocol::events::{NoticeLevel, RunEvent};
use prova_protocol::task::OwnedTask;
use prova_protocol::wire::Proof;
use tokio::sync::mpsc;

use super::common::{self, Loaded};
use crate::args::RunArgs;
use crate::exit::Code;
use crate::render::{Renderer, Style, plural, summary};

/// Bound on run events waiting for the renderer.
const EVENT_QUEUE: usize = 1024;

/// Runs the selection.
pub fn run(start: &Path, args: RunArgs) -> anyhow::Result<Code> {
    let started_at = std::time::SystemTime::now();
    let meta = crate::render::json::RunMeta::new(started_at);
    let Loaded { ws, graph } = common::load(start, &args.select)?;
    let rt = common::runtime()?;
    // A remote run dials first: its keys fold the farm's salt. A farm that cannot be reached
    // is one warning within seconds and the run goes on in local mode, as Turborepo goes on
    // without its remote cache (everything below then treats it as a local run) — unless
    // `--farm-required` (or `--fallback none`, `[workspace] fallback = "none"`).
    let session = match &args.remote.remote {
        Some(_) => rt.block_on(dial(&args, ws.settings.farm_required))?,
        None => {
            if args.cache.is_some_and(|c| c.farm.is_some()) {
                tracing::warn!("--cache farm:…: no --remote, so there is no farm layer to use");
            }
            None
        }
    };
    let remote = session.is_some();
    // One writer per workspace (cli/src/lock.rs): taken before the keys are computed, so they
    // see the files the previous writer left; a dry run and a remote run that brings nothing
    // back write neither outputs nor the local cache.
    let brings_nothing_back = remote && args.download == crate::args::DownloadMode::None;
    let writes_workspace = !args.dry_run && !brings_nothing_back;
    let lock = if writes_workspace {
        Some(crate::lock::acquire(&ws.root, !args.lock.no_wait)?)
    } else {
        None
    };
    // Released early once only persistent tasks (dev servers, never cached) are left, so
    // `prova run dev` does not shut the workspace to every other run while it serves.
    let lock = std::sync::Arc::new(std::sync::Mutex::new(lock));
    let (cache, cache_join) =
        common::open_cache_as(&ws, &args.cache_dir, cache_mode(&args, remote))?;
    let policy = if args.no_cache {
        CachePolicy { read: false, write: false }
    } else if args.force {
        CachePolicy { read: false, write: true }
    } else if let Some(spec) = args.cache {
        // The REAPI layer files what it finds locally, so it reads and writes through it.
        let reapi = spec.reapi.unwrap_or_default();
        CachePolicy { read: spec.read || reapi.read, write: spec.write || reapi.write }
    } else {
        CachePolicy { read: true, write: true }
    };
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut options = RunOptions {
        concurrency: args.concurrency.unwrap_or(cores).max(1),
        continue_on_failure: args.keep_going,
        verify: VerifyOptions::default(),
        upstreams: args.upstreams(),
    };
    if let Some(mode) = args.verify {
        options.verify.determinism = mode.proofs().contains(&Proof::Determinism);
        options.verify.inputs = mode.proofs().contains(&Proof::Inputs);
    }
    for t in &args.verify_allow {
        let id = TaskId::parse(t)
            .ok_or_else(|| anyhow::anyhow!("--verify-allow {t}: write a task id, project#task"))?;
        if graph.get(&id).is_none() {
            anyhow::bail!("--verify-allow {t}: no such task in this run");
        }
        options.verify.allow.insert(id);
    }
    options.verify.sample = args
        .verify_sample
        .map(|ppm| prova_protocol::wire::VerifySample { ppm, seed: args.verify_seed });
    // Tasks that are neither run nor restored are read from this workspace's disk: a farm
    // cannot see it, and a proof's exec roots take upstream outputs from the cache.
    if options.upstreams == prova_protocol::wire::UpstreamMode::Exclude {
        if remote {
            anyhow::bail!(
                "--exclude-dependencies reads the dependencies' outputs in your workspace, which \
                 a farm cannot see: use --only (it restores cached dependencies)"
            );
        }
        if options.verify.any() {
            anyhow::bail!(
                "--exclude-dependencies cannot be proven: a proof's exec roots take the \
                 dependencies' outputs from the cache; use --only (it restores cached ones)"
            );
        }
    }
    // The inputs proof needs the sandbox; without it the proof would pass silently.
    // Probed only for a proof: detecting starts bubblewrap, a cost every warm run paid.
    // `sandbox = true` tasks run as the inputs proof runs them, with or without --verify.
    let sandboxed: Vec<TaskId> = graph
        .nodes
        .iter()
        .filter(|n| ws.projects[n.project].tasks.get(&n.name).is_some_and(|d| d.policy.sandbox))
        .map(|n| n.id.clone())
        .collect();
    let sandbox = if options.verify.any() || !sandboxed.is_empty() {
        prova_worker::sandbox::detect()
    } else {
        prova_worker::sandbox::SandboxStatus::Unavailable { reason: "not probed".to_owned() }
    };
    if options.verify.inputs && !remote && !sandbox.is_available() {
        let why = match &sandbox {
            prova_worker::sandbox::SandboxStatus::Unavailable { reason } => reason.clone(),
            prova_worker::sandbox::SandboxStatus::Bwrap { .. } => String::new(),
        };
        anyhow::bail!("--verify=inputs needs the bubblewrap sandbox, which cannot run here: {why}");
    }
    let blobs_dir = cache.call_blocking(|s| s.dir().join(prova_coordinator::cache::BLOBS_DIR))?;
    let style = Style::new(args.output, args.json, args.output_logs);
    let outcome = rt.block_on(async {
        // A remote run connects before it keys: its keys fold declared env values with the
        // farm cache's salt (every client's keys agree), which the local cache then adopts so
        // entries brought home hit in local mode too.
        let salt = match &session {
            Some(s) => s.key_salt,
            None if args.no_cache => common::stored_key_salt(&ws, &args.cache_dir),
            None => None, // the opened cache's own
        };
        if let Some(farm) = salt
            && !args.no_cache
        {
            let adopted = cache.call(move |s| s.adopt_key_salt(&farm)).await?;
            if let Ok(true) = adopted {
                tracing::info!("the local cache adopted the farm's key salt");
            }
        }
        let env = |k: &str| std::env::var(k).ok();
        let mut prepared = prepare(&ws, &graph, &args.forward, &env, &cache, salt).await?;
        let defaults = RunDefaults { retry: args.retry, timeout: args.timeout };
        prova_coordinator::scheduler::defaults::apply(&mut prepared.plan, &ws, &defaults);
        let run_id = prova_coordinator::scheduler::defaults::new_run_id();
        prova_coordinator::scheduler::defaults::mark_run(&mut prepared.plan, &run_id);
        if options.verify.any() || !sandboxed.is_empty() {
            prepared.fill_inputs(&ws.root);
            options.verify.workspace = Some(std::sync::Arc::new(prepared.workspace_view(&ws)));
        }
        let layer = LocalLayer::new(cache.clone(), prova_coordinator::cache::TRUSTED, &ws.root)
            .with_input_scopes(prepared.input_scopes.clone())
            .with_protected(prepared.protected.clone());
        let reapi = if remote || args.no_cache {
            None
        } else {
            crate::local::reapi_layer(&ws.root, args.cache, &layer).await?
        };
        let hits = match &reapi {
            _ if !policy.read => HashMap::new(),
            Some(r) => prova_coordinator::keys::progressive::presolve(&prepared.plan, &mut prepared.keys, |ks| r.probe(ks)).await?,
            None => probe(&layer, &mut prepared).await?,
        };
        // A sandboxed task that may execute needs the sandbox here (a hit does not).
        if !remote && !sandbox.is_available() && !args.dry_run
            && let Some(id) = sandboxed.iter().find(|id| {
                prepared.plan.position(id).is_none_or(|i| !hits.contains_key(&i))
            })
        {
            let why = match &sandbox {
                prova_worker::sandbox::SandboxStatus::Unavailable { reason } => reason.clone(),
                prova_worker::sandbox::SandboxStatus::Bwrap { .. } => String::new(),
            };
            anyhow::bail!(
                "`{id}` sets `sandbox = true`, but the bubblewrap sandbox cannot run here: {why}"
            );
        }
        if args.dry_run {
            common::print(&dry_run(&graph, &prepared, &hits, args.upstreams(), args.json))?;
            return Ok::<_, anyhow::Error>(None);
        }
        let (tx, mut rx) = mpsc::channel::<RunEvent>(EVENT_QUEUE);
        for id in &prepared.matched_nothing {
            let message = "its declared inputs match no file: the key cannot see any change (a stale-hit trap)";
            let _ = tx
                .send(RunEvent::Notice { task: Some(id.clone()), level: NoticeLevel::Warn, message: message.to_owned() })
                .await;
        }
        for (pattern, at) in &prepared.fingerprint_unmatched {
            let message = format!(
                "{at}: fingerprint `{pattern}` matches no file (gitignored files are not listed): it is folded as absent, so keys change when it appears"
            );
            let _ = tx.send(RunEvent::Notice { task: None, level: NoticeLevel::Warn, message }).await;
        }
        // Without the sandbox a local re-run cannot change the hostname or the user id: a
        // task reading them would be "proven" silently (brief §7: say so plainly).
        if let prova_worker::sandbox::SandboxStatus::Unavailable { reason } = &sandbox
            && options.verify.determinism
            && !remote
        {
            let message = format!(
                "the sandbox cannot run here ({reason}): determinism re-runs cannot change the hostname or the user id, so a task that reads them is not caught"
            );
            let _ = tx.send(RunEvent::Notice { task: None, level: NoticeLevel::Warn, message }).await;
        }
        let mut unfinished = lock_until(&prepared);
        let held = lock.clone();
        if unfinished.as_ref().is_some_and(|u| u.is_empty())
            && let Ok(mut held) = held.lock()
        {
            held.take(); // persistent tasks only
        }
        let progress = crate::render::progress::Progress::new(
            crate::render::progress::Progress::wanted(args.json),
            prepared.plan.tasks.len(),
            prepared
                .plan
                .tasks
                .iter()
                .filter_map(|t| Some((t.id.clone(), *prepared.durations.get(t.id.as_str())?)))
                .collect(),
            options.concurrency,
        );
        let mut timeline = crate::render::trace::Timeline::new();
        timeline.started_at = started_at;
        let render_meta = meta.clone();
        let render = OwnedTask::spawn_blocking("cli.render", move || {
            use std::io::Write as _;
            // Rendered into a buffer, written with the progress line cleared only when an
            // event printed something (most do not: starts, hits' bookkeeping).
            let mut r = Renderer::new(Vec::new(), style, render_meta);
            let mut stdout = std::io::stdout().lock();
            let mut broken = false;
            while let Some(ev) = rx.blocking_recv() {
                progress.event(&ev);
                timeline.event(&ev);
                if let (RunEvent::TaskFinished(report), Some(unfinished)) = (&ev, &mut unfinished)
                    && unfinished.remove(&report.task)
                    && unfinished.is_empty()
                    && let Ok(mut held) = held.lock()
                {
                    held.take();
                }
                if broken {
                    continue; // stdout closed: keep draining so the run is not blocked
                }
                let _ = r.event(&ev);
                let text = r.take();
                if !text.is_empty()
                    && progress.suspend(|| stdout.write_all(&text).and_then(|()| stdout.flush())).is_err()
                {
                    broken = true;
                }
            }
            progress.finish();
            let _ = stdout.flush();
            timeline
        });
        let key_stats = prepared.stats;
        // A remote run whose every task hits the local cache needs nothing of the farm: the
        // outputs come from here, as a local run's would (the local layer is probed first).
        let session = match session {
            Some(s) if !options.verify.any() && all_hit_locally(&prepared, &hits) => {
                s.conn.close(0u32.into(), b"all local hits");
                let message =
                    "every task hit the local cache: nothing was sent to the farm".to_owned();
                let _ = tx.send(RunEvent::Notice { task: None, level: NoticeLevel::Info, message }).await;
                None
            }
            other => other,
        };
        let summary = if let Some(session) = session {
            let wire = wire_options(&args, farm_policy(&args), &options);
            remote_run(session, &args, &ws, &prepared, &cache, &layer, wire, tx).await
        } else {
            let staging = layer.tmp_dir().await?;
            let weights = prepared.weights();
            let layer: std::sync::Arc<dyn prova_coordinator::layers::CacheLayer> = match reapi {
                Some(r) => std::sync::Arc::new(r),
                None => std::sync::Arc::new(layer),
            };
            let protected = prepared.protected.clone();
            let run_cache = RunCache { layer, policy, keys: prepared.keys.clone(), hits, staging, protected };
            let proofs = (options.verify.any() || !sandboxed.is_empty()).then(|| crate::local::LocalProofs {
                work_dir: ws.root.join(".prova").join("worker"),
                sandbox: sandbox.is_available(),
                strace: prova_worker::sandbox::strace_available(),
                sources: (ws.root.clone(), blobs_dir.clone()),
            });
            crate::local::run(prepared.plan, options.clone(), tx, Some(run_cache), weights, proofs).await
        };
        let timeline = render.join().await.unwrap_or_default();
        Ok(Some((summary?, key_stats, timeline)))
    });
    drop(cache);
    let outcome = outcome?;
    // The cache thread closes the index when the last handle is gone.
    let _ = cache_join.join();
    let Some((summary, key_stats, timeline)) = outcome else { return Ok(Code::Ok) };
    let ended_at = std::time::SystemTime::now();
    let command = recorded_argv();
    let keys = serde_json::to_value(key_stats).unwrap_or_default();
    let line = crate::render::json::summary_value(&meta, ended_at, &command, &summary, &keys);
    if args.json {
        common::print(&format!("{line}\n"))?;
    } else {
        common::print(&summary::text(&summary))?;
    }
    let recorded = super::history::Recorded {
        meta: &meta,
        command: &command,
        summary: &summary,
        keys: &keys,
        timeline: &timeline,
        ended_at,
    };
    if let Err(e) = super::history::History::open(&ws.root).and_then(|mut h| h.record(&recorded)) {
        tracing::warn!("the run was not recorded: {e}");
    }
    reports(&ws.root, &args, &meta, &line, &timeline)?;
    Ok(if summary.ok { Code::Ok } else { Code::Failed })
}

/// The command line as the summary and the history keep it: lossily decoded, and the values
/// of the environment's secret-named variables masked as task logs mask them
/// (`prova run deploy -- --token=$NPM_TOKEN` leaves no token in `.prova/runs.db`).
fn recorded_argv() -> Vec<String> {
    let env: Vec<(String, String)> = std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
        .collect();
    let mask = prova_worker::mask::SecretMask::from_env(&env);
    std::env::args_os()
        .map(|a| {
            let a = a.to_string_lossy().into_owned();
            String::from_utf8_lossy(&mask.apply(a.as_bytes())).into_owned()
        })
        .collect()
}

/// `--summarize` and `--profile`: the summary object and the Chrome trace, as files.
fn reports(
    root: &Path,
    args: &RunArgs,
    meta: &crate::render::json::RunMeta,
    summary_line: &serde_json::Value,
    timeline: &crate::render::trace::Timeline,
) -> anyhow::Result<()> {
    use anyhow::Context as _;
    let write = |path: &Path, value: &serde_json::Value| -> anyhow::Result<()> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)
                .with_context(|| format!("cannot create {}", dir.display()))?;
        }
        let text = serde_json::to_string_pretty(value)?;
        std::fs::write(path, format!("{text}\n"))
            .with_context(|| format!("cannot write {}", path.display()))
    };
    if let Some(path) = &args.summarize {
        let path = match path {
            Some(p) => p.clone(),
            None => root.join(".prova").join("runs").join(format!("{}.json", meta.run_id)),
        };
        write(&path, summary_line).context("--summarize")?;
    }
    if let Some(path) = &args.profile {
        write(path, &timeline.chrome_trace(&meta.run_id)).context("--profile")?;
    }
    Ok(())
}

/// How the run opens the cache: not at all when it neither reads nor writes it (`--no-cache`,
/// `--cache local:`), read-only for `--cache local:r`. A remote run files what it downloads
/// in the local cache, so it opens it read-write unless `--no-cache` (then the downloads go
/// through a scratch store).
fn cache_mode(args: &RunArgs, remote: bool) -> common::CacheMode {
    use common::CacheMode;
    match args.cache {
        _ if args.no_cache => CacheMode::Scratch,
        _ if args.force || remote => CacheMode::ReadWrite,
        Some(spec) if spec.reapi.is_some() => CacheMode::ReadWrite, // REAPI hits are filed locally
        Some(spec) if !spec.read && !spec.write => CacheMode::Scratch,
        Some(spec) if !spec.write => CacheMode::ReadOnly,
        _ => CacheMode::ReadWrite,
    }
}

/// Dials `--remote`. A farm that cannot be reached is one warning and `None`: the run goes
/// on locally, with the local cache — or, under `--farm-required` (`--fallback none`,
/// `[workspace] fallback = "none"`; the flags override the setting either way), an error
/// naming the address. A farm that answers and refuses is always an error.
async fn dial(
    args: &RunArgs,
    config_required: bool,
) -> anyhow::Result<Option<crate::remote::Session>> {
    use crate::args::Fallback;
    let required = match args.fallback {
        _ if args.farm_required => Some("--farm-required"),
        Some(Fallback::None) => Some("--fallback none"),
        Some(Fallback::Local) => None,
        None => config_required.then_some("[workspace] fallback = \"none\""),
    };
    match crate::remote::connect(&args.remote).await {
        Ok(s) => Ok(Some(s)),
        Err(e) => match e.downcast::<crate::remote::Unreachable>() {
            Ok(u) => match required {
                Some(why) => Err(anyhow::anyhow!(
                    "{u}; the run needs the farm ({why}), so nothing ran locally"
                )),
                None => {
                    let why = if args.fallback == Some(Fallback::Local) {
                        " (--fallback local)"
                    } else {
                        ""
                    };
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

/// The tasks whose end releases the workspace lock early: every non-persistent task, when
/// the plan has a persistent one (`None` otherwise: the lock is held to the end of the run).
fn lock_until(prepared: &Prepared) -> Option<std::collections::HashSet<TaskId>> {
    let tasks = &prepared.plan.tasks;
    tasks.iter().any(|t| t.kind == TaskKind::Persistent).then(|| {
        tasks.iter().filter(|t| t.kind != TaskKind::Persistent).map(|t| t.id.clone()).collect()
    })
}

/// Cache entries present for the plan's cacheable tasks, by node; keys that fold an
/// upstream's outputs are settled from the upstream's entry as the lookups go
/// ([`prova_coordinator::keys::progressive::presolve`]: one batch per level of hits).
async fn probe(
    layer: &LocalLayer,
    prepared: &mut Prepared,
) -> anyhow::Result<HashMap<usize, prova_coordinator::cache::Entry>> {
    Ok(prova_coordinator::keys::progressive::presolve(&prepared.plan, &mut prepared.keys, |ks| {
        layer.probe(ks)
    })
    .await?)
}

/// Whether every task that runs a command has a local hit (groups run nothing).
fn all_hit_locally(
    prepared: &Prepared,
    hits: &HashMap<usize, prova_coordinator::cache::Entry>,
) -> bool {
    prepared
        .plan
        .tasks
        .iter()
        .enumerate()
        .all(|(i, t)| t.kind == TaskKind::Group || (t.cacheable && hits.contains_key(&i)))
}

fn dry_run(
    graph: &prova_coordinator::graph::TaskGraph,
    prepared: &Prepared,
    hits: &HashMap<usize, prova_coordinator::cache::Entry>,
    upstreams: prova_protocol::wire::UpstreamMode,
    json: bool,
) -> String {
    use prova_protocol::wire::UpstreamMode;
    let plan = &prepared.plan;
    let order = graph.topo_order();
    // `--only` restores a hit of a task not asked for and runs none; `--exclude-dependencies`
    // does neither (run/excluded.rs).
    let not_run = |i: usize| {
        let t = &plan.tasks[i];
        !t.requested
            && t.kind != TaskKind::Group
            && match upstreams {
                UpstreamMode::Run => false,
                UpstreamMode::Only => !hits.contains_key(&i),
                UpstreamMode::Exclude => true,
            }
    };
    let cache_word = |i: usize| match (plan.tasks[i].cacheable, hits.contains_key(&i)) {
        _ if not_run(i) => "not_run",
        (false, _) => "uncached",
        (true, true) => "hit",
        (true, false) if prepared.key(i).is_none() => "pending",
        (true, false) => "miss",
    };
    // A pending key waits on the upstreams it folds by outputs that will run first.
    let waits_on = |i: usize| -> Vec<&str> {
        prepared
            .keys
            .output_upstreams(plan, i)
            .into_iter()
            .filter(|d| !hits.contains_key(d))
            .map(|d| plan.tasks[d].id.as_str())
            .collect()
    };
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
                    "key": prepared.key(i),
                    "cache": cache_word(i),
                    "waits_on": prepared.key(i).is_none().then(|| waits_on(i)),
                    "deps": t.deps.iter().map(|&d| plan.tasks[d].id.as_str()).collect::<Vec<_>>(),
                })
            })
            .collect();
        return format!("{}\n", serde_json::json!({ "tasks": tasks }));
    }
    // A hit is restored, not run: the header says how many of each.
    let restores = order.iter().filter(|&&i| cache_word(i) == "hit").count();
    let skipped = order.iter().filter(|&&i| not_run(i)).count();
    let mut out = if restores == 0 && skipped == 0 {
        format!("{} would run, in this order:\n", plural(order.len(), "task"))
    } else {
        let mut head = format!(
            "{}, in this order: {} would run, {} would restore from the cache",
            plural(order.len(), "task"),
            order.len() - restores - skipped,
            restores
        );
        if skipped > 0 {
            let _ = write!(head, ", {skipped} would not run (their outputs on disk are used)");
        }
        head.push('\n');
        head
    };
    for (n, &i) in order.iter().enumerate() {
        let t = &plan.tasks[i];
        let what = match t.kind {
            TaskKind::Group => "(group)".to_owned(),
            TaskKind::Persistent => format!("{}  (persistent)", t.spec.command.display()),
            TaskKind::Command => t.spec.command.display(),
        };
        let dir = if t.spec.project_dir.is_empty() { "." } else { t.spec.project_dir.as_str() };
        let _ = writeln!(
            out,
            "{:>4}. {}  [{}]  {}  {} {}",
            n + 1,
            t.id,
            dir,
            what,
            prepared.key(i).map_or_else(|| "pending".to_owned(), |k| k.short()),
            match prepared.key(i) {
                _ if not_run(i) => match upstreams {
                    UpstreamMode::Exclude => "not run (--exclude-dependencies)".to_owned(),
                    _ => "not run (--only): not cached, its outputs on disk are used".to_owned(),
                },
                None if plan.tasks[i].cacheable => {
                    let w = waits_on(i);
                    let mut named: Vec<String> =
                        w.iter().take(3).map(|t| format!("`{t}`")).collect();
                    if w.len() > 3 {
                        named.push(format!("{} more", w.len() - 3));
                    }
                    format!("(waits on {})", named.join(", "))
                }
                _ => match cache_word(i) {
                    "hit" => "hit: would restore".to_owned(),
                    word => word.to_owned(),
                },
            }
        );
    }
    out
}

/// The farm half of `prova run --remote`.
#[allow(clippy::too_many_arguments)] // the run's parts, each used once
async fn remote_run(
    mut session: crate::remote::Session,
    args: &RunArgs,
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
        let wanted = rrun::wanted(&tasks, args.download);
        let inputs = options.verify.contains(&prova_protocol::wire::Proof::Inputs);
        let mut judge = rrun::Judge::new(prepared.workspace_view(ws), prepared, inputs);
        let re = crate::remote::reattach::Resubmit {
            args: &args.remote,
            root,
            trees: &prepared.trees,
            window: std::time::Duration::from_secs(args.reattach_timeout),
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

/// What a remote run asks of the farm's cache: `--cache farm:MODE`; a `--cache` that leaves
/// the farm out neither reads nor writes it (as Turborepo's `--cache=local:rw` leaves its
/// remote cache out); read-write by default.
fn farm_policy(args: &RunArgs) -> CachePolicy {
    let off = CachePolicy { read: false, write: false };
    if args.no_cache {
        off
    } else if args.force {
        CachePolicy { read: false, write: true }
    } else if let Some(spec) = args.cache {
        spec.farm.map_or(off, |m| CachePolicy { read: m.read, write: m.write })
    } else {
        CachePolicy { read: true, write: true }
    }
}

/// What a remote run asks of the farm.
fn wire_options(
    args: &RunArgs,
    policy: CachePolicy,
    run_options: &RunOptions,
) -> prova_protocol::wire::RunOptionsWire {
    prova_protocol::wire::RunOptionsWire {
        continue_on_failure: args.keep_going,
        read: policy.read,
        write: policy.write,
        verify: [
            (Proof::Determinism, run_options.verify.determinism),
            (Proof::Inputs, run_options.verify.inputs),
        ]
        .into_iter()
        .filter_map(|(p, on)| on.then_some(p))
        .collect(),
        verify_allow: run_options.verify.allow.iter().cloned().collect(),
        verify_sample: run_options.verify.sample,
        upstreams: run_options.upstreams,
    }
}
