//! The stages of one assignment, in order, each a type that owns what it was given and
//! yields the next: [`Checked`] (the assignment against this worker) → [`Placed`] (where it
//! runs) → [`Wrapped`] (the command line and environment it runs with) → [`Executed`] (its
//! tries) → [`Collected`] (what it read and wrote, its outputs) → the [`Finished`] report.
//! A stage that ends the assignment early yields its report instead ([`Stop`]).

use std::path::PathBuf;

use prova_protocol::globs::PathGlobs;
use prova_protocol::spec::ExitKind;
use prova_protocol::task::OwnedTask;
use prova_protocol::work::{
    Assignment, Finished, FromWorker, Isolation, MAX_WROTE_OUTSIDE, Placement, ReadsReport,
    WroteOutside,
};
use regex::Regex;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::{
    WorkerContext, collect, exit_detail, in_env_order, join, no_disk, set_markers, task_env, tries,
};
use crate::exec;
use crate::execroot::OutputLayout;
use crate::execroot::strays::{StrayCheck, Survey};
use crate::mask::SecretMask;
use crate::rootprep::{self, PreparedRoot};
use crate::sandbox::survey;
use crate::treecopies::{TreeCopies, Verdict};

/// The report of an assignment that ends before its last stage (boxed: a `Finished` is large).
pub type Stop = Box<Finished>;

/// A report for `a` that never ran, with `why` as its `SpawnFailed` reason.
fn never_ran(a: &Assignment, why: String) -> Stop {
    Box::new(Finished::never_ran(a.attempt, ExitKind::SpawnFailed(why)))
}

/// The first of `a`'s programs this worker's lookups (on `env`'s `PATH`) give otherwise than
/// the client's key says ([`exec::programs`]).
async fn programs_differ(
    a: &Assignment,
    env: &[(String, String)],
) -> Option<exec::programs::Finding> {
    if a.spec.programs.is_empty() && a.spec.absent_programs.is_empty() {
        return None;
    }
    exec::programs::mismatch(&a.spec.programs, &a.spec.absent_programs, env).await
}

/// Stage 1: the assignment checked against this worker — its output globs and `ready_when`
/// parse, its command line and environment composed, and its runtime inputs and programs
/// give here what they gave on the client. Nothing is written yet.
pub struct Checked {
    pub(super) a: Assignment,
    pub(super) globs: PathGlobs,
    pub(super) ready: Option<Regex>,
    pub(super) argv: Vec<String>,
    pub(super) env: Vec<(String, String)>,
    pub(super) mask: SecretMask,
}

impl Checked {
    /// Checks `a`; a refusal is a report that never ran, saying why.
    pub async fn check(
        a: Assignment,
        ctx: &WorkerContext,
        cancel: &CancellationToken,
    ) -> Result<Self, Stop> {
        let globs = match PathGlobs::new(&a.spec.project_dir, &a.spec.outputs) {
            Ok(g) => g,
            Err(e) => return Err(never_ran(&a, format!("bad outputs: {e}"))),
        };
        let ready = match a.spec.ready_when.as_deref().map(Regex::new).transpose() {
            Ok(r) => r,
            Err(e) => return Err(never_ran(&a, format!("bad ready_when: {e}"))),
        };
        let argv = exec::command_argv(&a.spec.command, &a.spec.args);
        let env = task_env(&ctx.config, &a);
        // A farm task's runtime inputs must give here what they gave on the client.
        if !a.spec.runtime.is_empty() {
            let cwd = if ctx.work_dir.as_os_str().is_empty() {
                std::path::Path::new("/")
            } else {
                &ctx.work_dir
            };
            if let Some(why) =
                exec::runtime::mismatch(&ctx.executor, &a.spec.runtime, &env, cwd, cancel).await
            {
                return Err(never_ran(&a, why));
            }
        }
        // And the programs its command starts must be the client's builds, and those the
        // client found nowhere must be nowhere here.
        if let Some(m) = programs_differ(&a, &env).await {
            return Err(never_ran(&a, m.refusal()));
        }
        // Secret values of the task's declared variables never reach its log (crate::mask).
        let mask = SecretMask::from_env(&a.spec.env);
        Ok(Self { a, globs, ready, argv, env, mask })
    }

