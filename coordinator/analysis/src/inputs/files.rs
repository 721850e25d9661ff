//! The workspace's file list, enumerated once per run: in a git work tree the tracked and
//! untracked-but-not-ignored files (`git ls-files --cached --others --exclude-standard`, one
//! call, plus one per project that is its own repository); elsewhere a walk that honours
//! `.gitignore`. `.git/` and `.prova/` are never inputs, nor a restore's temporaries (what
//! a killed one left is removed as the list is made). A name that is not UTF-8 is refused
//! ([`FilesError::NotUtf8`]): globs and key components are strings, so such a file could be
//! neither selected nor keyed, and leaving it out would serve stale hits when it changes.

use std::path::Path;
use std::process::Command;
use std::sync::Arc;

/// Enumerating the workspace failed.
#[derive(Debug, thiserror::Error)]
pub enum FilesError {
    /// git failed.
    #[error("`git ls-files` in {dir} failed: {message}")]
    Git {
        /// Where.
        dir: String,
        /// What git said.
        message: String,
    },
    /// The walk failed.
    #[error("walking {dir}: {message}")]
    Walk {
        /// Where.
        dir: String,
        /// What failed.
        message: String,
    },
    /// A file in the workspace whose name is not UTF-8.
    #[error(
        "{path}: the file name is not valid UTF-8, so prova can neither match it against \
         globs nor fold it into a key (shown with U+FFFD for each invalid byte)\n  help: \
         rename it, or ignore it in .gitignore so it is no task's input"
    )]
    NotUtf8 {
        /// Workspace-relative, converted lossily.
        path: String,
    },
}

/// How the list was made (shown by `prova show`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ListSource {
    /// `git ls-files`.
    Git,
    /// A directory walk honouring `.gitignore`.
    Walk,
}

/// Sorted, de-duplicated workspace-relative file paths (`/`-separated). Entries may name
/// files deleted since git last saw them; the digest pass drops what it cannot stat.
#[derive(Clone, Debug, Default)]
pub struct FileList {
    files: Arc<[String]>,
    /// How it was made.
    pub source: Option<ListSource>,
    /// Workspace-relative directories listed as git repositories of their own.
    pub nested_repos: Vec<String>,
    /// The paths added to the list after it was made (declared inputs it leaves out:
    /// [`super::unlisted`]), sorted: not among a project directory's entry names, which a
    /// listing made again ([`super::scope::InputScope::recheck`]) would not give.
    pub added: Vec<String>,
    /// The list as it was made, before [`Self::added`] (shared, not copied); `None` when
    /// nothing was added.
    made: Option<Arc<[String]>>,
}

impl FileList {
    /// A list from paths (sorted and de-duplicated here).
    pub fn from_paths(files: Vec<String>) -> Self {
        Self {
            files: sorted(files).into(),
            source: None,
            nested_repos: Vec::new(),
            added: Vec::new(),
            made: None,
        }
    }

    /// This list with `extra` added ([`Self::added`]); the list as it was made stays
    /// readable through [`Self::as_made`].
    pub fn adding(self, extra: Vec<String>) -> Self {
        let mut all = self.files.to_vec();
        all.extend(extra.iter().cloned());
        let mut added = extra;
        added.sort();
        added.dedup();
        Self {
            files: sorted(all).into(),
            source: self.source,
            nested_repos: self.nested_repos,
            added,
            made: Some(self.made.unwrap_or(self.files)),
        }
    }

    /// All paths.
    pub fn all(&self) -> &[String] {
        &self.files
    }

    /// The paths as the listing gave them, without [`Self::added`]: what listing the same
    /// paths again gives when nothing changed.
    pub fn as_made(&self) -> Arc<[String]> {
        Arc::clone(self.made.as_ref().unwrap_or(&self.files))
    }

    /// The paths under `dir` (workspace-relative; `""` = all), by binary search.
    pub fn under(&self, dir: &str) -> &[String] {
        under(&self.files, dir)
    }

    /// Number of files.
    pub fn len(&self) -> usize {
        self.files.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.files.is_empty()
    }
}

/// The paths of sorted `files` under `dir` (workspace-relative; `""` = all), by binary
/// search.
pub fn under<'a>(files: &'a [String], dir: &str) -> &'a [String] {
    if dir.is_empty() {
        return files;
    }
    let prefix = format!("{dir}/");
    let start = files.partition_point(|f| f.as_str() < prefix.as_str());
    let end = start + files[start..].partition_point(|f| f.starts_with(&prefix));
    &files[start..end]
}

