//! The environment a task starts from.
//!
//! A task never inherits prova's environment: it gets a short baseline of variables that
//! ordinary tools need to work at all, then the variables it declared. The baseline is not
//! part of any cache key (a task that depends on one of these must declare it, and then the
//! declared value is what counts), so the list stays small: each entry is something whose
//! absence breaks common tools, or whose value only shapes presentation.

/// The names taken from the host into every task's environment.
///
/// - `PATH`: where programs are found; without it even `sh -c 'node …'` fails.
/// - `HOME`: tools keep their caches and config there (npm, cargo, git); many refuse to
///   start without it.
/// - `USER`, `LOGNAME`: who is running; some tools (ssh, git, some test runners) look them up
///   and fail when they are missing.
/// - `SHELL`: the user's shell, for tools that spawn one.
/// - `TMPDIR`: where temporary files go; a sandbox or CI machine often moves it.
/// - `LANG`, `LC_ALL`, `LC_CTYPE`: the locale; without them tools fall back to ASCII and
///   mangle UTF-8 file names and messages. Output-affecting, so a determinism re-run perturbs
///   them when undeclared.
/// - `TZ`: the time zone; same reasoning as the locale.
/// - `TERM`, `COLORTERM`, `NO_COLOR`: the terminal's capabilities and colour preference; they
///   change only how output looks.
///
/// Deliberately absent: `CI` (tools change behaviour under it, e.g. test watchers, so a task
/// that cares must declare it) and anything project- or tool-specific.
pub const BASELINE_VARS: &[&str] = &[
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "TMPDIR",
    "LANG",
    "LC_ALL",
    "LC_CTYPE",
    "TZ",
    "TERM",
    "COLORTERM",
    "NO_COLOR",
];

/// `PATH` when the host has none: the usual system directories.
pub const DEFAULT_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// The baseline environment: the host's values for [`BASELINE_VARS`] (in that order; unset
/// ones are left out), with `PATH` defaulting to [`DEFAULT_PATH`]. `host` looks a name up,
/// e.g. `|k| std::env::var(k).ok()`.
pub fn baseline_env(host: impl Fn(&str) -> Option<String>) -> Vec<(String, String)> {
    BASELINE_VARS
        .iter()
        .filter_map(|&name| {
            let value = host(name).or_else(|| (name == "PATH").then(|| DEFAULT_PATH.to_owned()));
            value.map(|v| (name.to_owned(), v))
        })
        .collect()
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

    #[test]
    fn baseline_takes_host_values_in_list_order() {
        let host = |k: &str| match k {
            "TZ" => Some("UTC".to_owned()),
            "HOME" => Some("/home/u".to_owned()),
            "PATH" => Some("/opt/bin".to_owned()),
            "SECRET" => Some("no".to_owned()),
            _ => None,
        };
        assert_eq!(
            baseline_env(host),
            pairs(&[("PATH", "/opt/bin"), ("HOME", "/home/u"), ("TZ", "UTC")])
        );
    }

    #[test]
    fn baseline_path_has_a_default() {
        assert_eq!(baseline_env(|_| None), pairs(&[("PATH", DEFAULT_PATH)]));
    }

    #[test]
    fn baseline_list_has_no_duplicates() {
        let mut names = BASELINE_VARS.to_vec();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), BASELINE_VARS.len());
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
