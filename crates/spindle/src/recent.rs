//! Which files were used recently: the admission test that keeps files
//! used once out of the caches.
//!
//! On a server whose content is many times its memory, most files are
//! asked for once in a long while ("one-hit wonders"). Reading such a file
//! through the page cache costs more than the read itself: every page is
//! allocated, charged to the memory cgroup, put on the LRU and soon
//! reclaimed again, and it pushes out pages that would have been used. The
//! io-uring backend therefore serves a file it has not seen recently from
//! a descriptor of its own, outside the open-file cache, and reads what
//! is not already in the page cache with `O_DIRECT`. A file used again
//! soon enough is a second use: it goes into the open-file cache and is
//! read through the page cache, where it stays for the requests that
//! follow. CDNs call this "cache on second hit".
//!
//! "Soon enough" is a reuse distance: the second use must come before
//! the server has sent more than a window's worth of other files' bytes
//! from fresh opens, counted in pages. A file whose reuse distance is
//! larger than the page cache would have been evicted before its next use
//! anyway, so caching it would only cost. The window is half the memory
//! the server may use (its memory cgroup's limit, else the machine's RAM),
//! as 2Q remembers half a cache's worth of recently evicted pages (Johnson
//! and Shasha, "2Q: A Low Overhead High Performance Buffer Management
//! Replacement Algorithm", VLDB 1994).
//!
//! Admission matters only once the page cache is full, when caching one
//! file means evicting another; by default (`--first-miss auto`) a first
//! use is cached like any other while the server's memory has room (see
//! `memory.rs`), as TinyLFU filters only a full cache.
//!
//! The table is shared by all workers (a client's connections land on any
//! of them), lock-free and fixed in size: [`RECENT_FILES`] slots, each a
//! 24-bit tag of the file and the 40-bit clock of its last use, in
//! buckets of [`WAYS`] that keep their newest entries first. A file is
//! forgotten once it falls out of the window or `WAYS` newer files land in
//! its bucket. Races between workers can lose or duplicate an entry; the
//! cost is one read that bypasses, or one that fills, the page cache.
//! Nothing here affects which bytes are sent.

use std::sync::atomic::{AtomicU64, Ordering};

/// Slots in the table: the most distinct files it can remember (2 MiB).
pub const RECENT_FILES: usize = 1 << 18;
/// Entries per bucket; a bucket forgets its oldest entry.
pub const WAYS: usize = 8;
/// The unit of the clock: bytes are counted in page-cache pages.
const PAGE: u64 = 4096;
const CLOCK_BITS: u32 = 40;
const CLOCK_MASK: u64 = (1 << CLOCK_BITS) - 1;

/// A bounded, approximate set of recently used files, keyed by device and
/// inode, with their last use on a clock of pages sent.
pub struct RecentFiles {
    slots: Box<[AtomicU64]>,
    buckets: usize,
    /// Pages sent from fresh opens so far (wraps at 2^40).
    clock: AtomicU64,
    /// A second use counts if it comes within this many pages.
    window: u64,
}

impl RecentFiles {
    /// A table of `slots` entries (rounded up to a power of two, at least
    /// one bucket) whose second uses count within `window_bytes`.
    pub fn new(slots: usize, window_bytes: u64) -> RecentFiles {
        let slots = slots.max(WAYS).next_power_of_two();
        RecentFiles {
            slots: (0..slots).map(|_| AtomicU64::new(0)).collect(),
            buckets: slots / WAYS,
            clock: AtomicU64::new(0),
            window: (window_bytes / PAGE).clamp(1, CLOCK_MASK / 2),
        }
    }

    /// The table for a server that may use `memory` bytes: a window of
    /// half of it (see the module documentation).
    pub fn for_memory(memory: u64) -> RecentFiles {
        RecentFiles::new(RECENT_FILES, memory / 2)
    }

    /// The window, in bytes.
    pub fn window_bytes(&self) -> u64 {
        self.window * PAGE
    }

