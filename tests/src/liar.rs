//! A worker that lies: a real peer with a genuine `worker` certificate that joins a real
//! coordinator ([`crate::cluster::Cluster`]), registers like `prova worker` does
//! (`Hello{role: worker}`, `Register`, heartbeats) and answers every `Assign` without running
//! anything — with a **forged** artifact: files of its choosing (`.git/hooks/pre-commit`,
//! another project's source, links out of the project), packed with the real
//! [`prova_protocol::artifact::pack`], uploaded with `BlobRequest::Put`, and reported as
//! `Finished{exit 0, outputs{manifest, fingerprint, artifact}}`.
//!
//! The manifest it reports can also hide entries that are in the archive
//! ([`Forgery::hidden`]): an archive that does not match its manifest.
//!
//! ```no_run
//! use prova_tests::cluster::Cluster;
//! use prova_tests::liar::{Forgery, LyingWorker};
//! let farm = Cluster::builder().workers(0).start();
//! let liar = LyingWorker::join(&farm, "liar", Forgery::new().file(".git/hooks/pre-commit", b"#!/bin/sh\n", 0o755));
//! ```

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use prova_protocol::artifact::{collect_outputs, pack};
use prova_protocol::globs::PathGlobs;
use prova_protocol::manifest::{ManifestEntry, OutputManifest};
use prova_protocol::spec::{ExecStats, ExitKind};
use prova_protocol::transport::{self, Bundle, endpoint, frame};
use prova_protocol::wire::{
    BlobAck, BlobRequest, CoordinatorMsg, Hello, HelloReply, PROTOCOL_VERSION, WorkerInfo,
    WorkerMsg,
};
use prova_protocol::work::{Finished, FromWorker, Isolation, Outputs, ToWorker};
use prova_protocol::{Digest, TaskId};
use tokio_util::sync::CancellationToken;

use crate::cluster::{Cluster, READY_TIMEOUT, worker_of};

/// What the liar returns for every task. Paths are workspace-relative; `{project}` in a path
/// is replaced by the assigned task's project directory.
#[derive(Clone, Debug, Default)]
pub struct Forgery {
    files: Vec<(String, Vec<u8>, u32)>,
    links: Vec<(String, String)>,
    dirs: Vec<String>,
    hidden: Vec<String>,
    /// What it returns for determinism re-runs instead (`None`: the same as first runs).
    rerun: Option<Box<Forgery>>,
}

impl Forgery {
    /// Nothing yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// A regular file with `bytes` and `mode`.
    pub fn file(mut self, path: &str, bytes: &[u8], mode: u32) -> Self {
        self.files.push((path.to_owned(), bytes.to_vec(), mode));
        self
    }

    /// A symlink at `path` pointing at `target`.
    pub fn link(mut self, path: &str, target: &str) -> Self {
        self.links.push((path.to_owned(), target.to_owned()));
        self
    }

    /// A directory entry (collected outputs never have one; a forged manifest may).
    pub fn dir(mut self, path: &str) -> Self {
        self.dirs.push(path.to_owned());
        self
    }

    /// Returns `forgery` for determinism re-runs (assignments with a perturbation) and this
    /// one for first runs: an honest-looking first run, a lie on the re-run.
    pub fn on_rerun(mut self, forgery: Forgery) -> Self {
        self.rerun = Some(Box::new(forgery));
        self
    }

    /// Packs `path` into the archive but leaves it out of the reported manifest.
    pub fn hidden(mut self, path: &str) -> Self {
        self.hidden.push(path.to_owned());
        self
    }
}

/// A lying worker connected to a coordinator; disconnects on drop.
pub struct LyingWorker {
    name: String,
    stop: CancellationToken,
    assigned: Arc<AtomicUsize>,
    thread: Option<std::thread::JoinHandle<Result<(), String>>>,
}

