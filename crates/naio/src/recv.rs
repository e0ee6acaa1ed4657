//! The receive side: blocking `recv`, `epoll` + `recv`, io_uring `RECV`
//! (one per socket) and multishot `RECV` over a provided buffer ring.
//! Every receiver hashes the bytes it gets (see `digest.rs`).

use std::io;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicU16, Ordering};
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use io_uring::{cqueue, opcode, types, IoUring};

use crate::digest::Digest;
use crate::side::{Meter, RecvMode, SockRecv, ThreadOut};
use crate::sys;

/// Submission queue entries of a receiver's ring (must cover one request
/// per socket, `MAX_SOCKETS`).
pub const RING_ENTRIES: u32 = 256;
/// Provided-buffer ring: total bytes of buffers, and bounds on their count.
pub const PBUF_BYTES: usize = 16 << 20;
pub const PBUF_MIN: usize = 16;
pub const PBUF_MAX: usize = 1024;
/// Buffer group id of the provided-buffer ring.
const BGID: u16 = 7;
/// epoll events fetched per `epoll_wait`.
const EPOLL_BATCH: usize = 64;
/// How long an aborted ring may take to hand back its in-flight requests.
const DRAIN_LIMIT: Duration = Duration::from_secs(5);

/// Runs receiver `mode` on the sockets `fds` ((index, fd) pairs).
pub fn run(
    mode: RecvMode,
    m: &mut Meter<'_>,
    fds: &[(usize, RawFd)],
    size: usize,
) -> anyhow::Result<ThreadOut> {
    match mode {
        RecvMode::Recv => blocking(m, fds, size),
        RecvMode::Epoll => epoll(m, fds, size),
        RecvMode::UringRecv => uring_recv(m, fds, size),
        RecvMode::UringRecvMultishot => uring_multishot(m, fds, size),
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

fn blocking(m: &mut Meter<'_>, fds: &[(usize, RawFd)], size: usize) -> anyhow::Result<ThreadOut> {
    let &[(k, fd)] = fds else {
        bail!("blocking recv takes one socket per thread");
    };
    let mut buf = vec![0u8; size];
    let mut d = Digest::new();
    m.start();
    loop {
        let n = retry(|| sys::recv(fd, &mut buf)).context("recv")?;
        if n == 0 {
            break;
        }
        d.update(&buf[..n]);
    }
    m.stop();
    Ok(ThreadOut {
        received: vec![(
            k,
            SockRecv {
                bytes: d.len(),
                digest: d.finish(),
            },
        )],
        ..Default::default()
    })
}

fn epoll(m: &mut Meter<'_>, fds: &[(usize, RawFd)], size: usize) -> anyhow::Result<ThreadOut> {
    let ep = sys::Epoll::new()?;
    for (i, &(_, fd)) in fds.iter().enumerate() {
        sys::set_nonblocking(fd, true)?;
        ep.add(fd, libc::EPOLLIN as u32, i as u64)?;
    }
    let mut buf = vec![0u8; size];
    let mut digests = vec![Digest::new(); fds.len()];
    let mut open = fds.len();
    let mut events = vec![sys::epoll_event_zero(); EPOLL_BATCH];
    m.start();
    while open > 0 {
        let evs = ep.wait(&mut events, -1)?;
        for ev in evs {
            let i = ev.u64 as usize;
            let fd = fds[i].1;
            loop {
                match sys::recv(fd, &mut buf) {
                    Ok(0) => {
                        ep.delete(fd)?;
                        open -= 1;
                        break;
                    }
                    Ok(n) => digests[i].update(&buf[..n]),
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(e).context("recv"),
                }
            }
        }
    }
    m.stop();
    Ok(out_from(fds, &digests))
}

fn out_from(fds: &[(usize, RawFd)], digests: &[Digest]) -> ThreadOut {
    ThreadOut {
        received: fds
            .iter()
            .zip(digests)
            .map(|(&(k, _), d)| {
                (
                    k,
                    SockRecv {
                        bytes: d.len(),
                        digest: d.finish(),
                    },
                )
            })
            .collect(),
        ..Default::default()
    }
}

/// A ring for one thread: single issuer, completions run only when the
/// thread asks for them.
pub fn new_ring(entries: u32) -> io::Result<IoUring> {
    IoUring::builder()
        .setup_single_issuer()
        .setup_defer_taskrun()
        .setup_cqsize(entries * 4)
        .build(entries)
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

/// After an error: shut the sockets down so pending requests complete, and
/// reap them. Returns false if some were still pending after DRAIN_LIMIT;
/// the caller must then leak the buffers.
fn drain(ring: &mut IoUring, fds: &[(usize, RawFd)], mut inflight: usize) -> bool {
    for &(_, fd) in fds {
        let _ = sys::shutdown(fd, libc::SHUT_RDWR);
    }
    let until = Instant::now() + DRAIN_LIMIT;
    while inflight > 0 && Instant::now() < until {
        let ts = types::Timespec::new().nsec(10_000_000);
        let args = types::SubmitArgs::new().timespec(&ts);
        let _ = ring.submitter().submit_with_args(1, &args);
        for cqe in ring.completion() {
            if !cqueue::more(cqe.flags()) {
                inflight = inflight.saturating_sub(1);
            }
        }
    }
    inflight == 0
}

fn uring_recv(m: &mut Meter<'_>, fds: &[(usize, RawFd)], size: usize) -> anyhow::Result<ThreadOut> {
    // Declared before the ring so the ring (and its requests) go first.
    let mut bufs: Vec<Vec<u8>> = fds.iter().map(|_| vec![0u8; size]).collect();
    let mut ring = new_ring(RING_ENTRIES)?;
    let mut digests = vec![Digest::new(); fds.len()];
    let mut inflight = 0usize;
    let r = (|| -> anyhow::Result<()> {
        m.start();
        for (i, &(_, fd)) in fds.iter().enumerate() {
            let e = opcode::Recv::new(types::Fd(fd), bufs[i].as_mut_ptr(), size as u32)
                .build()
                .user_data(i as u64);
            // SAFETY: bufs[i] lives until the ring is dropped or drained, and
            // is not touched again until this request's CQE is reaped.
            push(&mut ring, &e)?;
            inflight += 1;
        }
        while inflight > 0 {
            ring.submit_and_wait(1)?;
            let cqes: Vec<(u64, i32)> = ring
                .completion()
                .map(|c| (c.user_data(), c.result()))
                .collect();
            for (ud, res) in cqes {
                inflight -= 1;
                let i = ud as usize;
                if res < 0 {
                    if res == -libc::EINTR || res == -libc::EAGAIN {
                        // Retry below.
                    } else {
                        bail!("RECV: {}", io::Error::from_raw_os_error(-res));
                    }
                } else if res == 0 {
                    continue;
                } else {
                    digests[i].update(&bufs[i][..res as usize]);
                }
                let e = opcode::Recv::new(types::Fd(fds[i].1), bufs[i].as_mut_ptr(), size as u32)
                    .build()
                    .user_data(ud);
                // SAFETY: as above; the previous request on bufs[i] completed.
                push(&mut ring, &e)?;
                inflight += 1;
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
    }
    r?;
    Ok(out_from(fds, &digests))
}

fn pbuf_count(size: usize) -> usize {
    (PBUF_BYTES / size)
        .clamp(PBUF_MIN, PBUF_MAX)
        .next_power_of_two()
        .min(PBUF_MAX)
}

/// A provided-buffer ring: `n` buffers of `size` bytes registered as group
/// `BGID`.
struct BufRing {
    entries: sys::AnonMap,
    bufs: sys::AnonMap,
    n: usize,
    size: usize,
    tail: u16,
}

impl BufRing {
    fn new(ring: &IoUring, n: usize, size: usize) -> anyhow::Result<BufRing> {
        let entries = sys::AnonMap::new(n * std::mem::size_of::<types::BufRingEntry>())?;
        let bufs = sys::AnonMap::new(n * size)?;
        let mut br = BufRing {
            entries,
            bufs,
            n,
            size,
            tail: 0,
        };
        for bid in 0..n {
            br.put(bid as u16);
        }
        br.publish();
        // SAFETY: the entry array and the buffers are mappings owned by the
        // BufRing, which the caller drops only after the io_uring.
        unsafe {
            ring.submitter().register_buf_ring_with_flags(
                br.entries.ptr() as u64,
                n as u16,
                BGID,
                0,
            )
        }
        .context("registering the provided buffer ring (needs Linux 5.19+)")?;
        Ok(br)
    }

    fn base(&self) -> *mut types::BufRingEntry {
        self.entries.ptr().cast()
    }

    /// Hands buffer `bid` back to the kernel (visible after `publish`).
    fn put(&mut self, bid: u16) {
        let idx = self.tail as usize & (self.n - 1);
        // SAFETY: idx < n, inside the entries mapping; the kernel only reads
        // entries between its head and the published tail, and this slot is
        // beyond the published tail.
        let e = unsafe { &mut *self.base().add(idx) };
        e.set_addr(self.bufs.ptr() as u64 + bid as u64 * self.size as u64);
        e.set_len(self.size as u32);
        e.set_bid(bid);
        self.tail = self.tail.wrapping_add(1);
    }

    fn publish(&self) {
        // SAFETY: the tail field lives in entry 0 of the page-aligned ring,
        // which is initialised; the kernel reads it with acquire semantics.
        let tail =
            unsafe { AtomicU16::from_ptr(types::BufRingEntry::tail(self.base()) as *mut u16) };
        tail.store(self.tail, Ordering::Release);
    }

    fn data(&self, bid: u16, len: usize) -> &[u8] {
        assert!((bid as usize) < self.n && len <= self.size);
        // SAFETY: in bounds of the buffers mapping; the kernel finished
        // writing buffer `bid` before posting the CQE that named it, and gets
        // it back only through `put`.
        unsafe { std::slice::from_raw_parts(self.bufs.ptr().add(bid as usize * self.size), len) }
    }
}

fn uring_multishot(
    m: &mut Meter<'_>,
    fds: &[(usize, RawFd)],
    size: usize,
) -> anyhow::Result<ThreadOut> {
    let mut ring = new_ring(RING_ENTRIES)?;
    let mut br = BufRing::new(&ring, pbuf_count(size), size)?;
    let mut digests = vec![Digest::new(); fds.len()];
    let mut inflight = 0usize;
    let arm = |ring: &mut IoUring, i: usize| {
        let e = opcode::RecvMulti::new(types::Fd(fds[i].1), BGID)
            .build()
            .user_data(i as u64);
        // SAFETY: the request writes only into provided buffers, which the
        // BufRing keeps mapped until after the ring is dropped.
        push(ring, &e)
    };
    let r = (|| -> anyhow::Result<()> {
        m.start();
        for i in 0..fds.len() {
            arm(&mut ring, i)?;
            inflight += 1;
        }
        while inflight > 0 {
            ring.submit_and_wait(1)?;
            let cqes: Vec<(u64, i32, u32)> = ring
                .completion()
                .map(|c| (c.user_data(), c.result(), c.flags()))
                .collect();
            let mut returned = false;
            for (ud, res, flags) in cqes {
                let i = ud as usize;
                let more = cqueue::more(flags);
                if res > 0 {
                    let bid = cqueue::buffer_select(flags)
                        .context("multishot RECV completion without a buffer")?;
                    digests[i].update(br.data(bid, res as usize));
                    br.put(bid);
                    returned = true;
                }
                if more {
                    continue;
                }
                inflight -= 1;
                if res == 0 {
                    continue; // end of stream
                }
                if res < 0 && res != -libc::ENOBUFS && res != -libc::EINTR {
                    bail!("multishot RECV: {}", io::Error::from_raw_os_error(-res));
                }
                arm(&mut ring, i)?;
                inflight += 1;
            }
            if returned {
                br.publish();
            }
        }
        m.stop();
        Ok(())
    })();
    let clean = r.is_ok() || inflight == 0 || drain(&mut ring, fds, inflight);
    drop(ring);
    if clean {
        drop(br);
    } else {
        // Requests may still write into the buffers: never free them.
        std::mem::forget(br);
    }
    r?;
    Ok(out_from(fds, &digests))
}
