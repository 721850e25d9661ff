//! A farm worker's plain exec root shows its task's project directory as a run in place sees
//! it by name (the key folds those names, `entries:<dir>`), and still lets no read of an
//! undeclared file succeed. Before, a plain root showed the declared names only: `ls` with
//! `inputs = ["src/a.txt"]` wrote a shorter listing on the farm than in place, and a
//! `test -e NOTES.md` probe took the other branch — different bytes under one key, served
//! to whoever hit it. Each name the task does not declare is there as a stand-in that lists
//! by name and answers a probe, while any read of its bytes fails, under bubblewrap and
//! without it, as root or not.

use prova_tests::TempWorkspace;
use prova_tests::cluster::{Cluster, Sandbox};
use prova_tests::verify::{name, only_verdict, prova, sandbox_or_skip, task, workspace};

/// The tasks whose bytes depend only on what the key folds: the listing (names and the
/// kinds of directories), existence probes at the project root, an output written at the
/// project root itself (so the directory is writable and its other entries are bound
/// read-only again over it). (task, the file it writes.)
const KEYED: &[(&str, &str)] = &[
    ("ls", "p/out/ls/ls.txt"),
    ("probe", "p/out/probe/p.txt"),
    ("dirs", "p/out/dirs/d.txt"),
    ("top", "p/listing.txt"),
];

fn tasks() -> String {
    [
        task("ls", "mkdir -p out/ls && LC_ALL=C ls > out/ls/ls.txt", &["out/ls/**"]),
        task(
            "probe",
            "mkdir -p out/probe && { test -e NOTES.md && echo notes || echo none; test -e LICENSE && echo license || echo nolicense; test -d docs && echo docs || echo nodocs; test -e absent.txt && echo absent || echo noabsent; } > out/probe/p.txt",
            &["out/probe/**"],
        ),
        task(
            "dirs",
            "mkdir -p out/dirs && for e in *; do test -d $e && echo $e; done > out/dirs/d.txt",
            &["out/dirs/**"],
        ),
        task("top", "LC_ALL=C ls > listing.txt", &["listing.txt"]),
        // Reads of an undeclared file's bytes: each must fail where the file is not shipped.
        task("cat", "mkdir -p out/cat && cat NOTES.md > out/cat/n.txt", &["out/cat/**"]),
        task("count", "mkdir -p out/count && wc -c < LICENSE > out/count/c.txt", &["out/count/**"]),
        task("head", "mkdir -p out/head && head -c 3 NOTES.md > out/head/h.txt", &["out/head/**"]),
        task("intop", "cat NOTES.md > listing2.txt", &["listing2.txt"]),
    ]
    .concat()
}

fn ws() -> TempWorkspace {
    workspace(&tasks())
        .file("p/NOTES.md", "notes\n")
        .file("p/LICENSE", "MIT\n")
        .file("p/docs/a.md", "a\n")
}

const READS: &[&str] = &["cat", "count", "head", "intop"];

/// What a run in place writes for each keyed task, run alone in a workspace of its own (a
/// sibling's outputs come and go in place, and no exec root holds them).
fn in_place() -> Vec<String> {
    KEYED
        .iter()
        .map(|(t, f)| {
            let local = ws();
            prova(&local, ["run", t, "--all", "--json"]).run().assert_code(0);
            local.read(f)
        })
        .collect()
}

fn on_farm(sandbox: Sandbox) {
    let expected = in_place();
    // What the test relies on: the listing names the undeclared entries.
    assert!(expected[0].contains("NOTES.md") && expected[0].contains("docs"), "{expected:?}");
    let farm = Cluster::builder().workers(1).sandbox(sandbox).start();
    let remote = ws();
    let mut args: Vec<&str> = KEYED.iter().map(|(t, _)| *t).collect();
    args.extend(READS);
    args.extend(["--all", "--continue", "--json"]);
    let out = farm.run(&remote, args);
    for (i, (t, file)) in KEYED.iter().enumerate() {
        let id = format!("p#{t}");
        assert_eq!(out.status_of(&id), "succeeded", "{id}\n{out}");
        assert_eq!(remote.read(file), expected[i], "{id}: the farm's bytes vs in place\n{out}");
    }
    for t in READS {
        let id = format!("p#{t}");
        assert_eq!(out.status_of(&id), "failed", "{id} read bytes the farm was not sent\n{out}");
    }
    // Nothing of a failed read came back.
    assert!(!remote.path("p/out/cat").exists() && !remote.path("p/listing2.txt").exists());
}

#[test]
fn a_plain_farm_root_lists_and_probes_what_the_workspace_shows_under_bubblewrap() {
    on_farm(Sandbox::Bwrap);
}

#[test]
fn a_plain_farm_root_lists_and_probes_what_the_workspace_shows_without_a_sandbox() {
    on_farm(Sandbox::None);
}

#[test]
fn a_farms_determinism_rerun_agrees_with_the_plain_run_it_checks() {
    // The re-run's root shows the names too (as empty files: its outputs are compared,
    // never saved); before, it did and the plain run's did not, so every listing was judged
    // nondeterministic on the farm and deterministic in place.
    if !sandbox_or_skip() {
        return;
    }
    let farm = Cluster::builder().workers(2).start();
    let remote = ws();
    let mut args: Vec<&str> = KEYED.iter().map(|(t, _)| *t).collect();
    args.extend(["--all", "--force", "--verify=determinism", "--json"]);
    let out = farm.run(&remote, args);
    out.assert_code(0);
    for (t, _) in KEYED {
        let v = only_verdict(&out, &format!("p#{t}"));
        assert_eq!(name(&v), "proven-deterministic", "p#{t}\n{out}");
    }
}
