//! One lease's action, run here: the `Command` and the input root fetched (files into the
//! bot's store, then linked — sandboxed, outside the output paths' directories — or copied
//! into a fresh exec root), the command run by the worker's executor (its own process group,
//! killed on cancel), under bubblewrap when the bot has it (the root read-only but for the
//! output paths' directories), and the output paths uploaded as the `ActionResult`'s files,
//! directories (a `Tree` each) and symlinks.

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};

use prost::Message;
use prova_reapi_proto::re;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::cas::{Blob, Cas, digest};
use super::{BotError, BotSettings};
use crate::exec::{Executor, LocalExecutor, ProcessIo, ProcessRequest, env::baseline_env};
use prova_protocol::spec::ExitKind;

/// Most entries an input root may hold.
const MAX_ROOT_ENTRIES: usize = 1 << 20;
/// Largest `Command` or `Directory` read.
const MAX_MESSAGE: i64 = 64 << 20;

/// How a lease's action ended.
pub struct Ran {
    /// The result (its exit code, outputs, log).
    pub result: re::ActionResult,
}

/// Whether `rel` is a relative path that stays inside the directory it is joined to.
fn stays_inside(rel: &str) -> bool {
    let mut depth: i64 = 0;
    for c in Path::new(rel).components() {
        match c {
            Component::Normal(_) => depth += 1,
            Component::CurDir => {}
            Component::ParentDir => {
                depth -= 1;
                if depth < 0 {
                    return false;
                }
            }
            Component::RootDir | Component::Prefix(_) => return false,
        }
    }
    true
}

fn name_ok(n: &str) -> bool {
    !n.is_empty() && n != "." && n != ".." && !n.contains('/') && !n.contains('\0')
}

/// Whether the file placed at `to` may be a hardlink to its blob in the store: only under a
/// sandbox (which binds the root read-only), and never inside a directory it binds writable
/// (`writable`, the output paths' directories), where the task — the file's owner inside its
/// user namespace — could `chmod` it and rewrite the store's blob under its digest, for
/// every later action on this bot to read.
fn may_link(sandboxed: bool, to: &Path, writable: &[PathBuf]) -> bool {
    sandboxed && !writable.iter().any(|w| to.starts_with(w))
}

/// Fetches and builds the input root `d` under `root`, files linked where [`may_link`].
async fn materialise(
    cas: &Cas,
    d: &re::Digest,
    root: &Path,
    sandboxed: bool,
    writable: &[PathBuf],
) -> Result<(), BotError> {
    // Every directory first (BFS), then every file blob in batches, then the tree on disk.
    let mut dirs: Vec<(PathBuf, re::Directory)> = Vec::new();
    let mut queue = vec![(root.to_path_buf(), d.clone())];
    let mut entries = 0usize;
    while let Some((at, dd)) = queue.pop() {
        let dir = re::Directory::decode(cas.read(&dd, MAX_MESSAGE).await?.as_slice())
            .map_err(|e| BotError::Blob(format!("a Directory: {e}")))?;
        entries += dir.files.len() + dir.directories.len() + dir.symlinks.len();
        if entries > MAX_ROOT_ENTRIES {
            return Err(BotError::Blob(format!(
                "the input root has over {MAX_ROOT_ENTRIES} entries"
            )));
        }
        for sub in &dir.directories {
            if !name_ok(&sub.name) {
                return Err(BotError::Blob(format!("a directory named `{}`", sub.name)));
            }
            let sd = sub
                .digest
                .clone()
                .ok_or_else(|| BotError::Blob("a directory without a digest".into()))?;
            queue.push((at.join(&sub.name), sd));
        }
        dirs.push((at, dir));
    }
    let files: Vec<re::Digest> =
        dirs.iter().flat_map(|(_, d)| d.files.iter().filter_map(|f| f.digest.clone())).collect();
    cas.fetch_all(&files).await?;
    for (at, dir) in &dirs {
        std::fs::create_dir_all(at).map_err(|e| BotError::io(at, e))?;
        for f in &dir.files {
            if !name_ok(&f.name) {
                return Err(BotError::Blob(format!("a file named `{}`", f.name)));
            }
            let d =
                f.digest.clone().ok_or_else(|| BotError::Blob("a file without a digest".into()))?;
            let to = at.join(&f.name);
            let from = cas.path(&d);
            place_file(&from, &to, f.is_executable, may_link(sandboxed, &to, writable))?;
        }
        for s in &dir.symlinks {
            if !name_ok(&s.name) {
                return Err(BotError::Blob(format!("a symlink named `{}`", s.name)));
            }
            let to = at.join(&s.name);
            std::os::unix::fs::symlink(&s.target, &to).map_err(|e| BotError::io(&to, e))?;
        }
    }
    Ok(())
}

