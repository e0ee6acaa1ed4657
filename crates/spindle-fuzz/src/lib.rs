//! The checks behind spindle's fuzz targets.
//!
//! Each function takes arbitrary bytes, drives one part of spindle that
//! reads untrusted input, and panics if an invariant breaks. The
//! libFuzzer targets in `fuzz/fuzz_targets/` are one line each around
//! these; `tests/corpus.rs` replays the committed corpus (`fuzz/corpus/`)
//! through them on stable Rust, so CI checks every input a fuzzer ever
//! kept. See docs/reliability.md.

use spindle_core::response::FileKind;
use spindle_core::response::{parse_range, RangeResult};
use spindle_core::{
    path, Checked, Encoding, FileMeta, OpenError, Session, SessionConfig, Step, StreamProtocol,
};

/// Most session steps one input may drive (a bound on the loop, far above
/// what the input's bytes can ask for).
const MAX_STEPS: usize = 100_000;

mod h2;
pub use h2::h2;
mod h3;
pub use h3::h3;
mod h3_conn;
pub use h3_conn::h3_conn;
mod tlsrec;
pub use tlsrec::tlsrec;

/// A little-endian number from up to 8 bytes of `data` at `at` (missing
/// bytes read as 0).
fn num(data: &[u8], at: usize, len: usize) -> u64 {
    (0..len).fold(0u64, |v, i| {
        v | (u64::from(data.get(at + i).copied().unwrap_or(0)) << (8 * i))
    })
}

/// An `auth` rule over `/p/**` (the fuzz target's `conf & 64`).
fn auth_rules() -> std::sync::Arc<spindle_core::rules::Rules> {
    let users = spindle_core::auth::Htpasswd::parse(b"u:$apr1$/HEYrqn/$PCu/FWxn0kHyP0SqXa6do.\n")
        .expect("a valid file");
    let rule = spindle_core::rules::Rule {
        pattern: "/p/**".into(),
        auth: Some(std::sync::Arc::new(spindle_core::auth::Auth::new(
            "fuzz".into(),
            users,
        ))),
        ..Default::default()
    };
    std::sync::Arc::new(spindle_core::rules::Rules::new(vec![rule]).expect("a valid rule"))
}

