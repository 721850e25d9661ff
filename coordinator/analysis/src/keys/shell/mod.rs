//! Which programs a task's shell command starts, read statically: a careful subset of POSIX
//! `sh` — lists and pipelines (`;`, `&&`, `||`, `|`, `&`), subshells and braces, `if`/`while`
//! /`for`/`case`, assignments (`VAR=1 tool`, `PATH=…; export PATH`), redirections and
//! here-documents, `cd dir && tool`, command substitutions (their commands run too), the
//! wrappers that start another program (`env`, `exec`, `command`, `nohup`, `time`, `nice`,
//! `timeout`, `xargs`, `stdbuf`, `setsid`, `taskset`), `sh -c '…'` / `bash -c '…'`
//! (read in turn), and the JavaScript package runners (`npx tool`, `npm exec`, `pnpm exec`,
//! `yarn exec`: the tool is looked up in `node_modules/.bin` first).
//!
//! The answer is a list of [`Invocation`]s — a word with the directory and `PATH` it is
//! looked up in — for [`super::binaries`] to resolve and digest, and, in words, what cannot
//! be known without running the command ([`Analysis::unkeyed`]: a program named by a
//! variable, `eval`, a sourced file, a `package.json` script run by name, a tool a package
//! runner would download). Nothing here touches the file system.

mod lex;
mod runners;

use std::collections::HashSet;
use std::path::PathBuf;

use crate::digests::lexical;

pub use lex::LexError;
use lex::{Tok, Word};
pub use runners::node_bin_dirs;

/// How deep `sh -c` and command substitutions are followed.
const MAX_DEPTH: usize = 8;
/// How many "not keyed" notes one command keeps (the rest are counted).
const MAX_NOTES: usize = 8;

/// One directory of a `PATH`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum PathDir {
    /// A directory.
    Dir(PathBuf),
    /// An entry whose value is known only when the command runs (`$HOME/bin`).
    Unknown(String),
}

/// A `PATH`, split: shared, not copied, by every program looked up on it (a thousand
/// package scripts each start several).
pub type SearchPath = std::sync::Arc<[PathDir]>;

/// Where a command starts: its directory (absolute) and the `PATH` it inherits.
#[derive(Clone, Debug)]
pub struct Start {
    /// The task's working directory.
    pub cwd: PathBuf,
    /// The inherited `PATH`, split.
    pub path: SearchPath,
}

impl Start {
    /// `cwd` with `path_var` (a `PATH` value) split into its directories.
    pub fn new(cwd: PathBuf, path_var: Option<&str>) -> Self {
        let path = path_var
            .map(|p| {
                p.split(':')
                    .filter(|d| d.starts_with('/'))
                    .map(|d| PathDir::Dir(PathBuf::from(d)))
                    .collect()
            })
            .unwrap_or_default();
        Self { cwd, path }
    }
}

/// A program the command starts, as the shell would look it up.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Invocation {
    /// The word as written (`tsc`, `./bin/x`, `/usr/bin/node`).
    pub word: String,
    /// The directory a relative word resolves from (`None`: a `cd` prova cannot follow).
    pub cwd: Option<PathBuf>,
    /// The `PATH` it is looked up on.
    pub path: SearchPath,
    /// The `PATH` is not the inherited one (the command set it).
    pub path_changed: bool,
    /// A package runner's tool: `node_modules/.bin` of `cwd` and its parents first.
    pub node_bin: bool,
    /// The interpreter of a script's `#!` line (not followed further).
    pub interpreted: bool,
}

/// What a command starts.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Analysis {
    /// The programs it starts, in order (duplicates kept).
    pub invocations: Vec<Invocation>,
    /// What it may start that cannot be known without running it, in words.
    pub unkeyed: Vec<String>,
}

impl Analysis {
    fn note(&mut self, what: String) {
        if !self.unkeyed.contains(&what) {
            self.unkeyed.push(what);
        }
    }
}

