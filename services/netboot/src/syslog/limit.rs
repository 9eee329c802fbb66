//! Per-source rate limit of the syslog receiver: a token bucket per source address (`rate`
//! lines a second, bursts of up to `burst`: a kernel's whole boot log arrives at once when klogd
//! starts). Only addresses a Hardware owns get a bucket (unknown ones are dropped before), and
//! the map holds at most `max_sources`: when full, buckets that have refilled (sources quiet
//! long enough) are forgotten first, and a new source finding no room is limited.
//!
//! Pure: the caller passes the time, so tests drive it without sleeping.

use std::collections::HashMap;
use std::net::IpAddr;
use std::time::{Duration, Instant};

/// The limiter's settings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RateLimit {
    /// Lines a second one source may send, sustained.
    pub rate: f64,
    /// Lines one source may send at once.
    pub burst: f64,
    /// Sources tracked at once.
    pub max_sources: usize,
}

impl Default for RateLimit {
    fn default() -> Self {
        Self {
            rate: 100.0,
            burst: 2000.0,
            max_sources: 65_536,
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    at: Instant,
    /// Lines refused since the last report.
    refused: u64,
    /// When a refusal was last reported (logged).
    reported: Option<Instant>,
}

/// What the limiter decided for one line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Within the limit.
    Pass,
    /// Over it. `report`: lines refused from this source since the last report, when it is
    /// time to log one (at most once per [`REPORT_EVERY`]).
    Limited {
        /// The count to log, when it is time to.
        report: Option<u64>,
    },
}

/// How often a limited source is logged.
pub const REPORT_EVERY: Duration = Duration::from_secs(30);

/// The buckets.
#[derive(Debug)]
pub struct Limiter {
    config: RateLimit,
    buckets: HashMap<IpAddr, Bucket>,
}

impl Limiter {
    /// An empty limiter.
    pub fn new(config: RateLimit) -> Self {
        let config = RateLimit {
            rate: if config.rate.is_finite() && config.rate > 0.0 {
                config.rate
            } else {
                RateLimit::default().rate
            },
            burst: if config.burst.is_finite() && config.burst >= 1.0 {
                config.burst
            } else {
                1.0
            },
            max_sources: config.max_sources.max(1),
        };
        Self {
            config,
            buckets: HashMap::new(),
        }
    }

    /// Sources tracked now.
    pub fn len(&self) -> usize {
        self.buckets.len()
    }

    /// Whether no source is tracked.
    pub fn is_empty(&self) -> bool {
        self.buckets.is_empty()
    }

    /// Takes one line from `source`'s bucket at `now`.
    pub fn check(&mut self, source: IpAddr, now: Instant) -> Verdict {
        if !self.buckets.contains_key(&source) && self.buckets.len() >= self.config.max_sources {
            self.forget_refilled(now);
            if self.buckets.len() >= self.config.max_sources {
                return Verdict::Limited { report: None };
            }
        }
        let RateLimit { rate, burst, .. } = self.config;
        let bucket = self.buckets.entry(source).or_insert(Bucket {
            tokens: burst,
            at: now,
            refused: 0,
            reported: None,
        });
        let elapsed = now.saturating_duration_since(bucket.at).as_secs_f64();
        bucket.tokens = (bucket.tokens + elapsed * rate).min(burst);
        bucket.at = now;
        if bucket.tokens >= 1.0 {
            bucket.tokens -= 1.0;
            return Verdict::Pass;
        }
        bucket.refused += 1;
        let due = bucket
            .reported
            .is_none_or(|at| now.saturating_duration_since(at) >= REPORT_EVERY);
        if !due {
            return Verdict::Limited { report: None };
        }
        bucket.reported = Some(now);
        let count = std::mem::take(&mut bucket.refused);
        Verdict::Limited {
            report: Some(count),
        }
    }

    /// Drops the buckets that are full again at `now` (their sources have been quiet for
    /// `burst / rate` seconds): forgetting them changes no decision.
    fn forget_refilled(&mut self, now: Instant) {
        let RateLimit { rate, burst, .. } = self.config;
        self.buckets.retain(|_, b| {
            let elapsed = now.saturating_duration_since(b.at).as_secs_f64();
            b.tokens + elapsed * rate < burst
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(last: u8) -> IpAddr {
        IpAddr::from([10, 0, 0, last])
    }

    #[test]
    fn a_burst_passes_then_the_rate_holds() {
        let mut l = Limiter::new(RateLimit {
            rate: 10.0,
            burst: 5.0,
            max_sources: 10,
        });
        let t0 = Instant::now();
        for _ in 0..5 {
            assert_eq!(l.check(ip(1), t0), Verdict::Pass);
        }
        // The first refusal is reported at once, with its count.
        assert_eq!(l.check(ip(1), t0), Verdict::Limited { report: Some(1) });
        assert_eq!(l.check(ip(1), t0), Verdict::Limited { report: None });
        // Another source has its own bucket.
        assert_eq!(l.check(ip(2), t0), Verdict::Pass);
        // 0.1 s later one more token.
        let t1 = t0 + Duration::from_millis(100);
        assert_eq!(l.check(ip(1), t1), Verdict::Pass);
        assert_eq!(l.check(ip(1), t1), Verdict::Limited { report: None });
        // After REPORT_EVERY, the refusals since the last report are reported.
        let t2 = t0 + REPORT_EVERY;
        for _ in 0..5 {
            assert_eq!(l.check(ip(1), t2), Verdict::Pass);
        }
        assert_eq!(l.check(ip(1), t2), Verdict::Limited { report: Some(3) });
    }

    #[test]
    fn a_flood_is_held_to_the_rate() {
        let mut l = Limiter::new(RateLimit {
            rate: 100.0,
            burst: 200.0,
            max_sources: 10,
        });
        let t0 = Instant::now();
        // 10,000 lines a second for 10 s: 200 + 100 x 10 pass.
        let mut passed = 0;
        for i in 0..100_000u64 {
            let now = t0 + Duration::from_micros(i * 100);
            if l.check(ip(1), now) == Verdict::Pass {
                passed += 1;
            }
        }
        assert!((1195..=1205).contains(&passed), "{passed}");
    }

    #[test]
    fn the_map_is_bounded() {
        let mut l = Limiter::new(RateLimit {
            rate: 1.0,
            burst: 2.0,
            max_sources: 2,
        });
        let t0 = Instant::now();
        assert_eq!(l.check(ip(1), t0), Verdict::Pass);
        assert_eq!(l.check(ip(2), t0), Verdict::Pass);
        // Full, nobody refilled: a third source is limited and not tracked.
        assert_eq!(l.check(ip(3), t0), Verdict::Limited { report: None });
        assert_eq!(l.len(), 2);
        // Once the others have refilled they are forgotten and the third gets a bucket.
        let later = t0 + Duration::from_secs(5);
        assert_eq!(l.check(ip(3), later), Verdict::Pass);
        assert!(l.len() <= 2);
    }
}
