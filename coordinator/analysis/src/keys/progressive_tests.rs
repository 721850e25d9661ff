//! Progressive keys with plain values: which upstream is folded how, when a key is known,
//! and how a pre-run lookup walks the graph level by level.

use std::cell::RefCell;
use std::collections::HashMap;
use std::path::PathBuf;

use prova_protocol::spec::{CommandLine, TaskSpec};
use prova_protocol::{Digest, TaskId};

use super::*;
use crate::cache::Entry;
use crate::keys::{KEY_VERSION, KeyComponents, PlanKeys};
use crate::plan::{PlannedTask, RunPlan, TaskKind};

fn task(name: &str, outputs: &[&str], cacheable: bool, deps: Vec<usize>) -> PlannedTask {
    let id = TaskId::new("p", name);
    let mut spec = TaskSpec::new(id.clone(), "p".to_owned(), CommandLine::Shell("true".into()));
    spec.outputs = outputs.iter().map(|s| (*s).to_owned()).collect();
    PlannedTask {
        id,
        project: usize::MAX,
        kind: TaskKind::Command,
        spec,
        cacheable,
        deps,
        requested: true,
        inputs: vec![],
    }
}

fn components(task: &str) -> KeyComponents {
    KeyComponents {
        version: KEY_VERSION,
        task: task.to_owned(),
        command: "sh:true".into(),
        config: vec![],
        env: vec![],
        inputs: vec![],
        workspace: vec![],
        upstream: vec![],
        upstream_outputs: vec![],
        args: vec![],
        platform: None,
    }
}

/// `gen#build` (outputs) → `lib#build` (outputs) → `app#test` (no outputs) → `app#report`.
fn chain() -> (RunPlan, PlanKeys) {
    let tasks = vec![
        task("gen", &["dist/**"], true, vec![]),
        task("lib", &["lib/**"], true, vec![0]),
        task("test", &[], true, vec![1]),
        task("report", &["out/**"], true, vec![2]),
    ];
    let keys = PlanKeys {
        keys: vec![None; tasks.len()],
        components: tasks.iter().map(|t| components(t.id.as_str())).collect(),
        stamps: vec![Vec::new(); tasks.len()],
        shadows: Vec::new(),
        unfolded: vec![],
        closures: Default::default(),
    };
    (RunPlan { root: PathBuf::from("/ws"), tasks }, keys)
}

fn entry(key: Digest, fingerprint: Digest) -> Entry {
    Entry {
        namespace: "trusted".into(),
        key,
        task: String::new(),
        artifact: None,
        log: None,
        manifest: Vec::new(),
        components: Vec::new(),
        fingerprint: Some(fingerprint),
        duration_ms: 1,
        created_ms: 1,
        last_used_ms: 1,
    }
}

#[test]
fn an_upstream_with_outputs_is_folded_by_its_outputs_cached_or_not() {
    let (plan, _) = chain();
    assert!(folds_outputs(&plan.tasks[0]));
    assert!(!folds_outputs(&plan.tasks[2]), "no declared outputs: folded by key");
    let mut uncached = plan.tasks[0].clone();
    uncached.cacheable = false;
    assert!(folds_outputs(&uncached), "its key says nothing of what it wrote: its bytes do");
}

#[test]
fn before_anything_resolves_only_the_root_is_keyed() {
    let (plan, mut keys) = chain();
    keys.settle_all(&plan, &|_| None);
    assert!(keys.key(0).is_some());
    assert!(keys.key(1).is_none(), "folds gen's outputs: pending");
    assert!(keys.key(2).is_none(), "folds lib's outputs: pending");
    assert!(keys.key(3).is_none(), "folds test's key, itself pending");
}

/// [`chain`] with `lib#build` confined (`sandbox = true`).
fn confined_chain() -> (RunPlan, PlanKeys) {
    let (mut plan, keys) = chain();
    plan.tasks[1].spec.proof.sandbox = true;
    (plan, keys)
}

