//! Input and output globs (brief §2–3). A pattern is project-relative (`src/**`,
//! `dist/index.js`), or workspace-relative with a `//` prefix (`//tsconfig.base.json`), or an
//! exclusion of either with a leading `!`. Both coordinator (input enumeration, cleaning
//! outputs) and worker (collecting outputs) match through this one type, so they can never
//! disagree on what a pattern means.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use globset::{Glob, GlobBuilder, GlobSet, GlobSetBuilder};

/// A glob that does not compile, or that tries to leave the workspace.
#[derive(Debug, thiserror::Error)]
pub enum GlobError {
    /// The pattern is not a valid glob.
    #[error("invalid glob `{pattern}`: {reason}")]
    Invalid {
        /// The pattern as written.
        pattern: String,
        /// What globset said.
        reason: String,
    },
    /// The pattern is absolute or uses `..`.
    #[error(
        "glob `{0}` leaves the workspace (absolute or `..`); use a `//` workspace-relative pattern"
    )]
    Escapes(String),
}

/// A compiled set of include and exclude patterns, matched against workspace-relative paths
/// (`/`-separated, no leading `/`). Project-relative patterns are compiled once per distinct
/// pattern list and matched against the path relative to the project, so a thousand projects
/// sharing `["src/**"]` share one compiled set (globset compilation builds regexes: it is the
/// expensive part).
#[derive(Clone, Debug)]
pub struct PathGlobs {
    base: String,
    compiled: Arc<Compiled>,
    /// Workspace-relative directories under which every include lies (the literal prefix of
    /// each pattern): where a walk has to look.
    roots: Vec<String>,
    /// Includes that are plain paths with no metacharacter, workspace-relative.
    literals: Vec<String>,
}

/// The base-independent part: compiled sets and per-pattern facts.
#[derive(Debug)]
struct Compiled {
    include_proj: GlobSet,
    include_ws: GlobSet,
    exclude_proj: GlobSet,
    exclude_ws: GlobSet,
    /// (workspace-relative?, pattern without `//`, literal?) of each include.
    includes: Vec<(bool, String, bool)>,
    patterns: Vec<String>,
}

/// Distinct pattern lists kept compiled; beyond this the cache starts over (a bound, not a
/// working-set size: real workspaces have a few dozen distinct lists).
const CACHE_CAP: usize = 4096;

fn cache() -> &'static Mutex<HashMap<Vec<String>, Arc<Compiled>>> {
    static CACHE: OnceLock<Mutex<HashMap<Vec<String>, Arc<Compiled>>>> = OnceLock::new();
    CACHE.get_or_init(|| Mutex::new(HashMap::new()))
}

impl PathGlobs {
    /// Compiles `patterns` as written in the config of a project at `project_dir`
    /// (workspace-relative, `""` for the workspace root).
    pub fn new(project_dir: &str, patterns: &[String]) -> Result<Self, GlobError> {
        let compiled = {
            let hit = cache().lock().ok().and_then(|c| c.get(patterns).cloned());
            match hit {
                Some(c) => c,
                None => {
                    let c = Arc::new(Compiled::new(patterns)?);
                    if let Ok(mut map) = cache().lock() {
                        if map.len() >= CACHE_CAP {
                            map.clear();
                        }
                        map.insert(patterns.to_vec(), c.clone());
                    }
                    c
                }
            }
        };
        let mut roots = Vec::new();
        let mut literals = Vec::new();
        for (ws, rel, literal) in &compiled.includes {
            let full = if *ws { rel.clone() } else { join_rel(project_dir, rel) };
            if *literal {
                literals.push(full.clone());
            }
            let prefix = literal_prefix(rel);
            roots.push(if *ws { prefix } else { join_rel(project_dir, &prefix) });
        }
        roots.sort();
        roots.dedup();
        // Drop roots nested in another root.
        let mut kept: Vec<String> = Vec::new();
        for r in roots {
            if !kept.iter().any(|k| is_within(&r, k)) {
                kept.push(r);
            }
        }
        Ok(Self { base: project_dir.to_owned(), compiled, roots: kept, literals })
    }

    /// A set that matches nothing.
    pub fn empty() -> Self {
        Self {
            base: String::new(),
            compiled: Arc::new(Compiled {
                include_proj: GlobSet::empty(),
                include_ws: GlobSet::empty(),
                exclude_proj: GlobSet::empty(),
                exclude_ws: GlobSet::empty(),
                includes: Vec::new(),
                patterns: Vec::new(),
            }),
            roots: Vec::new(),
            literals: Vec::new(),
        }
    }

