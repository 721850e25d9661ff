//! Naming undeclared inputs: run the sandboxed task under `strace`, then read the trace back
//! for every way the task touched its exec root that the root could not answer as the
//! workspace would: lookups that failed (`ENOENT`, `EACCES`) — the path is not in the root,
//! so if the task wanted it, or would act differently were it there, it is an input nobody
//! declared — and directory listings (`getdents`), whose entry set the root shows only in
//! part.
//!
//! strace runs outside bwrap and follows the task into its namespaces (`-f`). Where a
//! sandbox runs (see [`Tracer`]), strace is itself the command of a pid namespace of its own,
//! made by `unshare` with a `/proc` of that namespace only: to translate a pid out of
//! the task's namespace strace walks `/proc` (every process's and thread's `status`, and
//! every entry it remembers, on each pid it has not met), and there that is a handful of
//! entries, not every process on the host. The task's own namespace is still nested inside,
//! so it sees neither strace nor its trace. Options:
//! - `-y` annotates every file descriptor with its path, including `AT_FDCWD</cwd>`: most
//!   lookups are `*at` calls, so their base directory is right there in the line, and a
//!   `getdents64(3</root/src>, …)` names the directory it lists;
//! - `--pidns-translation` adds the host pid to the child pid a `clone` returns (the task
//!   lives in its own pid namespace), so a child's working directory can be inherited from
//!   its parent for the few non-`*at` calls with relative paths (`execve("./x")`);
//! - `-e trace=open,openat,…,statx,…,mkdir,…,clone,…,exit_group,fchdir,getdents64` ([`TRACED`];
//!   a name with `?` is skipped on an architecture without that call, as `fork` on arm64):
//!   every call the analysis reads a path from (the lookups and the writes below), process
//!   creation and ends, working-directory changes and directory reads — nothing else is
//!   needed, and `--seccomp-bpf` keeps the untraced calls from stopping at all. Not all of
//!   `%file`: its `mount`, `umount2` and `pivot_root` are bwrap's own setup, a seventh of the
//!   calls a sandbox makes before the task starts (every traced call is two stops of the
//!   tracee and a line strace writes), and nothing here reads them. Not the rest of
//!   `%process` (`wait4`, `kill`, `tgkill`, …): nothing here reads them, and each carries a
//!   pid strace translates out of the sandbox's namespace by reading `/proc`: a third of the
//!   translation's cost on a traced `tsc` (537 against 502 ms, 25 runs);
//! - `-qq -e signal=none`: no attach/exit/signal chatter;
//! - `-e inject=io_uring_setup:error=ENOSYS` ([`NO_URING`], the call traced so that it can be
//!   failed): a lookup submitted through io_uring (`IORING_OP_OPENAT`, `IORING_OP_STATX`) is
//!   made by the kernel's io_uring workers, not by a call of the task, and no trace shows it.
//!   libuv (`UV_USE_IO_URING=1`), tokio-uring and liburing tools fall back to the plain calls
//!   when the ring cannot be set up, as on a kernel without io_uring. A process that left
//!   the trace (`CLONE_UNTRACED`) makes no traced call at all: `--seccomp-bpf`'s filter fails
//!   each one with `ENOSYS` when no tracer answers.
//!
//! What counts as a lookup: `open`/`openat`/`openat2` of files and directories (except
//! write-only or creating opens: a failed write is the task's own error, not a read), the
//! `stat` family (`stat`, `lstat`, `newfstatat`, `fstatat64`, `statx`, …), `access`/
//! `faccessat`/`faccessat2`, `readlink`/`readlinkat`, the `xattr` family, `execve`/
//! `execveat`, `chdir`, `open_tree`, `name_to_handle_at`. Relative paths are resolved against
//! the call's directory fd, the process's tracked working directory (from `AT_FDCWD<…>`,
//! `chdir`, `fchdir`, and its parent at fork), in that order; a lookup whose base cannot be
//! known is skipped. `..` is resolved lexically; where symlinks under the root lay on the
//! way, the path they led to counts too ([`links`]). Shell globs, `ls` and `find` show up as
//! listings, `test -e`/`test -f` of a missing path as a failed `stat`.
//!
//! What the caller still decides: a lookup that fails or a listing is not always a read of
//! a workspace input — tools probe paths the task declares (absent today, an input when they
//! appear), its own outputs, ignored files. [`trace_reads`] reports the candidates with what
//! each listed directory held in the root; the side that has the workspace keeps the
//! undeclared ones.

use std::collections::{BTreeSet, HashMap};
use std::fs::{self, File};
use std::io::{self, BufRead, BufReader, Read};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use prova_protocol::work::{Listing, ReadsReport};

mod links;

/// Largest trace file read: a big build's trace of path lookups stays well under this; past
/// it the trace is refused rather than read into an unbounded parse.
pub const MAX_TRACE_BYTES: u64 = 256 << 20;

/// Longest trace line considered (an `execve` with a huge argv can be long; paths are near
/// the start). Longer lines are skipped.
pub const MAX_LINE_BYTES: usize = 1 << 20;

/// The calls traced: see the module docs.
pub const TRACED: &str = concat!(
    // Lookups ([`lookup`]).
    "trace=?open,openat,?openat2,?stat,?lstat,?stat64,?lstat64,?oldstat,?oldlstat,?access,",
    "?readlink,execve,chdir,?statfs,?statfs64,?getxattr,?lgetxattr,?listxattr,?llistxattr,",
    "?uselib,?newfstatat,?fstatat64,?statx,?faccessat,?faccessat2,?readlinkat,?execveat,",
    "?open_tree,?name_to_handle_at,?getxattrat,?listxattrat,",
    // Writes ([`write_targets`]).
    "?creat,?mkdir,?rmdir,?unlink,?truncate,?truncate64,?chmod,?chown,?lchown,?chown32,",
    "?lchown32,?utime,?utimes,?mknod,?setxattr,?lsetxattr,?removexattr,?lremovexattr,",
    "?mkdirat,?unlinkat,?fchmodat,?fchmodat2,?fchownat,?utimensat,?futimesat,?mknodat,",
    "?rename,?link,?renameat,?renameat2,?linkat,?symlink,?symlinkat,",
    // Processes, working directories, listings, and the call [`NO_URING`] fails.
    "clone,?clone3,?fork,?vfork,exit,exit_group,fchdir,?getdents,getdents64,?io_uring_setup"
);

/// Every traced process's `io_uring_setup` fails with `ENOSYS`: see the module docs.
pub const NO_URING: &str = "inject=?io_uring_setup:error=ENOSYS";

/// A trace could not be read.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    /// Reading the trace file failed.
    #[error("{}: {source}", path.display())]
    Io {
        /// The trace file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// The trace file is larger than [`MAX_TRACE_BYTES`].
    #[error("trace {} is {size} bytes, over the {limit}-byte limit", path.display())]
    TooLarge {
        /// The trace file.
        path: PathBuf,
        /// Its size.
        size: u64,
        /// The limit.
        limit: u64,
    },
}

/// Where strace runs when it follows a task ([`strace_argv`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tracer {
    /// In the worker's pid namespace, beside every process of the host. Each pid strace
    /// translates out of a sandbox's namespace costs a walk of the host's `/proc`.
    Host,
    /// As the command of `unshare` ([`OWN_PID_NS`]): a pid namespace and a `/proc` holding
    /// strace, the sandbox and the task only. For a sandboxed task (whose bwrap makes a
    /// namespace nested in this one); an unsandboxed one shares strace's namespace and needs
    /// no translation. `user_ns`: in a user namespace of its own too, mapping the worker's
    /// user to itself ([`OWN_PID_NS_USER`]) — what a user without `CAP_SYS_ADMIN` needs.
    OwnPidNs {
        /// Whether a user namespace comes with it.
        user_ns: bool,
    },
}

/// The `unshare` of [`Tracer::OwnPidNs`]: a pid namespace whose `/proc` (mounted in a
/// mount namespace of its own, everything else as it was, so the trace file and the
/// sandbox's sources are where they were) shows it alone, and whose first process —
/// strace — is killed when `unshare` dies, which takes every process of the namespace with
/// it. Not bubblewrap: run by root, it binds parts of `/proc` read-only over themselves, and
/// a `/proc` with such mounts cannot be mounted again by the sandbox's nested namespace.
pub const OWN_PID_NS: [&str; 6] =
    ["unshare", "--pid", "--fork", "--mount-proc", "--kill-child", "--"];

