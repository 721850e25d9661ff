//! Following one execution, without I/O: what an `Operation` from the `Execute` /
//! `WaitExecution` stream means ([`read`]), and what to do after the stream ends or fails
//! ([`Follow::after`]): wait on the operation again, execute again (re-uploading the inputs
//! when the server says blobs are missing), or give up — each within a bound.

use prost::Message;
use tonic::Code;

use crate::layers::reapi::proto::{longrunning, re};

/// Consecutive stream failures (no message in between) before the execution fails.
pub const MAX_RECONNECTS: u32 = 5;
/// `FAILED_PRECONDITION` (missing inputs) answers before the execution fails.
pub const MAX_REUPLOADS: u32 = 3;

/// What one operation message says.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// Still going: its stage, when the metadata says.
    Progress(Option<re::execution_stage::Value>),
    /// Done with a result.
    Done(Box<re::ExecuteResponse>),
    /// Done, failed because blobs the action needs are missing (re-upload, then execute
    /// again).
    MissingBlobs(String),
    /// Done, failed for another reason.
    Failed(String),
}

fn status_text(code: i32, message: &str) -> String {
    format!("{:?}: {message}", Code::from_i32(code))
}

/// What `op` says.
pub fn read(op: &longrunning::Operation) -> Step {
    if !op.done {
        let stage = op
            .metadata
            .as_ref()
            .and_then(|m| re::ExecuteOperationMetadata::decode(m.value.as_slice()).ok())
            .and_then(|m| re::execution_stage::Value::try_from(m.stage).ok());
        return Step::Progress(stage);
    }
    let status = match &op.result {
        Some(longrunning::operation::Result::Error(s)) => Some((s.code, s.message.clone())),
        Some(longrunning::operation::Result::Response(any)) => {
            match re::ExecuteResponse::decode(any.value.as_slice()) {
                Ok(r) => match &r.status {
                    Some(s) if s.code != 0 => Some((s.code, s.message.clone())),
                    _ if r.result.is_none() => {
                        return Step::Failed("the server's response holds no result".into());
                    }
                    _ => return Step::Done(Box::new(r)),
                },
                Err(e) => return Step::Failed(format!("an undecodable ExecuteResponse: {e}")),
            }
        }
        None => return Step::Failed("the operation is done but holds no result".into()),
    };
    match status {
        Some((code, msg)) if code == Code::FailedPrecondition as i32 => Step::MissingBlobs(msg),
        Some((code, msg)) => Step::Failed(status_text(code, &msg)),
        None => Step::Failed("the operation is done but holds no result".into()),
    }
}

/// How a stream (or the call that opened it) ended without a done operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ended {
    /// The stream closed cleanly before the operation was done.
    Closed,
    /// The call failed with this status.
    Error(Code, String),
    /// The operation was done with missing inputs.
    MissingBlobs(String),
}

/// What to do next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Next {
    /// `WaitExecution` on the named operation.
    Wait(String),
    /// `Execute` again (the server may not have the operation, or never got the request).
    Execute,
    /// Upload the inputs again (the server lost or never had some), then `Execute`.
    Reupload,
    /// Fail the execution.
    GiveUp(String),
}

/// The state of following one execution: the operation's name once known, and the
/// failures so far.
#[derive(Debug, Clone, Default)]
pub struct Follow {
    /// The operation's name, once a message named it.
    pub name: Option<String>,
    failures: u32,
    reuploads: u32,
}

impl Follow {
    /// A message arrived: the stream works, so the failure count starts over.
    pub fn message(&mut self, op: &longrunning::Operation) {
        if !op.name.is_empty() {
            self.name = Some(op.name.clone());
        }
        self.failures = 0;
    }

    /// The failures in a row so far (a backoff grows with them).
    pub fn failures(&self) -> u32 {
        self.failures
    }

    /// What to do after `ended`.
    pub fn after(&mut self, ended: Ended) -> Next {
        match ended {
            Ended::MissingBlobs(msg) => {
                self.reuploads += 1;
                self.name = None;
                if self.reuploads > MAX_REUPLOADS {
                    return Next::GiveUp(format!(
                        "the server still misses inputs after {MAX_REUPLOADS} uploads: {msg}"
                    ));
                }
                Next::Reupload
            }
            Ended::Closed => self.retry("the operation stream closed early".to_owned()),
            Ended::Error(code, msg) => match code {
                // Not the server's own fault, and not something a retry would change.
                Code::InvalidArgument
                | Code::PermissionDenied
                | Code::Unauthenticated
                | Code::Unimplemented
                | Code::Cancelled => Next::GiveUp(format!("{code:?}: {msg}")),
                Code::FailedPrecondition => self.after(Ended::MissingBlobs(msg)),
                // The operation is unknown (the server restarted): execute again.
                Code::NotFound => {
                    self.name = None;
                    self.retry(format!("{code:?}: {msg}"))
                }
                _ => self.retry(format!("{code:?}: {msg}")),
            },
        }
    }

    fn retry(&mut self, why: String) -> Next {
        self.failures += 1;
        if self.failures > MAX_RECONNECTS {
            return Next::GiveUp(format!(
                "{why} ({MAX_RECONNECTS} retries in a row without an answer)"
            ));
        }
        match &self.name {
            Some(n) => Next::Wait(n.clone()),
            None => Next::Execute,
        }
    }
}

/// The wait before retry number `failures` (1-based): 100 ms doubling to 3.2 s.
pub fn backoff(failures: u32) -> std::time::Duration {
    std::time::Duration::from_millis(100u64 << failures.saturating_sub(1).min(5))
}

#[cfg(test)]
#[path = "operation_tests.rs"]
mod tests;
