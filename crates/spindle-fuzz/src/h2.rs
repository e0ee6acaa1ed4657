//! The `h2` check: any bytes after a valid preface into an HTTP/2
//! connection, with a driver that answers as a server's would.

use spindle_core::h2::frame::{self, kind, Frame, Parsed, DEFAULT_WINDOW, MAX_MAX_FRAME_SIZE};
use spindle_core::h2::hpack::Decoder;
use spindle_core::h2::{conn, ErrorCode, Event, H2Conn, H2Settings};

use crate::{num, xorshift};

/// Most rounds of feed-and-answer one input may drive.
const MAX_ROUNDS: usize = 100_000;

/// `out` may pass the high-water mark by what one round adds after
/// `feed` stops: a few control frames per frame fed, plus the answers'
/// HEADERS (each under [`MAX_ANSWER_BLOCK`]), for every open stream.
const OUT_SLACK: usize = 256 << 10;

/// Response header fields the driver sends: small, but enough to split
/// into CONTINUATION frames when the input asks for a big one.
const BIG_FIELD: usize = 17_000;
const MAX_ANSWER_BLOCK: usize = BIG_FIELD + 1024;

/// Bytes the connection may hold besides its fixed size: `out` at its
/// bound, a header block at its limit, the HPACK table.
const MAX_BUFFERED: usize = 1 << 20;

/// The connection, fed the preface then the input in pieces, with the
/// driver's choices drawn from the input too.
///
/// Input: byte 0 picks the limits (defaults, or two streams, a 200-byte
/// header list and a 256-byte HPACK table, and tight flood budgets),
/// bytes 1-2 seed the split into pieces, bytes 3-10 seed the driver
/// (answer with a body or not, a big header field, reset, shut down);
/// the rest is the client's bytes after the preface.
///
/// Invariants: no panic; every byte the connection writes parses as a
/// frame (as a client would parse it) and every header block it writes
/// decodes; `out`, the connection's buffers and its open streams stay
/// bounded; `feed` always makes progress or has output or events for the
/// driver; DATA sent never exceeds the windows the client opened (the
/// connection's: 65,535 plus every connection WINDOW_UPDATE in the
/// input); after `Close` nothing more is written.
pub fn h2(data: &[u8]) {
    let conf = data.first().copied().unwrap_or(0);
    let mut split = num(data, 1, 2) | 1;
    let mut world = num(data, 3, 8) | 1;
    let input = data.get(11..).unwrap_or(&[]);
    let cfg = if conf & 1 != 0 {
        H2Settings {
            max_concurrent_streams: 2,
            max_header_list_size: 200,
            header_table_size: 256,
            max_continuation_frames: 2,
            max_header_block: 400,
            flood: spindle_core::h2::FloodLimits {
                resets: 3,
                settings: 3,
                pings: 3,
                empty_data: 3,
                window_updates: 20,
                priorities: 3,
            },
            ..H2Settings::default()
        }
    } else {
        H2Settings::default()
    };
    let max_streams = cfg.max_concurrent_streams as usize;
    let window_limit = DEFAULT_WINDOW as u64 + connection_window_updates(input);
    let mut stream = conn::PREFACE.to_vec();
    stream.extend_from_slice(input);

    let mut c = H2Conn::new(cfg);
    let mut client = Client::default();
    let mut consumed = 0usize;
    let mut fed_to = 0usize;
    let mut open: Vec<u32> = Vec::new();
    let mut closed = false;
    let mut data_sent = 0u64;
    for round in 0..MAX_ROUNDS {
        let closed_before = closed;
        // Receive a piece: what is pending plus up to 64 more bytes.
        split = xorshift(split);
        fed_to = (fed_to + 1 + split as usize % 64).min(stream.len());
        let window = &stream[consumed..fed_to];
        let n = c.feed(window, round as u64 * 7);
        assert!(n <= window.len());
        consumed += n;
        let rest = &stream[consumed..fed_to];
        // Input held back with nothing to drain must be a partial frame.
        let stalled = !rest.is_empty() && c.out().is_empty();
        // Events.
        let mut had_event = false;
        while let Some(e) = c.poll_event() {
            had_event = true;
            assert!(!closed, "an event after Close: {e:?}");
            match e {
                Event::Request(r) => {
                    assert!(!open.contains(&r.stream_id));
                    assert!(r.path().starts_with('/') || r.path() == "*");
                    world = xorshift(world);
                    match world % 8 {
                        0 => c.reset(r.stream_id, ErrorCode::Cancel),
                        1 => {
                            let big = vec![b'v'; BIG_FIELD];
                            c.send_headers(r.stream_id, 200, &[(b"x-big", &big)], true);
                        }
                        2 | 3 => {
                            c.send_headers(r.stream_id, 404, &[(b"Content-Length", b"0")], true);
                        }
                        _ => {
                            c.send_headers(
                                r.stream_id,
                                200,
                                &[(b"content-type", b"text/plain")],
                                false,
                            );
                            open.push(r.stream_id);
                        }
                    }
                }
                Event::StreamReset { stream_id } => open.retain(|&s| s != stream_id),
                Event::Close => closed = true,
                Event::WindowOpened | Event::GoAway { .. } => {}
            }
        }
        assert!(c.open_streams() <= max_streams);
        if stalled && !had_event && !closed {
            if let Some(head) = rest.first_chunk::<9>() {
                let h = frame::FrameHeader::parse(head);
                assert!(
                    rest.len() < 9 + h.len as usize,
                    "feed held back a whole frame with nothing to drain"
                );
            }
        }
        // Send bodies: a few frames, fairly.
        for _ in 0..4 {
            let Some(id) = c.next_sendable() else { break };
            let budget = c.data_budget(id);
            assert!(budget > 0, "next_sendable named a stream with no budget");
            world = xorshift(world);
            let len = 1 + world as usize % budget;
            let end = world & (1 << 20) != 0;
            let h = c
                .data_frame(id, len, end)
                .expect("the stream next_sendable named takes DATA");
            data_sent += len as u64;
            assert!(data_sent <= window_limit, "DATA past the connection window");
            let mut f = h.to_vec();
            f.resize(9 + len, 0);
            client.read(&f);
            if end {
                open.retain(|&s| s != id);
            }
        }
        world = xorshift(world);
        match world % 512 {
            0 => c.shutdown(),
            1 => c.go_away(ErrorCode::InternalError),
            2 => {
                if let Some(&id) = open.first() {
                    c.reset(id, ErrorCode::InternalError);
                    open.retain(|&s| s != id);
                }
            }
            _ => {}
        }
        // Write what the connection has: it parses, and is bounded.
        let out = c.out().to_vec();
        assert!(
            !closed_before || out.is_empty(),
            "bytes written after Close"
        );
        assert!(
            out.len() <= conn::OUT_HIGH_WATER + OUT_SLACK,
            "out at {}",
            out.len()
        );
        assert!(c.buffered() <= MAX_BUFFERED, "buffers at {}", c.buffered());
        if closed {
            assert!(c.is_closed());
        }
        client.read(&out);
        c.advance_out(out.len());
        if fed_to == stream.len() && (stalled || consumed == fed_to) && !had_event {
            break;
        }
    }
    assert!(client.buf.is_empty(), "a partial frame written");
}

