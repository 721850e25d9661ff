//! Listing a task's input directories again after it ran without starting git. The save's
//! recheck ([`super::scope::InputScope::recheck`]) needs what `git ls-files --cached
//! --others --exclude-standard` would say under a few paths now; starting git for it, once
//! per executed task, was a third of the CPU of a run that rebuilds hundreds of small
//! packages. [`unchanged_under`] walks those paths instead, skipping what `.gitignore`
//! ignores, and answers only when the walk finds exactly the files the run's own listing
//! held there; anything else (a file that appeared or went, one the walk cannot read) is
//! left to git.
//!
//! Why equal sets give git's answer: git lists the index's files and the files on disk that
//! no ignore rule excludes. The index does not change while a task builds, so its files are
//! the listing's. A file on disk that git lists and the listing lacks is not ignored by git,
//! so the walk, which reads only `.gitignore` files (not `.git/info/exclude` or the user's
//! global excludes, which only ignore more), finds it, and the sets differ. A file of the
//! listing that is gone, or newly ignored, is missing from the walk: the sets differ again.
//! A tracked file that `.gitignore` covers is listed by git and skipped by the walk: such a
//! directory always goes to git.

use std::path::Path;

use super::files::under;

/// The files under `dirs` (workspace-relative directories or files, none inside another,
/// none `""`) as `git ls-files` lists them now, when a walk honouring `.gitignore` finds
/// exactly the files `listed` (the run's listing, sorted) holds there; `None` when it finds
/// anything else, cannot read something, or a path is the whole workspace (ask git).
pub fn unchanged_under(root: &Path, listed: &[String], dirs: &[String]) -> Option<Vec<String>> {
    if dirs.is_empty() || dirs.iter().any(String::is_empty) {
        return None;
    }
    let mut was: Vec<&String> = Vec::new();
    for d in dirs {
        if let Ok(i) = listed.binary_search(d) {
            was.push(&listed[i]);
        }
        was.extend(under(listed, d));
    }
    was.sort_unstable();
    was.dedup();
    // More files than the listing held means something appeared: stop there.
    let mut now: Vec<String> = Vec::with_capacity(was.len());
    for d in dirs {
        if !walk_into(root, d, was.len(), &mut now) {
            return None;
        }
    }
    now.sort_unstable();
    now.dedup();
    let same = now.len() == was.len() && now.iter().zip(&was).all(|(a, b)| a == *b);
    if !same {
        return None;
    }
    Some(now)
}

