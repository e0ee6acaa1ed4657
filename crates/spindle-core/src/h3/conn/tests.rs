//! The connection's rules as stream bytes in and events and stream bytes
//! out, named by RFC 9114's (and RFC 9204's) sections; the limits on
//! hostile clients; and every input read in one-byte pieces as whole.

use super::*;
use crate::h3::frame::{decode_varint, kind, put_settings, put_varint, stream_type};

/// Our control stream, as the driver opens it (the first server uni).
const CTRL: u64 = 3;
/// The client's control stream and QPACK streams.
const PEER_CTRL: u64 = 2;
const PEER_ENC: u64 = 6;
const PEER_DEC: u64 = 10;

// Bytes the client sends.

fn frame_of(kind: u64, payload: &[u8]) -> Vec<u8> {
    let mut v = Vec::new();
    put_varint(&mut v, kind);
    put_varint(&mut v, payload.len() as u64);
    v.extend_from_slice(payload);
    v
}

fn varint(v: u64) -> Vec<u8> {
    let mut out = Vec::new();
    put_varint(&mut out, v);
    out
}

/// A unidirectional stream's start: its type, then `rest`.
fn uni(ty: u64, rest: &[u8]) -> Vec<u8> {
    let mut v = varint(ty);
    v.extend_from_slice(rest);
    v
}

fn settings() -> Vec<u8> {
    let mut v = Vec::new();
    put_settings(&mut v, &[(frame::setting::QPACK_MAX_TABLE_CAPACITY, 0)]);
    v
}

fn data(payload: &[u8]) -> Vec<u8> {
    frame_of(kind::DATA, payload)
}

fn headers(section: &[u8]) -> Vec<u8> {
    frame_of(kind::HEADERS, section)
}

fn goaway(id: u64) -> Vec<u8> {
    frame_of(kind::GOAWAY, &varint(id))
}

/// A QPACK integer (RFC 9204 §4.1.1) with a `prefix`-bit prefix.
fn qint(out: &mut Vec<u8>, flags: u8, prefix: u32, v: usize) {
    let max = (1usize << prefix) - 1;
    if v < max {
        out.push(flags | v as u8);
        return;
    }
    out.push(flags | max as u8);
    let mut rest = v - max;
    while rest >= 0x80 {
        out.push(rest as u8 | 0x80);
        rest >>= 7;
    }
    out.push(rest as u8);
}

/// A field section of literals with literal names, not Huffman-coded,
/// names as given (so a test can send uppercase).
fn section(fields: &[(&str, &str)]) -> Vec<u8> {
    let mut s = vec![0, 0];
    for (n, v) in fields {
        qint(&mut s, 0x20, 3, n.len());
        s.extend_from_slice(n.as_bytes());
        qint(&mut s, 0, 7, v.len());
        s.extend_from_slice(v.as_bytes());
    }
    s
}

const M: (&str, &str) = (":method", "GET");
const S: (&str, &str) = (":scheme", "https");
const P: (&str, &str) = (":path", "/");
const A: (&str, &str) = (":authority", "example.com");

fn get(path: &str) -> Vec<u8> {
    headers(&section(&[M, S, (":path", path), A]))
}

fn post(content_length: Option<&str>) -> Vec<u8> {
    let mut f = vec![(":method", "POST"), S, P, A];
    if let Some(cl) = content_length {
        f.push(("content-length", cl));
    }
    headers(&section(&f))
}

fn cat(parts: &[&[u8]]) -> Vec<u8> {
    parts.concat()
}

// Bytes we send, read back.

/// The frames in `bytes`, DATA payloads included, as (type, payload).
fn frames(mut bytes: &[u8]) -> Vec<(u64, Vec<u8>)> {
    let mut v = Vec::new();
    while !bytes.is_empty() {
        let (t, a) = decode_varint(bytes).expect("a frame type");
        let (len, b) = decode_varint(&bytes[a..]).expect("a frame length");
        let end = a + b + len as usize;
        v.push((t, bytes[a + b..end].to_vec()));
        bytes = &bytes[end..];
    }
    v
}

fn decoded(section: &[u8]) -> Vec<(String, String)> {
    let mut v = Vec::new();
    Decoder::new()
        .decode(section, qpack::MAX_FIELD_SECTION_SIZE, &mut |f| {
            v.push((
                String::from_utf8(f.name.to_vec()).unwrap(),
                String::from_utf8(f.value.to_vec()).unwrap(),
            ))
        })
        .expect("our section decodes");
    v
}

/// A connection whose control stream is open and drained, with the
/// client's control stream and SETTINGS in.
struct T {
    c: H3Conn,
    /// Events taken while feeding (when `recv` stalled).
    seen: Vec<Event>,
}

impl T {
    fn bare() -> T {
        let mut c = H3Conn::new();
        c.control_opened(CTRL);
        let n = c.out(CTRL).bytes.len();
        c.advance_out(CTRL, n);
        T {
            c,
            seen: Vec::new(),
        }
    }

    fn new() -> T {
        let mut t = T::bare();
        t.send(PEER_CTRL, &uni(stream_type::CONTROL, &settings()), false);
        assert_eq!(t.events(), vec![]);
        t
    }

