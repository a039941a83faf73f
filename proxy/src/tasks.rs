//! Request work that outlives its handler: forwarding tasks and body
//! drains, tracked so a draining proxy waits for them.
//!
//! A response body is forwarded by a task of its own, and that task, not
//! the HTTP connection, finishes the request's trace (its record and its
//! ticket's `Finish`). A client that goes away ends its connection at once
//! while the task is still winding down, so waiting for connections alone
//! could exit before the last record was handed over. The drain waits for
//! [`Tasks::idle`] too.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::sync::Notify;

/// A count of running request tasks, and a way to wait for none.
#[derive(Debug, Clone, Default)]
pub struct Tasks {
    inner: Arc<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    running: AtomicUsize,
    idle: Notify,
}

/// Counts one task while it lives.
struct Running(Arc<Inner>);

impl Drop for Running {
    fn drop(&mut self) {
        if self.0.running.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.idle.notify_waiters();
        }
    }
}

impl Tasks {
    /// Spawns `work`, counted until it ends (or is dropped).
    pub fn spawn(&self, work: impl Future<Output = ()> + Send + 'static) {
        self.inner.running.fetch_add(1, Ordering::AcqRel);
        let running = Running(self.inner.clone());
        tokio::spawn(async move {
            let _running = running;
            work.await;
        });
    }

    /// Tasks running now.
    pub fn running(&self) -> usize {
        self.inner.running.load(Ordering::Acquire)
    }

    /// Resolves once no task runs.
    pub async fn idle(&self) {
        loop {
            let notified = self.inner.idle.notified();
            tokio::pin!(notified);
            // Registered before the check, so a last task ending in between
            // still wakes this waiter.
            notified.as_mut().enable();
            if self.running() == 0 {
                return;
            }
            notified.await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn idle_waits_for_every_task() {
        let tasks = Tasks::default();
        tasks.idle().await;
        let (release, wait) = tokio::sync::oneshot::channel::<()>();
        tasks.spawn(async move {
            let _ = wait.await;
        });
        assert_eq!(tasks.running(), 1);
        let waiter = tokio::spawn({
            let tasks = tasks.clone();
            async move { tasks.idle().await }
        });
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished());
        release.send(()).unwrap();
        tokio::time::timeout(std::time::Duration::from_secs(5), waiter)
            .await
            .expect("idle after the last task")
            .unwrap();
        assert_eq!(tasks.running(), 0);
    }
}
