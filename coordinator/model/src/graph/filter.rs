//! `--filter`: Turborepo's (and pnpm's) selector grammar over prova's projects.
//!
//! | selector | selects |
//! |---|---|
//! | `web`, `@acme/*`, `libs/*` | projects whose name — or, as prova always did, dir — matches the glob |
//! | `./libs/*`, `{./libs/*}`, `{libs/core}` | projects whose dir matches (relative to the invocation dir) |
//! | `web...` / `web^...` | web and every project it depends on / only those it depends on |
//! | `...core` / `...^core` | core and every project depending on it / only those depending on it |
//! | `...web...` | web, its dependents, and the dependencies of all of them |
//! | `[main]`, `[main...HEAD]` | projects with files changed since `main` (between the two refs) |
//! | `web...[main]` | web, if it or a project it depends on changed since `main` |
//! | `{./apps/*}[main]`, `...[HEAD^1]` | the forms above combined |
//! | `!docs`, `!./libs/*` | exclusion: taken out of what the other selectors chose |
//!
//! Several `--filter` flags (and `-p`) are a union; exclusions apply after every inclusion,
//! and a list of exclusions alone starts from every project. Parsing ([`Selector::parse`])
//! and matching ([`resolve`]) are pure: git is reached through the `changes` callback, so the
//! grammar is tested without a repository (`filter_tests.rs`).

use std::collections::{BTreeSet, HashMap};

use globset::{GlobBuilder, GlobMatcher};

use crate::suggest::suggest;
use crate::workspace::Workspace;

/// A git range of a selector: `[from]` (to the work tree, uncommitted changes included) or
/// `[from...to]`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GitRange {
    /// The base ref.
    pub from: String,
    /// The end ref; `None` is the work tree.
    pub to: Option<String>,
}

impl std::fmt::Display for GitRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.to {
            Some(to) => write!(f, "{}...{to}", self.from),
            None => f.write_str(&self.from),
        }
    }
}

/// One parsed `--filter` value.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Selector {
    /// As typed.
    pub raw: String,
    /// `!…`: taken out of the selection.
    pub exclude: bool,
    /// `…...`: the matched projects' dependencies, transitively.
    pub dependencies: bool,
    /// `...…`: the projects depending on the matched ones, transitively.
    pub dependents: bool,
    /// `^`: without the matched projects themselves.
    pub exclude_self: bool,
    /// A glob on the project's name (or dir).
    pub name: Option<String>,
    /// A glob on the project's dir, workspace-relative (resolved from the invocation dir).
    pub dir: Option<String>,
    /// `[from]` / `[from...to]`.
    pub changed: Option<GitRange>,
    /// `name...[ref]`: the change may be in the project or in one of its dependencies.
    pub changed_in_dependencies: bool,
}

/// A `--filter` value that cannot be read, or that names no project.
#[derive(Debug, thiserror::Error)]
pub enum FilterError {
    /// Nothing left to match on.
    #[error(
        "--filter `{raw}`: name a project, a directory or a git range \
         (e.g. `web`, `web...`, `./libs/*`, `[main]`)"
    )]
    Empty {
        /// As typed.
        raw: String,
    },
    /// `{}` or `[]`.
    #[error("--filter `{raw}`: empty {what}")]
    EmptyPart {
        /// As typed.
        raw: String,
        /// `{directory}` or `[git range]`.
        what: &'static str,
    },
    /// `...[ref]` with nothing before it.
    #[error(
        "--filter `{raw}`: `...[ref]` needs a project or directory before it (e.g. `web...[main]`); \
         for the changed projects and their dependents write `...[ref]` first"
    )]
    BareDependencyChange {
        /// As typed.
        raw: String,
    },
    /// A directory above the workspace root.
    #[error("--filter `{raw}`: `{dir}` is outside the workspace")]
    OutsideWorkspace {
        /// As typed.
        raw: String,
        /// The directory.
        dir: String,
    },
    /// The glob does not compile.
    #[error("invalid --filter glob `{glob}`: {reason}")]
    BadGlob {
        /// The glob.
        glob: String,
        /// Why.
        reason: String,
    },
    /// A literal name or directory (no glob) that is no project: a typo, as Turborepo says.
    #[error("--filter `{raw}`: no project is named or lives at `{literal}`{}", help_line(.help))]
    NoSuchProject {
        /// As typed.
        raw: String,
        /// The name or directory.
        literal: String,
        /// A did-you-mean.
        help: Option<String>,
    },
}

