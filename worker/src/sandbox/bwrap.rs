//! The bubblewrap command line: a task sees its exec root (read-only, at its real path), its
//! output directories (writable), the system's programs and libraries (read-only), a private
//! `/proc`, `/dev` and `/tmp` — and nothing else of the host.
//!
//! The argv, in order (bwrap applies its mount operations in the order given):
//!
//! ```text
//! bwrap --unshare-all [--share-net] --die-with-parent --new-session
//!       --ro-bind /usr /usr  --ro-bind-try <system path> <same> …  [--ro-bind-try <extra> <same> …]
//!       --proc /proc --dev /dev --tmpfs /tmp
//!       --ro-bind <root> <root>  --bind <writable> <same> …  --ro-bind <readonly> <same> …
//!       --ro-bind <tree> <its mount point> …
//!       --remount-ro /  --chdir <cwd>  [--hostname <h>] [--uid <u>] [--gid <g>]
//!       -- <inner argv…>
//! ```
//!
//! The environment is not bwrap's business: the executor starts bwrap with the task's
//! complete environment, and bwrap passes it through unchanged.

use std::path::{Path, PathBuf};

/// System paths mounted read-only when they exist (`--ro-bind-try`), besides `/usr`:
/// enough for programs to start (the loader, libraries, `/bin/sh`), resolve users and time
/// zones, and verify TLS. Deliberately not all of `/etc` (host configuration and secrets),
/// and never `/home`, `/root`, `/tmp`, `/var` or the workspace.
pub const SYSTEM_RO_PATHS: &[&str] = &[
    // Programs and libraries outside /usr on hosts without a merged /usr (symlinks into
    // /usr elsewhere, made again as links: [`system_mount`]).
    "/bin",
    "/sbin",
    "/lib",
    "/lib64",
    "/lib32",
    // The dynamic loader's cache and configuration.
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    // Debian's alternatives (`/usr/bin/awk -> /etc/alternatives/awk -> …`).
    "/etc/alternatives",
    // TLS trust stores (Debian/Ubuntu, Fedora/RHEL).
    "/etc/ssl",
    "/etc/ca-certificates",
    "/etc/pki",
    // User and group names (`id`, `ls -l`, tools that look up the current user).
    "/etc/passwd",
    "/etc/group",
    "/etc/nsswitch.conf",
    // The host's time zone, for tasks that do not set `TZ`.
    "/etc/localtime",
    // The machine's name and identity, which tools read (a determinism re-run replaces
    // both, [`identity_overlays`]; a host without them gets stand-ins).
    "/etc/hostname",
    "/etc/machine-id",
    // Name resolution, used only when the task has the network.
    "/etc/hosts",
    "/etc/resolv.conf",
];

/// How one task is sandboxed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SandboxConfig {
    /// The exec root: mounted read-only at this same absolute path.
    pub root: PathBuf,
    /// The task's working directory (inside `root`).
    pub cwd: PathBuf,
    /// Directories inside `root` mounted writable (those holding the declared outputs,
    /// `crate::execroot::OutputLayout`). Each must exist.
    pub writable: Vec<PathBuf>,
    /// Entries of the writable directories mounted read-only again on top (what is not an
    /// output there: sources, manifests). Each must exist.
    pub readonly: Vec<PathBuf>,
    /// Whether the task may use the host's network.
    pub network: bool,
    /// The hostname the task sees (the UTS namespace is always private); `None` leaves
    /// bwrap's default.
    pub hostname: Option<String>,
    /// The uid the task runs as inside the sandbox; `None` keeps the caller's.
    pub uid: Option<u32>,
    /// The gid the task runs as inside the sandbox; `None` keeps the caller's.
    pub gid: Option<u32>,
    /// Extra host paths mounted read-only at the same path when they exist (toolchains
    /// installed outside `/usr`, e.g. `/opt/node`). Empty by default: every entry widens what
    /// an undeclared read can reach.
    pub extra_ro: Vec<PathBuf>,
    /// Host files mounted read-only over paths inside (host file, path inside), e.g. the
    /// [`identity_overlays`] of a sandbox with its own uid and hostname.
    pub overlays: Vec<(PathBuf, PathBuf)>,
    /// Directories inside the system paths shown above that an empty tmpfs covers
    /// ([`masked_dirs`]): a workspace at `/usr/src/app` must not be readable at its path.
    pub masked: Vec<PathBuf>,
    /// Installed trees mounted read-only inside the root: (the tree's directory on the host,
    /// its mount point inside `root`, an existing directory).
    pub trees: Vec<(PathBuf, PathBuf)>,
    /// A prepared `/etc` ([`super::etc::etc_view`]) shown instead of binding each of the
    /// [`SYSTEM_RO_PATHS`] under it (and each of the `overlays` there, folded into it).
    pub etc: Option<super::etc::EtcView>,
    /// Instead of the exec root, a view assembled at its path (a survey run,
    /// [`super::survey`]): a writable tmpfs at `root` and these operations on it, in order.
    pub view: Option<Vec<ViewOp>>,
}

