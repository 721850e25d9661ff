//! What `prova init` finds out about each project of a JS workspace: what its build reads
//! and writes ([`BuildPlan`], from its `build` script and tsconfig), and which workspace
//! packages it needs built first that its `package.json` does not list (a `file:` link under
//! another name, an import of an unlisted package). [`Findings`] turns the plans into the
//! workspace's `[tasks.build]` (narrow inputs: the union of every build's reads; outputs:
//! the most common set) and the few per-project overrides where a project differs.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use prova_coordinator::workspace::Workspace;

use super::script::{self, Shape};
use super::tsconfig::{self, TsBuild};

/// What one project's build reads and writes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BuildPlan {
    /// Input patterns (project-relative, or `//` workspace-relative); `None` when the build
    /// runs something whose reads prova cannot tell: every file of the project is an input.
    pub inputs: Option<BTreeSet<String>>,
    /// Output patterns, project-relative.
    pub outputs: BTreeSet<String>,
    /// The command that made `inputs` unknown.
    pub unknown: Option<String>,
    /// Outputs outside the project (which prova cannot restore), workspace-relative.
    pub outside: Vec<String>,
    /// Its `tsc -b` follows project references (their sources are inputs).
    pub builds_references: bool,
    /// Source directories (absolute) to look for imports in.
    pub source_roots: Vec<std::path::PathBuf>,
}

/// One project as init sees it.
#[derive(Debug)]
pub struct Found {
    pub dir: String,
    pub name: String,
    pub build: Option<BuildPlan>,
    /// Workspace packages to build first that package.json does not list.
    pub missing_deps: BTreeSet<String>,
    /// Whether the project already has its own prova.toml (init does not touch it).
    pub has_config: bool,
}

/// Every project, and what the workspace file should say.
#[derive(Debug, Default)]
pub struct Findings {
    pub projects: Vec<Found>,
    /// `[tasks.build] inputs`, when every understood build's reads are known: the reads,
    /// then the default outputs they could match left out ([`leave_out`]).
    pub inputs: Option<Vec<String>>,
    /// The reads of `inputs` alone, before any output is left out.
    pub reads: Vec<String>,
    pub outputs: Vec<String>,
}

/// The output patterns of a project whose build writes nowhere prova can tell.
pub(super) const DEFAULT_OUTPUTS: &[&str] = &["dist/**"];

/// Looks at every project of `ws`.
pub(super) fn find(ws: &Workspace) -> Findings {
    let root = ws.root.as_path();
    let dirs: BTreeMap<&str, &str> =
        ws.projects.iter().map(|p| (p.dir.as_str(), p.name.as_str())).collect();
    let names: BTreeSet<&str> = dirs.values().copied().collect();
    let mut projects: Vec<Found> = Vec::new();
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for p in &ws.projects {
        edges.insert(p.name.clone(), p.deps.iter().map(|d| d.value.clone()).collect());
    }
    for p in &ws.projects {
        let abs = if p.dir.is_empty() { root.to_path_buf() } else { root.join(&p.dir) };
        let manifest = read_manifest(&abs);
        let build = manifest.as_ref().and_then(|m| {
            m.scripts
                .contains_key("build")
                .then(|| plan(root, &p.dir, &script::shape(&m.scripts, "build")))
        });
        let mut wanted: BTreeSet<String> = BTreeSet::new();
        if let Some(m) = &manifest {
            for spec in &m.links {
                let target = tsconfig::join(&p.dir, spec);
                if let Some(name) = target.as_deref().and_then(|t| dirs.get(t)) {
                    wanted.insert((*name).to_owned());
                }
            }
        }
        let roots =
            build.as_ref().map_or_else(|| vec![abs.join("src")], |b| b.source_roots.clone());
        wanted.extend(super::imports::imported(&roots, &names));
        let mut missing = BTreeSet::new();
        for dep in wanted {
            let known = edges.get(&p.name).is_some_and(|d| d.contains(&dep));
            if dep == p.name || known || reaches(&edges, &dep, &p.name) {
                continue;
            }
            edges.entry(p.name.clone()).or_default().insert(dep.clone());
            missing.insert(dep);
        }
        projects.push(Found {
            dir: p.dir.clone(),
            name: p.name.clone(),
            build,
            missing_deps: missing,
            has_config: p.config_file.is_some() && !p.dir.is_empty(),
        });
    }
    let (reads, outputs) = defaults(&projects);
    let inputs = reads.as_ref().map(|r| leave_out(r, &outputs));
    Findings { projects, inputs, reads: reads.unwrap_or_default(), outputs }
}

