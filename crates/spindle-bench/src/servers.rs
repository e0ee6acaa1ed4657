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
    /// H2O (HTTP/2 runs of `hot --h2`, and plain HTTP in `compress`).
    H2o,
    /// Caddy (Debian `caddy`): plain HTTP, or HTTPS with HTTP/2 and
    /// HTTP/3 as the setup says ([`caddyfile`]).
    Caddy,
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
            "caddy" => Ok(Server::Caddy),
            _ => bail!(
                "unknown server {name:?}: expected spindle-{{{}}}, nginx-sendfile, nginx-aio-threads, lighttpd, h2o or caddy",
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
            Server::Caddy => "caddy".into(),
        }
    }

    fn program(&self) -> Option<&'static str> {
        match self {
            Server::Spindle(_) => None,
            Server::NginxSendfile | Server::NginxAioThreads => Some("nginx"),
            Server::Lighttpd => Some("lighttpd"),
            Server::H2o => Some("h2o"),
            Server::Caddy => Some("caddy"),
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
                // Caddy says its version with a subcommand, and only the number.
                let (arg, prefix) = if p == "caddy" {
                    ("version", "caddy ")
                } else {
                    ("-v", "")
                };
                let out = Command::new(&path)
                    .arg(arg)
                    .output()
                    .map_err(|e| format!("{p} {arg}: {e}"))?;
                let text = format!(
                    "{}{}",
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr)
                );
                let first = text.lines().next().unwrap_or(p).trim();
                Ok(format!(
                    "{prefix}{}",
                    first.trim_start_matches("nginx version: ")
                ))
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
    /// Serve HTTP/3 too, on the HTTPS listener's port over UDP (spindle
    /// `--http3`, Caddy `protocols ... h3`); needs `tls`.
    pub http3: bool,
    /// Write an access log here (spindle `--access-log`, Caddy `log`;
    /// the other servers' configs ignore it).
    pub access_log: Option<PathBuf>,
    /// Compress on the fly (the `compress` experiment); None: every
    /// server's config as without it.
    pub compress: Option<Compress>,
}

/// On-the-fly compression: spindle with its defaults and a cache of its
/// own, nginx `gzip on`, lighttpd mod_deflate with a cache directory,
/// Caddy `encode zstd gzip`, H2O `compress: ON`.
#[derive(Debug, Clone)]
pub struct Compress {
    /// nginx's `gzip_comp_level` (1, its default, to 9).
    pub nginx_gzip_level: u32,
    /// lighttpd's `deflate.allowed-encodings` (those its build has).
    pub lighttpd_codings: Vec<String>,
    /// A fresh directory for what spindle (`--compress-cache`) and
    /// lighttpd (`deflate.cache-dir`) keep.
    pub cache_dir: PathBuf,
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
        let tmp = std::env::temp_dir().join(format!(
            "spindle-bench-{}-{}-{port}",
            server.name(),
            std::process::id()
        ));
        std::fs::create_dir_all(&tmp).with_context(|| format!("creating {}", tmp.display()))?;
        let nofile = server_nofile();
        let place = Place {
            port,
            tmp: &tmp,
            nofile,
        };
        let mut argv = command(server, setup, &place)?;
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

/// Where a server runs: its port, the directory its config and logs go
/// to, and the fd limit it gets ([`server_nofile`]).
#[derive(Debug, Clone, Copy)]
pub struct Place<'a> {
    pub port: u16,
    pub tmp: &'a Path,
    pub nofile: u32,
}

/// The media types compressed when [`Compress`] is on, with the file
/// extensions nginx and lighttpd map to them (their configs here map no
/// types otherwise, and serve everything as application/octet-stream).
pub const COMPRESS_TYPES: [(&str, &str); 7] = [
    ("text/html", "html htm"),
    ("text/css", "css"),
    ("application/javascript", "js mjs"),
    ("application/json", "json"),
    ("image/svg+xml", "svg"),
    ("text/plain", "txt"),
    ("application/xml", "xml"),
];

