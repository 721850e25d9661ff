//! The default runtime input: the programs a task's command starts. A toolchain upgrade
//! (`node`, `tsc` installed globally, `rustc`, `grep`) changes outputs without changing a file
//! the key sees; declaring `runtime = ["node --version"]` covers it, and by default prova also
//! folds the **resolved path and content digest of every program the command starts** that
//! lies outside the workspace, each as a config pair `binary:<word>`. The command is read as
//! a shell script ([`super::shell`]): every command of a list or pipeline, `sh -c '…'`, `cd
//! dir && tool`, `env X=1 tool` and the other wrappers, command substitutions, and the tool
//! of `npx`/`npm exec`/`pnpm exec`/`yarn exec` (looked up in `node_modules/.bin` first); and
//! the interpreter a program's `#!` line names, one level deep (`tsc` → `node`), and what a
//! small shell script starts (pnpm's `.bin` shims: `#!/bin/sh` around `exec node …`), read
//! like the command, one level too. A
//! program inside the workspace (`./node_modules/.bin/tsc`, `scripts/build.sh`) is a
//! workspace file — its inputs and installed trees key it. Shell builtins start nothing. What
//! cannot be known without running the command (a program named by a variable, `eval`, a
//! `package.json` script run by name) is not keyed and is said so ([`Programs::unkeyed`],
//! shown by `prova why` and `prova show`).
//!
//! Digests are memoised in the cache's stat memo (scope [`SCOPE`], by absolute path), so a
//! warm run stats each program once and reads nothing. `[workspace] runtime_binary = false`
//! turns it off; a `portable = true` task never folds it (its outputs must not depend on the
//! machine, and a program's bytes differ per platform).

use std::collections::{BTreeMap, HashMap};
use std::ffi::OsString;
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};

use prova_protocol::Digest;
use prova_protocol::spec::{CommandLine, ProgramCheck};

use super::digests::{Stamp, memo_row, row_proves_output};
use super::shell::{self, Invocation, PathDir, Start};
use crate::cache::MemoRow;

/// The memo scope of program digests (paths in it are absolute).
pub const SCOPE: &str = "prova:binaries";

/// The config pair's name prefix.
pub const PREFIX: &str = "binary:";

/// What one task's command starts, resolved.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Programs {
    /// Each program outside the workspace: the pair name's word and its resolved path.
    pub found: Vec<(String, PathBuf)>,
    /// What is not keyed, in words (`` `$TOOL`: the program is chosen when the command
    /// runs``).
    pub unkeyed: Vec<String>,
    /// Where the command's lookups found nothing executable before they settled (`PATH`
    /// entries ahead of a program, every entry for one not found), outside the workspace: a
    /// program that appears there while the task runs is the one it starts, not what the
    /// key folds. At most [`MAX_SHADOWS`].
    pub shadows: Vec<PathBuf>,
    /// Words looked up on the task's `PATH` (as it reached the command) and found nowhere on
    /// it: the key holds no program for them, so a farm worker that finds one on its own
    /// `PATH` would run what the client's machine does not (`tool || fallback`). At most
    /// [`MAX_ABSENT`].
    pub absent: Vec<String>,
}

/// Most [`Programs::absent`] one command keeps.
pub const MAX_ABSENT: usize = 64;

/// Most [`Programs::shadows`] one command keeps (a lookup past them is not watched).
pub const MAX_SHADOWS: usize = 256;

/// Where one invocation resolves.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Found {
    /// A program outside the workspace (symlinks followed).
    Outside(PathBuf),
    /// A workspace file: its inputs or installed tree key it.
    Inside(PathBuf),
    /// Nothing of that name where it is looked up.
    Missing,
    /// Where it is looked up is known only when the command runs (the reason).
    Unknown(String),
}

/// Reads `command` (run in `cwd`, the task's directory, with `path_var` as its `PATH`) and
/// resolves every program it starts against the workspace at `root`.
pub fn programs(
    root: &Path,
    cwd: &Path,
    command: &CommandLine,
    path_var: Option<&str>,
) -> Programs {
    Resolver::new(root).programs(cwd, command, path_var)
}

/// One lookup: the word, the directory it resolves from if that matters, the PATH, and
/// whether a package runner looks in `node_modules/.bin` first, as bytes ([`lookup_id`]).
type LookupId = Vec<u8>;

