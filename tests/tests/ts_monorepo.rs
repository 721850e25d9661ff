//! `examples/tsmono`, a TypeScript monorepo of six npm-workspace packages built by the real
//! `tsc` and tested by `node --test`, copied to a temporary directory with its installed
//! `node_modules` (from the fixture's own `npm ci`, which CI runs, else `npm ci --offline`
//! from the npm cache) and run with the real binary.

use prova_tests::TempWorkspace;
use prova_tests::tsmono::{PACKAGES, all_tasks, node_present, ran, tsmono};

#[test]
fn cold_run_builds_and_tests_every_package_and_a_warm_run_hits_them_all() {
    if !node_present() {
        return;
    }
    let ws = tsmono();
    let cold = ws.prova(["run", "build", "test", "--all", "--json"]).run();
    cold.assert_code(0);
    assert_eq!(ran(&cold), all_tasks(), "{cold}");
    for p in PACKAGES {
        assert!(ws.exists(&format!("packages/{p}/dist/index.js")), "{p} was not compiled\n{cold}");
        assert!(ws.exists(&format!("packages/{p}/dist/index.d.ts")), "{p}: no declarations");
        assert!(cold.output_of(&format!("{p}#test")).contains("# fail 0"), "{cold}");
    }
    // tsc compiled app against report's and strings' declarations, which it could only read
    // because their builds ran first.
    assert!(ws.read("packages/app/dist/index.js").contains("require(\"report\")"));

    let warm = ws.prova(["run", "build", "test", "--all", "--json"]).run();
    warm.assert_code(0);
    assert!(ran(&warm).is_empty(), "a warm run executed tasks\n{warm}");
    for t in all_tasks() {
        assert_eq!(warm.cache_of(&t), "hit", "{t}\n{warm}");
    }
}

/// Rewrites `picocolors` 1.1.1 to 1.1.0 in `fmt`'s package.json and in the lockfile (its
/// version and integrity): a dependency bump of one project, as `npm install` writes it. The
/// installed tree is left alone: keys follow the lockfile, and tsc does not care.
fn bump_picocolors(ws: &TempWorkspace) {
    let pj = ws.read("packages/fmt/package.json");
    assert!(pj.contains("\"picocolors\": \"1.1.1\""), "{pj}");
    ws.write(
        "packages/fmt/package.json",
        &pj.replace("\"picocolors\": \"1.1.1\"", "\"picocolors\": \"1.1.0\""),
    );
    let lock = ws.read("package-lock.json");
    let bumped = lock
        .replace("\"picocolors\": \"1.1.1\"", "\"picocolors\": \"1.1.0\"")
        .replacen("\"version\": \"1.1.1\"", "\"version\": \"1.1.0\"", 1)
        .replace("sha512-xceH2snhtb5M9liqDsmEw56le376mTZkEX/jEb/RxNFyegNul7eNslCXP9FDj/Lcu0X8KEyMceP2ntpaHrDEVA==", "sha512-bumped");
    assert_ne!(bumped, lock);
    ws.write("package-lock.json", &bumped);
}

#[test]
fn a_dependency_bump_in_one_project_reruns_only_it_and_its_dependents() {
    if !node_present() {
        return;
    }
    let ws = tsmono();
    ws.prova(["run", "build", "test", "--all", "--json"]).run().assert_code(0);
    bump_picocolors(&ws);
    let out = ws.prova(["run", "build", "test", "--all", "--json"]).run();
    out.assert_code(0);
    // fmt uses picocolors; report and app depend on fmt; core, strings and math do not.
    let expected: Vec<String> =
        ["app#build", "app#test", "fmt#build", "fmt#test", "report#build", "report#test"]
            .map(str::to_owned)
            .to_vec();
    assert_eq!(ran(&out), expected, "{out}");
    for t in ["core#build", "core#test", "strings#build", "math#test"] {
        assert_eq!(out.cache_of(t), "hit", "{t}\n{out}");
    }
    // `why` names the moved external set of the bumped project, not the lockfile file.
    let why = ws.prova(["why", "math#build"]).run();
    why.assert_code(0).assert_stdout_contains("the next run is a hit");
}

