//! Turning run events into output: prefixed lines, grouped blocks, or JSON lines; the live
//! progress line on a terminal ([`progress`]); and the end-of-run summary from the same data.

pub mod progress;
pub mod summary;

use std::collections::HashMap;
use std::io::{self, IsTerminal, Write};

use prova_protocol::TaskId;
use prova_protocol::events::{CacheStatus, NoticeLevel, RunEvent, TaskStatus, Verdict};

use crate::args::OutputMode;

/// How events are shown.
#[derive(Clone, Copy, Debug)]
pub struct Style {
    /// Prefixed or grouped.
    pub mode: OutputMode,
    /// JSON lines instead of text.
    pub json: bool,
    /// ANSI colours.
    pub color: bool,
}

impl Style {
    /// The style for a terminal or a pipe.
    pub fn new(mode: OutputMode, json: bool) -> Self {
        let color = !json && io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none();
        Self { mode, json, color }
    }
}

/// Renders events to a writer as they arrive.
pub struct Renderer<W: Write> {
    out: W,
    style: Style,
    /// Grouped mode: output held until the task finishes.
    held: HashMap<TaskId, Vec<u8>>,
    /// Prefixed mode: width of the widest prefix seen, for alignment.
    width: usize,
}

const PALETTE: [&str; 6] = ["36", "33", "32", "35", "34", "96"];

impl<W: Write> Renderer<W> {
    /// A renderer writing to `out`.
    pub fn new(out: W, style: Style) -> Self {
        Self { out, style, held: HashMap::new(), width: 0 }
    }

    /// Renders one event. A closed pipe is not an error worth stopping the run for.
    pub fn event(&mut self, ev: &RunEvent) -> io::Result<()> {
        if self.style.json {
            serde_json::to_writer(&mut self.out, ev)?;
            return self.out.write_all(b"\n");
        }
        match ev {
            RunEvent::TaskStarted { task, attempt, .. } => {
                if *attempt > 1 {
                    let line = format!("retrying (attempt {attempt})\n");
                    self.lines(task, line.as_bytes())?;
                }
            }
            RunEvent::Output { task, text } => match self.style.mode {
                OutputMode::Prefixed => self.lines(task, text)?,
                OutputMode::Grouped => {
                    self.held.entry(task.clone()).or_default().extend_from_slice(text)
                }
            },
            RunEvent::TaskReady { task } => self.lines(task, b"ready\n")?,
            RunEvent::TaskFinished(r) => {
                if let Some(held) = self.held.remove(&r.task) {
                    let header =
                        format!("{} {}\n", self.paint("1", "──"), self.paint("1", r.task.as_str()));
                    self.out.write_all(header.as_bytes())?;
                    self.out.write_all(&held)?;
                    if !held.ends_with(b"\n") && !held.is_empty() {
                        self.out.write_all(b"\n")?;
                    }
                }
                let line = match (r.status, &r.cache) {
                    (TaskStatus::Failed, _) => Some(
                        self.paint("31", &format!("failed: {}", r.note.as_deref().unwrap_or(""))),
                    ),
                    (TaskStatus::Aborted, _) => Some(self.paint("33", "aborted")),
                    (TaskStatus::Succeeded, CacheStatus::NotSaved { reason }) => {
                        Some(self.paint("33", &format!("not cached: {reason}")))
                    }
                    _ => None,
                };
                if let Some(line) = line {
                    self.lines(&r.task, format!("{line}\n").as_bytes())?;
                }
            }
            RunEvent::Verdict { task, verdict } => {
                if let Some(text) = verdict_lines(verdict, self.style.color) {
                    self.lines(task, text.as_bytes())?;
                }
            }
            RunEvent::Notice { task, level, message } => {
                let tag = match level {
                    NoticeLevel::Info => self.paint("2", "note"),
                    NoticeLevel::Warn => self.paint("33", "warning"),
                };
                match task {
                    Some(t) => self.lines(t, format!("{tag}: {message}\n").as_bytes())?,
                    None => writeln!(self.out, "{tag}: {message}")?,
                }
            }
        }
        Ok(())
    }

