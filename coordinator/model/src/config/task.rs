//! `[tasks.X]` tables: each is checked on its own ([`TaskLayer::check`]: values that are wrong
//! wherever they appear), then a project's layer is merged over the workspace default field by
//! field ([`with_override`]) and the rules that need both levels are checked on the result.

use std::time::Duration;

use prova_protocol::TaskId;
use prova_protocol::globs::check_pattern;
use prova_protocol::spec::CommandLine;
use toml::Spanned;

use super::error::ConfigError;
use super::parse::ConfigSource;
use super::policy::PolicyLayer;
use super::schema::{CommandValue, TaskTable};
use super::{Located, Location};
use crate::workspace::TaskDef;

/// Most retries a task may ask for: each one re-runs the whole command, and a large count is
/// almost always a unit mistake.
pub const MAX_RETRIES: u32 = 100;

/// One `[tasks.X]` table, checked but not merged: `None` is "not set here".
#[derive(Clone, Debug)]
pub struct TaskLayer {
    /// The `[tasks.X]` header (or the key of a dotted or inline task table).
    pub header: Location,
    /// `command`.
    pub command: Option<CommandLine>,
    /// `deps`, each where it was written.
    pub deps: Option<Vec<Located<String>>>,
    /// `inputs`.
    pub inputs: Option<Vec<String>>,
    /// `outputs`, each where it was written (the confinement check names the place).
    pub outputs: Option<Vec<Located<String>>>,
    /// `env`.
    pub env: Option<Vec<String>>,
    /// `pass_env`.
    pub pass_env: Option<Vec<String>>,
    /// `timeout`, parsed.
    pub timeout: Option<Duration>,
    /// `retries`.
    pub retries: Option<u32>,
    /// `cache`, located for the persistent-and-cached error.
    pub cache: Option<Located<bool>>,
    /// `persistent`.
    pub persistent: Option<bool>,
    /// `ready_when`, located for the not-persistent error.
    pub ready_when: Option<Located<String>>,
    /// `portable`.
    pub portable: Option<bool>,
    /// `network`.
    pub network: Option<bool>,
    /// `labels`.
    pub labels: Option<std::collections::BTreeMap<String, String>>,
    /// `verify`, `verify_ignore`, `side_effects`, `runtime` ([`super::policy`]).
    pub policy: PolicyLayer,
}

impl TaskLayer {
    /// Checks the table of task `name` from `src`.
    pub fn check(
        src: &ConfigSource<'_>,
        name: &Spanned<String>,
        table: Spanned<TaskTable>,
    ) -> Result<Self, ConfigError> {
        check_name(src, "task", name)?;
        let header = src.at(table.span());
        let mut t = table.into_inner();
        let policy = PolicyLayer::check(src, &mut t)?;
        let located = |s: Spanned<String>| Located::new(s.get_ref().clone(), src.at(s.span()));
        Ok(Self {
            header,
            command: t.command.map(|c| check_command(src, c)).transpose()?,
            deps: t
                .deps
                .map(|deps| deps.into_iter().map(|d| check_dep(src, d).map(located)).collect())
                .transpose()?,
            inputs: t.inputs.map(|v| check_globs(src, "inputs", v)).transpose()?,
            outputs: t.outputs.map(|v| check_located_globs(src, "outputs", v)).transpose()?,
            env: t.env.map(|v| check_env_names(src, "env", v)).transpose()?,
            pass_env: t.pass_env.map(|v| check_env_names(src, "pass_env", v)).transpose()?,
            timeout: t.timeout.map(|v| check_timeout(src, v)).transpose()?,
            retries: t.retries.map(|v| check_retries(src, v)).transpose()?,
            cache: t.cache.map(|c| Located::new(*c.get_ref(), src.at(c.span()))),
            persistent: t.persistent.map(Spanned::into_inner),
            ready_when: t.ready_when.map(|r| check_regex(src, r).map(located)).transpose()?,
            portable: t.portable.map(Spanned::into_inner),
            network: t.network.map(Spanned::into_inner),
            labels: t.labels.map(Spanned::into_inner),
            policy,
        })
    }
}

