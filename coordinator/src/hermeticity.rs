//! The hermeticity report (`prova hermeticity`): from the fingerprint ledger, every key whose
//! executions disagree — two output fingerprints (nondeterministic), success and failure of
//! first runs, or a try that failed before a retry passed with the same key (flaky) — with
//! the workers on each side and the files that differ. A determinism re-run that failed is
//! not flakiness (its environment was perturbed): it is listed apart (`rerun_failed_on`).
//! Fingerprints are of what the determinism proof compares (the ledger's `compared`): a task
//! whose outputs differ only in what its `verify_ignore` leaves out is not reported.

use std::collections::BTreeMap;

use prova_protocol::Digest;
use prova_protocol::manifest::OutputManifest;
use serde::{Deserialize, Serialize};

use crate::cache::{CacheError, Store};

/// The report.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HermeticityReport {
    /// Keys whose executions disagree, newest first.
    pub keys: Vec<KeyReport>,
}

/// One key's executions, grouped by outcome.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyReport {
    /// The key.
    pub key: Digest,
    /// `project#task`.
    pub task: String,
    /// Successful executions by fingerprint.
    pub fingerprints: Vec<FingerprintGroup>,
    /// Workers where a first run failed with this key.
    pub failed_on: Vec<String>,
    /// Workers where a try failed and a retry of the same execution then passed.
    #[serde(default)]
    pub retried_on: Vec<String>,
    /// Tries that failed before a retry passed, over every execution of the key.
    #[serde(default)]
    pub failed_tries: u64,
    /// Workers where a perturbed determinism re-run failed (not flakiness: the environment
    /// differed).
    #[serde(default)]
    pub rerun_failed_on: Vec<String>,
    /// The same key both succeeded and failed in the same kind of environment: first runs
    /// that disagree on success, or a failure turned into a pass by a retry.
    pub flaky: bool,
    /// Two or more fingerprints: its bytes vary.
    pub nondeterministic: bool,
    /// Files that differ between the first two fingerprints.
    pub changed: Vec<String>,
    /// Files only the second has.
    pub added: Vec<String>,
    /// Files only the first has.
    pub removed: Vec<String>,
}

/// The executions that produced one fingerprint.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FingerprintGroup {
    /// The output fingerprint — of what a determinism proof compares: for a task with
    /// `verify_ignore`, of its outputs without the ignored ones.
    pub fingerprint: Digest,
    /// Workers that produced it.
    pub workers: Vec<String>,
    /// How many executions.
    pub executions: usize,
    /// Platforms seen.
    pub platforms: Vec<String>,
}

/// Builds the report from `store`'s ledger (at most `limit` keys).
pub fn report(store: &Store, limit: usize) -> Result<HermeticityReport, CacheError> {
    let mut keys = Vec::new();
    for key in store.disagreeing_keys(limit)? {
        let execs = store.executions_of(&key)?;
        let Some(first) = execs.first() else { continue };
        let mut groups: BTreeMap<Digest, (FingerprintGroup, Option<Vec<u8>>, i64)> =
            BTreeMap::new();
        let mut failed_on = Vec::new();
        let (mut retried_on, mut rerun_failed_on, mut failed_tries) = (Vec::new(), Vec::new(), 0);
        for e in &execs {
            if e.failed_tries > 0 {
                failed_tries += u64::from(e.failed_tries);
                if !retried_on.contains(&e.worker) {
                    retried_on.push(e.worker.clone());
                }
            }
            // What the determinism proof compares: without the task's `verify_ignore`
            // outputs (issue 27), so executions that differ only there agree.
            match (e.ok, e.fingerprint.and(e.compared.or(e.fingerprint))) {
                (true, Some(fp)) => {
                    let g = groups.entry(fp).or_insert_with(|| {
                        let group = FingerprintGroup {
                            fingerprint: fp,
                            workers: Vec::new(),
                            executions: 0,
                            platforms: Vec::new(),
                        };
                        (group, e.manifest.clone(), e.time_ms)
                    });
                    g.0.executions += 1;
                    if !g.0.workers.contains(&e.worker) {
                        g.0.workers.push(e.worker.clone());
                    }
                    if !g.0.platforms.contains(&e.platform) {
                        g.0.platforms.push(e.platform.clone());
                    }
                }
                _ if e.rerun => {
                    if !rerun_failed_on.contains(&e.worker) {
                        rerun_failed_on.push(e.worker.clone());
                    }
                }
                _ => {
                    if !failed_on.contains(&e.worker) {
                        failed_on.push(e.worker.clone());
                    }
                }
            }
        }
        let mut ordered: Vec<(FingerprintGroup, Option<Vec<u8>>, i64)> =
            groups.into_values().collect();
        ordered.sort_by_key(|(_, _, t)| *t);
        let (mut changed, mut added, mut removed) = (Vec::new(), Vec::new(), Vec::new());
        if let [a, b, ..] = ordered.as_slice()
            && let (Some(ma), Some(mb)) = (decode(&a.1), decode(&b.1))
        {
            let d = ma.diff(&mb);
            (changed, added, removed) = (d.changed, d.added, d.removed);
        }
        let nondeterministic = ordered.len() > 1;
        keys.push(KeyReport {
            key,
            task: first.task.clone(),
            flaky: (!failed_on.is_empty() && !ordered.is_empty()) || !retried_on.is_empty(),
            nondeterministic,
            fingerprints: ordered.into_iter().map(|(g, _, _)| g).collect(),
            failed_on,
            retried_on,
            failed_tries,
            rerun_failed_on,
            changed,
            added,
            removed,
        });
    }
    Ok(HermeticityReport { keys })
}

fn decode(bytes: &Option<Vec<u8>>) -> Option<OutputManifest> {
    bytes.as_ref().and_then(|b| rmp_serde::from_slice(b).ok())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::Execution;

    fn exec(worker: &str, full: &[u8], compared: Option<&[u8]>, t: i64) -> Execution {
        Execution {
            key: Digest::of(b"k"),
            task: "p#build".into(),
            worker: worker.into(),
            platform: "linux/x86_64".into(),
            rerun: t > 1,
            ok: true,
            fingerprint: Some(Digest::of(full)),
            compared: compared.map(Digest::of),
            manifest: None,
            artifact: None,
            time_ms: t,
            failed_tries: 0,
        }
    }

    #[test]
    fn outputs_that_differ_only_where_the_proof_ignores_them_are_no_defect() {
        // Issue 27: a `verify_ignore` task proven by `--verify` was reported nondeterministic.
        let dir = tempfile::tempdir().unwrap();
        let mut s = Store::open(dir.path()).unwrap();
        s.record_execution(&exec("w1", b"stamp1", Some(b"c"), 1)).unwrap();
        s.record_execution(&exec("w2", b"stamp2", Some(b"c"), 2)).unwrap();
        assert_eq!(report(&s, 10).unwrap(), HermeticityReport::default());
        // What is compared differing is reported, one group per compared fingerprint.
        s.record_execution(&exec("w3", b"stamp3", Some(b"d"), 3)).unwrap();
        let r = report(&s, 10).unwrap();
        let [k] = r.keys.as_slice() else { panic!("{r:?}") };
        assert!(k.nondeterministic && !k.flaky);
        let groups: Vec<(Digest, usize)> =
            k.fingerprints.iter().map(|g| (g.fingerprint, g.executions)).collect();
        assert_eq!(groups, vec![(Digest::of(b"c"), 2), (Digest::of(b"d"), 1)]);
    }
}
