//! Varints at their boundaries and RFC 9000's examples; frames parsed
//! from every prefix, each error from §7 and §8, and every encoder read
//! back by the parser.

use super::*;

use crate::hex_bytes as hex;

/// Parses `buf`, which must be exactly one frame (for DATA and unknown
/// types: one header).
fn one(buf: &[u8]) -> Frame<'_> {
    match parse(buf) {
        Parsed::Frame(f, n) => {
            assert_eq!(n, buf.len(), "{f:?}");
            f
        }
        other => panic!("{other:?}"),
    }
}

/// Every proper prefix of `buf` needs more; the whole parses as `one`.
fn needs_every_byte(buf: &[u8]) -> Frame<'_> {
    for cut in 0..buf.len() {
        assert_eq!(parse(&buf[..cut]), Parsed::NeedMore, "cut at {cut}");
    }
    one(buf)
}

fn error(buf: &[u8]) -> ErrorCode {
    match parse(buf) {
        Parsed::Error(e) => e,
        other => panic!("{other:?}"),
    }
}

#[test]
fn varints_round_trip_at_every_length_boundary() {
    let cases: [(u64, usize); 9] = [
        (0, 1),
        (63, 1),
        (64, 2),
        (16_383, 2),
        (16_384, 4),
        ((1 << 30) - 1, 4),
        (1 << 30, 8),
        (VARINT_MAX - 1, 8),
        (VARINT_MAX, 8),
    ];
    for (v, len) in cases {
        let mut out = Vec::new();
        put_varint(&mut out, v);
        assert_eq!(out.len(), len, "{v}");
        assert_eq!(varint_len(v), len, "{v}");
        assert_eq!(varint(v).unwrap().as_bytes(), &out[..], "{v}");
        assert_eq!(decode_varint(&out), Some((v, len)), "{v}");
        // A longer buffer: only the varint is taken.
        out.push(0xff);
        assert_eq!(decode_varint(&out), Some((v, len)), "{v}");
        for cut in 0..len {
            assert_eq!(decode_varint(&out[..cut]), None, "{v} cut at {cut}");
        }
    }
}

#[test]
fn a_value_over_2_62_is_no_varint() {
    assert_eq!(varint(VARINT_MAX + 1), None);
    assert_eq!(varint(u64::MAX), None);
}

#[test]
#[should_panic(expected = "over the largest varint")]
fn putting_a_value_over_2_62_panics() {
    put_varint(&mut Vec::new(), 1 << 62);
}

/// RFC 9000 Appendix A.1's examples, the last a non-minimal encoding.
#[test]
fn rfc_9000_sample_varints() {
    let cases: [(&str, u64); 5] = [
        ("c2197c5eff14e88c", 151_288_809_941_952_652),
        ("9d7f3e7d", 494_878_333),
        ("7bbd", 15_293),
        ("25", 37),
        ("4025", 37),
    ];
    for (h, v) in cases {
        let b = hex(h);
        assert_eq!(decode_varint(&b), Some((v, b.len())), "{h}");
    }
    assert_eq!(varint(37).unwrap().as_bytes(), [0x25]);
}

#[test]
fn every_buffered_frame_needs_every_byte() {
    let mut b = Vec::new();
    put_settings(&mut b, &[(setting::QPACK_MAX_TABLE_CAPACITY, 0), (0x21, 7)]);
    let Frame::Settings(s) = needs_every_byte(&b) else {
        panic!()
    };
    assert_eq!(s.iter().collect::<Vec<_>>(), [(1, 0), (0x21, 7)]);

    b.clear();
    put_headers(&mut b, &hex("0000510b2f696e6465782e68746d6c"));
    assert_eq!(
        needs_every_byte(&b),
        Frame::Headers(&hex("0000510b2f696e6465782e68746d6c"))
    );

    b.clear();
    put_goaway(&mut b, 1 << 40);
    assert_eq!(needs_every_byte(&b), Frame::Goaway(1 << 40));

    // CANCEL_PUSH 300, MAX_PUSH_ID 0, PUSH_PROMISE 5 with a section.
    assert_eq!(needs_every_byte(&hex("03 02 412c")), Frame::CancelPush(300));
    assert_eq!(needs_every_byte(&hex("0d 01 00")), Frame::MaxPushId(0));
    assert_eq!(
        needs_every_byte(&hex("05 03 05 0000")),
        Frame::PushPromise {
            push_id: 5,
            section: &[0, 0]
        }
    );
}

