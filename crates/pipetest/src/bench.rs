//! Pipes, tokens and the pass logic every model shares.
//!
//! This module talks to the kernel through raw syscalls (`pipe2`, `read`,
//! `write`, `fcntl`, `ioctl`, `getrlimit`/`setrlimit`), hence its `unsafe`
//! blocks. None of them hands a buffer to the kernel beyond the call itself.
//!
//! The token ring: pipe `i` forwards to pipe `(i + 1) % fds`. `tokens` tokens
//! are seeded at evenly spaced pipes. A *pass* is one token read from a ready
//! pipe and written to the next pipe. Once `passes` passes are done, tokens
//! that arrive are parked instead of forwarded; the run ends when every token
//! is parked, and then every token is checked: ids distinct and complete,
//! contents intact, hop counters summing to the pass count, every pipe empty.

use anyhow::{bail, Context as _, Result};
use serde::Serialize;
use std::io;
use std::os::fd::RawFd;
use std::time::{Duration, Instant};

/// Most pipes one run may open (each is two descriptors).
pub const MAX_FDS: usize = 100_000;
/// Most tokens in flight.
pub const MAX_TOKENS: usize = 4096;
/// Largest message (token) size in bytes.
pub const MAX_SIZE: usize = 1 << 20;
/// Most passes one run may ask for.
pub const MAX_PASSES: u64 = 1_000_000_000;
/// Bound on the per-pipe staging buffers (`fds * size`).
pub const MAX_STAGE_BYTES: usize = 512 << 20;
/// Descriptors kept aside for stdio, epoll, io_uring, the test harness.
pub const RESERVED_FDS: usize = 64;
/// Default time without any progress after which a run is declared stalled
/// (single process, tokens always in pipes: readiness is never late).
pub const DEFAULT_STALL: Duration = Duration::from_secs(2);

/// The I/O model under test.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Model {
    /// `select()` over every descriptor (limited to FD_SETSIZE = 1024).
    Select,
    /// `poll()` over every descriptor, then `read` and `write`.
    Poll,
    /// `epoll_wait()` (level-triggered; `--edge` for edge-triggered).
    Epoll,
    /// Linux native AIO `IOCB_CMD_POLL` via `io_submit`/`io_getevents`.
    AioPoll,
    /// io_uring `POLL_ADD`, one-shot (`--multishot` for multishot).
    UringPoll,
    /// io_uring `READ` posted ahead on every pipe; token `write()` afterwards.
    UringRead,
}

impl Model {
    pub fn name(self) -> &'static str {
        match self {
            Model::Select => "select",
            Model::Poll => "poll",
            Model::Epoll => "epoll",
            Model::AioPoll => "aio-poll",
            Model::UringPoll => "uring-poll",
            Model::UringRead => "uring-read",
        }
    }
}

/// Where a token goes after it is read from pipe `i`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Route {
    /// To pipe `(i + 1) % fds`: every pipe carries the token in turn, as in
    /// the 2002 pipetest, whose tokens strode across all pipes. The kernel
    /// objects of every pipe are touched, so cache footprint grows with fds.
    Ring,
    /// To pipe `i ^ 1`: each token bounces inside its own pair of pipes and
    /// all other pipes stay idle (watched, never ready), isolating the event
    /// model's cost per idle descriptor from cache footprint.
    Pair,
}

impl Route {
    pub fn name(self) -> &'static str {
        match self {
            Route::Ring => "ring",
            Route::Pair => "pair",
        }
    }
}

/// One run's parameters.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Config {
    pub model: Model,
    /// epoll only: edge-triggered.
    pub edge: bool,
    /// uring-poll only: multishot `POLL_ADD`.
    pub multishot: bool,
    /// Token route.
    pub route: Route,
    /// Number of pipes.
    pub fds: usize,
    /// Tokens in flight.
    pub tokens: usize,
    /// Token (message) size in bytes.
    pub size: usize,
    /// Passes to time.
    pub passes: u64,
    /// No progress for this long is an error.
    #[serde(skip)]
    pub stall: Duration,
}

