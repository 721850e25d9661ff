//! `yarn.lock`, both dialects.
//!
//! - **v1** (its own text format): blocks headed by the descriptors they resolve
//!   (`"a@^1.0.0", a@^1.1.0:`), with `version`, `resolved`, `integrity` and an indented
//!   `dependencies:` list of `name "range"`. Workspace packages are not in the file: each
//!   project's `package.json` dependencies (name → range) are looked up as descriptors, and
//!   a dependency naming another workspace package is an edge to that project.
//! - **berry** (yarn 2+, YAML with `__metadata`): entries keyed by descriptors
//!   (`a@npm:^1.0.0`), each with `resolution`, `checksum` and `dependencies: {name: range}`
//!   (looked up as `name@range`, then `name@npm:range`); workspace packages are entries
//!   whose resolution is `name@workspace:DIR`.

use std::collections::HashMap;

use serde_json::Value;

use super::pnpm::{load_yaml, scalar};
use super::{External, Graph, LockError, Manifests, normalise_dir};

/// Parses the text of a `yarn.lock`.
pub fn parse(text: &str, manifests: &Manifests) -> Result<Graph, LockError> {
    if text.lines().any(|l| l.starts_with("__metadata:")) {
        berry(text)
    } else {
        v1(text, manifests)
    }
}

/// One v1 block.
#[derive(Default)]
struct Block {
    descriptors: Vec<String>,
    version: String,
    resolved: String,
    integrity: String,
    deps: Vec<(String, String)>,
}

fn unquote(s: &str) -> &str {
    let s = s.trim();
    s.strip_prefix('"').and_then(|r| r.strip_suffix('"')).unwrap_or(s)
}

/// `name "range"` or `"@s/n" "range"` → (name, range).
fn pair(line: &str) -> Option<(String, String)> {
    let line = line.trim();
    let (name, rest) = if let Some(quoted) = line.strip_prefix('"') {
        let end = quoted.find('"')?;
        (&quoted[..end], &quoted[end + 1..])
    } else {
        line.split_once(' ')?
    };
    Some((name.to_owned(), unquote(rest).to_owned()))
}

fn v1(text: &str, manifests: &Manifests) -> Result<Graph, LockError> {
    let mut blocks: Vec<Block> = Vec::new();
    let mut in_deps = false;
    for line in text.lines() {
        if line.trim().is_empty() || line.trim_start().starts_with('#') {
            continue;
        }
        let indent = line.len() - line.trim_start().len();
        if indent == 0 {
            let header = line.trim_end().strip_suffix(':').ok_or_else(|| {
                LockError::Invalid(format!("a yarn v1 entry header must end in `:`: {line:.80}"))
            })?;
            let descriptors = header.split(',').map(|d| unquote(d).to_owned()).collect();
            blocks.push(Block { descriptors, ..Block::default() });
            in_deps = false;
            continue;
        }
        let Some(block) = blocks.last_mut() else {
            return Err(LockError::Invalid("an indented line before any entry".to_owned()));
        };
        let body = line.trim();
        if indent <= 2 {
            in_deps = matches!(body, "dependencies:" | "optionalDependencies:");
            if let Some((k, v)) = pair(body) {
                match k.as_str() {
                    "version" => block.version = v,
                    "resolved" => block.resolved = v,
                    "integrity" => block.integrity = v,
                    _ => {}
                }
            }
        } else if in_deps && let Some(dep) = pair(body) {
            block.deps.push(dep);
        }
    }
    let mut g = Graph::default();
    let mut by_descriptor: HashMap<String, usize> = HashMap::new();
    for (i, b) in blocks.iter().enumerate() {
        let name = b.descriptors.first().map(|d| descriptor_name(d)).unwrap_or_default();
        let integrity =
            if b.integrity.is_empty() { b.resolved.clone() } else { b.integrity.clone() };
        let node = g.node(
            &format!("block:{i}"),
            Some(External { name: name.to_owned(), version: b.version.clone(), integrity }),
        )?;
        for d in &b.descriptors {
            by_descriptor.insert(d.clone(), node);
        }
    }
    for (i, b) in blocks.iter().enumerate() {
        let Some(from) = g.find(&format!("block:{i}")) else { continue };
        for (name, range) in &b.deps {
            if let Some(&to) = by_descriptor.get(&format!("{name}@{range}")) {
                g.edge(from, to);
            }
        }
    }
    workspace_projects(&mut g, manifests, &by_descriptor)?;
    Ok(g)
}

