//! §7 and §8 (requests and responses), the send side, shutdown and the
//! flood budgets.

use super::*;

// §7 error codes.

#[test]
fn s7_unknown_error_codes_are_fine() {
    let mut t = T::new();
    t.send(&headers(1, &get("/"), false));
    t.send(&rst(1, 0xdead));
    t.alive();
    t.send(&raw(kind::GOAWAY, 0, 0, &[0, 0, 0, 0, 0, 0, 0xbe, 0xef]));
    assert!(
        !t.events().contains(&Event::Close),
        "the peer's GOAWAY closes nothing"
    );
    t.alive();
}

// §8.1, §8.2, §8.3: requests.

fn malformed(fields: &[(&str, &str)]) {
    let mut t = T::new();
    t.send(&headers(1, &block(fields), true));
    t.reset(1, ErrorCode::ProtocolError);
    assert!(t.requests().is_empty(), "{fields:?}");
}

const M: (&str, &str) = (":method", "GET");
const S: (&str, &str) = (":scheme", "https");
const P: (&str, &str) = (":path", "/");

#[test]
fn s8_1_2_malformed_requests_are_stream_errors() {
    malformed(&[M, S, P, ("X-Upper", "1")]);
    malformed(&[M, S, P, (":unknown", "1")]);
    malformed(&[M, S, P, (":status", "200")]);
    malformed(&[M, S, ("a", "1"), P]);
    malformed(&[M, S, P, ("connection", "keep-alive")]);
    malformed(&[M, S, P, ("transfer-encoding", "chunked")]);
    malformed(&[M, S, P, ("te", "gzip")]);
    malformed(&[M, S, (":path", "")]);
    malformed(&[S, P]);
    malformed(&[M, P]);
    malformed(&[M, S]);
    malformed(&[M, M, S, P]);
    malformed(&[M, S, S, P]);
    malformed(&[M, S, P, P]);
    malformed(&[M, S, P, ("x", "a\r\nb")]);
    malformed(&[M, S, P, ("x", " padded")]);
    malformed(&[M, S, (":path", "relative")]);
    malformed(&[M, S, P, ("content-length", "12x")]);
    malformed(&[M, S, P, (":authority", "a.example"), ("host", "b.example")]);
}

#[test]
fn host_may_repeat_the_authority_and_te_may_say_trailers_in_any_case() {
    let mut t = T::new();
    let b = block(&[
        M,
        S,
        P,
        (":authority", "a.example"),
        ("host", "A.example"),
        ("te", "Trailers"),
    ]);
    t.send(&headers(1, &b, true));
    assert_eq!(t.requests().len(), 1);
}

#[test]
fn s8_1_a_request_is_decoded() {
    let mut t = T::new();
    t.send(&headers(
        1,
        &block(&[
            M,
            S,
            (":path", "/a?b"),
            (":authority", "h.example"),
            ("te", "trailers"),
            ("accept", "*/*"),
            ("priority", "i, u=1"),
        ]),
        true,
    ));
    let r = t.requests();
    assert_eq!(r[0].header("accept"), Some(&b"*/*"[..]));
    assert_eq!(r[0].header("host"), None);
    assert_eq!(r.len(), 1);
    let r = &r[0];
    assert_eq!((r.stream_id, r.end_stream, r.urgency), (1, true, 1));
    assert_eq!((r.method(), r.scheme(), r.path()), ("GET", "https", "/a?b"));
    assert_eq!(r.authority(), Some("h.example"));
    assert_eq!(
        r.headers().collect::<Vec<_>>(),
        vec![
            (&b"te"[..], &b"trailers"[..]),
            (b"accept", b"*/*"),
            (b"priority", b"i, u=1"),
        ]
    );
}

#[test]
fn s8_1_trailers_must_end_the_stream_and_hold_no_pseudo_fields() {
    let mut t = T::new();
    t.send(&headers(1, &get("/"), false));
    t.send(&headers(1, &block(&[("x-t", "1")]), false));
    t.reset(1, ErrorCode::ProtocolError);
    let mut t = T::new();
    t.send(&headers(1, &get("/"), false));
    t.send(&headers(1, &block(&[P]), true));
    t.reset(1, ErrorCode::ProtocolError);
    let mut t = T::new();
    t.send(&headers(1, &get("/"), false));
    t.send(&data(1, b"body", false));
    t.send(&headers(1, &block(&[("x-t", "1")]), true));
    t.alive();
    assert_eq!(t.c.streams[&1].state, State::HalfClosedRemote);
}