/// [`OWN_PID_NS`] for a user without the right to make namespaces: in a user namespace
/// mapping its user to itself (util-linux 2.38 or later).
pub const OWN_PID_NS_USER: [&str; 8] = [
    "unshare",
    "--user",
    "--map-current-user",
    "--pid",
    "--fork",
    "--mount-proc",
    "--kill-child",
    "--",
];

/// `strace … -o <out> -- <inner…>`: traces `inner` (normally a bwrap argv) and every process
/// it starts into the file `out`, which must lie outside the sandbox; under `unshare` for
/// [`Tracer::OwnPidNs`].
pub fn strace_argv(out: &Path, inner: &[String], tracer: Tracer) -> Vec<String> {
    let outer: &[&str] = match tracer {
        Tracer::Host => &[],
        Tracer::OwnPidNs { user_ns: false } => &OWN_PID_NS,
        Tracer::OwnPidNs { user_ns: true } => &OWN_PID_NS_USER,
    };
    let mut argv: Vec<String> = outer.iter().copied().map(str::to_owned).collect();
    argv.extend(
        [
            "strace",
            // Follow every process and thread the task starts.
            "-f",
            // No "attached"/"exited" lines.
            "-qq",
            // File descriptors with their paths, `AT_FDCWD</cwd>` included.
            "-y",
            // Host pids next to the namespace pids `clone` returns.
            "--pidns-translation",
            // Untraced calls run at full speed (needs `-f`).
            "--seccomp-bpf",
            "-e",
            "signal=none",
            "-e",
            TRACED,
            // No lookup behind the trace's back.
            "-e",
            NO_URING,
            "-o",
        ]
        .map(str::to_owned),
    );
    argv.push(out.to_string_lossy().into_owned());
    argv.push("--".to_owned());
    argv.extend(inner.iter().cloned());
    argv
}

/// Most failed lookups kept from one trace (a compiler probing include paths can try many;
/// past this the report would outgrow a wire frame).
pub const MAX_MISSING: usize = 20_000;

/// Most directory listings kept from one trace.
pub const MAX_LISTINGS: usize = 5_000;

/// Most directory entries reported over all listings of one trace; a listing cut short is
/// marked incomplete.
pub const MAX_LISTED_ENTRIES: usize = 100_000;

/// The workspace-relative paths (relative to `root`, the exec root) that the traced task
/// looked up and did not find, sorted and de-duplicated. Lookups outside the root (system
/// files) are ignored. See the module docs for what counts and what the caller filters.
pub fn undeclared_reads(trace: &Path, root: &Path) -> Result<Vec<String>, TraceError> {
    Ok(analyse(trace, root, root, &BTreeSet::new(), None)?.found.into_iter().collect())
}

/// Everything the trace of a task in exec root `root` says it touched that the root could
/// not show it: failed lookups, and the directories it listed with what each holds in the
/// root now (read after the run, while the root still exists); and every path under the root
/// it wrote or tried to write.
pub fn trace_reads(trace: &Path, root: &Path) -> Result<ReadsReport, TraceError> {
    reads_of(trace, root, root, false, &BTreeSet::new(), None)
}

/// [`trace_reads`] of a root that shows `stand_ins` (root-relative files, empty, standing
/// for workspace files its key folds by name only: `TaskSpec::stand_ins`): a lookup that
/// found one is reported with the failed ones — the root could not show the task that
/// file, only its name. `workspace`: where the workspace the root stands for lies on this
/// machine (a local run), whose paths the task may name absolutely (a config file, a
/// declared variable holding one): a lookup there counts as one of the same path in the
/// root, which the sandbox hides the workspace from.
pub fn trace_reads_with(
    trace: &Path,
    root: &Path,
    stand_ins: &BTreeSet<String>,
    workspace: Option<&Path>,
) -> Result<ReadsReport, TraceError> {
    reads_of(trace, root, root, false, stand_ins, workspace)
}

/// [`trace_reads`] of a survey run (the whole workspace visible at the exec root's path,
/// [`super::survey`]), which also keeps the lookups that succeeded (`touched`): what the task
/// read there. Listings still report what the exec root (the declared inputs) holds. `ws` is
/// the workspace the survey showed at the root's path: its symlinks are the ones the task
/// followed ([`links`]).
pub fn survey_reads(trace: &Path, root: &Path, ws: &Path) -> Result<ReadsReport, TraceError> {
    reads_of(trace, root, ws, true, &BTreeSet::new(), Some(ws))
}

/// The reads of the trace of a run at `root`, which showed what host directory `view` holds.
fn reads_of(
    trace: &Path,
    root: &Path,
    view: &Path,
    keep_touched: bool,
    stand_ins: &BTreeSet<String>,
    workspace: Option<&Path>,
) -> Result<ReadsReport, TraceError> {
    let mut a = analyse(trace, root, view, stand_ins, workspace)?;
    a.found.append(&mut a.stood);
    let mut budget = MAX_LISTED_ENTRIES;
    let listed = a
        .listed
        .iter()
        .take(MAX_LISTINGS)
        .map(|rel| {
            let dir = if rel.is_empty() { root.to_owned() } else { root.join(rel) };
            let (entries, complete) = entries_of(&dir, &mut budget);
            Listing { dir: rel.clone(), entries, complete }
        })
        .collect();
    Ok(ReadsReport {
        traced: true,
        missing: a.found.into_iter().collect(),
        listed,
        touched: if keep_touched { a.touched.into_iter().collect() } else { Vec::new() },
        wrote: a.wrote.into_iter().collect(),
    })
}

/// The names in `dir`, sorted, at most `budget` (which is spent); whether that is all.
fn entries_of(dir: &Path, budget: &mut usize) -> (Vec<String>, bool) {
    let Ok(rd) = fs::read_dir(dir) else { return (Vec::new(), false) };
    let mut names = Vec::new();
    let mut complete = true;
    for e in rd {
        let Ok(e) = e else {
            complete = false;
            continue;
        };
        if *budget == 0 {
            complete = false;
            break;
        }
        // A name that is not UTF-8 cannot be a workspace file (the file list skips those).
        if let Some(n) = e.file_name().to_str() {
            names.push(n.to_owned());
            *budget -= 1;
        }
    }
    names.sort_unstable();
    (names, complete)
}

fn analyse(
    trace: &Path,
    root: &Path,
    view: &Path,
    stand_ins: &BTreeSet<String>,
    workspace: Option<&Path>,
) -> Result<Analysis, TraceError> {
    let io_err = |source| TraceError::Io { path: trace.to_owned(), source };
    let size = fs::metadata(trace).map_err(io_err)?.len();
    if size > MAX_TRACE_BYTES {
        return Err(TraceError::TooLarge { path: trace.to_owned(), size, limit: MAX_TRACE_BYTES });
    }
    // Pass 1: who forked whom (a child's lines can come before its parent's `clone` returns).
    let mut parents = HashMap::new();
    for_each_event(trace, |ev| {
        if let Event::Complete { pid, text } = ev
            && let Some(call) = parse_call(text)
            && is_fork(call.name)
            && let Some(child) = child_pid(call.ret)
        {
            parents.insert(child, pid);
        }
    })?;
    // Pass 2: follow working directories, collect failed lookups and listings under the root.
    let root = normalize(root.as_os_str().as_bytes());
    let mut a = Analysis {
        links: links::Links::new(view, &root),
        workspace: workspace.map(|w| normalize(w.as_os_str().as_bytes())).filter(|w| *w != root),
        root,
        parents,
        cwd: HashMap::new(),
        fork_cwd: HashMap::new(),
        found: BTreeSet::new(),
        listed: BTreeSet::new(),
        touched: BTreeSet::new(),
        wrote: BTreeSet::new(),
        stand_ins: stand_ins.clone(),
        stood: BTreeSet::new(),
        host: HashMap::new(),
    };
    for_each_event(trace, |ev| a.event(ev))?;
    Ok(a)
}

