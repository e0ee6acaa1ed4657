//! The request headers that compare a file with what the client holds:
//! `Range` (parsed against the file's size), `If-Range`, and the entity-tag
//! lists of `If-Match` and `If-None-Match`. `response.rs` decides with them.

use crate::date;
use crate::limits;
use crate::request::{parse_u64, trim};

/// The outcome of a `Range` header against a file of a given size.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RangeResult {
    /// No usable range: send the whole file (200). Also used for syntax
    /// that is not understood, and for more ranges than the limits allow.
    Full,
    /// `(offset, length)`: 206.
    Partial(u64, u64),
    /// Two or more disjoint, non-adjacent `(offset, length)` ranges in
    /// ascending order: a `multipart/byteranges` 206.
    Multi(Vec<(u64, u64)>),
    /// 416.
    Unsatisfiable,
}

/// One range spec: `Some(None)` when valid but unsatisfiable, `None` when
/// not understood.
fn range_spec(spec: &[u8], size: u64) -> Option<Option<(u64, u64)>> {
    let dash = spec.iter().position(|&b| b == b'-')?;
    let (first, last) = (trim(&spec[..dash]), trim(&spec[dash + 1..]));
    if first.is_empty() {
        let n = parse_u64(last)?;
        if n == 0 || size == 0 {
            return Some(None);
        }
        let n = n.min(size);
        return Some(Some((size - n, n)));
    }
    let a = parse_u64(first)?;
    let b = if last.is_empty() {
        None
    } else {
        match parse_u64(last) {
            Some(b) if b >= a => Some(b),
            _ => return None,
        }
    };
    if a >= size {
        return Some(None);
    }
    let end = b.map_or(size - 1, |b| b.min(size - 1));
    Some(Some((a, end - a + 1)))
}

/// Parses a `Range` header (`bytes=a-b`, `a-`, `-n`, comma-separated),
/// RFC 9110 §14.1.2 and §14.2. Ranges that overlap or touch are merged
/// (§15.3.7.2 allows it), so a request cannot make the body longer than
/// the file; more than [`limits::MAX_RANGE_SPECS`] specs, or more than
/// [`limits::MAX_RANGES`] ranges after merging, gets the whole file.
pub fn parse_range(value: &[u8], size: u64) -> RangeResult {
    let v = trim(value);
    if v.len() < 6 || !v[..6].eq_ignore_ascii_case(b"bytes=") {
        return RangeResult::Full;
    }
    let list = &v[6..];
    if list.iter().filter(|&&b| b == b',').count() >= limits::MAX_RANGE_SPECS {
        return RangeResult::Full;
    }
    let mut ranges: Vec<(u64, u64)> = Vec::new();
    let mut specs = 0;
    for spec in list.split(|&b| b == b',').map(trim) {
        if spec.is_empty() {
            // The list syntax allows empty elements.
            continue;
        }
        specs += 1;
        match range_spec(spec, size) {
            None => return RangeResult::Full,
            Some(None) => {}
            Some(Some(r)) => ranges.push(r),
        }
    }
    if specs == 0 {
        return RangeResult::Full;
    }
    if ranges.len() > 1 {
        ranges.sort_unstable();
        let mut merged: Vec<(u64, u64)> = Vec::with_capacity(ranges.len());
        for (off, len) in ranges {
            match merged.last_mut() {
                Some((o, l)) if off <= *o + *l => *l = (*l).max(off + len - *o),
                _ => merged.push((off, len)),
            }
        }
        ranges = merged;
    }
    match ranges.len() {
        0 => RangeResult::Unsatisfiable,
        1 => RangeResult::Partial(ranges[0].0, ranges[0].1),
        n if n > limits::MAX_RANGES => RangeResult::Full,
        _ => RangeResult::Multi(ranges),
    }
}

/// One entity tag from a list: `(weak, opaque)`, or `None` for `*`.
fn etags(list: &[u8]) -> impl Iterator<Item = Option<(bool, &[u8])>> {
    let mut rest = list;
    std::iter::from_fn(move || loop {
        while let [b' ' | b'\t' | b',', tail @ ..] = rest {
            rest = tail;
        }
        if rest.is_empty() {
            return None;
        }
        if rest[0] == b'*' {
            rest = &rest[1..];
            return Some(None);
        }
        let weak = rest.starts_with(b"W/");
        if weak {
            rest = &rest[2..];
        }
        if rest.first() != Some(&b'"') {
            // Not an entity tag: skip to the next comma.
            let next = rest.iter().position(|&b| b == b',').unwrap_or(rest.len());
            rest = &rest[next..];
            continue;
        }
        let close = rest[1..].iter().position(|&b| b == b'"');
        let Some(close) = close else {
            rest = &[];
            return None;
        };
        let tag = &rest[..close + 2];
        rest = &rest[close + 2..];
        return Some(Some((weak, tag)));
    })
}

