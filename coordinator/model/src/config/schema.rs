//! The typed shape of prova's two config file kinds, as written (brief §3). Every table denies
//! unknown keys; values whose place an error may need to name are `Spanned`. Nothing here is
//! resolved: defaults are applied when tasks are merged ([`super::task`]).

use std::collections::BTreeMap;

use serde::Deserialize;
use toml::Spanned;

/// The workspace root's `prova.toml`. Its `[workspace]` table is what marks the root.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkspaceFile {
    /// Workspace-wide settings.
    pub workspace: Option<WorkspaceTable>,
    /// Name and deps of the root directory as a project; only allowed when a `projects`
    /// glob (such as `"."`) makes the root a project.
    pub project: Option<Spanned<ProjectTable>>,
    /// Task defaults: every project gets every task defined here.
    #[serde(default)]
    pub tasks: BTreeMap<Spanned<String>, Spanned<TaskTable>>,
    /// `[cache]`: cache layers above the local one (read by [`super::reapi::load`]).
    pub cache: Option<CacheTable>,
    /// `[exec]`: where tasks execute other than here (read by [`super::reapi::load_exec`]).
    pub exec: Option<ExecTable>,
}

/// `[exec]`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExecTable {
    /// `[exec.reapi]`: a Remote Execution API farm that executes the run's tasks.
    pub reapi: Option<ExecReapiTable>,
}

/// `[exec.reapi]`, as written: `[cache.reapi]`'s endpoint, auth and TLS keys.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExecReapiTable {
    /// `grpc://host:port` or `grpcs://host:port` (TLS).
    pub endpoint: String,
    /// The REAPI instance name. Default: empty.
    #[serde(default)]
    pub instance_name: String,
    /// A file holding a bearer token (workspace-relative or absolute).
    pub token_file: Option<String>,
    /// An environment variable holding a bearer token.
    pub token_env: Option<String>,
    /// Per-call timeout, a humantime string. Default: 30s.
    pub timeout: Option<String>,
    /// A PEM CA bundle to verify a `grpcs://` server with (default: the system's roots).
    pub ca_file: Option<String>,
    /// A PEM client certificate (with `key_file`) for mutual TLS.
    pub cert_file: Option<String>,
    /// The client certificate's PEM private key.
    pub key_file: Option<String>,
}

impl From<ExecReapiTable> for ReapiTable {
    fn from(t: ExecReapiTable) -> Self {
        Self {
            endpoint: t.endpoint,
            instance_name: t.instance_name,
            token_file: t.token_file,
            token_env: t.token_env,
            timeout: t.timeout,
            ca_file: t.ca_file,
            cert_file: t.cert_file,
            key_file: t.key_file,
            upload: None,
        }
    }
}

/// `[cache]`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CacheTable {
    /// `[cache.reapi]`: a Remote Execution API cache (Bazel remote cache) as a layer.
    pub reapi: Option<ReapiTable>,
}

/// `[cache.reapi]`, as written.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReapiTable {
    /// `grpc://host:port` or `grpcs://host:port` (TLS).
    pub endpoint: String,
    /// The REAPI instance name. Default: empty.
    #[serde(default)]
    pub instance_name: String,
    /// A file holding a bearer token (workspace-relative or absolute).
    pub token_file: Option<String>,
    /// An environment variable holding a bearer token.
    pub token_env: Option<String>,
    /// Per-call timeout, a humantime string. Default: 30s.
    pub timeout: Option<String>,
    /// A PEM CA bundle to verify a `grpcs://` server with (default: the system's roots).
    pub ca_file: Option<String>,
    /// A PEM client certificate (with `key_file`) for mutual TLS.
    pub cert_file: Option<String>,
    /// The client certificate's PEM private key.
    pub key_file: Option<String>,
    /// Which runs write results: `"ci"` (default: a run with `CI` set), `"always"`, `"never"`.
    pub upload: Option<UploadValue>,
}

/// `[cache.reapi] upload`, as written (resolved to `crate::layers::reapi::Upload`). An enum
/// here so a misspelt value is refused when the workspace loads, not only when a run asks
/// for the layer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum UploadValue {
    /// Runs with `CI` set.
    Ci,
    /// Every run.
    Always,
    /// No run.
    Never,
}

/// The values `upload` accepts, as written: what its error message and the JSON Schema's
/// `enum` list.
pub const UPLOAD_VALUES: &[&str] = &["ci", "always", "never"];

/// `[workspace] fallback`: what a remote run does when its farm cannot be reached.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FallbackValue {
    /// Run in local mode instead (as `--fallback local`; the default).
    Local,
    /// Fail the run (as `--farm-required`).
    None,
}

