//! Outputs never delete sources (issue 27). `outputs = ["dist/**", "src/**"]` beside
//! `inputs = ["src/**"]` was accepted, and the clean before the run deleted the sources,
//! uncommitted edits included. Now an output that can match any declared input — the
//! task's own, another task's, another project's `//` one, `[workspace] inputs` or
//! `fingerprint` — is a config error (exit 2, `file:line:col` of the output, a `help:`),
//! before anything runs; and whatever the config says, no clean, restore, proof write-back
//! or farm download deletes or overwrites a file git tracks (the task fails, naming it).
//!
//! Each case is a real git repository with one commit, an uncommitted edit to a tracked
//! source and an untracked new source, and checks both survive.

use std::path::Path;
use std::process::Command;

use prova_tests::cluster::Cluster;
use prova_tests::{Output, TempWorkspace};

const EDIT: &str = "my uncommitted edit\n";
const NEW: &str = "a source not yet added\n";

fn git(dir: &Path, args: &[&str]) {
    let status = Command::new("git")
        .args(["-c", "user.name=t", "-c", "user.email=t@t"])
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .status()
        .expect("running git");
    assert!(status.success(), "git {args:?} failed");
}

/// Project `p` (and `q`) with `files`, committed; then `p/src/a.txt` edited and
/// `p/src/new.txt` created, neither committed.
fn committed(root_toml: &str, files: &[(&str, &str)]) -> TempWorkspace {
    let mut ws = TempWorkspace::new()
        .file("prova.toml", root_toml)
        .file(".gitignore", ".prova/\n")
        .file("p/src/a.txt", "committed\n")
        .file("q/src/q.txt", "q\n")
        .file("types/t.d.ts", "t\n");
    for (rel, text) in files {
        ws = ws.file(rel, text);
    }
    git(ws.root(), &["init", "-q"]);
    git(ws.root(), &["add", "-A"]);
    git(ws.root(), &["commit", "-q", "-m", "c"]);
    ws.write("p/src/a.txt", EDIT);
    ws.write("p/src/new.txt", NEW);
    ws
}

const ROOT: &str = "[workspace]\nprojects = [\"p\", \"q\"]\n";

#[track_caller]
fn assert_sources_intact(ws: &TempWorkspace, what: &str) {
    assert_eq!(ws.read("p/src/a.txt"), EDIT, "{what}: the uncommitted edit is gone");
    assert_eq!(ws.read("p/src/new.txt"), NEW, "{what}: the untracked source is gone");
    assert_eq!(ws.read("q/src/q.txt"), "q\n", "{what}");
    assert_eq!(ws.read("types/t.d.ts"), "t\n", "{what}");
}

/// Every way of running refuses the config with exit 2 at `at`, running nothing.
#[track_caller]
fn assert_refused(ws: &TempWorkspace, at: &str, what: &str) {
    for args in [
        &["run", "build", "--all"][..],
        &["run", "build", "--all", "--force"],
        &["run", "build", "--all", "--verify"],
        &["graph", "build", "--all"],
    ] {
        let out = ws.prova(args.iter().copied()).run();
        assert_eq!(out.code(), Some(2), "{what} {args:?}: expected exit 2\n{out}");
        assert!(out.stderr.contains(at), "{what}: the message starts at {at}\n{out}");
        assert!(out.stderr.contains("help: "), "{what}: the message says what to do\n{out}");
        assert!(!ws.exists("p/dist"), "{what}: something ran\n{out}");
    }
    assert_sources_intact(ws, what);
}

fn build(outputs: &str) -> String {
    format!(
        "[tasks.build]\ncommand = \"mkdir -p dist && cat src/a.txt > dist/out.txt\"\n\
         inputs = [\"src/**\"]\noutputs = [{outputs}]\n"
    )
}

#[test]
fn outputs_over_the_tasks_own_inputs_are_refused_and_nothing_is_deleted() {
    for (outputs, at) in [
        ("\"dist/**\", \"src/**\"", "p/prova.toml:4:23: output `src/**` of task `p#build`"),
        ("\"src\"", "p/prova.toml:4:12: output `src` of task `p#build`"),
        ("\"src/a.txt\"", "p/prova.toml:4:12: output `src/a.txt` of task `p#build`"),
        ("\"dist/**\", \"src/*.txt\"", "p/prova.toml:4:23: output `src/*.txt` of task `p#build`"),
    ] {
        let ws = committed(ROOT, &[("p/prova.toml", &build(outputs))]);
        assert_refused(&ws, at, outputs);
    }
}

