//! Outputs are confined by construction (issue 10): an output pattern that could reach the
//! workspace root, `.git`, a `prova.toml`, the cache dir or another project's directory is a
//! configuration error (exit 2, `file:line:col`, a `help:`) before anything runs or is
//! cleaned. Each case runs the real binary on a real git repository (one commit) with a
//! symlink to a canary directory outside it, and checks that not one file of either changed.

use std::os::unix::fs::symlink;
use std::path::Path;
use std::process::Command;

use prova_tests::TempWorkspace;

/// Projects: `apps/web` (which has a nested project `apps/web/plugins/p`) and `libs/ui`.
const ROOT_TOML: &str = r#"[workspace]
projects = ["apps/*", "libs/*", "apps/web/plugins/*"]

[tasks.build]
command = "mkdir -p dist && echo built > dist/out.txt"
"#;

/// The root is a project too; its `[tasks.build]` default outputs are `{outputs}`.
fn root_project_toml(outputs: &str) -> String {
    format!(
        "[workspace]\nprojects = [\".\", \"apps/*\", \"libs/*\"]\n\n[tasks.build]\n\
         command = \"echo built\"\noutputs = [\"dist/**\", {outputs}]\n"
    )
}

/// `apps/web/prova.toml` declaring `outputs = ["dist/**", <bad>]`: `<bad>` starts at 3:23.
fn web_toml(bad: &str) -> String {
    format!("[tasks.build]\ncommand = \"echo built\"\noutputs = [\"dist/**\", {bad:?}]\n")
}

struct Scene {
    ws: TempWorkspace,
    canary: tempfile::TempDir,
}

