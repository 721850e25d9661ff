//! The command line as clap builds it, with every deferred subcommand expanded.

use clap::{CommandFactory as _, Parser as _};

use super::Cli;

/// clap's own consistency checks (unique ids, valid defaults, …) on the whole tree,
/// deferred subcommands included.
#[test]
fn the_command_line_is_consistent() {
    Cli::command().debug_assert();
}

/// Each subcommand's about, as its parent lists it (`cmd` not built: no deferred argument
/// applied yet) and as its own `--help` shows it once its deferred arguments are built, by
/// command path; recursively.
fn abouts(cmd: &clap::Command, path: &str, out: &mut Vec<(String, String, String)>) {
    for sub in cmd.get_subcommands() {
        let listed = sub.get_about().map(ToString::to_string).unwrap_or_default();
        let mut built = sub.clone();
        built.build();
        let own = built.get_about().map(ToString::to_string).unwrap_or_default();
        let name = format!("{path} {}", sub.get_name());
        abouts(sub, &name, out);
        out.push((name, listed, own));
    }
}

/// A deferred subcommand's arguments come from its `Args` struct after the variant's own
/// doc set its about: a `///` doc on the struct (or on one it flattens) would replace it
/// (`prova run --help` said "`prova run`"). And no argument of a subcommand reuses a
/// global's id: deferred, `certs init DIR` became the global `-C DIR`.
#[test]
fn the_help_of_every_command_is_its_own() {
    let mut all = Vec::new();
    abouts(&Cli::command(), "prova", &mut all);
    let mut root = Cli::command();
    root.build();
    assert!(all.len() > 20, "every command: {}", all.len());
    for (name, listed, own) in &all {
        assert!(!own.is_empty(), "`{name}` has no about");
        assert_eq!(own, listed, "`{name} --help` says something else than its listing");
    }
    let globals: Vec<String> = root
        .get_arguments()
        .filter(|a| a.is_global_set())
        .map(|a| a.get_id().to_string())
        .collect();
    fn positional_ids(cmd: &clap::Command, globals: &[String], path: &str, bad: &mut Vec<String>) {
        for sub in cmd.get_subcommands() {
            let mut built = sub.clone();
            built.build();
            let name = format!("{path} {}", sub.get_name());
            for a in built.get_arguments() {
                if globals.iter().any(|g| g == a.get_id().as_str()) && !a.is_global_set() {
                    bad.push(format!("{name}: {}", a.get_id()));
                }
            }
            positional_ids(&built, globals, &name, bad);
        }
    }
    let mut bad = Vec::new();
    positional_ids(&root, &globals, "prova", &mut bad);
    assert!(bad.is_empty(), "arguments with a global's id: {bad:?}");
    // And what the collision did: `certs init DIR` takes its directory positionally.
    let m = Cli::try_parse_from(["prova", "certs", "init", "/tmp/ca"]).expect("parses");
    match m.command {
        super::CliCommand::Certs(super::CertsCommand::Init { dir, .. }) => {
            assert_eq!(dir, std::path::Path::new("/tmp/ca"));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(m.dir, None, "the global -C stays unset");
}
