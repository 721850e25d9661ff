//! Whole runs driven through the state machine with plain values: no actor, runtime,
//! worker, cache or process. Each test plays the world's part — the worker's reports, the
//! cache layer's answers — and checks the commands the run gives, in order.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

use prova_protocol::events::{CacheStatus, RunEvent, RunSummary, TaskReport, TaskStatus, Verdict};
use prova_protocol::key::{KEY_VERSION, KeyComponents};
use prova_protocol::manifest::{EntryKind, ManifestEntry, OutputManifest};
use prova_protocol::spec::{CommandLine, ExitKind, TaskSpec};
use prova_protocol::work::{Assignment, Finished, FromWorker, Outputs, Placement};
use prova_protocol::{AttemptId, Digest, TaskId, WorkerId};

use super::*;
use crate::cache::Entry;
use crate::layers::{SaveOutcome, local::Restored};
use crate::plan::{PlannedTask, TaskKind};
use crate::run::types::{CachePolicy, VerifyOptions};

pub(in crate::run) fn task(name: &str, outputs: &[&str], deps: Vec<usize>) -> PlannedTask {
    let id = TaskId::new("p", name);
    let mut spec = TaskSpec::new(id.clone(), "p".to_owned(), CommandLine::Shell("true".into()));
    spec.outputs = outputs.iter().map(|s| (*s).to_owned()).collect();
    PlannedTask {
        id,
        project: usize::MAX,
        kind: TaskKind::Command,
        spec,
        cacheable: true,
        deps,
        requested: true,
        inputs: vec![],
    }
}

fn components(task: &str) -> KeyComponents {
    KeyComponents {
        version: KEY_VERSION,
        task: task.to_owned(),
        command: "sh:true".into(),
        config: vec![],
        env: vec![],
        inputs: vec![],
        workspace: vec![],
        upstream: vec![],
        upstream_outputs: vec![],
        args: vec![],
        platform: None,
    }
}

/// Keys settled as before a run: a task below one folded by outputs waits for its bytes
/// (also the shell's tests' keys).
pub(in crate::run) fn keys_for(plan: &RunPlan) -> PlanKeys {
    let mut keys = PlanKeys {
        keys: vec![None; plan.tasks.len()],
        components: plan.tasks.iter().map(|t| components(t.id.as_str())).collect(),
        stamps: vec![Vec::new(); plan.tasks.len()],
        shadows: Vec::new(),
        unfolded: vec![],
        closures: Default::default(),
    };
    keys.settle_all(plan, &|_| None);
    keys
}

fn entry(key: Digest, outputs: &Outputs) -> Entry {
    Entry {
        namespace: "trusted".into(),
        key,
        task: String::new(),
        artifact: outputs.artifact,
        log: None,
        manifest: rmp_serde::to_vec_named(&outputs.manifest).unwrap_or_default(),
        components: Vec::new(),
        fingerprint: Some(outputs.fingerprint),
        duration_ms: 40,
        created_ms: 1,
        last_used_ms: 1,
    }
}

pub(in crate::run) fn outputs(body: &[u8]) -> Outputs {
    let manifest = OutputManifest::new(vec![ManifestEntry {
        path: "p/dist/out.js".to_owned(),
        kind: EntryKind::File,
        mode: 0o644,
        size: body.len() as u64,
        digest: Some(Digest::of(body)),
        mtime_ns: 0,
        link_target: None,
    }]);
    Outputs {
        fingerprint: manifest.fingerprint(),
        manifest,
        artifact: Some((Digest::of(body), body.len() as u64)),
    }
}

pub(in crate::run) fn finished(
    attempt: AttemptId,
    exit: ExitKind,
    tries: u32,
    out: Option<Outputs>,
) -> Input {
    let mut f = Finished::never_ran(attempt, exit);
    f.tries = tries;
    f.outputs = out;
    Input::Worker { msg: FromWorker::Finished(Box::new(f)), worker: None }
}

/// A run of `tasks` with a cache holding `hits` (by node), and its driver.
pub(in crate::run) struct Drive {
    pub(in crate::run) run: Run,
    now: Duration,
}

pub(in crate::run) struct Knobs {
    pub(in crate::run) concurrency: usize,
    pub(in crate::run) continue_on_failure: bool,
    pub(in crate::run) verify: VerifyOptions,
    pub(in crate::run) hits: Vec<(usize, Outputs)>,
    pub(in crate::run) exec: ExecMode,
    pub(in crate::run) upstreams: prova_protocol::wire::UpstreamMode,
}