/// `@s/n@^1` → `@s/n`; `a@npm:^1` → `a`.
fn descriptor_name(d: &str) -> &str {
    match d.get(1..).and_then(|r| r.find('@')) {
        Some(at) => &d[..=at],
        None => d,
    }
}

/// For v1: a node per project with a `package.json`, edges from its dependencies (by
/// descriptor, or to the workspace package of that name).
fn workspace_projects(
    g: &mut Graph,
    manifests: &Manifests,
    by_descriptor: &HashMap<String, usize>,
) -> Result<(), LockError> {
    let mut names: HashMap<String, usize> = HashMap::new();
    let mut deps: Vec<(usize, Vec<(String, String)>)> = Vec::new();
    for dir in manifests.by_dir.keys() {
        let Some(text) = manifests.get(dir, "package.json") else { continue };
        let Ok(json) = serde_json::from_str::<Value>(text.trim_start_matches('\u{feff}')) else {
            continue;
        };
        let node = g.node(&format!("project:{dir}"), None)?;
        g.project(dir, node);
        if let Some(name) = json.get("name").and_then(Value::as_str) {
            names.insert(name.to_owned(), node);
        }
        let mut list = Vec::new();
        for kind in ["dependencies", "devDependencies", "optionalDependencies"] {
            for (name, range) in json.get(kind).and_then(Value::as_object).into_iter().flatten() {
                list.push((name.clone(), range.as_str().unwrap_or_default().to_owned()));
            }
        }
        deps.push((node, list));
    }
    for (from, list) in deps {
        for (name, range) in list {
            let to = names
                .get(&name)
                .filter(|&&n| n != from)
                .or_else(|| by_descriptor.get(&format!("{name}@{range}")));
            if let Some(&to) = to {
                g.edge(from, to);
            }
        }
    }
    Ok(())
}

