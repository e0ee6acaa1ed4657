//! `edge`: spindle as a caching edge (#49) against nginx `proxy_cache`
//! with the `slice` module and `aio threads`, on a library ten times the
//! edge's memory behind an origin on a capped link.
//!
//! The origin is Debian's nginx in a network namespace of its own, behind
//! a veth pair whose origin end is capped by `tc tbf` (`--origin-mbit`): a
//! WAN link to an origin, not loopback. The edge under test runs on the
//! host, pinned to one CPU, in a memory cgroup (`--cgroup-mem`), with a
//! fresh disk cache of `--cache-size` every run; the library is ten times
//! the cgroup. Clients (spindle-load, keep-alive) ask for the library's
//! files Zipf-distributed (`--zipf`): a URL list in which each file
//! appears in proportion to its Zipf weight, from which the load
//! generator picks at random. A warm-up pass fills the cache, then the
//! measured pass counts: the hit ratio by bytes (1 − bytes from the
//! origin, counted on the veth, / body bytes to the clients), the bytes
//! from the origin, req/s and MB/s to clients, p99, and the edge's CPU per
//! GB sent. The servers alternate within each round, the first rotated.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use rand::{Rng, RngCore, SeedableRng};
use serde_json::json;

use crate::cold::parse_bytes;
use crate::common::{self, End, Load, Machine, Progress};
use crate::report::{col, Column, Report};
use crate::servers::which;
use crate::sys;

mod ats;
mod parts;

use parts::{wait_listening, CacheWatch, Proc, Wan};

/// The edges compared.
const SERVERS: [&str; 3] = ["spindle", "nginx-slice", "ats-slice"];
/// The slice both edges cache in (nginx `slice 1m`, spindle's own).
const SLICE: &str = "1m";
/// Addresses of the origin's veth pair (naio uses 10.213, scaleout 10.214+).
const HOST_ADDR: &str = "10.212.0.1";
const ORIGIN_ADDR: &str = "10.212.0.2";
const ORIGIN_PORT: u16 = 80;
/// Lines of the Zipf URL list.
const URL_LINES: usize = 50_000;
/// The share of requests for a range (from a random offset to the end).
const RANGE_SHARE: f64 = 0.1;
/// How long both edges keep an object fresh (the origin sends no
/// Cache-Control): nginx `proxy_cache_valid 7d`, spindle `--origin-ttl`.
const FRESH_SECS: u64 = 7 * 86_400;
/// How long a server may take to listen.
const START_TIMEOUT: Duration = Duration::from_secs(20);

const COLUMNS: [Column; 10] = [
    col("mb_per_sec", "MB/s to clients", 0),
    col("hit_ratio", "byte hit ratio", 3),
    col("origin_mb", "MB from the origin", 0),
    col("fetches_per_sec", "req/s", 0),
    col("fetch_ms_p99", "p99 ms", 1),
    col("cpu_s_per_gb", "server CPU s / GB", 2),
    col("cache_mb", "cache MB on disk, mean", 0),
    col("cache_peak_mb", "peak", 0),
    col("errors", "errors", 0),
    col("non_200", "not 200/206", 0),
];