/// `build` reading `x/**` (nothing of these tests) and writing `outputs`.
fn build_elsewhere(outputs: &str) -> String {
    build(outputs).replace("\"src/**\"", "\"x/**\"")
}

#[test]
fn an_output_over_another_tasks_inputs_is_refused() {
    // `lint` (not after `build`) reads what `build` would write.
    let lint = format!(
        "{}[tasks.lint]\ncommand = \"cat src/a.txt\"\ninputs = [\"src/*.txt\"]\n",
        build_elsewhere("\"dist/**\", \"src/gen.txt\"")
    );
    let ws = committed(ROOT, &[("p/prova.toml", &lint)]);
    assert_refused(
        &ws,
        "p/prova.toml:4:23: output `src/gen.txt` of task `p#build` can match input `src/*.txt` of \
         task `p#lint`",
        "lint's inputs",
    );
}

#[test]
fn an_output_under_another_projects_workspace_input_is_refused() {
    let q = "[tasks.check]\ncommand = \"true\"\ninputs = [\"//p/src/**\"]\n";
    let p = build_elsewhere("\"dist/**\", \"src/gen/**\"");
    let ws = committed(ROOT, &[("p/prova.toml", &p), ("q/prova.toml", q)]);
    assert_refused(
        &ws,
        "p/prova.toml:4:23: output `src/gen/**` of task `p#build` can match input `//p/src/**` \
         of task `q#check`",
        "q's // input",
    );
}

#[test]
fn an_output_over_the_workspace_inputs_or_fingerprint_is_refused() {
    for (setting, output, what) in [
        ("inputs = [\"//types/**\"]", "//types/gen.d.ts", "`//types/**` of `[workspace] inputs`"),
        (
            "fingerprint = [\"types/t.d.ts\"]",
            "//types/**",
            "`types/t.d.ts` of `[workspace] fingerprint`",
        ),
    ] {
        let root = format!("{ROOT}{setting}\n");
        let p = build_elsewhere(&format!("\"dist/**\", \"{output}\""));
        let ws = committed(&root, &[("p/prova.toml", &p)]);
        assert_refused(
            &ws,
            &format!("p/prova.toml:4:23: output `{output}` of task `p#build` can match {what}"),
            setting,
        );
    }
}

#[test]
fn an_output_inside_an_installed_tree_is_refused_and_the_packages_stay() {
    // With a root package.json, `node_modules` at the root and in every project is an
    // installed tree: an input of the tasks that see it. An output there was cleaned before
    // the run (`node_modules/**` deleted p's installed packages, `//node_modules/dep/**` the
    // root's), and a cache written into it moved the tree's own key every run.
    for outputs in [
        "\"dist/**\", \"node_modules/**\"",
        "\"dist/**\", \"node_modules\"",
        "\"dist/**\", \"node_modules/.cache/**\"",
        "\"dist/**\", \"//node_modules/dep/**\"",
    ] {
        let pkg = ("package.json", "{\"name\": \"root\", \"private\": true}");
        let ws = committed(ROOT, &[("p/prova.toml", &build_elsewhere(outputs)), pkg]);
        ws.write("node_modules/dep/index.js", "module.exports = 1;\n");
        ws.write("p/node_modules/x/index.js", "module.exports = 2;\n");
        let at = format!(
            "p/prova.toml:4:23: output `{}` of task `p#build` can match installed tree `",
            outputs.rsplit('"').nth(1).unwrap_or_default()
        );
        assert_refused(&ws, &at, outputs);
        assert_eq!(ws.read("node_modules/dep/index.js"), "module.exports = 1;\n", "{outputs}");
        assert_eq!(ws.read("p/node_modules/x/index.js"), "module.exports = 2;\n", "{outputs}");
    }
    // Out of `[workspace] trees`, the directory is the task's to write: accepted, run, hit.
    let root = format!("{ROOT}trees = []\n");
    let cache = "[tasks.build]\ncommand = \"mkdir -p node_modules/.cache && cat src/a.txt > node_modules/.cache/c\"\n\
                 inputs = [\"src/**\"]\noutputs = [\"node_modules/.cache/**\"]\n";
    let ws =
        committed(&root, &[("p/prova.toml", cache), (".gitignore", ".prova/\nnode_modules/\n")]);
    ws.prova(["run", "build", "--all"]).run().assert_code(0);
    let again = ws.prova(["run", "build", "--all", "--json"]).run();
    again.assert_code(0);
    assert_eq!(again.cache_of("p#build"), "hit", "{again}");
}

