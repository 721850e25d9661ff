//! Keys known progressively (early cutoff). A dependent can only read its upstreams'
//! outputs, so every task upstream of it — direct or transitive: an exec root holds every
//! upstream artifact, and in place the whole workspace is there — that is cached and declares
//! outputs is folded into the dependent's key by the **fingerprint of its outputs**
//! ([`folds_outputs`]); a direct dependency without declared outputs (a test, a group, an
//! uncached task) by its key, which folds its own upstreams in turn. A key that folds an
//! output fingerprint is therefore known only once that upstream is resolved: a hit names its
//! entry's fingerprint, an execution the fingerprint of what it produced.
//!
//! - [`PlanKeys::settle`]: keys one task from what its upstreams resolved to (sans-IO; the
//!   run actor calls it when it dispatches the task, with this run's fingerprints, so a key
//!   predicted from an entry is recomputed from the bytes the upstream actually has).
//! - [`presolve`]: before a run, keys everything it can by asking the cache level by level
//!   (a hit's fingerprint keys its dependents, which are then looked up in turn): a warm run
//!   learns every key and every hit in as many batches as the graph has levels.
//!
//! A dependent whose upstream re-ran with byte-identical outputs keeps its key and hits; one
//! byte of difference moves it.

use std::collections::HashMap;

use prova_protocol::Digest;
use prova_protocol::manifest::OutputManifest;

use super::PlanKeys;
use crate::cache::Entry;
use crate::plan::{PlannedTask, RunPlan, TaskKind};

/// Whether a dependent folds `t` by its outputs' fingerprint: `t` is cached and declares
/// outputs (what it produced is all a dependent can read of it). Otherwise by its key.
pub fn folds_outputs(t: &PlannedTask) -> bool {
    t.cacheable && t.kind == TaskKind::Command && !t.spec.outputs.is_empty()
}

/// The fingerprint of an entry's outputs: the one it was filed with, or its manifest's.
pub fn entry_fingerprint(e: &Entry) -> Option<Digest> {
    e.fingerprint.or_else(|| {
        rmp_serde::from_slice::<OutputManifest>(&e.manifest).ok().map(|m| m.fingerprint())
    })
}

/// Per task, every task upstream of it (direct or transitive) that a dependent folds by
/// outputs — all of their artifacts are readable by it — ordered by task id (the order the
/// key folds them in). Computed once per plan, in dependency order, by merging the deps'.
fn closures(plan: &RunPlan) -> Vec<Vec<u32>> {
    let n = plan.tasks.len();
    let mut out: Vec<Vec<u32>> = vec![Vec::new(); n];
    for i in super::topo(plan) {
        let mut c: Vec<u32> = Vec::new();
        for &d in &plan.tasks[i].deps {
            if folds_outputs(&plan.tasks[d]) {
                c.push(d as u32);
            }
            c.extend_from_slice(&out[d]);
        }
        c.sort_unstable();
        c.dedup();
        out[i] = c;
    }
    for c in &mut out {
        c.sort_by(|&a, &b| {
            plan.tasks[a as usize].id.as_str().cmp(plan.tasks[b as usize].id.as_str())
        });
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
    closure: &[u32],
    node: usize,
    outputs: &dyn Fn(usize) -> Option<Digest>,
) -> Option<Upstreams> {
    let deps = &plan.tasks[node].deps;
    // Resolved? (no allocation: most calls before a run answer no, or "as before")
    // Direct deps first: the ones resolved last, so an unresolved key is found at once.
    let mut by_key_n = 0;
    for &d in deps {
        if folds_outputs(&plan.tasks[d]) {
            outputs(d)?;
        } else {
            keys.key(d)?;
            by_key_n += 1;
        }
    }
    let c = keys.components.get(node)?;
    let mut same = c.upstream.len() == by_key_n && c.upstream_outputs.len() == closure.len();
    for (j, &d) in closure.iter().enumerate() {
        let fp = outputs(d as usize)?;
        same = same
            && c.upstream_outputs[j].1 == fp
            && c.upstream_outputs[j].0 == plan.tasks[d as usize].id.as_str();
    }
    if same {
        let mut by_key: Vec<(&str, Digest)> = deps
            .iter()
            .filter(|&&d| !folds_outputs(&plan.tasks[d]))
            .filter_map(|&d| Some((plan.tasks[d].id.as_str(), keys.key(d)?)))
            .collect();
        by_key.sort();
        if by_key.iter().zip(&c.upstream).all(|(a, b)| a.0 == b.0 && a.1 == b.1) {
            return Some(Upstreams::Same);
        }
    }
    let mut by_key: Vec<(String, Digest)> = deps
        .iter()
        .filter(|&&d| !folds_outputs(&plan.tasks[d]))
        .filter_map(|&d| Some((plan.tasks[d].id.to_string(), keys.key(d)?)))
        .collect();
    by_key.sort();
    let by_outputs = closure
        .iter()
        .filter_map(|&d| Some((plan.tasks[d as usize].id.to_string(), outputs(d as usize)?)))
        .collect();
    Some(Upstreams::New(by_key, by_outputs))
}

impl PlanKeys {
    fn closures(&self, plan: &RunPlan) -> std::sync::Arc<Vec<Vec<u32>>> {
        std::sync::Arc::clone(self.closures.get_or_init(|| closures(plan).into()))
    }

    /// Every task upstream of `node` (direct or transitive) that a dependent folds by
    /// outputs, by node index (`plan` is the plan these keys are of).
    pub fn output_upstreams(&self, plan: &RunPlan, node: usize) -> Vec<usize> {
        let mut v: Vec<usize> = self
            .closures(plan)
            .get(node)
            .map(|c| c.iter().map(|&d| d as usize).collect())
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
        self.closures(plan).get(node).is_some_and(|c| c.iter().any(|&d| f(d as usize)))
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
        let closure = closures.get(node).map_or(&[][..], Vec::as_slice);
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
