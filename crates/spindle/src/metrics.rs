//! Prometheus metrics (`--metrics ADDR`): per-worker counters, summed when
//! scraped, and the small listener that serves them.
//!
//! Each worker owns one [`WorkerMetrics`], allocated on its own (and aligned
//! to 128 bytes, so two workers' counters never share a cache line) and
//! written only by that worker's thread. A single writer needs no
//! read-modify-write: [`Counter::add`] is a `Relaxed` load and store of an
//! `AtomicU64`, which compiles to plain moves on x86-64 and AArch64, so the
//! hot path takes no lock, no locked instruction and no system call. The
//! scraper reads every worker's values with `Relaxed` loads and sums them;
//! a scrape is not a snapshot across counters (a request finishing during
//! the scrape may show in one counter and not yet in another), but every
//! counter is monotonic, and a histogram's `_count` is the sum of its own
//! buckets, so the two always agree.
//!
//! The counters are kept whether or not `--metrics` is given (a handful
//! of plain stores per request); only the listener is optional.
//!
//! The listener is a plain-HTTP server on its own thread, outside the
//! workers: blocking `accept`, one connection at a time, at most
//! [`MAX_REQUEST`] bytes of request head read within [`CLIENT_TIMEOUT`] in
//! all, then one answer and close. `GET /metrics` gets the text format
//! 0.0.4; anything else 404 (a non-GET 405). A client that stalls holds
//! the listener for at most that timeout.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::accesslog::AccessLog;

/// How long a metrics client has to send its request and take the answer.
pub const CLIENT_TIMEOUT: Duration = Duration::from_secs(2);
/// The largest request head the metrics listener reads.
pub const MAX_REQUEST: usize = 8192;

/// A value written by one thread only (its worker), read by any.
#[derive(Default)]
pub struct Counter(AtomicU64);

impl Counter {
    /// Adds `n`. Only the owning worker calls this: a load and a store,
    /// not an atomic add (see the module comment).
    #[inline]
    pub fn add(&self, n: u64) {
        self.0.store(
            self.0.load(Ordering::Relaxed).wrapping_add(n),
            Ordering::Relaxed,
        );
    }

    #[inline]
    pub fn inc(&self) {
        self.add(1);
    }

    /// Subtracts `n` (gauges only).
    #[inline]
    pub fn sub(&self, n: u64) {
        self.0.store(
            self.0.load(Ordering::Relaxed).wrapping_sub(n),
            Ordering::Relaxed,
        );
    }

    /// Sets a gauge.
    #[inline]
    pub fn set(&self, v: u64) {
        self.0.store(v, Ordering::Relaxed);
    }

    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// Upper bounds of the disk-read latency buckets, in seconds (`+Inf`
/// follows): 0.1 ms to 10 s.
pub const LATENCY_BOUNDS: [f64; 16] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0,
];
/// The same bounds in nanoseconds, for the worker's comparison.
const LATENCY_BOUNDS_NS: [u64; 16] = [
    100_000,
    250_000,
    500_000,
    1_000_000,
    2_500_000,
    5_000_000,
    10_000_000,
    25_000_000,
    50_000_000,
    100_000_000,
    250_000_000,
    500_000_000,
    1_000_000_000,
    2_500_000_000,
    5_000_000_000,
    10_000_000_000,
];

/// A fixed-bucket latency histogram. Each bucket counts only its own
/// range (the last one everything above 10 s); the scrape makes them
/// cumulative, as Prometheus wants.
#[derive(Default)]
pub struct Histogram {
    buckets: [Counter; LATENCY_BOUNDS.len() + 1],
    sum_ns: Counter,
}

impl Histogram {
    pub fn observe(&self, d: Duration) {
        let ns = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        let i = LATENCY_BOUNDS_NS.partition_point(|&b| b < ns);
        self.buckets[i].inc();
        self.sum_ns.add(ns);
    }
}

/// Status classes 1xx..5xx; anything else counts as 5xx.
pub const STATUS_CLASSES: [&str; 5] = ["1xx", "2xx", "3xx", "4xx", "5xx"];
/// Methods kept apart; every other method (and a request rejected before
/// its method was read) is `other`.
pub const METHODS: [&str; 3] = ["GET", "HEAD", "other"];

