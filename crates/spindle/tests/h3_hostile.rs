//! HTTP/3 (`--http3`) against hostile clients (tests/data/h3hostile.py, on
//! raw UDP sockets and aioquic), on every backend that serves HTTP/3:
//! garbage datagrams, a flood of Initials past the Retry threshold, a
//! client that never answers (amplification), streams past the limit, field
//! sections past the limit, and a download whose client stops
//! acknowledging.
//!
//! Under every attack the server stays up, its memory (VmRSS) stays
//! bounded, a probe on another connection keeps its latency (a small file
//! fetched every 40 ms over HTTPS, TCP, from the same single worker), and
//! a new HTTP/3 client is served byte for byte afterwards. Each test
//! prints what it measured (`--nocapture`).

mod common;

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use common::*;
use rustls::pki_types::pem::PemObject;
use serde_json::Value;
use spindle::config::Cap;
use spindle::quic::{MAX_REQUEST_STREAMS, RETRY_ABOVE, SEND_WINDOW};

/// Fetches of the probe, after the one that opens its connection.
const PROBES: usize = 50;

/// The probe's bound on its 99th percentile (of 50 fetches: the slowest).
/// Measured on a two-core machine: 0.3 to 4 ms under most attacks here,
/// 8 to 10 ms under the flood of Initials (64 handshakes begun in one
/// turn of the worker's loop). The aim is 10 ms; the bound is looser so
/// that a loaded CI machine (a build on the other core) does not fail it,
/// and still far below what a worker blocked by an attack shows (seconds:
/// a worker spending 0.5 ms on each garbage datagram fails it).
const PROBE_P99_MAX: Duration = Duration::from_millis(50);

/// How much the server's resident memory may grow under an attack that
/// holds no response: measured at 0 to 3 MiB (the most for 64 handshakes
/// in progress).
const GROWTH_MAX_KIB: u64 = 16 << 10;

// What the attacks below are sized for: a flood of 200 Initials passes
// the Retry threshold, and the stalled download's bound (12 MiB) is three
// send windows.
const _: () = assert!(RETRY_ABOVE <= 100);
const _: () = assert!(SEND_WINDOW == 4 << 20);

/// VmRSS of process `pid`, in KiB.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("the server runs");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS")
}

/// The highest VmRSS of a process, sampled every 20 ms until stopped.
struct Peak {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<u64>,
}

impl Peak {
    fn start(pid: u32) -> Peak {
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut peak = 0;
            while !s.load(Ordering::Relaxed) {
                peak = peak.max(rss_kib(pid));
                std::thread::sleep(Duration::from_millis(20));
            }
            peak.max(rss_kib(pid))
        });
        Peak { stop, thread }
    }

    fn stop(self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap()
    }
}

/// The probe: an HTTPS connection (rustls, HTTP/1.1 kept alive) to the
/// server's TCP port, opened before the attack, fetching /f4096. Curl
/// would do, but its first fetch, the one an attack that blocks the
/// worker stalls, is also the one that opens the connection, and its
/// per-fetch times come out only at its end.
struct Probe {
    tls: BufReader<rustls::StreamOwned<rustls::ClientConnection, std::net::TcpStream>>,
}

impl Probe {
    fn connect(port: u16) -> Probe {
        let mut roots = rustls::RootCertStore::empty();
        let ca = std::fs::read(tls_data("ca.pem")).unwrap();
        for c in <rustls::pki_types::CertificateDer as PemObject>::pem_slice_iter(&ca) {
            roots.add(c.unwrap()).unwrap();
        }
        let cfg = rustls::ClientConfig::builder_with_provider(spindle::tls::provider())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
        let conn = rustls::ClientConnection::new(Arc::new(cfg), name).unwrap();
        let tcp = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        // A server that stopped answering fails the probe in 10 s.
        tcp.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        tcp.set_nodelay(true).unwrap();
        let mut p = Probe {
            tls: BufReader::new(rustls::StreamOwned::new(conn, tcp)),
        };
        p.fetch();
        p
    }

    /// One fetch, whole: how long it took.
    fn fetch(&mut self) -> Duration {
        let t0 = Instant::now();
        let req = b"GET /f4096 HTTP/1.1\r\nHost: localhost\r\n\r\n";
        self.tls.get_mut().write_all(req).unwrap();
        let r = read_response(&mut self.tls, false).expect("the probe's response");
        let took = t0.elapsed();
        assert_eq!((r.status, r.body.len()), (200, 4096), "a probe fetch");
        took
    }

