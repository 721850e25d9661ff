//! Whether a manifest may be written into a workspace at all: every entry must be one of the
//! task's declared outputs (issue 10). A manifest comes from a worker's report, a farm's
//! download or a local index row — any of them may be forged — so the coordinator (on a
//! report), the client (before it writes a download) and every local restore (before it
//! removes or writes anything) call [`check_manifest_confined`], the one place this rule
//! lives. [`unpack_confine`] is what the archive itself is then confined to: derived from the
//! task (its project and its declared output roots), never from the manifest.

use std::collections::{HashMap, HashSet};

use super::links::resolve;
use super::{ancestors, check_relative};
use crate::globs::{PathGlobs, is_within};
use crate::manifest::{EntryKind, OutputManifest};

/// Why a manifest may not be written: the first offending entry.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfineError {
    /// The path is absolute, climbs with `..`, or is otherwise not clean.
    #[error("`{path}` is not a clean workspace-relative path")]
    Unclean {
        /// The path as found.
        path: String,
    },
    /// A file, link or directory the task's output globs do not select.
    #[error("`{path}` is not one of the task's declared outputs {globs:?}")]
    NotAnOutput {
        /// The entry path.
        path: String,
        /// The task's output patterns.
        globs: Vec<String>,
    },
    /// A path with a `.git` component: git never tracks one, and writing one plants
    /// repository configuration or hooks.
    #[error("`{path}` lies in a `.git` directory")]
    GitDir {
        /// The entry path.
        path: String,
    },
    /// A symlink whose target is absolute or resolves outside the task's project and
    /// declared output roots.
    #[error("symlink `{path}` -> `{target}` points outside the task's project")]
    LinkEscapes {
        /// The link path.
        path: String,
        /// Its target.
        target: String,
    },
    /// An entry below another entry that is a symlink or a file.
    #[error("`{path}` lies below `{parent}`, which is not a directory")]
    BelowNonDir {
        /// The entry path.
        path: String,
        /// The symlink or file on its way.
        parent: String,
    },
    /// The same path twice.
    #[error("`{path}` appears twice")]
    Duplicate {
        /// The entry path.
        path: String,
    },
}

impl ConfineError {
    /// The offending path.
    pub fn path(&self) -> &str {
        match self {
            Self::Unclean { path }
            | Self::NotAnOutput { path, .. }
            | Self::GitDir { path }
            | Self::LinkEscapes { path, .. }
            | Self::BelowNonDir { path, .. }
            | Self::Duplicate { path } => path,
        }
    }
}

/// The workspace-relative prefixes an archive of a task in `project_dir` with `outputs` may
/// fill, and its links may point into: the project and every declared output root (a `//`
/// output lies outside the project). `""` (the root project) is the whole workspace.
pub fn unpack_confine(outputs: &PathGlobs, project_dir: &str) -> Vec<String> {
    let mut confine = vec![project_dir.to_owned()];
    for r in outputs.roots() {
        if !confine.iter().any(|c| is_within(r, c)) {
            confine.push(r.clone());
        }
    }
    confine
}

