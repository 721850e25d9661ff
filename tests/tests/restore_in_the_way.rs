//! A hit never removes what the task's outputs do not select. Placing an entry makes each
//! directory it needs, and it used to unlink a symlink or file found where one goes: a hit
//! replaced a `dist -> ../shared/dist` symlink (committed, or the user's) with a real
//! directory, and deleted a file `gen/x` beside outputs `gen/**/*.txt` whose entry held
//! `gen/x/y.txt` — where an execution refuses to clean through the symlink and leaves the
//! file alone. Now the restore is refused, naming the path, and the execution that follows
//! says what it says.

use prova_tests::{Output, TempWorkspace};

fn git(ws: &TempWorkspace, args: &[&str]) {
    let ok = std::process::Command::new("git")
        .args(args)
        .current_dir(ws.root())
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@t")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@t")
        .status()
        .expect("git");
    assert!(ok.success(), "git {args:?}");
}

/// `p#build` running `command` with `outputs`, committed; run until it hits.
fn hitting(command: &str, outputs: &str, files: &[(&str, &str)]) -> TempWorkspace {
    let mut ws = TempWorkspace::new()
        .file("prova.toml", "[workspace]\nprojects = [\"p\"]\n")
        .file(".gitignore", ".prova/\ndist\nout\n")
        .file(
            "p/prova.toml",
            &format!(
                "[tasks.build]\ncommand = \"{command}\"\ninputs = [\"src/**\"]\noutputs = {outputs}\n"
            ),
        )
        .file("p/src/a.txt", "a\n");
    for (rel, text) in files {
        ws = ws.file(rel, text);
    }
    git(&ws, &["init", "-q"]);
    git(&ws, &["add", "-A"]);
    git(&ws, &["commit", "-q", "-m", "c"]);
    run(&ws);
    let hit = run(&ws);
    assert_eq!(hit.cache_of("p#build"), "hit", "{hit}");
    ws
}

fn run(ws: &TempWorkspace) -> Output {
    ws.prova(["run", "build", "--all", "--json"]).run()
}

#[track_caller]
fn refused(out: &Output, path: &str) {
    assert_ne!(out.cache_of("p#build"), "hit", "restored over `{path}`\n{out}");
    let text = format!("{out}");
    assert!(text.contains(&format!("would replace `{path}`")), "{text}");
}

#[test]
fn a_hit_never_replaces_a_symlinked_output_directory() {
    let ws = hitting("mkdir -p dist && cat src/a.txt > dist/a.txt", "[\"dist/**\"]", &[]);
    let elsewhere = tempfile::tempdir().expect("a directory elsewhere");
    std::fs::remove_dir_all(ws.path("p/dist")).expect("remove dist");
    std::os::unix::fs::symlink(elsewhere.path(), ws.path("p/dist")).expect("the user's link");
    let out = run(&ws);
    refused(&out, "p/dist");
    // The execution refuses it too, for its own reason.
    out.assert_code(1);
    assert!(format!("{out}").contains("is a symlink"), "{out}");
    let link = std::fs::symlink_metadata(ws.path("p/dist")).expect("dist");
    assert!(link.file_type().is_symlink(), "the user's link was replaced\n{out}");
    assert_eq!(std::fs::read_dir(elsewhere.path()).expect("elsewhere").count(), 0);
}

#[test]
fn a_hit_never_deletes_a_file_the_outputs_do_not_select() {
    // `gen` also holds a committed README, so what the project lists stays the same.
    let ws = hitting(
        "mkdir -p gen/x && cat src/a.txt > gen/x/y.txt",
        "[\"gen/**/*.txt\"]",
        &[("p/gen/README.md", "generated here\n")],
    );
    std::fs::remove_dir_all(ws.path("p/gen/x")).expect("remove gen/x");
    ws.write("p/gen/x", "mine\n");
    let out = run(&ws);
    refused(&out, "p/gen/x");
    assert_eq!(ws.read("p/gen/x"), "mine\n", "deleted\n{out}");
}

