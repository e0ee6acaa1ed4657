//! What the experiments share: flags, machine description, the load generator run,
//! CPU pinning, progress and medians.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{bail, Context, Result};
use serde::Serialize;
use serde_json::Value;

use crate::servers::{Server, ServerSetup};
use crate::sys;

pub const DEFAULT_SERVERS: &str = "spindle-io-uring,spindle-linux-sendfile,spindle-posix-aio,spindle-linux-aio-sendfile,nginx-sendfile,nginx-aio-threads,lighttpd";

/// The servers that can run (with their versions), and notes on those skipped.
pub type ServerList = (Vec<(Server, String)>, Vec<String>);

/// Flags every experiment takes.
#[derive(clap::Args, Debug, Clone)]
pub struct CommonArgs {
    /// Where reports go (JSON, Markdown, SVG).
    #[arg(long, default_value = "bench-results")]
    pub out: PathBuf,
    /// Where the data sets live (made by `mkfiles` if missing).
    #[arg(long, default_value = "/var/tmp/spindle-bench-data")]
    pub data: PathBuf,
    /// Servers to compare, comma-separated; `spindle-BACKEND@PATH` runs
    /// another build's `spindle` binary (a baseline in the same run).
    #[arg(long, value_delimiter = ',', default_value = DEFAULT_SERVERS)]
    pub servers: Vec<String>,
    /// Interleaved rounds (A B C, A B C, ...).
    #[arg(long, default_value_t = 3)]
    pub rounds: u32,
    /// Server the ratios are taken against (default: spindle-linux-sendfile if present, else the first).
    #[arg(long)]
    pub baseline: Option<String>,
    /// Server worker processes/threads (the same for every server).
    #[arg(long, default_value_t = 1)]
    pub workers: u32,
    /// Small scale, one round, a few seconds per server: a smoke test of the harness,
    /// whose report says so and gives no ratios.
    #[arg(long)]
    pub quick: bool,
}

impl CommonArgs {
    pub fn rounds(&self) -> u32 {
        if self.quick {
            1
        } else {
            self.rounds.clamp(1, 100)
        }
    }

    /// The servers that can run here, and notes for those skipped.
    pub fn servers(&self) -> Result<ServerList> {
        let mut ok = Vec::new();
        let mut notes = Vec::new();
        for name in &self.servers {
            let s = Server::parse(name.trim())?;
            match s.version() {
                Ok(v) => ok.push((s, v)),
                Err(why) => notes.push(format!("{} skipped: {why}", s.name())),
            }
        }
        if ok.is_empty() {
            bail!(
                "none of the requested servers can run here: {}",
                notes.join("; ")
            );
        }
        Ok((ok, notes))
    }

    pub fn baseline(&self, servers: &[(Server, String)]) -> String {
        if let Some(b) = &self.baseline {
            return b.clone();
        }
        if servers
            .iter()
            .any(|(s, _)| s.name() == "spindle-linux-sendfile")
        {
            return "spindle-linux-sendfile".into();
        }
        servers[0].0.name()
    }
}

/// CPUs for the server and for the load generator: different cores when there are 2+.
pub fn pinning(workers: u32) -> (Option<String>, Option<String>) {
    let n = sys::cpus();
    if n < 2 {
        return (None, None);
    }
    let server_cpus = (workers as usize).clamp(1, n - 1);
    let server = if server_cpus == 1 {
        "0".to_string()
    } else {
        format!("0-{}", server_cpus - 1)
    };
    (Some(server), Some((n - 1).to_string()))
}

pub fn setup(root: &Path, workers: u32) -> ServerSetup {
    ServerSetup {
        root: root.to_path_buf(),
        workers,
        cpus: pinning(workers).0,
        cgroup_procs: None,
        spindle_flags: Vec::new(),
        tls: None,
        http2: false,
        http3: false,
        access_log: None,
        compress: None,
    }
}

/// The machine a report was measured on.
#[derive(Debug, Clone, Serialize)]
pub struct Machine {
    pub cpu_model: String,
    pub cpus: usize,
    pub memory_gib: f64,
    pub kernel: String,
    pub data_device: String,
    pub disk_model: String,
    pub rotational: Option<bool>,
    pub cgroup_limit: Option<String>,
    pub load_average_start: String,
    pub load_average_end: String,
    /// TCP's congestion control and the default queueing discipline: with
    /// `bbr` over a qdisc other than `fq`, TCP paces every flow with its
    /// own timer, and on loopback the rate of one large download then
    /// follows the sender's timing more than its work (see [`tcp_setting`]).
    pub tcp: String,
    pub versions: BTreeMap<String, String>,
    pub date_utc: String,
}

