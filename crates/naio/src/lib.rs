//! `spindle-bench naio`: asynchronous network I/O against synchronous
//! `send`/`recv`, with the CPU each side pays.
//!
//! A sender and a receiver (threads of this process, each side measured
//! on its own) move `--bytes` over `--sockets` TCP connections, on
//! loopback or (`--netns`) over a veth pair between two network
//! namespaces. Receivers: blocking `recv`, `epoll`, io_uring `RECV`,
//! multishot `RECV` with a provided buffer ring. Senders: blocking `send`,
//! `epoll`, io_uring `SEND` and `SEND_ZC`, `sendfile`, io_uring `SPLICE`
//! through a pipe, and lighttpd 1.5's linux-aio-sendfile (native AIO
//! `O_DIRECT` read into /dev/shm, then `sendfile`). Every run checks the
//! receiver's checksum of every socket's bytes. See docs/naio.md.

pub mod bench;
mod cpu;
pub mod digest;
pub mod netns;
mod plot;
mod recv;
mod send;
mod send_aio;
mod side;
pub mod source;
mod sys;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context as _};
use serde::{Deserialize, Serialize};

pub use bench::{run_one, RecvMode, RunConfig, RunResult, SendMode};
pub use netns::{Net, NetnsPair};
pub use source::Source;

/// Default location of the source file: on a real disk, so that the
/// linux-aio-sendfile sender's `O_DIRECT` reads reach the disk as in the
/// seed (tmpfs refuses `O_DIRECT` before Linux 6.6, and has no disk).
pub const DEFAULT_FILE: &str = "/var/tmp/naio-source.bin";
/// Most runs one invocation may plan.
pub const MAX_RUNS: usize = 5000;
/// Most repeats of each run.
pub const MAX_REPEATS: usize = 50;

/// Which runs to make.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Plan {
    /// Every --recv mode against every --send mode, at every --size and --sockets.
    Cross,
    /// Two sweeps over --size and --sockets: every --recv mode against
    /// --sweep-send (receive side compared), and every --send mode against
    /// --sweep-recv (send side compared).
    Sweeps,
}

/// Command-line arguments of `spindle-bench naio`.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// Receive modes to run (comma-separated).
    #[arg(long, value_enum, value_delimiter = ',',
          default_values_t = RecvMode::ALL.to_vec())]
    pub recv: Vec<RecvMode>,
    /// Send modes to run (comma-separated).
    #[arg(long, value_enum, value_delimiter = ',',
          default_values_t = SendMode::ALL.to_vec())]
    pub send: Vec<SendMode>,
    /// Message sizes: bytes per send call and per receive buffer; powers of
    /// two from 512 to 1M (suffixes K, M), comma-separated.
    #[arg(long, value_delimiter = ',', value_parser = parse_size, default_value = "64K")]
    pub size: Vec<usize>,
    /// Numbers of concurrent TCP connections, comma-separated (1..=64).
    #[arg(long, value_delimiter = ',', default_value = "1,10")]
    pub sockets: Vec<usize>,
    /// Bytes to move per run, over all connections (suffixes K, M, G).
    #[arg(long, value_parser = parse_size_u64, default_value = "1G")]
    pub bytes: u64,
    /// Senders start no new message after this many seconds of a run; the
    /// run then reports the bytes it moved. 0: no limit.
    #[arg(long, default_value_t = 20.0)]
    pub time_limit: f64,
    /// Repeat every run this many times, in rounds (A B A B ...); tables and
    /// plots show medians.
    #[arg(long, default_value_t = 1)]
    pub repeats: usize,
    /// Which runs to make.
    #[arg(long, value_enum, default_value = "cross")]
    pub plan: Plan,
    /// The sender every receive mode is paired with in `--plan sweeps`.
    #[arg(long, value_enum, default_value = "sendfile")]
    pub sweep_send: SendMode,
    /// The receiver every send mode is paired with in `--plan sweeps`.
    #[arg(long, value_enum, default_value = "epoll")]
    pub sweep_recv: RecvMode,
    /// Run the receiver in a network namespace behind a veth pair (made and
    /// removed by the tool; needs root and iproute2) instead of loopback.
    #[arg(long)]
    pub netns: bool,
    /// Source file for the file senders, on a real disk; created with random
    /// content if missing or of the wrong size.
    #[arg(long, default_value = DEFAULT_FILE)]
    pub file: PathBuf,
    /// Size of the source file (a multiple of 1M).
    #[arg(long, value_parser = parse_size, default_value = "64M")]
    pub file_size: usize,
    /// Directory for results.json, results.csv, results.md and the SVG plots.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Make no runs: rebuild results.md, results.csv and the plots from
    /// DIR/results.json (written by an earlier run), into --out (default DIR).
    #[arg(long, value_name = "DIR")]
    pub replot: Option<PathBuf>,
}

