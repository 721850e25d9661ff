//! Farm mode, client side: dial the coordinator as this bundle's role, then submit a run
//! ([`run`]) or ask for status; bring outputs back through the local layer ([`download`]).
//! A coordinator that goes away mid-session (crashed, stopped, restarted, or silent past the
//! client endpoint's idle bound, the 30 s pause tolerance) is redialled and the run submitted
//! again ([`reattach`]); one that stays away past `--reattach-timeout` is one line,
//! [`CoordinatorLost`], counting what the farm saved before it went. A silence shorter than
//! the tolerance is waited out, and said after a few seconds ([`say_liveness`]).

pub mod download;
pub mod reattach;
pub mod run;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use prova_protocol::events::{CacheStatus, RunEvent};
use prova_protocol::task::OwnedTask;
use prova_protocol::transport::liveness::{self, Liveness, Watch};
use prova_protocol::transport::{Bundle, Role, endpoint, frame};
use prova_protocol::wire::{Hello, HelloReply, PROTOCOL_VERSION};

use tokio::sync::mpsc;

use crate::args::RemoteArgs;

/// The build version sent in `Hello`.
pub const BUILD_VERSION: &str = concat!("prova ", env!("CARGO_PKG_VERSION"));

/// How long a client waits for the coordinator's handshake before it says the farm cannot
/// be reached (a QUIC handshake is one round trip; this leaves room for lost packets, and a
/// down coordinator costs a run or `farm status` at most this).
pub const CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(3);

/// The farm did not answer at all (no handshake, no address): distinct from a farm that
/// answered and refused, which `--fallback local` must not hide.
#[derive(Debug)]
pub struct Unreachable {
    /// `--remote` as given.
    pub addr: String,
    /// What the dial met.
    pub why: String,
}

impl std::fmt::Display for Unreachable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "cannot reach the farm at {} ({})", self.addr, self.why)
    }
}

impl std::error::Error for Unreachable {}

/// The coordinator went away during the session: the connection timed out, was reset (a new
/// coordinator on the address knows nothing of it) or was closed by a coordinator shutting
/// down. What the farm saved before that is in its cache: a re-run hits it.
#[derive(Debug)]
pub struct CoordinatorLost {
    /// `--remote` as given.
    pub addr: String,
    /// Tasks the farm reported saved in this session.
    pub saved: usize,
}

impl std::fmt::Display for CoordinatorLost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let tasks = if self.saved == 1 { "task" } else { "tasks" };
        write!(
            f,
            "coordinator {} went away; {} {tasks} saved, re-run to reuse them",
            self.addr, self.saved
        )
    }
}

impl std::error::Error for CoordinatorLost {}

/// Whether a connection ended the way a coordinator that went away ends it: silence past the
/// idle bound, a stateless reset, or its own shutdown (code 0). A refusal (code ≠ 0, with a
/// reason) or a TLS failure is not: its own words say more.
fn went_away(e: &quinn::ConnectionError) -> bool {
    use quinn::ConnectionError as C;
    match e {
        C::TimedOut | C::Reset => true,
        C::ApplicationClosed(close) => close.error_code == 0u32.into(),
        _ => false,
    }
}

/// Whether a dial error means nobody answered (a timeout, a refused or unroutable address).
fn unreachable(e: &prova_protocol::transport::TransportError) -> bool {
    use prova_protocol::transport::TransportError as T;
    match e {
        T::Timeout { .. } => true,
        T::Connection(c) => {
            matches!(c, quinn::ConnectionError::TimedOut | quinn::ConnectionError::Reset)
        }
        _ => false,
    }
}

/// A session with a coordinator: the connection and its control stream.
pub struct Session {
    /// The connection (blob streams open on it).
    pub conn: quinn::Connection,
    /// Control stream, ours to write.
    pub send: quinn::SendStream,
    /// Control stream, theirs.
    pub recv: quinn::RecvStream,
    /// Our bundle.
    pub bundle: Arc<Bundle>,
    /// The farm cache's key salt (`Welcome`): this run's keys fold declared env values with it.
    pub key_salt: Option<prova_protocol::key::KeySalt>,
    /// `--remote` as given.
    remote: String,
    /// Tasks the farm reported saved so far (see [`Session::counting_saves`]).
    saved: Arc<AtomicUsize>,
    endpoint: quinn::Endpoint,
    /// Says a silent coordinator, and ends the connection when its port is found closed.
    liveness: Watch,
}