/// One logical trace line, with `<unfinished ...>` and `<... resumed>` halves joined.
#[derive(Debug, PartialEq, Eq)]
enum Event<'a> {
    /// A call whose first half was seen (its result comes later).
    Unfinished { pid: u32, name: &'a str },
    /// A complete call: `name(args) = ret`.
    Complete { pid: u32, text: &'a str },
}

/// Reads `trace` line by line (lines over [`MAX_LINE_BYTES`] skipped, at most
/// [`MAX_TRACE_BYTES`] read), joining split calls, and hands each event to `f`.
fn for_each_event(trace: &Path, mut f: impl FnMut(Event<'_>)) -> Result<(), TraceError> {
    let io_err = |source| TraceError::Io { path: trace.to_owned(), source };
    let file = File::open(trace).map_err(io_err)?;
    let mut reader = BufReader::new(file.take(MAX_TRACE_BYTES));
    let mut joiner = Joiner::default();
    let mut buf = Vec::new();
    loop {
        buf.clear();
        let n = (&mut reader).take(MAX_LINE_BYTES as u64).read_until(b'\n', &mut buf);
        if n.map_err(io_err)? == 0 {
            return Ok(());
        }
        if buf.last() != Some(&b'\n') && buf.len() >= MAX_LINE_BYTES {
            skip_rest_of_line(&mut reader).map_err(io_err)?;
            continue;
        }
        let line = String::from_utf8_lossy(&buf);
        let mut joined = String::new();
        if let Some(ev) = joiner.feed(line.trim_end_matches('\n'), &mut joined) {
            f(ev);
        }
    }
}

fn skip_rest_of_line(reader: &mut impl BufRead) -> io::Result<()> {
    let mut junk = Vec::new();
    loop {
        junk.clear();
        let n = reader.take(MAX_LINE_BYTES as u64).read_until(b'\n', &mut junk)?;
        if n == 0 || junk.last() == Some(&b'\n') {
            return Ok(());
        }
    }
}

/// Joins the halves of calls that other processes' lines interrupted.
#[derive(Default)]
struct Joiner {
    /// pid → the first half of its unfinished call.
    pending: HashMap<u32, String>,
}

impl Joiner {
    /// The event for one line; `joined` is scratch space for a rejoined call.
    fn feed<'a>(&mut self, line: &'a str, joined: &'a mut String) -> Option<Event<'a>> {
        let digits = line.bytes().take_while(u8::is_ascii_digit).count();
        let pid: u32 = if digits == 0 { 0 } else { line[..digits].parse().ok()? };
        let rest = line[digits..].trim_start();
        if rest.starts_with("+++") || rest.starts_with("---") {
            // Exit or signal: an unfinished call of this process will never resume.
            self.pending.remove(&pid);
            return None;
        }
        if let Some(resumed) = rest.strip_prefix("<... ") {
            let (_, tail) = resumed.split_once(" resumed>")?;
            let head = self.pending.remove(&pid)?;
            joined.push_str(&head);
            joined.push_str(tail);
            let joined: &'a String = joined;
            return Some(Event::Complete { pid, text: joined.as_str() });
        }
        if let Some(head) = rest.strip_suffix(" <unfinished ...>") {
            self.pending.insert(pid, head.to_owned());
            let name = head.split_once('(').map_or(head, |(n, _)| n);
            return Some(Event::Unfinished { pid, name });
        }
        Some(Event::Complete { pid, text: rest })
    }
}

/// A parsed call.
#[derive(Debug, PartialEq, Eq)]
struct Call<'a> {
    name: &'a str,
    /// Top-level arguments, trimmed.
    args: Vec<&'a str>,
    /// What follows `=`: `0`, `3</path>`, `-1 ENOENT (No such file or directory)`, `?`.
    ret: &'a str,
}

/// Splits `name(arg, arg, …) = ret`, respecting quoted strings (with escapes), fd
/// annotations `<…>` and nested `[]{}()`.
fn parse_call(text: &str) -> Option<Call<'_>> {
    let open = text.find('(')?;
    let name = &text[..open];
    if name.is_empty() || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
        return None;
    }
    let bytes = text.as_bytes();
    let mut args = Vec::new();
    let (mut depth, mut start, mut i) = (0usize, open + 1, open + 1);
    let close = loop {
        let b = *bytes.get(i)?;
        match b {
            b'"' | b'<' => {
                let end = if b == b'"' { b'"' } else { b'>' };
                i += 1;
                while let Some(&c) = bytes.get(i) {
                    if c == b'\\' {
                        i += 1;
                    } else if c == end {
                        break;
                    }
                    i += 1;
                }
            }
            b'[' | b'{' | b'(' => depth += 1,
            b']' | b'}' => depth = depth.saturating_sub(1),
            b')' if depth == 0 => break i,
            b')' => depth -= 1,
            b',' if depth == 0 => {
                args.push(text[start..i].trim());
                start = i + 1;
            }
            _ => {}
        }
        i += 1;
    };
    let last = text[start..close].trim();
    if !last.is_empty() || !args.is_empty() {
        args.push(last);
    }
    let (_, ret) = text[close + 1..].split_once('=')?;
    Some(Call { name, args, ret: ret.trim() })
}

/// Which arguments of a lookup call are the directory fd, the path and the open flags.
struct Lookup {
    dirfd: Option<usize>,
    path: usize,
    flags: Option<usize>,
}

/// Whether `call` follows a symlink in its path's last component: not the `l*` calls nor
/// `readlink`, nor a call given `AT_SYMLINK_NOFOLLOW` or `O_NOFOLLOW` (nor
/// `name_to_handle_at`, which follows only when told to).
fn follows_last(call: &Call<'_>) -> bool {
    !matches!(
        call.name,
        "lstat"
            | "lstat64"
            | "oldlstat"
            | "readlink"
            | "readlinkat"
            | "lgetxattr"
            | "llistxattr"
            | "name_to_handle_at"
    ) && !call.args.iter().any(|a| a.contains("AT_SYMLINK_NOFOLLOW") || a.contains("O_NOFOLLOW"))
}

fn lookup(name: &str) -> Option<Lookup> {
    let (dirfd, path, flags) = match name {
        "open" => (None, 0, Some(1)),
        "openat" | "openat2" => (Some(0), 1, Some(2)),
        "stat" | "lstat" | "stat64" | "lstat64" | "oldstat" | "oldlstat" | "access"
        | "readlink" | "execve" | "chdir" | "statfs" | "statfs64" | "getxattr" | "lgetxattr"
        | "listxattr" | "llistxattr" | "uselib" => (None, 0, None),
        "newfstatat" | "fstatat64" | "statx" | "faccessat" | "faccessat2" | "readlinkat"
        | "execveat" | "open_tree" | "name_to_handle_at" | "getxattrat" | "listxattrat" => {
            (Some(0), 1, None)
        }
        _ => return None,
    };
    Some(Lookup { dirfd, path, flags })
}

/// The (directory fd argument, path argument) pairs a call writes: creating, removing,
/// renaming, linking, truncating a path or changing its metadata. Opens are judged by their
/// flags ([`is_write_open`]).
fn write_targets(name: &str) -> Option<&'static [(Option<usize>, usize)]> {
    Some(match name {
        "creat" | "mkdir" | "rmdir" | "unlink" | "truncate" | "truncate64" | "chmod" | "chown"
        | "lchown" | "chown32" | "lchown32" | "utime" | "utimes" | "mknod" | "setxattr"
        | "lsetxattr" | "removexattr" | "lremovexattr" => &[(None, 0)],
        "mkdirat" | "unlinkat" | "fchmodat" | "fchmodat2" | "fchownat" | "utimensat"
        | "futimesat" | "mknodat" => &[(Some(0), 1)],
        "rename" | "link" => &[(None, 0), (None, 1)],
        "renameat" | "renameat2" => &[(Some(0), 1), (Some(2), 3)],
        "linkat" => &[(Some(2), 3)],
        "symlink" => &[(None, 1)],
        "symlinkat" => &[(Some(1), 2)],
        _ => return None,
    })
}

/// Whether an open's flags (`O_WRONLY|O_CREAT|O_TRUNC`, or `{flags=…}` of `openat2`) write.
fn is_write_open(flags: &str) -> bool {
    ["O_WRONLY", "O_RDWR", "O_CREAT", "O_TRUNC", "O_APPEND", "O_TMPFILE"]
        .iter()
        .any(|f| flags.contains(f))
}

/// Whether a write call's result means the path was (or would have been, on the host)
/// written: it succeeded, or the read-only view refused it. `ENOENT` (nothing there to
/// remove, or no parent) and `EEXIST` (`mkdir -p` of what exists) changed nothing.
fn wrote(ret: &str) -> bool {
    !ret.starts_with("-1 ")
        || ["-1 EROFS", "-1 EACCES", "-1 EPERM", "-1 ETXTBSY"].iter().any(|e| ret.starts_with(e))
}

fn is_fork(name: &str) -> bool {
    matches!(name, "clone" | "clone3" | "fork" | "vfork")
}

