//! A task's declared outputs on disk: removing them before an attempt (so nothing stale is
//! mistaken for an output), and collecting, fingerprinting and packing them after.
//!
//! Cleaning never follows a symlink in any path component: the walk is fd-relative
//! ([`prova_protocol::artifact::nofollow`]), entries are removed with `unlinkat`. If a
//! directory on the way to an output root is a symlink (`dist -> /somewhere/else` with
//! `outputs = ["dist/gen/**"]`), or the root itself is a symlink its globs do not select,
//! nothing is cleaned and the attempt fails with "output dir `web/dist` is a symlink; prova
//! does not write through symlinks": running the task would write its outputs through the
//! link, outside what prova cleans, collects and restores. A symlink the globs select is an
//! output itself and is removed (the link, not its target).

use std::collections::HashSet;
use std::ffi::OsStr;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use prova_protocol::artifact::nofollow::{self, DirFd, Kind, Parent};
use prova_protocol::artifact::{self, ArtifactError};
use prova_protocol::globs::{PathGlobs, join_rel};
use prova_protocol::work::{Outputs, ProtectedPath};

/// Collecting or packing failed.
#[derive(Debug, thiserror::Error)]
pub enum OutputError {
    /// A file system operation failed.
    #[error("{path}: {source}")]
    Io {
        /// The path.
        path: PathBuf,
        /// What failed.
        source: io::Error,
    },
    /// The artifact module refused.
    #[error(transparent)]
    Artifact(#[from] artifact::ArtifactError),
    /// The outputs hold what every restore refuses (a symlink pointing outside the task's
    /// project): saving them would make an entry that is "corrupt" on every hit.
    #[error("{0}; not saved, a restore would refuse it")]
    Unconfined(#[from] artifact::confine::ConfineError),
    /// Writing the archive failed (an unwritable staging dir): a failure of where it was
    /// packed, not of the task's outputs. The partial archive is removed.
    #[error("packing the outputs failed: {0}")]
    Pack(Box<OutputError>),
    /// The disk filled up while the archive was written (`ENOSPC`, `EDQUOT`): the worker's
    /// fault, never the task's — and never a "corrupt artifact". The partial archive is
    /// removed.
    #[error("disk full while packing outputs to {} ({what})", path.display())]
    DiskFull {
        /// The archive being written.
        path: PathBuf,
        /// What the write met: `No space left on device`, `Disk quota exceeded`.
        what: &'static str,
    },
    /// The outputs' globs match a file no clean may delete ([`ProtectedPath`]); nothing was
    /// deleted.
    #[error(
        "will not delete `{}`: {}{}; prova never deletes a file git tracks or a task's declared \
         input, whatever `outputs` says — narrow the task's `outputs` to what it writes (or \
         stop tracking a generated file: `git rm --cached`)",
        first.path, first.why, more_files(*more)
    )]
    Protected {
        /// The first protected file the clean met (by path).
        first: ProtectedPath,
        /// How many more.
        more: usize,
    },
}

fn more_files(n: usize) -> String {
    match n {
        0 => String::new(),
        1 => " (and 1 more file)".to_owned(),
        n => format!(" (and {n} more files)"),
    }
}