/// `files` sorted, de-duplicated, without prova's and git's own ([`is_internal`]).
fn sorted(mut files: Vec<String>) -> Vec<String> {
    files.sort_unstable();
    files.dedup();
    files.retain(|f| !is_internal(f));
    files
}

fn is_internal(path: &str) -> bool {
    path == ".prova"
        || path.starts_with(".prova/")
        || path.starts_with(".git/")
        || path.contains("/.git/")
}

/// Enumerates the workspace at `root`. `nested_repos` are workspace-relative directories
/// that are their own git repositories (projects cloned inside the workspace): git does not
/// list their files from the outer repository, so each is listed separately.
pub fn enumerate(root: &Path, nested_repos: &[String]) -> Result<FileList, FilesError> {
    // `git ls-files` straight away where git may find a repository: asking git first
    // (`rev-parse`) cost a process start per run. Only when the listing fails is it asked
    // whether this is a work tree at all (not one: the walk, as before; one: the error).
    let listed = if may_be_git(root) {
        match ls_files(root, "", &[]) {
            Ok(files) => Some(files),
            Err(_) if !in_git_work_tree(root) => None,
            Err(e) => return Err(e),
        }
    } else {
        None
    };
    if let Some(mut files) = listed {
        for dir in nested_repos {
            files.retain(|f| !prova_protocol::globs::is_within(f, dir));
            files.extend(ls_files(&root.join(dir), dir, &[])?);
        }
        remove_restore_temps(root, &mut files, true);
        let mut list = FileList::from_paths(files);
        list.source = Some(ListSource::Git);
        list.nested_repos = nested_repos.to_vec();
        Ok(list)
    } else {
        let mut files = walk(root, root)?;
        remove_restore_temps(root, &mut files, true);
        let mut list = FileList::from_paths(files);
        list.source = Some(ListSource::Walk);
        Ok(list)
    }
}

/// Drops from `files` what a restore left in the workspace under its temporary names
/// (`prova_protocol::pidname::RESTORE_TEMP`: a staging directory beside a project's outputs,
/// an entry beside the one it replaced), which are never a task's input; with `sweep`, also
/// removes those of a prova that is gone (killed mid-restore), each at the temporary's own
/// path, never following a symlink and only when this user owns it. A live one (another
/// prova restoring now) is left where it is.
fn remove_restore_temps(root: &Path, files: &mut Vec<String>, sweep: bool) {
    use prova_protocol::pidname::{RESTORE_TEMP, gone, owned, restore_temp_owner};
    if !files.iter().any(|f| f.contains(RESTORE_TEMP)) {
        return;
    }
    let mut abandoned: Vec<String> = Vec::new();
    files.retain(|f| {
        if !f.contains(RESTORE_TEMP) {
            return true;
        }
        let mut at = 0;
        for c in f.split('/') {
            let end = at + c.len();
            if let Some(pid) = restore_temp_owner(c) {
                if sweep && pid != std::process::id() && gone(pid) {
                    abandoned.push(f[..end].to_owned());
                }
                return false;
            }
            at = end + 1;
        }
        true
    });
    abandoned.dedup();
    for rel in abandoned {
        let path = root.join(&rel);
        let Ok(meta) = std::fs::symlink_metadata(&path) else { continue };
        if !owned(&meta) {
            continue;
        }
        let removed = if meta.is_dir() {
            std::fs::remove_dir_all(&path)
        } else {
            std::fs::remove_file(&path)
        };
        match removed {
            Ok(()) => tracing::info!(path = %rel, "removed what a killed restore left"),
            Err(e) => {
                tracing::debug!(path = %rel, error = %e, "a killed restore's temporary stays")
            }
        }
    }
}

