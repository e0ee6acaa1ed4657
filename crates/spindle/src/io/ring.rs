//! The io_uring engine: each [`Sub`] becomes one submission queue entry,
//! and receives pick their buffer from a ring of provided buffers
//! registered with the kernel.

use io_uring::{opcode, squeue, types, IoUring};

use super::{Cqe, DiskOp, Engine, RecvBufs, Sub};

/// The buffer group of the receive buffers.
const BGID: u16 = 0;

pub struct Ring {
    ring: IoUring,
    recv: RecvRing,
}

/// The receive buffers and the buffer ring through which the kernel
/// picks one for each `RECV` completion.
struct RecvRing {
    bufs: Box<[u8]>,
    size: usize,
    count: u16,
    entries: *mut types::BufRingEntry,
    layout: std::alloc::Layout,
    tail: u16,
}

impl RecvRing {
    fn new(ring: &IoUring, spec: RecvBufs) -> Result<RecvRing, String> {
        assert!(spec.count.is_power_of_two());
        let count = spec.count as usize;
        let bufs = vec![0u8; count * spec.size].into_boxed_slice();
        let layout = std::alloc::Layout::from_size_align(
            count * std::mem::size_of::<types::BufRingEntry>(),
            4096,
        )
        .expect("buffer ring layout");
        // SAFETY: the layout has a non-zero size.
        let entries = unsafe { std::alloc::alloc_zeroed(layout) }.cast::<types::BufRingEntry>();
        if entries.is_null() {
            return Err("out of memory for the receive buffer ring".into());
        }
        // SAFETY: `entries` points at `count` zeroed, page-aligned entries
        // that stay allocated until Ring::drop, which unregisters them
        // before freeing them.
        let registered = unsafe {
            ring.submitter()
                .register_buf_ring_with_flags(entries as u64, spec.count, BGID, 0)
        };
        if let Err(e) = registered {
            // SAFETY: allocated above with this layout, never registered.
            unsafe { std::alloc::dealloc(entries.cast(), layout) };
            return Err(format!("io_uring provided buffers unavailable: {e}"));
        }
        Ok(RecvRing {
            bufs,
            size: spec.size,
            count: spec.count,
            entries,
            layout,
            tail: 0,
        })
    }
}

impl Ring {
    /// A ring of `entries` submissions (four times as many completions),
    /// with disk reads that cannot complete inline capped at `max_inflight`
    /// io-wq workers, and `recv` provided receive buffers.
    pub fn new(entries: u32, max_inflight: u32, recv: RecvBufs) -> Result<Ring, String> {
        let ring = IoUring::builder()
            .setup_single_issuer()
            .setup_defer_taskrun()
            .setup_submit_all()
            .setup_cqsize(entries * 4)
            .build(entries)
            .map_err(|e| format!("io_uring setup failed: {e}"))?;
        let mut max = [max_inflight, max_inflight];
        let _ = ring.submitter().register_iowq_max_workers(&mut max);
        let recv = RecvRing::new(&ring, recv)?;
        let mut r = Ring { ring, recv };
        for bid in 0..r.recv.count {
            r.provide(bid);
        }
        Ok(r)
    }
}

impl Ring {
    /// # Safety
    /// As for [`Engine::push`], for every buffer `sqe` names.
    unsafe fn push_entry(&mut self, sqe: squeue::Entry) {
        loop {
            // SAFETY: the caller keeps every buffer the entry names valid
            // until its final completion (this trait's contract).
            let pushed = unsafe { self.ring.submission().push(&sqe) };
            if pushed.is_ok() {
                break;
            }
            // Submission queue full: hand what is queued to the kernel.
            if let Err(e) = self.ring.submit() {
                if e.raw_os_error() != Some(libc::EBUSY) && e.raw_os_error() != Some(libc::EINTR) {
                    panic!("io_uring_enter failed: {e}");
                }
            }
        }
    }
}

