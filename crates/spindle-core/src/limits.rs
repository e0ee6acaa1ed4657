//! Every bound the protocol core enforces, in one place. The server's
//! configuration may override the ones marked "default".

/// Default limit on the request line (method, target, version), in bytes.
/// Longer lines get `414 URI Too Long`.
pub const DEFAULT_MAX_REQUEST_LINE: usize = 4096;

/// Default limit on the whole request head (request line plus header
/// fields plus the blank line), in bytes. Larger heads get
/// `431 Request Header Fields Too Large`.
pub const DEFAULT_MAX_HEADER_BYTES: usize = 8192;

/// Maximum number of header fields in one request; more gets 431.
pub const MAX_HEADERS: usize = 64;

/// Request bodies up to this size (by `Content-Length`) are read and
/// discarded so the connection can be kept alive. Larger bodies, and any
/// chunked body, make the server answer and then close the connection
/// without reading the body.
pub const MAX_DISCARD_BODY: u64 = 64 * 1024;

/// Maximum number of requests served on one connection before the server
/// closes it (as nginx's `keepalive_requests`).
pub const DEFAULT_MAX_REQUESTS_PER_CONNECTION: u64 = 10_000;

/// Most range specs in one `Range` header that are looked at; a longer
/// list is ignored (the whole file, 200), so that `bytes=0-,0-,...`
/// (CVE-2011-3192) costs one scan of the header and nothing more.
pub const MAX_RANGE_SPECS: usize = 64;

/// Most parts of a `multipart/byteranges` response, after overlapping and
/// adjacent ranges are merged; more is answered with the whole file.
pub const MAX_RANGES: usize = 16;
