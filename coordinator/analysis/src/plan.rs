//! From a selected task graph to a [`RunPlan`]: one fully resolved [`TaskSpec`] per node
//! (environment values read once, forwarded args on requested tasks only). The scheduler's
//! view of a plan (`SchedPlan::sched_plan`) is defined in the coordinator's `scheduler`,
//! above this crate. Which upstreams an exec root of a task holds
//! ([`exec_root_upstreams`]) is answered here, once, for the run, the keys and the proofs.

use std::path::PathBuf;

use prova_protocol::TaskId;
use prova_protocol::spec::TaskSpec;

use crate::graph::TaskGraph;
use crate::workspace::{TaskDef, Workspace};

/// What kind of execution a node needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TaskKind {
    /// No command: done when its deps are.
    Group,
    /// A command that runs to completion.
    Command,
    /// A long-running command (dev server).
    Persistent,
}

/// One node, resolved.
#[derive(Clone, Debug)]
pub struct PlannedTask {
    /// `project#task`.
    pub id: TaskId,
    /// Index of its project in `Workspace::projects` (`usize::MAX` when the plan did not
    /// come from a workspace, e.g. on a coordinator).
    pub project: usize,
    /// Group, command or persistent.
    pub kind: TaskKind,
    /// What the worker runs (for groups: an empty command that is never sent).
    pub spec: TaskSpec,
    /// Whether its outputs may be cached (`cache = true`, not persistent, has a command).
    pub cacheable: bool,
    /// Node indices this waits for.
    pub deps: Vec<usize>,
    /// Whether the user asked for it.
    pub requested: bool,
    /// Its input files with digests (filled once keys are known; what an exec root holds).
    pub inputs: Vec<prova_protocol::wire::InputRef>,
}

/// Everything a run needs that does not change while it runs.
#[derive(Clone, Debug)]
pub struct RunPlan {
    /// The workspace root.
    pub root: PathBuf,
    /// One entry per node, in graph order.
    pub tasks: Vec<PlannedTask>,
}

impl RunPlan {
    /// Resolves `graph` (a selection from `ws`) into specs. `env` reads the invoking
    /// environment; `args` are forwarded to requested tasks.
    pub fn new(
        ws: &Workspace,
        graph: &TaskGraph,
        args: &[String],
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Self {
        let tasks = graph
            .nodes
            .iter()
            .map(|n| {
                let project = &ws.projects[n.project];
                let def = project.tasks.get(&n.name);
                let kind = match def {
                    Some(d) if d.command.is_none() => TaskKind::Group,
                    Some(d) if d.persistent => TaskKind::Persistent,
                    Some(_) => TaskKind::Command,
                    None => TaskKind::Group,
                };
                let spec =
                    spec_for(&n.id, &project.dir, def, if n.requested { args } else { &[] }, env);
                PlannedTask {
                    id: n.id.clone(),
                    project: n.project,
                    kind,
                    cacheable: kind == TaskKind::Command && def.is_some_and(|d| d.cache),
                    spec,
                    deps: n.deps.clone(),
                    requested: n.requested,
                    inputs: Vec::new(),
                }
            })
            .collect();
        Self { root: ws.root.clone(), tasks }
    }

    /// The task's definition in `ws`, if it came from there.
    pub fn def<'a>(&self, ws: &'a Workspace, i: usize) -> Option<&'a TaskDef> {
        let t = &self.tasks[i];
        ws.projects.get(t.project).and_then(|p| p.tasks.get(t.id.task()))
    }

    /// The index of a task.
    pub fn position(&self, id: &TaskId) -> Option<usize> {
        self.tasks.iter().position(|t| &t.id == id)
    }
}

