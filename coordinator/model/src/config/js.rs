//! What prova infers from a JavaScript workspace (Turborepo and Nx do the same):
//!
//! - **Project globs**: when `[workspace] projects` is not set, the root `package.json`
//!   `workspaces` (array, or `{ "packages": [...] }`), else `pnpm-workspace.yaml`
//!   `packages`.
//! - **Tasks from `package.json` scripts**: in a project with a `package.json`, a task whose
//!   `command` is not set runs the script of its name. The script text runs directly under
//!   `sh -c` with the project's and the workspace root's `node_modules/.bin` first on `PATH`
//!   (no package manager start-up per task); a script that has a `pre`/`post` script or reads
//!   `npm_*` variables needs npm's environment, so it runs as `npm run --silent NAME --`.
//!   A task without a command and without that script is a group task when it has deps;
//!   otherwise the project has no such task.

use std::collections::BTreeMap;
use std::path::Path;

use prova_protocol::spec::CommandLine;
use toml::Spanned;

use crate::workspace::TaskDef;

/// The project globs a JS workspace declares at `root`, each spanned at the start of the
/// workspace `prova.toml` (the file that did not set `projects`). Empty when none.
pub fn workspace_globs(root: &Path, package_workspaces: &[String]) -> Vec<Spanned<String>> {
    let spanned = |v: &[String]| v.iter().map(|p| Spanned::new(0..0, p.clone())).collect();
    if !package_workspaces.is_empty() {
        return spanned(package_workspaces);
    }
    let Ok(text) = std::fs::read_to_string(root.join("pnpm-workspace.yaml")) else {
        return Vec::new();
    };
    let Ok(doc) = crate::lockfile::pnpm::load_yaml(&text) else {
        tracing::warn!("pnpm-workspace.yaml is not valid YAML: its packages are not discovered");
        return Vec::new();
    };
    let list: Vec<String> = doc["packages"]
        .as_vec()
        .map(|v| v.iter().filter_map(|p| p.as_str().map(str::to_owned)).collect())
        .unwrap_or_default();
    spanned(&list)
}

/// Applies script inference to the merged `tasks` of the project at `dir` whose
/// `package.json` has `scripts` (`None`: no `package.json`, nothing is inferred).
pub fn infer_scripts(
    dir: &str,
    scripts: Option<&BTreeMap<String, String>>,
    tasks: &mut BTreeMap<String, TaskDef>,
) {
    let Some(scripts) = scripts else { return };
    tasks.retain(|name, def| {
        if def.command.is_some() {
            return true;
        }
        match scripts.get(name) {
            Some(text) => {
                def.command = Some(CommandLine::Shell(script_command(dir, name, text, scripts)));
                true
            }
            None => !def.deps.is_empty(),
        }
    });
}

/// The shell text that runs script `name` (`text`) of the project at `dir`.
pub fn script_command(
    dir: &str,
    name: &str,
    text: &str,
    scripts: &BTreeMap<String, String>,
) -> String {
    let needs_npm = scripts.contains_key(&format!("pre{name}"))
        || scripts.contains_key(&format!("post{name}"))
        || text.contains("npm_");
    if needs_npm {
        return format!("npm run --silent {} --", shell_quote(name));
    }
    let depth = dir.split('/').filter(|c| !c.is_empty()).count();
    let mut path = String::from("$PWD/node_modules/.bin:");
    if depth > 0 {
        path.push_str(&format!("$PWD/{}node_modules/.bin:", "../".repeat(depth)));
    }
    format!("PATH=\"{path}$PATH\"; export PATH; {text}")
}

fn shell_quote(s: &str) -> String {
    if !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || "-_.:/".contains(c)) {
        s.to_owned()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Location;

    fn def(name: &str, command: Option<&str>, deps: &[&str]) -> TaskDef {
        let at = Location::new(Path::new("/ws"), Path::new("/ws/prova.toml"), 1, 1);
        let mut d = TaskDef::new(name, at.clone());
        d.command = command.map(|c| CommandLine::Shell(c.to_owned()));
        d.deps =
            deps.iter().map(|s| crate::config::Located::new((*s).to_owned(), at.clone())).collect();
        d
    }

    fn scripts(list: &[(&str, &str)]) -> BTreeMap<String, String> {
        list.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    }

    #[test]
    fn a_task_without_a_command_runs_its_script_directly() {
        let s = scripts(&[("build", "tsc -p ."), ("lint", "eslint ."), ("prelint", "x")]);
        let mut tasks: BTreeMap<String, TaskDef> = [
            ("build", def("build", None, &["^build"])),
            ("lint", def("lint", None, &[])),
            ("test", def("test", None, &[])),
            ("ci", def("ci", None, &["build"])),
            ("fmt", def("fmt", Some("prettier ."), &[])),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
        infer_scripts("packages/a", Some(&s), &mut tasks);
        let cmd = |n: &str| match &tasks[n].command {
            Some(CommandLine::Shell(s)) => Some(s.clone()),
            _ => None,
        };
        assert_eq!(
            cmd("build").unwrap(),
            "PATH=\"$PWD/node_modules/.bin:$PWD/../../node_modules/.bin:$PATH\"; export PATH; tsc -p ."
        );
        assert_eq!(cmd("lint").unwrap(), "npm run --silent lint --", "a prelint needs npm");
        assert!(!tasks.contains_key("test"), "no script, no deps: no such task");
        assert_eq!(cmd("ci"), None, "no script but deps: a group task");
        assert_eq!(cmd("fmt").unwrap(), "prettier .", "an explicit command wins");
    }

    #[test]
    fn without_a_package_json_nothing_is_inferred_and_the_root_has_one_bin() {
        let mut tasks: BTreeMap<String, TaskDef> =
            [("test".to_owned(), def("test", None, &[]))].into_iter().collect();
        infer_scripts("a", None, &mut tasks);
        assert!(tasks["test"].command.is_none());
        let s = scripts(&[("t", "echo $npm_package_name")]);
        assert_eq!(script_command("", "t", "echo $npm_package_name", &s), "npm run --silent t --");
        assert_eq!(
            script_command("", "t", "vitest", &BTreeMap::new()),
            "PATH=\"$PWD/node_modules/.bin:$PATH\"; export PATH; vitest"
        );
        assert_eq!(
            script_command("", "a b", "x", &scripts(&[("prea b", "")])),
            "npm run --silent 'a b' --"
        );
    }
}
