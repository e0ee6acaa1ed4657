//! QPACK (RFC 9204) with the dynamic table refused: a decoder for the
//! field sections a client sends and an encoder for responses, both on the
//! static table alone.
//!
//! We advertise SETTINGS_QPACK_MAX_TABLE_CAPACITY = 0 and
//! SETTINGS_QPACK_BLOCKED_STREAMS = 0 (`frame::OUR_SETTINGS`; both are
//! also the defaults, §5), so a client may never insert into our decoder's
//! table: every field section it sends must have a Required Insert Count
//! of 0, and any reference to the dynamic table is
//! QPACK_DECOMPRESSION_FAILED (§2.2.3, §4.5.1.1). What that buys: no
//! encoder stream to apply, no Section Acknowledgments to send (§4.4.1:
//! only sections that reference the table are acknowledged), no request
//! stream ever blocked waiting for an insert, no table memory per
//! connection, and each field section decoded alone, in any order, from
//! its own bytes. It costs bytes on the wire: a client's repeated fields
//! (its `user-agent`, its cookies) come as literals every time, as in
//! HTTP/1.1; static references and Huffman coding still shorten them.
//!
//! The encoder does not use the client's table either (what to insert is
//! the encoder's choice, and nothing is a choice too), so our sections
//! also start with two zero bytes ([`encode_section_prefix`]), need no
//! acknowledgment, and never make the client wait. A field is an index when the static table has its name
//! and value, else a literal with the name by static index when the table
//! has the name, else a literal name; each string Huffman-coded when that
//! is shorter (HPACK's code, `h2::huffman`, which QPACK reuses, §4.1.2).
//!
//! The decoder bounds its work by the section's length, and its memory by
//! one Huffman-coded name and value (a plain string is handed out borrowed
//! from the section, an indexed one from the static table). Unlike HPACK's
//! it can stop at the first field past a limit: there is no table to keep
//! in step with the client's, so a section refused for its size leaves the
//! connection as it was, and the request alone can be answered 431.

use crate::h2::hpack::with_lower;
use crate::h2::huffman;

use super::frame::{ErrorCode, VARINT_MAX};

/// Bytes a field costs in a field section's size besides its name and
/// value (RFC 9114 §4.2.2, as RFC 7541 §4.1).
pub const FIELD_OVERHEAD: usize = 32;

/// Largest field section we accept, counted as §4.2.2 of RFC 9114 counts
/// it (names, values, and [`FIELD_OVERHEAD`] per field), and advertised as
/// SETTINGS_MAX_FIELD_SECTION_SIZE: HTTP/2's header list limit, so a
/// request that fits one fits the other.
pub const MAX_FIELD_SECTION_SIZE: usize =
    crate::h2::settings::DEFAULT_MAX_HEADER_LIST_SIZE as usize;

/// Most fields in one section: twice HTTP/1.1's `limits::MAX_HEADERS`,
/// as pseudo-fields count here and browsers send each cookie as a field
/// of its own (RFC 9114 §4.2.1).
pub const MAX_FIELDS: usize = 2 * crate::limits::MAX_HEADERS;

/// Longest string literal (its encoded bytes, Huffman-coded or not): one
/// name or value alone within [`MAX_FIELD_SECTION_SIZE`]. A longer one is
/// refused from its length, before its bytes are read; the Huffman
/// decoder's output is then at most 8/5 of it.
pub const MAX_STRING_LEN: usize = MAX_FIELD_SECTION_SIZE - FIELD_OVERHEAD;

/// Largest integer a section may encode: QPACK's integers are at most 62
/// bits (§4.1.1), as QUIC's varints. Anything larger is refused, so
/// decoding never overflows.
const MAX_INT: u64 = VARINT_MAX;

/// Entries in the static table.
pub const STATIC_LEN: usize = 99;