/// The child a fork-like call returned: the host pid from `--pidns-translation`'s
/// `N /* M in strace's PID NS */`, else `N` itself.
fn child_pid(ret: &str) -> Option<u32> {
    if let Some((_, comment)) = ret.split_once("/* ")
        && let Some((host, _)) = comment.split_once(" in strace's PID NS")
    {
        return host.trim().parse().ok();
    }
    let n = ret.split_whitespace().next()?;
    n.parse().ok().filter(|&p: &u32| p > 0)
}

struct Analysis {
    /// The exec root, normalised, as bytes.
    root: Vec<u8>,
    /// The workspace the root stands for, normalised ([`trace_reads_with`]): a path there is
    /// taken as the same path in the root.
    workspace: Option<Vec<u8>>,
    /// child → parent (host pids).
    parents: HashMap<u32, u32>,
    /// Known working directory per pid.
    cwd: HashMap<u32, Vec<u8>>,
    /// A parent's working directory when it last started a fork-like call.
    fork_cwd: HashMap<u32, Vec<u8>>,
    /// Failed lookups under the root (at most [`MAX_MISSING`]).
    found: BTreeSet<String>,
    /// Directories under the root (or the root, `""`) whose entries were read.
    listed: BTreeSet<String>,
    /// Successful lookups under the root (at most [`MAX_MISSING`]): what a survey run, with
    /// the whole workspace visible, read.
    touched: BTreeSet<String>,
    /// Paths under the root the task wrote or tried to write (at most [`MAX_MISSING`]).
    wrote: BTreeSet<String>,
    /// The root's stand-ins ([`trace_reads_with`]).
    stand_ins: BTreeSet<String>,
    /// The stand-ins a lookup found (at most as many as there are).
    stood: BTreeSet<String>,
    /// The symlinks under the root, for where a lookup really led.
    links: links::Links,
    /// Paths outside the root resolved on this machine (at most [`MAX_HOST_PATHS`]): where
    /// each leads, `None` where nothing is.
    host: HashMap<Vec<u8>, Option<Vec<u8>>>,
}

/// Most paths outside the root [`Analysis::through_host_links`] remembers.
const MAX_HOST_PATHS: usize = 65_536;

/// How far up the parent chain a working directory is looked for.
const MAX_ANCESTRY: usize = 64;

impl Analysis {
    fn event(&mut self, ev: Event<'_>) {
        match ev {
            Event::Unfinished { pid, name } => {
                if is_fork(name) {
                    self.snapshot_for_fork(pid);
                }
            }
            Event::Complete { pid, text } => {
                if let Some(call) = parse_call(text) {
                    self.call(pid, &call);
                }
            }
        }
    }

    fn snapshot_for_fork(&mut self, pid: u32) {
        if let Some(cwd) = self.cwd_of(pid) {
            self.fork_cwd.insert(pid, cwd);
        }
    }

    /// The working directory of `pid`: known, or inherited from its parent at fork.
    fn cwd_of(&mut self, pid: u32) -> Option<Vec<u8>> {
        if let Some(c) = self.cwd.get(&pid) {
            return Some(c.clone());
        }
        let mut p = pid;
        for _ in 0..MAX_ANCESTRY {
            p = *self.parents.get(&p)?;
            if let Some(c) = self.fork_cwd.get(&p).or_else(|| self.cwd.get(&p)) {
                let c = c.clone();
                self.cwd.insert(pid, c.clone());
                return Some(c);
            }
        }
        None
    }

    fn call(&mut self, pid: u32, call: &Call<'_>) {
        if is_fork(call.name) {
            self.snapshot_for_fork(pid);
            return;
        }
        if matches!(call.name, "exit" | "exit_group") {
            self.cwd.remove(&pid);
            return;
        }
        let ok = call.ret == "0" || call.ret.starts_with("0 ");
        if call.name == "fchdir" {
            if ok && let Some(Some(dir)) = call.args.first().map(|a| fd_annotation(a).1) {
                self.cwd.insert(pid, normalize(&dir));
            }
            return;
        }
        if matches!(call.name, "getdents" | "getdents64") {
            if let Some(Some(dir)) = call.args.first().map(|a| fd_annotation(a).1) {
                let dir = normalize(&dir);
                let rel =
                    if dir == self.root { Some(&b""[..]) } else { strip_root(&dir, &self.root) };
                if let Some(rel) = rel
                    && self.listed.len() < MAX_LISTINGS
                {
                    self.listed.insert(String::from_utf8_lossy(rel).into_owned());
                }
            }
            return;
        }
        if let Some(targets) = write_targets(call.name) {
            if wrote(call.ret) {
                for &(dirfd, path) in targets {
                    let (dirfd, path) = (dirfd.and_then(|i| call.args.get(i)), call.args.get(path));
                    if let Some(p) = path.and_then(|p| self.resolve(pid, dirfd, p)) {
                        self.keep_write(&p);
                    }
                }
            }
            return;
        }
        let Some(l) = lookup(call.name) else { return };
        let dirfd = l.dirfd.and_then(|i| call.args.get(i));
        let Some(resolved) = call.args.get(l.path).and_then(|p| self.resolve(pid, dirfd, p)) else {
            return;
        };
        if call.name == "chdir" && ok {
            self.cwd.insert(pid, resolved);
            return;
        }
        let flags = l.flags.and_then(|i| call.args.get(i));
        let writes = flags.is_some_and(|f| is_write_open(f));
        // The path as written, and where the symlinks on its way led (`links`): the kernel's
        // own answer for an open (`= 3</path>`), else the root's links followed.
        let mut paths = vec![resolved];
        if let Some(real) = self.physical(&paths[0], follows_last(call), call.ret) {
            paths.push(real);
        }
        if writes {
            if wrote(call.ret) {
                for p in &paths {
                    self.keep_write(p);
                }
            }
            return;
        }
        if !call.ret.starts_with("-1 ") {
            // Found: what a survey run (the whole workspace visible) read, or a stand-in.
            for p in &paths {
                if let Some(rel) = strip_root(p, &self.root) {
                    let rel = String::from_utf8_lossy(rel);
                    if self.stand_ins.contains(rel.as_ref()) {
                        self.stood.insert(rel.clone().into_owned());
                    }
                    if self.touched.len() < MAX_MISSING {
                        self.touched.insert(rel.into_owned());
                    }
                }
            }
            return;
        }
        // Not found, or not allowed: either way the root could not show the task the path.
        if !(call.ret.starts_with("-1 ENOENT") || call.ret.starts_with("-1 EACCES")) {
            return;
        }
        for p in &paths {
            let mapped = match strip_root(p, &self.root) {
                Some(_) => None,
                None => self.through_host_links(p),
            };
            if let Some(rel) = strip_root(mapped.as_ref().unwrap_or(p), &self.root)
                && self.found.len() < MAX_MISSING
            {
                self.found.insert(String::from_utf8_lossy(rel).into_owned());
            }
        }
    }

    /// `path` (absolute, normalised, outside the root), a lookup the sandbox could not
    /// answer, taken onto the root when on this machine it leads into the workspace through
    /// a symlink (`~/src/ws -> /data/ws`, a link to one of its directories): its nearest
    /// part that exists here, resolved, with the rest after it. Only where the workspace is
    /// on this machine ([`Self::workspace`]).
    fn through_host_links(&mut self, path: &[u8]) -> Option<Vec<u8>> {
        // Never where this machine's answer is not the task's: `/proc/self/cwd` here is
        // prova's own directory, `/dev/fd/3` its own descriptor.
        if [&b"/proc/"[..], b"/dev/"].iter().any(|p| path.starts_with(p)) {
            return None;
        }
        let ws = self.workspace.clone()?;
        let mut cut = path.len();
        loop {
            let prefix = &path[..cut];
            let real = match self.host.get(prefix) {
                Some(real) => real.clone(),
                None => {
                    let real = fs::canonicalize(std::ffi::OsStr::from_bytes(prefix))
                        .ok()
                        .map(|p| p.into_os_string().into_encoded_bytes());
                    if self.host.len() < MAX_HOST_PATHS {
                        self.host.insert(prefix.to_vec(), real.clone());
                    }
                    real
                }
            };
            if let Some(mut full) = real {
                full.extend_from_slice(&path[cut..]);
                let full = normalize(&full);
                let inside = full == ws || strip_root(&full, &ws).is_some();
                return inside.then(|| self.onto_root(full));
            }
            cut = path[..cut].iter().rposition(|&b| b == b'/').filter(|&c| c > 0)?;
        }
    }

