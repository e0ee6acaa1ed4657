//! One measured run: connect the sockets, start the sender and receiver
//! threads together, move the bytes, check the checksums, add up the CPU
//! time of each side.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::mpsc;
use std::sync::Barrier;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use serde::{Deserialize, Serialize};

use crate::netns::Net;
use crate::source::{Source, MAX_MSG, MIN_MSG};
use crate::{recv, send, sys};

pub use crate::side::{past, Meter, RecvMode, SendMode, SockRecv, ThreadOut, ZcStats};

/// Most sockets one run may use.
pub const MAX_SOCKETS: usize = 64;
/// How long past the time limit a run may take before the watchdog shuts
/// its sockets down and fails it.
pub const WATCHDOG_GRACE: Duration = Duration::from_secs(60);
/// The watchdog's limit for runs without a time limit.
pub const WATCHDOG_UNLIMITED: Duration = Duration::from_secs(3600);
/// What one run does.
#[derive(Clone, Debug, Serialize)]
pub struct RunConfig {
    pub recv: RecvMode,
    pub send: SendMode,
    /// Bytes per send call / per receive buffer.
    pub size: usize,
    pub sockets: usize,
    /// Bytes to move in total (split evenly over the sockets, rounded down
    /// to whole messages).
    pub bytes: u64,
    /// Senders stop starting new messages after this long.
    pub time_limit: Option<Duration>,
}

/// What one run measured.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RunResult {
    pub recv: RecvMode,
    pub send: SendMode,
    pub size: usize,
    pub sockets: usize,
    pub netns: bool,
    /// Bytes received (and verified) over all sockets.
    pub bytes: u64,
    pub secs: f64,
    /// 10^6 bytes per second.
    pub mbps: f64,
    /// CPU seconds of the sender side (its threads plus their io-wq workers).
    pub send_cpu_s: f64,
    pub recv_cpu_s: f64,
    /// Of the above, seconds used by io_uring's io-wq worker threads.
    pub send_iowq_s: f64,
    pub recv_iowq_s: f64,
    /// CPU seconds per 10^9 bytes moved.
    pub send_cpu_per_gb: f64,
    pub recv_cpu_per_gb: f64,
    /// Process CPU (getrusage) during the run not attributed to either side.
    pub other_cpu_s: f64,
    /// CPU of the ksoftirqd kernel threads during the run (network work
    /// deferred there is charged to neither side; other load adds to it).
    pub ksoftirqd_cpu_s: f64,
    /// The time limit stopped the senders before `--bytes` were moved.
    pub capped: bool,
    /// SEND_ZC requests whose result CQE announced a notification.
    pub zc_sends: u64,
    /// Notification CQEs received.
    pub zc_notifs: u64,
    /// Notifications reporting the kernel copied the data after all.
    pub zc_copied: u64,
    /// Per socket: (bytes sent, receiver's checksum).
    #[serde(skip)]
    pub per_socket: Vec<(u64, u64)>,
}
/// Which side a thread belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    Send,
    Recv,
}
struct Report {
    side: Side,
    cpu_ns: u64,
    iowq_ns: u64,
    end: Option<Instant>,
    out: anyhow::Result<ThreadOut>,
}

