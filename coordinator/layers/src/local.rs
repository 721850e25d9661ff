//! The local layer (brief §6): entries in the workspace's (or a shared) cache directory.
//! Lookups are batched through the [`CacheThread`]; restores and the pre-save recheck run on
//! blocking threads so no async worker waits on the disk.

use std::collections::{HashMap, HashSet};
use std::fs;
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use prova_protocol::Digest;
use prova_protocol::artifact::confine::{check_manifest_confined, unpack_confine};
use prova_protocol::artifact::{self, ArtifactError, UnpackLimits, nofollow};
use prova_protocol::globs::PathGlobs;
use prova_protocol::manifest::{EntryKind, OutputManifest};
use prova_protocol::task::OwnedTask;

use super::LayerError;
use prova_protocol::events::FileDivergence;

use crate::cache::{CacheThread, Entry, Execution, MemoRow, NewEntry};
use crate::inputs::InputScope;
use crate::keys::{KeyComponents, Stamp, binaries, digests};
use prova_analysis::trees::{Keyed, TreeGuard};
use prova_protocol::spec::ProgramCheck;

/// Entries used within this long are not marked again: back-to-back warm runs then leave
/// the index unwritten ([`crate::cache::Store::touch_coarse`]).
const TOUCH_RESOLUTION_MS: i64 = 60_000;

/// The keys of `used` whose entries were last marked at least [`TOUCH_RESOLUTION_MS`]
/// before `now_ms`: the ones [`crate::cache::Store::touch_coarse`] would mark.
fn stale_keys(used: Vec<(Digest, i64)>, now_ms: i64) -> Vec<Digest> {
    let older_than = now_ms.saturating_sub(TOUCH_RESOLUTION_MS);
    used.into_iter().filter(|&(_, last)| last <= older_than).map(|(k, _)| k).collect()
}

/// The first of `checks` (a key's programs) that is no longer as keyed.
fn programs_changed<'a>(
    rechecked: &binaries::Rechecked,
    checks: &'a [ProgramCheck],
    cache: &CacheThread,
) -> Option<&'a ProgramCheck> {
    if checks.is_empty() {
        return None;
    }
    let mut memo = |path: &str| {
        let names = vec![path.to_owned()];
        let rows = cache.call_blocking(move |s| s.memo_get(binaries::SCOPE, &names));
        rows.ok().and_then(Result::ok).and_then(|mut r| r.remove(path))
    };
    rechecked.changed(checks, &mut memo)
}

/// Why an entry whose key folds `keyed` must be withheld, if one of those trees changed
/// while the task ran.
fn trees_changed(
    guard: &TreeGuard,
    keyed: &[Keyed],
    cache: &CacheThread,
    root: &Path,
) -> Option<String> {
    let scope = prova_analysis::trees::memo_scope(root);
    match guard.changed(keyed, &mut || tree_memo_rows(cache, &scope)) {
        Ok(None) => None,
        Ok(Some(tree)) => Some(format!("installed tree `{tree}` changed while the task ran")),
        Err(e) => Some(format!("its installed trees could not be checked again: {e}")),
    }
}

/// The installed trees' memo rows in `scope` (`trees::memo_scope` of the workspace), loaded
/// from `cache` on the calling thread: what a [`TreeGuard`] asks for when it must hash a
/// tree. Empty when they cannot be read (every file is then hashed).
pub fn tree_memo_rows(cache: &CacheThread, scope: &str) -> HashMap<String, MemoRow> {
    let scope = scope.to_owned();
    cache.call_blocking(move |s| s.memo_load(&scope)).ok().and_then(Result::ok).unwrap_or_default()
}

/// Largest log kept in an entry (compressed on disk); matches the executor's capture bound.
pub const MAX_LOG_BYTES: u64 = 8 * 1024 * 1024;

/// A cache layer backed by a local cache directory.
#[derive(Clone, Debug)]
pub struct LocalLayer {
    cache: CacheThread,
    namespace: String,
    /// The workspace root outputs are restored into.
    root: PathBuf,
    /// Staging for restores, beside the outputs (same file system, so renames are atomic).
    staging: PathBuf,
    /// Each task's input rules, by task id: before a save its inputs are listed again, and a
    /// file that became an input while it ran withholds the entry.
    scopes: Option<Arc<HashMap<String, InputScope>>>,
    /// The files no restore of a task may remove or overwrite, by task id (issue 27).
    protected: Arc<crate::inputs::protect::Protected>,
    /// The installed trees, held to the digests each task's key folds until its save.
    trees: Option<Arc<TreeGuard>>,
    /// The programs saves found as keyed (`binary:` pairs).
    programs: Arc<binaries::Rechecked>,
}

/// What a restore did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Restored {
    /// Files written.
    pub placed: u64,
    /// Files already current (left untouched).
    pub current: u64,
    /// The stored log.
    pub log: Vec<u8>,
}

/// What to file after a successful execution.
#[derive(Debug)]
pub struct SaveRequest {
    /// `project#task`.
    pub task: String,
    /// Its key.
    pub key: Digest,
    /// Its components.
    pub components: KeyComponents,
    /// The outputs as collected by the worker.
    pub manifest: OutputManifest,
    /// The packed artifact: its digest, and the staged file in the cache's `tmp/` when it
    /// still has to be filed (digest computed while writing); `None` when already stored.
    pub artifact: Option<(Digest, Option<PathBuf>)>,
    /// The combined log.
    pub log: Vec<u8>,
    /// How long it ran.
    pub duration_ms: u64,
    /// Input stamps at key time: any change since means the key no longer holds.
    pub stamps: Vec<(String, Stamp)>,
    /// Where the command's program lookups found nothing executable at key time
    /// (`binaries::Programs::shadows`): one there now is what the command started.
    pub shadows: Vec<PathBuf>,
}

/// Why an entry was not saved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SaveOutcome {
    /// Filed.
    Saved,
    /// Withheld; the reason, for the status line.
    Withheld(String),
}

impl LocalLayer {
    /// A layer over `cache` writing to and reading from `namespace`, restoring into `root`.
    pub fn new(cache: CacheThread, namespace: &str, root: &Path) -> Self {
        Self {
            cache,
            namespace: namespace.to_owned(),
            root: root.to_owned(),
            staging: root.join(".prova").join("tmp"),
            scopes: None,
            protected: Arc::default(),
            trees: None,
            programs: Arc::default(),
        }
    }

    /// The layer, refusing any restore that would remove or overwrite one of a task's
    /// protected files (`protected` by task id, from the coordinator's
    /// `prepare::Prepared::protected`): a file git tracks or a task's declared input is never
    /// replaced by a cache entry.
    pub fn with_protected(mut self, protected: Arc<crate::inputs::protect::Protected>) -> Self {
        self.protected = protected;
        self
    }

    /// The layer, rechecking before each save that no input was added to the task while it
    /// ran (`scopes` by task id, from the coordinator's `prepare::Prepared::input_scopes`).
    pub fn with_input_scopes(mut self, scopes: Arc<HashMap<String, InputScope>>) -> Self {
        self.scopes = Some(scopes);
        self
    }

