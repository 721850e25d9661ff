//! Where a lookup really led. The trace gives each path as the task wrote it, and the
//! analysis resolves `.` and `..` lexically; the kernel follows every symlink on the way. A
//! task that opens `../a/dist/cfg`, a link an upstream left among its outputs to
//! `../cfg.json`, reads `a/cfg.json` — a file the root shows only as an empty stand-in, or
//! not at all — while the lexical path names a declared upstream output. So each lookup under
//! the root is also followed through the symlinks the root (or, for a survey, the workspace
//! it shows at the root's path) holds, as the kernel would: every component but the last
//! always, the last unless the call does not follow it (`lstat`, `readlink`,
//! `AT_SYMLINK_NOFOLLOW`, `O_NOFOLLOW`), `..` after a link taken from where the link led.

use std::collections::HashMap;
use std::fs;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

use super::{normalize, strip_root};

/// Most symlinks one lookup follows (the kernel's own limit is 40).
const MAX_HOPS: usize = 40;

/// Most paths whose kind is remembered; past it each further one is looked up afresh.
const MAX_MEMO: usize = 1 << 18;

/// The symlinks under one root, read from the host directory that shows what the task saw
/// there, each looked up once.
pub(super) struct Links {
    /// The host directory whose entries the task saw at the root.
    view: PathBuf,
    /// The root as the task saw it, normalised (absolute link targets are mapped from it).
    root: Vec<u8>,
    /// Root-relative path → its target when it is a symlink, `None` when it is not one (or
    /// is not there).
    memo: HashMap<Vec<u8>, Option<Vec<u8>>>,
}

impl Links {
    pub(super) fn new(view: &Path, root: &[u8]) -> Self {
        Self { view: view.to_owned(), root: root.to_owned(), memo: HashMap::new() }
    }

    /// The root-relative path a lookup of root-relative `rel` leads to, symlinks followed
    /// (the last component's only when `follow_last`). `None` when no symlink is on the
    /// way (the lexical path is the real one), when a link leads out of the root, or past
    /// [`MAX_HOPS`] links.
    pub(super) fn physical(&mut self, rel: &[u8], follow_last: bool) -> Option<Vec<u8>> {
        // Components still to walk, last first (so a link's target is pushed in front), and
        // the path walked so far with where each of its components starts.
        let mut todo: Vec<Vec<u8>> = rel.split(|&b| b == b'/').rev().map(<[u8]>::to_vec).collect();
        let mut done: Vec<u8> = Vec::with_capacity(rel.len());
        let mut starts: Vec<usize> = Vec::new();
        let pop = |done: &mut Vec<u8>, starts: &mut Vec<usize>| {
            if let Some(at) = starts.pop() {
                done.truncate(at.saturating_sub(1));
            }
        };
        let mut hops = 0;
        while let Some(c) = todo.pop() {
            match c.as_slice() {
                b"" | b"." => continue,
                b".." => {
                    pop(&mut done, &mut starts);
                    continue;
                }
                _ => {}
            }
            if !done.is_empty() {
                done.push(b'/');
            }
            starts.push(done.len());
            done.extend_from_slice(&c);
            if todo.iter().all(|c| c.is_empty() || c == b".") && !follow_last {
                break;
            }
            let Some(target) = self.link_at(&done) else { continue };
            hops += 1;
            if hops > MAX_HOPS {
                return None;
            }
            pop(&mut done, &mut starts);
            if target.starts_with(b"/") {
                let inside = strip_root(&normalize(&target), &self.root)?.to_vec();
                done.clear();
                starts.clear();
                todo.extend(inside.split(|&b| b == b'/').rev().map(<[u8]>::to_vec));
            } else {
                todo.extend(target.split(|&b| b == b'/').rev().map(<[u8]>::to_vec));
            }
        }
        (hops > 0 && !done.is_empty()).then_some(done)
    }

    /// The target of the symlink at root-relative `rel`, if one is there.
    fn link_at(&mut self, rel: &[u8]) -> Option<Vec<u8>> {
        if let Some(known) = self.memo.get(rel) {
            return known.clone();
        }
        let host = self.view.join(Path::new(std::ffi::OsStr::from_bytes(rel)));
        let target = match fs::symlink_metadata(&host) {
            Ok(m) if m.file_type().is_symlink() => {
                fs::read_link(&host).ok().map(|t| t.into_os_string().into_vec())
            }
            _ => None,
        };
        if self.memo.len() < MAX_MEMO {
            self.memo.insert(rel.to_vec(), target.clone());
        }
        target
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn links(root: &Path) -> Links {
        Links::new(root, &normalize(root.as_os_str().as_bytes()))
    }

    fn physical(l: &mut Links, rel: &str, follow: bool) -> Option<String> {
        l.physical(rel.as_bytes(), follow).map(|p| String::from_utf8(p).unwrap())
    }

    #[test]
    fn a_lookup_follows_the_links_on_its_way_as_the_kernel_does() {
        let t = tempfile::tempdir().unwrap();
        let r = t.path();
        fs::create_dir_all(r.join("a/dist")).unwrap();
        fs::create_dir_all(r.join("b/real/sub")).unwrap();
        symlink("../cfg.json", r.join("a/dist/cfg")).unwrap();
        symlink("../b/real", r.join("a/dir")).unwrap();
        symlink(r.join("b/real/sub"), r.join("a/abs")).unwrap();
        symlink("/usr/lib", r.join("a/out")).unwrap();
        symlink("loop2", r.join("a/loop1")).unwrap();
        symlink("loop1", r.join("a/loop2")).unwrap();
        let mut l = links(r);
        // The last component followed, or not.
        assert_eq!(physical(&mut l, "a/dist/cfg", true).as_deref(), Some("a/cfg.json"));
        assert_eq!(physical(&mut l, "a/dist/cfg", false), None);
        // A link on the way is followed either way; `..` after it is taken from its target.
        assert_eq!(physical(&mut l, "a/dir/sub/x", false).as_deref(), Some("b/real/sub/x"));
        assert_eq!(physical(&mut l, "a/dir/../y", true).as_deref(), Some("b/y"));
        // An absolute target inside the root is mapped back into it.
        assert_eq!(physical(&mut l, "a/abs/z", true).as_deref(), Some("b/real/sub/z"));
        // No link on the way, a link out of the root, a loop: the lexical path stands.
        assert_eq!(physical(&mut l, "b/real/sub/x", true), None);
        assert_eq!(physical(&mut l, "a/missing/x", true), None);
        assert_eq!(physical(&mut l, "a/out/libc.so", true), None);
        assert_eq!(physical(&mut l, "a/loop1", true), None);
    }
}
