//! Whether prova paints its output: `--color always|never|auto`, and under `auto` the
//! environment, read the way the Rust CLIs around it (clap's own help, through anstream) read
//! it:
//!
//! 1. `NO_COLOR` set and not empty: no colour (<https://no-color.org>).
//! 2. `FORCE_COLOR` (anything but `0`/`false`) or `CLICOLOR_FORCE` (anything but `0`):
//!    colour, even into a pipe or a file (CI log viewers render it).
//! 3. `CLICOLOR=0` or `TERM=dumb`: no colour.
//! 4. Otherwise colour exactly when the stream is a terminal.
//!
//! `--color always`/`never` overrides all of them. The choice is made once, in `main`
//! ([`set`]); stdout (the run's lines) and stderr (the log and warnings) are judged each by
//! its own stream.

use std::io::IsTerminal as _;
use std::sync::OnceLock;

use crate::args::ColorWhen;

static CHOICE: OnceLock<ColorWhen> = OnceLock::new();

/// Records `--color` for the process (the first call wins).
pub fn set(choice: ColorWhen) {
    let _ = CHOICE.set(choice);
}

/// `--color` as given (`auto` before [`set`]).
pub fn choice() -> ColorWhen {
    CHOICE.get().copied().unwrap_or(ColorWhen::Auto)
}

/// Whether stdout is painted.
pub fn stdout() -> bool {
    decide(choice(), std::io::stdout().is_terminal(), &env)
}

/// Whether stderr is painted.
pub fn stderr() -> bool {
    decide(choice(), std::io::stderr().is_terminal(), &env)
}

fn env(name: &str) -> Option<String> {
    std::env::var_os(name).map(|v| v.to_string_lossy().into_owned())
}

/// The rule above, pure: `terminal` is whether the stream is one, `env` reads a variable.
pub fn decide(choice: ColorWhen, terminal: bool, env: &dyn Fn(&str) -> Option<String>) -> bool {
    match choice {
        ColorWhen::Always => return true,
        ColorWhen::Never => return false,
        ColorWhen::Auto => {}
    }
    if env("NO_COLOR").is_some_and(|v| !v.is_empty()) {
        return false;
    }
    let forced = env("FORCE_COLOR").is_some_and(|v| v != "0" && !v.eq_ignore_ascii_case("false"))
        || env("CLICOLOR_FORCE").is_some_and(|v| v != "0");
    if forced {
        return true;
    }
    if env("CLICOLOR").is_some_and(|v| v == "0") || env("TERM").is_some_and(|t| t == "dumb") {
        return false;
    }
    terminal
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let vars: Vec<(String, String)> =
            vars.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        move |name| vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone())
    }

    #[test]
    fn the_flag_overrides_the_environment() {
        let loud = with(&[("NO_COLOR", "1"), ("CLICOLOR", "0")]);
        assert!(decide(ColorWhen::Always, false, &loud));
        let forced = with(&[("FORCE_COLOR", "1")]);
        assert!(!decide(ColorWhen::Never, true, &forced));
    }

    /// Variables, whether the stream is a terminal, whether it is painted.
    type Case = (&'static [(&'static str, &'static str)], bool, bool);

    #[test]
    fn auto_reads_the_terminal_and_the_environment() {
        let cases: &[Case] = &[
            (&[], true, true),
            (&[], false, false),
            (&[("NO_COLOR", "1")], true, false),
            (&[("NO_COLOR", "")], true, true),
            (&[("FORCE_COLOR", "1")], false, true),
            (&[("FORCE_COLOR", "")], false, true),
            (&[("FORCE_COLOR", "3")], false, true),
            (&[("FORCE_COLOR", "0")], false, false),
            (&[("FORCE_COLOR", "false")], false, false),
            (&[("CLICOLOR_FORCE", "1")], false, true),
            (&[("CLICOLOR_FORCE", "0")], false, false),
            (&[("CLICOLOR", "0")], true, false),
            (&[("CLICOLOR", "1")], true, true),
            (&[("CLICOLOR", "1")], false, false),
            (&[("TERM", "dumb")], true, false),
            (&[("CLICOLOR", "0"), ("CLICOLOR_FORCE", "1")], false, true),
            (&[("NO_COLOR", "1"), ("FORCE_COLOR", "1")], false, false),
        ];
        for (vars, terminal, want) in cases {
            assert_eq!(
                decide(ColorWhen::Auto, *terminal, &with(vars)),
                *want,
                "{vars:?} tty={terminal}"
            );
        }
    }
}
