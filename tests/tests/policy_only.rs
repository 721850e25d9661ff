//! `--only` and `--exclude-dependencies` (issue 19): the tasks asked for run, the tasks they
//! depend on do not. Under `--only` a cached dependency is restored and one that is not is
//! taken from the outputs on disk (refused when there are none); under
//! `--exclude-dependencies` a dependency is neither run nor restored. Either way the
//! dependent's key folds the bytes it really reads, so what it saves is sound. Local mode, the
//! farm, `--verify`, `--dry-run`.

use prova_tests::cluster::Cluster;
use prova_tests::{Output, TempWorkspace};

/// `gen#build` copies its source into `dist`; `app#build` reads gen's output; `app#build`
/// also waits on `gen#lint` (no outputs: folded by key; its inputs are not gen's sources).
const CONFIG: &str = r#"[workspace]
projects = ["gen", "app"]

[tasks.build]
command = "mkdir -p dist && cp src/in.txt dist/out.txt"
deps = ["^build"]
inputs = ["src/**"]
outputs = ["dist/**"]

[tasks.lint]
command = "cat lint/rules.txt"
inputs = ["lint/**"]
"#;

const APP: &str = r#"[project]
deps = ["gen"]

[tasks.build]
command = "mkdir -p dist && cat ../gen/dist/out.txt src/in.txt > dist/app.txt"
deps = ["^build", "gen#lint"]
inputs = ["src/**"]
outputs = ["dist/**"]
"#;

fn ws() -> TempWorkspace {
    TempWorkspace::new()
        .file("prova.toml", CONFIG)
        .file("gen/src/in.txt", "value 1\n")
        .file("gen/lint/rules.txt", "strict\n")
        .file("app/prova.toml", APP)
        .file("app/src/in.txt", "app\n")
}

fn note(out: &Output, task: &str) -> String {
    out.report(task)["note"].as_str().unwrap_or_default().to_owned()
}

#[track_caller]
fn not_run(out: &Output, task: &str, flag: &str) {
    let r = out.report(task);
    assert_eq!(out.status_of(task), "skipped", "{out}");
    assert_eq!(r["attempts"], 0, "{task} must not run\n{out}");
    assert!(note(out, task).contains(flag), "{task} says why: {}\n{out}", note(out, task));
}

#[test]
fn only_refuses_a_dependency_neither_cached_nor_on_disk() {
    let ws = ws();
    let out = ws.prova(["run", "build", "-p", "app", "--only", "--json"]).run();
    out.assert_code(1);
    assert_eq!(out.status_of("gen#build"), "failed", "{out}");
    let why = note(&out, "gen#build");
    assert!(why.contains("--only") && why.contains("absent"), "{why}");
    assert_eq!(out.status_of("app#build"), "skipped", "{out}");
    assert_eq!(out.report("gen#build")["attempts"], 0, "nothing ran\n{out}");
    // gen#lint declares no outputs: nothing to read, nothing refused.
    not_run(&out, "gen#lint", "--only");
}

#[test]
fn only_restores_a_cached_dependency_instead_of_running_it() {
    let ws = ws();
    ws.prova(["run", "build", "--all"]).run().assert_code(0);
    std::fs::remove_dir_all(ws.path("gen/dist")).expect("rm gen/dist");
    ws.write("app/src/in.txt", "app 2\n");

    let out = ws.prova(["run", "build", "-p", "app", "--only", "--json"]).run();
    out.assert_code(0);
    assert_eq!(out.cache_of("gen#build"), "hit", "a cached dependency is restored\n{out}");
    assert_eq!(out.cache_of("app#build"), "saved", "{out}");
    assert_eq!(out.report("gen#build")["attempts"], 0, "gen did not run\n{out}");
    assert_eq!(ws.read("gen/dist/out.txt"), "value 1\n");
    assert_eq!(ws.read("app/dist/app.txt"), "value 1\napp 2\n");
}

