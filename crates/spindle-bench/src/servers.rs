//! The servers under test: every spindle backend, nginx (sendfile, aio threads) and
//! lighttpd, each started with a generated config on loopback and stopped after; and
//! the hidden `__spindle` / `__load` entry points.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use clap::Parser;

use crate::sys;

/// How long a server may take to accept connections after it was started.
const START_TIMEOUT: Duration = Duration::from_secs(20);
/// How long a server may take to exit after SIGTERM before it gets SIGKILL.
const STOP_TIMEOUT: Duration = Duration::from_secs(15);
/// nginx `open_file_cache max=` is this fraction of the fd limit it runs with, so that
/// cached descriptors and the idle experiment's 10,000 connections fit together. (At
/// 20,000, the limit itself, nginx ran out of descriptors mid-run and answered 500.)
const NGINX_OPEN_FILE_CACHE_DIVISOR: u32 = 3;
/// File descriptors we ask for per server process (nginx `worker_rlimit_nofile`,
/// lighttpd `max-fds`); the hard limit may grant fewer (see [`server_nofile`]).
const SERVER_NOFILE: u32 = 65_536;

/// The fd limit servers actually get: [`SERVER_NOFILE`], or the hard limit if that is
/// lower and cannot be raised (a container without CAP_SYS_RESOURCE: 20,000 here).
pub fn server_nofile() -> u32 {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `lim` is a live, writable rlimit for the duration of the call.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return SERVER_NOFILE;
    }
    let want = libc::rlimit {
        rlim_cur: u64::from(SERVER_NOFILE),
        rlim_max: u64::from(SERVER_NOFILE).max(lim.rlim_max),
    };
    // SAFETY: as above; raising our own hard limit needs CAP_SYS_RESOURCE and may fail.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &want) } == 0 {
        return SERVER_NOFILE;
    }
    lim.rlim_max.min(u64::from(SERVER_NOFILE)) as u32
}
/// lighttpd's `server.max-fds` (a 16-bit setting: 65,536 wraps to 0 and lighttpd falls
/// back to 4,096, which caps it at 2,048 connections).
const LIGHTTPD_MAX_FDS: u32 = 2 * SERVER_CONNECTIONS;
/// Connections a peer server accepts (nginx `worker_connections`, lighttpd `max-connections`).
const SERVER_CONNECTIONS: u32 = 16_384;

pub const SPINDLE_BACKENDS: [&str; 4] = [
    "io-uring",
    "linux-sendfile",
    "posix-aio",
    "linux-aio-sendfile",
];

/// `spindle-bench __spindle ARGS`: the spindle server, in this binary.
pub fn spindle_main(args: &[OsString]) -> i32 {
    let mut all = vec![OsString::from("spindle")];
    all.extend_from_slice(args);
    let cli = match spindle::config::Cli::try_parse_from(all) {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            return 2;
        }
    };
    match spindle::config::Config::from_cli(cli).and_then(spindle::server::run) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("spindle: error: {e}");
            1
        }
    }
}

/// `spindle-bench __load ARGS`: spindle-load, in this binary (report on stdout, JSON with --json).
pub fn load_main(args: &[OsString]) -> i32 {
    use spindle_load::cli::{self, Command as LoadCommand};
    use spindle_load::run::{run, RunError};
    let args: Vec<String> = args
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let cfg = match cli::parse(&args) {
        Ok(LoadCommand::Run(cfg)) => cfg,
        Ok(_) => return 0,
        Err(e) => {
            eprintln!("spindle-load: {e}");
            return 2;
        }
    };
    let summary = match run(&cfg) {
        Ok(s) => s,
        Err(RunError::Input(e)) => {
            eprintln!("spindle-load: {e}");
            return 2;
        }
        Err(RunError::Fatal(e)) => {
            eprintln!("spindle-load: {e}");
            return 1;
        }
    };
    print!("{}", spindle_load::report::http_load_report(&summary));
    if let Some(path) = &cfg.json {
        let text = serde_json::to_string_pretty(&summary).unwrap_or_default();
        if let Err(e) = std::fs::write(path, text + "\n") {
            eprintln!("spindle-load: cannot write {}: {e}", path.display());
            return 1;
        }
    }
    0
}