fn help_line(help: &Option<String>) -> String {
    help.as_ref().map(|h| format!("\n  help: did you mean `{h}`?")).unwrap_or_default()
}

impl Selector {
    /// Parses one `--filter` value; `cwd` is the invocation dir, workspace-relative, against
    /// which `./dir` and `{dir}` are read.
    pub fn parse(raw: &str, cwd: &str) -> Result<Self, FilterError> {
        let mut s = Self { raw: raw.to_owned(), ..Self::default() };
        let mut body = raw.trim();
        if let Some(rest) = body.strip_prefix('!') {
            s.exclude = true;
            body = rest;
        }
        // `...` and `^` around the whole selector; `name...[ref]` keeps its `...` (below).
        if !body.ends_with(']')
            && let Some(rest) = body.strip_suffix("...")
        {
            s.dependencies = true;
            body = rest;
            if let Some(rest) = body.strip_suffix('^') {
                s.exclude_self = true;
                body = rest;
            }
        }
        if let Some(rest) = body.strip_prefix("...") {
            s.dependents = true;
            body = rest;
            if let Some(rest) = body.strip_prefix('^') {
                s.exclude_self = true;
                body = rest;
            }
        }
        if let Some((before, range)) = split_range(body) {
            if range.is_empty() {
                return Err(FilterError::EmptyPart { raw: raw.to_owned(), what: "[git range]" });
            }
            s.changed = Some(match range.split_once("...") {
                Some((from, to)) => GitRange { from: from.to_owned(), to: Some(to.to_owned()) },
                None => GitRange { from: range.to_owned(), to: None },
            });
            body = before;
            if let Some(rest) = body.strip_suffix("...") {
                s.changed_in_dependencies = true;
                body = rest;
            }
        }
        if let Some((before, dir)) = split_braces(body) {
            if dir.is_empty() {
                return Err(FilterError::EmptyPart { raw: raw.to_owned(), what: "{directory}" });
            }
            s.dir = Some(dir.to_owned());
            body = before;
        } else if is_path(body) {
            s.dir = Some(body.to_owned());
            body = "";
        }
        if !body.is_empty() {
            s.name = Some(body.to_owned());
        }
        if let Some(dir) = &s.dir {
            let joined = join_dir(cwd, dir).ok_or_else(|| FilterError::OutsideWorkspace {
                raw: raw.to_owned(),
                dir: dir.clone(),
            })?;
            s.dir = Some(joined);
        }
        if s.name.is_none() && s.dir.is_none() {
            if s.changed.is_none() {
                return Err(FilterError::Empty { raw: raw.to_owned() });
            }
            if s.changed_in_dependencies {
                return Err(FilterError::BareDependencyChange { raw: raw.to_owned() });
            }
        }
        Ok(s)
    }

    /// Whether the selector reads git (its matches may legitimately be none).
    pub fn reads_git(&self) -> bool {
        self.changed.is_some()
    }
}

/// `body[range]` → `(body, range)` when `body` ends with a bracketed part.
fn split_range(body: &str) -> Option<(&str, &str)> {
    let inner = body.strip_suffix(']')?;
    let open = inner.rfind('[')?;
    let range = &inner[open + 1..];
    (!range.contains(']')).then(|| (&inner[..open], range))
}

/// `name{dir}` → `(name, dir)`: the brace group that ends the selector (its own braces,
/// `{./apps/{web,docs}}`, nest). A group holding a top-level comma is a glob's alternation
/// (`{web,docs}`, as `--filter` read it before the grammar), not a directory.
fn split_braces(body: &str) -> Option<(&str, &str)> {
    let inner = body.strip_suffix('}')?;
    let mut depth = 0usize;
    let mut comma = false;
    for (i, c) in inner.char_indices().rev() {
        match c {
            '}' => depth += 1,
            '{' if depth == 0 => {
                return (!comma).then(|| (&inner[..i], &inner[i + 1..]));
            }
            '{' => depth -= 1,
            ',' if depth == 0 => comma = true,
            _ => {}
        }
    }
    None
}

/// `.`, `..`, `./x`, `../x`: a directory, as a shell would read it.
fn is_path(body: &str) -> bool {
    body == "." || body == ".." || body.starts_with("./") || body.starts_with("../")
}

/// `dir` read from `cwd` (both workspace-relative), normalised: `.` parts dropped, `..`
/// applied; `None` when it climbs above the root.
fn join_dir(cwd: &str, dir: &str) -> Option<String> {
    let mut parts: Vec<&str> = cwd.split('/').filter(|p| !p.is_empty() && *p != ".").collect();
    for p in dir.split('/') {
        match p {
            "" | "." => {}
            ".." => {
                parts.pop()?;
            }
            p => parts.push(p),
        }
    }
    Some(parts.join("/"))
}

