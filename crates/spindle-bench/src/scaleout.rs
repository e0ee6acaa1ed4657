//! `scaleout`: past one machine (#21 item 6). HAProxy in front of three spindle
//! replicas, each in a network namespace of its own (a veth pair to the host,
//! where HAProxy and the load generator run) and a memory cgroup of its own, each
//! over its own copy of the same content (copies, not hard links: one inode would
//! share one page cache among the replicas, which three machines never do).
//!
//! Two modes, interleaved in rounds with the first alternating: `balance
//! roundrobin` and `balance uri` with `hash-type consistent`. The working set is
//! larger than one replica's cgroup and smaller than the three together: with
//! round robin every replica caches the same hot half; with uri hashing each one
//! caches a different third, all of which fits. Per replica the hit ratio is
//! 1 − bytes its cgroup read from the disk (blkio) / body bytes it served
//! (its `--metrics`).
//!
//! Then failover: during a uri-hash run, the replica serving a large download is
//! SIGKILLed mid-body; clients fetching beside it retry failed fetches, and the
//! download resumes with `Range: bytes=N-` and must end with every byte.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use rand::{Rng, RngCore, SeedableRng};
use serde_json::{json, Value};

use crate::cold::parse_bytes;
use crate::common::{self, End, Load, Machine, Progress};
use crate::report::{col, Column, Report};
use crate::servers::which;
use crate::sys;

/// Replicas behind HAProxy.
const REPLICAS: usize = 3;
/// Port of each replica's PROXY listener, and of its metrics, in its namespace.
const HTTP_PORT: u16 = 8080;
const METRICS_PORT: u16 = 9100;
/// How long a replica or HAProxy may take to come up, or a server to be marked up.
const START_TIMEOUT: Duration = Duration::from_secs(20);
/// Attempts per fetch in the failover clients (one try and this many less one retries).
const ATTEMPTS: u32 = 5;
/// Pause before a retry.
const RETRY_PAUSE: Duration = Duration::from_millis(100);
/// Resumes the download may take before it gives up.
const MAX_RESUMES: u32 = 5;
/// Clients fetching the working set beside the download during failover.
const FAILOVER_CLIENTS: usize = 4;
/// Socket read/write timeout of the failover clients.
const IO_TIMEOUT: Duration = Duration::from_secs(10);
/// Receive buffer of the download's socket: small, so that a killed replica
/// leaves most of the body unsent.
const DOWNLOAD_RCVBUF: i32 = 64 << 10;
/// The blkio read limit that limits nothing (1 TB/s), set for its accounting.
const UNLIMITED_BPS: u64 = 1_000_000_000_000;
/// Files per folder of the working set.
const PER_DIR: usize = 100;

const MODES: [&str; 2] = ["roundrobin", "uri"];

#[derive(clap::Args, Debug, Clone)]
pub struct ScaleoutArgs {
    /// Where reports go (scaleout.json, .md, .svg; scaleout-diskN.* with --disk-mbps N).
    #[arg(long, default_value = "bench-results")]
    pub out: PathBuf,
    /// Where the content lives (DATA/scaleout-SIZE-N/r0..r2, made if missing).
    #[arg(long, default_value = "/var/tmp/spindle-bench-data")]
    pub data: PathBuf,
    /// Interleaved rounds (roundrobin and uri in each, the first alternating).
    #[arg(long, default_value_t = 3)]
    pub rounds: u32,
    /// Working set (bytes, k/m/g suffix): larger than one cgroup, smaller than three.
    #[arg(long, default_value = "1536m")]
    pub working_set: String,
    /// Size of each file of the working set.
    #[arg(long, default_value = "256k")]
    pub file_size: String,
    /// Memory cgroup limit of each replica.
    #[arg(long, default_value = "768m")]
    pub cgroup_mem: String,
    /// Seconds of load before the measured pass (the caches fill).
    #[arg(long, default_value_t = 20.0)]
    pub warmup_seconds: f64,
    /// Seconds of the measured pass.
    #[arg(long, default_value_t = 20.0)]
    pub seconds: f64,
    /// Concurrent keep-alive connections of the load generator.
    #[arg(long, default_value_t = 32)]
    pub parallel: u64,
    /// Each replica's disk reads capped at this many MB/s (blkio throttle, cgroup v1):
    /// gives each replica a disk of its own speed, as three machines would have.
    /// 0: no cap, the three share the machine's one disk.
    #[arg(long, default_value_t = 0)]
    pub disk_mbps: u64,
    /// The file downloaded through the failover.
    #[arg(long, default_value = "200m")]
    pub big_file: String,
    /// Seconds the failover download is paced to take.
    #[arg(long, default_value_t = 8.0)]
    pub download_seconds: f64,
    /// Skip the failover run.
    #[arg(long)]
    pub no_failover: bool,
    /// Skip the O_DIRECT read of the content before the first round.
    #[arg(long)]
    pub no_warm: bool,
    /// Small scale, one round, seconds: a smoke test.
    #[arg(long)]
    pub quick: bool,
}

const COLUMNS: [Column; 10] = [
    col("fetches_per_sec", "fetches/sec", 0),
    col("hit_ratio", "hit ratio, all", 3),
    col("hit_r0", "hit r0", 3),
    col("hit_r1", "hit r1", 3),
    col("hit_r2", "hit r2", 3),
    col("mb_per_sec", "MB/s", 0),
    col("fetch_ms_p99", "fetch p99 ms", 1),
    col("disk_mb_per_sec", "disk MB/s (vda, shared)", 0),
    col("haproxy_requests", "via HAProxy", 0),
    col("non_200", "non-200", 0),
];

/// The sizes of a run.
#[derive(Debug, Clone)]
struct Plan {
    files: usize,
    file_size: u64,
    cgroup: u64,
    big: u64,
    warmup: f64,
    seconds: f64,
    parallel: u64,
    download_seconds: f64,
    rounds: u32,
}

