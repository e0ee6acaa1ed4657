//! Parsing a request head, and the checks that need nothing but the head.

use crate::limits::MAX_HEADERS;

/// The request methods spindle distinguishes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Method {
    Get,
    Head,
    /// Anything else: answered with 405.
    Other(String),
}

impl Method {
    pub fn as_str(&self) -> &str {
        match self {
            Method::Get => "GET",
            Method::Head => "HEAD",
            Method::Other(s) => s,
        }
    }
}

/// How the request's body (if any) is framed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyFraming {
    None,
    Length(u64),
    /// `Transfer-Encoding: chunked` (or any transfer coding): not read;
    /// the connection is closed after the response.
    Chunked,
}

/// A parsed request head. Header values the server acts on are copied out
/// so the input buffer can be reused while the file is being opened.
#[derive(Debug, Clone)]
pub struct Request {
    pub method: Method,
    /// The request target exactly as received.
    pub target: Vec<u8>,
    /// 0 for HTTP/1.0, 1 for HTTP/1.1.
    pub minor_version: u8,
    /// Whether the client asked for (or, on 1.1, did not refuse) a
    /// persistent connection.
    pub keep_alive: bool,
    pub body: BodyFraming,
    pub if_match: Option<Vec<u8>>,
    pub if_none_match: Option<Vec<u8>>,
    pub if_modified_since: Option<Vec<u8>>,
    pub if_unmodified_since: Option<Vec<u8>>,
    pub range: Option<Vec<u8>>,
    pub if_range: Option<Vec<u8>>,
    /// Kept for precompressed sidecars (see `encoding`).
    pub accept_encoding: Option<Vec<u8>>,
    /// The `Host` field's value (for virtual hosts).
    pub host: Option<Vec<u8>>,
    /// Kept for directory listings: HTML or JSON (see `listing`).
    pub accept: Option<Vec<u8>>,
    pub referer: Option<Vec<u8>>,
    pub user_agent: Option<Vec<u8>>,
    /// Kept for `auth` rules (see `auth`).
    pub authorization: Option<Vec<u8>>,
    /// Bytes of the head, including the final blank line.
    pub head_len: usize,
}

impl Request {
    /// A request with its line and nothing else kept (no fields, no
    /// body, not keep-alive), for a parser to fill in.
    fn bare(method: Method, target: Vec<u8>, minor_version: u8, head_len: usize) -> Request {
        Request {
            method,
            target,
            minor_version,
            keep_alive: false,
            body: BodyFraming::None,
            if_match: None,
            if_none_match: None,
            if_modified_since: None,
            if_unmodified_since: None,
            range: None,
            if_range: None,
            accept_encoding: None,
            host: None,
            accept: None,
            referer: None,
            user_agent: None,
            authorization: None,
            head_len,
        }
    }
}

/// A request that cannot be served, with the status to answer it with.
/// The connection is closed after the answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    pub status: u16,
    /// Whatever could be recovered of the request line, for the access log.
    pub method: String,
    pub target: Vec<u8>,
}

impl Rejection {
    fn new(status: u16) -> Rejection {
        Rejection {
            status,
            method: String::from("-"),
            target: Vec::new(),
        }
    }
}

/// The outcome of trying to parse a head from the front of a buffer.
#[derive(Debug)]
pub enum Parsed {
    /// More bytes are needed.
    Partial,
    Complete(Box<Request>),
    Rejected(Rejection),
}

/// Parses one request head from the front of `buf`.
///
/// Enforces `max_request_line` (414) and `max_header_bytes` (431); syntax
/// errors give 400 and an unknown HTTP version 505.
pub fn parse(buf: &[u8], max_request_line: usize, max_header_bytes: usize) -> Parsed {
    parse_reusing(buf, max_request_line, max_header_bytes, &mut None)
}

