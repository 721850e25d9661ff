//! The default runtime input (issue 19): with no `runtime` line, a task's key folds the path
//! and digest of the programs its command starts when they are outside the workspace (every
//! one of them since issue 27: `runtime_keying.rs`).
//! A new build of the tool on `PATH` is a miss and `why` names it; a program inside the
//! workspace, a shell builtin, `portable = true` and `[workspace] runtime_binary = false` fold
//! nothing of the kind; a warm run reads no program again (the digest is memoised by stat).

use std::os::unix::fs::PermissionsExt as _;

use prova_tests::TempWorkspace;

/// A directory holding a fake `tool` (a script copying its input), first on `PATH`.
struct Tool {
    dir: tempfile::TempDir,
}

impl Tool {
    fn new(build: &str) -> Self {
        let dir = tempfile::Builder::new().prefix("prova-e2e-tool-").tempdir().expect("tempdir");
        let me = Self { dir };
        me.install(build);
        me
    }

    /// Installs another build of the tool (a new file, as an upgrade writes one); `build`
    /// only changes a comment, so outputs stay the same.
    fn install(&self, build: &str) {
        let tmp = self.dir.path().join(".tool.tmp");
        std::fs::write(
            &tmp,
            format!("#!/bin/sh\n# build {build}\nmkdir -p out && cat src/a.txt > out/a.txt\n"),
        )
        .expect("write tool");
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        std::fs::rename(&tmp, self.dir.path().join("tool")).expect("install tool");
    }

    fn path(&self) -> String {
        format!("{}:{}", self.dir.path().display(), std::env::var("PATH").unwrap_or_default())
    }
}

fn ws(workspace_extra: &str, command: &str, task_extra: &str) -> TempWorkspace {
    TempWorkspace::new()
        .file("prova.toml", &format!("[workspace]\nprojects = [\"p\"]\n{workspace_extra}"))
        .file("p/src/a.txt", "hello\n")
        .file(
            "p/prova.toml",
            &format!(
                "[tasks.build]\ncommand = \"{command}\"\ninputs = [\"src/a.txt\"]\n\
                 outputs = [\"out/a.txt\"]\n{task_extra}"
            ),
        )
}

fn run(ws: &TempWorkspace, tool: &Tool) -> prova_tests::Output {
    ws.prova(["run", "build", "--all", "--json"]).env("PATH", &tool.path()).run()
}

fn why(ws: &TempWorkspace, tool: &Tool) -> String {
    let out = ws.prova(["why", "p#build"]).env("PATH", &tool.path()).run();
    out.assert_code(0);
    out.stdout
}

#[test]
fn a_new_build_of_the_program_a_command_starts_is_a_miss_named_by_why() {
    for command in ["tool", "FLAVOUR=fast tool --quiet"] {
        let ws = ws("", command, "");
        let tool = Tool::new("1");
        assert_eq!(run(&ws, &tool).cache_of("p#build"), "saved");
        assert_eq!(run(&ws, &tool).cache_of("p#build"), "hit", "the same program: a hit");
        tool.install("2");
        let said = why(&ws, &tool);
        assert!(said.contains("binary:tool"), "why names the program: {said}");
        let out = run(&ws, &tool);
        out.assert_code(0);
        assert_eq!(out.cache_of("p#build"), "saved", "a new build is a miss\n{out}");
        tool.install("1");
        assert_eq!(run(&ws, &tool).cache_of("p#build"), "hit", "the old build's entry is kept");
    }
}

