//! Checks across the I/O backends: byte-identical responses, correct bodies
//! from a cold page cache (the disk paths: sendfile blocking, I/O threads,
//! O_DIRECT native AIO into shared memory), files shrinking under a cold
//! read, and the lifetime of linux-aio-sendfile's shared-memory buffers.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::*;

// ----- byte-identical responses ---------------------------------------------

/// One connection: the bytes written at once, and for each response
/// expected back whether it answers a HEAD (no body).
struct Script {
    name: &'static str,
    raw: Vec<u8>,
    heads: Vec<bool>,
}

fn script(name: &'static str, reqs: &[String], expect: usize) -> Script {
    let raw: Vec<u8> = reqs.concat().into_bytes();
    let heads = reqs
        .iter()
        .take(expect)
        .map(|r| r.starts_with("HEAD "))
        .collect();
    Script { name, raw, heads }
}

fn scripts(etag: &str, lm: &str) -> Vec<Script> {
    let g = |target: &str, extra: &str| format!("GET {target} HTTP/1.1\r\nHost: t\r\n{extra}\r\n");
    let h = |target: &str| format!("HEAD {target} HTTP/1.1\r\nHost: t\r\n\r\n");
    let pipelined = vec![
        g("/f4097", ""),
        h("/f1"),
        g("/f102400", "Range: bytes=1000-50999\r\n"),
        g("/f1048583", ""),
        g("/missing", ""),
        g("/sub", ""),
        g("/", ""),
        g("/f0", ""),
        g("/f4096", &format!("If-None-Match: {etag}\r\n")),
        g("/f4096", &format!("If-Modified-Since: {lm}\r\n")),
        g("/f4096", "If-Match: \"nope\"\r\n"),
        g("/f4095", "Range: bytes=-100\r\n"),
        g("/f1", "Range: bytes=5-\r\n"),
        "POST /f1 HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n\r\nhello".to_string(),
        g("/.hidden", ""),
        g("/f1048583", "Range: bytes=4095-600000\r\n"),
        h("/f1048583"),
        g("/name%20with%20spaces.txt", ""),
        g("/fifo", ""),
        g("/f1", "Connection: close\r\n"),
    ];
    let n = pipelined.len();
    vec![
        script("pipelined", &pipelined, n),
        script("http/1.0", &["GET /f4097 HTTP/1.0\r\n\r\n".to_string()], 1),
        script(
            "1.0 keep-alive",
            &[
                "GET /f4096 HTTP/1.0\r\nConnection: keep-alive\r\n\r\n".to_string(),
                "GET /f1 HTTP/1.0\r\n\r\n".to_string(),
            ],
            2,
        ),
        // A 400 closes the connection: the pipelined GET is never answered.
        script("400 no host", &["GET /f1 HTTP/1.1\r\n\r\n".to_string(), g("/f1", "")], 1),
        script("400 traversal", &[g("/../etc/passwd", ""), g("/f1", "")], 1),
        script(
            "405 chunked",
            &[
                "PUT /x HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n".to_string(),
                g("/f1", ""),
            ],
            1,
        ),
        script("405 keep-alive", &["DELETE /f1 HTTP/1.1\r\nHost: t\r\n\r\n".to_string(), g("/f1", "Connection: close\r\n")], 2),
        script("414", &[g(&format!("/{}", "a".repeat(10_000)), "")], 1),
        script("431", &[g("/f1", &format!("X-Big: {}\r\n", "b".repeat(9000)))], 1),
        script("505", &["GET /f1 HTTP/9.9\r\nHost: t\r\n\r\n".to_string()], 1),
    ]
}

