//! The survey run of a local inputs proof: every undeclared read in one round (issue 11).
//!
//! The sandboxed run sees only the declared inputs, so a task stops at the first file it
//! lacks and the reads behind it stay unknown. When its trace met such a place
//! ([`diverged`]), the task runs once more traced, in a sandbox that shows the **whole
//! workspace** at the exec root's path, read-only, with its writes landing on a throw-away
//! tmpfs:
//!
//! - a tmpfs at the exec root's path; each directory on the way to a declared output
//!   directory is made on it (`--dir`), every other workspace entry beside them is mounted
//!   read-only from the workspace (`--ro-bind`, symlinks recreated as symlinks), `.prova`
//!   left out; the output directories themselves start empty (as after cleaning);
//! - so a new file beside the outputs (`tsconfig.tsbuildinfo`) is written to the tmpfs and
//!   the task carries on, while a write to a workspace file fails (`EROFS`); both are in the
//!   trace, and nothing reaches the workspace.
//!
//! Its trace ([`super::trace::survey_reads`]) names what the task read that exists (files
//! it opened, stat'ed, executed) besides what it probed and listed; the coordinator keeps
//! what the key does not represent. The sandboxed run still decides the verdict's failure:
//! the survey only adds paths.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use prova_protocol::globs::is_within;
use prova_protocol::spec::ExitKind;
use prova_protocol::task::OwnedTask;
use prova_protocol::work::{Assignment, ReadsReport};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::bwrap::{SandboxConfig, ViewOp};
use crate::exec::{ProcessIo, ProcessRequest};
use crate::execroot::OutputLayout;
use crate::runner::{WorkerContext, join};

/// Most mount operations of one survey view (a directory of many entries on the way to an
/// output directory): past this the survey is skipped and the proof names what the
/// sandboxed run alone finds.
pub const MAX_VIEW_OPS: usize = 4096;