/// Task `name` of `project` when only the workspace defines it.
pub fn from_default(
    project: &str,
    name: &str,
    default: &TaskLayer,
) -> Result<TaskDef, ConfigError> {
    resolve(project, name, &default.header, Some(default), None)
}

/// Task `name` of `project` when the project's own `prova.toml` defines it: its layer `own`
/// over the workspace default (if any), field by field.
pub fn with_override(
    project: &str,
    name: &str,
    default: Option<&TaskLayer>,
    own: &TaskLayer,
) -> Result<TaskDef, ConfigError> {
    resolve(project, name, &own.header, default, Some(own))
}

/// Merges the layers (a field set in `own` wins), applies the defaults of [`TaskDef::new`]
/// and checks the rules that need the merged task.
fn resolve(
    project: &str,
    name: &str,
    header: &Location,
    default: Option<&TaskLayer>,
    own: Option<&TaskLayer>,
) -> Result<TaskDef, ConfigError> {
    macro_rules! field {
        ($f:ident) => {
            own.and_then(|l| l.$f.clone()).or_else(|| default.and_then(|l| l.$f.clone()))
        };
    }
    let mut task = TaskDef::new(name, header.clone());
    let id = TaskId::new(project, name);
    task.command = field!(command);
    task.deps_from_project = own.is_some_and(|l| l.deps.is_some());
    task.deps = field!(deps).unwrap_or_default();
    task.inputs = field!(inputs);
    let outputs = own.and_then(|l| l.outputs.as_ref()).or(default.and_then(|l| l.outputs.as_ref()));
    task.outputs = outputs.map(|v| v.iter().map(|o| o.value.clone()).collect()).unwrap_or_default();
    task.outputs_at = outputs.map(|v| v.iter().map(|o| o.at.clone()).collect()).unwrap_or_default();
    task.env = field!(env).unwrap_or_default();
    task.pass_env = field!(pass_env).unwrap_or_default();
    task.timeout = field!(timeout);
    task.retries = field!(retries).unwrap_or(0);
    task.persistent = field!(persistent).unwrap_or(false);
    task.portable = field!(portable).unwrap_or(false);
    task.network = field!(network).unwrap_or(false);
    task.labels = field!(labels).unwrap_or_default();
    let cache = field!(cache);
    let ready_when = field!(ready_when);
    if let Some(cache) = cache.as_ref().filter(|c| c.value && task.persistent) {
        return Err(ConfigError::PersistentCached {
            at: cache.at.clone().into(),
            task: id.to_string(),
            help: Some(
                "a persistent task never finishes, so it has no outputs to cache: \
                 drop `cache = true`"
                    .to_owned(),
            ),
        });
    }
    if let Some(ready) = ready_when.as_ref().filter(|_| !task.persistent) {
        return Err(ConfigError::ReadyWhenWithoutPersistent {
            at: ready.at.clone().into(),
            task: id.to_string(),
            help: Some(
                "`ready_when` says when a long-running task is up; add `persistent = true` \
                 or remove it"
                    .to_owned(),
            ),
        });
    }
    task.policy = super::policy::resolve(
        &id.to_string(),
        default.map(|l| &l.policy),
        own.map(|l| &l.policy),
        cache.as_ref(),
    )?;
    task.policy.retries_set = field!(retries).is_some();
    task.cache = !task.policy.side_effects && cache.map_or(!task.persistent, |c| c.value);
    // A task without a command here may still run a package.json script (inferred after
    // the merge): `merge_tasks` checks the ones left without a command (groups).
    super::policy::check_sandbox(
        &id.to_string(),
        default.map(|l| &l.policy),
        own.map(|l| &l.policy),
        task.cache && !task.persistent,
    )?;
    task.ready_when = ready_when.map(|r| r.value);
    Ok(task)
}

/// Checks a project or task name (`what`): it becomes part of `project#task` ids.
pub fn check_name(
    src: &ConfigSource<'_>,
    what: &'static str,
    name: &Spanned<String>,
) -> Result<(), ConfigError> {
    check_name_at(what, name.get_ref(), || src.at(name.span()), None)
}

