//! Hostile HTTP/2 clients against the real server, over raw TCP (h2c):
//! rapid reset, a CONTINUATION flood, an HPACK bomb, SETTINGS and PING
//! floods, a window held at zero, a window overflow, a frame over the
//! maximum size. Each must end in GOAWAY (with the right code) or a
//! stream reset or refusal, while a probe on another connection keeps
//! being answered and the server's memory stays bounded. The frames are
//! written here byte by byte (RFC 9113 §4.1, §6; HPACK literals of
//! RFC 7541 §6.2.2 without Huffman), not by the server's own encoder.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

// Frame types and flags (§6).
const DATA: u8 = 0;
const HEADERS: u8 = 1;
const RST_STREAM: u8 = 3;
const SETTINGS: u8 = 4;
const PING: u8 = 6;
const GOAWAY: u8 = 7;
const WINDOW_UPDATE: u8 = 8;
const CONTINUATION: u8 = 9;
const END_STREAM: u8 = 1;
const END_HEADERS: u8 = 4;

// Error codes (§7).
const PROTOCOL_ERROR: u32 = 1;
const FLOW_CONTROL_ERROR: u32 = 3;
const FRAME_SIZE_ERROR: u32 = 6;
const ENHANCE_YOUR_CALM: u32 = 0xb;

use common::h2_frame as frame;

/// A GET of `path`: `:method GET` (static 2), `:scheme http` (6),
/// `:path` (name 4) and `:authority` (name 1) as literals.
fn get_block(path: &str) -> Vec<u8> {
    let mut b = vec![0x82, 0x86, 0x04];
    hstr(&mut b, path.as_bytes());
    b.push(0x01);
    hstr(&mut b, b"localhost");
    b
}

type Got = H2Got;

impl Got {
    /// GOAWAY with `code`, then the server closed the connection.
    fn goaway_then_close(&self, code: u32, what: &str) {
        assert_eq!(self.goaway(), Some(code), "{what}: GOAWAY's code");
        assert!(
            self.closed,
            "{what}: the connection stayed open after GOAWAY"
        );
    }

    fn has(&self, kind: u8) -> bool {
        self.frames.iter().any(|f| f.0 == kind)
    }
}

/// Opens an h2c connection (preface, empty SETTINGS), writes `abuse` (as
/// far as the server reads it) and collects what comes back.
fn abuse(srv: &Server, settings: &[u8], abuse: &[u8], wait: Duration) -> Got {
    let mut s = srv.connect();
    s.set_write_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut hello = PREFACE.to_vec();
    frame(&mut hello, SETTINGS, 0, 0, settings);
    s.write_all(&hello).unwrap();
    let mut r = s.try_clone().unwrap();
    let writer = {
        let abuse = abuse.to_vec();
        std::thread::spawn(move || {
            // The server may close before taking it all: that is its answer.
            let _ = s.write_all(&abuse);
            s
        })
    };
    r.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let deadline = Instant::now() + wait;
    let mut buf = Vec::new();
    let mut closed = false;
    while Instant::now() < deadline {
        let mut chunk = [0u8; 65536];
        match r.read(&mut chunk) {
            Ok(0) => {
                closed = true;
                break;
            }
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) if e.kind() == std::io::ErrorKind::TimedOut => {}
            Err(_) => {
                closed = true;
                break;
            }
        }
    }
    drop(writer);
    let frames = h2_frames(&buf);
    Got { frames, closed }
}

fn rss_kib(pid: u32) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    s.lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap()
}

#[test]
fn hostile_clients_get_goaway_or_a_reset_and_others_notice_nothing() {
    for b in &backends_with(Cap::Http2) {
        eprintln!("backend {b}");
        hostile_on(b);
    }
}