/// Reads `script` (a `sh -c` command string) started in `start`.
pub fn analyse(script: &str, start: &Start) -> Analysis {
    let mut out = Analysis::default();
    let mut shell = Shell {
        cwd: Some(start.cwd.clone()),
        path: start.path.clone(),
        path_changed: false,
        functions: HashSet::new(),
    };
    read(script, &mut shell, &mut out, 0);
    if out.unkeyed.len() > MAX_NOTES {
        let more = out.unkeyed.len() - MAX_NOTES;
        out.unkeyed.truncate(MAX_NOTES);
        out.unkeyed.push(format!("and {more} more"));
    }
    out
}

/// The shell's state as the command runs (what a lookup depends on).
#[derive(Clone, Debug)]
struct Shell {
    cwd: Option<PathBuf>,
    path: SearchPath,
    path_changed: bool,
    functions: HashSet<String>,
}

/// Where a `case` statement is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Case {
    /// Before `in`.
    Head,
    /// In a pattern list, before `)`.
    Pattern,
    /// In a branch's commands.
    Body,
}

fn read(script: &str, shell: &mut Shell, out: &mut Analysis, depth: usize) {
    if depth > MAX_DEPTH {
        out.note("commands nested deeper than prova reads".to_owned());
        return;
    }
    let (toks, heredoc_subs) = match lex::lex(script) {
        Ok(t) => t,
        Err(e) => {
            out.note(format!("`{}`: prova cannot read it as a shell command ({e})", short(script)));
            return;
        }
    };
    if heredoc_subs {
        out.note("a command substitution inside a here-document".to_owned());
    }
    let mut saved: Vec<Shell> = Vec::new();
    let mut cases: Vec<Case> = Vec::new();
    let mut words: Vec<Word> = Vec::new();
    let mut toks = toks.into_iter().peekable();
    while let Some(t) = toks.next() {
        match (t, cases.last().copied()) {
            (Tok::Word(w), Some(Case::Head)) => {
                subs(&w, shell, out, depth);
                if w.text == "in"
                    && !w.dynamic
                    && let Some(c) = cases.last_mut()
                {
                    *c = Case::Pattern;
                }
            }
            (Tok::Word(w), Some(Case::Pattern)) => {
                if w.text == "esac" {
                    cases.pop();
                }
            }
            (Tok::Close, Some(Case::Pattern)) => {
                if let Some(c) = cases.last_mut() {
                    *c = Case::Body;
                }
            }
            (Tok::Open | Tok::Sep, Some(Case::Pattern)) => {}
            (Tok::Word(w), _)
                if strip_reserved(&words).is_empty() && w.text == "case" && !w.dynamic =>
            {
                words.clear();
                cases.push(Case::Head);
            }
            (Tok::Word(w), Some(Case::Body))
                if strip_reserved(&words).is_empty() && w.text == "esac" =>
            {
                words.clear();
                cases.pop();
            }
            (Tok::Word(w), _) => words.push(w),
            (Tok::Redirect, _) => {
                // The target is a file, not a command; what it expands may run commands.
                if let Some(Tok::Word(target)) = toks.next_if(|t| matches!(t, Tok::Word(_))) {
                    subs(&target, shell, out, depth);
                }
            }
            (Tok::CaseEnd, _) => {
                simple(&std::mem::take(&mut words), shell, out, depth);
                if let Some(c) = cases.last_mut() {
                    *c = Case::Pattern;
                }
            }
            (Tok::Sep, _) => simple(&std::mem::take(&mut words), shell, out, depth),
            (Tok::Open, _) => {
                if words.len() == 1 && toks.peek() == Some(&Tok::Close) {
                    // `name() { …; }`: a function; calls of it start no program.
                    toks.next();
                    let name = words.remove(0);
                    shell.functions.insert(name.text);
                    continue;
                }
                simple(&std::mem::take(&mut words), shell, out, depth);
                saved.push(shell.clone());
            }
            (Tok::Close, _) => {
                simple(&std::mem::take(&mut words), shell, out, depth);
                if let Some(mut outer) = saved.pop() {
                    // A subshell's `cd` and `PATH` end with it; its functions too.
                    std::mem::swap(shell, &mut outer);
                }
            }
        }
    }
    simple(&words, shell, out, depth);
}

/// Reads the command substitutions of `w`: their commands run where `w` is expanded.
fn subs(w: &Word, shell: &Shell, out: &mut Analysis, depth: usize) {
    for body in &w.subs {
        let mut inner = shell.clone();
        read(body, &mut inner, out, depth + 1);
    }
}

