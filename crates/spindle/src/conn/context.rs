//! What a worker is given: the [`WorkerContext`] (its listeners, the
//! configuration it runs and how a reload reaches it, the shared caches
//! and counters), the shutdown signal and the accept gate of a binary
//! handover. Every event loop takes the same.

use std::os::fd::{OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex};

use spindle_core::SessionConfig;

use crate::accesslog::AccessLog;
use crate::config::Config;
use crate::fs::Roots;
use crate::memory::MemoryWatch;
use crate::recent::RecentFiles;

/// Everything a worker needs.
pub struct WorkerContext {
    pub id: usize,
    /// This worker's listening sockets (blocking mode; a backend may
    /// change that): plain HTTP first, then those in `proxied`, then from
    /// `tls_from` on, HTTPS.
    pub listeners: Vec<OwnedFd>,
    /// Listeners behind a load balancer (`--proxy-listen`): a connection
    /// is kept only from a trusted proxy, with a session that wants a
    /// PROXY header first ([`proxied_session`]).
    pub proxied: std::ops::Range<usize>,
    pub tls_from: usize,
    /// The TLS configuration of the HTTPS listeners (`tls.rs`), replaced
    /// on SIGHUP.
    pub tls: Option<Arc<crate::tls::Shared>>,
    pub root: Arc<Roots>,
    /// The configuration SIGHUP publishes (`reload.rs`), and the
    /// generation of it this worker runs.
    pub reload: Arc<Published>,
    pub reload_gen: u64,
    /// `--max-connections-per-ip`, shared by all workers.
    pub per_ip: Option<Arc<crate::perip::PerIp>>,
    pub cfg: Arc<Config>,
    pub session_cfg: Arc<SessionConfig>,
    pub log: AccessLog,
    /// Files opened recently, shared by all workers (the second-use test).
    pub recent: Arc<RecentFiles>,
    /// Whether the page cache has room (refreshed by worker 0's tick).
    pub memory: Arc<MemoryWatch>,
    pub shutdown: ShutdownSignal,
    /// This worker's counters (`metrics.rs`): written by this worker only.
    pub metrics: Arc<crate::metrics::WorkerMetrics>,
    /// The helpers that read directories (`--autoindex`; `lister.rs`).
    pub lister: Option<Arc<crate::lister::Pool>>,
    /// The helper that checks passwords (`auth` rules; `passwords.rs`).
    pub checker: Arc<crate::passwords::Checker>,
    /// The helpers that compress on the fly (`--compress`; `compress.rs`).
    pub compressor: Option<Arc<crate::compress::Compressor>>,
    /// The caching edge's helpers and cache (`--origin`; `edge/`).
    pub edge: Option<Arc<crate::edge::Edge>>,
    /// HTTP/3 (`--http3`): this worker's UDP socket and the keys.
    pub quic: Option<crate::quic::Setup>,
    /// Report `Ok` once set up (or the setup error) exactly once.
    pub ready: Sender<Result<(), String>>,
}

impl WorkerContext {
    /// Takes the configuration a SIGHUP published, if there is a newer one
    /// than this worker runs (one atomic load otherwise). `true`: the
    /// caller drops what depended on the old one.
    pub fn take_reload(&mut self) -> bool {
        if self.reload.generation() == self.reload_gen {
            return false;
        }
        let (gen, r) = self.reload.current();
        self.reload_gen = gen;
        self.cfg = r.cfg;
        self.session_cfg = r.session_cfg;
        self.root = r.roots;
        true
    }
}

/// What a reload gives the workers.
#[derive(Clone)]
pub struct Reloadable {
    pub cfg: Arc<Config>,
    pub session_cfg: Arc<SessionConfig>,
    pub roots: Arc<Roots>,
}

/// The current [`Reloadable`] and its generation, shared by all workers:
/// SIGHUP publishes (`reload.rs`), each worker takes it on its tick.
pub struct Published {
    current: Mutex<Reloadable>,
    generation: AtomicU64,
}

impl Published {
    pub fn new(r: Reloadable) -> Arc<Published> {
        Arc::new(Published {
            current: Mutex::new(r),
            generation: AtomicU64::new(0),
        })
    }

    /// Checked by each worker on its tick: one atomic load.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    pub fn current(&self) -> (u64, Reloadable) {
        let r = self
            .current
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        (self.generation(), r)
    }

    /// A new configuration for the workers, under the next generation.
    pub fn publish(&self, r: Reloadable) {
        *self.current.lock().unwrap_or_else(|p| p.into_inner()) = r;
        self.generation.fetch_add(1, Ordering::AcqRel);
    }
}

/// Set when the server should drain and stop; the eventfd becomes readable
/// at the same moment, so an event loop can wait on it.
#[derive(Clone)]
pub struct ShutdownSignal {
    pub flag: Arc<AtomicBool>,
    /// An eventfd owned by the server; written on shutdown, and when the
    /// accept gate opens or closes.
    pub eventfd: RawFd,
    pub gate: Arc<AcceptGate>,
}

/// Closed while a new binary starts (SIGUSR2, `handover.rs`): the workers
/// stop accepting, and each says so once none of its accepts is left in
/// the kernel, before the new process starts accepting on the same
/// sockets. Two processes accepting on one socket through io_uring at once
/// can leave a socket's queue unserved: io_uring arms its accept polls
/// `EPOLLEXCLUSIVE`, and in about one handover in twenty a wake-up went to
/// the old process's poll while it was being cancelled, and the new
/// process's never woke for that socket (tests/handover.rs). Opened again
/// if the new process fails.
#[derive(Default)]
pub struct AcceptGate {
    closed: AtomicBool,
    stopped: std::sync::atomic::AtomicUsize,
}

impl AcceptGate {
    pub fn closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Workers whose accepts are all stopped since the last [`close`].
    ///
    /// [`close`]: AcceptGate::close
    pub fn stopped(&self) -> usize {
        self.stopped.load(Ordering::Acquire)
    }

    /// A worker has no accept left in the kernel; once per close.
    pub fn ack(&self) {
        self.stopped.fetch_add(1, Ordering::AcqRel);
    }

    pub fn close(&self) {
        self.stopped.store(0, Ordering::Release);
        self.closed.store(true, Ordering::Release);
    }

    pub fn open(&self) {
        self.closed.store(false, Ordering::Release);
    }
}

impl ShutdownSignal {
    pub fn requested(&self) -> bool {
        self.flag.load(Ordering::Acquire)
    }
}