fn parse_size_u64(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let lower = t.to_ascii_lowercase();
    let body = lower
        .strip_suffix("ib")
        .or_else(|| lower.strip_suffix('b'))
        .unwrap_or(&lower);
    let (num, mult) = match body.chars().last() {
        Some('k') => (&body[..body.len() - 1], 1u64 << 10),
        Some('m') => (&body[..body.len() - 1], 1 << 20),
        Some('g') => (&body[..body.len() - 1], 1 << 30),
        _ => (body, 1),
    };
    let n: u64 = num
        .parse()
        .map_err(|_| format!("`{t}` is not a size (examples: 512, 64K, 1M, 1G)"))?;
    n.checked_mul(mult)
        .ok_or_else(|| format!("`{t}` is too large"))
}

fn parse_size(s: &str) -> Result<usize, String> {
    let n = parse_size_u64(s)?;
    usize::try_from(n).map_err(|_| format!("`{s}` is too large"))
}

/// Which part of the pairing a group compares.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
enum Varies {
    Recv,
    Send,
    Both,
}

/// A set of pairings shown together in tables and plots.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct Group {
    name: String,
    varies: Varies,
    pairings: Vec<(RecvMode, SendMode)>,
}

fn groups(a: &Args) -> Vec<Group> {
    match a.plan {
        Plan::Cross => vec![Group {
            name: "cross".into(),
            varies: Varies::Both,
            pairings: a
                .recv
                .iter()
                .flat_map(|&r| a.send.iter().map(move |&s| (r, s)))
                .collect(),
        }],
        Plan::Sweeps => vec![
            Group {
                name: "recv-sweep".into(),
                varies: Varies::Recv,
                pairings: a.recv.iter().map(|&r| (r, a.sweep_send)).collect(),
            },
            Group {
                name: "send-sweep".into(),
                varies: Varies::Send,
                pairings: a.send.iter().map(|&s| (a.sweep_recv, s)).collect(),
            },
        ],
    }
}

type Key = (RecvMode, SendMode, usize, usize);

fn key(r: &RunResult) -> Key {
    (r.recv, r.send, r.size, r.sockets)
}

fn validate(a: &Args) -> anyhow::Result<()> {
    if a.recv.is_empty() || a.send.is_empty() || a.size.is_empty() || a.sockets.is_empty() {
        bail!("--recv, --send, --size and --sockets need at least one value each");
    }
    for &s in &a.size {
        if !(source::MIN_MSG..=source::MAX_MSG).contains(&s) || !s.is_power_of_two() {
            bail!("--size {s}: sizes must be powers of two from 512 to 1M");
        }
    }
    for &n in &a.sockets {
        if n == 0 || n > bench::MAX_SOCKETS {
            bail!("--sockets {n}: must be 1..={}", bench::MAX_SOCKETS);
        }
    }
    if !(a.time_limit >= 0.0 && a.time_limit <= 86_400.0) {
        bail!("--time-limit must be between 0 and 86400 seconds");
    }
    if a.repeats == 0 || a.repeats > MAX_REPEATS {
        bail!("--repeats must be 1..={MAX_REPEATS}");
    }
    if a.file_size == 0 || a.file_size & (source::MAX_MSG - 1) != 0 {
        bail!("--file-size must be a positive multiple of 1M");
    }
    for &n in &a.sockets {
        for &s in &a.size {
            if a.bytes / n as u64 / s as u64 == 0 {
                bail!(
                    "--bytes {} is less than one {s}-byte message per socket for {n} sockets",
                    a.bytes
                );
            }
        }
    }
    Ok(())
}

