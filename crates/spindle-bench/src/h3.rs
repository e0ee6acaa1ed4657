//! `h3`: the 700 MB file, cached, over one HTTP/3 connection, against
//! Caddy 2.6 over HTTP/3 and spindle's own HTTP/2 (the first part of the
//! HTTP/3 issue's speed goals: MB/s at least Caddy's at no more server CPU
//! per GB, and at least 0.6× spindle's HTTP/2 on the same file).
//!
//! Every row is one server (one worker, pinned to one CPU) and one client
//! process per download (pinned to the other CPU): `gtlsclient`
//! (ngtcp2-client) for HTTP/3, `h2load -c 1 -m 1 -n 1` for HTTP/2. MB/s is
//! the body bytes over the clients' wall time; the server's CPU (all its
//! threads, /proc) and the client's (wait4's rusage) are both reported per
//! GB, so a reader sees which side was saturated. Each download is checked
//! whole twice over: by the client (a clean exit, nothing on standard
//! error; h2load's 2xx count and DATA bytes) and by the server's access log
//! (a 200 carrying the file's full length). Before the rounds, one
//! download per HTTP/3 row goes to a memory directory and is compared byte
//! for byte; after them, one counted download per HTTP/3 row under
//! `perf stat` gives the server's system calls per MB.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde_json::json;

use crate::cold::DiskProbe;
use crate::common::{self, CommonArgs, Machine, Progress};
use crate::data::{self, SetKind};
use crate::report::{col, Column, Report};
use crate::servers::{which, Running, Server};
use crate::sys;

/// The servers when `--servers` is not given.
pub const H3_SERVERS: &str = "spindle-io-uring,caddy";

/// Downloads of the file in one run, one after another, each its own
/// client process and connection: at the 700 MB, one download
/// lasts about a second or more over HTTP/3 on loopback, and three keep a
/// sample above the report's 1 s floor.
const FETCHES: u64 = 3;

/// Longest one client may run before `timeout` ends it.
const CLIENT_LIMIT_SECS: &str = "300";

/// gtlsclient's idle timeout: a connection whose server went silent ends
/// after this (and its download counts as not complete).
const IDLE_TIMEOUT: &str = "30s";

/// The system calls counted for the server during one download.
/// spindle sends with `sendmsg` (GSO) and receives with `recvmsg`;
/// Caddy 2.6.2's quic-go, seen with strace, with `sendto` and `recvfrom`,
/// one datagram a call.
const SYSCALLS: [(&str, &str); 8] = [
    ("syscalls:sys_enter_sendmsg", "sendmsg"),
    ("syscalls:sys_enter_sendto", "sendto"),
    ("syscalls:sys_enter_sendmmsg", "sendmmsg"),
    ("syscalls:sys_enter_recvmsg", "recvmsg"),
    ("syscalls:sys_enter_recvfrom", "recvfrom"),
    ("syscalls:sys_enter_recvmmsg", "recvmmsg"),
    ("syscalls:sys_enter_io_uring_enter", "io_uring_enter"),
    ("raw_syscalls:sys_enter", "all"),
];

#[derive(clap::Args, Debug, Clone)]
pub struct H3Args {
    #[command(flatten)]
    pub common: CommonArgs,
    /// Scale of the 700 MB file (default 1; 0.004, a 2.8 MB file, with --quick).
    #[arg(long)]
    pub scale: Option<f64>,
    /// Downloads of the file per run, one after another, each over its own connection.
    #[arg(long, default_value_t = FETCHES)]
    pub fetches: u64,
    /// Skip the count of the servers' system calls (perf stat) after the rounds.
    #[arg(long)]
    pub no_syscalls: bool,
    /// An extra flag for every spindle server (repeatable), for A/B runs.
    #[arg(long = "spindle-flag", allow_hyphen_values = true)]
    pub spindle_flags: Vec<String>,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Proto {
    H3,
    H2,
}

impl Proto {
    fn name(self) -> &'static str {
        match self {
            Proto::H3 => "HTTP/3",
            Proto::H2 => "HTTP/2",
        }
    }
}

const COLUMNS: [Column; 7] = [
    col("mb_per_sec", "MB/s", 1),
    col("server_cpu_s_per_gb", "server CPU s/GB", 3),
    col("client_cpu_s_per_gb", "client CPU s/GB", 3),
    col("server_busy", "server CPU share", 2),
    col("client_busy", "client CPU share", 2),
    col("fetches", "downloads", 0),
    col("non_complete", "non-complete", 0),
];

