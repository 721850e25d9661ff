//! Per-project external dependencies from a workspace lockfile (brief §5: "external
//! dependencies are keyed per project").
//!
//! Each format's parser (one file per format: [`npm`] `package-lock.json` v2/v3, [`pnpm`]
//! `pnpm-lock.yaml`, [`yarn`] `yarn.lock` v1 and berry, [`cargo`] `Cargo.lock`) turns the file
//! into one [`Graph`]: packages (external, with their resolved version and integrity, or
//! workspace-internal), their dependency edges, and the node of each workspace project. A
//! project's externals are everything reachable from its node — through internal packages
//! too, since their code runs with their dependencies — plus what the workspace root (the
//! `""` project: a hoisted toolchain such as `typescript`) reaches. The walk keeps a visited
//! set, so cycles end, and a missing entry is skipped.
//!
//! Nothing here panics on any input: a file too large, nested too deep, or not of a shape
//! its parser knows is a [`LockError`], and the caller ([`Keyed`]) then folds the whole
//! file into every key, with a notice.

pub mod cargo;
pub mod memo;
pub mod npm;
pub mod pnpm;
pub mod yarn;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;

use prova_protocol::Digest;

/// Lockfiles larger than this are not parsed (the whole file is folded instead).
pub const MAX_BYTES: usize = 64 << 20;

/// Packages (nodes) a lockfile may hold before it is refused.
pub const MAX_NODES: usize = 1 << 20;

/// Why a lockfile's per-project externals could not be read.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum LockError {
    /// Not a lockfile name prova reads.
    #[error("`{0}` is not a lockfile format prova reads")]
    Unknown(String),
    /// Larger than [`MAX_BYTES`] or [`MAX_NODES`].
    #[error("too large to parse ({0})")]
    TooLarge(String),
    /// Not valid in its format, or of a version prova does not read.
    #[error("{0}")]
    Invalid(String),
}

/// One resolved external package.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct External {
    /// Its name (`picocolors`, `@scope/name`, `serde`).
    pub name: String,
    /// Its resolved version.
    pub version: String,
    /// Its integrity (`sha512-…`), checksum or resolution: whatever pins its bytes; may be
    /// empty when the lockfile records none.
    pub integrity: String,
}

/// A lockfile as a dependency graph.
#[derive(Debug, Default)]
pub struct Graph {
    /// Node id → index.
    index: HashMap<String, usize>,
    /// Per node: the external package, or `None` for a workspace-internal one.
    externals: Vec<Option<External>>,
    /// Per node: dependency node ids, resolved by [`Graph::link`] after every node exists.
    edges: Vec<Vec<usize>>,
    /// Workspace-relative project directory (`""` for the root) → node.
    projects: BTreeMap<String, usize>,
}

impl Graph {
    /// The node `id`, created as `external` if new. Errors past [`MAX_NODES`].
    pub fn node(&mut self, id: &str, external: Option<External>) -> Result<usize, LockError> {
        if let Some(&i) = self.index.get(id) {
            if self.externals[i].is_none() && external.is_some() {
                self.externals[i] = external;
            }
            return Ok(i);
        }
        if self.externals.len() >= MAX_NODES {
            return Err(LockError::TooLarge(format!("more than {MAX_NODES} packages")));
        }
        let i = self.externals.len();
        self.index.insert(id.to_owned(), i);
        self.externals.push(external);
        self.edges.push(Vec::new());
        Ok(i)
    }

    /// The node `id` if it exists.
    pub fn find(&self, id: &str) -> Option<usize> {
        self.index.get(id).copied()
    }

    /// An edge `from` → `to`.
    pub fn edge(&mut self, from: usize, to: usize) {
        if let Some(e) = self.edges.get_mut(from) {
            e.push(to);
        }
    }

    /// Marks `node` as the project at `dir` (workspace-relative, `""` for the root).
    pub fn project(&mut self, dir: &str, node: usize) {
        self.projects.insert(normalise_dir(dir), node);
    }

