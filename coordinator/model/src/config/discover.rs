//! Where the workspace is: the root (searched upward from a start directory, like git looks
//! for `.git`) and the project directories (the `projects` globs expanded against the
//! directory tree, skipping `node_modules`, `.git`, `.prova` and what `.gitignore` ignores).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use globset::{GlobBuilder, GlobSet, GlobSetBuilder};
use prova_protocol::globs::GlobError;
use toml::Spanned;

use super::error::ConfigError;
use super::parse::{ConfigSource, read_file};
use super::{CONFIG_FILE, Location, shown_path};
use crate::suggest::did_you_mean;

/// Directories never searched for projects: dependency trees, VCS data, prova's own state.
pub const SKIPPED_DIRS: &[&str] = &["node_modules", ".git", ".prova"];

/// How deep a `**` project glob searches below its literal prefix: deep enough for any real
/// layout, bounded so a symlink farm or a huge generated tree cannot stall loading.
pub const MAX_GLOBSTAR_DEPTH: usize = 12;

/// The workspace root found by [`find_root`].
#[derive(Debug)]
pub struct Root {
    /// The root directory, canonical.
    pub dir: PathBuf,
    /// Its `prova.toml`.
    pub file: PathBuf,
    /// The file's contents.
    pub text: String,
}

/// The nearest directory at or above `start` whose `prova.toml` has a `[workspace]` table.
/// Project `prova.toml` files on the way are passed over. If none is found but a `prova.toml`
/// on the way is not valid TOML, its syntax error is the answer (it is most likely the
/// intended root).
pub fn find_root(start: &Path) -> Result<Root, ConfigError> {
    let start = std::fs::canonicalize(start)
        .map_err(|source| ConfigError::Io { path: start.to_path_buf(), source })?;
    let mut passed_over: Option<PathBuf> = None;
    let mut broken: Option<ConfigError> = None;
    for dir in start.ancestors() {
        let file = dir.join(CONFIG_FILE);
        if !file.is_file() {
            continue;
        }
        let text = read_file(&start, &file)?;
        let src = ConfigSource::new(&start, &file, &text);
        match src.has_workspace_table() {
            Some(true) => return Ok(Root { dir: dir.to_path_buf(), file, text }),
            Some(false) => {
                passed_over.get_or_insert(file);
            }
            None => {
                if broken.is_none() {
                    broken = src.check_syntax().err();
                }
            }
        }
    }
    if let Some(err) = broken {
        return Err(err);
    }
    let help = match passed_over {
        Some(f) => format!(
            "{} has no [workspace] table, so it is a project's file; add [workspace] to the \
             root's prova.toml",
            f.display()
        ),
        None => "create prova.toml at the repository root with a [workspace] table (or run \
                 `prova init`), or point -C at the workspace"
            .to_owned(),
    };
    Err(ConfigError::NoWorkspace { start, help: Some(help) })
}

/// A compiled `projects` list.
struct ProjectGlobs {
    include: GlobSet,
    exclude: GlobSet,
    /// The exclude patterns that end in `/**`: a directory one of them matches has every
    /// descendant matched too, so the walk does not enter it (a repository's fixtures,
    /// `!**/__fixtures__/**`, are most of its directories).
    exclude_below: GlobSet,
    /// Where each include pattern was written (index as in `include`).
    include_at: Vec<Location>,
    /// Each include pattern as written, and whether it was inferred (package.json
    /// `workspaces`, pnpm-workspace.yaml) rather than written in prova.toml.
    include_raw: Vec<(String, bool)>,
    /// Include patterns as `/`-separated components, for pruning the walk.
    shapes: Vec<Shape>,
    root_included: bool,
    root_excluded: bool,
    root_at: Option<Location>,
}

impl ProjectGlobs {
    /// Whether the walk enters directory `rel`: it is, or leads to, a possible match of an
    /// include pattern, and no exclude pattern ending in `/**` matches it (then none of its
    /// descendants could be a project).
    fn enters(&self, rel: &str) -> bool {
        let comps: Vec<&str> = rel.split('/').collect();
        self.shapes.iter().any(|s| s.admits(&comps)) && !self.exclude_below.is_match(rel)
    }
}

/// What directories an include pattern can match: `prefix` (its literal leading components),
/// then up to `depth` more components.
#[derive(Debug)]
struct Shape {
    prefix: Vec<String>,
    depth: usize,
}