    /// The layer, withholding an entry when an installed tree its key folds changed while
    /// the task ran (`guard` over the workspace at the layer's root).
    pub fn with_tree_guard(mut self, guard: Arc<TreeGuard>) -> Self {
        self.trees = Some(guard);
        self
    }

    /// The namespace it reads and writes.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// The cache thread.
    pub fn cache(&self) -> &CacheThread {
        &self.cache
    }

    /// The entries present for `keys`, in one batched lookup.
    pub async fn probe(&self, keys: Vec<Digest>) -> Result<HashMap<Digest, Entry>, LayerError> {
        let ns = self.namespace.clone();
        Ok(self.cache.call(move |s| s.get_entries(&ns, &keys)).await??)
    }

    /// Restores `entry`'s outputs into the workspace (outputs matching `outputs` that are not
    /// in the entry are removed first) and returns its log. `Ok(None)` is a miss: the blob is
    /// gone or its bytes were wrong (then it is quarantined). The manifest is checked against
    /// the task's declared outputs (`outputs`, of the project at `project_dir`) before
    /// anything is removed or written: an entry that would write elsewhere — a forged row —
    /// is [`LayerError::Refused`]. An I/O error (a full disk) is an error, never taken for
    /// corruption: the blob is left alone.
    pub async fn restore(
        &self,
        entry: Entry,
        outputs: PathGlobs,
        project_dir: String,
    ) -> Result<Option<Restored>, LayerError> {
        let manifest: OutputManifest = rmp_serde::from_slice(&entry.manifest)
            .map_err(|e| LayerError::Corrupt(format!("manifest of {}: {e}", entry.task)))?;
        if let Err(e) = check_manifest_confined(&manifest, &outputs, &project_dir) {
            tracing::warn!(task = %entry.task, "refusing a cache entry: {e}");
            return Err(LayerError::Refused(format!("the entry of {}: {e}", entry.task)));
        }
        let log = match entry.log {
            Some(d) => {
                let got =
                    self.cache.call(move |s| s.read_blob_verified(&d, MAX_LOG_BYTES)).await??;
                let Some(compressed) = got else { return Ok(None) };
                match decompress_bounded(&compressed, MAX_LOG_BYTES) {
                    Ok(l) => l,
                    Err(_) => return Ok(None),
                }
            }
            None => Vec::new(),
        };
        let root = self.root.clone();
        let (current, extras) = {
            let (root, manifest, outputs) = (root.clone(), manifest.clone(), outputs.clone());
            OwnedTask::spawn_blocking("restore.check", self.current_check(root, manifest, outputs))
                .join()
                .await
                .map_err(|e| LayerError::Corrupt(e.to_string()))??
        };
        if current && extras.is_empty() {
            let n = manifest.entries.len() as u64;
            return Ok(Some(Restored { placed: 0, current: n, log }));
        }
        if let Some(hit) = self.overwrites_protected(&entry.task, &manifest, &extras) {
            tracing::warn!(task = %entry.task, "refusing to restore over `{}`", hit.path);
            return Err(LayerError::Refused(format!(
                "restoring {} would replace `{}`, and {}: prova never overwrites a file git \
                 tracks or a task's declared input",
                entry.task, hit.path, hit.why
            )));
        }
        let Some((digest, _)) = entry.artifact else {
            // No artifact: the task has no outputs; only remove stale extras.
            let root2 = root.clone();
            OwnedTask::spawn_blocking("restore.remove", move || remove_paths(&root2, &extras))
                .join()
                .await
                .map_err(|e| LayerError::Corrupt(e.to_string()))??;
            return Ok(Some(Restored { placed: 0, current: 0, log }));
        };
        let opened = self
            .cache
            .call(move |s| s.open_blob(&digest).map(|f| f.map(|f| (f, s.blob_path(&digest)))))
            .await??;
        let Some((file, blob_path)) = opened else {
            return Ok(None);
        };
        let staging = Staging { cache: self.staging.clone(), beside: root.join(&project_dir) };
        // Confined by the task, never by the manifest it is checking.
        let confine = unpack_confine(&outputs, &project_dir);
        let task = entry.task.clone();
        let result =
            OwnedTask::spawn_blocking("restore.place", move || -> Result<Unpacked, LayerError> {
                if let Some((path, kind)) = in_the_way(&root, &manifest, &outputs)? {
                    tracing::warn!(%task, "refusing to restore over `{path}`");
                    return Err(LayerError::Refused(format!(
                        "restoring {task} would replace `{path}` ({kind}), which its outputs do \
                         not select: prova never writes through or removes what a task's \
                         outputs do not select (a run would not clean it either)"
                    )));
                }
                remove_paths(&root, &extras)?;
                let blob = Blob { file, path: blob_path, digest };
                unpack_and_place(blob, &staging, &root, &manifest, confine)
            })
            .join()
            .await
            .map_err(|e| LayerError::Corrupt(e.to_string()))??;
        match result {
            Unpacked::Placed { placed, current } => Ok(Some(Restored { placed, current, log })),
            Unpacked::Corrupt(why) => {
                tracing::warn!(task = %entry.task, blob = %digest, "corrupt artifact: {why}");
                self.cache.call(move |s| s.quarantine(&digest)).await??;
                Ok(None)
            }
        }
    }

    /// The first protected file of `task` a restore would remove (`extras`), write (an entry
    /// of `manifest`, a directory too) or replace with a directory (an ancestor of an entry:
    /// the placing unlinks a file found where it needs one).
    fn overwrites_protected(
        &self,
        task: &str,
        manifest: &OutputManifest,
        extras: &[String],
    ) -> Option<&prova_protocol::work::ProtectedPath> {
        let protected = self.protected.get(task)?;
        let mut touched: HashSet<&str> = extras.iter().map(String::as_str).collect();
        for e in &manifest.entries {
            touched.insert(&e.path);
            touched.extend(prova_protocol::artifact::ancestors(&e.path));
        }
        protected.iter().find(|p| touched.contains(p.path.as_str()))
    }