/// Checks a name that came from `at()`, with `help` for where to change it.
pub fn check_name_at(
    what: &'static str,
    name: &str,
    at: impl FnOnce() -> Location,
    help: Option<String>,
) -> Result<(), ConfigError> {
    let reason = if name.is_empty() {
        "it is empty"
    } else if name.contains('#') {
        "`#` separates project and task in task ids"
    } else if name.starts_with('^') {
        "a leading `^` means \"of each dependency\" in task deps"
    } else if name.chars().any(char::is_control) {
        "it contains a control character"
    } else {
        return Ok(());
    };
    Err(ConfigError::InvalidName {
        at: at().into(),
        what,
        name: name.to_owned(),
        reason: reason.to_owned(),
        help,
    })
}

fn check_command(
    src: &ConfigSource<'_>,
    cmd: Spanned<CommandValue>,
) -> Result<CommandLine, ConfigError> {
    let at = src.at(cmd.span());
    let line = match cmd.into_inner() {
        CommandValue::Shell(s) => CommandLine::Shell(s),
        CommandValue::Argv(v) => CommandLine::Argv(v),
    };
    let empty = match &line {
        CommandLine::Shell(s) => s.trim().is_empty(),
        CommandLine::Argv(v) => v.first().is_none_or(|p| p.is_empty()),
    };
    if empty {
        return Err(ConfigError::InvalidValue {
            at: at.into(),
            field: "command".to_owned(),
            message: "the command is empty".to_owned(),
            help: Some("leave `command` out for a group task that only runs its deps".to_owned()),
        });
    }
    Ok(line)
}

fn check_dep(src: &ConfigSource<'_>, dep: Spanned<String>) -> Result<Spanned<String>, ConfigError> {
    let raw = dep.get_ref().as_str();
    let reason = if let Some(task) = raw.strip_prefix('^') {
        if task.is_empty() {
            Some("`^` needs a task name after it")
        } else if task.contains('#') {
            Some("`^` takes a task name, not `project#task`")
        } else {
            None
        }
    } else if raw.contains('#') {
        TaskId::parse(raw).is_none().then_some("`project#task` needs both parts")
    } else if raw.is_empty() {
        Some("it is empty")
    } else {
        None
    };
    match reason {
        None => Ok(dep),
        Some(reason) => Err(ConfigError::InvalidTaskDep {
            at: src.at(dep.span()).into(),
            dep: raw.to_owned(),
            reason: reason.to_owned(),
            help: Some(
                "write `^build` (build of each project dependency), `lint` (a task of this \
                 project) or `ui#build` (a task of another project)"
                    .to_owned(),
            ),
        }),
    }
}

/// Compiles each pattern on its own so a bad one is reported where it was written.
pub fn check_globs(
    src: &ConfigSource<'_>,
    field: &str,
    patterns: Vec<Spanned<String>>,
) -> Result<Vec<String>, ConfigError> {
    check_located_globs(src, field, patterns).map(|v| v.into_iter().map(|p| p.value).collect())
}

/// [`check_globs`], keeping where each pattern was written.
pub fn check_located_globs(
    src: &ConfigSource<'_>,
    field: &str,
    patterns: Vec<Spanned<String>>,
) -> Result<Vec<Located<String>>, ConfigError> {
    patterns
        .into_iter()
        .map(|p| match check_pattern(p.get_ref()) {
            Ok(()) => Ok(Located::new(p.get_ref().clone(), src.at(p.span()))),
            Err(source) => Err(ConfigError::InvalidGlob {
                at: src.at(p.span()).into(),
                field: field.to_owned(),
                source,
            }),
        })
        .collect()
}

fn check_env_names(
    src: &ConfigSource<'_>,
    field: &str,
    names: Vec<Spanned<String>>,
) -> Result<Vec<String>, ConfigError> {
    names
        .into_iter()
        .map(|n| {
            if is_env_name(n.get_ref()) {
                Ok(n.into_inner())
            } else {
                Err(ConfigError::InvalidEnvName {
                    at: src.at(n.span()).into(),
                    field: field.to_owned(),
                    name: n.get_ref().clone(),
                    help: Some(
                        "names are letters, digits and `_`, not starting with a digit".to_owned(),
                    ),
                })
            }
        })
        .collect()
}

