//! A real REAPI server for the REAPI layer's suite: BuildGrid (`bgd server start CONFIG`)
//! from a venv (`$PROVA_BUILDGRID`, else `/opt/buildgrid-venv/bin/bgd`; `.ci/run` installs
//! it), with a disk CAS in a temp directory, an LRU action cache and the action-cache, CAS
//! and ByteStream services on a free loopback port. Started ready (it answers
//! `GetCapabilities`), killed on drop.

use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use prova_coordinator::layers::reapi::{Endpoint, ReapiClient, ReapiConfig};

/// How long BuildGrid may take to answer after starting.
const READY_WITHIN: Duration = Duration::from_secs(90);
/// Ports tried when another process takes the one picked.
const PORT_ATTEMPTS: usize = 3;

/// A running BuildGrid server.
pub struct BuildGrid {
    child: Child,
    port: u16,
    dir: tempfile::TempDir,
}

/// The `bgd` to run, if installed.
pub fn bgd() -> Option<PathBuf> {
    let path = std::env::var_os("PROVA_BUILDGRID")
        .map_or_else(|| PathBuf::from("/opt/buildgrid-venv/bin/bgd"), PathBuf::from);
    path.is_file().then_some(path)
}

impl BuildGrid {
    /// Starts a server, or `None` (with the reason printed) when BuildGrid is not installed.
    pub fn start() -> Option<Self> {
        let Some(bgd) = bgd() else {
            crate::skip_for_missing(
                "BuildGrid is not installed (set PROVA_BUILDGRID or run .ci/run)",
            );
            return None;
        };
        let mut last = String::new();
        for _ in 0..PORT_ATTEMPTS {
            match Self::try_start(&bgd) {
                Ok(g) => return Some(g),
                Err(e) => last = e,
            }
        }
        panic!("BuildGrid did not start: {last}");
    }

    fn try_start(bgd: &Path) -> Result<Self, String> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(|e| e.to_string())?
            .port();
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let cas = dir.path().join("cas");
        std::fs::create_dir_all(&cas).map_err(|e| e.to_string())?;
        let config = format!(
            "server:\n  - !channel\n    address: \"127.0.0.1:{port}\"\n    insecure-mode: true\n\
             authorization:\n  method: none\n\
             storages:\n  - !disk-storage &cas\n    path: {cas}\n\
             caches:\n  - !lru-action-cache &ac\n    storage: *cas\n    max-cached-refs: 100000\n    allow-updates: true\n    cache-failed-actions: false\n\
             instances:\n  - name: ''\n    services:\n      - !action-cache\n        cache: *ac\n      - !cas\n        storage: *cas\n      - !bytestream\n        storage: *cas\n",
            cas = cas.display()
        );
        let file = dir.path().join("bgd.yml");
        std::fs::write(&file, config).map_err(|e| e.to_string())?;
        let mut child = Command::new(bgd)
            .args(["server", "start"])
            .arg(&file)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("{}: {e}", bgd.display()))?;
        // Its log goes to a file the failure message quotes (and keeps the pipe drained).
        let log = dir.path().join("bgd.log");
        if let Some(err) = child.stderr.take() {
            let log = log.clone();
            std::thread::spawn(move || {
                let mut out = String::new();
                for line in BufReader::new(err).lines().map_while(Result::ok) {
                    out.push_str(&line);
                    out.push('\n');
                    let _ = std::fs::write(&log, &out);
                }
            });
        }
        let mut g = Self { child, port, dir };
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| e.to_string())?;
        let client = {
            let _in = rt.enter(); // the channel is built inside a runtime
            g.client()
        };
        let deadline = Instant::now() + READY_WITHIN;
        loop {
            if let Ok(Some(status)) = g.child.try_wait() {
                return Err(format!(
                    "bgd exited ({status}): {}",
                    std::fs::read_to_string(&log).unwrap_or_default()
                ));
            }
            // Each attempt waits up to the client's own timeout: a bounded poll on the answer.
            if rt.block_on(client.capabilities()).is_ok() {
                return Ok(g);
            }
            if Instant::now() > deadline {
                g.stop();
                return Err(format!(
                    "no answer within {READY_WITHIN:?}: {}",
                    std::fs::read_to_string(&log).unwrap_or_default()
                ));
            }
            // A poll interval (the answer is what is waited for), not a synchronising sleep.
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// `grpc://127.0.0.1:PORT`.
    pub fn endpoint(&self) -> String {
        format!("grpc://127.0.0.1:{}", self.port)
    }

    /// The server's disk CAS.
    pub fn cas_dir(&self) -> PathBuf {
        self.dir.path().join("cas")
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// A REAPI client of this server (call inside a tokio runtime).
    pub fn client(&self) -> ReapiClient {
        let cfg = ReapiConfig {
            endpoint: Endpoint { tls: false, authority: format!("127.0.0.1:{}", self.port) },
            instance_name: String::new(),
            token: None,
            timeout: Duration::from_secs(2),
            ca_file: None,
            cert_file: None,
            key_file: None,
            upload: Default::default(),
        };
        ReapiClient::new(&cfg).expect("a plain-text client builds")
    }

    /// Kills the server and waits for it.
    pub fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for BuildGrid {
    fn drop(&mut self) {
        self.stop();
    }
}
