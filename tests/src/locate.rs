//! Where the `prova` binary under test is, building it first (see the crate docs for why).

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The repository root (the workspace holding `Cargo.toml`, `examples/`, …).
pub fn repo_root() -> PathBuf {
    let tests_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    tests_dir.parent().expect("the tests package lives in a subdirectory of the repo").to_owned()
}

/// The `prova` executable: `$PROVA_BIN` when set, else freshly built by cargo with the
/// profile and target directory of the running test executable. Built at most once per
/// process; panics with cargo's exit status when the build fails.
pub fn prova_bin() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| match std::env::var_os("PROVA_BIN") {
        Some(path) => {
            let path = PathBuf::from(path);
            assert!(path.is_file(), "PROVA_BIN={} is not a file", path.display());
            path
        }
        None => build_prova(),
    })
    .clone()
}

/// Where cargo put the running test executable, as the arguments that reproduce it.
struct Layout {
    /// `target[/<triple>]/<profile>`: where the final binaries go.
    profile_dir: PathBuf,
    /// `--profile`.
    profile: String,
    /// `--target-dir`.
    target_dir: PathBuf,
    /// `--target`, when the tests were cross-built (`target/<triple>/<profile>`).
    triple: Option<OsString>,
}

fn layout() -> Layout {
    let exe = std::env::current_exe().expect("the path of the test executable");
    // <profile_dir>/deps/<test>-<hash>
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("the test executable lives in target[/<triple>]/<profile>/deps")
        .to_owned();
    let dir_name = profile_dir.file_name().and_then(|n| n.to_str()).unwrap_or("debug");
    // Cargo's directory names: dev and test build into `debug`, release and bench into
    // `release`, a custom profile into its own name.
    let profile = match dir_name {
        "debug" => "dev",
        other => other,
    }
    .to_owned();
    let above = profile_dir.parent().expect("the profile dir has a parent").to_owned();
    // The target dir's root holds CACHEDIR.TAG; a cross build nests `<triple>/<profile>`.
    let (target_dir, triple) = if above.join("CACHEDIR.TAG").is_file() {
        (above, None)
    } else {
        match above.parent() {
            Some(root) if root.join("CACHEDIR.TAG").is_file() => {
                (root.to_owned(), above.file_name().map(ToOwned::to_owned))
            }
            _ => (above, None),
        }
    };
    Layout { profile_dir, profile, target_dir, triple }
}

fn build_prova() -> PathBuf {
    let l = layout();
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(&cargo);
    cmd.arg("build")
        .arg("--quiet")
        .arg("--manifest-path")
        .arg(repo_root().join("Cargo.toml"))
        .args(["-p", "prova-cli", "--bin", "prova", "--profile", &l.profile])
        .arg("--target-dir")
        .arg(&l.target_dir);
    if let Some(triple) = &l.triple {
        cmd.arg("--target").arg(triple);
    }
    let status = cmd
        .status()
        .unwrap_or_else(|e| panic!("could not run {} to build prova: {e}", cargo.display()));
    assert!(status.success(), "building prova failed ({status}): {cmd:?}");
    let bin = l.profile_dir.join("prova");
    assert!(
        bin.is_file(),
        "cargo built prova but {} does not exist; set PROVA_BIN to the binary",
        bin.display()
    );
    bin
}
