//! `deploy/` checked against the binary it deploys (issue 4: "example coordinator and worker
//! config files and systemd units for both roles (non-root worker user, restart on failure),
//! each parsed or checked by a test"; brief §4: container file and Kubernetes manifests too).
//!
//! - The example configs parse with prova's own config types, with every key set.
//! - The systemd units restart on failure, run as a non-root user, start a command line prova's
//!   own argument parser accepts with a config that is one of `deploy/`'s files, and the
//!   worker's unit sets nothing that would stop bubblewrap; `systemd-analyze verify` checks
//!   them too where it is installed (skipped, with the reason printed, where it is not).
//! - The Dockerfile (never built here: no container engine runs on these machines) is parsed:
//!   two stages, bubblewrap and strace installed, a non-root user, UDP 7700.
//! - The Kubernetes manifests (never applied here) are parsed: kinds, the Service's 7700/UDP
//!   and selector, and their embedded configs parse like the examples.
//! - The real `prova` binary starts a coordinator and a worker from the example configs, and
//!   the worker shows up in `prova farm status` with the labels and slots of `worker.toml`.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::Parser as _;
use prova_cli::args::{Cli, CliCommand as Sub, parse_size};
use prova_cli::daemon_config::{CoordinatorFile, WorkerFile, load};
use yaml_rust2::{Yaml, YamlLoader};

/// The coordinator's default port (`prova coordinator` without `--listen`).
const DEFAULT_PORT: u16 = 7700;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("the workspace root").to_path_buf()
}

fn deploy(rel: &str) -> PathBuf {
    repo().join("deploy").join(rel)
}

fn read(rel: &str) -> String {
    let path = deploy(rel);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn port_of(addr: &str) -> u16 {
    let (_, port) = addr.rsplit_once(':').unwrap_or_else(|| panic!("{addr}: no port"));
    port.parse().unwrap_or_else(|e| panic!("{addr}: port: {e}"))
}

#[test]
fn the_default_port_is_the_coordinators() {
    // Ties DEFAULT_PORT (which the manifests below are checked against) to the code.
    let listen = prova_cli::commands::daemons::settings::DEFAULT_LISTEN;
    assert_eq!(
        port_of(listen),
        DEFAULT_PORT,
        "prova coordinator no longer defaults to port {DEFAULT_PORT}: update deploy/ and this test"
    );
}

// ---------------------------------------------------------------------------------------------
// Config files

fn coordinator_example() -> CoordinatorFile {
    load(Some(&deploy("coordinator.toml"))).expect("deploy/coordinator.toml parses")
}

fn worker_example() -> WorkerFile {
    load(Some(&deploy("worker.toml"))).expect("deploy/worker.toml parses")
}

/// Every key set, with a value prova accepts. The destructuring is exhaustive: a key added to
/// `CoordinatorFile` does not compile here until the examples show it.
fn check_coordinator_file(file: CoordinatorFile, what: &str) {
    let CoordinatorFile {
        listen,
        certs,
        cache_dir,
        trust,
        client_blob_quota,
        http,
        http_token_file,
    } = file;
    // Off by default (the example shows them commented out); when set they must parse.
    if let Some(h) = http {
        h.parse::<SocketAddr>().unwrap_or_else(|e| panic!("{what}: http {h}: {e}"));
    }
    assert!(http_token_file.is_none_or(|p| p.is_absolute()), "{what}: http_token_file");
    let listen = listen.unwrap_or_else(|| panic!("{what}: no listen"));
    let addr: SocketAddr = listen.parse().unwrap_or_else(|e| panic!("{what}: listen: {e}"));
    assert_eq!(addr.port(), DEFAULT_PORT, "{what}: listen");
    assert!(certs.is_some_and(|p| p.is_absolute()), "{what}: certs, an absolute path");
    assert!(cache_dir.is_some_and(|p| p.is_absolute()), "{what}: cache_dir, an absolute path");
    let trust = trust.unwrap_or_else(|| panic!("{what}: no trust"));
    assert!(["ci", "proven"].contains(&trust.as_str()), "{what}: trust {trust}");
    let quota = client_blob_quota.unwrap_or_else(|| panic!("{what}: no client_blob_quota"));
    assert!(prova_cli::args::parse_size(&quota).is_ok(), "{what}: client_blob_quota {quota}");
}

fn check_worker_file(file: WorkerFile, what: &str) {
    let WorkerFile {
        join,
        certs,
        slots,
        work_dir,
        labels,
        sandbox,
        blob_cache_size,
        server_name,
        exec_roots,
    } = file;
    let join = join.unwrap_or_else(|| panic!("{what}: no join"));
    assert_eq!(port_of(&join), DEFAULT_PORT, "{what}: join {join}");
    assert!(certs.is_some_and(|p| p.is_absolute()), "{what}: certs, an absolute path");
    assert!(slots.is_some_and(|n| n > 0), "{what}: slots");
    assert!(work_dir.is_some_and(|p| p.is_absolute()), "{what}: work_dir, an absolute path");
    assert!(!labels.is_empty(), "{what}: labels");
    let sandbox = sandbox.unwrap_or_else(|| panic!("{what}: no sandbox"));
    assert_eq!(sandbox, "bwrap", "{what}: the examples keep the sandbox on");
    let size = blob_cache_size.unwrap_or_else(|| panic!("{what}: no blob_cache_size"));
    let bytes = parse_size(&size).unwrap_or_else(|e| panic!("{what}: blob_cache_size: {e}"));
    assert!(bytes >= 1 << 30, "{what}: blob_cache_size {size} is under 1 GiB");
    assert!(server_name.is_some_and(|s| !s.is_empty()), "{what}: server_name");
    let roots = exec_roots.unwrap_or_else(|| panic!("{what}: no exec_roots"));
    let roots = prova_cli::commands::daemons::settings::exec_roots(Some(&roots))
        .unwrap_or_else(|e| panic!("{what}: exec_roots: {e}"));
    assert_eq!(
        roots,
        prova_worker::start::ExecRoots::Auto,
        "{what}: the examples keep the default"
    );
}

#[test]
fn example_configs_parse_with_every_key_set() {
    check_coordinator_file(coordinator_example(), "deploy/coordinator.toml");
    check_worker_file(worker_example(), "deploy/worker.toml");
    let w = worker_example();
    assert_eq!(
        w.server_name.as_deref(),
        w.join.as_deref().and_then(|j| j.rsplit_once(':')).map(|(h, _)| h),
        "the example's server_name is the host it joins"
    );
}

#[test]
fn every_key_of_the_example_configs_is_commented() {
    for file in ["coordinator.toml", "worker.toml"] {
        let text = read(file);
        let mut previous = "";
        let mut in_table = false;
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() {
                continue;
            }
            let header = line.starts_with('[');
            let key = !line.starts_with('#') && !header && line.contains('=');
            // A key outside a table, or a table header, must follow a comment (the entries
            // of a table are described above its header).
            if (key && !in_table) || header {
                assert!(
                    previous.starts_with('#'),
                    "deploy/{file}:{}: `{line}` has no comment above it",
                    n + 1
                );
            }
            in_table |= header;
            previous = line;
        }
    }
}