impl Session {
    /// Closes the connection and waits (briefly, bounded) for the close to reach the
    /// coordinator: a process that exits on a bare drop leaves its connection to idle out
    /// there, and each counts against its certificate's connection share until it does
    /// (a `farm status` polled in a loop was refused after 8).
    pub async fn close(self, why: &'static [u8]) {
        self.conn.close(0u32.into(), why);
        let _ = tokio::time::timeout(std::time::Duration::from_secs(1), self.endpoint.wait_idle())
            .await;
    }

    /// A sender for the run's events that counts each task the farm saved on its way to
    /// `events`, so a lost coordinator can say what a re-run will reuse.
    pub fn counting_saves(&self, events: mpsc::Sender<RunEvent>) -> mpsc::Sender<RunEvent> {
        let (tx, mut rx) = mpsc::channel::<RunEvent>(1024);
        let saved = self.saved.clone();
        OwnedTask::spawn("cli.remote.count-saves", async move {
            while let Some(ev) = rx.recv().await {
                if let RunEvent::TaskFinished(r) = &ev
                    && r.cache == CacheStatus::Saved
                {
                    saved.fetch_add(1, Ordering::Relaxed);
                }
                if events.send(ev).await.is_err() {
                    break;
                }
            }
        })
        .detach();
        tx
    }

    /// `e` as the user should read it: [`CoordinatorLost`] when the connection is gone the way
    /// a vanished coordinator leaves it, else `e` itself.
    pub fn explain(&self, e: anyhow::Error) -> anyhow::Error {
        if e.is::<CoordinatorLost>() {
            return e; // said already (by the re-attaching loop, counting every session)
        }
        match self.conn.close_reason() {
            Some(why) if went_away(&why) || self.liveness.gone() => {
                tracing::info!(coordinator = %self.remote, "connection ended: {why} ({e:#})");
                CoordinatorLost { addr: self.remote.clone(), saved: self.saved() }.into()
            }
            _ => e,
        }
    }

    /// Tasks the farm reported saved so far.
    pub fn saved(&self) -> usize {
        self.saved.load(Ordering::Relaxed)
    }
}

/// A farm to dial, resolved from `--remote`, `--certs` and `--server-name`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FarmTarget {
    /// `HOST:PORT`.
    pub addr: String,
    /// The client's certificate bundle.
    pub certs: PathBuf,
    /// The name the coordinator's certificate must carry (the address's host unless told).
    pub server_name: String,
}

/// `--remote` or `--certs` missing.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TargetError {
    /// No `--remote`.
    #[error("--remote HOST:PORT is required")]
    NoRemote,
    /// No `--certs`.
    #[error("--certs DIR is required with --remote")]
    NoCerts,
}

impl FarmTarget {
    /// Resolves the flags. Pure.
    pub fn from_args(args: &RemoteArgs) -> Result<Self, TargetError> {
        let addr = args.remote.clone().ok_or(TargetError::NoRemote)?;
        let certs = args.certs.clone().ok_or(TargetError::NoCerts)?;
        let server_name =
            args.server_name.clone().unwrap_or_else(|| crate::commands::daemons::host_of(&addr));
        Ok(Self { addr, certs, server_name })
    }
}

/// Dials `--remote` with `--certs`: [`connect_to`] the target the flags name.
pub async fn connect(args: &RemoteArgs) -> anyhow::Result<Session> {
    connect_to(&FarmTarget::from_args(args)?).await
}