/// The static table (RFC 9204 Appendix A), index 0 first. Not HPACK's:
/// its indices start at 0 and it has 99 entries, many with values.
pub const STATIC_TABLE: [(&str, &str); STATIC_LEN] = [
    (":authority", ""),
    (":path", "/"),
    ("age", "0"),
    ("content-disposition", ""),
    ("content-length", "0"),
    ("cookie", ""),
    ("date", ""),
    ("etag", ""),
    ("if-modified-since", ""),
    ("if-none-match", ""),
    ("last-modified", ""),
    ("link", ""),
    ("location", ""),
    ("referer", ""),
    ("set-cookie", ""),
    (":method", "CONNECT"),
    (":method", "DELETE"),
    (":method", "GET"),
    (":method", "HEAD"),
    (":method", "OPTIONS"),
    (":method", "POST"),
    (":method", "PUT"),
    (":scheme", "http"),
    (":scheme", "https"),
    (":status", "103"),
    (":status", "200"),
    (":status", "304"),
    (":status", "404"),
    (":status", "503"),
    ("accept", "*/*"),
    ("accept", "application/dns-message"),
    ("accept-encoding", "gzip, deflate, br"),
    ("accept-ranges", "bytes"),
    ("access-control-allow-headers", "cache-control"),
    ("access-control-allow-headers", "content-type"),
    ("access-control-allow-origin", "*"),
    ("cache-control", "max-age=0"),
    ("cache-control", "max-age=2592000"),
    ("cache-control", "max-age=604800"),
    ("cache-control", "no-cache"),
    ("cache-control", "no-store"),
    ("cache-control", "public, max-age=31536000"),
    ("content-encoding", "br"),
    ("content-encoding", "gzip"),
    ("content-type", "application/dns-message"),
    ("content-type", "application/javascript"),
    ("content-type", "application/json"),
    ("content-type", "application/x-www-form-urlencoded"),
    ("content-type", "image/gif"),
    ("content-type", "image/jpeg"),
    ("content-type", "image/png"),
    ("content-type", "text/css"),
    ("content-type", "text/html; charset=utf-8"),
    ("content-type", "text/plain"),
    ("content-type", "text/plain;charset=utf-8"),
    ("range", "bytes=0-"),
    ("strict-transport-security", "max-age=31536000"),
    (
        "strict-transport-security",
        "max-age=31536000; includesubdomains",
    ),
    (
        "strict-transport-security",
        "max-age=31536000; includesubdomains; preload",
    ),
    ("vary", "accept-encoding"),
    ("vary", "origin"),
    ("x-content-type-options", "nosniff"),
    ("x-xss-protection", "1; mode=block"),
    (":status", "100"),
    (":status", "204"),
    (":status", "206"),
    (":status", "302"),
    (":status", "400"),
    (":status", "403"),
    (":status", "421"),
    (":status", "425"),
    (":status", "500"),
    ("accept-language", ""),
    ("access-control-allow-credentials", "FALSE"),
    ("access-control-allow-credentials", "TRUE"),
    ("access-control-allow-headers", "*"),
    ("access-control-allow-methods", "get"),
    ("access-control-allow-methods", "get, post, options"),
    ("access-control-allow-methods", "options"),
    ("access-control-expose-headers", "content-length"),
    ("access-control-request-headers", "content-type"),
    ("access-control-request-method", "get"),
    ("access-control-request-method", "post"),
    ("alt-svc", "clear"),
    ("authorization", ""),
    (
        "content-security-policy",
        "script-src 'none'; object-src 'none'; base-uri 'none'",
    ),
    ("early-data", "1"),
    ("expect-ct", ""),
    ("forwarded", ""),
    ("if-range", ""),
    ("origin", ""),
    ("purpose", "prefetch"),
    ("server", ""),
    ("timing-allow-origin", "*"),
    ("upgrade-insecure-requests", "1"),
    ("user-agent", ""),
    ("x-forwarded-for", ""),
    ("x-frame-options", "deny"),
    ("x-frame-options", "sameorigin"),
];

/// A field section the decoder refuses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QpackError {
    /// The section ends inside its prefix or a representation.
    Truncated,
    /// An integer over 2^62 - 1.
    IntegerTooLarge,
    /// A reference to the dynamic table, which we said is empty: a
    /// Required Insert Count other than 0, an index or name reference with
    /// T = 0, or either post-base form.
    DynamicReference,
    /// A Base below zero (S = 1 with a Required Insert Count of 0), which
    /// no encoder can produce (§4.5.1.2).
    BadBase,
    /// A static index past the table's end.
    BadIndex,
    /// A Huffman string with EOS or bad padding.
    Huffman,
    /// Over our limits: the section's size past the caller's maximum,
    /// more than [`MAX_FIELDS`] fields, or a string longer than
    /// [`MAX_STRING_LEN`]. The connection is as it was (there is no table
    /// to fall out of step), so the request alone can be refused: 431
    /// (RFC 9114 §4.2.2), or a stream error H3_EXCESSIVE_LOAD.
    TooLarge,
}

