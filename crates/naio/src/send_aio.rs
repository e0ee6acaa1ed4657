//! The `linux-aio-sendfile` sender (lighttpd 1.5's path): native AIO
//! `O_DIRECT` reads into slots of an mmap'ed `/dev/shm` buffer, then
//! `sendfile` from that shm file to the socket. The other senders are in
//! `send.rs`.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};

use crate::send::{Job, Stream, EPOLL_BATCH, PAGE};
use crate::side::{Meter, ThreadOut};
use crate::source::Source;
use crate::sys;

/// linux-aio-sendfile: /dev/shm buffer slots per socket (reads ahead).
pub const AIO_SLOTS: usize = 4;
/// Directory of the linux-aio-sendfile buffers.
pub const SHM_DIR: &str = "/dev/shm";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SlotState {
    Reading,
    Ready,
}

#[derive(Clone, Copy, Debug)]
struct Slot {
    state: SlotState,
    len: usize,
    sent: usize,
}

/// Per-socket state of the linux-aio-sendfile sender.
struct AioStream {
    s: Stream,
    shm: sys::ShmBuf,
    /// Slots are used in sequence: `read_seq` is the next to read into,
    /// `send_seq` the next to send from; slot of seq n is n % AIO_SLOTS.
    read_seq: u64,
    send_seq: u64,
    slots: [Slot; AIO_SLOTS],
    /// Bytes handed to sendfile.
    sent: u64,
}

/// The lighttpd 1.5 path: native AIO `O_DIRECT` read into an mmap'ed
/// /dev/shm buffer, then `sendfile` from that shm file to the socket.
/// AIO completions signal an eventfd; one epoll waits for it and for
/// writable sockets.
pub(crate) fn aio_sendfile(
    job: &Job<'_>,
    m: &mut Meter<'_>,
    fds: &[(usize, RawFd)],
) -> anyhow::Result<ThreadOut> {
    let src = job.source;
    let file = sys::open_direct(&src.path).context("opening the source file with O_DIRECT")?;
    let stride = job.size.max(PAGE);
    let tid = sys::gettid();
    let mut streams = Vec::new();
    for &(k, fd) in fds {
        sys::set_nonblocking(fd, true)?;
        let shm = sys::ShmBuf::new(
            Path::new(SHM_DIR),
            &format!("{tid}-{k}"),
            AIO_SLOTS * stride,
        )
        .with_context(|| format!("creating the {SHM_DIR} buffer"))?;
        streams.push(AioStream {
            s: Stream::new(k, fd, job.per_socket),
            shm,
            read_seq: 0,
            send_seq: 0,
            slots: [Slot {
                state: SlotState::Ready,
                len: 0,
                sent: 0,
            }; AIO_SLOTS],
            sent: 0,
        });
    }
    // Declared after the shm buffers: dropped (io_destroy waits for
    // in-flight reads) before they are unmapped.
    let ctx = linux_aio::Context::new((fds.len() * AIO_SLOTS) as u32)
        .context("io_setup (is fs.aio-max-nr exhausted?)")?;
    let efd = sys::eventfd()?;
    let ep = sys::Epoll::new()?;
    const EFD_TAG: u64 = u64::MAX;
    ep.add(efd.as_raw_fd(), libc::EPOLLIN as u32, EFD_TAG)?;
    for (i, a) in streams.iter().enumerate() {
        ep.add(a.s.fd, (libc::EPOLLOUT | libc::EPOLLET) as u32, i as u64)?;
    }
    let mut events = vec![sys::epoll_event_zero(); EPOLL_BATCH];
    let mut ioevs = vec![linux_aio::IoEvent::default(); fds.len() * AIO_SLOTS];
    let mut open = streams.len();

    let start = m.start();
    let deadline = job.time_limit.map(|l| start + l);
    let rd = Reader {
        ctx: &ctx,
        file: &file,
        efd: efd.as_raw_fd(),
        src,
        size: job.size,
        stride,
        deadline,
    };
    for (i, a) in streams.iter_mut().enumerate() {
        rd.refill(i, a)?;
        open -= send_ready(a, stride)? as usize;
    }
    while open > 0 {
        let evs = ep.wait(&mut events, -1)?;
        for ev in evs {
            if ev.u64 == EFD_TAG {
                sys::eventfd_drain(efd.as_raw_fd())?;
                loop {
                    let got = ctx.get_events(0, &mut ioevs, Some(Duration::ZERO))?;
                    if got.is_empty() {
                        break;
                    }
                    let done: Vec<(u64, i64)> = got.iter().map(|e| (e.data, e.res)).collect();
                    for (data, res) in done {
                        let i = data as usize / AIO_SLOTS;
                        let slot = data as usize % AIO_SLOTS;
                        let a = &mut streams[i];
                        let want = a.slots[slot].len;
                        if res != want as i64 {
                            bail!(
                                "AIO read returned {} for {want} bytes{}",
                                res,
                                if res < 0 {
                                    format!(": {}", io::Error::from_raw_os_error(-res as i32))
                                } else {
                                    String::new()
                                }
                            );
                        }
                        a.slots[slot].state = SlotState::Ready;
                        open -= send_ready(a, stride)? as usize;
                        rd.refill(i, a)?;
                        open -= finish_if_done(a)? as usize;
                    }
                }
            } else {
                let i = ev.u64 as usize;
                let a = &mut streams[i];
                if !a.s.done {
                    open -= send_ready(a, stride)? as usize;
                    rd.refill(i, a)?;
                    open -= finish_if_done(a)? as usize;
                }
            }
        }
    }
    m.stop();
    let sent = streams.iter().map(|a| (a.s.k, a.sent)).collect();
    drop(ctx);
    drop(streams);
    Ok(ThreadOut {
        sent,
        ..Default::default()
    })
}

