//! The `h3_conn` check: arbitrary stream events (bytes with or without a
//! FIN on the client's streams, its resets and stops) fed to an HTTP/3
//! connection, with a driver that answers as a server's would.

use std::collections::{BTreeMap, BTreeSet};

use spindle_core::h3::conn::{self, H3Conn, MAX_CONCURRENT_STREAMS};
use spindle_core::h3::frame::{self, decode_varint, Frame, Parsed};
use spindle_core::h3::{Decoder, ErrorCode, Event};

use crate::{num, xorshift};

/// Our control stream's id, as a driver's first uni stream.
const CONTROL: u64 = 3;

/// Bytes the connection may hold besides its fixed size: the partial
/// frames' bound (each buffer's capacity at most twice its length), and
/// what the driver's answers leave unwritten.
const MAX_HELD: usize = 2 * conn::MAX_BUFFERED + (1 << 20);

/// Most rounds of drain-and-feed one `recv` may need: far more than an
/// input's events can fill.
const MAX_ROUNDS: usize = 100_000;

/// The connection, fed stream events drawn from the input, with the
/// driver's choices drawn from it too.
///
/// Input: bytes 0-7 seed the driver (answer with a body or not, write
/// `out` whole or in part, reset a response); the rest is operations, each
/// one byte whose low 3 bits say what and whose high 5 bits name a stream
/// ([`stream_of`]):
/// 0 and 1: bytes on the stream (a length byte, then that many), with a
/// FIN for 1; 2: bytes without a FIN, a 16-bit little-endian length;
/// 3: the client resets the stream; 4: it stops our side of it (of our
/// control stream for stream selector 31); 5: shutdown; 6: the driver
/// answers what waits and writes everything; 7: it resets a response.
///
/// Invariants: no panic; `recv` takes all it is given unless events or
/// `out` wait; every request is on a new client bidirectional stream,
/// its path absolute (or `*`), and the core can be asked for it; no event
/// follows `Close`, and after a `Close` with an error nothing is written;
/// our control stream is its type, SETTINGS, then GOAWAYs whose ids are
/// request stream ids that never grow; every request stream's bytes, as
/// the client reads them (the body's bytes filled in), are HEADERS whose
/// section decodes with `:status` first, then DATA, whole when the FIN
/// comes; open streams and held bytes stay bounded; after a graceful
/// `Close` no stream is open.
pub fn h3_conn(data: &[u8]) {
    let mut d = Driver::new(num(data, 0, 8) | 1);
    let mut ops = data.get(8..).unwrap_or(&[]);
    while let Some((&op, rest)) = ops.split_first() {
        ops = rest;
        if d.c.is_closed() && d.closed_by_error {
            break;
        }
        let id = stream_of(op >> 3);
        match op & 7 {
            0..=2 => {
                let (bytes, rest) = take(ops, if op & 7 == 2 { 2 } else { 1 });
                ops = rest;
                d.feed(id, bytes, op & 7 == 1);
            }
            3 => {
                if d.ended.insert(id) {
                    d.c.stream_reset(id, ErrorCode::RequestCancelled.code());
                }
            }
            4 if op >> 3 == 31 => d.c.stop_sending(CONTROL, 0),
            4 => {
                if id & 2 == 0 {
                    d.c.stop_sending(id, ErrorCode::RequestCancelled.code());
                    d.answers.remove(&id);
                }
            }
            5 => d.c.shutdown(),
            6 => d.answer_all(),
            _ => d.reset_one(),
        }
        d.drive();
    }
    d.answer_all();
    d.drive();
}

/// An operation's bytes: a length of `width` bytes (little-endian), then
/// that many (or as many as there are); and what follows them.
fn take(ops: &[u8], width: usize) -> (&[u8], &[u8]) {
    let len = num(ops, 0, width) as usize;
    let rest = ops.get(width..).unwrap_or(&[]);
    rest.split_at(len.min(rest.len()))
}

/// A stream id from an operation's 5 bits: client bidirectional streams
/// 0, 4, ... 76, four far above them (to reach past the limit), and the
/// first eight client unidirectional streams (2, 6, ... 30).
fn stream_of(sel: u8) -> u64 {
    let sel = u64::from(sel);
    match sel {
        0..=19 => 4 * sel,
        20..=23 => 4 * (sel * 40),
        _ => 2 + 4 * (sel - 24),
    }
}

/// A response the driver has begun: body bytes still to send.
#[derive(Debug)]
struct Answer {
    body_left: u64,
}

