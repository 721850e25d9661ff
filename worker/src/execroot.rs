//! Exec roots: a fresh directory holding exactly a task's declared inputs and its upstream
//! tasks' outputs, laid out at their workspace-relative paths, which the sandbox mounts
//! read-only (with only the declared output directories writable) and runs the task in.
//!
//! How each thing gets there:
//! - an input from the blob cache is a hardlink to the blob (its executable twin when the
//!   input is executable) — unless it lies under a writable output directory, or no sandbox
//!   runs the task (everything in the root is writable then), where a task could write
//!   through the link into the cache: those are copied;
//! - an input that is a file on this machine (local mode: the workspace file itself) is
//!   copied, so nothing the task does can reach the workspace;
//! - a symlink input is recreated as a symlink; its target must stay inside the root;
//! - each upstream artifact (`tar.zst`) is unpacked with the protocol's safe
//!   [`unpack`](prova_protocol::artifact::unpack) into a staging directory beside the root and
//!   [`place`](prova_protocol::artifact::place)d into it;
//! - the output directories and the task's working directory are created, and where the
//!   sandbox makes the outputs writable is laid out ([`OutputLayout`]): each directory
//!   holding an output is bound writable with its other entries bound read-only again, so an
//!   output can be removed and made again while the sources beside it stay as they are;
//! - an installed tree ([`RootTree`], e.g. `node_modules`) is not copied in: with the sandbox
//!   its path is an empty directory that the sandbox bind-mounts the tree's one materialised
//!   copy onto, read-only ([`ExecRoot::tree_mounts`]); without one, its path is a directory
//!   of symlinks to the tree's top-level entries (a `@scope` directory mirrored one level
//!   down), with the tree's own top-level symlinks (an npm workspace's
//!   `node_modules/@s/a -> ../../packages/a`) recreated as written, so they resolve inside the
//!   root. Either way one tree costs the root a handful of entries, not one link per file.
//!
//! Every materialised file gets the mtime [`FIXED_MTIME_SECS`], so the root is the same tree
//! wherever and whenever it is built. Nothing is ever written through a symlink: directories
//! are created one component at a time and a symlink or file in the way is an error.
//!
//! An input and an upstream output at the same path must agree on the content (a declared
//! input that a dependency also produces is fine when both are the same bytes); otherwise
//! the root is refused with [`ExecRootError::Conflict`].

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs::{self, File, FileTimes};
use std::io::{self, ErrorKind};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use nix::sys::time::TimeSpec;
use prova_protocol::Digest;
use prova_protocol::artifact::{self, ArtifactError, UnpackLimits};
use prova_protocol::globs::{GlobError, PathGlobs, is_clean_relative, is_within};
use prova_protocol::manifest::{EntryKind, ManifestEntry, OutputManifest};

use crate::blobcache::{
    BLOB_MODE, BlobCache, BlobCacheError, EXEC_BLOB_MODE, FIXED_MTIME_SECS, PinGuard, fixed_mtime,
    set_times_nofollow,
};

/// Where an input's bytes come from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RootSource {
    /// A blob in the [`BlobCache`] (hardlinked).
    Blob(Digest),
    /// A file on this machine (copied): in local mode, the workspace file itself.
    File(PathBuf),
}

/// One declared input.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RootInput {
    /// Workspace-relative, clean (`is_clean_relative`).
    pub path: String,
    /// Where the bytes come from; ignored for a symlink.
    pub source: RootSource,
    /// Whether the file is executable.
    pub exec: bool,
    /// For a symlink input, its target (relative, staying inside the root).
    pub symlink: Option<String>,
}

/// An installed tree to mount in a root.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RootTree {
    /// Its workspace-relative path (clean).
    pub path: String,
    /// Its directory on this machine (the workspace's own, or the worker's materialised copy).
    pub source: PathBuf,
}