/// `reads` with an exclusion for each of `outputs` one of them could match: tsc leaves its
/// `outDir` out of a default `include` (`**/*` reads `src/a.ts`, not `dist/a.d.ts`), and a
/// declared input a task's output can match is a config error (prova would clean it, and
/// a restore would replace it). Patterns of a project at the same directory, so checked
/// at the workspace root (`""`): both lists are project-relative alike.
pub(super) fn leave_out(reads: &[String], outputs: &[String]) -> Vec<String> {
    use prova_coordinator::config::intersect::PathPattern;
    let shapes: Vec<PathPattern> =
        reads.iter().filter(|r| !r.starts_with('!')).map(|r| PathPattern::new("", r)).collect();
    let mut out = reads.to_vec();
    for o in outputs.iter().filter(|o| !o.starts_with('!')) {
        let shape = PathPattern::new("", o);
        if shapes.iter().any(|r| r.intersects(&shape)) {
            out.push(format!("!{o}"));
        }
    }
    out
}

/// Whether `from` reaches `to` along `edges`.
fn reaches(edges: &BTreeMap<String, BTreeSet<String>>, from: &str, to: &str) -> bool {
    let mut stack = vec![from];
    let mut seen = BTreeSet::new();
    while let Some(n) = stack.pop() {
        if n == to {
            return true;
        }
        if seen.insert(n) {
            stack.extend(edges.get(n).into_iter().flatten().map(String::as_str));
        }
    }
    false
}

/// The parts of a `package.json` init reads.
struct Manifest {
    scripts: BTreeMap<String, String>,
    /// `file:`/`link:` dependency paths (project-relative).
    links: Vec<String>,
}

fn read_manifest(dir: &Path) -> Option<Manifest> {
    let text = std::fs::read_to_string(dir.join("package.json")).ok()?;
    let json: serde_json::Value = serde_json::from_str(text.trim_start_matches('\u{feff}')).ok()?;
    let scripts = json["scripts"]
        .as_object()
        .map(|m| m.iter().filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned()))).collect())
        .unwrap_or_default();
    let mut links = Vec::new();
    for section in ["dependencies", "devDependencies", "optionalDependencies"] {
        for spec in json[section].as_object().into_iter().flatten().filter_map(|(_, v)| v.as_str())
        {
            if let Some(path) = spec.strip_prefix("file:").or_else(|| spec.strip_prefix("link:")) {
                links.push(path.trim_end_matches('/').to_owned());
            }
        }
    }
    Some(Manifest { scripts, links })
}

/// The plan of the build of the project at `dir` whose script is `shape`.
fn plan(root: &Path, dir: &str, shape: &Shape) -> BuildPlan {
    let mut out = BuildPlan::default();
    let mut reads: BTreeSet<String> = ["package.json".to_owned()].into();
    let mut known = !shape.tsc.is_empty();
    for call in &shape.tsc {
        let Some(config) = tsconfig::join(dir, &call.config) else {
            known = false;
            continue;
        };
        let Some(ts) = tsconfig::analyse(root, &config, &call.flags) else {
            out.unknown.get_or_insert(format!("tsc (no {config})"));
            known = false;
            continue;
        };
        out.builds_references |= call.flags.build && ts.follows_references;
        add_ts(root, dir, &ts, &mut reads, &mut out);
    }
    if let Some(other) = shape.other.first() {
        out.unknown = Some(other.clone());
        known = false;
    }
    if out.outputs.is_empty() {
        out.outputs.extend(DEFAULT_OUTPUTS.iter().map(|s| (*s).to_owned()));
    }
    if out.source_roots.is_empty() {
        let abs = root.join(dir);
        out.source_roots.push(if abs.join("src").is_dir() { abs.join("src") } else { abs });
    }
    out.inputs = known.then_some(reads);
    out
}

