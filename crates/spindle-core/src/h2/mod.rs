//! HTTP/2 (RFC 9113) without I/O: frames, HPACK, and the connection
//! state machine a driver feeds bytes to.
//!
//! - [`frame`]: the 9-byte frame header, parsing every frame type with
//!   RFC 9113's size, stream and padding rules, and encoders for the
//!   frames a server sends.
//! - [`hpack`] (with `huffman`): RFC 7541's decoder and a response
//!   encoder. `huffman` is the crate's: QPACK uses the same code.
//! - [`settings`]: [`H2Settings`], our limits and advertised settings,
//!   and the flood budgets, each default named.
//! - [`Request`]: a request's header block checked and turned into a
//!   request (by [`crate::stream_request`], whose rules HTTP/3 shares).
//! - [`conn`]: [`H2Conn`], one connection: preface, SETTINGS, streams and
//!   their states, flow control, limits on hostile clients, and the send
//!   side (HEADERS, DATA frame headers, a fair scheduler); `conn/recv.rs`
//!   is what each received frame does.

pub mod conn;
pub mod frame;
pub mod hpack;
pub(crate) mod huffman;
pub mod settings;

pub use conn::{Event, H2Conn};
pub use frame::ErrorCode;
/// A request on an HTTP/2 stream (31-bit stream ids).
pub type Request = crate::stream_request::Request<u32>;
pub use settings::{FloodLimits, H2Settings};