#[test]
fn unknown_keys_in_a_config_are_refused() {
    // The examples' promise ("unknown keys are an error") holds for both.
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("c.toml");
    std::fs::write(&path, format!("{}\nlisten_addr = \"x\"\n", read("coordinator.toml")))
        .expect("write");
    let err = load::<CoordinatorFile>(Some(&path)).expect_err("a typo is refused");
    assert!(err.to_string().contains("listen_addr"), "{err}");
    std::fs::write(&path, format!("{}\n[labels]\n", read("worker.toml"))).expect("write");
    assert!(load::<WorkerFile>(Some(&path)).is_err(), "a repeated table is refused");
}

// ---------------------------------------------------------------------------------------------
// systemd units

/// A unit file as `(section, key, value)` entries, in order (comments dropped, continuation
/// lines joined).
struct Unit {
    name: String,
    entries: Vec<(String, String, String)>,
}

impl Unit {
    fn load(rel: &str) -> Unit {
        let mut entries = Vec::new();
        let (mut section, mut pending) = (String::new(), String::new());
        for raw in read(rel).lines() {
            let line = raw.trim();
            if pending.is_empty() && (line.is_empty() || line.starts_with(['#', ';'])) {
                continue;
            }
            if let Some(start) = line.strip_suffix('\\') {
                pending.push_str(start);
                pending.push(' ');
                continue;
            }
            let full = format!("{pending}{line}");
            pending.clear();
            if full.starts_with('[') {
                section = full.trim_matches(['[', ']']).to_owned();
                continue;
            }
            let (k, v) = full.split_once('=').unwrap_or_else(|| panic!("{rel}: `{full}`"));
            entries.push((section.clone(), k.trim().to_owned(), v.trim().to_owned()));
        }
        Unit { name: rel.to_owned(), entries }
    }

    /// Every value of `key` in `section`.
    fn all(&self, section: &str, key: &str) -> Vec<&str> {
        self.entries
            .iter()
            .filter(|(s, k, _)| s == section && k == key)
            .map(|(_, _, v)| v.as_str())
            .collect()
    }

    /// The value of `key` in `[Service]` (the last one, as systemd reads it).
    fn service(&self, key: &str) -> &str {
        self.all("Service", key)
            .last()
            .copied()
            .unwrap_or_else(|| panic!("{}: no {key}= in [Service]", self.name))
    }
}

