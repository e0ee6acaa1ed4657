//! The soak's clients: the scenarios (one per connection, checked byte for
//! byte), the mutator that changes files while they are served, and the idle
//! keep-alive connections.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::{Rng, RngCore, SeedableRng};

use super::{CHURN_FILES, CHURN_SIZE, CLIENT_TIMEOUT, HEADER_TIMEOUT_S, STABLE};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Scenario {
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
pub(super) const MIX: [(Scenario, u32); 10] = [
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
pub(super) struct Counts {
    pub(super) by_scenario: [AtomicU64; 10],
    pub(super) requests: AtomicU64,
    /// Bytes that were not the file's, a wrong status, a missing close: each a defect.
    pub(super) errors: AtomicU64,
    /// The server made a client wait longer than CLIENT_TIMEOUT.
    pub(super) stalls: AtomicU64,
    /// Scenarios the clients could not start in time (the queue was full).
    pub(super) skipped: AtomicU64,
    /// Connections refused or reset when they should not have been.
    pub(super) connect_failures: AtomicU64,
    /// With --fail-rate: a read failed before the head (a 500), or after it (a
    /// correct prefix, then a close).
    pub(super) fault_500: AtomicU64,
    pub(super) fault_cut: AtomicU64,
}

pub(super) struct Ctx {
    pub(super) addr: SocketAddr,
    pub(super) root: PathBuf,
    pub(super) stable: Vec<Vec<u8>>,
    pub(super) counts: Counts,
    /// The first few error descriptions, for the report.
    pub(super) first_errors: Mutex<Vec<String>>,
    pub(super) stop: AtomicBool,
    /// Disk faults are injected (--fail-rate).
    pub(super) faults: bool,
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
pub(super) fn content(seed: u64, len: usize) -> Vec<u8> {
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

pub(super) fn run_scenario(ctx: &Ctx, sc: Scenario, rng: &mut SmallRng) {
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
                // The file changed between its open and its last bytes, and
                // nothing was sent yet: a 503 in the response's place (the
                // last-bytes check, docs/reliability.md).
                503 => {}
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
pub(super) fn mutator(ctx: &Ctx, seed: u64, truncate: bool) {
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
pub(super) fn idler(ctx: &Ctx, n: usize) {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_churn_version_is_told_by_its_first_bytes() {
        let v = content(42, 4096);
        assert_eq!(u64::from_le_bytes(v[..8].try_into().unwrap()), 42);
        assert_eq!(content(42, 4096), v);
        assert_ne!(content(43, 4096)[8..], v[8..]);
    }
}
