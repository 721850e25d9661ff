//! Helpers shared by the artifact tests: building trees, hostile archives and checks that
//! nothing leaked out of a destination.

use std::fs;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use tar::{EntryType, Header};

use crate::globs::PathGlobs;

/// Compiles output globs of a project.
pub(crate) fn globs(dir: &str, pats: &[&str]) -> PathGlobs {
    PathGlobs::new(dir, &pats.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap()
}

/// Writes a file (creating parents) with a mode.
pub(crate) fn write(root: &Path, rel: &str, content: &[u8], mode: u32) {
    let p = root.join(rel);
    fs::create_dir_all(p.parent().unwrap()).unwrap();
    fs::write(&p, content).unwrap();
    fs::set_permissions(&p, fs::Permissions::from_mode(mode)).unwrap();
}

/// Creates a FIFO.
pub(crate) fn make_fifo(path: &Path) {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).unwrap();
    // SAFETY: `c` is a valid NUL-terminated path for the duration of the call.
    let rc = unsafe { libc::mkfifo(c.as_ptr(), 0o644) };
    assert_eq!(rc, 0, "mkfifo {}", path.display());
}

/// Sets a file's mtime (not following links) to `ns` since the epoch.
pub(crate) fn set_mtime(path: &Path, ns: i64) {
    super::set_mtime_nofollow(path, ns).unwrap();
}

/// Builds tar archives entry by entry with raw headers, so that names the `tar` crate's own
/// setters refuse (`..`, absolute) can be written.
pub(crate) struct EvilTar {
    out: Vec<u8>,
}

impl EvilTar {
    pub(crate) fn new() -> Self {
        Self { out: Vec::new() }
    }

    /// Appends one entry with the name and link name written verbatim into the header (GNU
    /// long-name entries are emitted first when they do not fit).
    pub(crate) fn entry(&mut self, name: &[u8], kind: EntryType, link: &[u8], data: &[u8]) {
        let mut h = Header::new_gnu();
        if name.len() > 100 {
            self.long(b'L', name);
            h.as_old_mut().name[..100].copy_from_slice(&name[..100]);
        } else {
            h.as_old_mut().name[..name.len()].copy_from_slice(name);
        }
        if link.len() > 100 {
            self.long(b'K', link);
            h.as_old_mut().linkname[..100].copy_from_slice(&link[..100]);
        } else {
            h.as_old_mut().linkname[..link.len()].copy_from_slice(link);
        }
        h.set_entry_type(kind);
        h.set_mode(0o644);
        h.set_size(data.len() as u64);
        h.set_cksum();
        self.raw(&h, data);
    }

    pub(crate) fn file(&mut self, name: &str, data: &[u8]) {
        self.entry(name.as_bytes(), EntryType::Regular, b"", data);
    }

    pub(crate) fn symlink(&mut self, name: &str, target: &str) {
        self.entry(name.as_bytes(), EntryType::Symlink, target.as_bytes(), b"");
    }

    /// A GNU long name (`L`) or long link (`K`) extension entry.
    pub(crate) fn long(&mut self, kind: u8, value: &[u8]) {
        let mut h = Header::new_gnu();
        h.as_old_mut().name[..13].copy_from_slice(b"././@LongLink");
        h.set_entry_type(EntryType::new(kind));
        h.set_mode(0o644);
        let mut data = value.to_vec();
        data.push(0);
        h.set_size(data.len() as u64);
        h.set_cksum();
        self.raw(&h, &data);
    }

    /// Appends a prepared header and its data, padded to a block.
    pub(crate) fn raw(&mut self, h: &Header, data: &[u8]) {
        self.out.extend_from_slice(h.as_bytes());
        self.out.extend_from_slice(data);
        let pad = (512 - data.len() % 512) % 512;
        self.out.extend(std::iter::repeat_n(0u8, pad));
    }

    /// The tar (with its end-of-archive blocks) compressed with zstd.
    pub(crate) fn zst(mut self) -> Vec<u8> {
        self.out.extend([0u8; 1024]);
        let mut enc = zstd::Encoder::new(Vec::new(), 3).unwrap();
        enc.write_all(&self.out).unwrap();
        enc.finish().unwrap()
    }
}

/// The names directly inside `dir`, sorted.
pub(crate) fn listing(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// Collects `pats` (of project `p`) from `src`, packs, and unpacks into a fresh staging dir
/// under `ws/.prova/tmp`, as a restore would: the manifest and the staging dir.
pub(crate) fn stage(
    src: &Path,
    pats: &[&str],
    ws: &Path,
) -> (crate::manifest::OutputManifest, tempfile::TempDir) {
    use crate::artifact::{UnpackLimits, check_unpacked, collect_outputs, pack, unpack};
    let m = collect_outputs(src, &globs("p", pats)).unwrap();
    let mut bytes = Vec::new();
    pack(src, &m, &mut bytes, 3).unwrap();
    let tmp = ws.join(".prova/tmp");
    fs::create_dir_all(&tmp).unwrap();
    let staging = tempfile::Builder::new().prefix("stage-").tempdir_in(&tmp).unwrap();
    let unpacked =
        unpack(&bytes[..], staging.path(), &UnpackLimits::new(vec!["p".to_owned()])).unwrap();
    check_unpacked(&unpacked, &m).unwrap();
    (m, staging)
}
