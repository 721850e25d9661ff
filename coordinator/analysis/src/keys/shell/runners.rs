//! The JavaScript package runners: `npx tool`, `npm exec tool`, `pnpm exec tool` and
//! `yarn exec tool` start `tool` from `node_modules/.bin` (of the directory and its parents)
//! or, failing that, from `PATH`; `npx -c '…'` runs a command string with those directories
//! first. A tool named with a version (`npx tsc@5`), `pnpm dlx`/`yarn dlx` (fetched on each
//! run), and a `package.json` script run by name (`npm run build`, `pnpm test`, `yarn
//! lint`) are not read: each is named as not keyed.

use std::path::PathBuf;

use super::lex::Word;
use super::{Analysis, PathDir, Shell, invoke, read, skip_options};

/// pnpm's and yarn's own commands, which run no script or bin of the project.
const MANAGER_COMMANDS: &[&str] = &[
    "add",
    "audit",
    "bin",
    "cache",
    "ci",
    "config",
    "dedupe",
    "fetch",
    "i",
    "import",
    "info",
    "init",
    "install",
    "link",
    "list",
    "ls",
    "outdated",
    "pack",
    "prune",
    "publish",
    "rebuild",
    "remove",
    "rm",
    "root",
    "store",
    "unlink",
    "up",
    "update",
    "upgrade",
    "version",
    "why",
    "workspaces",
];

/// What `name ARGS` starts besides the runner itself.
pub(super) fn package_runner(
    name: &str,
    args: &[Word],
    shell: &Shell,
    out: &mut Analysis,
    depth: usize,
) {
    if name == "npx" {
        exec_tool(name, args, shell, out, depth);
        return;
    }
    // Options before the command (`pnpm --filter web exec tsc`, `npm -w web run build`).
    let rest = manager_options(args);
    let Some((sub, rest)) = rest.split_first() else { return };
    if sub.dynamic {
        out.note(format!("`{name} {}`: a command chosen when it runs", sub.raw));
        return;
    }
    match (name, sub.text.as_str()) {
        (_, "exec" | "x") => exec_tool(&format!("{name} exec"), rest, shell, out, depth),
        ("pnpm" | "yarn", "dlx") => {
            let tool = skip_options(rest, &["p"]).first().map_or("", |w| w.text.as_str());
            out.note(format!("`{name} dlx {tool}`: a package fetched when the command runs"));
        }
        (_, "run" | "run-script") => {
            if let Some(s) = skip_options(rest, &[]).first() {
                out.note(format!(
                    "`{name} run {}`: the programs of package.json script `{}` are not read",
                    s.raw, s.text
                ));
            }
        }
        ("npm", s @ ("test" | "t" | "start" | "stop" | "restart"))
        | (_, s @ ("test" | "start")) => {
            out.note(format!(
                "`{name} {s}`: the programs of package.json script `{}` are not read",
                if s == "t" { "test" } else { s }
            ));
        }
        ("npm", _) => {}
        (_, s) if MANAGER_COMMANDS.contains(&s) => {}
        (_, s) => out.note(format!(
            "`{name} {s}`: the package.json script or installed bin `{s}` it runs is not read"
        )),
    }
}

/// `args` after the options a package manager takes before its command: `--filter x`,
/// `-w x`, `-C dir` and the like take a value; `--x=y` and other flags do not.
fn manager_options(args: &[Word]) -> &[Word] {
    const WITH_VALUE: &[&str] =
        &["--filter", "-F", "--workspace", "-w", "--prefix", "--dir", "-C", "--cwd"];
    let mut rest = args;
    while let Some((a, tail)) = rest.split_first() {
        match a.text.as_str() {
            "--" => return tail,
            t if WITH_VALUE.contains(&t) => rest = tail.get(1..).unwrap_or(&[]),
            t if t.starts_with('-') && t.len() > 1 => rest = tail,
            _ => break,
        }
    }
    rest
}

/// `npx [options] tool …`, `npm exec -- tool …`: the tool, looked up in `node_modules/.bin`
/// first; `-c '…'` (`--call`) is read with those directories first on `PATH`.
fn exec_tool(runner: &str, args: &[Word], shell: &Shell, out: &mut Analysis, depth: usize) {
    let mut rest = args;
    let mut call: Option<&Word> = None;
    while let Some((a, tail)) = rest.split_first() {
        match a.text.as_str() {
            "--" => {
                rest = tail;
                break;
            }
            "-c" | "--call" => {
                call = tail.first();
                rest = tail.get(1..).unwrap_or(&[]);
            }
            "-p" | "--package" | "-w" | "--workspace" | "--filter" => {
                rest = tail.get(1..).unwrap_or(&[]);
            }
            t if t.starts_with("--call=") => {
                // Keep the word, its text cut to the value.
                out.note(format!("`{runner} {t}`: its command string is not read"));
                rest = tail;
            }
            t if t.starts_with('-') => rest = tail,
            _ => break,
        }
    }
    if let Some(script) = call {
        if script.dynamic {
            out.note(format!("`{runner} -c {}`: a command chosen when it runs", script.raw));
            return;
        }
        let mut inner = shell.clone();
        inner.path = node_bins(shell).into_iter().chain(shell.path.iter().cloned()).collect();
        inner.path_changed = true;
        read(&script.text, &mut inner, out, depth + 1);
        return;
    }
    let Some(tool) = rest.first() else { return };
    if tool.dynamic {
        out.note(format!("`{runner} {}`: the tool is chosen when the command runs", tool.raw));
    } else if tool.text.trim_start_matches('@').contains('@') {
        out.note(format!("`{runner} {}`: a package version fetched when it runs", tool.text));
    } else if tool.text.starts_with('@') {
        // `@scope/pkg`: the package's bin, whose name prova does not know.
        out.note(format!("`{runner} {}`: the bin of a package, not read", tool.text));
    } else {
        invoke(tool, shell, out, true);
    }
}

/// `node_modules/.bin` of the shell's directory and each of its parents.
fn node_bins(shell: &Shell) -> Vec<PathDir> {
    let Some(cwd) = &shell.cwd else {
        return vec![PathDir::Unknown("node_modules/.bin".to_owned())];
    };
    cwd.ancestors().map(|d| PathDir::Dir(d.join("node_modules").join(".bin"))).collect()
}

/// The directories a package runner searches before `PATH`, from `cwd` up to `/`.
pub fn node_bin_dirs(cwd: &std::path::Path) -> Vec<PathBuf> {
    cwd.ancestors().map(|d| d.join("node_modules").join(".bin")).collect()
}