/// Removes every existing path that matches `globs` under `root` (files, symlinks, and
/// directories left empty), without following symlinks in any component; a symlinked
/// directory on the way to a root is refused (see the module doc). When `globs` match an
/// existing `protected` path, nothing is removed at all ([`OutputError::Protected`]); the
/// walk itself never unlinks one either.
pub fn clean(
    root: &Path,
    globs: &PathGlobs,
    protected: &[ProtectedPath],
) -> Result<(), OutputError> {
    let io_at = |rel: &str| {
        let path = root.join(rel);
        move |source| OutputError::Io { path, source }
    };
    let mut met = protected
        .iter()
        .filter(|p| globs.is_match(&p.path))
        .filter(|p| matches!(nofollow::lstat_beneath(root, &p.path), Ok(Some(_))));
    if let Some(first) = met.next() {
        return Err(OutputError::Protected { first: first.clone(), more: met.count() });
    }
    let keep: HashSet<&str> = protected.iter().map(|p| p.path.as_str()).collect();
    let top = DirFd::open_root(root).map_err(io_at(""))?;
    let c = Cleaner { root, globs, keep };
    for r in globs.roots() {
        if r.is_empty() {
            // The whole workspace: never removed itself.
            c.clean_dir(&top, "")?;
            continue;
        }
        let (dir, name) = match nofollow::parent_of(&top, r).map_err(io_at(r))? {
            Parent::Dir(d, n) => (d, n),
            Parent::Missing => continue,
            Parent::Symlink(path) => return Err(ArtifactError::SymlinkedOutputDir { path }.into()),
        };
        let Some(st) = dir.stat(&name).map_err(io_at(r))? else { continue };
        match st.kind {
            Kind::Dir => c.clean_entry(&dir, &name, r, Some(Kind::Dir))?,
            Kind::Symlink if !globs.is_match(r) => {
                return Err(ArtifactError::SymlinkedOutputDir { path: r.clone() }.into());
            }
            k => c.clean_entry(&dir, &name, r, Some(k))?,
        };
    }
    Ok(())
}

struct Cleaner<'a> {
    root: &'a Path,
    globs: &'a PathGlobs,
    /// Never unlinked, whatever the globs say.
    keep: HashSet<&'a str>,
}

impl Cleaner<'_> {
    fn io(&self, rel: &str) -> impl FnOnce(io::Error) -> OutputError {
        let path = self.root.join(rel);
        move |source| OutputError::Io { path, source }
    }

    /// Cleans `name` of `dir` (workspace-relative `rel`): a real directory is walked (an
    /// exclusion such as `!dist/keep` may protect part of it) and removed if it ends up empty
    /// and is selected as a directory ([`PathGlobs::selects_dir`]: `out` itself of `out/**`,
    /// which a run that makes none must not find left over and collect); anything else is
    /// removed if selected. Whether it is gone.
    fn clean_entry(
        &self,
        dir: &DirFd,
        name: &OsStr,
        rel: &str,
        kind: Option<Kind>,
    ) -> Result<bool, OutputError> {
        if matches!(kind, Some(Kind::Dir) | None) {
            match dir.open_dir(name) {
                Ok(sub) => {
                    if self.clean_dir(&sub, rel)? && self.globs.selects_dir(rel) {
                        return match dir.rmdir(name) {
                            Ok(()) => Ok(true),
                            // A mount point (a container's volume at `dist`): emptied, kept.
                            Err(e) if nofollow::is_busy(&e) => Ok(false),
                            Err(e) => Err(self.io(rel)(e)),
                        };
                    }
                    return Ok(false);
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(true),
                // Not a real directory (any more): judged as the file or link it is.
                Err(e) if nofollow::is_not_a_dir(&e) => {}
                Err(e) => return Err(self.io(rel)(e)),
            }
        }
        if self.globs.is_match(rel) && !self.keep.contains(rel) {
            dir.unlink(name).map_err(self.io(rel))?;
            Ok(true)
        } else {
            Ok(false)
        }
    }

    /// Cleans inside the real directory `dir`; whether it is now empty.
    fn clean_dir(&self, dir: &DirFd, rel: &str) -> Result<bool, OutputError> {
        let mut empty = true;
        for (name, kind) in dir.entries().map_err(self.io(rel))? {
            let Some(s) = name.to_str() else {
                empty = false;
                continue;
            };
            let child = join_rel(rel, s);
            empty &= self.clean_entry(dir, &name, &child, kind)?;
        }
        Ok(empty)
    }
}

