//! The farm's trust boundaries, against a real coordinator process: mutual TLS (no
//! certificate, another CA's, a certificate of the wrong role on either API), the trust tiers
//! of the farm cache (`client` entries never reach `ci` runs), and the sandbox (a task sees
//! only its declared inputs and can write only its declared outputs).
//!
//! The `prova` client refuses some of these before it dials (a worker bundle for `run`, a
//! client bundle for `worker`); the coordinator's own checks are exercised with raw QUIC
//! connections speaking the wire protocol directly.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use prova_protocol::transport::{Bundle, endpoint, frame, tls};
use prova_protocol::wire::{
    ClientMsg, CoordinatorReply, Hello, HelloReply, PROTOCOL_VERSION, WorkerInfo, WorkerMsg,
};
use prova_tests::cluster::{Cluster, READY_TIMEOUT, worker_of, workers_of};
use prova_tests::{Output, ProvaCmd, TempWorkspace};

/// Every raw exchange's bound: far above a loopback round trip.
const WAIT: Duration = Duration::from_secs(15);

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a tokio runtime")
}

fn addr(farm: &Cluster) -> SocketAddr {
    farm.addr().parse().expect("the coordinator's address")
}

/// Dials the coordinator with `config`, says `Hello` as `role`, and returns the reply (or
/// why there was none) with the connection and its control stream.
async fn hello(
    addr: SocketAddr,
    config: quinn::ClientConfig,
    role: &str,
) -> (Result<HelloReply, String>, Option<Dialled>) {
    let mut ep = quinn::Endpoint::client("127.0.0.1:0".parse().expect("an address")).expect("bind");
    ep.set_default_client_config(config);
    let conn = match tokio::time::timeout(WAIT, endpoint::connect(&ep, addr, "127.0.0.1")).await {
        Ok(Ok(c)) => c,
        Ok(Err(e)) => return (Err(e.to_string()), None),
        Err(_) => panic!("the handshake did not end within {WAIT:?}"),
    };
    let exchange = async {
        let (mut send, mut recv) = conn.open_bi().await.map_err(|e| e.to_string())?;
        let msg = Hello {
            protocol_version: PROTOCOL_VERSION,
            build_version: "a raw test client".to_owned(),
            role: role.to_owned(),
            capabilities: Vec::new(),
        };
        frame::write_msg(&mut send, &msg).await.map_err(|e| e.to_string())?;
        match frame::read_msg::<_, HelloReply>(&mut recv).await {
            Ok(Some(r)) => Ok((r, send, recv)),
            Ok(None) => Err("the coordinator closed the stream".to_owned()),
            Err(e) => Err(format!("{e} (close: {:?})", conn.close_reason())),
        }
    };
    match tokio::time::timeout(WAIT, exchange).await.expect("the Hello exchange is bounded") {
        Ok((reply, send, recv)) => (Ok(reply), Some(Dialled { _ep: ep, conn, send, recv })),
        Err(e) => (Err(e), None),
    }
}

/// A raw connection past `Hello`.
struct Dialled {
    _ep: quinn::Endpoint,
    conn: quinn::Connection,
    send: quinn::SendStream,
    recv: quinn::RecvStream,
}

fn bundle(dir: &Path) -> Bundle {
    Bundle::load(dir).unwrap_or_else(|e| panic!("loading {}: {e}", dir.display()))
}

/// `prova certs init` of a second, unrelated cluster CA, with a `ci` and a `worker` bundle.
fn other_ca(dir: &Path) -> PathBuf {
    let root = dir.join("other-ca");
    let root_s = root.to_string_lossy().into_owned();
    ProvaCmd::new(dir, ["certs", "init", &root_s]).run().assert_code(0);
    for (role, name) in [("ci", "ci9"), ("worker", "w9")] {
        ProvaCmd::new(dir, ["certs", "issue", &root_s, "--role", role, "--name", name])
            .run()
            .assert_code(0);
    }
    root
}

