//! A throw-away workspace in a temporary directory.

use std::path::{Path, PathBuf};

use tempfile::TempDir;

use crate::run::ProvaCmd;

/// A workspace in its own temporary directory, removed on drop.
///
/// ```no_run
/// use prova_tests::TempWorkspace;
/// let ws = TempWorkspace::new()
///     .file("prova.toml", "[workspace]\nprojects = [\"a\"]\n[tasks.build]\ncommand = \"true\"\n")
///     .dir("a");
/// ws.prova(["run", "build", "--all"]).run().assert_code(0);
/// ```
#[derive(Debug)]
pub struct TempWorkspace {
    /// Holds the directory alive.
    _dir: TempDir,
    /// Its canonical path (prova canonicalises `-C`; paths it prints match this).
    root: PathBuf,
}

impl Default for TempWorkspace {
    fn default() -> Self {
        Self::new()
    }
}

impl TempWorkspace {
    /// An empty workspace directory under `parent` (`/usr/src`, as a container's
    /// `WORKDIR`); `None` when one cannot be made there (not writable).
    pub fn new_in(parent: &Path) -> Option<Self> {
        let dir = tempfile::Builder::new().prefix("prova-e2e-").tempdir_in(parent).ok()?;
        let root = dir.path().canonicalize().ok()?;
        Some(Self { _dir: dir, root })
    }

    /// An empty workspace directory.
    pub fn new() -> Self {
        let dir = tempfile::Builder::new()
            .prefix("prova-e2e-")
            .tempdir()
            .expect("creating a temporary directory");
        let root = dir.path().canonicalize().expect("canonicalising the temporary directory");
        Self { _dir: dir, root }
    }

    /// A copy of `src` (e.g. `examples/demo`), leaving out any directory whose name is in
    /// `skip` (build products such as `dist`, `gen`, `.prova`). Symlinks are not followed or
    /// copied; permissions are kept.
    pub fn copy_of(src: &Path, skip: &[&str]) -> Self {
        let ws = Self::new();
        copy_tree(src, &ws.root, skip);
        ws
    }

    /// Copies the directory `src` to `rel` inside the workspace, skipping directories named
    /// in `skip`.
    pub fn copy_dir(&self, src: &Path, rel: &str, skip: &[&str]) {
        copy_tree(src, &self.path(rel), skip);
    }

    /// Writes `contents` to `rel` (parents created); builder form of [`Self::write`].
    pub fn file(self, rel: &str, contents: &str) -> Self {
        self.write(rel, contents);
        self
    }

    /// Writes `bytes` to `rel` (parents created): a binary file.
    pub fn bytes(self, rel: &str, bytes: &[u8]) -> Self {
        let path = self.path(rel);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .unwrap_or_else(|e| panic!("creating {}: {e}", parent.display()));
        }
        std::fs::write(&path, bytes).unwrap_or_else(|e| panic!("writing {rel}: {e}"));
        self
    }

    /// Creates directory `rel` (and parents): a project with no files of its own.
    pub fn dir(self, rel: &str) -> Self {
        std::fs::create_dir_all(self.path(rel))
            .unwrap_or_else(|e| panic!("creating {rel} in the workspace: {e}"));
        self
    }

    /// Writes `contents` to `rel`, creating parent directories.
    pub fn write(&self, rel: &str, contents: &str) {
        let path = self.path(rel);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .unwrap_or_else(|e| panic!("creating {}: {e}", parent.display()));
        }
        std::fs::write(&path, contents).unwrap_or_else(|e| panic!("writing {rel}: {e}"));
    }

    /// Creates a FIFO at `rel`: tasks that open it block until the other end is opened, which
    /// makes them meet without sleeping.
    pub fn fifo(&self, rel: &str) {
        nix::unistd::mkfifo(&self.path(rel), nix::sys::stat::Mode::from_bits_truncate(0o600))
            .unwrap_or_else(|e| panic!("mkfifo {rel}: {e}"));
    }

    /// The workspace root (canonical).
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `rel` under the root.
    pub fn path(&self, rel: &str) -> PathBuf {
        self.root.join(rel)
    }

    /// Whether `rel` exists.
    pub fn exists(&self, rel: &str) -> bool {
        self.path(rel).exists()
    }

    /// The contents of `rel`, which must exist.
    pub fn read(&self, rel: &str) -> String {
        std::fs::read_to_string(self.path(rel)).unwrap_or_else(|e| panic!("reading {rel}: {e}"))
    }

    /// `prova -C <root> <args…>`, not started yet.
    pub fn prova<I, S>(&self, args: I) -> ProvaCmd
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        ProvaCmd::new(&self.root, args)
    }
}

fn copy_tree(src: &Path, dst: &Path, skip: &[&str]) {
    std::fs::create_dir_all(dst).unwrap_or_else(|e| panic!("creating {}: {e}", dst.display()));
    let entries =
        std::fs::read_dir(src).unwrap_or_else(|e| panic!("reading {}: {e}", src.display()));
    for entry in entries {
        let entry = entry.unwrap_or_else(|e| panic!("reading {}: {e}", src.display()));
        let name = entry.file_name();
        let kind = entry.file_type().unwrap_or_else(|e| panic!("stat {:?}: {e}", entry.path()));
        let to = dst.join(&name);
        if kind.is_dir() {
            if !skip.iter().any(|s| name == **s) {
                copy_tree(&entry.path(), &to, skip);
            }
        } else if kind.is_file() {
            std::fs::copy(entry.path(), &to)
                .unwrap_or_else(|e| panic!("copying {:?}: {e}", entry.path()));
        }
    }
}
