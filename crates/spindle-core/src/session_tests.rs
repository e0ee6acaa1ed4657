//! Tests of the session state machine (`session.rs`).

use super::*;

fn meta(size: u64) -> FileMeta {
    FileMeta {
        size,
        mtime_sec: 1_700_000_000,
        mtime_nsec: 5,
        ino: 42,
        kind: FileKind::Regular,
    }
}

/// The proxy's own address, in the PROXY tests.
fn peer() -> SocketAddr {
    "10.0.0.2:41000".parse().unwrap()
}

fn head_str(r: &Response) -> String {
    String::from_utf8_lossy(&r.front).into_owned()
}

/// Plays the driver for one request with precompressed sidecars on:
/// `world` says what each path is (absent: not found). Returns the
/// paths opened, in order, and the response.
fn sidecar_run(accept: &str, method: &str, world: &[(&str, FileMeta)]) -> (Vec<String>, Response) {
    let cfg = SessionConfig {
        precompressed: Encoding::ALL.to_vec(),
        ..SessionConfig::default()
    };
    let mut s = Session::new();
    let ae = if accept.is_empty() {
        String::new()
    } else {
        format!("Accept-Encoding: {accept}\r\n")
    };
    s.feed(format!("{method} /app.js HTTP/1.1\r\nHost: x\r\n{ae}\r\n").as_bytes());
    let Step::Open(mut o) = s.next(&cfg) else {
        panic!("open expected")
    };
    let mut opened = Vec::new();
    loop {
        let p = String::from_utf8(o.path.as_bytes().to_vec()).unwrap();
        let found = world
            .iter()
            .find(|(n, _)| *n == p)
            .map(|(_, m)| *m)
            .ok_or(OpenError::NotFound);
        opened.push(p);
        assert!(opened.len() <= 5, "{opened:?}");
        match s.opened(&cfg, &o, found) {
            Step::Respond(r) => return (opened, r),
            Step::Open(next) => o = next,
            other => panic!("{other:?}"),
        }
    }
}

fn at(size: u64, mtime_sec: i64) -> FileMeta {
    FileMeta {
        mtime_sec,
        ..meta(size)
    }
}

#[test]
fn hosts_pick_roots() {
    let cfg = SessionConfig {
        hosts: vec![
            (b"a.test".to_vec(), 1),
            (b"*.test".to_vec(), 2),
            (b"*.b.test".to_vec(), 3),
            (b"[::1]".to_vec(), 4),
        ],
        ..SessionConfig::default()
    };
    let r = |h: &[u8]| cfg.root_for(Some(h));
    assert_eq!(r(b"a.test"), 1);
    assert_eq!(r(b"A.TEST:80"), 1);
    assert_eq!(r(b"a.test."), 1);
    assert_eq!(r(b"x.a.test"), 2, "the wildcard, not the exact name");
    assert_eq!(r(b"x.b.test"), 3, "the longest wildcard");
    assert_eq!(r(b"test"), 0, "a wildcard does not cover its bare name");
    assert_eq!(r(b"[::1]:8080"), 4);
    assert_eq!(r(b"other"), 0);
    assert_eq!(r(b""), 0);
    assert_eq!(cfg.root_for(None), 0);
    let mut s = Session::new();
    s.feed(b"GET /x HTTP/1.1\r\nHost: q.b.test\r\n\r\n");
    let Step::Open(o) = s.next(&cfg) else {
        panic!()
    };
    assert_eq!((o.root, &o.cache_key()[..3]), (3, &[0, 3, 0][..]));
}

