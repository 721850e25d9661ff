//! The documentation as a test (`tests/tests/docs.rs`): every command block of `README.md`
//! and `docs/*.md` is executed, so a page cannot document a command that does not work.
//!
//! # What a block is, and how it runs
//! A fenced block whose language is `sh` (or `bash`, `shell`, `console`) holds commands. Each
//! runs under `bash -e -o pipefail` — the first failing command ends it — in a **fresh copy of
//! a workspace**, with the real `prova` (the binary under test, see [`crate::prova_bin`])
//! first on `PATH`, a `HOME` of its own and none of the caller's `PROVA_*` variables, within
//! [`session::BLOCK_TIMEOUT`]. A `console` block's commands are its `$ ` lines (the rest is
//! sample output). `cargo run [--release] -p prova-cli --` is read as `prova`. Other fenced
//! blocks (`toml`, `text`, `json`, none) are not run; `config_schema.rs` validates the TOML.
//!
//! The info string after the language says more (unknown words fail the test):
//! - `in=demo` (default): a copy of `examples/demo` as a git repository on `main` with an
//!   `origin/main`; `in=repo`: a directory with `examples/demo` at that path (a checkout);
//!   `in=npm`: a generated two-package npm workspace with no `prova.toml`; `in=tsmono`: a copy
//!   of `examples/tsmono` with its `node_modules`.
//! - `continue`: runs in the previous block's workspace (its files, its daemons).
//! - `daemons`: each command is a long-running process, started in the background; the next
//!   command starts once it printed its first line. A `--listen HOST:PORT` gets port 0, and
//!   the address the daemon prints replaces `HOST:PORT` in every later block of the chain
//!   (no fixed port in a test). The daemons are killed when the chain ends.
//! - `exit=N`: the block ends with status N (default 0).
//! - `requires=TOOL`: skipped, with the `continue` blocks after it, when TOOL is not on
//!   `PATH` — a failure under `PROVA_REQUIRE_TOOLS=1`, which `.ci/run` sets after installing
//!   it.
//! - `no-run REASON…`: not executed, for what a test cannot do (a second machine, systemd,
//!   kubectl, a command that runs until Ctrl-C, the test suite itself); the reason is
//!   required. Each `prova` invocation in it is still checked by the real argument parser
//!   (`--help` appended), so a renamed flag fails the test there too.

pub mod markdown;
pub mod session;

use std::path::Path;
use std::process::Command;

use markdown::Block;
use session::Session;

use crate::prova_bin;

/// Runs every command block of `page` (chains in order); the failures, as messages.
pub fn run_page(page: &Path) -> Vec<String> {
    let text = markdown::read(page);
    let mut failures = Vec::new();
    let mut session: Option<Session> = None;
    // A chain whose first block was skipped (`requires=`) is skipped whole.
    let mut skipping = false;
    for block in markdown::blocks(page, &text).iter().filter(|b| b.is_commands()) {
        let info = match block.info() {
            Ok(info) => info,
            Err(e) => {
                failures.push(e);
                continue;
            }
        };
        if let Some(reason) = &info.no_run {
            failures.extend(check_parses(block, reason));
            continue;
        }
        if info.continues && skipping {
            continue;
        }
        skipping = false;
        if let Some(tool) = &info.requires
            && !on_path(tool)
        {
            crate::skip_for_missing(&format!("{}: `{tool}` is not installed", block.at));
            session = None;
            skipping = true;
            continue;
        }
        if !info.continues {
            session = Session::new(info.place);
        } else if session.is_none() {
            failures.push(format!("{}: `continue` with no workspace before it", block.at));
            continue;
        }
        let Some(s) = session.as_mut() else { continue };
        if info.daemons {
            s.start_daemons(block);
            continue;
        }
        let ran = s.run(block);
        if ran.code() != info.exit {
            failures.push(format!(
                "{}: expected exit {}, in {}\n{ran}",
                block.at,
                info.exit,
                s.root().display()
            ));
        }
    }
    failures
}

fn on_path(tool: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|d| d.join(tool).is_file()))
}

/// A `no-run` block's `prova` invocations, each parsed by the real binary with `--help`
/// (before a `--`, whose words would go to a task): exit 0 means every flag and value exists.
fn check_parses(block: &Block, reason: &str) -> Vec<String> {
    let mut failures = Vec::new();
    for line in block.commands() {
        for mut args in session::prova_invocations(&line) {
            let at = args.iter().position(|a| a == "--").unwrap_or(args.len());
            args.insert(at, "--help".to_owned());
            let out = Command::new(prova_bin())
                .args(&args)
                .env_remove("PROVA_REMOTE")
                .env_remove("PROVA_CERTS")
                .output()
                .expect("running prova --help");
            if !out.status.success() {
                failures.push(format!(
                    "{} (no-run: {reason}): `prova {}` does not parse:\n{}",
                    block.at,
                    args.join(" "),
                    String::from_utf8_lossy(&out.stderr)
                ));
            }
        }
    }
    failures
}
