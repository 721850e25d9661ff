//! One TOML file → its [`schema`](super::schema) struct. Syntax errors come from the parser
//! with a span; unknown keys and wrong types come from serde with a span, and are placed in
//! the document (which table, which key, what value) by walking the parsed tree to that span,
//! so the message can name the key, the table and the expected type in words.

use std::cell::{Cell, OnceCell};
use std::ops::Range;
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;
use toml::Spanned;
use toml::de::{DeTable, DeValue};

use super::error::ConfigError;
use super::schema::TableKind;
use super::{LineIndex, Location, shown_path};
use crate::suggest::did_you_mean;

/// Longest value excerpt quoted in a wrong-type message.
const MAX_EXCERPT_CHARS: usize = 40;

/// A config file's text and where it lives: what locations are computed from.
#[derive(Debug)]
pub struct ConfigSource<'a> {
    /// The workspace root, absolute.
    pub root: &'a Path,
    /// The file, absolute.
    pub file: &'a Path,
    /// Its contents.
    pub text: &'a str,
    /// Where each line starts, built on the first [`ConfigSource::at`]: a file with thousands of
    /// tasks asks for a location per value, and scanning the text from the start for each
    /// made loading quadratic in the number of tasks.
    lines: OnceCell<LineIndex>,
    /// The file as messages show it, computed once.
    shown: OnceCell<PathBuf>,
    /// Bytes of `text` looked at by [`ConfigSource::at`] so far, beyond building the index: what
    /// the test that loading stays linear counts.
    scanned: Cell<usize>,
}

impl<'a> ConfigSource<'a> {
    /// The file `file` (absolute) of the workspace at `root`, with contents `text`.
    pub fn new(root: &'a Path, file: &'a Path, text: &'a str) -> Self {
        Self {
            root,
            file,
            text,
            lines: OnceCell::new(),
            shown: OnceCell::new(),
            scanned: Cell::new(0),
        }
    }

    /// The location of the start of `span`: a binary search in the line index, then a count
    /// of the characters of that one line.
    pub fn at(&self, span: Range<usize>) -> Location {
        let lines = self.lines.get_or_init(|| LineIndex::new(self.text));
        let ((line, col), looked) = lines.line_col(self.text, span.start);
        self.scanned.set(self.scanned.get().saturating_add(looked));
        let shown = self.shown.get_or_init(|| shown_path(self.root, self.file));
        Location { file: self.file.to_path_buf(), shown: shown.clone(), line, col }
    }

    /// Bytes of the text [`ConfigSource::at`] has looked at so far (the line index aside).
    pub fn bytes_scanned(&self) -> usize {
        self.scanned.get()
    }

    /// Deserialises the whole document as `T`, whose top level is a `top` table.
    pub fn parse<T: DeserializeOwned>(&self, top: TableKind) -> Result<T, ConfigError> {
        let doc = DeTable::parse(self.text).map_err(|e| self.syntax_error(&e))?;
        T::deserialize(toml::de::Deserializer::from(doc)).map_err(|e| self.serde_error(&e, top))
    }

    /// Whether the document has a top-level `workspace` table; `None` when it is not TOML.
    pub fn has_workspace_table(&self) -> Option<bool> {
        let doc = DeTable::parse(self.text).ok()?;
        Some(doc.get_ref().get("workspace").is_some_and(|v| v.get_ref().is_table()))
    }

    /// Fails with the syntax error when the document is not TOML.
    pub fn check_syntax(&self) -> Result<(), ConfigError> {
        DeTable::parse(self.text).map(drop).map_err(|e| self.syntax_error(&e))
    }

    /// The syntax error of a document that does not parse.
    pub fn syntax_error(&self, err: &toml::de::Error) -> ConfigError {
        ConfigError::Syntax {
            at: self.at(err.span().unwrap_or(0..0)).into(),
            message: err.message().to_owned(),
        }
    }

