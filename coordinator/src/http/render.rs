//! What the HTTP listener shows: one [`State`] gathered per request (the farm actor's status
//! and counts, the cache's stats, the ledger's divergent keys, the observer's runs and
//! proofs), rendered as Prometheus text ([`metrics`]), JSON ([`State::json`]) or the
//! dashboard's HTML ([`page`], [`body`]). Every piece of user data in HTML goes through
//! [`esc`].

use std::fmt::Write as _;
use std::sync::atomic::Ordering;

use prova_protocol::wire::FarmStatus;

use crate::cache::maintenance::Stats;
use crate::farm::actor::{GetCounts, GetStatus};
use crate::farm::core::FarmCounts;
use crate::farm::observe::{Counters, DURATION_BUCKETS, Observer, ProofRow, RunRow};
use crate::farm::server::Shared;
use crate::hermeticity::HermeticityReport;

/// Divergent ledger keys shown.
pub const LEDGER_KEYS: usize = 200;

/// One snapshot of everything shown.
#[derive(Debug)]
pub struct State {
    /// Workers, queue, runs in progress.
    pub status: FarmStatus,
    /// Lease expiries, requeues.
    pub counts: FarmCounts,
    /// The farm cache (`None`: could not be read).
    pub cache: Option<Stats>,
    /// Keys whose executions disagree.
    pub ledger: HermeticityReport,
    /// Live and recent runs.
    pub runs: Vec<RunRow>,
    /// Failed proofs seen by this coordinator.
    pub proofs: Vec<ProofRow>,
    /// Seconds up.
    pub uptime_secs: u64,
    /// Cache lookups of finished tasks by tier: `(tier, hits, misses)`.
    pub lookups: Vec<(String, u64, u64)>,
}

/// Gathers a [`State`]; a part that cannot be had is left empty.
pub async fn gather(shared: &Shared) -> State {
    let status = shared.farm.ask(GetStatus).await.unwrap_or_else(|_| no_status());
    let counts = shared.farm.ask(GetCounts).await.unwrap_or_default();
    let cache = shared.store.call(|s| s.stats()).await.ok().and_then(Result::ok);
    let ledger = shared
        .store
        .call(|s| crate::hermeticity::report(s, LEDGER_KEYS))
        .await
        .ok()
        .and_then(Result::ok)
        .unwrap_or_default();
    State {
        status,
        counts,
        cache,
        ledger,
        runs: shared.observe.runs(),
        proofs: shared.observe.proofs(),
        uptime_secs: shared.observe.uptime_secs(),
        lookups: shared.observe.lookups_by_tier(),
    }
}

fn no_status() -> FarmStatus {
    FarmStatus { workers: Vec::new(), queued: 0, runs: 0, coordinator: None }
}

impl Default for State {
    fn default() -> Self {
        Self {
            status: no_status(),
            counts: FarmCounts::default(),
            cache: None,
            ledger: HermeticityReport::default(),
            runs: Vec::new(),
            proofs: Vec::new(),
            uptime_secs: 0,
            lookups: Vec::new(),
        }
    }
}

impl State {
    /// The `/api/state` document.
    pub fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "uptime_secs": self.uptime_secs,
            "version": env!("CARGO_PKG_VERSION"),
            "workers": self.status.workers,
            "queued": self.status.queued,
            "runs_in_progress": self.status.runs,
            "lease_expiries": self.counts.lease_expiries,
            "requeues": self.counts.requeues,
            "cache": self.cache.as_ref().map(|c| serde_json::json!({
                "entries": c.entries, "blob_bytes": c.blob_bytes, "blob_files": c.blob_files,
            })),
            "runs": self.runs,
            "proofs": self.proofs,
            "ledger": self.ledger,
        })
    }
}

/// A Prometheus label value, escaped.
fn label(v: &str) -> String {
    v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
}

/// The `/metrics` exposition (Prometheus text format 0.0.4).
pub fn metrics(s: &State, o: &Observer) -> String {
    let c = &o.counters;
    let mut out = String::new();
    run_metrics(&mut out, s, c);
    worker_metrics(&mut out, s);
    cache_metrics(&mut out, s, c);
    time_metrics(&mut out, s, c);
    out
}

