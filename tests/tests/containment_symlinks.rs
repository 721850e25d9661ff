//! Cleaning, collecting and restoring outputs never follow a symlink in any path component
//! (issue 10). A committed `dist -> somewhere` on the way to an output root must not turn the
//! pre-run clean into a delete outside the workspace (or in another project), the collect
//! into a copy of what lies behind the link, or a restore into a write through it.
//!
//! Each case keeps a canary directory (outside the workspace, or another project's sources)
//! and asserts its file list and bytes are unchanged after every run.

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::symlink;
use std::path::Path;

use prova_tests::cache::{Node, snapshot};
use prova_tests::{Output, TempWorkspace};
use tempfile::TempDir;

/// The message a run prints when an output directory is a symlink.
const REFUSAL: &str = "is a symlink; prova does not write through symlinks";

fn config(outputs: &str) -> String {
    format!(
        r#"[workspace]
projects = ["web", "api"]

[tasks.build]
command = '''
echo "building $(basename "$PWD")" >> ../runs.log
mkdir -p {dir}
echo "built" > {dir}/out.txt
'''
inputs = ["src/**"]
outputs = ["{outputs}"]
"#,
        dir = outputs.trim_end_matches("/**"),
    )
}

fn ws(outputs: &str) -> TempWorkspace {
    TempWorkspace::new()
        .file("prova.toml", &config(outputs))
        .file("web/src/main.txt", "web source\n")
        .file("api/src/main.txt", "api source\n")
        .file("api/src/gen/keep.ts", "api's own generated-looking source\n")
        .file("api/src/gen/deeper/also.ts", "also api's\n")
}

/// A directory outside every workspace, full of files a clean or a collect must not touch.
fn canary() -> TempDir {
    let dir = tempfile::Builder::new().prefix("prova-canary-").tempdir().expect("canary dir");
    for (rel, bytes) in [
        ("gen/out.txt", "the canary's out.txt\n"),
        ("gen/old.txt", "the canary's old.txt\n"),
        ("gen/deep/x.bin", "\u{1}\u{2}canary\n"),
        ("gen/deep/out.txt", "deep canary\n"),
        ("top.txt", "top\n"),
    ] {
        let p = dir.path().join(rel);
        fs::create_dir_all(p.parent().expect("canary")).expect("canary");
        fs::write(p, bytes).expect("canary");
    }
    dir
}

