//! The coordinator's modules form layers: each may import only modules below it. This test
//! reads each coordinator crate's `src/` and fails on an import that points up (or sideways
//! to a module not yet placed), which also rules out any cycle between modules; and it reads
//! their manifests, which may depend only on the crates below. Test code (`*_tests.rs`,
//! `tests.rs`, `test_util.rs`, inline `#[cfg(test)] mod … { … }`) may reach anywhere.
//!
//! Placing a new top-level module: add it to [`LAYERS`] at the lowest place its imports
//! allow (in a layer its crate holds, see [`CRATES`]), and to ARCHITECTURE.md's crate map.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// What a crate of the coordinator holds.
#[derive(Clone, Copy, Debug)]
enum Holds {
    /// The modules of these layers (its `lib.rs` declares exactly those), each checked
    /// against the order of [`LAYERS`].
    Layers(&'static [&'static str]),
    /// One module of [`LAYERS`]: the crate is that module (`prova-coordinator` re-exports it
    /// under its name); its own modules are its own business, and anything else it names
    /// through `crate::` (a lower crate's module under an alias) must be below it.
    Module(&'static str),
}

/// The prova crates below all of the coordinator's, which any of them may depend on.
const LEAVES: &[&str] = &["prova-protocol", "prova-reapi-proto"];

/// The coordinator's crates, bottom to top: (package, directory under `coordinator/`, the
/// prova crates its manifest may depend on, what it holds). A crate above may use those
/// below, never the reverse: the manifests fix the layers.
const CRATES: &[(&str, &str, &[&str], Holds)] = &[
    ("prova-model", "model", &["prova-protocol"], Holds::Layers(&["model"])),
    ("prova-store", "store", &["prova-protocol"], Holds::Module("cache")),
    (
        "prova-analysis",
        "analysis",
        &["prova-protocol", "prova-model", "prova-store"],
        Holds::Layers(&["analysis"]),
    ),
    (
        "prova-layers",
        "layers",
        &["prova-protocol", "prova-reapi-proto", "prova-model", "prova-store", "prova-analysis"],
        Holds::Module("layers"),
    ),
    (
        "prova-coordinator",
        ".",
        &[
            "prova-protocol",
            "prova-reapi-proto",
            "prova-model",
            "prova-store",
            "prova-analysis",
            "prova-layers",
        ],
        Holds::Layers(&["preparation", "run", "farm", "http", "start-up"]),
    ),
];

/// Bottom to top: (layer, its modules in order). A module may import any module listed
/// before it, never one after it. The first four layers are the crates `prova-model`,
/// `prova-store`, `prova-analysis` and `prova-layers`, re-exported by `prova-coordinator`
/// under the same names.
const LAYERS: &[(&str, &[&str])] = &[
    ("model", &["location", "suggest", "lockfile", "workspace", "graph", "config"]),
    ("store", &["cache"]),
    ("analysis", &["plan", "inputs", "digests", "trees", "keys"]),
    ("cache layers", &["layers"]),
    ("preparation", &["prepare", "selection"]),
    ("run", &["scheduler", "run", "hermeticity", "remote_exec"]),
    ("farm", &["farm"]),
    ("http", &["http"]),
    ("start-up", &["start"]),
];

/// The layers' modules a crate sees, in order: those of the crates below it and its own.
fn visible(holds: Holds) -> Vec<(&'static str, &'static str)> {
    let top = match holds {
        Holds::Layers(ls) => ls.iter().filter_map(|l| rank_of_layer(l)).max(),
        Holds::Module(m) => order().iter().position(|(_, x)| *x == m),
    }
    .expect("a crate holds a placed layer or module");
    order().into_iter().take(top + 1).collect()
}

/// The index in [`order`] of `layer`'s last module.
fn rank_of_layer(layer: &str) -> Option<usize> {
    order().iter().rposition(|(l, _)| *l == layer)
}

fn order() -> Vec<(&'static str, &'static str)> {
    LAYERS.iter().flat_map(|(layer, mods)| mods.iter().map(move |m| (*layer, *m))).collect()
}

fn crate_dir(dir: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(dir)
}

fn is_test_file(path: &Path) -> bool {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default();
    name.ends_with("_tests.rs") || name == "tests.rs" || name == "test_util.rs"
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(Result::ok)
        .map(|e| e.path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|e| e == "rs") && !is_test_file(&p) {
            out.push(p);
        }
    }
}

