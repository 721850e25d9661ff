//! [`CacheThread`]: the one thread per process that owns the [`Store`]. Callers send it
//! closures over a bounded channel and await the answer on a oneshot, so the SQLite
//! connection is only ever touched by that thread, blocking file and index work never runs
//! on an async worker, and no lock is held across an `.await`.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::Path;
use std::sync::Arc;
use std::thread::JoinHandle;

use tokio::sync::{mpsc, oneshot};

use super::error::CacheError;
use super::store::Store;

/// Calls waiting for the cache thread: enough to absorb a burst of a large run's lookups and
/// writes; when full, callers wait (backpressure) instead of queueing without bound.
pub const CACHE_QUEUE_CAPACITY: usize = 256;

/// One call, boxed: runs on the cache thread and sends its own reply.
type Job = Box<dyn FnOnce(&mut Store) + Send>;

/// A handle to the cache thread. Cheap to clone; the thread ends (and closes the store) when
/// every handle has been dropped and the queued calls are done.
#[derive(Clone, Debug)]
pub struct CacheThread {
    jobs: mpsc::Sender<Job>,
    /// The store's directory, known without a call to the thread.
    dir: Arc<Path>,
}

impl CacheThread {
    /// Starts the thread that owns `store`. The join handle lets a caller wait for the store
    /// to be closed (after the last handle is dropped); dropping it detaches the thread.
    pub fn spawn(store: Store) -> Result<(Self, JoinHandle<()>), CacheError> {
        let (jobs, rx) = mpsc::channel::<Job>(CACHE_QUEUE_CAPACITY);
        let dir = Arc::from(store.dir());
        let join = std::thread::Builder::new()
            .name("prova-cache".into())
            .spawn(move || serve(store, rx))
            .map_err(CacheError::Spawn)?;
        Ok((Self { jobs, dir }, join))
    }

    /// The store's directory ([`Store::dir`]): for paths under it, such as the blobs, without
    /// a round trip to the thread.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Opens the cache directory `dir` ([`Store::open`], on the calling thread) and starts its
    /// thread.
    pub fn open(dir: &Path) -> Result<(Self, JoinHandle<()>), CacheError> {
        Self::spawn(Store::open(dir)?)
    }

    /// [`Store::open_read_only`] of `dir`, on its thread.
    pub fn open_read_only(dir: &Path) -> Result<(Self, JoinHandle<()>), CacheError> {
        Self::spawn(Store::open_read_only(dir)?)
    }

    /// A [`Store::scratch`] store on its thread: no cache directory is touched.
    pub fn scratch() -> Result<(Self, JoinHandle<()>), CacheError> {
        Self::spawn(Store::scratch()?)
    }

    /// Runs `f` on the cache thread and returns what it returns. Waits while the queue is
    /// full. [`CacheError::ThreadGone`] if the thread stopped or `f` panicked.
    pub async fn call<R: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Store) -> R + Send + 'static,
    ) -> Result<R, CacheError> {
        let (job, reply) = job(f);
        self.jobs.send(job).await.map_err(|_| CacheError::ThreadGone)?;
        reply.await.map_err(|_| CacheError::ThreadGone)
    }

    /// [`call`](Self::call) for synchronous code. It blocks the calling thread, so it must
    /// not run on an async runtime's worker (tokio panics there): use `call` in async code,
    /// or this from `spawn_blocking` or a plain thread.
    pub fn call_blocking<R: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Store) -> R + Send + 'static,
    ) -> Result<R, CacheError> {
        let (job, reply) = job(f);
        self.jobs.blocking_send(job).map_err(|_| CacheError::ThreadGone)?;
        reply.blocking_recv().map_err(|_| CacheError::ThreadGone)
    }
}

/// Boxes `f` into a job that answers on the returned receiver.
fn job<R: Send + 'static>(
    f: impl FnOnce(&mut Store) -> R + Send + 'static,
) -> (Job, oneshot::Receiver<R>) {
    let (tx, rx) = oneshot::channel();
    let job: Job = Box::new(move |store| {
        // The caller may have stopped waiting (a cancelled future): nothing to do then.
        let _ = tx.send(f(store));
    });
    (job, rx)
}