/// Runs `spindle-bench naio`.
pub fn run(args: Args) -> anyhow::Result<()> {
    if let Some(dir) = &args.replot {
        return replot(dir, &args);
    }
    validate(&args)?;
    let groups = groups(&args);
    // Runs compared with each other are adjacent: sockets, then size, then
    // pairing; each round repeats the whole list.
    let mut configs: Vec<RunConfig> = Vec::new();
    let time_limit = (args.time_limit > 0.0).then(|| Duration::from_secs_f64(args.time_limit));
    for &sockets in &args.sockets {
        for &size in &args.size {
            for g in &groups {
                for &(recv, send) in &g.pairings {
                    if configs
                        .iter()
                        .any(|c| (c.recv, c.send, c.size, c.sockets) == (recv, send, size, sockets))
                    {
                        continue;
                    }
                    configs.push(RunConfig {
                        recv,
                        send,
                        size,
                        sockets,
                        bytes: args.bytes,
                        time_limit,
                    });
                }
            }
        }
    }
    if configs.len() * args.repeats > MAX_RUNS {
        bail!(
            "{} runs planned; the limit is {MAX_RUNS}: fewer modes, sizes or repeats",
            configs.len() * args.repeats
        );
    }
    let source = Source::open_or_create(&args.file, args.file_size)?;
    if args.send.contains(&SendMode::LinuxAioSendfile) {
        sys::open_direct(&source.path).with_context(|| {
            format!(
                "linux-aio-sendfile needs O_DIRECT on {} (tmpfs before Linux 6.6 refuses it; use --file on a real disk)",
                source.path.display()
            )
        })?;
    }
    let net = if args.netns {
        Net::Veth(NetnsPair::create().context("--netns: creating the namespaces and veth pair")?)
    } else {
        Net::Loopback
    };
    if let Some(out) = &args.out {
        std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    }

    let checksum_s_per_gb = checksum_cost(&source);
    let total = configs.len() * args.repeats;
    eprintln!(
        "naio: the receivers' checksum costs {checksum_s_per_gb:.3} CPU s/GB on this machine (included in receiver CPU)"
    );
    eprintln!(
        "naio: {} runs ({} configurations x {} repeats), {} over {}",
        total,
        configs.len(),
        args.repeats,
        human_bytes(args.bytes),
        if args.netns {
            "a veth pair"
        } else {
            "loopback"
        }
    );
    let mut results: Vec<(usize, RunResult)> = Vec::new();
    let mut failure = None;
    'rounds: for round in 0..args.repeats {
        for c in &configs {
            match run_one(c, &source, &net) {
                Ok(r) => {
                    eprintln!(
                        "[{}/{}] {:>20} <- {:<18} {:>5} x{:<2} {:>9.1} MB/s  send {:6.3} s/GB  recv {:6.3} s/GB{}",
                        results.len() + 1,
                        total,
                        r.recv.name(),
                        r.send.name(),
                        plot::size_label(r.size),
                        r.sockets,
                        r.mbps,
                        r.send_cpu_per_gb,
                        r.recv_cpu_per_gb,
                        if r.capped { "  (time limit)" } else { "" }
                    );
                    results.push((round, r));
                }
                Err(e) => {
                    failure = Some(e);
                    break 'rounds;
                }
            }
        }
    }
    drop(net);
    let medians = medians(&results);
    let md = tables(&groups, &args, &medians);
    println!("{md}");
    if let Some(out) = &args.out {
        write_outputs(
            out,
            &args,
            &groups,
            &results,
            &medians,
            &md,
            checksum_s_per_gb,
        )?;
        eprintln!("naio: results written to {}", out.display());
    }
    if let Some(e) = failure {
        return Err(e);
    }
    Ok(())
}

/// CPU seconds per 10^9 bytes the receivers' checksum costs by itself.
fn checksum_cost(source: &Source) -> f64 {
    const ROUNDS: usize = 4;
    let t0 = sys::thread_cpu_ns();
    let mut x = 0u64;
    for _ in 0..ROUNDS {
        x ^= digest::xxh64(std::hint::black_box(&source.content));
    }
    std::hint::black_box(x);
    let ns = sys::thread_cpu_ns().saturating_sub(t0);
    ns as f64 / (ROUNDS * source.len()) as f64
}

fn human_bytes(n: u64) -> String {
    if n >= 1 << 30 && n & ((1 << 30) - 1) == 0 {
        format!("{} GiB", n >> 30)
    } else if n >= 1 << 20 {
        format!("{:.0} MiB", n as f64 / (1u64 << 20) as f64)
    } else {
        format!("{n} B")
    }
}