impl Shape {
    /// Whether a directory at `comps` is, or leads to, a possible match. Below the literal
    /// prefix, dot-directories are never admitted (`*` does not pick up `.github`, as in
    /// npm/pnpm workspace globs); name one literally to make it a project.
    fn admits(&self, comps: &[&str]) -> bool {
        let shared = comps.len().min(self.prefix.len());
        comps[..shared].iter().zip(&self.prefix).all(|(a, b)| a == b)
            && comps.len() <= self.prefix.len() + self.depth
            && !comps[shared..].iter().any(|c| c.starts_with('.'))
    }
}

/// The project directories the `projects` patterns select, workspace-relative (`""` for the
/// root), sorted, each with where the pattern that selected it was written.
pub fn project_dirs(
    src: &ConfigSource<'_>,
    patterns: &[Spanned<String>],
) -> Result<Vec<(String, Location)>, ConfigError> {
    let globs = compile(src, patterns)?;
    let mut found = Vec::new();
    if globs.root_included
        && !globs.root_excluded
        && let Some(at) = &globs.root_at
    {
        found.push((String::new(), at.clone()));
    }
    if globs.shapes.is_empty() {
        return Ok(found);
    }
    let max_depth = globs.shapes.iter().map(|s| s.prefix.len() + s.depth).max().unwrap_or(0);
    let mut matched = vec![false; globs.include_at.len()];
    let globs = Arc::new(globs);
    let filter_globs = Arc::clone(&globs);
    let root = src.root.to_path_buf();
    let filter_root = root.clone();
    // The parallel walker: the sequential one (walkdir) opens and lists every directory it
    // yields, those at the maximum depth too — a thousand package directories listed for
    // nothing on every run. This one stops at the maximum depth; its order is not sorted,
    // so what it finds is sorted below.
    let walk = ignore::WalkBuilder::new(&root)
        .hidden(false)
        .git_ignore(true)
        .require_git(false)
        // Machine-local ignore rules would make the project list differ between machines.
        .git_global(false)
        .git_exclude(false)
        .follow_links(false)
        .max_depth(Some(max_depth))
        .threads(WALK_THREADS)
        .filter_entry(move |entry| {
            if !entry.file_type().is_some_and(|t| t.is_dir()) {
                return false;
            }
            if entry.depth() == 0 {
                return true;
            }
            let name = entry.file_name().to_string_lossy();
            if SKIPPED_DIRS.contains(&name.as_ref()) {
                return false;
            }
            let rel = rel_dir(&filter_root, entry.path()).unwrap_or_default();
            filter_globs.enters(&rel)
        })
        .build_parallel();
    let (entries, mut errors) = collect(walk);
    if !errors.is_empty() {
        errors.sort_by(|a, b| a.0.cmp(&b.0));
        let (path, message) = errors.swap_remove(0);
        let path = path.unwrap_or_else(|| root.clone());
        return Err(ConfigError::Walk { path: shown_path(&root, &path), message });
    }
    for entry in entries {
        let Some(rel) = rel_dir(&root, entry.path()) else {
            tracing::warn!(path = %entry.path().display(), "skipping a directory whose name is not UTF-8");
            continue;
        };
        if globs.exclude.is_match(&rel) {
            continue;
        }
        // A JS workspace's own globs (package.json `workspaces`, pnpm-workspace.yaml) select
        // package directories only, as npm and pnpm do: `packages/**` does not make every
        // package's `src` a project of its own.
        let is_package = || entry.path().join(super::package_json::PACKAGE_JSON).is_file();
        let hits: Vec<usize> = globs
            .include
            .matches(&rel)
            .into_iter()
            .filter(|&i| {
                !globs.include_raw.get(i).is_some_and(|(_, inferred)| *inferred) || is_package()
            })
            .collect();
        for &i in &hits {
            if let Some(m) = matched.get_mut(i) {
                *m = true;
            }
        }
        if let Some(&first) = hits.first() {
            found.push((rel, globs.include_at[first].clone()));
        }
    }
    warn_unmatched(&globs, &matched);
    found.sort_by(|a, b| a.0.cmp(&b.0));
    found.dedup_by(|a, b| a.0 == b.0);
    Ok(found)
}

/// A warning per include pattern that selected no directory (a typo makes projects vanish
/// silently otherwise), naming the pattern and where it was written.
fn warn_unmatched(globs: &ProjectGlobs, matched: &[bool]) {
    for ((i, (pattern, inferred)), at) in
        globs.include_raw.iter().enumerate().zip(&globs.include_at)
    {
        if matched.get(i).copied().unwrap_or(true) {
            continue;
        }
        let at = if *inferred {
            "package.json workspaces (or pnpm-workspace.yaml packages)".to_owned()
        } else {
            at.to_string()
        };
        tracing::warn!(
            "{at}: projects glob `{pattern}` matches no directory (gitignored and excluded \
             directories do not count)"
        );
    }
}

