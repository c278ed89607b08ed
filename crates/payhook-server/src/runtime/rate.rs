//! A sink's rate: a token bucket the dispatcher takes from before each claim, so a sink gets at most
//! `rate_per_second` attempts a second on average and at most `burst` at once after a quiet spell. Time is the
//! dispatcher's clock (a test's manual one), in milliseconds.

use crate::base::settings::SinkRate as Rate;
use std::sync::Mutex;

/// The bucket of one sink's loop: full when it starts.
#[derive(Debug)]
pub(crate) struct Bucket {
    rate: Rate,
    /// (tokens, when they were counted).
    state: Mutex<(f64, Option<i64>)>,
}

impl Bucket {
    pub(crate) fn new(rate: Rate) -> Self {
        Self { rate, state: Mutex::new((f64::from(rate.burst.max(1)), None)) }
    }

    fn refill(&self, tokens: f64, since: Option<i64>, now_ms: i64) -> f64 {
        let elapsed_ms = since.map_or(0, |at| now_ms.saturating_sub(at).max(0));
        (tokens + elapsed_ms as f64 * self.rate.per_second / 1000.0).min(f64::from(self.rate.burst.max(1)))
    }

    /// Takes up to `want` whole tokens at `now_ms` and says how many it took.
    pub(crate) fn take(&self, want: u32, now_ms: i64) -> u32 {
        let mut state = self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let tokens = self.refill(state.0, state.1, now_ms);
        let taken = (tokens.floor() as u32).min(want);
        *state = (tokens - f64::from(taken), Some(now_ms));
        taken
    }

    /// Gives back tokens taken for attempts that were not made (the claim found fewer rows).
    pub(crate) fn give_back(&self, unused: u32) {
        let mut state = self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        state.0 = (state.0 + f64::from(unused)).min(f64::from(self.rate.burst.max(1)));
    }

    /// How long from `now_ms` until a whole token is in the bucket (0 when one is).
    pub(crate) fn wait_ms(&self, now_ms: i64) -> u64 {
        let state = self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let tokens = self.refill(state.0, state.1, now_ms);
        if tokens >= 1.0 {
            return 0;
        }
        ((1.0 - tokens) * 1000.0 / self.rate.per_second).ceil() as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_bucket_gives_its_burst_then_one_token_per_interval() {
        let bucket = Bucket::new(Rate { per_second: 2.0, burst: 3 });
        assert_eq!(bucket.take(8, 0), 3);
        assert_eq!(bucket.take(8, 0), 0);
        assert_eq!(bucket.wait_ms(0), 500);
        assert_eq!(bucket.take(8, 499), 0);
        assert_eq!(bucket.take(8, 500), 1);
        assert_eq!(bucket.take(8, 60_000), 3, "never more than the burst");
        bucket.give_back(2);
        assert_eq!(bucket.take(1, 60_000), 1);
        assert_eq!(bucket.wait_ms(60_000), 0);
    }
}
