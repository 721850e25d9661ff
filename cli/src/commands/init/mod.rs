//! `prova init`: looks at the directory for an npm/yarn workspace (`package.json`
//! `workspaces`), a pnpm workspace (`pnpm-workspace.yaml`), a Cargo workspace (`Cargo.toml`
//! `[workspace] members`) or packages that name no workspace (directories with a
//! `package.json`, linked by `file:` dependencies), and writes a small commented
//! `prova.toml` that `prova run` accepts without edits. An existing `prova.toml` is kept
//! unless `--force`.
//!
//! For a JS workspace it first loads the workspace as prova sees it (a `[workspace]`-only
//! file), then reads each package's `build` script and tsconfig ([`plan`]) to write narrow
//! build inputs (sources, the configs tsc reads — never the whole project, so a README edit
//! re-runs nothing) and exact outputs (`outDir`, the `.tsbuildinfo` wherever TypeScript puts
//! it), and — only where a package needs more than the defaults — that package's own
//! `prova.toml` (deps its `package.json` does not list, its own outputs, every file as input
//! when its build runs a tool prova cannot see into).
//!
//! The file's first line is `#:schema ./.prova/prova.schema.json`, which taplo (Even Better
//! TOML) reads to validate and complete the file; init writes that schema there, the copy
//! compiled into this binary (`prova schema config --write` refreshes it after an upgrade or
//! in a fresh clone, where `.prova/` is usually ignored).

mod imports;
mod packages;
mod plan;
mod render;
mod script;
mod tsconfig;

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use prova_coordinator::config::{CONFIG_FILE, ConfigError};
use prova_coordinator::workspace::Workspace;

use crate::args::InitArgs;
use crate::exit::Code;

pub use render::workspace as render;

/// Why `prova init` could not write the file.
#[derive(Debug, thiserror::Error)]
pub enum InitError {
    /// The file is there and `--force` was not given.
    #[error("{} already exists; pass --force to overwrite it", .0.display())]
    Exists(PathBuf),
    /// A manifest that decides the kind of workspace could not be read or parsed.
    #[error("cannot read {}: {reason}", path.display())]
    Manifest { path: PathBuf, reason: String },
    /// Writing a file failed.
    #[error("cannot write {}: {source}", path.display())]
    Write { path: PathBuf, source: std::io::Error },
    /// The workspace the manifests describe does not load (a broken package.json, two
    /// packages of one name); nothing was written.
    #[error("{0}")]
    Load(#[from] ConfigError),
}

/// The kind of workspace found at the directory.
#[derive(Debug, PartialEq, Eq)]
pub enum Detected {
    /// `package.json` `workspaces` (npm, yarn).
    Npm,
    /// `pnpm-workspace.yaml`.
    Pnpm,
    /// `Cargo.toml` `[workspace] members`.
    Cargo(Vec<String>),
    /// No workspace manifest, but packages: the root's `package.json` (as `.`) and every
    /// directory below with one.
    Packages { dirs: Vec<String> },
    /// None of those: the directory itself is the one project.
    Plain,
}

impl Detected {
    fn is_js(&self) -> bool {
        matches!(self, Self::Npm | Self::Pnpm | Self::Packages { .. })
    }