/// Every path under `dir` with its bytes or link target (not following links).
fn listing(dir: &Path) -> BTreeMap<String, Node> {
    fn walk(base: &Path, dir: &Path, out: &mut BTreeMap<String, Node>) {
        for e in fs::read_dir(dir).expect("listing") {
            let e = e.expect("listing");
            let rel = e.path().strip_prefix(base).expect("listing").to_string_lossy().into_owned();
            let ft = e.file_type().expect("listing");
            if ft.is_symlink() {
                out.insert(
                    rel,
                    Node::Symlink(fs::read_link(e.path()).expect("listing").display().to_string()),
                );
            } else if ft.is_dir() {
                out.insert(rel, Node::Dir);
                walk(base, &e.path(), out);
            } else {
                out.insert(
                    rel,
                    Node::File { mode: 0, bytes: fs::read(e.path()).expect("listing") },
                );
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out);
    out
}

fn run(ws: &TempWorkspace) -> Output {
    ws.prova(["run", "build", "--all", "--json"]).run()
}

fn runs(ws: &TempWorkspace) -> usize {
    fs::read_to_string(ws.path("runs.log")).map_or(0, |s| s.lines().count())
}

/// The fresh-run case: `link` (workspace-relative) is a symlink to `target` before the first
/// run. The clean deletes nothing behind it, the task never runs (it would write through the
/// link), the run fails naming the link, and nothing is cached.
fn fresh_run_refuses(outputs: &str, link: &str, target: &Path, guarded: &Path) {
    let ws = ws(outputs);
    let parent = ws.path(link);
    fs::create_dir_all(parent.parent().expect("fresh_run_refuses")).expect("fresh_run_refuses");
    symlink(target, &parent).expect("fresh_run_refuses");
    let before = listing(guarded);

    let out = run(&ws);
    assert_eq!(listing(guarded), before, "a run touched what lies behind `{link}`\n{out}");
    out.assert_code(1);
    assert_eq!(out.status_of("web#build"), "failed", "{out}");
    let text = format!("{}{}", out.stdout, out.stderr);
    assert!(text.contains(&format!("`{link}` {REFUSAL}")), "no refusal naming `{link}`\n{out}");
    assert_eq!(runs(&ws), 1, "only api ran; web's command would have written through the link");
    assert!(
        fs::symlink_metadata(&parent).expect("fresh_run_refuses").file_type().is_symlink(),
        "link removed"
    );

    // Again: still refused, still nothing touched (nothing was cached by the failed run).
    let again = run(&ws);
    again.assert_code(1);
    assert_eq!(listing(guarded), before, "a second run touched what lies behind `{link}`");
}

/// The restore case: a first run fills the real output dir and is saved; then `link` is
/// replaced by a symlink to `target`. The hit neither writes through the link nor removes it
/// (it may be the user's, committed: the outputs do not select it): the restore is refused,
/// naming it, and the execution that follows refuses as a fresh run does. Nothing behind
/// the link is deleted or written.
fn hit_restore_refuses(outputs: &str, link: &str, target: &Path, guarded: &Path) {
    let ws = ws(outputs);
    let first = run(&ws);
    first.assert_code(0);
    assert_eq!(first.cache_of("web#build"), "saved", "{first}");
    fs::remove_dir_all(ws.path(link)).expect("hit_restore_refuses");
    symlink(target, ws.path(link)).expect("hit_restore_refuses");
    let before = listing(guarded);

    let out = run(&ws);
    out.assert_code(1);
    assert_eq!(listing(guarded), before, "a restore touched what lies behind `{link}`\n{out}");
    assert_ne!(out.cache_of("web#build"), "hit", "{out}");
    let text = format!("{}{}", out.stdout, out.stderr);
    assert!(text.contains(&format!("would replace `{link}` (a symlink)")), "{out}");
    assert!(text.contains(REFUSAL), "{out}");
    assert!(
        fs::symlink_metadata(ws.path(link)).expect("hit_restore_refuses").is_symlink(),
        "`{link}` was removed"
    );
    assert_eq!(runs(&ws), 2, "nothing executed through the link (the first run built both)");
}

#[test]
fn a_symlinked_output_dir_outside_the_workspace_is_never_cleaned_or_written_on_a_fresh_run() {
    let outside = canary();
    // Absolute link.
    fresh_run_refuses("dist/gen/**", "web/dist", outside.path(), outside.path());
    // Relative link climbing out of the workspace (both live in the same temp dir).
    let ws_parent = std::env::temp_dir().canonicalize().unwrap();
    let rel_target = Path::new("../..").join(outside.path().file_name().unwrap());
    assert_eq!(outside.path().canonicalize().unwrap().parent().unwrap(), ws_parent);
    fresh_run_refuses("dist/gen/**", "web/dist", &rel_target, outside.path());
}

#[test]
fn symlinks_at_two_depths_are_never_followed_on_a_fresh_run() {
    let outside = canary();
    // The output root itself (`web/dist/gen`) is the link: `dist/gen/**` does not select
    // `dist/gen`, so it is a directory on the way, not an output.
    fresh_run_refuses("dist/gen/**", "web/dist/gen", &outside.path().join("gen"), outside.path());
    // Two levels above a deeper root.
    fresh_run_refuses("dist/gen/deep/**", "web/dist", outside.path(), outside.path());
    fresh_run_refuses(
        "dist/gen/deep/**",
        "web/dist/gen",
        &outside.path().join("gen"),
        outside.path(),
    );
}

#[test]
fn a_hit_never_deletes_or_writes_behind_a_symlinked_output_dir() {
    let outside = canary();
    hit_restore_refuses("dist/gen/**", "web/dist", outside.path(), outside.path());
    hit_restore_refuses("dist/gen/**", "web/dist/gen", &outside.path().join("gen"), outside.path());
    hit_restore_refuses("dist/gen/deep/**", "web/dist", outside.path(), outside.path());
    hit_restore_refuses(
        "dist/gen/deep/**",
        "web/dist/gen",
        &outside.path().join("gen"),
        outside.path(),
    );
}

#[test]
fn a_symlinked_output_dir_pointing_at_another_projects_sources_is_left_alone() {
    // `web/dist -> ../api/src`: `dist/gen/**` would be api's `src/gen/**`.
    let ws_fresh = ws("dist/gen/**");
    symlink("../api/src", ws_fresh.path("web/dist")).unwrap();
    let before = snapshot(&ws_fresh, "api/src");
    let out = run(&ws_fresh);
    assert_eq!(snapshot(&ws_fresh, "api/src"), before, "another project's sources changed\n{out}");
    out.assert_code(1);
    let text = format!("{}{}", out.stdout, out.stderr);
    assert!(text.contains(&format!("`web/dist` {REFUSAL}")), "{out}");

    let ws_hit = ws("dist/gen/**");
    let first = run(&ws_hit);
    first.assert_code(0);
    fs::remove_dir_all(ws_hit.path("web/dist")).unwrap();
    symlink("../api/src", ws_hit.path("web/dist")).unwrap();
    let before = snapshot(&ws_hit, "api/src");
    let out = run(&ws_hit);
    out.assert_code(1);
    assert_ne!(out.cache_of("web#build"), "hit", "{out}");
    assert_eq!(snapshot(&ws_hit, "api/src"), before, "a restore changed another project\n{out}");
    assert!(fs::symlink_metadata(ws_hit.path("web/dist")).unwrap().is_symlink());
}

#[test]
fn outputs_behind_a_symlink_the_task_made_are_not_collected() {
    // The task itself makes `dist` a link to the canary and writes through it: prova cannot
    // stop the task, but it never collects (so never caches, never replays) what lies behind.
    let outside = canary();
    let ws = TempWorkspace::new()
        .file(
            "prova.toml",
            &format!(
                r#"[workspace]
projects = ["web"]

[tasks.build]
command = '''
ln -s {} dist
'''
inputs = ["src/**"]
outputs = ["dist/gen/**"]
"#,
                outside.path().display()
            ),
        )
        .file("web/src/main.txt", "x\n");
    let before = listing(outside.path());
    let out = run(&ws);
    assert_eq!(listing(outside.path()), before, "{out}");
    let reason = out.not_saved_reason("web#build");
    assert!(reason.contains(&format!("`web/dist` {REFUSAL}")), "{reason}\n{out}");

    // The next run is no hit of the canary's files (nothing was saved): it cleans nothing,
    // and is refused again.
    let again = run(&ws);
    assert_eq!(listing(outside.path()), before, "{again}");
    again.assert_code(1);
}

/// A workspace whose `web#build` (the only task) writes `dist/out.txt` and then
/// `dist/link -> {target}`; `api` is a second project it must not point into.
fn with_output_link(target: &str) -> TempWorkspace {
    TempWorkspace::new()
        .file("prova.toml", "[workspace]\nprojects = [\"web\", \"api\"]\n")
        .file(
            "web/prova.toml",
            &format!(
                r#"[tasks.build]
command = '''
echo run >> ../runs.log
mkdir -p dist && echo built > dist/out.txt && ln -s {target} dist/link
'''
inputs = ["src/**"]
outputs = ["dist/**"]
"#
            ),
        )
        .file("web/src/main.txt", "web source\n")
        .file("api/src/main.txt", "api source\n")
}

#[test]
fn an_output_symlink_leaving_the_project_is_refused_at_save_never_saved_and_called_corrupt() {
    // Absolute, up and out of the workspace, into another project: a restore must refuse
    // each (it would be a link a worker could plant), so the save refuses it first with a
    // message naming the link — not an entry that is "corrupt" on every later hit.
    for target in ["/etc/hostname", "../../../outside", "../../api/src/main.txt"] {
        let ws = with_output_link(target);
        let out = run(&ws);
        out.assert_code(0);
        let reason = out.not_saved_reason("web#build");
        assert!(
            reason.contains("web/dist/link") && reason.contains("points outside"),
            "{target}: {reason}\n{out}"
        );
        let again = run(&ws);
        again.assert_code(0);
        assert_eq!(runs(&ws), 2, "{target}: nothing was cached, so it ran again\n{again}");
        assert!(!again.stdout.contains("corrupt") && !again.stderr.contains("corrupt"), "{again}");
    }
}

#[test]
fn an_output_symlink_inside_the_project_is_restored_faithfully() {
    // `dist/link -> ../src/main.txt` leaves the output folder but stays in the project: it is
    // saved and restored as the same link (not a copy, not "corrupt").
    let ws = with_output_link("../src/main.txt");
    run(&ws).assert_code(0);
    fs::remove_dir_all(ws.path("web/dist")).unwrap();
    let out = run(&ws);
    out.assert_code(0);
    assert_eq!(out.cache_of("web#build"), "hit", "{out}");
    assert_eq!(runs(&ws), 1);
    assert_eq!(
        fs::read_link(ws.path("web/dist/link")).unwrap(),
        Path::new("../src/main.txt"),
        "restored as the same link"
    );
    let diff = ws.prova(["diff", "web#build"]).run();
    assert!(!diff.stdout.contains("corrupt") && !diff.stderr.contains("corrupt"), "{diff}");
}
