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
use crate::fs::Roots;

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
        cfg.cap_open_file_cache();
        let roots = Roots::open(&cfg.root, &cfg.hosts)?;
        let fixed = keep_restart_only(&mut cfg, running);
        let session_cfg = Arc::new(cfg.session_config());
        self.publish(Reloadable {
            cfg: Arc::new(cfg),
            session_cfg,
            roots: Arc::new(roots),
        });
        Ok(fixed)
    }
}

/// Puts back the running values of the keys a reload cannot change, and
/// names those whose value changed. One list, so that no key is put back
/// without being named, or named without being put back.
fn keep_restart_only(new: &mut Config, running: &Config) -> Vec<&'static str> {
    let mut changed = Vec::new();
    macro_rules! keep {
        ($($field:ident => $name:literal),* $(,)?) => {$(
            if new.$field != running.$field {
                changed.push($name);
                new.$field.clone_from(&running.$field);
            }
        )*};
    }
    keep!(
        listen => "listen",
        tls_listen => "tls-listen",
        proxy_listen => "proxy-listen",
        workers => "workers",
        backend => "backend",
        chunk_size => "chunk-size",
        max_inflight => "max-inflight",
        io_threads => "io-threads",
        max_connections => "max-connections",
        max_connections_per_ip => "max-connections-per-ip",
        open_file_cache => "open-file-cache",
        small_file_cache => "small-file-cache",
    );
    // A new path is reopened (server.rs); turning the log on or off takes
    // a restart (the writer thread).
    if new.access_log.is_some() != running.access_log.is_some() {
        changed.push("access-log (on or off)");
        new.access_log.clone_from(&running.access_log);
    }
    keep!(
        user => "user",
        metrics => "metrics",
        sendfile => "sendfile",
    );
    changed
}