/// What goes into an exec root.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ExecRootSpec {
    /// The declared inputs.
    pub inputs: Vec<RootInput>,
    /// The installed trees the task's key folds.
    pub trees: Vec<RootTree>,
    /// Whether a sandbox runs the task in this root (`true`): it mounts the trees (the root
    /// leaves empty mount points) and binds everything but the output directories
    /// read-only, so a blob input can be a hardlink into the cache. Without one (`false`)
    /// the root mirrors the trees with symlinks and every blob input is a copy: the task
    /// can write anywhere in the root (as root, or after a `chmod` of a file it owns), and
    /// writing through a hardlink would change the cached blob under its digest — every
    /// later root on this worker would hold those bytes.
    pub sandboxed: bool,
    /// Packed upstream artifacts (`tar.zst` files) to unpack into the root.
    pub artifacts: Vec<PathBuf>,
    /// The task's project directory, workspace-relative (`""` for the workspace root).
    pub project_dir: String,
    /// The task's output globs as written (project-relative, or `//` workspace-relative).
    pub outputs: Vec<String>,
    /// Entries shown by name only (`TaskSpec::stand_ins`: in the task's project directory or
    /// an upstream's): made where nothing else stands, a directory empty, a file as
    /// `stand_in_files` says.
    pub stand_ins: Vec<prova_protocol::spec::StandIn>,
    /// What a file among `stand_ins` is.
    pub stand_in_files: StandInFiles,
    /// An existing ancestor of the root's parent up to which the parents the root leaves
    /// empty are removed with it (a parent on a shared tmpfs: this user's directory, the
    /// worker's, the kind of root). Making and pruning such a chain hold an `flock` on this directory,
    /// so no root is made in a parent another's removal is pruning.
    pub prune_to: Option<PathBuf>,
}

/// What an exec root shows for a file its task's key folds by name only
/// ([`ExecRootSpec::stand_ins`]). Either lists by its name and answers an existence probe,
/// as the workspace's file does; they differ in what a read of the bytes gets.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum StandInFiles {
    /// An empty read-only regular file: lists and stats as a file, and a read gets nothing.
    /// Only for a root whose reads are traced (a read of one is named) or whose outputs are
    /// compared and never saved (a determinism re-run).
    #[default]
    Empty,
    /// A socket node (`mknod`, bound to nothing): every open of it fails (`ENXIO`), as root
    /// or not, under bubblewrap or not, so no read of bytes the root was not given can
    /// succeed unseen. Its kind is a socket's (`test -f` is false). For a plain root, whose
    /// outputs are saved and whose reads nobody sees.
    Sealed,
}

