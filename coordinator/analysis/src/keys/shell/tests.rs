//! Which programs a command starts, read from plain strings.

use std::path::PathBuf;

use super::*;

fn start() -> Start {
    Start::new(PathBuf::from("/ws/app"), Some("/usr/local/bin:/usr/bin:/bin"))
}

/// The words of the programs `script` starts.
fn words(script: &str) -> Vec<String> {
    analyse(script, &start()).invocations.into_iter().map(|i| i.word).collect()
}

fn unkeyed(script: &str) -> Vec<String> {
    analyse(script, &start()).unkeyed
}

#[test]
fn every_command_of_a_list_or_pipeline_is_a_program() {
    assert_eq!(words("tsc -p . && cp a b"), ["tsc", "cp"]);
    assert_eq!(
        words("mkdir -p dist; grep -v x src/a | sort > dist/out.txt"),
        ["mkdir", "grep", "sort"]
    );
    assert_eq!(words("a || b & c |& d"), ["a", "b", "c", "d"]);
    assert_eq!(words("a\nb\n\n# comment c\nd # e"), ["a", "b", "d"]);
    assert_eq!(words("(cd sub && make) && { lint; }"), ["make", "lint"]);
    assert_eq!(words("if test -f x; then build; else other; fi"), ["build", "other"]);
    assert_eq!(words("while check; do work; done"), ["check", "work"]);
    assert_eq!(words("for f in a b c; do gzip $f; done"), ["gzip"]);
    assert_eq!(words("! grep -q x y"), ["grep"]);
}

#[test]
fn builtins_assignments_and_redirections_start_nothing_themselves() {
    assert_eq!(words("echo hi > out; test -f x; [ -d y ]; true; :"), Vec::<String>::new());
    assert_eq!(words("NODE_ENV=production node build.js"), ["node"]);
    assert_eq!(words("X=1; Y=$(git rev-parse HEAD) tool 2>&1 >log <in"), ["git", "tool"]);
    assert_eq!(words("tool >out.txt 2>>err.txt"), ["tool"]);
    assert_eq!(words("cat <<EOF > x\nnot a command\nEOF\nnext"), ["cat", "next"]);
    assert_eq!(words("cat <<-'EOF'\n\t$(rm -rf /)\n\tEOF"), ["cat"]);
}

#[test]
fn wrappers_start_the_program_they_name_too() {
    assert_eq!(words("env X=1 -u Y tool --flag"), ["env", "tool"]);
    assert_eq!(words("exec tool"), ["tool"]);
    assert_eq!(words("command tool; command -v other"), ["tool"]);
    assert_eq!(words("nohup tool &"), ["nohup", "tool"]);
    assert_eq!(words("time tool"), ["tool"]);
    assert_eq!(words("nice -n 5 tool"), ["nice", "tool"]);
    assert_eq!(words("timeout -s KILL 10s tool x"), ["timeout", "tool"]);
    assert_eq!(words("find . -name x | xargs -n 1 -P 4 tool"), ["find", "xargs", "tool"]);
    assert_eq!(words("stdbuf -oL tool"), ["stdbuf", "tool"]);
    assert_eq!(words("env -- tool"), ["env", "tool"]);
}

#[test]
fn sh_c_and_substitutions_are_read_in_turn() {
    assert_eq!(words("sh -c 'tool a && other'"), ["sh", "tool", "other"]);
    assert_eq!(words("bash -euo pipefail -c \"cd x && tool\""), ["bash", "tool"]);
    assert_eq!(words("tool $(helper --x) `other`"), ["helper", "other", "tool"]);
    assert_eq!(words("echo \"$(inner)\""), ["inner"]);
    assert_eq!(words("sh scripts/build.sh"), ["sh"]);
}

#[test]
fn a_cd_moves_where_relative_programs_resolve() {
    let a = analyse("cd sub && ./run.sh && cd ../.. && ./x", &start());
    let cwds: Vec<Option<PathBuf>> = a.invocations.iter().map(|i| i.cwd.clone()).collect();
    assert_eq!(cwds, [Some(PathBuf::from("/ws/app/sub")), Some(PathBuf::from("/ws"))]);
    // A subshell's cd ends with it.
    let a = analyse("(cd sub && a) && b", &start());
    assert_eq!(a.invocations[1].cwd, Some(PathBuf::from("/ws/app")));
    // A cd prova cannot follow leaves the directory unknown.
    let a = analyse("cd $DIR && ./x", &start());
    assert_eq!(a.invocations[0].cwd, None);
}

