//! Deciding the response: status, header block, and which bytes of the
//! file follow it.

use std::borrow::Cow;

use crate::date;
use crate::encoding::Encoding;
pub use crate::fields::Fields;
pub use crate::file::{FileKind, FileMeta, Version};
use crate::range::{etag_list_matches, if_range_matches};
pub use crate::range::{parse_range, RangeResult};
use crate::request::{Method, Request};
use crate::rules::Applied;

/// A response, ready to transmit: its head (`status` and `fields`, in no
/// protocol's syntax), then `front`, then `file` (a range of the file the
/// driver opened for this request), if any.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    pub status: u16,
    /// The header fields, in order. An HTTP/2 stream sends them as HEADERS
    /// (HPACK); for HTTP/1.1 they are already written out in `front`.
    pub fields: Fields,
    /// The bytes that go first: for HTTP/1.1 the head as its serializer
    /// wrote it ([`Fields::write_http1`]), then any in-memory body (an
    /// error page, a listing, a small file's bytes appended by the
    /// driver); for an HTTP/2 stream the in-memory body alone. In a
    /// continuation ([`Response::take_next_part`]), the part's own bytes.
    pub front: Vec<u8>,
    /// `(offset, length)` of the opened file to send after `front`.
    pub file: Option<(u64, u64)>,
    /// The version of the file that the head describes (its `ETag` and
    /// `Last-Modified`), set whenever `file` is. The driver checks that the
    /// file still has it (or has only grown) before it hands the body's
    /// last byte to the socket, so that a file changed in place
    /// mid-response ends in a short body, never in other bytes under the
    /// promised length.
    pub version: Option<Version>,
    /// Whether the connection stays open after this response.
    pub keep_alive: bool,
    /// Body bytes this response carries (in `front`, from the file, and in
    /// `parts`), for the access log.
    pub body_len: u64,
    /// What follows `front` and `file`, in order: the further parts of a
    /// `multipart/byteranges` body (empty for every other response). The
    /// driver sends each part's bytes, then its range of the same file;
    /// see [`Response::take_next_part`].
    pub parts: Vec<Part>,
    /// A continuation made by [`Response::take_next_part`]: bytes of the
    /// response went out before it, so a failure now must drop the
    /// connection, never answer in the response's place.
    pub continued: bool,
}

impl Response {
    /// A response whose head is `head` and whose body, if any, is `body`
    /// in memory (an error page, a 304, a listing): no file, no parts.
    fn in_memory(head: Head, body: &[u8], ctx: &Ctx) -> Response {
        let send = !ctx.head_only;
        let (status, fields, mut front) = head.finish(ctx, if send { body.len() } else { 0 });
        if send {
            front.extend_from_slice(body);
        }
        Response {
            status,
            fields,
            front,
            file: None,
            version: None,
            keep_alive: ctx.keep_alive,
            body_len: if send { body.len() as u64 } else { 0 },
            parts: Vec::new(),
            continued: false,
        }
    }

    /// A response whose body is `file` of the opened file (none for HEAD).
    fn of_file(head: Head, file: Option<(u64, u64)>, meta: &FileMeta, ctx: &Ctx) -> Response {
        let (status, fields, front) = head.finish(ctx, 0);
        Response {
            status,
            fields,
            front,
            file,
            version: file.map(|_| meta.version()),
            keep_alive: ctx.keep_alive,
            body_len: file.map_or(0, |f| f.1),
            parts: Vec::new(),
            continued: false,
        }
    }
}

/// One more piece of a response body: bytes from memory, then a range of
/// the response's file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Part {
    pub prefix: Vec<u8>,
    pub file: Option<(u64, u64)>,
}