/// A glob on paths: `*` stays within one directory.
fn glob(pattern: &str) -> Result<GlobMatcher, FilterError> {
    glob_with(pattern.trim_end_matches('/'), true)
}

fn glob_with(pattern: &str, literal_separator: bool) -> Result<GlobMatcher, FilterError> {
    GlobBuilder::new(pattern)
        .literal_separator(literal_separator)
        .build()
        .map(|g| g.compile_matcher())
        .map_err(|e| FilterError::BadGlob {
            glob: pattern.to_owned(),
            reason: e.kind().to_string(),
        })
}

/// A name pattern: on the name, `*` spans a scope (`*` matches `@acme/cli`, as in
/// Turborepo); on the dir, as a path glob (prova's `libs/*`).
struct NameMatcher {
    name: GlobMatcher,
    dir: GlobMatcher,
}

impl NameMatcher {
    fn new(pattern: &str) -> Result<Self, FilterError> {
        Ok(Self { name: glob_with(pattern, false)?, dir: glob(pattern)? })
    }

    fn is_match(&self, p: &crate::workspace::Project) -> bool {
        self.name.is_match(&p.name) || self.dir.is_match(&p.dir)
    }
}

/// A dir pattern; `dir/**` takes `dir` itself too, as Turborepo's does.
struct DirMatcher {
    glob: GlobMatcher,
    base: Option<GlobMatcher>,
}

impl DirMatcher {
    fn new(pattern: &str) -> Result<Self, FilterError> {
        let base = pattern.trim_end_matches('/').strip_suffix("/**").map(glob).transpose()?;
        Ok(Self { glob: glob(pattern)?, base })
    }

    fn is_match(&self, dir: &str) -> bool {
        self.glob.is_match(dir) || self.base.as_ref().is_some_and(|b| b.is_match(dir))
    }
}

fn is_glob(pattern: &str) -> bool {
    pattern.contains(['*', '?', '[', '{'])
}

/// What a list of selectors chose.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Resolved {
    /// The union of the inclusions; `None` when there were none (exclusions alone start
    /// from every project).
    pub included: Option<BTreeSet<usize>>,
    /// The union of the exclusions.
    pub excluded: BTreeSet<usize>,
    /// Selectors (as typed) with a glob that matched no project: worth a warning.
    pub unmatched: Vec<String>,
    /// Whether a selector read git: an empty selection is then an answer, not a typo.
    pub reads_git: bool,
}

impl Resolved {
    /// The projects `base` (the `-p` and `--affected` projects) and the inclusions chose,
    /// without the exclusions; every project when nothing but exclusions was given.
    pub fn apply(&self, base: &BTreeSet<usize>, base_given: bool, all: usize) -> BTreeSet<usize> {
        let mut out = base.clone();
        match &self.included {
            Some(inc) => out.extend(inc),
            None if !base_given => out.extend(0..all),
            None => {}
        }
        out.retain(|p| !self.excluded.contains(p));
        out
    }
}

/// The projects `selectors` choose in `ws`. `changes(range)` answers the projects owning a
/// file changed in that range (asked once per distinct range).
pub fn resolve<E>(
    ws: &Workspace,
    selectors: &[Selector],
    changes: &mut dyn FnMut(&GitRange) -> Result<BTreeSet<usize>, E>,
) -> Result<Resolved, ResolveError<E>> {
    let edges = Edges::of(ws);
    let mut changed: HashMap<GitRange, BTreeSet<usize>> = HashMap::new();
    let mut out = Resolved::default();
    let mut included = BTreeSet::new();
    let mut any_include = false;
    for sel in selectors {
        if let Some(range) = &sel.changed
            && !changed.contains_key(range)
        {
            changed.insert(range.clone(), changes(range).map_err(ResolveError::Git)?);
        }
        let entry = entry_projects(ws, &edges, sel, sel.changed.as_ref().map(|r| &changed[r]))?;
        out.reads_git |= sel.reads_git();
        if entry.is_empty() && !sel.reads_git() {
            let literal = sel.name.as_deref().or(sel.dir.as_deref()).unwrap_or_default();
            if sel.name.iter().chain(&sel.dir).all(|p| !is_glob(p)) {
                let names = ws.projects.iter().map(|p| p.name.as_str());
                return Err(ResolveError::Filter(FilterError::NoSuchProject {
                    raw: sel.raw.clone(),
                    literal: literal.to_owned(),
                    help: suggest(literal, names).map(str::to_owned),
                }));
            }
            out.unmatched.push(sel.raw.clone());
        }
        let chosen = edges.expand(sel, &entry);
        if sel.exclude {
            out.excluded.extend(chosen);
        } else {
            any_include = true;
            included.extend(chosen);
        }
    }
    out.included = any_include.then_some(included);
    Ok(out)
}

