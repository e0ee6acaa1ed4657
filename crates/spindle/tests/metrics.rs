//! `--metrics ADDR`: Prometheus text on a listener of its own, parsed with
//! a real client's parser (PyPI `prometheus-client`), with exact counts
//! after known traffic on every backend.

mod common;

use std::collections::HashMap;
use std::io::{BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

/// The metrics address a server printed (`... spindle[PID]: metrics on http://ADDR/metrics`).
fn metrics_addr(srv: &Server) -> SocketAddr {
    let log = srv.stderr();
    let line = log
        .lines()
        .find(|l| l.contains("]: metrics on http://"))
        .unwrap_or_else(|| panic!("no metrics line in {log}"));
    line.split("]: metrics on http://")
        .nth(1)
        .unwrap()
        .trim_end_matches("/metrics")
        .parse()
        .unwrap()
}

/// Starts a server with one worker and `--metrics 127.0.0.1:0`.
fn start(backend: &str, root: &Path, extra: &[&str]) -> (Server, SocketAddr) {
    let mut args = vec!["--workers", "1", "--metrics", "127.0.0.1:0"];
    args.extend_from_slice(extra);
    let srv = Server::start(backend, root, &args);
    let m = metrics_addr(&srv);
    (srv, m)
}

/// One raw HTTP request to the metrics listener: status, head, body.
fn fetch(addr: SocketAddr, raw: &str) -> (u16, String, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(raw.as_bytes()).unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").expect("a response head");
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    (status, head.to_string(), body.to_string())
}

fn scrape_text(addr: SocketAddr) -> String {
    let (status, head, body) = fetch(addr, "GET /metrics HTTP/1.1\r\nHost: m\r\n\r\n");
    assert_eq!(status, 200, "{head}");
    assert!(
        head.to_ascii_lowercase()
            .contains("content-type: text/plain; version=0.0.4"),
        "{head}"
    );
    body
}

/// Parsed samples by `name{labels sorted}`, and each family's type.
struct Scrape {
    samples: HashMap<String, f64>,
    types: HashMap<String, String>,
    text: String,
}

impl Scrape {
    fn get(&self, key: &str) -> f64 {
        *self
            .samples
            .get(key)
            .unwrap_or_else(|| panic!("no sample {key} in\n{}", self.text))
    }
}

const PARSER: &str = r#"
import sys
from prometheus_client.parser import text_string_to_metric_families
for f in text_string_to_metric_families(sys.stdin.read()):
    for s in f.samples:
        labels = ",".join('%s="%s"' % (k, v) for k, v in sorted(s.labels.items()))
        print("%s\t%s{%s}\t%r" % (f.type, s.name, labels, s.value))
"#;

/// Parses the exposition with `prometheus_client`'s parser. Outside CI,
/// without the package, a plain line split stands in (and the test says
/// so); in CI (`.ci/run` installs it) its absence fails the test.
fn parse(text: &str) -> Scrape {
    let run = Command::new("python3")
        .args(["-c", PARSER])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            c.stdin.take().unwrap().write_all(text.as_bytes())?;
            c.wait_with_output()
        });
    let out = match run {
        Ok(o) if o.status.success() => o,
        Ok(o) => {
            let err = String::from_utf8_lossy(&o.stderr);
            assert!(
                err.contains("No module named"),
                "the prometheus_client parser refused the exposition: {err}\n{text}"
            );
            test_skip::skip_or_fail(
                "prometheus_client's parser: not installed (pip install prometheus-client); a plain line split stands in",
            );
            return parse_plain(text);
        }
        Err(e) => {
            test_skip::skip_or_fail(format!(
                "prometheus_client's parser: python3 not run ({e}); a plain line split stands in"
            ));
            return parse_plain(text);
        }
    };
    let mut samples = HashMap::new();
    let mut types = HashMap::new();
    for line in String::from_utf8(out.stdout).unwrap().lines() {
        let mut f = line.split('\t');
        let (kind, key, value) = (f.next().unwrap(), f.next().unwrap(), f.next().unwrap());
        let name = key.split('{').next().unwrap().to_string();
        types.insert(name, kind.to_string());
        let key = key.trim_end_matches("{}").to_string();
        samples.insert(key, value.parse::<f64>().unwrap());
    }
    Scrape {
        samples,
        types,
        text: text.to_string(),
    }
}

