//! `prova init` (issue 16): detects the kind of workspace, writes a commented `prova.toml`
//! that `prova run` accepts (its `#:schema` first line and the schema it names are checked
//! in `config_schema.rs`), and refuses to overwrite one without `--force`.

use prova_tests::TempWorkspace;

#[test]
fn init_on_an_npm_workspace_is_accepted_by_run() {
    let ws = TempWorkspace::new()
        .file("package.json", r#"{"private": true, "workspaces": ["packages/*"]}"#)
        .file("package-lock.json", "{}")
        .file("packages/lib/package.json", r#"{"name": "lib", "scripts": {"build": "echo lib > out"}}"#)
        .file(
            "packages/app/package.json",
            r#"{"name": "app", "scripts": {"build": "echo app > out"}, "dependencies": {"lib": "*"}}"#,
        );
    // Before init: the error recommends it.
    ws.prova(["run", "build", "--all"]).run().assert_code(2).assert_stderr_contains("prova init");
    ws.prova(["init"]).run().assert_code(0).assert_stdout_contains("npm/yarn workspace");
    let text = ws.read("prova.toml");
    assert!(text.contains("# "), "commented: {text}");
    assert!(text.contains("fingerprint = [\"package-lock.json\"]"), "{text}");
    // Editors find the schema: the first line names the copy init wrote beside the cache.
    assert!(text.starts_with("#:schema ./.prova/prova.schema.json\n"), "{text}");
    assert!(ws.exists(".prova/prova.schema.json"));
    let run = ws.prova(["run", "build", "--all", "--json"]).run();
    run.assert_code(0);
    assert_eq!(run.status_of("lib#build"), "succeeded");
    assert_eq!(run.status_of("app#build"), "succeeded");
    assert_eq!(ws.read("packages/app/out").trim(), "app");
}

#[test]
fn init_on_a_pnpm_workspace_is_accepted_by_run() {
    let ws = TempWorkspace::new()
        .file("pnpm-workspace.yaml", "packages:\n  - \"libs/*\"\n")
        .file("libs/a/package.json", r#"{"name": "a", "scripts": {"build": "echo a > out"}}"#);
    ws.prova(["init"]).run().assert_code(0).assert_stdout_contains("pnpm workspace");
    ws.prova(["run", "build", "--all"]).run().assert_code(0);
    assert_eq!(ws.read("libs/a/out").trim(), "a");
}

#[test]
fn init_on_a_cargo_workspace_lists_its_members() {
    let ws = TempWorkspace::new()
        .file("Cargo.toml", "[workspace]\nmembers = [\"crates/*\", \"tool\"]\nresolver = \"2\"\n")
        .file("Cargo.lock", "version = 4\n")
        .file("crates/x/Cargo.toml", "[package]\nname = \"x\"\nversion = \"0.1.0\"\n")
        .file("crates/y/Cargo.toml", "[package]\nname = \"y\"\nversion = \"0.1.0\"\n")
        .file("tool/Cargo.toml", "[package]\nname = \"tool\"\nversion = \"0.1.0\"\n");
    ws.prova(["init"]).run().assert_code(0).assert_stdout_contains("Cargo workspace");
    let text = ws.read("prova.toml");
    assert!(text.contains("projects = [\"crates/*\", \"tool\"]"), "{text}");
    let dry = ws.prova(["run", "build", "--all", "--dry-run"]).run();
    dry.assert_code(0);
    for t in ["x#build", "y#build", "tool#build"] {
        dry.assert_stdout_contains(t);
    }
}

#[test]
fn init_without_a_manifest_makes_the_directory_one_project() {
    let ws = TempWorkspace::new().file("README", "hi\n");
    ws.prova(["init"]).run().assert_code(0);
    ws.prova(["run", "build", "--all"]).run().assert_code(0);
}

#[test]
fn init_refuses_to_overwrite_without_force() {
    let ws = TempWorkspace::new().file("prova.toml", "[workspace]\nprojects = [\"keep\"]\n");
    ws.prova(["init"]).run().assert_code(2).assert_stderr_contains("--force");
    assert_eq!(ws.read("prova.toml"), "[workspace]\nprojects = [\"keep\"]\n");
    ws.prova(["init", "--force"]).run().assert_code(0);
    assert!(ws.read("prova.toml").contains("projects = [\".\"]"));
}

// Real layouts (issue 27): `prova init` then `prova run` with no hand edits, and narrow build
// inputs. Each workspace below is a small faithful copy of a public repository's layout
// (package scripts as written there), with a stand-in `tsc` in `node_modules/.bin` so the
// tests need no node: it reads the package's TypeScript sources and config and writes
// `dist/` and, for a composite project, `tsconfig.tsbuildinfo` beside tsconfig.json (where
// TypeScript puts it for `rootDir: "src"`, `outDir: "dist"`).

use prova_tests::Output;

/// Tasks that executed (not hits), sorted.
fn ran(out: &Output) -> Vec<String> {
    prova_tests::tsmono::ran(out)
}

const FAKE_TSC: &str = "#!/bin/sh
set -e
mkdir -p dist
find . -name '*.ts' -not -path './dist/*' -not -path './node_modules/*' | sort | xargs cat > dist/index.js
if cat tsconfig*.json ../../tsconfig.base.json 2>/dev/null | grep -q '\"composite\": true'; then
  cat tsconfig.json > tsconfig.tsbuildinfo
fi
";

/// Installs the stand-in `tsc` at `dir/node_modules/.bin/tsc`.
fn install_tsc(ws: &TempWorkspace, dir: &str) {
    use std::os::unix::fs::PermissionsExt as _;
    let rel = if dir.is_empty() {
        "node_modules/.bin/tsc".to_owned()
    } else {
        format!("{dir}/node_modules/.bin/tsc")
    };
    ws.write(&rel, FAKE_TSC);
    std::fs::set_permissions(ws.path(&rel), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let rimraf = rel.replace("/tsc", "/rimraf");
    ws.write(&rimraf, "#!/bin/sh\nrm -rf \"$@\"\n");
    std::fs::set_permissions(ws.path(&rimraf), std::fs::Permissions::from_mode(0o755))
        .expect("chmod");
}

fn composite_tsconfig(refs: &[&str]) -> String {
    let refs: Vec<String> = refs.iter().map(|r| format!("{{ \"path\": \"../{r}\" }}")).collect();
    format!(
        "{{\n  // tsc accepts comments and trailing commas\n  \"extends\": \"../../tsconfig.base.json\",\n  \"compilerOptions\": {{ \"rootDir\": \"src\", \"outDir\": \"dist\", }},\n  \"include\": [\"src/**/*.ts\"],\n  \"exclude\": [\"**/__tests__/**\"],\n  \"references\": [{}]\n}}\n",
        refs.join(", ")
    )
}

/// lerna-lite's layout since it moved to pnpm: `packages/**` (so every `src` and
/// `__fixtures__` directory matches the glob), scoped names, composite packages built by
/// `tsc` after a `prebuild` of `rimraf dist`, the build info at the package root.
fn pnpm_nested() -> TempWorkspace {
    let pkg = |name: &str, deps: &[&str]| {
        let deps: Vec<String> =
            deps.iter().map(|d| format!("\"@ll/{d}\": \"workspace:*\"")).collect();
        format!(
            r#"{{"name": "@ll/{name}", "scripts": {{"prebuild": "rimraf dist", "build": "tsc"}}, "dependencies": {{{}}}}}"#,
            deps.join(", ")
        )
    };
    let ws = TempWorkspace::new()
        .file("package.json", r#"{"name": "ll", "private": true, "scripts": {"build": "tsc --build ./tsconfig.packages.json"}}"#)
        .file("pnpm-workspace.yaml", "packages:\n  # workspace packages\n  - packages/**\n  - \"!**/__fixtures__/**\"\n")
        .file("pnpm-lock.yaml", "lockfileVersion: '9.0'\nimporters:\n  .: {}\n")
        .file("README.md", "# ll\n")
        .file("tsconfig.base.json", "{\"compilerOptions\": {\"composite\": true, \"removeComments\": true}}\n")
        .file("packages/npmlog/package.json", &pkg("npmlog", &[]))
        .file("packages/npmlog/tsconfig.json", &composite_tsconfig(&[]))
        .file("packages/npmlog/src/index.ts", "export const log = 1;\n")
        .file("packages/npmlog/README.md", "# npmlog\n")
        .file("packages/core/package.json", &pkg("core", &["npmlog"]))
        .file("packages/core/tsconfig.json", &composite_tsconfig(&["npmlog"]))
        .file("packages/core/src/index.ts", "export const core = 2;\n")
        .file("packages/core/CHANGELOG.md", "# 1.0.0\n")
        .file("packages/core/__fixtures__/basic/package.json", r#"{"name": "fixture-basic"}"#)
        .file("packages/list/package.json", &pkg("list", &["core"]))
        .file("packages/list/tsconfig.json", &composite_tsconfig(&["core"]))
        .file("packages/list/src/index.ts", "export const list = 3;\n");
    install_tsc(&ws, "");
    ws
}

#[test]
fn init_on_a_pnpm_workspace_with_nested_globs_runs_without_edits() {
    let ws = pnpm_nested();
    ws.prova(["init"]).run().assert_code(0);
    let config = ws.read("prova.toml");
    assert!(
        config.contains("\"tsconfig.tsbuildinfo\""),
        "the root-level build info is an output\n{config}"
    );
    // No `src` (nor fixture) projects: only the three packages, by their package.json names.
    let ls = ws.prova(["ls"]).run();
    ls.assert_code(0);
    assert!(!ls.stdout.contains("(packages/core/src)") && !ls.stdout.contains("fixture"), "{ls}");
    let out = ws.prova(["run", "build", "--all", "--json"]).run();
    out.assert_code(0);
    assert_eq!(ran(&out), ["@ll/core#build", "@ll/list#build", "@ll/npmlog#build"], "{out}");
    for t in ["@ll/core#build", "@ll/list#build", "@ll/npmlog#build"] {
        assert_eq!(out.cache_of(t), "saved", "{t}\n{out}");
    }
    // The build info is restored with dist/ on a hit.
    std::fs::remove_file(ws.path("packages/core/tsconfig.tsbuildinfo")).expect("rm");
    std::fs::remove_dir_all(ws.path("packages/core/dist")).expect("rm -r");
    let warm = ws.prova(["run", "build", "--all", "--json"]).run();
    warm.assert_code(0);
    assert!(ran(&warm).is_empty(), "{warm}");
    assert!(ws.exists("packages/core/tsconfig.tsbuildinfo"), "{warm}");
}

#[test]
fn init_writes_narrow_build_inputs_so_unrelated_edits_rerun_nothing() {
    let ws = pnpm_nested();
    ws.prova(["init"]).run().assert_code(0);
    ws.prova(["run", "build", "--all"]).run().assert_code(0);
    // Docs are no build input.
    ws.write("packages/npmlog/README.md", "# npmlog, documented\n");
    ws.write("packages/core/CHANGELOG.md", "# 1.0.1\n");
    ws.write("README.md", "# the repository\n");
    let out = ws.prova(["run", "build", "--all", "--json"]).run();
    out.assert_code(0);
    assert_eq!(ran(&out), Vec::<String>::new(), "docs re-ran builds\n{out}");
    // A leaf's source re-runs the leaf alone.
    ws.write("packages/list/src/index.ts", "export const list = 4;\n");
    let out = ws.prova(["run", "build", "--all", "--json"]).run();
    out.assert_code(0);
    assert_eq!(ran(&out), ["@ll/list#build"], "{out}");
    // The shared base config is read by every build.
    ws.write(
        "tsconfig.base.json",
        "{\"compilerOptions\": {\"composite\": true, \"removeComments\": false}}\n",
    );
    let out = ws.prova(["run", "build", "--all", "--json"]).run();
    out.assert_code(0);
    assert_eq!(ran(&out).len(), 3, "{out}");
    // A referenced project's tsconfig is read by its dependents' tsc (to find its outputs).
    let core = ws.read("packages/core/tsconfig.json");
    ws.write("packages/core/tsconfig.json", &core.replace("src/**/*.ts", "src/*.ts"));
    let out = ws.prova(["run", "build", "--all", "--json"]).run();
    out.assert_code(0);
    assert!(ran(&out).contains(&"@ll/list#build".to_owned()), "{out}");
}

/// The npm era of lerna-lite: literal `./packages/x` workspaces, each package building with
/// `tsc --project tsconfig.bundle.json` whose `include` is `["../typings", "**/*"]`; the cli
/// `import()`s an optional command its package.json does not list (npm's `--ws` order, the
/// `workspaces` array's, hid it).
fn npm_workspaces() -> TempWorkspace {
    let bundle = r#"{"extends": "../tsconfig.bundle.json", "compilerOptions": {"outDir": "dist"}, "include": ["../typings", "**/*"]}"#;
    let pkg = |name: &str, deps: &[&str]| {
        let deps: Vec<String> = deps.iter().map(|d| format!("\"@ll/{d}\": \"^1.0.0\"")).collect();
        format!(
            r#"{{"name": "@ll/{name}", "scripts": {{"build": "tsc --project tsconfig.bundle.json --newLine LF"}}, "dependencies": {{{}}}}}"#,
            deps.join(", ")
        )
    };
    let ws = TempWorkspace::new()
        .file("package.json", r#"{"private": true, "workspaces": ["./packages/core", "./packages/run", "./packages/cli"]}"#)
        .file("package-lock.json", "{}")
        .file("packages/tsconfig.bundle.json", r#"{"compilerOptions": {"declaration": true}}"#)
        .file("packages/typings/global.d.ts", "declare const x: number;\n")
        .file("packages/core/package.json", &pkg("core", &[]))
        .file("packages/core/tsconfig.bundle.json", bundle)
        .file("packages/core/src/index.ts", "export const core = 1;\n")
        .file("packages/core/CHANGELOG.md", "# 1.0.0\n")
        .file("packages/run/package.json", &pkg("run", &["core"]))
        .file("packages/run/tsconfig.bundle.json", bundle)
        .file("packages/run/src/index.ts", "import { core } from '@ll/core';\n")
        .file("packages/cli/package.json", &pkg("cli", &["core"]))
        .file("packages/cli/tsconfig.bundle.json", bundle)
        .file(
            "packages/cli/src/cli-run-commands.ts",
            "export async function handler() {\n  const { run } = await import('@ll/run');\n}\n",
        );
    install_tsc(&ws, "");
    ws
}

#[test]
fn init_on_an_npm_workspace_orders_imports_its_package_json_does_not_list() {
    let ws = npm_workspaces();
    let out = ws.prova(["init"]).run();
    out.assert_code(0).assert_stdout_contains("packages/cli/prova.toml");
    let own = ws.read("packages/cli/prova.toml");
    assert!(own.contains("deps = [\"@ll/run\"]"), "{own}");
    // The cli's build runs after run's.
    let run = ws.prova(["run", "@ll/cli#build", "--json"]).run();
    run.assert_code(0);
    assert_eq!(ran(&run), ["@ll/cli#build", "@ll/core#build", "@ll/run#build"], "{run}");
    // `include: ["**/*"]` reads every source file of the package, not its changelog; the
    // typings beside the packages are read by every build.
    ws.write("packages/core/CHANGELOG.md", "# 1.0.1\n");
    let out = ws.prova(["run", "build", "--all", "--json"]).run();
    assert_eq!(ran(&out), Vec::<String>::new(), "{out}");
    ws.write("packages/typings/global.d.ts", "declare const x: string;\n");
    let out = ws.prova(["run", "build", "--all", "--json"]).run();
    assert_eq!(ran(&out).len(), 3, "{out}");
}

/// capelski/typescript-monorepo (branch npm-dependencies): no root package.json at all;
/// `shared`, `server` and `client` each installed on their own, server and client depending
/// on `"shared": "file:../shared"`; client bundles with webpack.
fn file_links() -> TempWorkspace {
    let ws = TempWorkspace::new()
        .file(
            "shared/package.json",
            r#"{"name": "shared", "main": "dist/index.js", "scripts": {"build": "tsc -p tsconfig.json"}, "dependencies": {"nanoid": "^3.3.7"}}"#,
        )
        .file("shared/package-lock.json", "{}")
        .file(
            "shared/tsconfig.json",
            r#"{"compilerOptions": {"composite": true, "declaration": true, "outDir": "./dist", "rootDir": "./source"}, "include": ["source/**/*"]}"#,
        )
        .file("shared/source/index.ts", "export const id = 1;\n")
        .file(
            "server/package.json",
            r#"{"name": "server", "scripts": {"build": "tsc -p tsconfig.json", "start": "node dist/main.js"}, "dependencies": {"shared": "file:../shared"}}"#,
        )
        .file("server/package-lock.json", "{}")
        .file(
            "server/tsconfig.json",
            r#"{"compilerOptions": {"outDir": "./dist", "rootDir": "./source"}, "include": ["source/**/*"], "references": [{"path": "../shared"}]}"#,
        )
        .file("server/source/main.ts", "import { id } from 'shared';\n")
        .file(
            "client/package.json",
            r#"{"name": "client", "scripts": {"build": "webpack --config webpack.config.js --mode=production"}, "dependencies": {"shared": "file:../shared"}}"#,
        )
        .file("client/webpack.config.js", "module.exports = { entry: './source/index.tsx' };\n")
        .file("client/tsconfig.json", r#"{"compilerOptions": {"jsx": "react", "outDir": "./dist"}, "include": ["source/**/*"]}"#)
        .file("client/source/index.tsx", "export const App = 1;\n")
        .file(".gitignore", "dist/\nnode_modules/\n");
    install_tsc(&ws, "shared");
    install_tsc(&ws, "server");
    ws.write("server/node_modules/express/index.js", "module.exports = 4;\n");
    // A stand-in for webpack: it reads its config and bundles the sources.
    ws.write(
        "client/node_modules/.bin/webpack",
        "#!/bin/sh\nmkdir -p dist && cat webpack.config.js source/* > dist/main.js\n",
    );
    use std::os::unix::fs::PermissionsExt as _;
    let perm = std::fs::Permissions::from_mode(0o755);
    std::fs::set_permissions(ws.path("client/node_modules/.bin/webpack"), perm).expect("chmod");
    ws
}

#[test]
fn init_on_packages_linked_by_file_without_workspaces_runs_without_edits() {
    let ws = file_links();
    // Today: "the directory is the one project" and a placeholder command.
    let out = ws.prova(["init"]).run();
    out.assert_code(0).assert_stdout_contains("3 packages");
    let config = ws.read("prova.toml");
    assert!(config.contains("projects = [\"client\", \"server\", \"shared\"]"), "{config}");
    let run = ws.prova(["run", "build", "--all", "--json"]).run();
    run.assert_code(0);
    assert_eq!(ran(&run), ["client#build", "server#build", "shared#build"], "{run}");
    assert!(ws.exists("shared/tsconfig.tsbuildinfo") && ws.exists("client/dist/main.js"));
    // webpack's reads are unknown: every file of client but its outputs is an input of its
    // build (an input an output can match is a config error).
    let own = ws.read("client/prova.toml");
    assert!(own.contains("inputs = [\"**\", \"!dist/**\"]"), "{own}");
    ws.write(
        "client/webpack.config.js",
        "module.exports = { entry: './source/index.tsx', mode: 'x' };\n",
    );
    let out = ws.prova(["run", "build", "--all", "--json"]).run();
    assert_eq!(ran(&out), ["client#build"], "{out}");
    // A leaf edit re-runs the leaf alone.
    ws.write("server/source/main.ts", "import { id } from 'shared';\nexport const s = id;\n");
    let out = ws.prova(["run", "build", "--all", "--json"]).run();
    assert_eq!(ran(&out), ["server#build"], "{out}");
    // Each package's own installed tree is keyed (no root package.json: prova would assume
    // none): an install in server re-runs server, not a stale hit.
    ws.write("server/node_modules/express/index.js", "module.exports = 5;\n");
    let out = ws.prova(["run", "build", "--all", "--json"]).run();
    assert_eq!(ran(&out), ["server#build"], "{out}");
}

#[test]
fn a_file_link_under_another_name_still_orders_the_builds() {
    // `"common": "file:../shared"` where shared's package.json says `"name": "shared"`:
    // the dependency names no project, its path does.
    let ws = file_links();
    let server = ws.read("server/package.json");
    ws.write(
        "server/package.json",
        &server.replace(r#""shared": "file:../shared""#, r#""common": "file:../shared""#),
    );
    ws.write("server/source/main.ts", "export const s = 1;\n");
    ws.prova(["init"]).run().assert_code(0);
    let own = ws.read("server/prova.toml");
    assert!(own.contains("deps = [\"shared\"]"), "{own}");
    let run = ws.prova(["run", "server#build", "--json"]).run();
    run.assert_code(0);
    assert_eq!(ran(&run), ["server#build", "shared#build"], "{run}");
}

/// `prova ls` on `ws` after `prova init` there: exit 0, every config init wrote loads.
#[track_caller]
fn init_loads(name: &str, ws: &TempWorkspace) {
    let init = ws.prova(["init", "--force"]).run();
    init.assert_code(0);
    let ls = ws.prova(["ls"]).run();
    assert_eq!(ls.code(), Some(0), "{name}: the config init wrote does not load\n{init}\n{ls}");
}

#[test]
fn every_config_init_writes_loads() {
    // An output a declared input can match is a config error (issue 27): init leaves each
    // output its reads could match out of them, as tsc leaves its outDir out of `include`.
    init_loads("pnpm nested", &pnpm_nested());
    init_loads("npm workspaces", &npm_workspaces());
    init_loads("file links", &file_links());
    // A project whose outDir is not the others' (its own outputs, its own exclusion), and
    // one whose tsconfig has no `include` (tsc's default `**/*`).
    let ws = npm_workspaces();
    ws.write(
        "packages/run/tsconfig.bundle.json",
        r#"{"extends": "../tsconfig.bundle.json", "compilerOptions": {"outDir": "lib"}, "include": ["**/*"]}"#,
    );
    ws.write("packages/core/tsconfig.bundle.json", r#"{"compilerOptions": {"outDir": "dist"}}"#);
    init_loads("npm workspaces, outDir lib", &ws);
    let own = ws.read("packages/run/prova.toml");
    assert!(own.contains("\"!lib/**\"") && !own.contains("\"!dist/**\""), "{own}");
    assert!(
        !ws.read("prova.toml").contains("\"!lib/**\""),
        "a project's own exclusion stays its own"
    );
    // A build prova cannot read (webpack): every file of the project but its outputs.
    let ws = file_links();
    ws.write("client/package.json", r#"{"name": "client", "scripts": {"build": "webpack"}}"#);
    init_loads("file links, webpack", &ws);
    for simple in [
        TempWorkspace::new()
            .file("package.json", r#"{"private": true, "workspaces": ["packages/*"]}"#)
            .file("packages/a/package.json", r#"{"name": "a", "scripts": {"build": "tsc"}}"#)
            .file("packages/a/tsconfig.json", r#"{"compilerOptions": {"outDir": "dist"}}"#),
        TempWorkspace::new().file("README", "hi\n"),
        TempWorkspace::new()
            .file("Cargo.toml", "[workspace]\nmembers = [\"crates/*\"]\n")
            .file("crates/x/Cargo.toml", "[package]\nname = \"x\"\nversion = \"0.1.0\"\n"),
    ] {
        init_loads("simple", &simple);
    }
}
