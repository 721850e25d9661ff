//! What `prova init` reads from the tsconfig a `tsc` build uses: the files the build reads
//! (the config and the configs it `extends`, the `include`/`files` roots, the configs of the
//! projects it `references` — and under `tsc -b` their sources too, which `--build` checks)
//! and the files it writes (`outDir`, `declarationDir`, the `.tsbuildinfo` wherever
//! TypeScript puts it). Every path is workspace-relative, `/`-separated.
//!
//! tsconfig files are JSON with comments and trailing commas ([`parse_jsonc`]). A relative
//! `extends` is followed; one naming a package (`@tsconfig/node20`) lives in an installed
//! tree, which prova keys on its own.

use std::collections::BTreeSet;
use std::path::Path;

use serde_json::{Map, Value};

/// How deep `extends` and `references` chains are followed.
const MAX_DEPTH: usize = 16;

/// Extensions tsc compiles from a directory include (`allowJs` adds the JS ones).
const TS_EXTENSIONS: &[&str] = &["ts", "tsx", "mts", "cts"];
const JS_EXTENSIONS: &[&str] = &["js", "jsx", "mjs", "cjs"];

/// What one `tsc` invocation reads and writes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct TsBuild {
    /// Files read: config files, source roots (`dir/**`), source files, extension globs.
    pub reads: BTreeSet<String>,
    /// Directories written (`outDir`, `declarationDir`).
    pub out_dirs: BTreeSet<String>,
    /// The `.tsbuildinfo` file, when the build writes one.
    pub buildinfo: Option<String>,
    /// Whether a referenced project was followed (its configs, or under `-b` its sources).
    pub follows_references: bool,
}

/// Command-line options of the `tsc` call that change where it reads or writes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct TscFlags {
    /// `-b`/`--build`.
    pub build: bool,
    /// `--outDir`, `--tsBuildInfoFile`, `--rootDir` (relative to the project directory).
    pub out_dir: Option<String>,
    pub buildinfo_file: Option<String>,
    pub root_dir: Option<String>,
    /// `--incremental` or `--composite`.
    pub incremental: bool,
}

/// Parses JSON with `//` and `/* */` comments and trailing commas, as tsc accepts it.
pub(super) fn parse_jsonc(text: &str) -> Option<Value> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'"' => {
                let start = i;
                i += 1;
                while i < bytes.len() && bytes[i] != b'"' {
                    i += if bytes[i] == b'\\' { 2 } else { 1 };
                }
                i = (i + 1).min(bytes.len());
                out.extend_from_slice(&bytes[start..i]);
            }
            b'/' if bytes.get(i + 1) == Some(&b'/') => {
                while i < bytes.len() && bytes[i] != b'\n' {
                    i += 1;
                }
            }
            b'/' if bytes.get(i + 1) == Some(&b'*') => {
                i += 2;
                while i + 1 < bytes.len() && !(bytes[i] == b'*' && bytes[i + 1] == b'/') {
                    i += 1;
                }
                i += 2;
            }
            b',' => {
                let next = bytes[i + 1..].iter().find(|b| !b.is_ascii_whitespace());
                if !matches!(next, Some(b'}' | b']')) {
                    out.push(b',');
                }
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    serde_json::from_slice(&out).ok()
}

/// Normalises `dir/rel` (both workspace-relative, `rel` may hold `.` and `..`); `None` when
/// it leaves the workspace or `rel` is absolute.
pub(super) fn join(dir: &str, rel: &str) -> Option<String> {
    if rel.starts_with('/') {
        return None;
    }
    let mut parts: Vec<&str> = dir.split('/').filter(|c| !c.is_empty()).collect();
    for c in rel.split('/') {
        match c {
            "" | "." => {}
            ".." => {
                parts.pop()?;
            }
            c => parts.push(c),
        }
    }
    Some(parts.join("/"))
}

fn parent(path: &str) -> &str {
    path.rsplit_once('/').map_or("", |(p, _)| p)
}

fn has_meta(s: &str) -> bool {
    s.contains(['*', '?', '[', '{'])
}

/// One config file of a chain, parsed, with the directory its relative paths start from.
struct Config {
    path: String,
    dir: String,
    json: Map<String, Value>,
}