/// `gen` with an edited source: another key, the same outputs.
fn edited_gen(keys: &mut PlanKeys) {
    keys.components[0].inputs.push(crate::keys::InputFile {
        path: "gen/src.txt".into(),
        kind: crate::keys::InputKind::File,
        exec: false,
        digest: Digest::of(b"edited"),
    });
}

#[test]
fn a_confined_dependent_keeps_its_key_when_its_upstreams_bytes_hold_and_one_byte_moves_it() {
    let (plan, mut keys) = confined_chain();
    keys.settle_all(&plan, &|_| None);
    let fp = Digest::of(b"gen outputs");
    let k1 = keys.settle(&plan, 1, &|_| Some(fp)).expect("keyed");
    assert_eq!(keys.components[1].upstream_outputs, vec![("p#gen".to_owned(), fp)]);
    assert!(keys.components[1].upstream.is_empty(), "gen is folded by its bytes alone");
    // gen re-ran with another key but the same bytes: lib's key is the same.
    let (plan2, mut keys2) = confined_chain();
    edited_gen(&mut keys2);
    keys2.settle_all(&plan2, &|_| None);
    assert_ne!(keys2.key(0), keys.key(0), "gen's own key moved");
    assert_eq!(keys2.settle(&plan2, 1, &|_| Some(fp)), Some(k1), "early cutoff");
    let other = Digest::of(b"gen outputs, one byte more");
    assert_ne!(keys2.settle(&plan2, 1, &|_| Some(other)), Some(k1));
}

#[test]
fn a_dependent_that_is_not_confined_folds_its_upstreams_keys_and_bytes() {
    let (plan, mut keys) = chain();
    keys.settle_all(&plan, &|_| None);
    let fp = Digest::of(b"gen outputs");
    let k1 = keys.settle(&plan, 1, &|_| Some(fp)).expect("keyed");
    let gen_key = keys.key(0).expect("gen keyed");
    assert_eq!(keys.components[1].upstream, vec![("p#gen".to_owned(), gen_key)]);
    assert_eq!(keys.components[1].upstream_outputs, vec![("p#gen".to_owned(), fp)]);
    // In place lib can read gen's sources: gen's edit moves lib though its bytes held.
    let (plan2, mut keys2) = chain();
    edited_gen(&mut keys2);
    keys2.settle_all(&plan2, &|_| None);
    let k2 = keys2.settle(&plan2, 1, &|_| Some(fp)).expect("keyed");
    assert_ne!(k2, k1, "no cutoff for what can read its upstream's sources");
    // What moved is named: only gen's key, its bytes held.
    assert_eq!(blocked_cutoff(&keys2.components[1], &keys.components[1]), ["p#gen"]);
    let mut now = keys2.components[1].clone();
    now.inputs.push(keys2.components[0].inputs[0].clone());
    assert!(blocked_cutoff(&now, &keys.components[1]).is_empty(), "its own input moved too");
    // ...and the bytes still count: the same gen key with other bytes (an uncached or
    // nondeterministic upstream) moves it too.
    assert_ne!(keys.settle(&plan, 1, &|_| Some(Digest::of(b"other bytes"))), Some(k1));
    assert!(blocked_cutoff(&keys2.components[1], &keys.components[1]).is_empty(), "bytes moved");
}

#[test]
fn every_upstream_key_is_folded_directly_or_through_a_dependency_unless_confined() {
    let (plan, mut keys) = chain();
    keys.settle_all(&plan, &|_| None);
    let fps = |d: usize| Some(Digest::of(format!("outputs of {d}").as_bytes()));
    keys.settle(&plan, 1, &fps);
    let test = keys.settle(&plan, 2, &fps).expect("test keyed");
    let report = keys.settle(&plan, 3, &fps).expect("report keyed");
    // What test could read, report can: gen's and lib's outputs are folded too; their keys
    // through test's, which folds lib's, which folds gen's.
    let names: Vec<&str> =
        keys.components[3].upstream_outputs.iter().map(|(t, _)| t.as_str()).collect();
    assert_eq!(names, ["p#gen", "p#lib"]);
    assert_eq!(keys.components[3].upstream, vec![("p#test".to_owned(), test)]);
    assert_ne!(report, test);
    // Confined, report folds the key of its direct dependency without outputs only.
    let (mut plan, mut keys) = chain();
    plan.tasks[3].spec.proof.sandbox = true;
    keys.settle_all(&plan, &fps);
    assert_eq!(keys.components[3].upstream, vec![("p#test".to_owned(), keys.key(2).expect("k"))]);
}

