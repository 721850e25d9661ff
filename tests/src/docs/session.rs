//! Running a page's command blocks: a fresh workspace per block (or the previous block's, for
//! `continue`), the real binary first on `PATH`, a deadline per block, and daemons started in
//! the background and stopped with the workspace.

use std::collections::BTreeMap;
use std::io::{BufRead as _, BufReader};
use std::os::unix::process::{CommandExt as _, ExitStatusExt as _};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::time::Duration;

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tempfile::TempDir;

use super::markdown::{Block, Place};
use crate::{TempWorkspace, prova_bin, repo_root, tsmono};

/// Deadline of one block: a few `prova` runs of a small workspace, or a farm run, on a loaded
/// CI machine.
pub const BLOCK_TIMEOUT: Duration = Duration::from_secs(240);

/// How long a daemon may take to print its first line.
const DAEMON_READY: Duration = Duration::from_secs(60);

/// How a documented command is rewritten for the test: `cargo run … -p prova-cli --` is the
/// binary under test (the harness built it; building a release binary per test is not).
const REWRITES: &[(&str, &str)] =
    &[("cargo run --release -p prova-cli --", "prova"), ("cargo run -p prova-cli --", "prova")];

/// The workspace one or more blocks (a `continue` chain) run in.
pub struct Session {
    ws: TempWorkspace,
    /// `bin/prova` (a link to the binary under test), `home/`, the blocks' scripts and logs.
    aux: TempDir,
    cwd: PathBuf,
    /// Text replacements for later blocks: a documented address → the one a daemon got.
    subst: BTreeMap<String, String>,
    daemons: Vec<Child>,
    blocks_run: usize,
}

/// How a block ended.
pub struct Ran {
    pub status: ExitStatus,
    pub script: String,
    pub stdout: String,
    pub stderr: String,
}

impl Ran {
    /// The exit code; a signal reads as 128 + its number, as a shell says.
    pub fn code(&self) -> i32 {
        self.status.code().unwrap_or_else(|| 128 + self.status.signal().unwrap_or(0))
    }
}

impl std::fmt::Display for Ran {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "exit {}\n--- script\n{}--- stdout\n{}--- stderr\n{}",
            self.code(),
            self.script,
            self.stdout,
            self.stderr
        )
    }
}

fn git(dir: &Path, args: &[&str]) {
    let out = Command::new("git")
        .args(["-c", "user.name=docs", "-c", "user.email=docs@example.com"])
        .args(["-c", "init.defaultBranch=main", "-c", "commit.gpgsign=false"])
        .args(args)
        .current_dir(dir)
        .output()
        .expect("running git");
    assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

/// Makes `dir` a git repository on `main` whose one commit holds everything, with an
/// `origin/main` at that commit (as a CI checkout has).
fn commit_all(dir: &Path) {
    git(dir, &["init", "-q"]);
    git(dir, &["add", "-A"]);
    git(dir, &["commit", "-q", "-m", "the workspace"]);
    git(dir, &["update-ref", "refs/remotes/origin/main", "HEAD"]);
}

/// Build products and prova's state, never copied from the repository's examples.
const PRODUCTS: &[&str] = &["dist", "gen", ".prova", "node_modules"];

fn npm_workspace() -> TempWorkspace {
    TempWorkspace::new()
        .file("package.json", r#"{"private": true, "workspaces": ["packages/*"]}"#)
        .file("package-lock.json", "{\"lockfileVersion\": 3, \"packages\": {}}\n")
        .file(".gitignore", "node_modules/\ndist/\n.prova/\n")
        .file(
            "packages/core/package.json",
            r#"{"name": "core", "scripts": {"build": "mkdir -p dist && cp src/core.txt dist/",
                "test": "test -s dist/core.txt"}}"#,
        )
        .file("packages/core/src/core.txt", "core\n")
        .file(
            "packages/app/package.json",
            r#"{"name": "app", "dependencies": {"core": "*"},
                "scripts": {"build": "mkdir -p dist && cat ../core/dist/core.txt src/app.txt > dist/app.txt"}}"#,
        )
        .file("packages/app/src/app.txt", "app\n")
}

impl Session {
    /// A fresh workspace for `place`; `None` (after saying why) when a tool it needs is
    /// missing.
    pub fn new(place: Place) -> Option<Self> {
        let ws = match place {
            Place::Demo => TempWorkspace::copy_of(&repo_root().join("examples/demo"), PRODUCTS),
            Place::Repo => {
                let ws = TempWorkspace::new();
                ws.copy_dir(&repo_root().join("examples/demo"), "examples/demo", PRODUCTS);
                ws
            }
            Place::Npm => npm_workspace(),
            Place::Tsmono => {
                if !tsmono::node_present() {
                    return None;
                }
                tsmono::tsmono()
            }
        };
        commit_all(ws.root());
        let aux = tempfile::Builder::new().prefix("prova-docs-").tempdir().expect("a temp dir");
        std::fs::create_dir_all(aux.path().join("bin")).expect("creating bin/");
        std::fs::create_dir_all(aux.path().join("home")).expect("creating home/");
        std::os::unix::fs::symlink(prova_bin(), aux.path().join("bin/prova"))
            .expect("linking bin/prova");
        let cwd = ws.root().to_owned();
        Some(Self { ws, aux, cwd, subst: BTreeMap::new(), daemons: Vec::new(), blocks_run: 0 })
    }