fn hostile_on(backend: &str) {
    let root = DocRoot::new(true);
    let srv = Server::start(
        backend,
        &root.dir,
        &["--workers", "1", "--send-timeout", "2"],
    );
    let pid = srv.child.id();

    // The probe: an HTTP/1.1 keep-alive connection fetching a small file
    // every 2 ms on the same worker, for as long as the abuse lasts.
    let stop = Arc::new(AtomicBool::new(false));
    let probe = {
        let stop = stop.clone();
        let addr = srv.addr;
        std::thread::spawn(move || {
            let mut s = TcpStream::connect(addr).unwrap();
            s.set_nodelay(true).unwrap();
            let mut r = std::io::BufReader::new(s.try_clone().unwrap());
            let mut took = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                let t = Instant::now();
                s.write_all(b"GET /f1 HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
                let resp = read_response(&mut r, false).unwrap();
                assert_eq!(resp.status, 200);
                took.push(t.elapsed());
                std::thread::sleep(Duration::from_millis(2));
            }
            took
        })
    };
    std::thread::sleep(Duration::from_millis(200));
    let rss_before = rss_kib(pid);
    let wait = Duration::from_secs(5);

    // Rapid reset (CVE-2023-44487): 20,000 HEADERS, each cancelled at once.
    let mut a = Vec::new();
    for i in 0..20_000u32 {
        let id = 2 * i + 1;
        frame(
            &mut a,
            HEADERS,
            END_STREAM | END_HEADERS,
            id,
            &get_block("/big"),
        );
        frame(&mut a, RST_STREAM, 0, id, &8u32.to_be_bytes());
    }
    let got = abuse(&srv, &[], &a, wait);
    got.goaway_then_close(ENHANCE_YOUR_CALM, "rapid reset");

    // A CONTINUATION flood: one header block that never ends.
    let mut a = Vec::new();
    frame(&mut a, HEADERS, 0, 1, &get_block("/f1"));
    for _ in 0..10_000 {
        frame(&mut a, CONTINUATION, 0, 1, &[0x40, 1, b'x', 1, b'y']);
    }
    let got = abuse(&srv, &[], &a, wait);
    assert!(got.goaway().is_some(), "CONTINUATION flood: no GOAWAY");

    // An HPACK bomb: one 4 KiB field put in the dynamic table, then
    // referenced thousands of times in one block (a 4 KiB block that
    // decodes to megabytes).
    let mut block = get_block("/f1");
    // Literal with incremental indexing, new name "x" (§6.2.1), and a
    // value of 4000 bytes: its length is 127 + 3873, 3873 = 33 + 30 * 128.
    block.extend_from_slice(&[0x40, 1, b'x', 0x7f, 0x80 | 33, 30]);
    block.extend(std::iter::repeat_n(b'a', 4000));
    for _ in 0..4000 {
        block.push(0x80 | 62); // the entry just added (dynamic index 62)
    }
    let mut a = Vec::new();
    // Frames of 16 KiB at most.
    let mut chunks = block.chunks(16_384).peekable();
    let first = chunks.next().unwrap();
    let one = chunks.peek().is_none();
    frame(
        &mut a,
        HEADERS,
        END_STREAM | if one { END_HEADERS } else { 0 },
        1,
        first,
    );
    while let Some(c) = chunks.next() {
        let last = chunks.peek().is_none();
        frame(
            &mut a,
            CONTINUATION,
            if last { END_HEADERS } else { 0 },
            1,
            c,
        );
    }
    let got = abuse(&srv, &[], &a, wait);
    let answered_200 = got
        .frames
        .iter()
        .any(|f| f.0 == HEADERS && f.2 == 1 && f.3.first() == Some(&0x88));
    assert!(!answered_200, "HPACK bomb: served");
    assert!(
        got.goaway().is_some() || got.has(RST_STREAM) || got.has(HEADERS),
        "HPACK bomb: neither refused nor reset"
    );

    // SETTINGS and PING floods.
    for (kind, len, what) in [(SETTINGS, 0, "SETTINGS"), (PING, 8, "PING")] {
        let mut a = Vec::new();
        for _ in 0..5_000 {
            frame(&mut a, kind, 0, 0, &vec![0u8; len]);
        }
        let got = abuse(&srv, &[], &a, wait);
        got.goaway_then_close(ENHANCE_YOUR_CALM, &format!("{what} flood"));
    }

    // A window held at zero: the body never moves, and the stream is
    // reset after the send timeout (2 s here).
    let mut a = Vec::new();
    frame(
        &mut a,
        HEADERS,
        END_STREAM | END_HEADERS,
        1,
        &get_block("/big"),
    );
    let zero = [0u8, 4, 0, 0, 0, 0]; // INITIAL_WINDOW_SIZE = 0
    let got = abuse(&srv, &zero, &a, Duration::from_secs(6));
    assert!(got.has(HEADERS), "window 0: no response head");
    assert!(!got.has(DATA), "window 0: DATA sent");
    assert!(
        got.has(RST_STREAM) || got.goaway().is_some(),
        "window 0: the stream was never reset"
    );

    // A window overflow (§6.9.1).
    let mut a = Vec::new();
    frame(&mut a, WINDOW_UPDATE, 0, 0, &0x7fff_ffffu32.to_be_bytes());
    frame(&mut a, WINDOW_UPDATE, 0, 0, &0x7fff_ffffu32.to_be_bytes());
    let got = abuse(&srv, &[], &a, wait);
    got.goaway_then_close(FLOW_CONTROL_ERROR, "window overflow");

    // A frame over SETTINGS_MAX_FRAME_SIZE (16,384).
    let mut a = Vec::new();
    frame(&mut a, HEADERS, END_HEADERS, 1, &vec![0u8; 20_000]);
    let got = abuse(&srv, &[], &a, wait);
    got.goaway_then_close(FRAME_SIZE_ERROR, "oversized frame");

    // A bad preface.
    let mut s = srv.connect();
    s.write_all(b"PRI * HTTP/2.0\r\n\r\nXX\r\n\r\n").unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut back = Vec::new();
    let _ = s.read_to_end(&mut back);
    assert!(
        back.windows(4).any(|w| w == [0, 0, 8, GOAWAY]),
        "bad preface: no GOAWAY"
    );
    let _ = PROTOCOL_ERROR;

    stop.store(true, Ordering::Relaxed);
    let mut took = probe.join().unwrap();
    let rss_after = rss_kib(pid);
    took.sort();
    let p99 = took[took.len() * 99 / 100];
    eprintln!(
        "probe: {} fetches meanwhile, p50 {:?}, p99 {:?}, max {:?}; server RSS {} -> {} KiB",
        took.len(),
        took[took.len() / 2],
        p99,
        took.last().unwrap(),
        rss_before,
        rss_after
    );
    // The 10 ms bar is a benchmark's (docs/benchmarks.md, release build);
    // here, in a debug build on a shared machine, only "never stalled".
    assert!(p99 < Duration::from_millis(100), "probe p99 {p99:?}");
    assert!(
        rss_after < rss_before + 64 * 1024,
        "server RSS grew from {rss_before} to {rss_after} KiB"
    );
}