/// The [`LookupId`] of `inv`: its parts' bytes, each ended by a NUL (which no path or word
/// holds), so two lookups share an id only when every part is the same. Bytes, not
/// `Path`s: a `Path` hashes and compares component by component, which a thousand
/// projects' lookups on a `PATH` of a dozen entries felt.
fn lookup_id(inv: &Invocation) -> LookupId {
    use std::os::unix::ffi::OsStrExt as _;
    let dir = (inv.word.contains('/') || inv.node_bin).then_some(inv.cwd.as_deref()).flatten();
    let mut id = Vec::with_capacity(256);
    let mut part = |tag: u8, bytes: &[u8]| {
        id.push(tag);
        id.extend_from_slice(bytes);
        id.push(0);
    };
    part(u8::from(inv.node_bin), inv.word.as_bytes());
    if let Some(d) = dir {
        part(b'c', d.as_os_str().as_bytes());
    }
    for d in inv.path.iter() {
        match d {
            PathDir::Dir(d) => part(b'd', d.as_os_str().as_bytes()),
            PathDir::Unknown(what) => part(b'u', what.as_bytes()),
        }
    }
    id
}

/// Resolves the programs of many commands of one workspace, each lookup and each `#!` line
/// once (a thousand packages' `tsc` are one file).
#[derive(Debug)]
pub struct Resolver {
    /// The workspace root, canonical.
    root: PathBuf,
    /// Lookups done on the inherited `PATH`, with the paths each passed over (one on a `PATH`
    /// the command set is not kept: see [`Resolver::resolve`]).
    found: HashMap<LookupId, (Found, Vec<PathBuf>)>,
    /// `#!` interpreters read, by program.
    interpreters: HashMap<OsString, Option<String>>,
    /// Whether a path is an executable file, by path: the same system directories are
    /// searched for every project's commands (and their shims' `sed`, `dirname`, `node`).
    executables: HashMap<OsString, bool>,
    /// Where a program found leads with its links followed (`None`: nowhere), by path: a
    /// thousand projects' scripts that set their own `PATH` all find `/usr/bin/mkdir`.
    canonical: HashMap<OsString, Option<PathBuf>>,
    /// What a command resolves to from any directory, by its text and `PATH`: one whose
    /// every lookup is a bare word on an absolute `PATH` (a thousand packages' `mkdir -p
    /// dist && cat src/*.js > dist/index.js` are read and resolved once).
    anywhere: HashMap<(CommandLine, Option<String>), Programs>,
}

impl Resolver {
    /// A resolver for the workspace at `root`.
    pub fn new(root: &Path) -> Self {
        let root = std::fs::canonicalize(root).unwrap_or_else(|_| root.to_path_buf());
        Self {
            root,
            found: HashMap::new(),
            interpreters: HashMap::new(),
            executables: HashMap::new(),
            canonical: HashMap::new(),
            anywhere: HashMap::new(),
        }
    }

    fn resolve(&mut self, inv: &Invocation) -> (Found, Vec<PathBuf>) {
        // Kept only on the inherited `PATH`: one the command set names the project's own
        // directories as often as not (`$PWD/node_modules/.bin`), so it would not come
        // again; it is looked up afresh, each probe memoised.
        let id = (!inv.path_changed).then(|| lookup_id(inv));
        if let Some(f) = id.as_ref().and_then(|id| self.found.get(id)) {
            return f.clone();
        }
        let executables = &mut self.executables;
        let mut probe = |p: &Path| {
            *executables.entry(p.as_os_str().to_owned()).or_insert_with(|| executable(p))
        };
        let canonical = &mut self.canonical;
        let mut follow = |p: &Path| {
            let real = canonical.entry(p.as_os_str().to_owned());
            real.or_insert_with(|| std::fs::canonicalize(p).ok()).clone()
        };
        let mut passed = Vec::new();
        let f = resolve_with(&self.root, inv, &mut probe, &mut follow, &mut passed);
        if let Some(id) = id {
            self.found.insert(id, (f.clone(), passed.clone()));
        }
        (f, passed)
    }

    fn interpreter(&mut self, program: &Path) -> Option<String> {
        self.interpreters
            .entry(program.as_os_str().to_owned())
            .or_insert_with(|| interpreter(program))
            .clone()
    }

    /// [`programs`], with this resolver's lookups.
    pub fn programs(
        &mut self,
        cwd: &Path,
        command: &CommandLine,
        path_var: Option<&str>,
    ) -> Programs {
        let id = (command.clone(), path_var.map(str::to_owned));
        if let Some(p) = self.anywhere.get(&id) {
            return p.clone();
        }
        let (p, anywhere) = self.programs_in(cwd, command, path_var);
        if anywhere {
            self.anywhere.insert(id, p.clone());
        }
        p
    }

