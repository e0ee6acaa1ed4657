//! The per-thread event loop: non-blocking sockets on an edge-triggered
//! epoll instance, one slab of connections, no allocation per fetch.
//!
//! Each socket is registered once for input, output and hang-up, edge
//! triggered, and never modified: a fetch costs connect (if new), one
//! `send`, and usually one `recv` per readiness edge. A `recv` that returns
//! less than asked for has drained the socket, so the next edge will come.
//!
//! Here: the state (`Worker`, `Conn`), starting fetches, the timers and the
//! loop; `fetch.rs` is one fetch on its connection (send the request, read
//! and account the response, end it); `idle.rs` holds the idle keep-alive
//! connections of `--idle`.

mod fetch;
mod idle;

use crate::http::ResponseParser;
use crate::stats::Stats;
use crate::sys::{self, Epoll, Event, EV_ERR, EV_HUP, EV_IN, EV_OUT, EV_RDHUP};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Barrier, OnceLock};
use std::time::{Duration, Instant};

/// Size of each thread's receive buffer.
pub const READ_BUFFER_BYTES: usize = 128 * 1024;
/// Most events one `epoll_wait` returns.
pub const MAX_EVENTS: usize = 1024;
/// Period of the timeout scan and other housekeeping.
pub const TICK: Duration = Duration::from_millis(100);
/// Most fetches one pass of the loop adds to those in flight, beyond
/// replacing the ones that ended (a ramp, as http_load's 10 per pass, so a
/// large -parallel does not overflow the server's listen backlog at once).
pub const MAX_STARTS_PER_PASS: usize = 256;
/// Most idle connections being set up at once per thread.
pub const IDLE_SETUP_CONCURRENCY: usize = 64;
/// Most dropped idle connections reopened per tick per thread.
pub const IDLE_REOPEN_PER_TICK: u64 = 1000;
/// Most error lines printed on stderr during a run.
pub const MAX_ERROR_LINES: u64 = 100;

/// A URL ready to fetch: where to connect and what to send.
pub struct Target {
    /// The URL as written in the URL file.
    pub text: String,
    pub addr: SocketAddr,
    /// Request with `Connection: close`.
    pub request_close: Box<[u8]>,
    /// Request for a persistent connection.
    pub request_keepalive: Box<[u8]>,
    /// `https://`: the TLS server name (SNI and certificate check).
    pub tls_name: Option<String>,
}

/// Build the two requests for a URL, with its credentials and its range
/// (the value after `bytes=`) if it has them. With a proxy, the request
/// line carries the absolute URL.
pub fn build_requests(
    request_target: &str,
    host_header: &str,
    authorization: Option<&str>,
    range: Option<&str>,
) -> (Box<[u8]>, Box<[u8]>) {
    let ua = concat!("spindle-load/", env!("CARGO_PKG_VERSION"));
    let mut auth = authorization.map_or(String::new(), |a| format!("Authorization: {a}\r\n"));
    if let Some(r) = range {
        auth.push_str(&format!("Range: bytes={r}\r\n"));
    }
    let ka = format!(
        "GET {request_target} HTTP/1.1\r\nHost: {host_header}\r\nUser-Agent: {ua}\r\n{auth}\r\n"
    );
    let close = format!(
        "GET {request_target} HTTP/1.1\r\nHost: {host_header}\r\nUser-Agent: {ua}\r\n{auth}Connection: close\r\n\r\n"
    );
    (close.into_bytes().into(), ka.into_bytes().into())
}

/// What every thread reads.
pub struct Plan {
    pub targets: Vec<Target>,
    pub sips: Vec<IpAddr>,
    pub keepalive: bool,
    pub checksum: bool,
    /// Bytes per second per connection, if throttled.
    pub throttle: Option<u64>,
    pub timeout: Duration,
    pub fetch_limit: Option<u64>,
    pub seconds: Option<Duration>,
    /// The client configuration of every `https://` connection.
    pub tls: Option<std::sync::Arc<rustls::ClientConfig>>,
}

