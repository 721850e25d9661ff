//! Keys known progressively (early cutoff). A dependent reads what its upstreams produced —
//! direct or transitive: an exec root holds every upstream artifact (unless a confined task
//! asks for its direct dependencies' only, [`exec_root_upstreams`]), and in place the whole
//! workspace is there — so every upstream that declares outputs is folded into a dependent's
//! key by the **fingerprint of its outputs** as this run produced or restored them
//! ([`folds_outputs`]; a `cache = false` upstream's too: its key says nothing of what it
//! wrote). In place a dependent can read more of an upstream than its declared outputs: its
//! sources, a file it writes beside them (a gitignored cache, a tsbuildinfo), the target of a
//! link in its outputs. So unless the dependent is confined ([`trusts_outputs`]), its key
//! also folds the **key** of every upstream (which folds the upstream's inputs; directly, or
//! through a dependency's key that folds it, [`Closure::keys`]): an upstream whose sources
//! moved re-runs it even when its outputs came out byte-identical. A confined
//! dependent (`sandbox = true`: every execution sees only its declared inputs and its
//! upstreams' outputs, and fails on any other read) folds only its upstreams' bytes (and the
//! keys of its direct dependencies without outputs), so an upstream that re-ran with
//! identical bytes leaves it a hit: early cutoff.
//!
//! A key that folds an output fingerprint is known only once that upstream is resolved: a
//! hit names its entry's fingerprint, an execution the fingerprint of what it produced.
//!
//! - [`PlanKeys::settle`]: keys one task from what its upstreams resolved to (sans-IO; the
//!   run actor calls it when it dispatches the task, with this run's fingerprints, so a key
//!   predicted from an entry is recomputed from the bytes the upstream actually has).
//! - [`presolve`]: before a run, keys everything it can by asking the cache level by level
//!   (a hit's fingerprint keys its dependents, which are then looked up in turn): a warm run
//!   learns every key and every hit in as many batches as the graph has levels.
//! - [`blocked_cutoff`]: which upstreams kept their bytes but moved an unconfined
//!   dependent's key (what a run and `prova why` say when it did not cut off).

use std::collections::HashMap;

use prova_protocol::Digest;
use prova_protocol::key::KeyComponents;
use prova_protocol::manifest::OutputManifest;

use super::PlanKeys;
use crate::cache::Entry;
use crate::plan::{
    PlannedTask, RunPlan, TaskKind, direct_only, exec_root_upstreams, held_upstreams,
};

/// Whether a dependent folds `t` by its outputs' fingerprint: `t` runs a command and declares
/// outputs (cached or not: an uncached task's outputs are collected for this). Otherwise its
/// key alone stands for it.
pub fn folds_outputs(t: &PlannedTask) -> bool {
    t.kind == TaskKind::Command && !t.spec.outputs.is_empty()
}

/// Whether `t` can read nothing of its upstreams but their declared outputs, so its key may
/// fold their bytes alone (early cutoff): `sandbox = true`, which runs every execution in an
/// exec root holding only its declared inputs and its upstreams' outputs and fails it on
/// any other read. In place nothing confines a task: it could read an upstream's sources.
pub fn trusts_outputs(t: &PlannedTask) -> bool {
    crate::plan::confined(t)
}

/// The fingerprint of an entry's outputs: the one it was filed with, or its manifest's.
pub fn entry_fingerprint(e: &Entry) -> Option<Digest> {
    e.fingerprint.or_else(|| {
        rmp_serde::from_slice::<OutputManifest>(&e.manifest).ok().map(|m| m.fingerprint())
    })
}

/// The upstreams `node`'s key folds, by node index, each list sorted by task id (the order
/// the key folds them in).
#[derive(Clone, Debug, Default)]
pub struct Closure {
    /// Folded by their output fingerprint: every upstream its exec roots hold
    /// ([`exec_root_upstreams`]: direct or transitive, or under `upstream_outputs =
    /// "direct"` its direct dependencies) that [`folds_outputs`].
    pub outputs: Vec<u32>,
    /// Folded by their key. A task that [`trusts_outputs`]: its direct dependencies that do
    /// not fold outputs (a group among them seen through: it only stands for its deps, and
    /// its own key would fold every upstream below it). Any other: enough upstreams that
    /// every upstream's key is folded, directly or through another's — its direct
    /// dependencies, and the upstreams a confined one among them leaves out of its own key
    /// ([`closures`]).
    pub keys: Vec<u32>,
}

