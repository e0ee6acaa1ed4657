//! The io_uring models.
//!
//! - `uring-poll`: `IORING_OP_POLL_ADD` on every read end, one-shot (re-armed
//!   after each completion) or multishot (`IORING_POLL_ADD_MULTI`), then
//!   `read()` and `write()` as with epoll.
//! - `uring-read`: `IORING_OP_READ` posted ahead on every pipe into that
//!   pipe's own buffer; when a token has arrived it is `write()`n to the next
//!   pipe and the read is posted again (the paper's "async read").
//!
//! Ring setup: `SINGLE_ISSUER | DEFER_TASKRUN` when the kernel has them
//! (6.1+), so completions are produced when this thread enters the kernel to
//! wait, as an event loop would.
//!
//! Buffer lifetime: read buffers live in [`Stage`], owned by [`UringRead`].
//! Its `Drop` cancels every outstanding request and reaps its completion
//! before the buffers are freed; if that cannot be confirmed, the buffers are
//! leaked instead, so the kernel can never write into freed memory.

use crate::bench::{Bench, Fault};
use anyhow::{bail, Context as _, Result};
use io_uring::{cqueue, opcode, squeue, types, IoUring};
use std::time::Duration;

/// Submission queue entries.
pub const SQ_ENTRIES: u32 = 1024;
/// Upper bound on completion queue entries (the kernel's own maximum).
pub const MAX_CQ_ENTRIES: u32 = 65536;
/// `user_data` of the final cancel request.
const TAG_CANCEL: u64 = u64::MAX;
/// How long teardown waits for cancelled requests.
const CANCEL_WAIT: Duration = Duration::from_secs(2);

fn build_ring(n: usize) -> Result<IoUring> {
    let cq = ((2 * n).next_power_of_two() as u32).clamp(2 * SQ_ENTRIES, MAX_CQ_ENTRIES);
    IoUring::builder()
        .setup_cqsize(cq)
        .setup_single_issuer()
        .setup_defer_taskrun()
        .build(SQ_ENTRIES)
        .or_else(|_| IoUring::builder().setup_cqsize(cq).build(SQ_ENTRIES))
        .context("io_uring_setup")
}

struct Ring {
    ring: IoUring,
    /// Requests submitted (or queued) whose final completion is not reaped.
    inflight: usize,
    cqes: Vec<(u64, i32, u32)>,
}

impl Ring {
    fn new(n: usize) -> Result<Ring> {
        Ok(Ring {
            ring: build_ring(n)?,
            inflight: 0,
            cqes: Vec::with_capacity(MAX_CQ_ENTRIES as usize),
        })
    }

    /// Queue one entry, submitting first if the queue is full.
    ///
    /// # Safety
    /// Any buffer the entry names must stay valid until its completion is
    /// reaped (see [`Stage`]).
    unsafe fn push(&mut self, e: &squeue::Entry) -> Result<()> {
        loop {
            // SAFETY: forwarded to the caller's contract.
            if unsafe { self.ring.submission().push(e) }.is_ok() {
                return Ok(());
            }
            self.ring.submit().context("io_uring_enter (submit)")?;
        }
    }

    /// Submit what is queued, wait up to `stall` for at least one
    /// completion, and move all completions into `self.cqes`. Returns false
    /// if nothing completed in time.
    fn wait(&mut self, stall: Duration) -> Result<bool> {
        let ts = types::Timespec::from(stall);
        let args = types::SubmitArgs::new().timespec(&ts);
        if let Err(e) = self.ring.submitter().submit_with_args(1, &args) {
            match e.raw_os_error() {
                Some(libc::ETIME) | Some(libc::EINTR) | Some(libc::EBUSY) => {}
                _ => return Err(e).context("io_uring_enter (wait)"),
            }
        }
        self.cqes.clear();
        self.cqes.extend(
            self.ring
                .completion()
                .map(|c| (c.user_data(), c.result(), c.flags())),
        );
        Ok(!self.cqes.is_empty())
    }