    /// [`CacheLayer::resolve_current`](super::CacheLayer::resolve_current): one job on the
    /// cache thread for the whole batch — one output-memo read for every manifest's files,
    /// the stats, the logs, one memo write — instead of a restore (and its hops between
    /// threads) per hit. Anything short of "current, extras none, log read" is `None`, left
    /// to [`restore`](Self::restore), which reports it as it always has.
    pub async fn resolve_current(
        &self,
        hits: Vec<super::HitQuery>,
    ) -> Result<Vec<(Entry, Option<Restored>)>, LayerError> {
        let started = std::time::Instant::now();
        let n = hits.len();
        let root = self.root.clone();
        // A few hits (a small workspace's warm run): the manifests and their files' memo rows
        // read, compared with the disk and answered in one job on the cache thread. Each hop
        // between threads is a wake-up, and on a warm no-op of seven packages the three hops
        // below cost more than the comparison itself.
        if n <= COMPARE_CHUNK {
            let out = self
                .cache
                .call(move |s| {
                    let memo = memo_for_hits(s, &root, hits);
                    let on_disk = compare_spread(&root, &memo, 1, COMPARE_CHUNK);
                    current_hits_on(s, &root, (memo, on_disk))
                })
                .await?;
            tracing::debug!(elapsed = ?started.elapsed(), hits = n, "hits compared with the disk");
            return Ok(out);
        }
        // Many: the manifests and their files' memo rows from the index; the comparison with
        // the disk (a walk and a stat per output, a hash where no row proves a file) off the
        // cache thread, spread over the cores; the logs of the current ones from the store.
        let memo = self.cache.call(move |s| memo_for_hits(s, &root, hits)).await?;
        let root = self.root.clone();
        let compared = OwnedTask::spawn_blocking("resolve.compare", move || {
            let on_disk = compare_all(&root, &memo);
            (memo, on_disk)
        })
        .join()
        .await
        .map_err(|e| LayerError::Corrupt(e.to_string()))?;
        let root = self.root.clone();
        let out = self.cache.call(move |s| current_hits_on(s, &root, compared)).await?;
        tracing::debug!(elapsed = ?started.elapsed(), hits = n, "hits compared with the disk");
        Ok(out)
    }

    /// Files an entry, unless an input changed while the task ran (then it is withheld).
    pub async fn save(&self, req: SaveRequest) -> Result<SaveOutcome, LayerError> {
        let ns = self.namespace.clone();
        self.save_to(ns, req).await
    }

    /// [`save`](Self::save) into namespace `ns`.
    pub async fn save_to(
        &self,
        ns: String,
        mut req: SaveRequest,
    ) -> Result<SaveOutcome, LayerError> {
        let root = self.root.clone();
        let stamps = req.stamps;
        let scope = self.scopes.as_ref().and_then(|m| m.get(&req.task)).cloned();
        let known: Vec<String> = req
            .components
            .inputs
            .iter()
            .chain(&req.components.workspace)
            .map(|f| f.path.clone())
            .collect();
        let links: Vec<(String, Digest)> = req
            .components
            .inputs
            .iter()
            .chain(&req.components.workspace)
            .filter(|f| f.kind == prova_protocol::key::InputKind::Symlink)
            .map(|f| (f.path.clone(), f.digest))
            .collect();
        let entries: Option<Vec<String>> = req
            .components
            .entries()
            .map(|(_, names)| names.into_iter().map(str::to_owned).collect());
        let trees =
            self.trees.clone().map(|guard| (guard, Keyed::of_config(&req.components.config)));
        let programs = (self.programs.clone(), binaries::checks(&req.components.config));
        let shadows = std::mem::take(&mut req.shadows);
        let cache = self.cache.clone();
        let withheld = OwnedTask::spawn_blocking("save.withhold-check", move || {
            if let Some(path) =
                digests::first_changed(&root, stamps.iter().map(|(p, s)| (p.as_str(), s)))
            {
                return Some(format!("input `{path}` changed while the task ran"));
            }
            if let Some(c) = programs_changed(&programs.0, &programs.1, &cache) {
                return Some(format!(
                    "program `{}` (`{}`) changed while the task ran",
                    c.word, c.path
                ));
            }
            if let Some(p) = binaries::first_shadow(&shadows) {
                return Some(format!(
                    "program `{}` appeared while the task ran, where its command looks before \
                     what the key folds",
                    p.display()
                ));
            }
            let links = links.iter().map(|(p, d)| (p.as_str(), d));
            if let Some(path) = digests::first_changed_beyond(&root, links) {
                return Some(format!(
                    "what input `{path}` leads to, out of the workspace, changed while the \
                     task ran"
                ));
            }
            if let Some(reason) =
                trees.and_then(|(guard, keyed)| trees_changed(&guard, &keyed, &cache, &root))
            {
                return Some(reason);
            }
            let known: HashSet<&str> = known.iter().map(String::as_str).collect();
            let now = match scope?.recheck(&root, &known) {
                Ok(now) => now,
                Err(e) => return Some(format!("its inputs could not be listed again: {e}")),
            };
            if let Some(path) = now.added {
                return Some(format!("input `{path}` was added while the task ran"));
            }
            // The entry names its key folds (a listing of its project directory).
            match (entries, now.entries) {
                (Some(then), Some(now)) if then != now => Some(format!(
                    "the entries of its project directory changed while it ran ({})",
                    prova_protocol::key::moved_names(&then, &now)
                )),
                _ => None,
            }
        })
        .join()
        .await
        .map_err(|e| LayerError::Corrupt(e.to_string()))?;
        if let Some(reason) = withheld {
            if let Some((_, Some(staged))) = &req.artifact {
                let _ = fs::remove_file(staged);
            }
            return Ok(SaveOutcome::Withheld(reason));
        }
        let manifest = rmp_serde::to_vec_named(&req.manifest)
            .map_err(|e| LayerError::Corrupt(e.to_string()))?;
        let components = rmp_serde::to_vec_named(&req.components)
            .map_err(|e| LayerError::Corrupt(e.to_string()))?;
        let log = if req.log.is_empty() { None } else { Some(encode_log(&req.log)?) };
        let fingerprint = Some(req.manifest.fingerprint());
        let (task, key, duration_ms, artifact) = (req.task, req.key, req.duration_ms, req.artifact);
        self.cache
            .call(move |s| -> Result<(), crate::cache::CacheError> {
                let artifact = match artifact {
                    Some((digest, Some(staged))) => Some(s.put_blob_file(&staged, Some(&digest))?),
                    Some((digest, None)) => {
                        let size = std::fs::metadata(s.blob_path(&digest))
                            .map_err(|_| crate::cache::CacheError::MissingBlob { digest })?
                            .len();
                        Some((digest, size))
                    }
                    None => None,
                };
                let log = match log {
                    Some(bytes) => Some(s.put_blob_bytes(&bytes)?),
                    None => None,
                };
                s.put_entry(&NewEntry {
                    namespace: ns,
                    key,
                    task: task.clone(),
                    artifact,
                    log,
                    manifest,
                    components,
                    fingerprint,
                    duration_ms,
                    created_ms: now_ms(),
                })?;
                s.record_durations(&[(task, duration_ms)])
            })
            .await??;
        Ok(SaveOutcome::Saved)
    }

    /// Marks the keys of `used` as used now (prune's LRU order), each given with the
    /// `last_used_ms` its entry had when the run found it. Those marked within
    /// [`TOUCH_RESOLUTION_MS`] are left alone here already, so back-to-back warm runs do not
    /// even ask the index (a thousand lookups of an `UPDATE` that would change nothing); the
    /// index applies the same rule to what it is asked.
    pub async fn touch(&self, used: Vec<(Digest, i64)>) -> Result<(), LayerError> {
        let now = now_ms();
        let keys = stale_keys(used, now);
        if keys.is_empty() {
            return Ok(());
        }
        let ns = self.namespace.clone();
        Ok(self.cache.call(move |s| s.touch_coarse(&ns, &keys, now, TOUCH_RESOLUTION_MS)).await??)
    }