/// Per task, its [`Closure`]. Computed once per plan, in dependency order, by merging the
/// deps' transitive upstreams.
///
/// A key folds its direct dependencies' keys, and each of those folds its own upstreams': a
/// dependent that is not confined needs nothing more — unless a dependency is confined, as
/// its key leaves out the upstreams it folds by their bytes. Those ("uncovered") are folded
/// by key explicitly. So in a workspace with no confined task every key folds just its
/// direct dependencies' keys, as in any task runner, plus the output fingerprints.
fn closures(plan: &RunPlan) -> Vec<Closure> {
    let n = plan.tasks.len();
    // Every upstream, direct or transitive.
    let mut all: Vec<Vec<u32>> = vec![Vec::new(); n];
    // The upstreams whose key a task's key does not fold, directly or through another's.
    let mut uncovered: Vec<Vec<u32>> = vec![Vec::new(); n];
    let mut out: Vec<Closure> = vec![Closure::default(); n];
    let by_id = |v: &mut Vec<u32>| {
        v.sort_by(|&a, &b| {
            plan.tasks[a as usize].id.as_str().cmp(plan.tasks[b as usize].id.as_str())
        });
    };
    for i in super::topo(plan) {
        let deps = &plan.tasks[i].deps;
        let mut up: Vec<u32> = Vec::new();
        for &d in deps {
            up.push(d as u32);
            up.extend_from_slice(&all[d]);
        }
        up.sort_unstable();
        up.dedup();
        // What its exec roots hold: every upstream (`up`), or fewer (`exec_root_upstreams`).
        let visible: Vec<u32> = if direct_only(&plan.tasks[i]) {
            exec_root_upstreams(&plan.tasks, i).into_iter().map(|d| d as u32).collect()
        } else {
            up.clone()
        };
        let mut outputs: Vec<u32> =
            visible.into_iter().filter(|&d| folds_outputs(&plan.tasks[d as usize])).collect();
        let (mut keys, mut left_out): (Vec<u32>, Vec<u32>) = if trusts_outputs(&plan.tasks[i]) {
            let mut keys = Vec::new();
            let mut left_out = Vec::new();
            // A group only stands for its deps: what it groups is folded as if direct.
            let direct = held_upstreams(
                plan.tasks.len(),
                i,
                true,
                |d| &plan.tasks[d].deps,
                |d| plan.tasks[d].kind == TaskKind::Group,
            );
            for d in direct.into_iter().filter(|&d| plan.tasks[d].kind != TaskKind::Group) {
                if folds_outputs(&plan.tasks[d]) {
                    left_out.push(d as u32);
                    left_out.extend_from_slice(&all[d]);
                } else {
                    keys.push(d as u32);
                    left_out.extend_from_slice(&uncovered[d]);
                }
            }
            (keys, left_out)
        } else {
            let mut keys: Vec<u32> = deps.iter().map(|&d| d as u32).collect();
            for &d in deps {
                keys.extend_from_slice(&uncovered[d]);
            }
            (keys, Vec::new())
        };
        keys.sort_unstable();
        keys.dedup();
        left_out.sort_unstable();
        left_out.dedup();
        by_id(&mut outputs);
        by_id(&mut keys);
        out[i] = Closure { outputs, keys };
        all[i] = up;
        uncovered[i] = left_out;
    }
    out
}

/// What `node`'s upstreams resolved to, or `None` while one is unresolved; the current
/// components' lists are reused when nothing moved (the warm path allocates nothing).
enum Upstreams {
    /// As the components hold them already.
    Same,
    /// `(by key, by outputs)`, each sorted by task id.
    New(Vec<(String, Digest)>, Vec<(String, Digest)>),
}

fn upstreams(
    plan: &RunPlan,
    keys: &PlanKeys,
    closure: &Closure,
    node: usize,
    outputs: &dyn Fn(usize) -> Option<Digest>,
) -> Option<Upstreams> {
    // Resolved? (no allocation: most calls before a run answer no, or "as before")
    // Direct deps first: the ones resolved last, so an unresolved one is found at once.
    for &d in &plan.tasks[node].deps {
        if folds_outputs(&plan.tasks[d]) {
            outputs(d)?;
        } else {
            keys.key(d)?;
        }
    }
    let id = |d: u32| plan.tasks[d as usize].id.as_str();
    let c = keys.components.get(node)?;
    let mut same =
        c.upstream.len() == closure.keys.len() && c.upstream_outputs.len() == closure.outputs.len();
    for (j, &d) in closure.keys.iter().enumerate() {
        let k = keys.key(d as usize)?;
        same = same && c.upstream[j].1 == k && c.upstream[j].0 == id(d);
    }
    for (j, &d) in closure.outputs.iter().enumerate() {
        let fp = outputs(d as usize)?;
        same = same && c.upstream_outputs[j].1 == fp && c.upstream_outputs[j].0 == id(d);
    }
    if same {
        return Some(Upstreams::Same);
    }
    let by_key = closure
        .keys
        .iter()
        .filter_map(|&d| Some((id(d).to_owned(), keys.key(d as usize)?)))
        .collect();
    let by_outputs = closure
        .outputs
        .iter()
        .filter_map(|&d| Some((id(d).to_owned(), outputs(d as usize)?)))
        .collect();
    Some(Upstreams::New(by_key, by_outputs))
}