/// Why a connection timed out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Timeout {
    /// A request head (or TLS handshake) not complete in `--header-timeout`.
    Header = 0,
    /// An idle keep-alive connection, after `--keepalive-timeout`.
    Keepalive,
    /// A response that made no progress for `--send-timeout`.
    Send,
    /// A lingering close that went on for its 2 s.
    Linger,
    /// Still open at the end of `--drain-timeout` after SIGTERM.
    Drain,
}
const TIMEOUT_KINDS: [&str; 5] = ["header", "keepalive", "send", "linger", "drain"];
use spindle_core::rules::REFUSALS;

/// Why accepting paused.
#[derive(Debug, Clone, Copy)]
pub enum Pause {
    /// Out of descriptors (EMFILE and friends) with nothing left to shed:
    /// a second's pause.
    FdLimit = 0,
    /// The worker's share of `--max-connections` reached.
    MaxConnections,
}
const PAUSE_REASONS: [&str; 2] = ["fd_limit", "max_connections"];

/// How a disk read of a response body went.
#[derive(Debug, Clone, Copy)]
pub enum ReadMode {
    /// Through the page cache (a buffered read: it may find the pages there).
    PageCache = 0,
    /// With `O_DIRECT`, past the page cache.
    Direct,
}
const READ_MODES: [&str; 2] = ["page_cache", "direct"];

/// One worker's counters. Written by that worker only.
#[repr(align(128))]
#[derive(Default)]
pub struct WorkerMetrics {
    /// By method × status class.
    requests: [[Counter; STATUS_CLASSES.len()]; METHODS.len()],
    body_bytes: Counter,
    pub accepted: Counter,
    /// Gauges.
    pub open: Counter,
    pub idle: Counter,
    pub disk_in_flight: Counter,
    disk_reads: [Counter; READ_MODES.len()],
    pub disk_latency: Histogram,
    /// Open-file cache lookups: hits and misses.
    pub ofc_hits: Counter,
    pub ofc_misses: Counter,
    /// Responses whose body is a small file: from memory, or not.
    pub small_hits: Counter,
    pub small_misses: Counter,
    /// Responses that could go compressed: from a stored result, or not.
    pub compress_hits: Counter,
    pub compress_misses: Counter,
    pauses: [Counter; PAUSE_REASONS.len()],
    timeouts: [Counter; TIMEOUT_KINDS.len()],
    refusals: [Counter; REFUSALS.len()],
}

impl WorkerMetrics {
    /// A response completed: `method` as the session has it, `status` its
    /// code, `body` its body bytes (as in the access log).
    #[inline]
    pub fn request(&self, method: &str, status: u16, body: u64) {
        let m = match method {
            "GET" => 0,
            "HEAD" => 1,
            _ => 2,
        };
        let s = (status as usize / 100).clamp(1, 5) - 1;
        self.requests[m][s].inc();
        self.body_bytes.add(body);
    }

    /// A rule refused a request ([[rules]] `allow`/`deny`, `referers`,
    /// `secure-link`).
    #[inline]
    pub fn refused(&self, why: spindle_core::rules::Refusal) {
        self.refusals[why as usize].inc();
    }

    #[inline]
    pub fn timeout(&self, kind: Timeout) {
        self.timeouts[kind as usize].inc();
    }

    #[inline]
    pub fn pause(&self, why: Pause) {
        self.pauses[why as usize].inc();
    }

    /// A disk read was issued.
    #[inline]
    pub fn disk_read(&self, mode: ReadMode) {
        self.disk_reads[mode as usize].inc();
        self.disk_in_flight.inc();
    }

    /// A disk read completed after `took`.
    #[inline]
    pub fn disk_read_done(&self, took: Duration) {
        self.disk_in_flight.sub(1);
        self.disk_latency.observe(took);
    }

    /// A small-file response: its body came from memory (`hit`) or not.
    #[inline]
    pub fn small_file(&self, hit: bool) {
        if hit {
            self.small_hits.inc()
        } else {
            self.small_misses.inc()
        }
    }

    /// A response that could go compressed: `hit`, from a stored result.
    #[inline]
    pub fn compress(&self, hit: bool) {
        if hit {
            self.compress_hits.inc()
        } else {
            self.compress_misses.inc()
        }
    }

    /// An open-file cache lookup.
    #[inline]
    pub fn open_file(&self, hit: bool) {
        if hit {
            self.ofc_hits.inc()
        } else {
            self.ofc_misses.inc()
        }
    }
}