    /// [`Self::programs`], and whether the answer is the same from any directory: no
    /// lookup used the directory (a word with a `/` but not absolute, a package runner's
    /// `node_modules/.bin`, a `PATH` or a directory the command changed).
    fn programs_in(
        &mut self,
        cwd: &Path,
        command: &CommandLine,
        path_var: Option<&str>,
    ) -> (Programs, bool) {
        let start = Start::new(cwd.to_path_buf(), path_var);
        let mut anywhere = true;
        let analysis = match command {
            CommandLine::Shell(s) => shell::analyse(s, &start),
            CommandLine::Argv(v) => shell::Analysis {
                invocations: v
                    .first()
                    .map(|w| Invocation {
                        word: w.clone(),
                        cwd: Some(start.cwd.clone()),
                        path: start.path.clone(),
                        path_changed: false,
                        node_bin: false,
                        interpreted: false,
                    })
                    .into_iter()
                    .collect(),
                unkeyed: Vec::new(),
            },
        };
        let mut out = Programs {
            found: Vec::new(),
            unkeyed: analysis.unkeyed,
            shadows: Vec::new(),
            absent: Vec::new(),
        };
        // In order: a script's body and interpreter are read after what came before them.
        let mut invocations = std::collections::VecDeque::from(analysis.invocations);
        while let Some(inv) = invocations.pop_front() {
            if inv.node_bin
                || inv.path_changed
                || inv.cwd.as_deref() != Some(cwd)
                || (inv.word.contains('/') && !inv.word.starts_with('/'))
            {
                anywhere = false;
            }
            let (found, passed) = self.resolve(&inv);
            for p in passed {
                // By bytes: comparing `Path`s component by component was most of a
                // thousand projects' resolution.
                let known = out.shadows.iter().any(|s| s.as_os_str() == p.as_os_str());
                if out.shadows.len() < MAX_SHADOWS && !known {
                    out.shadows.push(p);
                }
            }
            // A script's `#!` interpreter runs too (`tsc` is `#!/usr/bin/env node`): one level.
            if let (Found::Outside(p) | Found::Inside(p), false) = (&found, inv.interpreted)
                && let Some(word) = self.interpreter(p)
            {
                // A shell script runs what its body starts, read as the command is: a package
                // manager's `.bin` shim (pnpm's, npm's `cmd-shim`) is `#!/bin/sh` around
                // `exec node "$basedir/../pkg/cli.js"`, so `node` runs. One level too.
                if is_shell(&word)
                    && let Some(body) = script_body(p)
                {
                    let cwd = inv.cwd.clone().unwrap_or_else(|| start.cwd.clone());
                    let body = shell::analyse(&body, &Start { cwd, path: inv.path.clone() });
                    invocations.extend(body.invocations.into_iter().map(|i| Invocation {
                        interpreted: true,
                        path_changed: i.path_changed || inv.path_changed,
                        ..i
                    }));
                    out.unkeyed.extend(body.unkeyed);
                }
                invocations.push_back(Invocation {
                    word,
                    node_bin: false,
                    interpreted: true,
                    ..inv.clone()
                });
            }
            match found {
                Found::Outside(path) => {
                    let name = if inv.word.contains('/') || !inv.path_changed {
                        inv.word.clone()
                    } else {
                        // Looked up on a PATH the command set: named by where it is, which is
                        // what a farm worker checks.
                        path.display().to_string()
                    };
                    let taken = |n: &str| out.found.iter().any(|(w, _)| w == n);
                    if out.found.iter().any(|(w, p)| *w == name && *p == path) {
                        continue;
                    }
                    let name = if taken(&name) { path.display().to_string() } else { name };
                    if !taken(&name) {
                        out.found.push((name, path));
                    }
                }
                Found::Inside(_) => {}
                Found::Missing if inv.node_bin => out.unkeyed.push(format!(
                    "`{}`: not in node_modules/.bin nor on PATH (a package runner would fetch it)",
                    inv.word
                )),
                Found::Missing => {
                    // A bare word on the PATH the task was given: a worker can look it up
                    // the same way (one the command's own PATH or directory decides, not).
                    if !inv.word.contains('/')
                        && !inv.path_changed
                        && out.absent.len() < MAX_ABSENT
                        && !out.absent.contains(&inv.word)
                    {
                        out.absent.push(inv.word.clone());
                    }
                    out.unkeyed.push(format!("`{}`: not found where the command looks", inv.word))
                }
                Found::Unknown(why) => out.unkeyed.push(why),
            }
        }
        // Each note once (two shims of one package manager say the same).
        let mut seen = std::collections::HashSet::new();
        out.unkeyed.retain(|n| seen.insert(n.clone()));
        (out, anywhere)
    }
}

/// Where `inv` resolves for the workspace at `root` (canonical): a word with a `/` from its
/// directory, a package runner's tool from `node_modules/.bin` first, any other on its PATH.
pub fn resolve(root: &Path, inv: &Invocation) -> Found {
    let mut follow = |p: &Path| std::fs::canonicalize(p).ok();
    resolve_with(root, inv, &mut executable, &mut follow, &mut Vec::new())
}

