//! The request body as the listener hands it to the application, on every route: read under the body deadline
//! (`server.body_timeout_ms`, counted from the end of the request head) and charged, byte by byte as it arrives, to
//! the process's budget of request body bytes held at once (`server.body_buffer_bytes`).
//!
//! A body past its deadline, or one the budget cannot take, fails with a [`BodyError`] when the application next
//! reads it, so whatever reads it (an extractor, `ingest::read_body`, the dashboard's CSRF check) stops there and
//! does nothing with it. The [`BodyWatch`] shared with the listener's service wrapper records why, and the wrapper
//! answers the request itself (408, or 503 with `Retry-After`) and closes the connection, whatever the route made of
//! the failed read: one mechanism for every route.
//!
//! A declared `Content-Length` reserves nothing: a head that declares a megabyte and then sends nothing would
//! otherwise hold a megabyte of the budget for `body_timeout_ms` at the cost of one line. Bytes are charged when they
//! arrive, and given back when the request is answered (the handler holds them, or copies of them, until then).

use hyper::body::{Body as HttpBody, Frame, Incoming, SizeHint};
use std::fmt::Write as _;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::task::{Context, Poll};
use tokio::time::{Instant, Sleep};

/// The process's budget of request body bytes: what the requests in progress have received and not yet answered.
#[derive(Debug)]
pub(crate) struct BodyBudget {
    max_bytes: u64,
    in_use: AtomicU64,
    refused: AtomicU64,
}

impl BodyBudget {
    pub(crate) fn new(max_bytes: u64) -> Self {
        Self { max_bytes, in_use: AtomicU64::new(0), refused: AtomicU64::new(0) }
    }

    /// Takes `n` bytes if they fit under the bound; never waits.
    fn try_take(&self, n: u64) -> bool {
        let mut current = self.in_use.load(Ordering::Relaxed);
        loop {
            let Some(next) = current.checked_add(n).filter(|next| *next <= self.max_bytes) else {
                self.refused.fetch_add(1, Ordering::Relaxed);
                return false;
            };
            match self.in_use.compare_exchange_weak(current, next, Ordering::AcqRel, Ordering::Relaxed) {
                Ok(_) => return true,
                Err(now) => current = now,
            }
        }
    }

    fn give_back(&self, n: u64) {
        self.in_use.fetch_sub(n, Ordering::AcqRel);
    }

    /// Bytes held now.
    #[cfg(test)]
    pub(crate) fn in_use(&self) -> u64 {
        self.in_use.load(Ordering::Relaxed)
    }

    /// Appends the body buffer's families in the Prometheus text format.
    pub(crate) fn render_into(&self, out: &mut String) {
        let families: [(&str, &str, &str, u64); 3] = [
            (
                "payhook_body_buffer_bytes",
                "gauge",
                "Request body bytes received and held by requests in progress.",
                self.in_use.load(Ordering::Relaxed),
            ),
            (
                "payhook_body_buffer_bytes_max",
                "gauge",
                "The bound on request body bytes held at once (server.body_buffer_bytes).",
                self.max_bytes,
            ),
            (
                "payhook_body_buffer_refused_total",
                "counter",
                "Requests answered 503 because their body did not fit under server.body_buffer_bytes.",
                self.refused.load(Ordering::Relaxed),
            ),
        ];
        for (name, kind, help, value) in families {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}");
        }
    }
}

/// Where a request's body stands, shared by the body and the service wrapper that answers the request.
#[derive(Debug)]
pub(crate) struct BodyWatch {
    budget: Arc<BodyBudget>,
    /// Bytes taken from the budget for this request, given back when the last holder drops.
    charged: AtomicU64,
    state: AtomicU8,
}

/// The body may still have bytes to come.
const READING: u8 = 0;
/// The body is complete (or there is none).
const COMPLETE: u8 = 1;
/// The body was not complete by its deadline.
const TIMED_OUT: u8 = 2;
/// The body did not fit under the budget.
const REFUSED: u8 = 3;

/// What became of a request's body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BodyState {
    /// Bytes may still come.
    Reading,
    /// All of it arrived (or the request has none).
    Complete,
    /// It was not complete within the body deadline.
    TimedOut,
    /// It did not fit under the process's body buffer bound.
    Refused,
}

impl BodyWatch {
    fn new(budget: Arc<BodyBudget>, complete: bool) -> Self {
        Self { budget, charged: AtomicU64::new(0), state: AtomicU8::new(if complete { COMPLETE } else { READING }) }
    }

    pub(crate) fn state(&self) -> BodyState {
        match self.state.load(Ordering::Acquire) {
            READING => BodyState::Reading,
            COMPLETE => BodyState::Complete,
            TIMED_OUT => BodyState::TimedOut,
            _ => BodyState::Refused,
        }
    }

    /// Moves from reading to `to`; a body that already ended keeps its end.
    fn end(&self, to: u8) {
        let _ = self.state.compare_exchange(READING, to, Ordering::AcqRel, Ordering::Acquire);
    }

    fn charge(&self, n: u64) -> bool {
        if self.budget.try_take(n) {
            self.charged.fetch_add(n, Ordering::Relaxed);
            true
        } else {
            false
        }
    }
}

impl Drop for BodyWatch {
    fn drop(&mut self) {
        self.budget.give_back(*self.charged.get_mut());
    }
}