fn place_file(from: &Path, to: &Path, exec: bool, link: bool) -> Result<(), BotError> {
    use std::os::unix::fs::PermissionsExt as _;
    let mode = if exec { 0o555 } else { 0o444 };
    if link {
        // Shared with the store: read-only, and the sandbox mounts the root read-only.
        let variant = from.with_extension(if exec { "x" } else { "r" });
        if !variant.exists() {
            let tmp = from.with_extension(format!("tmp{}", std::process::id()));
            std::fs::copy(from, &tmp).map_err(|e| BotError::io(&tmp, e))?;
            std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(mode))
                .map_err(|e| BotError::io(&tmp, e))?;
            std::fs::rename(&tmp, &variant).map_err(|e| BotError::io(&variant, e))?;
        }
        return std::fs::hard_link(&variant, to).map_err(|e| BotError::io(to, e));
    }
    std::fs::copy(from, to).map_err(|e| BotError::io(to, e))?;
    std::fs::set_permissions(to, std::fs::Permissions::from_mode(mode | 0o200))
        .map_err(|e| BotError::io(to, e))
}

/// Runs `action` in a fresh root under the bot's work dir.
pub async fn run(
    s: &BotSettings,
    cas: &Cas,
    action: &re::Action,
    lease: &str,
    cancel: &CancellationToken,
) -> Result<Option<Ran>, BotError> {
    let cd =
        action.command_digest.clone().ok_or_else(|| BotError::Blob("no command digest".into()))?;
    let command = re::Command::decode(cas.read(&cd, MAX_MESSAGE).await?.as_slice())
        .map_err(|e| BotError::Blob(format!("the Command: {e}")))?;
    let rd =
        action.input_root_digest.clone().ok_or_else(|| BotError::Blob("no input root".into()))?;
    let hint: String =
        lease.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '_' }).collect();
    let root = s.work_dir.join("roots").join(hint);
    let _ = std::fs::remove_dir_all(&root);
    let guard = RemoveOnDrop(root.clone());
    if !stays_inside(&command.working_directory) {
        return Err(BotError::Blob(format!("working directory `{}`", command.working_directory)));
    }
    let cwd = root.join(&command.working_directory);
    // The directories the sandbox binds writable, known before the root is built: an input
    // inside one is copied, not linked (`may_link`).
    let mut writable = Vec::new();
    let outputs: Vec<String> = command.output_paths.clone();
    for o in &outputs {
        let rel = Path::new(&command.working_directory).join(o);
        if !stays_inside(&rel.to_string_lossy()) || o.is_empty() {
            return Err(BotError::Blob(format!("output path `{o}`")));
        }
        let parent = cwd.join(o).parent().map(Path::to_path_buf).unwrap_or_else(|| cwd.clone());
        writable.push(parent);
    }
    materialise(cas, &rd, &root, s.sandbox, &writable).await?;
    std::fs::create_dir_all(&cwd).map_err(|e| BotError::io(&cwd, e))?;
    for parent in &writable {
        std::fs::create_dir_all(parent).map_err(|e| BotError::io(parent, e))?;
    }
    let mut env = baseline_env(|k| std::env::var(k).ok());
    for v in &command.environment_variables {
        env.retain(|(k, _)| *k != v.name);
        env.push((v.name.clone(), v.value.clone()));
    }
    let argv = if s.sandbox {
        let mut cfg = crate::sandbox::bwrap::SandboxConfig::new(&root, &cwd);
        cfg.writable = writable;
        // The bot's own directory (its store, other leases' roots) where a system path
        // would show it.
        cfg.masked = crate::sandbox::bwrap::masked_dirs(&[s.work_dir.as_path()]);
        crate::sandbox::bwrap::bwrap_argv(&cfg, &command.arguments)
    } else {
        command.arguments.clone()
    };
    let req = ProcessRequest { env, ..ProcessRequest::new(argv, &cwd) };
    let (out_tx, mut out_rx) = mpsc::channel::<Vec<u8>>(64);
    let drain = prova_protocol::task::OwnedTask::spawn("bot.output", async move {
        while out_rx.recv().await.is_some() {}
    });
    let ran = LocalExecutor
        .run(req, ProcessIo { output: out_tx, ready: None }, cancel.clone())
        .await
        .map_err(|e| BotError::Blob(format!("running the command: {e}")))?;
    drop(drain);
    let exit_code = match &ran.exit {
        ExitKind::Code(c) => *c,
        ExitKind::Signal(sig) => 128 + sig,
        ExitKind::Aborted => return Ok(None),
        ExitKind::TimedOut => 124,
        ExitKind::SpawnFailed(_) => 127,
    };
    let mut log = ran.log.to_bytes_with_notice();
    if let ExitKind::SpawnFailed(why) = &ran.exit {
        log.extend_from_slice(
            format!("prova bot: the command could not start: {why}\n").as_bytes(),
        );
    }
    let mut blobs = Vec::new();
    let mut result = re::ActionResult { exit_code, ..Default::default() };
    if exit_code == 0 {
        for o in &outputs {
            collect_output(&cwd, o, &mut result, &mut blobs)?;
        }
    }
    let ld = digest(&log);
    blobs.push((ld.clone(), Blob::Bytes(log)));
    result.stdout_digest = Some(ld);
    result.execution_metadata = Some(re::ExecutedActionMetadata { worker: s.name.clone() });
    cas.upload(blobs).await?;
    drop(guard);
    Ok(Some(Ran { result }))
}

