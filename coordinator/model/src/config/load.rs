//! The whole load, in order: find the root, read `[workspace]` and the task defaults, find
//! the project directories, read each project's `prova.toml` and `package.json`, settle the
//! names (unique), resolve the project deps (known names), merge the tasks. The first error
//! stops the load; files are visited in a fixed order (projects by directory, tables in file
//! order) so the same broken workspace always reports the same error.

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use prova_protocol::TaskId;
use toml::Spanned;

use super::discover::{self, Root};
use super::error::ConfigError;
use super::outputs::{self, Confinement};
use super::package_json;
use super::parse::{ConfigSource, read_file};
use super::schema::{ProjectFile, ProjectTable, TableKind, TaskTable, WorkspaceFile};
use super::task::{self, TaskLayer, check_globs, check_located_globs, check_name, check_name_at};
use super::{CONFIG_FILE, Located, Location};
use crate::suggest::did_you_mean;
use crate::workspace::{Project, TaskDef, Workspace, WorkspaceSettings};

impl Workspace {
    /// Finds the workspace root at or above `start_dir` (the nearest `prova.toml` with a
    /// `[workspace]` table) and loads it with all its projects. (Here, beside the loader,
    /// so the model in `crate::workspace` does not import the config layer above it.)
    pub fn load(start_dir: &Path) -> Result<Workspace, ConfigError> {
        load(start_dir)
    }

    /// Loads the workspace whose root [`discover::find_root`] found: [`Workspace::load`] for
    /// a caller that needed the root before the rest (a run takes the workspace lock and
    /// starts its file list there while the projects load).
    pub fn load_found(found: &Root) -> Result<Workspace, ConfigError> {
        load_root(found, &|_| {})
    }
}

/// The name of the workspace root when it is a project and names itself nowhere: fixed, so
/// task ids (and keys) do not depend on where the repository is checked out.
pub const ROOT_PROJECT_NAME: &str = "//";

/// Loads the workspace whose root is at or above `start_dir`.
pub fn load(start_dir: &Path) -> Result<Workspace, ConfigError> {
    load_counting(start_dir).map(|(ws, _)| ws)
}

/// What a load cost, in units that do not depend on the machine: the test that loading
/// stays linear in the size of the config compares them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LoadCounts {
    /// Bytes of every config file read.
    pub config_bytes: usize,
    /// Bytes looked at to turn spans into `line:col` locations (line indexes aside).
    pub location_bytes: usize,
}

/// [`load`], also returning what it cost.
pub fn load_counting(start_dir: &Path) -> Result<(Workspace, LoadCounts), ConfigError> {
    let (config_bytes, location_bytes) = (AtomicUsize::new(0), AtomicUsize::new(0));
    let count = |src: &ConfigSource<'_>| {
        config_bytes.fetch_add(src.text.len(), Ordering::Relaxed);
        location_bytes.fetch_add(src.bytes_scanned(), Ordering::Relaxed);
    };
    let ws = load_inner(start_dir, &count)?;
    let counts = LoadCounts {
        config_bytes: config_bytes.into_inner(),
        location_bytes: location_bytes.into_inner(),
    };
    Ok((ws, counts))
}