#[test]
fn what_folds_no_program() {
    let tool = Tool::new("1");
    let cases = [
        // A program named by a variable is known only when the command runs (named as not
        // keyed by `why`: `runtime_keying.rs`).
        ("", "T=tool; $T", ""),
        // Opted out, or portable across machines.
        ("runtime_binary = false\n", "tool", ""),
        ("", "tool", "portable = true"),
    ];
    for (workspace, command, task) in cases {
        let ws = ws(workspace, command, task);
        assert_eq!(run(&ws, &tool).cache_of("p#build"), "saved", "{command}");
        tool.install("2");
        let out = run(&ws, &tool);
        assert_eq!(out.cache_of("p#build"), "hit", "{workspace}{command} {task}\n{out}");
        tool.install("1");
    }
    // A program inside the workspace is a workspace file, not a runtime input.
    let inside = ws("", "./tool.sh", "")
        .file("p/tool.sh", "#!/bin/sh\nmkdir -p out && cat src/a.txt > out/a.txt\n");
    std::fs::set_permissions(inside.path("p/tool.sh"), std::fs::Permissions::from_mode(0o755))
        .expect("chmod");
    let out = run(&inside, &tool);
    out.assert_code(0);
    let key: serde_json::Value = {
        let show = inside.prova(["show", "p#build", "--json"]).env("PATH", &tool.path()).run();
        show.assert_code(0);
        serde_json::from_str(show.stdout.trim()).unwrap_or_default()
    };
    let key = key.to_string();
    assert!(!key.contains("binary:./tool.sh"), "no program pair for ./tool.sh: {key}");
    // The interpreter its `#!` line names runs, though, and is keyed (`runtime_keying.rs`).
    assert!(key.contains("binary:/bin/sh"), "{key}");
}

#[test]
fn a_farm_worker_without_the_client_program_refuses_the_task_one_with_it_runs_it() {
    let farm = prova_tests::inproc::InProcessFarm::start(1);
    let tool = Tool::new("1");
    // The worker (this process's PATH) has no `tool`: the client's key is not for it.
    let ws = ws("", "tool", "");
    let out = farm.run_cmd(&ws, ["build", "--all", "--json"]).env("PATH", &tool.path()).run();
    out.assert_code(1);
    let note = out.report("p#build")["note"].as_str().unwrap_or_default().to_owned();
    assert!(note.contains("program `tool` differs on this worker"), "{out}");
    assert_eq!(out.cache_of("p#build"), "not_saved", "{out}");
    // Named by its absolute path, the worker finds the same bytes and runs it.
    let abs = ws_abs(&tool);
    let out = farm.run_cmd(&abs, ["build", "--all", "--json"]).run();
    out.assert_code(0);
    assert_eq!(out.cache_of("p#build"), "saved", "{out}");
}

fn ws_abs(tool: &Tool) -> TempWorkspace {
    ws("", &tool.dir.path().join("tool").display().to_string(), "")
}

#[test]
fn the_program_a_package_managers_shim_execs_is_keyed() {
    // pnpm's `node_modules/.bin` entries are `#!/bin/sh` shims around `exec node …`: the
    // program that runs is `node`, which the shim's own `#!` line does not name. A new build
    // of it (`nvm use 22`) must be a miss, as when the command names it.
    let tool = Tool::new("1");
    let shim = "#!/bin/sh\nbasedir=$(dirname \"$0\")\nif [ -x \"$basedir/tool\" ]; then\n  \
                exec \"$basedir/tool\" \"$@\"\nelse\n  exec tool \"$@\"\nfi\n";
    for command in ["npx shim", "node_modules/.bin/shim", "sh -c 'node_modules/.bin/shim'"] {
        let ws = ws("", command, "").file("p/node_modules/.bin/shim", shim);
        std::fs::set_permissions(
            ws.path("p/node_modules/.bin/shim"),
            std::fs::Permissions::from_mode(0o755),
        )
        .expect("chmod");
        assert_eq!(run(&ws, &tool).cache_of("p#build"), "saved", "{command}");
        assert_eq!(run(&ws, &tool).cache_of("p#build"), "hit", "{command}");
        tool.install("2");
        let said = why(&ws, &tool);
        assert!(said.contains("binary:tool"), "{command}: why names the program: {said}");
        let out = run(&ws, &tool);
        out.assert_code(0);
        assert_eq!(out.cache_of("p#build"), "saved", "{command}: a new build is a miss\n{out}");
        tool.install("1");
    }
}