/// The whole connection: bytes in, in pieces, and the driver's side
/// played from the input too (what each open finds).
///
/// Input: byte 0 sets the configuration (dotfiles, a small header limit,
/// a request cap, precompressed sidecars, error pages, autoindex; a
/// listing is rendered by the core from names drawn from the seed; an
/// `auth` rule over `/p/`, whose checks' answers are drawn from the seed),
/// bytes 1-2 seed the split of the stream into pieces, bytes 3-10 seed
/// what each open finds; the rest is the byte stream from the client.
///
/// Invariants: no panic; every path handed to the driver is relative,
/// free of `..`, empty segments and NUL, and free of dot-segments unless
/// dotfiles are on; every response head parses as HTTP/1.1 with the
/// status it claims; its `Content-Length` is the bytes that follow (the
/// in-memory body or the file range), or, for `HEAD` and 304, none follow;
/// a file range lies inside the file, and a 206 says which; a response
/// that closes the connection says `Connection: close`; each response is
/// handed out once, in order, before the next request is parsed.
///
/// A byte stream that opens with `h2\n` is one HTTP/2 stream's request
/// given as fields instead ([`spindle_core::request::from_fields`]): the
/// lines after it are the method, the path, the authority (empty: none)
/// and `name:value` fields. Then also: a request `from_fields` takes is
/// answered once, with a head of fields carrying no connection-specific
/// field and nothing of HTTP/1.1's in its bytes, and the session never
/// asks for input.
pub fn session(data: &[u8]) {
    let conf = data.first().copied().unwrap_or(0);
    let mut split = num(data, 1, 2) | 1;
    let mut world = num(data, 3, 8) | 1;
    let stream = data.get(11..).unwrap_or(&[]);
    let cfg = SessionConfig {
        allow_dotfiles: conf & 1 != 0,
        max_header_bytes: if conf & 2 != 0 { 256 } else { 8192 },
        max_request_line: if conf & 2 != 0 { 128 } else { 8192 },
        max_requests_per_connection: if conf & 4 != 0 { 3 } else { 1000 },
        precompressed: if conf & 8 != 0 {
            Encoding::ALL.to_vec()
        } else {
            Vec::new()
        },
        error_pages: if conf & 16 != 0 {
            vec![
                (404, c"errors/404.html".into()),
                (503, c"errors/busy.html".into()),
            ]
        } else {
            Vec::new()
        },
        autoindex: conf & 32 != 0,
        edge: conf & 128 != 0,
        rules: if conf & 64 != 0 {
            auth_rules()
        } else {
            Default::default()
        },
        ..SessionConfig::default()
    };
    let mut s = match stream.strip_prefix(b"h2\n") {
        Some(fields) => match stream_request(fields) {
            Some(req) => Session::for_stream(None, req, StreamProtocol::Http2),
            None => return,
        },
        None => Session::new(),
    };
    let mut rest = if s.given_request().is_some() {
        &[][..]
    } else {
        stream
    };
    let mut served = 0u64;
    for _ in 0..MAX_STEPS {
        let step = match s.next(&cfg) {
            // The check's answer is drawn from the seed (no hash is run).
            Step::Authenticate(check) => {
                assert!(conf & 64 != 0, "a check without an auth rule");
                let user = check.credentials.user();
                assert!(!user.is_empty() && !user.contains(&b':'));
                world = xorshift(world);
                let checked =
                    [Checked::Granted, Checked::Denied, Checked::Busy][world as usize % 3];
                s.authenticated(&cfg, check, checked)
            }
            step => step,
        };
        match step {
            Step::NeedInput => {
                assert!(
                    s.log_info().stream.is_none(),
                    "a stream's session asks for input"
                );
                if rest.is_empty() {
                    return;
                }
                assert!(s.wants_input(&cfg), "asks for input it will not take");
                split = xorshift(split);
                let n = 1 + (split as usize % 64).min(rest.len() - 1);
                s.feed(&rest[..n]);
                rest = &rest[n..];
            }
            Step::Open(mut req) => {
                // With precompressed sidecars on, the session asks for
                // the resource, each candidate, then the resource again;
                // an error page may follow with its own search; or, with
                // an origin, the edge's cache file: at most
                // 2 × (codings + 2) opens, and one more.
                let mut opens = 0;
                let (resp, found) = loop {
                    opens += 1;
                    assert!(
                        opens <= 2 * (Encoding::ALL.len() + 2) + 1,
                        "open after open"
                    );
                    check_path(req.path.as_bytes(), cfg.allow_dotfiles);
                    world = xorshift(world);
                    let found = found(world);
                    match s.opened(&cfg, &req, found) {
                        Step::Respond(resp) => break (resp, found),
                        Step::Open(next) => req = next,
                        Step::List(list) => {
                            assert!(cfg.autoindex, "a listing with autoindex off");
                            assert_eq!(
                                found,
                                Err(OpenError::NotFound),
                                "a listing of a found index"
                            );
                            let index = req.path.as_bytes();
                            assert!(index.ends_with(spindle_core::path::INDEX_FILE));
                            if list.path.as_bytes() != b"." {
                                check_path(list.path.as_bytes(), cfg.allow_dotfiles);
                            }
                            world = xorshift(world);
                            let resp = listed(&mut s, &cfg, &list, world);
                            break (resp, Err(OpenError::NotFound));
                        }
                        Step::Fetch(f) => {
                            assert!(cfg.edge, "a fetch without an origin");
                            assert_eq!(found, Err(OpenError::NotFound), "a fetch of a found file");
                            assert_eq!(f.path.first(), Some(&b'/'));
                            check_path(&f.path[1..], cfg.allow_dotfiles);
                            world = xorshift(world);
                            match edge_answer(&mut s, &cfg, world) {
                                Ok(next) => req = next,
                                Err(resp) => break (*resp, Err(OpenError::NotFound)),
                            }
                        }
                        other => panic!("opened() gave {other:?}"),
                    }
                };
                check_response(&s, &resp, found.ok());
                s.sent();
                served += 1;
                assert_eq!(s.served(), served, "a response counted twice or not at all");
            }
            Step::List(_) => panic!("next() gave a listing"),
            Step::Fetch(_) => panic!("next() gave a fetch"),
            Step::Respond(resp) => {
                check_response(&s, &resp, None);
                s.sent();
                served += 1;
                assert_eq!(s.served(), served, "a response counted twice or not at all");
            }
            Step::Close => return,
            Step::Authenticate(_) => unreachable!("answered above"),
        }
    }
    panic!("{MAX_STEPS} steps from {} bytes of input", data.len());
}

