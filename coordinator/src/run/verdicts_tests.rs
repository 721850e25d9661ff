//! Which verdict an execution or a pair of executions earns, from plain values: no worker,
//! tracer, cache or process.

use prova_protocol::events::ModeChange;
use prova_protocol::manifest::{EntryKind, ManifestEntry, OutputManifest};
use prova_protocol::spec::CommandLine;
use prova_protocol::work::Outputs;
use prova_protocol::{AttemptId, Digest, TaskId};

use super::*;

fn file(path: &str, body: &[u8], mode: u32) -> ManifestEntry {
    ManifestEntry {
        path: path.to_owned(),
        kind: EntryKind::File,
        mode,
        size: body.len() as u64,
        digest: Some(Digest::of(body)),
        mtime_ns: 0,
        link_target: None,
    }
}

fn primary(entries: Vec<ManifestEntry>, worker: &str) -> PrimaryOutputs {
    let manifest = OutputManifest::new(entries);
    PrimaryOutputs {
        fingerprint: manifest.fingerprint(),
        manifest,
        artifact: None,
        worker: Some(WorkerId(worker.to_owned())),
    }
}

fn rerun(exit: ExitKind, entries: Option<Vec<ManifestEntry>>) -> Finished {
    let mut f = Finished::never_ran(AttemptId(9), exit);
    f.tries = 1;
    f.outputs = entries.map(|e| {
        let manifest = OutputManifest::new(e);
        Outputs { fingerprint: manifest.fingerprint(), manifest, artifact: None }
    });
    let mut p = Perturbations::default();
    p.applied("clock", "+7d");
    f.perturbed = Some(p);
    f
}

fn w(name: &str) -> WorkerId {
    WorkerId(name.to_owned())
}

fn spec() -> TaskSpec {
    let mut s = TaskSpec::new(TaskId::new("p", "build"), "p".to_owned(), CommandLine::Argv(vec![]));
    s.outputs = vec!["dist/**".to_owned()];
    s
}

#[test]
fn equal_trees_prove_determinism_naming_the_rerun_worker() {
    let first = primary(vec![file("p/dist/a.js", b"a", 0o644)], "w1");
    let f = rerun(ExitKind::Code(0), Some(vec![file("p/dist/a.js", b"a", 0o644)]));
    let Comparison::Verdict(v) = compare(Some(&first), &f, &w("w2"), false, &spec()) else {
        panic!("equal trees diverged");
    };
    let Verdict::ProvenDeterministic { rerun_worker, single_machine, perturbations, .. } = v else {
        panic!("not proven: {v:?}");
    };
    assert_eq!(rerun_worker, Some(w("w2")));
    assert!(!single_machine);
    assert_eq!(perturbations.applied.len(), 1);
    // The umask perturbation itself (a file made 0600 instead of 0644) is not a divergence.
    let f = rerun(ExitKind::Code(0), Some(vec![file("p/dist/a.js", b"a", 0o600)]));
    assert!(matches!(
        compare(Some(&first), &f, &w("w1"), true, &spec()),
        Comparison::Verdict(Verdict::ProvenDeterministic { single_machine: true, .. })
    ));
}

#[test]
fn different_trees_diverge_by_content_by_presence_and_by_mode() {
    let first =
        primary(vec![file("p/dist/a.js", b"a", 0o644), file("p/dist/gone.js", b"g", 0o644)], "w1");
    let f = rerun(
        ExitKind::Code(0),
        Some(vec![file("p/dist/a.js", b"A", 0o644), file("p/dist/new.js", b"n", 0o644)]),
    );
    let Comparison::Diverged(d) = compare(Some(&first), &f, &w("w2"), false, &spec()) else {
        panic!("different trees were proven equal");
    };
    assert_eq!(d.changed, vec!["p/dist/a.js".to_owned()]);
    assert_eq!(d.added, vec!["p/dist/new.js".to_owned()]);
    assert_eq!(d.removed, vec!["p/dist/gone.js".to_owned()]);
    assert_eq!(d.rerun_worker, Some(w("w2")));
    assert!(d.files.is_empty(), "the file-by-file detail is the actor's to fill");
    // Same content, an exec bit the re-run did not set: the fingerprint differs.
    let first = primary(vec![file("p/dist/run.sh", b"x", 0o755)], "w1");
    let f = rerun(ExitKind::Code(0), Some(vec![file("p/dist/run.sh", b"x", 0o644)]));
    assert!(matches!(compare(Some(&first), &f, &w("w2"), false, &spec()), Comparison::Diverged(_)));
    // Same fingerprint, group bits that are not the umask's: a mode divergence.
    let first = primary(vec![file("p/dist/a", b"x", 0o640)], "w1");
    let f = rerun(ExitKind::Code(0), Some(vec![file("p/dist/a", b"x", 0o664)]));
    let Comparison::Diverged(d) = compare(Some(&first), &f, &w("w2"), false, &spec()) else {
        panic!("a mode change was proven equal");
    };
    assert_eq!(d.modes, vec![ModeChange { path: "p/dist/a".into(), modes: (0o640, 0o664) }]);
    assert!(d.changed.is_empty());
}