/// Checks that every entry of `manifest` may be written for a task in `project_dir` whose
/// declared outputs are `outputs`:
///
/// - the path is clean and relative, has no `.git` component, and the globs select it
///   (files and links; a directory entry as [`PathGlobs::selects_dir`] does — nothing outside
///   them);
/// - no entry lies below another entry that is a file or a link, and no path repeats;
/// - a link's target, resolved through the manifest's other links, stays inside
///   [`unpack_confine`] (the project, or a declared output root).
///
/// Returns the first offending entry (in manifest order).
pub fn check_manifest_confined(
    manifest: &OutputManifest,
    outputs: &PathGlobs,
    project_dir: &str,
) -> Result<(), ConfineError> {
    let mut kinds: HashMap<&str, EntryKind> = HashMap::with_capacity(manifest.entries.len());
    let mut links: HashMap<String, String> = HashMap::new();
    for e in &manifest.entries {
        let path = e.path.as_str();
        if check_relative(path).is_err() {
            return Err(ConfineError::Unclean { path: path.to_owned() });
        }
        if path.split('/').any(|c| c == ".git") {
            return Err(ConfineError::GitDir { path: path.to_owned() });
        }
        let selected = match e.kind {
            EntryKind::Dir => outputs.selects_dir(path),
            EntryKind::File | EntryKind::Symlink => outputs.is_match(path),
        };
        if !selected {
            return Err(ConfineError::NotAnOutput {
                path: path.to_owned(),
                globs: outputs.patterns().to_vec(),
            });
        }
        if kinds.insert(path, e.kind).is_some() {
            return Err(ConfineError::Duplicate { path: path.to_owned() });
        }
        if e.kind == EntryKind::Symlink {
            let target = e.link_target.clone().unwrap_or_default();
            links.insert(path.to_owned(), target);
        }
    }
    let mut checked: HashSet<&str> = HashSet::new();
    for e in &manifest.entries {
        for parent in ancestors(&e.path) {
            if !checked.insert(parent) {
                continue;
            }
            if let Some(k) = kinds.get(parent)
                && *k != EntryKind::Dir
            {
                return Err(ConfineError::BelowNonDir {
                    path: e.path.clone(),
                    parent: parent.to_owned(),
                });
            }
        }
    }
    let confine = unpack_confine(outputs, project_dir);
    for e in manifest.entries.iter().filter(|e| e.kind == EntryKind::Symlink) {
        let target = e.link_target.as_deref().unwrap_or_default();
        let inside = resolve(&e.path, target, &links)
            .is_some_and(|r| confine.iter().any(|c| is_within(&r, c)));
        if !inside {
            return Err(ConfineError::LinkEscapes { path: e.path.clone(), target: target.into() });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::digest::Digest;
    use crate::manifest::ManifestEntry;

    fn entry(path: &str, kind: EntryKind, target: Option<&str>) -> ManifestEntry {
        ManifestEntry {
            path: path.to_owned(),
            kind,
            mode: 0o644,
            size: 1,
            digest: (kind != EntryKind::Dir).then(|| Digest::of(b"x")),
            mtime_ns: 0,
            link_target: target.map(str::to_owned),
        }
    }

    fn file(path: &str) -> ManifestEntry {
        entry(path, EntryKind::File, None)
    }

    fn link(path: &str, target: &str) -> ManifestEntry {
        entry(path, EntryKind::Symlink, Some(target))
    }

    fn check(entries: Vec<ManifestEntry>, patterns: &[&str]) -> Result<(), ConfineError> {
        let globs =
            PathGlobs::new("libs/a", &patterns.iter().map(|p| p.to_string()).collect::<Vec<_>>())
                .unwrap();
        check_manifest_confined(&OutputManifest::new(entries), &globs, "libs/a")
    }

    #[test]
    fn declared_outputs_pass() {
        let ok = vec![
            file("libs/a/dist/x.js"),
            file("libs/a/dist/sub/y.js"),
            link("libs/a/dist/l", "x.js"),
            link("libs/a/dist/src", "../src/main.ts"),
            entry("libs/a/dist/empty", EntryKind::Dir, None),
        ];
        assert_eq!(check(ok, &["dist/**"]), Ok(()));
        assert_eq!(check(vec![file("libs/a/report.json")], &["report.json"]), Ok(()));
        assert_eq!(check(vec![file("gen/a.ts")], &["dist/**", "//gen/**"]), Ok(()));
        assert_eq!(check(vec![link("gen/l", "../libs/a/x")], &["//gen/**"]), Ok(()));
        assert_eq!(check(vec![], &["dist/**"]), Ok(()));
    }

    #[test]
    fn anything_outside_the_outputs_is_named() {
        let hook = check(vec![file("libs/a/dist/x"), file(".git/hooks/pre-commit")], &["dist/**"]);
        assert_eq!(hook.unwrap_err().path(), ".git/hooks/pre-commit");
        for bad in ["libs/other/src/index.ts", "libs/a/src/main.ts", "prova.toml", "libs/a/distx"] {
            let e = check(vec![file("libs/a/dist/x"), file(bad)], &["dist/**"]).unwrap_err();
            assert!(matches!(e, ConfineError::NotAnOutput { .. }), "{bad}: {e}");
            assert_eq!(e.path(), bad);
        }
        let dir = check(vec![entry("libs/b/dist", EntryKind::Dir, None)], &["dist/**"]);
        assert!(matches!(dir, Err(ConfineError::NotAnOutput { .. })), "{dir:?}");
        // A directory is an output where the globs select whatever it holds: `dist/**` makes
        // `dist` one, `dist/*.js` does not, and the project directory never is.
        let own = |d: &str, pats: &[&str]| check(vec![entry(d, EntryKind::Dir, None)], pats);
        assert_eq!(own("libs/a/dist", &["dist/**"]), Ok(()));
        for (d, pats) in [("libs/a/dist", &["dist/*.js"][..]), ("libs/a", &["*"][..])] {
            let e = own(d, pats);
            assert!(matches!(e, Err(ConfineError::NotAnOutput { .. })), "{d}: {e:?}");
        }
        // Excluded outputs are not outputs.
        let excl = check(vec![file("libs/a/dist/x.map")], &["dist/**", "!dist/**/*.map"]);
        assert!(matches!(excl, Err(ConfineError::NotAnOutput { .. })), "{excl:?}");
    }

    #[test]
    fn git_directories_are_refused_even_inside_outputs() {
        for p in ["libs/a/dist/.git/config", "libs/a/dist/x/.git"] {
            let e = check(vec![file(p)], &["dist/**"]).unwrap_err();
            assert!(matches!(e, ConfineError::GitDir { .. }), "{p}: {e}");
        }
        let e = check(vec![file(".git/hooks/pre-commit")], &["//**"]).unwrap_err();
        assert!(matches!(e, ConfineError::GitDir { .. }), "{e}");
    }

    #[test]
    fn unclean_paths_are_refused() {
        for p in ["/etc/passwd", "libs/a/dist/../../b/x", "libs/a/dist//x", "libs/a/./dist/x", ""] {
            let e = check(vec![file(p)], &["**"]).unwrap_err();
            assert!(matches!(e, ConfineError::Unclean { .. }), "{p:?}: {e}");
        }
    }

    #[test]
    fn links_stay_in_the_project() {
        for (path, target) in [
            ("libs/a/dist/l", "../../other/src"),
            ("libs/a/dist/l", "/etc/passwd"),
            ("libs/a/dist/l", "../../../.."),
            ("libs/a/dist/l", ""),
        ] {
            let e = check(vec![link(path, target)], &["dist/**"]).unwrap_err();
            assert!(matches!(e, ConfineError::LinkEscapes { .. }), "{target}: {e}");
        }
        // Resolved through the manifest's other links, not lexically.
        let chained = vec![link("libs/a/dist/b/up", "../../.."), link("libs/a/dist/b/esc", "up/x")];
        let e = check(chained, &["dist/**"]).unwrap_err();
        assert_eq!(e.path(), "libs/a/dist/b/esc");
    }

    #[test]
    fn entries_below_a_file_or_link_and_duplicates_are_refused() {
        let below = check(vec![link("libs/a/dist/l", "."), file("libs/a/dist/l/x")], &["dist/**"]);
        assert!(matches!(below, Err(ConfineError::BelowNonDir { .. })), "{below:?}");
        let file_parent = check(vec![file("libs/a/dist/f"), file("libs/a/dist/f/x")], &["dist/**"]);
        assert!(matches!(file_parent, Err(ConfineError::BelowNonDir { .. })), "{file_parent:?}");
        let mut m = OutputManifest::new(vec![file("libs/a/dist/x")]);
        m.entries.push(file("libs/a/dist/x"));
        let globs = PathGlobs::new("libs/a", &["dist/**".to_owned()]).unwrap();
        let dup = check_manifest_confined(&m, &globs, "libs/a");
        assert!(matches!(dup, Err(ConfineError::Duplicate { .. })), "{dup:?}");
    }

    #[test]
    fn the_unpack_confine_comes_from_the_task() {
        let g = PathGlobs::new("libs/a", &["dist/**".to_owned(), "//gen/**".to_owned()]).unwrap();
        assert_eq!(unpack_confine(&g, "libs/a"), ["libs/a", "gen"]);
        let root = PathGlobs::new("", &["dist/**".to_owned()]).unwrap();
        assert_eq!(unpack_confine(&root, ""), [""]);
    }
}