    /// Cancel the requests tagged `0..n` (one per pipe; by `user_data`, a
    /// hashed lookup: `IORING_ASYNC_CANCEL_ANY` walks the whole table per
    /// match and takes about a second for 10,000 polls) and reap until
    /// nothing is in flight. `on_cqe` sees each late completion
    /// (user_data, res, flags).
    fn cancel_all(
        &mut self,
        n: usize,
        mut on_cqe: impl FnMut(u64, i32, u32) -> Result<()>,
    ) -> Result<()> {
        if self.inflight == 0 {
            return Ok(());
        }
        for i in 0..n {
            let e = opcode::AsyncCancel::new(i as u64)
                .build()
                .user_data(TAG_CANCEL);
            // SAFETY: a cancel request names no buffer.
            unsafe { self.push(&e) }?;
        }
        let mut cancels = 0;
        let deadline = std::time::Instant::now() + CANCEL_WAIT;
        while self.inflight > 0 || cancels < n {
            if std::time::Instant::now() > deadline {
                bail!(
                    "io_uring: {} requests still in flight after cancel",
                    self.inflight
                );
            }
            self.wait(Duration::from_millis(100))?;
            let cqes = std::mem::take(&mut self.cqes);
            for &(ud, res, flags) in &cqes {
                if ud == TAG_CANCEL {
                    cancels += 1;
                    if res < 0 && res != -libc::ENOENT && res != -libc::EALREADY {
                        bail!("io_uring cancel failed: errno {}", -res);
                    }
                    continue;
                }
                if !cqueue::more(flags) {
                    self.inflight -= 1;
                }
                on_cqe(ud, res, flags)?;
            }
            self.cqes = cqes;
        }
        Ok(())
    }
}

/// `uring-poll`: one `POLL_ADD` per pipe; one-shot polls are re-armed after
/// each completion, multishot polls only when the kernel ends them.
pub(crate) fn run_uring_poll(b: &mut Bench, multishot: bool, fault: Fault) -> Result<()> {
    let mut r = Ring::new(b.core.n)?;
    let result = uring_poll_loop(&mut r, b, multishot, fault);
    // Polls name no buffer, so teardown cannot corrupt memory; cancel anyway
    // to report a clean end.
    let end = r.cancel_all(b.core.n, |_, _, _| Ok(()));
    result.and(end)
}

fn poll_entry(fd: i32, i: usize, multishot: bool) -> squeue::Entry {
    opcode::PollAdd::new(types::Fd(fd), libc::POLLIN as u32)
        .multi(multishot)
        .build()
        .user_data(i as u64)
}

fn uring_poll_loop(r: &mut Ring, b: &mut Bench, multishot: bool, fault: Fault) -> Result<()> {
    for i in 0..b.core.n {
        // SAFETY: a poll request names no buffer.
        unsafe { r.push(&poll_entry(b.core.pipes.r[i], i, multishot)) }?;
        r.inflight += 1;
    }
    r.ring.submit().context("io_uring_enter (arm polls)")?;
    b.seed(fault)?;
    let stall = b.core.stall;
    while !b.core.done() {
        if !r.wait(stall)? {
            return Err(b.core.stalled());
        }
        let cqes = std::mem::take(&mut r.cqes);
        for &(ud, res, flags) in &cqes {
            let i = ud as usize;
            let rearm = !multishot || !cqueue::more(flags);
            if rearm {
                r.inflight -= 1;
            }
            if res < 0 {
                bail!("io_uring poll on pipe {i} failed: errno {}", -res);
            }
            if res & libc::POLLIN as i32 == 0 {
                bail!("io_uring poll on pipe {i} completed with mask {res:#x}");
            }
            b.read_ready(i, multishot)?;
            if rearm {
                // SAFETY: a poll request names no buffer.
                unsafe { r.push(&poll_entry(b.core.pipes.r[i], i, multishot)) }?;
                r.inflight += 1;
            }
        }
        r.cqes = cqes;
    }
    Ok(())
}

/// Per-pipe read buffers shared with the kernel: pipe `i` owns bytes
/// `i * size .. (i + 1) * size`. Allocated once, never moved or resized.
struct Stage {
    ptr: *mut u8,
    len: usize,
    size: usize,
    leaked: bool,
}

impl Stage {
    fn new(n: usize, size: usize) -> Stage {
        let len = n * size;
        let b: Box<[u8]> = vec![0u8; len].into_boxed_slice();
        Stage {
            ptr: Box::into_raw(b).cast::<u8>(),
            len,
            size,
            leaked: false,
        }
    }

    fn slot_ptr(&self, i: usize, off: usize) -> *mut u8 {
        debug_assert!(i * self.size + off < self.len);
        self.ptr.wrapping_add(i * self.size + off)
    }