    /// The workspace's root.
    pub fn root(&self) -> &Path {
        self.ws.root()
    }

    /// A command for a documented command line: `PATH` with the binary under test first, a
    /// `HOME` of its own, none of prova's variables from the test's environment.
    fn command(&self, program: &str) -> Command {
        let mut cmd = Command::new(program);
        let path = std::env::var("PATH").unwrap_or_default();
        cmd.current_dir(&self.cwd)
            .env("PATH", format!("{}:{path}", self.aux.path().join("bin").display()))
            .env("HOME", self.aux.path().join("home"))
            .env_remove("CI")
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .process_group(0);
        for (name, _) in std::env::vars() {
            if name.starts_with("PROVA_") {
                cmd.env_remove(name);
            }
        }
        for var in ["GIT_AUTHOR_NAME", "GIT_COMMITTER_NAME"] {
            cmd.env(var, "docs");
        }
        for var in ["GIT_AUTHOR_EMAIL", "GIT_COMMITTER_EMAIL"] {
            cmd.env(var, "docs@example.com");
        }
        cmd
    }

    /// A documented line with the harness's rewrites applied.
    fn rewrite(&self, text: &str) -> String {
        let mut text = text.to_owned();
        for (from, to) in REWRITES {
            text = text.replace(from, to);
        }
        for (from, to) in &self.subst {
            text = text.replace(from.as_str(), to);
        }
        text
    }

    /// Runs a block's commands under `bash -e -o pipefail` and waits (at most
    /// [`BLOCK_TIMEOUT`]); whatever it left running in its process group is killed.
    pub fn run(&mut self, block: &Block) -> Ran {
        self.blocks_run += 1;
        let n = self.blocks_run;
        let mut script = String::new();
        for line in block.commands() {
            script.push_str(&self.rewrite(&line));
            script.push('\n');
        }
        let file = |ext: &str| self.aux.path().join(format!("block-{n}.{ext}"));
        std::fs::write(file("sh"), &script).expect("writing the script");
        let out = std::fs::File::create(file("out")).expect("creating the stdout file");
        let err = std::fs::File::create(file("err")).expect("creating the stderr file");
        let mut cmd = self.command("bash");
        cmd.args(["-e", "-o", "pipefail"]).arg(file("sh")).stdout(out).stderr(err);
        let child = cmd.spawn().expect("starting bash");
        let status = wait_with_deadline(child, BLOCK_TIMEOUT).unwrap_or_else(|| {
            panic!("{}: the block ran past {BLOCK_TIMEOUT:?}\n{script}", block.at)
        });
        let read = |ext: &str| std::fs::read_to_string(file(ext)).unwrap_or_default();
        Ran { status, script, stdout: read("out"), stderr: read("err") }
    }

    /// Starts each command of a `daemons` block in the background and waits for its first
    /// line on stdout. A `--listen HOST:PORT` or `--http HOST:PORT` is given port 0; the
    /// address the daemon prints for it (`listening on ADDR`, `http http://ADDR/`) replaces
    /// `HOST:PORT` in every later command of the chain.
    pub fn start_daemons(&mut self, block: &Block) {
        for line in block.commands() {
            let line = self.rewrite(&line);
            let words: Vec<&str> = line.split_whitespace().collect();
            let bound: Vec<(&str, String)> = words
                .windows(2)
                .filter_map(|w| {
                    let (_, printed) = LISTENERS.iter().find(|(flag, _)| *flag == w[0])?;
                    Some((*printed, w[1].to_owned()))
                })
                .collect();
            let mut shown = line.clone();
            for (_, addr) in &bound {
                let (host, _) = addr.rsplit_once(':').expect("HOST:PORT");
                shown = shown.replace(addr.as_str(), &format!("{host}:0"));
            }
            let i = self.daemons.len();
            let log = self.aux.path().join(format!("daemon-{i}.err"));
            let err = std::fs::File::create(&log).expect("creating a daemon's log");
            let mut cmd = self.command("bash");
            cmd.arg("-c").arg(format!("exec {shown}")).stdout(Stdio::piped()).stderr(err);
            let mut child = cmd.spawn().expect("starting a daemon");
            let stdout = child.stdout.take().expect("piped stdout");
            self.daemons.push(child);
            let first = first_line(stdout).recv_timeout(DAEMON_READY).unwrap_or_else(|_| {
                let log = std::fs::read_to_string(&log).unwrap_or_default();
                panic!("{}: `{shown}` printed no line\n{log}", block.at)
            });
            for (printed, addr) in bound {
                let got = first
                    .split(printed)
                    .nth(1)
                    .and_then(|rest| rest.split([' ', '/', ')']).next())
                    .unwrap_or_else(|| panic!("{}: no `{printed}ADDR` in `{first}`", block.at));
                self.subst.insert(addr, got.to_owned());
            }
        }
    }
}

