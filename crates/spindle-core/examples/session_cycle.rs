//! Times the protocol core alone on a keep-alive connection: one request
//! in, head parsed, path resolved, response head built, as wrk sends them.
//! `cargo run --release -p spindle-core --example session_cycle`
use spindle_core::response::FileKind;
use spindle_core::{FileMeta, Session, SessionConfig, Step};
use std::time::Instant;

fn main() {
    let cfg = SessionConfig {
        max_requests_per_connection: u64::MAX,
        ..SessionConfig::default()
    };
    let meta = FileMeta {
        size: 1024,
        mtime_sec: 1_700_000_000,
        mtime_nsec: 0,
        ino: 7,
        kind: FileKind::Regular,
    };
    let reqs: Vec<Vec<u8>> = (0..1000)
        .map(|i| format!("GET /{i} HTTP/1.1\r\nHost: 127.0.0.1:8080\r\n\r\n").into_bytes())
        .collect();
    let mut s = Session::new();
    let n = 2_000_000;
    let mut best = f64::MAX;
    for _round in 0..5 {
        let t = Instant::now();
        let mut bytes = 0usize;
        for i in 0..n {
            s.feed(&reqs[i % reqs.len()]);
            let Step::Open(o) = s.next(&cfg) else {
                panic!("expected an open")
            };
            let r = s
                .opened(&cfg, &o, Ok(meta))
                .into_response()
                .expect("response");
            bytes += r.front.len();
            s.sent();
        }
        let ns = t.elapsed().as_nanos() as f64 / n as f64;
        best = best.min(ns);
        std::hint::black_box(bytes);
    }
    println!("{best:.1} ns per request (best of 5 rounds of {n})");
}