#[test]
fn a_confined_dependency_does_not_hide_its_upstreams_keys_from_a_dependent_that_is_not() {
    // gen → lib (confined: its key folds gen's bytes, not gen's key) → app (not confined:
    // in place it can read gen's sources).
    let tasks = vec![
        task("gen", &["dist/**"], true, vec![]),
        task("lib", &["lib/**"], true, vec![0]),
        task("app", &["app/**"], true, vec![1]),
    ];
    let mut plan = RunPlan { root: PathBuf::from("/ws"), tasks };
    plan.tasks[1].spec.proof.sandbox = true;
    let fps = |_: usize| Some(Digest::of(b"same bytes"));
    let keyed = |edit: bool| {
        let mut keys = PlanKeys {
            keys: vec![None; 3],
            components: plan.tasks.iter().map(|t| components(t.id.as_str())).collect(),
            stamps: vec![Vec::new(); 3],
            shadows: Vec::new(),
            unfolded: vec![],
            closures: Default::default(),
        };
        if edit {
            edited_gen(&mut keys);
        }
        keys.settle_all(&plan, &fps);
        keys
    };
    let (before, after) = (keyed(false), keyed(true));
    assert_eq!(before.key(1), after.key(1), "lib is cut off");
    let names: Vec<&str> = after.components[2].upstream.iter().map(|(t, _)| t.as_str()).collect();
    assert_eq!(names, ["p#gen", "p#lib"]);
    assert_ne!(before.key(2), after.key(2), "app folds gen's key itself");
}

#[test]
fn a_transitive_upstreams_bytes_move_the_key_even_when_the_direct_ones_hold() {
    // gen → lib → app, all with outputs: app's exec root holds gen's artifact too, so gen's
    // bytes are part of what app can read, confined (as here) or not.
    let mut tasks = vec![
        task("gen", &["dist/**"], true, vec![]),
        task("lib", &["lib/**"], true, vec![0]),
        task("app", &["app/**"], true, vec![1]),
    ];
    tasks[2].spec.proof.sandbox = true;
    let mut keys = PlanKeys {
        keys: vec![None; 3],
        components: tasks.iter().map(|t| components(t.id.as_str())).collect(),
        stamps: vec![Vec::new(); 3],
        shadows: Vec::new(),
        unfolded: vec![],
        closures: Default::default(),
    };
    let plan = RunPlan { root: PathBuf::from("/ws"), tasks };
    keys.settle_all(&plan, &|_| None);
    let lib_fp = Digest::of(b"lib");
    let a = keys.settle(&plan, 2, &|d| Some(if d == 1 { lib_fp } else { Digest::of(b"gen 1") }));
    let b = keys.settle(&plan, 2, &|d| Some(if d == 1 { lib_fp } else { Digest::of(b"gen 2") }));
    assert!(a.is_some() && b.is_some());
    assert_ne!(a, b, "gen's bytes moved: app's key moves though lib's did not");
    assert_eq!(keys.settle(&plan, 2, &|d| if d == 1 { Some(lib_fp) } else { None }), None);
}

