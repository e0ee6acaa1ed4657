//! Shared test support: a real `spindle` process on an ephemeral port over
//! a temporary document root of random-content files, and a minimal
//! HTTP/1.1 client over raw TCP that reports exact bytes.
#![allow(dead_code)]

pub mod edge;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

pub use spindle::config::{BackendKind, Cap};

/// Every backend the server offers ([`BackendKind::ALL`]). Tests loop over
/// this list, so each backend passes the same suite.
/// `SPINDLE_TEST_BACKENDS=a,b` narrows it.
pub fn backends() -> Vec<String> {
    match std::env::var("SPINDLE_TEST_BACKENDS") {
        Ok(v) if !v.trim().is_empty() => v.split(',').map(|s| s.trim().to_string()).collect(),
        _ => BackendKind::ALL
            .iter()
            .map(|b| b.name().to_string())
            .collect(),
    }
}

/// The backends of [`backends`] that have `cap` ([`BackendKind::caps`]),
/// in [`BackendKind::ALL`]'s order. Says (`skip_chosen`) which backends with `cap`
/// `SPINDLE_TEST_BACKENDS` leaves out, and fails on a name that is no
/// backend, so that a test never runs less than it says without a line.
pub fn backends_with(cap: Cap) -> Vec<String> {
    let chosen = backends();
    for name in &chosen {
        assert!(
            BackendKind::from_name(name).is_some(),
            "SPINDLE_TEST_BACKENDS names {name:?}, which is no backend"
        );
    }
    let mut out = Vec::new();
    for b in BackendKind::ALL.into_iter().filter(|b| b.has(cap)) {
        if chosen.iter().any(|c| c == b.name()) {
            out.push(b.name().to_string());
        } else {
            test_skip::skip_chosen(format!(
                "SPINDLE_TEST_BACKENDS leaves out {}, a backend with Cap::{cap:?}",
                b.name()
            ));
        }
    }
    out
}

/// Whether a test about `backend` alone runs: true when [`backends`] has
/// it; else it says (`skip_chosen`) that `SPINDLE_TEST_BACKENDS` leaves it
/// out.
pub fn chosen(backend: &str) -> bool {
    let yes = backends().iter().any(|b| b == backend);
    if !yes {
        test_skip::skip_chosen(format!("SPINDLE_TEST_BACKENDS leaves out {backend}"));
    }
    yes
}

/// Whether backend `name` has `cap`.
pub fn has(name: &str, cap: Cap) -> bool {
    BackendKind::from_name(name).is_some_and(|b| b.has(cap))
}

/// io-uring with `--first-miss direct`: every first use that misses the
/// page cache is read with O_DIRECT (and read ahead). Cold-cache tests add
/// it to [`backends`]; on a machine with free memory the default (`auto`)
/// reads through the page cache instead.
pub const IO_URING_DIRECT: &str = "io-uring+direct";

/// [`backends`], and the O_DIRECT variant of io-uring when io-uring is in.
pub fn cold_backends() -> Vec<String> {
    let mut v = backends();
    if v.iter().any(|b| b == "io-uring") {
        v.push(IO_URING_DIRECT.to_string());
    }
    v
}

/// The file sizes every test root contains, as `f<size>`.
pub const SIZES: &[u64] = &[0, 1, 4095, 4096, 4097, 100 * 1024, 1024 * 1024 + 7];
/// A larger file, `big`, for cold-cache, shutdown and truncation tests.
pub const BIG_SIZE: u64 = 64 * 1024 * 1024;

/// Deterministic pseudo-random bytes (xorshift64*), distinct per seed.
pub fn random_bytes(len: u64, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut out = Vec::with_capacity(len as usize + 8);
    while (out.len() as u64) < len {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        out.extend_from_slice(&x.wrapping_mul(0x2545_F491_4F6C_DD1D).to_le_bytes());
    }
    out.truncate(len as usize);
    out
}

static COUNTER: AtomicU64 = AtomicU64::new(0);

/// A temporary document root, removed on drop.
pub struct DocRoot {
    pub dir: PathBuf,
}