#[test]
fn a_path_the_command_sets_is_the_one_programs_are_looked_up_on() {
    // The JS script form prova writes for package.json scripts.
    let a = analyse(
        "PATH=\"$PWD/node_modules/.bin:$PWD/../node_modules/.bin:$PATH\"; export PATH; tsc -b",
        &start(),
    );
    let tsc = &a.invocations[0];
    assert_eq!(tsc.word, "tsc");
    assert!(tsc.path_changed);
    assert_eq!(
        tsc.path[..2],
        [
            PathDir::Dir(PathBuf::from("/ws/app/node_modules/.bin")),
            PathDir::Dir(PathBuf::from("/ws/node_modules/.bin")),
        ]
    );
    assert_eq!(tsc.path[2], PathDir::Dir(PathBuf::from("/usr/local/bin")));
    // An assignment before a command is that command's only.
    let a = analyse("PATH=/opt/bin tool; other", &start());
    assert_eq!(*a.invocations[0].path, [PathDir::Dir(PathBuf::from("/opt/bin"))]);
    assert!(!a.invocations[1].path_changed);
    // A value prova cannot read stays unknown.
    let a = analyse("PATH=$HOME/bin:$PATH tool", &start());
    assert_eq!(a.invocations[0].path[0], PathDir::Unknown("$HOME/bin".to_owned()));
}

#[test]
fn package_runners_start_their_tool_from_node_modules_first() {
    let a = analyse("npx tsc -b && pnpm exec eslint . && yarn exec jest", &start());
    let got: Vec<(&str, bool)> =
        a.invocations.iter().map(|i| (i.word.as_str(), i.node_bin)).collect();
    assert_eq!(
        got,
        [
            ("npx", false),
            ("tsc", true),
            ("pnpm", false),
            ("eslint", true),
            ("yarn", false),
            ("jest", true)
        ]
    );
    assert_eq!(words("npm exec -- vitest run"), ["npm", "vitest"]);
    assert_eq!(words("npx --yes -p typescript tsc"), ["npx", "tsc"]);
    assert_eq!(words("npx -c 'tsc && vite build'"), ["npx", "tsc", "vite"]);
    assert_eq!(words("pnpm --filter web exec tsc"), ["pnpm", "tsc"]);
}

#[test]
fn what_cannot_be_known_without_running_it_is_named() {
    let said = |s: &str| unkeyed(s).join("\n");
    assert!(said("$TOOL build").contains("`$TOOL`"), "{}", said("$TOOL build"));
    assert!(said("$(which tsc) -b").contains("chosen when the command runs"));
    assert!(said("eval \"$CMD\"").contains("`eval"));
    assert!(said(". ./env.sh && tool").contains("sourced file"));
    assert!(said("npm run build").contains("package.json script `build`"));
    assert!(said("pnpm lint").contains("`pnpm lint`"));
    assert!(said("yarn test").contains("script `test`"));
    assert!(said("npx tsc@5 -b").contains("fetched"));
    assert!(said("pnpm dlx cowsay").contains("fetched"));
    assert!(said("sh -c \"$SCRIPT\"").contains("chosen when the command runs"));
    assert!(said("echo 'unterminated").contains("cannot read it"));
    assert!(said("cat <<EOF\n$(gen)\nEOF").contains("here-document"));
    // Plain commands have nothing to say.
    assert!(unkeyed("tsc -b && npm ci && pnpm install").is_empty());
}

#[test]
fn a_case_statement_runs_its_branches_not_its_patterns() {
    assert_eq!(
        words("case $(uname) in Linux|linux) build;; *) other;; esac; after"),
        ["uname", "build", "other", "after"]
    );
    assert_eq!(words("case x in (a) one ;; b) two\nesac"), ["one", "two"]);
}

#[test]
fn a_function_is_not_a_program() {
    assert_eq!(words("f() { tool; }; f; f"), ["tool"]);
    assert_eq!(words("function g { tool; }; g"), ["tool"]);
}

#[test]
fn quoting_and_escapes_give_the_word_the_shell_sees() {
    assert_eq!(words("'my tool' x"), ["my tool"]);
    assert_eq!(words("\"/opt/a b/tool\""), ["/opt/a b/tool"]);
    assert_eq!(words("to\\\nol"), ["tool"]);
    assert_eq!(words("./bin/x"), ["./bin/x"]);
}

#[test]
fn a_case_inside_another_compound_command_is_read_too() {
    assert_eq!(words("if x; then case $y in a) one;; esac; fi; two"), ["x", "one", "two"]);
}
