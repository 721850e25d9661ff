//! Outputs that can match declared inputs are refused at load, where the output is written.

use tempfile::TempDir;

use crate::config::ConfigError;
use crate::workspace::Workspace;

/// A workspace of `files` (path, text) on disk.
fn ws(files: &[(&str, &str)]) -> TempDir {
    let dir = tempfile::tempdir().unwrap();
    for (rel, text) in files {
        let path = dir.path().join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }
    dir
}

fn load(files: &[(&str, &str)]) -> Result<Workspace, ConfigError> {
    let dir = ws(files);
    Workspace::load(dir.path())
}

#[track_caller]
fn refused(files: &[(&str, &str)]) -> String {
    match load(files) {
        Err(e @ ConfigError::OutputOverlapsInput { .. }) => e.to_string(),
        Err(e) => panic!("another error: {e}"),
        Ok(_) => panic!("accepted: {files:?}"),
    }
}

const ROOT: &str = "[workspace]\nprojects = [\"apps/*\", \"libs/*\"]\n";

#[test]
fn an_output_over_the_tasks_own_inputs_is_refused_where_it_is_written() {
    // The three shapes.
    for (outputs, col) in [("\"dist/**\", \"src/**\"", 23), ("\"src\"", 12), ("\"src/a.txt\"", 12)]
    {
        let toml = format!(
            "[tasks.build]\ncommand = \"true\"\ninputs = [\"src/**\"]\noutputs = [{outputs}]\n"
        );
        let why = refused(&[("prova.toml", ROOT), ("apps/web/prova.toml", &toml)]);
        assert!(
            why.starts_with(&format!(
                "apps/web/prova.toml:4:{col}: output `{}` of task `web#build` can match input \
                 `src/**` of task `web#build`",
                outputs.rsplit('"').nth(1).unwrap()
            )),
            "{why}"
        );
        assert!(why.contains("help: "), "{why}");
    }
}

#[test]
fn another_tasks_inputs_count_in_the_project_and_across_projects() {
    // `lint` reads `src/**`; `build` (not its dependency) writes there.
    let t = "[tasks.build]\ncommand = \"true\"\noutputs = [\"src/gen.ts\"]\n\
             [tasks.lint]\ncommand = \"true\"\ninputs = [\"src/**\"]\n";
    let why = refused(&[("prova.toml", ROOT), ("apps/web/prova.toml", t)]);
    assert!(why.contains("input `src/**` of task `web#lint`"), "{why}");
    // A `//` input of another project pointing into this project's outputs.
    let ui = "[tasks.gen]\ncommand = \"true\"\noutputs = [\"types/**\"]\n";
    let web = "[tasks.check]\ncommand = \"true\"\ninputs = [\"//libs/ui/types/*.d.ts\"]\n";
    let why =
        refused(&[("prova.toml", ROOT), ("libs/ui/prova.toml", ui), ("apps/web/prova.toml", web)]);
    assert!(
        why.starts_with("libs/ui/prova.toml:3:12: output `types/**` of task `ui#gen`"),
        "{why}"
    );
    assert!(why.contains("`//libs/ui/types/*.d.ts` of task `web#check`"), "{why}");
    assert!(why.contains("`!//libs/ui/types/**`"), "the help names the exclusion: {why}");
}

#[test]
fn workspace_inputs_and_fingerprint_count() {
    let root = format!("{ROOT}inputs = [\"//types/**\"]\nfingerprint = [\"apps/web/lock.json\"]\n");
    let gen_types = "[tasks.gen]\ncommand = \"true\"\noutputs = [\"//types/gen.d.ts\"]\n";
    let why = refused(&[("prova.toml", &root), ("apps/web/prova.toml", gen_types)]);
    assert!(why.contains("`//types/**` of `[workspace] inputs`"), "{why}");
    let lock = "[tasks.install]\ncommand = \"true\"\noutputs = [\"lock.json\"]\n";
    let why = refused(&[("prova.toml", &root), ("apps/web/prova.toml", lock)]);
    assert!(why.contains("`apps/web/lock.json` of `[workspace] fingerprint`"), "{why}");
    // A workspace-wide default of both is checked in every project it applies to.
    let both = format!(
        "{ROOT}\n[tasks.build]\ncommand = \"true\"\ninputs = [\"**/*.ts\"]\noutputs = [\"src/**\"]\n"
    );
    let why = refused(&[("prova.toml", &both), ("libs/ui/x", "")]);
    assert!(why.starts_with("prova.toml:7:12: output `src/**` of task `ui#build`"), "{why}");
}