/// The directories of `path_var` (a task's `PATH`) a sandbox must show for the task to run
/// the programs the host would (`node` from `~/.nvm/…/bin` rather than `/usr/bin/node`):
/// each absolute one that is a directory, outside `/usr` and the [`SYSTEM_RO_PATHS`] (shown
/// already), and neither inside nor around any of `hidden` (the workspace, the cache, the
/// worker's own directories: a `PATH` naming the workspace's `bin/` must not show it). Each
/// once, in `PATH` order. The programs a key folds are looked up on this same `PATH`, so the
/// sandbox then runs the program the key names.
pub fn path_dirs(path_var: &str, hidden: &[&Path]) -> Vec<PathBuf> {
    path_dirs_with_home(path_var, hidden, std::env::var_os("HOME").as_deref().map(Path::new))
}

/// [`path_dirs`] with the user's home at `home`: a `PATH` naming the home itself (or `/`,
/// `/home`) never shows it, only directories inside it (`~/.nvm/…/bin`, `~/bin`).
fn path_dirs_with_home(path_var: &str, hidden: &[&Path], home: Option<&Path>) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = Vec::new();
    for d in path_var.split(':').filter(|d| d.starts_with('/')) {
        let dir = Path::new(d);
        let shown = dir.starts_with("/usr") || SYSTEM_RO_PATHS.iter().any(|s| dir.starts_with(s));
        let near = |h: &&Path| dir.starts_with(h) || h.starts_with(dir);
        let too_wide = dir.parent().is_none() || home.is_some_and(|h| h.starts_with(dir));
        if shown
            || too_wide
            || hidden.iter().any(near)
            || out.iter().any(|o| o == dir)
            || !dir.is_dir()
        {
            continue;
        }
        // A symlink into a hidden place would show it all the same.
        match std::fs::canonicalize(dir) {
            Ok(real) if !hidden.iter().any(|h| real.starts_with(h) || h.starts_with(&real)) => {
                out.push(dir.to_path_buf());
            }
            _ => {}
        }
    }
    out
}

/// One mount operation of a [`SandboxConfig::view`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ViewOp {
    /// An empty directory (on the view's tmpfs: writable, gone with the sandbox).
    Dir(PathBuf),
    /// A host path (source) mounted read-only at a path inside (destination).
    RoBind(PathBuf, PathBuf),
    /// A symlink inside (target text, path).
    Symlink(String, PathBuf),
}

impl SandboxConfig {
    /// A config for `root` with the task in `cwd`: nothing writable, no network, the
    /// caller's hostname, uid and gid.
    pub fn new(root: impl Into<PathBuf>, cwd: impl Into<PathBuf>) -> Self {
        Self {
            root: root.into(),
            cwd: cwd.into(),
            writable: Vec::new(),
            readonly: Vec::new(),
            network: false,
            hostname: None,
            uid: None,
            gid: None,
            extra_ro: Vec::new(),
            overlays: Vec::new(),
            masked: Vec::new(),
            trees: Vec::new(),
            etc: None,
            view: None,
        }
    }
}

