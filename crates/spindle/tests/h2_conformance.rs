//! h2spec's cases (RFC 9113 §3-8 and RFC 7541), against the real server,
//! over h2c and over TLS (ALPN `h2`), on both backends that serve HTTP/2.
//!
//! h2spec itself cannot be installed here, so its case list is written
//! out: each case is the bytes a client sends after the preface and the
//! SETTINGS exchange (frames built byte by byte, RFC 9113 §4.1 and §6;
//! HPACK as literals, RFC 7541 §6.2.2, or as the crafted bytes a case
//! needs), and what the server must answer, judged as h2spec judges it:
//! a connection error is GOAWAY with the code (or the connection closed);
//! a stream error is RST_STREAM with the code, or that connection error;
//! `Alive` means the frames were ignored (a PING sent after them is
//! answered, the connection stays open); `Answered` means the stream got
//! a response.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

// Frame types (§6) and flags.
const DATA: u8 = 0;
const HEADERS: u8 = 1;
const PRIORITY: u8 = 2;
const RST_STREAM: u8 = 3;
const SETTINGS: u8 = 4;
const PUSH_PROMISE: u8 = 5;
const PING: u8 = 6;
const GOAWAY: u8 = 7;
const WINDOW_UPDATE: u8 = 8;
const CONTINUATION: u8 = 9;
const END_STREAM: u8 = 0x1;
const ACK: u8 = 0x1;
const END_HEADERS: u8 = 0x4;
const PADDED: u8 = 0x8;
const PRIORITY_FLAG: u8 = 0x20;

// Error codes (§7).
const PROTOCOL_ERROR: u32 = 0x1;
const FLOW_CONTROL_ERROR: u32 = 0x3;
const STREAM_CLOSED: u32 = 0x5;
const FRAME_SIZE_ERROR: u32 = 0x6;
const REFUSED_STREAM: u32 = 0x7;
const COMPRESSION_ERROR: u32 = 0x9;

/// The payload of the PING that proves a connection alive.
const PROBE: [u8; 8] = *b"h2spec!!";

use common::h2_frame as frame;

/// A header block of literal fields without indexing, new names (§6.2.2).
fn block(fields: &[(&str, &str)]) -> Vec<u8> {
    let mut b = Vec::new();
    for (n, v) in fields {
        b.push(0x00);
        hstr(&mut b, n.as_bytes());
        hstr(&mut b, v.as_bytes());
    }
    b
}

/// What a case's bytes depend on: the scheme of the transport.
#[derive(Clone, Copy)]
struct Ctx {
    scheme: &'static str,
}