fn add_ts(root: &Path, dir: &str, ts: &TsBuild, reads: &mut BTreeSet<String>, out: &mut BuildPlan) {
    for r in &ts.reads {
        reads.insert(pattern(dir, r));
        let own = relative(dir, r);
        if let Some(own) = own {
            let base = own.split("**").next().unwrap_or("").trim_end_matches('/');
            let abs = if base.is_empty() { root.join(dir) } else { root.join(dir).join(base) };
            if abs.is_dir() && r.contains("**") && !out.source_roots.contains(&abs) {
                out.source_roots.push(abs);
            }
        }
    }
    for d in &ts.out_dirs {
        match relative(dir, d).filter(|r| !r.is_empty()) {
            Some(r) => {
                out.outputs.insert(format!("{r}/**"));
            }
            None => out.outside.push(d.clone()),
        }
    }
    if let Some(info) = &ts.buildinfo {
        let covered = ts.out_dirs.iter().any(|d| prova_protocol::globs::is_within(info, d));
        match relative(dir, info) {
            Some(_) if covered => {}
            Some(r) => {
                out.outputs.insert(r);
            }
            None => out.outside.push(info.clone()),
        }
    }
}

/// `path` (workspace-relative) relative to project `dir`, when inside it.
fn relative(dir: &str, path: &str) -> Option<String> {
    if dir.is_empty() {
        return Some(path.to_owned());
    }
    if path == dir {
        return Some(String::new());
    }
    path.strip_prefix(dir)?.strip_prefix('/').map(str::to_owned)
}

/// A prova input pattern for workspace path `path` seen from project `dir`.
fn pattern(dir: &str, path: &str) -> String {
    match relative(dir, path) {
        Some(r) if !r.is_empty() => r,
        _ => format!("//{path}"),
    }
}

/// The workspace's `[tasks.build]` reads (the union of the understood builds' reads, the
/// configs of several projects folded into one glob) and outputs (the most common set).
fn defaults(projects: &[Found]) -> (Option<Vec<String>>, Vec<String>) {
    let plans: Vec<&BuildPlan> = projects.iter().filter_map(|p| p.build.as_ref()).collect();
    let mut counts: BTreeMap<&BTreeSet<String>, usize> = BTreeMap::new();
    for p in &plans {
        *counts.entry(&p.outputs).or_default() += 1;
    }
    let outputs = counts.iter().max_by_key(|(_, n)| **n).map_or_else(
        || DEFAULT_OUTPUTS.iter().map(|s| (*s).to_owned()).collect(),
        |(s, _)| s.iter().cloned().collect(),
    );
    let reads: BTreeSet<String> =
        plans.iter().filter_map(|p| p.inputs.as_ref()).flatten().cloned().collect();
    if reads.is_empty() {
        return (None, outputs);
    }
    (Some(fold_configs(reads)), outputs)
}

/// `//packages/a/tsconfig.json` and `//packages/b/tsconfig.json` → `//packages/*/tsconfig.json`
/// (a tsconfig edit is rare; the list stays short). Sources are never folded: a leaf's
/// edit must not move every key. Project-relative patterns first, then `//` ones.
fn fold_configs(reads: BTreeSet<String>) -> Vec<String> {
    let mut groups: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
    let mut out: Vec<String> = Vec::new();
    for r in reads {
        let folded = r.strip_prefix("//").filter(|p| p.ends_with(".json")).and_then(|p| {
            let (dir, file) = p.rsplit_once('/')?;
            let (parent, _) = dir.rsplit_once('/').unwrap_or(("", dir));
            Some((parent.to_owned(), file.to_owned()))
        });
        match folded {
            Some(key) => groups.entry(key).or_default().push(r),
            None => out.push(r),
        }
    }
    for ((parent, file), members) in groups {
        if members.len() > 1 {
            let prefix = if parent.is_empty() { String::new() } else { format!("{parent}/") };
            out.push(format!("//{prefix}*/{file}"));
        } else {
            out.extend(members);
        }
    }
    out.sort_by_key(|p| (p.starts_with("//"), p.clone()));
    out.dedup();
    out
}

