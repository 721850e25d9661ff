//! Whole-workspace loads on temporary directories: discovery, names, deps, merging, and every
//! error kind as the user sees it (file, `line:col`, help).

use std::path::Path;
use std::time::Duration;

use prova_protocol::spec::CommandLine;
use tempfile::TempDir;

use super::ConfigError;
use crate::workspace::Workspace;

struct Ws(TempDir);

impl Ws {
    fn new(root_toml: &str) -> Self {
        let ws = Self(tempfile::tempdir().unwrap());
        ws.file("prova.toml", root_toml);
        ws
    }

    fn file(&self, rel: &str, text: &str) -> &Self {
        let path = self.0.path().join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
        self
    }

    fn dir(&self, rel: &str) -> &Self {
        std::fs::create_dir_all(self.0.path().join(rel)).unwrap();
        self
    }

    fn path(&self) -> &Path {
        self.0.path()
    }

    fn load(&self) -> Workspace {
        Workspace::load(self.path()).unwrap_or_else(|e| panic!("load failed: {e}"))
    }

    fn err(&self) -> ConfigError {
        Workspace::load(self.path()).expect_err("load should fail")
    }
}

fn names(ws: &Workspace) -> Vec<(&str, &str)> {
    ws.projects.iter().map(|p| (p.dir.as_str(), p.name.as_str())).collect()
}

fn deps(values: &[super::Located<String>]) -> Vec<&str> {
    values.iter().map(|d| d.value.as_str()).collect()
}

const DEFAULTS: &str = r#"[workspace]
projects = ["packages/*", "apps/*"]
fingerprint = ["pnpm-lock.yaml"]
inputs = ["//tsconfig.base.json"]

[tasks.build]
command = "npm run build"
deps = ["^build", "codegen"]
outputs = ["dist/**"]
env = ["NODE_ENV"]
timeout = "10m"

[tasks.codegen]
command = ["gen", "--out", "src/gen"]

[tasks.check]
deps = ["build", "lint"]
"#;

#[test]
fn project_overrides_apply_field_by_field() {
    let ws = Ws::new(DEFAULTS);
    ws.file("apps/web/prova.toml", "[tasks.build]\noutputs = [\".next/**\"]\n")
        .file(
            "packages/ui/prova.toml",
            "[tasks.build]\ndeps = [\"codegen\"]\n\n[tasks.lint]\ncommand = \"eslint .\"\n",
        )
        .dir("packages/utils");
    let ws = ws.load();
    assert_eq!(ws.settings.fingerprint, ["pnpm-lock.yaml"]);
    assert_eq!(ws.settings.inputs, ["//tsconfig.base.json"]);
    assert_eq!(
        names(&ws),
        [("apps/web", "web"), ("packages/ui", "ui"), ("packages/utils", "utils")]
    );

    let web = ws.project("web").unwrap().task("build").unwrap();
    assert_eq!(web.outputs, [".next/**"]);
    assert_eq!(web.command, Some(CommandLine::Shell("npm run build".into())));
    assert_eq!(deps(&web.deps), ["^build", "codegen"]);
    assert!(!web.deps_from_project);
    assert_eq!(web.env, ["NODE_ENV"]);
    assert_eq!(web.timeout, Some(Duration::from_secs(600)));
    assert_eq!(web.defined_at.to_string(), "apps/web/prova.toml:1:1");
    // Deps inherited from the workspace point at the workspace file.
    assert_eq!(web.deps[0].at.to_string(), "prova.toml:8:9");

    let ui = ws.project("ui").unwrap();
    let build = ui.task("build").unwrap();
    assert_eq!(deps(&build.deps), ["codegen"]);
    assert!(build.deps_from_project);
    assert_eq!(build.deps[0].at.to_string(), "packages/ui/prova.toml:2:9");
    assert_eq!(build.outputs, ["dist/**"]);
    // A project-only task, and every workspace task.
    assert_eq!(ui.tasks.keys().collect::<Vec<_>>(), ["build", "check", "codegen", "lint"]);
    assert!(!ui.task("lint").unwrap().deps_from_project);
    assert_eq!(ui.task("lint").unwrap().defined_at.to_string(), "packages/ui/prova.toml:4:1");

    // No prova.toml: all workspace tasks, exactly the defaults.
    let utils = ws.project("utils").unwrap();
    assert_eq!(utils.config_file, None);
    assert_eq!(utils.tasks.len(), 3);
    assert_eq!(utils.task("build").unwrap().defined_at.to_string(), "prova.toml:6:1");
}

