//! The live progress line (issue 16): on a terminal a run shows done/total and what runs,
//! redrawn in place on stderr and cleared before the summary; piped, with `CI` set, or with
//! `--json`, not one escape code. The terminal is a real PTY (`script` from util-linux).

use std::process::Command;
use std::time::Duration;

use prova_tests::TempWorkspace;
use prova_tests::locate::prova_bin;

/// Three tasks that each take long enough for the line to be drawn while they run.
fn workspace() -> TempWorkspace {
    TempWorkspace::new()
        .file(
            "prova.toml",
            "[workspace]\nprojects = [\"a\", \"b\", \"c\"]\n\n[tasks.build]\n\
             command = \"sleep 0.6 && mkdir -p dist && echo built > dist/out.txt && echo done-$PWD\"\n\
             inputs = [\"src/**\"]\noutputs = [\"dist/**\"]\n",
        )
        .file("a/src/x", "a\n")
        .file("b/src/x", "b\n")
        .file("c/src/x", "c\n")
}

/// `prova ARGS` under a pseudo-terminal; what the terminal received, and the exit status.
fn on_a_terminal(ws: &TempWorkspace, args: &str, ci: bool) -> (String, Option<i32>) {
    let line = format!("{} -C {} {args}", prova_bin().display(), ws.root().display());
    let mut cmd = Command::new("script");
    cmd.args(["-qfec", &line, "/dev/null"]).env("TERM", "xterm-256color").env_remove("NO_COLOR");
    cmd.env_remove("PROVA_LOG");
    if ci {
        cmd.env("CI", "true");
    } else {
        cmd.env_remove("CI");
    }
    let out = cmd.output().expect("script (util-linux) runs");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    (text, out.status.code())
}

fn have_script() -> bool {
    Command::new("script").arg("--version").output().is_ok_and(|o| o.status.success())
}

#[test]
fn a_terminal_sees_the_line_redraw_and_go_before_the_summary() {
    if !have_script() {
        eprintln!("skipped: `script` (util-linux) is not installed");
        return;
    }
    let ws = workspace();
    let (text, code) = on_a_terminal(&ws, "run build --all -j 1", false);
    assert_eq!(code, Some(0), "{text}");
    // Drawn: done/total and a running task with its elapsed time.
    assert!(text.contains("0/3 done") || text.contains("1/3 done"), "no progress line:\n{text:?}");
    assert!(text.contains("running "), "the running tasks are not named:\n{text:?}");
    // Redrawn in place: the line is erased (ESC[2K) and rewritten, more than once.
    let erases = text.matches("\x1b[2K").count();
    assert!(erases >= 2, "the line was not redrawn in place ({erases} erases):\n{text:?}");
    // Gone before the summary: nothing of it after the summary's first line.
    let at = text.rfind(" Tasks:").expect("a summary");
    assert!(text[..at].contains(" done ·"), "{text:?}");
    assert!(!text[at..].contains(" done ·"), "the line outlived the run:\n{text:?}");
    // Task output still reached the terminal, above the line.
    assert_eq!(text.matches("done-").count(), 3, "{text:?}");
}

#[test]
fn no_line_when_piped_in_ci_or_json() {
    let ws = workspace();
    let piped = ws.prova(["run", "build", "--all"]).timeout(Duration::from_secs(120)).run();
    piped.assert_code(0);
    for (what, s) in [("stdout", &piped.stdout), ("stderr", &piped.stderr)] {
        assert!(!s.contains('\x1b'), "an escape code in the piped {what}:\n{s:?}");
        assert!(!s.contains(" done ·"), "a progress line in the piped {what}:\n{s:?}");
    }
    if !have_script() {
        eprintln!("skipped the terminal half: `script` (util-linux) is not installed");
        return;
    }
    let (ci, code) = on_a_terminal(&ws, "run build --all --force", true);
    assert_eq!(code, Some(0), "{ci}");
    assert!(!ci.contains(" done ·"), "a progress line with CI set:\n{ci:?}");
    let (json, code) = on_a_terminal(&ws, "run build --all --force --json", false);
    assert_eq!(code, Some(0), "{json}");
    assert!(!json.contains(" done ·"), "a progress line with --json:\n{json:?}");
}