/// Tasks, the queue and runs.
fn run_metrics(out: &mut String, s: &State, c: &Counters) {
    family(out, "prova_tasks_total", "counter", "Tasks finished in farm runs, by outcome.");
    let tasks = c.tasks.lock().map(|m| m.clone()).unwrap_or_default();
    for outcome in ["succeeded", "failed", "skipped", "aborted"] {
        let n = tasks.get(outcome).copied().unwrap_or(0);
        let _ = writeln!(out, "prova_tasks_total{{outcome=\"{outcome}\"}} {n}");
    }
    family(out, "prova_queue_depth", "gauge", "Assignments waiting for a slot.");
    let _ = writeln!(out, "prova_queue_depth {}", s.status.queued);
    let running: usize = s.status.workers.iter().map(|w| w.running.len()).sum();
    family(out, "prova_running_tasks", "gauge", "Tasks holding a live lease.");
    let _ = writeln!(out, "prova_running_tasks {running}");
    family(out, "prova_runs_in_progress", "gauge", "Runs in progress.");
    let _ = writeln!(out, "prova_runs_in_progress {}", s.status.runs);
    family(out, "prova_runs_started_total", "counter", "Runs accepted.");
    let _ = writeln!(out, "prova_runs_started_total {}", c.runs_started.load(Ordering::Relaxed));
    family(out, "prova_runs_finished_total", "counter", "Runs ended.");
    let _ = writeln!(out, "prova_runs_finished_total {}", c.runs_finished.load(Ordering::Relaxed));
}

/// Workers, their slots, leases lost.
fn worker_metrics(out: &mut String, s: &State) {
    family(out, "prova_workers", "gauge", "Connected workers.");
    let _ = writeln!(out, "prova_workers {}", s.status.workers.len());
    family(out, "prova_workers_unavailable", "gauge", "Connected workers given no work, by why.");
    let quarantined = s.status.workers.iter().filter(|w| w.quarantined.is_some()).count();
    let unfit = s
        .status
        .workers
        .iter()
        .filter(|w| w.health.as_ref().is_some_and(|h| h.unfit.is_some()))
        .count();
    let _ = writeln!(out, "prova_workers_unavailable{{why=\"quarantined\"}} {quarantined}");
    let _ = writeln!(out, "prova_workers_unavailable{{why=\"unfit\"}} {unfit}");
    family(out, "prova_worker_slots", "gauge", "Worker slots, by state.");
    let total: u32 = s.status.workers.iter().map(|w| w.slots).sum();
    let busy: u32 = s.status.workers.iter().map(|w| w.busy).sum();
    let _ = writeln!(out, "prova_worker_slots{{state=\"total\"}} {total}");
    let _ = writeln!(out, "prova_worker_slots{{state=\"busy\"}} {busy}");
    family(
        out,
        "prova_lease_expiries_total",
        "counter",
        "Leases that expired without a heartbeat.",
    );
    let _ = writeln!(out, "prova_lease_expiries_total {}", s.counts.lease_expiries);
    family(out, "prova_requeues_total", "counter", "Items requeued after a lost lease.");
    let _ = writeln!(out, "prova_requeues_total {}", s.counts.requeues);
}

/// Cache lookups, verdicts, bytes moved, the store and the ledger.
fn cache_metrics(out: &mut String, s: &State, c: &Counters) {
    family(
        out,
        "prova_cache_lookups_total",
        "counter",
        "Farm cache lookups of finished tasks, by tier and result.",
    );
    let cache = c.cache.lock().map(|m| m.clone()).unwrap_or_default();
    for tier in ["trusted", "untrusted"] {
        for result in ["hit", "miss"] {
            let n = cache.get(&(tier.to_owned(), result)).copied().unwrap_or(0);
            let _ = writeln!(
                out,
                "prova_cache_lookups_total{{tier=\"{tier}\",result=\"{result}\"}} {n}"
            );
        }
    }
    family(out, "prova_verdicts_total", "counter", "Proof verdicts, by kind.");
    let verdicts = c.verdicts.lock().map(|m| m.clone()).unwrap_or_default();
    for (kind, n) in &verdicts {
        let _ = writeln!(out, "prova_verdicts_total{{verdict=\"{}\"}} {n}", label(kind));
    }
    family(
        out,
        "prova_artifact_bytes_total",
        "counter",
        "Blob bytes moved between the farm store and its peers.",
    );
    let _ = writeln!(
        out,
        "prova_artifact_bytes_total{{direction=\"in\"}} {}",
        c.bytes_in.load(Ordering::Relaxed)
    );
    let _ = writeln!(
        out,
        "prova_artifact_bytes_total{{direction=\"out\"}} {}",
        c.bytes_out.load(Ordering::Relaxed)
    );
    family(out, "prova_cache_entries", "gauge", "Farm cache entries, by namespace.");
    if let Some(stats) = &s.cache {
        for (ns, n) in &stats.entries {
            let ns = if ns.is_empty() { "trusted" } else { ns };
            let _ = writeln!(out, "prova_cache_entries{{namespace=\"{}\"}} {n}", label(ns));
        }
        family(out, "prova_cache_blob_bytes", "gauge", "Bytes of blobs in the farm store.");
        let _ = writeln!(out, "prova_cache_blob_bytes {}", stats.blob_bytes);
    }
    family(out, "prova_divergent_keys", "gauge", "Ledger keys whose executions disagree.");
    let _ = writeln!(out, "prova_divergent_keys {}", s.ledger.keys.len());
}