impl Default for Knobs {
    fn default() -> Self {
        Self {
            concurrency: 4,
            continue_on_failure: false,
            verify: Default::default(),
            hits: vec![],
            exec: ExecMode::InPlace,
            upstreams: Default::default(),
        }
    }
}

/// Tasks on farm workers: exec roots the coordinator feeds.
fn farm() -> ExecMode {
    ExecMode::ExecRoot { local_source: None, local_blobs: None }
}

impl Drive {
    pub(in crate::run) fn new(tasks: Vec<PlannedTask>, knobs: Knobs) -> Self {
        let plan = RunPlan { root: PathBuf::from("/ws"), tasks };
        let keys = keys_for(&plan);
        let hits: HashMap<usize, Entry> = knobs
            .hits
            .iter()
            .map(|(n, o)| (*n, entry(keys.key(*n).expect("keyed before the run"), o)))
            .collect();
        let cache = CacheSide {
            layer: "local",
            policy: CachePolicy::READ_WRITE,
            keys,
            hits,
            staging: PathBuf::from("/ws/.prova/tmp"),
            protected: Default::default(),
        };
        let options = RunOptions {
            concurrency: knobs.concurrency,
            continue_on_failure: knobs.continue_on_failure,
            verify: knobs.verify,
            upstreams: knobs.upstreams,
        };
        let run = Run::new(Setup {
            plan,
            options,
            weights: vec![],
            worker: WorkerId("local".into()),
            first_attempt: 1,
            cache: Some(cache),
            exec: knobs.exec,
            local_proof_sources: None,
            pid: 7,
            host_lang: "C.UTF-8".into(),
        });
        Self { run, now: Duration::ZERO }
    }

    /// Hands the run `input` a millisecond later; the commands it gives, in order.
    pub(in crate::run) fn give(&mut self, input: Input) -> Vec<Command> {
        self.now += Duration::from_millis(1);
        self.run.handle(self.now, input);
        std::iter::from_fn(|| self.run.poll()).collect()
    }
}

pub(in crate::run) fn assigned(cmds: &[Command]) -> Vec<&Assignment> {
    cmds.iter()
        .filter_map(|c| match c {
            Command::Assign { assignment, .. } => Some(&**assignment),
            _ => None,
        })
        .collect()
}

pub(in crate::run) fn reports(cmds: &[Command]) -> Vec<&TaskReport> {
    cmds.iter()
        .filter_map(|c| match c {
            Command::Emit(RunEvent::TaskFinished(r)) => Some(r),
            _ => None,
        })
        .collect()
}

pub(in crate::run) fn summary(cmds: &[Command]) -> Option<&RunSummary> {
    cmds.iter().find_map(|c| match c {
        Command::Finish(s) => Some(s),
        _ => None,
    })
}

pub(in crate::run) fn save_of(cmds: &[Command]) -> Option<usize> {
    cmds.iter().find_map(|c| match c {
        Command::Save(job) => Some(job.node),
        _ => None,
    })
}

pub(in crate::run) fn saved(node: usize) -> Input {
    let done = crate::run::cached::SaveDone {
        node,
        result: Ok(SaveOutcome::Saved),
        shrunk: None,
        blocked_cutoff: vec![],
    };
    Input::Saved(Box::new(done))
}

pub(in crate::run) fn ledger(cmds: &[Command]) -> Vec<&crate::cache::Execution> {
    cmds.iter()
        .filter_map(|c| match c {
            Command::Record { execution, .. } => Some(&**execution),
            _ => None,
        })
        .collect()
}

/// Runs the one primary attempt `cmds` hands out to a success with `body` as its outputs,
/// and saves it; the commands of the save's answer.
fn execute_and_save(d: &mut Drive, attempt: AttemptId, body: &[u8]) -> Vec<Command> {
    let cmds = d.give(finished(attempt, ExitKind::Code(0), 1, Some(outputs(body))));
    let node = save_of(&cmds).expect("a successful cacheable execution is saved");
    d.give(saved(node))
}