#[derive(clap::Args, Debug, Clone)]
pub struct EdgeArgs {
    /// Where reports go (edge.json, .md, .svg).
    #[arg(long, default_value = "bench-results")]
    pub out: PathBuf,
    /// Where the library is written (DATA/edge-SIZE-N, made if missing).
    #[arg(long, default_value = "/var/tmp/spindle-bench-data")]
    pub data: PathBuf,
    /// Interleaved rounds.
    #[arg(long, default_value_t = 3)]
    pub rounds: u32,
    /// The edge's memory cgroup (its RAM); the library is ten times this.
    #[arg(long, default_value = "384m")]
    pub cgroup_mem: String,
    /// Each file of the library.
    #[arg(long, default_value = "8m")]
    pub file_size: String,
    /// Each edge's disk cache.
    #[arg(long, default_value = "1536m")]
    pub cache_size: String,
    /// The origin link's rates, Mbit/s (tc tbf on the origin's side): a
    /// table for each.
    #[arg(long, value_delimiter = ',', default_values_t = [1000u64, 10000])]
    pub origin_mbit: Vec<u64>,
    /// Zipf exponent of the requests over the library.
    #[arg(long, default_value_t = 0.8)]
    pub zipf: f64,
    /// Keep-alive connections of the clients.
    #[arg(long, default_value_t = 32)]
    pub parallel: u64,
    /// Seconds of the warm-up pass (the cache fills).
    #[arg(long, default_value_t = 60.0)]
    pub warmup_seconds: f64,
    /// Seconds of the measured pass.
    #[arg(long, default_value_t = 30.0)]
    pub seconds: f64,
    /// spindle's `--cache-size`; by default what nginx held on disk, on
    /// average, in a calibration run at each rate (see `size_caches`).
    #[arg(long)]
    pub held_cache_size: Option<String>,
    /// Only these edges (comma-separated: spindle, nginx-slice, ats-slice).
    #[arg(long, value_delimiter = ',')]
    pub only: Vec<String>,
    /// Small and short, one round: a smoke test.
    #[arg(long)]
    pub quick: bool,
}

/// The sizes of a run.
struct Plan {
    files: usize,
    file_size: u64,
    cgroup: u64,
    /// nginx's `max_size`.
    cache: u64,
    /// spindle's `--cache-size` and Traffic Server's span: what nginx
    /// holds at `cache`, measured (`size_caches`).
    held: u64,
    warmup: f64,
    seconds: f64,
    rounds: u32,
}

impl Plan {
    fn new(a: &EdgeArgs) -> Result<Plan> {
        let (cg, fs, cache) = if a.quick {
            (32u64 << 20, 1u64 << 20, 96u64 << 20)
        } else {
            (
                parse_bytes(&a.cgroup_mem)?,
                parse_bytes(&a.file_size)?,
                parse_bytes(&a.cache_size)?,
            )
        };
        if fs == 0 || cg == 0 {
            bail!("--file-size and --cgroup-mem must be above 0");
        }
        Ok(Plan {
            files: (10 * cg).div_ceil(fs) as usize,
            file_size: fs,
            cgroup: cg,
            cache,
            held: cache,
            warmup: if a.quick { 2.0 } else { a.warmup_seconds },
            seconds: if a.quick { 2.0 } else { a.seconds },
            rounds: if a.quick { 1 } else { a.rounds.clamp(1, 50) },
        })
    }

    fn library(&self) -> u64 {
        self.files as u64 * self.file_size
    }
}

/// Writes (or finds complete) the library: `lib/fN`, random bytes.
fn ensure_library(data: &Path, p: &Plan) -> Result<PathBuf> {
    let root = data.join(format!("edge-{}-{}", p.file_size, p.files));
    let marker = root.join(".complete");
    if marker.exists() {
        return Ok(root);
    }
    eprintln!(
        "edge: writing {} files of {} bytes in {}",
        p.files,
        p.file_size,
        root.display()
    );
    std::fs::create_dir_all(root.join("lib"))?;
    let mut buf = vec![0u8; 1 << 20];
    for i in 0..p.files {
        let mut rng = rand::rngs::SmallRng::seed_from_u64(i as u64);
        let mut f = std::io::BufWriter::new(std::fs::File::create(root.join(format!("lib/f{i}")))?);
        let mut left = p.file_size;
        while left > 0 {
            let n = (buf.len() as u64).min(left) as usize;
            rng.fill_bytes(&mut buf[..n]);
            f.write_all(&buf[..n])?;
            left -= n as u64;
        }
        f.flush()?;
    }
    std::fs::write(&marker, "")?;
    Ok(root)
}