/// One server under test.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Server {
    Spindle(String),
    NginxSendfile,
    NginxAioThreads,
    Lighttpd,
    /// H2O (HTTP/2 runs only: `hot --h2`).
    H2o,
}

impl Server {
    pub fn parse(name: &str) -> Result<Server> {
        if let Some(b) = name.strip_prefix("spindle-") {
            // `spindle-BACKEND@PATH`: another build's `spindle` binary (a
            // baseline measured in the same run).
            let (backend, at) = match b.split_once('@') {
                Some((b, p)) => (b, Some(p)),
                None => (b, None),
            };
            if SPINDLE_BACKENDS.contains(&backend) {
                if let Some(p) = at {
                    if !Path::new(p).is_file() {
                        bail!("server {name:?}: no spindle binary at {p}");
                    }
                }
                return Ok(Server::Spindle(b.to_string()));
            }
        }
        match name {
            "nginx-sendfile" => Ok(Server::NginxSendfile),
            "nginx-aio-threads" => Ok(Server::NginxAioThreads),
            "lighttpd" => Ok(Server::Lighttpd),
            "h2o" => Ok(Server::H2o),
            _ => bail!(
                "unknown server {name:?}: expected spindle-{{{}}}, nginx-sendfile, nginx-aio-threads, lighttpd or h2o",
                SPINDLE_BACKENDS.join("|")
            ),
        }
    }

    /// A spindle server's backend (without a baseline's `@PATH`).
    pub fn spindle_backend(&self) -> Option<&str> {
        match (self, self.spindle_at()) {
            (_, Some((b, _))) => Some(b),
            (Server::Spindle(b), None) => Some(b),
            _ => None,
        }
    }

    /// A baseline spindle's backend and binary (`spindle-BACKEND@PATH`).
    fn spindle_at(&self) -> Option<(&str, &str)> {
        match self {
            Server::Spindle(b) => b.split_once('@'),
            _ => None,
        }
    }

    pub fn name(&self) -> String {
        match self {
            Server::Spindle(b) => match self.spindle_at() {
                // A baseline build: named by its binary's file name.
                Some((b, p)) => {
                    let file = Path::new(p).file_name().unwrap_or_default();
                    format!("spindle-{b}@{}", file.to_string_lossy())
                }
                None => format!("spindle-{b}"),
            },
            Server::NginxSendfile => "nginx-sendfile".into(),
            Server::NginxAioThreads => "nginx-aio-threads".into(),
            Server::Lighttpd => "lighttpd".into(),
            Server::H2o => "h2o".into(),
        }
    }

    fn program(&self) -> Option<&'static str> {
        match self {
            Server::Spindle(_) => None,
            Server::NginxSendfile | Server::NginxAioThreads => Some("nginx"),
            Server::Lighttpd => Some("lighttpd"),
            Server::H2o => Some("h2o"),
        }
    }

    /// The installed version, or why the server cannot run here.
    pub fn version(&self) -> std::result::Result<String, String> {
        if let Some((_, path)) = self.spindle_at() {
            return Ok(format!("spindle at {path}"));
        }
        match self.program() {
            None => Ok(format!("spindle {}", env!("CARGO_PKG_VERSION"))),
            Some(p) => {
                let Some(path) = which(p) else {
                    return Err(format!(
                        "{p} is not installed (apt-get install {})",
                        if p == "nginx" {
                            "nginx-light or nginx"
                        } else {
                            p
                        }
                    ));
                };
                let out = Command::new(&path)
                    .arg("-v")
                    .output()
                    .map_err(|e| format!("{p} -v: {e}"))?;
                let text = format!(
                    "{}{}",
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr)
                );
                Ok(text
                    .lines()
                    .next()
                    .unwrap_or(p)
                    .trim()
                    .trim_start_matches("nginx version: ")
                    .to_string())
            }
        }
    }
}

