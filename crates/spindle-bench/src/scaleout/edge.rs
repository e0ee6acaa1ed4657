//! `scaleout --edge`: the edge tier (#49). The replicas are caching edges
//! (`--origin`, `--cache-dir`, `--cache-size`, an empty root) in front of
//! one origin, Debian's nginx on the host serving the working set. Two
//! modes, interleaved in rounds with the first alternating: `one`, HAProxy
//! over one edge, and `uri`, HAProxy `balance uri` with `hash-type
//! consistent` over three, each edge with the same cache size. The
//! working set is about 2.7 times one edge's cache and smaller than the
//! three caches together, and the clients ask for it uniformly: one edge
//! keeps about a third of what is asked for (LRU under uniform requests
//! holds its share, cache / working set), while with uri hashing each edge
//! is asked only for its own share, which fits. Hit ratio = 1 − bytes the
//! edges fetched from the origin / body bytes they served, over the
//! measured pass, after a warm-up pass that fills the caches.

use super::*;

pub(super) const EDGE_MODES: [&str; 2] = ["one", "uri"];

const EDGE_COLUMNS: [Column; 9] = [
    col("hit_ratio", "hit ratio, all", 3),
    col("hit_r0", "hit r0", 3),
    col("hit_r1", "hit r1", 3),
    col("hit_r2", "hit r2", 3),
    col("origin_mb", "MB from the origin", 0),
    col("fetches_per_sec", "fetches/sec", 0),
    col("mb_per_sec", "MB/s", 0),
    col("fetch_ms_p99", "fetch p99 ms", 1),
    col("non_200", "non-200", 0),
];

/// The bar: the three edges' hit ratio over one edge's.
const BAR: f64 = 2.5;

/// The origin: Debian's nginx on the host, on every address (the edges
/// reach it through their veth's host end), serving `root`.
pub(super) struct Origin {
    child: Option<Child>,
    pub(super) port: u16,
}

