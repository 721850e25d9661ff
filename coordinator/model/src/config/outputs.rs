//! Where an output pattern may reach (issue 10). A task's outputs are deleted before it runs
//! and written by every restore, so a pattern that could match the workspace root, `.git`, a
//! config file, the cache or another project would let one line of config destroy them. The
//! rule, checked once per pattern of every merged task at load ([`Confinement::check`]):
//!
//! 1. The pattern's *literal prefix* (the components before the first one with a glob
//!    metacharacter; every match lies at or under it, see
//!    [`include_prefix`](prova_protocol::globs::include_prefix)) is neither the workspace root
//!    nor the task's project directory nor one of its ancestors: `**`, `*`, `.`, `""`,
//!    `{dist,src}/**`, `//`, `//**` are refused; `dist/**`, `out/app.js`, `//dist/web/**` pass.
//! 2. The prefix has no `.git` component, does not start with the cache dir `.prova`, and
//!    names no file called `prova.toml`.
//! 3. The prefix lies in no other project's directory (the deepest project holding it is the
//!    task's own, or none for a `//` path outside every project), and no other project's
//!    directory lies under it: a parent project's output never reaches into a nested project.
//! 4. Belt and braces: the pattern, compiled on its own, matches none of the sentinel paths
//!    (`.git/HEAD`, `.git/hooks/pre-commit`, `prova.toml`, `.prova/cache/index.sqlite`, the
//!    project directory and its `prova.toml`, the `prova.toml` of each project above it).
//!
//! Exclusions (`!…`) are not consulted: they narrow a set, and a typo in one must never make
//! a bad include acceptable. Each check costs a few hash lookups per prefix component and one
//! binary search; the sentinel match of a project-relative pattern outside the root depends
//! on the pattern only (it can match nothing outside its project), so it is made once per
//! distinct pattern. Checking every task of a large workspace stays linear.

use std::cell::RefCell;
use std::collections::HashMap;

use prova_protocol::globs::{PathGlobs, include_prefix, is_within, join_rel};

/// prova's own state at the workspace root (the cache lives in `.prova/cache`).
pub const CACHE_DIR: &str = ".prova";

/// What the `help:` of a refused output says.
pub const HELP: &str = "an output must lie inside its task's project: name the directory or \
    file the task writes, e.g. `dist/**` or `build/app.js`; a `//` pattern such as \
    `//dist/web/**` may point elsewhere in the workspace, but never at its root, `.git`, \
    `.prova`, a prova.toml or another project's directory";

/// Every project directory of the workspace, for [`Confinement::check`].
#[derive(Debug)]
pub struct Confinement<'a> {
    /// Project directories (workspace-relative, `""` for the root), sorted.
    sorted: Vec<&'a str>,
    /// Directory → project name.
    names: HashMap<&'a str, &'a str>,
    /// Project-relative pattern → the project-relative sentinel it matches, if any: for a
    /// project other than the root, the answer does not depend on the project.
    relative_hits: RefCell<HashMap<String, Option<&'static str>>>,
}

impl<'a> Confinement<'a> {
    /// The projects as (directory, name) pairs.
    pub fn new(projects: impl IntoIterator<Item = (&'a str, &'a str)>) -> Self {
        let names: HashMap<&str, &str> = projects.into_iter().collect();
        let mut sorted: Vec<&str> = names.keys().copied().collect();
        sorted.sort_unstable();
        Self { sorted, names, relative_hits: RefCell::new(HashMap::new()) }
    }

    /// Why output `pattern` of a task of the project at `dir` may not be an output, if so.
    pub fn check(&self, dir: &str, pattern: &str) -> Option<String> {
        let prefix = match include_prefix(dir, pattern) {
            Ok(Some(prefix)) => prefix,
            Ok(None) => return None,
            Err(e) => return Some(e.to_string()),
        };
        self.structure(dir, &prefix).or_else(|| self.sentinel(dir, pattern))
    }

    /// Rules 1–3, on the literal prefix.
    fn structure(&self, dir: &str, prefix: &str) -> Option<String> {
        if prefix.is_empty() {
            return Some("it can match the whole workspace".to_owned());
        }
        if is_within(dir, prefix) {
            return Some(if prefix == dir {
                format!("it can match everything in the project directory `{dir}`")
            } else {
                format!("it can match `{prefix}`, which holds the project directory `{dir}`")
            });
        }
        if prefix.split('/').any(|c| c == ".git") {
            return Some(format!("it reaches into git's data (`{prefix}`)"));
        }
        if prefix.split('/').next() == Some(CACHE_DIR) {
            return Some(format!("it reaches into prova's cache dir `{CACHE_DIR}`"));
        }
        if prefix.split('/').any(|c| c == crate::config::CONFIG_FILE) {
            return Some(format!("it names a config file (`{prefix}`)"));
        }
        if let Some(owner) = self.owner(prefix).filter(|&o| o != dir) {
            return Some(format!("it reaches into {}", self.describe(owner)));
        }
        if let Some(inner) = self.first_under(prefix).filter(|&q| q != dir) {
            return Some(format!(
                "it can match {}, which lies under `{prefix}`",
                self.describe(inner)
            ));
        }
        None
    }

