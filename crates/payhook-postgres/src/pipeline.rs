//! Sending several statements on one connection without waiting for each answer (pipelining), in a known order.
//!
//! tokio-postgres writes a request to the connection the first time its future is polled, and matches answers to
//! requests in order. Joining futures with a combinator does not promise which is polled first, and the order
//! matters here: `BEGIN` must reach the server before the statements of its transaction, and `COMMIT` after them
//! (a statement that arrives after `COMMIT` would run in a transaction of its own). [`pipeline`] therefore polls
//! each future once, in order, before waiting for any answer.

use std::pin::Pin;
use std::task::{Context, Poll};

/// A future that has been polled once (its request is on its way), with its output if it finished at once.
struct Started<F: Future> {
    future: Pin<Box<F>>,
    output: Option<F::Output>,
}

impl<F: Future> Started<F> {
    fn start(future: F, cx: &mut Context<'_>) -> Self {
        let mut future = Box::pin(future);
        let output = match future.as_mut().poll(cx) {
            Poll::Ready(output) => Some(output),
            Poll::Pending => None,
        };
        Self { future, output }
    }

    async fn finish(self) -> F::Output {
        match self.output {
            Some(output) => output,
            None => self.future.await,
        }
    }
}

/// Sends `first` (if any), then each of `middle`, then `last` (if any), in that order, and waits for all of them.
pub(crate) async fn pipeline<A: Future, M: Future, Z: Future>(
    first: Option<A>,
    middle: Vec<M>,
    last: Option<Z>,
) -> (Option<A::Output>, Vec<M::Output>, Option<Z::Output>) {
    let (mut first, mut middle, mut last) = (first, middle, last);
    let (first, middle, last) = std::future::poll_fn(|cx| {
        let first = first.take().map(|f| Started::start(f, cx));
        let middle: Vec<_> = middle.drain(..).map(|f| Started::start(f, cx)).collect();
        let last = last.take().map(|f| Started::start(f, cx));
        Poll::Ready((first, middle, last))
    })
    .await;
    let first = match first {
        Some(f) => Some(f.finish().await),
        None => None,
    };
    let middle = futures_util::future::join_all(middle.into_iter().map(Started::finish)).await;
    let last = match last {
        Some(f) => Some(f.finish().await),
        None => None,
    };
    (first, middle, last)
}

/// No future, for an absent `first` or `last` of [`pipeline`].
pub(crate) fn none() -> Option<std::future::Ready<()>> {
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    /// Records the order in which futures are first polled, and finishes them in the reverse order.
    #[tokio::test]
    async fn every_future_is_started_in_order_before_any_is_awaited() {
        let started = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = tokio::sync::watch::channel(0usize);
        let step = |name: usize, turn: usize| {
            let (started, mut rx) = (Arc::clone(&started), rx.clone());
            async move {
                started.lock().unwrap().push(name);
                rx.wait_for(|t| *t >= turn).await.unwrap();
                name
            }
        };
        let n = 100;
        let middle: Vec<_> = (1..=n).map(|i| step(i, n + 1 - i)).collect();
        let release = tokio::spawn(async move {
            for turn in 0..=n + 1 {
                tokio::task::yield_now().await;
                let _ = tx.send(turn);
            }
        });
        let (first, middle, last) = pipeline(Some(step(0, n + 1)), middle, Some(step(n + 1, 0))).await;
        release.await.unwrap();
        assert_eq!(*started.lock().unwrap(), (0..=n + 1).collect::<Vec<_>>());
        assert_eq!((first, last), (Some(0), Some(n + 1)));
        assert_eq!(middle, (1..=n).collect::<Vec<_>>());
    }
}
