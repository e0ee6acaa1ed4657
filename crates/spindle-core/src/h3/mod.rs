//! HTTP/3 (RFC 9114, with QPACK, RFC 9204) without I/O: the protocol core
//! a QUIC driver will feed each stream's bytes to (issue "HTTP/3: QUIC on
//! the same never-blocking loop"), modelled on [`crate::h2`].
//!
//! - [`frame`]: QUIC's variable-length integers, HTTP/3 frames (parsed
//!   from a stream's buffered bytes, DATA payloads left to stream past;
//!   encoders for what a server sends), unidirectional stream types and
//!   the error codes.
//! - [`qpack`]: field sections on the static table alone (we advertise a
//!   dynamic table of 0 bytes): a decoder with named limits, and a
//!   response encoder; Huffman coding is HPACK's (`h2::huffman`).
//!
//! Not here yet: QUIC itself (packets, TLS, loss recovery, flow control)
//! and the connection above the frames (the control stream's SETTINGS
//! first and once, GOAWAY, the QPACK streams read and dropped, request
//! streams turned into requests).

pub mod frame;
pub mod qpack;

pub use frame::{ErrorCode, Frame, Parsed};
pub use qpack::{Decoder, Field, QpackError};
