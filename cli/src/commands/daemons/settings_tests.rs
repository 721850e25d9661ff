//! The daemons' flags over their config files: defaults, the file, flags winning, refusals.

use clap::Parser as _;

use super::*;
use crate::args::{Cli, CliCommand};

fn env() -> DaemonEnv {
    DaemonEnv { cores: 6, temp_dir: PathBuf::from("/tmp/t"), hostname: Some("box".to_owned()) }
}

fn coordinator_args(line: &str) -> CoordinatorArgs {
    let argv = ["prova", "coordinator"].into_iter().chain(line.split_whitespace());
    match Cli::try_parse_from(argv).expect("parses").command {
        CliCommand::Coordinator(a) => a,
        other => panic!("not a coordinator: {other:?}"),
    }
}

fn worker_args(line: &str) -> WorkerArgs {
    let argv = ["prova", "worker"].into_iter().chain(line.split_whitespace());
    match Cli::try_parse_from(argv).expect("parses").command {
        CliCommand::Worker(a) => a,
        other => panic!("not a worker: {other:?}"),
    }
}

fn coordinator_file(text: &str) -> CoordinatorFile {
    toml::from_str(text).expect("a coordinator file")
}

fn worker_file(text: &str) -> WorkerFile {
    toml::from_str(text).expect("a worker file")
}

fn coordinator_err(line: &str, file: &str) -> String {
    let r = resolve_coordinator(coordinator_args(line), coordinator_file(file));
    format!("{:#}", r.expect_err("refused"))
}

#[test]
fn a_coordinator_defaults_to_port_7700_and_ci_trust() {
    let c = resolve_coordinator(
        coordinator_args("--certs c --cache-dir d"),
        CoordinatorFile::default(),
    )
    .expect("settings");
    assert_eq!(c.listen, "0.0.0.0:7700".parse().unwrap());
    assert_eq!((c.certs, c.cache_dir), (PathBuf::from("c"), PathBuf::from("d")));
    assert!(!c.trust_proven);
    assert_eq!(c.client_quota, prova_coordinator::farm::server::DEFAULT_CLIENT_QUOTA);
    assert_eq!((c.http, c.http_token_file), (None, None));
}

#[test]
fn a_coordinators_flags_win_over_its_file() {
    const FILE: &str = "listen = \"127.0.0.1:1\"\ncerts = \"fc\"\ncache_dir = \"fd\"\n\
        trust = \"proven\"\nclient_blob_quota = \"1K\"\nhttp = \"127.0.0.1:2\"\n\
        http_token_file = \"tok\"\n";
    let c = resolve_coordinator(coordinator_args(""), coordinator_file(FILE)).expect("the file");
    assert_eq!(c.listen, "127.0.0.1:1".parse().unwrap());
    assert!(c.trust_proven);
    assert_eq!(c.client_quota, 1024);
    assert_eq!(c.http_token_file, Some(PathBuf::from("tok")));
    let file = coordinator_file(FILE);
    let line = "--listen 127.0.0.1:3 --certs c --cache-dir d --trust ci --http 127.0.0.1:4";
    let c = resolve_coordinator(coordinator_args(line), file).expect("flags over the file");
    assert_eq!(c.listen, "127.0.0.1:3".parse().unwrap());
    assert_eq!((c.certs, c.cache_dir), (PathBuf::from("c"), PathBuf::from("d")));
    assert!(!c.trust_proven);
    assert_eq!(c.http, Some("127.0.0.1:4".parse().unwrap()));
    assert_eq!(c.http_token_file, Some(PathBuf::from("tok")), "the file's, no flag given");
}

#[test]
fn a_coordinator_refuses_missing_and_malformed_settings() {
    assert!(coordinator_err("--cache-dir d", "").contains("--certs DIR is required"));
    assert!(coordinator_err("--certs c", "").contains("--cache-dir DIR is required"));
    assert!(
        coordinator_err("--certs c --cache-dir d --trust maybe", "")
            .contains("use `ci` or `proven`")
    );
    assert!(
        coordinator_err("--certs c --cache-dir d --listen nowhere", "")
            .contains("--listen nowhere")
    );
    assert!(
        coordinator_err("--certs c --cache-dir d --http nowhere", "").contains("--http nowhere")
    );
    let e = coordinator_err("--certs c --cache-dir d --http-token-file t", "");
    assert!(e.contains("--http-token-file is given but --http ADDR is not"), "{e}");
    let e = coordinator_err("--certs c --cache-dir d", "client_blob_quota = \"lots\"\n");
    assert!(e.contains("client_blob_quota"), "{e}");
}