/// Opens `sockets` connected TCP pairs. Returns (sender ends, receiver
/// ends), both indexed by socket number.
pub fn connect(net: &Net, sockets: usize) -> anyhow::Result<(Vec<TcpStream>, Vec<TcpStream>)> {
    let listener = net.listen()?;
    let addr: SocketAddr = listener.local_addr()?;
    let mut senders = net.connect_all(addr, sockets)?;
    for (k, s) in senders.iter_mut().enumerate() {
        handshake(s, k)?;
    }
    let mut receivers: Vec<Option<TcpStream>> = (0..sockets).map(|_| None).collect();
    listener.set_nonblocking(true)?;
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut got = 0;
    while got < sockets {
        match listener.accept() {
            Ok((mut s, _)) => {
                s.set_nonblocking(false)?;
                s.set_read_timeout(Some(Duration::from_secs(10)))?;
                let mut idx = [0u8; 4];
                s.read_exact(&mut idx).context("reading the socket index")?;
                s.set_read_timeout(None)?;
                let k = u32::from_le_bytes(idx) as usize;
                if k >= sockets || receivers[k].is_some() {
                    bail!("bad socket index {k} in handshake");
                }
                receivers[k] = Some(s);
                got += 1;
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                if Instant::now() > deadline {
                    bail!("only {got} of {sockets} connections were accepted within 10 s");
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            Err(e) => return Err(e).context("accept"),
        }
    }
    drop::<TcpListener>(listener);
    Ok((senders, receivers.into_iter().map(|s| s.unwrap()).collect()))
}

/// Writes the 4-byte socket index the receiver uses to match sockets.
fn handshake(s: &mut TcpStream, k: usize) -> anyhow::Result<()> {
    s.write_all(&(k as u32).to_le_bytes())
        .context("writing the socket index")
}

fn check_config(cfg: &RunConfig, source: &Source) -> anyhow::Result<u64> {
    if cfg.sockets == 0 || cfg.sockets > MAX_SOCKETS {
        bail!("--sockets must be 1..={MAX_SOCKETS}, got {}", cfg.sockets);
    }
    if cfg.size < MIN_MSG || cfg.size > MAX_MSG || !cfg.size.is_power_of_two() {
        bail!(
            "--size must be a power of two from {MIN_MSG} to {MAX_MSG}, got {}",
            cfg.size
        );
    }
    if source.len() < MAX_MSG {
        bail!("source file too small");
    }
    let per = cfg.bytes / cfg.sockets as u64 / cfg.size as u64 * cfg.size as u64;
    if per == 0 {
        bail!(
            "--bytes {} is less than one {}-byte message per socket",
            cfg.bytes,
            cfg.size
        );
    }
    Ok(per)
}

/// Runs one pairing and verifies every socket's bytes.
pub fn run_one(cfg: &RunConfig, source: &Source, net: &Net) -> anyhow::Result<RunResult> {
    let per_socket = check_config(cfg, source)?;
    let (tx, rx) = connect(net, cfg.sockets)?;
    let tx_fds: Vec<RawFd> = tx.iter().map(|s| s.as_raw_fd()).collect();
    let rx_fds: Vec<RawFd> = rx.iter().map(|s| s.as_raw_fd()).collect();

    // Thread layout: blocking modes use one thread per socket.
    let recv_groups: Vec<Vec<usize>> = match cfg.recv {
        RecvMode::Recv => (0..cfg.sockets).map(|k| vec![k]).collect(),
        _ => vec![(0..cfg.sockets).collect()],
    };
    let send_groups: Vec<Vec<usize>> = match cfg.send {
        SendMode::Send | SendMode::Sendfile => (0..cfg.sockets).map(|k| vec![k]).collect(),
        _ => vec![(0..cfg.sockets).collect()],
    };
    let nthreads = recv_groups.len() + send_groups.len();
    let barrier = Barrier::new(nthreads + 1);
    let (done_tx, done_rx) = mpsc::channel::<()>();
    let watchdog = cfg
        .time_limit
        .map_or(WATCHDOG_UNLIMITED, |l| l + WATCHDOG_GRACE);

    let mut reports: Vec<Report> = Vec::new();
    let mut timed_out = false;
    let mut ksoft_start = 0u64;
    crate::cpu::ksoftirqd_ns(); // find the threads before the clock starts
    let (t_start, cpu_start) = std::thread::scope(|scope| {
        let mut handles = Vec::new();
        for g in &recv_groups {
            let fds: Vec<(usize, RawFd)> = g.iter().map(|&k| (k, rx_fds[k])).collect();
            let barrier = &barrier;
            let done = done_tx.clone();
            let mode = cfg.recv;
            let size = cfg.size;
            handles.push(scope.spawn(move || {
                let mut m = Meter::new(barrier);
                let out = recv::run(mode, &mut m, &fds, size);
                finish_thread(Side::Recv, m, out, &fds, done)
            }));
        }
        for g in &send_groups {
            let fds: Vec<(usize, RawFd)> = g.iter().map(|&k| (k, tx_fds[k])).collect();
            let barrier = &barrier;
            let done = done_tx.clone();
            let job = send::Job {
                mode: cfg.send,
                size: cfg.size,
                per_socket,
                time_limit: cfg.time_limit,
                source,
            };
            handles.push(scope.spawn(move || {
                let mut m = Meter::new(barrier);
                let out = send::run(&job, &mut m, &fds);
                finish_thread(Side::Send, m, out, &fds, done)
            }));
        }
        drop(done_tx);
        barrier.wait();
        let t_start = Instant::now();
        let cpu_start = sys::process_cpu_ns();
        ksoft_start = crate::cpu::ksoftirqd_ns();
        let limit = t_start + watchdog;
        let mut finished = 0;
        while finished < nthreads {
            let left = limit.saturating_duration_since(Instant::now());
            match done_rx.recv_timeout(left) {
                Ok(()) => finished += 1,
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    timed_out = true;
                    for &fd in tx_fds.iter().chain(rx_fds.iter()) {
                        let _ = sys::shutdown(fd, libc::SHUT_RDWR);
                    }
                    break;
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
            }
        }
        for h in handles {
            match h.join() {
                Ok(r) => reports.push(r),
                Err(_) => reports.push(Report {
                    side: Side::Recv,
                    cpu_ns: 0,
                    iowq_ns: 0,
                    end: None,
                    out: Err(anyhow::anyhow!("a side thread panicked")),
                }),
            }
        }
        (t_start, cpu_start)
    });
    let cpu_total = sys::process_cpu_ns().saturating_sub(cpu_start);
    let ksoft = crate::cpu::ksoftirqd_ns().saturating_sub(ksoft_start);
    drop(tx);
    drop(rx);
    if timed_out {
        bail!(
            "{} <- {}: the run did not finish within {:?}; sockets were shut down",
            cfg.recv.name(),
            cfg.send.name(),
            watchdog
        );
    }

    let mut sent = vec![None::<u64>; cfg.sockets];
    let mut got = vec![None::<SockRecv>; cfg.sockets];
    let (mut send_cpu, mut recv_cpu, mut send_iowq, mut recv_iowq) = (0u64, 0u64, 0u64, 0u64);
    let mut end = t_start;
    let mut zc = ZcStats::default();
    let mut errors = Vec::new();
    for r in reports {
        match r.out {
            Err(e) => errors.push(format!("{:?} side: {e:#}", r.side)),
            Ok(out) => {
                for (k, n) in out.sent {
                    sent[k] = Some(n);
                }
                for (k, g) in out.received {
                    got[k] = Some(g);
                }
                zc.sends += out.zc.sends;
                zc.notifs += out.zc.notifs;
                zc.copied += out.zc.copied;
            }
        }
        match r.side {
            Side::Send => {
                send_cpu += r.cpu_ns + r.iowq_ns;
                send_iowq += r.iowq_ns;
            }
            Side::Recv => {
                recv_cpu += r.cpu_ns + r.iowq_ns;
                recv_iowq += r.iowq_ns;
                if let Some(e) = r.end {
                    end = end.max(e);
                }
            }
        }
    }
    if !errors.is_empty() {
        bail!(
            "{} <- {}: {}",
            cfg.recv.name(),
            cfg.send.name(),
            errors.join("; ")
        );
    }
    let mut bytes = 0u64;
    for k in 0..cfg.sockets {
        let s = sent[k].with_context(|| format!("socket {k}: sender did not report"))?;
        let g = got[k].with_context(|| format!("socket {k}: receiver did not report"))?;
        verify(source, k, s, g).with_context(|| {
            format!(
                "{} <- {} size {}",
                cfg.recv.name(),
                cfg.send.name(),
                cfg.size
            )
        })?;
        bytes += s;
    }
    if cfg.send == SendMode::UringSendZc && zc.notifs != zc.sends {
        bail!(
            "SEND_ZC: {} sends announced a notification but {} notifications arrived",
            zc.sends,
            zc.notifs
        );
    }
    let secs = end.duration_since(t_start).as_secs_f64().max(1e-9);
    let gb = bytes as f64 / 1e9;
    let s = |ns: u64| ns as f64 / 1e9;
    Ok(RunResult {
        recv: cfg.recv,
        send: cfg.send,
        size: cfg.size,
        sockets: cfg.sockets,
        netns: net.is_netns(),
        bytes,
        secs,
        mbps: bytes as f64 / 1e6 / secs,
        send_cpu_s: s(send_cpu),
        recv_cpu_s: s(recv_cpu),
        send_iowq_s: s(send_iowq),
        recv_iowq_s: s(recv_iowq),
        send_cpu_per_gb: s(send_cpu) / gb,
        recv_cpu_per_gb: s(recv_cpu) / gb,
        other_cpu_s: (cpu_total as f64 - (send_cpu + recv_cpu) as f64) / 1e9,
        ksoftirqd_cpu_s: s(ksoft),
        per_socket: (0..cfg.sockets)
            .map(|k| (sent[k].unwrap_or(0), got[k].map_or(0, |g| g.digest)))
            .collect(),
        capped: bytes < per_socket * cfg.sockets as u64,
        zc_sends: zc.sends,
        zc_notifs: zc.notifs,
        zc_copied: zc.copied,
    })
}

/// Checks that socket `k`'s receiver got exactly the `sent` bytes of the
/// stream: same count, same checksum.
pub fn verify(source: &Source, k: usize, sent: u64, got: SockRecv) -> anyhow::Result<()> {
    if got.bytes != sent {
        bail!(
            "socket {k}: sender sent {sent} bytes, receiver got {}",
            got.bytes
        );
    }
    let want = source.expected_digest(k, sent);
    if got.digest != want {
        bail!(
            "socket {k}: checksum mismatch over {sent} bytes (got {:016x}, want {want:016x})",
            got.digest
        );
    }
    Ok(())
}

fn finish_thread(
    side: Side,
    m: Meter<'_>,
    out: anyhow::Result<ThreadOut>,
    fds: &[(usize, RawFd)],
    done: mpsc::Sender<()>,
) -> Report {
    if out.is_err() {
        // Unblock the peers: they would wait forever for this side.
        for &(_, fd) in fds {
            let _ = sys::shutdown(fd, libc::SHUT_RDWR);
        }
    }
    if !m.started {
        // Failed before the start line: the others still wait there.
        m.barrier.wait();
    }
    let _ = done.send(());
    Report {
        side,
        cpu_ns: m.cpu_ns,
        iowq_ns: m.iowq_ns,
        end: m.end,
        out,
    }
}