    /// The cache's `tmp/` directory (where workers stage artifacts).
    pub async fn tmp_dir(&self) -> Result<PathBuf, LayerError> {
        Ok(self.cache.call(|s| s.tmp_dir()).await?)
    }
}

impl super::CacheLayer for LocalLayer {
    fn name(&self) -> &'static str {
        "local"
    }

    fn restore(
        &self,
        entry: Entry,
        outputs: PathGlobs,
        project_dir: String,
    ) -> super::LayerFuture<'_, Option<Restored>> {
        Box::pin(LocalLayer::restore(self, entry, outputs, project_dir))
    }

    fn resolve_current(
        &self,
        hits: Vec<super::HitQuery>,
    ) -> super::LayerFuture<'_, Vec<(Entry, Option<Restored>)>> {
        Box::pin(LocalLayer::resolve_current(self, hits))
    }

    fn save(&self, req: SaveRequest) -> super::LayerFuture<'_, SaveOutcome> {
        Box::pin(LocalLayer::save(self, req))
    }

    fn touch(&self, used: Vec<(Digest, i64)>) -> super::LayerFuture<'_, ()> {
        Box::pin(LocalLayer::touch(self, used))
    }

    fn lookup(&self, keys: Vec<Digest>) -> super::LayerFuture<'_, HashMap<Digest, Entry>> {
        Box::pin(self.probe(keys))
    }

    fn entry(&self, key: Digest) -> super::LayerFuture<'_, Option<Entry>> {
        let ns = self.namespace.clone();
        Box::pin(async move { Ok(self.cache.call(move |s| s.get_entry(&ns, &key)).await??) })
    }

    fn newest_entry(&self, task: String) -> super::LayerFuture<'_, Option<Entry>> {
        let ns = self.namespace.clone();
        Box::pin(async move { Ok(self.cache.call(move |s| s.latest_for_task(&ns, &task)).await??) })
    }

    fn record(&self, e: Execution, staged: Option<PathBuf>) -> super::LayerFuture<'_, ()> {
        Box::pin(async move {
            Ok(self
                .cache
                .call(move |s| -> Result<(), crate::cache::CacheError> {
                    if let (Some(path), Some(d)) = (staged, e.artifact) {
                        s.put_blob_file(&path, Some(&d))?;
                    }
                    s.record_execution(&e)
                })
                .await??)
        })
    }

    fn diff(
        &self,
        first: Digest,
        rerun: Digest,
        changed: Vec<String>,
    ) -> super::LayerFuture<'_, Vec<FileDivergence>> {
        let cache = self.cache.clone();
        let staging = self.staging.clone();
        Box::pin(async move {
            let (a, b) = cache.call(move |s| (s.open_blob(&first), s.open_blob(&rerun))).await?;
            let (Some(a), Some(b)) = (a?, b?) else {
                return Err(LayerError::Corrupt(
                    "an artifact of the comparison is gone".to_owned(),
                ));
            };
            OwnedTask::spawn_blocking("proof.compare", move || {
                super::diff::compare(a, b, &changed, &staging)
            })
            .join()
            .await
            .map_err(|e| LayerError::Corrupt(e.to_string()))?
        })
    }
}

/// Milliseconds since the epoch.
pub fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

impl LocalLayer {
    /// [`compare_on_disk`] as a blocking job over this layer's output memo.
    fn current_check(
        &self,
        root: PathBuf,
        manifest: OutputManifest,
        outputs: PathGlobs,
    ) -> impl FnOnce() -> Result<(bool, Vec<String>), LayerError> + Send + 'static {
        let cache = self.cache.clone();
        move || compare_on_disk(&root, &manifest, &outputs, Some(&cache))
    }
}

/// Whether every manifest entry is on disk as the entry would restore it, and which existing
/// output paths are not in the manifest. Nothing is followed: a symlink on the way to an
/// entry makes it not current (the restore replaces the link), and nothing behind a symlinked
/// directory is reported as an extra (it is not the task's to remove).
///
/// A file is current only when prova can prove its bytes are the entry's: size, mode and
/// mtime equal **and** its content digest equal to the manifest's. The digest comes from the
/// output memo (scope [`digests::outputs_scope`]) when the file's stamps — inode and ctime
/// included — match a row prova recorded outside the racy window
/// ([`digests::row_proves_output`]); otherwise the file is hashed and a row recorded, so a
/// warm no-op run reads each output once and then only stats it. `cache` is `None` in tests
/// that check the rule without a memo (everything is hashed).
fn compare_on_disk(
    root: &Path,
    m: &OutputManifest,
    outputs: &PathGlobs,
    cache: Option<&CacheThread>,
) -> Result<(bool, Vec<String>), LayerError> {
    let scope = digests::outputs_scope(root);
    let rows = match cache {
        Some(c) => {
            let files = manifest_files(m);
            let scope = scope.clone();
            match c.call_blocking(move |s| s.memo_get(&scope, &files)) {
                Ok(Ok(rows)) => rows,
                // No memo: every file is hashed, which is slower but still right.
                Ok(Err(e)) => {
                    tracing::debug!(error = %e, "output memo unreadable");
                    HashMap::new()
                }
                Err(e) => return Err(e.into()),
            }
        }
        None => HashMap::new(),
    };
    let (current, extras, updates) = compare_with_rows(root, m, outputs, &rows)?;
    if let (Some(c), false) = (cache, updates.is_empty()) {
        match c.call_blocking(move |s| s.memo_store(&scope, &updates)) {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::debug!(error = %e, "output memo not written"),
            Err(e) => return Err(e.into()),
        }
    }
    Ok((current, extras))
}

/// The hits of [`LocalLayer::resolve_current`] with their manifests (`None`: undecodable or
/// outside the task's outputs, never current) and the output memo's rows for their files.
struct HitsMemo {
    hits: Vec<super::HitQuery>,
    decoded: Vec<Option<OutputManifest>>,
    rows: HashMap<String, MemoRow>,
}

/// On the cache thread: the manifests decoded and confined, and their files' memo rows.
fn memo_for_hits(s: &mut crate::cache::Store, root: &Path, hits: Vec<super::HitQuery>) -> HitsMemo {
    let decoded: Vec<Option<OutputManifest>> = hits
        .iter()
        .map(|h| {
            let m: OutputManifest = rmp_serde::from_slice(&h.entry.manifest).ok()?;
            // A manifest outside the task's outputs is for `restore` to refuse, loudly.
            check_manifest_confined(&m, &h.outputs, &h.project_dir).ok()?;
            Some(m)
        })
        .collect();
    let scope = digests::outputs_scope(root);
    let files: Vec<String> = decoded.iter().flatten().flat_map(manifest_files).collect();
    let rows = s.memo_get(&scope, &files).unwrap_or_else(|e| {
        tracing::debug!(error = %e, "output memo unreadable");
        HashMap::new()
    });
    HitsMemo { hits, decoded, rows }
}