/// Checks what both units must do, and returns the prova command line `ExecStart=` runs.
fn check_unit(unit: &Unit) -> Cli {
    let name = &unit.name;
    assert_eq!(unit.service("Restart"), "on-failure", "{name}");
    assert!(!unit.service("RestartSec").is_empty(), "{name}: RestartSec=");
    for key in ["User", "Group"] {
        let who = unit.service(key);
        assert!(!["root", "0", ""].contains(&who), "{name}: {key}={who} must not be root");
    }
    assert_eq!(unit.service("User"), "prova", "{name}: the account README.md creates");
    assert!(unit.service("LimitNOFILE").parse::<u64>().is_ok_and(|n| n >= 65536), "{name}");
    assert_eq!(unit.service("ProtectSystem"), "strict", "{name}");
    assert_eq!(unit.all("Install", "WantedBy"), ["multi-user.target"], "{name}");
    let exec = unit.all("Service", "ExecStart");
    assert_eq!(exec.len(), 1, "{name}: one ExecStart=");
    // systemd's prefixes (`-`, `@`, `+`, `!`) would change its meaning: none here.
    let words: Vec<&str> = exec[0].split_whitespace().collect();
    assert_eq!(words[0], "/usr/local/bin/prova", "{name}: README.md installs the binary there");
    Cli::try_parse_from(&words)
        .unwrap_or_else(|e| panic!("{name}: ExecStart= does not parse:\n{e}"))
}

/// Flags the config path a `--config` names to one of `deploy/`'s files.
fn check_config_path(config: Option<&Path>, name: &str, example: &str) {
    let config = config.unwrap_or_else(|| panic!("{name}: ExecStart= has no --config"));
    assert_eq!(config, Path::new("/etc/prova").join(example), "{name}");
    assert!(deploy(example).is_file(), "{name}: the config README.md installs, deploy/{example}");
    let readme = read("systemd/README.md");
    assert!(readme.contains(&format!("deploy/{example} {}", config.display())), "{name}: install");
}

#[test]
fn the_coordinator_unit_restarts_unprivileged_with_the_example_config() {
    let unit = Unit::load("systemd/prova-coordinator.service");
    let Sub::Coordinator(args) = check_unit(&unit).command else {
        panic!("the coordinator's unit does not start `prova coordinator`")
    };
    check_config_path(args.config.as_deref(), &unit.name, "coordinator.toml");
    // The farm cache is inside the StateDirectory= systemd keeps writable for it.
    let state = Path::new("/var/lib").join(unit.service("StateDirectory"));
    let cache = coordinator_example().cache_dir.expect("cache_dir");
    assert!(cache.starts_with(&state), "{} is not under {}", cache.display(), state.display());
    // It runs no user code: boxed in tightly.
    for (key, value) in [
        ("NoNewPrivileges", "yes"),
        ("PrivateUsers", "yes"),
        ("RestrictNamespaces", "yes"),
        ("CapabilityBoundingSet", ""),
        ("MemoryDenyWriteExecute", "yes"),
    ] {
        assert_eq!(unit.service(key), value, "{}: {key}=", unit.name);
    }
}

/// Directives the worker's unit must not set (to anything but their default), and why; the
/// unit's comments explain each at length.
const NOT_FOR_THE_WORKER: &[(&str, &str)] = &[
    ("PrivateUsers", "bwrap makes each task's user namespace itself"),
    ("RestrictNamespaces", "bwrap's sandbox is namespaces"),
    ("NoNewPrivileges", "breaks a setuid bwrap; bwrap sets it per task anyway"),
    ("SystemCallFilter", "inherited by every task; bwrap needs mount() and pivot_root()"),
    ("SystemCallArchitectures", "a seccomp filter, implies NoNewPrivileges="),
    ("RestrictAddressFamilies", "bwrap needs netlink for the sandbox's loopback"),
    ("MemoryDenyWriteExecute", "JITs in tasks (node, the JVM) need W+X memory"),
    ("LockPersonality", "a seccomp filter, implies NoNewPrivileges="),
    ("RestrictRealtime", "a seccomp filter, implies NoNewPrivileges="),
    ("RestrictSUIDSGID", "a seccomp filter, implies NoNewPrivileges="),
    ("PrivateDevices", "implies NoNewPrivileges= and a system-call filter"),
    ("ProtectClock", "a seccomp filter, implies NoNewPrivileges="),
    ("ProtectKernelTunables", "covers /proc/sys: bwrap's fresh /proc is refused"),
    ("ProtectKernelLogs", "covers /proc/kmsg: bwrap's fresh /proc is refused"),
    ("ProtectKernelModules", "implies NoNewPrivileges="),
    ("ProtectProc", "a restricted /proc: bwrap's fresh /proc may be refused"),
    ("ProcSubset", "a restricted /proc: bwrap's fresh /proc may be refused"),
    ("ProtectHostname", "refuses sethostname(), which bwrap --hostname calls"),
    ("DynamicUser", "implies NoNewPrivileges= and more"),
    ("PrivateNetwork", "the worker must reach the coordinator"),
    ("CapabilityBoundingSet", "would stop a setuid bwrap"),
];