impl Origin {
    pub(super) fn start(root: &Path, work: &Path) -> Result<Origin> {
        let nginx =
            which("nginx").context("scaleout --edge needs nginx (apt-get install nginx)")?;
        let port = sys::free_port()?;
        let dir = work.join("origin");
        std::fs::create_dir_all(&dir)?;
        let conf = format!(
            "{}  server {{\n    listen 0.0.0.0:{port};\n    root {};\n  }}\n}}\n",
            crate::edge::nginx_head(&dir, false),
            root.display()
        );
        let path = dir.join("nginx.conf");
        std::fs::write(&path, conf)?;
        use std::os::unix::process::CommandExt;
        let child = Command::new(nginx)
            .arg("-c")
            .arg(&path)
            .arg("-p")
            .arg(&dir)
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("starting nginx as the origin")?;
        let o = Origin {
            child: Some(child),
            port,
        };
        let t0 = Instant::now();
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            if t0.elapsed() > START_TIMEOUT {
                bail!(
                    "the origin (nginx) did not listen on {port}: {}",
                    std::fs::read_to_string(dir.join("error.log"))
                        .unwrap_or_default()
                        .trim()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(o)
    }
}

impl Drop for Origin {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Fresh edges (empty caches) and HAProxy for `mode`. Field order:
/// HAProxy stops before the edges.
struct Edges {
    haproxy: Haproxy,
    replicas: Vec<Replica>,
}

fn bring_up_edges(env: &Env, mode: &str, origin: &Origin, cache: u64) -> Result<Edges> {
    sys::drop_caches()?;
    let n = if mode == "uri" { REPLICAS } else { 1 };
    let cpu = common::pinning(1).0;
    let empty = env.work.join("edge-root");
    std::fs::create_dir_all(&empty)?;
    let mut replicas = Vec::new();
    for k in 0..n {
        let dir = env.work.join(format!("edge-cache-r{k}"));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)?;
        let extra = [
            "--origin".to_string(),
            format!("http://{}:{}", env.net.host_addr(k), origin.port),
            "--cache-dir".into(),
            dir.display().to_string(),
            "--cache-size".into(),
            cache.to_string(),
        ];
        replicas.push(Replica::start(
            k,
            env.net,
            &empty,
            &env.mems[k],
            env.blkios[k].as_ref(),
            cpu.as_deref(),
            env.work,
            &extra,
        )?);
    }
    let haproxy = Haproxy::start(mode, env.net, env.work, n)?;
    Ok(Edges { haproxy, replicas })
}

/// One measured run of `mode`: the warm-up pass, then the measured pass.
fn edge_run(
    env: &Env,
    p: &Plan,
    mode: &str,
    origin: &Origin,
    cache: u64,
    paths: &[String],
) -> Result<BTreeMap<String, f64>> {
    let up = bring_up_edges(env, mode, origin, cache)?;
    let (mut m, s0, s1) = warm_then_measure(env, p, up.haproxy.port, paths, || {
        up.replicas
            .iter()
            .map(|r| scrape(r.addr))
            .collect::<Result<Vec<Counters>>>()
    })?;
    let (mut body, mut fetched) = (0.0, 0.0);
    for (k, (a, b)) in s0.iter().zip(&s1).enumerate() {
        let served = b.body - a.body;
        let from_origin = b.origin - a.origin;
        body += served;
        fetched += from_origin;
        if served > 0.0 {
            m.insert(format!("hit_r{k}"), (1.0 - from_origin / served).max(0.0));
        }
        m.insert(format!("served_mb_r{k}"), served / 1e6);
    }
    if body > 0.0 {
        m.insert("hit_ratio".into(), (1.0 - fetched / body).max(0.0));
    }
    m.insert("origin_mb".into(), fetched / 1e6);
    m.insert("edges".into(), up.replicas.len() as f64);
    Ok(m)
}

/// The whole `--edge` run, on the namespaces and cgroups `run` made.
pub(super) fn run(
    a: &ScaleoutArgs,
    p: &Plan,
    env: &Env,
    paths: &[String],
    mut machine: Machine,
) -> Result<()> {
    let cache = if a.quick {
        (p.working_set() as f64 / 2.7) as u64
    } else {
        parse_bytes(&a.edge_cache)?
    };
    let ws = p.working_set();
    let origin = Origin::start(&env.roots[0], env.work)?;
    if let Ok(v) = crate::servers::Server::NginxSendfile.version() {
        machine.versions.insert("origin".into(), v);
    }
    let title = format!(
        "scaleout --edge: HAProxy over spindle caching edges, {} files of {} KiB ({:.2} GB) from one origin, one edge vs three by uri",
        p.files,
        p.file_size >> 10,
        ws as f64 / 1e9
    );
    let mut report = Report::new(
        "scaleout-edge",
        &title,
        machine,
        json!({"files": p.files, "file_size": p.file_size, "working_set": ws,
               "edge_cache_bytes": cache, "edges": REPLICAS, "warmup_seconds": p.warmup,
               "seconds": p.seconds, "parallel": p.parallel, "rounds": p.rounds}),
    );
    report.baseline = "one".into();
    report.primary = "hit_ratio".into();
    if a.quick {
        report.smoke_test(QUICK_SCALEOUT);
    }
    report.notes = vec![
        format!(
            "each edge: spindle io-uring, 1 worker, in its own network namespace and memory cgroup ({} MiB), an empty root, `--origin http://10.{}.k.1:PORT` (Debian's nginx on the host, serving the working set), its own `--cache-dir` (fresh every run) and `--cache-size {}` ({:.2} GB: the working set is {:.2}× one cache, {:.2}× the three)",
            p.cgroup >> 20,
            env.net.octet,
            cache,
            cache as f64 / 1e9,
            ws as f64 / cache as f64,
            ws as f64 / (3 * cache) as f64
        ),
        "one: HAProxy over one edge; uri: HAProxy `balance uri`, `hash-type consistent` over three; send-proxy-v2, health checks as in `scaleout`".into(),
        format!(
            "load: spindle-load, {} keep-alive connections to HAProxy, uniformly random URLs over the working set (fresh seed per run), a {} s warm-up pass (the caches fill) then the {} s measured pass; `echo 3 > drop_caches` before every run; modes interleaved, the first alternating by round",
            p.parallel, p.warmup, p.seconds
        ),
        "hit ratio = 1 − body bytes the edges fetched from the origin (spindle_edge_origin_bytes_total) / body bytes they served (spindle_response_body_bytes_total), over the measured pass; 'all' over the edges of the mode".into(),
    ];
    let group = format!(
        "working set {:.2} GB = {:.1}× one edge's cache",
        ws as f64 / 1e9,
        ws as f64 / cache as f64
    );
    in_rounds(
        &mut report,
        &group,
        p.rounds,
        &EDGE_MODES,
        "scaleout --edge",
        |mode| {
            let r = edge_run(env, p, mode, &origin, cache, paths);
            let line = r.as_ref().map(|m| {
            let hits: Vec<String> = (0..REPLICAS)
                .filter_map(|k| m.get(&format!("hit_r{k}")).map(|h| format!("{h:.3}")))
                .collect();
            format!(
                "{mode:<4} hit {:.3} ({})  {:.0} MB from the origin  {:>8.0} fetches/s  p99 {:.1} ms",
                m.get("hit_ratio").unwrap_or(&0.0),
                hits.join(" "),
                m.get("origin_mb").unwrap_or(&0.0),
                m.get("fetches_per_sec").unwrap_or(&0.0),
                m.get("fetch_ms_p99").unwrap_or(&0.0),
            )
        })
        .unwrap_or_default();
            (r, line)
        },
    );
    if !report.smoke_test {
        report.extra_md.push(edge_verdict(&report, &group));
    }
    report.machine.finish();
    let files = report.write(&a.out, "scaleout-edge", &EDGE_COLUMNS, "hit ratio")?;
    for f in files {
        eprintln!("wrote {}", f.display());
    }
    Ok(())
}

/// The bar: the three edges' hit ratio ≥ 2.5× one edge's.
fn edge_verdict(r: &Report, group: &str) -> String {
    let med = |s: &str| r.median(group, s, "hit_ratio");
    let mut o = format!("## The bar: three edges by uri ≥ {BAR}× one edge's hit ratio\n\n");
    if let (Some(u), Some(one)) = (med("uri"), med("one")) {
        let ratio = u / one.max(1e-9);
        o.push_str(&format!(
            "- uri / one, medians: {u:.3} / {one:.3} = **{ratio:.2}×** ({})\n",
            if ratio >= BAR { "met" } else { "MISSED" },
        ));
    }
    o
}
