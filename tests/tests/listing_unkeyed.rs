//! A listing shows what no key folds. A key folds files, and only those the file list holds
//! (or declared by name); a directory listing (`ls src`, a generator enumerating
//! directories) also shows empty directories, directories holding only gitignored files,
//! and gitignored files. The exec root holds none of them, so a traced run listed less
//! than a run in place would, the inputs proof judged the listing against the file list
//! alone and passed it, and a hit served the root's listing after one appeared. Now each
//! entry of the workspace's directory that the root did not show and no key folds is named,
//! with what to do about it; the task's own outputs and its upstreams' are not.

use prova_tests::verify::{name, only_verdict, prova, sandbox_or_skip, workspace};

fn task_listing(list: &str, inputs: &str, extra: &str) -> String {
    format!(
        "[tasks.list]\ncommand = \"mkdir -p out && {list} > out/list.txt\"\ninputs = [{inputs}]\n\
         outputs = [\"out/**\"]\n{extra}\n"
    )
}

fn verify(ws: &prova_tests::TempWorkspace) -> prova_tests::Output {
    prova(ws, ["run", "list", "--all", "--force", "--verify=inputs", "--json"]).run()
}

#[track_caller]
fn assert_named(out: &prova_tests::Output, paths: &[&str], advice: &[&str]) {
    out.assert_code(1);
    let v = only_verdict(out, "p#list");
    assert_eq!(name(&v), "undeclared-inputs", "{out}");
    assert_eq!(v["paths"], serde_json::json!(paths), "{out}");
    let given: Vec<String> = v["advice"]
        .as_array()
        .map(|a| a.iter().filter_map(|s| s.as_str().map(str::to_owned)).collect())
        .unwrap_or_default();
    for words in advice {
        assert!(given.iter().any(|g| g.contains(words)), "advice {words:?} in {given:?}\n{out}");
    }
}

#[track_caller]
fn assert_proven(out: &prova_tests::Output) {
    out.assert_code(0);
    assert_eq!(name(&only_verdict(out, "p#list")), "proven-complete", "{out}");
}

#[test]
fn an_empty_directory_a_listing_shows_is_named_and_a_hit_never_hid_it() {
    if !sandbox_or_skip() {
        return;
    }
    let ws = workspace(&task_listing("ls src", "\"src/**\"", ""));
    assert_proven(&verify(&ws));
    std::fs::create_dir(ws.path("p/src/later")).unwrap();
    let out = verify(&ws);
    assert_named(&out, &["p/src/later"], &["`p/src/later` is an empty directory"]);
    // Given a file, it is listed and keyed: the root shows it, and the key moved.
    ws.write("p/src/later/.gitkeep", "");
    let out = prova(&ws, ["run", "list", "--all", "--verify=inputs", "--json"]).run();
    assert_proven(&out);
    assert_eq!(ws.read("p/out/list.txt"), "a.txt\nlater\n");

    // `sandbox = true`: the confined run fails rather than save the root's listing.
    let confined = workspace(&task_listing("ls src", "\"src/**\"", "sandbox = true"));
    std::fs::create_dir(confined.path("p/src/empty")).unwrap();
    let out = prova(&confined, ["run", "list", "--all", "--json"]).run();
    out.assert_code(1);
    assert_eq!(out.status_of("p#list"), "failed", "{out}");
    let note = out.report("p#list")["note"].as_str().unwrap_or_default().to_owned();
    assert!(note.contains("p/src/empty"), "{note}");
}

#[test]
fn a_gitignored_file_or_directory_a_listing_shows_is_named_until_declared() {
    if !sandbox_or_skip() {
        return;
    }
    let ws = workspace(&task_listing("ls src", "\"src/**\"", ""))
        .file(".gitignore", "p/src/cfg.local\np/src/cache/\n")
        .file("p/src/cfg.local", "TOKEN=1\n");
    let out = verify(&ws);
    assert_named(&out, &["p/src/cfg.local"], &[]);
    let v = only_verdict(&out, "p#list");
    assert_eq!(v["suggest"], serde_json::json!(["src/cfg.local"]), "{out}");

    // A directory holding only ignored files: named, with the pattern that keys them.
    ws.write("p/src/cache/blob.bin", "x");
    let out = verify(&ws);
    assert_named(
        &out,
        &["p/src/cache", "p/src/cfg.local"],
        &["`p/src/cache` holds only gitignored files", "\"src/cache/**\""],
    );

    // Declared as advised — `src/cache/**` beside the wider `src/**` — both are keyed.
    ws.write(
        "p/prova.toml",
        &task_listing("ls src", "\"src/**\", \"src/cfg.local\", \"src/cache/**\"", ""),
    );
    assert_proven(&verify(&ws));
    assert_eq!(ws.read("p/out/list.txt"), "a.txt\ncache\ncfg.local\n");
    ws.write("p/src/cache/blob.bin", "changed");
    let out = prova(&ws, ["run", "list", "--all", "--json"]).run();
    out.assert_code(0);
    assert_eq!(prova_tests::verify::cache_word(&out, "p#list"), "saved", "the key moved: {out}");
}

#[test]
fn a_listing_of_the_project_directory_names_what_its_key_does_not_fold_but_not_outputs() {
    if !sandbox_or_skip() {
        return;
    }
    // Its own output directory, gitignored and left by the last run, is its own.
    let ws = workspace(&task_listing("ls", "\"src/**\"", "")).file(".gitignore", "p/out/\n*.log\n");
    assert_proven(&verify(&ws));
    assert!(ws.exists("p/out/list.txt"));
    assert_proven(&verify(&ws));
    // An upstream's output directory is its upstream's.
    let two = prova_tests::TempWorkspace::new()
        .file("prova.toml", "[workspace]\nprojects = [\"p\"]\n")
        .file(".gitignore", "p/gen/\n")
        .file("p/src/a.txt", "hello\n")
        .file(
            "p/prova.toml",
            &format!(
                "{}[tasks.gen]\ncommand = \"mkdir -p gen && cp src/a.txt gen/a.txt\"\n\
                 inputs = [\"src/**\"]\noutputs = [\"gen/**\"]\n",
                task_listing("ls", "\"src/**\"", "deps = [\"gen\"]")
            ),
        );
    assert_proven(&verify(&two));
    // An ignored log and an empty directory beside them are not.
    ws.write("p/debug.log", "x\n");
    std::fs::create_dir(ws.path("p/tmp")).unwrap();
    let out = verify(&ws);
    assert_named(&out, &["p/debug.log", "p/tmp"], &["`p/tmp` is an empty directory"]);
}