impl QpackError {
    /// The error code: H3_EXCESSIVE_LOAD for [`QpackError::TooLarge`]
    /// (whose request a server may instead answer 431), else
    /// QPACK_DECOMPRESSION_FAILED, the connection's (§2.2.3).
    pub fn code(self) -> ErrorCode {
        match self {
            QpackError::TooLarge => ErrorCode::ExcessiveLoad,
            _ => ErrorCode::QpackDecompressionFailed,
        }
    }
}

/// One decoded field. Its name and value borrow from the section (a plain
/// literal), from [`STATIC_TABLE`] (an index), or from the decoder (a
/// Huffman-coded literal): nothing is copied for the callback.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Field<'a> {
    pub name: &'a [u8],
    pub value: &'a [u8],
    /// The N bit of a literal (§4.5.4): an intermediary must not put the
    /// field in a dynamic table when it forwards it. Kept as information;
    /// this server forwards nothing and indexes nothing.
    pub never_indexed: bool,
}

/// Decodes field sections for one connection (or several: it holds only
/// reusable buffers for Huffman-coded strings).
#[derive(Debug, Default)]
pub struct Decoder {
    name: Vec<u8>,
    value: Vec<u8>,
}

impl Decoder {
    pub fn new() -> Decoder {
        Decoder::default()
    }

    /// Decodes one whole field section (a HEADERS frame's payload),
    /// handing each field to `field` in order while the section's size
    /// (names, values and [`FIELD_OVERHEAD`] per field) stays within
    /// `max_section_size` and its fields within [`MAX_FIELDS`]; returns
    /// that size. On an error no more fields are handed out, and those
    /// already handed out are the caller's to drop.
    pub fn decode(
        &mut self,
        section: &[u8],
        max_section_size: usize,
        field: &mut dyn FnMut(Field<'_>),
    ) -> Result<usize, QpackError> {
        let mut pos = section_prefix(section)?;
        let mut size = 0usize;
        let mut fields = 0usize;
        while pos < section.len() {
            let (f, n) = self.line(&section[pos..])?;
            pos += n;
            fields += 1;
            size = size.saturating_add(f.name.len() + f.value.len() + FIELD_OVERHEAD);
            if fields > MAX_FIELDS || size > max_section_size {
                return Err(QpackError::TooLarge);
            }
            field(f);
        }
        Ok(size)
    }

    /// Decodes the field line representation at the start of `buf`
    /// (§4.5.2 to §4.5.6): the field and the bytes it took.
    fn line<'a>(&'a mut self, buf: &'a [u8]) -> Result<(Field<'a>, usize), QpackError> {
        let b = *buf.first().ok_or(QpackError::Truncated)?;
        if b & 0x80 != 0 {
            // 1Txxxxxx: indexed field line.
            if b & 0x40 == 0 {
                return Err(QpackError::DynamicReference);
            }
            let (i, n) = int(buf, 6)?;
            let (name, value) = static_entry(i)?;
            let f = Field {
                name,
                value,
                never_indexed: false,
            };
            Ok((f, n))
        } else if b & 0x40 != 0 {
            // 01NTxxxx: literal with name reference.
            if b & 0x10 == 0 {
                return Err(QpackError::DynamicReference);
            }
            let (i, n) = int(buf, 4)?;
            let (name, _) = static_entry(i)?;
            let (value, m) = string(&buf[n..], 7, &mut self.value)?;
            let f = Field {
                name,
                value,
                never_indexed: b & 0x20 != 0,
            };
            Ok((f, n + m))
        } else if b & 0x20 != 0 {
            // 001NHxxx: literal with literal name.
            let (name, n) = string(buf, 3, &mut self.name)?;
            let (value, m) = string(&buf[n..], 7, &mut self.value)?;
            let f = Field {
                name,
                value,
                never_indexed: b & 0x10 != 0,
            };
            Ok((f, n + m))
        } else {
            // 0001xxxx: indexed with post-base index; 0000Nxxx: literal
            // with post-base name reference. Both name the dynamic table.
            Err(QpackError::DynamicReference)
        }
    }
}

/// Checks a field section's prefix (§4.5.1) and returns its length: the
/// Required Insert Count must be 0, and the Base, meaningless then, must
/// at least be one an encoder could send.
fn section_prefix(section: &[u8]) -> Result<usize, QpackError> {
    let (required_insert_count, n) = int(section, 8)?;
    if required_insert_count != 0 {
        return Err(QpackError::DynamicReference);
    }
    let rest = &section[n..];
    let sign = rest.first().ok_or(QpackError::Truncated)? & 0x80 != 0;
    let (_delta_base, m) = int(rest, 7)?;
    if sign {
        return Err(QpackError::BadBase);
    }
    Ok(n + m)
}

