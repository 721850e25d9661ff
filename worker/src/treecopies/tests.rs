use std::io::Write as _;
use std::os::unix::fs::PermissionsExt as _;

use prova_protocol::tree::TreeEntry;

use super::*;

struct Fixture {
    work: tempfile::TempDir,
    cache: BlobCache,
    m: TreeManifest,
}

fn fixture() -> Fixture {
    let work = tempfile::tempdir().unwrap();
    let cache = BlobCache::open(&work.path().join("blobs"), 1 << 30).unwrap();
    let bytes = b"one\n";
    let d = Digest::of(bytes);
    let (path, mut f) = cache.stage_file().unwrap();
    f.write_all(bytes).unwrap();
    drop(f);
    cache.insert_file(&path, &d).unwrap();
    let m = TreeManifest::new(vec![
        TreeEntry { path: "dep".into(), kind: TreeKind::Dir },
        TreeEntry { path: "dep/index.js".into(), kind: TreeKind::File { digest: d, exec: false } },
        TreeEntry { path: ".cache".into(), kind: TreeKind::Dir },
    ]);
    Fixture { work, cache, m }
}

impl Fixture {
    fn copies(&self) -> Arc<TreeCopies> {
        Arc::new(TreeCopies::new(self.work.path()))
    }

    fn lease(&self, copies: &Arc<TreeCopies>) -> TreeLease {
        copies
            .acquire(&self.m.digest(), "node_modules", &self.m, &self.cache, "node_modules")
            .unwrap()
    }
}

fn write(path: &Path, bytes: &str) {
    fs::set_permissions(path, fs::Permissions::from_mode(0o644)).unwrap();
    fs::write(path, bytes).unwrap();
}

fn verdict(lease: &mut TreeLease) -> Verdict {
    TreeCopies::verdict(std::slice::from_mut(lease))
}

fn wrote(paths: &[&str]) -> Verdict {
    Verdict::Wrote(paths.iter().map(|p| p.to_string()).collect(), 0)
}

#[test]
fn each_running_task_has_a_copy_of_its_own_and_an_unchanged_one_is_used_again() {
    let f = fixture();
    let copies = f.copies();
    let (mut a, mut b) = (f.lease(&copies), f.lease(&copies));
    assert_ne!(a.dir, b.dir, "one copy per running task");
    assert_eq!(fs::read_to_string(a.dir.join("dep/index.js")).unwrap(), "one\n");
    // Copies: a write in place never reaches the blob cache.
    use std::os::unix::fs::MetadataExt as _;
    let blob = f.cache.path(&Digest::of(b"one\n"), false).unwrap();
    let ino = |p: &Path| fs::metadata(p).unwrap().ino();
    assert_ne!(ino(&a.dir.join("dep/index.js")), ino(&blob));
    assert_eq!(verdict(&mut a), Verdict::Unchanged);
    assert_eq!(verdict(&mut b), Verdict::Unchanged);
    let (a_dir, b_dir) = (a.dir.clone(), b.dir.clone());
    drop((a, b));
    let (c, d) = (f.lease(&copies), f.lease(&copies));
    let mut again = [c.dir.clone(), d.dir.clone()];
    again.sort();
    let mut before = [a_dir, b_dir];
    before.sort();
    assert_eq!(again, before, "both copies used again, none built");
}

#[test]
fn a_task_that_wrote_its_copy_wrote_outside_its_outputs_and_the_copy_is_gone() {
    let f = fixture();
    let copies = f.copies();
    let (mut a, mut b) = (f.lease(&copies), f.lease(&copies));
    write(&a.dir.join("dep/index.js"), "two\n");
    fs::write(a.dir.join(".cache/babel.json"), "{}").unwrap();
    assert_eq!(verdict(&mut b), Verdict::Unchanged, "a task beside it is not blamed");
    assert_eq!(
        verdict(&mut a),
        wrote(&["node_modules/.cache/babel.json", "node_modules/dep/index.js"])
    );
    let old = a.dir.clone();
    drop(a);
    let c = f.lease(&copies);
    assert!(!old.exists(), "the changed copy is removed");
    assert_ne!(c.dir, old);
    assert_eq!(fs::read_to_string(c.dir.join("dep/index.js")).unwrap(), "one\n");
    assert!(!c.dir.join(".cache/babel.json").exists());
}