#[test]
fn the_worker_unit_restarts_unprivileged_and_leaves_bubblewrap_working() {
    let unit = Unit::load("systemd/prova-worker.service");
    let Sub::Worker(args) = check_unit(&unit).command else {
        panic!("the worker's unit does not start `prova worker`")
    };
    check_config_path(args.config.as_deref(), &unit.name, "worker.toml");
    assert_eq!(args.sandbox, None, "the sandbox mode comes from the config (bwrap)");
    // The work dir is the CacheDirectory= systemd keeps writable for it.
    let cache = Path::new("/var/cache").join(unit.service("CacheDirectory"));
    assert_eq!(worker_example().work_dir, Some(cache), "work_dir");
    let harmless = ["", "no", "false", "off", "0", "default", "all"];
    for (key, why) in NOT_FOR_THE_WORKER {
        for value in unit.all("Service", key) {
            assert!(harmless.contains(&value), "{}: {key}={value}: {why}", unit.name);
        }
    }
    // Stopping the unit lets the worker abort its tasks itself; a task's OOM is not the
    // worker's.
    assert_eq!(unit.service("KillMode"), "mixed");
    assert_eq!(unit.service("OOMPolicy"), "continue");
}

fn on_path(program: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")?
        .to_str()?
        .split(':')
        .map(|dir| Path::new(dir).join(program))
        .find(|p| p.is_file())
}

#[test]
fn systemd_analyze_verify_accepts_both_units() {
    let Some(analyze) = on_path("systemd-analyze") else {
        println!("SKIPPED systemd-analyze verify: systemd-analyze is not installed here");
        return;
    };
    // verify checks that ExecStart='s program exists: point it at the binary under test
    // (installed as /usr/local/bin/prova on a real host). Nothing else is changed.
    let dir = tempfile::tempdir().expect("tempdir");
    let mut paths = Vec::new();
    for unit in ["prova-coordinator.service", "prova-worker.service"] {
        let text = read(&format!("systemd/{unit}")).replace(
            "ExecStart=/usr/local/bin/prova ",
            &format!("ExecStart={} ", env!("CARGO_BIN_EXE_prova")),
        );
        let path = dir.path().join(unit);
        std::fs::write(&path, text).expect("write the unit");
        paths.push(path);
    }
    let out = Command::new(&analyze)
        .args(["verify", "--man=no"])
        .args(&paths)
        .output()
        .expect("run systemd-analyze");
    let said =
        format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    // Unknown or malformed directives are only warnings (exit 0): any line about our units is
    // a failure.
    let ours: Vec<&str> = said.lines().filter(|l| l.contains("prova-")).collect();
    assert!(out.status.success() && ours.is_empty(), "systemd-analyze verify:\n{said}");
    if !said.trim().is_empty() {
        println!("systemd-analyze verify said, about other units:\n{said}");
    }
    println!("systemd-analyze verify: both units clean");
}

// ---------------------------------------------------------------------------------------------
// Dockerfile

/// One instruction: its keyword (upper case), its arguments, and its stage (0-based).
#[derive(Debug)]
struct Instr {
    op: String,
    args: String,
    stage: usize,
}

fn dockerfile(rel: &str) -> Vec<Instr> {
    let mut out = Vec::new();
    let mut pending = String::new();
    let mut stage = None::<usize>;
    for raw in read(rel).lines() {
        let line = raw.trim();
        // Comment lines are dropped, also inside a continued instruction (as Docker does).
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if let Some(start) = line.strip_suffix('\\') {
            pending.push_str(start);
            pending.push(' ');
            continue;
        }
        let full = format!("{pending}{line}");
        pending.clear();
        let (op, args) = full.split_once(char::is_whitespace).unwrap_or((&full, ""));
        let op = op.to_ascii_uppercase();
        if op == "FROM" {
            stage = Some(stage.map_or(0, |s| s + 1));
        }
        out.push(Instr { op, args: args.trim().to_owned(), stage: stage.unwrap_or(0) });
    }
    assert!(pending.is_empty(), "{rel}: ends inside a continued line");
    out
}

