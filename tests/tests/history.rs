//! The run history (issue 16): every run is recorded in `.prova/runs.db`; `prova runs` lists
//! them newest first, `prova last` prints the newest summary again (`--json`: the summary
//! line); `--profile FILE` writes a Chrome trace with one span per task, overlapping tasks
//! on their own lanes.

use prova_tests::TempWorkspace;
use serde_json::Value;

/// `a#talk` and `b#talk` meet on two FIFOs (each waits for the other), so with `-j 2` they
/// certainly overlap in time; `c#fail` exits 1.
fn workspace() -> TempWorkspace {
    let talk = "[tasks.talk]\ncommand = \"sh ./talk.sh\"\n";
    let ws = TempWorkspace::new()
        .file("prova.toml", "[workspace]\nprojects = [\"a\", \"b\", \"c\"]\n")
        .file("a/prova.toml", talk)
        .file("b/prova.toml", talk)
        .file("a/talk.sh", "echo go > ../a-to-b\nread x < ../b-to-a\necho a-done\n")
        .file("b/talk.sh", "read x < ../a-to-b\necho go > ../b-to-a\necho b-done\n")
        .file("c/prova.toml", "[tasks.fail]\ncommand = \"echo no; exit 1\"\n");
    ws.fifo("a-to-b");
    ws.fifo("b-to-a");
    ws
}

#[test]
fn last_prints_the_newest_runs_summary_again() {
    let ws = workspace();
    let none = ws.prova(["last"]).run();
    none.assert_code(2);
    none.assert_stderr_contains("no run recorded in this workspace yet");
    let empty = ws.prova(["runs"]).run();
    empty.assert_code(0);
    empty.assert_stdout_contains("no runs recorded");

    let ok = ws.prova(["run", "talk", "-p", "a", "-p", "b", "-j", "2", "--json"]).run();
    ok.assert_code(0);
    let ok_id = ok.json_lines()[0]["run_id"].as_str().unwrap_or_default().to_owned();
    let last = ws.prova(["last"]).run();
    last.assert_code(0);
    last.assert_stdout_contains(&format!("run {ok_id} at "));
    last.assert_stdout_contains("prova -C ");
    assert!(last.tasks_line().starts_with("Tasks:   2 succeeded, 0 failed"), "{last}");

    // A dry run is not a run: `last` still names the previous one.
    ws.prova(["run", "fail", "-p", "c", "--dry-run"]).run().assert_code(0);
    let failed = ws.prova(["run", "fail", "-p", "c"]).run();
    failed.assert_code(1);
    let last = ws.prova(["last"]).run();
    last.assert_code(1); // the run it shows failed
    assert!(last.tasks_line().starts_with("Tasks:   0 succeeded, 1 failed"), "{last}");
    last.assert_stdout_contains(" Failed:  c#fail (exit code 1)");
    let json = ws.prova(["last", "--json"]).run();
    let line = json.json_lines().pop().unwrap_or_default();
    assert_eq!(line["event"], "summary", "{json}");
    assert_eq!(line["summary"]["ok"], false, "{json}");
    assert_eq!(line["summary"]["totals"]["failed"], 1, "{json}");

    // `runs`: newest first, the dry run left out.
    let runs = ws.prova(["runs", "--json"]).run();
    runs.assert_code(0);
    let rows = runs.json_lines();
    assert_eq!(rows.len(), 2, "{runs}");
    assert_eq!(rows[1]["run_id"], ok_id.as_str(), "{runs}");
    assert_eq!(rows[0]["ok"], false, "{runs}");
    assert_eq!(rows[0]["failed"], 1, "{runs}");
    assert_eq!(rows[0]["run_id"], line["run_id"], "{runs}");
    let command: Vec<&str> = rows[0]["command"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    assert!(command.ends_with(&["run", "fail", "-p", "c"]), "{command:?}");
    let one = ws.prova(["runs", "-n", "1"]).run();
    one.assert_code(0);
    assert_eq!(one.stdout.lines().count(), 2, "a header and one run\n{one}");
    assert!(one.stdout.contains("1 failed") && one.stdout.contains("prova -C "), "{one}");
}

#[test]
fn profile_writes_a_chrome_trace_with_one_span_per_task() {
    let ws = workspace();
    let trace = ws.path("out/trace.json");
    let profile = trace.display().to_string();
    let out = ws
        .prova([
            "run",
            "talk",
            "fail",
            "--all",
            "-j",
            "2",
            "--continue",
            "--profile",
            profile.as_str(),
        ])
        .run();
    out.assert_code(1);
    let text = std::fs::read_to_string(&trace).unwrap_or_else(|e| panic!("no trace: {e}\n{out}"));
    let v: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON: {e}\n{text}"));
    let events = v["traceEvents"].as_array().cloned().unwrap_or_default();
    let spans: Vec<&Value> = events.iter().filter(|e| e["ph"] == "X").collect();
    let mut names: Vec<&str> = spans.iter().filter_map(|s| s["name"].as_str()).collect();
    names.sort_unstable();
    assert_eq!(names, ["a#talk", "b#talk", "c#fail"], "{text}");
    for s in &spans {
        assert!(s["ts"].is_u64() && s["dur"].is_u64() && s["pid"].is_u64(), "{s}");
        assert!(s["tid"].as_u64().is_some_and(|t| t >= 1), "{s}");
    }
    let span =
        |name: &str| spans.iter().find(|s| s["name"] == name).copied().cloned().unwrap_or_default();
    let (a, b) = (span("a#talk"), span("b#talk"));
    assert_ne!(a["tid"], b["tid"], "tasks that overlapped share a lane\n{text}");
    assert_eq!(span("c#fail")["args"]["status"], "failed", "{text}");
    // Lanes are named for the viewer.
    assert!(events.iter().any(|e| e["ph"] == "M" && e["name"] == "thread_name"), "{text}");
    // A hit is a span too (restored, not executed).
    let warm = ws.prova(["run", "talk", "--all", "--profile", profile.as_str()]).run();
    warm.assert_code(0);
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&trace).unwrap_or_default())
        .unwrap_or_default();
    let hits: Vec<&Value> = v["traceEvents"]
        .as_array()
        .map(|a| a.iter().filter(|e| e["ph"] == "X" && e["cat"] == "hit").collect())
        .unwrap_or_default();
    assert_eq!(hits.len(), 2, "{v}");
}

