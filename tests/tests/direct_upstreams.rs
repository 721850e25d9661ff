//! `upstream_outputs = "direct"` (issue 31, the hub edit): a sandboxed task whose exec roots
//! hold only its direct dependencies' outputs, and whose key folds only those. A transitive
//! upstream whose bytes moved leaves it a hit when its direct dependencies came out
//! byte-identical (early cutoff past one level); a read of a transitive upstream's outputs
//! fails it, because they are not there; a group among its dependencies is seen through; it
//! needs `sandbox = true`. Locally, on the farm (whose keys the client recomputes) and under
//! `--verify=inputs`, whose exec roots are the same.

use prova_tests::cluster::Cluster;
use prova_tests::verify::{sandbox_or_skip, verdict_names};
use prova_tests::{Output, TempWorkspace};

/// `gen → mid → top`, each `build` copying its source; `top` also reads what `TOP_READS`
/// names, from the upstream projects.
const CONFIG: &str = r#"[workspace]
projects = ["gen", "mid", "top"]

[tasks.build]
command = "mkdir -p dist && cat src/in.txt > dist/out.txt"
deps = ["^build"]
inputs = ["src/**"]
outputs = ["dist/**"]
"#;

/// `top`'s project file: `reads` are the upstream files it concatenates, `extra` more
/// task fields.
fn top(reads: &str, extra: &str) -> String {
    format!(
        "[project]\ndeps = [\"mid\"]\n\n[tasks.build]\ncommand = \"mkdir -p dist && cat {reads} \
         src/in.txt > dist/top.txt\"\nsandbox = true\n{extra}"
    )
}

const DIRECT: &str = "upstream_outputs = \"direct\"\n";

fn ws(top_toml: &str) -> TempWorkspace {
    TempWorkspace::new()
        .file("prova.toml", CONFIG)
        .file("gen/src/in.txt", "gen 1\n")
        .file("mid/prova.toml", "[project]\ndeps = [\"gen\"]\n")
        .file("mid/src/in.txt", "mid\n")
        .file("top/prova.toml", top_toml)
        .file("top/src/in.txt", "top\n")
}

#[track_caller]
fn executed(out: &Output, task: &str) {
    assert_eq!(out.status_of(task), "succeeded", "{out}");
    assert_eq!(out.cache_of(task), "saved", "{task} should have run\n{out}");
}

#[track_caller]
fn cut_off(out: &Output, task: &str) {
    assert_eq!(out.cache_of(task), "hit", "{task} should have hit\n{out}");
    assert_eq!(out.report(task)["cache"]["cutoff"], true, "{out}");
}

/// gen's bytes move; mid (which reads only its own source) re-runs with the same bytes.
fn edit_gen(ws: &TempWorkspace, n: u32) {
    ws.write("gen/src/in.txt", &format!("gen {n}\n"));
}

/// top failed on its read of gen's outputs, named with what to do (not "declare it in
/// `inputs`", which cannot bring an upstream's output into the exec root).
#[track_caller]
fn assert_hidden_read_named(out: &Output) {
    let note = out.report("top#build")["note"].as_str().unwrap_or_default().to_owned();
    assert!(
        note.starts_with("`sandbox = true`: it read undeclared inputs: `gen/dist/out.txt` (")
            && note.contains("is an output of `gen#build`, not a direct dependency")
            && !note.contains("declare them in `inputs`"),
        "{note}\n{out}"
    );
}

#[test]
fn a_transitive_upstreams_new_bytes_leave_a_direct_only_dependent_a_hit() {
    if !sandbox_or_skip() {
        return;
    }
    let ws = ws(&top("../mid/dist/out.txt", DIRECT));
    let first = ws.prova(["run", "build", "--all", "--json"]).run();
    first.assert_code(0);
    executed(&first, "top#build");
    assert_eq!(ws.read("top/dist/top.txt"), "mid\ntop\n");

    edit_gen(&ws, 2);
    let second = ws.prova(["run", "build", "--all", "--json"]).run();
    second.assert_code(0);
    executed(&second, "gen#build");
    executed(&second, "mid#build");
    cut_off(&second, "top#build");
    assert_eq!(ws.read("top/dist/top.txt"), "mid\ntop\n");

    // What it does read moves it.
    ws.write("mid/src/in.txt", "mid 2\n");
    let third = ws.prova(["run", "build", "--all", "--json"]).run();
    third.assert_code(0);
    executed(&third, "top#build");
    assert_eq!(ws.read("top/dist/top.txt"), "mid 2\ntop\n");

    // The same workspace with every upstream in the exec root re-runs top on gen's edit.
    let all = self::ws(&top("../mid/dist/out.txt", ""));
    all.prova(["run", "build", "--all"]).run().assert_code(0);
    edit_gen(&all, 2);
    let out = all.prova(["run", "build", "--all", "--json"]).run();
    out.assert_code(0);
    executed(&out, "top#build");
}

