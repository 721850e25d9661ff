//! [`ConfigError`]: everything that can be wrong with a workspace's configuration. Each
//! message starts with `file:line:col` (workspace-relative) when there is a place to point
//! at, and may end with a `help:` line.

use std::path::PathBuf;

use prova_protocol::globs::GlobError;

use super::Location;

/// A configuration error. Every one is a usage error (exit code 2).
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// No `prova.toml` with a `[workspace]` table in the start directory or above.
    #[error(
        "no workspace found: no prova.toml with a [workspace] table in {} or any parent directory{}",
        start.display(), help_line(help)
    )]
    NoWorkspace {
        /// Where the search started.
        start: PathBuf,
        /// What to do about it.
        help: Option<String>,
    },

    /// A file or directory could not be read.
    #[error("{}: {source}", path.display())]
    Io {
        /// The path, workspace-relative when inside the workspace.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },

    /// The directory walk that discovers projects failed.
    #[error("{}: cannot walk the directory: {message}", path.display())]
    Walk {
        /// Where, workspace-relative.
        path: PathBuf,
        /// What the walker said.
        message: String,
    },

    /// The file is not valid TOML.
    #[error("{at}: invalid TOML: {message}")]
    Syntax {
        /// Where the parser gave up.
        at: Box<Location>,
        /// What the parser said.
        message: String,
    },

    /// A key that the table does not have.
    #[error("{at}: unknown key `{key}` in {table}{}", help_line(help))]
    UnknownKey {
        /// The key itself.
        at: Box<Location>,
        /// The key as written.
        key: String,
        /// The table, e.g. `[tasks.build]` or `the top level`.
        table: String,
        /// A did-you-mean, else the keys the table allows.
        help: Option<String>,
    },

    /// A value of the wrong type.
    #[error("{at}: `{field}` in {table} must be {expected}, found {found}")]
    WrongType {
        /// The value.
        at: Box<Location>,
        /// The key whose value it is.
        field: String,
        /// The table holding the key.
        table: String,
        /// What the value must be, in words.
        expected: String,
        /// What it is.
        found: String,
    },

    /// A value serde rejected where no more precise place or reason could be found.
    #[error("{at}: {message}")]
    Invalid {
        /// The closest place known.
        at: Box<Location>,
        /// What the deserialiser said.
        message: String,
    },

    /// A `timeout` that is not a duration.
    #[error("{at}: invalid timeout {value:?}: {reason}{}", help_line(help))]
    InvalidTimeout {
        /// The value.
        at: Box<Location>,
        /// As written.
        value: String,
        /// Why it does not parse.
        reason: String,
        /// The accepted forms.
        help: Option<String>,
    },

    /// A `ready_when` that is not a valid regex.
    #[error("{at}: invalid `ready_when` regex {pattern:?}: {reason}")]
    InvalidRegex {
        /// The value.
        at: Box<Location>,
        /// As written.
        pattern: String,
        /// What the regex compiler said.
        reason: String,
    },

    /// `ready_when` on a task that is not `persistent`.
    #[error("{at}: `ready_when` in task `{task}` needs `persistent = true`{}", help_line(help))]
    ReadyWhenWithoutPersistent {
        /// The `ready_when` value.
        at: Box<Location>,
        /// `project#task`.
        task: String,
        /// What to do about it.
        help: Option<String>,
    },

    /// `persistent = true` together with an explicit `cache = true`.
    #[error("{at}: task `{task}` is persistent and cannot be cached{}", help_line(help))]
    PersistentCached {
        /// The `cache = true` value.
        at: Box<Location>,
        /// `project#task`.
        task: String,
        /// What to do about it.
        help: Option<String>,
    },

    /// A glob that does not compile or leaves the workspace.
    #[error("{at}: invalid pattern in `{field}`: {source}")]
    InvalidGlob {
        /// The pattern.
        at: Box<Location>,
        /// `projects`, `inputs`, `outputs` or `fingerprint`.
        field: String,
        /// Why.
        #[source]
        source: GlobError,
    },

    /// A name in `env` or `pass_env` that cannot be an environment variable.
    #[error(
        "{at}: `{name}` in `{field}` is not a valid environment variable name{}",
        help_line(help)
    )]
    InvalidEnvName {
        /// The name.
        at: Box<Location>,
        /// `env` or `pass_env`.
        field: String,
        /// As written.
        name: String,
        /// The accepted form.
        help: Option<String>,
    },

    /// A task dependency that is none of `^X`, `X`, `p#X`.
    #[error("{at}: invalid task dependency `{dep}`: {reason}{}", help_line(help))]
    InvalidTaskDep {
        /// The dependency.
        at: Box<Location>,
        /// As written.
        dep: String,
        /// What is wrong.
        reason: String,
        /// The accepted forms.
        help: Option<String>,
    },

    /// A project or task name that cannot be used in a task id.
    #[error("{at}: invalid {what} name `{name}`: {reason}{}", help_line(help))]
    InvalidName {
        /// Where the name comes from.
        at: Box<Location>,
        /// `project` or `task`.
        what: &'static str,
        /// The name.
        name: String,
        /// What is wrong.
        reason: String,
        /// What to do about it.
        help: Option<String>,
    },

    /// `[project] deps` names no workspace project.
    #[error("{at}: project `{project}` depends on unknown project `{name}`{}", help_line(help))]
    UnknownProject {
        /// The dependency.
        at: Box<Location>,
        /// The project declaring it.
        project: String,
        /// The unknown name.
        name: String,
        /// A did-you-mean among the project names.
        help: Option<String>,
    },

    /// Two project directories resolve to the same name.
    #[error("two projects are named `{name}`: `{first}` and `{second}`{}", help_line(help))]
    DuplicateProject {
        /// The name.
        name: String,
        /// One directory, workspace-relative (`.` for the root).
        first: String,
        /// The other.
        second: String,
        /// What to do about it.
        help: Option<String>,
    },

    /// A `package.json` that is not valid JSON or not shaped like one.
    #[error("{at}: invalid package.json: {message}")]
    PackageJson {
        /// Where serde_json stopped.
        at: Box<Location>,
        /// What it said.
        message: String,
    },

    /// `[project]` in the root `prova.toml` while the root is not a project.
    #[error(
        "{at}: [project] in the workspace root's prova.toml, but the root is not a project{}",
        help_line(help)
    )]
    MisplacedProjectTable {
        /// The `[project]` header.
        at: Box<Location>,
        /// What to do about it.
        help: Option<String>,
    },

    /// A `projects` entry without wildcards that names no directory.
    #[error("{at}: `projects` entry `{pattern}` names no directory{}", help_line(help))]
    NoSuchProjectDir {
        /// The entry.
        at: Box<Location>,
        /// As written.
        pattern: String,
        /// A did-you-mean among existing directories, if any.
        help: Option<String>,
    },

    /// An output pattern that could reach outside its task's project (see
    /// [`super::outputs`]).
    #[error(
        "{at}: output `{pattern}` of task `{task}` is not confined to its project: {reason}{}",
        help_line(help)
    )]
    UnconfinedOutput {
        /// The pattern.
        at: Box<Location>,
        /// As written.
        pattern: String,
        /// `project#task`.
        task: String,
        /// What it could reach.
        reason: String,
        /// What to write instead.
        help: Option<String>,
    },

    /// An output pattern that can match a declared input (see [`super::overlap`]): the
    /// clean before the task runs, or a restore, would delete or overwrite that input.
    #[error(
        "{at}: output `{pattern}` of task `{task}` can match {input}: prova deletes a task's \
         outputs before it runs and replaces them on a cache hit, so it would delete that \
         input{}",
        help_line(help)
    )]
    OutputOverlapsInput {
        /// The output pattern.
        at: Box<Location>,
        /// As written.
        pattern: String,
        /// `project#task`.
        task: String,
        /// The input it can match and whose it is.
        input: String,
        /// What to write instead.
        help: Option<String>,
    },

    /// Two tasks whose outputs can match one path (see [`super::overlap`]): each one's clean
    /// and restore replace everything its outputs match, so one deletes or overwrites the
    /// other's files, and one that ran beside the other can cache them as its own.
    #[error(
        "{at}: output `{pattern}` of task `{task}` can match {other}: prova deletes a task's \
         outputs before it runs and replaces them on a cache hit, so each would delete or \
         overwrite the other's{}",
        help_line(help)
    )]
    OutputsOverlap {
        /// The later of the two output patterns.
        at: Box<Location>,
        /// As written.
        pattern: String,
        /// `project#task`.
        task: String,
        /// The other task's output it can match, and whose it is.
        other: String,
        /// What to write instead.
        help: Option<String>,
    },

    /// A value of the right type that is still not allowed.
    #[error("{at}: `{field}`: {message}{}", help_line(help))]
    InvalidValue {
        /// The value.
        at: Box<Location>,
        /// The key.
        field: String,
        /// What is wrong.
        message: String,
        /// What to do about it.
        help: Option<String>,
    },
}

