//! RFC 7541 Appendix C's examples (C.2 to C.6), and the decoder's limits.

use super::*;

use crate::hex_bytes as hex;

fn decode_all(d: &mut Decoder, block: &[u8]) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let fits = d
        .decode(block, usize::MAX, &mut |n, v| {
            out.push((
                String::from_utf8(n.to_vec()).unwrap(),
                String::from_utf8(v.to_vec()).unwrap(),
            ))
        })
        .unwrap();
    assert!(fits);
    out
}

fn list(fields: &[(&str, &str)]) -> Vec<(String, String)> {
    fields
        .iter()
        .map(|(n, v)| (n.to_string(), v.to_string()))
        .collect()
}

/// Each step: the encoded block, the fields it decodes to, and the
/// dynamic table's size after it.
type Steps<'a> = [(&'a str, &'a [(&'a str, &'a str)], usize)];

fn run(table: usize, steps: &Steps) {
    let mut d = Decoder::new(table);
    for (i, (block, fields, size)) in steps.iter().enumerate() {
        assert_eq!(decode_all(&mut d, &hex(block)), list(fields), "step {i}");
        assert_eq!(d.table_size(), *size, "table size after step {i}");
    }
}

#[test]
fn c2_field_representations() {
    run(
        4096,
        &[(
            "400a637573746f6d2d6b65790d637573746f6d2d686561646572",
            &[("custom-key", "custom-header")],
            55,
        )],
    );
    run(
        4096,
        &[(
            "040c2f73616d706c652f70617468",
            &[(":path", "/sample/path")],
            0,
        )],
    );
    run(
        4096,
        &[(
            "100870617373776f726406736563726574",
            &[("password", "secret")],
            0,
        )],
    );
    run(4096, &[("82", &[(":method", "GET")], 0)]);
}

const REQ1: &[(&str, &str)] = &[
    (":method", "GET"),
    (":scheme", "http"),
    (":path", "/"),
    (":authority", "www.example.com"),
];
const REQ2: &[(&str, &str)] = &[
    (":method", "GET"),
    (":scheme", "http"),
    (":path", "/"),
    (":authority", "www.example.com"),
    ("cache-control", "no-cache"),
];
const REQ3: &[(&str, &str)] = &[
    (":method", "GET"),
    (":scheme", "https"),
    (":path", "/index.html"),
    (":authority", "www.example.com"),
    ("custom-key", "custom-value"),
];

#[test]
fn c3_requests_without_huffman() {
    run(
        4096,
        &[
            ("828684410f7777772e6578616d706c652e636f6d", REQ1, 57),
            ("828684be58086e6f2d6361636865", REQ2, 110),
            (
                "828785bf400a637573746f6d2d6b65790c637573746f6d2d76616c7565",
                REQ3,
                164,
            ),
        ],
    );
}

#[test]
fn c4_requests_with_huffman() {
    run(
        4096,
        &[
            ("828684418cf1e3c2e5f23a6ba0ab90f4ff", REQ1, 57),
            ("828684be5886a8eb10649cbf", REQ2, 110),
            (
                "828785bf408825a849e95ba97d7f8925a849e95bb8e8b4bf",
                REQ3,
                164,
            ),
        ],
    );
}

const RESP1: &[(&str, &str)] = &[
    (":status", "302"),
    ("cache-control", "private"),
    ("date", "Mon, 21 Oct 2013 20:13:21 GMT"),
    ("location", "https://www.example.com"),
];
const RESP2: &[(&str, &str)] = &[
    (":status", "307"),
    ("cache-control", "private"),
    ("date", "Mon, 21 Oct 2013 20:13:21 GMT"),
    ("location", "https://www.example.com"),
];
const RESP3: &[(&str, &str)] = &[
    (":status", "200"),
    ("cache-control", "private"),
    ("date", "Mon, 21 Oct 2013 20:13:22 GMT"),
    ("location", "https://www.example.com"),
    ("content-encoding", "gzip"),
    (
        "set-cookie",
        "foo=ASDJKHQKBZXOQWEOPIUAXQWEOIU; max-age=3600; version=1",
    ),
];

