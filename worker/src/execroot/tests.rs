//! Exec roots on a real file system: blobs hardlinked, workspace files copied, symlinks,
//! upstream artifacts, output directories, refusals, removal.

use std::os::unix::fs::{FileTypeExt, MetadataExt};

use prova_protocol::artifact::{collect_outputs, pack};
use prova_protocol::globs::PathGlobs;

use super::*;

struct Fixture {
    tmp: tempfile::TempDir,
    /// Stands for the workspace on this machine.
    ws: PathBuf,
    /// Where exec roots go.
    roots: PathBuf,
    blobs: BlobCache,
}

fn fixture() -> Fixture {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path().join("ws");
    let roots = tmp.path().join("roots");
    fs::create_dir_all(&ws).unwrap();
    let blobs = BlobCache::open(&tmp.path().join("blobs"), 1 << 30).unwrap();
    Fixture { ws, roots, blobs, tmp }
}

impl Fixture {
    fn blob(&self, bytes: &[u8]) -> Digest {
        let d = Digest::of(bytes);
        self.blobs.insert_bytes(bytes, &d).unwrap();
        d
    }

    fn ws_file(&self, rel: &str, bytes: &[u8]) -> PathBuf {
        let p = self.ws.join(rel);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(&p, bytes).unwrap();
        p
    }

    fn create(&self, spec: &ExecRootSpec) -> Result<ExecRoot, ExecRootError> {
        ExecRoot::create(&self.roots, "app#build", spec, &self.blobs)
    }

    /// Packs `files` (path, content) and `links` (path, target) as an upstream artifact.
    fn artifact(&self, name: &str, files: &[(&str, &[u8])], links: &[(&str, &str)]) -> PathBuf {
        let up = self.tmp.path().join(format!("up-{name}"));
        let mut outputs = Vec::new();
        for (rel, bytes) in files {
            let p = up.join(rel);
            fs::create_dir_all(p.parent().unwrap()).unwrap();
            fs::write(&p, bytes).unwrap();
            outputs.push(format!("//{rel}"));
        }
        for (rel, target) in links {
            let p = up.join(rel);
            fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::os::unix::fs::symlink(target, &p).unwrap();
            outputs.push(format!("//{rel}"));
        }
        let globs = PathGlobs::new("", &outputs).unwrap();
        let manifest = collect_outputs(&up, &globs).unwrap();
        let out = self.tmp.path().join(format!("{name}.tar.zst"));
        pack(&up, &manifest, File::create(&out).unwrap(), 3).unwrap();
        out
    }
}

fn blob_input(path: &str, d: Digest, exec: bool) -> RootInput {
    RootInput { path: path.to_owned(), source: RootSource::Blob(d), exec, symlink: None }
}

fn file_input(path: &str, src: PathBuf, exec: bool) -> RootInput {
    RootInput { path: path.to_owned(), source: RootSource::File(src), exec, symlink: None }
}

fn link_input(path: &str, target: &str) -> RootInput {
    RootInput {
        path: path.to_owned(),
        source: RootSource::File(PathBuf::new()),
        exec: false,
        symlink: Some(target.to_owned()),
    }
}

fn spec(inputs: Vec<RootInput>, outputs: &[&str]) -> ExecRootSpec {
    ExecRootSpec {
        inputs,
        artifacts: Vec::new(),
        project_dir: "app".to_owned(),
        outputs: outputs.iter().map(|s| (*s).to_owned()).collect(),
        sandboxed: true,
        ..ExecRootSpec::default()
    }
}

fn meta(p: &Path) -> fs::Metadata {
    fs::symlink_metadata(p).unwrap()
}

#[test]
fn blob_inputs_are_hardlinks_to_the_cache_and_exec_ones_to_the_twin() {
    let f = fixture();
    let src = f.blob(b"export const a = 1;\n");
    let tool = f.blob(b"#!/bin/sh\necho hi\n");
    let root = f
        .create(&spec(
            vec![blob_input("app/src/a.ts", src, false), blob_input("app/bin/tool", tool, true)],
            &["dist/**"],
        ))
        .unwrap();
    let a = meta(&root.path().join("app/src/a.ts"));
    let cached = meta(&f.blobs.path(&src, false).unwrap());
    assert_eq!((a.dev(), a.ino()), (cached.dev(), cached.ino()), "same inode as the blob");
    assert_eq!(a.mode() & 0o777, 0o444);
    assert_eq!(a.mtime(), FIXED_MTIME_SECS);
    let t = meta(&root.path().join("app/bin/tool"));
    assert_eq!(t.ino(), meta(&f.blobs.path(&tool, true).unwrap()).ino(), "the executable twin");
    assert_eq!(t.mode() & 0o777, 0o555);
    assert_eq!(root.cwd(), root.path().join("app"));
    assert!(root.cwd().is_dir());
}