/// [`resolve`], asking `executable` whether a path is an executable file and `follow` where
/// it leads with its links followed; each absolute path outside the workspace looked at and
/// passed over goes into `passed` (a workspace file is keyed by its inputs or its tree, and
/// an upstream may build it during the run).
fn resolve_with(
    root: &Path,
    inv: &Invocation,
    executable: &mut impl FnMut(&Path) -> bool,
    follow: &mut impl FnMut(&Path) -> Option<PathBuf>,
    passed: &mut Vec<PathBuf>,
) -> Found {
    let word = inv.word.as_str();
    let candidate = if word.starts_with('/') {
        Some(PathBuf::from(word))
    } else if word.contains('/') {
        match &inv.cwd {
            Some(cwd) => Some(cwd.join(word)),
            None => {
                return Found::Unknown(format!(
                    "`{word}`: relative to a directory prova cannot tell (a `cd` to a variable)"
                ));
            }
        }
    } else {
        let mut dirs: Vec<PathDir> = Vec::new();
        if inv.node_bin {
            match &inv.cwd {
                Some(cwd) => {
                    dirs.extend(shell::node_bin_dirs(cwd).into_iter().map(PathDir::Dir));
                }
                None => dirs.push(PathDir::Unknown("node_modules/.bin".to_owned())),
            }
        }
        dirs.extend(inv.path.iter().cloned());
        let mut hit = None;
        for d in &dirs {
            match d {
                PathDir::Dir(d) if d.is_absolute() => {
                    let p = d.join(word);
                    if executable(&p) {
                        hit = Some(p);
                        break;
                    }
                    if !within(&p, root) {
                        passed.push(p);
                    }
                }
                PathDir::Dir(_) => {}
                PathDir::Unknown(what) => {
                    return Found::Unknown(format!(
                        "`{word}`: looked up on a PATH holding `{what}`, which is known only \
                         when the command runs"
                    ));
                }
            }
        }
        hit
    };
    let found = match candidate {
        Some(p) if executable(&p) => p,
        Some(p) => {
            // A path that names nothing executable yet.
            if !within(&p, root) {
                passed.push(p);
            }
            return Found::Missing;
        }
        None => return Found::Missing,
    };
    match follow(&found) {
        Some(real) if within(&real, root) => Found::Inside(real),
        Some(real) => Found::Outside(real),
        None => Found::Missing,
    }
}

/// Whether `p` lies at or under `root` (canonical), by bytes: the paths asked about are
/// joined onto absolute `PATH` entries or canonical, and `Path::starts_with` compares them
/// component by component. A path written with a doubled or trailing `/` counts as outside,
/// which only watches one more place.
fn within(p: &Path, root: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt as _;
    let (p, root) = (p.as_os_str().as_bytes(), root.as_os_str().as_bytes());
    p.strip_prefix(root).is_some_and(|rest| {
        rest.is_empty() || rest.first() == Some(&b'/') || root.last() == Some(&b'/')
    })
}

fn executable(p: &Path) -> bool {
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.mode() & 0o111 != 0)
}

/// The program a script's `#!` line starts (`#!/usr/bin/env node` → `node`, looked up on
/// PATH; `#!/bin/sh -e` → `/bin/sh`), if it has one. Reads the file's first line only.
fn interpreter(p: &Path) -> Option<String> {
    use std::io::Read as _;
    const HEAD: u64 = 256;
    let mut head = Vec::new();
    std::fs::File::open(p).ok()?.take(HEAD).read_to_end(&mut head).ok()?;
    let line = head.strip_prefix(b"#!")?.split(|&b| b == b'\n').next()?;
    let line = std::str::from_utf8(line).ok()?;
    let mut words = line.split_whitespace();
    let first = words.next()?;
    if first.rsplit('/').next() != Some("env") {
        return Some(first.to_owned());
    }
    // `env [-S] [NAME=value…] program`.
    words.find(|w| !w.starts_with('-') && !w.contains('=')).map(str::to_owned)
}

/// Whether `interpreter` (a `#!` line's program) is a POSIX shell, whose script prova reads.
fn is_shell(interpreter: &str) -> bool {
    matches!(interpreter.rsplit('/').next(), Some("sh" | "bash" | "dash"))
}

/// The text of the shell script at `p`, when it is small enough to be a wrapper (a package
/// manager's shims are about 1 KB); a larger script is a program of its own, not read.
fn script_body(p: &Path) -> Option<String> {
    use std::io::Read as _;
    const MAX: u64 = 16 << 10;
    let mut body = String::new();
    let n = std::fs::File::open(p).ok()?.take(MAX + 1).read_to_string(&mut body).ok()?;
    (n as u64 <= MAX).then_some(body)
}

/// Digests `paths`, reusing `memo` rows that are still valid. Returns the digests and the
/// rows to store (new or changed). A program that cannot be read is left out.
pub fn digest_all(
    paths: &[PathBuf],
    memo: &HashMap<String, MemoRow>,
    now_ns: i64,
) -> (BTreeMap<PathBuf, Digest>, Vec<(String, MemoRow)>) {
    let mut out = BTreeMap::new();
    let mut store = Vec::new();
    for p in paths {
        let name = p.to_string_lossy().into_owned();
        let Ok(meta) = std::fs::metadata(p) else { continue };
        let stamp = Stamp::of(&meta);
        // The ctime test of outputs: package managers pin programs' mtimes, ctime moves on
        // any write.
        if let Some(row) = memo.get(&name).filter(|r| row_proves_output(&stamp, r)) {
            out.insert(p.clone(), row.digest);
            continue;
        }
        let Ok(digest) = Digest::of_file(p) else { continue };
        out.insert(p.clone(), digest);
        store.push((name, memo_row(&stamp, digest, now_ns)));
    }
    (out, store)
}