/// gen → lib → app, all with outputs, app confined and `upstream_outputs = "direct"`.
fn direct_chain() -> (RunPlan, PlanKeys) {
    let mut tasks = vec![
        task("gen", &["dist/**"], true, vec![]),
        task("lib", &["lib/**"], true, vec![0]),
        task("app", &["app/**"], true, vec![1]),
    ];
    tasks[2].spec.proof.sandbox = true;
    tasks[2].spec.proof.direct_upstreams = true;
    let keys = plain_keys(&tasks);
    (RunPlan { root: PathBuf::from("/ws"), tasks }, keys)
}

fn plain_keys(tasks: &[PlannedTask]) -> PlanKeys {
    PlanKeys {
        keys: vec![None; tasks.len()],
        components: tasks.iter().map(|t| components(t.id.as_str())).collect(),
        stamps: vec![Vec::new(); tasks.len()],
        shadows: Vec::new(),
        unfolded: vec![],
        closures: Default::default(),
    }
}

#[test]
fn under_direct_upstream_outputs_a_transitive_upstream_is_neither_seen_nor_folded() {
    let (plan, mut keys) = direct_chain();
    assert_eq!(exec_root_upstreams(&plan.tasks, 2), [1], "the exec root holds lib's only");
    keys.settle_all(&plan, &|_| None);
    let lib_fp = Digest::of(b"lib");
    let a = keys.settle(&plan, 2, &|d| Some(if d == 1 { lib_fp } else { Digest::of(b"gen 1") }));
    let b = keys.settle(&plan, 2, &|d| Some(if d == 1 { lib_fp } else { Digest::of(b"gen 2") }));
    assert!(a.is_some());
    assert_eq!(a, b, "gen's bytes moved, lib's held: app is cut off");
    assert_eq!(keys.components[2].upstream_outputs, vec![("p#lib".to_owned(), lib_fp)]);
    // It waits on lib alone: gen unresolved does not hold its key back.
    assert_eq!(keys.settle(&plan, 2, &|d| (d == 1).then_some(lib_fp)), a);
    // lib's bytes still move it.
    assert_ne!(keys.settle(&plan, 2, &|_| Some(Digest::of(b"lib 2"))), a);
}

#[test]
fn direct_upstream_outputs_count_only_on_a_confined_task() {
    let (mut plan, mut keys) = direct_chain();
    plan.tasks[2].spec.proof.sandbox = false;
    assert_eq!(exec_root_upstreams(&plan.tasks, 2), [0, 1]);
    keys.settle_all(&plan, &|d| Some(Digest::of(&[d as u8])));
    let names: Vec<&str> =
        keys.components[2].upstream_outputs.iter().map(|(t, _)| t.as_str()).collect();
    assert_eq!(names, ["p#gen", "p#lib"]);
}

#[test]
fn a_group_among_direct_dependencies_is_seen_through() {
    // gen → all (a group of gen) → app (direct); base → gen: app sees gen's outputs through
    // the group, not base's.
    let mut tasks = vec![
        task("base", &["base/**"], true, vec![]),
        task("gen", &["dist/**"], true, vec![0]),
        task("all", &[], false, vec![1]),
        task("app", &["app/**"], true, vec![2]),
    ];
    tasks[2].kind = TaskKind::Group;
    tasks[3].spec.proof.sandbox = true;
    tasks[3].spec.proof.direct_upstreams = true;
    assert_eq!(exec_root_upstreams(&tasks, 3), [1, 2]);
    let mut keys = plain_keys(&tasks);
    let plan = RunPlan { root: PathBuf::from("/ws"), tasks };
    keys.settle_all(&plan, &|d| Some(Digest::of(&[d as u8])));
    let names: Vec<&str> =
        keys.components[3].upstream_outputs.iter().map(|(t, _)| t.as_str()).collect();
    assert_eq!(names, ["p#gen"]);
    assert!(keys.components[3].upstream.is_empty(), "not the group's key: it folds base's");
    // base's bytes move; gen's hold: app keeps its key.
    let before = keys.key(3);
    keys.settle_all(&plan, &|d| Some(Digest::of(&[d as u8 + u8::from(d == 0)])));
    assert_eq!(keys.key(3), before);
}

