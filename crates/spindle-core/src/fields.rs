//! A response's header fields, in no protocol's syntax: names and values
//! in order, written out by HTTP/1.1's serializer ([`Fields::write_http1`])
//! or by the HPACK encoder (`h2::H2Conn::send_headers`), so that no
//! protocol has to read another's text back.

/// Most fields one response carries (the core writes about a dozen, plus
/// the configured and the rules' fields, which config loading bounds).
pub const MAX_FIELDS: usize = 64;

/// Header fields in order. Names are as the core writes them (`Content-Type`):
/// HTTP/1.1 sends them so, HPACK lowercases them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Fields {
    /// Each field's name then its value, back to back.
    bytes: Vec<u8>,
    /// Each field's name and value lengths, in order.
    lens: Vec<(u16, u32)>,
}

/// Room for a typical response's fields, so that building them allocates
/// once.
const BYTES_CAPACITY: usize = 320;
const LENS_CAPACITY: usize = 12;

impl Fields {
    pub fn new() -> Fields {
        Fields {
            bytes: Vec::with_capacity(BYTES_CAPACITY),
            lens: Vec::with_capacity(LENS_CAPACITY),
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
        self.bytes.extend_from_slice(name.as_bytes());
        self.bytes.extend_from_slice(value);
        self.lens.push((name.len() as u16, value.len() as u32));
    }

    /// Appends a field whose value is the decimal digits of `n`.
    pub fn push_u64(&mut self, name: &str, n: u64) {
        assert!(name.len() <= usize::from(u16::MAX), "field name too long");
        self.bytes.extend_from_slice(name.as_bytes());
        let at = self.bytes.len();
        crate::response::push_u64(&mut self.bytes, n);
        let digits = self.bytes.len() - at;
        self.lens.push((name.len() as u16, digits as u32));
    }

    /// Appends fields given as HTTP/1.1 lines (`Name: value\r\n` each), the
    /// form the configuration keeps its extra fields and the rules theirs
    /// in (checked when loaded). A line without a colon is skipped.
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

    pub fn len(&self) -> usize {
        self.lens.len()
    }

    pub fn is_empty(&self) -> bool {
        self.lens.is_empty()
    }

    /// The fields in order, as `(name, value)`.
    pub fn iter(&self) -> impl Iterator<Item = (&[u8], &[u8])> + '_ {
        let mut at = 0;
        self.lens.iter().map(move |&(n, v)| {
            let (n, v) = (usize::from(n), v as usize);
            let name = &self.bytes[at..at + n];
            let value = &self.bytes[at + n..at + n + v];
            at += n + v;
            (name, value)
        })
    }

    /// The value of the first field named `name` (any case).
    pub fn get(&self, name: &str) -> Option<&[u8]> {
        self.iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name.as_bytes()))
            .map(|(_, v)| v)
    }

    /// Writes the HTTP/1.1 head: status line, fields, blank line.
    pub fn write_http1(&self, status: u16, out: &mut Vec<u8>) {
        out.reserve(self.bytes.len() + 4 * self.lens.len() + 32);
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
}
