//! The config loader against mutated `prova.toml` files (issue 10: "a fuzz target for the
//! config loader … run for a bounded time in CI"). A small real workspace (a root file and two
//! projects' files) is loaded after thousands of mutations: byte edits, and splices of TOML
//! fragments a careless or hostile config holds (output globs aimed at the workspace, `.git`,
//! another project; odd keys, unbalanced brackets, control characters, huge numbers).
//!
//! Errors are the expected outcome. What must hold for every case: no panic, and every
//! configuration the loader accepts keeps each task's outputs confined — no output pattern can
//! match the workspace's `.git`, any `prova.toml`, the cache dir, or another project's files
//! (what the pre-run clean would otherwise delete). The count is fixed (deterministic seeds).

#![allow(clippy::unwrap_used)] // the test's own fixtures: a failure there is a broken test

use std::fs;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::Path;

use prova_coordinator::workspace::Workspace;
use prova_protocol::globs::PathGlobs;

const CASES: u64 = 600;

const ROOT: &str = "[workspace]\nprojects = [\"libs/*\", \"apps/*\"]\nfingerprint = [\"lock.txt\"]\n\n\
[tasks.build]\ncommand = \"sh build.sh\"\ndeps = [\"^build\"]\ninputs = [\"src/**\"]\n\
outputs = [\"dist/**\"]\n\n[tasks.test]\ncommand = [\"sh\", \"test.sh\"]\ndeps = [\"build\"]\n";

const LIB: &str = "[project]\nname = \"core\"\n\n[tasks.build]\noutputs = [\"dist/**\", \"!dist/keep\"]\n\
env = [\"NODE_ENV\"]\ntimeout = \"1m\"\n";

const APP: &str = "[project]\nname = \"web\"\ndeps = [\"core\"]\n\n[tasks.gen]\ncommand = \"sh gen.sh\"\n\
outputs = [\"src/generated/**\"]\n\n[tasks.build]\ndeps = [\"^build\", \"gen\"]\n";

/// Fragments spliced in at random line starts.
const FRAGMENTS: &[&str] = &[
    "outputs = [\"//**\"]\n",
    "outputs = [\"**\"]\n",
    "outputs = [\"\"]\n",
    "outputs = [\".\"]\n",
    "outputs = [\"/\"]\n",
    "outputs = [\"//\"]\n",
    "outputs = [\"*\"]\n",
    "outputs = [\"//.git/**\"]\n",
    "outputs = [\"//prova.toml\"]\n",
    "outputs = [\"//libs/core/src/**\"]\n",
    "outputs = [\"//apps/web/**\"]\n",
    "outputs = [\"{dist,.git}/**\"]\n",
    "outputs = [\"//[.]git/**\"]\n",
    "outputs = [\"**/prova.toml\"]\n",
    "outputs = [\"//.prova/**\"]\n",
    "outputs = [\"*/**\"]\n",
    "outputs = [\"../x/**\"]\n",
    "outputs = [\"//*/**\"]\n",
    "outputs = [\"//{libs,apps}/**\"]\n",
    "outputs = [\"dist/**\", \"!**\", \"//**\"]\n",
    "[tasks.x]\ncommand = \"true\"\n",
    "[tasks.build]\n",
    "deps = [\"^\", \"#\", \"a#b#c\"]\n",
    "timeout = \"-1s\"\n",
    "retries = 18446744073709551615\n",
    "projects = [\"**\"]\n",
    "[workspace]\n",
    "[project]\nname = \"core\"\n",
    "env = [\"\\u0000\"]\n",
    "labels = { a = 1 }\n",
    "command = []\n",
    "\"\n",
    "[[tasks]]\n",
    "ready_when = \"(\"\n",
    "persistent = true\ncache = true\n",
    // Outputs against inputs (issue 27): none may be able to match a declared input of a
    // task that does not depend on the producer.
    "inputs = [\"dist/**\"]\n",
    "inputs = [\"**/*\", \"!dist/**\"]\n",
    "inputs = [\"**/*.ts\"]\n",
    "inputs = [\"//libs/core/dist/**\"]\n",
    "inputs = [\"//apps/web/src/**\"]\n",
    "outputs = [\"src/**\"]\n",
    "outputs = [\"src/index.ts\"]\n",
    "outputs = [\"//lock.txt\"]\n",
    "deps = [\"gen\"]\n",
    "[tasks.gen]\ncommand = \"true\"\noutputs = [\"gen/**\"]\n",
];

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

fn mutate(rng: &mut Rng, text: &str) -> String {
    let mut b = text.as_bytes().to_vec();
    match rng.below(4) {
        0 => {
            let i = rng.below(b.len());
            b[i] = [b'"', b'[', b']', b'=', b'\n', b'#', b'\\', 0, b'*', b'/'][rng.below(10)];
        }
        1 => b.truncate(rng.below(b.len())),
        _ => {
            let starts: Vec<usize> = std::iter::once(0)
                .chain(b.iter().enumerate().filter(|(_, c)| **c == b'\n').map(|(i, _)| i + 1))
                .filter(|i| *i <= b.len())
                .collect();
            let at = starts[rng.below(starts.len())];
            let frag = FRAGMENTS[rng.below(FRAGMENTS.len())].as_bytes();
            b.splice(at..at, frag.iter().copied());
        }
    }
    String::from_utf8_lossy(&b).into_owned()
}

fn write_workspace(root: &Path, files: [&str; 3]) {
    for (rel, text) in [
        ("prova.toml", files[0]),
        ("libs/core/prova.toml", files[1]),
        ("apps/web/prova.toml", files[2]),
    ] {
        let path = root.join(rel);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, text).unwrap();
    }
    fs::create_dir_all(root.join(".git/hooks")).unwrap();
    fs::create_dir_all(root.join("libs/core/src")).unwrap();
    fs::create_dir_all(root.join("apps/web/src")).unwrap();
}