impl Response {
    /// Once `front` and `file` are sent: the rest of the body as a response
    /// of its own (the next part's bytes as its `front`, its range as its
    /// `file`, the parts after it), or `None` when the body is complete.
    /// The driver sends it on the same connection and file, and logs and
    /// reports the response once, at the end of the last part.
    pub fn take_next_part(&mut self) -> Option<Response> {
        if self.parts.is_empty() {
            return None;
        }
        let p = self.parts.remove(0);
        Some(Response {
            status: self.status,
            fields: Fields::default(),
            front: p.prefix,
            file: p.file,
            version: if p.file.is_some() { self.version } else { None },
            keep_alive: self.keep_alive,
            body_len: self.body_len,
            parts: std::mem::take(&mut self.parts),
            continued: true,
        })
    }
}

/// Per-response context that does not come from the request itself.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ctx<'a> {
    pub server: &'a str,
    /// Configured header fields for every response (checked when loaded).
    pub extra: &'a Fields,
    pub keep_alive: bool,
    /// Send `Connection: keep-alive` (HTTP/1.0 clients need it).
    pub announce_keep_alive: bool,
    pub head_only: bool,
    /// Mixed into multipart boundaries (`SessionConfig::boundary_seed`).
    pub seed: u64,
    /// The charset named on text types (`SessionConfig::charset`).
    pub charset: &'a str,
    /// The response goes on an HTTP/2 stream: its head goes as HEADERS
    /// from `fields`, never written out as HTTP/1.1, and it carries no
    /// connection-specific field (RFC 9113 §8.2.2).
    pub http2: bool,
}

/// A response head being built: the status and its fields.
struct Head {
    status: u16,
    fields: Fields,
}

impl Head {
    fn new(status: u16, ctx: &Ctx) -> Head {
        let mut fields = Fields::new();
        fields.push("Server", ctx.server.as_bytes());
        date::with_http_date(|d| fields.push("Date", d.as_bytes()));
        Head { status, fields }
    }

    fn header(&mut self, name: &str, value: &str) -> &mut Head {
        self.fields.push(name, value.as_bytes());
        self
    }

    fn header_u64(&mut self, name: &str, value: u64) -> &mut Head {
        self.fields.push_u64(name, value);
        self
    }

    /// The configured fields and, for HTTP/1.1, `Connection`; then the
    /// status, the fields, and the bytes that go first (the HTTP/1.1 head,
    /// or nothing for HTTP/2), with room for `body` more.
    fn finish(mut self, ctx: &Ctx, body: usize) -> (u16, Fields, Vec<u8>) {
        self.fields.extend(ctx.extra);
        if ctx.http2 {
            return (self.status, self.fields, Vec::with_capacity(body));
        }
        if !ctx.keep_alive {
            self.fields.push("Connection", b"close");
        } else if ctx.announce_keep_alive {
            self.fields.push("Connection", b"keep-alive");
        }
        let mut front = Vec::with_capacity(HEAD_CAPACITY + body);
        self.fields.write_http1(self.status, &mut front);
        (self.status, self.fields, front)
    }
}

/// Room for a typical HTTP/1.1 head, so that writing one allocates once
/// (a small file's body appended by the driver may grow it once more).
const HEAD_CAPACITY: usize = 384;

/// Appends the decimal digits of `n`.
pub(crate) fn push_u64(buf: &mut Vec<u8>, mut n: u64) {
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    buf.extend_from_slice(&digits[i..]);
}

/// Hands the lower-case hex digits of `n` to `put`.
fn hex(mut n: u64, put: impl FnOnce(&str)) {
    let mut digits = [0u8; 16];
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = b"0123456789abcdef"[(n & 15) as usize];
        n >>= 4;
        if n == 0 {
            break;
        }
    }
    // Hex digits are ASCII.
    put(std::str::from_utf8(&digits[i..]).expect("ascii"));
}

/// The reason phrase for every status spindle sends.
pub fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        206 => "Partial Content",
        301 => "Moved Permanently",
        302 => "Found",
        304 => "Not Modified",
        307 => "Temporary Redirect",
        308 => "Permanent Redirect",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        410 => "Gone",
        412 => "Precondition Failed",
        414 => "URI Too Long",
        416 => "Range Not Satisfiable",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        503 => "Service Unavailable",
        505 => "HTTP Version Not Supported",
        _ => "Unknown",
    }
}

