//! The text of the files `prova init` writes: the workspace `prova.toml` (commented, small:
//! what prova infers — JS project globs, tasks from `package.json` scripts — is left out) and
//! a project's own `prova.toml` when it needs more than the workspace's defaults.

use super::Detected;
use super::plan::{Findings, Override};

/// What the file is; after the schema directive, a TOML comment too.
const HEADER: &str = "\
# prova.toml: the workspace root of prova (written by `prova init`).
# `prova ls` lists the projects and tasks this file gives; `prova run build --all` runs them.
";

fn list(items: &[String]) -> String {
    items.iter().map(|m| format!("{m:?}")).collect::<Vec<_>>().join(", ")
}

/// `[workspace]` and the tasks for `detected`; `findings` (JS workspaces) give the build's
/// inputs and outputs.
pub fn workspace(detected: &Detected, locks: &[&str], findings: Option<&Findings>) -> String {
    let mut out = format!("{}\n{HEADER}", crate::commands::schema::SCHEMA_DIRECTIVE);
    out.push_str(&workspace_table(detected, locks));
    match detected {
        Detected::Npm | Detected::Pnpm | Detected::Packages { .. } => {
            out.push_str(&js_tasks(findings))
        }
        Detected::Cargo(_) => out.push_str(
            "# cargo run in a member's directory builds that package.\n\
             [tasks.build]\ncommand = \"cargo build\"\n\n\
             [tasks.test]\ncommand = \"cargo test\"\ndeps = [\"build\"]\n",
        ),
        Detected::Plain => out.push_str(
            "[tasks.build]\n# The shell command the task runs, in the project's \
             directory.\ncommand = \"echo build: edit prova.toml\"\n# outputs = \
             [\"dist/**\"]\n",
        ),
    }
    out
}

/// The `[workspace]` table alone: what `prova init` loads first to see the projects.
pub(super) fn workspace_table(detected: &Detected, locks: &[&str]) -> String {
    let fingerprint = if locks.is_empty() {
        "# Root files whose change re-runs every task:\n# fingerprint = [\"yarn.lock\"]\n\n"
            .to_owned()
    } else {
        let l: Vec<String> = locks.iter().map(|s| (*s).to_owned()).collect();
        format!(
            "# The lockfile: each project's key folds the external packages it resolves to.\n\
             fingerprint = [{}]\n\n",
            list(&l)
        )
    };
    let projects = match detected {
        Detected::Npm => {
            "# Projects: the `workspaces` globs of package.json (set `projects` here to \
                          override).\n"
                .to_owned()
        }
        Detected::Pnpm => {
            "# Projects: the `packages` globs of pnpm-workspace.yaml (set `projects` \
                           here to override).\n"
                .to_owned()
        }
        Detected::Packages { dirs } => {
            let mut text = format!(
                "# Projects: the directories with a package.json (no `workspaces` field names \
                 them;\n# `file:` dependencies link them). Add a new package's directory \
                 here.\nprojects = [{}]\n",
                list(dirs)
            );
            if !dirs.iter().any(|d| d == ".") {
                // Without a root package.json prova assumes no installed trees.
                let trees: Vec<String> = std::iter::once("node_modules".to_owned())
                    .chain(dirs.iter().map(|d| format!("{d}/node_modules")))
                    .collect();
                text.push_str(&format!(
                    "# Each package's own installed tree: keyed (an install moves its readers' \
                     keys) and\n# mounted in exec roots.\ntrees = [{}]\n",
                    list(&trees)
                ));
            }
            text
        }
        Detected::Cargo(members) => {
            format!(
                "# The Cargo workspace members, one project each.\nprojects = [{}]\n",
                list(members)
            )
        }
        Detected::Plain => "# The root directory is the one project; list globs such as \
                            \"packages/*\" to add more.\nprojects = [\".\"]\n"
            .to_owned(),
    };
    format!("[workspace]\n{projects}{fingerprint}")
}

