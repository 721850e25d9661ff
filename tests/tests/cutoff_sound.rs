//! Early cutoff never serves stale bytes (issue 27). In place a dependent can read all of
//! its upstreams, not only their declared outputs: a link in `dist/` into the upstream's
//! sources, an upstream's source file itself, a gitignored file it writes beside its outputs,
//! or the outputs of a `cache = false` upstream (whose key says nothing of what it wrote). So
//! by default a dependent's key folds every upstream's key **and** its outputs' fingerprint:
//! an upstream that re-ran with identical bytes still re-runs what can read its sources, and
//! the run says why it did not cut off. A dependent with `sandbox = true` can read nothing
//! but its declared inputs and its upstreams' outputs (and fails when it tries), so it is
//! keyed by its upstreams' bytes alone and cut off when they hold.
//!
//! Each route runs the upstream twice (the second time with new sources that leave its
//! declared outputs byte-identical) and checks the dependent's bytes against what it reads.

use prova_tests::verify::sandbox_or_skip;
use prova_tests::{Output, TempWorkspace};

/// `gen#build` is `gen`; `app#build` is `app`, which depends on it.
fn ws(gen_task: &str, app_task: &str) -> TempWorkspace {
    TempWorkspace::new()
        .file("prova.toml", "[workspace]\nprojects = [\"gen\", \"app\"]\n")
        .file("gen/prova.toml", &format!("[tasks.build]\n{gen_task}"))
        .file(
            "app/prova.toml",
            &format!(
                "[project]\ndeps = [\"gen\"]\n\n[tasks.build]\ndeps = [\"^build\"]\n{app_task}"
            ),
        )
        .file("app/src/in.txt", "app\n")
}

fn run(ws: &TempWorkspace) -> Output {
    let out = ws.prova(["run", "build", "--all", "--json"]).run();
    out.assert_code(0);
    out
}

#[track_caller]
fn executed(out: &Output, task: &str) {
    assert_eq!(out.status_of(task), "succeeded", "{out}");
    assert_ne!(out.cache_of(task), "hit", "{task} should have run\n{out}");
}

/// Reads `../gen/dist/x.txt` into its own output.
const APP_READS_DIST: &str = "command = \"mkdir -p dist && cat ../gen/dist/x.txt src/in.txt > dist/app.txt\"\n\
     inputs = [\"src/**\"]\noutputs = [\"dist/**\"]\n";

#[test]
fn an_output_link_into_the_upstreams_sources_is_no_cutoff() {
    // gen's only output is a link to its source: its fingerprint is the link's target text,
    // which a source edit does not change.
    let ws = ws(
        "command = \"mkdir -p dist && ln -sf ../src/x.txt dist/x.txt\"\n\
         inputs = [\"src/**\"]\noutputs = [\"dist/**\"]\n",
        APP_READS_DIST,
    )
    .file("gen/src/x.txt", "one\n");
    run(&ws);
    assert_eq!(ws.read("app/dist/app.txt"), "one\napp\n");
    ws.write("gen/src/x.txt", "two\n");
    let out = run(&ws);
    executed(&out, "gen#build");
    executed(&out, "app#build");
    assert_eq!(ws.read("app/dist/app.txt"), "two\napp\n", "stale bytes served\n{out}");
}

#[test]
fn the_outputs_of_an_uncached_upstream_are_what_a_dependent_is_keyed_by() {
    // gen reads `//feed.txt`, which it does not declare, so it is `cache = false`: it runs
    // every time and its key does not change when what it writes does.
    let ws = ws(
        "command = \"mkdir -p dist && cat ../feed.txt > dist/x.txt\"\ninputs = [\"src/**\"]\n\
         outputs = [\"dist/**\"]\ncache = false\n",
        APP_READS_DIST,
    )
    .file("gen/src/unused.txt", "\n")
    .file("feed.txt", "one\n");
    let first = run(&ws);
    assert_eq!(ws.read("app/dist/app.txt"), "one\napp\n");
    assert_eq!(first.cache_of("app#build"), "saved", "{first}");
    // Identical bytes from the uncached upstream: the dependent hits.
    let same = run(&ws);
    assert_eq!(same.cache_of("app#build"), "hit", "{same}");
    ws.write("feed.txt", "two\n");
    let out = run(&ws);
    executed(&out, "gen#build");
    executed(&out, "app#build");
    assert_eq!(ws.read("app/dist/app.txt"), "two\napp\n", "stale bytes served\n{out}");
}

/// gen strips comment lines from its source into `dist/out.txt`: a comment edit re-runs it
/// with identical outputs.
const GEN_STRIPS: &str = "command = \"mkdir -p dist && grep -v '^#' src/in.txt > dist/out.txt\"\n\
     inputs = [\"src/**\"]\noutputs = [\"dist/**\"]\n";

#[test]
fn a_dependent_reading_its_upstreams_source_is_no_cutoff() {
    // As a TypeScript build that resolves a workspace package to its `src/` (a `paths`
    // mapping) rather than to its `dist/`.
    let ws = ws(
        GEN_STRIPS,
        "command = \"mkdir -p dist && cat ../gen/dist/out.txt ../gen/src/in.txt > dist/app.txt\"\n\
         inputs = [\"src/**\"]\noutputs = [\"dist/**\"]\n",
    )
    .file("gen/src/in.txt", "# one\nvalue\n");
    run(&ws);
    ws.write("gen/src/in.txt", "# two\nvalue\n");
    let out = run(&ws);
    executed(&out, "gen#build");
    executed(&out, "app#build");
    assert_eq!(ws.read("app/dist/app.txt"), "value\n# two\nvalue\n", "stale bytes served\n{out}");
    // The run says why it did not cut off, naming the upstream.
    let said = out.notices_of("app#build").join("\n");
    assert!(
        said.contains("`gen#build`") && said.contains("identical") && said.contains("sandbox"),
        "{said}\n{out}"
    );
}

