//! RFC 9204's example B.1, the static table against Appendix A, every
//! dynamic reference refused, the limits, and the encoder read back.

use super::*;

use crate::hex_bytes as hex;

type List = Vec<(String, String)>;

fn decode(section: &[u8], max: usize) -> Result<List, QpackError> {
    let mut out = Vec::new();
    let size = Decoder::new().decode(section, max, &mut |f| {
        out.push((
            String::from_utf8(f.name.to_vec()).unwrap(),
            String::from_utf8(f.value.to_vec()).unwrap(),
        ))
    })?;
    let counted: usize = out
        .iter()
        .map(|(n, v)| n.len() + v.len() + FIELD_OVERHEAD)
        .sum();
    assert_eq!(size, counted);
    Ok(out)
}

fn list(fields: &[(&str, &str)]) -> List {
    fields
        .iter()
        .map(|(n, v)| (n.to_string(), v.to_string()))
        .collect()
}

#[test]
fn b1_literal_field_line_with_name_reference() {
    let section = hex("0000 510b 2f69 6e64 6578 2e68 746d 6c");
    assert_eq!(
        decode(&section, MAX_FIELD_SECTION_SIZE),
        Ok(list(&[(":path", "/index.html")]))
    );
    // The value is handed out borrowed from the section, not copied, and
    // the N bit (0 here) comes with it.
    let mut seen = 0;
    Decoder::new()
        .decode(&section, MAX_FIELD_SECTION_SIZE, &mut |f| {
            assert!(section.as_ptr_range().contains(&f.value.as_ptr()));
            assert!(!f.never_indexed);
            seen += 1;
        })
        .unwrap();
    assert_eq!(seen, 1);
}

#[test]
fn a_huffman_value_decodes() {
    // :authority (index 0) and RFC 7541 C.4.1's Huffman www.example.com.
    assert_eq!(
        decode(&hex("0000 50 8c f1e3c2e5f23a6ba0ab90f4ff"), 1000),
        Ok(list(&[(":authority", "www.example.com")]))
    );
    // 8 bits of padding: refused.
    assert_eq!(
        decode(&hex("0000 50 81 ff"), 1000),
        Err(QpackError::Huffman)
    );
}

#[test]
fn static_table_spot_checks_against_appendix_a() {
    assert_eq!(STATIC_TABLE.len(), 99);
    let expect: [(usize, &str, &str); 14] = [
        (0, ":authority", ""),
        (1, ":path", "/"),
        (15, ":method", "CONNECT"),
        (17, ":method", "GET"),
        (25, ":status", "200"),
        (26, ":status", "304"),
        (27, ":status", "404"),
        (31, "accept-encoding", "gzip, deflate, br"),
        (52, "content-type", "text/html; charset=utf-8"),
        (65, ":status", "206"),
        (69, ":status", "421"),
        (
            85,
            "content-security-policy",
            "script-src 'none'; object-src 'none'; base-uri 'none'",
        ),
        (92, "server", ""),
        (98, "x-frame-options", "sameorigin"),
    ];
    for (i, name, value) in expect {
        assert_eq!(STATIC_TABLE[i], (name, value), "index {i}");
    }
}

/// Every entry is found by its name and value (the lookup's chains cover
/// the table), names are lowercase, and no entry is there twice.
#[test]
fn every_static_entry_is_found_by_name_and_value() {
    for (i, (name, value)) in STATIC_TABLE.iter().enumerate() {
        assert!(!name.bytes().any(|b| b.is_ascii_uppercase()), "{name}");
        let first = static_name(name.as_bytes()).expect(name);
        assert_eq!(STATIC_TABLE[first].0, *name);
        assert!(first <= i);
        assert_eq!(static_exact(first, value.as_bytes()), Some(i), "{i}");
        // And encoded, it is one indexed field line.
        let mut out = Vec::new();
        encode_field(name.as_bytes(), value.as_bytes(), &mut out);
        let mut want = Vec::new();
        put_int(&mut want, 0xc0, 6, i);
        assert_eq!(out, want, "{i}");
    }
}

#[test]
fn statuses_use_the_static_table() {
    let status = |s| {
        let mut out = Vec::new();
        encode_status(s, &mut out);
        out
    };
    assert_eq!(status(200), [0xc0 | 25]);
    assert_eq!(status(304), [0xc0 | 26]);
    assert_eq!(status(404), [0xc0 | 27]);
    assert_eq!(status(103), [0xc0 | 24]);
    assert_eq!(status(503), [0xc0 | 28]);
    // Index 63 and past take a second byte.
    assert_eq!(status(100), [0xff, 0]);
    assert_eq!(status(206), [0xff, 65 - 63]);
    assert_eq!(status(421), [0xff, 69 - 63]);
    assert_eq!(status(500), [0xff, 71 - 63]);
    // Not in the table: :status (24) by name, then the digits (plain:
    // Huffman would take 17 bits).
    assert_eq!(status(418), [0x5f, 24 - 15, 3, b'4', b'1', b'8']);
    for s in 100..1000 {
        let got = decode(&[&SECTION_PREFIX[..], &status(s)].concat(), 1000);
        assert_eq!(got, Ok(list(&[(":status", &s.to_string())])), "{s}");
    }
}

