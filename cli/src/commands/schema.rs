//! `prova schema config [--write]`, `prova schema events`: the JSON Schemas prova ships,
//! compiled in, so an editor can validate `prova.toml` offline against the schema of the
//! prova that will read it. `--write` puts the config schema at `.prova/prova.schema.json` of
//! the workspace root — the path the `#:schema` line `prova init` writes names. `.prova/` is
//! prova's own directory: never a task's input nor an output, so the file changes no key.

use std::path::{Path, PathBuf};

use prova_coordinator::config::{JSON_SCHEMA, discover};

use crate::args::SchemaCommand;
use crate::exit::Code;

/// The event stream's schema (`schemas/events.json`).
pub const EVENTS_SCHEMA: &str = include_str!("../../../schemas/events.json");

/// Where the config schema is written, relative to the workspace root.
pub const SCHEMA_FILE: &str = ".prova/prova.schema.json";

/// The `#:schema` line of a root `prova.toml` (taplo resolves it against the file's
/// directory).
pub const SCHEMA_DIRECTIVE: &str = "#:schema ./.prova/prova.schema.json";

/// Writing the schema failed.
#[derive(Debug, thiserror::Error)]
#[error("cannot write {}: {source}", path.display())]
pub struct WriteError {
    path: PathBuf,
    source: std::io::Error,
}

/// `prova schema …`.
pub fn schema(start: &Path, cmd: SchemaCommand) -> anyhow::Result<Code> {
    let text = match cmd {
        SchemaCommand::Config { write: true } => {
            let root = discover::find_root(start)?.dir;
            let path = write_config_schema(&root)?;
            super::common::print(&format!("wrote {}\n", path.display()))?;
            return Ok(Code::Ok);
        }
        SchemaCommand::Config { write: false } => JSON_SCHEMA,
        SchemaCommand::Events => EVENTS_SCHEMA,
    };
    super::common::print(text)?;
    Ok(Code::Ok)
}

/// Writes the config schema to `root/.prova/prova.schema.json` (unless it is there already,
/// byte for byte); returns the path.
pub fn write_config_schema(root: &Path) -> Result<PathBuf, WriteError> {
    let path = root.join(SCHEMA_FILE);
    if std::fs::read(&path).is_ok_and(|b| b == JSON_SCHEMA.as_bytes()) {
        return Ok(path);
    }
    let err = |source| WriteError { path: path.clone(), source };
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(err)?;
    }
    std::fs::write(&path, JSON_SCHEMA).map_err(err)?;
    Ok(path)
}
