//! A hostile REAPI server for tests: plain gRPC over HTTP/2 on a loopback port, answering the
//! calls a prova client makes to read an entry (`GetCapabilities`, `GetActionResult`,
//! `BatchReadBlobs`, ByteStream `Read`) for one key — with an entry record that is genuine
//! but declares an artifact of `declared` bytes, and a ByteStream that streams `streamed`
//! bytes of zeros for it (more than declared, or a huge declared size: what a broken or
//! malicious server does). Everything else is `UNIMPLEMENTED`.
//!
//! ```no_run
//! use prova_tests::hostile_reapi::{Hostile, HostileReapi};
//! # let key = prova_protocol::Digest::of(b"k");
//! let server = HostileReapi::start(Hostile { task: "p#build".into(), declared: 1 << 28, streamed: 1 << 28 });
//! let endpoint = server.endpoint(); // grpc://127.0.0.1:PORT, for the workspace's config
//! server.answer_for(key);           // the key that config gives the task
//! ```
//!
//! It runs on a runtime of its own (a thread), stops on drop, and counts the bytes it
//! streamed ([`HostileReapi::streamed`]).

use std::future::poll_fn;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use prost::Message as _;
use prova_coordinator::layers::reapi::map::{ARTIFACT_PATH, ENTRY_PATH, RemoteEntry, key_action};
use prova_coordinator::layers::reapi::proto::{bytestream, re};
use prova_protocol::Digest;
use prova_protocol::manifest::{EntryKind, ManifestEntry, OutputManifest};
use sha2::Digest as _;
use tokio_util::sync::CancellationToken;

/// What the hostile server claims and sends.
#[derive(Clone, Debug)]
pub struct Hostile {
    /// The task (`project#task`) of the entry record.
    pub task: String,
    /// The artifact's size as the entry and the action result declare it.
    pub declared: u64,
    /// What its ByteStream actually streams.
    pub streamed: u64,
}

/// A running hostile server.
pub struct HostileReapi {
    addr: SocketAddr,
    stop: CancellationToken,
    streamed: Arc<AtomicU64>,
    hostile: Hostile,
    answers: Shared,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// The canned answers, once the key is known.
type Shared = Arc<std::sync::Mutex<Option<Arc<Answers>>>>;

/// ByteStream chunk size.
const CHUNK: usize = 64 * 1024;

impl HostileReapi {
    /// Starts it on `127.0.0.1:0`.
    pub fn start(h: Hostile) -> Self {
        let std_listener =
            std::net::TcpListener::bind("127.0.0.1:0").expect("binding the hostile server");
        std_listener.set_nonblocking(true).expect("non-blocking");
        let addr = std_listener.local_addr().expect("its address");
        let stop = CancellationToken::new();
        let streamed = Arc::new(AtomicU64::new(0));
        let (s2, n2) = (stop.clone(), streamed.clone());
        let answers: Shared = Arc::default();
        let shared = answers.clone();
        let thread = std::thread::Builder::new()
            .name("hostile-reapi".into())
            .spawn(move || {
                let rt = tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(2)
                    .enable_all()
                    .build()
                    .expect("a runtime");
                rt.block_on(async move {
                    let listener =
                        tokio::net::TcpListener::from_std(std_listener).expect("a listener");
                    loop {
                        tokio::select! {
                            () = s2.cancelled() => break,
                            accepted = listener.accept() => {
                                let Ok((sock, _)) = accepted else { continue };
                                let (a, n) = (answers.clone(), n2.clone());
                                prova_protocol::task::OwnedTask::spawn(
                                    "hostile-reapi.conn",
                                    serve(sock, a, n),
                                )
                                .detach();
                            }
                        }
                    }
                });
            })
            .expect("the hostile server's thread");
        Self { addr, stop, streamed, hostile: h, answers: shared, thread: Some(thread) }
    }

    /// Answers for prova key `key` from now on (its action digest is `key_action(key)`).
    pub fn answer_for(&self, key: Digest) {
        let a = Arc::new(Answers::new(&self.hostile, key));
        if let Ok(mut g) = self.answers.lock() {
            *g = Some(a);
        }
    }