/// Adds output `o` (relative to `cwd`) to `result`, if it exists.
fn collect_output(
    cwd: &Path,
    o: &str,
    result: &mut re::ActionResult,
    blobs: &mut Vec<(re::Digest, Blob)>,
) -> Result<(), BotError> {
    let at = cwd.join(o);
    let Ok(meta) = std::fs::symlink_metadata(&at) else { return Ok(()) };
    if meta.file_type().is_symlink() {
        let target = std::fs::read_link(&at).map_err(|e| BotError::io(&at, e))?;
        result.output_symlinks.push(re::OutputSymlink {
            path: o.to_owned(),
            target: target.to_string_lossy().into_owned(),
        });
    } else if meta.is_file() {
        let (d, exec) = file_digest(&at, &meta)?;
        blobs.push((d.clone(), Blob::File(at)));
        result.output_files.push(re::OutputFile {
            path: o.to_owned(),
            digest: Some(d),
            is_executable: exec,
            contents: Vec::new(),
        });
    } else if meta.is_dir() {
        let mut children = BTreeMap::new();
        let root = tree_dir(&at, blobs, &mut children)?;
        let tree = re::Tree { root: Some(root), children: children.into_values().collect() };
        let bytes = tree.encode_to_vec();
        let d = digest(&bytes);
        blobs.push((d.clone(), Blob::Bytes(bytes)));
        result
            .output_directories
            .push(re::OutputDirectory { path: o.to_owned(), tree_digest: Some(d) });
    }
    Ok(())
}

fn file_digest(p: &Path, meta: &std::fs::Metadata) -> Result<(re::Digest, bool), BotError> {
    use std::os::unix::fs::PermissionsExt as _;
    let bytes = std::fs::read(p).map_err(|e| BotError::io(p, e))?;
    Ok((digest(&bytes), meta.permissions().mode() & 0o100 != 0))
}