/// Pushes onto `out` the files (anything not a directory; links not followed) under `dir`,
/// relative to `root`, that `.gitignore` files do not exclude. `false` when more than `most`
/// were found, or a name is not UTF-8, or the walk failed somewhere.
fn walk_into(root: &Path, dir: &str, most: usize, out: &mut Vec<String>) -> bool {
    let start = root.join(dir);
    match std::fs::symlink_metadata(&start) {
        Ok(m) if m.file_type().is_symlink() || !m.is_dir() => {
            // A file (or a link git lists as one) named outright: git lists it unless it
            // is ignored and untracked, which the listing then does not hold either.
            out.push(dir.to_owned());
            return out.len() <= most;
        }
        Ok(_) => {}
        // Gone: nothing under it now.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return true,
        Err(_) => return false,
    }
    let walker = ignore::WalkBuilder::new(&start)
        .hidden(false)
        .ignore(false)
        .git_ignore(true)
        .git_global(false)
        .git_exclude(false)
        .parents(true)
        .require_git(true)
        .follow_links(false)
        .filter_entry(|e| e.depth() == 0 || e.file_name() != ".git")
        .build();
    for entry in walker {
        let Ok(entry) = entry else { return false };
        let Some(kind) = entry.file_type() else { return false };
        if kind.is_dir() {
            continue;
        }
        let Ok(rel) = entry.path().strip_prefix(root) else { return false };
        let Some(rel) = rel.to_str() else { return false };
        out.push(rel.to_owned());
        if out.len() > most {
            return false;
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use std::process::Command;

    use super::*;
    use crate::inputs::files::{ListSource, enumerate, enumerate_under};

    fn write(root: &Path, rel: &str, text: &str) {
        let p = root.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }

    fn git(dir: &Path, args: &[&str]) {
        let ok = Command::new("git")
            .arg("-C")
            .arg(dir)
            .args(["-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"])
            .args(args)
            .status()
            .unwrap()
            .success();
        assert!(ok, "git {args:?}");
    }

    /// A repository with ignore rules of several shapes, some files committed and some not.
    fn repo() -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        let r = d.path();
        git(r, &["init", "-q"]);
        write(r, ".gitignore", "*.log\ndist/\n/p/build\n**/tmp/**\n");
        write(r, "p/.gitignore", "*.gen\n!keep.gen\n");
        // Not git's: rg's and fd's ignore file, which git lists and does not read.
        write(r, "p/.ignore", "secret.txt\n");
        write(r, "p/src/a.js", "a");
        write(r, "p/src/b.js", "b");
        write(r, "p/README.md", "r");
        write(r, "p/dist/out.js", "o");
        write(r, "p/x.log", "l");
        write(r, "q/src/c.js", "c");
        write(r, "lock.json", "{}");
        git(r, &["add", "."]);
        git(r, &["commit", "-qm", "one"]);
        write(r, "p/src/untracked.js", "u");
        d
    }

    const DIRS: [&str; 2] = ["lock.json", "p"];

    /// What the walk says, checked against git: it may decline (`None`), never differ.
    fn quick(root: &Path, listed: &[String]) -> Option<Vec<String>> {
        let dirs: Vec<String> = DIRS.map(String::from).to_vec();
        let quick = unchanged_under(root, listed, &dirs);
        let git = enumerate_under(root, &[], Some(ListSource::Git), &dirs).unwrap();
        if let Some(q) = &quick {
            assert_eq!(q, &git, "the walk's answer is not git's");
        }
        quick
    }

    fn listed(root: &Path) -> Vec<String> {
        let l = enumerate(root, &[]).unwrap();
        assert_eq!(l.source, Some(ListSource::Git));
        l.all().to_vec()
    }

    #[test]
    fn nothing_changed_is_answered_without_git() {
        let d = repo();
        let l = listed(d.path());
        assert!(quick(d.path(), &l).is_some());
    }

    #[test]
    fn what_gitignore_excludes_may_come_and_go() {
        let d = repo();
        let r = d.path();
        let l = listed(r);
        write(r, "p/y.log", "l");
        write(r, "p/dist/more/deep.js", "o");
        write(r, "p/build/out.txt", "o");
        write(r, "p/src/tmp/scratch.js", "t");
        write(r, "p/src/z.gen", "g");
        std::fs::remove_file(r.join("p/x.log")).unwrap();
        assert!(quick(r, &l).is_some(), "ignored files moved nothing git lists");
    }

    #[test]
    fn a_file_git_would_list_now_is_left_to_git() {
        for (what, rel) in [
            ("a new file", "p/src/new.js"),
            ("a file a negation keeps", "p/src/keep.gen"),
            ("a hidden file", "p/.env"),
            ("a file only a `.ignore` names", "p/src/secret.txt"),
            ("a file in a new directory", "p/lib/deep/d.js"),
            ("a file where a root-only rule does not reach", "p/src/build/x.js"),
            ("a lockfile root that was not there", "lock.json"),
        ] {
            let d = repo();
            let r = d.path();
            if rel == "lock.json" {
                git(r, &["rm", "-q", "--cached", "lock.json"]);
                std::fs::remove_file(r.join(rel)).unwrap();
            }
            let l = listed(r);
            write(r, rel, "new");
            assert_eq!(quick(r, &l), None, "{what}");
        }
    }

    #[test]
    fn a_file_gone_or_newly_ignored_is_left_to_git() {
        let d = repo();
        let r = d.path();
        let l = listed(r);
        std::fs::remove_file(r.join("p/src/untracked.js")).unwrap();
        assert_eq!(quick(r, &l), None, "an untracked file removed");

        let d = repo();
        let r = d.path();
        let l = listed(r);
        write(r, "p/.gitignore", "*.gen\n!keep.gen\nuntracked.js\n");
        assert_eq!(quick(r, &l), None, "an untracked file ignored since");

        let d = repo();
        let r = d.path();
        write(r, "p/.gitignore", "*.gen\n");
        write(r, "p/src/old.gen", "g");
        let l2 = listed(r);
        assert!(!l2.contains(&"p/src/old.gen".to_owned()));
        std::fs::write(r.join("p/.gitignore"), "").unwrap();
        assert_eq!(quick(r, &l2), None, "an ignored file no longer ignored");
    }

    #[test]
    fn a_tracked_file_that_gitignore_covers_goes_to_git() {
        let d = repo();
        let r = d.path();
        write(r, "p/forced.log", "f");
        git(r, &["add", "-f", "p/forced.log"]);
        let l = listed(r);
        assert!(l.contains(&"p/forced.log".to_owned()));
        assert_eq!(quick(r, &l), None);
    }

    #[test]
    fn a_nested_repository_is_left_to_git() {
        let d = repo();
        let r = d.path();
        write(r, "p/inner/f.js", "f");
        git(&r.join("p/inner"), &["init", "-q"]);
        let l = listed(r);
        assert_eq!(quick(r, &l), None);
    }

    #[test]
    fn the_whole_workspace_is_not_walked() {
        let d = repo();
        let l = listed(d.path());
        assert_eq!(unchanged_under(d.path(), &l, &[String::new()]), None);
        assert_eq!(unchanged_under(d.path(), &l, &[]), None);
    }
}
