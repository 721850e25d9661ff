//! Key components (brief §5): everything that determines a task's outputs, in a versioned,
//! canonical form. The key is a BLAKE3 fold of the components; each cache entry stores its
//! components so `prova why` can name what moved. Env values are stored as digests, never in
//! clear: an entry must not leak a secret the task read.

use serde::{Deserialize, Serialize};

use crate::digest::{Digest, Fold};

/// Version of the key encoding. Bump it whenever the fold below changes meaning: every old
/// entry then misses instead of being misread.
/// v2: declared env values are folded as a keyed digest under the cache's salt
/// ([`env_value`]), not a plain BLAKE3 of the value.
/// v3: a dependency that is cached and declares outputs is folded by the fingerprint of its
/// outputs ([`KeyComponents::upstream_outputs`]), not its key: a dependent whose upstream
/// re-ran with byte-identical outputs keeps its key (early cutoff).
/// v4: a dependent folds every upstream's output fingerprint (`cache = false` ones too) and,
/// unless it is confined (`sandbox = true`), every upstream's key — its direct
/// dependencies', which fold theirs ([`KeyComponents::upstream`]): in place it can read an
/// upstream's sources, so only a confined task is cut off. Every program a command starts is folded, not only its
/// first word.
/// v5: an upstream's output fingerprint holds the empty directories among its outputs (they
/// are saved and restored now); an entry made before holds none, so every old entry misses
/// rather than restore without them.
pub const KEY_VERSION: u32 = 5;

/// The key salt of a cache: 32 random bytes each cache index holds (`meta.key_salt`); a farm
/// hands its salt to its clients in `Welcome`, so every client's keys agree.
pub type KeySalt = [u8; 32];

/// How a declared env value enters a key: keyed by the cache's salt when there is one (the
/// value's digest is stored with every entry, and a short value — a PIN, a flag — must not be
/// guessable from the cache), a plain digest when no cache is open (nothing is stored then).
pub fn env_value(salt: Option<&KeySalt>, value: &str) -> Digest {
    match salt {
        Some(s) => Digest::keyed(s, value.as_bytes()),
        None => Digest::of(value.as_bytes()),
    }
}

/// What kind of input file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum InputKind {
    /// A regular file (digest of its bytes).
    File,
    /// A symbolic link (digest of its target string; never followed).
    Symlink,
}

/// One input file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct InputFile {
    /// Workspace-relative path.
    pub path: String,
    /// File or link.
    pub kind: InputKind,
    /// Owner-execute bit.
    pub exec: bool,
    /// Content digest.
    pub digest: Digest,
}

/// Everything a key folds, in canonical order (every list sorted).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyComponents {
    /// [`KEY_VERSION`].
    pub version: u32,
    /// `project#task`.
    pub task: String,
    /// The command (`sh:<string>` or `argv:<a>\0<b>…`).
    pub command: String,
    /// Hashable config, `name = value` (outputs, timeout, network, portable, persistent).
    pub config: Vec<(String, String)>,
    /// Declared env names with the keyed digest of their value ([`env_value`]); `None` =
    /// unset (distinct from empty).
    pub env: Vec<(String, Option<Digest>)>,
    /// The task's input files.
    pub inputs: Vec<InputFile>,
    /// Workspace-wide inputs: `[workspace] fingerprint` and `inputs` files.
    pub workspace: Vec<InputFile>,
    /// Keys of upstream tasks, whose sources it can read in place: its direct dependencies
    /// (each folds its own upstreams'), and the upstreams a confined dependency leaves out of
    /// its key; for a confined task (`sandbox = true`) only its direct dependencies without
    /// declared outputs.
    pub upstream: Vec<(String, Digest)>,
    /// Output fingerprints (the content fingerprint of the output tree) of every upstream
    /// task (direct or transitive) that declares outputs: the bytes it produced or restored
    /// in this run. Known only once they are resolved (a hit's entry, or an execution), so
    /// such a key is computed during the run.
    #[serde(default)]
    pub upstream_outputs: Vec<(String, Digest)>,
    /// Forwarded arguments.
    pub args: Vec<String>,
    /// `os/arch`, unless the task is `portable`.
    pub platform: Option<String>,
}

impl KeyComponents {
    /// The key.
    pub fn key(&self) -> Digest {
        let mut f = Fold::new("prova-key");
        f.u64(u64::from(self.version));
        f.tag(1).str(&self.task);
        f.tag(2).str(&self.command);
        f.tag(3).u64(self.config.len() as u64);
        for (k, v) in &self.config {
            f.str(k).str(v);
        }
        f.tag(4).u64(self.env.len() as u64);
        for (k, v) in &self.env {
            f.str(k);
            match v {
                Some(d) => f.tag(1).digest(d),
                None => f.tag(0),
            };
        }
        for (tag, list) in [(5u8, &self.inputs), (6, &self.workspace)] {
            f.tag(tag).u64(list.len() as u64);
            for i in list {
                f.str(&i.path).tag(i.kind as u8).tag(u8::from(i.exec)).digest(&i.digest);
            }
        }
        f.tag(7).u64(self.upstream.len() as u64);
        for (t, k) in &self.upstream {
            f.str(t).digest(k);
        }
        f.tag(11).u64(self.upstream_outputs.len() as u64);
        for (t, d) in &self.upstream_outputs {
            f.str(t).digest(d);
        }
        f.tag(8).u64(self.args.len() as u64);
        for a in &self.args {
            f.str(a);
        }
        match &self.platform {
            Some(p) => f.tag(9).str(p),
            None => f.tag(10),
        };
        f.finish()
    }

