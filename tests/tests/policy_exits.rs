//! Exit explanations (issue 19): a command that is not found (127) names the `PATH` it was
//! looked up in, one that cannot be executed (126) says so, a death by signal names the
//! signal (`SIGKILL` — out of memory?), and a shell's `128 + N` says which signal killed what
//! it ran — in the failure line and in `--json`'s note, locally and on a farm.

use prova_tests::TempWorkspace;
use prova_tests::inproc::InProcessFarm;

fn ws(command: &str) -> TempWorkspace {
    TempWorkspace::new()
        .file("prova.toml", "[workspace]\nprojects = [\"p\"]\n")
        .file("p/prova.toml", &format!("[tasks.t]\ncommand = {command}\ncache = false\n"))
        .file("p/tool.sh", "echo hi\n")
}

/// The `--json` note of `p#t` and the text failure line, for a run expected to fail.
fn explained(ws: &TempWorkspace, path: Option<&str>) -> (String, String) {
    let mut json = ws.prova(["run", "t", "--all", "--json"]);
    let mut text = ws.prova(["run", "t", "--all"]);
    if let Some(p) = path {
        json = json.env("PATH", p);
        text = text.env("PATH", p);
    }
    let out = json.run();
    out.assert_code(1);
    let note = out.report("p#t")["note"].as_str().unwrap_or_default().to_owned();
    let out = text.run();
    out.assert_code(1);
    let line = out
        .stdout
        .lines()
        .find(|l| l.contains("failed:"))
        .unwrap_or_else(|| panic!("no failure line\n{out}"))
        .to_owned();
    (note, line)
}

#[test]
fn command_not_found_names_the_path_it_searched() {
    let ws = ws("\"prova-e2e-no-such-tool --build\"");
    let path = format!("/prova-e2e-nowhere:{}", std::env::var("PATH").unwrap_or_default());
    let (note, line) = explained(&ws, Some(&path));
    for s in [&note, &line] {
        assert!(s.contains("exit code 127: command not found"), "{s}");
        assert!(s.contains("PATH was /prova-e2e-nowhere:"), "{s}");
    }
    // An argv command that is not found never starts at all: that says so too.
    let ws = self::ws("[\"prova-e2e-no-such-tool\"]");
    let out = ws.prova(["run", "t", "--all", "--json"]).run();
    out.assert_code(1);
    let note = out.report("p#t")["note"].as_str().unwrap_or_default().to_owned();
    assert!(note.contains("prova-e2e-no-such-tool") || note.contains("not found"), "{note}");
}

#[test]
fn a_file_that_is_not_executable_says_so() {
    let ws = ws("\"./tool.sh\"");
    let (note, line) = explained(&ws, None);
    for s in [&note, &line] {
        assert!(s.contains("exit code 126: not executable"), "{s}");
    }
}

#[test]
fn a_signal_death_is_named_with_its_likely_cause() {
    let ws = ws("\"kill -9 $$\"");
    let (note, line) = explained(&ws, None);
    for s in [&note, &line] {
        assert!(s.contains("killed by SIGKILL (signal 9) — out of memory?"), "{s}");
    }
    let ws = self::ws("\"kill -SEGV $$\"");
    let (note, _) = explained(&ws, None);
    assert!(note.contains("killed by SIGSEGV (signal 11)"), "{note}");
    // A shell that reports its child's death as 128 + N.
    let ws = self::ws("\"sh -c 'kill -9 $$'; exit $?\"");
    let (note, _) = explained(&ws, None);
    assert!(note.contains("exit code 137: a process it ran was killed by SIGKILL"), "{note}");
}

#[test]
fn a_farm_worker_explains_exits_too() {
    let farm = InProcessFarm::start(1);
    let ws = ws("\"prova-e2e-no-such-tool\"");
    let out = farm.run(&ws, ["t", "--all", "--json"]);
    out.assert_code(1);
    let note = out.report("p#t")["note"].as_str().unwrap_or_default().to_owned();
    assert!(note.contains("exit code 127: command not found"), "{out}");
    assert!(note.contains("PATH was "), "the worker names its PATH\n{out}");
}