/// The places of `hidden` (the workspace, the cache, the worker's own directories) that lie
/// inside `/usr` or one of the [`SYSTEM_RO_PATHS`], which every sandbox shows read-only: a
/// workspace at `/usr/src/app` (a container's usual `WORKDIR`) was readable inside at its
/// absolute path, undeclared files and all, and the trace counts a path outside the exec
/// root as a system file. Each is covered by an empty tmpfs instead; the exec root and the
/// trees are mounted after, on top. Nested ones are covered by the outer one.
pub fn masked_dirs(hidden: &[&Path]) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = hidden
        .iter()
        .filter(|h| h.is_absolute() && h.parent().is_some())
        .filter(|h| h.starts_with("/usr") || SYSTEM_RO_PATHS.iter().any(|s| h.starts_with(s)))
        .map(|h| h.to_path_buf())
        .collect();
    out.sort();
    out.dedup();
    let mut kept: Vec<PathBuf> = Vec::new();
    for m in out {
        if !kept.iter().any(|k| m.starts_with(k)) {
            kept.push(m);
        }
    }
    kept
}

/// Variables that name something in the host's `/dev/shm`, which a sandbox does not see:
/// unset inside (the task's processes then make their own there, gone with the sandbox).
pub const HOST_ONLY_ENV: &[&str] = &["FAKETIME_SHARED"];

/// What one of the [`SYSTEM_RO_PATHS`] is on the host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum HostEntry {
    /// Nothing there.
    Missing,
    /// A symlink with this target text.
    Symlink(String),
    /// A file or directory (or what could not be read: mounted as ever).
    Other,
}

/// What a system path is on this host: `lstat`, then the link's target.
pub(super) fn host_entry(p: &str) -> HostEntry {
    match std::fs::symlink_metadata(p) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => HostEntry::Missing,
        Ok(m) if m.file_type().is_symlink() => match std::fs::read_link(p) {
            Ok(t) => HostEntry::Symlink(t.to_string_lossy().into_owned()),
            Err(_) => HostEntry::Other,
        },
        _ => HostEntry::Other,
    }
}

/// How a sandbox shows one of the [`SYSTEM_RO_PATHS`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum SystemMount {
    /// Not at all: the host has nothing there.
    Absent,
    /// The host's own symlink, made again inside: its target lies in `/usr`, which every
    /// sandbox shows.
    Symlink(String),
    /// Bound read-only (`--ro-bind-try`; a symlink's target is bound at the link's path).
    Bind,
}

/// How `p` (a system path that is `entry` on the host) is shown. Each bind costs bwrap a
/// dozen calls (a dozen more stops of the traced sandboxes, [`super::trace`]) and a read of
/// its mount table; a merged-`/usr` host's `/bin -> usr/bin`, `/lib64 -> usr/lib64` and
/// `/etc/localtime -> /usr/share/zoneinfo/…` are shown as the same links into the `/usr`
/// bound above, which a task reads exactly as on the host (`readlink /bin` included). Bound
/// as before: a link that leaves `/usr` (or could, by `..`), and one with something mounted
/// at or below it (a covered workspace, a stand-in file), which bwrap places through the
/// link while it sets up, before the new root is its `/`.
pub(super) fn system_mount(p: &str, entry: HostEntry, cfg: &SandboxConfig) -> SystemMount {
    let target = match entry {
        HostEntry::Missing => return SystemMount::Absent,
        HostEntry::Other => return SystemMount::Bind,
        HostEntry::Symlink(t) => t,
    };
    let path = Path::new(p);
    let Some(parent) = path.parent() else { return SystemMount::Bind };
    let resolved = parent.join(&target);
    let plain = resolved
        .components()
        .all(|c| matches!(c, std::path::Component::RootDir | std::path::Component::Normal(_)));
    let mounted_below = cfg.masked.iter().any(|m| m.starts_with(path))
        || cfg.overlays.iter().any(|(_, inside)| inside.starts_with(path))
        || cfg.extra_ro.iter().any(|e| e.starts_with(path));
    if plain && resolved.starts_with("/usr") && resolved != Path::new("/usr") && !mounted_below {
        SystemMount::Symlink(target)
    } else {
        SystemMount::Bind
    }
}