impl Machine {
    pub fn probe(data: &Path) -> Machine {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cpu_model = cpuinfo
            .lines()
            .find(|l| l.starts_with("model name"))
            .and_then(|l| l.split_once(':'))
            .map(|(_, v)| v.trim().to_string())
            .unwrap_or_else(|| "unknown".into());
        let mem = sys::meminfo().get("MemTotal").copied().unwrap_or(0);
        let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .unwrap_or_default()
            .trim()
            .to_string();
        let dev = sys::block_device_of(data).unwrap_or_else(|| "unknown".into());
        let model = std::fs::read_to_string(format!("/sys/block/{dev}/device/model"))
            .map(|s| s.trim().to_string())
            .ok()
            .filter(|s| !s.is_empty())
            .or_else(|| {
                let out = Command::new("lsblk")
                    .args(["-dno", "MODEL", &format!("/dev/{dev}")])
                    .output()
                    .ok()?;
                let s = String::from_utf8_lossy(&out.stdout).trim().to_string();
                (!s.is_empty()).then_some(s)
            })
            .unwrap_or_else(|| {
                if dev.starts_with("vd") {
                    "virtio block device (no model reported)".into()
                } else {
                    "unknown (no model reported)".into()
                }
            });
        let rotational = std::fs::read_to_string(format!("/sys/block/{dev}/queue/rotational"))
            .ok()
            .map(|s| s.trim() == "1");
        let mut versions = BTreeMap::new();
        versions.insert("kernel".into(), kernel.clone());
        for (name, args) in [("fio", vec!["--version"])] {
            if let Some(p) = crate::servers::which(name) {
                if let Ok(o) = Command::new(p).args(&args).output() {
                    versions.insert(
                        name.into(),
                        String::from_utf8_lossy(&o.stdout).trim().to_string(),
                    );
                }
            }
        }
        Machine {
            cpu_model,
            cpus: sys::cpus(),
            memory_gib: mem as f64 / 1024.0 / 1024.0,
            kernel,
            data_device: dev,
            disk_model: model,
            rotational,
            cgroup_limit: None,
            load_average_start: loadavg(),
            load_average_end: String::new(),
            tcp: tcp_setting(),
            versions,
            date_utc: utc_now(),
        }
    }

    pub fn finish(&mut self) {
        self.load_average_end = loadavg();
    }
}

/// The machine's TCP congestion control and default qdisc, as the report
/// shows them: "bbr over pfifo_fast (TCP paces each flow itself)". Large
/// downloads over loopback depend on them: a cached 700 MB file, one
/// client, spindle and lighttpd made 6,360 and 7,900 MB/s under `bbr` and
/// 9,110 and 9,715 under `cubic` (issue 25 notes).
pub fn tcp_setting() -> String {
    let read = |p: &str| {
        std::fs::read_to_string(p)
            .map(|s| s.trim().to_string())
            .unwrap_or_else(|_| "unknown".into())
    };
    let cc = read("/proc/sys/net/ipv4/tcp_congestion_control");
    let qdisc = read("/proc/sys/net/core/default_qdisc");
    // BBR needs pacing; without fq to do it, TCP runs its own pacing timer.
    let paced = cc == "bbr" && qdisc != "fq";
    format!(
        "{cc} over {qdisc}{}",
        if paced {
            " (TCP paces each flow itself)"
        } else {
            ""
        }
    )
}

pub fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

fn utc_now() -> String {
    let out = Command::new("date")
        .args(["-u", "+%Y-%m-%d %H:%M:%S UTC"])
        .output();
    out.map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default()
}

/// How a load run ends.
#[derive(Debug, Clone, Copy)]
pub enum End {
    Fetches(u64),
    Seconds(f64),
}

/// One run of the load generator.
#[derive(Debug, Clone)]
pub struct Load {
    pub urls: PathBuf,
    pub parallel: u64,
    /// Open loop instead: start this many fetches a second (`-rate`;
    /// latency counts from each fetch's intended start).
    pub rate: Option<u64>,
    pub end: End,
    pub keepalive: bool,
    pub idle: u64,
    pub timeout_secs: u64,
    /// HTTPS: the CA to trust, and whether sessions are resumed.
    pub tls: Option<LoadTls>,
}

/// How the load generator speaks HTTPS.
#[derive(Debug, Clone)]
pub struct LoadTls {
    pub ca: PathBuf,
    /// Resume TLS sessions (tickets); `false`: a full handshake per connection.
    pub resume: bool,
}