/// Static entry `i`'s name and value.
fn static_entry(i: u64) -> Result<(&'static [u8], &'static [u8]), QpackError> {
    let (name, value) = usize::try_from(i)
        .ok()
        .and_then(|i| STATIC_TABLE.get(i))
        .ok_or(QpackError::BadIndex)?;
    Ok((name.as_bytes(), value.as_bytes()))
}

/// Decodes an integer with a `prefix`-bit prefix (§4.1.1, RFC 7541 §5.1)
/// from the start of `buf`: its value and the bytes it took. A value over
/// [`MAX_INT`] is refused however it is spelled, padding of zero groups
/// included, so at most ten bytes are read.
fn int(buf: &[u8], prefix: u32) -> Result<(u64, usize), QpackError> {
    debug_assert!((1..=8).contains(&prefix));
    let max_prefix = (1u64 << prefix) - 1;
    let first = u64::from(*buf.first().ok_or(QpackError::Truncated)?) & max_prefix;
    if first < max_prefix {
        return Ok((first, 1));
    }
    let mut value = max_prefix;
    for (i, &b) in buf.iter().enumerate().skip(1) {
        let shift = 7 * (i as u32 - 1);
        let bits = u64::from(b & 0x7f);
        // Past 62 bits, or bits that would land there: too large.
        if shift > 62 || bits > MAX_INT >> shift {
            return Err(QpackError::IntegerTooLarge);
        }
        value += bits << shift;
        if value > MAX_INT {
            return Err(QpackError::IntegerTooLarge);
        }
        if b & 0x80 == 0 {
            return Ok((value, i + 1));
        }
    }
    Err(QpackError::Truncated)
}

/// Decodes a string literal (§4.1.2) from the start of `buf`, whose first
/// byte holds the H bit just above a `prefix`-bit length: the string
/// (borrowed from `buf`, or Huffman-decoded into `scratch`) and the bytes
/// it took.
fn string<'a>(
    buf: &'a [u8],
    prefix: u32,
    scratch: &'a mut Vec<u8>,
) -> Result<(&'a [u8], usize), QpackError> {
    let huffman = buf.first().ok_or(QpackError::Truncated)? & (1 << prefix) != 0;
    let (len, n) = int(buf, prefix)?;
    let len = usize::try_from(len)
        .ok()
        .filter(|&l| l <= MAX_STRING_LEN)
        .ok_or(QpackError::TooLarge)?;
    let raw = buf.get(n..n + len).ok_or(QpackError::Truncated)?;
    if !huffman {
        return Ok((raw, n + len));
    }
    scratch.clear();
    huffman::decode(raw, scratch).map_err(|_| QpackError::Huffman)?;
    Ok((scratch, n + len))
}

// The encoder.

/// A field section prefix with no dynamic references: Required Insert
/// Count 0, Base 0 (§4.5.1).
pub const SECTION_PREFIX: [u8; 2] = [0, 0];

/// Starts a field section: [`SECTION_PREFIX`].
pub fn encode_section_prefix(out: &mut Vec<u8>) {
    out.extend_from_slice(&SECTION_PREFIX);
}

/// Appends an integer with a `prefix`-bit prefix, the prefix's byte
/// starting with `flags`.
fn put_int(out: &mut Vec<u8>, flags: u8, prefix: u32, value: usize) {
    let max_prefix = (1usize << prefix) - 1;
    if value < max_prefix {
        out.push(flags | value as u8);
        return;
    }
    out.push(flags | max_prefix as u8);
    let mut rest = value - max_prefix;
    while rest >= 0x80 {
        out.push((rest as u8 & 0x7f) | 0x80);
        rest >>= 7;
    }
    out.push(rest as u8);
}

/// Appends a string literal whose length has a `prefix`-bit prefix, the H
/// bit just above it, after `flags`: Huffman-coded if that is shorter.
fn put_str(out: &mut Vec<u8>, flags: u8, prefix: u32, s: &[u8]) {
    let h = huffman::encoded_len(s);
    if h < s.len() {
        put_int(out, flags | 1 << prefix, prefix, h);
        huffman::encode(s, out);
    } else {
        put_int(out, flags, prefix, s.len());
        out.extend_from_slice(s);
    }
}

/// Appends `:status`: an indexed field line when the static table has the
/// code (103, 200, 304, 404, 503, 100, 204, 206, 302, 400, 403, 421, 425,
/// 500), else a literal with the name's index.
pub fn encode_status(status: u16, out: &mut Vec<u8>) {
    debug_assert!((100..1000).contains(&status));
    let digits = [
        b'0' + (status / 100 % 10) as u8,
        b'0' + (status / 10 % 10) as u8,
        b'0' + (status % 10) as u8,
    ];
    encode_lower(STATUS, &digits, out);
}

