//! A real REAPI remote-execution farm for `tests/tests/exec_reapi.rs`: PostgreSQL (BuildGrid's
//! scheduler needs it; `initdb` into a temp directory, run as the `postgres` user when the
//! tests run as root, on a free loopback port), BuildGrid (`bgd server start` with the
//! execution, bots, CAS, ByteStream and action-cache services; `$PROVA_BUILDGRID`, else
//! `/opt/buildgrid-venv/bin/bgd`, with its `database` extra), and bots: real `prova worker
//! --reapi-bot` subprocesses. Started ready (the server answers `GetCapabilities` and the bots
//! announced themselves), everything killed on drop.

use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use prova_coordinator::layers::reapi::{Endpoint, ReapiClient, ReapiConfig};

/// How long PostgreSQL and BuildGrid may each take to start.
const READY_WITHIN: Duration = Duration::from_secs(120);

/// A running farm.
pub struct ReapiFarm {
    postgres: Child,
    grid: Child,
    bots: Vec<Child>,
    port: u16,
    dir: tempfile::TempDir,
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free loopback port")
        .port()
}

/// The directory holding `initdb` and `postgres`, if PostgreSQL is installed.
fn pg_bin() -> Option<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .flatten()
        .map(|e| e.path().join("bin"))
        .filter(|b| b.join("initdb").is_file() && b.join("postgres").is_file())
        .collect();
    found.sort();
    found.pop()
}

fn as_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// `cmd` as the `postgres` user when running as root (PostgreSQL refuses root).
fn pg_command(bin: &Path) -> Command {
    if as_root() {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--"]).arg(bin);
        c
    } else {
        Command::new(bin)
    }
}

/// Waits for `ready` to hold, bounded; `what` names it in the failure.
fn wait_until(what: &str, child: &mut Child, log: &Path, mut ready: impl FnMut() -> bool) {
    let deadline = Instant::now() + READY_WITHIN;
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            panic!(
                "{what} exited ({status}): {}",
                std::fs::read_to_string(log).unwrap_or_default()
            );
        }
        if ready() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{what} not ready within {READY_WITHIN:?}: {}",
            std::fs::read_to_string(log).unwrap_or_default()
        );
        // A poll interval for a readiness answer, not a synchronising sleep.
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn log_to(child: &mut Child, log: PathBuf) {
    if let Some(err) = child.stderr.take() {
        // The harness's pipe reader (a named thread, as the other harness readers).
        let _ = std::thread::Builder::new().name("farm-log".into()).spawn(move || {
            let mut out = String::new();
            for line in BufReader::new(err).lines().map_while(Result::ok) {
                out.push_str(&line);
                out.push('\n');
                let _ = std::fs::write(&log, &out);
            }
        });
    }
}