#[test]
fn s8_1_1_content_length_must_match_the_data() {
    let cl = |n: &'static str| block(&[M, S, P, ("content-length", n)]);
    let mut t = T::new();
    t.send(&headers(1, &cl("10"), false));
    t.send(&data(1, b"short", true));
    t.reset(1, ErrorCode::ProtocolError);
    let mut t = T::new();
    t.send(&headers(1, &cl("3"), false));
    t.send(&data(1, b"ab", false));
    t.send(&data(1, b"cd", false));
    t.reset(1, ErrorCode::ProtocolError);
    let mut t = T::new();
    t.send(&headers(1, &cl("4"), true));
    t.reset(1, ErrorCode::ProtocolError);
    let mut t = T::new();
    t.send(&headers(1, &cl("4"), false));
    t.send(&data(1, b"abcd", true));
    assert_eq!(t.requests().len(), 1);
    t.alive();
}

#[test]
fn s8_4_push_promise_from_a_client_is_protocol_error() {
    let mut t = T::new();
    t.send(&raw(
        kind::PUSH_PROMISE,
        flag::END_HEADERS,
        1,
        &[0, 0, 0, 2, 0x82],
    ));
    t.goaway(ErrorCode::ProtocolError);
}

#[test]
fn s8_5_connect_is_answered_405() {
    let mut t = T::new();
    t.send(&headers(
        1,
        &block(&[(":method", "CONNECT"), (":authority", "h:443")]),
        true,
    ));
    assert!(t.requests().is_empty());
    let f = t.frames();
    assert_eq!(f[0].kind, kind::HEADERS);
    let mut status = Vec::new();
    hpack::Decoder::new(0)
        .decode(&f[0].payload, 1000, &mut |n, v| {
            status.push((n.to_vec(), v.to_vec()))
        })
        .unwrap();
    assert_eq!(status, vec![(b":status".to_vec(), b"405".to_vec())]);
}

#[test]
fn a_header_list_over_the_limit_is_431() {
    let mut t = T::with(H2Settings {
        max_header_list_size: 150,
        ..H2Settings::default()
    });
    t.send(&headers(
        1,
        &block(&[M, S, P, ("x", &"a".repeat(100))]),
        true,
    ));
    assert!(t.requests().is_empty());
    let f = t.frames();
    let mut status = Vec::new();
    hpack::Decoder::new(0)
        .decode(&f[0].payload, 1000, &mut |_, v| status.push(v.to_vec()))
        .unwrap();
    assert_eq!(status, vec![b"431".to_vec()]);
    t.alive();
}

// Responses: HEADERS split into CONTINUATION, DATA, the scheduler.

#[test]
fn response_headers_are_split_by_the_peers_frame_size() {
    let mut t = T::new();
    t.send(&headers(1, &get("/"), true));
    let big = vec![b'v'; 40_000];
    assert!(t.c.send_headers(1, 200, &[(b"x-big", &big)], true));
    let f = t.frames();
    assert_eq!(
        f.iter().map(|f| (f.kind, f.flags)).collect::<Vec<_>>(),
        vec![
            (kind::HEADERS, flag::END_STREAM),
            (kind::CONTINUATION, 0),
            (kind::CONTINUATION, flag::END_HEADERS),
        ]
    );
    assert!(f.iter().all(|f| f.payload.len() <= 16_384));
    let block: Vec<u8> = f.iter().flat_map(|f| f.payload.clone()).collect();
    let mut got = Vec::new();
    hpack::Decoder::new(0)
        .decode(&block, 100_000, &mut |n, v| got.push((n.to_vec(), v.len())))
        .unwrap();
    assert_eq!(
        got,
        vec![(b":status".to_vec(), 3), (b"x-big".to_vec(), 40_000)]
    );
}

#[test]
fn a_reset_stream_takes_no_response() {
    let mut t = T::new();
    t.send(&headers(1, &get("/"), true));
    t.send(&rst(1, 8));
    assert!(!t.c.send_headers(1, 200, &[], false));
    assert_eq!(t.c.data_budget(1), 0);
    assert!(t.frames().is_empty());
    // Nor the end of a body already under way.
    t.send(&headers(3, &get("/"), true));
    t.c.send_headers(3, 200, &[], false);
    t.send(&rst(3, 8));
    assert_eq!(t.c.data_frame(3, 0, true), None);
}

#[test]
fn trailers_arriving_as_the_driver_ends_the_stream_are_dropped() {
    let mut t = T::new();
    t.send(&headers(1, &get("/"), false));
    let trailers = block(&[("x-t", "1")]);
    t.send(&raw(kind::HEADERS, flag::END_STREAM, 1, &trailers[..2]));
    t.c.send_headers(1, 200, &[], true);
    t.send(&raw(
        kind::CONTINUATION,
        flag::END_HEADERS,
        1,
        &trailers[2..],
    ));
    t.alive();
}