/// The stand-in: `name{labels} value` lines, labels as printed (they are
/// printed sorted... except build_info, which the tests read by prefix).
fn parse_plain(text: &str) -> Scrape {
    let mut samples = HashMap::new();
    let mut types = HashMap::new();
    for line in text.lines() {
        if let Some(t) = line.strip_prefix("# TYPE ") {
            let (name, kind) = t.split_once(' ').unwrap();
            types.insert(name.to_string(), kind.to_string());
            continue;
        }
        if line.starts_with('#') || line.is_empty() {
            continue;
        }
        let (key, value) = line.rsplit_once(' ').unwrap();
        let key = match key.split_once('{') {
            Some((name, labels)) => {
                let mut l: Vec<&str> = labels.trim_end_matches('}').split(',').collect();
                l.sort();
                format!("{name}{{{}}}", l.join(","))
            }
            None => key.to_string(),
        };
        samples.insert(key, value.parse::<f64>().unwrap());
    }
    // Histogram and counter samples carry their family's type.
    for (name, kind) in types.clone() {
        for suffix in ["_bucket", "_sum", "_count"] {
            types.insert(format!("{name}{suffix}"), kind.clone());
        }
    }
    Scrape {
        samples,
        types,
        text: text.to_string(),
    }
}

fn scrape(addr: SocketAddr) -> Scrape {
    parse(&scrape_text(addr))
}

