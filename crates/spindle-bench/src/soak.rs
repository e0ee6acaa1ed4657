//! `soak`: mixed traffic at a fixed rate against each server for a long time, with the
//! server's RSS, descriptors and io_uring CQ overflows sampled every second. A run
//! fails if any of them grows without bound (the slope over the last half of the run),
//! if the server exits, or if a client ever gets bytes that are not the file's.
//!
//! The traffic, one scenario per connection, drawn from a seeded PRNG: GETs (one to
//! five per connection, bodies checked), HEADs, ranges, conditionals, pipelined
//! bursts, malformed requests, clients that reset mid-response, slow readers,
//! slowloris heads, and GETs of files that a mutator keeps replacing (rename over),
//! truncating in place and renaming away. Idle keep-alive connections are held beside
//! all that and recycled.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use rand::rngs::SmallRng;
use rand::{Rng, RngCore, SeedableRng};
use serde_json::json;

use crate::servers::{Running, Server, ServerSetup};
use crate::sys;

/// The files clients check bytes against: (name, size).
const STABLE: [(&str, usize); 5] = [
    ("s-1k", 1024),
    ("s-20k", 20_000),
    ("s-100k", 100 * 1024),
    ("s-700k", 700 * 1024),
    ("s-3m", 3 << 20),
];
/// Files the mutator rewrites, truncates and renames while they are served.
const CHURN_FILES: usize = 4;
const CHURN_SIZE: usize = 1 << 20;
/// Longest a client waits for the server before it counts a stall.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(20);
/// The server's header timeout in the soak, so that slowloris heads are cut quickly.
const HEADER_TIMEOUT_S: u64 = 2;
/// Scenarios queued for the clients at most; more are counted as skipped.
const QUEUE: usize = 1024;
/// Growth allowed over an hour at the fitted slope: this share of the mean, or the
/// floor, whichever is larger.
const GROWTH_SHARE: f64 = 0.10;
const RSS_FLOOR_KIB: f64 = 4096.0;
const FDS_FLOOR: f64 = 64.0;
/// Shorter runs report the slopes but are not failed on them: warming up (the open-file
/// cache, the idle connections, buffer pools) dominates the first minutes.
const MIN_GROWTH_MINUTES: f64 = 10.0;

#[derive(clap::Args, Debug, Clone)]
pub struct SoakArgs {
    /// Servers to soak, one after another (spindle backends).
    #[arg(long, value_delimiter = ',', default_value = "spindle-io-uring")]
    pub servers: Vec<String>,
    /// Minutes per server.
    #[arg(long, default_value_t = 60.0)]
    pub minutes: f64,
    /// Minutes for each server after the first (default: --minutes); e.g. an hour of
    /// io-uring, then shorter runs of the seed backends.
    #[arg(long)]
    pub minutes_after_first: Option<f64>,
    /// Scenarios started per second (each on its own connection).
    #[arg(long, default_value_t = 200)]
    pub rate: u32,
    /// Client threads that run the scenarios.
    #[arg(long, default_value_t = 16)]
    pub clients: usize,
    /// Idle keep-alive connections held beside the traffic.
    #[arg(long, default_value_t = 200)]
    pub idle: usize,
    /// Serve the files through slowdisk with this share of reads failing with EIO
    /// (0 to 1; needs root and /dev/fuse). Clients then also accept a 500, or a
    /// body cut short after correct bytes, and count them; the churned files are
    /// left alone (slowdisk mirrors a set that does not change).
    #[arg(long, default_value_t = 0.0)]
    pub fail_rate: f64,
    /// The mutator does not truncate files in place (it still replaces and
    /// renames them): bytes that `sendfile` has queued can turn to zeros when
    /// their file is truncated, an open finding (docs/reliability.md).
    #[arg(long)]
    pub no_truncate: bool,
    /// Extra flag for spindle (repeatable), e.g. `--spindle-flag=--open-file-cache=0`.
    #[arg(long = "spindle-flag", allow_hyphen_values = true)]
    pub spindle_flags: Vec<String>,
    /// PRNG seed (default: from the clock).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Directory for the report (soak.md, soak.json).
    #[arg(long, default_value = "results")]
    pub out: PathBuf,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scenario {
    Get,
    Head,
    Range,
    Conditional,
    Pipelined,
    Malformed,
    Reset,
    SlowReader,
    Slowloris,
    Churn,
}

/// Scenario and weight (out of the sum).
const MIX: [(Scenario, u32); 10] = [
    (Scenario::Get, 30),
    (Scenario::Head, 5),
    (Scenario::Range, 10),
    (Scenario::Conditional, 5),
    (Scenario::Pipelined, 10),
    (Scenario::Malformed, 10),
    (Scenario::Reset, 8),
    (Scenario::SlowReader, 4),
    (Scenario::Slowloris, 2),
    (Scenario::Churn, 16),
];

/// Requests that must be refused: each gets a 4xx (or 501/505) and a close.
const MALFORMED: [&[u8]; 10] = [
    b"GET / HTTP/1.1\r\nHost: x\r\nBad Header\r\n\r\n",
    b"GET /s-1k HTTP/9.9\r\nHost: x\r\n\r\n",
    b"\x00\x01\x02garbage\r\n\r\n",
    b"GET /../../etc/passwd HTTP/1.1\r\nHost: x\r\n\r\n",
    b"GET /s-1k HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n",
    b"GET /s-1k HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n",
    b"GET /s-1k HTTP/1.1\r\n\r\n",
    b"GET s-1k HTTP/1.1\r\nHost: x\r\n\r\n",
    b"GET /%zz HTTP/1.1\r\nHost: x\r\n\r\n",
    b"GET /s-1k HTTP/1.1\r\nHost: x\r\nRange: bytes=99999999-\r\n\r\n",
];

#[derive(Default)]
struct Counts {
    by_scenario: [AtomicU64; 10],
    requests: AtomicU64,
    /// Bytes that were not the file's, a wrong status, a missing close: each a defect.
    errors: AtomicU64,
    /// The server made a client wait longer than CLIENT_TIMEOUT.
    stalls: AtomicU64,
    /// Scenarios the clients could not start in time (the queue was full).
    skipped: AtomicU64,
    /// Connections refused or reset when they should not have been.
    connect_failures: AtomicU64,
    /// With --fail-rate: a read failed before the head (a 500), or after it (a
    /// correct prefix, then a close).
    fault_500: AtomicU64,
    fault_cut: AtomicU64,
}

struct Ctx {
    addr: SocketAddr,
    root: PathBuf,
    stable: Vec<Vec<u8>>,
    counts: Counts,
    /// The first few error descriptions, for the report.
    first_errors: Mutex<Vec<String>>,
    stop: AtomicBool,
    /// Disk faults are injected (--fail-rate).
    faults: bool,
}

impl Ctx {
    /// With faults injected, a 500 (the read failed before the head) or a body
    /// cut short after correct bytes is what the server must do: counted, true.
    fn fault(&self, r: &Reply, want: &[u8]) -> bool {
        if !self.faults {
            return false;
        }
        if r.status == 500 && !r.cut {
            self.counts.fault_500.fetch_add(1, Relaxed);
            return true;
        }
        if r.cut && r.body.len() < want.len() && r.body[..] == want[..r.body.len()] {
            self.counts.fault_cut.fetch_add(1, Relaxed);
            return true;
        }
        false
    }

