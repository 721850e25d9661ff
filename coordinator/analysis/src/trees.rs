//! Installed trees on the client side (issue 12): which directories of the workspace hold
//! installed dependencies and toolchains, their manifests and digests, and which tasks each
//! one's digest is folded into.
//!
//! - **Which**: `[workspace] trees` (directory globs, workspace-relative; `*` matches one
//!   path segment), gitignored or not. Unset in a workspace with a root `package.json`, the
//!   default is `node_modules` at the root and in every project directory; unset elsewhere,
//!   none. `trees = []` turns them off. Only directories that exist count.
//! - **Digest**: a walk of the directory (never following a symlink, no ignore rules; the
//!   trees together, on a few threads: `walk`) into a [`TreeManifest`]; file bytes are hashed
//!   through the stat memo (scope [`memo_scope`]), so a warm scan only stats. The manifest is
//!   written to `.prova/trees/<digest>` (where a remote run uploads it from). A tree whose
//!   walk sees every entry as it was when its digest was computed (`stamps`: the record in
//!   `.prova/trees/stamps`, kept outside the racy window) takes that digest: no memo rows
//!   read, no manifest built, the stored one read back only by a remote run
//!   ([`ScannedTree::manifest`]). That walk takes a directory's entries from its listing
//!   recorded in `.prova/trees/listings` when the directory's stat is the recorded one
//!   (`listings`): a `statx` instead of reading it.
//! - **Who folds it** ([`visible_to`], [`reach`]): the tasks of projects at or under the
//!   directory that holds the tree — Node's resolution walks up from a file's directory to
//!   every enclosing `node_modules`, and a root `.venv` serves every project — and the tasks
//!   of every project that reaches such a project upstream, transitively (issue 27): a task
//!   that requires workspace package `b` runs `b`'s code, which resolves `b`'s own
//!   dependencies from `packages/b/node_modules` (npm's un-hoisted versions, pnpm's links).
//!   The digest enters the key as the config pair `tree:<path>`, and the tree is one of the
//!   task's inputs (an `InputRef` with `tree` set), so its exec roots mount it and the inputs
//!   proof counts reads inside it as declared. A read inside a tree a task does not see
//!   cannot be declared in `inputs` (an input never lies inside a tree): the proof says which
//!   project's dependency would bring it ([`holder_project`]).
//! - **Held while tasks run** ([`TreeGuard`]): before a save, each tree the task's key folds
//!   must still have the digest the key folded (watched with inotify from its first check),
//!   or the entry is withheld.

use std::collections::HashMap;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use prova_protocol::Digest;
use prova_protocol::globs::is_within;
use prova_protocol::tree::{TreeEntry, TreeKind, TreeManifest};

use crate::cache::MemoRow;
use crate::digests;

mod guard;
mod listings;
mod stamps;
mod walk;

pub use guard::{Keyed, TreeGuard};

/// Most directory entries one tree's walk visits before the tree is refused.
pub const MAX_WALK_ENTRIES: usize = prova_protocol::tree::MAX_TREE_ENTRIES;

/// Why a tree could not be scanned.
#[derive(Debug, thiserror::Error)]
pub enum TreeScanError {
    /// Reading the directory failed.
    #[error("installed tree `{tree}`: {path}: {source}")]
    Io {
        /// The tree's path.
        tree: String,
        /// The entry.
        path: String,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// Its stored manifest could not be read back.
    #[error("the manifest of installed tree `{tree}`: {reason}")]
    Manifest {
        /// The tree's path.
        tree: String,
        /// Why.
        reason: String,
    },
    /// More than [`MAX_WALK_ENTRIES`] entries.
    #[error("installed tree `{0}` has more than {MAX_WALK_ENTRIES} entries")]
    TooLarge(String),
    /// Writing its manifest under `.prova` failed.
    #[error("writing the manifest of installed tree `{tree}`: {source}")]
    Store {
        /// The tree's path.
        tree: String,
        /// The OS error.
        #[source]
        source: io::Error,
    },
}

/// One scanned tree.
#[derive(Clone, Debug)]
pub struct ScannedTree {
    /// Workspace-relative path of its directory.
    pub path: String,
    /// Its manifest's digest.
    pub digest: Digest,
    /// Where its encoded manifest is stored (a blob to upload).
    pub manifest_file: PathBuf,
    /// What the tree's links that lead out of the workspace lead to (`npm link`, pnpm's
    /// `link:`, or a link through a workspace symlink that leads out), followed and read
    /// afresh this run ([`Hops::beyond_digest`]): the manifest keeps a link's text only. `None`
    /// when no link leads out.
    pub beyond: Option<Digest>,
    /// Its manifest, once built or read back ([`ScannedTree::manifest`]).
    manifest: std::sync::Arc<std::sync::OnceLock<std::sync::Arc<TreeManifest>>>,
}

impl ScannedTree {
    /// The tree at `path` whose manifest, of `digest`, is stored in `store`.
    fn stored(path: String, digest: Digest, store: &Path) -> Self {
        let manifest_file = store.join(digest.to_hex());
        ScannedTree { path, digest, manifest_file, beyond: None, manifest: Default::default() }
    }