/// Why no survey view was made.
#[derive(Debug, thiserror::Error)]
pub enum SurveyError {
    /// The view would need more than [`MAX_VIEW_OPS`] mounts.
    #[error("the workspace view needs over {MAX_VIEW_OPS} mounts")]
    TooLarge,
    /// Listing a workspace directory failed.
    #[error("listing {}: {source}", path.display())]
    Io {
        /// The directory.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
}

/// The view of workspace `ws` at exec root `root` for a task whose outputs are laid out as
/// `layout`: see the module docs.
pub fn view(ws: &Path, root: &Path, layout: &OutputLayout) -> Result<Vec<ViewOp>, SurveyError> {
    // Output directories start empty, as after cleaning; literal outputs absent.
    let empty: BTreeSet<&str> =
        layout.slots.iter().filter(|(_, dir)| *dir).map(|(s, _)| s.as_str()).collect();
    let hidden: BTreeSet<&str> =
        layout.slots.iter().filter(|(_, dir)| !*dir).map(|(s, _)| s.as_str()).collect();
    // Every directory holding an output, and on the way to one, the root ("") first.
    let mut open: BTreeSet<String> = BTreeSet::new();
    open.insert(String::new());
    for w in layout.dirs() {
        let mut acc = String::new();
        for part in w.split('/').filter(|p| !p.is_empty()) {
            if !acc.is_empty() {
                acc.push('/');
            }
            acc.push_str(part);
            open.insert(acc.clone());
        }
    }
    let mut ops = Vec::new();
    for dir in &open {
        if !dir.is_empty() {
            ops.push(ViewOp::Dir(join(root, dir)));
        }
        if empty.contains(dir.as_str()) {
            continue;
        }
        let host = join(ws, dir);
        let Ok(meta) = fs::symlink_metadata(&host) else { continue };
        if !meta.is_dir() {
            continue;
        }
        let rd =
            fs::read_dir(&host).map_err(|source| SurveyError::Io { path: host.clone(), source })?;
        let mut names: Vec<String> = rd
            .filter_map(Result::ok)
            .filter_map(|e| e.file_name().to_str().map(str::to_owned))
            .collect();
        names.sort_unstable();
        for name in names {
            let rel = if dir.is_empty() { name.clone() } else { format!("{dir}/{name}") };
            if name == ".prova" || open.contains(&rel) || hidden.contains(rel.as_str()) {
                continue;
            }
            let src = join(ws, &rel);
            let dst = join(root, &rel);
            match fs::read_link(&src) {
                Ok(target) => ops.push(ViewOp::Symlink(target.to_string_lossy().into_owned(), dst)),
                Err(_) => ops.push(ViewOp::RoBind(src, dst)),
            }
            if ops.len() > MAX_VIEW_OPS {
                return Err(SurveyError::TooLarge);
            }
        }
    }
    Ok(ops)
}

/// Runs the survey of assignment `a` (a local exec-root proof with the workspace at `ws`,
/// its exec root at `root`, its task argv `inner` and environment `env`): sandboxed per
/// [`view`], traced, its output discarded. What its trace says, or `None` when no survey
/// could be made (the proof then names what the sandboxed run alone finds).
pub async fn run(
    a: &Assignment,
    ctx: &WorkerContext,
    ws: &Path,
    root: &Path,
    inner: &[String],
    env: &[(String, String)],
    cancel: CancellationToken,
) -> Option<ReadsReport> {
    let layout = OutputLayout::new(&a.spec.project_dir, &a.spec.outputs).ok()?;
    let ops = match view(ws, root, &layout) {
        Ok(ops) => ops,
        Err(e) => {
            tracing::debug!(task = %a.spec.id, "no survey run: {e}");
            return None;
        }
    };
    let cwd = if a.spec.project_dir.is_empty() {
        root.to_owned()
    } else {
        root.join(&a.spec.project_dir)
    };
    let mut cfg = SandboxConfig::new(root, cwd.clone());
    cfg.network = a.spec.network;
    cfg.view = Some(ops);
    // The same toolchains as the sandboxed run it follows (never the workspace: the view
    // shows that, read-only, at the root's path).
    cfg.extra_ro = crate::rootprep::toolchain_dirs(ctx, env, root);
    cfg.masked = crate::rootprep::masked_dirs(ctx);
    match super::identity_overlays(&ctx.work_dir.join("identity"), &cfg, "prova") {
        Ok(o) => cfg.overlays = o,
        Err(e) => tracing::debug!("no identity files for the survey: {e}"),
    }
    match super::etc::etc_view(&ctx.work_dir.join("etc"), &cfg) {
        Ok(v) => cfg.etc = v,
        Err(e) => tracing::debug!("the survey's /etc is bound path by path: {e}"),
    }
    let traces = ctx.work_dir.join("traces");
    let _ = fs::create_dir_all(&traces);
    let trace = traces.join(format!("{}-{}.survey.trace", std::process::id(), a.attempt));
    let tracer = ctx.strace?;
    let argv = super::strace_argv(&trace, &super::bwrap_argv(&cfg, inner), tracer);
    let (tx, mut rx) = mpsc::channel::<Vec<u8>>(64);
    let drain =
        OwnedTask::spawn("sandbox.survey.drain", async move { while rx.recv().await.is_some() {} });
    let req = ProcessRequest {
        argv,
        cwd,
        env: env.to_vec(),
        umask: None,
        timeout: a.spec.timeout_ms.map(Duration::from_millis),
        kill_grace: ctx.config.kill_grace,
        log_limit: 0,
        ready: None,
    };
    let result = ctx.executor.run(req, ProcessIo { output: tx, ready: None }, cancel).await;
    let _ = drain.join().await;
    let reads = match result {
        Ok(r) if !matches!(r.exit, ExitKind::Aborted | ExitKind::SpawnFailed(_)) => {
            let (t, r, w) = (trace.clone(), root.to_owned(), ws.to_owned());
            OwnedTask::spawn_blocking("sandbox.survey.reads", move || {
                super::trace::survey_reads(&t, &r, &w)
            })
            .join()
            .await
            .ok()
            .and_then(|r| r.map_err(|e| tracing::debug!("reading the survey trace: {e}")).ok())
        }
        _ => None,
    };
    let _ = fs::remove_file(&trace);
    reads
}

/// Where the sandboxed run whose trace is `reads` touched the workspace `ws` (laid out for
/// outputs `layout`) differently from how a survey would see it, if anywhere: the first
/// such path, to log.
///
/// A survey can only add reads that follow such a place. Up to the first lookup, listing or
/// write where the exec root and the survey's view differ, both runs see the same files and
/// take the same path; so when the sandboxed run met none, a survey would read exactly what
/// it read (whatever a nondeterministic task does aside). The places, each compared with the
/// view [`view`] makes — the workspace, but for `.prova` and the output slots (emptied, as
/// in the root):
/// - a lookup that failed in the root of a path the workspace holds;
/// - a directory listed whose workspace entries the root lacked one of (or a listing cut
///   short);
/// - a write outside the output slots but of a new entry of a directory the root binds
///   writable (one may refuse it where the other does not: a workspace file is read-only
///   in the survey).
///
/// Conservative: a place the key does represent (an input were it there, a hidden upstream)
/// still counts — a survey more, never a read less.
pub fn diverged(reads: &ReadsReport, ws: &Path, layout: &OutputLayout) -> Option<String> {
    // What both runs show alike whatever the workspace holds: the output slots (an emptied
    // directory or an absent file, then what the task made there) and `.prova` (in neither).
    let alike =
        |rel: &str| is_within(rel, ".prova") || layout.slots.iter().any(|(s, _)| is_within(rel, s));
    let exists = |rel: &str| fs::symlink_metadata(join(ws, rel)).is_ok();
    if let Some(p) = reads.missing.iter().find(|p| !alike(p) && exists(p)) {
        return Some(p.clone());
    }
    for l in reads.listed.iter().filter(|l| !alike(&l.dir)) {
        let Ok(rd) = fs::read_dir(join(ws, &l.dir)) else { continue };
        if !l.complete {
            return Some(format!("{}/", l.dir));
        }
        for e in rd.filter_map(Result::ok) {
            let Some(name) = e.file_name().to_str().map(str::to_owned) else {
                return Some(format!("{}/", l.dir));
            };
            let rel = if l.dir.is_empty() { name.clone() } else { format!("{}/{name}", l.dir) };
            if !alike(&rel) && l.entries.binary_search(&name).is_err() {
                return Some(rel);
            }
        }
    }
    // A write both take alike: inside a slot, or a new entry of a directory the root binds
    // writable (made on the survey's tmpfs too). Anything else may be refused by one only.
    let dirs = layout.dirs();
    let parent = |w: &str| w.rsplit_once('/').map_or("", |(d, _)| d).to_owned();
    let both_take = |w: &str| alike(w) || (!exists(w) && dirs.contains(&parent(w)));
    reads.wrote.iter().find(|w| !both_take(w)).cloned()
}

/// `into` (the sandboxed run's reads) with a survey's added: its failed lookups, listings,
/// writes, and what it read.
pub fn merge(into: &mut ReadsReport, survey: ReadsReport) {
    let union = |a: &mut Vec<String>, b: Vec<String>| {
        a.extend(b);
        a.sort();
        a.dedup();
    };
    union(&mut into.missing, survey.missing);
    union(&mut into.wrote, survey.wrote);
    union(&mut into.touched, survey.touched);
    for l in survey.listed {
        if !into.listed.iter().any(|x| x.dir == l.dir) {
            into.listed.push(l);
        }
    }
    into.listed.sort_by(|a, b| a.dir.cmp(&b.dir));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_view_shows_the_workspace_read_only_with_empty_output_dirs() {
        let ws = tempfile::tempdir().unwrap();
        let w = ws.path();
        for d in ["p/src", "p/dist", "q", ".prova/cache"] {
            fs::create_dir_all(w.join(d)).unwrap();
        }
        fs::write(w.join("p/a.txt"), "a").unwrap();
        fs::write(w.join("p/dist/stale.js"), "old").unwrap();
        std::os::unix::fs::symlink("../q", w.join("p/link")).unwrap();
        fs::write(w.join("top.txt"), "t").unwrap();
        let root = Path::new("/r");
        let layout = |outputs: &[&str]| {
            let outputs: Vec<String> = outputs.iter().map(|o| (*o).to_owned()).collect();
            OutputLayout::new("p", &outputs).unwrap()
        };
        let ops = view(w, root, &layout(&["dist/**"])).unwrap();
        let ro = |rel: &str| ViewOp::RoBind(w.join(rel), root.join(rel));
        assert_eq!(
            ops,
            [
                ro("q"),
                ro("top.txt"),
                ViewOp::Dir(root.join("p")),
                ro("p/a.txt"),
                ViewOp::Symlink("../q".into(), root.join("p/link")),
                ro("p/src"),
                ViewOp::Dir(root.join("p/dist")),
            ]
        );
        // Outputs in the project's own directory: its entries are still shown, but for the
        // output directory (empty) and the literal output (absent, as after cleaning).
        fs::write(w.join("p/info.json"), "stale").unwrap();
        let ops = view(w, root, &layout(&["dist/**", "info.json"])).unwrap();
        assert!(ops.contains(&ro("p/a.txt")) && !ops.contains(&ro("p/dist")), "{ops:?}");
        assert!(!ops.contains(&ro("p/info.json")), "{ops:?}");
        let ops = view(w, root, &layout(&["**/*.js"])).unwrap();
        assert!(ops.contains(&ro("p/a.txt")) && ops.contains(&ro("p/dist")), "{ops:?}");
    }

    /// A sandboxed run's reads, from plain values.
    fn reads(missing: &[&str], listed: &[(&str, &[&str])], wrote: &[&str]) -> ReadsReport {
        let v = |x: &[&str]| x.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        ReadsReport {
            traced: true,
            missing: v(missing),
            listed: listed
                .iter()
                .map(|(dir, entries)| prova_protocol::work::Listing {
                    dir: (*dir).to_owned(),
                    entries: v(entries),
                    complete: true,
                })
                .collect(),
            touched: vec![],
            wrote: v(wrote),
        }
    }

    #[test]
    fn a_survey_follows_only_a_place_where_the_root_and_the_workspace_differ() {
        let ws = tempfile::tempdir().unwrap();
        let w = ws.path();
        for d in ["p/src", "p/dist", "p/extra", ".prova/cache", "q"] {
            fs::create_dir_all(w.join(d)).unwrap();
        }
        for f in ["p/src/a.ts", "p/src/b.ts", "p/dist/old.js", "p/info.json", "p/README", "q/x"] {
            fs::write(w.join(f), "x").unwrap();
        }
        let outputs = ["dist/**".to_owned(), "info.json".to_owned()];
        let layout = OutputLayout::new("p", &outputs).unwrap();
        let at = |r: ReadsReport| diverged(&r, w, &layout);
        let none: &[(&str, &[&str])] = &[];

        // Nothing differs: probes of paths the workspace lacks too, of the outputs (emptied
        // in both), of `.prova`; listings that show every workspace entry; writes inside
        // the outputs, or of new files beside them (the survey's tmpfs takes them too).
        let alike = reads(
            &["p/node_modules", "p/src/c.ts", "p/dist/old.js", "p/info.json", ".prova/cache"],
            &[("p/src", &["a.ts", "b.ts"]), ("p/dist", &["new.js"])],
            &["p/dist", "p/dist/new.js", "p/info.json", "p/notes.txt"],
        );
        assert_eq!(at(alike), None);
        // A failed lookup of a workspace file or directory the root lacks.
        assert_eq!(at(reads(&["q/x"], none, &[])), Some("q/x".to_owned()));
        assert_eq!(at(reads(&["p/extra"], none, &[])), Some("p/extra".to_owned()));
        // A listing short of a workspace entry, or cut short.
        assert_eq!(at(reads(&[], &[("p/src", &["a.ts"])], &[])), Some("p/src/b.ts".to_owned()));
        let mut cut = reads(&[], &[("p/src", &["a.ts", "b.ts"])], &[]);
        cut.listed[0].complete = false;
        assert_eq!(at(cut), Some("p/src/".to_owned()));
        // The root lists without the output slot's stale contents and `.prova`: alike.
        assert_eq!(at(reads(&[], &[("", &["p", "q"])], &[])), None);
        // A write the survey's read-only view refuses (a workspace file), or the root's.
        assert_eq!(at(reads(&[], none, &["p/README"])), Some("p/README".to_owned()));
        assert_eq!(at(reads(&[], none, &["q/new"])), Some("q/new".to_owned()));
        // A new file at the workspace's root: the survey's tmpfs takes it, the root does not.
        assert_eq!(at(reads(&[], none, &["top.txt"])), Some("top.txt".to_owned()));
    }
}