/// The bwrap argv that runs `inner` (a complete argv, e.g. `sh -c …`) sandboxed per `cfg`.
pub fn bwrap_argv(cfg: &SandboxConfig, inner: &[String]) -> Vec<String> {
    let mut a = Argv(vec!["bwrap".to_owned()]);
    // New user, mount, pid, ipc, uts, cgroup and network namespaces: the task cannot see or
    // signal host processes, has its own hostname, and no network interface but `lo`.
    a.args(&["--unshare-all"]);
    if cfg.network {
        // The task declared it needs the network: keep the host's network namespace.
        a.args(&["--share-net"]);
    }
    // If the worker (or strace above it) dies, the sandbox is killed too; nothing outlives
    // the run. (The executor's process-group kill cannot reach inside the new session.)
    a.args(&["--die-with-parent"]);
    // A new session with no controlling terminal: the task cannot push keystrokes into the
    // terminal prova runs in (TIOCSTI).
    a.args(&["--new-session"]);
    // Programs and libraries, read-only; the rest of the system paths only where they exist.
    a.args(&["--ro-bind", "/usr", "/usr"]);
    // A prepared /etc: one bind for its files, then the host's directories there on top.
    let in_view = |p: &Path| cfg.etc.is_some() && p.starts_with("/etc");
    if let Some(v) = &cfg.etc {
        a.0.extend([
            "--ro-bind".to_owned(),
            v.dir.to_string_lossy().into_owned(),
            "/etc".to_owned(),
        ]);
        for d in &v.binds {
            a.mount("--ro-bind-try", d);
        }
    }
    for p in SYSTEM_RO_PATHS {
        if in_view(Path::new(p)) {
            continue;
        }
        match system_mount(p, host_entry(p), cfg) {
            SystemMount::Absent => {}
            SystemMount::Symlink(target) => a.args(&["--symlink", &target, p]),
            SystemMount::Bind => a.args(&["--ro-bind-try", p, p]),
        }
    }
    // Files standing in for system ones (after them, so they win).
    for (host, inside) in cfg.overlays.iter().filter(|(_, inside)| !in_view(inside)) {
        a.0.extend([
            "--ro-bind".to_owned(),
            host.to_string_lossy().into_owned(),
            inside.to_string_lossy().into_owned(),
        ]);
    }
    // The workspace, the cache and the worker's directories where a system path above shows
    // them: covered (the root and the trees are mounted later, on top).
    for m in &cfg.masked {
        a.args(&["--tmpfs", &m.to_string_lossy()]);
    }
    // A /proc for the new pid namespace (the host's processes stay invisible), a minimal
    // /dev (null, zero, random, tty…), and a private, empty /tmp that vanishes with the
    // sandbox: nothing a task writes there reaches the host or the next task.
    a.args(&["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"]);
    // Toolchains outside the system paths, after /tmp so one under the host's /tmp lands on
    // top of the private one.
    for p in &cfg.extra_ro {
        a.mount("--ro-bind-try", p);
    }
    // That /dev holds a /dev/shm of the sandbox's own: a name the host's processes share
    // there (libfaketime's segment, `crate::clockshm`) does not exist inside.
    for name in HOST_ONLY_ENV {
        a.args(&["--unsetenv", name]);
    }
    // The exec root at its real absolute path, read-only: a task that embeds its working
    // directory shows the real (and, on a determinism re-run, perturbed) path. Mounted after
    // /tmp so a root that lives under the host's /tmp lands on top of the private one.
    match &cfg.view {
        None => a.mount("--ro-bind", &cfg.root),
        Some(ops) => {
            a.args(&["--tmpfs", &cfg.root.to_string_lossy()]);
            for op in ops {
                let s = |p: &Path| p.to_string_lossy().into_owned();
                a.0.extend(match op {
                    ViewOp::Dir(d) => vec!["--dir".to_owned(), s(d)],
                    ViewOp::RoBind(src, dst) => vec!["--ro-bind".to_owned(), s(src), s(dst)],
                    ViewOp::Symlink(t, p) => vec!["--symlink".to_owned(), t.clone(), s(p)],
                });
            }
        }
    }
    // The directories holding the declared outputs, writable; after the root so they
    // override it. An output inside one is an ordinary entry (not a mount point): it can be
    // removed, replaced and made again.
    for w in &cfg.writable {
        a.mount("--bind", w);
    }
    // What else those directories hold, read-only again (sources beside `dist`).
    for r in &cfg.readonly {
        a.mount("--ro-bind", r);
    }
    // The installed trees, read-only, each over its (empty) mount point in the root: one
    // materialised copy serves every task, and a task cannot write into it. Last, so no
    // writable directory (a project holding `tsconfig.tsbuildinfo`) hides its tree.
    for (src, dst) in &cfg.trees {
        a.0.extend([
            "--ro-bind".to_owned(),
            src.to_string_lossy().into_owned(),
            dst.to_string_lossy().into_owned(),
        ]);
    }
    // The sandbox's own root is a tmpfs bwrap made to hold the mount points; make it
    // read-only once they exist, so a write outside /tmp and the outputs fails loudly
    // (EROFS) instead of vanishing.
    a.args(&["--remount-ro", "/"]);
    a.args(&["--chdir", &cfg.cwd.to_string_lossy()]);
    if let Some(h) = &cfg.hostname {
        // The UTS namespace is private (--unshare-all), so this does not touch the host.
        a.args(&["--hostname", h]);
    }
    // Run as this uid/gid inside the user namespace (a determinism re-run perturbs the user).
    if let Some(uid) = cfg.uid {
        a.args(&["--uid", &uid.to_string()]);
    }
    if let Some(gid) = cfg.gid {
        a.args(&["--gid", &gid.to_string()]);
    }
    // Everything after `--` is the task's own argv, never parsed as bwrap options.
    a.args(&["--"]);
    a.0.extend(inner.iter().cloned());
    a.0
}

