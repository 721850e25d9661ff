//! Where a symlink from an archive points. A link is only acceptable if its target, resolved
//! the way the kernel would — including through the other links the archive creates — stays
//! inside the confine prefixes. Resolving purely lexically is not enough: with
//! `p/a/b/up -> ../..` (which is `p`), `p/a/b/esc -> up/../../x` looks like `p/a/x` on paper
//! but is `../x` on disk.

use std::collections::HashMap;

use crate::globs::is_within;

/// How many links one resolution may pass through (Linux's `ELOOP` limit).
const MAX_HOPS: usize = 40;

/// How many path components one resolution may process, hops included: bounds the CPU a
/// hostile archive can buy with long targets and link chains.
const MAX_STEPS: usize = 4096;

/// Resolves the target of the link at `link_path` (workspace-relative), following the links
/// in `links` (path → target). Returns the workspace-relative path it designates (`""` for
/// the workspace root), or `None` if it is absolute, climbs above the root, loops or takes
/// too many steps. Paths outside the archive are taken as they are written: the archive
/// cannot know what the workspace holds there.
pub(crate) fn resolve(
    link_path: &str,
    target: &str,
    links: &HashMap<String, String>,
) -> Option<String> {
    if target.is_empty() || target.starts_with('/') {
        return None;
    }
    // `cur` is the resolved prefix; `lens[i]` is its length before component `i` was pushed.
    let mut cur = String::new();
    let mut lens: Vec<usize> = Vec::new();
    for comp in link_path.split('/') {
        lens.push(cur.len());
        if !cur.is_empty() {
            cur.push('/');
        }
        cur.push_str(comp);
    }
    // Start from the link's directory.
    cur.truncate(lens.pop()?);
    let mut pending: Vec<String> = components_reversed(target);
    let (mut hops, mut steps) = (0, 0);
    while let Some(comp) = pending.pop() {
        steps += 1;
        if steps > MAX_STEPS {
            return None;
        }
        match comp.as_str() {
            "" | "." => {}
            ".." => cur.truncate(lens.pop()?),
            name => {
                lens.push(cur.len());
                if !cur.is_empty() {
                    cur.push('/');
                }
                cur.push_str(name);
                if let Some(next) = links.get(&cur) {
                    hops += 1;
                    if hops > MAX_HOPS || next.is_empty() || next.starts_with('/') {
                        return None;
                    }
                    // The link is replaced by its target, read from the link's directory.
                    cur.truncate(lens.pop()?);
                    pending.extend(components_reversed(next));
                }
            }
        }
    }
    Some(cur)
}

/// Whether `target`, seen from the link at `link_path`, lands inside one of `confine`.
pub(crate) fn stays_within(
    link_path: &str,
    target: &str,
    links: &HashMap<String, String>,
    confine: &[String],
) -> bool {
    resolve(link_path, target, links)
        .is_some_and(|resolved| confine.iter().any(|c| is_within(&resolved, c)))
}

fn components_reversed(path: &str) -> Vec<String> {
    path.split('/').rev().map(str::to_owned).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect()
    }

    #[test]
    fn lexical_resolution() {
        let none = HashMap::new();
        assert_eq!(resolve("p/l", "x", &none).as_deref(), Some("p/x"));
        assert_eq!(resolve("p/d/l", "../x/./y", &none).as_deref(), Some("p/x/y"));
        assert_eq!(resolve("p/l", "..", &none).as_deref(), Some(""));
        assert_eq!(resolve("l", "a//b/", &none).as_deref(), Some("a/b"));
        assert_eq!(resolve("p/l", "../..", &none), None);
        assert_eq!(resolve("p/l", "/etc", &none), None);
        assert_eq!(resolve("p/l", "", &none), None);
    }

    #[test]
    fn follows_links_in_the_archive() {
        let links = map(&[("p/a/b/up", "../.."), ("p/d", "sub")]);
        // Lexically `p/a/x`; really `p/../x`.
        assert_eq!(resolve("p/a/b/esc", "up/../x", &links).as_deref(), Some("x"));
        assert!(!stays_within("p/a/b/esc", "up/../x", &links, &["p".to_owned()]));
        assert_eq!(resolve("p/a/b/esc", "up/../../../y", &links), None);
        assert_eq!(resolve("p/f", "d/file", &links).as_deref(), Some("p/sub/file"));
        assert!(stays_within("p/f", "d/file", &links, &["p".to_owned()]));
    }

    #[test]
    fn loops_and_absolute_hops_are_refused() {
        let links = map(&[("a", "b"), ("b", "a"), ("c", "/etc")]);
        assert_eq!(resolve("x", "a", &links), None);
        assert_eq!(resolve("x", "c/passwd", &links), None);
        let long = "a/".repeat(MAX_STEPS + 1);
        assert_eq!(resolve("x", &long, &HashMap::new()), None);
    }
}
