//! What one HTTP/2 stream costs the core in allocations: a request's
//! HEADERS in (as h2load sends them: every field from HPACK's tables after
//! the first request), decoded and checked, the core's request, a stream
//! session that opens a 1 KiB file and answers it, the response's HEADERS
//! encoded and its DATA frame header, all dropped (no access log line:
//! `Session::log_info` copies what the line needs). Counted by a global
//! allocator, so this test is alone in its binary.
//!
//! `SPINDLE_STREAMS=N` runs N streams (for `perf stat`).

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering};

use spindle_core::file::FileKind;
use spindle_core::h2::conn::PREFACE;
use spindle_core::h2::frame;
use spindle_core::h2::hpack::Encoder;
use spindle_core::h2::{Event, H2Conn, H2Settings};
use spindle_core::{FileMeta, Session, SessionConfig, Step, StreamProtocol};

struct Counting;

static ALLOCS: AtomicU64 = AtomicU64::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        System.alloc(layout)
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout)
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        System.realloc(ptr, layout, new_size)
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Most allocations (and reallocations) one stream may cost: its
/// request's fields (one buffer), the core's request (its box, target,
/// host and user-agent), the path opened (its `CString`)
/// and the response's fields (one buffer).
const MAX_ALLOCS_PER_STREAM: u64 = 7;

const BODY: u64 = 1024;

/// Streams run before counting.
const WARM_UP: usize = 100;

/// One stream, start to end.
fn stream(c: &mut H2Conn, cfg: &SessionConfig, request: &[u8], update: &[u8]) {
    assert_eq!(c.feed(request, 0), request.len());
    let Some(Event::Request(req)) = c.poll_event() else {
        panic!("expected a request")
    };
    let core = req.to_core().expect("a request the core takes");
    let mut s = Session::for_stream(None, core, StreamProtocol::Http2);
    let Step::Open(open) = s.next(cfg) else {
        panic!("not an open")
    };
    let meta = FileMeta {
        size: BODY,
        mtime_sec: 1_700_000_000,
        mtime_nsec: 5,
        ino: 42,
        kind: FileKind::Regular,
    };
    let Step::Respond(r) = s.opened(cfg, &open, Ok(meta)) else {
        panic!("no response")
    };
    assert_eq!(r.status, 200);
    assert!(c.send_fields(req.stream_id, r.status, &r.fields, false));
    let h = c.data_frame(req.stream_id, BODY as usize, true).unwrap();
    std::hint::black_box(h);
    s.sent();
    c.advance_out(c.out().len());
    assert_eq!(c.feed(update, 0), update.len());
    while c.poll_event().is_some() {}
}

#[test]
fn an_h2_stream_costs_few_allocations() {
    let streams: u32 = std::env::var("SPINDLE_STREAMS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2000);
    let cfg = SessionConfig::default();
    let mut c = H2Conn::new(H2Settings::default());
    let mut start = PREFACE.to_vec();
    frame::put_settings(&mut start, &[]);
    assert_eq!(c.feed(&start, 0), start.len());
    c.advance_out(c.out().len());
    // h2load's fields, through an encoder that indexes them as nghttp2's
    // does: literals the first time, one index byte each after that.
    let fields: [(&[u8], &[u8]); 5] = [
        (b":method", b"GET"),
        (b":path", b"/1k"),
        (b":scheme", b"https"),
        (b":authority", b"127.0.0.1:8443"),
        (b"user-agent", b"h2load nghttp2/1.52.0"),
    ];
    let mut enc = Encoder::new();
    let mut update = Vec::new();
    frame::put_window_update(&mut update, 0, BODY as u32);
    let requests: Vec<Vec<u8>> = (0..streams.max(2 * WARM_UP as u32))
        .map(|i| {
            let mut block = Vec::new();
            for (n, v) in fields {
                enc.field(n, v, &mut block);
            }
            let mut f = Vec::new();
            frame::put_headers(&mut f, 1 + 2 * i, &block, true, 16384);
            f
        })
        .collect();
    // The first streams fill the tables and grow the buffers kept for
    // later (the connection's memory of closed streams holds 64).
    let (warm, counted) = requests.split_at(WARM_UP);
    for r in warm {
        stream(&mut c, &cfg, r, &update);
    }
    let before = ALLOCS.load(Ordering::Relaxed);
    for r in counted {
        stream(&mut c, &cfg, r, &update);
    }
    let per_stream = (ALLOCS.load(Ordering::Relaxed) - before) as f64 / counted.len() as f64;
    println!("{per_stream:.2} allocations per stream");
    // Within half an allocation: the allocator counts every thread of the
    // process (the test harness's too), and one CI run of 2026-11-28
    // counted 7.0016 per stream, three allocations over 1,900 streams
    // that no local run shows (40 runs: 7.00). One more allocation per
    // stream still fails.
    assert!(
        per_stream < MAX_ALLOCS_PER_STREAM as f64 + 0.5,
        "{per_stream} allocations per stream"
    );
}