    /// Stage 2: where the task runs — the workspace itself, or an exec root built from its
    /// declared inputs and upstream artifacts (fetched first by a farm worker).
    pub async fn place(self, ctx: &WorkerContext) -> Result<Placed, Stop> {
        let (root, cwd, exec_root) = match &self.a.placement {
            Placement::InPlace { workspace_root, .. } => {
                let cwd = join(workspace_root, &self.a.spec.project_dir);
                (workspace_root.clone(), cwd, None)
            }
            Placement::ExecRoot { .. } => match rootprep::prepare(&self.a, ctx).await {
                Ok(p) => (p.root.path().to_owned(), p.root.cwd(), Some(p)),
                Err(e) => {
                    // Fetching inputs or building the root on a full disk is this worker's
                    // failure, not the task's: it runs elsewhere.
                    if let Some(why) = no_disk(ctx, &e, "preparing the exec root") {
                        let mut back = never_ran(&self.a, String::new());
                        super::hand_back(&mut back, why);
                        return Err(back);
                    }
                    return Err(never_ran(&self.a, e.to_string()));
                }
            },
        };
        Ok(Placed { checked: self, root, cwd, exec_root })
    }
}

/// Stage 2: where the task runs. An exec root lives (and is removed) with the stages that
/// follow, until its outputs are collected.
pub struct Placed {
    pub(super) checked: Checked,
    /// The workspace root or the exec root (`PROVA_WORKSPACE`).
    pub(super) root: PathBuf,
    /// The task's working directory: its project's under `root`.
    pub(super) cwd: PathBuf,
    pub(super) exec_root: Option<PreparedRoot>,
}

impl Placed {
    /// Stage 3: the command line wrapped in the sandbox and tracer of an exec root (and a
    /// re-run's perturbations), and the markers and perturbed order of the environment.
    pub fn wrap(self, ctx: &WorkerContext) -> Wrapped {
        let Placed { checked, root, cwd, exec_root } = self;
        let Checked { a, globs, ready, argv, mut env, mask } = checked;
        let task_argv_len = argv.len();
        let (argv, inner, isolation, trace, perturbed) = match &exec_root {
            None => (argv, Vec::new(), Isolation::InPlace, None, None),
            Some(p) => {
                let inner = argv.clone();
                let (wrapped, isolation) = rootprep::wrap(&a, ctx, p, argv, &mut env);
                (wrapped.argv, inner, isolation, wrapped.trace, wrapped.perturbed)
            }
        };
        set_markers(&mut env, &a, &root);
        let argv = if a.perturb.as_ref().is_some_and(|p| p.reverse_env) {
            // `env -i` runs inside the sandbox: what only the host has stays out.
            let inside: Vec<(String, String)> = match isolation {
                Isolation::Bwrap => env
                    .iter()
                    .filter(|(k, _)| !crate::sandbox::bwrap::HOST_ONLY_ENV.contains(&k.as_str()))
                    .cloned()
                    .collect(),
                _ => env.clone(),
            };
            in_env_order(argv, task_argv_len, &inside)
        } else {
            argv
        };
        let report = Finished {
            isolation,
            perturbed,
            ..Finished::never_ran(a.attempt, ExitKind::SpawnFailed(String::new()))
        };
        Wrapped { a, globs, ready, mask, root, cwd, exec_root, argv, inner, env, trace, report }
    }
}