#[test]
fn a_miss_runs_is_saved_and_ends_the_run() {
    let mut d = Drive::new(vec![task("build", &["dist/**"], vec![])], Knobs::default());
    let cmds = d.give(Input::Begin);
    let a = assigned(&cmds);
    assert_eq!(a.len(), 1, "{cmds:?}");
    assert!(matches!(a[0].placement, Placement::InPlace { .. }));
    assert_eq!(a[0].pack_to, Some(PathBuf::from("/ws/.prova/tmp/7-attempt-1.tar.zst")));
    let attempt = a[0].attempt;
    let started = Input::Worker { msg: FromWorker::Started { attempt, try_no: 1 }, worker: None };
    assert!(matches!(&d.give(started)[..], [Command::Emit(RunEvent::TaskStarted { .. })]));
    let cmds = d.give(finished(attempt, ExitKind::Code(0), 1, Some(outputs(b"x"))));
    assert!(reports(&cmds).is_empty(), "reported only once saved: {cmds:?}");
    assert_eq!(ledger(&cmds).len(), 1, "every execution goes into the ledger");
    let cmds = d.give(saved(save_of(&cmds).expect("saved")));
    let r = reports(&cmds);
    assert_eq!((r[0].status, &r[0].cache), (TaskStatus::Succeeded, &CacheStatus::Saved));
    assert!(summary(&cmds).is_some_and(|s| s.ok && !s.interrupted && s.tasks.len() == 1));
    assert!(d.run.is_over());
    assert!(d.give(Input::Interrupt).is_empty(), "an ended run takes nothing in");
}

#[test]
fn a_current_hit_finishes_on_the_spot_and_a_stale_one_is_restored() {
    let tasks = vec![task("a", &["dist/**"], vec![]), task("b", &["dist/**"], vec![])];
    let hits = vec![(0, outputs(b"a")), (1, outputs(b"b"))];
    let mut d = Drive::new(tasks, Knobs { hits, ..Knobs::default() });
    let cmds = d.give(Input::Begin);
    let [Command::ResolveHits(queries)] = &cmds[..] else { panic!("{cmds:?}") };
    assert_eq!(queries.len(), 2);
    let back = cmds
        .into_iter()
        .flat_map(|c| match c {
            Command::ResolveHits(q) => q,
            _ => vec![],
        })
        .enumerate()
        .map(|(i, q)| {
            let current = (i == 0).then(|| Restored { placed: 0, current: 1, log: b"hi".to_vec() });
            (q.entry, current)
        })
        .collect();
    let cmds = d.give(Input::HitsResolved(Ok(back)));
    assert!(assigned(&cmds).is_empty(), "no hit runs: {cmds:?}");
    assert!(cmds.iter().any(|c| matches!(c, Command::Emit(RunEvent::Output { .. }))));
    let r = reports(&cmds);
    assert!(matches!(r[0].cache, CacheStatus::Hit { cutoff: false, .. }));
    assert!(matches!(cmds.last(), Some(Command::Restore { node: 1, .. })), "{cmds:?}");
    let restored = Restored { placed: 1, current: 0, log: vec![] };
    let cmds = d.give(Input::Restored { node: 1, result: Ok(Some(restored)) });
    assert!(matches!(reports(&cmds)[0].cache, CacheStatus::Hit { saved_ms: 40, .. }));
    assert!(matches!(&cmds[cmds.len() - 2], Command::Touch(keys) if keys.len() == 2));
    assert!(summary(&cmds).is_some_and(|s| s.ok));
}

#[test]
fn a_failed_restore_runs_the_task() {
    let hits = vec![(0, outputs(b"a"))];
    let mut d =
        Drive::new(vec![task("a", &["dist/**"], vec![])], Knobs { hits, ..Knobs::default() });
    let cmds = d.give(Input::Begin);
    let Some(Command::ResolveHits(q)) = cmds.into_iter().next() else { panic!() };
    let back = q.into_iter().map(|q| (q.entry, None)).collect();
    d.give(Input::HitsResolved(Ok(back)));
    let cmds = d.give(Input::Restored { node: 0, result: Ok(None) });
    assert!(matches!(&cmds[0], Command::Emit(RunEvent::Notice { .. })), "{cmds:?}");
    assert_eq!(assigned(&cmds).len(), 1);
}

