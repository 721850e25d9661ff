//! The run core's decisions, driven with plain values: no actor, worker, cache or process.

use std::path::{Path, PathBuf};

use prova_protocol::events::{CacheStatus, TaskReport, TaskStatus, Verdict};
use prova_protocol::globs::PathGlobs;
use prova_protocol::manifest::{EntryKind, ManifestEntry, OutputManifest};
use prova_protocol::spec::{CommandLine, ExecStats, ExitKind, TaskSpec};
use prova_protocol::work::{Finished, Outputs};
use prova_protocol::{AttemptId, Digest, TaskId, WorkerId};

use super::*;

fn task(name: &str, kind: TaskKind, cacheable: bool, deps: Vec<usize>) -> PlannedTask {
    let id = TaskId::new("p", name);
    PlannedTask {
        id: id.clone(),
        project: usize::MAX,
        kind,
        spec: TaskSpec::new(id, "p".to_owned(), CommandLine::Shell("true".into())),
        cacheable,
        deps,
        requested: true,
        inputs: vec![],
    }
}

fn file(path: &str, body: &[u8]) -> ManifestEntry {
    ManifestEntry {
        path: path.to_owned(),
        kind: EntryKind::File,
        mode: 0o644,
        size: body.len() as u64,
        digest: Some(Digest::of(body)),
        mtime_ns: 0,
        link_target: None,
    }
}

fn outputs(entries: Vec<ManifestEntry>) -> Outputs {
    let manifest = OutputManifest::new(entries);
    Outputs { fingerprint: manifest.fingerprint(), manifest, artifact: None }
}

fn finished(exit: ExitKind) -> Finished {
    let mut f = Finished::never_ran(AttemptId(7), exit);
    f.tries = 1;
    f
}

fn report(verdicts: Vec<Verdict>) -> TaskReport {
    TaskReport {
        task: TaskId::new("p", "t"),
        status: TaskStatus::Succeeded,
        cache: CacheStatus::Uncached,
        exit: None,
        attempts: 1,
        stats: ExecStats::default(),
        key: None,
        worker: None,
        note: None,
        verdicts,
    }
}

const READ_WRITE: CachePolicy = CachePolicy::READ_WRITE;

#[test]
fn a_command_succeeds_on_exit_zero_and_fails_otherwise() {
    let t = TaskState::default();
    let k = TaskKind::Command;
    assert_eq!(task_status(k, &t, false, &ExitKind::Code(0)), TaskStatus::Succeeded);
    assert_eq!(task_status(k, &t, false, &ExitKind::Code(2)), TaskStatus::Failed);
    assert_eq!(task_status(k, &t, false, &ExitKind::Signal(9)), TaskStatus::Failed);
    assert_eq!(task_status(k, &t, false, &ExitKind::TimedOut), TaskStatus::Failed);
    assert_eq!(task_status(k, &t, true, &ExitKind::Aborted), TaskStatus::Aborted);
    assert_eq!(failure_note(k, &t, &ExitKind::Code(2)), "exit code 2");
}

#[test]
fn a_persistent_task_stopped_by_the_run_succeeded_whatever_its_exit() {
    let t = TaskState { stopping: true, ready: true, ..TaskState::default() };
    let k = TaskKind::Persistent;
    for exit in [ExitKind::Signal(15), ExitKind::Code(143), ExitKind::Aborted] {
        assert_eq!(task_status(k, &t, false, &exit), TaskStatus::Succeeded, "{exit:?}");
    }
    // Interrupted, it is aborted (the run did not end it on purpose).
    assert_eq!(task_status(k, &t, true, &ExitKind::Aborted), TaskStatus::Aborted);
}

#[test]
fn a_persistent_task_that_exits_before_it_is_ready_fails_even_on_exit_zero() {
    let t = TaskState::default();
    let k = TaskKind::Persistent;
    assert_eq!(task_status(k, &t, false, &ExitKind::Code(0)), TaskStatus::Failed);
    assert_eq!(failure_note(k, &t, &ExitKind::Code(0)), "exited before it was ready (exit code 0)");
    assert_eq!(
        failure_note(k, &t, &ExitKind::Signal(6)),
        "exited before it was ready (killed by SIGABRT (signal 6) — it aborted (a failed assertion?))"
    );
    // Once ready, an exit 0 on its own is a success; a timeout says only that.
    let ready = TaskState { ready: true, ..TaskState::default() };
    assert_eq!(task_status(k, &ready, false, &ExitKind::Code(0)), TaskStatus::Succeeded);
    assert_eq!(failure_note(k, &t, &ExitKind::TimedOut), "timed out");
}

