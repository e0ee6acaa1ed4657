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
//!
//! Here: the settings, the run of each server (`soak_one`: files, server, client
//! threads, the scheduler and the sampler) and the verdict; `clients.rs` holds the
//! scenarios, the mutator and the idle connections; `report.rs` writes soak.md and
//! soak.json.

mod clients;
mod report;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use crate::servers::{Running, Server, ServerSetup};
use crate::sys;
use clients::{content, idler, mutator, run_scenario, Counts, Ctx, Scenario, MIX};

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
        tls: None,
        http2: false,
        http3: false,
        access_log: None,
        compress: None,
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
    report::write(&a, seed, &outcomes)?;
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
}