fn berry(text: &str) -> Result<Graph, LockError> {
    let doc = load_yaml(text)?;
    let Some(entries) = doc.as_hash() else {
        return Err(LockError::Invalid("not a mapping".into()));
    };
    let mut g = Graph::default();
    let mut by_descriptor: HashMap<String, usize> = HashMap::new();
    for (i, (key, entry)) in entries.iter().enumerate() {
        let key = scalar(key);
        if key == "__metadata" {
            continue;
        }
        let resolution = scalar(&entry["resolution"]);
        let workspace_dir = resolution.split_once("@workspace:").map(|(_, dir)| normalise_dir(dir));
        let external = workspace_dir.is_none().then(|| External {
            name: descriptor_name(&resolution).to_owned(),
            version: scalar(&entry["version"]),
            integrity: match scalar(&entry["checksum"]) {
                c if c.is_empty() => resolution.clone(),
                c => c,
            },
        });
        let node = g.node(&format!("entry:{i}"), external)?;
        if let Some(dir) = workspace_dir {
            g.project(&dir, node);
        }
        for d in key.split(',') {
            by_descriptor.insert(d.trim().to_owned(), node);
        }
    }
    for (i, (_, entry)) in entries.iter().enumerate() {
        let Some(from) = g.find(&format!("entry:{i}")) else { continue };
        for kind in ["dependencies", "optionalDependencies", "peerDependencies"] {
            let Some(map) = entry[kind].as_hash() else { continue };
            for (name, range) in map {
                let (name, range) = (scalar(name), scalar(range));
                let to = by_descriptor
                    .get(&format!("{name}@{range}"))
                    .or_else(|| by_descriptor.get(&format!("{name}@npm:{range}")));
                if let Some(&to) = to {
                    g.edge(from, to);
                }
            }
        }
    }
    Ok(g)
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::lockfile::names;

    fn manifests(list: &[(&str, &str)]) -> Manifests {
        let mut m = Manifests::default();
        for (dir, pj) in list {
            m.by_dir
                .entry((*dir).to_owned())
                .or_default()
                .insert("package.json".into(), (*pj).into());
        }
        m
    }

    const V1: &str = r#"# THIS IS AN AUTOGENERATED FILE. DO NOT EDIT THIS FILE DIRECTLY.
# yarn lockfile v1


"@scope/left@^1.0.0", "@scope/left@^1.1.0":
  version "1.2.0"
  resolved "https://example.invalid/left-1.2.0.tgz#abc"
  integrity sha512-left
  dependencies:
    shared "^1"

shared@^1:
  version "1.5.0"
  integrity sha512-shared

tool@5:
  version "5.0.1"
  integrity sha512-tool
"#;

    #[test]
    fn v1_blocks_resolved_from_each_package_json() {
        let m = manifests(&[
            ("", r#"{"devDependencies": {"tool": "5"}}"#),
            ("packages/a", r#"{"name": "a", "dependencies": {"@scope/left": "^1.1.0"}}"#),
            ("packages/b", r#"{"name": "b", "dependencies": {"a": "1.0.0"}}"#),
            ("packages/c", r#"{"name": "c"}"#),
        ]);
        let g = parse(V1, &m).unwrap();
        assert_eq!(names(&g, "packages/a"), ["@scope/left@1.2.0", "shared@1.5.0", "tool@5.0.1"]);
        assert_eq!(
            names(&g, "packages/b"),
            names(&g, "packages/a"),
            "b reaches a's through the workspace edge"
        );
        assert_eq!(names(&g, "packages/c"), ["tool@5.0.1"]);
        assert_eq!(g.externals_of("packages/a").unwrap()[0].integrity, "sha512-left");
    }

    const BERRY: &str = r#"__metadata:
  version: 8
  cacheKey: 10

"a@workspace:^, a@workspace:packages/a":
  version: 0.0.0-use.local
  resolution: "a@workspace:packages/a"
  dependencies:
    left: "npm:^1"
  languageName: unknown
  linkType: soft

"b@workspace:packages/b":
  version: 0.0.0-use.local
  resolution: "b@workspace:packages/b"
  dependencies:
    a: "workspace:^"
  languageName: unknown
  linkType: soft

"left@npm:^1":
  version: 1.3.0
  resolution: "left@npm:1.3.0"
  dependencies:
    left: "npm:^1"
  checksum: 10/abcdef
  languageName: node
  linkType: hard

"root@workspace:.":
  version: 0.0.0-use.local
  resolution: "root@workspace:."
  languageName: unknown
  linkType: soft
"#;

    #[test]
    fn berry_workspaces_and_descriptors() {
        let g = parse(BERRY, &Manifests::default()).unwrap();
        assert_eq!(names(&g, "packages/a"), ["left@1.3.0"]);
        assert_eq!(names(&g, "packages/b"), ["left@1.3.0"]);
        assert_eq!(names(&g, ""), Vec::<String>::new());
        assert_eq!(g.externals_of("packages/a").unwrap()[0].integrity, "10/abcdef");
    }

    #[test]
    fn hostile_files_never_panic() {
        let m = manifests(&[("", r#"{"dependencies": {"x": 5, "y": "1"}}"#), ("p", "not json")]);
        for bad in ["  version \"1\"\n", "no colon here\n"] {
            assert!(parse(bad, &m).is_err(), "{bad:?}");
        }
        // Entries that list themselves, dependencies of nothing, odd quoting.
        let odd =
            "y@1:\n  version \"1\"\n  dependencies:\n    y \"1\"\n    \"unterminated\n    z\nz@:\n";
        assert_eq!(names(&parse(odd, &m).unwrap(), ""), ["y@1"]);
        assert!(parse("__metadata:\n  version: [", &m).is_err());
        assert!(parse("__metadata: 1\nx: 5\n", &m).is_ok());
    }
}