/// [`resolve`] failed.
#[derive(Debug, thiserror::Error)]
pub enum ResolveError<E> {
    /// A selector is wrong.
    #[error(transparent)]
    Filter(#[from] FilterError),
    /// Git could not answer a range.
    #[error(transparent)]
    Git(E),
}

/// The projects a selector matches before `...` and `^` apply.
fn entry_projects(
    ws: &Workspace,
    edges: &Edges,
    sel: &Selector,
    changed: Option<&BTreeSet<usize>>,
) -> Result<BTreeSet<usize>, FilterError> {
    let name = sel.name.as_deref().map(NameMatcher::new).transpose()?;
    let dir = sel.dir.as_deref().map(DirMatcher::new).transpose()?;
    let mut out: BTreeSet<usize> = ws
        .projects
        .iter()
        .enumerate()
        .filter(|(_, p)| name.as_ref().is_none_or(|g| g.is_match(p)))
        .filter(|(_, p)| dir.as_ref().is_none_or(|g| g.is_match(&p.dir)))
        .map(|(i, _)| i)
        .collect();
    // Turborepo's courtesy: `web` finds `@acme/web` when it is the only scoped match.
    if out.is_empty()
        && dir.is_none()
        && let Some(n) = sel.name.as_deref().filter(|n| !n.starts_with('@'))
    {
        let scoped = glob_with(&format!("@*/{n}"), false)?;
        let hits: Vec<usize> =
            (0..ws.projects.len()).filter(|&i| scoped.is_match(&ws.projects[i].name)).collect();
        if let [one] = hits[..] {
            out.insert(one);
        }
    }
    if let Some(changed) = changed {
        out.retain(|&p| {
            if !sel.changed_in_dependencies {
                return changed.contains(&p);
            }
            changed.contains(&p)
                || edges
                    .reach(&BTreeSet::from([p]), &edges.deps)
                    .iter()
                    .any(|d| changed.contains(d))
        });
    }
    Ok(out)
}

/// Project dependency edges, both ways.
struct Edges {
    deps: Vec<Vec<usize>>,
    dependents: Vec<Vec<usize>>,
}

impl Edges {
    fn of(ws: &Workspace) -> Self {
        let by_name: HashMap<&str, usize> =
            ws.projects.iter().enumerate().map(|(i, p)| (p.name.as_str(), i)).collect();
        let mut deps = vec![Vec::new(); ws.projects.len()];
        let mut dependents = vec![Vec::new(); ws.projects.len()];
        for (i, p) in ws.projects.iter().enumerate() {
            for d in &p.deps {
                if let Some(&q) = by_name.get(d.value.as_str()) {
                    deps[i].push(q);
                    dependents[q].push(i);
                }
            }
        }
        Self { deps, dependents }
    }

    /// Everything reachable from `from` through `edges`, `from` itself left out (unless on a
    /// path back to itself, which a project graph does not have).
    fn reach(&self, from: &BTreeSet<usize>, edges: &[Vec<usize>]) -> BTreeSet<usize> {
        let mut out = BTreeSet::new();
        let mut stack: Vec<usize> = from.iter().copied().collect();
        while let Some(p) = stack.pop() {
            for &q in &edges[p] {
                if out.insert(q) {
                    stack.push(q);
                }
            }
        }
        out
    }

    /// `entry` with `...` and `^` applied: Turborepo's rules (a `...web...` takes the
    /// dependents' dependencies too).
    fn expand(&self, sel: &Selector, entry: &BTreeSet<usize>) -> BTreeSet<usize> {
        let mut out = BTreeSet::new();
        if !(sel.exclude_self && (sel.dependencies || sel.dependents)) {
            out.extend(entry);
        }
        if sel.dependencies {
            out.extend(self.reach(entry, &self.deps));
        }
        if sel.dependents {
            let up = self.reach(entry, &self.dependents);
            if sel.dependencies {
                out.extend(self.reach(&up, &self.deps));
            }
            out.extend(up);
        }
        out
    }
}
