//! HTTP/3 (RFC 9114, with QPACK, RFC 9204) without I/O: the protocol core
//! a QUIC driver feeds each stream's bytes to (issue "HTTP/3: QUIC on the
//! same never-blocking loop"), modelled on [`crate::h2`].
//!
//! - [`frame`]: QUIC's variable-length integers, HTTP/3 frames (parsed
//!   from a stream's buffered bytes, DATA payloads left to stream past;
//!   encoders for what a server sends), unidirectional stream types and
//!   the error codes.
//! - [`qpack`]: field sections on the static table alone (we advertise a
//!   dynamic table of 0 bytes): a decoder with named limits, and a
//!   response encoder; Huffman coding is HPACK's (`h2::huffman`).
//! - [`conn`]: [`H3Conn`], one connection above QUIC's streams: our
//!   control stream and its SETTINGS, the client's control stream
//!   (SETTINGS first and once, GOAWAY, push IDs refused), its QPACK
//!   streams read and dropped (a table of 0 bytes allows no insertion),
//!   streams of other types stopped, request streams turned into
//!   [`Request`]s (checked by the rules HTTP/2 shares,
//!   [`crate::stream_request`]) with their bodies dropped, the limits on
//!   hostile clients, the send side (HEADERS, DATA frame headers for a
//!   body written straight from the file) and graceful shutdown (GOAWAY);
//!   `conn/recv.rs` is what arrives on each stream.
//!
//! Not here: QUIC itself (packets, TLS, loss recovery, flow control,
//! stream limits), which the driver gets from quinn-proto, handing this
//! core each stream's bytes; server push; interim (1xx) responses.

pub mod conn;
pub mod frame;
pub mod qpack;

pub use conn::{Event, H3Conn, Request};
pub use frame::{ErrorCode, Frame, Parsed};
pub use qpack::{Decoder, Field, QpackError};