impl Config {
    pub fn new(model: Model, fds: usize, tokens: usize, size: usize, passes: u64) -> Config {
        Config {
            model,
            edge: false,
            multishot: false,
            route: Route::Ring,
            fds,
            tokens,
            size,
            passes,
            stall: DEFAULT_STALL,
        }
    }

    /// A short label: the model plus its variant flag, and `/pair` for the
    /// pair route.
    pub fn label(&self) -> String {
        let base: String = match (self.model, self.edge, self.multishot) {
            (Model::Epoll, true, _) => "epoll-et".into(),
            (Model::UringPoll, _, true) => "uring-poll-multishot".into(),
            (m, _, _) => m.name().into(),
        };
        match self.route {
            Route::Ring => base,
            Route::Pair => format!("{base}/pair"),
        }
    }

    pub fn validate(&self) -> Result<()> {
        if self.fds == 0 || self.fds > MAX_FDS {
            bail!("--fds must be 1..={MAX_FDS}, got {}", self.fds);
        }
        if self.tokens == 0 || self.tokens > MAX_TOKENS {
            bail!("--tokens must be 1..={MAX_TOKENS}, got {}", self.tokens);
        }
        if self.size == 0 || self.size > MAX_SIZE {
            bail!("--size must be 1..={MAX_SIZE}, got {}", self.size);
        }
        if self.size < 4 && (self.tokens as u64) > 1u64 << (8 * self.size) {
            bail!(
                "--size {} can only tell {} tokens apart, got --tokens {}",
                self.size,
                1u64 << (8 * self.size),
                self.tokens
            );
        }
        if self.passes == 0 || self.passes > MAX_PASSES {
            bail!("--passes must be 1..={MAX_PASSES}, got {}", self.passes);
        }
        if self.fds.saturating_mul(self.size) > MAX_STAGE_BYTES {
            bail!(
                "--fds x --size = {} bytes of buffers exceeds the {MAX_STAGE_BYTES}-byte limit",
                self.fds.saturating_mul(self.size)
            );
        }
        if self.edge && self.model != Model::Epoll {
            bail!("--edge applies to --model epoll only");
        }
        if self.multishot && self.model != Model::UringPoll {
            bail!("--multishot applies to --model uring-poll only");
        }
        if self.model == Model::Select && 2 * self.fds + RESERVED_FDS > libc::FD_SETSIZE {
            bail!(
                "select handles descriptors below FD_SETSIZE={} only: --fds must be at most {}",
                libc::FD_SETSIZE,
                (libc::FD_SETSIZE - RESERVED_FDS) / 2
            );
        }
        Ok(())
    }
}

/// What one run measured.
#[derive(Debug, Clone, Serialize)]
pub struct RunResult {
    pub label: String,
    pub fds: usize,
    pub tokens: usize,
    pub size: usize,
    pub passes: u64,
    /// Wall-clock time of the timed passes.
    pub elapsed_s: f64,
    /// CPU time (user + system) this thread spent on them.
    pub cpu_s: f64,
    /// Passes per wall-clock second.
    pub passes_per_sec: f64,
    /// Passes per second of this thread's CPU time: what the paper's runs
    /// at "100% CPU usage" measured, robust to sharing the machine.
    pub passes_per_cpu_sec: f64,
    /// Tokens found, checked and accounted for at the end.
    pub tokens_verified: usize,
    /// Sum of the tokens' hop counters (equals `passes` when size >= 8).
    pub hops_counted: Option<u64>,
}

/// A deliberate fault, so tests can show that verification catches it.
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    None,
    /// Seed one token twice.
    ExtraToken,
    /// Seed one token fewer than configured.
    LostToken,
    /// Flip the last byte of token 0 at seeding.
    Corrupt,
}

fn errno() -> io::Error {
    io::Error::last_os_error()
}