    /// Its manifest: the one the scan built, or read back from [`ScannedTree::manifest_file`]
    /// (a tree the scan found as recorded), checked against the digest.
    pub fn manifest(&self) -> Result<std::sync::Arc<TreeManifest>, TreeScanError> {
        if let Some(m) = self.manifest.get() {
            return Ok(m.clone());
        }
        let bad = |reason: String| TreeScanError::Manifest { tree: self.path.clone(), reason };
        let mut bytes = Vec::new();
        fs::File::open(&self.manifest_file)
            .and_then(|f| {
                use std::io::Read as _;
                f.take(prova_protocol::tree::MAX_MANIFEST_BYTES as u64 + 1).read_to_end(&mut bytes)
            })
            .map_err(|e| bad(format!("{}: {e}", self.manifest_file.display())))?;
        if Digest::of(&bytes) != self.digest {
            return Err(bad(format!("{} changed since the scan", self.manifest_file.display())));
        }
        let m = TreeManifest::decode(&bytes, &self.path).map_err(|e| bad(e.to_string()))?;
        Ok(self.manifest.get_or_init(|| std::sync::Arc::new(m)).clone())
    }
}

/// What scanning a workspace's trees did.
#[derive(Debug, Default)]
pub struct TreePass {
    /// The trees, sorted by path.
    pub trees: Vec<ScannedTree>,
    /// Memo rows to write (files hashed this pass), in [`memo_scope`].
    pub updates: Vec<(String, MemoRow)>,
    /// Files whose bytes were read.
    pub hashed: usize,
    /// Files answered by the memo.
    pub memo_hits: usize,
}

/// The stat memo scope of a workspace's installed trees (apart from its inputs').
pub fn memo_scope(root: &Path) -> String {
    format!("trees:{}", root.display())
}

/// The tree directories of a workspace: `patterns` (`None`: the default, see the module
/// docs) expanded against what exists, sorted, de-duplicated, never nested in one another
/// (an inner one is part of the outer).
pub fn tree_dirs(root: &Path, patterns: Option<&[String]>, project_dirs: &[&str]) -> Vec<String> {
    let patterns = prova_model::workspace::tree_patterns(root, patterns, project_dirs);
    let mut out: Vec<String> = patterns.iter().flat_map(|p| expand(root, p)).collect();
    out.sort();
    out.dedup();
    let all = out.clone();
    out.retain(|d| !all.iter().any(|o| o != d && is_within(d, o)));
    out
}

/// The existing directories matching one pattern, segment by segment (no symlinks followed).
fn expand(root: &Path, pattern: &str) -> Vec<String> {
    let pattern = pattern.trim_start_matches("//").trim_end_matches('/');
    let mut found = vec![String::new()];
    for seg in pattern.split('/').filter(|s| !s.is_empty() && *s != ".") {
        if seg == ".." {
            return Vec::new();
        }
        let glob = if seg.contains(['*', '?', '[', '{']) {
            match globset::Glob::new(seg) {
                Ok(g) => Some(g.compile_matcher()),
                Err(_) => return Vec::new(),
            }
        } else {
            None
        };
        let mut next = Vec::new();
        for base in &found {
            let join = |n: &str| if base.is_empty() { n.to_owned() } else { format!("{base}/{n}") };
            match &glob {
                None => next.push(join(seg)),
                Some(m) => {
                    let Ok(rd) = fs::read_dir(root.join(base)) else { continue };
                    for e in rd.flatten() {
                        if let Some(n) = e.file_name().to_str()
                            && m.is_match(n)
                            && n != ".git"
                            && n != ".prova"
                        {
                            next.push(join(n));
                        }
                    }
                }
            }
        }
        found = next;
    }
    found.retain(|d| {
        !d.is_empty()
            && fs::symlink_metadata(root.join(d)).is_ok_and(|m| m.file_type().is_dir())
            && !d.split('/').any(|s| s == ".git" || s == ".prova")
    });
    found
}

/// The key's config pair of tree `path` with manifest `digest`: `tree:<path>` → hex.
pub fn key_pair(path: &str, digest: &Digest) -> (String, String) {
    (format!("{KEY_PREFIX}{path}"), digest.to_hex())
}

/// The prefix of a tree's config pair name ([`key_pair`]).
pub const KEY_PREFIX: &str = "tree:";

/// The key's config pair of what the links of tree `t` that lead out of the workspace lead
/// to, when it has any: `tree-beyond:<path>` → hex (not a [`KEY_PREFIX`] pair: a farm
/// matches those against the trees a task mounts).
pub fn beyond_pair(t: &ScannedTree) -> Option<(String, String)> {
    t.beyond.map(|d| (format!("{BEYOND_PREFIX}{}", t.path), d.to_hex()))
}

/// The prefix of a tree's [`beyond_pair`] name.
pub const BEYOND_PREFIX: &str = "tree-beyond:";

/// What a pass's trees' leaving links lead to ([`Hops::beyond_digest`]), with what it needs
/// to know of the run: each first hop is looked up once a run however many links share it
/// (every package's link to one workspace package), and so is what lies at each end.
struct Hops<'a> {
    /// The workspace root (canonical).
    root: &'a Path,
    /// The projects' directories, sorted: a walk that follows no link found them real.
    real_dirs: &'a [String],
    /// This run's trees.
    trees: &'a [String],
    ends: HashMap<String, Option<PathBuf>>,
    states: HashMap<PathBuf, Vec<u8>>,
}