#[test]
fn error_pages_replace_the_built_in_ones() {
    let cfg = SessionConfig {
        error_pages: vec![(404, c"e/404.html".into()), (503, c"e/503.html".into())],
        ..SessionConfig::default()
    };
    let mut s = Session::new();
    s.feed(b"GET /a HTTP/1.1\r\nHost: x\r\n\r\nGET /.git HTTP/1.1\r\nHost: x\r\n\r\nGET /b HTTP/1.1\r\nHost: x\r\n\r\nGET /c HTTP/1.1\r\nHost: x\r\n\r\n");
    // Missing: the page, with 404.
    let Step::Open(o) = s.next(&cfg) else {
        panic!()
    };
    let Step::Open(p) = s.opened(&cfg, &o, Err(OpenError::NotFound)) else {
        panic!()
    };
    assert_eq!(p.path.as_bytes(), b"e/404.html");
    let r = s.opened(&cfg, &p, Ok(meta(70))).into_response().unwrap();
    assert_eq!((r.status, r.file), (404, Some((0, 70))));
    s.sent();
    // Hidden: the same page, without opening the hidden path.
    let Step::Open(p) = s.next(&cfg) else {
        panic!()
    };
    assert_eq!(p.path.as_bytes(), b"e/404.html");
    let r = s.opened(&cfg, &p, Ok(meta(70))).into_response().unwrap();
    assert_eq!(r.status, 404);
    s.sent();
    // Busy: the 503 page keeps its Retry-After.
    let Step::Open(o) = s.next(&cfg) else {
        panic!()
    };
    let Step::Open(p) = s.opened(&cfg, &o, Err(OpenError::Busy)) else {
        panic!()
    };
    let r = s.opened(&cfg, &p, Ok(meta(5))).into_response().unwrap();
    assert_eq!(r.status, 503);
    assert!(head_str(&r).contains("Retry-After: 1\r\n"));
    s.sent();
    // A page that is missing itself: the built-in one, no loop.
    let Step::Open(o) = s.next(&cfg) else {
        panic!()
    };
    let Step::Open(p) = s.opened(&cfg, &o, Err(OpenError::NotFound)) else {
        panic!()
    };
    let r = s
        .opened(&cfg, &p, Err(OpenError::NotFound))
        .into_response()
        .unwrap();
    assert_eq!((r.status, r.file), (404, None));
    assert!(head_str(&r).contains("<h1>404 Not Found</h1>"));
}

#[test]
fn sidecar_chosen_by_accept_encoding() {
    let world = [
        ("app.js", at(1000, 10)),
        ("app.js.br", at(300, 11)),
        ("app.js.gz", at(400, 10)),
    ];
    let (opened, r) = sidecar_run("gzip, br", "GET", &world);
    assert_eq!(opened, ["app.js", "app.js.br"]);
    let h = head_str(&r);
    assert!(h.contains("Content-Encoding: br\r\n"), "{h}");
    assert!(h.contains("Vary: Accept-Encoding\r\n"), "{h}");
    assert!(h.contains("Content-Type: text/javascript"), "{h}");
    assert!(h.contains("Content-Length: 300\r\n"), "{h}");
    assert!(h.contains("-br\"\r\n"), "ETag names the coding: {h}");
    assert_eq!(r.file, Some((0, 300)));

    // gzip preferred by q-value; zstd missing is skipped.
    let (opened, r) = sidecar_run("br;q=0.5, zstd;q=0.9, gzip", "GET", &world);
    assert_eq!(opened, ["app.js", "app.js.gz"]);
    assert!(head_str(&r).contains("Content-Encoding: gzip\r\n"));
    assert_eq!(r.file, Some((0, 400)));
}

#[test]
fn stale_or_missing_sidecars_fall_back_to_the_file() {
    // The .br is older than the file; no .zst; the .gz is a directory.
    let mut dir = at(4096, 20);
    dir.kind = FileKind::Directory;
    let world = [
        ("app.js", at(1000, 10)),
        ("app.js.br", at(300, 9)),
        ("app.js.gz", dir),
    ];
    let (opened, r) = sidecar_run("br, zstd, gzip", "GET", &world);
    assert_eq!(
        opened,
        ["app.js", "app.js.br", "app.js.zst", "app.js.gz", "app.js"]
    );
    let h = head_str(&r);
    assert!(!h.contains("Content-Encoding"), "{h}");
    assert!(h.contains("Vary: Accept-Encoding\r\n"), "{h}");
    assert_eq!(r.file, Some((0, 1000)));
}

#[test]
fn no_acceptable_coding_opens_once() {
    let world = [("app.js", at(1000, 10)), ("app.js.br", at(300, 11))];
    for accept in ["", "identity", "br;q=0", "garbage;;q=x", "deflate"] {
        let (opened, r) = sidecar_run(accept, "GET", &world);
        assert_eq!(opened, ["app.js"], "{accept}");
        let h = head_str(&r);
        assert!(!h.contains("Content-Encoding"), "{h}");
        assert!(h.contains("Vary: Accept-Encoding\r\n"), "{h}");
    }
    // A missing resource: 404 at once, no sidecar looked for.
    let (opened, r) = sidecar_run("br", "GET", &[("app.js.br", at(3, 11))]);
    assert_eq!(opened, ["app.js"]);
    assert_eq!(r.status, 404);
}