pub fn run(a: H3Args) -> Result<()> {
    let c = &a.common;
    let scale = a.scale.unwrap_or(if c.quick { 0.004 } else { 1.0 });
    data::validate_scale(scale)?;
    let fetches = if c.quick {
        a.fetches.clamp(1, 2)
    } else {
        a.fetches.max(1)
    };
    if which("gtlsclient").is_none() {
        bail!("gtlsclient is not installed (apt-get install ngtcp2-client)");
    }
    let (mut servers, mut notes) = c.servers()?;
    crate::tls::https_only(&mut servers, &mut notes)?;
    crate::h2load::h2_only(&mut servers, &mut notes)?;
    servers.retain(|(s, _)| {
        let ok = matches!(s, Server::Spindle(_) | Server::Caddy);
        if !ok {
            notes.push(format!(
                "{} skipped: only spindle and Caddy are compared over HTTP/3 here",
                s.name()
            ));
        }
        ok
    });
    if servers.is_empty() {
        bail!("none of the servers serves HTTP/3 here (spindle io-uring or posix-aio, caddy)");
    }
    let have_h2load = which("h2load").is_some();
    let mut contenders: Vec<(String, Server, Proto)> = Vec::new();
    for (s, _) in &servers {
        contenders.push((row_name(s, Proto::H3), s.clone(), Proto::H3));
    }
    for (s, _) in &servers {
        if matches!(s, Server::Spindle(_)) {
            if have_h2load {
                contenders.push((row_name(s, Proto::H2), s.clone(), Proto::H2));
            } else {
                notes.push(format!(
                    "{} HTTP/2 skipped: h2load is not installed (apt-get install nghttp2-client)",
                    s.name()
                ));
            }
        }
    }
    let huge = data::ensure(&c.data, SetKind::Huge, scale, true)?;
    let file = huge.files[0].clone();
    let mut machine = Machine::probe(&huge.dir);
    for (s, v) in &servers {
        machine.versions.insert(s.name(), v.clone());
    }
    for (name, v) in client_versions() {
        machine.versions.insert(name, v);
    }
    let mb = huge.file_size as f64 / 1e6;
    let mut report = Report::new(
        "h3",
        "one large file over HTTP/3: the 700 MB file, cached, over one connection",
        machine,
        json!({"huge_bytes": huge.file_size, "workers": c.workers, "rounds": c.rounds(),
               "scale": scale, "fetches_per_run": fetches,
               "gtlsclient": ["--quiet", "--exit-on-all-streams-close", format!("--timeout={IDLE_TIMEOUT}")],
               "h2load": ["-c", "1", "-m", "1", "-t", "1", "-n", "1"]}),
    );
    report.primary = "mb_per_sec".into();
    report.notes = notes;
    report.vs_best_peer = true;
    if c.quick {
        report.smoke_test(&format!("--quick serves a {mb:.1} MB stand-in for the 700 MB file (2.9 MB unless --scale says otherwise), at most two downloads a run: a run lasts well under a second, much of it the clients' start and handshakes, so the rows measure nothing the full run compares."));
    }
    report.baseline = contenders
        .iter()
        .find(|(_, s, p)| *p == Proto::H2 && s.spindle_backend() == Some("io-uring"))
        .or(contenders.iter().find(|(_, _, p)| *p == Proto::H2))
        .or(contenders.first())
        .map(|(l, _, _)| l.clone())
        .unwrap_or_default();
    if let Some(b) = &c.baseline {
        report.baseline = b.clone();
    }
    let work = common::workdir(&c.out, "h3")?;
    let tls = crate::tls::make(&work.join("tls"))?;
    let (server_cpu, client_cpu) = common::pinning(c.workers);
    report.notes.push(format!(
        "every server with one certificate (ECDSA P-256, made for the run), {} worker(s), pinned to CPU {}: spindle `--workers {w} --tls-listen 127.0.0.1:PORT --tls-cert --tls-key` with `--http3` on its HTTP/3 rows (QUIC on the same port over UDP) and without on its HTTP/2 rows; Caddy with GOMAXPROCS={w}, the Caddyfile's `servers {{ protocols h1 h2 h3 }}` and a site `https://localhost:PORT, https://127.0.0.1:PORT` with `tls CERT KEY`, `root` and `file_server` (HTTP/3 on the same port over UDP)",
        c.workers,
        server_cpu.as_deref().unwrap_or("(none: one CPU)"),
        w = c.workers.max(1),
    ));
    report.notes.push(format!(
        "clients, one process per download, pinned to CPU {}: HTTP/3 `gtlsclient --quiet --exit-on-all-streams-close --timeout={IDLE_TIMEOUT} 127.0.0.1 PORT https://localhost:PORT/{file}` (Debian ngtcp2-client: ngtcp2, nghttp3, GnuTLS; cubic, flow-control windows auto-tuned up to its defaults of 24 MiB for the connection and 16 MiB for the stream; without --download it keeps no body); HTTP/2 `h2load -c 1 -m 1 -t 1 -n 1` (one connection, one stream, windows 2^30-1)",
        client_cpu.as_deref().unwrap_or("(none: one CPU)")
    ));
    report.notes.push(format!(
        "the file ({mb:.1} MB) is read once by the harness before each round, so every run serves it from the page cache; each run starts its server afresh and downloads the file {fetches} time(s) one after another. MB/s: body bytes over the clients' wall time (from the first client's start to the last one's exit: each download's process start and handshake included); server CPU s/GB: utime+stime of the server's process group (/proc/PID/stat, all threads) over the run, per GB of body; client CPU s/GB: the client processes' own user+system time (wait4's rusage of `timeout taskset CLIENT`, the two wrappers included), per GB; CPU share: CPU seconds over wall seconds, 1.00 being one core busy for the whole run: near 1.00 on the client's side, the row measured the client"
    ));
    report.notes.push("non-complete: downloads that the client did not end cleanly (gtlsclient: a non-zero exit or anything on its standard error, such as `ERR_IDLE_CLOSE` after a server went silent, which it otherwise exits 0 after; h2load: no 2xx or fewer DATA bytes than the file) or that the server's access log (spindle `--access-log`, Caddy `log { output file }`; one line per download) does not show as a 200 of the file's full length; the larger of the two counts".to_string());
    let ctx = Ctx {
        root: &huge.dir,
        file: &file,
        size: huge.file_size,
        fetches,
        workers: c.workers,
        flags: &a.spindle_flags,
        tls: &tls,
        work: &work,
        client_cpu: client_cpu.clone(),
    };
    let group = format!("700 MB file ({mb:.0} MB), cached, one connection per download");
    sys::read_whole(&huge.dir.join(&file))?;
    // Byte for byte, once per HTTP/3 row, before the measured rounds.
    let mut verified = Vec::new();
    for (label, s, p) in &contenders {
        if *p != Proto::H3 {
            continue;
        }
        match ctx.verify(s) {
            Ok(()) => verified.push(label.clone()),
            Err(e) => report.add(&group, label, Err(e.context("the byte-for-byte check"))),
        }
    }
    if !verified.is_empty() {
        report.notes.push(format!(
            "before the rounds, one download per HTTP/3 row went to a memory directory (gtlsclient --download) and was compared with the file byte for byte: {} matched",
            verified.join(", ")
        ));
    }
    let progress = Progress::new(contenders.len() as u64 * u64::from(c.rounds()), "h3 large");
    let mut problems: Vec<String> = Vec::new();
    for round in 0..c.rounds() as usize {
        sys::read_whole(&huge.dir.join(&file))?;
        for (label, s, p) in common::rotated(&contenders, round) {
            progress.start(format!("round {} {label}", round + 1));
            let tag = format!("r{}-{}", round + 1, label.replace(['/', ' '], "_"));
            let res = ctx.run(s, *p, &tag).map(|(mut m, why)| {
                m.insert("round".into(), (round + 1) as f64);
                problems.extend(why.into_iter().map(|w| format!("{label}: {w}")));
                m
            });
            progress.done(match &res {
                Ok(m) => format!(
                    "round {} {label:<28} {:>8.1} MB/s  server {:.3} s/GB  client {:.3} s/GB  non-complete {}",
                    round + 1,
                    m.get("mb_per_sec").unwrap_or(&0.0),
                    m.get("server_cpu_s_per_gb").unwrap_or(&f64::NAN),
                    m.get("client_cpu_s_per_gb").unwrap_or(&f64::NAN),
                    m.get("non_complete").unwrap_or(&0.0)
                ),
                Err(e) => format!("round {} {label}: {e:#}", round + 1),
            });
            report.add(&group, label, res);
        }
    }
    progress.finish();
    if !problems.is_empty() {
        report.extra_md.push(format!(
            "## Downloads not complete\n\n{}\n",
            problems
                .iter()
                .map(|p| format!("- {p}\n"))
                .collect::<String>()
        ));
    }
    if !report.smoke_test {
        report.extra_md.push(goals(&report, &group, &contenders));
    }
    // System calls per MB, one download per HTTP/3 row.
    if a.no_syscalls {
        report
            .notes
            .push("system calls not counted (--no-syscalls)".into());
    } else if which("perf").is_none() {
        report
            .notes
            .push("system calls not counted: perf is not installed (Debian linux-perf)".into());
    } else {
        let mut rows = Vec::new();
        for (label, s, p) in &contenders {
            if *p != Proto::H3 {
                continue;
            }
            eprintln!("counting {label}'s system calls (perf stat)");
            match sys::read_whole(&huge.dir.join(&file)).and_then(|_| ctx.syscalls(s)) {
                Ok(m) => rows.push((label.clone(), m)),
                Err(e) => report
                    .notes
                    .push(format!("{label}: system calls not counted: {e:#}")),
            }
        }
        if !rows.is_empty() {
            report.extra_md.push(syscalls_md(&rows, mb));
            report.extra.insert(
                "syscalls_per_download".into(),
                json!(rows.iter().cloned().collect::<BTreeMap<_, _>>()),
            );
        }
    }
    report.machine.finish();
    for f in report.write(&c.out, "h3", &COLUMNS, "MB/s")? {
        eprintln!("wrote {}", f.display());
    }
    Ok(())
}

