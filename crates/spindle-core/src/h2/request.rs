//! A request's header block, checked (RFC 9113 §8.3.1, §8.2) and turned
//! into a [`Request`].

/// RFC 9218's default urgency, and the lowest priority (highest value).
const DEFAULT_URGENCY: u8 = 3;
const MAX_URGENCY: u8 = 7;

/// A request, its header block decoded and checked (§8.3.1, §8.2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub stream_id: u32,
    pub method: String,
    pub scheme: String,
    pub authority: Option<String>,
    /// Visible ASCII, starting with `/` (or `*` for OPTIONS).
    pub path: String,
    /// The regular fields in order: names lowercase tokens, values free
    /// of NUL, CR, LF and surrounding whitespace. `cookie` may come in
    /// several fields (§8.2.3): join them with "; ".
    pub headers: Vec<(String, Vec<u8>)>,
    /// No body follows. A body is read and dropped here: one up to
    /// `limits::MAX_DISCARD_BODY` before the request is handed out (then
    /// this is true), a larger one while the response goes out (reset
    /// with NO_ERROR when the response ends first).
    pub end_stream: bool,
    /// RFC 9218 urgency from the `priority` field, 0 (first) to 7.
    pub urgency: u8,
}

impl Request {
    /// The core's request for this stream (the same one an HTTP/1.1 head
    /// makes; [`crate::request::from_fields`]). `Err`: a request the core
    /// cannot take, which resets the stream (§8.1.1).
    pub fn to_core(&self) -> Result<Box<crate::request::Request>, crate::request::Malformed> {
        crate::request::from_fields(
            self.method.as_bytes(),
            self.path.as_bytes(),
            self.authority.as_deref().map(str::as_bytes),
            self.headers.iter().map(|(n, v)| (n.as_bytes(), &v[..])),
        )
    }

    /// The first field named `name` (lowercase), if any.
    pub fn header(&self, name: &str) -> Option<&[u8]> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| &v[..])
    }
}

/// Why a request's header block is not a request we serve.
pub(super) enum Reject {
    /// §8.1.1: a stream error, PROTOCOL_ERROR.
    Malformed,
    /// CONNECT (§8.5): answered 405.
    Connect,
}

/// Fields HTTP/2 forbids (§8.2.2).
const CONNECTION_SPECIFIC: [&[u8]; 5] = [
    b"connection",
    b"keep-alive",
    b"proxy-connection",
    b"transfer-encoding",
    b"upgrade",
];

/// Checks a request's fields (§8.3.1, §8.2) and builds it; also returns
/// its content-length, if it has one.
pub(super) fn request(
    stream_id: u32,
    fields: Vec<(Vec<u8>, Vec<u8>)>,
    end_stream: bool,
) -> Result<(Request, Option<u64>), Reject> {
    let (mut method, mut scheme, mut authority, mut path) = (None, None, None, None);
    let mut headers = Vec::new();
    let mut content_length: Option<u64> = None;
    let mut urgency = DEFAULT_URGENCY;
    for (name, value) in fields {
        if !valid_value(&value) {
            return Err(Reject::Malformed);
        }
        if name.first() == Some(&b':') {
            if !headers.is_empty() {
                // §8.3: pseudo-header fields come first.
                return Err(Reject::Malformed);
            }
            let slot = match &name[..] {
                b":method" => &mut method,
                b":scheme" => &mut scheme,
                b":authority" => &mut authority,
                b":path" => &mut path,
                _ => return Err(Reject::Malformed),
            };
            if slot.is_some() {
                return Err(Reject::Malformed);
            }
            *slot = Some(ascii(value)?);
            continue;
        }
        if name.is_empty() || !name.iter().all(|&b| is_token(b) && !b.is_ascii_uppercase()) {
            return Err(Reject::Malformed);
        }
        if CONNECTION_SPECIFIC.contains(&&name[..])
            || (name == b"te" && !value.eq_ignore_ascii_case(b"trailers"))
        {
            return Err(Reject::Malformed);
        }
        if name == b"content-length" {
            let n = std::str::from_utf8(&value)
                .ok()
                .filter(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
                .and_then(|s| s.parse::<u64>().ok())
                .ok_or(Reject::Malformed)?;
            if content_length.is_some_and(|c| c != n) {
                return Err(Reject::Malformed);
            }
            content_length = Some(n);
        }
        if name == b"priority" {
            urgency = parse_urgency(&value).unwrap_or(urgency);
        }
        let name = String::from_utf8(name).map_err(|_| Reject::Malformed)?;
        headers.push((name, value));
    }
    let method = method.ok_or(Reject::Malformed)?;
    // §8.3.1: a Host that names another authority than :authority.
    let host = headers.iter().find(|(n, _)| n == "host").map(|(_, v)| v);
    if let (Some(a), Some(h)) = (&authority, host) {
        if !a.as_bytes().eq_ignore_ascii_case(h) {
            return Err(Reject::Malformed);
        }
    }
    if method == "CONNECT" {
        return Err(Reject::Connect);
    }
    let (Some(scheme), Some(path)) = (scheme, path) else {
        return Err(Reject::Malformed);
    };
    if !(path.starts_with('/') || (path == "*" && method == "OPTIONS")) {
        return Err(Reject::Malformed);
    }
    if method.is_empty() || !method.bytes().all(is_token) {
        return Err(Reject::Malformed);
    }
    Ok((
        Request {
            stream_id,
            method,
            scheme,
            authority,
            path,
            headers,
            end_stream,
            urgency,
        },
        content_length,
    ))
}

/// A pseudo-header's value: visible ASCII only.
fn ascii(value: Vec<u8>) -> Result<String, Reject> {
    if value.iter().all(|b| (0x21..0x7f).contains(b)) {
        String::from_utf8(value).map_err(|_| Reject::Malformed)
    } else {
        Err(Reject::Malformed)
    }
}

/// §8.2.1: no NUL, CR or LF, and no whitespace at either end.
fn valid_value(v: &[u8]) -> bool {
    let ws = |b: &u8| *b == b' ' || *b == b'\t';
    !v.iter().any(|&b| b == 0 || b == b'\r' || b == b'\n')
        && !v.first().is_some_and(ws)
        && !v.last().is_some_and(ws)
}

/// RFC 9110 §5.6.2 tchar.
fn is_token(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// RFC 9218 §4.1's `u` parameter from a `priority` field (a structured
/// dictionary; other members ignored).
fn parse_urgency(v: &[u8]) -> Option<u8> {
    let s = std::str::from_utf8(v).ok()?;
    s.split(',').find_map(|m| {
        let m = m.trim();
        let u = m.strip_prefix("u=")?;
        match u.as_bytes() {
            [d] if d.is_ascii_digit() && d - b'0' <= MAX_URGENCY => Some(d - b'0'),
            _ => None,
        }
    })
}