    /// `grpc://127.0.0.1:PORT`.
    pub fn endpoint(&self) -> String {
        format!("grpc://{}", self.addr)
    }

    /// Artifact bytes streamed so far.
    pub fn streamed(&self) -> u64 {
        self.streamed.load(Ordering::Relaxed)
    }
}

impl Drop for HostileReapi {
    fn drop(&mut self) {
        self.stop.cancel();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The canned answers.
struct Answers {
    action: re::Digest,
    result: Vec<u8>,
    entry: re::Digest,
    entry_bytes: Vec<u8>,
    artifact_name: String,
    streamed: u64,
}

impl Answers {
    fn new(h: &Hostile, key: Digest) -> Self {
        let manifest = OutputManifest::new(vec![ManifestEntry {
            path: format!("{}/dist/big.bin", h.task.split('#').next().unwrap_or("p")),
            kind: EntryKind::File,
            mode: 0o644,
            size: h.declared,
            digest: Some(Digest::of(b"never")),
            mtime_ns: 0,
            link_target: None,
        }]);
        let record = RemoteEntry {
            version: prova_coordinator::layers::reapi::map::REMOTE_ENTRY_VERSION,
            task: h.task.clone(),
            key,
            manifest: rmp_serde::to_vec_named(&manifest).expect("a manifest encodes"),
            components: Vec::new(),
            fingerprint: Some(manifest.fingerprint()),
            duration_ms: 1,
            artifact: Some((Digest::of(b"not these bytes"), h.declared)),
        };
        let entry_bytes = rmp_serde::to_vec_named(&record).expect("the record encodes");
        let entry = sha256(&entry_bytes);
        // The artifact's REAPI digest: a hash its bytes never have, the declared size.
        let artifact = re::Digest { hash: "ab".repeat(32), size_bytes: h.declared as i64 };
        let result = re::ActionResult {
            output_files: vec![
                re::OutputFile {
                    path: ENTRY_PATH.into(),
                    digest: Some(entry.clone()),
                    ..Default::default()
                },
                re::OutputFile {
                    path: ARTIFACT_PATH.into(),
                    digest: Some(artifact.clone()),
                    ..Default::default()
                },
            ],
            ..Default::default()
        }
        .encode_to_vec();
        Self {
            action: key_action(&key).digest,
            result,
            entry,
            entry_bytes,
            artifact_name: format!("blobs/{}/{}", artifact.hash, artifact.size_bytes),
            streamed: h.streamed,
        }
    }
}

fn sha256(bytes: &[u8]) -> re::Digest {
    let hash: String = sha2::Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect();
    re::Digest { hash, size_bytes: bytes.len() as i64 }
}

async fn serve(sock: tokio::net::TcpStream, answers: Shared, streamed: Arc<AtomicU64>) {
    let Ok(mut conn) = h2::server::handshake(sock).await else { return };
    while let Some(Ok((req, respond))) = conn.accept().await {
        let a = answers.lock().ok().and_then(|g| g.clone());
        let n = streamed.clone();
        prova_protocol::task::OwnedTask::spawn("hostile-reapi.call", async move {
            let _ = call(req, respond, a, n).await;
        })
        .detach();
    }
}

/// gRPC status codes used here.
const OK: u32 = 0;
const NOT_FOUND: u32 = 5;
const UNIMPLEMENTED: u32 = 12;

async fn call(
    req: http::Request<h2::RecvStream>,
    mut respond: h2::server::SendResponse<Bytes>,
    a: Option<Arc<Answers>>,
    streamed: Arc<AtomicU64>,
) -> Result<(), h2::Error> {
    let path = req.uri().path().to_owned();
    let mut body = req.into_body();
    let mut msg = Vec::new();
    while let Some(chunk) = body.data().await {
        let chunk = chunk?;
        let _ = body.flow_control().release_capacity(chunk.len());
        msg.extend_from_slice(&chunk);
    }
    let payload = msg.get(5..).unwrap_or_default();
    let head = http::Response::builder()
        .status(200)
        .header("content-type", "application/grpc")
        .body(())
        .unwrap_or_default();
    let mut send = respond.send_response(head, false)?;
    let method = path.rsplit('/').next().unwrap_or_default();
    let status = match (method, a) {
        ("GetCapabilities", _) => {
            let caps = re::ServerCapabilities {
                cache_capabilities: Some(re::CacheCapabilities {
                    digest_functions: vec![re::digest_function::Value::Sha256 as i32],
                    max_batch_total_size_bytes: 4 << 20,
                }),
                // A cache, not an execution service.
                execution_capabilities: None,
            };
            send_msg(&mut send, &caps.encode_to_vec()).await?;
            OK
        }
        (_, None) => NOT_FOUND,
        (method, Some(a)) => answer(method, payload, &mut send, &a, &streamed).await?,
    };
    let mut trailers = http::HeaderMap::new();
    trailers.insert("grpc-status", http::HeaderValue::from(status));
    send.send_trailers(trailers)
}

/// The status of `method` answered from `a` (its messages sent on `send`).
async fn answer(
    method: &str,
    payload: &[u8],
    send: &mut h2::SendStream<Bytes>,
    a: &Answers,
    streamed: &AtomicU64,
) -> Result<u32, h2::Error> {
    Ok(match method {
        "GetActionResult" => {
            let asked = re::GetActionResultRequest::decode(payload).ok();
            if asked.and_then(|r| r.action_digest) == Some(a.action.clone()) {
                send_msg(send, &a.result).await?;
                OK
            } else {
                NOT_FOUND
            }
        }
        "BatchReadBlobs" => {
            let asked = re::BatchReadBlobsRequest::decode(payload).unwrap_or_default();
            let responses = asked
                .digests
                .into_iter()
                .map(|d| {
                    let found = d == a.entry;
                    re::batch_read_blobs_response::Response {
                        data: if found { a.entry_bytes.clone() } else { Vec::new() },
                        status: Some(
                            prova_coordinator::layers::reapi::proto::google::rpc::Status {
                                code: if found { 0 } else { NOT_FOUND as i32 },
                                ..Default::default()
                            },
                        ),
                        digest: Some(d),
                    }
                })
                .collect();
            let resp = re::BatchReadBlobsResponse { responses };
            send_msg(send, &resp.encode_to_vec()).await?;
            OK
        }
        "Read" => {
            let asked = bytestream::ReadRequest::decode(payload).unwrap_or_default();
            if asked.resource_name.ends_with(&a.artifact_name) {
                let zeros = vec![0u8; CHUNK];
                let mut left = a.streamed;
                while left > 0 {
                    let n = left.min(CHUNK as u64) as usize;
                    let m = bytestream::ReadResponse { data: zeros[..n].to_vec() }.encode_to_vec();
                    if send_msg(send, &m).await.is_err() {
                        return Ok(OK); // the client stopped reading: what a bound does
                    }
                    streamed.fetch_add(n as u64, Ordering::Relaxed);
                    left -= n as u64;
                }
                OK
            } else {
                NOT_FOUND
            }
        }
        _ => UNIMPLEMENTED,
    })
}

/// One length-prefixed gRPC message, sent within the peer's flow-control window.
async fn send_msg(send: &mut h2::SendStream<Bytes>, msg: &[u8]) -> Result<(), h2::Error> {
    let mut framed = Vec::with_capacity(msg.len() + 5);
    framed.push(0);
    framed.extend_from_slice(&(msg.len() as u32).to_be_bytes());
    framed.extend_from_slice(msg);
    let mut data = Bytes::from(framed);
    while !data.is_empty() {
        send.reserve_capacity(data.len());
        let cap = match poll_fn(|cx| send.poll_capacity(cx)).await {
            Some(c) => c?,
            None => return Err(h2::Error::from(h2::Reason::CANCEL)),
        };
        if cap == 0 {
            continue;
        }
        let part = data.split_to(cap.min(data.len()));
        send.send_data(part, false)?;
    }
    Ok(())
}
