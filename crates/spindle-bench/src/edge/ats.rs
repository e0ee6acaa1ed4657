//! Apache Traffic Server (Debian's `trafficserver`) as an edge: its
//! `slice` plugin (1 MiB blocks) over `cache_range_requests`, the way its
//! docs set up a CDN edge for large objects, with a cache span of the
//! bytes the other edges hold, one event thread (as the other edges'
//! one worker) and 32 disk threads (as nginx's `aio threads`). It runs
//! as a private instance from a runroot of its own (`runroot.yaml`:
//! Debian's binaries and plugins, the rest beneath DIR/ts), as root
//! without changing user (`user_id #-1`), listening on 127.0.0.1:PORT.

use std::path::Path;
use std::process::Command;

use anyhow::{bail, Context, Result};

use super::{FRESH_SECS, ORIGIN_ADDR, ORIGIN_PORT, SLICE};
use crate::servers::which;

/// Disk threads of the cache span (nginx's `thread_pool` is 32).
const DISK_THREADS: u32 = 32;

/// The command line of a fresh instance in `dir` (its cache in
/// `dir/cache`, `cache_bytes` of it).
pub fn argv(cache_bytes: u64, dir: &Path, port: u16) -> Result<Vec<String>> {
    let ts = which("traffic_server")
        .context("edge's ats-slice needs Traffic Server (apt-get install trafficserver)")?;
    let root = dir.join("ts");
    let etc = root.join("etc");
    for d in ["etc", "var", "run", "log", "data"] {
        std::fs::create_dir_all(root.join(d))?;
    }
    // Debian's configuration (body_factory, ip_allow.yaml, logging.yaml
    // and the rest) as the base, then ours over it.
    let copied = Command::new("cp")
        .args(["-r", "/etc/trafficserver/."])
        .arg(&etc)
        .status()
        .context("copying /etc/trafficserver")?;
    if !copied.success() {
        bail!("could not copy /etc/trafficserver into {}", etc.display());
    }
    let r = root.display();
    let cache = dir.join("cache");
    std::fs::write(
        root.join("runroot.yaml"),
        format!(
            "prefix: {r}\nexec_prefix: {r}\nbindir: /usr/bin\nsbindir: /usr/sbin\n\
             sysconfdir: {r}/etc\ndatadir: {r}/data\nincludedir: /usr/include\n\
             libdir: /usr/lib/trafficserver\nlibexecdir: /usr/lib/trafficserver/modules\n\
             localstatedir: {r}/var\nruntimedir: {r}/run\nlogdir: {r}/log\ncachedir: {r}/var\n"
        ),
    )?;
    let records = format!(
        "CONFIG proxy.config.http.server_ports STRING {port}\n\
         CONFIG proxy.config.admin.user_id STRING #-1\n\
         CONFIG proxy.config.exec_thread.autoconfig INT 0\n\
         CONFIG proxy.config.exec_thread.limit INT 1\n\
         CONFIG proxy.config.accept_threads INT 0\n\
         CONFIG proxy.config.cache.threads_per_disk INT {DISK_THREADS}\n\
         CONFIG proxy.config.reverse_proxy.enabled INT 1\n\
         CONFIG proxy.config.url_remap.remap_required INT 1\n\
         CONFIG proxy.config.http.cache.http INT 1\n\
         CONFIG proxy.config.http.cache.required_headers INT 0\n\
         CONFIG proxy.config.http.cache.heuristic_min_lifetime INT {FRESH_SECS}\n\
         CONFIG proxy.config.http.cache.heuristic_max_lifetime INT {FRESH_SECS}\n\
         CONFIG proxy.config.log.logging_enabled INT 0\n\
         CONFIG proxy.config.crash_log_helper STRING /bin/true\n\
         CONFIG proxy.config.http.keep_alive_no_activity_timeout_in INT 120\n"
    );
    std::fs::write(etc.join("records.config"), records)?;
    std::fs::write(
        etc.join("storage.config"),
        format!("{} {}\n", cache.display(), cache_bytes),
    )?;
    std::fs::write(
        etc.join("remap.config"),
        format!(
            "map http://127.0.0.1:{port}/ http://{ORIGIN_ADDR}:{ORIGIN_PORT}/ \
             @plugin=slice.so @pparam=--blockbytes={SLICE} @plugin=cache_range_requests.so\n"
        ),
    )?;
    std::fs::write(etc.join("plugin.config"), "")?;
    Ok(vec![
        ts.display().to_string(),
        format!("--run-root={}", root.join("runroot.yaml").display()),
    ])
}

/// `traffic_server --version`'s first line, if it runs.
pub fn version() -> Option<String> {
    let out = Command::new(which("traffic_server")?)
        .arg("--version")
        .output()
        .ok()?;
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    text.lines()
        .find(|l| l.starts_with("Traffic Server "))
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
}
