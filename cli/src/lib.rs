//! The `prova` command line: argument parsing, the wiring of coordinator and workers, and
//! rendering (prefixed or grouped output, summaries, `--json`).
//!
//! # Layout
//! - [`args`]: the clap definitions (what a user can type).
//! - [`commands`]: one module per subcommand; each resolves its arguments and acts.
//! - [`local`]: local single-node mode: the in-process worker link.
//! - [`remote`]: farm mode, client side: connect, upload inputs, submit, download outputs.
//! - [`daemon_config`]: the config files of `prova coordinator` / `prova worker`.
//! - [`render`]: turning run events into terminal output or JSON lines, and the summary.
//! - [`exit`]: exit codes (0 ok, 1 a task or proof failed, 2 usage/config/infrastructure,
//!   3 the workspace is busy under `--no-wait`).
//! - [`lock`]: the workspace lock (one writer per workspace).
//! - [`stdio`]: a stderr writer that survives a closed pipe (the log, the error line).
//! - [`color`]: `--color` and the colour variables (`NO_COLOR`, `FORCE_COLOR`, `CLICOLOR…`).
//! - [`logfmt`]: warnings as `prova: warning: …` lines, whichever crate logs them.

pub mod args;
pub mod color;
pub mod commands;
pub mod daemon_config;
pub mod exit;
pub mod local;
pub mod lock;
pub mod logfmt;
pub mod reapi_exec;
pub mod remote;
pub mod render;
pub mod stdio;

use std::process::ExitCode;

use clap::Parser;

/// Entry point of the binary.
pub fn main() -> ExitCode {
    let cli = args::Cli::parse();
    color::set(cli.color);
    let daemon =
        matches!(cli.command, args::CliCommand::Coordinator(_) | args::CliCommand::Worker(_));
    init_tracing(cli.verbose, cli.log_format, daemon);
    let code = match commands::dispatch(cli) {
        Ok(code) => code,
        Err(e) => {
            stdio::eprint_line(&format!("prova: {}", error_text(&e)));
            match e.downcast_ref::<lock::LockError>() {
                Some(lock::LockError::Busy { .. }) => exit::Code::Busy,
                _ => exit::Code::Usage,
            }
        }
    };
    code.into()
}

/// The log filter when neither `-v` nor `PROVA_LOG` says otherwise: warnings, and for the
/// daemons prova's own info lines too (a worker's join and leave, a run's start and finish,
/// lease expiries, requeues) — an operator's default, without the libraries' chatter.
fn default_filter(verbose: u8, daemon: bool) -> &'static str {
    match (verbose, daemon) {
        (0, false) => "warn",
        (0, true) => "warn,prova_coordinator=info,prova_worker=info,prova_cli=info",
        (1, _) => "info",
        _ => "debug",
    }
}

fn init_tracing(verbose: u8, format: args::LogFormat, daemon: bool) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("PROVA_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_filter(verbose, daemon)));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(stdio::Stderr)
        .log_internal_errors(false);
    let _ = match format {
        // Escape codes only for a terminal (or `--color always`): files, journald and kubectl
        // logs get plain lines.
        args::LogFormat::Text if daemon => builder.with_ansi(color::stderr()).try_init(),
        args::LogFormat::Text => {
            let ansi = color::stderr();
            let full = tracing_subscriber::fmt::format::Format::default().with_ansi(ansi);
            builder.with_ansi(ansi).event_format(logfmt::CliFormat { color: ansi, full }).try_init()
        }
        args::LogFormat::Json => builder
            .json()
            .flatten_event(true)
            // The event's own fields: the actor runtime's spans are internals.
            .with_current_span(false)
            .with_span_list(false)
            .with_ansi(false)
            .try_init(),
    };
}

/// The error line's text: each cause of the chain after the last, unless the text so far
/// already says it (an error whose message embeds its source would print it twice).
pub fn error_text(e: &anyhow::Error) -> String {
    let mut text = String::new();
    for cause in e.chain() {
        let part = cause.to_string();
        if text.is_empty() {
            text = part;
        } else if !text.contains(&part) {
            text.push_str(": ");
            text.push_str(&part);
        }
    }
    text
}

#[cfg(test)]
mod filter_tests {
    #[test]
    fn daemons_log_their_own_info_lines_by_default_and_nothing_else_does() {
        assert_eq!(super::default_filter(0, false), "warn");
        let d = super::default_filter(0, true);
        assert!(d.starts_with("warn,") && d.contains("prova_coordinator=info"), "{d}");
        assert_eq!(super::default_filter(1, true), "info");
        assert_eq!(super::default_filter(2, false), "debug");
    }
}

#[cfg(test)]
mod error_text_tests {
    use super::error_text;

    #[derive(Debug, thiserror::Error)]
    #[error("cache: {path}: {source}")]
    struct Embeds {
        path: String,
        source: std::io::Error,
    }

    #[test]
    fn a_cause_already_in_the_message_is_not_repeated() {
        let io = std::io::Error::new(std::io::ErrorKind::NotFound, "No such file");
        let e = anyhow::Error::new(Embeds { path: "/x/blobs".into(), source: io })
            .context("cannot open the cache at /x");
        assert_eq!(error_text(&e), "cannot open the cache at /x: cache: /x/blobs: No such file");
        // A cause the message does not embed is still shown, once.
        let e = anyhow::anyhow!("inner").context("outer");
        assert_eq!(error_text(&e), "outer: inner");
        let e = anyhow::anyhow!("same").context("same");
        assert_eq!(error_text(&e), "same", "a context equal to its cause says it once");
    }
}