/// A Zipf-distributed list of the library's paths ([`URL_LINES`] lines,
/// file k+1 with weight 1/(k+1)^s, ranks in a fresh random order). A
/// [`RANGE_SHARE`] of the lines ask for the file from a random offset to
/// its end (`#bytes=FIRST-`, a player's seek or a resumed download).
fn zipf_paths(files: usize, file_size: u64, s: f64, rng: &mut impl Rng) -> Vec<String> {
    let mut ranks: Vec<usize> = (0..files).collect();
    for i in (1..files).rev() {
        ranks.swap(i, rng.random_range(0..=i));
    }
    let weights: Vec<f64> = (1..=files).map(|k| 1.0 / (k as f64).powf(s)).collect();
    let total: f64 = weights.iter().sum();
    let mut cumulative = Vec::with_capacity(files);
    let mut acc = 0.0;
    for w in &weights {
        acc += w / total;
        cumulative.push(acc);
    }
    (0..URL_LINES)
        .map(|_| {
            let u: f64 = rng.random();
            let k = cumulative.partition_point(|c| *c < u).min(files - 1);
            if rng.random::<f64>() < RANGE_SHARE {
                let first = rng.random_range(0..file_size.max(1));
                format!("lib/f{}#bytes={first}-", ranks[k])
            } else {
                format!("lib/f{}", ranks[k])
            }
        })
        .collect()
}

/// nginx's temp paths and basics, beneath `dir`.
pub(crate) fn nginx_head(dir: &Path, master: bool) -> String {
    let d = dir.display();
    format!(
        "daemon off;\nmaster_process {};\nworker_processes 1;\npid {d}/nginx.pid;\n\
         error_log {d}/error.log;\nevents {{ worker_connections 4096; }}\n\
         thread_pool default threads=32 max_queue=65536;\n\
         http {{\n  access_log off;\n  sendfile on;\n  client_body_temp_path {d}/body;\n\
         proxy_temp_path {d}/proxy;\n  fastcgi_temp_path {d}/fastcgi;\n  uwsgi_temp_path {d}/uwsgi;\n\
         scgi_temp_path {d}/scgi;\n",
        if master { "on" } else { "off" }
    )
}

/// The origin: Debian's nginx in the origin's namespace.
fn start_origin(wan: &Wan, root: &Path, work: &Path) -> Result<Proc> {
    let dir = work.join("origin");
    std::fs::create_dir_all(&dir)?;
    let conf = format!(
        "{}  server {{\n    listen {ORIGIN_ADDR}:{ORIGIN_PORT};\n    root {};\n  }}\n}}\n",
        nginx_head(&dir, false),
        root.display()
    );
    std::fs::write(dir.join("nginx.conf"), conf)?;
    let nginx = which("nginx").context("edge needs nginx (apt-get install nginx)")?;
    let argv: Vec<String> = ["ip", "netns", "exec", &wan.ns]
        .iter()
        .map(|s| s.to_string())
        .chain([
            nginx.display().to_string(),
            "-c".into(),
            dir.join("nginx.conf").display().to_string(),
            "-p".into(),
            dir.display().to_string(),
        ])
        .collect();
    let log = dir.join("stderr");
    let p = Proc::spawn(&argv, None, None, &log)?;
    wait_listening((ORIGIN_ADDR, ORIGIN_PORT), &log)?;
    Ok(p)
}

/// One edge, fresh (an empty cache), listening on 127.0.0.1:`port`.
fn start_edge(
    server: &str,
    p: &Plan,
    cgroup: &sys::MemCgroup,
    work: &Path,
    port: u16,
) -> Result<Proc> {
    let dir = work.join(format!("edge-{server}"));
    let _ = std::fs::remove_dir_all(&dir);
    let cache = dir.join("cache");
    std::fs::create_dir_all(&cache)?;
    let argv = match server {
        "spindle" => spindle_argv(p, &dir, port)?,
        "nginx-slice" => nginx_argv(p, &dir, port)?,
        "ats-slice" => ats::argv(p.held, &dir, port)?,
        other => bail!("no edge {other}"),
    };
    let log = dir.join("stderr");
    let cpu = common::pinning(1).0;
    let proc_ = Proc::spawn(&argv, Some(&cgroup.procs), cpu.as_deref(), &log)?;
    wait_listening(("127.0.0.1", port), &log)?;
    Ok(proc_)
}