struct Driver {
    c: H3Conn,
    world: u64,
    /// Streams the client ended (FIN or reset): QUIC carries nothing more
    /// on them.
    ended: BTreeSet<u64>,
    /// Requests handed out and not yet answered whole.
    answers: BTreeMap<u64, Answer>,
    requested: BTreeSet<u64>,
    /// What each request stream carried to the client, as it reads it.
    client: BTreeMap<u64, Vec<u8>>,
    control: Vec<u8>,
    closed: bool,
    closed_by_error: bool,
}

impl Driver {
    fn new(world: u64) -> Driver {
        let mut c = H3Conn::new();
        c.control_opened(CONTROL);
        Driver {
            c,
            world,
            ended: BTreeSet::new(),
            answers: BTreeMap::new(),
            requested: BTreeSet::new(),
            client: BTreeMap::new(),
            control: Vec::new(),
            closed: false,
            closed_by_error: false,
        }
    }

    fn roll(&mut self) -> u64 {
        self.world = xorshift(self.world);
        self.world
    }

    /// Feeds all of `bytes` (and the FIN), draining when `recv` stalls.
    fn feed(&mut self, id: u64, bytes: &[u8], fin: bool) {
        if self.ended.contains(&id) {
            return;
        }
        if fin {
            self.ended.insert(id);
        }
        let mut rest = bytes;
        for _ in 0..MAX_ROUNDS {
            let n = self.c.recv(id, rest, fin);
            assert!(n <= rest.len());
            rest = &rest[n..];
            if rest.is_empty() {
                return;
            }
            let waiting: usize = self.c.writable().map(|w| self.c.out(w).bytes.len()).sum();
            let mut events = 0;
            while let Some(e) = self.c.poll_event() {
                events += 1;
                self.event(e);
            }
            assert!(
                events >= conn::MAX_PENDING_EVENTS || waiting > conn::OUT_HIGH_WATER,
                "recv held back bytes with little to drain"
            );
            self.write(true);
        }
        panic!("recv made no progress");
    }

    /// One round of the driver: events, answers, writes, checks.
    fn drive(&mut self) {
        while let Some(e) = self.c.poll_event() {
            self.event(e);
        }
        self.send_bodies();
        let whole = self.roll().is_multiple_of(4);
        self.write(whole);
        assert!(self.c.open_streams() <= MAX_CONCURRENT_STREAMS);
        assert!(self.c.buffered() <= MAX_HELD, "holds {}", self.c.buffered());
    }

    fn event(&mut self, e: Event) {
        assert!(!self.closed, "an event after Close: {e:?}");
        match e {
            Event::Request(r) => {
                let id = r.stream_id;
                assert_eq!(id & 3, 0, "a request on stream {id}");
                assert!(self.requested.insert(id), "stream {id} requested twice");
                assert!(r.path().starts_with('/') || r.path() == "*");
                let _ = r.to_core();
                self.begin(id);
            }
            Event::Reset { stream_id, .. } => {
                self.answers.remove(&stream_id);
                self.client.remove(&stream_id);
            }
            Event::StopSending { .. } | Event::GoAway { .. } => {}
            Event::Close { code } => {
                self.closed = true;
                self.answers.clear();
                self.closed_by_error = code != ErrorCode::NoError;
                assert!(self.c.is_closed());
                if code == ErrorCode::NoError {
                    assert_eq!(
                        self.c.open_streams(),
                        0,
                        "a graceful close with streams open"
                    );
                } else {
                    assert_eq!(
                        self.c.writable().count(),
                        0,
                        "bytes to write after an error"
                    );
                }
            }
        }
    }

    /// Starts answering a request, as the world says.
    /// Starts answering a request, as the world says. (Its stream may be
    /// gone already: reset by an event still queued behind the request.)
    fn begin(&mut self, id: u64) {
        match self.roll() % 4 {
            0 => {
                self.c
                    .send_headers(id, 404, &[(b"content-length", b"0")], true);
            }
            1 => self.c.reset(id, ErrorCode::InternalError),
            _ => {
                let body_left = 1 + self.roll() % 3000;
                let len = body_left.to_string();
                let fields: [(&[u8], &[u8]); 2] = [
                    (b"Content-Type", b"text/plain"),
                    (b"content-length", len.as_bytes()),
                ];
                if self.c.send_headers(id, 200, &fields, false) {
                    self.answers.insert(id, Answer { body_left });
                }
            }
        }
    }

    /// A DATA frame on some of the bodies in progress, and `finish` on
    /// those done.
    fn send_bodies(&mut self) {
        let ids: Vec<u64> = self.answers.keys().copied().collect();
        for id in ids {
            if self.roll().is_multiple_of(2) {
                continue;
            }
            let left = self.answers[&id].body_left;
            let n = 1 + self.roll() % left;
            let h = self
                .c
                .data_header(id, n)
                .expect("a body in progress takes DATA");
            // The driver writes `out` first, then the header and the body.
            self.write_stream(id, usize::MAX);
            let view = self.client.entry(id).or_default();
            view.extend_from_slice(h.as_bytes());
            view.resize(view.len() + n as usize, b'x');
            let a = self.answers.get_mut(&id).expect("in progress");
            a.body_left -= n;
            if a.body_left == 0 {
                self.answers.remove(&id);
                assert!(self.c.finish(id));
            }
        }
    }