    /// The project directories the lockfile knows.
    pub fn project_dirs(&self) -> impl Iterator<Item = &str> {
        self.projects.keys().map(String::as_str)
    }

    /// Every external package reachable from the project at `dir` and from the root, sorted;
    /// `None` when the lockfile knows neither.
    pub fn externals_of(&self, dir: &str) -> Option<Vec<External>> {
        let starts: Vec<usize> = [normalise_dir(dir), String::new()]
            .iter()
            .filter_map(|d| self.projects.get(d))
            .copied()
            .collect();
        if starts.is_empty() {
            return None;
        }
        let mut seen = vec![false; self.externals.len()];
        let mut stack = starts;
        let mut out = BTreeSet::new();
        while let Some(n) = stack.pop() {
            if std::mem::replace(&mut seen[n], true) {
                continue;
            }
            if let Some(e) = &self.externals[n] {
                out.insert(e.clone());
            }
            stack.extend(self.edges[n].iter().filter(|&&d| !seen[d]));
        }
        Some(out.into_iter().collect())
    }
}

/// `./packages/a/` → `packages/a`; `.` → `""`.
pub fn normalise_dir(dir: &str) -> String {
    let parts: Vec<&str> = dir.split('/').filter(|c| !c.is_empty() && *c != ".").collect();
    let mut out: Vec<&str> = Vec::new();
    for p in parts {
        if p == ".." {
            out.pop();
        } else {
            out.push(p);
        }
    }
    out.join("/")
}

/// What a parser needs from the workspace besides the lockfile: each project's directory and
/// manifest (`package.json` or `Cargo.toml`) text, for the formats whose lockfile does not
/// name the workspace's own packages (yarn v1, Cargo).
#[derive(Clone, Debug, Default)]
pub struct Manifests {
    /// Workspace-relative directory → manifest text, by file name.
    pub by_dir: BTreeMap<String, BTreeMap<String, String>>,
}

impl Manifests {
    /// Reads `package.json` and `Cargo.toml` of each of `dirs` under `root` (missing ones and
    /// unreadable ones are left out).
    pub fn read(root: &Path, dirs: &[&str]) -> Self {
        let mut by_dir = BTreeMap::new();
        for dir in dirs.iter().copied().chain(std::iter::once("")) {
            let mut files = BTreeMap::new();
            for name in ["package.json", "Cargo.toml"] {
                let path = if dir.is_empty() { root.join(name) } else { root.join(dir).join(name) };
                if let Ok(text) = std::fs::read_to_string(path) {
                    files.insert(name.to_owned(), text);
                }
            }
            by_dir.insert(dir.to_owned(), files);
        }
        Self { by_dir }
    }

    /// The manifest `name` of `dir`.
    pub fn get(&self, dir: &str, name: &str) -> Option<&str> {
        self.by_dir.get(dir)?.get(name).map(String::as_str)
    }
}

/// Parses the lockfile `file_name` (its base name picks the format) holding `text`.
pub fn parse(file_name: &str, text: &str, manifests: &Manifests) -> Result<Graph, LockError> {
    if text.len() > MAX_BYTES {
        return Err(LockError::TooLarge(format!("{} bytes, over {MAX_BYTES}", text.len())));
    }
    let base = file_name.rsplit('/').next().unwrap_or(file_name);
    match base {
        "package-lock.json" | "npm-shrinkwrap.json" => npm::parse(text),
        "pnpm-lock.yaml" => pnpm::parse(text),
        "yarn.lock" => yarn::parse(text, manifests),
        "Cargo.lock" => cargo::parse(text, manifests),
        other => Err(LockError::Unknown(other.to_owned())),
    }
}

/// Whether `path`'s base name is a lockfile format prova reads.
pub fn is_lockfile(path: &str) -> bool {
    let base = path.rsplit('/').next().unwrap_or(path);
    matches!(
        base,
        "package-lock.json" | "npm-shrinkwrap.json" | "pnpm-lock.yaml" | "yarn.lock" | "Cargo.lock"
    )
}