/// `text` without comments and without `#[cfg(test)] mod name { … }` blocks, line numbers
/// kept (removed text becomes spaces; newlines stay).
fn code_only(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let rest = &text[i..];
        if rest.starts_with("//") {
            let end = rest.find('\n').map_or(text.len(), |n| i + n);
            blank(&text[i..end], &mut out);
            i = end;
        } else if rest.starts_with("#[cfg(test)]") && is_test_module(&rest["#[cfg(test)]".len()..])
        {
            let open = i + rest.find('{').expect("a test module body");
            let end = matching_brace(text, open);
            blank(&text[i..end], &mut out);
            i = end;
        } else if rest.starts_with('"') {
            // A string literal: its words are not imports.
            let mut j = i + 1;
            while j < bytes.len() && bytes[j] != b'"' {
                j += if bytes[j] == b'\\' { 2 } else { 1 };
            }
            let end = (j + 1).min(bytes.len());
            blank(&text[i..end], &mut out);
            i = end;
        } else {
            let c = rest.chars().next().expect("not at the end");
            out.push(c);
            i += c.len_utf8();
        }
    }
    out
}

fn is_test_module(after_attr: &str) -> bool {
    let t = after_attr.trim_start();
    let t = t.strip_prefix("pub(crate) ").unwrap_or(t);
    t.strip_prefix("mod ").is_some_and(|m| {
        let m = m.trim_start_matches(|c: char| c.is_alphanumeric() || c == '_');
        m.trim_start().starts_with('{')
    })
}

fn matching_brace(text: &str, open: usize) -> usize {
    let mut depth = 0usize;
    for (k, c) in text[open..].char_indices() {
        match c {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    return open + k + 1;
                }
            }
            _ => {}
        }
    }
    text.len()
}

fn blank(removed: &str, out: &mut String) {
    out.extend(removed.chars().map(|c| if c == '\n' { '\n' } else { ' ' }));
}

/// The top-level modules `code` names through `crate::` (`crate::a::X`, and each name of a
/// group `crate::{a::X, b::{Y, Z}}`, over any number of lines), with their line numbers.
fn imports(code: &str) -> Vec<(usize, String)> {
    let line_of = |at: usize| code[..at].matches('\n').count() + 1;
    let mut found = Vec::new();
    let mut from = 0;
    while let Some(k) = code[from..].find("crate::") {
        let at = from + k;
        from = at + "crate::".len();
        let before = code[..at].chars().next_back();
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue; // `mycrate::`
        }
        let after = &code[from..];
        if let Some(group) = after.strip_prefix('{') {
            let mut depth = 0usize;
            let mut start = 0;
            for (i, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => {
                        push_name(&group[start..i], from + 1 + start, &line_of, &mut found);
                        break;
                    }
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        push_name(&group[start..i], from + 1 + start, &line_of, &mut found);
                        start = i + 1;
                    }
                    _ => {}
                }
            }
        } else {
            push_name(after, from, &line_of, &mut found);
        }
    }
    found
}

fn push_name(
    part: &str,
    offset: usize,
    line_of: &dyn Fn(usize) -> usize,
    found: &mut Vec<(usize, String)>,
) {
    let skipped = part.len() - part.trim_start().len();
    let name = ident(part.trim_start());
    if !name.is_empty() {
        found.push((line_of(offset + skipped), name));
    }
}

fn ident(s: &str) -> String {
    s.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect()
}

/// The top-level module a file of `src` belongs to (`None` for `lib.rs`).
fn module_of(src: &Path, path: &Path) -> Option<String> {
    let rel = path.strip_prefix(src).ok()?;
    let first = rel.components().next()?.as_os_str().to_str()?;
    (first != "lib.rs").then(|| first.trim_end_matches(".rs").to_owned())
}

/// The modules a crate's `src/lib.rs` declares.
fn declared_modules(dir: &str) -> BTreeSet<String> {
    let lib = std::fs::read_to_string(crate_dir(dir).join("src/lib.rs")).expect("lib.rs");
    code_only(&lib)
        .lines()
        .filter_map(|l| l.trim().strip_prefix("pub mod ").or_else(|| l.trim().strip_prefix("mod ")))
        .map(|m| m.trim_end_matches(';').trim().to_owned())
        .collect()
}

#[test]
fn every_module_of_each_crate_is_placed_in_a_layer() {
    for (_, dir, _, holds) in CRATES {
        let Holds::Layers(layers) = holds else { continue };
        let placed: BTreeSet<String> = order()
            .into_iter()
            .filter(|(l, _)| layers.contains(l))
            .map(|(_, m)| m.to_owned())
            .collect();
        assert_eq!(
            declared_modules(dir),
            placed,
            "{dir}/src/lib.rs and LAYERS differ: place the new module"
        );
    }
}