    /// Whether the workspace-relative `path` is selected.
    pub fn is_match(&self, path: &str) -> bool {
        let c = &self.compiled;
        let rel = self.project_relative(path);
        self.includes_match(path)
            && !(rel.is_some_and(|r| c.exclude_proj.is_match(r)) || c.exclude_ws.is_match(path))
    }

    /// Whether the workspace-relative directory `dir` is selected as a directory output: the
    /// globs select it (`dist/**` selects `dist/empty`), or they select whatever it could
    /// hold (`out/**` and `out/*` make `out` itself an output directory; `dist/*.js` does
    /// not). Asked of a directory with nothing selected beneath it: an empty one is kept, and
    /// cleaned, as the task's own. Never the workspace root nor the project directory.
    pub fn selects_dir(&self, dir: &str) -> bool {
        /// A name no glob metacharacter class is written to exclude: `*` matches it, a
        /// literal or an extension pattern does not.
        const ANY_CHILD: &str = "\u{0}";
        if dir.is_empty() || dir == self.base {
            return false;
        }
        self.is_match(dir) || self.is_match(&join_rel(dir, ANY_CHILD))
    }

    /// `path` relative to the project directory, `None` when it lies outside it.
    fn project_relative<'p>(&self, path: &'p str) -> Option<&'p str> {
        if self.base.is_empty() {
            Some(path)
        } else if path == self.base {
            Some("")
        } else {
            path.strip_prefix(self.base.as_str()).and_then(|r| r.strip_prefix('/'))
        }
    }

    /// Whether no include pattern was given.
    pub fn is_empty(&self) -> bool {
        self.compiled.includes.is_empty()
    }

    /// Workspace-relative directories (or files) under which every match lies; `""` means the
    /// whole workspace.
    pub fn roots(&self) -> &[String] {
        &self.roots
    }

    /// Each include's own root (its literal prefix, workspace-relative), sorted, with the
    /// roots nested in another kept: `src/**` and `src/gen/**` give `src` and `src/gen`,
    /// where [`Self::roots`] gives `src` alone.
    pub fn include_roots(&self) -> Vec<String> {
        let mut roots: Vec<String> = self
            .compiled
            .includes
            .iter()
            .map(|(ws, rel, _)| {
                let prefix = literal_prefix(rel);
                if *ws { prefix } else { join_rel(&self.base, &prefix) }
            })
            .collect();
        roots.sort();
        roots.dedup();
        roots
    }

    /// Include patterns without metacharacters (workspace-relative): declared literal paths.
    pub fn literals(&self) -> &[String] {
        &self.literals
    }

    /// The patterns as written.
    pub fn patterns(&self) -> &[String] {
        &self.compiled.patterns
    }

    /// Whether an include pattern matches the workspace-relative `path`, exclusions ignored:
    /// what a pattern could reach on its own (an exclusion never makes an include safe).
    pub fn includes_match(&self, path: &str) -> bool {
        let c = &self.compiled;
        let rel = self.project_relative(path);
        rel.is_some_and(|r| c.include_proj.is_match(r)) || c.include_ws.is_match(path)
    }
}

/// Checks one pattern as [`PathGlobs::new`] would (it parses and stays in the workspace)
/// without building a matcher: building one is the expensive part, and a config with many
/// distinct patterns is checked pattern by pattern before any is matched.
pub fn check_pattern(pattern: &str) -> Result<(), GlobError> {
    let body = pattern.strip_prefix('!').unwrap_or(pattern);
    let (_, rel) = normalise(body).ok_or_else(|| GlobError::Escapes(pattern.to_owned()))?;
    compile(&rel).map(drop).map_err(|kind| GlobError::Invalid {
        pattern: pattern.to_owned(),
        reason: kind.to_string(),
    })
}

/// The workspace-relative literal prefix of one pattern written in the config of a project at
/// `project_dir`: the components before the first one with a glob metacharacter, joined to
/// the project directory unless the pattern is `//`-relative. Every path the pattern can
/// match is that prefix or lies under it (`""`: anywhere in the workspace). `None` for an
/// exclusion (`!…`), which only narrows a set.
pub fn include_prefix(project_dir: &str, pattern: &str) -> Result<Option<String>, GlobError> {
    if pattern.starts_with('!') {
        return Ok(None);
    }
    let (ws, rel) = normalise(pattern).ok_or_else(|| GlobError::Escapes(pattern.to_owned()))?;
    let prefix = literal_prefix(&rel);
    Ok(Some(if ws { prefix } else { join_rel(project_dir, &prefix) }))
}