fn encode(fields: &[(&str, &str)]) -> Vec<u8> {
    let mut out = Vec::new();
    encode_section_prefix(&mut out);
    for (n, v) in fields {
        match (*n, v.parse()) {
            (":status", Ok(s)) => encode_status(s, &mut out),
            _ => encode_field(n.as_bytes(), v.as_bytes(), &mut out),
        }
    }
    out
}

#[test]
fn a_response_round_trips() {
    let fields = [
        (":status", "200"),
        ("Content-Type", "text/html; charset=utf-8"),
        ("content-length", "1234"),
        ("etag", "\"5f3c-1a2b3c\""),
        ("last-modified", "Tue, 15 Nov 1994 08:12:31 GMT"),
        ("cache-control", "max-age=3600"),
        ("accept-ranges", "bytes"),
        ("content-range", "bytes 0-99/1234"),
        ("X-Served-By", "spindle"),
    ];
    let section = encode(&fields);
    let lower: Vec<(String, &str)> = fields
        .iter()
        .map(|(n, v)| (n.to_ascii_lowercase(), *v))
        .collect();
    let lower: Vec<(&str, &str)> = lower.iter().map(|(n, v)| (n.as_str(), *v)).collect();
    assert_eq!(decode(&section, MAX_FIELD_SECTION_SIZE), Ok(list(&lower)));
    // :status, the HTML type and accept-ranges are one byte each.
    assert_eq!(&section[..4], [0, 0, 0xc0 | 25, 0xc0 | 52]);
}

#[test]
fn a_request_round_trips() {
    let fields = [
        (":method", "GET"),
        (":scheme", "https"),
        (":authority", "www.example.com"),
        (":path", "/docs/index.html"),
        ("user-agent", "curl/8.5.0"),
        ("accept", "*/*"),
        ("accept-encoding", "gzip, deflate, br"),
        ("if-none-match", "\"abc\""),
        ("range", "bytes=0-"),
    ];
    let section = encode(&fields);
    assert_eq!(decode(&section, MAX_FIELD_SECTION_SIZE), Ok(list(&fields)));
    assert_eq!(&section[..4], [0, 0, 0xc0 | 17, 0xc0 | 23]);
}

#[test]
fn names_are_lowercased_and_long_ones_too() {
    let long = "X-".to_string() + &"Abc".repeat(40);
    let section = encode(&[(&long, "v"), ("ETag", "\"x\"")]);
    assert_eq!(
        decode(&section, MAX_FIELD_SECTION_SIZE),
        Ok(list(&[
            (&long.to_ascii_lowercase(), "v"),
            ("etag", "\"x\"")
        ]))
    );
}

#[test]
fn the_n_bit_is_reported() {
    let mut fields = Vec::new();
    let section = hex("0000 7001 61 3178 0179");
    Decoder::new()
        .decode(&section, 1000, &mut |f| {
            fields.push((f.name.to_vec(), f.value.to_vec(), f.never_indexed))
        })
        .unwrap();
    assert_eq!(
        fields,
        [
            (b":authority".to_vec(), b"a".to_vec(), true),
            (b"x".to_vec(), b"y".to_vec(), true)
        ]
    );
}

#[test]
fn dynamic_references_are_refused() {
    let cases = [
        // Required Insert Count 2.
        "0200 d1",
        // RFC 9204 B.2's request stream: Required Insert Count 3.
        "0381 1011",
        // Indexed field line, T = 0.
        "0000 80",
        // Indexed field line with post-base index.
        "0000 10",
        // Literal with name reference, T = 0.
        "0000 40 0161",
        // Literal with post-base name reference (N = 0 and 1).
        "0000 00 0161",
        "0000 08 0161",
    ];
    for c in cases {
        assert_eq!(
            decode(&hex(c), 1000),
            Err(QpackError::DynamicReference),
            "{c}"
        );
    }
    assert_eq!(
        QpackError::DynamicReference.code(),
        ErrorCode::QpackDecompressionFailed
    );
    // A negative Base.
    assert_eq!(decode(&hex("0080 d1"), 1000), Err(QpackError::BadBase));
    // A Base of 5 with no dynamic references: meaningless, and fine.
    assert_eq!(
        decode(&hex("0005 d1"), 1000),
        Ok(list(&[(":method", "GET")]))
    );
}

#[test]
fn static_indices_past_the_table_are_refused() {
    // Indexed 63 + 36 = 99; a name reference 15 + 84 = 99.
    assert_eq!(decode(&hex("0000 ff24"), 1000), Err(QpackError::BadIndex));
    assert_eq!(
        decode(&hex("0000 5f54 0161"), 1000),
        Err(QpackError::BadIndex)
    );
    // 98 is the last.
    assert_eq!(
        decode(&hex("0000 ff23"), 1000),
        Ok(list(&[("x-frame-options", "sameorigin")]))
    );
}