#[test]
fn a_report_whose_manifest_leaves_the_outputs_or_lies_about_its_fingerprint_is_refused() {
    let globs = PathGlobs::new("p", &["dist/**".to_owned()]).unwrap();
    let good = outputs(vec![file("p/dist/a.js", b"a")]);
    assert_eq!(refusal(&good, &globs, "p"), None);
    for bad in ["p/src/main.rs", ".git/hooks/pre-commit", "q/dist/a.js", "p/dist/../../x"] {
        let o = outputs(vec![file("p/dist/a.js", b"a"), file(bad, b"evil")]);
        let why = refusal(&o, &globs, "p").unwrap_or_default();
        assert!(why.starts_with("outputs outside the task's declared outputs"), "{bad}: {why}");
    }
    let mut forged = good.clone();
    forged.fingerprint = Digest::of(b"another tree");
    assert_eq!(
        refusal(&forged, &globs, "p").as_deref(),
        Some("a fingerprint that is not its manifest's")
    );
}

#[test]
fn the_cache_policy_decides_what_a_task_may_restore_and_save() {
    let run = UpstreamMode::Run;
    let cacheable = task("build", TaskKind::Command, true, vec![]);
    let none = CacheUse { cacheable: false, reads: false, writes: false };
    assert_eq!(CacheUse::of(&cacheable, None, run), none);
    assert_eq!(
        CacheUse::of(&cacheable, Some(READ_WRITE), run),
        CacheUse { cacheable: true, reads: true, writes: true }
    );
    // `--cache local:w`: write only; --no-cache reaches here as no cache at all.
    let write_only = CacheUse { cacheable: true, reads: false, writes: true };
    assert_eq!(CacheUse::of(&cacheable, Some(CachePolicy::of(false, true)), run), write_only);
    assert_eq!(
        CacheUse::of(&cacheable, Some(CachePolicy::OFF), run),
        CacheUse { cacheable: true, reads: false, writes: false }
    );
    // `--force`: a task the run executes is never restored, whatever the mode.
    for mode in [run, UpstreamMode::Only, UpstreamMode::Exclude] {
        assert_eq!(CacheUse::of(&cacheable, Some(CachePolicy::FORCE), mode), write_only);
    }
    // ... but a dependency `--only` leaves out is: the run could not run it.
    let left_out = PlannedTask { requested: false, ..cacheable.clone() };
    let read_write = CacheUse { cacheable: true, reads: true, writes: true };
    assert_eq!(CacheUse::of(&left_out, Some(CachePolicy::FORCE), UpstreamMode::Only), read_write);
    assert_eq!(CacheUse::of(&left_out, Some(CachePolicy::FORCE), run), write_only);
    // `--exclude-dependencies` restores nothing it leaves out, and `local:w` reads nothing.
    let excluded = CacheUse::of(&left_out, Some(CachePolicy::FORCE), UpstreamMode::Exclude);
    assert_eq!(excluded, write_only);
    let told_not = CacheUse::of(&left_out, Some(CachePolicy::of(false, true)), UpstreamMode::Only);
    assert_eq!(told_not, write_only);
    assert!(CachePolicy::FORCE.reads_any(UpstreamMode::Only));
    assert!(!CachePolicy::FORCE.reads_any(run) && !CachePolicy::of(false, true).reads_any(run));
    // `cache = false`, a persistent task, a group: never restored, never saved.
    for t in [
        task("dev", TaskKind::Persistent, false, vec![]),
        task("all", TaskKind::Group, false, vec![]),
        task("lint", TaskKind::Command, false, vec![]),
    ] {
        assert_eq!(CacheUse::of(&t, Some(READ_WRITE), run), none, "{}", t.id);
    }
}

