//! What a task that declares `inputs` sees of its project directory's listing is keyed by
//! the entries' names (found on lerna-lite: every `tsc` build lists its package root, which
//! holds a README, a CHANGELOG, a LICENSE): a listing there and the absence of a name there
//! are keyed, not undeclared; a name that appears or goes re-runs the task with the bytes
//! the new listing gives; an edit of a file it does not read keeps the hit. An exec root
//! shows those names as empty stand-ins, so a proof run lists what a run in place lists, and
//! a stand-in it reads is named.

use prova_tests::TempWorkspace;
use prova_tests::verify::{
    cache_word, name, only_verdict, prova, sandbox_or_skip, task, workspace,
};
use serde_json::json;

/// `p#ls`: writes the listing of its project directory; declares `src/a.txt` only.
fn lister() -> TempWorkspace {
    workspace(&task("ls", "mkdir -p out && ls > out/ls.txt", &["out/ls.txt"]))
        .file("p/README.md", "read me\n")
}

/// Runs `task` of `p` (`--json`), expecting exit 0, and returns its cache word.
fn run(ws: &TempWorkspace, task: &str) -> String {
    let out = prova(ws, ["run", task, "--all", "--json"]).run();
    out.assert_code(0);
    cache_word(&out, &format!("p#{task}"))
}

#[test]
fn a_listing_of_its_project_directory_is_proven_and_keyed_by_names() {
    if !sandbox_or_skip() {
        return;
    }
    let ws = lister();
    let out = prova(&ws, ["run", "ls", "--all", "--verify=inputs", "--json"]).run();
    out.assert_code(0);
    let v = only_verdict(&out, "p#ls");
    assert_eq!(name(&v), "proven-complete", "{out}");
    assert!(ws.read("p/out/ls.txt").contains("README.md"));

    // An edit of a file it does not read keeps the key.
    ws.write("p/README.md", "read me, edited\n");
    assert_eq!(run(&ws, "ls"), "hit");

    // A new name moves it: the listing it writes is the new one, never the stale hit.
    ws.write("p/NOTES.md", "notes\n");
    assert_eq!(run(&ws, "ls"), "saved");
    assert!(ws.read("p/out/ls.txt").contains("NOTES.md"), "{}", ws.read("p/out/ls.txt"));

    // A directory counts by its name; a file added inside one already there does not.
    ws.write("p/docs/a.md", "a\n");
    assert_eq!(run(&ws, "ls"), "saved");
    assert!(ws.read("p/out/ls.txt").contains("docs"));
    ws.write("p/docs/b.md", "b\n");
    assert_eq!(run(&ws, "ls"), "hit");

    // A name gone brings back the entry made without it, with its bytes.
    std::fs::remove_file(ws.path("p/NOTES.md")).expect("removing NOTES.md");
    std::fs::remove_dir_all(ws.path("p/docs")).expect("removing docs");
    assert_eq!(run(&ws, "ls"), "hit");
    assert!(!ws.read("p/out/ls.txt").contains("NOTES.md"), "{}", ws.read("p/out/ls.txt"));
}

#[test]
fn why_names_the_entries_that_moved() {
    let ws = lister();
    assert_eq!(run(&ws, "ls"), "saved");
    ws.write("p/NOTES.md", "notes\n");
    let why = prova(&ws, ["why", "p#ls"]).run();
    why.assert_code(0);
    why.assert_stdout_contains("the entries of `p` changed: + NOTES.md");
}

#[test]
fn a_tracked_file_deleted_but_still_in_gits_index_leaves_the_listing() {
    let ws = lister();
    let git = |args: &[&str]| {
        let ok = std::process::Command::new("git")
            .args(["-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"])
            .args(args)
            .current_dir(ws.root())
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "git {args:?}");
    };
    git(&["init", "-q"]);
    ws.write(".gitignore", "out/\n.prova/\n");
    git(&["add", "."]);
    git(&["commit", "-q", "-m", "init"]);
    assert_eq!(run(&ws, "ls"), "saved");
    assert!(ws.read("p/out/ls.txt").contains("README.md"));
    // `git ls-files` still names it; a listing does not see it.
    std::fs::remove_file(ws.path("p/README.md")).expect("removing README.md");
    assert_eq!(run(&ws, "ls"), "saved");
    assert!(!ws.read("p/out/ls.txt").contains("README.md"), "{}", ws.read("p/out/ls.txt"));
}