/// Stage 3: what runs, and how: the full argv, the environment, where a trace goes, and the
/// report as far as it is known (how the task is isolated, what a re-run perturbed).
pub struct Wrapped {
    pub(super) a: Assignment,
    pub(super) globs: PathGlobs,
    pub(super) ready: Option<Regex>,
    pub(super) mask: SecretMask,
    pub(super) root: PathBuf,
    pub(super) cwd: PathBuf,
    pub(super) exec_root: Option<PreparedRoot>,
    /// The full argv (sandbox, tracer, perturbations, then the task's own).
    pub(super) argv: Vec<String>,
    /// The task's own argv, for an inputs proof's survey (exec roots only).
    pub(super) inner: Vec<String>,
    pub(super) env: Vec<(String, String)>,
    /// Where strace writes, when the task is traced.
    pub(super) trace: Option<PathBuf>,
    pub(super) report: Finished,
}

impl Wrapped {
    /// Stage 4: the task run — its tries, cleaning declared outputs before each —, then
    /// what a traced run read, surveyed where that can name more. A clean that fails, or a
    /// failure on a farm worker's short disk, ends it here.
    pub async fn execute(
        mut self,
        ctx: &WorkerContext,
        link: &mpsc::Sender<FromWorker>,
        cancel: &CancellationToken,
    ) -> Result<Executed, Stop> {
        // The root as built, surveyed where it was built (`rootprep::prepare`).
        let strays = self.exec_root.as_mut().and_then(|p| p.strays.take());
        let run = tries::Tries {
            a: &self.a,
            globs: &self.globs,
            root: &self.root,
            cwd: &self.cwd,
            argv: &self.argv,
            env: &self.env,
            ready: &self.ready,
            mask: &self.mask,
        };
        let mut report = run.run(ctx, link, cancel, self.report.clone()).await?;
        // The task's processes are gone: what became of the tree copies it read.
        let tree_writes = match self.tree_verdict().await {
            Verdict::Unchanged => None,
            Verdict::Wrote(paths, more) => Some(WroteOutside { paths, more }),
        };
        report.exit_detail = exit_detail(&report.exit, &self.env);
        // What the command looked up may have changed while it ran (the task, or another on
        // this worker, installed a program on its PATH): then the key does not say what ran.
        if report.exit.success()
            && let Some(m) = programs_differ(&self.a, &self.env).await
        {
            report.withheld = Some(m.changed_while_running());
        }
        let failed = !report.exit.success();
        let reads =
            if self.a.trace_reads { Some(self.reads(ctx, failed, cancel).await) } else { None };
        Ok(Executed {
            a: self.a,
            globs: self.globs,
            root: self.root,
            exec_root: self.exec_root,
            reads,
            strays,
            tree_writes,
            report,
        })
    }

    /// Whether the worker's copies of installed trees the task read (without a sandbox,
    /// mirrored with symlinks it could write through) are as built (`crate::treecopies`).
    async fn tree_verdict(&mut self) -> Verdict {
        let Some(p) = self.exec_root.as_mut().filter(|p| !p.tree_leases.is_empty()) else {
            return Verdict::Unchanged;
        };
        let mut leases = std::mem::take(&mut p.tree_leases);
        let judged = OwnedTask::spawn_blocking("worker.tree-verdict", move || {
            let v = TreeCopies::verdict(&mut leases);
            (v, leases)
        })
        .join()
        .await;
        match judged {
            Ok((v, leases)) => {
                p.tree_leases = leases;
                v
            }
            // Not judged (the leases went with the thread, their copies discarded): nothing
            // the task made may be trusted.
            Err(_) => Verdict::Wrote(p.root.trees().iter().map(|t| t.path.clone()).collect(), 0),
        }
    }