#[test]
fn a_divergence_fails_unless_the_task_is_allowed() {
    let first = primary(vec![file("p/dist/a.js", b"a", 0o644)], "w1");
    let f = rerun(ExitKind::Code(0), Some(vec![file("p/dist/a.js", b"b", 0o644)]));
    let Comparison::Diverged(d) = compare(Some(&first), &f, &w("w2"), false, &spec()) else {
        panic!("diverged trees were proven equal");
    };
    let denied = divergence_verdict(d.clone(), false);
    assert!(matches!(denied, Verdict::Nondeterministic(_)) && denied.fails());
    let allowed = divergence_verdict(d, true);
    assert!(matches!(allowed, Verdict::AllowedNondeterministic(_)) && !allowed.fails());
}

#[test]
fn a_rerun_that_fails_or_returns_nothing_fails_the_proof_with_its_log() {
    let first = primary(vec![file("p/dist/a.js", b"a", 0o644)], "w1");
    let mut f = rerun(ExitKind::Code(3), None);
    f.log = b"compiling\n\nerror: TZ not UTC\n".to_vec();
    let Comparison::Verdict(Verdict::RerunFailed { reason, log_tail, perturbations }) =
        compare(Some(&first), &f, &w("w2"), false, &spec())
    else {
        panic!("a failed re-run was not rerun-failed");
    };
    assert_eq!(reason, "exit code 3");
    assert_eq!(log_tail, vec!["compiling".to_owned(), "error: TZ not UTC".to_owned()]);
    assert_eq!(perturbations.applied.len(), 1);
    for exit in [ExitKind::TimedOut, ExitKind::Signal(9), ExitKind::SpawnFailed("no sh".into())] {
        let f = rerun(exit.clone(), Some(vec![file("p/dist/a.js", b"a", 0o644)]));
        assert!(
            matches!(
                compare(Some(&first), &f, &w("w2"), false, &spec()),
                Comparison::Verdict(Verdict::RerunFailed { .. })
            ),
            "{exit:?}"
        );
    }
    // It succeeded, but its outputs could not be collected.
    let mut f = rerun(ExitKind::Code(0), None);
    let Comparison::Verdict(Verdict::RerunFailed { reason, .. }) =
        compare(Some(&first), &f, &w("w2"), false, &spec())
    else {
        panic!("missing outputs proved something");
    };
    assert_eq!(reason, "the re-run's outputs could not be collected");
    f.output_error = Some("packing failed: disk full".into());
    assert!(matches!(
        compare(Some(&first), &f, &w("w2"), false, &spec()),
        Comparison::Verdict(Verdict::RerunFailed { reason, .. }) if reason == "packing failed: disk full"
    ));
}

#[test]
fn an_interrupted_rerun_or_an_unknown_first_execution_proves_nothing() {
    let first = primary(vec![file("p/dist/a.js", b"a", 0o644)], "w1");
    let f = rerun(ExitKind::Aborted, None);
    let v = compare(Some(&first), &f, &w("w2"), false, &spec());
    assert_eq!(
        v,
        Comparison::Verdict(Verdict::NotVerified {
            reason: "the run was interrupted during the re-run".into()
        })
    );
    let f = rerun(ExitKind::Code(0), Some(vec![file("p/dist/a.js", b"a", 0o644)]));
    assert_eq!(
        compare(None, &f, &w("w2"), false, &spec()),
        Comparison::Verdict(Verdict::NotVerified {
            reason: "the first execution's outputs are unknown".into()
        })
    );
}

