//! The inputs proof's verdicts from a traced run, from plain values (no tracer or process):
//! judged against a workspace (a local run), and on a farm — the coordinator hands the
//! evidence on and the client judges it the same way ([`on_client`], what
//! `cli/src/remote/run.rs` does), so the two agree by construction.

use std::collections::HashMap;
use std::sync::Arc;

use prova_protocol::spec::CommandLine;
use prova_protocol::work::{Listing, ReadsReport};
use prova_protocol::{AttemptId, TaskId};

use super::*;
use crate::inputs::FileList;
use crate::inputs::files::ListSource;
use crate::run::undeclared::{self, WorkspaceView};

fn spec() -> TaskSpec {
    let mut s = TaskSpec::new(TaskId::new("p", "build"), "p".to_owned(), CommandLine::Argv(vec![]));
    s.outputs = vec!["dist/**".to_owned()];
    s
}

/// A farm coordinator's view: no workspace, every failed lookup outside the outputs counts.
fn farm_verify() -> VerifyOptions {
    VerifyOptions { inputs: true, ..VerifyOptions::default() }
}

/// A trace's report: sorted, as a worker sends it.
fn traced(missing: &[&str], wrote: &[&str]) -> ReadsReport {
    let sorted = |v: &[&str]| {
        let mut v: Vec<String> = v.iter().map(|s| (*s).to_owned()).collect();
        v.sort();
        v
    };
    ReadsReport {
        traced: true,
        missing: sorted(missing),
        wrote: sorted(wrote),
        ..ReadsReport::default()
    }
}

fn with_reads(exit: ExitKind, reads: ReadsReport) -> Finished {
    let mut f = Finished::never_ran(AttemptId(3), exit);
    f.reads = Some(reads);
    f
}

/// A workspace of `files` (written to disk too, each `x`), whose installed trees are
/// `installed` (`(path, holder project)`), of which task `p#build` sees `sees`.
fn view(
    files: &[&str],
    installed: &[(&str, Option<&str>)],
    sees: &[&str],
) -> (tempfile::TempDir, Arc<WorkspaceView>) {
    let d = tempfile::tempdir().unwrap();
    for f in files {
        let path = d.path().join(f);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, "x").unwrap();
    }
    let mut listed: Vec<String> = files
        .iter()
        .filter(|f| !installed.iter().any(|(t, _)| f.starts_with(&format!("{t}/"))))
        .map(|f| (*f).to_owned())
        .collect();
    listed.sort();
    let mut list = FileList::from_paths(listed);
    list.source = Some(ListSource::Walk);
    let view = WorkspaceView {
        root: d.path().to_owned(),
        files: Arc::new(list),
        scopes: Arc::new(HashMap::new()),
        trees: Arc::new(HashMap::from([(
            "p#build".to_owned(),
            sees.iter().map(|t| (*t).to_owned()).collect(),
        )])),
        installed: Arc::new(
            installed.iter().map(|(t, p)| ((*t).to_owned(), p.map(str::to_owned))).collect(),
        ),
    };
    (d, Arc::new(view))
}

fn local(view: &Arc<WorkspaceView>) -> VerifyOptions {
    VerifyOptions { inputs: true, workspace: Some(view.clone()), ..VerifyOptions::default() }
}

/// What a farm client makes of a coordinator's verdicts: each one carrying evidence judged
/// against `view`.
fn on_client(view: &WorkspaceView, verdicts: Vec<Verdict>) -> Vec<Verdict> {
    let wrote_outside = verdicts.iter().any(|v| matches!(v, Verdict::UndeclaredOutputs { .. }));
    verdicts
        .into_iter()
        .filter_map(|v| match v {
            Verdict::UndeclaredInputs { failed, log_tail, evidence: Some(e), .. } => {
                let judged = view.judge("p#build", "p", &e);
                undeclared::inputs_verdict(judged, wrote_outside, failed, log_tail)
            }
            other => Some(other),
        })
        .collect()
}