#[test]
fn a_hit_never_deletes_a_file_where_its_entry_holds_an_empty_directory() {
    // `out` itself is the output directory of `out/**`, not a path the outputs select.
    let ws = hitting("mkdir -p out", "[\"out/**\"]", &[]);
    std::fs::remove_dir(ws.path("p/out")).expect("remove out");
    ws.write("p/out", "mine\n");
    let out = run(&ws);
    refused(&out, "p/out");
    assert_eq!(ws.read("p/out"), "mine\n", "deleted\n{out}");
}

#[test]
fn a_hit_never_replaces_a_symlinked_directory_above_its_outputs() {
    let ws = hitting("mkdir -p gen/x && cat src/a.txt > gen/x/y.txt", "[\"gen/x/**\"]", &[]);
    let elsewhere = tempfile::tempdir().expect("a directory elsewhere");
    std::fs::create_dir_all(elsewhere.path().join("x")).expect("x out there");
    std::fs::remove_dir_all(ws.path("p/gen")).expect("remove gen");
    std::os::unix::fs::symlink(elsewhere.path(), ws.path("p/gen")).expect("the user's link");
    let out = run(&ws);
    let link = std::fs::symlink_metadata(ws.path("p/gen")).expect("gen");
    assert!(link.file_type().is_symlink(), "the user's link was replaced\n{out}");
    assert!(!elsewhere.path().join("x/y.txt").exists(), "written through the link\n{out}");
    assert_ne!(out.cache_of("p#build"), "hit", "{out}");
}

#[test]
fn a_farm_download_never_replaces_a_symlinked_output_directory() {
    // The farm executes in its own root; bringing the outputs back is a restore like a hit.
    let farm = prova_tests::cluster::Cluster::start(1);
    let ws = TempWorkspace::new()
        .file("prova.toml", "[workspace]\nprojects = [\"p\"]\n")
        .file(
            "p/prova.toml",
            "[tasks.build]\ncommand = \"mkdir -p dist && cat src/a.txt > dist/a.txt\"\n\
             inputs = [\"src/**\"]\noutputs = [\"dist/**\"]\n",
        )
        .file("p/src/a.txt", "a\n");
    let elsewhere = tempfile::tempdir().expect("a directory elsewhere");
    std::os::unix::fs::symlink(elsewhere.path(), ws.path("p/dist")).expect("the user's link");
    let out = farm.run(&ws, ["build", "--all", "--json"]);
    assert!(format!("{out}").contains("would replace `p/dist` (a symlink)"), "{out}");
    let link = std::fs::symlink_metadata(ws.path("p/dist")).expect("dist");
    assert!(link.file_type().is_symlink(), "the user's link was replaced\n{out}");
    assert_eq!(std::fs::read_dir(elsewhere.path()).expect("elsewhere").count(), 0, "{out}");
}

#[test]
fn a_hit_never_deletes_a_directory_holding_what_the_outputs_do_not_select() {
    // The entry holds the file `gen/a.txt`; a directory of that name now holds a file the
    // outputs do not select. Placing the file removed the directory with what it held.
    let ws = hitting(
        "mkdir -p gen && cat src/a.txt > gen/a.txt",
        "[\"gen/*.txt\"]",
        &[("p/gen/README.md", "generated here\n")],
    );
    std::fs::remove_file(ws.path("p/gen/a.txt")).expect("remove gen/a.txt");
    ws.write("p/gen/a.txt/notes.md", "mine\n");
    let out = run(&ws);
    refused(&out, "p/gen/a.txt");
    assert_eq!(ws.read("p/gen/a.txt/notes.md"), "mine\n", "deleted\n{out}");
    // Holding only what the outputs select (a stale output), it is replaced.
    std::fs::remove_file(ws.path("p/gen/a.txt/notes.md")).expect("remove notes");
    let out = run(&ws);
    assert_eq!(out.cache_of("p#build"), "hit", "{out}");
    assert_eq!(ws.read("p/gen/a.txt"), "a\n", "{out}");
}