/// Compressed too (`gzip_types`, `deflate.mimetypes`): the other name of
/// JavaScript, which no extension maps to here.
const COMPRESS_EXTRA_TYPE: &str = "text/javascript";

/// The program of a peer server, from PATH.
fn program(name: &str) -> Result<String> {
    Ok(which(name)
        .ok_or_else(|| anyhow!("{name} is not installed"))?
        .display()
        .to_string())
}

/// Writes a generated config into the server's directory; its path.
fn write_conf(tmp: &Path, file: &str, text: &str) -> Result<String> {
    let path = tmp.join(file);
    std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
    Ok(path.display().to_string())
}

/// The command line that runs `server` as `setup` says, its config (if
/// any) written into `place.tmp`.
fn command(server: &Server, setup: &ServerSetup, place: &Place) -> Result<Vec<String>> {
    let tmp = place.tmp;
    match server {
        Server::Spindle(_) => spindle_argv(server, setup, place.port),
        Server::NginxSendfile | Server::NginxAioThreads => {
            let path = write_conf(tmp, "nginx.conf", &nginx_conf(server, setup, place))?;
            Ok(vec![
                program("nginx")?,
                "-c".into(),
                path,
                "-p".into(),
                tmp.display().to_string(),
                "-e".into(),
                tmp.join("error.log").display().to_string(),
            ])
        }
        Server::Lighttpd => {
            let path = write_conf(tmp, "lighttpd.conf", &lighttpd_conf(setup, place))?;
            Ok(vec![program("lighttpd")?, "-D".into(), "-f".into(), path])
        }
        Server::H2o => {
            let path = write_conf(tmp, "h2o.conf", &h2o_conf(setup, place))?;
            Ok(vec![program("h2o")?, "-c".into(), path])
        }
        Server::Caddy => {
            let path = write_conf(tmp, "Caddyfile", &caddyfile(setup, place.port))?;
            // One worker: GOMAXPROCS. Its storage (locks, autosave) in
            // the server's directory, not the user's home.
            let t = tmp.display();
            Ok(vec![
                "env".into(),
                format!("GOMAXPROCS={}", setup.workers.max(1)),
                format!("HOME={t}"),
                format!("XDG_DATA_HOME={t}/data"),
                format!("XDG_CONFIG_HOME={t}/config"),
                program("caddy")?,
                "run".into(),
                "--config".into(),
                path,
                "--adapter".into(),
                "caddyfile".into(),
            ])
        }
    }
}

