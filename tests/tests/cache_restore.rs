//! Restores from the local cache (brief §6): a hit restores byte-identical outputs with their
//! modes and symlinks and replays the log; outputs that are already current are not
//! rewritten; a corrupt blob is a miss, quarantined and repaired; a hostile archive stored
//! under its own (correct) digest writes nothing outside the project and is a miss.

use std::fs;
use std::io::Write as _;
use std::os::unix::fs::PermissionsExt as _;

use prova_protocol::Digest;
use prova_tests::cache::{Node, inodes, snapshot};
use prova_tests::{Output, TempWorkspace};
use rusqlite::{Connection, params};

/// Each `build` says so, counts its executions in `../runs.log` (not an input), and writes a
/// 0644 file, a 0755 script, binary bytes in a subdirectory, and a relative symlink.
const CONFIG: &str = r#"[workspace]
projects = ["lib", "app"]

[tasks.build]
command = '''
echo "building $(basename "$PWD")"
echo "$(basename "$PWD")" >> ../runs.log
mkdir -p dist/sub
cp src/main.txt dist/data.txt
chmod 644 dist/data.txt
printf '#!/bin/sh\necho tool\n' > dist/tool
chmod 755 dist/tool
printf '\000\001\377 binary' > dist/sub/blob.bin
ln -sf data.txt dist/link
'''
deps = ["^build"]
inputs = ["src/**"]
outputs = ["dist/**"]
"#;

const PROJECTS: [&str; 2] = ["lib", "app"];

fn ws_at(prefix: &str) -> TempWorkspace {
    TempWorkspace::new()
        .file(&format!("{prefix}prova.toml"), CONFIG)
        .file(&format!("{prefix}app/prova.toml"), "[project]\ndeps = [\"lib\"]\n")
        .file(&format!("{prefix}app/src/main.txt"), "the app's source\n")
        .file(&format!("{prefix}lib/src/main.txt"), "the library's source\n")
}

fn ws() -> TempWorkspace {
    ws_at("")
}

fn run(ws: &TempWorkspace) -> Output {
    let out = ws.prova(["run", "build", "--all", "--json"]).run();
    out.assert_code(0);
    out
}

fn runs(ws: &TempWorkspace, root: &str) -> usize {
    fs::read_to_string(ws.path(&format!("{root}runs.log"))).map_or(0, |s| s.lines().count())
}

#[test]
fn a_hit_restores_byte_identical_outputs_with_modes_and_links_and_replays_the_log() {
    let ws = ws();
    let first = run(&ws);
    for p in PROJECTS {
        assert_eq!(first.cache_of(&format!("{p}#build")), "saved", "{first}");
    }
    let before: Vec<_> = PROJECTS.map(|p| snapshot(&ws, &format!("{p}/dist"))).into();
    let app = &before[1];
    assert_eq!(
        app["app/dist/data.txt"],
        Node::File { mode: 0o644, bytes: b"the app's source\n".to_vec() }
    );
    assert!(matches!(app["app/dist/tool"], Node::File { mode: 0o755, .. }), "{app:?}");
    assert_eq!(app["app/dist/link"], Node::Symlink("data.txt".into()));
    assert!(
        matches!(&app["app/dist/sub/blob.bin"], Node::File { bytes, .. } if bytes.starts_with(&[0, 1, 0xff]))
    );

    for p in PROJECTS {
        fs::remove_dir_all(ws.path(&format!("{p}/dist"))).unwrap();
    }
    let second = run(&ws);
    for (i, p) in PROJECTS.iter().enumerate() {
        let task = format!("{p}#build");
        assert_eq!(second.cache_of(&task), "hit", "{second}");
        assert_eq!(second.report(&task)["attempts"], 0, "{second}");
        assert_eq!(snapshot(&ws, &format!("{p}/dist")), before[i], "{p}'s outputs differ");
        // The log is replayed.
        assert!(second.output_of(&task).contains(&format!("building {p}\n")), "{second}");
    }
    second.assert_stdout_contains("building app");
    assert_eq!(runs(&ws, ""), 2, "a hit does not execute");

    // And in text form the replayed line carries the task's prefix, after the hit's marker.
    for p in PROJECTS {
        fs::remove_dir_all(ws.path(&format!("{p}/dist"))).unwrap();
    }
    let text = ws.prova(["run", "build", "--all"]).run();
    text.assert_code(0);
    assert_eq!(
        text.task_lines("app#build"),
        ["cache hit (local), replaying logs", "building app"],
        "{text}"
    );
    assert_eq!(runs(&ws, ""), 2);
}