/// Raise the soft `RLIMIT_NOFILE` to the hard limit and, if `want` is higher
/// still, try to raise both (works as root up to `fs.nr_open`). Returns the
/// resulting soft limit, which may be below `want`.
pub fn raise_nofile(want: usize) -> Result<usize> {
    let mut rl = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one struct into a live local.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut rl) } != 0 {
        return Err(errno()).context("getrlimit(RLIMIT_NOFILE)");
    }
    let want = want as libc::rlim_t;
    if rl.rlim_max < want {
        let up = libc::rlimit {
            rlim_cur: want,
            rlim_max: want,
        };
        // SAFETY: setrlimit reads one struct from a live local.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &up) } == 0 {
            return Ok(want as usize);
        }
    }
    if rl.rlim_cur < rl.rlim_max {
        let up = libc::rlimit {
            rlim_cur: rl.rlim_max,
            rlim_max: rl.rlim_max,
        };
        // SAFETY: setrlimit reads one struct from a live local.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &up) } != 0 {
            return Err(errno()).context("setrlimit(RLIMIT_NOFILE)");
        }
        rl.rlim_cur = rl.rlim_max;
    }
    Ok(rl.rlim_cur.min(usize::MAX as libc::rlim_t) as usize)
}

/// Most pipes a soft descriptor limit of `limit` allows.
pub fn max_pipes_for(limit: usize) -> usize {
    limit.saturating_sub(RESERVED_FDS) / 2
}

/// The pipes, closed on drop.
pub(crate) struct Pipes {
    pub r: Vec<RawFd>,
    pub w: Vec<RawFd>,
}

impl Pipes {
    /// `n` pipes; write ends are non-blocking, read ends too unless
    /// `blocking_read` (io_uring must see a blocking file to arm its own
    /// poll instead of failing a read with `EAGAIN`).
    fn new(n: usize, blocking_read: bool) -> Result<Pipes> {
        let mut p = Pipes {
            r: Vec::with_capacity(n),
            w: Vec::with_capacity(n),
        };
        for k in 0..n {
            let mut fds = [0 as RawFd; 2];
            let flags = if blocking_read {
                libc::O_CLOEXEC
            } else {
                libc::O_CLOEXEC | libc::O_NONBLOCK
            };
            // SAFETY: pipe2 writes two descriptors into a live array.
            if unsafe { libc::pipe2(fds.as_mut_ptr(), flags) } != 0 {
                let e = errno();
                let hint = if e.raw_os_error() == Some(libc::EMFILE) {
                    " (descriptor limit reached; see RLIMIT_NOFILE)"
                } else {
                    ""
                };
                return Err(e).with_context(|| format!("pipe2 for pipe {k} of {n}{hint}"));
            }
            p.r.push(fds[0]);
            p.w.push(fds[1]);
            if blocking_read {
                // SAFETY: fcntl on a descriptor we just created and own.
                let rc = unsafe { libc::fcntl(fds[1], libc::F_SETFL, libc::O_NONBLOCK) };
                if rc != 0 {
                    return Err(errno()).context("fcntl(F_SETFL, O_NONBLOCK)");
                }
            }
        }
        Ok(p)
    }

    /// Make sure any one pipe can hold `bytes` (all tokens may pile up in
    /// one pipe), growing pipes with `F_SETPIPE_SZ` where needed.
    fn ensure_capacity(&self, bytes: usize) -> Result<()> {
        for (k, &fd) in self.w.iter().enumerate() {
            // SAFETY: fcntl on a descriptor we own; no pointers involved.
            let cap = unsafe { libc::fcntl(fd, libc::F_GETPIPE_SZ) };
            if cap < 0 {
                return Err(errno()).context("fcntl(F_GETPIPE_SZ)");
            }
            if (cap as usize) < bytes {
                // SAFETY: as above.
                let rc = unsafe { libc::fcntl(fd, libc::F_SETPIPE_SZ, bytes as libc::c_int) };
                if rc < 0 {
                    return Err(errno()).with_context(|| {
                        format!(
                            "pipe {k} holds {cap} bytes but --tokens x --size needs {bytes}, \
                             and F_SETPIPE_SZ failed (see /proc/sys/fs/pipe-max-size and \
                             pipe-user-pages-soft)"
                        )
                    });
                }
            }
        }
        Ok(())
    }