/// C.5 and C.6 run with a 256-byte table, so entries are evicted.
#[test]
fn c5_responses_without_huffman() {
    run(
        256,
        &[
            (
                "4803333032580770726976617465611d4d6f6e2c203231204f637420323031332032303a31333a\
                 323120474d546e1768747470733a2f2f7777772e6578616d706c652e636f6d",
                RESP1,
                222,
            ),
            ("4803333037c1c0bf", RESP2, 222),
            (
                "88c1611d4d6f6e2c203231204f637420323031332032303a31333a323220474d54c05a04677a69\
                 707738666f6f3d4153444a4b48514b425a584f5157454f50495541585157454f49553b206d61782d\
                 6167653d333630303b2076657273696f6e3d31",
                RESP3,
                215,
            ),
        ],
    );
}

#[test]
fn c6_responses_with_huffman() {
    run(
        256,
        &[
            (
                "488264025885aec3771a4b6196d07abe941054d444a8200595040b8166e082a62d1bff6e919d29ad\
                 171863c78f0b97c8e9ae82ae43d3",
                RESP1,
                222,
            ),
            ("4883640effc1c0bf", RESP2, 222),
            (
                "88c16196d07abe941054d444a8200595040b8166e084a62d1bffc05a839bd9ab77ad94e7821dd7f2\
                 e6c7b335dfdfcd5b3960d5af27087f3672c1ab270fb5291f9587316065c003ed4ee5b1063d5007",
                RESP3,
                215,
            ),
        ],
    );
}

/// C.1's integers, both ways.
#[test]
fn c1_integers() {
    let mut out = Vec::new();
    put_int(&mut out, 0, 5, 10);
    assert_eq!(out, [0x0a]);
    out.clear();
    put_int(&mut out, 0, 5, 1337);
    assert_eq!(out, [0x1f, 0x9a, 0x0a]);
    out.clear();
    put_int(&mut out, 0, 8, 42);
    assert_eq!(out, [0x2a]);
    assert_eq!(int(&[0x1f, 0x9a, 0x0a], 5), Ok((1337, 3)));
    assert_eq!(int(&[0x0a], 5), Ok((10, 1)));
}

#[test]
fn integers_cannot_overflow() {
    // 2^32 and beyond, and endless continuation bytes.
    assert_eq!(
        int(&[0x1f, 0xff, 0xff, 0xff, 0xff, 0x0f], 5),
        Err(HpackError::IntegerTooLarge)
    );
    let long = [0x1f, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01];
    assert_eq!(int(&long, 5), Err(HpackError::IntegerTooLarge));
    assert_eq!(int(&[0x1f, 0x80], 5), Err(HpackError::Truncated));
}

fn decode_err(table: usize, block: &[u8]) -> HpackError {
    Decoder::new(table)
        .decode(block, usize::MAX, &mut |_, _| {})
        .unwrap_err()
}

#[test]
fn bad_blocks_are_compression_errors() {
    // Index 0; an index past both tables.
    assert_eq!(decode_err(4096, &[0x80]), HpackError::BadIndex);
    assert_eq!(decode_err(4096, &[0xbe]), HpackError::BadIndex);
    // A size update after a field; over our limit; three of them.
    assert_eq!(decode_err(4096, &[0x82, 0x20]), HpackError::BadSizeUpdate);
    assert_eq!(
        decode_err(4096, &[0x3f, 0xe2, 0x1f]),
        HpackError::BadSizeUpdate
    );
    assert_eq!(
        decode_err(4096, &[0x20, 0x20, 0x20]),
        HpackError::BadSizeUpdate
    );
    // A string longer than the block.
    assert_eq!(decode_err(4096, &[0x00, 0x05, b'a']), HpackError::Truncated);
    // A Huffman string that is EOS.
    assert_eq!(
        decode_err(4096, &[0x00, 0x84, 0xff, 0xff, 0xff, 0xff, 0x00]),
        HpackError::Huffman
    );
    // Two updates at the start are fine (the smallest, then the final).
    let mut d = Decoder::new(4096);
    assert_eq!(
        d.decode(&[0x20, 0x3f, 0xe1, 0x1f, 0x82], 100, &mut |_, _| {}),
        Ok(true)
    );
}