/// Counts what a config file cost ([`LoadCounts`]); called from the threads that read
/// projects.
type Count<'c> = &'c (dyn Fn(&ConfigSource<'_>) + Sync);

/// Projects read per thread at least: below that, a thread costs more than it saves.
const PROJECTS_PER_THREAD: usize = 64;

fn load_inner(start_dir: &Path, count: Count<'_>) -> Result<Workspace, ConfigError> {
    load_root(&discover::find_root(start_dir)?, count)
}

fn load_root(found: &Root, count: Count<'_>) -> Result<Workspace, ConfigError> {
    let Root { dir: root, file: config_file, text } = found;
    let src = ConfigSource::new(root, config_file, text);
    let file: WorkspaceFile = src.parse(TableKind::WorkspaceTop)?;
    let ws = file.workspace.unwrap_or_default();
    let fingerprint = check_located_globs(&src, "fingerprint", ws.fingerprint)?;
    // Without `projects`, a JS workspace's own list (package.json `workspaces`,
    // pnpm-workspace.yaml) says where the projects are.
    let project_globs = if ws.projects.is_empty() {
        let root_package = package_json::read(root, root)?;
        super::js::workspace_globs(root, &root_package.map(|p| p.workspaces).unwrap_or_default())
    } else {
        ws.projects
    };
    let settings = WorkspaceSettings {
        projects: project_globs.iter().map(|p| p.get_ref().clone()).collect(),
        fingerprint_at: fingerprint.iter().map(|p| p.at.to_string()).collect(),
        fingerprint: fingerprint.into_iter().map(|p| p.value).collect(),
        inputs: check_globs(&src, "inputs", ws.inputs)?,
        trees: ws.trees.map(|t| check_globs(&src, "trees", t)).transpose()?,
        runtime: super::policy::check_runtime(&src, ws.runtime)?,
        runtime_binary: ws.runtime_binary.is_none_or(|b| *b.get_ref()),
        retry: ws.retry.map(|r| super::task::check_retries(&src, r)).transpose()?,
        timeout: ws.timeout.map(|t| super::task::check_timeout(&src, t)).transpose()?,
        farm_required: ws.fallback == Some(super::schema::FallbackValue::None),
    };
    let defaults = check_tasks(&src, file.tasks)?;
    let dirs = discover::project_dirs(&src, &project_globs)?;
    let mut root_table = file.project;
    if let Some(table) = &root_table
        && dirs.first().is_none_or(|(dir, _)| !dir.is_empty())
    {
        return Err(ConfigError::MisplacedProjectTable {
            at: src.at(table.span()).into(),
            help: Some(
                "add \".\" to [workspace] projects to make the root a project, or move \
                 [project] into a project directory's prova.toml"
                    .to_owned(),
            ),
        });
    }
    let mut drafts = Vec::with_capacity(dirs.len());
    let mut members = dirs.as_slice();
    if let Some(((dir, matched_at), rest)) = dirs.split_first()
        && dir.is_empty()
    {
        drafts.push(read_project(&src, dir.clone(), matched_at, root_table.take(), count)?);
        members = rest;
    }
    drafts.extend(read_members(&src, members, count)?);
    settle_derived_names(&mut drafts);
    check_unique_names(&drafts)?;
    let names: Vec<&str> = drafts.iter().map(|d| d.name.as_str()).collect();
    let known: HashSet<&str> = names.iter().copied().collect();
    let confinement = Confinement::new(drafts.iter().map(|d| (d.dir.as_str(), d.name.as_str())));
    let mut projects = Vec::with_capacity(drafts.len());
    for draft in &drafts {
        projects.push(Project {
            deps: resolve_deps(draft, &names, &known)?,
            tasks: merge_tasks(draft, &confinement, &defaults)?,
            name: draft.name.clone(),
            dir: draft.dir.clone(),
            config_file: draft.config_file.clone(),
        });
    }
    count(&src);
    let ws = Workspace { root: root.clone(), config_file: config_file.clone(), settings, projects };
    super::overlap::check(&ws)?;
    Ok(ws)
}

/// Reads the (non-root) projects at `dirs`, on a few threads when there are many (each
/// project's `prova.toml` and `package.json` are read and parsed independently), returning
/// them in `dirs` order — and, when several are broken, the error of the first in that order,
/// as a sequential load would.
fn read_members(
    ws: &ConfigSource<'_>,
    dirs: &[(String, Location)],
    count: Count<'_>,
) -> Result<Vec<Draft>, ConfigError> {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let threads = cores.min(dirs.len() / PROJECTS_PER_THREAD).max(1);
    let (root, file, text) = (ws.root, ws.file, ws.text);
    let read_all = |chunk: &[(String, Location)]| -> Result<Vec<Draft>, ConfigError> {
        // Each thread its own view of the workspace file (its caches are not shared).
        let ws = ConfigSource::new(root, file, text);
        chunk
            .iter()
            .map(|(dir, matched_at)| read_project(&ws, dir.clone(), matched_at, None, count))
            .collect()
    };
    if threads == 1 {
        return read_all(dirs);
    }
    let per = dirs.len().div_ceil(threads);
    let parts: Vec<Result<Vec<Draft>, ConfigError>> = std::thread::scope(|s| {
        let handles: Vec<_> = dirs.chunks(per).map(|c| s.spawn(move || read_all(c))).collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic)))
            .collect()
    });
    let mut drafts = Vec::with_capacity(dirs.len());
    for part in parts {
        drafts.extend(part?);
    }
    Ok(drafts)
}

/// A project as read, before names are known to be unique and deps are checked.
struct Draft {
    dir: String,
    name: String,
    config_file: Option<PathBuf>,
    /// `[project] deps`.
    declared_deps: Vec<Located<String>>,
    /// `package.json` dependency names, workspace or not.
    package_deps: Vec<Located<String>>,
    /// The project's own `[tasks.X]`.
    own_tasks: BTreeMap<String, TaskLayer>,
    /// `package.json` `scripts`; `None` without a `package.json`.
    scripts: Option<BTreeMap<String, String>>,
    /// Whether `name` is the directory's own name (no `[project] name`, no `package.json`
    /// `name`): such a name that another project has too becomes the directory's path.
    derived: bool,
}