/// Runs a script and returns the response stream with every `Date` line
/// removed, checking that exactly the expected responses arrived and that
/// the server then closed the connection.
fn run_script(srv: &Server, sc: &Script, backend: &str) -> Vec<u8> {
    let mut s = srv.connect();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(&sc.raw).unwrap();
    let mut raw = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut buf = [0u8; 65536];
    loop {
        assert!(
            Instant::now() < deadline,
            "{backend} {}: connection not closed",
            sc.name
        );
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => raw.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => break,
            Err(e) => panic!("{backend} {}: read: {e}", sc.name),
        }
    }
    let mut out = Vec::new();
    let mut rest = &raw[..];
    for (i, &head_only) in sc.heads.iter().enumerate() {
        let end = rest
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .unwrap_or_else(|| panic!("{backend} {}: response {i} incomplete", sc.name))
            + 4;
        let head = std::str::from_utf8(&rest[..end]).expect("ASCII head");
        let status: u16 = head
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .expect("status");
        let mut len = 0usize;
        for line in head.split("\r\n") {
            if let Some(v) = line.strip_prefix("Content-Length: ") {
                len = v.parse().unwrap();
            }
            if !line.starts_with("Date: ") {
                out.extend_from_slice(line.as_bytes());
                out.extend_from_slice(b"\r\n");
            }
        }
        if head_only || status == 304 {
            len = 0;
        }
        assert!(
            rest.len() >= end + len,
            "{backend} {}: body {i} cut short",
            sc.name
        );
        out.extend_from_slice(&rest[end..end + len]);
        rest = &rest[end + len..];
    }
    assert!(
        rest.is_empty(),
        "{backend} {}: {} unexpected bytes after the responses",
        sc.name,
        rest.len()
    );
    out
}

#[test]
fn every_backend_sends_the_same_bytes() {
    let root = DocRoot::new(false);
    let list = backends();
    let mut reference: Option<(String, Vec<Vec<u8>>)> = None;
    for b in &list {
        let srv = Server::start(b, &root.dir, &[]);
        let probe = get(&srv, "/f4096");
        let etag = probe.header("etag").unwrap().to_string();
        let lm = probe.header("last-modified").unwrap().to_string();
        let all = scripts(&etag, &lm);
        let got: Vec<Vec<u8>> = all.iter().map(|sc| run_script(&srv, sc, b)).collect();
        // The streams hold what they should, not only the same thing.
        let text = String::from_utf8_lossy(&got[0]);
        for status in [
            "200 OK",
            "206 Partial Content",
            "304 Not Modified",
            "301 ",
            "404 ",
            "412 ",
            "416 ",
            "405 ",
        ] {
            assert!(
                text.contains(&format!("HTTP/1.1 {status}")),
                "{b}: no {status} in the pipelined stream"
            );
        }
        assert!(!text.contains("Date: "), "Date lines are removed");
        match &reference {
            None => reference = Some((b.clone(), got)),
            Some((rb, want)) => {
                for ((sc, w), g) in all.iter().zip(want).zip(&got) {
                    if w != g {
                        let at = w
                            .iter()
                            .zip(g)
                            .position(|(x, y)| x != y)
                            .unwrap_or(w.len().min(g.len()));
                        let ctx = |v: &[u8]| {
                            String::from_utf8_lossy(
                                &v[at.saturating_sub(80)..(at + 80).min(v.len())],
                            )
                            .into_owned()
                        };
                        panic!(
                            "script {:?}: {b} differs from {rb} at byte {at} (lengths {} vs {}):\n{rb}: {:?}\n{b}: {:?}",
                            sc.name,
                            w.len(),
                            g.len(),
                            ctx(w),
                            ctx(g)
                        );
                    }
                }
            }
        }
    }
}

// ----- cold page cache ---------------------------------------------------

const TMPFS_MAGIC: i64 = 0x0102_1994;
const EXT4_MAGIC: i64 = 0xEF53;
const XFS_MAGIC: i64 = 0x5846_5342;
const BTRFS_MAGIC: i64 = 0x9123_683E;

fn fs_type(p: &Path) -> i64 {
    let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: an all-zero statfs is a valid value of this plain C struct.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: statfs with a NUL-terminated path and a live out-buffer.
    assert_eq!(
        unsafe { libc::statfs(c.as_ptr(), &mut st) },
        0,
        "statfs {}",
        p.display()
    );
    st.f_type as i64
}

/// A directory on a real disk file system: the page cache can be dropped
/// there and O_DIRECT really bypasses it (on tmpfs neither is true).
/// `SPINDLE_TEST_TMP` wins; then the system temp dir unless it is tmpfs;
/// then the target directory.
fn disk_dir() -> PathBuf {
    if let Some(p) = std::env::var_os("SPINDLE_TEST_TMP") {
        return PathBuf::from(p);
    }
    let t = std::env::temp_dir();
    if fs_type(&t) != TMPFS_MAGIC {
        return t;
    }
    PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
}

