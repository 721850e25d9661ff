//! Reading the documentation's Markdown: fenced blocks with their info strings, the commands
//! a block holds, links and heading anchors.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::repo_root;

/// The documentation pages, relative to the repository: `README.md`, then `docs/*.md` by name.
pub fn pages() -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(repo_root().join("docs"))
        .expect("reading docs/")
        .map(|e| e.expect("a docs/ entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .map(|p| Path::new("docs").join(p.file_name().expect("a file name")))
        .collect();
    found.sort();
    found.insert(0, PathBuf::from("README.md"));
    found
}

/// A page's text.
pub fn read(page: &Path) -> String {
    std::fs::read_to_string(repo_root().join(page))
        .unwrap_or_else(|e| panic!("reading {}: {e}", page.display()))
}

/// Which workspace a block runs in (`in=…`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Place {
    /// A copy of `examples/demo` (the default), as its own git repository.
    Demo,
    /// A directory holding `examples/demo` at that path, as a checkout of this repository
    /// does (`-C examples/demo`).
    Repo,
    /// A generated npm workspace with no `prova.toml`: what `prova init` meets.
    Npm,
    /// A copy of `examples/tsmono` with its `node_modules` installed.
    Tsmono,
}

/// What a command block's info string asks for (the words after the language).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Info {
    /// `no-run REASON…`: not executed (its `prova` lines are still parsed); the reason is
    /// required.
    pub no_run: Option<String>,
    /// `continue`: runs in the previous block's workspace, with its daemons.
    pub continues: bool,
    /// `daemons`: each command starts a long-running process in the background.
    pub daemons: bool,
    /// `in=demo|repo|npm|tsmono`.
    pub place: Place,
    /// `exit=N`: the status the block ends with (default 0).
    pub exit: i32,
    /// `requires=TOOL`: a program that must be on `PATH` (else the block is skipped, which
    /// `PROVA_REQUIRE_TOOLS=1` turns into a failure).
    pub requires: Option<String>,
}

/// A fenced block.
#[derive(Clone, Debug)]
pub struct Block {
    /// Its page and the line of its opening fence (1-based), for messages.
    pub at: String,
    /// The info string's first word (`sh`, `toml`, …; empty when none).
    pub lang: String,
    /// The rest of the info string.
    pub info_text: String,
    /// The lines between the fences, with the fence's indentation removed.
    pub body: String,
}

/// Languages whose blocks are commands: each is run (or marked `no-run`).
pub const COMMAND_LANGS: &[&str] = &["sh", "bash", "shell", "console"];

impl Block {
    /// Whether it holds commands.
    pub fn is_commands(&self) -> bool {
        COMMAND_LANGS.contains(&self.lang.as_str())
    }

    /// Its info string read; an unknown word or a `no-run` without a reason is an error.
    pub fn info(&self) -> Result<Info, String> {
        let mut info = Info {
            no_run: None,
            continues: false,
            daemons: false,
            place: Place::Demo,
            exit: 0,
            requires: None,
        };
        let mut words = self.info_text.split_whitespace();
        while let Some(word) = words.next() {
            match word.split_once('=') {
                _ if word == "no-run" || word == "no-run:" => {
                    let reason = words.by_ref().collect::<Vec<_>>().join(" ");
                    if reason.is_empty() {
                        return Err(format!("{}: `no-run` needs a reason after it", self.at));
                    }
                    info.no_run = Some(reason);
                }
                _ if word == "continue" => info.continues = true,
                _ if word == "daemons" => info.daemons = true,
                Some(("in", place)) => {
                    info.place = match place {
                        "demo" => Place::Demo,
                        "repo" => Place::Repo,
                        "npm" => Place::Npm,
                        "tsmono" => Place::Tsmono,
                        other => return Err(format!("{}: unknown place `in={other}`", self.at)),
                    }
                }
                Some(("exit", n)) => {
                    info.exit = n.parse().map_err(|_| format!("{}: bad `exit={n}`", self.at))?;
                }
                Some(("requires", tool)) => info.requires = Some(tool.to_owned()),
                _ => return Err(format!("{}: unknown word `{word}` in the info string", self.at)),
            }
        }
        if info.continues && self.info_text.contains("in=") {
            return Err(format!("{}: a `continue` block runs where the previous one did", self.at));
        }
        Ok(info)
    }

    /// Its commands, one logical line each (`\` continuations joined): a `console` block's
    /// `$ ` lines, every line of the others. Blank lines and whole-line comments are dropped.
    pub fn commands(&self) -> Vec<String> {
        let console = self.lang == "console";
        let mut out: Vec<String> = Vec::new();
        let mut open = false;
        for line in self.body.lines() {
            let text = if open {
                line
            } else if console {
                match line.strip_prefix("$ ") {
                    Some(rest) => rest,
                    None => continue,
                }
            } else {
                line
            };
            let (text, continues) = match text.trim_end().strip_suffix('\\') {
                Some(head) => (head, true),
                None => (text, false),
            };
            if open {
                let last = out.last_mut().expect("a continued line");
                last.push(' ');
                last.push_str(text.trim());
            } else if !text.trim().is_empty() && !text.trim_start().starts_with('#') {
                out.push(text.trim().to_owned());
            }
            open = continues && !out.is_empty();
        }
        out
    }
}