    /// Feeds all of `bytes` (draining events as a driver would when
    /// `recv` stalls).
    fn send(&mut self, id: u64, bytes: &[u8], fin: bool) {
        let mut rest = bytes;
        for _ in 0..100_000 {
            let n = self.c.recv(id, rest, fin);
            rest = &rest[n..];
            if rest.is_empty() {
                return;
            }
            assert!(n > 0 || !self.c.events.is_empty() || self.c.out_len > 0);
            self.seen.extend(std::iter::from_fn(|| self.c.poll_event()));
            let ids: Vec<u64> = self.c.writable().collect();
            for w in ids {
                let n = self.c.out(w).bytes.len();
                self.c.advance_out(w, n);
            }
        }
        panic!("recv made no progress");
    }

    /// Feeds `bytes` one byte at a time, the FIN with the last.
    fn send_bytewise(&mut self, id: u64, bytes: &[u8], fin: bool) {
        for (i, b) in bytes.iter().enumerate() {
            self.send(id, std::slice::from_ref(b), fin && i + 1 == bytes.len());
        }
        if bytes.is_empty() && fin {
            self.send(id, &[], true);
        }
    }

    fn events(&mut self) -> Vec<Event> {
        let mut v = std::mem::take(&mut self.seen);
        v.extend(std::iter::from_fn(|| self.c.poll_event()));
        v
    }

    fn requests(&mut self) -> Vec<Request> {
        self.events()
            .into_iter()
            .filter_map(|e| match e {
                Event::Request(r) => Some(r),
                _ => None,
            })
            .collect()
    }

    /// The connection ended with `code`.
    fn closed(&mut self, code: ErrorCode) {
        let e = self.events();
        assert_eq!(e.last(), Some(&Event::Close { code }), "{e:?}");
        assert!(self.c.is_closed());
    }

    /// Stream `id` was reset with `code`, and the connection lives.
    fn reset(&mut self, id: u64, code: ErrorCode) {
        let e = self.events();
        assert!(
            e.contains(&Event::Reset {
                stream_id: id,
                code
            }),
            "{e:?}"
        );
        self.alive();
    }

    /// The connection lives: a request on a new stream is answered.
    fn alive(&mut self) {
        assert!(!self.c.is_closed());
        let id = self.c.bidi.next;
        self.send(id, &get("/alive"), true);
        let r = self.requests();
        assert_eq!(r.len(), 1, "{r:?}");
        assert_eq!(r[0].path(), "/alive");
        assert!(self.c.send_headers(id, 204, &[], true));
        self.written(id);
    }

    /// What `out(id)` holds, taken; and its FIN.
    fn written(&mut self, id: u64) -> (Vec<u8>, bool) {
        let o = self.c.out(id);
        let (bytes, fin) = (o.bytes.to_vec(), o.fin);
        self.c.advance_out(id, bytes.len());
        (bytes, fin)
    }
}

// §6.2.1: our control stream.

#[test]
fn s6_2_1_our_control_stream_starts_with_its_type_and_settings() {
    let mut c = H3Conn::new();
    assert_eq!(c.writable().count(), 0, "nothing before the stream opens");
    c.control_opened(CTRL);
    assert_eq!(c.writable().collect::<Vec<_>>(), vec![CTRL]);
    let o = c.out(CTRL);
    assert!(!o.fin);
    assert_eq!(o.bytes[0], stream_type::CONTROL as u8);
    let f = frames(&o.bytes[1..]);
    assert_eq!(f.len(), 1);
    assert_eq!(f[0].0, kind::SETTINGS);
    let mut ours = Vec::new();
    frame::put_our_settings(&mut ours);
    assert_eq!(&o.bytes[1..], &ours[..]);
    // Written in two pieces.
    c.advance_out(CTRL, 2);
    assert_eq!(c.out(CTRL).bytes, &ours[1..]);
    c.advance_out(CTRL, ours.len() - 1);
    assert_eq!(c.writable().count(), 0);
    assert_eq!(c.buffered(), 0);
}

// §4.1, §4.3.1: requests.

#[test]
fn s4_1_a_get_is_a_request_with_its_method_path_and_authority() {
    let mut t = T::new();
    t.send(0, &get("/a/b?c"), true);
    let r = t.requests();
    assert_eq!(r.len(), 1);
    let r = &r[0];
    assert_eq!(r.stream_id, 0);
    assert_eq!(r.method(), "GET");
    assert_eq!(r.scheme(), "https");
    assert_eq!(r.path(), "/a/b?c");
    assert_eq!(r.authority(), Some("example.com"));
    assert!(r.end_stream);
    let core = r.to_core().expect("the core takes it");
    assert_eq!(core.method, crate::request::Method::Get);
    assert_eq!(core.host.as_deref(), Some(&b"example.com"[..]));
    assert_eq!(t.c.open_streams(), 1);
}

#[test]
fn s4_1_a_request_waits_for_its_fin_and_comes_once() {
    let mut t = T::new();
    t.send(0, &get("/"), false);
    assert_eq!(t.requests(), vec![], "held until the stream ends");
    t.send(0, &[], true);
    assert_eq!(t.requests().len(), 1);
    t.send(0, &[], true);
    assert_eq!(t.events(), vec![], "the FIN again is nothing");
    // A request before the client's control stream is served too.
    let mut t = T::bare();
    t.send(0, &get("/"), true);
    assert_eq!(t.requests().len(), 1);
}

