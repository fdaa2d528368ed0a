//! Seeded choices for the generated e2e writes: the same seed gives the same writes, so a
//! failing run can be replayed.

/// The run's seed: `VOLUME_HEALTH_E2E_SEED`, or the clock (a new seed each run).
pub fn seed() -> u64 {
    std::env::var("VOLUME_HEALTH_E2E_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_secs())
        })
}

/// splitmix64: small, fast and good enough for choosing test values.
pub struct Rng(u64);

impl Rng {
    /// A generator started from `seed`.
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }

    /// The generator of one write: it depends on the seed and the write's index only, so one
    /// write reads the same whatever the others are.
    pub fn for_write(seed: u64, index: usize) -> Self {
        let mut rng = Rng(seed ^ (index as u64).wrapping_mul(0xA076_1D64_78BD_642F));
        rng.next_u64();
        rng
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..n`; `n` must not be 0.
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    /// True `p` times in 100.
    pub fn percent(&mut self, p: usize) -> bool {
        self.below(100) < p
    }

    /// One of `items`, which must not be empty.
    pub fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.below(items.len())]
    }
}

#[cfg(test)]
mod tests {
    use super::Rng;

    #[test]
    fn a_seed_gives_the_same_choices() {
        let draw = |seed| {
            let mut rng = Rng::for_write(seed, 7);
            (0..32).map(|_| rng.below(1000)).collect::<Vec<_>>()
        };
        assert_eq!(draw(42), draw(42));
        assert_ne!(draw(42), draw(43));
    }

    #[test]
    fn choices_stay_in_range_and_reach_both_ends() {
        let mut rng = Rng::new(1);
        let drawn: Vec<usize> = (0..1000).map(|_| rng.below(3)).collect();
        assert!(drawn.iter().all(|&n| n < 3));
        assert!(drawn.contains(&0) && drawn.contains(&2));
    }
}
