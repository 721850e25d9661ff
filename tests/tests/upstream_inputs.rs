//! A task that is not confined folds the key of every upstream, and so the upstreams' inputs
//! and the entry names of their project directories: in place it can read them, and real
//! builds do (found on lerna-lite: `tsc` resolving a project reference lists and reads the
//! referenced package's `src/`). Its exec roots — the inputs proof's, a determinism
//! re-run's, a farm worker's — now hold those inputs and show those names, and the proof
//! counts them as keyed, as they are. Before, every such read was named undeclared, and a
//! farm run failed where the run in place succeeded (or, worse, took another branch).
//! What no key folds stays named: an upstream's README's bytes, and anything of an
//! upstream of a confined task (`sandbox = true`), whose key folds its upstreams' bytes.

use prova_tests::TempWorkspace;
use prova_tests::cluster::Cluster;
use prova_tests::verify::{name, only_verdict, prova, sandbox_or_skip};

/// `lib → app`: lib's build copies its source; app's runs `cmd` (in `app/`), with `extra`
/// task fields.
fn ws(cmd: &str, extra: &str) -> TempWorkspace {
    TempWorkspace::new()
        .file(
            "prova.toml",
            "[workspace]\nprojects = [\"lib\", \"app\"]\n\n[tasks.build]\n\
             command = \"mkdir -p dist && cat src/a.txt > dist/a.txt\"\ndeps = [\"^build\"]\n\
             inputs = [\"src/**\"]\noutputs = [\"dist/**\"]\n",
        )
        .file("lib/src/a.txt", "lib source\n")
        .file("lib/src/deep/b.txt", "lib deep\n")
        .file("lib/README.md", "lib readme\n")
        .file("lib/LICENSE", "MIT\n")
        .file(
            "app/prova.toml",
            &format!(
                "[project]\ndeps = [\"lib\"]\n\n[tasks.build]\ncommand = \"mkdir -p dist && \
                 {cmd}\"\n{extra}"
            ),
        )
        .file("app/src/a.txt", "app\n")
}

/// Reads an upstream's sources, lists its source tree and its project directory, probes for
/// a name absent there: all keyed through lib's key. (A probe of a name that is there is a
/// stat of a file whose bytes nothing keys: named, as in the task's own directory.)
const KEYED: &str = "cat ../lib/src/a.txt ../lib/src/deep/b.txt > dist/src.txt && \
     LC_ALL=C ls ../lib ../lib/src > dist/ls.txt && \
     (test -e ../lib/config.local && echo local || echo none) > dist/probe.txt";

fn verdict(ws: &TempWorkspace, flags: &[&str]) -> (prova_tests::Output, serde_json::Value) {
    let mut args = vec!["run", "build", "--all", "--force", "--json"];
    args.extend(flags);
    let out = prova(ws, args).run();
    let v = only_verdict(&out, "app#build");
    (out, v)
}

#[test]
fn reads_of_an_upstreams_inputs_and_names_are_proven_keyed() {
    if !sandbox_or_skip() {
        return;
    }
    let w = ws(KEYED, "");
    let (out, v) = verdict(&w, &["--verify=inputs"]);
    assert_eq!(name(&v), "proven-complete", "{v}\n{out}");
    // The proof's run saw what a run in place sees.
    assert_eq!(w.read("app/dist/src.txt"), "lib source\nlib deep\n");
    let ls = w.read("app/dist/ls.txt");
    assert!(ls.contains("README.md") && ls.contains("LICENSE") && ls.contains("deep"), "{ls}");
    assert_eq!(w.read("app/dist/probe.txt"), "none\n");

    // And all of it is keyed: an upstream's source edited moves the key, as a name added
    // beside its README does; its README edited does not.
    let word = |w: &TempWorkspace| {
        let out = prova(w, ["run", "build", "--all", "--json"]).run();
        out.assert_code(0);
        out.cache_of("app#build")
    };
    assert_eq!(word(&w), "hit");
    w.write("lib/README.md", "edited\n");
    assert_eq!(word(&w), "hit");
    w.write("lib/NOTES.md", "new\n");
    assert_eq!(word(&w), "saved");
    assert!(w.read("app/dist/ls.txt").contains("NOTES.md"));
    w.write("lib/config.local", "x\n");
    assert_eq!(word(&w), "saved");
    assert_eq!(w.read("app/dist/probe.txt"), "local\n");
    w.write("lib/src/deep/b.txt", "lib deep, edited\n");
    assert_eq!(word(&w), "saved");
    assert_eq!(w.read("app/dist/src.txt"), "lib source\nlib deep, edited\n");
}