    fn error(&self, what: String) {
        self.counts.errors.fetch_add(1, Relaxed);
        let mut e = self.first_errors.lock().unwrap_or_else(|p| p.into_inner());
        if e.len() < 20 {
            // Said at once too, so that a long run shows its failures as they come.
            eprintln!("soak: check failed: {what}");
            e.push(what);
        }
    }
}

/// Content of a stable file or of one version of a churn file: 8 bytes of seed, then
/// bytes drawn from it, so that a body names the version it came from. (Only whole
/// contents compare: the PRNG fills a tail shorter than 8 bytes differently.)
fn content(seed: u64, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    v[..8].copy_from_slice(&seed.to_le_bytes());
    SmallRng::seed_from_u64(seed).fill_bytes(&mut v[8..]);
    v
}

/// One response as the client saw it.
struct Reply {
    status: u16,
    head: String,
    length: Option<usize>,
    body: Vec<u8>,
    /// The server closed the connection before the whole body (or right after it).
    cut: bool,
}

fn header<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.lines().find_map(|l| {
        let (n, v) = l.split_once(':')?;
        n.eq_ignore_ascii_case(name).then(|| v.trim())
    })
}

/// Reads one response: head, then the body by Content-Length (none for HEAD, 304 and
/// when `head_only`). `Err` when the connection ends or stalls inside the head.
fn read_reply(s: &mut TcpStream, head_only: bool) -> std::io::Result<Reply> {
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if s.read(&mut b)? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        head.push(b[0]);
        if head.len() > 64 * 1024 {
            return Err(std::io::ErrorKind::InvalidData.into());
        }
    }
    let head = String::from_utf8_lossy(&head).into_owned();
    let status = head.get(9..12).and_then(|s| s.parse().ok()).unwrap_or(0);
    let length = header(&head, "Content-Length").and_then(|v| v.parse().ok());
    let want = if head_only || status == 304 {
        0
    } else {
        length.unwrap_or(0)
    };
    let mut body = Vec::with_capacity(want);
    let mut buf = vec![0u8; 64 * 1024];
    let mut cut = false;
    while body.len() < want {
        let n = (want - body.len()).min(buf.len());
        match s.read(&mut buf[..n]) {
            Ok(0) => {
                cut = true;
                break;
            }
            Ok(k) => body.extend_from_slice(&buf[..k]),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Err(e),
            Err(_) => {
                cut = true;
                break;
            }
        }
    }
    Ok(Reply {
        status,
        head,
        length,
        body,
        cut,
    })
}

fn connect(ctx: &Ctx) -> Option<TcpStream> {
    match TcpStream::connect_timeout(&ctx.addr, CLIENT_TIMEOUT) {
        Ok(s) => {
            let _ = s.set_read_timeout(Some(CLIENT_TIMEOUT));
            let _ = s.set_nodelay(true);
            Some(s)
        }
        Err(_) => {
            ctx.counts.connect_failures.fetch_add(1, Relaxed);
            None
        }
    }
}