/// Why an exec root could not be built. Whatever was built is removed.
#[derive(Debug, thiserror::Error)]
pub enum ExecRootError {
    /// A file system operation failed.
    #[error("{}: {source}", path.display())]
    Io {
        /// The path operated on.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// An input path or the project directory is not a clean workspace-relative path.
    #[error("`{path}` is not a clean workspace-relative path")]
    UncleanPath {
        /// The path as given.
        path: String,
    },
    /// The same input path twice.
    #[error("input `{path}` is declared twice")]
    DuplicatePath {
        /// The path.
        path: String,
    },
    /// A symlink input whose target is absolute or leads outside the root.
    #[error("symlink input `{path}` -> `{target}` leads outside the workspace")]
    LinkEscapes {
        /// The link.
        path: String,
        /// Its target.
        target: String,
    },
    /// A blob input that the blob cache does not hold.
    #[error("input `{path}` needs blob {digest}, which this worker does not hold")]
    MissingBlob {
        /// The input path.
        path: String,
        /// The blob.
        digest: Digest,
    },
    /// Two things claim one path (an input and an upstream output with different content,
    /// two upstream outputs, a file where a directory is needed, a symlink on the way).
    #[error("`{path}`: {reason}")]
    Conflict {
        /// The workspace-relative path.
        path: String,
        /// What collides.
        reason: String,
    },
    /// An upstream artifact could not be unpacked or placed.
    #[error("upstream artifact {}: {source}", artifact.display())]
    Artifact {
        /// The artifact file.
        artifact: PathBuf,
        /// Why.
        #[source]
        source: ArtifactError,
    },
    /// The output globs do not compile or leave the workspace.
    #[error("outputs: {0}")]
    Outputs(#[from] GlobError),
    /// The blob cache failed (making an executable twin).
    #[error(transparent)]
    Blob(#[from] BlobCacheError),
}

fn io_err(path: impl Into<PathBuf>) -> impl FnOnce(io::Error) -> ExecRootError {
    let path = path.into();
    move |source| ExecRootError::Io { path, source }
}

fn conflict(path: &str, reason: impl Into<String>) -> ExecRootError {
    ExecRootError::Conflict { path: path.to_owned(), reason: reason.into() }
}

/// Longest name-hint part of an exec root's directory name.
const MAX_HINT_LEN: usize = 64;

/// Makes exec root names unique within the process.
static SEQ: AtomicU64 = AtomicU64::new(0);

/// A materialised exec root. Removed (best effort) when dropped; keeps its blobs pinned in the
/// cache while it lives.
#[derive(Debug)]
pub struct ExecRoot {
    path: PathBuf,
    cwd: PathBuf,
    writable: Vec<PathBuf>,
    readonly: Vec<PathBuf>,
    tree_mounts: Vec<(PathBuf, PathBuf)>,
    trees: Vec<RootTree>,
    layout: OutputLayout,
    outputs: PathGlobs,
    /// An ancestor up to which the parents emptied by this root's removal are removed too.
    prune_to: Option<PathBuf>,
    /// The stand-in files made (root-relative): a traced run that finds one is reported.
    stand_in_files: std::collections::BTreeSet<String>,
    _pins: PinGuard,
}

impl ExecRoot {
    /// Builds the root for `spec` in a new directory under `parent` (created if missing; a
    /// determinism re-run passes a different parent, so the task sees a different path). The
    /// directory is named from `name_hint` (e.g. the task id, sanitised) plus a unique suffix.
    pub fn create(
        parent: &Path,
        name_hint: &str,
        spec: &ExecRootSpec,
        blobs: &BlobCache,
    ) -> Result<ExecRoot, ExecRootError> {
        if !spec.project_dir.is_empty() && !is_clean_relative(&spec.project_dir) {
            return Err(ExecRootError::UncleanPath { path: spec.project_dir.clone() });
        }
        let mut seen = HashSet::new();
        for input in &spec.inputs {
            if !is_clean_relative(&input.path) {
                return Err(ExecRootError::UncleanPath { path: input.path.clone() });
            }
            if !seen.insert(input.path.as_str()) {
                return Err(ExecRootError::DuplicatePath { path: input.path.clone() });
            }
        }
        let layout = OutputLayout::new(&spec.project_dir, &spec.outputs)?;
        let blob_digests: Vec<Digest> = spec
            .inputs
            .iter()
            .filter(|i| i.symlink.is_none())
            .filter_map(|i| match &i.source {
                RootSource::Blob(d) => Some(*d),
                RootSource::File(_) => None,
            })
            .collect();
        let pins = blobs.pin(&blob_digests);

        let path = match &spec.prune_to {
            Some(top) => {
                let _chain = ChainLock::take(top)?;
                make_root_dir(parent, name_hint)?
            }
            None => make_root_dir(parent, name_hint)?,
        };
        let rel_path = |rel: &str| if rel.is_empty() { path.clone() } else { path.join(rel) };
        for t in &spec.trees {
            if !is_clean_relative(&t.path) {
                return Err(ExecRootError::UncleanPath { path: t.path.clone() });
            }
            if let Some(i) = spec.inputs.iter().find(|i| is_within(&i.path, &t.path)) {
                return Err(conflict(
                    &i.path,
                    format!("an input inside installed tree `{}`", t.path),
                ));
            }
        }
        let mut root = ExecRoot {
            cwd: rel_path(&spec.project_dir),
            writable: layout.binds().iter().map(|w| rel_path(w)).collect(),
            readonly: Vec::new(),
            tree_mounts: if spec.sandboxed {
                spec.trees.iter().map(|t| (t.source.clone(), rel_path(&t.path))).collect()
            } else {
                Vec::new()
            },
            trees: spec.trees.clone(),
            layout: layout.clone(),
            outputs: PathGlobs::new(&spec.project_dir, &spec.outputs)?,
            path: path.clone(),
            prune_to: spec.prune_to.clone(),
            stand_in_files: Default::default(),
            _pins: pins,
        };
        // From here on, an error drops `root`, which removes the directory.
        let mut b = Builder { root: &path, dirs: HashSet::new(), placed: BTreeMap::new() };
        // Staging beside the root, in its canonical parent.
        let parent = path.parent().unwrap_or(parent);
        for (i, art) in spec.artifacts.iter().enumerate() {
            b.artifact(parent, i, art)?;
        }
        for input in spec.inputs.iter().filter(|i| i.symlink.is_none()) {
            b.file(input, !spec.sandboxed || layout.writable(&input.path), blobs)?;
        }
        b.symlinks(&spec.inputs)?;
        for t in &spec.trees {
            if b.placed.keys().any(|p| is_within(p, &t.path)) {
                return Err(conflict(&t.path, "an upstream output inside an installed tree"));
            }
            b.dir(&t.path)?;
            if !spec.sandboxed {
                b.mirror(&t.path, &t.source, true)?;
            }
        }
        for w in layout.dirs() {
            b.dir(&w)?;
        }
        b.dir(&spec.project_dir)?;
        root.stand_in_files = b.stand_ins(&spec.stand_ins, spec.stand_in_files)?;
        // In each open directory, everything but the outputs is bound read-only again.
        let trees: Vec<String> = spec.trees.iter().map(|t| t.path.clone()).collect();
        for o in &layout.open {
            let dir = rel_path(o);
            for e in fs::read_dir(&dir).map_err(io_err(&dir))? {
                let e = e.map_err(io_err(&dir))?;
                let Some(name) = e.file_name().to_str().map(str::to_owned) else { continue };
                let rel = if o.is_empty() { name } else { format!("{o}/{name}") };
                if layout.readonly_entry(&rel, &trees) {
                    root.readonly.push(rel_path(&rel));
                }
            }
        }
        root.readonly.sort();
        Ok(root)
    }

    /// The root directory (the workspace root inside the sandbox, at this same path).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The stand-in files this root shows (root-relative; [`ExecRootSpec::stand_ins`]).
    pub fn stand_in_files(&self) -> &std::collections::BTreeSet<String> {
        &self.stand_in_files
    }

    /// The task's working directory: `path()/project_dir`.
    pub fn cwd(&self) -> PathBuf {
        self.cwd.clone()
    }

    /// The installed trees the sandbox mounts read-only: (the tree's directory on this
    /// machine, its mount point in the root). Empty when the root mirrors them instead.
    pub fn tree_mounts(&self) -> Vec<(PathBuf, PathBuf)> {
        self.tree_mounts.clone()
    }

    /// The installed trees in the root (mounted or mirrored), with their directories here.
    pub fn trees(&self) -> &[RootTree] {
        &self.trees
    }

    /// The directories to bind-mount writable ([`OutputLayout::binds`]): each directory
    /// holding an output, or a glob root holding the task's own directory. Each exists and
    /// is a real directory.
    pub fn writable_dirs(&self) -> Vec<PathBuf> {
        self.writable.clone()
    }

    /// The entries of the writable directories that are not outputs, to bind read-only
    /// again over them ([`OutputLayout::readonly_entry`]), sorted.
    pub fn readonly_entries(&self) -> Vec<PathBuf> {
        self.readonly.clone()
    }

    /// The check of what a task writes here outside its declared outputs
    /// ([`strays`]): survey before it runs, compare after. `sandboxed`: the task runs under
    /// [`Self::sandbox`], which lets it write only in the writable directories, not in
    /// their read-only entries; else it could write anywhere in the root.
    pub fn stray_check(&self, sandboxed: bool) -> StrayCheck {
        let rel = |p: &Path| p.strip_prefix(&self.path).ok()?.to_str().map(str::to_owned);
        let trees = self.trees.iter().map(|t| t.path.clone());
        let (tops, skip) = if sandboxed {
            let readonly = self.readonly.iter().filter_map(|p| rel(p));
            (self.layout.binds(), readonly.chain(trees).collect())
        } else {
            (vec![String::new()], trees.collect())
        };
        StrayCheck::new(self.path.clone(), tops, self.layout.clone(), skip, self.outputs.clone())
    }

    /// The sandbox of a task in this root: the root read-only, the output arrangement, the
    /// installed trees; no network, the caller's hostname and ids.
    pub fn sandbox(&self) -> crate::sandbox::SandboxConfig {
        let mut cfg = crate::sandbox::SandboxConfig::new(&self.path, self.cwd());
        cfg.writable = self.writable_dirs();
        cfg.readonly = self.readonly_entries();
        cfg.trees = self.tree_mounts();
        cfg
    }
}

impl Drop for ExecRoot {
    fn drop(&mut self) {
        if let Err(e) = remove_tree(&self.path) {
            tracing::warn!(path = %self.path.display(), error = %e, "could not remove an exec root");
            return;
        }
        let Some(top) = &self.prune_to else { return };
        let Ok(_chain) = ChainLock::take(top) else { return };
        let mut dir = self.path.parent();
        while let Some(d) = dir.filter(|d| *d != top.as_path() && d.starts_with(top)) {
            // Only an empty directory goes: one another root still uses stays, and so does
            // every ancestor above it.
            if fs::remove_dir(d).is_err() {
                break;
            }
            dir = d.parent();
        }
    }
}

/// What an upstream artifact put at a path.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Placed {
    File(Option<Digest>),
    Symlink(String),
    Dir,
}

struct Builder<'a> {
    root: &'a Path,
    /// Workspace-relative directories known to be real directories.
    dirs: HashSet<String>,
    /// What the upstream artifacts placed, by path.
    placed: BTreeMap<String, Placed>,
}

impl Builder<'_> {
    fn abs(&self, rel: &str) -> PathBuf {
        if rel.is_empty() { self.root.to_owned() } else { self.root.join(rel) }
    }

