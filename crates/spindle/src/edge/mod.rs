//! The caching edge (issue 49): spindle in front of an origin (another
//! HTTP server, or an S3-compatible bucket), keeping what clients ask for
//! on its own disk in aligned slices. The parts without I/O are in
//! `spindle_core::edge`; here is the origin client ([`fetch`]), which runs
//! on helper threads, never on a worker.

pub mod fetch;
pub mod fetcher;
pub mod store;

/// What a worker holds of the edge: the helpers, answering by ticket.
pub type Edge = fetcher::Fetcher<crate::conn::Ticket>;