/// A row's name: the server and the protocol.
fn row_name(s: &Server, p: Proto) -> String {
    format!("{} {}", s.name(), p.name())
}

/// The versions of the clients and of perf, for the machine table.
fn client_versions() -> Vec<(String, String)> {
    let mut v = Vec::new();
    let first_line = |prog: &str, args: &[&str]| -> Option<String> {
        let o = Command::new(prog).args(args).output().ok()?;
        let text = String::from_utf8_lossy(&o.stdout).into_owned();
        let line = text.lines().next()?.trim().to_string();
        (!line.is_empty()).then_some(line)
    };
    // gtlsclient has no --version: the package's.
    if let Some(x) = first_line("dpkg-query", &["-W", "-f=${Version}", "ngtcp2-client"]) {
        v.push(("gtlsclient".into(), format!("ngtcp2-client {x}")));
    }
    if let Some(x) = first_line("h2load", &["--version"]) {
        v.push(("h2load".into(), x));
    }
    if let Some(x) = first_line("perf", &["--version"]) {
        v.push(("perf".into(), x));
    }
    v
}

/// What every run of the experiment shares.
struct Ctx<'a> {
    root: &'a Path,
    file: &'a str,
    size: u64,
    fetches: u64,
    workers: u32,
    flags: &'a [String],
    tls: &'a crate::tls::TlsFiles,
    work: &'a Path,
    client_cpu: Option<String>,
}