#[test]
fn data_and_unknown_frames_give_their_header_alone() {
    // DATA of 100,000 bytes: a 4-byte length, and no payload buffered.
    let h = data_header(100_000);
    assert_eq!(h.as_bytes(), hex("00 800186a0"));
    let f = needs_every_byte(h.as_bytes());
    assert_eq!(f, Frame::Data { len: 100_000 });
    assert_eq!(f.payload_follows(), 100_000);
    // Its payload's first bytes, when they are there, are not taken.
    let mut b = h.as_bytes().to_vec();
    b.extend_from_slice(b"abc");
    assert_eq!(parse(&b), Parsed::Frame(Frame::Data { len: 100_000 }, 5));
    assert_eq!(one(data_header(0).as_bytes()), Frame::Data { len: 0 });
    assert_eq!(
        data_header(VARINT_MAX).as_bytes().len(),
        MAX_DATA_HEADER_LEN
    );

    // A reserved type (0x1f * 2 + 0x21) with a payload far past any limit,
    // and an unknown one (PRIORITY_UPDATE, RFC 9218): skipped, unbuffered.
    let grease = hex("405f c000000000100000");
    let f = needs_every_byte(&grease);
    assert_eq!(
        f,
        Frame::Unknown {
            kind: 0x5f,
            len: 1 << 20
        }
    );
    assert_eq!(f.payload_follows(), 1 << 20);
    assert_eq!(
        one(&hex("800f0700 01")),
        Frame::Unknown {
            kind: 0xf0700,
            len: 1
        }
    );
}

#[test]
fn reserved_values_are_0x1f_n_plus_0x21() {
    for n in [0u64, 1, 2, 1000, (VARINT_MAX - 0x21) / 0x1f] {
        assert!(is_reserved(0x1f * n + 0x21), "{n}");
    }
    for v in [0, 0x20, 0x22, 0x3f, 0x41, VARINT_MAX] {
        assert!(!is_reserved(v), "{v:#x}");
    }
}

#[test]
fn http2_frame_types_are_unexpected_from_their_type_alone() {
    for t in kind::HTTP2_ONLY {
        assert_eq!(error(&[t as u8]), ErrorCode::FrameUnexpected, "{t}");
        assert_eq!(error(&[t as u8, 0]), ErrorCode::FrameUnexpected, "{t}");
    }
    // The same type spelled in two bytes.
    assert_eq!(error(&hex("4009")), ErrorCode::FrameUnexpected);
}

#[test]
fn an_oversized_frame_is_refused_from_its_header_alone() {
    let mut b = Vec::new();
    put_varint(&mut b, kind::HEADERS);
    put_varint(&mut b, MAX_FRAME_PAYLOAD + 1);
    assert_eq!(error(&b), ErrorCode::ExcessiveLoad);
    b.clear();
    put_varint(&mut b, kind::SETTINGS);
    put_varint(&mut b, VARINT_MAX);
    assert_eq!(error(&b), ErrorCode::ExcessiveLoad);
    // At the limit: it waits for its payload.
    b.clear();
    put_varint(&mut b, kind::HEADERS);
    put_varint(&mut b, MAX_FRAME_PAYLOAD);
    assert_eq!(parse(&b), Parsed::NeedMore);
}

#[test]
fn one_varint_payloads_must_be_exactly_one_varint() {
    for t in ["03", "07", "0d"] {
        // Empty, or longer than any varint: from the header alone.
        assert_eq!(error(&hex(&format!("{t} 00"))), ErrorCode::FrameError);
        assert_eq!(error(&hex(&format!("{t} 09"))), ErrorCode::FrameError);
        // A byte left over, or one missing.
        assert_eq!(error(&hex(&format!("{t} 02 0000"))), ErrorCode::FrameError);
        assert_eq!(error(&hex(&format!("{t} 01 40"))), ErrorCode::FrameError);
        // A non-minimal spelling is fine.
        assert_eq!(parse(&hex(&format!("{t} 02 4005"))), {
            let f = match t {
                "03" => Frame::CancelPush(5),
                "07" => Frame::Goaway(5),
                _ => Frame::MaxPushId(5),
            };
            Parsed::Frame(f, 4)
        });
    }
    // PUSH_PROMISE without a whole push ID.
    assert_eq!(error(&hex("05 00")), ErrorCode::FrameError);
    assert_eq!(error(&hex("05 01 40")), ErrorCode::FrameError);
}

#[test]
fn settings_errors() {
    // A setting cut in half.
    assert_eq!(error(&hex("04 01 06")), ErrorCode::FrameError);
    assert_eq!(error(&hex("04 02 06 40")), ErrorCode::FrameError);
    // HTTP/2's identifiers.
    for id in setting::HTTP2_ONLY {
        let mut b = Vec::new();
        put_settings(&mut b, &[(id, 1)]);
        assert_eq!(error(&b), ErrorCode::SettingsError, "{id}");
    }
    // A duplicate, known or reserved.
    let mut b = Vec::new();
    put_settings(&mut b, &[(6, 100), (1, 0), (6, 100)]);
    assert_eq!(error(&b), ErrorCode::SettingsError);
    b.clear();
    put_settings(&mut b, &[(0x21, 1), (0x40, 2), (0x21, 1)]);
    assert_eq!(error(&b), ErrorCode::SettingsError);
    // As many as allowed, and one more.
    let many: Vec<(u64, u64)> = (0..MAX_SETTINGS as u64 + 1)
        .map(|i| (0x100 + i, i))
        .collect();
    b.clear();
    put_settings(&mut b, &many[..MAX_SETTINGS]);
    let Frame::Settings(s) = one(&b) else {
        panic!()
    };
    assert_eq!(s.len(), MAX_SETTINGS);
    b.clear();
    put_settings(&mut b, &many);
    assert_eq!(error(&b), ErrorCode::ExcessiveLoad);
    // An empty SETTINGS is fine.
    let empty = hex("04 00");
    let Frame::Settings(s) = one(&empty) else {
        panic!()
    };
    assert!(s.is_empty() && s.iter().next().is_none());
}