#[test]
fn the_dockerfile_builds_in_two_stages_and_runs_unprivileged_with_bubblewrap() {
    println!(
        "note: the image is not built here (no container engine runs on these machines); \
         its instructions are checked instead"
    );
    let instrs = dockerfile("container/Dockerfile");
    let froms: Vec<&Instr> = instrs.iter().filter(|i| i.op == "FROM").collect();
    assert_eq!(froms.len(), 2, "a build stage and a runtime stage");
    assert!(
        froms[0].args.starts_with("rust:") && froms[0].args.ends_with(" AS build"),
        "{:?}",
        froms[0]
    );
    assert!(
        froms[1].args.starts_with("debian:") && froms[1].args.contains("-slim AS runtime"),
        "{:?}",
        froms[1]
    );
    // The toolchain is at least the workspace's rust-version.
    let arg = |name: &str| {
        instrs
            .iter()
            .find_map(|i| i.args.strip_prefix(&format!("{name}=")).filter(|_| i.op == "ARG"))
            .unwrap_or_else(|| panic!("no ARG {name}="))
            .to_owned()
    };
    let manifest: toml::Table =
        toml::from_str(&std::fs::read_to_string(repo().join("Cargo.toml")).expect("Cargo.toml"))
            .expect("Cargo.toml parses");
    let msrv = manifest["workspace"]["package"]["rust-version"].as_str().expect("rust-version");
    let version =
        |v: &str| -> Vec<u32> { v.split('.').map(|n| n.parse().expect("a number")).collect() };
    assert!(version(&arg("RUST_VERSION")) >= version(msrv), "RUST_VERSION below {msrv}");
    assert_eq!(arg("DEBIAN_RELEASE"), "bookworm", "build and runtime share one Debian release");

    let build: Vec<&Instr> = instrs.iter().filter(|i| i.stage == 0).collect();
    let runtime: Vec<&Instr> = instrs.iter().filter(|i| i.stage == 1).collect();
    assert!(
        build.iter().any(|i| i.op == "RUN"
            && i.args.contains("cargo build --release --locked -p prova-cli --bin prova")),
        "the build stage builds the prova binary from Cargo.lock"
    );
    let installs: String = runtime
        .iter()
        .filter(|i| i.op == "RUN" && i.args.contains("apt-get install"))
        .map(|i| i.args.as_str())
        .collect();
    for package in ["bubblewrap", "strace", "tini"] {
        assert!(installs.split_whitespace().any(|w| w == package), "{package} is not installed");
    }
    assert!(installs.contains("rm -rf /var/lib/apt/lists/*"), "apt lists are left in the image");
    assert!(
        runtime.iter().any(|i| i.op == "COPY" && i.args.starts_with("--from=build ")),
        "the runtime copies the binary from the build stage"
    );
    // Files the runtime stage copies from the context exist.
    for copy in runtime.iter().filter(|i| i.op == "COPY" && !i.args.starts_with("--from")) {
        let words: Vec<&str> =
            copy.args.split_whitespace().filter(|w| !w.starts_with("--")).collect();
        for src in &words[..words.len() - 1] {
            assert!(repo().join(src).exists(), "COPY {src}: not in the repository");
        }
    }
    // Non-root, with the uid useradd made.
    let user = runtime.iter().rfind(|i| i.op == "USER").expect("a USER").args.clone();
    let uid = user.split(':').next().unwrap_or_default();
    assert!(!["", "0", "root"].contains(&uid), "USER {user}");
    assert!(
        runtime
            .iter()
            .any(|i| i.op == "RUN" && i.args.contains(&format!("useradd --system --uid {uid} "))),
        "USER {user} is not the account the image creates"
    );
    let exposed: Vec<&str> =
        runtime.iter().filter(|i| i.op == "EXPOSE").map(|i| i.args.as_str()).collect();
    assert_eq!(exposed, [format!("{DEFAULT_PORT}/udp")]);
    let entry = runtime.iter().rfind(|i| i.op == "ENTRYPOINT").expect("an ENTRYPOINT");
    assert_eq!(entry.args, r#"["/usr/bin/tini", "--", "/usr/local/bin/prova"]"#);

    // The build context leaves out what would bloat or leak into it.
    let ignore = read("container/Dockerfile.dockerignore");
    for entry in [".git", "target"] {
        assert!(ignore.lines().any(|l| l.trim() == entry), "{entry} is not ignored");
    }
}

// ---------------------------------------------------------------------------------------------
// Kubernetes manifests

/// The documents of a manifest file.
fn manifests(rel: &str) -> Vec<Yaml> {
    let docs = YamlLoader::load_from_str(&read(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"));
    assert!(!docs.is_empty(), "{rel}: empty");
    for doc in &docs {
        for key in ["apiVersion", "kind"] {
            assert!(doc[key].as_str().is_some(), "{rel}: a document without {key}");
        }
        assert!(doc["metadata"]["name"].as_str().is_some(), "{rel}: a document without a name");
        if doc["kind"].as_str() != Some("Namespace") {
            assert_eq!(doc["metadata"]["namespace"].as_str(), Some("prova"), "{rel}");
        }
    }
    docs
}

fn kinds(docs: &[Yaml]) -> Vec<(&str, &str)> {
    docs.iter()
        .map(|d| (d["kind"].as_str().unwrap_or(""), d["metadata"]["name"].as_str().unwrap_or("")))
        .collect()
}

fn find<'a>(docs: &'a [Yaml], kind: &str, name: &str) -> &'a Yaml {
    docs.iter()
        .find(|d| d["kind"].as_str() == Some(kind) && d["metadata"]["name"].as_str() == Some(name))
        .unwrap_or_else(|| panic!("no {kind} {name}"))
}

fn list(y: &Yaml) -> &[Yaml] {
    y.as_vec().map_or(&[], Vec::as_slice)
}

fn string_map(y: &Yaml) -> BTreeMap<String, String> {
    y.as_hash()
        .map(|h| {
            h.iter()
                .filter_map(|(k, v)| Some((k.as_str()?.to_owned(), v.as_str()?.to_owned())))
                .collect()
        })
        .unwrap_or_default()
}

/// What a workload's pod template says, checked for what both roles need; returns the config
/// file text its container reads (from the ConfigMap mounted where `--config` points) and the
/// container's mount paths with their volumes.
struct Pod<'a> {
    config: String,
    mounts: Vec<(String, &'a Yaml)>,
    container: &'a Yaml,
}

fn check_pod<'a>(docs: &'a [Yaml], workload: &'a Yaml, role: &str) -> Pod<'a> {
    let name = workload["metadata"]["name"].as_str().unwrap_or_default();
    let selector = string_map(&workload["spec"]["selector"]["matchLabels"]);
    let labels = string_map(&workload["spec"]["template"]["metadata"]["labels"]);
    assert!(!selector.is_empty(), "{name}: selector");
    assert!(selector.iter().all(|(k, v)| labels.get(k) == Some(v)), "{name}: selector ⊄ labels");
    let spec = &workload["spec"]["template"]["spec"];
    assert_eq!(spec["securityContext"]["runAsNonRoot"].as_bool(), Some(true), "{name}");
    let uid = spec["securityContext"]["runAsUser"].as_i64().expect("runAsUser");
    assert_ne!(uid, 0, "{name}: runAsUser");
    assert_eq!(uid, 10001, "{name}: the uid deploy/container/Dockerfile creates");
    let containers = list(&spec["containers"]);
    assert_eq!(containers.len(), 1, "{name}: one container");
    let container = &containers[0];
    let args: Vec<&str> = list(&container["args"]).iter().filter_map(Yaml::as_str).collect();
    assert_eq!(args.len(), 3, "{name}: args {args:?}");
    assert_eq!(&args[..2], [role, "--config"], "{name}: args");
    assert_eq!(container["securityContext"]["allowPrivilegeEscalation"].as_bool(), Some(false));
    let volumes = list(&spec["volumes"]);
    let volume = |v: &str| {
        volumes
            .iter()
            .find(|y| y["name"].as_str() == Some(v))
            .unwrap_or_else(|| panic!("{name}: no volume {v}"))
    };
    let mounts: Vec<(String, &Yaml)> = list(&container["volumeMounts"])
        .iter()
        .map(|m| {
            let path = m["mountPath"].as_str().expect("mountPath").to_owned();
            (path, volume(m["name"].as_str().expect("a mount's volume name")))
        })
        .collect();
    // --config is a key of a mounted ConfigMap in this file.
    let config_path = Path::new(args[2]);
    let (dir, key) =
        (config_path.parent().expect("a dir"), config_path.file_name().expect("a file"));
    let (_, config_volume) = mounts
        .iter()
        .find(|(p, _)| Path::new(p) == dir)
        .unwrap_or_else(|| panic!("{name}: nothing mounted at {}", dir.display()));
    let map_name = config_volume["configMap"]["name"].as_str().expect("a ConfigMap volume");
    let config = find(docs, "ConfigMap", map_name)["data"][key.to_str().expect("utf-8")]
        .as_str()
        .unwrap_or_else(|| panic!("{map_name} has no {key:?}"))
        .to_owned();
    // Certificates come from a Secret, copied by an init container into the volume the
    // container reads them from.
    let init = list(&spec["initContainers"]);
    assert_eq!(init.len(), 1, "{name}: the certs init container");
    let init_mounts: Vec<&str> =
        list(&init[0]["volumeMounts"]).iter().filter_map(|m| m["name"].as_str()).collect();
    let secret = init_mounts
        .iter()
        .map(|v| volume(v))
        .find(|v| v["secret"]["secretName"].as_str().is_some())
        .unwrap_or_else(|| panic!("{name}: the init container reads no Secret"));
    assert!(secret["secret"]["secretName"].as_str().is_some_and(|s| s.starts_with("prova-")));
    Pod { config, mounts, container }
}

impl Pod<'_> {
    /// The volume mounted at `path` or at a parent of it.
    fn volume_holding(&self, path: &Path) -> &Yaml {
        self.mounts
            .iter()
            .filter(|(p, _)| path.starts_with(p))
            .max_by_key(|(p, _)| p.len())
            .map(|(_, v)| *v)
            .unwrap_or_else(|| panic!("nothing mounted at {}", path.display()))
    }
}

