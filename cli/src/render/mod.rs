//! Turning run events into output: prefixed lines, grouped blocks, or JSON lines
//! ([`json`]: the versioned event contract); which task output is shown (`--output-logs`);
//! the live progress line on a terminal ([`progress`]); the end-of-run summary from the same
//! data ([`summary`]); the run's timeline and its Chrome trace ([`trace`]).
//!
//! A cache hit arrives as its replayed log (`Output`) then its `TaskFinished`, with no
//! `TaskStarted`: events of a task not started yet are held until it starts or finishes, so
//! a hit is shown as one unit — its marker line (`cache hit (local), replaying logs`) or, in
//! JSON, a `task_started` with `hit: true` — and its log is shown or dropped as a whole.

pub mod json;
pub mod progress;
pub mod summary;
pub mod trace;
mod verdicts;

use std::collections::{HashMap, HashSet};
use std::io::{self, Write};
use std::time::SystemTime;

use prova_protocol::TaskId;
use prova_protocol::events::{CacheStatus, NoticeLevel, RunEvent, TaskReport, TaskStatus};

pub use verdicts::verdict_lines;

use crate::args::{OutputLogs, OutputMode};

/// How events are shown.
#[derive(Clone, Copy, Debug)]
pub struct Style {
    /// Prefixed or grouped.
    pub mode: OutputMode,
    /// JSON lines instead of text.
    pub json: bool,
    /// ANSI colours.
    pub color: bool,
    /// Which task output is shown.
    pub logs: OutputLogs,
}

/// An event and when it was received.
type Stamped = (SystemTime, RunEvent);

/// Renders events to a writer as they arrive.
pub struct Renderer<W: Write> {
    out: W,
    style: Style,
    meta: json::RunMeta,
    /// Tasks whose `TaskStarted` or `TaskFinished` came (verdicts follow a finish).
    seen: HashSet<TaskId>,
    /// Events of tasks not started yet (a hit's replayed log), until they start or finish.
    pending: HashMap<TaskId, Vec<Stamped>>,
    /// Output held until the task finishes (grouped mode, `errors-only`).
    held: HashMap<TaskId, Vec<Stamped>>,
    /// Prefixed mode: width of the widest prefix seen, for alignment.
    width: usize,
}

const PALETTE: [&str; 6] = ["36", "33", "32", "35", "34", "96"];

impl<W: Write> Renderer<W> {
    /// A renderer writing to `out`; JSON lines carry `meta`'s run id.
    pub fn new(out: W, style: Style, meta: json::RunMeta) -> Self {
        Self {
            out,
            style,
            meta,
            seen: HashSet::new(),
            pending: HashMap::new(),
            held: HashMap::new(),
            width: 0,
        }
    }

    /// Renders one event, received now.
    pub fn event(&mut self, ev: &RunEvent) -> io::Result<()> {
        self.event_at(SystemTime::now(), ev)
    }

    /// Renders one event received `at`.
    pub fn event_at(&mut self, at: SystemTime, ev: &RunEvent) -> io::Result<()> {
        match ev {
            RunEvent::TaskStarted { task, .. } => {
                let first = self.seen.insert(task.clone());
                self.emit(at, ev)?;
                if first {
                    for (at, ev) in self.pending.remove(task).unwrap_or_default() {
                        self.event_at(at, &ev)?;
                    }
                }
                Ok(())
            }
            RunEvent::Output { task, .. } | RunEvent::Verdict { task, .. }
                if !self.seen.contains(task) =>
            {
                self.pending.entry(task.clone()).or_default().push((at, ev.clone()));
                Ok(())
            }
            RunEvent::Output { task, .. } => match self.style.logs {
                OutputLogs::Full | OutputLogs::NewOnly
                    if self.style.json || self.style.mode == OutputMode::Prefixed =>
                {
                    self.emit(at, ev)
                }
                OutputLogs::Full | OutputLogs::NewOnly | OutputLogs::ErrorsOnly => {
                    self.held.entry(task.clone()).or_default().push((at, ev.clone()));
                    Ok(())
                }
                OutputLogs::HashOnly | OutputLogs::None => Ok(()),
            },
            RunEvent::TaskFinished(r) => self.finished(at, r, ev),
            _ => self.emit(at, ev),
        }
    }

