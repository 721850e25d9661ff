//! Secret values masked out of task output (issue 10, "secrets cross tiers through logs").
//! A task's log is part of its cache entry: it is stored, replayed on every hit, streamed to
//! the terminal and to `--json`. A deploy token a task prints (`set -x`, a tool echoing its
//! config) would go wherever the entry goes. The worker masks such values **before** any of
//! that — in every live chunk and in the final log — so no copy of the log ever holds them.
//!
//! Which values: those of the task's declared variables (`env` and `pass_env`) whose *names*
//! say they hold a secret ([`is_secret_name`]: `TOKEN`, `SECRET`, `PASSWORD`, `KEY`, …, as CI
//! systems name them), and at least [`MIN_SECRET_LEN`] bytes long (shorter values would mask
//! ordinary words). Each occurrence becomes `***`, as GitHub Actions and Nx print it.
//!
//! Live output arrives in whole lines, so a value inside a line is always within one chunk;
//! only a single line longer than the executor's partial-line bound can split one, and the
//! final log (what is stored and replayed) is masked as a whole.

use std::borrow::Cow;

/// What a masked value becomes.
pub const MASK: &[u8] = b"***";

/// Values shorter than this are never masked: `KEY=1` would turn every `1` into `***`.
pub const MIN_SECRET_LEN: usize = 4;

/// Words in a variable's name that mark its value as a secret (matched case-insensitively
/// anywhere in the name: `NPM_TOKEN`, `AWS_SECRET_ACCESS_KEY`, `PGPASSWORD`, `GH_PAT`…).
const SECRET_WORDS: &[&str] = &[
    "TOKEN",
    "SECRET",
    "PASSWORD",
    "PASSWD",
    "PASSPHRASE",
    "KEY",
    "CREDENTIAL",
    "AUTH",
    "PRIVATE",
    "COOKIE",
    "SESSION",
    "SIGNATURE",
];

/// Whether a variable named `name` holds a secret by its name.
pub fn is_secret_name(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    SECRET_WORDS.iter().any(|w| upper.contains(w))
        || upper.ends_with("_PAT")
        || upper.ends_with("_DSN")
}

/// The secret values of one task.
#[derive(Clone, Debug, Default)]
pub struct SecretMask {
    /// Longest first, so a value containing another is masked whole.
    values: Vec<Vec<u8>>,
}

impl SecretMask {
    /// The mask for a task whose declared variables are `env`.
    pub fn from_env(env: &[(String, String)]) -> Self {
        let mut values: Vec<Vec<u8>> = env
            .iter()
            .filter(|(k, v)| is_secret_name(k) && v.len() >= MIN_SECRET_LEN)
            .map(|(_, v)| v.as_bytes().to_vec())
            .collect();
        values.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
        values.dedup();
        Self { values }
    }

    /// Whether there is nothing to mask.
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// `text` with every occurrence of a secret value replaced by [`MASK`].
    pub fn apply<'a>(&self, text: &'a [u8]) -> Cow<'a, [u8]> {
        if self.values.is_empty() || !self.values.iter().any(|v| contains(text, v)) {
            return Cow::Borrowed(text);
        }
        let mut out = Vec::with_capacity(text.len());
        let mut i = 0;
        'scan: while i < text.len() {
            for v in &self.values {
                if text[i..].starts_with(v) {
                    out.extend_from_slice(MASK);
                    i += v.len();
                    continue 'scan;
                }
            }
            out.push(text[i]);
            i += 1;
        }
        Cow::Owned(out)
    }

    /// [`apply`](Self::apply) in place.
    pub fn apply_vec(&self, text: &mut Vec<u8>) {
        if let Cow::Owned(masked) = self.apply(text) {
            *text = masked;
        }
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    !needle.is_empty() && haystack.windows(needle.len()).any(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    }

    #[test]
    fn secret_names_are_recognised_and_ordinary_ones_are_not() {
        for n in [
            "DEPLOY_TOKEN",
            "npm_token",
            "AWS_SECRET_ACCESS_KEY",
            "PGPASSWORD",
            "GH_PAT",
            "SENTRY_DSN",
            "API_KEY",
            "SSH_PRIVATE",
            "AUTH_HEADER",
        ] {
            assert!(is_secret_name(n), "{n}");
        }
        for n in ["NODE_ENV", "CI", "PATH", "HOME", "TZ", "PATTERN", "LANG"] {
            assert!(!is_secret_name(n), "{n}");
        }
    }

    #[test]
    fn every_occurrence_of_a_secret_is_masked_and_nothing_else() {
        let m = SecretMask::from_env(&env(&[
            ("DEPLOY_TOKEN", "s3cr3t-value"),
            ("NODE_ENV", "production"),
            ("API_KEY", "abc"),
        ]));
        let text = b"token=s3cr3t-value in production; again s3cr3t-values abc\n";
        assert_eq!(
            m.apply(text).as_ref(),
            b"token=*** in production; again ***s abc\n".as_slice(),
            "short values (abc) and non-secret names (NODE_ENV) stay"
        );
        assert!(matches!(m.apply(b"nothing here"), Cow::Borrowed(_)));
    }

    #[test]
    fn a_value_containing_another_is_masked_whole() {
        let m = SecretMask::from_env(&env(&[("A_TOKEN", "abcd"), ("B_TOKEN", "xxabcdxx")]));
        assert_eq!(m.apply(b"[xxabcdxx] [abcd]").as_ref(), b"[***] [***]".as_slice());
        let mut v = b"abcdabcd".to_vec();
        m.apply_vec(&mut v);
        assert_eq!(v, b"******");
    }

    #[test]
    fn no_secrets_means_no_work() {
        let m = SecretMask::from_env(&env(&[("NODE_ENV", "production")]));
        assert!(m.is_empty());
        assert!(matches!(m.apply(b"production"), Cow::Borrowed(_)));
    }
}