#[test]
fn a_save_is_withheld_before_it_is_tried_when_the_outputs_are_not_all_there() {
    let mut f = finished(ExitKind::Code(0));
    assert_eq!(withheld_before_save(&f).as_deref(), Some("no outputs were collected"));
    f.outputs = Some(outputs(vec![file("p/dist/a.js", b"a")]));
    assert_eq!(withheld_before_save(&f), None);
    f.missing_literals = vec!["p/dist/index.d.ts".to_owned(), "p/dist/b".to_owned()];
    assert_eq!(
        withheld_before_save(&f).as_deref(),
        Some("declared output `p/dist/index.d.ts` does not exist")
    );
    // A collection error is named first: it is why the rest is missing.
    f.output_error = Some("p/dist: permission denied".to_owned());
    assert_eq!(
        withheld_before_save(&f).as_deref(),
        Some("collecting outputs failed: p/dist: permission denied")
    );
    // What the worker found after the run comes before anything about the outputs: the key
    // does not say what ran, whatever was collected.
    f.withheld = Some("program `tool` changed on this worker while the task ran".to_owned());
    assert_eq!(
        withheld_before_save(&f).as_deref(),
        Some("program `tool` changed on this worker while the task ran")
    );
}

#[test]
fn a_local_inputs_proof_and_a_remote_execution_restore_saved_outputs_into_the_workspace() {
    // Tasks executed elsewhere for this workspace (a REAPI farm): their outputs reach the
    // workspace only through the save, proof or not.
    let remote = ExecMode::ExecRoot { local_source: Some("/ws".into()), local_blobs: None };
    let farm = ExecMode::ExecRoot { local_source: None, local_blobs: None };
    assert!(restore_into_workspace(&ExecMode::InPlace, false, true));
    assert!(!restore_into_workspace(&ExecMode::InPlace, false, false));
    assert!(!restore_into_workspace(&ExecMode::InPlace, true, true));
    assert!(restore_into_workspace(&remote, false, true));
    assert!(restore_into_workspace(&remote, false, false));
    assert!(!restore_into_workspace(&farm, true, false));
    assert!(!restore_into_workspace(&farm, false, false), "no workspace to restore into");
}

#[test]
fn after_a_save_the_determinism_proof_reruns_only_a_saved_execution_with_outputs() {
    let saved = CacheStatus::Saved;
    let primary = PrimaryOutputs {
        manifest: OutputManifest::new(vec![file("p/dist/a.js", b"a")]),
        fingerprint: Digest::of(b"fp"),
        artifact: None,
        worker: None,
    };
    let empty = PrimaryOutputs { manifest: OutputManifest::default(), ..primary.clone() };
    assert_eq!(after_save(false, true, &saved, Some(&primary)), AfterSave::Nothing);
    assert_eq!(after_save(true, true, &saved, Some(&primary)), AfterSave::Rerun);
    assert_eq!(
        after_save(true, true, &saved, Some(&empty)),
        AfterSave::Verdict(Box::new(Verdict::NoOutputs))
    );
    assert_eq!(after_save(true, true, &saved, None), AfterSave::Nothing);
    let withheld = CacheStatus::NotSaved { reason: "an input changed while it ran".to_owned() };
    assert_eq!(
        after_save(true, false, &withheld, Some(&primary)),
        AfterSave::Verdict(Box::new(Verdict::NotVerified {
            reason: "not saved (an input changed while it ran): nothing to prove".to_owned()
        }))
    );
    assert_eq!(
        after_save(true, false, &saved, Some(&primary)),
        AfterSave::Verdict(Box::new(Verdict::NotVerified {
            reason: "not saved: nothing to prove".to_owned()
        }))
    );
}

#[test]
fn a_plain_local_execution_runs_in_place_and_packs_what_it_saves() {
    let writes = CacheUse { cacheable: true, reads: true, writes: true };
    let s = attempt_shape(Purpose::Primary, writes, true, true, false, &ExecMode::InPlace, false);
    assert_eq!(
        s,
        AttemptShape {
            traced: false,
            in_place: true,
            pack: true,
            clean_outputs: true,
            collect_outputs: true,
            perturb: false,
            merge_by_key: true,
            prioritised: true,
        }
    );
    // Not cacheable: outputs left alone, nothing packed; collected only when a dependent's
    // key folds them (declared outputs) and the run has a cache to key with.
    let none = CacheUse { cacheable: false, reads: false, writes: false };
    let s = attempt_shape(Purpose::Primary, none, true, false, false, &ExecMode::InPlace, true);
    assert!(s.in_place && !s.traced && !s.pack && !s.clean_outputs && !s.collect_outputs);
    let s = attempt_shape(Purpose::Primary, none, true, true, false, &ExecMode::InPlace, false);
    assert!(s.in_place && !s.pack && !s.clean_outputs && s.collect_outputs);
    let s = attempt_shape(Purpose::Primary, none, false, true, false, &ExecMode::InPlace, false);
    assert!(!s.collect_outputs, "no cache: no key folds it");
}