#[test]
fn without_a_sandbox_every_blob_input_is_a_copy_the_cache_cannot_be_written_through() {
    let f = fixture();
    let src = f.blob(b"export const a = 1;\n");
    let tool = f.blob(b"#!/bin/sh\necho hi\n");
    let s = ExecRootSpec {
        sandboxed: false,
        ..spec(
            vec![blob_input("app/src/a.ts", src, false), blob_input("app/bin/tool", tool, true)],
            &["dist/**"],
        )
    };
    let root = f.create(&s).unwrap();
    for (rel, d, exec) in [("app/src/a.ts", src, false), ("app/bin/tool", tool, true)] {
        let placed = root.path().join(rel);
        let cached = f.blobs.path(&d, exec).unwrap();
        assert_ne!(meta(&placed).ino(), meta(&cached).ino(), "{rel}: not the blob's inode");
        assert_eq!(meta(&placed).mode() & 0o111 != 0, exec, "{rel}");
        // What a formatter run as root (or after a `chmod`) does to its input in place.
        let mut perms = meta(&placed).permissions();
        perms.set_mode(0o644);
        fs::set_permissions(&placed, perms).unwrap();
        fs::write(&placed, b"rewritten in place").unwrap();
        assert_eq!(Digest::of_file(&cached).unwrap(), d, "{rel}: the cached blob is as it was");
    }
}

#[test]
fn workspace_files_are_copied_with_the_requested_exec_bit() {
    let f = fixture();
    let src = f.ws_file("app/package.json", b"{}");
    let script = f.ws_file("app/run.sh", b"#!/bin/sh\n");
    let root = f
        .create(&spec(
            vec![
                file_input("app/package.json", src.clone(), false),
                file_input("app/run.sh", script, true),
            ],
            &[],
        ))
        .unwrap();
    let copy = root.path().join("app/package.json");
    assert_eq!(fs::read(&copy).unwrap(), b"{}");
    assert_ne!(meta(&copy).ino(), meta(&src).ino(), "a copy, not the workspace file");
    assert_eq!(meta(&copy).mode() & 0o777, 0o644);
    assert_eq!(meta(&copy).mtime(), FIXED_MTIME_SECS);
    assert_eq!(meta(&root.path().join("app/run.sh")).mode() & 0o777, 0o755);
}

#[test]
fn symlink_inputs_are_links_and_escaping_ones_are_refused() {
    let f = fixture();
    let d = f.blob(b"real");
    let root = f
        .create(&spec(
            vec![
                blob_input("app/real.txt", d, false),
                link_input("app/alias.txt", "real.txt"),
                link_input("app/up", ".."),
                link_input("shared", "app"),
            ],
            &[],
        ))
        .unwrap();
    let alias = root.path().join("app/alias.txt");
    assert_eq!(fs::read_link(&alias).unwrap(), Path::new("real.txt"));
    assert_eq!(fs::read(&alias).unwrap(), b"real");
    assert_eq!(fs::read(root.path().join("shared/real.txt")).unwrap(), b"real");
    drop(root);

    for (path, target) in [
        ("app/abs", "/etc/passwd"),
        ("app/out", "../../x"),
        ("app/empty", ""),
        // Lexically `app/x`, really `../x`: through the `up -> ..` link.
        ("app/sneaky", "up/../x"),
    ] {
        let err = f
            .create(&spec(vec![link_input("app/up", ".."), link_input(path, target)], &[]))
            .unwrap_err();
        assert!(matches!(err, ExecRootError::LinkEscapes { .. }), "{path} -> {target}: {err}");
    }
    // Nothing may be written through a link: a file input below a symlink input.
    let err = f
        .create(&spec(vec![link_input("lib", "app"), blob_input("lib/x", d, false)], &[]))
        .unwrap_err();
    assert!(matches!(err, ExecRootError::Conflict { .. }), "{err}");
    assert_eq!(fs::read_dir(&f.roots).unwrap().count(), 0, "failed roots are removed");
}