#[test]
fn what_does_not_overlap_loads() {
    for t in [
        // The everyday shape.
        "[tasks.build]\ncommand = \"true\"\ninputs = [\"src/**\", \"package.json\"]\noutputs = [\"dist/**\"]\n",
        // Default inputs are every file but the outputs: never an overlap.
        "[tasks.build]\ncommand = \"true\"\noutputs = [\"src/**\"]\n",
        // A wide input that leaves the outputs out.
        "[tasks.build]\ncommand = \"true\"\ninputs = [\"**/*\", \"!dist/**\"]\noutputs = [\"dist/**\"]\n",
        "[tasks.build]\ncommand = \"true\"\ninputs = [\"**/*.ts\", \"!dist\"]\noutputs = [\"dist/*.d.ts\"]\n",
        // A file the task generates among its sources, left out of its inputs.
        "[tasks.build]\ncommand = \"true\"\ninputs = [\"src/**\", \"!src/version.ts\"]\noutputs = [\"src/version.ts\", \"dist/**\"]\n",
        // A reader that depends on the writer may read its outputs.
        "[tasks.codegen]\ncommand = \"true\"\ninputs = [\"schema/**\"]\noutputs = [\"gen/**\"]\n\
         [tasks.build]\ncommand = \"true\"\ndeps = [\"codegen\"]\ninputs = [\"src/**\", \"gen/**\"]\noutputs = [\"dist/**\"]\n\
         [tasks.test]\ncommand = \"true\"\ndeps = [\"build\"]\ninputs = [\"dist/**\", \"gen/*.ts\"]\n",
    ] {
        load(&[("prova.toml", ROOT), ("apps/web/prova.toml", t)])
            .unwrap_or_else(|e| panic!("{t}\nrefused: {e}"));
    }
    // Across projects through `^build`.
    let ui = "[tasks.build]\ncommand = \"true\"\noutputs = [\"dist/**\"]\n";
    let web = "[project]\ndeps = [\"ui\"]\n[tasks.build]\ncommand = \"true\"\ndeps = [\"^build\"]\n\
               inputs = [\"src/**\", \"//libs/ui/dist/**\"]\n";
    load(&[("prova.toml", ROOT), ("libs/ui/prova.toml", ui), ("apps/web/prova.toml", web)])
        .unwrap_or_else(|e| panic!("refused: {e}"));
}

#[test]
fn an_exclusion_only_helps_where_it_applies() {
    // A project-relative exclusion does not narrow a `//` include.
    let t = "[tasks.build]\ncommand = \"true\"\ninputs = [\"//apps/web/**\", \"!dist/**\"]\n\
             outputs = [\"dist/**\"]\n";
    refused(&[("prova.toml", ROOT), ("apps/web/prova.toml", t)]);
    // An exclusion that does not cover the whole output does not either.
    let t = "[tasks.build]\ncommand = \"true\"\ninputs = [\"**/*\", \"!dist/*.js\"]\n\
             outputs = [\"dist/**\"]\n";
    refused(&[("prova.toml", ROOT), ("apps/web/prova.toml", t)]);
    // Nor does an output exclusion make an overlap acceptable.
    let t = "[tasks.build]\ncommand = \"true\"\ninputs = [\"src/**\"]\n\
             outputs = [\"src/**\", \"!src/*.ts\"]\n";
    refused(&[("prova.toml", ROOT), ("apps/web/prova.toml", t)]);
}

#[test]
fn the_reverse_dependency_is_no_excuse() {
    // `build` depends on `gen`, and `gen` reads what `build` writes: `build`'s clean would
    // delete `gen`'s input.
    let t = "[tasks.gen]\ncommand = \"true\"\ninputs = [\"out/**\"]\noutputs = [\"gen/**\"]\n\
             [tasks.build]\ncommand = \"true\"\ndeps = [\"gen\"]\noutputs = [\"out/**\"]\n";
    let why = refused(&[("prova.toml", ROOT), ("apps/web/prova.toml", t)]);
    assert!(why.contains("output `out/**` of task `web#build`"), "{why}");
}