#[test]
fn outputs_already_current_are_not_rewritten_and_only_a_changed_one_is_restored() {
    let ws = ws();
    run(&ws);
    let dists = PROJECTS.map(|p| format!("{p}/dist"));
    let ino = |ws: &TempWorkspace| dists.iter().flat_map(|d| inodes(ws, d)).collect::<Vec<_>>();
    let snap = |ws: &TempWorkspace| dists.iter().map(|d| snapshot(ws, d)).collect::<Vec<_>>();
    let (inodes_1, files_1) = (ino(&ws), snap(&ws));
    let mtime_1 = fs::metadata(ws.path("app/dist/tool")).unwrap().modified().unwrap();

    let second = run(&ws);
    assert_eq!(second.cache_of("app#build"), "hit", "{second}");
    assert_eq!(ino(&ws), inodes_1, "current outputs were rewritten");
    assert_eq!(snap(&ws), files_1);
    assert_eq!(fs::metadata(ws.path("app/dist/tool")).unwrap().modified().unwrap(), mtime_1);

    // One output edited (same inode, new bytes): only that one is restored.
    let tampered_ino = inodes(&ws, "app/dist/data.txt")["app/dist/data.txt"];
    ws.write("app/dist/data.txt", "tampered with\n");
    assert_eq!(inodes(&ws, "app/dist/data.txt")["app/dist/data.txt"], tampered_ino);
    // And a stray file under the outputs: it is not part of the entry.
    ws.write("app/dist/stray.txt", "not an output of the entry\n");
    let third = run(&ws);
    assert_eq!(third.cache_of("app#build"), "hit", "{third}");
    assert_eq!(third.cache_of("lib#build"), "hit", "{third}");
    assert_eq!(snap(&ws), files_1, "the edited output was restored, the stray one removed");
    let inodes_3 = ino(&ws);
    for (path, ino) in &inodes_1 {
        let now = inodes_3.iter().find(|(p, _)| p == path).map(|(_, i)| *i);
        if path == "app/dist/data.txt" {
            assert_ne!(now, Some(tampered_ino), "the edited output was replaced");
        } else {
            assert_eq!(now, Some(*ino), "{path} was rewritten although it was current");
        }
    }
    assert_eq!(runs(&ws, ""), 2, "hits only after the first run");
}

/// The index of `ws`'s cache (`<root>.prova/cache/index.sqlite`).
fn index(ws: &TempWorkspace, root: &str) -> Connection {
    let conn = Connection::open(ws.path(&format!("{root}.prova/cache/index.sqlite")))
        .expect("opening the index");
    conn.busy_timeout(std::time::Duration::from_secs(10)).expect("setting a busy timeout");
    conn
}

/// The artifact digest of `task`'s entry, hex.
fn artifact_of(ws: &TempWorkspace, root: &str, task: &str) -> String {
    index(ws, root)
        .query_row("SELECT lower(hex(artifact)) FROM entries WHERE task = ?1", [task], |r| r.get(0))
        .unwrap_or_else(|e| panic!("no entry with an artifact for {task}: {e}"))
}

fn blob_rel(root: &str, hex: &str) -> String {
    format!("{root}.prova/cache/blobs/{}/{hex}", &hex[..2])
}

/// Files in the cache's quarantine whose names start with `hex`.
fn quarantined(ws: &TempWorkspace, root: &str, hex: &str) -> usize {
    fs::read_dir(ws.path(&format!("{root}.prova/cache/quarantine")))
        .expect("listing the quarantine")
        .filter(|e| {
            e.as_ref().expect("a quarantine entry").file_name().to_string_lossy().starts_with(hex)
        })
        .count()
}

