//! The one seeded generator of the test suites: [`Rng`], SplitMix64.
//!
//! Every generated test draws from it: the in-process model's histories (`src/model`), the
//! unit tests that generate inputs (the ownership index, Docker's event stream), the model run
//! against the real daemon (`tests/reclaim/model.rs`), the kill timings of
//! `tests/watch/reliability.rs` and the emulators' fault draws (`tests/support/emu.rs`).
//!
//! Decisions:
//! - **A small PRNG of our own**, not `rand` or `proptest`: no dependency, and a seed printed
//!   as one number replays the same draws on any machine.
//! - **Any seed is a good seed** (0 included): SplitMix64 adds its constant before mixing, so
//!   callers need no `| 1` or non-zero dance.
//! - Session ids are not drawn from it: they are real randomness from the kernel
//!   (`SessionId::random`, `unix::random_hex`), a different thing from a replayable draw.

/// SplitMix64: small, fast, and good enough to pick operations and timings.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// The generator whose draws `seed` replays.
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    /// The next 64 random bits.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number below `n` (`n` > 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    /// True `percent` times in a hundred.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }

    /// One of `from` (not empty).
    pub fn pick<T: Copy>(&mut self, from: &[T]) -> T {
        from[self.below(from.len())]
    }

    /// A uniform draw in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}