    /// Makes each stand-in where nothing stands yet (in the task's project directory, or an
    /// upstream's whose entry names its key folds): an empty directory, or a file of `kind`.
    /// Returns the files made.
    fn stand_ins(
        &mut self,
        stand_ins: &[prova_protocol::spec::StandIn],
        kind: StandInFiles,
    ) -> Result<std::collections::BTreeSet<String>, ExecRootError> {
        let mut files = std::collections::BTreeSet::new();
        for s in stand_ins {
            if !is_clean_relative(&s.path) {
                return Err(ExecRootError::UncleanPath { path: s.path.clone() });
            }
            // Its directory first, made as any other: never through a link an artifact placed.
            self.parent_dir(&s.path)?;
            let abs = self.abs(&s.path);
            if fs::symlink_metadata(&abs).is_ok() {
                continue;
            }
            if s.dir {
                self.dir(&s.path)?;
                continue;
            }
            match kind {
                StandInFiles::Empty => {
                    fs::OpenOptions::new()
                        .write(true)
                        .create_new(true)
                        .mode(0o444)
                        .open(&abs)
                        .map_err(io_err(&abs))?;
                }
                // A socket node needs no privilege (mknod(2)), and no path length limit
                // applies as it would to a bound socket's address.
                StandInFiles::Sealed => {
                    use nix::sys::stat::{Mode, SFlag, mknod};
                    mknod(&abs, SFlag::S_IFSOCK, Mode::from_bits_truncate(0o444), 0)
                        .map_err(|e| io_err(&abs)(io::Error::from(e)))?;
                }
            }
            files.insert(s.path.clone());
        }
        Ok(files)
    }