/// The edge's answer to a fetch, drawn from `w`: a status (the response:
/// `Err`), or the object found, whose cache file is opened next (`Ok`,
/// with the length the next open's file will have, or not).
fn edge_answer(
    s: &mut Session,
    cfg: &SessionConfig,
    w: u64,
) -> Result<spindle_core::OpenRequest, Box<spindle_core::Response>> {
    use spindle_core::edge::meta::{Freshness, Meta, Version};
    if w.is_multiple_of(4) {
        let status = [404, 502, 503, 504][(w >> 2) as usize % 4];
        let resp = s
            .edge_failed(cfg, status)
            .into_response()
            .expect("a response");
        assert_eq!(resp.status, status);
        return Err(Box::new(resp));
    }
    let next = found(xorshift(w));
    let length = match (next, (w >> 4) % 3) {
        (Ok(m), 0 | 1) => m.size,
        _ => (w >> 8) % 5000,
    };
    let meta = Meta {
        version: Version {
            length,
            etag: [None, Some("\"e\""), Some("W/\"w\"")][(w >> 12) as usize % 3].map(Into::into),
            last_modified: (w >> 14)
                .is_multiple_of(2)
                .then(|| "Sun, 06 Nov 1994 08:49:37 GMT".into()),
        },
        fields: vec![("cache-control".into(), "max-age=60".into())],
        fetched: 0,
        freshness: Freshness {
            store: true,
            lifetime: 60,
            stale_if_error: 0,
        },
    };
    let open = spindle_core::OpenRequest {
        path: c"ab/ab.1.d".into(),
        root: spindle_core::edge::EDGE_ROOT,
    };
    match s.edge_found(spindle_core::EdgeFound {
        open,
        meta: std::sync::Arc::new(meta),
    }) {
        Step::Open(o) => Ok(o),
        other => panic!("edge_found() gave {other:?}"),
    }
}

/// An HTTP/2 stream's request from lines (see [`session`]): `None` when
/// `from_fields` refuses it (a stream error, never a panic).
fn stream_request(data: &[u8]) -> Option<Box<spindle_core::request::Request>> {
    let mut lines = data.split(|&b| b == b'\n');
    let method = lines.next().unwrap_or(b"");
    let path = lines.next().unwrap_or(b"");
    let authority = lines.next().filter(|a| !a.is_empty());
    let fields: Vec<(&[u8], &[u8])> = lines
        .map(|l| match l.iter().position(|&b| b == b':') {
            Some(i) => (&l[..i], &l[i + 1..]),
            None => (l, &b""[..]),
        })
        .collect();
    spindle_core::request::from_fields(method, path, authority, fields.iter().copied()).ok()
}

fn xorshift(mut x: u64) -> u64 {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    x
}