/// The `Cache-Control` and header fields of the matching rules.
fn rule_headers(h: &mut Head, rules: &Applied) {
    if let Some(c) = rules.cache_control {
        h.header("Cache-Control", c);
    }
    for f in &rules.headers {
        h.fields.extend(f);
    }
}

/// A text type's `charset=utf-8` replaced by the configured charset
/// (none when it is empty).
fn with_charset(t: Cow<'static, str>, charset: &str) -> Cow<'static, str> {
    if charset == "utf-8" {
        return t;
    }
    match t.strip_suffix("; charset=utf-8") {
        Some(base) if charset.is_empty() => Cow::Owned(base.to_string()),
        Some(base) => Cow::Owned(format!("{base}; charset={charset}")),
        None => t,
    }
}

/// An error status answered with a configured page (a file beneath the
/// root): its bytes, its type, the error's status; no validators, no
/// ranges (as nginx's `error_page`).
pub(crate) fn error_page(
    status: u16,
    meta: &FileMeta,
    rel_path: &[u8],
    ctx: &Ctx,
    extra: &[(&str, &str)],
) -> Response {
    let ctype = with_charset(content_type(rel_path), ctx.charset);
    let mut h = Head::new(status, ctx);
    h.header("Content-Type", &ctype)
        .header_u64("Content-Length", meta.size);
    for (n, v) in extra {
        h.header(n, v);
    }
    let send_body = !ctx.head_only && meta.size > 0;
    Response::of_file(h, send_body.then_some((0, meta.size)), meta, ctx)
}

/// An error (or redirect) response with a small HTML body.
pub(crate) fn error(status: u16, ctx: &Ctx, extra: &[(&str, &str)]) -> Response {
    let body = format!(
        "<html>\r\n<head><title>{s} {r}</title></head>\r\n<body>\r\n<center><h1>{s} {r}</h1></center>\r\n<hr><center>{srv}</center>\r\n</body>\r\n</html>\r\n",
        s = status,
        r = reason(status),
        srv = ctx.server
    );
    let mut h = Head::new(status, ctx);
    h.header("Content-Type", "text/html; charset=utf-8")
        .header_u64("Content-Length", body.len() as u64);
    for (n, v) in extra {
        h.header(n, v);
    }
    Response::in_memory(h, body.as_bytes(), ctx)
}

/// A 200 whose body is `body`, from memory, as `text/plain` (an ACME
/// HTTP-01 answer), never cached.
pub(crate) fn plain_text(body: &str, ctx: &Ctx) -> Response {
    let mut h = Head::new(200, ctx);
    h.header("Content-Type", "text/plain")
        .header_u64("Content-Length", body.len() as u64)
        .header("Cache-Control", "no-store");
    Response::in_memory(h, body.as_bytes(), ctx)
}

/// The strong entity tag of a file version: inode, size and mtime (ns).
pub fn etag(meta: &FileMeta) -> String {
    Tag::of(meta, None).as_str().to_string()
}

/// An entity tag on the stack (the one each file response computes): a
/// quote, four hex numbers of at most 16 digits with their separators, a
/// coding's token and a quote fit [`Tag::CAP`].
struct Tag {
    buf: [u8; Tag::CAP],
    len: usize,
}

impl Tag {
    const CAP: usize = 80;

    /// [`etag`]'s tag, with `-` and the coding's token before the closing
    /// quote for a precompressed sidecar: distinct per coding even if two
    /// sidecars had the same inode, size and time (RFC 9110 §8.8.3: an
    /// entity tag names one representation).
    fn of(meta: &FileMeta, encoding: Option<Encoding>) -> Tag {
        let mut tag = Tag {
            buf: [0; Tag::CAP],
            len: 0,
        };
        tag.push("\"");
        hex(meta.ino, |d| tag.push(d));
        tag.push("-");
        hex(meta.size, |d| tag.push(d));
        tag.push("-");
        // As `{:x}` of an i64 would: the two's-complement bits.
        hex(meta.mtime_sec as u64, |d| tag.push(d));
        tag.push(".");
        hex(u64::from(meta.mtime_nsec), |d| tag.push(d));
        if let Some(e) = encoding {
            tag.push("-");
            tag.push(e.token());
        }
        tag.push("\"");
        tag
    }

    fn push(&mut self, s: &str) {
        self.buf[self.len..self.len + s.len()].copy_from_slice(s.as_bytes());
        self.len += s.len();
    }

    fn as_str(&self) -> &str {
        std::str::from_utf8(&self.buf[..self.len]).expect("ASCII")
    }
}

/// The response for a directory listing (`--autoindex`): the rendered
/// body from memory, its hash as a strong `ETag` (`If-None-Match` gives
/// 304, `If-Match` 412), `Vary: Accept` (HTML or JSON) and
/// `Cache-Control: no-cache`, so caches revalidate it. No
/// `Last-Modified`: a directory's time does not change when an entry is
/// written, so only the tag can say whether the listing did. Ranges are
/// not offered.
///
/// `vary_encoding`: compression covers listings of this format, so the
/// response depends on `Accept-Encoding` too, whatever this client takes.
pub(crate) fn for_listing(
    req: &Request,
    listing: &crate::listing::Listing,
    vary_encoding: bool,
    ctx: &Ctx,
) -> Response {
    let tag = listing.etag.as_str();
    if req
        .if_match
        .as_ref()
        .is_some_and(|v| !etag_list_matches(v, tag, true))
    {
        return error(412, ctx, &[]);
    }
    let not_modified = req
        .if_none_match
        .as_ref()
        .is_some_and(|v| etag_list_matches(v, tag, false));
    let status = if not_modified { 304 } else { 200 };
    let mut h = Head::new(status, ctx);
    if !not_modified {
        h.header("Content-Type", listing.format.content_type())
            .header_u64("Content-Length", listing.body.len() as u64);
        if let Some(e) = listing.coding {
            h.header("Content-Encoding", e.token());
        }
    }
    let vary = if vary_encoding {
        "Accept, Accept-Encoding"
    } else {
        "Accept"
    };
    h.header("ETag", tag)
        .header("Vary", vary)
        .header("Cache-Control", "no-cache");
    if listing.truncated {
        h.header("Listing-Truncated", "true");
    }
    let body: &[u8] = if not_modified { &[] } else { &listing.body };
    Response::in_memory(h, body, ctx)
}

/// Which representation of a resource a file response carries.
#[derive(Debug, Clone, Default)]
pub(crate) struct Representation {
    /// Sent from a precompressed sidecar with this coding.
    pub encoding: Option<Encoding>,
    /// The resource has (or may have) encoded representations, so the
    /// choice depends on `Accept-Encoding`: say so to caches.
    pub vary: bool,
    /// The file whose version the validators (`ETag`, `Last-Modified`)
    /// and preconditions name, when it is not the file sent: a compressed
    /// result is named by the version it was made from. `None`: the file
    /// sent (a sidecar is its own version).
    pub validators: Option<FileMeta>,
    /// An origin's object held by the edge (`--origin`): its validators,
    /// type and kept fields, in place of the cache file's. Its bytes never
    /// change once stored (a new version is a new file), so the response
    /// carries no file version to check.
    pub origin: Option<std::sync::Arc<crate::edge::meta::Meta>>,
}

/// The validators a file response names: its own, or an origin's (which
/// may lack either).
struct Validators<'a> {
    tag: Option<&'a str>,
    mtime: Option<i64>,
    last_modified: Option<&'a str>,
}