impl ReapiFarm {
    /// Starts PostgreSQL and BuildGrid (no bots yet), or `None` with the reason printed when
    /// either is not installed.
    pub fn start() -> Option<Self> {
        let Some(bgd) = crate::buildgrid::bgd() else {
            crate::skip_for_missing(
                "BuildGrid is not installed (set PROVA_BUILDGRID or run .ci/run)",
            );
            return None;
        };
        let Some(pg) = pg_bin() else {
            crate::skip_for_missing(
                "PostgreSQL is not installed (BuildGrid's scheduler needs it; .ci/run installs it)",
            );
            return None;
        };
        let dir = tempfile::tempdir().expect("a temp dir");
        let data = dir.path().join("pg");
        std::fs::create_dir_all(&data).expect("the database dir");
        if as_root() {
            let ok = Command::new("chown").arg("-R").arg("postgres").arg(dir.path()).status();
            assert!(ok.is_ok_and(|s| s.success()), "chown to postgres");
        }
        let init = pg_command(&pg.join("initdb"))
            .args(["-A", "trust", "-U", "postgres", "-D"])
            .arg(data.join("data"))
            .output()
            .expect("running initdb");
        assert!(init.status.success(), "initdb: {}", String::from_utf8_lossy(&init.stderr));
        let pg_port = free_port();
        let mut postgres = pg_command(&pg.join("postgres"))
            .arg("-D")
            .arg(data.join("data"))
            .arg("-k")
            .arg(&data)
            .args(["-h", "127.0.0.1", "-p", &pg_port.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("starting postgres");
        let pg_log = dir.path().join("pg.log");
        log_to(&mut postgres, pg_log.clone());
        let url = format!("postgresql+psycopg2://postgres@127.0.0.1:{pg_port}/postgres");
        wait_until("postgres", &mut postgres, &pg_log, || {
            std::fs::read_to_string(&pg_log)
                .is_ok_and(|l| l.contains("ready to accept connections"))
        });
        let migrate =
            Command::new(&bgd).args(["migrate", "apply", &url]).output().expect("bgd migrate");
        assert!(
            migrate.status.success(),
            "bgd migrate apply: {}",
            String::from_utf8_lossy(&migrate.stderr)
        );
        let port = free_port();
        let cas = dir.path().join("cas");
        std::fs::create_dir_all(&cas).expect("the CAS dir");
        let config = format!(
            "server:\n  - !channel\n    address: \"127.0.0.1:{port}\"\n    insecure-mode: true\n\
             authorization:\n  method: none\n\
             connections:\n  - !sql-connection &sql\n    connection-string: {url}\n    pool-size: 5\n    max-overflow: 10\n\
             storages:\n  - !disk-storage &cas\n    path: {cas}\n\
             caches:\n  - !lru-action-cache &ac\n    storage: *cas\n    max-cached-refs: 100000\n    allow-updates: true\n    cache-failed-actions: false\n\
             schedulers:\n  - !sql-scheduler &sched\n    sql: *sql\n    storage: *cas\n    action-cache: *ac\n    poll-interval: 0.05\n    bot-poll-interval: 0.05\n    assigners:\n      - !priority-age-assigner\n        count: 1\n        interval: 0.05\n        jitter-factor: 0.01\n\
             instances:\n  - name: ''\n    services:\n      - !action-cache\n        cache: *ac\n      - !cas\n        storage: *cas\n      - !bytestream\n        storage: *cas\n      - !execution\n        scheduler: *sched\n      - !bots\n        scheduler: *sched\n",
            cas = cas.display()
        );
        let file = dir.path().join("bgd.yml");
        std::fs::write(&file, config).expect("writing the BuildGrid config");
        let mut grid = Command::new(&bgd)
            .args(["server", "start"])
            .arg(&file)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("starting bgd");
        let grid_log = dir.path().join("bgd.log");
        log_to(&mut grid, grid_log.clone());
        let mut farm = Self { postgres, grid, bots: Vec::new(), port, dir };
        let rt =
            tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
        let client = {
            let _in = rt.enter(); // the channel is built inside a runtime
            farm.client()
        };
        wait_until("bgd", &mut farm.grid, &grid_log, || rt.block_on(client.capabilities()).is_ok());
        Some(farm)
    }

    /// A REAPI client of the server (call inside a tokio runtime).
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

    /// `grpc://127.0.0.1:PORT`.
    pub fn endpoint(&self) -> String {
        format!("grpc://127.0.0.1:{}", self.port)
    }

    /// Starts a bot named `name` with `slots` sessions, and waits for its announcement.
    pub fn add_bot(&mut self, name: &str, slots: u32) {
        self.add_bot_with_env(name, slots, &[]);
    }

    /// [`add_bot`](Self::add_bot), with `env` set in the bot's own environment (its `PATH`:
    /// what the commands it runs find).
    pub fn add_bot_with_env(&mut self, name: &str, slots: u32, env: &[(&str, &str)]) {
        let work = self.dir.path().join(format!("bot-{name}"));
        let mut child = Command::new(crate::prova_bin())
            .envs(env.iter().copied())
            .args(["worker", "--reapi-bot", &self.endpoint(), "--bot-name", name])
            .args(["--slots", &slots.to_string(), "--sandbox", "none"])
            .arg("--work-dir")
            .arg(&work)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("starting prova worker --reapi-bot");
        log_to(&mut child, self.dir.path().join(format!("bot-{name}.log")));
        let mut line = String::new();
        let out = child.stdout.take().expect("the bot's stdout");
        BufReader::new(out).read_line(&mut line).expect("the bot's first line");
        assert!(line.starts_with("reapi bot "), "the bot announced: {line:?}");
        self.bots.push(child);
    }

    /// What the server logged so far (for failure messages).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("bgd.log")).unwrap_or_default()
    }
}

impl Drop for ReapiFarm {
    fn drop(&mut self) {
        for b in &mut self.bots {
            let _ = b.kill();
            let _ = b.wait();
        }
        let _ = self.grid.kill();
        let _ = self.grid.wait();
        if as_root() {
            // runuser's child: stop the server itself (fast shutdown), then runuser exits.
            let pid = std::fs::read_to_string(self.dir.path().join("pg/data/postmaster.pid"))
                .ok()
                .and_then(|t| t.lines().next().and_then(|l| l.trim().parse::<i32>().ok()));
            if let Some(pid) = pid {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGINT,
                );
            }
        } else {
            let _ = self.postgres.kill();
        }
        let _ = self.postgres.wait();
    }
}