impl<'a> Hops<'a> {
    fn new(root: &'a Path, real_dirs: &'a [String], trees: &'a [String]) -> Self {
        Self { root, real_dirs, trees, ends: HashMap::new(), states: HashMap::new() }
    }

    /// The digest of what each of `leaving` (a link of the tree at `tree` and its first hop,
    /// [`digests::beyond::first_hop`]) that ends out of the workspace leads to now — followed
    /// again every run, so a workspace symlink on the way (`node_modules/dep ->
    /// ../vendor/dep`, `vendor -> …`) that is pointed elsewhere moves the key though the tree
    /// itself did not change; `None` when none ends out there.
    ///
    /// Two kinds of hop need no look: one to a project's directory (it ends there, in the
    /// workspace — a workspace's packages linked into `node_modules`), and one into another
    /// of this run's trees that every task folding `tree` folds too (the root `node_modules`
    /// from a package's: pnpm's `.bin` and dependency links) — that tree's own record
    /// answers for what lies in it, its links that leave it included.
    fn beyond_digest(&mut self, tree: &str, leaving: &[(String, String)]) -> Option<Digest> {
        let mut bytes = Vec::new();
        for (link, hop) in leaving {
            if self.real_dirs.binary_search(hop).is_ok()
                || in_a_covering_tree(hop, tree, self.trees)
            {
                continue;
            }
            let root = self.root;
            let end = self
                .ends
                .entry(hop.clone())
                .or_insert_with(|| digests::beyond::hop_beyond(root, hop));
            let Some(end) = end.as_ref() else { continue };
            let state =
                self.states.entry(end.clone()).or_insert_with(|| digests::beyond::state(end));
            bytes.extend_from_slice(link.as_bytes());
            bytes.push(0);
            bytes.extend_from_slice(end.as_os_str().as_encoded_bytes());
            bytes.push(0);
            bytes.extend_from_slice(state);
            bytes.push(b'\n');
        }
        (!bytes.is_empty()).then(|| Digest::of(&bytes))
    }
}

/// Whether `hop` lies inside one of `trees` (walked from the root, following no link) that
/// every task folding `tree` folds too: its holder holds `tree`'s. A hop with `..` in it is
/// not judged by its spelling.
fn in_a_covering_tree(hop: &str, tree: &str, trees: &[String]) -> bool {
    if hop.split('/').any(|c| c == ".." || c == "." || c.is_empty()) {
        return false;
    }
    let held = holder(tree);
    trees.iter().any(|t| {
        hop.strip_prefix(t.as_str()).is_some_and(|r| r.starts_with('/'))
            && is_within(held, holder(t))
    })
}

/// Whether a task in `project_dir` folds (and sees) the tree at `tree` (see the module docs).
pub fn visible_to(tree: &str, project_dir: &str) -> bool {
    let holder = holder(tree);
    holder.is_empty() || is_within(project_dir, holder)
}

/// The directory holding the tree at `tree` (`""`: the workspace root).
pub fn holder(tree: &str) -> &str {
    tree.rsplit_once('/').map_or("", |(d, _)| d)
}

/// The project whose directory holds the tree at `tree` (its own `node_modules`), if any.
pub fn holder_project<'a>(
    ws_projects: &'a [crate::workspace::Project],
    tree: &str,
) -> Option<&'a str> {
    let dir = holder(tree);
    ws_projects.iter().find(|p| p.dir == dir).map(|p| p.name.as_str())
}

/// For each task of `plan`, the project directories whose trees it sees ([`visible_to`]
/// each): its own project's, and every project it reaches upstream — the projects of the
/// tasks it depends on, transitively, and the workspace dependencies (`[project] deps`,
/// `package.json` dependencies naming workspace projects) of each, transitively. Sorted.
pub fn reach(ws: &crate::workspace::Workspace, plan: &crate::plan::RunPlan) -> Vec<Vec<String>> {
    use std::collections::BTreeSet;
    let by_name: HashMap<&str, usize> =
        ws.projects.iter().enumerate().map(|(i, p)| (p.name.as_str(), i)).collect();
    (0..plan.tasks.len())
        .map(|ti| {
            let mut projects: BTreeSet<usize> = BTreeSet::new();
            let mut seen_tasks: BTreeSet<usize> = BTreeSet::new();
            let mut tasks = vec![ti];
            while let Some(i) = tasks.pop() {
                if seen_tasks.insert(i) {
                    projects.insert(plan.tasks[i].project);
                    tasks.extend(&plan.tasks[i].deps);
                }
            }
            let mut stack: Vec<usize> =
                projects.iter().copied().filter(|&p| p < ws.projects.len()).collect();
            projects.clear();
            while let Some(p) = stack.pop() {
                if projects.insert(p) {
                    let deps = ws.projects[p].deps.iter();
                    stack.extend(deps.filter_map(|d| by_name.get(d.value.as_str()).copied()));
                }
            }
            let mut dirs: Vec<String> =
                projects.into_iter().map(|p| ws.projects[p].dir.clone()).collect();
            dirs.sort();
            dirs
        })
        .collect()
}

/// Whether a task that [`reach`]es the project directories `dirs` sees the tree at `tree`.
pub fn visible_to_any(tree: &str, dirs: &[String]) -> bool {
    dirs.iter().any(|d| visible_to(tree, d))
}

