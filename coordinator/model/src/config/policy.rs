//! The task knobs that change how prova treats a task, never what it produces, so none of
//! them is keyed: proof exemptions (`verify`, `verify_ignore`, `side_effects`) and the
//! runtime inputs a task declares (`runtime`, whose *outputs* the key folds through
//! `crate::keys::runtime`). Checked here per layer ([`PolicyLayer::check`]), merged field by
//! field in [`super::task`], carried on [`TaskDef::policy`](crate::workspace::TaskDef).

use toml::Spanned;

pub use crate::workspace::TaskPolicy;

use super::Located;
use super::error::ConfigError;
use super::parse::ConfigSource;
use super::schema::{TaskTable, UpstreamOutputsValue};

/// Longest runtime command accepted: it is a config pair name in every key.
pub const MAX_RUNTIME_COMMAND: usize = 200;

/// The policy fields of one `[tasks.X]` table, checked, not merged (`None`: not set here).
#[derive(Clone, Debug, Default)]
pub struct PolicyLayer {
    /// `verify`, located for the conflict with `side_effects`.
    pub verify: Option<Located<bool>>,
    /// `verify_ignore`.
    pub verify_ignore: Option<Vec<String>>,
    /// `side_effects`.
    pub side_effects: Option<bool>,
    /// `runtime`.
    pub runtime: Option<Vec<String>>,
    /// `sandbox`, located for the conflict with an uncached task.
    pub sandbox: Option<Located<bool>>,
    /// `upstream_outputs`: `true` for `"direct"`, located for the conflict with an
    /// unsandboxed task.
    pub direct_upstreams: Option<Located<bool>>,
}

impl PolicyLayer {
    /// Takes the policy fields out of `t` and checks them.
    pub fn check(src: &ConfigSource<'_>, t: &mut TaskTable) -> Result<Self, ConfigError> {
        Ok(Self {
            verify: t.verify.take().map(|v| Located::new(*v.get_ref(), src.at(v.span()))),
            verify_ignore: t
                .verify_ignore
                .take()
                .map(|v| super::task::check_globs(src, "verify_ignore", v))
                .transpose()?,
            side_effects: t.side_effects.take().map(Spanned::into_inner),
            runtime: t.runtime.take().map(|v| check_runtime(src, v)).transpose()?,
            sandbox: t.sandbox.take().map(|v| Located::new(*v.get_ref(), src.at(v.span()))),
            direct_upstreams: t.upstream_outputs.take().map(|v| {
                Located::new(*v.get_ref() == UpstreamOutputsValue::Direct, src.at(v.span()))
            }),
        })
    }
}

/// Checks `runtime` commands (`[workspace]` or a task's): non-empty, one line, bounded.
pub fn check_runtime(
    src: &ConfigSource<'_>,
    commands: Vec<Spanned<String>>,
) -> Result<Vec<String>, ConfigError> {
    commands
        .into_iter()
        .map(|c| {
            let text = c.get_ref().trim();
            let message = if text.is_empty() {
                "the command is empty"
            } else if text.contains(['\n', '\r', '\0']) {
                "the command must be one line"
            } else if text.len() > MAX_RUNTIME_COMMAND {
                "the command is longer than 200 bytes"
            } else {
                return Ok(text.to_owned());
            };
            Err(ConfigError::InvalidValue {
                at: src.at(c.span()).into(),
                field: "runtime".to_owned(),
                message: message.to_owned(),
                help: Some(
                    "write a command whose output names the tool's version, such as \
                     \"node --version\""
                        .to_owned(),
                ),
            })
        })
        .collect()
}

/// Why a `--timeout` value is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TimeoutError {
    /// `0s`.
    #[error("a timeout must be longer than zero")]
    Zero,
    /// Not a humantime duration.
    #[error("{0}; write e.g. 90s, 10m or 1h 30m")]
    Unparsed(String),
}