/// Hits per thread below which one thread compares them all.
const COMPARE_CHUNK: usize = 64;

/// Each hit's manifest compared with the disk ([`compare_with_rows`]), in order, spread over
/// the machine's cores. `None`: no manifest, or the comparison failed (not current).
fn compare_all(root: &Path, memo: &HitsMemo) -> Vec<Option<OnDisk>> {
    let threads = std::thread::available_parallelism().map_or(1, |t| t.get()).clamp(1, 8);
    compare_spread(root, memo, threads, COMPARE_CHUNK)
}

/// [`compare_all`] on at most `threads` threads, each given at least `min_chunk` hits.
fn compare_spread(
    root: &Path,
    memo: &HitsMemo,
    threads: usize,
    min_chunk: usize,
) -> Vec<Option<OnDisk>> {
    let one = |i: usize| {
        let m = memo.decoded[i].as_ref()?;
        compare_with_rows(root, m, &memo.hits[i].outputs, &memo.rows).ok()
    };
    let n = memo.hits.len();
    let chunk = n.div_ceil(threads.max(1)).max(min_chunk.max(1));
    if n <= chunk {
        return (0..n).map(one).collect();
    }
    let starts: Vec<usize> = (0..n).step_by(chunk).collect();
    std::thread::scope(|scope| {
        let handles: Vec<_> = starts
            .iter()
            .map(|&from| {
                let one = &one;
                scope.spawn(move || (from..(from + chunk).min(n)).map(one).collect::<Vec<_>>())
            })
            .collect();
        // A chunk whose thread panicked is not current: those hits are restored.
        let mut out = Vec::with_capacity(n);
        for (h, &from) in handles.into_iter().zip(&starts) {
            let len = (from + chunk).min(n) - from;
            out.extend(h.join().unwrap_or_else(|_| vec![None; len]));
        }
        out
    })
}

/// On the cache thread again: the current hits' logs read, the rows the comparison
/// recorded stored; each hit with what it restored (`None`: not current, to be restored).
fn current_hits_on(
    s: &mut crate::cache::Store,
    root: &Path,
    (memo, on_disk): (HitsMemo, Vec<Option<OnDisk>>),
) -> Vec<(Entry, Option<Restored>)> {
    let mut updates = Vec::new();
    let mut out = Vec::with_capacity(memo.hits.len());
    for ((h, m), found) in memo.hits.into_iter().zip(memo.decoded).zip(on_disk) {
        let restored = m.zip(found).and_then(|(m, (current, extras, mut found))| {
            updates.append(&mut found);
            if !current || !extras.is_empty() {
                return None;
            }
            let log = match h.entry.log {
                Some(d) => {
                    let compressed = s.read_blob_verified(&d, MAX_LOG_BYTES).ok()??;
                    decompress_bounded(&compressed, MAX_LOG_BYTES).ok()?
                }
                None => Vec::new(),
            };
            Some(Restored { placed: 0, current: m.entries.len() as u64, log })
        });
        out.push((h.entry, restored));
    }
    if let Err(e) = s.memo_store(&digests::outputs_scope(root), &updates) {
        tracing::debug!(error = %e, "output memo not written");
    }
    out
}

/// The regular files of a manifest (what the output memo is asked about).
fn manifest_files(m: &OutputManifest) -> Vec<String> {
    m.entries.iter().filter(|e| e.kind == EntryKind::File).map(|e| e.path.clone()).collect()
}

/// What [`compare_with_rows`] found: current or not, the extras, the memo rows to record.
type OnDisk = (bool, Vec<String>, Vec<(String, MemoRow)>);

/// [`compare_on_disk`] given the output memo's `rows` for the manifest's files; also returns
/// the memo rows to record (files it had to hash).
fn compare_with_rows(
    root: &Path,
    m: &OutputManifest,
    outputs: &PathGlobs,
    rows: &HashMap<String, MemoRow>,
) -> Result<OnDisk, LayerError> {
    let io_err = |rel: &str| {
        let path = root.join(rel);
        move |source| LayerError::Io { path, source }
    };
    let mut tree = nofollow::Beneath::open(root).map_err(io_err(""))?;
    // Taken before any stat: a row is only as recent as the oldest look behind it.
    let now_ns = now_ms().saturating_mul(1_000_000);
    let mut updates = Vec::new();
    let mut current = true;
    for e in &m.entries {
        let (parent, name) = e.path.rsplit_once('/').unwrap_or(("", e.path.as_str()));
        let name = std::ffi::OsStr::new(name);
        let Some(dir) = tree.dir(parent).map_err(io_err(&e.path))? else {
            current = false;
            break;
        };
        let ok = match e.kind {
            EntryKind::File => current_file(&dir, name, e, rows.get(&e.path), now_ns, &mut updates)
                .map_err(io_err(&e.path))?,
            EntryKind::Symlink => {
                matches!(dir.stat(name), Ok(Some(st)) if st.kind == nofollow::Kind::Symlink)
                    && dir.readlink(name).ok().and_then(|t| t.to_str().map(str::to_owned))
                        == e.link_target
            }
            EntryKind::Dir => tree.dir(&e.path).map_err(io_err(&e.path))?.is_some(),
        };
        if !ok {
            current = false;
            break;
        }
    }
    let mut extras = Vec::new();
    let known: Known =
        m.entries.iter().map(|e| (e.path.as_str(), e.kind == EntryKind::Dir)).collect();
    for r in outputs.roots() {
        let (parent, name) = r.rsplit_once('/').unwrap_or(("", r.as_str()));
        let Some(dir) = tree.dir(parent).map_err(io_err(r))? else { continue };
        if r.is_empty() {
            walk_outputs(&dir, r, outputs, &known, &mut extras).map_err(io_err(r))?;
        } else {
            output_leaf(&dir, std::ffi::OsStr::new(name), r, outputs, &known, &mut extras)
                .map_err(io_err(r))?;
        }
    }
    Ok((current, extras, updates))
}