#[test]
fn a_corrupt_blob_is_a_miss_is_quarantined_and_the_rerun_repairs_the_entry() {
    let ws = ws();
    run(&ws);
    let files = snapshot(&ws, "app/dist");
    let hex = artifact_of(&ws, "", "app#build");
    let blob = ws.path(&blob_rel("", &hex));
    let mut bytes = fs::read(&blob).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x20;
    fs::write(&blob, &bytes).unwrap();
    fs::remove_dir_all(ws.path("app/dist")).unwrap();

    let out = run(&ws);
    assert_eq!(out.cache_of("lib#build"), "hit", "{out}");
    assert_eq!(out.cache_of("app#build"), "saved", "re-executed and saved again\n{out}");
    assert_eq!(out.report("app#build")["attempts"], 1, "{out}");
    let notices = out.notices_of("app#build");
    assert!(
        notices.iter().any(|n| n.starts_with("warn:") && n.contains("corrupt")),
        "no warning about the corrupt blob: {notices:?}\n{out}"
    );
    assert_eq!(quarantined(&ws, "", &hex), 1, "the bad blob is kept in quarantine/");
    assert_eq!(snapshot(&ws, "app/dist"), files, "the re-run produced the outputs");
    assert_eq!(runs(&ws, ""), 3);

    // The entry was repaired: its blob is whole again and the next run is a hit.
    let repaired = artifact_of(&ws, "", "app#build");
    let blob = ws.path(&blob_rel("", &repaired));
    assert_eq!(Digest::of(&fs::read(&blob).unwrap()).to_hex(), repaired);
    fs::remove_dir_all(ws.path("app/dist")).unwrap();
    let out = run(&ws);
    assert_eq!(out.cache_of("app#build"), "hit", "{out}");
    assert_eq!(snapshot(&ws, "app/dist"), files);
    assert_eq!(runs(&ws, ""), 3);
}

/// A tar+zstd archive written entry by entry with raw headers, so it can hold names the
/// `tar` crate's own setters refuse (`..`, absolute paths).
#[derive(Default)]
struct Forged {
    tar: Vec<u8>,
}

impl Forged {
    fn entry(mut self, name: &str, kind: tar::EntryType, link: &str, data: &[u8]) -> Self {
        let mut h = tar::Header::new_gnu();
        h.as_old_mut().name[..name.len()].copy_from_slice(name.as_bytes());
        h.as_old_mut().linkname[..link.len()].copy_from_slice(link.as_bytes());
        h.set_entry_type(kind);
        h.set_mode(0o644);
        h.set_size(data.len() as u64);
        h.set_cksum();
        self.tar.extend_from_slice(h.as_bytes());
        self.tar.extend_from_slice(data);
        self.tar.resize(self.tar.len().next_multiple_of(512), 0);
        self
    }

    fn file(self, name: &str, data: &[u8]) -> Self {
        self.entry(name, tar::EntryType::Regular, "", data)
    }

    fn symlink(self, name: &str, target: &str) -> Self {
        self.entry(name, tar::EntryType::Symlink, target, b"")
    }

    fn zst(mut self) -> Vec<u8> {
        self.tar.extend([0u8; 1024]);
        let mut enc = zstd::Encoder::new(Vec::new(), 3).expect("a zstd encoder");
        enc.write_all(&self.tar).expect("compressing");
        enc.finish().expect("compressing")
    }
}