/// Why a body could not be read.
#[derive(Debug, thiserror::Error)]
pub(crate) enum BodyError {
    /// Not complete within `server.body_timeout_ms` of the request head.
    #[error("the request body did not arrive within {timeout_ms} ms")]
    Deadline {
        /// The body deadline.
        timeout_ms: u64,
    },
    /// Its bytes would have taken the process past `server.body_buffer_bytes`.
    #[error("the server holds as many request body bytes as server.body_buffer_bytes allows")]
    Budget,
    /// The connection failed while the body was read.
    #[error("the request body could not be read")]
    Read(#[source] hyper::Error),
}

impl BodyError {
    /// The [`BodyError`] somewhere in `error`'s chain of sources, if one is: extractors and `Limited` wrap it.
    pub(crate) fn find<'a>(error: &'a (dyn std::error::Error + 'static)) -> Option<&'a BodyError> {
        let mut current = Some(error);
        while let Some(e) = current {
            if let Some(found) = e.downcast_ref::<BodyError>() {
                return Some(found);
            }
            current = e.source();
        }
        None
    }
}

/// A request body under its deadline and the process's budget.
pub(crate) struct GuardedBody {
    inner: Incoming,
    watch: Arc<BodyWatch>,
    deadline: Instant,
    timeout_ms: u64,
    /// Made the first time the body has to wait for bytes: most bodies arrive with their head and never need it.
    sleep: Option<Pin<Box<Sleep>>>,
}

impl GuardedBody {
    /// `inner`, which must be complete by `deadline` (`timeout_ms` after its head), charged to `budget`; and the watch
    /// that tells how it ended.
    pub(crate) fn new(
        inner: Incoming,
        budget: Arc<BodyBudget>,
        deadline: Instant,
        timeout_ms: u64,
    ) -> (Self, Arc<BodyWatch>) {
        let watch = Arc::new(BodyWatch::new(budget, inner.is_end_stream()));
        (Self { inner, watch: Arc::clone(&watch), deadline, timeout_ms, sleep: None }, watch)
    }

    fn failed(&self) -> Option<BodyError> {
        match self.watch.state() {
            BodyState::TimedOut => Some(BodyError::Deadline { timeout_ms: self.timeout_ms }),
            BodyState::Refused => Some(BodyError::Budget),
            BodyState::Reading | BodyState::Complete => None,
        }
    }

    /// Whether the deadline has passed; when not, the task is woken when it does.
    fn deadline_passed(&mut self, cx: &mut Context<'_>) -> bool {
        if Instant::now() >= self.deadline {
            return true;
        }
        let deadline = self.deadline;
        let sleep = self.sleep.get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
        sleep.as_mut().poll(cx).is_ready()
    }
}

impl HttpBody for GuardedBody {
    type Data = hyper::body::Bytes;
    type Error = BodyError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        if let Some(error) = self.failed() {
            return Poll::Ready(Some(Err(error)));
        }
        match Pin::new(&mut self.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                let len = frame.data_ref().map_or(0, |d| d.len() as u64);
                if len > 0 && !self.watch.charge(len) {
                    self.watch.end(REFUSED);
                    return Poll::Ready(Some(Err(BodyError::Budget)));
                }
                if self.inner.is_end_stream() {
                    self.watch.end(COMPLETE);
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(e))) => Poll::Ready(Some(Err(BodyError::Read(e)))),
            Poll::Ready(None) => {
                self.watch.end(COMPLETE);
                Poll::Ready(None)
            }
            Poll::Pending => {
                if self.deadline_passed(cx) {
                    self.watch.end(TIMED_OUT);
                    return Poll::Ready(Some(Err(BodyError::Deadline { timeout_ms: self.timeout_ms })));
                }
                Poll::Pending
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream() || self.failed().is_some()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_budget_takes_what_fits_refuses_the_rest_and_counts_refusals() {
        let budget = Arc::new(BodyBudget::new(100));
        let (a, b) = (BodyWatch::new(Arc::clone(&budget), false), BodyWatch::new(Arc::clone(&budget), false));
        assert!(a.charge(60));
        assert!(!b.charge(41), "60 + 41 is over 100");
        assert!(b.charge(40));
        assert_eq!(budget.in_use(), 100);
        assert!(!a.charge(1));
        drop(a);
        assert_eq!(budget.in_use(), 40, "a request's bytes come back when it ends");
        drop(b);
        assert_eq!(budget.in_use(), 0);
        let mut text = String::new();
        budget.render_into(&mut text);
        assert!(text.contains("payhook_body_buffer_refused_total 2\n"), "{text}");
        assert!(text.contains("payhook_body_buffer_bytes_max 100\n"), "{text}");
    }

    #[test]
    fn a_body_that_ended_keeps_its_end() {
        let watch = BodyWatch::new(Arc::new(BodyBudget::new(1)), false);
        assert_eq!(watch.state(), BodyState::Reading);
        watch.end(COMPLETE);
        watch.end(TIMED_OUT);
        assert_eq!(watch.state(), BodyState::Complete, "a deadline after the last byte changes nothing");
        assert_eq!(BodyWatch::new(Arc::new(BodyBudget::new(1)), true).state(), BodyState::Complete);
    }

    #[test]
    fn a_body_error_is_found_inside_the_errors_that_wrap_it() {
        let wrapped = axum::Error::new(BodyError::Deadline { timeout_ms: 5 });
        let boxed: Box<dyn std::error::Error + Send + Sync> = Box::new(wrapped);
        assert!(matches!(BodyError::find(&*boxed), Some(BodyError::Deadline { timeout_ms: 5 })));
        let other: Box<dyn std::error::Error + Send + Sync> = "no".into();
        assert!(BodyError::find(&*other).is_none());
    }
}