    /// Answers every request in progress whole.
    fn answer_all(&mut self) {
        for a in self.answers.values_mut() {
            a.body_left = a.body_left.max(1);
        }
        while !self.answers.is_empty() {
            self.send_bodies();
        }
        self.write(true);
    }

    /// Resets one response in progress.
    fn reset_one(&mut self) {
        if let Some((&id, _)) = self.answers.iter().next() {
            self.answers.remove(&id);
            self.c.reset(id, ErrorCode::InternalError);
        }
    }

    /// Writes what the streams hold, whole or some of each.
    fn write(&mut self, whole: bool) {
        let ids: Vec<u64> = self.c.writable().collect();
        for id in ids {
            let most = if whole {
                usize::MAX
            } else {
                self.roll() as usize % 64
            };
            self.write_stream(id, most);
        }
    }

    /// Writes up to `most` bytes of `out(id)`, as the client reads them.
    fn write_stream(&mut self, id: u64, most: usize) {
        let out = self.c.out(id);
        let n = out.bytes.len().min(most);
        let (bytes, fin) = (out.bytes[..n].to_vec(), out.fin && n == out.bytes.len());
        self.c.advance_out(id, n);
        if id == CONTROL {
            self.control.extend_from_slice(&bytes);
            check_control(&self.control);
            return;
        }
        let view = self.client.entry(id).or_default();
        view.extend_from_slice(&bytes);
        if fin {
            let view = self.client.remove(&id).unwrap_or_default();
            check_response(&view);
        }
    }
}

/// Our control stream as the client reads it so far: its type, SETTINGS,
/// then GOAWAYs naming request streams, never a larger one.
fn check_control(mut s: &[u8]) {
    let Some((ty, n)) = decode_varint(s) else {
        return;
    };
    assert_eq!(ty, frame::stream_type::CONTROL);
    s = &s[n..];
    let mut first = true;
    let mut last_goaway = u64::MAX;
    while let Parsed::Frame(f, n) = frame::parse(s) {
        match f {
            Frame::Settings(_) => assert!(first, "SETTINGS twice"),
            Frame::Goaway(id) => {
                assert!(!first, "GOAWAY before SETTINGS");
                assert_eq!(id & 3, 0, "GOAWAY names stream {id}");
                assert!(id <= last_goaway, "GOAWAY grew");
                last_goaway = id;
            }
            other => panic!("{other:?} on our control stream"),
        }
        first = false;
        s = &s[n..];
    }
    assert!(!matches!(frame::parse(s), Parsed::Error(_)), "a bad frame");
}

/// A whole response as the client reads it: HEADERS with `:status`
/// first, then DATA frames, nothing cut short.
fn check_response(mut s: &[u8]) {
    let mut first = true;
    while !s.is_empty() {
        let (f, n) = match frame::parse(s) {
            Parsed::Frame(f, n) => (f, n),
            other => panic!("a response stream reads {other:?}"),
        };
        match f {
            Frame::Headers(section) => {
                assert!(first, "HEADERS after the first frame");
                let mut names = Vec::new();
                Decoder::new()
                    .decode(section, usize::MAX, &mut |f| names.push(f.name.to_vec()))
                    .expect("our field section decodes");
                assert_eq!(names.first().map(|n| &n[..]), Some(&b":status"[..]));
            }
            Frame::Data { len } => {
                assert!(!first, "DATA before HEADERS");
                assert!(s.len() >= n + len as usize, "a DATA frame cut short");
                s = &s[len as usize..];
            }
            other => panic!("{other:?} on a response stream"),
        }
        first = false;
        s = &s[n..];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The check can fail: a response stream that ends inside a frame ...
    #[test]
    #[should_panic(expected = "cut short")]
    fn the_check_catches_a_cut_frame() {
        let mut s = Vec::new();
        frame::put_headers(&mut s, &[0, 0, 0xd9]);
        s.extend_from_slice(frame::data_header(5).as_bytes());
        s.extend_from_slice(b"abc");
        check_response(&s);
    }

    /// ... and a GOAWAY that grows.
    #[test]
    #[should_panic(expected = "GOAWAY grew")]
    fn the_check_catches_a_growing_goaway() {
        let mut s = vec![0];
        frame::put_our_settings(&mut s);
        frame::put_goaway(&mut s, 4);
        frame::put_goaway(&mut s, 8);
        check_control(&s);
    }
}
