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

use std::sync::Arc;

use crate::config::Config;
use crate::conn::{Published, Reloadable};
use crate::fs::Roots;

/// Reads the configuration again from `running`'s command line and
/// config file, and publishes it for the workers. `Ok` names the keys
/// that changed but take a restart; `Err` is one line, and nothing
/// changed.
pub fn reload(published: &Published, running: &Config) -> Result<Vec<&'static str>, String> {
    let Some(cli) = running.source.clone() else {
        return Err("no command line to read again".into());
    };
    let mut cfg = Config::from_cli(cli)?;
    cfg.cap_open_file_cache();
    let mut roots = Roots::open(&cfg.root, &cfg.hosts)?;
    let fixed = keep_restart_only(&mut cfg, running);
    if let Some(c) = &cfg.compress {
        // Opened at start, as the same user: there still.
        roots = roots.with_cache(crate::fs::Root::open(&c.cache.dir)?);
    }
    if let Some(e) = &cfg.edge {
        roots = roots.with_edge(crate::fs::Root::open(&e.cache_dir)?);
    }
    let session_cfg = Arc::new(cfg.session_config());
    published.publish(Reloadable {
        cfg: Arc::new(cfg),
        session_cfg,
        roots: Arc::new(roots),
    });
    Ok(fixed)
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
        // ALPN is part of the TLS configuration the workers were given.
        http2 => "http2",
        // The listing helpers and each worker's listing cache are made at
        // start; a session told to list without them had nothing to ask.
        autoindex => "autoindex",
        // Each device's depth is made when the worker first reads it.
        depth => "depth",
        backend_is_default => "backend",
        // The ACME thread and its names are set up at start.
        acme => "acme-*",
        // The helpers and the cache directory are set up at start.
        compress => "compress-*",
        // The edge's helpers, origin client and cache are set up at start.
        edge => "origin, cache-*",
    );
    every_key_is_placed(new);
    changed
}

/// Every key of Config, each said to be restart-only (put back by
/// [`keep_restart_only`]) or reloadable (taken as read). No `..`: a new key
/// does not compile until it is placed here.
fn every_key_is_placed(cfg: &Config) {
    let Config {
        // Restart-only (put back by keep_restart_only).
        listen: _,
        tls_listen: _,
        proxy_listen: _,
        workers: _,
        backend: _,
        chunk_size: _,
        max_inflight: _,
        io_threads: _,
        max_connections: _,
        max_connections_per_ip: _,
        open_file_cache: _,
        small_file_cache: _,
        user: _,
        metrics: _,
        sendfile: _,
        http2: _,
        http3_port: _,
        http3: _,
        autoindex: _,
        depth: _,
        backend_is_default: _,
        acme: _,
        compress: _,
        edge: _,
        // Reloadable: the access log's path (its on/off is above), what a
        // session decides, the document roots, limits and timeouts per
        // request or connection, TLS certificates (read again by
        // `tls::Shared::reload`).
        access_log: _,
        root: _,
        proxy_from: _,
        tls_certs: _,
        keepalive_timeout: _,
        header_timeout: _,
        send_timeout: _,
        drain_timeout: _,
        max_header_size: _,
        log_format: _,
        error_log: _,
        log_level: _,
        limit_rate: _,
        limit_rate_after: _,
        dotfiles: _,
        open_file_cache_valid: _,
        first_miss: _,
        extra_headers: _,
        precompressed: _,
        redirect_https: _,
        error_pages: _,
        charset: _,
        rules: _,
        hosts: _,
        source: _,
    } = cfg;
}
