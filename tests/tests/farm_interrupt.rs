//! An interrupted remote run cannot be held by its coordinator. Against a stand-in
//! coordinator that takes the run and then never answers (as a stalled farm did), `prova run
//! --remote` still sends `Interrupt` on SIGTERM and leaves after its grace period, or at once on
//! a second signal — exit 2, saying why — instead of waiting forever.

use std::net::SocketAddr;
use std::sync::mpsc as std_mpsc;

use nix::sys::signal::Signal;
use prova_protocol::task::OwnedTask;
use prova_protocol::transport::{Bundle, Role, certs, endpoint, frame};
use prova_protocol::wire::{ClientMsg, CoordinatorReply, Hello, HelloReply, Welcome};
use prova_tests::TempWorkspace;
use tempfile::TempDir;

/// What the stand-in saw of the client's session.
#[derive(Debug, PartialEq)]
enum Seen {
    Go,
    Interrupt,
}

/// A coordinator that accepts one client, answers `Hello` and `FindMissing` (nothing missing),
/// takes the run, and from then on only listens.
struct SilentCoordinator {
    _server: OwnedTask<()>,
    _rt: tokio::runtime::Runtime,
    addr: SocketAddr,
    seen: std_mpsc::Receiver<Seen>,
    certs: TempDir,
}

impl SilentCoordinator {
    fn start() -> Self {
        let certs = tempfile::tempdir().expect("a temp dir");
        certs::init(certs.path(), &certs::default_sans()).expect("a CA");
        certs::issue(certs.path(), Role::Ci, "ci1").expect("a ci bundle");
        let bundle = Bundle::load(&certs.path().join("coordinator")).expect("coordinator bundle");
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("a runtime");
        let server = rt
            .block_on(async { endpoint::server("127.0.0.1:0".parse().expect("addr"), &bundle) })
            .expect("a server endpoint");
        let addr = server.local_addr().expect("its address");
        let (tx, seen) = std_mpsc::channel();
        let task = OwnedTask::spawn_on(rt.handle(), "silent-coordinator", async move {
            let Some(incoming) = server.accept().await else { return };
            let Ok((conn, identity)) = endpoint::accept(incoming).await else { return };
            let Ok((mut send, mut recv)) = conn.accept_bi().await else { return };
            let Ok(Some(_)) = frame::read_msg::<_, Hello>(&mut recv).await else { return };
            let welcome = Welcome {
                protocol_version: prova_protocol::wire::PROTOCOL_VERSION,
                build_version: "stand-in".into(),
                peer: identity.name,
                key_salt: None,
            };
            if frame::write_msg(&mut send, &HelloReply::Welcome(welcome)).await.is_err() {
                return;
            }
            while let Ok(Some(msg)) = frame::read_msg::<_, ClientMsg>(&mut recv).await {
                match msg {
                    ClientMsg::FindMissing { .. } => {
                        let none = CoordinatorReply::Missing { digests: vec![] };
                        if frame::write_msg(&mut send, &none).await.is_err() {
                            return;
                        }
                    }
                    ClientMsg::Go => {
                        let _ = tx.send(Seen::Go);
                    }
                    ClientMsg::Interrupt => {
                        let _ = tx.send(Seen::Interrupt);
                    }
                    _ => {}
                }
            }
            // Hold the connection open until the client closes it.
            conn.closed().await;
        });
        SilentCoordinator { _server: task, _rt: rt, addr, seen, certs }
    }

    #[track_caller]
    fn expect(&self, what: Seen) {
        let got = self.seen.recv_timeout(std::time::Duration::from_secs(60));
        assert_eq!(got.ok(), Some(what));
    }
}

fn workspace() -> TempWorkspace {
    TempWorkspace::new()
        .file(
            "prova.toml",
            "[workspace]\nprojects = [\"p\"]\n[tasks.build]\ncommand = \"true\"\ninputs = [\"src.txt\"]\n",
        )
        .file("p/src.txt", "x\n")
}

fn run_against(c: &SilentCoordinator, ws: &TempWorkspace) -> prova_tests::Running {
    let certs = c.certs.path().join("ci1").to_string_lossy().into_owned();
    let remote = c.addr.to_string();
    ws.prova(["run", "build", "--all", "--remote", &remote, "--certs", &certs]).spawn()
}

/// Starts a run against a silent coordinator, signals it once the run is submitted (the
/// second signal, if any, once the coordinator saw the `Interrupt`) and waits for its end.
fn interrupted(first: Signal, second: Option<Signal>) -> prova_tests::Output {
    let c = SilentCoordinator::start();
    let ws = workspace();
    let run = run_against(&c, &ws);
    c.expect(Seen::Go);
    run.signal(first);
    c.expect(Seen::Interrupt);
    if let Some(sig) = second {
        run.signal(sig);
    }
    run.wait()
}

#[test]
fn an_interrupted_remote_run_leaves_when_the_coordinator_never_answers() {
    let out = interrupted(Signal::SIGTERM, None);
    out.assert_code(2);
    out.assert_stderr_contains("did not end the run within");
}

#[test]
fn a_second_signal_leaves_at_once() {
    let out = interrupted(Signal::SIGINT, Some(Signal::SIGINT));
    out.assert_code(2);
    out.assert_stderr_contains("interrupted again; leaving");
}
