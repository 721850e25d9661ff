//! Run-level retries, timeouts and the run id (`PROVA_RUN_ID`, [`mark_run`]): `--retry N` / `--timeout DUR`, else `[workspace] retry` /
//! `timeout`, for every task that sets no `retries` / `timeout` of its own (a task's own
//! value wins). Applied to the plan's specs after it is keyed: none of these is keyed (a
//! task's own `timeout` stays what its key folds), so a run with `--retry 3` hits the
//! entries of a run without it.

use std::time::Duration;

use crate::plan::{RunPlan, TaskKind};
use crate::workspace::Workspace;

/// What the command line asks of every task.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RunDefaults {
    /// `--retry`.
    pub retry: Option<u32>,
    /// `--timeout`.
    pub timeout: Option<Duration>,
}

/// Sets the retries and timeout of each task of `plan` that has none of its own: `run`'s,
/// else the workspace's. A persistent task (a dev server) never gets a default timeout.
pub fn apply(plan: &mut RunPlan, ws: &Workspace, run: &RunDefaults) {
    let retry = run.retry.or(ws.settings.retry);
    let timeout = run.timeout.or(ws.settings.timeout);
    if retry.is_none() && timeout.is_none() {
        return;
    }
    for i in 0..plan.tasks.len() {
        let Some(def) = plan.def(ws, i) else { continue };
        let (own_retries, own_timeout) = (def.policy.retries_set, def.timeout.is_some());
        let t = &mut plan.tasks[i];
        if let Some(n) = retry.filter(|_| !own_retries) {
            t.spec.retries = n;
        }
        if let Some(d) = timeout.filter(|_| !own_timeout && t.kind != TaskKind::Persistent) {
            t.spec.timeout_ms = Some(d.as_millis().min(u128::from(u64::MAX)) as u64);
        }
    }
}

/// The run's id, as every task's `PROVA_RUN_ID` (the worker adds `PROVA_TASK`,
/// `PROVA_PROJECT` and `PROVA_WORKSPACE`). In the spec's env, which no key folds.
pub fn mark_run(plan: &mut RunPlan, run_id: &str) {
    for t in &mut plan.tasks {
        if !t.spec.env.iter().any(|(k, _)| k == RUN_ID) {
            t.spec.env.push((RUN_ID.to_owned(), run_id.to_owned()));
        }
    }
}

/// The variable naming the run a task is part of.
pub const RUN_ID: &str = "PROVA_RUN_ID";

/// A fresh run id: this process and the wall clock, in hex.
pub fn new_run_id() -> String {
    let micros = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros());
    format!("{:x}-{:x}", micros, std::process::id())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ws(text: &str) -> (tempfile::TempDir, Workspace) {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("prova.toml"), text).expect("write");
        std::fs::create_dir_all(dir.path().join("p")).expect("mkdir");
        let ws = Workspace::load(dir.path()).expect("load");
        (dir, ws)
    }

    fn plan(ws: &Workspace) -> RunPlan {
        let graph = crate::graph::build_graph(ws).expect("graph");
        RunPlan::new(ws, &graph, &[], &|_| None)
    }

    fn of<'a>(p: &'a RunPlan, task: &str) -> &'a prova_protocol::spec::TaskSpec {
        &p.tasks.iter().find(|t| t.id.task() == task).expect("task").spec
    }

    const TASKS: &str = "[tasks.plain]\ncommand = 'true'\n\
        [tasks.own]\ncommand = 'true'\nretries = 0\ntimeout = '5s'\n\
        [tasks.dev]\ncommand = 'true'\npersistent = true\n";

    #[test]
    fn workspace_defaults_apply_to_tasks_that_set_nothing() {
        let (_d, ws) =
            ws(&format!("[workspace]\nprojects = ['p']\nretry = 2\ntimeout = '1m'\n{TASKS}"));
        let mut p = plan(&ws);
        apply(&mut p, &ws, &RunDefaults::default());
        assert_eq!((of(&p, "plain").retries, of(&p, "plain").timeout_ms), (2, Some(60_000)));
        // A task's own values win, even `retries = 0`.
        assert_eq!((of(&p, "own").retries, of(&p, "own").timeout_ms), (0, Some(5_000)));
        // A dev server is never timed out by a default.
        assert_eq!(of(&p, "dev").timeout_ms, None);
    }

    #[test]
    fn the_command_line_overrides_the_workspace_and_tasks_override_both() {
        let (_d, ws) =
            ws(&format!("[workspace]\nprojects = ['p']\nretry = 2\ntimeout = '1m'\n{TASKS}"));
        let mut p = plan(&ws);
        let run = RunDefaults { retry: Some(5), timeout: Some(Duration::from_secs(3)) };
        apply(&mut p, &ws, &run);
        assert_eq!((of(&p, "plain").retries, of(&p, "plain").timeout_ms), (5, Some(3_000)));
        assert_eq!((of(&p, "own").retries, of(&p, "own").timeout_ms), (0, Some(5_000)));
    }

    #[test]
    fn without_defaults_nothing_changes() {
        let (_d, ws) = ws(&format!("[workspace]\nprojects = ['p']\n{TASKS}"));
        let mut p = plan(&ws);
        let before = p.tasks.iter().map(|t| t.spec.clone()).collect::<Vec<_>>();
        apply(&mut p, &ws, &RunDefaults::default());
        assert_eq!(before, p.tasks.iter().map(|t| t.spec.clone()).collect::<Vec<_>>());
        assert_eq!((of(&p, "plain").retries, of(&p, "plain").timeout_ms), (0, None));
    }
}