#[test]
fn sidecar_head_and_range_apply_to_the_encoded_bytes() {
    let world = [("app.js", at(1000, 10)), ("app.js.br", at(300, 11))];
    let (_, r) = sidecar_run("br", "HEAD", &world);
    assert!(head_str(&r).contains("Content-Length: 300\r\n"));
    assert_eq!(r.file, None);
    let cfg = SessionConfig {
        precompressed: vec![Encoding::Br],
        ..SessionConfig::default()
    };
    let mut s = Session::new();
    s.feed(b"GET /app.js HTTP/1.1\r\nHost: x\r\nAccept-Encoding: br\r\nRange: bytes=-100\r\n\r\n");
    let Step::Open(o) = s.next(&cfg) else {
        panic!()
    };
    let Step::Open(o2) = s.opened(&cfg, &o, Ok(world[0].1)) else {
        panic!()
    };
    assert_eq!(o2.path.as_bytes(), b"app.js.br");
    let r = s.opened(&cfg, &o2, Ok(world[1].1)).into_response().unwrap();
    assert_eq!(r.status, 206);
    assert!(head_str(&r).contains("Content-Range: bytes 200-299/300\r\n"));
    assert_eq!(r.file, Some((200, 100)));
}

#[test]
fn sidecar_conditionals_use_the_coded_etag() {
    let world = [("app.js", at(1000, 10)), ("app.js.br", at(300, 11))];
    let (_, r) = sidecar_run("br", "GET", &world);
    let h = head_str(&r);
    let tag = h
        .lines()
        .find_map(|l| l.strip_prefix("ETag: "))
        .unwrap()
        .to_string();
    let cfg = SessionConfig {
        precompressed: vec![Encoding::Br],
        ..SessionConfig::default()
    };
    let ask = |accept: &str| {
        let mut s = Session::new();
        s.feed(
            format!("GET /app.js HTTP/1.1\r\nHost: x\r\nAccept-Encoding: {accept}\r\nIf-None-Match: {tag}\r\n\r\n")
                .as_bytes(),
        );
        let Step::Open(mut o) = s.next(&cfg) else {
            panic!()
        };
        loop {
            let found = world
                .iter()
                .find(|(n, _)| n.as_bytes() == o.path.as_bytes())
                .map(|(_, m)| *m)
                .ok_or(OpenError::NotFound);
            match s.opened(&cfg, &o, found) {
                Step::Respond(r) => return r,
                Step::Open(n) => o = n,
                _ => panic!(),
            }
        }
    };
    let r = ask("br");
    assert_eq!(r.status, 304);
    assert!(head_str(&r).contains("Vary: Accept-Encoding\r\n"));
    // The identity representation has another tag: a full 200.
    assert_eq!(ask("identity").status, 200);
}

#[test]
fn body_failed_answers_500_and_keeps_the_connection() {
    let cfg = SessionConfig::default();
    let mut s = Session::new();
    s.feed(b"GET /a HTTP/1.1\r\nHost: x\r\n\r\nGET /b HTTP/1.1\r\nHost: x\r\n\r\n");
    let Step::Open(o) = s.next(&cfg) else {
        panic!("open expected")
    };
    let r = s
        .opened(&cfg, &o, Ok(meta(1000)))
        .into_response()
        .expect("response");
    assert_eq!(r.status, 200);
    let e = s.body_failed(&cfg, 5 /* EIO */);
    assert_eq!(e.status, 500);
    assert!(e.keep_alive);
    assert!(e.file.is_none());
    assert!(
        head_str(&e).starts_with("HTTP/1.1 500 "),
        "{}",
        head_str(&e)
    );
    assert_eq!(s.log_info().status, 500);
    s.sent();
    // The next pipelined request is served as usual.
    let Step::Open(o) = s.next(&cfg) else {
        panic!("open expected")
    };
    assert_eq!(o.path.as_bytes(), b"b");
}

#[test]
fn body_failed_on_a_shortage_is_503_and_keeps_close_terms() {
    let cfg = SessionConfig::default();
    let mut s = Session::new();
    s.feed(b"GET /a HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    let Step::Open(o) = s.next(&cfg) else {
        panic!("open expected")
    };
    s.opened(&cfg, &o, Ok(meta(1000)))
        .into_response()
        .expect("response");
    let e = s.body_failed(&cfg, 12 /* ENOMEM */);
    assert_eq!(e.status, 503);
    assert!(!e.keep_alive);
    assert!(
        head_str(&e).contains("Retry-After: 1\r\n"),
        "{}",
        head_str(&e)
    );
    s.sent();
    assert!(matches!(s.next(&cfg), Step::Close));
}