#[test]
fn upstream_artifacts_are_unpacked_at_their_paths() {
    let f = fixture();
    let art = f.artifact(
        "lib",
        &[("lib/dist/index.js", b"module.exports = 1;\n"), ("gen/schema.json", b"{}")],
        &[("lib/dist/main.js", "index.js")],
    );
    let mut s = spec(vec![], &["dist/**"]);
    s.artifacts = vec![art];
    let root = f.create(&s).unwrap();
    let index = root.path().join("lib/dist/index.js");
    assert_eq!(fs::read(&index).unwrap(), b"module.exports = 1;\n");
    assert_eq!(meta(&index).mtime(), FIXED_MTIME_SECS);
    assert_eq!(fs::read(root.path().join("gen/schema.json")).unwrap(), b"{}");
    assert_eq!(fs::read_link(root.path().join("lib/dist/main.js")).unwrap(), Path::new("index.js"));
    // The staging directory beside the root is gone.
    let names: Vec<_> = fs::read_dir(&f.roots).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(names.len(), 1, "{names:?}");
}

#[test]
fn an_input_and_an_upstream_output_must_agree() {
    let f = fixture();
    let art = f.artifact("gen", &[("gen/a.txt", b"from upstream")], &[]);
    let same = f.blob(b"from upstream");
    let other = f.blob(b"stale copy");
    let mut s = spec(vec![blob_input("gen/a.txt", same, false)], &[]);
    s.artifacts = vec![art.clone()];
    let root = f.create(&s).unwrap();
    assert_eq!(fs::read(root.path().join("gen/a.txt")).unwrap(), b"from upstream");
    drop(root);
    s.inputs = vec![blob_input("gen/a.txt", other, false)];
    assert!(matches!(f.create(&s), Err(ExecRootError::Conflict { .. })));
}

#[test]
fn output_dirs_are_created_and_inputs_under_them_are_copies() {
    let f = fixture();
    let cached = f.blob(b"previous");
    let src = f.blob(b"source");
    let root = f
        .create(&spec(
            vec![
                blob_input("app/dist/keep.txt", cached, false),
                blob_input("app/src/a.ts", src, false),
                blob_input("app/package.json", src, false),
            ],
            &["dist/**", "//gen/types/*.d.ts", "report.txt", "!dist/**/*.map"],
        ))
        .unwrap();
    let p = root.path();
    // The directories holding the outputs are writable: `app` (holding `dist` and the
    // literal `report.txt`) and `gen` (holding `types`), so each output can be removed and
    // made again; what else they hold is bound read-only again.
    assert_eq!(root.writable_dirs(), vec![p.join("app"), p.join("gen")]);
    for w in root.writable_dirs() {
        assert!(meta(&w).is_dir(), "{}", w.display());
    }
    assert!(meta(&p.join("gen/types")).is_dir() && meta(&p.join("app/dist")).is_dir());
    assert_eq!(root.readonly_entries(), vec![p.join("app/package.json"), p.join("app/src")]);
    // Under an output: a task could write through a hardlink into the cache, so a copy; a
    // source beside the outputs is read-only in the sandbox, so a link.
    let keep = meta(&p.join("app/dist/keep.txt"));
    assert_ne!(keep.ino(), meta(&f.blobs.path(&cached, false).unwrap()).ino());
    assert_eq!(fs::read(p.join("app/dist/keep.txt")).unwrap(), b"previous");
    let a = meta(&p.join("app/src/a.ts"));
    assert_eq!(a.ino(), meta(&f.blobs.path(&src, false).unwrap()).ino());
    assert!(OutputLayout::new("a", &["../b/**".to_owned()]).is_err());
}

#[test]
fn unclean_and_duplicate_paths_are_refused() {
    let f = fixture();
    let d = f.blob(b"x");
    for bad in ["../escape", "/etc/passwd", "a//b", "./a", "a/../../b", ""] {
        let err = f.create(&spec(vec![blob_input(bad, d, false)], &[])).unwrap_err();
        assert!(matches!(err, ExecRootError::UncleanPath { .. }), "{bad:?}: {err}");
    }
    let err = f
        .create(&spec(vec![blob_input("a", d, false), blob_input("a", d, true)], &[]))
        .unwrap_err();
    assert!(matches!(err, ExecRootError::DuplicatePath { .. }));
    let mut s = spec(vec![], &[]);
    s.project_dir = "../up".to_owned();
    assert!(matches!(f.create(&s), Err(ExecRootError::UncleanPath { .. })));
    let missing = Digest::of(b"never inserted");
    let err = f.create(&spec(vec![blob_input("a", missing, false)], &[])).unwrap_err();
    assert!(matches!(err, ExecRootError::MissingBlob { .. }), "{err}");
    assert_eq!(fs::read_dir(&f.roots).unwrap().count(), 0);
}

