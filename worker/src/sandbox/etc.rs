//! The sandbox's `/etc` as one prepared directory: copies of the host's `/etc` files among the
//! [`SYSTEM_RO_PATHS`] (the loader's cache, `passwd`, `hosts`, …, with a re-run's identity
//! files in place of the host's), its links into `/usr` made again, and an empty mount point
//! for each directory among them (`ssl`, `alternatives`), which is still bound from the host
//! on top. bubblewrap then makes one bind for those files instead of one each: every bind
//! is a dozen calls of bwrap's set-up, and under the tracer each call is two stops of the
//! traced sandbox (a 1,000-package hub edit runs ~80 traced sandboxes).
//!
//! A task reads exactly what the binds showed it: each file's bytes (a bind follows a
//! symlinked source, so a link that leaves `/usr` showed its target's bytes; the copy holds
//! them too), its permission bits, and the same links. The copy is named by a digest of
//! everything in it and read afresh for every sandbox, so a host file that changes (a new
//! `resolv.conf`, a user added) makes a new copy: a sandbox never sees a stale one. One
//! difference a task could see: a worker that is not root owns its copies, so inside the
//! user namespace they belong to the task's uid, where the host's root-owned files showed
//! the overflow uid (`nobody`); both are read-only mounts (a write is `EROFS` either way). Made
//! under a temporary name and renamed into place, so a concurrent sandbox sees the whole
//! copy or none.
//!
//! Not used ([`etc_view`] returns `None`, and bwrap binds each path as before) for a
//! determinism re-run (its hostname, and so its identity files, are its attempt's own: a copy
//! per re-run would pile up), where something else is mounted under `/etc` — a hidden place
//! covered there, a toolchain there, a stand-in file for a path the list does not name — or
//! where a listed path is neither a file, a directory nor a link (a FIFO, a socket).

use std::io;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use super::bwrap::{SYSTEM_RO_PATHS, SandboxConfig, SystemMount, host_entry, system_mount};

/// A prepared `/etc` ([`SandboxConfig::etc`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EtcView {
    /// The directory mounted read-only at `/etc`.
    pub dir: PathBuf,
    /// Host directories under `/etc` mounted read-only on top, each at its own path.
    pub binds: Vec<PathBuf>,
}

/// One entry of the copy.
#[derive(Debug, PartialEq, Eq)]
enum Item {
    /// A regular file: its bytes and permission bits.
    File(Vec<u8>, u32),
    /// A symlink with this target text.
    Symlink(String),
    /// An empty directory where a host directory is bound.
    MountPoint,
}

/// Largest file copied; a bigger one leaves the sandbox to bind each path.
const MAX_FILE_BYTES: u64 = 16 << 20;

/// The prepared `/etc` for a sandbox configured as `cfg` (its overlays under `/etc` folded
/// in), made under `dir` when it does not exist yet; `None` where it cannot stand in for
/// the binds (module doc).
pub fn etc_view(dir: &Path, cfg: &SandboxConfig) -> io::Result<Option<EtcView>> {
    // A determinism re-run's hostname (and so its identity files) is its attempt's own: a
    // copy each would pile up. Its few binds stay.
    if cfg.hostname.is_some() || cfg.uid.is_some() {
        return Ok(None);
    }
    let under_etc = |p: &Path| p.starts_with("/etc");
    if cfg.masked.iter().any(|m| under_etc(m)) || cfg.extra_ro.iter().any(|e| under_etc(e)) {
        return Ok(None);
    }
    let listed: Vec<&str> =
        SYSTEM_RO_PATHS.iter().copied().filter(|p| p.starts_with("/etc/")).collect();
    if cfg
        .overlays
        .iter()
        .any(|(_, inside)| under_etc(inside) && !listed.iter().any(|p| inside == Path::new(p)))
    {
        return Ok(None);
    }
    let mut items: Vec<(&str, Item)> = Vec::new();
    let mut binds = Vec::new();
    for p in listed {
        let name = p.trim_start_matches("/etc/");
        if let Some((host, _)) = cfg.overlays.iter().find(|(_, inside)| inside == Path::new(p)) {
            match file_item(host)? {
                Some(item) => items.push((name, item)),
                None => return Ok(None),
            }
            continue;
        }
        match system_mount(p, host_entry(p), cfg) {
            SystemMount::Absent => {}
            SystemMount::Symlink(target) => items.push((name, Item::Symlink(target))),
            SystemMount::Bind => match std::fs::metadata(p) {
                // A dangling link: `--ro-bind-try` showed nothing there either.
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
                Ok(m) if m.is_dir() => {
                    items.push((name, Item::MountPoint));
                    binds.push(PathBuf::from(p));
                }
                Ok(_) => match file_item(Path::new(p))? {
                    Some(item) => items.push((name, item)),
                    None => return Ok(None),
                },
            },
        }
    }
    let digest = prova_protocol::Digest::of(&encode(&items)).to_hex();
    let view = dir.join(format!("etc-{}", &digest[..32]));
    if !view.is_dir() {
        make(dir, &view, &items)?;
    }
    Ok(Some(EtcView { dir: view, binds }))
}

