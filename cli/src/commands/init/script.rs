//! What a `package.json` build script does, as far as `prova init` can tell: which `tsc`
//! calls it makes (and with what config and flags), whether it only cleans besides
//! (`rm -rf dist`, `rimraf dist`, lerna-lite's `remove dist`), and whether it runs anything
//! else — a bundler, a code generator — whose reads prova cannot tell.

use std::collections::BTreeMap;

use super::tsconfig::TscFlags;

/// One `tsc` invocation: its config (project-relative; `tsconfig.json` unless `-p`/`-b`
/// names another) and its flags.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct TscCall {
    pub config: String,
    pub flags: TscFlags,
}

/// What a script runs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct Shape {
    pub tsc: Vec<TscCall>,
    /// Something other than `tsc`, a cleaner or an `echo`: its inputs are unknown.
    pub other: Vec<String>,
}

/// How deep `npm run X` inside a script is followed.
const MAX_DEPTH: usize = 4;

/// Runners that start the word after them (`npx tsc`, `pnpm exec tsc`).
const RUNNERS: &[&str] = &["npx", "exec", "cross-env", "env", "dotenv", "--"];

/// The shape of script `name` of `scripts`, with its `pre` and `post` scripts (npm runs
/// them around it).
pub(super) fn shape(scripts: &BTreeMap<String, String>, name: &str) -> Shape {
    let mut out = Shape::default();
    for script in [format!("pre{name}"), name.to_owned(), format!("post{name}")] {
        if let Some(text) = scripts.get(&script) {
            walk(scripts, text, 0, &mut out);
        }
    }
    out
}

fn walk(scripts: &BTreeMap<String, String>, text: &str, depth: usize, out: &mut Shape) {
    for command in split_commands(text) {
        let words = words(&command);
        let mut rest: &[String] = &words;
        while let Some(first) = rest.first() {
            let is_env = first.contains('=') && !first.starts_with('-');
            if is_env || RUNNERS.contains(&first.as_str()) {
                rest = &rest[1..];
            } else {
                break;
            }
        }
        let Some(program) = rest.first().map(String::as_str) else { continue };
        let args = &rest[1..];
        match program {
            "tsc" => out.tsc.push(tsc_call(args)),
            "rm" | "rimraf" | "remove" | "del" | "del-cli" | "echo" | "true" | ":" => {}
            "shx" if args.first().is_some_and(|a| a == "rm") => {}
            "npm" | "pnpm" | "yarn" | "bun" => {
                let script = run_target(program, args);
                match script.and_then(|s| scripts.get(s)) {
                    Some(text) if depth < MAX_DEPTH => walk(scripts, text, depth + 1, out),
                    _ => out.other.push(command.trim().to_owned()),
                }
            }
            _ => out.other.push(command.trim().to_owned()),
        }
    }
}

/// The script `npm run X` / `pnpm X` / `yarn run X` names; `pnpm tsc` is `tsc` itself
/// (pnpm and yarn run a binary of that name when there is no such script) — left to the
/// caller's lookup, which fails for it and counts it as other.
fn run_target<'a>(program: &str, args: &'a [String]) -> Option<&'a str> {
    let mut args = args.iter().map(String::as_str).filter(|a| !a.starts_with('-'));
    let first = args.next()?;
    match (program, first) {
        (_, "run" | "run-script") => args.next(),
        ("npm", _) => None,
        (_, name) => Some(name),
    }
}

fn tsc_call(args: &[String]) -> TscCall {
    let mut call = TscCall { config: "tsconfig.json".to_owned(), flags: TscFlags::default() };
    let mut it = args.iter().map(String::as_str).peekable();
    while let Some(a) = it.next() {
        let mut value = || it.next().map(str::to_owned);
        match a {
            "-b" | "--build" => call.flags.build = true,
            "-p" | "--project" => {
                if let Some(p) = value() {
                    call.config = config_path(&p);
                }
            }
            "--outDir" => call.flags.out_dir = value(),
            "--rootDir" => call.flags.root_dir = value(),
            "--tsBuildInfoFile" => call.flags.buildinfo_file = value(),
            "--incremental" | "--composite" | "-i" => call.flags.incremental = true,
            p if call.flags.build && !p.starts_with('-') => call.config = config_path(p),
            _ => {}
        }
    }
    call
}