/// The files under `dirs` (workspace-relative directories or files; `""` is the whole
/// workspace), listed the way [`enumerate`] listed the workspace as `source`: `git ls-files`
/// limited to those paths, or the same walk started there. For rechecking one task's inputs
/// after it ran without listing the whole workspace again. Sorted, de-duplicated.
pub fn enumerate_under(
    root: &Path,
    nested_repos: &[String],
    source: Option<ListSource>,
    dirs: &[String],
) -> Result<Vec<String>, FilesError> {
    use prova_protocol::globs::is_within;
    let mut files = Vec::new();
    if dirs.is_empty() {
        return Ok(files);
    }
    if source == Some(ListSource::Git) {
        files = ls_files(root, "", dirs)?;
        for repo in nested_repos {
            files.retain(|f| !is_within(f, repo));
            // The part of the nested repository the paths reach, relative to it.
            let inner: Vec<String> = dirs
                .iter()
                .filter_map(|d| {
                    if is_within(repo, d) {
                        Some(String::new())
                    } else if is_within(d, repo) {
                        Some(d[repo.len() + 1..].to_owned())
                    } else {
                        None
                    }
                })
                .collect();
            if !inner.is_empty() {
                files.extend(ls_files(&root.join(repo), repo, &inner)?);
            }
        }
    } else {
        for dir in dirs {
            // The whole-workspace walk skips these at any depth below the root; so does this.
            let skipped =
                |f: &str| f.split('/').any(|c| c == ".git" || c == ".prova" || c == "node_modules");
            files.extend(walk(root, &root.join(dir))?.into_iter().filter(|f| !skipped(f)));
        }
    }
    remove_restore_temps(root, &mut files, false);
    Ok(sorted(files))
}

/// The files under `dirs` (workspace-relative) that git tracks — in the workspace's
/// repository or a nested one ([`enumerate`]'s `nested_repos`) — whatever `.gitignore` says:
/// what no clean or restore may delete (issue 27). Sorted, de-duplicated.
pub fn tracked_under(
    root: &Path,
    nested_repos: &[String],
    dirs: &[String],
) -> Result<Vec<String>, FilesError> {
    use prova_protocol::globs::is_within;
    if dirs.is_empty() {
        return Ok(Vec::new());
    }
    let mut files = git_ls(root, "", dirs, false)?;
    for repo in nested_repos {
        files.retain(|f| !is_within(f, repo));
        let inner: Vec<String> = dirs
            .iter()
            .filter_map(|d| {
                if is_within(repo, d) {
                    Some(String::new())
                } else if is_within(d, repo) {
                    Some(d[repo.len() + 1..].to_owned())
                } else {
                    None
                }
            })
            .collect();
        if !inner.is_empty() {
            files.extend(git_ls(&root.join(repo), repo, &inner, false)?);
        }
    }
    Ok(sorted(files))
}

/// Whether git could take `root` for (part of) a work tree: a `.git` at or above it, or git's
/// own variables set. `false` means git would find no repository, so it is not asked.
fn may_be_git(root: &Path) -> bool {
    std::env::var_os("GIT_DIR").is_some()
        || std::env::var_os("GIT_WORK_TREE").is_some()
        || root.ancestors().any(|d| std::fs::symlink_metadata(d.join(".git")).is_ok())
}

fn in_git_work_tree(root: &Path) -> bool {
    Command::new("git")
        .arg("-C")
        .arg(root)
        .args(["rev-parse", "--is-inside-work-tree"])
        .output()
        .map(|o| o.status.success() && o.stdout.starts_with(b"true"))
        .unwrap_or(false)
}

/// `git ls-files` in `dir`, names prefixed with `prefix`; limited to `paths` (relative to
/// `dir`, taken literally) unless it is empty or holds `""` (everything).
fn ls_files(dir: &Path, prefix: &str, paths: &[String]) -> Result<Vec<String>, FilesError> {
    git_ls(dir, prefix, paths, true)
}

/// [`ls_files`]; `others`: the untracked files git does not ignore too (else tracked only).
fn git_ls(
    dir: &Path,
    prefix: &str,
    paths: &[String],
    others: bool,
) -> Result<Vec<String>, FilesError> {
    let fail = |message: String| FilesError::Git { dir: dir.display().to_string(), message };
    let mut cmd = Command::new("git");
    cmd.arg("-C").arg(dir).args([
        "--literal-pathspecs",
        "-c",
        "core.quotepath=off",
        "ls-files",
        "-z",
        "--cached",
    ]);
    if others {
        cmd.args(["--others", "--exclude-standard"]);
    }
    if !paths.iter().any(String::is_empty) {
        cmd.arg("--").args(paths);
    }
    let out = cmd.output().map_err(|e| fail(e.to_string()))?;
    if !out.status.success() {
        return Err(fail(String::from_utf8_lossy(&out.stderr).trim().to_owned()));
    }
    let mut files = Vec::new();
    for raw in out.stdout.split(|&b| b == 0).filter(|s| !s.is_empty()) {
        // A non-UTF-8 name cannot be matched by a glob or named in a key component; skipping
        // it would leave it out of every key, so it is refused.
        let Ok(name) = std::str::from_utf8(raw) else {
            let lossy = String::from_utf8_lossy(raw);
            return Err(FilesError::NotUtf8 {
                path: prova_protocol::globs::join_rel(prefix, &lossy),
            });
        };
        files.push(prova_protocol::globs::join_rel(prefix, name));
    }
    Ok(files)
}

