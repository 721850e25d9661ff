//! The farm's trust tiers hold data as well as entries (issue 10): a log is data of the tier
//! that produced it (a `client` run that hits a `ci` entry gets its outputs, never its log —
//! not on the terminal, not in `--json`, not in the client's local cache); untrusted entries
//! belong to one certificate identity (one developer's entries never serve another's runs);
//! a blob is fetched only by who may see it; a client's stored bytes are bounded.

use std::fs;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use prova_protocol::Digest;
use prova_protocol::transport::{self, Bundle, endpoint, frame, tls};
use prova_protocol::wire::{
    BlobAck, BlobRequest, ClientMsg, CoordinatorReply, Hello, HelloReply, PROTOCOL_VERSION,
};
use prova_tests::TempWorkspace;
use prova_tests::cache::files_holding;
use prova_tests::cluster::Cluster;

/// Every raw exchange's bound: far above a loopback round trip.
const WAIT: Duration = Duration::from_secs(15);

/// What the task prints: computed by the shell, so neither `prova.toml` nor a key
/// component holds it — only a log can.
const SENTINEL: &str = "tier-sentinel-42-c1d9";
const PRINTS_SENTINEL: &str = "echo tier-sentinel-$((6*7))-c1d9";

fn workspace(text: &str) -> TempWorkspace {
    TempWorkspace::new()
        .file(
            "prova.toml",
            &format!(
                "[workspace]\nprojects = [\"p\"]\n[tasks.build]\n\
                 command = \"{PRINTS_SENTINEL}; cat src/in.txt; mkdir -p dist && cat src/in.txt > dist/out.txt\"\n\
                 inputs = [\"src/**\"]\noutputs = [\"dist/**\"]\n"
            ),
        )
        .file("p/src/in.txt", text)
}

#[test]
fn a_client_hit_on_a_ci_entry_replays_no_log_anywhere() {
    let farm = Cluster::start(1);
    let pr = farm.client_certs("client", "pr1");

    let out = farm.run(&workspace("one\n"), ["build", "--all", "--json"]);
    out.assert_code(0);
    assert_eq!(out.cache_of("p#build"), "saved", "{out}");
    assert!(out.output_of("p#build").contains(SENTINEL), "the ci run prints it\n{out}");

    // A pull request with the same key hits CI's entry: outputs, but not CI's log.
    for json in [true, false] {
        let ws = workspace("one\n");
        let mut args = vec!["build", "--all"];
        if json {
            args.push("--json");
        }
        let out = farm.run_as(&ws, &pr, args);
        out.assert_code(0);
        assert!(!out.stdout.contains(SENTINEL), "a client run got ci's log\n{out}");
        assert!(!out.stderr.contains(SENTINEL), "a client run got ci's log\n{out}");
        assert!(out.stdout.contains("log not replayed: entry produced by a ci run"), "{out}");
        if json {
            assert_eq!(out.cache_of("p#build"), "hit", "{out}");
            assert_eq!(out.report("p#build")["cache"]["layer"], "farm", "{out}");
        }
        assert_eq!(ws.read("p/dist/out.txt"), "one\n", "the outputs still come home");
        let leaked = files_holding(&ws.path(".prova"), SENTINEL);
        assert!(leaked.is_empty(), "the client's local cache holds ci's log: {leaked:?}");
    }

    // Another CI clone hits its own tier's entry: its log replays.
    let out = farm.run(&workspace("one\n"), ["build", "--all", "--json"]);
    out.assert_code(0);
    assert_eq!(out.cache_of("p#build"), "hit", "{out}");
    assert!(out.output_of("p#build").contains(SENTINEL), "own tier replays\n{out}");
}

#[test]
fn a_client_hit_on_its_own_entry_replays_its_log() {
    let farm = Cluster::start(1);
    let pr = farm.client_certs("client", "pr1");
    let out = farm.run_as(&workspace("mine\n"), &pr, ["build", "--all", "--json"]);
    out.assert_code(0);
    assert_eq!(out.cache_of("p#build"), "saved", "{out}");
    let out = farm.run_as(&workspace("mine\n"), &pr, ["build", "--all", "--json"]);
    out.assert_code(0);
    assert_eq!(out.cache_of("p#build"), "hit", "{out}");
    assert!(out.output_of("p#build").contains(SENTINEL), "its own log replays\n{out}");
}

