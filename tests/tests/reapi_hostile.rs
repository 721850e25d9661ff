//! Issue 29: a hostile or broken REAPI server cannot make the client hold what it streams.
//! Every ByteStream download goes to a file, bounded by the size the entry declares, hashed on
//! the way, never buffered whole: a server declaring a huge artifact, or streaming more than
//! it declared, costs the client disk it then gives back, not memory, and the entry is a miss
//! (one warning) — the task runs locally and the run exits 0.
//!
//! The client's peak memory is read from `/proc/<pid>/status` (`VmHWM`) while it runs.

use std::time::{Duration, Instant};

use prova_protocol::Digest;
use prova_tests::hostile_reapi::{Hostile, HostileReapi};
use prova_tests::{Output, TempWorkspace};

/// What the client may peak at: far above its own working set, far below what it was sent.
const RSS_BOUND: u64 = 160 << 20;

fn workspace(endpoint: &str) -> TempWorkspace {
    TempWorkspace::new()
        .file(
            "prova.toml",
            &format!(
                "[workspace]\nprojects = [\"p\"]\n\n[cache.reapi]\nendpoint = \"{endpoint}\"\n\
                 timeout = \"60s\"\n\n[tasks.build]\n\
                 command = \"mkdir -p dist && cat src/a.txt > dist/out.txt\"\n\
                 inputs = [\"src/**\"]\noutputs = [\"dist/**\"]\n"
            ),
        )
        .file("p/src/a.txt", "real\n")
}

/// Runs `build` reading the REAPI cache, sampling the client's peak resident set until it
/// exits: (its output, the peak in bytes).
fn run_measured(ws: &TempWorkspace) -> (Output, u64) {
    let running = ws
        .prova(["run", "build", "--all", "--json", "--cache", "local:rw,reapi:r"])
        .timeout(Duration::from_secs(300))
        .spawn();
    let pid = running.pid();
    let mut peak = 0;
    let deadline = Instant::now() + Duration::from_secs(300);
    while Instant::now() < deadline {
        match std::fs::read_to_string(format!("/proc/{pid}/status")) {
            Ok(status) => {
                if let Some(kb) = status
                    .lines()
                    .find_map(|l| l.strip_prefix("VmHWM:"))
                    .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
                {
                    peak = peak.max(kb * 1024);
                }
            }
            Err(_) => break, // it exited
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    (running.wait(), peak)
}

fn hostile_run(declared: u64, streamed: u64) -> (Output, u64, u64, TempWorkspace) {
    let server = HostileReapi::start(Hostile { task: "p#build".into(), declared, streamed });
    let ws = workspace(&server.endpoint());
    let key = prova_tests::cache::show(&ws, "p#build").key().to_owned();
    server.answer_for(key.parse::<Digest>().expect("a key"));
    let (out, peak) = run_measured(&ws);
    (out, peak, server.streamed(), ws)
}

#[test]
fn a_huge_declared_artifact_is_streamed_to_disk_never_held() {
    // 256 MiB declared and sent, with a hash the bytes do not have.
    let size = 256 << 20;
    let (out, peak, streamed, ws) = hostile_run(size, size);
    assert_eq!(out.code(), Some(0), "{out}");
    assert!(
        streamed >= 200 << 20,
        "the server streamed only {streamed} bytes: the test proves nothing"
    );
    assert!(
        peak < RSS_BOUND,
        "the client peaked at {} MiB for a {} MiB artifact\n{out}",
        peak >> 20,
        size >> 20
    );
    assert_eq!(out.cache_of("p#build"), "saved", "a refused entry is a miss: the task ran\n{out}");
    assert_eq!(ws.read("p/dist/out.txt"), "real\n");
    assert!(out.stderr.contains("refused") || out.stdout.contains("refused"), "one warning\n{out}");
    assert!(!leftover_downloads(&ws), "a partial download was left behind");
}

#[test]
fn a_server_streaming_past_the_declared_size_is_cut_off_there() {
    // 4 MiB declared, 1 GiB sent: the client stops at the bound.
    let (out, peak, streamed, ws) = hostile_run(4 << 20, 1 << 30);
    assert_eq!(out.code(), Some(0), "{out}");
    assert!(peak < RSS_BOUND, "the client peaked at {} MiB\n{out}", peak >> 20);
    assert!(streamed < 256 << 20, "the client kept reading {streamed} bytes past its bound");
    assert_eq!(out.cache_of("p#build"), "saved", "{out}");
    assert!(!leftover_downloads(&ws), "a partial download was left behind");
}

/// Whether a download's temp file is left in the workspace's cache.
fn leftover_downloads(ws: &TempWorkspace) -> bool {
    let tmp = ws.path(".prova/cache/tmp");
    std::fs::read_dir(tmp).map(|d| d.flatten().any(|e| e.path().is_file())).unwrap_or(false)
}