#[test]
fn proxy_header_comes_off_before_the_first_request() {
    let cfg = SessionConfig::default();
    let mut s = Session::behind_proxy(peer());
    assert!(s.mid_request(), "the header is under the header timeout");
    assert!(s.wants_input(&cfg));
    assert!(!s.closes_after_response());
    assert!(matches!(s.next(&cfg), Step::NeedInput));
    s.feed(b"PROXY TCP4 192.0.2.7 10.0.0.1 5");
    assert!(matches!(s.next(&cfg), Step::NeedInput));
    assert_eq!(s.client(), Some(peer()));
    // The header's end and the first request in one piece.
    s.feed(b"6324 443\r\nGET /a HTTP/1.1\r\nHost: x\r\n\r\n");
    let Step::Open(o) = s.next(&cfg) else {
        panic!("open expected")
    };
    assert_eq!(o.path.as_bytes(), b"a");
    assert_eq!(s.client(), Some("192.0.2.7:56324".parse().unwrap()));
    s.opened(&cfg, &o, Ok(meta(3)));
    s.sent();
    // A second PROXY line is a request like any other: refused (505,
    // as httparse reads `443` where the version belongs).
    s.feed(b"PROXY TCP4 198.51.100.1 10.0.0.1 1 2\r\n\r\n");
    let Step::Respond(r) = s.next(&cfg) else {
        panic!("respond expected")
    };
    assert_eq!(r.status, 505);
    assert_eq!(s.client(), Some("192.0.2.7:56324".parse().unwrap()));
}

#[test]
fn proxy_local_keeps_the_peer() {
    let cfg = SessionConfig::default();
    let mut s = Session::behind_proxy(peer());
    let mut h = crate::proxy::V2_SIGNATURE.to_vec();
    h.extend_from_slice(&[0x20, 0x00, 0, 0]);
    h.extend_from_slice(b"GET /a HTTP/1.1\r\nHost: x\r\n\r\n");
    s.feed(&h);
    assert!(matches!(s.next(&cfg), Step::Open(_)));
    assert_eq!(s.client(), Some(peer()));
    assert_eq!(Session::new().client(), None);
}

#[test]
fn missing_or_bad_proxy_header_closes_without_an_answer() {
    let cfg = SessionConfig::default();
    for input in [
        &b"GET /a HTTP/1.1\r\nHost: x\r\n\r\n"[..],
        b"PROXY TCP4 nonsense\r\n",
        b"\r\n\r\n\0\r\nQUIT\n\x21\x11\xff\xff",
    ] {
        let mut s = Session::behind_proxy(peer());
        s.feed(input);
        assert!(matches!(s.next(&cfg), Step::Close));
        assert!(!s.linger_advised());
        assert!(!s.wants_input(&cfg));
    }
    // A plain session takes a PROXY line for a bad request.
    let mut s = Session::new();
    s.feed(b"PROXY TCP4 192.0.2.7 10.0.0.1 56324 443\r\n\r\n");
    let Step::Respond(r) = s.next(&cfg) else {
        panic!("respond expected")
    };
    assert_eq!(r.status, 505);
}

#[test]
fn pipelined_requests_in_order() {
    let cfg = SessionConfig::default();
    let mut s = Session::new();
    s.feed(b"GET /a HTTP/1.1\r\nHost: x\r\n\r\nGET /b HTTP/1.1\r\nHost: x\r\n\r\n");
    for name in ["a", "b"] {
        let Step::Open(o) = s.next(&cfg) else {
            panic!()
        };
        assert_eq!(o.path.as_bytes(), name.as_bytes());
        let r = s
            .opened(&cfg, &o, Ok(meta(3)))
            .into_response()
            .expect("response");
        assert_eq!(r.status, 200);
        assert_eq!(r.file, Some((0, 3)));
        s.sent();
    }
    assert!(matches!(s.next(&cfg), Step::NeedInput));
    assert!(!s.mid_request());
}