#[test]
fn command_string_array_or_group() {
    let ws = Ws::new(DEFAULTS);
    ws.dir("apps/web");
    let ws = ws.load();
    let p = ws.project("web").unwrap();
    assert_eq!(p.task("build").unwrap().command, Some(CommandLine::Shell("npm run build".into())));
    assert_eq!(
        p.task("codegen").unwrap().command,
        Some(CommandLine::Argv(vec!["gen".into(), "--out".into(), "src/gen".into()]))
    );
    let check = p.task("check").unwrap();
    assert!(check.is_group());
    // Every default applied.
    assert_eq!(check.inputs, None);
    assert!(check.outputs.is_empty() && check.env.is_empty() && check.pass_env.is_empty());
    assert_eq!((check.timeout, check.retries), (None, 0));
    assert!(check.cache && !check.persistent && !check.portable && !check.network);
    assert_eq!(check.ready_when, None);
}

#[test]
fn package_json_deps_keep_workspace_projects_only() {
    let ws = Ws::new("[workspace]\nprojects = [\"packages/*\", \"apps/*\"]\n");
    ws.file("packages/ui/package.json", r#"{"name": "@acme/ui"}"#)
        .file("packages/utils/package.json", r#"{"name": "utils"}"#)
        .file("packages/types/package.json", r#"{"name": "types"}"#)
        .file("packages/icons/package.json", r#"{"name": "icons"}"#)
        .file(
            "apps/web/package.json",
            r#"{
  "name": "web",
  "dependencies": { "@acme/ui": "workspace:*", "react": "^18", "web": "*" },
  "devDependencies": { "utils": "workspace:*", "typescript": "5" },
  "peerDependencies": { "types": "*" },
  "optionalDependencies": { "icons": "*" }
}"#,
        )
        .file("apps/web/prova.toml", "[project]\ndeps = [\"utils\", \"types\"]\n");
    let ws = ws.load();
    let web = ws.project("web").unwrap();
    // Declared first, then package.json in section order; no duplicates, no externals,
    // no peers (types is only here because prova.toml names it), never itself.
    assert_eq!(deps(&web.deps), ["utils", "types", "@acme/ui", "icons"]);
    assert_eq!(web.deps[0].at.to_string(), "apps/web/prova.toml:2:9");
    assert_eq!(web.deps[2].at.to_string(), "apps/web/package.json:3:21");
}

#[test]
fn project_names_come_from_prova_toml_then_package_json_then_dir() {
    let ws = Ws::new("[workspace]\nprojects = [\".\", \"packages/*\"]\n");
    ws.file("packages/a/prova.toml", "[project]\nname = \"alpha\"\n")
        .file("packages/a/package.json", r#"{"name": "not-used"}"#)
        .file("packages/b/package.json", r#"{"name": "@scope/beta"}"#)
        .dir("packages/c");
    let loaded = ws.load();
    assert_eq!(
        names(&loaded),
        [("", "//"), ("packages/a", "alpha"), ("packages/b", "@scope/beta"), ("packages/c", "c")]
    );
    assert_eq!(loaded.project_in("packages/b").unwrap().name, "@scope/beta");
    // The root named by its package.json, or by its own [project].
    ws.file("package.json", r#"{"name": "monorepo"}"#);
    assert_eq!(ws.load().projects[0].name, "monorepo");
    ws.file("prova.toml", "[workspace]\nprojects = [\".\", \"packages/*\"]\n[project]\nname = \"root\"\ndeps = [\"alpha\"]\n");
    let loaded = ws.load();
    assert_eq!(loaded.projects[0].name, "root");
    assert_eq!(deps(&loaded.projects[0].deps), ["alpha"]);
    assert_eq!(loaded.projects[0].config_file.as_deref(), Some(loaded.config_file.as_path()));
}

#[test]
fn root_project_tasks_are_the_defaults() {
    let ws = Ws::new(
        "[workspace]\nprojects = [\".\"]\n[tasks.lint]\ncommand = \"eslint\"\ndeps = [\"fmt\"]\n",
    );
    let ws = ws.load();
    assert_eq!(names(&ws), [("", "//")]);
    let lint = ws.projects[0].task("lint").unwrap();
    assert!(!lint.deps_from_project);
}

#[test]
fn duplicate_project_names_name_both_dirs() {
    let ws = Ws::new("[workspace]\nprojects = [\"packages/*\", \"legacy/*\"]\n");
    ws.file("packages/ui/package.json", r#"{"name": "ui"}"#)
        .file("legacy/ui-old/prova.toml", "[project]\nname = \"ui\"\n");
    let msg = ws.err().to_string();
    assert!(
        msg.starts_with("two projects are named `ui`: `legacy/ui-old` and `packages/ui`"),
        "{msg}"
    );
    assert!(msg.contains("help: project names must be unique"), "{msg}");
}

#[test]
fn a_js_workspaces_globs_select_package_directories_only() {
    // pnpm's `packages/**` (lerna-lite's layout): every directory below `packages` matches,
    // but only those with a package.json are packages — not each package's `src`.
    let ws = Ws::new("[workspace]\n");
    ws.file("pnpm-workspace.yaml", "packages:\n  - packages/**\n  - \"!**/__fixtures__/**\"\n")
        .file("packages/core/package.json", r#"{"name": "@x/core"}"#)
        .dir("packages/core/src/utils")
        .file("packages/list/package.json", r#"{"name": "@x/list"}"#)
        .dir("packages/list/src")
        .dir("packages/tools")
        .file("packages/tools/gen/package.json", r#"{"name": "gen"}"#)
        .file("packages/core/__fixtures__/pkg/package.json", r#"{"name": "fixture"}"#);
    let loaded = ws.load();
    assert_eq!(
        names(&loaded),
        [("packages/core", "@x/core"), ("packages/list", "@x/list"), ("packages/tools/gen", "gen")]
    );
    // The same with package.json `workspaces` (npm, yarn).
    let ws = Ws::new("[workspace]\n");
    ws.file("package.json", r#"{"private": true, "workspaces": ["packages/**"]}"#)
        .file("packages/a/package.json", r#"{"name": "a"}"#)
        .dir("packages/a/src");
    assert_eq!(names(&ws.load()), [("packages/a", "a")]);
    // Globs written in prova.toml still select any directory.
    let ws = Ws::new("[workspace]\nprojects = [\"libs/*\"]\n");
    ws.dir("libs/plain");
    assert_eq!(names(&ws.load()), [("libs/plain", "plain")]);
}

#[test]
fn an_excluded_subtree_is_not_searched_and_only_a_whole_subtree_is_pruned() {
    // `!**/__fixtures__/**` excludes every directory below a `__fixtures__`, and the walk
    // does not enter them (`discover::tests::an_excluded_subtree_is_not_entered`): the
    // projects found are the same as when it did.
    let ws = Ws::new("[workspace]\n");
    ws.file("pnpm-workspace.yaml", "packages:\n  - packages/**\n  - \"!**/__fixtures__/**\"\n")
        .file("packages/core/package.json", r#"{"name": "@x/core"}"#)
        .file("packages/core/__fixtures__/package.json", r#"{"name": "fixtures-root"}"#)
        .file("packages/core/__fixtures__/bad/pkg/package.json", r#"{"name": "fixture"}"#);
    // The `__fixtures__` directory itself is not below one: pnpm takes it as a package too.
    assert_eq!(
        names(&ws.load()),
        [("packages/core", "@x/core"), ("packages/core/__fixtures__", "fixtures-root")]
    );
    // An exclude that names one directory leaves what is below it to the include globs.
    let ws = Ws::new("[workspace]\nprojects = [\"libs/**\", \"!libs/legacy\"]\n");
    ws.dir("libs/legacy/kept").dir("libs/new");
    assert_eq!(names(&ws.load()), [("libs/legacy/kept", "kept"), ("libs/new", "new")]);
    // `dir/**` in prova.toml prunes the same way, and a pattern matching deeper directories
    // only (`**/gen/*/**`) prunes from where it matches.
    let ws = Ws::new("[workspace]\nprojects = [\"libs/**\", \"!libs/old/**\", \"!**/gen/*/**\"]\n");
    ws.dir("libs/old/a/b").dir("libs/gen/x/y").dir("libs/ok");
    assert_eq!(
        names(&ws.load()),
        [("libs/gen", "gen"), ("libs/gen/x", "x"), ("libs/ok", "ok"), ("libs/old", "old")]
    );
}

#[test]
fn directory_names_shared_by_projects_become_their_paths() {
    let ws = Ws::new("[workspace]\nprojects = [\"apps/*/src\", \"tools/*\"]\n");
    ws.dir("apps/web/src").dir("apps/api/src").dir("tools/gen").dir("tools/src");
    assert_eq!(
        names(&ws.load()),
        [
            ("apps/api/src", "apps/api/src"),
            ("apps/web/src", "apps/web/src"),
            ("tools/gen", "gen"),
            ("tools/src", "tools/src")
        ]
    );
    // A chosen name keeps it; the directory named like it takes its path.
    let ws = Ws::new("[workspace]\nprojects = [\"packages/*\", \"legacy/*\"]\n");
    ws.file("packages/ui/package.json", r#"{"name": "ui"}"#).dir("legacy/ui");
    assert_eq!(names(&ws.load()), [("legacy/ui", "legacy/ui"), ("packages/ui", "ui")]);
    // A package.json without a name is named by its directory, as without one.
    let ws = Ws::new("[workspace]\nprojects = [\"a/*\", \"b/*\"]\n");
    ws.file("a/x/package.json", "{}").file("b/x/package.json", "{}");
    assert_eq!(names(&ws.load()), [("a/x", "a/x"), ("b/x", "b/x")]);
}

#[test]
fn discovery_expands_nested_globs_and_skips_ignored_dirs() {
    let ws = Ws::new(
        "[workspace]\nprojects = [\"libs/**\", \"packages/*\", \"!packages/legacy\", \"tools/gen\"]\n",
    );
    ws.dir("libs/a")
        .dir("libs/a/b")
        .dir("libs/node_modules/x")
        .dir("libs/generated/y")
        .dir("libs/.prova/z")
        .file(".gitignore", "libs/generated/\n")
        .dir("packages/one")
        .dir("packages/legacy")
        .dir("packages/node_modules")
        .dir("packages/one/src")
        .dir("tools/gen")
        .dir("tools/other")
        .dir("docs/deep/deeper")
        .dir("packages/.cache")
        .file("packages/file.txt", "not a dir");
    let ws = ws.load();
    let dirs: Vec<&str> = ws.projects.iter().map(|p| p.dir.as_str()).collect();
    assert_eq!(dirs, ["libs/a", "libs/a/b", "packages/one", "tools/gen"]);
}

#[test]
fn gitignore_in_a_subdirectory_is_honoured() {
    let ws = Ws::new("[workspace]\nprojects = [\"apps/*\"]\n");
    ws.dir("apps/web").dir("apps/scratch").file("apps/.gitignore", "scratch\n");
    assert_eq!(names(&ws.load()), [("apps/web", "web")]);
}

#[test]
fn root_is_found_upward_past_project_files() {
    let ws = Ws::new(DEFAULTS);
    ws.file("apps/web/prova.toml", "[project]\nname = \"web\"\n").dir("apps/web/src/deep");
    let loaded = Workspace::load(&ws.path().join("apps/web/src/deep")).unwrap();
    assert_eq!(loaded.root, ws.path().canonicalize().unwrap());
    assert_eq!(loaded.config_file, loaded.root.join("prova.toml"));
    assert_eq!(names(&loaded), [("apps/web", "web")]);
}

#[test]
fn no_workspace_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("a/b")).unwrap();
    std::fs::write(dir.path().join("a/prova.toml"), "[project]\nname = \"x\"\n").unwrap();
    let err = Workspace::load(&dir.path().join("a/b")).unwrap_err();
    assert!(matches!(err, ConfigError::NoWorkspace { .. }), "{err:?}");
    let msg = err.to_string();
    assert!(
        msg.starts_with("no workspace found: no prova.toml with a [workspace] table in "),
        "{msg}"
    );
    assert!(msg.contains("a/prova.toml has no [workspace] table"), "{msg}");

    let err = Workspace::load(&dir.path().join("missing")).unwrap_err();
    assert!(matches!(err, ConfigError::Io { .. }), "{err:?}");
}

#[test]
fn broken_root_file_reports_its_syntax_error() {
    let ws = Ws::new("[workspace\nprojects = []\n");
    ws.dir("sub");
    let err = Workspace::load(&ws.path().join("sub")).unwrap_err();
    assert!(matches!(err, ConfigError::Syntax { .. }), "{err:?}");
    assert!(err.to_string().contains("prova.toml:1:11: invalid TOML"), "{err}");
}

#[test]
fn error_unknown_key_in_project_file() {
    let ws = Ws::new(DEFAULTS);
    ws.file(
        "apps/web/prova.toml",
        "[project]\nname = \"web\"\n\n[tasks.build]\ncomand = \"next build\"\n",
    );
    assert_eq!(
        ws.err().to_string(),
        "apps/web/prova.toml:5:1: unknown key `comand` in [tasks.build]\n  help: did you mean `command`?"
    );
}

#[test]
fn error_syntax_and_wrong_type_in_project_file() {
    let ws = Ws::new(DEFAULTS);
    ws.file("apps/web/prova.toml", "[tasks.build]\noutputs = [\"a\"\n");
    let msg = ws.err().to_string();
    assert!(msg.starts_with("apps/web/prova.toml:2:") && msg.contains("invalid TOML"), "{msg}");
    ws.file("apps/web/prova.toml", "[tasks.build]\nretries = \"3\"\n");
    assert_eq!(
        ws.err().to_string(),
        "apps/web/prova.toml:2:11: `retries` in [tasks.build] must be a non-negative integer, found a string `\"3\"`"
    );
}

#[test]
fn labels_merge_field_by_field_and_must_be_a_table_of_strings() {
    let ws = Ws::new(DEFAULTS);
    ws.file("apps/web/prova.toml", "[tasks.build]\nlabels = { pool = \"gpu\", os = \"linux\" }\n");
    let loaded = ws.load();
    let build = loaded.project("web").unwrap().task("build").unwrap();
    let want: std::collections::BTreeMap<String, String> =
        [("os", "linux"), ("pool", "gpu")].map(|(k, v)| (k.to_owned(), v.to_owned())).into();
    assert_eq!(build.labels, want);
    assert!(loaded.project("web").unwrap().task("check").unwrap().labels.is_empty());
    ws.file("apps/web/prova.toml", "[tasks.build]\nlabels = [\"gpu\"]\n");
    let msg = ws.err().to_string();
    assert!(msg.starts_with("apps/web/prova.toml:2:"), "{msg}");
    assert!(msg.contains("`labels` in [tasks.build] must be a table of strings"), "{msg}");
}

#[test]
fn error_unknown_project_dep_suggests_a_name() {
    let ws = Ws::new("[workspace]\nprojects = [\"packages/*\"]\n");
    ws.file("packages/web/prova.toml", "[project]\nname = \"web\"\ndeps = [\"utils\", \"uii\"]\n")
        .file("packages/ui/package.json", r#"{"name": "ui"}"#)
        .dir("packages/utils")
        .file("packages/utils/prova.toml", "[project]\nname = \"utils\"\n");
    let err = ws.err();
    assert!(matches!(err, ConfigError::UnknownProject { .. }), "{err:?}");
    assert_eq!(
        err.to_string(),
        "packages/web/prova.toml:3:18: project `web` depends on unknown project `uii`\n  help: did you mean `ui`?"
    );
}

#[test]
fn error_self_dependency() {
    let ws = Ws::new("[workspace]\nprojects = [\"apps/*\"]\n");
    ws.file("apps/web/prova.toml", "[project]\nname = \"web\"\ndeps = [\"web\"]\n");
    assert!(
        ws.err()
            .to_string()
            .starts_with("apps/web/prova.toml:3:9: `deps`: project `web` lists itself")
    );
}

#[test]
fn error_invalid_projects_glob() {
    let ws = Ws::new("[workspace]\nprojects = [\"apps/*\", \"packages/[ab\"]\n");
    let err = ws.err();
    assert!(matches!(err, ConfigError::InvalidGlob { .. }), "{err:?}");
    let msg = err.to_string();
    assert!(
        msg.starts_with(
            "prova.toml:2:23: invalid pattern in `projects`: invalid glob `packages/[ab`"
        ),
        "{msg}"
    );
    let ws = Ws::new("[workspace]\nprojects = [\"../elsewhere/*\"]\n");
    assert!(ws.err().to_string().contains("leaves the workspace"));
}

#[test]
fn error_literal_project_dir_missing() {
    let ws = Ws::new("[workspace]\nprojects = [\"tools/genn\"]\n");
    ws.dir("tools/gen");
    assert_eq!(
        ws.err().to_string(),
        "prova.toml:2:13: `projects` entry `tools/genn` names no directory\n  help: did you mean `gen`?"
    );
}

#[test]
fn error_invalid_globs_in_workspace_settings() {
    let ws = Ws::new("[workspace]\nfingerprint = [\"a\", \"/etc/passwd\"]\n");
    assert!(ws.err().to_string().starts_with("prova.toml:2:21: invalid pattern in `fingerprint`"));
    let ws = Ws::new("[workspace]\ninputs = [\"//x/{a\"]\n");
    assert!(ws.err().to_string().starts_with("prova.toml:2:11: invalid pattern in `inputs`"));
}

#[test]
fn error_project_table_in_root_that_is_not_a_project() {
    let ws = Ws::new("[workspace]\nprojects = [\"apps/*\"]\n\n[project]\nname = \"root\"\n");
    let err = ws.err();
    assert!(matches!(err, ConfigError::MisplacedProjectTable { .. }), "{err:?}");
    assert!(
        err.to_string().starts_with("prova.toml:4:1: [project] in the workspace root"),
        "{err}"
    );
    assert!(err.help().unwrap().contains("\".\""));
}

#[test]
fn error_ready_when_without_persistent_points_where_it_was_written() {
    let ws = Ws::new(
        "[workspace]\nprojects = [\"apps/*\"]\n\n[tasks.dev]\ncommand = \"vite\"\npersistent = true\nready_when = \"ready in\"\n",
    );
    ws.file("apps/web/prova.toml", "[tasks.dev]\npersistent = false\n");
    let err = ws.err();
    assert!(matches!(err, ConfigError::ReadyWhenWithoutPersistent { .. }), "{err:?}");
    assert!(
        err.to_string().starts_with(
            "prova.toml:7:14: `ready_when` in task `web#dev` needs `persistent = true`"
        ),
        "{err}"
    );
}

#[test]
fn error_persistent_cached_points_at_the_override() {
    let ws = Ws::new(
        "[workspace]\nprojects = [\"apps/*\"]\n\n[tasks.dev]\ncommand = \"vite\"\npersistent = true\n",
    );
    ws.file("apps/web/prova.toml", "[tasks.dev]\ncache = true\n");
    let err = ws.err();
    assert!(matches!(err, ConfigError::PersistentCached { .. }), "{err:?}");
    assert!(
        err.to_string().starts_with("apps/web/prova.toml:2:9: task `web#dev` is persistent"),
        "{err}"
    );
}

#[test]
fn error_invalid_timeout_and_regex_in_workspace_defaults() {
    let ws = Ws::new("[workspace]\n\n[tasks.build]\ntimeout = \"ten minutes\"\n");
    let err = ws.err();
    assert!(matches!(err, ConfigError::InvalidTimeout { .. }), "{err:?}");
    assert!(
        err.to_string().starts_with("prova.toml:4:11: invalid timeout \"ten minutes\""),
        "{err}"
    );
    let ws = Ws::new("[workspace]\n\n[tasks.dev]\npersistent = true\nready_when = \"(\"\n");
    let err = ws.err();
    assert!(matches!(err, ConfigError::InvalidRegex { .. }), "{err:?}");
    assert!(err.to_string().starts_with("prova.toml:5:14: invalid `ready_when` regex"), "{err}");
}

#[test]
fn error_malformed_package_json() {
    let ws = Ws::new("[workspace]\nprojects = [\"apps/*\"]\n");
    ws.file(
        "apps/web/package.json",
        "{\n  \"name\": \"web\",\n  \"dependencies\": {\n    \"ui\": \"*\",\n  }\n}\n",
    );
    let err = ws.err();
    assert!(matches!(err, ConfigError::PackageJson { .. }), "{err:?}");
    assert!(
        err.to_string()
            .starts_with("apps/web/package.json:5:3: invalid package.json: trailing comma"),
        "{err}"
    );
}

#[test]
fn error_invalid_project_name_from_package_json() {
    let ws = Ws::new("[workspace]\nprojects = [\"apps/*\"]\n");
    ws.file("apps/web/package.json", "{\n  \"name\": \"web#1\"\n}\n");
    let err = ws.err();
    assert!(
        err.to_string().starts_with("apps/web/package.json:2:3: invalid project name `web#1`"),
        "{err}"
    );
    assert_eq!(err.help(), Some("set `name` under [project] in apps/web/prova.toml"));
}

#[test]
fn error_workspace_table_in_project_file() {
    let ws = Ws::new(DEFAULTS);
    ws.file("apps/web/prova.toml", "[workspace]\nprojects = []\n");
    // Searching upward from the root finds the real root; the nested file is then a
    // project file that may not carry [workspace].
    let err = ws.err();
    assert!(
        err.to_string()
            .starts_with("apps/web/prova.toml:1:2: unknown key `workspace` in the top level"),
        "{err}"
    );
}

/// Loading is linear in the size of the config: turning spans into `line:col` looks at each
/// value's own line only. Measured in bytes looked at, not time: a scan from the start of the
/// file for each location (what made 8,000 tasks in one file take seconds) looks at about
/// `values × file size / 2` bytes, here thousands of times the file size.
#[test]
fn loading_looks_at_each_config_byte_a_bounded_number_of_times() {
    use std::fmt::Write as _;
    let tasks = 3_000;
    let mut own = String::new();
    for t in 0..tasks {
        let dep = if t == 0 { String::new() } else { format!(", \"t{}\"", t - 1) };
        write!(
            own,
            "[tasks.t{t}]\ncommand = \"echo {t}\"\ndeps = [\"^t{t}\"{dep}]\n\
             outputs = [\"dist/t{t}/**\", \"gen/t{t}.js\"]\ninputs = [\"src/**\"]\n\n"
        )
        .unwrap();
    }
    let ws = Ws::new("[workspace]\nprojects = [\"a\", \"b\"]\n\n[tasks.lint]\ncommand = \"x\"\n");
    ws.file("a/prova.toml", &own).file("b/prova.toml", &own);
    let (loaded, counts) = super::load::load_counting(ws.path()).unwrap();
    assert_eq!(loaded.projects.len(), 2);
    assert_eq!(loaded.projects[0].tasks.len(), tasks + 1);
    assert!(counts.config_bytes > 2 * own.len(), "{counts:?}");
    // Each value is located once and costs at most its own line.
    assert!(
        counts.location_bytes <= counts.config_bytes,
        "locating values looked at {} bytes of {} bytes of config",
        counts.location_bytes,
        counts.config_bytes
    );
}

#[test]
fn unconfined_outputs_are_refused_where_they_are_written() {
    let ws = Ws::new(
        "[workspace]\nprojects = [\"apps/*\"]\n\n[tasks.build]\ncommand = \"x\"\noutputs = [\"dist/**\"]\n",
    );
    ws.dir("apps/api")
        .file("apps/web/prova.toml", "[tasks.build]\noutputs = [\"//apps/api/**\"]\n");
    let err = ws.err();
    assert!(matches!(err, ConfigError::UnconfinedOutput { .. }), "{err:?}");
    let msg = err.to_string();
    assert!(
        msg.starts_with(
            "apps/web/prova.toml:2:12: output `//apps/api/**` of task `web#build` is not \
             confined to its project: it reaches into project `api` (`apps/api`)"
        ),
        "{msg}"
    );
    assert!(err.help().is_some_and(|h| h.contains("`dist/**`")), "{msg}");
    // A project-only task is checked too; an override that fixes the default is accepted.
    let ws = Ws::new(
        "[workspace]\nprojects = [\"apps/*\"]\n\n[tasks.build]\ncommand = \"x\"\noutputs = [\"**\"]\n",
    );
    ws.file("apps/web/prova.toml", "[tasks.build]\noutputs = [\"dist/**\"]\n");
    ws.file("apps/api/prova.toml", "[tasks.build]\noutputs = [\".next/**\"]\n[tasks.gen]\ncommand = \"x\"\noutputs = [\"//.git\"]\n");
    let msg = ws.err().to_string();
    assert!(
        msg.starts_with("apps/api/prova.toml:5:12: output `//.git` of task `api#gen`"),
        "{msg}"
    );
    ws.file("apps/api/prova.toml", "[tasks.build]\noutputs = [\".next/**\"]\n");
    let loaded = ws.load();
    assert_eq!(loaded.projects[1].tasks["build"].outputs, ["dist/**"]);
    // Not overridden, the default `**` is refused at its own line, for the first project.
    ws.file("apps/web/prova.toml", "[project]\nname = \"web\"\n");
    let msg = ws.err().to_string();
    assert!(msg.starts_with("prova.toml:6:12: output `**` of task `web#build`"), "{msg}");
    assert!(msg.contains("it can match everything in the project directory `apps/web`"), "{msg}");
}