/// An HPACK bomb: one 4 KiB table entry named a thousand times. The list
/// limit stops the fields after the first, and nothing is copied.
#[test]
fn a_bomb_stops_at_the_list_limit() {
    // A literal with indexing, new name "x", a value of 4000 bytes ...
    let mut b = vec![0x40, 0x01, b'x'];
    put_int(&mut b, 0, 7, 4000);
    b.extend(std::iter::repeat_n(b'a', 4000));
    b.extend(std::iter::repeat_n(0xbe, 1000)); // ... then index 62 a thousand times
    let mut d = Decoder::new(4096);
    let mut seen = 0;
    let fits = d.decode(&b, 16384, &mut |_, v| seen += v.len()).unwrap();
    assert!(!fits);
    assert_eq!(seen, 4 * 4000, "fields handed out stop at the limit");
    assert_eq!(d.table_size(), 4000 + 1 + FIELD_OVERHEAD);
}

/// What the encoder writes, the decoder reads back.
#[test]
fn responses_round_trip() {
    for status in [200, 206, 304, 404, 302, 416, 503] {
        let mut out = Vec::new();
        encode_status(status, &mut out);
        encode_field(b"Content-Type", b"text/html; charset=utf-8", &mut out);
        encode_field(b"x-custom", b"\x01binary\xff", &mut out);
        encode_field(b"etag", b"\"abc\"", &mut out);
        // Names outside the static table, lowercased on the stack and
        // (past 64 bytes) in a copy.
        encode_field(b"X-Frame-Options", b"DENY", &mut out);
        let long = [b'Y'; 70];
        encode_field(&long, b"v", &mut out);
        let mut got = Vec::new();
        Decoder::new(0)
            .decode(&out, usize::MAX, &mut |n, v| {
                got.push((n.to_vec(), v.to_vec()))
            })
            .unwrap();
        assert_eq!(
            got,
            vec![
                (b":status".to_vec(), status.to_string().into_bytes()),
                (
                    b"content-type".to_vec(),
                    b"text/html; charset=utf-8".to_vec()
                ),
                (b"x-custom".to_vec(), b"\x01binary\xff".to_vec()),
                (b"etag".to_vec(), b"\"abc\"".to_vec()),
                (b"x-frame-options".to_vec(), b"DENY".to_vec()),
                (vec![b'y'; 70], b"v".to_vec()),
            ]
        );
    }
    // 200 is one byte: the static table's index 8.
    let mut out = Vec::new();
    encode_status(200, &mut out);
    assert_eq!(out, [0x88]);
}

/// The `match` of common names agrees with a search of the table, for
/// every name in it and a few outside.
#[test]
fn static_names_are_found_as_by_a_search() {
    for (name, _) in STATIC_TABLE
        .iter()
        .chain(&[("x-custom", ""), ("dates", "")])
    {
        let searched = STATIC_TABLE.iter().position(|(n, _)| n == name);
        assert_eq!(static_name(name.as_bytes()), searched, "{name}");
    }
}

/// Encodes one response block with `e` (`:status` 200, then `fields`).
fn encode_block(e: &mut Encoder, fields: &[(&str, &str)]) -> Vec<u8> {
    let mut out = Vec::new();
    e.begin_block(&mut out);
    encode_status(200, &mut out);
    for (n, v) in fields {
        e.field(n.as_bytes(), v.as_bytes(), &mut out);
    }
    out
}

fn with_status(fields: &[(&str, &str)]) -> Vec<(String, String)> {
    let mut all = list(&[(":status", "200")]);
    all.extend(
        fields
            .iter()
            .map(|(n, v)| (n.to_ascii_lowercase(), v.to_string())),
    );
    all
}

#[test]
fn the_encoder_sends_a_repeated_field_as_one_index_byte() {
    let fields = [
        ("Server", "spindle"),
        ("Date", "Sat, 28 Nov 2026 05:00:00 GMT"),
        ("Content-Type", "text/html; charset=utf-8"),
        ("Content-Length", "1024"),
        ("ETag", "\"1f-400-65a.0\""),
        ("Accept-Ranges", "bytes"),
        ("Content-Range", "bytes 0-1/2"),
        ("X-Custom-Name", "v"),
    ];
    let mut e = Encoder::new();
    let mut d = Decoder::new(4096);
    let first = encode_block(&mut e, &fields);
    assert_eq!(decode_all(&mut d, &first), with_status(&fields));
    let second = encode_block(&mut e, &fields);
    assert_eq!(decode_all(&mut d, &second), with_status(&fields));
    // :status, seven indexed fields, and content-range as a literal again.
    let literal = {
        let mut v = Vec::new();
        encode_field(b"content-range", b"bytes 0-1/2", &mut v);
        v.len()
    };
    assert_eq!(second.len(), 1 + 7 + literal, "{second:02x?}");
    assert!(e.table_size() <= ENCODER_TABLE_MAX);
}