#[test]
fn retries_are_counted_in_the_ledger_as_failed_tries() {
    let mut d = Drive::new(vec![task("a", &["dist/**"], vec![])], Knobs::default());
    let attempt = assigned(&d.give(Input::Begin))[0].attempt;
    let cmds = d.give(finished(attempt, ExitKind::Code(0), 3, Some(outputs(b"a"))));
    assert_eq!(ledger(&cmds)[0].failed_tries, 2, "a pass after two failures is flaky");
    let r = d.give(saved(0));
    assert_eq!(reports(&r)[0].attempts, 3);
}

#[test]
fn an_upstream_with_the_same_bytes_cuts_its_dependent_off() {
    let tasks = vec![task("gen", &["dist/**"], vec![]), task("app", &["out/**"], vec![0])];
    let mut d = Drive::new(tasks, Knobs::default());
    assert_eq!(d.run.key_of(1), None, "keyed by gen's bytes, unknown before the run");
    let attempt = assigned(&d.give(Input::Begin))[0].attempt;
    let cmds = execute_and_save(&mut d, attempt, b"same");
    let Some(&Command::Probe { node: 1, key }) =
        cmds.iter().find(|c| matches!(c, Command::Probe { .. }))
    else {
        panic!("the settled key is looked up: {cmds:?}")
    };
    let cmds = d.give(Input::Probed { node: 1, key, result: Ok(Some(entry(key, &outputs(b"o")))) });
    assert!(matches!(&cmds[..], [Command::Restore { node: 1, .. }]), "{cmds:?}");
    let restored = Restored { placed: 1, current: 0, log: vec![] };
    let cmds = d.give(Input::Restored { node: 1, result: Ok(Some(restored)) });
    assert!(matches!(reports(&cmds)[0].cache, CacheStatus::Hit { cutoff: true, .. }));
    assert!(assigned(&cmds).is_empty());
}

#[test]
fn a_failure_stops_the_run_or_with_continue_only_its_dependents() {
    for continue_on_failure in [false, true] {
        let tasks = vec![task("a", &[], vec![]), task("b", &[], vec![0]), task("c", &[], vec![])];
        let knobs = Knobs { concurrency: 1, continue_on_failure, ..Knobs::default() };
        let mut d = Drive::new(tasks, knobs);
        let first = assigned(&d.give(Input::Begin))[0].attempt;
        let cmds = d.give(finished(first, ExitKind::Code(1), 1, None));
        let r = reports(&cmds);
        assert_eq!(r[0].status, TaskStatus::Failed);
        let skipped: Vec<&str> = r[1..].iter().map(|r| r.task.as_str()).collect();
        if !continue_on_failure {
            assert_eq!(skipped, ["p#b", "p#c"], "{cmds:?}");
            assert!(summary(&cmds).is_some_and(|s| !s.ok));
            continue;
        }
        assert_eq!(skipped, ["p#b"], "only its dependent is skipped");
        let c = assigned(&cmds)[0].attempt;
        let cmds = d.give(finished(c, ExitKind::Code(0), 1, None));
        assert_eq!(reports(&cmds)[0].status, TaskStatus::Succeeded);
        assert!(summary(&cmds).is_some_and(|s| !s.ok && s.tasks.len() == 3));
    }
}

#[test]
fn an_interrupt_cancels_what_runs_and_skips_what_never_started() {
    let tasks = vec![task("a", &[], vec![]), task("b", &[], vec![]), task("c", &[], vec![0])];
    let mut d = Drive::new(tasks, Knobs { concurrency: 2, ..Knobs::default() });
    let a: Vec<AttemptId> = assigned(&d.give(Input::Begin)).iter().map(|a| a.attempt).collect();
    let cmds = d.give(Input::Interrupt);
    let cancels: Vec<AttemptId> = cmds
        .iter()
        .filter_map(|c| match c {
            Command::Cancel(a) => Some(*a),
            _ => None,
        })
        .collect();
    assert_eq!(cancels, a, "{cmds:?}");
    assert_eq!(reports(&cmds)[0].note.as_deref(), Some("the run was interrupted"));
    let cmds = d.give(finished(a[0], ExitKind::Aborted, 1, None));
    assert_eq!(reports(&cmds)[0].status, TaskStatus::Aborted);
    assert!(summary(&cmds).is_none(), "b is still to report");
    let cmds = d.give(finished(a[1], ExitKind::Aborted, 0, None));
    let r = reports(&cmds);
    assert_eq!(r[0].status, TaskStatus::Skipped, "cancelled before it started");
    assert!(summary(&cmds).is_some_and(|s| s.interrupted && !s.ok && s.tasks.len() == 3));
}

