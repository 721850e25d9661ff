//! Owned background tasks: every spawn in prova goes through [`OwnedTask`], which names the
//! task, runs it inside a tracing span, and aborts it when the handle is dropped — so a
//! forgotten handle cannot leak a task past the thing that owned it. `detach` is the explicit
//! way out. Blocking work goes through [`OwnedTask::spawn_blocking`] (or
//! [`OwnedTask::spawn_blocking_on`] from a destructor that found a runtime handle).
//!
//! The rule is enforced: the root `clippy.toml` disallows `tokio::spawn`,
//! `tokio::task::spawn_blocking` and `{Handle,Runtime}::spawn{,_blocking}` everywhere, and
//! this module is the one place allowed to call them.
// The one place raw spawns are allowed (see the root clippy.toml).
#![allow(clippy::disallowed_methods)]

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::runtime::Handle;
use tokio::task::{JoinError, JoinHandle};
use tracing::Instrument;

/// A spawned task that is aborted when dropped.
#[derive(Debug)]
pub struct OwnedTask<T> {
    handle: Option<JoinHandle<T>>,
    name: &'static str,
}

impl<T: Send + 'static> OwnedTask<T> {
    /// Spawns `fut` on the current runtime under a span named `name`.
    pub fn spawn<F>(name: &'static str, fut: F) -> Self
    where
        F: Future<Output = T> + Send + 'static,
    {
        let span = tracing::debug_span!("task", name);
        Self { handle: Some(tokio::spawn(fut.instrument(span))), name }
    }

    /// [`OwnedTask::spawn`] on the runtime of `rt` (for code outside the runtime's context,
    /// such as a test harness that owns a `Runtime` and drives it with `block_on`).
    pub fn spawn_on<F>(rt: &Handle, name: &'static str, fut: F) -> Self
    where
        F: Future<Output = T> + Send + 'static,
    {
        let span = tracing::debug_span!("task", name);
        Self { handle: Some(rt.spawn(fut.instrument(span))), name }
    }

    /// Runs the blocking closure `f` on the current runtime's blocking pool under a span named
    /// `name`. Dropping the handle aborts the task only if it has not started yet (a running
    /// closure cannot be interrupted).
    pub fn spawn_blocking<F>(name: &'static str, f: F) -> Self
    where
        F: FnOnce() -> T + Send + 'static,
    {
        Self::spawn_blocking_on(&Handle::current(), name, f)
    }

    /// [`OwnedTask::spawn_blocking`] on the runtime of `rt` (for code that is not inside the
    /// runtime's context, e.g. a destructor that found it with `Handle::try_current`).
    pub fn spawn_blocking_on<F>(rt: &Handle, name: &'static str, f: F) -> Self
    where
        F: FnOnce() -> T + Send + 'static,
    {
        let span = tracing::debug_span!("task", name);
        Self { handle: Some(rt.spawn_blocking(move || span.in_scope(f))), name }
    }

    /// The task's name.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// Lets the task outlive this handle.
    pub fn detach(mut self) -> JoinHandle<T> {
        match self.handle.take() {
            Some(h) => h,
            None => tokio::spawn(std::future::pending()),
        }
    }

    /// Waits for the task's result.
    pub async fn join(mut self) -> Result<T, JoinError> {
        match self.handle.take() {
            Some(h) => h.await,
            None => std::future::pending().await,
        }
    }

    /// Whether the task has finished.
    pub fn is_finished(&self) -> bool {
        self.handle.as_ref().is_none_or(JoinHandle::is_finished)
    }

    /// Aborts the task now.
    pub fn abort(&self) {
        if let Some(h) = &self.handle {
            h.abort();
        }
    }
}

/// Awaiting the handle (by `&mut`, e.g. in a `select!`) waits for the task's result, like
/// [`OwnedTask::join`], without giving up ownership.
impl<T> Future for OwnedTask<T> {
    type Output = Result<T, JoinError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.handle.as_mut() {
            Some(h) => Pin::new(h).poll(cx),
            None => Poll::Pending,
        }
    }
}

impl<T> Drop for OwnedTask<T> {
    fn drop(&mut self) {
        if let Some(h) = &self.handle {
            h.abort();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn dropping_the_handle_aborts_the_task() {
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let t = OwnedTask::spawn("pending", async move {
            let _keep = tx;
            std::future::pending::<()>().await;
        });
        drop(t);
        // The sender is dropped when the aborted task's future is dropped.
        assert!(rx.await.is_err());
    }

    #[tokio::test]
    async fn blocking_work_joins_with_its_output() {
        let t = OwnedTask::spawn_blocking("blocking", || 6 * 7);
        assert_eq!(t.join().await.unwrap(), 42);
    }

    #[tokio::test]
    async fn join_returns_the_output() {
        let t = OwnedTask::spawn("answer", async { 42 });
        assert_eq!(t.join().await.unwrap(), 42);
    }
}