#[test]
fn the_bytes_of_an_upstreams_undeclared_file_are_still_named() {
    if !sandbox_or_skip() {
        return;
    }
    for cmd in [
        "cat ../lib/README.md > dist/r.txt",
        "wc -c < ../lib/LICENSE > dist/r.txt",
        "test -e ../lib/LICENSE && echo yes > dist/r.txt",
    ] {
        let w = ws(cmd, "");
        let (out, v) = verdict(&w, &["--verify=inputs"]);
        assert_eq!(name(&v), "undeclared-inputs", "{cmd}\n{out}");
        let paths = v["paths"].to_string();
        assert!(paths.contains("lib/README.md") || paths.contains("lib/LICENSE"), "{v}");
    }
}

#[test]
fn an_upstreams_undeclared_file_read_through_a_link_among_its_outputs_is_named() {
    // lib's outputs hold links out of them: to its README (no key folds its bytes) and to
    // its project directory. Read through them, the README's bytes are read, while the
    // path as written is lib's declared output: the proof passed, and a README edit was
    // served stale. Opens (the kernel's answer) and stats (the root's links followed) alike.
    if !sandbox_or_skip() {
        return;
    }
    let lib = "[tasks.build]\ncommand = \"mkdir -p dist && cat src/a.txt > dist/a.txt && \
               ln -s ../README.md dist/readme && ln -s .. dist/up\"\n";
    for cmd in [
        "cat ../lib/dist/readme > dist/r.txt",
        "wc -c < ../lib/dist/readme > dist/r.txt",
        "test -s ../lib/dist/readme && echo yes > dist/r.txt || echo no > dist/r.txt",
        "cat ../lib/dist/up/README.md > dist/r.txt",
    ] {
        let w = ws(cmd, "").file("lib/prova.toml", lib);
        let (out, v) = verdict(&w, &["--verify=inputs"]);
        assert_eq!(name(&v), "undeclared-inputs", "{cmd}\n{out}");
        assert!(v["paths"].to_string().contains("lib/README.md"), "{cmd}: {v}");
    }
    // Through a link to what lib's key does fold (its sources): keyed, proven complete.
    let keyed = "[tasks.build]\ncommand = \"mkdir -p dist && ln -s ../src/a.txt dist/src\"\n";
    let w = ws("cat ../lib/dist/src > dist/r.txt", "").file("lib/prova.toml", keyed);
    let (out, v) = verdict(&w, &["--verify=inputs"]);
    assert_eq!(name(&v), "proven-complete", "{out}");
}

#[test]
fn a_confined_task_keys_its_upstreams_bytes_only_and_reads_of_their_sources_fail_it() {
    if !sandbox_or_skip() {
        return;
    }
    let w = ws("cat ../lib/src/a.txt > dist/src.txt", "sandbox = true\n");
    let out = prova(&w, ["run", "build", "--all", "--json"]).run();
    out.assert_code(1);
    let note = out.report("app#build")["note"].as_str().unwrap_or_default().to_owned();
    assert!(note.contains("lib/src/a.txt"), "{note}\n{out}");
}

#[test]
fn a_farm_run_reads_an_upstreams_inputs_as_a_run_in_place_does() {
    let local = ws(KEYED, "");
    prova(&local, ["run", "build", "--all", "--json"]).run().assert_code(0);
    let farm = Cluster::builder().workers(1).start();
    let remote = ws(KEYED, "");
    let out = farm.run(&remote, ["build", "--all", "--json"]);
    out.assert_code(0);
    for f in ["app/dist/src.txt", "app/dist/ls.txt", "app/dist/probe.txt"] {
        assert_eq!(remote.read(f), local.read(f), "{f}\n{out}");
    }
}