/// Reserved words that may open a simple command without being its program.
const OPENERS: &[&str] = &["if", "then", "else", "elif", "do", "while", "until", "!", "{", "time"];
/// Reserved words that close a compound command (nothing follows them in the same command).
const CLOSERS: &[&str] = &["fi", "done", "}", "esac"];

/// `words` after the reserved words that open or close a compound command.
fn strip_reserved(words: &[Word]) -> &[Word] {
    let mut rest = words;
    while let Some((w, tail)) = rest.split_first() {
        if w.dynamic || !(OPENERS.contains(&w.text.as_str()) || CLOSERS.contains(&w.text.as_str()))
        {
            break;
        }
        rest = tail;
    }
    rest
}

/// One simple command's words (redirections removed).
fn simple(words: &[Word], shell: &mut Shell, out: &mut Analysis, depth: usize) {
    let mut rest = strip_reserved(words);
    if rest.first().is_some_and(|w| !w.dynamic && w.text == "function") {
        // `function NAME { …`: a function; calls of it start no program.
        if let Some(name) = rest.get(1) {
            shell.functions.insert(name.text.clone());
        }
        rest = strip_reserved(rest.get(2..).unwrap_or(&[]));
    }
    let Some(first) = rest.first() else { return };
    if !first.dynamic && matches!(first.text.as_str(), "for" | "select") {
        // `for NAME in WORDS`: none of them is a command.
        rest.iter().for_each(|w| subs(w, shell, out, depth));
        return;
    }
    let mut i = 0;
    let mut path: Option<SearchPath> = None;
    while let Some(w) = rest.get(i).filter(|w| assignment(&w.raw).is_some()) {
        subs(w, shell, out, depth);
        if let Some(("PATH", value)) = assignment(&w.raw) {
            path = Some(path_value(value, shell));
        }
        i += 1;
    }
    if i == rest.len() {
        // Only assignments: they stay for the rest of the script.
        if let Some(p) = path {
            shell.path = p;
            shell.path_changed = true;
        }
        return;
    }
    for w in &rest[i..] {
        subs(w, shell, out, depth);
    }
    let mut local = shell.clone();
    if let Some(p) = path {
        local.path = p;
        local.path_changed = true;
    }
    let exports = rest[i].text == "export" && !rest[i].dynamic;
    program(&rest[i..], &mut local, out, depth);
    // A `cd` or an `export` changes the shell itself; an assignment before a command only
    // that command's environment.
    shell.cwd = local.cwd;
    if exports {
        shell.path = local.path;
        shell.path_changed = local.path_changed;
    }
}

/// Builtins and reserved words that start no program.
const BUILTINS: &[&str] = &[
    ":", "[", "alias", "break", "continue", "echo", "exit", "false", "getopts", "hash", "kill",
    "local", "printf", "pwd", "read", "readonly", "return", "set", "shift", "test", "times",
    "trap", "true", "type", "ulimit", "umask", "unalias", "unset", "wait", "fi", "done", "esac",
    "}", "then", "do", "else",
];

/// Shells that read a `-c` string.
const SHELLS: &[&str] = &["sh", "bash", "dash", "zsh", "ksh", "ash", "mksh"];