/// [`parse`], building a complete request in `spare`'s allocation (and its
/// target's) when there is one, rather than in new ones: a keep-alive
/// connection then parses request after request without allocating.
/// `spare` is left alone unless a head is complete.
pub fn parse_reusing(
    buf: &[u8],
    max_request_line: usize,
    max_header_bytes: usize,
    spare: &mut Option<Box<Request>>,
) -> Parsed {
    // RFC 9112 §2.2: a server SHOULD ignore at least one empty line before
    // the request line. Leading CRLFs are skipped by the caller; here a
    // request line that has no end within the limit is too long.
    let line_end = buf.iter().position(|&b| b == b'\n');
    match line_end {
        None if buf.len() > max_request_line => return Parsed::Rejected(Rejection::new(414)),
        Some(n) if n > max_request_line + 1 => return Parsed::Rejected(Rejection::new(414)),
        _ => {}
    }
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut headers);
    let head_len = match req.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => {
            if buf.len() >= max_header_bytes {
                return Parsed::Rejected(Rejection::new(431));
            }
            return Parsed::Partial;
        }
        Err(e) => {
            let status = match e {
                httparse::Error::TooManyHeaders => 431,
                httparse::Error::Version => 505,
                _ => 400,
            };
            // A head cut short by the header limit fails as a partial parse,
            // not an error; but a buffer full of garbage past the limit is
            // still just garbage.
            return Parsed::Rejected(Rejection::new(status));
        }
    };
    let method = match req.method.unwrap_or("") {
        "GET" => Method::Get,
        "HEAD" => Method::Head,
        m => Method::Other(m.to_string()),
    };
    let mut spare = spare.take();
    let mut target = spare
        .as_mut()
        .map(|r| std::mem::take(&mut r.target))
        .unwrap_or_default();
    target.clear();
    target.extend_from_slice(req.path.unwrap_or("").as_bytes());
    // The Host value reuses the last request's allocation too: every 1.1
    // request has one.
    let mut host_buf = spare.as_mut().and_then(|r| r.host.take());
    // So do the other fields kept as bytes, which most clients send.
    let mut spares = spare.as_mut().map(|r| Spares::of(r)).unwrap_or_default();
    // Only for rejections: the request line, as far as it was understood.
    let reject = |status: u16, r: Request| {
        Parsed::Rejected(Rejection {
            status,
            method: r.method.as_str().to_string(),
            target: r.target,
        })
    };
    let minor_version = req.version.unwrap_or(1);

    let mut host_count = 0;
    let mut conn_close = false;
    let mut conn_keep_alive = false;
    let mut content_length: Option<u64> = None;
    let mut transfer_encoding = false;
    let mut r = Request::bare(method, target, minor_version, head_len);
    if head_len > max_header_bytes {
        return reject(431, r);
    }
    for h in req.headers.iter() {
        let name = h.name.as_bytes();
        let v = h.value;
        if name.eq_ignore_ascii_case(b"host") {
            host_count += 1;
            let mut h = host_buf.take().unwrap_or_default();
            h.clear();
            h.extend_from_slice(trim(v));
            r.host = Some(h);
        } else if name.eq_ignore_ascii_case(b"connection") {
            for tok in v.split(|&b| b == b',') {
                let tok = trim(tok);
                if tok.eq_ignore_ascii_case(b"close") {
                    conn_close = true;
                } else if tok.eq_ignore_ascii_case(b"keep-alive") {
                    conn_keep_alive = true;
                }
            }
        } else if name.eq_ignore_ascii_case(b"content-length") {
            let Some(n) = parse_u64(trim(v)) else {
                return reject(400, r);
            };
            if content_length.is_some_and(|old| old != n) {
                return reject(400, r);
            }
            content_length = Some(n);
        } else if name.eq_ignore_ascii_case(b"transfer-encoding") {
            transfer_encoding = true;
        } else if keep_field(&mut r, name, v, &mut spares).is_err() {
            return reject(400, r);
        }
    }
    // RFC 9112 §3.2: a 1.1 request without exactly one Host is a 400.
    if (minor_version >= 1 && host_count == 0) || host_count > 1 {
        return reject(400, r);
    }
    // RFC 9112 §6.1: both framings at once is a smuggling vector; refuse.
    // A transfer coding on a 1.0 request cannot be framed either.
    if transfer_encoding && (content_length.is_some() || minor_version == 0) {
        return reject(400, r);
    }
    r.body = if transfer_encoding {
        BodyFraming::Chunked
    } else {
        match content_length {
            Some(0) | None => BodyFraming::None,
            Some(n) => BodyFraming::Length(n),
        }
    };
    r.keep_alive = if minor_version >= 1 {
        !conn_close
    } else {
        conn_keep_alive && !conn_close
    };
    match spare {
        Some(mut b) => {
            *b = r;
            Parsed::Complete(b)
        }
        None => Parsed::Complete(Box::new(r)),
    }
}

