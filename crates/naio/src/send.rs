//! The send side. Memory senders (`send`, `epoll`, `uring-send`,
//! `uring-send-zc`) send the source file's bytes from the in-memory copy;
//! file senders (`sendfile`, `uring-splice`, `uring-read-send`,
//! `linux-aio-sendfile`, in `send_aio.rs`) take them from the file itself. Socket `k` carries the stream described in
//! `source.rs`; every message is at most `size` bytes and ends on a
//! multiple of `size`.

use std::collections::VecDeque;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use io_uring::{cqueue, opcode, types, IoUring};

use crate::recv::{new_ring, RING_ENTRIES};
use crate::side::{past, Meter, SendMode, ThreadOut, ZcStats};
use crate::source::Source;
use crate::sys;

/// `IORING_SEND_ZC_REPORT_USAGE` (sqe->ioprio of SEND_ZC): the notification
/// reports whether the kernel fell back to copying.
const SEND_ZC_REPORT_USAGE: u16 = 8;
/// `IORING_NOTIF_USAGE_ZC_COPIED`, in the notification's `res`.
const NOTIF_USAGE_ZC_COPIED: u32 = 1 << 31;
/// SEND_ZC: bytes per socket whose notification may be outstanding (the
/// buffers a server would have to hold); above it the sender waits.
pub const ZC_MAX_UNNOTIFIED: u64 = 8 << 20;
/// Default pipe capacity asked for by `uring-splice` (raised to the message size).
const PIPE_MIN: usize = 64 << 10;
pub(crate) const PAGE: usize = 4096;
pub(crate) const EPOLL_BATCH: usize = 64;
const DRAIN_LIMIT: Duration = Duration::from_secs(5);

/// What a sender thread needs.
pub struct Job<'a> {
    pub mode: SendMode,
    pub size: usize,
    /// Bytes to send per socket (a multiple of `size`).
    pub per_socket: u64,
    pub time_limit: Option<Duration>,
    pub source: &'a Source,
}

/// One socket's progress.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Stream {
    pub(crate) k: usize,
    pub(crate) fd: RawFd,
    /// Bytes handed to the kernel.
    pub(crate) pos: u64,
    /// Bytes to send; lowered to `pos` when the time limit stops the stream.
    pub(crate) total: u64,
    pub(crate) done: bool,
}

impl Stream {
    pub(crate) fn new(k: usize, fd: RawFd, total: u64) -> Stream {
        Stream {
            k,
            fd,
            pos: 0,
            total,
            done: false,
        }
    }

    /// At a message boundary past the deadline: end the stream here.
    pub(crate) fn maybe_stop(&mut self, size: usize, deadline: Option<Instant>) {
        // `size` is a power of two.
        if self.pos & (size as u64 - 1) == 0 && self.pos < self.total && past(deadline) {
            self.total = self.pos;
        }
    }

    pub(crate) fn finished(&self) -> bool {
        self.pos >= self.total
    }
}

fn sent_of(streams: &[Stream]) -> Vec<(usize, u64)> {
    streams.iter().map(|s| (s.k, s.pos)).collect()
}

/// Runs sender `job.mode` on the sockets `fds` ((index, fd) pairs).
pub fn run(job: &Job<'_>, m: &mut Meter<'_>, fds: &[(usize, RawFd)]) -> anyhow::Result<ThreadOut> {
    match job.mode {
        SendMode::Send => blocking(job, m, fds, false),
        SendMode::Sendfile => blocking(job, m, fds, true),
        SendMode::Epoll => epoll(job, m, fds),
        SendMode::UringSend => uring_send(job, m, fds, false),
        SendMode::UringSendZc => uring_send(job, m, fds, true),
        SendMode::UringSplice => uring_splice(job, m, fds),
        SendMode::UringReadSend => uring_read_send(job, m, fds),
        SendMode::LinuxAioSendfile => crate::send_aio::aio_sendfile(job, m, fds),
    }
}

fn retry<T>(mut f: impl FnMut() -> io::Result<T>) -> io::Result<T> {
    loop {
        match f() {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            r => return r,
        }
    }
}

