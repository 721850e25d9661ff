//! The end-of-run summary: counts, cache meter, time, slowest tasks, failures.

use std::fmt::Write as _;

use prova_protocol::events::{CacheStatus, RunSummary, TaskStatus};

/// Counts of a run, from its reports.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// Succeeded (executed or restored).
    pub succeeded: usize,
    /// Failed.
    pub failed: usize,
    /// Skipped.
    pub skipped: usize,
    /// Aborted.
    pub aborted: usize,
    /// Executed (at least one attempt).
    pub ran: usize,
    /// Cache hits.
    pub hits: usize,
    /// Executed cacheable tasks (misses).
    pub misses: usize,
    /// Milliseconds of execution the hits saved.
    pub saved_ms: u64,
    /// Hits after an upstream re-ran with identical output bytes (early cutoff).
    pub cutoff: usize,
}

impl Counts {
    /// Tallies a summary.
    pub fn of(s: &RunSummary) -> Self {
        let mut c = Self::default();
        for t in &s.tasks {
            match t.status {
                TaskStatus::Succeeded => c.succeeded += 1,
                TaskStatus::Failed => c.failed += 1,
                TaskStatus::Skipped => c.skipped += 1,
                TaskStatus::Aborted => c.aborted += 1,
            }
            if t.attempts > 0 {
                c.ran += 1;
            }
            match &t.cache {
                CacheStatus::Hit { saved_ms, cutoff, .. } => {
                    c.hits += 1;
                    c.saved_ms += saved_ms;
                    c.cutoff += usize::from(*cutoff);
                }
                CacheStatus::Saved | CacheStatus::NotSaved { .. } => c.misses += 1,
                CacheStatus::Uncached => {}
            }
        }
        c
    }
}

/// The human summary.
pub fn text(s: &RunSummary) -> String {
    let c = Counts::of(s);
    let mut out = String::new();
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        " Tasks:   {} succeeded, {} failed, {} skipped, {} aborted ({} total, {} ran)",
        c.succeeded,
        c.failed,
        c.skipped,
        c.aborted,
        s.tasks.len(),
        c.ran
    );
    if c.hits + c.misses > 0 {
        let _ = writeln!(
            out,
            " Cache:   {} hit, {} miss ({}% hit), {} saved",
            c.hits,
            c.misses,
            100 * c.hits / (c.hits + c.misses).max(1),
            fmt_ms(c.saved_ms)
        );
    }
    if c.cutoff > 0 {
        let _ = writeln!(
            out,
            "          {} of the hits after an upstream re-ran with identical bytes",
            c.cutoff
        );
    }
    verify_section(s, &mut out);
    let _ = writeln!(
        out,
        " Time:    {}{}",
        fmt_ms(s.wall_ms),
        if s.interrupted { " (interrupted)" } else { "" }
    );
    let mut ran: Vec<_> = s.tasks.iter().filter(|t| t.attempts > 0).collect();
    ran.sort_by(|a, b| b.stats.wall_ms.cmp(&a.stats.wall_ms).then_with(|| a.task.cmp(&b.task)));
    if ran.len() > 1 {
        let slow: Vec<String> =
            ran.iter().take(3).map(|t| format!("{} {}", t.task, fmt_ms(t.stats.wall_ms))).collect();
        let _ = writeln!(out, " Slowest: {}", slow.join(", "));
    }
    for t in s.tasks.iter().filter(|t| t.status == TaskStatus::Failed) {
        let _ = writeln!(out, " Failed:  {} ({})", t.task, t.note.as_deref().unwrap_or("failed"));
    }
    out
}

/// `1.23s`, `45ms`, `2m03s`.
pub fn fmt_ms(ms: u64) -> String {
    if ms < 1000 {
        format!("{ms}ms")
    } else if ms < 60_000 {
        format!("{:.2}s", ms as f64 / 1000.0)
    } else {
        format!("{}m{:02}s", ms / 60_000, (ms % 60_000) / 1000)
    }
}