    /// What moved from `old` to `self`, in words, most specific first.
    pub fn diff(&self, old: &KeyComponents) -> Vec<String> {
        let mut out = Vec::new();
        if self.version != old.version {
            out.push(format!("the key format changed (v{} → v{})", old.version, self.version));
        }
        if self.command != old.command {
            out.push("the command changed".to_owned());
        }
        let special = |k: &str| k.starts_with(RUNTIME_PREFIX) || k.starts_with(ENTRIES_PREFIX);
        let (old_sp, old_cfg): (Vec<_>, Vec<_>) =
            old.config.iter().cloned().partition(|(k, _)| special(k));
        let (new_sp, new_cfg): (Vec<_>, Vec<_>) =
            self.config.iter().cloned().partition(|(k, _)| special(k));
        diff_pairs(&old_cfg, &new_cfg, &mut out, |k, what| format!("config `{k}` {what}"));
        let runtime = |v: Vec<(String, String)>| -> Vec<(String, String)> {
            v.into_iter().filter(|(k, _)| k.starts_with(RUNTIME_PREFIX)).collect()
        };
        diff_runtime(&runtime(old_sp), &runtime(new_sp), &mut out);
        diff_entries(old.entries(), self.entries(), &mut out);
        diff_pairs(&old.env, &self.env, &mut out, |k, what| format!("env `{k}` {what}"));
        diff_files(&old.inputs, &self.inputs, &mut out, "input");
        diff_files(&old.workspace, &self.workspace, &mut out, "workspace input");
        diff_pairs(&old.upstream, &self.upstream, &mut out, |k, what| match what {
            "changed" => format!("upstream `{k}` key changed"),
            w => format!("upstream `{k}` {w}"),
        });
        diff_pairs(&old.upstream_outputs, &self.upstream_outputs, &mut out, |k, what| match what {
            "changed" => format!("upstream `{k}` outputs changed"),
            w => format!("upstream `{k}` {w}"),
        });
        if self.args != old.args {
            out.push(format!("forwarded args changed ({:?} → {:?})", old.args, self.args));
        }
        if self.platform != old.platform {
            out.push(format!("platform changed ({:?} → {:?})", old.platform, self.platform));
        }
        out
    }
}

impl KeyComponents {
    /// The project directory whose entry names the key folds, and those names
    /// ([`entries_pair`]), if it folds them.
    pub fn entries(&self) -> Option<(&str, Vec<&str>)> {
        self.config.iter().find_map(|(k, v)| {
            let dir = k.strip_prefix(ENTRIES_PREFIX)?;
            let names = if v.is_empty() { Vec::new() } else { v.split('\0').collect() };
            Some((if dir == "." { "" } else { dir }, names))
        })
    }
}

/// The config pair name prefix of the entry names of a task's project directory
/// (`entries:packages/a`).
pub const ENTRIES_PREFIX: &str = "entries:";

/// The config pair of the names of the entries of project directory `dir` (workspace
/// relative, `""` the root): what a task that lists its directory sees there. Only names:
/// a file's bytes are keyed as an input or not at all. `names` sorted.
pub fn entries_pair(dir: &str, names: &[String]) -> (String, String) {
    let dir = if dir.is_empty() { "." } else { dir };
    (format!("{ENTRIES_PREFIX}{dir}"), names.join("\0"))
}

/// `the entries of `packages/a` changed: + notes.md, − old.md`.
fn diff_entries(
    old: Option<(&str, Vec<&str>)>,
    new: Option<(&str, Vec<&str>)>,
    out: &mut Vec<String>,
) {
    match (old, new) {
        (None, Some((d, _))) => {
            out.push(format!("the entry names of `{}` are now keyed", shown(d)))
        }
        (Some((d, _)), None) => {
            out.push(format!("the entry names of `{}` are no longer keyed", shown(d)));
        }
        (Some((od, on)), Some((nd, nn))) if od == nd && on != nn => {
            out.push(format!("the entries of `{}` changed: {}", shown(nd), moved_names(&on, &nn)));
        }
        (Some((od, _)), Some((nd, _))) if od != nd => {
            out.push(format!("the entry names of `{}` are now keyed", shown(nd)));
        }
        _ => {}
    }
}

