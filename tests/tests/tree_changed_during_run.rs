//! An installed tree that changes while a task runs (an `npm install` in another terminal, a
//! postinstall, a task writing into `node_modules`) withholds the task's entry. The key folds
//! the tree's digest as it was before the task started; an entry saved under it held what
//! the task made from the changed tree, and once the tree was back (`npm ci` from the same
//! lockfile, a `git stash` of a patch) a hit served those bytes. A task's input files were
//! rechecked before its save; its trees were not.
//!
//! The same holds for the rest of what a key folds from outside its input files: a symlink
//! input's target out of the workspace, a tree's links that leave it, the programs the
//! command starts (`binary:` pairs), and the places their lookups passed over (a program
//! appearing on `PATH` ahead of the keyed one, or where none was found).
//!
//! Each test changes the tree from inside a task (deterministic: no second process to time)
//! only when `FLIP` is set, puts it back, and runs again: the run must execute and make the
//! bytes the tree it sees gives, never restore the first run's.

use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;

use prova_tests::tsmono::ran;
use prova_tests::{Output, TempWorkspace};

/// One project `p` whose `build` runs `script` (in `p/`), beside a root `node_modules` (a
/// tree by default: there is a root `package.json`).
fn workspace(script: &str) -> TempWorkspace {
    TempWorkspace::new()
        .file("package.json", r#"{ "name": "root", "private": true }"#)
        .file(
            "prova.toml",
            &format!(
                "[workspace]\nprojects = [\"p\"]\n[tasks.build]\ncommand = \"{script}\"\n\
                 inputs = [\"src/**\"]\noutputs = [\"dist/**\"]\npass_env = [\"FLIP\"]\n"
            ),
        )
        .file("p/src/a.txt", "a\n")
        .file("node_modules/dep/index.js", "one\n")
        .file("node_modules/dep/package.json", r#"{ "name": "dep" }"#)
}

fn run(ws: &TempWorkspace, flip: bool) -> Output {
    let cmd = ws.prova(["run", "build", "--all", "--json"]);
    let cmd = if flip { cmd.env("FLIP", "1") } else { cmd.env_remove("FLIP") };
    let out = cmd.run();
    out.assert_code(0);
    out
}

/// The run that changed the tree saved nothing for `task`, and said which tree changed.
#[track_caller]
fn assert_withheld(out: &Output, task: &str, tree: &str) {
    let reason = out.not_saved_reason(task);
    assert!(reason.contains(&format!("`{tree}`")) && reason.contains("changed"), "{reason}\n{out}");
}

#[test]
fn a_file_of_the_tree_rewritten_while_the_task_ran_is_never_served_back() {
    let ws = workspace(
        "if [ -n \\\"$FLIP\\\" ]; then echo two > ../node_modules/dep/index.js; fi; \
         mkdir -p dist && cat ../node_modules/dep/index.js > dist/out.txt",
    );
    let first = run(&ws, true);
    assert_eq!(ws.read("p/dist/out.txt"), "two\n");
    assert_withheld(&first, "p#build", "node_modules");
    // Put back (`npm ci` from the same lockfile): the key is the first run's again.
    ws.write("node_modules/dep/index.js", "one\n");
    let back = run(&ws, false);
    assert_eq!(ran(&back), ["p#build"], "{back}");
    assert_eq!(ws.read("p/dist/out.txt"), "one\n", "the first run's bytes were served\n{back}");
    assert_eq!(back.cache_of("p#build"), "saved", "{back}");
    assert!(ran(&run(&ws, false)).is_empty(), "an unchanged tree hits");
}

#[test]
fn a_package_added_to_the_tree_while_the_task_ran_is_never_served_back() {
    let ws = workspace(
        "if [ -n \\\"$FLIP\\\" ]; then mkdir ../node_modules/late && echo x > \
         ../node_modules/late/index.js; fi; mkdir -p dist && ls ../node_modules > dist/out.txt",
    );
    let first = run(&ws, true);
    assert_eq!(ws.read("p/dist/out.txt"), "dep\nlate\n");
    assert_withheld(&first, "p#build", "node_modules");
    std::fs::remove_dir_all(ws.path("node_modules/late")).unwrap();
    let back = run(&ws, false);
    assert_eq!(ran(&back), ["p#build"], "{back}");
    assert_eq!(ws.read("p/dist/out.txt"), "dep\n", "{back}");
}

#[test]
fn a_mode_changed_in_the_tree_while_the_task_ran_is_never_served_back() {
    let ws = workspace(
        "if [ -n \\\"$FLIP\\\" ]; then chmod +x ../node_modules/dep/index.js; fi; mkdir -p dist \
         && if [ -x ../node_modules/dep/index.js ]; then echo exec; else echo plain; fi > \
         dist/out.txt",
    );
    let first = run(&ws, true);
    assert_eq!(ws.read("p/dist/out.txt"), "exec\n");
    assert_withheld(&first, "p#build", "node_modules");
    let file = ws.path("node_modules/dep/index.js");
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
    let back = run(&ws, false);
    assert_eq!(ran(&back), ["p#build"], "{back}");
    assert_eq!(ws.read("p/dist/out.txt"), "plain\n", "{back}");
}

/// `app` depends on `lib`: `lib`'s save comes first and finds the tree as keyed, then
/// `app` replaces a package the way npm does (a new directory renamed in) and reads it.
#[test]
fn a_package_replaced_after_an_earlier_save_found_the_tree_unchanged_is_never_served_back() {
    let ws = TempWorkspace::new()
        .file("package.json", r#"{ "name": "root", "private": true }"#)
        .file(
            "prova.toml",
            "[workspace]\nprojects = [\"lib\", \"app\"]\n[tasks.build]\n\
             command = \"sh ../build.sh\"\ndeps = [\"^build\"]\ninputs = [\"src/**\"]\n\
             outputs = [\"dist/**\"]\npass_env = [\"FLIP\"]\n",
        )
        .file("app/prova.toml", "[project]\ndeps = [\"lib\"]\n")
        .file("app/src/a.txt", "a\n")
        .file("lib/src/l.txt", "l\n")
        .file(
            "build.sh",
            "if [ -n \"$FLIP\" ] && [ \"${PWD##*/}\" = app ]; then\n\
             mkdir ../node_modules/.dep-new && echo two > ../node_modules/.dep-new/index.js\n\
             mv ../node_modules/dep ../node_modules/.dep-old\n\
             mv ../node_modules/.dep-new ../node_modules/dep\nfi\n\
             mkdir -p dist && cat ../node_modules/dep/index.js > dist/out.txt\n",
        )
        .file("node_modules/dep/index.js", "one\n");
    let toml = ws.read("prova.toml");
    ws.write(
        "prova.toml",
        &toml.replace("[workspace]\n", "[workspace]\ninputs = [\"//build.sh\"]\n"),
    );
    let first = run(&ws, true);
    assert_eq!(first.cache_of("lib#build"), "saved", "{first}");
    assert_eq!(ws.read("app/dist/out.txt"), "two\n");
    assert_withheld(&first, "app#build", "node_modules");
    std::fs::remove_dir_all(ws.path("node_modules/dep")).unwrap();
    std::fs::rename(ws.path("node_modules/.dep-old"), ws.path("node_modules/dep")).unwrap();
    let back = run(&ws, false);
    assert_eq!(ran(&back), ["app#build"], "{back}");
    assert_eq!(ws.read("app/dist/out.txt"), "one\n", "{back}");
}

/// A task that writes the same bytes into the tree every run (a tool's cache under
/// `node_modules/.cache`) is withheld only while the tree's contents move: the next run,
/// whose key folds the written cache, saves, and the one after hits.
#[test]
fn a_task_writing_the_same_bytes_into_its_tree_each_run_is_saved_once_they_settle() {
    let ws = workspace(
        "mkdir -p ../node_modules/.cache/tool && echo settled > ../node_modules/.cache/tool/c && \
         mkdir -p dist && cat ../node_modules/dep/index.js > dist/out.txt",
    );
    let first = run(&ws, false);
    assert_withheld(&first, "p#build", "node_modules");
    let second = run(&ws, false);
    assert_eq!(second.cache_of("p#build"), "saved", "{second}");
    assert!(ran(&run(&ws, false)).is_empty(), "the settled tree hits");
}

/// A link in the tree that leads out of the workspace (`npm link`, pnpm's `link:`): the key
/// folds what is out there, which no watch covers; it is followed again before the save.
#[test]
fn a_package_linked_from_outside_changed_while_the_task_ran_is_never_served_back() {
    let outside = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(outside.path().join("ext")).unwrap();
    std::fs::write(outside.path().join("ext/index.js"), "one\n").unwrap();
    let ext = outside.path().join("ext/index.js");
    let ws = workspace(&format!(
        "if [ -n \\\"$FLIP\\\" ]; then echo two > {}; fi; mkdir -p dist && cat \
         ../node_modules/ext/index.js > dist/out.txt",
        ext.display()
    ));
    std::os::unix::fs::symlink(outside.path().join("ext"), ws.path("node_modules/ext")).unwrap();
    let first = run(&ws, true);
    assert_eq!(ws.read("p/dist/out.txt"), "two\n");
    assert_withheld(&first, "p#build", "node_modules");
    std::fs::write(&ext, "one\n").unwrap();
    let back = run(&ws, false);
    assert_eq!(ran(&back), ["p#build"], "{back}");
    assert_eq!(ws.read("p/dist/out.txt"), "one\n", "{back}");
}

/// The same hole through an input: a symlink input that leads out of the workspace
/// (`src/shared -> ../../shared-lib`) is keyed by what it leads to, which no stamp of the
/// workspace covers.
#[test]
fn an_input_linked_from_outside_changed_while_the_task_ran_is_never_served_back() {
    let outside = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(outside.path().join("shared")).unwrap();
    let file = outside.path().join("shared/x.txt");
    std::fs::write(&file, "one\n").unwrap();
    let ws = workspace(&format!(
        "if [ -n \\\"$FLIP\\\" ]; then echo two > {}; fi; mkdir -p dist && cat src/shared/x.txt \
         > dist/out.txt",
        file.display()
    ));
    std::os::unix::fs::symlink(outside.path().join("shared"), ws.path("p/src/shared")).unwrap();
    let first = run(&ws, true);
    assert_eq!(ws.read("p/dist/out.txt"), "two\n");
    let reason = first.not_saved_reason("p#build");
    assert!(reason.contains("src/shared") && reason.contains("changed"), "{reason}\n{first}");
    std::fs::write(&file, "one\n").unwrap();
    let back = run(&ws, false);
    assert_eq!(ran(&back), ["p#build"], "{back}");
    assert_eq!(ws.read("p/dist/out.txt"), "one\n", "{back}");
}

/// The same hole through a program the key folds (`binary:<word>`, the default runtime
/// input): a tool outside the workspace upgraded in place while the task ran (`npm i -g`,
/// `cargo install`, a task installing a tool a later one starts).
#[test]
fn a_program_upgraded_while_the_task_ran_is_never_served_back() {
    let bin = tempfile::tempdir().unwrap();
    let tool = bin.path().join("mytool");
    let install = |body: &str| {
        std::fs::write(&tool, format!("#!/bin/sh\necho {body}\n")).unwrap();
        std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).unwrap();
    };
    install("one");
    let ws = workspace(&format!(
        "if [ -n \\\"$FLIP\\\" ]; then printf '#!/bin/sh\\\\necho two\\\\n' > {}; fi; mkdir -p \
         dist && mytool > dist/out.txt",
        tool.display()
    ));
    let path = format!("{}:{}", bin.path().display(), std::env::var("PATH").unwrap_or_default());
    let run = |flip: bool| run_on_path(&ws, &path, flip);
    let first = run(true);
    assert_eq!(ws.read("p/dist/out.txt"), "two\n");
    let reason = first.not_saved_reason("p#build");
    assert!(reason.contains("`mytool`") && reason.contains("changed"), "{reason}\n{first}");
    install("one");
    let back = run(false);
    assert_eq!(ran(&back), ["p#build"], "{back}");
    assert_eq!(ws.read("p/dist/out.txt"), "one\n", "{back}");
}

/// The same hole through a program's lookup: one that appears while the task runs where its
/// command looks first (a `PATH` entry ahead of the keyed one: `pip install --user` into
/// `~/.local/bin`, a task installing a newer tool a later one starts) is the one it starts.
/// The keyed program is as it was, so its stamps said nothing.
#[test]
fn a_program_shadowed_on_path_while_the_task_ran_is_never_served_back() {
    let bin = tempfile::tempdir().unwrap();
    let keyed = bin.path().join("late/mytool");
    std::fs::create_dir_all(keyed.parent().unwrap()).unwrap();
    std::fs::write(&keyed, "#!/bin/sh\necho one\n").unwrap();
    std::fs::set_permissions(&keyed, std::fs::Permissions::from_mode(0o755)).unwrap();
    // Ahead of it on PATH, a directory that does not exist yet.
    let early = bin.path().join("early");
    let path = format!("{}:{}", early.display(), keyed.parent().unwrap().display());
    assert_appearing_program_withheld(&early, "mytool", "mytool", &path, "one\n");
}

/// And through a lookup that found nothing: a program the command tries (`tool || fallback`)
/// that appears while the task runs is started, though the key folds its absence.
#[test]
fn a_program_installed_while_the_task_ran_where_none_was_is_never_served_back() {
    let bin = tempfile::tempdir().unwrap();
    let early = bin.path().join("early");
    let path = early.display().to_string();
    assert_appearing_program_withheld(
        &early,
        "maybetool",
        "(maybetool || echo none)",
        &path,
        "none\n",
    );
}

/// `p`'s build on `PATH` = `path` (then this process's): with `FLIP` set, its command
/// installs `name` (printing `two`) in `early` before it runs `then`. That run is withheld,
/// naming the program; once the program is gone again, the next run executes and writes
/// `back`, never the first run's bytes.
fn assert_appearing_program_withheld(early: &Path, name: &str, then: &str, path: &str, back: &str) {
    let ws = workspace(&format!(
        "if [ -n \\\"$FLIP\\\" ]; then mkdir -p {e} && printf '#!/bin/sh\\\\necho two\\\\n' > \
         {e}/{name} && chmod +x {e}/{name}; fi; mkdir -p dist && {then} > dist/out.txt",
        e = early.display()
    ));
    let path = format!("{path}:{}", std::env::var("PATH").unwrap_or_default());
    let first = run_on_path(&ws, &path, true);
    assert_eq!(ws.read("p/dist/out.txt"), "two\n");
    let reason = first.not_saved_reason("p#build");
    let named = format!("early/{name}");
    assert!(reason.contains(&named) && reason.contains("appeared"), "{reason}\n{first}");
    std::fs::remove_dir_all(early).expect("remove the program");
    let again = run_on_path(&ws, &path, false);
    assert_eq!(ran(&again), ["p#build"], "{again}");
    assert_eq!(ws.read("p/dist/out.txt"), back, "the first run's bytes were served\n{again}");
}

/// `prova run build --all --json` with `PATH` = `path`, `FLIP` set or not; it must pass.
fn run_on_path(ws: &TempWorkspace, path: &str, flip: bool) -> Output {
    let cmd = ws.prova(["run", "build", "--all", "--json"]).env("PATH", path);
    let out = if flip { cmd.env("FLIP", "1") } else { cmd.env_remove("FLIP") }.run();
    out.assert_code(0);
    out
}

/// Not a hole: a program in the workspace that an upstream builds during the run (`b` runs
/// `../a/dist/cli.sh`, which `a`'s build makes) is keyed by `a`'s outputs, not watched as a
/// place its lookup passed over: the entry is saved on the first run. (The next run keys
/// `cli.sh`'s `#!` interpreter too, which a run before `a` built it could not read.)
#[test]
fn a_program_an_upstream_builds_in_the_workspace_does_not_withhold_its_readers_entry() {
    let ws = TempWorkspace::new()
        .file("prova.toml", "[workspace]\nprojects = [\"a\", \"b\"]\n")
        .file("a/src/a.txt", "a\n")
        .file(
            "a/prova.toml",
            "[tasks.build]\ncommand = \"mkdir -p dist && printf '#!/bin/sh\\\\necho built\\\\n' > \
             dist/cli.sh && chmod +x dist/cli.sh\"\ninputs = [\"src/**\"]\noutputs = [\"dist/**\"]\n",
        )
        .file("b/src/b.txt", "b\n")
        .file(
            "b/prova.toml",
            "[project]\ndeps = [\"a\"]\n[tasks.build]\ncommand = \"mkdir -p dist && \
             ../a/dist/cli.sh > dist/out.txt\"\ndeps = [\"^build\"]\ninputs = [\"src/**\"]\n\
             outputs = [\"dist/**\"]\n",
        );
    let out = ws.prova(["run", "build", "--all", "--json"]).run();
    out.assert_code(0);
    assert_eq!(ws.read("b/dist/out.txt"), "built\n");
    assert_eq!(out.cache_of("b#build"), "saved", "{out}");
}