/// Reads the project at `dir`. The root project's `[project]` table comes from the workspace
/// file (`root_table`); its tasks are the workspace defaults, so it has no own tasks.
fn read_project(
    ws: &ConfigSource<'_>,
    dir: String,
    matched_at: &Location,
    root_table: Option<Spanned<ProjectTable>>,
    count: Count<'_>,
) -> Result<Draft, ConfigError> {
    let abs = if dir.is_empty() { ws.root.to_path_buf() } else { ws.root.join(&dir) };
    let package = package_json::read(ws.root, &abs)?;
    let own_file = abs.join(CONFIG_FILE);
    let (config_file, own_tasks, (name, declared_deps)) = if dir.is_empty() {
        (Some(ws.file.to_path_buf()), BTreeMap::new(), project_table(ws, root_table)?)
    } else if own_file.is_file() {
        let text = read_file(ws.root, &own_file)?;
        let src = ConfigSource::new(ws.root, &own_file, &text);
        let parsed: ProjectFile = src.parse(TableKind::ProjectTop)?;
        let tasks = check_tasks(&src, parsed.tasks)?;
        let table = project_table(&src, parsed.project)?;
        count(&src);
        (Some(own_file), tasks, table)
    } else {
        (None, BTreeMap::new(), (None, Vec::new()))
    };
    let set_name_help = || {
        let file =
            if dir.is_empty() { CONFIG_FILE.to_owned() } else { format!("{dir}/{CONFIG_FILE}") };
        Some(format!("set `name` under [project] in {file}"))
    };
    let derived = name.is_none() && package.as_ref().is_none_or(|p| p.name.is_none());
    let name = match (name, package.as_ref().and_then(|p| p.name.clone())) {
        (Some(n), _) => n,
        (None, Some(n)) => {
            check_name_at("project", &n.value, || n.at.clone(), set_name_help())?;
            n.value
        }
        (None, None) => {
            // The directory's own name (`libs/strings` → `strings`), like moon: short ids
            // for `-p` and `deps`; two projects with one basename must name themselves.
            let n = match dir.rsplit('/').next() {
                Some(base) if !dir.is_empty() => base.to_owned(),
                _ => ROOT_PROJECT_NAME.to_owned(),
            };
            check_name_at("project", &n, || matched_at.clone(), set_name_help())?;
            n
        }
    };
    Ok(Draft {
        dir,
        name,
        config_file,
        declared_deps,
        scripts: package.as_ref().map(|p| p.scripts.clone()),
        package_deps: package.map(|p| p.deps).unwrap_or_default(),
        own_tasks,
        derived,
    })
}

/// The checked `name` and the located `deps` of a `[project]` table in `src`.
fn project_table(
    src: &ConfigSource<'_>,
    table: Option<Spanned<ProjectTable>>,
) -> Result<(Option<String>, Vec<Located<String>>), ConfigError> {
    let Some(table) = table.map(Spanned::into_inner) else { return Ok((None, Vec::new())) };
    if let Some(name) = &table.name {
        check_name(src, "project", name)?;
    }
    let deps = table
        .deps
        .into_iter()
        .map(|d| Located::new(d.get_ref().clone(), src.at(d.span())))
        .collect();
    Ok((table.name.map(Spanned::into_inner), deps))
}

/// Checks every `[tasks.X]` table of a file, in file order.
fn check_tasks(
    src: &ConfigSource<'_>,
    tables: BTreeMap<Spanned<String>, Spanned<TaskTable>>,
) -> Result<BTreeMap<String, TaskLayer>, ConfigError> {
    let mut tables: Vec<_> = tables.into_iter().collect();
    tables.sort_by_key(|(name, _)| name.span().start);
    let mut out = BTreeMap::new();
    for (name, table) in tables {
        let layer = TaskLayer::check(src, &name, table)?;
        out.insert(name.into_inner(), layer);
    }
    Ok(out)
}