/// `-p .`, `-p src`, `-p tsconfig.build.json` → the config file, project-relative.
fn config_path(p: &str) -> String {
    let p = p.trim_start_matches("./").trim_end_matches('/');
    if p.ends_with(".json") {
        p.to_owned()
    } else if p.is_empty() || p == "." {
        "tsconfig.json".to_owned()
    } else {
        format!("{p}/tsconfig.json")
    }
}

/// The script's commands, split at `&&`, `||`, `;` and `|` outside quotes.
fn split_commands(text: &str) -> Vec<String> {
    let mut out = vec![String::new()];
    let mut quote: Option<char> = None;
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match (quote, c) {
            (Some(q), c) if c == q => {
                quote = None;
                push(&mut out, c);
            }
            (Some(_), c) => push(&mut out, c),
            (None, '\'' | '"') => {
                quote = Some(c);
                push(&mut out, c);
            }
            (None, ';') => out.push(String::new()),
            (None, '&' | '|') => {
                if chars.peek() == Some(&c) {
                    chars.next();
                }
                out.push(String::new());
            }
            (None, c) => push(&mut out, c),
        }
    }
    out.retain(|c| !c.trim().is_empty());
    out
}

fn push(out: &mut [String], c: char) {
    if let Some(last) = out.last_mut() {
        last.push(c);
    }
}

/// Whitespace-separated words, quotes removed.
fn words(command: &str) -> Vec<String> {
    command
        .split_whitespace()
        .map(|w| w.trim_matches(|c| c == '\'' || c == '"').to_owned())
        .filter(|w| !w.is_empty())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scripts(list: &[(&str, &str)]) -> BTreeMap<String, String> {
        list.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    }

    #[test]
    fn tsc_builds_with_cleaners_are_understood() {
        let s = scripts(&[
            ("build", "rm -rf dist && tsc -b"),
            ("b2", "remove dist && tsc"),
            ("b3", "npm run clean && tsc --project tsconfig.bundle.json --newLine LF"),
            ("clean", "rimraf dist"),
            ("b4", "tsc -p src --outDir lib && webpack"),
            ("b5", "NODE_ENV=production npx tsc -b ./tsconfig.build.json --verbose"),
            ("prebuild6", "rimraf dist"),
            ("build6", "tsc"),
            ("postbuild6", "cp README.md dist"),
        ]);
        let b = shape(&s, "build");
        assert_eq!(b.tsc.len(), 1);
        assert!(b.tsc[0].flags.build && b.other.is_empty());
        assert_eq!(b.tsc[0].config, "tsconfig.json");
        assert_eq!(shape(&s, "b2").tsc[0].config, "tsconfig.json");
        let b3 = shape(&s, "b3");
        assert_eq!((b3.tsc[0].config.as_str(), b3.other.len()), ("tsconfig.bundle.json", 0));
        let b4 = shape(&s, "b4");
        assert_eq!(b4.tsc[0].config, "src/tsconfig.json");
        assert_eq!(b4.tsc[0].flags.out_dir.as_deref(), Some("lib"));
        assert_eq!(b4.other, ["webpack"]);
        let b5 = shape(&s, "b5");
        assert_eq!((b5.tsc[0].config.as_str(), b5.other.len()), ("tsconfig.build.json", 0));
        assert!(shape(&s, "missing").tsc.is_empty());
        let b6 = shape(&s, "build6");
        assert_eq!((b6.tsc.len(), b6.other.as_slice()), (1, &["cp README.md dist".to_owned()][..]));
    }

    #[test]
    fn other_tools_are_named() {
        let s = scripts(&[("build", "webpack --config webpack.config.js --mode=production")]);
        let b = shape(&s, "build");
        assert!(b.tsc.is_empty());
        assert_eq!(b.other.len(), 1);
        let s = scripts(&[("build", "echo 'a && b' ; tsc")]);
        assert_eq!(shape(&s, "build").other.len(), 0);
    }
}
