//! A response's header fields, in no protocol's syntax: names and values
//! in order, written out by HTTP/1.1's serializer ([`Fields::write_http1`])
//! or by the HPACK encoder (`h2::H2Conn::send_headers`), so that no
//! protocol has to read another's text back.

/// Most fields one response carries (the core writes about a dozen, plus
/// the configured and the rules' fields, which config loading bounds).
pub const MAX_FIELDS: usize = 64;

/// Name/value pairs packed in one buffer, each as its name's and its
/// value's lengths (4 bytes each, little-endian) and then its bytes: one
/// allocation for a whole list (a response's fields, a request's, or a
/// header block's decoded, in a buffer an HTTP/2 connection reuses).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Packed(Vec<u8>);

impl Packed {
    /// Bytes one pair takes besides its name and value.
    pub(crate) const OVERHEAD: usize = 8;

    pub(crate) fn with_capacity(n: usize) -> Packed {
        Packed(Vec::with_capacity(n))
    }

    pub(crate) fn push(&mut self, name: &[u8], value: &[u8]) {
        let mut lens = [0; Packed::OVERHEAD];
        lens[..4].copy_from_slice(&len32(name).to_le_bytes());
        lens[4..].copy_from_slice(&len32(value).to_le_bytes());
        self.0.reserve(Packed::OVERHEAD + name.len() + value.len());
        self.0.extend_from_slice(&lens);
        self.0.extend_from_slice(name);
        self.0.extend_from_slice(value);
    }

    /// Appends a pair whose value `value` appends to the buffer.
    fn push_with(&mut self, name: &[u8], value: impl FnOnce(&mut Vec<u8>)) {
        let at = self.0.len();
        self.0.extend_from_slice(&len32(name).to_le_bytes());
        self.0.extend_from_slice(&[0; 4]);
        self.0.extend_from_slice(name);
        let start = self.0.len();
        value(&mut self.0);
        let v = len32(&self.0[start..]);
        self.0[at + 4..at + 8].copy_from_slice(&v.to_le_bytes());
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = (&[u8], &[u8])> + '_ {
        let mut rest = &self.0[..];
        std::iter::from_fn(move || {
            let (lens, after) = rest.split_first_chunk::<{ Packed::OVERHEAD }>()?;
            let n = u32::from_le_bytes([lens[0], lens[1], lens[2], lens[3]]) as usize;
            let v = u32::from_le_bytes([lens[4], lens[5], lens[6], lens[7]]) as usize;
            let (name, after) = after.split_at(n);
            let (value, after) = after.split_at(v);
            rest = after;
            Some((name, value))
        })
    }

    /// Bytes it holds, lengths included.
    pub(crate) fn len(&self) -> usize {
        self.0.len()
    }

    /// Empties it, keeping at most `keep` bytes of capacity.
    pub(crate) fn clear(&mut self, keep: usize) {
        self.0.clear();
        if self.0.capacity() > keep {
            self.0 = Vec::new();
        }
    }

    pub(crate) fn capacity(&self) -> usize {
        self.0.capacity()
    }
}

/// A name's or a value's length as [`Packed`] keeps it. A header list is
/// bounded far below 4 GiB (by the limits on heads,
/// SETTINGS_MAX_HEADER_LIST_SIZE and configured fields).
fn len32(b: &[u8]) -> u32 {
    u32::try_from(b.len()).expect("a field under 4 GiB")
}

/// Header fields in order. Names are as the core writes them (`Content-Type`):
/// HTTP/1.1 sends them so, HPACK lowercases them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Fields {
    /// The fields, in one allocation.
    packed: Packed,
    count: usize,
}

/// Room for a typical response's fields (a dozen, 320 bytes of names and
/// values), so that building them allocates once.
const BYTES_CAPACITY: usize = 320 + 12 * Packed::OVERHEAD;

impl Fields {
    pub fn new() -> Fields {
        Fields {
            packed: Packed::with_capacity(BYTES_CAPACITY),
            count: 0,
        }
    }

    /// Appends a field. A name longer than 64 KiB cannot be (the core's are
    /// constants, and config loading checks the configured ones).
    pub fn push(&mut self, name: &str, value: &[u8]) {
        assert!(name.len() <= usize::from(u16::MAX), "field name too long");
        debug_assert!(
            !name.is_empty() && !name.bytes().any(|b| b <= b' ' || b == b':'),
            "bad field name {name:?}"
        );
        debug_assert!(
            !value.iter().any(|&b| b == b'\r' || b == b'\n' || b == 0),
            "bad field value"
        );
        self.packed.push(name.as_bytes(), value);
        self.count += 1;
    }