    /// Where the lookup of absolute `lexical` really led, when symlinks under the root made
    /// that another path: the path of the fd a successful open returned (`ret`), or else the
    /// root's links followed (the last one when the call `follow`s it). `None`: the lexical
    /// path is the one.
    fn physical(&mut self, lexical: &[u8], follow: bool, ret: &str) -> Option<Vec<u8>> {
        if let (_, Some(p)) = fd_annotation(ret) {
            let p = normalize(&p);
            return (p != lexical).then_some(p);
        }
        let rel = strip_root(lexical, &self.root)?;
        let real = self.links.physical(rel, follow)?;
        let mut abs = self.root.clone();
        abs.push(b'/');
        abs.extend_from_slice(&real);
        (abs != lexical).then_some(abs)
    }

    /// The absolute, normalised path a call's `path` argument names, resolved against its
    /// directory fd argument (`dirfd`, when the call has one) or the process's working
    /// directory. `AT_FDCWD</cwd>` also records the working directory. `None`: not a string,
    /// empty (`AT_EMPTY_PATH`: the fd itself), or relative to a base that cannot be known.
    fn resolve(&mut self, pid: u32, dirfd: Option<&&str>, path: &str) -> Option<Vec<u8>> {
        let mut base: Option<Vec<u8>> = None;
        if let Some(arg) = dirfd {
            let (fd, p) = fd_annotation(arg);
            match (fd == "AT_FDCWD", p) {
                (true, Some(p)) => {
                    let p = normalize(&p);
                    self.cwd.insert(pid, p.clone());
                    base = Some(p);
                }
                (true, None) => base = self.cwd_of(pid),
                (false, Some(p)) if p.starts_with(b"/") => base = Some(normalize(&p)),
                (false, _) => {}
            }
        } else {
            base = self.cwd_of(pid);
        }
        let path = unquote(path)?;
        if path.is_empty() {
            return None;
        }
        if path.starts_with(b"/") {
            return Some(self.onto_root(normalize(&path)));
        }
        let mut joined = base?;
        joined.push(b'/');
        joined.extend_from_slice(&path);
        Some(self.onto_root(normalize(&joined)))
    }

    /// `path` (absolute, normalised), with the workspace's place ([`Self::workspace`]) taken
    /// as the root's: the sandbox shows the root, never the workspace, so a lookup of a
    /// workspace path by its absolute name failed there, and what it looked for is the same
    /// path in the root. A path inside the root (which may lie inside the workspace) stays.
    fn onto_root(&self, path: Vec<u8>) -> Vec<u8> {
        let Some(ws) = &self.workspace else { return path };
        if path == self.root || strip_root(&path, &self.root).is_some() {
            return path;
        }
        let rest = if path == *ws { Some(&b""[..]) } else { strip_root(&path, ws) };
        match rest {
            Some(rest) => {
                let mut onto = self.root.clone();
                if !rest.is_empty() {
                    onto.push(b'/');
                    onto.extend_from_slice(rest);
                }
                onto
            }
            None => path,
        }
    }

    fn keep_write(&mut self, resolved: &[u8]) {
        if let Some(rel) = strip_root(resolved, &self.root)
            && self.wrote.len() < MAX_MISSING
        {
            self.wrote.insert(String::from_utf8_lossy(rel).into_owned());
        }
    }
}

/// `path` relative to `root` (both normalised), if it lies strictly inside it.
fn strip_root<'p>(path: &'p [u8], root: &[u8]) -> Option<&'p [u8]> {
    if root == b"/" {
        return path.get(1..).filter(|r| !r.is_empty());
    }
    let rest = path.strip_prefix(root)?;
    rest.strip_prefix(b"/").filter(|r| !r.is_empty())
}

/// An absolute path with `.`, `..` and empty components resolved lexically (`..` at the
/// top stays at `/`). A relative path is treated as if it started at `/`.
fn normalize(path: &[u8]) -> Vec<u8> {
    let mut parts: Vec<&[u8]> = Vec::new();
    for comp in path.split(|&b| b == b'/') {
        match comp {
            b"" | b"." => {}
            b".." => {
                parts.pop();
            }
            c => parts.push(c),
        }
    }
    let mut out = Vec::with_capacity(path.len() + 1);
    for p in &parts {
        out.push(b'/');
        out.extend_from_slice(p);
    }
    if out.is_empty() {
        out.push(b'/');
    }
    out
}

/// Splits an fd argument `3</path>` / `AT_FDCWD</path>` / `AT_FDCWD` into the fd text and
/// the decoded annotation.
fn fd_annotation(arg: &str) -> (&str, Option<Vec<u8>>) {
    match arg.split_once('<') {
        Some((fd, rest)) => (fd, Some(unescape(rest.as_bytes(), b'>'))),
        None => (arg, None),
    }
}

/// The bytes of a quoted string argument (`"a\"b"` → `a"b`); `None` if not a string.
fn unquote(arg: &str) -> Option<Vec<u8>> {
    let body = arg.strip_prefix('"')?;
    Some(unescape(body.as_bytes(), b'"'))
}