fn spindle_argv(p: &Plan, dir: &Path, port: u16) -> Result<Vec<String>> {
    let root = dir.join("root");
    std::fs::create_dir_all(&root)?;
    let exe = std::env::current_exe()?;
    Ok(vec![
        exe.display().to_string(),
        "__spindle".into(),
        "--backend".into(),
        "io-uring".into(),
        "--workers".into(),
        "1".into(),
        "--listen".into(),
        format!("127.0.0.1:{port}"),
        "--origin".into(),
        format!("http://{ORIGIN_ADDR}:{ORIGIN_PORT}"),
        "--cache-dir".into(),
        dir.join("cache").display().to_string(),
        "--cache-size".into(),
        p.held.to_string(),
        // Fresh as long as nginx's proxy_cache_valid: the origin says
        // nothing, and the library does not change.
        "--origin-ttl".into(),
        FRESH_SECS.to_string(),
        root.display().to_string(),
    ])
}

fn nginx_argv(p: &Plan, dir: &Path, port: u16) -> Result<Vec<String>> {
    for t in ["body", "proxy", "fastcgi", "uwsgi", "scgi"] {
        std::fs::create_dir_all(dir.join(t))?;
    }
    let conf = format!(
        "{}  aio threads;\n  proxy_cache_path {} levels=1:2 keys_zone=edge:64m max_size={} inactive=7d use_temp_path=off;\n\
         upstream origin {{ server {ORIGIN_ADDR}:{ORIGIN_PORT}; keepalive 32; }}\n\
         server {{\n    listen 127.0.0.1:{port};\n    location / {{\n      slice {SLICE};\n\
         proxy_cache edge;\n      proxy_cache_key $uri$is_args$args$slice_range;\n\
         proxy_set_header Range $slice_range;\n      proxy_http_version 1.1;\n\
         proxy_set_header Connection \"\";\n      proxy_cache_valid 200 206 {FRESH_SECS}s;\n\
         proxy_cache_lock on;\n      proxy_pass http://origin;\n    }}\n  }}\n}}\n",
        nginx_head(dir, true),
        dir.join("cache").display(),
        p.cache,
    );
    std::fs::write(dir.join("nginx.conf"), conf)?;
    let nginx = which("nginx").context("edge needs nginx")?;
    Ok(vec![
        nginx.display().to_string(),
        "-c".into(),
        dir.join("nginx.conf").display().to_string(),
        "-p".into(),
        dir.display().to_string(),
    ])
}

/// One server's run: fresh, a warm-up pass, the measured pass.
fn one_run(
    server: &str,
    p: &Plan,
    a: &EdgeArgs,
    wan: &Wan,
    cgroup: &sys::MemCgroup,
    work: &Path,
) -> Result<BTreeMap<String, f64>> {
    sys::drop_caches()?;
    let port = sys::free_port()?;
    let edge = start_edge(server, p, cgroup, work, port)?;
    let mut rng = rand::rngs::SmallRng::from_os_rng();
    let paths = zipf_paths(p.files, p.file_size, a.zipf, &mut rng);
    let urls = work.join("urls");
    common::write_urls(&urls, port, &paths)?;
    let mut load = Load {
        rate: None,
        urls,
        parallel: if a.quick { 8 } else { a.parallel.max(1) },
        end: End::Seconds(p.warmup),
        keepalive: true,
        idle: 0,
        timeout_secs: 60,
        tls: None,
    };
    common::run_load(&load, work, "warmup")?;
    let (o0, c0) = (wan.origin_bytes(), edge.cpu_seconds());
    let watch = CacheWatch::start(work.join(format!("edge-{server}")).join("cache"));
    load.end = End::Seconds(p.seconds);
    let v = common::run_load(&load, work, "measured");
    let (o1, c1) = (wan.origin_bytes(), edge.cpu_seconds());
    let (held, peak) = watch.finish();
    // The cache goes with the run (three edges' would hold 8 GB of disk).
    drop(edge);
    let _ = std::fs::remove_dir_all(work.join(format!("edge-{server}")).join("cache"));
    let v = v?;
    let mut m = common::load_metrics(&v);
    let secs = m.get("seconds").copied().unwrap_or(p.seconds).max(1e-9);
    let sent = m.get("mb_per_sec").copied().unwrap_or(0.0) * 1e6 * secs;
    let origin = o1 - o0;
    m.insert("origin_mb".into(), origin / 1e6);
    if sent > 0.0 {
        m.insert("hit_ratio".into(), (1.0 - origin / sent).max(0.0));
        m.insert("cpu_s_per_gb".into(), (c1 - c0) / (sent / 1e9));
    }
    m.insert("server_cpu_s".into(), c1 - c0);
    m.insert("cache_mb".into(), held / 1e6);
    m.insert("cache_peak_mb".into(), peak / 1e6);
    Ok(m)
}

