use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use std::process::Command;

use sha2::{Digest as _, Sha256};

use super::*;

/// Writes an executable `name` into `dir` that prints `says`; its SHA-256.
fn install(dir: &Path, name: &str, says: &str) -> String {
    std::fs::create_dir_all(dir).expect("mkdir");
    let body = format!("#!/bin/sh\necho {says}\n");
    let p = dir.join(name);
    std::fs::write(&p, &body).expect("write");
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    Sha256::digest(body.as_bytes()).iter().map(|b| format!("{b:02x}")).collect()
}

/// Runs `command` (by `sh -c`) inside `guard` with `path` as `PATH`: exit code, stdout,
/// stderr.
fn run(guard: &ProgramGuard, path: &str, command: &str) -> (i32, String, String) {
    run_in(guard, path, command, Path::new("."))
}

/// [`run`] in the working directory `cwd`.
fn run_in(guard: &ProgramGuard, path: &str, command: &str, cwd: &Path) -> (i32, String, String) {
    let argv = guard.wrap(vec!["sh".into(), "-c".into(), command.into()]);
    // The system's tools (sha256sum, sh) from where they are, after the test's PATH.
    let out = Command::new(&argv[0])
        .args(&argv[1..])
        .current_dir(cwd)
        .env("PATH", format!("{path}:/usr/bin:/bin"))
        .output()
        .expect("sh runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn nothing_to_check_leaves_the_command_alone() {
    let argv = vec!["sh".to_owned(), "-c".to_owned(), "true".to_owned()];
    assert_eq!(ProgramGuard::default().wrap(argv.clone()), argv);
}

#[test]
fn the_clients_program_runs_another_build_or_none_is_refused_before_the_run() {
    let t = tempfile::tempdir().expect("dir");
    let (client, bot) = (t.path().join("client"), t.path().join("bot"));
    let sha = install(&client, "tool", "client-build");
    let guard = ProgramGuard {
        programs: vec![GuardedProgram {
            word: "tool".into(),
            client_path: client.join("tool").display().to_string(),
            sha256: sha,
        }],
        ..ProgramGuard::default()
    };
    let (code, out, err) = run(&guard, &client.display().to_string(), "tool; echo \"$0\" ran");
    assert_eq!((code, out.as_str(), err.as_str()), (0, "client-build\nsh ran\n", ""));
    // The command's own exit status comes back.
    assert_eq!(run(&guard, &client.display().to_string(), "exit 3").0, 3);
    // Another build on the bot's PATH, ahead of the client's bytes.
    install(&bot, "tool", "bot-build");
    let both = format!("{}:{}", bot.display(), client.display());
    let (code, out, err) = run(&guard, &both, "tool > ran.txt");
    assert_eq!(code, GUARD_EXIT, "{err}");
    assert_eq!(out, "");
    assert!(err.contains("program `tool` differs on this bot: here `"), "{err}");
    assert!(err.contains("/bot/tool` (sha256 ") && err.contains("/client/tool`"), "{err}");
    // What the run's note shows beside the exit code.
    let said = reason(format!("some output\n{err}").as_bytes()).expect("a reason");
    assert!(said.starts_with("program `tool` differs on this bot"), "{said}");
    assert_eq!(reason(b"just output\n"), None);
    // None at all.
    let (code, _, err) = run(&guard, "/nonexistent", "tool");
    assert_eq!(code, GUARD_EXIT);
    assert!(err.contains("here not found on its PATH"), "{err}");
    // A relative PATH entry is not searched (nor is it by a worker).
    let rel = run(&guard, ".", "true");
    assert_eq!(rel.0, GUARD_EXIT, "{}", rel.2);
}

#[test]
fn a_word_the_client_found_nowhere_must_be_nowhere_on_the_bot() {
    let t = tempfile::tempdir().expect("dir");
    let bot = t.path().join("bot");
    let guard =
        ProgramGuard { absent: vec!["tool".into(), "it's".into()], ..ProgramGuard::default() };
    let (code, out, _) = run(&guard, &bot.display().to_string(), "echo fallback");
    assert_eq!((code, out.as_str()), (0, "fallback\n"));
    install(&bot, "tool", "bot-only");
    let (code, out, err) =
        run(&guard, &bot.display().to_string(), "tool || echo fallback; echo ran");
    assert_eq!((code, out.as_str()), (GUARD_EXIT, ""), "the command never ran: {err}");
    assert!(err.contains("program `tool` differs on this bot: here `"), "{err}");
    assert!(err.contains("on the client found nowhere on its PATH"), "{err}");
    // A quote in a word is a word like any other.
    std::fs::remove_file(bot.join("tool")).expect("rm");
    install(&bot, "it's", "quoted");
    let (code, _, err) = run(&guard, &bot.display().to_string(), "true");
    assert_eq!(code, GUARD_EXIT);
    assert!(err.contains("program `it's`"), "{err}");
}

#[test]
fn a_program_changed_while_the_task_ran_fails_a_successful_run() {
    let t = tempfile::tempdir().expect("dir");
    let (early, late) = (t.path().join("early"), t.path().join("late"));
    std::fs::create_dir_all(&early).expect("early");
    let sha = install(&late, "tool", "keyed");
    let path = format!("{}:{}", early.display(), late.display());
    let guard = ProgramGuard {
        programs: vec![GuardedProgram {
            word: "tool".into(),
            client_path: late.join("tool").display().to_string(),
            sha256: sha,
        }],
        absent: vec!["other".into()],
        ..ProgramGuard::default()
    };
    let plant = |dir: &Path, name: &str| {
        format!(
            "printf '#!/bin/sh\\necho planted\\n' > {d}/{name} && chmod +x {d}/{name}",
            d = dir.display()
        )
    };
    // Installed ahead of the keyed one, over it, where an absent word is looked up; removed.
    for change in [
        plant(&early, "tool"),
        plant(&late, "tool"),
        plant(&early, "other"),
        format!("rm {}/tool", late.display()),
    ] {
        let reset = || {
            let _ = std::fs::remove_file(early.join("tool"));
            let _ = std::fs::remove_file(early.join("other"));
            install(&late, "tool", "keyed");
        };
        reset();
        let (code, out, err) = run(&guard, &path, &format!("{change} && echo done"));
        assert_eq!(code, GUARD_EXIT, "{change}: {out}{err}");
        assert!(err.contains("changed on this bot while the task ran"), "{change}: {err}");
        // A failed run keeps its own status: nothing of it is saved anyway.
        reset();
        let (code, _, err) = run(&guard, &path, &format!("{change}; exit 4"));
        assert_eq!(code, 4, "{change}: {err}");
    }
}

#[test]
fn a_runtime_input_must_give_on_the_bot_what_it_gave_on_the_client() {
    let t = tempfile::tempdir().expect("dir");
    let project = t.path().join("apps/web");
    std::fs::create_dir_all(&project).expect("project");
    std::fs::write(t.path().join(".tool-version"), "v1\n").expect("marker");
    let sha = |stdout: &[u8], code: i32| -> String {
        Sha256::digest(runtime_stream(stdout, code)).iter().map(|b| format!("{b:02x}")).collect()
    };
    // Run in the input root's top, as the client ran it in the workspace's.
    let guard = |sha256: String| ProgramGuard {
        runtime: vec![GuardedRuntime { command: "cat .tool-version".into(), sha256 }],
        root: "../..".into(),
        ..ProgramGuard::default()
    };
    let (code, out, err) = run_in(&guard(sha(b"v1\n", 0)), "", "echo ran", &project);
    assert_eq!((code, out.as_str(), err.as_str()), (0, "ran\n", ""));
    // Another result, or another exit status, fails the action before the command.
    for other in [sha(b"v2\n", 0), sha(b"v1\n", 1)] {
        let (code, out, err) = run_in(&guard(other), "", "echo ran", &project);
        assert_eq!((code, out.as_str()), (GUARD_EXIT, ""), "{err}");
        assert!(err.contains("runtime input `cat .tool-version` differs on this bot"), "{err}");
    }
    // Its stderr is not part of what is compared.
    let noisy = ProgramGuard {
        runtime: vec![GuardedRuntime {
            command: "echo v1; echo warning >&2".into(),
            sha256: sha(b"v1\n", 0),
        }],
        root: ".".into(),
        ..ProgramGuard::default()
    };
    assert_eq!(run(&noisy, "", "true").0, 0);
}

#[test]
fn the_bots_own_environment_is_left_out_but_the_hosts_and_the_actions() {
    let guard = ProgramGuard {
        env_keep: Some(vec!["PATH".into(), "TZ".into(), "HOME".into()]),
        ..ProgramGuard::default()
    };
    let argv = guard.wrap(vec![
        "sh".into(),
        "-c".into(),
        "echo \"${BOT_ONLY-unset} ${LC_ALL-unset} ${TZ-unset} ${HOME-unset} ${DECLARED_UNSET-unset}\"".into(),
    ]);
    let out = Command::new(&argv[0])
        .args(&argv[1..])
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("HOME", "/home/bot")
        .env("TZ", "UTC")
        .env("BOT_ONLY", "1")
        .env("LC_ALL", "fr_FR.UTF-8")
        .env("DECLARED_UNSET", "bot-default")
        .env("MULTI", "a\nTZ=not-a-name")
        .output()
        .expect("sh runs");
    let said = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        said,
        "unset unset UTC /home/bot unset\n",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Nothing kept: every exported name goes.
    let none = ProgramGuard { env_keep: Some(Vec::new()), ..ProgramGuard::default() };
    let argv = none.wrap(vec!["/usr/bin/env".into()]);
    let out = Command::new(&argv[0])
        .args(&argv[1..])
        .env("PATH", "/usr/bin:/bin")
        .env("BOT_ONLY", "1")
        .output()
        .expect("sh runs");
    let left = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(!left.contains("BOT_ONLY") && !left.contains("PATH="), "{left}");
    // A bash guard imports the bot's exported functions: they do not reach the command.
    if Path::new("/bin/bash").exists() {
        let argv = guard.wrap(vec!["/bin/bash".into(), "-c".into(), "hello || echo none".into()]);
        let out = Command::new("/bin/bash")
            .args(&argv[1..])
            .env("BASH_FUNC_hello%%", "() {  echo from-the-bot; }")
            .output()
            .expect("bash runs");
        assert_eq!(String::from_utf8_lossy(&out.stdout), "none\n");
    }
    // A name that is no shell variable's is refused, not passed in pieces.
    let odd = ProgramGuard { env_keep: Some(vec!["A-B".into()]), ..ProgramGuard::default() };
    let argv = odd.wrap(vec!["/bin/echo".into(), "ran".into()]);
    let out = Command::new("/bin/sh").args(&argv[1..]).output().expect("sh runs");
    assert_eq!(out.status.code(), Some(GUARD_EXIT));
    assert!(String::from_utf8_lossy(&out.stderr).contains("variable A-B cannot be passed"));
    // Without `env` the command cannot be started with the kept names alone: nothing runs.
    let argv = guard.wrap(vec!["/bin/echo".into(), "ran".into()]);
    let out = Command::new("/bin/sh")
        .args(&argv[1..])
        .env_clear()
        .env("PATH", "/nonexistent")
        .output()
        .expect("sh runs");
    assert_eq!(out.status.code(), Some(GUARD_EXIT));
    assert!(out.stdout.is_empty());
    assert!(String::from_utf8_lossy(&out.stderr).contains("needs env on this bot"));
}

#[test]
fn a_programs_digest_is_remembered_on_the_bot_by_its_stat_once_it_is_old_enough() {
    let t = tempfile::tempdir().expect("dir");
    let (bin, tmp, clock) = (t.path().join("bin"), t.path().join("tmp"), t.path().join("clock"));
    std::fs::create_dir_all(&tmp).expect("tmp");
    let sha = install(&bin, "tool", "build");
    let guard = ProgramGuard {
        programs: vec![GuardedProgram {
            word: "tool".into(),
            client_path: "/client/tool".into(),
            sha256: sha.clone(),
        }],
        ..ProgramGuard::default()
    };
    let memo = tmp.join("prova-guard-sha256");
    let run_with = |path: &str| {
        let argv = guard.wrap(vec!["sh".into(), "-c".into(), "true".into()]);
        let out = Command::new(&argv[0])
            .args(&argv[1..])
            .env("PATH", format!("{path}:/usr/bin:/bin"))
            .env("TMPDIR", &tmp)
            .output()
            .expect("sh runs");
        (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stderr).into_owned())
    };
    let memoised = || -> Vec<String> {
        std::fs::read_dir(&memo)
            .map(|d| d.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect())
            .unwrap_or_default()
    };
    // Just written (its ctime within the racy window): hashed, not remembered.
    assert_eq!(run_with(&bin.display().to_string()).0, 0);
    assert!(memoised().is_empty(), "{:?}", memoised());
    // Older than the window (a clock far ahead): remembered under its stat.
    install(&clock, "date", "99999999999");
    let path = format!("{}:{}", bin.display(), clock.display());
    assert_eq!(run_with(&path).0, 0);
    let names = memoised();
    assert_eq!(names.len(), 1, "{names:?}");
    assert_eq!(std::fs::read_to_string(memo.join(&names[0])).expect("memo"), format!("{sha}\n"));
    // And read back: a memo that says otherwise is what the guard compares.
    std::fs::write(memo.join(&names[0]), "0123456789abcdef\n").expect("forge");
    let (code, err) = run_with(&path);
    assert_eq!(code, GUARD_EXIT);
    assert!(err.contains("(sha256 0123456789ab)"), "{err}");
    // Another build is another stat (here another size): hashed again, not the memo's.
    std::fs::remove_file(bin.join("tool")).expect("rm");
    let other = install(&bin, "tool", "build-2");
    let (code, err) = run_with(&path);
    assert_eq!(code, GUARD_EXIT);
    assert!(err.contains(&format!("(sha256 {})", &other[..12])), "{err}");
}