    /// Makes `rel` and its ancestors real directories, never following a symlink.
    fn dir(&mut self, rel: &str) -> Result<(), ExecRootError> {
        if rel.is_empty() || self.dirs.contains(rel) {
            return Ok(());
        }
        let prefixes = rel.match_indices('/').map(|(i, _)| &rel[..i]).chain([rel]);
        for prefix in prefixes {
            if self.dirs.contains(prefix) {
                continue;
            }
            let abs = self.abs(prefix);
            match fs::symlink_metadata(&abs) {
                Ok(m) if m.is_dir() => {}
                Ok(m) => {
                    let what = if m.file_type().is_symlink() { "a symlink" } else { "a file" };
                    return Err(conflict(prefix, format!("{what} stands where a directory must")));
                }
                Err(e) if e.kind() == ErrorKind::NotFound => {
                    fs::DirBuilder::new().mode(0o755).create(&abs).map_err(io_err(&abs))?;
                }
                Err(e) => return Err(io_err(abs)(e)),
            }
            self.dirs.insert(prefix.to_owned());
        }
        Ok(())
    }

    /// Fills the directory `rel` with symlinks to the entries of `src` (a tree without a
    /// sandbox to mount it): absolute links to each entry, except the tree's own symlinks,
    /// recreated as written when they stay inside the root (else left out), and — at the
    /// top (`scopes`) — `@scope` directories, mirrored one level down.
    fn mirror(&mut self, rel: &str, src: &Path, scopes: bool) -> Result<(), ExecRootError> {
        for e in fs::read_dir(src).map_err(io_err(src))? {
            let e = e.map_err(io_err(src))?;
            let Some(name) = e.file_name().to_str().map(str::to_owned) else { continue };
            let dest_rel = format!("{rel}/{name}");
            let dest = self.abs(&dest_rel);
            let ft = e.file_type().map_err(io_err(e.path()))?;
            if ft.is_symlink() {
                let target = fs::read_link(e.path()).map_err(io_err(e.path()))?;
                let Some(t) = target.to_str() else { continue };
                if t.starts_with('/') || prova_protocol::tree::link_stays_inside(rel, &name, t) {
                    std::os::unix::fs::symlink(t, &dest).map_err(io_err(&dest))?;
                }
            } else if ft.is_dir() && scopes && name.starts_with('@') {
                self.dir(&dest_rel)?;
                self.mirror(&dest_rel, &e.path(), false)?;
            } else {
                std::os::unix::fs::symlink(e.path(), &dest).map_err(io_err(&dest))?;
            }
        }
        Ok(())
    }

