//! The origin client: one slice of one object per call, over HTTP/1.1 or
//! HTTPS with keep-alive, failing over across the configured origins in
//! order. It blocks (ureq), so it runs on the edge's helper threads; a
//! worker only ever hands it jobs and reads its results.
//!
//! Every slice of a response must come from one version of the object:
//! the first slice fixes the [`Version`] (the complete length from
//! `Content-Range`, the ETag, the Last-Modified date), and each later one
//! is asked for with `If-Match` (or `If-Unmodified-Since`) and checked
//! against it on arrival. A version that moved is [`Answer::Changed`],
//! never bytes.

use std::sync::Arc;
use std::time::Duration;

use spindle_core::edge::meta::{Version, KEPT_FIELDS, MAX_KEPT_BYTES};
use spindle_core::edge::sigv4::{self, Signer};
use spindle_core::edge::slice::{self, SLICE_SIZE};

/// How long a connection to an origin may take to open.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long an origin may leave a connection silent mid-answer.
pub const READ_TIMEOUT: Duration = Duration::from_secs(30);
/// Idle keep-alive connections kept per origin (per [`Origin`]).
pub const MAX_IDLE_PER_ORIGIN: usize = 16;
/// The most bytes of an origin's header block.
pub const MAX_ORIGIN_HEAD: usize = 64 * 1024;

/// One origin: `http://host[:port][/prefix]` or `https://...`. For an S3
/// bucket with path-style addressing, the prefix is `/bucket`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OriginUrl {
    /// `scheme://authority`, as the URL gave it.
    base: String,
    /// The `Host` field: the host, and the port if the URL named one.
    host: String,
    /// The path before the object's, without a trailing `/` (maybe empty).
    prefix: String,
}

impl OriginUrl {
    /// Parses an `--origin` value; the error says what is wrong with it.
    pub fn parse(s: &str) -> Result<OriginUrl, String> {
        let uri: ureq::http::Uri = s
            .parse()
            .map_err(|e| format!("origin {s:?} is not a URL: {e}"))?;
        let scheme = uri.scheme_str().unwrap_or("");
        if scheme != "http" && scheme != "https" {
            return Err(format!("origin {s:?}: the scheme must be http or https"));
        }
        let Some(auth) = uri.authority() else {
            return Err(format!("origin {s:?} has no host"));
        };
        if auth.as_str().contains('@') {
            return Err(format!(
                "origin {s:?}: credentials in the URL are not taken (use the S3 credentials file)"
            ));
        }
        if uri.query().is_some() {
            return Err(format!("origin {s:?}: a query is not taken"));
        }
        Ok(OriginUrl {
            base: format!("{scheme}://{auth}"),
            host: auth.as_str().to_string(),
            prefix: uri.path().trim_end_matches('/').to_string(),
        })
    }
}

/// A slice as the origin sent it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Slice {
    pub version: Version,
    /// The origin's fields the edge keeps ([`KEPT_FIELDS`]), names
    /// lowercase, in that order.
    pub fields: Vec<(String, String)>,
    /// Its `Date`, `Expires` and `Cache-Control`, for freshness.
    pub date: Option<String>,
    /// Exactly the bytes of the slice asked for.
    pub bytes: Vec<u8>,
}

impl Slice {
    /// A kept field's value.
    pub fn field(&self, name: &str) -> Option<&str> {
        self.fields
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// What an origin said of a slice.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    Slice(Slice),
    /// 404 or 410: no such object.
    NotFound,
    /// The object is no longer the version asked for (412, or another
    /// length or validator on the answer).
    Changed,
}

/// What an origin said of a stored version, asked if it still holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Revalidated {
    /// 304, or the same validators: the stored version is current.
    Same,
    /// Another version now.
    Changed,
    /// 404 or 410.
    NotFound,
}

/// Why no origin answered usefully.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FetchError {
    /// No connection, a timeout, a reset: the origin is down or slow.
    Unreachable(String),
    /// An answer the edge does not take (5xx, 403, ...), with its status.
    Status(u16),
    /// An answer that breaks HTTP or the slice asked for (a wrong
    /// `Content-Range`, a short body, too many kept field bytes, an object
    /// over `slice::MAX_OBJECT`).
    Malformed(String),
}