    fn serde_error(&self, err: &toml::de::Error, top: TableKind) -> ConfigError {
        let span = err.span().unwrap_or(0..0);
        let at = self.at(span.clone());
        let fallback =
            || ConfigError::Invalid { at: at.clone().into(), message: err.message().to_owned() };
        // The document parsed once already; parse it again only on this error path.
        let Ok(doc) = DeTable::parse(self.text) else { return fallback() };
        let mut path = Vec::new();
        let Some(hit) = find(doc.get_ref(), top, &span, &mut path) else { return fallback() };
        let table = describe_table(&path);
        match hit {
            Hit::Key { key, kind } if err.message().starts_with("unknown field") => {
                ConfigError::UnknownKey {
                    help: unknown_key_help(kind, &key),
                    at: at.into(),
                    key,
                    table,
                }
            }
            Hit::Key { .. } => fallback(),
            // A table without a key it must have: serde points at the table.
            Hit::Value { key, kind, value }
                if matches!(value.get_ref(), DeValue::Table(_))
                    && kind.child(&key).is_some()
                    && err.message().starts_with("missing field") =>
            {
                let mut inner = path.clone();
                inner.push(key);
                ConfigError::Invalid {
                    at: at.into(),
                    message: format!("{} in {}", err.message(), describe_table(&inner)),
                }
            }
            Hit::Value { key, kind, value } => ConfigError::WrongType {
                at: at.into(),
                expected: kind.expected(&key).to_owned(),
                found: self.describe_found(value, &span),
                field: key,
                table,
            },
        }
    }

    /// `a string `'3'``, `an integer `3` in the array`, `a table`.
    fn describe_found(&self, value: &Spanned<DeValue<'_>>, span: &Range<usize>) -> String {
        if let DeValue::Array(items) = value.get_ref() {
            let inner =
                items.iter().find(|i| i.span() != value.span() && contains(&i.span(), span));
            return match inner {
                Some(item) => format!("{} in the array", self.describe_one(item)),
                None => "an array".to_owned(),
            };
        }
        self.describe_one(value)
    }

    fn describe_one(&self, value: &Spanned<DeValue<'_>>) -> String {
        let kind = value.get_ref().type_str();
        let article = if kind.starts_with(['a', 'e', 'i', 'o', 'u']) { "an" } else { "a" };
        match value.get_ref() {
            DeValue::Array(_) | DeValue::Table(_) => format!("{article} {kind}"),
            _ => {
                let raw = self.text.get(value.span()).unwrap_or_default();
                let mut excerpt: String = raw.chars().take(MAX_EXCERPT_CHARS).collect();
                if excerpt.len() < raw.len() {
                    excerpt.push('…');
                }
                format!("{article} {kind} `{excerpt}`")
            }
        }
    }
}

/// Reads a config file (or package.json) as UTF-8, naming it on failure.
pub fn read_file(root: &Path, file: &Path) -> Result<String, ConfigError> {
    std::fs::read_to_string(file)
        .map_err(|source| ConfigError::Io { path: shown_path(root, file), source })
}

/// Where an error span lands in the document.
enum Hit<'d, 'i> {
    /// On a key of a table of this kind.
    Key { key: String, kind: TableKind },
    /// In the value of `key` of a table of this kind.
    Value { key: String, kind: TableKind, value: &'d Spanned<DeValue<'i>> },
}

/// Finds the key or value at `span`, recording the table path on the way (`tasks`, `build`).
fn find<'d, 'i>(
    table: &'d DeTable<'i>,
    kind: TableKind,
    span: &Range<usize>,
    path: &mut Vec<String>,
) -> Option<Hit<'d, 'i>> {
    for (key, value) in table {
        let name: &str = key.get_ref();
        if key.span() == *span {
            return Some(Hit::Key { key: name.to_owned(), kind });
        }
        // A `[header]` table's span is its header only, so descend into every table that
        // schema knows rather than pruning by span.
        if let (Some(child), DeValue::Table(inner)) = (kind.child(name), value.get_ref()) {
            path.push(name.to_owned());
            if let Some(hit) = find(inner, child, span, path) {
                return Some(hit);
            }
            path.pop();
        }
        if contains(&value.span(), span) {
            return Some(Hit::Value { key: name.to_owned(), kind, value });
        }
    }
    None
}

fn contains(outer: &Range<usize>, inner: &Range<usize>) -> bool {
    outer.start <= inner.start && inner.end <= outer.end && !outer.is_empty()
}