#[test]
fn a_gitignored_file_the_upstream_writes_beside_its_outputs_is_no_cutoff() {
    // gen also writes `.cache/meta.txt` (ignored by git, not a declared output), which app
    // reads: a code generator's side file, a tsbuildinfo.
    let ws = ws(
        "command = \"mkdir -p dist .cache && grep -v '^#' src/in.txt > dist/out.txt && grep '^#' src/in.txt > .cache/meta.txt\"\n\
         inputs = [\"src/**\"]\noutputs = [\"dist/**\"]\n",
        "command = \"mkdir -p dist && cat ../gen/dist/out.txt ../gen/.cache/meta.txt > dist/app.txt\"\n\
         inputs = [\"src/**\"]\noutputs = [\"dist/**\"]\n",
    )
    .file(".gitignore", ".cache/\n")
    .file("gen/src/in.txt", "# one\nvalue\n");
    run(&ws);
    assert_eq!(ws.read("app/dist/app.txt"), "value\n# one\n");
    ws.write("gen/src/in.txt", "# two\nvalue\n");
    let out = run(&ws);
    executed(&out, "gen#build");
    executed(&out, "app#build");
    assert_eq!(ws.read("app/dist/app.txt"), "value\n# two\n", "stale bytes served\n{out}");
}

#[test]
fn why_says_a_dependent_that_can_read_its_upstreams_sources_is_not_cut_off() {
    let ws = ws(GEN_STRIPS, APP_READS_DIST.replace("x.txt", "out.txt").as_str())
        .file("gen/src/in.txt", "# one\nvalue\n");
    run(&ws);
    ws.write("gen/src/in.txt", "# two\nvalue\n");
    ws.prova(["run", "build", "-p", "gen"]).run().assert_code(0);
    let why = ws.prova(["why", "app#build"]).run();
    why.assert_code(0)
        .assert_stdout_contains("upstream `gen#build` key changed")
        .assert_stdout_contains("no early cutoff");
}

#[test]
fn a_sandboxed_dependent_is_cut_off_when_its_upstreams_bytes_hold() {
    if !sandbox_or_skip() {
        return;
    }
    let ws =
        ws(GEN_STRIPS, &format!("{}sandbox = true\n", APP_READS_DIST.replace("x.txt", "out.txt")))
            .file("gen/src/in.txt", "# one\nvalue\n");
    run(&ws);
    assert_eq!(ws.read("app/dist/app.txt"), "value\napp\n");
    ws.write("gen/src/in.txt", "# two\nvalue\n");
    let out = run(&ws);
    executed(&out, "gen#build");
    assert_eq!(out.cache_of("app#build"), "hit", "{out}");
    assert_eq!(out.report("app#build")["cache"]["cutoff"], true, "{out}");
    // One byte of difference re-runs it.
    ws.write("gen/src/in.txt", "# two\nvalue 2\n");
    let out = run(&ws);
    executed(&out, "app#build");
    assert_eq!(ws.read("app/dist/app.txt"), "value 2\napp\n");
}

#[test]
fn a_sandboxed_dependent_that_reads_its_upstreams_source_fails_rather_than_hit() {
    if !sandbox_or_skip() {
        return;
    }
    let ws = ws(
        GEN_STRIPS,
        "command = \"mkdir -p dist && cat ../gen/dist/out.txt ../gen/src/in.txt > dist/app.txt\"\n\
         inputs = [\"src/**\"]\noutputs = [\"dist/**\"]\nsandbox = true\n",
    )
    .file("gen/src/in.txt", "# one\nvalue\n");
    let out = ws.prova(["run", "build", "--all", "--json"]).run();
    out.assert_code(1);
    assert_eq!(out.status_of("app#build"), "failed", "{out}");
}

#[test]
fn a_dependent_reading_a_transitive_upstreams_source_through_a_sandboxed_middle_re_runs() {
    if !sandbox_or_skip() {
        return;
    }
    // top → mid (sandboxed: cut off when gen's bytes hold) → gen. top reads gen's source in
    // place: mid's key holds, gen's does not, and top must re-run.
    let ws = TempWorkspace::new()
        .file("prova.toml", "[workspace]\nprojects = [\"gen\", \"mid\", \"top\"]\n")
        .file("gen/prova.toml", &format!("[tasks.build]\n{GEN_STRIPS}"))
        .file("gen/src/in.txt", "# one\nvalue\n")
        .file(
            "mid/prova.toml",
            "[project]\ndeps = [\"gen\"]\n\n[tasks.build]\ndeps = [\"^build\"]\n\
             command = \"mkdir -p dist && cat ../gen/dist/out.txt > dist/mid.txt\"\n\
             inputs = [\"src/**\"]\noutputs = [\"dist/**\"]\nsandbox = true\n",
        )
        .file("mid/src/in.txt", "mid\n")
        .file(
            "top/prova.toml",
            "[project]\ndeps = [\"mid\"]\n\n[tasks.build]\ndeps = [\"^build\"]\n\
             command = \"mkdir -p dist && cat ../mid/dist/mid.txt ../gen/src/in.txt > dist/top.txt\"\n\
             inputs = [\"src/**\"]\noutputs = [\"dist/**\"]\n",
        )
        .file("top/src/in.txt", "top\n");
    run(&ws);
    ws.write("gen/src/in.txt", "# two\nvalue\n");
    let out = run(&ws);
    assert_eq!(out.cache_of("mid#build"), "hit", "mid is cut off\n{out}");
    executed(&out, "top#build");
    assert_eq!(ws.read("top/dist/top.txt"), "value\n# two\nvalue\n", "stale bytes served\n{out}");
}