#[test]
fn a_worker_that_reports_no_perturbations_is_said_to_have_applied_none() {
    let first = primary(vec![file("p/dist/a.js", b"a", 0o644)], "w1");
    let mut f = rerun(ExitKind::Code(0), Some(vec![file("p/dist/a.js", b"a", 0o644)]));
    f.perturbed = None;
    let Comparison::Verdict(Verdict::ProvenDeterministic { perturbations, .. }) =
        compare(Some(&first), &f, &w("w2"), false, &spec())
    else {
        panic!("not proven");
    };
    assert!(perturbations.applied.is_empty());
    assert_eq!(perturbations.not_applied.len(), 1);
    assert_eq!(perturbations.not_applied[0].what, "all");
}

#[test]
fn a_refused_rerun_or_a_closed_link_fails_the_proof() {
    let f = rerun(ExitKind::Code(0), None);
    let v = refused_rerun_verdict(&w("evil"), "a fingerprint that is not its manifest's", &f);
    assert!(v.fails());
    let Verdict::RerunFailed { reason, .. } = v else { panic!("{v:?}") };
    assert_eq!(
        reason,
        "worker `evil` returned a fingerprint that is not its manifest's; refused, nothing was recorded"
    );
    assert!(link_closed_verdict().fails());
}

#[test]
fn a_task_that_cannot_be_proven_says_why() {
    let mk = |kind, cacheable| PlannedTask {
        id: TaskId::new("p", "t"),
        project: usize::MAX,
        kind,
        spec: spec(),
        cacheable,
        deps: vec![],
        requested: true,
        inputs: vec![],
    };
    let reason = |t: &PlannedTask| match unprovable(t) {
        Verdict::NotVerified { reason } => reason,
        v => panic!("{v:?}"),
    };
    assert_eq!(reason(&mk(TaskKind::Persistent, false)), "a persistent task is never cached");
    assert_eq!(reason(&mk(TaskKind::Group, false)), "a group: it runs nothing");
    assert_eq!(reason(&mk(TaskKind::Command, false)), "not cacheable (`cache = false`)");
    assert_eq!(
        reason(&mk(TaskKind::Command, true)),
        "--no-cache: nothing was saved, so nothing to prove"
    );
}

#[test]
fn a_log_tail_keeps_the_last_non_empty_lines_each_bounded() {
    let mut log = String::new();
    for i in 0..LOG_TAIL_LINES + 3 {
        log.push_str(&format!("line {i}\n\n"));
    }
    log.push_str(&"x".repeat(1000));
    let tail = log_tail(log.as_bytes());
    assert_eq!(tail.len(), LOG_TAIL_LINES);
    assert_eq!(tail[0], format!("line {}", 4));
    let last = tail.last().map(String::as_str).unwrap_or_default();
    assert_eq!(last.chars().count(), 401);
    assert!(last.ends_with('…'));
}

/// `spec()` with `verify_ignore` patterns (project-relative, as written).
fn ignoring(patterns: &[&str]) -> TaskSpec {
    let mut s = spec();
    s.proof.ignore = patterns.iter().map(|p| (*p).to_owned()).collect();
    s
}

#[test]
fn an_ignored_output_that_varies_leaves_the_rest_proven_and_is_named() {
    let first = primary(
        vec![file("p/dist/a.js", b"a", 0o644), file("p/dist/build-info.json", b"t1", 0o644)],
        "w1",
    );
    let f = rerun(
        ExitKind::Code(0),
        Some(vec![file("p/dist/a.js", b"a", 0o644), file("p/dist/build-info.json", b"t2", 0o600)]),
    );
    let ignore = ignoring(&["dist/build-info.json"]);
    let Comparison::Verdict(Verdict::ProvenDeterministic { ignored, .. }) =
        compare(Some(&first), &f, &w("w2"), false, &ignore)
    else {
        panic!("the ignored file's difference failed the proof");
    };
    assert_eq!(ignored, vec!["p/dist/build-info.json".to_owned()]);
    // Without the pattern the same pair diverges.
    assert!(matches!(compare(Some(&first), &f, &w("w2"), false, &spec()), Comparison::Diverged(_)));
}