/// Runs `f`, counting an I/O timeout as a stall and any other I/O error on a
/// connection that should have worked as an error.
fn checked(ctx: &Ctx, what: Scenario, r: std::io::Result<()>) {
    match r {
        Ok(()) => {}
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ) =>
        {
            ctx.counts.stalls.fetch_add(1, Relaxed);
            ctx.error(format!(
                "{what:?}: the server stalled past {CLIENT_TIMEOUT:?}"
            ));
        }
        Err(e) => ctx.error(format!("{what:?}: {e}")),
    }
}

fn send(s: &mut TcpStream, req: &str) -> std::io::Result<()> {
    s.write_all(req.as_bytes())
}

fn get_req(path: &str, extra: &str) -> String {
    format!("GET /{path} HTTP/1.1\r\nHost: soak\r\n{extra}\r\n")
}

fn run_scenario(ctx: &Ctx, sc: Scenario, rng: &mut SmallRng) {
    let Some(mut s) = connect(ctx) else { return };
    let r = match sc {
        Scenario::Get => (|| {
            for _ in 0..rng.random_range(1..=5) {
                let i = rng.random_range(0..STABLE.len());
                send(&mut s, &get_req(STABLE[i].0, ""))?;
                let r = read_reply(&mut s, false)?;
                ctx.counts.requests.fetch_add(1, Relaxed);
                if ctx.fault(&r, &ctx.stable[i]) {
                    if r.cut {
                        break;
                    }
                    continue;
                }
                if r.status != 200 || r.cut || r.body != ctx.stable[i] {
                    ctx.error(format!(
                        "GET /{}: status {} cut {} bytes {}",
                        STABLE[i].0,
                        r.status,
                        r.cut,
                        r.body.len()
                    ));
                    break;
                }
            }
            Ok(())
        })(),
        Scenario::Head => (|| {
            let i = rng.random_range(0..STABLE.len());
            send(
                &mut s,
                &format!("HEAD /{} HTTP/1.1\r\nHost: soak\r\n\r\n", STABLE[i].0),
            )?;
            let r = read_reply(&mut s, true)?;
            ctx.counts.requests.fetch_add(1, Relaxed);
            if r.status != 200 || r.length != Some(STABLE[i].1) {
                ctx.error(format!(
                    "HEAD /{}: {}",
                    STABLE[i].0,
                    r.head.lines().next().unwrap_or("")
                ));
            }
            Ok(())
        })(),
        Scenario::Range => (|| {
            let i = rng.random_range(0..STABLE.len());
            let len = STABLE[i].1;
            let a = rng.random_range(0..len);
            let b = rng.random_range(a..len);
            send(
                &mut s,
                &get_req(STABLE[i].0, &format!("Range: bytes={a}-{b}\r\n")),
            )?;
            let r = read_reply(&mut s, false)?;
            ctx.counts.requests.fetch_add(1, Relaxed);
            if ctx.fault(&r, &ctx.stable[i][a..=b]) {
                return Ok(());
            }
            if r.status != 206 || r.cut || r.body[..] != ctx.stable[i][a..=b] {
                ctx.error(format!(
                    "Range {a}-{b} of /{}: status {} bytes {}",
                    STABLE[i].0,
                    r.status,
                    r.body.len()
                ));
            }
            Ok(())
        })(),
        Scenario::Conditional => (|| {
            let i = rng.random_range(0..STABLE.len());
            send(&mut s, &get_req(STABLE[i].0, ""))?;
            let r = read_reply(&mut s, false)?;
            if ctx.fault(&r, &ctx.stable[i]) {
                return Ok(());
            }
            let Some(etag) = header(&r.head, "ETag").map(str::to_string) else {
                ctx.error(format!("GET /{}: no ETag", STABLE[i].0));
                return Ok(());
            };
            send(
                &mut s,
                &get_req(STABLE[i].0, &format!("If-None-Match: {etag}\r\n")),
            )?;
            let r = read_reply(&mut s, false)?;
            ctx.counts.requests.fetch_add(2, Relaxed);
            if r.status != 304 {
                ctx.error(format!("If-None-Match on /{}: {}", STABLE[i].0, r.status));
            }
            Ok(())
        })(),
        Scenario::Pipelined => (|| {
            let picks: Vec<usize> = (0..rng.random_range(2..=8))
                .map(|_| rng.random_range(0..3)) // the small ones
                .collect();
            let burst: String = picks.iter().map(|&i| get_req(STABLE[i].0, "")).collect();
            send(&mut s, &burst)?;
            for &i in &picks {
                let r = read_reply(&mut s, false)?;
                ctx.counts.requests.fetch_add(1, Relaxed);
                if ctx.fault(&r, &ctx.stable[i]) {
                    if r.cut {
                        break;
                    }
                    continue;
                }
                if r.status != 200 || r.body != ctx.stable[i] {
                    ctx.error(format!(
                        "pipelined /{}: status {} (out of order?)",
                        STABLE[i].0, r.status
                    ));
                    break;
                }
            }
            Ok(())
        })(),
        Scenario::Malformed => (|| {
            let req = MALFORMED[rng.random_range(0..MALFORMED.len())];
            s.write_all(req)?;
            ctx.counts.requests.fetch_add(1, Relaxed);
            match read_reply(&mut s, false) {
                // The range past the end is well-formed: a 416 on a kept connection.
                Ok(r) if r.status == 416 => {}
                Ok(r) if (400..500).contains(&r.status) || r.status == 501 || r.status == 505 => {
                    let mut rest = [0u8; 64];
                    if !matches!(s.read(&mut rest), Ok(0) | Err(_)) {
                        ctx.error(format!(
                            "{:?}: no close after {}",
                            String::from_utf8_lossy(req),
                            r.status
                        ));
                    }
                }
                Ok(r) => ctx.error(format!(
                    "{:?}: status {}",
                    String::from_utf8_lossy(req),
                    r.status
                )),
                // Closing without an answer is allowed for bytes that are no request.
                Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {}
                Err(e) => return Err(e),
            }
            Ok(())
        })(),
        Scenario::Reset => (|| {
            let i = rng.random_range(3..STABLE.len());
            send(&mut s, &get_req(STABLE[i].0, ""))?;
            let mut buf = vec![0u8; rng.random_range(1..64 * 1024)];
            let _ = s.read(&mut buf)?;
            ctx.counts.requests.fetch_add(1, Relaxed);
            let _ = socket2_linger_zero(&s);
            Ok(())
        })(),
        Scenario::SlowReader => (|| {
            send(&mut s, &get_req("s-3m", ""))?;
            ctx.counts.requests.fetch_add(1, Relaxed);
            // The head first: a 500 (a fault before it) has a body of its own and
            // keeps the connection, so nothing more would come.
            let r = read_reply(&mut s, true)?;
            if ctx.faults && r.status == 500 {
                ctx.counts.fault_500.fetch_add(1, Relaxed);
                return Ok(());
            }
            if r.status != 200 {
                ctx.error(format!("slow reader: status {}", r.status));
                return Ok(());
            }
            let mut buf = vec![0u8; 64 * 1024];
            for _ in 0..10 {
                if s.read(&mut buf)? == 0 {
                    if ctx.faults {
                        ctx.counts.fault_cut.fetch_add(1, Relaxed);
                    } else {
                        ctx.error("slow reader: the server closed a live download".into());
                    }
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            Ok(())
        })(),
        Scenario::Slowloris => (|| {
            send(&mut s, "GET /s-1k HTTP/1.1\r\nHost: soak\r\n")?;
            let t = Instant::now();
            let mut b = [0u8; 256];
            loop {
                if s.write_all(b"X").is_err() {
                    break;
                }
                let _ = s.set_read_timeout(Some(Duration::from_millis(500)));
                match s.read(&mut b) {
                    Ok(0) | Err(_) if t.elapsed() >= Duration::from_millis(400) => {
                        if t.elapsed() > Duration::from_secs(HEADER_TIMEOUT_S + 3) {
                            ctx.error(format!("slowloris head held {:?}", t.elapsed()));
                        }
                        break;
                    }
                    _ => {}
                }
                if t.elapsed() > Duration::from_secs(HEADER_TIMEOUT_S + 5) {
                    ctx.error("slowloris head never timed out".into());
                    break;
                }
            }
            ctx.counts.requests.fetch_add(1, Relaxed);
            Ok(())
        })(),
        Scenario::Churn => (|| {
            let f = format!("c-{}", rng.random_range(0..CHURN_FILES));
            send(&mut s, &get_req(&f, ""))?;
            let r = read_reply(&mut s, false)?;
            ctx.counts.requests.fetch_add(1, Relaxed);
            match r.status {
                404 => {}
                200 => {
                    // Whatever version was opened: its own bytes, never others, never
                    // padding; a body that ends early ends with a close.
                    if r.body.len() >= 8 {
                        let seed = u64::from_le_bytes(r.body[..8].try_into().unwrap());
                        // Every version is written whole, then only shortened: its
                        // bytes are a prefix of the whole version's.
                        let want = content(seed, CHURN_SIZE);
                        if let Some(at) = r.body.iter().zip(&want).position(|(a, b)| a != b) {
                            ctx.error(format!(
                                "/{f}: byte {at} of {} (Content-Length {:?}) is not of the version the body began with",
                                r.body.len(),
                                r.length
                            ));
                        }
                    }
                    if r.body.len() < r.length.unwrap_or(0) && !r.cut {
                        ctx.error(format!("/{f}: short body without a close"));
                    }
                }
                500 if ctx.faults => {
                    ctx.counts.fault_500.fetch_add(1, Relaxed);
                }
                st => ctx.error(format!("/{f}: status {st}")),
            }
            Ok(())
        })(),
    };
    checked(ctx, sc, r);
}

/// Closes with SO_LINGER 0: a reset instead of a FIN.
fn socket2_linger_zero(s: &TcpStream) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let l = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: a live socket, and a pointer to a live `linger` of the size passed.
    let rc = unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&l as *const libc::linger).cast(),
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Replaces, truncates and renames the churn files, a few times a second.
fn mutator(ctx: &Ctx, seed: u64, truncate: bool) {
    let mut rng = SmallRng::seed_from_u64(seed ^ 0xC0FFEE);
    let mut version = seed.wrapping_mul(1000);
    while !ctx.stop.load(Relaxed) {
        let f = ctx
            .root
            .join(format!("c-{}", rng.random_range(0..CHURN_FILES)));
        version += 1;
        let kind = match rng.random_range(0..3) {
            1 if !truncate => 0,
            k => k,
        };
        let _ = match kind {
            // A new version, renamed over the old (how rsync and deploy tools replace).
            0 => {
                let tmp = f.with_extension("tmp");
                std::fs::write(&tmp, content(version, CHURN_SIZE))
                    .and_then(|_| std::fs::rename(&tmp, &f))
            }
            // Truncated in place (shorter only: a longer length would add a hole of
            // zeros) while someone may be sending it.
            1 => std::fs::OpenOptions::new()
                .write(true)
                .open(&f)
                .and_then(|h| {
                    let len = h.metadata()?.len();
                    h.set_len(rng.random_range(0..=len))
                }),
            // Gone for a moment, then back.
            _ => {
                let away = f.with_extension("away");
                std::fs::rename(&f, &away).and_then(|_| {
                    std::thread::sleep(Duration::from_millis(20));
                    std::fs::rename(&away, &f)
                })
            }
        };
        std::thread::sleep(Duration::from_millis(rng.random_range(50..300)));
    }
}

/// Holds `n` idle keep-alive connections, replacing a tenth of them every second.
fn idler(ctx: &Ctx, n: usize) {
    let mut held: Vec<TcpStream> = Vec::with_capacity(n);
    while !ctx.stop.load(Relaxed) {
        let drop_n = (n / 10).max(1).min(held.len());
        held.drain(..drop_n);
        while held.len() < n && !ctx.stop.load(Relaxed) {
            match connect(ctx) {
                Some(mut s) => {
                    // One request, so that the connection is a kept-alive one.
                    if send(&mut s, &get_req("s-1k", "")).is_ok()
                        && read_reply(&mut s, false).is_ok()
                    {
                        held.push(s);
                    }
                }
                None => break,
            }
        }
        std::thread::sleep(Duration::from_secs(1));
    }
}

/// One sample of the server.
#[derive(Debug, Clone, Copy)]
struct Sample {
    t: f64,
    rss_kib: u64,
    fds: u64,
    cq_overflow: u64,
}

fn sample(pgid: u32, t: f64) -> Sample {
    let mut fds = 0;
    let mut cq_overflow = 0;
    for pid in sys::group_pids(pgid) {
        let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
            continue;
        };
        for e in dir.flatten() {
            fds += 1;
            if std::fs::read_link(e.path()).is_ok_and(|l| l == Path::new("anon_inode:[io_uring]")) {
                let info = std::fs::read_to_string(format!(
                    "/proc/{pid}/fdinfo/{}",
                    e.file_name().to_string_lossy()
                ))
                .unwrap_or_default();
                // The overflowed completions are listed after this line, indented, one
                // per line; the next section ("NAPI:") is not.
                if let Some(rest) = info.split("CqOverflowList:").nth(1) {
                    cq_overflow += rest
                        .lines()
                        .skip(1)
                        .take_while(|l| l.starts_with(char::is_whitespace))
                        .filter(|l| !l.trim().is_empty())
                        .count() as u64;
                }
            }
        }
    }
    Sample {
        t,
        rss_kib: sys::group_rss_kib(pgid),
        fds,
        cq_overflow,
    }
}