/// The program `words` start (the first word, after the wrappers that start another).
fn program(words: &[Word], shell: &mut Shell, out: &mut Analysis, depth: usize) {
    let Some(w) = words.first() else { return };
    if w.dynamic {
        out.note(format!("`{}`: the program is chosen when the command runs", short(&w.raw)));
        return;
    }
    // `[` is a builtin, not a pattern of one character.
    if w.glob && !BUILTINS.contains(&w.text.as_str()) {
        out.note(format!("`{}`: the program is a file pattern", short(&w.raw)));
        return;
    }
    let name = w.text.as_str();
    let args = &words[1..];
    match name {
        "" => {}
        "cd" => shell.cwd = cd(args, shell),
        "export" => {
            for a in args {
                if let Some(("PATH", value)) = assignment(&a.raw) {
                    shell.path = path_value(value, shell);
                    shell.path_changed = true;
                }
            }
        }
        "eval" => out.note(format!("`{}`: the command `eval` builds", short_words(words))),
        "." | "source" => out
            .note(format!("`{}`: the commands of a sourced file are not read", short_words(words))),
        "exec" => program(skip_options(args, &["a"]), shell, out, depth),
        "command" => {
            if !args.first().is_some_and(|a| a.text == "-v" || a.text == "-V") {
                program(skip_options(args, &[]), shell, out, depth);
            }
        }
        n if BUILTINS.contains(&n) || shell.functions.contains(n) => {}
        n if n.contains('/') => invoke(w, shell, out, false),
        n if SHELLS.contains(&n) => {
            invoke(w, shell, out, false);
            shell_c(args, shell, out, depth);
        }
        "npx" | "npm" | "pnpm" | "yarn" => {
            invoke(w, shell, out, false);
            runners::package_runner(name, args, shell, out, depth);
        }
        _ => {
            invoke(w, shell, out, false);
            // What a wrapper starts runs with the wrapper's changes (`env -C`, `env PATH=`).
            let mut child = shell.clone();
            if let Some(rest) = wrapped(name, args, &mut child) {
                program(rest, &mut child, out, depth);
            }
        }
    }
}

/// What a wrapper program starts: the words after its options (and operands), or `None` when
/// `name` is no wrapper. `env`'s assignments and `--chdir` change the shell it starts.
fn wrapped<'a>(name: &str, args: &'a [Word], shell: &mut Shell) -> Option<&'a [Word]> {
    let (with_arg, operands): (&[&str], usize) = match name {
        "nohup" | "setsid" => (&[], 0),
        "time" => (&["f", "o"], 0),
        "nice" => (&["n"], 0),
        "timeout" => (&["s", "k"], 1),
        "stdbuf" => (&["i", "o", "e"], 0),
        "taskset" => (&[], 1),
        "xargs" => (&["a", "d", "E", "e", "I", "i", "L", "l", "n", "P", "s"], 0),
        "env" => {
            let mut rest = args;
            while let Some((a, tail)) = rest.split_first() {
                match a.text.as_str() {
                    "-u" | "--unset" => rest = tail.get(1..).unwrap_or(&[]),
                    "-C" | "--chdir" => {
                        shell.cwd = cd(tail, shell);
                        rest = tail.get(1..).unwrap_or(&[]);
                    }
                    "-i" | "-" | "--ignore-environment" => {
                        shell.path = [PathDir::Unknown("(cleared by `env -i`)".to_owned())].into();
                        shell.path_changed = true;
                        rest = tail;
                    }
                    t if t.starts_with("--chdir=") => {
                        let dir =
                            Word { text: t["--chdir=".len()..].to_owned(), ..Word::default() };
                        shell.cwd = cd(std::slice::from_ref(&dir), shell);
                        rest = tail;
                    }
                    t if t.starts_with('-') => rest = tail,
                    _ => match assignment(&a.raw) {
                        Some(("PATH", v)) => {
                            shell.path = path_value(v, shell);
                            shell.path_changed = true;
                            rest = tail;
                        }
                        Some(_) => rest = tail,
                        None => break,
                    },
                }
            }
            return Some(rest);
        }
        _ => return None,
    };
    let rest = skip_options(args, with_arg);
    Some(rest.get(operands..).unwrap_or(&[]))
}

/// `args` after their leading options: `-x`, `--long`, `--long=v`, and `-o VALUE` for each
/// single-letter option in `with_arg` (`-oVALUE` too); `--` ends them.
fn skip_options<'a>(args: &'a [Word], with_arg: &[&str]) -> &'a [Word] {
    let mut rest = args;
    while let Some((a, tail)) = rest.split_first() {
        let t = a.text.as_str();
        if t == "--" {
            return tail;
        }
        if !t.starts_with('-') || t == "-" {
            break;
        }
        let takes = !t.starts_with("--") && t.len() == 2 && with_arg.contains(&&t[1..2]);
        rest = if takes { tail.get(1..).unwrap_or(&[]) } else { tail };
    }
    rest
}

