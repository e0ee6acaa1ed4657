//! SIGHUP: the configuration read again, and handed to every worker.
//!
//! The main thread re-reads the command line's config file, checks it as
//! at start (a bad file keeps the running configuration, with one error
//! line), opens the new document roots, and publishes the result here
//! with a new generation. Each worker compares generations on its tick
//! (every 250 ms) and takes the new configuration between requests: a
//! response in progress keeps the file it opened, so a download runs to
//! its end across a reload. What the workers were built around (listening
//! sockets, workers, backend, chunk buffers, caches' sizes, the metrics
//! listener, the user) takes a restart; a reload that changes those says
//! so and applies the rest.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use spindle_core::SessionConfig;

use crate::config::Config;
use crate::fs::{Root, Roots};

/// What a reload gives the workers.
#[derive(Clone)]
pub struct Reloadable {
    pub cfg: Arc<Config>,
    pub session_cfg: Arc<SessionConfig>,
    pub roots: Arc<Roots>,
}

/// The current [`Reloadable`] and its generation, shared by all workers.
pub struct Shared {
    current: Mutex<Reloadable>,
    generation: AtomicU64,
}

impl Shared {
    pub fn new(r: Reloadable) -> Arc<Shared> {
        Arc::new(Shared {
            current: Mutex::new(r),
            generation: AtomicU64::new(0),
        })
    }

    /// Checked by each worker on its tick: one atomic load.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    pub fn current(&self) -> (u64, Reloadable) {
        let r = self
            .current
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        (self.generation(), r)
    }

    fn publish(&self, r: Reloadable) {
        *self.current.lock().unwrap_or_else(|p| p.into_inner()) = r;
        self.generation.fetch_add(1, Ordering::AcqRel);
    }

    /// Reads the configuration again from `running`'s command line and
    /// config file. `Ok` names the keys that changed but take a restart;
    /// `Err` is one line, and nothing changed.
    pub fn reload(&self, running: &Config) -> Result<Vec<&'static str>, String> {
        let Some(cli) = running.source.clone() else {
            return Err("no command line to read again".into());
        };
        let mut cfg = Config::from_cli(cli)?;
        crate::server::cap_open_file_cache(&mut cfg);
        let main = Root::open(&cfg.root)?;
        let mut hosts = Vec::with_capacity(cfg.hosts.len());
        for h in &cfg.hosts {
            hosts
                .push(Root::open(&h.root).map_err(|e| format!("host {}: {e}", h.names.join(",")))?);
        }
        let fixed = restart_only(running, &cfg);
        keep_restart_only(&mut cfg, running);
        let session_cfg = Arc::new(cfg.session_config());
        self.publish(Reloadable {
            cfg: Arc::new(cfg),
            session_cfg,
            roots: Arc::new(Roots::new(main, hosts)),
        });
        Ok(fixed)
    }
}

/// Puts back the running values of the keys a reload cannot change.
fn keep_restart_only(new: &mut Config, running: &Config) {
    new.listen.clone_from(&running.listen);
    new.tls_listen.clone_from(&running.tls_listen);
    new.proxy_listen.clone_from(&running.proxy_listen);
    new.workers = running.workers;
    new.backend = running.backend;
    new.chunk_size = running.chunk_size;
    new.max_inflight = running.max_inflight;
    new.io_threads = running.io_threads;
    new.max_connections = running.max_connections;
    new.max_connections_per_ip = running.max_connections_per_ip;
    new.open_file_cache = running.open_file_cache;
    new.small_file_cache = running.small_file_cache;
    // A new path is reopened (server.rs); turning the log on or off takes
    // a restart (the writer thread).
    if new.access_log.is_some() != running.access_log.is_some() {
        new.access_log.clone_from(&running.access_log);
    }
    new.user.clone_from(&running.user);
    new.metrics = running.metrics;
    new.sendfile = running.sendfile;
}

/// The keys whose change needs a restart, among those that changed.
fn restart_only(a: &Config, b: &Config) -> Vec<&'static str> {
    let mut v = Vec::new();
    let mut check = |changed: bool, name: &'static str| {
        if changed {
            v.push(name);
        }
    };
    check(a.listen != b.listen, "listen");
    check(a.tls_listen != b.tls_listen, "tls-listen");
    check(a.proxy_listen != b.proxy_listen, "proxy-listen");
    check(a.workers != b.workers, "workers");
    check(a.backend != b.backend, "backend");
    check(a.chunk_size != b.chunk_size, "chunk-size");
    check(a.max_inflight != b.max_inflight, "max-inflight");
    check(a.io_threads != b.io_threads, "io-threads");
    check(a.max_connections != b.max_connections, "max-connections");
    check(
        a.max_connections_per_ip != b.max_connections_per_ip,
        "max-connections-per-ip",
    );
    check(a.open_file_cache != b.open_file_cache, "open-file-cache");
    check(a.small_file_cache != b.small_file_cache, "small-file-cache");
    check(
        a.access_log.is_some() != b.access_log.is_some(),
        "access-log (on or off)",
    );
    check(a.user != b.user, "user");
    check(a.metrics != b.metrics, "metrics");
    check(a.sendfile != b.sendfile, "sendfile");
    v
}
