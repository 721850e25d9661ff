//! An output emptied since the task's last entry is not saved (issue 27). `tsc -b` keeps its
//! state in `tsconfig.tsbuildinfo`, outside its declared outputs: after prova cleaned `dist/`
//! the state still says "up to date", the tool writes nothing and exits 0. Saving that would
//! serve an empty `dist/` from then on. The stand-in below behaves the same way: it copies
//! `src/*.ts` into `dist/` and records a checksum of its sources in `.state`, and does nothing
//! when `.state` matches.

use prova_tests::TempWorkspace;
use prova_tests::cluster::Cluster;

/// A `tsc -b` that trusts its state file over the outputs on disk.
const INCREMENTAL: &str = r#"command = '''
if [ -f .state ] && [ "$(cat src/*.ts | cksum)" = "$(cat .state)" ]; then exit 0; fi
mkdir -p dist && cp src/*.ts dist/
cat src/*.ts | cksum > .state
'''
outputs = ["dist/**"]
"#;

/// The same tool reading a state it does not write: in a farm's exec root a write outside
/// the declared outputs fails the task (`farm_security`), so there the state comes from
/// whoever ran the tool in place.
const READS_STATE: &str = r#"command = '''
if [ -f .state ] && [ "$(cat src/*.ts | cksum)" = "$(cat .state)" ]; then exit 0; fi
mkdir -p dist && cp src/*.ts dist/
'''
outputs = ["dist/**"]
"#;

/// `lib#build` runs [`INCREMENTAL`]; `.state` is gitignored, as a tsbuildinfo often is.
fn ws() -> TempWorkspace {
    ws_running(INCREMENTAL)
}

fn ws_running(build: &str) -> TempWorkspace {
    TempWorkspace::new()
        .file("prova.toml", "[workspace]\nprojects = [\"lib\"]\n")
        .file(".gitignore", ".state\n")
        .file("lib/prova.toml", &format!("[tasks.build]\n{build}"))
        .file("lib/src/a.ts", "export const a = 1;\n")
        .file("lib/src/b.ts", "export const b = 2;\n")
        .file("lib/README.md", "lib\n")
}

fn run(ws: &TempWorkspace, extra: &[&str]) -> prova_tests::Output {
    let mut args = vec!["run", "build", "--all", "--json"];
    args.extend_from_slice(extra);
    let out = ws.prova(args).run();
    out.assert_code(0);
    out
}

#[track_caller]
fn refused(out: &prova_tests::Output) {
    assert_eq!(out.status_of("lib#build"), "succeeded", "{out}");
    let why = out.not_saved_reason("lib#build");
    assert!(
        why.contains("`dist/**`") && why.contains("matched no file") && why.contains("held 2"),
        "{why}"
    );
}

#[test]
fn force_on_an_unchanged_incremental_build_does_not_save_its_empty_outputs() {
    let ws = ws();
    assert_eq!(run(&ws, &[]).cache_of("lib#build"), "saved");
    let forced = run(&ws, &["--force"]);
    refused(&forced);
    // The good entry is still the one served: dist comes back whole.
    let out = run(&ws, &[]);
    assert_eq!(out.cache_of("lib#build"), "hit", "{out}");
    assert_eq!(ws.read("lib/dist/a.ts"), "export const a = 1;\n", "{out}");
    assert!(ws.exists("lib/dist/b.ts"), "{out}");
    // The text summary says why it was not cached.
    let text = ws.prova(["run", "build", "--all", "--force"]).run();
    text.assert_code(0).assert_stdout_contains("not cached: declared output `dist/**`");
}

#[test]
fn an_input_the_tool_does_not_compile_moves_the_key_and_the_emptied_run_is_not_saved() {
    let ws = ws();
    run(&ws, &[]);
    // README is an input (the default: every project file) that the tool ignores: a new
    // key, prova cleans dist, the tool's state says there is nothing to do.
    ws.write("lib/README.md", "lib, documented\n");
    refused(&run(&ws, &[]));
    // Never an empty hit: it runs (and is refused) again until its state is dealt with.
    refused(&run(&ws, &[]));
    std::fs::remove_file(ws.path("lib/.state")).expect("remove the state");
    let out = run(&ws, &[]);
    assert_eq!(out.cache_of("lib#build"), "saved", "{out}");
    assert_eq!(ws.read("lib/dist/b.ts"), "export const b = 2;\n");
}

#[test]
fn an_output_that_never_matched_anything_is_saved_with_a_warning() {
    // An optional output that this task has never produced: not the rule's business.
    let ws = TempWorkspace::new().file("prova.toml", "[workspace]\nprojects = [\"lib\"]\n").file(
        "lib/prova.toml",
        "[tasks.build]\ncommand = \"mkdir -p dist && echo x > dist/x.js\"\n\
             outputs = [\"dist/**\", \"coverage/**\"]\n",
    );
    for flags in [&[][..], &["--force"][..]] {
        let out = run(&ws, flags);
        assert_eq!(out.cache_of("lib#build"), "saved", "{out}");
        let said = out.notices_of("lib#build").join("\n");
        assert!(said.contains("`coverage/**` matched no file"), "{said}");
    }
}

#[test]
fn on_the_farm_an_emptied_output_is_not_saved_either() {
    let farm = Cluster::start(1);
    // Not ignored here: the state is an input, so the farm's exec root holds it.
    let ws = ws_running(READS_STATE).file(".gitignore", "");
    let first = farm.run(&ws, ["build", "--all", "--json"]);
    first.assert_code(0);
    assert_eq!(first.cache_of("lib#build"), "saved", "{first}");
    // Someone ran the tool in place: its state is current and part of the key now.
    let state = std::process::Command::new("sh")
        .args(["-c", "cat src/*.ts | cksum > .state"])
        .current_dir(ws.path("lib"))
        .status()
        .expect("sh");
    assert!(state.success());
    // On the farm a task's outputs come home only through an entry: with none saved, the
    // client fails it, saying why.
    let out = farm.run(&ws, ["build", "--all", "--json"]);
    out.assert_code(1);
    let why = out.not_saved_reason("lib#build");
    assert!(why.contains("`dist/**` matched no file") && why.contains("held 2"), "{why}");
    let note = out.report("lib#build")["note"].as_str().unwrap_or_default().to_owned();
    assert!(note.contains("not brought home") && note.contains("matched no file"), "{out}");
    assert_eq!(ws.read("lib/dist/a.ts"), "export const a = 1;\n", "nothing empty came back");
}