/// Why a check of what the page cache holds is not made.
const NO_CACHESTAT: &str = "no cachestat(2) (Linux 6.5+): what the page cache holds is not checked";

/// Pages of `path` in the page cache, and its size in pages, by
/// `cachestat(2)` (Linux 6.5+); `None` without it.
fn cached_pages(path: &Path) -> Option<(u64, u64)> {
    #[repr(C)]
    struct Range {
        off: u64,
        len: u64,
    }
    #[repr(C)]
    #[derive(Default)]
    struct Stat {
        nr_cache: u64,
        nr_dirty: u64,
        nr_writeback: u64,
        nr_evicted: u64,
        nr_recently_evicted: u64,
    }
    let f = std::fs::File::open(path).unwrap();
    let pages = f.metadata().unwrap().len().div_ceil(4096);
    let range = Range { off: 0, len: 0 };
    let mut st = Stat::default();
    // SAFETY: both structs are live locals of the layout the kernel
    // expects; it reads `range` and writes `st` during the call only.
    let rc = unsafe { libc::syscall(451, f.as_raw_fd(), &range, &mut st, 0) };
    (rc == 0).then_some((st.nr_cache, pages))
}

/// Writes back and evicts `path` from the page cache.
fn evict(path: &Path) {
    let f = std::fs::File::open(path).unwrap();
    f.sync_all().unwrap();
    // SAFETY: posix_fadvise on a descriptor we own; no memory involved.
    let rc = unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    assert_eq!(rc, 0, "posix_fadvise(DONTNEED) failed");
    match cached_pages(path) {
        Some((cached, pages)) => assert!(
            cached * 10 <= pages.max(10),
            "{} still has {cached} of {pages} pages cached after POSIX_FADV_DONTNEED",
            path.display()
        ),
        None => test_skip::skip_or_fail(NO_CACHESTAT),
    }
}

/// Drops the whole page cache, only when asked to: on a shared machine it
/// would disturb everyone else's measurements, and evicting our own files
/// (checked with cachestat) is enough for these tests.
fn maybe_drop_caches() {
    if std::env::var_os("SPINDLE_TEST_DROP_CACHES").is_some() {
        let _ = std::fs::write("/proc/sys/vm/drop_caches", "1");
    }
}

struct ColdRoot {
    dir: PathBuf,
    files: Vec<(String, Vec<u8>)>,
}