    /// [`PROBES`] fetches, one every 40 ms: each one's time.
    fn run(mut self) -> Vec<Duration> {
        let t0 = Instant::now();
        (0..PROBES as u32)
            .map(|i| {
                let at = t0 + Duration::from_millis(40) * i;
                std::thread::sleep(at.saturating_duration_since(Instant::now()));
                self.fetch()
            })
            .collect()
    }
}

/// Runs `cmd` with `input` on its stdin; killed and failed if it takes
/// longer than `within` (a server that stopped answering must fail the
/// test, not hang it), or if it fails.
fn bounded(mut cmd: Command, input: &[u8], within: Duration, what: &str) -> Output {
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    child.stdin.take().unwrap().write_all(input).unwrap();
    let t0 = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if t0.elapsed() > within {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what}: not done in {within:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{what} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// The `q`-quantile of `times` (nearest rank).
fn quantile(times: &[Duration], q: f64) -> Duration {
    let mut t = times.to_vec();
    t.sort();
    let rank = ((q * t.len() as f64).ceil() as usize).clamp(1, t.len());
    t[rank - 1]
}

/// h3hostile.py running one attack: its stdout's lines.
struct Attack {
    _child: Killed,
    lines: mpsc::Receiver<String>,
    mode: String,
}

impl Attack {
    /// Starts `h3hostile.py MODE PORT ARGS` and waits (15 s at most) for
    /// its first line: the attack is under way. Returns it and that line.
    fn start(mode: &str, port: u16, args: &[&str]) -> (Attack, String) {
        let mut child = Command::new("python3")
            .arg(test_data("h3hostile.py"))
            .arg(mode)
            .arg(port.to_string())
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("python3 runs");
        let out = BufReader::new(child.stdout.take().unwrap());
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for l in out.lines().map_while(Result::ok) {
                if tx.send(l).is_err() {
                    return;
                }
            }
        });
        let a = Attack {
            _child: Killed(child),
            lines,
            mode: mode.to_string(),
        };
        let first = a.line(Duration::from_secs(15));
        (a, first)
    }

    fn line(&self, within: Duration) -> String {
        self.lines
            .recv_timeout(within)
            .unwrap_or_else(|e| panic!("h3hostile.py {}: no line ({e})", self.mode))
    }

    /// What the attacker saw (its JSON line, 20 s at most).
    fn finish(self) -> Value {
        let l = self.line(Duration::from_secs(20));
        serde_json::from_str(&l).unwrap_or_else(|e| panic!("{}: {e}: {l}", self.mode))
    }
}

/// A new aioquic connection fetches /f4097 byte for byte.
fn h3_served(port: u16, root: &DocRoot) {
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = Command::new("python3");
    cmd.arg(test_data("h3client.py"))
        .arg(port.to_string())
        .arg("--out")
        .arg(dir.path())
        .args(["--timeout", "15"]);
    let what = "a new HTTP/3 client";
    bounded(
        cmd,
        br#"[{"path": "/f4097"}]"#,
        Duration::from_secs(20),
        what,
    );
    let body = std::fs::read(dir.path().join("0")).unwrap();
    assert!(body == root.read("f4097"), "{} bytes of f4097", body.len());
}

/// A server with `--http3` under attack, and what it measured.
struct Target {
    srv: Server,
    port: u16,
    root: DocRoot,
    backend: String,
}

/// What one attack did.
struct Outcome {
    /// The attacker's JSON.
    seen: Value,
    /// Its first line (`started`, `stalled N`).
    first: String,
    probe_p50: Duration,
    probe_p99: Duration,
    rss_before: u64,
    rss_peak: u64,
    rss_after: u64,
}

impl Target {
    fn start(backend: &str, with_big: bool) -> Target {
        let root = DocRoot::new(with_big);
        let (srv, port) = start_with_https(backend, &root.dir, None, &["--http3"]);
        // What a server allocates on its first requests of each kind is
        // there before the first measure.
        h3_served(port, &root);
        let mut p = Probe::connect(port);
        for _ in 0..5 {
            p.fetch();
        }
        Target {
            srv,
            port,
            root,
            backend: backend.to_string(),
        }
    }