#[test]
fn s4_1_a_response_is_headers_then_data_that_our_parsers_read_back() {
    let mut t = T::new();
    t.send(0, &get("/"), true);
    t.requests();
    let fields: [(&[u8], &[u8]); 3] = [
        (b"Content-Type", b"text/plain"),
        (b"content-length", b"11"),
        (b"X-Custom", b"a value"),
    ];
    assert!(t.c.send_headers(0, 200, &fields, false));
    assert_eq!(t.c.writable().collect::<Vec<_>>(), vec![0]);
    let (head, fin) = t.written(0);
    assert!(!fin);
    let h1 = t.c.data_header(0, 5).expect("a body");
    let h2 = t.c.data_header(0, 6).expect("a body");
    assert!(t.c.finish(0));
    let (rest, fin) = t.written(0);
    assert!(fin && rest.is_empty(), "a FIN alone");
    // The stream as the client reads it.
    let stream = cat(&[&head, h1.as_bytes(), b"hello", h2.as_bytes(), b" world"]);
    let f = frames(&stream);
    assert_eq!(f.len(), 3);
    assert_eq!(f[0].0, kind::HEADERS);
    assert_eq!(
        decoded(&f[0].1),
        vec![
            (":status".into(), "200".into()),
            ("content-type".into(), "text/plain".into()),
            ("content-length".into(), "11".into()),
            ("x-custom".into(), "a value".into()),
        ]
    );
    assert_eq!((f[1].0, &f[1].1[..]), (kind::DATA, &b"hello"[..]));
    assert_eq!((f[2].0, &f[2].1[..]), (kind::DATA, &b" world"[..]));
    // And by frame::parse, as a stream's buffered bytes.
    assert!(matches!(
        frame::parse(&stream),
        frame::Parsed::Frame(frame::Frame::Headers(_), _)
    ));
    assert_eq!(t.c.open_streams(), 0);
    assert_eq!(t.c.data_header(0, 1), None, "gone");
}

#[test]
fn s4_1_a_response_without_a_body_ends_with_its_headers() {
    let mut t = T::new();
    t.send(0, &get("/"), true);
    t.requests();
    let mut core = crate::Fields::new();
    core.push("Content-Length", b"0");
    assert!(t.c.send_fields(0, 404, &core, true));
    let (head, fin) = t.written(0);
    assert!(fin);
    let f = frames(&head);
    assert_eq!(
        decoded(&f[0].1),
        vec![
            (":status".into(), "404".into()),
            ("content-length".into(), "0".into())
        ]
    );
    assert_eq!(t.c.open_streams(), 0);
    assert!(!t.c.send_headers(0, 200, &[], true), "gone");
}

fn malformed(fields: &[(&str, &str)]) {
    let mut t = T::new();
    t.send(0, &headers(&section(fields)), true);
    t.reset(0, ErrorCode::MessageError);
    assert_eq!(t.c.writable().count(), 0, "{fields:?}");
}

#[test]
fn s4_1_2_malformed_requests_reset_their_stream_with_h3_message_error() {
    malformed(&[M, S, P, A, ("X-Upper", "1")]);
    malformed(&[M, S, P, A, (":unknown", "1")]);
    malformed(&[M, S, P, ("a", "1"), A]);
    malformed(&[M, S, P, A, ("connection", "keep-alive")]);
    malformed(&[M, S, P, A, ("transfer-encoding", "chunked")]);
    malformed(&[M, S, P, A, ("te", "gzip")]);
    malformed(&[M, S, A]);
    malformed(&[S, P, A]);
    malformed(&[M, S, P, P, A]);
    malformed(&[M, S, (":path", "relative"), A]);
    malformed(&[M, S, P, A, ("x", " padded")]);
    malformed(&[M, S, P, (":authority", "a.example"), ("host", "b.example")]);
    malformed(&[M, S, P, A, ("content-length", "1x")]);
    // §4.3.1: an https request names its authority, and not emptily.
    malformed(&[M, S, P]);
    malformed(&[M, S, P, (":authority", "")]);
    malformed(&[M, S, P, ("host", "")]);
    // ... by Host alone, too.
    let mut t = T::new();
    t.send(
        0,
        &headers(&section(&[M, S, P, ("host", "h.example")])),
        true,
    );
    assert_eq!(
        t.requests()[0].to_core().unwrap().host.as_deref(),
        Some(&b"h.example"[..])
    );
}

#[test]
fn s4_1_2_a_body_unlike_its_content_length_is_malformed() {
    for (cl, body) in [("3", &b"four"[..]), ("5", b"four"), ("0", b"x")] {
        let mut t = T::new();
        t.send(0, &cat(&[&post(Some(cl)), &data(body)]), true);
        t.reset(0, ErrorCode::MessageError);
    }
    let mut t = T::new();
    t.send(0, &cat(&[&post(Some("4")), &data(b"four")]), true);
    let r = t.requests();
    assert_eq!(r.len(), 1);
    assert!(r[0].end_stream, "the body was read before the request came");
}