/// Dials `target`, says `Hello` in the bundle's role, and waits for `Welcome` (a refusal,
/// including a refused certificate, is an error that says why).
pub async fn connect_to(target: &FarmTarget) -> anyhow::Result<Session> {
    let remote = target.addr.as_str();
    let certs: &Path = &target.certs;
    let bundle = Arc::new(Bundle::load(certs)?);
    if matches!(bundle.identity.role, Role::Worker | Role::Coordinator) {
        anyhow::bail!(
            "{} holds a {} certificate, which cannot use the farm's client API (runs, status); \
             use a ci, client or admin bundle (`prova certs issue DIR --role ci --name NAME`)",
            certs.display(),
            bundle.identity.role
        );
    }
    let addr = crate::commands::daemons::resolve(remote)
        .await
        .map_err(|e| Unreachable { addr: remote.to_owned(), why: format!("{e:#}") })?;
    let server_name = &target.server_name;
    let ep = endpoint::client(&bundle, addr)?;
    let conn = match endpoint::connect_within(&ep, addr, server_name, CONNECT_TIMEOUT).await {
        Ok(c) => c,
        Err(e) if unreachable(&e) => {
            return Err(Unreachable { addr: remote.to_owned(), why: e.to_string() }.into());
        }
        // It answered, but the handshake failed (another cluster's CA, a name not in its
        // certificate): a real misconfiguration, never a reason to fall back.
        Err(e) => {
            let hint = endpoint::name_mismatch_hint(&e, server_name)
                .map(|h| format!(" ({h}, or pass --server-name)"))
                .or_else(|| endpoint::clock_hint(&e).map(|h| format!(" ({h})")))
                .unwrap_or_default();
            return Err(
                anyhow::Error::new(e).context(format!("cannot reach {remote} securely{hint}"))
            );
        }
    };
    // Under TLS 1.3 a refused client certificate surfaces after the handshake, on the first
    // stream operation (STACK pitfall 3): whichever step meets it reports the refusal.
    let refused = |e: &dyn std::fmt::Display| {
        if let Some(hint) = conn.close_reason().and_then(|r| endpoint::connection_clock_hint(&r)) {
            return anyhow::anyhow!("{remote} refused the connection: {hint}");
        }
        let why = conn.close_reason().map(|r| r.to_string()).unwrap_or_else(|| e.to_string());
        anyhow::anyhow!(
            "{remote} refused the connection ({why}): is {} a bundle of this cluster?",
            certs.display()
        )
    };
    let (mut send, mut recv) = conn.open_bi().await.map_err(|e| refused(&e))?;
    let hello = Hello {
        protocol_version: PROTOCOL_VERSION,
        build_version: BUILD_VERSION.to_owned(),
        role: bundle.identity.role.as_str().to_owned(),
        capabilities: Vec::new(),
    };
    frame::write_msg(&mut send, &hello).await.map_err(|e| refused(&e))?;
    let key_salt = match frame::read_msg::<_, HelloReply>(&mut recv).await {
        Ok(Some(HelloReply::Welcome(w))) => w.key_salt,
        Ok(Some(HelloReply::Reject(r))) => {
            anyhow::bail!("{remote} refused this client: {}", r.reason)
        }
        Ok(None) => anyhow::bail!("{remote} closed the connection during the handshake"),
        Err(e) => return Err(refused(&e)),
    };
    let said = remote.to_owned();
    let liveness = liveness::watch(conn.clone(), move |l| say_liveness(&said, l));
    Ok(Session {
        conn,
        send,
        recv,
        bundle,
        key_salt,
        remote: remote.to_owned(),
        saved: Arc::new(AtomicUsize::new(0)),
        endpoint: ep,
        liveness,
    })
}

/// A silent coordinator, said on stderr: once after a few seconds, and when it answers again.
/// (Its going away for good is [`CoordinatorLost`], said by the caller.)
fn say_liveness(remote: &str, l: Liveness) {
    let tolerance = endpoint::CLIENT_IDLE_TIMEOUT.as_secs();
    match l {
        Liveness::Quiet(d) => crate::stdio::eprint_line(&format!(
            "prova: coordinator {remote} not answering for {} s; waiting up to {tolerance} s",
            d.as_secs()
        )),
        Liveness::Back(d) => crate::stdio::eprint_line(&format!(
            "prova: coordinator {remote} answering again after {} s",
            d.as_secs()
        )),
        Liveness::Gone => {}
    }
}