/// Writes a URL file for `paths` (relative to the server root) on `port`.
pub fn write_urls(file: &Path, port: u16, paths: &[String]) -> Result<()> {
    write_urls_scheme(file, "http", port, paths)
}

/// [`write_urls`] with the scheme (`http` or `https`).
pub fn write_urls_scheme(file: &Path, scheme: &str, port: u16, paths: &[String]) -> Result<()> {
    let mut s = String::with_capacity(paths.len() * 40);
    for p in paths {
        s.push_str(&format!("{scheme}://127.0.0.1:{port}/{p}\n"));
    }
    std::fs::write(file, s).with_context(|| format!("writing {}", file.display()))
}

/// Runs the load generator (this binary's `__load`, pinned away from the server) and
/// returns its JSON summary.
pub fn run_load(load: &Load, workdir: &Path, tag: &str) -> Result<Value> {
    let exe = std::env::current_exe()?;
    let json = workdir.join(format!("load-{tag}.json"));
    let _ = std::fs::remove_file(&json);
    let mut argv: Vec<String> = Vec::new();
    if let Some(cpu) = pinning(1).1 {
        if crate::servers::which("taskset").is_some() {
            argv.extend(["taskset".into(), "-c".into(), cpu]);
        }
    }
    argv.push(exe.display().to_string());
    argv.push("__load".into());
    match load.rate {
        Some(r) => argv.extend(["-rate".into(), r.to_string()]),
        None => argv.extend(["-parallel".into(), load.parallel.to_string()]),
    }
    match load.end {
        End::Fetches(n) => argv.extend(["-fetches".into(), n.to_string()]),
        End::Seconds(s) => argv.extend(["-seconds".into(), format!("{s}")]),
    }
    argv.extend(["-timeout".into(), load.timeout_secs.to_string()]);
    if load.keepalive {
        argv.push("--keepalive".into());
    }
    if load.idle > 0 {
        argv.extend(["--idle".into(), load.idle.to_string()]);
    }
    if let Some(t) = &load.tls {
        argv.extend(["--cacert".into(), t.ca.display().to_string()]);
        if !t.resume {
            argv.push("--no-resume".into());
        }
    }
    argv.extend([
        "--no-progress".into(),
        "--json".into(),
        json.display().to_string(),
        load.urls.display().to_string(),
    ]);
    let out = Command::new(&argv[0])
        .args(&argv[1..])
        .stdin(Stdio::null())
        .output()
        .context("running the load generator")?;
    let _ = std::fs::write(workdir.join(format!("load-{tag}.stderr")), &out.stderr);
    if !out.status.success() {
        bail!(
            "load generator failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    let text =
        std::fs::read_to_string(&json).with_context(|| format!("reading {}", json.display()))?;
    serde_json::from_str(&text).context("parsing the load generator's JSON")
}

/// The load generator's numbers, as a flat sample.
pub fn load_metrics(v: &Value) -> BTreeMap<String, f64> {
    let mut m = BTreeMap::new();
    let f = |p: &str| v.pointer(p).and_then(Value::as_f64);
    let mut put = |k: &str, x: Option<f64>| {
        if let Some(x) = x {
            m.insert(k.to_string(), x);
        }
    };
    put("fetches", f("/fetches"));
    put("seconds", f("/seconds"));
    put("fetches_per_sec", f("/fetches_per_sec"));
    put("mb_per_sec", f("/bytes_per_sec").map(|b| b / 1e6));
    put("connect_ms_mean", f("/connect_ms/mean"));
    put("connect_ms_max", f("/connect_ms/max"));
    put("first_ms_mean", f("/first_response_ms/mean"));
    put("first_ms_max", f("/first_response_ms/max"));
    put("fetch_ms_p50", f("/fetch_ms/p50"));
    put("fetch_ms_p99", f("/fetch_ms/p99"));
    put("fetch_ms_max", f("/fetch_ms/max"));
    // A 206 answers a range the URL list asked for (`#bytes=`).
    let ok = f("/codes/200").unwrap_or(0.0) + f("/codes/206").unwrap_or(0.0);
    let all = f("/fetches").unwrap_or(0.0);
    put("non_200", Some(all - ok));
    if let Some(secs) = f("/seconds").filter(|s| *s > 0.0) {
        put("ok_fetches_per_sec", Some(ok / secs));
    }
    // Waves: fetches per slot of concurrency, the length rule's second
    // measure (report::MIN_WAVES).
    if let Some(p) = f("/config/parallel").filter(|p| *p > 0.0) {
        put("parallel", Some(p));
        put("waves", Some(all / p));
    }
    put("errors", f("/errors"));
    put("tls_full", f("/tls/full"));
    put("tls_resumed", f("/tls/resumed"));
    put("timeouts", f("/timeouts"));
    put("idle_held_at_end", f("/idle/held_at_end"));
    // The client's own CPU during the run: with one load thread, a busy
    // share near 1 means the step measured the client, not the server.
    if let (Some(u), Some(s)) = (f("/client_cpu/user_secs"), f("/client_cpu/system_secs")) {
        put("client_cpu_s", Some(u + s));
        if let Some(secs) = f("/seconds").filter(|x| *x > 0.0) {
            put("client_busy", Some((u + s) / secs));
        }
        if all > 0.0 {
            put("client_cpu_s_per_10k", Some((u + s) / all * 10_000.0));
        }
    }
    m
}

/// Median, min and max of the values of `key` over samples.
pub fn stats(samples: &[BTreeMap<String, f64>], key: &str) -> Option<(f64, f64, f64)> {
    summary(samples.iter().filter_map(|s| s.get(key).copied()).collect())
}

/// Median, min and max of `v`.
pub fn summary(mut v: Vec<f64>) -> Option<(f64, f64, f64)> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    let med = if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    };
    Some((med, v[0], v[n - 1]))
}