#[test]
fn s4_1_2_a_stream_that_ends_before_its_headers_is_h3_request_incomplete() {
    let mut t = T::new();
    t.send(0, &[], true);
    t.reset(0, ErrorCode::RequestIncomplete);
    // A frame of an unknown type is no request either.
    let mut t = T::new();
    t.send(0, &frame_of(0x21, b"grease"), true);
    t.reset(0, ErrorCode::RequestIncomplete);
}

#[test]
fn s4_1_bodies_are_dropped_and_trailers_end_them() {
    let mut t = T::new();
    let trailers = headers(&section(&[("x-checksum", "abc")]));
    let grease = frame_of(0x21 + 0x1f, b"ignored");
    let req = cat(&[
        &post(None),
        &data(b"part one"),
        &grease,
        &data(b""),
        &data(b"two"),
        &trailers,
    ]);
    t.send(0, &req, false);
    let r = t.requests();
    assert_eq!(r.len(), 1, "the trailers end the body");
    assert!(r[0].end_stream);
    // Nothing but unknown frames after the trailers (§4.1).
    t.send(0, &grease, true);
    assert_eq!(t.events(), vec![]);
    assert!(t.c.send_headers(0, 204, &[], true));
    assert_eq!(t.c.open_streams(), 0);
}

#[test]
fn s4_1_trailers_with_pseudo_header_fields_are_malformed() {
    let mut t = T::new();
    let trailers = headers(&section(&[(":path", "/")]));
    t.send(0, &cat(&[&post(None), &data(b"x"), &trailers]), true);
    t.reset(0, ErrorCode::MessageError);
}

#[test]
fn a_body_past_the_discard_limit_hands_the_request_out_and_is_stopped_when_the_response_ends() {
    let mut t = T::new();
    t.send(0, &post(None), false);
    let chunk = vec![b'x'; 16 << 10];
    let mut sent = 0;
    while sent <= crate::limits::MAX_DISCARD_BODY {
        assert_eq!(t.requests(), vec![]);
        t.send(0, &data(&chunk), false);
        sent += chunk.len() as u64;
    }
    let r = t.requests();
    assert_eq!(r.len(), 1);
    assert!(!r[0].end_stream, "the body goes on");
    assert!(t.c.buffered() < 8 << 10, "no body held: {}", t.c.buffered());
    // A large content-length is handed out at once.
    t.send(4, &post(Some("1000000")), false);
    assert_eq!(t.requests().len(), 1);
    // The response ends first: §4.1, the client may stop sending.
    assert!(t.c.send_headers(0, 413, &[], true));
    assert_eq!(
        t.events(),
        vec![Event::StopSending {
            stream_id: 0,
            code: ErrorCode::NoError
        }]
    );
    let (_, fin) = t.written(0);
    assert!(fin, "the response goes out whole");
    // What still comes is ignored.
    t.send(0, &data(b"more"), true);
    assert_eq!(t.events(), vec![]);
    t.alive();
}

#[test]
fn s4_4_connect_is_answered_405() {
    let mut t = T::new();
    let connect = headers(&section(&[(":method", "CONNECT"), A]));
    t.send(0, &connect, true);
    assert_eq!(t.events(), vec![], "the driver never sees it");
    let (head, fin) = t.written(0);
    assert!(fin);
    assert_eq!(
        decoded(&frames(&head)[0].1),
        vec![(":status".into(), "405".into())]
    );
}

// §4.2.2, §7.1, §10.5: field sections past the limits.

#[test]
fn s4_2_2_a_field_section_past_our_limit_is_answered_431_and_a_frame_past_ours_is_h3_excessive_load(
) {
    // Decoded past SETTINGS_MAX_FIELD_SECTION_SIZE: 431, the stream
    // alone (no dynamic table to fall out of step with).
    let big = "v".repeat(qpack::MAX_FIELD_SECTION_SIZE);
    let mut t = T::new();
    t.send(0, &headers(&section(&[M, S, P, A, ("x-big", &big)])), false);
    assert_eq!(
        t.events(),
        vec![Event::StopSending {
            stream_id: 0,
            code: ErrorCode::NoError
        }]
    );
    let (head, fin) = t.written(0);
    assert!(fin);
    assert_eq!(
        decoded(&frames(&head)[0].1),
        vec![(":status".into(), "431".into())]
    );
    t.alive();
    // Too many fields: the same.
    let many: Vec<(&str, &str)> = std::iter::repeat_n(("x", "y"), qpack::MAX_FIELDS).collect();
    let mut t = T::new();
    t.send(
        0,
        &headers(&section(&[&[M, S, P, A][..], &many].concat())),
        true,
    );
    assert_eq!(t.events(), vec![]);
    assert!(t.written(0).1);
    // A HEADERS frame longer than frame::MAX_FRAME_PAYLOAD: from its
    // header alone, a connection error, H3_EXCESSIVE_LOAD.
    let mut t = T::new();
    let mut head = varint(kind::HEADERS);
    put_varint(&mut head, MAX_FRAME_PAYLOAD + 1);
    t.send(0, &head, false);
    t.closed(ErrorCode::ExcessiveLoad);
}