#[test]
fn one_clients_entry_never_serves_another_client() {
    let farm = Cluster::start(1);
    let (alice, bob) = (farm.client_certs("client", "alice"), farm.client_certs("client", "bob"));
    let out = farm.run_as(&workspace("shared\n"), &alice, ["build", "--all", "--json"]);
    out.assert_code(0);
    assert_eq!(out.cache_of("p#build"), "saved", "{out}");

    // Bob's run of the same key executes: Alice's entry could be poisoned.
    let ws = workspace("shared\n");
    let out = farm.run_as(&ws, &bob, ["build", "--all", "--json"]);
    out.assert_code(0);
    assert_eq!(out.cache_of("p#build"), "saved", "bob was served alice's entry\n{out}");
    assert!(!out.report("p#build")["worker"].is_null(), "{out}");
    assert_eq!(ws.read("p/dist/out.txt"), "shared\n");

    // Each hits their own.
    for who in [&alice, &bob] {
        let out = farm.run_as(&workspace("shared\n"), who, ["build", "--all", "--json"]);
        out.assert_code(0);
        assert_eq!(out.cache_of("p#build"), "hit", "{out}");
    }
    let stats = farm.farm_cache_stats();
    assert_eq!(stats["entries"]["untrusted/alice"], 1, "{stats:#}");
    assert_eq!(stats["entries"]["untrusted/bob"], 1, "{stats:#}");
}

/// A raw peer past `Hello`, speaking the wire protocol as the `prova` client would not.
struct Peer {
    rt: tokio::runtime::Runtime,
    _ep: quinn::Endpoint,
    conn: quinn::Connection,
    send: quinn::SendStream,
    recv: quinn::RecvStream,
}

impl Peer {
    fn dial(farm: &Cluster, certs: &Path, role: &str) -> Peer {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a tokio runtime");
        let bundle = Bundle::load(certs).expect("a bundle");
        let config = tls::client_config(&bundle).expect("a client config");
        let addr: SocketAddr = farm.addr().parse().expect("an address");
        let (ep, conn, send, recv) = rt.block_on(async {
            let mut ep =
                quinn::Endpoint::client("127.0.0.1:0".parse().expect("an address")).expect("bind");
            ep.set_default_client_config(config);
            let conn = tokio::time::timeout(WAIT, endpoint::connect(&ep, addr, "127.0.0.1"))
                .await
                .expect("bounded")
                .expect("connected");
            let (mut send, mut recv) = conn.open_bi().await.expect("a control stream");
            let hello = Hello {
                protocol_version: PROTOCOL_VERSION,
                build_version: "a raw test peer".to_owned(),
                role: role.to_owned(),
                capabilities: Vec::new(),
            };
            frame::write_msg(&mut send, &hello).await.expect("hello sent");
            let reply = tokio::time::timeout(WAIT, frame::read_msg::<_, HelloReply>(&mut recv))
                .await
                .expect("bounded");
            assert!(matches!(reply, Ok(Some(HelloReply::Welcome(_)))), "{reply:?}");
            (ep, conn, send, recv)
        });
        Peer { rt, _ep: ep, conn, send, recv }
    }

    /// `BlobRequest::Get`: the bytes, or the refusal's reason.
    fn get(&self, digest: Digest) -> Result<Vec<u8>, String> {
        let conn = self.conn.clone();
        self.rt.block_on(async move {
            let exchange = async {
                let (mut send, mut recv) = conn.open_bi().await.map_err(|e| e.to_string())?;
                frame::write_msg(&mut send, &BlobRequest::Get { digest })
                    .await
                    .map_err(|e| e.to_string())?;
                let _ = send.finish();
                match frame::read_msg::<_, BlobAck>(&mut recv).await.map_err(|e| e.to_string())? {
                    Some(BlobAck::Stored) => {}
                    Some(BlobAck::Refused { reason }) => return Err(reason),
                    None => return Err("closed".to_owned()),
                }
                let mut out = Vec::new();
                transport::recv_blob(&mut recv, &mut out, Some(digest), 1 << 30)
                    .await
                    .map_err(|e| e.to_string())?;
                Ok(out)
            };
            tokio::time::timeout(WAIT, exchange).await.expect("bounded")
        })
    }

