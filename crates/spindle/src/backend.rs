//! The I/O backends: one worker, on one of two engines.
//!
//! A backend runs one worker ([`crate::worker`]) per thread: an event loop that
//! accepts connections on the worker's listening sockets, feeds received
//! bytes to a [`spindle_core::Session`] per connection, opens the paths
//! the session asks for beneath the root, and moves the response bytes (a
//! header block, then a range of the opened file) to the socket. None of
//! it knows HTTP: status, headers and ranges all come from the core.
//!
//! The worker says what to do as typed operations ([`crate::io::Sub`]);
//! an engine carries them out. The backends differ only in the engine and
//! in how it does disk work:
//!
//! | backend | engine | opens and disk reads | bodies |
//! |---|---|---|---|
//! | `io-uring` | [`crate::io::ring`] | in the ring (io-wq when they wait) | `sendfile` from the page cache, else `SEND` from a chunk buffer |
//! | `posix-aio` | [`crate::io::poll`] | what is cached in the loop, the rest on `--io-threads` threads | as io-uring |
//! | `linux-sendfile` | [`crate::io::poll`] | in the loop (blocking on a miss) | every body by `sendfile`, unprobed |
//! | `linux-aio-sendfile` | [`crate::io::poll`] | opens in the loop; misses `O_DIRECT` by native AIO into shared memory | `sendfile` from the page cache or from the shared memory |
//!
//! Every backend honours the same [`WorkerContext`]: the limits and
//! timeouts of [`crate::config::Config`], the access log, and the shutdown
//! signal (stop accepting, finish responses in flight up to the drain
//! timeout, return).

use crate::config::BackendKind;
use crate::conn::WorkerContext;

/// Runs one worker of the chosen backend until shutdown.
pub fn run_worker(kind: BackendKind, ctx: WorkerContext) -> Result<(), String> {
    match kind {
        BackendKind::IoUring => crate::worker::run(ctx),
        BackendKind::LinuxSendfile => crate::worker::run_inline(ctx),
        BackendKind::PosixAio => crate::worker::run_threads(ctx),
        BackendKind::LinuxAioSendfile => crate::worker::run_kaio(ctx),
    }
}

/// Checks that a backend can run here, before any worker starts.
pub fn probe(kind: BackendKind) -> Result<(), String> {
    match kind {
        BackendKind::IoUring => crate::worker::probe(),
        BackendKind::LinuxSendfile | BackendKind::PosixAio => Ok(()),
        BackendKind::LinuxAioSendfile => crate::io::shm::probe(),
    }
}