/// The digest folded into a project's key for one lockfile: its externals, canonically.
pub fn digest_of(externals: &[External]) -> Digest {
    let mut bytes = Vec::new();
    for e in externals {
        for part in [&e.name, &e.version, &e.integrity] {
            bytes.extend_from_slice(&(part.len() as u64).to_le_bytes());
            bytes.extend_from_slice(part.as_bytes());
        }
    }
    Digest::of(&bytes)
}

/// The workspace's lockfiles that were read: which `fingerprint` files are keyed per project.
#[derive(Debug, Default)]
pub struct Keyed {
    /// Lockfile path (workspace-relative) → its graph.
    graphs: BTreeMap<String, Graph>,
    /// Lockfile path → per project directory, the digest of its externals, as the
    /// [`memo`] answered it (the file neither read nor parsed).
    memoised: BTreeMap<String, BTreeMap<String, Digest>>,
    /// Lockfiles that could not be read, with why: folded whole.
    pub fallbacks: Vec<(String, LockError)>,
    /// Lockfiles this load parsed (not answered by the memo).
    pub parsed: Vec<String>,
}

/// Where [`Keyed::load_memoised`] finds a lockfile's content digest and keeps its memo.
pub struct MemoSource<'a> {
    /// The memo directory (`.prova/lockfiles`).
    pub dir: &'a Path,
    /// The content digest of a workspace-relative path, when it is a regular file whose
    /// digest is known (a symlink's digest is its target's name: never a memo key).
    pub content: &'a dyn Fn(&str) -> Option<Digest>,
}

impl Keyed {
    /// Reads every lockfile among `fingerprint` (workspace-relative paths) under `root`, for
    /// the projects at `dirs`. A lockfile that cannot be read is listed in `fallbacks` and
    /// logged as a warning.
    pub fn load(root: &Path, fingerprint: &[&str], dirs: &[&str]) -> Self {
        Self::load_with(root, fingerprint, dirs, None)
    }

    /// [`Keyed::load`] through the [`memo`]: a lockfile whose content digest `memo` knows
    /// and whose memo holds that digest's answer is neither read nor parsed; one parsed is
    /// recorded there for the next run.
    pub fn load_memoised(
        root: &Path,
        fingerprint: &[&str],
        dirs: &[&str],
        memo: &MemoSource<'_>,
    ) -> Self {
        Self::load_with(root, fingerprint, dirs, Some(memo))
    }

    fn load_with(
        root: &Path,
        fingerprint: &[&str],
        dirs: &[&str],
        memo: Option<&MemoSource<'_>>,
    ) -> Self {
        let mut out = Self::default();
        let candidates: Vec<&str> =
            fingerprint.iter().copied().filter(|p| is_lockfile(p)).collect();
        if candidates.is_empty() {
            return out;
        }
        // Only yarn v1 and Cargo read the projects' manifests: npm and pnpm lockfiles name
        // the workspace's packages themselves.
        let manifests = if candidates.iter().any(|p| memo::needs_manifests(p)) {
            Manifests::read(root, dirs)
        } else {
            Manifests::default()
        };
        for path in candidates {
            let key = memo.and_then(|m| {
                let content = (m.content)(path)?;
                let manifests = memo::needs_manifests(path).then_some(&manifests);
                Some(memo::key(path, &content, dirs, manifests))
            });
            if let (Some(m), Some(key)) = (memo, &key)
                && let Some(digests) = memo::load(m.dir, path, key)
            {
                out.memoised.insert(path.to_owned(), digests);
                continue;
            }
            out.parsed.push(path.to_owned());
            let mut read = None;
            let result = std::fs::read(root.join(path))
                .map_err(|e| LockError::Invalid(format!("cannot read it: {e}")))
                .and_then(|bytes| {
                    read = Some(Digest::of(&bytes));
                    String::from_utf8(bytes).map_err(|_| LockError::Invalid("not UTF-8".to_owned()))
                })
                .and_then(|text| parse(path, &text, &manifests));
            match result {
                Ok(graph) => {
                    // Memoised only under the digest of the bytes parsed: a lockfile rewritten
                    // since its digest was taken (an install running) must not file the new
                    // bytes' answer under the old digest.
                    if let (Some(m), Some(key)) = (memo, &key)
                        && read.is_some_and(|d| (m.content)(path) == Some(d))
                    {
                        memo::store(m.dir, path, key, Self::digests_of(&graph, dirs));
                    }
                    out.graphs.insert(path.to_owned(), graph);
                }
                Err(err) => {
                    tracing::warn!(
                        "{path}: cannot read its per-project dependencies ({err}); the whole file is folded into every key"
                    );
                    out.fallbacks.push((path.to_owned(), err));
                }
            }
        }
        out
    }