/// nginx's cache manager trims to `max_size` after the fact, in bursts:
/// with `max_size` 1536 MiB its directory held 2.2 GB on average (peak
/// 2.8) with the origin at 1000 Mbit/s, and 2.6 GB (peak 3.7) at 10,000,
/// while spindle holds its `--cache-size` to the byte and Traffic
/// Server its span (a file of that size). So that the caches hold the
/// same bytes, one nginx run (warm-up and measured pass, not counted)
/// measures what nginx holds at this rate, and spindle and Traffic
/// Server are given that; the tables show what each held.
/// Returns the line for the report.
fn size_caches(
    p: &mut Plan,
    a: &EdgeArgs,
    mbit: u64,
    wan: &Wan,
    cgroup: &sys::MemCgroup,
    work: &Path,
) -> Result<String> {
    if let Some(v) = &a.held_cache_size {
        p.held = parse_bytes(v)?;
        return Ok(format!(
            "at {mbit} Mbit/s: spindle's `--cache-size` and Traffic Server's span {} MB (`--held-cache-size`), nginx's `max_size` {} MiB",
            p.held / 1_000_000,
            p.cache >> 20
        ));
    }
    p.held = p.cache;
    let wants_nginx = a.only.is_empty() || a.only.iter().any(|o| o == "nginx-slice");
    if a.quick || !wants_nginx {
        return Ok(format!(
            "at {mbit} Mbit/s: every cache {} MiB, not calibrated",
            p.cache >> 20
        ));
    }
    eprintln!("edge: at {mbit} Mbit/s, measuring what nginx holds (one run, not counted)");
    let m = one_run("nginx-slice", p, a, wan, cgroup, work)?;
    let held = m.get("cache_mb").copied().unwrap_or(0.0) * 1e6;
    let peak = m.get("cache_peak_mb").copied().unwrap_or(0.0) * 1e6;
    p.held = (held as u64).max(p.cache);
    Ok(format!(
        "at {mbit} Mbit/s: nginx at `max_size` {} MiB held a mean of {:.0} MB on disk (peak {:.0}) in a calibration run, so spindle's `--cache-size` and Traffic Server's span are {} MB",
        p.cache >> 20,
        held / 1e6,
        peak / 1e6,
        p.held / 1_000_000
    ))
}

