//! spindle's protocol core: everything between bytes in and bytes out that
//! is *not* I/O.
//!
//! A driver (one per I/O backend, in the `spindle` crate) owns the sockets
//! and files. It feeds received bytes to a [`Session`], and the session tells
//! it what to do next through [`Step`]: wait for input, open a path beneath
//! the document root, transmit a [`Response`] (a header block plus an
//! optional byte range of the opened file), or close. The core makes no
//! system calls at all, so every backend serves identical bytes for the same
//! input.
//!
//! Map:
//! - [`limits`]: every bound, named.
//! - [`h2`]: HTTP/2 (RFC 9113, HPACK): frames, header compression and the
//!   connection state machine, driven like [`Session`] but per stream.
//! - [`h3`]: HTTP/3 (RFC 9114, QPACK) above QUIC's streams: frames, QUIC
//!   varints, field sections on QPACK's static table, and the connection
//!   state machine a QUIC driver hands each stream's bytes to.
//! - [`request`]: the protocol-neutral request, parsed from an HTTP/1.1
//!   head (httparse) or built from an HTTP/2 stream's fields
//!   (`from_fields`); framing of bodies, and the request-level checks.
//! - [`stream_request`]: a request that came as fields on a stream of
//!   its own (HTTP/2's, HTTP/3's), checked by the rules the two share.
//! - [`fields`]: a response's header fields in no protocol's syntax,
//!   written out by HTTP/1.1's serializer or by HPACK.
//! - [`file`]: what a driver learned of an opened path (`FileMeta`).
//! - [`path`]: percent-decoding and the path policy (traversal, dotfiles).
//! - [`response`]: status, headers, conditional requests and ranges.
//! - [`rules`]: Cache-Control, header fields and Content-Type by path
//!   glob, and who may fetch (addresses, redirects, fallbacks); [`access`]:
//!   the checks of a request's own fields they may ask for (`Referer`,
//!   signed links); [`auth`]: Basic authentication against htpasswd files.
//! - [`encoding`]: `Accept-Encoding` negotiation for precompressed sidecars.
//! - [`listing`]: directory listings (`--autoindex`): HTML and JSON.
//! - [`session`]: the per-connection state machine (pipelining, keep-alive,
//!   body discarding).
//! - [`session_config`]: what every session of a server is configured
//!   with, and the document root by `Host`.
//! - [`step`]: the seam: what a session asks its driver to do next, and
//!   the opens and listings it asks for.
//! - [`accesslog`]: Combined Log Format lines.
//! - [`edge`]: the caching edge's parts without I/O: slices, an origin
//!   object's version and freshness, SigV4 signing (issue 49).
//! - [`proxy`]: the PROXY protocol header (v1 and v2) a load balancer sends
//!   first, and the address blocks of trusted proxies.

pub mod access;
pub mod accesslog;
pub mod auth;
pub mod challenge;
pub mod compress;
pub mod date;
pub mod edge;
pub mod encoding;
pub mod fields;
pub mod file;
pub mod h2;
pub mod h3;
pub mod limits;
pub mod listing;
pub mod path;
pub mod proxy;
mod range;
pub mod request;
pub mod response;
pub mod rules;
pub mod session;
pub mod session_config;
pub mod step;
pub mod stream_request;

pub use encoding::Encoding;
pub use fields::Fields;
pub use listing::Listing;
pub use response::{FileMeta, Response};
pub use session::{
    AuthCheck, Checked, EdgeFound, FetchRequest, ListRequest, OpenError, OpenRequest, Session,
    SessionConfig, Step, StreamProtocol,
};

/// Bytes from hex digits, white space ignored (the RFCs' examples).
#[cfg(test)]
pub(crate) fn hex_bytes(s: &str) -> Vec<u8> {
    let s: String = s.chars().filter(|c| !c.is_whitespace()).collect();
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}
