//! A request that came as fields on a stream of its own: an HTTP/2 header
//! block or an HTTP/3 field section, checked by the rules the two share
//! (RFC 9113 §8.2 and §8.3.1; RFC 9114 §4.2, §4.3.1 and §4.1.2 repeat
//! them: lowercase names, no connection-specific fields, `te` only as
//! `trailers`, the pseudo-header fields first and once each, CONNECT
//! apart) and turned into a [`Request`], which `h2::Request` (stream ids
//! of 31 bits) and `h3::Request` (QUIC's, 62 bits) name.

pub(crate) use crate::fields::Packed;

/// RFC 9218's default urgency, and the lowest priority (highest value).
const DEFAULT_URGENCY: u8 = 3;
const MAX_URGENCY: u8 = 7;

/// A request, its fields decoded and checked (RFC 9113 §8.3.1, §8.2;
/// RFC 9114 §4.3.1, §4.2), on a stream whose id is an `Id`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request<Id> {
    pub stream_id: Id,
    /// No body follows. A body is read and dropped by the connection: one
    /// up to `limits::MAX_DISCARD_BODY` before the request is handed out
    /// (then this is true), a larger one while the response goes out
    /// (HTTP/2 resets the stream with NO_ERROR, HTTP/3 sends STOP_SENDING
    /// with H3_NO_ERROR, when the response ends first).
    pub end_stream: bool,
    /// RFC 9218 urgency from the `priority` field, 0 (first) to 7.
    pub urgency: u8,
    /// The block's fields as decoded, checked: pseudo-header fields
    /// first (one each of `:method`, `:scheme` and `:path`, `:authority`
    /// maybe), then the regular fields in order.
    fields: Packed,
}

impl<Id> Request<Id> {
    /// The core's request for this stream (the same one an HTTP/1.1 head
    /// makes; [`crate::request::from_fields`]). `Err`: a request the core
    /// cannot take, which resets the stream (§8.1.1).
    pub fn to_core(&self) -> Result<Box<crate::request::Request>, crate::request::Malformed> {
        // The pseudo-header fields in one pass, as bytes.
        let (mut method, mut path, mut authority) = (&[][..], &[][..], None);
        let mut fields = self.fields.iter().peekable();
        while let Some((n, v)) = fields.next_if(|(n, _)| n.first() == Some(&b':')) {
            match n {
                b":method" => method = v,
                b":path" => path = v,
                b":authority" => authority = Some(v),
                _ => {}
            }
        }
        crate::request::from_fields(method, path, authority, fields)
    }

    /// A pseudo-header field's value (visible ASCII, checked).
    fn pseudo(&self, name: &[u8]) -> Option<&str> {
        let (_, v) = self
            .fields
            .iter()
            .take_while(|(n, _)| n.first() == Some(&b':'))
            .find(|(n, _)| *n == name)?;
        Some(std::str::from_utf8(v).expect("checked as ASCII"))
    }

    pub fn method(&self) -> &str {
        self.pseudo(b":method").expect("checked present")
    }

    pub fn scheme(&self) -> &str {
        self.pseudo(b":scheme").expect("checked present")
    }

    /// Visible ASCII, starting with `/` (or `*` for OPTIONS).
    pub fn path(&self) -> &str {
        self.pseudo(b":path").expect("checked present")
    }

    pub fn authority(&self) -> Option<&str> {
        self.pseudo(b":authority")
    }

    /// The regular fields in order: names lowercase tokens, values free
    /// of NUL, CR, LF and surrounding whitespace. `cookie` may come in
    /// several fields (§8.2.3): join them with "; ".
    pub fn headers(&self) -> impl Iterator<Item = (&[u8], &[u8])> + '_ {
        self.fields
            .iter()
            .skip_while(|(n, _)| n.first() == Some(&b':'))
    }

    /// The first field named `name` (lowercase), if any.
    pub fn header(&self, name: &str) -> Option<&[u8]> {
        self.headers()
            .find(|(n, _)| *n == name.as_bytes())
            .map(|(_, v)| v)
    }

    /// Whether it names its authority as RFC 9114 §4.3.1 asks of an
    /// `http` or `https` request: a non-empty `:authority` or `host`
    /// (HTTP/3's rule alone: RFC 9113 §8.3.1 only asks clients to send
    /// `:authority`, and HTTP/2 requests without it are served).
    pub(crate) fn names_authority(&self) -> bool {
        let given = |v: Option<&[u8]>| v.is_some_and(|v| !v.is_empty());
        !matches!(self.scheme(), "http" | "https")
            || given(self.authority().map(str::as_bytes))
            || given(self.header("host"))
    }
}

/// Why a request's fields are not a request we serve.
pub(crate) enum Reject {
    /// Malformed (RFC 9113 §8.1.1, RFC 9114 §4.1.2): a stream error,
    /// HTTP/2's PROTOCOL_ERROR, HTTP/3's H3_MESSAGE_ERROR.
    Malformed,
    /// CONNECT (RFC 9113 §8.5, RFC 9114 §4.4): answered 405.
    Connect,
}