/// What a project's own prova.toml must say beyond the workspace defaults: its outputs when
/// they differ, every file as an input when its build is not understood, its missing deps.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Override {
    pub outputs: Option<Vec<String>>,
    /// The workspace's reads with this project's own outputs left out, when they differ
    /// from the defaults' (its outputs are not the default ones); with `whole_project`,
    /// every file of it but its outputs.
    pub inputs: Option<Vec<String>>,
    pub whole_project: Option<String>,
    pub deps: Vec<String>,
}

/// The override `p` needs under `f`'s defaults (`None`: the defaults fit).
pub(super) fn override_of(f: &Findings, p: &Found) -> Option<Override> {
    let mut o = Override { deps: p.missing_deps.iter().cloned().collect(), ..Override::default() };
    if let Some(b) = &p.build {
        let own: Vec<String> = b.outputs.iter().cloned().collect();
        if f.inputs.is_some() && b.inputs.is_none() {
            o.whole_project = Some(b.unknown.clone().unwrap_or_default());
            o.inputs = Some(leave_out(&["**".to_owned()], &own));
        } else if let Some(defaults) = &f.inputs {
            let inputs = leave_out(&f.reads, &own);
            if inputs != *defaults {
                o.inputs = Some(inputs);
            }
        }
        if own != f.outputs {
            o.outputs = Some(own);
        }
    }
    (o != Override::default()).then_some(o)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configs_of_several_projects_fold_but_sources_do_not() {
        let reads: BTreeSet<String> = [
            "src/**",
            "package.json",
            "//packages/a/tsconfig.json",
            "//packages/b/tsconfig.json",
            "//packages/b/src/**",
            "//tsconfig.base.json",
        ]
        .map(str::to_owned)
        .into();
        assert_eq!(
            fold_configs(reads),
            [
                "package.json",
                "src/**",
                "//packages/*/tsconfig.json",
                "//packages/b/src/**",
                "//tsconfig.base.json"
            ]
        );
    }

    #[test]
    fn outputs_the_reads_could_match_are_left_out() {
        let reads: Vec<String> = ["package.json", "**/*.ts", "**/*.cts", "//tsconfig.base.json"]
            .map(str::to_owned)
            .into();
        let outputs: Vec<String> = ["dist/**", "tsconfig.tsbuildinfo"].map(str::to_owned).into();
        let got = leave_out(&reads, &outputs);
        // A literal output may be a directory (the overlap check reads it with what lies
        // under it), so `tsconfig.tsbuildinfo` is left out of `**/*.ts` too, as the check
        // that loads the config demands.
        assert_eq!(got[4..], ["!dist/**", "!tsconfig.tsbuildinfo"], "{got:?}");
        let narrow: Vec<String> = ["src/**", "package.json"].map(str::to_owned).into();
        assert_eq!(leave_out(&narrow, &outputs), narrow, "nothing to leave out");
        let everything: Vec<String> = vec!["**".to_owned()];
        assert_eq!(leave_out(&everything, &outputs), ["**", "!dist/**", "!tsconfig.tsbuildinfo"]);
    }

    #[test]
    fn patterns_are_project_relative_inside_and_workspace_relative_outside() {
        assert_eq!(pattern("packages/a", "packages/a/src/**"), "src/**");
        assert_eq!(pattern("packages/a", "packages/ab/x"), "//packages/ab/x");
        assert_eq!(pattern("", "src/**"), "src/**");
        assert_eq!(relative("packages/a", "packages/a"), Some(String::new()));
    }
}