#[test]
fn rfc9204_2_2_3_a_dynamic_table_reference_is_qpack_decompression_failed() {
    let mut t = T::new();
    // Required Insert Count 1.
    t.send(0, &headers(&[1, 0, 0xd1]), true);
    t.closed(ErrorCode::QpackDecompressionFailed);
}

// §4.1, §7.2: frames where they may not be.

fn conn_error_on_request(bytes: &[u8], fin: bool, code: ErrorCode) {
    let mut t = T::new();
    t.send(0, bytes, fin);
    t.closed(code);
}

#[test]
fn s4_1_frames_out_of_order_or_out_of_place_on_a_request_stream_close_the_connection() {
    use ErrorCode::FrameUnexpected as U;
    let trailers = headers(&section(&[("x", "y")]));
    conn_error_on_request(&data(b"x"), false, U);
    conn_error_on_request(&cat(&[&get("/"), &trailers, &data(b"x")]), false, U);
    conn_error_on_request(&cat(&[&get("/"), &trailers, &trailers]), false, U);
    conn_error_on_request(&cat(&[&get("/"), &settings()]), false, U);
    conn_error_on_request(&goaway(0), false, U);
    conn_error_on_request(&frame_of(kind::MAX_PUSH_ID, &[0]), false, U);
    conn_error_on_request(&frame_of(kind::PUSH_PROMISE, &[0, 0, 0]), false, U);
    // §7.2.8: HTTP/2's frame types.
    conn_error_on_request(&frame_of(0x6, &[0; 8]), false, U);
}

#[test]
fn s7_1_a_stream_that_ends_inside_a_frame_is_h3_frame_error() {
    let g = get("/");
    conn_error_on_request(&g[..g.len() - 1], true, ErrorCode::FrameError);
    let mut body = cat(&[&post(None), &data(b"abc")]);
    body.pop();
    conn_error_on_request(&body, true, ErrorCode::FrameError);
    conn_error_on_request(&cat(&[&get("/"), &[0x21]]), true, ErrorCode::FrameError);
}

// §6.2.1, §7.2.4: the client's control stream.

fn conn_error_on_control(bytes: &[u8], code: ErrorCode) {
    let mut t = T::bare();
    t.send(PEER_CTRL, &uni(stream_type::CONTROL, bytes), false);
    t.closed(code);
}

#[test]
fn s6_2_1_the_control_stream_starts_with_settings() {
    conn_error_on_control(&goaway(0), ErrorCode::MissingSettings);
    conn_error_on_control(&frame_of(0x21, b""), ErrorCode::MissingSettings);
    conn_error_on_control(&data(b""), ErrorCode::MissingSettings);
    // §7.2.4: once.
    conn_error_on_control(
        &cat(&[&settings(), &settings()]),
        ErrorCode::FrameUnexpected,
    );
    // §7.2.4.1: HTTP/2's settings are an error.
    let mut h2 = Vec::new();
    put_settings(&mut h2, &[(0x3, 100)]);
    conn_error_on_control(&h2, ErrorCode::SettingsError);
}

#[test]
fn s7_2_request_frames_on_the_control_stream_are_h3_frame_unexpected() {
    for f in [
        data(b"x"),
        get("/"),
        frame_of(kind::PUSH_PROMISE, &[0, 0, 0]),
    ] {
        conn_error_on_control(&cat(&[&settings(), &f]), ErrorCode::FrameUnexpected);
    }
}

#[test]
fn s6_2_1_a_second_control_stream_is_h3_stream_creation_error() {
    let mut t = T::new();
    t.send(14, &uni(stream_type::CONTROL, &settings()), false);
    t.closed(ErrorCode::StreamCreationError);
}

#[test]
fn s6_2_1_closing_a_control_stream_is_h3_closed_critical_stream() {
    let mut t = T::new();
    t.send(PEER_CTRL, &[], true);
    t.closed(ErrorCode::ClosedCriticalStream);
    let mut t = T::new();
    t.c.stream_reset(PEER_CTRL, 0x100);
    t.closed(ErrorCode::ClosedCriticalStream);
    let mut t = T::new();
    t.c.stop_sending(CTRL, 0x100);
    t.closed(ErrorCode::ClosedCriticalStream);
}

#[test]
fn s5_2_the_clients_goaway_is_reported_and_may_not_grow() {
    let mut t = T::new();
    t.send(PEER_CTRL, &goaway(8), false);
    assert_eq!(t.events(), vec![Event::GoAway { push_id: 8 }]);
    t.alive();
    t.send(PEER_CTRL, &cat(&[&goaway(4), &goaway(4)]), false);
    assert_eq!(t.events(), vec![Event::GoAway { push_id: 4 }], "once");
    t.send(PEER_CTRL, &goaway(5), false);
    t.closed(ErrorCode::IdError);
}

#[test]
fn s7_2_3_and_s7_2_7_push_ids() {
    let max_push = |id: u64| frame_of(kind::MAX_PUSH_ID, &varint(id));
    let mut t = T::new();
    t.send(
        PEER_CTRL,
        &cat(&[&max_push(3), &max_push(3), &max_push(7)]),
        false,
    );
    t.alive();
    // §7.2.7: MAX_PUSH_ID never shrinks.
    t.send(PEER_CTRL, &max_push(6), false);
    t.closed(ErrorCode::IdError);
    // §7.2.3: we never promise, so nothing can be cancelled.
    let mut t = T::new();
    t.send(
        PEER_CTRL,
        &cat(&[&max_push(3), &frame_of(kind::CANCEL_PUSH, &[1])]),
        false,
    );
    t.closed(ErrorCode::IdError);
}