/// The driver's answer to a listing, from the input's seed: an error, or
/// a few entries with arbitrary names (escaping, UTF-8) rendered by the
/// core; checks that the body is what was rendered, and well-formed JSON
/// where it should be.
fn listed(
    s: &mut Session,
    cfg: &SessionConfig,
    list: &spindle_core::ListRequest,
    mut w: u64,
) -> spindle_core::Response {
    use spindle_core::listing::{render, Entry, Format};
    if w & 7 == 0 {
        let e = [OpenError::NotFound, OpenError::Forbidden, OpenError::Busy][(w >> 3) as usize % 3];
        return s.listed(cfg, Err(e)).into_response().expect("a response");
    }
    let mut entries = Vec::new();
    for _ in 0..(w >> 3) % 6 {
        w = xorshift(w);
        let name: Vec<u8> = (0..1 + w % 7)
            .map(|i| b"a<\"&%\n\xff.\x7f/b"[((w >> (8 * i)) % 11) as usize])
            .collect();
        entries.push(Entry {
            name,
            kind: if w & 1 == 0 {
                FileKind::Regular
            } else {
                FileKind::Directory
            },
            size: w >> 20,
            mtime_sec: (w >> 30) as i64 - (1 << 30),
        });
    }
    let l = render(
        list.dir(),
        entries,
        w & 2 != 0,
        list.format,
        cfg.allow_dotfiles,
    );
    assert!(l.etag.starts_with('"') && l.etag.ends_with('"'));
    if list.format == Format::Json {
        assert!(l.body.starts_with(b"[") && l.body.ends_with(b"]\n"));
        assert!(std::str::from_utf8(&l.body).is_ok(), "JSON not UTF-8");
    }
    let resp = s.listed(cfg, Ok(&l)).into_response().expect("a response");
    if resp.status == 200 && s.log_info().method != "HEAD" {
        assert!(resp.front.ends_with(&l.body), "the listing is the body");
    }
    resp
}

/// What an open finds, from the input's seed: mostly regular files of
/// every size class, sometimes a directory, a device, or an error.
fn found(w: u64) -> Result<FileMeta, OpenError> {
    let size = match (w >> 8) % 4 {
        0 => 0,
        1 => (w >> 16) % 100,
        2 => (w >> 16) % 1_000_000,
        _ => w >> 16,
    };
    let meta = |kind| FileMeta {
        size,
        mtime_sec: ((w >> 24) % 2_000_000_000) as i64,
        mtime_nsec: ((w >> 40) % 1_000_000_000) as u32,
        ino: w >> 3,
        kind,
    };
    match w % 16 {
        0 => Err(OpenError::NotFound),
        1 => Err(OpenError::Forbidden),
        2 => Err(OpenError::Busy),
        3 => Err(OpenError::Other),
        4 => Ok(meta(FileKind::Directory)),
        5 => Ok(meta(FileKind::Other)),
        _ => Ok(meta(FileKind::Regular)),
    }
}

/// Checks a path the driver would open beneath the root.
pub fn check_path(p: &[u8], dotfiles: bool) {
    assert!(!p.is_empty(), "empty path");
    assert!(!p.starts_with(b"/"), "absolute path {p:?}");
    assert!(!p.contains(&0), "NUL in path");
    for (i, seg) in p.split(|&b| b == b'/').enumerate() {
        assert!(!seg.is_empty(), "empty segment in {p:?}");
        assert!(seg != b".." && seg != b".", "dot segment in {p:?}");
        // RFC 8615's top-level `.well-known` is the one dot-name served.
        let well_known = i == 0 && seg == b".well-known";
        assert!(
            dotfiles || well_known || seg[0] != b'.',
            "hidden segment in {p:?}"
        );
    }
}

fn header<'a>(h: &'a httparse::Response, name: &str) -> Option<&'a [u8]> {
    h.headers
        .iter()
        .find(|x| x.name.eq_ignore_ascii_case(name))
        .map(|x| x.value)
}