/// ` Verify:  12 proven · 1 nondeterministic · 3 n/a · 40 not-verified`, then each failing
/// proof by task.
fn verify_section(s: &RunSummary, out: &mut String) {
    let mut counts: std::collections::BTreeMap<&'static str, usize> =
        std::collections::BTreeMap::new();
    let mut any = false;
    for t in &s.tasks {
        for v in &t.verdicts {
            any = true;
            *counts.entry(v.name()).or_default() += 1;
        }
    }
    if !any {
        return;
    }
    let order = [
        ("proven-deterministic", "proven deterministic"),
        ("proven-complete", "inputs complete"),
        ("nondeterministic", "nondeterministic"),
        ("rerun-failed", "re-run failed"),
        ("undeclared-inputs", "undeclared inputs"),
        ("undeclared-outputs", "undeclared outputs"),
        ("sandbox-failed", "failed in the sandbox"),
        ("allowed-nondeterministic", "allowed nondeterministic"),
        ("no-outputs", "no outputs"),
        ("exempt", "exempt"),
        ("not-sampled", "not sampled"),
        ("not-verified", "not verified"),
    ];
    let parts: Vec<String> = order
        .iter()
        .filter_map(|(k, label)| counts.get(k).map(|n| format!("{n} {label}")))
        .collect();
    let unsampled = counts.get("not-sampled").copied().unwrap_or(0);
    let sample = if unsampled > 0 { sampled(s) } else { String::new() };
    let _ = writeln!(out, " Verify:  {}{sample}", parts.join(" · "));
    for t in &s.tasks {
        for v in t.verdicts.iter().filter(|v| v.fails()) {
            let _ = writeln!(out, "   ✗ {} — {}: {}", t.task, v.name(), failure_detail(v));
        }
    }
}

/// A sampled run says how many of the tasks it could prove it chose: every task with a
/// proof verdict or `not-sampled` was a candidate.
fn sampled(s: &RunSummary) -> String {
    use prova_protocol::events::Verdict;
    let candidates = s
        .tasks
        .iter()
        .filter(|t| {
            t.verdicts.iter().any(|v| {
                !matches!(
                    v,
                    Verdict::NotVerified { .. } | Verdict::Exempt { .. } | Verdict::NoOutputs
                )
            })
        })
        .count();
    let unsampled_tasks = s
        .tasks
        .iter()
        .filter(|t| t.verdicts.iter().any(|v| matches!(v, Verdict::NotSampled { .. })))
        .count();
    format!(" ({} of {candidates} sampled)", candidates - unsampled_tasks)
}

/// A failed proof's one-line detail in the summary.
fn failure_detail(v: &prova_protocol::events::Verdict) -> String {
    use prova_protocol::events::Verdict;
    match v {
        Verdict::Nondeterministic(d) => {
            let mut all: Vec<&str> =
                d.changed.iter().chain(&d.added).chain(&d.removed).map(String::as_str).collect();
            all.extend(d.modes.iter().map(|m| m.path.as_str()));
            all.dedup();
            all.truncate(5);
            format!("changed: {}", all.join(", "))
        }
        Verdict::RerunFailed { reason, .. } => {
            format!("the re-run failed under its perturbations ({reason})")
        }
        Verdict::UndeclaredInputs { paths, traced: true, more, .. } => first_paths(paths, *more),
        Verdict::UndeclaredOutputs { paths, more } => first_paths(paths, *more),
        Verdict::SandboxFailed { reason, .. } => {
            format!("fails with only its declared inputs visible ({reason})")
        }
        Verdict::UndeclaredInputs { traced: false, .. } => {
            "an undeclared input was read, install strace for the paths".to_owned()
        }
        _ => String::new(),
    }
}

/// The first five of `paths`, then "and N more" (`more`: paths beyond `paths`).
fn first_paths(paths: &[String], more: usize) -> String {
    let shown: Vec<&str> = paths.iter().take(5).map(String::as_str).collect();
    let hidden = more + paths.len().saturating_sub(shown.len());
    let mut s = shown.join(", ");
    if hidden > 0 {
        s.push_str(&format!(" and {hidden} more"));
    }
    s
}