#[test]
fn our_settings_refuse_the_dynamic_table() {
    let mut b = Vec::new();
    put_our_settings(&mut b);
    let Frame::Settings(s) = needs_every_byte(&b) else {
        panic!()
    };
    assert_eq!(s.get(setting::QPACK_MAX_TABLE_CAPACITY), Some(0));
    assert_eq!(s.get(setting::QPACK_BLOCKED_STREAMS), Some(0));
    assert_eq!(
        s.get(setting::MAX_FIELD_SECTION_SIZE),
        Some(MAX_FIELD_SECTION_SIZE as u64)
    );
    assert_eq!(s.get(0x21), None);
    // 1 0, 7 0, 6 16384 (a 4-byte varint).
    assert_eq!(b, hex("04 09 0100 0700 06 80004000"));
}

#[test]
fn frames_follow_one_another() {
    let mut b = Vec::new();
    put_our_settings(&mut b);
    put_headers(&mut b, &[0, 0, 0xd1]);
    b.extend_from_slice(data_header(2).as_bytes());
    b.extend_from_slice(b"hi");
    put_goaway(&mut b, 4);
    let mut pos = 0;
    let mut seen = Vec::new();
    while pos < b.len() {
        let Parsed::Frame(f, n) = parse(&b[pos..]) else {
            panic!("at {pos}")
        };
        pos += n + f.payload_follows() as usize;
        seen.push(f);
    }
    assert_eq!(pos, b.len());
    assert!(matches!(seen[0], Frame::Settings(_)));
    assert_eq!(
        &seen[1..],
        [
            Frame::Headers(&[0, 0, 0xd1]),
            Frame::Data { len: 2 },
            Frame::Goaway(4)
        ]
    );
}

#[test]
fn which_frames_a_client_may_send_where() {
    use StreamKind::{Control, Request};
    let mut settings = Vec::new();
    put_our_settings(&mut settings);
    let Frame::Settings(s) = one(&settings) else {
        panic!()
    };
    let table: [(Frame, bool, bool); 8] = [
        (Frame::Data { len: 1 }, false, true),
        (Frame::Headers(&[]), false, true),
        (Frame::CancelPush(0), true, false),
        (Frame::Settings(s), true, false),
        (
            Frame::PushPromise {
                push_id: 0,
                section: &[],
            },
            false,
            false,
        ),
        (Frame::Goaway(0), true, false),
        (Frame::MaxPushId(0), true, false),
        (Frame::Unknown { kind: 0x21, len: 0 }, true, true),
    ];
    for (f, control, request) in table {
        assert_eq!(f.allowed_from_client(Control), control, "{f:?}");
        assert_eq!(f.allowed_from_client(Request), request, "{f:?}");
    }
}

#[test]
fn unidirectional_stream_types() {
    assert_eq!(classify_stream(0x00), UniStream::Control);
    assert_eq!(classify_stream(0x01), UniStream::Push);
    assert_eq!(classify_stream(0x02), UniStream::QpackEncoder);
    assert_eq!(classify_stream(0x03), UniStream::QpackDecoder);
    assert_eq!(classify_stream(0x21), UniStream::Reserved);
    assert_eq!(classify_stream(0x21 + 0x1f * 7), UniStream::Reserved);
    assert_eq!(classify_stream(0x04), UniStream::Unknown(4));
    // WebTransport's unidirectional stream type (not ours).
    assert_eq!(classify_stream(0x54), UniStream::Unknown(0x54));
}

#[test]
fn error_codes_are_rfc_9114s() {
    assert_eq!(ErrorCode::NoError.code(), 0x100);
    assert_eq!(ErrorCode::FrameUnexpected.code(), 0x105);
    assert_eq!(ErrorCode::FrameError.code(), 0x106);
    assert_eq!(ErrorCode::ExcessiveLoad.code(), 0x107);
    assert_eq!(ErrorCode::SettingsError.code(), 0x109);
    assert_eq!(ErrorCode::VersionFallback.code(), 0x110);
    assert_eq!(ErrorCode::QpackDecompressionFailed.code(), 0x200);
    assert_eq!(ErrorCode::QpackDecoderStreamError.code(), 0x202);
}
