//! Times the HTTP/2 core alone on one connection: a request's HEADERS in
//! (HPACK-indexed after the first, as h2load and browsers send them, with
//! the WINDOW_UPDATE that pays for the last body), the request decoded
//! and checked, response HEADERS encoded, one DATA frame header for a
//! 1 KiB body.
//! `cargo run --release -p spindle-core --example h2_cycle`
use spindle_core::h2::conn::PREFACE;
use spindle_core::h2::frame::{self, flag, kind, FrameHeader};
use spindle_core::h2::{Event, H2Conn, H2Settings};
use std::time::Instant;

const BODY: usize = 1024;

fn frame(kind: u8, flags: u8, stream_id: u32, payload: &[u8]) -> Vec<u8> {
    let mut f = FrameHeader {
        len: payload.len() as u32,
        kind,
        flags,
        stream_id,
    }
    .encode()
    .to_vec();
    f.extend_from_slice(payload);
    f
}

/// A request's header block: `:method GET`, `:scheme https`, `:path` as
/// a literal, and `:authority` and `user-agent` from the dynamic table
/// (literals with indexing the first time).
fn block(first: bool, path: &str) -> Vec<u8> {
    let mut b = vec![0x82, 0x87, 0x04, path.len() as u8];
    b.extend_from_slice(path.as_bytes());
    if first {
        b.extend_from_slice(&[0x41, 14]);
        b.extend_from_slice(b"127.0.0.1:8443");
        b.extend_from_slice(&[0x40 | 58, 11]);
        b.extend_from_slice(b"h2load/1.52");
    } else {
        b.extend_from_slice(&[0xbf, 0xbe]);
    }
    b
}

fn main() {
    let mut c = H2Conn::new(H2Settings::default());
    let mut start = PREFACE.to_vec();
    frame::put_settings(&mut start, &[]);
    assert_eq!(c.feed(&start, 0), start.len());
    c.advance_out(c.out().len());
    let paths: Vec<String> = (0..1000).map(|i| format!("/file{i}.html")).collect();
    let fields: [(&[u8], &[u8]); 6] = [
        (b"server", b"spindle"),
        (b"date", b"Thu, 26 Nov 2026 18:00:00 GMT"),
        (b"content-type", b"text/html"),
        (b"content-length", b"1024"),
        (b"last-modified", b"Wed, 25 Nov 2026 10:00:00 GMT"),
        (b"etag", b"\"6566c1a0-400\""),
    ];
    let update = frame(kind::WINDOW_UPDATE, 0, 0, &(BODY as u32).to_be_bytes());
    let n = 1_000_000u32;
    let mut best = f64::MAX;
    let mut id = 1u32;
    for _round in 0..5 {
        let reqs: Vec<Vec<u8>> = (0..n)
            .map(|i| {
                let mut r = frame(
                    kind::HEADERS,
                    flag::END_HEADERS | flag::END_STREAM,
                    id + 2 * i,
                    &block(id + 2 * i == 1, &paths[i as usize % paths.len()]),
                );
                r.extend_from_slice(&update);
                r
            })
            .collect();
        let t = Instant::now();
        let mut bytes = 0usize;
        for r in &reqs {
            assert_eq!(c.feed(r, 0), r.len());
            let Some(Event::Request(req)) = c.poll_event() else {
                panic!("expected a request")
            };
            c.send_headers(req.stream_id, 200, &fields, false);
            let h = c
                .data_frame(req.stream_id, BODY, true)
                .expect("a window for the body");
            bytes += c.out().len() + h.len();
            c.advance_out(c.out().len());
            while c.poll_event().is_some() {}
        }
        let ns = t.elapsed().as_nanos() as f64 / f64::from(n);
        best = best.min(ns);
        std::hint::black_box(bytes);
        id += 2 * n;
    }
    println!("{best:.1} ns per request (best of 5 rounds of {n})");
}