#[test]
fn outputs_that_leave_the_inputs_alone_still_run() {
    // The everyday shape, an input list that excludes the outputs, and a reader after its
    // writer: accepted, run, hit.
    let toml = "[tasks.gen]\ncommand = \"mkdir -p gen && cat src/a.txt > gen/g.txt\"\n\
                inputs = [\"src/**\"]\noutputs = [\"gen/**\"]\n\
                [tasks.build]\ncommand = \"mkdir -p dist && cat gen/g.txt src/*.txt > dist/out.txt\"\n\
                deps = [\"gen\"]\ninputs = [\"**/*.txt\", \"!dist/**\"]\noutputs = [\"dist/**\"]\n";
    let ws =
        committed(ROOT, &[("p/prova.toml", toml), (".gitignore", ".prova/\np/dist/\np/gen/\n")]);
    ws.prova(["run", "build", "--all"]).run().assert_code(0);
    assert_eq!(ws.read("p/dist/out.txt"), format!("{EDIT}{EDIT}{NEW}"));
    let again = ws.prova(["run", "build", "--all", "--json"]).run();
    again.assert_code(0);
    assert_eq!(again.cache_of("p#build"), "hit", "{again}");
    assert_sources_intact(&ws, "a good config");
}

/// The task's failure text: its `note` (or `detail`) and the stderr.
fn failure_text(out: &Output, task: &str) -> String {
    format!("{}\n{}", out.report(task), out.stderr)
}

#[test]
fn a_clean_never_deletes_a_file_git_tracks() {
    // Default inputs are "every file but the outputs": the config is accepted, but git tracks
    // `src/a.txt` (edited, uncommitted) — the clean deletes nothing and the task fails.
    let toml = "[tasks.build]\ncommand = \"mkdir -p src && echo gen > src/gen.txt\"\noutputs = [\"src/**\"]\n";
    let ws = committed(ROOT, &[("p/prova.toml", toml)]);
    let out = ws.prova(["run", "build", "--all", "--json"]).run();
    out.assert_code(1);
    assert_eq!(out.status_of("p#build"), "failed", "{out}");
    let text = failure_text(&out, "p#build");
    assert!(text.contains("will not delete `p/src/a.txt`: git tracks it"), "{text}");
    assert!(!ws.exists("p/src/gen.txt"), "the task ran\n{out}");
    assert_sources_intact(&ws, "tracked source");
}

#[test]
fn a_clean_never_deletes_a_generated_file_someone_committed() {
    // In a directory nobody ignored; the config is fine, git tracking it is the problem.
    let toml = "[tasks.build]\ncommand = \"mkdir -p dist && echo new > dist/out.js\"\noutputs = [\"dist/**\"]\n";
    let ws = committed(ROOT, &[("p/prova.toml", toml), ("p/dist/out.js", "committed output\n")]);
    ws.write("p/dist/out.js", "hand-edited output\n");
    let out = ws.prova(["run", "build", "--all", "--json"]).run();
    out.assert_code(1);
    let text = failure_text(&out, "p#build");
    assert!(text.contains("`p/dist/out.js`: git tracks it"), "{text}");
    assert!(text.contains("git rm --cached"), "it says what to do: {text}");
    assert_eq!(ws.read("p/dist/out.js"), "hand-edited output\n");
}