    /// Runs `h3hostile.py MODE PORT ARGS` with the probe beside it; the
    /// server must stay up, keep the probe's p99 under
    /// [`PROBE_P99_MAX`], grow by less than `growth_max` KiB, and serve
    /// a new HTTP/3 client afterwards.
    fn attack(&mut self, mode: &str, args: &[&str], growth_max: u64) -> Outcome {
        let pid = self.srv.pid();
        let rss_before = rss_kib(pid);
        let peak = Peak::start(pid);
        let t0 = Instant::now();
        let probe = Probe::connect(self.port);
        let (attack, first) = Attack::start(mode, self.port, args);
        let prober = std::thread::spawn(move || probe.run());
        let seen = attack.finish();
        let took = t0.elapsed();
        let times = prober.join();
        let rss_peak = peak.stop();
        let log = self.srv.stderr();
        assert!(
            !log.contains("panicked"),
            "{mode}: the server panicked:\n{log}"
        );
        assert!(self.srv.alive(), "{mode}: the server died");
        let times = times.unwrap_or_else(|_| panic!("{mode}: the probe failed"));
        h3_served(self.port, &self.root);
        let o = Outcome {
            seen,
            first,
            probe_p50: quantile(&times, 0.5),
            probe_p99: quantile(&times, 0.99),
            rss_before,
            rss_peak,
            rss_after: rss_kib(pid),
        };
        eprintln!(
            "{} {mode} {args:?} ({took:.1?}): probe p50 {:.2?} p99 {:.2?}; \
             VmRSS {} KiB before, {} peak, {} after",
            self.backend, o.probe_p50, o.probe_p99, o.rss_before, o.rss_peak, o.rss_after
        );
        assert!(
            o.probe_p99 < PROBE_P99_MAX,
            "{mode}: probe p99 {:?}",
            o.probe_p99
        );
        let growth = o.rss_peak.saturating_sub(o.rss_before);
        assert!(
            growth < growth_max,
            "{mode}: VmRSS grew by {growth} KiB ({} to {})",
            o.rss_before,
            o.rss_peak
        );
        o
    }
}

/// Runs `test` on a server of every backend that serves HTTP/3.
fn on_every_backend(with_big: bool, test: fn(&mut Target)) {
    if !have_aioquic() {
        return;
    }
    for b in &backends_with(Cap::Http2) {
        let mut t = Target::start(b, with_big);
        test(&mut t);
    }
}

/// The JSON's `key` as a number.
fn num(v: &Value, key: &str) -> u64 {
    v[key]
        .as_u64()
        .unwrap_or_else(|| panic!("no number {key} in {v}"))
}

#[test]
fn garbage_datagrams_are_dropped() {
    on_every_backend(false, |t| {
        let o = t.attack(
            "garbage",
            &["--count", "10000", "--seconds", "3"],
            GROWTH_MAX_KIB,
        );
        let s = &o.seen;
        eprintln!("{}: {s}", t.backend);
        assert_eq!(num(s, "sent"), 10000);
        // Some noise reads as another version (answered by Version
        // Negotiation) or as a short header (a stateless reset, smaller
        // than what it answers): never more than came in.
        assert!(num(s, "reply_bytes") < num(s, "sent_bytes") / 4, "{s}");
    });
}

/// Per source socket of an `initials` attack: bytes sent, bytes received,
/// the first packet's type.
fn per_socket(seen: &Value) -> Vec<(u64, u64, String)> {
    seen["per"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            let first = p["first"].as_str().unwrap_or("silent").to_string();
            (num(p, "sent"), num(p, "received"), first)
        })
        .collect()
}

#[test]
fn a_client_that_never_answers_gets_at_most_three_times_its_bytes() {
    on_every_backend(false, |t| {
        let o = t.attack("initials", &["--count", "8", "--wait", "3"], GROWTH_MAX_KIB);
        let mut worst = 0.0f64;
        for (sent, received, first) in per_socket(&o.seen) {
            assert_eq!(first, "initial", "{}", o.seen);
            // RFC 9000 §8.1: before the address is validated, at most
            // three times the bytes received, retransmissions included.
            assert!(received <= 3 * sent, "{received} bytes for {sent}");
            worst = worst.max(received as f64 / sent as f64);
        }
        eprintln!("{}: amplification at most {worst:.2}", t.backend);
    });
}

