//! `Cargo.lock` (v1 to v4): `[[package]]` tables with `name`, `version`, `source` (absent for
//! workspace members: internal), `checksum`, and `dependencies` written as `name`,
//! `name version` or `name version (source)`. A project's node is the member whose name its
//! own `Cargo.toml` `[package] name` gives.

use std::collections::HashMap;

use serde::Deserialize;

use super::{External, Graph, LockError, Manifests};

#[derive(Deserialize)]
struct Lock {
    #[serde(default)]
    package: Vec<Package>,
}

#[derive(Deserialize)]
struct Package {
    name: String,
    version: String,
    source: Option<String>,
    checksum: Option<String>,
    #[serde(default)]
    dependencies: Vec<String>,
}

#[derive(Deserialize)]
struct Manifest {
    package: Option<ManifestPackage>,
}

#[derive(Deserialize)]
struct ManifestPackage {
    name: Option<String>,
}

/// Parses the text of a `Cargo.lock`.
pub fn parse(text: &str, manifests: &Manifests) -> Result<Graph, LockError> {
    let lock: Lock = toml::from_str(text)
        .map_err(|e| LockError::Invalid(format!("not a Cargo.lock: {}", e.message())))?;
    let mut g = Graph::default();
    let mut by_name: HashMap<&str, Vec<usize>> = HashMap::new();
    let mut members: HashMap<&str, usize> = HashMap::new();
    for p in &lock.package {
        let id = format!("{} {} ({})", p.name, p.version, p.source.as_deref().unwrap_or(""));
        let external = p.source.as_ref().map(|source| External {
            name: p.name.clone(),
            version: p.version.clone(),
            integrity: p.checksum.clone().unwrap_or_else(|| source.clone()),
        });
        let node = g.node(&id, external)?;
        by_name.entry(&p.name).or_default().push(node);
        if p.source.is_none() {
            members.insert(&p.name, node);
        }
    }
    for p in &lock.package {
        let id = format!("{} {} ({})", p.name, p.version, p.source.as_deref().unwrap_or(""));
        let Some(from) = g.find(&id) else { continue };
        for dep in &p.dependencies {
            let mut parts = dep.splitn(3, ' ');
            let name = parts.next().unwrap_or_default();
            let version = parts.next();
            let source = parts.next().map(|s| s.trim_start_matches('(').trim_end_matches(')'));
            let to = match (version, source) {
                (Some(v), Some(s)) => g.find(&format!("{name} {v} ({s})")),
                (Some(v), None) => by_name.get(name).and_then(|nodes| {
                    nodes
                        .iter()
                        .copied()
                        .find(|&n| g.externals_version(n).is_none_or(|ver| ver == v))
                }),
                _ => by_name.get(name).and_then(|nodes| nodes.first().copied()),
            };
            if let Some(to) = to {
                g.edge(from, to);
            }
        }
    }
    for dir in manifests.by_dir.keys() {
        let Some(text) = manifests.get(dir, "Cargo.toml") else { continue };
        let Ok(m) = toml::from_str::<Manifest>(text) else { continue };
        if let Some(name) = m.package.and_then(|p| p.name)
            && let Some(&node) = members.get(name.as_str())
        {
            g.project(dir, node);
        }
    }
    Ok(g)
}

impl Graph {
    /// The version of the external package at `node` (`None` for an internal one).
    fn externals_version(&self, node: usize) -> Option<&str> {
        self.externals.get(node)?.as_ref().map(|e| e.version.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOCK: &str = r#"version = 4

[[package]]
name = "app"
version = "0.1.0"
dependencies = ["lib", "serde 1.0.200", "rand"]

[[package]]
name = "lib"
version = "0.1.0"
dependencies = ["memchr"]

[[package]]
name = "memchr"
version = "2.7.0"
source = "registry+https://example.invalid/index"
checksum = "aaaa"

[[package]]
name = "serde"
version = "1.0.200"
source = "registry+https://example.invalid/index"
checksum = "bbbb"

[[package]]
name = "serde"
version = "0.9.0"
source = "registry+https://example.invalid/index"
checksum = "cccc"

[[package]]
name = "rand"
version = "0.8.5"
source = "registry+https://example.invalid/index"
checksum = "dddd"
dependencies = ["serde 0.9.0 (registry+https://example.invalid/index)", "rand"]
"#;

    fn manifests() -> Manifests {
        let mut m = Manifests::default();
        for (dir, name) in [("crates/app", "app"), ("crates/lib", "lib")] {
            m.by_dir
                .entry(dir.to_owned())
                .or_default()
                .insert("Cargo.toml".into(), format!("[package]\nname = \"{name}\"\n"));
        }
        m
    }

    fn names(g: &Graph, dir: &str) -> Vec<String> {
        g.externals_of(dir)
            .unwrap_or_default()
            .into_iter()
            .map(|e| format!("{} {}", e.name, e.version))
            .collect()
    }

    #[test]
    fn members_reach_their_crates_by_each_dependency_spelling() {
        let g = parse(LOCK, &manifests()).unwrap();
        assert_eq!(names(&g, "crates/lib"), ["memchr 2.7.0"]);
        assert_eq!(
            names(&g, "crates/app"),
            ["memchr 2.7.0", "rand 0.8.5", "serde 0.9.0", "serde 1.0.200"]
        );
        assert_eq!(g.externals_of("crates/lib").unwrap()[0].integrity, "aaaa");
        assert_eq!(g.externals_of("crates/none"), None);
    }

    #[test]
    fn hostile_files_never_panic() {
        for bad in ["[[package]]\nname = 5\n", "package = 3", "[[package]\n"] {
            assert!(parse(bad, &manifests()).is_err(), "{bad:?}");
        }
        let odd = "[[package]]\nname = \"x\"\nversion = \"1\"\ndependencies = [\"\", \"x 1 (\", \"y 2 3 4\"]\n";
        assert!(parse(odd, &manifests()).is_ok());
    }
}
