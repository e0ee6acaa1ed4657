//! The scale-out bench's HTTP client: plain GETs over std's TcpStream for the
//! load, and a download that resumes with `Range` after its replica dies.

use super::*;

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
pub(super) fn failover(env: &Env, p: &Plan, paths: &[String]) -> Result<Value> {
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

pub(super) fn failover_md(f: &Value) -> String {
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