/// Median over repeats of one configuration.
#[derive(Clone, Debug, Serialize)]
struct Median {
    recv: RecvMode,
    send: SendMode,
    size: usize,
    sockets: usize,
    runs: usize,
    mbps: f64,
    mbps_min: f64,
    mbps_max: f64,
    send_cpu_per_gb: f64,
    recv_cpu_per_gb: f64,
    /// Median over runs of (sender + receiver) CPU s/GB.
    total_cpu_per_gb: f64,
    capped_runs: usize,
    zc_copied_fraction: Option<f64>,
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n == 0 {
        f64::NAN
    } else if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn medians(results: &[(usize, RunResult)]) -> BTreeMap<Key, Median> {
    let mut by: BTreeMap<Key, Vec<&RunResult>> = BTreeMap::new();
    for (_, r) in results {
        by.entry(key(r)).or_default().push(r);
    }
    by.into_iter()
        .map(|(k, rs)| {
            let f = |g: fn(&RunResult) -> f64| median(rs.iter().map(|r| g(r)).collect());
            let notifs: u64 = rs.iter().map(|r| r.zc_notifs).sum();
            let copied: u64 = rs.iter().map(|r| r.zc_copied).sum();
            let m = Median {
                recv: k.0,
                send: k.1,
                size: k.2,
                sockets: k.3,
                runs: rs.len(),
                mbps: f(|r| r.mbps),
                mbps_min: rs.iter().map(|r| r.mbps).fold(f64::MAX, f64::min),
                mbps_max: rs.iter().map(|r| r.mbps).fold(0.0, f64::max),
                send_cpu_per_gb: f(|r| r.send_cpu_per_gb),
                recv_cpu_per_gb: f(|r| r.recv_cpu_per_gb),
                total_cpu_per_gb: f(|r| r.send_cpu_per_gb + r.recv_cpu_per_gb),
                capped_runs: rs.iter().filter(|r| r.capped).count(),
                zc_copied_fraction: (notifs > 0).then(|| copied as f64 / notifs as f64),
            };
            (k, m)
        })
        .collect()
}

fn label(g: &Group, r: RecvMode, s: SendMode) -> String {
    match g.varies {
        Varies::Recv => r.name().to_string(),
        Varies::Send => s.name().to_string(),
        Varies::Both => format!("{} <- {}", r.name(), s.name()),
    }
}

fn describe(g: &Group, a: &Args) -> String {
    match g.varies {
        Varies::Recv => format!("receive modes, sender `{}`", a.sweep_send.name()),
        Varies::Send => format!("send modes, receiver `{}`", a.sweep_recv.name()),
        Varies::Both => "receiver <- sender".to_string(),
    }
}

/// Markdown tables of the medians.
fn tables(groups: &[Group], a: &Args, med: &BTreeMap<Key, Median>) -> String {
    let mut s = String::new();
    for g in groups {
        for &n in &a.sockets {
            let _ = writeln!(
                s,
                "\n#### {} — {}, {} socket{}\n",
                g.name,
                describe(g, a),
                n,
                if n == 1 { "" } else { "s" }
            );
            if a.size.len() == 1 {
                let size = a.size[0];
                let _ = writeln!(
                    s,
                    "size {}: MB/s, then CPU seconds per GB moved by each side\n",
                    plot::size_label(size)
                );
                let _ = writeln!(
                    s,
                    "| receiver <- sender | MB/s | send s/GB | recv s/GB | both s/GB |"
                );
                let _ = writeln!(s, "|---|---:|---:|---:|---:|");
                for &(r, sm) in &g.pairings {
                    if let Some(m) = med.get(&(r, sm, size, n)) {
                        let _ = writeln!(
                            s,
                            "| {} <- {} | {:.0}{} | {:.3} | {:.3} | {:.3} |",
                            r.name(),
                            sm.name(),
                            m.mbps,
                            if m.capped_runs > 0 { "*" } else { "" },
                            m.send_cpu_per_gb,
                            m.recv_cpu_per_gb,
                            m.total_cpu_per_gb
                        );
                    }
                }
                continue;
            }
            type Metric = (&'static str, fn(&Median) -> f64);
            let metrics: [Metric; 4] = [
                ("MB/s", |m| m.mbps),
                ("sender CPU s/GB", |m| m.send_cpu_per_gb),
                ("receiver CPU s/GB", |m| m.recv_cpu_per_gb),
                ("both sides CPU s/GB", |m| m.total_cpu_per_gb),
            ];
            for (title, f) in metrics {
                let _ = writeln!(s, "{title}\n");
                let _ = write!(s, "| mode |");
                for &size in &a.size {
                    let _ = write!(s, " {} |", plot::size_label(size));
                }
                let _ = writeln!(s);
                let _ = write!(s, "|---|");
                for _ in &a.size {
                    let _ = write!(s, "---:|");
                }
                let _ = writeln!(s);
                for &(r, sm) in &g.pairings {
                    let _ = write!(s, "| {} |", label(g, r, sm));
                    for &size in &a.size {
                        match med.get(&(r, sm, size, n)) {
                            Some(m) if title == "MB/s" => {
                                let _ = write!(
                                    s,
                                    " {:.0}{} |",
                                    f(m),
                                    if m.capped_runs > 0 { "*" } else { "" }
                                );
                            }
                            Some(m) => {
                                let _ = write!(s, " {:.3} |", f(m));
                            }
                            None => {
                                let _ = write!(s, " – |");
                            }
                        }
                    }
                    let _ = writeln!(s);
                }
                let _ = writeln!(s);
            }
        }
    }
    if med.values().any(|m| m.capped_runs > 0) {
        let _ = writeln!(
            s,
            "\n\\* the time limit ({} s) stopped the sender before all the bytes were moved; the rate is over the bytes that were.",
            a.time_limit
        );
    }
    s
}

#[derive(Serialize)]
struct Report<'a> {
    tool: &'static str,
    kernel: String,
    cpus: usize,
    plan: Plan,
    bytes: u64,
    time_limit_s: f64,
    repeats: usize,
    netns: bool,
    /// CPU s/GB of the receivers' checksum alone (part of receiver CPU).
    checksum_cpu_s_per_gb: f64,
    file: &'a Path,
    groups: &'a [Group],
    medians: Vec<&'a Median>,
    runs: Vec<RunRow<'a>>,
}

#[derive(Deserialize)]
struct ReportIn {
    plan: Plan,
    bytes: u64,
    time_limit_s: f64,
    repeats: usize,
    netns: bool,
    checksum_cpu_s_per_gb: f64,
    file: PathBuf,
    groups: Vec<Group>,
    runs: Vec<RunRowIn>,
}

#[derive(Deserialize)]
struct RunRowIn {
    round: usize,
    #[serde(flatten)]
    r: RunResult,
}

fn replot(dir: &Path, args: &Args) -> anyhow::Result<()> {
    let p = dir.join("results.json");
    let text = std::fs::read_to_string(&p).with_context(|| format!("reading {}", p.display()))?;
    let rep: ReportIn =
        serde_json::from_str(&text).with_context(|| format!("parsing {}", p.display()))?;
    let results: Vec<(usize, RunResult)> = rep.runs.into_iter().map(|x| (x.round, x.r)).collect();
    let mut a = args.clone();
    a.plan = rep.plan;
    a.bytes = rep.bytes;
    a.time_limit = rep.time_limit_s;
    a.repeats = rep.repeats;
    a.netns = rep.netns;
    a.file = rep.file;
    a.size = results.iter().map(|(_, r)| r.size).collect();
    a.size.sort_unstable();
    a.size.dedup();
    a.sockets = results.iter().map(|(_, r)| r.sockets).collect();
    a.sockets.sort_unstable();
    a.sockets.dedup();
    for g in &rep.groups {
        match (g.varies, g.pairings.first()) {
            (Varies::Recv, Some(&(_, s))) => a.sweep_send = s,
            (Varies::Send, Some(&(r, _))) => a.sweep_recv = r,
            _ => {}
        }
    }
    let med = medians(&results);
    let md = tables(&rep.groups, &a, &med);
    println!("{md}");
    let out = args.out.clone().unwrap_or_else(|| dir.to_path_buf());
    std::fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
    write_outputs(
        &out,
        &a,
        &rep.groups,
        &results,
        &med,
        &md,
        rep.checksum_cpu_s_per_gb,
    )
}

#[derive(Serialize)]
struct RunRow<'a> {
    round: usize,
    #[serde(flatten)]
    r: &'a RunResult,
}