/// One client process's end: its wall time, its CPU (user + system, its
/// children's included) and whether it ended cleanly (`problem`: why not).
struct ClientRun {
    wall: f64,
    cpu: f64,
    problem: Option<String>,
}

impl Ctx<'_> {
    fn start(&self, server: &Server, proto: Proto, log: Option<&Path>) -> Result<Running> {
        let mut setup = common::setup(self.root, self.workers);
        if matches!(server, Server::Spindle(_)) {
            setup.spindle_flags = self.flags.to_vec();
        }
        setup.tls = Some(self.tls.clone());
        setup.http2 = true;
        setup.http3 = proto == Proto::H3;
        setup.access_log = log.map(Path::to_path_buf);
        Running::start(server, &setup)
    }

    /// gtlsclient's command line for one download of the file.
    fn gtlsclient(&self, port: u16, download: Option<&Path>) -> Vec<String> {
        let mut a = vec![
            "gtlsclient".to_string(),
            "--quiet".into(),
            "--exit-on-all-streams-close".into(),
            format!("--timeout={IDLE_TIMEOUT}"),
        ];
        if let Some(d) = download {
            a.push(format!("--download={}", d.display()));
        }
        a.extend([
            "127.0.0.1".into(),
            port.to_string(),
            format!("https://localhost:{port}/{}", self.file),
        ]);
        a
    }

    /// One download by the protocol's client, pinned to the client's CPU.
    fn fetch(&self, proto: Proto, port: u16, tag: &str) -> Result<ClientRun> {
        let out = self.work.join(format!("client-{tag}.out"));
        let argv = match proto {
            Proto::H3 => self.gtlsclient(port, None),
            Proto::H2 => {
                let urls = self.work.join("urls");
                common::write_urls_scheme(&urls, "https", port, &[self.file.to_string()])?;
                let mut a: Vec<String> = ["h2load", "-c", "1", "-m", "1", "-t", "1", "-n", "1"]
                    .map(String::from)
                    .to_vec();
                a.extend(["-i".into(), urls.display().to_string()]);
                a
            }
        };
        let mut run = run_client(&argv, self.client_cpu.as_deref(), &out)?;
        if run.problem.is_none() && proto == Proto::H2 {
            let text = std::fs::read_to_string(&out).unwrap_or_default();
            run.problem = h2load_problem(&text, self.size);
        }
        Ok(run)
    }

    /// One sample: the server started, [`Ctx::fetches`] downloads one
    /// after another, measured; and why downloads were not complete.
    fn run(
        &self,
        server: &Server,
        proto: Proto,
        tag: &str,
    ) -> Result<(BTreeMap<String, f64>, Vec<String>)> {
        let log = self.work.join(format!("access-{tag}.log"));
        let _ = std::fs::remove_file(&log);
        let mut running = self.start(server, proto, Some(&log))?;
        let mut problems = Vec::new();
        let mut clean = 0u64;
        let r = crate::cold::measured(&running, &DiskProbe::Real(None), || {
            let (mut wall, mut cpu) = (0.0, 0.0);
            let t0 = Instant::now();
            for i in 0..self.fetches {
                let c = self.fetch(proto, running.port, &format!("{tag}-{i}"))?;
                wall += c.wall;
                cpu += c.cpu;
                match c.problem {
                    None => clean += 1,
                    Some(p) => problems.push(format!("download {}: {p}", i + 1)),
                }
            }
            let secs = t0.elapsed().as_secs_f64();
            let mut m = BTreeMap::new();
            m.insert("seconds".into(), secs);
            m.insert("client_wall_s".into(), wall);
            m.insert("client_cpu_s".into(), cpu);
            Ok(m)
        });
        // Stopped first: the log is whole once the server has exited.
        running.stop()?;
        std::thread::sleep(Duration::from_millis(100));
        let logged = std::fs::read_to_string(&log)
            .map(|t| full_entries(&t, self.file, self.size))
            .unwrap_or(0);
        if logged < self.fetches {
            problems.push(format!(
                "the access log shows {logged} of {} downloads as a 200 of {} bytes",
                self.fetches, self.size
            ));
        }
        let mut m = r?;
        let n = self.fetches as f64;
        let bytes = self.size as f64 * n;
        let secs = m["seconds"];
        let cpu = m["client_cpu_s"];
        m.insert("fetches".into(), n);
        m.insert("mb_per_sec".into(), bytes / 1e6 / secs.max(1e-9));
        m.insert("client_cpu_s_per_gb".into(), cpu / (bytes / 1e9));
        m.insert("client_busy".into(), cpu / secs.max(1e-9));
        if let Some(s) = m.get("server_cpu_s").copied() {
            m.insert("server_busy".into(), s / secs.max(1e-9));
        }
        m.insert(
            "non_complete".into(),
            (self.fetches - clean.min(logged)) as f64,
        );
        Ok((crate::large::with_cpu_per_gb_of(m, bytes), problems))
    }

    /// One HTTP/3 download into a memory directory, compared with the
    /// file byte for byte.
    fn verify(&self, server: &Server) -> Result<()> {
        let base = if Path::new("/dev/shm").is_dir() {
            PathBuf::from("/dev/shm")
        } else {
            std::env::temp_dir()
        };
        let dir = base.join(format!("spindle-bench-h3-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let mut running = self.start(server, Proto::H3, None)?;
        let argv = self.gtlsclient(running.port, Some(&dir));
        let r = run_client(
            &argv,
            self.client_cpu.as_deref(),
            &self.work.join("verify.out"),
        );
        running.stop()?;
        let got = dir.join(self.file);
        let res = r.and_then(|c| match c.problem {
            Some(p) => bail!("{p}"),
            None => same_bytes(&got, &self.root.join(self.file)),
        });
        let _ = std::fs::remove_dir_all(&dir);
        res
    }

    /// The server's system calls during one HTTP/3 download (perf stat
    /// on its processes, attached after one download that is not counted).
    fn syscalls(&self, server: &Server) -> Result<BTreeMap<String, f64>> {
        let mut running = self.start(server, Proto::H3, None)?;
        let r = (|| {
            // One download first: every thread the server makes for it is there.
            let warm = self.fetch(Proto::H3, running.port, "syscalls-warm")?;
            if let Some(p) = warm.problem {
                bail!("the download before the count: {p}");
            }
            let pids: Vec<String> = sys::group_pids(running.pgid)
                .iter()
                .map(u32::to_string)
                .collect();
            let out = self.work.join("perf-stat.csv");
            let _ = std::fs::remove_file(&out);
            let events: Vec<&str> = SYSCALLS.iter().map(|(e, _)| *e).collect();
            let mut perf = Command::new("perf")
                .args(["stat", "-x", ",", "-o"])
                .arg(&out)
                .args(["-e", &events.join(","), "-p", &pids.join(",")])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .context("running perf")?;
            std::thread::sleep(Duration::from_millis(500));
            if let Some(st) = perf.try_wait()? {
                let mut e = String::new();
                if let Some(mut s) = perf.stderr.take() {
                    let _ = s.read_to_string(&mut e);
                }
                bail!("perf stat exited at once ({st}): {}", e.trim());
            }
            let c = self.fetch(Proto::H3, running.port, "syscalls");
            // SAFETY: signalling our own child, which has not been waited for.
            unsafe { libc::kill(perf.id() as i32, libc::SIGINT) };
            let st = perf.wait()?;
            let c = c?;
            if let Some(p) = c.problem {
                bail!("the counted download: {p}");
            }
            let text = std::fs::read_to_string(&out)
                .with_context(|| format!("perf stat ({st}) wrote no {}", out.display()))?;
            let mut m = parse_perf_stat(&text);
            if m.is_empty() {
                bail!("perf stat counted nothing: {}", text.trim());
            }
            m.insert("mb_per_sec".into(), self.size as f64 / 1e6 / c.wall);
            Ok(m)
        })();
        running.stop()?;
        r
    }
}

/// Runs a client (`timeout`, then `taskset -c CPU`, then `argv`), its
/// standard output to `out` and its standard error to `out`.err; its wall
/// time and CPU from wait4.
fn run_client(argv: &[String], cpu: Option<&str>, out: &Path) -> Result<ClientRun> {
    let err_path = out.with_extension("err");
    let mut cmd = Command::new("timeout");
    cmd.args(["--kill-after=5", CLIENT_LIMIT_SECS]);
    if let Some(c) = cpu {
        if which("taskset").is_some() {
            cmd.args(["taskset", "-c", c]);
        }
    }
    cmd.args(argv)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(out)?)
        .stderr(std::fs::File::create(&err_path)?);
    let t0 = Instant::now();
    let child = cmd
        .spawn()
        .with_context(|| format!("starting {}", argv[0]))?;
    let (status, ru) = wait4(child.id())?;
    let wall = t0.elapsed().as_secs_f64();
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    let cpu = secs(ru.ru_utime) + secs(ru.ru_stime);
    let stderr = std::fs::read_to_string(&err_path).unwrap_or_default();
    let exited_ok = libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0;
    let problem = if !exited_ok {
        Some(format!(
            "{} ended with {}: {}",
            argv[0],
            describe_status(status),
            first_line(&stderr)
        ))
    } else if argv[0] == "gtlsclient" && !stderr.trim().is_empty() {
        // --quiet prints nothing on a clean download; an idle close
        // after the server went silent exits 0 with a line here.
        Some(format!("gtlsclient said: {}", first_line(&stderr)))
    } else {
        None
    };
    Ok(ClientRun { wall, cpu, problem })
}