impl std::fmt::Display for FetchError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FetchError::Unreachable(e) => write!(f, "origin unreachable: {e}"),
            FetchError::Status(s) => write!(f, "origin answered {s}"),
            FetchError::Malformed(e) => write!(f, "origin's answer refused: {e}"),
        }
    }
}

/// The origins of one edge, tried in order, and how to reach them.
pub struct Origin {
    agent: ureq::Agent,
    urls: Vec<OriginUrl>,
    signer: Option<Signer>,
}

impl Origin {
    /// `roots`: the certificates trusted for HTTPS origins (DER: the
    /// system's, `acme::SYSTEM_ROOTS`, or `--origin-ca`'s). `signer`: sign
    /// each request for an S3 bucket.
    pub fn new(urls: Vec<OriginUrl>, roots: &[Vec<u8>], signer: Option<Signer>) -> Origin {
        assert!(!urls.is_empty(), "an edge needs an origin");
        let certs = roots
            .iter()
            .map(|d| ureq::tls::Certificate::from_der(d).to_owned())
            .collect();
        let roots = ureq::tls::RootCerts::Specific(Arc::new(certs));
        let tls = ureq::tls::TlsConfig::builder()
            .provider(ureq::tls::TlsProvider::Rustls)
            .root_certs(roots)
            .unversioned_rustls_crypto_provider(crate::tls::provider())
            .build();
        let agent = ureq::Agent::config_builder()
            .tls_config(tls)
            .timeout_connect(Some(CONNECT_TIMEOUT))
            .timeout_per_read(Some(READ_TIMEOUT))
            .http_status_as_error(false)
            .max_redirects(0)
            .max_idle_connections(MAX_IDLE_PER_ORIGIN * urls.len())
            .max_idle_connections_per_host(MAX_IDLE_PER_ORIGIN)
            .max_response_header_size(MAX_ORIGIN_HEAD)
            .user_agent(concat!("spindle/", env!("CARGO_PKG_VERSION"), " (edge)"))
            .build()
            .into();
        Origin {
            agent,
            urls,
            signer,
        }
    }