/// Checks a response the session handed out (`s` is the session, after;
/// `meta` what the open found, if it found a file).
pub fn check_response(s: &Session, resp: &spindle_core::Response, meta: Option<FileMeta>) {
    let http2 = s.log_info().stream.is_some();
    let mut written = Vec::new();
    resp.fields.write_http1(resp.status, &mut written);
    let wire = if http2 {
        // HEADERS carry the fields; the bytes are the in-memory body.
        for name in ["connection", "keep-alive", "transfer-encoding", "upgrade"] {
            assert!(resp.fields.get(name).is_none(), "{name} on a stream");
        }
        assert!(
            !resp.front.starts_with(b"HTTP/"),
            "an HTTP/1.1 head on a stream"
        );
        assert!(!resp.keep_alive, "a stream answers one request");
        written.extend_from_slice(&resp.front);
        &written[..]
    } else {
        assert!(
            resp.front.starts_with(&written),
            "the head is its fields written out"
        );
        &resp.front[..]
    };
    let mut headers = [httparse::EMPTY_HEADER; 32];
    let mut h = httparse::Response::new(&mut headers);
    let len = match h.parse(wire) {
        Ok(httparse::Status::Complete(n)) => n,
        other => panic!("response head does not parse: {other:?}"),
    };
    assert_eq!(h.version, Some(1));
    assert_eq!(h.code, Some(resp.status), "status line against status");
    // A multipart body's later parts count as body bytes too.
    let in_memory = (wire.len() - len) as u64
        + resp
            .parts
            .iter()
            .map(|p| p.prefix.len() as u64)
            .sum::<u64>();
    let from_file = resp.file.map_or(0, |(_, n)| n)
        + resp
            .parts
            .iter()
            .map(|p| p.file.map_or(0, |(_, n)| n))
            .sum::<u64>();
    assert!(
        in_memory == 0 || from_file == 0 || !resp.parts.is_empty(),
        "a body both in memory and from the file"
    );
    if !resp.parts.is_empty() {
        check_multipart(&h, resp, meta);
    }
    assert_eq!(resp.body_len, in_memory + from_file, "logged body length");
    let head_request = s.log_info().method == "HEAD";
    if let Some((off, n)) = resp.file {
        let meta = meta.expect("a file range without an opened file");
        assert!(n > 0, "an empty file range");
        assert!(
            off.checked_add(n).is_some_and(|end| end <= meta.size),
            "range {off}+{n} outside a file of {}",
            meta.size
        );
    }
    let cl = header(&h, "Content-Length").map(|v| {
        std::str::from_utf8(v)
            .ok()
            .and_then(|v| v.parse::<u64>().ok())
            .expect("Content-Length is a number")
    });
    if resp.status == 304 || head_request {
        assert_eq!(
            in_memory + from_file,
            0,
            "a body after {} to HEAD or 304",
            resp.status
        );
    } else {
        assert_eq!(
            cl,
            Some(in_memory + from_file),
            "Content-Length against the body"
        );
    }
    if resp.status == 206 && !head_request && resp.parts.is_empty() {
        let (off, n) = resp.file.expect("206 without a file range");
        let meta = meta.expect("206 without a file");
        let want = format!("bytes {}-{}/{}", off, off + n - 1, meta.size);
        assert_eq!(header(&h, "Content-Range"), Some(want.as_bytes()));
    }
    if !resp.keep_alive && !http2 {
        assert_eq!(
            header(&h, "Connection").map(|v| v.eq_ignore_ascii_case(b"close")),
            Some(true),
            "closes without saying so"
        );
    }
}

/// A `multipart/byteranges` response: ascending, disjoint, non-adjacent
/// ranges inside the file, each part naming its range under the boundary
/// the head announces, and the closing delimiter last.
fn check_multipart(h: &httparse::Response, resp: &spindle_core::Response, meta: Option<FileMeta>) {
    let meta = meta.expect("multipart without a file");
    assert_eq!(resp.status, 206);
    let ct = header(h, "Content-Type").expect("multipart without a type");
    let ct = std::str::from_utf8(ct).expect("ascii type");
    let boundary = ct
        .strip_prefix("multipart/byteranges; boundary=")
        .expect("multipart type");
    let mut ranges = vec![resp.file.expect("first part")];
    ranges.extend(resp.parts.iter().filter_map(|p| p.file));
    assert!(ranges.len() >= 2 && ranges.len() <= spindle_core::limits::MAX_RANGES);
    for w in ranges.windows(2) {
        assert!(
            w[0].0 + w[0].1 < w[1].0,
            "ranges not merged or not in order: {ranges:?}"
        );
    }
    let last = resp.parts.last().expect("parts");
    assert_eq!(last.file, None, "the closing delimiter is last");
    assert_eq!(last.prefix, format!("\r\n--{boundary}--\r\n").as_bytes());
    let heads = std::iter::once(&resp.front[..])
        .chain(resp.parts.iter().map(|p| &p.prefix[..]))
        .zip(&ranges);
    for (bytes, &(off, n)) in heads {
        assert!(n > 0 && off + n <= meta.size, "part outside the file");
        let text = String::from_utf8_lossy(bytes);
        let delim = format!("--{boundary}\r\nContent-Type: ");
        assert!(text.contains(&delim), "part without the boundary");
        let cr = format!(
            "Content-Range: bytes {}-{}/{}\r\n\r\n",
            off,
            off + n - 1,
            meta.size
        );
        assert!(text.ends_with(&cr), "part head {text:?} against {cr:?}");
    }
}