    /// A task's end: its start if none came (a hit, a group), what was held, the finish.
    fn finished(&mut self, at: SystemTime, r: &TaskReport, ev: &RunEvent) -> io::Result<()> {
        let was_started = !self.seen.insert(r.task.clone());
        let pending = self.pending.remove(&r.task).unwrap_or_default();
        let hit = matches!(r.cache, CacheStatus::Hit { .. });
        let mut block: Vec<Stamped> = self.held.remove(&r.task).unwrap_or_default();
        let show_held = match self.style.logs {
            OutputLogs::Full | OutputLogs::NewOnly => true,
            OutputLogs::ErrorsOnly => r.status == TaskStatus::Failed,
            OutputLogs::HashOnly | OutputLogs::None => false,
        };
        if !show_held {
            block.clear();
        }
        // What came before a start that never came: a hit's replayed log is shown only in
        // `full`; verdicts always.
        let replay = !hit || self.style.logs == OutputLogs::Full;
        let mut verdicts = Vec::new();
        for (t, e) in pending {
            match e {
                RunEvent::Output { .. } if replay && show_held => block.push((t, e)),
                RunEvent::Output { .. } => {}
                other => verdicts.push((t, other)),
            }
        }
        if self.style.json {
            if !was_started && json::needs_start(r) {
                let line = json::started_without_execution(&self.meta, at, r);
                writeln!(self.out, "{line}")?;
            }
            for (t, e) in block.iter().chain(&verdicts) {
                self.emit(*t, e)?;
            }
            return self.emit(at, ev);
        }
        let mut text: Vec<u8> = Vec::new();
        if let Some(marker) = self.marker(r) {
            text.extend_from_slice(marker.as_bytes());
        }
        for (_, e) in &block {
            if let RunEvent::Output { text: t, .. } = e {
                text.extend_from_slice(t);
                if !t.ends_with(b"\n") && !t.is_empty() {
                    text.push(b'\n');
                }
            }
        }
        if self.style.mode == OutputMode::Grouped && !text.is_empty() {
            let header =
                format!("{} {}\n", self.paint("1", "──"), self.paint("1", r.task.as_str()));
            self.out.write_all(header.as_bytes())?;
            self.out.write_all(&text)?;
        } else if !text.is_empty() {
            self.lines(&r.task, &text)?;
        }
        for (t, e) in &verdicts {
            self.emit(*t, e)?;
        }
        self.emit(at, ev)
    }

    /// The line a task's output starts with: a hit's marker (or, `hash-only`, each task's
    /// key and outcome).
    fn marker(&self, r: &TaskReport) -> Option<String> {
        let key = r.key.map(|k| k.short());
        let line = match (&r.cache, self.style.logs) {
            (_, OutputLogs::None | OutputLogs::ErrorsOnly) => return None,
            (CacheStatus::Hit { layer, .. }, OutputLogs::Full) => {
                format!("cache hit ({layer}), replaying logs")
            }
            (CacheStatus::Hit { layer, .. }, OutputLogs::NewOnly) => {
                format!("cache hit ({layer}), suppressing logs")
            }
            (CacheStatus::Hit { layer, .. }, OutputLogs::HashOnly) => {
                format!("cache hit ({layer}), suppressing logs {}", key.unwrap_or_default())
            }
            (_, OutputLogs::HashOnly) if r.attempts > 0 => match key {
                Some(k) => format!("cache miss, executed {k}"),
                None => "executed (not cached)".to_owned(),
            },
            _ => return None,
        };
        Some(format!("{}\n", self.paint("2", &line)))
    }

    /// Writes one event in the style (JSON line or text).
    fn emit(&mut self, at: SystemTime, ev: &RunEvent) -> io::Result<()> {
        if self.style.json {
            let line = json::event_line(&self.meta, at, ev);
            return writeln!(self.out, "{line}");
        }
        let quiet = self.style.logs == OutputLogs::None;
        match ev {
            RunEvent::TaskStarted { task, attempt, .. } => {
                let chatty = matches!(self.style.logs, OutputLogs::Full | OutputLogs::NewOnly);
                if *attempt > 1 && chatty {
                    let line = format!("retrying (attempt {attempt})\n");
                    self.lines(task, line.as_bytes())?;
                }
            }
            RunEvent::Output { task, text } => self.lines(task, text)?,
            RunEvent::TaskReady { task } if !quiet => self.lines(task, b"ready\n")?,
            RunEvent::TaskReady { .. } => {}
            RunEvent::TaskFinished(r) => {
                let line = match (r.status, &r.cache) {
                    _ if quiet => None,
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
                // `prova: warning: …`, as every warning prova prints (crate::logfmt): in a
                // task's lines it also tells prova's words from the task's own `warning:`.
                let tag = match level {
                    NoticeLevel::Info => self.paint("2", "note"),
                    NoticeLevel::Warn => self.paint("33", "warning"),
                };
                match task {
                    Some(t) => self.lines(t, format!("prova: {tag}: {message}\n").as_bytes())?,
                    None => writeln!(self.out, "prova: {tag}: {message}")?,
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

/// `1 task`, `2 tasks`.
pub fn plural(n: usize, noun: &str) -> String {
    if n == 1 { format!("1 {noun}") } else { format!("{n} {noun}s") }
}

#[cfg(test)]
mod tests;
