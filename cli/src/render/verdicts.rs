//! How a proof's verdict reads in the text stream (and in `prova diff`): a proof that
//! passed is one line under its task (the verdict and a short reason); a failed one gives the
//! details — paths, diffs, perturbations, the log's tail. `--json` carries everything.

use prova_protocol::events::Verdict;

/// How a verdict reads in the stream (`None`: not worth a line, e.g. a hit not verified).
pub fn verdict_lines(v: &Verdict, color: bool) -> Option<String> {
    let paint = Paint(color);
    let text = match v {
        Verdict::ProvenDeterministic { rerun_worker, single_machine, perturbations, ignored } => {
            let where_ = match (rerun_worker, single_machine) {
                (_, true) => "single machine".to_owned(),
                (Some(w), false) => format!("re-run on {w}"),
                (None, false) => "re-run elsewhere".to_owned(),
            };
            format!(
                "{} ({where_}{})\n",
                paint.green("verify: proven deterministic"),
                short_reason(perturbations, ignored)
            )
        }
        Verdict::Nondeterministic(d) => nondeterministic(d, false, paint),
        Verdict::AllowedNondeterministic(d) => nondeterministic(d, true, paint),
        Verdict::RerunFailed { reason, log_tail, perturbations } => {
            let mut s = format!(
                "{} ({reason})\n",
                paint.red("verify: the re-run FAILED under its perturbations")
            );
            s.push_str(
                "  the first run succeeded: the task depends on something the re-run changed\n",
            );
            push_perturbations(&mut s, perturbations);
            push_failure(&mut s, None, log_tail);
            s
        }
        Verdict::UndeclaredInputs {
            paths,
            traced: true,
            more,
            failed,
            log_tail,
            suggest,
            advice,
            ..
        } => {
            let mut s = format!("{}\n", paint.red("verify: read undeclared inputs:"));
            push_paths(&mut s, paths, *more);
            push_input_advice(&mut s, paths, suggest, advice);
            push_failure(&mut s, failed.as_deref(), log_tail);
            s
        }
        Verdict::UndeclaredOutputs { paths, more } => {
            let mut s = format!("{}\n", paint.red("verify: wrote outside its declared outputs:"));
            push_paths(&mut s, paths, *more);
            s.push_str("  declare them in outputs (a cache hit would not restore them), or stop writing them\n");
            s
        }
        Verdict::UndeclaredInputs { traced: false, failed, log_tail, .. } => {
            let mut s = format!(
                "{}\n",
                paint.red("verify: an undeclared input was read, install strace for the paths")
            );
            push_failure(&mut s, failed.as_deref(), log_tail);
            s
        }
        Verdict::SandboxFailed { reason, traced, log_tail } => {
            let head = format!("verify: FAILS with only its declared inputs visible ({reason})");
            let mut s = format!("{}\n", paint.red(&head));
            s.push_str(if *traced {
                "  no undeclared workspace path could be named: it may need a file outside the workspace, the network or the environment\n"
            } else {
                "  the trace could not be read, so no path can be named\n"
            });
            push_failure(&mut s, None, log_tail);
            s
        }
        Verdict::ProvenComplete => format!("{}\n", paint.green("verify: inputs proven complete")),
        Verdict::NoOutputs => "verify: no outputs (nothing to replay but the log)\n".to_owned(),
        Verdict::NotVerified { .. } | Verdict::NotSampled { .. } => return None,
        Verdict::Exempt { reason } => format!("verify: exempt ({reason})\n"),
    };
    Some(text)
}

/// ANSI colour for a verdict's head line, or none.
#[derive(Clone, Copy)]
struct Paint(bool);

impl Paint {
    fn code(self, code: &str, s: &str) -> String {
        if self.0 { format!("\x1b[{code}m{s}\x1b[0m") } else { s.to_owned() }
    }
    fn green(self, s: &str) -> String {
        self.code("32", s)
    }
    fn yellow(self, s: &str) -> String {
        self.code("33", s)
    }
    fn red(self, s: &str) -> String {
        self.code("31", s)
    }
}

/// A determinism proof that found the two output trees differ: which paths, how, and under
/// which perturbations.
fn nondeterministic(d: &prova_protocol::events::Divergence, allowed: bool, paint: Paint) -> String {
    let head = if allowed {
        paint.yellow("verify: nondeterministic (allowed by --verify-allow)")
    } else {
        paint.red("verify: NONDETERMINISTIC: the cache would replay one arbitrary output")
    };
    let mut s = format!("{head}\n");
    for (what, list) in [("changed", &d.changed), ("added", &d.added), ("removed", &d.removed)] {
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

/// What to do about the undeclared `paths` an inputs proof named: the patterns to add to
/// `inputs`, and advice for what `inputs` cannot declare.
fn push_input_advice(s: &mut String, paths: &[String], suggest: &[String], advice: &[String]) {
    if paths.iter().any(|p| p.ends_with('/')) {
        s.push_str("  (a path ending in `/` is a directory the task listed: declare its entries, e.g. `dir/*`)\n");
    }
    if !suggest.is_empty() {
        let quoted: Vec<String> = suggest.iter().map(|g| format!("{g:?}")).collect();
        s.push_str(&format!("  add to inputs: {}\n", quoted.join(", ")));
    } else if advice.is_empty() {
        s.push_str("  add them to the task's inputs\n");
    }
    for a in advice {
        s.push_str(&format!("  {a}\n"));
    }
}

/// The rest of a passed proof's one line: how many perturbations, which could not be
/// applied (the proof is weaker without them), how many paths were not compared.
fn short_reason(p: &prova_protocol::events::Perturbations, ignored: &[String]) -> String {
    let mut s = String::new();
    if !p.applied.is_empty() {
        let n = p.applied.len();
        s.push_str(&format!(", {n} perturbation{}", if n == 1 { "" } else { "s" }));
    }
    if !p.not_applied.is_empty() {
        let what: Vec<&str> = p.not_applied.iter().map(|n| n.what.as_str()).collect();
        s.push_str(&format!("; not perturbed: {}", what.join(", ")));
    }
    if !ignored.is_empty() {
        const NAMED: usize = 2;
        let named: Vec<&str> = ignored.iter().take(NAMED).map(String::as_str).collect();
        let more = ignored.len().saturating_sub(NAMED);
        let more = if more > 0 { format!(" and {more} more") } else { String::new() };
        s.push_str(&format!("; not compared (verify_ignore): {}{more}", named.join(", ")));
    }
    s
}

/// The first [`MAX_NAMED_PATHS`] of a verdict's paths, one a line, then how many more
/// (all of them are in `--json`).
fn push_paths(s: &mut String, paths: &[String], more: usize) {
    use prova_protocol::events::MAX_NAMED_PATHS;
    for p in paths.iter().take(MAX_NAMED_PATHS) {
        s.push_str(&format!("  {p}\n"));
    }
    let hidden = more + paths.len().saturating_sub(MAX_NAMED_PATHS);
    if hidden > 0 {
        s.push_str(&format!("  and {hidden} more (every path is in --json)\n"));
    }
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