fn spec_for(
    id: &TaskId,
    project_dir: &str,
    def: Option<&TaskDef>,
    args: &[String],
    env: &dyn Fn(&str) -> Option<String>,
) -> TaskSpec {
    let command = def
        .and_then(|d| d.command.clone())
        .unwrap_or(prova_protocol::spec::CommandLine::Argv(Vec::new()));
    let mut vars = Vec::new();
    let mut unset = Vec::new();
    if let Some(d) = def {
        // Declared env first (keyed), then pass-through (not keyed); a name in both is set once.
        for name in d.env.iter().chain(&d.pass_env) {
            if vars.iter().any(|(k, _): &(String, String)| k == name) || unset.contains(name) {
                continue;
            }
            match env(name) {
                Some(v) => vars.push((name.clone(), v)),
                None => unset.push(name.clone()),
            }
        }
    }
    TaskSpec {
        id: id.clone(),
        project_dir: project_dir.to_owned(),
        command,
        args: args.to_vec(),
        env: vars,
        unset_env: unset,
        timeout_ms: def
            .and_then(|d| d.timeout)
            .map(|t| t.as_millis().min(u128::from(u64::MAX)) as u64),
        retries: def.map_or(0, |d| d.retries),
        outputs: def.map(|d| d.outputs.clone()).unwrap_or_default(),
        persistent: def.is_some_and(|d| d.persistent),
        ready_when: def.and_then(|d| d.ready_when.clone()),
        network: def.is_some_and(|d| d.network),
        labels: def.map(|d| d.labels.clone()).unwrap_or_default(),
        proof: def.map(|d| d.policy.proof()).unwrap_or_default(),
        runtime: Vec::new(),
        programs: Vec::new(),
        absent_programs: Vec::new(),
        // Filled with the inputs, once the keys are known.
        stand_ins: Vec::new(),
    }
}

/// Whether `t`'s exec roots hold its direct dependencies' outputs only: `upstream_outputs =
/// "direct"`, which counts only on a confined task (config refuses it otherwise; a plan from
/// the wire may say anything).
pub fn direct_only(t: &PlannedTask) -> bool {
    t.spec.proof.direct_upstreams && t.spec.proof.sandbox
}

/// The upstreams whose artifacts an exec root of `node` holds, by node index, ascending —
/// and so, for a confined task (`sandbox = true`), every upstream whose outputs it can read:
/// every upstream, direct or transitive; under `upstream_outputs = "direct"`
/// ([`direct_only`]) its direct dependencies only, a group among them seen through (it only
/// stands for its deps). The exec roots (`upstream_artifacts` in the run), the keys
/// (`keys::progressive::Closure::outputs`) and the inputs proof (`InputScope::represents`)
/// all draw on this one answer, so a key never leaves out bytes its task could read.
pub fn exec_root_upstreams(tasks: &[PlannedTask], node: usize) -> Vec<usize> {
    held_upstreams(
        tasks.len(),
        node,
        direct_only(&tasks[node]),
        |d| &tasks[d].deps,
        |d| tasks[d].kind == TaskKind::Group,
    )
}

/// Whether `t` is confined (`sandbox = true`): every execution of it runs in an exec root
/// holding only its declared inputs and its upstreams' outputs, and fails on any other read.
/// So its key may fold its upstreams' bytes alone (`keys::progressive::trusts_outputs`).
pub fn confined(t: &PlannedTask) -> bool {
    t.spec.proof.sandbox
}

/// The upstreams whose keys `node`'s key folds, directly or through another's — so whose
/// inputs, and the entry names of whose project directories, it keys too — by node index,
/// ascending: every upstream, direct or transitive, of a task that is not confined (in place
/// it can read an upstream's sources: `tsc` resolving a project reference does); none of a
/// confined one (`sandbox = true`), whose key folds its upstreams' bytes instead (the keys of
/// its direct dependencies without outputs aside: left out here, so a read of their inputs
/// stays undeclared). Its exec roots hold those inputs (`Prepared::exec_root_inputs`) and show
/// those names, and the inputs proof counts them as keyed (`InputScope::upstream_input`).
pub fn keyed_upstreams(tasks: &[PlannedTask], node: usize) -> Vec<usize> {
    if confined(&tasks[node]) {
        return Vec::new();
    }
    held_upstreams(tasks.len(), node, false, |d| &tasks[d].deps, |_| false)
}

/// [`exec_root_upstreams`] over any graph: `deps` of a node, whether it is a group, and
/// whether `node` holds its direct dependencies only (`direct`).
pub fn held_upstreams<'a>(
    n: usize,
    node: usize,
    direct: bool,
    deps: impl Fn(usize) -> &'a [usize],
    group: impl Fn(usize) -> bool,
) -> Vec<usize> {
    let mut seen = vec![false; n];
    let mut stack = deps(node).to_vec();
    let mut out = Vec::new();
    while let Some(d) = stack.pop() {
        if std::mem::replace(&mut seen[d], true) {
            continue;
        }
        out.push(d);
        if !direct || group(d) {
            stack.extend_from_slice(deps(d));
        }
    }
    out.sort_unstable();
    out
}