#[test]
fn s7_2_8_unknown_frames_on_the_control_stream_are_passed_over() {
    let mut t = T::new();
    let big = vec![0u8; 100_000];
    t.send(PEER_CTRL, &frame_of(0x21 + 2 * 0x1f, &big), false);
    assert!(t.c.buffered() < 8 << 10);
    t.alive();
}

// §6.2, RFC 9204 §4.2: the other unidirectional streams.

#[test]
fn s6_2_2_a_push_stream_from_a_client_is_h3_stream_creation_error() {
    let mut t = T::new();
    t.send(14, &uni(stream_type::PUSH, &[0]), false);
    t.closed(ErrorCode::StreamCreationError);
}

#[test]
fn s6_2_3_streams_of_other_types_are_stopped_and_dropped() {
    for ty in [0x21, 0x21 + 0x1f * 1000, 0x54] {
        let mut t = T::new();
        t.send(14, &uni(ty, b"whatever this is"), false);
        assert_eq!(
            t.events(),
            vec![Event::StopSending {
                stream_id: 14,
                code: ErrorCode::StreamCreationError
            }]
        );
        t.send(14, b"more", true);
        t.c.stream_reset(14, 0x21);
        assert_eq!(t.events(), vec![]);
        t.alive();
    }
    // §6.2: a stream may end, or be reset, before its type.
    let mut t = T::new();
    t.send(14, &[0x40], true);
    t.c.stream_reset(18, 0);
    assert_eq!(t.events(), vec![]);
    t.alive();
}

#[test]
fn rfc9204_4_2_one_encoder_and_one_decoder_stream_and_neither_closes() {
    let mut t = T::new();
    t.send(PEER_ENC, &uni(stream_type::QPACK_ENCODER, &[]), false);
    t.send(PEER_DEC, &uni(stream_type::QPACK_DECODER, &[]), false);
    t.alive();
    let mut t2 = T::new();
    t2.send(PEER_ENC, &uni(stream_type::QPACK_ENCODER, &[]), false);
    t2.send(14, &uni(stream_type::QPACK_ENCODER, &[]), false);
    t2.closed(ErrorCode::StreamCreationError);
    t.send(14, &uni(stream_type::QPACK_DECODER, &[]), false);
    t.closed(ErrorCode::StreamCreationError);
    let mut t = T::new();
    t.send(PEER_ENC, &uni(stream_type::QPACK_ENCODER, &[]), true);
    t.closed(ErrorCode::ClosedCriticalStream);
    let mut t = T::new();
    t.send(PEER_DEC, &uni(stream_type::QPACK_DECODER, &[]), false);
    t.c.stream_reset(PEER_DEC, 0);
    t.closed(ErrorCode::ClosedCriticalStream);
}

#[test]
fn rfc9204_4_3_the_encoder_stream_may_only_set_a_capacity_of_0() {
    let mut t = T::new();
    t.send(
        PEER_ENC,
        &uni(stream_type::QPACK_ENCODER, &[0x20, 0x20]),
        false,
    );
    t.alive();
    for bad in [
        &[0x21][..],               // capacity 1
        &[0x3f, 0x01],             // capacity 32
        &[0xc0 | 17, 0x01, b'x'],  // insert, static name reference
        &[0x41, b'a', 0x01, b'b'], // insert, literal name
        &[0x00],                   // duplicate
    ] {
        let mut t = T::new();
        t.send(PEER_ENC, &uni(stream_type::QPACK_ENCODER, bad), false);
        t.closed(ErrorCode::QpackEncoderStreamError);
    }
}

#[test]
fn rfc9204_4_4_the_decoder_stream_may_only_cancel_streams() {
    let mut t = T::new();
    // Stream Cancellations of streams 4 and 200 (a multi-byte integer).
    t.send(
        PEER_DEC,
        &uni(stream_type::QPACK_DECODER, &[0x44, 0x7f, 0x89, 0x01]),
        false,
    );
    t.alive();
    for bad in [
        &[0x80][..], // Section Acknowledgment
        &[0x01],     // Insert Count Increment
        &[0x00],     // ... of 0
        &[
            0x7f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
        ], // past 62 bits
    ] {
        let mut t = T::new();
        t.send(PEER_DEC, &uni(stream_type::QPACK_DECODER, bad), false);
        t.closed(ErrorCode::QpackDecoderStreamError);
    }
}

// The client's resets and stops.