/// Every worker's metrics, and what else a scrape reports.
pub struct Registry {
    workers: Vec<Arc<WorkerMetrics>>,
    backend: &'static str,
    log: AccessLog,
}

impl Registry {
    /// One [`WorkerMetrics`] per worker, each its own allocation.
    pub fn new(workers: usize, backend: &'static str, log: AccessLog) -> Registry {
        Registry {
            workers: (0..workers)
                .map(|_| Arc::new(WorkerMetrics::default()))
                .collect(),
            backend,
            log,
        }
    }

    pub fn worker(&self, id: usize) -> Arc<WorkerMetrics> {
        self.workers[id].clone()
    }

    fn sum(&self, f: impl Fn(&WorkerMetrics) -> u64) -> u64 {
        self.workers.iter().fold(0u64, |a, w| a.wrapping_add(f(w)))
    }

    /// The text exposition format, version 0.0.4.
    pub fn render(&self) -> String {
        let mut o = Exposition(String::with_capacity(8192));
        self.render_requests(&mut o);
        self.render_connections(&mut o);
        o.by(
            ("spindle_refusals_total", "counter", "Requests a rule refused, by reason: address (allow/deny), referer, signature (secure-link: missing or wrong), expired (secure-link: past its time)."),
            "reason",
            REFUSALS.iter().enumerate().map(|(i, k)| (*k, self.sum(|w| w.refusals[i].get()))),
        );
        o.by(
            (
                "spindle_open_file_cache_lookups_total",
                "counter",
                "Open-file cache lookups: hit (no open) or miss.",
            ),
            "result",
            [
                ("hit", self.sum(|w| w.ofc_hits.get())),
                ("miss", self.sum(|w| w.ofc_misses.get())),
            ]
            .into_iter(),
        );
        o.by(
            ("spindle_small_file_cache_lookups_total", "counter", "Responses with a body from a file of at most 16 KiB: hit (its bytes came from memory) or miss (read from the file)."),
            "result",
            [("hit", self.sum(|w| w.small_hits.get())), ("miss", self.sum(|w| w.small_misses.get()))].into_iter(),
        );
        o.by(
            ("spindle_disk_reads_total", "counter", "Asynchronous reads of response bodies issued, by mode: page_cache (buffered) or direct (O_DIRECT)."),
            "mode",
            READ_MODES.iter().enumerate().map(|(i, r)| (*r, self.sum(|w| w.disk_reads[i].get()))),
        );
        o.one(
            "spindle_disk_reads_in_flight",
            "gauge",
            "Asynchronous reads of response bodies in flight now.",
            self.sum(|w| w.disk_in_flight.get()),
        );
        self.render_disk_latency(&mut o);
        o.one(
            "spindle_access_log_dropped_lines_total",
            "counter",
            "Access-log lines dropped because the writer thread fell behind.",
            self.log.dropped(),
        );
        o.0.push_str(&crate::acme::metrics_text());
        o.0.push_str(&crate::compress::metrics_text(
            self.sum(|w| w.compress_hits.get()),
            self.sum(|w| w.compress_misses.get()),
        ));
        o.0.push_str(&crate::edge::metrics_text());
        o.0
    }

    /// The build, the workers, and the responses completed.
    fn render_requests(&self, o: &mut Exposition) {
        o.family(
            "spindle_build_info",
            "gauge",
            "The running build: its version and I/O backend (always 1).",
        );
        o.line(format_args!(
            "spindle_build_info{{version=\"{}\",backend=\"{}\"}} 1",
            env!("CARGO_PKG_VERSION"),
            self.backend
        ));
        o.one(
            "spindle_workers",
            "gauge",
            "Worker threads.",
            self.workers.len() as u64,
        );
        o.family(
            "spindle_requests_total",
            "counter",
            "Responses completed (one per access-log line), by method and status class.",
        );
        for (m, method) in METHODS.iter().enumerate() {
            for (s, class) in STATUS_CLASSES.iter().enumerate() {
                let v = self.sum(|w| w.requests[m][s].get());
                o.line(format_args!(
                    "spindle_requests_total{{method=\"{method}\",code=\"{class}\"}} {v}"
                ));
            }
        }
        o.one(
            "spindle_response_body_bytes_total",
            "counter",
            "Body bytes of the responses completed (the access log's bytes field).",
            self.sum(|w| w.body_bytes.get()),
        );
    }

