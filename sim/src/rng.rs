//! A small seeded random number generator (SplitMix64), so a workload is the
//! same on every machine and every run for one seed. Not for anything that
//! needs unpredictability.

use std::time::Duration;

#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in [low, high] milliseconds.
    pub fn between(&mut self, low: Duration, high: Duration) -> Duration {
        let (low, high) = (low.as_secs_f64(), high.as_secs_f64().max(low.as_secs_f64()));
        Duration::from_secs_f64(low + (high - low) * self.unit()).round_ms()
    }

    /// Exponentially distributed with this mean (a Poisson process's gaps).
    pub fn exponential(&mut self, mean: Duration) -> Duration {
        let u = 1.0 - self.unit();
        Duration::from_secs_f64(-u.ln() * mean.as_secs_f64()).round_ms()
    }

    /// Uniform in 0..n.
    pub fn below(&mut self, n: usize) -> usize {
        (self.unit() * n as f64) as usize % n.max(1)
    }
}

/// Whole milliseconds: workloads and their files count in milliseconds.
pub trait RoundMs {
    fn round_ms(self) -> Duration;
}

impl RoundMs for Duration {
    fn round_ms(self) -> Duration {
        Duration::from_millis(self.as_secs_f64().mul_add(1000.0, 0.5) as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_seed_gives_one_sequence_within_the_bounds() {
        let (mut a, mut b) = (Rng::new(7), Rng::new(7));
        let low = Duration::from_millis(500);
        let high = Duration::from_secs(3);
        for _ in 0..1000 {
            let x = a.between(low, high);
            assert_eq!(x, b.between(low, high));
            assert!((low..=high).contains(&x), "{x:?}");
            assert!(a.below(4) < 4);
            b.below(4);
        }
        assert_ne!(Rng::new(8).next_u64(), Rng::new(7).next_u64());
    }
}