/// What the threads share and the monitor reads.
pub struct Shared {
    pub started: AtomicU64,
    pub completed: AtomicU64,
    pub current: AtomicU64,
    pub max_parallel: AtomicU64,
    pub stop: AtomicBool,
    pub threads_done: AtomicUsize,
    pub idle_held: AtomicU64,
    error_lines: AtomicU64,
    /// Per URL: body bytes and checksum of its first good fetch.
    refs: Vec<OnceLock<(u64, u64)>>,
}

impl Shared {
    pub fn new(urls: usize) -> Self {
        Shared {
            started: AtomicU64::new(0),
            completed: AtomicU64::new(0),
            current: AtomicU64::new(0),
            max_parallel: AtomicU64::new(0),
            stop: AtomicBool::new(false),
            threads_done: AtomicUsize::new(0),
            idle_held: AtomicU64::new(0),
            error_lines: AtomicU64::new(0),
            refs: (0..urls).map(|_| OnceLock::new()).collect(),
        }
    }
}

/// This thread's share of the work.
#[derive(Clone, Debug)]
pub struct ThreadPlan {
    /// Fetches to keep in flight (parallel mode), else 0.
    pub parallel: u64,
    /// Fetches to start per second (rate mode), else 0.
    pub rate: f64,
    pub jitter: bool,
    /// Cap on fetches in flight in rate mode.
    pub max_in_flight: u64,
    /// Idle connections to hold.
    pub idle: u64,
    pub seed: u64,
}

/// A thread's result: its counters and when it stopped.
pub struct ThreadResult {
    pub stats: Stats,
    pub started: Instant,
    pub ended: Instant,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Role {
    Fetch,
    Idle,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Phase {
    Connecting,
    Sending,
    Receiving,
    /// Waiting for the throttle to allow more bytes.
    Throttled,
    /// Connected, no request outstanding: a held idle connection, or a
    /// keep-alive connection in the rate-mode pool.
    Parked,
}

struct Conn {
    fd: OwnedFd,
    role: Role,
    phase: Phase,
    url: usize,
    conn_start: Instant,
    fetch_start: Instant,
    request_at: Instant,
    last_activity: Instant,
    sent: usize,
    parser: ResponseParser,
    in_fetch: bool,
    reused: bool,
    retried: bool,
    got_first_byte: bool,
    saw_input: bool,
    /// The peer hung up (RDHUP/HUP/ERR seen): read to the end, since no
    /// further edge will come.
    peer_closed: bool,
    throttle_bytes: u64,
    /// `https://`: the TLS session the socket's bytes go through.
    tls: Option<Box<crate::tls::Tls>>,
}

struct Slot {
    gen: u32,
    conn: Option<Conn>,
}

enum Outcome {
    Complete,
    /// Response ended early (or ran long): a bad byte count.
    Short(String),
    Timeout,
    Error(String),
}

enum Read {
    /// Socket drained, response not complete.
    Pending,
    Throttled(Instant),
    Eof,
    Done {
        extra: bool,
    },
    IoError(io::Error),
    Proto(String),
}

/// An OS error as strerror says it, without Rust's " (os error N)".
fn errmsg(e: &io::Error) -> String {
    let s = e.to_string();
    match s.find(" (os error ") {
        Some(i) => s[..i].to_string(),
        None => s,
    }
}

fn token(slot: usize, gen: u32) -> u64 {
    (u64::from(gen) << 32) | slot as u64
}

pub struct Worker<'a> {
    plan: &'a Plan,
    shared: &'a Shared,
    tp: ThreadPlan,
    ep: Epoll,
    events: Vec<Event>,
    slots: Vec<Slot>,
    free: Vec<usize>,
    rng: SmallRng,
    buf: Vec<u8>,
    stats: Stats,
    in_flight: u64,
    no_more_tickets: bool,
    local_max: u64,
    pool: Vec<(usize, u32)>,
    throttled: Vec<(Instant, usize, u32)>,
    idle_open: u64,
    idle_setting_up: u64,
    idle_reopen_pending: u64,
    /// Fetches ended since the last start pass.
    ended_since_pass: usize,
    scratch: Vec<usize>,
}

impl<'a> Worker<'a> {
    pub fn new(plan: &'a Plan, shared: &'a Shared, tp: ThreadPlan) -> io::Result<Self> {
        Ok(Worker {
            plan,
            shared,
            rng: SmallRng::seed_from_u64(tp.seed),
            tp,
            ep: Epoll::new(MAX_EVENTS)?,
            events: Vec::with_capacity(MAX_EVENTS),
            slots: Vec::new(),
            free: Vec::new(),
            buf: vec![0; READ_BUFFER_BYTES],
            stats: Stats::new(),
            in_flight: 0,
            no_more_tickets: false,
            local_max: 0,
            pool: Vec::new(),
            throttled: Vec::new(),
            idle_open: 0,
            idle_setting_up: 0,
            idle_reopen_pending: 0,
            ended_since_pass: 0,
            scratch: Vec::new(),
        })
    }