#[test]
fn a_small_body_is_read_before_the_request_is_handed_out() {
    let mut t = T::new();
    t.send(&headers(1, &get("/"), false));
    assert!(t.requests().is_empty(), "held until its body ends");
    assert!(!t.c.send_headers(1, 200, &[], true), "not the driver's yet");
    t.send(&data(1, &[0; 1000], false));
    assert!(t.requests().is_empty());
    t.send(&data(1, b"end", true));
    let r = t.requests();
    assert_eq!((r.len(), r[0].end_stream), (1, true));
    // A reset while held: the driver never hears of it.
    t.send(&headers(3, &get("/"), false));
    t.send(&rst(3, 8));
    assert_eq!(t.events(), vec![]);
    // Trailers end a held body too.
    t.send(&headers(5, &get("/"), false));
    t.send(&data(5, b"x", false));
    t.send(&headers(5, &block(&[("x-t", "1")]), true));
    assert_eq!(t.requests().len(), 1);
}

#[test]
fn a_large_body_is_reset_with_no_error_when_the_response_ends_first() {
    let mut t = T::new();
    let cl = block(&[M, S, P, ("content-length", "1000000")]);
    t.send(&headers(1, &cl, false));
    assert_eq!(t.requests().len(), 1, "over MAX_DISCARD_BODY: at once");
    t.c.send_headers(1, 405, &[], true);
    t.reset(1, ErrorCode::NoError);
    t.send(&data(1, &[0; 16_000], false));
    t.alive();
    // Without a content-length: handed out once it passes the limit.
    t.send(&headers(3, &get("/"), false));
    for _ in 0..4 {
        t.send(&data(3, &[0; 16_384], false));
    }
    assert!(t.requests().is_empty());
    t.send(&data(3, &[0; 16_384], false));
    let r = t.requests();
    assert_eq!((r.len(), r[0].end_stream), (1, false));
}

#[test]
fn the_scheduler_serves_urgent_streams_first_and_rotates_within_one() {
    let mut t = T::new();
    let req = |p: &'static str| block(&[M, S, P, ("priority", p)]);
    t.send(&headers(1, &req("u=3"), true));
    t.send(&headers(3, &req("u=3"), true));
    t.send(&headers(5, &req("u=5"), true));
    t.send(&headers(7, &req("u=3"), true));
    for id in [1, 3, 5, 7] {
        t.c.send_headers(id, 200, &[], false);
    }
    let mut order = Vec::new();
    for _ in 0..6 {
        let id = t.c.next_sendable().unwrap();
        order.push(id);
        t.c.data_frame(id, 100, false);
    }
    assert_eq!(order, [1, 3, 7, 1, 3, 7]);
    for id in [1, 3, 7] {
        t.c.data_frame(id, 0, true);
    }
    assert_eq!(t.c.next_sendable(), Some(5));
    t.c.data_frame(5, 0, true);
    assert_eq!(t.c.next_sendable(), None);
    assert_eq!(t.c.open_streams(), 0);
}

#[test]
fn a_small_file_is_not_stuck_behind_a_large_one() {
    let mut t = T::new();
    t.send(&window_update(0, 100 << 20));
    t.send(&settings(&[(setting::INITIAL_WINDOW_SIZE, 10 << 20)]));
    t.send(&headers(1, &get("/large"), true));
    t.c.send_headers(1, 200, &[], false);
    for _ in 0..10 {
        let id = t.c.next_sendable().unwrap();
        t.c.data_frame(id, t.c.data_budget(id), false);
    }
    t.send(&headers(3, &get("/small"), true));
    t.c.send_headers(3, 200, &[], false);
    let mut frames_before_small = 0;
    while t.c.next_sendable() != Some(3) {
        frames_before_small += 1;
        t.c.data_frame(1, 16_384, false);
    }
    assert!(frames_before_small <= 1);
}

// Shutdown.

#[test]
fn shutdown_sends_goaway_finishes_streams_and_ignores_new_ones() {
    let mut t = T::new();
    t.send(&headers(1, &get("/"), true));
    t.requests();
    t.c.shutdown();
    let f = t.frames();
    assert_eq!(f[0].kind, kind::GOAWAY);
    assert_eq!(f[0].payload, [0, 0, 0, 1, 0, 0, 0, 0]);
    t.send(&headers(3, &get("/"), true));
    assert!(t.requests().is_empty(), "a stream past GOAWAY is ignored");
    assert!(!t.c.is_closed());
    t.c.send_headers(1, 200, &[], false);
    t.c.data_frame(1, 10, true);
    assert!(t.c.is_closed());
    assert_eq!(t.events(), vec![Event::Close]);
}

#[test]
fn go_away_ends_at_once() {
    let mut t = T::new();
    t.send(&headers(1, &get("/"), true));
    t.c.go_away(ErrorCode::InternalError);
    t.goaway(ErrorCode::InternalError);
    assert_eq!(t.c.data_budget(1), 0);
}

