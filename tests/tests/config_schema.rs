//! The JSON Schema of `prova.toml` (`schemas/prova.toml.json`, issue 16) says what the parser
//! says: each table's property names are the parser's accepted keys (the lists behind
//! "unknown key … did you mean", `TableKind::keys`), tables nest as the parser nests them,
//! every example `prova.toml` (in `examples/`, the README and docs/) and every file `prova init`
//! writes validates, and a few broken
//! configs are refused by the schema and by `prova run` alike.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use prova_coordinator::config::JSON_SCHEMA;
use prova_coordinator::config::schema::{
    FALLBACK_VALUES, TableKind, UPLOAD_VALUES, UPSTREAM_OUTPUTS_VALUES,
};
use prova_tests::TempWorkspace;
use prova_tests::schema::{check_config, config_schema};
use serde_json::{Value, json};

/// The `$defs` entry describing each kind of table. No wildcard: a new kind does not compile
/// until the schema has a place for it.
fn def_of(kind: TableKind) -> &'static str {
    match kind {
        TableKind::WorkspaceTop => "root_file",
        TableKind::ProjectTop => "project_file",
        TableKind::Workspace => "workspace",
        TableKind::Project => "project",
        TableKind::Tasks => "tasks",
        TableKind::Task => "task",
        TableKind::Cache => "cache",
        TableKind::Reapi => "reapi",
        TableKind::Exec => "exec",
        TableKind::ExecReapi => "exec_reapi",
    }
}

fn def(kind: TableKind) -> &'static Value {
    let d = &config_schema()["$defs"][def_of(kind)];
    assert!(d.is_object(), "no $defs/{} in the schema", def_of(kind));
    d
}

fn reference(kind: TableKind) -> Value {
    json!({ "$ref": format!("#/$defs/{}", def_of(kind)) })
}

/// A TOML document as the JSON value an editor validates.
fn to_json(text: &str, what: &str) -> Value {
    let table: toml::Table = toml::from_str(text).unwrap_or_else(|e| panic!("{what}: {e}"));
    serde_json::to_value(table).unwrap_or_else(|e| panic!("{what}: {e}"))
}

#[track_caller]
fn assert_valid(text: &str, what: &str) {
    if let Err(e) = check_config(&to_json(text, what)) {
        panic!("{what} breaks schemas/prova.toml.json: {e}\n{text}");
    }
}

#[test]
fn every_table_has_exactly_the_parser_keys() {
    for &kind in TableKind::ALL {
        let d = def(kind);
        let in_schema: BTreeSet<&str> = d["properties"]
            .as_object()
            .map(|p| p.keys().map(String::as_str).collect())
            .unwrap_or_default();
        let in_parser: BTreeSet<&str> = kind.keys().iter().copied().collect();
        assert_eq!(in_schema, in_parser, "{kind:?}: $defs/{} properties", def_of(kind));
        assert_eq!(d["type"], "object", "{kind:?}");
        if kind == TableKind::Tasks {
            // Any task name; each value is a task table.
            assert_eq!(d["additionalProperties"], reference(TableKind::Task));
        } else {
            assert_eq!(
                d["additionalProperties"], false,
                "{kind:?}: the parser denies unknown keys"
            );
        }
        // Tables nest as the parser nests them.
        for key in kind.keys() {
            if let Some(child) = kind.child(key) {
                assert_eq!(d["properties"][*key], reference(child), "{kind:?}.{key}");
            }
        }
    }
    let top = &config_schema()["anyOf"];
    assert_eq!(
        *top,
        json!([reference(TableKind::WorkspaceTop), reference(TableKind::ProjectTop)]),
        "a file is either kind"
    );
}