impl DocRoot {
    /// The standard tree:
    /// - `f<size>` for every size in [`SIZES`], random content;
    /// - `big` ([`BIG_SIZE`]) if `with_big`;
    /// - `index.html`, `page.txt`, `style.css`, `name with spaces.txt`;
    /// - `sub/index.html`, `noindex/file.txt` (a directory without index);
    /// - `.hidden`, `.git/config` (dotfiles);
    /// - `escape` (a symlink to /etc/passwd), `inside` (a symlink to f1),
    ///   `updir` (a symlink to ..), `fifo` (a FIFO).
    pub fn new(with_big: bool) -> DocRoot {
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let base = std::env::var_os("SPINDLE_TEST_TMP")
            .map(PathBuf::from)
            .unwrap_or_else(std::env::temp_dir);
        let dir = base.join(format!("spindle-test-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("sub")).unwrap();
        std::fs::create_dir_all(dir.join("noindex")).unwrap();
        std::fs::create_dir_all(dir.join(".git")).unwrap();
        for (i, &size) in SIZES.iter().enumerate() {
            std::fs::write(
                dir.join(format!("f{size}")),
                random_bytes(size, i as u64 + 1),
            )
            .unwrap();
        }
        if with_big {
            std::fs::write(dir.join("big"), random_bytes(BIG_SIZE, 99)).unwrap();
        }
        std::fs::write(dir.join("index.html"), "<h1>spindle test</h1>\n").unwrap();
        std::fs::write(dir.join("page.txt"), "plain text\n").unwrap();
        std::fs::write(dir.join("style.css"), "body{}\n").unwrap();
        std::fs::write(dir.join("name with spaces.txt"), "spaces\n").unwrap();
        std::fs::write(dir.join("sub/index.html"), "sub index\n").unwrap();
        std::fs::write(dir.join("noindex/file.txt"), "file\n").unwrap();
        std::fs::write(dir.join(".hidden"), "secret\n").unwrap();
        std::fs::write(dir.join(".git/config"), "secret\n").unwrap();
        std::os::unix::fs::symlink("/etc/passwd", dir.join("escape")).unwrap();
        std::os::unix::fs::symlink("f1", dir.join("inside")).unwrap();
        std::os::unix::fs::symlink("..", dir.join("updir")).unwrap();
        let fifo = std::ffi::CString::new(dir.join("fifo").as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: mkfifo with a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o644) }, 0);
        DocRoot { dir }
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.dir.join(rel)
    }

    pub fn read(&self, rel: &str) -> Vec<u8> {
        std::fs::read(self.path(rel)).unwrap()
    }
}

impl Drop for DocRoot {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Path of a binary of this workspace, built next to the test executable.
pub fn workspace_bin(name: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().unwrap().parent().unwrap();
    let p = dir.join(name);
    assert!(
        p.exists(),
        "{} not built; run `cargo build --workspace` first",
        p.display()
    );
    p
}

/// The `host:port` in spindle's startup line, once that line is complete
/// (ends in a newline) in `log`.
pub fn startup_addr(log: &str) -> Option<String> {
    let complete = &log[..log.rfind('\n')? + 1];
    let line = complete.lines().find(|l| l.contains("]: serving "))?;
    let url = line.split("http://").nth(1).expect("url in startup line");
    Some(url.split('/').next().unwrap().to_string())
}

/// A running server, killed on drop.
pub struct Server {
    pub child: Child,
    pub addr: SocketAddr,
    pub stderr_log: PathBuf,
    /// The server's own `--compress-cache`, removed with it (unless the
    /// test named one).
    pub compress_cache: Option<PathBuf>,
}

impl Server {
    /// Starts `spindle --backend B --listen 127.0.0.1:0 ROOT EXTRA...` and
    /// waits for its startup line, which names the port.
    // The child is waited for by `Server`'s Drop (or on the failure path).
    pub fn start(backend: &str, root: &Path, extra: &[&str]) -> Server {
        Server::start_with(backend, Some(root), extra)
    }

    /// As [`Server::start`]; without `root`, the root comes from a
    /// `--config` file in `extra`.
    pub fn start_with(backend: &str, root: Option<&Path>, extra: &[&str]) -> Server {
        Server::start_env(backend, root, extra, &[])
    }