/// The last request's allocations for the fields it kept, to be refilled
/// by the next request's (none for a request built from fields).
#[derive(Default)]
struct Spares {
    accept: Option<Vec<u8>>,
    accept_encoding: Option<Vec<u8>>,
    user_agent: Option<Vec<u8>>,
    referer: Option<Vec<u8>>,
    authorization: Option<Vec<u8>>,
}

impl Spares {
    fn of(r: &mut Request) -> Spares {
        Spares {
            accept: r.accept.take(),
            accept_encoding: r.accept_encoding.take(),
            user_agent: r.user_agent.take(),
            referer: r.referer.take(),
            authorization: r.authorization.take(),
        }
    }
}

/// Keeps a field the core acts on (conditionals, ranges, negotiation,
/// the log's, credentials); any other is passed over. `Err`: a field that
/// must not be repeated was (`Range`, `Authorization`): a 400.
fn keep_field(r: &mut Request, name: &[u8], v: &[u8], spares: &mut Spares) -> Result<(), ()> {
    let is = |n: &[u8]| name.eq_ignore_ascii_case(n);
    if is(b"if-match") {
        append_list(&mut r.if_match, v);
    } else if is(b"if-none-match") {
        append_list(&mut r.if_none_match, v);
    } else if is(b"if-modified-since") {
        r.if_modified_since = Some(v.to_vec());
    } else if is(b"if-unmodified-since") {
        r.if_unmodified_since = Some(v.to_vec());
    } else if is(b"range") {
        if r.range.is_some() {
            return Err(());
        }
        r.range = Some(v.to_vec());
    } else if is(b"if-range") {
        r.if_range = Some(v.to_vec());
    } else if is(b"accept-encoding") {
        append_list_reusing(&mut r.accept_encoding, &mut spares.accept_encoding, v);
    } else if is(b"accept") {
        append_list_reusing(&mut r.accept, &mut spares.accept, v);
    } else if is(b"referer") {
        r.referer = Some(refill(spares.referer.take(), v));
    } else if is(b"authorization") {
        // Not a list: two are a malformed request (RFC 9110 §5.3).
        if r.authorization.is_some() {
            return Err(());
        }
        r.authorization = Some(refill(spares.authorization.take(), v));
    } else if is(b"user-agent") {
        r.user_agent = Some(refill(spares.user_agent.take(), v));
    }
    Ok(())
}

/// Why a request given as fields cannot be served: answered with a stream
/// error (RFC 9113 §8.1.1), never with a response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Malformed {
    /// A method or target with bytes the core does not take (control
    /// bytes, spaces, non-ASCII), or an empty one.
    Target,
    /// A field the core keeps that must not be repeated (`Range`,
    /// `Authorization`), or a value with CR, LF or NUL.
    Field,
    /// Its method, target and fields add up to more than
    /// [`crate::limits::DEFAULT_MAX_HEADER_BYTES`].
    TooLarge,
}

