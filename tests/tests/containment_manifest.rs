//! Every manifest is checked against the task's declared outputs (issue 10): by the
//! coordinator when a worker reports — a real lying worker ([`prova_tests::liar`]) with a
//! genuine certificate returns forged artifacts —, by the client before it writes a download,
//! and by every local restore (a forged row in the local index). Entries a run receives from
//! a `pending` or `untrusted` farm tier are never filed into the local trusted namespace. An
//! I/O error during a restore (a full file system, a file-size limit) is a miss that names
//! the error and keeps the blob.

use std::fs;
use std::os::unix::fs::PermissionsExt as _;
use std::os::unix::process::CommandExt as _;
use std::path::Path;
use std::process::{Command, Stdio};

use prova_coordinator::cache::{NewEntry, Store, TRUSTED};
use prova_protocol::Digest;
use prova_protocol::artifact::{collect_outputs, pack};
use prova_protocol::globs::PathGlobs;
use prova_protocol::manifest::{ManifestEntry, OutputManifest};
use prova_tests::cluster::Cluster;
use prova_tests::liar::{Forgery, LyingWorker};
use prova_tests::verify::{task, workspace};
use prova_tests::{Output, TempWorkspace, prova_bin};

const HOOK: &str = ".git/hooks/pre-commit";
const OTHER_SRC: &str = "libs/other/src/index.ts";
const OTHER_BYTES: &str = "export const other = 1;\n";

/// Two projects; `build` writes `dist/out.txt` from `src/`.
fn two_projects() -> TempWorkspace {
    TempWorkspace::new()
        .file(
            "prova.toml",
            r#"[workspace]
projects = ["libs/a", "libs/other"]

[tasks.build]
command = "mkdir -p dist && cat src/* > dist/out.txt"
inputs = ["src/**"]
outputs = ["dist/**"]
"#,
        )
        .file("libs/a/src/index.ts", "export const a = 1;\n")
        .file(OTHER_SRC, OTHER_BYTES)
        .file(".git/hooks/pre-commit.sample", "#!/bin/sh\n")
}

/// Nothing the forgery aimed at was written in `ws`.
#[track_caller]
fn untouched(ws: &TempWorkspace, case: &str, out: &Output) {
    assert!(!ws.exists(HOOK), "{case}: the hook was planted\n{out}");
    assert!(!ws.exists(".git/hooks/evil"), "{case}: .git was written\n{out}");
    assert_eq!(ws.read(OTHER_SRC), OTHER_BYTES, "{case}: another project's source\n{out}");
    assert!(!ws.exists("libs/a/dist/evil"), "{case}: the escaping link\n{out}");
    assert!(!ws.exists("libs/a/dist/out.txt"), "{case}: a forged output was placed\n{out}");
}

/// The forgeries the coordinator must see through from the manifest alone.
fn manifest_forgeries() -> Vec<(&'static str, Forgery, &'static str)> {
    let hook = b"#!/bin/sh\necho pwned\n";
    vec![
        (
            "a hook and another project's source",
            Forgery::new()
                .file("{project}/dist/out.txt", b"forged\n", 0o644)
                .file(HOOK, hook, 0o755)
                .file(OTHER_SRC, b"pwned\n", 0o644),
            HOOK,
        ),
        (
            "another project's source only",
            Forgery::new()
                .file("{project}/dist/out.txt", b"forged\n", 0o644)
                .file(OTHER_SRC, b"pwned\n", 0o644),
            OTHER_SRC,
        ),
        (
            "the task's own sources",
            Forgery::new().file("{project}/dist/out.txt", b"forged\n", 0o644).file(
                "{project}/src/index.ts",
                b"pwned\n",
                0o644,
            ),
            "/src/index.ts",
        ),
        (
            "a declared output linking out of the project",
            Forgery::new()
                .file("{project}/dist/out.txt", b"forged\n", 0o644)
                .link("{project}/dist/evil", "../../../.git/hooks"),
            "/dist/evil",
        ),
        (
            "a directory entry in .git",
            Forgery::new()
                .file("{project}/dist/out.txt", b"forged\n", 0o644)
                .dir(".git/hooks/evil"),
            ".git/hooks/evil",
        ),
    ]
}