impl ConfigError {
    /// Where in which file the error is, when there is such a place.
    pub fn location(&self) -> Option<&Location> {
        match self {
            Self::NoWorkspace { .. }
            | Self::Io { .. }
            | Self::Walk { .. }
            | Self::DuplicateProject { .. } => None,
            Self::Syntax { at, .. }
            | Self::UnknownKey { at, .. }
            | Self::WrongType { at, .. }
            | Self::Invalid { at, .. }
            | Self::InvalidTimeout { at, .. }
            | Self::InvalidRegex { at, .. }
            | Self::ReadyWhenWithoutPersistent { at, .. }
            | Self::PersistentCached { at, .. }
            | Self::InvalidGlob { at, .. }
            | Self::InvalidEnvName { at, .. }
            | Self::InvalidTaskDep { at, .. }
            | Self::InvalidName { at, .. }
            | Self::UnknownProject { at, .. }
            | Self::PackageJson { at, .. }
            | Self::MisplacedProjectTable { at, .. }
            | Self::NoSuchProjectDir { at, .. }
            | Self::UnconfinedOutput { at, .. }
            | Self::OutputOverlapsInput { at, .. }
            | Self::OutputsOverlap { at, .. }
            | Self::InvalidValue { at, .. } => Some(at),
        }
    }