    fn parent_dir(&mut self, rel: &str) -> Result<(), ExecRootError> {
        match rel.rsplit_once('/') {
            Some((parent, _)) => self.dir(parent),
            None => Ok(()),
        }
    }

    /// Unpacks artifact number `i` beside the root and places it in.
    fn artifact(&mut self, parent: &Path, i: usize, art: &Path) -> Result<(), ExecRootError> {
        let wrap = |source| ExecRootError::Artifact { artifact: art.to_owned(), source };
        let root_name = self.root.file_name().map(|n| n.to_string_lossy().into_owned());
        let staging = parent.join(format!(".{}.unpack-{i}", root_name.unwrap_or_default()));
        fs::create_dir(&staging).map_err(io_err(&staging))?;
        let staging = TempDir(staging);
        let file = File::open(art).map_err(io_err(art))?;
        // `""`: the whole workspace — upstream outputs may be anywhere their tasks declared.
        let limits = UnpackLimits::new(vec![String::new()]);
        let unpacked =
            artifact::unpack(io::BufReader::new(file), &staging.0, &limits).map_err(wrap)?;
        let mut entries = Vec::with_capacity(unpacked.len());
        for u in unpacked {
            let placed = match u.kind {
                EntryKind::File => Placed::File(u.digest),
                EntryKind::Symlink => Placed::Symlink(u.link_target.clone().unwrap_or_default()),
                EntryKind::Dir => Placed::Dir,
            };
            match self.placed.get(&u.path) {
                None => {}
                Some(prev) if *prev == placed => {}
                Some(_) => return Err(conflict(&u.path, "two upstream outputs differ here")),
            }
            self.placed.insert(u.path.clone(), placed);
            entries.push(ManifestEntry {
                path: u.path,
                kind: u.kind,
                // The host side keeps writing into placed directories (inputs, output dirs)
                // and must remove them later; the sandbox mounts them read-only anyway.
                mode: if u.kind == EntryKind::Dir { u.mode | 0o700 } else { u.mode },
                size: u.size,
                digest: u.digest,
                mtime_ns: FIXED_MTIME_SECS * 1_000_000_000,
                link_target: u.link_target,
            });
        }
        // `place` replaces symlinks on its way rather than following them; the root holds
        // only what earlier artifacts placed, all checked against each other above.
        artifact::place(&staging.0, self.root, &OutputManifest::new(entries)).map_err(wrap)?;
        Ok(())
    }

    /// Materialises one file input.
    fn file(
        &mut self,
        input: &RootInput,
        under_writable: bool,
        blobs: &BlobCache,
    ) -> Result<(), ExecRootError> {
        let rel = input.path.as_str();
        if let Some(placed) = self.placed.get(rel) {
            // An upstream output is already here: fine if it is the same content.
            let want = match &input.source {
                RootSource::Blob(d) => *d,
                RootSource::File(p) => Digest::of_file(p).map_err(io_err(p))?,
            };
            return match placed {
                Placed::File(Some(d)) if *d == want => Ok(()),
                _ => Err(conflict(rel, "the input and an upstream output differ")),
            };
        }
        self.parent_dir(rel)?;
        let dest = self.abs(rel);
        let copy_mode = if input.exec { 0o755 } else { 0o644 };
        match &input.source {
            RootSource::File(src) => copy_file(src, &dest, copy_mode),
            RootSource::Blob(d) => {
                let src = blobs.try_path(d, input.exec)?.ok_or_else(|| {
                    ExecRootError::MissingBlob { path: rel.to_owned(), digest: *d }
                })?;
                if under_writable {
                    // A task may write here: a hardlink would let it write into the cache.
                    return copy_file(&src, &dest, copy_mode);
                }
                match fs::hard_link(&src, &dest) {
                    Ok(()) => Ok(()),
                    // The cache is on another file system than the exec roots (a re-run's
                    // root on a tmpfs): a copy, with the mode the link would have had — a
                    // task that copies its inputs (`cp`) keeps their mode, and a writable
                    // copy here beside a read-only link there made a deterministic task
                    // "nondeterministic" (mode 0444 → 0600).
                    Err(e) if e.raw_os_error() == Some(libc::EXDEV) => {
                        let linked_mode = if input.exec { EXEC_BLOB_MODE } else { BLOB_MODE };
                        copy_file(&src, &dest, linked_mode)
                    }
                    Err(e) => Err(io_err(dest)(e)),
                }
            }
        }
    }