/// The values `fallback` accepts, as written.
pub const FALLBACK_VALUES: &[&str] = &["local", "none"];

/// A task's `upstream_outputs`: which upstreams' outputs its exec root holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum UpstreamOutputsValue {
    /// Every upstream's, direct or transitive (the default).
    All,
    /// Its direct dependencies' only (a group's seen through); needs `sandbox = true`.
    Direct,
}

/// The values `upstream_outputs` accepts, as written.
pub const UPSTREAM_OUTPUTS_VALUES: &[&str] = &["all", "direct"];

/// `[workspace]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkspaceTable {
    /// Globs of project directories, workspace-relative; `!` excludes; `"."` is the root.
    /// Default: none (no projects).
    #[serde(default)]
    pub projects: Vec<Spanned<String>>,
    /// Workspace files folded into every key. Default: none.
    #[serde(default)]
    pub fingerprint: Vec<Spanned<String>>,
    /// Workspace files every task reads. Default: none.
    #[serde(default)]
    pub inputs: Vec<Spanned<String>>,
    /// Directories of installed dependencies and toolchains (`node_modules`, `.venv`),
    /// workspace-relative globs of directories: keyed, shipped and mounted each as one tree
    /// (`crate::trees`). Default: `node_modules` at the root and in every project when the
    /// root has a `package.json`, else none.
    pub trees: Option<Vec<Spanned<String>>>,
    /// Runtime inputs of every task: commands (`"node --version"`, run by `sh -c` once per
    /// run) whose stdout is folded into each key. Default: none.
    #[serde(default)]
    pub runtime: Vec<Spanned<String>>,
    /// Whether every key folds the path and digest of the program its command starts, when
    /// that program is outside the workspace (`crate::keys::binaries`). Default: true.
    pub runtime_binary: Option<Spanned<bool>>,
    /// Extra attempts after a failure for every task that sets no `retries`; `--retry`
    /// overrides it. Never keyed. Default: 0.
    pub retry: Option<Spanned<u32>>,
    /// Wall-clock limit for every task that sets no `timeout`, a humantime string;
    /// `--timeout` overrides it. Never keyed. Default: no limit.
    pub timeout: Option<Spanned<String>>,
    /// What a remote run does when its farm cannot be reached: `"local"` runs locally,
    /// `"none"` fails (`--fallback`, `--farm-required`, `PROVA_FALLBACK` win over it).
    /// Default: `"local"`.
    pub fallback: Option<FallbackValue>,
}

/// A project directory's own `prova.toml`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProjectFile {
    /// Name and deps of the project.
    pub project: Option<Spanned<ProjectTable>>,
    /// Overrides of the workspace task defaults, field by field, and project-only tasks.
    #[serde(default)]
    pub tasks: BTreeMap<Spanned<String>, Spanned<TaskTable>>,
}

/// `[project]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProjectTable {
    /// Default: the `package.json` `name`, else the directory relative to the workspace.
    pub name: Option<Spanned<String>>,
    /// Names of workspace projects this one depends on, on top of those its `package.json`
    /// names. Default: none.
    #[serde(default)]
    pub deps: Vec<Spanned<String>>,
}