/// What starting AIO reads needs.
struct Reader<'a> {
    ctx: &'a linux_aio::Context,
    file: &'a OwnedFd,
    efd: RawFd,
    src: &'a Source,
    size: usize,
    stride: usize,
    deadline: Option<Instant>,
}

impl Reader<'_> {
    /// Starts reads into free slots of stream `i`.
    fn refill(&self, i: usize, a: &mut AioStream) -> anyhow::Result<()> {
        let (ctx, file, efd, src, size, stride, deadline) = (
            self.ctx,
            self.file,
            self.efd,
            self.src,
            self.size,
            self.stride,
            self.deadline,
        );
        while a.read_seq - a.send_seq < AIO_SLOTS as u64 {
            a.s.maybe_stop(size, deadline);
            if a.s.finished() {
                break;
            }
            let slot = (a.read_seq % AIO_SLOTS as u64) as usize;
            let off = src.offset(a.s.k, a.s.pos);
            let len = src.msg_len(a.s.k, a.s.pos, a.s.total, size);
            let cb = linux_aio::Iocb::pread(
                file.as_raw_fd(),
                a.shm.addr(slot * stride),
                len,
                off as u64,
                (i * AIO_SLOTS + slot) as u64,
            )
            .with_resfd(efd);
            // SAFETY: the slot's pages belong to the shm mapping, which is
            // dropped only after the AIO context (io_destroy waits for in-flight
            // reads); the slot is not read or sent until this read completes.
            let n = unsafe { ctx.submit(&mut [cb]) }.context("io_submit")?;
            if n != 1 {
                bail!("io_submit accepted {n} of 1 reads");
            }
            a.slots[slot] = Slot {
                state: SlotState::Reading,
                len,
                sent: 0,
            };
            a.s.pos += len as u64;
            a.read_seq += 1;
        }
        Ok(())
    }
}

/// Sends ready slots in order until the socket is full. Returns true when
/// this call finished the stream.
fn send_ready(a: &mut AioStream, stride: usize) -> anyhow::Result<bool> {
    while a.send_seq < a.read_seq {
        let slot = (a.send_seq % AIO_SLOTS as u64) as usize;
        let sl = a.slots[slot];
        if sl.state != SlotState::Ready {
            break;
        }
        let off = (slot * stride + sl.sent) as u64;
        match sys::sendfile(a.s.fd, a.shm.fd(), off, sl.len - sl.sent) {
            Ok(0) => bail!("sendfile from the shm buffer sent nothing"),
            Ok(n) => {
                a.slots[slot].sent += n;
                a.sent += n as u64;
                if a.slots[slot].sent == sl.len {
                    // sendfile passed page references to the socket; give the
                    // slot fresh pages so the next read cannot change bytes
                    // still queued in the network stack.
                    a.shm
                        .punch(slot * stride, stride)
                        .context("punching the shm slot")?;
                    a.send_seq += 1;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e).context("sendfile"),
        }
    }
    finish_if_done(a)
}

fn finish_if_done(a: &mut AioStream) -> anyhow::Result<bool> {
    if !a.s.done && a.s.finished() && a.send_seq == a.read_seq {
        sys::shutdown(a.s.fd, libc::SHUT_WR).context("shutdown")?;
        a.s.done = true;
        return Ok(true);
    }
    Ok(false)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::net::{TcpListener, TcpStream};

    /// sendfile hands the socket references to the shm pages, not copies:
    /// once a slot is punched, new bytes written into it must not reach the
    /// bytes still queued for the receiver.
    #[test]
    fn punched_shm_slot_keeps_queued_bytes() {
        let shm = sys::ShmBuf::new(Path::new(SHM_DIR), "unit-test", PAGE).expect("shm");
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let tx = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (mut rx, _) = l.accept().unwrap();
        let first = vec![0xA5u8; PAGE];
        // SAFETY: writes PAGE bytes into the PAGE-byte mapping owned by `shm`.
        unsafe { std::ptr::copy_nonoverlapping(first.as_ptr(), shm.addr(0), PAGE) };
        let n = sys::sendfile(tx.as_raw_fd(), shm.fd(), 0, PAGE).unwrap();
        assert_eq!(n, PAGE);
        shm.punch(0, PAGE).unwrap();
        // SAFETY: as above; the punched range faults in a fresh page.
        unsafe { std::ptr::write_bytes(shm.addr(0), 0x5A, PAGE) };
        let mut got = vec![0u8; PAGE];
        rx.read_exact(&mut got).unwrap();
        assert!(
            got == first,
            "bytes queued by sendfile changed after the slot was reused"
        );
    }
}
