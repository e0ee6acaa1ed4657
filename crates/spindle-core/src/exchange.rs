//! One HTTP/2 stream's exchange, in the terms of the HTTP/1.1 core.
//!
//! A stream carries one request. Rather than a second set of decisions,
//! each stream gets a [`Session`](crate::Session) of its own
//! ([`Session::for_stream`](crate::Session::for_stream)), fed the request
//! written out as an HTTP/1.1 head ([`request_head`]); every feature the
//! core has (conditionals, ranges, HEAD, listings, sidecars, rules, error
//! pages, virtual hosts by `:authority`) then holds for HTTP/2 by
//! construction. The response head the session makes is read back into a
//! status and fields for HPACK ([`response_head`]), without the fields
//! that are connection-specific in HTTP/2 (RFC 9113 §8.2.2).
//!
//! The request's fields have passed the HTTP/2 layer's checks (lowercase
//! names, no connection-specific fields, pseudo-fields first); this module
//! checks again what would corrupt an HTTP/1.1 head (CR, LF, NUL, a colon
//! in a name), so that no stream can smuggle a second request.

use crate::limits;

/// A request as an HTTP/2 stream carries it.
#[derive(Debug, Clone, Copy)]
pub struct StreamRequest<'a> {
    pub method: &'a [u8],
    /// `:authority`, which stands for `Host` (RFC 9113 §8.3.1).
    pub authority: Option<&'a [u8]>,
    pub path: &'a [u8],
    /// The regular fields, names lowercase, in order.
    pub fields: &'a [(&'a [u8], &'a [u8])],
}

/// Why a stream's request cannot be written as an HTTP/1.1 head: the
/// stream is malformed (RFC 9113 §8.1.1), answered with a stream error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Malformed {
    /// A method or path with bytes a request line cannot hold.
    RequestLine,
    /// A field name or value with CR, LF, NUL, or a name with a colon or
    /// a space.
    Field,
    /// More than [`limits::DEFAULT_MAX_HEADER_BYTES`] written out.
    TooLarge,
}

fn token_ok(b: &[u8]) -> bool {
    !b.is_empty() && b.iter().all(|&c| c > b' ' && c < 0x7f)
}

fn name_ok(b: &[u8]) -> bool {
    !b.is_empty() && b.iter().all(|&c| c > b' ' && c < 0x7f && c != b':')
}

fn value_ok(b: &[u8]) -> bool {
    !b.iter().any(|&c| c == b'\r' || c == b'\n' || c == 0)
}

/// The request as an HTTP/1.1 head: `METHOD path HTTP/1.1`, `host` from
/// `:authority` (a `host` field is dropped when `:authority` is there),
/// `cookie` fields joined with `; ` (RFC 9113 §8.2.3), and no
/// `content-length` (the stream's DATA frames frame a body; the session
/// reads none).
pub fn request_head(req: &StreamRequest) -> Result<Vec<u8>, Malformed> {
    if !token_ok(req.method) || !token_ok(req.path) {
        return Err(Malformed::RequestLine);
    }
    let mut h = Vec::with_capacity(256);
    h.extend_from_slice(req.method);
    h.push(b' ');
    h.extend_from_slice(req.path);
    h.extend_from_slice(b" HTTP/1.1\r\n");
    if let Some(a) = req.authority {
        if !value_ok(a) {
            return Err(Malformed::Field);
        }
        h.extend_from_slice(b"host: ");
        h.extend_from_slice(a);
        h.extend_from_slice(b"\r\n");
    }
    let mut cookies: Vec<&[u8]> = Vec::new();
    for &(name, value) in req.fields {
        if !name_ok(name) || !value_ok(value) {
            return Err(Malformed::Field);
        }
        match name {
            b"host" if req.authority.is_some() => continue,
            b"content-length" => continue,
            b"cookie" => {
                cookies.push(value);
                continue;
            }
            _ => {}
        }
        h.extend_from_slice(name);
        h.extend_from_slice(b": ");
        h.extend_from_slice(value);
        h.extend_from_slice(b"\r\n");
    }
    if !cookies.is_empty() {
        h.extend_from_slice(b"cookie: ");
        h.extend_from_slice(&cookies.join(&b"; "[..]));
        h.extend_from_slice(b"\r\n");
    }
    h.extend_from_slice(b"\r\n");
    if h.len() > limits::DEFAULT_MAX_HEADER_BYTES {
        return Err(Malformed::TooLarge);
    }
    Ok(h)
}

/// A response head as HTTP/2 sends it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResponseHead {
    pub status: u16,
    /// Names lowercase, connection-specific fields left out.
    pub fields: Vec<(Vec<u8>, Vec<u8>)>,
    /// Where the head's bytes end: what follows in the same buffer is
    /// body (an error page, a listing, a small file's bytes).
    pub len: usize,
}

/// Fields that are connection-specific in HTTP/2 (RFC 9113 §8.2.2).
const CONNECTION_FIELDS: &[&str] = &[
    "connection",
    "keep-alive",
    "proxy-connection",
    "transfer-encoding",
    "upgrade",
];

/// Most fields a head of the core has (a bound for the parse; the core
/// writes about a dozen, plus `add-header`'s).
pub const MAX_RESPONSE_FIELDS: usize = 64;

/// A response head read in place: its status, its fields as slices of
/// the head (names as the core wrote them; HPACK lowercases them), and
/// its length. Nothing is allocated: the hot path of every stream.
pub struct HeadView<'a> {
    pub status: u16,
    fields: [(&'a [u8], &'a [u8]); MAX_RESPONSE_FIELDS],
    count: usize,
    pub len: usize,
}