    /// Bytes waiting in pipe `k`.
    fn queued(&self, k: usize) -> Result<usize> {
        let mut n: libc::c_int = 0;
        // SAFETY: FIONREAD writes one int into a live local.
        if unsafe { libc::ioctl(self.r[k], libc::FIONREAD, &mut n) } != 0 {
            return Err(errno()).context("ioctl(FIONREAD)");
        }
        Ok(n as usize)
    }
}

impl Drop for Pipes {
    fn drop(&mut self) {
        for &fd in self.r.iter().chain(self.w.iter()) {
            // SAFETY: closing descriptors this struct created and owns.
            unsafe { libc::close(fd) };
        }
    }
}

/// Byte `j` of token `id`'s filler pattern.
fn pattern(id: u32, j: usize) -> u8 {
    (id as u8).wrapping_mul(31) ^ (j as u8).wrapping_mul(7) ^ ((j >> 8) as u8) ^ 0x5a
}

/// Where the filler starts: after the id (first up to 4 bytes) and, for
/// tokens of 8 bytes or more, the hop counter (bytes 4..8).
fn filler_start(size: usize) -> usize {
    if size >= 8 {
        8
    } else {
        size.min(4)
    }
}

pub(crate) fn fill_token(buf: &mut [u8], id: u32) {
    let idb = id.to_le_bytes();
    let k = buf.len().min(4);
    buf[..k].copy_from_slice(&idb[..k]);
    if buf.len() >= 8 {
        buf[4..8].copy_from_slice(&0u32.to_le_bytes());
    }
    for j in filler_start(buf.len())..buf.len() {
        buf[j] = pattern(id, j);
    }
}

/// Check one token; returns its id and hop count (if it has one).
pub(crate) fn check_token(buf: &[u8]) -> Result<(u32, Option<u32>)> {
    let mut idb = [0u8; 4];
    let k = buf.len().min(4);
    idb[..k].copy_from_slice(&buf[..k]);
    let id = u32::from_le_bytes(idb);
    let hops = if buf.len() >= 8 {
        Some(u32::from_le_bytes(buf[4..8].try_into().expect("4 bytes")))
    } else {
        None
    };
    for (j, &b) in buf.iter().enumerate().skip(filler_start(buf.len())) {
        if b != pattern(id, j) {
            bail!(
                "token {id}: byte {j} is {b:#04x}, expected {:#04x}: contents corrupted",
                pattern(id, j)
            );
        }
    }
    Ok((id, hops))
}

/// This thread's CPU time (`CLOCK_THREAD_CPUTIME_ID`: user + system).
pub(crate) fn thread_cpu_time() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec into a live local.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return Duration::ZERO;
    }
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

fn now() -> (Instant, Duration) {
    (Instant::now(), thread_cpu_time())
}

/// Write all of `buf` to the non-blocking pipe `fd`. Capacity was checked at
/// setup, so a short write means the token accounting is broken.
fn write_token(fd: RawFd, buf: &[u8]) -> Result<()> {
    loop {
        // SAFETY: write reads `buf.len()` bytes from a live slice during the call.
        let n = unsafe { libc::write(fd, buf.as_ptr().cast(), buf.len()) };
        if n == buf.len() as isize {
            return Ok(());
        }
        if n < 0 {
            let e = errno();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e).context("write to pipe (pipe full: a token was duplicated?)");
        }
        bail!(
            "short write ({n} of {} bytes): pipe full, token accounting broken",
            buf.len()
        );
    }
}

/// Counters, the pipes and the parked tokens.
pub(crate) struct Core {
    pub n: usize,
    route: Route,
    pub size: usize,
    pub tokens: usize,
    pub pipes: Pipes,
    pub passes: u64,
    target: u64,
    parked: Vec<u8>,
    parked_count: usize,
    /// Wall clock and this thread's CPU time when the clock started/stopped.
    start: Option<(Instant, Duration)>,
    end: Option<(Instant, Duration)>,
    pub stall: Duration,
}