pub fn run(a: EdgeArgs) -> Result<()> {
    if !sys::is_root() {
        bail!("edge needs root: a network namespace, tc, a memory cgroup, drop_caches");
    }
    for t in ["ip", "tc", "nginx"] {
        if which(t).is_none() {
            bail!("edge needs {t} (apt-get install iproute2 nginx)");
        }
    }
    if a.origin_mbit.is_empty() || a.origin_mbit.contains(&0) {
        bail!("--origin-mbit: one or more rates above 0");
    }
    let mut p = Plan::new(&a)?;
    let root = ensure_library(&a.data, &p)?;
    let wan = Wan::create(a.origin_mbit[0])?;
    let work = common::workdir(&a.out, "edge")?;
    let _origin = start_origin(&wan, &root, &work)?;
    let cgroup = sys::MemCgroup::create(
        &format!("spindle-bench-edge-{}", std::process::id()),
        p.cgroup,
    )?;
    let mut report = new_report(&a, &p, &root, &cgroup);
    let wants = |s: &str| a.only.is_empty() || a.only.iter().any(|o| o == s);
    let chosen = SERVERS.iter().filter(|s| wants(s)).count() as u64;
    let progress = Progress::new(
        a.origin_mbit.len() as u64 * u64::from(p.rounds) * chosen,
        "edge",
    );
    for &mbit in &a.origin_mbit {
        wan.set_rate(mbit)?;
        let sized = size_caches(&mut p, &a, mbit, &wan, &cgroup, &work)?;
        report.notes.push(sized);
        let group = format!(
            "origin at {mbit} Mbit/s: {} files of {} MiB",
            p.files,
            p.file_size >> 20
        );
        for round in 0..p.rounds as usize {
            for server in common::rotated(&SERVERS, round) {
                if !wants(server) {
                    continue;
                }
                progress.start(format!("{mbit} Mbit/s round {} {server}", round + 1));
                let r = one_run(server, &p, &a, &wan, &cgroup, &work);
                let line = run_line(mbit, round, server, &r);
                report.add(
                    &group,
                    server,
                    r.map(|mut m| {
                        m.insert("round".into(), round as f64);
                        m
                    }),
                );
                progress.done(line);
            }
        }
    }
    progress.finish();
    report.machine.finish();
    let files = report.write(&a.out, "edge", &COLUMNS, "MB/s to clients")?;
    for f in files {
        eprintln!("wrote {}", f.display());
    }
    Ok(())
}

/// The progress line of one run.
fn run_line(mbit: u64, round: usize, server: &str, r: &Result<BTreeMap<String, f64>>) -> String {
    match r {
        Ok(m) => format!(
            "{mbit} Mbit/s round {} {server:<12} {:>6.0} MB/s  hit {:.3}  {:>6.0} MB from the origin  {:>6.0} req/s  p99 {:.1} ms  {:.2} CPU s/GB  cache {:.0} MB",
            round + 1,
            m.get("mb_per_sec").unwrap_or(&0.0),
            m.get("hit_ratio").unwrap_or(&0.0),
            m.get("origin_mb").unwrap_or(&0.0),
            m.get("fetches_per_sec").unwrap_or(&0.0),
            m.get("fetch_ms_p99").unwrap_or(&0.0),
            m.get("cpu_s_per_gb").unwrap_or(&0.0),
            m.get("cache_mb").unwrap_or(&0.0),
        ),
        Err(e) => format!("{mbit} Mbit/s round {} {server}: {e:#}", round + 1),
    }
}

