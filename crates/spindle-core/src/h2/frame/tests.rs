//! Parsing from partial input, and every encoder read back by the parser.

use super::*;

fn one(buf: &[u8]) -> Frame<'_> {
    match parse(buf, MIN_MAX_FRAME_SIZE) {
        Parsed::Frame(f, n) => {
            assert_eq!(n, buf.len());
            f
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_partial_frame_needs_more() {
    let mut b = Vec::new();
    put_ping_ack(&mut b, b"12345678");
    for cut in 0..b.len() {
        assert_eq!(
            parse(&b[..cut], MIN_MAX_FRAME_SIZE),
            Parsed::NeedMore,
            "{cut}"
        );
    }
    assert_eq!(
        one(&b),
        Frame::Ping {
            ack: true,
            data: *b"12345678"
        }
    );
}

#[test]
fn an_oversized_frame_is_refused_from_its_header_alone() {
    let h = FrameHeader {
        len: MIN_MAX_FRAME_SIZE + 1,
        kind: kind::DATA,
        flags: 0,
        stream_id: 1,
    }
    .encode();
    assert_eq!(
        parse(&h, MIN_MAX_FRAME_SIZE),
        Parsed::Error(FrameError::Connection(ErrorCode::FrameSizeError), 0)
    );
}

#[test]
fn encoders_round_trip() {
    let mut b = Vec::new();
    put_settings(&mut b, &[(setting::MAX_CONCURRENT_STREAMS, 100)]);
    match one(&b) {
        Frame::Settings { ack: false, params } => {
            assert_eq!(settings(params).collect::<Vec<_>>(), [(3, 100)])
        }
        f => panic!("{f:?}"),
    }
    b.clear();
    put_settings_ack(&mut b);
    assert!(matches!(one(&b), Frame::Settings { ack: true, .. }));
    b.clear();
    put_goaway(&mut b, 7, ErrorCode::EnhanceYourCalm);
    assert_eq!(
        one(&b),
        Frame::GoAway {
            last_stream_id: 7,
            code: 0xb
        }
    );
    b.clear();
    put_rst_stream(&mut b, 3, ErrorCode::Cancel);
    assert_eq!(
        one(&b),
        Frame::RstStream {
            stream_id: 3,
            code: 8
        }
    );
    b.clear();
    put_window_update(&mut b, 5, 1000);
    assert_eq!(
        one(&b),
        Frame::WindowUpdate {
            stream_id: 5,
            increment: 1000
        }
    );
    let mut d = data_header(9, 3, true).to_vec();
    d.extend_from_slice(b"abc");
    assert_eq!(
        one(&d),
        Frame::Data {
            stream_id: 9,
            data: b"abc",
            flow_len: 3,
            end_stream: true
        }
    );
}

#[test]
fn padding_and_priority_are_taken_off_headers() {
    // PADDED | PRIORITY | END_HEADERS: pad 2, priority 5 bytes, block "ab".
    let payload = [2, 0, 0, 0, 3, 16, b'a', b'b', 0, 0];
    let mut b = FrameHeader {
        len: payload.len() as u32,
        kind: kind::HEADERS,
        flags: flag::PADDED | flag::PRIORITY | flag::END_HEADERS,
        stream_id: 1,
    }
    .encode()
    .to_vec();
    b.extend_from_slice(&payload);
    assert_eq!(
        one(&b),
        Frame::Headers {
            stream_id: 1,
            block: b"ab",
            end_stream: false,
            end_headers: true,
            self_dependent: false
        }
    );
    // Too short for its priority fields.
    b[2] = 4;
    b.truncate(13);
    b[4] = flag::PRIORITY;
    assert_eq!(
        parse(&b, MIN_MAX_FRAME_SIZE),
        Parsed::Error(FrameError::Connection(ErrorCode::FrameSizeError), 13)
    );
}
