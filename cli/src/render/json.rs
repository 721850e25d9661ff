//! The `--json` event contract (schema: `schemas/events.json`, version [`SCHEMA_VERSION`]):
//! the JSON view of [`RunEvent`]s and of the summary line.
//!
//! A view, not the wire type: `RunEvent` also travels to farm clients as MessagePack (its
//! goldens pin that shape), so the JSON contract is built here from it — every line gains
//! `v`, `run_id` and `ts` (RFC 3339, UTC, milliseconds), `exit` takes one shape
//! (`{"code":0}`, `{"signal":"SIGKILL"}`, `{"timed_out":true}`, `{"aborted":true}`,
//! `{"spawn_failed":"why"}`, or `null` when nothing executed), `task_started` says whether it
//! is a cache hit, and the summary carries totals. The wire stays as it was.

use std::time::SystemTime;

use prova_protocol::events::{RunEvent, RunSummary, TaskReport, TaskStatus};
use prova_protocol::spec::ExitKind;
use serde_json::{Map, Value, json};

use super::summary::Counts;

/// The version every line carries as `v`; bumped only when a field changes meaning or goes
/// away (fields are only ever added within a version).
pub const SCHEMA_VERSION: u64 = 1;

/// What every line of one run shares.
#[derive(Clone, Debug)]
pub struct RunMeta {
    /// The run's id (also its key in the run history).
    pub run_id: String,
}

impl RunMeta {
    /// A fresh id for a run starting `at`: sortable by start time, unique per process.
    pub fn new(at: SystemTime) -> Self {
        Self { run_id: run_id(at) }
    }
}

/// `r<unix ms>-<8 hex>`: the start time, then a hash of the nanoseconds and the process id.
pub fn run_id(at: SystemTime) -> String {
    let since = at.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
    let seed = format!("{}:{}", since.as_nanos(), std::process::id());
    // A fast non-cryptographic hash: a tie-breaker between runs of one millisecond, never a
    // key.
    let h = xxhash_rust::xxh3::xxh3_64(seed.as_bytes()) as u32;
    format!("r{}-{h:08x}", since.as_millis())
}

/// RFC 3339 in UTC with milliseconds: `2026-12-01T18:49:31.123Z`.
pub fn timestamp(at: SystemTime) -> String {
    humantime::format_rfc3339_millis(at).to_string()
}

/// One event as its JSON line (no newline).
pub fn event_line(meta: &RunMeta, at: SystemTime, ev: &RunEvent) -> String {
    let mut body = match serde_json::to_value(ev) {
        Ok(Value::Object(m)) => m,
        _ => Map::new(),
    };
    let kind = body.remove("event").unwrap_or(Value::Null);
    match ev {
        RunEvent::TaskStarted { .. } => {
            body.insert("hit".into(), Value::Bool(false));
        }
        RunEvent::TaskFinished(r) => {
            body.insert("exit".into(), exit_value(r.exit.as_ref()));
        }
        _ => {}
    }
    line(meta, at, kind, body)
}

/// The `task_started` line of a task that executed nothing: a cache hit (`hit: true`) or a
/// group, so that every task that did not skip has a start and a finish.
pub fn started_without_execution(meta: &RunMeta, at: SystemTime, r: &TaskReport) -> String {
    let hit = matches!(r.cache, prova_protocol::events::CacheStatus::Hit { .. });
    let mut body = Map::new();
    body.insert("task".into(), json!(r.task));
    body.insert("attempt".into(), json!(0));
    body.insert("worker".into(), Value::Null);
    body.insert("hit".into(), Value::Bool(hit));
    line(meta, at, json!("task_started"), body)
}

/// Whether a finished task gets a `task_started` line of its own when none came: every task
/// but a skipped one.
pub fn needs_start(r: &TaskReport) -> bool {
    r.status != TaskStatus::Skipped
}

/// The summary object (`--json`'s last line, `--summarize`, `prova last --json`).
pub fn summary_value(
    meta: &RunMeta,
    at: SystemTime,
    command: &[String],
    summary: &RunSummary,
    keys: &Value,
) -> Value {
    let tasks: Vec<Value> = summary.tasks.iter().map(report_value).collect();
    let c = Counts::of(summary);
    let totals = json!({
        "tasks": summary.tasks.len(),
        "succeeded": c.succeeded,
        "failed": c.failed,
        "skipped": c.skipped,
        "aborted": c.aborted,
        "ran": c.ran,
        "hits": c.hits,
        "misses": c.misses,
        "saved_ms": c.saved_ms,
        "verdicts_failed": summary.tasks.iter().flat_map(|t| &t.verdicts).filter(|v| v.fails()).count(),
    });
    json!({
        "v": SCHEMA_VERSION,
        "run_id": meta.run_id,
        "ts": timestamp(at),
        "event": "summary",
        "command": command,
        "summary": {
            "ok": summary.ok,
            "interrupted": summary.interrupted,
            "wall_ms": summary.wall_ms,
            "tasks": tasks,
            "totals": totals,
        },
        "keys": keys,
    })
}