    /// Pipe `i`'s buffer.
    ///
    /// # Safety
    /// No read may be in flight into slot `i` (its completion was reaped and
    /// no new read was posted).
    unsafe fn slot(&mut self, i: usize) -> &mut [u8] {
        // SAFETY: in bounds (i < n); no kernel write is pending on this slot
        // (caller's contract) and `&mut self` rules out other user borrows.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.add(i * self.size), self.size) }
    }
}

impl Drop for Stage {
    fn drop(&mut self) {
        if !self.leaked {
            // SAFETY: `ptr`/`len` came from Box::into_raw of a boxed slice of
            // exactly `len` bytes, and UringRead's Drop guarantees no read
            // is in flight (or set `leaked`).
            drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(self.ptr, self.len)) });
        }
    }
}

/// `uring-read` state. Field order matters only for clarity: `Drop` below
/// runs first and settles every in-flight read before `stage` is freed.
struct UringRead {
    ring: Ring,
    stage: Stage,
    /// Pipes, each with at most one read (user_data = pipe index).
    n: usize,
}

impl Drop for UringRead {
    fn drop(&mut self) {
        if self.ring.inflight > 0 && self.ring.cancel_all(self.n, |_, _, _| Ok(())).is_err() {
            // Could not confirm that the kernel is done with the buffers.
            self.stage.leaked = true;
        }
        if self.ring.inflight > 0 {
            self.stage.leaked = true;
        }
    }
}

fn read_entry(stage: &Stage, fd: i32, i: usize, have: usize) -> squeue::Entry {
    opcode::Read::new(
        types::Fd(fd),
        stage.slot_ptr(i, have),
        (stage.size - have) as u32,
    )
    .build()
    .user_data(i as u64)
}

/// Account for `res` bytes read into pipe `i`'s slot; deliver a whole token.
fn on_read(u: &mut UringRead, b: &mut Bench, i: usize, res: i32) -> Result<()> {
    if res == 0 {
        bail!("pipe {i}: unexpected end of file");
    }
    b.have[i] += res as usize;
    if b.have[i] == u.stage.size {
        b.have[i] = 0;
        // SAFETY: the read into slot i has just completed and the next one is
        // posted only after this returns.
        let slot = unsafe { u.stage.slot(i) };
        b.core.deliver(i, slot)?;
    }
    Ok(())
}

/// `uring-read`: a `READ` posted ahead on every pipe.
pub(crate) fn run_uring_read(b: &mut Bench, fault: Fault) -> Result<()> {
    let mut u = UringRead {
        ring: Ring::new(b.core.n)?,
        stage: Stage::new(b.core.n, b.core.size),
        n: b.core.n,
    };
    for i in 0..b.core.n {
        let e = read_entry(&u.stage, b.core.pipes.r[i], i, 0);
        // SAFETY: slot i lives in `u.stage`, which outlives the read (see
        // UringRead's Drop); nothing else touches slot i until its CQE.
        unsafe { u.ring.push(&e) }?;
        u.ring.inflight += 1;
    }
    u.ring
        .ring
        .submit()
        .context("io_uring_enter (post reads)")?;
    b.seed(fault)?;
    let stall = b.core.stall;
    while !b.core.done() {
        if !u.ring.wait(stall)? {
            return Err(b.core.stalled());
        }
        let cqes = std::mem::take(&mut u.ring.cqes);
        for &(ud, res, _) in &cqes {
            let i = ud as usize;
            u.ring.inflight -= 1;
            if res < 0 {
                bail!("io_uring read on pipe {i} failed: errno {}", -res);
            }
            on_read(&mut u, b, i, res)?;
            let e = read_entry(&u.stage, b.core.pipes.r[i], i, b.have[i]);
            // SAFETY: as above: slot i outlives the read and is untouched
            // until its completion is reaped.
            unsafe { u.ring.push(&e) }?;
            u.ring.inflight += 1;
        }
        u.ring.cqes = cqes;
    }
    // Cancel the reads still posted. A cancelled read that nevertheless got
    // data is accounted for, so verification sees any stray token.
    let mut late: Vec<(usize, i32)> = Vec::new();
    let n = u.n;
    u.ring.cancel_all(n, |ud, res, _| {
        if res > 0 {
            late.push((ud as usize, res));
        } else if res < 0 && res != -libc::ECANCELED {
            bail!("io_uring read on pipe {ud} failed: errno {}", -res);
        }
        Ok(())
    })?;
    for (i, res) in late {
        on_read(&mut u, b, i, res)?;
    }
    Ok(())
}