/// Whether `ours` (a strong tag, quoted) is in `list`. `strong` selects the
/// strong comparison (If-Match) instead of the weak one (If-None-Match).
pub(crate) fn etag_list_matches(list: &[u8], ours: &str, strong: bool) -> bool {
    // Ours is weak only when an origin's is (the edge keeps its tag).
    let (ours_weak, ours) = match ours.strip_prefix("W/") {
        Some(o) => (true, o),
        None => (false, ours),
    };
    etags(list).any(|t| match t {
        None => true,
        Some((weak, tag)) => tag == ours.as_bytes() && !(strong && (weak || ours_weak)),
    })
}

pub(crate) fn if_range_matches(value: &[u8], ours: &str, mtime: i64) -> bool {
    let v = trim(value);
    if v.starts_with(b"W/") {
        // If-Range requires the strong comparison: a weak tag never
        // matches (RFC 9110 §13.1.5), not even an origin's own.
        return false;
    }
    if v.starts_with(b"\"") {
        return v == ours.as_bytes();
    }
    date::parse(v) == Some(mtime)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges() {
        use RangeResult::*;
        assert_eq!(parse_range(b"bytes=0-0", 10), Partial(0, 1));
        assert_eq!(parse_range(b"bytes=2-", 10), Partial(2, 8));
        assert_eq!(parse_range(b"bytes=-3", 10), Partial(7, 3));
        assert_eq!(parse_range(b"bytes=-30", 10), Partial(0, 10));
        assert_eq!(parse_range(b"bytes=5-100", 10), Partial(5, 5));
        assert_eq!(parse_range(b"Bytes=1-2", 10), Partial(1, 2));
        assert_eq!(parse_range(b"bytes=10-", 10), Unsatisfiable);
        assert_eq!(parse_range(b"bytes=-0", 10), Unsatisfiable);
        assert_eq!(parse_range(b"bytes=0-", 0), Unsatisfiable);
        assert_eq!(parse_range(b"bytes=3-2", 10), Full);
        assert_eq!(
            parse_range(b"bytes=0-1,3-4", 10),
            Multi(vec![(0, 2), (3, 2)])
        );
        // Overlapping and adjacent ranges merge, in ascending order.
        assert_eq!(
            parse_range(b"bytes=5-6, 0-1, 2-3", 10),
            Multi(vec![(0, 4), (5, 2)])
        );
        assert_eq!(parse_range(b"bytes=0-,0-,0-", 10), Partial(0, 10));
        assert_eq!(parse_range(b"bytes=-2,0-4,3-", 10), Partial(0, 10));
        // Unsatisfiable specs are dropped; all of them: 416. Empty elements
        // are allowed; one bad spec voids the header.
        assert_eq!(parse_range(b"bytes=20-30, 1-1", 10), Partial(1, 1));
        assert_eq!(parse_range(b"bytes=20-30, 40-", 10), Unsatisfiable);
        assert_eq!(
            parse_range(b"bytes=, 1-1 ,,3-3,", 10),
            Multi(vec![(1, 1), (3, 1)])
        );
        assert_eq!(parse_range(b"bytes=1-1, x", 10), Full);
        assert_eq!(parse_range(b"bytes=,", 10), Full);
        // The caps: too many specs, or too many ranges once merged.
        let many = |n: usize| {
            let specs: Vec<String> = (0..n).map(|i| format!("{}-{}", 2 * i, 2 * i)).collect();
            format!("bytes={}", specs.join(","))
        };
        assert!(
            matches!(parse_range(many(limits::MAX_RANGES).as_bytes(), 1000), Multi(r) if r.len() == limits::MAX_RANGES)
        );
        assert_eq!(
            parse_range(many(limits::MAX_RANGES + 1).as_bytes(), 1000),
            Full
        );
        assert_eq!(parse_range("bytes=0-,".repeat(1000).as_bytes(), 1000), Full);
        assert_eq!(parse_range(b"items=0-1", 10), Full);
        assert_eq!(parse_range(b"bytes=x-1", 10), Full);
        assert_eq!(parse_range(b"bytes=99999999999999999999-", 10), Full);
    }

    #[test]
    fn etag_lists() {
        let ours = "\"1-2-3.4\"";
        assert!(etag_list_matches(b"\"1-2-3.4\"", ours, true));
        assert!(etag_list_matches(b"\"x\", \"1-2-3.4\"", ours, true));
        assert!(etag_list_matches(b"*", ours, true));
        assert!(!etag_list_matches(b"W/\"1-2-3.4\"", ours, true));
        assert!(etag_list_matches(b"W/\"1-2-3.4\"", ours, false));
        assert!(!etag_list_matches(b"\"other\"", ours, false));
        assert!(!etag_list_matches(b"garbage, \"1-2-3", ours, false));
    }
}