/// Scans every tree in `dirs` under `root`, hashing through `memo` (scope [`memo_scope`]),
/// and stores each manifest under `store` (`.prova/trees`): [`walk_all`], then [`finish`].
pub fn scan_all(
    root: &Path,
    dirs: &[String],
    memo: &HashMap<String, MemoRow>,
    now_ns: i64,
    store: &Path,
) -> Result<TreePass, TreeScanError> {
    let walks = walk_all(root, dirs, store, None)?;
    finish(root, walks, memo, now_ns, store, &[])
}

/// Every tree of a workspace walked, each with its digest where the walk saw what the record
/// in `.prova/trees` says its digest was computed from ([`Walks::all_known`]: then
/// [`finish`] needs no memo).
pub struct Walks {
    trees: Vec<(String, walk::Seen, Option<Digest>)>,
    record: stamps::Stamps,
}

impl Walks {
    /// Whether every tree's digest is known from the record.
    pub fn all_known(&self) -> bool {
        self.trees.iter().all(|(_, _, d)| d.is_some())
    }
}

/// Trees walked for their stamps before the workspace was loaded (a run walks the root
/// `node_modules` while its projects load, under the workspace lock): [`walk_all`] takes
/// their stamps instead of walking them again.
pub struct Prewalked {
    dirs: Vec<String>,
    seen: Vec<walk::Seen>,
}

/// Walks the trees at `dirs` under `root` for their stamps: the first step of [`walk_all`],
/// taken early. `store`: where the manifests and the records are ([`walk_all`]'s).
pub fn prewalk(root: &Path, store: &Path, dirs: Vec<String>) -> Result<Prewalked, TreeScanError> {
    let seen = stamp_walk(root, store, &dirs)?;
    Ok(Prewalked { dirs, seen })
}

/// The walk of the trees at `dirs` for their stamps, through the directories' listings
/// recorded in `store` (`listings`), which it brings up to date.
fn stamp_walk(
    root: &Path,
    store: &Path,
    dirs: &[String],
) -> Result<Vec<walk::Seen>, TreeScanError> {
    let started = std::time::Instant::now();
    let records = listings::Records::read(store, dirs);
    let listings = records.listings(listings::now_ns());
    let seen = walk::walk_listed(root, dirs, &listings)?;
    let (held, read) = listings.counts();
    listings.write_back(&records);
    tracing::debug!(elapsed = ?started.elapsed(), held, read, "trees stamped");
    Ok(seen)
}

/// Walks every tree in `dirs` under `root` (those `pre` walked already taken from it) and
/// looks each one up in the record in `store`.
pub fn walk_all(
    root: &Path,
    dirs: &[String],
    store: &Path,
    pre: Option<Prewalked>,
) -> Result<Walks, TreeScanError> {
    let record = stamps::Stamps::read(store);
    let started = std::time::Instant::now();
    // The stamps alone first; the trees not as recorded are walked again for their entries
    // (that walk's stamp is the one recorded with the digest built from it).
    let mut early: HashMap<String, walk::Seen> =
        pre.map(|p| p.dirs.into_iter().zip(p.seen).collect()).unwrap_or_default();
    let rest: Vec<String> = dirs.iter().filter(|d| !early.contains_key(*d)).cloned().collect();
    if !rest.is_empty() {
        early.extend(rest.iter().cloned().zip(stamp_walk(root, store, &rest)?));
    }
    let mut trees = Vec::with_capacity(dirs.len());
    for dir in dirs {
        let seen = match early.remove(dir) {
            Some(seen) => seen,
            // Named twice: walked again.
            None => walk::walk(root, std::slice::from_ref(dir), walk::Keep::Stamp)?
                .pop()
                .unwrap_or_default(),
        };
        // A recorded digest whose manifest is gone is computed again.
        let known = record
            .digest(dir, &seen)
            .filter(|d| fs::symlink_metadata(store.join(d.to_hex())).is_ok_and(|m| m.is_file()));
        trees.push((dir.clone(), seen, known));
    }
    let unknown: Vec<String> =
        trees.iter().filter(|t| t.2.is_none()).map(|t| t.0.clone()).collect();
    if !unknown.is_empty() {
        let mut full = walk::walk(root, &unknown, walk::Keep::Entries)?.into_iter();
        for t in trees.iter_mut().filter(|t| t.2.is_none()) {
            t.1 = full.next().unwrap_or_default();
        }
    }
    tracing::debug!(
        elapsed = ?started.elapsed(),
        trees = trees.len(),
        known = trees.iter().filter(|t| t.2.is_some()).count(),
        "trees walked"
    );
    Ok(Walks { trees, record })
}