impl Scene {
    /// A committed git repository with `root_toml` and `web_toml` as the two configs.
    fn new(root_toml: &str, web: Option<&str>) -> Self {
        let mut ws = TempWorkspace::new()
            .file("prova.toml", root_toml)
            // The stale output is not committed: a file git tracks is never cleaned (issue 27).
            .file(".gitignore", ".prova/\napps/web/dist/\n")
            .file("apps/web/src/index.ts", "export {}\n")
            .file("apps/web/dist/old.js", "old\n")
            .file("apps/web/plugins/p/src/p.ts", "p\n")
            .file("libs/ui/src/ui.ts", "ui\n")
            .file("libs/ui/prova.toml", "[project]\nname = \"ui\"\n")
            .file("dist/keep.txt", "keep\n")
            .file("README.md", "readme\n");
        if let Some(web) = web {
            ws = ws.file("apps/web/prova.toml", web);
        }
        let canary = tempfile::tempdir().expect("canary dir");
        std::fs::write(canary.path().join("precious.txt"), "precious\n").expect("canary file");
        std::fs::create_dir(canary.path().join("sub")).expect("canary sub");
        std::fs::write(canary.path().join("sub/deep.txt"), "deep\n").expect("canary file");
        symlink(canary.path(), ws.path("ext")).expect("symlink to the canary");
        git(ws.root(), &["init", "-q"]);
        git(ws.root(), &["add", "-A"]);
        git(ws.root(), &["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "c"]);
        assert!(ws.exists(".git/HEAD"));
        Self { ws, canary }
    }

    /// `prova run build --all` must refuse the config with exit 2 at `at`, changing nothing.
    #[track_caller]
    fn assert_refused(&self, at: &str, what: &str) {
        let before = (count(self.ws.root()), count(self.canary.path()));
        for args in [&["run", "build", "--all"][..], &["run", "build", "--all", "--force"]] {
            let out = self.ws.prova(args.iter().copied()).run();
            assert_eq!(out.code(), Some(2), "{what}: expected exit 2\n{out}");
            assert!(out.stderr.contains(at), "{what}: the message names {at}\n{out}");
            assert!(out.stderr.contains("help: "), "{what}: the message says what to write\n{out}");
            assert!(out.stdout.is_empty(), "{what}: nothing ran\n{out}");
        }
        let after = (count(self.ws.root()), count(self.canary.path()));
        assert_eq!(before, after, "{what}: files of the workspace / canary changed");
        assert!(self.ws.exists("apps/web/dist/old.js"), "{what}: the stale output is untouched");
    }
}

fn git(dir: &Path, args: &[&str]) {
    let status = Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .status()
        .expect("running git");
    assert!(status.success(), "git {args:?} failed");
}

/// Every entry under `dir` (files, directories, symlinks; `.git` included), not following
/// symlinks.
fn count(dir: &Path) -> usize {
    let mut n = 0;
    let Ok(entries) = std::fs::read_dir(dir) else { return 0 };
    for entry in entries.flatten() {
        n += 1;
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            n += count(&entry.path());
        }
    }
    n
}

/// Patterns in a project's own `prova.toml` that reach out of that project.
const BAD_IN_PROJECT: &[&str] = &[
    "//**",
    "//",
    "/",
    ".",
    "./",
    "**",
    "",
    "*",
    "**/*",
    "*/**",
    "{dist,src}/**",
    "**/prova.toml",
    "prova.toml",
    "//.git/**",
    "//.git",
    "//.git/hooks/pre-commit",
    "//{.git,dist}/**",
    "//[.]git/**",
    "//prova.toml",
    "//*.toml",
    "//.prova/**",
    "//.prova",
    "//libs/ui/src/**",
    "//libs/ui",
    "//libs/**",
    "//apps/**",
    "//apps/web/**",
    "//apps/web",
    "plugins/**",
    "plugins/p/dist/**",
    "//*/**",
];

#[test]
fn every_bad_output_in_a_project_file_is_refused_and_nothing_is_deleted() {
    for bad in BAD_IN_PROJECT {
        let scene = Scene::new(ROOT_TOML, Some(&web_toml(bad)));
        scene.assert_refused("apps/web/prova.toml:3:23: ", &format!("outputs {bad:?}"));
    }
}

#[test]
fn an_exclusion_does_not_make_a_bad_include_acceptable() {
    let toml = "[tasks.build]\ncommand = \"echo built\"\noutputs = [\"//**\", \"!.git/**\", \"!apps/web/src/**\"]\n";
    let scene = Scene::new(ROOT_TOML, Some(toml));
    scene.assert_refused("apps/web/prova.toml:3:12: ", "//** minus exclusions");
}

#[test]
fn a_bad_workspace_default_is_refused_where_it_is_written() {
    // No project overrides the default: every project gets `//**`.
    let root = format!("{ROOT_TOML}outputs = [\"dist/**\", \"//**\"]\n");
    let scene = Scene::new(&root, None);
    scene.assert_refused("prova.toml:6:23: ", "default //**");
}

/// Defaults applied to the root project: relative patterns there are workspace-relative, so
/// these reach `.git`, the cache, the workspace's config or the other projects.
const BAD_FOR_THE_ROOT_PROJECT: &[&str] = &[
    "\".git/**\"",
    "\"{dist,.git}/**\"",
    "\"[.]git/**\"",
    "\".g?t/**\"",
    "\".prova/**\"",
    "\"prova.toml\"",
    "\"*/**\"",
    "\"apps/**\"",
    "\"libs/ui/dist/**\"",
    "\"**\"",
    "\"\"",
];

#[test]
fn defaults_applied_to_the_root_project_are_checked_there() {
    for bad in BAD_FOR_THE_ROOT_PROJECT {
        let scene = Scene::new(&root_project_toml(bad), None);
        scene.assert_refused("prova.toml:6:23: ", &format!("root outputs {bad}"));
    }
}

#[test]
fn good_outputs_still_work() {
    let web = "[tasks.build]\ncommand = \"mkdir -p dist ../../dist/web && echo a > dist/a.txt && echo b > ../../dist/web/b.txt\"\noutputs = [\"dist/**\", \"//dist/web/**\"]\n";
    let scene = Scene::new(ROOT_TOML, Some(web));
    let out = scene.ws.prova(["run", "build", "-p", "web"]).run();
    out.assert_code(0);
    assert_eq!(scene.ws.read("apps/web/dist/a.txt"), "a\n");
    assert_eq!(scene.ws.read("dist/web/b.txt"), "b\n");
    // Outputs outside `dist/web` were left alone, and the canary too.
    assert_eq!(scene.ws.read("dist/keep.txt"), "keep\n");
    assert!(scene.canary.path().join("sub/deep.txt").exists());
    // A hit restores both after they are deleted.
    std::fs::remove_dir_all(scene.ws.path("dist/web")).expect("removing dist/web");
    let again = scene.ws.prova(["run", "build", "-p", "web"]).run();
    again.assert_code(0);
    assert_eq!(scene.ws.read("dist/web/b.txt"), "b\n");
}

#[test]
fn a_parent_project_may_write_beside_its_nested_project() {
    // `apps/web` holds the project `apps/web/plugins/p`; `dist/**` of web does not reach it.
    let scene = Scene::new(
        ROOT_TOML,
        Some(
            "[tasks.build]\ncommand = \"mkdir -p dist && echo w > dist/w.txt\"\noutputs = [\"dist/**\", \"plugins.json\"]\n",
        ),
    );
    scene.ws.prova(["run", "build", "--all"]).run().assert_code(0);
    assert_eq!(scene.ws.read("apps/web/dist/w.txt"), "w\n");
}

/// A file whose name is not UTF-8 can be matched by no glob and named in no key: left out,
/// an edit to it would be a stale hit. It is refused, named (lossily), in and out of git.
#[test]
fn a_non_utf8_input_name_is_refused_with_its_path() {
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt as _;
    for in_git in [false, true] {
        let ws = TempWorkspace::new()
            .file(
                "prova.toml",
                "[workspace]\nprojects = [\"app\"]\n\n[tasks.build]\ncommand = \"cat src/* > ../out.txt\"\n",
            )
            .file("app/src/a.txt", "a\n");
        std::fs::write(ws.path("app/src").join(OsStr::from_bytes(b"b\xff.txt")), "b\n")
            .expect("writing the non-UTF-8 name");
        if in_git {
            git(ws.root(), &["init", "-q"]);
        }
        let out = ws.prova(["run", "build", "--all"]).run();
        assert_eq!(out.code(), Some(2), "git: {in_git}\n{out}");
        assert!(
            out.stderr.contains("app/src/b\u{fffd}.txt: the file name is not valid UTF-8"),
            "{out}"
        );
        assert!(out.stderr.contains("help: rename it"), "{out}");
        assert!(!ws.exists("out.txt"), "nothing ran\n{out}");
        // Renamed, the run goes ahead and the file is an input.
        std::fs::rename(
            ws.path("app/src").join(OsStr::from_bytes(b"b\xff.txt")),
            ws.path("app/src/b.txt"),
        )
        .expect("renaming");
        ws.prova(["run", "build", "--all"]).run().assert_code(0);
        assert_eq!(ws.read("out.txt"), "a\nb\n");
    }
}
