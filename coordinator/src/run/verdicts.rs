//! Which verdict an execution earns, as pure functions over its report, its fingerprints and
//! manifests (`--verify`; the run actor carries them out, [`super::verify`]): the inputs
//! proof's verdicts from a traced execution, the determinism proof's verdict from a re-run
//! compared with the first execution (deterministic, nondeterministic — allowed or not —,
//! re-run failed, refused, interrupted), and why a task cannot be proven. Tested in
//! `verdicts_tests.rs` without a process.

use prova_protocol::events::{
    Divergence, LOG_TAIL_LINES, MAX_CARRIED_PATHS, Perturbations, TaskStatus, Verdict,
};
use prova_protocol::globs::PathGlobs;
use prova_protocol::manifest::{EntryKind, OutputManifest};
use prova_protocol::spec::{ExitKind, TaskSpec};
use prova_protocol::work::{Finished, TRACE_READ_FAILED};
use prova_protocol::{Digest, WorkerId};

use super::core::PrimaryOutputs;
use super::types::VerifyOptions;
use crate::plan::{PlannedTask, TaskKind};

/// Longest log line a verdict carries (longer ones are cut, marked `…`).
const LOG_LINE_CHARS: usize = 400;

/// The last [`LOG_TAIL_LINES`] non-empty lines of a log, each bounded.
pub(crate) fn log_tail(log: &[u8]) -> Vec<String> {
    let text = String::from_utf8_lossy(log);
    let mut lines: Vec<String> = text
        .lines()
        .rev()
        .filter(|l| !l.trim().is_empty())
        .take(LOG_TAIL_LINES)
        .map(|l| {
            if l.chars().count() > LOG_LINE_CHARS {
                let mut cut: String = l.chars().take(LOG_LINE_CHARS).collect();
                cut.push('…');
                cut
            } else {
                l.to_owned()
            }
        })
        .collect();
    lines.reverse();
    lines
}

/// What fails a `sandbox = true` task among the verdicts of its traced execution, in words
/// (the task's note); `None` when nothing does. A farm's client words it again from the
/// verdicts it judged (`cli::remote::run::Judge`), so farm and local notes agree.
pub fn sandbox_violation(found: &[Verdict]) -> Option<String> {
    fn named(paths: &[String], more: usize) -> String {
        let mut s: Vec<String> = paths.iter().take(5).map(|p| format!("`{p}`")).collect();
        let rest = paths.len().saturating_sub(5) + more;
        if rest > 0 {
            s.push(format!("{rest} more"));
        }
        s.join(", ")
    }
    let v = found.iter().find(|v| v.fails())?;
    Some(match v {
        // A farm coordinator cannot tell which of the lookups are undeclared: every one
        // outside the task's outputs fails it (never a pass it could not prove).
        Verdict::UndeclaredInputs { evidence: Some(e), .. } => {
            let mut touched: Vec<String> = e.missing.clone();
            touched.extend(e.listed.iter().map(|l| format!("{}/", l.dir)));
            touched.extend(e.touched.iter().cloned());
            format!(
                "`sandbox = true`: it looked up paths its declared inputs do not hold: {} \
                 (declare them in `inputs`)",
                named(&touched, 0)
            )
        }
        Verdict::UndeclaredInputs { paths, more, suggest, advice, .. } if !paths.is_empty() => {
            // What `inputs` can declare, and what it cannot (each with its advice).
            let mut what = advice.clone();
            if advice.is_empty() {
                what.push("declare them in `inputs`".to_owned());
            } else if !suggest.is_empty() {
                what.push("declare the others in `inputs`".to_owned());
            }
            format!(
                "`sandbox = true`: it read undeclared inputs: {} ({})",
                named(paths, *more),
                what.join("; ")
            )
        }
        Verdict::UndeclaredInputs { failed: None, .. } => {
            "`sandbox = true`: it read undeclared inputs".to_owned()
        }
        Verdict::UndeclaredOutputs { paths, more } => format!(
            "`sandbox = true`: it wrote outside its declared outputs: {} (declare them in \
             `outputs`)",
            named(paths, *more)
        ),
        other => format!(
            "`sandbox = true`: it failed with only its declared inputs visible ({})",
            match other {
                Verdict::SandboxFailed { reason, .. } => reason.clone(),
                Verdict::UndeclaredInputs { failed: Some(reason), .. } => reason.clone(),
                o => o.name().to_owned(),
            }
        ),
    })
}