#[test]
fn the_encoder_keeps_in_step_with_a_decoder_through_evictions() {
    let mut e = Encoder::new();
    let mut d = Decoder::new(4096);
    for i in 0..2000u32 {
        let date = format!("Sat, 28 Nov 2026 05:{:02}:{:02} GMT", i / 60 % 60, i % 60);
        let len = (i % 37).to_string();
        let tag = format!("\"{i:x}\"");
        let long = "x".repeat(i as usize % 300);
        let fields = [
            ("server", "spindle"),
            ("date", date.as_str()),
            ("content-length", len.as_str()),
            ("etag", tag.as_str()),
            ("x-long", long.as_str()),
        ];
        let block = encode_block(&mut e, &fields);
        assert_eq!(
            decode_all(&mut d, &block),
            with_status(&fields),
            "block {i}"
        );
        assert!(e.table_size() <= ENCODER_TABLE_MAX);
    }
}

#[test]
fn the_encoder_signals_the_peers_table_size_before_its_next_block() {
    let fields = [("server", "spindle"), ("content-type", "image/png")];
    let mut e = Encoder::new();
    let mut d = Decoder::new(4096);
    decode_all(&mut d, &encode_block(&mut e, &fields));
    // The peer shrinks its table to nothing, then allows 100 bytes: both
    // changes are said (the smallest first), the table emptied.
    e.set_peer_max(0);
    e.set_peer_max(100);
    let block = encode_block(&mut e, &fields);
    assert_eq!(&block[..2], &[0x20, 0x3f], "size updates 0, then 100");
    assert_eq!(decode_all(&mut d, &block), with_status(&fields));
    let again = encode_block(&mut e, &fields);
    assert_eq!(decode_all(&mut d, &again), with_status(&fields));
    assert!(e.table_size() <= 100);
    // A peer allowing more than ENCODER_TABLE_MAX gets that much.
    e.set_peer_max(65536);
    let block = encode_block(&mut e, &fields);
    assert_eq!(block[0] & 0xe0, 0x20, "a size update first");
    assert_eq!(decode_all(&mut d, &block), with_status(&fields));
    // Nothing owed: no update.
    let block = encode_block(&mut e, &fields);
    assert_eq!(block[0], 0x88, ":status 200 first");
}

/// The fields of the last block, remembered by place, are found again
/// whatever moved: fields in another order, values that change, entries
/// evicted, more fields than it remembers.
#[test]
fn the_encoder_keeps_in_step_when_the_fields_move() {
    let mut e = Encoder::new();
    let mut d = Decoder::new(4096);
    let mut x = 0x2545_f491_4f6c_dd1du64;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for i in 0..3000u32 {
        let n = 1 + next() % 20;
        let values: Vec<(String, String)> = (0..n)
            .map(|_| {
                let r = next();
                let name = format!("x-{}", r % 24);
                let value = "v".repeat((r >> 8) as usize % (if i % 7 == 0 { 600 } else { 40 }));
                (name, value)
            })
            .collect();
        let fields: Vec<(&str, &str)> = values
            .iter()
            .map(|(n, v)| (n.as_str(), v.as_str()))
            .collect();
        let block = encode_block(&mut e, &fields);
        assert_eq!(
            decode_all(&mut d, &block),
            with_status(&fields),
            "block {i}"
        );
        // The same block again: every field that fits the table, one byte.
        let again = encode_block(&mut e, &fields);
        assert_eq!(
            decode_all(&mut d, &again),
            with_status(&fields),
            "block {i}"
        );
        assert!(e.table_size() <= ENCODER_TABLE_MAX);
    }
}