/// The machine identity files a sandbox shows: for one with its own uid or hostname (a
/// determinism re-run), `/etc/passwd` and `/etc/group` that also name the uid/gid (as
/// `user`), `/etc/hosts` and `/etc/hostname` that resolve the hostname, and an
/// `/etc/machine-id` of that machine; for any other, stand-ins for an `/etc/hostname` or
/// `/etc/machine-id` the host lacks (its kernel hostname; an id derived from it). Written
/// under `dir` (named by content, so sandboxes share them) → overlays for
/// [`SandboxConfig::overlays`]. A correct task that asks `whoami`, resolves its hostname or
/// reads the machine id must not fail only because it runs sandboxed or perturbed — and a
/// task whose bytes embed the machine's identity is caught by the re-run.
pub fn identity_overlays(
    dir: &Path,
    cfg: &SandboxConfig,
    user: &str,
) -> std::io::Result<Vec<(PathBuf, PathBuf)>> {
    let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
    let machine_id = |name: &str| {
        let hex =
            prova_protocol::Digest::of(format!("prova machine-id {name}").as_bytes()).to_hex();
        format!("{}\n", &hex[..32])
    };
    let mut files: Vec<(&str, String)> = Vec::new();
    if let Some(uid) = cfg.uid {
        let gid = cfg.gid.unwrap_or(uid);
        let mut passwd = read("/etc/passwd");
        let has = |text: &str, id: u32| {
            text.lines().any(|l| l.split(':').nth(2).is_some_and(|f| f == id.to_string()))
        };
        if !has(&passwd, uid) {
            ensure_newline(&mut passwd);
            passwd.push_str(&format!("{user}:x:{uid}:{gid}:prova re-run:/tmp:/bin/sh\n"));
        }
        let mut group = read("/etc/group");
        if !has(&group, gid) {
            ensure_newline(&mut group);
            group.push_str(&format!("{user}:x:{gid}:\n"));
        }
        files.push(("/etc/passwd", passwd));
        files.push(("/etc/group", group));
    }
    if let Some(h) = &cfg.hostname {
        let mut hosts = format!("127.0.0.1\tlocalhost\n::1\tlocalhost\n127.0.1.1\t{h}\n");
        hosts.push_str(&read("/etc/hosts"));
        files.push(("/etc/hosts", hosts));
        files.push(("/etc/hostname", format!("{h}\n")));
        files.push(("/etc/machine-id", machine_id(h)));
    } else {
        let host = read("/proc/sys/kernel/hostname").trim().to_owned();
        if !Path::new("/etc/hostname").is_file() {
            files.push(("/etc/hostname", format!("{host}\n")));
        }
        if !Path::new("/etc/machine-id").is_file() {
            files.push(("/etc/machine-id", machine_id(&host)));
        }
    }
    let mut out = Vec::new();
    for (inside, text) in files {
        let digest = prova_protocol::Digest::of(text.as_bytes()).to_hex();
        let name = inside.trim_start_matches("/etc/");
        let path = dir.join(format!("{name}-{}", &digest[..16]));
        if !path.is_file() {
            std::fs::create_dir_all(dir)?;
            let tmp = dir.join(format!(".{name}-{}-{}", &digest[..16], std::process::id()));
            std::fs::write(&tmp, text)?;
            std::fs::rename(&tmp, &path)?;
        }
        out.push((path, PathBuf::from(inside)));
    }
    Ok(out)
}