    /// `BlobRequest::Put` of `bytes` announced as `digest`: `Ok` when stored, else the
    /// refusal's reason.
    fn put(&self, digest: Digest, bytes: &[u8]) -> Result<(), String> {
        let conn = self.conn.clone();
        let size = bytes.len() as u64;
        self.rt.block_on(async move {
            let exchange = async {
                let (mut send, mut recv) = conn.open_bi().await.map_err(|e| e.to_string())?;
                frame::write_msg(&mut send, &BlobRequest::Put { digest, size })
                    .await
                    .map_err(|e| e.to_string())?;
                // The coordinator may refuse before the bytes (and stop reading): a failed
                // send is not the answer, what it says on the stream is.
                let _ = transport::send_blob(&mut send, digest, size, bytes).await;
                let _ = send.finish();
                match frame::read_msg::<_, BlobAck>(&mut recv).await.map_err(|e| e.to_string())? {
                    Some(BlobAck::Stored) => Ok(()),
                    Some(BlobAck::Refused { reason }) => Err(reason),
                    None => Err("closed".to_owned()),
                }
            };
            tokio::time::timeout(WAIT, exchange).await.expect("bounded")
        })
    }

    /// `ClientMsg::FindMissing`.
    fn find_missing(&mut self, digests: Vec<Digest>) -> Vec<Digest> {
        let (send, recv) = (&mut self.send, &mut self.recv);
        self.rt.block_on(async move {
            frame::write_msg(send, &ClientMsg::FindMissing { digests }).await.expect("sent");
            let reply = tokio::time::timeout(WAIT, frame::read_msg::<_, CoordinatorReply>(recv))
                .await
                .expect("bounded");
            match reply {
                Ok(Some(CoordinatorReply::Missing { digests })) => digests,
                other => panic!("FindMissing answered {other:?}"),
            }
        })
    }
}

/// The farm cache's entries as (namespace, artifact, log).
fn farm_entries(farm: &Cluster) -> Vec<(String, Option<Digest>, Option<Digest>)> {
    let conn = rusqlite::Connection::open(farm.cache_dir().join("index.sqlite")).expect("index");
    let mut stmt = conn.prepare("SELECT namespace, artifact, log FROM entries").expect("query");
    let digest = |v: Option<Vec<u8>>| v.and_then(|b| <[u8; 32]>::try_from(b).ok()).map(Digest);
    stmt.query_map([], |r| Ok((r.get(0)?, digest(r.get(1)?), digest(r.get(2)?))))
        .expect("rows")
        .collect::<Result<_, _>>()
        .expect("rows")
}

#[test]
fn a_blob_is_fetched_only_by_who_may_see_it() {
    let farm = Cluster::start(1);
    let (alice, bob) = (farm.client_certs("client", "alice"), farm.client_certs("client", "bob"));
    let alice_input = "alice's unpublished input\n";
    let out = farm.run_as(&workspace(alice_input), &alice, ["build", "--all", "--json"]);
    out.assert_code(0);
    let out = farm.run(&workspace("from ci\n"), ["build", "--all", "--json"]);
    out.assert_code(0);
    let entries = farm_entries(&farm);
    let of = |ns: &str| {
        entries.iter().find(|e| e.0 == ns).cloned().unwrap_or_else(|| panic!("{entries:?}"))
    };
    let (_, a_art, a_log) = of("untrusted/alice");
    let (_, ci_art, ci_log) = of("");
    let (a_art, a_log) = (a_art.expect("an artifact"), a_log.expect("a log"));
    let (ci_art, ci_log) = (ci_art.expect("an artifact"), ci_log.expect("a log"));
    let a_input = Digest::of(alice_input.as_bytes());
    assert_ne!(a_log, ci_log, "the logs differ (each prints its input)");

    // What absence looks like: a refusal must read the same, revealing nothing.
    let bob_peer = Peer::dial(&farm, &bob, "client");
    let absent = bob_peer.get(Digest::of(b"never stored")).expect_err("absent");
    for (what, d) in [
        ("alice's artifact", a_art),
        ("alice's log", a_log),
        ("alice's input", a_input),
        ("ci's log", ci_log),
    ] {
        let why = bob_peer.get(d).expect_err(&format!("bob fetched {what}"));
        assert_eq!(
            why.replace(&d.short(), "D"),
            absent.replace(&Digest::of(b"never stored").short(), "D")
        );
    }
    // A trusted artifact serves every client.
    assert!(bob_peer.get(ci_art).is_ok(), "a ci artifact serves clients");
    // Nor does FindMissing tell bob what alice stored.
    let mut bob_peer = bob_peer;
    assert_eq!(bob_peer.find_missing(vec![a_input, a_art]), vec![a_input, a_art]);

    // Alice fetches what is hers; not ci's log.
    let mut alice_peer = Peer::dial(&farm, &alice, "client");
    for d in [a_art, a_log, a_input, ci_art] {
        alice_peer.get(d).unwrap_or_else(|e| panic!("alice could not fetch {}: {e}", d.short()));
    }
    assert!(alice_peer.get(ci_log).is_err(), "alice fetched ci's log");
    assert!(alice_peer.find_missing(vec![a_input]).is_empty());

    // A worker fetches anything (it needs every input it is assigned).
    let w = farm.client_certs("worker", "wx");
    let worker_peer = Peer::dial(&farm, &w, "worker");
    assert_eq!(worker_peer.get(a_input).expect("a worker fetches inputs"), alice_input.as_bytes());
}