    /// Creates the symlink inputs, after checking every target stays inside the root (also
    /// through the other links, upstream ones included).
    fn symlinks(&mut self, inputs: &[RootInput]) -> Result<(), ExecRootError> {
        let mut links: HashMap<String, String> = self
            .placed
            .iter()
            .filter_map(|(p, k)| match k {
                Placed::Symlink(t) => Some((p.clone(), t.clone())),
                _ => None,
            })
            .collect();
        let wanted: Vec<(&str, &str)> = inputs
            .iter()
            .filter_map(|i| i.symlink.as_deref().map(|t| (i.path.as_str(), t)))
            .collect();
        for (path, target) in &wanted {
            links.insert((*path).to_owned(), (*target).to_owned());
        }
        for (path, target) in wanted {
            if resolve_link(path, target, &links).is_none() {
                return Err(ExecRootError::LinkEscapes {
                    path: path.to_owned(),
                    target: target.to_owned(),
                });
            }
            match self.placed.get(path) {
                Some(Placed::Symlink(t)) if t == target => continue,
                Some(_) => return Err(conflict(path, "the input and an upstream output differ")),
                None => {}
            }
            self.parent_dir(path)?;
            let dest = self.abs(path);
            std::os::unix::fs::symlink(target, &dest).map_err(|e| {
                if e.kind() == ErrorKind::AlreadyExists {
                    conflict(path, "a symlink input where another input is")
                } else {
                    ExecRootError::Io { path: dest.clone(), source: e }
                }
            })?;
            let mtime = TimeSpec::new(FIXED_MTIME_SECS, 0);
            set_times_nofollow(&dest, TimeSpec::UTIME_OMIT, mtime).map_err(io_err(&dest))?;
        }
        Ok(())
    }
}

/// Copies `src` to the new file `dest` (never following a link at `dest`) with `mode` and the
/// fixed mtime.
fn copy_file(src: &Path, dest: &Path, mode: u32) -> Result<(), ExecRootError> {
    let mut from = File::open(src).map_err(io_err(src))?;
    let mut to = File::options()
        .write(true)
        .create_new(true)
        .mode(mode)
        .custom_flags(libc::O_NOFOLLOW)
        .open(dest)
        .map_err(|e| {
            if e.kind() == ErrorKind::AlreadyExists {
                conflict(&dest.to_string_lossy(), "already exists")
            } else {
                ExecRootError::Io { path: dest.to_owned(), source: e }
            }
        })?;
    io::copy(&mut from, &mut to).map_err(io_err(dest))?;
    // The creation mode went through the umask; set it exactly.
    to.set_permissions(fs::Permissions::from_mode(mode)).map_err(io_err(dest))?;
    to.set_times(FileTimes::new().set_modified(fixed_mtime())).map_err(io_err(dest))?;
    Ok(())
}

/// Creates `parent/<sanitised hint>-<pid>-<n>`, a name no other root has.
/// Makes `parent` (with its ancestors) and a fresh directory in it, named from `hint`;
/// canonical, so the path the sandbox mounts and the paths a trace reports agree.
fn make_root_dir(parent: &Path, hint: &str) -> Result<PathBuf, ExecRootError> {
    fs::create_dir_all(parent).map_err(io_err(parent))?;
    let parent = parent.canonicalize().map_err(io_err(parent))?;
    create_unique_dir(&parent, hint)
}

