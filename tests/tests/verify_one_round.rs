//! One `--verify=inputs` names every undeclared read, and undeclared writes are named too
//! (issue 11): a traced survey run sees the whole workspace read-only (writes land in a
//! throw-away tmpfs), so reads that the sandboxed run never reaches — it stops at the first
//! missing file — are named in the same round, with globs to add to `inputs`. A write
//! outside the declared outputs (a `tsc -b` writing `tsconfig.tsbuildinfo` beside `dist/`)
//! is the verdict `undeclared-outputs`.

use prova_tests::verify::{name, prova, sandbox_or_skip, task, verdicts, workspace};
use serde_json::{Value, json};

/// The verdict named `word` among `task`'s verdicts.
#[track_caller]
fn verdict(out: &prova_tests::Output, task: &str, word: &str) -> Value {
    verdicts(out, task)
        .into_iter()
        .find(|v| name(v) == word)
        .unwrap_or_else(|| panic!("{task}: no {word} verdict\n{out}"))
}

#[test]
fn reads_behind_a_missing_file_are_named_in_the_same_round_with_a_glob() {
    if !sandbox_or_skip() {
        return;
    }
    // Reads `a.txt`, and only when it is there goes on to `b/1.txt` and `b/2.txt`: the
    // sandboxed run (without `a.txt`) can never reach them.
    let ws = workspace(&task(
        "chain",
        "mkdir -p dist && if [ -f a.txt ]; then cat a.txt b/1.txt b/2.txt > dist/out.txt; fi; echo ok >> dist/out.txt",
        &["dist/**"],
    ))
    .file("p/a.txt", "a\n")
    .file("p/b/1.txt", "1\n")
    .file("p/b/2.txt", "2\n");
    let out = prova(&ws, ["run", "chain", "--all", "--verify=inputs", "--json"]).run();
    out.assert_code(1);
    let v = verdict(&out, "p#chain", "undeclared-inputs");
    assert_eq!(v["paths"], json!(["p/a.txt", "p/b/1.txt", "p/b/2.txt"]), "{out}");
    assert_eq!(v["suggest"], json!(["a.txt", "b/**"]), "{out}");

    let text = prova(&ws, ["run", "chain", "--all", "--force", "--verify=inputs"]).run();
    text.assert_code(1);
    let lines = text.task_lines("p#chain");
    assert!(
        lines.iter().any(|l| l.contains("add to inputs:") && l.contains("\"a.txt\", \"b/**\"")),
        "{text}"
    );

    // Declared as suggested, the task is proven complete.
    ws.write(
        "p/prova.toml",
        &task(
            "chain",
            "mkdir -p dist && if [ -f a.txt ]; then cat a.txt b/1.txt b/2.txt > dist/out.txt; fi; echo ok >> dist/out.txt",
            &["dist/**"],
        )
        .replace("inputs = [\"src/a.txt\"]", "inputs = [\"src/a.txt\", \"a.txt\", \"b/**\"]"),
    );
    let fixed = prova(&ws, ["run", "chain", "--all", "--verify=inputs", "--json"]).run();
    fixed.assert_code(0);
    assert_eq!(
        verdicts(&fixed, "p#chain").iter().map(name).collect::<Vec<_>>(),
        ["proven-complete"],
        "{fixed}"
    );
    assert_eq!(ws.read("p/dist/out.txt"), "a\n1\n2\nok\n");
}