#[test]
fn a_direct_only_task_cannot_read_a_transitive_upstreams_outputs() {
    if !sandbox_or_skip() {
        return;
    }
    // gen's output is in the workspace (gen ran in place before top), but not in top's
    // exec root: top fails rather than read bytes its key does not fold.
    let ws = ws(&top("../gen/dist/out.txt ../mid/dist/out.txt", DIRECT));
    let out = ws.prova(["run", "build", "--all", "--json"]).run();
    out.assert_code(1);
    executed(&out, "mid#build");
    assert_eq!(out.status_of("top#build"), "failed", "{out}");
    assert_hidden_read_named(&out);
    assert!(!ws.exists("top/dist/top.txt"), "{out}");
    // Without the flag the exec root holds it, and top succeeds.
    ws.write("top/prova.toml", &top("../gen/dist/out.txt ../mid/dist/out.txt", ""));
    let out = ws.prova(["run", "build", "--all", "--json"]).run();
    out.assert_code(0);
    assert_eq!(ws.read("top/dist/top.txt"), "gen 1\nmid\ntop\n");
}

#[test]
fn a_probe_of_a_transitive_upstreams_gitignored_outputs_is_named_too() {
    if !sandbox_or_skip() {
        return;
    }
    // `dist` is gitignored, as in any JS repo; top only looks (as a compiler resolving a
    // module looks for `dist` before its files) and goes on without: it succeeds in the
    // sandbox, but what it looked for is named, and why.
    let probe = "mkdir -p dist && (test -d ../gen/dist || true) && cat ../mid/dist/out.txt \
                 src/in.txt > dist/top.txt";
    let ws = ws(&top("../mid/dist/out.txt", DIRECT)
        .replace("mkdir -p dist && cat ../mid/dist/out.txt src/in.txt > dist/top.txt", probe))
    .file(".gitignore", "dist\n");
    assert!(ws.read("top/prova.toml").contains("test -d"));
    let out = ws.prova(["run", "build", "--all", "--json"]).run();
    out.assert_code(1);
    let note = out.report("top#build")["note"].as_str().unwrap_or_default().to_owned();
    assert!(
        note.contains("`gen/dist`") && note.contains("is an output of `gen#build`"),
        "{note}\n{out}"
    );
}

#[test]
fn a_group_among_the_direct_dependencies_is_seen_through() {
    if !sandbox_or_skip() {
        return;
    }
    // top depends on `mid#ready`, a group of mid's build: it sees mid's outputs through it.
    let group = top("../mid/dist/out.txt", DIRECT).replace("sandbox = true\n", "")
        + "deps = [\"mid#ready\"]\nsandbox = true\n";
    let ws = ws(&group).file(
        "mid/prova.toml",
        "[project]\ndeps = [\"gen\"]\n\n[tasks.ready]\ndeps = [\"build\"]\n",
    );
    let out = ws.prova(["run", "build", "--all", "--json"]).run();
    out.assert_code(0);
    assert_eq!(ws.read("top/dist/top.txt"), "mid\ntop\n");
    edit_gen(&ws, 2);
    let out = ws.prova(["run", "build", "--all", "--json"]).run();
    out.assert_code(0);
    executed(&out, "mid#build");
    cut_off(&out, "top#build");
}

#[test]
fn direct_upstream_outputs_needs_a_sandboxed_task_and_a_known_value() {
    let ws = ws(&top("../mid/dist/out.txt", DIRECT).replace("sandbox = true\n", ""));
    let out = ws.prova(["run", "build", "--all"]).run();
    out.assert_code(2);
    out.assert_stderr_contains("`upstream_outputs = \"direct\"` needs it");
    out.assert_stderr_contains("top/prova.toml");
    ws.write("top/prova.toml", &top("../mid/dist/out.txt", "upstream_outputs = \"some\"\n"));
    let out = ws.prova(["run", "build", "--all"]).run();
    out.assert_code(2);
    out.assert_stderr_contains("upstream_outputs");
}

#[test]
fn verify_inputs_proves_a_direct_only_task_in_the_same_exec_root() {
    if !sandbox_or_skip() {
        return;
    }
    let ws = ws(&top("../mid/dist/out.txt", DIRECT));
    let out = ws.prova(["run", "build", "--all", "--json", "--verify=inputs"]).run();
    out.assert_code(0);
    let names = verdict_names(&out, "top#build");
    assert!(names.contains(&"proven-complete".to_owned()), "{names:?}\n{out}");
}

#[test]
fn the_farm_cuts_a_direct_only_dependent_off_and_the_client_agrees_on_its_key() {
    if !sandbox_or_skip() {
        return;
    }
    let farm = Cluster::start(2);
    let ws = ws(&top("../mid/dist/out.txt", DIRECT));
    farm.run(&ws, ["build", "--all", "--json"]).assert_code(0);
    edit_gen(&ws, 2);
    let second = farm.run(&ws, ["build", "--all", "--json"]);
    second.assert_code(0);
    executed(&second, "mid#build");
    cut_off(&second, "top#build");
    assert_eq!(ws.read("top/dist/top.txt"), "mid\ntop\n");
    // A read of gen's outputs fails there too: the farm's exec root is as small.
    ws.write("top/prova.toml", &top("../gen/dist/out.txt ../mid/dist/out.txt", DIRECT));
    let out = farm.run(&ws, ["build", "--all", "--json"]);
    out.assert_code(1);
    assert_eq!(out.status_of("top#build"), "failed", "{out}");
    assert_hidden_read_named(&out);
    // The keys the farm settled are the client's: a local run hits everything.
    ws.write("top/prova.toml", &top("../mid/dist/out.txt", DIRECT));
    let local = ws.prova(["run", "build", "--all", "--json"]).run();
    local.assert_code(0);
    for t in ["gen#build", "mid#build", "top#build"] {
        assert_eq!(local.cache_of(t), "hit", "{t}\n{local}");
    }
}