/// The trees of `walks`: a known one as recorded (its manifest read back only when asked
/// for), the others' files answered from `memo` (scope [`memo_scope`]) or hashed, their
/// manifests built and stored under `store`, and the record updated. `real_dirs`: the
/// workspace's project directories, sorted ([`Hops::beyond_digest`]).
pub fn finish(
    root: &Path,
    walks: Walks,
    memo: &HashMap<String, MemoRow>,
    now_ns: i64,
    store: &Path,
    real_dirs: &[String],
) -> Result<TreePass, TreeScanError> {
    let Walks { trees, mut record } = walks;
    let mut pass = TreePass::default();
    let mut changed = false;
    let current: Vec<String> = trees.iter().map(|(d, _, _)| d.clone()).collect();
    let mut hops = Hops::new(root, real_dirs, &current);
    for (dir, seen, known) in trees {
        if let Some(digest) = known {
            pass.memo_hits += seen.file_count;
            let mut tree = ScannedTree::stored(dir, digest, store);
            tree.beyond = hops.beyond_digest(&tree.path, record.leaving(&tree.path));
            pass.trees.push(tree);
            continue;
        }
        let started = std::time::Instant::now();
        let (mut tree, leaving) = build(root, &dir, &seen, memo, now_ns, store, &mut pass)?;
        tracing::debug!(tree = %dir, elapsed = ?started.elapsed(), "tree manifest");
        tree.beyond = hops.beyond_digest(&dir, &leaving);
        changed |= record.record(&dir, &seen, tree.digest, leaving, now_ns);
        pass.trees.push(tree);
    }
    changed |= record.keep_only(&current);
    if changed {
        forget_old_manifests(store, &pass.trees);
        listings::forget_others(store, &current);
        if let Err(e) = record.write(store) {
            tracing::debug!("the installed trees' record was not written: {e}");
        }
    }
    Ok(pass)
}

