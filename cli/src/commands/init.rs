//! `prova init`: looks at the directory for an npm/yarn workspace (`package.json`
//! `workspaces`), a pnpm workspace (`pnpm-workspace.yaml`) or a Cargo workspace (`Cargo.toml`
//! `[workspace] members`) and writes a small commented `prova.toml` that `prova run` accepts.
//! What prova already infers (JS project globs, tasks from `package.json` scripts) is left
//! out of the file so it stays small. An existing `prova.toml` is kept unless `--force`.
//!
//! The file's first line is `#:schema ./.prova/prova.schema.json`, which taplo (Even Better
//! TOML) reads to validate and complete the file; init writes that schema there, the copy
//! compiled into this binary (`prova schema config --write` refreshes it after an upgrade or
//! in a fresh clone, where `.prova/` is usually ignored).

use std::path::{Path, PathBuf};

use crate::args::InitArgs;
use crate::exit::Code;

/// Why `prova init` could not write the file.
#[derive(Debug, thiserror::Error)]
pub enum InitError {
    /// The file is there and `--force` was not given.
    #[error("{} already exists; pass --force to overwrite it", .0.display())]
    Exists(PathBuf),
    /// A manifest that decides the kind of workspace could not be read or parsed.
    #[error("cannot read {}: {reason}", path.display())]
    Manifest { path: PathBuf, reason: String },
    /// Writing `prova.toml` failed.
    #[error("cannot write {}: {source}", path.display())]
    Write { path: PathBuf, source: std::io::Error },
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
    /// None of those: the directory itself is the one project.
    Plain,
}

/// `prova init [--force]`.
pub fn init(start: &Path, args: InitArgs) -> anyhow::Result<Code> {
    let file = start.join(prova_coordinator::config::CONFIG_FILE);
    if file.exists() && !args.force {
        return Err(InitError::Exists(file).into());
    }
    let detected = detect(start)?;
    let locks = LOCKFILES.iter().copied().filter(|f| start.join(f).is_file()).collect::<Vec<_>>();
    let text = render(&detected, &locks);
    std::fs::write(&file, text)
        .map_err(|source| InitError::Write { path: file.clone(), source })?;
    let schema = super::schema::write_config_schema(start)?;
    let what = match &detected {
        Detected::Npm => "an npm/yarn workspace (package.json workspaces)".to_owned(),
        Detected::Pnpm => "a pnpm workspace (pnpm-workspace.yaml)".to_owned(),
        Detected::Cargo(m) => format!("a Cargo workspace ({} member globs)", m.len()),
        Detected::Plain => "no workspace manifest; the directory is the one project".to_owned(),
    };
    super::common::print(&format!(
        "wrote {} for {what}\nwrote {}, the schema its `#:schema` line names (for editors)\n\
         next: `prova ls` to see the projects and tasks, `prova run build --all --dry-run`\n",
        file.display(),
        schema.display()
    ))?;
    Ok(Code::Ok)
}

/// What kind of workspace `dir` is.
pub fn detect(dir: &Path) -> Result<Detected, InitError> {
    let pkg = dir.join("package.json");
    if pkg.is_file() {
        let text = read(&pkg)?;
        let json: serde_json::Value = serde_json::from_str(&text)
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
    Ok(Detected::Plain)
}

fn read(path: &Path) -> Result<String, InitError> {
    std::fs::read_to_string(path)
        .map_err(|e| InitError::Manifest { path: path.to_path_buf(), reason: e.to_string() })
}

/// Lockfiles whose change should re-run every task, listed in `fingerprint` when present.
const LOCKFILES: &[&str] = &["package-lock.json", "yarn.lock", "pnpm-lock.yaml", "Cargo.lock"];

/// What the file is; after the schema directive, a TOML comment too.
const HEADER: &str = "\
# prova.toml: the workspace root of prova (written by `prova init`).
# `prova ls` lists the projects and tasks this file gives; `prova run build --all` runs them.
";

const JS_TASKS: &str = "\
# Tasks without a `command` run the package.json script of their name in each project that
# has one; projects without that script have no such task.
[tasks.build]
# `^build`: the build of every workspace package this one depends on runs first.
deps = [\"^build\"]
# What the task writes; restored from the cache on a hit.
outputs = [\"dist/**\"]

[tasks.test]
deps = [\"build\"]

[tasks.lint]
";

/// The text of the `prova.toml` for `detected`.
pub fn render(detected: &Detected, locks: &[&str]) -> String {
    let mut out = format!("{}\n{HEADER}", super::schema::SCHEMA_DIRECTIVE);
    let fingerprint = if locks.is_empty() {
        "# Root files whose change re-runs every task:\n# fingerprint = [\"yarn.lock\"]\n\n"
            .to_owned()
    } else {
        let list = locks.iter().map(|m| format!("{m:?}")).collect::<Vec<_>>().join(", ");
        format!("# Root files whose change re-runs every task:\nfingerprint = [{list}]\n\n")
    };
    match detected {
        Detected::Npm => {
            out.push_str(
                "[workspace]\n# Projects: the `workspaces` globs of package.json (set `projects` \
                 here to override).\n",
            );
            out.push_str(&fingerprint);
            out.push_str(JS_TASKS);
        }
        Detected::Pnpm => {
            out.push_str(
                "[workspace]\n# Projects: the `packages` globs of pnpm-workspace.yaml (set \
                 `projects` here to override).\n",
            );
            out.push_str(&fingerprint);
            out.push_str(JS_TASKS);
        }
        Detected::Cargo(members) => {
            let list = members.iter().map(|m| format!("{m:?}")).collect::<Vec<_>>().join(", ");
            out.push_str(&format!(
                "[workspace]\n# The Cargo workspace members, one project each.\nprojects = \
                 [{list}]\n{fingerprint}\
                 # cargo run in a member's directory builds that package.\n\
                 [tasks.build]\ncommand = \"cargo build\"\n\n\
                 [tasks.test]\ncommand = \"cargo test\"\ndeps = [\"build\"]\n"
            ));
        }
        Detected::Plain => {
            out.push_str(
                "[workspace]\n# The root directory is the one project; list globs such as \
                 \"packages/*\" to add more.\nprojects = [\".\"]\n\n\
                 [tasks.build]\n# The shell command the task runs, in the project's \
                 directory.\ncommand = \"echo build: edit prova.toml\"\n# outputs = \
                 [\"dist/**\"]\n",
            );
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cargo_members_become_projects() {
        let text = render(&Detected::Cargo(vec!["crates/*".into(), "cli".into()]), &["Cargo.lock"]);
        assert!(text.contains("projects = [\"crates/*\", \"cli\"]"), "{text}");
        let parsed: Result<toml::Table, _> = toml::from_str(&text);
        assert!(parsed.is_ok(), "{text}");
    }

    #[test]
    fn the_first_line_names_the_schema() {
        for d in [Detected::Npm, Detected::Pnpm, Detected::Cargo(vec![]), Detected::Plain] {
            let text = render(&d, &[]);
            assert_eq!(text.lines().next(), Some(super::super::schema::SCHEMA_DIRECTIVE));
        }
    }

    #[test]
    fn every_kind_renders_valid_toml() {
        for d in [Detected::Npm, Detected::Pnpm, Detected::Plain] {
            let text = render(&d, &[]);
            assert!(toml::from_str::<toml::Table>(&text).is_ok(), "{d:?}: {text}");
        }
    }
}