/// Reads `path` (workspace-relative) under `root`; `None` when absent or not parseable.
fn read_config(root: &Path, path: &str) -> Option<Config> {
    let text = std::fs::read_to_string(root.join(path)).ok()?;
    let json = parse_jsonc(&text)?.as_object()?.clone();
    Some(Config { path: path.to_owned(), dir: parent(path).to_owned(), json })
}

/// The config at `path` and every config it extends by a relative path, child first.
fn chain(root: &Path, path: &str) -> Vec<Config> {
    let mut out: Vec<Config> = Vec::new();
    let mut queue = vec![path.to_owned()];
    while let Some(next) = queue.pop() {
        if out.len() >= MAX_DEPTH || out.iter().any(|c| c.path == next) {
            continue;
        }
        let Some(config) = read_config(root, &next) else { continue };
        let extends: Vec<String> = match config.json.get("extends") {
            Some(Value::String(s)) => vec![s.clone()],
            Some(Value::Array(a)) => {
                a.iter().filter_map(|v| v.as_str().map(str::to_owned)).collect()
            }
            _ => Vec::new(),
        };
        // Later entries of an `extends` array win, so they are visited first.
        for e in extends.iter().rev() {
            if !(e.starts_with("./") || e.starts_with("../")) {
                continue;
            }
            let Some(mut p) = join(&config.dir, e) else { continue };
            if !root.join(&p).is_file() && !p.ends_with(".json") {
                p.push_str(".json");
            }
            queue.push(p);
        }
        out.push(config);
    }
    out
}

/// The first value of compiler option `name` along the chain (child first), with the
/// directory of the config that set it.
fn option<'c>(chain: &'c [Config], name: &str) -> Option<(&'c Value, &'c str)> {
    chain.iter().find_map(|c| c.json.get("compilerOptions")?.get(name).map(|v| (v, c.dir.as_str())))
}

fn path_option(chain: &[Config], name: &str) -> Option<String> {
    let (v, dir) = option(chain, name)?;
    join(dir, v.as_str()?)
}

fn bool_option(chain: &[Config], name: &str) -> bool {
    option(chain, name).is_some_and(|(v, _)| v.as_bool() == Some(true))
}

/// What a `tsc` call (`flags`) on the config at `config` (workspace-relative; the project
/// directory is the config's) reads and writes.
pub(super) fn analyse(root: &Path, config: &str, flags: &TscFlags) -> Option<TsBuild> {
    let mut seen = BTreeSet::new();
    let mut build = TsBuild::default();
    let links = project(root, config, flags, &mut build, true)?;
    follow_references(root, links, flags.build, &mut build, &mut seen);
    Some(build)
}

/// Adds one project's reads (and, when `own`, its writes); returns its references.
fn project(
    root: &Path,
    config: &str,
    flags: &TscFlags,
    build: &mut TsBuild,
    own: bool,
) -> Option<Vec<String>> {
    let chain = chain(root, config);
    let first = chain.first()?;
    build.reads.extend(chain.iter().map(|c| c.path.clone()));
    if own || flags.build {
        build.reads.extend(sources(root, &chain));
    }
    if own {
        writes(&chain, flags, build);
    }
    // `references` are not inherited through `extends`.
    let refs = first.json.get("references").and_then(Value::as_array);
    let links = refs
        .into_iter()
        .flatten()
        .filter_map(|r| join(&first.dir, r.get("path")?.as_str()?))
        .map(|p| if p.ends_with(".json") { p } else { format!("{p}/tsconfig.json") })
        .filter(|p| root.join(p).is_file())
        .collect();
    Some(links)
}

fn follow_references(
    root: &Path,
    mut queue: Vec<String>,
    build_mode: bool,
    build: &mut TsBuild,
    seen: &mut BTreeSet<String>,
) {
    let flags = TscFlags { build: build_mode, ..TscFlags::default() };
    while let Some(next) = queue.pop() {
        if seen.len() >= MAX_DEPTH * 16 || !seen.insert(next.clone()) {
            continue;
        }
        build.follows_references = true;
        // `tsc -p` reads a referenced project's config to map its sources to its outputs;
        // `tsc -b` also checks its sources are older than its outputs, and its references.
        if let Some(links) = project(root, &next, &flags, build, false)
            && build_mode
        {
            queue.extend(links);
        }
    }
}