#[test]
fn a_hostile_artifact_under_its_own_digest_writes_nothing_outside_the_project() {
    // The workspace is `inner/` of the temporary directory, so paths that climb out of the
    // workspace still land somewhere this test owns and can look at.
    let ws = ws_at("inner/");
    let root = "inner/";
    let cmd = || ws.prova(["run", "build", "--all", "--json"]).cwd("inner");
    cmd().run().assert_code(0);
    let files = snapshot(&ws, "inner/app/dist");
    let outside = ws.path("abs-escape");
    let cases: Vec<(&str, Vec<u8>)> = vec![
        (
            "a parent path",
            Forged::default().file("app/dist/data.txt", b"x").file("../escape", b"pwned").zst(),
        ),
        ("a path through ..", Forged::default().file("app/../../escape", b"pwned").zst()),
        (
            "another project",
            Forged::default().file("lib/dist/escape", b"pwned").file("../escape", b"x").zst(),
        ),
        ("an absolute path", Forged::default().file(outside.to_str().unwrap(), b"pwned").zst()),
        (
            "a link out, then through it",
            Forged::default()
                .symlink("app/dist/out", "../../../escape-dir")
                .file("app/dist/out/escape", b"pwned")
                .zst(),
        ),
    ];
    fs::create_dir(ws.path("escape-dir")).unwrap();

    for (n, (case, archive)) in cases.into_iter().enumerate() {
        let digest = Digest::of(&archive);
        let hex = digest.to_hex();
        let blob = ws.path(&blob_rel(root, &hex));
        fs::create_dir_all(blob.parent().unwrap()).unwrap();
        fs::write(&blob, &archive).unwrap();
        let changed = index(&ws, root)
            .execute(
                "UPDATE entries SET artifact = ?1, artifact_size = ?2 WHERE task = 'app#build'",
                params![digest.0.to_vec(), archive.len() as i64],
            )
            .unwrap();
        assert_eq!(changed, 1);
        fs::remove_dir_all(ws.path("inner/app/dist")).unwrap();

        let out = cmd().run();
        out.assert_code(0);
        assert_eq!(out.cache_of("app#build"), "saved", "{case}: re-executed\n{out}");
        assert_eq!(out.report("app#build")["attempts"], 1, "{case}\n{out}");
        assert_eq!(snapshot(&ws, "inner/app/dist"), files, "{case}");
        assert_eq!(runs(&ws, root), 2 + n + 1, "{case}");
        // Nothing was written anywhere outside the project.
        let mut top: Vec<String> = fs::read_dir(ws.root())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        top.sort();
        assert_eq!(top, ["escape-dir", "inner"], "{case}: something escaped\n{out}");
        assert!(fs::read_dir(ws.path("escape-dir")).unwrap().next().is_none(), "{case}");
        for canary in ["inner/escape", "inner/.prova/tmp/escape", "inner/lib/dist/escape"] {
            assert!(!ws.path(canary).exists(), "{case}: {canary} was written\n{out}");
        }
        assert!(!blob.exists(), "{case}: the hostile blob stays in blobs/");
        assert_eq!(quarantined(&ws, root, &hex), 1, "{case}");
        // The staging area holds nothing left over.
        let staging = ws.path("inner/.prova/tmp");
        let left: Vec<_> = fs::read_dir(&staging).map(|d| d.collect()).unwrap_or_default();
        assert!(left.is_empty(), "{case}: staging left behind: {left:?}");
    }
    // The last re-run repaired the entry.
    fs::remove_dir_all(ws.path("inner/app/dist")).unwrap();
    let out = cmd().run();
    assert_eq!(out.cache_of("app#build"), "hit", "{out}");
    assert_eq!(snapshot(&ws, "inner/app/dist"), files);
    let mode = fs::metadata(ws.path("inner/app/dist/tool")).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o755);
}

#[test]
fn a_symlink_in_the_destination_is_never_written_through_nor_an_output_dirs_removed() {
    let ws = ws();
    run(&ws);
    // The output directory is now a link to a directory outside the project, and one output
    // file (of lib) a link to a file outside it.
    fs::remove_dir_all(ws.path("app/dist")).unwrap();
    fs::create_dir(ws.path("outside-dir")).unwrap();
    std::os::unix::fs::symlink("../outside-dir", ws.path("app/dist")).unwrap();
    ws.write("outside-file", "must stay as it is\n");
    fs::remove_file(ws.path("lib/dist/data.txt")).unwrap();
    std::os::unix::fs::symlink("../../outside-file", ws.path("lib/dist/data.txt")).unwrap();

    let out = ws.prova(["run", "build", "--all", "--json"]).run();
    // The output directory's link is not the outputs' (`dist/**` selects what is in it): a
    // hit neither writes through it nor removes it (it may be the user's, committed), and
    // the execution that follows refuses to clean through it.
    out.assert_code(1);
    assert_ne!(out.cache_of("app#build"), "hit", "{out}");
    assert!(format!("{out}").contains("would replace `app/dist` (a symlink)"), "{out}");
    assert!(fs::symlink_metadata(ws.path("app/dist")).unwrap().is_symlink(), "the link removed");
    // A link where an output file goes is replaced, never written through.
    assert_eq!(out.cache_of("lib#build"), "hit", "{out}");
    assert!(fs::read_dir(ws.path("outside-dir")).unwrap().next().is_none(), "written through");
    assert_eq!(ws.read("outside-file"), "must stay as it is\n", "written through");
    assert_eq!(ws.read("lib/dist/data.txt"), "the library's source\n");
    assert!(fs::symlink_metadata(ws.path("lib/dist/data.txt")).unwrap().is_file());
    assert_eq!(runs(&ws, ""), 2);
}
