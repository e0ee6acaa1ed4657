//! The connection's rules as byte sequences in and frames out: one test
//! (or a few) per case of h2spec's `http2` suite (RFC 9113 §3-8, named by
//! its section numbers), plus the limits on hostile clients.

use super::*;
use crate::h2::frame::{flag, kind};

/// A frame as the tests build and read them.
#[derive(Debug, Clone, PartialEq, Eq)]
struct F {
    kind: u8,
    flags: u8,
    id: u32,
    payload: Vec<u8>,
}

fn raw(kind: u8, flags: u8, id: u32, payload: &[u8]) -> Vec<u8> {
    let mut v = frame::FrameHeader {
        len: payload.len() as u32,
        kind,
        flags,
        stream_id: id,
    }
    .encode()
    .to_vec();
    v.extend_from_slice(payload);
    v
}

/// A GET's header block, literals without indexing.
fn get(path: &str) -> Vec<u8> {
    block(&[
        (":method", "GET"),
        (":scheme", "https"),
        (":path", path),
        (":authority", "example.com"),
    ])
}

/// Fields as literals without indexing and without Huffman, names as
/// given (so a test can send uppercase).
fn block(fields: &[(&str, &str)]) -> Vec<u8> {
    let mut b = Vec::new();
    for (n, v) in fields {
        b.push(0);
        b.push(n.len() as u8);
        b.extend_from_slice(n.as_bytes());
        b.push(v.len() as u8);
        b.extend_from_slice(v.as_bytes());
    }
    b
}

fn headers(id: u32, block: &[u8], end_stream: bool) -> Vec<u8> {
    let f = flag::END_HEADERS | if end_stream { flag::END_STREAM } else { 0 };
    raw(kind::HEADERS, f, id, block)
}

fn data(id: u32, payload: &[u8], end_stream: bool) -> Vec<u8> {
    raw(
        kind::DATA,
        if end_stream { flag::END_STREAM } else { 0 },
        id,
        payload,
    )
}

fn settings(params: &[(u16, u32)]) -> Vec<u8> {
    let mut v = Vec::new();
    frame::put_settings(&mut v, params);
    v
}

fn window_update(id: u32, inc: u32) -> Vec<u8> {
    raw(kind::WINDOW_UPDATE, 0, id, &inc.to_be_bytes())
}

fn rst(id: u32, code: u32) -> Vec<u8> {
    raw(kind::RST_STREAM, 0, id, &code.to_be_bytes())
}

/// A connection past the preface and the SETTINGS exchange, its own
/// SETTINGS drained.
struct T {
    c: H2Conn,
    now: u64,
}

impl T {
    fn new() -> T {
        T::with(H2Settings::default())
    }

    fn with(cfg: H2Settings) -> T {
        let mut t = T {
            c: H2Conn::new(cfg),
            now: 0,
        };
        let mut start = PREFACE.to_vec();
        start.extend(settings(&[]));
        t.send(&start);
        let out = t.frames();
        assert_eq!(out[0].kind, kind::SETTINGS);
        assert_eq!(out.last().unwrap().kind, kind::SETTINGS);
        assert_eq!(out.last().unwrap().flags, flag::ACK);
        t
    }

    /// Feeds all of `bytes` (draining as a driver would when it stalls).
    fn send(&mut self, bytes: &[u8]) {
        let mut rest = bytes;
        for _ in 0..10_000 {
            let n = self.c.feed(rest, self.now);
            rest = &rest[n..];
            if rest.is_empty() || self.c.is_closed() {
                return;
            }
            assert!(n > 0 || !self.c.out().is_empty() || !self.c.events.is_empty());
            let o = self.c.out().len();
            self.c.advance_out(o);
            while self.c.poll_event().is_some() {}
        }
        panic!("feed made no progress");
    }

    /// Frames written since the last call.
    fn frames(&mut self) -> Vec<F> {
        let out = self.c.out().to_vec();
        self.c.advance_out(out.len());
        let mut v = Vec::new();
        let mut pos = 0;
        while pos < out.len() {
            let h = frame::FrameHeader::parse(out[pos..pos + 9].try_into().unwrap());
            let end = pos + 9 + h.len as usize;
            v.push(F {
                kind: h.kind,
                flags: h.flags,
                id: h.stream_id,
                payload: out[pos + 9..end].to_vec(),
            });
            pos = end;
        }
        v
    }