/// Every fenced block of a page, in order.
pub fn blocks(page: &Path, text: &str) -> Vec<Block> {
    let mut out = Vec::new();
    let mut current: Option<(usize, Block, String)> = None;
    for (n, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        let indent = line.len() - trimmed.len();
        match current.take() {
            None => {
                if let Some(info) = trimmed.strip_prefix("```") {
                    let mut words = info.trim().splitn(2, char::is_whitespace);
                    let lang = words.next().unwrap_or_default().to_owned();
                    let info_text = words.next().unwrap_or_default().trim().to_owned();
                    let at = format!("{}:{}", page.display(), n + 1);
                    let block = Block { at, lang, info_text, body: String::new() };
                    current = Some((indent, block, String::new()));
                }
            }
            Some((fence_indent, mut block, mut body)) => {
                if trimmed.starts_with("```") {
                    block.body = body;
                    out.push(block);
                } else {
                    let cut = line.len().min(fence_indent);
                    let cut = if line[..cut].trim().is_empty() { cut } else { 0 };
                    body.push_str(&line[cut..]);
                    body.push('\n');
                    current = Some((fence_indent, block, body));
                }
            }
        }
    }
    assert!(current.is_none(), "{}: a fenced block is not closed", page.display());
    out
}

/// The page's text outside fenced blocks, line by line (`None` for a line inside one), so
/// links and headings are not read from code.
fn prose_lines(text: &str) -> Vec<Option<&str>> {
    let mut inside = false;
    text.lines()
        .map(|line| {
            if line.trim_start().starts_with("```") {
                inside = !inside;
                None
            } else if inside {
                None
            } else {
                Some(line)
            }
        })
        .collect()
}

/// A line with its inline code spans removed.
fn without_code_spans(line: &str) -> String {
    let mut out = String::new();
    for (i, part) in line.split('`').enumerate() {
        if i % 2 == 0 {
            out.push_str(part);
        }
    }
    out
}

/// The link targets of a page's prose (`[text](target)`, images, `[ref]: target`), with the
/// line each is on.
pub fn links(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    for (n, line) in prose_lines(text).into_iter().enumerate() {
        let Some(line) = line else { continue };
        let line = without_code_spans(line);
        let mut rest = line.as_str();
        while let Some(i) = rest.find("](") {
            let after = &rest[i + 2..];
            let end = after.find(')').unwrap_or(after.len());
            let target = after[..end].split_whitespace().next().unwrap_or_default();
            out.push((n + 1, target.to_owned()));
            rest = &after[end..];
        }
        if let Some(def) = line.trim_start().strip_prefix('[')
            && let Some((_, target)) = def.split_once("]:")
        {
            out.push((n + 1, target.split_whitespace().next().unwrap_or_default().to_owned()));
        }
    }
    out
}

/// GitHub's anchors of a page's headings (`## The farm` → `the-farm`; a repeated heading gets
/// `-1`, `-2`, …).
pub fn anchors(text: &str) -> Vec<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut out = Vec::new();
    for line in prose_lines(text).into_iter().flatten() {
        let Some(title) = line.strip_prefix('#') else { continue };
        let title = title.trim_start_matches('#');
        if !title.starts_with(' ') {
            continue;
        }
        let slug: String = without_code_spans_keep_text(title.trim())
            .to_lowercase()
            .chars()
            .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
            .map(|c| if c == ' ' { '-' } else { c })
            .collect();
        let count = seen.entry(slug.clone()).or_insert(0);
        out.push(if *count == 0 { slug.clone() } else { format!("{slug}-{count}") });
        *count += 1;
    }
    out
}

/// A heading's text as GitHub slugs it: code spans keep their text, markup characters go.
fn without_code_spans_keep_text(title: &str) -> String {
    title.replace('`', "")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block(lang: &str, info: &str, body: &str) -> Block {
        Block { at: "x.md:1".into(), lang: lang.into(), info_text: info.into(), body: body.into() }
    }

    #[test]
    fn info_words() {
        let i = block("sh", "in=repo exit=1 requires=dot", "").info().unwrap();
        assert_eq!((i.place, i.exit, i.requires.as_deref()), (Place::Repo, 1, Some("dot")));
        let i = block("sh", "no-run: needs systemd", "").info().unwrap();
        assert_eq!(i.no_run.as_deref(), Some("needs systemd"));
        assert!(block("sh", "no-run", "").info().is_err());
        assert!(block("sh", "norun", "").info().is_err());
        assert!(block("sh", "continue in=repo", "").info().is_err());
    }

    #[test]
    fn commands_join_continuations_and_read_console_prompts() {
        let b = block("sh", "", "# a comment\nprova run \\\n  build --all   # why\n\nprova ls\n");
        assert_eq!(b.commands(), ["prova run build --all   # why", "prova ls"]);
        let c = block("console", "", "$ prova ls\nweb (apps/web)\n$ prova last\n");
        assert_eq!(c.commands(), ["prova ls", "prova last"]);
    }

    #[test]
    fn blocks_links_and_anchors() {
        let text = "# Top\n## The `farm` (loopback)\nsee [a](b.md#top) and `[x](no)`\n\
                    ```sh no-run: why\n[y](no)\n```\n## Top\n";
        let found = blocks(Path::new("p.md"), text);
        assert_eq!(found.len(), 1);
        assert_eq!((found[0].lang.as_str(), found[0].body.as_str()), ("sh", "[y](no)\n"));
        assert_eq!(links(text), [(3, "b.md#top".to_owned())]);
        assert_eq!(anchors(text), ["top", "the-farm-loopback", "top-1"]);
    }
}