/// Least-squares slope of `y` over `t`, per second.
fn slope(points: &[(f64, f64)]) -> f64 {
    let n = points.len() as f64;
    if n < 2.0 {
        return 0.0;
    }
    let mt = points.iter().map(|p| p.0).sum::<f64>() / n;
    let my = points.iter().map(|p| p.1).sum::<f64>() / n;
    let cov: f64 = points.iter().map(|p| (p.0 - mt) * (p.1 - my)).sum();
    let var: f64 = points.iter().map(|p| (p.0 - mt).powi(2)).sum();
    if var == 0.0 {
        0.0
    } else {
        cov / var
    }
}

struct Outcome {
    name: String,
    seconds: f64,
    samples: Vec<Sample>,
    counts: [u64; 10],
    requests: u64,
    errors: u64,
    stalls: u64,
    skipped: u64,
    connect_failures: u64,
    fault_500: u64,
    fault_cut: u64,
    first_errors: Vec<String>,
    crashed: bool,
    rss_growth_per_hour: f64,
    fds_growth_per_hour: f64,
    verdict: Vec<String>,
}

fn soak_one(a: &SoakArgs, server: &Server, minutes: f64, seed: u64) -> Result<Outcome> {
    let root = std::env::temp_dir().join(format!(
        "spindle-soak-{}-{}",
        std::process::id(),
        server.name()
    ));
    std::fs::create_dir_all(&root)?;
    let stable: Vec<Vec<u8>> = STABLE
        .iter()
        .enumerate()
        .map(|(i, (_, len))| content(i as u64 + 1, *len))
        .collect();
    for ((name, _), bytes) in STABLE.iter().zip(&stable) {
        std::fs::write(root.join(name), bytes)?;
    }
    for i in 0..CHURN_FILES {
        std::fs::write(
            root.join(format!("c-{i}")),
            content(seed + i as u64, CHURN_SIZE),
        )?;
    }
    // With --fail-rate, the server reads the files through slowdisk (a fast model:
    // the faults are the point, not the seeks), the daemon outside the server.
    let faults = a.fail_rate > 0.0;
    let disk = if faults {
        let exe = std::env::current_exe()?;
        let mut cmd = std::process::Command::new(exe);
        cmd.arg("slowdisk").stdout(std::process::Stdio::null());
        let mut opts = slowdisk::MountOptions::new(
            &root,
            root.with_extension("mnt"),
            root.with_extension("stats.json"),
        );
        opts.model = slowdisk::ModelArgs {
            seek_ms: 0.2,
            seek_min_ms: 0.05,
            rpm: 60_000.0,
            mbps: 2000.0,
            ..slowdisk::ModelArgs::default()
        };
        opts.faults = slowdisk::FaultArgs {
            fail_rate: a.fail_rate,
            fault_seed: seed,
            ..slowdisk::FaultArgs::default()
        };
        Some(
            slowdisk::MountHandle::spawn(cmd, &opts)
                .context("mounting slowdisk for --fail-rate")?,
        )
    } else {
        None
    };
    let setup = ServerSetup {
        root: disk
            .as_ref()
            .map_or(root.clone(), |d| d.mount_point().to_path_buf()),
        workers: 1,
        cpus: None,
        cgroup_procs: None,
        spindle_flags: ["--header-timeout".to_string(), HEADER_TIMEOUT_S.to_string()]
            .into_iter()
            .chain(a.spindle_flags.iter().cloned())
            .collect(),
    };
    let mut running = Running::start(server, &setup)?;
    let addr: SocketAddr = format!("127.0.0.1:{}", running.port).parse()?;
    let ctx = Arc::new(Ctx {
        addr,
        root: root.clone(),
        stable,
        counts: Counts::default(),
        first_errors: Mutex::new(Vec::new()),
        stop: AtomicBool::new(false),
        faults,
    });
    let (tx, rx) = mpsc::sync_channel::<(Scenario, u64)>(QUEUE);
    let rx = Arc::new(Mutex::new(rx));
    let mut threads = Vec::new();
    for _ in 0..a.clients.max(1) {
        let (ctx, rx) = (ctx.clone(), rx.clone());
        threads.push(std::thread::spawn(move || loop {
            let job = rx.lock().unwrap_or_else(|p| p.into_inner()).recv();
            let Ok((sc, s)) = job else { break };
            let mut rng = SmallRng::seed_from_u64(s);
            run_scenario(&ctx, sc, &mut rng);
        }));
    }
    if !faults {
        let ctx = ctx.clone();
        let truncate = !a.no_truncate;
        threads.push(std::thread::spawn(move || mutator(&ctx, seed, truncate)));
    }
    {
        let (ctx, n) = (ctx.clone(), a.idle);
        threads.push(std::thread::spawn(move || idler(&ctx, n)));
    }
    let total: u32 = MIX.iter().map(|m| m.1).sum();
    let mut rng = SmallRng::seed_from_u64(seed);
    let t0 = Instant::now();
    let run_for = Duration::from_secs_f64(minutes * 60.0);
    let interval = Duration::from_secs_f64(1.0 / a.rate.max(1) as f64);
    let mut next = t0;
    let mut next_sample = t0;
    let mut samples = Vec::new();
    let mut crashed = false;
    while t0.elapsed() < run_for {
        let now = Instant::now();
        if now >= next_sample {
            samples.push(sample(running.pgid, t0.elapsed().as_secs_f64()));
            next_sample += Duration::from_secs(1);
            if !running.alive() {
                crashed = true;
                break;
            }
        }
        while next <= now {
            let mut w = rng.random_range(0..total);
            let sc = MIX
                .iter()
                .find(|(_, weight)| {
                    if w < *weight {
                        true
                    } else {
                        w -= weight;
                        false
                    }
                })
                .map(|m| m.0)
                .expect("weights cover the range");
            match tx.try_send((sc, rng.random())) {
                Ok(()) => {
                    let i = MIX.iter().position(|m| m.0 == sc).expect("in MIX");
                    ctx.counts.by_scenario[i].fetch_add(1, Relaxed);
                }
                Err(_) => {
                    ctx.counts.skipped.fetch_add(1, Relaxed);
                }
            }
            next += interval;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    let seconds = t0.elapsed().as_secs_f64();
    drop(tx);
    ctx.stop.store(true, Relaxed);
    for t in threads {
        let _ = t.join();
    }
    crashed |= !running.alive();
    running.stop()?;
    if let Some(d) = disk {
        d.stop().context("stopping slowdisk")?;
    }
    let _ = std::fs::remove_dir_all(&root);

    // The last half of the run: the slope an unbounded growth would show.
    let half: Vec<&Sample> = samples.iter().filter(|s| s.t >= seconds / 2.0).collect();
    let fit = |f: &dyn Fn(&Sample) -> f64| {
        slope(&half.iter().map(|s| (s.t, f(s))).collect::<Vec<_>>()) * 3600.0
    };
    let mean = |f: &dyn Fn(&Sample) -> f64| {
        half.iter().map(|s| f(s)).sum::<f64>() / half.len().max(1) as f64
    };
    let rss_growth = fit(&|s| s.rss_kib as f64);
    let fds_growth = fit(&|s| s.fds as f64);
    let c = &ctx.counts;
    let mut verdict = Vec::new();
    if crashed {
        verdict.push("the server exited during the run".to_string());
    }
    let judge_growth = seconds >= MIN_GROWTH_MINUTES * 60.0;
    let rss_allowed = (mean(&|s| s.rss_kib as f64) * GROWTH_SHARE).max(RSS_FLOOR_KIB);
    if judge_growth && rss_growth > rss_allowed {
        verdict.push(format!(
            "RSS grows {rss_growth:.0} KiB/hour (allowed {rss_allowed:.0})"
        ));
    }
    let fds_allowed = (mean(&|s| s.fds as f64) * GROWTH_SHARE).max(FDS_FLOOR);
    if judge_growth && fds_growth > fds_allowed {
        verdict.push(format!(
            "descriptors grow {fds_growth:.0}/hour (allowed {fds_allowed:.0})"
        ));
    }
    if samples.iter().any(|s| s.cq_overflow > 0) {
        verdict.push("io_uring completions overflowed".into());
    }
    let errors = c.errors.load(Relaxed);
    if errors > 0 {
        verdict.push(format!("{errors} client checks failed"));
    }
    let first_errors = ctx
        .first_errors
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clone();
    Ok(Outcome {
        name: server.name(),
        seconds,
        samples,
        counts: std::array::from_fn(|i| c.by_scenario[i].load(Relaxed)),
        requests: c.requests.load(Relaxed),
        errors,
        stalls: c.stalls.load(Relaxed),
        skipped: c.skipped.load(Relaxed),
        connect_failures: c.connect_failures.load(Relaxed),
        fault_500: c.fault_500.load(Relaxed),
        fault_cut: c.fault_cut.load(Relaxed),
        first_errors,
        crashed,
        rss_growth_per_hour: rss_growth,
        fds_growth_per_hour: fds_growth,
        verdict,
    })
}

pub fn run(a: SoakArgs) -> Result<()> {
    for m in [Some(a.minutes), a.minutes_after_first]
        .into_iter()
        .flatten()
    {
        if !m.is_finite() || m <= 0.0 {
            bail!("--minutes and --minutes-after-first must be more than 0, got {m}");
        }
    }
    if !(0.0..=1.0).contains(&a.fail_rate) {
        bail!("--fail-rate must be from 0 to 1, got {}", a.fail_rate);
    }
    if a.fail_rate > 0.0 && (!sys::is_root() || !Path::new("/dev/fuse").exists()) {
        bail!("--fail-rate serves the files through slowdisk (FUSE): run as root, with /dev/fuse");
    }
    let seed = a.seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64)
    });
    let mut outcomes = Vec::new();
    for (i, name) in a.servers.iter().enumerate() {
        let minutes = match a.minutes_after_first {
            Some(m) if i > 0 => m,
            _ => a.minutes,
        };
        let server = Server::parse(name)?;
        if !matches!(server, Server::Spindle(_)) {
            bail!("soak runs spindle's backends only (got {name})");
        }
        eprintln!(
            "soak: {name} for {minutes} min at {} scenarios/s, seed {seed}",
            a.rate
        );
        let o = soak_one(&a, &server, minutes, seed).with_context(|| format!("soaking {name}"))?;
        eprintln!(
            "soak: {name}: {} requests, {} errors, RSS {} -> {} KiB, fds {} -> {}: {}",
            o.requests,
            o.errors,
            o.samples.first().map_or(0, |s| s.rss_kib),
            o.samples.last().map_or(0, |s| s.rss_kib),
            o.samples.first().map_or(0, |s| s.fds),
            o.samples.last().map_or(0, |s| s.fds),
            if o.verdict.is_empty() {
                "pass".to_string()
            } else {
                o.verdict.join("; ")
            }
        );
        outcomes.push(o);
    }
    write_report(&a, seed, &outcomes)?;
    let failed: Vec<&str> = outcomes
        .iter()
        .filter(|o| !o.verdict.is_empty())
        .map(|o| o.name.as_str())
        .collect();
    if !failed.is_empty() {
        bail!("soak failed for {}", failed.join(", "));
    }
    Ok(())
}