#[test]
fn a_forged_manifest_from_a_worker_is_refused_named_and_never_stored() {
    for (case, forgery, offending) in manifest_forgeries() {
        let farm = Cluster::builder().workers(0).start();
        let liar = LyingWorker::join(&farm, "liar", forgery);
        let ws = two_projects();
        let out = farm.run(&ws, ["build", "--all", "--json"]);
        assert!(liar.assignments() >= 1, "{case}: the liar was never asked\n{out}");
        out.assert_code(1);
        for t in ["a#build", "other#build"] {
            assert_eq!(out.status_of(t), "failed", "{case}: {t}\n{out}");
            let note = out.report(t)["note"].as_str().unwrap_or_default().to_owned();
            assert!(note.contains("liar"), "{case}: {t}: the note names no worker: {note}\n{out}");
            assert!(
                note.contains(offending),
                "{case}: {t}: the note names no offending path `{offending}`: {note}\n{out}"
            );
        }
        untouched(&ws, case, &out);
        assert_eq!(farm.farm_entries(), 0, "{case}: a forged entry was stored\n{}", farm.logs());
        let log = farm.coordinator_log();
        assert!(
            log.lines().any(|l| l.contains("WARN") && l.contains("liar")),
            "{case}: no warning names the worker\n{log}"
        );
        drop(liar);
    }
}

#[test]
fn an_archive_hiding_entries_from_its_manifest_writes_nothing_on_the_client() {
    let farm = Cluster::builder().workers(0).start();
    let forgery = Forgery::new()
        .file("{project}/dist/out.txt", b"forged\n", 0o644)
        .file(HOOK, b"#!/bin/sh\necho pwned\n", 0o755)
        .hidden(HOOK);
    let liar = LyingWorker::join(&farm, "liar", forgery);
    let ws = two_projects();
    let out = farm.run(&ws, ["build", "--all", "--json"]);
    assert!(liar.assignments() >= 1, "{out}");
    assert!(!ws.exists(HOOK), "the hidden hook was planted\n{out}");
    assert!(!ws.exists("libs/a/dist/out.txt"), "a forged archive was placed\n{out}");
    let text = out.stdout.clone();
    assert!(
        text.contains("a#build") && out.code() == Some(1),
        "a download that could not be restored is a failure\n{out}"
    );
}

// ----- the local index ----------------------------------------------------------------

/// Packs `files` (workspace-relative path, bytes, mode) and `links` into an archive with its
/// manifest.
fn archive(files: &[(&str, &[u8], u32)], links: &[(&str, &str)]) -> (Vec<u8>, OutputManifest) {
    let dir = tempfile::tempdir().expect("test setup");
    for (p, bytes, mode) in files {
        let abs = dir.path().join(p);
        fs::create_dir_all(abs.parent().expect("a parent")).expect("test setup");
        fs::write(&abs, bytes).expect("test setup");
        fs::set_permissions(&abs, fs::Permissions::from_mode(*mode)).expect("test setup");
    }
    for (p, target) in links {
        let abs = dir.path().join(p);
        fs::create_dir_all(abs.parent().expect("a parent")).expect("test setup");
        std::os::unix::fs::symlink(target, abs).expect("test setup");
    }
    let m =
        collect_outputs(dir.path(), &PathGlobs::new("", &["**".to_owned()]).expect("test setup"))
            .expect("test setup");
    let mut bytes = Vec::new();
    pack(dir.path(), &m, &mut bytes, 3).expect("test setup");
    (bytes, m)
}

/// The key of `task`'s local entry.
fn key_of(ws: &TempWorkspace, task: &str) -> Digest {
    let conn =
        rusqlite::Connection::open(ws.path(".prova/cache/index.sqlite")).expect("test setup");
    let key: Vec<u8> = conn
        .query_row("SELECT key FROM entries WHERE task = ?1 AND namespace = ''", [task], |r| {
            r.get(0)
        })
        .unwrap_or_else(|e| panic!("no trusted entry for {task}: {e}"));
    Digest(key.try_into().expect("a 32-byte key"))
}

