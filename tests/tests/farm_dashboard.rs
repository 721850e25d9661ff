//! The dashboard in a real headless Chromium: a coordinator with two workers and `--http`,
//! a `--verify` run of a task whose bytes depend on the worker it ran on, then the page as the
//! browser renders it (its script refreshes it from `/api/fragment`) must show both workers,
//! the run, and the divergent key with its file; a screenshot goes to the test's temp dir
//! (and to `PROVA_DASHBOARD_SCREENSHOT` when set: how `docs/dashboard.png` was made). Passes
//! with a printed reason only when `chromium` is not on `PATH` (CI installs it).

use prova_tests::cluster::{Cluster, Sandbox};
use prova_tests::http::{chromium_dom, get, tool};
use prova_tests::verify::{key, name, only_verdict, task, workspace};

/// Writes which worker it ran on into an output: a re-run on the other worker differs.
fn where_() -> String {
    task(
        "where",
        "mkdir -p out && cat src/a.txt > out/same.txt && \
         { pwd; echo $TMPDIR; } | grep -o 'workers/w[0-9]*' | head -n 1 > out/where.txt",
        &["out/same.txt", "out/where.txt"],
    )
}

#[test]
fn the_dashboard_shows_workers_the_run_and_the_divergent_key() {
    let Some(chromium) = tool("chromium") else {
        prova_tests::skip_for_missing("chromium is not on PATH (Debian package chromium)");
        return;
    };
    let farm = Cluster::builder()
        .workers(2)
        .sandbox(Sandbox::None)
        .coordinator_args(["--http", "127.0.0.1:0"])
        .start();
    let http = farm.http_addr().expect("the coordinator prints its HTTP address").to_owned();
    let ws = workspace(&where_());
    let out = farm.run(&ws, ["where", "--all", "--verify", "--json"]);
    out.assert_code(1);
    assert_eq!(name(&only_verdict(&out, "p#where")), "nondeterministic", "{out}");
    let k = key(&out, "p#where");

    let tmp = tempfile::tempdir().expect("a temp dir");
    let url = format!("http://{http}/");
    let dom = chromium_dom(&chromium, &url, &tmp.path().join("profile"), None);
    // The script ran and swapped in a fresh fragment (not only the server's first render).
    assert!(dom.contains("data-refreshed="), "the page's script did not refresh it\n{dom}");
    for w in [farm.worker_name(0), farm.worker_name(1)] {
        assert!(dom.contains(&format!("<td>{w}</td>")), "worker {w} missing\n{dom}");
    }
    assert!(dom.contains("<tr class=\"run\"><td>run-"), "no run row\n{dom}");
    assert!(dom.contains("<td>1/1</td>"), "the run's done/total\n{dom}");
    assert!(dom.contains("nondeterministic: 1"), "the run's verdicts\n{dom}");
    let divergent = dom
        .split("<tr class=\"divergent\">")
        .nth(1)
        .unwrap_or_else(|| panic!("no divergent key in the ledger view\n{dom}"));
    let row = divergent.split("</tr>").next().unwrap_or_default();
    assert!(row.contains(&k), "the divergent key {k}\n{row}");
    assert!(row.contains("p/out/where.txt"), "the differing file\n{row}");
    let proof = dom
        .split("<tr class=\"proof\">")
        .nth(1)
        .and_then(|r| r.split("</tr>").next())
        .unwrap_or_else(|| panic!("no failed proof row\n{dom}"));
    assert!(proof.contains("p#where") && proof.contains("p/out/where.txt"), "{proof}");
    // The cache by tier (the entry the run saved, its miss) and the run's timeline.
    assert!(
        dom.contains(
            "<tr class=\"tier\"><td>trusted</td><td>1</td><td>0</td><td>1</td><td>0%</td>"
        ),
        "the trusted tier's row\n{dom}"
    );
    assert!(dom.contains("run-1 timeline") && dom.contains("class=\"bar saved\""), "{dom}");

    let shot = tmp.path().join("dash.png");
    chromium_dom(&chromium, &url, &tmp.path().join("profile2"), Some(&shot));
    let png =
        std::fs::read(&shot).unwrap_or_else(|e| panic!("no screenshot {}: {e}", shot.display()));
    assert!(png.starts_with(b"\x89PNG"), "not a PNG");
    if let Some(to) = std::env::var_os("PROVA_DASHBOARD_SCREENSHOT") {
        std::fs::write(&to, &png).expect("copying the screenshot");
    }
    // The JSON the page is made from names the same things.
    let (code, state) = get(&http, "/api/state", None);
    assert_eq!(code, 200, "{state}");
    assert!(state.contains(&k) && state.contains("p/out/where.txt"), "{state}");
}