#[test]
fn one_answer_per_input_shape_still_weighs_every_reader_that_declared_it() {
    // Every app declares the same `//libs/core/dist/**` (one class of inputs, judged once
    // per output); the apps that depend on core's build may, the last one may not.
    let core = "[tasks.build]\ncommand = \"true\"\noutputs = [\"dist/**\"]\n";
    let reader = |deps: &str| {
        format!(
            "[project]\ndeps = [{deps}]\n[tasks.build]\ncommand = \"true\"\ndeps = [\"^build\"]\n\
             inputs = [\"//libs/core/dist/**\"]\n"
        )
    };
    let (a, b, c) = (reader("\"core\""), reader("\"core\""), reader(""));
    let files = [
        ("prova.toml", ROOT),
        ("libs/core/prova.toml", core),
        ("apps/a/prova.toml", a.as_str()),
        ("apps/b/prova.toml", b.as_str()),
        ("apps/c/prova.toml", c.as_str()),
    ];
    let why = refused(&files);
    assert!(why.contains("input `//libs/core/dist/**` of task `c#build`"), "{why}");
    // With c depending on core too, every reader is excused.
    let c = reader("\"core\"");
    let mut files = files;
    files[4] = ("apps/c/prova.toml", c.as_str());
    load(&files).expect("every reader depends on the producer");
}

/// A task's outputs (as TOML list items) in `apps/web`, beside `extra` files.
fn web_outputs(
    outputs: &str,
    root: &str,
    extra: &[(&str, &str)],
) -> Result<Workspace, ConfigError> {
    let toml = format!("[tasks.build]\ncommand = \"true\"\noutputs = [{outputs}]\n");
    let mut files = vec![("prova.toml", root), ("apps/web/prova.toml", toml.as_str())];
    files.extend_from_slice(extra);
    load(&files)
}

const PACKAGE_JSON: (&str, &str) = ("package.json", "{\"name\": \"root\", \"private\": true}");

#[test]
fn an_output_inside_an_installed_tree_is_refused_it_would_delete_installed_packages() {
    // With a root package.json the default trees are `node_modules` at the root and in every
    // project: an output there is cleaned before the task runs (the installed packages went)
    // and the tree is an input of the task, so its key would fold its own outputs.
    for outputs in [
        "\"node_modules/**\"",
        "\"node_modules\"",
        "\"node_modules/x\"",
        "\"node_modules/.cache/**\"",
        "\"dist/**\", \"node_modules/.vite/**\"",
        "\"//node_modules/dep/**\"",
        "\"//node_modules\"",
        "\"node_modules/*/dist/**\"",
        "\"node_modules/{a,b}/**\"",
        "\"node_modules/[a-z]*/x\"",
    ] {
        match web_outputs(outputs, ROOT, &[PACKAGE_JSON, ("libs/util/prova.toml", "")]) {
            Err(e @ ConfigError::OutputOverlapsInput { .. }) => {
                let why = e.to_string();
                assert!(why.contains("installed tree"), "{outputs}: {why}");
                assert!(why.contains("[workspace] trees"), "{outputs}: {why}");
            }
            other => panic!("{outputs}: not refused: {other:?}"),
        }
    }
    // Another project's tree is refused first as another project's directory.
    let other = web_outputs(
        "\"//libs/util/node_modules/**\"",
        ROOT,
        &[PACKAGE_JSON, ("libs/util/prova.toml", "")],
    );
    assert!(matches!(other, Err(ConfigError::UnconfinedOutput { .. })), "{other:?}");
    // Next to the trees, not in them: loads.
    for outputs in ["\"dist/**\"", "\"node_modules.txt\"", "\".cache/**\"", "\"nodemodules/**\""] {
        web_outputs(outputs, ROOT, &[PACKAGE_JSON]).unwrap_or_else(|e| panic!("{outputs}: {e}"));
    }
}

