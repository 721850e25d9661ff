//! `prova watch`'s settings: its flags, the working directory and `--color` resolved once by
//! a pure function ([`WatchSettings::resolve`]) into what the loop uses — the selection, the
//! debounce, the cache directory whose events are ignored, and the flags every child
//! `prova run` gets.

use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::ValueEnum as _;

use crate::args::{ColorWhen, SelectArgs, WatchArgs};

/// Everything `prova watch` decided from its flags.
#[derive(Debug)]
pub struct WatchSettings {
    /// What to watch and run.
    pub select: SelectArgs,
    /// How long changes settle before a cycle starts (at least 1 ms).
    pub debounce: Duration,
    /// `--cache-dir`, absolute (from the working directory): its events are ignored.
    pub cache_dir: Option<PathBuf>,
    /// The run flags every child gets after `-C <root> run --all` (a relative `--cache-dir`
    /// as given: the children share the watch's working directory).
    pub run_flags: Vec<String>,
}

impl WatchSettings {
    /// Resolves `args`; `cwd`: the working directory; `color`: `--color`. Pure.
    pub fn resolve(args: WatchArgs, cwd: Option<&Path>, color: ColorWhen) -> Self {
        let name = |v: Option<clap::builder::PossibleValue>| {
            v.map(|p| p.get_name().to_owned()).unwrap_or_default()
        };
        let mut run_flags: Vec<String> = vec![
            "--output".into(),
            name(args.output.to_possible_value()),
            "--output-logs".into(),
            name(args.output_logs.to_possible_value()),
            // The children write to the watch's own stdout: the same colour choice.
            "--color".into(),
            name(color.to_possible_value()),
        ];
        if let Some(j) = args.concurrency {
            run_flags.extend(["-j".into(), j.to_string()]);
        }
        if args.keep_going {
            run_flags.push("--continue".into());
        }
        let given = args.cache_dir.cache_dir;
        if let Some(d) = &given {
            run_flags.extend(["--cache-dir".into(), d.to_string_lossy().into_owned()]);
        }
        let cache_dir = given.map(|d| match cwd {
            Some(c) if d.is_relative() => c.join(d),
            _ => d,
        });
        Self {
            select: args.select,
            debounce: Duration::from_millis(args.debounce.max(1)),
            cache_dir,
            run_flags,
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser as _;

    use super::*;
    use crate::args::{Cli, CliCommand};

    fn resolve(line: &str, color: ColorWhen) -> WatchSettings {
        let argv = ["prova", "watch"].into_iter().chain(line.split_whitespace());
        match Cli::try_parse_from(argv).expect("parses").command {
            CliCommand::Watch(a) => WatchSettings::resolve(a, Some(Path::new("/here")), color),
            other => panic!("not a watch: {other:?}"),
        }
    }

    #[test]
    fn the_children_get_the_output_colour_and_concurrency_flags() {
        let s = resolve("build", ColorWhen::Auto);
        let flags = ["--output", "prefixed", "--output-logs", "new-only", "--color", "auto"];
        assert_eq!(s.run_flags, flags);
        assert_eq!(s.select.tasks, ["build"]);
        assert_eq!(s.cache_dir, None);
        let s = resolve(
            "build -j 3 --continue --output grouped --output-logs errors-only --cache-dir rel",
            ColorWhen::Never,
        );
        let flags = [
            "--output",
            "grouped",
            "--output-logs",
            "errors-only",
            "--color",
            "never",
            "-j",
            "3",
            "--continue",
            "--cache-dir",
            "rel",
        ];
        assert_eq!(s.run_flags, flags, "a relative cache dir as given: same working directory");
        assert_eq!(s.cache_dir, Some(PathBuf::from("/here/rel")), "ignored as an absolute path");
    }

    #[test]
    fn the_debounce_is_at_least_a_millisecond() {
        assert_eq!(
            resolve("build --debounce 0", ColorWhen::Auto).debounce,
            Duration::from_millis(1)
        );
        let s = resolve("build --debounce 250 --cache-dir /abs", ColorWhen::Auto);
        assert_eq!(s.debounce, Duration::from_millis(250));
        assert_eq!(s.cache_dir, Some(PathBuf::from("/abs")));
    }
}
