//! Background tasks whose panics are logged the moment they happen, and reported again when the server stops,
//! instead of being discarded with the task's `JoinError`.
//!
//! A panic is a bug: the task's work stops with it (`/readyz` shows the worker or dispatcher `stopped`), so the
//! log must say so at once, and the process must not exit 0 as if it had stopped cleanly.

use std::future::Future;
use tokio::task::{AbortHandle, JoinError, JoinHandle};

/// A background task ended by a panic.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the {0} task panicked")]
pub struct Panicked(pub &'static str);

/// A spawned background task with a name for its log lines.
#[derive(Debug)]
pub(crate) struct Task<T> {
    name: &'static str,
    handle: JoinHandle<Result<T, Panicked>>,
}

impl<T: Send + 'static> Task<T> {
    /// Spawns `task` on the current runtime. Its panic is logged as an error, with its message, when it happens.
    pub(crate) fn spawn<F>(name: &'static str, task: F) -> Self
    where
        F: Future<Output = T> + Send + 'static,
    {
        let inner = tokio::spawn(task);
        let handle = tokio::spawn(async move { inner.await.map_err(|e| log_panic(name, e)) });
        Self { name, handle }
    }

    /// Tells, without waiting, whether the task has ended (for readiness).
    pub(crate) fn abort_handle(&self) -> AbortHandle {
        self.handle.abort_handle()
    }

    /// Waits for the task's end: its output, or [`Panicked`].
    pub(crate) async fn join(self) -> Result<T, Panicked> {
        self.handle.await.unwrap_or(Err(Panicked(self.name)))
    }
}

/// Logs a task's `JoinError` (a panic, with its message, or a cancellation) and names the task.
pub(crate) fn log_panic(name: &'static str, e: JoinError) -> Panicked {
    if e.is_panic() {
        let panic = e.into_panic();
        let text = panic
            .downcast_ref::<&str>()
            .copied()
            .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
            .unwrap_or("(not a string)");
        tracing::error!(task = name, panic = text, "a background task panicked; its work has stopped");
    } else {
        tracing::error!(task = name, "a background task was cancelled");
    }
    Panicked(name)
}

/// Logs the panic of a short task joined from a `JoinSet` (a connection: its handler panicked).
pub(crate) fn log_if_panicked(name: &'static str, joined: Result<(), JoinError>) {
    if let Err(e) = joined
        && e.is_panic()
    {
        log_panic(name, e);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_task_that_returns_gives_its_output() {
        assert_eq!(Task::spawn("adder", async { 2 + 2 }).join().await, Ok(4));
    }

    #[tokio::test]
    async fn a_task_that_panics_is_reported_by_name_not_discarded() {
        let task = Task::<()>::spawn("worker", async { panic!("a bug") });
        let handle = task.abort_handle();
        assert_eq!(task.join().await, Err(Panicked("worker")));
        assert!(handle.is_finished(), "readiness sees the task stopped");
    }
}