impl Ctx {
    /// A GET's fields for `/page.txt`, then `extra`.
    fn fields<'a>(&self, extra: &[(&'a str, &'a str)]) -> Vec<(&'a str, &'a str)> {
        let mut f = vec![
            (":method", "GET"),
            (":scheme", self.scheme),
            (":path", "/page.txt"),
            (":authority", "localhost"),
        ];
        f.extend_from_slice(extra);
        f
    }

    fn get(&self) -> Vec<u8> {
        block(&self.fields(&[]))
    }

    /// HEADERS (END_HEADERS, and END_STREAM when `end`) of a GET.
    fn request(&self, out: &mut Vec<u8>, id: u32, end: bool) {
        let flags = END_HEADERS | if end { END_STREAM } else { 0 };
        frame(out, HEADERS, flags, id, &self.get());
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expect {
    /// GOAWAY with this code, or the connection closed.
    Conn(u32),
    /// RST_STREAM with this code, or the connection error.
    Stream(u32),
    /// The frames were ignored: the PING after them is answered.
    Alive,
    /// A response (HEADERS) on this stream.
    Answered(u32),
    /// The PING sent by the case is answered with ACK and its payload.
    PingAck,
    /// The connection's SETTINGS are acknowledged.
    SettingsAck,
}

struct Case {
    id: &'static str,
    what: &'static str,
    send: fn(&mut Vec<u8>, Ctx),
    expect: Expect,
}

macro_rules! case {
    ($id:expr, $what:expr, $expect:expr, |$o:ident, $c:ident| $body:block) => {
        Case {
            id: $id,
            what: $what,
            send: |$o: &mut Vec<u8>, $c: Ctx| {
                let _ = $c;
                $body
            },
            expect: $expect,
        }
    };
}

/// h2spec's cases, by its section numbers.
fn cases() -> Vec<Case> {
    use Expect::*;
    vec![
        // §3.5 HTTP/2 connection preface: the preface itself is sent by
        // the driver; see `a_bad_preface_is_a_connection_error`.
        // §4.1 frame format.
        case!(
            "4.1/1",
            "an unknown frame type is ignored",
            Alive,
            |o, c| {
                frame(o, 0x16, 0, 0, b"\0\0\0\0\0\0\0\0");
            }
        ),
        case!("4.1/2", "undefined flags are ignored", Alive, |o, c| {
            frame(o, PING, 0x16, 0, b"\0\0\0\0\0\0\0\0");
        }),
        case!("4.1/3", "the reserved bit is ignored", Alive, |o, c| {
            let mut f = Vec::new();
            frame(&mut f, PING, 0, 0, b"\0\0\0\0\0\0\0\0");
            f[5] |= 0x80;
            o.extend_from_slice(&f);
        }),
        // §4.2 frame size.
        case!(
            "4.2/1",
            "DATA of 2^14 octets is fine",
            Answered(1),
            |o, c| {
                frame(o, HEADERS, END_HEADERS, 1, &c.get());
                frame(o, DATA, END_STREAM, 1, &[0u8; 16384]);
            }
        ),
        case!(
            "4.2/2",
            "DATA over SETTINGS_MAX_FRAME_SIZE",
            Stream(FRAME_SIZE_ERROR),
            |o, c| {
                frame(o, HEADERS, END_HEADERS, 1, &c.get());
                frame(o, DATA, END_STREAM, 1, &[0u8; 16385]);
            }
        ),
        case!(
            "4.2/3",
            "HEADERS over SETTINGS_MAX_FRAME_SIZE",
            Conn(FRAME_SIZE_ERROR),
            |o, c| {
                let mut b = c.get();
                b.extend(std::iter::repeat_n(0x80 | 2, 16385 - b.len()));
                frame(o, HEADERS, END_HEADERS | END_STREAM, 1, &b);
            }
        ),
        // §4.3 header compression and decompression.
        case!(
            "4.3/1",
            "an invalid header block fragment",
            Conn(COMPRESSION_ERROR),
            |o, c| {
                // A literal whose name is a string longer than the block.
                frame(o, HEADERS, END_HEADERS | END_STREAM, 1, &[0x00, 0x7e]);
            }
        ),
        case!(
            "4.3/2",
            "PRIORITY inside a header block",
            Conn(PROTOCOL_ERROR),
            |o, c| {
                frame(o, HEADERS, END_STREAM, 1, &c.get());
                frame(o, PRIORITY, 0, 1, &[0, 0, 0, 0, 15]);
                frame(o, CONTINUATION, END_HEADERS, 1, &[]);
            }
        ),
        case!(
            "4.3/3",
            "HEADERS of another stream inside a header block",
            Conn(PROTOCOL_ERROR),
            |o, c| {
                frame(o, HEADERS, END_STREAM, 1, &c.get());
                frame(o, HEADERS, END_HEADERS | END_STREAM, 3, &c.get());
            }
        ),
        // §5.1 stream states.
        case!(
            "5.1/1",
            "DATA on an idle stream",
            Conn(PROTOCOL_ERROR),
            |o, c| {
                frame(o, DATA, END_STREAM, 1, b"x");
            }
        ),
        case!(
            "5.1/2",
            "RST_STREAM on an idle stream",
            Conn(PROTOCOL_ERROR),
            |o, c| {
                frame(o, RST_STREAM, 0, 1, &8u32.to_be_bytes());
            }
        ),
        case!(
            "5.1/3",
            "WINDOW_UPDATE on an idle stream",
            Conn(PROTOCOL_ERROR),
            |o, c| {
                frame(o, WINDOW_UPDATE, 0, 1, &100u32.to_be_bytes());
            }
        ),
        case!(
            "5.1/4",
            "CONTINUATION on an idle stream",
            Conn(PROTOCOL_ERROR),
            |o, c| {
                frame(o, CONTINUATION, END_HEADERS, 1, &c.get());
            }
        ),
        case!(
            "5.1/5",
            "DATA on a half-closed (remote) stream",
            Stream(STREAM_CLOSED),
            |o, c| {
                c.request(o, 1, true);
                frame(o, DATA, END_STREAM, 1, b"x");
            }
        ),
        case!(
            "5.1/6",
            "HEADERS on a half-closed (remote) stream",
            Stream(STREAM_CLOSED),
            |o, c| {
                c.request(o, 1, true);
                c.request(o, 1, true);
            }
        ),
        case!(
            "5.1/7",
            "CONTINUATION on a half-closed (remote) stream",
            Conn(PROTOCOL_ERROR),
            |o, c| {
                c.request(o, 1, true);
                frame(o, CONTINUATION, END_HEADERS, 1, &c.get());
            }
        ),
        case!(
            "5.1/8",
            "DATA after the client's RST_STREAM",
            Stream(STREAM_CLOSED),
            |o, c| {
                c.request(o, 1, false);
                frame(o, RST_STREAM, 0, 1, &8u32.to_be_bytes());
                frame(o, DATA, END_STREAM, 1, b"x");
            }
        ),
        case!(
            "5.1/9",
            "HEADERS after the client's RST_STREAM",
            Stream(STREAM_CLOSED),
            |o, c| {
                c.request(o, 1, false);
                frame(o, RST_STREAM, 0, 1, &8u32.to_be_bytes());
                c.request(o, 1, true);
            }
        ),
        case!(
            "5.1/10",
            "CONTINUATION after the client's RST_STREAM",
            Conn(PROTOCOL_ERROR),
            |o, c| {
                c.request(o, 1, false);
                frame(o, RST_STREAM, 0, 1, &8u32.to_be_bytes());
                frame(o, CONTINUATION, END_HEADERS, 1, &c.get());
            }
        ),
        // §5.1.1 stream identifiers.
        case!(
            "5.1.1/1",
            "an even stream identifier",
            Conn(PROTOCOL_ERROR),
            |o, c| {
                c.request(o, 2, true);
            }
        ),
        case!(
            "5.1.1/2",
            "a stream identifier below the last",
            Conn(PROTOCOL_ERROR),
            |o, c| {
                c.request(o, 5, true);
                c.request(o, 3, true);
            }
        ),
        // §5.3.1 stream dependencies.
        case!(
            "5.3.1/1",
            "HEADERS depending on its own stream",
            Stream(PROTOCOL_ERROR),
            |o, c| {
                let mut b = vec![0, 0, 0, 1, 15];
                b.extend(c.get());
                frame(o, HEADERS, END_HEADERS | END_STREAM | PRIORITY_FLAG, 1, &b);
            }
        ),
        case!(
            "5.3.1/2",
            "PRIORITY depending on its own stream",
            Stream(PROTOCOL_ERROR),
            |o, c| {
                frame(o, PRIORITY, 0, 1, &[0, 0, 0, 1, 15]);
            }
        ),
        // §5.4.1 connection error handling.
        case!(
            "5.4.1/1",
            "an invalid PING closes with GOAWAY",
            Conn(FRAME_SIZE_ERROR),
            |o, c| {
                frame(o, PING, 0, 0, b"\0\0\0\0\0\0");
            }
        ),
        // §5.5 extending HTTP/2.
        case!(
            "5.5/1",
            "an unknown extension frame is ignored",
            Alive,
            |o, c| {
                frame(o, 0xff, 0, 0, b"extension");
            }
        ),
        case!(
            "5.5/2",
            "an unknown frame inside a header block",
            Conn(PROTOCOL_ERROR),
            |o, c| {
                frame(o, HEADERS, END_STREAM, 1, &c.get());
                frame(o, 0xff, 0, 1, b"extension");
                frame(o, CONTINUATION, END_HEADERS, 1, &[]);
            }
        ),
        // §6.1 DATA.
        case!("6.1/1", "DATA on stream 0", Conn(PROTOCOL_ERROR), |o, c| {
            frame(o, DATA, END_STREAM, 0, b"x");
        }),
        case!(
            "6.1/2",
            "DATA on a stream not open",
            Stream(STREAM_CLOSED),
            |o, c| {
                c.request(o, 1, true);
                frame(o, DATA, END_STREAM, 1, b"x");
            }
        ),
        case!(
            "6.1/3",
            "DATA with a pad length over the payload",
            Conn(PROTOCOL_ERROR),
            |o, c| {
                frame(o, HEADERS, END_HEADERS, 1, &c.get());
                frame(
                    o,
                    DATA,
                    PADDED | END_STREAM,
                    1,
                    &[6, b'a', b'b', b'c', 0, 0],
                );
            }
        ),
        // §6.2 HEADERS.
        case!(
            "6.2/1",
            "HEADERS without END_HEADERS, then PRIORITY",
            Conn(PROTOCOL_ERROR),
            |o, c| {
                frame(o, HEADERS, END_STREAM, 1, &c.get());
                frame(o, PRIORITY, 0, 3, &[0, 0, 0, 0, 15]);
            }
        ),
        case!(
            "6.2/2",
            "HEADERS without END_HEADERS, then DATA",
            Conn(PROTOCOL_ERROR),
            |o, c| {
                frame(o, HEADERS, 0, 1, &c.get());
                frame(o, DATA, END_STREAM, 1, b"x");
            }
        ),
        case!(
            "6.2/3",
            "HEADERS on stream 0",
            Conn(PROTOCOL_ERROR),
            |o, c| {
                frame(o, HEADERS, END_HEADERS | END_STREAM, 0, &c.get());
            }
        ),
        case!(
            "6.2/4",
            "HEADERS with a pad length over the payload",
            Conn(PROTOCOL_ERROR),
            |o, c| {
                let mut b = vec![0xff];
                b.extend(c.get());
                frame(o, HEADERS, END_HEADERS | END_STREAM | PADDED, 1, &b);
            }
        ),
        // §6.3 PRIORITY.
        case!(
            "6.3/1",
            "PRIORITY on stream 0",
            Conn(PROTOCOL_ERROR),
            |o, c| {
                frame(o, PRIORITY, 0, 0, &[0, 0, 0, 1, 15]);
            }
        ),
        case!(
            "6.3/2",
            "PRIORITY of a length other than 5",
            Stream(FRAME_SIZE_ERROR),
            |o, c| {
                frame(o, PRIORITY, 0, 1, &[0, 0, 0, 3, 15, 0]);
            }
        ),
        // §6.4 RST_STREAM.
        case!(
            "6.4/1",
            "RST_STREAM on stream 0",
            Conn(PROTOCOL_ERROR),
            |o, c| {
                frame(o, RST_STREAM, 0, 0, &8u32.to_be_bytes());
            }
        ),
        case!(
            "6.4/2",
            "RST_STREAM on an idle stream",
            Conn(PROTOCOL_ERROR),
            |o, c| {
                frame(o, RST_STREAM, 0, 3, &8u32.to_be_bytes());
            }
        ),
        case!(
            "6.4/3",
            "RST_STREAM of a length other than 4",
            Conn(FRAME_SIZE_ERROR),
            |o, c| {
                c.request(o, 1, false);
                frame(o, RST_STREAM, 0, 1, &[0, 0, 0, 8, 0]);
            }
        ),
        // §6.5 SETTINGS.
        case!(
            "6.5/1",
            "a SETTINGS ACK with a payload",
            Conn(FRAME_SIZE_ERROR),
            |o, c| {
                frame(o, SETTINGS, ACK, 0, &[0, 1, 0, 0, 16, 0]);
            }
        ),
        case!(
            "6.5/2",
            "SETTINGS on a stream",
            Conn(PROTOCOL_ERROR),
            |o, c| {
                frame(o, SETTINGS, 0, 1, &[0, 1, 0, 0, 16, 0]);
            }
        ),
        case!(
            "6.5/3",
            "SETTINGS of a length not a multiple of 6",
            Conn(FRAME_SIZE_ERROR),
            |o, c| {
                frame(o, SETTINGS, 0, 0, &[0, 1, 0, 0, 16]);
            }
        ),
        case!(
            "6.5.2/1",
            "SETTINGS_ENABLE_PUSH other than 0 or 1",
            Conn(PROTOCOL_ERROR),
            |o, c| {
                frame(o, SETTINGS, 0, 0, &[0, 2, 0, 0, 0, 2]);
            }
        ),
        case!(
            "6.5.2/2",
            "SETTINGS_INITIAL_WINDOW_SIZE over 2^31-1",
            Conn(FLOW_CONTROL_ERROR),
            |o, c| {
                frame(o, SETTINGS, 0, 0, &[0, 4, 0x80, 0, 0, 0]);
            }
        ),
        case!(
            "6.5.2/3",
            "SETTINGS_MAX_FRAME_SIZE under 16384",
            Conn(PROTOCOL_ERROR),
            |o, c| {
                frame(o, SETTINGS, 0, 0, &[0, 5, 0, 0, 0x3f, 0xff]);
            }
        ),
        case!(
            "6.5.2/4",
            "SETTINGS_MAX_FRAME_SIZE over 2^24-1",
            Conn(PROTOCOL_ERROR),
            |o, c| {
                frame(o, SETTINGS, 0, 0, &[0, 5, 0x01, 0, 0, 0]);
            }
        ),
        case!(
            "6.5.2/5",
            "an unknown setting is ignored",
            SettingsAck,
            |o, c| {
                frame(o, SETTINGS, 0, 0, &[0, 0xff, 0, 0, 0, 1]);
            }
        ),
        case!(
            "6.5.3/1",
            "SETTINGS with several values is acknowledged",
            SettingsAck,
            |o, c| {
                frame(
                    o,
                    SETTINGS,
                    0,
                    0,
                    &[0, 3, 0, 0, 0, 100, 0, 4, 0, 0, 0xff, 0xff],
                );
            }
        ),
        // §6.7 PING.
        case!(
            "6.7/1",
            "PING is answered with ACK and the same payload",
            PingAck,
            |o, c| {
                frame(o, PING, 0, 0, &PROBE);
            }
        ),
        case!("6.7/2", "a PING ACK is not answered", Alive, |o, c| {
            frame(o, PING, ACK, 0, b"notmine!");
        }),
        case!("6.7/3", "PING on a stream", Conn(PROTOCOL_ERROR), |o, c| {
            frame(o, PING, 0, 1, b"\0\0\0\0\0\0\0\0");
        }),
        case!(
            "6.7/4",
            "PING of a length other than 8",
            Conn(FRAME_SIZE_ERROR),
            |o, c| {
                frame(o, PING, 0, 0, b"\0\0\0\0\0\0\0\0\0");
            }
        ),
        // §6.8 GOAWAY.
        case!(
            "6.8/1",
            "GOAWAY on a stream",
            Conn(PROTOCOL_ERROR),
            |o, c| {
                frame(o, GOAWAY, 0, 1, &[0, 0, 0, 0, 0, 0, 0, 0]);
            }
        ),
        // §6.9 WINDOW_UPDATE.
        case!(
            "6.9/1",
            "WINDOW_UPDATE of 0 on the connection",
            Conn(PROTOCOL_ERROR),
            |o, c| {
                frame(o, WINDOW_UPDATE, 0, 0, &0u32.to_be_bytes());
            }
        ),
        case!(
            "6.9/2",
            "WINDOW_UPDATE of 0 on a stream",
            Stream(PROTOCOL_ERROR),
            |o, c| {
                c.request(o, 1, false);
                frame(o, WINDOW_UPDATE, 0, 1, &0u32.to_be_bytes());
            }
        ),
        case!(
            "6.9/3",
            "WINDOW_UPDATE of a length other than 4",
            Conn(FRAME_SIZE_ERROR),
            |o, c| {
                frame(o, WINDOW_UPDATE, 0, 0, &[0, 0, 0, 1, 0]);
            }
        ),
        case!(
            "6.9.1/1",
            "a connection window over 2^31-1",
            Conn(FLOW_CONTROL_ERROR),
            |o, c| {
                frame(o, WINDOW_UPDATE, 0, 0, &0x7fff_ffffu32.to_be_bytes());
                frame(o, WINDOW_UPDATE, 0, 0, &0x7fff_ffffu32.to_be_bytes());
            }
        ),
        case!(
            "6.9.1/2",
            "a stream window over 2^31-1",
            Stream(FLOW_CONTROL_ERROR),
            |o, c| {
                c.request(o, 1, false);
                frame(o, WINDOW_UPDATE, 0, 1, &0x7fff_ffffu32.to_be_bytes());
                frame(o, WINDOW_UPDATE, 0, 1, &0x7fff_ffffu32.to_be_bytes());
            }
        ),
        case!(
            "6.9.2/1",
            "SETTINGS_INITIAL_WINDOW_SIZE making a window overflow",
            Stream(FLOW_CONTROL_ERROR),
            |o, c| {
                c.request(o, 1, false);
                frame(o, WINDOW_UPDATE, 0, 1, &0x7fff_0000u32.to_be_bytes());
                frame(o, SETTINGS, 0, 0, &[0, 4, 0x7f, 0xff, 0xff, 0xff]);
            }
        ),
        case!(
            "6.9.2/2",
            "a window made negative, then opened, still answers",
            Answered(1),
            |o, c| {
                frame(o, SETTINGS, 0, 0, &[0, 4, 0, 0, 0, 0]);
                c.request(o, 1, true);
                frame(o, SETTINGS, 0, 0, &[0, 4, 0, 0, 0x40, 0]);
            }
        ),
        // §6.10 CONTINUATION.
        case!(
            "6.10/1",
            "a header block in several CONTINUATIONs",
            Answered(1),
            |o, c| {
                let b = c.get();
                let (a, rest) = b.split_at(3);
                let (m, z) = rest.split_at(rest.len() / 2);
                frame(o, HEADERS, END_STREAM, 1, a);
                frame(o, CONTINUATION, 0, 1, m);
                frame(o, CONTINUATION, END_HEADERS, 1, z);
            }
        ),
        case!(
            "6.10/2",
            "CONTINUATION after END_HEADERS",
            Conn(PROTOCOL_ERROR),
            |o, c| {
                c.request(o, 1, false);
                frame(o, CONTINUATION, END_HEADERS, 1, &c.get());
            }
        ),
        case!(
            "6.10/3",
            "CONTINUATION on stream 0",
            Conn(PROTOCOL_ERROR),
            |o, c| {
                frame(o, HEADERS, END_STREAM, 1, &c.get());
                frame(o, CONTINUATION, END_HEADERS, 0, &[]);
            }
        ),
        case!(
            "6.10/4",
            "CONTINUATION of another stream",
            Conn(PROTOCOL_ERROR),
            |o, c| {
                frame(o, HEADERS, END_STREAM, 1, &c.get());
                frame(o, CONTINUATION, END_HEADERS, 3, &[]);
            }
        ),
        // §7 error codes.
        case!(
            "7/1",
            "RST_STREAM with an unknown error code is fine",
            Alive,
            |o, c| {
                c.request(o, 1, false);
                frame(o, RST_STREAM, 0, 1, &0xffu32.to_be_bytes());
            }
        ),
        case!(
            "7/2",
            "GOAWAY with an unknown error code is fine",
            Alive,
            |o, c| {
                frame(o, GOAWAY, 0, 0, &[0, 0, 0, 0, 0, 0, 0, 0xff]);
            }
        ),
        // §8.1 HTTP request/response exchange.
        case!(
            "8.1/1",
            "a second HEADERS without END_STREAM",
            Stream(PROTOCOL_ERROR),
            |o, c| {
                c.request(o, 1, false);
                frame(o, HEADERS, END_HEADERS, 1, &block(&[("x-trailer", "1")]));
            }
        ),
        case!(
            "8.1.2/1",
            "an upper-case field name",
            Stream(PROTOCOL_ERROR),
            |o, c| {
                frame(
                    o,
                    HEADERS,
                    END_HEADERS | END_STREAM,
                    1,
                    &block(&c.fields(&[("X-Test", "1")])),
                );
            }
        ),
        case!(
            "8.1.2.1/1",
            "an unknown pseudo-header",
            Stream(PROTOCOL_ERROR),
            |o, c| {
                frame(
                    o,
                    HEADERS,
                    END_HEADERS | END_STREAM,
                    1,
                    &block(&c.fields(&[(":test", "1")])),
                );
            }
        ),
        case!(
            "8.1.2.1/2",
            "a response pseudo-header in a request",
            Stream(PROTOCOL_ERROR),
            |o, c| {
                frame(
                    o,
                    HEADERS,
                    END_HEADERS | END_STREAM,
                    1,
                    &block(&c.fields(&[(":status", "200")])),
                );
            }
        ),
        case!(
            "8.1.2.1/3",
            "a pseudo-header in trailers",
            Stream(PROTOCOL_ERROR),
            |o, c| {
                c.request(o, 1, false);
                frame(
                    o,
                    HEADERS,
                    END_HEADERS | END_STREAM,
                    1,
                    &block(&[(":method", "GET")]),
                );
            }
        ),
        case!(
            "8.1.2.1/4",
            "a pseudo-header after a regular field",
            Stream(PROTOCOL_ERROR),
            |o, c| {
                let f = [
                    (":method", "GET"),
                    (":scheme", c.scheme),
                    ("x-test", "1"),
                    (":path", "/page.txt"),
                    (":authority", "localhost"),
                ];
                frame(o, HEADERS, END_HEADERS | END_STREAM, 1, &block(&f));
            }
        ),
        case!(
            "8.1.2.2/1",
            "a connection-specific field",
            Stream(PROTOCOL_ERROR),
            |o, c| {
                frame(
                    o,
                    HEADERS,
                    END_HEADERS | END_STREAM,
                    1,
                    &block(&c.fields(&[("connection", "keep-alive")])),
                );
            }
        ),
        case!(
            "8.1.2.2/2",
            "TE other than trailers",
            Stream(PROTOCOL_ERROR),
            |o, c| {
                frame(
                    o,
                    HEADERS,
                    END_HEADERS | END_STREAM,
                    1,
                    &block(&c.fields(&[("te", "gzip")])),
                );
            }
        ),
        case!(
            "8.1.2.3/1",
            "an empty :path",
            Stream(PROTOCOL_ERROR),
            |o, c| {
                let f = [
                    (":method", "GET"),
                    (":scheme", c.scheme),
                    (":path", ""),
                    (":authority", "localhost"),
                ];
                frame(o, HEADERS, END_HEADERS | END_STREAM, 1, &block(&f));
            }
        ),
        case!("8.1.2.3/2", "no :method", Stream(PROTOCOL_ERROR), |o, c| {
            let f = [
                (":scheme", c.scheme),
                (":path", "/"),
                (":authority", "localhost"),
            ];
            frame(o, HEADERS, END_HEADERS | END_STREAM, 1, &block(&f));
        }),
        case!("8.1.2.3/3", "no :scheme", Stream(PROTOCOL_ERROR), |o, c| {
            let f = [
                (":method", "GET"),
                (":path", "/"),
                (":authority", "localhost"),
            ];
            frame(o, HEADERS, END_HEADERS | END_STREAM, 1, &block(&f));
        }),
        case!("8.1.2.3/4", "no :path", Stream(PROTOCOL_ERROR), |o, c| {
            let f = [
                (":method", "GET"),
                (":scheme", c.scheme),
                (":authority", "localhost"),
            ];
            frame(o, HEADERS, END_HEADERS | END_STREAM, 1, &block(&f));
        }),
        case!(
            "8.1.2.3/5",
            "a :method twice",
            Stream(PROTOCOL_ERROR),
            |o, c| {
                frame(
                    o,
                    HEADERS,
                    END_HEADERS | END_STREAM,
                    1,
                    &block(&c.fields(&[(":method", "GET")])),
                );
            }
        ),
        case!(
            "8.1.2.3/6",
            "a :scheme twice",
            Stream(PROTOCOL_ERROR),
            |o, c| {
                frame(
                    o,
                    HEADERS,
                    END_HEADERS | END_STREAM,
                    1,
                    &block(&c.fields(&[(":scheme", c.scheme)])),
                );
            }
        ),
        case!(
            "8.1.2.3/7",
            "a :path twice",
            Stream(PROTOCOL_ERROR),
            |o, c| {
                frame(
                    o,
                    HEADERS,
                    END_HEADERS | END_STREAM,
                    1,
                    &block(&c.fields(&[(":path", "/")])),
                );
            }
        ),
        case!(
            "8.1.2.6/1",
            "content-length unlike the DATA's length",
            Stream(PROTOCOL_ERROR),
            |o, c| {
                frame(
                    o,
                    HEADERS,
                    END_HEADERS,
                    1,
                    &block(&c.fields(&[("content-length", "1")])),
                );
                frame(o, DATA, END_STREAM, 1, b"test");
            }
        ),
        case!(
            "8.1.2.6/2",
            "content-length unlike several DATAs' length",
            Stream(PROTOCOL_ERROR),
            |o, c| {
                frame(
                    o,
                    HEADERS,
                    END_HEADERS,
                    1,
                    &block(&c.fields(&[("content-length", "1")])),
                );
                frame(o, DATA, 0, 1, b"te");
                frame(o, DATA, END_STREAM, 1, b"st");
            }
        ),
        // §8.2 server push.
        case!(
            "8.2/1",
            "PUSH_PROMISE from a client",
            Conn(PROTOCOL_ERROR),
            |o, c| {
                c.request(o, 1, false);
                let mut b = 2u32.to_be_bytes().to_vec();
                b.extend(c.get());
                frame(o, PUSH_PROMISE, END_HEADERS, 1, &b);
            }
        ),
        // RFC 7541 (h2spec's `hpack` suite).
        case!(
            "hpack 2.3.3/1",
            "an index past the tables",
            Conn(COMPRESSION_ERROR),
            |o, c| {
                let mut b = vec![0x80 | 70];
                b.extend(c.get());
                frame(o, HEADERS, END_HEADERS | END_STREAM, 1, &b);
            }
        ),
        case!(
            "hpack 4.2/1",
            "a table size update at the end of a block",
            Conn(COMPRESSION_ERROR),
            |o, c| {
                let mut b = c.get();
                b.push(0x20);
                frame(o, HEADERS, END_HEADERS | END_STREAM, 1, &b);
            }
        ),
        case!(
            "hpack 5.2/1",
            "Huffman with the EOS symbol",
            Conn(COMPRESSION_ERROR),
            |o, c| {
                let mut b = c.get();
                b.extend([0x00, 0x01, b'x', 0x84, 0xff, 0xff, 0xff, 0xff]);
                frame(o, HEADERS, END_HEADERS | END_STREAM, 1, &b);
            }
        ),
        case!(
            "hpack 5.2/2",
            "Huffman padding over 7 bits",
            Conn(COMPRESSION_ERROR),
            |o, c| {
                let mut b = c.get();
                b.extend([0x00, 0x01, b'x', 0x82, 0x1f, 0xff]);
                frame(o, HEADERS, END_HEADERS | END_STREAM, 1, &b);
            }
        ),
        case!(
            "hpack 5.2/3",
            "Huffman padding not all ones",
            Conn(COMPRESSION_ERROR),
            |o, c| {
                let mut b = c.get();
                b.extend([0x00, 0x01, b'x', 0x81, 0x18]);
                frame(o, HEADERS, END_HEADERS | END_STREAM, 1, &b);
            }
        ),
        case!("hpack 6.1/1", "index 0", Conn(COMPRESSION_ERROR), |o, c| {
            let mut b = vec![0x80];
            b.extend(c.get());
            frame(o, HEADERS, END_HEADERS | END_STREAM, 1, &b);
        }),
        case!(
            "hpack 6.3/1",
            "a table size update over SETTINGS_HEADER_TABLE_SIZE",
            Conn(COMPRESSION_ERROR),
            |o, c| {
                let mut b = vec![0x3f, 0xe2, 0x1f];
                b.extend(c.get());
                frame(o, HEADERS, END_HEADERS | END_STREAM, 1, &b);
            }
        ),
        // h2spec's `generic` suite: what a server must simply handle.
        case!(
            "generic 2/1",
            "PRIORITY on an idle stream",
            Alive,
            |o, c| {
                frame(o, PRIORITY, 0, 3, &[0, 0, 0, 0, 15]);
            }
        ),
        case!(
            "generic 2/2",
            "PRIORITY on a half-closed (remote) stream",
            Answered(1),
            |o, c| {
                c.request(o, 1, true);
                frame(o, PRIORITY, 0, 1, &[0, 0, 0, 0, 15]);
            }
        ),
        case!("generic 3.1/1", "DATA with padding", Answered(1), |o, c| {
            c.request(o, 1, false);
            frame(o, DATA, PADDED | END_STREAM, 1, &[3, b'x', 0, 0, 0]);
        }),
        case!(
            "generic 3.2/1",
            "HEADERS with priority and padding",
            Answered(1),
            |o, c| {
                let mut b = vec![4, 0, 0, 0, 0, 15];
                b.extend(c.get());
                b.extend([0, 0, 0, 0]);
                frame(
                    o,
                    HEADERS,
                    END_HEADERS | END_STREAM | PADDED | PRIORITY_FLAG,
                    1,
                    &b,
                );
            }
        ),
        case!(
            "generic 3.4/1",
            "RST_STREAM on an open stream",
            Alive,
            |o, c| {
                c.request(o, 1, false);
                frame(o, RST_STREAM, 0, 1, &8u32.to_be_bytes());
            }
        ),
        case!(
            "generic 3.9/1",
            "WINDOW_UPDATE on the connection and a stream",
            Answered(1),
            |o, c| {
                frame(o, WINDOW_UPDATE, 0, 0, &1u32.to_be_bytes());
                c.request(o, 1, true);
                frame(o, WINDOW_UPDATE, 0, 1, &1u32.to_be_bytes());
            }
        ),
        case!("generic 4/1", "a HEAD request", Answered(1), |o, c| {
            let f = [
                (":method", "HEAD"),
                (":scheme", c.scheme),
                (":path", "/page.txt"),
                (":authority", "localhost"),
            ];
            frame(o, HEADERS, END_HEADERS | END_STREAM, 1, &block(&f));
        }),
        case!(
            "generic 4/2",
            "a POST with a body and trailers",
            Answered(1),
            |o, c| {
                let f = [
                    (":method", "POST"),
                    (":scheme", c.scheme),
                    (":path", "/page.txt"),
                    (":authority", "localhost"),
                ];
                frame(o, HEADERS, END_HEADERS, 1, &block(&f));
                frame(o, DATA, 0, 1, b"test");
                frame(
                    o,
                    HEADERS,
                    END_HEADERS | END_STREAM,
                    1,
                    &block(&[("x-trailer", "1")]),
                );
            }
        ),
        case!(
            "generic 5/1",
            "literals with incremental indexing, reused by index",
            Answered(3),
            |o, c| {
                // :authority (static name 1) as www.example.com, Huffman
                // coded (RFC 7541 C.4.1), indexed as dynamic entry 62, which
                // the second request names by index.
                let auth = [
                    0x41, 0x8c, 0xf1, 0xe3, 0xc2, 0xe5, 0xf2, 0x3a, 0x6b, 0xa0, 0xab, 0x90, 0xf4,
                    0xff,
                ];
                let mut b = vec![0x82, if c.scheme == "https" { 0x87 } else { 0x86 }, 0x04];
                hstr(&mut b, b"/page.txt");
                let mut first = b.clone();
                first.extend(auth);
                frame(o, HEADERS, END_HEADERS | END_STREAM, 1, &first);
                b.push(0x80 | 62);
                frame(o, HEADERS, END_HEADERS | END_STREAM, 3, &b);
            }
        ),
        case!(
            "generic 5/2",
            "a never-indexed literal",
            Answered(1),
            |o, c| {
                let mut b = c.get();
                b.push(0x10);
                hstr(&mut b, b"x-secret");
                hstr(&mut b, b"1");
                frame(o, HEADERS, END_HEADERS | END_STREAM, 1, &b);
            }
        ),
        case!(
            "generic 5/3",
            "a dynamic table size update at the start",
            Answered(1),
            |o, c| {
                let mut b = vec![0x3f, 0xe1, 0x0f]; // 2048
                b.extend(c.get());
                frame(o, HEADERS, END_HEADERS | END_STREAM, 1, &b);
            }
        ),
        // §5.1.2 stream concurrency: past SETTINGS_MAX_CONCURRENT_STREAMS.
        case!(
            "5.1.2/1",
            "streams over the concurrency limit",
            Stream(REFUSED_STREAM),
            |o, c| {
                for i in 0..130u32 {
                    c.request(o, 1 + 2 * i, false);
                }
            }
        ),
    ]
}

/// A client connection: plain TCP (h2c) or TLS with ALPN `h2`.
trait Io: Read + Write + Send {}
impl<T: Read + Write + Send> Io for T {}

fn tls_client() -> Arc<rustls::ClientConfig> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::CertificateDer;
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_file_iter(tls_data("ca.pem")).unwrap() {
        roots.add(c.unwrap()).unwrap();
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut cfg = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    cfg.alpn_protocols = vec![b"h2".to_vec()];
    Arc::new(cfg)
}

fn connect(addr: std::net::SocketAddr, tls: Option<&Arc<rustls::ClientConfig>>) -> Box<dyn Io> {
    let s = TcpStream::connect(addr).unwrap();
    s.set_nodelay(true).unwrap();
    s.set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    match tls {
        None => Box::new(s),
        Some(cfg) => {
            let name = "localhost".try_into().unwrap();
            let conn = rustls::ClientConnection::new(cfg.clone(), name).unwrap();
            let mut t = rustls::StreamOwned::new(conn, s);
            // The handshake, and ALPN's answer.
            t.flush().unwrap();
            while t.conn.is_handshaking() {
                t.conn.complete_io(&mut t.sock).unwrap();
            }
            assert_eq!(t.conn.alpn_protocol(), Some(&b"h2"[..]), "ALPN chose h2");
            Box::new(t)
        }
    }
}

type Got = H2Got;

impl Got {
    fn reset(&self) -> Option<u32> {
        self.frames
            .iter()
            .find(|f| f.0 == RST_STREAM)
            .map(|f| u32::from_be_bytes(f.3[..4].try_into().unwrap()))
    }

    fn ping_ack(&self) -> bool {
        self.frames
            .iter()
            .any(|f| f.0 == PING && f.1 & ACK != 0 && f.3 == PROBE)
    }

    /// Settings acknowledged beyond the handshake's one.
    fn settings_acks(&self) -> usize {
        self.frames
            .iter()
            .filter(|f| f.0 == SETTINGS && f.1 & ACK != 0)
            .count()
    }

    fn headers_on(&self, id: u32) -> bool {
        self.frames.iter().any(|f| f.0 == HEADERS && f.2 == id)
    }

    /// Whether what came back settles `expect` (so reading can stop).
    fn settles(&self, expect: Expect) -> bool {
        match expect {
            Expect::Conn(_) => self.closed,
            Expect::Stream(_) => self.closed || self.reset().is_some(),
            Expect::Alive | Expect::PingAck => self.closed || self.ping_ack(),
            Expect::Answered(id) => self.closed || self.goaway().is_some() || self.headers_on(id),
            Expect::SettingsAck => self.closed || self.settings_acks() >= 2,
        }
    }

    fn verdict(&self, expect: Expect) -> Result<(), String> {
        let ok = match expect {
            Expect::Conn(code) => {
                self.goaway() == Some(code) || (self.goaway().is_none() && self.closed)
            }
            Expect::Stream(code) => {
                self.reset() == Some(code)
                    || self.goaway() == Some(code)
                    || (self.goaway().is_none() && self.reset().is_none() && self.closed)
            }
            Expect::Alive | Expect::PingAck => self.ping_ack() && self.goaway().is_none(),
            Expect::Answered(id) => self.headers_on(id) && self.goaway().is_none(),
            Expect::SettingsAck => self.settings_acks() >= 2 && self.goaway().is_none(),
        };
        if ok {
            Ok(())
        } else {
            let kinds: Vec<String> = self
                .frames
                .iter()
                .map(|f| {
                    format!(
                        "type {} flags {:#x} stream {} len {}",
                        f.0,
                        f.1,
                        f.2,
                        f.3.len()
                    )
                })
                .collect();
            Err(format!(
                "wanted {expect:?}; got GOAWAY {:?}, RST_STREAM {:?}, closed {}, frames {kinds:?}",
                self.goaway(),
                self.reset(),
                self.closed
            ))
        }
    }
}

/// Runs one case on a new connection.
fn run(
    addr: std::net::SocketAddr,
    tls: Option<&Arc<rustls::ClientConfig>>,
    case: &Case,
) -> Result<(), String> {
    let ctx = Ctx {
        scheme: if tls.is_some() { "https" } else { "http" },
    };
    let mut s = connect(addr, tls);
    let mut hello = PREFACE.to_vec();
    frame(&mut hello, SETTINGS, 0, 0, &[]);
    s.write_all(&hello).unwrap();
    // The server's SETTINGS, acknowledged; then the case.
    let mut out = Vec::new();
    frame(&mut out, SETTINGS, ACK, 0, &[]);
    (case.send)(&mut out, ctx);
    if matches!(case.expect, Expect::Alive) {
        frame(&mut out, PING, 0, 0, &PROBE);
    }
    // The server may close before it has read it all: that is its answer.
    let _ = s.write_all(&out);
    let _ = s.flush();
    let deadline = Instant::now() + Duration::from_secs(3);
    let mut buf = Vec::new();
    let mut got = Got {
        frames: Vec::new(),
        closed: false,
    };
    while Instant::now() < deadline && !got.settles(case.expect) {
        let mut chunk = [0u8; 65536];
        match s.read(&mut chunk) {
            Ok(0) => got.closed = true,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(_) => got.closed = true,
        }
        got.frames = h2_frames(&buf);
    }
    got.verdict(case.expect)
}

#[test]
fn h2spec_cases_pass_over_h2c_and_tls_on_both_backends() {
    let root = DocRoot::new(false);
    let cases = cases();
    let tls = tls_client();
    let mut failed = Vec::new();
    for b in &backends_with(Cap::Http2) {
        let tls_port = free_port();
        let tls_addr = format!("127.0.0.1:{tls_port}");
        let (cert, key) = (tls_data("p256.pem"), tls_data("p256.key"));
        let srv = Server::start(
            b,
            &root.dir,
            &[
                "--tls-listen",
                &tls_addr,
                "--tls-cert",
                cert.to_str().unwrap(),
                "--tls-key",
                key.to_str().unwrap(),
            ],
        );
        let tls_sock: std::net::SocketAddr = tls_addr.parse().unwrap();
        for (transport, addr, cfg) in [("h2c", srv.addr, None), ("TLS", tls_sock, Some(&tls))] {
            for case in &cases {
                if let Err(why) = run(addr, cfg, case) {
                    failed.push(format!(
                        "{b} {transport} {} ({}): {why}",
                        case.id, case.what
                    ));
                }
            }
        }
        // Every case left the server serving.
        assert_eq!(get(&srv, "/page.txt").status, 200, "{b}");
    }
    assert!(
        failed.is_empty(),
        "{} of {} failed:\n{}",
        failed.len(),
        cases.len() * 4,
        failed.join("\n")
    );
}

#[test]
fn a_bad_preface_is_a_connection_error() {
    let root = DocRoot::new(false);
    for b in &backends_with(Cap::Http2) {
        let srv = Server::start(b, &root.dir, &[]);
        // §3.5: h2spec's "invalid connection preface": a preface whose
        // start is HTTP/2's but whose rest is not.
        let mut s = srv.connect();
        s.write_all(b"PRI * HTTP/2.0\r\n\r\nXX\r\n\r\n").unwrap();
        let mut buf = Vec::new();
        let _ = s.read_to_end(&mut buf);
        let got = Got {
            frames: h2_frames(&buf),
            closed: true,
        };
        assert_eq!(got.goaway(), Some(PROTOCOL_ERROR), "{b}: {buf:?}");
    }
}