    /// Writes `text` line by line with the task's prefix.
    fn lines(&mut self, task: &TaskId, text: &[u8]) -> io::Result<()> {
        self.width = self.width.max(task.as_str().len()).min(40);
        let prefix = format!("{:<w$}", task.as_str(), w = self.width);
        // A fast non-cryptographic hash is right here: a colour, chosen by nobody's input
        // that matters, never a key.
        let colour = PALETTE[(xxhash_rust::xxh3::xxh3_64(task.as_str().as_bytes())
            % PALETTE.len() as u64) as usize];
        let prefix = self.paint(colour, &prefix);
        for line in text.split_inclusive(|&b| b == b'\n') {
            self.out.write_all(prefix.as_bytes())?;
            self.out.write_all(b" | ")?;
            self.out.write_all(line)?;
            if !line.ends_with(b"\n") {
                self.out.write_all(b"\n")?;
            }
        }
        Ok(())
    }

    fn paint(&self, code: &str, s: &str) -> String {
        if self.style.color { format!("\x1b[{code}m{s}\x1b[0m") } else { s.to_owned() }
    }

    /// Flushes and returns the writer.
    pub fn finish(mut self) -> io::Result<W> {
        self.out.flush()?;
        Ok(self.out)
    }

    /// The style in use.
    pub fn style(&self) -> Style {
        self.style
    }
}

impl Renderer<Vec<u8>> {
    /// What the events so far rendered, taken out (the buffer is left empty): for a caller
    /// that writes it itself, e.g. around the progress line.
    pub fn take(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.out)
    }
}