    fn events(&mut self) -> Vec<Event> {
        std::iter::from_fn(|| self.c.poll_event()).collect()
    }

    /// The connection ended with GOAWAY(code).
    fn goaway(&mut self, code: ErrorCode) {
        let f = self.frames();
        let g = f
            .iter()
            .find(|f| f.kind == kind::GOAWAY)
            .unwrap_or_else(|| panic!("no GOAWAY in {f:?}"));
        assert_eq!(
            u32::from_be_bytes(g.payload[4..8].try_into().unwrap()),
            code as u32,
            "GOAWAY's code"
        );
        assert!(self.c.is_closed());
        assert!(self.events().contains(&Event::Close));
    }

    /// Stream `id` was reset with `code`, and the connection lives.
    fn reset(&mut self, id: u32, code: ErrorCode) {
        let f = self.frames();
        let r = f
            .iter()
            .find(|f| f.kind == kind::RST_STREAM)
            .unwrap_or_else(|| panic!("no RST_STREAM in {f:?}"));
        assert_eq!(r.id, id);
        assert_eq!(
            u32::from_be_bytes(r.payload[..4].try_into().unwrap()),
            code as u32
        );
        assert!(!self.c.is_closed());
    }

    /// Nothing but what `frames` shows, and the connection is alive: a
    /// PING is answered.
    fn alive(&mut self) {
        self.frames();
        self.send(&raw(kind::PING, 0, 0, b"abcdefgh"));
        let f = self.frames();
        assert_eq!(
            f,
            vec![F {
                kind: kind::PING,
                flags: flag::ACK,
                id: 0,
                payload: b"abcdefgh".to_vec()
            }]
        );
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
}

// §3.4, §3.5: the preface.

#[test]
fn s3_5_preface_and_settings_are_answered() {
    let mut t = T::new();
    t.alive();
}

#[test]
fn s3_5_a_bad_preface_is_goaway_protocol_error() {
    let mut c = H2Conn::new(H2Settings::default());
    c.advance_out(c.out().len());
    assert_eq!(c.feed(b"GET / HTTP/1.1\r\n\r\n", 0), 18);
    let mut t = T { c, now: 0 };
    t.goaway(ErrorCode::ProtocolError);
}

#[test]
fn s3_5_the_preface_may_come_in_pieces() {
    let mut c = H2Conn::new(H2Settings::default());
    for b in PREFACE.iter() {
        assert_eq!(c.feed(&[*b], 0), 1);
    }
    assert!(!c.is_closed());
    let s = settings(&[]);
    assert_eq!(c.feed(&s[..5], 0), 0, "half a frame header waits");
}

#[test]
fn s3_4_the_first_frame_must_be_settings() {
    let mut c = H2Conn::new(H2Settings::default());
    let mut b = PREFACE.to_vec();
    b.extend(raw(kind::PING, 0, 0, b"abcdefgh"));
    c.feed(&b, 0);
    T { c, now: 0 }.goaway(ErrorCode::ProtocolError);
}

// §4.1 frame format; §4.2 frame size; §4.3 header compression.

#[test]
fn s4_1_unknown_types_flags_and_the_reserved_bit_are_ignored() {
    let mut t = T::new();
    t.send(&raw(0x42, 0xff, 0, b"whatever"));
    t.send(&raw(kind::PING, 0xfe, 0, b"abcdefgh"));
    assert_eq!(t.frames()[0].flags, flag::ACK);
    let mut h = headers(1, &get("/"), true);
    h[5] |= 0x80; // the reserved bit
    t.send(&h);
    assert_eq!(t.requests()[0].stream_id, 1);
    t.alive();
}

#[test]
fn s4_2_a_data_frame_of_max_frame_size_is_fine() {
    let mut t = T::new();
    t.send(&headers(1, &get("/"), false));
    t.send(&data(1, &[0; 16_384], false));
    t.alive();
}

#[test]
fn s4_2_a_frame_over_max_frame_size_is_frame_size_error() {
    let mut t = T::new();
    t.send(&headers(1, &get("/"), false));
    t.send(&data(1, &[0; 16_385], false));
    t.goaway(ErrorCode::FrameSizeError);
    let mut t = T::new();
    let mut big = get("/");
    big.extend(block(&[("x", "y")]).repeat(16_384 / 5));
    t.send(&headers(1, &big, true));
    t.goaway(ErrorCode::FrameSizeError);
}

#[test]
fn s4_3_a_bad_header_block_is_compression_error() {
    let mut t = T::new();
    t.send(&headers(1, &[0x80], true)); // index 0
    t.goaway(ErrorCode::CompressionError);
}

/// h2spec's HPACK cases, each through a connection.
#[test]
fn hpack_errors_are_compression_errors() {
    let size_update_after_a_field: Vec<u8> = [&get("/")[..], &[0x20]].concat();
    for bad in [
        vec![0xbe],                                     // 2.3.3: past both tables
        vec![0x3f, 0xe2, 0x1f],                         // 4.2: a table over ours
        vec![0x00, 0x84, 0xff, 0xff, 0xff, 0xff, 0x00], // 5.2: EOS
        vec![0x00, 0x81, 0x18, 0x00],                   // 5.2: padding not ones
        vec![0x00, 0x82, 0x1f, 0xff, 0x00],             // 5.2: padding over 7 bits
        vec![0x80],                                     // 6.1: index 0
        size_update_after_a_field,                      // 6.3
    ] {
        let mut t = T::new();
        t.send(&headers(1, &bad, true));
        t.goaway(ErrorCode::CompressionError);
    }
}

#[test]
fn s4_3_no_other_frame_inside_a_header_block() {
    for other in [
        raw(kind::PRIORITY, 0, 1, &[0, 0, 0, 0, 16]),
        headers(3, &get("/"), true),
        data(1, b"x", false),
        raw(0x42, 0, 0, b""), // §5.5: an unknown frame too
    ] {
        let mut t = T::new();
        t.send(&raw(kind::HEADERS, flag::END_STREAM, 1, &get("/")));
        t.send(&other);
        t.goaway(ErrorCode::ProtocolError);
    }
}

// §5.1 stream states.

#[test]
fn s5_1_frames_on_idle_streams_are_protocol_errors() {
    for f in [
        data(1, b"x", false),
        rst(1, 0),
        window_update(1, 1),
        raw(kind::CONTINUATION, flag::END_HEADERS, 1, &get("/")),
    ] {
        let mut t = T::new();
        t.send(&f);
        t.goaway(ErrorCode::ProtocolError);
    }
}

#[test]
fn s5_1_half_closed_remote_data_and_headers_are_stream_closed() {
    for f in [data(1, b"x", false), headers(1, &get("/"), true)] {
        let mut t = T::new();
        t.send(&headers(1, &get("/"), true));
        t.send(&f);
        t.reset(1, ErrorCode::StreamClosed);
        assert!(t.events().contains(&Event::StreamReset { stream_id: 1 }));
        t.alive();
    }
}

#[test]
fn s5_1_after_the_clients_reset_data_is_stream_closed_and_headers_ends_it() {
    let mut t = T::new();
    t.send(&headers(1, &get("/"), true));
    t.send(&rst(1, 8));
    assert!(t.events().contains(&Event::StreamReset { stream_id: 1 }));
    t.send(&data(1, b"x", false));
    t.reset(1, ErrorCode::StreamClosed);
    t.send(&headers(1, &get("/"), true));
    t.goaway(ErrorCode::StreamClosed);
}

#[test]
fn s5_1_after_both_ends_data_is_stream_closed_and_headers_ends_it() {
    let mut t = T::new();
    t.send(&headers(1, &get("/"), true));
    assert!(t.c.send_headers(1, 204, &[], true));
    assert_eq!(t.c.open_streams(), 0);
    t.frames();
    t.send(&data(1, b"x", true));
    t.reset(1, ErrorCode::StreamClosed);
    t.send(&headers(1, &get("/"), true));
    t.goaway(ErrorCode::StreamClosed);
}

#[test]
fn s5_1_frames_after_our_reset_are_ignored() {
    let mut t = T::new();
    t.send(&headers(1, &get("/"), false));
    t.c.reset(1, ErrorCode::Cancel);
    t.reset(1, ErrorCode::Cancel);
    t.send(&data(1, b"late", false));
    t.send(&headers(1, &block(&[("x-trailer", "1")]), true));
    t.alive();
}

#[test]
fn s5_1_1_even_and_decreasing_stream_ids_are_protocol_errors() {
    let mut t = T::new();
    t.send(&headers(2, &get("/"), true));
    t.goaway(ErrorCode::ProtocolError);
    let mut t = T::new();
    t.send(&headers(5, &get("/"), true));
    t.send(&headers(3, &get("/"), true));
    t.goaway(ErrorCode::ProtocolError);
}

#[test]
fn s5_1_2_streams_over_the_limit_are_refused() {
    let mut t = T::with(H2Settings {
        max_concurrent_streams: 2,
        ..H2Settings::default()
    });
    for id in [1, 3, 5] {
        t.send(&headers(id, &get("/"), true));
    }
    assert_eq!(t.requests().len(), 2);
    t.reset(5, ErrorCode::RefusedStream);
    // One ends; the next fits again.
    t.c.send_headers(1, 200, &[], true);
    t.send(&headers(7, &get("/"), true));
    assert_eq!(t.requests().len(), 1);
    t.alive();
}

// §5.3 priority: self-dependency; §5.4, §5.5.

#[test]
fn s5_3_1_a_stream_depending_on_itself_is_a_stream_error() {
    let mut t = T::new();
    let mut b = vec![0, 0, 0, 1, 16];
    b.extend(get("/"));
    t.send(&raw(
        kind::HEADERS,
        flag::END_HEADERS | flag::END_STREAM | flag::PRIORITY,
        1,
        &b,
    ));
    t.reset(1, ErrorCode::ProtocolError);
    assert!(t.requests().is_empty());
    t.send(&raw(kind::PRIORITY, 0, 3, &[0, 0, 0, 3, 16]));
    t.reset(3, ErrorCode::ProtocolError);
    // The HPACK table stayed in step: the next request decodes.
    t.send(&headers(5, &get("/x"), true));
    assert_eq!(t.requests()[0].path(), "/x");
}

// §6.1 DATA.

#[test]
fn s6_1_data_rules() {
    let mut t = T::new();
    t.send(&data(0, b"x", false));
    t.goaway(ErrorCode::ProtocolError);
    // Pad length as long as the payload.
    let mut t = T::new();
    t.send(&headers(1, &get("/"), false));
    t.send(&raw(kind::DATA, flag::PADDED, 1, &[5, 1, 2, 3, 4]));
    t.goaway(ErrorCode::ProtocolError);
    // Padding that fits is fine, and counts against the windows.
    let mut t = T::new();
    t.send(&headers(1, &get("/"), false));
    t.send(&raw(kind::DATA, flag::PADDED, 1, &[4, 1, 2, 3, 4]));
    t.alive();
}

// §6.2 HEADERS, §6.3 PRIORITY, §6.4 RST_STREAM.

#[test]
fn s6_2_headers_rules() {
    let mut t = T::new();
    t.send(&headers(0, &get("/"), true));
    t.goaway(ErrorCode::ProtocolError);
    let mut t = T::new();
    t.send(&raw(
        kind::HEADERS,
        flag::END_HEADERS | flag::PADDED,
        1,
        &[200, 0x82],
    ));
    t.goaway(ErrorCode::ProtocolError);
}

#[test]
fn s6_3_priority_rules() {
    let mut t = T::new();
    t.send(&raw(kind::PRIORITY, 0, 0, &[0, 0, 0, 3, 16]));
    t.goaway(ErrorCode::ProtocolError);
    let mut t = T::new();
    t.send(&raw(kind::PRIORITY, 0, 1, &[0, 0, 0, 3]));
    t.reset(1, ErrorCode::FrameSizeError);
    // A PRIORITY on an idle stream opens nothing.
    t.send(&raw(kind::PRIORITY, 0, 9, &[0, 0, 0, 3, 16]));
    t.send(&headers(3, &get("/"), true));
    assert_eq!(t.requests().len(), 1);
    t.alive();
}

#[test]
fn s6_4_rst_stream_rules() {
    let mut t = T::new();
    t.send(&rst(0, 0));
    t.goaway(ErrorCode::ProtocolError);
    let mut t = T::new();
    t.send(&headers(1, &get("/"), false));
    t.send(&raw(kind::RST_STREAM, 0, 1, &[0, 0, 0]));
    t.goaway(ErrorCode::FrameSizeError);
}

// §6.5 SETTINGS.

#[test]
fn s6_5_settings_frame_rules() {
    let cases: [(Vec<u8>, ErrorCode); 6] = [
        (
            raw(kind::SETTINGS, flag::ACK, 0, &[0, 1, 0, 0, 0, 0]),
            ErrorCode::FrameSizeError,
        ),
        (raw(kind::SETTINGS, 0, 1, &[]), ErrorCode::ProtocolError),
        (
            raw(kind::SETTINGS, 0, 0, &[0, 1, 0]),
            ErrorCode::FrameSizeError,
        ),
        (settings(&[(2, 2)]), ErrorCode::ProtocolError),
        (settings(&[(4, 1 << 31)]), ErrorCode::FlowControlError),
        (settings(&[(5, 16_383)]), ErrorCode::ProtocolError),
    ];
    for (f, code) in cases {
        let mut t = T::new();
        t.send(&f);
        t.goaway(code);
    }
    let mut t = T::new();
    t.send(&settings(&[(5, 1 << 24)]));
    t.goaway(ErrorCode::ProtocolError);
}

#[test]
fn s6_5_unknown_settings_are_ignored_and_the_last_value_counts() {
    let mut t = T::new();
    t.send(&settings(&[(0x99, 7), (4, 100), (4, 10)]));
    let f = t.frames();
    assert_eq!((f[0].kind, f[0].flags), (kind::SETTINGS, flag::ACK));
    t.send(&headers(1, &get("/"), true));
    t.c.send_headers(1, 200, &[], false);
    assert_eq!(t.c.data_budget(1), 10);
}

// §6.7 PING, §6.8 GOAWAY.

#[test]
fn s6_7_ping_rules() {
    let mut t = T::new();
    t.send(&raw(kind::PING, flag::ACK, 0, b"abcdefgh"));
    assert!(t.frames().is_empty(), "an ACK is not answered");
    t.send(&raw(kind::PING, 0, 1, b"abcdefgh"));
    t.goaway(ErrorCode::ProtocolError);
    let mut t = T::new();
    t.send(&raw(kind::PING, 0, 0, b"abcdefg"));
    t.goaway(ErrorCode::FrameSizeError);
}

#[test]
fn s6_8_goaway_on_a_stream_is_protocol_error() {
    let mut t = T::new();
    t.send(&raw(kind::GOAWAY, 0, 1, &[0; 8]));
    t.goaway(ErrorCode::ProtocolError);
}

#[test]
fn s6_8_the_clients_goaway_lets_streams_finish_and_closes_nothing() {
    let mut t = T::new();
    t.send(&headers(1, &get("/"), true));
    t.requests();
    t.send(&raw(kind::GOAWAY, 0, 0, &[0, 0, 0, 1, 0, 0, 0, 0]));
    let e = t.events();
    assert!(e.contains(&Event::GoAway {
        last_stream_id: 1,
        code: 0
    }));
    assert!(!e.contains(&Event::Close));
    t.c.send_headers(1, 200, &[], true);
    // As nginx: the connection stays until the peer closes it or it
    // idles out, and answers what the peer still sends.
    assert!(!t.events().contains(&Event::Close));
    t.alive();
}

// §6.9 WINDOW_UPDATE and flow control.

#[test]
fn s6_9_window_update_rules() {
    let mut t = T::new();
    t.send(&window_update(0, 0));
    t.goaway(ErrorCode::ProtocolError);
    let mut t = T::new();
    t.send(&headers(1, &get("/"), true));
    t.send(&window_update(1, 0));
    t.reset(1, ErrorCode::ProtocolError);
    let mut t = T::new();
    t.send(&raw(kind::WINDOW_UPDATE, 0, 0, &[0, 0, 1]));
    t.goaway(ErrorCode::FrameSizeError);
}

#[test]
fn s6_9_1_windows_over_2_31_are_flow_control_errors() {
    let mut t = T::new();
    t.send(&window_update(0, MAX_WINDOW));
    t.goaway(ErrorCode::FlowControlError);
    let mut t = T::new();
    t.send(&headers(1, &get("/"), true));
    t.send(&window_update(1, MAX_WINDOW));
    t.reset(1, ErrorCode::FlowControlError);
    t.alive();
}

#[test]
fn s6_9_1_data_honours_the_clients_windows() {
    let mut t = T::new();
    t.send(&settings(&[(setting::INITIAL_WINDOW_SIZE, 1)]));
    t.send(&headers(1, &get("/"), true));
    t.c.send_headers(1, 200, &[], false);
    assert_eq!(t.c.data_budget(1), 1);
    assert_eq!(t.c.next_sendable(), Some(1));
    let h = t.c.data_frame(1, 1, false);
    assert_eq!(h, Some(frame::data_header(1, 1, false)));
    assert_eq!(t.c.data_budget(1), 0);
    assert_eq!(t.c.next_sendable(), None);
    assert!(t.c.window_stalled());
    t.events();
    t.send(&window_update(1, 100_000));
    assert_eq!(t.events(), vec![Event::WindowOpened]);
    assert!(!t.c.window_stalled());
    // Now the connection's 65,535 (less the byte sent) and the frame
    // size bound it.
    assert_eq!(t.c.data_budget(1), 16_384);
}

#[test]
fn s6_9_2_a_new_initial_window_moves_open_streams_and_may_go_negative() {
    let mut t = T::new();
    t.send(&headers(1, &get("/"), true));
    t.c.send_headers(1, 200, &[], false);
    t.c.data_frame(1, 16_384, false);
    t.send(&settings(&[(setting::INITIAL_WINDOW_SIZE, 1000)]));
    assert_eq!(t.c.streams[&1].send_window, 1000 - 16_384);
    assert_eq!(t.c.data_budget(1), 0);
    t.send(&window_update(1, 16_384));
    assert_eq!(t.c.data_budget(1), 1000);
    // Over 2^31 - 1 by the change: the window was 10 above the initial.
    t.send(&window_update(1, 10));
    t.send(&settings(&[(setting::INITIAL_WINDOW_SIZE, MAX_WINDOW)]));
    t.goaway(ErrorCode::FlowControlError);
}

#[test]
fn request_bodies_are_dropped_and_their_windows_given_back() {
    let mut t = T::with(H2Settings {
        initial_window: 100_000,
        connection_window: 100_000,
        ..H2Settings::default()
    });
    t.send(&headers(1, &get("/"), false));
    for _ in 0..4 {
        t.send(&data(1, &[7; 16_000], false));
    }
    let f = t.frames();
    let updates: Vec<(u32, u32)> = f
        .iter()
        .filter(|f| f.kind == kind::WINDOW_UPDATE)
        .map(|f| (f.id, u32::from_be_bytes(f.payload[..].try_into().unwrap())))
        .collect();
    assert_eq!(updates, vec![(0, 64_000), (1, 64_000)]);
    // A client that ignores the stream window: FLOW_CONTROL_ERROR.
    let mut t = T::with(H2Settings {
        initial_window: 65_535,
        ..H2Settings::default()
    });
    t.send(&headers(1, &get("/"), false));
    t.send(&data(1, &[7; 16_000], false));
    t.send(&data(1, &[7; 16_000], false));
    t.send(&data(1, &[7; 16_000], false));
    t.send(&data(1, &[7; 16_000], false));
    t.send(&data(1, &[7; 16_000], false));
    assert!(t
        .frames()
        .iter()
        .any(|f| f.kind == kind::WINDOW_UPDATE && f.id == 1));
}

#[test]
fn the_connection_window_cannot_be_overrun() {
    let mut t = T::with(H2Settings {
        connection_window: 65_535,
        initial_window: 1 << 20,
        ..H2Settings::default()
    });
    for id in [1, 3, 5, 7, 9] {
        t.send(&headers(id, &get("/"), false));
    }
    // 65,535 bytes is the window; 16,000 × 4 = 64,000 fits, then the
    // window opens again at half.
    for id in [1, 3, 5, 7] {
        t.send(&data(id, &[0; 16_000], false));
    }
    assert!(t
        .frames()
        .iter()
        .any(|f| f.kind == kind::WINDOW_UPDATE && f.id == 0));
    // A client that skips the update: 64,000 - 32,768 < 16,000 × 3.
    let mut c = H2Conn::new(H2Settings {
        connection_window: 65_535,
        initial_window: 1 << 20,
        ..H2Settings::default()
    });
    let mut b = PREFACE.to_vec();
    b.extend(settings(&[]));
    b.extend(headers(1, &get("/"), false));
    // Without draining `out` (feed stops at the high-water mark only).
    for _ in 0..5 {
        b.extend(data(1, &[0; 16_000], false));
    }
    c.feed(&b, 0);
    assert!(!c.is_closed(), "the updates kept it within the window");
}

// §6.10 CONTINUATION.

#[test]
fn s6_10_continuation_carries_a_block() {
    let mut t = T::new();
    let b = get("/split");
    t.send(&raw(kind::HEADERS, flag::END_STREAM, 1, &b[..10]));
    t.send(&raw(kind::CONTINUATION, 0, 1, &b[10..20]));
    t.send(&raw(kind::CONTINUATION, flag::END_HEADERS, 1, &b[20..]));
    assert_eq!(t.requests()[0].path(), "/split");
}

#[test]
fn s6_10_continuation_rules() {
    let b = get("/");
    let cases = [
        // On stream 0; after an ended block; after DATA; on another stream.
        vec![
            raw(kind::HEADERS, 0, 1, &b),
            raw(kind::CONTINUATION, flag::END_HEADERS, 0, &[]),
        ],
        vec![
            headers(1, &b, false),
            raw(kind::CONTINUATION, flag::END_HEADERS, 1, &[]),
        ],
        vec![
            headers(1, &b, false),
            data(1, b"x", false),
            raw(kind::CONTINUATION, flag::END_HEADERS, 1, &[]),
        ],
        vec![
            raw(kind::HEADERS, 0, 1, &b),
            raw(kind::CONTINUATION, flag::END_HEADERS, 3, &[]),
        ],
    ];
    for frames in cases {
        let mut t = T::new();
        for f in frames {
            t.send(&f);
        }
        t.goaway(ErrorCode::ProtocolError);
    }
}

#[test]
fn a_continuation_flood_is_enhance_your_calm() {
    let mut t = T::new();
    t.send(&raw(kind::HEADERS, flag::END_STREAM, 1, &get("/")));
    for _ in 0..DEFAULT_MAX_CONTINUATION_FRAMES {
        t.send(&raw(kind::CONTINUATION, 0, 1, &[]));
    }
    assert!(!t.c.is_closed());
    t.send(&raw(kind::CONTINUATION, 0, 1, &[]));
    t.goaway(ErrorCode::EnhanceYourCalm);
    // And by bytes: blocks past the limit.
    let mut t = T::new();
    t.send(&raw(kind::HEADERS, flag::END_STREAM, 1, &[0; 16_384]));
    t.send(&raw(kind::CONTINUATION, 0, 1, &[0; 16_384]));
    assert!(!t.c.is_closed());
    t.send(&raw(kind::CONTINUATION, 0, 1, &[0; 1]));
    t.goaway(ErrorCode::EnhanceYourCalm);
}

mod http;