#[test]
fn a_request_the_client_resets_or_stops_is_dropped() {
    let mut t = T::new();
    t.send(0, &get("/"), true);
    t.requests();
    t.c.stream_reset(0, ErrorCode::RequestCancelled.code());
    t.reset(0, ErrorCode::RequestCancelled);
    assert!(!t.c.send_headers(0, 200, &[], true));
    let mut t = T::new();
    t.send(0, &get("/"), true);
    t.requests();
    assert!(t.c.send_headers(0, 200, &[], false));
    t.c.stop_sending(0, ErrorCode::RequestCancelled.code());
    t.reset(0, ErrorCode::RequestCancelled);
    assert_eq!(t.c.out(0).bytes, &[] as &[u8], "its HEADERS dropped");
    assert_eq!(t.c.data_header(0, 10), None);
    assert!(!t.c.finish(0));
    // Reset before anything arrived: our side is closed too.
    let mut t = T::new();
    t.c.stream_reset(0, 0);
    t.reset(0, ErrorCode::RequestCancelled);
    t.send(0, &get("/late"), true);
    assert_eq!(t.events(), vec![], "a closed stream's bytes are dropped");
}

#[test]
fn the_driver_may_reset_a_stream() {
    let mut t = T::new();
    t.send(0, &get("/"), true);
    t.requests();
    assert!(t.c.send_headers(0, 200, &[], false));
    t.c.reset(0, ErrorCode::InternalError);
    t.reset(0, ErrorCode::InternalError);
    assert_eq!(t.c.open_streams(), 0);
}

// Limits on hostile clients.

#[test]
fn a_stream_flood_past_the_concurrent_limit_is_refused_with_h3_request_rejected() {
    let mut t = T::new();
    for i in 0..MAX_CONCURRENT_STREAMS as u64 {
        t.send(4 * i, &get("/"), false);
    }
    assert_eq!(t.c.open_streams(), MAX_CONCURRENT_STREAMS);
    let over = 4 * MAX_CONCURRENT_STREAMS as u64;
    t.send(over, &get("/"), true);
    assert_eq!(
        t.events(),
        vec![Event::Reset {
            stream_id: over,
            code: ErrorCode::RequestRejected
        }]
    );
    t.send(over, &data(b"more"), true);
    assert_eq!(t.events(), vec![], "refused once");
    // One ends: there is room again.
    t.send(0, &[], true);
    assert_eq!(t.requests().len(), 1);
    assert!(t.c.send_headers(0, 204, &[], true));
    t.alive();
}

#[test]
fn streams_quic_opened_whose_bytes_are_late_count_and_are_served() {
    let mut t = T::new();
    t.send(8, &get("/8"), true);
    assert_eq!(t.c.bidi.gaps.len(), 2);
    t.send(0, &get("/0"), true);
    t.send(4, &get("/4"), true);
    let paths: Vec<String> = t.requests().iter().map(|r| r.path().to_string()).collect();
    assert_eq!(paths, ["/8", "/0", "/4"]);
    // A stream id past what the limit lets QUIC open: H3_ID_ERROR.
    t.send(16 + 4 * MAX_CONCURRENT_STREAMS as u64, &get("/"), true);
    t.closed(ErrorCode::IdError);
}

#[test]
fn partial_frames_on_many_streams_are_bounded_by_max_buffered() {
    let mut t = T::new();
    let mut head = varint(kind::HEADERS);
    put_varint(&mut head, MAX_FRAME_PAYLOAD);
    head.extend(vec![0u8; MAX_FRAME_PAYLOAD as usize - 1]);
    let fit = MAX_BUFFERED / head.len();
    for i in 0..fit as u64 {
        t.send(4 * i, &head, false);
        assert!(!t.c.is_closed());
    }
    assert!(t.c.partial <= MAX_BUFFERED);
    t.send(4 * fit as u64, &head, false);
    t.closed(ErrorCode::ExcessiveLoad);
}

#[test]
fn recv_stops_taking_bytes_while_events_wait() {
    let mut t = T::new();
    let many: Vec<u8> = (0..2 * MAX_PENDING_EVENTS as u64)
        .rev()
        .flat_map(goaway)
        .collect();
    let n = t.c.recv(PEER_CTRL, &many, false);
    assert!(n < many.len());
    assert_eq!(t.c.events.len(), MAX_PENDING_EVENTS);
    assert_eq!(t.c.recv(0, &get("/"), true), 0, "a new stream waits too");
    assert_eq!(t.c.recv(PEER_CTRL, &many[n..], false), 0);
    t.send(PEER_CTRL, &many[n..], false);
    assert_eq!(t.events().len(), 2 * MAX_PENDING_EVENTS);
}

// §5.2: graceful shutdown.

#[test]
fn s5_2_shutdown_sends_goaway_refuses_later_streams_and_closes_when_the_rest_are_done() {
    let mut t = T::new();
    t.send(0, &get("/0"), true);
    t.send(8, &get("/8"), true);
    assert_eq!(t.requests().len(), 2);
    t.c.shutdown();
    let (ctrl, _) = t.written(CTRL);
    assert_eq!(frames(&ctrl), vec![(kind::GOAWAY, varint(12))]);
    // Past the GOAWAY: refused. Below it (4, opened by QUIC with 8, its
    // bytes late): served.
    t.send(12, &get("/12"), true);
    t.send(4, &get("/4"), true);
    let e = t.events();
    assert_eq!(e.len(), 2, "{e:?}");
    assert_eq!(
        e[0],
        Event::Reset {
            stream_id: 12,
            code: ErrorCode::RequestRejected
        }
    );
    assert!(matches!(&e[1], Event::Request(r) if r.path() == "/4"));
    for id in [0, 8] {
        assert!(t.c.send_headers(id, 204, &[], true));
    }
    assert_eq!(t.events(), vec![]);
    assert!(t.c.send_headers(4, 200, &[], false));
    assert!(t.c.data_header(4, 3).is_some());
    assert!(t.c.finish(4));
    assert_eq!(
        t.events(),
        vec![Event::Close {
            code: ErrorCode::NoError
        }]
    );
    assert!(t.c.is_closed());
    // What the responses wrote is still to be written before closing.
    assert_eq!(t.c.writable().collect::<Vec<_>>(), vec![0, 4, 8]);
    t.c.shutdown();
    assert_eq!(t.events(), vec![], "once");
}