    /// Connections: accepted, open, idle, and why accepting paused or a
    /// timer dropped one.
    fn render_connections(&self, o: &mut Exposition) {
        o.one(
            "spindle_connections_accepted_total",
            "counter",
            "Connections accepted.",
            self.sum(|w| w.accepted.get()),
        );
        o.one(
            "spindle_connections_open",
            "gauge",
            "Connections open now.",
            self.sum(|w| w.open.get()),
        );
        o.one(
            "spindle_connections_idle",
            "gauge",
            "Open connections waiting for a request, with none under way (keep-alive).",
            self.sum(|w| w.idle.get()),
        );
        o.by(
            ("spindle_accept_pauses_total", "counter", "Times a worker stopped accepting: out of descriptors (a second's pause), or at its share of --max-connections."),
            "reason",
            PAUSE_REASONS.iter().enumerate().map(|(i, r)| (*r, self.sum(|w| w.pauses[i].get()))),
        );
        o.by(
            ("spindle_timeouts_total", "counter", "Connections dropped by a timer, by kind: header, keepalive (idle), send, linger (lingering close), drain (shutdown)."),
            "kind",
            TIMEOUT_KINDS.iter().enumerate().map(|(i, k)| (*k, self.sum(|w| w.timeouts[i].get()))),
        );
    }

    fn render_disk_latency(&self, o: &mut Exposition) {
        o.family(
            "spindle_disk_read_duration_seconds",
            "histogram",
            "Asynchronous reads of response bodies, from submission to completion (resolution: one event-loop turn).",
        );
        let mut cum = 0u64;
        for (i, b) in LATENCY_BOUNDS.iter().enumerate() {
            cum = cum.wrapping_add(self.sum(|w| w.disk_latency.buckets[i].get()));
            o.line(format_args!(
                "spindle_disk_read_duration_seconds_bucket{{le=\"{b}\"}} {cum}"
            ));
        }
        cum = cum.wrapping_add(self.sum(|w| w.disk_latency.buckets[LATENCY_BOUNDS.len()].get()));
        let sum_ns = self.sum(|w| w.disk_latency.sum_ns.get());
        o.line(format_args!(
            "spindle_disk_read_duration_seconds_bucket{{le=\"+Inf\"}} {cum}\nspindle_disk_read_duration_seconds_sum {}\nspindle_disk_read_duration_seconds_count {cum}",
            sum_ns as f64 / 1e9
        ));
    }
}

/// One family in Prometheus' text format, its samples labelled as given
/// (`""`, or `{name="value"}`): for the helpers' own metrics (compression,
/// the edge).
pub fn family_text(o: &mut String, name: &str, kind: &str, help: &str, samples: &[(&str, u64)]) {
    use std::fmt::Write as _;
    let _ = writeln!(o, "# HELP {name} {help}\n# TYPE {name} {kind}");
    for (labels, v) in samples {
        let _ = writeln!(o, "{name}{labels} {v}");
    }
}

/// A text exposition being written.
struct Exposition(String);

impl Exposition {
    fn line(&mut self, args: std::fmt::Arguments) {
        use std::fmt::Write as _;
        let _ = self.0.write_fmt(args);
        self.0.push('\n');
    }

    /// A family's `HELP` and `TYPE` lines.
    fn family(&mut self, name: &str, kind: &str, help: &str) {
        self.line(format_args!("# HELP {name} {help}\n# TYPE {name} {kind}"));
    }

    /// A family of one sample without labels.
    fn one(&mut self, name: &str, kind: &str, help: &str, v: u64) {
        self.family(name, kind, help);
        self.line(format_args!("{name} {v}"));
    }

    /// A family of one sample per value of one label.
    fn by<'a>(
        &mut self,
        (name, kind, help): (&str, &str, &str),
        label: &str,
        values: impl Iterator<Item = (&'a str, u64)>,
    ) {
        self.family(name, kind, help);
        for (l, v) in values {
            self.line(format_args!("{name}{{{label}=\"{l}\"}} {v}"));
        }
    }
}

