//! The resolved workspace: what every later stage (task graph, keys, scheduling) reads. Built
//! by [`Workspace::load`] from the workspace root's `prova.toml`, each project's own
//! `prova.toml` and `package.json` (the reading lives in [`crate::config`]). Every field is
//! public plain data so other modules' tests can build a workspace by hand.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use prova_protocol::spec::CommandLine;

use crate::location::{Located, Location};

/// A loaded workspace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Workspace {
    /// The directory holding the root `prova.toml`, absolute and canonical.
    pub root: PathBuf,
    /// The root `prova.toml`, absolute.
    pub config_file: PathBuf,
    /// `[workspace]`.
    pub settings: WorkspaceSettings,
    /// Every project, sorted by directory.
    pub projects: Vec<Project>,
}

impl Workspace {
    /// The project named `name`. A linear scan: build a map once when looking up many.
    pub fn project(&self, name: &str) -> Option<&Project> {
        self.projects.iter().find(|p| p.name == name)
    }

    /// The project whose directory is `dir` (workspace-relative, `""` for the root).
    pub fn project_in(&self, dir: &str) -> Option<&Project> {
        self.projects.binary_search_by(|p| p.dir.as_str().cmp(dir)).ok().map(|i| &self.projects[i])
    }

    /// Every project name, in directory order.
    pub fn project_names(&self) -> impl Iterator<Item = &str> {
        self.projects.iter().map(|p| p.name.as_str())
    }
}

/// The installed-tree patterns of a workspace: `[workspace] trees` as `written`, else the
/// default — `node_modules` at the root and in every project directory of `project_dirs` when
/// the root has a `package.json` (one stat), else none. Workspace-relative directory globs
/// (`*` matches one segment); what each names on disk is `prova_analysis::trees::tree_dirs`.
pub fn tree_patterns(
    root: &Path,
    written: Option<&[String]>,
    project_dirs: &[&str],
) -> Vec<String> {
    match written {
        Some(p) => p.to_vec(),
        None if root.join("package.json").is_file() => std::iter::once("node_modules".to_owned())
            .chain(
                project_dirs.iter().filter(|d| !d.is_empty()).map(|d| format!("{d}/node_modules")),
            )
            .collect(),
        None => Vec::new(),
    }
}

/// `[workspace]`, patterns as written.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WorkspaceSettings {
    /// Globs of project directories.
    pub projects: Vec<String>,
    /// Workspace files folded into every key.
    pub fingerprint: Vec<String>,
    /// Where each `fingerprint` pattern was written (`prova.toml:3:16`), in the same order.
    pub fingerprint_at: Vec<String>,
    /// Workspace files every task reads.
    pub inputs: Vec<String>,
    /// Installed-tree directory globs as written (`None`: the default, see `crate::trees`).
    pub trees: Option<Vec<String>>,
    /// Runtime commands every task's key folds the output of (`crate::keys::runtime`).
    pub runtime: Vec<String>,
    /// Whether keys fold the program a command starts (`crate::keys::binaries`; on unless
    /// `[workspace] runtime_binary = false`).
    pub runtime_binary: bool,
    /// Retries of a task that sets none (never keyed).
    pub retry: Option<u32>,
    /// Timeout of a task that sets none (never keyed).
    pub timeout: Option<Duration>,
    /// `[workspace] fallback = "none"`: a remote run whose farm cannot be reached fails
    /// instead of running locally (the default, `"local"`).
    pub farm_required: bool,
}

/// A project: a directory with its own tasks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Project {
    /// From `[project] name`, else `package.json` `name`, else the directory (`//` for the
    /// workspace root, so the name does not depend on where the repo is checked out).
    pub name: String,
    /// Workspace-relative, `/`-separated, `""` for the root.
    pub dir: String,
    /// Names of the workspace projects this one depends on: `[project] deps` first, then the
    /// `package.json` dependencies that name workspace projects; no duplicates, never itself.
    pub deps: Vec<Located<String>>,
    /// Every workspace task plus the project's own, by name.
    pub tasks: BTreeMap<String, TaskDef>,
    /// The project's own `prova.toml`, absolute, if it has one (the root project's is the
    /// workspace file).
    pub config_file: Option<PathBuf>,
}

