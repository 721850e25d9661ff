//! Owned background tasks: every spawn in prova goes through [`OwnedTask::spawn`], which
//! names the task, runs it inside a tracing span, and aborts it when the handle is dropped —
//! so a forgotten handle cannot leak a task past the thing that owned it. `detach` is the
//! explicit way out.

use std::future::Future;

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
    async fn join_returns_the_output() {
        let t = OwnedTask::spawn("answer", async { 42 });
        assert_eq!(t.join().await.unwrap(), 42);
    }
}