/// A bundle that trusts `ca_of`'s CA (so it accepts our coordinator) but presents the
/// certificate and key of `cert_of`.
fn mixed_bundle(at: &Path, ca_of: &Path, cert_of: &Path) -> PathBuf {
    std::fs::create_dir_all(at).expect("mkdir");
    std::fs::copy(ca_of.join("ca.pem"), at.join("ca.pem")).expect("copy ca.pem");
    for f in ["cert.pem", "key.pem"] {
        std::fs::copy(cert_of.join(f), at.join(f)).expect("copy the leaf");
    }
    at.to_owned()
}

/// A one-project workspace whose build writes `dist/out.txt`.
fn small_workspace(text: &str) -> TempWorkspace {
    TempWorkspace::new()
        .file(
            "prova.toml",
            "[workspace]\nprojects = [\"p\"]\n[tasks.build]\n\
             command = \"mkdir -p dist && cat src/in.txt > dist/out.txt\"\n\
             inputs = [\"src/**\"]\noutputs = [\"dist/**\"]\n",
        )
        .file("p/src/in.txt", text)
}

fn assert_refused_cleanly(out: &Output, needles: &[&str]) {
    out.assert_code(2);
    for n in needles {
        out.assert_stderr_contains(n);
    }
}

#[test]
fn a_client_without_a_certificate_is_refused() {
    let farm = Cluster::start(1);
    let ca = bundle(&farm.ci_certs()).ca;
    let mut roots = rustls::RootCertStore::empty();
    roots.add(ca).expect("the cluster CA");
    let mut crypto = rustls::ClientConfig::builder_with_provider(tls::provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .expect("TLS 1.3")
        .with_root_certificates(roots)
        .with_no_client_auth();
    crypto.alpn_protocols = vec![tls::ALPN.to_vec()];
    let quic = quinn::crypto::rustls::QuicClientConfig::try_from(Arc::new(crypto)).expect("QUIC");
    let config = quinn::ClientConfig::new(Arc::new(quic));

    let (reply, _) = runtime().block_on(hello(addr(&farm), config, "ci"));
    let err = reply.expect_err("a client without a certificate got an answer");
    assert!(err.to_lowercase().contains("certificate"), "{err}");
    // The client feels the refusal before the coordinator's connection task logs it.
    farm.wait_for_coordinator_log("connection refused", READY_TIMEOUT);
    // The coordinator is unharmed.
    assert_eq!(workers_of(&farm.status()).len(), 1);
}

#[test]
fn certificates_from_another_ca_are_refused_on_both_apis() {
    let farm = Cluster::start(1);
    let scratch = tempfile::tempdir().expect("temp dir");
    let other = other_ca(scratch.path());
    let ws = small_workspace("x\n");

    // Wholly another cluster's bundle: it does not even trust our coordinator.
    let out = farm.run_as(&ws, &other.join("ci9"), ["build", "--all"]);
    assert_refused_cleanly(&out, &["cannot reach", "UnknownIssuer"]);
    // Trusting our CA but presenting another CA's certificate: the coordinator refuses it.
    let mixed =
        mixed_bundle(&scratch.path().join("mixed-ci"), &farm.ci_certs(), &other.join("ci9"));
    let out = farm.run_as(&ws, &mixed, ["build", "--all"]);
    assert_refused_cleanly(&out, &["refused the connection", "a bundle of this cluster"]);
    assert!(!ws.exists("p/dist"), "nothing ran");

    // The same for a worker: it is refused and exits, and never joins.
    let mixed = mixed_bundle(&scratch.path().join("mixed-w"), &farm.ci_certs(), &other.join("w9"));
    let mixed_s = mixed.to_string_lossy().into_owned();
    let work = scratch.path().join("work").to_string_lossy().into_owned();
    let out = ProvaCmd::new(
        farm.root(),
        [
            "worker",
            "--join",
            farm.addr(),
            "--certs",
            &mixed_s,
            "--work-dir",
            &work,
            "--sandbox=none",
        ],
    )
    .timeout(Duration::from_secs(60))
    .run();
    assert_refused_cleanly(&out, &["the coordinator refused this worker"]);
    let status = farm.status();
    assert!(worker_of(&status, "w9").is_none(), "{status:#}");
    assert_eq!(farm.farm_entries(), 0);
}

#[test]
fn a_worker_certificate_cannot_use_the_client_api() {
    let farm = Cluster::start(1);
    let w1 = farm.root().join("certs/w1");
    let ws = small_workspace("x\n");

    // The client says so before it dials…
    let out = farm.run_as(&ws, &w1, ["build", "--all"]);
    assert_refused_cleanly(
        &out,
        &["holds a worker certificate", "cannot use the farm's client API"],
    );
    assert!(!ws.exists("p/dist"));

    // …and the coordinator enforces it: a worker certificate gets the worker API only.
    let config = tls::client_config(&bundle(&w1)).expect("a client config");
    let rt = runtime();
    let (reply, dialled) = rt.block_on(hello(addr(&farm), config, "worker"));
    assert!(matches!(reply, Ok(HelloReply::Welcome(_))), "{reply:?}");
    let mut d = dialled.expect("connected");
    let answer = rt.block_on(async {
        frame::write_msg(&mut d.send, &ClientMsg::Status).await.map_err(|e| e.to_string())?;
        let reply = tokio::time::timeout(WAIT, frame::read_msg::<_, CoordinatorReply>(&mut d.recv))
            .await
            .expect("bounded");
        match reply {
            Ok(Some(r)) => Ok(format!("{r:?}")),
            _ => Err(d.conn.close_reason().map(|r| r.to_string()).unwrap_or_default()),
        }
    });
    let why = answer.expect_err("the coordinator answered a worker certificate's Status");
    assert!(why.contains("may only register as a worker"), "{why}");
    // The real w1 is still registered and working.
    let status = farm.status();
    assert_eq!(worker_of(&status, "w1").expect("w1")["slots"], 2, "{status:#}");
    farm.run(&ws, ["build", "--all"]).assert_code(0);
}

#[test]
fn a_client_certificate_cannot_register_as_a_worker() {
    let farm = Cluster::start(1);
    let pr = farm.client_certs("client", "pr1");
    let pr_s = pr.to_string_lossy().into_owned();

    // `prova worker` refuses the bundle itself.
    let out = ProvaCmd::new(
        farm.root(),
        ["worker", "--join", farm.addr(), "--certs", &pr_s, "--work-dir", "w", "--sandbox=none"],
    )
    .run();
    assert_refused_cleanly(&out, &["holds a client certificate", "needs a worker bundle"]);

    let rt = runtime();
    // Claiming the worker role with a client certificate is rejected at `Hello`.
    let config = tls::client_config(&bundle(&pr)).expect("a client config");
    let (reply, _) = rt.block_on(hello(addr(&farm), config.clone(), "worker"));
    match reply {
        Ok(HelloReply::Reject(r)) => {
            assert!(r.reason.contains("is for role `client`"), "{}", r.reason)
        }
        other => panic!("a client certificate claiming the worker role got {other:?}"),
    }
    // Honest about its role, then trying to register: the client API has no such request.
    let (reply, dialled) = rt.block_on(hello(addr(&farm), config, "client"));
    assert!(matches!(reply, Ok(HelloReply::Welcome(_))), "{reply:?}");
    let mut d = dialled.expect("connected");
    let info = WorkerInfo {
        slots: 64,
        os: std::env::consts::OS.to_owned(),
        arch: std::env::consts::ARCH.to_owned(),
        labels: BTreeMap::new(),
        sandbox: "none".to_owned(),
        running: Vec::new(),
        health: None,
    };
    let ended = rt.block_on(async {
        frame::write_msg(&mut d.send, &WorkerMsg::Register(info))
            .await
            .map_err(|e| e.to_string())?;
        tokio::time::timeout(WAIT, frame::read_msg::<_, CoordinatorReply>(&mut d.recv))
            .await
            .expect("bounded")
            .map_err(|e| e.to_string())
    });
    assert!(!matches!(ended, Ok(Some(_))), "a Register on the client API was answered: {ended:?}");
    let status = farm.status();
    assert!(worker_of(&status, "pr1").is_none(), "a client certificate registered: {status:#}");
    assert_eq!(workers_of(&status).len(), 1);
}

/// The farm cache's entries per namespace (`""` trusted, `untrusted/<identity>`).
fn namespaces(farm: &Cluster) -> BTreeMap<String, u64> {
    let stats = farm.farm_cache_stats();
    stats["entries"]
        .as_object()
        .map(|m| m.iter().map(|(k, v)| (k.clone(), v.as_u64().unwrap_or(0))).collect())
        .unwrap_or_default()
}

#[test]
fn client_tier_entries_are_never_served_to_ci_runs_but_ci_entries_serve_clients() {
    let farm = Cluster::start(2);
    let pr = farm.client_certs("client", "pr1");

    // A pull request builds first: its entry goes to the untrusted namespace.
    let out = farm.run_as(&small_workspace("one\n"), &pr, ["build", "--all", "--json"]);
    out.assert_code(0);
    assert_eq!(out.cache_of("p#build"), "saved", "{out}");
    assert_eq!(namespaces(&farm), BTreeMap::from([("untrusted/pr1".to_owned(), 1)]));

    // CI builds the same key (another clone): it must execute, not hit the PR's entry.
    let ci_ws = small_workspace("one\n");
    let out = farm.run(&ci_ws, ["build", "--all", "--json"]);
    out.assert_code(0);
    assert_eq!(out.cache_of("p#build"), "saved", "a ci run was served a client-tier entry\n{out}");
    assert!(!out.report("p#build")["worker"].is_null(), "{out}");
    assert_eq!(ci_ws.read("p/dist/out.txt"), "one\n");
    assert_eq!(
        namespaces(&farm),
        BTreeMap::from([(String::new(), 1), ("untrusted/pr1".to_owned(), 1)])
    );

    // The other way round: CI first, then a pull request with the same key hits CI's entry.
    let out = farm.run(&small_workspace("two\n"), ["build", "--all", "--json"]);
    out.assert_code(0);
    assert_eq!(out.cache_of("p#build"), "saved", "{out}");
    let pr_ws = small_workspace("two\n");
    let out = farm.run_as(&pr_ws, &pr, ["build", "--all", "--json"]);
    out.assert_code(0);
    assert_eq!(out.cache_of("p#build"), "hit", "{out}");
    assert_eq!(out.report("p#build")["cache"]["layer"], "farm", "{out}");
    assert_eq!(pr_ws.read("p/dist/out.txt"), "two\n");
    assert_eq!(
        namespaces(&farm),
        BTreeMap::from([(String::new(), 2), ("untrusted/pr1".to_owned(), 1)])
    );
}

#[test]
fn a_sandboxed_task_sees_only_its_inputs_and_writes_only_its_outputs() {
    let farm = Cluster::start(1); // bubblewrap
    let ws =
        TempWorkspace::new().file("p/src/a.txt", "declared\n").file("p/secret.txt", "undeclared\n");
    let abs = ws.path("p").to_string_lossy().into_owned();
    // Each task its own outputs, `dist-<name>/**` (`DIST` in its command).
    let task = |name: &str, command: &str| {
        let command = command.replace("DIST", &format!("dist-{name}"));
        format!(
            "[tasks.{name}]\ncommand = '{command}'\ninputs = [\"src/**\"]\n\
             outputs = [\"dist-{name}/**\"]\n"
        )
    };
    let toml = [
        "[workspace]\nprojects = [\"p\"]\n".to_owned(),
        task("list", "find . -type f | sort"),
        task("readsecret", "cat secret.txt"),
        task("readabs", &format!("cat {abs}/secret.txt")),
        task("writeproj", "echo x > notes.txt"),
        task("writeparent", "echo x > ../escaped.txt"),
        task("writeabs", &format!("echo x > {abs}/escaped.txt")),
        task("writeout", "mkdir -p DIST && echo ok > DIST/ok.txt"),
        // Other routes out of the writable project directory: a new directory beside dist,
        // a symlink, a rename of a source, a file written and the outputs made anyway.
        task("writedir", "mkdir -p cache/deep && echo x > cache/deep/x.txt && mkdir -p DIST"),
        task("writelink", "ln -s src/a.txt alias && mkdir -p DIST"),
        task("renamesrc", "mv src/a.txt src/b.txt"),
        task("movesrc", "mv src moved"),
    ]
    .concat();
    ws.write("prova.toml", &toml);
    let tasks = [
        "list",
        "readsecret",
        "readabs",
        "writeproj",
        "writeparent",
        "writeabs",
        "writeout",
        "writedir",
        "writelink",
        "renamesrc",
        "movesrc",
    ];
    let mut args: Vec<&str> = tasks.to_vec();
    args.extend(["--all", "--continue", "--json"]);
    let out = farm.run(&ws, args);
    out.assert_code(1);

    // The exec root holds exactly the declared inputs.
    assert_eq!(out.status_of("p#list"), "succeeded", "{out}");
    assert_eq!(out.output_of("p#list"), "./src/a.txt\n", "{out}");
    // Undeclared files are not there, by relative or absolute path. `secret.txt` sits in the
    // project directory, whose names the key folds: it is listed, and any open of it fails.
    for (t, error) in
        [("p#readsecret", "No such device or address"), ("p#readabs", "No such file or directory")]
    {
        assert_eq!(out.status_of(t), "failed", "{t} read an undeclared file\n{out}");
        assert!(out.output_of(t).contains(error), "{t}\n{out}");
    }
    // Nothing outside the declared outputs is written without failing the task.
    let routes = ["writeproj", "writeparent", "writeabs", "writedir", "writelink", "renamesrc"];
    for t in routes.iter().chain(&["movesrc"]) {
        let t = format!("p#{t}");
        assert_eq!(out.status_of(&t), "failed", "{t} wrote outside its outputs\n{out}");
    }
    // Beside the outputs the project directory is writable (`rm -rf dist-…` works): what
    // lands there is named, and the task fails rather than pass without it.
    let note = |t: &str| out.report(t)["note"].as_str().unwrap_or_default().to_owned();
    for (t, path) in [
        ("p#writeproj", "`p/notes.txt`"),
        ("p#writedir", "`p/cache`"),
        ("p#writelink", "`p/alias`"),
    ] {
        let n = note(t);
        assert!(
            n.contains("wrote outside its declared outputs") && n.contains(path),
            "{t}: {n}\n{out}"
        );
        assert!(!n.contains("cache/deep"), "a new directory stands for what it holds: {n}");
    }
    // Above the project, and the sources and their directory, the file system is
    // read-only; the workspace is not there at all.
    for t in ["p#writeparent", "p#renamesrc"] {
        assert!(out.output_of(t).contains("Read-only file system"), "{t}\n{out}");
    }
    assert!(out.output_of("p#movesrc").contains("mv: cannot move"), "{out}");
    assert_eq!(out.status_of("p#writeout"), "succeeded", "{out}");
    assert_eq!(ws.read("p/dist-writeout/ok.txt"), "ok\n");
    assert_eq!(ws.read("p/src/a.txt"), "declared\n");
    for leaked in ["p/notes.txt", "escaped.txt", "p/escaped.txt", "p/cache", "p/alias", "p/moved"] {
        assert!(!ws.exists(leaked), "{leaked} appeared in the workspace");
    }
    assert_eq!(out.report("p#writeout")["worker"], "w1");
}