/// `[tasks.NAME]`. Every field is optional at both levels; the defaults named here apply when
/// neither the project nor the workspace sets a field.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TaskTable {
    /// What to run. Default: none, a group task that only runs its deps.
    pub command: Option<Spanned<CommandValue>>,
    /// `^X` (task X of each project dependency), `X` (same project), `p#X`. Default: none.
    pub deps: Option<Vec<Spanned<String>>>,
    /// Globs of the files the task reads. Default: every file of the project but outputs.
    pub inputs: Option<Vec<Spanned<String>>>,
    /// Globs of what the task writes. Default: none.
    pub outputs: Option<Vec<Spanned<String>>>,
    /// Environment variables the task reads: keyed and passed. Default: none.
    pub env: Option<Vec<Spanned<String>>>,
    /// Environment variables passed through, not keyed. Default: none.
    pub pass_env: Option<Vec<Spanned<String>>>,
    /// Wall-clock limit, a humantime string (`"90s"`, `"1h 30m"`). Default: no limit.
    pub timeout: Option<Spanned<String>>,
    /// Extra attempts after a failure. Default: 0.
    pub retries: Option<Spanned<u32>>,
    /// Whether outputs are cached. Default: true (false for a persistent task).
    pub cache: Option<Spanned<bool>>,
    /// A long-running task (dev server). Default: false.
    pub persistent: Option<Spanned<bool>>,
    /// Regex the output of a persistent task matches once it is ready. Default: none.
    pub ready_when: Option<Spanned<String>>,
    /// The platform is not folded into the key. Default: false.
    pub portable: Option<Spanned<bool>>,
    /// The sandbox keeps the network. Default: false.
    pub network: Option<Spanned<bool>>,
    /// Farm placement: only workers carrying every one of these labels run the task.
    /// Default: none (any worker of the platform).
    pub labels: Option<Spanned<std::collections::BTreeMap<String, String>>>,
    /// `false`: `--verify` never re-runs or traces the task (its verdict says `exempt`).
    /// Never keyed. Default: true.
    pub verify: Option<Spanned<bool>>,
    /// Output globs the determinism proof leaves out of its comparison (a build-info file
    /// with a timestamp); the verdict names what was left out. Never keyed. Default: none.
    pub verify_ignore: Option<Vec<Spanned<String>>>,
    /// The task acts on the world (deploy, publish, migrate): implies `verify = false` and
    /// `cache = false`. Never keyed. Default: false.
    pub side_effects: Option<Spanned<bool>>,
    /// Runtime inputs: commands (`"node --version"`, run by `sh -c` once per run) whose
    /// stdout is folded into the key, on top of `[workspace] runtime`. Default: none.
    pub runtime: Option<Vec<Spanned<String>>>,
    /// Every execution runs sandboxed with only its declared inputs and fails on an
    /// undeclared read (the inputs proof's run, without `--verify`). Never keyed. Default:
    /// false.
    pub sandbox: Option<Spanned<bool>>,
    /// Which upstreams' outputs a sandboxed task's exec root holds, and its key folds:
    /// `"all"` (every upstream, direct or transitive) or `"direct"` (its direct dependencies
    /// only; needs `sandbox = true`). Default: `"all"`.
    pub upstream_outputs: Option<Spanned<UpstreamOutputsValue>>,
}

/// `command = "npm run build"` (run by `sh -c`) or `command = ["tsc", "-p", "."]` (argv).
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum CommandValue {
    /// A shell string.
    Shell(String),
    /// Program and arguments.
    Argv(Vec<String>),
}

/// Which table of which file kind a key sits in: what keys it allows and what type each
/// value must have, for error messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TableKind {
    /// The top level of the workspace root's `prova.toml`.
    WorkspaceTop,
    /// The top level of a project's `prova.toml`.
    ProjectTop,
    /// `[workspace]`.
    Workspace,
    /// `[project]`.
    Project,
    /// `[tasks]`, whose keys are task names.
    Tasks,
    /// `[tasks.NAME]`.
    Task,
    /// `[cache]` (workspace root only).
    Cache,
    /// `[cache.reapi]`.
    Reapi,
    /// `[exec]` (workspace root only).
    Exec,
    /// `[exec.reapi]`.
    ExecReapi,
}

const CACHE_KEYS: &[&str] = &["reapi"];
const REAPI_KEYS: &[&str] = &[
    "endpoint",
    "instance_name",
    "token_file",
    "token_env",
    "timeout",
    "ca_file",
    "cert_file",
    "key_file",
    "upload",
];
const EXEC_KEYS: &[&str] = &["reapi"];
const EXEC_REAPI_KEYS: &[&str] = &[
    "endpoint",
    "instance_name",
    "token_file",
    "token_env",
    "timeout",
    "ca_file",
    "cert_file",
    "key_file",
];
const WORKSPACE_TOP_KEYS: &[&str] = &["workspace", "project", "tasks", "cache", "exec"];
const PROJECT_TOP_KEYS: &[&str] = &["project", "tasks"];
const WORKSPACE_KEYS: &[&str] = &[
    "projects",
    "fingerprint",
    "inputs",
    "trees",
    "runtime",
    "runtime_binary",
    "retry",
    "timeout",
    "fallback",
];
const PROJECT_KEYS: &[&str] = &["name", "deps"];
const TASK_KEYS: &[&str] = &[
    "command",
    "deps",
    "inputs",
    "outputs",
    "env",
    "pass_env",
    "timeout",
    "retries",
    "cache",
    "persistent",
    "ready_when",
    "portable",
    "network",
    "labels",
    "verify",
    "verify_ignore",
    "side_effects",
    "runtime",
    "sandbox",
    "upstream_outputs",
];

const STRINGS: &str = "an array of strings";
const TABLE: &str = "a table";
const BOOL: &str = "a boolean (`true` or `false`)";

