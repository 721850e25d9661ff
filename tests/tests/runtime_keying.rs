//! Every program a command starts is keyed, not only its first word (issue 27): behind `sh -c`,
//! `cd dir &&`, `env X=1`, a pipeline, a command substitution, `npx`, a script's `#!` line. A new build of the tool
//! on `PATH` is a miss wherever the command starts it; what prova cannot know without
//! running the command (`$TOOL`) is named by `prova why` and `prova show` as not keyed.

use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;

use prova_tests::TempWorkspace;

/// A directory first on `PATH` holding a fake `tool` (copies `src/a.txt` to `out/a.txt`
/// relative to the project) and a fake `npx` (runs its arguments).
struct Tools {
    dir: tempfile::TempDir,
}

impl Tools {
    fn new() -> Self {
        let dir = tempfile::Builder::new().prefix("prova-e2e-tools-").tempdir().expect("tempdir");
        let me = Self { dir };
        me.install("tool", "1");
        write_exec(&me.dir.path().join("npx"), "#!/bin/sh\nexec \"$@\"\n");
        me
    }

    /// Another build of `name` (a new file, as an upgrade writes one); the outputs stay the
    /// same.
    fn install(&self, name: &str, build: &str) {
        let body = format!(
            "#!/bin/sh\n# build {build}\nmkdir -p \"$PROVA_WORKSPACE/p/out\" && cat \"$PROVA_WORKSPACE/p/src/a.txt\" > \"$PROVA_WORKSPACE/p/out/a.txt\"\n"
        );
        write_exec(&self.dir.path().join(name), &body);
    }

    fn path(&self) -> String {
        format!("{}:{}", self.dir.path().display(), std::env::var("PATH").unwrap_or_default())
    }
}

fn write_exec(path: &Path, body: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, body).expect("write");
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    std::fs::rename(&tmp, path).expect("install");
}

/// Project `p` whose `build` runs `command` (a TOML literal string: no `'`).
fn ws(command: &str) -> TempWorkspace {
    assert!(!command.contains('\''), "{command}");
    let ws = TempWorkspace::new()
        .file("prova.toml", "[workspace]\nprojects = [\"p\"]\n")
        .file("p/src/a.txt", "hello\n")
        .file("p/sub/.keep", "")
        .file(
            "p/prova.toml",
            &format!(
                "[tasks.build]\ncommand = '{command}'\ninputs = [\"src/a.txt\"]\noutputs = [\"out/a.txt\"]\n"
            ),
        );
    // A workspace script whose `#!` line runs `tool` from PATH.
    write_exec(&ws.path("p/run.sh"), "#!/usr/bin/env tool\n");
    ws
}

fn cache_of(ws: &TempWorkspace, tools: &Tools) -> String {
    let out = ws.prova(["run", "build", "--all", "--json"]).env("PATH", &tools.path()).run();
    out.assert_code(0);
    out.cache_of("p#build")
}

/// Commands that start `tool` somewhere other than their first word.
const HIDDEN: &[&str] = &[
    "sh -c \"tool --quiet\"",
    "cd sub && tool",
    "env FLAVOUR=fast tool",
    "true | tool",
    "mkdir -p out && tool",
    "echo $(tool) > /dev/null",
    "npx tool",
    "if true; then tool; fi",
    "./run.sh",
];

#[test]
fn a_new_build_of_a_program_started_anywhere_in_the_command_is_a_miss() {
    // Every route is tried; the ones that did not key the program are listed together.
    let mut stale = Vec::new();
    for command in HIDDEN {
        let tools = Tools::new();
        let ws = ws(command);
        assert_eq!(cache_of(&ws, &tools), "saved", "{command}");
        assert_eq!(cache_of(&ws, &tools), "hit", "{command}: the same program is a hit");
        tools.install("tool", "2");
        let why = ws.prova(["why", "p#build"]).env("PATH", &tools.path()).run();
        why.assert_code(0);
        let named = why.stdout.contains("binary:tool");
        if cache_of(&ws, &tools) != "saved" || !named {
            stale.push(format!("{command}: a new build of `tool` was a hit (why: {why})"));
            continue;
        }
        tools.install("tool", "1");
        assert_eq!(cache_of(&ws, &tools), "hit", "{command}: the old build's entry is kept");
    }
    assert!(stale.is_empty(), "{}", stale.join("\n"));
}

#[test]
fn what_is_not_keyed_is_named_by_why_and_show() {
    let tools = Tools::new();
    let ws = ws("T=tool; $T");
    assert_eq!(cache_of(&ws, &tools), "saved");
    for args in [["why", "p#build"], ["show", "p#build"]] {
        let out = ws.prova(args).env("PATH", &tools.path()).run();
        out.assert_code(0);
        assert!(out.stdout.contains("not keyed"), "{args:?}\n{out}");
        assert!(out.stdout.contains("`$T`: the program is chosen when the command runs"), "{out}");
    }
    let json = ws.prova(["why", "p#build", "--json"]).env("PATH", &tools.path()).run();
    let v: serde_json::Value = serde_json::from_str(json.stdout.trim()).expect("json");
    assert!(v["not_keyed"][0].as_str().is_some_and(|s| s.contains("`$T`")), "{v}");
}