#[test]
fn dropping_removes_the_root_even_with_read_only_dirs() {
    let f = fixture();
    let d = f.blob(b"x");
    let root = f.create(&spec(vec![blob_input("app/a", d, false)], &["out/**"])).unwrap();
    let path = root.path().to_owned();
    let locked = path.join("app/out/locked");
    fs::create_dir_all(locked.join("inner")).unwrap();
    fs::write(locked.join("inner/f"), b"x").unwrap();
    fs::set_permissions(&locked, fs::Permissions::from_mode(0o555)).unwrap();
    fs::set_permissions(locked.join("inner"), fs::Permissions::from_mode(0o000)).unwrap();
    drop(root);
    assert!(!path.exists());
    assert!(f.blobs.has(&d), "the blob stays in the cache");
}

#[test]
fn roots_have_distinct_paths_and_pin_their_blobs() {
    let tmp = tempfile::tempdir().unwrap();
    let blobs = BlobCache::open(&tmp.path().join("blobs"), 100).unwrap();
    let bytes = vec![b'p'; 80];
    let d = Digest::of(&bytes);
    blobs.insert_bytes(&bytes, &d).unwrap();
    let s = spec(vec![blob_input("app/p", d, false)], &[]);
    let one = ExecRoot::create(&tmp.path().join("r1"), "t", &s, &blobs).unwrap();
    let two = ExecRoot::create(&tmp.path().join("r2"), "t", &s, &blobs).unwrap();
    assert_ne!(one.path(), two.path());
    assert_ne!(one.path().parent(), two.path().parent(), "the parent decides the path");
    // Over the bound, but pinned by the live roots.
    let other = vec![b'o'; 80];
    blobs.insert_bytes(&other, &Digest::of(&other)).unwrap();
    assert!(blobs.has(&d) && blobs.has(&Digest::of(&other)));
    drop(one);
    // Still pinned by `two`; the unpinned one goes to honour the bound.
    assert!(blobs.has(&d));
    assert!(!blobs.has(&Digest::of(&other)));
    drop(two);
    let third = vec![b't'; 80];
    blobs.insert_bytes(&third, &Digest::of(&third)).unwrap();
    assert!(!blobs.has(&d), "unpinned, it is evicted like any other");
}

#[test]
fn link_resolution() {
    let none = HashMap::new();
    assert_eq!(resolve_link("p/l", "x", &none).as_deref(), Some("p/x"));
    assert_eq!(resolve_link("p/d/l", "../x/./y", &none).as_deref(), Some("p/x/y"));
    assert_eq!(resolve_link("p/l", "..", &none).as_deref(), Some(""));
    assert_eq!(resolve_link("p/l", "../..", &none), None);
    let loops: HashMap<String, String> =
        [("a", "b"), ("b", "a")].iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
    assert_eq!(resolve_link("x", "a", &loops), None);
    assert_eq!(resolve_link("x", &"a/".repeat(MAX_STEPS + 1), &none), None);
}

#[test]
fn a_pruned_roots_emptied_parents_go_up_to_the_top_and_no_further() {
    let tmp = tempfile::tempdir().unwrap();
    let blobs = BlobCache::open(&tmp.path().join("blobs"), 100).unwrap();
    let top = tmp.path().canonicalize().unwrap().join("top");
    fs::create_dir(&top).unwrap();
    let s = ExecRootSpec { prune_to: Some(top.clone()), ..spec(Vec::new(), &[]) };
    let deep = top.join("tmp/ws/.prova/worker/rerun-roots");
    let one = ExecRoot::create(&deep, "t", &s, &blobs).unwrap();
    let two = ExecRoot::create(&deep, "t", &s, &blobs).unwrap();
    let beside = ExecRoot::create(&top.join("tmp/other"), "t", &s, &blobs).unwrap();
    drop(one);
    assert!(deep.is_dir(), "the other root still uses the parent");
    drop(two);
    assert!(!top.join("tmp/ws").exists(), "the emptied chain went");
    assert!(top.join("tmp/other").is_dir(), "a parent another root uses stays");
    drop(beside);
    assert!(top.is_dir() && fs::read_dir(&top).unwrap().next().is_none(), "the top itself stays");
    // Without a top, nothing above the root is touched.
    let plain = ExecRoot::create(&deep, "t", &spec(Vec::new(), &[]), &blobs).unwrap();
    drop(plain);
    assert!(deep.is_dir());
}