#[test]
fn a_section_over_the_size_limit_is_refused() {
    let a = "a".repeat(40);
    let b = "b".repeat(40);
    let section = encode(&[(&a, &b)]);
    let size = 40 + 40 + FIELD_OVERHEAD;
    assert_eq!(decode(&section, size), Ok(list(&[(&a, &b)])));
    assert_eq!(decode(&section, size - 1), Err(QpackError::TooLarge));
    assert_eq!(QpackError::TooLarge.code(), ErrorCode::ExcessiveLoad);
    // The default limit, by many small fields within MAX_FIELDS.
    let v = "v".repeat(200);
    let many: Vec<(&str, &str)> = (0..100).map(|_| ("x-filler", v.as_str())).collect();
    assert_eq!(
        decode(&encode(&many), MAX_FIELD_SECTION_SIZE),
        Err(QpackError::TooLarge)
    );
    // Nothing is handed out past the limit.
    let mut handed = 0;
    let r = Decoder::new().decode(&encode(&many), MAX_FIELD_SECTION_SIZE, &mut |_| handed += 1);
    assert_eq!(r, Err(QpackError::TooLarge));
    assert_eq!(handed, MAX_FIELD_SECTION_SIZE / (8 + 200 + FIELD_OVERHEAD));
}

#[test]
fn too_many_fields_are_refused() {
    let mut section = SECTION_PREFIX.to_vec();
    section.extend(std::iter::repeat_n(0xc0 | 17, MAX_FIELDS));
    assert_eq!(
        decode(&section, usize::MAX).map(|l| l.len()),
        Ok(MAX_FIELDS)
    );
    section.push(0xc0 | 17);
    assert_eq!(decode(&section, usize::MAX), Err(QpackError::TooLarge));
}

#[test]
fn a_string_too_long_is_refused_from_its_length() {
    // A literal name of MAX_STRING_LEN + 1 bytes, none of them there.
    let mut section = SECTION_PREFIX.to_vec();
    put_int(&mut section, 0x20, 3, MAX_STRING_LEN + 1);
    assert_eq!(decode(&section, usize::MAX), Err(QpackError::TooLarge));
    // At the limit, it waits for its bytes: truncated.
    let mut section = SECTION_PREFIX.to_vec();
    put_int(&mut section, 0x20, 3, MAX_STRING_LEN);
    assert_eq!(decode(&section, usize::MAX), Err(QpackError::Truncated));
}

#[test]
fn integers_up_to_2_62_and_no_further() {
    for prefix in 1..=8 {
        let max_prefix = (1usize << prefix) - 1;
        for v in [
            0,
            max_prefix - 1,
            max_prefix,
            max_prefix + 1,
            1 << 40,
            (1 << 62) - 1,
        ] {
            let mut out = Vec::new();
            put_int(&mut out, 0, prefix, v);
            assert_eq!(int(&out, prefix), Ok((v as u64, out.len())), "{prefix} {v}");
            for cut in 0..out.len() {
                assert_eq!(int(&out[..cut], prefix), Err(QpackError::Truncated));
            }
        }
        let mut out = Vec::new();
        put_int(&mut out, 0, prefix, 1 << 62);
        assert_eq!(int(&out, prefix), Err(QpackError::IntegerTooLarge));
    }
    // Zero groups as padding: a few are read, endless ones are not.
    assert_eq!(int(&hex("1f 80 80 00"), 5), Ok((31, 4)));
    let mut endless = vec![0x1f];
    endless.extend([0x80; 20]);
    assert_eq!(int(&endless, 5), Err(QpackError::IntegerTooLarge));
    // A Required Insert Count, and an index, that overflow.
    assert_eq!(
        decode(&hex("ff ffffffffffffffffff01 00"), 1000),
        Err(QpackError::IntegerTooLarge)
    );
    assert_eq!(
        decode(&hex("0000 ff ffffffffffffffffff7f"), 1000),
        Err(QpackError::IntegerTooLarge)
    );
}

#[test]
fn a_section_cut_anywhere_is_truncated_or_a_shorter_list() {
    let fields = [
        (":status", "404"),
        ("content-type", "text/plain"),
        ("x-reason", "no such file, Huffman-coded"),
        ("content-length", "9"),
    ];
    let section = encode(&fields);
    let whole = decode(&section, MAX_FIELD_SECTION_SIZE).unwrap();
    for cut in 0..section.len() {
        match decode(&section[..cut], MAX_FIELD_SECTION_SIZE) {
            Ok(l) => assert_eq!(l, whole[..l.len()], "cut at {cut}"),
            Err(e) => assert_eq!(e, QpackError::Truncated, "cut at {cut}"),
        }
    }
    assert_eq!(decode(&[], 1000), Err(QpackError::Truncated));
    assert_eq!(decode(&[0], 1000), Err(QpackError::Truncated));
    assert_eq!(decode(&SECTION_PREFIX, 1000), Ok(Vec::new()));
}