#[test]
fn only_keys_a_dependent_by_the_dependency_outputs_found_on_disk() {
    let ws = ws();
    ws.prova(["run", "build", "--all"]).run().assert_code(0);
    // gen's inputs move: it is not cached for them, and --only does not run it. Its old
    // outputs are on disk and app reads them; but gen's sources moved, which app (not
    // confined) could read in place, so its key folds gen's key too: it runs.
    ws.write("gen/src/in.txt", "value 2\n");
    let out = ws.prova(["run", "build", "-p", "app", "--only", "--json"]).run();
    out.assert_code(0);
    not_run(&out, "gen#build", "outputs on disk were used");
    assert_eq!(out.cache_of("app#build"), "saved", "{out}");
    assert_eq!(ws.read("gen/dist/out.txt"), "value 1\n", "gen's outputs were not touched");
    assert_eq!(ws.read("app/dist/app.txt"), "value 1\napp\n");
    // The same again: a hit.
    let again = ws.prova(["run", "build", "-p", "app", "--only", "--json"]).run();
    assert_eq!(again.cache_of("app#build"), "hit", "{again}");

    // Outputs changed by hand: app's key folds them, so app runs on what it reads.
    ws.write("gen/dist/out.txt", "by hand\n");
    let out = ws.prova(["run", "build", "-p", "app", "--only", "--json"]).run();
    out.assert_code(0);
    assert_eq!(out.cache_of("app#build"), "saved", "{out}");
    assert_eq!(ws.read("app/dist/app.txt"), "by hand\napp\n");

    // A full run brings gen up to date; app's entry from the hand-made bytes is not served.
    let full = ws.prova(["run", "build", "--all", "--json"]).run();
    full.assert_code(0);
    assert_eq!(full.cache_of("gen#build"), "saved", "{full}");
    assert_eq!(full.cache_of("app#build"), "saved", "{full}");
    assert_eq!(ws.read("app/dist/app.txt"), "value 2\napp\n");
}

#[test]
fn exclude_dependencies_neither_runs_nor_restores() {
    let ws = ws();
    ws.prova(["run", "build", "--all"]).run().assert_code(0);
    // gen is cached for its current inputs, but its outputs are gone: they stay gone.
    std::fs::remove_dir_all(ws.path("gen/dist")).expect("rm gen/dist");
    ws.write("app/src/in.txt", "app 2\n");
    let out = ws.prova(["run", "build", "-p", "app", "--exclude-dependencies", "--json"]).run();
    out.assert_code(1);
    not_run(&out, "gen#build", "--exclude-dependencies");
    assert!(!ws.path("gen/dist").exists(), "nothing was restored");
    assert_eq!(out.status_of("app#build"), "failed", "app reads what is on disk\n{out}");
    assert_eq!(out.report("gen#build")["attempts"], 0, "gen did not run\n{out}");

    // With the outputs on disk, app runs on them and is keyed by them.
    ws.prova(["run", "build", "-p", "gen"]).run().assert_code(0);
    let out = ws.prova(["run", "build", "-p", "app", "--exclude-dependencies", "--json"]).run();
    out.assert_code(0);
    not_run(&out, "gen#build", "--exclude-dependencies");
    assert_eq!(out.cache_of("app#build"), "saved", "{out}");
    let again = ws.prova(["run", "build", "--all", "--json"]).run();
    again.assert_code(0);
    assert_eq!(again.cache_of("app#build"), "hit", "the same bytes, the same key\n{again}");
}

#[test]
fn excluding_dependencies_is_refused_where_it_cannot_be_sound() {
    let ws = ws();
    let both = ws.prova(["run", "build", "-p", "app", "--only", "--exclude-dependencies"]).run();
    both.assert_code(2);
    let proof = ws.prova(["run", "build", "-p", "app", "--exclude-dependencies", "--verify"]).run();
    proof.assert_code(2);
    assert!(proof.stderr.contains("--exclude-dependencies cannot be proven"), "{proof}");
}