/// A run-level timeout (`--timeout`): a humantime duration longer than zero.
pub fn parse_timeout(s: &str) -> Result<std::time::Duration, TimeoutError> {
    match humantime::parse_duration(s) {
        Ok(d) if d.is_zero() => Err(TimeoutError::Zero),
        Ok(d) => Ok(d),
        Err(e) => Err(TimeoutError::Unparsed(e.to_string())),
    }
}

/// Merges the policy layers (`own` wins field by field). `cache` is the merged `cache`
/// value, if set: `side_effects = true` refuses `cache = true` and `verify = true`.
pub fn resolve(
    task: &str,
    default: Option<&PolicyLayer>,
    own: Option<&PolicyLayer>,
    cache: Option<&Located<bool>>,
) -> Result<TaskPolicy, ConfigError> {
    macro_rules! field {
        ($f:ident) => {
            own.and_then(|l| l.$f.clone()).or_else(|| default.and_then(|l| l.$f.clone()))
        };
    }
    let side_effects = field!(side_effects).unwrap_or(false);
    let verify = field!(verify);
    if side_effects {
        let conflict = match (cache.filter(|c| c.value), verify.as_ref().filter(|v| v.value)) {
            (Some(c), _) => Some(("cache", c.at.clone())),
            (None, Some(v)) => Some(("verify", v.at.clone())),
            (None, None) => None,
        };
        if let Some((field, at)) = conflict {
            return Err(ConfigError::InvalidValue {
                at: at.into(),
                field: field.to_owned(),
                message: format!("{task} has `side_effects = true`, which means `{field} = false`"),
                help: Some(format!(
                    "a task that deploys or publishes is neither cached nor run twice by \
                     --verify: drop `{field} = true`"
                )),
            });
        }
    }
    let sandbox = field!(sandbox).is_some_and(|s| s.value);
    let direct = field!(direct_upstreams);
    if let Some(d) = direct.as_ref().filter(|d| d.value && !sandbox) {
        return Err(ConfigError::InvalidValue {
            at: d.at.clone().into(),
            field: "upstream_outputs".to_owned(),
            message: format!(
                "{task} is not sandboxed, and `upstream_outputs = \"direct\"` needs it"
            ),
            help: Some(
                "only a sandboxed task's exec root can hide its transitive upstreams' outputs; \
                 in place it could read them, so its key must fold them: add `sandbox = true`, \
                 or drop `upstream_outputs`"
                    .to_owned(),
            ),
        });
    }
    Ok(TaskPolicy {
        verify: !side_effects && verify.is_none_or(|v| v.value),
        verify_ignore: field!(verify_ignore).unwrap_or_default(),
        side_effects,
        runtime: field!(runtime).unwrap_or_default(),
        retries_set: false,
        sandbox,
        direct_upstreams: direct.is_some_and(|d| d.value),
    })
}

/// `sandbox = true` needs the task cached: a sandboxed execution runs in an exec root, and
/// its outputs come back into the workspace through the cache. `cached` is the merged
/// `cache` (false for a persistent or side-effecting task).
pub fn check_sandbox(
    task: &str,
    default: Option<&PolicyLayer>,
    own: Option<&PolicyLayer>,
    cached: bool,
) -> Result<(), ConfigError> {
    let set =
        own.and_then(|l| l.sandbox.clone()).or_else(|| default.and_then(|l| l.sandbox.clone()));
    match set {
        Some(s) if s.value && !cached => Err(ConfigError::InvalidValue {
            at: s.at.into(),
            field: "sandbox".to_owned(),
            message: format!("{task} is not cached, and `sandbox = true` needs the cache"),
            help: Some(
                "a sandboxed task runs in an exec root and its outputs come back through the \
                 cache: drop `sandbox = true`, or let the task be cached (not persistent, no \
                 `side_effects`, no `cache = false`)"
                    .to_owned(),
            ),
        }),
        _ => Ok(()),
    }
}