    fn describe(&self) -> String {
        match self {
            Self::Npm => "an npm/yarn workspace (package.json workspaces)".to_owned(),
            Self::Pnpm => "a pnpm workspace (pnpm-workspace.yaml)".to_owned(),
            Self::Cargo(m) => format!("a Cargo workspace ({} member globs)", m.len()),
            Self::Packages { dirs } => {
                format!("{} packages without a workspaces field (linked by file:)", dirs.len())
            }
            Self::Plain => "no workspace manifest; the directory is the one project".to_owned(),
        }
    }
}

/// `prova init [--force]`.
pub fn init(start: &Path, args: InitArgs) -> anyhow::Result<Code> {
    let file = start.join(CONFIG_FILE);
    if file.exists() && !args.force {
        return Err(InitError::Exists(file).into());
    }
    let detected = detect(start)?;
    let locks = LOCKFILES.iter().copied().filter(|f| start.join(f).is_file()).collect::<Vec<_>>();
    let findings =
        if detected.is_js() { Some(examine(start, &file, &detected, &locks)?) } else { None };
    write(&file, &render::workspace(&detected, &locks, findings.as_ref()))?;
    let schema = super::schema::write_config_schema(start)?;
    let mut said = format!("wrote {} for {}\n", file.display(), detected.describe());
    if let Some(f) = &findings {
        write_projects(start, f, &mut said)?;
        report(f, &mut said);
    }
    let shown = schema.display();
    let _ = writeln!(said, "wrote {shown}, the schema its `#:schema` line names (for editors)");
    said.push_str(
        "next: `prova ls` to see the projects and tasks, `prova run build --all --dry-run`\n",
    );
    super::common::print(&said)?;
    Ok(Code::Ok)
}

/// Loads the JS workspace as prova will see it (a `[workspace]`-only `prova.toml`, put back
/// as it was when the load fails) and looks at its packages.
fn examine(
    start: &Path,
    file: &Path,
    detected: &Detected,
    locks: &[&str],
) -> Result<plan::Findings, InitError> {
    let previous = std::fs::read(file).ok();
    write(file, &render::workspace_table(detected, locks))?;
    match Workspace::load(start) {
        Ok(ws) => Ok(plan::find(&ws)),
        Err(e) => {
            let _ = match previous {
                Some(bytes) => std::fs::write(file, bytes),
                None => std::fs::remove_file(file),
            };
            Err(e.into())
        }
    }
}

/// Writes each package's own `prova.toml` where it needs more than the defaults (never over
/// one it has: that is named instead).
fn write_projects(root: &Path, f: &plan::Findings, said: &mut String) -> Result<(), InitError> {
    for p in &f.projects {
        let Some(o) = plan::override_of(f, p) else { continue };
        let what = describe_override(&o);
        if p.has_config || p.dir.is_empty() {
            let _ = writeln!(
                said,
                "note: {} needs {what}: add it to its prova.toml (init leaves it alone)",
                shown(&p.dir)
            );
            continue;
        }
        let depth = p.dir.split('/').count();
        let text = render::project(&o, &format!("{}{CONFIG_FILE}", "../".repeat(depth)));
        let path = root.join(&p.dir).join(CONFIG_FILE);
        write(&path, &text)?;
        let _ = writeln!(said, "wrote {}/{CONFIG_FILE}: {what}", p.dir);
    }
    Ok(())
}

fn describe_override(o: &plan::Override) -> String {
    let mut parts = Vec::new();
    if !o.deps.is_empty() {
        parts.push(format!(
            "deps {} (imported or linked, not listed in package.json)",
            o.deps.join(", ")
        ));
    }
    if let Some(cmd) = &o.whole_project {
        parts.push(format!("every file but its outputs as a build input (its build runs `{cmd}`)"));
    } else if o.inputs.is_some() {
        parts.push("the build inputs with its own outputs left out".to_owned());
    }
    if let Some(outputs) = &o.outputs {
        parts.push(format!("its own build outputs {}", outputs.join(", ")));
    }
    parts.join("; ")
}

/// Notes on what init could not settle by itself.
fn report(f: &plan::Findings, said: &mut String) {
    if let Some(inputs) = &f.inputs {
        let _ = writeln!(
            said,
            "build inputs: {} (from the build scripts and tsconfigs)",
            inputs.join(", ")
        );
    }
    for p in &f.projects {
        let Some(b) = &p.build else { continue };
        for out in &b.outside {
            let _ = writeln!(
                said,
                "note: {}: its build writes {out}, outside the project, which prova cannot restore; \
                 move it inside (outDir, tsBuildInfoFile)",
                shown(&p.dir)
            );
        }
        if b.builds_references {
            let _ = writeln!(
                said,
                "note: {}: `tsc -b` checks the sources of the projects its tsconfig references, so \
                 they are inputs of its build (an edit there re-runs it); `tsc -p` reads only their \
                 configs and outputs",
                shown(&p.dir)
            );
        }
    }
}

fn shown(dir: &str) -> &str {
    if dir.is_empty() { "." } else { dir }
}

fn write(path: &Path, text: &str) -> Result<(), InitError> {
    std::fs::write(path, text)
        .map_err(|source| InitError::Write { path: path.to_path_buf(), source })
}

/// What kind of workspace `dir` is.
pub fn detect(dir: &Path) -> Result<Detected, InitError> {
    let pkg = dir.join("package.json");
    let has_package = pkg.is_file();
    if has_package {
        let text = read(&pkg)?;
        let json: serde_json::Value = serde_json::from_str(text.trim_start_matches('\u{feff}'))
            .map_err(|e| InitError::Manifest { path: pkg.clone(), reason: e.to_string() })?;
        let ws = &json["workspaces"];
        if ws.is_array() || ws["packages"].is_array() {
            return Ok(Detected::Npm);
        }
    }
    if dir.join("pnpm-workspace.yaml").is_file() {
        return Ok(Detected::Pnpm);
    }
    let cargo = dir.join("Cargo.toml");
    if cargo.is_file() {
        let text = read(&cargo)?;
        let doc: toml::Table = toml::from_str(&text)
            .map_err(|e| InitError::Manifest { path: cargo.clone(), reason: e.to_string() })?;
        if let Some(members) =
            doc.get("workspace").and_then(|w| w.get("members")).and_then(|m| m.as_array())
        {
            let members =
                members.iter().filter_map(|m| m.as_str().map(str::to_owned)).collect::<Vec<_>>();
            return Ok(Detected::Cargo(members));
        }
    }
    let mut dirs = packages::package_dirs(dir);
    if has_package {
        dirs.insert(0, ".".to_owned());
    }
    if dirs.is_empty() { Ok(Detected::Plain) } else { Ok(Detected::Packages { dirs }) }
}

fn read(path: &Path) -> Result<String, InitError> {
    std::fs::read_to_string(path)
        .map_err(|e| InitError::Manifest { path: path.to_path_buf(), reason: e.to_string() })
}

/// Lockfiles whose change should re-run every task, listed in `fingerprint` when present.
const LOCKFILES: &[&str] = &["package-lock.json", "yarn.lock", "pnpm-lock.yaml", "Cargo.lock"];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cargo_members_become_projects() {
        let text =
            render(&Detected::Cargo(vec!["crates/*".into(), "cli".into()]), &["Cargo.lock"], None);
        assert!(text.contains("projects = [\"crates/*\", \"cli\"]"), "{text}");
        let parsed: Result<toml::Table, _> = toml::from_str(&text);
        assert!(parsed.is_ok(), "{text}");
    }

    #[test]
    fn packages_without_a_workspaces_field_are_found() {
        let t = tempfile::tempdir().unwrap();
        for f in ["server/package.json", "shared/package.json"] {
            let p = t.path().join(f);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, "{}").unwrap();
        }
        let d = detect(t.path()).unwrap();
        assert_eq!(d, Detected::Packages { dirs: vec!["server".into(), "shared".into()] });
        std::fs::write(t.path().join("package.json"), "{}").unwrap();
        let d = detect(t.path()).unwrap();
        assert_eq!(
            d,
            Detected::Packages { dirs: vec![".".into(), "server".into(), "shared".into()] }
        );
    }
}
