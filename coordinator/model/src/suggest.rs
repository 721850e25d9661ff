//! "Did you mean …?" for misspelt keys, project names and task names.

/// Jaro-Winkler similarity at or above which a candidate counts as a likely typo.
const MIN_SIMILARITY: f64 = 0.85;

/// The candidate `word` was most likely meant to be, if any is close enough: within a small
/// edit distance (a transposition counts as one edit; the allowance grows with the word, up to
/// two) or very similar by Jaro-Winkler. Comparison ignores ASCII case. Ties go to the
/// earliest candidate, so pass candidates in a stable order.
pub fn suggest<'a>(word: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let word = word.to_ascii_lowercase();
    let allowed_edits = (word.chars().count() / 3).clamp(1, 2);
    let mut best: Option<(usize, f64, &'a str)> = None;
    for cand in candidates {
        let lower = cand.to_ascii_lowercase();
        let edits = strsim::osa_distance(&word, &lower);
        let similarity = strsim::jaro_winkler(&word, &lower);
        if edits > allowed_edits && similarity < MIN_SIMILARITY {
            continue;
        }
        let better = match best {
            None => true,
            Some((e, s, _)) => edits < e || (edits == e && similarity > s),
        };
        if better {
            best = Some((edits, similarity, cand));
        }
    }
    best.map(|(_, _, cand)| cand)
}

/// `help: did you mean …?` text for `word`, if a candidate is close enough.
pub(crate) fn did_you_mean<'a>(
    word: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> Option<String> {
    suggest(word, candidates).map(|s| format!("did you mean `{s}`?"))
}

#[cfg(test)]
mod tests {
    use super::*;

    const TASK_KEYS: &[&str] = &["command", "deps", "inputs", "outputs", "env", "pass_env"];

    #[test]
    fn typos_find_their_key() {
        assert_eq!(suggest("comand", TASK_KEYS.iter().copied()), Some("command"));
        assert_eq!(suggest("output", TASK_KEYS.iter().copied()), Some("outputs"));
        assert_eq!(suggest("Deps", TASK_KEYS.iter().copied()), Some("deps"));
        assert_eq!(suggest("passenv", TASK_KEYS.iter().copied()), Some("pass_env"));
        assert_eq!(suggest("biuld", ["build", "test", "lint"]), Some("build"));
    }

    #[test]
    fn unrelated_words_find_nothing() {
        assert_eq!(suggest("colour", TASK_KEYS.iter().copied()), None);
        assert_eq!(suggest("db", ["ui", "web"]), None);
        assert_eq!(suggest("x", std::iter::empty()), None);
    }

    #[test]
    fn the_closest_candidate_wins() {
        assert_eq!(suggest("utils", ["util", "utils-x", "utils"]), Some("utils"));
        assert_eq!(suggest("wbe", ["web", "webs"]), Some("web"));
    }
}