#[test]
fn an_answer_after_an_interrupt_reports_the_task_aborted() {
    let hits = vec![(0, outputs(b"a"))];
    let mut d =
        Drive::new(vec![task("a", &["dist/**"], vec![])], Knobs { hits, ..Knobs::default() });
    let Some(Command::ResolveHits(q)) = d.give(Input::Begin).into_iter().next() else { panic!() };
    d.give(Input::HitsResolved(Ok(q.into_iter().map(|q| (q.entry, None)).collect())));
    assert!(summary(&d.give(Input::Interrupt)).is_none(), "the restore is still out");
    let restored = Restored { placed: 1, current: 0, log: vec![] };
    let cmds = d.give(Input::Restored { node: 0, result: Ok(Some(restored)) });
    assert_eq!(reports(&cmds)[0].status, TaskStatus::Aborted);
    assert!(summary(&cmds).is_some_and(|s| s.interrupted));
}

#[test]
fn a_closed_link_fails_the_task() {
    let mut d = Drive::new(vec![task("a", &[], vec![])], Knobs::default());
    let attempt = assigned(&d.give(Input::Begin))[0].attempt;
    let cmds = d.give(Input::AssignFailed(attempt));
    let r = reports(&cmds);
    assert_eq!(r[0].note.as_deref(), Some("the worker link closed"));
    assert!(summary(&cmds).is_some_and(|s| !s.ok));
    assert!(d.give(finished(attempt, ExitKind::Code(0), 1, None)).is_empty(), "forgotten");
}

/// A task one of whose inputs lies among its outputs: its first execution, in the
/// workspace, could change that input, so its determinism re-run waits for the save
/// (`early_rerun_tests.rs` has the re-runs that start beside their first execution).
pub(in crate::run) fn rerun_after_save() -> PlannedTask {
    let mut t = task("a", &["dist/**"], vec![]);
    t.inputs = vec![prova_protocol::wire::InputRef {
        path: "p/dist/seed.txt".into(),
        digest: Digest::of(b"seed"),
        exec: false,
        symlink: None,
        tree: false,
    }];
    t
}

fn proving() -> Knobs {
    let verify = VerifyOptions { determinism: true, ..Default::default() };
    Knobs { verify, ..Knobs::default() }
}

/// Outputs that claim a file outside the task's declared outputs (a lying worker).
fn lying_outputs() -> Outputs {
    let mut o = outputs(b"x");
    o.manifest.entries[0].path = "p/.git/hooks/pre-commit".into();
    o.fingerprint = o.manifest.fingerprint();
    o
}

/// Runs task 0 of `d` and saves it: the re-run's attempt (its report is held).
fn run_to_rerun(d: &mut Drive) -> AttemptId {
    let first = assigned(&d.give(Input::Begin))[0].attempt;
    let cmds = execute_and_save(d, first, b"x");
    assert!(reports(&cmds).is_empty(), "held until its proof concluded: {cmds:?}");
    let rerun = assigned(&cmds);
    assert!(rerun[0].perturb.is_some(), "a re-run is perturbed");
    rerun[0].attempt
}

#[test]
fn the_determinism_proof_reruns_compares_and_releases_the_report() {
    let mut d = Drive::new(vec![rerun_after_save()], proving());
    let rerun = run_to_rerun(&mut d);
    let cmds = d.give(finished(rerun, ExitKind::Code(0), 1, Some(outputs(b"x"))));
    assert!(ledger(&cmds).iter().any(|e| e.rerun), "the re-run is recorded: {cmds:?}");
    let r = reports(&cmds);
    assert!(matches!(r[0].verdicts[..], [Verdict::ProvenDeterministic { .. }]), "{r:?}");
    assert!(summary(&cmds).is_some_and(|s| s.ok));
}

#[test]
fn a_diverging_rerun_is_compared_off_the_machine_and_fails_the_run() {
    let mut d = Drive::new(vec![rerun_after_save()], proving());
    let rerun = run_to_rerun(&mut d);
    let cmds = d.give(finished(rerun, ExitKind::Code(0), 1, Some(outputs(b"y"))));
    let Some(Command::Diff(job)) = cmds.iter().find(|c| matches!(c, Command::Diff(_))) else {
        panic!("{cmds:?}")
    };
    assert!(job.execution.rerun && summary(&cmds).is_none());
    let verdict = crate::run::verdicts::divergence_verdict(job.divergence.clone(), false);
    let cmds = d.give(Input::ProofDone { node: 0, verdict });
    assert!(matches!(reports(&cmds)[0].verdicts[..], [Verdict::Nondeterministic(_)]));
    assert!(summary(&cmds).is_some_and(|s| !s.ok));
}