/// `+ a.txt, − b.md`: the names in `now` and not in `then`, then the other way.
pub fn moved_names<S: AsRef<str>>(then: &[S], now: &[S]) -> String {
    let has = |v: &[S], n: &str| v.iter().any(|x| x.as_ref() == n);
    let mut out: Vec<String> =
        now.iter().map(AsRef::as_ref).filter(|n| !has(then, n)).map(|n| format!("+ {n}")).collect();
    out.extend(
        then.iter().map(AsRef::as_ref).filter(|n| !has(now, n)).map(|n| format!("\u{2212} {n}")),
    );
    out.join(", ")
}

fn shown(dir: &str) -> &str {
    if dir.is_empty() { "." } else { dir }
}

/// The config pair name prefix of a runtime input (`runtime:node --version`).
pub const RUNTIME_PREFIX: &str = "runtime:";

/// The config pair of runtime input `command`: its stdout's digest, then the stdout itself
/// when `shown` (short and not secret-looking), so `why` can say `v20 → v22`.
pub fn runtime_pair(command: &str, digest: &Digest, shown: Option<&str>) -> (String, String) {
    let value = match shown {
        Some(s) => format!("{digest} {s}"),
        None => digest.to_string(),
    };
    (format!("{RUNTIME_PREFIX}{command}"), value)
}

/// The `sh -c` script a runtime command runs as, on a client and on a worker alike: its
/// stderr dropped (only stdout is folded), whatever the command's own shape.
pub fn runtime_script(command: &str) -> String {
    format!("{{ {command}\n}} 2>/dev/null")
}

/// The digest of a runtime command's result: its stdout and how it exited (`None`: killed
/// or not started), the same on a client and on a farm worker.
pub fn runtime_digest(stdout: &[u8], code: Option<i32>) -> Digest {
    let mut f = Fold::new("prova-runtime");
    f.bytes(stdout);
    match code {
        Some(c) => f.tag(1).u64(u64::from(c as u32)),
        None => f.tag(0),
    };
    f.finish()
}

/// A runtime pair's value split into its digest text and the stdout shown beside it.
pub fn runtime_value(value: &str) -> (&str, Option<&str>) {
    match value.split_once(' ') {
        Some((d, s)) => (d, Some(s)),
        None => (value, None),
    }
}

/// `runtime `node --version` changed: v20.11.0 → v22.1.0` (values when both were kept).
fn diff_runtime(old: &[(String, String)], new: &[(String, String)], out: &mut Vec<String>) {
    let name = |k: &str| k.strip_prefix(RUNTIME_PREFIX).unwrap_or(k).to_owned();
    for (k, v) in new {
        match old.iter().find(|(ok, _)| ok == k) {
            None => out.push(format!("runtime `{}` was added", name(k))),
            Some((_, ov)) if ov != v => {
                let (od, os) = runtime_value(ov);
                let (nd, ns) = runtime_value(v);
                out.push(match (os, ns) {
                    (Some(a), Some(b)) if a != b => {
                        format!("runtime `{}` changed: {a} → {b}", name(k))
                    }
                    _ if od != nd => format!("runtime `{}` changed (its output differs)", name(k)),
                    _ => format!("runtime `{}` changed", name(k)),
                });
            }
            Some(_) => {}
        }
    }
    for (k, _) in old {
        if !new.iter().any(|(nk, _)| nk == k) {
            out.push(format!("runtime `{}` was removed", name(k)));
        }
    }
}

fn diff_pairs<K: Ord + std::fmt::Display, V: PartialEq>(
    old: &[(K, V)],
    new: &[(K, V)],
    out: &mut Vec<String>,
    say: impl Fn(&K, &str) -> String,
) {
    let (mut i, mut j) = (0, 0);
    while i < old.len() || j < new.len() {
        match (old.get(i), new.get(j)) {
            (Some((ka, va)), Some((kb, vb))) if ka == kb => {
                if va != vb {
                    out.push(say(ka, "changed"));
                }
                i += 1;
                j += 1;
            }
            (Some((ka, _)), Some((kb, _))) if ka < kb => {
                out.push(say(ka, "was removed"));
                i += 1;
            }
            (Some(_) | None, Some((kb, _))) => {
                out.push(say(kb, "was added"));
                j += 1;
            }
            (Some((ka, _)), None) => {
                out.push(say(ka, "was removed"));
                i += 1;
            }
            (None, None) => break,
        }
    }
}

fn diff_files(old: &[InputFile], new: &[InputFile], out: &mut Vec<String>, what: &str) {
    let o: Vec<(&str, &InputFile)> = old.iter().map(|f| (f.path.as_str(), f)).collect();
    let n: Vec<(&str, &InputFile)> = new.iter().map(|f| (f.path.as_str(), f)).collect();
    diff_pairs(&o, &n, out, |k, how| format!("{what} `{k}` {how}"));
}

#[cfg(test)]
#[path = "key_tests.rs"]
mod tests;