impl<'a> HeadView<'a> {
    /// The fields HTTP/2 sends, connection-specific ones left out.
    pub fn fields(&self) -> &[(&'a [u8], &'a [u8])] {
        &self.fields[..self.count]
    }
}

/// [`response_head`] without allocating. `None` for a head that is not
/// whole or does not parse.
pub fn view_response_head(head: &[u8]) -> Option<HeadView<'_>> {
    let mut hs = [httparse::EMPTY_HEADER; MAX_RESPONSE_FIELDS];
    let mut r = httparse::Response::new(&mut hs);
    let len = match r.parse(head) {
        Ok(httparse::Status::Complete(n)) => n,
        _ => return None,
    };
    let status = r.code?;
    let mut v = HeadView {
        status,
        fields: [(&[][..], &[][..]); MAX_RESPONSE_FIELDS],
        count: 0,
        len,
    };
    for h in r.headers.iter() {
        if CONNECTION_FIELDS
            .iter()
            .any(|c| h.name.eq_ignore_ascii_case(c))
        {
            continue;
        }
        v.fields[v.count] = (h.name.as_bytes(), h.value);
        v.count += 1;
    }
    Some(v)
}

/// Reads a head the core made back into a status and fields. `None` for
/// a head that does not parse, which the core never makes.
pub fn response_head(head: &[u8]) -> Option<ResponseHead> {
    let v = view_response_head(head)?;
    Some(ResponseHead {
        status: v.status,
        fields: v
            .fields()
            .iter()
            .map(|(n, val)| (n.to_ascii_lowercase(), val.to_vec()))
            .collect(),
        len: v.len,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{FileMeta, Session, SessionConfig, Step};

    fn req<'a>(fields: &'a [(&'a [u8], &'a [u8])]) -> StreamRequest<'a> {
        StreamRequest {
            method: b"GET",
            authority: Some(b"example.org"),
            path: b"/a/b.txt?x=1",
            fields,
        }
    }

    #[test]
    fn a_stream_request_reads_as_http_1_1() {
        let f: &[(&[u8], &[u8])] = &[
            (b"host", b"other"),
            (b"cookie", b"a=1"),
            (b"accept", b"*/*"),
            (b"cookie", b"b=2"),
            (b"content-length", b"0"),
        ];
        let h = request_head(&req(f)).unwrap();
        assert_eq!(
            String::from_utf8(h).unwrap(),
            "GET /a/b.txt?x=1 HTTP/1.1\r\nhost: example.org\r\naccept: */*\r\ncookie: a=1; b=2\r\n\r\n"
        );
    }

    #[test]
    fn nothing_can_break_out_of_the_head() {
        for (name, value) in [
            (&b"x"[..], &b"a\r\nGET / HTTP/1.1"[..]),
            (b"x", b"a\nb"),
            (b"x", b"a\0b"),
            (b"x:y", b"v"),
            (b"x y", b"v"),
            (b"", b"v"),
        ] {
            let f = [(name, value)];
            assert_eq!(request_head(&req(&f)), Err(Malformed::Field), "{name:?}");
        }
        let mut r = req(&[]);
        r.path = b"/a b";
        assert_eq!(request_head(&r), Err(Malformed::RequestLine));
        r.path = b"/";
        r.authority = Some(b"a\r\nb");
        assert_eq!(request_head(&r), Err(Malformed::Field));
        let big = vec![b'v'; limits::DEFAULT_MAX_HEADER_BYTES];
        let f = [(&b"x"[..], &big[..])];
        assert_eq!(request_head(&req(&f)), Err(Malformed::TooLarge));
    }

    #[test]
    fn a_stream_session_opens_the_path_and_answers_without_connection_fields() {
        let cfg = SessionConfig::default();
        let mut s = Session::for_stream(None);
        s.feed(&request_head(&req(&[])).unwrap());
        let Step::Open(open) = s.next(&cfg) else {
            panic!("not an open")
        };
        assert_eq!(open.path.as_bytes(), b"a/b.txt");
        let meta = FileMeta {
            size: 5,
            mtime_sec: 1,
            mtime_nsec: 0,
            ino: 1,
            kind: crate::response::FileKind::Regular,
        };
        let Step::Respond(r) = s.opened(&cfg, &open, Ok(meta)) else {
            panic!("no response")
        };
        let h = response_head(&r.head).unwrap();
        assert_eq!(h.status, 200);
        assert_eq!(h.len, r.head.len());
        assert!(h
            .fields
            .iter()
            .all(|(n, _)| n != b"connection" && n != b"keep-alive"));
        assert!(h
            .fields
            .iter()
            .any(|(n, v)| n == b"content-length" && v == b"5"));
        // The view reads the same head in place, names as written.
        let v = view_response_head(&r.head).unwrap();
        assert_eq!((v.status, v.len), (h.status, h.len));
        assert_eq!(v.fields().len(), h.fields.len());
        for ((vn, vv), (n, val)) in v.fields().iter().zip(&h.fields) {
            assert_eq!(vn.to_ascii_lowercase(), *n);
            assert_eq!(vv, val);
        }
        let mut with_body = r.head.clone();
        with_body.extend_from_slice(b"hello");
        assert_eq!(view_response_head(&with_body).unwrap().len, r.head.len());
        assert!(view_response_head(&r.head[..r.head.len() - 1]).is_none());
        s.sent();
        assert!(s.closes_after_response(), "a stream carries one request");
        let info = s.log_info();
        assert!(info.http2);
    }
}