/// A secret passed on the command line (a forwarded `--token=$NPM_TOKEN`) is masked in what
/// the history and the summary keep, as task logs mask it.
#[test]
fn a_secret_on_the_command_line_is_not_recorded() {
    const SECRET: &str = "sentinel-argv-5c1e9a7d33";
    let ws = TempWorkspace::new()
        .file("prova.toml", "[workspace]\nprojects = [\"a\"]\n")
        .file("a/prova.toml", "[tasks.deploy]\ncommand = \"true\"\ncache = false\n");
    let token = format!("--token={SECRET}");
    let out = ws
        .prova(["run", "deploy", "--all", "--json", "--summarize", "--", token.as_str()])
        .env("NPM_TOKEN", SECRET)
        .run();
    out.assert_code(0);
    let command = out.json_lines().pop().unwrap_or_default()["command"].clone();
    assert!(command.to_string().contains("--token=***"), "{command}");
    assert!(!out.stdout.contains(SECRET), "{out}");
    // Every file of the history: the database, its WAL, the records not yet folded in.
    let history_bytes = || -> Vec<(String, Vec<u8>)> {
        std::fs::read_dir(ws.path(".prova"))
            .expect("the .prova directory")
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with("runs."))
            .map(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                (name, std::fs::read(e.path()).unwrap_or_default())
            })
            .collect()
    };
    let holds = |files: &[(String, Vec<u8>)]| -> Vec<String> {
        files
            .iter()
            .filter(|(_, b)| b.windows(SECRET.len()).any(|w| w == SECRET.as_bytes()))
            .map(|(n, _)| n.clone())
            .collect()
    };
    let files = history_bytes();
    assert!(files.iter().any(|(_, b)| !b.is_empty()), "the run was recorded: {files:?}");
    assert!(holds(&files).is_empty(), "the history holds the secret: {:?}", holds(&files));
    let runs = ws.prova(["runs", "--json"]).run();
    assert!(runs.stdout.contains("--token=***") && !runs.stdout.contains(SECRET), "{runs}");
    // Folded into the database by `prova runs`: still masked there.
    let files = history_bytes();
    assert!(holds(&files).is_empty(), "the history holds the secret: {:?}", holds(&files));
}

/// A run that starts with the pending records past half their bound folds them beside its
/// own work: afterwards the file holds only its own record, and the folded runs are listed
/// (the newest `KEEP`, the run itself first).
#[test]
fn a_run_folds_the_pending_records_it_starts_with() {
    let ws = TempWorkspace::new()
        .file("prova.toml", "[workspace]\nprojects = [\"a\"]\n")
        .file("a/prova.toml", "[tasks.build]\ncommand = \"echo built\"\n");
    ws.prova(["run", "build"]).run().assert_code(0);
    let record = ws.read(".prova/runs.pending");
    let line = record.lines().next().unwrap_or_default().to_owned();
    let first: Value = serde_json::from_str(&line).unwrap_or_default();
    let id = first["id"].as_str().unwrap_or_default().to_owned();
    assert!(!id.is_empty(), "a record with an id: {line}");
    // Past half the bound (4 MiB), short of the append's own fold: copies under other ids.
    let mut pending = String::new();
    let mut k = 0;
    while pending.len() <= 2_200_000 {
        pending
            .push_str(&line.replace(&format!("\"id\":\"{id}\""), &format!("\"id\":\"{id}-{k}\"")));
        pending.push('\n');
        k += 1;
    }
    std::fs::write(ws.path(".prova/runs.pending"), &pending).unwrap_or_default();
    let run = ws.prova(["run", "build", "--json"]).run();
    run.assert_code(0);
    let run_id = run.json_lines()[0]["run_id"].as_str().unwrap_or_default().to_owned();
    let left = ws.read(".prova/runs.pending");
    assert_eq!(left.lines().count(), 1, "only the run's own record is left pending");
    assert!(left.contains(&run_id), "{left}");
    let runs = ws.prova(["runs", "--json", "-n", "1000"]).run();
    runs.assert_code(0);
    let rows = runs.json_lines();
    assert_eq!(rows.len(), 200, "the newest KEEP runs: {} listed of {}", rows.len(), k + 2);
    assert_eq!(rows[0]["run_id"], run_id.as_str(), "the run itself newest");
    assert_eq!(rows[1]["run_id"], format!("{id}-{}", k - 1).as_str(), "then the copies");
}