/// Looks a program up in PATH (and the sbin directories, where nginx and lighttpd live).
pub fn which(prog: &str) -> Option<PathBuf> {
    let path = std::env::var("PATH").unwrap_or_default();
    let found = path
        .split(':')
        .chain(["/usr/sbin", "/sbin", "/usr/local/sbin"])
        .map(|d| Path::new(d).join(prog))
        .find(|p| p.is_file());
    found
}

/// How to run a server.
#[derive(Debug, Clone)]
pub struct ServerSetup {
    pub root: PathBuf,
    pub workers: u32,
    /// CPU list for `taskset -c` (None: no pinning).
    pub cpus: Option<String>,
    /// Memory cgroup `cgroup.procs` file to start the server in.
    pub cgroup_procs: Option<PathBuf>,
    /// Extra flags for spindle (e.g. `--chunk-size 1m`).
    pub spindle_flags: Vec<String>,
    /// Serve HTTPS (only) with this certificate.
    pub tls: Option<crate::tls::TlsFiles>,
    /// Offer HTTP/2 on the HTTPS listener (ALPN `h2`; spindle and H2O do
    /// by default, nginx needs `http2` on its `listen`, lighttpd
    /// `server.h2proto`).
    pub http2: bool,
}

/// A running server, stopped on drop.
pub struct Running {
    child: Option<Child>,
    pub pgid: u32,
    pub port: u16,
    pub name: String,
    tmp: PathBuf,
}