impl Compiled {
    fn new(patterns: &[String]) -> Result<Self, GlobError> {
        let mut sets = [
            GlobSetBuilder::new(),
            GlobSetBuilder::new(),
            GlobSetBuilder::new(),
            GlobSetBuilder::new(),
        ];
        let mut includes = Vec::new();
        for raw in patterns {
            let (negated, body) = match raw.strip_prefix('!') {
                Some(rest) => (true, rest),
                None => (false, raw.as_str()),
            };
            let (ws, rel) = normalise(body).ok_or_else(|| GlobError::Escapes(raw.clone()))?;
            let invalid = |kind: globset::ErrorKind| GlobError::Invalid {
                pattern: raw.clone(),
                reason: kind.to_string(),
            };
            let slot = match (negated, ws) {
                (false, false) => 0,
                (false, true) => 1,
                (true, false) => 2,
                (true, true) => 3,
            };
            sets[slot].add(compile(&rel).map_err(invalid)?);
            if !negated {
                let literal = !has_meta(&rel) && rel != "**";
                if literal {
                    // `dist` as an output means the directory and everything in it.
                    sets[slot].add(compile(&format!("{rel}/**")).map_err(invalid)?);
                }
                includes.push((ws, rel, literal));
            }
        }
        let build = |b: GlobSetBuilder| {
            b.build().map_err(|e| GlobError::Invalid {
                pattern: patterns.join(", "),
                reason: e.to_string(),
            })
        };
        let [a, b, c, d] = sets;
        Ok(Self {
            include_proj: build(a)?,
            include_ws: build(b)?,
            exclude_proj: build(c)?,
            exclude_ws: build(d)?,
            includes,
            patterns: patterns.to_vec(),
        })
    }
}

/// Whether `path` equals `dir` or lies inside it (both workspace-relative; `""` is the root).
pub fn is_within(path: &str, dir: &str) -> bool {
    dir.is_empty()
        || path == dir
        || (path.starts_with(dir) && path.as_bytes().get(dir.len()) == Some(&b'/'))
}

/// Joins a workspace-relative directory and a relative path.
pub fn join_rel(dir: &str, rel: &str) -> String {
    match (dir.is_empty(), rel.is_empty()) {
        (true, _) => rel.to_owned(),
        (_, true) => dir.to_owned(),
        _ => format!("{dir}/{rel}"),
    }
}

/// Checks that a relative path has only normal components (no `..`, `.`, empty parts,
/// leading `/` or NUL). Every path read from a config, a peer or an archive passes here.
pub fn is_clean_relative(path: &str) -> bool {
    !path.is_empty()
        && !path.starts_with('/')
        && !path.contains('\0')
        && path.split('/').all(|c| !c.is_empty() && c != "." && c != "..")
}

/// Splits a pattern into (workspace-relative?, the pattern relative to its base); `None` when
/// it leaves the workspace. An empty pattern (or `.`) means everything under the base.
fn normalise(body: &str) -> Option<(bool, String)> {
    let (ws, rel) = match body.strip_prefix("//") {
        Some(rest) => (true, rest),
        None => (false, body),
    };
    let rel = rel.trim_start_matches("./").trim_end_matches('/');
    if rel.starts_with('/') || rel.split('/').any(|c| c == "..") {
        return None;
    }
    if rel.is_empty() || rel == "." {
        return Some((ws, "**".to_owned()));
    }
    Some((ws, rel.to_owned()))
}

/// The glob of `pattern`, or what globset found wrong with it (its kind: the pattern itself
/// is named by the caller's [`GlobError::Invalid`]).
fn compile(pattern: &str) -> Result<Glob, globset::ErrorKind> {
    GlobBuilder::new(pattern)
        .literal_separator(true)
        .backslash_escape(true)
        .build()
        .map_err(|e| e.kind().clone())
}

fn has_meta(s: &str) -> bool {
    s.contains(['*', '?', '[', ']', '{', '}', '\\'])
}