    /// Per project directory among `dirs` (normalised): the digest of its externals in `g`.
    fn digests_of(g: &Graph, dirs: &[&str]) -> BTreeMap<String, Digest> {
        dirs.iter()
            .map(|d| {
                let ext = g.externals_of(d).unwrap_or_default();
                (normalise_dir(d), digest_of(&ext))
            })
            .collect()
    }

    /// Whether `path` is keyed per project (so its whole-file digest is not folded).
    pub fn is_keyed(&self, path: &str) -> bool {
        self.graphs.contains_key(path) || self.memoised.contains_key(path)
    }

    /// Per parsed lockfile: the externals of the project at `dir`. A lockfile that knows
    /// neither the project nor the root gives an empty list. A lockfile the memo answered is
    /// not listed ([`Keyed::load`] reads every one).
    pub fn externals_of(&self, dir: &str) -> Vec<(&str, Vec<External>)> {
        self.graphs
            .iter()
            .map(|(path, g)| (path.as_str(), g.externals_of(dir).unwrap_or_default()))
            .collect()
    }

    /// The key config pairs of the project at `dir`: `("external:<lockfile>", digest)`,
    /// sorted by lockfile.
    pub fn config_pairs(&self, dir: &str) -> Vec<(String, String)> {
        let parsed = self
            .graphs
            .iter()
            .map(|(path, g)| (path, digest_of(&g.externals_of(dir).unwrap_or_default())));
        // The memo holds a row for every project the load was asked about; one it was not
        // asked about gets a digest no lockfile gives (a miss, never another's entry).
        let memoised = self.memoised.iter().map(|(path, digests)| {
            let d = digests.get(&normalise_dir(dir)).copied();
            (
                path,
                d.unwrap_or_else(|| {
                    Digest::of(b"prova: a project the lockfile memo was not asked about")
                }),
            )
        });
        let mut pairs: Vec<(String, String)> = parsed
            .chain(memoised)
            .map(|(path, d)| (format!("external:{path}"), d.to_hex()))
            .collect();
        pairs.sort();
        pairs
    }
}

