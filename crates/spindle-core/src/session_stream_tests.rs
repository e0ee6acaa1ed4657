//! Tests of a session given an HTTP/2 stream's request as fields
//! (`Session::for_stream`, `request::from_fields`), and of the head it
//! answers with (`Fields`).

use super::*;

/// A stream's request, as HTTP/2 gives it: fields, not text.
fn stream_request(method: &[u8], path: &[u8], fields: &[(&[u8], &[u8])]) -> Box<Request> {
    request::from_fields(method, path, Some(b"example.org"), fields.iter().copied()).unwrap()
}

#[test]
fn a_stream_session_serves_a_request_given_as_fields() {
    let cfg = SessionConfig::default();
    let req = stream_request(b"GET", b"/a/b.txt?x=1", &[(b"range", b"bytes=1-2")]);
    let mut s = Session::for_stream(None, req, StreamProtocol::Http2);
    assert_eq!(s.given_request().unwrap().target, b"/a/b.txt?x=1");
    let Step::Open(open) = s.next(&cfg) else {
        panic!("not an open")
    };
    assert_eq!(open.path.as_bytes(), b"a/b.txt");
    let Step::Respond(r) = s.opened(&cfg, &open, Ok(meta(5))) else {
        panic!("no response")
    };
    // The head is fields for HPACK: nothing of HTTP/1.1's in the bytes
    // that go first, and no connection-specific field (RFC 9113 §8.2.2).
    assert_eq!(r.status, 206);
    assert!(r.front.is_empty(), "{:?}", r.front);
    assert_eq!(r.file, Some((1, 2)));
    assert_eq!(r.fields.get("content-length"), Some(&b"2"[..]));
    assert_eq!(r.fields.get("content-range"), Some(&b"bytes 1-2/5"[..]));
    assert!(r.fields.get("connection").is_none());
    assert!(!r.keep_alive);
    s.sent();
    assert!(s.closes_after_response(), "a stream carries one request");
    assert!(matches!(s.next(&cfg), Step::Close));
    assert_eq!(s.log_info().stream, Some(StreamProtocol::Http2));
}

#[test]
fn a_stream_error_page_carries_its_body_without_a_head() {
    let cfg = SessionConfig::default();
    let mut s = Session::for_stream(
        None,
        stream_request(b"DELETE", b"/x", &[]),
        StreamProtocol::Http2,
    );
    let Step::Respond(r) = s.next(&cfg) else {
        panic!("no response")
    };
    assert_eq!(r.status, 405);
    assert!(r.front.starts_with(b"<html>"), "the body alone goes first");
    assert_eq!(r.body_len, r.front.len() as u64);
    assert_eq!(r.fields.get("allow"), Some(&b"GET, HEAD"[..]));
    // HEAD: the same fields, no body.
    let mut s = Session::for_stream(
        None,
        stream_request(b"HEAD", b"/.hidden", &[]),
        StreamProtocol::Http2,
    );
    let Step::Respond(r) = s.next(&cfg) else {
        panic!("no response")
    };
    assert_eq!(r.status, 404);
    assert!(r.front.is_empty());
    assert!(r.fields.get("content-length").is_some());
}

#[test]
fn an_http_1_1_head_is_its_fields_written_out() {
    let cfg = SessionConfig::default();
    let mut s = Session::new();
    s.feed(b"GET /f HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");
    let Step::Open(open) = s.next(&cfg) else {
        panic!("not an open")
    };
    let Step::Respond(r) = s.opened(&cfg, &open, Ok(meta(5))) else {
        panic!("no response")
    };
    let mut written = Vec::new();
    r.fields.write_http1(r.status, &mut written);
    assert_eq!(r.front, written);
    assert_eq!(r.fields.get("connection"), Some(&b"keep-alive"[..]));
}

#[test]
fn requests_given_as_fields_are_checked_as_heads_are() {
    use request::Malformed;
    let ok: &[(&[u8], &[u8])] = &[(b"accept", b"*/*")];
    let from = |m: &[u8], p: &[u8], f: &[(&[u8], &[u8])]| {
        request::from_fields(m, p, None, f.iter().copied()).map(|_| ())
    };
    assert_eq!(from(b"GET", b"/", ok), Ok(()));
    for (name, value) in [
        (&b"x"[..], &b"a\r\nGET / HTTP/1.1"[..]),
        (b"x", b"a\nb"),
        (b"x", b"a\0b"),
        (b"x:y", b"v"),
        (b"x y", b"v"),
        (b"", b"v"),
    ] {
        assert_eq!(
            from(b"GET", b"/", &[(name, value)]),
            Err(Malformed::Field),
            "{name:?}"
        );
    }
    assert_eq!(from(b"GET", b"/a b", ok), Err(Malformed::Target));
    assert_eq!(from(b"", b"/", ok), Err(Malformed::Target));
    let two = [(&b"range"[..], &b"bytes=0-1"[..]); 2];
    assert_eq!(from(b"GET", b"/", &two), Err(Malformed::Field));
    let big = vec![b'v'; limits::DEFAULT_MAX_HEADER_BYTES];
    assert_eq!(
        from(b"GET", b"/", &[(b"x", &big)]),
        Err(Malformed::TooLarge)
    );
    // `:authority` stands for Host; a host field counts only without it.
    let r = request::from_fields(
        b"GET",
        b"/",
        Some(b"a.example"),
        [(&b"host"[..], &b"b"[..])],
    )
    .unwrap();
    assert_eq!(r.host.as_deref(), Some(&b"a.example"[..]));
    let r = request::from_fields(b"GET", b"/", None, [(&b"host"[..], &b"b"[..])]).unwrap();
    assert_eq!(r.host.as_deref(), Some(&b"b"[..]));
}