/// An exclusive `flock` on the top of a pruned chain ([`ExecRootSpec::prune_to`]), held
/// while a root's parents are made or pruned; released when dropped. Between processes
/// (workers sharing `/dev/shm`) and between threads alike: each take opens its own
/// descriptor.
struct ChainLock {
    _held: File,
}

impl ChainLock {
    fn take(top: &Path) -> Result<Self, ExecRootError> {
        let f = File::open(top).map_err(io_err(top))?;
        f.lock().map_err(io_err(top))?;
        Ok(Self { _held: f })
    }
}

fn create_unique_dir(parent: &Path, hint: &str) -> Result<PathBuf, ExecRootError> {
    let mut name: String = hint
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || matches!(c, '-' | '_') { c } else { '_' })
        .take(MAX_HINT_LEN)
        .collect();
    if name.is_empty() {
        name.push_str("root");
    }
    loop {
        let n = SEQ.fetch_add(1, Ordering::Relaxed);
        let path = parent.join(format!("{name}-{}-{n}", std::process::id()));
        match fs::DirBuilder::new().mode(0o755).create(&path) {
            Ok(()) => return Ok(path),
            // Left over from an earlier process with our pid: take the next number.
            Err(e) if e.kind() == ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(io_err(path)(e)),
        }
    }
}

/// A staging directory removed on drop.
struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        if let Err(e) = remove_tree(&self.0) {
            tracing::debug!(path = %self.0.display(), error = %e, "could not remove a staging dir");
        }
    }
}

/// Removes a tree, first as it is, then again after making every directory in it writable
/// (a task may leave read-only directories among its outputs). Never follows symlinks.
fn remove_tree(path: &Path) -> io::Result<()> {
    match fs::remove_dir_all(path) {
        Ok(()) => return Ok(()),
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(()),
        Err(_) => {}
    }
    make_dirs_writable(path);
    fs::remove_dir_all(path)
}

fn make_dirs_writable(root: &Path) {
    let mut stack = vec![root.to_owned()];
    while let Some(dir) = stack.pop() {
        match fs::symlink_metadata(&dir) {
            Ok(m) if m.is_dir() => {}
            _ => continue,
        }
        let _ = fs::set_permissions(&dir, fs::Permissions::from_mode(0o700));
        if let Ok(entries) = fs::read_dir(&dir) {
            for entry in entries.flatten() {
                if entry.file_type().is_ok_and(|t| t.is_dir()) {
                    stack.push(entry.path());
                }
            }
        }
    }
}

/// How many links one resolution may pass through (Linux's `ELOOP` limit).
const MAX_HOPS: usize = 40;
/// How many components one resolution may process: bounds the work a hostile spec can cause.
const MAX_STEPS: usize = 4096;

/// Resolves the target of the link at `link_path` (workspace-relative) the way the kernel
/// would, through the other links in `links`, to the workspace-relative path it designates
/// (`""` for the root); `None` if it is absolute, climbs above the root, loops or takes too
/// many steps. Resolving lexically alone is not enough: with `a/b/up -> ../..`,
/// `a/b/esc -> up/../x` looks like `a/x` but is `../x`.
fn resolve_link(link_path: &str, target: &str, links: &HashMap<String, String>) -> Option<String> {
    if target.is_empty() || target.starts_with('/') {
        return None;
    }
    // `parts` is the resolved path so far, one component per element.
    let mut parts: Vec<&str> = link_path.split('/').collect();
    parts.pop();
    let mut pending: Vec<&str> = target.split('/').rev().collect();
    let (mut hops, mut steps) = (0, 0);
    while let Some(comp) = pending.pop() {
        steps += 1;
        if steps > MAX_STEPS {
            return None;
        }
        match comp {
            "" | "." => {}
            ".." => {
                parts.pop()?;
            }
            name => {
                parts.push(name);
                if let Some(next) = links.get(&parts.join("/")) {
                    hops += 1;
                    if hops > MAX_HOPS || next.is_empty() || next.starts_with('/') {
                        return None;
                    }
                    // The link is replaced by its target, read from the link's directory.
                    parts.pop();
                    pending.extend(next.split('/').rev());
                }
            }
        }
    }
    Some(parts.join("/"))
}

mod layout;
pub use layout::OutputLayout;
pub mod strays;
pub use strays::StrayCheck;

#[cfg(test)]
mod tests;
