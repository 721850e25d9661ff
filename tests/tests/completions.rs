//! `prova completions <shell>` (issue 16): clap_complete scripts for bash, zsh and fish that
//! know the subcommands.

use prova_tests::TempWorkspace;

#[test]
fn bash_zsh_and_fish_scripts_generate_and_know_the_subcommands() {
    let ws = TempWorkspace::new();
    for (shell, marker) in
        [("bash", "complete -F"), ("zsh", "#compdef prova"), ("fish", "complete -c prova")]
    {
        let out = ws.prova(["completions", shell]).run();
        out.assert_code(0);
        out.assert_stdout_contains(marker);
        for sub in ["run", "init", "ls"] {
            out.assert_stdout_contains(sub);
        }
    }
    ws.prova(["completions", "tcsh"]).run().assert_code(2);
}