#[test]
fn required_keys_and_enums_are_the_parser_s() {
    // The root file is the one with [workspace]; [cache.reapi] cannot go without an endpoint.
    assert_eq!(def(TableKind::WorkspaceTop)["required"], json!(["workspace"]));
    assert_eq!(def(TableKind::Reapi)["required"], json!(["endpoint"]));
    assert_eq!(def(TableKind::ExecReapi)["required"], json!(["endpoint"]));
    let ws = TempWorkspace::new()
        .file("prova.toml", "[workspace]\n[cache.reapi]\ninstance_name = \"x\"\n");
    assert!(check_config(&to_json(&ws.read("prova.toml"), "no endpoint")).is_err());
    ws.prova(["run", "build", "--all"]).run().assert_code(2).assert_stderr_contains("endpoint");
    // No other table requires a key.
    for &kind in TableKind::ALL {
        if !matches!(kind, TableKind::WorkspaceTop | TableKind::Reapi | TableKind::ExecReapi) {
            assert!(def(kind).get("required").is_none(), "{kind:?}");
        }
    }
    assert_eq!(def(TableKind::Reapi)["properties"]["upload"]["enum"], json!(UPLOAD_VALUES));
    assert_eq!(def(TableKind::Workspace)["properties"]["fallback"]["enum"], json!(FALLBACK_VALUES));
    assert_eq!(
        def(TableKind::Task)["properties"]["upstream_outputs"]["enum"],
        json!(UPSTREAM_OUTPUTS_VALUES)
    );
    // The embedded copy is the committed file.
    let committed = std::fs::read_to_string(repo().join("schemas/prova.toml.json"))
        .expect("schemas/prova.toml.json");
    assert_eq!(committed, JSON_SCHEMA);
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn config_files(dir: &Path, found: &mut Vec<PathBuf>) {
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    for entry in entries {
        let path = entry.expect("dir entry").path();
        if path.is_dir() {
            if path.file_name().is_none_or(|n| n != "node_modules") {
                config_files(&path, found);
            }
        } else if path.file_name().is_some_and(|n| n == "prova.toml") {
            found.push(path);
        }
    }
}

#[test]
fn every_example_validates() {
    let mut files = Vec::new();
    config_files(&repo().join("examples"), &mut files);
    assert!(files.len() >= 6, "examples/ has its prova.toml files: {files:?}");
    for file in files {
        let text = std::fs::read_to_string(&file).expect("example prova.toml");
        assert_valid(&text, &file.display().to_string());
    }
}

/// The documentation's example files (the TOML blocks of README.md and docs/*.md with a
/// `[workspace]` or `[project]` table; the others are fragments) validate: the documented
/// keys are the schema's.
#[test]
fn the_documented_examples_validate() {
    let mut checked = 0;
    for page in prova_tests::docs::markdown::pages() {
        let text = prova_tests::docs::markdown::read(&page);
        for block in prova_tests::docs::markdown::blocks(&page, &text) {
            if block.lang == "toml"
                && block
                    .body
                    .lines()
                    .any(|l| l.starts_with("[workspace]") || l.starts_with("[project]"))
            {
                assert_valid(&block.body, &block.at);
                checked += 1;
            }
        }
    }
    assert!(checked >= 3, "the documented example files: {checked}");
}

/// What `prova init` wrote, checked: the `#:schema` first line, the schema file it names,
/// and the file valid by that schema.
#[track_caller]
fn assert_init_output(ws: &TempWorkspace, what: &str) {
    let text = ws.read("prova.toml");
    assert_eq!(text.lines().next(), Some("#:schema ./.prova/prova.schema.json"), "{what}: {text}");
    assert_eq!(ws.read(".prova/prova.schema.json"), JSON_SCHEMA, "{what}");
    assert_valid(&text, what);
}

#[test]
fn what_init_writes_validates_and_names_the_schema() {
    let npm = TempWorkspace::new()
        .file("package.json", r#"{"private": true, "workspaces": ["packages/*"]}"#)
        .file("package-lock.json", "{}")
        .file("packages/a/package.json", r#"{"name": "a", "scripts": {"build": "echo a"}}"#);
    npm.prova(["init"]).run().assert_code(0);
    assert_init_output(&npm, "npm");
    let cargo = TempWorkspace::new()
        .file("Cargo.toml", "[workspace]\nmembers = [\"crates/*\"]\n")
        .file("Cargo.lock", "version = 4\n")
        .file("crates/x/Cargo.toml", "[package]\nname = \"x\"\nversion = \"0.1.0\"\n");
    cargo.prova(["init"]).run().assert_code(0);
    assert_init_output(&cargo, "cargo");
    // The parser reads past the directive: the file works as written.
    cargo.prova(["run", "build", "--all", "--dry-run"]).run().assert_code(0);
    let plain = TempWorkspace::new().file("README", "hi\n");
    plain.prova(["init"]).run().assert_code(0);
    assert_init_output(&plain, "plain");
}

#[test]
fn schema_config_prints_and_writes_the_schema() {
    let ws = TempWorkspace::new().file("prova.toml", "[workspace]\nprojects = [\"a\"]\n").dir("a");
    let out = ws.prova(["schema", "config"]).run();
    out.assert_code(0);
    assert_eq!(out.stdout, JSON_SCHEMA);
    ws.prova(["schema", "config", "--write"])
        .cwd("a")
        .run()
        .assert_code(0)
        .assert_stdout_contains(".prova/prova.schema.json");
    assert_eq!(ws.read(".prova/prova.schema.json"), JSON_SCHEMA);
}

/// A broken config, the message `prova run` gives for it, and the file fixed: the schema and
/// the parser refuse the first and accept the second.
struct Broken {
    what: &'static str,
    /// The root's prova.toml.
    root: &'static str,
    /// `a/prova.toml`.
    project: &'static str,
    stderr: &'static str,
    /// (root, project) fixed.
    fixed: (&'static str, &'static str),
}

const ROOT: &str = "[workspace]\nprojects = [\"a\"]\n";
const PROJECT: &str = "[tasks.build]\ncommand = \"true\"\n";

const BROKEN: &[Broken] = &[
    Broken {
        what: "an unknown task key",
        root: ROOT,
        project: "[tasks.build]\ncomand = \"true\"\n",
        stderr: "unknown key `comand` in [tasks.build]",
        fixed: (ROOT, PROJECT),
    },
    Broken {
        what: "an unknown key in [workspace]",
        root: "[workspace]\nproject = [\"a\"]\n",
        project: PROJECT,
        stderr: "unknown key `project` in [workspace]",
        fixed: (ROOT, PROJECT),
    },
    // (A project's file with [workspace] is a root file to the schema, which cannot see
    // where a file lies; [cache] it can tell.)
    Broken {
        what: "[cache] in a project's file",
        root: ROOT,
        project: "[cache.reapi]\nendpoint = \"grpc://h:1\"\n[tasks.build]\ncommand = \"true\"\n",
        stderr: "unknown key `cache` in the top level",
        fixed: (ROOT, PROJECT),
    },
    Broken {
        what: "a string for an integer",
        root: ROOT,
        project: "[tasks.build]\ncommand = \"true\"\nretries = \"3\"\n",
        stderr: "must be a non-negative integer",
        fixed: (ROOT, "[tasks.build]\ncommand = \"true\"\nretries = 3\n"),
    },
    Broken {
        what: "a string for an array",
        root: "[workspace]\nprojects = \"a\"\n",
        project: PROJECT,
        stderr: "`projects` in [workspace] must be an array of strings",
        fixed: (ROOT, PROJECT),
    },
    Broken {
        what: "too many retries",
        root: ROOT,
        project: "[tasks.build]\ncommand = \"true\"\nretries = 101\n",
        stderr: "more than the limit of 100",
        fixed: (ROOT, "[tasks.build]\ncommand = \"true\"\nretries = 100\n"),
    },
    Broken {
        what: "a bad env name",
        root: ROOT,
        project: "[tasks.build]\ncommand = \"true\"\nenv = [\"NODE-ENV\"]\n",
        stderr: "NODE-ENV",
        fixed: (ROOT, "[tasks.build]\ncommand = \"true\"\nenv = [\"NODE_ENV\"]\n"),
    },
    Broken {
        what: "a bad upload value",
        root: "[workspace]\nprojects = [\"a\"]\n[cache.reapi]\nendpoint = \"grpc://h:1\"\nupload = \"sometimes\"\n",
        project: PROJECT,
        stderr: "`upload` in [cache.reapi] must be one of \"ci\", \"always\" or \"never\"",
        fixed: (
            "[workspace]\nprojects = [\"a\"]\n[cache.reapi]\nendpoint = \"grpc://h:1\"\nupload = \"never\"\n",
            PROJECT,
        ),
    },
    Broken {
        what: "an unknown key in [cache.reapi]",
        root: "[workspace]\nprojects = [\"a\"]\n[cache.reapi]\nendpont = \"grpc://h:1\"\n",
        project: PROJECT,
        stderr: "unknown key `endpont` in [cache.reapi]",
        fixed: (
            "[workspace]\nprojects = [\"a\"]\n[cache.reapi]\nendpoint = \"grpc://h:1\"\n",
            PROJECT,
        ),
    },
];

fn schema_accepts(root: &str, project: &str) -> Result<(), String> {
    check_config(&to_json(root, "root"))?;
    check_config(&to_json(project, "project"))
}

#[test]
fn broken_configs_are_refused_by_the_schema_and_by_run() {
    for b in BROKEN {
        assert!(schema_accepts(b.root, b.project).is_err(), "the schema accepts {}", b.what);
        let ws = TempWorkspace::new().file("prova.toml", b.root).file("a/prova.toml", b.project);
        ws.prova(["run", "build", "--all"]).run().assert_code(2).assert_stderr_contains(b.stderr);
        let (root, project) = b.fixed;
        if let Err(e) = schema_accepts(root, project) {
            panic!("the schema refuses {} fixed: {e}", b.what);
        }
        ws.write("prova.toml", root);
        ws.write("a/prova.toml", project);
        // Loaded and planned, not run: the fixed [cache.reapi] names no real server.
        ws.prova(["run", "build", "--all", "--dry-run"]).run().assert_code(0);
    }
}