/// Collects the outputs under `root`, refuses them when a restore would (the same
/// [`check_manifest_confined`](artifact::confine::check_manifest_confined) every restore
/// applies, so an honest worker never reports what the coordinator refuses as a lie),
/// fingerprints them, and packs them to `pack_to` when given and there is something to pack (no outputs, no artifact: a task without outputs
/// costs no archive, fsync, upload or blob). Also returns the declared literal outputs that
/// do not exist.
pub fn collect(
    root: &Path,
    globs: &PathGlobs,
    project_dir: &str,
    pack_to: Option<&Path>,
) -> Result<(Outputs, Vec<String>), OutputError> {
    let manifest = artifact::collect_outputs(root, globs)?;
    artifact::confine::check_manifest_confined(&manifest, globs, project_dir)?;
    let missing = globs
        .literals()
        .iter()
        .filter(|l| !matches!(nofollow::lstat_beneath(root, l), Ok(Some(_))))
        .cloned()
        .collect();
    let fingerprint = manifest.fingerprint();
    let artifact = match pack_to {
        Some(path) if !manifest.entries.is_empty() => {
            let packed = pack_file(root, &manifest, path);
            if packed.is_err() {
                // Nothing half-written is left behind to fill the disk further.
                let _ = fs::remove_file(path);
            }
            Some(packed.map_err(|e| match crate::health::disk_full(&e) {
                Some(what) => OutputError::DiskFull { path: path.to_owned(), what },
                None => OutputError::Pack(Box::new(e)),
            })?)
        }
        _ => None,
    };
    Ok((Outputs { manifest, fingerprint, artifact }, missing))
}