    /// Slice `index` of the object at `path` (decoded, starting with `/`),
    /// of version `pinned`; slice 0 of whatever version the origin has now
    /// when `pinned` is None. `now`: Unix seconds, for signatures. Origins
    /// are tried in order while they are unreachable or answer 5xx.
    pub fn slice(
        &self,
        path: &[u8],
        index: u64,
        pinned: Option<&Version>,
        now: i64,
    ) -> Result<Answer, FetchError> {
        assert!(path.first() == Some(&b'/'), "origin path must be absolute");
        assert!(
            pinned.is_some() || index == 0,
            "a later slice needs its version"
        );
        let range = match pinned {
            Some(v) => slice::range_field(index, v.length),
            None => format!("bytes=0-{}", SLICE_SIZE - 1),
        };
        let mut fields = vec![("range", range.as_str())];
        if let Some(p) = pinned.and_then(Version::precondition) {
            fields.push(p);
        }
        let mut last = FetchError::Unreachable("no origin tried".into());
        for url in &self.urls {
            match self.ask(url, "GET", path, &fields, now) {
                // A 5xx, or an origin gone mid-answer (a node stopped, a
                // reset): the next origin is asked.
                Ok(resp) => match read(resp, index, pinned) {
                    Err(FetchError::Status(s)) if s >= 500 => last = FetchError::Status(s),
                    Err(e @ FetchError::Unreachable(_)) => last = e,
                    done => return done,
                },
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    /// Whether the origin still has `version` of `path`: a HEAD with
    /// `If-None-Match` (or `If-Modified-Since`), origins tried in order
    /// as for [`Origin::slice`].
    pub fn revalidate(
        &self,
        path: &[u8],
        version: &Version,
        now: i64,
    ) -> Result<Revalidated, FetchError> {
        let cond = match (&version.etag, &version.last_modified) {
            (Some(e), _) => Some(("if-none-match", e.as_str())),
            (None, Some(lm)) => Some(("if-modified-since", lm.as_str())),
            (None, None) => None,
        };
        let fields: Vec<(&str, &str)> = cond.into_iter().collect();
        let mut last = FetchError::Unreachable("no origin tried".into());
        for url in &self.urls {
            let resp = match self.ask(url, "HEAD", path, &fields, now) {
                Ok(r) => r,
                Err(e) => {
                    last = e;
                    continue;
                }
            };
            let field = |n: &str| {
                resp.headers()
                    .get(n)
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_string)
            };
            return Ok(match resp.status().as_u16() {
                304 => Revalidated::Same,
                404 | 410 => Revalidated::NotFound,
                200 => {
                    let now_version = Version {
                        length: field("content-length")
                            .and_then(|l| l.parse().ok())
                            .unwrap_or(u64::MAX),
                        etag: field("etag"),
                        last_modified: field("last-modified"),
                    };
                    if version.same(&now_version) {
                        Revalidated::Same
                    } else {
                        Revalidated::Changed
                    }
                }
                s if s >= 500 => {
                    last = FetchError::Status(s);
                    continue;
                }
                s => return Err(FetchError::Status(s)),
            });
        }
        Err(last)
    }

    fn ask(
        &self,
        url: &OriginUrl,
        method: &str,
        path: &[u8],
        fields: &[(&str, &str)],
        now: i64,
    ) -> Result<ureq::http::Response<ureq::Body>, FetchError> {
        let mut full = url.prefix.as_bytes().to_vec();
        full.extend_from_slice(path);
        let target = format!("{}{}", url.base, sigv4::encode_path(&full));
        let mut req = match method {
            "HEAD" => self.agent.head(&target),
            _ => self.agent.get(&target),
        }
        .header("host", &url.host);
        for (n, v) in fields {
            req = req.header(*n, *v);
        }
        if let Some(s) = &self.signer {
            for (n, v) in s.sign(method, &url.host, &full, fields, now) {
                req = req.header(n, v);
            }
        }
        req.call().map_err(|e| match e {
            ureq::Error::StatusCode(s) => FetchError::Status(s),
            ureq::Error::Http(e) => FetchError::Malformed(e.to_string()),
            e => FetchError::Unreachable(e.to_string()),
        })
    }
}

thread_local! {
    /// A helper's slice buffer, handed back by [`recycle`] once stored:
    /// a fresh megabyte per slice cost page faults and zeroing, a fifth
    /// of the helpers' CPU at 10 Gbit/s.
    static BUFFER: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Gives a slice's bytes back to this thread's next read.
pub fn recycle(bytes: Vec<u8>) {
    BUFFER.with(|b| {
        let mut b = b.borrow_mut();
        if bytes.capacity() > b.capacity() {
            *b = bytes;
        }
    });
}

/// Exactly `n` bytes of `body`, into this thread's buffer (zeroed only
/// where it grows): fewer is an error, and so is more.
fn read_body(body: &mut ureq::Body, n: usize) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    assert!(n as u64 <= SLICE_SIZE);
    let mut buf = BUFFER.with(|b| std::mem::take(&mut *b.borrow_mut()));
    buf.resize(n, 0);
    let mut r = body
        .with_config()
        // ureq's limit refuses a body of exactly `limit` bytes.
        .limit(SLICE_SIZE + 1)
        .reader();
    let more = r.read_exact(&mut buf).and_then(|()| r.read(&mut [0u8; 1]));
    match more {
        Ok(0) => Ok(buf),
        Ok(_) => Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("more than the {n} bytes of the slice"),
        )),
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => Err(std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            format!("fewer than the {n} bytes of the slice"),
        )),
        Err(e) => Err(e),
    }
}