impl Plan {
    fn new(a: &ScaleoutArgs) -> Result<Plan> {
        let (ws, fs, cg, big) = if a.quick {
            (64u64 << 20, 64u64 << 10, 32u64 << 20, 64u64 << 20)
        } else {
            (
                parse_bytes(&a.working_set)?,
                parse_bytes(&a.file_size)?,
                parse_bytes(&a.cgroup_mem)?,
                parse_bytes(&a.big_file)?,
            )
        };
        if fs == 0 || ws < fs {
            bail!("--working-set must hold at least one --file-size file");
        }
        let p = Plan {
            files: (ws / fs) as usize,
            file_size: fs,
            cgroup: cg,
            big,
            warmup: if a.quick { 1.0 } else { a.warmup_seconds },
            seconds: if a.quick { 2.0 } else { a.seconds },
            parallel: if a.quick { 16 } else { a.parallel.max(1) },
            download_seconds: if a.quick {
                2.5
            } else {
                a.download_seconds.max(1.0)
            },
            rounds: if a.quick { 1 } else { a.rounds.clamp(1, 50) },
        };
        Ok(p)
    }
    fn working_set(&self) -> u64 {
        self.files as u64 * self.file_size
    }
    fn paths(&self) -> Vec<String> {
        (0..self.files)
            .map(|i| format!("d{}/f{i}", i / PER_DIR))
            .collect()
    }
}

// ---------------------------------------------------------------- content

fn fnv1a(h: u64, bytes: &[u8]) -> u64 {
    bytes
        .iter()
        .fold(h, |h, &b| (h ^ b as u64).wrapping_mul(0x100000001b3))
}
const FNV_OFFSET: u64 = 0xcbf29ce484222325;

/// The bytes of a content file, a stream seeded by its name, in chunks.
fn stream(name: &str, size: u64, mut f: impl FnMut(&[u8]) -> Result<()>) -> Result<()> {
    let mut rng = rand::rngs::SmallRng::seed_from_u64(fnv1a(FNV_OFFSET, name.as_bytes()));
    let mut buf = vec![0u8; (1 << 20).min(size as usize).max(1)];
    let mut left = size;
    while left > 0 {
        let n = (buf.len() as u64).min(left) as usize;
        rng.fill_bytes(&mut buf[..n]);
        f(&buf[..n])?;
        left -= n as u64;
    }
    Ok(())
}

/// FNV-1a 64 of a content file's bytes, from its stream (no disk read).
fn expected_digest(name: &str, size: u64) -> u64 {
    let mut h = FNV_OFFSET;
    let _ = stream(name, size, |b| {
        h = fnv1a(h, b);
        Ok(())
    });
    h
}

/// Makes (or finds complete) the three copies of the content: the working set,
/// the big file and `healthz`. Returns the replica roots.
fn ensure_content(data: &Path, p: &Plan) -> Result<Vec<PathBuf>> {
    let base = data.join(format!("scaleout-{}-{}", p.file_size, p.files));
    let roots: Vec<PathBuf> = (0..REPLICAS).map(|k| base.join(format!("r{k}"))).collect();
    let paths = p.paths();
    let stamp = format!("{} {} {}\n", p.files, p.file_size, p.big);
    for root in &roots {
        let marker = root.join(".complete");
        if std::fs::read_to_string(&marker).ok().as_deref() == Some(stamp.as_str())
            && std::fs::metadata(root.join("big")).map(|m| m.len()).ok() == Some(p.big)
        {
            continue;
        }
        eprintln!(
            "scaleout: writing {} files of {} bytes and a {} MB file in {}",
            p.files,
            p.file_size,
            p.big >> 20,
            root.display()
        );
        let _ = std::fs::remove_file(&marker);
        let write = |rel: &str, size: u64| -> Result<()> {
            let path = root.join(rel);
            if std::fs::metadata(&path).map(|m| m.len()).ok() == Some(size) {
                return Ok(());
            }
            if let Some(d) = path.parent() {
                std::fs::create_dir_all(d)?;
            }
            let mut f = std::io::BufWriter::with_capacity(
                1 << 20,
                std::fs::File::create(&path)
                    .with_context(|| format!("creating {}", path.display()))?,
            );
            stream(rel, size, |b| Ok(f.write_all(b)?))?;
            f.flush()?;
            Ok(())
        };
        for rel in &paths {
            write(rel, p.file_size)?;
        }
        write("big", p.big)?;
        std::fs::write(root.join("healthz"), "ok\n")?;
        std::fs::write(&marker, &stamp)?;
    }
    Ok(roots)
}

// ---------------------------------------------------------------- namespaces

