//! Admission against a real coordinator process (issue 10: "one `client` certificate held
//! 510 connections: every other peer — admin, CI, a restarting worker — timed out"). One
//! client identity holds as many connections as it is allowed and keeps dialling; its extra
//! connections are refused with a reason, while an admin's `farm status`, a CI run and another
//! developer's run all go through. Raw connections speak the wire protocol directly.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use prova_protocol::transport::{Bundle, endpoint, frame, tls};
use prova_protocol::wire::{Hello, HelloReply, PROTOCOL_VERSION};
use prova_tests::cluster::Cluster;
use prova_tests::{ProvaCmd, TempWorkspace};

/// Every raw exchange's bound: far above a loopback round trip.
const WAIT: Duration = Duration::from_secs(15);
/// More connections than any one client certificate may hold (the default share is 16).
const ATTEMPTS: usize = 40;

/// A connection past `Hello`, kept open while held.
struct Held {
    ep: quinn::Endpoint,
    conn: quinn::Connection,
    _send: quinn::SendStream,
    _recv: quinn::RecvStream,
}

/// Dials and says `Hello` as `role`; `Ok` with the open connection when welcomed, `Err` with
/// the coordinator's reason when rejected.
async fn dial(addr: SocketAddr, config: quinn::ClientConfig, role: &str) -> Result<Held, String> {
    let mut ep = quinn::Endpoint::client("127.0.0.1:0".parse().expect("an address")).expect("bind");
    ep.set_default_client_config(config);
    let conn = tokio::time::timeout(WAIT, endpoint::connect(&ep, addr, "127.0.0.1"))
        .await
        .expect("the handshake is bounded")
        .map_err(|e| e.to_string())?;
    let (mut send, mut recv) = conn.open_bi().await.map_err(|e| e.to_string())?;
    let hello = Hello {
        protocol_version: PROTOCOL_VERSION,
        build_version: "a raw test client".to_owned(),
        role: role.to_owned(),
        capabilities: Vec::new(),
    };
    frame::write_msg(&mut send, &hello).await.map_err(|e| e.to_string())?;
    let reply = tokio::time::timeout(WAIT, frame::read_msg::<_, HelloReply>(&mut recv))
        .await
        .expect("the Hello reply is bounded");
    match reply {
        Ok(Some(HelloReply::Welcome(_))) => Ok(Held { ep, conn, _send: send, _recv: recv }),
        Ok(Some(HelloReply::Reject(r))) => {
            // Close at once: the coordinator waits for the close after a refusal.
            conn.close(0u32.into(), b"refused");
            ep.wait_idle().await;
            Err(r.reason)
        }
        Ok(None) => Err("closed".to_owned()),
        Err(e) => Err(e.to_string()),
    }
}

fn config(dir: &Path) -> quinn::ClientConfig {
    let bundle = Bundle::load(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    tls::client_config(&bundle).expect("a client config")
}

fn small_workspace() -> TempWorkspace {
    TempWorkspace::new()
        .file(
            "prova.toml",
            "[workspace]\nprojects = [\"p\"]\n[tasks.build]\n\
             command = \"mkdir -p dist && cat src/in.txt > dist/out.txt\"\n\
             inputs = [\"src/**\"]\noutputs = [\"dist/**\"]\n",
        )
        .file("p/src/in.txt", "hello\n")
}

#[test]
fn one_client_identity_cannot_starve_admins_ci_or_other_clients() {
    let farm = Cluster::start(1);
    let addr: SocketAddr = farm.addr().parse().expect("the coordinator's address");
    let alice = farm.client_certs("client", "alice");
    let bob = farm.client_certs("client", "bob");
    let admin = farm.client_certs("admin", "ops");
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("tokio");

    // Alice dials ATTEMPTS times and holds every connection she gets.
    let (held, refused) = rt.block_on(async {
        let mut held = Vec::new();
        let mut refused = Vec::new();
        for _ in 0..ATTEMPTS {
            match dial(addr, config(&alice), "client").await {
                Ok(h) => held.push(h),
                Err(reason) => refused.push(reason),
            }
        }
        (held, refused)
    });
    assert!(!held.is_empty(), "alice got no connection at all: {refused:?}");
    assert!(
        held.len() < ATTEMPTS,
        "one client certificate held all {ATTEMPTS} connections: nothing bounds an identity"
    );
    assert_eq!(held.len() + refused.len(), ATTEMPTS);
    for r in &refused {
        assert!(r.contains("`alice` (client) already holds"), "refusal says why: {r}");
    }

    // While she holds them: an admin's status, a CI run and another developer's run.
    let mut args = vec!["farm".to_owned(), "status".to_owned(), "--json".to_owned()];
    args.extend(farm.remote_args(&admin));
    let status = ProvaCmd::new(farm.root(), args).run();
    assert_eq!(status.code(), Some(0), "admin status while alice holds her share\n{status}");

    let ws = small_workspace();
    let out = farm.run(&ws, ["build", "--all"]);
    assert_eq!(out.code(), Some(0), "a ci run while alice holds her share\n{out}\n{}", farm.logs());
    let ws2 = small_workspace();
    let out = farm.run_as(&ws2, &bob, ["build", "--all"]);
    assert_eq!(out.code(), Some(0), "bob's run while alice holds her share\n{out}");

    // Her connections give their share back when they close: she can dial again.
    let again = rt.block_on(async {
        for h in held {
            h.conn.close(0u32.into(), b"done");
            h.ep.wait_idle().await;
        }
        // The coordinator handles the close frames on its own time: a bounded poll (as
        // `Cluster::wait_for_status` does), not a wait of a guessed length.
        for _ in 0..50 {
            match dial(addr, config(&alice), "client").await {
                Ok(h) => return Ok(h),
                Err(r) if r.contains("already holds") => {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(r) => return Err(r),
            }
        }
        Err("still refused after her connections closed".to_owned())
    });
    assert!(again.is_ok(), "{:?}", again.err());
    drop(rt);
}