#[test]
fn an_ignore_pattern_never_hides_a_difference_elsewhere() {
    // Changed content, an added file, a removed file, a mode change: each outside the
    // ignored glob still diverges, and the divergence still names what was ignored.
    let base = || vec![file("p/dist/a.js", b"a", 0o644), file("p/dist/info/t.json", b"1", 0o644)];
    let ignore = ignoring(&["dist/info/**"]);
    let cases: Vec<(&str, Vec<ManifestEntry>)> = vec![
        (
            "changed",
            vec![file("p/dist/a.js", b"A", 0o644), file("p/dist/info/t.json", b"2", 0o644)],
        ),
        (
            "added",
            vec![
                file("p/dist/a.js", b"a", 0o644),
                file("p/dist/b.js", b"b", 0o644),
                file("p/dist/info/t.json", b"2", 0o644),
            ],
        ),
        ("removed", vec![file("p/dist/info/t.json", b"2", 0o644)]),
        ("mode", vec![file("p/dist/a.js", b"a", 0o664), file("p/dist/info/t.json", b"2", 0o644)]),
    ];
    for (what, entries) in cases {
        let first = primary(base(), "w1");
        let f = rerun(ExitKind::Code(0), Some(entries));
        let Comparison::Diverged(d) = compare(Some(&first), &f, &w("w2"), false, &ignore) else {
            panic!("{what}: a difference outside the ignored glob was proven equal");
        };
        assert_eq!(d.ignored, vec!["p/dist/info/t.json".to_owned()], "{what}");
        assert!(!d.changed.contains(&"p/dist/info/t.json".to_owned()), "{what}: {d:?}");
    }
}

#[test]
fn an_exempt_task_skips_its_proofs_whatever_the_sample() {
    let mut s = spec();
    s.proof.exempt = Some("`verify = false` in its config".to_owned());
    let key = Digest::of(b"k");
    let all = VerifyOptions { determinism: true, ..VerifyOptions::default() };
    assert_eq!(
        skipped_proof(&s, Some(&key), &all),
        Some(Verdict::Exempt { reason: "`verify = false` in its config".to_owned() })
    );
    assert_eq!(skipped_proof(&spec(), Some(&key), &all), None, "not exempt: proven");
}

#[test]
fn the_sample_is_a_function_of_key_and_seed() {
    use prova_protocol::wire::VerifySample;
    let keys: Vec<Digest> = (0..2000u32).map(|i| Digest::of(&i.to_le_bytes())).collect();
    let opts = |ppm, seed| VerifyOptions {
        determinism: true,
        sample: Some(VerifySample { ppm, seed }),
        ..VerifyOptions::default()
    };
    let chosen = |o: &VerifyOptions| -> Vec<bool> {
        keys.iter().map(|k| skipped_proof(&spec(), Some(k), o).is_none()).collect()
    };
    let tenth = chosen(&opts(100_000, 0));
    assert_eq!(tenth, chosen(&opts(100_000, 0)), "the same key is sampled the same way twice");
    let n = tenth.iter().filter(|b| **b).count();
    assert!((100..=300).contains(&n), "about a tenth of 2000 keys, got {n}");
    assert_ne!(tenth, chosen(&opts(100_000, 1)), "another seed draws another sample");
    assert!(chosen(&opts(1_000_000, 5)).iter().all(|b| *b), "a whole sample proves every key");
    assert!(chosen(&opts(0, 5)).iter().all(|b| !b), "an empty sample proves none");
    // A larger fraction with the same seed keeps every key of the smaller one.
    let half = chosen(&opts(500_000, 0));
    assert!(tenth.iter().zip(&half).all(|(t, h)| !t || *h));
    let left_out = skipped_proof(
        &spec(),
        Some(&keys[tenth.iter().position(|b| !b).unwrap_or(0)]),
        &opts(100_000, 0),
    );
    assert_eq!(left_out, Some(Verdict::NotSampled { fraction_ppm: 100_000, seed: 0 }));
}

fn dir(path: &str) -> ManifestEntry {
    ManifestEntry {
        path: path.to_owned(),
        kind: EntryKind::Dir,
        mode: 0o755,
        size: 0,
        digest: None,
        mtime_ns: 0,
        link_target: None,
    }
}

/// The reason of a `NotVerified` comparison, or a panic naming what it was.
#[track_caller]
fn not_verified(c: Comparison) -> String {
    match c {
        Comparison::Verdict(Verdict::NotVerified { reason }) => reason,
        other => panic!("expected not-verified, got {other:?}"),
    }
}