    /// An error line on stderr (the first MAX_ERROR_LINES). Written, not
    /// `eprintln!`ed: a closed stderr (`spindle-load ... 2>&1 | head`) must not
    /// panic a worker thread and leave the run waiting for it forever.
    fn note(&self, url: usize, msg: &str) {
        use std::io::Write;
        let n = self.shared.error_lines.fetch_add(1, Relaxed);
        let mut err = io::stderr().lock();
        if n < MAX_ERROR_LINES {
            let _ = writeln!(err, "{}: {}", self.plan.targets[url].text, msg);
        } else if n == MAX_ERROR_LINES {
            let _ = writeln!(
                err,
                "spindle-load: more errors follow; not printing them (see the counts)"
            );
        }
    }

    fn claim(&mut self) -> bool {
        if self.no_more_tickets || self.shared.stop.load(Relaxed) {
            return false;
        }
        let ok = match self.plan.fetch_limit {
            None => {
                self.shared.started.fetch_add(1, Relaxed);
                true
            }
            Some(n) => self
                .shared
                .started
                .fetch_update(Relaxed, Relaxed, |v| (v < n).then_some(v + 1))
                .is_ok(),
        };
        if !ok {
            self.no_more_tickets = true;
        }
        ok
    }

    fn pick_url(&mut self) -> usize {
        let n = self.plan.targets.len();
        if n == 1 {
            0
        } else {
            self.rng.random_range(0..n)
        }
    }

    fn conn(&mut self, slot: usize) -> &mut Conn {
        self.slots[slot].conn.as_mut().expect("live slot")
    }

    /// Open a connection; returns its slot, and whether connect finished.
    fn open(&mut self, url: usize, role: Role) -> io::Result<(usize, bool)> {
        let source = if self.plan.sips.is_empty() {
            None
        } else {
            Some(self.plan.sips[self.rng.random_range(0..self.plan.sips.len())])
        };
        let now = Instant::now();
        // Nagle off for keep-alive (a request must not wait for the last
        // response's ACK) and for TLS (the handshake's flights are several
        // writes; Nagle would hold one back for a delayed ACK, 40 ms).
        let tls_target = self.plan.targets[url].tls_name.is_some();
        let (fd, connected) = sys::connect_nonblocking(
            &self.plan.targets[url].addr,
            source,
            self.plan.keepalive || tls_target,
        )?;
        let slot = match self.free.pop() {
            Some(s) => s,
            None => {
                self.slots.push(Slot { gen: 0, conn: None });
                self.slots.len() - 1
            }
        };
        let tls = match (&self.plan.targets[url].tls_name, &self.plan.tls) {
            (Some(name), Some(cfg)) => match crate::tls::Tls::new(cfg, name) {
                Ok(t) => Some(Box::new(t)),
                Err(e) => {
                    self.free.push(slot);
                    return Err(e);
                }
            },
            _ => None,
        };
        let gen = self.slots[slot].gen;
        if let Err(e) = self.ep.add(fd.as_raw_fd(), token(slot, gen)) {
            self.free.push(slot);
            return Err(e);
        }
        self.slots[slot].conn = Some(Conn {
            fd,
            role,
            phase: Phase::Connecting,
            url,
            conn_start: now,
            fetch_start: now,
            request_at: now,
            last_activity: now,
            sent: 0,
            parser: ResponseParser::new(self.plan.checksum),
            in_fetch: false,
            reused: false,
            retried: false,
            got_first_byte: false,
            saw_input: false,
            peer_closed: false,
            throttle_bytes: 0,
            tls,
        });
        Ok((slot, connected))
    }