/// The inputs proof's verdicts from a traced execution (held for the task's final report);
/// asked only of a cacheable task under `--verify=inputs` (only those run traced).
/// A run that failed with only its declared inputs visible is never proven complete: it
/// names the undeclared paths it touched, or says it fails there, with its log's tail.
pub(crate) fn inputs_verdicts(
    spec: &TaskSpec,
    trees: &[&str],
    verify: &VerifyOptions,
    f: &Finished,
    status: TaskStatus,
) -> Vec<Verdict> {
    let Some(reads) = &f.reads else { return Vec::new() };
    let mut out = Vec::new();
    let failed = match &f.exit {
        ExitKind::Aborted => {
            let reason = "the run was interrupted: nothing to prove".to_owned();
            return vec![Verdict::NotVerified { reason }];
        }
        ExitKind::SpawnFailed(_) => {
            let reason = format!("the task did not run ({})", f.exit.describe());
            return vec![Verdict::NotVerified { reason }];
        }
        e if status == TaskStatus::Failed || !e.success() => Some(e.describe()),
        _ => None,
    };
    let log_tail = if failed.is_some() { log_tail(&f.log) } else { Vec::new() };
    let verdict = if reads.traced {
        let writes = super::undeclared::undeclared_writes(&spec.project_dir, &spec.outputs, reads);
        if !writes.is_empty() {
            let more = writes.len().saturating_sub(MAX_CARRIED_PATHS);
            let paths = writes[..writes.len().min(MAX_CARRIED_PATHS)].to_vec();
            out.push(Verdict::UndeclaredOutputs { paths, more });
        }
        let judged = match &verify.workspace {
            Some(view) => view.judge(&spec.id.to_string(), &spec.project_dir, reads),
            None => {
                // A farm coordinator: the client, which has the workspace, judges.
                let evidence =
                    super::undeclared::evidence(&spec.project_dir, &spec.outputs, trees, reads);
                if super::undeclared::anything_to_judge(&evidence) {
                    out.push(Verdict::UndeclaredInputs {
                        paths: Vec::new(),
                        traced: true,
                        more: 0,
                        failed,
                        log_tail,
                        suggest: Vec::new(),
                        advice: Vec::new(),
                        evidence: Some(Box::new(evidence)),
                    });
                    return out;
                }
                Default::default()
            }
        };
        match super::undeclared::inputs_verdict(judged, !writes.is_empty(), failed, log_tail) {
            Some(v) => v,
            None => return out,
        }
    } else if let Some(e) = f.output_error.as_ref().filter(|e| e.starts_with(TRACE_READ_FAILED)) {
        // A tracer ran but its trace could not be read: no paths, but a failure is
        // still a failure with only the declared inputs visible.
        match failed {
            Some(reason) => Verdict::SandboxFailed { reason, traced: false, log_tail },
            None => Verdict::NotVerified { reason: e.clone() },
        }
    } else if let Some(reason) = failed {
        Verdict::UndeclaredInputs {
            paths: Vec::new(),
            traced: false,
            more: 0,
            failed: Some(reason),
            log_tail,
            suggest: Vec::new(),
            advice: Vec::new(),
            evidence: None,
        }
    } else {
        Verdict::NotVerified {
            reason: "strace is not installed: reads of undeclared inputs cannot be named (install strace)".to_owned(),
        }
    };
    out.push(verdict);
    out
}

/// The verdict of a proof this run skips for `spec` (key `key`): the task is exempt
/// (`verify = false`, `side_effects = true`), or its key is outside `--verify-sample`.
/// `None`: prove it.
pub(crate) fn skipped_proof(
    spec: &TaskSpec,
    key: Option<&Digest>,
    verify: &VerifyOptions,
) -> Option<Verdict> {
    if let Some(reason) = &spec.proof.exempt {
        return Some(Verdict::Exempt { reason: reason.clone() });
    }
    match (verify.sample, key) {
        (Some(s), Some(k)) if !s.contains(k) => {
            Some(Verdict::NotSampled { fraction_ppm: s.ppm, seed: s.seed })
        }
        _ => None,
    }
}

