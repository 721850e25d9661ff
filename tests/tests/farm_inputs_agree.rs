//! The inputs proof on a farm says what it says locally (issue 27): the same verdict, the
//! same paths, the same suggestions — judged against the client's workspace by the same
//! rules — for lookups of absent files a glob already declares (a compiler probing
//! extensions), absent files nothing declares, directory listings, reads through an
//! installed tree's links into another project, and more paths than a summary names.
//! Every verdict names its paths: the JSON carries all of them, the text the first 50 and
//! how many more.

use prova_tests::TempWorkspace;
use prova_tests::cluster::Cluster;
use prova_tests::monorepo;
use prova_tests::verify::{name, only_verdict, prova, sandbox_or_skip};
use serde_json::Value;

/// The tasks of `packages/p`: (name, command, inputs). Each writes `out/<name>/`.
const TASKS: &[(&str, &str, &str)] = &[
    // 60 absent files under a declared glob, then one undeclared read.
    (
        "probe",
        "for n in $(seq 1 60); do test -e src/gen$n.ts; done; cat conf/extra.txt > out/probe/x.txt",
        "\"src/**\"",
    ),
    // An absent file nothing declares (in `conf/`: the key folds the entry names of the
    // project directory only): the task acts on its absence.
    (
        "absent",
        "(test -e conf/config.local || true) && cp src/a.txt out/absent/a.txt",
        "\"src/**\"",
    ),
    // A listing of a directory holding an undeclared file.
    ("listing", "ls src > out/listing/ls.txt", "\"src/a.txt\""),
    // Through the root tree's workspace link into another project.
    ("link", "cat ../../node_modules/q/notes.txt > out/link/n.txt", "\"src/**\""),
    // Sixty undeclared reads: more than a summary names.
    (
        "many",
        "for n in $(seq 1 60); do cat ../q/many/f$n.txt; done > out/many/all.txt",
        "\"src/**\"",
    ),
    // Reads what it declares.
    ("complete", "cp src/a.txt out/complete/a.txt", "\"src/**\""),
];

fn workspace() -> TempWorkspace {
    let mut toml = String::new();
    for (task, cmd, inputs) in TASKS {
        toml.push_str(&format!(
            "[tasks.{task}]\ncommand = 'mkdir -p out/{task} && {cmd}'\ninputs = [{inputs}]\n\
             outputs = [\"out/{task}/**\"]\n\n"
        ));
    }
    let mut ws = monorepo::root()
        .file("packages/p/package.json", "{ \"name\": \"p\", \"version\": \"1.0.0\" }\n")
        .file("packages/p/prova.toml", &toml)
        .file("packages/p/src/a.txt", "a\n")
        .file("packages/p/src/secret.txt", "not declared\n")
        .file("packages/p/conf/extra.txt", "extra\n")
        .file("packages/q/package.json", "{ \"name\": \"q\", \"version\": \"1.0.0\" }\n")
        .file("packages/q/notes.txt", "q's notes\n");
    for n in 1..=60 {
        ws = ws.file(&format!("packages/q/many/f{n}.txt"), &format!("{n}\n"));
    }
    monorepo::link(&ws, "../packages/p", "node_modules/p");
    monorepo::link(&ws, "../packages/q", "node_modules/q");
    monorepo::git_init(&ws);
    ws
}

/// The parts of an inputs verdict two proofs must agree on.
fn essence(v: &Value) -> Value {
    serde_json::json!({
        "verdict": name(v),
        "paths": v["paths"],
        "more": v["more"],
        "suggest": v["suggest"],
        "advice": v["advice"],
    })
}

fn run_args() -> Vec<&'static str> {
    let mut args: Vec<&str> = vec!["run"];
    args.extend(TASKS.iter().map(|(t, _, _)| *t));
    args.extend(["-p", "p", "--force", "--continue", "--verify=inputs", "--json"]);
    args
}

#[test]
fn the_farms_inputs_verdicts_are_the_local_ones() {
    // Before: the farm named the declared probes' directory in `suggest`, counted them in
    // "and N more", never judged absent undeclared files or listings, and dropped reads
    // through a tree's links — red where local was green, green where it was red.
    if !sandbox_or_skip() {
        return;
    }
    let local_ws = workspace();
    let local = prova(&local_ws, run_args()).run();
    let farm = Cluster::builder().workers(2).start();
    let ws = workspace();
    let mut args = run_args();
    args.remove(0);
    let remote = farm.run_cmd(&ws, &farm.ci_certs(), args).run();
    assert_eq!(remote.code(), local.code(), "local:\n{local}\nfarm:\n{remote}");
    for (task, _, _) in TASKS {
        let id = format!("p#{task}");
        let (l, r) = (only_verdict(&local, &id), only_verdict(&remote, &id));
        assert_eq!(
            essence(&r),
            essence(&l),
            "{id}: farm vs local\nlocal:\n{local}\nfarm:\n{remote}"
        );
    }
    // And what they say.
    let v = |task: &str| essence(&only_verdict(&local, &format!("p#{task}")));
    assert_eq!(v("probe")["paths"], serde_json::json!(["packages/p/conf/extra.txt"]));
    assert_eq!(v("probe")["suggest"], serde_json::json!(["conf/extra.txt"]));
    assert_eq!(v("absent")["paths"], serde_json::json!(["packages/p/conf/config.local"]));
    assert_eq!(v("listing")["paths"], serde_json::json!(["packages/p/src/"]));
    assert_eq!(v("link")["paths"], serde_json::json!(["packages/q/notes.txt"]));
    assert_eq!(v("complete")["verdict"], "proven-complete");
}

#[test]
fn every_verdict_names_its_paths_and_the_json_carries_them_all() {
    if !sandbox_or_skip() {
        return;
    }
    let farm = Cluster::builder().workers(1).start();
    for on_farm in [false, true] {
        let ws = workspace();
        let args = ["many", "-p", "p", "--force", "--verify=inputs"];
        let json = |extra: &[&str]| {
            let mut a: Vec<&str> = args.to_vec();
            a.extend(extra);
            if on_farm {
                farm.run_cmd(&ws, &farm.ci_certs(), a).run()
            } else {
                let mut all = vec!["run"];
                all.extend(a);
                prova(&ws, all).run()
            }
        };
        let out = json(&["--json"]);
        let v = only_verdict(&out, "p#many");
        let paths = v["paths"].as_array().cloned().unwrap_or_default();
        assert_eq!(paths.len(), 60, "farm: {on_farm}: every path in the JSON\n{out}");
        assert_eq!(v["more"], 0, "{v}");
        assert_eq!(v["suggest"], serde_json::json!(["//packages/q/many/**"]), "{v}");
        let text = json(&[]);
        let named = text.stdout.lines().filter(|l| l.contains("packages/q/many/f")).count();
        assert!(named >= 50, "farm: {on_farm}: the first 50 named\n{text}");
        assert!(text.stdout.contains("and 10 more"), "farm: {on_farm}\n{text}");
    }
}
