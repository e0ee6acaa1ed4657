//! QUIC for HTTP/3 (RFC 9000, 9001, 9114): quinn-proto's state machine
//! driven by the worker, over a UDP socket of its own
//! (docs/decisions.md, "QUIC engine").
//!
//! ```text
//!  worker loop   owns the UDP socket and the clock; calls in when
//!                datagrams arrive or a deadline passes; sends what is
//!                queued ([`driver::Quic::send`])
//!  driver        quinn-proto's Endpoint and Connections (packets, TLS 1.3,
//!                loss recovery, flow control, pacing, Retry, resets) and
//!                per connection spindle_core::h3::H3Conn (frames, QPACK,
//!                requests); gives the loop requests and takes bodies
//!  udp           sockets: SO_REUSEPORT group, GSO sends, GRO receives, ECN
//!  cid           connection IDs naming the worker; the BPF that steers
//!  config        TLS from the HTTPS resolver (ALPN h3, TLS 1.3, no 0-RTT),
//!                the transport's limits from the constants below
//! ```
//!
//! Every limit is one of the constants below; quinn-proto itself holds
//! the amplification limit (3× before an address is validated, RFC 9000
//! §8.1) and paces its sends.
//!
//! Known, in quinn-proto 0.11.19: a connection closed while stream data
//! waits and its congestion window is full never sends its
//! CONNECTION_CLOSE (quinn#2785, fixed upstream by #2787, not yet
//! released): the client learns at its idle timeout, or from the
//! stateless reset its next packet gets once the connection is drained
//! here (3 PTOs). Met by a client past the stream limit (tests/h3_hostile.rs)
//! and by [`driver::Quic::close_all`] at a drain's deadline mid-download.

use std::time::Duration;

pub mod cid;
pub mod config;
pub mod driver;
pub mod rates;
pub mod udp;

/// What a worker is given for HTTP/3: its socket of the group (its index
/// there is the worker's id) and the process's keys.
#[derive(Debug)]
pub struct Setup {
    pub udp: udp::Udp,
    pub keys: Keys,
}

/// Keys every worker of a process shares, so that any of them can check
/// a Retry token another issued, and a stateless reset from any is
/// valid: random at start.
#[derive(Debug, Clone, Copy)]
pub struct Keys {
    pub token: [u8; 32],
    pub reset: [u8; 32],
}

impl Keys {
    pub fn random() -> Keys {
        let rng = ring::rand::SystemRandom::new();
        let mut k = Keys {
            token: [0; 32],
            reset: [0; 32],
        };
        ring::rand::SecureRandom::fill(&rng, &mut k.token).expect("the kernel's random numbers");
        ring::rand::SecureRandom::fill(&rng, &mut k.reset).expect("the kernel's random numbers");
        k
    }
}

/// The one ALPN a QUIC connection may name (RFC 9114 §3.1).
pub const ALPN_H3: &[u8] = b"h3";

/// Request streams a connection may have open at once (QUIC's
/// bidirectional stream limit): HTTP/2's, nginx's default.
pub const MAX_REQUEST_STREAMS: u32 = spindle_core::h3::conn::MAX_CONCURRENT_STREAMS as u32;

/// The client's unidirectional streams open at once: control and QPACK's
/// two, and room for the reserved types clients grease with.
pub const MAX_CLIENT_UNI_STREAMS: u32 = spindle_core::h3::conn::MAX_UNI_STREAMS as u32;

/// A connection with no packet for this long is closed without a word
/// (RFC 9000 §10.1): the clients' usual 30 s.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(30);

/// Bytes a client may send on one stream before we read them: a request
/// is a HEADERS frame, and bodies are read and dropped.
pub const STREAM_RECEIVE_WINDOW: u32 = 64 << 10;

/// Bytes a client may send on all its streams before we read them.
pub const CONNECTION_RECEIVE_WINDOW: u32 = 256 << 10;

/// Bytes of responses a connection holds, sent and unacknowledged or
/// queued: what one connection can have in flight (4 MiB fills a
/// 1 Gbit/s path of 30 ms), and the most body memory one connection
/// holds.
pub const SEND_WINDOW: u64 = 4 << 20;

/// Handshakes in progress per worker (quinn-proto's `max_incoming`);
/// beyond it new connections are refused.
pub const MAX_HANDSHAKES: usize = 1024;

/// From this many handshakes in progress on, a client that has not
/// proved its address gets a Retry first (RFC 9000 §8.1.2): a flood of
/// Initials from forged addresses then costs us one packet each, no
/// state.
pub const RETRY_ABOVE: usize = 64;

/// How long a Retry token is good for.
pub const RETRY_TOKEN_LIFETIME: Duration = Duration::from_secs(15);

/// Bytes of early packets kept for one connection not yet accepted, and
/// for all of them.
pub const INCOMING_BUFFER_BYTES: u64 = 16 << 10;
pub const INCOMING_BUFFER_BYTES_TOTAL: u64 = 1 << 20;

/// New connections one address may start per second (a token bucket of
/// [`NEW_CONNECTIONS_BURST`]); over it, its Initials are dropped.
pub const NEW_CONNECTIONS_PER_SECOND: u32 = 20;
pub const NEW_CONNECTIONS_BURST: u32 = 60;

/// Datagrams one address (an IPv6 /64) may send a second (a token bucket
/// of [`PACKETS_BURST`]); over it, they are dropped unread. A client
/// downloading at 1 Gbit/s sends about 40,000 a second (acknowledgements).
pub const PACKETS_PER_SECOND: u32 = 100_000;
pub const PACKETS_BURST: u32 = 200_000;

/// Addresses whose rates are tracked at once.
pub const TRACKED_ADDRESSES: usize = 4096;

/// Datagrams one `poll_transmit` may build for one GSO send (quinn's).
pub const GSO_SEGMENTS: usize = 10;

/// Bytes of datagrams waiting for the socket; beyond it connections
/// stop building packets until the socket takes some (their pacing
/// and congestion control then hold the rest).
pub const MAX_QUEUED_BYTES: usize = 1 << 20;

/// Receives (each a GRO batch of datagrams) one turn of the worker's
/// loop takes; the rest wait for its next turn, after the completions of
/// its TCP connections, so that a flood of datagrams cannot starve them.
pub const RECVS_PER_TURN: usize = 64;

/// One receive's buffer: a GRO batch of up to 64 KiB.
pub const RECV_BUFFER: usize = 64 << 10;

/// The socket's kernel buffers (`SO_RCVBUF`, `SO_SNDBUF`).
pub const SOCKET_BUFFER: i32 = 4 << 20;

#[cfg(test)]
mod tests;