    fn close(&mut self, slot: usize) {
        let s = &mut self.slots[slot];
        if let Some(c) = s.conn.take() {
            debug_assert!(!c.in_fetch);
            if c.role == Role::Idle && c.phase == Phase::Parked {
                self.idle_open -= 1;
                self.shared.idle_held.fetch_sub(1, Relaxed);
            }
            if c.role == Role::Fetch {
                match c.tls.as_ref().and_then(|t| t.resumed()) {
                    Some(true) => self.stats.tls_resumed += 1,
                    Some(false) => self.stats.tls_full += 1,
                    None => {}
                }
            }
            drop(c); // closing the fd removes it from epoll
            s.gen = s.gen.wrapping_add(1);
            self.free.push(slot);
        }
    }

    fn begin_fetch(&mut self, slot: usize, start: Instant) {
        let c = self.conn(slot);
        c.in_fetch = true;
        c.fetch_start = start;
        self.in_flight += 1;
        let cur = self.shared.current.fetch_add(1, Relaxed) + 1;
        if cur > self.local_max {
            self.local_max = cur;
            self.shared.max_parallel.fetch_max(cur, Relaxed);
        }
    }

    /// Start one fetch of a random URL whose clock starts at `start`.
    fn start_fetch(&mut self, start: Instant) {
        let url = self.pick_url();
        // Rate mode with keep-alive: reuse a parked connection if there is one.
        while let Some((slot, gen)) = self.pool.pop() {
            let live = self.slots[slot].gen == gen
                && self.slots[slot]
                    .conn
                    .as_ref()
                    .is_some_and(|c| c.phase == Phase::Parked);
            if live {
                self.fetch_on_kept(slot, url, start);
                return;
            }
        }
        self.start_on_new_conn(url, start, false);
    }

    /// Starts a fetch of `url` on the kept-alive connection in `slot`.
    fn fetch_on_kept(&mut self, slot: usize, url: usize, start: Instant) {
        self.begin_fetch(slot, start);
        let c = self.conn(slot);
        c.url = url;
        c.reused = true;
        c.retried = false;
        self.send_request(slot);
    }

    fn start_on_new_conn(&mut self, url: usize, start: Instant, retried: bool) {
        match self.open(url, Role::Fetch) {
            Ok((slot, connected)) => {
                self.begin_fetch(slot, start);
                self.conn(slot).retried = retried;
                if connected {
                    self.on_connected(slot);
                }
            }
            Err(e) => {
                // Count it as a fetch that ended in an error, as http_load.
                self.in_flight += 1;
                self.shared.current.fetch_add(1, Relaxed);
                self.stats.errors += 1;
                self.note(url, &errmsg(&e));
                self.account_end();
            }
        }
    }

    /// Bookkeeping common to every ended fetch.
    fn account_end(&mut self) {
        self.stats.fetches += 1;
        self.ended_since_pass += 1;
        self.in_flight -= 1;
        self.shared.current.fetch_sub(1, Relaxed);
        self.shared.completed.fetch_add(1, Relaxed);
    }