fn write_outputs(
    out: &Path,
    a: &Args,
    groups: &[Group],
    results: &[(usize, RunResult)],
    med: &BTreeMap<Key, Median>,
    md: &str,
    checksum_s_per_gb: f64,
) -> anyhow::Result<()> {
    let report = Report {
        checksum_cpu_s_per_gb: checksum_s_per_gb,
        tool: "spindle-bench naio",
        kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .unwrap_or_default()
            .trim()
            .to_string(),
        cpus: std::thread::available_parallelism().map_or(0, |n| n.get()),
        plan: a.plan,
        bytes: a.bytes,
        time_limit_s: a.time_limit,
        repeats: a.repeats,
        netns: a.netns,
        file: &a.file,
        groups,
        medians: med.values().collect(),
        runs: results
            .iter()
            .map(|(round, r)| RunRow { round: *round, r })
            .collect(),
    };
    let p = out.join("results.json");
    std::fs::write(&p, serde_json::to_string_pretty(&report)?)
        .with_context(|| format!("writing {}", p.display()))?;

    let mut csv = String::from(
        "round,recv,send,size,sockets,netns,bytes,secs,mbps,send_cpu_s,recv_cpu_s,send_iowq_s,recv_iowq_s,send_cpu_per_gb,recv_cpu_per_gb,other_cpu_s,ksoftirqd_cpu_s,capped,zc_sends,zc_notifs,zc_copied\n",
    );
    for (round, r) in results {
        let _ = writeln!(
            csv,
            "{round},{},{},{},{},{},{},{:.6},{:.3},{:.6},{:.6},{:.6},{:.6},{:.6},{:.6},{:.6},{:.6},{},{},{},{}",
            r.recv.name(),
            r.send.name(),
            r.size,
            r.sockets,
            r.netns,
            r.bytes,
            r.secs,
            r.mbps,
            r.send_cpu_s,
            r.recv_cpu_s,
            r.send_iowq_s,
            r.recv_iowq_s,
            r.send_cpu_per_gb,
            r.recv_cpu_per_gb,
            r.other_cpu_s,
            r.ksoftirqd_cpu_s,
            r.capped,
            r.zc_sends,
            r.zc_notifs,
            r.zc_copied
        );
    }
    let p = out.join("results.csv");
    std::fs::write(&p, csv).with_context(|| format!("writing {}", p.display()))?;
    let p = out.join("results.md");
    std::fs::write(&p, md).with_context(|| format!("writing {}", p.display()))?;

    if a.size.len() < 2 {
        return Ok(());
    }
    let path_tag = if a.netns { "-netns" } else { "" };
    for g in groups {
        for &n in &a.sockets {
            let line = |f: fn(&Median) -> f64| -> Vec<plot::Line> {
                g.pairings
                    .iter()
                    .map(|&(r, s)| plot::Line {
                        label: label(g, r, s),
                        points: a
                            .size
                            .iter()
                            .filter_map(|&z| med.get(&(r, s, z, n)).map(|m| (z, f(m))))
                            .collect(),
                    })
                    .collect()
            };
            let title = format!(
                "{}, {} socket{}{}",
                describe(g, a).replace('`', ""),
                n,
                if n == 1 { "" } else { "s" },
                if a.netns { ", veth" } else { "" }
            );
            let stem = format!("{}-{}sock{}", g.name, n, path_tag);
            plot::chart(
                &out.join(format!("{stem}-mbps.svg")),
                &format!("Throughput: {title}"),
                "MB/s (10^6 bytes/s), log scale",
                &line(|m| m.mbps),
                plot::Legend::UpperLeft,
            )?;
            plot::chart(
                &out.join(format!("{stem}-cpu-send.svg")),
                &format!("Sender CPU: {title}"),
                "sender CPU seconds per GB, log scale",
                &line(|m| m.send_cpu_per_gb),
                plot::Legend::UpperRight,
            )?;
            plot::chart(
                &out.join(format!("{stem}-cpu-recv.svg")),
                &format!("Receiver CPU: {title}"),
                "receiver CPU seconds per GB, log scale",
                &line(|m| m.recv_cpu_per_gb),
                plot::Legend::UpperRight,
            )?;
            plot::chart(
                &out.join(format!("{stem}-cpu-total.svg")),
                &format!("Sender + receiver CPU: {title}"),
                "CPU seconds per GB, log scale, both sides",
                &line(|m| m.total_cpu_per_gb),
                plot::Legend::UpperRight,
            )?;
        }
    }
    Ok(())
}
