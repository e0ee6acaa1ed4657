//! Which new objects the edge's cache lets in: a TinyLFU admission filter
//! (Einziger, Friedman and Manes, "TinyLFU: A Highly Efficient Cache
//! Admission Policy", ACM ToS 2017; Caffeine's policy).
//!
//! A cache that takes in every miss (plain LRU, as nginx's `proxy_cache`)
//! pushes out an object asked for every minute to make room for one asked
//! for once a day. [`Frequency`] counts, in a few bytes per counter, how
//! often each name was asked for lately, misses included; the cache lets a
//! new object in past its bound only when it was asked for more often than
//! each object it would push out. What is not let in is still served,
//! from the origin, without being stored.
//!
//! "Lately": every [`Frequency::sample`] requests all counters are halved,
//! so popularity that moves on is followed within a few samples. The
//! counts are a count-min sketch ([`DEPTH`] rows, the smallest of the
//! rows' counters is the estimate, which can only overstate), capped at
//! [`MAX_COUNT`], and indexed by a hash with a per-process random seed, so
//! that a client cannot aim its names at another object's counters.

use std::hash::{BuildHasher, Hasher};

/// Rows of the sketch: each name has one counter in each.
pub const DEPTH: usize = 4;
/// A counter's ceiling (TinyLFU's 4-bit counters).
pub const MAX_COUNT: u8 = 15;
/// Counters per row, at least and at most (the sketch is `DEPTH` times
/// this many bytes: 4 KiB to 4 MiB).
pub const MIN_WIDTH: usize = 1 << 10;
pub const MAX_WIDTH: usize = 1 << 20;
/// Requests between halvings per object the cache holds (TinyLFU's
/// sample of ten times the cache's entries), and at least.
pub const SAMPLE_PER_OBJECT: u64 = 10;
pub const MIN_SAMPLE: u64 = 1 << 10;

/// How often names were asked for lately.
pub struct Frequency {
    counters: Vec<u8>,
    width: usize,
    /// Requests counted since the last halving.
    seen: u64,
    /// Requests between halvings.
    sample: u64,
    seed: foldhash::quality::RandomState,
}

impl Frequency {
    /// A sketch with `width` counters per row (rounded up to a power of
    /// two within [`MIN_WIDTH`]..=[`MAX_WIDTH`]): as many as the names
    /// a sample is expected to hold keeps its estimates close.
    pub fn new(width: usize) -> Frequency {
        let width = width.clamp(MIN_WIDTH, MAX_WIDTH).next_power_of_two();
        Frequency {
            counters: vec![0; DEPTH * width],
            width,
            seen: 0,
            sample: MIN_SAMPLE,
            seed: foldhash::quality::RandomState::default(),
        }
    }

    /// A request for `name`. `objects`: what the cache holds now, which
    /// sets the next sample's length when this one ends.
    pub fn add(&mut self, name: &[u8], objects: usize) {
        let at = self.slots(name);
        let least = at.iter().map(|&i| self.counters[i]).min().unwrap_or(0);
        if least < MAX_COUNT {
            // Conservative update: only the counters at the minimum grow,
            // which keeps collisions from inflating the others.
            for i in at {
                if self.counters[i] == least {
                    self.counters[i] += 1;
                }
            }
        }
        self.seen += 1;
        if self.seen >= self.sample {
            self.halve();
            self.sample = (SAMPLE_PER_OBJECT * objects as u64).max(MIN_SAMPLE);
        }
    }

    /// How often `name` was asked for lately (never less than the truth,
    /// up to [`MAX_COUNT`]).
    pub fn estimate(&self, name: &[u8]) -> u8 {
        self.slots(name)
            .iter()
            .map(|&i| self.counters[i])
            .min()
            .unwrap_or(0)
    }

    /// Requests between halvings now.
    pub fn sample(&self) -> u64 {
        self.sample
    }

    fn halve(&mut self) {
        for c in &mut self.counters {
            *c /= 2;
        }
        self.seen = 0;
    }

    /// `name`'s counter in each row: two halves of one 64-bit hash,
    /// combined (Kirsch and Mitzenmacher's double hashing).
    fn slots(&self, name: &[u8]) -> [usize; DEPTH] {
        let mut h = self.seed.build_hasher();
        h.write(name);
        let h = h.finish();
        let (a, b) = (h as u32 as usize, ((h >> 32) as usize) | 1);
        let mask = self.width - 1;
        std::array::from_fn(|row| row * self.width + (a.wrapping_add(row.wrapping_mul(b)) & mask))
    }
}

impl std::fmt::Debug for Frequency {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Frequency")
            .field("width", &self.width)
            .field("seen", &self.seen)
            .field("sample", &self.sample)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_what_is_asked_for_and_caps_it() {
        let mut f = Frequency::new(MIN_WIDTH);
        for _ in 0..3 {
            f.add(b"/a", 1);
        }
        f.add(b"/b", 1);
        assert_eq!(f.estimate(b"/a"), 3);
        assert_eq!(f.estimate(b"/b"), 1);
        assert_eq!(f.estimate(b"/never"), 0);
        for _ in 0..100 {
            f.add(b"/a", 1);
        }
        assert_eq!(f.estimate(b"/a"), MAX_COUNT);
    }

    #[test]
    fn a_sample_ends_in_halving_and_the_next_follows_the_cache() {
        let mut f = Frequency::new(MIN_WIDTH);
        for _ in 0..8 {
            f.add(b"/hot", 500);
        }
        // The rest of the first sample, on names of their own.
        for i in 0..(MIN_SAMPLE - 8) {
            f.add(format!("/cold{i}").as_bytes(), 500);
        }
        assert_eq!(f.estimate(b"/hot"), 4, "8, halved");
        assert_eq!(f.sample(), 500 * SAMPLE_PER_OBJECT);
    }

    #[test]
    fn many_names_leave_a_popular_one_ahead_of_a_rare_one() {
        // 2,000 names in a 1,024-wide sketch, the hot one asked for every
        // 50th request, and a halving in between: the estimates
        // overstate, but a hot name stays well ahead of every rare one.
        let mut f = Frequency::new(MIN_WIDTH);
        for i in 0..2_000 {
            f.add(format!("/n{i}").as_bytes(), 10_000);
            if i % 50 == 0 {
                f.add(b"/hot", 10_000);
            }
        }
        let hot = f.estimate(b"/hot");
        let rare = (0..2_000)
            .map(|i| f.estimate(format!("/n{i}").as_bytes()))
            .max()
            .unwrap_or(0);
        assert!(
            hot >= 20 / 2 && rare <= 4,
            "hot {hot}, rarest at most {rare}"
        );
    }
}