/// A small deterministic generator (xorshift), for plans of every shape.
struct Rng(u64);

impl Rng {
    fn next(&mut self, below: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % below
    }
}

#[test]
fn a_key_folds_the_outputs_of_exactly_the_upstreams_its_exec_roots_hold() {
    // The soundness of early cutoff under a smaller exec root rests on this: the bytes a
    // task can read are the bytes its key folds. Random DAGs mixing groups, tasks without
    // outputs, confined tasks with either setting, and flags on tasks that are not confined.
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for round in 0..200 {
        let n = 2 + rng.next(14) as usize;
        let mut tasks = Vec::with_capacity(n);
        for i in 0..n {
            let mut deps: Vec<usize> = (0..i).filter(|_| rng.next(3) == 0).collect();
            deps.dedup();
            let outputs: &[&str] = if rng.next(4) == 0 { &[] } else { &["out/**"] };
            let mut t = task(&format!("t{i}"), outputs, true, deps);
            if rng.next(6) == 0 {
                t.kind = TaskKind::Group;
            }
            t.spec.proof.sandbox = rng.next(2) == 0;
            t.spec.proof.direct_upstreams = rng.next(2) == 0;
            tasks.push(t);
        }
        let plan = RunPlan { root: PathBuf::from("/ws"), tasks };
        let closures = closures(&plan);
        for (i, c) in closures.iter().enumerate() {
            let mut folded: Vec<usize> = c.outputs.iter().map(|&d| d as usize).collect();
            folded.sort_unstable();
            let held: Vec<usize> = exec_root_upstreams(&plan.tasks, i)
                .into_iter()
                .filter(|&d| folds_outputs(&plan.tasks[d]))
                .collect();
            assert_eq!(folded, held, "round {round}, task {i}");
        }
    }
}

#[test]
fn an_unresolved_upstream_clears_a_predicted_key() {
    let (plan, mut keys) = chain();
    keys.settle_all(&plan, &|_| None);
    assert!(keys.settle(&plan, 1, &|_| Some(Digest::of(b"x"))).is_some());
    assert_eq!(keys.settle(&plan, 1, &|_| None), None);
    assert_eq!(keys.key(1), None);
}

#[test]
fn presolve_walks_hits_level_by_level_and_stops_at_a_miss() {
    let (plan, mut keys) = chain();
    keys.settle_all(&plan, &|_| None);
    // The cache holds gen's entry, and lib's under the key gen's fingerprint gives it.
    let gen_fp = Digest::of(b"gen outputs");
    let mut probe = keys.clone();
    let lib_key = probe.settle(&plan, 1, &|_| Some(gen_fp)).expect("keyed");
    let store: HashMap<Digest, Entry> = [
        (keys.key(0).expect("root keyed"), entry(keys.key(0).expect("k"), gen_fp)),
        (lib_key, entry(lib_key, Digest::of(b"lib outputs"))),
    ]
    .into_iter()
    .collect();
    let batches = RefCell::new(Vec::new());
    let lookup = |ks: Vec<Digest>| {
        batches.borrow_mut().push(ks.len());
        let found: HashMap<Digest, Entry> =
            ks.iter().filter_map(|k| Some((*k, store.get(k)?.clone()))).collect();
        std::future::ready(Ok::<_, std::convert::Infallible>(found))
    };
    let rt = tokio::runtime::Builder::new_current_thread().build().expect("runtime");
    let hits = rt.block_on(presolve(&plan, &mut keys, lookup)).expect("infallible");
    assert_eq!(keys.key(1), Some(lib_key), "keyed from gen's entry");
    assert!(hits.contains_key(&0) && hits.contains_key(&1));
    // test is keyed from lib's entry and looked up (a miss): report waits on its key.
    assert!(keys.key(2).is_some());
    assert!(!hits.contains_key(&2));
    assert!(keys.key(3).is_some(), "report folds test's key, known now");
    assert_eq!(*batches.borrow(), vec![1, 1, 2], "one batch per level of hits");
}