/// Decodes strace's C-style escapes (`\"`, `\\`, `\n`, `\t`, `\r`, `\v`, `\f`, `\xHH`,
/// `\NNN` octal) up to the unescaped `end` byte (or the end of input).
fn unescape(s: &[u8], end: u8) -> Vec<u8> {
    let mut out = Vec::with_capacity(s.len());
    let mut i = 0;
    while let Some(&b) = s.get(i) {
        i += 1;
        if b == end {
            break;
        }
        if b != b'\\' {
            out.push(b);
            continue;
        }
        let Some(&e) = s.get(i) else { break };
        i += 1;
        match e {
            b'n' => out.push(b'\n'),
            b't' => out.push(b'\t'),
            b'r' => out.push(b'\r'),
            b'v' => out.push(0x0b),
            b'f' => out.push(0x0c),
            b'x' => {
                let hex: Vec<u8> =
                    s[i..].iter().take(2).take_while(|c| c.is_ascii_hexdigit()).copied().collect();
                i += hex.len();
                let v = std::str::from_utf8(&hex).ok().and_then(|h| u8::from_str_radix(h, 16).ok());
                out.push(v.unwrap_or(b'x'));
            }
            b'0'..=b'7' => {
                let mut v = u32::from(e - b'0');
                for _ in 0..2 {
                    match s.get(i) {
                        Some(&d @ b'0'..=b'7') => {
                            v = v * 8 + u32::from(d - b'0');
                            i += 1;
                        }
                        _ => break,
                    }
                }
                out.push(u8::try_from(v).unwrap_or(u8::MAX));
            }
            other => out.push(other),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A trace as strace writes it with the options of [`strace_argv`]: interleaved
    /// processes, split calls, escapes, relative paths, a vfork child whose lines come
    /// before its parent's `vfork` returns.
    const CANNED: &str = r#"100  execve("/usr/bin/bwrap", ["bwrap", "--unshare-all"], 0x7ffd /* 35 vars */) = 0
100  clone(child_stack=NULL, flags=CLONE_NEWNS|CLONE_NEWPID|SIGCHLD) = 101
101  chdir("/ws/root/p") = 0
101  clone(child_stack=NULL, flags=SIGCHLD, child_tidptr=0x7f) = 2 /* 102 in strace's PID NS */
102  openat(AT_FDCWD</ws/root/p>, "in.txt", O_RDONLY) = 3</ws/root/p/in.txt>
102  openat(AT_FDCWD</ws/root/p>, "/usr/share/locale/locale.alias", O_RDONLY|O_CLOEXEC) = -1 ENOENT (No such file or directory)
102  openat(AT_FDCWD</ws/root/p>, "../sibling/secret.txt", O_RDONLY <unfinished ...>
103  newfstatat(AT_FDCWD</ws/root/p>, "odd \"name\\x\" \303\251", 0x7ffc, 0 <unfinished ...>
102  <... openat resumed>) = -1 ENOENT (No such file or directory)
103  <... newfstatat resumed>) = -1 ENOENT (No such file or directory)
102  vfork( <unfinished ...>
104  execve("./tool.sh", ["./tool.sh"], 0x55 /* 3 vars */) = -1 ENOENT (No such file or directory)
102  <... vfork resumed>) = 5 /* 104 in strace's PID NS */
102  openat(AT_FDCWD</ws/root/p>, "out/new.txt", O_WRONLY|O_CREAT|O_TRUNC, 0666) = -1 ENOENT (No such file or directory)
102  openat(3</ws/root/q>, "deep/x.json", O_RDONLY|O_CLOEXEC) = -1 ENOENT (No such file or directory)
102  access("../found.txt", R_OK) = 0
102  statx(AT_FDCWD</ws/root/we\74ird\76>, "", AT_EMPTY_PATH, STATX_ALL, 0x7) = -1 ENOENT (No such file or directory)
102  openat(AT_FDCWD</ws/root/we\74ird\76>, "x", O_RDONLY) = -1 ENOENT (No such file or directory)
102  readlink("/ws/root", 0x7ffc, 4096) = -1 ENOENT (No such file or directory)
102  openat(AT_FDCWD</ws/root/p>, "../../../etc/shadow", O_RDONLY) = -1 ENOENT (No such file or directory)
102  --- SIGCHLD {si_signo=SIGCHLD, si_code=CLD_EXITED} ---
102  chdir("..") = 0
102  stat("p/again", 0x7ffc) = -1 ENOENT (No such file or directory)
102  exit_group(1) = ?
100  +++ exited with 1 +++
"#;

    fn canned_file(text: &str) -> tempfile::NamedTempFile {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        std::io::Write::write_all(&mut f, text.as_bytes()).unwrap();
        f
    }

    #[test]
    fn canned_trace_names_exactly_the_missing_paths_under_the_root() {
        let f = canned_file(CANNED);
        let got = undeclared_reads(f.path(), Path::new("/ws/root")).unwrap();
        assert_eq!(
            got,
            [
                "p/again",
                "p/odd \"name\\x\" é",
                "p/tool.sh",
                "q/deep/x.json",
                "sibling/secret.txt",
                "we<ird>/x",
            ]
        );
        // A root given with a trailing slash or `.` is the same root.
        assert_eq!(undeclared_reads(f.path(), Path::new("/ws/./root/")).unwrap(), got);
    }

    #[test]
    fn listings_and_refused_lookups_are_kept() {
        let f = canned_file(
            r#"7  openat(AT_FDCWD</r/p>, "src", O_RDONLY|O_NONBLOCK|O_CLOEXEC|O_DIRECTORY) = 3</r/p/src>
7  getdents64(3</r/p/src>, 0x55d0 /* 3 entries */, 32768) = 80
7  getdents64(3</r/p/src>, 0x55d0 /* 0 entries */, 32768) = 0
7  getdents64(4</r>, 0x55d0 /* 2 entries */, 32768) = 48
7  getdents64(5</etc>, 0x55d0 /* 9 entries */, 32768) = 480
7  faccessat2(AT_FDCWD</r/p>, "locked.txt", R_OK, AT_EACCESS) = -1 EACCES (Permission denied)
7  statx(3</r/p/src>, "gone.h", AT_STATX_SYNC_AS_STAT, STATX_ALL, 0x7ffc) = -1 ENOENT (No such file or directory)
7  readlinkat(AT_FDCWD</r/p>, "link", 0x7ffc, 4096) = -1 EINVAL (Invalid argument)
"#,
        );
        let a =
            analyse(f.path(), Path::new("/r"), Path::new("/r"), &BTreeSet::new(), None).unwrap();
        assert_eq!(a.listed.into_iter().collect::<Vec<_>>(), ["", "p/src"]);
        assert_eq!(a.found.into_iter().collect::<Vec<_>>(), ["p/locked.txt", "p/src/gone.h"]);
        assert!(TRACED.contains("getdents64"), "{TRACED}");
        // Every call the analysis reads is traced: forks (parents), ends (a pid reused),
        // execs (lookups); none that only carries a pid.
        for name in ["clone", "clone3", "fork", "vfork", "exit", "exit_group", "execve", "fchdir"] {
            let mut traced = TRACED.split([',', '=']).map(|t| t.trim_start_matches('?'));
            assert!(traced.any(|t| t == name), "{name}: {TRACED}");
        }
        assert!(!TRACED.contains("%process") && !TRACED.contains("wait4"), "{TRACED}");
    }

    /// The names in [`TRACED`], without their `?`.
    fn traced_names() -> Vec<&'static str> {
        let set = TRACED.strip_prefix("trace=").unwrap();
        set.split(',').map(|t| t.trim_start_matches('?')).collect()
    }

    #[test]
    fn every_call_the_analysis_reads_a_path_from_is_traced_and_no_other_path_call() {
        // strace's `%file` on x86_64 and the 32-bit architectures, newest calls included:
        // each is traced exactly when the analysis reads it as a lookup or a write.
        let file_calls = [
            "open",
            "stat",
            "lstat",
            "access",
            "execve",
            "truncate",
            "chdir",
            "rename",
            "mkdir",
            "rmdir",
            "creat",
            "link",
            "unlink",
            "symlink",
            "readlink",
            "chmod",
            "chown",
            "lchown",
            "utime",
            "mknod",
            "uselib",
            "statfs",
            "pivot_root",
            "chroot",
            "acct",
            "mount",
            "umount",
            "umount2",
            "swapon",
            "swapoff",
            "setxattr",
            "lsetxattr",
            "getxattr",
            "lgetxattr",
            "listxattr",
            "llistxattr",
            "removexattr",
            "lremovexattr",
            "utimes",
            "inotify_add_watch",
            "openat",
            "mkdirat",
            "mknodat",
            "fchownat",
            "futimesat",
            "newfstatat",
            "unlinkat",
            "renameat",
            "linkat",
            "symlinkat",
            "readlinkat",
            "fchmodat",
            "faccessat",
            "utimensat",
            "fanotify_mark",
            "name_to_handle_at",
            "renameat2",
            "execveat",
            "statx",
            "open_tree",
            "move_mount",
            "fsconfig",
            "mount_setattr",
            "openat2",
            "faccessat2",
            "fchmodat2",
            "quotactl",
            "setxattrat",
            "getxattrat",
            "listxattrat",
            "removexattrat",
            "stat64",
            "lstat64",
            "oldstat",
            "oldlstat",
            "statfs64",
            "fstatat64",
            "truncate64",
            "chown32",
            "lchown32",
        ];
        let traced = traced_names();
        for name in file_calls {
            let read = lookup(name).is_some() || write_targets(name).is_some();
            assert_eq!(traced.contains(&name), read, "{name}: {TRACED}");
        }
        // bwrap's own setup is not traced.
        for name in ["mount", "umount2", "pivot_root"] {
            assert!(!traced.contains(&name), "{name}");
        }
        // And nothing is traced that the analysis does not read (a misspelt name with `?`
        // would be skipped by strace without a word).
        let others =
            ["clone", "clone3", "fork", "vfork", "exit", "exit_group", "fchdir", "getdents"];
        for name in &traced {
            let known = lookup(name).is_some()
                || write_targets(name).is_some()
                || others.contains(name)
                || *name == "getdents64"
                || *name == "io_uring_setup";
            assert!(known, "{name} is traced but not read");
        }
    }

    #[test]
    fn trace_reads_lists_what_the_root_holds_for_each_listed_directory() {
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(root.path().join("p/src/sub")).unwrap();
        std::fs::write(root.path().join("p/src/b.txt"), "b").unwrap();
        std::fs::write(root.path().join("p/src/a.txt"), "a").unwrap();
        let r = root.path().display().to_string();
        let f = canned_file(&format!(
            "7  getdents64(3<{r}/p/src>, 0x1 /* 3 entries */, 32768) = 80\n\
             7  getdents64(3<{r}/p/gone>, 0x1 /* 3 entries */, 32768) = 80\n"
        ));
        let reads = trace_reads(f.path(), root.path()).unwrap();
        assert_eq!(
            reads.listed,
            [
                Listing { dir: "p/gone".into(), entries: vec![], complete: false },
                Listing {
                    dir: "p/src".into(),
                    entries: vec!["a.txt".into(), "b.txt".into(), "sub".into()],
                    complete: true,
                },
            ]
        );
    }

    #[test]
    fn a_stand_in_found_is_reported_with_the_failed_lookups() {
        let f = canned_file(
            r#"7  getdents64(3</r/p>, 0x5600 /* 4 entries */, 32768) = 112
7  newfstatat(AT_FDCWD</r/p>, "README.md", {st_mode=S_IFREG|0444, st_size=0, ...}, 0) = 0
7  openat(AT_FDCWD</r/p>, "LICENSE", O_RDONLY|O_CLOEXEC) = 3</r/p/LICENSE>
7  openat(AT_FDCWD</r/p>, "src/a.txt", O_RDONLY|O_CLOEXEC) = 3</r/p/src/a.txt>
7  newfstatat(AT_FDCWD</r/p>, "docs", {st_mode=S_IFDIR|0755, st_size=0, ...}, 0) = 0
7  openat(AT_FDCWD</r/p>, "gone.txt", O_RDONLY|O_CLOEXEC) = -1 ENOENT (No such file or directory)
"#,
        );
        let stand_ins: BTreeSet<String> =
            ["p/README.md", "p/LICENSE", "p/NOTES.md"].map(String::from).into();
        let reads = trace_reads_with(f.path(), Path::new("/r"), &stand_ins, None).unwrap();
        // Found stand-ins (a stat, an open) with the failed lookup; the one untouched and the
        // declared input are not; a directory stand-in is the directory listing's business.
        assert_eq!(reads.missing, ["p/LICENSE", "p/README.md", "p/gone.txt"]);
        assert!(reads.touched.is_empty());
        // Without stand-ins, only the failed lookup.
        assert_eq!(trace_reads(f.path(), Path::new("/r")).unwrap().missing, ["p/gone.txt"]);
    }

    #[test]
    fn a_lookup_of_the_workspace_by_its_absolute_path_counts_as_one_in_the_root() {
        let f = canned_file(
            r#"7  openat(AT_FDCWD</r/p>, "/home/u/ws/p/secret.txt", O_RDONLY) = -1 ENOENT (No such file or directory)
7  newfstatat(AT_FDCWD</r/p>, "../../home/u/ws/q/cfg.json", 0x7ffc, 0) = -1 ENOENT (No such file or directory)
7  access("/home/u/ws", R_OK) = -1 ENOENT (No such file or directory)
7  access("/home/u/wsx/a", R_OK) = -1 ENOENT (No such file or directory)
7  openat(AT_FDCWD</r/p>, "gone.txt", O_RDONLY) = -1 ENOENT (No such file or directory)
"#,
        );
        let none = BTreeSet::new();
        let ws = Path::new("/home/u/ws");
        let reads = trace_reads_with(f.path(), Path::new("/r"), &none, Some(ws)).unwrap();
        // Through `..` too; the workspace itself and a sibling that only shares a prefix are
        // no path in it.
        assert_eq!(reads.missing, ["p/gone.txt", "p/secret.txt", "q/cfg.json"]);
        assert_eq!(
            trace_reads_with(f.path(), Path::new("/r"), &none, None).unwrap().missing,
            ["p/gone.txt"]
        );
        // A root inside the workspace (`.prova/worker/roots/…`) keeps its own paths.
        let g = canned_file(
            r#"7  openat(AT_FDCWD</w/.prova/r/p>, "a.txt", O_RDONLY) = -1 ENOENT (No such file or directory)
7  openat(AT_FDCWD</w/.prova/r/p>, "/w/p/b.txt", O_RDONLY) = -1 ENOENT (No such file or directory)
"#,
        );
        let reads =
            trace_reads_with(g.path(), Path::new("/w/.prova/r"), &none, Some(Path::new("/w")))
                .unwrap();
        assert_eq!(reads.missing, ["p/a.txt", "p/b.txt"]);
    }

    #[test]
    fn a_failed_lookup_through_a_symlink_to_the_workspace_counts_as_one_in_the_root() {
        let t = tempfile::tempdir().unwrap();
        let ws = t.path().join("ws");
        std::fs::create_dir_all(ws.join("p")).unwrap();
        let elsewhere = t.path().join("home");
        std::fs::create_dir_all(&elsewhere).unwrap();
        std::os::unix::fs::symlink(&ws, elsewhere.join("ws-link")).unwrap();
        std::os::unix::fs::symlink(ws.join("p"), elsewhere.join("p-link")).unwrap();
        std::os::unix::fs::symlink("/usr", elsewhere.join("usr-link")).unwrap();
        let e = elsewhere.display();
        let f = canned_file(&format!(
            r#"7  openat(AT_FDCWD</r/p>, "{e}/ws-link/p/secret.txt", O_RDONLY) = -1 ENOENT (No such file or directory)
7  newfstatat(AT_FDCWD</r/p>, "{e}/p-link/conf/deep/x.cfg", 0x7ffc, 0) = -1 ENOENT (No such file or directory)
7  access("{e}/usr-link/nothing-here", R_OK) = -1 ENOENT (No such file or directory)
7  access("{e}/absent/ws-link", R_OK) = -1 ENOENT (No such file or directory)
7  openat(AT_FDCWD</r/p>, "{e}/ws-link/p/found.txt", O_RDONLY) = 3</usr/lib/found.txt>
7  newfstatat(AT_FDCWD</r/p>, "/proc/self/cwd/nowhere", 0x7ffc, 0) = -1 ENOENT (No such file or directory)
"#
        ));
        let none = BTreeSet::new();
        let reads = trace_reads_with(f.path(), Path::new("/r"), &none, Some(&ws)).unwrap();
        // Where each leads on this machine: into the workspace, or anywhere else. A lookup
        // the sandbox answered is what it showed.
        assert_eq!(reads.missing, ["p/conf/deep/x.cfg", "p/secret.txt"]);
        // `/proc/self/cwd` here is this process's own directory, not the task's.
        let here = std::env::current_dir().unwrap().canonicalize().unwrap();
        let reads = trace_reads_with(f.path(), Path::new("/r"), &none, Some(&here)).unwrap();
        assert!(!reads.missing.iter().any(|m| m.contains("nowhere")), "{:?}", reads.missing);
        // No workspace on this machine (a farm worker): nothing to follow.
        assert!(
            trace_reads_with(f.path(), Path::new("/r"), &none, None).unwrap().missing.is_empty()
        );
    }

    #[test]
    fn writes_and_successful_lookups_are_kept_apart_from_failed_reads() {
        let f = canned_file(
            r#"7  openat(AT_FDCWD</r/p>, "state.tsbuildinfo", O_WRONLY|O_CREAT|O_TRUNC, 0666) = -1 EROFS (Read-only file system)
7  openat(AT_FDCWD</r/p>, "dist/out.js", O_WRONLY|O_CREAT|O_TRUNC, 0666) = 3</r/p/dist/out.js>
7  openat(AT_FDCWD</r/p>, "gone/new.txt", O_WRONLY|O_CREAT, 0666) = -1 ENOENT (No such file or directory)
7  mkdirat(AT_FDCWD</r/p>, "cache", 0777) = -1 EROFS (Read-only file system)
7  mkdir("dist", 0777) = -1 EEXIST (File exists)
7  renameat2(AT_FDCWD</r/p>, "dist/a", 4</r/q>, "moved", RENAME_NOREPLACE) = 0
7  unlinkat(AT_FDCWD</r/p>, "src/old.txt", 0) = -1 EROFS (Read-only file system)
7  unlink("/r/p/absent") = -1 ENOENT (No such file or directory)
7  symlinkat("target", AT_FDCWD</r/p>, "ln") = 0
7  utimensat(AT_FDCWD</r/p>, "touched", NULL, 0) = 0
7  newfstatat(AT_FDCWD</r/p>, "read.txt", {st_mode=S_IFREG|0644, st_size=2, ...}, 0) = 0
7  openat(AT_FDCWD</r/p>, "in.txt", O_RDONLY|O_CLOEXEC) = 3</r/p/in.txt>
7  openat(AT_FDCWD</r/p>, "/etc/passwd", O_RDONLY|O_CLOEXEC) = 3</etc/passwd>
"#,
        );
        let a =
            analyse(f.path(), Path::new("/r"), Path::new("/r"), &BTreeSet::new(), None).unwrap();
        assert_eq!(
            a.wrote.iter().map(String::as_str).collect::<Vec<_>>(),
            [
                "p/cache",
                "p/dist/a",
                "p/dist/out.js",
                "p/ln",
                "p/src/old.txt",
                "p/state.tsbuildinfo",
                "p/touched",
                "q/moved"
            ]
        );
        assert_eq!(
            a.touched.iter().map(String::as_str).collect::<Vec<_>>(),
            ["p/in.txt", "p/read.txt"]
        );
        assert!(a.found.is_empty(), "{:?}", a.found);
        // Only a survey reports what it read that exists.
        assert!(trace_reads(f.path(), Path::new("/r")).unwrap().touched.is_empty());
        assert_eq!(
            survey_reads(f.path(), Path::new("/r"), Path::new("/r")).unwrap().touched.len(),
            2
        );
    }

    #[test]
    fn a_lookup_through_a_symlink_counts_where_it_led() {
        // An upstream's output `a/dist/cfg` links to `../cfg.json`, which the root shows only
        // as an empty stand-in: reading through the link reads the stand-in, though the path
        // as written is a declared output.
        let t = tempfile::tempdir().unwrap();
        let r = t.path().canonicalize().unwrap();
        fs::create_dir_all(r.join("a/dist")).unwrap();
        fs::create_dir_all(r.join("b")).unwrap();
        std::os::unix::fs::symlink("../cfg.json", r.join("a/dist/cfg")).unwrap();
        std::os::unix::fs::symlink("../a", r.join("b/up")).unwrap();
        fs::write(r.join("a/cfg.json"), "").unwrap();
        let root = r.display();
        let stand_ins: BTreeSet<String> = ["a/cfg.json".to_owned()].into();
        let reads = |lines: &str| {
            let f = canned_file(lines);
            let report = reads_of(f.path(), &r, &r, true, &stand_ins, None).unwrap();
            (report.missing, report.touched)
        };
        // An open: the kernel's own answer (the returned fd's path).
        let (missing, touched) = reads(&format!(
            "9 openat(AT_FDCWD<{root}/b>, \"../a/dist/cfg\", O_RDONLY) = 3<{root}/a/cfg.json>\n"
        ));
        assert_eq!(missing, ["a/cfg.json"]);
        assert_eq!(touched, ["a/cfg.json", "a/dist/cfg"]);
        // A stat follows the link too (the root's links read), through a linked directory.
        let (missing, _) = reads(&format!(
            "9 newfstatat(AT_FDCWD<{root}/b>, \"up/dist/cfg\", {{st_mode=S_IFREG|0444}}, 0) = 0\n"
        ));
        assert_eq!(missing, ["a/cfg.json"]);
        // An lstat of the link, or an open that does not follow it, reads only the link.
        for line in [
            format!(
                "9 newfstatat(AT_FDCWD<{root}/b>, \"../a/dist/cfg\", {{st_mode=S_IFLNK|0777}}, AT_SYMLINK_NOFOLLOW) = 0\n"
            ),
            format!("9 lstat(\"{root}/a/dist/cfg\", {{st_mode=S_IFLNK|0777}}) = 0\n"),
            format!(
                "9 readlinkat(AT_FDCWD<{root}/b>, \"../a/dist/cfg\", \"../cfg.json\", 4095) = 11\n"
            ),
            format!(
                "9 openat(AT_FDCWD<{root}/b>, \"../a/dist/cfg\", O_RDONLY|O_NOFOLLOW|O_PATH) = 3<{root}/a/dist/cfg>\n"
            ),
        ] {
            let (missing, _) = reads(&line);
            assert!(missing.is_empty(), "{line}: {missing:?}");
        }
        // A failed lookup through the link names where it led as well as the path written.
        fs::remove_file(r.join("a/cfg.json")).unwrap();
        let (missing, _) = reads(&format!(
            "9 openat(AT_FDCWD<{root}/b>, \"../a/dist/cfg\", O_RDONLY) = -1 ENOENT (No such file or directory)\n"
        ));
        assert_eq!(missing, ["a/cfg.json", "a/dist/cfg"]);
    }

    #[test]
    fn joiner_pairs_halves_by_pid() {
        let mut j = Joiner::default();
        let mut s1 = String::new();
        assert_eq!(
            j.feed("7  read(3,  <unfinished ...>", &mut s1),
            Some(Event::Unfinished { pid: 7, name: "read" })
        );
        let mut s2 = String::new();
        // A resumption for a pid with nothing pending is dropped.
        assert_eq!(j.feed("8  <... read resumed>\"x\", 1) = 1", &mut s2), None);
        let mut s3 = String::new();
        assert_eq!(
            j.feed("7  <... read resumed>\"x\", 1) = 1", &mut s3),
            Some(Event::Complete { pid: 7, text: "read(3, \"x\", 1) = 1" })
        );
    }

    #[test]
    fn calls_split_on_top_level_commas_only() {
        let c = parse_call(
            r#"openat(AT_FDCWD</a,b>, "x, \"y)\"", {flags=O_RDONLY, mode=0}) = -1 ENOENT (No such file or directory)"#,
        )
        .unwrap();
        assert_eq!(c.name, "openat");
        assert_eq!(c.args, [r"AT_FDCWD</a,b>", r#""x, \"y)\"""#, "{flags=O_RDONLY, mode=0}"]);
        assert_eq!(c.ret, "-1 ENOENT (No such file or directory)");
        assert_eq!(unquote(c.args[1]).unwrap(), b"x, \"y)\"");
        assert_eq!(fd_annotation(c.args[0]), ("AT_FDCWD", Some(b"/a,b".to_vec())));
        assert_eq!(parse_call("vfork() = 3").unwrap().args, Vec::<&str>::new());
        assert!(parse_call("garbage").is_none());
        assert!(parse_call("open(\"unterminated").is_none());
    }

    #[test]
    fn escapes_and_normalisation() {
        assert_eq!(unescape(br#"a\tb\x41\101\7\\\"""#, b'"'), b"a\tbAA\x07\\\"");
        assert_eq!(unescape(br"we\74ird\76>tail", b'>'), b"we<ird>");
        assert_eq!(normalize(b"/a/./b//c/../d/"), b"/a/b/d");
        assert_eq!(normalize(b"/../.."), b"/");
        assert_eq!(strip_root(b"/r/x/y", b"/r"), Some(&b"x/y"[..]));
        assert_eq!(strip_root(b"/r", b"/r"), None);
        assert_eq!(strip_root(b"/rx/y", b"/r"), None);
        assert_eq!(child_pid("2 /* 8437 in strace's PID NS */"), Some(8437));
        assert_eq!(child_pid("8436"), Some(8436));
        assert_eq!(child_pid("-1 EAGAIN (Resource temporarily unavailable)"), None);
    }

    #[test]
    fn oversized_traces_are_refused_and_long_lines_skipped() {
        let long =
            format!("1  open(\"/r/{}\", O_RDONLY) = -1 ENOENT (x)\n", "a".repeat(MAX_LINE_BYTES));
        let f = canned_file(&format!(
            "{long}1  open(\"/r/short\", O_RDONLY) = -1 ENOENT (No such file or directory)\n"
        ));
        assert_eq!(undeclared_reads(f.path(), Path::new("/r")).unwrap(), ["short"]);
        let big = tempfile::NamedTempFile::new().unwrap();
        big.as_file().set_len(MAX_TRACE_BYTES + 1).unwrap();
        assert!(matches!(
            undeclared_reads(big.path(), Path::new("/r")),
            Err(TraceError::TooLarge { .. })
        ));
        assert!(matches!(
            undeclared_reads(Path::new("/nonexistent/trace"), Path::new("/r")),
            Err(TraceError::Io { .. })
        ));
    }

    #[test]
    fn argv_wraps_the_inner_command_after_a_separator() {
        let inner = vec!["bwrap".to_owned(), "--".to_owned(), "sh".to_owned()];
        for (tracer, outer) in [
            (Tracer::Host, &[][..]),
            (Tracer::OwnPidNs { user_ns: false }, &OWN_PID_NS[..]),
            (Tracer::OwnPidNs { user_ns: true }, &OWN_PID_NS_USER[..]),
        ] {
            let a = strace_argv(Path::new("/t/trace.txt"), &inner, tracer);
            assert_eq!(a[..outer.len()], *outer);
            assert_eq!(a[outer.len()], "strace");
            let o = a.iter().position(|x| x == "-o").unwrap();
            assert_eq!(a[o + 1], "/t/trace.txt");
            assert_eq!(a[o + 2], "--");
            assert_eq!(a[o + 3..], inner[..]);
            for flag in ["-f", "-y", "-qq", "--pidns-translation"] {
                assert!(a.contains(&flag.to_owned()), "{flag}");
            }
            // io_uring is refused, and the call it refuses is traced (strace injects into
            // traced calls only).
            let inject = a.iter().position(|x| x == NO_URING).unwrap();
            assert_eq!(a[inject - 1], "-e");
            assert!(TRACED.split(',').any(|t| t == "?io_uring_setup"), "{TRACED}");
        }
    }
}