impl ColdRoot {
    /// A fresh directory of the test files; `tag` keeps the roots of tests
    /// running in parallel apart.
    fn new(tag: &str) -> ColdRoot {
        let dir = disk_dir().join(format!("spindle-cold-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        // Sizes that are not multiples of 512 or 4096, so every O_DIRECT
        // tail is unaligned.
        let sizes: &[(&str, u64)] = &[
            ("big", BIG_SIZE),
            ("a", 1),
            ("b", 4095),
            ("c", 4097),
            ("d", 100 * 1024 + 3),
            ("e", (1 << 20) + 7),
            ("f", (3 << 20) + 1001),
        ];
        let files = sizes
            .iter()
            .enumerate()
            .map(|(i, &(name, size))| {
                let data = random_bytes(size, 1000 + i as u64);
                std::fs::write(dir.join(name), &data).unwrap();
                (name.to_string(), data)
            })
            .collect();
        ColdRoot { dir, files }
    }

    fn data(&self, name: &str) -> &[u8] {
        &self.files.iter().find(|(n, _)| n == name).unwrap().1
    }

    /// Whether the root is on a disk file system, where a file read with
    /// `O_DIRECT` stays out of the page cache; when not, the test cannot
    /// check `O_DIRECT` reads, and says so ([`test_skip::skip_or_fail`]).
    fn shows_o_direct(&self) -> bool {
        let ftype = fs_type(&self.dir);
        let yes = [EXT4_MAGIC, XFS_MAGIC, BTRFS_MAGIC].contains(&ftype);
        if !yes {
            test_skip::skip_or_fail(format!(
                "{} is not ext4/xfs/btrfs (type {ftype:#x}), so the page cache cannot show \
                 O_DIRECT reads (SPINDLE_TEST_TMP may name a directory on one)",
                self.dir.display()
            ));
        }
        yes
    }

    fn evict_all(&self) {
        maybe_drop_caches();
        for (name, _) in &self.files {
            evict(&self.dir.join(name));
        }
    }
}

impl Drop for ColdRoot {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn fetch(srv: &Server, target: &str, range: Option<&str>) -> Resp {
    let extra = range.map_or(String::new(), |r| format!("Range: bytes={r}\r\n"));
    request(
        srv,
        &format!("GET {target} HTTP/1.1\r\nHost: t\r\n{extra}\r\n"),
    )
}

/// Reads one response slowly for its first `slow` body bytes, so that the
/// bytes already sent wait in the socket buffers while the server reuses
/// its buffers for other connections.
fn fetch_slowly(srv: &Server, target: &str, range: &str, slow: usize) -> Vec<u8> {
    let mut s = srv.connect();
    s.write_all(
        format!("GET {target} HTTP/1.1\r\nHost: t\r\nRange: bytes={range}\r\n\r\n").as_bytes(),
    )
    .unwrap();
    let mut r = BufReader::with_capacity(4096, s);
    let mut len = 0usize;
    loop {
        let mut line = String::new();
        r.read_line(&mut line).unwrap();
        if let Some(v) = line.strip_prefix("Content-Length: ") {
            len = v.trim().parse().unwrap();
        }
        if line == "\r\n" {
            break;
        }
    }
    let mut body = vec![0u8; len];
    let mut got = 0;
    while got < slow.min(len) {
        let n = r.read(&mut body[got..(got + 65536).min(len)]).unwrap();
        assert!(n > 0, "connection closed early");
        got += n;
        std::thread::sleep(Duration::from_millis(15));
    }
    r.read_exact(&mut body[got..]).unwrap();
    body
}

#[test]
fn cold_cache_bodies_are_correct() {
    let root = ColdRoot::new("bodies");
    let real_disk = root.shows_o_direct();
    for b in cold_backends() {
        root.evict_all();
        // Small chunks and few of them, so that buffers and slots are
        // reused across connections while earlier bytes are still queued.
        let mut srv = Server::start(
            &b,
            &root.dir,
            &[
                "--chunk-size",
                "128k",
                "--max-inflight",
                "3",
                "--io-threads",
                "4",
                "--workers",
                "1",
            ],
        );
        let big = root.data("big");
        std::thread::scope(|sc| {
            let whole = sc.spawn(|| fetch(&srv, "/big", None));
            let slow = sc.spawn(|| fetch_slowly(&srv, "/big", "5000-9000000", 2 << 20));
            let others = sc.spawn(|| {
                let mut v = Vec::new();
                for (name, range) in [
                    ("/a", None),
                    ("/b", None),
                    ("/c", None),
                    ("/d", None),
                    ("/e", None),
                    ("/f", None),
                    ("/f", Some("1000-2100000")),
                    ("/e", Some("4095-")),
                    ("/c", Some("-2")),
                    ("/big", Some("33554431-33620000")),
                ] {
                    v.push((name, range, fetch(&srv, name, range)));
                }
                v
            });
            let w = whole.join().unwrap();
            assert_eq!(w.status, 200, "{b}");
            assert!(w.body == big, "{b}: cold /big differs");
            let s = slow.join().unwrap();
            assert!(
                s[..] == big[5000..9000001],
                "{b}: slowly read range of /big differs"
            );
            for (name, range, r) in others.join().unwrap() {
                let data = root.data(&name[1..]);
                let want = match range {
                    None => data,
                    Some("1000-2100000") => &data[1000..2100001],
                    Some("4095-") => &data[4095..],
                    Some("-2") => &data[data.len() - 2..],
                    Some("33554431-33620000") => &data[33554431..33620001],
                    Some(other) => unreachable!("{other}"),
                };
                assert!(
                    r.status == 200 || r.status == 206,
                    "{b} {name} {range:?}: {}",
                    r.status
                );
                assert!(r.body == want, "{b}: cold {name} {range:?} differs");
            }
        });
        let err = srv.stderr();
        assert!(
            !err.contains("truncated") && !err.contains("failed"),
            "{b}: {err}"
        );
        if b == "linux-aio-sendfile" && real_disk {
            // O_DIRECT reads leave the page cache as cold as they found it.
            assert!(
                !err.contains("O_DIRECT"),
                "{b} fell back to buffered reads: {err}"
            );
            match cached_pages(&root.dir.join("big")) {
                Some((cached, pages)) => assert!(
                    cached * 4 < pages,
                    "{b}: {cached} of {pages} pages of /big cached: the reads did not use O_DIRECT"
                ),
                None => test_skip::skip_or_fail(NO_CACHESTAT),
            }
        }
        assert!(srv.terminate().success(), "{b}");
    }
}

/// io-uring's admission policy (recent.rs): with `--first-miss direct` a
/// file's first use reads what misses the page cache with O_DIRECT and
/// leaves the cache cold, and its second use reads through the page cache
/// and fills it; with `--first-miss cache` the first use fills it already;
/// `auto` (the default) does the one or the other as this machine's memory
/// has room or not. Every body is checked, including ranges that start and
/// end inside a block (the O_DIRECT read then starts early and the head
/// goes in front of the wanted bytes).
#[test]
fn io_uring_first_use_bypasses_the_page_cache_and_second_use_fills_it() {
    if !chosen("io-uring") {
        return;
    }
    let root = ColdRoot::new("admission");
    if !root.shows_o_direct() {
        return;
    }
    let cached_fraction = |name: &str| {
        let (cached, pages) = cached_pages(&root.dir.join(name)).expect("cachestat");
        cached as f64 / pages as f64
    };
    let check = |srv: &Server, name: &str, range: Option<(usize, usize)>| {
        let data = root.data(name);
        let r = fetch(
            srv,
            &format!("/{name}"),
            range.map(|(a, b)| format!("{a}-{b}")).as_deref(),
        );
        let want = match range {
            None => data,
            Some((a, b)) => &data[a..=b.min(data.len() - 1)],
        };
        assert!(
            r.status == 200 || r.status == 206,
            "{name} {range:?}: {}",
            r.status
        );
        assert!(
            r.body == want,
            "{name} {range:?}: wrong body ({} bytes)",
            r.body.len()
        );
    };
    let srv = Server::start(
        "io-uring",
        &root.dir,
        &[
            "--workers",
            "1",
            "--chunk-size",
            "128k",
            "--first-miss",
            "direct",
        ],
    );
    root.evict_all();
    // First use: whole files, small (one READ behind the head) and large
    // (chunks of 128 KiB), all with sizes that end inside a block.
    for name in ["b", "c", "d", "e"] {
        check(&srv, name, None);
        assert!(
            cached_fraction(name) < 0.25,
            "first use of /{name} filled the page cache ({:.0}%)",
            100.0 * cached_fraction(name)
        );
    }
    // Second use: through the page cache, which keeps the file.
    for name in ["d", "e"] {
        check(&srv, name, None);
        assert!(
            cached_fraction(name) > 0.9,
            "second use of /{name} left the page cache cold ({:.0}%)",
            100.0 * cached_fraction(name)
        );
    }
    // Unaligned ranges, each on the first use of its file.
    for (name, range) in [
        ("f", (1000, 2_100_000)),
        ("big", (33_554_431, 33_620_000)),
        ("a", (0, 0)),
    ] {
        check(&srv, name, Some(range));
    }
    assert!(
        cached_fraction("f") < 0.25,
        "a first-use range filled the cache"
    );
    let err = srv.stderr();
    assert!(
        !err.contains("O_DIRECT refused") && !err.contains("truncated"),
        "{err}"
    );

    // The nginx-like policy: every miss goes through the page cache.
    let srv = Server::start(
        "io-uring",
        &root.dir,
        &["--workers", "1", "--first-miss", "cache"],
    );
    root.evict_all();
    check(&srv, "e", None);
    assert!(
        cached_fraction("e") > 0.9,
        "--first-miss cache: the first use left the page cache cold ({:.0}%)",
        100.0 * cached_fraction("e")
    );

    // The default follows the memory for a body of one chunk (cached while
    // there is room), and reads a body of several chunks through the page
    // cache either way (the kernel's readahead).
    let room = spindle::memory::MemoryWatch::probe().has_room();
    let srv = Server::start("io-uring", &root.dir, &["--workers", "1"]);
    root.evict_all();
    check(&srv, "d", None);
    let f = cached_fraction("d");
    assert!(
        if room { f > 0.9 } else { f < 0.25 },
        "--first-miss auto with{} room: {:.0}% of a one-chunk first use cached",
        if room { "" } else { "out" },
        100.0 * f
    );
    check(&srv, "e", None);
    let f = cached_fraction("e");
    assert!(
        f > 0.9,
        "--first-miss auto: {:.0}% of a several-chunk first use cached",
        100.0 * f
    );
}

/// linux-aio-sendfile reads every page-cache miss with `O_DIRECT`, so a
/// file it served cold is still not in the page cache afterwards: also
/// for the second and later responses on a keep-alive connection (an
/// early build remembered "`O_DIRECT` tried" across responses and read
/// those with buffered AIO, which blocks in `io_submit`).
#[test]
fn linux_aio_reads_cold_files_direct_on_every_response_of_a_connection() {
    if !chosen("linux-aio-sendfile") {
        return;
    }
    let root = ColdRoot::new("aio-keepalive");
    if !root.shows_o_direct() {
        return;
    }
    let srv = Server::start(
        "linux-aio-sendfile",
        &root.dir,
        &["--workers", "1", "--chunk-size", "128k"],
    );
    root.evict_all();
    // Files over 16 KiB only: the open-file cache tries to keep a smaller
    // one's bytes with a `preadv2(RWF_NOWAIT)`, which fails on a cold file
    // but starts readahead into the page cache (harmless, and not a read
    // of this backend's).
    let names = ["d", "e", "f"];
    let mut s = BufReader::new(srv.connect());
    for name in names {
        s.get_mut()
            .write_all(format!("GET /{name} HTTP/1.1\r\nHost: t\r\n\r\n").as_bytes())
            .unwrap();
        let r = read_response(&mut s, false).unwrap();
        assert_eq!(r.status, 200, "{name}");
        assert!(
            r.body == root.data(name),
            "{name}: wrong body ({} bytes)",
            r.body.len()
        );
        assert!(!r.closes(), "{name}: the connection stays open");
    }
    for name in names {
        let (cached, pages) = cached_pages(&root.dir.join(name)).expect("cachestat");
        assert!(
            cached * 10 <= pages.max(10),
            "/{name} has {cached} of {pages} pages in the page cache after a cold response: \
             it was not read with O_DIRECT"
        );
    }
}

#[test]
fn a_file_shrinking_under_a_cold_read_is_cut_short() {
    let dir = disk_dir().join(format!("spindle-shrink-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    const SIZE: u64 = 24 << 20;
    for b in cold_backends() {
        let original = random_bytes(SIZE, 77);
        let path = dir.join("shrink");
        std::fs::write(&path, &original).unwrap();
        evict(&path);
        let srv = Server::start(&b, &dir, &["--chunk-size", "64k"]);
        let s = srv.connect();
        small_rcvbuf(&s);
        (&s).write_all(b"GET /shrink HTTP/1.1\r\nHost: t\r\n\r\n")
            .unwrap();
        let mut r = BufReader::with_capacity(4096, s);
        loop {
            let mut line = String::new();
            r.read_line(&mut line).unwrap();
            if line == "\r\n" {
                break;
            }
        }
        let mut all = vec![0u8; 1 << 20];
        r.read_exact(&mut all).unwrap();
        std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(2 << 20)
            .unwrap();
        let _ = r.read_to_end(&mut all);
        assert!(
            (all.len() as u64) < SIZE,
            "{b}: the full length came from a file cut to 2 MiB"
        );
        assert!(
            all[..] == original[..all.len()],
            "{b}: wrong bytes from a shrinking file"
        );
        assert!(
            srv.stderr().contains("truncated"),
            "{b}: the truncation was not noticed"
        );
        std::fs::write(dir.join("ok"), "fine\n").unwrap();
        assert_eq!(
            get(&srv, "/ok").body,
            b"fine\n",
            "{b}: server unwell after a truncation"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

// ----- linux-aio-sendfile's shared memory ----------------------------------

fn shm_names() -> Vec<String> {
    std::fs::read_dir("/dev/shm")
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with("spindle"))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn aio_shm_buffers_have_no_name_and_go_away() {
    if !chosen("linux-aio-sendfile") {
        return;
    }
    let root = DocRoot::new(false);
    let before = shm_names();
    for signal in [libc::SIGTERM, libc::SIGKILL] {
        let mut srv = Server::start("linux-aio-sendfile", &root.dir, &["--workers", "2"]);
        assert_eq!(get(&srv, "/f1048583").body, root.read("f1048583"));
        let pid = srv.child.id();
        let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
        let shm: Vec<&str> = maps.lines().filter(|l| l.contains("/dev/shm/")).collect();
        assert_eq!(shm.len(), 2, "one shm buffer per worker expected:\n{maps}");
        assert!(
            shm.iter().all(|l| l.ends_with("(deleted)")),
            "shm buffers must be unlinked:\n{shm:?}"
        );
        assert_eq!(
            shm_names(),
            before,
            "a named spindle file appeared in /dev/shm"
        );
        // SAFETY: kill(2) on our own child's pid.
        unsafe { libc::kill(pid as i32, signal) };
        let deadline = Instant::now() + Duration::from_secs(20);
        while srv.alive() {
            assert!(Instant::now() < deadline, "server did not exit");
            std::thread::sleep(Duration::from_millis(20));
        }
        assert_eq!(shm_names(), before, "spindle left files in /dev/shm");
    }
}

/// A ramfs mount, unmounted on drop.
struct RamFs {
    dir: PathBuf,
}

impl RamFs {
    /// The error when this process may not mount (not root).
    fn mount() -> std::io::Result<RamFs> {
        let dir = std::env::temp_dir().join(format!("spindle-ramfs-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let c = |s: &str| std::ffi::CString::new(s).unwrap();
        let target = c(dir.to_str().unwrap());
        // SAFETY: mount(2) with NUL-terminated strings that outlive the call.
        let rc = unsafe {
            libc::mount(
                c("none").as_ptr(),
                target.as_ptr(),
                c("ramfs").as_ptr(),
                0,
                std::ptr::null(),
            )
        };
        if rc != 0 {
            let e = std::io::Error::last_os_error();
            let _ = std::fs::remove_dir(&dir);
            return Err(e);
        }
        Ok(RamFs { dir })
    }
}

impl Drop for RamFs {
    fn drop(&mut self) {
        let target = std::ffi::CString::new(self.dir.to_str().unwrap()).unwrap();
        // SAFETY: umount2(2) of the mount made in `mount`.
        unsafe { libc::umount2(target.as_ptr(), libc::MNT_DETACH) };
        let _ = std::fs::remove_dir(&self.dir);
    }
}

#[test]
fn aio_falls_back_to_buffered_reads_where_o_direct_is_refused() {
    if !chosen("linux-aio-sendfile") {
        return;
    }
    let ram = match RamFs::mount() {
        Ok(ram) => ram,
        Err(e) => {
            test_skip::skip_or_fail(format!("cannot mount ramfs here (needs root): {e}"));
            return;
        }
    };
    // ramfs refuses O_DIRECT (EINVAL). Its pages never leave memory, so
    // only the holes of a sparse file make the server read (and so try
    // O_DIRECT) instead of sending straight from the page cache.
    let path = ram.dir.join("sparse");
    let f = std::fs::File::create(&path).unwrap();
    let size = (3 << 20) + 777;
    f.set_len(size).unwrap();
    let mut want = vec![0u8; size as usize];
    for off in [0u64, 700_000, 2_000_001] {
        let data = random_bytes(5000, off);
        std::os::unix::fs::FileExt::write_all_at(&f, &data, off).unwrap();
        want[off as usize..off as usize + 5000].copy_from_slice(&data);
    }
    drop(f);
    let srv = Server::start(
        "linux-aio-sendfile",
        &ram.dir,
        &["--workers", "2", "--chunk-size", "64k"],
    );
    for _ in 0..3 {
        let r = get(&srv, "/sparse");
        assert!(r.body == want, "sparse file on ramfs differs");
        let r = fetch(&srv, "/sparse", Some("699999-2100000"));
        assert!(
            r.body[..] == want[699_999..2_100_001],
            "range of the sparse file differs"
        );
    }
    let err = srv.stderr();
    assert_eq!(
        err.matches("refuses O_DIRECT").count(),
        1,
        "the fallback must be logged exactly once:\n{err}"
    );
}
