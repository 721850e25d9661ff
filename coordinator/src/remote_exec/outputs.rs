//! An `ActionResult`'s outputs on this machine: every output file, directory (its `Tree`)
//! and symlink the server reports is first checked to lie within the task's declared output
//! roots, then written under a fresh staging directory laid out like the workspace (files
//! streamed to disk, hash-checked, within [`MAX_OUTPUT_BYTES`] in all; symlinks made last, so
//! nothing is ever written through one). The staged tree is then collected exactly as a local
//! execution's outputs are — only what the output globs select, the confinement check every
//! restore applies, the fingerprint — and packed for the cache.

use std::collections::HashMap;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use prost::Message;
use prova_protocol::Digest;
use prova_protocol::artifact::{self, confine};
use prova_protocol::globs::PathGlobs;
use prova_protocol::work::Outputs;

use super::action::output_in_roots;
use super::rpc;
use crate::layers::reapi::map::sha256;
use crate::layers::reapi::proto::re;
use crate::layers::reapi::{ReapiClient, ReapiError};

/// Most bytes of outputs one execution may bring back.
pub const MAX_OUTPUT_BYTES: u64 = 8 << 30;
/// Most output entries one execution may bring back.
pub const MAX_OUTPUT_ENTRIES: usize = 1 << 20;
/// Largest `Tree` message read.
const MAX_TREE_BYTES: u64 = 64 << 20;