/// A progress bar on a terminal; plain lines otherwise.
pub struct Progress {
    bar: indicatif::ProgressBar,
}

impl Progress {
    pub fn new(total: u64, what: &str) -> Progress {
        let bar = indicatif::ProgressBar::new(total);
        bar.set_style(
            indicatif::ProgressStyle::with_template(
                "{prefix} [{elapsed_precise}] {bar:30} {pos}/{len} {msg}",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        bar.set_prefix(what.to_string());
        Progress { bar }
    }
    pub fn start(&self, msg: String) {
        self.bar.set_message(msg);
    }
    pub fn done(&self, line: String) {
        self.bar.suspend(|| eprintln!("{line}"));
        self.bar.inc(1);
    }
    pub fn finish(&self) {
        self.bar.finish_and_clear();
    }
}

/// A per-run scratch directory under the output directory.
pub fn workdir(out: &Path, name: &str) -> Result<PathBuf> {
    let d = out.join(format!(".work-{name}"));
    std::fs::create_dir_all(&d).with_context(|| format!("creating {}", d.display()))?;
    Ok(d)
}

/// `items` starting at `round % len`: each round a different contender goes
/// first, so that none always meets the disk (or the machine) right after the
/// same other one.
pub fn rotated<T>(items: &[T], round: usize) -> impl Iterator<Item = &T> {
    let k = if items.is_empty() {
        0
    } else {
        round % items.len()
    };
    items[k..].iter().chain(items[..k].iter())
}

#[cfg(test)]
mod tests {
    use super::{rotated, tcp_setting, Machine};
    use crate::report::Report;

    /// The report names the machine's congestion control and qdisc, as the
    /// kernel has them now.
    #[test]
    fn report_names_tcp_congestion_control() {
        let cc = std::fs::read_to_string("/proc/sys/net/ipv4/tcp_congestion_control")
            .expect("a Linux machine")
            .trim()
            .to_string();
        let qdisc = std::fs::read_to_string("/proc/sys/net/core/default_qdisc")
            .expect("a Linux machine")
            .trim()
            .to_string();
        let tcp = tcp_setting();
        assert!(tcp.starts_with(&format!("{cc} over {qdisc}")), "{tcp}");
        assert_eq!(
            tcp.ends_with("(TCP paces each flow itself)"),
            cc == "bbr" && qdisc != "fq"
        );
        let r = Report::new(
            "t",
            "t",
            Machine::probe(std::path::Path::new("/")),
            serde_json::json!({}),
        );
        let md = r.markdown(&[crate::report::col("x", "x", 0)], true);
        assert!(
            md.contains(&format!("| TCP congestion control | {tcp} |")),
            "{md}"
        );
    }

    #[test]
    fn rotation_starts_one_later_each_round() {
        let v = [1, 2, 3];
        let got: Vec<Vec<i32>> = (0..4).map(|r| rotated(&v, r).copied().collect()).collect();
        assert_eq!(got, [[1, 2, 3], [2, 3, 1], [3, 1, 2], [1, 2, 3]]);
        assert_eq!(rotated::<i32>(&[], 5).count(), 0);
    }
}