    /// Rule 4: the pattern alone against paths no output may ever be.
    fn sentinel(&self, dir: &str, pattern: &str) -> Option<String> {
        let compile = || PathGlobs::new(dir, std::slice::from_ref(&pattern.to_owned()));
        let config = crate::config::CONFIG_FILE;
        if !dir.is_empty() && !pattern.starts_with("//") {
            // Matched relative to `dir`, it can only reach `dir` and what lies under it.
            if let Some(hit) = self.relative_hits.borrow().get(pattern) {
                return hit.map(|h| format!("it can match `{}`", join_rel(dir, h)));
            }
            let globs = match compile() {
                Ok(g) => g,
                Err(e) => return Some(e.to_string()),
            };
            let hit =
                ["", config].into_iter().find(|rel| globs.includes_match(&join_rel(dir, rel)));
            self.relative_hits.borrow_mut().insert(pattern.to_owned(), hit);
            return hit.map(|h| format!("it can match `{}`", join_rel(dir, h)));
        }
        let globs = match compile() {
            Ok(g) => g,
            Err(e) => return Some(e.to_string()),
        };
        let fixed = [
            ".git",
            ".git/HEAD",
            ".git/config",
            ".git/hooks/pre-commit",
            ".git/objects/00/0000",
            config,
            CACHE_DIR,
            ".prova/cache",
            ".prova/cache/index.sqlite",
        ];
        let own = [dir.to_owned(), join_rel(dir, config)];
        let above = self.ancestors_of(dir).flat_map(|q| [q.to_owned(), join_rel(q, config)]);
        fixed
            .iter()
            .map(|s| (*s).to_owned())
            .chain(own)
            .chain(above)
            .filter(|p| !p.is_empty())
            .find(|p| globs.includes_match(p))
            .map(|p| format!("it can match `{p}`"))
    }