fn js_tasks(findings: Option<&Findings>) -> String {
    let mut out = String::from(
        "# Tasks without a `command` run the package.json script of their name in each project \
         that\n# has one; projects without that script have no such task.\n[tasks.build]\n\
         # `^build`: the build of every workspace package this one depends on runs first.\n\
         deps = [\"^build\"]\n",
    );
    let (inputs, outputs) = match findings {
        Some(f) => (f.inputs.clone(), f.outputs.clone()),
        None => (None, super::plan::DEFAULT_OUTPUTS.iter().map(|s| (*s).to_owned()).collect()),
    };
    match inputs {
        Some(inputs) => out.push_str(&format!(
            "# What a build reads, from each package's build script and tsconfig: its sources, \
             the\n# configs it extends and the configs of the projects it references (a README \
             edit\n# re-runs no build). `prova run build --all --force --verify=inputs` \
             proves the list.\ninputs = [{}]\n",
            list(&inputs)
        )),
        None => out.push_str(
            "# Inputs: every file of the project (the default); narrow them with `inputs = \
             [\"src/**\", ...]`.\n",
        ),
    }
    out.push_str(&format!(
        "# What the task writes (tsc's outDir and .tsbuildinfo): cleaned before it runs, \
         restored\n# from the cache on a hit.\noutputs = [{}]\n\n",
        list(&outputs)
    ));
    out.push_str("[tasks.test]\ndeps = [\"build\"]\n\n[tasks.lint]\n");
    out
}

/// A project's own `prova.toml` for `o`; `workspace_file` is the path of the workspace
/// file from the project (`../../prova.toml`).
pub(super) fn project(o: &Override, workspace_file: &str) -> String {
    let mut out = format!(
        "# Written by `prova init`: what this project needs beyond the workspace's defaults\n\
         # in {workspace_file}.\n"
    );
    if !o.deps.is_empty() {
        out.push_str(&format!(
            "[project]\n# Built first: imported or linked with `file:`, but not listed by name in \
             package.json.\ndeps = [{}]\n",
            list(&o.deps)
        ));
    }
    if o.outputs.is_none() && o.whole_project.is_none() && o.inputs.is_none() {
        return out;
    }
    out.push_str("\n[tasks.build]\n");
    if let (Some(cmd), Some(inputs)) = (&o.whole_project, &o.inputs) {
        out.push_str(&format!(
            "# The build runs `{}`, whose reads prova cannot tell: every file of the\n\
             # project but its outputs is an input.\ninputs = [{}]\n",
            cmd.replace('\n', " "),
            list(inputs)
        ));
    } else if let Some(inputs) = &o.inputs {
        out.push_str(&format!(
            "# The workspace's build inputs, with this build's own outputs left out.\n\
             inputs = [{}]\n",
            list(inputs)
        ));
    }
    if let Some(outputs) = &o.outputs {
        out.push_str(&format!("# What this build writes.\noutputs = [{}]\n", list(outputs)));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_renders_valid_toml() {
        let kinds = [
            Detected::Npm,
            Detected::Pnpm,
            Detected::Plain,
            Detected::Cargo(vec!["crates/*".into()]),
            Detected::Packages { dirs: vec!["server".into(), "shared".into()] },
        ];
        for d in kinds {
            for locks in [&[][..], &["package-lock.json"][..]] {
                let text = workspace(&d, locks, None);
                assert_eq!(text.lines().next(), Some(crate::commands::schema::SCHEMA_DIRECTIVE));
                assert!(toml::from_str::<toml::Table>(&text).is_ok(), "{d:?}: {text}");
            }
        }
        let o = Override {
            outputs: Some(vec!["lib/**".into()]),
            inputs: Some(vec!["**".into(), "!lib/**".into()]),
            whole_project: Some("webpack --mode \"production\"".into()),
            deps: vec!["@x/a".into()],
        };
        let text = project(&o, "../prova.toml");
        let parsed: toml::Table = toml::from_str(&text).unwrap();
        assert_eq!(parsed["tasks"]["build"]["inputs"][0].as_str(), Some("**"), "{text}");
        assert_eq!(parsed["tasks"]["build"]["inputs"][1].as_str(), Some("!lib/**"), "{text}");
    }
}