/// A request that arrived as fields rather than HTTP/1.1 text (an HTTP/2
/// stream's, decoded by HPACK and checked by the HTTP/2 layer; later an
/// HTTP/3 one's): the same [`Request`] the HTTP/1.1 parser makes, read as
/// HTTP/1.1 (`minor_version` 1, no body, no keep-alive: the stream ends
/// with its response), with `authority` standing for `Host` (RFC 9113
/// §8.3.1) and a `host` field kept only without it.
pub fn from_fields<'a>(
    method: &[u8],
    target: &[u8],
    authority: Option<&[u8]>,
    fields: impl IntoIterator<Item = (&'a [u8], &'a [u8])>,
) -> Result<Box<Request>, Malformed> {
    let visible = |b: &[u8]| !b.is_empty() && b.iter().all(|&c| c > b' ' && c < 0x7f);
    if !visible(method) || !visible(target) {
        return Err(Malformed::Target);
    }
    let clean = |v: &[u8]| !v.iter().any(|&c| c == b'\r' || c == b'\n' || c == 0);
    let method = match method {
        b"GET" => Method::Get,
        b"HEAD" => Method::Head,
        m => Method::Other(String::from_utf8_lossy(m).into_owned()),
    };
    let mut size = target.len();
    let mut r = Box::new(Request::bare(method, target.to_vec(), 1, 0));
    if let Some(a) = authority {
        if !clean(a) {
            return Err(Malformed::Field);
        }
        r.host = Some(trim(a).to_vec());
    }
    let mut spares = Spares::default();
    for (name, value) in fields {
        if !clean(value) || !visible(name) || name.contains(&b':') {
            return Err(Malformed::Field);
        }
        size += name.len() + value.len() + 4;
        if size > crate::limits::DEFAULT_MAX_HEADER_BYTES {
            return Err(Malformed::TooLarge);
        }
        if name.eq_ignore_ascii_case(b"host") {
            if authority.is_none() {
                r.host = Some(trim(value).to_vec());
            }
            continue;
        }
        keep_field(&mut r, name, trim(value), &mut spares).map_err(|()| Malformed::Field)?;
    }
    Ok(r)
}

/// `v` in `buf`'s allocation (a new one without it).
fn refill(buf: Option<Vec<u8>>, v: &[u8]) -> Vec<u8> {
    let mut b = buf.unwrap_or_default();
    b.clear();
    b.extend_from_slice(v);
    b
}

/// As [`append_list`], the first value going into `spare`'s allocation.
fn append_list_reusing(slot: &mut Option<Vec<u8>>, spare: &mut Option<Vec<u8>>, v: &[u8]) {
    match slot {
        Some(_) => append_list(slot, v),
        None => *slot = Some(refill(spare.take(), v)),
    }
}

fn append_list(slot: &mut Option<Vec<u8>>, v: &[u8]) {
    match slot {
        Some(old) => {
            old.push(b',');
            old.extend_from_slice(v);
        }
        None => *slot = Some(v.to_vec()),
    }
}