/// Paths no accepted output pattern of project `dir` may match.
fn forbidden(ws: &Workspace, dir: &str) -> Vec<String> {
    let mut paths = vec![
        ".git".to_owned(),
        ".git/hooks/pre-commit".to_owned(),
        ".git/config".to_owned(),
        "prova.toml".to_owned(),
        ".prova/cache/index.sqlite".to_owned(),
    ];
    for p in &ws.projects {
        let join =
            |rel: &str| if p.dir.is_empty() { rel.to_owned() } else { format!("{}/{rel}", p.dir) };
        paths.push(join("prova.toml"));
        if p.dir != dir {
            paths.push(join("src/index.ts"));
            paths.push(join("package.json"));
        }
    }
    paths
}

/// Paths an output and a declared input might share.
fn shared_candidates(ws: &Workspace) -> Vec<String> {
    let mut paths = vec!["lock.txt".to_owned(), "x.ts".to_owned()];
    for p in &ws.projects {
        for rel in [
            "src/index.ts",
            "src/a.ts",
            "src/generated/x.ts",
            "dist/a.js",
            "dist/keep",
            "dist/a.d.ts",
            "gen/x.ts",
            "lock.txt",
            "a.ts",
        ] {
            paths.push(if p.dir.is_empty() { rel.to_owned() } else { format!("{}/{rel}", p.dir) });
        }
    }
    paths
}

/// No output of an accepted config matches a declared input of a task that does not depend
/// on its producer, nor a `[workspace]` input (issue 27).
fn check_no_overlap(ws: &Workspace, case: &str) {
    let Ok(graph) = prova_coordinator::graph::build_graph(ws) else { return };
    let upstream = |n: usize| {
        let mut seen = std::collections::HashSet::new();
        let mut stack = graph.nodes[n].deps.clone();
        while let Some(d) = stack.pop() {
            if seen.insert(d) {
                stack.extend(graph.nodes[d].deps.iter().copied());
            }
        }
        seen
    };
    let everyone: Vec<PathGlobs> = [&ws.settings.inputs, &ws.settings.fingerprint]
        .into_iter()
        .filter_map(|l| PathGlobs::new("", l).ok())
        .collect();
    let paths = shared_candidates(ws);
    for (a, node) in graph.nodes.iter().enumerate() {
        let p = &ws.projects[node.project];
        let Some(task) = p.tasks.get(&node.name) else { continue };
        let Ok(outs) = PathGlobs::new(&p.dir, &task.outputs) else { continue };
        for path in paths.iter().filter(|x| outs.includes_match(x)) {
            for g in &everyone {
                assert!(
                    !g.is_match(path),
                    "{case}: {} writes `{path}`, a [workspace] input",
                    node.id
                );
            }
            for (b, reader) in graph.nodes.iter().enumerate() {
                let q = &ws.projects[reader.project];
                let Some(list) = q.tasks.get(&reader.name).and_then(|t| t.inputs.as_ref()) else {
                    continue;
                };
                let Ok(ins) = PathGlobs::new(&q.dir, list) else { continue };
                if ins.is_match(path) && !upstream(b).contains(&a) {
                    panic!("{case}: {} writes `{path}`, an input of {}", node.id, reader.id);
                }
            }
        }
    }
}

fn check_accepted(ws: &Workspace, case: &str) {
    check_no_overlap(ws, case);
    for p in &ws.projects {
        for (name, task) in &p.tasks {
            if task.outputs.is_empty() {
                continue;
            }
            let Ok(globs) = PathGlobs::new(&p.dir, &task.outputs) else {
                panic!("{case}: accepted outputs of {}#{name} do not compile", p.name)
            };
            for path in forbidden(ws, &p.dir) {
                assert!(
                    !globs.is_match(&path),
                    "{case}: accepted outputs {:?} of {}#{name} match `{path}`",
                    task.outputs,
                    p.name
                );
            }
        }
    }
}

fn fuzz(seed: u64) {
    let mut rng = Rng(seed);
    let base = [ROOT, LIB, APP];
    {
        let dir = tempfile::tempdir().unwrap();
        write_workspace(dir.path(), base);
        let ws = Workspace::load(dir.path()).expect("the seed workspace loads");
        check_accepted(&ws, "the seed");
    }
    for i in 0..CASES {
        let mut files = base.map(str::to_owned);
        for _ in 0..=rng.below(3) {
            let f = rng.below(3);
            files[f] = mutate(&mut rng, &files[f]);
        }
        let dir = tempfile::tempdir().unwrap();
        write_workspace(dir.path(), [&files[0], &files[1], &files[2]]);
        let case = format!(
            "case {i} (seed {seed:#x}):\n{}\n---\n{}\n---\n{}",
            files[0], files[1], files[2]
        );
        let loaded = catch_unwind(AssertUnwindSafe(|| Workspace::load(dir.path())));
        match loaded {
            Err(_) => panic!("{case}\nthe loader panicked"),
            Ok(Ok(ws)) => check_accepted(&ws, &case),
            Ok(Err(e)) => {
                // Every refusal says something.
                assert!(!e.to_string().trim().is_empty(), "{case}: an empty error");
            }
        }
    }
}

#[test]
fn mutated_configs_never_panic_and_never_accept_unconfined_outputs() {
    fuzz(0x9e37_79b9_7f4a_7c15);
}

#[test]
fn a_second_seed_of_config_mutations() {
    fuzz(0x5851_f42d_4c95_7f2d);
}
