// SPDX-License-Identifier: Apache-2.0
//! A tiny per-call-site rate limiter for log lines a guest can trigger.
//!
//! A hostile guest can send millions of malformed requests per second; each
//! call site of `guest_warn!` logs at most [`BURST`] lines
//! per [`PERIOD_SECS`] and counts the rest, reporting how many were dropped when
//! the next period opens.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::Instant;

/// Lines allowed per period and call site.
pub const BURST: u64 = 10;
/// Length of a period.
pub const PERIOD_SECS: u64 = 5;

fn now_secs() -> u64 {
    static BASE: OnceLock<Instant> = OnceLock::new();
    BASE.get_or_init(Instant::now).elapsed().as_secs()
}

/// State of one call site.
#[derive(Debug)]
pub struct RateLimiter {
    period: AtomicU64,
    count: AtomicU64,
}

impl RateLimiter {
    /// A limiter with a full budget.
    pub const fn new() -> Self {
        RateLimiter {
            period: AtomicU64::new(0),
            count: AtomicU64::new(0),
        }
    }

    /// Whether a line may be logged now. `Some(n)` says yes, with `n` lines
    /// suppressed in earlier periods.
    pub fn check(&self) -> Option<u64> {
        let period = now_secs() / PERIOD_SECS + 1;
        let old = self.period.load(Ordering::Relaxed);
        let mut suppressed = 0;
        if old != period
            && self
                .period
                .compare_exchange(old, period, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            let c = self.count.swap(0, Ordering::Relaxed);
            suppressed = c.saturating_sub(BURST);
        }
        let n = self.count.fetch_add(1, Ordering::Relaxed);
        (n < BURST).then_some(suppressed)
    }
}

impl Default for RateLimiter {
    fn default() -> Self {
        Self::new()
    }
}

/// `log::warn!` limited per call site; use for anything a guest can trigger.
macro_rules! guest_warn {
    ($($arg:tt)*) => {{
        static LIMITER: $crate::ratelimit::RateLimiter = $crate::ratelimit::RateLimiter::new();
        if let Some(suppressed) = LIMITER.check() {
            if suppressed > 0 {
                log::warn!("({} similar messages suppressed)", suppressed);
            }
            log::warn!($($arg)*);
        }
    }};
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_burst() {
        let l = RateLimiter::new();
        let allowed = (0..100).filter(|_| l.check().is_some()).count();
        // All 100 calls normally land in one period; a period boundary in the
        // middle can at most double the budget.
        assert!(
            allowed as u64 >= BURST && allowed as u64 <= 2 * BURST,
            "{allowed}"
        );
    }
}