    fn handle_event(&mut self, ev: Event) {
        let slot = (ev.token & 0xffff_ffff) as usize;
        let gen = (ev.token >> 32) as u32;
        let Some(s) = self.slots.get(slot) else {
            return;
        };
        if s.gen != gen || s.conn.is_none() {
            return;
        }
        let input = ev.events & (EV_IN | EV_RDHUP | EV_HUP | EV_ERR) != 0;
        let output = ev.events & (EV_OUT | EV_ERR | EV_HUP) != 0;
        let keepalive = self.plan.keepalive;
        let c = self.conn(slot);
        if ev.events & (EV_RDHUP | EV_HUP | EV_ERR) != 0 {
            c.peer_closed = true;
        }
        match c.phase {
            Phase::Connecting => {
                if input {
                    c.saw_input = true;
                }
                if output {
                    match sys::take_error(c.fd.as_raw_fd()) {
                        Ok(None) => self.on_connected(slot),
                        Ok(Some(e)) | Err(e) => self.fail(slot, errmsg(&e), true),
                    }
                }
            }
            Phase::Sending => {
                if input {
                    c.saw_input = true;
                }
                if output {
                    self.continue_send(slot, keepalive);
                }
            }
            Phase::Receiving => {
                if output && c.tls.as_ref().is_some_and(|t| t.wants_write()) {
                    // Handshake records the socket could not take while reading.
                    if let Err(e) = c.flush() {
                        self.fail(slot, errmsg(&e), true);
                        return;
                    }
                }
                if input {
                    self.on_readable(slot);
                }
            }
            Phase::Throttled => {}
            Phase::Parked => {
                if input {
                    self.parked_input(slot);
                }
            }
        }
    }

    /// Time out connections that made no progress for `timeout`.
    fn scan_timeouts(&mut self, now: Instant) {
        let timeout = self.plan.timeout;
        let mut list = std::mem::take(&mut self.scratch);
        list.clear();
        for (i, s) in self.slots.iter().enumerate() {
            if let Some(c) = &s.conn {
                let waiting = !matches!(c.phase, Phase::Parked | Phase::Throttled);
                if waiting && now.duration_since(c.last_activity) >= timeout {
                    list.push(i);
                }
            }
        }
        for &i in &list {
            let c = self.conn(i);
            if c.role == Role::Idle {
                self.fail(i, "timed out".into(), false);
            } else if c.in_fetch {
                self.end(i, Outcome::Timeout, false);
            } else {
                self.close(i);
            }
        }
        self.scratch = list;
    }

    fn resume_throttled(&mut self, now: Instant) {
        let mut i = 0;
        while i < self.throttled.len() {
            let (at, slot, gen) = self.throttled[i];
            if at > now {
                i += 1;
                continue;
            }
            self.throttled.swap_remove(i);
            let live = self.slots[slot].gen == gen
                && self.slots[slot]
                    .conn
                    .as_ref()
                    .is_some_and(|c| c.phase == Phase::Throttled);
            if live {
                let c = self.conn(slot);
                c.phase = Phase::Receiving;
                c.last_activity = now;
                self.on_readable(slot);
            }
        }
    }

    fn wait(&mut self, timeout: Duration) -> io::Result<()> {
        let ms = timeout.as_micros().div_ceil(1000).min(i32::MAX as u128) as i32;
        self.events.clear();
        self.ep.wait(&mut self.events, ms)?;
        let events = std::mem::take(&mut self.events);
        for &ev in &events {
            self.handle_event(ev);
        }
        self.events = events;
        Ok(())
    }