/// `p#gen` writing `gen/out.txt` from `src/a.txt`, its outputs in no `.gitignore`; run once
/// (saved), then `gen/out.txt` committed and edited by hand.
fn committed_output() -> TempWorkspace {
    let toml = "[tasks.gen]\ncommand = \"mkdir -p gen && cat src/a.txt > gen/out.txt\"\n\
                inputs = [\"src/**\"]\noutputs = [\"gen/**\"]\n";
    let ws = committed(ROOT, &[("p/prova.toml", toml)]);
    let first = ws.prova(["run", "gen", "--all", "--json"]).run();
    first.assert_code(0);
    assert_eq!(first.cache_of("p#gen"), "saved", "{first}");
    git(ws.root(), &["add", "-f", "p/gen/out.txt"]);
    git(ws.root(), &["commit", "-q", "-m", "commit the generated file"]);
    ws.write("p/gen/out.txt", "hand edit\n");
    ws
}

#[test]
fn a_restore_never_overwrites_a_file_git_tracks() {
    let ws = committed_output();
    let out = ws.prova(["run", "gen", "--all", "--json"]).run();
    // The hit is not restored over it, and the execution that follows cannot clean it.
    assert_ne!(out.cache_of("p#gen"), "hit", "restored over a tracked file\n{out}");
    out.assert_code(1);
    let text = format!("{out}");
    assert!(text.contains("would replace `p/gen/out.txt`, and git tracks it"), "{text}");
    assert_eq!(ws.read("p/gen/out.txt"), "hand edit\n");
    assert_sources_intact(&ws, "restore");
}

#[test]
fn a_restore_never_replaces_a_file_git_tracks_with_a_directory() {
    // The entry holds `gen/x/` (a directory with a file, or an empty one); `gen/x` is now a
    // file git tracks. Placing the entry would unlink it to make the directory.
    for (what, make) in [
        ("a file in it", "mkdir -p gen/x && cat src/a.txt > gen/x/y.txt"),
        ("empty", "mkdir -p gen/x"),
    ] {
        let toml = format!(
            "[tasks.gen]\ncommand = \"{make}\"\ninputs = [\"src/**\"]\noutputs = [\"gen/**\"]\n"
        );
        let ws = committed(ROOT, &[("p/prova.toml", &toml)]);
        let first = ws.prova(["run", "gen", "--all", "--json"]).run();
        first.assert_code(0);
        assert_eq!(first.cache_of("p#gen"), "saved", "{what}: {first}");
        std::fs::remove_dir_all(ws.path("p/gen/x")).expect("remove gen/x");
        ws.write("p/gen/x", "a tracked file\n");
        git(ws.root(), &["add", "-f", "p/gen/x"]);
        git(ws.root(), &["commit", "-q", "-m", "commit gen/x"]);
        ws.write("p/gen/x", "hand edit\n");
        let out = ws.prova(["run", "gen", "--all", "--json"]).run();
        assert_ne!(out.cache_of("p#gen"), "hit", "{what}: restored over a tracked file\n{out}");
        let text = format!("{out}");
        assert!(text.contains("would replace `p/gen/x`, and git tracks it"), "{what}: {text}");
        assert_eq!(ws.read("p/gen/x"), "hand edit\n", "{what}");
    }
}

#[test]
fn a_local_proofs_write_back_never_overwrites_a_file_git_tracks() {
    if !prova_tests::verify::sandbox_or_skip() {
        return;
    }
    let ws = committed_output();
    let out = ws.prova(["run", "gen", "--all", "--force", "--verify=inputs", "--json"]).run();
    assert_eq!(ws.read("p/gen/out.txt"), "hand edit\n", "written back over it\n{out}");
    let text = format!("{out}");
    assert!(text.contains("would replace `p/gen/out.txt`"), "{text}");
    assert_sources_intact(&ws, "proof");
}

#[test]
fn a_farm_download_never_overwrites_a_file_git_tracks() {
    let farm = Cluster::start(1);
    let ws = committed_output();
    let out = farm.run(&ws, ["gen", "--all", "--json"]);
    assert_eq!(ws.read("p/gen/out.txt"), "hand edit\n", "downloaded over it\n{out}");
    let text = format!("{out}");
    assert!(text.contains("would replace `p/gen/out.txt`"), "{text}");
    assert_sources_intact(&ws, "download");
}