/// Rewrites `task`'s local entry to point at `bytes` with `manifest`, through the cache's own
/// store API (as another process sharing the cache would write it).
fn forge_row(ws: &TempWorkspace, task: &str, bytes: &[u8], manifest: &OutputManifest) {
    let key = key_of(ws, task);
    let mut store = Store::open(&ws.path(".prova/cache")).expect("test setup");
    replace_row(&mut store, key, bytes, manifest);
}

/// Points the trusted entry of `key` in `store` at `bytes` with `manifest`, keeping the rest.
fn replace_row(store: &mut Store, key: Digest, bytes: &[u8], manifest: &OutputManifest) {
    let e = store.get_entry(TRUSTED, &key).expect("test setup").expect("the entry");
    let digest = store.put_blob_bytes(bytes).expect("test setup");
    store
        .put_entry(&NewEntry {
            namespace: TRUSTED.to_owned(),
            key,
            task: e.task,
            artifact: Some((digest, bytes.len() as u64)),
            log: e.log,
            manifest: rmp_encode(manifest),
            components: e.components,
            fingerprint: Some(manifest.fingerprint()),
            duration_ms: e.duration_ms,
            created_ms: e.created_ms,
        })
        .expect("filing the forged row");
}

/// `m` as the store keeps it: named-field MessagePack (a frame's payload).
fn rmp_encode(m: &OutputManifest) -> Vec<u8> {
    use prova_protocol::transport::frame::{HEADER_LEN, encode_frame};
    encode_frame(m).expect("test setup")[HEADER_LEN..].to_vec()
}