#[test]
fn body_is_discarded_across_feeds() {
    let cfg = SessionConfig::default();
    let mut s = Session::new();
    s.feed(b"POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n0123");
    let Step::Respond(r) = s.next(&cfg) else {
        panic!()
    };
    assert_eq!(r.status, 405);
    assert!(head_str(&r).contains("Allow: GET, HEAD"));
    assert!(r.keep_alive);
    s.sent();
    assert!(matches!(s.next(&cfg), Step::NeedInput));
    s.feed(b"456789GET /b HTTP/1.1\r\nHost: x\r\n\r\n");
    let Step::Open(o) = s.next(&cfg) else {
        panic!()
    };
    assert_eq!(o.path.as_bytes(), b"b");
}

#[test]
fn closes_after_response_follows_keep_alive() {
    let cfg = SessionConfig::default();
    let mut s = Session::new();
    assert!(!s.closes_after_response());
    s.feed(b"GET /a HTTP/1.1\r\nHost: x\r\n\r\n");
    let Step::Open(o) = s.next(&cfg) else {
        panic!()
    };
    assert!(!s.closes_after_response(), "HTTP/1.1 keeps the connection");
    s.opened(&cfg, &o, Ok(meta(3)))
        .into_response()
        .expect("response");
    assert!(!s.closes_after_response());
    s.sent();
    s.feed(b"GET /b HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    let Step::Open(o) = s.next(&cfg) else {
        panic!()
    };
    assert!(
        s.closes_after_response(),
        "Connection: close, before the open"
    );
    s.opened(&cfg, &o, Ok(meta(3)))
        .into_response()
        .expect("response");
    assert!(s.closes_after_response());
    s.sent();
    assert!(s.closes_after_response());
    assert!(matches!(s.next(&cfg), Step::Close));

    let mut s = Session::new();
    s.feed(b"GET /a HTTP/1.0\r\n\r\n");
    assert!(matches!(s.next(&cfg), Step::Open(_)));
    assert!(s.closes_after_response(), "HTTP/1.0 without keep-alive");
}

#[test]
fn chunked_body_closes() {
    let cfg = SessionConfig::default();
    let mut s = Session::new();
    s.feed(
        b"GET /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
    );
    let Step::Open(o) = s.next(&cfg) else {
        panic!()
    };
    let r = s
        .opened(&cfg, &o, Ok(meta(3)))
        .into_response()
        .expect("response");
    assert!(!r.keep_alive);
    assert!(head_str(&r).contains("Connection: close"));
    s.sent();
    assert!(matches!(s.next(&cfg), Step::Close));
}

#[test]
fn directory_redirect_and_errors() {
    let cfg = SessionConfig::default();
    let mut s = Session::new();
    s.feed(b"GET /d?x=1 HTTP/1.1\r\nHost: x\r\n\r\n");
    let Step::Open(o) = s.next(&cfg) else {
        panic!()
    };
    let mut m = meta(0);
    m.kind = FileKind::Directory;
    let r = s.opened(&cfg, &o, Ok(m)).into_response().expect("response");
    assert_eq!(r.status, 301);
    assert!(head_str(&r).contains("Location: /d/?x=1\r\n"));
    s.sent();
    s.feed(b"GET /../x HTTP/1.1\r\nHost: x\r\n\r\n");
    let Step::Respond(r) = s.next(&cfg) else {
        panic!()
    };
    assert_eq!(r.status, 400);
    assert!(!r.keep_alive);
}