fn write_report(a: &SoakArgs, seed: u64, outcomes: &[Outcome]) -> Result<()> {
    std::fs::create_dir_all(&a.out)?;
    let cmd = std::env::args().collect::<Vec<_>>().join(" ");
    let mut md = format!(
        "# soak: mixed traffic, RSS and descriptors over time\n\nCommand: `{cmd}` (seed {seed})\n\n\
{} scenarios per second, {} client threads, {} idle keep-alive connections held and recycled, one worker, \
`--header-timeout {HEADER_TIMEOUT_S}`. Growth is the least-squares slope over the last half of the run, per hour; \
a run fails on growth above {:.0}% of the mean (at least {RSS_FLOOR_KIB:.0} KiB of RSS or {FDS_FLOOR:.0} descriptors), \
a CQ overflow, a server exit or any failed client check; runs under {MIN_GROWTH_MINUTES:.0} minutes are not judged on growth \
(warming up dominates them).{}\n\n\
| server | minutes | requests | failed checks | stalls | skipped | faults seen: 500 / cut | RSS KiB start / end / max | RSS growth KiB/h | fds start / end / max | fds growth /h | CQ overflows | verdict |\n\
|---|---:|---:|---:|---:|---:|---|---|---:|---|---:|---:|---|\n",
        a.rate, a.clients, a.idle, GROWTH_SHARE * 100.0,
        if a.fail_rate > 0.0 {
            format!(
                " Files served through slowdisk with {:.1}% of reads failing (EIO, seeded): a client accepts a 500, or correct bytes cut short by a close, and counts it as a fault seen; the churned files stay still.",
                a.fail_rate * 100.0
            )
        } else {
            String::new()
        }
    );
    for o in outcomes {
        let f = |g: &dyn Fn(&Sample) -> u64| {
            format!(
                "{} / {} / {}",
                o.samples.first().map_or(0, g),
                o.samples.last().map_or(0, g),
                o.samples.iter().map(g).max().unwrap_or(0)
            )
        };
        md += &format!(
            "| {} | {:.1} | {} | {} | {} | {} | {} / {} | {} | {:.0} | {} | {:.1} | {} | {} |\n",
            o.name,
            o.seconds / 60.0,
            o.requests,
            o.errors,
            o.stalls,
            o.skipped,
            o.fault_500,
            o.fault_cut,
            f(&|s| s.rss_kib),
            o.rss_growth_per_hour,
            f(&|s| s.fds),
            o.fds_growth_per_hour,
            o.samples.iter().map(|s| s.cq_overflow).max().unwrap_or(0),
            if o.verdict.is_empty() {
                "pass".to_string()
            } else {
                o.verdict.join("; ")
            }
        );
    }
    md += "\nScenarios started, per server:\n\n| server |";
    for (sc, _) in MIX {
        md += &format!(" {sc:?} |");
    }
    md += "\n|---|";
    md += &"---:|".repeat(MIX.len());
    md += "\n";
    for o in outcomes {
        md += &format!("| {} |", o.name);
        for c in o.counts {
            md += &format!(" {c} |");
        }
        md += "\n";
    }
    for o in outcomes.iter().filter(|o| !o.first_errors.is_empty()) {
        md += &format!("\nFirst failed checks, {}:\n\n", o.name);
        for e in &o.first_errors {
            md += &format!("- {e}\n");
        }
    }
    std::fs::write(a.out.join("soak.md"), md)?;
    let json = json!({
        "command": cmd,
        "seed": seed,
        "rate": a.rate,
        "fail_rate": a.fail_rate,
        "servers": outcomes.iter().map(|o| json!({
            "server": o.name,
            "seconds": o.seconds,
            "requests": o.requests,
            "errors": o.errors,
            "stalls": o.stalls,
            "skipped": o.skipped,
            "connect_failures": o.connect_failures,
            "fault_500": o.fault_500,
            "fault_cut": o.fault_cut,
            "crashed": o.crashed,
            "scenarios": MIX.iter().zip(o.counts).map(|((sc, _), c)| (format!("{sc:?}"), c)).collect::<std::collections::BTreeMap<_, _>>(),
            "rss_growth_kib_per_hour": o.rss_growth_per_hour,
            "fds_growth_per_hour": o.fds_growth_per_hour,
            "first_errors": o.first_errors,
            "verdict": o.verdict,
            "samples": o.samples.iter().map(|s| json!([s.t, s.rss_kib, s.fds, s.cq_overflow])).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
    });
    std::fs::write(
        a.out.join("soak.json"),
        serde_json::to_string_pretty(&json)?,
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slope_fits_a_line_and_ignores_flat_noise() {
        let line: Vec<(f64, f64)> = (0..100).map(|i| (i as f64, 3.0 * i as f64 + 7.0)).collect();
        assert!((slope(&line) - 3.0).abs() < 1e-9);
        let flat: Vec<(f64, f64)> = (0..100)
            .map(|i| (i as f64, if i % 2 == 0 { 10.0 } else { 12.0 }))
            .collect();
        assert!(slope(&flat).abs() < 0.01);
        assert_eq!(slope(&[(1.0, 5.0)]), 0.0);
    }

    #[test]
    fn a_churn_version_is_told_by_its_first_bytes() {
        let v = content(42, 4096);
        assert_eq!(u64::from_le_bytes(v[..8].try_into().unwrap()), 42);
        assert_eq!(content(42, 4096), v);
        assert_ne!(content(43, 4096)[8..], v[8..]);
    }
}