/// The flags that bind a port, and what precedes the bound address in the daemon's first line.
const LISTENERS: &[(&str, &str)] = &[("--listen", "listening on "), ("--http", "http http://")];

/// The first line `out` gives; the rest is read and dropped, so the daemon never blocks on a
/// full pipe.
fn first_line(out: impl std::io::Read + Send + 'static) -> Receiver<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut lines = BufReader::new(out).lines();
        if let Some(Ok(line)) = lines.next() {
            let _ = tx.send(line);
        }
        for _ in lines {}
    });
    rx
}

/// Waits for `child` at most `limit`; past it, SIGKILLs its process group and returns `None`.
/// Either way the group is killed once the child is gone (a block leaves nothing running).
fn wait_with_deadline(mut child: Child, limit: Duration) -> Option<ExitStatus> {
    let pid = Pid::from_raw(i32::try_from(child.id()).expect("pid fits in i32"));
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait());
    });
    let status = rx.recv_timeout(limit).ok();
    let _ = killpg(pid, Signal::SIGKILL);
    match status {
        Some(status) => Some(status.expect("waiting for bash")),
        None => {
            let _ = rx.recv_timeout(Duration::from_secs(10));
            None
        }
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        for child in &mut self.daemons {
            let pid = Pid::from_raw(i32::try_from(child.id()).expect("pid fits in i32"));
            let _ = killpg(pid, Signal::SIGKILL);
            let _ = child.wait();
        }
    }
}

/// The `prova` invocations of a command line, as argument lists: its segments between `|`,
/// `&&`, `||` and `;` that start with `prova` (after `NAME=value` words), cut at a
/// redirection or a comment. Quotes are honoured; a line using `$(…)` or backquotes gives
/// nothing.
pub fn prova_invocations(line: &str) -> Vec<Vec<String>> {
    if line.contains("$(") || line.contains('`') {
        return Vec::new();
    }
    let mut out = Vec::new();
    for segment in shell_words(line).split(|w| matches!(w.as_str(), "|" | "&&" | "||" | ";")) {
        let mut words = segment.iter().skip_while(|w| w.contains('=') && !w.starts_with('-'));
        if words.next().map(String::as_str) != Some("prova") {
            continue;
        }
        let args: Vec<String> = words
            .take_while(|w| !w.starts_with('>') && !w.starts_with("2>") && *w != "<" && *w != "&")
            .cloned()
            .collect();
        out.push(args);
    }
    out
}

/// Words of a shell line: quotes removed, `|`, `&&`, `||`, `;` and `&` as words of their own,
/// a `#` word starting a comment.
fn shell_words(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut quote: Option<char> = None;
    let mut in_word = false;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), c) => word.push(c),
            (None, '\'' | '"') => {
                quote = Some(c);
                in_word = true;
            }
            (None, '#') if !in_word => break,
            (None, c) if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            (None, '|' | '&' | ';') => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
                let mut op = c.to_string();
                if chars.peek() == Some(&c) && c != ';' {
                    op.push(c);
                    chars.next();
                }
                words.push(op);
            }
            (None, c) => {
                word.push(c);
                in_word = true;
            }
        }
    }
    if in_word {
        words.push(word);
    }
    words
}

#[cfg(test)]
mod tests {
    use super::prova_invocations;

    #[test]
    fn invocations_of_a_line() {
        let v = |s: &[&str]| s.iter().map(|w| (*w).to_owned()).collect::<Vec<_>>();
        assert_eq!(
            prova_invocations("prova graph build --all --dot | dot -Tsvg > g.svg  # see"),
            [v(&["graph", "build", "--all", "--dot"])]
        );
        assert_eq!(
            prova_invocations("PROVA_LOG=debug prova run test --filter 'web...' > out.txt"),
            [v(&["run", "test", "--filter", "web..."])]
        );
        assert_eq!(prova_invocations("cd x && npm ci && prova ls; echo '#'"), [v(&["ls"])]);
        assert!(prova_invocations("prova run --remote $(cat addr)").is_empty());
        assert_eq!(
            prova_invocations("prova worker --join a:1 &"),
            [v(&["worker", "--join", "a:1"])]
        );
    }
}
