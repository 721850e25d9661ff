//! The environment a task starts from.
//!
//! A task never inherits prova's environment: it gets a short baseline of variables that
//! ordinary tools need to work at all, then the variables it declared. The baseline is not
//! part of any cache key (a task that depends on one of these must declare it, and then the
//! declared value is what counts), so whatever shapes a task's output in it is **fixed**: the
//! same on every machine, farm worker or developer's laptop, whatever that machine's own
//! environment says ([`FIXED_VARS`]). Only what locates things on a machine — its programs,
//! its user's tool configuration, its temporary space — comes from the host
//! ([`HOST_VARS`]): those differ between machines by design, and a task whose outputs embed
//! them is one the determinism re-run (`USER`) or the cross-machine ledger catches.

pub use prova_protocol::spec::{FIXED_VARS, HOST_VARS};

/// Every name the baseline may hold: [`HOST_VARS`], then [`FIXED_VARS`].
pub fn baseline_names() -> impl Iterator<Item = &'static str> {
    HOST_VARS.iter().copied().chain(FIXED_VARS.iter().map(|(k, _)| *k))
}

/// `PATH` when the host has none: the usual system directories.
pub const DEFAULT_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// The baseline environment: the host's values for [`HOST_VARS`] (in that order; unset ones
/// are left out, `PATH` defaulting to [`DEFAULT_PATH`]), then [`FIXED_VARS`] with their fixed
/// values. `host` looks a name up, e.g. `|k| std::env::var(k).ok()`; it is never asked for a
/// fixed name.
pub fn baseline_env(host: impl Fn(&str) -> Option<String>) -> Vec<(String, String)> {
    let from_host = HOST_VARS.iter().filter_map(|&name| {
        let value = host(name).or_else(|| (name == "PATH").then(|| DEFAULT_PATH.to_owned()));
        value.map(|v| (name.to_owned(), v))
    });
    from_host.chain(FIXED_VARS.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))).collect()
}

/// The baseline with a task's variables laid over it. A task value replaces the baseline's in
/// place; names the baseline lacks follow in the task's order. A name the task gives twice
/// keeps its first position and its last value. `unset` are names the task declares but its
/// client left unset: the baseline's value of such a name is dropped (on a farm worker the
/// baseline is the worker's own environment, and a declared variable is the client's). The
/// result has each name once, so it is the same for the same inputs.
pub fn compose_env(
    baseline: &[(String, String)],
    task_env: &[(String, String)],
    unset: &[String],
) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = Vec::with_capacity(baseline.len() + task_env.len());
    let kept = baseline.iter().filter(|(name, _)| !unset.contains(name));
    for (name, value) in kept.chain(task_env) {
        match env.iter_mut().find(|(n, _)| n == name) {
            Some(slot) => slot.1.clone_from(value),
            None => env.push((name.clone(), value.clone())),
        }
    }
    env
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(v: &[(&str, &str)]) -> Vec<(String, String)> {
        v.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    }

    /// The fixed part of every baseline.
    fn fixed() -> Vec<(String, String)> {
        FIXED_VARS.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    }

    #[test]
    fn baseline_takes_host_values_in_list_order_then_the_fixed_ones() {
        let host = |k: &str| match k {
            "TZ" => Some("Asia/Tokyo".to_owned()),
            "LANG" => Some("ja_JP.UTF-8".to_owned()),
            "LC_ALL" => Some("ja_JP.UTF-8".to_owned()),
            "HOME" => Some("/home/u".to_owned()),
            "PATH" => Some("/opt/bin".to_owned()),
            "SECRET" => Some("no".to_owned()),
            _ => None,
        };
        let mut want = pairs(&[("PATH", "/opt/bin"), ("HOME", "/home/u")]);
        want.extend(fixed());
        assert_eq!(baseline_env(host), want);
    }

    #[test]
    fn two_hosts_in_other_zones_and_locales_give_one_baseline_but_where_things_are() {
        // The worker's own TZ and locale never reach a task that did not declare them.
        let jst = |k: &str| match k {
            "TZ" => Some("Asia/Tokyo".to_owned()),
            "LANG" | "LC_ALL" | "LC_CTYPE" => Some("ja_JP.UTF-8".to_owned()),
            "TERM" => Some("xterm-256color".to_owned()),
            "COLORTERM" => Some("truecolor".to_owned()),
            "SHELL" => Some("/usr/bin/zsh".to_owned()),
            _ => None,
        };
        let utc = |k: &str| (k == "TZ").then(|| "UTC".to_owned());
        assert_eq!(baseline_env(jst), baseline_env(utc));
        let names: Vec<String> = baseline_env(jst).into_iter().map(|(k, _)| k).collect();
        for never in ["LC_ALL", "LC_CTYPE", "COLORTERM", "NO_COLOR"] {
            assert!(!names.iter().any(|n| n == never), "{never} in {names:?}");
        }
    }

    #[test]
    fn baseline_path_has_a_default() {
        let mut want = pairs(&[("PATH", DEFAULT_PATH)]);
        want.extend(fixed());
        assert_eq!(baseline_env(|_| None), want);
    }

    #[test]
    fn baseline_list_has_no_duplicates() {
        let mut names: Vec<&str> = baseline_names().collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), HOST_VARS.len() + FIXED_VARS.len());
    }

    #[test]
    fn task_values_override_in_place_and_new_ones_follow() {
        let base = pairs(&[("PATH", "/bin"), ("HOME", "/h"), ("TZ", "UTC")]);
        let task = pairs(&[("NODE_ENV", "production"), ("TZ", "Europe/Paris"), ("A", "1")]);
        assert_eq!(
            compose_env(&base, &task, &[]),
            pairs(&[
                ("PATH", "/bin"),
                ("HOME", "/h"),
                ("TZ", "Europe/Paris"),
                ("NODE_ENV", "production"),
                ("A", "1"),
            ])
        );
    }

    #[test]
    fn repeated_task_name_keeps_first_position_last_value() {
        let base = pairs(&[("PATH", "/bin")]);
        let task = pairs(&[("A", "1"), ("B", "2"), ("A", "3"), ("PATH", "/x"), ("PATH", "/y")]);
        assert_eq!(
            compose_env(&base, &task, &[]),
            pairs(&[("PATH", "/y"), ("A", "3"), ("B", "2")])
        );
    }

    #[test]
    fn a_declared_name_left_unset_drops_the_baseline_value() {
        let base = pairs(&[("PATH", "/bin"), ("TZ", "Asia/Tokyo"), ("LANG", "ja_JP.UTF-8")]);
        let task = pairs(&[("LANG", "C.UTF-8")]);
        let unset = ["TZ".to_owned(), "HOME".to_owned()];
        assert_eq!(
            compose_env(&base, &task, &unset),
            pairs(&[("PATH", "/bin"), ("LANG", "C.UTF-8")])
        );
    }
}