fn blocking(
    job: &Job<'_>,
    m: &mut Meter<'_>,
    fds: &[(usize, RawFd)],
    from_file: bool,
) -> anyhow::Result<ThreadOut> {
    let &[(k, fd)] = fds else {
        bail!("blocking senders take one socket per thread");
    };
    let src = job.source;
    let file = if from_file {
        Some(std::fs::File::open(&src.path).context("opening the source file")?)
    } else {
        None
    };
    let mut s = Stream::new(k, fd, job.per_socket);
    let start = m.start();
    let deadline = job.time_limit.map(|l| start + l);
    while !s.finished() {
        s.maybe_stop(job.size, deadline);
        if s.finished() {
            break;
        }
        let off = src.offset(k, s.pos);
        let len = src.msg_len(k, s.pos, s.total, job.size);
        let n = match &file {
            None => retry(|| sys::send(fd, &src.content[off..off + len])).context("send")?,
            Some(f) => {
                retry(|| sys::sendfile(fd, f.as_raw_fd(), off as u64, len)).context("sendfile")?
            }
        };
        if n == 0 {
            bail!("zero-length write at stream position {}", s.pos);
        }
        s.pos += n as u64;
    }
    sys::shutdown(fd, libc::SHUT_WR).context("shutdown")?;
    m.stop();
    Ok(ThreadOut {
        sent: vec![(k, s.pos)],
        ..Default::default()
    })
}

fn epoll(job: &Job<'_>, m: &mut Meter<'_>, fds: &[(usize, RawFd)]) -> anyhow::Result<ThreadOut> {
    let src = job.source;
    let ep = sys::Epoll::new()?;
    let mut streams: Vec<Stream> = fds
        .iter()
        .map(|&(k, fd)| Stream::new(k, fd, job.per_socket))
        .collect();
    for (i, s) in streams.iter().enumerate() {
        sys::set_nonblocking(s.fd, true)?;
        ep.add(s.fd, libc::EPOLLOUT as u32, i as u64)?;
    }
    let mut events = vec![sys::epoll_event_zero(); EPOLL_BATCH];
    let mut open = streams.len();
    let start = m.start();
    let deadline = job.time_limit.map(|l| start + l);
    while open > 0 {
        let evs = ep.wait(&mut events, -1)?;
        for ev in evs {
            let s = &mut streams[ev.u64 as usize];
            loop {
                s.maybe_stop(job.size, deadline);
                if s.finished() {
                    ep.delete(s.fd)?;
                    sys::shutdown(s.fd, libc::SHUT_WR).context("shutdown")?;
                    s.done = true;
                    open -= 1;
                    break;
                }
                let off = src.offset(s.k, s.pos);
                let len = src.msg_len(s.k, s.pos, s.total, job.size);
                match sys::send(s.fd, &src.content[off..off + len]) {
                    Ok(n) => s.pos += n as u64,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(e).context("send"),
                }
            }
        }
    }
    m.stop();
    Ok(ThreadOut {
        sent: sent_of(&streams),
        ..Default::default()
    })
}

fn push(ring: &mut IoUring, e: &io_uring::squeue::Entry) -> anyhow::Result<()> {
    // SAFETY: callers only push entries whose buffers outlive the request
    // (see the SAFETY notes at each call site).
    unsafe {
        if ring.submission().push(e).is_err() {
            ring.submit()?;
            ring.submission()
                .push(e)
                .map_err(|_| anyhow::anyhow!("submission queue full"))?;
        }
    }
    Ok(())
}

/// After an error: shut the sockets down so pending requests complete and
/// reap them, for at most DRAIN_LIMIT. `pending` counts CQEs still due
/// (results plus SEND_ZC notifications). Returns true if all arrived.
fn drain(ring: &mut IoUring, fds: &[(usize, RawFd)], mut pending: usize) -> bool {
    for &(_, fd) in fds {
        let _ = sys::shutdown(fd, libc::SHUT_RDWR);
    }
    let until = Instant::now() + DRAIN_LIMIT;
    while pending > 0 && Instant::now() < until {
        let ts = types::Timespec::new().nsec(10_000_000);
        let args = types::SubmitArgs::new().timespec(&ts);
        let _ = ring.submitter().submit_with_args(1, &args);
        for cqe in ring.completion() {
            // A result with F_MORE is followed by a notification.
            if !cqueue::more(cqe.flags()) {
                pending = pending.saturating_sub(1);
            }
        }
    }
    pending == 0
}

