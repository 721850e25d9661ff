//! The renderer's choices per `--output-logs` mode, on hand-made event sequences in the
//! order the run emits them (a hit: its log, then its finish; an execution: start, output,
//! finish). End to end on the binary: tests/tests/output.rs.

use prova_protocol::events::{CacheStatus, RunEvent, TaskReport, TaskStatus};
use prova_protocol::spec::{ExecStats, ExitKind};
use prova_protocol::{Digest, TaskId, WorkerId};

use super::{Renderer, Style, json::RunMeta};
use crate::args::{OutputLogs, OutputMode};

fn report(task: &TaskId, status: TaskStatus, cache: CacheStatus) -> TaskReport {
    let ran = !matches!(cache, CacheStatus::Hit { .. });
    TaskReport {
        task: task.clone(),
        status,
        cache,
        exit: ran.then_some(ExitKind::Code(i32::from(status == TaskStatus::Failed))),
        attempts: u32::from(ran),
        stats: ExecStats::default(),
        key: Some(Digest::of(task.as_str().as_bytes())),
        worker: ran.then(WorkerId::local),
        note: (status == TaskStatus::Failed).then(|| "exit code 1".to_owned()),
        verdicts: vec![],
    }
}

/// A hit `h` (log `from-cache`), a success `ok` (`fresh`) and a failure `bad` (`broken`).
fn events() -> Vec<RunEvent> {
    let (h, ok, bad) =
        (TaskId::new("h", "build"), TaskId::new("ok", "build"), TaskId::new("bad", "build"));
    let hit = CacheStatus::Hit { layer: "local".into(), saved_ms: 5, cutoff: false };
    let started = |t: &TaskId| RunEvent::TaskStarted {
        task: t.clone(),
        attempt: 1,
        worker: WorkerId::local(),
    };
    let out =
        |t: &TaskId, s: &str| RunEvent::Output { task: t.clone(), text: s.as_bytes().to_vec() };
    vec![
        out(&h, "from-cache\n"),
        RunEvent::TaskFinished(report(&h, TaskStatus::Succeeded, hit)),
        started(&ok),
        started(&bad),
        out(&ok, "fresh\n"),
        out(&bad, "broken\n"),
        RunEvent::TaskFinished(report(&ok, TaskStatus::Succeeded, CacheStatus::Saved)),
        RunEvent::TaskFinished(report(
            &bad,
            TaskStatus::Failed,
            CacheStatus::NotSaved { reason: "exit code 1".into() },
        )),
        // Verdicts follow their task's finish (run/verify.rs `send_finished`).
        RunEvent::Verdict {
            task: ok.clone(),
            verdict: prova_protocol::events::Verdict::ProvenComplete,
        },
    ]
}

fn render(mode: OutputMode, logs: OutputLogs, json: bool) -> String {
    let style = Style { mode, json, color: false, logs };
    let mut r = Renderer::new(Vec::new(), style, RunMeta { run_id: "r1-0".into() });
    for ev in events() {
        r.event(&ev).expect("rendered");
    }
    String::from_utf8(r.finish().expect("flushed")).expect("utf-8")
}

#[test]
fn each_mode_shows_what_turbo_users_expect() {
    let full = render(OutputMode::Prefixed, OutputLogs::Full, false);
    assert!(
        full.contains("h#build | cache hit (local), replaying logs\nh#build | from-cache\n"),
        "{full}"
    );
    assert!(full.contains("ok#build | fresh\n") && full.contains("bad#build | broken\n"), "{full}");

    let new = render(OutputMode::Prefixed, OutputLogs::NewOnly, false);
    assert!(new.contains("cache hit (local), suppressing logs"), "{new}");
    assert!(!new.contains("from-cache"), "{new}");
    assert!(new.contains("fresh") && new.contains("broken"), "{new}");

    let errors = render(OutputMode::Prefixed, OutputLogs::ErrorsOnly, false);
    assert!(!errors.contains("from-cache") && !errors.contains("fresh"), "{errors}");
    assert!(!errors.contains("cache hit"), "{errors}");
    assert!(errors.contains("bad#build | broken\nbad#build | failed: exit code 1\n"), "{errors}");

    let hash = render(OutputMode::Prefixed, OutputLogs::HashOnly, false);
    let h = Digest::of(b"h#build").short();
    let ok = Digest::of(b"ok#build").short();
    assert!(
        hash.contains(&format!("h#build | cache hit (local), suppressing logs {h}\n")),
        "{hash}"
    );
    assert!(hash.contains(&format!("ok#build | cache miss, executed {ok}\n")), "{hash}");
    assert!(
        !hash.contains("from-cache") && !hash.contains("fresh") && !hash.contains("broken"),
        "{hash}"
    );

    for quiet in [OutputLogs::Full, OutputLogs::ErrorsOnly, OutputLogs::None] {
        let text = render(OutputMode::Prefixed, quiet, false);
        let last = text.lines().last().unwrap_or_default();
        let (prefix, line) = last.split_once(" | ").unwrap_or_default();
        assert_eq!(
            (prefix.trim_end(), line),
            ("ok#build", "verify: inputs proven complete"),
            "{quiet:?}: {text}"
        );
    }
    let none = render(OutputMode::Prefixed, OutputLogs::None, false);
    assert_eq!(none, "ok#build | verify: inputs proven complete\n", "nothing but the proof");
}

#[test]
fn grouped_blocks_follow_the_mode_too() {
    let full = render(OutputMode::Grouped, OutputLogs::Full, false);
    assert!(full.contains("── h#build\ncache hit (local), replaying logs\nfrom-cache\n"), "{full}");
    assert!(full.contains("── ok#build\nfresh\n"), "{full}");
    let errors = render(OutputMode::Grouped, OutputLogs::ErrorsOnly, false);
    assert!(!errors.contains("── h#build") && !errors.contains("── ok#build"), "{errors}");
    assert!(errors.contains("── bad#build\nbroken\n"), "{errors}");
}

#[test]
fn a_hit_gets_a_start_before_its_log_in_json() {
    let text = render(OutputMode::Prefixed, OutputLogs::Full, true);
    let lines: Vec<serde_json::Value> =
        text.lines().map(|l| serde_json::from_str(l).expect("JSON")).collect();
    let of = |task: &str| -> Vec<String> {
        lines
            .iter()
            .filter(|e| e["task"] == task)
            .map(|e| e["event"].as_str().unwrap_or_default().to_owned())
            .collect()
    };
    assert_eq!(of("h#build"), ["task_started", "output", "task_finished"], "{text}");
    assert_eq!(of("ok#build"), ["task_started", "output", "task_finished", "verdict"], "{text}");
    let start = lines.iter().find(|e| e["task"] == "h#build").expect("a start");
    assert_eq!(start["hit"], true, "{start}");
    assert_eq!(start["attempt"], 0, "{start}");
    let start = lines.iter().find(|e| e["task"] == "ok#build").expect("a start");
    assert_eq!(start["hit"], false, "{start}");
    for l in &lines {
        assert_eq!(l["v"], 1, "{l}");
        assert_eq!(l["run_id"], "r1-0", "{l}");
    }
    // `new-only` drops the replayed log from the stream as well, not the pair.
    let quiet = render(OutputMode::Prefixed, OutputLogs::NewOnly, true);
    let hit_events: Vec<&str> = quiet.lines().filter(|l| l.contains("\"h#build\"")).collect();
    assert_eq!(hit_events.len(), 2, "{quiet}");
    assert!(!quiet.contains("from-cache"), "{quiet}");
}