/// The thread's loop: one job at a time until every sender is gone. A panicking job loses
/// its own reply (the caller sees `ThreadGone`), but the thread and the store live on: an open
/// transaction was rolled back when its guard unwound.
fn serve(mut store: Store, mut rx: mpsc::Receiver<Job>) {
    while let Some(job) = rx.blocking_recv() {
        if catch_unwind(AssertUnwindSafe(|| job(&mut store))).is_err() {
            tracing::error!("a cache call panicked; the cache thread continues");
        }
    }
    tracing::debug!(dir = %store.dir().display(), "cache thread: every handle dropped, closing");
    if let Err(e) = store.close() {
        tracing::warn!("closing the cache index: {e}");
    }
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc as std_mpsc;
    use std::time::Duration;

    use prova_protocol::task::OwnedTask;

    use super::*;
    use crate::TRUSTED;
    use crate::test_util::{entry, key};

    /// How long a test waits for the thread to end.
    const JOIN_WAIT: Duration = Duration::from_secs(10);

    /// Joins `join` on a helper thread; true if it ended within [`JOIN_WAIT`].
    fn joins_in_time(join: JoinHandle<()>) -> bool {
        let (tx, rx) = std_mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(join.join().is_ok());
        });
        rx.recv_timeout(JOIN_WAIT).unwrap_or(false)
    }

    #[tokio::test]
    async fn calls_from_async_and_blocking_contexts() {
        let dir = tempfile::tempdir().unwrap();
        let (cache, join) = CacheThread::open(dir.path()).unwrap();
        cache.call(|s| s.put_entry(&entry(1, "web#build", 10))).await.unwrap().unwrap();
        let got = cache.call(|s| s.get_entry(TRUSTED, &key(1))).await.unwrap().unwrap();
        assert_eq!(got.unwrap().task, "web#build");

        let c2 = cache.clone();
        let task = OwnedTask::spawn_blocking("test.blocking-caller", move || {
            c2.call_blocking(|s| s.get_entry(TRUSTED, &key(1)).map(|e| e.map(|e| e.created_ms)))
        });
        assert_eq!(task.join().await.unwrap().unwrap().unwrap(), Some(10));

        // Many concurrent callers through the bounded queue.
        let mut handles = Vec::new();
        for i in 0..(CACHE_QUEUE_CAPACITY as u64 * 2) {
            let c = cache.clone();
            handles.push(OwnedTask::spawn("test.caller", async move {
                c.call(move |s| s.record_durations(&[(format!("t{i}#x"), i)])).await
            }));
        }
        for h in handles {
            h.join().await.unwrap().unwrap().unwrap();
        }
        let n = cache.call(|s| s.durations().map(|d| d.len())).await.unwrap().unwrap();
        assert_eq!(n, CACHE_QUEUE_CAPACITY * 2);

        drop(cache);
        assert!(joins_in_time(join), "the thread ends when every handle is dropped");
    }

    #[test]
    fn blocking_calls_and_thread_end() {
        let dir = tempfile::tempdir().unwrap();
        let (cache, join) = CacheThread::open(dir.path()).unwrap();
        let clones: Vec<CacheThread> = (0..3).map(|_| cache.clone()).collect();
        let from_threads: Vec<_> = clones
            .into_iter()
            .enumerate()
            .map(|(i, c)| {
                std::thread::spawn(move || {
                    c.call_blocking(move |s| s.put_entry(&entry(i as u64, "a#b", i as i64)))
                })
            })
            .collect();
        for t in from_threads {
            t.join().unwrap().unwrap().unwrap();
        }
        let keys: Vec<_> = (0..3).map(key).collect();
        let n = cache.call_blocking(move |s| s.get_entries(TRUSTED, &keys).map(|m| m.len()));
        assert_eq!(n.unwrap().unwrap(), 3);
        drop(cache);
        assert!(joins_in_time(join));
    }

    #[test]
    fn a_panicking_call_does_not_stop_the_thread() {
        let dir = tempfile::tempdir().unwrap();
        let (cache, join) = CacheThread::open(dir.path()).unwrap();
        let r = cache.call_blocking(|s| -> u8 {
            // Panics inside an open transaction: the guard rolls it back while unwinding.
            let tx = s.conn_mut().transaction().unwrap();
            tx.execute("INSERT INTO durations (task, ms, samples) VALUES ('x', 1, 1)", []).unwrap();
            panic!("boom");
        });
        assert!(matches!(r, Err(CacheError::ThreadGone)));
        let d = cache.call_blocking(|s| s.durations()).unwrap().unwrap();
        assert!(d.is_empty(), "the panicked transaction was rolled back");
        drop(cache);
        assert!(joins_in_time(join));
    }
}