#[test]
fn an_inputs_proof_runs_the_execution_traced_in_an_exec_root() {
    let writes = CacheUse { cacheable: true, reads: true, writes: true };
    let s = attempt_shape(Purpose::Primary, writes, true, true, false, &ExecMode::InPlace, true);
    assert!(s.traced && !s.in_place && !s.clean_outputs && s.pack && s.collect_outputs);
    // A re-run is never traced, even under --verify=inputs.
    let s = attempt_shape(Purpose::Rerun, writes, true, true, false, &ExecMode::InPlace, true);
    assert!(!s.traced);
}

#[test]
fn a_rerun_is_perturbed_collected_never_merged_and_never_holds_the_critical_path() {
    // Even with --force off (no writes), a re-run's outputs are compared.
    let read_only = CacheUse { cacheable: true, reads: true, writes: false };
    for (exec, farm) in [
        (ExecMode::InPlace, false),
        (ExecMode::ExecRoot { local_source: None, local_blobs: None }, true),
    ] {
        let s = attempt_shape(Purpose::Rerun, read_only, true, true, farm, &exec, false);
        assert!(s.perturb && s.collect_outputs && !s.in_place, "{exec:?}");
        assert!(!s.merge_by_key && !s.prioritised, "{exec:?}");
        // A farm worker uploads; a local one packs into staging.
        assert_eq!(s.pack, !farm, "{exec:?}");
    }
}

#[test]
fn a_farm_execution_always_returns_its_outputs_and_never_packs_locally() {
    let farm = ExecMode::ExecRoot { local_source: None, local_blobs: None };
    let writes = CacheUse { cacheable: true, reads: true, writes: true };
    let none = CacheUse { cacheable: false, reads: false, writes: false };
    for cache in [writes, none] {
        let s = attempt_shape(Purpose::Primary, cache, true, true, true, &farm, false);
        assert!(s.collect_outputs && !s.pack && !s.in_place && !s.clean_outputs, "{cache:?}");
    }
}

#[test]
fn a_rerun_avoids_the_worker_of_the_first_execution() {
    let t = TaskState { ran_on: Some(WorkerId("w1".into())), ..TaskState::default() };
    assert_eq!(avoid_worker(Purpose::Rerun, &t), Some(WorkerId("w1".into())));
    assert_eq!(avoid_worker(Purpose::Primary, &t), None);
    assert_eq!(avoid_worker(Purpose::Rerun, &TaskState::default()), None);
    assert_eq!(t.worker_or(&WorkerId("local".into())), WorkerId("w1".into()));
    assert_eq!(TaskState::default().worker_or(&WorkerId("local".into())), WorkerId("local".into()));
}

#[test]
fn an_exec_root_finds_its_bytes_where_the_mode_says() {
    let root = Path::new("/ws");
    let farm = ExecMode::ExecRoot { local_source: None, local_blobs: None };
    assert_eq!(exec_root_sources(&farm, None, root), (None, None));
    let local = ExecMode::ExecRoot {
        local_source: Some("/src".into()),
        local_blobs: Some("/blobs".into()),
    };
    let proof = (PathBuf::from("/proof-ws"), PathBuf::from("/proof-blobs"));
    assert_eq!(
        exec_root_sources(&local, Some(&proof), root),
        (Some("/src".into()), Some("/blobs".into()))
    );
    assert_eq!(
        exec_root_sources(&ExecMode::InPlace, Some(&proof), root),
        (Some("/proof-ws".into()), Some("/proof-blobs".into()))
    );
    assert_eq!(exec_root_sources(&ExecMode::InPlace, None, root), (Some("/ws".into()), None));
}