#[test]
fn bumping_a_package_only_the_root_uses_reruns_every_build() {
    if !node_present() {
        return;
    }
    let ws = tsmono();
    ws.prova(["run", "build", "--all", "--json"]).run().assert_code(0);
    // The root's typescript is every project's compiler: its integrity moving moves them all.
    let lock = ws.read("package-lock.json");
    let needle = "\"integrity\": \"sha512-hjcS1mhfuyi4";
    assert!(lock.contains(needle));
    ws.write("package-lock.json", &lock.replace(needle, "\"integrity\": \"sha512-other"));
    let out = ws.prova(["run", "build", "--all", "--json"]).run();
    out.assert_code(0);
    assert_eq!(ran(&out).len(), PACKAGES.len(), "{out}");
}

#[test]
fn an_unreadable_lockfile_is_folded_whole_with_a_notice() {
    if !node_present() {
        return;
    }
    let ws = tsmono();
    ws.prova(["run", "build", "--all", "--json"]).run().assert_code(0);
    for broken in ["{ not json", "{\"lockfileVersion\": 1, \"dependencies\": {}}"] {
        ws.write("package-lock.json", broken);
        let out = ws.prova(["run", "build", "--all", "--json"]).run();
        out.assert_code(0);
        out.assert_stderr_contains("package-lock.json: cannot read its per-project dependencies");
        out.assert_stderr_contains("the whole file is folded into every key");
        assert_eq!(ran(&out).len(), PACKAGES.len(), "a changed whole file moves every key\n{out}");
    }
}

#[test]
fn show_lists_the_external_packages_in_a_key() {
    if !node_present() {
        return;
    }
    let ws = tsmono();
    let show = ws.prova(["show", "fmt#build"]).run();
    show.assert_code(0);
    show.assert_stdout_contains("external  package-lock.json: 3 packages");
    show.assert_stdout_contains("picocolors@1.1.1 sha512-xceH2snhtb5M9");
    show.assert_stdout_contains("tiny-invariant@1.3.3");
    show.assert_stdout_contains("typescript@5.6.3");
    let core = ws.prova(["show", "core#build"]).run();
    core.assert_code(0).assert_stdout_contains("external  package-lock.json: 2 packages");
    assert!(!core.to_string().contains("picocolors"), "{core}");
    // The lockfile itself is no longer a whole-file workspace component.
    assert!(
        !core.to_string().contains("workspace")
            || !core.to_string().contains(" package-lock.json\n"),
        "{core}"
    );
}

#[test]
fn tasks_run_their_package_json_scripts_in_packages_found_from_workspaces() {
    if !node_present() {
        return;
    }
    let ws = tsmono();
    // The fixture sets neither `projects` nor any `command`.
    let config = ws.read("prova.toml");
    assert!(
        !config.lines().any(|l| l.starts_with("projects") || l.starts_with("command")),
        "{config}"
    );
    // Discovery: every package of package.json `workspaces`, and nothing else.
    let graph = ws.prova(["graph", "build", "--all"]).run();
    graph.assert_code(0);
    for p in PACKAGES {
        graph.assert_stdout_contains(&format!("{p}#build"));
    }
    // A script is run directly (its text, node_modules/.bin on PATH) rather than by npm:
    // make `core`'s build script print where `tsc` resolves from.
    let pj = ws.read("packages/core/package.json");
    ws.write(
        "packages/core/package.json",
        &pj.replace(
            "\"build\": \"tsc -p .\"",
            "\"build\": \"echo tsc=$(command -v tsc) && tsc -p .\"",
        ),
    );
    let out = ws.prova(["run", "build", "--all", "--json"]).run();
    out.assert_code(0);
    let printed = out.output_of("core#build");
    let root_bin = ws.path("node_modules/.bin/tsc");
    let expected =
        format!("tsc={}", ws.path("packages/core/../../node_modules/.bin/tsc").display());
    assert!(
        printed.contains(&expected),
        "tsc did not come from the root's node_modules/.bin ({}):\n{out}",
        root_bin.display()
    );
    assert!(ws.exists("packages/core/dist/index.js"));
}

#[test]
fn a_project_without_the_script_has_no_such_task() {
    if !node_present() {
        return;
    }
    let ws = tsmono();
    // A workspace task without a command or deps: only projects with a `lint` script have it.
    let config = ws.read("prova.toml");
    ws.write("prova.toml", &format!("{config}\n[tasks.lint]\n"));
    let pj = ws.read("packages/strings/package.json");
    ws.write(
        "packages/strings/package.json",
        &pj.replace(
            "\"test\": \"node --test dist/\"",
            "\"test\": \"node --test dist/\",\n    \"lint\": \"echo linted-strings\"",
        ),
    );
    let out = ws.prova(["run", "lint", "--all", "--json"]).run();
    out.assert_code(0);
    assert_eq!(ran(&out), ["strings#lint"], "{out}");
    assert!(out.output_of("strings#lint").contains("linted-strings"), "{out}");
    let missing = ws.prova(["run", "core#lint"]).run();
    assert_eq!(missing.code(), Some(2), "core has no lint script, so no lint task\n{missing}");
}