impl Project {
    /// The task named `name`.
    pub fn task(&self, name: &str) -> Option<&TaskDef> {
        self.tasks.get(name)
    }
}

/// One task of one project, merged from the workspace default and the project's override,
/// with every default applied.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TaskDef {
    /// The task name (`build`).
    pub name: String,
    /// What to run; `None` for a group task that only runs its deps.
    pub command: Option<CommandLine>,
    /// As written: `^build` | `lint` | `proj#build`, each located.
    pub deps: Vec<Located<String>>,
    /// Whether `deps` came from the project's own `prova.toml` rather than the workspace
    /// default.
    pub deps_from_project: bool,
    /// Input globs; `None` means every file of the project but its outputs.
    pub inputs: Option<Vec<String>>,
    /// Output globs.
    pub outputs: Vec<String>,
    /// Where each output glob was written, in the same order (empty for a task no config
    /// table gave outputs, e.g. one inferred from `package.json`).
    pub outputs_at: Vec<Location>,
    /// Environment variables read: keyed and passed.
    pub env: Vec<String>,
    /// Environment variables passed through, not keyed.
    pub pass_env: Vec<String>,
    /// Wall-clock limit; `None` is no limit.
    pub timeout: Option<Duration>,
    /// Extra attempts after a failure.
    pub retries: u32,
    /// Whether outputs are cached.
    pub cache: bool,
    /// A long-running task (dev server).
    pub persistent: bool,
    /// For a persistent task, a regex its output matches once it is ready.
    pub ready_when: Option<String>,
    /// The platform is not folded into the key.
    pub portable: bool,
    /// The sandbox keeps the network.
    pub network: bool,
    /// Farm placement: labels a worker must carry to run it.
    pub labels: std::collections::BTreeMap<String, String>,
    /// What prova does around it that never changes its outputs (resolved by `crate::config::policy`).
    pub policy: TaskPolicy,
    /// The `[tasks.X]` header that defines it last: the project's override if any, else the
    /// workspace default.
    pub defined_at: Location,
}

impl TaskDef {
    /// A task with every field at its default: no command, no deps, default inputs, no
    /// outputs, no env, no timeout, no retries, cached, not persistent, not portable, no
    /// network.
    pub fn new(name: impl Into<String>, defined_at: Location) -> Self {
        Self {
            name: name.into(),
            command: None,
            deps: Vec::new(),
            deps_from_project: false,
            inputs: None,
            outputs: Vec::new(),
            outputs_at: Vec::new(),
            env: Vec::new(),
            pass_env: Vec::new(),
            timeout: None,
            retries: 0,
            cache: true,
            persistent: false,
            ready_when: None,
            portable: false,
            network: false,
            labels: std::collections::BTreeMap::new(),
            policy: TaskPolicy { verify: true, ..Default::default() },
            defined_at,
        }
    }

    /// Whether the task only groups its deps.
    pub fn is_group(&self) -> bool {
        self.command.is_none()
    }
}

/// A task's resolved policy.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TaskPolicy {
    /// `--verify` proves the task (`verify`, default true; false under `side_effects`).
    pub verify: bool,
    /// Output globs the determinism comparison leaves out.
    pub verify_ignore: Vec<String>,
    /// `side_effects = true`.
    pub side_effects: bool,
    /// The task's own runtime commands (the workspace's are in `WorkspaceSettings`).
    pub runtime: Vec<String>,
    /// Whether the task set `retries` itself (a run or workspace default applies otherwise).
    pub retries_set: bool,
    /// `sandbox = true`.
    pub sandbox: bool,
    /// `upstream_outputs = "direct"` (only with `sandbox`).
    pub direct_upstreams: bool,
}

impl TaskPolicy {
    /// What the proofs are told about the task.
    pub fn proof(&self) -> prova_protocol::spec::ProofPolicy {
        let exempt = if self.side_effects {
            Some("`side_effects = true`: it acts on the world, so it never runs twice".to_owned())
        } else if !self.verify {
            Some("`verify = false` in its config".to_owned())
        } else {
            None
        };
        prova_protocol::spec::ProofPolicy {
            exempt,
            ignore: self.verify_ignore.clone(),
            sandbox: self.sandbox,
            direct_upstreams: self.direct_upstreams,
        }
    }
}
