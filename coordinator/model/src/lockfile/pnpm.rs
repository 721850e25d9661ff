//! `pnpm-lock.yaml` (v5 to v9): `importers` (each workspace directory's `dependencies`,
//! `devDependencies`, `optionalDependencies`, each `name: {specifier, version}` or, in v5,
//! `name: version`), `packages` (metadata: `resolution.integrity`) and, from v9,
//! `snapshots` (the dependency edges). A `link:` version is a workspace package (internal,
//! resolved against the importer's directory). Package ids are tried in each version's
//! spelling: `name@1.0.0` (v9), `/name@1.0.0` (v6), `/name/1.0.0` (v5); a peer suffix
//! `(peer@x)` is dropped to find the metadata.

use yaml_rust2::Yaml;

use super::{External, Graph, LockError, normalise_dir};

/// Parses the text of a `pnpm-lock.yaml`.
pub fn parse(text: &str) -> Result<Graph, LockError> {
    let doc = load_yaml(text)?;
    let importers = match &doc["importers"] {
        Yaml::Hash(h) => h.iter().map(|(k, v)| (scalar(k), v)).collect::<Vec<_>>(),
        // A single-package lockfile has the root's deps at the top level.
        _ => vec![(".".to_owned(), &doc)],
    };
    let packages = doc["packages"].as_hash();
    let snapshots = doc["snapshots"].as_hash();
    let mut g = Graph::default();
    // Nodes for every package id first, then edges.
    let mut ids: Vec<String> = Vec::new();
    for map in [packages, snapshots].into_iter().flatten() {
        ids.extend(map.keys().map(scalar));
    }
    for id in &ids {
        let meta = packages.and_then(|p| p.get(&Yaml::String(strip_peers(id).to_owned())));
        g.node(id, Some(external_of(id, meta)))?;
    }
    for id in &ids {
        let Some(from) = g.find(id) else { continue };
        let entry = [snapshots, packages]
            .into_iter()
            .flatten()
            .find_map(|m| m.get(&Yaml::String(id.clone())).filter(|e| !deps_of(e).is_empty()));
        for (name, version) in entry.map(deps_of).unwrap_or_default() {
            if let Some(to) = find(&g, &name, &version) {
                g.edge(from, to);
            }
        }
    }
    for (dir, _) in &importers {
        let node = g.node(&format!("importer:{}", normalise_dir(dir)), None)?;
        g.project(dir, node);
    }
    for (dir, entry) in &importers {
        let Some(from) = g.find(&format!("importer:{}", normalise_dir(dir))) else { continue };
        for (name, version) in deps_of(entry) {
            let to = match version.strip_prefix("link:") {
                Some(rel) => {
                    g.find(&format!("importer:{}", normalise_dir(&format!("{dir}/{rel}"))))
                }
                None => find(&g, &name, &version),
            };
            if let Some(to) = to {
                g.edge(from, to);
            }
        }
    }
    Ok(g)
}

/// Loads one YAML document, refusing what could exhaust the stack or memory: lines indented
/// past [`MAX_INDENT`] or flow collections nested past [`MAX_FLOW_DEPTH`].
pub fn load_yaml(text: &str) -> Result<Yaml, LockError> {
    check_nesting(text)?;
    let mut docs = yaml_rust2::YamlLoader::load_from_str(text)
        .map_err(|e| LockError::Invalid(format!("not YAML: {e}")))?;
    if docs.is_empty() {
        return Err(LockError::Invalid("empty".to_owned()));
    }
    match docs.swap_remove(0) {
        doc @ Yaml::Hash(_) => Ok(doc),
        _ => Err(LockError::Invalid("not a mapping".to_owned())),
    }
}

/// Indentation (in bytes) past which a line is refused.
pub const MAX_INDENT: usize = 256;
/// Flow (`[`, `{`) nesting past which a file is refused.
pub const MAX_FLOW_DEPTH: usize = 64;

fn check_nesting(text: &str) -> Result<(), LockError> {
    let mut depth = 0usize;
    for line in text.lines() {
        if line.len() - line.trim_start().len() > MAX_INDENT {
            return Err(LockError::Invalid(format!("nested deeper than {MAX_INDENT} columns")));
        }
        for b in line.bytes() {
            match b {
                b'[' | b'{' => depth += 1,
                b']' | b'}' => depth = depth.saturating_sub(1),
                _ => {}
            }
            if depth > MAX_FLOW_DEPTH {
                return Err(LockError::Invalid(format!("nested deeper than {MAX_FLOW_DEPTH}")));
            }
        }
    }
    Ok(())
}

/// A scalar key or value as text.
pub fn scalar(y: &Yaml) -> String {
    match y {
        Yaml::String(s) | Yaml::Real(s) => s.clone(),
        Yaml::Integer(i) => i.to_string(),
        Yaml::Boolean(b) => b.to_string(),
        _ => String::new(),
    }
}

/// `(name, version)` of every dependency an importer, package or snapshot lists.
fn deps_of(entry: &Yaml) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for kind in ["dependencies", "devDependencies", "optionalDependencies"] {
        let Some(map) = entry[kind].as_hash() else { continue };
        for (name, v) in map {
            let version = match v {
                Yaml::Hash(_) => scalar(&v["version"]),
                other => scalar(other),
            };
            out.push((scalar(name), version));
        }
    }
    out
}

