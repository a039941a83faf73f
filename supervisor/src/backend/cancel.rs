//! Cancellation of a backend start.
//!
//! The spec says "Startup observes forced shutdown cancellation on its next bounded readiness
//! poll", and an interrupted `strata-ctl on` must cancel a load in progress. The caller passes a
//! [`CancelSignal`] (a `watch::Receiver<bool>`: the daemon's shutdown flag or a per-operation
//! flag); `true` means "give up". A start that observes it kills and reaps the child and returns
//! [`StartError::Cancelled`](super::StartError::Cancelled). A dropped sender is not a request to
//! cancel.

use tokio::sync::watch;

/// Raised (`true`) to cancel a start in progress.
pub type CancelSignal = watch::Receiver<bool>;

/// Read-only view of a [`CancelSignal`] for the readiness loop.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Cancel<'a>(pub(crate) &'a CancelSignal);

impl Cancel<'_> {
    /// Has the flag been raised?
    pub(crate) fn is_cancelled(self) -> bool {
        *self.0.borrow()
    }

    /// Resolves once the flag is raised; never resolves otherwise (also not when the sender is
    /// dropped).
    pub(crate) async fn cancelled(self) {
        let mut rx = self.0.clone();
        if rx.wait_for(|raised| *raised).await.is_ok() {
            return;
        }
        std::future::pending::<()>().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test(flavor = "current_thread")]
    async fn raised_flag_is_seen_by_both_apis() {
        let (tx, rx) = watch::channel(false);
        let cancel = Cancel(&rx);
        assert!(!cancel.is_cancelled());
        tx.send(true).unwrap();
        assert!(cancel.is_cancelled());
        tokio::time::timeout(Duration::from_secs(1), cancel.cancelled())
            .await
            .expect("cancelled() resolves once raised");
    }

    #[tokio::test(flavor = "current_thread")]
    async fn dropped_sender_does_not_cancel() {
        let (tx, rx) = watch::channel(false);
        drop(tx);
        let cancel = Cancel(&rx);
        assert!(!cancel.is_cancelled());
        let waited = tokio::time::timeout(Duration::from_millis(50), cancel.cancelled()).await;
        assert!(waited.is_err(), "a dropped sender must not cancel");
    }
}