impl Running {
    pub fn start(server: &Server, setup: &ServerSetup) -> Result<Running> {
        let port = sys::free_port()?;
        let nofile = server_nofile();
        let ofc = nofile / NGINX_OPEN_FILE_CACHE_DIVISOR;
        let lighttpd_fds = LIGHTTPD_MAX_FDS.min(nofile);
        let tmp = std::env::temp_dir().join(format!(
            "spindle-bench-{}-{}-{port}",
            server.name(),
            std::process::id()
        ));
        std::fs::create_dir_all(&tmp).with_context(|| format!("creating {}", tmp.display()))?;
        let root = setup.root.display();
        let w = setup.workers.max(1);
        let mut argv: Vec<String> = match server {
            Server::Spindle(_) => {
                let mut a = match server.spindle_at() {
                    Some((_, path)) => vec![path.to_string()],
                    None => {
                        let exe =
                            std::env::current_exe().context("finding spindle-bench's own path")?;
                        vec![exe.display().to_string(), "__spindle".into()]
                    }
                };
                let backend = server.spindle_backend().expect("a spindle server");
                a.extend([
                    "--backend".into(),
                    backend.to_string(),
                    "--workers".into(),
                    w.to_string(),
                ]);
                match &setup.tls {
                    None => a.extend(["--listen".into(), format!("127.0.0.1:{port}")]),
                    Some(t) => a.extend([
                        "--tls-listen".into(),
                        format!("127.0.0.1:{port}"),
                        "--tls-cert".into(),
                        t.cert.display().to_string(),
                        "--tls-key".into(),
                        t.key.display().to_string(),
                    ]),
                }
                a.extend(setup.spindle_flags.iter().cloned());
                a.push(setup.root.display().to_string());
                a
            }
            Server::NginxSendfile | Server::NginxAioThreads => {
                let aio = if *server == Server::NginxAioThreads {
                    "  aio threads;\n"
                } else {
                    ""
                };
                let t = tmp.display();
                // HTTPS as the peers are set up: the same certificate,
                // TLS 1.2 and 1.3, a shared session cache beside tickets.
                let (ssl, tls_conf) = match &setup.tls {
                    None => ("", String::new()),
                    Some(f) => (
                        if setup.http2 { " ssl http2" } else { " ssl" },
                        format!(
                            "  ssl_certificate {};\n  ssl_certificate_key {};\n  ssl_protocols TLSv1.2 TLSv1.3;\n\
  ssl_prefer_server_ciphers on;\n  ssl_session_cache shared:SSL:10m;\n  ssl_session_tickets on;\n",
                            f.cert.display(),
                            f.key.display()
                        ),
                    ),
                };
                let conf = format!(
                    "worker_processes {w};\ndaemon off;\nmaster_process on;\nuser root;\n\
worker_rlimit_nofile {nofile};\npid {t}/nginx.pid;\nerror_log {t}/error.log;\n\
events {{ worker_connections {SERVER_CONNECTIONS}; }}\n\
http {{\n  default_type application/octet-stream;\n  access_log off;\n  sendfile on;\n  tcp_nopush on;\n{aio}\
  keepalive_requests 1000000;\n  keepalive_timeout 300s;\n\
  open_file_cache max={ofc} inactive=60s;\n  open_file_cache_valid 60s;\n\
  client_body_temp_path {t}/body;\n  proxy_temp_path {t}/proxy;\n  fastcgi_temp_path {t}/fastcgi;\n\
  uwsgi_temp_path {t}/uwsgi;\n  scgi_temp_path {t}/scgi;\n{tls_conf}\
  server {{ listen 127.0.0.1:{port}{ssl} backlog=4096; root {root}; }}\n}}\n"
                );
                let path = tmp.join("nginx.conf");
                std::fs::write(&path, conf)?;
                vec![
                    which("nginx")
                        .ok_or_else(|| anyhow!("nginx is not installed"))?
                        .display()
                        .to_string(),
                    "-c".into(),
                    path.display().to_string(),
                    "-p".into(),
                    tmp.display().to_string(),
                    "-e".into(),
                    tmp.join("error.log").display().to_string(),
                ]
            }
            Server::Lighttpd => {
                let conf = format!(
                    "server.document-root = \"{root}\"\nserver.bind = \"127.0.0.1\"\nserver.port = {port}\n\
server.errorlog = \"{}/error.log\"\nserver.max-connections = {SERVER_CONNECTIONS}\nserver.max-fds = {lighttpd_fds}\n\
server.max-keep-alive-requests = 1000000\nserver.max-keep-alive-idle = 300\nserver.max-read-idle = 300\n",
                    tmp.display()
                );
                let conf = match &setup.tls {
                    None => conf,
                    Some(f) => format!(
                        "{conf}server.modules += (\"mod_openssl\")\nssl.engine = \"enable\"\n\
ssl.pemfile = \"{}\"\nssl.privkey = \"{}\"\nserver.feature-flags += (\"server.h2proto\" => \"{}\")\n",
                        f.cert.display(),
                        f.key.display(),
                        if setup.http2 { "enable" } else { "disable" }
                    ),
                };
                let path = tmp.join("lighttpd.conf");
                std::fs::write(&path, conf)?;
                vec![
                    which("lighttpd")
                        .ok_or_else(|| anyhow!("lighttpd is not installed"))?
                        .display()
                        .to_string(),
                    "-D".into(),
                    "-f".into(),
                    path.display().to_string(),
                ]
            }
            Server::H2o => {
                let tls = setup
                    .tls
                    .as_ref()
                    .ok_or_else(|| anyhow!("h2o runs here over HTTPS only (hot --h2)"))?;
                // One thread, no access log, files from the root; the
                // certificate every server uses.
                let conf = format!(
                    "num-threads: {w}\nuser: root\nerror-log: {t}/error.log\npid-file: {t}/h2o.pid\n\
                     max-connections: {SERVER_CONNECTIONS}\nlisten:\n  host: 127.0.0.1\n  port: {port}\n\
                     \x20 ssl:\n    certificate-file: {}\n    key-file: {}\n\
                     hosts:\n  default:\n    paths:\n      /:\n        file.dir: {root}\n",
                    tls.cert.display(),
                    tls.key.display(),
                    t = tmp.display()
                );
                let path = tmp.join("h2o.conf");
                std::fs::write(&path, conf)?;
                vec![
                    which("h2o")
                        .ok_or_else(|| anyhow!("h2o is not installed"))?
                        .display()
                        .to_string(),
                    "-c".into(),
                    path.display().to_string(),
                ]
            }
        };
        if let Some(cpus) = &setup.cpus {
            if which("taskset").is_some() {
                let mut a = vec!["taskset".to_string(), "-c".into(), cpus.clone()];
                a.append(&mut argv);
                argv = a;
            }
        }
        // Raise the fd limit (soft and hard, as root) so that every server can hold the
        // idle experiment's connections, and join the cgroup before exec, so every
        // process and thread the server makes is charged to it.
        let procs = setup
            .cgroup_procs
            .as_ref()
            .map(|p| p.display().to_string())
            .unwrap_or_default();
        let mut cmd = Command::new("/bin/sh");
        cmd.arg("-c")
            .arg(format!(
                "ulimit -n {nofile} 2>/dev/null; if [ -n \"$0\" ]; then echo $$ > \"$0\" || exit 1; fi; exec \"$@\""
            ))
            .arg(procs)
            .args(&argv);
        use std::os::unix::process::CommandExt;
        cmd.process_group(0)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(tmp.join("stderr.log"))?);
        let child = cmd
            .spawn()
            .with_context(|| format!("starting {}", server.name()))?;
        let pgid = child.id();
        let mut r = Running {
            child: Some(child),
            pgid,
            port,
            name: server.name(),
            tmp,
        };
        r.wait_ready()?;
        Ok(r)
    }

    fn wait_ready(&mut self) -> Result<()> {
        let start = Instant::now();
        loop {
            if let Some(c) = self.child.as_mut() {
                if let Some(st) = c.try_wait()? {
                    self.child = None;
                    bail!(
                        "{} exited at start ({st}): {}",
                        self.name,
                        self.stderr_tail()
                    );
                }
            }
            if std::net::TcpStream::connect_timeout(
                &([127, 0, 0, 1], self.port).into(),
                Duration::from_millis(200),
            )
            .is_ok()
            {
                return Ok(());
            }
            if start.elapsed() > START_TIMEOUT {
                bail!(
                    "{} did not listen within {START_TIMEOUT:?}: {}",
                    self.name,
                    self.stderr_tail()
                );
            }
            std::thread::sleep(Duration::from_millis(30));
        }
    }

    fn stderr_tail(&self) -> String {
        let s = std::fs::read_to_string(self.tmp.join("stderr.log")).unwrap_or_default();
        let e = std::fs::read_to_string(self.tmp.join("error.log")).unwrap_or_default();
        let all = format!("{s}{e}");
        let lines: Vec<&str> = all.lines().collect();
        lines[lines.len().saturating_sub(5)..].join(" | ")
    }

    /// False once the server's main process has exited.
    pub fn alive(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }

    pub fn cpu_seconds(&self) -> f64 {
        sys::group_cpu_seconds(self.pgid)
    }

    /// SIGTERM to the group, wait, SIGKILL after STOP_TIMEOUT.
    pub fn stop(&mut self) -> Result<()> {
        let Some(mut child) = self.child.take() else {
            return Ok(());
        };
        // A server that is gone before we stop it crashed: keep its logs.
        let crashed = child.try_wait()?;
        sys::kill_group(self.pgid, libc::SIGTERM);
        let start = Instant::now();
        loop {
            if child.try_wait()?.is_some() && sys::group_pids(self.pgid).is_empty() {
                break;
            }
            if start.elapsed() > STOP_TIMEOUT {
                sys::kill_group(self.pgid, libc::SIGKILL);
                let _ = child.wait();
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        match crashed {
            None => {
                let _ = std::fs::remove_dir_all(&self.tmp);
            }
            Some(st) => eprintln!(
                "{}: exited on its own during the run ({st}); logs kept in {}",
                self.name,
                self.tmp.display()
            ),
        }
        Ok(())
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.stop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_baseline_build_is_named_by_its_binary_and_keeps_its_backend() {
        let s = Server::parse("spindle-io-uring@/bin/true").unwrap();
        assert_eq!(s.name(), "spindle-io-uring@true");
        assert_eq!(s.spindle_backend(), Some("io-uring"));
        assert_eq!(s.version().unwrap(), "spindle at /bin/true");
        let plain = Server::parse("spindle-posix-aio").unwrap();
        assert_eq!(plain.name(), "spindle-posix-aio");
        assert_eq!(plain.spindle_backend(), Some("posix-aio"));
        let err = Server::parse("spindle-io-uring@/no/such/spindle").unwrap_err();
        assert!(err.to_string().contains("no spindle binary"), "{err}");
        assert!(Server::parse("spindle-nope@/bin/true").is_err());
    }
}