/// A `Range` header against a file size. Input: 8 bytes of size, then the
/// header value. Invariants: a partial range is non-empty and inside the
/// file; an unsatisfiable one only when the file has no such byte.
pub fn range(data: &[u8]) {
    let size = num(data, 0, 8) >> (num(data, 0, 1) % 64);
    let value = data.get(8..).unwrap_or(&[]);
    match parse_range(value, size) {
        RangeResult::Full => {}
        RangeResult::Partial(off, n) => {
            assert!(n > 0 && off.checked_add(n).is_some_and(|e| e <= size));
        }
        RangeResult::Multi(r) => {
            assert!(r.len() >= 2 && r.len() <= spindle_core::limits::MAX_RANGES);
            for &(off, n) in &r {
                assert!(n > 0 && off.checked_add(n).is_some_and(|e| e <= size));
            }
            for w in r.windows(2) {
                assert!(w[0].0 + w[0].1 < w[1].0, "not merged: {r:?}");
            }
        }
        RangeResult::Unsatisfiable => {}
    }
}

/// A request target through the path policy. Input: byte 0 (dotfiles on
/// when odd), then the target. Invariants as for the session's paths,
/// and a directory request names the index file.
pub fn target(data: &[u8]) {
    let dotfiles = data.first().is_some_and(|b| b & 1 == 1);
    let t = data.get(1..).unwrap_or(&[]);
    let Some(p) = path::target_path(t) else {
        return;
    };
    if let Ok(r) = path::resolve(p, dotfiles) {
        check_path(&r.rel, dotfiles);
        if r.is_dir_request {
            assert!(r.rel.ends_with(path::INDEX_FILE));
        }
    }
}

/// The PROXY protocol header at the start of a connection
/// (`spindle_core::proxy`), alone and through a session behind a proxy,
/// fed one byte at a time.
///
/// Invariants: no panic; a header is no longer than its input nor than
/// `MAX_LEN`, parses the same with nothing after it, and every shorter
/// prefix of it is `Incomplete`; `Incomplete` only below `MAX_LEN` bytes;
/// `Invalid` stays invalid whatever follows; the session waits exactly
/// while the parser does, closes without an answer where it says
/// `Invalid`, and takes the header's client (or keeps the proxy's).
pub fn proxy(data: &[u8]) {
    use spindle_core::proxy::{parse, Parsed, MAX_LEN};
    let r = parse(data);
    match r {
        Parsed::Done { len, .. } => {
            assert!(len <= data.len() && len <= MAX_LEN, "{len} bytes");
            assert_eq!(parse(&data[..len]), r, "depends on what follows");
            for n in 0..len {
                assert_eq!(parse(&data[..n]), Parsed::Incomplete, "prefix {n}");
            }
        }
        Parsed::Incomplete => assert!(data.len() < MAX_LEN, "undecided at {}", data.len()),
        Parsed::Invalid => {
            let more = [data, b"\r\n", data].concat();
            assert_eq!(parse(&more), Parsed::Invalid, "invalid, then valid");
        }
    }
    let proxy: std::net::SocketAddr = "10.0.0.2:41000".parse().expect("address");
    let cfg = SessionConfig::default();
    let mut s = Session::behind_proxy(proxy);
    let upto = match r {
        Parsed::Done { len, .. } => len,
        _ => data.len(),
    };
    for (i, &b) in data[..upto].iter().enumerate() {
        s.feed(&[b]);
        match s.next(&cfg) {
            Step::NeedInput => {
                assert_ne!(
                    parse(&data[..=i]),
                    Parsed::Invalid,
                    "waits on invalid input"
                );
                assert!(i + 1 < upto || r != Parsed::Invalid, "waits at the end");
            }
            Step::Close => {
                assert_eq!(r, Parsed::Invalid, "closed after {} bytes", i + 1);
                assert_eq!(parse(&data[..=i]), Parsed::Invalid);
                return;
            }
            other => panic!("{other:?} before the header was complete"),
        }
    }
    match r {
        Parsed::Done { client, .. } => assert_eq!(s.client(), Some(client.unwrap_or(proxy))),
        Parsed::Invalid => panic!("invalid input, yet the session waits"),
        Parsed::Incomplete => assert_eq!(s.client(), Some(proxy)),
    }
}