    /// Records a use of file `ino` on device `dev` that sends `bytes` of
    /// it, and says whether it is a second use: the file was used before,
    /// within the window.
    pub fn used(&self, dev: u64, ino: u64, bytes: u64) -> bool {
        // A 64-bit mix of the key (the finaliser of splitmix64): inode
        // numbers are dense, and the bucket and the tag need unrelated bits.
        let mut h = ino ^ dev.rotate_left(32) ^ 0x9E37_79B9_7F4A_7C15;
        h = (h ^ (h >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        h = (h ^ (h >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        h ^= h >> 31;
        let bucket = (h as usize) & (self.buckets - 1);
        // 24 bits, never 0 (0 marks an empty slot).
        let tag = ((h >> 40) | 1) << CLOCK_BITS;
        let now = self
            .clock
            .fetch_add(bytes.div_ceil(PAGE), Ordering::Relaxed)
            & CLOCK_MASK;
        let ways = &self.slots[bucket * WAYS..(bucket + 1) * WAYS];
        let mut found = WAYS - 1;
        let mut second = false;
        for (i, s) in ways.iter().enumerate() {
            let v = s.load(Ordering::Relaxed);
            if v & !CLOCK_MASK == tag {
                found = i;
                second = now.wrapping_sub(v) & CLOCK_MASK <= self.window;
                break;
            }
        }
        // Newest first: shift the entries before the file's own (or all
        // of them, dropping the oldest) down by one, and put it in front.
        for i in (1..=found).rev() {
            ways[i].store(ways[i - 1].load(Ordering::Relaxed), Ordering::Relaxed);
        }
        ways[0].store(tag | now, Ordering::Relaxed);
        second
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MB: u64 = 1 << 20;

    #[test]
    fn second_use_within_the_window() {
        let r = RecentFiles::new(1024, 10 * MB);
        assert!(!r.used(1, 42, 100_000), "first use");
        assert!(r.used(1, 42, 100_000), "second use");
        assert!(r.used(1, 42, 100_000), "third use");
        assert!(!r.used(2, 42, 100_000), "same inode on another device");
        assert!(!r.used(1, 43, 100_000));
    }

    #[test]
    fn a_second_use_beyond_the_window_is_a_first_use_again() {
        let r = RecentFiles::new(4096, 10 * MB);
        assert!(!r.used(1, 1, 4096));
        // 8 MB of other files: still within 10 MB.
        for ino in 100..180 {
            r.used(1, ino, 100_000);
        }
        assert!(r.used(1, 1, 4096), "within the window");
        // 12 MB more: beyond it.
        for ino in 200..320 {
            r.used(1, ino, 100_000);
        }
        assert!(!r.used(1, 1, 4096), "beyond the window");
        // ... and the use just made starts it afresh.
        assert!(r.used(1, 1, 4096));
    }

    #[test]
    fn bounded_by_its_slots() {
        let r = RecentFiles::new(4096, u64::MAX);
        for ino in 0..2048u64 {
            assert!(!r.used(7, ino, 1));
        }
        // Half full: nearly everything is still there (a bucket overflows
        // only if more than WAYS of the 2048 land in it).
        let kept = (0..2048u64).filter(|&i| r.used(7, i, 1)).count();
        assert!(kept > 2048 * 95 / 100, "kept {kept} of 2048");
        // Many more files than slots: the first ones are forgotten.
        for ino in 10_000..60_000u64 {
            r.used(7, ino, 1);
        }
        let kept = (0..2048u64).filter(|&i| r.used(7, i, 1)).count();
        assert!(kept < 2048 / 20, "kept {kept} of 2048 old files");
    }

    #[test]
    fn shared_between_threads() {
        let r = std::sync::Arc::new(RecentFiles::new(1 << 12, 100 * MB));
        let hs: Vec<_> = (0..4)
            .map(|t| {
                let r = r.clone();
                std::thread::spawn(move || {
                    for i in 0..1000u64 {
                        r.used(t, i, 1000);
                    }
                })
            })
            .collect();
        for h in hs {
            h.join().unwrap();
        }
        assert!(r.used(3, 999, 0));
    }
}