/// Appends one field, its name lowercased (HTTP/3 field names are
/// lowercase; RFC 9114 §4.2): an indexed field line when the static table
/// has name and value, else a literal with the name's static index when it
/// has the name, else a literal with a literal name. The N bit is never
/// set: nothing this server sends asks intermediaries for that.
pub fn encode_field(name: &[u8], value: &[u8], out: &mut Vec<u8>) {
    with_lower(name, |lower| match static_name(lower) {
        Some(first) => encode_lower(first, value, out),
        None => {
            put_str(out, 0x20, 3, lower);
            put_str(out, 0, 7, value);
        }
    });
}

/// A field whose name is static entry `first`'s (the first of that name).
fn encode_lower(first: usize, value: &[u8], out: &mut Vec<u8>) {
    match static_exact(first, value) {
        Some(i) => put_int(out, 0xc0, 6, i),
        None => {
            put_int(out, 0x50, 4, first);
            put_str(out, 0, 7, value);
        }
    }
}

const fn same(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() && a[i] == b[i] {
        i += 1;
    }
    i == a.len()
}

/// The first static entry named `name`, at compile time.
const fn static_index(name: &str) -> usize {
    let mut i = 0;
    while i < STATIC_LEN {
        if same(STATIC_TABLE[i].0, name) {
            return i;
        }
        i += 1;
    }
    panic!("not in the static table")
}

/// No further entry of the same name, in [`NEXT_SAME_NAME`].
const NO_NEXT: u8 = u8::MAX;

/// For each static entry, the next entry with the same name: the entries
/// of one name are not all together (`:status` is at 24-28 and 63-71), so
/// the search for a value follows this chain from the name's first entry.
const NEXT_SAME_NAME: [u8; STATIC_LEN] = next_same_name();

const fn next_same_name() -> [u8; STATIC_LEN] {
    let mut next = [NO_NEXT; STATIC_LEN];
    let mut i = 0;
    while i < STATIC_LEN {
        let mut j = i + 1;
        while j < STATIC_LEN {
            if same(STATIC_TABLE[i].0, STATIC_TABLE[j].0) {
                next[i] = j as u8;
                break;
            }
            j += 1;
        }
        i += 1;
    }
    next
}

/// The first entry named `:status`.
const STATUS: usize = static_index(":status");

/// The static entry with `first`'s name and this value, if any.
fn static_exact(first: usize, value: &[u8]) -> Option<usize> {
    let mut i = first;
    loop {
        if STATIC_TABLE[i].1.as_bytes() == value {
            return Some(i);
        }
        match NEXT_SAME_NAME[i] {
            NO_NEXT => return None,
            j => i = usize::from(j),
        }
    }
}

/// The first static entry named `lower` (a lowercase name): the names a
/// file server's responses carry by one `match`, any other by a search.
fn static_name(lower: &[u8]) -> Option<usize> {
    const DATE: usize = static_index("date");
    const ETAG: usize = static_index("etag");
    const SERVER: usize = static_index("server");
    const CONTENT_TYPE: usize = static_index("content-type");
    const CONTENT_LENGTH: usize = static_index("content-length");
    const LAST_MODIFIED: usize = static_index("last-modified");
    const ACCEPT_RANGES: usize = static_index("accept-ranges");
    const CACHE_CONTROL: usize = static_index("cache-control");
    const CONTENT_ENCODING: usize = static_index("content-encoding");
    const VARY: usize = static_index("vary");
    const LOCATION: usize = static_index("location");
    match lower {
        b"date" => Some(DATE),
        b"etag" => Some(ETAG),
        b"server" => Some(SERVER),
        b"content-type" => Some(CONTENT_TYPE),
        b"content-length" => Some(CONTENT_LENGTH),
        b"last-modified" => Some(LAST_MODIFIED),
        b"accept-ranges" => Some(ACCEPT_RANGES),
        b"cache-control" => Some(CACHE_CONTROL),
        b"content-encoding" => Some(CONTENT_ENCODING),
        b"vary" => Some(VARY),
        b"location" => Some(LOCATION),
        // In HPACK's table, not in QPACK's: a 206's, so worth no search.
        b"content-range" => None,
        _ => STATIC_TABLE.iter().position(|(n, _)| n.as_bytes() == lower),
    }
}

#[cfg(test)]
mod tests;