fn first_line(s: &str) -> &str {
    s.lines()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .trim()
}

fn describe_status(st: i32) -> String {
    if libc::WIFEXITED(st) {
        let code = libc::WEXITSTATUS(st);
        if code == 124 {
            format!("exit 124 (killed by timeout after {CLIENT_LIMIT_SECS} s)")
        } else {
            format!("exit {code}")
        }
    } else if libc::WIFSIGNALED(st) {
        format!("signal {}", libc::WTERMSIG(st))
    } else {
        format!("status {st}")
    }
}

/// Waits for the child `pid`: its wait status and its resource usage
/// (its own and its waited-for children's).
fn wait4(pid: u32) -> Result<(i32, libc::rusage)> {
    let mut status = 0;
    // SAFETY: rusage is plain data; wait4 fills it.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    loop {
        // SAFETY: `status` and `ru` are live and writable for the call.
        let r = unsafe { libc::wait4(pid as i32, &mut status, 0, &mut ru) };
        if r == pid as i32 {
            return Ok((status, ru));
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            bail!("wait4({pid}): {e}");
        }
    }
}

/// Why an h2load run of one download did not get the file whole, if it
/// did not: no 2xx, or fewer DATA bytes than the file.
fn h2load_problem(text: &str, size: u64) -> Option<String> {
    let m = match crate::h2load::metrics(text) {
        Ok(m) => m,
        Err(e) => return Some(format!("{e:#}")),
    };
    let fetches = m.get("fetches").copied().unwrap_or(0.0);
    let non_2xx = m.get("non_200").copied().unwrap_or(fetches);
    if fetches < 1.0 || non_2xx > 0.0 {
        return Some(format!(
            "h2load: {fetches} requests, {non_2xx} without a 2xx"
        ));
    }
    match crate::h2load::traffic(text) {
        Some(t) if t.data >= size as f64 => None,
        Some(t) => Some(format!("h2load: {} DATA bytes of {size}", t.data)),
        None => Some("h2load printed no traffic line".into()),
    }
}

