//! The packages of a repository that names no workspace (no `workspaces`, no
//! `pnpm-workspace.yaml`): several directories with a `package.json`, each installed on its
//! own and linked by `file:` dependencies (`"shared": "file:../shared"`). `prova init`
//! lists them as the projects.

use std::path::Path;

/// How deep below the root a package is looked for.
const MAX_DEPTH: usize = 4;

/// Directory names never holding a package of the repository's own: installed trees,
/// build products, test fixtures.
const SKIPPED: &[&str] =
    &["node_modules", "dist", "build", "out", "coverage", "__fixtures__", "fixtures"];

/// The workspace-relative directories below `root` (not the root itself) that hold a
/// `package.json`, sorted. Hidden and gitignored directories are skipped.
pub(super) fn package_dirs(root: &Path) -> Vec<String> {
    let walk = ignore::WalkBuilder::new(root)
        .hidden(true)
        .git_ignore(true)
        .require_git(false)
        .git_global(false)
        .git_exclude(false)
        .follow_links(false)
        .max_depth(Some(MAX_DEPTH))
        .filter_entry(|e| {
            let name = e.file_name().to_string_lossy();
            e.depth() == 0
                || (e.file_type().is_some_and(|t| t.is_dir())
                    && !SKIPPED.contains(&name.as_ref())
                    && name != ".prova")
        })
        .build();
    let mut dirs: Vec<String> = walk
        .flatten()
        .filter(|e| e.depth() > 0 && e.path().join("package.json").is_file())
        .filter_map(|e| {
            let rel = e.path().strip_prefix(root).ok()?;
            let parts: Option<Vec<&str>> =
                rel.components().map(|c| c.as_os_str().to_str()).collect();
            Some(parts?.join("/"))
        })
        .collect();
    dirs.sort();
    dirs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_packages_but_not_installed_or_ignored_ones() {
        let t = tempfile::tempdir().unwrap();
        let r = t.path();
        for f in [
            "shared/package.json",
            "server/package.json",
            "server/node_modules/express/package.json",
            "apps/web/package.json",
            "apps/web/dist/package.json",
            "gen/out/package.json",
            ".cache/x/package.json",
            "test/__fixtures__/pkg/package.json",
        ] {
            let p = r.join(f);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, "{}").unwrap();
        }
        std::fs::write(r.join(".gitignore"), "gen/\n").unwrap();
        assert_eq!(package_dirs(r), ["apps/web", "server", "shared"]);
    }
}
