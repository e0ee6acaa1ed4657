//! The scale-out bench's servers: the spindle replicas (one per namespace,
//! each in its own memory cgroup, with `--metrics` scraped for its counters)
//! and HAProxy in front of them.

use super::*;

/// One spindle replica in its namespace and cgroups; SIGKILLed on drop.
pub(super) struct Replica {
    child: Option<Child>,
    pgid: u32,
    pub(super) addr: Ipv4Addr,
    log: PathBuf,
}

impl Replica {
    #[allow(clippy::too_many_arguments)]
    pub(super) fn start(
        k: usize,
        net: &Net,
        root: &Path,
        mem: &sys::MemCgroup,
        blkio: Option<&Blkio>,
        cpu: Option<&str>,
        work: &Path,
        extra: &[String],
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
            ]
            .map(String::from),
        );
        argv.extend(extra.iter().cloned());
        argv.push(root.display().to_string());
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

    pub(super) fn kill(&mut self) {
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

/// A replica's counters from its metrics listener: 2xx responses, body
/// bytes, disk reads, and (an edge's) body bytes fetched from its origin.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Counters {
    pub(super) ok: f64,
    pub(super) body: f64,
    pub(super) reads: f64,
    pub(super) origin: f64,
}

pub(super) fn scrape(addr: Ipv4Addr) -> Result<Counters> {
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
        } else if l.starts_with("spindle_edge_origin_bytes_total ") {
            c.origin += val();
        }
    }
    Ok(c)
}

// ---------------------------------------------------------------- haproxy

pub(super) struct Haproxy {
    child: Option<Child>,
    pub(super) port: u16,
    sock: PathBuf,
    log: PathBuf,
}

/// One server's line of HAProxy's `show stat`.
#[derive(Debug, Clone)]
pub(super) struct ServerStat {
    pub(super) name: String,
    pub(super) status: String,
    pub(super) total: f64,
    pub(super) retries: f64,
    pub(super) redispatches: f64,
}

impl Haproxy {
    /// HAProxy in `mode` (`uri`: by uri, consistent; else round robin)
    /// over the first `n` replicas.
    pub(super) fn start(mode: &str, net: &Net, work: &Path, n: usize) -> Result<Haproxy> {
        let port = sys::free_port()?;
        let sock = work.join(format!("haproxy-{mode}.sock"));
        let _ = std::fs::remove_file(&sock);
        let balance = if mode == "uri" {
            "balance uri\n    hash-type consistent"
        } else {
            "balance roundrobin"
        };
        let mut servers = String::new();
        for k in 0..n {
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
                .map(|s| s.len() == n && s.iter().all(|x| x.status.starts_with("UP")))
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
    pub(super) fn stats(&self) -> Result<Vec<ServerStat>> {
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
