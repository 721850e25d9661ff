//! The documentation is tested (issue 28): every command block of `README.md` and `docs/*.md`
//! runs with the real binary in a fresh workspace and must end as its page says (see
//! `tests/src/docs/mod.rs` for the info-string words that mark what cannot run here); every
//! relative link and anchor resolves; the README starts with the two commands a newcomer runs
//! first, the second being the test command `.ci/run` runs.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use prova_tests::docs::markdown::{self, anchors, blocks, links, pages};
use prova_tests::{docs, repo_root};

#[test]
fn every_command_block_runs() {
    let pages = pages();
    let failures: Vec<String> = std::thread::scope(|scope| {
        let running: Vec<_> =
            pages.iter().map(|page| scope.spawn(move || docs::run_page(page))).collect();
        running.into_iter().flat_map(|t| t.join().expect("a page's thread")).collect()
    });
    assert!(failures.is_empty(), "{} failing blocks:\n\n{}", failures.len(), failures.join("\n\n"));
}

/// The pages whose links are checked: the documentation and ARCHITECTURE.md.
fn linked_pages() -> Vec<PathBuf> {
    let mut all = pages();
    all.push(PathBuf::from("ARCHITECTURE.md"));
    all
}

#[test]
fn every_relative_link_resolves() {
    let mut broken = Vec::new();
    for page in linked_pages() {
        let text = markdown::read(&page);
        for (line, target) in links(&text) {
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            let (file, anchor) = target.split_once('#').unwrap_or((&target, ""));
            let dir = page.parent().unwrap_or(Path::new(""));
            let resolved = if file.is_empty() { page.clone() } else { dir.join(file) };
            let at = format!("{}:{line}: `{target}`", page.display());
            if !repo_root().join(&resolved).exists() {
                broken.push(format!("{at}: no {}", resolved.display()));
            } else if !anchor.is_empty() {
                if resolved.extension().is_none_or(|e| e != "md") {
                    broken.push(format!("{at}: an anchor into a file that is not Markdown"));
                } else if !anchors(&markdown::read(&resolved)).iter().any(|a| a == anchor) {
                    broken.push(format!("{at}: no heading `#{anchor}` in {}", resolved.display()));
                }
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

/// The command `.ci/run` runs as "the README's test command".
fn ci_test_command() -> String {
    let ci = std::fs::read_to_string(repo_root().join(".ci/run")).expect(".ci/run");
    let mut lines = ci.lines().skip_while(|l| !l.contains("The README's test command"));
    lines.next();
    lines.next().expect("a command after the comment").trim().to_owned()
}

#[test]
fn the_readme_starts_with_a_demo_run_and_the_test_command() {
    let text = markdown::read(Path::new("README.md"));
    let commands: Vec<String> = blocks(Path::new("README.md"), &text)
        .iter()
        .filter(|b| b.is_commands())
        .flat_map(|b| b.commands())
        .take(2)
        .collect();
    let strip = |c: &str| c.split(" #").next().unwrap_or_default().trim().to_owned();
    assert_eq!(
        strip(&commands[0]),
        "cargo run --release -p prova-cli -- run build --all -C examples/demo",
        "the README's first command builds prova and runs the demo"
    );
    assert_eq!(strip(&commands[1]), ci_test_command(), "the README's test command is .ci/run's");
}

#[test]
fn every_page_is_in_the_index() {
    let index = markdown::read(Path::new("docs/README.md"));
    let listed: BTreeSet<String> = links(&index).into_iter().map(|(_, t)| t).collect();
    for page in pages().iter().skip(1) {
        let name = page.file_name().and_then(|n| n.to_str()).expect("a page name");
        if name != "README.md" {
            assert!(listed.contains(name), "docs/README.md does not link {name}");
        }
    }
    let readme = markdown::read(Path::new("README.md"));
    assert!(
        links(&readme).iter().any(|(_, t)| t == "docs/README.md"),
        "README.md links the docs index"
    );
}