/// The files tsc compiles, as roots: `include` (default `**/*`) and `files`, each relative
/// to the config that set it.
fn sources(root: &Path, chain: &[Config]) -> BTreeSet<String> {
    let list = |key: &str| {
        chain.iter().find_map(|c| {
            let v = c.json.get(key)?.as_array()?;
            Some((
                v.iter().filter_map(|e| e.as_str().map(str::to_owned)).collect::<Vec<_>>(),
                c.dir.clone(),
            ))
        })
    };
    let mut out = BTreeSet::new();
    let extensions: Vec<&str> = if bool_option(chain, "allowJs") {
        TS_EXTENSIONS.iter().chain(JS_EXTENSIONS).copied().collect()
    } else {
        TS_EXTENSIONS.to_vec()
    };
    let (files, includes) = (list("files"), list("include"));
    if let Some((files, dir)) = &files {
        out.extend(files.iter().filter_map(|f| join(dir, f)));
    }
    let includes = match includes {
        Some(i) => i,
        None if files.is_some() => return out,
        None => (vec!["**/*".to_owned()], chain[0].dir.clone()),
    };
    let project_dir = chain[0].dir.as_str();
    for inc in &includes.0 {
        let Some(full) = join(&includes.1, inc) else { continue };
        let comps: Vec<&str> = full.split('/').collect();
        let literal = comps.iter().take_while(|c| !has_meta(c)).count();
        if literal == comps.len() {
            let is_file = root.join(&full).is_file() || Path::new(&full).extension().is_some();
            out.insert(if is_file { full } else { format!("{full}/**") });
            continue;
        }
        let prefix = comps[..literal].join("/");
        // An include at (or above) the project itself — `**/*` — reads every source file
        // there, not every file: README, lockfiles and the like stay out.
        if prefix.len() <= project_dir.len() && project_dir.starts_with(&prefix) {
            let base = if prefix.is_empty() { String::new() } else { format!("{prefix}/") };
            for ext in &extensions {
                out.insert(format!("{base}**/*.{ext}"));
            }
            if bool_option(chain, "resolveJsonModule") {
                out.insert(format!("{base}**/*.json"));
            }
        } else {
            out.insert(format!("{prefix}/**"));
        }
    }
    out
}

/// The directories and the `.tsbuildinfo` the build writes (TypeScript's own rule for
/// where the build info goes: `tsBuildInfoFile`; else beside `outFile`; else, with
/// `outDir`, the config's path relative to `rootDir` resolved in `outDir` — with
/// `rootDir: "src"`, `outDir: "dist"` that is `tsconfig.tsbuildinfo` at the project root —
/// or `outDir/<config name>` without `rootDir`; else beside the config).
fn writes(chain: &[Config], flags: &TscFlags, build: &mut TsBuild) {
    let project_dir = chain[0].dir.clone();
    let flag = |v: &Option<String>| v.as_deref().and_then(|p| join(&project_dir, p));
    let out_dir = flag(&flags.out_dir).or_else(|| path_option(chain, "outDir"));
    let root_dir = flag(&flags.root_dir).or_else(|| path_option(chain, "rootDir"));
    if bool_option(chain, "noEmit") {
        return;
    }
    build.out_dirs.extend(out_dir.clone());
    build.out_dirs.extend(path_option(chain, "declarationDir"));
    let incremental = flags.incremental
        || flags.build
        || bool_option(chain, "composite")
        || bool_option(chain, "incremental");
    let explicit = flag(&flags.buildinfo_file).or_else(|| path_option(chain, "tsBuildInfoFile"));
    build.buildinfo = match explicit {
        Some(p) => Some(p),
        None if !incremental => None,
        None => Some(default_buildinfo(chain, out_dir.as_deref(), root_dir.as_deref())),
    };
}