/// A regular file's item (following links, as a bind does); `None` for anything else, or
/// one too large to copy.
fn file_item(p: &Path) -> io::Result<Option<Item>> {
    let m = std::fs::metadata(p)?;
    if !m.is_file() || m.len() > MAX_FILE_BYTES {
        return Ok(None);
    }
    let bytes = std::fs::read(p)?;
    Ok(Some(Item::File(bytes, m.permissions().mode() & 0o7777)))
}

/// Everything the copy holds, as bytes to name it by.
fn encode(items: &[(&str, Item)]) -> Vec<u8> {
    let mut out = b"prova etc view 1\0".to_vec();
    for (name, item) in items {
        out.extend_from_slice(name.as_bytes());
        out.push(0);
        match item {
            Item::File(bytes, mode) => {
                out.push(b'f');
                out.extend_from_slice(&mode.to_le_bytes());
                out.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
                out.extend_from_slice(bytes);
            }
            Item::Symlink(target) => {
                out.push(b'l');
                out.extend_from_slice(&(target.len() as u64).to_le_bytes());
                out.extend_from_slice(target.as_bytes());
            }
            Item::MountPoint => out.push(b'd'),
        }
    }
    out
}

/// Writes `items` into a new directory under `dir` and renames it to `view`; one that
/// another sandbox renamed there first is as good.
fn make(dir: &Path, view: &Path, items: &[(&str, Item)]) -> io::Result<()> {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    std::fs::create_dir_all(dir)?;
    let name = view.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let tmp = dir.join(format!(".{name}-{}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    let written = (|| {
        std::fs::DirBuilder::new().mode(0o755).create(&tmp)?;
        for (name, item) in items {
            let at = tmp.join(name);
            match item {
                Item::File(bytes, mode) => {
                    std::fs::write(&at, bytes)?;
                    std::fs::set_permissions(&at, std::fs::Permissions::from_mode(*mode))?;
                }
                Item::Symlink(target) => std::os::unix::fs::symlink(target, &at)?,
                Item::MountPoint => std::fs::DirBuilder::new().mode(0o755).create(&at)?,
            }
        }
        // The umask may have narrowed the directory's own bits.
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o755))?;
        std::fs::rename(&tmp, view)
    })();
    match written {
        Ok(()) => Ok(()),
        Err(_) if view.is_dir() => {
            let _ = std::fs::remove_dir_all(&tmp);
            Ok(())
        }
        Err(e) => {
            let _ = std::fs::remove_dir_all(&tmp);
            Err(e)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listed() -> impl Iterator<Item = &'static str> {
        SYSTEM_RO_PATHS.iter().copied().filter(|p| p.starts_with("/etc/"))
    }

    #[test]
    fn the_copy_holds_the_hosts_bytes_modes_and_links_and_mount_points_for_directories() {
        let t = tempfile::tempdir().expect("dir");
        let cfg = SandboxConfig::new("/w/root", "/w/root/p");
        let v = etc_view(t.path(), &cfg).expect("view").expect("applies");
        for p in listed() {
            let name = p.trim_start_matches("/etc/");
            let copy = v.dir.join(name);
            match system_mount(p, host_entry(p), &cfg) {
                SystemMount::Absent => assert!(copy.symlink_metadata().is_err(), "{p}"),
                SystemMount::Symlink(t) => {
                    assert_eq!(std::fs::read_link(&copy).expect("link").to_string_lossy(), t)
                }
                SystemMount::Bind => match std::fs::metadata(p) {
                    Err(_) => assert!(copy.symlink_metadata().is_err(), "{p}"),
                    Ok(m) if m.is_dir() => {
                        assert!(v.binds.contains(&PathBuf::from(p)), "{p} bound on top");
                        let inside = std::fs::read_dir(&copy).expect("mount point").count();
                        assert_eq!(inside, 0, "{p}: an empty mount point");
                    }
                    Ok(m) => {
                        let c = std::fs::symlink_metadata(&copy).expect("copied");
                        assert!(c.is_file(), "{p}");
                        assert_eq!(
                            c.permissions().mode() & 0o7777,
                            m.permissions().mode() & 0o7777
                        );
                        assert_eq!(std::fs::read(&copy).ok(), std::fs::read(p).ok(), "{p}");
                    }
                },
            }
        }
        // Nothing else of the host's /etc.
        let names: Vec<String> = std::fs::read_dir(&v.dir)
            .expect("dir")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        for n in &names {
            assert!(listed().any(|p| p == format!("/etc/{n}")), "{n} is not a system path");
        }
        // Asked again: the same copy, nothing new made.
        let again = etc_view(t.path(), &cfg).expect("view").expect("applies");
        assert_eq!(again, v);
        assert_eq!(std::fs::read_dir(t.path()).expect("dir").count(), 1);
    }

    #[test]
    fn stand_in_files_replace_the_hosts_and_name_another_copy() {
        let t = tempfile::tempdir().expect("dir");
        let plain = SandboxConfig::new("/w/root", "/w/root/p");
        let base = etc_view(t.path(), &plain).expect("view").expect("applies");
        let stand_in = t.path().join("hosts-x");
        std::fs::write(&stand_in, "127.0.0.1 sbx\n").expect("write");
        let mut cfg = plain.clone();
        cfg.overlays = vec![(stand_in.clone(), PathBuf::from("/etc/hosts"))];
        let v = etc_view(t.path(), &cfg).expect("view").expect("applies");
        assert_ne!(v.dir, base.dir, "other bytes, another copy");
        assert_eq!(std::fs::read_to_string(v.dir.join("hosts")).expect("hosts"), "127.0.0.1 sbx\n");
        // The host file changing is a new copy too.
        std::fs::write(&stand_in, "127.0.0.1 other\n").expect("write");
        let changed = etc_view(t.path(), &cfg).expect("view").expect("applies");
        assert_ne!(changed.dir, v.dir);
        assert_eq!(
            std::fs::read_to_string(changed.dir.join("hosts")).expect("hosts"),
            "127.0.0.1 other\n"
        );
        // The earlier copy is left as it was: a sandbox may be using it.
        assert_eq!(std::fs::read_to_string(v.dir.join("hosts")).expect("hosts"), "127.0.0.1 sbx\n");
    }

    #[test]
    fn anything_else_mounted_under_etc_leaves_the_sandbox_to_bind_each_path() {
        let t = tempfile::tempdir().expect("dir");
        let base = SandboxConfig::new("/w/root", "/w/root/p");
        let mut masked = base.clone();
        masked.masked = vec![PathBuf::from("/etc/app")];
        assert_eq!(etc_view(t.path(), &masked).expect("view"), None);
        let mut tool = base.clone();
        tool.extra_ro = vec![PathBuf::from("/etc/tools/bin")];
        assert_eq!(etc_view(t.path(), &tool).expect("view"), None);
        let mut other = base.clone();
        other.overlays = vec![(t.path().join("x"), PathBuf::from("/etc/shadow"))];
        assert_eq!(etc_view(t.path(), &other).expect("view"), None);
        // A stand-in that is not a regular file.
        let mut fifo = base.clone();
        fifo.overlays = vec![(t.path().to_path_buf(), PathBuf::from("/etc/hosts"))];
        assert_eq!(etc_view(t.path(), &fifo).expect("view"), None);
        // A re-run's own hostname or uid.
        let mut rerun = base.clone();
        rerun.hostname = Some("prova-rerun-7".to_owned());
        assert_eq!(etc_view(t.path(), &rerun).expect("view"), None);
        let mut user = base;
        user.uid = Some(4242);
        assert_eq!(etc_view(t.path(), &user).expect("view"), None);
        assert_eq!(std::fs::read_dir(t.path()).expect("dir").count(), 0, "nothing made");
    }
}