/// Whether the regular file `name` of `dir` is what entry `e` would restore: stamps, then
/// content digest — from `row` when it proves the current stamps, else by hashing (and
/// recording a row in `updates`).
fn current_file(
    dir: &nofollow::DirFd,
    name: &std::ffi::OsStr,
    e: &prova_protocol::manifest::ManifestEntry,
    row: Option<&MemoRow>,
    now_ns: i64,
    updates: &mut Vec<(String, MemoRow)>,
) -> io::Result<bool> {
    let Some(st) = dir.stat(name)? else { return Ok(false) };
    let stamps_match = st.kind == nofollow::Kind::File
        && st.size == e.size
        && st.mode & 0o7777 == e.mode
        && st.mtime_ns == e.mtime_ns;
    let Some(want) = e.digest.filter(|_| stamps_match) else { return Ok(false) };
    let stamp = stamp_of(&st);
    if let Some(row) = row
        && digests::row_proves_output(&stamp, row)
    {
        return Ok(row.digest == want);
    }
    let mut file = match dir.open_file(name) {
        Ok(f) => f,
        Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(false),
        Err(err) if nofollow::is_not_a_dir(&err) => return Ok(false),
        Err(err) => return Err(err),
    };
    // The stamps of what was opened must be the ones judged (a swap in between: not current).
    if stamp_of(&nofollow::stat_file(&file)?) != stamp {
        return Ok(false);
    }
    let got = Digest::of_reader(&mut file)?;
    updates.push((e.path.clone(), digests::memo_row(&stamp, got, now_ns)));
    Ok(got == want)
}

fn stamp_of(st: &nofollow::Stat) -> Stamp {
    Stamp {
        dev: st.dev,
        ino: st.ino,
        size: st.size,
        mtime_ns: st.mtime_ns,
        ctime_ns: st.ctime_ns,
        mode: st.mode,
    }
}

/// A manifest's paths, each with whether it is a directory.
type Known<'a> = HashMap<&'a str, bool>;