/// The `Directory` of `dir` (never following a symlink), its sub-directories added to
/// `children` by digest and its files to `blobs`.
fn tree_dir(
    dir: &Path,
    blobs: &mut Vec<(re::Digest, Blob)>,
    children: &mut BTreeMap<String, re::Directory>,
) -> Result<re::Directory, BotError> {
    let mut out = re::Directory::default();
    let mut names: Vec<_> =
        std::fs::read_dir(dir).map_err(|e| BotError::io(dir, e))?.filter_map(Result::ok).collect();
    names.sort_by_key(std::fs::DirEntry::file_name);
    for e in names {
        let name = e.file_name().to_string_lossy().into_owned();
        let p = e.path();
        let meta = std::fs::symlink_metadata(&p).map_err(|err| BotError::io(&p, err))?;
        if meta.file_type().is_symlink() {
            let target = std::fs::read_link(&p).map_err(|err| BotError::io(&p, err))?;
            out.symlinks
                .push(re::SymlinkNode { name, target: target.to_string_lossy().into_owned() });
        } else if meta.is_dir() {
            let sub = tree_dir(&p, blobs, children)?;
            let d = digest(&sub.encode_to_vec());
            children.insert(d.hash.clone(), sub);
            out.directories.push(re::DirectoryNode { name, digest: Some(d) });
        } else if meta.is_file() {
            let (d, exec) = file_digest(&p, &meta)?;
            blobs.push((d.clone(), Blob::File(p)));
            out.files.push(re::FileNode { name, digest: Some(d), is_executable: exec });
        }
    }
    Ok(out)
}

struct RemoveOnDrop(PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        make_writable(&self.0);
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Read-only directories (made so by a task) cannot be emptied: give them back their write
/// bit first, without following symlinks.
fn make_writable(p: &Path) {
    use std::os::unix::fs::PermissionsExt as _;
    let Ok(meta) = std::fs::symlink_metadata(p) else { return };
    if meta.is_dir() {
        let _ = std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755));
        if let Ok(rd) = std::fs::read_dir(p) {
            for e in rd.filter_map(Result::ok) {
                make_writable(&e.path());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_that_climb_out_are_refused() {
        assert!(stays_inside("app/dist"));
        assert!(stays_inside("app/../shared/gen"));
        assert!(stays_inside(""));
        assert!(!stays_inside("../x"));
        assert!(!stays_inside("app/../../x"));
        assert!(!stays_inside("/etc"));
        assert!(!name_ok("..") && !name_ok("a/b") && !name_ok("") && name_ok("a.b"));
    }

    #[test]
    fn an_input_inside_a_writable_directory_is_never_a_link_into_the_store() {
        let w = [PathBuf::from("/r/app"), PathBuf::from("/r/gen/out")];
        assert!(may_link(true, Path::new("/r/lib/a.h"), &w), "read-only under the sandbox");
        assert!(may_link(true, Path::new("/r/gen/in.txt"), &w));
        assert!(!may_link(true, Path::new("/r/app/a.c"), &w), "the task could chmod and write it");
        assert!(!may_link(true, Path::new("/r/gen/out/sub/x"), &w));
        assert!(!may_link(false, Path::new("/r/lib/a.h"), &w), "no sandbox: a copy");
        // A sibling whose name merely starts like a writable one is not inside it.
        assert!(may_link(true, Path::new("/r/application/a.c"), &w));
    }

    #[test]
    fn a_copy_is_writable_by_its_task_and_a_link_shares_the_blob() {
        use std::os::unix::fs::MetadataExt as _;
        let t = tempfile::tempdir().unwrap();
        let blob = t.path().join("blob");
        std::fs::write(&blob, b"hello\n").unwrap();
        let (linked, copied) = (t.path().join("linked"), t.path().join("copied"));
        place_file(&blob, &linked, false, true).unwrap();
        place_file(&blob, &copied, false, false).unwrap();
        let ino = |p: &Path| std::fs::metadata(p).unwrap().ino();
        assert_ne!(ino(&copied), ino(&blob.with_extension("r")));
        assert_eq!(ino(&linked), ino(&blob.with_extension("r")));
        std::fs::write(&copied, b"rewritten").unwrap();
        assert_eq!(std::fs::read(blob.with_extension("r")).unwrap(), b"hello\n");
    }
}