/// `[A-Za-z_][A-Za-z0-9_]*`.
pub fn is_env_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

pub(super) fn check_timeout(
    src: &ConfigSource<'_>,
    value: Spanned<String>,
) -> Result<Duration, ConfigError> {
    let reason = match humantime::parse_duration(value.get_ref()) {
        Ok(d) if d.is_zero() => "a timeout must be longer than zero".to_owned(),
        Ok(d) => return Ok(d),
        Err(e) => e.to_string(),
    };
    Err(ConfigError::InvalidTimeout {
        at: src.at(value.span()).into(),
        value: value.into_inner(),
        reason,
        help: Some(
            "write a duration such as \"90s\", \"10m\" or \"1h 30m\"; leave it out for no limit"
                .to_owned(),
        ),
    })
}

pub(super) fn check_retries(
    src: &ConfigSource<'_>,
    value: Spanned<u32>,
) -> Result<u32, ConfigError> {
    let n = *value.get_ref();
    if n <= MAX_RETRIES {
        return Ok(n);
    }
    Err(ConfigError::InvalidValue {
        at: src.at(value.span()).into(),
        field: "retries".to_owned(),
        message: format!("{n} retries is more than the limit of {MAX_RETRIES}"),
        help: None,
    })
}

fn check_regex(
    src: &ConfigSource<'_>,
    value: Spanned<String>,
) -> Result<Spanned<String>, ConfigError> {
    match regex::Regex::new(value.get_ref()) {
        Ok(_) => Ok(value),
        Err(e) => Err(ConfigError::InvalidRegex {
            at: src.at(value.span()).into(),
            pattern: value.get_ref().clone(),
            reason: regex_reason(&e),
        }),
    }
}