// Floods (issue 38's hostile clients).

fn flood(one: impl Fn(u32) -> Vec<Vec<u8>>, limit: u32) {
    let mut t = T::new();
    t.now += FLOOD_WINDOW_MS; // past the opening SETTINGS' second
    for i in 0..limit {
        for f in one(i) {
            t.send(&f);
        }
    }
    assert!(!t.c.is_closed(), "{limit} in a second is within budget");
    // The next second's budget is fresh ...
    t.now += FLOOD_WINDOW_MS;
    for i in limit..2 * limit {
        for f in one(i) {
            t.send(&f);
        }
    }
    assert!(!t.c.is_closed());
    // ... and one more in it is one too many.
    for f in one(2 * limit) {
        t.send(&f);
    }
    t.goaway(ErrorCode::EnhanceYourCalm);
}

#[test]
fn rapid_reset_is_enhance_your_calm() {
    flood(
        |i| vec![headers(2 * i + 1, &get("/"), true), rst(2 * i + 1, 8)],
        DEFAULT_FLOOD_LIMITS.resets,
    );
}

#[test]
fn settings_ping_priority_window_update_and_empty_data_floods_end_in_goaway() {
    flood(|_| vec![settings(&[])], DEFAULT_FLOOD_LIMITS.settings);
    flood(
        |_| vec![raw(kind::PING, 0, 0, &[0; 8])],
        DEFAULT_FLOOD_LIMITS.pings,
    );
    flood(
        |_| vec![raw(kind::PRIORITY, 0, 1, &[0, 0, 0, 0, 16])],
        DEFAULT_FLOOD_LIMITS.priorities,
    );
    flood(
        |_| vec![window_update(0, 1)],
        DEFAULT_FLOOD_LIMITS.window_updates,
    );
    let mut t = T::new();
    t.send(&headers(1, &get("/"), false));
    for _ in 0..DEFAULT_FLOOD_LIMITS.empty_data {
        t.send(&data(1, b"", false));
    }
    assert!(!t.c.is_closed());
    for _ in 0..=DEFAULT_FLOOD_LIMITS.empty_data {
        t.send(&data(1, b"", false));
    }
    t.goaway(ErrorCode::EnhanceYourCalm);
}

#[test]
fn feed_holds_back_input_while_out_is_full() {
    let mut c = H2Conn::new(H2Settings::default());
    let mut b = PREFACE.to_vec();
    b.extend(settings(&[]));
    let ping = raw(kind::PING, 0, 0, &[0; 8]);
    for _ in 0..DEFAULT_FLOOD_LIMITS.pings {
        b.extend(&ping);
    }
    let mut small = H2Settings::default();
    small.flood.pings = u32::MAX;
    let mut c2 = H2Conn::new(small);
    let mut many = b.clone();
    for _ in 0..10_000 {
        many.extend(&ping);
    }
    let n = c2.feed(&many, 0);
    assert!(n < many.len(), "stopped at the high-water mark");
    assert!(c2.out().len() <= OUT_HIGH_WATER + 17 + 64);
    assert_eq!(c.feed(&b, 0), b.len());
}

#[test]
fn an_idle_connection_keeps_little() {
    let mut t = T::new();
    let big = "v".repeat(120);
    let fields: Vec<(&str, &str)> = (0..100).map(|_| ("x-big", big.as_str())).collect();
    let mut b = get("/");
    b.extend(block(&fields));
    t.send(&raw(kind::HEADERS, flag::END_STREAM, 1, &b[..10_000]));
    t.send(&raw(kind::CONTINUATION, flag::END_HEADERS, 1, &b[10_000..]));
    t.requests();
    t.c.send_headers(1, 200, &[(b"x-big", &[b'v'; 40_000])], true);
    t.frames();
    assert!(
        t.c.buffered() <= 3 * KEEP_CAPACITY + DEFAULT_HEADER_TABLE_SIZE as usize,
        "{} bytes buffered",
        t.c.buffered()
    );
    assert!(
        std::mem::size_of::<H2Conn>() <= 1024,
        "{}",
        std::mem::size_of::<H2Conn>()
    );
}

#[test]
fn data_frames_grow_to_the_clients_max_frame_size() {
    let mut t = T::new();
    t.send(&settings(&[
        (setting::MAX_FRAME_SIZE, 100_000),
        (setting::INITIAL_WINDOW_SIZE, 1 << 20),
    ]));
    t.send(&window_update(0, 1 << 20));
    t.send(&headers(1, &get("/"), true));
    t.c.send_headers(1, 200, &[], false);
    assert_eq!(t.c.data_budget(1), 100_000);
    // Our own limit on what we accept is unchanged.
    t.send(&data(1, &[0; 16_385], false));
    t.goaway(ErrorCode::FrameSizeError);
}