/// The directory part of a pattern before its first metacharacter component.
fn literal_prefix(pattern: &str) -> String {
    let mut out: Vec<&str> = Vec::new();
    for comp in pattern.split('/') {
        if has_meta(comp) {
            return out.join("/");
        }
        out.push(comp);
    }
    out.join("/")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn g(dir: &str, pats: &[&str]) -> PathGlobs {
        PathGlobs::new(dir, &pats.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap()
    }

    #[test]
    fn project_relative_and_workspace_patterns() {
        let set =
            g("apps/web", &["src/**", "package.json", "//tsconfig.base.json", "!src/**/*.snap"]);
        assert!(set.is_match("apps/web/src/a/b.ts"));
        assert!(set.is_match("apps/web/package.json"));
        assert!(set.is_match("tsconfig.base.json"));
        assert!(!set.is_match("apps/web/src/x.snap"));
        assert!(!set.is_match("apps/webx/src/a.ts"));
        assert!(!set.is_match("apps/web/dist/a.js"));
        assert_eq!(set.roots(), ["apps/web/package.json", "apps/web/src", "tsconfig.base.json"]);
        assert_eq!(set.literals(), ["apps/web/package.json", "tsconfig.base.json"]);
    }

    #[test]
    fn star_does_not_cross_directories() {
        let set = g("", &["*.js"]);
        assert!(set.is_match("a.js"));
        assert!(!set.is_match("d/a.js"));
    }

    #[test]
    fn literal_directory_means_its_contents() {
        let set = g("lib", &["dist"]);
        assert!(set.is_match("lib/dist"));
        assert!(set.is_match("lib/dist/deep/x"));
    }

    #[test]
    fn a_directory_is_selected_as_an_output_by_what_it_could_hold() {
        let set = g("p", &["dist/**", "out/*", "gen/*.js", "types/**/*.d.ts", "!dist/skip/**"]);
        // Matched itself, or holding whatever the globs select.
        for d in ["p/dist/empty", "p/dist/a/b", "p/dist", "p/out", "p/out/sub", "p/dist/skip"] {
            assert!(set.selects_dir(d), "{d}");
        }
        // Only some files under it are outputs; not an output; the project; the workspace.
        for d in ["p/gen", "p/types", "p/types/sub", "p/out/sub/deeper", "p/src", "p", ""] {
            assert!(!set.selects_dir(d), "{d}");
        }
        assert!(!g("p", &["*"]).selects_dir("p"), "the project directory is never an output");
        assert!(g("", &["//build/**"]).selects_dir("build"));
    }

    #[test]
    fn escaping_patterns_are_refused() {
        assert!(PathGlobs::new("a", &["../b/**".to_owned()]).is_err());
        assert!(PathGlobs::new("a", &["//../b".to_owned()]).is_err());
        assert!(PathGlobs::new("a", &["/etc/passwd".to_owned()]).is_err());
    }

    #[test]
    fn special_characters_in_project_dirs_are_literal() {
        let set = g("pkgs/[x]", &["src/**"]);
        assert!(set.is_match("pkgs/[x]/src/a"));
        assert!(!set.is_match("pkgs/x/src/a"));
    }

    #[test]
    fn include_prefixes_bound_every_match() {
        let p = |dir: &str, pat: &str| include_prefix(dir, pat).unwrap();
        assert_eq!(p("apps/web", "dist/**").as_deref(), Some("apps/web/dist"));
        assert_eq!(p("apps/web", "dist/a.js").as_deref(), Some("apps/web/dist/a.js"));
        assert_eq!(p("apps/web", "**").as_deref(), Some("apps/web"));
        assert_eq!(p("apps/web", "").as_deref(), Some("apps/web"));
        assert_eq!(p("apps/web", "./").as_deref(), Some("apps/web"));
        assert_eq!(p("apps/web", "{dist,.git}/**").as_deref(), Some("apps/web"));
        assert_eq!(p("apps/web", "//").as_deref(), Some(""));
        assert_eq!(p("apps/web", "//[.]git/**").as_deref(), Some(""));
        assert_eq!(p("apps/web", "//dist/web/**").as_deref(), Some("dist/web"));
        assert_eq!(p("", "out/*.js").as_deref(), Some("out"));
        assert_eq!(p("a", "!dist/**"), None);
        assert!(include_prefix("a", "../b/**").is_err());
    }

    #[test]
    fn check_pattern_agrees_with_compiling() {
        for p in ["dist/**", "!src/**/*.snap", "//x", "", "a/[b", "../x", "//../x", "/etc", "a/{b"]
        {
            let compiled =
                PathGlobs::new("d", &[p.to_owned()]).map(drop).map_err(|e| e.to_string());
            assert_eq!(check_pattern(p).map_err(|e| e.to_string()), compiled, "{p:?}");
        }
    }

    #[test]
    fn includes_match_ignores_exclusions() {
        let set = g("apps/web", &["**", "!.git/**"]);
        assert!(!set.is_match("apps/web/.git/HEAD"));
        assert!(set.includes_match("apps/web/.git/HEAD"));
        assert!(set.includes_match("apps/web"));
        assert!(!set.includes_match("apps/webx/a"));
        let ws = g("apps/web", &["//.git/**", "!//.git/hooks/**"]);
        assert!(ws.includes_match(".git/hooks/pre-commit"));
        assert!(!ws.is_match(".git/hooks/pre-commit"));
    }

    #[test]
    fn clean_relative_paths() {
        assert!(is_clean_relative("a/b.c"));
        for bad in ["", "/a", "a/../b", "a//b", "./a", "a/.", "a\0b"] {
            assert!(!is_clean_relative(bad), "{bad:?}");
        }
        assert!(is_within("a/b", "a"));
        assert!(!is_within("ab", "a"));
        assert!(is_within("x", ""));
    }
}
