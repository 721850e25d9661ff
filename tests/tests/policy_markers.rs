//! Task environment markers (issue 19): every task sees `PROVA_TASK`, `PROVA_PROJECT`,
//! `PROVA_WORKSPACE` and `PROVA_RUN_ID`, locally and on a farm, and none of them is keyed:
//! a second run (another run id) hits the first run's entry.

use prova_tests::TempWorkspace;
use prova_tests::inproc::InProcessFarm;

fn ws() -> TempWorkspace {
    TempWorkspace::new()
        .file("prova.toml", "[workspace]\nprojects = [\"web\"]\n")
        .file("web/src/a.txt", "a\n")
        .file(
            "web/prova.toml",
            "[project]\nname = \"@acme/web\"\n[tasks.build]\n\
             command = \"env | grep '^PROVA_[A-Z_]*=' | grep -v PROVA_TREE | sort; mkdir -p out && cat src/a.txt > out/a.txt\"\n\
             inputs = [\"src/a.txt\"]\noutputs = [\"out/a.txt\"]\n",
        )
}

/// `NAME=value` lines the task printed.
fn markers(out: &prova_tests::Output) -> Vec<(String, String)> {
    out.output_of("@acme/web#build")
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

fn value<'a>(m: &'a [(String, String)], k: &str) -> &'a str {
    m.iter().find(|(n, _)| n == k).map_or("", |(_, v)| v.as_str())
}

#[test]
fn every_task_knows_it_runs_under_prova_and_no_marker_is_keyed() {
    let ws = ws();
    let first = ws.prova(["run", "build", "--all", "--json"]).run();
    first.assert_code(0);
    let m = markers(&first);
    let names: Vec<&str> = m.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(
        names,
        ["PROVA_PROJECT", "PROVA_RUN_ID", "PROVA_TASK", "PROVA_WORKSPACE"],
        "{first}"
    );
    assert_eq!(value(&m, "PROVA_TASK"), "@acme/web#build");
    assert_eq!(value(&m, "PROVA_PROJECT"), "@acme/web");
    let root = std::fs::canonicalize(ws.root()).expect("root");
    assert_eq!(value(&m, "PROVA_WORKSPACE"), root.display().to_string());
    assert!(!value(&m, "PROVA_RUN_ID").is_empty());
    // Another run, another run id, the same key: a hit.
    let second = ws.prova(["run", "build", "--all", "--json"]).run();
    assert_eq!(second.cache_of("@acme/web#build"), "hit", "a marker moved the key\n{second}");
    let forced = ws.prova(["run", "build", "--all", "--force", "--json"]).run();
    forced.assert_code(0);
    let again = markers(&forced);
    assert_ne!(value(&again, "PROVA_RUN_ID"), value(&m, "PROVA_RUN_ID"), "one id per run");
    assert_eq!(forced.report("@acme/web#build")["key"], first.report("@acme/web#build")["key"]);
}

#[test]
fn a_farm_task_sees_the_markers_with_its_exec_root_as_workspace() {
    let farm = InProcessFarm::start(1);
    let ws = ws();
    let out = farm.run(&ws, ["build", "--all", "--json"]);
    out.assert_code(0);
    let m = markers(&out);
    assert_eq!(value(&m, "PROVA_TASK"), "@acme/web#build", "{out}");
    assert_eq!(value(&m, "PROVA_PROJECT"), "@acme/web", "{out}");
    assert!(!value(&m, "PROVA_RUN_ID").is_empty(), "{out}");
    let root = value(&m, "PROVA_WORKSPACE");
    assert!(
        prova_tests::cluster::in_roots_of(std::path::Path::new(root), &farm.work_dir(0)),
        "the worker's exec root, not the client's path: {root}\n{out}"
    );
}