#[test]
fn an_ignore_that_covers_every_output_proves_nothing() {
    // Issue 27: with every output ignored nothing was compared, yet the verdict said
    // "proven deterministic".
    let first = primary(vec![file("p/dist/stamp.txt", b"t1", 0o644)], "w1");
    let f = rerun(ExitKind::Code(0), Some(vec![file("p/dist/stamp.txt", b"t2", 0o644)]));
    for patterns in [&["dist/**"][..], &["dist/stamp.txt"], &["**/*.txt", "dist/x"]] {
        let why = not_verified(compare(Some(&first), &f, &w("w2"), false, &ignoring(patterns)));
        assert!(why.contains("verify_ignore"), "{why}");
        for p in patterns {
            assert!(why.contains(&format!("`{p}`")), "the reason names {p}: {why}");
        }
    }
    // Identical bytes change nothing: still nothing was compared.
    let same = rerun(ExitKind::Code(0), Some(vec![file("p/dist/stamp.txt", b"t1", 0o644)]));
    not_verified(compare(Some(&first), &same, &w("w2"), false, &ignoring(&["dist/**"])));
}

#[test]
fn directories_left_after_the_ignore_are_not_a_comparison() {
    // Every file is ignored; the directories that held them remain in both manifests and
    // agree. A tree of empty directories is not what the task was asked to prove.
    let entries = |stamp: &[u8]| {
        vec![dir("p/dist"), dir("p/dist/meta"), file("p/dist/meta/stamp.txt", stamp, 0o644)]
    };
    let first = primary(entries(b"t1"), "w1");
    let f = rerun(ExitKind::Code(0), Some(entries(b"t2")));
    let why =
        not_verified(compare(Some(&first), &f, &w("w2"), false, &ignoring(&["dist/meta/*.txt"])));
    assert!(why.contains("`dist/meta/*.txt`"), "{why}");
    // A symlink left over is an output that was compared.
    let link = ManifestEntry {
        path: "p/dist/latest".into(),
        kind: EntryKind::Symlink,
        mode: 0o777,
        size: 0,
        digest: None,
        mtime_ns: 0,
        link_target: Some("meta".into()),
    };
    let mut with_link = entries(b"t1");
    with_link.push(link.clone());
    let mut rerun_link = entries(b"t2");
    rerun_link.push(link);
    let f = rerun(ExitKind::Code(0), Some(rerun_link));
    assert!(matches!(
        compare(
            Some(&primary(with_link, "w1")),
            &f,
            &w("w2"),
            false,
            &ignoring(&["dist/meta/*.txt"])
        ),
        Comparison::Verdict(Verdict::ProvenDeterministic { .. })
    ));
}

#[test]
fn an_ignore_that_covers_everything_never_hides_a_failure_or_a_new_output() {
    let ignore = ignoring(&["dist/stamp.txt"]);
    let first = primary(vec![dir("p/dist"), file("p/dist/stamp.txt", b"t1", 0o644)], "w1");
    // A re-run that failed is a failed proof, whatever was ignored.
    let failed = rerun(ExitKind::Code(1), Some(vec![file("p/dist/stamp.txt", b"t2", 0o644)]));
    assert!(matches!(
        compare(Some(&first), &failed, &w("w2"), false, &ignore),
        Comparison::Verdict(Verdict::RerunFailed { .. })
    ));
    // A re-run that wrote an output the first did not: a divergence, not "nothing compared".
    let more = rerun(
        ExitKind::Code(0),
        Some(vec![
            dir("p/dist"),
            file("p/dist/stamp.txt", b"t2", 0o644),
            file("p/dist/x", b"x", 0o644),
        ]),
    );
    let Comparison::Diverged(d) = compare(Some(&first), &more, &w("w2"), false, &ignore) else {
        panic!("an extra output of the re-run was not a divergence");
    };
    assert_eq!(d.added, vec!["p/dist/x".to_owned()]);
    // And the other way round: the first wrote it, the re-run did not.
    let fewer =
        rerun(ExitKind::Code(0), Some(vec![dir("p/dist"), file("p/dist/stamp.txt", b"t2", 0o644)]));
    let first = primary(
        vec![dir("p/dist"), file("p/dist/stamp.txt", b"t1", 0o644), file("p/dist/x", b"x", 0o644)],
        "w1",
    );
    assert!(matches!(
        compare(Some(&first), &fewer, &w("w2"), false, &ignore),
        Comparison::Diverged(_)
    ));
}
