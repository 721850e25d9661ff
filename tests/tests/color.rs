//! `--color always|never|auto` (issue 28): documented, and rejected by the binary until now;
//! `FORCE_COLOR`/`CLICOLOR_FORCE` colour a pipe (CI log viewers render escapes), `NO_COLOR`
//! and `CLICOLOR=0` turn colour off, and the flag wins over all of them. Tests run prova
//! with a pipe for stdout and stderr, so `auto` alone means no colour.

use prova_tests::{Output, ProvaCmd, TempWorkspace};

const ESC: char = '\u{1b}';

fn ws() -> TempWorkspace {
    TempWorkspace::new()
        .file("prova.toml", "[workspace]\nprojects = [\"a\"]\n")
        .file("a/prova.toml", "[tasks.build]\ncommand = \"echo built\"\n")
}

/// `prova run build --all --force` with `args` and `env`, the colour variables cleared first.
fn run(ws: &TempWorkspace, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut all = vec!["run", "build", "--all", "--force"];
    all.extend(args);
    let mut cmd: ProvaCmd = ws.prova(all);
    for v in ["NO_COLOR", "FORCE_COLOR", "CLICOLOR", "CLICOLOR_FORCE", "TERM"] {
        cmd = cmd.env_remove(v);
    }
    for (k, v) in env {
        cmd = cmd.env(k, v);
    }
    let out = cmd.run();
    out.assert_code(0);
    out
}

#[test]
fn the_flag_takes_its_three_values() {
    let ws = ws();
    let always = run(&ws, &["--color", "always"], &[]);
    assert!(always.stdout.contains(ESC), "always colours a pipe\n{always}");
    assert!(always.stdout.contains("\u{1b}[") && always.stdout.contains("a#build"), "{always}");
    let never = run(&ws, &["--color", "never"], &[("FORCE_COLOR", "1")]);
    assert!(!never.stdout.contains(ESC), "never wins over FORCE_COLOR\n{never}");
    let auto = run(&ws, &["--color", "auto"], &[]);
    assert!(!auto.stdout.contains(ESC), "a pipe is no terminal\n{auto}");
    let default = run(&ws, &[], &[]);
    assert!(!default.stdout.contains(ESC), "{default}");
    // `--color=always` and the flag before the subcommand (it is global).
    let eq = ws.prova(["--color=always", "run", "build", "--all"]).run();
    eq.assert_code(0);
    assert!(eq.stdout.contains(ESC), "{eq}");
    // A value it does not know is a usage error naming the three.
    let bad = ws.prova(["run", "build", "--all", "--color", "sometimes"]).run();
    bad.assert_code(2);
    for v in ["auto", "always", "never"] {
        assert!(bad.stderr.contains(v), "{bad}");
    }
}

#[test]
fn auto_reads_the_colour_variables() {
    let ws = ws();
    let cases: &[(&[(&str, &str)], bool)] = &[
        (&[("FORCE_COLOR", "1")], true),
        (&[("FORCE_COLOR", "3")], true),
        (&[("FORCE_COLOR", "0")], false),
        (&[("CLICOLOR_FORCE", "1")], true),
        (&[("CLICOLOR_FORCE", "0")], false),
        (&[("CLICOLOR", "0"), ("CLICOLOR_FORCE", "1")], true),
        (&[("NO_COLOR", "1"), ("FORCE_COLOR", "1")], false),
        (&[("CLICOLOR", "1")], false),
    ];
    for (env, coloured) in cases {
        let out = run(&ws, &[], env);
        assert_eq!(out.stdout.contains(ESC), *coloured, "{env:?}\n{out}");
    }
    // The flag wins over NO_COLOR.
    let out = run(&ws, &["--color", "always"], &[("NO_COLOR", "1")]);
    assert!(out.stdout.contains(ESC), "{out}");
    // JSON is never painted.
    let out = run(&ws, &["--json"], &[("FORCE_COLOR", "1")]);
    assert!(!out.stdout.contains(ESC), "{out}");
}

#[test]
fn warnings_on_stderr_follow_the_same_choice() {
    let ws = ws();
    // A glob that matches nothing beside one that does: one warning, painted or not.
    let args = ["--filter", "zz*", "--filter", "a"];
    let mut with = vec!["run", "build"];
    with.extend(args);
    let out = ws.prova(with.clone()).env_remove("FORCE_COLOR").env_remove("CLICOLOR_FORCE").run();
    out.assert_code(0);
    assert!(out.stderr.contains("prova: warning: --filter `zz*` matches no project"), "{out}");
    assert!(!out.stderr.contains(ESC), "{out}");
    with.extend(["--color", "always"]);
    let out = ws.prova(with).run();
    out.assert_code(0);
    assert!(out.stderr.contains("prova: \u{1b}[33mwarning\u{1b}[0m: --filter"), "{out}");
}
