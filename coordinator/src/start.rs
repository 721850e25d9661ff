//! A coordinator's start-up: from resolved [`CoordinatorSettings`] to a serving farm — the
//! farm cache opened on its thread, the [`FarmActor`], the QUIC endpoint, the read-only HTTP
//! listener when asked for — and its shutdown. The binary (`prova coordinator`) only parses
//! flags and its config file into the settings (`cli/src/commands/daemons.rs`), as it does
//! for a worker (`prova_worker::start`); the in-process test farm starts coordinators the
//! same way.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use kameo::prelude::*;
use prova_protocol::task::OwnedTask;
use prova_protocol::transport::{Bundle, Role, TransportError, endpoint};
use tokio_util::sync::CancellationToken;

use crate::cache::{CacheError, CacheThread};
use crate::farm::actor::FarmActor;
use crate::farm::observe::Observer;
use crate::farm::server::{self, Shared};
use crate::http::{HttpError, HttpListener};

/// Why a coordinator could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The bundle is not a coordinator's.
    #[error("{dir} holds a {role} certificate, not a coordinator's")]
    NotACoordinatorBundle {
        /// The bundle's directory.
        dir: String,
        /// Its role.
        role: Role,
    },
    /// The farm cache does not open.
    #[error("cannot open the farm cache at {dir}: {source}")]
    Cache {
        /// The cache directory.
        dir: String,
        /// Why.
        source: CacheError,
    },
    /// The cache thread stopped answering.
    #[error(transparent)]
    CacheThread(CacheError),
    /// The HTTP listener does not bind (or its token is refused).
    #[error(transparent)]
    Http(#[from] HttpError),
    /// The QUIC endpoint does not bind.
    #[error(transparent)]
    Endpoint(#[from] TransportError),
    /// The bound address cannot be read.
    #[error("cannot read the bound address: {0}")]
    LocalAddr(std::io::Error),
    /// The `listening` line could not be written.
    #[error(transparent)]
    Announce(std::io::Error),
}

/// A coordinator's resolved settings.
pub struct CoordinatorSettings {
    /// The UDP address to bind (`127.0.0.1:0` picks a port).
    pub listen: SocketAddr,
    /// Its certificate bundle (role `coordinator`).
    pub bundle: Bundle,
    /// The farm cache directory.
    pub cache_dir: PathBuf,
    /// `--trust proven`: ci entries wait for a second worker's agreement.
    pub trust_proven: bool,
    /// The most bytes one `client` certificate's uploads may hold in the farm cache.
    pub client_quota: u64,
    /// The read-only HTTP listener, when asked for.
    pub http: Option<HttpSettings>,
}

/// `--http ADDR` and its token.
pub struct HttpSettings {
    /// Where to listen (TCP).
    pub addr: SocketAddr,
    /// The bearer token (the file's content, trimmed when checked).
    pub token: Option<String>,
}

/// Checks that `bundle` (loaded from `dir`) is a coordinator's.
pub fn check_bundle(bundle: &Bundle, dir: &std::path::Path) -> Result<(), StartError> {
    if bundle.identity.role != Role::Coordinator {
        return Err(StartError::NotACoordinatorBundle {
            dir: dir.display().to_string(),
            role: bundle.identity.role,
        });
    }
    Ok(())
}

/// A coordinator bound to its address with its cache open, not yet serving.
pub struct BoundCoordinator {
    /// The address it listens on.
    pub addr: SocketAddr,
    /// Its cache directory.
    pub cache_dir: PathBuf,
    endpoint: quinn::Endpoint,
    shared: Arc<Shared>,
    http: Option<HttpListener>,
}

/// Opens the farm cache, starts the farm actor and binds the endpoint (and the HTTP
/// listener). Runs inside a tokio runtime.
pub async fn bind_coordinator(s: CoordinatorSettings) -> Result<BoundCoordinator, StartError> {
    let (store, _join) = CacheThread::open(&s.cache_dir)
        .map_err(|source| StartError::Cache { dir: s.cache_dir.display().to_string(), source })?;
    let tmp = store.call(|st| st.tmp_dir()).await.map_err(StartError::CacheThread)?;
    let http = match s.http {
        Some(h) => Some(crate::http::bind(h.addr, h.token).await?),
        None => None,
    };
    let farm = FarmActor::spawn(Some(store.clone()));
    let endpoint = endpoint::server(s.listen, &s.bundle)?;
    let addr = endpoint.local_addr().map_err(StartError::LocalAddr)?;
    let shared = Arc::new(Shared {
        farm,
        store,
        tmp,
        trust_proven: s.trust_proven,
        client_quota: s.client_quota,
        observe: Arc::new(Observer::default()),
    });
    Ok(BoundCoordinator { addr, cache_dir: s.cache_dir, endpoint, shared, http })
}

impl BoundCoordinator {
    /// The HTTP listener's address, when there is one.
    pub fn http_addr(&self) -> Option<SocketAddr> {
        self.http.as_ref().map(|h| h.addr)
    }

    /// The line a started coordinator prints first (tests read its addresses).
    pub fn listening_line(&self) -> String {
        let http = self.http_addr().map(|a| format!(", http http://{a}/")).unwrap_or_default();
        format!(
            "prova coordinator listening on {} (cache {}{http})\n",
            self.addr,
            self.cache_dir.display()
        )
    }

    /// Serves until `shutdown`, then closes every connection.
    pub async fn serve(self, shutdown: CancellationToken) {
        let _http = self.http.map(|h| {
            let (shared, stop) = (self.shared.clone(), shutdown.clone());
            OwnedTask::spawn("http", h.serve(shared, stop))
        });
        server::serve(self.endpoint, self.shared.clone(), shutdown).await;
        let _ = self.shared.farm.stop_gracefully().await;
    }
}

/// Runs a coordinator until `shutdown`: binds it, gives `announce` its listening line, and
/// serves.
pub async fn run_coordinator(
    s: CoordinatorSettings,
    shutdown: CancellationToken,
    announce: impl FnOnce(&str) -> std::io::Result<()>,
) -> Result<(), StartError> {
    let bound = bind_coordinator(s).await?;
    announce(&bound.listening_line()).map_err(StartError::Announce)?;
    bound.serve(shutdown).await;
    Ok(())
}
