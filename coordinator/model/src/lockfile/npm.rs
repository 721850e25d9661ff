//! `package-lock.json` (and `npm-shrinkwrap.json`) v2/v3: the `packages` map, keyed by
//! install location (`""` the root, `packages/a` a workspace package, `node_modules/x` and
//! `node_modules/a/node_modules/x` installed ones). A dependency `d` of the package at `L`
//! resolves as node does: `L/node_modules/d`, then the same under each ancestor directory of
//! `L`, up to the root's `node_modules/d`. A `link` entry stands for its `resolved` target; a
//! location outside `node_modules` is a workspace package (internal). v1 (no `packages`) is
//! not read.

use serde_json::{Map, Value};

use super::{External, Graph, LockError};

/// Parses the text of a `package-lock.json`.
pub fn parse(text: &str) -> Result<Graph, LockError> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let doc: Value =
        serde_json::from_str(text).map_err(|e| LockError::Invalid(format!("not JSON: {e}")))?;
    let Some(packages) = doc.get("packages").and_then(Value::as_object) else {
        let version =
            doc.get("lockfileVersion").map_or_else(|| "none".to_owned(), Value::to_string);
        return Err(LockError::Invalid(format!(
            "lockfileVersion {version} has no `packages` map (v2 or v3 is read)"
        )));
    };
    let mut g = Graph::default();
    for (loc, entry) in packages {
        g.node(loc, external_of(loc, entry))?;
    }
    for (loc, entry) in packages {
        let Some(from) = g.find(loc) else { continue };
        if entry.get("link").and_then(Value::as_bool) == Some(true) {
            if let Some(target) = entry.get("resolved").and_then(Value::as_str)
                && let Some(to) = g.find(target)
            {
                g.edge(from, to);
            }
            continue;
        }
        let installed = loc.split('/').any(|c| c == "node_modules");
        if !installed {
            g.project(loc, from);
        }
        let mut kinds = vec!["dependencies", "optionalDependencies", "peerDependencies"];
        if !installed {
            kinds.push("devDependencies");
        }
        for kind in kinds {
            for name in
                entry.get(kind).and_then(Value::as_object).map(Map::keys).into_iter().flatten()
            {
                if let Some(to) = resolve(&g, loc, name) {
                    g.edge(from, to);
                }
            }
        }
    }
    Ok(g)
}

/// The external package at `loc`, if it is an installed (not linked) one.
fn external_of(loc: &str, entry: &Value) -> Option<External> {
    let (_, name) = loc.rsplit_once("node_modules/")?;
    if entry.get("link").and_then(Value::as_bool) == Some(true) {
        return None;
    }
    let field = |k: &str| entry.get(k).and_then(Value::as_str).unwrap_or_default().to_owned();
    let integrity = match field("integrity") {
        s if s.is_empty() => field("resolved"),
        s => s,
    };
    let name = match field("name") {
        // An alias (`"x": "npm:real@1"`) records the real name.
        n if !n.is_empty() => n,
        _ => name.to_owned(),
    };
    Some(External { name, version: field("version"), integrity })
}

/// Where node finds `name` required from the package at `loc`.
fn resolve(g: &Graph, loc: &str, name: &str) -> Option<usize> {
    let mut dir = loc;
    loop {
        let candidate = if dir.is_empty() {
            format!("node_modules/{name}")
        } else {
            format!("{dir}/node_modules/{name}")
        };
        if let Some(i) = g.find(&candidate) {
            return Some(i);
        }
        if dir.is_empty() {
            return None;
        }
        dir = dir.rsplit_once('/').map_or("", |(parent, _)| parent);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::lockfile::names;

    const LOCK: &str = r#"{
      "lockfileVersion": 3,
      "packages": {
        "": { "workspaces": ["packages/*"], "devDependencies": { "typescript": "5" } },
        "node_modules/a": { "resolved": "packages/a", "link": true },
        "node_modules/b": { "resolved": "packages/b", "link": true },
        "node_modules/typescript": { "version": "5.6.3", "integrity": "sha512-ts", "dev": true },
        "node_modules/left": { "version": "1.0.0", "integrity": "sha512-l", "dependencies": { "shared": "^1" } },
        "node_modules/shared": { "version": "1.5.0", "integrity": "sha512-s1" },
        "node_modules/right": { "version": "2.0.0", "dependencies": { "shared": "^2" } },
        "node_modules/right/node_modules/shared": { "version": "2.1.0", "integrity": "sha512-s2" },
        "packages/a": { "version": "1.0.0", "dependencies": { "left": "^1" } },
        "packages/b": { "version": "1.0.0", "dependencies": { "a": "1.0.0", "right": "^2" },
                        "devDependencies": { "missing-one": "1" } }
      }
    }"#;

    #[test]
    fn each_project_gets_what_it_resolves_to_and_the_roots_toolchain() {
        let g = parse(LOCK).unwrap();
        assert_eq!(names(&g, "packages/a"), ["left@1.0.0", "shared@1.5.0", "typescript@5.6.3"]);
        // b reaches a's externals through the link, and its nested shared@2 first.
        assert_eq!(
            names(&g, "packages/b"),
            ["left@1.0.0", "right@2.0.0", "shared@1.5.0", "shared@2.1.0", "typescript@5.6.3"]
        );
        let a = g.externals_of("packages/a").unwrap();
        assert_eq!(a[0].integrity, "sha512-l");
    }

    #[test]
    fn hostile_lockfiles_are_errors_or_bounded_walks_never_panics() {
        for bad in [
            "",
            "[]",
            "{",
            "{\"lockfileVersion\": 1, \"dependencies\": {}}",
            "{\"packages\": 5}",
            "null",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
        // Wrong types inside entries are skipped, not fatal.
        let g = parse(r#"{"packages": {"": {"dependencies": {"x": 1}}, "node_modules/x": {"version": 7, "dependencies": []}}}"#)
            .unwrap();
        assert_eq!(names(&g, ""), ["x@"]);
        // A dependency cycle, a link to nowhere, a link to itself.
        let g = parse(
            r#"{"packages": {
              "": {"dependencies": {"p": "1", "q": "1", "gone": "1"}},
              "node_modules/p": {"version": "1", "dependencies": {"q": "1"}},
              "node_modules/q": {"version": "1", "dependencies": {"p": "1"}},
              "node_modules/gone": {"resolved": "packages/none", "link": true},
              "node_modules/self": {"resolved": "node_modules/self", "link": true}
            }}"#,
        )
        .unwrap();
        assert_eq!(names(&g, ""), ["p@1", "q@1"]);
    }

    #[test]
    fn a_long_chain_is_walked_without_recursion() {
        let mut packages = String::from("\"\": {\"dependencies\": {\"p0\": \"1\"}}");
        for i in 0..50_000 {
            packages.push_str(&format!(
                ",\"node_modules/p{i}\": {{\"version\": \"1\", \"dependencies\": {{\"p{}\": \"1\"}}}}",
                i + 1
            ));
        }
        let g = parse(&format!("{{\"packages\": {{{packages}}}}}")).unwrap();
        assert_eq!(g.externals_of("").unwrap().len(), 50_000);
    }
}
