//! HTTP/2 (RFC 9113) without I/O: frames, HPACK, and the connection
//! state machine a driver feeds bytes to.
//!
//! - [`frame`]: the 9-byte frame header, parsing every frame type with
//!   RFC 9113's size, stream and padding rules, and encoders for the
//!   frames a server sends.
//! - [`hpack`] (with `huffman`): RFC 7541's decoder and a response
//!   encoder.
//! - [`conn`]: [`H2Conn`], one connection: preface, SETTINGS, streams and
//!   their states, flow control, limits on hostile clients, and the send
//!   side (HEADERS, DATA frame headers, a fair scheduler).

pub mod conn;
pub mod frame;
pub mod hpack;
mod huffman;

pub use conn::{Event, H2Conn, H2Settings, Request};
pub use frame::ErrorCode;