#[test]
fn a_removal_a_rename_and_a_mode_change_are_writes_too() {
    let f = fixture();
    let copies = f.copies();
    let mut a = f.lease(&copies);
    fs::set_permissions(a.dir.join("dep/index.js"), fs::Permissions::from_mode(0o600)).unwrap();
    assert_eq!(verdict(&mut a), wrote(&["node_modules/dep/index.js"]));
    let mut b = f.lease(&copies);
    fs::rename(b.dir.join("dep"), b.dir.join("moved")).unwrap();
    assert_eq!(verdict(&mut b), wrote(&["node_modules/dep", "node_modules/moved"]));
    let mut c = f.lease(&copies);
    fs::remove_dir(c.dir.join(".cache")).unwrap();
    assert_eq!(verdict(&mut c), wrote(&["node_modules/.cache"]));
}

#[test]
fn a_copy_whose_task_ended_without_a_verdict_is_never_used_again() {
    let f = fixture();
    let copies = f.copies();
    let a = f.lease(&copies);
    let old = a.dir.clone();
    drop(a); // cancelled, say
    let b = f.lease(&copies);
    assert_ne!(b.dir, old);
    assert!(!old.exists());
}

#[test]
fn without_watches_a_copy_is_checked_by_its_stamps() {
    let f = fixture();
    let copies = f.copies();
    lock(&copies.state).inotify = None;
    let mut a = f.lease(&copies);
    assert_eq!(verdict(&mut a), Verdict::Unchanged);
    // Rewritten with the same bytes and size: its ctime moved.
    write(&a.dir.join("dep/index.js"), "one\n");
    fs::create_dir(a.dir.join("late")).unwrap();
    assert_eq!(
        verdict(&mut a),
        wrote(&["node_modules", "node_modules/dep/index.js", "node_modules/late"])
    );
    drop(a);
    let b = f.lease(&copies);
    assert_eq!(fs::read_to_string(b.dir.join("dep/index.js")).unwrap(), "one\n");
    assert!(!b.dir.join("late").exists());
}

#[test]
fn lost_events_leave_the_verdict_to_the_stamps() {
    let f = fixture();
    let copies = f.copies();
    let (mut a, mut b) = (f.lease(&copies), f.lease(&copies));
    for c in lock(&copies.state).copies.values_mut() {
        c.lost = true;
    }
    fs::set_permissions(a.dir.join("dep/index.js"), fs::Permissions::from_mode(0o600)).unwrap();
    assert_eq!(verdict(&mut a), wrote(&["node_modules/dep/index.js"]));
    assert_eq!(verdict(&mut b), Verdict::Unchanged);
}

#[test]
fn a_restarted_worker_never_uses_a_copy_nobody_watched() {
    let f = fixture();
    let copies = f.copies();
    let mut a = f.lease(&copies);
    assert_eq!(verdict(&mut a), Verdict::Unchanged);
    let old = a.dir.clone();
    drop(a);
    drop(copies);
    write(&old.join("dep/index.js"), "two\n");
    let copies = f.copies();
    assert!(!old.exists(), "the old copies are removed at start-up");
    let b = f.lease(&copies);
    assert_eq!(fs::read_to_string(b.dir.join("dep/index.js")).unwrap(), "one\n");
}

#[test]
fn an_idle_copy_changed_by_something_else_is_never_leased() {
    for watched in [true, false] {
        let f = fixture();
        let copies = f.copies();
        if !watched {
            lock(&copies.state).inotify = None;
        }
        let mut a = f.lease(&copies);
        assert_eq!(verdict(&mut a), Verdict::Unchanged);
        let old = a.dir.clone();
        drop(a);
        write(&old.join("dep/index.js"), "two\n");
        let mut b = f.lease(&copies);
        assert_ne!(b.dir, old, "watched: {watched}");
        assert!(!old.exists());
        assert_eq!(verdict(&mut b), Verdict::Unchanged, "not blamed on the next task");
    }
}
