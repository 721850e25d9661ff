//! Declared inputs the file list leaves out (issue 12). Git lists tracked files and untracked
//! ones it does not ignore, so a gitignored file a task declares (`.env.production`, a
//! generated `config/local.json`, a whole ignored `generated/**`) was neither keyed nor in
//! its exec roots — and served a stale hit when it changed. Such paths are found on disk and
//! added to the list, so they are keyed (and rechecked before a save) like any input:
//!
//! - a literal input path (no glob) that is a file or symlink on disk and not listed;
//! - the files under a glob's literal root when that root is a directory holding no listed
//!   file at all (an ignored directory), walked without ignore rules, symlinks not followed,
//!   `.git`, `.prova` and installed trees skipped, at most [`MAX_UNLISTED`] entries.
//!
//! A glob rooted in a directory git does list (`src/**` with an ignored `src/gen/`) is left
//! to the list: walking every declared root on every run would cost the warm path a second
//! listing of the workspace.

use std::fs;
use std::path::Path;

use prova_protocol::globs::{PathGlobs, is_within};

use super::FileList;

/// Most entries one run's search for unlisted inputs visits.
pub const MAX_UNLISTED: usize = 100_000;

/// The unlisted files (workspace-relative, sorted) that `patterns` — each `(project dir,
/// patterns as written)` — declare, outside `skip` (installed trees).
pub fn unlisted_inputs(
    root: &Path,
    patterns: &[(String, Vec<String>)],
    files: &FileList,
    skip: &[String],
) -> Vec<String> {
    let mut out = Vec::new();
    let mut budget = MAX_UNLISTED;
    let skipped = |p: &str| {
        p.split('/').any(|c| c == ".git" || c == ".prova") || skip.iter().any(|t| is_within(p, t))
    };
    for (dir, pats) in patterns {
        let Ok(globs) = PathGlobs::new(dir, pats) else { continue };
        for lit in globs.literals() {
            if !skipped(lit)
                && files.all().binary_search(lit).is_err()
                && fs::symlink_metadata(root.join(lit)).is_ok_and(|m| !m.is_dir())
            {
                out.push(lit.clone());
            }
        }
        // Each pattern's own root: `src/gen/**` beside `src/**` declares an ignored
        // `src/gen/` although `src` is listed.
        for r in &globs.include_roots() {
            if r.is_empty() || skipped(r) || globs.literals().contains(r) {
                continue;
            }
            if !files.under(r).is_empty()
                || !fs::symlink_metadata(root.join(r)).is_ok_and(|m| m.is_dir())
            {
                continue;
            }
            walk(root, r, &mut budget, &skipped, &mut |f| {
                if globs.is_match(&f) {
                    out.push(f);
                }
            });
        }
    }
    out.sort();
    out.dedup();
    out
}

fn walk(
    root: &Path,
    dir: &str,
    budget: &mut usize,
    skipped: &dyn Fn(&str) -> bool,
    found: &mut dyn FnMut(String),
) {
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = fs::read_dir(root.join(&d)) else { continue };
        for e in rd.flatten() {
            if *budget == 0 {
                return;
            }
            *budget -= 1;
            let Some(name) = e.file_name().to_str().map(str::to_owned) else { continue };
            let rel = format!("{d}/{name}");
            if skipped(&rel) {
                continue;
            }
            match e.file_type() {
                Ok(t) if t.is_dir() => stack.push(rel),
                Ok(_) => found(rel),
                Err(_) => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ignored_declared_files_are_found_and_listed_ones_are_not_repeated() {
        let t = tempfile::tempdir().unwrap();
        let r = t.path();
        for d in ["p/config", "p/generated/sub", "p/src", "node_modules/x"] {
            fs::create_dir_all(r.join(d)).unwrap();
        }
        for f in [
            "p/config/local.json",
            "p/generated/a.ts",
            "p/generated/sub/b.ts",
            "p/generated/notes.md",
            "p/src/main.ts",
            "p/src/ignored.ts",
            "node_modules/x/i.js",
        ] {
            fs::write(r.join(f), "x").unwrap();
        }
        let files = FileList::from_paths(vec!["p/src/main.ts".into()]);
        let pats = vec![(
            "p".to_owned(),
            vec![
                "config/local.json".to_owned(),
                "config/absent.json".to_owned(),
                "generated/**/*.ts".to_owned(),
                "src/**".to_owned(),
                "//node_modules/**".to_owned(),
            ],
        )];
        let got = unlisted_inputs(r, &pats, &files, &["node_modules".to_owned()]);
        // `src/` is listed by git: its ignored file is the list's business.
        assert_eq!(got, ["p/config/local.json", "p/generated/a.ts", "p/generated/sub/b.ts"]);
    }

    #[test]
    fn an_ignored_directory_declared_beside_a_wider_listed_glob_is_found() {
        let t = tempfile::tempdir().unwrap();
        let r = t.path();
        fs::create_dir_all(r.join("p/src/gen")).unwrap();
        fs::write(r.join("p/src/main.ts"), "x").unwrap();
        fs::write(r.join("p/src/gen/a.log"), "x").unwrap();
        let files = FileList::from_paths(vec!["p/src/main.ts".into()]);
        let pats = |extra: &[&str]| {
            let mut v = vec!["src/**".to_owned()];
            v.extend(extra.iter().map(|s| (*s).to_owned()));
            vec![("p".to_owned(), v)]
        };
        assert!(unlisted_inputs(r, &pats(&[]), &files, &[]).is_empty());
        assert_eq!(unlisted_inputs(r, &pats(&["src/gen/**"]), &files, &[]), ["p/src/gen/a.log"]);
    }
}
