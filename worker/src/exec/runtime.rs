//! A farm worker's check of a task's runtime inputs (`TaskSpec::runtime`): each command the
//! client folded into the key is run here the same way (`sh -c`, stderr dropped, the task's
//! environment) and its result compared with the client's. A mismatch is the task's error —
//! another toolchain on this machine would make an entry for the client's key that is not
//! what the client's machine produces.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use prova_protocol::key::{runtime_digest, runtime_script};
use prova_protocol::spec::{ExitKind, RuntimeCheck};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::{Executor, ProcessIo, ProcessRequest};

/// How long one runtime command may run.
const TIMEOUT: Duration = Duration::from_secs(30);

/// Why the task cannot run here, if a runtime input differs (the first that does).
pub async fn mismatch(
    executor: &Arc<dyn Executor>,
    checks: &[RuntimeCheck],
    env: &[(String, String)],
    cwd: &Path,
    cancel: &CancellationToken,
) -> Option<String> {
    for check in checks {
        let mut req = ProcessRequest::new(
            vec!["sh".to_owned(), "-c".to_owned(), runtime_script(&check.command)],
            cwd,
        );
        req.env = env.to_vec();
        req.timeout = Some(TIMEOUT);
        req.kill_grace = Duration::from_secs(1);
        req.log_limit = 64 * 1024;
        // Only the result matters: the output channel's receiver is dropped.
        let (output, _) = mpsc::channel(1);
        let r = executor.run(req, ProcessIo { output, ready: None }, cancel.clone()).await;
        let (digest, here) = match r {
            Ok(r) => {
                let code = match r.exit {
                    ExitKind::Code(c) => Some(c),
                    _ => None,
                };
                let text = String::from_utf8_lossy(&r.log.bytes).trim().to_owned();
                let here = match &r.exit {
                    ExitKind::Code(0) => text,
                    e => e.describe(),
                };
                (runtime_digest(&r.log.bytes, code), here)
            }
            Err(e) => (runtime_digest(b"", None), format!("could not run: {e}")),
        };
        if digest != check.digest {
            let client = check.shown.as_deref().map_or_else(String::new, |s| format!(" `{s}`"));
            let here: String = here.chars().take(80).collect();
            return Some(format!(
                "runtime input `{}` differs on this worker: here `{here}`, on the client{client}; \
                 the task's key is the client's toolchain, so it does not run here \
                 (install the same version on the farm, or run it locally)",
                check.command
            ));
        }
    }
    None
}