#[test]
fn a_rerun_that_never_ran_records_nothing() {
    let exits = [ExitKind::Aborted, ExitKind::SpawnFailed("every worker refused".into())];
    for exit in exits {
        let mut d = Drive::new(vec![rerun_after_save()], proving());
        let rerun = run_to_rerun(&mut d);
        let cmds = d.give(finished(rerun, exit.clone(), 0, None));
        assert!(ledger(&cmds).is_empty(), "{exit:?}: no evidence, no row: {cmds:?}");
        assert_eq!(reports(&cmds)[0].verdicts.len(), 1);
        assert!(summary(&cmds).is_some());
    }
}

#[test]
fn an_interrupt_cancels_a_running_rerun_and_releases_the_held_report() {
    let mut d = Drive::new(vec![rerun_after_save()], proving());
    let rerun = run_to_rerun(&mut d);
    let cmds = d.give(Input::Interrupt);
    assert!(cmds.iter().any(|c| matches!(c, Command::Cancel(a) if *a == rerun)), "{cmds:?}");
    let r = reports(&cmds);
    assert_eq!(r.len(), 1, "the held report goes out as the run ends: {cmds:?}");
    assert!(summary(&cmds).is_some_and(|s| s.interrupted));
}

#[test]
fn the_inputs_proof_traces_the_execution_in_an_exec_root() {
    let verify = VerifyOptions { inputs: true, ..Default::default() };
    let mut d =
        Drive::new(vec![task("a", &["dist/**"], vec![])], Knobs { verify, ..Knobs::default() });
    let cmds = d.give(Input::Begin);
    let a = assigned(&cmds)[0];
    assert!(a.trace_reads && matches!(a.placement, Placement::ExecRoot { .. }), "{a:?}");
    assert!(!a.survey_on_failure, "a proof surveys first: every read named in one round");
    let mut f = Finished::never_ran(a.attempt, ExitKind::Code(0));
    f.tries = 1;
    f.outputs = Some(outputs(b"x"));
    f.reads = Some(prova_protocol::work::ReadsReport {
        traced: true,
        missing: vec![],
        listed: vec![],
        touched: vec![],
        wrote: vec!["p/stray.txt".into()],
    });
    let worker = Input::Worker { msg: FromWorker::Finished(Box::new(f)), worker: None };
    let cmds = d.give(worker);
    let Some(Command::Save(job)) = cmds.iter().find(|c| matches!(c, Command::Save(_))) else {
        panic!("{cmds:?}")
    };
    assert!(job.restore_into_workspace, "what runs after it in place reads its outputs");
    let cmds = d.give(saved(0));
    let r = reports(&cmds);
    assert!(
        matches!(&r[0].verdicts[..], [Verdict::UndeclaredOutputs { paths, .. }] if paths == &["p/stray.txt"]),
        "{r:?}"
    );
    assert!(summary(&cmds).is_some_and(|s| !s.ok), "a failing verdict fails the run");
}

#[test]
fn a_confined_execution_outside_a_proof_is_traced_and_surveyed_only_after_a_failure() {
    let mut t = task("a", &["dist/**"], vec![]);
    t.spec.proof.sandbox = true;
    let cmds = Drive::new(vec![t.clone()], Knobs::default()).give(Input::Begin);
    let a = assigned(&cmds)[0];
    assert!(a.trace_reads && a.survey_on_failure, "{a:?}");
    // Under --verify=inputs its execution is the proof's: surveyed first.
    let verify = VerifyOptions { inputs: true, ..Default::default() };
    let cmds = Drive::new(vec![t], Knobs { verify, ..Knobs::default() }).give(Input::Begin);
    let a = assigned(&cmds)[0];
    assert!(a.trace_reads && !a.survey_on_failure, "{a:?}");
}