#[test]
fn a_worker_defaults_from_its_host() {
    let w = resolve_worker(
        worker_args("--join coord.example:7700 --certs c"),
        WorkerFile::default(),
        &env(),
    )
    .expect("settings");
    assert_eq!(w.slots, 6);
    assert_eq!(w.work_dir, PathBuf::from("/tmp/t/prova-worker"));
    assert_eq!(w.server_name, "coord.example", "the join address's host");
    assert_eq!(w.blob_cache_size, DEFAULT_BLOB_CACHE);
    assert_eq!(w.min_free_disk, prova_worker::health::DEFAULT_MIN_FREE_DISK);
    assert_eq!(w.sandbox, "bwrap");
    assert!(w.labels.is_empty());
    assert_eq!(w.exec_roots, ExecRoots::Auto, "a tmpfs while it has room");
}

#[test]
fn a_workers_exec_roots_are_a_word_or_a_tmpfs_path() {
    let with = |line: &str, file: &str| {
        let args = worker_args(&format!("--join c:1 --certs c {line}"));
        resolve_worker(args, worker_file(file), &env()).map(|w| w.exec_roots)
    };
    assert_eq!(with("--exec-roots work-dir", "").expect("ok"), ExecRoots::WorkDir);
    assert_eq!(with("", "exec_roots = \"work-dir\"\n").expect("ok"), ExecRoots::WorkDir);
    assert_eq!(
        with("--exec-roots /mnt/fast", "exec_roots = \"work-dir\"\n").expect("ok"),
        ExecRoots::Tmpfs(PathBuf::from("/mnt/fast")),
        "the flag wins"
    );
    assert_eq!(with("--exec-roots auto", "").expect("ok"), ExecRoots::Auto);
    for bad in ["tmpfs", "shm/roots", "workdir"] {
        let e = with(&format!("--exec-roots {bad}"), "").expect_err(bad).to_string();
        assert!(e.contains("use `auto`, `work-dir` or the absolute path of a tmpfs"), "{e}");
    }
}

#[test]
fn a_workers_flags_win_over_its_file_and_labels_merge() {
    let file = worker_file(
        "join = \"f:1\"\ncerts = \"fc\"\nslots = 2\nwork_dir = \"fw\"\nsandbox = \"none\"\n\
         blob_cache_size = \"2K\"\nserver_name = \"fname\"\n[labels]\npool = \"a\"\nos = \"linux\"\n",
    );
    let line = "--join [::1]:7700 --slots 0 --blob-cache-size 1K --label pool=b --label gpu=1";
    let w = resolve_worker(worker_args(line), file, &env()).expect("settings");
    assert_eq!(w.join, "[::1]:7700");
    assert_eq!(w.certs, PathBuf::from("fc"));
    assert_eq!(w.slots, 1, "at least one slot");
    assert_eq!(w.work_dir, PathBuf::from("fw"));
    assert_eq!(w.sandbox, "none");
    assert_eq!(w.blob_cache_size, 1024);
    assert_eq!(w.server_name, "fname");
    let labels: Vec<_> = w.labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
    assert_eq!(labels, ["gpu=1", "os=linux", "pool=b"]);
    let w =
        resolve_worker(worker_args("--join [::1]:7700 --certs c"), WorkerFile::default(), &env())
            .expect("settings");
    assert_eq!(w.server_name, "::1", "brackets of an IPv6 literal removed");
}

#[test]
fn a_worker_refuses_missing_and_malformed_settings() {
    let err = |line: &str, file: &str| {
        let r = resolve_worker(worker_args(line), worker_file(file), &env());
        format!("{:#}", r.expect_err("refused"))
    };
    assert!(err("--certs c", "").contains("--join HOST:PORT is required"));
    assert!(err("--join h:1", "").contains("--certs DIR is required"));
    assert!(err("--join h:1 --certs c --label nokey", "").contains("want KEY=VALUE"));
    assert!(
        err("--join h:1 --certs c", "blob_cache_size = \"huge\"\n").contains("blob_cache_size")
    );
}

#[test]
fn a_bot_is_named_after_its_host_unless_told() {
    let b = resolve_bot(worker_args("--reapi-bot grpc://h:1"), &env()).expect("settings");
    assert_eq!((b.endpoint.as_str(), b.name.as_str(), b.slots), ("grpc://h:1", "box", 6));
    assert_eq!(b.work_dir, PathBuf::from("/tmp/t/prova-reapi-bot"));
    assert_eq!(b.sandbox, "bwrap");
    let nameless = DaemonEnv { hostname: None, ..env() };
    let b = resolve_bot(worker_args("--reapi-bot grpc://h:1"), &nameless).expect("settings");
    assert_eq!(b.name, "prova-bot");
    let line =
        "--reapi-bot grpc://h:1 --bot-name b1 --reapi-instance main --slots 3 --label os=linux";
    let b = resolve_bot(worker_args(line), &env()).expect("settings");
    assert_eq!((b.name.as_str(), b.instance.as_str(), b.slots), ("b1", "main", 3));
    assert_eq!(b.labels.get("os").map(String::as_str), Some("linux"));
}