#[test]
fn reads_behind_a_guard_through_globs_find_and_other_projects_are_named_at_once() {
    if !sandbox_or_skip() {
        return;
    }
    // The guard is a directory test; behind it a shell glob, `find` and a sibling project.
    let ws = prova_tests::TempWorkspace::new()
        .file("prova.toml", "[workspace]\nprojects = [\"apps/*\", \"libs/*\"]\n")
        .file("libs/shared/data.txt", "shared\n")
        .file("apps/web/conf/on", "1\n")
        .file("apps/web/gen/x.ts", "x\n")
        .file("apps/web/gen/y.ts", "y\n")
        .file("apps/web/gen/z.ts", "z\n")
        .file("apps/web/deep/q/r.txt", "r\n")
        .file(
            "apps/web/prova.toml",
            "[tasks.build]\ncommand = \"mkdir -p dist && if [ -d conf ]; then cat gen/*.ts > dist/a; \
             find deep -type f > dist/b; cat ../../libs/shared/data.txt > dist/c; fi; echo ok > dist/d\"\n\
             inputs = [\"src/**\"]\noutputs = [\"dist/**\"]\n",
        )
        .file("apps/web/src/main.txt", "main\n");
    let out = prova(&ws, ["run", "build", "-p", "web", "--verify=inputs", "--json"]).run();
    out.assert_code(1);
    let v = verdict(&out, "web#build", "undeclared-inputs");
    let paths: Vec<String> = serde_json::from_value(v["paths"].clone()).unwrap_or_default();
    // The guard itself sees what it sees in place: the key folds the names in the project
    // directory, and the exec root shows `conf` as an empty directory (verify_entries.rs).
    assert!(!paths.iter().any(|p| p.starts_with("apps/web/conf")), "{out}");
    for p in ["apps/web/gen/x.ts", "apps/web/gen/y.ts", "apps/web/gen/z.ts", "libs/shared/data.txt"]
    {
        assert!(
            paths.iter().any(|x| x == p || x.trim_end_matches('/') == p.trim_end_matches('/')),
            "{p} not named\n{out}"
        );
    }
    assert!(paths.iter().any(|p| p.starts_with("apps/web/deep")), "find's walk not named\n{out}");
    let suggest: Vec<String> = serde_json::from_value(v["suggest"].clone()).unwrap_or_default();
    assert!(suggest.iter().any(|s| s == "gen/**" || s == "gen/*.ts"), "{suggest:?}\n{out}");
    assert!(suggest.iter().any(|s| s == "//libs/shared/data.txt"), "{suggest:?}\n{out}");
}

#[test]
fn reads_behind_a_listing_short_of_the_workspace_are_named_in_the_same_round() {
    if !sandbox_or_skip() {
        return;
    }
    // The sandboxed run lists `src` without the undeclared `b.txt`, so it never reads
    // `other.txt`; a run whose trace met no place where the root and the workspace differ
    // is not surveyed, so the listing itself must lead to the survey.
    let ws = workspace(&task(
        "lister",
        "mkdir -p dist && if ls src | grep -q b.txt; then cat other.txt > dist/o; fi; echo ok >> dist/o",
        &["dist/**"],
    ))
    .file("p/src/b.txt", "b\n")
    .file("p/other.txt", "o\n");
    let out = prova(&ws, ["run", "lister", "--all", "--verify=inputs", "--json"]).run();
    out.assert_code(1);
    let v = verdict(&out, "p#lister", "undeclared-inputs");
    assert_eq!(v["paths"], json!(["p/other.txt", "p/src/"]), "{out}");
    // With `b.txt` gone from the workspace, the listing is the workspace's: complete.
    std::fs::remove_file(ws.path("p/src/b.txt")).expect("remove b.txt");
    let out = prova(&ws, ["run", "lister", "--all", "--force", "--verify=inputs", "--json"]).run();
    out.assert_code(0);
    assert_eq!(
        verdicts(&out, "p#lister").iter().map(name).collect::<Vec<_>>(),
        ["proven-complete"]
    );
}

/// `dist/out.js` is declared; `state.tsbuildinfo` (incremental build state) is not.
fn tsc_like(extra: &str) -> String {
    task(
        "build",
        &format!("mkdir -p dist && echo js > dist/out.js && echo state > state.tsbuildinfo{extra}"),
        &["dist/**"],
    )
}

#[test]
fn a_write_outside_the_declared_outputs_is_undeclared_outputs() {
    if !sandbox_or_skip() {
        return;
    }
    let ws = workspace(&tsc_like(""));
    let out = prova(&ws, ["run", "build", "--all", "--verify=inputs", "--json"]).run();
    out.assert_code(1);
    assert_eq!(out.summary()["ok"], false, "{out}");
    let v = verdict(&out, "p#build", "undeclared-outputs");
    assert_eq!(v["paths"], json!(["p/state.tsbuildinfo"]), "{out}");
    assert!(!verdicts(&out, "p#build").iter().any(|v| name(v) == "proven-complete"), "{out}");
    assert!(!ws.exists("p/state.tsbuildinfo"), "the proof wrote into the workspace");
    // The write stayed in the exec root: the task fails (as on a farm worker) rather than
    // pass without it, and nothing is saved.
    assert_eq!(out.status_of("p#build"), "failed", "{out}");
    let note = out.report("p#build")["note"].as_str().unwrap_or_default().to_owned();
    assert!(
        note.contains("wrote outside its declared outputs: `p/state.tsbuildinfo`"),
        "{note}\n{out}"
    );
    assert_ne!(out.cache_of("p#build"), "saved", "{out}");

    let text = prova(&ws, ["run", "build", "--all", "--force", "--verify=inputs"]).run();
    text.assert_code(1);
    text.assert_stdout_contains("✗ p#build — undeclared-outputs: p/state.tsbuildinfo");
}

