//! An origin object is fetched and stored in aligned slices of
//! [`SLICE_SIZE`] bytes, as nginx's `slice` module and Traffic Server's
//! `slice` plugin do: a seek into a 4 GB video fetches only the slices the
//! range touches, and a range request never pulls the whole file. Slice
//! `i` holds bytes `[i * SLICE_SIZE, min((i + 1) * SLICE_SIZE, length))`.

use std::ops::Range;

/// 1 MiB, Traffic Server's default block. A range costs at most two
/// slices' worth of bytes beyond what it asks for (one at each end); an
/// origin round trip moves at least 1 MiB, so per-request overhead (a TLS
/// record, a signature, the origin's own lookup) stays under 1% of the
/// bytes on any link slower than about 1 Gbit/s × the round-trip time in
/// ms; and a 4 GiB object is 4,096 slices, a 512-byte [`Present`] map.
pub const SLICE_SIZE: u64 = 1 << 20;

/// The largest object the edge caches: 1 TiB, 2^20 slices, a 128 KiB map.
/// A larger object at the origin is refused (502), never half-tracked.
pub const MAX_OBJECT: u64 = 1 << 40;

/// How many slices an object of `length` bytes has.
pub fn count(length: u64) -> u64 {
    length.div_ceil(SLICE_SIZE)
}

/// The bytes slice `index` of an object of `length` bytes covers.
pub fn bytes(index: u64, length: u64) -> Range<u64> {
    debug_assert!(index < count(length), "slice {index} of {length} bytes");
    let start = index * SLICE_SIZE;
    start..(start + SLICE_SIZE).min(length)
}

/// The slices that bytes `range` (end exclusive, not empty, within the
/// object) touch.
pub fn covering(range: Range<u64>) -> Range<u64> {
    assert!(range.start < range.end, "empty range {range:?}");
    range.start / SLICE_SIZE..(range.end - 1) / SLICE_SIZE + 1
}

/// The `Range` field that asks an origin for slice `index` of an object
/// of `length` bytes.
pub fn range_field(index: u64, length: u64) -> String {
    let b = bytes(index, length);
    format!("bytes={}-{}", b.start, b.end - 1)
}

/// Which slices of one object version are stored: one bit per slice.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Present {
    words: Vec<u64>,
    slices: u64,
}

impl Present {
    /// None of the slices of an object of `length` bytes (at most
    /// [`MAX_OBJECT`]).
    pub fn new(length: u64) -> Present {
        assert!(length <= MAX_OBJECT, "object of {length} bytes");
        let slices = count(length);
        Present {
            words: vec![0; slices.div_ceil(64) as usize],
            slices,
        }
    }

    pub fn slices(&self) -> u64 {
        self.slices
    }

    pub fn has(&self, index: u64) -> bool {
        assert!(index < self.slices);
        self.words[(index / 64) as usize] & (1 << (index % 64)) != 0
    }

    pub fn set(&mut self, index: u64) {
        assert!(index < self.slices);
        self.words[(index / 64) as usize] |= 1 << (index % 64);
    }

    /// The first slice of `range` that is not stored, if any.
    pub fn first_missing(&self, range: Range<u64>) -> Option<u64> {
        range.into_iter().find(|&i| !self.has(i))
    }

    /// How many slices are stored.
    pub fn stored(&self) -> u64 {
        self.words.iter().map(|w| u64::from(w.count_ones())).sum()
    }

    /// The map as bytes (little-endian words), for the cache's index.
    pub fn to_bytes(&self) -> Vec<u8> {
        self.words.iter().flat_map(|w| w.to_le_bytes()).collect()
    }

    /// A map read back from [`Present::to_bytes`]; None if it does not fit
    /// an object of `length` bytes (a torn or foreign record).
    pub fn from_bytes(length: u64, b: &[u8]) -> Option<Present> {
        let mut p = Present::new(length);
        if b.len() != p.words.len() * 8 {
            return None;
        }
        for (w, c) in p.words.iter_mut().zip(b.chunks_exact(8)) {
            *w = u64::from_le_bytes(c.try_into().ok()?);
        }
        let tail = p.slices % 64;
        if tail != 0 && p.words.last().is_some_and(|w| w >> tail != 0) {
            return None;
        }
        Some(p)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const M: u64 = SLICE_SIZE;

    #[test]
    fn slices_cover_an_object_exactly() {
        assert_eq!(count(0), 0);
        assert_eq!(count(1), 1);
        assert_eq!(count(M), 1);
        assert_eq!(count(M + 1), 2);
        assert_eq!(bytes(0, M + 1), 0..M);
        assert_eq!(bytes(1, M + 1), M..M + 1);
        // 700 MB: the last slice is short.
        let len = 700_000_000;
        let n = count(len);
        let total: u64 = (0..n)
            .map(|i| bytes(i, len).end - bytes(i, len).start)
            .sum();
        assert_eq!(total, len);
        assert_eq!(
            range_field(n - 1, len),
            format!("bytes={}-{}", (n - 1) * M, len - 1)
        );
    }

    #[test]
    fn a_range_touches_only_its_slices() {
        assert_eq!(covering(0..1), 0..1);
        assert_eq!(covering(0..M), 0..1);
        assert_eq!(covering(M - 1..M + 1), 0..2);
        // A seek 3 GB into a video: one slice, not 2,861.
        let at = 3_000_000_000;
        assert_eq!(covering(at..at + 1000), at / M..at / M + 1);
    }

    #[test]
    fn the_map_round_trips_and_refuses_what_does_not_fit() {
        let len = 130 * M + 5;
        let mut p = Present::new(len);
        assert_eq!(p.slices(), 131);
        assert_eq!(p.first_missing(0..131), Some(0));
        for i in [0, 63, 64, 130] {
            p.set(i);
        }
        assert!(p.has(64) && !p.has(65));
        assert_eq!(p.stored(), 4);
        assert_eq!(p.first_missing(63..65), None);
        assert_eq!(p.first_missing(63..66), Some(65));
        let b = p.to_bytes();
        assert_eq!(Present::from_bytes(len, &b), Some(p.clone()));
        assert_eq!(Present::from_bytes(len + 64 * M, &b), None);
        let mut bad = b.clone();
        *bad.last_mut().unwrap() = 0x80; // a bit past slice 130
        assert_eq!(Present::from_bytes(len, &bad), None);
    }
}