/// The upstreams whose key moved from `old` to `now` while their output fingerprint held —
/// when nothing else moved, so the dependent would have been a hit had its key folded their
/// bytes alone (it was not cut off because it is not confined: [`trusts_outputs`]). Empty
/// when anything else moved too.
pub fn blocked_cutoff(now: &KeyComponents, old: &KeyComponents) -> Vec<String> {
    if now.upstream_outputs != old.upstream_outputs || now.upstream.len() != old.upstream.len() {
        return Vec::new();
    }
    let mut moved = Vec::new();
    for ((t, k), (ot, ok)) in now.upstream.iter().zip(&old.upstream) {
        if t != ot {
            return Vec::new();
        }
        if k != ok {
            // Only an upstream whose bytes the key folds could have been cut off.
            if !now.upstream_outputs.iter().any(|(o, _)| o == t) {
                return Vec::new();
            }
            moved.push(t.clone());
        }
    }
    let rest_same = KeyComponents { upstream: old.upstream.clone(), ..now.clone() } == *old;
    if rest_same { moved } else { Vec::new() }
}

impl PlanKeys {
    fn closures(&self, plan: &RunPlan) -> std::sync::Arc<Vec<Closure>> {
        std::sync::Arc::clone(self.closures.get_or_init(|| closures(plan).into()))
    }

    /// Every task upstream of `node` (direct or transitive) that a dependent folds by
    /// outputs, by node index (`plan` is the plan these keys are of).
    pub fn output_upstreams(&self, plan: &RunPlan, node: usize) -> Vec<usize> {
        let mut v: Vec<usize> = self
            .closures(plan)
            .get(node)
            .map(|c| c.outputs.iter().map(|&d| d as usize).collect())
            .unwrap_or_default();
        v.sort_unstable();
        v
    }

    /// Whether any upstream `node` folds by outputs satisfies `f` (no allocation: asked
    /// once per hit).
    pub fn any_output_upstream(
        &self,
        plan: &RunPlan,
        node: usize,
        f: impl Fn(usize) -> bool,
    ) -> bool {
        self.closures(plan).get(node).is_some_and(|c| c.outputs.iter().any(|&d| f(d as usize)))
    }

    /// The key of `node`, if known.
    pub fn key(&self, node: usize) -> Option<Digest> {
        self.keys.get(node).copied().flatten()
    }

    /// Keys `node` from its upstreams: those folded by key from `self`, those folded by
    /// outputs from `outputs` (the fingerprint each resolved to). Its components are
    /// completed to match. `None` (and the key cleared) while an upstream is unresolved.
    pub fn settle(
        &mut self,
        plan: &RunPlan,
        node: usize,
        outputs: &dyn Fn(usize) -> Option<Digest>,
    ) -> Option<Digest> {
        let closures = self.closures(plan);
        let empty = Closure::default();
        let closure = closures.get(node).unwrap_or(&empty);
        let known = self.key(node);
        match upstreams(plan, self, closure, node, outputs) {
            None => {
                if let Some(k) = self.keys.get_mut(node) {
                    *k = None;
                }
                None
            }
            Some(Upstreams::Same) if known.is_some() => known,
            Some(up) => {
                let c = self.components.get_mut(node)?;
                if let Upstreams::New(by_key, by_outputs) = up {
                    c.upstream = by_key;
                    c.upstream_outputs = by_outputs;
                }
                let k = c.key();
                self.keys[node] = Some(k);
                Some(k)
            }
        }
    }

    /// Keys, in dependency order, every task whose upstreams are resolved (`outputs` as in
    /// [`settle`](Self::settle)); the others stay pending.
    pub fn settle_all(&mut self, plan: &RunPlan, outputs: &dyn Fn(usize) -> Option<Digest>) {
        for i in super::topo(plan) {
            self.settle(plan, i, outputs);
        }
    }
}

/// Keys every task it can before a run and finds their entries: looks up the keyed
/// cacheable tasks in one batch (`lookup`), keys the dependents the hits' fingerprints
/// resolve, looks those up, and so on until nothing new is keyed. Returns the hits by node;
/// tasks downstream of a miss stay pending (keyed when the run resolves their upstreams).
pub async fn presolve<E, F, Fut>(
    plan: &RunPlan,
    keys: &mut PlanKeys,
    mut lookup: F,
) -> Result<HashMap<usize, Entry>, E>
where
    F: FnMut(Vec<Digest>) -> Fut,
    Fut: Future<Output = Result<HashMap<Digest, Entry>, E>>,
{
    let order = super::topo(plan);
    let mut fingerprints: HashMap<usize, Digest> = HashMap::new();
    let mut probed = vec![false; plan.tasks.len()];
    let mut hits = HashMap::new();
    loop {
        for &i in &order {
            if keys.key(i).is_none() {
                keys.settle(plan, i, &|d| fingerprints.get(&d).copied());
            }
        }
        let batch: Vec<(usize, Digest)> = order
            .iter()
            .filter(|&&i| !probed[i] && plan.tasks[i].cacheable)
            .filter_map(|&i| Some((i, keys.key(i)?)))
            .collect();
        if batch.is_empty() {
            return Ok(hits);
        }
        let mut found = lookup(batch.iter().map(|&(_, k)| k).collect()).await?;
        for (i, k) in batch {
            probed[i] = true;
            if let Some(e) = found.remove(&k) {
                if let Some(fp) = entry_fingerprint(&e) {
                    fingerprints.insert(i, fp);
                }
                hits.insert(i, e);
            }
        }
    }
}

#[cfg(test)]
#[path = "progressive_tests.rs"]
mod tests;