#[test]
fn autoindex_lists_a_directory_without_index() {
    use crate::listing::{render, Entry, Format};
    let on = SessionConfig {
        autoindex: true,
        ..SessionConfig::default()
    };
    let ask = |cfg: &SessionConfig, target: &str, extra: &str| {
        let mut s = Session::new();
        let extra = if extra.is_empty() {
            String::new()
        } else {
            format!("{extra}\r\n")
        };
        s.feed(format!("GET {target} HTTP/1.1\r\nHost: x\r\n{extra}\r\n").as_bytes());
        let Step::Open(o) = s.next(cfg) else { panic!() };
        let step = s.opened(cfg, &o, Err(OpenError::NotFound));
        (s, step)
    };
    // Off by default: 404.
    let (_, st) = ask(&SessionConfig::default(), "/d/", "");
    assert_eq!(st.into_response().unwrap().status, 404);
    // Only for a directory request.
    let (_, st) = ask(&on, "/d/index.html", "");
    assert_eq!(st.into_response().unwrap().status, 404);
    let (_, st) = ask(&on, "/", "");
    let Step::List(l) = st else { panic!() };
    assert_eq!(
        (l.path.as_bytes(), l.dir(), l.format),
        (&b"."[..], &b""[..], Format::Html)
    );
    let (mut s, st) = ask(&on, "/a/b/", "Accept: application/json");
    let Step::List(l) = st else { panic!() };
    assert_eq!((l.dir(), l.format), (&b"a/b"[..], Format::Json));
    let entries = vec![Entry {
        name: b"f".to_vec(),
        kind: FileKind::Regular,
        size: 1,
        mtime_sec: 0,
    }];
    let listing = render(l.dir(), entries, false, l.format, false);
    let r = s.listed(&on, Ok(&listing)).into_response().unwrap();
    let h = head_str(&r);
    assert_eq!(r.status, 200);
    assert!(h.contains("Content-Type: application/json\r\n"), "{h}");
    assert!(h.contains("Vary: Accept\r\n"), "{h}");
    assert!(h.ends_with(std::str::from_utf8(&listing.body).unwrap()));
    assert!(r.file.is_none());
    s.sent();
    // If-None-Match: 304 without a body; HEAD: no body.
    let (mut s, _) = ask(
        &on,
        "/a/b/",
        &format!(
            "If-None-Match: {}\r\nAccept: application/json",
            listing.etag
        ),
    );
    let r = s.listed(&on, Ok(&listing)).into_response().unwrap();
    assert_eq!((r.status, r.body_len), (304, 0));
    assert!(head_str(&r).contains(&format!("ETag: {}\r\n", listing.etag)));
    let mut s = Session::new();
    s.feed(b"HEAD /a/ HTTP/1.1\r\nHost: x\r\n\r\n");
    let Step::Open(o) = s.next(&on) else { panic!() };
    assert!(matches!(
        s.opened(&on, &o, Err(OpenError::NotFound)),
        Step::List(_)
    ));
    let r = s.listed(&on, Ok(&listing)).into_response().unwrap();
    assert_eq!((r.status, r.body_len), (200, 0));
    assert!(head_str(&r).ends_with("\r\n\r\n"));
    // A directory that cannot be read.
    let (mut s, _) = ask(&on, "/locked/", "");
    let r = s
        .listed(&on, Err(OpenError::Forbidden))
        .into_response()
        .unwrap();
    assert_eq!(r.status, 403);
}

#[test]
fn conditionals() {
    let cfg = SessionConfig::default();
    let tag = response::etag(&meta(5));
    let lm = crate::date::fmt_unix(1_700_000_000);
    let cases = [
        (format!("If-None-Match: {tag}"), 304),
        (format!("If-None-Match: W/{tag}"), 304),
        ("If-None-Match: \"nope\"".to_string(), 200),
        (format!("If-Modified-Since: {lm}"), 304),
        (format!("If-Match: {tag}"), 200),
        ("If-Match: \"nope\"".to_string(), 412),
        (
            "If-Unmodified-Since: Sun, 06 Nov 1994 08:49:37 GMT".to_string(),
            412,
        ),
        ("Range: bytes=1-2".to_string(), 206),
        (format!("Range: bytes=1-2\r\nIf-Range: {tag}"), 206),
        ("Range: bytes=1-2\r\nIf-Range: \"old\"".to_string(), 200),
        (format!("Range: bytes=1-2\r\nIf-Range: {lm}"), 206),
        ("Range: bytes=9-".to_string(), 416),
    ];
    for (hdr, want) in cases {
        let mut s = Session::new();
        s.feed(format!("GET /f HTTP/1.1\r\nHost: x\r\n{hdr}\r\n\r\n").as_bytes());
        let Step::Open(o) = s.next(&cfg) else {
            panic!()
        };
        let r = s
            .opened(&cfg, &o, Ok(meta(5)))
            .into_response()
            .expect("response");
        assert_eq!(r.status, want, "{hdr}");
        if want == 206 {
            assert!(head_str(&r).contains("Content-Range: bytes 1-2/5\r\n"));
            assert_eq!(r.file, Some((1, 2)));
        }
        if want == 416 {
            assert!(head_str(&r).contains("Content-Range: bytes */5\r\n"));
        }
    }
}