    /// Appends a field whose value is the decimal digits of `n`.
    pub fn push_u64(&mut self, name: &str, n: u64) {
        assert!(name.len() <= usize::from(u16::MAX), "field name too long");
        self.packed
            .push_with(name.as_bytes(), |b| crate::response::push_u64(b, n));
        self.count += 1;
    }

    /// Fields given as HTTP/1.1 lines (`Name: value\r\n` each), the form
    /// the configuration checks its extra fields and the rules theirs in,
    /// parsed once (at load) so that each response appends them whole
    /// ([`Fields::extend`]). A line without a colon is skipped.
    pub fn from_lines(lines: &[u8]) -> Fields {
        let mut f = Fields::default();
        f.push_lines(lines);
        f.packed.0.shrink_to_fit();
        f
    }

    /// Appends fields given as HTTP/1.1 lines (as [`Fields::from_lines`]).
    pub fn push_lines(&mut self, lines: &[u8]) {
        for line in lines.split(|&b| b == b'\n') {
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            let Some(colon) = line.iter().position(|&b| b == b':') else {
                continue;
            };
            let Ok(name) = std::str::from_utf8(&line[..colon]) else {
                continue;
            };
            let value = crate::request::trim(&line[colon + 1..]);
            self.push(name.trim(), value);
        }
    }

    /// Appends all of `other`'s fields, in order.
    pub fn extend(&mut self, other: &Fields) {
        self.packed.0.extend_from_slice(&other.packed.0);
        self.count += other.count;
    }

    pub fn len(&self) -> usize {
        self.count
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The fields in order, as `(name, value)`.
    pub fn iter(&self) -> impl Iterator<Item = (&[u8], &[u8])> + '_ {
        self.packed.iter()
    }

    /// The value of the first field named `name` (any case).
    pub fn get(&self, name: &str) -> Option<&[u8]> {
        self.iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name.as_bytes()))
            .map(|(_, v)| v)
    }

    /// Writes the HTTP/1.1 head: status line, fields, blank line.
    pub fn write_http1(&self, status: u16, out: &mut Vec<u8>) {
        // Each field's 8 bytes of lengths become ": " and CRLF.
        out.reserve(self.packed.len() - 4 * self.count + 32);
        out.extend_from_slice(b"HTTP/1.1 ");
        let mut code = [b'0'; 3];
        code[0] += (status / 100 % 10) as u8;
        code[1] += (status / 10 % 10) as u8;
        code[2] += (status % 10) as u8;
        out.extend_from_slice(&code);
        out.push(b' ');
        out.extend_from_slice(crate::response::reason(status).as_bytes());
        out.extend_from_slice(b"\r\n");
        for (name, value) in self.iter() {
            out.extend_from_slice(name);
            out.extend_from_slice(b": ");
            out.extend_from_slice(value);
            out.extend_from_slice(b"\r\n");
        }
        out.extend_from_slice(b"\r\n");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_keep_their_order_and_write_as_http_1_1() {
        let mut f = Fields::new();
        f.push("Server", b"spindle");
        f.push_u64("Content-Length", 1234);
        f.push("X-Empty", b"");
        f.push_lines(b"X-A: 1\r\nX-B:  two words \r\nnot a field\r\n");
        let all: Vec<_> = f.iter().collect();
        assert_eq!(
            all,
            vec![
                (&b"Server"[..], &b"spindle"[..]),
                (b"Content-Length", b"1234"),
                (b"X-Empty", b""),
                (b"X-A", b"1"),
                (b"X-B", b"two words"),
            ]
        );
        assert_eq!(f.len(), 5);
        assert_eq!(f.get("content-length"), Some(&b"1234"[..]));
        assert_eq!(f.get("nope"), None);
        let mut out = Vec::new();
        f.write_http1(404, &mut out);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "HTTP/1.1 404 Not Found\r\nServer: spindle\r\nContent-Length: 1234\r\nX-Empty: \r\nX-A: 1\r\nX-B: two words\r\n\r\n"
        );
    }

    #[test]
    fn fields_parsed_once_append_as_the_lines_would() {
        let lines = b"X-A: 1\r\nX-B:  two words \r\nnot a field\r\n";
        let parsed = Fields::from_lines(lines);
        assert_eq!(parsed.len(), 2);
        let (mut by_lines, mut by_fields) = (Fields::new(), Fields::new());
        for f in [&mut by_lines, &mut by_fields] {
            f.push("Server", b"spindle");
        }
        by_lines.push_lines(lines);
        by_fields.extend(&parsed);
        assert_eq!(by_fields, by_lines);
        let (mut a, mut b) = (Vec::new(), Vec::new());
        by_lines.write_http1(200, &mut a);
        by_fields.write_http1(200, &mut b);
        assert_eq!(a, b);
        assert_eq!(Fields::from_lines(b""), Fields::default());
    }
}