#[test]
fn an_exec_root_holds_every_known_upstream_artifact_transitively_in_node_order() {
    // 0 <- 1 <- 3, 2 <- 3, 4 unrelated; 1 has no artifact (not cached).
    let tasks = vec![
        task("a", TaskKind::Command, true, vec![]),
        task("b", TaskKind::Command, true, vec![0]),
        task("c", TaskKind::Command, true, vec![]),
        task("d", TaskKind::Command, true, vec![2, 1]),
        task("e", TaskKind::Command, true, vec![]),
    ];
    let mut state = TaskState::for_tasks(5);
    let art = |i: u8| Some((Digest::of(&[i]), u64::from(i)));
    state[0].artifact = art(0);
    state[2].artifact = art(2);
    state[4].artifact = art(4);
    let got = upstream_artifacts(&tasks, &state, 3);
    assert_eq!(got, vec![art(0).unwrap(), art(2).unwrap()]);
    assert!(upstream_artifacts(&tasks, &state, 0).is_empty());
    // Under `upstream_outputs = "direct"` (confined): d's direct dependencies only — c's;
    // b has none, and a is b's upstream. Not confined, the flag changes nothing.
    let mut direct = tasks.clone();
    direct[3].spec.proof.direct_upstreams = true;
    assert_eq!(upstream_artifacts(&direct, &state, 3), got, "not confined: every upstream");
    direct[3].spec.proof.sandbox = true;
    assert_eq!(upstream_artifacts(&direct, &state, 3), vec![art(2).unwrap()]);
}

#[test]
fn the_run_waits_for_its_proofs_unless_interrupted() {
    assert_eq!(run_may_end(None, 0, false), None);
    assert_eq!(run_may_end(None, 0, true), None);
    assert_eq!(run_may_end(Some(true), 0, false), Some(true));
    assert_eq!(run_may_end(Some(false), 0, false), Some(false));
    assert_eq!(run_may_end(Some(true), 2, false), None);
    assert_eq!(run_may_end(Some(true), 2, true), Some(true));
}

#[test]
fn a_failing_verdict_fails_the_run_an_allowed_or_unverified_one_does_not() {
    let mut state = TaskState::for_tasks(3);
    state[0].report = Some(report(vec![Verdict::NotVerified { reason: "x".into() }]));
    state[1].report = Some(report(vec![Verdict::NoOutputs]));
    assert!(run_ok(true, &state, false));
    assert!(!run_ok(false, &state, false));
    assert!(!run_ok(true, &state, true));
    state[2].report =
        Some(report(vec![Verdict::UndeclaredOutputs { paths: vec!["p/state".into()], more: 0 }]));
    assert!(!run_ok(true, &state, false));
    state[2].report = Some(report(vec![Verdict::RerunFailed {
        reason: "exit code 1".into(),
        log_tail: vec![],
        perturbations: Default::default(),
    }]));
    assert!(!run_ok(true, &state, false));
}

#[test]
fn a_task_that_did_not_run_says_why_it_is_not_verified() {
    assert_eq!(
        not_run_verdict(true),
        Verdict::NotVerified { reason: "a group: it runs nothing".into() }
    );
    assert_eq!(
        not_run_verdict(false),
        Verdict::NotVerified {
            reason: "a cache hit: it did not run (--force re-executes to verify)".into()
        }
    );
    let e = std::io::Error::other("disk full");
    assert_eq!(
        restore_fallback_notice(Some(&e)),
        "the cache entry could not be restored (disk full); running the task"
    );
    assert!(restore_fallback_notice(None).contains("missing or corrupt (quarantined)"));
}

#[test]
fn only_a_successful_execution_of_a_task_the_run_saves_goes_to_the_save() {
    let writes = CacheUse { cacheable: true, reads: true, writes: true };
    let read_only = CacheUse { cacheable: true, reads: true, writes: false };
    let none = CacheUse { cacheable: false, reads: false, writes: false };
    let ok = ExitKind::Code(0);
    assert_eq!(
        after_execution(writes, TaskStatus::Succeeded, &ok, true, true),
        AfterExecution::Save
    );
    // A failure of a task the run saves says why nothing was saved, and proves nothing.
    let failed = ExitKind::Code(2);
    assert_eq!(
        after_execution(writes, TaskStatus::Failed, &failed, true, false),
        AfterExecution::Report {
            cache: CacheStatus::NotSaved { reason: "exit code 2".into() },
            unprovable: false
        }
    );
    // A persistent task that exited 0 before it was ready failed: not saved either.
    assert_eq!(
        after_execution(writes, TaskStatus::Failed, &ok, false, false),
        AfterExecution::Report {
            cache: CacheStatus::NotSaved { reason: "exit code 0".into() },
            unprovable: false
        }
    );
    // --no-cache / --verify on a read-only run: determinism cannot be proven.
    assert_eq!(
        after_execution(read_only, TaskStatus::Succeeded, &ok, true, false),
        AfterExecution::Report { cache: CacheStatus::Uncached, unprovable: true }
    );
    // The inputs proof needs a cacheable task; a cacheable one was traced.
    assert_eq!(
        after_execution(none, TaskStatus::Succeeded, &ok, false, true),
        AfterExecution::Report { cache: CacheStatus::Uncached, unprovable: true }
    );
    assert_eq!(
        after_execution(read_only, TaskStatus::Succeeded, &ok, false, true),
        AfterExecution::Report { cache: CacheStatus::Uncached, unprovable: false }
    );
    assert_eq!(
        after_execution(none, TaskStatus::Succeeded, &ok, false, false),
        AfterExecution::Report { cache: CacheStatus::Uncached, unprovable: false }
    );
}

