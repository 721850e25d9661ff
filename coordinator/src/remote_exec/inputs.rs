//! The input root of one execution, read from this machine: the task's declared inputs from
//! the workspace (each checked against the digest its key folded: a file that changed since
//! it was keyed is an error, never an input the key does not describe), the upstream outputs
//! from their artifacts in the local cache (unpacked once per run), and installed trees
//! (`node_modules`) from their manifests in `.prova/trees`. Files are only hashed here
//! (SHA-256, memoised per run by their BLAKE3 digest); their bytes are read again for upload
//! only when the server lacks them.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use prova_protocol::Digest;
use prova_protocol::artifact::{UnpackLimits, unpack};
use prova_protocol::manifest::EntryKind;
use prova_protocol::tree::{TreeKind, TreeManifest};
use prova_protocol::wire::InputRef;
use sha2::{Digest as _, Sha256};

use super::action::Node;
use super::rpc::Source;
use crate::layers::reapi::map::hex;
use crate::layers::reapi::proto::re;

/// Why an input root could not be read.
#[derive(Debug, thiserror::Error)]
pub enum InputError {
    /// Reading a file failed.
    #[error("{path}: {source}")]
    Io {
        /// The path.
        path: PathBuf,
        /// What failed.
        source: std::io::Error,
    },
    /// A declared input's bytes are not the ones its key folded.
    #[error("input `{0}` changed since the run keyed it")]
    Changed(String),
    /// An upstream artifact could not be unpacked.
    #[error("an upstream artifact ({blob}): {reason}")]
    Artifact {
        /// Its short digest.
        blob: String,
        /// Why.
        reason: String,
    },
    /// An installed tree's manifest is missing or invalid.
    #[error("installed tree `{path}`: {reason}")]
    Tree {
        /// Its workspace path.
        path: String,
        /// Why.
        reason: String,
    },
}

/// One file of the root: where it is, its REAPI digest, its execute bit.
#[derive(Clone, Debug)]
struct Hashed {
    digest: re::Digest,
    file: PathBuf,
}

/// Entries read once per run (an upstream artifact's, an installed tree's): path, node, and
/// the file behind a file node.
type Entries = Arc<Vec<(String, Node, Option<PathBuf>)>>;

/// What every execution of a run shares: where things are, and what was hashed or unpacked
/// already.
#[derive(Clone, Debug)]
pub struct Sources {
    workspace: PathBuf,
    blobs: PathBuf,
    unpack_dir: PathBuf,
    sha: Arc<Mutex<HashMap<Digest, re::Digest>>>,
    artifacts: Arc<Mutex<HashMap<Digest, Entries>>>,
    trees: Arc<Mutex<HashMap<Digest, Entries>>>,
}

/// The entries and the blobs behind them.
#[derive(Debug, Default)]
pub struct InputRoot {
    /// Workspace-relative path → node.
    pub entries: BTreeMap<String, Node>,
    /// The file blobs, for upload.
    pub blobs: Vec<(re::Digest, Source)>,
}

impl InputRoot {
    fn add(&mut self, path: String, node: Node, file: Option<PathBuf>) {
        if let (Node::File { digest, .. }, Some(f)) = (&node, file) {
            self.blobs.push((digest.clone(), Source::File(f)));
        }
        self.entries.insert(path, node);
    }
}

impl Sources {
    /// Files from `workspace`, upstream artifacts from the cache's `blobs` directory,
    /// unpacked under `unpack_dir` (removed by the caller at the run's end).
    pub fn new(workspace: PathBuf, blobs: PathBuf, unpack_dir: PathBuf) -> Self {
        Self {
            workspace,
            blobs,
            unpack_dir,
            sha: Default::default(),
            artifacts: Default::default(),
            trees: Default::default(),
        }
    }

    /// The input root of a task with `inputs` and `upstream` artifacts (blocking: call on a
    /// blocking thread).
    pub fn root(
        &self,
        inputs: &[InputRef],
        upstream: &[(Digest, u64)],
    ) -> Result<InputRoot, InputError> {
        let mut root = InputRoot::default();
        for (d, _) in upstream {
            for (path, node, file) in self.artifact(d)?.iter() {
                root.add(path.clone(), node.clone(), file.clone());
            }
        }
        for i in inputs {
            if i.tree {
                for (path, node, file) in self.tree(i)?.iter() {
                    root.add(path.clone(), node.clone(), file.clone());
                }
            } else if let Some(target) = &i.symlink {
                root.add(i.path.clone(), Node::Symlink { target: target.clone() }, None);
            } else {
                let file = self.workspace.join(&i.path);
                let h = self.hash(&file, Some(i.digest), &i.path)?;
                root.add(
                    i.path.clone(),
                    Node::File { digest: h.digest, exec: i.exec },
                    Some(h.file),
                );
            }
        }
        Ok(root)
    }

    /// The workspace the inputs are read from.
    pub fn workspace(&self) -> &Path {
        &self.workspace
    }

    /// The SHA-256 (hex) of the program at `path` whose BLAKE3 the key folds (`blake`):
    /// what a bot's guard compares ([`super::guard`]). A program changed since it was keyed
    /// is an error.
    pub fn program_sha256(&self, path: &str, blake: Digest) -> Result<String, InputError> {
        Ok(self.hash(Path::new(path), Some(blake), path)?.digest.hash)
    }