fn ensure_newline(s: &mut String) {
    if !s.is_empty() && !s.ends_with('\n') {
        s.push('\n');
    }
}

struct Argv(Vec<String>);

impl Argv {
    fn args(&mut self, args: &[&str]) {
        self.0.extend(args.iter().map(|s| (*s).to_owned()));
    }

    /// `flag p p`: a host path mounted at the same path inside.
    fn mount(&mut self, flag: &str, p: &Path) {
        let p = p.to_string_lossy().into_owned();
        self.0.extend([flag.to_owned(), p.clone(), p]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_system_path_linking_into_usr_is_a_link_inside_and_anything_else_is_bound() {
        let cfg = SandboxConfig::new("/w/root", "/w/root/p");
        let link = |t: &str| HostEntry::Symlink(t.to_owned());
        let m = |p: &str, e: HostEntry| system_mount(p, e, &cfg);
        assert_eq!(m("/bin", link("usr/bin")), SystemMount::Symlink("usr/bin".to_owned()));
        assert_eq!(m("/lib64", link("/usr/lib64")), SystemMount::Symlink("/usr/lib64".into()));
        let tz = "/usr/share/zoneinfo/Etc/UTC";
        assert_eq!(m("/etc/localtime", link(tz)), SystemMount::Symlink(tz.to_owned()));
        // Relative to the link's directory: `/etc/x -> usr/y` is `/etc/usr/y`.
        assert_eq!(m("/etc/alternatives", link("usr/share/x")), SystemMount::Bind);
        // Leaving /usr, perhaps by `..`, or naming /usr itself.
        assert_eq!(m("/etc/resolv.conf", link("/run/resolv.conf")), SystemMount::Bind);
        assert_eq!(m("/lib", link("usr/../etc")), SystemMount::Bind);
        assert_eq!(m("/etc/ssl", link("../usr/../root")), SystemMount::Bind);
        assert_eq!(m("/bin", link("usr")), SystemMount::Bind);
        assert_eq!(m("/bin", link("usrx/bin")), SystemMount::Bind);
        assert_eq!(m("/lib32", HostEntry::Missing), SystemMount::Absent);
        assert_eq!(m("/etc/passwd", HostEntry::Other), SystemMount::Bind);
        // Something mounted at or below it is placed through a bind, not a link.
        let mut covered = cfg.clone();
        covered.masked = vec![PathBuf::from("/lib/x")];
        covered.overlays = vec![(PathBuf::from("/w/lt"), PathBuf::from("/etc/localtime"))];
        assert_eq!(system_mount("/lib", link("usr/lib"), &covered), SystemMount::Bind);
        assert_eq!(system_mount("/etc/localtime", link(tz), &covered), SystemMount::Bind);
        assert_eq!(
            system_mount("/bin", link("usr/bin"), &covered),
            SystemMount::Symlink("usr/bin".to_owned())
        );
    }

    #[test]
    fn the_argv_shows_each_system_path_as_the_host_has_it() {
        let a = bwrap_argv(&SandboxConfig::new("/w/root", "/w/root/p"), &["true".to_owned()]);
        for p in SYSTEM_RO_PATHS {
            let at = |flag: &str, src: &str| a.windows(3).any(|w| w == [flag, src, p]);
            match host_entry(p) {
                HostEntry::Missing => assert!(!a.iter().any(|x| x == p), "{p}: {a:?}"),
                HostEntry::Symlink(t) if at("--symlink", &t) => {}
                _ => assert!(at("--ro-bind-try", p), "{p}: {a:?}"),
            }
        }
    }

    #[test]
    fn a_hidden_place_inside_a_system_path_is_covered_before_the_root_is_mounted() {
        let hidden = [
            Path::new("/usr/src/app"),
            Path::new("/usr/src/app/.prova/cache"),
            Path::new("/home/u/ws"),
            Path::new("/lib/x"),
            Path::new("relative"),
            Path::new("/"),
        ];
        let masked = masked_dirs(&hidden);
        assert_eq!(masked, [PathBuf::from("/lib/x"), PathBuf::from("/usr/src/app")]);
        let mut cfg = SandboxConfig::new(
            "/usr/src/app/.prova/worker/roots/r",
            "/usr/src/app/.prova/worker/roots/r/p",
        );
        cfg.masked = masked;
        let a = bwrap_argv(&cfg, &["true".to_owned()]);
        let covered = pos(&a, &["--tmpfs", "/usr/src/app"]);
        assert!(pos(&a, &["--ro-bind", "/usr", "/usr"]) < covered);
        let root = "/usr/src/app/.prova/worker/roots/r";
        assert!(covered < pos(&a, &["--ro-bind", root, root]), "the root is mounted on top");
    }

    fn pos(argv: &[String], seq: &[&str]) -> usize {
        argv.windows(seq.len())
            .position(|w| w.iter().zip(seq).all(|(a, b)| a == b))
            .unwrap_or_else(|| panic!("{seq:?} not in {argv:?}"))
    }

    #[test]
    fn argv_layout_and_order() {
        let mut cfg = SandboxConfig::new("/x/root", "/x/root/p");
        cfg.writable = vec!["/x/root/p".into(), "/x/root/gen".into()];
        cfg.readonly = vec!["/x/root/p/src".into()];
        cfg.trees = vec![("/w/trees/d/node_modules".into(), "/x/root/p/node_modules".into())];
        cfg.hostname = Some("sbx".into());
        cfg.uid = Some(1234);
        cfg.gid = Some(4321);
        let inner = vec!["sh".to_owned(), "-c".to_owned(), "--share-net".to_owned()];
        let a = bwrap_argv(&cfg, &inner);
        assert_eq!(
            a[..5],
            ["bwrap", "--unshare-all", "--die-with-parent", "--new-session", "--ro-bind"]
        );
        let sep = pos(&a, &["--"]);
        assert_eq!(a[sep + 1..], inner[..], "the inner argv follows `--` untouched");
        assert!(!a[..sep].contains(&"--share-net".to_owned()), "no network unless asked");
        let root = pos(&a, &["--ro-bind", "/x/root", "/x/root"]);
        let tmp = pos(&a, &["--tmpfs", "/tmp"]);
        let w1 = pos(&a, &["--bind", "/x/root/p", "/x/root/p"]);
        let w2 = pos(&a, &["--bind", "/x/root/gen", "/x/root/gen"]);
        let again = pos(&a, &["--ro-bind", "/x/root/p/src", "/x/root/p/src"]);
        let tree = pos(&a, &["--ro-bind", "/w/trees/d/node_modules", "/x/root/p/node_modules"]);
        let ro = pos(&a, &["--remount-ro", "/"]);
        // A writable project directory (holding `tsconfig.tsbuildinfo`) must not hide the
        // sources bound read-only in it, nor its installed tree.
        assert!(tmp < root && root < w1 && w1 < w2 && w2 < again && again < tree);
        assert!(tree < ro && ro < sep);
        pos(&a, &["--chdir", "/x/root/p"]);
        pos(&a, &["--hostname", "sbx"]);
        pos(&a, &["--uid", "1234"]);
        pos(&a, &["--gid", "4321"]);
        pos(&a, &["--proc", "/proc", "--dev", "/dev"]);
        pos(&a, &["--ro-bind", "/usr", "/usr"]);
        pos(&a, &["--ro-bind-try", "/etc/passwd", "/etc/passwd"]);
        // Never the host's home, work or temporary directories, nor all of /etc.
        for p in ["/", "/etc", "/home", "/root", "/tmp", "/work", "/var"] {
            let mounted = a.windows(2).any(|w| w[0].contains("bind") && w[1] == p);
            assert!(!mounted, "{p} must not be mounted from the host: {a:?}");
        }
    }

    #[test]
    fn path_dirs_are_the_toolchains_outside_the_system_and_never_a_hidden_place() {
        let t = tempfile::tempdir().expect("dir");
        let d = |p: &str| {
            let p = t.path().join(p);
            std::fs::create_dir_all(&p).expect("mkdir");
            p
        };
        let (tools, ws, cache) = (d("nvm/v22/bin"), d("ws"), d("cache"));
        let (ws_bin, other) = (d("ws/node_modules/.bin"), d("opt/bin"));
        std::os::unix::fs::symlink(&ws_bin, t.path().join("sneaky")).expect("symlink");
        let path = [
            tools.display().to_string(),
            "/usr/local/bin".into(),
            "/usr/bin".into(),
            "/bin".into(),
            ws_bin.display().to_string(),
            ws.display().to_string(),
            t.path().display().to_string(),
            t.path().join("sneaky").display().to_string(),
            cache.display().to_string(),
            t.path().join("missing").display().to_string(),
            "node_modules/.bin".into(),
            tools.display().to_string(),
            other.display().to_string(),
        ]
        .join(":");
        let got = path_dirs_with_home(&path, &[&ws, &cache], None);
        assert_eq!(got, [tools.clone(), other.clone()]);
        // Never `/`, nor the home or what holds it; a directory inside the home, yes.
        let home = d("home/u");
        let in_home = d("home/u/.nvm/bin");
        let wide = [
            "/".to_owned(),
            home.display().to_string(),
            t.path().join("home").display().to_string(),
            in_home.display().to_string(),
        ]
        .join(":");
        assert_eq!(path_dirs_with_home(&wide, &[&ws], Some(&home)), [in_home]);
    }

    #[test]
    fn network_hostname_ids_and_extras_are_optional() {
        let mut cfg = SandboxConfig::new("/r", "/r");
        let a = bwrap_argv(&cfg, &["true".to_owned()]);
        for flag in ["--share-net", "--hostname", "--uid", "--gid", "--bind"] {
            assert!(!a.contains(&flag.to_owned()), "{flag} in {a:?}");
        }
        cfg.network = true;
        cfg.extra_ro = vec!["/opt/node".into()];
        let a = bwrap_argv(&cfg, &["true".to_owned()]);
        assert!(pos(&a, &["--share-net"]) < pos(&a, &["--"]));
        pos(&a, &["--ro-bind-try", "/opt/node", "/opt/node"]);
    }
}