impl Core {
    /// Every token has come home.
    pub fn done(&self) -> bool {
        self.parked_count >= self.tokens
    }

    /// A whole token from pipe `i` sits in `slot`: forward it to the next
    /// pipe (one pass) or, once the target is met, park it.
    pub fn deliver(&mut self, i: usize, slot: &mut [u8]) -> Result<()> {
        if self.passes < self.target {
            if slot.len() >= 8 {
                let h = u32::from_le_bytes(slot[4..8].try_into().expect("4 bytes"));
                slot[4..8].copy_from_slice(&h.wrapping_add(1).to_le_bytes());
            }
            let next = self.next(i);
            write_token(self.pipes.w[next], slot)?;
            self.passes += 1;
            if self.passes == self.target {
                self.end = Some(now());
            }
        } else {
            if self.parked_count >= self.tokens {
                bail!(
                    "more than {} tokens came back: a token was duplicated",
                    self.tokens
                );
            }
            self.parked.extend_from_slice(slot);
            self.parked_count += 1;
        }
        Ok(())
    }

    /// The pipe a token read from pipe `i` goes to.
    fn next(&self, i: usize) -> usize {
        match self.route {
            Route::Ring => {
                if i + 1 == self.n {
                    0
                } else {
                    i + 1
                }
            }
            Route::Pair => {
                if i ^ 1 < self.n {
                    i ^ 1
                } else {
                    i
                }
            }
        }
    }

    /// The pipe seed token `k` starts in: evenly spaced; for the pair route,
    /// the even pipe of the pair in the middle of the token's share.
    fn seed_pipe(&self, k: usize) -> usize {
        match self.route {
            Route::Ring => k * self.n / self.tokens,
            Route::Pair => ((k * self.n + self.n / 2) / self.tokens) & !1,
        }
    }

    pub fn stalled(&self) -> anyhow::Error {
        anyhow::anyhow!(
            "stalled: no pipe became ready for {:?} after {} passes and {} of {} tokens home \
             (a token was lost)",
            self.stall,
            self.passes,
            self.parked_count,
            self.tokens
        )
    }
}

/// Everything a run needs: the core plus staging buffers for the models
/// that read with `read(2)`.
pub(crate) struct Bench {
    pub core: Core,
    /// `n * size` bytes: pipe `i`'s partial token lives at `i * size`.
    stage: Vec<u8>,
    /// Bytes of a partial token already read from each pipe.
    pub have: Vec<usize>,
}

impl Bench {
    pub fn new(cfg: &Config, blocking_read: bool) -> Result<Bench> {
        cfg.validate()?;
        let pipes = Pipes::new(cfg.fds, blocking_read)?;
        pipes.ensure_capacity(cfg.tokens * cfg.size)?;
        Ok(Bench {
            core: Core {
                n: cfg.fds,
                route: cfg.route,
                size: cfg.size,
                tokens: cfg.tokens,
                pipes,
                passes: 0,
                target: cfg.passes,
                parked: Vec::with_capacity(cfg.tokens * cfg.size),
                parked_count: 0,
                start: None,
                end: None,
                stall: cfg.stall,
            },
            stage: vec![0u8; cfg.fds * cfg.size],
            have: vec![0; cfg.fds],
        })
    }

    /// Write the seed tokens (evenly spaced, see `Core::seed_pipe`) and start
    /// the clock.
    pub fn seed(&mut self, fault: Fault) -> Result<()> {
        let c = &mut self.core;
        let mut buf = vec![0u8; c.size];
        let count = if fault == Fault::LostToken {
            c.tokens - 1
        } else {
            c.tokens
        };
        for k in 0..count {
            fill_token(&mut buf, k as u32);
            if fault == Fault::Corrupt && k == 0 {
                let last = buf.len() - 1;
                buf[last] ^= 0xff;
            }
            let pipe = c.seed_pipe(k).min(c.n - 1);
            write_token(c.pipes.w[pipe], &buf)?;
            if fault == Fault::ExtraToken && k == 0 {
                write_token(c.pipes.w[pipe], &buf)?;
            }
        }
        c.start = Some(now());
        Ok(())
    }