    /// Hashes `file`, checking it against `blake` when given.
    fn hash(&self, file: &Path, blake: Option<Digest>, rel: &str) -> Result<Hashed, InputError> {
        if let Some(b) = blake
            && let Some(d) = self.sha.lock().ok().and_then(|m| m.get(&b).cloned())
        {
            // Seen this run: the same bytes (a file that changed since is caught by the save's
            // own re-check of the inputs, as for a local execution).
            return Ok(Hashed { digest: d, file: file.to_owned() });
        }
        let bytes = std::fs::read(file)
            .map_err(|source| InputError::Io { path: file.to_owned(), source })?;
        let actual = Digest::of(&bytes);
        if blake.is_some_and(|b| b != actual) {
            return Err(InputError::Changed(rel.to_owned()));
        }
        let digest =
            re::Digest { hash: hex(&Sha256::digest(&bytes)), size_bytes: bytes.len() as i64 };
        if let Ok(mut m) = self.sha.lock() {
            m.insert(actual, digest.clone());
        }
        Ok(Hashed { digest, file: file.to_owned() })
    }

    /// The entries of upstream artifact `d`, unpacked once.
    fn artifact(&self, d: &Digest) -> Result<Entries, InputError> {
        if let Some(e) = self.artifacts.lock().ok().and_then(|m| m.get(d).cloned()) {
            return Ok(e);
        }
        let bad = |reason: String| InputError::Artifact { blob: d.short(), reason };
        let hexd = d.to_hex();
        let blob = self.blobs.join(&hexd[..2]).join(&hexd);
        let dest = self.unpack_dir.join(&hexd);
        // Unpacked into a directory of this call's own, then renamed into place: two tasks
        // with the same upstream may get here at once (the loser's copy is removed).
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let tmp = self.unpack_dir.join(format!("{hexd}.tmp{n}"));
        let _ = std::fs::remove_dir_all(&tmp);
        std::fs::create_dir_all(&tmp).map_err(|e| bad(e.to_string()))?;
        let file =
            std::fs::File::open(&blob).map_err(|e| bad(format!("{}: {e}", blob.display())))?;
        let unpacked =
            unpack(std::io::BufReader::new(file), &tmp, &UnpackLimits::new(vec![String::new()]))
                .map_err(|e| bad(e.to_string()))?;
        let mut out = Vec::new();
        for e in unpacked {
            match e.kind {
                EntryKind::Dir => out.push((e.path, Node::Dir, None)),
                EntryKind::Symlink => {
                    let target = e.link_target.unwrap_or_default();
                    out.push((e.path, Node::Symlink { target }, None));
                }
                EntryKind::File => {
                    let h = self.hash(&tmp.join(&e.path), e.digest, &e.path)?;
                    let exec = e.mode & 0o100 != 0;
                    let file = dest.join(&e.path);
                    out.push((e.path, Node::File { digest: h.digest, exec }, Some(file)));
                }
            }
        }
        if std::fs::rename(&tmp, &dest).is_err() {
            // Another task's copy is in place: the same bytes.
            let _ = std::fs::remove_dir_all(&tmp);
        }
        let out = Arc::new(out);
        if let Ok(mut m) = self.artifacts.lock() {
            m.insert(*d, out.clone());
        }
        Ok(out)
    }

    /// The entries of installed tree `t` (its manifest from `.prova/trees`, its files from
    /// the workspace, each checked against the manifest), read once.
    fn tree(&self, t: &InputRef) -> Result<Entries, InputError> {
        if let Some(e) = self.trees.lock().ok().and_then(|m| m.get(&t.digest).cloned()) {
            return Ok(e);
        }
        let bad = |reason: String| InputError::Tree { path: t.path.clone(), reason };
        let file = self.workspace.join(".prova/trees").join(t.digest.to_hex());
        let len = std::fs::metadata(&file).map_err(|e| bad(e.to_string()))?.len();
        if len > prova_protocol::tree::MAX_MANIFEST_BYTES as u64 {
            return Err(bad(format!("its manifest is {len} bytes")));
        }
        let bytes = std::fs::read(&file).map_err(|e| bad(e.to_string()))?;
        if Digest::of(&bytes) != t.digest {
            return Err(bad("its manifest does not match its digest".into()));
        }
        let m = TreeManifest::decode(&bytes, &t.path).map_err(|e| bad(e.to_string()))?;
        let mut out = vec![(t.path.clone(), Node::Dir, None)];
        for e in m.entries {
            let path = format!("{}/{}", t.path, e.path);
            match e.kind {
                TreeKind::Dir => out.push((path, Node::Dir, None)),
                TreeKind::Symlink { target } => out.push((path, Node::Symlink { target }, None)),
                TreeKind::File { digest, exec } => {
                    let file = self.workspace.join(&path);
                    let h = self.hash(&file, Some(digest), &path)?;
                    out.push((path, Node::File { digest: h.digest, exec }, Some(file)));
                }
            }
        }
        let out = Arc::new(out);
        if let Ok(mut m) = self.trees.lock() {
            m.insert(t.digest, out.clone());
        }
        Ok(out)
    }
}