/// What a farm worker must reproduce of a key's config pairs: each program folded, with the
/// client's path and digest ([`ProgramCheck`]).
pub fn checks(config: &[(String, String)]) -> Vec<ProgramCheck> {
    config
        .iter()
        .filter_map(|(k, v)| {
            let word = k.strip_prefix(PREFIX)?;
            let (path, hex) = v.rsplit_once(' ')?;
            Some(ProgramCheck {
                word: word.to_owned(),
                path: path.to_owned(),
                digest: hex.parse().ok()?,
            })
        })
        .collect()
}

/// The programs a run's saves found, by path: the stamp each had and its digest then. A
/// program whose stamp is the one seen, older than the racy window, is not read again.
#[derive(Debug, Default)]
pub struct Rechecked {
    seen: std::sync::Mutex<HashMap<PathBuf, (Stamp, Digest)>>,
}

impl Rechecked {
    /// The first of `checks` (a key's programs, [`checks`]) whose bytes are no longer the
    /// keyed ones: upgraded in place while the task ran (`npm i -g`, `cargo install`, a
    /// task installing a tool a later one starts), or gone. `memo` answers a path's memo
    /// row (scope [`SCOPE`]) the first time it is looked at.
    pub fn changed<'a>(
        &self,
        checks: &'a [ProgramCheck],
        memo: &mut dyn FnMut(&str) -> Option<MemoRow>,
    ) -> Option<&'a ProgramCheck> {
        let now_ns = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as i64);
        checks.iter().find(|c| {
            let path = Path::new(&c.path);
            let Ok(meta) = std::fs::metadata(path) else { return true };
            let stamp = Stamp::of(&meta);
            let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
            if let Some((s, d)) = seen.get(path)
                && *s == stamp
            {
                return *d != c.digest;
            }
            let rows: HashMap<String, MemoRow> =
                memo(&c.path).map(|r| (c.path.clone(), r)).into_iter().collect();
            let (found, _) = digest_all(&[path.to_path_buf()], &rows, now_ns);
            let Some(digest) = found.get(path).copied() else { return true };
            if row_proves_output(&stamp, &memo_row(&stamp, digest, now_ns)) {
                seen.insert(path.to_path_buf(), (stamp, digest));
            }
            digest != c.digest
        })
    }
}

/// The first of `shadows` (a command's [`Programs::shadows`]) that now holds an executable
/// file: the command would start it, not what its key folds.
pub fn first_shadow(shadows: &[PathBuf]) -> Option<&PathBuf> {
    shadows.iter().find(|p| executable(p))
}