impl LyingWorker {
    /// Issues a `worker` certificate named `name`, joins `farm` with it and waits until
    /// `farm status` lists it.
    #[track_caller]
    pub fn join(farm: &Cluster, name: &str, forgery: Forgery) -> Self {
        let certs = farm.client_certs("worker", name);
        let bundle =
            Bundle::load(&certs).unwrap_or_else(|e| panic!("loading {name}'s bundle: {e}"));
        let addr: SocketAddr = farm.addr().parse().expect("the coordinator's address");
        let stop = CancellationToken::new();
        let assigned = Arc::new(AtomicUsize::new(0));
        let (stop2, assigned2) = (stop.clone(), assigned.clone());
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| e.to_string())?;
            rt.block_on(serve(bundle, addr, forgery, stop2, assigned2))
        });
        let liar = Self { name: name.to_owned(), stop, assigned, thread: Some(thread) };
        farm.wait_for_status(&format!("the lying worker {name} to register"), READY_TIMEOUT, |s| {
            worker_of(s, name).is_some()
        });
        liar
    }

    /// Its certificate name (its worker id on the farm).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// How many assignments it answered with a forgery.
    pub fn assignments(&self) -> usize {
        self.assigned.load(Ordering::SeqCst)
    }
}

impl Drop for LyingWorker {
    fn drop(&mut self) {
        self.stop.cancel();
        if let Some(t) = self.thread.take() {
            match t.join() {
                Ok(Ok(())) => {}
                Ok(Err(e)) if !std::thread::panicking() => panic!("the lying worker failed: {e}"),
                _ => {}
            }
        }
    }
}

async fn serve(
    bundle: Bundle,
    addr: SocketAddr,
    forgery: Forgery,
    stop: CancellationToken,
    assigned: Arc<AtomicUsize>,
) -> Result<(), String> {
    let ep = endpoint::client(&bundle, addr).map_err(|e| e.to_string())?;
    let conn = endpoint::connect(&ep, addr, &addr.ip().to_string())
        .await
        .map_err(|e| format!("dialling: {e}"))?;
    let (mut send, mut recv) = conn.open_bi().await.map_err(|e| e.to_string())?;
    let hello = Hello {
        protocol_version: PROTOCOL_VERSION,
        build_version: "a lying test worker".to_owned(),
        role: "worker".to_owned(),
        capabilities: Vec::new(),
    };
    frame::write_msg(&mut send, &hello).await.map_err(|e| e.to_string())?;
    match frame::read_msg::<_, HelloReply>(&mut recv).await.map_err(|e| e.to_string())? {
        Some(HelloReply::Welcome(_)) => {}
        other => return Err(format!("not welcomed: {other:?}")),
    }
    let info = WorkerInfo {
        slots: 8,
        os: std::env::consts::OS.to_owned(),
        arch: std::env::consts::ARCH.to_owned(),
        labels: BTreeMap::new(),
        sandbox: "none: it never runs anything".to_owned(),
        running: Vec::new(),
        health: None,
    };
    frame::write_msg(&mut send, &WorkerMsg::Register(info)).await.map_err(|e| e.to_string())?;
    let mut heartbeat = tokio::time::interval(Duration::from_secs(1));
    loop {
        tokio::select! {
            () = stop.cancelled() => break,
            _ = heartbeat.tick() => {
                let beat = WorkerMsg::Heartbeat { running: Vec::new(), health: None };
                if frame::write_msg(&mut send, &beat).await.is_err() {
                    break;
                }
            }
            msg = frame::read_msg::<_, CoordinatorMsg>(&mut recv) => {
                let a = match msg {
                    Ok(Some(CoordinatorMsg::Work(ToWorker::Assign(a)))) => a,
                    Ok(Some(_)) => continue,
                    Ok(None) | Err(_) => break,
                };
                let project = a.spec.project_dir.clone();
                let chosen = match (&a.perturb, &forgery.rerun) {
                    (Some(_), Some(r)) => r.as_ref(),
                    _ => &forgery,
                };
                let (dir, manifest, artifact) = forge(chosen, &project, &a.spec.id)?;
                let (digest, size) = artifact;
                // The blob goes up first, as a real worker's does.
                let (mut bs, mut br) = conn.open_bi().await.map_err(|e| e.to_string())?;
                frame::write_msg(&mut bs, &BlobRequest::Put { digest, size })
                    .await
                    .map_err(|e| e.to_string())?;
                let file = tokio::fs::File::open(dir.path().join("artifact.tar.zst"))
                    .await
                    .map_err(|e| e.to_string())?;
                transport::send_blob(&mut bs, digest, size, file).await.map_err(|e| e.to_string())?;
                let _ = bs.finish();
                match frame::read_msg::<_, BlobAck>(&mut br).await.map_err(|e| e.to_string())? {
                    Some(BlobAck::Stored) => {}
                    other => return Err(format!("the forged blob was not stored: {other:?}")),
                }
                let started = FromWorker::Started { attempt: a.attempt, try_no: 1 };
                frame::write_msg(&mut send, &WorkerMsg::Report(started))
                    .await
                    .map_err(|e| e.to_string())?;
                let mut f = Finished::never_ran(a.attempt, ExitKind::Code(0));
                f.tries = 1;
                f.stats = ExecStats::default();
                f.isolation = Isolation::Unsandboxed;
                let fingerprint = manifest.fingerprint();
                f.outputs = Some(Outputs { manifest, fingerprint, artifact: Some(artifact) });
                frame::write_msg(&mut send, &WorkerMsg::Report(FromWorker::Finished(Box::new(f))))
                    .await
                    .map_err(|e| e.to_string())?;
                assigned.fetch_add(1, Ordering::SeqCst);
            }
        }
    }
    let _ = send.finish();
    conn.close(0u32.into(), b"liar done");
    ep.wait_idle().await;
    Ok(())
}