#[test]
fn roots_made_while_others_prune_their_chain_are_all_made() {
    let tmp = tempfile::tempdir().unwrap();
    let blobs = std::sync::Arc::new(BlobCache::open(&tmp.path().join("blobs"), 100).unwrap());
    let top = tmp.path().canonicalize().unwrap().join("top");
    fs::create_dir(&top).unwrap();
    let s = ExecRootSpec { prune_to: Some(top.clone()), ..spec(Vec::new(), &[]) };
    let deep = top.join("tmp/ws/.prova/worker/rerun-roots");
    // Two slots making and dropping roots in one parent: each drop that empties it prunes
    // the chain, which the other slot may be making a root in at that moment.
    let slots: Vec<_> = (0..2)
        .map(|_| {
            let (blobs, s, deep) = (std::sync::Arc::clone(&blobs), s.clone(), deep.clone());
            std::thread::spawn(move || {
                (0..300).filter(|_| ExecRoot::create(&deep, "t", &s, &blobs).is_err()).count()
            })
        })
        .collect();
    let failed: usize = slots.into_iter().map(|t| t.join().unwrap()).sum();
    assert_eq!(failed, 0, "roots failed to be made while the chain was pruned");
    assert!(!top.join("tmp").exists(), "and the chain is gone after the last");
}

#[test]
fn stand_ins_show_names_where_nothing_else_stands() {
    let f = fixture();
    let src = f.ws_file("app/package.json", b"{}");
    let stand = |path: &str, dir: bool| prova_protocol::spec::StandIn { path: path.into(), dir };
    let s = ExecRootSpec {
        stand_ins: vec![
            stand("app/README.md", false),
            stand("app/docs", true),
            // An input stands there already: left as it is.
            stand("app/package.json", false),
            // The output directory the layout made: left as it is.
            stand("app/dist", true),
        ],
        ..spec(vec![file_input("app/package.json", src, false)], &["dist/**"])
    };
    let root = f.create(&s).unwrap();
    let p = root.path();
    let readme = meta(&p.join("app/README.md"));
    assert!(readme.is_file() && readme.len() == 0);
    assert_eq!(readme.mode() & 0o777, 0o444);
    assert!(meta(&p.join("app/docs")).is_dir());
    assert_eq!(fs::read_dir(p.join("app/docs")).unwrap().count(), 0);
    assert_eq!(fs::read(p.join("app/package.json")).unwrap(), b"{}");
    assert_eq!(
        root.stand_in_files().iter().map(String::as_str).collect::<Vec<_>>(),
        ["app/README.md"]
    );

    // A plain root's file stand-in is a socket node: listed, present to a probe, and no
    // open of it succeeds — not even by root, whom a file's mode would not stop.
    let sealed = ExecRootSpec { stand_in_files: StandInFiles::Sealed, ..s.clone() };
    let root = f.create(&sealed).unwrap();
    let p = root.path();
    let readme = meta(&p.join("app/README.md"));
    assert!(readme.file_type().is_socket(), "{readme:?}");
    let names: Vec<_> =
        fs::read_dir(p.join("app")).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert!(names.iter().any(|n| n == "README.md"), "{names:?}");
    let err = fs::File::open(p.join("app/README.md")).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::ENXIO), "{err}");
    assert!(meta(&p.join("app/docs")).is_dir());
    assert_eq!(fs::read(p.join("app/package.json")).unwrap(), b"{}");
    assert_eq!(
        root.stand_in_files().iter().map(String::as_str).collect::<Vec<_>>(),
        ["app/README.md"]
    );
    drop(root);

    // In an upstream's project directory too (its parents made); never outside the root.
    let s2 =
        ExecRootSpec { stand_ins: vec![stand("lib/README.md", false)], ..spec(Vec::new(), &[]) };
    let root = f.create(&s2).unwrap();
    assert!(meta(&root.path().join("lib/README.md")).is_file());
    drop(root);
    for bad in ["app/../x", "/etc/x", "", "app//x"] {
        let s = ExecRootSpec { stand_ins: vec![stand(bad, false)], ..spec(Vec::new(), &[]) };
        assert!(matches!(f.create(&s), Err(ExecRootError::UncleanPath { .. })), "{bad}");
    }
}