    /// Read from the non-blocking pipe `i` after it was reported readable.
    /// Reads one whole token, or with `drain` (edge-triggered and multishot
    /// models) keeps reading until `EAGAIN`. Reading is bounded by the token
    /// count so that a one-pipe ring (which writes back into the same pipe)
    /// returns to the event loop; its own write raises a new event.
    pub fn read_ready(&mut self, i: usize, drain: bool) -> Result<()> {
        let size = self.core.size;
        let mut delivered = 0;
        loop {
            let have = self.have[i];
            let slot = &mut self.stage[i * size..(i + 1) * size];
            // SAFETY: read writes at most `size - have` bytes into the live,
            // exclusively borrowed tail of this pipe's slot, during the call.
            let n = unsafe {
                libc::read(
                    self.core.pipes.r[i],
                    slot[have..].as_mut_ptr().cast(),
                    size - have,
                )
            };
            if n < 0 {
                let e = errno();
                match e.kind() {
                    io::ErrorKind::WouldBlock => return Ok(()),
                    io::ErrorKind::Interrupted => continue,
                    _ => return Err(e).with_context(|| format!("read from pipe {i}")),
                }
            }
            if n == 0 {
                bail!("pipe {i}: unexpected end of file");
            }
            self.have[i] += n as usize;
            if self.have[i] == size {
                self.have[i] = 0;
                self.core.deliver(i, slot)?;
                delivered += 1;
                if !drain || delivered >= self.core.tokens {
                    return Ok(());
                }
            }
        }
    }

    /// After the loop: check that every token came home intact, exactly
    /// once, and that nothing is left in any pipe.
    pub fn finish(self, label: String) -> Result<RunResult> {
        let c = &self.core;
        let (start, end) = match (c.start, c.end) {
            (Some(s), Some(e)) => (s, e),
            _ => bail!("run ended before {} passes ({} done)", c.target, c.passes),
        };
        if c.parked_count != c.tokens {
            bail!("{} of {} tokens came back", c.parked_count, c.tokens);
        }
        for (i, &h) in self.have.iter().enumerate() {
            if h != 0 {
                bail!("pipe {i}: {h} bytes of a partial token left over");
            }
        }
        for k in 0..c.n {
            let q = c.pipes.queued(k)?;
            if q != 0 {
                bail!(
                    "pipe {k} still holds {q} bytes after all {} tokens came back: \
                     a token was duplicated",
                    c.tokens
                );
            }
        }
        let mut seen = vec![false; c.tokens];
        let mut hops_sum: Option<u64> = if c.size >= 8 { Some(0) } else { None };
        for tok in c.parked.chunks_exact(c.size) {
            let (id, hops) = check_token(tok)?;
            let id = id as usize;
            if id >= c.tokens {
                bail!(
                    "token id {id} out of range 0..{}: contents corrupted",
                    c.tokens
                );
            }
            if seen[id] {
                bail!("token {id} came back twice: duplicated");
            }
            seen[id] = true;
            if let (Some(s), Some(h)) = (hops_sum.as_mut(), hops) {
                *s += u64::from(h);
            }
        }
        if let Some(s) = hops_sum {
            if s != c.passes {
                bail!(
                    "tokens' hop counters sum to {s} but {} passes were made",
                    c.passes
                );
            }
        }
        let elapsed = end.0.duration_since(start.0).as_secs_f64().max(1e-9);
        let cpu = end.1.saturating_sub(start.1).as_secs_f64().max(1e-9);
        Ok(RunResult {
            label,
            fds: c.n,
            tokens: c.tokens,
            size: c.size,
            passes: c.passes,
            elapsed_s: elapsed,
            cpu_s: cpu,
            passes_per_sec: c.passes as f64 / elapsed,
            passes_per_cpu_sec: c.passes as f64 / cpu,
            tokens_verified: c.tokens,
            hops_counted: hops_sum,
        })
    }
}