/// `[tasks.build]`, or `the top level` for the empty path.
fn describe_table(path: &[String]) -> String {
    if path.is_empty() { "the top level".to_owned() } else { format!("[{}]", path.join(".")) }
}

fn unknown_key_help(kind: TableKind, key: &str) -> Option<String> {
    if kind == TableKind::ProjectTop && key == "workspace" {
        return Some("[workspace] belongs only in the workspace root's prova.toml".to_owned());
    }
    let keys = kind.keys();
    did_you_mean(key, keys.iter().copied()).or_else(|| {
        (!keys.is_empty()).then(|| {
            let list: Vec<String> = keys.iter().map(|k| format!("`{k}`")).collect();
            format!("allowed keys: {}", list.join(", "))
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::schema::{ProjectFile, WorkspaceFile};

    fn ws_err(text: &str) -> ConfigError {
        let src = ConfigSource::new(Path::new("/ws"), Path::new("/ws/prova.toml"), text);
        src.parse::<WorkspaceFile>(TableKind::WorkspaceTop).unwrap_err()
    }

    fn project_err(text: &str) -> ConfigError {
        let src = ConfigSource::new(Path::new("/ws"), Path::new("/ws/apps/web/prova.toml"), text);
        src.parse::<ProjectFile>(TableKind::ProjectTop).unwrap_err()
    }

    #[test]
    fn syntax_errors_carry_the_parser_position() {
        let err = ws_err("[workspace]\nprojects = [\"a\"\n");
        assert!(matches!(err, ConfigError::Syntax { .. }), "{err:?}");
        let msg = err.to_string();
        assert!(msg.starts_with("prova.toml:2:"), "{msg}");
        let err = ws_err("[tasks.build]\ncommand = 'x'\ncommand = 'y'\n");
        assert!(
            err.to_string().starts_with("prova.toml:3:1: invalid TOML: duplicate key"),
            "{err}"
        );
    }

    #[test]
    fn unknown_task_key_names_table_and_suggests() {
        let err = project_err("[project]\nname = 'web'\n\n[tasks.build]\ncomand = 'x'\n");
        assert_eq!(
            err.to_string(),
            "apps/web/prova.toml:5:1: unknown key `comand` in [tasks.build]\n  help: did you mean `command`?"
        );
    }

    #[test]
    fn unknown_keys_at_every_level() {
        let err = ws_err("[taks.build]\n");
        assert!(matches!(&err, ConfigError::UnknownKey { key, .. } if key == "taks"));
        assert!(err.to_string().starts_with("prova.toml:1:2: unknown key `taks` in the top level"));
        assert_eq!(err.help(), Some("did you mean `tasks`?"));

        let err = ws_err("[workspace]\nproject = ['a/*']\n");
        assert!(
            err.to_string().starts_with("prova.toml:2:1: unknown key `project` in [workspace]")
        );
        assert_eq!(err.help(), Some("did you mean `projects`?"));

        let err = project_err("[project]\nnmae = 'x'\n");
        assert!(err.to_string().contains("2:1: unknown key `nmae` in [project]"), "{err}");
        assert_eq!(err.help(), Some("did you mean `name`?"));

        let err = project_err("[workspace]\nprojects = []\n");
        assert!(err.help().unwrap().contains("workspace root"), "{err}");

        // Dotted keys and inline tables are placed too.
        let err = ws_err("tasks.build.colour = 1\n");
        assert!(
            err.to_string().starts_with("prova.toml:1:13: unknown key `colour` in [tasks.build]")
        );
        assert!(err.help().unwrap().starts_with("allowed keys: `command`"), "{err}");
        let err = ws_err("[tasks]\nlint = { cmd = 'x' }\n");
        assert!(err.to_string().starts_with("prova.toml:2:10: unknown key `cmd` in [tasks.lint]"));
    }

    #[test]
    fn wrong_types_name_field_and_expected_type() {
        let err = ws_err("[tasks.build]\nretries = \"3\"\n");
        assert_eq!(
            err.to_string(),
            "prova.toml:2:11: `retries` in [tasks.build] must be a non-negative integer, found a string `\"3\"`"
        );
        let err = ws_err("[tasks.build]\nretries = -1\n");
        assert!(err.to_string().contains("found an integer `-1`"), "{err}");
        let err = ws_err("[tasks.build]\ndeps = \"^build\"\n");
        assert!(
            err.to_string().starts_with(
                "prova.toml:2:8: `deps` in [tasks.build] must be an array of strings, found a string"
            ),
            "{err}"
        );
        let err = ws_err("[tasks.build]\ndeps = [\"^build\", 3]\n");
        assert!(err.to_string().contains("2:19:"), "{err}");
        assert!(err.to_string().ends_with("found an integer `3` in the array"), "{err}");
        let err = ws_err("[tasks.build]\ncommand = 3\n");
        assert!(err.to_string().contains("`command` in [tasks.build] must be a string"), "{err}");
        let err = ws_err("[tasks.build]\ncache = 'yes'\n");
        assert!(err.to_string().contains("must be a boolean"), "{err}");
        let err = ws_err("tasks = 3\n");
        assert!(err.to_string().contains("`tasks` in the top level must be a table"), "{err}");
        let err = ws_err("[workspace]\nprojects = 'apps/*'\n");
        assert!(err.to_string().contains("`projects` in [workspace] must be an array"), "{err}");
    }

    #[test]
    fn cache_tables_are_placed_too() {
        let err = ws_err("[cache.reapi]\nendpont = 'grpc://h:1'\n");
        assert!(
            err.to_string().starts_with("prova.toml:2:1: unknown key `endpont` in [cache.reapi]"),
            "{err}"
        );
        assert_eq!(err.help(), Some("did you mean `endpoint`?"));
        let err = ws_err("[cache]\nrepai = {}\n");
        assert!(err.to_string().contains("unknown key `repai` in [cache]"), "{err}");
        assert_eq!(err.help(), Some("did you mean `reapi`?"));
        let err = ws_err("[cache.reapi]\nendpoint = 8980\n");
        assert!(
            err.to_string()
                .contains("`endpoint` in [cache.reapi] must be a string, found an integer"),
            "{err}"
        );
        let err = ws_err("[cache.reapi]\nendpoint = 'grpc://h:1'\nupload = 'sometimes'\n");
        assert!(
            err.to_string().starts_with(
                "prova.toml:3:10: `upload` in [cache.reapi] must be one of \"ci\", \"always\" or \
                 \"never\", found a string `'sometimes'`"
            ),
            "{err}"
        );
        let err = ws_err("[workspace]\n[cache.reapi]\ninstance_name = 'x'\n");
        assert!(
            err.to_string()
                .starts_with("prova.toml:2:1: missing field `endpoint` in [cache.reapi]"),
            "{err}"
        );
        let err = project_err("[cache.reapi]\nendpoint = 'grpc://h:1'\n");
        assert!(err.to_string().contains("unknown key `cache` in the top level"), "{err}");
    }

    /// Editors read a `#:schema` first line (taplo); to TOML it is a comment.
    #[test]
    fn a_schema_directive_is_a_comment() {
        let text = "#:schema ./.prova/prova.schema.json\n[workspace]\nprojects = ['a']\n";
        let src = ConfigSource::new(Path::new("/ws"), Path::new("/ws/prova.toml"), text);
        assert_eq!(src.has_workspace_table(), Some(true));
        let file = src.parse::<WorkspaceFile>(TableKind::WorkspaceTop);
        assert!(file.is_ok_and(|f| f.workspace.is_some_and(|w| w.projects.len() == 1)));
        let text = "#:schema ../../.prova/prova.schema.json\n[project]\nname = 'web'\n";
        let src = ConfigSource::new(Path::new("/ws"), Path::new("/ws/a/prova.toml"), text);
        assert!(src.parse::<ProjectFile>(TableKind::ProjectTop).is_ok());
    }

    #[test]
    fn workspace_table_detection() {
        let src = |text| ConfigSource::new(Path::new("/"), Path::new("/prova.toml"), text);
        assert_eq!(src("[workspace]\n").has_workspace_table(), Some(true));
        assert_eq!(src("[project]\n").has_workspace_table(), Some(false));
        assert_eq!(src("workspace = 1\n").has_workspace_table(), Some(false));
        assert_eq!(src("[workspace\n").has_workspace_table(), None);
    }
}