#[test]
fn outputs_matching_nothing_names_each_declared_pattern_no_entry_matches() {
    let manifest =
        OutputManifest::new(vec![file("web/dist/a.js", b"a"), file("web/out.txt", b"o")]);
    let pats = |p: &[&str]| p.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
    // A typo beside a pattern that matched; a literal that exists; an exclusion is not judged.
    assert_eq!(
        outputs_matching_nothing(
            "web",
            &pats(&["dist/**", "dsit/**", "out.txt", "!dist/x"]),
            &manifest
        ),
        ["dsit/**"]
    );
    // Patterns are the project's: `dist/**` of another project matches nothing here.
    assert_eq!(outputs_matching_nothing("api", &pats(&["dist/**"]), &manifest), ["dist/**"]);
    assert!(outputs_matching_nothing("web", &[], &manifest).is_empty());
    // An empty tree matches nothing at all.
    let empty = OutputManifest::new(Vec::new());
    assert_eq!(outputs_matching_nothing("", &pats(&["a", "b/**"]), &empty), ["a", "b/**"]);
}

#[test]
fn an_output_emptied_where_the_tasks_newest_entry_had_files_is_refused() {
    let pats = |p: &[&str]| p.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
    let newest = OutputManifest::new(vec![
        file("web/dist/a.js", b"a"),
        file("web/dist/b.js", b"b"),
        file("web/types/a.d.ts", b"t"),
    ]);
    // `tsc -b` skipped its work: dist is empty, types too.
    let empty = OutputManifest::new(Vec::new());
    let emptied = emptied_outputs("web", &pats(&["dist/**", "types/**"]), &empty, &newest);
    assert_eq!(emptied, [("dist/**".to_owned(), 2), ("types/**".to_owned(), 1)]);
    let why = emptied_refusal(&emptied).expect("refused");
    assert!(why.contains("`dist/**` (and `types/**`) matched no file"), "{why}");
    assert!(why.contains("held 2 there") && why.contains("tsbuildinfo"), "{why}");
    // One pattern emptied of two is refused as well.
    let partly = OutputManifest::new(vec![file("web/dist/a.js", b"a")]);
    let emptied = emptied_outputs("web", &pats(&["dist/**", "types/**"]), &partly, &newest);
    assert_eq!(emptied, [("types/**".to_owned(), 1)]);
    // Fewer files, none emptied: saved (with a warning).
    assert!(emptied_outputs("web", &pats(&["dist/**"]), &partly, &newest).is_empty());
    assert!(shrunk_warning(&pats(&["dist/**"]), 1, 3).is_some_and(|w| w.contains("1 files, 3")));
    assert_eq!(shrunk_warning(&pats(&["dist/**"]), 3, 3), None);
    // A pattern the newest entry had nothing for either (optional outputs, a first run's
    // typo): not this rule's business.
    let none_before = OutputManifest::new(vec![file("web/dist/a.js", b"a")]);
    assert!(emptied_outputs("web", &pats(&["coverage/**"]), &empty, &none_before).is_empty());
    assert_eq!(emptied_refusal(&[]), None);
}

#[test]
fn the_save_notes_name_what_they_are_about() {
    assert_eq!(matched_nothing_warning(&[]), None);
    let w = matched_nothing_warning(&["dsit/**".to_owned()]).expect("warned");
    assert!(w.starts_with("declared output `dsit/**` matched no file"), "{w}");
    let n = blocked_cutoff_note(&["lib#build".to_owned()]);
    assert!(
        n.contains("`lib#build` re-ran with identical outputs") && n.contains("sandbox"),
        "{n}"
    );
}