fn compile(
    src: &ConfigSource<'_>,
    patterns: &[Spanned<String>],
) -> Result<ProjectGlobs, ConfigError> {
    let mut include = GlobSetBuilder::new();
    let mut exclude = GlobSetBuilder::new();
    let mut exclude_below = GlobSetBuilder::new();
    let mut out = ProjectGlobs {
        include: GlobSet::empty(),
        exclude: GlobSet::empty(),
        exclude_below: GlobSet::empty(),
        include_at: Vec::new(),
        include_raw: Vec::new(),
        shapes: Vec::new(),
        root_included: false,
        root_excluded: false,
        root_at: None,
    };
    for raw in patterns {
        let at = src.at(raw.span());
        let invalid = |source| ConfigError::InvalidGlob {
            at: at.clone().into(),
            field: "projects".to_owned(),
            source,
        };
        let (negated, body) = match raw.get_ref().strip_prefix('!') {
            Some(rest) => (true, rest),
            None => (false, raw.get_ref().as_str()),
        };
        let body =
            normalise(body).ok_or_else(|| invalid(GlobError::Escapes(raw.get_ref().clone())))?;
        if body.is_empty() {
            if negated {
                out.root_excluded = true;
            } else {
                out.root_included = true;
                out.root_at.get_or_insert(at);
            }
            continue;
        }
        let glob = GlobBuilder::new(&body)
            .literal_separator(true)
            .backslash_escape(true)
            .build()
            .map_err(|e| {
            invalid(GlobError::Invalid {
                pattern: raw.get_ref().clone(),
                reason: e.kind().to_string(),
            })
        })?;
        if negated {
            if body.ends_with("/**") {
                exclude_below.add(glob.clone());
            }
            exclude.add(glob);
            continue;
        }
        if !has_meta(&body) && !src.root.join(&body).is_dir() {
            return Err(no_such_dir(src.root, &body, raw.get_ref(), at));
        }
        include.add(glob);
        out.include_at.push(at);
        out.include_raw.push((raw.get_ref().clone(), raw.span().is_empty()));
        out.shapes.push(shape(&body));
    }
    let build = |b: GlobSetBuilder| {
        b.build().map_err(|e| ConfigError::InvalidGlob {
            at: src.at(0..0).into(),
            field: "projects".to_owned(),
            source: GlobError::Invalid { pattern: String::new(), reason: e.to_string() },
        })
    };
    out.include = build(include)?;
    out.exclude = build(exclude)?;
    out.exclude_below = build(exclude_below)?;
    Ok(out)
}

/// Strips `./`, a `//` workspace prefix and trailing `/`; `.` becomes `""` (the root).
/// `None` for a pattern that leaves the workspace.
fn normalise(pattern: &str) -> Option<String> {
    let mut p = pattern.strip_prefix("//").unwrap_or(pattern);
    while let Some(rest) = p.strip_prefix("./") {
        p = rest;
    }
    let p = p.trim_end_matches('/');
    if p == "." || p.is_empty() {
        return Some(String::new());
    }
    let leaves = p.starts_with('/') || p.split('/').any(|c| c == "..");
    (!leaves)
        .then(|| p.split('/').filter(|c| !c.is_empty() && *c != ".").collect::<Vec<_>>().join("/"))
}

fn has_meta(s: &str) -> bool {
    s.contains(['*', '?', '[', ']', '{', '}', '\\'])
}

fn shape(pattern: &str) -> Shape {
    let comps: Vec<&str> = pattern.split('/').collect();
    let literal = comps.iter().take_while(|c| !has_meta(c)).count();
    let rest = &comps[literal..];
    let depth = if rest.iter().any(|c| c.contains("**")) { MAX_GLOBSTAR_DEPTH } else { rest.len() };
    Shape { prefix: comps[..literal].iter().map(|c| (*c).to_owned()).collect(), depth }
}

fn no_such_dir(root: &Path, body: &str, raw: &str, at: Location) -> ConfigError {
    let full = root.join(body);
    let parent = full.parent().unwrap_or(root);
    let siblings: Vec<String> = std::fs::read_dir(parent)
        .map(|rd| {
            rd.filter_map(Result::ok)
                .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                .filter_map(|e| e.file_name().into_string().ok())
                .collect()
        })
        .unwrap_or_default();
    let last = body.rsplit('/').next().unwrap_or(body);
    let help = did_you_mean(last, siblings.iter().map(String::as_str));
    ConfigError::NoSuchProjectDir { at: at.into(), pattern: raw.to_owned(), help }
}