#[test]
fn a_farm_workers_lie_is_refused_and_nothing_of_it_is_recorded_or_saved() {
    let knobs = Knobs { exec: farm(), ..Knobs::default() };
    let mut d = Drive::new(vec![task("a", &["dist/**"], vec![])], knobs);
    let attempt = assigned(&d.give(Input::Begin))[0].attempt;
    let cmds = d.give(finished(attempt, ExitKind::Code(0), 1, Some(lying_outputs())));
    assert!(ledger(&cmds).is_empty() && save_of(&cmds).is_none(), "{cmds:?}");
    let r = reports(&cmds);
    assert_eq!(r[0].status, TaskStatus::Failed);
    assert!(matches!(&r[0].cache, CacheStatus::NotSaved { reason } if reason.contains("lied")));
    assert!(summary(&cmds).is_some_and(|s| !s.ok));
}

#[test]
fn a_refused_rerun_fails_the_proof_and_records_nothing() {
    let mut knobs = proving();
    knobs.exec = farm();
    let mut d = Drive::new(vec![task("a", &["dist/**"], vec![])], knobs);
    let rerun = run_to_rerun(&mut d);
    let cmds = d.give(finished(rerun, ExitKind::Code(0), 1, Some(lying_outputs())));
    assert!(ledger(&cmds).is_empty(), "a lie is no evidence: {cmds:?}");
    let r = reports(&cmds);
    assert!(
        matches!(&r[0].verdicts[..], [Verdict::RerunFailed { reason, .. }] if reason.contains("refused"))
    );
    assert!(summary(&cmds).is_some_and(|s| !s.ok));
}

#[test]
fn a_rerun_that_cannot_be_handed_out_concludes_the_proof() {
    let mut d = Drive::new(vec![rerun_after_save()], proving());
    let rerun = run_to_rerun(&mut d);
    let cmds = d.give(Input::AssignFailed(rerun));
    let r = reports(&cmds);
    assert!(
        matches!(&r[0].verdicts[..], [Verdict::RerunFailed { reason, .. }] if reason == "the worker link closed")
    );
    assert!(summary(&cmds).is_some(), "no proof is left outstanding: {cmds:?}");
}

#[test]
fn under_only_an_upstream_not_cached_is_assumed_from_disk() {
    let mut tasks = vec![task("gen", &["dist/**"], vec![]), task("app", &[], vec![0])];
    tasks[0].requested = false;
    let upstreams = prova_protocol::wire::UpstreamMode::Only;
    let mut d = Drive::new(tasks, Knobs { upstreams, ..Knobs::default() });
    let cmds = d.give(Input::Begin);
    let [Command::ReadOutputs { node: 0, root, .. }] = &cmds[..] else { panic!("{cmds:?}") };
    assert_eq!(root, &PathBuf::from("/ws"));
    let cmds = d.give(Input::OutputsRead { node: 0, result: Ok(outputs(b"disk").manifest) });
    let r = reports(&cmds);
    assert_eq!(r[0].status, TaskStatus::Skipped, "{cmds:?}");
    assert_eq!(d.run.state[0].fingerprint, Some(outputs(b"disk").fingerprint));
    assert!(
        cmds.iter().any(|c| matches!(c, Command::Probe { node: 1, .. })),
        "app keyed: {cmds:?}"
    );
}

#[test]
fn a_persistent_task_is_ready_then_stopped_when_the_rest_is_done() {
    let mut server = task("serve", &[], vec![]);
    server.kind = TaskKind::Persistent;
    let mut d = Drive::new(vec![server, task("e2e", &[], vec![0])], Knobs::default());
    let serve = assigned(&d.give(Input::Begin))[0].attempt;
    let ready = Input::Worker { msg: FromWorker::Ready { attempt: serve }, worker: None };
    let cmds = d.give(ready);
    assert!(matches!(&cmds[0], Command::Emit(RunEvent::TaskReady { .. })), "{cmds:?}");
    let e2e = assigned(&cmds)[0].attempt;
    let cmds = d.give(finished(e2e, ExitKind::Code(0), 1, None));
    assert!(cmds.iter().any(|c| matches!(c, Command::Cancel(a) if *a == serve)), "{cmds:?}");
    let cmds = d.give(finished(serve, ExitKind::Aborted, 1, None));
    assert_eq!(reports(&cmds)[0].status, TaskStatus::Succeeded, "stopped once done");
    assert!(summary(&cmds).is_some_and(|s| s.ok));
}
