//! A task as a REAPI `Action`, without I/O: the `Command` (argv, the declared environment,
//! the working directory, output paths, platform properties), the input root's Merkle tree of
//! `Directory` messages, and the mapping of the result's output paths back to
//! workspace-relative paths inside the task's declared outputs.

use std::collections::BTreeMap;

use prost::Message;
use prova_protocol::spec::{CommandLine, FIXED_VARS, HOST_VARS, TaskSpec};
use prova_protocol::work::Perturb;

use crate::layers::reapi::map::sha256;
use crate::layers::reapi::proto::re;

/// One entry of an input root, by workspace-relative path.
#[derive(Clone, Debug, PartialEq)]
pub enum Node {
    /// A regular file: its SHA-256 digest and owner-execute bit.
    File {
        /// The REAPI digest.
        digest: re::Digest,
        /// Executable.
        exec: bool,
    },
    /// A symlink, with its target as written.
    Symlink {
        /// The target.
        target: String,
    },
    /// A directory (present even when empty).
    Dir,
}

/// Why a task cannot become an action.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ActionError {
    /// Two entries of the input root collide (a file where a directory must be).
    #[error("the input root has `{0}` both as a file and as a directory")]
    Collision(String),
    /// A path is not a clean relative path.
    #[error("`{0}` is not a clean workspace-relative path")]
    BadPath(String),
    /// An output root that is the whole workspace cannot be an output path.
    #[error("outputs covering the whole workspace cannot be executed remotely")]
    WholeWorkspace,
}

/// The input root: the root directory's digest and every `Directory` (encoded), root first.
#[derive(Clone, Debug)]
pub struct Merkle {
    /// The root `Directory`'s digest (`Action.input_root_digest`).
    pub root: re::Digest,
    /// Every directory message with its digest, for upload.
    pub directories: Vec<(re::Digest, Vec<u8>)>,
}

#[derive(Default)]
struct DirBuild {
    files: BTreeMap<String, (re::Digest, bool)>,
    links: BTreeMap<String, String>,
    dirs: BTreeMap<String, DirBuild>,
}

fn clean(path: &str) -> bool {
    !path.is_empty()
        && !path.starts_with('/')
        && path.split('/').all(|c| !c.is_empty() && c != "." && c != "..")
}

/// The Merkle tree of `entries` (workspace-relative paths). Names within a directory are
/// sorted by byte order, as the API requires, so equal inputs give equal digests.
pub fn merkle(entries: &BTreeMap<String, Node>) -> Result<Merkle, ActionError> {
    let mut root = DirBuild::default();
    for (path, node) in entries {
        if !clean(path) {
            return Err(ActionError::BadPath(path.clone()));
        }
        let mut parts: Vec<&str> = path.split('/').collect();
        let name = parts.pop().unwrap_or_default().to_owned();
        let mut dir = &mut root;
        let mut at = String::new();
        for p in parts {
            at = if at.is_empty() { p.to_owned() } else { format!("{at}/{p}") };
            if dir.files.contains_key(p) || dir.links.contains_key(p) {
                return Err(ActionError::Collision(at));
            }
            dir = dir.dirs.entry(p.to_owned()).or_default();
        }
        let taken = dir.files.contains_key(&name) || dir.links.contains_key(&name);
        match node {
            Node::Dir => {
                if taken {
                    return Err(ActionError::Collision(path.clone()));
                }
                dir.dirs.entry(name).or_default();
            }
            Node::File { digest, exec } => {
                if taken || dir.dirs.contains_key(&name) {
                    return Err(ActionError::Collision(path.clone()));
                }
                dir.files.insert(name, (digest.clone(), *exec));
            }
            Node::Symlink { target } => {
                if taken || dir.dirs.contains_key(&name) {
                    return Err(ActionError::Collision(path.clone()));
                }
                dir.links.insert(name, target.clone());
            }
        }
    }
    let mut out = Vec::new();
    let root = encode(root, &mut out);
    out.reverse(); // the root was encoded last
    Ok(Merkle { root, directories: out })
}