/// Access-log lines of a 200 of `/file` carrying `size` body bytes:
/// spindle's Combined Log Format (`"GET /file HTTP/3" 200 SIZE`) or
/// Caddy's JSON (`"uri":"/file"` ... `"size":SIZE,"status":200`).
fn full_entries(log: &str, file: &str, size: u64) -> u64 {
    let request = format!("\"GET /{file} ");
    let caddy_uri = format!("\"uri\":\"/{file}\"");
    let caddy_ok = format!("\"size\":{size},\"status\":200");
    log.lines()
        .filter(|l| {
            if l.contains(&caddy_uri) {
                return l.contains(&caddy_ok);
            }
            let Some(i) = l.find(&request) else {
                return false;
            };
            // After the request's closing quote: status and bytes.
            let rest = &l[i + 1..];
            let Some(j) = rest.find('"') else {
                return false;
            };
            let mut w = rest[j + 1..].split_whitespace();
            w.next() == Some("200") && w.next() == Some(&size.to_string())
        })
        .count() as u64
}

/// The events perf stat counted (`-x ,`: count,unit,event,...), by the
/// short names of [`SYSCALLS`].
fn parse_perf_stat(text: &str) -> BTreeMap<String, f64> {
    let mut m = BTreeMap::new();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let f: Vec<&str> = line.split(',').collect();
        if f.len() < 3 {
            continue;
        }
        let Some((_, short)) = SYSCALLS.iter().find(|(e, _)| *e == f[2]) else {
            continue;
        };
        if let Ok(n) = f[0].trim().parse::<f64>() {
            m.insert(short.to_string(), n);
        }
    }
    m
}