#[test]
fn the_coordinator_manifest_serves_7700_udp_from_one_pod() {
    let docs = manifests("k8s/coordinator.yaml");
    assert_eq!(
        kinds(&docs),
        [
            ("ConfigMap", "prova-coordinator-config"),
            ("PersistentVolumeClaim", "prova-farm-cache"),
            ("Deployment", "prova-coordinator"),
            ("Service", "prova-coordinator"),
        ]
    );
    let deployment = find(&docs, "Deployment", "prova-coordinator");
    assert_eq!(deployment["spec"]["replicas"].as_i64(), Some(1), "one coordinator");
    assert_eq!(deployment["spec"]["strategy"]["type"].as_str(), Some("Recreate"));
    let pod = check_pod(&docs, deployment, "coordinator");
    let file: CoordinatorFile = toml::from_str(&pod.config).expect("the embedded coordinator.toml");
    let certs = file.certs.clone().expect("certs");
    let cache = file.cache_dir.clone().expect("cache_dir");
    let listen = file.listen.clone().expect("listen");
    check_coordinator_file(file, "coordinator.yaml's coordinator.toml");
    assert!(pod.volume_holding(&certs)["emptyDir"].as_hash().is_some(), "certs volume");
    let claim = pod.volume_holding(&cache)["persistentVolumeClaim"]["claimName"].as_str();
    assert_eq!(claim, Some("prova-farm-cache"), "the cache is on the claim");

    // The container port, the Service port and the configured port agree, over UDP.
    let all_ports = list(&pod.container["ports"]);
    let ports: Vec<_> = all_ports.iter().filter(|p| p["name"].as_str() == Some("quic")).collect();
    assert_eq!(ports.len(), 1);
    assert_eq!(ports[0]["containerPort"].as_i64(), Some(i64::from(DEFAULT_PORT)));
    assert_eq!(ports[0]["protocol"].as_str(), Some("UDP"));
    assert_eq!(port_of(&listen), DEFAULT_PORT);
    let service = find(&docs, "Service", "prova-coordinator");
    let sports = list(&service["spec"]["ports"]);
    assert_eq!(sports.len(), 1, "one port");
    assert_eq!(sports[0]["port"].as_i64(), Some(i64::from(DEFAULT_PORT)));
    assert_eq!(sports[0]["protocol"].as_str(), Some("UDP"), "QUIC is UDP");
    assert_eq!(sports[0]["targetPort"].as_str(), ports[0]["name"].as_str(), "targetPort");
    // The HTTP listener: its port is the configured one and both probes use it.
    let http = all_ports.iter().find(|p| p["name"].as_str() == Some("http")).expect("an http port");
    assert_eq!(http["protocol"].as_str(), Some("TCP"));
    let http_addr: SocketAddr = toml::from_str::<CoordinatorFile>(&pod.config)
        .ok()
        .and_then(|f| f.http)
        .and_then(|h| h.parse().ok())
        .expect("the embedded config's http");
    assert_eq!(http["containerPort"].as_i64(), Some(i64::from(http_addr.port())));
    for (probe, path) in [("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")] {
        let get = &pod.container[probe]["httpGet"];
        assert_eq!(
            (get["path"].as_str(), get["port"].as_str()),
            (Some(path), Some("http")),
            "{probe}"
        );
    }
    let selector = string_map(&service["spec"]["selector"]);
    let labels = string_map(&deployment["spec"]["template"]["metadata"]["labels"]);
    assert!(!selector.is_empty() && selector.iter().all(|(k, v)| labels.get(k) == Some(v)));
}