#[test]
fn only_under_verify_proves_on_a_restored_dependency_and_refuses_one_on_disk() {
    let ws = ws();
    ws.prova(["run", "build", "--all"]).run().assert_code(0);
    ws.write("app/src/in.txt", "app 2\n");
    let out = ws.prova(["run", "build", "-p", "app", "--only", "--verify", "--json"]).run();
    out.assert_code(0);
    assert_eq!(out.cache_of("gen#build"), "hit", "{out}");
    let verdicts = out.report("app#build")["verdicts"].to_string();
    assert!(verdicts.contains("proven"), "app is proven on gen's artifact: {verdicts}\n{out}");

    // Not cached: a proof cannot take gen's outputs from disk.
    ws.write("gen/src/in.txt", "value 2\n");
    let out = ws.prova(["run", "build", "-p", "app", "--only", "--verify", "--json"]).run();
    out.assert_code(1);
    assert_eq!(out.status_of("gen#build"), "failed", "{out}");
    assert!(note(&out, "gen#build").contains("proof"), "{}", note(&out, "gen#build"));
}

#[test]
fn dry_run_says_which_dependencies_would_not_run() {
    let ws = ws();
    ws.prova(["run", "build", "--all"]).run().assert_code(0);
    ws.write("gen/src/in.txt", "value 2\n");
    let text = ws.prova(["run", "build", "-p", "app", "--only", "--dry-run"]).run();
    text.assert_code(0);
    let gen_line = text.stdout.lines().find(|l| l.contains("gen#build")).unwrap_or_default();
    assert!(gen_line.contains("not run (--only)"), "{text}");
    let lint_line = text.stdout.lines().find(|l| l.contains("gen#lint")).unwrap_or_default();
    assert!(lint_line.contains("hit: would restore"), "{text}");
    let json = ws
        .prova(["run", "build", "-p", "app", "--exclude-dependencies", "--dry-run", "--json"])
        .run();
    json.assert_code(0);
    assert!(json.stdout.contains(r#""cache":"not_run""#), "{json}");
}

#[test]
fn on_the_farm_only_restores_cached_dependencies_and_refuses_the_rest() {
    let farm = Cluster::start(2);
    let ws = ws();
    farm.run(&ws, ["build", "--all"]).assert_code(0);
    ws.write("app/src/in.txt", "app 2\n");
    let out = farm.run(&ws, ["build", "-p", "app", "--only", "--json"]);
    out.assert_code(0);
    assert_eq!(out.cache_of("gen#build"), "hit", "{out}");
    assert_eq!(out.cache_of("app#build"), "saved", "{out}");
    assert_eq!(ws.read("app/dist/app.txt"), "value 1\napp 2\n");

    ws.write("gen/src/in.txt", "value 2\n");
    let out = farm.run(&ws, ["build", "-p", "app", "--only", "--json"]);
    out.assert_code(1);
    assert_eq!(out.status_of("gen#build"), "failed", "{out}");
    assert!(note(&out, "gen#build").contains("farm"), "{}", note(&out, "gen#build"));

    let excluded = farm.run(&ws, ["build", "-p", "app", "--exclude-dependencies"]);
    excluded.assert_code(2);
    assert!(excluded.stderr.contains("use --only"), "{excluded}");
}

/// `--force` re-executes the tasks the run executes; under `--only` those are the tasks asked
/// for, and the dependencies it leaves out are still restored from the cache (a run that
/// could not read them would take them from disk, or refuse them under `--verify`).
#[test]
fn force_with_only_reruns_what_was_asked_and_restores_its_dependencies() {
    let ws = ws();
    ws.prova(["run", "build", "--all"]).run().assert_code(0);
    std::fs::remove_dir_all(ws.path("gen/dist")).expect("rm gen/dist");

    let out = ws.prova(["run", "build", "-p", "app", "--only", "--force", "--json"]).run();
    out.assert_code(0);
    assert_eq!(out.cache_of("gen#build"), "hit", "a dependency left out is restored\n{out}");
    assert_eq!(out.report("gen#build")["attempts"], 0, "gen did not run\n{out}");
    assert_eq!(out.cache_of("gen#lint"), "hit", "{out}");
    assert_eq!(out.report("app#build")["attempts"], 1, "--force re-executes app\n{out}");
    assert_eq!(ws.read("gen/dist/out.txt"), "value 1\n");
    assert_eq!(ws.read("app/dist/app.txt"), "value 1\napp\n");

    // The proof that needs `--force` to run at all takes gen's artifact from the cache.
    let out =
        ws.prova(["run", "build", "-p", "app", "--only", "--force", "--verify", "--json"]).run();
    out.assert_code(0);
    assert_eq!(out.cache_of("gen#build"), "hit", "{out}");
    let verdicts = out.report("app#build")["verdicts"].to_string();
    assert!(verdicts.contains("proven"), "app is proven on gen's artifact: {verdicts}\n{out}");

    // Asked for by name, gen re-executes too.
    let out = ws.prova(["run", "build", "-p", "gen", "-p", "app", "--only", "--force", "--json"]);
    let out = out.run();
    out.assert_code(0);
    assert_eq!(out.report("gen#build")["attempts"], 1, "{out}");
    assert_eq!(out.report("app#build")["attempts"], 1, "{out}");

    // Without `--only` every task of the run re-executes, dependencies included.
    let out = ws.prova(["run", "build", "-p", "app", "--force", "--json"]).run();
    out.assert_code(0);
    assert_eq!(out.report("gen#build")["attempts"], 1, "{out}");
    assert_eq!(out.report("gen#lint")["attempts"], 1, "{out}");

    // A dry run says the same.
    let text = ws.prova(["run", "build", "-p", "app", "--only", "--force", "--dry-run"]).run();
    text.assert_code(0);
    let gen_line = text.stdout.lines().find(|l| l.contains("gen#build")).unwrap_or_default();
    assert!(gen_line.contains("hit: would restore"), "{text}");
    let app_line = text.stdout.lines().find(|l| l.contains("app#build")).unwrap_or_default();
    assert!(!app_line.contains("hit"), "{text}");
}

/// `--force` does not make `--cache local:w` (reads off, asked for by name) read, and does
/// not make `--exclude-dependencies` restore.
#[test]
fn force_reads_nothing_the_run_was_told_not_to_read() {
    let ws = ws();
    ws.prova(["run", "build", "--all"]).run().assert_code(0);
    let out = ws.prova(["run", "build", "-p", "app", "--only", "--cache", "local:w", "--json"]);
    let out = out.run();
    out.assert_code(0);
    not_run(&out, "gen#build", "outputs on disk were used");

    std::fs::remove_dir_all(ws.path("gen/dist")).expect("rm gen/dist");
    let args = ["run", "build", "-p", "app", "--exclude-dependencies", "--force", "--json"];
    let out = ws.prova(args).run();
    out.assert_code(1);
    not_run(&out, "gen#build", "--exclude-dependencies");
    assert!(!ws.path("gen/dist").exists(), "nothing was restored");
}

#[test]
fn on_the_farm_force_with_only_restores_the_dependencies_it_leaves_out() {
    let farm = Cluster::start(2);
    let ws = ws();
    farm.run(&ws, ["build", "--all"]).assert_code(0);
    let out = farm.run(&ws, ["build", "-p", "app", "--only", "--force", "--json"]);
    out.assert_code(0);
    assert_eq!(out.cache_of("gen#build"), "hit", "{out}");
    assert_eq!(out.report("gen#build")["attempts"], 0, "{out}");
    assert_eq!(out.report("app#build")["attempts"], 1, "{out}");
    assert_eq!(ws.read("app/dist/app.txt"), "value 1\napp\n");
}