/// Why a task that executed cannot get a determinism proof.
pub(crate) fn unprovable(t: &PlannedTask) -> Verdict {
    if let Some(reason) = &t.spec.proof.exempt {
        return Verdict::Exempt { reason: reason.clone() };
    }
    let reason = match t.kind {
        TaskKind::Persistent => "a persistent task is never cached".to_owned(),
        TaskKind::Group => "a group: it runs nothing".to_owned(),
        TaskKind::Command if !t.cacheable => "not cacheable (`cache = false`)".to_owned(),
        TaskKind::Command => "--no-cache: nothing was saved, so nothing to prove".to_owned(),
    };
    Verdict::NotVerified { reason }
}

/// What comparing a re-run with the first execution concluded.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Comparison {
    /// A verdict now.
    Verdict(Verdict),
    /// The output trees differ: the divergence, before its file-by-file detail (the actor
    /// fills `files` off the actor when both artifacts exist), for [`divergence_verdict`].
    Diverged(Divergence),
}

/// Compares a determinism re-run `f` (which ran on `rerun_worker`) with the task's first
/// execution. `single_machine`: both ran on one machine (local mode, or the farm placed both
/// on one worker). Outputs matching the task's `verify_ignore` (`spec.proof.ignore`) are
/// left out of the comparison and named in the verdict.
pub(crate) fn compare(
    primary: Option<&PrimaryOutputs>,
    f: &Finished,
    rerun_worker: &WorkerId,
    single_machine: bool,
    spec: &TaskSpec,
) -> Comparison {
    let perturbations = rerun_perturbations(f);
    let ignore = Ignore::new(spec);
    let compared = match (primary, &f.outputs) {
        (Some(p), Some(o)) => Some((ignore.keep(&p.manifest), ignore.keep(&o.manifest))),
        _ => None,
    };
    let ignored = match (primary, &f.outputs) {
        (Some(p), Some(o)) => ignore.named(&p.manifest, &o.manifest),
        _ => Vec::new(),
    };
    let modes = match &compared {
        Some((a, b)) => crate::layers::diff::mode_changes(a, b, 0o077),
        None => Vec::new(),
    };
    let failed = |reason: String| Verdict::RerunFailed {
        reason,
        log_tail: log_tail(&f.log),
        perturbations: perturbations.clone(),
    };
    let same = |p: &PrimaryOutputs, o: &prova_protocol::work::Outputs| match &compared {
        Some((a, b)) if ignore.any() => a.fingerprint() == b.fingerprint(),
        _ => p.fingerprint == o.fingerprint,
    };
    let verdict = match (primary, &f.outputs) {
        _ if matches!(f.exit, ExitKind::Aborted) => {
            Verdict::NotVerified { reason: "the run was interrupted during the re-run".to_owned() }
        }
        _ if !f.exit.success() => failed(f.exit.describe()),
        (_, None) => failed(
            f.output_error
                .clone()
                .unwrap_or_else(|| "the re-run's outputs could not be collected".to_owned()),
        ),
        (None, _) => {
            Verdict::NotVerified { reason: "the first execution's outputs are unknown".to_owned() }
        }
        (Some(_), Some(_)) if ignore.left_nothing(compared.as_ref()) => {
            Verdict::NotVerified { reason: ignore.nothing_compared(&spec.proof.ignore) }
        }
        (Some(p), Some(o)) if same(p, o) && modes.is_empty() => Verdict::ProvenDeterministic {
            rerun_worker: Some(rerun_worker.clone()),
            single_machine,
            perturbations,
            ignored,
        },
        (Some(_), Some(_)) => {
            let d = match &compared {
                Some((a, b)) => a.diff(b),
                None => Default::default(),
            };
            return Comparison::Diverged(Divergence {
                added: d.added,
                removed: d.removed,
                changed: d.changed,
                files: Vec::new(),
                rerun_worker: Some(rerun_worker.clone()),
                single_machine,
                modes,
                perturbations,
                ignored,
            });
        }
    };
    Comparison::Verdict(verdict)
}