/// Reads an origin's answer for slice `index` (of `pinned`, if given).
fn read(
    mut resp: ureq::http::Response<ureq::Body>,
    index: u64,
    pinned: Option<&Version>,
) -> Result<Answer, FetchError> {
    let status = resp.status().as_u16();
    let field = |n: &str| {
        resp.headers()
            .get(n)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    };
    let (start, end, length) = match status {
        404 | 410 => return Ok(Answer::NotFound),
        412 => return Ok(Answer::Changed),
        206 => content_range(field("content-range").as_deref())?,
        200 if index == 0 => {
            // The origin ignored the range: the whole object, if it fits
            // one slice (ureq already holds Content-Length to its body).
            let n = field("content-length")
                .and_then(|l| l.parse::<u64>().ok())
                .ok_or_else(|| FetchError::Malformed("a 200 without Content-Length".into()))?;
            if n > SLICE_SIZE {
                return Err(FetchError::Malformed(format!(
                    "a 200 of {n} bytes to a range request (the origin must take ranges)"
                )));
            }
            (0, n, n)
        }
        416 => match field("content-range").as_deref() {
            Some("bytes */0") if index == 0 && pinned.is_none() => (0, 0, 0),
            _ if pinned.is_some() => return Ok(Answer::Changed),
            _ => return Err(FetchError::Malformed("416 to the first slice".into())),
        },
        s => return Err(FetchError::Status(s)),
    };
    if length > slice::MAX_OBJECT {
        return Err(FetchError::Malformed(format!(
            "an object of {length} bytes"
        )));
    }
    let version = Version {
        length,
        etag: field("etag"),
        last_modified: field("last-modified"),
    };
    if let Some(p) = pinned {
        if !p.same(&version) {
            return Ok(Answer::Changed);
        }
    }
    let want = if length == 0 {
        0..0
    } else {
        slice::bytes(index, length)
    };
    if (start, end) != (want.start, want.end) {
        return Err(FetchError::Malformed(format!(
            "bytes {start}-{end} of {length} for slice {index}"
        )));
    }
    let mut fields = Vec::new();
    let mut kept = 0;
    for n in KEPT_FIELDS {
        if let Some(v) = field(n) {
            kept += n.len() + v.len();
            fields.push((n.to_string(), v));
        }
    }
    if kept > MAX_KEPT_BYTES {
        return Err(FetchError::Malformed(format!(
            "{kept} bytes of kept fields"
        )));
    }
    let date = field("date");
    let bytes = read_body(resp.body_mut(), (end - start) as usize)
        .map_err(|e| FetchError::Unreachable(format!("reading slice {index}: {e}")))?;
    Ok(Answer::Slice(Slice {
        version,
        fields,
        date,
        bytes,
    }))
}

/// `bytes FIRST-LAST/LENGTH` as (first, last + 1, length).
fn content_range(v: Option<&str>) -> Result<(u64, u64, u64), FetchError> {
    let bad = || FetchError::Malformed(format!("Content-Range {v:?}"));
    let rest = v.and_then(|v| v.strip_prefix("bytes ")).ok_or_else(bad)?;
    let (span, len) = rest.split_once('/').ok_or_else(bad)?;
    let (a, b) = span.split_once('-').ok_or_else(bad)?;
    let num = |s: &str| s.trim().parse::<u64>().map_err(|_| bad());
    let (a, b, len) = (num(a)?, num(b)?, num(len)?);
    if a > b || b >= len {
        return Err(bad());
    }
    Ok((a, b + 1, len))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origin_urls_parse_or_say_why_not() {
        let u = OriginUrl::parse("http://127.0.0.1:3900/bucket/").unwrap();
        assert_eq!(u.base, "http://127.0.0.1:3900");
        assert_eq!(u.host, "127.0.0.1:3900");
        assert_eq!(u.prefix, "/bucket");
        assert_eq!(
            OriginUrl::parse("https://origin.example").unwrap().prefix,
            ""
        );
        for bad in ["ftp://x/", "http://u:p@x/", "http://x/?a=b", "nonsense"] {
            let e = OriginUrl::parse(bad).unwrap_err();
            assert!(e.contains(bad), "{e}");
        }
    }

    #[test]
    fn content_range_is_read_strictly() {
        assert_eq!(content_range(Some("bytes 0-9/100")), Ok((0, 10, 100)));
        for bad in [
            "bytes 9-0/100",
            "bytes 0-100/100",
            "bytes */100",
            "items 0-1/2",
            "bytes 0-1",
        ] {
            assert!(content_range(Some(bad)).is_err(), "{bad}");
        }
        assert!(content_range(None).is_err());
    }
}