/// The report, its machine and its notes (the calibration's are added
/// per rate).
fn new_report(a: &EdgeArgs, p: &Plan, root: &Path, cgroup: &sys::MemCgroup) -> Report {
    let mut machine = Machine::probe(root);
    if let Ok(v) = crate::servers::Server::NginxSendfile.version() {
        machine.versions.insert("nginx-slice".into(), v);
    }
    machine.versions.insert(
        "spindle".into(),
        format!("spindle {} (io-uring, 1 worker)", env!("CARGO_PKG_VERSION")),
    );
    if let Some(v) = ats::version() {
        machine.versions.insert("ats-slice".into(), v);
    }
    machine.cgroup_limit = Some(format!(
        "{} MiB (cgroup v{}) for the edge under test",
        p.cgroup >> 20,
        cgroup.version
    ));
    let lib = p.library();
    let rates: Vec<String> = a.origin_mbit.iter().map(|r| r.to_string()).collect();
    let mut report = Report::new(
        "edge",
        &format!(
            "edge: a caching edge over a {:.1} GB library (10× its memory), origin at {} Mbit/s, Zipf {}",
            lib as f64 / 1e9,
            rates.join(" and "),
            a.zipf
        ),
        machine,
        json!({"files": p.files, "file_size": p.file_size, "library": lib, "cgroup": p.cgroup,
               "cache": p.cache, "origin_mbit": a.origin_mbit, "zipf": a.zipf,
               "parallel": a.parallel, "warmup_seconds": p.warmup, "seconds": p.seconds,
               "rounds": p.rounds}),
    );
    report.baseline = "spindle".into();
    report.primary = "mb_per_sec".into();
    report.vs_best_peer = true;
    if a.quick {
        report.smoke_test("--quick: a 320 MB library of 1 MiB files, a 32 MiB cgroup, 2 s passes: a smoke test of the harness.");
    }
    report.notes = vec![
        "the origin: Debian's nginx in a network namespace of its own, reached over a veth pair whose origin end is capped by tc tbf (burst 2 ms of the rate, at least 256 KB) at the table's rate".into(),
        format!("each edge on the host, pinned to CPU {}, in a {} MiB memory cgroup, with a fresh disk cache every run (page cache dropped first)", common::pinning(1).0.unwrap_or_else(|| "any".into()), p.cgroup >> 20),
        "spindle: io-uring, 1 worker, `--origin`, `--cache-dir`, `--cache-size` (below; 1 MiB slices; TinyLFU admission), `--origin-ttl 604800` (as nginx's 7d)".into(),
        format!("nginx-slice: 1 worker, `proxy_cache` (LRU) with `max_size` {} MiB, `slice {SLICE}` with `$slice_range` in the key, `aio threads` (32), `sendfile`, `proxy_cache_lock`, keep-alive to the origin", p.cache >> 20),
        format!("load: spindle-load, {} keep-alive connections, random picks from a list of {URL_LINES} paths drawn Zipf({}) over the {} files (ranks shuffled per run), {:.0}% of them asking for a range from a random offset to the end: {} s warm-up, then {} s measured", a.parallel, a.zipf, p.files, RANGE_SHARE * 100.0, p.warmup, p.seconds),
        "byte hit ratio = 1 − bytes the host received from the origin (the veth's rx_bytes: headers included) / body bytes the clients received; CPU per GB = the edge's process group CPU over the measured pass / GB to the clients; cache MB on disk = the cache directory's allocated blocks, sampled each second of the measured pass".into(),
        format!("ats-slice: Debian's Traffic Server, 1 event thread, 32 disk threads, its cache a span (one file) of the size below, `slice.so --blockbytes={SLICE}` over `cache_range_requests.so`, heuristic freshness 7 days (the origin sends no Cache-Control)"),
    ];
    report
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zipf_lists_favour_the_first_ranks() {
        let mut rng = rand::rngs::SmallRng::seed_from_u64(7);
        let paths = zipf_paths(100, 1000, 1.0, &mut rng);
        assert_eq!(paths.len(), URL_LINES);
        let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
        let mut ranges = 0;
        for p in &paths {
            let (file, range) = p.split_once('#').unwrap_or((p, ""));
            ranges += usize::from(!range.is_empty());
            *counts.entry(file).or_default() += 1;
        }
        let share = ranges as f64 / URL_LINES as f64;
        assert!(
            (RANGE_SHARE - 0.01..RANGE_SHARE + 0.01).contains(&share),
            "{share}"
        );
        let mut c: Vec<usize> = counts.values().copied().collect();
        c.sort_unstable_by(|a, b| b.cmp(a));
        // Zipf(1) over 100: the first rank has 1/H(100) = 19% of the picks.
        let top = c[0] as f64 / URL_LINES as f64;
        assert!((0.17..0.22).contains(&top), "{top}");
        assert!(c.len() > 90, "most files appear");
    }
}
