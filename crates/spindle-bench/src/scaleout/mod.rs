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
//! `--edge` (edge.rs): the replicas are caching edges in front of one
//! origin instead, and the measure is their hit ratio, one edge against
//! three by uri.
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

mod client;
mod edge;
mod fleet;
pub(crate) mod net;

use client::*;
use fleet::*;
use net::*;

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

/// Why `scaleout --quick` is a smoke test (its method line).
const QUICK_SCALEOUT: &str = "--quick runs a 64 MB working set for a 1 s warm-up and a 2 s measured pass per mode (the full run: 1.5 GB, 20 s and 20 s, 3 rounds): the replicas' caches do not fill as in the full run, and its uri/roundrobin ratio has not been measured to hold at this scale.";

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
    /// The edge tier instead (edge.rs): caching edges in front of one
    /// origin (Debian's nginx), one edge against three by uri, hit ratio.
    #[arg(long)]
    pub edge: bool,
    /// With --edge: each edge's --cache-size (the working set is about
    /// 2.7× this by default).
    #[arg(long, default_value = "560m")]
    pub edge_cache: String,
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

/// Makes (or finds complete) `copies` copies of the content: the working set,
/// the big file and `healthz`. Returns their roots (the replicas', or with
/// `--edge` the origin's).
fn ensure_content(data: &Path, p: &Plan, copies: usize) -> Result<Vec<PathBuf>> {
    let base = data.join(format!("scaleout-{}-{}", p.file_size, p.files));
    let roots: Vec<PathBuf> = (0..copies).map(|k| base.join(format!("r{k}"))).collect();
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
            &[],
        )?);
    }
    let haproxy = Haproxy::start(mode, env.net, env.work, REPLICAS)?;
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
    let dev = sys::block_device_of(&env.roots[0]);
    let (mut m, (s0, h0, d0), (s1, h1, d1)) =
        warm_then_measure(env, p, up.haproxy.port, urls_paths, || {
            let d = dev.as_deref().and_then(sys::disk_counters);
            Ok((snapshot(env, &up)?, up.haproxy.stats()?, d))
        })?;
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

/// The load through HAProxy at `port`: a warm-up pass (the caches fill),
/// then the measured pass, with `snap` taken just before and just after
/// it. Returns the measured pass's metrics and the two snapshots.
fn warm_then_measure<S>(
    env: &Env,
    p: &Plan,
    port: u16,
    paths: &[String],
    mut snap: impl FnMut() -> Result<S>,
) -> Result<(BTreeMap<String, f64>, S, S)> {
    let urls = env.work.join("urls");
    common::write_urls(&urls, port, paths)?;
    let mut load = Load {
        rate: None,
        urls,
        parallel: p.parallel,
        end: End::Seconds(p.warmup),
        keepalive: true,
        idle: 0,
        timeout_secs: 60,
        tls: None,
    };
    common::run_load(&load, env.work, "warmup")?;
    let before = snap()?;
    load.end = End::Seconds(p.seconds);
    let v = common::run_load(&load, env.work, "measured")?;
    let after = snap()?;
    Ok((common::load_metrics(&v), before, after))
}

fn loadavg1() -> f64 {
    common::loadavg()
        .split_whitespace()
        .next()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0.0)
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
    let roots = ensure_content(&a.data, &p, if a.edge { 1 } else { REPLICAS })?;
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
    if a.edge {
        machine.cgroup_limit = Some(format!(
            "{} MiB (cgroup v{}), one per edge",
            p.cgroup >> 20,
            mems[0].version
        ));
        return edge::run(&a, &p, &env, &paths, machine);
    }
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
    if a.quick {
        report.smoke_test(QUICK_SCALEOUT);
    }
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
    in_rounds(&mut report, &group, p.rounds, &MODES, "scaleout", |mode| {
        let r = one_run(&env, &p, mode, &paths);
        let line = r.as_ref().map(|m| {
            format!(
                "{mode:<10} {:>8.0} fetches/s  hit {:.3} ({:.3} {:.3} {:.3})  p99 {:.1} ms  disk {:.0} MB/s",
                m.get("fetches_per_sec").unwrap_or(&0.0),
                m.get("hit_ratio").unwrap_or(&0.0),
                m.get("hit_r0").unwrap_or(&0.0),
                m.get("hit_r1").unwrap_or(&0.0),
                m.get("hit_r2").unwrap_or(&0.0),
                m.get("fetch_ms_p99").unwrap_or(&0.0),
                m.get("disk_mb_per_sec").unwrap_or(&0.0),
            )
        })
        .unwrap_or_default();
        (r, line)
    });
    if !report.smoke_test {
        report.extra_md.push(verdict(&report, &group));
    }
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

/// `rounds` rounds of every mode of `modes` (the order rotated by round),
/// each `run(mode)`'s sample (and its progress line) added to `group`.
fn in_rounds(
    report: &mut Report,
    group: &str,
    rounds: u32,
    modes: &[&str],
    what: &str,
    mut run: impl FnMut(&str) -> (Result<BTreeMap<String, f64>>, String),
) {
    let progress = Progress::new(u64::from(rounds) * modes.len() as u64, what);
    for round in 0..rounds as usize {
        for mode in common::rotated(modes, round) {
            progress.start(format!("round {} {mode}", round + 1));
            let (r, line) = run(mode);
            let line = match &r {
                Ok(_) => format!("round {} {line}", round + 1),
                Err(e) => format!("round {} {mode}: {e:#}", round + 1),
            };
            report.add(
                group,
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