/// The verdicts of `f` judged locally against `view`, asserting the farm says the same.
#[track_caller]
fn both(
    view: &Arc<WorkspaceView>,
    trees: &[&str],
    f: &Finished,
    status: TaskStatus,
) -> Vec<Verdict> {
    let here = inputs_verdicts(&spec(), trees, &local(view), f, status);
    let farm = inputs_verdicts(&spec(), trees, &farm_verify(), f, status);
    assert!(
        farm.iter()
            .all(|v| !matches!(v, Verdict::UndeclaredInputs { evidence: None, traced: true, .. })),
        "the coordinator never names paths itself: {farm:?}"
    );
    assert_eq!(on_client(view, farm), here, "the farm's verdicts are the local ones");
    here
}

#[test]
fn a_traced_run_that_read_only_declared_inputs_is_proven_complete() {
    let (_d, v) = view(&["p/src/a.ts"], &[("node_modules", None)], &["node_modules"]);
    let f = with_reads(ExitKind::Code(0), traced(&[], &["p/dist/a.js", "p/dist"]));
    assert_eq!(both(&v, &[], &f, TaskStatus::Succeeded), vec![Verdict::ProvenComplete]);
    // Lookups inside its own outputs are its business: nothing for a client to judge.
    let f = with_reads(ExitKind::Code(0), traced(&["p/dist/cache.json"], &[]));
    assert_eq!(
        inputs_verdicts(&spec(), &[], &farm_verify(), &f, TaskStatus::Succeeded),
        vec![Verdict::ProvenComplete]
    );
    // Absent paths inside an installed tree (tsc looking for `@typescript/lib-dom`): the
    // tree's digest keys its absences.
    let probes = ["node_modules/@typescript/lib-dom", "node_modules/.bin/node"];
    let f = with_reads(ExitKind::Code(0), traced(&probes, &[]));
    assert_eq!(
        both(&v, &["node_modules"], &f, TaskStatus::Succeeded),
        vec![Verdict::ProvenComplete]
    );
}

#[test]
fn a_read_inside_an_installed_tree_is_judged_by_the_tree_never_by_inputs() {
    let files = ["node_modules/ts/lib.js", "packages/b/node_modules/x/index.js", "p/src/a.ts"];
    let installed = [("node_modules", None), ("packages/b/node_modules", Some("b"))];
    // A tree the task does not see: named, with which dependency brings it; no pattern.
    let (_d, v) = view(&files, &installed, &["node_modules"]);
    let f = with_reads(ExitKind::Code(0), traced(&["packages/b/node_modules/x/index.js"], &[]));
    let got = both(&v, &["node_modules"], &f, TaskStatus::Succeeded);
    let [Verdict::UndeclaredInputs { paths, suggest, advice, .. }] = got.as_slice() else {
        panic!("{got:?}")
    };
    assert_eq!(paths, &["packages/b/node_modules/x/index.js".to_owned()]);
    assert!(suggest.is_empty(), "{suggest:?}");
    assert!(advice[0].contains("project `b`") && advice[0].contains("dependency"), "{advice:?}");
    // A tree it sees whose file its root lacked: the tree was not there — never proven,
    // and not the task's fault.
    let f = with_reads(ExitKind::Code(0), traced(&["node_modules/ts/lib.js"], &[]));
    let got = both(&v, &["node_modules"], &f, TaskStatus::Succeeded);
    let [Verdict::UndeclaredInputs { paths, advice, .. }] = got.as_slice() else {
        panic!("{got:?}")
    };
    assert_eq!(paths, &["node_modules/ts/lib.js".to_owned()]);
    assert!(advice[0].contains("prova"), "{advice:?}");
}

