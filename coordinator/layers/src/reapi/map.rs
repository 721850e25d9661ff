//! A prova key as a canonical REAPI action, and a prova entry as an `ActionResult`.
//!
//! The action for key `K` is the `Action` whose `Command` has the arguments
//! `["prova", "key-v<KEY_VERSION>", hex(K)]`, an empty input root and `do_not_cache` unset:
//! every prova client computes the same action digest, and no Bazel action (whose
//! arguments never start with a `prova key-v…` triple over an empty input root) collides.
//!
//! The result holds two output files: [`ENTRY_PATH`], the entry's metadata (task, manifest,
//! components, fingerprint, duration, the artifact's prova digest and size) as MessagePack,
//! and [`ARTIFACT_PATH`], the packed outputs archive exactly as the local store keeps it; the
//! log is `stdout_digest`. A restore rebuilds the local entry from these and lets the local
//! layer restore it, so every local check (manifest confinement, the artifact's digest,
//! no symlink escapes) applies to a REAPI hit.

use prost::Message;
use prova_protocol::Digest;
use prova_protocol::key::KEY_VERSION;
use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};

use super::proto::re;

/// The output file holding the entry's metadata.
pub const ENTRY_PATH: &str = "prova/entry";
/// The output file holding the packed outputs archive.
pub const ARTIFACT_PATH: &str = "prova/artifact";

/// The SHA-256 REAPI digest of `bytes`.
pub fn sha256(bytes: &[u8]) -> re::Digest {
    re::Digest { hash: hex(&Sha256::digest(bytes)), size_bytes: bytes.len() as i64 }
}

/// Lower-case hex.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The canonical action of a prova key: its encoded `Command` and `Action` (both to be
/// uploaded before `UpdateActionResult`, as the API asks) and the action's digest.
pub struct KeyAction {
    /// The encoded `Command`.
    pub command: Vec<u8>,
    /// The encoded `Action`.
    pub action: Vec<u8>,
    /// The action's digest: the action cache's key.
    pub digest: re::Digest,
}

/// [`KeyAction`] for `key`.
pub fn key_action(key: &Digest) -> KeyAction {
    let command = re::Command {
        arguments: vec!["prova".to_owned(), format!("key-v{KEY_VERSION}"), key.to_hex()],
        working_directory: String::new(),
        output_paths: vec![ENTRY_PATH.to_owned(), ARTIFACT_PATH.to_owned()],
        ..Default::default()
    }
    .encode_to_vec();
    let empty_root = re::Directory::default().encode_to_vec();
    let action = re::Action {
        command_digest: Some(sha256(&command)),
        input_root_digest: Some(sha256(&empty_root)),
        do_not_cache: false,
        salt: Vec::new(),
        ..Default::default()
    }
    .encode_to_vec();
    let digest = sha256(&action);
    KeyAction { command, action, digest }
}

/// The entry's metadata carried in [`ENTRY_PATH`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RemoteEntry {
    /// Format version of this record.
    pub version: u32,
    /// `project#task`.
    pub task: String,
    /// The prova key it was filed under (checked against the key asked for).
    pub key: Digest,
    /// The encoded output manifest.
    #[serde(with = "serde_bytes")]
    pub manifest: Vec<u8>,
    /// The encoded key components.
    #[serde(with = "serde_bytes")]
    pub components: Vec<u8>,
    /// The manifest's fingerprint.
    pub fingerprint: Option<Digest>,
    /// How long the task ran.
    pub duration_ms: u64,
    /// The artifact's prova digest and size, when the task has outputs.
    pub artifact: Option<(Digest, u64)>,
}

/// This record's format version.
pub const REMOTE_ENTRY_VERSION: u32 = 1;

/// Finds `path` among `result`'s output files.
pub fn output<'a>(result: &'a re::ActionResult, path: &str) -> Option<&'a re::OutputFile> {
    result.output_files.iter().find(|f| f.path == path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_action_is_canonical_and_per_key() {
        let (a, b) = (Digest::of(b"a"), Digest::of(b"b"));
        assert_eq!(key_action(&a).digest, key_action(&a).digest);
        assert_ne!(key_action(&a).digest, key_action(&b).digest);
        let cmd = re::Command::decode(key_action(&a).command.as_slice()).unwrap();
        assert_eq!(
            cmd.arguments,
            vec!["prova".to_owned(), format!("key-v{KEY_VERSION}"), a.to_hex()]
        );
    }

    #[test]
    fn sha256_is_the_reapi_digest() {
        // The SHA-256 of the empty string, as every REAPI server computes it.
        let d = sha256(b"");
        assert_eq!(d.hash, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
        assert_eq!(d.size_bytes, 0);
    }
}
