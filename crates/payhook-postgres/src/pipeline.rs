//! Sending several statements on one connection without waiting for each answer (pipelining), in a known order.
//!
//! tokio-postgres writes a request to the connection the first time its future is polled, and matches answers to
//! requests in order. Joining futures with a combinator does not promise which is polled first, and the order
//! matters here: `BEGIN` must reach the server before the statements of its transaction, and `COMMIT` after them
//! (a statement that arrives after `COMMIT` would run in a transaction of its own). [`send`] therefore polls a
//! future once, so that its request is on its way, and hands it back as a [`Sent`] whose answer is awaited later:
//! statements are sent in the order of the `send` calls, whatever order their answers are awaited in.
//!
//! ```text
//! let begun = send(client.batch_execute("BEGIN")).await;
//! let read = send(client.query_one(&stmt, &params)).await;
//! let committed = send(client.batch_execute("COMMIT")).await;
//! begun.answer().await?; let row = read.answer().await?; committed.answer().await?;
//! ```

use std::pin::Pin;
use std::task::Poll;

/// A request on its way: a future polled once, with its output if it finished then.
pub(crate) struct Sent<F: Future> {
    future: Pin<Box<F>>,
    output: Option<F::Output>,
}

/// Polls `future` once, so that its request is written before the next one's.
pub(crate) async fn send<F: Future>(future: F) -> Sent<F> {
    let mut future = Box::pin(future);
    let output = std::future::poll_fn(|cx| {
        Poll::Ready(match future.as_mut().poll(cx) {
            Poll::Ready(output) => Some(output),
            Poll::Pending => None,
        })
    })
    .await;
    Sent { future, output }
}

impl<F: Future> Sent<F> {
    /// The answer to the request.
    pub(crate) async fn answer(self) -> F::Output {
        match self.output {
            Some(output) => output,
            None => self.future.await,
        }
    }
}

/// Sends each of `futures`, in order.
pub(crate) async fn send_all<F: Future>(futures: Vec<F>) -> Vec<Sent<F>> {
    let mut sent = Vec::with_capacity(futures.len());
    for future in futures {
        sent.push(send(future).await);
    }
    sent
}

/// The answers to `sent`, in the order they were sent.
pub(crate) async fn answers<F: Future>(sent: Vec<Sent<F>>) -> Vec<F::Output> {
    futures_util::future::join_all(sent.into_iter().map(Sent::answer)).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    /// Records the order in which futures are first polled, and lets them finish in the reverse order.
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
        let release = tokio::spawn(async move {
            for turn in 0..=n + 1 {
                tokio::task::yield_now().await;
                let _ = tx.send(turn);
            }
        });
        let first = send(step(0, n + 1)).await;
        let middle = send_all((1..=n).map(|i| step(i, n + 1 - i)).collect()).await;
        let last = send(step(n + 1, 0)).await;
        assert_eq!(*started.lock().unwrap(), (0..=n + 1).collect::<Vec<_>>(), "all sent before any answer");
        let (last, middle, first) = (last.answer().await, answers(middle).await, first.answer().await);
        release.await.unwrap();
        assert_eq!((first, last), (0, n + 1));
        assert_eq!(middle, (1..=n).collect::<Vec<_>>());
    }

    #[tokio::test]
    async fn a_future_that_finishes_when_sent_keeps_its_output() {
        let sent = send(async { 7 }).await;
        assert_eq!(sent.output, Some(7));
        assert_eq!(sent.answer().await, 7);
    }
}
