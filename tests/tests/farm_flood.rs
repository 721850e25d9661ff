//! The coordinator under a QUIC handshake flood (issue 29): an attacker host without a
//! certificate of the cluster sends client Initials at hundreds per second — never answering
//! (a spoofed source), answering the address-validating retry and then stalling, and stalling
//! from 40 addresses at once — while an admin and CI ask `prova farm status` from the client
//! host. Every status answers; the worker stays registered.
//!
//! The floods are bounded in connections and time and stopped once the status calls are
//! done. The latencies are printed (`--nocapture`), never asserted.

use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use prova_tests::cluster::workers_of;
use prova_tests::flood::{Attack, Flood, FloodReport};
use prova_tests::netns::{NetFarm, unavailable};

/// A flood's bound in time (it is stopped sooner, when the status calls are done).
const FLOOD_TIME: Duration = Duration::from_secs(60);

/// Status calls per bundle during one flood, at least.
const CALLS: usize = 8;

/// How long each flood lasts at least while the calls go on: past the 3 s a stalled
/// handshake may hold its slot, so slots are taken, given up and taken again meanwhile.
const MIN_FLOOD: Duration = Duration::from_secs(8);

fn lab_or_skip() -> bool {
    match unavailable() {
        Some(why) => {
            prova_tests::skip_for_missing(&why);
            false
        }
        None => true,
    }
}

/// `farm status` as admin and as ci, alternating, while `flood` runs (at least `CALLS` each
/// and for at least `MIN_FLOOD`); each must answer. Returns the flood's report.
fn statuses_through(farm: &NetFarm, what: &str, flood: Flood) -> FloodReport {
    let running = flood.start();
    let started = Instant::now();
    let mut times: Vec<(&str, Duration)> = Vec::new();
    while times.len() < 2 * CALLS || started.elapsed() < MIN_FLOOD {
        for bundle in ["admin", "ci"] {
            assert!(!running.is_finished(), "{what}: the flood ended before the calls did");
            let t = Instant::now();
            let out = farm.farm_cmd(bundle, &["status", "--json"]);
            let took = t.elapsed();
            assert_eq!(
                out.code(),
                Some(0),
                "{what}: `farm status` as {bundle}\n{out}\n{}",
                farm.logs()
            );
            let s: serde_json::Value = serde_json::from_str(out.stdout.trim()).expect("JSON");
            assert_eq!(workers_of(&s).len(), 1, "{what}: the worker is gone\n{s:#}");
            times.push((bundle, took));
        }
    }
    let report = running.stop();
    for bundle in ["admin", "ci"] {
        let mut ms: Vec<u128> =
            times.iter().filter(|(b, _)| *b == bundle).map(|(_, d)| d.as_millis()).collect();
        ms.sort_unstable();
        eprintln!(
            "{what}: farm status as {bundle}: {} calls, median {} ms, max {} ms; flood {} \
             connections in {:?} ({} retries seen)",
            ms.len(),
            ms[ms.len() / 2],
            ms[ms.len() - 1],
            report.started,
            report.elapsed,
            report.retries,
        );
    }
    report
}

#[test]
fn farm_status_answers_admin_and_ci_through_handshake_floods() {
    if !lab_or_skip() {
        return;
    }
    let farm = NetFarm::builder().workers(1).spare_hosts(1).start();
    let target: SocketAddr = farm.addr().parse().expect("the coordinator's address");
    let attacker = farm.spare(0).clone();
    let one: Vec<IpAddr> = vec![attacker.addr.parse().expect("an address")];
    // Admin and CI have connected from the client host before the attack; the time they
    // take without one, for comparison.
    let mut quiet = Vec::new();
    for _ in 0..CALLS / 2 {
        for bundle in ["admin", "ci"] {
            let t = Instant::now();
            assert_eq!(farm.farm_cmd(bundle, &["status"]).code(), Some(0), "{}", farm.logs());
            quiet.push(t.elapsed().as_millis());
        }
    }
    quiet.sort_unstable();
    eprintln!(
        "no flood: farm status as admin and ci: {} calls, median {} ms, max {} ms",
        quiet.len(),
        quiet[quiet.len() / 2],
        quiet[quiet.len() - 1]
    );
    let flood = |attack, rate: u32, sources: Vec<IpAddr>| Flood {
        attack,
        target,
        rate,
        duration: FLOOD_TIME,
        max_connections: u64::from(rate) * FLOOD_TIME.as_secs(),
        netns: Some(attacker.ns.clone()),
        sources,
    };

    // Initials nobody answers: each is answered with a stateless retry and costs nothing.
    let r = statuses_through(&farm, "initials 400/s", flood(Attack::Initials, 400, one.clone()));
    assert!(r.retries > 0, "the coordinator validates addresses: {r:?}");

    // Retry answered, handshake stalled: bounded per source and by the handshake timeout.
    let r = statuses_through(&farm, "stalled 200/s", flood(Attack::Stall, 200, one));
    assert!(r.retries > 0, "{r:?}");

    // The same from 40 addresses: more than the unknown sources' share of handshakes, so
    // only the reserve for known sources lets admin and CI in.
    let many: Vec<IpAddr> =
        farm.spare_addresses(0, 40).iter().map(|a| a.parse().expect("an address")).collect();
    let r =
        statuses_through(&farm, "stalled 400/s from 40 addresses", flood(Attack::Stall, 400, many));
    assert!(r.retries > 0, "{r:?}");
    let log = farm.coordinator_log();
    assert!(log.contains("handshake refused"), "the refusals are logged\n{log}");
    assert!(
        log.matches("connection refused").count() <= 10,
        "a flood of handshakes is not a flood of log lines\n{log}"
    );
}