#[test]
fn declared_trees_replace_the_default_and_an_output_holding_a_tree_is_refused_too() {
    let root = |trees: &str| format!("{ROOT}trees = [{trees}]\n");
    // Declared trees are checked, globs included; `node_modules` is no longer one.
    let declared = root("\"apps/*/.venv\", \"//vendor/lib\"");
    for (outputs, refused) in [
        ("\".venv/**\"", true),
        ("\".venv/lib/site.py\"", true),
        ("\"//vendor/**\"", true), // holds the tree: cleaning it deletes the tree
        ("\"//vendor/lib/x/**\"", true),
        ("\"node_modules/.cache/**\"", false),
        ("\"//vendor/other/**\"", false),
    ] {
        let got = web_outputs(outputs, &declared, &[PACKAGE_JSON]);
        match (refused, got) {
            (true, Err(e @ ConfigError::OutputOverlapsInput { .. })) => {
                assert!(e.to_string().contains("installed tree"), "{outputs}: {e}");
            }
            (false, Ok(_)) => {}
            (_, other) => panic!("{outputs}: expected refused={refused}, got {other:?}"),
        }
    }
    // `trees = []` turns them off, and without a root package.json there is no default.
    web_outputs("\"node_modules/.cache/**\"", &root(""), &[PACKAGE_JSON]).unwrap();
    web_outputs("\"node_modules/.cache/**\"", ROOT, &[]).unwrap();
}

#[track_caller]
fn outputs_clash(files: &[(&str, &str)]) -> String {
    match load(files) {
        Err(e @ ConfigError::OutputsOverlap { .. }) => e.to_string(),
        Err(e) => panic!("another error: {e}"),
        Ok(_) => panic!("accepted: {files:?}"),
    }
}

#[test]
fn two_tasks_whose_outputs_can_match_one_path_are_refused() {
    // Each task's clean and restore replace everything its outputs match: `bundle`'s clean
    // deleted `build`'s `dist/lib.js`, a hit of `bundle` restored over it, and one that ran
    // beside `build` could cache `build`'s file as its own and later restore a stale copy.
    for (build, bundle) in [
        ("\"dist/**\"", "\"dist/**\""),
        ("\"dist/**\"", "\"dist/bundle.js\""),
        ("\"dist/*.js\"", "\"dist/b*\""),
        ("\"dist\"", "\"dist/types/**\""),
        ("\"dist/**\", \"!dist/*.map\"", "\"dist/types/**\""),
    ] {
        let t = format!(
            "[tasks.build]\ncommand = \"true\"\noutputs = [{build}]\n\
             [tasks.bundle]\ncommand = \"true\"\noutputs = [{bundle}]\n"
        );
        let why = outputs_clash(&[("prova.toml", ROOT), ("apps/web/prova.toml", &t)]);
        assert!(why.starts_with("apps/web/prova.toml:"), "{why}");
        assert!(why.contains("web#build") && why.contains("web#bundle"), "{why}");
        assert!(why.contains("help: "), "{why}");
    }
    // Across projects, through `//` outputs.
    let p = "[tasks.gen]\ncommand = \"true\"\noutputs = [\"//shared/gen/**\"]\n";
    let q = "[tasks.gen]\ncommand = \"true\"\noutputs = [\"//shared/gen/api.ts\"]\n";
    let why = outputs_clash(&[
        ("prova.toml", ROOT),
        ("apps/web/prova.toml", p),
        ("libs/util/prova.toml", q),
    ]);
    assert!(why.contains("web#gen") && why.contains("util#gen"), "{why}");
}

#[test]
fn outputs_split_by_an_exclusion_or_apart_load() {
    for (build, types) in [
        ("\"dist/**\", \"!dist/types/**\"", "\"dist/types/**\""),
        ("\"dist/**\"", "\"build/**\""),
        ("\"dist/*.js\"", "\"dist/*.d.ts\""),
        // One task naming a path twice is its own business.
        ("\"dist/**\", \"dist/a.js\"", "\"types/**\""),
    ] {
        let t = format!(
            "[tasks.build]\ncommand = \"true\"\noutputs = [{build}]\n\
             [tasks.types]\ncommand = \"true\"\noutputs = [{types}]\n"
        );
        load(&[("prova.toml", ROOT), ("apps/web/prova.toml", &t)])
            .unwrap_or_else(|e| panic!("{build} / {types}: {e}"));
    }
}