#[test]
fn a_traced_run_that_read_undeclared_paths_names_them_and_suggests_globs() {
    let (_d, v) = view(&["p/tsconfig.json", "shared/x.ts"], &[], &[]);
    let f = with_reads(
        ExitKind::Code(0),
        traced(&["p/tsconfig.json", "shared/x.ts", "p/gone.d.ts"], &[]),
    );
    let got = both(&v, &[], &f, TaskStatus::Succeeded);
    let [
        Verdict::UndeclaredInputs {
            paths,
            traced: true,
            more: 0,
            failed: None,
            log_tail,
            suggest,
            advice,
            evidence: None,
        },
    ] = got.as_slice()
    else {
        panic!("{got:?}");
    };
    // An absent path nothing ignores counts: the task acts on its absence.
    assert_eq!(
        paths,
        &["p/gone.d.ts".to_owned(), "p/tsconfig.json".to_owned(), "shared/x.ts".to_owned()]
    );
    assert_eq!(
        suggest,
        &["//shared/x.ts".to_owned(), "gone.d.ts".to_owned(), "tsconfig.json".to_owned()]
    );
    assert!(log_tail.is_empty() && advice.is_empty());
    // A listing of a directory holding an entry the root lacked.
    let mut reads = traced(&[], &[]);
    reads.listed = vec![Listing { dir: "shared".into(), entries: vec![], complete: true }];
    let f = with_reads(ExitKind::Code(0), reads);
    let got = both(&v, &[], &f, TaskStatus::Succeeded);
    assert!(
        matches!(got.as_slice(), [Verdict::UndeclaredInputs { paths, .. }] if paths == &["shared/".to_owned()]),
        "{got:?}"
    );
}

#[test]
fn every_undeclared_path_is_carried_up_to_the_bound() {
    let many: Vec<String> = (0..MAX_CARRIED_PATHS + 5).map(|i| format!("q/f{i:05}")).collect();
    let refs: Vec<&str> = many.iter().map(String::as_str).collect();
    let (_d, v) = view(&refs[..3], &[], &[]);
    let mut list = FileList::from_paths(many.clone());
    list.source = Some(ListSource::Walk);
    let v = Arc::new(WorkspaceView { files: Arc::new(list), ..(*v).clone() });
    let f = with_reads(ExitKind::Code(0), traced(&refs, &[]));
    let got = both(&v, &[], &f, TaskStatus::Succeeded);
    let [Verdict::UndeclaredInputs { paths, more, .. }] = got.as_slice() else { panic!("{got:?}") };
    assert_eq!((paths.len(), *more), (MAX_CARRIED_PATHS, 5));
    const { assert!(MAX_CARRIED_PATHS > prova_protocol::events::MAX_NAMED_PATHS) };
}

#[test]
fn writes_outside_the_outputs_are_the_finding_and_are_not_also_inputs() {
    let (_d, v) = view(&["shared/x.ts"], &[], &[]);
    let f = with_reads(
        ExitKind::Code(0),
        traced(&["p/state.tsbuildinfo"], &["p/state.tsbuildinfo", "p/dist/a.js"]),
    );
    assert_eq!(
        both(&v, &[], &f, TaskStatus::Succeeded),
        vec![Verdict::UndeclaredOutputs { paths: vec!["p/state.tsbuildinfo".into()], more: 0 }]
    );
    // With an undeclared read as well, both are named.
    let f = with_reads(ExitKind::Code(0), traced(&["shared/x.ts"], &["p/state.tsbuildinfo"]));
    let got = both(&v, &[], &f, TaskStatus::Succeeded);
    assert!(
        matches!(
            got.as_slice(),
            [Verdict::UndeclaredOutputs { .. }, Verdict::UndeclaredInputs { .. }]
        ),
        "{got:?}"
    );
}

