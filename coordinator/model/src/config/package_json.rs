//! What prova reads from a project's `package.json`: its `name` and the keys of
//! `dependencies`, `devDependencies` and `optionalDependencies` (which of those name
//! workspace projects is decided by the caller, who knows every project's name).
//! `peerDependencies` are not edges: the consumer provides them.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;
use serde::de::IgnoredAny;

use super::error::ConfigError;
use super::parse::read_file;
use super::{LineIndex, Located, Location};

/// The file name.
pub const PACKAGE_JSON: &str = "package.json";

/// The parts of a `package.json` prova uses.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PackageJson {
    /// `name`, where it was written.
    pub name: Option<Located<String>>,
    /// Dependency names (every kind prova counts), each where it was written, in file order of
    /// the sections and name order within each.
    pub deps: Vec<Located<String>>,
    /// `scripts`: name → the shell text (entries that are not strings are left out).
    pub scripts: BTreeMap<String, String>,
    /// `workspaces`: the array, or the `packages` of the object form (the root's).
    pub workspaces: Vec<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Raw {
    name: Option<String>,
    dependencies: Option<BTreeMap<String, IgnoredAny>>,
    dev_dependencies: Option<BTreeMap<String, IgnoredAny>>,
    optional_dependencies: Option<BTreeMap<String, IgnoredAny>>,
    scripts: Option<BTreeMap<String, serde_json::Value>>,
    workspaces: Option<serde_json::Value>,
}

/// Reads `dir/package.json` (`dir` absolute) if there is one.
pub fn read(root: &Path, dir: &Path) -> Result<Option<PackageJson>, ConfigError> {
    let file = dir.join(PACKAGE_JSON);
    if !file.is_file() {
        return Ok(None);
    }
    let text = read_file(root, &file)?;
    parse(root, &file, &text).map(Some)
}

/// Parses the text of `file`.
pub fn parse(root: &Path, file: &Path, text: &str) -> Result<PackageJson, ConfigError> {
    // Some Windows editors write a byte-order mark, which npm accepts and serde_json does not.
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let raw: Raw = serde_json::from_str(text).map_err(|e| {
        let (line, col) = (e.line(), e.column());
        let full = e.to_string();
        let suffix = format!(" at line {line} column {col}");
        ConfigError::PackageJson {
            at: Location::new(root, file, clamp(line), clamp(col.max(1))).into(),
            message: full.strip_suffix(&suffix).unwrap_or(&full).to_owned(),
        }
    })?;
    let lines = LineIndex::new(text);
    let at = |offset: usize| {
        let ((line, col), _) = lines.line_col(text, offset);
        Location::new(root, file, line, col)
    };
    let name = raw.name.map(|n| Located::new(n, at(key_offset(text, "name", 0).unwrap_or(0))));
    let mut deps = Vec::new();
    for (section, map) in [
        ("dependencies", raw.dependencies),
        ("devDependencies", raw.dev_dependencies),
        ("optionalDependencies", raw.optional_dependencies),
    ] {
        let start = key_offset(text, section, 0).unwrap_or(0);
        for key in map.unwrap_or_default().into_keys() {
            let offset = key_offset(text, &key, start).unwrap_or(start);
            deps.push(Located::new(key, at(offset)));
        }
    }
    let scripts = raw
        .scripts
        .unwrap_or_default()
        .into_iter()
        .filter_map(|(k, v)| v.as_str().map(|s| (k, s.to_owned())))
        .collect();
    let list = match raw.workspaces {
        Some(serde_json::Value::Object(o)) => o.get("packages").cloned(),
        other => other,
    };
    let workspaces = match list {
        Some(serde_json::Value::Array(a)) => {
            a.iter().filter_map(|v| v.as_str().map(str::to_owned)).collect()
        }
        _ => Vec::new(),
    };
    Ok(PackageJson { name, deps, scripts, workspaces })
}

/// Byte offset of the first `"key"` followed by `:` at or after `from`: where a key was
/// written, for messages (serde_json does not report positions of valid values).
fn key_offset(text: &str, key: &str, from: usize) -> Option<usize> {
    let quoted = format!("\"{key}\"");
    let mut pos = from;
    while let Some(found) = text.get(pos..)?.find(&quoted) {
        let start = pos + found;
        let after = &text[start + quoted.len()..];
        if after.trim_start().starts_with(':') {
            return Some(start);
        }
        pos = start + quoted.len();
    }
    None
}

fn clamp(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pj(text: &str) -> Result<PackageJson, ConfigError> {
        parse(Path::new("/ws"), Path::new("/ws/apps/web/package.json"), text)
    }

    #[test]
    fn name_and_every_counted_dependency_kind() {
        let text = r#"{
  "name": "web",
  "dependencies": { "ui": "workspace:*", "react": "^18" },
  "devDependencies": { "utils": "*" },
  "peerDependencies": { "types": "*" },
  "optionalDependencies": { "fsevents": "*" }
}"#;
        let p = pj(text).unwrap();
        let name = p.name.unwrap();
        assert_eq!(name.value, "web");
        assert_eq!((name.at.line, name.at.col), (2, 3));
        let deps: Vec<&str> = p.deps.iter().map(|d| d.value.as_str()).collect();
        assert_eq!(deps, ["react", "ui", "utils", "fsevents"]);
        assert_eq!(p.deps[1].at.to_string(), "apps/web/package.json:3:21");
        assert_eq!(p.deps[2].at.line, 4);
    }

    #[test]
    fn malformed_package_json_names_the_file_and_line() {
        let err = pj("{\n  \"name\": \"web\",\n  \"dependencies\": {,}\n}").unwrap_err();
        let msg = err.to_string();
        assert!(msg.starts_with("apps/web/package.json:3:"), "{msg}");
        assert!(msg.contains("invalid package.json"), "{msg}");
        assert!(!msg.contains("at line"), "{msg}");
        let err = pj("{\"name\": 5}").unwrap_err();
        assert!(err.to_string().contains("invalid type: integer `5`"), "{err}");
    }

    #[test]
    fn a_byte_order_mark_is_skipped() {
        assert_eq!(pj("\u{feff}{\"name\": \"web\"}").unwrap().name.unwrap().value, "web");
    }

    #[test]
    fn missing_fields_are_fine() {
        assert_eq!(pj("{}").unwrap(), PackageJson::default());
        assert_eq!(pj("{\"dependencies\": null}").unwrap(), PackageJson::default());
    }
}