/// The sum of every connection-level WINDOW_UPDATE in the input (an upper
/// bound on what the connection may count: frames after an error are
/// never read).
fn connection_window_updates(mut input: &[u8]) -> u64 {
    let mut sum = 0u64;
    while let Some(head) = input.first_chunk::<9>() {
        let h = frame::FrameHeader::parse(head);
        let end = 9 + h.len as usize;
        let Some(payload) = input.get(9..end) else {
            break;
        };
        if h.kind == kind::WINDOW_UPDATE && h.stream_id == 0 {
            if let Ok(b) = <[u8; 4]>::try_from(payload) {
                sum += u64::from(u32::from_be_bytes(b) & 0x7fff_ffff);
            }
        }
        input = &input[end..];
    }
    sum
}

/// What the client sees: every frame parses, and header blocks decode.
#[derive(Default)]
struct Client {
    buf: Vec<u8>,
    block: Vec<u8>,
    hpack: Option<Decoder>,
}

impl Client {
    fn read(&mut self, bytes: &[u8]) {
        let mut buf = std::mem::take(&mut self.buf);
        buf.extend_from_slice(bytes);
        let mut pos = 0;
        loop {
            match frame::parse(&buf[pos..], MAX_MAX_FRAME_SIZE) {
                Parsed::NeedMore => break,
                Parsed::Error(e, _) => panic!("the server wrote a bad frame: {e:?}"),
                Parsed::Frame(f, n) => {
                    pos += n;
                    self.frame(f);
                }
            }
        }
        buf.drain(..pos);
        self.buf = buf;
    }

    fn frame(&mut self, f: Frame<'_>) {
        match f {
            Frame::Headers {
                block, end_headers, ..
            } => {
                assert!(self.block.is_empty(), "HEADERS inside a header block");
                self.block.extend_from_slice(block);
                if end_headers {
                    self.decode();
                }
            }
            Frame::Continuation {
                block, end_headers, ..
            } => {
                self.block.extend_from_slice(block);
                if end_headers {
                    self.decode();
                }
            }
            _ => assert!(
                self.block.is_empty(),
                "a frame inside a header block: {f:?}"
            ),
        }
    }

    fn decode(&mut self) {
        let d = self.hpack.get_or_insert_with(|| Decoder::new(4096));
        let mut first = None;
        d.decode(&self.block, usize::MAX, &mut |n, _| {
            first.get_or_insert(n.to_vec());
        })
        .expect("the server's header block decodes");
        assert_eq!(first.as_deref(), Some(&b":status"[..]));
        assert!(self.block.len() <= MAX_ANSWER_BLOCK);
        self.block.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The client side of the check can fail: a frame the server must
    /// never write (PUSH_PROMISE parses as an error here) ...
    #[test]
    #[should_panic(expected = "bad frame")]
    fn the_check_catches_a_bad_frame() {
        let mut f = frame::FrameHeader {
            len: 4,
            kind: kind::PUSH_PROMISE,
            flags: 0,
            stream_id: 1,
        }
        .encode()
        .to_vec();
        f.extend_from_slice(&[0, 0, 0, 2]);
        Client::default().read(&f);
    }

    /// ... and a header block that does not decode.
    #[test]
    #[should_panic(expected = "decodes")]
    fn the_check_catches_a_bad_header_block() {
        let mut f = Vec::new();
        frame::put_headers(&mut f, 1, &[0x80], true, 16_384);
        Client::default().read(&f);
    }
}