impl TableKind {
    /// Every kind of table, for whoever must cover them all (the JSON Schema's sync test).
    pub const ALL: &'static [Self] = &[
        Self::WorkspaceTop,
        Self::ProjectTop,
        Self::Workspace,
        Self::Project,
        Self::Tasks,
        Self::Task,
        Self::Cache,
        Self::Reapi,
        Self::Exec,
        Self::ExecReapi,
    ];

    /// The keys this table allows; empty for `[tasks]`, where any task name goes.
    pub fn keys(self) -> &'static [&'static str] {
        match self {
            Self::WorkspaceTop => WORKSPACE_TOP_KEYS,
            Self::ProjectTop => PROJECT_TOP_KEYS,
            Self::Workspace => WORKSPACE_KEYS,
            Self::Project => PROJECT_KEYS,
            Self::Tasks => &[],
            Self::Task => TASK_KEYS,
            Self::Cache => CACHE_KEYS,
            Self::Reapi => REAPI_KEYS,
            Self::Exec => EXEC_KEYS,
            Self::ExecReapi => EXEC_REAPI_KEYS,
        }
    }

    /// The kind of the table under `key`, if that key holds a table.
    pub fn child(self, key: &str) -> Option<Self> {
        match (self, key) {
            (Self::WorkspaceTop, "workspace") => Some(Self::Workspace),
            (Self::WorkspaceTop | Self::ProjectTop, "project") => Some(Self::Project),
            (Self::WorkspaceTop | Self::ProjectTop, "tasks") => Some(Self::Tasks),
            (Self::WorkspaceTop, "cache") => Some(Self::Cache),
            (Self::Cache, "reapi") => Some(Self::Reapi),
            (Self::WorkspaceTop, "exec") => Some(Self::Exec),
            (Self::Exec, "reapi") => Some(Self::ExecReapi),
            (Self::Tasks, _) => Some(Self::Task),
            _ => None,
        }
    }

    /// What the value of `key` must be, in words.
    pub fn expected(self, key: &str) -> &'static str {
        match (self, key) {
            (Self::WorkspaceTop | Self::ProjectTop | Self::Tasks | Self::Cache | Self::Exec, _) => {
                TABLE
            }
            (Self::ExecReapi, _) => "a string",
            (Self::Reapi, "upload") => "one of \"ci\", \"always\" or \"never\"",
            (Self::Reapi, _) => "a string",
            (Self::Project, "name") => "a string",
            (Self::Task, "command") => {
                "a string (run by `sh -c`) or an array of strings (program and arguments)"
            }
            (Self::Task, "retries") => "a non-negative integer",
            (
                Self::Task,
                "cache" | "persistent" | "portable" | "network" | "verify" | "side_effects"
                | "sandbox",
            ) => BOOL,
            (Self::Task, "timeout") | (Self::Workspace, "timeout") => {
                "a duration string such as \"90s\", \"10m\" or \"1h 30m\""
            }
            (Self::Workspace, "retry") => "a non-negative integer",
            (Self::Workspace, "runtime_binary") => BOOL,
            (Self::Workspace, "fallback") => "one of \"local\" or \"none\"",
            (Self::Task, "upstream_outputs") => "one of \"all\" or \"direct\"",
            (Self::Task, "ready_when") => "a string (a regular expression)",
            (Self::Task, "labels") => "a table of strings (`{ pool = \"gpu\" }`)",
            _ => STRINGS,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each key list names exactly the fields serde accepts: an empty document with one key
    /// set to a table of the wrong shape fails on the value, never as an unknown key.
    #[test]
    fn key_lists_match_the_structs() {
        for key in TASK_KEYS {
            let src = format!("[tasks.t]\n{key} = {{ x = 1 }}\n");
            let err = toml::from_str::<WorkspaceFile>(&src).unwrap_err();
            assert!(!err.message().starts_with("unknown field"), "{key}: {}", err.message());
        }
        for key in WORKSPACE_KEYS {
            let src = format!("[workspace]\n{key} = {{ x = 1 }}\n");
            let err = toml::from_str::<WorkspaceFile>(&src).unwrap_err();
            assert!(!err.message().starts_with("unknown field"), "{key}: {}", err.message());
        }
        for key in PROJECT_KEYS {
            let src = format!("[project]\n{key} = {{ x = 1 }}\n");
            let err = toml::from_str::<ProjectFile>(&src).unwrap_err();
            assert!(!err.message().starts_with("unknown field"), "{key}: {}", err.message());
        }
        for key in WORKSPACE_TOP_KEYS {
            let err = toml::from_str::<WorkspaceFile>(&format!("{key} = 1")).unwrap_err();
            assert!(!err.message().starts_with("unknown field"), "{key}: {}", err.message());
        }
        for key in PROJECT_TOP_KEYS {
            let err = toml::from_str::<ProjectFile>(&format!("{key} = 1")).unwrap_err();
            assert!(!err.message().starts_with("unknown field"), "{key}: {}", err.message());
        }
        for key in CACHE_KEYS {
            let err = toml::from_str::<WorkspaceFile>(&format!("[cache]\n{key} = 1")).unwrap_err();
            assert!(!err.message().starts_with("unknown field"), "{key}: {}", err.message());
        }
        for key in REAPI_KEYS {
            let src = format!("[cache.reapi]\n{key} = {{ x = 1 }}\n");
            let err = toml::from_str::<WorkspaceFile>(&src).unwrap_err();
            assert!(!err.message().starts_with("unknown field"), "{key}: {}", err.message());
        }
        let err = toml::from_str::<ProjectFile>("workspace = 1").unwrap_err();
        assert!(err.message().starts_with("unknown field"));
        let err = toml::from_str::<ProjectFile>("cache = 1").unwrap_err();
        assert!(err.message().starts_with("unknown field"));
    }

    /// `ALL` names every kind (the match has no wildcard: a new kind fails to compile here
    /// until it is listed), and every child kind is reachable from a top level.
    #[test]
    fn all_lists_every_kind() {
        for kind in TableKind::ALL {
            match kind {
                TableKind::WorkspaceTop
                | TableKind::ProjectTop
                | TableKind::Workspace
                | TableKind::Project
                | TableKind::Tasks
                | TableKind::Task
                | TableKind::Cache
                | TableKind::Reapi
                | TableKind::Exec
                | TableKind::ExecReapi => {}
            }
        }
        assert_eq!(TableKind::ALL.len(), 10);
    }

    #[test]
    fn upload_values_are_the_enum() {
        for v in UPLOAD_VALUES {
            let src = format!("[cache.reapi]\nendpoint = \"grpc://h:1\"\nupload = \"{v}\"\n");
            let file: WorkspaceFile = toml::from_str(&src).unwrap();
            assert!(file.cache.and_then(|c| c.reapi).and_then(|r| r.upload).is_some(), "{v}");
        }
        let src = "[cache.reapi]\nendpoint = \"grpc://h:1\"\nupload = \"sometimes\"\n";
        assert!(toml::from_str::<WorkspaceFile>(src).is_err());
    }

    #[test]
    fn fallback_values_are_the_enum() {
        for v in FALLBACK_VALUES {
            let src = format!("[workspace]\nfallback = \"{v}\"\n");
            let file: WorkspaceFile = toml::from_str(&src).unwrap();
            assert!(file.workspace.and_then(|w| w.fallback).is_some(), "{v}");
        }
        assert!(toml::from_str::<WorkspaceFile>("[workspace]\nfallback = \"remote\"\n").is_err());
    }

    #[test]
    fn upstream_outputs_values_are_the_enum() {
        for v in UPSTREAM_OUTPUTS_VALUES {
            let src = format!("[tasks.b]\nupstream_outputs = \"{v}\"\n");
            let file: WorkspaceFile = toml::from_str(&src).unwrap();
            let b = file.tasks.values().next().map(|t| t.get_ref().upstream_outputs.is_some());
            assert_eq!(b, Some(true), "{v}");
        }
        let src = "[tasks.b]\nupstream_outputs = \"transitive\"\n";
        assert!(toml::from_str::<WorkspaceFile>(src).is_err());
    }

    #[test]
    fn a_full_task_table_parses() {
        let src = r#"
            [tasks.build]
            command = ["tsc", "-p", "."]
            deps = ["^build"]
            inputs = ["src/**"]
            outputs = ["dist/**"]
            env = ["NODE_ENV"]
            pass_env = ["SSH_AUTH_SOCK"]
            timeout = "10m"
            retries = 2
            cache = false
            persistent = true
            ready_when = "listening"
            portable = true
            network = true
        "#;
        let file: WorkspaceFile = toml::from_str(src).unwrap();
        let (name, task) = file.tasks.iter().next().unwrap();
        assert_eq!(name.get_ref(), "build");
        let task = task.get_ref();
        assert!(
            matches!(task.command.as_ref().unwrap().get_ref(), CommandValue::Argv(v) if v.len() == 3)
        );
        assert_eq!(*task.retries.as_ref().unwrap().get_ref(), 2);
    }
}