fn encode(d: DirBuild, out: &mut Vec<(re::Digest, Vec<u8>)>) -> re::Digest {
    let mut msg = re::Directory::default();
    for (name, sub) in d.dirs {
        let digest = encode(sub, out);
        msg.directories.push(re::DirectoryNode { name, digest: Some(digest) });
    }
    for (name, (digest, exec)) in d.files {
        msg.files.push(re::FileNode { name, digest: Some(digest), is_executable: exec });
    }
    for (name, target) in d.links {
        msg.symlinks.push(re::SymlinkNode { name, target });
    }
    let bytes = msg.encode_to_vec();
    let digest = sha256(&bytes);
    out.push((digest.clone(), bytes));
    digest
}

/// `word` quoted for `sh` (as the worker quotes forwarded arguments).
fn shell_quote(word: &str) -> String {
    let plain = !word.is_empty()
        && word.bytes().all(|c| c.is_ascii_alphanumeric() || b"-_=/.,:@%+".contains(&c));
    if plain { word.to_owned() } else { format!("'{}'", word.replace('\'', "'\\''")) }
}

/// The argv of a task: `sh -c <command>` (forwarded arguments appended, quoted), or its argv
/// list; under a re-run's umask, wrapped in `sh -c 'umask …; exec "$@"'`.
pub fn argv(spec: &TaskSpec, umask: Option<u32>) -> Vec<String> {
    let mut argv = match &spec.command {
        CommandLine::Shell(s) => {
            let mut line = s.clone();
            for a in &spec.args {
                line.push(' ');
                line.push_str(&shell_quote(a));
            }
            vec!["sh".to_owned(), "-c".to_owned(), line]
        }
        CommandLine::Argv(v) => v.iter().chain(&spec.args).cloned().collect(),
    };
    if let Some(m) = umask {
        let mut wrapped = vec![
            "sh".to_owned(),
            "-c".to_owned(),
            format!("umask {m:03o}; exec \"$@\""),
            "sh".to_owned(),
        ];
        wrapped.append(&mut argv);
        argv = wrapped;
    }
    argv
}

/// The command's environment: the task's declared variables (a name given twice takes its
/// last value), for a re-run the perturbed values of names it does not declare, and the
/// fixed part of every task's baseline ([`FIXED_VARS`]: `TZ=UTC`, `LANG=C.UTF-8`, …) for
/// names neither gives nor the task declares unset; sorted by name, as the API requires. The
/// bot lays these over its own defaults, and the guard unsets the rest but the host's
/// [`HOST_VARS`] ([`super::guard::ProgramGuard::env_keep`]): a task starts on a bot from
/// what it starts from on a prova worker.
pub fn environment(spec: &TaskSpec, perturb: Option<&Perturb>) -> Vec<(String, String)> {
    let mut env: BTreeMap<String, String> = spec.env.iter().cloned().collect();
    if let Some(p) = perturb {
        for (k, v) in &p.env {
            env.entry(k.clone()).or_insert_with(|| v.clone());
        }
    }
    for (k, v) in FIXED_VARS {
        if !spec.unset_env.iter().any(|u| u == k) {
            env.entry((*k).to_owned()).or_insert_with(|| (*v).to_owned());
        }
    }
    env.into_iter().collect()
}

/// The names a bot's own environment may keep under `env` (the action's): the host's
/// [`HOST_VARS`] the task does not declare unset, and `env`'s own names.
pub fn env_keep(spec: &TaskSpec, env: &[(String, String)]) -> Vec<String> {
    let host = HOST_VARS.iter().filter(|h| !spec.unset_env.iter().any(|u| u == *h));
    let mut keep: Vec<String> =
        host.map(|h| (*h).to_owned()).chain(env.iter().map(|(k, _)| k.clone())).collect();
    keep.sort();
    keep.dedup();
    keep
}

/// The platform properties of a task: `OSFamily`/`ISA` when its key folds the platform
/// (`os/arch`, a non-portable task), then its placement labels; sorted by name.
pub fn platform(platform: Option<&str>, labels: &BTreeMap<String, String>) -> re::Platform {
    let mut props: BTreeMap<String, String> = BTreeMap::new();
    if let Some((os, arch)) = platform.and_then(|p| p.split_once('/')) {
        props.insert("OSFamily".to_owned(), os.to_owned());
        props.insert("ISA".to_owned(), arch.to_owned());
    }
    for (k, v) in labels {
        props.insert(k.clone(), v.clone());
    }
    re::Platform {
        properties: props
            .into_iter()
            .map(|(name, value)| re::platform::Property { name, value })
            .collect(),
    }
}