/// Writes the forged tree into a temp dir, collects and packs it; returns the dir (holding
/// `artifact.tar.zst`), the manifest to report and the artifact's digest and size.
fn forge(
    f: &Forgery,
    project: &str,
    task: &TaskId,
) -> Result<(tempfile::TempDir, OutputManifest, (Digest, u64)), String> {
    use std::os::unix::fs::PermissionsExt as _;
    let sub = |p: &str| p.replace("{project}", project);
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let tree = dir.path().join("tree");
    let err = |p: &Path, e: std::io::Error| format!("{}: {e}", p.display());
    for (path, bytes, mode) in &f.files {
        let abs = tree.join(sub(path));
        if let Some(parent) = abs.parent() {
            std::fs::create_dir_all(parent).map_err(|e| err(parent, e))?;
        }
        std::fs::write(&abs, bytes).map_err(|e| err(&abs, e))?;
        std::fs::set_permissions(&abs, std::fs::Permissions::from_mode(*mode))
            .map_err(|e| err(&abs, e))?;
    }
    for (path, target) in &f.links {
        let abs = tree.join(sub(path));
        if let Some(parent) = abs.parent() {
            std::fs::create_dir_all(parent).map_err(|e| err(parent, e))?;
        }
        std::os::unix::fs::symlink(target, &abs).map_err(|e| err(&abs, e))?;
    }
    std::fs::create_dir_all(&tree).map_err(|e| err(&tree, e))?;
    let everything = PathGlobs::new("", &["**".to_owned()]).map_err(|e| e.to_string())?;
    let mut packed = collect_outputs(&tree, &everything).map_err(|e| e.to_string())?;
    for d in &f.dirs {
        let d = sub(d);
        let abs = tree.join(&d);
        std::fs::create_dir_all(&abs).map_err(|e| err(&abs, e))?;
        packed.entries.push(ManifestEntry::dir(d, 0o755));
    }
    let packed = OutputManifest::new(packed.entries);
    let out_path = dir.path().join("artifact.tar.zst");
    let out = std::fs::File::create(&out_path).map_err(|e| err(&out_path, e))?;
    pack(&tree, &packed, out, 3).map_err(|e| format!("packing the forgery for {task}: {e}"))?;
    let bytes = std::fs::read(&out_path).map_err(|e| err(&out_path, e))?;
    let hidden: Vec<String> = f.hidden.iter().map(|h| sub(h)).collect();
    let reported = OutputManifest::new(
        packed.entries.into_iter().filter(|e| !hidden.contains(&e.path)).collect(),
    );
    Ok((dir, reported, (Digest::of(&bytes), bytes.len() as u64)))
}