/// Directory names shared by several projects (`packages/a/src`, `packages/b/src`) become
/// the directories' workspace paths, which are unique; a name a project chose (`[project]
/// name`, `package.json` `name`) is kept, so a clash between two chosen names stays an error.
fn settle_derived_names(drafts: &mut [Draft]) {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    for d in drafts.iter() {
        *seen.entry(d.name.clone()).or_default() += 1;
    }
    for d in drafts.iter_mut().filter(|d| d.derived && !d.dir.is_empty()) {
        if seen.get(&d.name).is_some_and(|n| *n > 1) {
            d.name = d.dir.clone();
        }
    }
}

fn check_unique_names(drafts: &[Draft]) -> Result<(), ConfigError> {
    let mut seen: BTreeMap<&str, &str> = BTreeMap::new();
    for d in drafts {
        if let Some(first) = seen.insert(&d.name, &d.dir) {
            return Err(ConfigError::DuplicateProject {
                name: d.name.clone(),
                first: show_dir(first),
                second: show_dir(&d.dir),
                help: Some(
                    "project names must be unique: set a different `name` under [project] in \
                     one of their prova.toml files"
                        .to_owned(),
                ),
            });
        }
    }
    Ok(())
}

/// `[project] deps` (each must name a project other than this one), then the `package.json`
/// dependencies that name workspace projects; first mention wins.
fn resolve_deps(
    draft: &Draft,
    names: &[&str],
    known: &HashSet<&str>,
) -> Result<Vec<Located<String>>, ConfigError> {
    let mut seen = HashSet::new();
    let mut deps = Vec::new();
    for dep in &draft.declared_deps {
        if dep.value == draft.name {
            return Err(ConfigError::InvalidValue {
                at: dep.at.clone().into(),
                field: "deps".to_owned(),
                message: format!("project `{}` lists itself as a dependency", draft.name),
                help: None,
            });
        }
        if !known.contains(dep.value.as_str()) {
            return Err(ConfigError::UnknownProject {
                at: dep.at.clone().into(),
                project: draft.name.clone(),
                name: dep.value.clone(),
                help: did_you_mean(&dep.value, names.iter().copied()),
            });
        }
        if seen.insert(dep.value.as_str()) {
            deps.push(dep.clone());
        }
    }
    for dep in &draft.package_deps {
        let name = dep.value.as_str();
        if name != draft.name && known.contains(name) && seen.insert(name) {
            deps.push(dep.clone());
        }
    }
    Ok(deps)
}

/// Every workspace task (overridden where the project says so) plus the project-only ones,
/// each with its outputs checked against `confinement` for this project's directory.
fn merge_tasks(
    draft: &Draft,
    confinement: &Confinement<'_>,
    defaults: &BTreeMap<String, TaskLayer>,
) -> Result<BTreeMap<String, TaskDef>, ConfigError> {
    let (project, own) = (draft.name.as_str(), &draft.own_tasks);
    let mut tasks = BTreeMap::new();
    let confine = |name: &str, layers: [Option<&TaskLayer>; 2]| {
        // The outputs the merged task has: the project's own if it sets them, else the
        // default's; checked where they were written.
        let outputs = layers.iter().flatten().find_map(|l| l.outputs.as_ref());
        for pattern in outputs.into_iter().flatten() {
            if let Some(reason) = confinement.check(&draft.dir, &pattern.value) {
                return Err(ConfigError::UnconfinedOutput {
                    at: pattern.at.clone().into(),
                    pattern: pattern.value.clone(),
                    task: TaskId::new(project, name).to_string(),
                    reason,
                    help: Some(outputs::HELP.to_owned()),
                });
            }
        }
        Ok(())
    };
    for (name, default) in defaults {
        let def = match own.get(name) {
            Some(layer) => task::with_override(project, name, Some(default), layer)?,
            None => task::from_default(project, name, default)?,
        };
        confine(name, [own.get(name), Some(default)])?;
        tasks.insert(name.clone(), def);
    }
    for (name, layer) in own.iter().filter(|(n, _)| !defaults.contains_key(*n)) {
        confine(name, [Some(layer), None])?;
        tasks.insert(name.clone(), task::with_override(project, name, None, layer)?);
    }
    super::js::infer_scripts(&draft.dir, draft.scripts.as_ref(), &mut tasks);
    // A group (no command, none from a script) runs nothing a sandbox could confine.
    for name in tasks.iter().filter(|(_, d)| d.command.is_none()).map(|(n, _)| n) {
        super::policy::check_sandbox(
            &TaskId::new(project, name).to_string(),
            defaults.get(name).map(|l| &l.policy),
            own.get(name).map(|l| &l.policy),
            false,
        )?;
    }
    Ok(tasks)
}

fn show_dir(dir: &str) -> String {
    if dir.is_empty() { ".".to_owned() } else { dir.to_owned() }
}