/// Scrapes until `done` holds (a completion may be counted a moment after
/// the client has read its bytes), for at most 10 s; returns the last.
fn scrape_until(addr: SocketAddr, what: &str, done: impl Fn(&Scrape) -> bool) -> Scrape {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let s = scrape(addr);
        if done(&s) {
            return s;
        }
        assert!(Instant::now() < deadline, "never got {what}:\n{}", s.text);
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn requests(s: &Scrape) -> f64 {
    s.samples
        .iter()
        .filter(|(k, _)| k.starts_with("spindle_requests_total{"))
        .map(|(_, v)| v)
        .sum()
}

#[test]
fn counts_requests_bytes_and_cache_lookups_on_every_backend() {
    let root = DocRoot::new(false);
    for b in backends() {
        // `cache`: every first use enters the open-file cache, whatever
        // the memory (io-uring; the epoll backends always cache).
        let (srv, m) = start(&b, &root.dir, &["--first-miss", "cache"]);
        let mut bodies = 0;
        for _ in 0..5 {
            let r = get(&srv, "/f4096");
            assert_eq!(r.status, 200, "{b}");
            bodies += r.body.len();
        }
        for _ in 0..2 {
            let r = get(&srv, "/no-such-file");
            assert_eq!(r.status, 404, "{b}");
            bodies += r.body.len();
        }
        let r = request(&srv, "HEAD /f1 HTTP/1.1\r\nHost: t\r\n\r\n");
        assert_eq!(r.status, 200, "{b}");
        assert!(r.body.is_empty());
        let r = request(&srv, "\x01garbage\r\n\r\n");
        assert_eq!(r.status, 400, "{b}");
        bodies += r.body.len();
        assert!(bodies > 5 * 4096, "{b}: error pages have bodies too");

        let s = scrape_until(m, "9 requests", |s| requests(s) == 9.0);
        let want = [
            ("spindle_requests_total{code=\"2xx\",method=\"GET\"}", 5.0),
            ("spindle_requests_total{code=\"4xx\",method=\"GET\"}", 2.0),
            ("spindle_requests_total{code=\"2xx\",method=\"HEAD\"}", 1.0),
            ("spindle_requests_total{code=\"4xx\",method=\"other\"}", 1.0),
            ("spindle_requests_total{code=\"5xx\",method=\"GET\"}", 0.0),
            ("spindle_response_body_bytes_total", bodies as f64),
            ("spindle_connections_accepted_total", 9.0),
            // The first /f4096, both 404s and the HEAD /f1 open the file;
            // the other four /f4096 find it open.
            ("spindle_open_file_cache_lookups_total{result=\"hit\"}", 4.0),
            (
                "spindle_open_file_cache_lookups_total{result=\"miss\"}",
                4.0,
            ),
            ("spindle_timeouts_total{kind=\"header\"}", 0.0),
            ("spindle_accept_pauses_total{reason=\"fd_limit\"}", 0.0),
            ("spindle_disk_reads_in_flight", 0.0),
            ("spindle_access_log_dropped_lines_total", 0.0),
            ("spindle_workers", 1.0),
        ];
        for (key, v) in want {
            assert_eq!(s.get(key), v, "{b}: {key}\n{}", s.text);
        }
        // The five /f4096 bodies: from memory once the cache has their
        // bytes (a read of cached pages with RWF_NOWAIT may miss at first).
        let (hit, miss) = (
            s.get("spindle_small_file_cache_lookups_total{result=\"hit\"}"),
            s.get("spindle_small_file_cache_lookups_total{result=\"miss\"}"),
        );
        assert_eq!(hit + miss, 5.0, "{b}\n{}", s.text);
        assert!(hit >= 3.0, "{b}: {hit} small-file hits of 5\n{}", s.text);
        let backend = b.trim_end_matches("+direct");
        assert_eq!(
            s.get(&format!(
                "spindle_build_info{{backend=\"{backend}\",version=\"{}\"}}",
                env!("CARGO_PKG_VERSION")
            )),
            1.0,
            "{b}"
        );
        for (name, kind) in [
            ("spindle_requests_total", "counter"),
            ("spindle_connections_open", "gauge"),
            ("spindle_disk_read_duration_seconds_bucket", "histogram"),
        ] {
            assert_eq!(
                s.types.get(name).map(String::as_str),
                Some(kind),
                "{b} {name}"
            );
        }
        // Only /metrics is served there.
        let (st, _, _) = fetch(m, "GET / HTTP/1.1\r\nHost: m\r\n\r\n");
        assert_eq!(st, 404, "{b}");
        let (st, _, _) = fetch(m, "GET /f4096 HTTP/1.1\r\nHost: m\r\n\r\n");
        assert_eq!(st, 404, "{b}");
        let (st, _, _) = fetch(m, "POST /metrics HTTP/1.1\r\nHost: m\r\n\r\n");
        assert_eq!(st, 405, "{b}");
        // ... and the metrics are not on the public listener.
        assert_eq!(get(&srv, "/metrics").status, 404, "{b}");
    }
}

/// A directory on a real disk file system (not tmpfs), where
/// `POSIX_FADV_DONTNEED` drops pages and O_DIRECT bypasses the cache.
fn disk_dir() -> PathBuf {
    if let Some(p) = std::env::var_os("SPINDLE_TEST_TMP") {
        return PathBuf::from(p);
    }
    let t = std::env::temp_dir();
    let c = std::ffi::CString::new(t.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: an all-zero statfs is a valid value of this plain C struct.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: statfs with a NUL-terminated path and a live out-buffer.
    let rc = unsafe { libc::statfs(c.as_ptr(), &mut st) };
    if rc == 0 && st.f_type as i64 != 0x0102_1994 {
        return t;
    }
    PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
}

/// Writes back and evicts `path` from the page cache.
fn evict(path: &Path) {
    let f = std::fs::File::open(path).unwrap();
    f.sync_all().unwrap();
    // SAFETY: posix_fadvise on a descriptor we own; no memory involved.
    let rc = unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    assert_eq!(rc, 0, "posix_fadvise(DONTNEED)");
}

fn histogram_is_cumulative(s: &Scrape) {
    let mut buckets: Vec<(f64, f64)> = s
        .samples
        .iter()
        .filter_map(|(k, v)| {
            let le = k
                .strip_prefix("spindle_disk_read_duration_seconds_bucket{le=\"")?
                .trim_end_matches("\"}");
            Some((le.parse::<f64>().unwrap(), *v))
        })
        .collect();
    buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
    assert_eq!(buckets.len(), 17, "{}", s.text);
    assert!(buckets.last().unwrap().0.is_infinite());
    for w in buckets.windows(2) {
        assert!(w[0].1 <= w[1].1, "buckets not cumulative:\n{}", s.text);
    }
    assert_eq!(
        buckets.last().unwrap().1,
        s.get("spindle_disk_read_duration_seconds_count"),
        "+Inf bucket against _count"
    );
}

/// A cold file on every backend: the disk reads are counted by mode, and
/// the latency histogram grows (io-uring, posix-aio and linux-aio time
/// their reads; linux-sendfile makes none of its own).
#[test]
fn cold_reads_fill_the_disk_read_histogram() {
    let dir = disk_dir().join(format!("spindle-metrics-cold-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    // Past the small-file limit and the io-uring sendfile threshold, less
    // than a chunk.
    let body = random_bytes(300 * 1024 + 5, 7);
    for name in ["a", "b"] {
        std::fs::write(dir.join(name), &body).unwrap();
    }
    for b in cold_backends() {
        // `cache` for io-uring's default mode: `auto` reads a first use
        // with O_DIRECT once the machine's page cache is full (as it is
        // after any benchmark on the machine), which this test must not
        // depend on; the `+direct` variant covers that path.
        let extra: &[&str] = if b == IO_URING_DIRECT {
            &[]
        } else {
            &["--first-miss", "cache"]
        };
        let (srv, m) = start(&b, &dir, extra);
        let before = scrape(m);
        histogram_is_cumulative(&before);
        let count0 = before.get("spindle_disk_read_duration_seconds_count");
        for name in ["a", "b"] {
            evict(&dir.join(name));
            let r = get(&srv, &format!("/{name}"));
            assert_eq!(r.status, 200, "{b}");
            assert!(r.body == body, "{b}: body differs");
        }
        let s = scrape_until(m, "2 requests", |s| requests(s) == 2.0);
        histogram_is_cumulative(&s);
        let count = s.get("spindle_disk_read_duration_seconds_count");
        let (cached, direct) = (
            s.get("spindle_disk_reads_total{mode=\"page_cache\"}"),
            s.get("spindle_disk_reads_total{mode=\"direct\"}"),
        );
        assert_eq!(
            s.get("spindle_disk_reads_in_flight"),
            0.0,
            "{b}\n{}",
            s.text
        );
        assert_eq!(count, cached + direct, "{b}: every read timed\n{}", s.text);
        match b.as_str() {
            "linux-sendfile" => assert_eq!(count, 0.0, "{b}"),
            IO_URING_DIRECT => {
                assert!(direct >= 2.0, "{b}: O_DIRECT reads\n{}", s.text);
                assert!(count > count0, "{b}");
            }
            "linux-aio-sendfile" => assert!(direct >= 2.0, "{b}\n{}", s.text),
            _ => assert!(cached >= 2.0, "{b}: buffered reads\n{}", s.text),
        }
        if count > 0.0 {
            assert!(
                s.get("spindle_disk_read_duration_seconds_sum") > 0.0,
                "{b}\n{}",
                s.text
            );
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The scrape answers while the worker holds a response for a client that
/// does not read, an idle keep-alive connection and a half-sent head; then
/// each is dropped by its own timer, counted by kind.
#[test]
fn gauges_while_busy_and_timeouts_by_kind() {
    let root = DocRoot::new(true);
    for b in backends() {
        let (srv, m) = start(
            &b,
            &root.dir,
            &[
                "--send-timeout",
                "2",
                "--keepalive-timeout",
                "2",
                "--header-timeout",
                "2",
            ],
        );
        // A client that asks for 64 MiB and reads none of it.
        let slow = srv.connect();
        small_rcvbuf(&slow);
        (&slow)
            .write_all(b"GET /big HTTP/1.1\r\nHost: t\r\n\r\n")
            .unwrap();
        // A keep-alive connection that had one answer and sends no more.
        let idle = srv.connect();
        (&idle)
            .write_all(b"GET /f1 HTTP/1.1\r\nHost: t\r\n\r\n")
            .unwrap();
        let r = read_response(&mut BufReader::new(&idle), false).unwrap();
        assert_eq!(r.status, 200);
        // Half a request head.
        let half = srv.connect();
        (&half).write_all(b"GET /f1 HTTP/1.1\r\n").unwrap();

        let t = Instant::now();
        let s = scrape_until(m, "3 open, 1 idle", |s| {
            s.get("spindle_connections_open") == 3.0 && s.get("spindle_connections_idle") == 1.0
        });
        assert!(
            t.elapsed() < Duration::from_millis(1500),
            "{b}: the scrape took {:?} while the worker was busy",
            t.elapsed()
        );
        assert_eq!(
            s.get("spindle_requests_total{code=\"2xx\",method=\"GET\"}"),
            1.0,
            "{b}: the held response is not complete"
        );

        let s = scrape_until(m, "3 timeouts", |s| {
            s.samples
                .iter()
                .filter(|(k, _)| k.starts_with("spindle_timeouts_total"))
                .map(|(_, v)| v)
                .sum::<f64>()
                == 3.0
        });
        for (kind, v) in [
            ("header", 1.0),
            ("keepalive", 1.0),
            ("send", 1.0),
            ("linger", 0.0),
            ("drain", 0.0),
        ] {
            assert_eq!(
                s.get(&format!("spindle_timeouts_total{{kind=\"{kind}\"}}")),
                v,
                "{b}: {kind}\n{}",
                s.text
            );
        }
        let s = scrape_until(m, "no connection left", |s| {
            s.get("spindle_connections_open") == 0.0
        });
        assert_eq!(s.get("spindle_connections_idle"), 0.0, "{b}\n{}", s.text);
        drop((slow, idle, half));
    }
}

#[test]
fn max_connections_pause_is_counted() {
    let root = DocRoot::new(false);
    for b in backends() {
        let (srv, m) = start(&b, &root.dir, &["--max-connections", "1"]);
        let c = srv.connect();
        (&c).write_all(b"GET /f1 HTTP/1.1\r\nHost: t\r\n\r\n")
            .unwrap();
        read_response(&mut BufReader::new(&c), false).unwrap();
        let s = scrape(m);
        assert_eq!(
            s.get("spindle_accept_pauses_total{reason=\"max_connections\"}"),
            1.0,
            "{b}\n{}",
            s.text
        );
        drop(c);
    }
}

/// Listening TCP sockets the process holds (from /proc).
fn listening_sockets(pid: u32) -> usize {
    let mut inodes = std::collections::HashSet::new();
    for e in std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .flatten()
    {
        if let Ok(t) = std::fs::read_link(e.path()) {
            let t = t.to_string_lossy().into_owned();
            if let Some(i) = t.strip_prefix("socket:[").and_then(|r| r.strip_suffix(']')) {
                inodes.insert(i.to_string());
            }
        }
    }
    let mut n = 0;
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        for line in std::fs::read_to_string(table)
            .unwrap_or_default()
            .lines()
            .skip(1)
        {
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.len() > 9 && f[3] == "0A" && inodes.contains(f[9]) {
                n += 1;
            }
        }
    }
    n
}

#[test]
fn off_by_default_and_refused_where_http_is_served() {
    let root = DocRoot::new(false);
    let srv = Server::start("io-uring", &root.dir, &["--workers", "1"]);
    assert!(!srv.stderr().contains("metrics"), "{}", srv.stderr());
    assert_eq!(listening_sockets(srv.child.id()), 1, "only the public one");
    let (srv2, _) = start("io-uring", &root.dir, &[]);
    assert_eq!(listening_sockets(srv2.child.id()), 2, "public and metrics");
    drop((srv, srv2));

    // The same address as a public listener: one line, exit 1.
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let same = format!("127.0.0.1:{port}");
    let wild = format!("0.0.0.0:{port}");
    startup_error(
        &["--listen", &same, "--metrics", &same],
        "where HTTP is served",
    );
    startup_error(
        &["--listen", &wild, "--metrics", &same],
        "where HTTP is served",
    );
    // No --listen: the default 127.0.0.1:8080 is public.
    startup_error(&["--metrics", "127.0.0.1:8080"], "where HTTP is served");
    // An address not on this machine, and one in the config file.
    startup_error(
        &["--listen", "127.0.0.1:0", "--metrics", "203.0.113.7:9100"],
        "for metrics",
    );
    let cfg = root.path("metrics.toml");
    std::fs::write(&cfg, "metrics = \"nonsense\"\n").unwrap();
    startup_error(
        &["--listen", "127.0.0.1:0", "--config", cfg.to_str().unwrap()],
        "config file",
    );
    std::fs::write(
        &cfg,
        format!("listen = [\"{same}\"]\nmetrics = \"{same}\"\n"),
    )
    .unwrap();
    startup_error(&["--config", cfg.to_str().unwrap()], "where HTTP is served");
    // From the config file, under the same name.
    std::fs::write(&cfg, "metrics = \"127.0.0.1:0\"\n").unwrap();
    let srv = Server::start(
        "io-uring",
        &root.dir,
        &["--workers", "1", "--config", cfg.to_str().unwrap()],
    );
    let s = scrape(metrics_addr(&srv));
    assert_eq!(s.get("spindle_connections_open"), 0.0);
}

/// A client that sends nothing holds the metrics listener for at most
/// its 2 s timeout; the next scrape is answered after it.
#[test]
fn a_silent_metrics_client_is_dropped() {
    let root = DocRoot::new(false);
    let (_srv, m) = start("io-uring", &root.dir, &[]);
    let silent = TcpStream::connect(m).unwrap();
    let t = Instant::now();
    scrape(m);
    assert!(
        t.elapsed() < Duration::from_secs(5),
        "scrape waited {:?}",
        t.elapsed()
    );
    drop(silent);
}