#[test]
fn the_worker_manifest_joins_the_coordinators_service() {
    let coordinator = manifests("k8s/coordinator.yaml");
    let docs = manifests("k8s/worker.yaml");
    assert_eq!(
        kinds(&docs),
        [
            ("ConfigMap", "prova-worker-config"),
            ("Service", "prova-worker"),
            ("StatefulSet", "prova-worker"),
        ]
    );
    let set = find(&docs, "StatefulSet", "prova-worker");
    assert_eq!(set["spec"]["serviceName"].as_str(), Some("prova-worker"));
    let headless = find(&docs, "Service", "prova-worker");
    assert_eq!(headless["spec"]["clusterIP"].as_str(), Some("None"));
    let pod = check_pod(&docs, set, "worker");
    let file: WorkerFile = toml::from_str(&pod.config).expect("the embedded worker.toml");
    let join = file.join.clone().expect("join");
    let certs = file.certs.clone().expect("certs");
    let work = file.work_dir.clone().expect("work_dir");
    let server_name = file.server_name.clone().expect("server_name");
    check_worker_file(file, "worker.yaml's worker.toml");
    // It dials the coordinator's Service, by the name the coordinator's certificate carries.
    let service = find(&coordinator, "Service", "prova-coordinator");
    let (host, _) = join.rsplit_once(':').expect("HOST:PORT");
    assert_eq!(Some(host), service["metadata"]["name"].as_str(), "join");
    assert_eq!(server_name, host, "server_name");
    assert!(read("k8s/README.md").contains(&format!("--san {host}")), "README's certs init");
    assert!(pod.volume_holding(&certs)["emptyDir"].as_hash().is_some(), "certs volume");
    assert!(pod.volume_holding(&work)["emptyDir"].as_hash().is_some(), "work_dir volume");
    // bubblewrap inside the pod: a user-namespaced pod with an unmasked /proc (worker.yaml's
    // comment says why).
    let spec = &set["spec"]["template"]["spec"];
    assert_eq!(spec["hostUsers"].as_bool(), Some(false));
    assert_eq!(pod.container["securityContext"]["procMount"].as_str(), Some("Unmasked"));
    // Each pod copies out its own bundle, named after the pod.
    let script = list(&spec["initContainers"][0]["args"])
        .iter()
        .filter_map(Yaml::as_str)
        .collect::<String>();
    assert!(script.contains("/secret/${POD_NAME}.${f}"), "{script}");
}

#[test]
fn the_namespace_manifest_makes_the_namespace_everything_else_uses() {
    let docs = manifests("k8s/namespace.yaml");
    assert_eq!(kinds(&docs), [("Namespace", "prova")]);
    // The worker pods' bubblewrap needs the `privileged` Pod Security level (the comment says why).
    let labels = string_map(&docs[0]["metadata"]["labels"]);
    assert_eq!(
        labels.get("pod-security.kubernetes.io/enforce").map(String::as_str),
        Some("privileged")
    );
}

// ---------------------------------------------------------------------------------------------
// The real binary, started from the example configs