/// Compares two files byte for byte.
fn same_bytes(got: &Path, want: &Path) -> Result<()> {
    let (lg, lw) = (
        std::fs::metadata(got)?.len(),
        std::fs::metadata(want)?.len(),
    );
    if lg != lw {
        bail!("{} bytes downloaded, the file has {lw}", lg);
    }
    let mut a = std::fs::File::open(got)?;
    let mut b = std::fs::File::open(want)?;
    let (mut x, mut y) = (vec![0u8; 1 << 20], vec![0u8; 1 << 20]);
    let mut at = 0u64;
    loop {
        let n = read_full(&mut a, &mut x)?;
        let k = read_full(&mut b, &mut y)?;
        if n != k || x[..n] != y[..k] {
            bail!("the download differs from the file in the MiB from byte {at}");
        }
        if n == 0 {
            return Ok(());
        }
        at += n as u64;
    }
}

fn read_full(f: &mut std::fs::File, buf: &mut [u8]) -> Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match f.read(&mut buf[n..])? {
            0 => break,
            k => n += k,
        }
    }
    Ok(n)
}

/// The goals for this part, from the medians: MB/s at least
/// Caddy's at no more server CPU per GB, and at least 0.6× spindle's own
/// HTTP/2.
fn goals(report: &Report, group: &str, contenders: &[(String, Server, Proto)]) -> String {
    let med = |label: &str, key: &str| report.median(group, label, key);
    let caddy = contenders
        .iter()
        .find(|(_, s, p)| *s == Server::Caddy && *p == Proto::H3)
        .map(|(l, _, _)| l.as_str());
    let mut o = String::from(
        "## The issue's goals (this part)\n\nFrom the medians above: spindle over HTTP/3 against Caddy over HTTP/3 (MB/s ≥ 1.00×, at server CPU s/GB ≤ 1.00×) and against its own HTTP/2 (MB/s ≥ 0.60×).\n\n| row | MB/s vs Caddy HTTP/3 | server CPU s/GB vs Caddy HTTP/3 | MB/s vs own HTTP/2 |\n|---|---:|---:|---:|\n",
    );
    let ratio = |a: Option<f64>, b: Option<f64>| match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => format!("{:.2}×", a / b),
        _ => "–".into(),
    };
    for (label, s, p) in contenders {
        if *p != Proto::H3 || !matches!(s, Server::Spindle(_)) {
            continue;
        }
        let h2 = row_name(s, Proto::H2);
        let c = |key| caddy.and_then(|l| med(l, key));
        o.push_str(&format!(
            "| {label} | {} | {} | {} |\n",
            ratio(med(label, "mb_per_sec"), c("mb_per_sec")),
            ratio(med(label, "server_cpu_s_per_gb"), c("server_cpu_s_per_gb")),
            ratio(med(label, "mb_per_sec"), med(&h2, "mb_per_sec")),
        ));
    }
    o
}

