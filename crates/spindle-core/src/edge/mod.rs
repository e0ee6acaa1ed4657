//! The caching edge (issue 49), the parts that do no I/O: how an origin
//! object is cut into slices ([`slice`]), what the cache keeps of one
//! version of it and how long it stays fresh ([`meta`]), and how a GET to
//! an S3-compatible origin is signed ([`sigv4`]), and which new objects
//! the cache lets in ([`admission`]). The fetching, the cache
//! directory and the waiting live in the `spindle` crate.

pub mod admission;
pub mod meta;
pub mod sigv4;
pub mod slice;

/// The root number of the edge's cache directory in a driver's roots
/// (after [`crate::compress::CACHE_ROOT`]'s): its files are opened beneath
/// it like any other.
pub const EDGE_ROOT: u16 = u16::MAX - 1;