/// The origin's kept fields a response carries besides its validators
/// and type, as the origin named them, canonically spelled.
const ORIGIN_FIELDS: [(&str, &str); 4] = [
    ("cache-control", "Cache-Control"),
    ("expires", "Expires"),
    ("content-disposition", "Content-Disposition"),
    ("content-language", "Content-Language"),
];

fn origin_fields(h: &mut Head, rep: &Representation) {
    let Some(o) = &rep.origin else { return };
    for (name, value) in &o.fields {
        if let Some((_, spelled)) = ORIGIN_FIELDS.iter().find(|(n, _)| n == name) {
            h.header(spelled, value);
        }
    }
}

fn origin_field<'a>(rep: &'a Representation, name: &str) -> Option<&'a str> {
    let o = rep.origin.as_ref()?;
    o.fields
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.as_str())
}

/// The response for a regular file (`rel_path` names the resource, for
/// its type; `meta` is the file actually sent, a sidecar's when
/// `rep.encoding` is set).
pub(crate) fn for_file(
    req: &Request,
    meta: &FileMeta,
    rel_path: &[u8],
    rep: Representation,
    rules: &Applied,
    ctx: &Ctx,
) -> Response {
    let named = rep.validators.as_ref().unwrap_or(meta);
    let own_tag;
    let own_lm;
    let v = match &rep.origin {
        Some(o) => {
            let lm = o.version.last_modified.as_deref();
            Validators {
                tag: o.version.etag.as_deref(),
                mtime: lm.and_then(|l| date::parse(l.as_bytes())),
                last_modified: lm,
            }
        }
        None => {
            own_tag = Tag::of(named, rep.encoding);
            own_lm = date::fmt_unix_cached(named.mtime_sec);
            Validators {
                tag: Some(own_tag.as_str()),
                mtime: Some(named.mtime_sec),
                last_modified: Some(&own_lm),
            }
        }
    };

    // RFC 9110 §13.2.2: the order in which preconditions are evaluated.
    // A validator the representation lacks matches only `*`.
    if let Some(l) = &req.if_match {
        if !etag_list_matches(l, v.tag.unwrap_or("\0"), true) {
            return error(412, ctx, &[]);
        }
    } else if let Some(since) = req.if_unmodified_since.as_deref().and_then(date::parse) {
        if v.mtime.is_some_and(|m| m > since) {
            return error(412, ctx, &[]);
        }
    }
    let not_modified = if let Some(l) = &req.if_none_match {
        etag_list_matches(l, v.tag.unwrap_or("\0"), false)
    } else if let Some(since) = req.if_modified_since.as_deref().and_then(date::parse) {
        v.mtime.is_some_and(|m| m <= since)
    } else {
        false
    };
    if not_modified {
        let mut h = Head::new(304, ctx);
        validator_fields(&mut h, &v);
        if rep.vary {
            h.header("Vary", "Accept-Encoding");
        }
        origin_fields(&mut h, &rep);
        rule_headers(&mut h, rules);
        return Response::in_memory(h, &[], ctx);
    }

    let mut range = RangeResult::Full;
    if req.method == Method::Get {
        if let Some(r) = &req.range {
            let honour = match &req.if_range {
                None => true,
                Some(l) => match (v.tag, v.mtime) {
                    (Some(t), Some(m)) => if_range_matches(l, t, m),
                    (Some(t), None) => if_range_matches(l, t, i64::MIN),
                    (None, Some(m)) => if_range_matches(l, "\0", m),
                    (None, None) => false,
                },
            };
            if honour {
                range = parse_range(r, meta.size);
            }
        }
    }
    let ctype = match (rules.content_type, origin_field(&rep, "content-type")) {
        (Some(t), _) => Cow::Borrowed(t),
        (None, Some(t)) => Cow::Owned(t.to_string()),
        (None, None) => with_charset(content_type(rel_path), ctx.charset),
    };
    let (status, offset, len) = match range {
        RangeResult::Full => (200, 0, meta.size),
        RangeResult::Partial(start, len) => (206, start, len),
        RangeResult::Multi(ranges) => {
            return multipart(meta, &ranges, &ctype, &v, &rep, rules, ctx)
        }
        RangeResult::Unsatisfiable => {
            let cr = format!("bytes */{}", meta.size);
            return error(416, ctx, &[("Content-Range", &cr)]);
        }
    };
    let mut h = Head::new(status, ctx);
    h.header("Content-Type", &ctype)
        .header_u64("Content-Length", len);
    validator_fields(&mut h, &v);
    h.header("Accept-Ranges", "bytes");
    if let Some(e) = rep.encoding {
        h.header("Content-Encoding", e.token());
    }
    if rep.vary {
        h.header("Vary", "Accept-Encoding");
    }
    origin_fields(&mut h, &rep);
    rule_headers(&mut h, rules);
    if status == 206 {
        let cr = format!("bytes {}-{}/{}", offset, offset + len - 1, meta.size);
        h.header("Content-Range", &cr);
    }
    let send_body = !ctx.head_only && len > 0;
    let mut resp = Response::of_file(h, send_body.then_some((offset, len)), meta, ctx);
    if rep.origin.is_some() {
        resp.version = None;
    }
    resp
}