/// The entry that carries out `sub` (`recv_size`: a receive buffer's).
fn entry(sub: Sub, recv_size: u32) -> squeue::Entry {
    match sub {
        Sub::Accept { fd } => opcode::AcceptMulti::new(types::Fd(fd))
            .flags(libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK)
            .build(),
        Sub::Recv {
            fd,
            multishot: true,
        } => opcode::RecvMulti::new(types::Fd(fd), BGID).build(),
        Sub::Recv {
            fd,
            multishot: false,
        } => opcode::Recv::new(types::Fd(fd), std::ptr::null_mut(), recv_size)
            .buf_group(BGID)
            .build()
            .flags(squeue::Flags::BUFFER_SELECT),
        // `types::OpenHow` is `open_how` under a transparent wrapper.
        Sub::Disk(DiskOp::Open { dir, path, how }) => {
            opcode::OpenAt2::new(types::Fd(dir), path, how.cast::<types::OpenHow>()).build()
        }
        Sub::Disk(DiskOp::Read { fd, buf, len, off }) => opcode::Read::new(types::Fd(fd), buf, len)
            .offset(off)
            .build(),
        Sub::Disk(DiskOp::Readv { fd, iov, n, off }) => opcode::Readv::new(types::Fd(fd), iov, n)
            .offset(off)
            .build(),
        Sub::ReadEvent { fd, buf } => opcode::Read::new(types::Fd(fd), buf, 8).build(),
        Sub::Send {
            fd,
            buf,
            len,
            flags,
        } => opcode::Send::new(types::Fd(fd), buf, len)
            .flags(flags)
            .build(),
        Sub::SendMsg { fd, msg, flags } => opcode::SendMsg::new(types::Fd(fd), msg)
            .flags(flags)
            .build(),
        Sub::SendFile { .. } => unreachable!("SENDFILE is not an io_uring operation"),
        Sub::Poll {
            fd,
            mask,
            multishot,
        } => opcode::PollAdd::new(types::Fd(fd), mask)
            .multi(multishot)
            .build(),
        Sub::Nop => opcode::Nop::new().build(),
        Sub::Shutdown { fd, how } => opcode::Shutdown::new(types::Fd(fd), how).build(),
        Sub::Close { fd } => opcode::Close::new(types::Fd(fd)).build(),
        Sub::Cancel { target } => opcode::AsyncCancel::new(target).build(),
        Sub::PollRemove { target } => opcode::PollRemove::new(target).build(),
        // `types::Timespec` is `__kernel_timespec` under a wrapper, as is
        // `super::Timespec`.
        Sub::Timeout { ts } => opcode::Timeout::new(ts.cast::<types::Timespec>()).build(),
        Sub::TimeoutRemove { target } => opcode::TimeoutRemove::new(target).build(),
    }
}

impl Engine for Ring {
    unsafe fn push(&mut self, sub: Sub, user_data: u64) {
        let sqe = entry(sub, self.recv.size as u32).user_data(user_data);
        // SAFETY: passed on from the caller.
        unsafe { self.push_entry(sqe) }
    }

    unsafe fn push_linked(&mut self, sub: Sub, user_data: u64) {
        let sqe = entry(sub, self.recv.size as u32)
            .user_data(user_data)
            .flags(squeue::Flags::IO_LINK);
        // SAFETY: passed on from the caller.
        unsafe { self.push_entry(sqe) }
    }

    fn wait(&mut self, out: &mut Vec<Cqe>) -> Result<(), String> {
        match self.ring.submit_and_wait(1) {
            Ok(_) => {}
            Err(e) if matches!(e.raw_os_error(), Some(libc::EINTR) | Some(libc::EBUSY)) => {}
            Err(e) => return Err(format!("io_uring_enter failed: {e}")),
        }
        out.extend(
            self.ring
                .completion()
                .map(|c| (c.user_data(), c.result(), c.flags())),
        );
        Ok(())
    }

    fn recv_buf(&self, bid: u16, len: usize) -> &[u8] {
        let start = bid as usize * self.recv.size;
        &self.recv.bufs[start..start + len]
    }

    fn provide(&mut self, bid: u16) {
        let r = &mut self.recv;
        assert!(bid < r.count);
        let mask = r.count - 1;
        // SAFETY: `entries` holds `count` entries; the index is masked
        // into range. The kernel only consumes entries below the tail,
        // and this one is published by the tail store that follows.
        unsafe {
            let e = &mut *r.entries.add((r.tail & mask) as usize);
            e.set_addr(r.bufs.as_ptr().add(bid as usize * r.size) as u64);
            e.set_len(r.size as u32);
            e.set_bid(bid);
        }
        r.tail = r.tail.wrapping_add(1);
        // SAFETY: the tail lives inside the entries allocation; the kernel
        // reads it with acquire semantics, so it is stored with release.
        unsafe {
            let tail = types::BufRingEntry::tail(r.entries) as *const std::sync::atomic::AtomicU16;
            (*tail).store(r.tail, std::sync::atomic::Ordering::Release);
        }
    }
}

impl Drop for Ring {
    fn drop(&mut self) {
        // The ring is dropped after this body runs (fields drop after
        // `drop`), so unregister first: the kernel must stop referring to
        // the buffer ring memory before it is freed.
        let _ = self.ring.submitter().unregister_buf_ring(BGID);
        // SAFETY: allocated in RecvRing::new with this layout; the kernel
        // no longer refers to it (unregistered above).
        unsafe { std::alloc::dealloc(self.recv.entries.cast(), self.recv.layout) };
    }
}