    /// What the traced run read: its trace (then removed), settled against the root's
    /// installed trees. A local run whose trace touched a place where its root and the
    /// workspace differ ([`survey::diverged`]: a failed lookup of a workspace file, say) is
    /// surveyed as well — run again with the whole workspace visible, read-only — so every
    /// undeclared read is named in one round, not only the first the root hid; with
    /// `survey_on_failure`, only when it failed. A run that met no such place needs no
    /// survey: the survey would read what it read.
    async fn reads(
        &self,
        ctx: &WorkerContext,
        failed: bool,
        cancel: &CancellationToken,
    ) -> Result<ReadsReport, String> {
        let workspace = match &self.a.placement {
            Placement::ExecRoot { local_source, .. } => local_source.as_deref(),
            _ => None,
        };
        let mut reads =
            collect::trace_reads(self.trace.as_deref(), self.exec_root.as_ref(), workspace).await?;
        if self.a.survey_on_failure && !failed {
            return Ok(reads);
        }
        let (Placement::ExecRoot { local_source: Some(ws), .. }, Some(p)) =
            (&self.a.placement, &self.exec_root)
        else {
            return Ok(reads);
        };
        if !(ctx.sandbox && ctx.strace.is_some()) || cancel.is_cancelled() {
            return Ok(reads);
        }
        let Ok(layout) = OutputLayout::new(&self.a.spec.project_dir, &self.a.spec.outputs) else {
            return Ok(reads);
        };
        let Some(at) = survey::diverged(&reads, ws, &layout) else {
            return Ok(reads);
        };
        tracing::debug!(task = %self.a.spec.id, %at, "surveying: the root and the workspace differ there");
        let root = p.root.path().to_owned();
        let (a, inner, env) = (&self.a, &self.inner, &self.env);
        if let Some(s) = survey::run(a, ctx, ws, &root, inner, env, cancel.clone()).await {
            survey::merge(&mut reads, s);
        }
        Ok(reads)
    }
}

/// Stage 4: the task ran (the report holds its exit, tries, stats and log); what it wrote
/// is still in its root.
pub struct Executed {
    pub(super) a: Assignment,
    pub(super) globs: PathGlobs,
    pub(super) root: PathBuf,
    pub(super) exec_root: Option<PreparedRoot>,
    /// What a traced run read (`Err`: the trace could not be read).
    pub(super) reads: Option<Result<ReadsReport, String>>,
    /// What the exec root held beside the outputs before the task ran.
    pub(super) strays: Option<(StrayCheck, Survey)>,
    /// What the task alone wrote into the worker's copies of installed trees.
    pub(super) tree_writes: Option<WroteOutside>,
    pub(super) report: Finished,
}

impl Executed {
    /// Stage 5: what the run read, what a success wrote outside its outputs, and its
    /// outputs collected, fingerprinted and packed (uploaded by a farm worker).
    pub async fn collect(self, ctx: &WorkerContext) -> Collected {
        let Executed { a, globs, root, exec_root, reads, strays, tree_writes, mut report } = self;
        if let Some(reads) = reads {
            report.reads = Some(reads.unwrap_or_else(|e| {
                report.output_error = Some(e);
                ReadsReport::default()
            }));
        }
        // Collected even beside writes outside the outputs: the coordinator decides (a
        // primary execution fails, a determinism re-run compares its outputs).
        if report.exit.success() && a.collect_outputs {
            collect::outputs(&a, ctx, &root, globs, strays, &mut report).await;
        } else if report.exit.success() {
            report.wrote_outside = collect::stray_writes(strays).await;
        }
        // Through its mirror into a tree copy: outside its outputs, whatever its exit.
        if let Some(w) = tree_writes {
            let into = report.wrote_outside.get_or_insert_with(WroteOutside::default);
            into.paths.extend(w.paths);
            into.paths.sort();
            into.paths.dedup();
            into.more += w.more;
            let over = into.paths.len().saturating_sub(MAX_WROTE_OUTSIDE);
            into.paths.truncate(MAX_WROTE_OUTSIDE);
            into.more += over as u64;
        }
        Collected { exec_root, report }
    }
}

/// Stage 5: the report complete; the exec root still held.
pub struct Collected {
    exec_root: Option<PreparedRoot>,
    pub(super) report: Finished,
}

impl Collected {
    /// The end: the exec root removed, the report to send.
    pub fn finish(self) -> Finished {
        drop(self.exec_root);
        self.report
    }
}