/// Garbage, truncated and mutated requests never panic the core, and
/// every step it asks for is one a driver can carry out.
#[test]
fn random_input_never_panics() {
    let cfg = SessionConfig::default();
    let seeds: &[&[u8]] = &[
        b"GET /a%20b?x HTTP/1.1\r\nHost: x\r\nRange: bytes=1-2\r\nIf-None-Match: \"a\", W/\"b\"\r\n\r\n",
        b"HEAD / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n",
        b"POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc",
        b"GET http://h/..%2f HTTP/1.1\r\nHost: x\r\nIf-Range: Sun, 06 Nov 1994 08:49:37 GMT\r\n\r\n",
    ];
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut rnd = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for round in 0..20_000 {
        let mut input = seeds[round % seeds.len()].repeat(1 + (rnd() % 3) as usize);
        for _ in 0..(rnd() % 8) {
            let at = (rnd() as usize) % input.len();
            match rnd() % 4 {
                0 => input[at] = rnd() as u8,
                1 => input.truncate(at),
                2 => input.insert(at, rnd() as u8),
                _ => input.insert(at, b"\r\n%.:-,"[(rnd() % 7) as usize]),
            }
            if input.is_empty() {
                break;
            }
        }
        let mut s = if round % 5 == 0 {
            input.splice(0..0, b"PROXY TCP6 ::1 ::2 1 2\r\n".iter().copied());
            Session::behind_proxy(peer())
        } else {
            Session::new()
        };
        for chunk in input.chunks(1 + (rnd() % 64) as usize) {
            s.feed(chunk);
            for _ in 0..64 {
                match s.next(&cfg) {
                    Step::NeedInput | Step::Close => break,
                    Step::Open(o) => {
                        assert!(!o.path.as_bytes().is_empty());
                        assert!(!o.path.as_bytes().starts_with(b"/"));
                        assert!(!o
                            .path
                            .as_bytes()
                            .split(|&b| b == b'/')
                            .any(|seg| seg == b".."));
                        let r = s
                            .opened(&cfg, &o, Ok(meta(rnd() % 300)))
                            .into_response()
                            .expect("response");
                        if let Some((off, len)) = r.file {
                            assert!(len > 0 && off + len <= 300);
                        }
                        s.sent();
                    }
                    Step::List(_) => panic!("next() gave a listing"),
                    Step::Fetch(_) => panic!("next() gave a fetch"),
                    Step::Authenticate(_) => panic!("no auth rule"),
                    Step::Respond(r) => {
                        assert!(r.front.starts_with(b"HTTP/1.1 "));
                        s.sent();
                    }
                }
            }
        }
    }
}

/// A session config with these rules.
fn with_rules(rules: Vec<crate::rules::Rule>) -> SessionConfig {
    SessionConfig {
        rules: std::sync::Arc::new(crate::rules::Rules::new(rules).unwrap()),
        ..SessionConfig::default()
    }
}

fn private_rule() -> crate::rules::Rule {
    crate::rules::Rule {
        pattern: "/private/**".into(),
        allow: vec![proxy::Cidr::parse("10.0.0.0/8").unwrap()],
        ..Default::default()
    }
}