/// The manifest of the tree at `dir` as `seen` walked it: each file's digest from `memo`
/// when its row answers for the stamp the walk took, else hashed; each link's target read.
/// Stored under `store`. With the links whose first hop leaves the tree: (link, hop).
fn build(
    root: &Path,
    dir: &str,
    seen: &walk::Seen,
    memo: &HashMap<String, MemoRow>,
    now_ns: i64,
    store: &Path,
    pass: &mut TreePass,
) -> Result<(ScannedTree, Vec<(String, String)>), TreeScanError> {
    let prefix = format!("{dir}/");
    let mut leaving = Vec::new();
    let rel = |p: &str| p.strip_prefix(&prefix).unwrap_or(p).to_owned();
    let mut entries: Vec<TreeEntry> =
        seen.dirs.iter().map(|d| TreeEntry { path: rel(d), kind: TreeKind::Dir }).collect();
    for l in &seen.links {
        let text = fs::read_link(root.join(l)).map_err(|source| TreeScanError::Io {
            tree: dir.to_owned(),
            path: l.clone(),
            source,
        });
        match text {
            Ok(text) => {
                match digests::beyond::first_hop(l, &text) {
                    Some(hop) if digests::beyond::leaves(dir, &hop) => {
                        leaving.push((l.clone(), hop));
                    }
                    Some(_) => {}
                    // Not UTF-8: where it leads is judged from the link itself, every run.
                    None => leaving.push((l.clone(), l.clone())),
                }
                let t = digests::relative_if_inside(root, l, text);
                if let Some(t) = t.to_str() {
                    entries.push(TreeEntry {
                        path: rel(l),
                        kind: TreeKind::Symlink { target: t.to_owned() },
                    });
                }
            }
            // A link gone since the walk is not in the tree.
            Err(TreeScanError::Io { source, .. }) if source.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
    }
    let mut unknown: Vec<&str> = Vec::new();
    for (f, stamp) in &seen.files {
        let row = memo.get(f).filter(|row| digests::memo_answers(stamp, row));
        match row {
            Some(row) => {
                pass.memo_hits += 1;
                entries.push(TreeEntry {
                    path: rel(f),
                    kind: TreeKind::File { digest: row.digest, exec: stamp.mode & 0o100 != 0 },
                });
            }
            None => unknown.push(f),
        }
    }
    // Only the files the memo could not answer for are read.
    let digested = digests::digest_files(root, &unknown, &HashMap::new(), now_ns);
    pass.hashed += digested.hashed;
    pass.updates.extend(digested.updates);
    for f in unknown {
        // A file that vanished between the walk and the hash is not in the tree.
        if let Some(facts) = digested.facts.get(f) {
            entries.push(TreeEntry {
                path: rel(f),
                kind: TreeKind::File { digest: facts.digest, exec: facts.exec },
            });
        }
    }
    let manifest = TreeManifest::new(entries);
    let bytes = manifest.encode();
    let digest = Digest::of(&bytes);
    let manifest_file = store.join(digest.to_hex());
    if !manifest_file.exists() {
        let store_err = |source| TreeScanError::Store { tree: dir.to_owned(), source };
        fs::create_dir_all(store).map_err(store_err)?;
        let tmp = store.join(format!(".{}.{}", digest.to_hex(), std::process::id()));
        fs::write(&tmp, &bytes).map_err(store_err)?;
        fs::rename(&tmp, &manifest_file).map_err(store_err)?;
    }
    let tree = ScannedTree::stored(dir.to_owned(), digest, store);
    let _ = tree.manifest.set(std::sync::Arc::new(manifest));
    leaving.sort();
    Ok((tree, leaving))
}

/// Removes the manifests under `store` of trees no longer current (each tree change leaves
/// one behind, a few MB for a large `node_modules`). Best effort.
fn forget_old_manifests(store: &Path, current: &[ScannedTree]) {
    let Ok(rd) = fs::read_dir(store) else { return };
    for e in rd.flatten() {
        let name = e.file_name();
        let Some(name) = name.to_str() else { continue };
        let is_manifest = name.len() == 64 && name.bytes().all(|b| b.is_ascii_hexdigit());
        if is_manifest && !current.iter().any(|t| t.digest.to_hex() == name) {
            let _ = fs::remove_file(e.path());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{PermissionsExt, symlink};

    fn ws() -> tempfile::TempDir {
        let t = tempfile::tempdir().unwrap();
        let r = t.path();
        fs::create_dir_all(r.join("node_modules/foo/lib")).unwrap();
        fs::write(r.join("node_modules/foo/lib/index.js"), "x").unwrap();
        fs::create_dir_all(r.join("node_modules/.bin")).unwrap();
        symlink("../foo/lib/index.js", r.join("node_modules/.bin/foo")).unwrap();
        fs::create_dir_all(r.join("packages/a/node_modules")).unwrap();
        fs::write(r.join("package.json"), "{}").unwrap();
        t
    }

    fn scan(r: &Path, memo: &HashMap<String, MemoRow>) -> TreePass {
        let dirs = tree_dirs(r, None, &["", "packages/a", "packages/b"]);
        scan_all(r, &dirs, memo, i64::MAX, &r.join(".prova/trees")).unwrap()
    }

    #[test]
    fn a_link_out_of_the_workspace_is_keyed_by_what_it_leads_to_warm_or_cold() {
        // `npm link` / pnpm's `link:`: node_modules/dep leads to a package outside the
        // workspace. The manifest keeps its text; the key also folds what is there, read
        // again on a warm run that takes the recorded digest.
        let t = ws();
        let outside = tempfile::tempdir().unwrap();
        let o = outside.path().canonicalize().unwrap();
        fs::create_dir_all(o.join("dep")).unwrap();
        fs::write(o.join("dep/index.js"), "v1").unwrap();
        let r = t.path().canonicalize().unwrap();
        symlink(o.join("dep"), r.join("node_modules/dep")).unwrap();
        let beyond = |pass: &TreePass| {
            pass.trees.iter().find(|t| t.path == "node_modules").and_then(beyond_pair)
        };
        let past = i64::MAX; // every file older than the racy window: recorded
        let store = r.join(".prova/trees");
        let dirs = tree_dirs(&r, None, &["", "packages/a"]);
        let cold = scan_all(&r, &dirs, &HashMap::new(), past, &store).unwrap();
        let first = beyond(&cold).expect("the outward link is keyed");
        assert!(first.0 == "tree-beyond:node_modules", "{first:?}");
        let warm = scan_all(&r, &dirs, &HashMap::new(), past, &store).unwrap();
        assert_eq!(warm.hashed, 0, "the warm scan took the record");
        assert_eq!(beyond(&warm), Some(first.clone()));
        fs::write(o.join("dep/index.js"), "v2").unwrap();
        let edited = scan_all(&r, &dirs, &HashMap::new(), past, &store).unwrap();
        assert_eq!(edited.hashed, 0, "the tree itself did not change");
        assert_ne!(beyond(&edited), Some(first), "an edit out there moves the key");
        // A tree whose links stay inside has no such pair.
        assert!(edited.trees.iter().all(|t| t.path == "node_modules" || t.beyond.is_none()));
        fs::remove_file(r.join("node_modules/dep")).unwrap();
        let gone = scan_all(&r, &dirs, &HashMap::new(), past, &store).unwrap();
        assert_eq!(beyond(&gone), None);
    }

    #[test]
    fn a_link_that_leaves_the_tree_is_followed_again_every_run() {
        // `node_modules/dep -> ../vendor/dep`, and `vendor` a workspace symlink outside the
        // tree: where `dep` leads moves with `vendor`, and the tree's own stamp does not.
        let t = ws();
        let r = t.path().canonicalize().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let (a, b) = (outside.path().join("a"), outside.path().join("b"));
        for (d, v) in [(&a, "v-a"), (&b, "v-b"), (&r.join("vendored"), "v-in")] {
            fs::create_dir_all(d.join("dep")).unwrap();
            fs::write(d.join("dep/index.js"), v).unwrap();
        }
        symlink("vendored", r.join("vendor")).unwrap();
        symlink("../vendor/dep", r.join("node_modules/dep")).unwrap();
        // And the same place from a second tree, through a path of its own.
        symlink("../../../vendor/dep", r.join("packages/a/node_modules/dep")).unwrap();
        let past = i64::MAX;
        let store = r.join(".prova/trees");
        let dirs = tree_dirs(&r, None, &["", "packages/a"]);
        let pass = || scan_all(&r, &dirs, &HashMap::new(), past, &store).unwrap();
        let beyond = |pass: &TreePass| -> Vec<Option<(String, String)>> {
            pass.trees.iter().map(beyond_pair).collect()
        };
        let inside = pass();
        assert_eq!(beyond(&inside), [None, None], "inside the workspace: its text is keyed");
        let repoint = |to: &Path| {
            fs::remove_file(r.join("vendor")).unwrap();
            symlink(to, r.join("vendor")).unwrap();
        };
        repoint(&a);
        let to_a = pass();
        assert_eq!(to_a.hashed, 0, "neither tree changed");
        let at_a = beyond(&to_a);
        assert!(at_a.iter().all(Option::is_some), "both trees now lead out: {at_a:?}");
        repoint(&b);
        let at_b = beyond(&pass());
        for (x, y) in at_a.iter().zip(&at_b) {
            assert_ne!(x, y, "re-pointed from a to b, same key");
        }
        fs::write(b.join("dep/index.js"), "v-b2").unwrap();
        assert_ne!(beyond(&pass()), at_b, "an edit out there moves the key");
        repoint(Path::new("vendored"));
        assert_eq!(beyond(&pass()), [None, None]);
    }

    #[test]
    fn a_hop_into_a_tree_every_reader_folds_needs_no_look() {
        let trees = ["node_modules".to_owned(), "packages/a/node_modules".to_owned()];
        let pnpm = "node_modules/.pnpm/x@1/node_modules/x";
        assert!(in_a_covering_tree(pnpm, "packages/a/node_modules", &trees));
        // Not from the root's tree into a package's (not every reader of the root's folds
        // it), nor a spelling with `..`, nor a place in no tree.
        assert!(!in_a_covering_tree("packages/a/node_modules/y", "node_modules", &trees));
        assert!(!in_a_covering_tree(
            "node_modules/x/../../vendor",
            "packages/a/node_modules",
            &trees
        ));
        assert!(!in_a_covering_tree("vendor/x", "packages/a/node_modules", &trees));
        assert!(!in_a_covering_tree("node_modulesx/y", "packages/a/node_modules", &trees));
    }

    #[test]
    fn default_trees_are_the_node_modules_that_exist() {
        let t = ws();
        assert_eq!(
            tree_dirs(t.path(), None, &["", "packages/a", "packages/b"]),
            ["node_modules", "packages/a/node_modules"]
        );
        assert!(tree_dirs(t.path(), Some(&[]), &[""]).is_empty(), "trees = [] turns them off");
        let globbed = tree_dirs(t.path(), Some(&["packages/*/node_modules".into()]), &[]);
        assert_eq!(globbed, ["packages/a/node_modules"]);
        let nested =
            tree_dirs(t.path(), Some(&["node_modules".into(), "node_modules/foo".into()]), &[]);
        assert_eq!(nested, ["node_modules"], "a tree inside another is part of it");
        assert!(tree_dirs(t.path(), Some(&["../x".into()]), &[]).is_empty());
        fs::remove_file(t.path().join("package.json")).unwrap();
        assert!(tree_dirs(t.path(), None, &[""]).is_empty(), "no package.json, no default");
    }

    #[test]
    fn the_digest_follows_content_exec_bits_and_links_and_a_warm_scan_reads_nothing() {
        let t = ws();
        let r = t.path();
        let first = scan(r, &HashMap::new());
        assert_eq!(first.hashed, 1);
        let d0 = first.trees[0].digest;
        assert_eq!(first.trees[0].path, "node_modules");
        assert!(first.trees[0].manifest_file.is_file());
        let stored = fs::read(&first.trees[0].manifest_file).unwrap();
        assert_eq!(Digest::of(&stored), d0, "the stored manifest is the digest's blob");

        let memo: HashMap<String, MemoRow> = first.updates.into_iter().collect();
        let mut old = memo.clone();
        for row in old.values_mut() {
            row.recorded_ns = i64::MAX; // outside the racy window
        }
        let warm = scan(r, &old);
        assert_eq!((warm.hashed, warm.memo_hits), (0, 1));
        assert_eq!(warm.trees[0].digest, d0);

        let f = r.join("node_modules/foo/lib/index.js");
        fs::set_permissions(&f, fs::Permissions::from_mode(0o755)).unwrap();
        let exec = scan(r, &HashMap::new()).trees[0].digest;
        assert_ne!(exec, d0, "exec bit");
        fs::write(&f, "y").unwrap();
        let content = scan(r, &HashMap::new()).trees[0].digest;
        assert_ne!(content, exec, "content");
        fs::remove_file(r.join("node_modules/.bin/foo")).unwrap();
        symlink("../foo", r.join("node_modules/.bin/foo")).unwrap();
        assert_ne!(scan(r, &HashMap::new()).trees[0].digest, content, "link target");
        let stored = fs::read_dir(r.join(".prova/trees"))
            .unwrap()
            .filter(|e| e.as_ref().unwrap().file_name().len() == 64)
            .count();
        assert_eq!(stored, 2, "only the current manifests (two trees) are kept");
        fs::create_dir(r.join("node_modules/empty")).unwrap();
        let with_dir = scan(r, &HashMap::new()).trees[0].digest;
        fs::remove_dir(r.join("node_modules/empty")).unwrap();
        assert_ne!(with_dir, scan(r, &HashMap::new()).trees[0].digest, "an empty directory");
    }

    /// Walks the trees of [`ws`] and says whether every digest is the recorded one.
    fn known(r: &Path) -> bool {
        let dirs = tree_dirs(r, None, &["", "packages/a", "packages/b"]);
        walk_all(r, &dirs, &r.join(".prova/trees"), None).unwrap().all_known()
    }

    #[test]
    fn a_tree_walked_as_recorded_needs_no_memo_and_reads_its_manifest_back() {
        let t = ws();
        let r = t.path();
        assert!(!known(r), "nothing recorded yet");
        let first = scan(r, &HashMap::new());
        assert!(known(r));
        let dirs = tree_dirs(r, None, &["", "packages/a", "packages/b"]);
        let store = r.join(".prova/trees");
        let walks = walk_all(r, &dirs, &store, None).unwrap();
        // No memo at all: the record answers.
        let warm = finish(r, walks, &HashMap::new(), i64::MAX, &store, &[]).unwrap();
        assert_eq!((warm.hashed, warm.memo_hits), (0, 1));
        for (a, b) in first.trees.iter().zip(&warm.trees) {
            assert_eq!((&a.path, a.digest), (&b.path, b.digest));
            assert_eq!(*a.manifest().unwrap(), *b.manifest().unwrap(), "read back as built");
        }
        // A manifest that changed on disk is refused, never served for the digest.
        let m = &warm.trees[0].manifest_file;
        let mut other = fs::read(m).unwrap();
        other.push(0);
        let walks = walk_all(r, &dirs, &store, None).unwrap();
        fs::write(m, &other).unwrap();
        let tampered = finish(r, walks, &HashMap::new(), i64::MAX, &store, &[]).unwrap();
        let err = tampered.trees[0].manifest().unwrap_err().to_string();
        assert!(err.contains("changed since the scan"), "{err}");
        // A manifest that is gone makes the tree unknown: scanned again, stored again.
        fs::remove_file(m).unwrap();
        assert!(!known(r));
        assert_eq!(scan(r, &HashMap::new()).trees[0].digest, first.trees[0].digest);
        assert!(m.is_file() && known(r));
    }

    #[test]
    fn every_change_to_a_recorded_tree_is_walked_into_a_new_digest() {
        let t = ws();
        let r = t.path();
        let f = r.join("node_modules/foo/lib/index.js");
        let d0 = scan(r, &HashMap::new()).trees[0].digest;
        // The same size, the old mtime put back: the ctime still moves.
        let mtime = fs::metadata(&f).unwrap().modified().unwrap();
        std::thread::sleep(std::time::Duration::from_millis(20));
        fs::write(&f, "z").unwrap();
        fs::File::options().write(true).open(&f).unwrap().set_modified(mtime).unwrap();
        assert!(!known(r), "a file rewritten with its mtime put back");
        let d1 = scan(r, &HashMap::new()).trees[0].digest;
        assert_ne!(d1, d0);
        // A file added, then removed; a link retargeted; a directory added.
        fs::write(r.join("node_modules/foo/new.js"), "n").unwrap();
        assert!(!known(r), "a file added");
        let d2 = scan(r, &HashMap::new()).trees[0].digest;
        fs::remove_file(r.join("node_modules/foo/new.js")).unwrap();
        assert!(!known(r), "a file removed");
        assert_eq!(scan(r, &HashMap::new()).trees[0].digest, d1);
        assert_ne!(d2, d1);
        fs::remove_file(r.join("node_modules/.bin/foo")).unwrap();
        symlink("../foo/lib", r.join("node_modules/.bin/foo")).unwrap();
        assert!(!known(r), "a link retargeted");
        scan(r, &HashMap::new());
        fs::create_dir(r.join("node_modules/foo/empty")).unwrap();
        assert!(!known(r), "a directory added");
        scan(r, &HashMap::new());
        // A tree of another project changes alone.
        fs::write(r.join("packages/a/node_modules/x.js"), "x").unwrap();
        assert!(!known(r), "a file in another tree");
    }

    #[test]
    fn a_tree_changed_within_the_racy_window_is_not_recorded() {
        let t = ws();
        let r = t.path();
        let dirs = tree_dirs(r, None, &["", "packages/a", "packages/b"]);
        let store = r.join(".prova/trees");
        // The files were written just now: a scan that begins now cannot tell a write later
        // in the same tick, so nothing is recorded for the tree holding them.
        let now =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos()
                as i64;
        let walks = walk_all(r, &dirs, &store, None).unwrap();
        finish(r, walks, &HashMap::new(), now, &store, &[]).unwrap();
        assert!(!known(r));
        // Scanned again once it is old enough, it is recorded.
        let walks = walk_all(r, &dirs, &store, None).unwrap();
        finish(r, walks, &HashMap::new(), now + RACY_WINDOW + 1_000_000_000, &store, &[]).unwrap();
        assert!(known(r));
        // A record of another version, or a broken one, records nothing.
        fs::write(store.join("stamps"), b"\x92\x02\x80").unwrap();
        assert!(!known(r));
        fs::write(store.join("stamps"), b"not a record").unwrap();
        assert!(!known(r));
    }

    const RACY_WINDOW: i64 = digests::RACY_WINDOW_NS;

    #[test]
    fn a_tree_is_folded_by_the_projects_under_the_directory_holding_it() {
        assert!(visible_to("node_modules", ""));
        assert!(visible_to("node_modules", "packages/a"));
        assert!(visible_to("packages/a/node_modules", "packages/a"));
        assert!(visible_to("packages/a/node_modules", "packages/a/sub"));
        assert!(!visible_to("packages/a/node_modules", "packages/b"));
        assert!(!visible_to("packages/a/node_modules", ""));
        assert!(!visible_to("packages/a/node_modules", "packages/ab"));
    }
}