#[test]
fn a_run_that_fails_with_only_its_declared_inputs_is_never_proven_complete() {
    let (_d, v) = view(&["shared/x.ts"], &[], &[]);
    let mut f = with_reads(ExitKind::Code(1), traced(&[], &[]));
    f.log = b"cannot find module 'x'\n".to_vec();
    let got = both(&v, &[], &f, TaskStatus::Failed);
    assert_eq!(
        got,
        vec![Verdict::SandboxFailed {
            reason: "exit code 1".into(),
            traced: true,
            log_tail: vec!["cannot find module 'x'".into()],
        }]
    );
    // An ignored absence judged away on the client: still failed, never complete.
    std::fs::write(v.root.join(".gitignore"), "*.tmp\n").unwrap();
    let f = with_reads(ExitKind::Code(1), traced(&["p/x.tmp"], &[]));
    let got = both(&v, &[], &f, TaskStatus::Failed);
    assert!(matches!(got.as_slice(), [Verdict::SandboxFailed { .. }]), "{got:?}");
    let f = with_reads(ExitKind::Code(1), traced(&["shared/x.ts"], &[]));
    let got = both(&v, &[], &f, TaskStatus::Failed);
    assert!(
        matches!(got.as_slice(), [Verdict::UndeclaredInputs { failed: Some(r), .. }] if r == "exit code 1"),
        "{got:?}"
    );
    // Untraced (no strace), a failure is still named, without paths.
    let f = with_reads(ExitKind::Code(2), ReadsReport::default());
    let got = both(&v, &[], &f, TaskStatus::Failed);
    assert!(
        matches!(got.as_slice(), [Verdict::UndeclaredInputs { traced: false, failed: Some(_), paths, .. }] if paths.is_empty()),
        "{got:?}"
    );
    assert!(got.iter().all(Verdict::fails));
}

#[test]
fn an_inputs_proof_that_could_not_be_made_says_why() {
    let untraced = with_reads(ExitKind::Code(0), ReadsReport::default());
    let got = inputs_verdicts(&spec(), &[], &farm_verify(), &untraced, TaskStatus::Succeeded);
    assert!(
        matches!(got.as_slice(), [Verdict::NotVerified { reason }] if reason.contains("strace is not installed")),
        "{got:?}"
    );
    let aborted = with_reads(ExitKind::Aborted, traced(&["shared/x"], &[]));
    assert_eq!(
        inputs_verdicts(&spec(), &[], &farm_verify(), &aborted, TaskStatus::Aborted),
        vec![Verdict::NotVerified { reason: "the run was interrupted: nothing to prove".into() }]
    );
    let spawn = with_reads(ExitKind::SpawnFailed("no such file".into()), traced(&[], &[]));
    let got = inputs_verdicts(&spec(), &[], &farm_verify(), &spawn, TaskStatus::Failed);
    assert!(
        matches!(got.as_slice(), [Verdict::NotVerified { reason }] if reason.starts_with("the task did not run")),
        "{got:?}"
    );
    let mut unreadable = with_reads(ExitKind::Code(0), ReadsReport::default());
    unreadable.output_error = Some(format!("{TRACE_READ_FAILED}: truncated"));
    let got = inputs_verdicts(&spec(), &[], &farm_verify(), &unreadable, TaskStatus::Succeeded);
    assert!(
        matches!(got.as_slice(), [Verdict::NotVerified { reason }] if reason.starts_with(TRACE_READ_FAILED)),
        "{got:?}"
    );
    let mut unreadable_failed = unreadable.clone();
    unreadable_failed.exit = ExitKind::Code(1);
    let got = inputs_verdicts(&spec(), &[], &farm_verify(), &unreadable_failed, TaskStatus::Failed);
    assert!(matches!(got.as_slice(), [Verdict::SandboxFailed { traced: false, .. }]), "{got:?}");
    // No trace report at all (an untraced attempt): nothing to conclude here.
    let none = Finished::never_ran(AttemptId(1), ExitKind::Code(0));
    assert!(inputs_verdicts(&spec(), &[], &farm_verify(), &none, TaskStatus::Succeeded).is_empty());
}