/// The config pair for `word` resolved to `path` with `digest`.
pub fn pair(word: &str, path: &Path, digest: &Digest) -> (String, String) {
    (format!("{PREFIX}{word}"), format!("{} {}", path.display(), digest.to_hex()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn install(dir: &Path, name: &str) -> PathBuf {
        use std::os::unix::fs::PermissionsExt as _;
        let tool = dir.join(name);
        std::fs::create_dir_all(dir).expect("mkdir");
        // No `#!` line: its interpreter is not looked for.
        std::fs::write(&tool, "exit 0\n").expect("write");
        std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        tool
    }

    fn canon(p: &Path) -> PathBuf {
        std::fs::canonicalize(p).expect("canon")
    }

    #[test]
    fn every_program_outside_the_workspace_is_found_one_inside_is_not() {
        let ws = tempfile::tempdir().expect("ws");
        let bin = tempfile::tempdir().expect("bin");
        install(ws.path(), "tool");
        install(bin.path(), "tool");
        install(bin.path(), "other");
        let path = bin.path().display().to_string();
        let sh = |s: &str| {
            programs(ws.path(), ws.path(), &CommandLine::Shell(s.into()), Some(path.as_str()))
        };
        let p = sh("./tool && tool | other; absent-tool");
        let tool = canon(&bin.path().join("tool"));
        let other = canon(&bin.path().join("other"));
        assert_eq!(p.found, [("tool".to_owned(), tool.clone()), ("other".to_owned(), other)]);
        assert_eq!(p.unkeyed, ["`absent-tool`: not found where the command looks"]);
        assert_eq!(p.absent, ["absent-tool"], "what a farm worker must not find either");
        // Looked up on a PATH the command set, or by a path: not the task's PATH's to say.
        // A package runner's tool (`npx` itself is a PATH lookup, and absent here).
        for elsewhere in ["PATH=/nowhere absent-tool", "./absent-tool", "npx absent-tool"] {
            let p = sh(elsewhere);
            assert!(!p.absent.contains(&"absent-tool".to_owned()), "{elsewhere}: {p:?}");
        }
        // Behind `sh -c`, `cd`, `env`: found all the same.
        for hidden in ["sh -c 'tool x'", "cd sub && tool", "env X=1 tool", "nohup tool"] {
            let p = sh(hidden);
            assert!(p.found.iter().any(|(w, f)| w == "tool" && *f == tool), "{hidden}: {p:?}");
        }
    }

    #[test]
    fn where_a_lookup_found_nothing_is_watched_for_a_program_appearing_there() {
        let ws = tempfile::tempdir().expect("ws");
        let bin = tempfile::tempdir().expect("bin");
        let (early, late) = (bin.path().join("early"), bin.path().join("late"));
        install(&late, "tool");
        let path = format!("{}:{}", early.display(), late.display());
        let cmd = CommandLine::Shell("tool && ./gen.sh && ./dist/cli.js; absent-tool".into());
        let p = programs(ws.path(), ws.path(), &cmd, Some(path.as_str()));
        for passed in [early.join("tool"), late.join("absent-tool")] {
            assert!(p.shadows.contains(&passed), "{passed:?}: {:?}", p.shadows);
        }
        // A workspace file is keyed by its inputs (an upstream may build `dist/cli.js`).
        assert!(!p.shadows.iter().any(|s| s.starts_with(ws.path())), "{:?}", p.shadows);
        assert!(!p.shadows.contains(&late.join("tool")), "the keyed one is not a shadow");
        assert_eq!(first_shadow(&p.shadows), None);
        // A program installed ahead of the keyed one, or one not found before.
        for (dir, name) in [(&early, "tool"), (&late, "absent-tool")] {
            let appeared = install(dir, name);
            assert_eq!(first_shadow(&p.shadows), Some(&appeared));
            std::fs::remove_file(&appeared).expect("rm");
        }
        // Not executable: not what a lookup starts.
        std::fs::write(early.join("tool"), "data").expect("write");
        assert_eq!(first_shadow(&p.shadows), None);
    }

    #[test]
    fn a_package_runners_tool_is_found_in_node_modules_first() {
        let ws = tempfile::tempdir().expect("ws");
        let bin = tempfile::tempdir().expect("bin");
        install(&ws.path().join("node_modules/.bin"), "tsc");
        install(bin.path(), "tsc");
        install(bin.path(), "npx");
        install(bin.path(), "vite");
        let app = ws.path().join("app");
        std::fs::create_dir_all(&app).expect("app");
        let path = bin.path().display().to_string();
        let sh = |s: &str| programs(ws.path(), &app, &CommandLine::Shell(s.into()), Some(&path));
        // The workspace's tsc: an installed tree keys it, not a pair.
        let p = sh("npx tsc -b");
        let names: Vec<&str> = p.found.iter().map(|(w, _)| w.as_str()).collect();
        assert_eq!(names, ["npx"], "{p:?}");
        // Not installed in the workspace: npx takes it from PATH.
        assert!(sh("npx vite build").found.iter().any(|(w, _)| w == "vite"));
        let p = sh("npx absent");
        assert!(p.unkeyed.iter().any(|u| u.contains("would fetch it")), "{p:?}");
        // The PATH prova's package.json scripts set: node_modules/.bin first.
        let p = sh(
            "PATH=\"$PWD/node_modules/.bin:$PWD/../node_modules/.bin:$PATH\"; export PATH; tsc -b && vite",
        );
        let names: Vec<&str> = p.found.iter().map(|(w, _)| w.as_str()).collect();
        let vite = canon(&bin.path().join("vite")).display().to_string();
        assert_eq!(names, [vite.as_str()], "named by its path: the PATH was the command's\n{p:?}");
    }

    #[test]
    fn the_interpreter_a_scripts_first_line_names_is_found_too() {
        use std::os::unix::fs::PermissionsExt as _;
        let ws = tempfile::tempdir().expect("ws");
        let bin = tempfile::tempdir().expect("bin");
        let fake_node = install(bin.path(), "fakenode");
        // The workspace's tsc (an installed tree keys it) runs a node from PATH.
        let tsc = ws.path().join("node_modules/.bin/tsc");
        std::fs::create_dir_all(tsc.parent().expect("dir")).expect("mkdir");
        std::fs::write(&tsc, "#!/usr/bin/env -S fakenode --max-old-space-size=4096\n").expect("w");
        std::fs::set_permissions(&tsc, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        let path = bin.path().display().to_string();
        let p = programs(ws.path(), ws.path(), &CommandLine::Shell("npx tsc".into()), Some(&path));
        assert_eq!(p.found, [("fakenode".to_owned(), canon(&fake_node))], "{p:?}");
        assert_eq!(interpreter(&fake_node), None);
        std::fs::write(&fake_node, "#!/bin/sh -e\n").expect("w");
        assert_eq!(interpreter(&fake_node).as_deref(), Some("/bin/sh"));
    }

    #[test]
    fn a_package_managers_shell_shim_keys_the_node_it_execs() {
        use std::os::unix::fs::PermissionsExt as _;
        let ws = tempfile::tempdir().expect("ws");
        let bin = tempfile::tempdir().expect("bin");
        let fake_node = install(bin.path(), "fakenode");
        let inner = install(bin.path(), "innertool");
        // pnpm's `.bin` shim: `#!/bin/sh` around `exec node "$basedir/../pkg/cli.js"`.
        let shim = ws.path().join("node_modules/.bin/tool");
        std::fs::create_dir_all(shim.parent().expect("dir")).expect("mkdir");
        std::fs::write(
            &shim,
            "#!/bin/sh\nbasedir=$(dirname \"$0\")\nif [ -x \"$basedir/fakenode\" ]; then\n  \
             exec \"$basedir/fakenode\" \"$basedir/../pkg/cli.js\" \"$@\"\nelse\n  \
             exec fakenode \"$basedir/../pkg/cli.js\" \"$@\"\nfi\n",
        )
        .expect("w");
        std::fs::set_permissions(&shim, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        let path = format!("{}:/usr/bin:/bin", bin.path().display());
        let run = |cmd: &str| {
            programs(ws.path(), ws.path(), &CommandLine::Shell(cmd.into()), Some(&path))
        };
        for cmd in ["node_modules/.bin/tool build", "npx tool build"] {
            let p = run(cmd);
            assert!(
                p.found.iter().any(|(w, f)| w == "fakenode" && *f == canon(&fake_node)),
                "{cmd}: {p:?}"
            );
            // What the shim starts by a variable is said, not guessed.
            assert!(p.unkeyed.iter().any(|n| n.contains("$basedir/fakenode")), "{cmd}: {p:?}");
        }
        // One level: a shim's body is read, not the scripts it starts in turn.
        let nested = ws.path().join("node_modules/.bin/outer");
        std::fs::write(&nested, "#!/bin/sh\nexec node_modules/.bin/tool \"$@\"\n").expect("w");
        std::fs::set_permissions(&nested, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        let p = run("node_modules/.bin/outer");
        assert!(!p.found.iter().any(|(w, _)| w == "fakenode"), "{p:?}");
        // A script too large to be a wrapper is a program of its own: its body is not read.
        std::fs::write(&shim, format!("#!/bin/sh\nexec innertool\n{}", "# pad\n".repeat(4000)))
            .expect("w");
        let p = run("node_modules/.bin/tool");
        assert!(!p.found.iter().any(|(_, f)| *f == canon(&inner)), "{p:?}");
        std::fs::write(&shim, "#!/bin/bash\nexec innertool\n").expect("w");
        let p = run("node_modules/.bin/tool");
        assert!(p.found.iter().any(|(_, f)| *f == canon(&inner)), "bash too: {p:?}");
        // `[` is the test builtin, not a file pattern.
        assert!(run("[ -f x ] && true").unkeyed.is_empty());
    }

    #[test]
    fn a_lookup_prova_cannot_follow_is_named_not_guessed() {
        let ws = tempfile::tempdir().expect("ws");
        let sh = |s: &str| {
            programs(ws.path(), ws.path(), &CommandLine::Shell(s.into()), Some("/usr/bin:/bin"))
        };
        let p = sh("PATH=$HOME/bin:$PATH tool");
        assert!(p.found.is_empty());
        assert!(p.unkeyed[0].contains("`$HOME/bin`"), "{p:?}");
        let p = sh("cd $DIR && ./x");
        assert!(p.unkeyed[0].contains("relative to a directory"), "{p:?}");
    }

    #[test]
    fn a_memoised_digest_is_reused_until_the_program_changes() {
        let dir = tempfile::tempdir().expect("dir");
        let tool = dir.path().join("tool");
        std::fs::write(&tool, "v1").expect("write");
        let far_future = i64::MAX / 2;
        let (d1, store) = digest_all(std::slice::from_ref(&tool), &HashMap::new(), far_future);
        assert_eq!(store.len(), 1, "a new program is stored");
        let memo: HashMap<String, MemoRow> = store.into_iter().collect();
        let (d2, store) = digest_all(std::slice::from_ref(&tool), &memo, far_future);
        assert_eq!(d1, d2);
        assert!(store.is_empty(), "a valid row is reused, nothing read");
        std::fs::write(&tool, "v2 longer").expect("rewrite");
        let (d3, store) = digest_all(std::slice::from_ref(&tool), &memo, far_future);
        assert_ne!(d1, d3, "a changed program is read again");
        assert_eq!(store.len(), 1);
        // A row recorded in the same instant the file changed is not trusted.
        let racy: HashMap<String, MemoRow> = store
            .into_iter()
            .map(|(k, mut r)| {
                r.recorded_ns = r.mtime_ns;
                r.digest = Digest([7; 32]);
                (k, r)
            })
            .collect();
        let (d4, _) = digest_all(std::slice::from_ref(&tool), &racy, far_future);
        assert_eq!(d4, d3, "a racy row is re-read");
    }

    #[test]
    fn a_program_rewritten_in_place_is_no_longer_as_keyed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let tool = canon(&install(dir.path(), "tool"));
        let keyed = Digest::of_file(&tool).expect("digest");
        let check = ProgramCheck {
            word: "tool".into(),
            path: tool.to_string_lossy().into_owned(),
            digest: keyed,
        };
        let checks = [check];
        let rechecked = Rechecked::default();
        assert!(rechecked.changed(&checks, &mut |_| None).is_none());
        std::fs::write(&tool, "exit 1\n").expect("rewrite");
        assert_eq!(
            rechecked.changed(&checks, &mut |_| None).map(|c| c.word.as_str()),
            Some("tool")
        );
        std::fs::remove_file(&tool).expect("remove");
        assert!(rechecked.changed(&checks, &mut |_| None).is_some(), "gone");
    }
}

#[cfg(test)]
mod anywhere_tests {
    use std::os::unix::fs::PermissionsExt as _;

    use super::*;

    fn install(dir: &Path, name: &str, body: &str) {
        let tool = dir.join(name);
        std::fs::create_dir_all(dir).expect("mkdir");
        std::fs::write(&tool, body).expect("write");
        std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    }

    /// One resolver across many projects answers each as a fresh one would: a command read
    /// once for all directories only when nothing it starts depends on the directory.
    #[test]
    fn a_command_resolved_once_for_every_directory_is_what_each_would_find() {
        let ws = tempfile::tempdir().expect("ws");
        let bin = tempfile::tempdir().expect("bin");
        let root = ws.path();
        install(bin.path(), "tool", "exit 0\n");
        install(bin.path(), "npx", "exit 0\n");
        // Project a has its own `tool` and `.bin/tsc`; b has neither.
        install(&root.join("a"), "tool", "exit 0\n");
        install(&root.join("a/node_modules/.bin"), "tsc", "exit 0\n");
        install(&root.join("a/bin"), "gen", "exit 0\n");
        std::fs::create_dir_all(root.join("b/bin")).expect("mkdir");
        install(&root.join("b/bin"), "gen", "#!/usr/bin/env tool\n");
        let path = bin.path().display().to_string();
        let commands = [
            "tool && tool --version",
            "./tool",
            "npx tsc",
            "cd .. && ./a/tool",
            "PATH=./bin:$PATH gen",
            "bin/gen",
            "sh -c 'tool; ./tool'",
            // The form of a package.json script prova runs itself: a PATH of the project's
            // own `.bin` directories, each project's lookups its own.
            "PATH=\"$PWD/node_modules/.bin:$PWD/../node_modules/.bin:$PATH\"; export PATH; tsc && tool",
            "PATH=\"$PWD/bin:$PATH\" gen && tool",
        ];
        let mut shared = Resolver::new(root);
        for dir in ["a", "b", "a", "b"] {
            let cwd = root.join(dir);
            for c in commands {
                let command = CommandLine::Shell(c.into());
                let fresh = programs(root, &cwd, &command, Some(path.as_str()));
                let got = shared.programs(&cwd, &command, Some(path.as_str()));
                assert_eq!(got, fresh, "`{c}` in {dir}");
            }
        }
        // Only the first command is the same from anywhere.
        assert_eq!(shared.anywhere.len(), 1, "{:?}", shared.anywhere.keys());
        // The script form finds a's own `tsc` in a and the one on PATH nowhere in b.
        let script = CommandLine::Shell(commands[7].into());
        let in_a = shared.programs(&root.join("a"), &script, Some(path.as_str()));
        let in_b = shared.programs(&root.join("b"), &script, Some(path.as_str()));
        assert!(!in_a.unkeyed.iter().any(|n| n.contains("`tsc`")), "{:?}", in_a.unkeyed);
        assert!(in_b.unkeyed.iter().any(|n| n.contains("`tsc`")), "{:?}", in_b.unkeyed);
    }

    #[test]
    fn within_the_workspace_is_a_whole_component_prefix() {
        let root = Path::new("/ws/root");
        assert!(within(Path::new("/ws/root"), root));
        assert!(within(Path::new("/ws/root/node_modules/.bin/tsc"), root));
        assert!(!within(Path::new("/ws/rooted/bin/tsc"), root));
        assert!(!within(Path::new("/ws/roo"), root));
        assert!(!within(Path::new("/usr/bin/tsc"), root));
        assert!(within(Path::new("/usr/bin/tsc"), Path::new("/")));
    }
}