#[test]
fn each_layer_is_held_by_one_crate_in_order() {
    let mut held = Vec::new();
    for (name, _, _, holds) in CRATES {
        match holds {
            Holds::Layers(ls) => held.extend(ls.iter().copied()),
            Holds::Module(m) => {
                let (l, _) = order().into_iter().find(|(_, x)| x == m).expect("a placed module");
                let alone = LAYERS.iter().any(|(x, mods)| *x == l && mods.len() == 1);
                assert!(alone, "{name} is the module `{m}`, which is not a layer of its own");
                held.push(l);
            }
        }
    }
    let layers: Vec<&str> = LAYERS.iter().map(|(l, _)| *l).collect();
    assert_eq!(held, layers, "CRATES must hold every layer of LAYERS once, bottom to top");
}

#[test]
fn each_crate_depends_only_on_the_crates_below_it() {
    for (i, (name, dir, allowed, _)) in CRATES.iter().enumerate() {
        for dep in *allowed {
            let below = LEAVES.contains(dep) || CRATES[..i].iter().any(|(n, ..)| n == dep);
            assert!(below, "CRATES lets {name} depend on {dep}, which is not below it");
        }
        let manifest =
            std::fs::read_to_string(crate_dir(dir).join("Cargo.toml")).expect("Cargo.toml");
        let mut section = String::new();
        for line in manifest.lines() {
            let line = line.trim();
            if line.starts_with('[') {
                section = line.to_owned();
                continue;
            }
            if !matches!(section.as_str(), "[dependencies]" | "[build-dependencies]") {
                continue;
            }
            let dep = line.split(['.', ' ', '=']).next().unwrap_or_default();
            if dep.starts_with("prova-") {
                assert!(allowed.contains(&dep), "{name} depends on {dep}, which is not below it");
            }
        }
    }
}

#[test]
fn no_module_imports_one_above_it() {
    let mut upward = Vec::new();
    for (name, dir, _, holds) in CRATES {
        // A crate sees the lower crates' modules as below all of its own.
        let visible = visible(*holds);
        let rank = |m: &str| visible.iter().position(|(_, x)| *x == m);
        let layer = |m: &str| visible.iter().find(|(_, x)| *x == m).map_or("?", |(l, _)| *l);
        // A crate that is one module: its own modules and items are that module's business;
        // only the names of other placed modules are checked.
        let own = |target: &str| match holds {
            Holds::Module(_) => {
                declared_modules(dir).contains(target) || !order().iter().any(|(_, x)| *x == target)
            }
            Holds::Layers(_) => false,
        };
        let src = crate_dir(dir).join("src");
        let mut files = Vec::new();
        rust_files(&src, &mut files);
        for file in &files {
            let module = match holds {
                Holds::Module(m) => (*m).to_owned(),
                Holds::Layers(_) => {
                    let Some(module) = module_of(&src, file) else { continue };
                    module
                }
            };
            let Some(at) = rank(&module) else {
                upward
                    .push(format!("{name}: {}: module `{module}` is in no layer", file.display()));
                continue;
            };
            let text = std::fs::read_to_string(file).expect("a source file");
            for (line, target) in imports(&code_only(&text)) {
                if target == module || target == "self" || own(&target) {
                    continue;
                }
                match rank(&target) {
                    Some(r) if r < at => {}
                    _ => upward.push(format!(
                        "{name}: {}:{line}: `{module}` ({}) imports `{target}` ({}), which is not below it",
                        file.strip_prefix(&src).unwrap_or(file).display(),
                        layer(&module),
                        layer(&target),
                    )),
                }
            }
        }
    }
    assert!(upward.is_empty(), "imports that point up the layers:\n{}", upward.join("\n"));
}

#[test]
fn the_check_sees_an_upward_import_a_grouped_one_and_ignores_comments_strings_and_tests() {
    let code = code_only(
        "use crate::graph::TaskGraph;\n\
         // crate::farm in a comment\n\
         let s = \"crate::http in a string\";\n\
         use crate::{keys::{X, Y},\n    run};\n\
         #[cfg(test)]\nmod tests {\n    use crate::farm;\n}\n\
         fn f() { crate::farm::go() }\n\
         use mycrate::http;\n",
    );
    let names: Vec<(usize, String)> = imports(&code);
    let expect: Vec<(usize, String)> = [(1, "graph"), (4, "keys"), (5, "run"), (10, "farm")]
        .iter()
        .map(|(n, m)| (*n, (*m).to_owned()))
        .collect();
    assert_eq!(names, expect);
}