    /// The measured run, from `t0`.
    pub fn run(&mut self, t0: Instant) -> io::Result<()> {
        let deadline = self.plan.seconds.map(|s| t0 + s);
        let gap = if self.tp.rate > 0.0 {
            Duration::from_secs_f64(1.0 / self.tp.rate)
        } else {
            Duration::ZERO
        };
        let mut next_start = t0;
        let mut next_tick = t0 + TICK;
        loop {
            let now = Instant::now();
            if self.shared.stop.load(Relaxed) || deadline.is_some_and(|d| now >= d) {
                break;
            }
            // Start fetches.
            let mut capped = false;
            let mut starts = 0;
            if self.tp.parallel > 0 {
                let cap = MAX_STARTS_PER_PASS + std::mem::take(&mut self.ended_since_pass);
                while self.in_flight < self.tp.parallel && !self.no_more_tickets {
                    if starts == cap {
                        capped = true;
                        break;
                    }
                    if !self.claim() {
                        break;
                    }
                    starts += 1;
                    self.start_fetch(Instant::now());
                }
            } else if self.tp.rate > 0.0 {
                while next_start <= now
                    && !self.no_more_tickets
                    && self.in_flight < self.tp.max_in_flight
                {
                    if starts == MAX_STARTS_PER_PASS {
                        capped = true;
                        break;
                    }
                    if !self.claim() {
                        break;
                    }
                    starts += 1;
                    // Open loop: the fetch's clock starts when it was due.
                    self.start_fetch(next_start);
                    let step = if self.tp.jitter {
                        gap.mul_f64(self.rng.random_range(0.9..=1.1))
                    } else {
                        gap
                    };
                    next_start += step;
                }
            }
            if self.no_more_tickets && self.in_flight == 0 {
                break;
            }
            // How long to wait.
            let now = Instant::now();
            let mut wait = next_tick.saturating_duration_since(now);
            if capped {
                wait = Duration::ZERO;
            }
            if self.tp.rate > 0.0 && !self.no_more_tickets && self.in_flight < self.tp.max_in_flight
            {
                wait = wait.min(next_start.saturating_duration_since(now));
            }
            if let Some(&(at, _, _)) = self.throttled.iter().min_by_key(|t| t.0) {
                wait = wait.min(at.saturating_duration_since(now));
            }
            if let Some(d) = deadline {
                wait = wait.min(d.saturating_duration_since(now));
            }
            self.wait(wait)?;
            let now = Instant::now();
            if !self.throttled.is_empty() {
                self.resume_throttled(now);
            }
            if now >= next_tick {
                self.scan_timeouts(now);
                let n = self.idle_reopen_pending.min(IDLE_REOPEN_PER_TICK);
                self.idle_reopen_pending -= n;
                for _ in 0..n {
                    self.open_idle();
                }
                next_tick = now + TICK;
            }
        }
        Ok(())
    }

    /// Close everything; fetches still in flight are dropped uncounted, as
    /// http_load does when -seconds runs out.
    pub fn finish(mut self) -> Stats {
        self.stats.idle_held_at_end = self.idle_open;
        for i in 0..self.slots.len() {
            if let Some(c) = self.slots[i].conn.as_mut() {
                if c.in_fetch {
                    c.in_fetch = false;
                    self.in_flight -= 1;
                    self.shared.current.fetch_sub(1, Relaxed);
                }
            }
            self.close(i);
        }
        self.stats
    }
}

/// A whole worker thread: idle setup, wait for the others, run, report.
pub fn thread_main(
    plan: &Plan,
    shared: &Shared,
    tp: ThreadPlan,
    barrier: &Barrier,
) -> Result<ThreadResult, String> {
    let mut worker = match Worker::new(plan, shared, tp) {
        Ok(w) => Some(w),
        Err(e) => {
            shared.stop.store(true, Relaxed);
            barrier.wait();
            shared.threads_done.fetch_add(1, Relaxed);
            return Err(format!("cannot create epoll instance: {e}"));
        }
    };
    let setup = worker.as_mut().map(|w| w.setup_idle()).transpose();
    barrier.wait();
    let result = match setup {
        Err(e) => Err(format!("event loop failed: {e}")),
        Ok(_) => {
            let mut w = worker.take().expect("worker exists");
            let started = Instant::now();
            let (u0, s0) = sys::thread_cpu_seconds();
            match w.run(started) {
                Ok(()) => {
                    // The run ends here; closing the connections is not part of it.
                    let ended = Instant::now();
                    let (u1, s1) = sys::thread_cpu_seconds();
                    let mut stats = w.finish();
                    stats.cpu_user_secs = u1 - u0;
                    stats.cpu_system_secs = s1 - s0;
                    Ok(ThreadResult {
                        started,
                        ended,
                        stats,
                    })
                }
                Err(e) => Err(format!("event loop failed: {e}")),
            }
        }
    };
    if result.is_err() {
        shared.stop.store(true, Relaxed);
    }
    shared.threads_done.fetch_add(1, Relaxed);
    result
}