/// The configuration file: any text gives a configuration or one error
/// line, never a panic.
pub fn config(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Err(e) = spindle::config::Config::from_toml_text(text) {
        assert!(!e.contains('\n'), "a multi-line error: {e}");
    }
}

/// Most ciphertext one input may make the server write: the handshake's
/// flight, an alert, and the responses to what little plaintext a fuzzed
/// stream can carry (it cannot finish a handshake: the client's Finished
/// depends on the server's random).
const MAX_TLS_OUT: usize = 1 << 20;

/// The server's TLS configuration with the test suite's P-256 certificate,
/// built once.
fn tls_config() -> std::sync::Arc<rustls::ServerConfig> {
    static CFG: std::sync::OnceLock<std::sync::Arc<rustls::ServerConfig>> =
        std::sync::OnceLock::new();
    CFG.get_or_init(|| {
        let dir =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../spindle/tests/data/tls");
        spindle::tls::server_config(&[spindle::tls::CertSpec {
            names: Vec::new(),
            cert: dir.join("p256.pem"),
            key: dir.join("p256.key"),
        }])
        .expect("test certificate")
    })
    .clone()
}

/// Bytes from a client on an HTTPS port, split as the first bytes say,
/// through the server's TLS layer (`spindle::conn::tls::Tls`, as both loops
/// use it) into a protocol
/// session, whose answers are encrypted back. Checked: no panic, every
/// batch ends in `Ok`, `Closed` or `Failed` and nothing is fed after
/// `Failed`, and what the server writes stays bounded.
pub fn tls(data: &[u8]) {
    let mut split = num(data, 0, 2) | 1;
    let mut rest = data.get(2..).unwrap_or(&[]);
    let mut conn = spindle::conn::tls::Tls::new(&tls_config()).expect("server connection");
    let cfg = SessionConfig::default();
    let mut s = Session::new();
    let mut out = Vec::new();
    let mut written = 0usize;
    while !rest.is_empty() {
        split = xorshift(split);
        let n = 1 + (split as usize % 512).min(rest.len() - 1);
        out.clear();
        let outcome = conn.receive(&rest[..n], &mut out, |p| s.feed(p));
        rest = &rest[n..];
        // Answer what the session can answer (no file exists here).
        for _ in 0..MAX_STEPS {
            match s.next(&cfg) {
                Step::NeedInput | Step::Close => break,
                Step::Open(req) => {
                    let resp = s
                        .opened(&cfg, &req, Err(OpenError::NotFound))
                        .into_response()
                        .expect("a missing file is answered");
                    conn.seal(&mut out, &resp.front);
                    s.sent();
                }
                Step::List(_) => unreachable!("autoindex is off"),
                Step::Fetch(_) => unreachable!("no origin"),
                Step::Authenticate(_) => unreachable!("no auth rule"),
                Step::Respond(resp) => {
                    conn.seal(&mut out, &resp.front);
                    s.sent();
                }
            }
        }
        written += out.len();
        assert!(
            written <= MAX_TLS_OUT,
            "{written} bytes written for {} in",
            data.len()
        );
        match outcome {
            spindle::tls::Received::Ok => {}
            spindle::tls::Received::Closed | spindle::tls::Received::Failed => return,
        }
    }
}