/// The files under `start` (the workspace `root` or a path in it), relative to `root`.
fn walk(root: &Path, start: &Path) -> Result<Vec<String>, FilesError> {
    let mut files = Vec::new();
    if std::fs::symlink_metadata(start).is_err() {
        return Ok(files);
    }
    let walker = ignore::WalkBuilder::new(start)
        .hidden(false)
        .require_git(false)
        .git_global(false)
        .git_exclude(false)
        .follow_links(false)
        .filter_entry(|e| {
            let name = e.file_name();
            !(e.depth() > 0 && (name == ".git" || name == ".prova" || name == "node_modules"))
        })
        .build();
    for entry in walker {
        let entry = entry.map_err(|e| FilesError::Walk {
            dir: root.display().to_string(),
            message: e.to_string(),
        })?;
        if entry.file_type().is_some_and(|t| !t.is_dir()) {
            let Ok(rel) = entry.path().strip_prefix(root) else { continue };
            let Some(rel) = rel.to_str() else {
                return Err(FilesError::NotUtf8 { path: rel.to_string_lossy().into_owned() });
            };
            files.push(rel.to_owned());
        }
    }
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn under_uses_directory_boundaries() {
        let l = FileList::from_paths(
            ["a/x", "ab/y", "a/b/z", "b", ".prova/cache/q", ".git/HEAD"].map(String::from).to_vec(),
        );
        assert_eq!(l.under("a"), ["a/b/z", "a/x"]);
        assert_eq!(l.under("ab"), ["ab/y"]);
        assert_eq!(l.under("c"), [] as [String; 0]);
        assert_eq!(l.all().len(), 4);
    }

    #[test]
    fn walk_honours_gitignore_outside_git() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(d.path().join("p/dist")).unwrap();
        std::fs::write(d.path().join(".gitignore"), "dist/\n").unwrap();
        std::fs::write(d.path().join("p/a.txt"), "a").unwrap();
        std::fs::write(d.path().join("p/dist/out"), "o").unwrap();
        std::fs::write(d.path().join("p/.env"), "x").unwrap();
        let l = enumerate(d.path(), &[]).unwrap();
        assert_eq!(l.source, Some(ListSource::Walk));
        assert_eq!(l.all(), [".gitignore", "p/.env", "p/a.txt"]);
    }

    fn write(root: &Path, rel: &str) {
        let p = root.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, rel).unwrap();
    }

    fn git(dir: &Path, args: &[&str]) {
        let ok = Command::new("git").arg("-C").arg(dir).args(args).status().unwrap().success();
        assert!(ok, "git {args:?} in {}", dir.display());
    }

    /// A workspace with an ignored directory, a file outside the listed paths, a path with
    /// glob metacharacters, and a nested repository.
    fn tree(root: &Path) {
        std::fs::write(root.join(".gitignore"), "dist/\n").unwrap();
        for f in ["p/a.txt", "p/dist/out", "p/s[1]/b.txt", "q/c.txt", "n/d.txt", "p/node_modules/m"]
        {
            write(root, f);
        }
    }

    #[test]
    fn enumerate_under_lists_what_enumerate_lists_under_the_paths_when_walking() {
        let d = tempfile::tempdir().unwrap();
        tree(d.path());
        let all = enumerate(d.path(), &[]).unwrap();
        let dirs = ["p".to_owned(), "n/d.txt".to_owned(), "missing".to_owned()];
        let under = enumerate_under(d.path(), &[], all.source, &dirs).unwrap();
        assert_eq!(under, ["n/d.txt", "p/a.txt", "p/s[1]/b.txt"]);
        let whole = enumerate_under(d.path(), &[], all.source, &[String::new()]).unwrap();
        assert_eq!(whole, all.all());
        assert!(enumerate_under(d.path(), &[], all.source, &[]).unwrap().is_empty());
    }

    /// A file named `p/bad\xff.txt` (not UTF-8) beside a normal one.
    fn non_utf8_tree(root: &Path) {
        use std::os::unix::ffi::OsStrExt as _;
        write(root, "p/a.txt");
        let name = std::ffi::OsStr::from_bytes(b"bad\xff.txt");
        std::fs::write(root.join("p").join(name), "x").unwrap();
    }

    #[test]
    fn a_non_utf8_name_is_refused_by_the_walk() {
        let d = tempfile::tempdir().unwrap();
        non_utf8_tree(d.path());
        let err = enumerate(d.path(), &[]).unwrap_err();
        assert!(matches!(&err, FilesError::NotUtf8 { path } if path == "p/bad\u{fffd}.txt"));
        assert!(err.to_string().starts_with("p/bad\u{fffd}.txt: the file name is not valid UTF-8"));
        let dirs = ["p".to_owned()];
        assert!(matches!(
            enumerate_under(d.path(), &[], Some(ListSource::Walk), &dirs),
            Err(FilesError::NotUtf8 { .. })
        ));
    }

    #[test]
    fn a_non_utf8_name_is_refused_in_git_tracked_or_not() {
        let d = tempfile::tempdir().unwrap();
        non_utf8_tree(d.path());
        git(d.path(), &["init", "-q"]);
        let err = enumerate(d.path(), &[]).unwrap_err();
        assert!(
            matches!(&err, FilesError::NotUtf8 { path } if path == "p/bad\u{fffd}.txt"),
            "{err}"
        );
        let dirs = ["p".to_owned()];
        assert!(matches!(
            enumerate_under(d.path(), &[], Some(ListSource::Git), &dirs),
            Err(FilesError::NotUtf8 { .. })
        ));
        // Ignored, it is no input and nothing is refused.
        std::fs::write(d.path().join(".gitignore"), "bad*\n").unwrap();
        assert_eq!(enumerate(d.path(), &[]).unwrap().all(), [".gitignore", "p/a.txt"]);
    }

    #[test]
    fn tracked_under_lists_only_what_git_tracks_ignored_or_not() {
        let d = tempfile::tempdir().unwrap();
        tree(d.path());
        git(d.path(), &["init", "-q"]);
        git(&d.path().join("n"), &["init", "-q"]);
        git(d.path(), &["add", "p/a.txt"]);
        git(d.path(), &["add", "-f", "p/dist/out"]);
        git(&d.path().join("n"), &["add", "d.txt"]);
        let nested = ["n".to_owned()];
        let dirs = ["p".to_owned(), "n".to_owned(), "q".to_owned()];
        // `p/s[1]/b.txt` and `q/c.txt` are untracked; `p/dist/out` is tracked though ignored.
        assert_eq!(
            tracked_under(d.path(), &nested, &dirs).unwrap(),
            ["n/d.txt", "p/a.txt", "p/dist/out"]
        );
        assert!(tracked_under(d.path(), &nested, &[]).unwrap().is_empty());
    }

    #[test]
    fn enumerate_under_lists_what_enumerate_lists_under_the_paths_in_git() {
        let d = tempfile::tempdir().unwrap();
        tree(d.path());
        git(d.path(), &["init", "-q"]);
        git(&d.path().join("n"), &["init", "-q"]);
        let nested = ["n".to_owned()];
        let all = enumerate(d.path(), &nested).unwrap();
        assert_eq!(all.source, Some(ListSource::Git));
        assert_eq!(all.nested_repos, nested);
        // `s[1]` is taken literally, not as a pattern; the nested repository is listed by
        // its own git.
        let dirs = ["p/s[1]".to_owned(), "n".to_owned(), "q/c.txt".to_owned()];
        let under = enumerate_under(d.path(), &nested, all.source, &dirs).unwrap();
        assert_eq!(under, ["n/d.txt", "p/s[1]/b.txt", "q/c.txt"]);
        let whole = enumerate_under(d.path(), &nested, all.source, &[String::new()]).unwrap();
        assert_eq!(whole, all.all());
    }
}