#[test]
fn the_absence_of_a_name_in_its_project_directory_is_keyed() {
    if !sandbox_or_skip() {
        return;
    }
    let command = "mkdir -p out && if test -e config.local; then echo custom; else echo default; fi > out/c.txt";
    let ws = workspace(&task("probe", command, &["out/c.txt"]));
    let out = prova(&ws, ["run", "probe", "--all", "--verify=inputs", "--json"]).run();
    out.assert_code(0);
    assert_eq!(name(&only_verdict(&out, "p#probe")), "proven-complete", "{out}");
    assert_eq!(ws.read("p/out/c.txt"), "default\n");
    // The file appearing moves the key: what the task writes follows it.
    ws.write("p/config.local", "x\n");
    assert_eq!(run(&ws, "probe"), "saved");
    assert_eq!(ws.read("p/out/c.txt"), "custom\n");
}

#[test]
fn names_are_keyed_but_not_bytes() {
    if !sandbox_or_skip() {
        return;
    }
    // Reading a file of the project directory it does not declare is still undeclared.
    let ws =
        workspace(&task("readme", "mkdir -p out && cat README.md > out/r.txt", &["out/r.txt"]))
            .file("p/README.md", "read me\n");
    let out = prova(&ws, ["run", "readme", "--all", "--verify=inputs", "--json"]).run();
    out.assert_code(1);
    let v = only_verdict(&out, "p#readme");
    assert_eq!(name(&v), "undeclared-inputs", "{out}");
    assert_eq!(v["paths"], json!(["p/README.md"]), "{out}");
}

#[test]
fn a_file_the_task_leaves_in_its_project_directory_withholds_the_save() {
    // It writes outside its outputs, beside package.json: the listing its key folded is not
    // the one after it ran. The entry is withheld; the next run keys the new name and saves.
    let ws = workspace(&task(
        "stray",
        "mkdir -p out && ls > out/ls.txt && echo x > stray.txt",
        &["out/ls.txt"],
    ));
    let out = prova(&ws, ["run", "stray", "--all"]).run();
    out.assert_code(0);
    out.assert_stdout_contains(
        "the entries of its project directory changed while it ran (+ stray.txt)",
    );
    assert_eq!(run(&ws, "stray"), "saved");
    assert_eq!(run(&ws, "stray"), "hit");
}

#[test]
fn a_directory_of_its_project_directory_stands_in_by_name_and_kind() {
    if !sandbox_or_skip() {
        return;
    }
    // `test -d docs` sees what it sees in place; a listing of it does not.
    let probe = "mkdir -p out && if test -d docs; then echo docs; else echo none; fi > out/d.txt";
    let ws = workspace(&task("dir", probe, &["out/d.txt"])).file("p/docs/guide.md", "g\n");
    let out = prova(&ws, ["run", "dir", "--all", "--verify=inputs", "--json"]).run();
    out.assert_code(0);
    assert_eq!(name(&only_verdict(&out, "p#dir")), "proven-complete", "{out}");
    assert_eq!(ws.read("p/out/d.txt"), "docs\n");
    std::fs::remove_dir_all(ws.path("p/docs")).expect("removing docs");
    assert_eq!(run(&ws, "dir"), "saved");
    assert_eq!(ws.read("p/out/d.txt"), "none\n");

    let list = "mkdir -p out && ls docs > out/l.txt";
    let ws = workspace(&task("list", list, &["out/l.txt"])).file("p/docs/guide.md", "g\n");
    let out = prova(&ws, ["run", "list", "--all", "--verify=inputs", "--json"]).run();
    out.assert_code(1);
    let v = only_verdict(&out, "p#list");
    assert_eq!(name(&v), "undeclared-inputs", "{out}");
    assert_eq!(v["paths"], json!(["p/docs/"]), "{out}");
}

#[test]
fn a_determinism_rerun_lists_what_the_run_in_place_listed() {
    if !sandbox_or_skip() {
        return;
    }
    // The first execution lists the project directory in place; the re-run's exec root
    // shows the same names (stand-ins), so the listing is the same (in one collation: the
    // re-run's locale is another).
    let ws = workspace(&task("ls", "mkdir -p out && LC_ALL=C ls > out/ls.txt", &["out/ls.txt"]))
        .file("p/README.md", "read me\n");
    let out = prova(&ws, ["run", "ls", "--all", "--verify", "--json"]).run();
    out.assert_code(0);
    assert_eq!(name(&only_verdict(&out, "p#ls")), "proven-deterministic", "{out}");
}