/// `Last-Modified` and `ETag`, those the representation has.
fn validator_fields(h: &mut Head, v: &Validators) {
    if let Some(lm) = v.last_modified {
        h.header("Last-Modified", lm);
    }
    if let Some(t) = v.tag {
        h.header("ETag", t);
    }
}

/// A `multipart/byteranges` 206 (RFC 9110 §14.6): the head carries the
/// first part's header, and each later part (and the closing delimiter)
/// is a [`Part`] of the response. Of an encoded representation (a
/// compressed result, a sidecar), each part's header names the coding.
fn multipart(
    meta: &FileMeta,
    ranges: &[(u64, u64)],
    ctype: &str,
    v: &Validators,
    rep: &Representation,
    rules: &Applied,
    ctx: &Ctx,
) -> Response {
    debug_assert!(ranges.len() >= 2);
    let boundary = boundary(ctx.seed, meta, ranges);
    let part_head = |first: bool, off: u64, len: u64| {
        let mut p = Vec::with_capacity(128);
        if !first {
            p.extend_from_slice(b"\r\n");
        }
        p.extend_from_slice(b"--");
        p.extend_from_slice(boundary.as_bytes());
        p.extend_from_slice(b"\r\nContent-Type: ");
        p.extend_from_slice(ctype.as_bytes());
        if let Some(e) = rep.encoding {
            // Each part is a range of the encoded representation: the
            // part says so (the multipart body itself is not encoded).
            p.extend_from_slice(b"\r\nContent-Encoding: ");
            p.extend_from_slice(e.token().as_bytes());
        }
        p.extend_from_slice(b"\r\nContent-Range: bytes ");
        push_u64(&mut p, off);
        p.push(b'-');
        push_u64(&mut p, off + len - 1);
        p.push(b'/');
        push_u64(&mut p, meta.size);
        p.extend_from_slice(b"\r\n\r\n");
        p
    };
    let mut parts: Vec<Part> = ranges[1..]
        .iter()
        .map(|&(off, len)| Part {
            prefix: part_head(false, off, len),
            file: Some((off, len)),
        })
        .collect();
    parts.push(Part {
        prefix: format!("\r\n--{boundary}--\r\n").into_bytes(),
        file: None,
    });
    let first = part_head(true, ranges[0].0, ranges[0].1);
    let body_len = first.len() as u64
        + parts.iter().map(|p| p.prefix.len() as u64).sum::<u64>()
        + ranges.iter().map(|r| r.1).sum::<u64>();
    let mut h = Head::new(206, ctx);
    h.header(
        "Content-Type",
        &format!("multipart/byteranges; boundary={boundary}"),
    )
    .header_u64("Content-Length", body_len);
    validator_fields(&mut h, v);
    h.header("Accept-Ranges", "bytes");
    if rep.vary {
        h.header("Vary", "Accept-Encoding");
    }
    origin_fields(&mut h, rep);
    rule_headers(&mut h, rules);
    let (status, fields, mut front) = h.finish(ctx, first.len());
    front.extend_from_slice(&first);
    Response {
        status,
        fields,
        front,
        file: Some(ranges[0]),
        version: rep.origin.is_none().then(|| meta.version()),
        keep_alive: ctx.keep_alive,
        body_len,
        parts,
        continued: false,
    }
}