/// io_uring SEND or SEND_ZC, one request in flight per socket.
fn uring_send(
    job: &Job<'_>,
    m: &mut Meter<'_>,
    fds: &[(usize, RawFd)],
    zc: bool,
) -> anyhow::Result<ThreadOut> {
    let src = job.source;
    let mut ring = new_ring(RING_ENTRIES)?;
    let mut streams: Vec<Stream> = fds
        .iter()
        .map(|&(k, fd)| Stream::new(k, fd, job.per_socket))
        .collect();
    // Per socket: is a request in flight; bytes awaiting a notification,
    // by request sequence number.
    let mut busy = vec![false; streams.len()];
    let mut unnotified: Vec<VecDeque<(u64, u64)>> = vec![VecDeque::new(); streams.len()];
    let mut held = vec![0u64; streams.len()];
    let mut seq = 0u64;
    let mut stats = ZcStats::default();
    let mut inflight = 0usize; // results and notifications still due
    let mut open = streams.len();
    let r = (|| -> anyhow::Result<()> {
        let start = m.start();
        let deadline = job.time_limit.map(|l| start + l);
        loop {
            // Issue what can be issued.
            for i in 0..streams.len() {
                let s = &mut streams[i];
                if busy[i] || s.done {
                    continue;
                }
                s.maybe_stop(job.size, deadline);
                if s.finished() {
                    sys::shutdown(s.fd, libc::SHUT_WR).context("shutdown")?;
                    s.done = true;
                    open -= 1;
                    continue;
                }
                if zc && held[i] >= ZC_MAX_UNNOTIFIED {
                    continue; // wait for notifications
                }
                let off = src.offset(s.k, s.pos);
                let len = src.msg_len(s.k, s.pos, s.total, job.size);
                let ptr = src.content[off..off + len].as_ptr();
                seq += 1;
                let ud = (seq << 8) | i as u64;
                let e = if zc {
                    opcode::SendZc::new(types::Fd(s.fd), ptr, len as u32)
                        .flags(libc::MSG_NOSIGNAL)
                        .zc_flags(SEND_ZC_REPORT_USAGE)
                        .build()
                        .user_data(ud)
                } else {
                    opcode::Send::new(types::Fd(s.fd), ptr, len as u32)
                        .flags(libc::MSG_NOSIGNAL)
                        .build()
                        .user_data(ud)
                };
                // SAFETY: the bytes are in the Source, which outlives this
                // thread; SEND_ZC pages stay referenced until the
                // notification, which we wait for before returning.
                push(&mut ring, &e)?;
                busy[i] = true;
                inflight += 1;
            }
            if open == 0 && inflight == 0 {
                break;
            }
            ring.submit_and_wait(1)?;
            let cqes: Vec<(u64, i32, u32)> = ring
                .completion()
                .map(|c| (c.user_data(), c.result(), c.flags()))
                .collect();
            for (ud, res, flags) in cqes {
                let i = (ud & 0xff) as usize;
                let rseq = ud >> 8;
                if cqueue::notif(flags) {
                    stats.notifs += 1;
                    if res as u32 & NOTIF_USAGE_ZC_COPIED != 0 {
                        stats.copied += 1;
                    }
                    if let Some(p) = unnotified[i].iter().position(|&(q, _)| q == rseq) {
                        if let Some((_, n)) = unnotified[i].remove(p) {
                            held[i] -= n;
                        }
                    }
                    inflight -= 1;
                    continue;
                }
                busy[i] = false;
                inflight -= 1;
                if cqueue::more(flags) {
                    stats.sends += 1;
                    inflight += 1;
                    unnotified[i].push_back((rseq, res.max(0) as u64));
                    held[i] += res.max(0) as u64;
                }
                if res == -libc::EINTR || res == -libc::EAGAIN {
                    continue; // reissued above
                }
                if res <= 0 {
                    bail!(
                        "{}: {}",
                        if zc { "SEND_ZC" } else { "SEND" },
                        if res == 0 {
                            "zero-length send".to_string()
                        } else {
                            io::Error::from_raw_os_error(-res).to_string()
                        }
                    );
                }
                streams[i].pos += res as u64;
            }
        }
        m.stop();
        Ok(())
    })();
    let clean = r.is_ok() || inflight == 0 || drain(&mut ring, fds, inflight);
    drop(ring);
    if !clean {
        bail!(
            "{:#}; requests were still in flight after {DRAIN_LIMIT:?}",
            r.unwrap_err()
        );
    }
    r?;
    Ok(ThreadOut {
        sent: sent_of(&streams),
        zc: stats,
        ..Default::default()
    })
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SplicePhase {
    Idle,
    FileToPipe,
    PipeToSock,
}

/// io_uring SPLICE from the file into a pipe, then from the pipe into the
/// socket (io_uring runs both on io-wq workers).
fn uring_splice(
    job: &Job<'_>,
    m: &mut Meter<'_>,
    fds: &[(usize, RawFd)],
) -> anyhow::Result<ThreadOut> {
    let src = job.source;
    let file = std::fs::File::open(&src.path).context("opening the source file")?;
    let mut pipes: Vec<(OwnedFd, OwnedFd, usize)> = Vec::new();
    for _ in fds {
        pipes.push(sys::pipe_with_capacity(job.size.max(PIPE_MIN)).context("pipe")?);
    }
    let mut ring = new_ring(RING_ENTRIES)?;
    let mut streams: Vec<Stream> = fds
        .iter()
        .map(|&(k, fd)| Stream::new(k, fd, job.per_socket))
        .collect();
    let mut phase = vec![SplicePhase::Idle; streams.len()];
    let mut fill = vec![0usize; streams.len()];
    let mut sent = vec![0u64; streams.len()];
    let mut inflight = 0usize;
    let mut open = streams.len();
    let r = (|| -> anyhow::Result<()> {
        let start = m.start();
        let deadline = job.time_limit.map(|l| start + l);
        loop {
            for i in 0..streams.len() {
                let s = &mut streams[i];
                if phase[i] != SplicePhase::Idle || s.done {
                    continue;
                }
                let e = if fill[i] > 0 {
                    phase[i] = SplicePhase::PipeToSock;
                    opcode::Splice::new(
                        types::Fd(pipes[i].0.as_raw_fd()),
                        -1,
                        types::Fd(s.fd),
                        -1,
                        fill[i] as u32,
                    )
                    .build()
                } else {
                    s.maybe_stop(job.size, deadline);
                    if s.finished() {
                        sys::shutdown(s.fd, libc::SHUT_WR).context("shutdown")?;
                        s.done = true;
                        open -= 1;
                        continue;
                    }
                    let off = src.offset(s.k, s.pos);
                    let len = src.msg_len(s.k, s.pos, s.total, job.size).min(pipes[i].2);
                    phase[i] = SplicePhase::FileToPipe;
                    opcode::Splice::new(
                        types::Fd(file.as_raw_fd()),
                        off as i64,
                        types::Fd(pipes[i].1.as_raw_fd()),
                        -1,
                        len as u32,
                    )
                    .build()
                };
                // SAFETY: splice names no user memory; the descriptors stay
                // open until the ring is dropped.
                push(&mut ring, &e.user_data(i as u64))?;
                inflight += 1;
            }
            if open == 0 && inflight == 0 {
                break;
            }
            ring.submit_and_wait(1)?;
            let cqes: Vec<(u64, i32)> = ring
                .completion()
                .map(|c| (c.user_data(), c.result()))
                .collect();
            for (ud, res) in cqes {
                let i = ud as usize;
                inflight -= 1;
                let was = phase[i];
                phase[i] = SplicePhase::Idle;
                if res == -libc::EINTR || res == -libc::EAGAIN {
                    continue;
                }
                if res <= 0 {
                    bail!(
                        "SPLICE {}: {}",
                        if was == SplicePhase::FileToPipe {
                            "file->pipe"
                        } else {
                            "pipe->socket"
                        },
                        if res == 0 {
                            "zero-length splice".to_string()
                        } else {
                            io::Error::from_raw_os_error(-res).to_string()
                        }
                    );
                }
                if was == SplicePhase::FileToPipe {
                    streams[i].pos += res as u64;
                    fill[i] += res as usize;
                } else {
                    sent[i] += res as u64;
                    fill[i] -= res as usize;
                }
            }
        }
        m.stop();
        Ok(())
    })();
    let clean = r.is_ok() || inflight == 0 || drain(&mut ring, fds, inflight);
    drop(ring);
    if !clean {
        bail!(
            "{:#}; requests were still in flight after {DRAIN_LIMIT:?}",
            r.unwrap_err()
        );
    }
    r?;
    Ok(ThreadOut {
        sent: streams.iter().zip(&sent).map(|(s, &n)| (s.k, n)).collect(),
        ..Default::default()
    })
}

/// io_uring READ from the page-cached file into a per-socket buffer, then
/// SEND from it (the fallback path of a static-file server without
/// sendfile).
fn uring_read_send(
    job: &Job<'_>,
    m: &mut Meter<'_>,
    fds: &[(usize, RawFd)],
) -> anyhow::Result<ThreadOut> {
    let src = job.source;
    let file = std::fs::File::open(&src.path).context("opening the source file")?;
    // Declared before the ring, so the ring (and its requests) go first.
    let mut bufs: Vec<Vec<u8>> = fds.iter().map(|_| vec![0u8; job.size]).collect();
    let mut ring = new_ring(RING_ENTRIES)?;
    let mut streams: Vec<Stream> = fds
        .iter()
        .map(|&(k, fd)| Stream::new(k, fd, job.per_socket))
        .collect();
    // Per socket: bytes in the buffer, bytes of them sent, request in flight.
    let mut filled = vec![0usize; streams.len()];
    let mut sent_in_buf = vec![0usize; streams.len()];
    let mut busy = vec![false; streams.len()];
    let mut sent = vec![0u64; streams.len()];
    let mut inflight = 0usize;
    let mut open = streams.len();
    let r = (|| -> anyhow::Result<()> {
        let start = m.start();
        let deadline = job.time_limit.map(|l| start + l);
        loop {
            for i in 0..streams.len() {
                let s = &mut streams[i];
                if busy[i] || s.done {
                    continue;
                }
                let e = if sent_in_buf[i] < filled[i] {
                    let p = bufs[i][sent_in_buf[i]..filled[i]].as_ptr();
                    opcode::Send::new(types::Fd(s.fd), p, (filled[i] - sent_in_buf[i]) as u32)
                        .flags(libc::MSG_NOSIGNAL)
                        .build()
                } else {
                    s.maybe_stop(job.size, deadline);
                    if s.finished() {
                        sys::shutdown(s.fd, libc::SHUT_WR).context("shutdown")?;
                        s.done = true;
                        open -= 1;
                        continue;
                    }
                    let off = src.offset(s.k, s.pos);
                    let len = src.msg_len(s.k, s.pos, s.total, job.size);
                    filled[i] = 0;
                    sent_in_buf[i] = 0;
                    opcode::Read::new(
                        types::Fd(file.as_raw_fd()),
                        bufs[i].as_mut_ptr(),
                        len as u32,
                    )
                    .offset(off as u64)
                    .build()
                };
                // SAFETY: bufs[i] outlives the ring (declared first, and
                // leaked below if requests are stuck); it is neither read nor
                // written by this thread while a request on it is in flight.
                push(&mut ring, &e.user_data(i as u64))?;
                busy[i] = true;
                inflight += 1;
            }
            if open == 0 && inflight == 0 {
                break;
            }
            ring.submit_and_wait(1)?;
            let cqes: Vec<(u64, i32)> = ring
                .completion()
                .map(|c| (c.user_data(), c.result()))
                .collect();
            for (ud, res) in cqes {
                let i = ud as usize;
                inflight -= 1;
                busy[i] = false;
                let was_send = sent_in_buf[i] < filled[i];
                if res == -libc::EINTR || res == -libc::EAGAIN {
                    continue;
                }
                if res <= 0 {
                    bail!(
                        "{}: {}",
                        if was_send { "SEND" } else { "READ" },
                        if res == 0 {
                            "zero-length transfer".to_string()
                        } else {
                            io::Error::from_raw_os_error(-res).to_string()
                        }
                    );
                }
                if was_send {
                    sent_in_buf[i] += res as usize;
                    sent[i] += res as u64;
                } else {
                    filled[i] = res as usize;
                    streams[i].pos += res as u64;
                }
            }
        }
        m.stop();
        Ok(())
    })();
    let clean = r.is_ok() || inflight == 0 || drain(&mut ring, fds, inflight);
    drop(ring);
    if !clean {
        // Requests may still write into the buffers: never free them.
        std::mem::forget(bufs);
        bail!(
            "{:#}; requests were still in flight after {DRAIN_LIMIT:?}",
            r.unwrap_err()
        );
    }
    r?;
    Ok(ThreadOut {
        sent: streams.iter().zip(&sent).map(|(s, &n)| (s.k, n)).collect(),
        ..Default::default()
    })
}