/// The fingerprint of what a determinism proof of `spec` compares in `manifest`: the
/// manifest without its `verify_ignore` entries, as [`compare`] leaves them out. `None` when
/// the task ignores nothing (what it compares is the whole fingerprint). The ledger keeps it
/// beside the full fingerprint, so `--trust proven` and `hermeticity` judge what the proof
/// judged (issue 27).
pub(crate) fn compared_fingerprint(spec: &TaskSpec, manifest: &OutputManifest) -> Option<Digest> {
    let ignore = Ignore::new(spec);
    ignore.any().then(|| ignore.keep(manifest).fingerprint())
}

/// The task's `verify_ignore` globs, resolved against its project.
struct Ignore(Option<PathGlobs>);

impl Ignore {
    fn new(spec: &TaskSpec) -> Self {
        if spec.proof.ignore.is_empty() {
            return Self(None);
        }
        // Checked at load: a pattern that does not compile here ignores nothing.
        Self(PathGlobs::new(&spec.project_dir, &spec.proof.ignore).ok())
    }

    fn any(&self) -> bool {
        self.0.is_some()
    }

    fn matches(&self, path: &str) -> bool {
        self.0.as_ref().is_some_and(|g| g.is_match(path))
    }

    /// Whether the ignore left nothing to compare: neither side kept a file or a link (the
    /// directories that held the ignored files prove nothing about the task's bytes). Both
    /// sides, so a re-run that wrote an output the first did not still diverges.
    fn left_nothing(&self, compared: Option<&(OutputManifest, OutputManifest)>) -> bool {
        let only_dirs = |m: &OutputManifest| m.entries.iter().all(|e| e.kind == EntryKind::Dir);
        self.any() && compared.is_some_and(|(a, b)| only_dirs(a) && only_dirs(b))
    }

    /// Why a proof that compared nothing proves nothing, naming the patterns.
    fn nothing_compared(&self, patterns: &[String]) -> String {
        let named: Vec<String> = patterns.iter().map(|p| format!("`{p}`")).collect();
        format!(
            "every output file matches `verify_ignore` ({}): nothing was compared, so nothing \
             is proven (narrow the patterns to the files that may vary)",
            named.join(", ")
        )
    }

    /// `m` without the ignored entries.
    fn keep(&self, m: &OutputManifest) -> OutputManifest {
        let entries = m.entries.iter().filter(|e| !self.matches(&e.path)).cloned().collect();
        OutputManifest { entries }
    }

    /// The ignored paths of either manifest, sorted, each once.
    fn named(&self, a: &OutputManifest, b: &OutputManifest) -> Vec<String> {
        let mut out: Vec<String> = a
            .entries
            .iter()
            .chain(&b.entries)
            .filter(|e| self.matches(&e.path))
            .map(|e| e.path.clone())
            .collect();
        out.sort();
        out.dedup();
        out
    }
}

/// The verdict of a divergence: allowed (`--verify-allow`) or a failure.
pub(crate) fn divergence_verdict(divergence: Divergence, allowed: bool) -> Verdict {
    if allowed {
        Verdict::AllowedNondeterministic(divergence)
    } else {
        Verdict::Nondeterministic(divergence)
    }
}

/// The verdict of a re-run whose worker's report was refused ([`super::core::refusal`]):
/// recorded nowhere, and the proof fails.
pub(crate) fn refused_rerun_verdict(rerun_worker: &WorkerId, why: &str, f: &Finished) -> Verdict {
    Verdict::RerunFailed {
        reason: format!("worker `{rerun_worker}` returned {why}; refused, nothing was recorded"),
        log_tail: Vec::new(),
        perturbations: rerun_perturbations(f),
    }
}

/// The verdict of a re-run that could not be handed out.
pub(crate) fn link_closed_verdict() -> Verdict {
    Verdict::RerunFailed {
        reason: "the worker link closed".to_owned(),
        log_tail: Vec::new(),
        perturbations: Default::default(),
    }
}

/// What a re-run's worker says it perturbed; an older worker that reports nothing is
/// said so, rather than claiming coverage it did not give.
fn rerun_perturbations(f: &Finished) -> Perturbations {
    f.perturbed.clone().unwrap_or_else(|| {
        let mut p = Perturbations::default();
        p.skipped("all", "the worker did not report its perturbations");
        p
    })
}

#[cfg(test)]
#[path = "verdicts_tests.rs"]
mod verdicts_tests;

#[cfg(test)]
#[path = "inputs_tests.rs"]
mod inputs_tests;