#[test]
fn a_forged_local_row_is_refused_and_writes_nothing() {
    let hook: &[u8] = b"#!/bin/sh\necho pwned\n";
    type Case =
        (&'static str, Vec<(&'static str, &'static [u8], u32)>, Vec<(&'static str, &'static str)>);
    let dir_case = {
        let mut m = archive(&[("libs/a/dist/out.txt", b"forged\n", 0o644)], &[]).1;
        m.entries.push(ManifestEntry::dir(".git/hooks/evil", 0o755));
        OutputManifest::new(m.entries)
    };
    let cases: Vec<Case> = vec![
        ("a hook", vec![("libs/a/dist/out.txt", b"forged\n", 0o644), (HOOK, hook, 0o755)], vec![]),
        (
            "another project's source",
            vec![("libs/a/dist/out.txt", b"forged\n", 0o644), (OTHER_SRC, b"pwned\n", 0o644)],
            vec![],
        ),
        ("the task's own source, alone", vec![("libs/a/src/index.ts", b"pwned\n", 0o644)], vec![]),
        (
            "a link out of the project",
            vec![("libs/a/dist/out.txt", b"forged\n", 0o644)],
            vec![("libs/a/dist/evil", "../../other/src")],
        ),
    ];
    let ws = two_projects();
    let run = || ws.prova(["run", "build", "--all", "--json"]).run();
    run().assert_code(0);
    let good = ws.read("libs/a/dist/out.txt");
    let mut all: Vec<(&str, Vec<u8>, OutputManifest)> = cases
        .iter()
        .map(|(case, files, links)| {
            let (bytes, m) = archive(files, links);
            (*case, bytes, m)
        })
        .collect();
    let dir_bytes = archive(&[("libs/a/dist/out.txt", b"forged\n", 0o644)], &[]).0;
    all.push(("a directory entry in .git", dir_bytes, dir_case));
    for (case, bytes, manifest) in all {
        forge_row(&ws, "a#build", &bytes, &manifest);
        fs::remove_dir_all(ws.path("libs/a/dist")).unwrap();
        let out = run();
        out.assert_code(0);
        assert_eq!(out.cache_of("a#build"), "saved", "{case}: not re-executed\n{out}");
        let notes = out.notices_of("a#build").join("\n");
        assert!(notes.starts_with("warn:"), "{case}: no warning\n{out}");
        assert!(!ws.exists(HOOK), "{case}: the hook was planted\n{out}");
        assert!(!ws.exists(".git/hooks/evil"), "{case}: .git was written\n{out}");
        assert_eq!(ws.read(OTHER_SRC), OTHER_BYTES, "{case}\n{out}");
        assert_eq!(ws.read("libs/a/src/index.ts"), "export const a = 1;\n", "{case}\n{out}");
        assert!(!ws.exists("libs/a/dist/evil"), "{case}\n{out}");
        assert_eq!(ws.read("libs/a/dist/out.txt"), good, "{case}: re-executed outputs\n{out}");
    }
}

// ----- tiers ----------------------------------------------------------------------------

fn det() -> String {
    task("det", "mkdir -p out && cat src/a.txt > out/det.txt && echo ran", &["out/det.txt"])
}

/// The local entries of `ws` per namespace, from `prova cache stats --json`.
fn local_entries(ws: &TempWorkspace, ns: &str) -> u64 {
    prova_tests::cache::cache_stats(ws, &[])["entries"][ns].as_u64().unwrap_or(0)
}

#[test]
fn a_pending_or_untrusted_farm_entry_is_never_filed_as_locally_trusted() {
    let farm = Cluster::builder().workers(1).coordinator_args(["--trust", "proven"]).start();
    let client = farm.client_certs("client", "dev");
    for (case, certs) in
        [("ci under --trust proven (pending)", farm.ci_certs()), ("a client", client)]
    {
        let ws = workspace(&det());
        let out = farm.run_as(&ws, &certs, ["det", "--all", "--json"]);
        out.assert_code(0);
        assert_eq!(out.cache_of("p#det"), "saved", "{case}\n{out}");
        assert_eq!(ws.read("p/out/det.txt"), "hello\n", "{case}: its own outputs came home");
        assert_eq!(local_entries(&ws, ""), 0, "{case}: filed as trusted locally\n{out}");

        fs::remove_dir_all(ws.path("p/out")).unwrap();
        let local = ws.prova(["run", "det", "--all", "--json"]).run();
        local.assert_code(0);
        assert_eq!(local.cache_of("p#det"), "saved", "{case}: served locally as trusted\n{local}");
        assert_eq!(ws.read("p/out/det.txt"), "hello\n");
    }
}

// ----- I/O errors are not corruption ----------------------------------------------------

/// The blobs in `ws`'s cache and in its quarantine.
fn blobs_and_quarantine(ws: &TempWorkspace) -> (usize, usize) {
    let count = |p: &Path| -> usize {
        let Ok(rd) = fs::read_dir(p) else { return 0 };
        rd.map(|e| {
            let e = e.expect("test setup");
            if e.file_type().expect("test setup").is_dir() { count_files(&e.path()) } else { 1 }
        })
        .sum()
    };
    (count(&ws.path(".prova/cache/blobs")), count(&ws.path(".prova/cache/quarantine")))
}

fn count_files(p: &Path) -> usize {
    fs::read_dir(p)
        .map_or(0, |rd| rd.filter(|e| e.as_ref().is_ok_and(|e| e.path().is_file())).count())
}

/// A task writing `size` bytes of incompressible data.
fn big(size: usize) -> String {
    task(
        "big",
        &format!("mkdir -p out && head -c {size} /dev/urandom > out/big.bin && echo wrote"),
        &["out/big.bin"],
    )
}

/// A tmpfs mounted on a fresh directory, unmounted on drop; `None` (with the reason) when
/// this process cannot mount.
struct Tmpfs(tempfile::TempDir);

impl Tmpfs {
    fn mount(size: &str) -> Result<Self, String> {
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let st = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .stderr(Stdio::piped())
            .output()
            .map_err(|e| format!("running mount: {e}"))?;
        if !st.status.success() {
            return Err(format!("mount failed: {}", String::from_utf8_lossy(&st.stderr)));
        }
        Ok(Self(dir))
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(self.0.path()).status();
    }
}

#[test]
fn a_full_file_system_during_a_restore_keeps_the_blob() {
    let fs_ = match Tmpfs::mount("6m") {
        Ok(t) => t,
        Err(why) => {
            eprintln!(
                "SKIPPED: cannot mount a small tmpfs here ({why}); the RLIMIT_FSIZE test covers the class"
            );
            return;
        }
    };
    // The workspace (and the restore's staging, `.prova/tmp`) on the small file system; the
    // cache elsewhere (a shared `--cache-dir`), so only the destination is full.
    let ws_dir = fs_.0.path().join("ws");
    let cache = tempfile::tempdir().unwrap();
    fs::create_dir_all(ws_dir.join("p/src")).unwrap();
    fs::write(ws_dir.join("prova.toml"), "[workspace]\nprojects = [\"p\"]\n").unwrap();
    fs::write(ws_dir.join("p/src/a.txt"), "hello\n").unwrap();
    fs::write(ws_dir.join("p/prova.toml"), big(2 << 20)).unwrap();
    let cache_arg = cache.path().to_string_lossy().into_owned();
    let prova = |args: &[&str]| {
        let mut all: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
        all.extend(["--cache-dir".to_owned(), cache_arg.clone()]);
        prova_tests::ProvaCmd::new(&ws_dir, all).run()
    };

    prova(&["run", "big", "--all", "--json"]).assert_code(0);
    let bytes = fs::read(ws_dir.join("p/out/big.bin")).unwrap();
    fs::remove_dir_all(ws_dir.join("p/out")).unwrap();
    let blobs_before = count_tree(&cache.path().join("blobs"));
    assert!(blobs_before >= 1);
    // Fill the file system: the restore's staging copy cannot be written.
    fill(&fs_.0.path().join("filler"));
    let out = prova(&["run", "big", "--all", "--json"]);
    let notes = out.notices_of("p#big").join("\n");
    assert!(
        notes.contains("No space left on device"),
        "the warning names the real error\n{notes}\n{out}"
    );
    assert!(!notes.contains("quarantined"), "an I/O error is not corruption\n{out}");
    assert_eq!(count_tree(&cache.path().join("blobs")), blobs_before, "blob kept\n{out}");
    assert_eq!(count_tree(&cache.path().join("quarantine")), 0, "{out}");

    // With space again, the same entry restores.
    fs::remove_file(fs_.0.path().join("filler")).unwrap();
    let _ = fs::remove_dir_all(ws_dir.join("p/out"));
    let out = prova(&["run", "big", "--all", "--json"]);
    out.assert_code(0);
    assert_eq!(out.cache_of("p#big"), "hit", "{out}");
    assert!(fs::read(ws_dir.join("p/out/big.bin")).unwrap() == bytes, "restored bytes");
}

fn count_tree(p: &Path) -> usize {
    let Ok(rd) = fs::read_dir(p) else { return 0 };
    rd.map(|e| {
        let e = e.expect("test setup");
        if e.file_type().expect("test setup").is_dir() { count_tree(&e.path()) } else { 1 }
    })
    .sum()
}

/// Writes `path` until the file system is full.
fn fill(path: &Path) {
    use std::io::Write as _;
    let mut f = fs::File::create(path).expect("test setup");
    let chunk = vec![7u8; 64 * 1024];
    loop {
        match f.write(&chunk) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => break,
            Err(e) => panic!("filling: {e}"),
        }
    }
    // Whatever is left below one chunk.
    while f.write(&[7u8]).is_ok_and(|n| n == 1) {}
}