    /// As [`Server::start_with`], with these environment variables set.
    #[allow(clippy::zombie_processes)]
    pub fn start_env(
        backend: &str,
        root: Option<&Path>,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Server {
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let stderr_log =
            std::env::temp_dir().join(format!("spindle-test-{}-{n}.err", std::process::id()));
        let err = std::fs::File::create(&stderr_log).unwrap();
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_spindle"));
        let backend = if backend == IO_URING_DIRECT {
            cmd.args(["--first-miss", "direct"]);
            "io-uring"
        } else {
            backend
        };
        // Each server compresses into a directory of its own, not the
        // machine's /var/cache/spindle/compress.
        let compress_cache = (!extra.iter().any(|a| a.starts_with("--compress"))).then(|| {
            std::env::temp_dir().join(format!("spindle-test-{}-{n}.zip", std::process::id()))
        });
        if let Some(d) = &compress_cache {
            cmd.arg("--compress-cache").arg(d);
        }
        cmd.arg("--backend")
            .arg(backend)
            .arg("--listen")
            .arg("127.0.0.1:0")
            .args(extra)
            .args(root)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(err);
        let mut child = cmd.spawn().expect("start spindle");
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let text = std::fs::read_to_string(&stderr_log).unwrap_or_default();
            if let Some(addr) = startup_addr(&text) {
                let addr = addr.parse().expect("address");
                return Server {
                    child,
                    addr,
                    stderr_log,
                    compress_cache,
                };
            }
            if text.contains("error") || Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!("spindle did not start: {text}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }

    pub fn connect(&self) -> TcpStream {
        let s = TcpStream::connect(self.addr).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        s.set_nodelay(true).unwrap();
        s
    }

    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr_log).unwrap_or_default()
    }

    /// Sends SIGTERM and waits for the exit status.
    pub fn terminate(&mut self) -> std::process::ExitStatus {
        // SAFETY: kill(2) on our own child's pid.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                return st;
            }
            assert!(
                Instant::now() < deadline,
                "spindle did not exit after SIGTERM"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// True while the process is alive.
    pub fn alive(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        // A server thread that panicked (a failed assertion in a worker)
        // may still have closed its connections in a way a test accepts:
        // its message in the log fails the test here.
        let log = std::fs::read_to_string(&self.stderr_log).unwrap_or_default();
        let _ = std::fs::remove_file(&self.stderr_log);
        if let Some(d) = &self.compress_cache {
            let _ = std::fs::remove_dir_all(d);
        }
        if !std::thread::panicking() {
            assert!(!log.contains("panicked"), "the server panicked:\n{log}");
        }
    }
}

/// A response as read off the wire.
#[derive(Debug, Clone)]
pub struct Resp {
    pub status: u16,
    pub status_line: String,
    /// Header fields in order, names lower-cased.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Resp {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// Whether the server announced it will close.
    pub fn closes(&self) -> bool {
        self.header("connection")
            .is_some_and(|v| v.eq_ignore_ascii_case("close"))
    }
}

/// Reads one response. `head_only` for responses to HEAD.
pub fn read_response(r: &mut impl BufRead, head_only: bool) -> std::io::Result<Resp> {
    let mut status_line = String::new();
    if r.read_line(&mut status_line)? == 0 {
        return Err(std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            "connection closed",
        ));
    }
    let status_line = status_line.trim_end().to_string();
    let status: u16 = status_line
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("bad status line {status_line:?}"));
    let mut headers = Vec::new();
    loop {
        let mut line = String::new();
        r.read_line(&mut line)?;
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        let (n, v) = line.split_once(':').expect("header line");
        headers.push((n.to_ascii_lowercase(), v.trim().to_string()));
    }
    let mut resp = Resp {
        status,
        status_line,
        headers,
        body: Vec::new(),
    };
    if head_only || status == 304 || status == 204 {
        return Ok(resp);
    }
    let len: usize = resp
        .header("content-length")
        .expect("content-length")
        .parse()
        .unwrap();
    resp.body = vec![0; len];
    r.read_exact(&mut resp.body)?;
    Ok(resp)
}

/// One request on a fresh connection; returns the response.
pub fn request(server: &Server, raw: &str) -> Resp {
    let mut s = server.connect();
    s.write_all(raw.as_bytes()).unwrap();
    let head_only = raw.starts_with("HEAD ");
    read_response(&mut BufReader::new(s), head_only).expect("response")
}

/// `GET path` with Host, on a fresh connection.
pub fn get(server: &Server, path: &str) -> Resp {
    request(
        server,
        &format!("GET {path} HTTP/1.1\r\nHost: test\r\n\r\n"),
    )
}

/// Whether the server closed the connection: after reading a response,
/// the next read sees EOF (or a reset) within `wait`.
pub fn closed_by_server(r: &mut impl Read, wait: Duration) -> bool {
    let deadline = Instant::now() + wait;
    let mut buf = [0u8; 1024];
    loop {
        match r.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return true,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                if Instant::now() >= deadline {
                    return false;
                }
            }
            Err(e) => panic!("read: {e}"),
        }
    }
}

