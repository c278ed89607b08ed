//! Retries are data: a pure policy from "attempts so far" to the next attempt time or a dead letter.

use serde::{Deserialize, Serialize};

/// Exponential backoff with a cap, jitter and a bounded number of attempts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RetryPolicy {
    /// Delay before the second attempt, in milliseconds.
    pub base_ms: u64,
    /// Multiplier between consecutive delays.
    pub factor: u32,
    /// Longest delay, in milliseconds.
    pub cap_ms: u64,
    /// Fraction of each delay that is randomized (0.0 – 1.0): the delay is drawn from `[d·(1−jitter), d]`, so
    /// retries of many events spread out instead of arriving together.
    pub jitter: f64,
    /// Attempts in all, the first included; after the last one the event is dead-lettered.
    pub max_attempts: u32,
}

impl Default for RetryPolicy {
    /// 5 s doubling up to 1 h, 20 % jitter, 100 attempts: even with the most jitter the last attempt comes more
    /// than 3 days after the first, as long as providers themselves retry.
    fn default() -> Self {
        Self { base_ms: 5_000, factor: 2, cap_ms: 3_600_000, jitter: 0.2, max_attempts: 100 }
    }
}

/// What to do after a failed attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// Try again at this time (unix milliseconds).
    RetryAt(i64),
    /// The budget is spent.
    DeadLetter,
}

/// Why a policy is unusable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("retry policy: {0}")]
pub struct InvalidPolicy(&'static str);

impl RetryPolicy {
    /// Checks the bounds that keep the policy meaningful.
    pub fn validate(&self) -> Result<(), InvalidPolicy> {
        if self.max_attempts == 0 {
            return Err(InvalidPolicy("max_attempts must be at least 1"));
        }
        if self.factor == 0 {
            return Err(InvalidPolicy("factor must be at least 1"));
        }
        if self.base_ms == 0 || self.cap_ms < self.base_ms {
            return Err(InvalidPolicy("base_ms must be positive and cap_ms at least base_ms"));
        }
        if !(0.0..=1.0).contains(&self.jitter) {
            return Err(InvalidPolicy("jitter must be between 0.0 and 1.0"));
        }
        Ok(())
    }

    /// The un-jittered delay after `attempts` failed attempts (`attempts >= 1`).
    pub fn delay_ms(&self, attempts: u32) -> u64 {
        let exp = attempts.saturating_sub(1).min(63);
        let mult = u64::from(self.factor).saturating_pow(exp);
        self.base_ms.saturating_mul(mult).min(self.cap_ms)
    }

    /// The next step after `attempts` failed attempts (the first attempt counts), at `now_ms`. `unit` is a
    /// random number in `[0, 1)` supplied by the caller, so this function stays pure and testable.
    pub fn next(&self, attempts: u32, now_ms: i64, unit: f64) -> Next {
        if attempts >= self.max_attempts {
            return Next::DeadLetter;
        }
        let delay = self.delay_ms(attempts) as f64;
        let jittered = delay * (1.0 - self.jitter * unit.clamp(0.0, 1.0));
        Next::RetryAt(now_ms.saturating_add(jittered.max(1.0) as i64))
    }

    /// The shortest time from the first attempt to the last one, with the most jitter.
    pub fn min_span_ms(&self) -> u64 {
        (1..self.max_attempts).map(|a| (self.delay_ms(a) as f64 * (1.0 - self.jitter)) as u64).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_policy_keeps_retrying_for_at_least_three_days() {
        let p = RetryPolicy::default();
        p.validate().unwrap();
        assert!(p.min_span_ms() >= 3 * 24 * 3_600_000, "only {} ms", p.min_span_ms());
    }

    #[test]
    fn delays_grow_exponentially_up_to_the_cap() {
        let p = RetryPolicy { base_ms: 1000, factor: 2, cap_ms: 5000, jitter: 0.0, max_attempts: 10 };
        let delays: Vec<u64> = (1..6).map(|a| p.delay_ms(a)).collect();
        assert_eq!(delays, vec![1000, 2000, 4000, 5000, 5000]);
        assert_eq!(p.next(1, 10_000, 0.5), Next::RetryAt(11_000));
    }

    #[test]
    fn jitter_only_shortens_a_delay_within_its_fraction() {
        let p = RetryPolicy { base_ms: 1000, factor: 2, cap_ms: 5000, jitter: 0.5, max_attempts: 10 };
        assert_eq!(p.next(1, 0, 0.0), Next::RetryAt(1000));
        assert_eq!(p.next(1, 0, 1.0), Next::RetryAt(500));
    }

    #[test]
    fn the_last_attempt_dead_letters() {
        let p = RetryPolicy { max_attempts: 3, ..RetryPolicy::default() };
        assert!(matches!(p.next(2, 0, 0.0), Next::RetryAt(_)));
        assert_eq!(p.next(3, 0, 0.0), Next::DeadLetter);
    }

    #[test]
    fn huge_attempt_counts_do_not_overflow() {
        let p = RetryPolicy { max_attempts: u32::MAX, ..RetryPolicy::default() };
        assert_eq!(p.next(1_000_000, i64::MAX - 1, 0.0), Next::RetryAt(i64::MAX));
    }

    #[test]
    fn invalid_policies_are_refused() {
        assert!(RetryPolicy { max_attempts: 0, ..RetryPolicy::default() }.validate().is_err());
        assert!(RetryPolicy { jitter: 1.5, ..RetryPolicy::default() }.validate().is_err());
        assert!(RetryPolicy { cap_ms: 1, ..RetryPolicy::default() }.validate().is_err());
    }
}