#[test]
fn s5_2_shutdown_with_nothing_in_flight_closes_at_once() {
    let mut t = T::new();
    t.c.shutdown();
    assert_eq!(
        t.events(),
        vec![Event::Close {
            code: ErrorCode::NoError
        }]
    );
    assert_eq!(frames(&t.written(CTRL).0), vec![(kind::GOAWAY, varint(0))]);
}

// One byte at a time.

/// Stream ids and what arrives on them (or what we write on them), with
/// the FIN.
type Script = Vec<(u64, Vec<u8>, bool)>;

/// A whole connection's input, stream by stream: every case above that
/// reads to a result, fed whole and in one-byte pieces.
fn scripts() -> Vec<Script> {
    let ctrl = uni(stream_type::CONTROL, &settings());
    let trailers = headers(&section(&[("x-trailer", "1")]));
    let grease = frame_of(0x21, b"grease");
    let huffman_get = {
        let mut s = vec![0, 0, 0xd1, 0xd7, 0x50];
        s.extend_from_slice(&[
            0x8c, 0xf1, 0xe3, 0xc2, 0xe5, 0xf2, 0x3a, 0x6b, 0xa0, 0xab, 0x90, 0xf4, 0xff,
        ]);
        s.extend_from_slice(&[0x51, 0x02, b'/', b'h']);
        headers(&s)
    };
    vec![
        vec![
            (PEER_CTRL, cat(&[&ctrl, &grease, &goaway(100)]), false),
            (PEER_ENC, uni(stream_type::QPACK_ENCODER, &[0x20]), false),
            (
                PEER_DEC,
                uni(stream_type::QPACK_DECODER, &[0x7f, 0x81, 0x01, 0x44]),
                false,
            ),
            (14, uni(0x21 + 0x1f * 3, b"grease stream"), true),
            (0, cat(&[&get("/a"), &grease]), true),
            (
                4,
                cat(&[
                    &post(Some("6")),
                    &data(b"abc"),
                    &grease,
                    &data(b"def"),
                    &trailers,
                ]),
                true,
            ),
            (8, huffman_get, true),
            (12, headers(&section(&[M, S, P, ("Upper", "x")])), true),
            (16, vec![], true),
            (20, headers(&section(&[(":method", "CONNECT"), A])), false),
        ],
        vec![(PEER_CTRL, cat(&[&ctrl, &settings()]), false)],
        vec![(0, cat(&[&get("/"), &trailers, &data(b"x")]), false)],
        vec![(
            PEER_ENC,
            uni(stream_type::QPACK_ENCODER, &[0x20, 0x3f, 0x00]),
            false,
        )],
        vec![(0, cat(&[&post(None), &data(b"cut")])[..20].to_vec(), true)],
    ]
}

fn run(script: &Script, bytewise: bool) -> (Vec<Event>, Script) {
    let mut t = T::bare();
    for (id, bytes, fin) in script {
        if bytewise {
            t.send_bytewise(*id, bytes, *fin);
        } else {
            t.send(*id, bytes, *fin);
        }
    }
    let written: Vec<u64> = t.c.writable().collect();
    let out = written
        .into_iter()
        .map(|id| {
            let (b, fin) = t.written(id);
            (id, b, fin)
        })
        .collect();
    (t.events(), out)
}

#[test]
fn bytes_one_at_a_time_read_as_the_whole() {
    for script in scripts() {
        let whole = run(&script, false);
        assert!(!whole.0.is_empty());
        assert_eq!(run(&script, true), whole);
    }
    // The first script's results, to be sure they are what they should.
    let (e, out) = run(&scripts()[0], false);
    let requests: Vec<&Request> = e
        .iter()
        .filter_map(|e| match e {
            Event::Request(r) => Some(r),
            _ => None,
        })
        .collect();
    let paths: Vec<&str> = requests.iter().map(|r| r.path()).collect();
    assert_eq!(paths, ["/a", "/", "/h"]);
    assert_eq!(requests[2].authority(), Some("www.example.com"));
    assert!(e.contains(&Event::GoAway { push_id: 100 }));
    assert!(e.contains(&Event::Reset {
        stream_id: 12,
        code: ErrorCode::MessageError
    }));
    assert!(e.contains(&Event::Reset {
        stream_id: 16,
        code: ErrorCode::RequestIncomplete
    }));
    assert!(e.contains(&Event::StopSending {
        stream_id: 14,
        code: ErrorCode::StreamCreationError
    }));
    assert!(out.iter().any(|(id, _, fin)| *id == 20 && *fin), "the 405");
}