/// `to` (workspace-relative) relative to the directory `from`, with `..` where it leaves it.
fn relative(from: &str, to: &str) -> String {
    let f: Vec<&str> = from.split('/').filter(|c| !c.is_empty()).collect();
    let t: Vec<&str> = to.split('/').filter(|c| !c.is_empty()).collect();
    let common = f.iter().zip(&t).take_while(|(a, b)| a == b).count();
    let mut parts: Vec<&str> = vec![".."; f.len() - common];
    parts.extend(&t[common..]);
    parts.join("/")
}

/// The output paths of a task whose output globs have `roots` (workspace-relative): each
/// root relative to the project directory (the working directory), sorted and unique.
pub fn output_paths(project_dir: &str, roots: &[String]) -> Result<Vec<String>, ActionError> {
    let mut out: Vec<String> = Vec::new();
    for r in roots {
        let rel = relative(project_dir, r);
        if rel.is_empty() {
            return Err(ActionError::WholeWorkspace);
        }
        out.push(rel);
    }
    out.sort();
    out.dedup();
    Ok(out)
}

/// The workspace-relative path of an output the server reported at `path` (relative to the
/// working directory `project_dir`), when it lies within one of the declared output `roots`;
/// `None` for anything else (an absolute path, one that climbs out of the input root, or
/// one outside every declared output root).
pub fn output_in_roots(project_dir: &str, path: &str, roots: &[String]) -> Option<String> {
    if path.starts_with('/') {
        return None;
    }
    let mut parts: Vec<&str> = project_dir.split('/').filter(|c| !c.is_empty()).collect();
    for c in path.split('/') {
        match c {
            "" | "." => {}
            ".." => {
                parts.pop()?;
            }
            c => parts.push(c),
        }
    }
    let ws = parts.join("/");
    let inside = roots.iter().any(|r| {
        r.is_empty()
            || ws == *r
            || (ws.len() > r.len() && ws.starts_with(r.as_str()) && ws.as_bytes()[r.len()] == b'/')
    });
    (inside && !ws.is_empty()).then_some(ws)
}

/// The encoded `Command` and `Action` of one execution, and the action's digest.
#[derive(Clone, Debug)]
pub struct Built {
    /// The encoded `Command`.
    pub command: Vec<u8>,
    /// The encoded `Action`.
    pub action: Vec<u8>,
    /// Its digest (what `Execute` is asked for).
    pub digest: re::Digest,
}

/// What an execution is built from besides the task.
pub struct ActionInputs<'a> {
    /// The task's output roots (workspace-relative).
    pub roots: &'a [String],
    /// The input root.
    pub input_root: re::Digest,
    /// The platform folded into the key (`os/arch`), if any.
    pub platform: Option<&'a str>,
    /// A re-run's perturbations (its environment values and umask are applied).
    pub perturb: Option<&'a Perturb>,
    /// The action's salt (a re-run's: it must not be the first execution's action).
    pub salt: Vec<u8>,
    /// The programs the bot must check around the command ([`super::guard`]).
    pub guard: &'a super::guard::ProgramGuard,
}

/// The `Command` and `Action` of `spec`.
pub fn build(spec: &TaskSpec, i: &ActionInputs<'_>) -> Result<Built, ActionError> {
    let platform = platform(i.platform, &spec.labels);
    let env = environment(spec, i.perturb);
    let guard =
        super::guard::ProgramGuard { env_keep: Some(env_keep(spec, &env)), ..i.guard.clone() };
    let command = re::Command {
        arguments: guard.wrap(argv(spec, i.perturb.and_then(|p| p.umask))),
        environment_variables: env
            .into_iter()
            .map(|(name, value)| re::command::EnvironmentVariable { name, value })
            .collect(),
        platform: Some(platform.clone()),
        working_directory: spec.project_dir.clone(),
        output_paths: output_paths(&spec.project_dir, i.roots)?,
    }
    .encode_to_vec();
    let action = re::Action {
        command_digest: Some(sha256(&command)),
        input_root_digest: Some(i.input_root.clone()),
        do_not_cache: false,
        salt: i.salt.clone(),
        platform: Some(platform),
    }
    .encode_to_vec();
    let digest = sha256(&action);
    Ok(Built { command, action, digest })
}

#[cfg(test)]
#[path = "action_tests.rs"]
mod tests;
