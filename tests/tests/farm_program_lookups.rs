//! A task's key folds each program its command starts as the client resolved it on its
//! `PATH`, and a farm worker checked before the run that the same word gives the same bytes
//! there. Two ways past that check served wrong bytes:
//! - a word the client found nowhere (`tool || fallback`) has no program in the key, and a
//!   worker that has one ran it: its output was saved under the client's key, where a run on
//!   the client's machine produces the fallback's;
//! - a program that appeared on the worker's `PATH` while the task ran (ahead of the keyed
//!   one, where none was, or the keyed one rebuilt in place: the task or a neighbour
//!   installed it) was the one the command started, after the check had passed.
//!
//! Now the client sends the words it found nowhere; a worker that finds one refuses the task,
//! and after a run it looks every word up again: a change withholds the outputs (the farm
//! keeps none, so the task fails for the client, as a run whose outputs the farm could not
//! keep always has).

use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;

use prova_tests::TempWorkspace;
use prova_tests::cluster::{Cluster, Sandbox};

/// Writes an executable `tool` into `dir` that prints `says`.
fn install(dir: &Path, says: &str) {
    std::fs::create_dir_all(dir).expect("mkdir");
    let tmp = dir.join(".tool.tmp");
    std::fs::write(&tmp, format!("#!/bin/sh\necho {says}\n")).expect("write tool");
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    std::fs::rename(&tmp, dir.join("tool")).expect("install tool");
}

/// A workspace whose `p#build` runs `command` and writes what `tool` said, or `fallback`.
fn workspace(command: &str) -> TempWorkspace {
    let command =
        format!("{command}mkdir -p dist && (tool > dist/out.txt || echo fallback > dist/out.txt)");
    TempWorkspace::new()
        .file("prova.toml", "[workspace]\nprojects = [\"p\"]\n")
        .file("p/src/a.txt", "a\n")
        .file(
            "p/prova.toml",
            &format!(
                "[tasks.build]\ncommand = \"{}\"\ninputs = [\"src/**\"]\noutputs = [\"dist/**\"]\n",
                command.replace('"', "\\\"")
            ),
        )
}

/// `dirs` ahead of this process's `PATH`.
fn path_with(dirs: &[&Path]) -> String {
    let mut all: Vec<String> = dirs.iter().map(|d| d.display().to_string()).collect();
    all.push(std::env::var("PATH").unwrap_or_default());
    all.join(":")
}

/// The note of `p#build` in a run's `--json` report, and its cache status.
fn outcome(out: &prova_tests::Output) -> (String, String) {
    let note = out.report("p#build")["note"].as_str().unwrap_or_default().to_owned();
    (note, out.cache_of("p#build"))
}

#[test]
fn a_program_the_client_found_nowhere_is_refused_on_a_worker_that_has_it() {
    let bin = tempfile::tempdir().expect("bin");
    install(bin.path(), "worker-only");
    let path = path_with(&[bin.path()]);
    // The workers' own PATH holds `tool`; the client's does not.
    let farm =
        Cluster::builder().workers(1).sandbox(Sandbox::None).worker_env("PATH", &path).start();
    let ws = workspace("");
    let out = farm.run_cmd(&ws, &farm.ci_certs(), ["build", "--all", "--json"]).run();
    out.assert_code(1);
    let (note, cache) = outcome(&out);
    assert!(note.contains("program `tool` differs on this worker"), "{out}");
    assert!(note.contains("found nowhere on its PATH"), "{out}");
    assert_eq!(cache, "not_saved", "{out}");
    assert!(!ws.exists("p/dist/out.txt") || ws.read("p/dist/out.txt") != "worker-only\n");
    // Before, the worker's `tool` ran and its output was saved under the client's key.
    // The same client with `tool` on its PATH keys it, and the worker, holding the same
    // bytes, runs it.
    let out =
        farm.run_cmd(&ws, &farm.ci_certs(), ["build", "--all", "--json"]).env("PATH", &path).run();
    out.assert_code(0);
    assert_eq!(outcome(&out).1, "saved", "{out}");
    assert_eq!(ws.read("p/dist/out.txt"), "worker-only\n");
}

#[test]
fn a_program_appearing_on_the_workers_path_while_the_task_ran_withholds_its_outputs() {
    let bin = tempfile::tempdir().expect("bin");
    let (early, late) = (bin.path().join("early"), bin.path().join("late"));
    let path = path_with(&[&early, &late]);
    let farm =
        Cluster::builder().workers(1).sandbox(Sandbox::None).worker_env("PATH", &path).start();
    // Each task changes `tool` on the worker before its command looks it up: installs one
    // where the client found none, ahead of the keyed one, or over the keyed one, or removes
    // the keyed one (the fallback runs).
    let install_into = |dir: &Path| {
        let d = dir.display();
        format!("cp src/installer.sh {d}/.t && mv {d}/.t {d}/tool && ")
    };
    let cases = [
        ("nowhere", None, install_into(&early)),
        ("ahead", Some("keyed"), install_into(&early)),
        ("over", Some("keyed"), install_into(&late)),
        ("removed", Some("keyed"), format!("rm {}/tool && ", late.display())),
    ];
    for (how, keyed, change) in cases {
        // The machine as the client keys it.
        let reset = || {
            let _ = std::fs::remove_dir_all(&early);
            let _ = std::fs::remove_dir_all(&late);
            std::fs::create_dir_all(&early).expect("early");
            std::fs::create_dir_all(&late).expect("late");
            if let Some(says) = keyed {
                install(&late, says);
            }
        };
        reset();
        let ws =
            workspace(&change).file("p/src/installer.sh", "#!/bin/sh\necho installed-mid-run\n");
        std::fs::set_permissions(
            ws.path("p/src/installer.sh"),
            std::fs::Permissions::from_mode(0o755),
        )
        .expect("chmod");
        let run = || {
            farm.run_cmd(&ws, &farm.ci_certs(), ["build", "--all", "--json"])
                .env("PATH", &path)
                .run()
        };
        // The farm keeps no outputs of it, so none come home: the task fails for the client.
        let out = run();
        out.assert_code(1);
        let (note, cache) = outcome(&out);
        assert_eq!(cache, "not_saved", "{how}: saved under a key of another program\n{out}");
        assert!(
            note.contains("program `tool` changed on this worker while the task ran"),
            "{how}: {out}"
        );
        assert!(!ws.exists("p/dist/out.txt"), "{how}: {out}");
        // Under the key the client computes again for the machine as it was, nothing: had
        // the entry been saved, this would be a hit serving the installed tool's output.
        reset();
        let again = run();
        assert_ne!(again.cache_of("p#build"), "hit", "{how}: {again}");
    }
}