    /// The deepest project whose directory is `path` or holds it.
    fn owner(&self, path: &str) -> Option<&'a str> {
        let mut cur = path;
        loop {
            if let Some((&dir, _)) = self.names.get_key_value(cur) {
                return Some(dir);
            }
            if cur.is_empty() {
                return None;
            }
            cur = cur.rfind('/').map_or("", |i| &cur[..i]);
        }
    }

    /// Projects strictly above `dir` (its ancestors that are projects), nearest first.
    fn ancestors_of<'s>(&'s self, dir: &'s str) -> impl Iterator<Item = &'a str> + 's {
        let mut cur = Some(dir);
        std::iter::from_fn(move || {
            loop {
                let here = cur?;
                if here.is_empty() {
                    cur = None;
                    return None;
                }
                let parent = here.rfind('/').map_or("", |i| &here[..i]);
                cur = Some(parent);
                if let Some((&d, _)) = self.names.get_key_value(parent) {
                    return Some(d);
                }
            }
        })
    }

    /// The first project (in directory order) strictly under `prefix`: the sorted
    /// directories that start with `prefix/` are contiguous.
    fn first_under(&self, prefix: &str) -> Option<&'a str> {
        let start = format!("{prefix}/");
        let i = self.sorted.partition_point(|d| *d < start.as_str());
        self.sorted.get(i).copied().filter(|d| d.starts_with(start.as_str()))
    }

    fn describe(&self, dir: &str) -> String {
        let name = self.names.get(dir).copied().unwrap_or(dir);
        if dir.is_empty() {
            format!("the root project `{name}`")
        } else {
            format!("project `{name}` (`{dir}`)")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c() -> Confinement<'static> {
        Confinement::new([
            ("apps/web", "web"),
            ("apps/web/plugins/p", "p"),
            ("libs/ui", "ui"),
            ("apps/api", "api"),
        ])
    }

    fn refused(dir: &str, pattern: &str) -> String {
        c().check(dir, pattern).unwrap_or_else(|| panic!("{pattern:?} in {dir:?} was accepted"))
    }

    #[test]
    fn confined_patterns_pass() {
        for ok in [
            "dist/**",
            "dist",
            "build/app.js",
            ".next/**",
            "out/*.js",
            "//dist/web/**",
            "//out",
            "plugins.json",
            "plugins/p2/**",
            "!**",
            "!//.git/**",
        ] {
            assert_eq!(c().check("apps/web", ok), None, "{ok}");
        }
        let with_root = Confinement::new([("", "//"), ("apps/web", "web")]);
        assert_eq!(with_root.check("", "dist/**"), None);
        assert_eq!(with_root.check("apps/web", "dist/**"), None);
    }

    #[test]
    fn the_workspace_and_the_project_itself_are_refused() {
        for bad in ["//**", "//", "//*", "//**/*", "//{a,b}/**"] {
            assert!(refused("apps/web", bad).contains("whole workspace"), "{bad}");
        }
        for bad in ["**", "*", ".", "", "./", "/", "**/*", "*/**", "{dist,.git}/**", "[.]git/**"] {
            assert!(refused("apps/web", bad).contains("everything in the project"), "{bad}");
        }
        for bad in ["//apps/web/**", "//apps/web", "//apps/**", "//apps"] {
            let why = refused("apps/web", bad);
            assert!(why.contains("project directory `apps/web`"), "{bad}: {why}");
        }
    }

    #[test]
    fn git_cache_and_configs_are_refused() {
        for bad in ["//.git/**", "//.git", "//.git/hooks/pre-commit", "vendor/.git/**"] {
            assert!(refused("apps/web", bad).contains("git"), "{bad}");
        }
        for bad in ["//.prova/**", "//.prova", "//.prova/cache/blobs"] {
            assert!(refused("apps/web", bad).contains("cache dir"), "{bad}");
        }
        for bad in ["prova.toml", "//prova.toml", "//libs/ui/prova.toml", "gen/prova.toml"] {
            let why = refused("apps/web", bad);
            assert!(why.contains("config file") || why.contains("project"), "{bad}: {why}");
        }
        // From the root project, relative patterns are workspace paths.
        let root = Confinement::new([("", "//"), ("apps/web", "web")]);
        assert!(root.check("", ".git/**").is_some());
        assert!(root.check("", ".prova/**").is_some());
        assert!(root.check("", "prova.toml").is_some());
    }

    #[test]
    fn other_projects_are_refused_nested_ones_included() {
        assert!(refused("apps/web", "//libs/ui/src/**").contains("project `ui`"));
        assert!(refused("apps/web", "//libs/ui").contains("project `ui`"));
        assert!(refused("apps/web", "//libs/**").contains("project `ui`"));
        assert!(refused("apps/web", "plugins/**").contains("project `p`"));
        assert!(refused("apps/web", "plugins/p/dist/**").contains("project `p`"));
        // A nested project's output is its own, though it lies in the parent's directory.
        assert_eq!(c().check("apps/web/plugins/p", "dist/**"), None);
        // With the root a project, a `//` path outside the task's project is the root's.
        let root = Confinement::new([("", "//"), ("apps/web", "web")]);
        assert!(root.check("apps/web", "//dist/web/**").unwrap().contains("root project"));
        assert!(root.check("", "apps/**").unwrap().contains("project `web`"));
        assert!(root.check("", "apps/web/dist/**").unwrap().contains("project `web`"));
    }

    #[test]
    fn sentinels_catch_what_the_literal_prefix_would_miss() {
        // Rule 4 on its own, for patterns whose prefix rule 1 already refuses: each also hits
        // a sentinel, so a mistake in the prefix logic would still be caught.
        let root = Confinement::new([("", "//"), ("apps/web", "web")]);
        for (dir, bad, hit) in [
            ("", "{dist,.git}/**", ".git/HEAD"),
            ("", "[.]git/**", ".git/HEAD"),
            ("", "**/prova.toml", "prova.toml"),
            ("", "*/**", ".git/HEAD"),
            ("", ".pro?a/**", ".prova/cache"),
            ("apps/web", "*.toml", "apps/web/prova.toml"),
            ("apps/web", "//*.toml", "prova.toml"),
            ("apps/web", "//**", ".git"),
        ] {
            let why = root.sentinel(dir, bad).unwrap_or_else(|| panic!("{bad} hit no sentinel"));
            assert_eq!(why, format!("it can match `{hit}`"), "{bad}");
        }
        assert_eq!(root.sentinel("apps/web", "dist/**"), None);
        assert_eq!(root.sentinel("apps/web", "//dist/web/**"), None);
        // An exclusion does not hide a sentinel.
        assert!(root.sentinel("", "!**").is_none());
    }
}