/// Serves `GET /metrics` on `listener` until the process exits, one
/// connection at a time, on a thread of its own.
pub fn serve(listener: TcpListener, registry: Arc<Registry>) -> Result<(), String> {
    std::thread::Builder::new()
        .name("spindle-metrics".into())
        .spawn(move || {
            for conn in listener.incoming() {
                match conn {
                    Ok(s) => answer(s, &registry),
                    // EMFILE and the like: do not spin.
                    Err(_) => std::thread::sleep(Duration::from_millis(100)),
                }
            }
        })
        .map(|_| ())
        .map_err(|e| format!("cannot start the metrics thread: {e}"))
}

/// Reads one request head (within [`CLIENT_TIMEOUT`] and [`MAX_REQUEST`]
/// bytes) and answers it; the connection is then closed.
fn answer(mut s: TcpStream, registry: &Registry) {
    let deadline = Instant::now() + CLIENT_TIMEOUT;
    let mut buf = vec![0u8; MAX_REQUEST];
    let mut got = 0;
    let complete = loop {
        if buf[..got].windows(4).any(|w| w == b"\r\n\r\n")
            || buf[..got].windows(2).any(|w| w == b"\n\n")
        {
            break true;
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() || got == buf.len() || s.set_read_timeout(Some(left)).is_err() {
            break false;
        }
        match s.read(&mut buf[got..]) {
            Ok(0) | Err(_) => break false,
            Ok(n) => got += n,
        }
    };
    if !complete {
        return;
    }
    let line = buf[..got].split(|&b| b == b'\n').next().unwrap_or(&[]);
    let mut words = line.split(|&b| b == b' ').filter(|w| !w.is_empty());
    let (method, target) = (words.next().unwrap_or(b""), words.next().unwrap_or(b""));
    let path = target.split(|&b| b == b'?').next().unwrap_or(b"");
    let (status, ctype, body) = match (method, path) {
        (b"GET" | b"HEAD", b"/metrics") => (
            "200 OK",
            "text/plain; version=0.0.4; charset=utf-8",
            registry.render(),
        ),
        (b"GET" | b"HEAD", _) => (
            "404 Not Found",
            "text/plain; charset=utf-8",
            "Not found: the metrics are at /metrics\n".to_string(),
        ),
        _ => (
            "405 Method Not Allowed",
            "text/plain; charset=utf-8",
            "Method not allowed\n".to_string(),
        ),
    };
    let mut out = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n{}\r\n",
        body.len(),
        if status.starts_with("405") {
            "Allow: GET, HEAD\r\n"
        } else {
            ""
        }
    );
    if method != b"HEAD" {
        out.push_str(&body);
    }
    let _ = s.set_write_timeout(Some(CLIENT_TIMEOUT));
    let _ = s.write_all(out.as_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_buckets_are_cumulative_and_counts_sum() {
        let r = Registry::new(2, "io-uring", AccessLog::disabled());
        let (a, b) = (r.worker(0), r.worker(1));
        a.disk_read(ReadMode::Direct);
        a.disk_read_done(Duration::from_micros(50));
        b.disk_read(ReadMode::PageCache);
        b.disk_read_done(Duration::from_millis(3));
        b.disk_read(ReadMode::PageCache);
        b.disk_read_done(Duration::from_secs(20));
        a.request("GET", 200, 10);
        b.request("BREW", 404, 5);
        b.request("HEAD", 999, 0);
        let t = r.render();
        for want in [
            "spindle_disk_read_duration_seconds_bucket{le=\"0.0001\"} 1\n",
            "spindle_disk_read_duration_seconds_bucket{le=\"0.0025\"} 1\n",
            "spindle_disk_read_duration_seconds_bucket{le=\"0.005\"} 2\n",
            "spindle_disk_read_duration_seconds_bucket{le=\"10\"} 2\n",
            "spindle_disk_read_duration_seconds_bucket{le=\"+Inf\"} 3\n",
            "spindle_disk_read_duration_seconds_count 3\n",
            "spindle_disk_reads_total{mode=\"page_cache\"} 2\n",
            "spindle_disk_reads_in_flight 0\n",
            "spindle_requests_total{method=\"GET\",code=\"2xx\"} 1\n",
            "spindle_requests_total{method=\"other\",code=\"4xx\"} 1\n",
            "spindle_requests_total{method=\"HEAD\",code=\"5xx\"} 1\n",
            "spindle_response_body_bytes_total 15\n",
        ] {
            assert!(t.contains(want), "{want} not in\n{t}");
        }
    }

    #[test]
    fn counters_are_padded_apart() {
        assert!(std::mem::align_of::<WorkerMetrics>() >= 128);
    }
}
