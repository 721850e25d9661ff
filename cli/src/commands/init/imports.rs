//! The workspace packages a project's sources import (`from 'x'`, `import('x')`,
//! `require('x')`, `export … from 'x'`): a package that imports another without listing it
//! in `package.json` builds only when the other happens to be built first (lerna-lite's cli
//! `import('@lerna-lite/run')`s its optional commands; `npm run build --ws` ran them in
//! `workspaces` order). `prova init` makes those edges explicit.

use std::collections::BTreeSet;
use std::path::Path;

/// Source files looked at per project, and bytes per file: enough for real packages,
/// bounded for generated trees.
const MAX_FILES: usize = 5000;
const MAX_BYTES: u64 = 1 << 20;

/// Source extensions scanned.
const EXTENSIONS: &[&str] = &["ts", "tsx", "mts", "cts", "js", "jsx", "mjs", "cjs"];

/// Path parts of tests, mocks and fixtures: their imports are not the build's.
const SKIPPED: &[&str] = &["__tests__", "__mocks__", "__fixtures__", "test", "tests", "fixtures"];

/// The names of `packages` imported by a source file under any of `roots` (absolute
/// directories), tests and fixtures left out.
pub(super) fn imported(
    roots: &[std::path::PathBuf],
    packages: &BTreeSet<&str>,
) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    let mut files = 0usize;
    for root in roots.iter().filter(|r| r.is_dir()) {
        let walk = ignore::WalkBuilder::new(root)
            .hidden(true)
            .git_ignore(true)
            .require_git(false)
            .git_global(false)
            .git_exclude(false)
            .follow_links(false)
            .filter_entry(|e| {
                let name = e.file_name().to_string_lossy();
                name != "node_modules" && !SKIPPED.contains(&name.as_ref())
            })
            .build();
        for entry in walk.flatten() {
            if files >= MAX_FILES {
                return found;
            }
            if !is_source(entry.path()) || entry.metadata().map_or(true, |m| m.len() > MAX_BYTES) {
                continue;
            }
            files += 1;
            if let Ok(text) = std::fs::read_to_string(entry.path()) {
                for spec in specifiers(&text) {
                    if let Some(name) = package_of(&spec, packages) {
                        found.insert(name.to_owned());
                    }
                }
            }
        }
    }
    found
}

fn is_source(path: &Path) -> bool {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
    let ext = path.extension().and_then(|e| e.to_str()).unwrap_or("");
    EXTENSIONS.contains(&ext) && !name.contains(".test.") && !name.contains(".spec.")
}

/// The package a module specifier names, if it is one of `packages` (`@s/a`, `@s/a/sub`).
fn package_of<'p>(spec: &str, packages: &BTreeSet<&'p str>) -> Option<&'p str> {
    let mut parts = spec.splitn(3, '/');
    let first = parts.next()?;
    let name = if first.starts_with('@') {
        let second = parts.next()?;
        &spec[..first.len() + 1 + second.len()]
    } else {
        first
    };
    packages.get(name).copied()
}

/// Module specifiers in `text`: string literals right after `from`, `import`, `import(`,
/// `require(`.
fn specifiers(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for keyword in ["from", "import", "require"] {
        let mut rest = text;
        while let Some(at) = rest.find(keyword) {
            let before = rest[..at].chars().next_back();
            let after = &rest[at + keyword.len()..];
            rest = after;
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '$' || c == '.') {
                continue;
            }
            let tail = after.trim_start();
            let tail = tail.strip_prefix('(').map_or(tail, str::trim_start);
            let Some(quote) = tail.chars().next().filter(|c| matches!(c, '\'' | '"' | '`')) else {
                continue;
            };
            if let Some(end) = tail[1..].find(quote) {
                out.push(tail[1..1 + end].to_owned());
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_static_dynamic_and_require_imports() {
        let text = "import { a } from '@x/core';\nexport * from \"@x/util/deep\";\n\
                    const run = await import('@x/run');\nconst c = require( \"cjs\" );\n\
                    const s = 'from @x/not-an-import';\nimport './side-effect';\nmyimport('@x/no');\n";
        let packages: BTreeSet<&str> = ["@x/core", "@x/util", "@x/run", "cjs", "@x/no"].into();
        let found: Vec<&str> =
            specifiers(text).iter().filter_map(|s| package_of(s, &packages)).collect();
        assert_eq!(found, ["@x/core", "@x/util", "@x/run", "cjs"]);
    }
}