pub(crate) fn trim(mut v: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = v {
        v = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = v {
        v = rest;
    }
    v
}

/// Parses a run of ASCII digits (nothing else) without overflow.
pub(crate) fn parse_u64(v: &[u8]) -> Option<u64> {
    if v.is_empty() || v.len() > 19 {
        return None;
    }
    let mut n: u64 = 0;
    for &b in v {
        if !b.is_ascii_digit() {
            return None;
        }
        n = n.checked_mul(10)?.checked_add(u64::from(b - b'0'))?;
    }
    Some(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> Parsed {
        parse(s.as_bytes(), 4096, 8192)
    }

    fn status(s: &str) -> u16 {
        match p(s) {
            Parsed::Rejected(r) => r.status,
            other => panic!("{s:?} gave {other:?}"),
        }
    }

    #[test]
    fn basic() {
        let Parsed::Complete(r) = p("GET /x HTTP/1.1\r\nHost: a\r\n\r\nNEXT") else {
            panic!()
        };
        assert_eq!(r.method, Method::Get);
        assert_eq!(r.target, b"/x");
        assert!(r.keep_alive);
        assert_eq!(r.head_len, 28);
        let Parsed::Complete(r) = p("GET / HTTP/1.0\r\n\r\n") else {
            panic!()
        };
        assert!(!r.keep_alive);
        let Parsed::Complete(r) = p("GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n") else {
            panic!()
        };
        assert!(r.keep_alive);
        let Parsed::Complete(r) = p("GET / HTTP/1.1\r\nHost: a\r\nConnection: x, close\r\n\r\n")
        else {
            panic!()
        };
        assert!(!r.keep_alive);
        assert!(matches!(
            p("GET / HTTP/1.1\r\nHost: a\r\n"),
            Parsed::Partial
        ));
    }

    #[test]
    fn rejections() {
        assert_eq!(status("GET / HTTP/1.1\r\n\r\n"), 400);
        assert_eq!(status("GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n"), 400);
        assert_eq!(
            status("GET / HTTP/1.1\r\nHost: a\r\nContent-Length: x\r\n\r\n"),
            400
        );
        assert_eq!(
            status("GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n"),
            400
        );
        assert_eq!(
            status("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n"),
            400
        );
        assert_eq!(status("GET / HTTP/3.0\r\n\r\n"), 505);
        assert_eq!(status("GET  / HTTP/1.1\r\n\r\n"), 400);
        assert_eq!(status("\x01GET / HTTP/1.1\r\n\r\n"), 400);
        let long = format!("GET /{} HTTP/1.1\r\n", "a".repeat(5000));
        assert_eq!(status(&long), 414);
        let big = format!("GET / HTTP/1.1\r\nHost: a\r\nX: {}\r\n", "a".repeat(9000));
        assert_eq!(status(&big), 431);
        let many: String = (0..100).map(|i| format!("X{i}: y\r\n")).collect();
        assert_eq!(
            status(&format!("GET / HTTP/1.1\r\nHost: a\r\n{many}\r\n")),
            431
        );
    }

    #[test]
    fn body_framing() {
        let Parsed::Complete(r) = p("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\n")
        else {
            panic!()
        };
        assert_eq!(r.body, BodyFraming::Length(5));
        let Parsed::Complete(r) =
            p("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n")
        else {
            panic!()
        };
        assert_eq!(r.body, BodyFraming::Chunked);
    }

    #[test]
    fn a_reused_request_keeps_nothing_of_the_last_one() {
        let first = b"GET /a/long/first/target HTTP/1.1\r\nHost: x\r\nRange: bytes=0-1\r\nUser-Agent: u\r\nIf-None-Match: \"e\"\r\n\r\n";
        let second = b"HEAD /b HTTP/1.0\r\n\r\n";
        let Parsed::Complete(a) = parse(first, 4096, 8192) else {
            panic!()
        };
        let (box_ptr, target_cap) = (&*a as *const Request, a.target.capacity());
        let mut spare = Some(a);
        let Parsed::Complete(b) = parse_reusing(second, 4096, 8192, &mut spare) else {
            panic!()
        };
        assert!(spare.is_none());
        assert_eq!(&*b as *const Request, box_ptr, "the allocation is reused");
        assert_eq!(b.target.capacity(), target_cap, "and the target's");
        let Parsed::Complete(fresh) = parse(second, 4096, 8192) else {
            panic!()
        };
        assert_eq!(format!("{b:?}"), format!("{fresh:?}"));

        // An incomplete head leaves the spare where it was.
        let mut spare = Some(b);
        assert!(matches!(
            parse_reusing(b"GET / HTTP/1.1\r\n", 4096, 8192, &mut spare),
            Parsed::Partial
        ));
        assert!(spare.is_some());
    }
}