    /// The `help:` text, if any.
    pub fn help(&self) -> Option<&str> {
        match self {
            Self::NoWorkspace { help, .. }
            | Self::UnknownKey { help, .. }
            | Self::InvalidTimeout { help, .. }
            | Self::ReadyWhenWithoutPersistent { help, .. }
            | Self::PersistentCached { help, .. }
            | Self::InvalidEnvName { help, .. }
            | Self::InvalidTaskDep { help, .. }
            | Self::InvalidName { help, .. }
            | Self::UnknownProject { help, .. }
            | Self::DuplicateProject { help, .. }
            | Self::MisplacedProjectTable { help, .. }
            | Self::NoSuchProjectDir { help, .. }
            | Self::UnconfinedOutput { help, .. }
            | Self::OutputOverlapsInput { help, .. }
            | Self::OutputsOverlap { help, .. }
            | Self::InvalidValue { help, .. } => help.as_deref(),
            Self::Io { .. }
            | Self::Walk { .. }
            | Self::Syntax { .. }
            | Self::WrongType { .. }
            | Self::Invalid { .. }
            | Self::InvalidRegex { .. }
            | Self::InvalidGlob { .. }
            | Self::PackageJson { .. } => None,
        }
    }
}

fn help_line(help: &Option<String>) -> String {
    help.as_ref().map(|h| format!("\n  help: {h}")).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    #[test]
    fn display_puts_the_place_first_and_help_on_its_own_line() {
        let at = Location::new(Path::new("/ws"), Path::new("/ws/apps/web/prova.toml"), 4, 1);
        let err = ConfigError::UnknownKey {
            at: at.into(),
            key: "comand".into(),
            table: "[tasks.build]".into(),
            help: Some("did you mean `command`?".into()),
        };
        assert_eq!(
            err.to_string(),
            "apps/web/prova.toml:4:1: unknown key `comand` in [tasks.build]\n  help: did you mean `command`?"
        );
        assert_eq!(err.help(), Some("did you mean `command`?"));
        assert_eq!(err.location().map(|l| l.line), Some(4));
    }
}