/// Connection-specific fields, which both forbid (RFC 9113 §8.2.2,
/// RFC 9114 §4.2).
const CONNECTION_SPECIFIC: [&[u8]; 5] = [
    b"connection",
    b"keep-alive",
    b"proxy-connection",
    b"transfer-encoding",
    b"upgrade",
];

/// Checks a request's fields (RFC 9113 §8.3.1, §8.2; RFC 9114 §4.3.1,
/// §4.2) and builds it, in one allocation; also returns its
/// content-length, if it has one.
pub(crate) fn request<Id>(
    stream_id: Id,
    fields: &Packed,
    end_stream: bool,
) -> Result<(Request<Id>, Option<u64>), Reject> {
    let (mut method, mut scheme, mut authority, mut path) = (None, None, None, None);
    let mut regular = 0usize;
    let mut host = None;
    let mut content_length: Option<u64> = None;
    let mut urgency = DEFAULT_URGENCY;
    for (name, value) in fields.iter() {
        if !valid_value(value) {
            return Err(Reject::Malformed);
        }
        if name.first() == Some(&b':') {
            if regular > 0 {
                // §8.3: pseudo-header fields come first.
                return Err(Reject::Malformed);
            }
            let slot = match name {
                b":method" => &mut method,
                b":scheme" => &mut scheme,
                b":authority" => &mut authority,
                b":path" => &mut path,
                _ => return Err(Reject::Malformed),
            };
            if slot.is_some() || !ascii(value) {
                return Err(Reject::Malformed);
            }
            *slot = Some(value);
            continue;
        }
        regular += 1;
        if name.is_empty() || !name.iter().all(|&b| is_token(b) && !b.is_ascii_uppercase()) {
            return Err(Reject::Malformed);
        }
        if CONNECTION_SPECIFIC.contains(&name)
            || (name == b"te" && !value.eq_ignore_ascii_case(b"trailers"))
        {
            return Err(Reject::Malformed);
        }
        match name {
            b"content-length" => {
                let n = parse_content_length(value).ok_or(Reject::Malformed)?;
                if content_length.is_some_and(|c| c != n) {
                    return Err(Reject::Malformed);
                }
                content_length = Some(n);
            }
            b"priority" => urgency = parse_urgency(value).unwrap_or(urgency),
            b"host" if host.is_none() => host = Some(value),
            _ => {}
        }
    }
    let method = method.ok_or(Reject::Malformed)?;
    // §8.3.1: a Host that names another authority than :authority.
    if let (Some(a), Some(h)) = (authority, host) {
        if !a.eq_ignore_ascii_case(h) {
            return Err(Reject::Malformed);
        }
    }
    if method == b"CONNECT" {
        return Err(Reject::Connect);
    }
    let (Some(_), Some(path)) = (scheme, path) else {
        return Err(Reject::Malformed);
    };
    if !(path.starts_with(b"/") || (path == b"*" && method == b"OPTIONS")) {
        return Err(Reject::Malformed);
    }
    if method.is_empty() || !method.iter().all(|&b| is_token(b)) {
        return Err(Reject::Malformed);
    }
    // The fields as they are, in one allocation and one copy.
    let req = Request {
        stream_id,
        end_stream,
        urgency,
        fields: fields.clone(),
    };
    Ok((req, content_length))
}

/// A `content-length` value: digits only, within 64 bits.
fn parse_content_length(value: &[u8]) -> Option<u64> {
    std::str::from_utf8(value)
        .ok()
        .filter(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|s| s.parse::<u64>().ok())
}

/// A pseudo-header's value: visible ASCII only.
fn ascii(value: &[u8]) -> bool {
    value.iter().all(|b| (0x21..0x7f).contains(b))
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
    TCHAR[usize::from(b)]
}

/// [`is_token`] by byte: one load per byte of each name.
const TCHAR: [bool; 256] = {
    let mut t = [false; 256];
    let mut i = 0;
    while i < 256 {
        let b = i as u8;
        t[i] = b.is_ascii_alphanumeric()
            || matches!(
                b,
                b'!' | b'#'
                    | b'$'
                    | b'%'
                    | b'&'
                    | b'\''
                    | b'*'
                    | b'+'
                    | b'-'
                    | b'.'
                    | b'^'
                    | b'_'
                    | b'`'
                    | b'|'
                    | b'~'
            );
        i += 1;
    }
    t
};

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

#[cfg(test)]
mod tests {
    #[test]
    fn the_token_table_is_rfc_9110s_tchar() {
        for b in 0..=255u8 {
            let tchar = b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b);
            assert_eq!(super::is_token(b), tchar, "{b}");
        }
    }
}