/// A child process (a client, a helper) killed and reaped when dropped, so a
/// failing test leaves none behind.
pub struct Killed(pub Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

pub fn startup_error(args: &[&str], needle: &str) {
    let root = DocRoot::new(false);
    let mut child = Command::new(env!("CARGO_BIN_EXE_spindle"))
        .args(args)
        .arg(&root.dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // A server that started after all would run forever: 10 s, then fail.
    let deadline = Instant::now() + Duration::from_secs(10);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{args:?}: spindle started instead of refusing");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
    assert!(
        err.starts_with("spindle: error: ") && err.contains(needle),
        "{args:?}: {err}"
    );
}

/// A file of the test TLS data (tests/data/tls: a test CA, and
/// certificates for localhost).
pub fn tls_data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/tls")
        .join(name)
}

/// Appends an HTTP/2 frame (RFC 9113 §4.1): its header, then `payload`.
pub fn h2_frame(out: &mut Vec<u8>, kind: u8, flags: u8, stream: u32, payload: &[u8]) {
    out.extend_from_slice(&(payload.len() as u32).to_be_bytes()[1..]);
    out.push(kind);
    out.push(flags);
    out.extend_from_slice(&stream.to_be_bytes());
    out.extend_from_slice(payload);
}

/// The whole HTTP/2 frames at the start of `buf`: type, flags, stream,
/// payload.
pub fn h2_frames(buf: &[u8]) -> Vec<(u8, u8, u32, Vec<u8>)> {
    let mut frames = Vec::new();
    let mut at = 0;
    while at + 9 <= buf.len() {
        let len = (buf[at] as usize) << 16 | (buf[at + 1] as usize) << 8 | buf[at + 2] as usize;
        if at + 9 + len > buf.len() {
            break;
        }
        let id = u32::from_be_bytes(buf[at + 5..at + 9].try_into().unwrap()) & 0x7fff_ffff;
        frames.push((
            buf[at + 3],
            buf[at + 4],
            id,
            buf[at + 9..at + 9 + len].to_vec(),
        ));
        at += 9 + len;
    }
    frames
}

/// An HPACK string literal without Huffman (RFC 7541 §5.2), under 127
/// bytes.
pub fn hstr(out: &mut Vec<u8>, s: &[u8]) {
    assert!(s.len() < 127);
    out.push(s.len() as u8);
    out.extend_from_slice(s);
}

/// What an HTTP/2 connection got back: its frames, and whether the
/// server closed it.
pub struct H2Got {
    pub frames: Vec<(u8, u8, u32, Vec<u8>)>,
    pub closed: bool,
}

impl H2Got {
    /// The code of the first GOAWAY (type 7), if any.
    pub fn goaway(&self) -> Option<u32> {
        self.frames
            .iter()
            .find(|f| f.0 == 7)
            .map(|f| u32::from_be_bytes(f.3[4..8].try_into().unwrap()))
    }
}

/// The first port `free_port` hands out lies below the kernel's ephemeral
/// range (32768-60999 by default), so that no `bind(:0)` and no outgoing
/// connection (curl's, pebble's, another test's server) can take it
/// between the test choosing it and the server binding it.
const FIXED_PORTS: std::ops::Range<u32> = 12_000..32_000;
static NEXT_PORT: AtomicU64 = AtomicU64::new(0);

/// A port nothing listens on now (bound and released), from outside the
/// ephemeral range and never handed out twice by this test process.
pub fn free_port() -> u16 {
    let span = (FIXED_PORTS.end - FIXED_PORTS.start) as u64;
    // Each test binary starts at its own offset, should two run at once.
    let base = (std::process::id() as u64 * 7919) % span;
    for _ in 0..span {
        let n = NEXT_PORT.fetch_add(1, Ordering::Relaxed);
        let port = (FIXED_PORTS.start as u64 + (base + n) % span) as u16;
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free port in {FIXED_PORTS:?}");
}

/// A small, locked receive buffer, so that the server cannot queue the
/// whole body before the file changes.
pub fn small_rcvbuf(s: &TcpStream) {
    let size: libc::c_int = 64 * 1024;
    // SAFETY: setsockopt with a pointer to a live c_int and its size.
    unsafe {
        libc::setsockopt(
            std::os::fd::AsRawFd::as_raw_fd(s),
            libc::SOL_SOCKET,
            libc::SO_RCVBUF,
            (&size as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
}

/// REDbot's (PyPI `redbot`) BAD notes on a URL. `None` when redbot is not
/// installed, outside CI (`.ci/run` installs it, and there its absence
/// fails the test: [`test_skip::skip_or_fail`]).
pub fn redbot_bad_notes(url: &str) -> Option<Vec<String>> {
    let out = match Command::new("redbot").args(["-o", "har", url]).output() {
        Ok(o) => o,
        Err(e) => {
            test_skip::skip_or_fail(format!("redbot not run ({e}): pip install redbot"));
            return None;
        }
    };
    assert!(out.status.success(), "redbot failed: {out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    // The HAR's notes: {"level": "BAD", "summary": "..."}; the summary
    // follows the level in each note object.
    let mut bad = Vec::new();
    let mut notes = 0;
    for part in text.split("\"level\"").skip(1) {
        notes += 1;
        let level = part.split('"').nth(1).unwrap_or("");
        if level == "BAD" {
            bad.push(part.chars().take(300).collect());
        }
    }
    assert!(notes >= 3, "redbot gave no notes: {text}");
    Some(bad)
}

/// Python's aioquic (PyPI) is importable, for the HTTP/3 clients of
/// tests/data (h3client.py, h3hostile.py); under CI its absence fails the
/// test (.ci/run installs it).
#[track_caller]
pub fn have_aioquic() -> bool {
    let ok = Command::new("python3")
        .args(["-c", "import aioquic"])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        test_skip::skip_or_fail("Python's aioquic is not installed (pip install aioquic)");
    }
    ok
}

/// A script of tests/data.
pub fn test_data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name)
}

/// The lines of a log file once it has at least `n` (or after 5 s).
pub fn wait_log_lines(path: &Path, n: usize) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let t = std::fs::read_to_string(path).unwrap_or_default();
        if t.lines().count() >= n || Instant::now() > deadline {
            return t.lines().map(str::to_string).collect();
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The address the startup line marks `(PROXY protocol)`.
pub fn proxy_addr(log: &str) -> SocketAddr {
    let line = log
        .lines()
        .find(|l| l.contains("]: serving "))
        .expect("startup line");
    let before = line.split(" (PROXY protocol)").next().unwrap();
    let url = before.rsplit("http://").next().unwrap();
    url.trim_end_matches('/')
        .parse()
        .expect("PROXY listener address")
}

/// The sockets process `pid` holds (files left out: the open-file cache
/// may keep those open).
pub fn sockets(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .flatten()
        .filter(|e| {
            std::fs::read_link(e.path()).is_ok_and(|l| l.to_string_lossy().starts_with("socket:"))
        })
        .count()
}

/// Waits for a client started after `idle` sockets were counted to
/// connect (5 s at most), then for the server to drop it (15 s at most).
pub fn connected_then_dropped(pid: u32, idle: usize, what: &str) {
    let t = Instant::now();
    while sockets(pid) == idle {
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "{what}: the client never connected"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    while sockets(pid) > idle {
        assert!(
            t.elapsed() < Duration::from_secs(15),
            "{what}: the stalled connection was not dropped"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The port of the https:// address in the server's startup line.
pub fn https_port(srv: &Server) -> u16 {
    let err = srv.stderr();
    let line = err
        .lines()
        .find(|l| l.contains("]: serving "))
        .expect("startup line");
    line.split("https://")
        .nth(1)
        .and_then(|u| u.split('/').next())
        .and_then(|a| a.rsplit(':').next())
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no https:// address in {line}"))
}

/// Starts a one-worker server with an HTTPS listener beside the plain
/// one, serving `cert` and `key` (default: the test CA's P-256 pair);
/// returns it and the HTTPS port.
pub fn start_with_https(
    backend: &str,
    root: &Path,
    pair: Option<(&Path, &Path)>,
    extra: &[&str],
) -> (Server, u16) {
    let (cert, key) = match pair {
        Some((c, k)) => (c.to_path_buf(), k.to_path_buf()),
        None => (tls_data("p256.pem"), tls_data("p256.key")),
    };
    let mut args = vec![
        "--workers",
        "1",
        "--tls-listen",
        "127.0.0.1:0",
        "--tls-cert",
        cert.to_str().unwrap(),
        "--tls-key",
        key.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    let srv = Server::start(backend, root, &args);
    let port = https_port(&srv);
    (srv, port)
}

/// A file system with no room, mounted on `dir` until dropped: a 64 KiB
/// tmpfs, filled up (the tests run as root).
pub struct FullDisk<'a>(&'a Path);

impl FullDisk<'_> {
    pub fn mount(dir: &Path) -> FullDisk<'_> {
        let st = Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=64k", "tmpfs"])
            .arg(dir)
            .status()
            .expect("mount");
        assert!(st.success(), "mount a tmpfs (the tests run as root)");
        let full = FullDisk(dir);
        std::fs::write(dir.join("filler"), vec![1u8; 64 * 1024]).ok();
        full
    }
}

impl Drop for FullDisk<'_> {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.0).status();
    }
}

pub const NGINX: &str = "/usr/sbin/nginx";

/// Debian's nginx serving `root` on a port of its own, as an origin
/// (`/down...` answers 503, `/slow/...` goes at 4 MB/s), stopped on drop.
pub struct Nginx {
    child: Child,
    pub port: u16,
    dir: tempfile::TempDir,
}

impl Nginx {
    /// Stops it now (an origin that went down).
    pub fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Its access log: method, request URI, `Range`, status; a line each.
    pub fn log(&self) -> Vec<String> {
        let text = std::fs::read_to_string(self.dir.path().join("access.log")).unwrap_or_default();
        text.lines().map(str::to_string).collect()
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn nginx(root: &Path) -> Option<Nginx> {
    if !Path::new(NGINX).exists() {
        test_skip::skip_or_fail(format!("{NGINX} is not installed (Debian's nginx)"));
        return None;
    }
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let conf = format!(
        "daemon off;\nmaster_process off;\nworker_processes 1;\npid {d}/nginx.pid;\n\
         error_log {d}/error.log;\nevents {{ worker_connections 64; }}\n\
         http {{\n  log_format r '$request_method $request_uri $http_range $status';\n  access_log {d}/access.log r;\n  client_body_temp_path {d};\n  proxy_temp_path {d};\n\
         fastcgi_temp_path {d};\n  uwsgi_temp_path {d};\n  scgi_temp_path {d};\n\
         include /etc/nginx/mime.types;\n\
         server {{\n    listen 127.0.0.1:{port};\n    root {r};\n\
         location /down {{ return 503; }}\n    location /slow/ {{ limit_rate 4m; }}\n\
         location /nostore/ {{ add_header Cache-Control no-store; }}\n\
         location /private/ {{ add_header Cache-Control private; }}\n  }}\n}}\n",
        d = dir.path().display(),
        r = root.display()
    );
    let conf_path = dir.path().join("nginx.conf");
    std::fs::write(&conf_path, conf).unwrap();
    let child = Command::new(NGINX)
        .arg("-c")
        .arg(&conf_path)
        .arg("-p")
        .arg(dir.path())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "nginx did not listen on {port}");
        std::thread::sleep(Duration::from_millis(20));
    }
    Some(Nginx { child, port, dir })
}