#[test]
fn tolerated_renames_mkdirs_and_unlinks_outside_the_outputs_are_named() {
    if !sandbox_or_skip() {
        return;
    }
    // Each write fails in the sandbox and the task carries on regardless: still caught.
    let ws = workspace(&task(
        "build",
        "mkdir -p dist && echo js > dist/out.js && (mkdir cache 2>/dev/null || true) && \
         (mv dist/out.js moved.js 2>/dev/null || true) && (rm -f src/old.txt || true) && echo js > dist/out.js",
        &["dist/**"],
    ))
    .file("p/src/old.txt", "old\n");
    let out = prova(&ws, ["run", "build", "--all", "--verify=inputs", "--json"]).run();
    out.assert_code(1);
    let v = verdict(&out, "p#build", "undeclared-outputs");
    assert_eq!(v["paths"], json!(["p/cache", "p/moved.js", "p/src/old.txt"]), "{out}");
    assert!(ws.exists("p/src/old.txt"));
}

#[test]
fn writes_inside_the_declared_outputs_and_tmp_are_not_named() {
    if !sandbox_or_skip() {
        return;
    }
    let ws = workspace(&task(
        "build",
        "mkdir -p dist/sub && echo js > dist/sub/out.js && mv dist/sub/out.js dist/out.js && \
         echo t > /tmp/scratch && rm /tmp/scratch && cat src/a.txt > dist/a.txt",
        &["dist/**"],
    ));
    let out = prova(&ws, ["run", "build", "--all", "--verify=inputs", "--json"]).run();
    out.assert_code(0);
    assert_eq!(
        verdicts(&out, "p#build").iter().map(name).collect::<Vec<_>>(),
        ["proven-complete"],
        "{out}"
    );
}

// ---- Plain runs: the post-run check of the project directory -------------------------

/// The warning a plain run gives for `paths` written by `p#build`.
fn written_warning(paths: &str) -> String {
    format!(
        "warning: task p#build wrote files that are not declared outputs: {paths} (declare them in outputs, or gitignore them)"
    )
}

#[test]
fn a_plain_run_warns_once_about_files_written_outside_the_outputs() {
    let ws = workspace(&tsc_like(""));
    let out = prova(&ws, ["run", "build", "--all"]).run();
    out.assert_code(0);
    let warning = written_warning("p/state.tsbuildinfo");
    assert_eq!(out.stdout.matches(&warning).count(), 1, "{out}");
    // The file is a new name in the project directory, whose names the key folds: that
    // entry was withheld, and the next run (keyed with it) runs, warns and saves.
    out.assert_stdout_contains("the entries of its project directory changed while it ran");
    let again = prova(&ws, ["run", "build", "--all"]).run();
    again.assert_code(0);
    assert_eq!(again.stdout.matches(&warning).count(), 1, "{again}");
    // A hit runs nothing: nothing to say.
    let hit = prova(&ws, ["run", "build", "--all"]).run();
    hit.assert_code(0);
    assert!(!hit.stdout.contains("not declared outputs"), "{hit}");
}

#[test]
fn rewriting_a_tracked_file_and_creating_a_nested_one_are_named_too() {
    let ws = workspace(&task(
        "build",
        "mkdir -p dist gen && echo js > dist/out.js && echo changed > src/a.txt && echo g > gen/x.ts",
        &["dist/**"],
    ));
    let out = prova(&ws, ["run", "build", "--all"]).run();
    out.assert_code(0);
    out.assert_stdout_contains(&written_warning("p/gen/x.ts, p/src/a.txt"));
}

#[test]
fn ignored_files_declared_outputs_and_failed_tasks_are_not_named() {
    // Gitignored incremental state: the user said it is not the workspace's.
    let ws = workspace(&tsc_like("")).file("p/.gitignore", "*.tsbuildinfo\n");
    let out = prova(&ws, ["run", "build", "--all"]).run();
    out.assert_code(0);
    assert!(!out.stdout.contains("not declared outputs"), "{out}");

    // Declared: an output like any other.
    let ws = workspace(&task(
        "build",
        "mkdir -p dist && echo js > dist/out.js && echo state > state.tsbuildinfo",
        &["dist/**", "state.tsbuildinfo"],
    ));
    let out = prova(&ws, ["run", "build", "--all"]).run();
    out.assert_code(0);
    assert!(!out.stdout.contains("not declared outputs"), "{out}");

    // A failed task has its failure to report.
    let ws = workspace(&tsc_like(" && exit 3"));
    let out = prova(&ws, ["run", "build", "--all"]).run();
    out.assert_code(1);
    assert!(!out.stdout.contains("not declared outputs"), "{out}");
}