#[test]
fn address_rules_refuse_before_opening() {
    let cfg = with_rules(vec![private_rule()]);
    for (peer, target, refused) in [
        ("10.1.1.1:5", "/private/a.txt", false),
        ("192.0.2.1:5", "/private/a.txt", true),
        // The normalised path is what matches.
        ("192.0.2.1:5", "/%70rivate/a.txt", true),
        ("192.0.2.1:5", "//private/./a.txt", true),
        ("192.0.2.1:5", "/private/", true),
        ("192.0.2.1:5", "/public.txt", false),
    ] {
        let mut s = Session::new();
        s.set_peer(Some(peer.parse().unwrap()));
        s.feed(format!("HEAD {target} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes());
        match s.next(&cfg) {
            Step::Respond(r) if refused => {
                assert_eq!(r.status, 403, "{target}");
                assert!(r.keep_alive);
            }
            Step::Open(_) if !refused => {}
            other => panic!("{peer} {target}: {other:?}"),
        }
    }
    // No peer given: refused, not let through.
    let mut s = Session::new();
    s.feed(b"GET /private/a.txt HTTP/1.1\r\nHost: x\r\n\r\n");
    assert!(matches!(s.next(&cfg), Step::Respond(r) if r.status == 403));
    // Behind a proxy, the client its header names is checked.
    let mut s = Session::behind_proxy("10.0.0.2:1".parse().unwrap());
    s.feed(b"PROXY TCP4 192.0.2.9 10.0.0.1 5 80\r\nGET /private/a HTTP/1.1\r\nHost: x\r\n\r\n");
    assert!(matches!(s.next(&cfg), Step::Respond(r) if r.status == 403));
    let mut s = Session::behind_proxy("192.0.2.9:1".parse().unwrap());
    s.feed(b"PROXY TCP4 10.9.9.9 10.0.0.1 5 80\r\nGET /private/a HTTP/1.1\r\nHost: x\r\n\r\n");
    assert!(matches!(s.next(&cfg), Step::Open(_)));
}

#[test]
fn a_refusal_opens_the_configured_page() {
    let cfg = SessionConfig {
        error_pages: vec![(403, CString::new("errors/403.html").unwrap())],
        ..with_rules(vec![private_rule()])
    };
    let mut s = Session::new();
    s.set_peer(Some("192.0.2.1:5".parse().unwrap()));
    s.feed(b"GET /private/a.txt HTTP/1.1\r\nHost: x\r\n\r\n");
    let Step::Open(o) = s.next(&cfg) else {
        panic!("the page is opened")
    };
    assert_eq!(o.path.as_bytes(), b"errors/403.html");
    let Step::Respond(r) = s.opened(&cfg, &o, Ok(meta(7))) else {
        panic!("respond expected")
    };
    assert_eq!((r.status, r.body_len), (403, 7));
}

#[test]
fn redirect_answers_before_any_open() {
    let cfg = with_rules(vec![crate::rules::Rule {
        pattern: "/old/**".into(),
        redirect: Some(crate::rules::Redirect::parse("308 /new{path}?{query}").unwrap()),
        ..Default::default()
    }]);
    let mut s = Session::new();
    s.feed(b"GET /old/a%20b?x=1 HTTP/1.1\r\nHost: x\r\n\r\n");
    let Step::Respond(r) = s.next(&cfg) else {
        panic!("redirect expected")
    };
    assert_eq!(r.status, 308);
    let h = head_str(&r);
    assert!(h.starts_with("HTTP/1.1 308 Permanent Redirect\r\n"), "{h}");
    assert!(h.contains("\r\nLocation: /new/old/a%20b?x=1\r\n"), "{h}");
    assert_eq!(s.log_info().status, 308);
}

#[test]
fn fallback_on_not_found_only() {
    let cfg = with_rules(vec![crate::rules::Rule {
        pattern: "/app/**".into(),
        fallback: Some(CString::new("app/index.html").unwrap()),
        ..Default::default()
    }]);
    let run = |target: &str, first: Result<FileMeta, OpenError>, second| {
        let mut s = Session::new();
        s.feed(format!("GET {target} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes());
        let Step::Open(o) = s.next(&cfg) else {
            panic!("open expected")
        };
        match s.opened(&cfg, &o, first) {
            Step::Respond(r) => (None, r),
            Step::Open(o2) => {
                let p = String::from_utf8(o2.path.as_bytes().to_vec()).unwrap();
                let Step::Respond(r) = s.opened(&cfg, &o2, second) else {
                    panic!("one fallback only")
                };
                (Some(p), r)
            }
            other => panic!("{other:?}"),
        }
    };
    let (p, r) = run("/app/users/7", Err(OpenError::NotFound), Ok(meta(10)));
    assert_eq!(p.as_deref(), Some("app/index.html"));
    assert_eq!(r.status, 200);
    assert!(
        head_str(&r).contains("Content-Type: text/html"),
        "{}",
        head_str(&r)
    );
    // A missing fallback is a 404, not a loop.
    let (p, r) = run("/app/x", Err(OpenError::NotFound), Err(OpenError::NotFound));
    assert!(p.is_some());
    assert_eq!(r.status, 404);
    // Forbidden stays forbidden; a found file is itself.
    let (p, r) = run("/app/secret", Err(OpenError::Forbidden), Ok(meta(1)));
    assert_eq!((p, r.status), (None, 403));
    let (p, r) = run("/app/a.js", Ok(meta(3)), Ok(meta(1)));
    assert_eq!((p, r.status), (None, 200));
    // Outside the glob: no fallback.
    let (p, r) = run("/other", Err(OpenError::NotFound), Ok(meta(1)));
    assert_eq!((p, r.status), (None, 404));
}

#[path = "session_auth_tests.rs"]
mod auth;

#[path = "session_stream_tests.rs"]
mod stream;

#[path = "session_compress_tests.rs"]
mod compress_tests;

#[path = "session_edge_tests.rs"]
mod edge_tests;
