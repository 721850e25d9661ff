//! Looking at the local cache from the outside: keys and their components (`prova show
//! --json`), entry counts (`prova cache stats --json`), and the file facts a restore must get
//! right (bytes, modes, symlink targets, inodes, mtimes).

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
use std::path::Path;
use std::time::{Duration, SystemTime};

use serde_json::Value;

use crate::TempWorkspace;
use crate::run::ProvaCmd;

/// The component names of a key, as `prova show --json` prints them.
pub const COMPONENTS: [&str; 11] = [
    "version",
    "task",
    "command",
    "config",
    "env",
    "inputs",
    "workspace",
    "upstream",
    "upstream_outputs",
    "args",
    "platform",
];

/// A task's key as `prova show TASK --json` computes it: `key`, `cached` and `components`.
#[derive(Clone, Debug)]
pub struct Shown {
    /// The whole answer.
    pub json: Value,
}

impl Shown {
    /// `prova show TASK --json` with `cmd`'s environment (from [`TempWorkspace::prova`] with
    /// any `env`/`env_remove`); panics unless it exits 0.
    #[track_caller]
    pub fn of(cmd: ProvaCmd) -> Self {
        let out = cmd.run();
        out.assert_code(0);
        let json: Value = serde_json::from_str(&out.stdout)
            .unwrap_or_else(|e| panic!("`prova show --json` printed no JSON: {e}\n{out}"));
        assert!(json["key"].is_string(), "no key\n{out}");
        Self { json }
    }

    /// The key, hex.
    pub fn key(&self) -> &str {
        self.json["key"].as_str().unwrap_or_default()
    }

    /// Whether the cache holds an entry under this key.
    pub fn cached(&self) -> bool {
        self.json["cached"] == true
    }

    /// One component.
    pub fn component(&self, name: &str) -> &Value {
        &self.json["components"][name]
    }

    /// The names of the components that differ between `self` and `other`, in
    /// [`COMPONENTS`] order.
    pub fn moved(&self, other: &Shown) -> Vec<&'static str> {
        COMPONENTS.into_iter().filter(|c| self.component(c) != other.component(c)).collect()
    }

    /// The input file `path` (workspace-relative) of the components, if it is one.
    pub fn input(&self, path: &str) -> Option<&Value> {
        self.component("inputs").as_array()?.iter().find(|f| f["path"] == path)
    }
}

/// `prova show TASK --json` for `task` in `ws`, with no change to the environment.
#[track_caller]
pub fn show(ws: &TempWorkspace, task: &str) -> Shown {
    Shown::of(ws.prova(["show", task, "--json"]))
}

/// Entry rows in the cache (every namespace) by `prova cache stats --json`; `args` are extra
/// arguments (e.g. `--cache-dir`).
#[track_caller]
pub fn entry_count(ws: &TempWorkspace, args: &[&str]) -> u64 {
    let stats = cache_stats(ws, args);
    stats["entries"]
        .as_object()
        .unwrap_or_else(|| panic!("no entries map in {stats}"))
        .values()
        .map(|v| v.as_u64().unwrap_or_else(|| panic!("entry count {v} is not a number")))
        .sum()
}

/// `prova cache stats --json` (plus `args`), parsed.
#[track_caller]
pub fn cache_stats(ws: &TempWorkspace, args: &[&str]) -> Value {
    let mut all = vec!["cache", "stats", "--json"];
    all.extend_from_slice(args);
    let out = ws.prova(all).run();
    out.assert_code(0);
    serde_json::from_str(&out.stdout)
        .unwrap_or_else(|e| panic!("`prova cache stats --json` printed no JSON: {e}\n{out}"))
}

/// What a restore must reproduce of one path: its kind, permission bits, and bytes (files) or
/// target (symlinks). Never the mtime or inode.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Node {
    /// A regular file: mode (`0o7777` bits) and contents.
    File {
        /// Permission bits.
        mode: u32,
        /// The bytes.
        bytes: Vec<u8>,
    },
    /// A symbolic link and its target.
    Symlink(String),
    /// A directory.
    Dir,
}

/// Every path under `rel` (inclusive, workspace-relative) with what a restore must
/// reproduce, without following symlinks. Empty when `rel` does not exist.
pub fn snapshot(ws: &TempWorkspace, rel: &str) -> BTreeMap<String, Node> {
    let mut out = BTreeMap::new();
    walk(ws.root(), rel, &mut |rel, abs, meta| {
        let node = if meta.file_type().is_symlink() {
            let target = fs::read_link(abs).unwrap_or_else(|e| panic!("readlink {rel}: {e}"));
            Node::Symlink(target.to_string_lossy().into_owned())
        } else if meta.is_dir() {
            Node::Dir
        } else {
            let bytes = fs::read(abs).unwrap_or_else(|e| panic!("reading {rel}: {e}"));
            Node::File { mode: meta.permissions().mode() & 0o7777, bytes }
        };
        out.insert(rel.to_owned(), node);
    });
    out
}

