//! Input and output globs (brief §2–3). A pattern is project-relative (`src/**`,
//! `dist/index.js`), or workspace-relative with a `//` prefix (`//tsconfig.base.json`), or an
//! exclusion of either with a leading `!`. Both coordinator (input enumeration, cleaning
//! outputs) and worker (collecting outputs) match through this one type, so they can never
//! disagree on what a pattern means.

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
/// (`/`-separated, no leading `/`).
#[derive(Clone, Debug)]
pub struct PathGlobs {
    include: GlobSet,
    exclude: GlobSet,
    /// Workspace-relative directories under which every include lies (the literal prefix of
    /// each pattern): where a walk has to look.
    roots: Vec<String>,
    /// Includes that are plain paths with no metacharacter, workspace-relative.
    literals: Vec<String>,
    patterns: Vec<String>,
}

impl PathGlobs {
    /// Compiles `patterns` as written in the config of a project at `project_dir`
    /// (workspace-relative, `""` for the workspace root).
    pub fn new(project_dir: &str, patterns: &[String]) -> Result<Self, GlobError> {
        let mut include = GlobSetBuilder::new();
        let mut exclude = GlobSetBuilder::new();
        let mut roots = Vec::new();
        let mut literals = Vec::new();
        for raw in patterns {
            let (negated, body) = match raw.strip_prefix('!') {
                Some(rest) => (true, rest),
                None => (false, raw.as_str()),
            };
            let full = anchor(project_dir, body).ok_or_else(|| GlobError::Escapes(raw.clone()))?;
            let glob = compile(&full)
                .map_err(|reason| GlobError::Invalid { pattern: raw.clone(), reason })?;
            if negated {
                exclude.add(glob);
            } else {
                // `dist` as an output means the directory and everything in it.
                if !has_meta(&full) {
                    literals.push(full.clone());
                    include.add(
                        compile(&format!("{full}/**")).map_err(|reason| GlobError::Invalid {
                            pattern: raw.clone(),
                            reason,
                        })?,
                    );
                }
                roots.push(literal_prefix(&full));
                include.add(glob);
            }
        }
        let build = |b: GlobSetBuilder| {
            b.build().map_err(|e| GlobError::Invalid {
                pattern: patterns.join(", "),
                reason: e.to_string(),
            })
        };
        roots.sort();
        roots.dedup();
        // Drop roots nested in another root.
        let mut kept: Vec<String> = Vec::new();
        for r in roots {
            if !kept.iter().any(|k| is_within(&r, k)) {
                kept.push(r);
            }
        }
        Ok(Self {
            include: build(include)?,
            exclude: build(exclude)?,
            roots: kept,
            literals,
            patterns: patterns.to_vec(),
        })
    }

    /// A set that matches nothing.
    pub fn empty() -> Self {
        Self {
            include: GlobSet::empty(),
            exclude: GlobSet::empty(),
            roots: Vec::new(),
            literals: Vec::new(),
            patterns: Vec::new(),
        }
    }

    /// Whether the workspace-relative `path` is selected.
    pub fn is_match(&self, path: &str) -> bool {
        self.include.is_match(path) && !self.exclude.is_match(path)
    }

    /// Whether no include pattern was given.
    pub fn is_empty(&self) -> bool {
        self.include.is_empty()
    }

    /// Workspace-relative directories (or files) under which every match lies; `""` means the
    /// whole workspace.
    pub fn roots(&self) -> &[String] {
        &self.roots
    }

    /// Include patterns without metacharacters (workspace-relative): declared literal paths.
    pub fn literals(&self) -> &[String] {
        &self.literals
    }

    /// The patterns as written.
    pub fn patterns(&self) -> &[String] {
        &self.patterns
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

fn anchor(project_dir: &str, body: &str) -> Option<String> {
    let (base, rel) = match body.strip_prefix("//") {
        Some(rest) => ("", rest),
        None => (project_dir, body),
    };
    let rel = rel.trim_start_matches("./").trim_end_matches('/');
    if rel.starts_with('/') || rel.split('/').any(|c| c == "..") {
        return None;
    }
    if rel.is_empty() || rel == "." {
        return Some(if base.is_empty() {
            "**".to_owned()
        } else {
            format!("{}/**", globset::escape(base))
        });
    }
    Some(if base.is_empty() { rel.to_owned() } else { format!("{}/{rel}", globset::escape(base)) })
}

fn compile(pattern: &str) -> Result<Glob, String> {
    GlobBuilder::new(pattern)
        .literal_separator(true)
        .backslash_escape(true)
        .build()
        .map_err(|e| e.kind().to_string())
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