/// Uptime and task durations.
fn time_metrics(out: &mut String, s: &State, c: &Counters) {
    family(out, "prova_uptime_seconds", "gauge", "Seconds since the coordinator started.");
    let _ = writeln!(out, "prova_uptime_seconds {}", s.uptime_secs);
    family(out, "prova_task_duration_seconds", "histogram", "Wall time of executed farm tasks.");
    let (buckets, sum) = c.durations.lock().map(|d| *d).unwrap_or_default();
    let mut cumulative = 0;
    for (i, le) in DURATION_BUCKETS.iter().enumerate() {
        cumulative += buckets[i];
        let _ = writeln!(out, "prova_task_duration_seconds_bucket{{le=\"{le}\"}} {cumulative}");
    }
    cumulative += buckets[DURATION_BUCKETS.len()];
    let _ = writeln!(out, "prova_task_duration_seconds_bucket{{le=\"+Inf\"}} {cumulative}");
    let _ = writeln!(out, "prova_task_duration_seconds_sum {sum}");
    let _ = writeln!(out, "prova_task_duration_seconds_count {cumulative}");
}

/// HTML-escapes user data (task names, labels, paths).
pub fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for ch in s.chars() {
        match ch {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// The whole dashboard page.
pub fn page(s: &State) -> String {
    format!(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>prova farm</title>\
         <style>{}</style></head><body><h1>prova farm</h1><main id=\"farm\">{}</main>\
         <script src=\"/dashboard.js\"></script></body></html>",
        include_str!("dashboard.css"),
        body(s)
    )
}

/// The dashboard's content (what `/api/fragment` answers and the script swaps in).
pub fn body(s: &State) -> String {
    let mut h = String::new();
    summary(&mut h, s);
    tiers(&mut h, s);
    workers(&mut h, s);
    runs(&mut h, s);
    proofs(&mut h, s);
    h
}

/// The line above the tables: version, uptime, queue, counts, the cache, the hit rate.
fn summary(h: &mut String, s: &State) {
    let hits: u64 = s.runs.iter().map(|r| r.hits as u64).sum();
    let done: u64 = s.runs.iter().map(|r| r.done as u64).sum();
    let _ = write!(
        h,
        "<section><p>version {} · up {} · queue <span id=\"queued\">{}</span> · runs in progress {} · lease expiries {} · requeues {}",
        esc(env!("CARGO_PKG_VERSION")),
        humantime::format_duration(std::time::Duration::from_secs(s.uptime_secs)),
        s.status.queued,
        s.status.runs,
        s.counts.lease_expiries,
        s.counts.requeues
    );
    if let Some(c) = &s.cache {
        let entries: u64 = c.entries.values().sum();
        let _ = write!(h, " · cache {entries} entries, {} blob bytes", c.blob_bytes);
    }
    if done > 0 {
        let _ = write!(h, " · hit rate (shown runs) {:.0}%", hits as f64 * 100.0 / done as f64);
    }
    h.push_str("</p></section>");
}

/// The workers table.
fn workers(h: &mut String, s: &State) {
    h.push_str("<section id=\"workers\"><h2>Workers</h2><table><tr><th>worker</th><th>state</th><th>version</th><th>platform</th><th>sandbox</th><th>slots busy/total</th><th>labels</th><th>running</th></tr>");
    for w in &s.status.workers {
        let labels: Vec<String> = w.labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let running: Vec<String> = w.running.iter().map(ToString::to_string).collect();
        let (class, state) = worker_state(w);
        let _ = write!(
            h,
            "<tr class=\"worker {class}\"><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}/{}</td><td>{}</td><td>{}</td></tr>",
            esc(&w.id.to_string()),
            esc(&state),
            esc(&w.version),
            esc(&w.platform),
            esc(&w.sandbox),
            w.busy,
            w.slots,
            esc(&labels.join(", ")),
            esc(&running.join(", "))
        );
    }
    h.push_str("</table></section>");
}

/// The runs table, then the newest run's tasks and timeline.
fn runs(h: &mut String, s: &State) {
    h.push_str("<section id=\"runs\"><h2>Runs</h2><table><tr><th>run</th><th>who</th><th>tier</th><th>state</th><th>done/total</th><th>hits</th><th>failures</th><th>verdicts</th><th>duration</th></tr>");
    for r in &s.runs {
        let state = match (r.live, r.ok) {
            (true, _) => "running",
            (false, Some(true)) => "ok",
            (false, Some(false)) => "failed",
            (false, None) => "stopped",
        };
        let verdicts: Vec<String> = r.verdicts.iter().map(|(k, n)| format!("{k}: {n}")).collect();
        let _ = write!(
            h,
            "<tr class=\"run\"><td>run-{}</td><td>{}</td><td>{}</td><td>{state}</td><td>{}/{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            r.id,
            esc(&r.who),
            esc(&r.namespace),
            r.done,
            r.total,
            r.hits,
            r.failures,
            esc(&verdicts.join(", ")),
            r.wall_ms.map_or_else(|| "…".to_owned(), |ms| format!("{:.1} s", ms as f64 / 1000.0))
        );
    }
    h.push_str("</table>");
    if let Some(r) = s.runs.first() {
        let _ = write!(
            h,
            "<h3>run-{} tasks</h3><table><tr><th>task</th><th>status</th><th>cache</th><th>worker</th><th>ms</th></tr>",
            r.id
        );
        for t in &r.tasks {
            let _ = write!(
                h,
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                esc(&t.task),
                t.status,
                t.cache,
                esc(t.worker.as_deref().unwrap_or("")),
                t.ms
            );
        }
        h.push_str("</table>");
        timeline(h, r);
    }
    h.push_str("</section>");
}

/// Failed proofs seen here, and the ledger's divergent keys.
fn proofs(h: &mut String, s: &State) {
    h.push_str("<section id=\"proofs\"><h2>Proofs</h2><h3>Failed proofs (this coordinator)</h3><table><tr><th>run</th><th>task</th><th>verdict</th><th>key</th><th>files</th></tr>");
    for p in &s.proofs {
        let _ = write!(
            h,
            "<tr class=\"proof\"><td>run-{}</td><td>{}</td><td>{}</td><td class=\"key\">{}</td><td>{}</td></tr>",
            p.run,
            esc(&p.task),
            esc(&p.verdict),
            esc(p.key.as_deref().unwrap_or("")),
            esc(&p.files.join(", "))
        );
    }
    h.push_str("</table><h3>Divergent keys (ledger)</h3><table><tr><th>key</th><th>task</th><th>fingerprints</th><th>nondeterministic</th><th>flaky</th><th>files</th></tr>");
    for k in &s.ledger.keys {
        let files: Vec<&String> = k.changed.iter().chain(&k.added).chain(&k.removed).collect();
        let files: Vec<&str> = files.iter().map(|f| f.as_str()).collect();
        let _ = write!(
            h,
            "<tr class=\"divergent\"><td class=\"key\">{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(&k.key.to_hex()),
            esc(&k.task),
            k.fingerprints.len(),
            k.nondeterministic,
            k.flaky,
            esc(&files.join(", "))
        );
    }
    h.push_str("</table></section>");
}

/// The cache by trust tier: entries (the tier's namespaces; `pending` beside `trusted`),
/// hits, misses and the hit rate of finished tasks since the coordinator started.
fn tiers(h: &mut String, s: &State) {
    h.push_str("<section id=\"tiers\"><h2>Cache by tier</h2><table><tr><th>tier</th><th>entries</th><th>hits</th><th>misses</th><th>hit rate</th></tr>");
    let entries = |tier: &str| -> u64 {
        s.cache.as_ref().map_or(0, |c| {
            c.entries
                .iter()
                .filter(|(ns, _)| match tier {
                    "trusted" => ns.as_str() == crate::cache::TRUSTED,
                    "untrusted" => ns.starts_with(crate::cache::UNTRUSTED),
                    t => ns.as_str() == t,
                })
                .map(|(_, n)| n)
                .sum()
        })
    };
    let mut names: Vec<&str> = vec!["trusted", "pending", "untrusted"];
    for (t, _, _) in &s.lookups {
        if !names.contains(&t.as_str()) {
            names.push(t);
        }
    }
    for tier in names {
        let (hits, misses) =
            s.lookups.iter().find(|(t, _, _)| t == tier).map_or((0, 0), |(_, h, m)| (*h, *m));
        let rate = if hits + misses > 0 {
            format!("{:.0}%", hits as f64 * 100.0 / (hits + misses) as f64)
        } else {
            "–".to_owned()
        };
        let _ = write!(
            h,
            "<tr class=\"tier\"><td>{}</td><td>{}</td><td>{hits}</td><td>{misses}</td><td>{rate}</td></tr>",
            esc(tier),
            entries(tier)
        );
    }
    h.push_str("</table></section>");
}

/// One run's task timeline: a bar per task from its start to its end, on the run's scale.
fn timeline(h: &mut String, r: &crate::farm::observe::RunRow) {
    let span = r.tasks.iter().map(|t| t.start_ms + t.ms).max().unwrap_or(0).max(1);
    let _ =
        write!(h, "<h3>run-{} timeline</h3><div class=\"timeline\" data-span-ms=\"{span}\">", r.id);
    for t in &r.tasks {
        let left = t.start_ms as f64 * 100.0 / span as f64;
        let width = (t.ms as f64 * 100.0 / span as f64).max(0.2);
        let _ = write!(
            h,
            "<div class=\"lane\"><span class=\"name\">{}</span><span class=\"track\"><span class=\"bar {}\" style=\"margin-left:{left:.2}%;width:{width:.2}%\" title=\"{} ms from {} ms\"></span></span></div>",
            esc(&t.task),
            t.cache,
            t.ms,
            t.start_ms
        );
    }
    h.push_str("</div>");
}

/// A worker's state on the dashboard: (row class, words): quarantined (with why), silent
/// (not heard from since a lease of it expired), unfit (its health's reason) or ok.
fn worker_state(w: &prova_protocol::wire::WorkerStatus) -> (&'static str, String) {
    if let Some(why) = &w.quarantined {
        return ("quarantined", format!("quarantined: {why}"));
    }
    if w.silent {
        return ("unfit", "silent: not heard from since a lease of it expired".to_owned());
    }
    match w.health.as_ref().and_then(|h| h.unfit.as_deref()) {
        Some(why) => ("unfit", format!("unfit: {why}")),
        None => ("ok", "ok".to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_data_is_escaped() {
        assert_eq!(
            esc("<img src=x onerror='a&b'>\""),
            "&lt;img src=x onerror=&#39;a&amp;b&#39;&gt;&quot;"
        );
        assert_eq!(label("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }

    #[test]
    fn the_page_shows_tiers_and_a_timeline_of_the_newest_run() {
        let mut s = State {
            lookups: vec![("trusted".into(), 3, 1), ("untrusted".into(), 0, 2)],
            cache: Some(crate::cache::maintenance::Stats {
                entries: [
                    ("".to_owned(), 5),
                    ("pending".to_owned(), 1),
                    ("untrusted/bob".to_owned(), 2),
                ]
                .into_iter()
                .collect(),
                ..Default::default()
            }),
            ..State::default()
        };
        s.runs.push(crate::farm::observe::RunRow {
            id: 7,
            who: "ci".into(),
            namespace: "trusted".into(),
            started_ms: 0,
            total: 2,
            done: 2,
            hits: 1,
            failures: 0,
            verdicts: Default::default(),
            live: false,
            ok: Some(true),
            wall_ms: Some(400),
            tasks: vec![
                crate::farm::observe::TaskRow {
                    task: "a#build".into(),
                    status: "succeeded",
                    cache: "saved",
                    worker: Some("w1".into()),
                    ms: 300,
                    start_ms: 0,
                },
                crate::farm::observe::TaskRow {
                    task: "<b>#test".into(),
                    status: "succeeded",
                    cache: "hit",
                    worker: None,
                    ms: 100,
                    start_ms: 300,
                },
            ],
        });
        let b = body(&s);
        assert!(b.contains("<td>trusted</td><td>5</td><td>3</td><td>1</td><td>75%</td>"), "{b}");
        assert!(b.contains("<td>untrusted</td><td>2</td><td>0</td><td>2</td><td>0%</td>"), "{b}");
        assert!(b.contains("<td>pending</td><td>1</td><td>0</td><td>0</td><td>–</td>"), "{b}");
        assert!(b.contains("run-7 timeline") && b.contains("data-span-ms=\"400\""), "{b}");
        assert!(b.contains("margin-left:75.00%;width:25.00%"), "the test task's bar: {b}");
        assert!(b.contains("&lt;b&gt;#test") && !b.contains("<b>#test"), "escaped: {b}");
    }

    #[test]
    fn an_empty_farm_exposes_every_family() {
        let text = metrics(&State::default(), &Observer::default());
        for name in [
            "prova_tasks_total",
            "prova_queue_depth",
            "prova_worker_slots",
            "prova_task_duration_seconds_count 0",
        ] {
            assert!(text.contains(name), "{name} missing:\n{text}");
        }
    }
}