/// A child process killed (and reaped) when dropped, so a failing test leaves nothing running.
struct Daemon {
    what: &'static str,
    child: Child,
    lines: Receiver<String>,
    seen: Vec<String>,
    stderr: Arc<Mutex<String>>,
}

impl Daemon {
    fn spawn(what: &'static str, args: &[&str]) -> Daemon {
        let mut child = prova(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {what}: {e}"));
        let stdout = child.stdout.take().expect("stdout");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let stderr = Arc::new(Mutex::new(String::new()));
        let sink = stderr.clone();
        let mut err = child.stderr.take().expect("stderr");
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = err.read(&mut buf) {
                if n == 0 {
                    break;
                }
                if let Ok(mut s) = sink.lock() {
                    s.push_str(&String::from_utf8_lossy(&buf[..n]));
                }
            }
        });
        Daemon { what, child, lines, seen: Vec::new(), stderr }
    }

    /// The first stdout line containing `needle`, waiting at most `limit`.
    fn wait_for(&mut self, needle: &str, limit: Duration) -> String {
        let deadline = Instant::now() + limit;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) if line.contains(needle) => return line,
                Ok(line) => self.seen.push(line),
                Err(e) => {
                    let status = self.child.try_wait().ok().flatten();
                    let stderr = self.stderr.lock().map(|s| s.clone()).unwrap_or_default();
                    panic!(
                        "{}: no line with {needle:?} ({e}; exit status {status:?})\nstdout:\n{}\nstderr:\n{stderr}",
                        self.what,
                        self.seen.join("\n")
                    );
                }
            }
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn prova(args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_prova"));
    cmd.args(args)
        .current_dir(repo())
        .env_remove("PROVA_REMOTE")
        .env_remove("PROVA_CERTS")
        .env_remove("PROVA_LOG")
        .stdin(Stdio::null());
    cmd
}

fn run_ok(args: &[&str]) -> String {
    let out = prova(args).output().expect("run prova");
    assert!(
        out.status.success(),
        "prova {args:?}: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn the_real_binary_starts_a_coordinator_and_a_worker_from_the_example_configs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = |p: &str| dir.path().join(p).to_string_lossy().into_owned();
    let certs = path("certs");
    run_ok(&["certs", "init", &certs]);
    run_ok(&["certs", "issue", &certs, "--role", "worker", "--name", "w1"]);
    run_ok(&["certs", "issue", &certs, "--role", "admin", "--name", "ops"]);

    // The example config as is; only what must differ on a test machine is overridden by flags
    // (which win over the file): a free loopback port, temporary certificates and cache.
    let mut coordinator = Daemon::spawn(
        "prova coordinator",
        &[
            "coordinator",
            "--config",
            "deploy/coordinator.toml",
            "--listen",
            "127.0.0.1:0",
            "--certs",
            &path("certs/coordinator"),
            "--cache-dir",
            &path("cache"),
        ],
    );
    let line = coordinator.wait_for("listening on", Duration::from_secs(60));
    let addr = line
        .split("listening on ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("no address in {line:?}"))
        .to_owned();
    let addr: SocketAddr = addr.parse().unwrap_or_else(|e| panic!("{addr}: {e}"));
    assert!(addr.ip().is_loopback() && addr.port() != 0, "{line}");
    assert!(dir.path().join("cache").is_dir(), "the coordinator created its cache");

    // The example worker config: its slots and labels must reach the coordinator. No sandbox
    // here (whether bwrap runs depends on the machine; the worker's own tests cover it).
    let join = addr.to_string();
    let mut worker = Daemon::spawn(
        "prova worker",
        &[
            "worker",
            "--config",
            "deploy/worker.toml",
            "--join",
            &join,
            "--server-name",
            "localhost",
            "--certs",
            &path("certs/w1"),
            "--work-dir",
            &path("work"),
            "--sandbox",
            "none",
        ],
    );
    worker.wait_for("joining", Duration::from_secs(60));

    let example = worker_example();
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        let out =
            run_ok(&["farm", "status", "--remote", &join, "--certs", &path("certs/ops"), "--json"]);
        let status: serde_json::Value = serde_json::from_str(out.trim()).expect("status JSON");
        let joined =
            status["workers"].as_array().is_some_and(|ws| ws.iter().any(|w| w["id"] == "w1"));
        if joined {
            break status;
        }
        assert!(Instant::now() < deadline, "w1 never showed in the farm's status: {status}");
        std::thread::sleep(Duration::from_millis(200));
    };
    let w1 = status["workers"]
        .as_array()
        .and_then(|ws| ws.iter().find(|w| w["id"] == "w1"))
        .expect("w1");
    assert_eq!(w1["slots"].as_u64(), example.slots.map(u64::from), "slots from worker.toml");
    for (k, v) in &example.labels {
        assert_eq!(w1["labels"][k].as_str(), Some(v.as_str()), "label {k} from worker.toml");
    }
    assert_eq!(w1["sandbox"].as_str(), Some("none"), "the --sandbox flag won over the file");
    drop(worker);
    drop(coordinator);
}
