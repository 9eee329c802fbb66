//! Spreading periodic work: many tasks that start together do not run together.

use std::time::Duration;

/// `period` varied by up to ±20%, differently on each call.
pub fn jittered(period: Duration) -> Duration {
    use std::hash::BuildHasher as _;
    // A fresh RandomState is seeded differently each time: enough randomness to spread polls.
    let r = std::collections::hash_map::RandomState::new().hash_one(std::time::Instant::now());
    let fraction = (r % 4001) as f64 / 10_000.0; // 0.0 ..= 0.4
    period.mul_f64(0.8 + fraction)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jitter_stays_within_twenty_percent_and_varies() {
        let p = Duration::from_secs(60);
        let all: Vec<Duration> = (0..200).map(|_| jittered(p)).collect();
        assert!(
            all.iter()
                .all(|d| *d >= p.mul_f64(0.8) && *d <= p.mul_f64(1.2))
        );
        let distinct: std::collections::BTreeSet<_> = all.iter().collect();
        assert!(
            distinct.len() > 50,
            "only {} distinct periods",
            distinct.len()
        );
    }
}
