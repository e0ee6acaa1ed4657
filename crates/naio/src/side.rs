//! What a run shares with its two sides: how each side moves bytes
//! ([`RecvMode`], [`SendMode`]), the [`Meter`] a side thread runs under,
//! and what it reports back ([`ThreadOut`], [`SockRecv`], [`ZcStats`]).
//! `bench` starts the side threads; `recv` and `send` are their bodies.

use std::sync::Barrier;
use std::time::Instant;

use serde::{Deserialize, Serialize};

use crate::sys;

/// How the receiver reads.
#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    clap::ValueEnum,
    Serialize,
    Deserialize,
)]
#[serde(rename_all = "kebab-case")]
pub enum RecvMode {
    /// Blocking `recv`, one thread per socket.
    Recv,
    /// One thread, `epoll` + non-blocking `recv`.
    Epoll,
    /// One thread, io_uring, one `RECV` in flight per socket.
    UringRecv,
    /// One thread, io_uring, one multishot `RECV` per socket over a provided buffer ring.
    UringRecvMultishot,
}

/// How the sender writes.
#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    clap::ValueEnum,
    Serialize,
    Deserialize,
)]
#[serde(rename_all = "kebab-case")]
pub enum SendMode {
    /// Blocking `send` from memory, one thread per socket.
    Send,
    /// One thread, `epoll` + non-blocking `send` from memory.
    Epoll,
    /// One thread, io_uring `SEND` from memory, one in flight per socket.
    UringSend,
    /// One thread, io_uring `SEND_ZC` from memory (zero-copy with notifications).
    UringSendZc,
    /// Blocking `sendfile` from the (page-cached) file, one thread per socket.
    Sendfile,
    /// One thread, io_uring `SPLICE` file -> pipe -> socket.
    UringSplice,
    /// One thread, io_uring `READ` from the (page-cached) file into a buffer, then `SEND`.
    UringReadSend,
    /// One thread: native AIO `O_DIRECT` read into a /dev/shm buffer, then `sendfile`.
    LinuxAioSendfile,
}

impl RecvMode {
    pub const ALL: [RecvMode; 4] = [
        RecvMode::Recv,
        RecvMode::Epoll,
        RecvMode::UringRecv,
        RecvMode::UringRecvMultishot,
    ];

    pub fn name(self) -> &'static str {
        match self {
            RecvMode::Recv => "recv",
            RecvMode::Epoll => "epoll",
            RecvMode::UringRecv => "uring-recv",
            RecvMode::UringRecvMultishot => "uring-recv-multishot",
        }
    }
}

impl SendMode {
    pub const ALL: [SendMode; 8] = [
        SendMode::Send,
        SendMode::Epoll,
        SendMode::UringSend,
        SendMode::UringSendZc,
        SendMode::Sendfile,
        SendMode::UringSplice,
        SendMode::UringReadSend,
        SendMode::LinuxAioSendfile,
    ];

    pub fn name(self) -> &'static str {
        match self {
            SendMode::Send => "send",
            SendMode::Epoll => "epoll",
            SendMode::UringSend => "uring-send",
            SendMode::UringSendZc => "uring-send-zc",
            SendMode::Sendfile => "sendfile",
            SendMode::UringSplice => "uring-splice",
            SendMode::UringReadSend => "uring-read-send",
            SendMode::LinuxAioSendfile => "linux-aio-sendfile",
        }
    }
}
/// Per-socket result of a receiver.
#[derive(Clone, Copy, Debug, Default)]
pub struct SockRecv {
    pub bytes: u64,
    pub digest: u64,
}

/// SEND_ZC accounting.
#[derive(Clone, Copy, Debug, Default)]
pub struct ZcStats {
    pub sends: u64,
    pub notifs: u64,
    pub copied: u64,
}
/// What a side thread returns.
#[derive(Debug, Default)]
pub struct ThreadOut {
    /// (socket index, bytes sent) for senders.
    pub sent: Vec<(usize, u64)>,
    /// (socket index, received) for receivers.
    pub received: Vec<(usize, SockRecv)>,
    pub zc: ZcStats,
}

/// Start/stop bookkeeping of one side thread: waits on the common start
/// barrier, then measures the thread's CPU time and, at the end, the CPU
/// time of the io-wq workers io_uring started for this thread.
pub struct Meter<'a> {
    pub(crate) barrier: &'a Barrier,
    pub(crate) started: bool,
    t0: u64,
    pub start: Option<Instant>,
    pub end: Option<Instant>,
    pub cpu_ns: u64,
    pub iowq_ns: u64,
    pub iowq_workers: usize,
}

impl<'a> Meter<'a> {
    pub(crate) fn new(barrier: &'a Barrier) -> Meter<'a> {
        Meter {
            barrier,
            started: false,
            t0: 0,
            start: None,
            end: None,
            cpu_ns: 0,
            iowq_ns: 0,
            iowq_workers: 0,
        }
    }

    /// Waits for every thread of the run, then starts the clocks.
    pub fn start(&mut self) -> Instant {
        self.barrier.wait();
        self.started = true;
        self.t0 = sys::thread_cpu_ns();
        let now = Instant::now();
        self.start = Some(now);
        now
    }

    /// Stops the clocks. Call while any io_uring of the thread is still
    /// open: its io-wq workers exit soon after the ring is closed.
    pub fn stop(&mut self) {
        self.end = Some(Instant::now());
        self.cpu_ns = sys::thread_cpu_ns().saturating_sub(self.t0);
        let (ns, n) = crate::cpu::iowq_cpu_ns(sys::gettid());
        self.iowq_ns = ns;
        self.iowq_workers = n;
    }
}

/// Returns true once `deadline` has passed.
pub fn past(deadline: Option<Instant>) -> bool {
    deadline.is_some_and(|d| Instant::now() >= d)
}