fn default_buildinfo(chain: &[Config], out_dir: Option<&str>, root_dir: Option<&str>) -> String {
    if let Some(out_file) = path_option(chain, "outFile").or_else(|| path_option(chain, "out")) {
        let stem = out_file.rsplit_once('.').map_or(out_file.as_str(), |(s, _)| s);
        return format!("{stem}.tsbuildinfo");
    }
    let config = chain[0].path.as_str();
    let stem = config.strip_suffix(".json").unwrap_or(config);
    let name = stem.rsplit('/').next().unwrap_or(stem);
    let base = match (out_dir, root_dir) {
        (Some(out), Some(root_dir)) => {
            // The config's path relative to rootDir, resolved in outDir.
            let ups = root_dir.split('/').filter(|c| !c.is_empty()).count();
            let rel = format!("{}{stem}", "../".repeat(ups));
            join(out, &rel).unwrap_or_else(|| stem.to_owned())
        }
        (Some(out), None) => format!("{out}/{name}"),
        (None, _) => stem.to_owned(),
    };
    format!("{base}.tsbuildinfo")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jsonc_comments_and_trailing_commas() {
        let v = parse_jsonc(
            "{\n // a comment\n \"a\": \"x // not a comment\", /* b */ \"b\": [1, 2,],\n}\n",
        )
        .unwrap();
        assert_eq!(v["a"], "x // not a comment");
        assert_eq!(v["b"], serde_json::json!([1, 2]));
        assert!(parse_jsonc("{ \"a\": \"\\\"/*\" }").is_some());
    }

    #[test]
    fn joins_stay_inside_the_workspace() {
        assert_eq!(join("packages/a", "../../tsconfig.base.json").unwrap(), "tsconfig.base.json");
        assert_eq!(join("packages/a", "./src").unwrap(), "packages/a/src");
        assert_eq!(join("a", "../../x"), None);
    }

    fn write(root: &Path, rel: &str, text: &str) {
        let p = root.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }

    #[test]
    fn a_composite_package_reads_its_chain_and_writes_buildinfo_at_its_root() {
        let t = tempfile::tempdir().unwrap();
        let r = t.path();
        write(
            r,
            "tsconfig.base.json",
            r#"{"compilerOptions": {"composite": true, "rootDir": "."}}"#,
        );
        write(
            r,
            "packages/a/tsconfig.json",
            r#"{ "extends": "../../tsconfig.base.json", // shared
                "compilerOptions": {"rootDir": "src", "outDir": "dist"},
                "include": ["src/**/*.ts"], "references": [{"path": "../b"}], }"#,
        );
        write(
            r,
            "packages/b/tsconfig.json",
            r#"{"extends": "../../tsconfig.base", "include": ["lib"]}"#,
        );
        let p = analyse(r, "packages/a/tsconfig.json", &TscFlags::default()).unwrap();
        let reads: Vec<&str> = p.reads.iter().map(String::as_str).collect();
        assert_eq!(
            reads,
            [
                "packages/a/src/**",
                "packages/a/tsconfig.json",
                "packages/b/tsconfig.json",
                "tsconfig.base.json"
            ]
        );
        assert_eq!(p.out_dirs.iter().collect::<Vec<_>>(), ["packages/a/dist"]);
        assert_eq!(p.buildinfo.as_deref(), Some("packages/a/tsconfig.tsbuildinfo"));
        // `tsc -b` checks the referenced project's sources too.
        let b =
            analyse(r, "packages/a/tsconfig.json", &TscFlags { build: true, ..Default::default() });
        assert!(b.unwrap().reads.contains("packages/b/lib/**"));
    }

    #[test]
    fn buildinfo_follows_typescripts_rule() {
        let t = tempfile::tempdir().unwrap();
        let r = t.path();
        write(
            r,
            "a/tsconfig.json",
            r#"{"compilerOptions": {"incremental": true, "outDir": "out"}}"#,
        );
        write(r, "b/tsconfig.build.json", r#"{"compilerOptions": {"composite": true}}"#);
        write(
            r,
            "c/tsconfig.json",
            r#"{"compilerOptions": {"outDir": "dist"}, "include": ["**/*"]}"#,
        );
        let one = |p: &str, f: &TscFlags| analyse(r, p, f).unwrap();
        assert_eq!(
            one("a/tsconfig.json", &TscFlags::default()).buildinfo.as_deref(),
            Some("a/out/tsconfig.tsbuildinfo")
        );
        assert_eq!(
            one("b/tsconfig.build.json", &TscFlags::default()).buildinfo.as_deref(),
            Some("b/tsconfig.build.tsbuildinfo")
        );
        let c = one("c/tsconfig.json", &TscFlags::default());
        assert_eq!(c.buildinfo, None, "neither incremental nor --build");
        assert!(c.reads.contains("c/**/*.ts") && !c.reads.contains("c/**"), "{:?}", c.reads);
        let flags = TscFlags { build: true, ..Default::default() };
        assert_eq!(
            one("c/tsconfig.json", &flags).buildinfo.as_deref(),
            Some("c/dist/tsconfig.tsbuildinfo")
        );
    }
}
