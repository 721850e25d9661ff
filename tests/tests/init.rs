//! `prova init` (issue 16): detects the kind of workspace, writes a commented `prova.toml`
//! that `prova run` accepts (its `#:schema` first line and the schema it names are checked
//! in `config_schema.rs`), and refuses to overwrite one without `--force`.

use prova_tests::TempWorkspace;

#[test]
fn init_on_an_npm_workspace_is_accepted_by_run() {
    let ws = TempWorkspace::new()
        .file("package.json", r#"{"private": true, "workspaces": ["packages/*"]}"#)
        .file("package-lock.json", "{}")
        .file("packages/lib/package.json", r#"{"name": "lib", "scripts": {"build": "echo lib > out"}}"#)
        .file(
            "packages/app/package.json",
            r#"{"name": "app", "scripts": {"build": "echo app > out"}, "dependencies": {"lib": "*"}}"#,
        );
    // Before init: the error recommends it.
    ws.prova(["run", "build", "--all"]).run().assert_code(2).assert_stderr_contains("prova init");
    ws.prova(["init"]).run().assert_code(0).assert_stdout_contains("npm/yarn workspace");
    let text = ws.read("prova.toml");
    assert!(text.contains("# "), "commented: {text}");
    assert!(text.contains("fingerprint = [\"package-lock.json\"]"), "{text}");
    // Editors find the schema: the first line names the copy init wrote beside the cache.
    assert!(text.starts_with("#:schema ./.prova/prova.schema.json\n"), "{text}");
    assert!(ws.exists(".prova/prova.schema.json"));
    let run = ws.prova(["run", "build", "--all", "--json"]).run();
    run.assert_code(0);
    assert_eq!(run.status_of("lib#build"), "succeeded");
    assert_eq!(run.status_of("app#build"), "succeeded");
    assert_eq!(ws.read("packages/app/out").trim(), "app");
}

#[test]
fn init_on_a_pnpm_workspace_is_accepted_by_run() {
    let ws = TempWorkspace::new()
        .file("pnpm-workspace.yaml", "packages:\n  - \"libs/*\"\n")
        .file("libs/a/package.json", r#"{"name": "a", "scripts": {"build": "echo a > out"}}"#);
    ws.prova(["init"]).run().assert_code(0).assert_stdout_contains("pnpm workspace");
    ws.prova(["run", "build", "--all"]).run().assert_code(0);
    assert_eq!(ws.read("libs/a/out").trim(), "a");
}

#[test]
fn init_on_a_cargo_workspace_lists_its_members() {
    let ws = TempWorkspace::new()
        .file("Cargo.toml", "[workspace]\nmembers = [\"crates/*\", \"tool\"]\nresolver = \"2\"\n")
        .file("Cargo.lock", "version = 4\n")
        .file("crates/x/Cargo.toml", "[package]\nname = \"x\"\nversion = \"0.1.0\"\n")
        .file("crates/y/Cargo.toml", "[package]\nname = \"y\"\nversion = \"0.1.0\"\n")
        .file("tool/Cargo.toml", "[package]\nname = \"tool\"\nversion = \"0.1.0\"\n");
    ws.prova(["init"]).run().assert_code(0).assert_stdout_contains("Cargo workspace");
    let text = ws.read("prova.toml");
    assert!(text.contains("projects = [\"crates/*\", \"tool\"]"), "{text}");
    let dry = ws.prova(["run", "build", "--all", "--dry-run"]).run();
    dry.assert_code(0);
    for t in ["x#build", "y#build", "tool#build"] {
        dry.assert_stdout_contains(t);
    }
}

#[test]
fn init_without_a_manifest_makes_the_directory_one_project() {
    let ws = TempWorkspace::new().file("README", "hi\n");
    ws.prova(["init"]).run().assert_code(0);
    ws.prova(["run", "build", "--all"]).run().assert_code(0);
}

#[test]
fn init_refuses_to_overwrite_without_force() {
    let ws = TempWorkspace::new().file("prova.toml", "[workspace]\nprojects = [\"keep\"]\n");
    ws.prova(["init"]).run().assert_code(2).assert_stderr_contains("--force");
    assert_eq!(ws.read("prova.toml"), "[workspace]\nprojects = [\"keep\"]\n");
    ws.prova(["init", "--force"]).run().assert_code(0);
    assert!(ws.read("prova.toml").contains("projects = [\".\"]"));
}
