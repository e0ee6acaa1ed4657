//! The connection layer: a connection's life above the protocol core and
//! below the worker's I/O (`crate::worker`).
//!
//! ```text
//!  spindle-core     Session: bytes in, Steps out (no I/O)
//!  conn (here)      Life: phases, deadlines, idle, drain and linger rules
//!                   Serving: caches and admission, listings, finishing a
//!                   response, reload, the timeout sweep, new connections
//!                   Slots: connection slots and generations (Tickets)
//!  worker           one per thread, on an engine (io_uring or epoll); it
//!                   owns the sockets, files and buffers, does what conn says
//! ```
//!
//! The steps between (drive, open, list, authenticate, the edge's fetch
//! and slices, TLS input, a response's end, the tick, HTTP/2's glue) are
//! written once here as
//! [`Steps`] and [`StreamSteps`], over the worker's [`Transport`].
//!
//! The worker keeps a connection as its own struct holding a [`Life`]
//! beside what only it needs (operations in flight, TLS records,
//! the response's buffers). It asks [`Life::next`] what to do, does it
//! (arm a receive, open, transmit, close), and reports back through
//! [`Serving`]: `lookup` and `opened` for a path, `list` for a directory,
//! `finished` when a response's last byte is out, `sweep` on its tick.
//! The worker never decides HTTP, caching, logging or timeouts itself.
//!
//! See ARCHITECTURE.md ("The connection layer") for how HTTP/2's streams
//! fit: one `Life` per connection, one exchange per stream.

mod context;
mod edge;
pub mod h2;
mod life;
pub mod policy;
pub mod sendq;
mod serve;
mod steps;
mod streams;
mod table;
pub mod tls;

pub use context::{AcceptGate, Published, Reloadable, ShutdownSignal, WorkerContext};
pub use edge::More;
pub use life::{Life, Next, Phase, Waiting};
pub use serve::{Admitted, Answer, Found, Listed, OpenResult, Reply, Serving};
pub use steps::{Connection, Steps, Transport, Waited};
pub use streams::StreamSteps;
pub use table::{Slots, Ticket};