// The same per-project rule for the other lockfile formats, on small workspaces of `sh`
// scripts (no node needed): a bump of one project's external re-runs only that project.

/// Runs `build --all` (asserting what ran), rewrites `lockfile` with `from` → `to`, and runs
/// again: only `rerun` executes.
fn bump_reruns_only(
    ws: &TempWorkspace,
    lockfile: &str,
    first: &[&str],
    from: &str,
    to: &str,
    rerun: &[&str],
) {
    let out = ws.prova(["run", "build", "--all", "--json"]).run();
    out.assert_code(0);
    assert_eq!(ran(&out), first, "{out}");
    assert!(!out.to_string().contains("cannot read its per-project dependencies"), "{out}");
    let text = ws.read(lockfile);
    assert!(text.contains(from), "{lockfile} has no `{from}`");
    ws.write(lockfile, &text.replacen(from, to, 1));
    let out = ws.prova(["run", "build", "--all", "--json"]).run();
    out.assert_code(0);
    assert_eq!(ran(&out), rerun, "{out}");
}

#[test]
fn pnpm_workspaces_scripts_and_pnpm_lock_keys() {
    let ws = TempWorkspace::new()
        .file("prova.toml", "[workspace]\nfingerprint = [\"pnpm-lock.yaml\"]\n[tasks.build]\noutputs = [\"out.txt\"]\n")
        .file("pnpm-workspace.yaml", "packages:\n  - \"libs/*\"\n")
        .file("libs/a/package.json", r#"{"name": "a", "scripts": {"build": "echo a > out.txt"}, "dependencies": {"left": "^1"}}"#)
        .file("libs/b/package.json", r#"{"name": "b", "scripts": {"build": "echo b > out.txt"}, "dependencies": {"right": "^2"}}"#)
        .file("libs/c/package.json", r#"{"name": "c"}"#)
        .file(
            "pnpm-lock.yaml",
            "lockfileVersion: '9.0'\nimporters:\n  .: {}\n  libs/a:\n    dependencies:\n      left:\n        specifier: ^1\n        version: 1.0.0\n  libs/b:\n    dependencies:\n      right:\n        specifier: ^2\n        version: 2.0.0\n  libs/c: {}\npackages:\n  left@1.0.0:\n    resolution: {integrity: sha512-left}\n  right@2.0.0:\n    resolution: {integrity: sha512-right}\nsnapshots:\n  left@1.0.0: {}\n  right@2.0.0: {}\n",
        );
    // c has no build script: no c#build.
    bump_reruns_only(
        &ws,
        "pnpm-lock.yaml",
        &["a#build", "b#build"],
        "sha512-right",
        "sha512-moved",
        &["b#build"],
    );
    assert_eq!(ws.read("libs/b/out.txt"), "b\n");
}

#[test]
fn yarn_v1_lock_keys_follow_each_package_json_range() {
    let ws = TempWorkspace::new()
        .file("prova.toml", "[workspace]\nfingerprint = [\"yarn.lock\"]\n[tasks.build]\noutputs = [\"out.txt\"]\n")
        .file("package.json", r#"{"private": true, "workspaces": ["libs/*"]}"#)
        .file("libs/a/package.json", r#"{"name": "a", "scripts": {"build": "echo a > out.txt"}, "dependencies": {"left": "^1"}}"#)
        .file("libs/b/package.json", r#"{"name": "b", "scripts": {"build": "echo b > out.txt"}, "dependencies": {"a": "1.0.0", "right": "^2"}}"#)
        .file(
            "yarn.lock",
            "# yarn lockfile v1\n\nleft@^1:\n  version \"1.0.0\"\n  integrity sha512-left\n\nright@^2:\n  version \"2.0.0\"\n  integrity sha512-right\n",
        );
    // left is a's, and b's through its dependency on a; right is b's only.
    bump_reruns_only(
        &ws,
        "yarn.lock",
        &["a#build", "b#build"],
        "version \"2.0.0\"",
        "version \"2.0.1\"",
        &["b#build"],
    );
    let ws2 = TempWorkspace::copy_of(ws.root(), &[".prova"]);
    bump_reruns_only(
        &ws2,
        "yarn.lock",
        &["a#build", "b#build"],
        "sha512-left",
        "sha512-moved",
        &["a#build", "b#build"],
    );
}

#[test]
fn cargo_lock_keys_follow_each_member_crate() {
    let lock = "version = 4\n\n[[package]]\nname = \"x\"\nversion = \"0.1.0\"\ndependencies = [\"memchr\"]\n\n[[package]]\nname = \"y\"\nversion = \"0.1.0\"\ndependencies = [\"serde\"]\n\n[[package]]\nname = \"memchr\"\nversion = \"2.7.0\"\nsource = \"registry+https://example.invalid/index\"\nchecksum = \"aaaa\"\n\n[[package]]\nname = \"serde\"\nversion = \"1.0.0\"\nsource = \"registry+https://example.invalid/index\"\nchecksum = \"bbbb\"\n";
    let ws = TempWorkspace::new()
        .file("prova.toml", "[workspace]\nprojects = [\"crates/*\"]\nfingerprint = [\"Cargo.lock\"]\n[tasks.build]\ncommand = \"echo built > out.txt\"\noutputs = [\"out.txt\"]\n")
        .file("crates/x/Cargo.toml", "[package]\nname = \"x\"\nversion = \"0.1.0\"\n")
        .file("crates/y/Cargo.toml", "[package]\nname = \"y\"\nversion = \"0.1.0\"\n")
        .file("Cargo.lock", lock);
    bump_reruns_only(
        &ws,
        "Cargo.lock",
        &["x#build", "y#build"],
        "checksum = \"bbbb\"",
        "checksum = \"cccc\"",
        &["y#build"],
    );
}

/// A pnpm workspace of one project whose build script is `script`, keyed per project on
/// `pnpm-lock.yaml` (when present).
fn one_project_pnpm(script: &str, lock: bool) -> TempWorkspace {
    let ws = TempWorkspace::new()
        .file("prova.toml", "[workspace]\nfingerprint = [\"pnpm-lock.yaml\"]\n[tasks.build]\noutputs = [\"out.txt\"]\n")
        .file("pnpm-workspace.yaml", "packages:\n  - \"libs/*\"\n")
        .file("libs/a/package.json", &format!(r#"{{"name": "a", "scripts": {{"build": "{script}"}}}}"#));
    if lock {
        ws.write("pnpm-lock.yaml", "lockfileVersion: '9.0'\nimporters:\n  libs/a: {}\n");
    }
    ws
}

#[test]
fn a_lockfile_keyed_per_project_still_withholds_an_entry_when_it_moves_during_the_task() {
    // Rewritten while the task runs (an install inside a build): its stamp moved.
    let ws = one_project_pnpm("echo a > out.txt && echo '# moved' >> ../../pnpm-lock.yaml", true);
    let out = ws.prova(["run", "build", "--all", "--json"]).run();
    out.assert_code(0);
    let reason = out.not_saved_reason("a#build");
    assert!(reason.contains("pnpm-lock.yaml` changed while the task ran"), "{reason}");
    // Created while the task runs: it was not there when the key was made.
    let ws = one_project_pnpm(
        "echo a > out.txt && echo 'lockfileVersion: 9' > ../../pnpm-lock.yaml",
        false,
    );
    let out = ws.prova(["run", "build", "--all", "--json"]).run();
    out.assert_code(0);
    let reason = out.not_saved_reason("a#build");
    assert!(reason.contains("pnpm-lock.yaml` was added while the task ran"), "{reason}");
    // Left alone: saved, and the next run hits.
    let ws = one_project_pnpm("echo a > out.txt", true);
    ws.prova(["run", "build", "--all"]).run().assert_code(0);
    let out = ws.prova(["run", "build", "--all", "--json"]).run();
    assert_eq!(out.cache_of("a#build"), "hit", "{out}");
}

#[test]
fn a_lockfile_keyed_per_project_is_still_in_every_exec_root() {
    // Folded per project instead of whole, the lockfile left the keys' workspace list — and
    // with it every exec root built from that list: a task reading it failed its re-run.
    if !prova_tests::verify::sandbox_or_skip() {
        return;
    }
    let ws = one_project_pnpm("cat ../../pnpm-lock.yaml > out.txt", true);
    let out = ws.prova(["run", "build", "--all", "--verify=all", "--json"]).run();
    out.assert_code(0);
    let names = prova_tests::verify::verdict_names(&out, "a#build");
    assert!(names.contains(&"proven-deterministic".to_owned()), "{names:?}\n{out}");
    assert!(names.contains(&"proven-complete".to_owned()), "{names:?}\n{out}");
}