/// A multipart boundary: `sp` and 16 hex digits, different for every
/// response of a process (a counter mixed with the server's random seed,
/// the file and the ranges), so that a file's bytes cannot be written to
/// contain the boundary ahead of time.
fn boundary(seed: u64, meta: &FileMeta, ranges: &[(u64, u64)]) -> String {
    static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let mut x = (n ^ seed ^ meta.ino.rotate_left(17) ^ (u64::from(meta.mtime_nsec) << 32))
        .wrapping_mul(0x9e37_79b9_7f4a_7c15);
    for &(o, l) in ranges {
        x = (x ^ o ^ l.rotate_left(29)).wrapping_mul(0xff51_afd7_ed55_8ccd);
        x ^= x >> 33;
    }
    let mut b = String::with_capacity(24);
    b.push_str("sp");
    hex(x | 1 << 63, |d| b.push_str(d));
    b
}

/// `Content-Type` from the extension; text types carry `charset=utf-8`.
/// The common web types come from a static table; others from mime_guess.
pub fn content_type(rel_path: &[u8]) -> Cow<'static, str> {
    let name = rel_path.rsplit(|&b| b == b'/').next().unwrap_or(b"");
    let ext = match name.iter().rposition(|&b| b == b'.') {
        Some(i) if i > 0 => &name[i + 1..],
        _ => return Cow::Borrowed("application/octet-stream"),
    };
    const COMMON: &[(&str, &str)] = &[
        ("html", "text/html; charset=utf-8"),
        ("htm", "text/html; charset=utf-8"),
        ("css", "text/css; charset=utf-8"),
        ("js", "text/javascript; charset=utf-8"),
        ("json", "application/json; charset=utf-8"),
        ("txt", "text/plain; charset=utf-8"),
        ("svg", "image/svg+xml; charset=utf-8"),
        ("xml", "text/xml; charset=utf-8"),
        ("png", "image/png"),
        ("jpg", "image/jpeg"),
        ("jpeg", "image/jpeg"),
        ("gif", "image/gif"),
        ("webp", "image/webp"),
        ("ico", "image/x-icon"),
        ("woff2", "font/woff2"),
        ("mp4", "video/mp4"),
        ("webm", "video/webm"),
        ("pdf", "application/pdf"),
        ("zip", "application/zip"),
        ("gz", "application/gzip"),
        ("iso", "application/x-iso9660-image"),
        ("deb", "application/vnd.debian.binary-package"),
    ];
    for (e, t) in COMMON {
        if ext.eq_ignore_ascii_case(e.as_bytes()) {
            return Cow::Borrowed(t);
        }
    }
    let Some(mime) = std::str::from_utf8(ext)
        .ok()
        .and_then(|e| mime_guess::from_ext(e).first())
    else {
        return Cow::Borrowed("application/octet-stream");
    };
    let textual = mime.type_() == mime_guess::mime::TEXT
        || matches!(
            mime.essence_str(),
            "application/javascript" | "application/json" | "application/xml" | "image/svg+xml"
        );
    if textual {
        Cow::Owned(format!("{}; charset=utf-8", mime.essence_str()))
    } else {
        Cow::Owned(mime.essence_str().to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_types() {
        assert_eq!(content_type(b"a/index.html"), "text/html; charset=utf-8");
        assert_eq!(content_type(b"a/INDEX.HTM"), "text/html; charset=utf-8");
        assert_eq!(content_type(b"a/x.md"), "text/markdown; charset=utf-8");
        assert_eq!(content_type(b"a/x.wasm"), "application/wasm");
        assert_eq!(content_type(b"x.css"), "text/css; charset=utf-8");
        assert_eq!(content_type(b"v.mp4"), "video/mp4");
        assert_eq!(content_type(b"blob"), "application/octet-stream");
        assert_eq!(content_type(b".hidden"), "application/octet-stream");
    }
}