#[test]
fn a_clients_uploads_stop_at_its_blob_quota() {
    let config = tempfile::tempdir().expect("a temp dir");
    let file = config.path().join("coordinator.toml");
    fs::write(&file, "client_blob_quota = \"2K\"\n").expect("config written");
    let farm = Cluster::builder()
        .workers(1)
        .coordinator_args(["--config".to_owned(), file.to_string_lossy().into_owned()])
        .start();
    let (alice, bob) = (farm.client_certs("client", "alice"), farm.client_certs("client", "bob"));

    // Within the quota: a small input uploads and the run succeeds.
    let out = farm.run_as(&workspace("small\n"), &alice, ["build", "--all"]);
    out.assert_code(0);
    // Past it: a 4 KiB input is refused, the message names the quota.
    let big = "x".repeat(4096);
    let out = farm.run_as(&workspace(&big), &alice, ["build", "--all"]);
    assert_ne!(out.code(), Some(0), "an upload past the quota was taken\n{out}");
    assert!(out.stderr.contains("blob quota") && out.stderr.contains("client_blob_quota"), "{out}");
    // The quota is per identity: bob's small upload still goes, bob's big one does not.
    farm.run_as(&workspace("bob's\n"), &bob, ["build", "--all"]).assert_code(0);
    let out = farm.run_as(&workspace(&format!("{big}b")), &bob, ["build", "--all"]);
    assert_ne!(out.code(), Some(0), "{out}");
    // CI has no quota.
    farm.run(&workspace(&big), ["build", "--all"]).assert_code(0);
}

#[test]
fn an_upload_whose_bytes_are_not_its_digest_is_refused_and_not_stored() {
    let farm = Cluster::builder().workers(1).start();
    let alice = farm.client_certs("client", "alice");
    let mut peer = Peer::dial(&farm, &alice, "client");
    let (claimed, sent) =
        (b"what the digest names".as_slice(), b"other bytes, same size".as_slice());
    let digest = Digest::of(claimed);
    let refused = peer.put(digest, sent).expect_err("bytes that are not their digest were stored");
    assert!(refused.contains(&digest.short()) || refused.contains("digest"), "{refused}");
    assert_eq!(peer.find_missing(vec![digest]), vec![digest], "the refused blob was kept");
    // The same digest with its own bytes goes in: the refusal left nothing half-stored.
    peer.put(digest, claimed).expect("the right bytes are stored");
    assert!(peer.find_missing(vec![digest]).is_empty());
}

#[test]
fn an_admin_certificates_run_is_refused_at_its_upload_with_the_coordinators_reason() {
    let farm = Cluster::builder().workers(1).start();
    let admin = farm.client_certs("admin", "ops");
    let out = farm.run_as(&workspace("an admin's input\n"), &admin, ["build", "--all"]);
    assert_ne!(out.code(), Some(0), "an admin certificate's run was taken\n{out}");
    assert!(out.stderr.contains("an admin certificate cannot upload"), "{out}");
    // A raw admin peer is told the same, and nothing is stored.
    let mut peer = Peer::dial(&farm, &admin, "admin");
    let bytes = b"an admin's blob".as_slice();
    let refused = peer.put(Digest::of(bytes), bytes).expect_err("an admin upload was stored");
    assert!(refused.contains("admin"), "{refused}");
    assert_eq!(peer.find_missing(vec![Digest::of(bytes)]), vec![Digest::of(bytes)]);
}