/// Packs to `path` ([`artifact::pack_to_file`]); the archive file's own I/O errors stay
/// this module's `Io`.
fn pack_file(
    root: &Path,
    manifest: &prova_protocol::manifest::OutputManifest,
    path: &Path,
) -> Result<(prova_protocol::Digest, u64), OutputError> {
    artifact::pack_to_file(root, manifest, path, 3).map_err(|e| match e {
        ArtifactError::Io { path: p, source } if p == path => OutputError::Io { path: p, source },
        e => e.into(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_outputs_no_archive_and_outputs_are_packed() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        std::fs::create_dir_all(root.join("p/src")).unwrap();
        let globs = PathGlobs::new("p", &["dist/**".to_owned()]).unwrap();
        let pack = dir.path().join("a.tar.zst");

        let (outs, _) = collect(&root, &globs, "p", Some(&pack)).unwrap();
        assert!(outs.manifest.entries.is_empty());
        assert_eq!(outs.artifact, None);
        assert!(!pack.exists(), "an empty output set was packed");

        // An empty `dist` is an output of `dist/**`: the run made it.
        std::fs::create_dir_all(root.join("p/dist")).unwrap();
        let (outs, _) = collect(&root, &globs, "p", Some(&pack)).unwrap();
        assert_eq!(outs.manifest.entries.len(), 1);
        assert!(outs.artifact.is_some());

        std::fs::write(root.join("p/dist/out.txt"), "x").unwrap();
        let (outs, _) = collect(&root, &globs, "p", Some(&pack)).unwrap();
        let (_, size) = outs.artifact.expect("an artifact");
        assert_eq!(std::fs::metadata(&pack).unwrap().len(), size);
    }

    #[test]
    fn an_output_link_a_restore_would_refuse_is_not_collected() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        std::fs::create_dir_all(root.join("p/dist")).unwrap();
        let globs = PathGlobs::new("p", &["dist/**".to_owned()]).unwrap();
        let pack = dir.path().join("a.tar.zst");
        std::os::unix::fs::symlink("../src/a.ts", root.join("p/dist/in")).unwrap();
        collect(&root, &globs, "p", Some(&pack)).expect("inside the project: kept");
        for target in ["/etc/hostname", "../../q/src", "../../../x"] {
            let _ = std::fs::remove_file(root.join("p/dist/out"));
            std::os::unix::fs::symlink(target, root.join("p/dist/out")).unwrap();
            let err = collect(&root, &globs, "p", Some(&pack)).expect_err(target);
            assert!(matches!(err, OutputError::Unconfined(_)), "{target}: {err}");
            assert!(err.to_string().contains("p/dist/out"), "{err}");
        }
    }

    fn files_under(dir: &Path) -> Vec<String> {
        let mut out = Vec::new();
        let mut stack = vec![dir.to_owned()];
        while let Some(d) = stack.pop() {
            for e in std::fs::read_dir(&d).unwrap() {
                let e = e.unwrap();
                out.push(e.path().strip_prefix(dir).unwrap().display().to_string());
                if e.file_type().unwrap().is_dir() {
                    stack.push(e.path());
                }
            }
        }
        out.sort();
        out
    }

    #[test]
    fn clean_removes_the_empty_directories_it_would_collect() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        for d in ["p/out/a/b", "p/dist/keep", "p/gen/sub", "p/src"] {
            std::fs::create_dir_all(root.join(d)).unwrap();
        }
        std::fs::write(root.join("p/dist/keep/x.map"), "m").unwrap();
        std::fs::write(root.join("p/dist/a.js"), "a").unwrap();
        let pats = ["out/**", "dist/**", "!dist/**/*.map", "gen/*.ts"].map(str::to_owned);
        let globs = PathGlobs::new("p", &pats).unwrap();
        clean(root, &globs, &[]).unwrap();
        // `out` of `out/**` goes with what it held; what a left-out file keeps stays, and so
        // does what the globs never selected as a directory.
        assert_eq!(
            files_under(root),
            ["p", "p/dist", "p/dist/keep", "p/dist/keep/x.map", "p/gen", "p/gen/sub", "p/src"]
        );
        let (outs, _) = collect(root, &globs, "p", None).unwrap();
        assert!(outs.manifest.entries.is_empty(), "a clean leaves nothing to collect: {outs:?}");
    }

    #[test]
    fn clean_never_follows_a_symlink_in_any_component() {
        use std::os::unix::fs::symlink;
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(outside.path().join("gen/deep")).unwrap();
        std::fs::write(outside.path().join("gen/a"), "a").unwrap();
        std::fs::write(outside.path().join("gen/deep/b"), "b").unwrap();
        let canary = files_under(outside.path());
        let root = dir.path().join("root");
        std::fs::create_dir_all(root.join("p")).unwrap();

        // An ancestor of the root, and the root itself (not selected by its globs).
        symlink(outside.path(), root.join("p/dist")).unwrap();
        for pats in [&["dist/gen/**"][..], &["dist/**"], &["dist/gen/deep/*.txt"]] {
            let globs =
                PathGlobs::new("p", &pats.iter().map(|s| s.to_string()).collect::<Vec<_>>())
                    .unwrap();
            let err = clean(&root, &globs, &[]).unwrap_err();
            assert!(err.to_string().contains("`p/dist` is a symlink"), "{pats:?}: {err}");
            assert_eq!(files_under(outside.path()), canary);
        }
        // A selected link is removed itself.
        let globs = PathGlobs::new("p", &["dist".to_owned()]).unwrap();
        clean(&root, &globs, &[]).unwrap();
        assert!(std::fs::symlink_metadata(root.join("p/dist")).is_err());
        assert_eq!(files_under(outside.path()), canary);

        // Deeper: `p/dist/gen` a link, and a link inside the walked tree.
        std::fs::create_dir_all(root.join("p/dist/keep")).unwrap();
        std::fs::write(root.join("p/dist/keep/k"), "k").unwrap();
        std::fs::write(root.join("p/dist/x.js"), "x").unwrap();
        symlink(outside.path().join("gen"), root.join("p/dist/gen")).unwrap();
        let globs = PathGlobs::new("p", &["dist/gen/deep/**".to_owned()]).unwrap();
        let err = clean(&root, &globs, &[]).unwrap_err();
        assert!(err.to_string().contains("`p/dist/gen` is a symlink"), "{err}");
        let globs =
            PathGlobs::new("p", &["dist/**".to_owned(), "!dist/keep/**".to_owned()]).unwrap();
        clean(&root, &globs, &[]).unwrap();
        assert_eq!(files_under(outside.path()), canary);
        assert_eq!(files_under(&root.join("p/dist")), ["keep", "keep/k"]);
    }

    #[test]
    fn a_full_disk_while_packing_says_disk_full_not_corrupt() {
        // A 64 KiB tmpfs for the archive (tests run as root; skipped where mount is refused):
        // the disk fills up mid-pack.
        let dir = tempfile::tempdir().unwrap();
        let small = dir.path().join("small");
        std::fs::create_dir_all(&small).unwrap();
        let mounted = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=64k", "tmpfs"])
            .arg(&small)
            .output()
            .is_ok_and(|o| o.status.success());
        if !mounted {
            eprintln!("skipped: cannot mount a tmpfs here");
            return;
        }
        struct Unmount<'a>(&'a Path);
        impl Drop for Unmount<'_> {
            fn drop(&mut self) {
                let _ = std::process::Command::new("umount").arg("-l").arg(self.0).status();
            }
        }
        let _unmount = Unmount(&small);
        let root = dir.path().join("root");
        std::fs::create_dir_all(root.join("p/dist")).unwrap();
        // Incompressible bytes, well over the tmpfs.
        let mut x = 0x9e37_79b9_7f4a_7c15_u64;
        let bytes: Vec<u8> = (0..400_000)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        std::fs::write(root.join("p/dist/out.bin"), bytes).unwrap();
        let globs = PathGlobs::new("p", &["dist/**".to_owned()]).unwrap();
        let pack = small.join("artifact-1.tar.zst");
        let err = collect(&root, &globs, "p", Some(&pack)).expect_err("nothing fits");
        assert!(matches!(err, OutputError::DiskFull { .. }), "{err:?}");
        let text = err.to_string();
        assert!(text.starts_with("disk full while packing outputs"), "{text}");
        assert!(!text.contains("corrupt"), "{text}");
        assert!(!pack.exists(), "the partial archive is removed");
    }

    fn protect(path: &str, why: &str) -> ProtectedPath {
        ProtectedPath { path: path.to_owned(), why: why.to_owned() }
    }

    #[test]
    fn a_clean_that_meets_a_protected_file_deletes_nothing() {
        // Issue 27: `outputs = ["dist/**", "src/**"]` deleted the sources before the task ran.
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        for f in ["p/src/a.txt", "p/src/new.txt", "p/dist/old.js"] {
            std::fs::create_dir_all(root.join(f).parent().unwrap()).unwrap();
            std::fs::write(root.join(f), f).unwrap();
        }
        let before = files_under(&root);
        let globs = PathGlobs::new("p", &["dist/**".to_owned(), "src/**".to_owned()]).unwrap();
        let protected = [
            protect("p/src/a.txt", "git tracks it"),
            protect("p/src/new.txt", "it is an input of task `p#lint`"),
        ];
        let err = clean(&root, &globs, &protected).unwrap_err();
        assert!(matches!(err, OutputError::Protected { more: 1, .. }), "{err}");
        let msg = err.to_string();
        assert!(
            msg.starts_with("will not delete `p/src/a.txt`: git tracks it (and 1 more file)"),
            "{msg}"
        );
        assert_eq!(files_under(&root), before, "not even the stale output was deleted");
        // A protected path the globs do not match, or one that is gone, is no obstacle.
        let dist = PathGlobs::new("p", &["dist/**".to_owned()]).unwrap();
        clean(&root, &dist, &protected).unwrap();
        assert!(!root.join("p/dist/old.js").exists());
        let gone = [protect("p/src/gone.txt", "git tracks it")];
        clean(&root, &globs, &gone).unwrap();
        assert!(!root.join("p/src/a.txt").exists());
    }
}