/// The inode of every regular file and symlink under `rel`.
pub fn inodes(ws: &TempWorkspace, rel: &str) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    walk(ws.root(), rel, &mut |rel, _, meta| {
        if !meta.is_dir() {
            out.insert(rel.to_owned(), meta.ino());
        }
    });
    out
}

fn walk(root: &Path, rel: &str, f: &mut dyn FnMut(&str, &Path, &fs::Metadata)) {
    let abs = root.join(rel);
    let Ok(meta) = fs::symlink_metadata(&abs) else { return };
    f(rel, &abs, &meta);
    if meta.is_dir() {
        let mut names: Vec<String> = fs::read_dir(&abs)
            .unwrap_or_else(|e| panic!("listing {rel}: {e}"))
            .map(|e| e.expect("a directory entry").file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        for name in names {
            walk(root, &format!("{rel}/{name}"), f);
        }
    }
}

/// Sets the mtime of the regular file `path` (through an open handle, so never through a
/// symlink's target by accident: callers pass files).
pub fn set_mtime(path: &Path, when: SystemTime) {
    File::options()
        .write(true)
        .open(path)
        .and_then(|f| f.set_modified(when))
        .unwrap_or_else(|e| panic!("setting the mtime of {}: {e}", path.display()));
}

/// The mtime of `path` (not following a symlink).
pub fn mtime(path: &Path) -> SystemTime {
    fs::symlink_metadata(path)
        .and_then(|m| m.modified())
        .unwrap_or_else(|e| panic!("stat {}: {e}", path.display()))
}

/// Sets the mtime of every regular file of the workspace (outside `.prova/`) to `age` ago:
/// old enough that the digest memo trusts its rows (past the racy window).
pub fn age_files(ws: &TempWorkspace, age: Duration) {
    let when = SystemTime::now() - age;
    let mut files = Vec::new();
    let mut names: Vec<String> = fs::read_dir(ws.root())
        .expect("listing the workspace")
        .map(|e| e.expect("a directory entry").file_name().to_string_lossy().into_owned())
        .filter(|n| n != ".prova")
        .collect();
    names.sort();
    for name in names {
        walk(ws.root(), &name, &mut |_, abs, meta| {
            if meta.is_file() {
                files.push(abs.to_owned());
            }
        });
    }
    for f in files {
        set_mtime(&f, when);
    }
}

/// Sets the permission bits of `rel`.
pub fn chmod(ws: &TempWorkspace, rel: &str, mode: u32) {
    fs::set_permissions(ws.path(rel), fs::Permissions::from_mode(mode))
        .unwrap_or_else(|e| panic!("chmod {mode:o} {rel}: {e}"));
}

/// Rewrites `rel` with `from` replaced by `to`; panics if `from` is not in it (so a test that
/// means to change one thing cannot silently change nothing).
#[track_caller]
pub fn edit(ws: &TempWorkspace, rel: &str, from: &str, to: &str) {
    let text = ws.read(rel);
    assert!(text.contains(from), "{rel} does not contain {from:?}:\n{text}");
    ws.write(rel, &text.replacen(from, to, 1));
}

/// Every file under `dir` whose bytes, or whose zstd-decoded bytes (logs and artifacts are
/// compressed), hold `needle`.
pub fn files_holding(dir: &Path, needle: &str) -> Vec<String> {
    files_holding_bytes(dir, needle.as_bytes())
}

/// [`files_holding`] for a byte string (a raw digest, say).
pub fn files_holding_bytes(dir: &Path, needle: &[u8]) -> Vec<String> {
    let holds = |b: &[u8]| b.windows(needle.len()).any(|w| w == needle);
    let mut hits = Vec::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = fs::read_dir(&d) else { continue };
        for e in entries.flatten() {
            let p = e.path();
            let Ok(ft) = e.file_type() else { continue };
            if ft.is_dir() {
                stack.push(p);
            } else if ft.is_file()
                && let Ok(bytes) = fs::read(&p)
                && (holds(&bytes) || zstd::decode_all(&bytes[..]).is_ok_and(|d| holds(&d)))
            {
                hits.push(p.display().to_string());
            }
        }
    }
    hits
}