#[test]
fn a_file_size_limit_during_a_restore_keeps_the_blob() {
    let ws = workspace(&big(4 << 20));
    ws.prova(["run", "big", "--all", "--json"]).run().assert_code(0);
    let bytes = fs::read(ws.path("p/out/big.bin")).unwrap();
    fs::remove_dir_all(ws.path("p/out")).unwrap();
    let blobs_before = blobs_and_quarantine(&ws);
    assert_eq!(blobs_before.1, 0);

    // prova under RLIMIT_FSIZE = 1 MiB with SIGXFSZ ignored: writing the 4 MiB staged file
    // fails with EFBIG, a real I/O error of the destination.
    let mut cmd = Command::new(prova_bin());
    cmd.arg("-C").arg(ws.root()).args(["run", "big", "--all", "--json"]);
    cmd.env_remove("PROVA_LOG").env_remove("RUST_LOG").stdin(Stdio::null());
    // SAFETY: only async-signal-safe calls (signal, setrlimit) between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
            let lim = libc::rlimit { rlim_cur: 1 << 20, rlim_max: 1 << 20 };
            if libc::setrlimit(libc::RLIMIT_FSIZE, &lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let got = cmd.output().expect("running prova");
    let stdout = String::from_utf8_lossy(&got.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&got.stderr).into_owned();
    let warned = stdout.lines().any(|l| l.contains("\"notice\"") && l.contains("File too large"));
    assert!(warned, "the warning names the real error\nstdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(!stdout.contains("quarantined"), "an I/O error is not corruption\n{stdout}");
    assert_eq!(blobs_and_quarantine(&ws), blobs_before, "the blob is kept\n{stdout}\n{stderr}");

    let _ = fs::remove_dir_all(ws.path("p/out"));
    let out = ws.prova(["run", "big", "--all", "--json"]).run();
    out.assert_code(0);
    assert_eq!(out.cache_of("p#big"), "hit", "{out}");
    assert!(fs::read(ws.path("p/out/big.bin")).unwrap() == bytes, "restored bytes");
}

#[test]
fn a_forged_row_in_the_farm_index_is_refused_and_the_task_runs_again() {
    let farm = Cluster::builder().workers(1).start();
    let first = two_projects();
    farm.run(&first, ["build", "--all", "--json"]).assert_code(0);
    // The farm's entry of a#build now points at a planted hook (the coordinator's own store,
    // written as another process sharing it would).
    let (bytes, manifest) = archive(
        &[("libs/a/dist/out.txt", b"forged\n", 0o644), (HOOK, b"#!/bin/sh\necho pwned\n", 0o755)],
        &[],
    );
    {
        let mut store = Store::open(&farm.cache_dir()).expect("the farm's store");
        let conn = rusqlite::Connection::open(farm.cache_dir().join("index.sqlite"))
            .expect("the farm's index");
        let key: Vec<u8> = conn
            .query_row("SELECT key FROM entries WHERE task = 'a#build'", [], |r| r.get(0))
            .expect("the farm entry of a#build");
        let key = Digest(key.try_into().expect("a 32-byte key"));
        replace_row(&mut store, key, &bytes, &manifest);
    }
    let fresh = two_projects();
    let out = farm.run(&fresh, ["build", "--all", "--json"]);
    out.assert_code(0);
    assert!(!fresh.exists(HOOK), "the hook was planted\n{out}");
    assert_eq!(out.cache_of("a#build"), "saved", "the refused hit ran again\n{out}");
    assert_eq!(out.cache_of("other#build"), "hit", "{out}");
    let notes = out.notices_of("a#build").join("\n");
    assert!(notes.contains("warn") && notes.contains(HOOK), "no warning names the path\n{out}");
    assert_eq!(fresh.read("libs/a/dist/out.txt"), first.read("libs/a/dist/out.txt"));
}

#[test]
fn a_forged_manifest_on_a_determinism_re_run_is_refused_named_and_recorded_nowhere() {
    // The liar answers first runs with outputs inside the declared ones (accepted: a worker
    // is trusted to run the task) and the `--verify` re-run with a planted hook. The re-run's
    // report is checked like a first run's: the proof fails naming the worker and the path,
    // nothing of it is written, and the ledger records no re-run.
    let hook: &[u8] = b"#!/bin/sh\necho pwned\n";
    let first = Forgery::new().file("{project}/dist/out.txt", b"first\n", 0o644);
    let rerun =
        Forgery::new().file("{project}/dist/out.txt", b"first\n", 0o644).file(HOOK, hook, 0o755);
    let farm = Cluster::builder().workers(0).start();
    let liar = LyingWorker::join(&farm, "liar", first.on_rerun(rerun));
    let ws = two_projects();
    let out = farm.run(&ws, ["build", "--all", "--verify", "--json"]);
    out.assert_code(1);
    for t in ["a#build", "other#build"] {
        let v = prova_tests::verify::only_verdict(&out, t);
        assert_eq!(prova_tests::verify::name(&v), "rerun-failed", "{t}\n{out}");
        let reason = v["reason"].as_str().unwrap_or_default();
        assert!(reason.contains("liar") && reason.contains(HOOK), "{t}: {reason}\n{out}");
    }
    assert!(!ws.exists(HOOK), "the re-run's hook was planted\n{out}");
    assert_eq!(ws.read(OTHER_SRC), OTHER_BYTES);
    // Recorded, the re-run's fingerprint (with the hook) would disagree with the first's.
    let (h, report) = farm.hermeticity();
    h.assert_code(0);
    assert_eq!(report["keys"], serde_json::json!([]), "a refused re-run was recorded: {h}");
    drop(liar);
}