/// The system-call table: per MB of the file, for each HTTP/3 row.
fn syscalls_md(rows: &[(String, BTreeMap<String, f64>)], mb: f64) -> String {
    let mut o = format!(
        "## System calls per MB (HTTP/3)\n\nThe server's system calls during one download of the file ({mb:.1} MB), counted by `perf stat -e` on the tracepoints syscalls:sys_enter_sendmsg, _sendto, _sendmmsg, _recvmsg, _recvfrom, _recvmmsg, _io_uring_enter and raw_syscalls:sys_enter (all system calls), attached to every process of the server after one download that is not counted (threads started later are counted through perf's inherit); one run, not interleaved, under perf. GSO on and off is not compared: spindle has no switch for it (it sends with UDP_SEGMENT where the kernel takes it). Work done inside io_uring is not a system call and is not counted here.\n\n| server | {} | all/MB | MB/s under perf |\n|---|{}---:|---:|\n",
        SYSCALLS[..SYSCALLS.len() - 1]
            .iter()
            .map(|(_, n)| format!("{n}/MB"))
            .collect::<Vec<_>>()
            .join(" | "),
        "---:|".repeat(SYSCALLS.len() - 1)
    );
    for (label, m) in rows {
        let per = |k: &str| {
            m.get(k)
                .map(|v| format!("{:.1}", v / mb))
                .unwrap_or_else(|| "–".into())
        };
        let cells: Vec<String> = SYSCALLS.iter().map(|(_, n)| per(n)).collect();
        o.push_str(&format!(
            "| {label} | {} | {} |\n",
            cells.join(" | "),
            m.get("mb_per_sec")
                .map(|v| format!("{v:.1}"))
                .unwrap_or_else(|| "–".into())
        ));
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn access_logs_of_spindle_and_caddy_count_only_whole_200s() {
        let size = 2_867_200;
        let log = format!(
            "127.0.0.1 - - [29/Nov/2026:09:00:00 +0000] \"GET /file-700M HTTP/3\" 200 {size} \"-\" \"nghttp3/ngtcp2 client\"\n\
             127.0.0.1 - - [29/Nov/2026:09:00:01 +0000] \"GET /file-700M HTTP/2.0\" 200 {size} \"-\" \"h2load nghttp2/1.52.0\"\n\
             127.0.0.1 - - [29/Nov/2026:09:00:02 +0000] \"GET /file-700M HTTP/3\" 200 1000 \"-\" \"-\"\n\
             127.0.0.1 - - [29/Nov/2026:09:00:03 +0000] \"GET /file-700M HTTP/3\" 404 {size} \"-\" \"-\"\n\
             127.0.0.1 - - [29/Nov/2026:09:00:04 +0000] \"GET /file-700M.old HTTP/3\" 200 {size} \"-\" \"-\"\n\
             {{\"level\":\"info\",\"request\":{{\"proto\":\"HTTP/3.0\",\"method\":\"GET\",\"uri\":\"/file-700M\"}},\"size\":{size},\"status\":200}}\n\
             {{\"level\":\"info\",\"request\":{{\"uri\":\"/file-700M\"}},\"size\":0,\"status\":404}}\n"
        );
        assert_eq!(full_entries(&log, "file-700M", size), 3);
        assert_eq!(full_entries("", "file-700M", size), 0);
    }

    #[test]
    fn perf_stat_csv_is_read_by_short_name() {
        let text = "# started on Sun Nov 29 09:00:00 2026\n\n\
                    1234,,syscalls:sys_enter_sendmsg,500000,100.00,,\n\
                    56,,syscalls:sys_enter_recvmsg,500000,100.00,,\n\
                    <not counted>,,syscalls:sys_enter_sendmmsg,0,100.00,,\n\
                    9999,,raw_syscalls:sys_enter,500000,100.00,,\n";
        let m = parse_perf_stat(text);
        assert_eq!(m["sendmsg"], 1234.0);
        assert_eq!(m["recvmsg"], 56.0);
        assert_eq!(m["all"], 9999.0);
        assert!(!m.contains_key("sendmmsg"));
    }

    #[test]
    fn h2load_runs_that_miss_bytes_or_a_2xx_are_not_complete() {
        let ok = "finished in 500.00ms, 2.00 req/s, 1.40GB/s
requests: 1 total, 1 started, 1 done, 1 succeeded, 0 failed, 0 errored, 0 timeout
status codes: 1 2xx, 0 3xx, 0 4xx, 0 5xx
traffic: 700.00MB (734003300) total, 100B (100) headers (space savings 0.00%), 700.00MB (734003200) data
";
        assert_eq!(h2load_problem(ok, 734_003_200), None);
        assert!(h2load_problem(ok, 734_003_201)
            .unwrap()
            .contains("DATA bytes"));
        let bad = ok.replace(
            "status codes: 1 2xx, 0 3xx, 0 4xx",
            "status codes: 0 2xx, 0 3xx, 1 4xx",
        );
        assert!(h2load_problem(&bad, 1).unwrap().contains("without a 2xx"));
        assert!(h2load_problem("nothing", 1).is_some());
    }

    #[test]
    fn clients_are_judged_by_exit_and_gtlsclients_stderr() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("c.out");
        let sh = |s: &str| vec!["sh".to_string(), "-c".into(), s.into()];
        let r = run_client(&sh("exit 0"), None, &out).unwrap();
        assert!(r.problem.is_none() && r.wall > 0.0);
        let r = run_client(&sh("echo oops >&2; exit 3"), None, &out).unwrap();
        let p = r.problem.unwrap();
        assert!(p.contains("exit 3") && p.contains("oops"), "{p}");
        // CPU of the client's own children counts.
        let r = run_client(
            &sh("i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done"),
            None,
            &out,
        )
        .unwrap();
        assert!(r.cpu > 0.01, "{}", r.cpu);
    }

    #[test]
    fn same_bytes_finds_a_difference() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        let data: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
        std::fs::write(&a, &data).unwrap();
        std::fs::write(&b, &data).unwrap();
        same_bytes(&a, &b).unwrap();
        let mut d = data.clone();
        d[2_500_000] ^= 1;
        std::fs::write(&b, &d).unwrap();
        assert!(same_bytes(&a, &b).is_err());
        std::fs::write(&b, &data[..10]).unwrap();
        assert!(same_bytes(&a, &b).is_err());
    }
}