/// `dir` relative to `root`, `/`-separated; `None` when not UTF-8 or not under `root`.
fn rel_dir(root: &Path, dir: &Path) -> Option<String> {
    let rel = dir.strip_prefix(root).ok()?;
    let parts: Option<Vec<&str>> = rel.components().map(|c| c.as_os_str().to_str()).collect();
    Some(parts?.join("/"))
}

/// Threads of the project walk: one. The parallel walker is used for where it stops (see
/// [`project_dirs`]), not for its threads: a worker that finds the queue empty while another
/// still works sleeps a whole millisecond before it looks again, so with two the walk of a
/// small workspace ended up to 1 ms after its last directory (most of a 7-package warm
/// no-op's load: 9.4 against 10.6 ms in all, `hyperfine`), and 1,000 packages measured the
/// same with one thread as with two.
const WALK_THREADS: usize = 1;

/// The directories a parallel walk yields below its root, sorted by path, and the errors it
/// met (with the path each names, or the root's).
fn collect(walk: ignore::WalkParallel) -> (Vec<ignore::DirEntry>, Vec<(Option<PathBuf>, String)>) {
    let found = std::sync::Mutex::new((Vec::new(), Vec::new()));
    walk.run(|| {
        let found = &found;
        Box::new(move |entry| {
            let mut f = found.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            match entry {
                Ok(e) if e.depth() > 0 => f.0.push(e),
                Ok(_) => {}
                Err(e) => {
                    f.1.push((walk_error_path(&e), e.to_string()));
                }
            }
            ignore::WalkState::Continue
        })
    });
    let (mut entries, errors) =
        found.into_inner().unwrap_or_else(std::sync::PoisonError::into_inner);
    entries.sort_by(|a: &ignore::DirEntry, b| a.path().cmp(b.path()));
    (entries, errors)
}

fn walk_error_path(err: &ignore::Error) -> Option<PathBuf> {
    match err {
        ignore::Error::WithPath { path, .. } => Some(path.clone()),
        ignore::Error::WithDepth { err, .. } | ignore::Error::WithLineNumber { err, .. } => {
            walk_error_path(err)
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_are_normalised() {
        assert_eq!(normalise(".").as_deref(), Some(""));
        assert_eq!(normalise("./").as_deref(), Some(""));
        assert_eq!(normalise("./apps/*/").as_deref(), Some("apps/*"));
        assert_eq!(normalise("//packages/*").as_deref(), Some("packages/*"));
        assert_eq!(normalise("../x"), None);
        assert_eq!(normalise("/abs"), None);
    }

    #[test]
    fn an_excluded_subtree_is_not_entered() {
        let file = Path::new("/ws/prova.toml");
        let src = ConfigSource::new(Path::new("/ws"), file, "");
        let patterns: Vec<Spanned<String>> =
            ["packages/**", "!**/__fixtures__/**", "!packages/legacy", "!packages/old/**"]
                .iter()
                .map(|p| Spanned::new(0..0, (*p).to_owned()))
                .collect();
        let globs = compile(&src, &patterns).unwrap();
        assert!(globs.enters("packages/core/src"));
        // A `__fixtures__` directory may be a package; nothing below it can.
        assert!(globs.enters("packages/core/__fixtures__"));
        assert!(!globs.enters("packages/core/__fixtures__/app"));
        assert!(!globs.enters("packages/core/src/__fixtures__/a/b"));
        // An exclude naming one directory keeps its descendants searchable.
        assert!(globs.enters("packages/legacy"));
        assert!(globs.enters("packages/legacy/sub"));
        assert!(globs.enters("packages/old"));
        assert!(!globs.enters("packages/old/x"));
        assert!(!globs.enters("docs"));
    }

    #[test]
    fn shapes_prune_the_walk() {
        let s = shape("packages/*");
        assert!(s.admits(&["packages"]));
        assert!(s.admits(&["packages", "ui"]));
        assert!(!s.admits(&["packages", "ui", "src"]));
        assert!(!s.admits(&["docs"]));
        let deep = shape("libs/**");
        assert!(deep.admits(&["libs", "a", "b", "c"]));
        assert!(!s.admits(&["packages", ".cache"]));
        assert!(shape(".config/*").admits(&[".config", "lint"]));
        let literal = shape("tools/gen");
        assert!(literal.admits(&["tools"]));
        assert!(!literal.admits(&["tools", "other"]));
    }
}