/// Why outputs could not be brought back.
#[derive(Debug, thiserror::Error)]
pub enum OutputsError {
    /// The server reported an output outside the task's declared outputs.
    #[error("the server returned `{0}`, outside the task's declared outputs")]
    Outside(String),
    /// More than the bounds allow.
    #[error("the outputs exceed {0}")]
    TooLarge(String),
    /// A transfer failed.
    #[error(transparent)]
    Reapi(#[from] ReapiError),
    /// A `Tree` is malformed.
    #[error("output directory `{path}`: {reason}")]
    Tree {
        /// Its path.
        path: String,
        /// Why.
        reason: String,
    },
    /// Local I/O.
    #[error("{path}: {source}")]
    Io {
        /// The path.
        path: PathBuf,
        /// What failed.
        source: io::Error,
    },
    /// Collecting or packing the staged outputs failed.
    #[error(transparent)]
    Artifact(#[from] artifact::ArtifactError),
    /// The outputs hold what every restore refuses.
    #[error("{0}; not saved, a restore would refuse it")]
    Unconfined(#[from] confine::ConfineError),
}

struct Stager<'a> {
    c: &'a ReapiClient,
    staging: &'a Path,
    project_dir: &'a str,
    roots: &'a [String],
    bytes: u64,
    entries: usize,
    links: Vec<(String, String)>,
}

impl Stager<'_> {
    fn place(&self, reported: &str) -> Result<String, OutputsError> {
        output_in_roots(self.project_dir, reported, self.roots)
            .ok_or_else(|| OutputsError::Outside(reported.to_owned()))
    }

    fn count(&mut self, bytes: u64) -> Result<(), OutputsError> {
        self.entries += 1;
        self.bytes = self.bytes.saturating_add(bytes);
        if self.entries > MAX_OUTPUT_ENTRIES {
            return Err(OutputsError::TooLarge(format!("{MAX_OUTPUT_ENTRIES} entries")));
        }
        if self.bytes > MAX_OUTPUT_BYTES {
            return Err(OutputsError::TooLarge(format!("{MAX_OUTPUT_BYTES} bytes")));
        }
        Ok(())
    }

    fn mkdirs(&self, rel: &str) -> Result<(), OutputsError> {
        let p = self.staging.join(rel);
        fs::create_dir_all(&p).map_err(|source| OutputsError::Io { path: p, source })
    }

    async fn file(&mut self, ws: &str, d: &re::Digest, exec: bool) -> Result<(), OutputsError> {
        self.count(u64::try_from(d.size_bytes).unwrap_or(u64::MAX))?;
        if let Some((parent, _)) = ws.rsplit_once('/') {
            self.mkdirs(parent)?;
        }
        let left = MAX_OUTPUT_BYTES - self.bytes.min(MAX_OUTPUT_BYTES) + d.size_bytes.max(0) as u64;
        rpc::read_to_file(self.c, d, &self.staging.join(ws), exec, left).await?;
        Ok(())
    }

    async fn tree(&mut self, ws: &str, d: &re::Digest) -> Result<(), OutputsError> {
        let bad =
            |reason: &str| OutputsError::Tree { path: ws.to_owned(), reason: reason.to_owned() };
        let bytes = rpc::read_bytes(self.c, d, MAX_TREE_BYTES).await?;
        let tree = re::Tree::decode(bytes.as_slice()).map_err(|e| bad(&e.to_string()))?;
        let children: HashMap<String, re::Directory> =
            tree.children.into_iter().map(|c| (sha256(&c.encode_to_vec()).hash, c)).collect();
        let root = tree.root.ok_or_else(|| bad("no root"))?;
        self.mkdirs(ws)?;
        // Depth-first, bounded by the entry count (a cycle of digests cannot loop forever).
        let mut stack = vec![(ws.to_owned(), root)];
        while let Some((at, dir)) = stack.pop() {
            for f in dir.files {
                let path = self.child(&at, &f.name)?;
                let digest = f.digest.ok_or_else(|| bad("a file without a digest"))?;
                self.file(&path, &digest, f.is_executable).await?;
            }
            for s in dir.symlinks {
                let path = self.child(&at, &s.name)?;
                self.count(0)?;
                self.links.push((path, s.target));
            }
            for sub in dir.directories {
                let path = self.child(&at, &sub.name)?;
                let digest = sub.digest.ok_or_else(|| bad("a directory without a digest"))?;
                let next = children
                    .get(&digest.hash)
                    .cloned()
                    .ok_or_else(|| bad("a directory missing from its tree"))?;
                self.count(0)?;
                self.mkdirs(&path)?;
                stack.push((path, next));
            }
        }
        Ok(())
    }

    fn child(&self, at: &str, name: &str) -> Result<String, OutputsError> {
        if name.is_empty()
            || name == "."
            || name == ".."
            || name.contains('/')
            || name.contains('\0')
        {
            return Err(OutputsError::Outside(format!("{at}/{name}")));
        }
        Ok(format!("{at}/{name}"))
    }
}

/// Writes `result`'s outputs under `staging` (an empty directory), each checked to lie in
/// `globs`' roots of a task in `project_dir`.
pub async fn stage(
    c: &ReapiClient,
    result: &re::ActionResult,
    globs: &PathGlobs,
    project_dir: &str,
    staging: &Path,
) -> Result<(), OutputsError> {
    let mut s = Stager {
        c,
        staging,
        project_dir,
        roots: globs.roots(),
        bytes: 0,
        entries: 0,
        links: Vec::new(),
    };
    for f in &result.output_files {
        let ws = s.place(&f.path)?;
        let d = f.digest.clone().ok_or_else(|| OutputsError::Outside(f.path.clone()))?;
        s.file(&ws, &d, f.is_executable).await?;
    }
    for d in &result.output_directories {
        let ws = s.place(&d.path)?;
        let t = d.tree_digest.clone().ok_or_else(|| OutputsError::Tree {
            path: d.path.clone(),
            reason: "no tree digest".into(),
        })?;
        s.tree(&ws, &t).await?;
    }
    let links = result
        .output_symlinks
        .iter()
        .chain(&result.output_file_symlinks)
        .chain(&result.output_directory_symlinks);
    let mut seen = std::collections::HashSet::new();
    for l in links {
        if seen.insert(l.path.clone()) {
            let ws = s.place(&l.path)?;
            s.count(0)?;
            s.links.push((ws, l.target.clone()));
        }
    }
    // Symlinks last: nothing above was written through one.
    for (ws, target) in std::mem::take(&mut s.links) {
        if let Some((parent, _)) = ws.rsplit_once('/') {
            s.mkdirs(parent)?;
        }
        let at = staging.join(&ws);
        std::os::unix::fs::symlink(&target, &at)
            .map_err(|source| OutputsError::Io { path: at, source })?;
    }
    Ok(())
}

/// Collects the staged outputs as a local execution's are (the globs' selection, the
/// confinement check, the fingerprint), packs them to `pack_to` when given and there is
/// something to pack, and names the declared literal outputs that are missing (blocking).
pub fn collect(
    staging: &Path,
    globs: &PathGlobs,
    project_dir: &str,
    pack_to: Option<&Path>,
) -> Result<(Outputs, Vec<String>), OutputsError> {
    let manifest = artifact::collect_outputs(staging, globs)?;
    confine::check_manifest_confined(&manifest, globs, project_dir)?;
    let missing = globs
        .literals()
        .iter()
        .filter(|l| !matches!(artifact::nofollow::lstat_beneath(staging, l), Ok(Some(_))))
        .cloned()
        .collect();
    let fingerprint = manifest.fingerprint();
    let artifact = match pack_to {
        Some(path) if !manifest.entries.is_empty() => {
            let packed = pack_file(staging, &manifest, path);
            if packed.is_err() {
                let _ = fs::remove_file(path);
            }
            Some(packed?)
        }
        _ => None,
    };
    Ok((Outputs { manifest, fingerprint, artifact }, missing))
}

/// Packs to `path` ([`artifact::pack_to_file`]); the archive file's own I/O errors stay
/// this module's `Io`.
fn pack_file(
    root: &Path,
    manifest: &prova_protocol::manifest::OutputManifest,
    path: &Path,
) -> Result<(Digest, u64), OutputsError> {
    artifact::pack_to_file(root, manifest, path, 3).map_err(|e| match e {
        artifact::ArtifactError::Io { path: p, source } if p == path => {
            OutputsError::Io { path: p, source }
        }
        e => e.into(),
    })
}