/// `name@version` of each external `dir` reaches in `g` (the parsers' tests).
#[cfg(test)]
pub(crate) fn names(g: &Graph, dir: &str) -> Vec<String> {
    g.externals_of(dir)
        .unwrap_or_default()
        .into_iter()
        .map(|e| format!("{}@{}", e.name, e.version))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_walk_ends_on_cycles_and_joins_the_root() {
        let mut g = Graph::default();
        let ext = |n: &str| {
            Some(External { name: n.into(), version: "1".into(), integrity: String::new() })
        };
        let root = g.node("root", None).unwrap();
        let a = g.node("a", None).unwrap();
        let x = g.node("x", ext("x")).unwrap();
        let y = g.node("y", ext("y")).unwrap();
        let tool = g.node("tool", ext("tool")).unwrap();
        g.edge(a, x);
        g.edge(x, y);
        g.edge(y, x);
        g.edge(root, tool);
        g.project("", root);
        g.project("./packages/a/", a);
        let names: Vec<String> =
            g.externals_of("packages/a").unwrap().into_iter().map(|e| e.name).collect();
        assert_eq!(names, ["tool", "x", "y"]);
        // A project the lockfile does not know gets the root's.
        let names: Vec<String> =
            g.externals_of("other").unwrap().into_iter().map(|e| e.name).collect();
        assert_eq!(names, ["tool"]);
        assert_eq!(Graph::default().externals_of("a"), None);
    }

    #[test]
    fn unknown_and_huge_files_are_errors() {
        let m = Manifests::default();
        assert!(matches!(parse("deps.lock", "", &m), Err(LockError::Unknown(_))));
        let huge = " ".repeat(MAX_BYTES + 1);
        assert!(matches!(parse("package-lock.json", &huge, &m), Err(LockError::TooLarge(_))));
    }

    #[test]
    fn the_digest_separates_fields() {
        let e = |n: &str, v: &str| External {
            name: n.into(),
            version: v.into(),
            integrity: String::new(),
        };
        assert_ne!(digest_of(&[e("ab", "c")]), digest_of(&[e("a", "bc")]));
        assert_eq!(digest_of(&[e("a", "1")]), digest_of(&[e("a", "1")]));
    }

    /// Every prefix of a valid lockfile of each format, and each with one byte replaced by
    /// each of a few hostile bytes, parses or errors: never a panic.
    #[test]
    fn truncated_and_mutated_lockfiles_never_panic() {
        let samples = [
            ("package-lock.json", include_str!("../../../../examples/tsmono/package-lock.json")),
            (
                "pnpm-lock.yaml",
                "lockfileVersion: '9.0'\nimporters:\n  .:\n    dependencies:\n      a: {specifier: ^1, version: 1.0.0(p@1)}\n  x:\n    dependencies:\n      b: {version: link:../y}\npackages:\n  a@1.0.0:\n    resolution: {integrity: sha512-a}\nsnapshots:\n  a@1.0.0(p@1):\n    dependencies: {p: '1'}\n",
            ),
            (
                "yarn.lock",
                "\"@s/a@^1\", a@^2:\n  version \"1.0.0\"\n  integrity sha512-a\n  dependencies:\n    b \"^1\"\nb@^1:\n  version \"1.0.0\"\n",
            ),
            (
                "yarn.lock",
                "__metadata:\n  version: 8\n\"a@workspace:.\":\n  resolution: \"a@workspace:.\"\n  dependencies:\n    b: \"npm:^1\"\n\"b@npm:^1\":\n  resolution: \"b@npm:1.0.0\"\n",
            ),
            (
                "Cargo.lock",
                "version = 4\n[[package]]\nname = \"a\"\nversion = \"1\"\ndependencies = [\"b 1 (s)\"]\n[[package]]\nname = \"b\"\nversion = \"1\"\nsource = \"s\"\n",
            ),
        ];
        let mut m = Manifests::default();
        m.by_dir
            .entry(String::new())
            .or_default()
            .insert("package.json".into(), "{\"dependencies\": {\"a\": \"^2\"}}".into());
        for (name, text) in samples {
            let bytes = text.as_bytes();
            let step = (bytes.len() / 400).max(1);
            for cut in (0..bytes.len()).step_by(step) {
                if let Ok(prefix) = std::str::from_utf8(&bytes[..cut]) {
                    let _ = parse(name, prefix, &m).map(|g| g.externals_of(""));
                }
                for hostile in [b'{', b'[', b'"', b':', b'\n', b' ', b'(', b'@'] {
                    let mut v = bytes.to_vec();
                    v[cut] = hostile;
                    if let Ok(t) = String::from_utf8(v) {
                        let _ = parse(name, &t, &m).map(|g| g.externals_of("x"));
                    }
                }
            }
        }
    }

    #[test]
    fn dirs_are_normalised() {
        assert_eq!(normalise_dir("."), "");
        assert_eq!(normalise_dir("./packages/a/"), "packages/a");
        assert_eq!(normalise_dir("packages/a/../b"), "packages/b");
        assert_eq!(normalise_dir("../../x"), "x");
    }
}
