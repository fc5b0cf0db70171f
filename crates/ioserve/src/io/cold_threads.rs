//! The bound on pool threads working on cold ranges, shared by the strategies' read-ahead
//! and the response writer's sendfile(2) calls on the pool.

use std::future::Future;
use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// How many pool threads work on cold ranges at once (`--cold-threads`, shared by the
/// workers), for each of the two kinds of work: windows being read into the page cache,
/// and sendfile(2) calls into sockets. nginx bounds the same work with its thread
/// pool's `threads=`.
///
/// The default, half the CPUs, leaves the other half to the event loops. In
/// `cargo xtask loadtest --cold` on 2 CPUs (16 cold downloads, disk reads limited to
/// 200 MB/s), paired runs of three rounds gave a hot p99 of 0.81-1.83 ms with a thread
/// per download, 0.51-0.54 ms with one sendfile at a time, and 0.48-0.57 ms with one
/// window read at a time besides, at the same 200 MB/s.
#[derive(Debug)]
pub struct ColdThreads {
    reads: Arc<Semaphore>,
    sends: Arc<Semaphore>,
}

impl ColdThreads {
    /// At most `threads` (at least 1) of each kind at once.
    pub fn new(threads: usize) -> ColdThreads {
        ColdThreads {
            reads: Arc::new(Semaphore::new(threads.max(1))),
            sends: Arc::new(Semaphore::new(threads.max(1))),
        }
    }

    /// Waits until one more window may be read into the page cache; the read runs while
    /// the permit lives. The future borrows nothing, so a spawned task may wait on it.
    pub(crate) fn read_permit(
        &self,
    ) -> impl Future<Output = OwnedSemaphorePermit> + Send + 'static {
        let reads = Arc::clone(&self.reads);
        async move { permit(&reads).await }
    }

    /// Waits (on the loop, in turn) until one more sendfile call may run; it runs
    /// while the permit lives.
    pub(crate) async fn send_permit(&self) -> OwnedSemaphorePermit {
        permit(&self.sends).await
    }
}

async fn permit(semaphore: &Arc<Semaphore>) -> OwnedSemaphorePermit {
    Arc::clone(semaphore)
        .acquire_owned()
        .await
        .expect("the semaphore is never closed")
}