/// How a verdict reads in the stream (`None`: not worth a line, e.g. a hit not verified).
pub fn verdict_lines(v: &Verdict, color: bool) -> Option<String> {
    let paint =
        |code: &str, s: &str| if color { format!("\x1b[{code}m{s}\x1b[0m") } else { s.to_owned() };
    let text = match v {
        Verdict::ProvenDeterministic { rerun_worker, single_machine, perturbations, ignored } => {
            let where_ = match (rerun_worker, single_machine) {
                (_, true) => "single machine".to_owned(),
                (Some(w), false) => format!("re-run on {w}"),
                (None, false) => "re-run elsewhere".to_owned(),
            };
            let mut s = format!("{} ({where_})\n", paint("32", "verify: proven deterministic"));
            push_ignored(&mut s, ignored);
            push_perturbations(&mut s, perturbations);
            s
        }
        Verdict::Nondeterministic(d) | Verdict::AllowedNondeterministic(d) => {
            let allowed = matches!(v, Verdict::AllowedNondeterministic(_));
            let head = if allowed {
                paint("33", "verify: nondeterministic (allowed by --verify-allow)")
            } else {
                paint("31", "verify: NONDETERMINISTIC: the cache would replay one arbitrary output")
            };
            let mut s = format!("{head}\n");
            for (what, list) in
                [("changed", &d.changed), ("added", &d.added), ("removed", &d.removed)]
            {
                if !list.is_empty() {
                    s.push_str(&format!("  {what}: {}\n", list.join(", ")));
                }
            }
            for f in &d.files {
                match &f.diff {
                    Some(diff) => {
                        for line in diff.lines() {
                            s.push_str(&format!("    {line}\n"));
                        }
                    }
                    None => s.push_str(&format!(
                        "    {}: {} → {} bytes, {} → {}\n",
                        f.path,
                        f.sizes.0,
                        f.sizes.1,
                        f.digests.0.map_or_else(|| "-".to_owned(), |d| d.short()),
                        f.digests.1.map_or_else(|| "-".to_owned(), |d| d.short())
                    )),
                }
            }
            for m in &d.modes {
                s.push_str(&format!("  mode: {} {:04o} → {:04o}\n", m.path, m.modes.0, m.modes.1));
            }
            if d.single_machine {
                s.push_str("  (re-run on the same machine)\n");
            }
            push_ignored(&mut s, &d.ignored);
            push_perturbations(&mut s, &d.perturbations);
            s
        }
        Verdict::RerunFailed { reason, log_tail, perturbations } => {
            let mut s = format!(
                "{} ({reason})\n",
                paint("31", "verify: the re-run FAILED under its perturbations")
            );
            s.push_str(
                "  the first run succeeded: the task depends on something the re-run changed\n",
            );
            push_perturbations(&mut s, perturbations);
            push_failure(&mut s, None, log_tail);
            s
        }
        Verdict::UndeclaredInputs { paths, traced: true, more, failed, log_tail, suggest } => {
            let mut s = format!("{}\n", paint("31", "verify: read undeclared inputs:"));
            for p in paths {
                s.push_str(&format!("  {p}\n"));
            }
            if *more > 0 {
                s.push_str(&format!("  and {more} more\n"));
            }
            if paths.iter().any(|p| p.ends_with('/')) {
                s.push_str("  (a path ending in `/` is a directory the task listed: declare its entries, e.g. `dir/*`)\n");
            }
            if suggest.is_empty() {
                s.push_str("  add them to the task's inputs\n");
            } else {
                let quoted: Vec<String> = suggest.iter().map(|g| format!("{g:?}")).collect();
                s.push_str(&format!("  add to inputs: {}\n", quoted.join(", ")));
            }
            push_failure(&mut s, failed.as_deref(), log_tail);
            s
        }
        Verdict::UndeclaredOutputs { paths, more } => {
            let mut s = format!("{}\n", paint("31", "verify: wrote outside its declared outputs:"));
            for p in paths {
                s.push_str(&format!("  {p}\n"));
            }
            if *more > 0 {
                s.push_str(&format!("  and {more} more\n"));
            }
            s.push_str("  declare them in outputs (a cache hit would not restore them), or stop writing them\n");
            s
        }
        Verdict::UndeclaredInputs { traced: false, failed, log_tail, .. } => {
            let mut s = format!(
                "{}\n",
                paint("31", "verify: an undeclared input was read, install strace for the paths")
            );
            push_failure(&mut s, failed.as_deref(), log_tail);
            s
        }
        Verdict::SandboxFailed { reason, traced, log_tail } => {
            let head = format!("verify: FAILS with only its declared inputs visible ({reason})");
            let mut s = format!("{}\n", paint("31", &head));
            s.push_str(if *traced {
                "  no undeclared workspace path could be named: it may need a file outside the workspace, the network or the environment\n"
            } else {
                "  the trace could not be read, so no path can be named\n"
            });
            push_failure(&mut s, None, log_tail);
            s
        }
        Verdict::ProvenComplete => format!("{}\n", paint("32", "verify: inputs proven complete")),
        Verdict::NoOutputs => "verify: no outputs (nothing to replay but the log)\n".to_owned(),
        Verdict::NotVerified { .. } | Verdict::NotSampled { .. } => return None,
        Verdict::Exempt { reason } => format!("verify: exempt ({reason})\n"),
    };
    Some(text)
}

/// The outputs `verify_ignore` left out of a comparison, under its verdict.
fn push_ignored(s: &mut String, ignored: &[String]) {
    if !ignored.is_empty() {
        s.push_str(&format!("  not compared (verify_ignore): {}\n", ignored.join(", ")));
    }
}

/// What a re-run changed (and could not), under its verdict.
fn push_perturbations(s: &mut String, p: &prova_protocol::events::Perturbations) {
    if !p.applied.is_empty() {
        s.push_str(&format!("  perturbed: {}\n", p.describe_applied()));
    }
    for n in &p.not_applied {
        s.push_str(&format!("  not perturbed: {} ({})\n", n.what, n.detail));
    }
}

/// How a sandboxed run failed and its log's last lines, under a verdict.
fn push_failure(s: &mut String, failed: Option<&str>, log_tail: &[String]) {
    if let Some(how) = failed {
        s.push_str(&format!("  the sandboxed run failed ({how})\n"));
    }
    if !log_tail.is_empty() {
        s.push_str("  last lines of its log:\n");
        for l in log_tail {
            s.push_str(&format!("  | {l}\n"));
        }
    }
}

/// `1 task`, `2 tasks`.
pub fn plural(n: usize, noun: &str) -> String {
    if n == 1 { format!("1 {noun}") } else { format!("{n} {noun}s") }
}