/// spindle's command line: this binary's `__spindle`, or a baseline
/// build's binary.
fn spindle_argv(server: &Server, setup: &ServerSetup, port: u16) -> Result<Vec<String>> {
    let mut a = match server.spindle_at() {
        Some((_, path)) => vec![path.to_string()],
        None => {
            let exe = std::env::current_exe().context("finding spindle-bench's own path")?;
            vec![exe.display().to_string(), "__spindle".into()]
        }
    };
    let backend = server.spindle_backend().expect("a spindle server");
    a.extend([
        "--backend".into(),
        backend.to_string(),
        "--workers".into(),
        setup.workers.max(1).to_string(),
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
    if setup.http3 {
        if setup.tls.is_none() {
            bail!("HTTP/3 needs HTTPS: the setup has no certificate");
        }
        a.push("--http3".into());
    }
    if let Some(log) = &setup.access_log {
        a.extend(["--access-log".into(), log.display().to_string()]);
    }
    if let Some(c) = &setup.compress {
        // Compression is on by default; a cache of this start's own.
        a.extend(["--compress-cache".into(), c.cache_dir.display().to_string()]);
    }
    a.extend(setup.spindle_flags.iter().cloned());
    a.push(setup.root.display().to_string());
    Ok(a)
}

/// nginx's config: one server on loopback, sendfile, the open-file cache;
/// `aio threads` for [`Server::NginxAioThreads`]; HTTPS and HTTP/2 as
/// `setup` says; `gzip on` with [`Compress`].
pub fn nginx_conf(server: &Server, setup: &ServerSetup, place: &Place) -> String {
    let (w, nofile, port) = (setup.workers.max(1), place.nofile, place.port);
    let ofc = nofile / NGINX_OPEN_FILE_CACHE_DIVISOR;
    let root = setup.root.display();
    let aio = if *server == Server::NginxAioThreads {
        "  aio threads;\n"
    } else {
        ""
    };
    let t = place.tmp.display();
    // HTTPS as the issue's peers are set up: the same certificate,
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
    let gzip = setup
        .compress
        .as_ref()
        .map_or(String::new(), nginx_gzip_conf);
    format!(
        "worker_processes {w};\ndaemon off;\nmaster_process on;\nuser root;\n\
worker_rlimit_nofile {nofile};\npid {t}/nginx.pid;\nerror_log {t}/error.log;\n\
events {{ worker_connections {SERVER_CONNECTIONS}; }}\n\
http {{\n  default_type application/octet-stream;\n  access_log off;\n  sendfile on;\n  tcp_nopush on;\n{aio}\
  keepalive_requests 1000000;\n  keepalive_timeout 300s;\n\
  open_file_cache max={ofc} inactive=60s;\n  open_file_cache_valid 60s;\n\
  client_body_temp_path {t}/body;\n  proxy_temp_path {t}/proxy;\n  fastcgi_temp_path {t}/fastcgi;\n\
  uwsgi_temp_path {t}/uwsgi;\n  scgi_temp_path {t}/scgi;\n{tls_conf}{gzip}\
  server {{ listen 127.0.0.1:{port}{ssl} backlog=4096; root {root}; }}\n}}\n"
    )
}

/// nginx's `gzip on` lines: the types of [`COMPRESS_TYPES`] mapped and
/// compressed (text/html always is), `Vary`, the level.
fn nginx_gzip_conf(c: &Compress) -> String {
    let types: Vec<String> = COMPRESS_TYPES
        .iter()
        .map(|(t, ext)| format!("{t} {ext};"))
        .collect();
    let gzip_types: Vec<&str> = COMPRESS_TYPES
        .iter()
        .map(|(t, _)| *t)
        .filter(|t| *t != "text/html")
        .chain([COMPRESS_EXTRA_TYPE])
        .collect();
    format!(
        "  types {{ {} }}\n  gzip on;\n  gzip_vary on;\n  gzip_comp_level {};\n  gzip_types {};\n",
        types.join(" "),
        c.nginx_gzip_level,
        gzip_types.join(" ")
    )
}

/// lighttpd's config: one server on loopback; mod_openssl as `setup`
/// says; mod_deflate with [`Compress`].
pub fn lighttpd_conf(setup: &ServerSetup, place: &Place) -> String {
    let lighttpd_fds = LIGHTTPD_MAX_FDS.min(place.nofile);
    let root = setup.root.display();
    let port = place.port;
    let conf = format!(
        "server.document-root = \"{root}\"\nserver.bind = \"127.0.0.1\"\nserver.port = {port}\n\
server.errorlog = \"{}/error.log\"\nserver.max-connections = {SERVER_CONNECTIONS}\nserver.max-fds = {lighttpd_fds}\n\
server.max-keep-alive-requests = 1000000\nserver.max-keep-alive-idle = 300\nserver.max-read-idle = 300\n",
        place.tmp.display()
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
    match &setup.compress {
        None => conf,
        Some(c) => conf + &lighttpd_deflate_conf(c),
    }
}

/// lighttpd's mod_deflate lines: the types of [`COMPRESS_TYPES`] mapped
/// and compressed, the codings asked for, a cache directory.
fn lighttpd_deflate_conf(c: &Compress) -> String {
    let quote = |v: &[&str]| {
        v.iter()
            .map(|s| format!("\"{s}\""))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let assign: Vec<String> = COMPRESS_TYPES
        .iter()
        .flat_map(|(t, exts)| exts.split(' ').map(move |e| format!("\".{e}\" => \"{t}\"")))
        .collect();
    let types: Vec<&str> = COMPRESS_TYPES
        .iter()
        .map(|(t, _)| *t)
        .chain([COMPRESS_EXTRA_TYPE])
        .collect();
    let codings: Vec<&str> = c.lighttpd_codings.iter().map(String::as_str).collect();
    format!(
        "mimetype.assign = ({})\nserver.modules += (\"mod_deflate\")\n\
deflate.cache-dir = \"{}\"\ndeflate.allowed-encodings = ({})\ndeflate.mimetypes = ({})\n",
        assign.join(", "),
        c.cache_dir.display(),
        quote(&codings),
        quote(&types)
    )
}

/// H2O's config: one thread, files from the root; HTTPS as `setup` says
/// (the certificate every server uses), plain HTTP otherwise;
/// `compress: ON` with [`Compress`].
pub fn h2o_conf(setup: &ServerSetup, place: &Place) -> String {
    let w = setup.workers.max(1);
    let root = setup.root.display();
    let port = place.port;
    let ssl = match &setup.tls {
        Some(tls) => format!(
            "  ssl:\n    certificate-file: {}\n    key-file: {}\n",
            tls.cert.display(),
            tls.key.display()
        ),
        None => String::new(),
    };
    let compress = if setup.compress.is_some() {
        "compress: ON\n"
    } else {
        ""
    };
    format!(
        "num-threads: {w}\nuser: root\nerror-log: {t}/error.log\npid-file: {t}/h2o.pid\n\
         max-connections: {SERVER_CONNECTIONS}\nlisten:\n  host: 127.0.0.1\n  port: {port}\n\
         {ssl}{compress}hosts:\n  default:\n    paths:\n      /:\n        file.dir: {root}\n",
        t = place.tmp.display()
    )
}

/// Caddy's Caddyfile: no admin endpoint, no automatic HTTPS, one site on
/// loopback serving the root; `encode zstd gzip` with [`Compress`]; an
/// access log (JSON) with `access_log`. Plain HTTP, or with `tls` the
/// HTTPS variant ([`caddyfile_https`]).
pub fn caddyfile(setup: &ServerSetup, port: u16) -> String {
    if let Some(tls) = &setup.tls {
        return caddyfile_https(setup, tls, port);
    }
    format!(
        "{{\n\tadmin off\n\tauto_https off\n}}\n\nhttp://127.0.0.1:{port} {{\n\troot * {}\n{}\tfile_server\n}}\n",
        setup.root.display(),
        caddy_site_extras(setup)
    )
}

/// The HTTPS Caddyfile: the run's certificate (`tls CERT KEY`, Caddy
/// 2.6 loads it as given and asks no CA), bound to loopback, named both
/// `localhost` (gtlsclient's `:authority`) and `127.0.0.1` (h2load's and
/// spindle-load's); the protocols offered on the port are HTTP/1.1, and
/// HTTP/2 and HTTP/3 (the same port number over UDP) as `setup` says.
fn caddyfile_https(setup: &ServerSetup, tls: &crate::tls::TlsFiles, port: u16) -> String {
    let mut protocols = vec!["h1"];
    if setup.http2 {
        protocols.push("h2");
    }
    if setup.http3 {
        protocols.push("h3");
    }
    format!(
        "{{\n\tadmin off\n\tauto_https off\n\tservers {{\n\t\tprotocols {}\n\t}}\n}}\n\n\
https://localhost:{port}, https://127.0.0.1:{port} {{\n\tbind 127.0.0.1\n\ttls {} {}\n\troot * {}\n{}\tfile_server\n}}\n",
        protocols.join(" "),
        tls.cert.display(),
        tls.key.display(),
        setup.root.display(),
        caddy_site_extras(setup)
    )
}

/// The site lines that follow `root`: `encode` with [`Compress`], `log`
/// with an access log.
fn caddy_site_extras(setup: &ServerSetup) -> String {
    let mut s = String::new();
    if setup.compress.is_some() {
        s.push_str("\tencode zstd gzip\n");
    }
    if let Some(log) = &setup.access_log {
        s.push_str(&format!(
            "\tlog {{\n\t\toutput file {}\n\t}}\n",
            log.display()
        ));
    }
    s
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

    /// A setup as the experiments make it, for config tests.
    fn test_setup(tls: bool, http2: bool) -> ServerSetup {
        let mut s = crate::common::setup(Path::new("/tmp/cb-test/html"), 1);
        s.tls = tls.then(|| crate::tls::TlsFiles {
            cert: "/tmp/cbt/tls/cert.pem".into(),
            key: "/tmp/cbt/tls/key.pem".into(),
            ca: "/tmp/cbt/tls/ca.pem".into(),
        });
        s.http2 = http2;
        s
    }

    /// Where the config tests' servers would run.
    fn place() -> Place<'static> {
        Place {
            port: 54321,
            tmp: Path::new("/golden-tmp"),
            nofile: 20_000,
        }
    }

    /// A config as the golden file has it: the port and the server's
    /// directory by name.
    fn normalized(text: String) -> String {
        text.replace("/golden-tmp", "TMP").replace("54321", "PORT")
    }

    /// Without compression every config is the one the experiments ran
    /// before `compress` came (testdata/server-configs.txt, written by the
    /// code before it).
    #[test]
    fn configs_without_compression_are_as_before() {
        let golden = include_str!("../testdata/server-configs.txt");
        let mut got = String::new();
        for (name, tls, h2) in [
            ("nginx-sendfile", false, false),
            ("nginx-aio-threads", false, false),
            ("lighttpd", false, false),
            ("nginx-sendfile", true, true),
            ("nginx-sendfile", true, false),
            ("lighttpd", true, true),
            ("lighttpd", true, false),
            ("h2o", true, true),
        ] {
            let s = Server::parse(name).unwrap();
            let setup = test_setup(tls, h2);
            let text = match s {
                Server::Lighttpd => lighttpd_conf(&setup, &place()),
                Server::H2o => h2o_conf(&setup, &place()),
                _ => nginx_conf(&s, &setup, &place()),
            };
            got.push_str(&format!(
                "=== {name} tls={tls} h2={h2}\n{}",
                normalized(text)
            ));
        }
        assert_eq!(got, golden);
    }

    fn compressing() -> ServerSetup {
        let mut s = test_setup(false, false);
        s.compress = Some(Compress {
            nginx_gzip_level: 6,
            lighttpd_codings: vec!["br".into(), "gzip".into(), "zstd".into()],
            cache_dir: "/cache".into(),
        });
        s
    }

    #[test]
    fn nginx_gzips_the_text_types_at_the_level_given() {
        let conf = nginx_conf(&Server::NginxSendfile, &compressing(), &place());
        for line in [
            "  gzip on;\n",
            "  gzip_vary on;\n",
            "  gzip_comp_level 6;\n",
            "  gzip_types text/css application/javascript application/json image/svg+xml text/plain application/xml text/javascript;\n",
            "application/javascript js mjs;",
            "text/html html htm;",
        ] {
            assert!(conf.contains(line), "{line:?} not in {conf}");
        }
        // Everything else as without compression.
        let plain = nginx_conf(&Server::NginxSendfile, &test_setup(false, false), &place());
        let gzip = nginx_gzip_conf(compressing().compress.as_ref().unwrap());
        assert_eq!(conf.replace(&gzip, ""), plain);
    }

    #[test]
    fn lighttpd_deflates_into_its_cache_directory() {
        let conf = lighttpd_conf(&compressing(), &place());
        let plain = lighttpd_conf(&test_setup(false, false), &place());
        let extra = conf.strip_prefix(&plain).expect("the plain config first");
        assert!(
            extra.contains("server.modules += (\"mod_deflate\")\n"),
            "{extra}"
        );
        assert!(
            extra.contains("deflate.cache-dir = \"/cache\"\n"),
            "{extra}"
        );
        assert!(
            extra.contains("deflate.allowed-encodings = (\"br\", \"gzip\", \"zstd\")\n"),
            "{extra}"
        );
        assert!(
            extra.contains("\".js\" => \"application/javascript\""),
            "{extra}"
        );
        assert!(extra.contains("\"text/html\", \"text/css\""), "{extra}");
        assert!(extra.contains("\"text/javascript\")\n"), "{extra}");
    }

    #[test]
    fn h2o_listens_on_plain_http_and_compresses() {
        let conf = h2o_conf(&compressing(), &place());
        assert!(!conf.contains("ssl:"), "{conf}");
        assert!(
            conf.contains("  port: 54321\ncompress: ON\nhosts:\n"),
            "{conf}"
        );
        assert!(!h2o_conf(&test_setup(false, false), &place()).contains("compress"));
    }

    #[test]
    fn caddy_encodes_zstd_and_gzip_without_admin_or_https() {
        let conf = caddyfile(&compressing(), 54321);
        assert_eq!(
            conf,
            "{\n\tadmin off\n\tauto_https off\n}\n\nhttp://127.0.0.1:54321 {\n\troot * /tmp/cb-test/html\n\tencode zstd gzip\n\tfile_server\n}\n"
        );
        assert!(!caddyfile(&test_setup(false, false), 1).contains("encode"));
        assert_eq!(Server::parse("caddy").unwrap(), Server::Caddy);
    }

    #[test]
    fn caddy_over_https_offers_h3_with_the_runs_certificate() {
        let mut setup = test_setup(true, true);
        setup.http3 = true;
        setup.access_log = Some("/tmp/cbt/access.log".into());
        assert_eq!(
            caddyfile(&setup, 54321),
            "{\n\tadmin off\n\tauto_https off\n\tservers {\n\t\tprotocols h1 h2 h3\n\t}\n}\n\n\
https://localhost:54321, https://127.0.0.1:54321 {\n\tbind 127.0.0.1\n\ttls /tmp/cbt/tls/cert.pem /tmp/cbt/tls/key.pem\n\
\troot * /tmp/cb-test/html\n\tlog {\n\t\toutput file /tmp/cbt/access.log\n\t}\n\tfile_server\n}\n"
        );
        // HTTPS without HTTP/2 or HTTP/3: HTTP/1.1 only, no log.
        let h1 = caddyfile(&test_setup(true, false), 1);
        assert!(h1.contains("\t\tprotocols h1\n"), "{h1}");
        assert!(!h1.contains("log {"), "{h1}");
        // The plain variant is as before, an access log aside.
        let mut plain = test_setup(false, false);
        plain.access_log = Some("/l".into());
        assert_eq!(
            caddyfile(&plain, 1),
            "{\n\tadmin off\n\tauto_https off\n}\n\nhttp://127.0.0.1:1 {\n\troot * /tmp/cb-test/html\n\tlog {\n\t\toutput file /l\n\t}\n\tfile_server\n}\n"
        );
    }

    #[test]
    fn spindle_serves_http3_and_logs_only_when_asked() {
        let s = Server::parse("spindle-io-uring").unwrap();
        let mut setup = test_setup(true, true);
        let argv = spindle_argv(&s, &setup, 1).unwrap();
        assert!(!argv.iter().any(|a| a == "--http3" || a == "--access-log"));
        setup.http3 = true;
        setup.access_log = Some("/tmp/a.log".into());
        let argv = spindle_argv(&s, &setup, 1).unwrap();
        assert!(argv.iter().any(|a| a == "--http3"), "{argv:?}");
        let i = argv.iter().position(|a| a == "--access-log").unwrap();
        assert_eq!(argv[i + 1], "/tmp/a.log");
        // The root stays last.
        assert_eq!(argv.last().unwrap(), "/tmp/cb-test/html");
        let mut plain = test_setup(false, false);
        plain.http3 = true;
        assert!(spindle_argv(&s, &plain, 1).is_err());
    }

    #[test]
    fn spindle_gets_a_compress_cache_of_its_own_only_when_compressing() {
        let s = Server::parse("spindle-io-uring").unwrap();
        let argv = spindle_argv(&s, &compressing(), 1).unwrap();
        let i = argv.iter().position(|a| a == "--compress-cache").unwrap();
        assert_eq!(argv[i + 1], "/cache");
        let plain = spindle_argv(&s, &test_setup(false, false), 1).unwrap();
        assert!(!plain.iter().any(|a| a.starts_with("--compress")));
    }
}