fn ip(args: &[&str]) -> Result<()> {
    let out = Command::new("ip")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("running ip {}", args.join(" ")))?;
    if !out.status.success() {
        bail!(
            "ip {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

const NS_PREFIX: &str = "spindle-so-";

/// One network namespace per replica, a veth pair from the host into each;
/// removed on drop (the veth goes with its namespace; the host end is deleted
/// first all the same).
struct Net {
    octet: u8,
    made: Vec<(String, String)>,
}

impl Net {
    fn create() -> Result<Net> {
        remove_stale_namespaces();
        let pid = std::process::id();
        let mut net = Net {
            // 10.214-253.k.0/24: naio uses 10.213.0.0/30.
            octet: 214 + (pid % 40) as u8,
            made: Vec::new(),
        };
        for k in 0..REPLICAS {
            let ns = format!("{NS_PREFIX}{pid}-r{k}");
            let host = format!("sso{pid}h{k}");
            let peer = format!("sso{pid}p{k}");
            ip(&["netns", "add", &ns])?;
            net.made.push((ns.clone(), host.clone()));
            ip(&["link", "add", &host, "type", "veth", "peer", "name", &peer])?;
            ip(&["link", "set", &peer, "netns", &ns])?;
            ip(&[
                "addr",
                "add",
                &format!("{}/24", net.host_addr(k)),
                "dev",
                &host,
            ])?;
            ip(&["link", "set", &host, "up"])?;
            let inside = |args: &[&str]| {
                let mut a = vec!["netns", "exec", &ns, "ip"];
                a.extend_from_slice(args);
                ip(&a)
            };
            inside(&[
                "addr",
                "add",
                &format!("{}/24", net.replica_addr(k)),
                "dev",
                &peer,
            ])?;
            inside(&["link", "set", &peer, "up"])?;
            inside(&["link", "set", "lo", "up"])?;
        }
        Ok(net)
    }
    fn host_addr(&self, k: usize) -> Ipv4Addr {
        Ipv4Addr::new(10, self.octet, k as u8, 1)
    }
    fn replica_addr(&self, k: usize) -> Ipv4Addr {
        Ipv4Addr::new(10, self.octet, k as u8, 2)
    }
    fn ns(&self, k: usize) -> &str {
        &self.made[k].0
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        for (ns, host) in self.made.drain(..) {
            let _ = ip(&["link", "del", &host]);
            let _ = ip(&["netns", "del", &ns]);
        }
    }
}

/// Namespaces left by a harness that was killed (its pid no longer alive).
fn remove_stale_namespaces() {
    let Ok(rd) = std::fs::read_dir("/run/netns") else {
        return;
    };
    for e in rd.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(rest) = name.strip_prefix(NS_PREFIX) else {
            continue;
        };
        let pid = rest.split('-').next().and_then(|p| p.parse::<u32>().ok());
        if pid.is_some_and(|p| !Path::new(&format!("/proc/{p}")).exists()) {
            let _ = ip(&["netns", "del", &name]);
        }
    }
}

// ---------------------------------------------------------------- blkio

/// A blkio cgroup (v1) per replica: its disk bytes read, and the optional cap.
struct Blkio {
    dir: PathBuf,
}

impl Blkio {
    fn create(name: &str, cap: Option<(String, u64)>) -> Result<Option<Blkio>> {
        let root = Path::new("/sys/fs/cgroup/blkio");
        if !root.join("blkio.throttle.io_service_bytes").exists() {
            if cap.is_some() {
                bail!("--disk-mbps needs the cgroup v1 blkio controller at /sys/fs/cgroup/blkio");
            }
            return Ok(None);
        }
        let dir = root.join(name);
        if !dir.exists() {
            std::fs::create_dir(&dir).with_context(|| format!("creating {}", dir.display()))?;
        }
        let b = Blkio { dir };
        if let Some((dev, bps)) = cap {
            std::fs::write(
                b.dir.join("blkio.throttle.read_bps_device"),
                format!("{dev} {bps}"),
            )
            .context("setting blkio.throttle.read_bps_device")?;
        }
        Ok(Some(b))
    }
    fn procs(&self) -> PathBuf {
        self.dir.join("cgroup.procs")
    }
    /// Bytes read from every disk by the cgroup's processes (and their io-wq workers).
    fn read_bytes(&self) -> f64 {
        std::fs::read_to_string(self.dir.join("blkio.throttle.io_service_bytes"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                (f.len() == 3 && f[1] == "Read").then(|| f[2].parse::<f64>().unwrap_or(0.0))
            })
            .sum()
    }
}

impl Drop for Blkio {
    fn drop(&mut self) {
        for _ in 0..50 {
            let empty = std::fs::read_to_string(self.procs())
                .map(|s| s.trim().is_empty())
                .unwrap_or(true);
            if empty {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// `major:minor` of the disk that holds `path`.
fn dev_numbers(name: &str) -> Option<String> {
    std::fs::read_to_string(format!("/sys/block/{name}/dev"))
        .ok()
        .map(|s| s.trim().to_string())
}

// ---------------------------------------------------------------- replicas

/// One spindle replica in its namespace and cgroups; SIGKILLed on drop.
struct Replica {
    child: Option<Child>,
    pgid: u32,
    addr: Ipv4Addr,
    log: PathBuf,
}

impl Replica {
    #[allow(clippy::too_many_arguments)]
    fn start(
        k: usize,
        net: &Net,
        root: &Path,
        mem: &sys::MemCgroup,
        blkio: Option<&Blkio>,
        cpu: Option<&str>,
        work: &Path,
    ) -> Result<Replica> {
        let exe = std::env::current_exe()?;
        let addr = net.replica_addr(k);
        let log = work.join(format!("replica-r{k}.stderr"));
        let mut argv: Vec<String> = Vec::new();
        if let (Some(c), Some(_)) = (cpu, which("taskset")) {
            argv.extend(["taskset".into(), "-c".into(), c.into()]);
        }
        argv.extend(
            [
                "ip",
                "netns",
                "exec",
                net.ns(k),
                &exe.display().to_string(),
                "__spindle",
                "--backend",
                "io-uring",
                "--workers",
                "1",
                "--proxy-listen",
                &format!("{addr}:{HTTP_PORT}"),
                "--proxy-from",
                &net.host_addr(k).to_string(),
                "--metrics",
                &format!("{addr}:{METRICS_PORT}"),
                &root.display().to_string(),
            ]
            .map(String::from),
        );
        let blk = blkio
            .map(|b| b.procs().display().to_string())
            .unwrap_or_default();
        // Join both cgroups before exec, so every thread the replica makes is charged.
        let mut cmd = Command::new("/bin/sh");
        cmd.arg("-c")
            .arg("echo $$ > \"$0\" || exit 1; if [ -n \"$1\" ]; then echo $$ > \"$1\" || exit 1; fi; shift; exec \"$@\"")
            .arg(&mem.procs)
            .arg(blk)
            .args(&argv);
        use std::os::unix::process::CommandExt;
        cmd.process_group(0)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log)?);
        let child = cmd.spawn().context("starting a spindle replica")?;
        let mut r = Replica {
            pgid: child.id(),
            child: Some(child),
            addr,
            log,
        };
        let t0 = Instant::now();
        loop {
            if let Some(c) = r.child.as_mut() {
                if let Some(st) = c.try_wait()? {
                    r.child = None;
                    bail!(
                        "replica r{k} exited at start ({st}): {}",
                        std::fs::read_to_string(&r.log).unwrap_or_default().trim()
                    );
                }
            }
            if scrape(addr).is_ok() {
                return Ok(r);
            }
            if t0.elapsed() > START_TIMEOUT {
                bail!("replica r{k} did not serve its metrics within {START_TIMEOUT:?}");
            }
            std::thread::sleep(Duration::from_millis(30));
        }
    }

    fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            sys::kill_group(self.pgid, libc::SIGKILL);
            let _ = c.kill();
            let _ = c.wait();
            let t0 = Instant::now();
            while !sys::group_pids(self.pgid).is_empty() && t0.elapsed() < Duration::from_secs(5) {
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A replica's counters from its metrics listener: (2xx responses, body bytes, disk reads).
#[derive(Debug, Clone, Copy, Default)]
struct Counters {
    ok: f64,
    body: f64,
    reads: f64,
}

fn scrape(addr: Ipv4Addr) -> Result<Counters> {
    let sa = SocketAddr::from((addr, METRICS_PORT));
    let mut s = TcpStream::connect_timeout(&sa, Duration::from_millis(300))?;
    s.set_read_timeout(Some(Duration::from_secs(3)))?;
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: m\r\nConnection: close\r\n\r\n")?;
    let mut text = String::new();
    s.read_to_string(&mut text)?;
    if !text.starts_with("HTTP/1.1 200") {
        bail!("metrics answered {:?}", text.lines().next());
    }
    let mut c = Counters::default();
    for l in text.lines() {
        let val = || {
            l.rsplit(' ')
                .next()
                .and_then(|v| v.parse::<f64>().ok())
                .unwrap_or(0.0)
        };
        if l.starts_with("spindle_requests_total{") && l.contains("code=\"2xx\"") {
            c.ok += val();
        } else if l.starts_with("spindle_response_body_bytes_total ") {
            c.body += val();
        } else if l.starts_with("spindle_disk_reads_total{") {
            c.reads += val();
        }
    }
    Ok(c)
}

// ---------------------------------------------------------------- haproxy

struct Haproxy {
    child: Option<Child>,
    port: u16,
    sock: PathBuf,
    log: PathBuf,
}

/// One server's line of HAProxy's `show stat`.
#[derive(Debug, Clone)]
struct ServerStat {
    name: String,
    status: String,
    total: f64,
    retries: f64,
    redispatches: f64,
}

impl Haproxy {
    fn start(mode: &str, net: &Net, work: &Path) -> Result<Haproxy> {
        let port = sys::free_port()?;
        let sock = work.join(format!("haproxy-{mode}.sock"));
        let _ = std::fs::remove_file(&sock);
        let balance = if mode == "uri" {
            "balance uri\n    hash-type consistent"
        } else {
            "balance roundrobin"
        };
        let mut servers = String::new();
        for k in 0..REPLICAS {
            servers.push_str(&format!(
                "    server r{k} {}:{HTTP_PORT} send-proxy-v2 check check-send-proxy inter 200ms fall 2 rise 2\n",
                net.replica_addr(k)
            ));
        }
        let cfg = format!(
            "global\n    maxconn 4096\n    nbthread 1\n    stats socket {} mode 600 level admin\n\n\
defaults\n    mode http\n    timeout connect 1s\n    timeout client 60s\n    timeout server 60s\n    timeout check 1s\n\
    retries 3\n    option redispatch\n    retry-on conn-failure empty-response response-timeout\n\n\
frontend www\n    bind 127.0.0.1:{port}\n    default_backend replicas\n\n\
backend replicas\n    {balance}\n    option httpchk GET /healthz\n    http-check expect status 200\n\
    http-response set-header X-Served-By %s\n{servers}",
            sock.display()
        );
        let path = work.join(format!("haproxy-{mode}.cfg"));
        std::fs::write(&path, cfg)?;
        let log = work.join(format!("haproxy-{mode}.stderr"));
        use std::os::unix::process::CommandExt;
        let child = Command::new(which("haproxy").context("haproxy is not installed")?)
            .arg("-db")
            .arg("-f")
            .arg(&path)
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log)?)
            .spawn()
            .context("starting haproxy")?;
        let mut h = Haproxy {
            child: Some(child),
            port,
            sock,
            log,
        };
        let t0 = Instant::now();
        loop {
            if let Some(st) = h
                .child
                .as_mut()
                .map(|c| c.try_wait())
                .transpose()?
                .flatten()
            {
                h.child = None;
                bail!(
                    "haproxy exited at start ({st}): {}",
                    std::fs::read_to_string(&h.log).unwrap_or_default().trim()
                );
            }
            let up = h
                .stats()
                .map(|s| s.len() == REPLICAS && s.iter().all(|x| x.status.starts_with("UP")))
                .unwrap_or(false);
            if up && TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return Ok(h);
            }
            if t0.elapsed() > START_TIMEOUT {
                bail!(
                    "haproxy did not mark every replica up within {START_TIMEOUT:?}: {:?}; {}",
                    h.stats().ok(),
                    std::fs::read_to_string(&h.log).unwrap_or_default().trim()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The servers' lines of `show stat`.
    fn stats(&self) -> Result<Vec<ServerStat>> {
        use std::os::unix::net::UnixStream;
        let mut s = UnixStream::connect(&self.sock)?;
        s.set_read_timeout(Some(Duration::from_secs(2)))?;
        s.write_all(b"show stat\n")?;
        let mut text = String::new();
        s.read_to_string(&mut text)?;
        let mut out = Vec::new();
        for l in text.lines() {
            let f: Vec<&str> = l.split(',').collect();
            if f.len() > 17 && f[0] == "replicas" && f[1] != "BACKEND" {
                let n = |i: usize| f[i].parse::<f64>().unwrap_or(0.0);
                out.push(ServerStat {
                    name: f[1].to_string(),
                    status: f[17].to_string(),
                    total: n(7),
                    retries: n(15),
                    redispatches: n(16),
                });
            }
        }
        Ok(out)
    }
}

impl Drop for Haproxy {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let pgid = c.id();
            sys::kill_group(pgid, libc::SIGTERM);
            let t0 = Instant::now();
            while matches!(c.try_wait(), Ok(None)) && t0.elapsed() < Duration::from_secs(5) {
                std::thread::sleep(Duration::from_millis(20));
            }
            sys::kill_group(pgid, libc::SIGKILL);
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = std::fs::remove_file(&self.sock);
    }
}

// ---------------------------------------------------------------- one setup

/// Everything a run needs beside the namespaces and cgroups, which outlive runs.
struct Env<'a> {
    net: &'a Net,
    roots: &'a [PathBuf],
    mems: &'a [sys::MemCgroup],
    blkios: &'a [Option<Blkio>],
    work: &'a Path,
}

/// Fresh replicas and HAProxy in `mode`, page cache dropped first. Field order:
/// HAProxy stops before the replicas.
struct Up {
    haproxy: Haproxy,
    replicas: Vec<Replica>,
}

fn bring_up(env: &Env, mode: &str) -> Result<Up> {
    sys::drop_caches()?;
    let cpu = common::pinning(1).0;
    let mut replicas = Vec::new();
    for k in 0..REPLICAS {
        replicas.push(Replica::start(
            k,
            env.net,
            &env.roots[k],
            &env.mems[k],
            env.blkios[k].as_ref(),
            cpu.as_deref(),
            env.work,
        )?);
    }
    let haproxy = Haproxy::start(mode, env.net, env.work)?;
    Ok(Up { haproxy, replicas })
}

/// Per-replica counters: (metrics, blkio bytes read).
fn snapshot(env: &Env, up: &Up) -> Result<Vec<(Counters, f64)>> {
    up.replicas
        .iter()
        .enumerate()
        .map(|(k, r)| {
            let c = scrape(r.addr).with_context(|| format!("scraping replica r{k}"))?;
            let b = env.blkios[k].as_ref().map(Blkio::read_bytes).unwrap_or(0.0);
            Ok((c, b))
        })
        .collect()
}

/// One measured run of `mode`: warm-up pass, then the measured pass.
fn one_run(
    env: &Env,
    p: &Plan,
    mode: &str,
    urls_paths: &[String],
) -> Result<BTreeMap<String, f64>> {
    let up = bring_up(env, mode)?;
    let urls = env.work.join("urls");
    common::write_urls(&urls, up.haproxy.port, urls_paths)?;
    let mut load = Load {
        urls,
        parallel: p.parallel,
        end: End::Seconds(p.warmup),
        keepalive: true,
        idle: 0,
        timeout_secs: 60,
        tls: None,
    };
    common::run_load(&load, env.work, "warmup")?;
    let dev = sys::block_device_of(&env.roots[0]);
    let d0 = dev.as_deref().and_then(sys::disk_counters);
    let s0 = snapshot(env, &up)?;
    let h0 = up.haproxy.stats()?;
    load.end = End::Seconds(p.seconds);
    let v = common::run_load(&load, env.work, "measured")?;
    let s1 = snapshot(env, &up)?;
    let h1 = up.haproxy.stats()?;
    let d1 = dev.as_deref().and_then(sys::disk_counters);
    let mut m = common::load_metrics(&v);
    let secs = m.get("seconds").copied().unwrap_or(p.seconds).max(1e-9);
    let (mut body, mut disk) = (0.0, 0.0);
    for k in 0..REPLICAS {
        let b = s1[k].0.body - s0[k].0.body;
        let d = s1[k].1 - s0[k].1;
        body += b;
        disk += d;
        if b > 0.0 {
            m.insert(format!("hit_r{k}"), (1.0 - d / b).max(0.0));
        }
        m.insert(format!("served_r{k}"), s1[k].0.ok - s0[k].0.ok);
        m.insert(format!("disk_mb_r{k}"), d / 1e6);
        m.insert(format!("spindle_reads_r{k}"), s1[k].0.reads - s0[k].0.reads);
    }
    if body > 0.0 {
        m.insert("hit_ratio".into(), (1.0 - disk / body).max(0.0));
    }
    let via: f64 =
        h1.iter().map(|s| s.total).sum::<f64>() - h0.iter().map(|s| s.total).sum::<f64>();
    m.insert("haproxy_requests".into(), via);
    if let (Some(a), Some(b)) = (d0, d1) {
        m.insert(
            "disk_mb_per_sec".into(),
            (b.sectors_read - a.sectors_read) * 512.0 / 1e6 / secs,
        );
    }
    m.insert("load_avg_1m".into(), loadavg1());
    Ok(m)
}

fn loadavg1() -> f64 {
    common::loadavg()
        .split_whitespace()
        .next()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0.0)
}

// ---------------------------------------------------------------- HTTP client

struct Head {
    status: u16,
    len: Option<u64>,
    range_start: Option<u64>,
    served_by: Option<String>,
}

fn send_get(s: &mut TcpStream, path: &str, from: Option<u64>) -> std::io::Result<()> {
    let range = from
        .map(|n| format!("Range: bytes={n}-\r\n"))
        .unwrap_or_default();
    s.write_all(format!("GET /{path} HTTP/1.1\r\nHost: scaleout\r\n{range}\r\n").as_bytes())
}

fn read_head<R: BufRead>(r: &mut R) -> Result<Head> {
    let mut line = String::new();
    if r.read_line(&mut line)? == 0 {
        bail!("connection closed before a response");
    }
    let status = line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| anyhow!("bad status line {line:?}"))?;
    let mut h = Head {
        status,
        len: None,
        range_start: None,
        served_by: None,
    };
    for _ in 0..100 {
        line.clear();
        if r.read_line(&mut line)? == 0 {
            bail!("connection closed in a response head");
        }
        let l = line.trim_end();
        if l.is_empty() {
            return Ok(h);
        }
        let Some((k, v)) = l.split_once(':') else {
            continue;
        };
        let v = v.trim();
        match k.to_ascii_lowercase().as_str() {
            "content-length" => h.len = v.parse().ok(),
            "x-served-by" => h.served_by = Some(v.to_string()),
            "content-range" => {
                h.range_start = v
                    .strip_prefix("bytes ")
                    .and_then(|r| r.split('-').next())
                    .and_then(|n| n.parse().ok())
            }
            _ => {}
        }
    }
    bail!("response head too long")
}

fn connect(port: u16, rcvbuf: Option<i32>) -> Result<TcpStream> {
    let s = TcpStream::connect_timeout(&SocketAddr::from(([127, 0, 0, 1], port)), IO_TIMEOUT)?;
    s.set_read_timeout(Some(IO_TIMEOUT))?;
    s.set_write_timeout(Some(IO_TIMEOUT))?;
    if let Some(n) = rcvbuf {
        use std::os::fd::AsRawFd;
        // SAFETY: setsockopt on a socket we own, with a pointer to a live i32 and its size.
        let rc = unsafe {
            libc::setsockopt(
                s.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVBUF,
                (&n as *const i32).cast(),
                std::mem::size_of::<i32>() as libc::socklen_t,
            )
        };
        if rc != 0 {
            bail!("SO_RCVBUF: {}", std::io::Error::last_os_error());
        }
    }
    Ok(s)
}

/// The failover clients' tally.
#[derive(Default)]
struct Tally {
    ok: AtomicU64,
    failed_attempts: AtomicU64,
    retried_ok: AtomicU64,
    lost: AtomicU64,
}

/// Fetches random paths of the working set over keep-alive until `stop`, each fetch
/// retried (a new connection) up to [`ATTEMPTS`] times; a fetch counts as done when
/// it answered 200 with every byte of its Content-Length.
fn client(port: u16, paths: &[String], size: u64, stop: &AtomicBool, t: &Tally) {
    let mut rng = rand::rngs::SmallRng::from_os_rng();
    let mut conn: Option<BufReader<TcpStream>> = None;
    while !stop.load(Ordering::Relaxed) {
        let path = &paths[rng.random_range(0..paths.len())];
        let mut done = false;
        for attempt in 0..ATTEMPTS {
            let r = (|| -> Result<()> {
                if conn.is_none() {
                    conn = Some(BufReader::new(connect(port, None)?));
                }
                let c = conn.as_mut().expect("connected");
                send_get(c.get_mut(), path, None)?;
                let h = read_head(c)?;
                let len = h.len.ok_or_else(|| anyhow!("no Content-Length"))?;
                let got = std::io::copy(&mut c.by_ref().take(len), &mut std::io::sink())?;
                if h.status != 200 || got != len || len != size {
                    bail!("status {} with {got} of {len} bytes", h.status);
                }
                Ok(())
            })();
            match r {
                Ok(()) => {
                    t.ok.fetch_add(1, Ordering::Relaxed);
                    if attempt > 0 {
                        t.retried_ok.fetch_add(1, Ordering::Relaxed);
                    }
                    done = true;
                    break;
                }
                Err(_) => {
                    conn = None;
                    t.failed_attempts.fetch_add(1, Ordering::Relaxed);
                    std::thread::sleep(RETRY_PAUSE);
                }
            }
        }
        if !done {
            t.lost.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// What the download saw.
#[derive(Debug, Default, Clone, serde::Serialize)]
struct Download {
    bytes: u64,
    size: u64,
    digest_match: bool,
    resumes: u32,
    interrupted_at: Vec<u64>,
    served_by: Vec<String>,
    seconds: f64,
    error: Option<String>,
}

/// Downloads `big` paced to `secs`, resuming with Range after any failure.
fn download(
    port: u16,
    size: u64,
    secs: f64,
    progress: &AtomicU64,
    first: &std::sync::Mutex<Option<String>>,
) -> Download {
    let t0 = Instant::now();
    let mut d = Download {
        size,
        ..Default::default()
    };
    let mut h = FNV_OFFSET;
    let mut buf = vec![0u8; 64 << 10];
    let rate = size as f64 / secs.max(0.1);
    let deadline = Duration::from_secs_f64(secs * 4.0 + 30.0);
    while d.bytes < size && t0.elapsed() < deadline {
        let from = (d.bytes > 0).then_some(d.bytes);
        let r = (|| -> Result<()> {
            let mut c = BufReader::with_capacity(64 << 10, connect(port, Some(DOWNLOAD_RCVBUF))?);
            send_get(c.get_mut(), "big", from)?;
            let head = read_head(&mut c)?;
            let want = if from.is_some() { 206 } else { 200 };
            if head.status != want || head.range_start.unwrap_or(0) != d.bytes {
                bail!(
                    "asked from byte {}: status {} range start {:?}",
                    d.bytes,
                    head.status,
                    head.range_start
                );
            }
            let by = head.served_by.unwrap_or_else(|| "?".into());
            if d.served_by.is_empty() {
                *first.lock().unwrap_or_else(|e| e.into_inner()) = Some(by.clone());
            }
            d.served_by.push(by);
            let mut left = head.len.ok_or_else(|| anyhow!("no Content-Length"))?;
            while left > 0 {
                let want = left.min(buf.len() as u64) as usize;
                let n = c.read(&mut buf[..want])?;
                if n == 0 {
                    bail!("connection closed {left} bytes short");
                }
                h = fnv1a(h, &buf[..n]);
                d.bytes += n as u64;
                left -= n as u64;
                progress.store(d.bytes, Ordering::Relaxed);
                let ahead = d.bytes as f64 / rate - t0.elapsed().as_secs_f64();
                if ahead > 0.0 {
                    std::thread::sleep(Duration::from_secs_f64(ahead.min(0.5)));
                }
            }
            Ok(())
        })();
        if let Err(e) = r {
            if d.resumes >= MAX_RESUMES {
                d.error = Some(format!("{e:#}"));
                break;
            }
            d.interrupted_at.push(d.bytes);
            d.resumes += 1;
            std::thread::sleep(RETRY_PAUSE);
        }
    }
    d.seconds = t0.elapsed().as_secs_f64();
    d.digest_match = d.bytes == size && h == expected_digest("big", size);
    d
}

/// The failover run: uri hashing, the download's replica SIGKILLed mid-body.
fn failover(env: &Env, p: &Plan, paths: &[String]) -> Result<Value> {
    let mut up = bring_up(env, "uri")?;
    let port = up.haproxy.port;
    let stop = AtomicBool::new(false);
    let tally = Tally::default();
    let progress = Arc::new(AtomicU64::new(0));
    let first = std::sync::Mutex::new(None::<String>);
    let mut kill_note = json!(null);
    let result = std::thread::scope(|s| -> Result<Download> {
        let clients: Vec<_> = (0..FAILOVER_CLIENTS)
            .map(|_| s.spawn(|| client(port, paths, p.file_size, &stop, &tally)))
            .collect();
        let dl = s.spawn(|| download(port, p.big, p.download_seconds, &progress, &first));
        // Kill the download's replica once a quarter of the file is through.
        let t0 = Instant::now();
        let limit = Duration::from_secs_f64(p.download_seconds * 2.0 + 20.0);
        while progress.load(Ordering::Relaxed) < p.big / 4
            && t0.elapsed() < limit
            && !dl.is_finished()
        {
            std::thread::sleep(Duration::from_millis(5));
        }
        let victim = first.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let k = victim
            .as_deref()
            .and_then(|v| v.strip_prefix('r'))
            .and_then(|n| n.parse::<usize>().ok())
            .filter(|&k| k < REPLICAS);
        if let Some(k) = k {
            let at = progress.load(Ordering::Relaxed);
            let before = tally.ok.load(Ordering::Relaxed);
            let tk = Instant::now();
            up.replicas[k].kill();
            let name = format!("r{k}");
            let mut down_ms = None;
            while tk.elapsed() < Duration::from_secs(10) {
                let st = up.haproxy.stats().unwrap_or_default();
                if st
                    .iter()
                    .any(|x| x.name == name && x.status.starts_with("DOWN"))
                {
                    down_ms = Some(tk.elapsed().as_secs_f64() * 1e3);
                    break;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            kill_note = json!({"replica": name, "at_byte": at, "fetches_before_kill": before,
                               "marked_down_ms": down_ms});
        }
        let d = dl.join().map_err(|_| anyhow!("download thread panicked"))?;
        // A second of fetches after the download, with the replica still down.
        std::thread::sleep(Duration::from_secs(1));
        stop.store(true, Ordering::Relaxed);
        for c in clients {
            c.join().map_err(|_| anyhow!("client thread panicked"))?;
        }
        Ok(d)
    });
    let d = result?;
    let st = up.haproxy.stats().unwrap_or_default();
    let servers: Vec<Value> = st
        .iter()
        .map(|x| {
            json!({"server": x.name, "status": x.status, "requests": x.total,
                        "retries": x.retries, "redispatches": x.redispatches})
        })
        .collect();
    drop(up);
    Ok(json!({
        "killed": kill_note,
        "download": d,
        "clients": FAILOVER_CLIENTS,
        "fetches_ok": tally.ok.load(Ordering::Relaxed),
        "failed_attempts": tally.failed_attempts.load(Ordering::Relaxed),
        "fetches_ok_after_retry": tally.retried_ok.load(Ordering::Relaxed),
        "lost": tally.lost.load(Ordering::Relaxed),
        "haproxy": servers,
    }))
}

fn failover_md(f: &Value) -> String {
    let g = |p: &str| f.pointer(p).cloned().unwrap_or(Value::Null);
    let d = g("/download");
    let mb = |v: &Value| v.as_f64().unwrap_or(0.0) / 1e6;
    let mut o = String::from("## Failover (uri hashing, one replica SIGKILLed mid-run)\n\n");
    o.push_str("| what | result |\n|---|---|\n");
    o.push_str(&format!(
        "| replica killed | {} (serving the download), at {:.1} MB of {:.1} MB |\n",
        g("/killed/replica").as_str().unwrap_or("none"),
        mb(&g("/killed/at_byte")),
        mb(&d["size"])
    ));
    o.push_str(&format!(
        "| marked DOWN by HAProxy after | {} |\n",
        g("/killed/marked_down_ms")
            .as_f64()
            .map(|ms| format!("{ms:.0} ms (checks every 200 ms, fall 2)"))
            .unwrap_or_else(|| "not within 10 s".into())
    ));
    o.push_str(&format!(
        "| fetches by {} retrying clients | {} done, {} failed attempts, {} done after a retry, **{} lost** |\n",
        g("/clients"),
        g("/fetches_ok"),
        g("/failed_attempts"),
        g("/fetches_ok_after_retry"),
        g("/lost")
    ));
    o.push_str(&format!(
        "| download | {:.1} of {:.1} MB in {:.1} s, {} resume(s) with `Range` (interrupted at {}), served by {} |\n",
        mb(&d["bytes"]),
        mb(&d["size"]),
        d["seconds"].as_f64().unwrap_or(0.0),
        d["resumes"],
        d["interrupted_at"],
        d["served_by"]
    ));
    o.push_str(&format!(
        "| digest (FNV-1a 64 of the received bytes against the file's) | {} |\n",
        if d["digest_match"].as_bool() == Some(true) {
            "**match**"
        } else {
            "**MISMATCH**"
        }
    ));
    if let Some(e) = d["error"].as_str() {
        o.push_str(&format!("| download error | {e} |\n"));
    }
    o.push_str(&format!(
        "\nHAProxy's servers at the end: `{}`\n",
        g("/haproxy")
    ));
    o
}

// ---------------------------------------------------------------- run

pub fn run(a: ScaleoutArgs) -> Result<()> {
    if !sys::is_root() {
        bail!("scaleout needs root: network namespaces, cgroups and dropping the page cache");
    }
    for p in ["haproxy", "ip"] {
        if which(p).is_none() {
            bail!("scaleout needs {p} (apt-get install haproxy iproute2)");
        }
    }
    let p = Plan::new(&a)?;
    let roots = ensure_content(&a.data, &p)?;
    let paths = p.paths();
    let pid = std::process::id();
    let dev = sys::block_device_of(&roots[0]);
    // A limit on the disk also turns blk-throttle's accounting on (since Linux 6.9
    // it counts a queue's bytes only once some group has a limit there): without
    // --disk-mbps, one far above any disk's speed.
    let cap = match (a.disk_mbps, &dev) {
        (mbps, Some(d)) => Some((
            dev_numbers(d).context("the data disk's major:minor")?,
            if mbps == 0 {
                UNLIMITED_BPS
            } else {
                mbps * 1_000_000
            },
        )),
        (0, None) => None,
        (_, None) => bail!("--disk-mbps: no block device under {}", a.data.display()),
    };
    let mut mems = Vec::new();
    let mut blkios = Vec::new();
    for k in 0..REPLICAS {
        let name = format!("spindle-bench-so-r{k}-{pid}");
        mems.push(sys::MemCgroup::create(&name, p.cgroup)?);
        blkios.push(Blkio::create(&name, cap.clone())?);
    }
    let net = Net::create()?;
    let work = common::workdir(&a.out, "scaleout")?;
    let env = Env {
        net: &net,
        roots: &roots,
        mems: &mems,
        blkios: &blkios,
        work: &work,
    };
    let mut machine = Machine::probe(&roots[0]);
    let hv = Command::new("haproxy").arg("-v").output()?;
    machine.versions.insert(
        "haproxy".into(),
        String::from_utf8_lossy(&hv.stdout)
            .lines()
            .next()
            .unwrap_or("")
            .to_string(),
    );
    machine.versions.insert(
        "spindle".into(),
        format!(
            "spindle {} (io-uring, 1 worker per replica)",
            env!("CARGO_PKG_VERSION")
        ),
    );
    let ws = p.working_set();
    machine.cgroup_limit = Some(format!(
        "3 × {} MiB (cgroup v{}), one per replica; working set {:.2} GB = {:.2}× one, {:.2}× the three",
        p.cgroup >> 20,
        mems[0].version,
        ws as f64 / 1e9,
        ws as f64 / p.cgroup as f64,
        ws as f64 / (3 * p.cgroup) as f64
    ));
    let title = format!(
        "scaleout: HAProxy over 3 spindle replicas, {} files of {} KiB ({:.2} GB), roundrobin vs uri hashing",
        p.files,
        p.file_size >> 10,
        ws as f64 / 1e9
    );
    let mut report = Report::new(
        "scaleout",
        &title,
        machine,
        json!({"files": p.files, "file_size": p.file_size, "working_set": ws, "cgroup_bytes": p.cgroup,
               "replicas": REPLICAS, "warmup_seconds": p.warmup, "seconds": p.seconds,
               "parallel": p.parallel, "keepalive": true, "rounds": p.rounds,
               "disk_mbps_per_replica": a.disk_mbps, "big_file": p.big,
               "download_seconds": p.download_seconds}),
    );
    report.baseline = "roundrobin".into();
    report.primary = "fetches_per_sec".into();
    report.notes = vec![
        format!(
            "each replica: spindle io-uring, 1 worker, in its own network namespace (veth to the host, 10.{}.k.2), its own memory cgroup and its own copy of the content (copies, not links: one inode's pages would be one page cache shared by all three); the replicas share CPU {} (taskset), HAProxy (nbthread 1) is unpinned, the load generator runs on the last CPU",
            net.octet,
            common::pinning(1).0.unwrap_or_else(|| "any".into())
        ),
        "HAProxy 127.0.0.1 → replicas with send-proxy-v2 (spindle --proxy-listen), health checks GET /healthz every 200 ms (fall 2, rise 2), retries 3, option redispatch, retry-on conn-failure empty-response response-timeout".into(),
        format!(
            "load: spindle-load, {} keep-alive connections to HAProxy, random URLs over the whole working set (fresh seed per run), a {} s warm-up pass (the caches fill) then the {} s measured pass; fresh replicas and HAProxy and `echo 3 > drop_caches` before every run; modes interleaved, the first alternating by round",
            p.parallel, p.warmup, p.seconds
        ),
        "hit ratio per replica = 1 − bytes its cgroup read from the disk (blkio.throttle.io_service_bytes, every read: buffered, O_DIRECT, readahead) / body bytes it served (its spindle_response_body_bytes_total), over the measured pass; 'all' is the same over the three".into(),
        match a.disk_mbps {
            0 => "one VM, one virtual disk (vda): the three replicas share the disk and the two CPUs, which three machines would not; disk MB/s is vda's, all replicas together".into(),
            n => format!("each replica's disk reads capped at {n} MB/s (blkio throttle): a disk of its own per replica, as on three machines; the physical disk (vda) is still shared"),
        },
    ];
    if !a.no_warm && !a.quick {
        let mut files: Vec<String> = paths.clone();
        files.push("big".into());
        for r in &roots {
            if let Ok((bytes, secs)) = sys::read_through(r, &files, 8) {
                eprintln!(
                    "warmed the disk: {} ({:.2} GB in {secs:.0} s, O_DIRECT)",
                    r.display(),
                    bytes as f64 / 1e9
                );
            }
        }
        report.notes.push("before the first round every copy was read once with O_DIRECT, so both modes meet the same disk (the virtual disk's host cache); the page cache stays cold".into());
    }
    let group = format!(
        "working set {:.2} GB = {:.1}× one replica's cgroup",
        ws as f64 / 1e9,
        ws as f64 / p.cgroup as f64
    );
    let progress = Progress::new(u64::from(p.rounds) * 2, "scaleout");
    for round in 0..p.rounds as usize {
        for mode in common::rotated(&MODES, round) {
            progress.start(format!("round {} {mode}", round + 1));
            let r = one_run(&env, &p, mode, &paths);
            let line = match &r {
                Ok(m) => format!(
                    "round {} {mode:<10} {:>8.0} fetches/s  hit {:.3} ({:.3} {:.3} {:.3})  p99 {:.1} ms  disk {:.0} MB/s",
                    round + 1,
                    m.get("fetches_per_sec").unwrap_or(&0.0),
                    m.get("hit_ratio").unwrap_or(&0.0),
                    m.get("hit_r0").unwrap_or(&0.0),
                    m.get("hit_r1").unwrap_or(&0.0),
                    m.get("hit_r2").unwrap_or(&0.0),
                    m.get("fetch_ms_p99").unwrap_or(&0.0),
                    m.get("disk_mb_per_sec").unwrap_or(&0.0),
                ),
                Err(e) => format!("round {} {mode}: {e:#}", round + 1),
            };
            report.add(
                &group,
                mode,
                r.map(|mut m| {
                    m.insert("round".into(), (round + 1) as f64);
                    m
                }),
            );
            progress.done(line);
        }
    }
    progress.finish();
    report.extra_md.push(verdict(&report, &group));
    if !a.no_failover {
        eprintln!("scaleout: failover run");
        match failover(&env, &p, &paths) {
            Ok(f) => {
                report.extra_md.push(failover_md(&f));
                report.extra.insert("failover".into(), f);
            }
            Err(e) => {
                report
                    .extra_md
                    .push(format!("## Failover\n\nfailed: {e:#}\n"));
                report
                    .extra
                    .insert("failover".into(), json!({"error": format!("{e:#}")}));
            }
        }
    }
    report.machine.finish();
    // With --disk-mbps the report is a variant beside the plain one.
    let name = match a.disk_mbps {
        0 => "scaleout".to_string(),
        n => format!("scaleout-disk{n}"),
    };
    let files = report.write(&a.out, &name, &COLUMNS, "fetches per second")?;
    for f in files {
        eprintln!("wrote {}", f.display());
    }
    drop(net);
    drop(blkios);
    drop(mems);
    Ok(())
}

/// The bar: uri hashing ≥ 1.5× round robin's fetches/s, with the rounds paired.
fn verdict(r: &Report, group: &str) -> String {
    let med = |s: &str, k: &str| r.median(group, s, k);
    let mut o = String::from("## The bar: uri hashing ≥ 1.5× roundrobin's fetches/s\n\n");
    if let (Some(u), Some(rr)) = (
        med("uri", "fetches_per_sec"),
        med("roundrobin", "fetches_per_sec"),
    ) {
        let ratio = u / rr;
        o.push_str(&format!(
            "- uri / roundrobin, medians: {u:.0} / {rr:.0} = **{ratio:.2}×** ({}); hit ratio {:.3} against {:.3}\n",
            if ratio >= 1.5 { "met" } else { "MISSED" },
            med("uri", "hit_ratio").unwrap_or(0.0),
            med("roundrobin", "hit_ratio").unwrap_or(0.0),
        ));
    }
    let per = |s: &str| -> Vec<(f64, f64)> {
        r.series
            .iter()
            .find(|x| x.group == group && x.server == s)
            .map(|x| {
                x.samples
                    .iter()
                    .filter_map(|m| Some((*m.get("round")?, *m.get("fetches_per_sec")?)))
                    .collect()
            })
            .unwrap_or_default()
    };
    let (u, rr) = (per("uri"), per("roundrobin"));
    let paired: Vec<String> = u
        .iter()
        .filter_map(|(round, v)| {
            rr.iter()
                .find(|(r2, _)| r2 == round)
                .map(|(_, b)| format!("{:.2}", v / b))
        })
        .collect();
    if !paired.is_empty() {
        o.push_str(&format!("- per round: {}\n", paired.join(", ")));
    }
    o
}
