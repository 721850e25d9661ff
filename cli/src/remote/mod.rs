//! Farm mode, client side: dial the coordinator as this bundle's role, then submit a run
//! ([`run`]) or ask for status; bring outputs back through the local layer ([`download`]).

pub mod download;
pub mod run;

use std::path::Path;
use std::sync::Arc;

use anyhow::Context as _;
use prova_protocol::transport::{Bundle, Role, endpoint, frame};
use prova_protocol::wire::{Hello, HelloReply, PROTOCOL_VERSION};

use crate::args::RemoteArgs;

/// The build version sent in `Hello`.
pub const BUILD_VERSION: &str = concat!("prova ", env!("CARGO_PKG_VERSION"));

/// How long a client waits for the coordinator's handshake before it says the farm cannot
/// be reached (a QUIC handshake is one round trip; this leaves room for lost packets).
pub const CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

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
    _endpoint: quinn::Endpoint,
}

/// Dials `--remote` with `--certs`, says `Hello` in the bundle's role, and waits for
/// `Welcome` (a refusal, including a refused certificate, is an error that says why).
pub async fn connect(args: &RemoteArgs) -> anyhow::Result<Session> {
    let remote = args.remote.as_deref().context("--remote HOST:PORT is required")?;
    let certs: &Path = args.certs.as_deref().context("--certs DIR is required with --remote")?;
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
    let server_name = crate::commands::daemons::host_of(remote);
    let ep = endpoint::client(&bundle, addr)?;
    let conn = match endpoint::connect_within(&ep, addr, &server_name, CONNECT_TIMEOUT).await {
        Ok(c) => c,
        Err(e) if unreachable(&e) => {
            return Err(Unreachable { addr: remote.to_owned(), why: e.to_string() }.into());
        }
        // It answered, but the handshake failed (another cluster's CA, a name not in its
        // certificate): a real misconfiguration, never a reason to fall back.
        Err(e) => {
            return Err(anyhow::Error::new(e).context(format!("cannot reach {remote} securely")));
        }
    };
    // Under TLS 1.3 a refused client certificate surfaces after the handshake, on the first
    // stream operation (STACK pitfall 3): whichever step meets it reports the refusal.
    let refused = |e: &dyn std::fmt::Display| {
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
    Ok(Session { conn, send, recv, bundle, key_salt, _endpoint: ep })
}
