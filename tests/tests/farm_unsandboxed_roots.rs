//! A worker without a sandbox (`--sandbox=none`) never lets a task write into its blob
//! cache. Its exec roots hardlinked each input to the cached blob, as a sandboxed worker's do
//! (whose sandbox binds them read-only); without one a task that rewrote an input in place —
//! a formatter, run as root or after a `chmod` of the file the worker owns — rewrote the
//! blob, and every later task on that worker that declared the same bytes read the new ones
//! under the old digest: wrong outputs, cached under keys of the right inputs. Inputs are
//! now copies there (and installed trees are built from copies: `worker/src/trees.rs`).

use prova_tests::TempWorkspace;
use prova_tests::cluster::{Cluster, Sandbox};

#[test]
fn a_task_rewriting_its_input_in_place_leaves_the_next_tasks_input_as_declared() {
    // Roots in the work dir (on the blob cache's file system, where a link is possible) and
    // on a tmpfs (where the root's files are copies anyway).
    for roots in ["work-dir", "auto"] {
        rewrite_then_read(roots);
    }
}

fn rewrite_then_read(roots: &str) {
    let farm = Cluster::builder()
        .workers(1)
        .sandbox(Sandbox::None)
        .worker_args(0, ["--exec-roots", roots])
        .start();
    // `p/src/a.txt` and `q/src/a.txt` hold the same bytes: one blob on the worker.
    let ws = TempWorkspace::new()
        .file("prova.toml", "[workspace]\nprojects = [\"p\", \"q\"]\n")
        .file("p/src/a.txt", "hello\n")
        .file("q/src/a.txt", "hello\n")
        .file(
            "p/prova.toml",
            "[tasks.fmt]\ncommand = \"chmod u+w src/a.txt && printf rewritten > src/a.txt\"\n\
             inputs = [\"src/a.txt\"]\noutputs = []\n",
        )
        .file(
            "q/prova.toml",
            "[tasks.build]\ncommand = \"mkdir -p out && cat src/a.txt > out/o.txt\"\n\
             inputs = [\"src/a.txt\"]\noutputs = [\"out/**\"]\n",
        );
    // Its write outside its outputs fails it; the worker's cache must not keep it either.
    farm.run(&ws, ["fmt", "-p", "p"]).assert_code(1);
    farm.run(&ws, ["build", "-p", "q"]).assert_code(0);
    assert_eq!(ws.read("q/out/o.txt"), "hello\n", "{roots}: the blob of `hello\\n` was rewritten");
    assert_eq!(ws.read("p/src/a.txt"), "hello\n", "{roots}: the workspace's file was");
}