/// A task report as the contract shows it.
pub fn report_value(r: &TaskReport) -> Value {
    let mut v = match serde_json::to_value(r) {
        Ok(Value::Object(m)) => m,
        _ => Map::new(),
    };
    v.insert("exit".into(), exit_value(r.exit.as_ref()));
    Value::Object(v)
}

/// The one `exit` shape.
pub fn exit_value(exit: Option<&ExitKind>) -> Value {
    match exit {
        None => Value::Null,
        Some(ExitKind::Code(c)) => json!({ "code": c }),
        Some(ExitKind::Signal(s)) => json!({ "signal": signal_name(*s) }),
        Some(ExitKind::TimedOut) => json!({ "timed_out": true }),
        Some(ExitKind::Aborted) => json!({ "aborted": true }),
        Some(ExitKind::SpawnFailed(why)) => json!({ "spawn_failed": why }),
    }
}

/// `SIGKILL` for 9; a number without a name as `SIG<n>`.
fn signal_name(n: i32) -> String {
    match nix::sys::signal::Signal::try_from(n) {
        Ok(s) => s.as_str().to_owned(),
        Err(_) => format!("SIG{n}"),
    }
}

/// `{"v":1,"run_id":…,"ts":…,"event":…, <body>}`: the shared fields first, for a reader.
fn line(meta: &RunMeta, at: SystemTime, kind: Value, body: Map<String, Value>) -> String {
    let head = json!({ "v": SCHEMA_VERSION, "run_id": meta.run_id, "ts": timestamp(at) });
    // `json!` objects keep sorted keys; the head is written by hand so `v` leads.
    let mut s = format!(
        "{{\"v\":{},\"run_id\":{},\"ts\":{},\"event\":{}",
        head["v"], head["run_id"], head["ts"], kind
    );
    for (k, v) in body {
        s.push(',');
        s.push_str(&Value::String(k).to_string());
        s.push(':');
        s.push_str(&v.to_string());
    }
    s.push('}');
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use prova_protocol::TaskId;
    use prova_protocol::events::CacheStatus;
    use prova_protocol::spec::ExecStats;

    fn report(exit: Option<ExitKind>) -> TaskReport {
        TaskReport {
            task: TaskId::new("web", "build"),
            status: TaskStatus::Failed,
            cache: CacheStatus::Uncached,
            exit,
            attempts: 1,
            stats: ExecStats::default(),
            key: None,
            worker: None,
            note: None,
            verdicts: vec![],
        }
    }

    #[test]
    fn every_exit_has_one_snake_case_shape() {
        let cases = [
            (None, json!(null)),
            (Some(ExitKind::Code(3)), json!({"code": 3})),
            (Some(ExitKind::Signal(9)), json!({"signal": "SIGKILL"})),
            (Some(ExitKind::Signal(200)), json!({"signal": "SIG200"})),
            (Some(ExitKind::TimedOut), json!({"timed_out": true})),
            (Some(ExitKind::Aborted), json!({"aborted": true})),
            (Some(ExitKind::SpawnFailed("no sh".into())), json!({"spawn_failed": "no sh"})),
        ];
        for (exit, want) in cases {
            assert_eq!(exit_value(exit.as_ref()), want);
            let meta = RunMeta { run_id: "r1-0".into() };
            let ev = RunEvent::TaskFinished(report(exit));
            let v: Value = serde_json::from_str(&event_line(&meta, SystemTime::UNIX_EPOCH, &ev))
                .expect("a JSON line");
            assert_eq!(v["exit"], want);
            assert_eq!(v["v"], 1);
            assert_eq!(v["run_id"], "r1-0");
            assert_eq!(v["ts"], "1970-01-01T00:00:00.000Z");
            assert_eq!(v["event"], "task_finished");
        }
    }

    #[test]
    fn run_ids_differ_and_sort_by_start() {
        let a = run_id(SystemTime::UNIX_EPOCH + std::time::Duration::from_millis(1_000));
        let b = run_id(SystemTime::UNIX_EPOCH + std::time::Duration::from_millis(1_001));
        assert_ne!(a, b);
        assert!(a.starts_with("r1000-") && b.starts_with("r1001-"), "{a} {b}");
    }
}
