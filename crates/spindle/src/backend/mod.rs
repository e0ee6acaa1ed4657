//! The I/O backends: one module each, behind one interface.
//!
//! A backend runs one worker: an event loop on its own thread that
//! accepts connections on the worker's listening sockets, feeds received
//! bytes to a [`spindle_core::Session`] per connection, opens the paths the
//! session asks for beneath the root, and moves the response bytes (a
//! header block, then a range of the opened file) to the socket. None of
//! them knows HTTP: status, headers and ranges all come from the core.
//!
//! Every backend honours the same [`WorkerContext`]: the limits and
//! timeouts of [`Config`], the access log, and the shutdown signal
//! (stop accepting, finish responses in flight up to the drain timeout,
//! return).

use crate::config::BackendKind;
use crate::conn::WorkerContext;

pub mod epoll;
pub mod linux_aio;
pub mod posix_aio;
pub mod sendfile;
pub mod uring;

/// Runs one worker of the chosen backend until shutdown.
pub fn run_worker(kind: BackendKind, ctx: WorkerContext) -> Result<(), String> {
    match kind {
        BackendKind::IoUring => uring::run(ctx),
        BackendKind::LinuxSendfile => uring::run_inline(ctx),
        BackendKind::PosixAio => uring::run_threads(ctx),
        BackendKind::LinuxAioSendfile => uring::run_kaio(ctx),
    }
}

/// Checks that a backend can run here, before any worker starts.
pub fn probe(kind: BackendKind) -> Result<(), String> {
    match kind {
        BackendKind::IoUring => uring::probe(),
        BackendKind::LinuxSendfile => sendfile::probe(),
        BackendKind::PosixAio => posix_aio::probe(),
        BackendKind::LinuxAioSendfile => linux_aio::probe(),
    }
}
