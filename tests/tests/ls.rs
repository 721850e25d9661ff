//! `prova ls [--json]` (issue 16): projects, their project dependencies, and each task with
//! its dependencies as written; the JSON document is versioned and stable.

use prova_tests::TempWorkspace;
use serde_json::Value;

fn workspace() -> TempWorkspace {
    TempWorkspace::new()
        .file(
            "prova.toml",
            "[workspace]\nprojects = [\"libs/*\", \"app\"]\n[tasks.build]\ncommand = \"echo b\"\ndeps = [\"^build\"]\noutputs = [\"out\"]\n[tasks.test]\ncommand = \"echo t\"\ndeps = [\"build\"]\n",
        )
        .file("libs/core/prova.toml", "[project]\nname = \"core\"\n")
        .file("app/prova.toml", "[project]\ndeps = [\"core\"]\n[tasks.dev]\ncommand = \"sleep 100\"\npersistent = true\n")
}

#[test]
fn ls_lists_projects_tasks_and_their_deps() {
    let ws = workspace();
    let out = ws.prova(["ls"]).run();
    out.assert_code(0);
    out.assert_stdout_contains("core (libs/core)");
    out.assert_stdout_contains("app (app)  depends on: core");
    out.assert_stdout_contains("app#test: echo t  [after build]");
    out.assert_stdout_contains("core#build: echo b  [after ^build]");
    out.assert_stdout_contains("app#dev: sleep 100  (persistent)");
}

#[test]
fn ls_json_is_the_documented_document() {
    let ws = workspace();
    let out = ws.prova(["ls", "--json"]).run();
    out.assert_code(0);
    let doc: Value = serde_json::from_str(&out.stdout).unwrap_or(Value::Null);
    assert_eq!(doc["schema_version"], 1, "{doc}");
    let projects = doc["projects"].as_array().cloned().unwrap_or_default();
    let names = projects.iter().map(|p| p["name"].as_str().unwrap_or("")).collect::<Vec<_>>();
    assert_eq!(names, ["app", "core"], "sorted by directory: {doc}");
    let app = &projects[0];
    assert_eq!(app["dir"], "app");
    assert_eq!(app["deps"], serde_json::json!(["core"]));
    let tasks = app["tasks"].as_array().cloned().unwrap_or_default();
    let test = tasks.iter().find(|t| t["name"] == "test").cloned().unwrap_or(Value::Null);
    assert_eq!(test["deps"], serde_json::json!(["build"]), "{doc}");
    assert_eq!(test["command"], "echo t");
    let build = tasks.iter().find(|t| t["name"] == "build").cloned().unwrap_or(Value::Null);
    assert_eq!(build["outputs"], serde_json::json!(["out"]));
    assert_eq!(build["cache"], true);
    let dev = tasks.iter().find(|t| t["name"] == "dev").cloned().unwrap_or(Value::Null);
    assert_eq!(dev["persistent"], true);
}