/// `sh [options] -c 'script'`: the script is read in turn; `sh file` runs a script file
/// (a workspace file is an input; elsewhere it is named as not keyed).
fn shell_c(args: &[Word], shell: &Shell, out: &mut Analysis, depth: usize) {
    let mut rest = args;
    let mut c = false;
    while let Some((a, tail)) = rest.split_first() {
        let t = a.text.as_str();
        if t == "-o" || t == "+o" || t == "-O" || t == "+O" {
            rest = tail.get(1..).unwrap_or(&[]);
            continue;
        }
        if !(t.starts_with('-') || t.starts_with('+')) || t == "-" || t == "--" {
            break;
        }
        let short = !t.starts_with("--");
        c |= short && t[1..].contains('c');
        // `-euo pipefail`: a cluster ending in `o` takes the option's name.
        rest = if short && t.ends_with(['o', 'O']) { tail.get(1..).unwrap_or(&[]) } else { tail };
    }
    match rest.first() {
        Some(script) if c && !script.dynamic => {
            let mut inner = Shell { functions: HashSet::new(), ..shell.clone() };
            read(&script.text, &mut inner, out, depth + 1);
        }
        Some(script) if c => {
            out.note(format!("`{}`: a script chosen when the command runs", short(&script.raw)))
        }
        Some(file) if file.text.starts_with('/') => {
            out.note(format!("`{}`: a script outside the workspace", short(&file.raw)))
        }
        _ => {}
    }
}

/// Records `w` as a program looked up in `shell`'s state.
fn invoke(w: &Word, shell: &Shell, out: &mut Analysis, node_bin: bool) {
    out.invocations.push(Invocation {
        word: w.text.clone(),
        cwd: shell.cwd.clone(),
        path: shell.path.clone(),
        path_changed: shell.path_changed,
        node_bin,
        interpreted: false,
    });
}

/// The directory `cd ARGS` moves to (`None`: one prova cannot tell).
fn cd(args: &[Word], shell: &Shell) -> Option<PathBuf> {
    let args = skip_options(args, &[]);
    let target = match args.first() {
        None => return None,
        Some(w) if w.dynamic || w.glob || w.text == "-" => return None,
        Some(w) => &w.text,
    };
    let base = if target.starts_with('/') { PathBuf::from("/") } else { shell.cwd.clone()? };
    Some(lexical(&base.join(target)))
}

/// `NAME=value` (the raw word): the name and the raw value.
fn assignment(raw: &str) -> Option<(&str, &str)> {
    let (name, value) = raw.split_once('=')?;
    let valid = !name.is_empty()
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !name.starts_with(|c: char| c.is_ascii_digit());
    valid.then_some((name, value))
}

/// The directories of a `PATH` value as written (`"$PWD/node_modules/.bin:$PATH"`): `$PATH`
/// is the current one, `$PWD` the current directory; any other expansion is unknown.
fn path_value(raw: &str, shell: &Shell) -> SearchPath {
    let value: String = raw.chars().filter(|c| *c != '"' && *c != '\'').collect();
    let mut out = Vec::new();
    for part in value.split(':') {
        let pwd = ["$PWD", "${PWD}"].iter().find_map(|p| part.strip_prefix(p));
        match part {
            "$PATH" | "${PATH}" => out.extend(shell.path.iter().cloned()),
            "" => {}
            p if !p.contains(['$', '`', '~']) && p.starts_with('/') => {
                out.push(PathDir::Dir(PathBuf::from(p)));
            }
            p if !p.contains(['$', '`', '~']) => match &shell.cwd {
                Some(cwd) => out.push(PathDir::Dir(lexical(&cwd.join(p)))),
                None => out.push(PathDir::Unknown(p.to_owned())),
            },
            p => match (pwd, &shell.cwd) {
                (Some(rest), Some(cwd)) if !rest.contains(['$', '`']) => {
                    let rest = rest.trim_start_matches('/');
                    out.push(PathDir::Dir(lexical(&cwd.join(rest))));
                }
                _ => out.push(PathDir::Unknown(p.to_owned())),
            },
        }
    }
    out.into()
}

/// A shortened command text for a note.
fn short(s: &str) -> String {
    const MAX: usize = 60;
    let s = s.trim();
    match s.char_indices().nth(MAX) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_owned(),
    }
}

fn short_words(words: &[Word]) -> String {
    short(&words.iter().map(|w| w.raw.as_str()).collect::<Vec<_>>().join(" "))
}

#[cfg(test)]
#[path = "tests.rs"]
mod tests;