/// The node of `name` at `version` (which may itself be an id: `name@1.0.0`, `/x/1.0.0`).
fn find(g: &Graph, name: &str, version: &str) -> Option<usize> {
    let candidates = [
        format!("{name}@{version}"),
        format!("/{name}@{version}"),
        format!("/{name}/{version}"),
        version.to_owned(),
        format!("/{version}"),
    ];
    candidates.iter().find_map(|c| g.find(c))
}

fn strip_peers(id: &str) -> &str {
    // `(` only starts a peer suffix; scoped names and versions never hold one.
    id.split('(').next().unwrap_or(id)
}

/// Name and version from an id (`@s/n@1.0.0`, `/n@1.0.0`, `/n/1.0.0`), pinned by the
/// metadata's integrity (else its tarball, else nothing).
fn external_of(id: &str, meta: Option<&Yaml>) -> External {
    let bare = strip_peers(id).trim_start_matches('/');
    let (name, version) = match bare.get(1..).and_then(|rest| rest.find('@')) {
        Some(at) => (&bare[..=at], &bare[at + 2..]),
        None => bare.rsplit_once('/').unwrap_or((bare, "")),
    };
    let meta = meta.unwrap_or(&Yaml::BadValue);
    let pinned = |k: &str| scalar(&meta["resolution"][k]);
    let integrity = [pinned("integrity"), pinned("tarball"), pinned("commit")]
        .into_iter()
        .find(|s| !s.is_empty())
        .unwrap_or_default();
    let version = match scalar(&meta["version"]) {
        v if !v.is_empty() => v,
        _ => version.to_owned(),
    };
    External { name: name.to_owned(), version, integrity }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::lockfile::names;

    const V9: &str = "lockfileVersion: '9.0'
importers:
  .:
    devDependencies:
      typescript:
        specifier: 5.6.3
        version: 5.6.3
  packages/a:
    dependencies:
      left:
        specifier: ^1
        version: 1.0.0(peer@3.0.0)
  packages/b:
    dependencies:
      a:
        specifier: workspace:*
        version: link:../a
      '@scope/right':
        specifier: ^2
        version: 2.0.0
packages:
  typescript@5.6.3:
    resolution: {integrity: sha512-ts}
  left@1.0.0:
    resolution: {integrity: sha512-l}
  peer@3.0.0:
    resolution: {integrity: sha512-p}
  '@scope/right@2.0.0':
    resolution: {integrity: sha512-r}
snapshots:
  typescript@5.6.3: {}
  left@1.0.0(peer@3.0.0):
    dependencies:
      peer: 3.0.0
  peer@3.0.0: {}
  '@scope/right@2.0.0': {}
";

    #[test]
    fn v9_importers_snapshots_and_links() {
        let g = parse(V9).unwrap();
        assert_eq!(names(&g, "packages/a"), ["left@1.0.0", "peer@3.0.0", "typescript@5.6.3"]);
        assert_eq!(
            names(&g, "packages/b"),
            ["@scope/right@2.0.0", "left@1.0.0", "peer@3.0.0", "typescript@5.6.3"]
        );
        let a = g.externals_of("packages/a").unwrap();
        assert_eq!(a[0].integrity, "sha512-l");
    }

    #[test]
    fn v6_and_v5_ids() {
        let v6 = "lockfileVersion: '6.0'
importers:
  .:
    dependencies:
      x:
        specifier: ^1
        version: 1.2.0
packages:
  /x@1.2.0:
    resolution: {integrity: sha512-x}
    dependencies:
      y: 2.0.0
  /y@2.0.0:
    resolution: {integrity: sha512-y}
";
        assert_eq!(names(&parse(v6).unwrap(), ""), ["x@1.2.0", "y@2.0.0"]);
        let v5 = "lockfileVersion: 5.4
specifiers:
  x: ^1
dependencies:
  x: 1.2.0
packages:
  /x/1.2.0:
    resolution: {integrity: sha512-x}
";
        assert_eq!(names(&parse(v5).unwrap(), ""), ["x@1.2.0"]);
    }

    #[test]
    fn hostile_files_never_panic() {
        for bad in ["", "- a\n- b\n", "importers: [", "a: b: c", "\t- x"] {
            assert!(parse(bad).is_err(), "{bad:?}");
        }
        let deep = format!("x: {}{}", "[".repeat(10_000), "]".repeat(10_000));
        assert!(parse(&deep).is_err());
        let indented: String = (0..2000).map(|i| format!("{}k{i}:\n", " ".repeat(i))).collect();
        assert!(parse(&indented).is_err());
        // Aliases are not expanded (no billion laughs); wrong types are skipped.
        let laughs = "a: &a [x, x, x]\nb: &b [*a, *a, *a]\nc: [*b, *b, *b]\nimporters:\n  .:\n    dependencies: 5\n";
        assert_eq!(names(&parse(laughs).unwrap(), ""), Vec::<String>::new());
        // A cycle and a missing package.
        let cyc = "importers:\n  .:\n    dependencies:\n      p: {version: '1'}\n      gone: {version: '9'}\npackages:\n  p@1:\n    dependencies: {q: '1'}\n  q@1:\n    dependencies: {p: '1'}\n";
        assert_eq!(names(&parse(cyc).unwrap(), ""), ["p@1", "q@1"]);
    }
}