/// The one-line cause of a regex error (its full text is a multi-line diagram).
fn regex_reason(err: &regex::Error) -> String {
    let text = err.to_string();
    text.lines()
        .find_map(|l| l.trim().strip_prefix("error: "))
        .map_or_else(|| text.lines().last().unwrap_or_default().trim().to_owned(), str::to_owned)
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::config::schema::{TableKind, WorkspaceFile};

    const FILE: &str = "/ws/prova.toml";

    fn layers(text: &str) -> Result<Vec<(String, TaskLayer)>, ConfigError> {
        let src = ConfigSource::new(Path::new("/ws"), Path::new(FILE), text);
        let file: WorkspaceFile = src.parse(TableKind::WorkspaceTop)?;
        file.tasks
            .into_iter()
            .map(|(name, table)| {
                Ok((name.get_ref().clone(), TaskLayer::check(&src, &name, table)?))
            })
            .collect()
    }

    fn one(text: &str) -> Result<TaskLayer, ConfigError> {
        layers(text).map(|mut v| v.remove(0).1)
    }

    fn err(text: &str) -> String {
        one(text).unwrap_err().to_string()
    }

    #[test]
    fn commands_are_shell_argv_or_absent() {
        let l = layers("[tasks.a]\ncommand = 'npm run build'\n[tasks.b]\ncommand = ['tsc', '-p', '.']\n[tasks.c]\ndeps = ['a', 'b']\n").unwrap();
        assert_eq!(l[0].1.command, Some(CommandLine::Shell("npm run build".into())));
        assert_eq!(
            l[1].1.command,
            Some(CommandLine::Argv(vec!["tsc".into(), "-p".into(), ".".into()]))
        );
        assert_eq!(l[2].1.command, None);
        let group = from_default("p", "c", &l[2].1).unwrap();
        assert_eq!(group.command, None);
        assert_eq!(group.deps.iter().map(|d| d.value.as_str()).collect::<Vec<_>>(), ["a", "b"]);
        assert!(
            err("[tasks.a]\ncommand = '  '\n")
                .starts_with("prova.toml:2:11: `command`: the command is empty")
        );
        assert!(err("[tasks.a]\ncommand = []\n").contains("empty"));
    }

    #[test]
    fn invalid_timeout_is_located() {
        let msg = err("[tasks.build]\ntimeout = \"10 minutes please\"\n");
        assert!(
            msg.starts_with("prova.toml:2:11: invalid timeout \"10 minutes please\": "),
            "{msg}"
        );
        assert!(msg.contains("help: write a duration"), "{msg}");
        assert!(err("[tasks.build]\ntimeout = '0s'\n").contains("longer than zero"));
        assert_eq!(
            one("[tasks.b]\ntimeout = '1h 30m'\n").unwrap().timeout,
            Some(Duration::from_secs(5400))
        );
    }

    #[test]
    fn invalid_regex_is_located() {
        let msg = err("[tasks.dev]\npersistent = true\nready_when = \"listening (on\"\n");
        assert!(
            msg.starts_with("prova.toml:3:14: invalid `ready_when` regex \"listening (on\": "),
            "{msg}"
        );
        assert!(msg.contains("unclosed group"), "{msg}");
        assert!(!msg.contains('\n'), "{msg}");
    }

    #[test]
    fn ready_when_needs_persistent() {
        let layer = one("[tasks.dev]\ncommand = 'vite'\nready_when = 'ready'\n").unwrap();
        let msg = from_default("web", "dev", &layer).unwrap_err().to_string();
        assert!(
            msg.starts_with(
                "prova.toml:3:14: `ready_when` in task `web#dev` needs `persistent = true`"
            ),
            "{msg}"
        );
        let ok = one("[tasks.dev]\npersistent = true\nready_when = 'ready'\n").unwrap();
        let task = from_default("web", "dev", &ok).unwrap();
        assert_eq!(task.ready_when.as_deref(), Some("ready"));
        assert!(!task.cache, "persistent tasks default to no cache");
    }

    #[test]
    fn persistent_with_explicit_cache_is_an_error() {
        let layer = one("[tasks.dev]\npersistent = true\ncache = true\n").unwrap();
        let msg = from_default("web", "dev", &layer).unwrap_err().to_string();
        assert!(
            msg.starts_with("prova.toml:3:9: task `web#dev` is persistent and cannot be cached"),
            "{msg}"
        );
        let off = one("[tasks.dev]\npersistent = true\ncache = false\n").unwrap();
        assert!(!from_default("web", "dev", &off).unwrap().cache);
    }

    #[test]
    fn bad_globs_env_names_deps_and_names_are_located() {
        let msg = err("[tasks.b]\noutputs = ['dist/**', '../out/**']\n");
        assert!(
            msg.starts_with(
                "prova.toml:2:23: invalid pattern in `outputs`: glob `../out/**` leaves"
            ),
            "{msg}"
        );
        let msg = err("[tasks.b]\ninputs = ['src/[a']\n");
        assert!(
            msg.starts_with("prova.toml:2:11: invalid pattern in `inputs`: invalid glob"),
            "{msg}"
        );
        let msg = err("[tasks.b]\nenv = ['NODE_ENV', '1BAD']\n");
        assert!(
            msg.starts_with(
                "prova.toml:2:20: `1BAD` in `env` is not a valid environment variable name"
            ),
            "{msg}"
        );
        let msg = err("[tasks.b]\npass_env = ['A-B']\n");
        assert!(msg.contains("`A-B` in `pass_env`"), "{msg}");
        let msg = err("[tasks.b]\ndeps = ['^build', '^ui#build']\n");
        assert!(msg.starts_with("prova.toml:2:19: invalid task dependency `^ui#build`"), "{msg}");
        assert!(err("[tasks.b]\ndeps = ['#build']\n").contains("needs both parts"));
        assert!(err("[tasks.b]\ndeps = ['^']\n").contains("needs a task name"));
        let msg = err("[tasks.\"a#b\"]\ncommand = 'x'\n");
        assert!(msg.starts_with("prova.toml:1:8: invalid task name `a#b`"), "{msg}");
        let msg = err("[tasks.b]\nretries = 1000\n");
        assert!(msg.contains("limit of 100"), "{msg}");
    }

    #[test]
    fn env_names() {
        for good in ["A", "_x", "NODE_ENV", "a1"] {
            assert!(is_env_name(good), "{good}");
        }
        for bad in ["", "1A", "A-B", "A B", "É"] {
            assert!(!is_env_name(bad), "{bad}");
        }
    }
}
