//! The workspace's file list, enumerated once per run: in a git work tree the tracked and
//! untracked-but-not-ignored files (`git ls-files --cached --others --exclude-standard`, one
//! call, plus one per project that is its own repository); elsewhere a walk that honours
//! `.gitignore`. `.git/` and `.prova/` are never inputs.

use std::path::Path;
use std::process::Command;

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
}

/// How the list was made (shown by `prova show`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// `git ls-files`.
    Git,
    /// A directory walk honouring `.gitignore`.
    Walk,
}

/// Sorted, de-duplicated workspace-relative file paths (`/`-separated). Entries may name
/// files deleted since git last saw them; the digest pass drops what it cannot stat.
#[derive(Clone, Debug, Default)]
pub struct FileList {
    files: Vec<String>,
    /// How it was made.
    pub source: Option<Source>,
}

impl FileList {
    /// A list from paths (sorted and de-duplicated here).
    pub fn from_paths(mut files: Vec<String>) -> Self {
        files.sort_unstable();
        files.dedup();
        files.retain(|f| !is_internal(f));
        Self { files, source: None }
    }

    /// All paths.
    pub fn all(&self) -> &[String] {
        &self.files
    }

    /// The paths under `dir` (workspace-relative; `""` = all), by binary search.
    pub fn under(&self, dir: &str) -> &[String] {
        if dir.is_empty() {
            return &self.files;
        }
        let prefix = format!("{dir}/");
        let start = self.files.partition_point(|f| f.as_str() < prefix.as_str());
        let end = start + self.files[start..].partition_point(|f| f.starts_with(&prefix));
        &self.files[start..end]
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
    if in_git_work_tree(root) {
        let mut files = ls_files(root, "")?;
        for dir in nested_repos {
            files.retain(|f| !prova_protocol::globs::is_within(f, dir));
            files.extend(ls_files(&root.join(dir), dir)?);
        }
        let mut list = FileList::from_paths(files);
        list.source = Some(Source::Git);
        Ok(list)
    } else {
        let mut list = FileList::from_paths(walk(root)?);
        list.source = Some(Source::Walk);
        Ok(list)
    }
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

fn ls_files(dir: &Path, prefix: &str) -> Result<Vec<String>, FilesError> {
    let fail = |message: String| FilesError::Git { dir: dir.display().to_string(), message };
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args([
            "-c",
            "core.quotepath=off",
            "ls-files",
            "-z",
            "--cached",
            "--others",
            "--exclude-standard",
        ])
        .output()
        .map_err(|e| fail(e.to_string()))?;
    if !out.status.success() {
        return Err(fail(String::from_utf8_lossy(&out.stderr).trim().to_owned()));
    }
    let mut files = Vec::new();
    for raw in out.stdout.split(|&b| b == 0).filter(|s| !s.is_empty()) {
        // A non-UTF-8 name cannot be matched by a glob or named in a key component: skip it
        // rather than guess an encoding (documented in the README).
        let Ok(name) = std::str::from_utf8(raw) else { continue };
        files.push(prova_protocol::globs::join_rel(prefix, name));
    }
    Ok(files)
}

fn walk(root: &Path) -> Result<Vec<String>, FilesError> {
    let mut files = Vec::new();
    let walker = ignore::WalkBuilder::new(root)
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
            let Some(rel) = rel.to_str() else { continue };
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
        assert_eq!(l.source, Some(Source::Walk));
        assert_eq!(l.all(), [".gitignore", "p/.env", "p/a.txt"]);
    }
}