/// An output root (or a path found under one), `name` of the real directory `dir`: a real
/// directory is walked; anything else selected and not in the manifest (or there as a
/// directory) is an extra, and so is a directory the globs select as one
/// ([`PathGlobs::selects_dir`]) that the manifest does not hold as one and that removing the
/// extras would leave empty (after what it holds in `extras`: a clean before an execution
/// removes it too). Whether `rel` goes with the extras.
fn output_leaf(
    dir: &nofollow::DirFd,
    name: &std::ffi::OsStr,
    rel: &str,
    outputs: &PathGlobs,
    known: &Known<'_>,
    extras: &mut Vec<String>,
) -> io::Result<bool> {
    let Some(st) = dir.stat(name)? else { return Ok(true) };
    let held_dir = known.get(rel).copied();
    if st.kind == nofollow::Kind::Dir {
        match dir.open_dir(name) {
            Ok(sub) => {
                let emptied = walk_outputs(&sub, rel, outputs, known, extras)?;
                let extra = emptied && held_dir != Some(true) && outputs.selects_dir(rel);
                if extra {
                    extras.push(rel.to_owned());
                }
                return Ok(extra);
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(true),
            Err(e) if nofollow::is_not_a_dir(&e) => {}
            Err(e) => return Err(e),
        }
    }
    // Where the entry holds a file or link, placing it replaces what is there; where it holds
    // a directory, a selected file is removed first (one the outputs do not select is left,
    // and the restore refused: [`in_the_way`]).
    let extra = held_dir != Some(false) && outputs.is_match(rel);
    if extra {
        extras.push(rel.to_owned());
    }
    Ok(extra)
}

/// Finds the extras under the real directory `dir`; whether every entry of it is one.
fn walk_outputs(
    dir: &nofollow::DirFd,
    rel: &str,
    outputs: &PathGlobs,
    known: &Known<'_>,
    extras: &mut Vec<String>,
) -> io::Result<bool> {
    let mut all = true;
    for (name, _) in dir.entries()? {
        let Some(s) = name.to_str() else {
            all = false;
            continue;
        };
        let child = prova_protocol::globs::join_rel(rel, s);
        all &= output_leaf(dir, &name, &child, outputs, known, extras)?;
    }
    Ok(all)
}

/// Most entries looked at under a directory that stands where a restore puts a file
/// ([`in_the_way`]); past it the directory is taken to hold something of the user's.
const IN_THE_WAY_MAX_ENTRIES: usize = 10_000;

/// The first path where placing `manifest` would remove something an execution's clean
/// leaves, with what it is (its own words, for the refusal): where a directory is needed (an
/// ancestor of an entry, or a directory entry), a symlink or file the `outputs` do not
/// select — a symlinked `dist` committed to git, a file `gen/x` beside outputs
/// `gen/**/*.txt` (the clean leaves it, or refuses: `dist -> elsewhere`); and where a file
/// or link goes, a directory holding anything the clean would not remove — `gen/a.txt/`
/// with the user's notes in it. A hit must remove no more than a run would.
fn in_the_way(
    root: &Path,
    manifest: &OutputManifest,
    outputs: &PathGlobs,
) -> Result<Option<(String, &'static str)>, LayerError> {
    let io_err = |rel: &str| {
        let path = root.join(rel);
        move |source| LayerError::Io { path, source }
    };
    let mut dirs: std::collections::BTreeSet<&str> = std::collections::BTreeSet::new();
    for e in &manifest.entries {
        if e.kind == EntryKind::Dir {
            dirs.insert(&e.path);
        }
        dirs.extend(prova_protocol::artifact::ancestors(&e.path));
    }
    // Both walks go in path order, so each directory on the way is opened once.
    let mut tree = nofollow::Beneath::open(root).map_err(io_err(""))?;
    for d in dirs {
        if outputs.is_match(d) {
            continue;
        }
        let (parent, name) = d.rsplit_once('/').unwrap_or(("", d));
        // Behind a link or missing: that link or absence is judged at its own path.
        let Some(parent) = tree.dir(parent).map_err(io_err(d))? else { continue };
        match parent.stat(std::ffi::OsStr::new(name)).map_err(io_err(d))?.map(|s| s.kind) {
            None | Some(nofollow::Kind::Dir) => {}
            Some(nofollow::Kind::Symlink) => return Ok(Some((d.to_owned(), "a symlink"))),
            Some(_) => return Ok(Some((d.to_owned(), "a file"))),
        }
    }
    for e in manifest.entries.iter().filter(|e| e.kind != EntryKind::Dir) {
        let (parent, name) = e.path.rsplit_once('/').unwrap_or(("", e.path.as_str()));
        let Some(parent) = tree.dir(parent).map_err(io_err(&e.path))? else { continue };
        let sub = match parent.open_dir(std::ffi::OsStr::new(name)) {
            Ok(sub) => sub,
            // Not a directory (or gone): replaced as a stale output.
            Err(err) if err.kind() == io::ErrorKind::NotFound || nofollow::is_not_a_dir(&err) => {
                continue;
            }
            Err(err) => return Err(io_err(&e.path)(err)),
        };
        let mut budget = IN_THE_WAY_MAX_ENTRIES;
        if !clean_empties(&sub, &e.path, outputs, &mut budget).map_err(io_err(&e.path))? {
            return Ok(Some((
                e.path.clone(),
                "a directory holding what its outputs do not select",
            )));
        }
    }
    Ok(None)
}

/// Whether an execution's clean would leave the real directory `dir` (at `rel`) empty:
/// everything under it selected — a file or link by the outputs, a directory as one
/// ([`PathGlobs::selects_dir`]). `false` past `budget` entries.
fn clean_empties(
    dir: &nofollow::DirFd,
    rel: &str,
    outputs: &PathGlobs,
    budget: &mut usize,
) -> io::Result<bool> {
    for (name, kind) in dir.entries()? {
        let Some(s) = name.to_str() else { return Ok(false) };
        if *budget == 0 {
            return Ok(false);
        }
        *budget -= 1;
        let child = prova_protocol::globs::join_rel(rel, s);
        let kind = match kind {
            Some(k) => k,
            None => match dir.stat(&name)? {
                Some(st) => st.kind,
                None => continue,
            },
        };
        let gone = if kind == nofollow::Kind::Dir {
            match dir.open_dir(&name) {
                Ok(sub) => {
                    outputs.selects_dir(&child) && clean_empties(&sub, &child, outputs, budget)?
                }
                Err(err) if err.kind() == io::ErrorKind::NotFound => true,
                Err(_) => false,
            }
        } else {
            outputs.is_match(&child)
        };
        if !gone {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Removes `paths` (extras found by [`compare_on_disk`], a directory after what it held)
/// without following a symlink in any component.
fn remove_paths(root: &Path, paths: &[String]) -> Result<(), LayerError> {
    for p in paths {
        nofollow::remove_beneath(root, p)
            .map_err(|e| LayerError::Io { path: root.join(p), source: e })?;
    }
    Ok(())
}

/// A blob opened for a restore.
struct Blob {
    file: fs::File,
    /// Where it lies (for error messages).
    path: PathBuf,
    digest: Digest,
}

/// Where a restore may stage its unpacked copy.
struct Staging {
    /// `.prova/tmp`: on the workspace's file system, outside every output.
    cache: PathBuf,
    /// The task's project directory, for when `.prova/tmp` cannot be written (a read-only
    /// `.prova` under `--cache local:r`): a hidden `.prova-restore-*` directory there is on
    /// the outputs' file system (so placing is a rename), and is removed when the restore
    /// ends, placed or not.
    beside: PathBuf,
}

/// The start of a staging directory's name in `.prova/tmp` (then `<pid>-<random>`).
const STAGING: &str = "restore-";

impl Staging {
    /// A fresh staging directory (removed when dropped).
    ///
    /// Each name carries this process's pid: a restore killed outright leaves its staging,
    /// and the first one this process makes in `.prova/tmp` removes those whose owner is
    /// gone (one beside the outputs is dropped from the next run's file list and removed
    /// there, `prova_analysis::inputs::files`).
    fn create(&self) -> Result<tempfile::TempDir, LayerError> {
        static SWEPT: std::sync::Mutex<Vec<PathBuf>> = std::sync::Mutex::new(Vec::new());
        if let Ok(mut swept) = SWEPT.lock()
            && !swept.contains(&self.cache)
        {
            prova_protocol::pidname::sweep(
                &self.cache,
                &[STAGING],
                prova_protocol::pidname::Entries::Dirs,
            );
            swept.push(self.cache.clone());
        }
        let in_cache = fs::create_dir_all(&self.cache).and_then(|()| {
            tempfile::Builder::new()
                .prefix(&prova_protocol::pidname::prefix(STAGING))
                .tempdir_in(&self.cache)
        });
        match in_cache {
            Ok(dir) => Ok(dir),
            Err(e) if not_writable(&e) => {
                tracing::debug!(dir = %self.cache.display(), error = %e, "staging beside the outputs");
                tempfile::Builder::new()
                    .prefix(&prova_protocol::pidname::prefix(prova_protocol::pidname::RESTORE_TEMP))
                    .tempdir_in(&self.beside)
                    .map_err(|source| LayerError::Io { path: self.beside.clone(), source })
            }
            Err(source) => Err(LayerError::Io { path: self.cache.clone(), source }),
        }
    }
}

/// Whether `e` says a directory cannot be written at all (as opposed to, say, a full disk).
fn not_writable(e: &io::Error) -> bool {
    matches!(e.kind(), io::ErrorKind::ReadOnlyFilesystem | io::ErrorKind::PermissionDenied)
}

/// What [`unpack_and_place`] found.
enum Unpacked {
    /// Placed: files written, files already current.
    Placed { placed: u64, current: u64 },
    /// The bytes do not hash to the digest, are not a valid archive, or do not match the
    /// manifest: the blob is quarantined.
    Corrupt(String),
}

/// Unpacks the blob (hashing the bytes as they stream) into a fresh staging dir and places
/// it. [`Unpacked::Corrupt`] when the bytes do not match the digest, are no archive within
/// `confine`, or do not match the manifest. An I/O error — reading the blob, or writing the
/// staging dir or the workspace (`ENOSPC`, `EIO`, `EFBIG`) — is an `Err`: the blob is not
/// to blame.
fn unpack_and_place(
    blob: Blob,
    staging: &Staging,
    root: &Path,
    manifest: &OutputManifest,
    confine: Vec<String>,
) -> Result<Unpacked, LayerError> {
    let dir = staging.create()?;
    let mut reader = HashingReader {
        inner: io::BufReader::new(blob.file),
        hasher: blake3::Hasher::new(),
        error: None,
    };
    let read_failed = |reader: &mut HashingReader<_>| {
        reader.error.take().map(|source| LayerError::Io { path: blob.path.clone(), source })
    };
    let unpacked = match artifact::unpack(&mut reader, dir.path(), &UnpackLimits::new(confine)) {
        Ok(u) => u,
        // Writing the staging copy failed: the destination's fault.
        Err(ArtifactError::Io { path, source }) => return Err(LayerError::Io { path, source }),
        Err(e) => {
            if let Some(err) = read_failed(&mut reader) {
                return Err(err);
            }
            return Ok(Unpacked::Corrupt(e.to_string()));
        }
    };
    // Drain what the archive reader left (zstd frame end) so the digest covers every byte.
    if let Err(source) = io::copy(&mut reader, &mut io::sink()) {
        return Err(LayerError::Io { path: blob.path.clone(), source });
    }
    if Digest(*reader.hasher.finalize().as_bytes()) != blob.digest {
        return Ok(Unpacked::Corrupt("its bytes do not match its digest".to_owned()));
    }
    if let Err(e) = artifact::check_unpacked(&unpacked, manifest) {
        return Ok(Unpacked::Corrupt(e.to_string()));
    }
    let stats = artifact::place(dir.path(), root, manifest)?;
    Ok(Unpacked::Placed { placed: stats.placed, current: stats.already_current })
}

/// Hashes what it reads, and keeps the first read error (the archive reader above it turns
/// errors into "corrupt archive"; this tells a failing disk from bad bytes).
struct HashingReader<R> {
    inner: R,
    hasher: blake3::Hasher,
    error: Option<io::Error>,
}

impl<R: Read> Read for HashingReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self.inner.read(buf) {
            Ok(n) => {
                self.hasher.update(&buf[..n]);
                Ok(n)
            }
            Err(e) => {
                if self.error.is_none() && e.kind() != io::ErrorKind::Interrupted {
                    self.error = Some(io::Error::new(e.kind(), e.to_string()));
                }
                Err(e)
            }
        }
    }
}

/// Logs up to this size are stored as they are: compressing a few hundred bytes saves
/// nothing, and creating a zstd decoder per hit was a tenth of a warm run's CPU.
const LOG_RAW_MAX: usize = 64 * 1024;
const LOG_RAW: u8 = 0;
const LOG_ZSTD: u8 = 1;
const ZSTD_MAGIC: [u8; 4] = [0x28, 0xb5, 0x2f, 0xfd];

/// A stored log: a tag byte, then the bytes as they are or zstd-compressed.
pub(crate) fn encode_log(log: &[u8]) -> Result<Vec<u8>, LayerError> {
    if log.len() <= LOG_RAW_MAX {
        let mut out = Vec::with_capacity(log.len() + 1);
        out.push(LOG_RAW);
        out.extend_from_slice(log);
        return Ok(out);
    }
    let mut out = vec![LOG_ZSTD];
    out.extend(zstd::bulk::compress(log, 3).map_err(|e| LayerError::Corrupt(e.to_string()))?);
    Ok(out)
}

thread_local! {
    /// One zstd decoder context per thread, reused: creating one per hit cost a tenth of a
    /// warm run whose logs are compressed (large logs, and caches from before the tag byte).
    static DCTX: std::cell::RefCell<Option<zstd::zstd_safe::DCtx<'static>>> =
        const { std::cell::RefCell::new(None) };
}

/// Decodes a stored log (see [`encode_log`]), refusing more than `limit` bytes.
pub(crate) fn decompress_bounded(bytes: &[u8], limit: u64) -> io::Result<Vec<u8>> {
    let unzstd = |body: &[u8]| -> io::Result<Vec<u8>> {
        DCTX.with(|slot| {
            let mut slot = slot.borrow_mut();
            let ctx = slot.get_or_insert_with(zstd::zstd_safe::DCtx::create);
            // A previous frame may have failed half-way: start clean.
            ctx.reset(zstd::zstd_safe::ResetDirective::SessionOnly)
                .map_err(|c| io::Error::other(zstd::zstd_safe::get_error_name(c)))?;
            let mut out = Vec::new();
            zstd::stream::read::Decoder::with_context(body, ctx)
                .take(limit + 1)
                .read_to_end(&mut out)?;
            Ok(out)
        })
    };
    let (tag, body) = bytes.split_first().ok_or_else(|| io::Error::other("empty log blob"))?;
    let out = match *tag {
        LOG_RAW => body.to_vec(),
        LOG_ZSTD => unzstd(body)?,
        // Caches written before the tag byte hold bare zstd frames.
        _ if bytes.starts_with(&ZSTD_MAGIC) => unzstd(bytes)?,
        _ => return Err(io::Error::other("unknown log encoding")),
    };
    if out.len() as u64 > limit {
        return Err(io::Error::other("log larger than the limit"));
    }
    Ok(out)
}

#[cfg(test)]
mod touch_tests {
    use super::*;
    use crate::cache::Store;

    #[test]
    fn only_entries_marked_long_enough_ago_are_marked_again() {
        let (k1, k2, k3) = (Digest([1; 32]), Digest([2; 32]), Digest([3; 32]));
        let now = 10 * TOUCH_RESOLUTION_MS;
        let used = vec![(k1, now - TOUCH_RESOLUTION_MS), (k2, now - 1), (k3, now + 5)];
        assert_eq!(stale_keys(used, now), vec![k1]);
        assert!(stale_keys(Vec::new(), now).is_empty());
    }

    /// Through the real index: a run right after another asks nothing of it, and an entry
    /// the run found marked long ago is marked now.
    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn a_touch_marks_the_stale_entries_and_leaves_the_fresh_ones() {
        let dir = tempfile::tempdir().unwrap();
        let (cache, _join) = CacheThread::spawn(Store::open(dir.path()).unwrap()).unwrap();
        let layer = LocalLayer::new(cache.clone(), crate::cache::TRUSTED, dir.path());
        let (old, fresh) = (Digest([7; 32]), Digest([8; 32]));
        let now = now_ms();
        for (key, at) in [(old, 1_000), (fresh, now - 5)] {
            let e = NewEntry {
                namespace: crate::cache::TRUSTED.into(),
                key,
                task: format!("p{}#build", key.0[0]),
                artifact: None,
                log: None,
                manifest: Vec::new(),
                components: Vec::new(),
                fingerprint: None,
                duration_ms: 1,
                created_ms: at,
            };
            cache.call(move |s| s.put_entry(&e)).await.unwrap().unwrap();
        }
        layer.touch(vec![(old, 1_000), (fresh, now - 5)]).await.unwrap();
        let got = cache
            .call(move |s| s.get_entries(crate::cache::TRUSTED, &[old, fresh]))
            .await
            .unwrap()
            .unwrap();
        assert!(got[&old].last_used_ms >= now, "the stale entry is marked now");
        assert_eq!(got[&fresh].last_used_ms, now - 5, "the fresh one is left alone");
    }
}

#[cfg(test)]
mod log_tests {
    use super::*;

    #[test]
    fn logs_of_caches_from_before_the_tag_byte_still_decode() {
        let legacy = zstd::bulk::compress(b"old log\n", 3).unwrap();
        assert_eq!(decompress_bounded(&legacy, 1 << 20).unwrap(), b"old log\n");
        assert!(decompress_bounded(&[7, 1, 2], 1 << 20).is_err());
    }

    #[test]
    fn a_failed_frame_does_not_spoil_the_reused_decoder() {
        let big = vec![b'y'; LOG_RAW_MAX + 100];
        let enc = encode_log(&big).unwrap();
        assert!(decompress_bounded(&enc[..enc.len() / 2], 1 << 20).is_err(), "truncated");
        assert!(decompress_bounded(&enc, 10).is_err(), "over the limit");
        for _ in 0..3 {
            assert_eq!(decompress_bounded(&enc, 1 << 20).unwrap(), big);
        }
    }

    #[test]
    fn logs_round_trip_raw_and_compressed() {
        for log in [b"hello\n".to_vec(), vec![b'x'; LOG_RAW_MAX + 10]] {
            let enc = encode_log(&log).unwrap();
            assert_eq!(decompress_bounded(&enc, 1 << 20).unwrap(), log);
        }
        assert_eq!(encode_log(b"ab").unwrap(), [LOG_RAW, b'a', b'b']);
        assert!(decompress_bounded(&[9, 1, 2], 10).is_err());
        assert!(decompress_bounded(&encode_log(&[0; 100]).unwrap(), 10).is_err());
    }
}

#[cfg(test)]
#[path = "local_current_tests.rs"]
mod current_tests;

/// Files and links of a manifest (directories are not outputs a glob selects).
pub fn output_count(m: &OutputManifest) -> usize {
    m.entries.iter().filter(|e| e.kind != prova_protocol::manifest::EntryKind::Dir).count()
}