#[test]
fn a_flood_of_initials_past_the_threshold_gets_retry() {
    on_every_backend(false, |t| {
        // 200 Initials from four addresses (50 each, within the
        // per-address burst), never answered: the first RETRY_ABOVE start
        // handshakes, every later one gets a Retry.
        let addrs = "127.0.0.2,127.0.0.3,127.0.0.4,127.0.0.5";
        let args = ["--count", "200", "--addrs", addrs, "--wait", "2"];
        let o = t.attack("initials", &args, GROWTH_MAX_KIB);
        let per = per_socket(&o.seen);
        let initial = per.iter().filter(|p| p.2 == "initial").count();
        let retry = per.iter().filter(|p| p.2 == "retry").count();
        eprintln!("{}: {}", t.backend, o.seen["kinds"]);
        assert_eq!(initial + retry, 200, "{}", o.seen["kinds"]);
        assert!(initial <= RETRY_ABOVE, "{initial} handshakes begun");
        assert!(retry >= 200 - RETRY_ABOVE, "{retry} Retry");
        for (sent, received, _) in per {
            assert!(received <= 3 * sent, "{received} bytes for {sent}");
        }
        // The per-address rate: 100 more Initials from one address, of
        // which the first NEW_CONNECTIONS_BURST (60) and what 20 a second
        // refills are answered (with Retry: the flood's handshakes are
        // still in progress), the rest dropped.
        let args = ["--count", "100", "--addrs", "127.0.0.9", "--wait", "1"];
        let o = t.attack("initials", &args, GROWTH_MAX_KIB);
        let kinds = &o.seen["kinds"];
        eprintln!("{}: one address: {kinds}", t.backend);
        assert_eq!(kinds["initial"], Value::Null, "{kinds}");
        assert!(num(kinds, "silent") >= 20, "{kinds}");
        assert!(num(kinds, "retry") >= 60, "{kinds}");
        // h3_served (in attack) connected through a Retry meanwhile.
    });
}

#[test]
fn streams_past_the_limit_are_held_by_quic_flow_control() {
    on_every_backend(false, |t| {
        // A client that keeps to MAX_STREAMS: 1000 requests wait for
        // credit, 128 at a time, and are all answered.
        let o = t.attack("streams", &["--count", "1000"], GROWTH_MAX_KIB);
        let s = &o.seen;
        assert_eq!(num(s, "server_max_streams"), u64::from(MAX_REQUEST_STREAMS));
        assert_eq!(num(s, "blocked"), 1000 - u64::from(MAX_REQUEST_STREAMS));
        assert_eq!(num(s, "answered"), 1000, "{s}");
        // One that ignores it: quinn-proto closes the connection
        // (STREAM_LIMIT_ERROR) at the first stream past the limit, so the
        // rest are never answered.
        let args = ["--count", "1000", "--cheat", "--timeout", "2"];
        let o = t.attack("streams", &args, GROWTH_MAX_KIB);
        let s = &o.seen;
        eprintln!("{}: cheat: {s}", t.backend);
        assert!(num(s, "answered") < 1000, "{s}");
        // The CONNECTION_CLOSE itself does not reach the client while
        // responses fill the congestion window: quinn-proto 0.11.19 gates
        // it as it gates them (quinn#2785, fixed upstream by #2787 after
        // that release), so the client learns at its idle timeout. Once
        // quinn-proto has the fix, `terminated` is [4, ""].
        let code = &s["terminated"];
        assert!(code.is_null() || code[0] == 4, "{s}");
    });
}

#[test]
fn field_sections_past_the_limit_are_refused() {
    on_every_backend(false, |t| {
        let o = t.attack("headers", &[], GROWTH_MAX_KIB);
        let s = &o.seen;
        eprintln!("{}: {s}", t.backend);
        // 20 KB of fields in a 12 KB frame: past
        // qpack::MAX_FIELD_SECTION_SIZE (16 KiB), that request alone is
        // answered 431 (h3/conn/recv.rs, on_request_head), and the next on
        // the same connection is served.
        assert_eq!(num(&s["big"], "status"), 431, "{s}");
        assert_eq!(num(&s["next"], "status"), 200, "{s}");
        // A HEADERS frame past 64 KiB (frame::MAX_FRAME_PAYLOAD) is not
        // buffered: the connection closes with H3_EXCESSIVE_LOAD.
        assert_eq!(num(&s["huge"], "closed"), 0x107, "{s}");
    });
}

#[test]
fn a_client_that_stops_acknowledging_holds_at_most_the_send_window() {
    on_every_backend(true, |t| {
        // 8 MiB of /big (64 MiB) with flow-control windows of 1 GiB, then
        // nothing read, nothing acknowledged for 4 s: what the server
        // holds for it is QUIC's SEND_WINDOW (4 MiB) and one chunk.
        let args = ["--path", "/big", "--after", "8388608", "--hold", "4"];
        // Three send windows: measured at +5.5 MiB. Without the window
        // (quinn-proto then takes what the client's flow control allows)
        // the whole 64 MiB file is held.
        let o = t.attack("stall", &args, 12 << 10);
        assert!(o.first.starts_with("stalled "), "{}", o.first);
        assert_eq!(o.seen["status"], "200", "{}", o.seen);
        eprintln!(
            "{}: stalled after {} bytes; VmRSS +{} KiB",
            t.backend,
            o.seen["received"],
            o.rss_peak.saturating_sub(o.rss_before)
        );
    });
}
