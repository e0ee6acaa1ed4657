//! Server lifecycle: bind, start one worker per core, wait for SIGINT or
//! SIGTERM (reopening the access log on SIGUSR1, reloading the TLS
//! certificates on SIGHUP), drain, exit.

use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};

use crate::accesslog::AccessLog;
use crate::backend;
use crate::config::{BackendKind, Cap, Config, FirstMiss};
use crate::conn::{AcceptGate, ShutdownSignal, WorkerContext};
use crate::fs::Roots;
use crate::listen::{Kind, Listeners};
use crate::memory::MemoryWatch;
use crate::net;
use crate::recent::RecentFiles;

/// Runs the server until it is told to stop. Returns a one-line error for
/// the user on failure to start.
pub fn run(mut cfg: Config) -> Result<(), String> {
    // Read before anything can replace the binary (a handover runs it).
    let program = crate::handover::Program::current();
    crate::sys::keep_freed_memory();
    crate::errlog::configure(cfg.log_level, cfg.error_log.as_deref())?;
    let mut roots = Roots::open(&cfg.root, &cfg.hosts)?;
    choose_backend(&mut cfg)?;
    // Descriptors: raise the soft limit to the hard one (as nginx's
    // worker_rlimit_nofile), then give the open-file caches at most half of
    // it. Connections may still run the table full; a worker that then
    // meets EMFILE sheds half its cache before it pauses accepting.
    raise_nofile_limit();
    cfg.cap_open_file_cache();
    let acme_store = open_acme_store(&cfg)?;

    let sigset = block_stop_signals();

    // Sockets from the spindle this one replaces (SIGUSR2), from systemd
    // (socket activation), or bound here.
    let (inherited, handover_ready) = match crate::handover::inherited()? {
        Some(h) => (h.groups, Some(h.ready)),
        None => (Vec::new(), None),
    };
    let listeners = Listeners::open(&cfg, cfg.workers as usize, inherited)?;
    cfg.check_backend_serves(listeners.has(Kind::Tls))?;
    let quic = open_quic(&mut cfg, &listeners)?;
    let tls = load_tls(&listeners, &cfg)?;
    // The metrics listener, bound with the others (before dropping
    // privileges); served from its own thread once the workers run.
    let metrics_listener = listeners.metrics()?;
    let (log, log_thread) = match &cfg.access_log {
        Some(target) => {
            let (l, h) = AccessLog::open(target)?;
            (l, Some(h))
        }
        None => (AccessLog::disabled(), None),
    };
    // Ports bound, root and logs open: the rest needs no privilege.
    if let Some(user) = &cfg.user {
        switch_user(user)?;
    }
    // Automatic HTTPS: the state directory is checked as the user that
    // will write it, and stored certificates are in before any worker.
    let acme = match (&cfg.acme, &tls, acme_store) {
        (Some(acme), Some(t), Some(store)) => {
            let mut addrs = listeners.addrs(Kind::Tls);
            addrs.extend(listeners.addrs(Kind::Plain));
            Some(crate::acme::prepare(acme, store, t.clone(), addrs)?)
        }
        _ => None,
    };

    // The cache is written as the user the workers run as.
    let compressor = start_compressor(&mut cfg)?;
    if let Some(c) = &compressor {
        roots = roots.with_cache(c.dir()?);
    }
    let edge = start_edge(&cfg)?;
    if let Some(e) = &edge {
        roots = roots.with_edge(crate::fs::Root::open(e.store().dir())?);
    }
    let root = Arc::new(roots);
    let cfg = Arc::new(cfg);
    let shared = Shared::new(&cfg, root, tls, log.clone(), compressor, edge)?;
    let workers = Workers::start(&cfg, &listeners, &shared, quic)?;
    if let Some((listener, addr)) = metrics_listener {
        crate::metrics::serve(listener, shared.registry.clone())?;
        // Before the startup line, so that a script that waits for that
        // line has this one too.
        crate::info!("metrics on http://{addr}/metrics");
    }
    announce(&cfg, &listeners, &shared, handover_ready.is_none());
    // Ordering starts once the startup line is out.
    if let Some(acme) = acme {
        acme.spawn()?;
    }
    // The spindle this one replaces drains once it reads this.
    if let Some(ready) = handover_ready {
        crate::handover::say_ready(ready);
    }

    let sig = wait_for_stop(&sigset, &program, &listeners, &shared, &workers, &log);
    say_stopping(sig, &cfg);
    let failed = workers.stop();
    log.shut();
    drop(log);
    if let Some(h) = log_thread {
        let _ = h.join();
    }
    match failed {
        Some(e) => Err(e),
        None => {
            crate::info!("stopped");
            Ok(())
        }
    }
}

/// ACME's state directory, if ACME is on: checked before anything is
/// logged (one error line), and given to --user, who will write it.
fn open_acme_store(cfg: &Config) -> Result<Option<crate::acme::store::Store>, String> {
    let Some(a) = &cfg.acme else {
        return Ok(None);
    };
    let owner = match &cfg.user {
        Some(u) if is_root() => Some(lookup_user(u)?),
        _ => None,
    };
    crate::acme::store::Store::open(&a.state, &a.directory, owner).map(Some)
}

/// Waits for a stop signal (SIGINT, SIGTERM, or the end of a handover),
/// and returns it; on the way, SIGUSR1 reopens the logs, SIGHUP reloads
/// the configuration (and reopens the logs), SIGUSR2 starts a new binary
/// on the same sockets.
fn wait_for_stop(
    sigset: &libc::sigset_t,
    program: &crate::handover::Program,
    listeners: &Listeners,
    shared: &Shared,
    workers: &Workers,
    log: &AccessLog,
) -> libc::c_int {
    let mut sig: libc::c_int = 0;
    loop {
        // SAFETY: sigset is valid and `sig` a live out-parameter.
        unsafe { libc::sigwait(sigset, &mut sig) };
        match sig {
            libc::SIGUSR1 => {
                // The error log first: the access log's writer says
                // "reopened" in it.
                crate::errlog::reopen();
                log.reopen();
            }
            libc::SIGHUP => reload(&shared.reloads, shared.tls.as_deref(), log),
            libc::SIGUSR2 => crate::handover::start(
                program,
                listeners,
                &shared.gate,
                &workers.eventfds,
                workers.handles.len(),
            ),
            _ => return sig,
        }
    }
}

/// Says why the server stops (signal `sig`) and that it drains, in the
/// log and to systemd.
fn say_stopping(sig: libc::c_int, cfg: &Config) {
    let why = match (sig, crate::handover::handed_to()) {
        (libc::SIGINT, _) => "got SIGINT".to_string(),
        (_, Some(pid)) => format!("handed over to pid {pid}"),
        _ => "got SIGTERM".to_string(),
    };
    crate::info!(
        "{why}, finishing responses in flight (up to {:.0?})",
        cfg.drain_timeout
    );
    if crate::handover::handed_to().is_none() {
        // After a handover the service goes on under its new main pid.
        net::sd_notify("STOPPING=1");
    }
}

/// The backend asked for, or, when io-uring is the default and cannot run
/// here, posix-aio in its place (said in the log).
fn choose_backend(cfg: &mut Config) -> Result<(), String> {
    let Err(e) = backend::probe(cfg.backend) else {
        return Ok(());
    };
    if !(cfg.backend_is_default && cfg.backend == BackendKind::IoUring) {
        return Err(e);
    }
    let fallback = BackendKind::PosixAio;
    backend::probe(fallback).map_err(|e2| format!("{e}; fallback {}: {e2}", fallback.name()))?;
    crate::warn!("{e}; falling back to the {} backend", fallback.name());
    cfg.backend = fallback;
    Ok(())
}

/// The certificates of the HTTPS listeners, if there are any.
fn load_tls(
    listeners: &Listeners,
    cfg: &Config,
) -> Result<Option<Arc<crate::tls::Shared>>, String> {
    if !listeners.has(Kind::Tls) {
        return Ok(None);
    }
    let acme_names = cfg.acme.as_ref().map_or(&[][..], |a| &a.certs[..]);
    if let Some(a) = &cfg.acme {
        crate::acme::check_tls_certs(a, &cfg.tls_certs)?;
    }
    let shared =
        crate::tls::Shared::load_with_acme(&cfg.tls_certs, cfg.serves_http2(), acme_names)?;
    let path = match net::ktls_available() {
        Ok(()) => "kernel TLS is available but not used yet".to_string(),
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {
            "no kernel TLS (this kernel has no `tls` module, CONFIG_TLS)".to_string()
        }
        Err(e) => format!("no kernel TLS ({e})"),
    };
    crate::info!(
        "HTTPS: {path}; rustls runs the handshake, spindle seals the records in user space, bodies read into buffers"
    );
    Ok(Some(Arc::new(shared)))
}

/// What every worker shares, made once.
struct Shared {
    root: Arc<Roots>,
    tls: Option<Arc<crate::tls::Shared>>,
    reloads: Arc<crate::conn::Published>,
    session_cfg: Arc<spindle_core::SessionConfig>,
    per_ip: Option<Arc<crate::perip::PerIp>>,
    memory: Arc<MemoryWatch>,
    recent: Arc<RecentFiles>,
    registry: Arc<crate::metrics::Registry>,
    lister: Option<Arc<crate::lister::Pool>>,
    checker: Arc<crate::passwords::Checker>,
    compressor: Option<Arc<crate::compress::Compressor>>,
    edge: Option<Arc<crate::edge::Edge>>,
    log: AccessLog,
    gate: Arc<AcceptGate>,
    flag: Arc<AtomicBool>,
}

/// Starts the compression helpers (`--compress`). A cache directory that
/// cannot be made or opened is an error when the user named compression,
/// and otherwise (on by default) one warning, and compression off.
fn start_compressor(cfg: &mut Config) -> Result<Option<Arc<crate::compress::Compressor>>, String> {
    let Some(c) = &cfg.compress else {
        return Ok(None);
    };
    match crate::compress::Compressor::start(c.cache.clone()) {
        Ok(z) => Ok(Some(z)),
        Err(e) if !c.explicit => {
            crate::errlog::write(
                crate::errlog::Level::Warn,
                format_args!(
                    "{e}: compression on the fly is off (give --compress-cache DIR, or --compress off)"
                ),
            );
            cfg.compress = None;
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

/// Starts the edge (`--origin`): its cache directory indexed, its origin
/// client, its helper threads.
fn start_edge(cfg: &Config) -> Result<Option<Arc<crate::edge::Edge>>, String> {
    let Some(e) = &cfg.edge else {
        return Ok(None);
    };
    let store = Arc::new(crate::edge::store::Store::open(&e.cache_dir, e.cache_size)?);
    let signer = e
        .s3
        .as_ref()
        .map(|(region, creds)| spindle_core::edge::sigv4::Signer::new(creds.clone(), region, "s3"));
    let origin = crate::edge::fetch::Origin::new(e.origins.clone(), &e.roots, signer);
    let policy = crate::edge::fetcher::Policy {
        default_ttl: e.ttl,
        stale_default: 0,
        stale_max: crate::config::EDGE_STALE_MAX,
    };
    let fetcher = crate::edge::fetcher::Fetcher::start(
        origin,
        store,
        policy,
        crate::edge::fetcher::DEFAULT_THREADS,
    )?;
    crate::edge::publish(&fetcher);
    Ok(Some(fetcher))
}

impl Shared {
    fn new(
        cfg: &Arc<Config>,
        root: Arc<Roots>,
        tls: Option<Arc<crate::tls::Shared>>,
        log: AccessLog,
        compressor: Option<Arc<crate::compress::Compressor>>,
        edge: Option<Arc<crate::edge::Edge>>,
    ) -> Result<Shared, String> {
        let session_cfg = Arc::new(cfg.session_config());
        let memory = Arc::new(MemoryWatch::probe());
        Ok(Shared {
            reloads: crate::conn::Published::new(crate::conn::Reloadable {
                cfg: cfg.clone(),
                session_cfg: session_cfg.clone(),
                roots: root.clone(),
            }),
            root,
            tls,
            session_cfg,
            per_ip: (cfg.max_connections_per_ip > 0)
                .then(|| crate::perip::PerIp::new(cfg.max_connections_per_ip)),
            recent: Arc::new(RecentFiles::for_memory(memory.budget())),
            memory,
            registry: Arc::new(crate::metrics::Registry::new(
                cfg.workers as usize,
                cfg.backend.name(),
                log.clone(),
            )),
            lister: if cfg.autoindex {
                Some(crate::lister::Pool::start()?)
            } else {
                None
            },
            // Started whatever the rules: a reload may add an `auth` rule.
            checker: crate::passwords::Checker::start()?,
            compressor,
            edge,
            log,
            gate: Arc::new(AcceptGate::default()),
            flag: Arc::new(AtomicBool::new(false)),
        })
    }
}

/// HTTP/3's UDP sockets (`--http3`): one per worker in a `SO_REUSEPORT`
/// group on the first HTTPS listener's address, bound with the other
/// listeners (before privileges are dropped); its port goes into
/// `Alt-Svc`.
fn open_quic(
    cfg: &mut Config,
    listeners: &Listeners,
) -> Result<Option<Vec<crate::quic::udp::Udp>>, String> {
    if !cfg.http3 {
        return Ok(None);
    }
    let Some(addr) = listeners.addrs(Kind::Tls).first().copied() else {
        return Err("--http3 needs an HTTPS listener (--tls-listen ADDR)".into());
    };
    if !cfg.backend.has(crate::config::Cap::Http2) {
        return Err(format!(
            "--http3: backend {} serves HTTP/1.1 only (HTTP/3 is served by io-uring and posix-aio)",
            cfg.backend.name()
        ));
    }
    let workers = cfg.workers as usize;
    if workers > crate::quic::cid::MAX_WORKERS {
        return Err(format!(
            "--http3 serves at most {} workers",
            crate::quic::cid::MAX_WORKERS
        ));
    }
    let group = crate::quic::udp::bind_group(addr, workers)
        .map_err(|e| format!("--http3: cannot bind UDP {addr}: {e}"))?;
    cfg.http3_port = Some(addr.port());
    Ok(Some(group))
}

/// The worker threads, and the eventfds that wake them.
struct Workers {
    handles: Vec<std::thread::JoinHandle<Result<(), String>>>,
    /// Shared with a handover's watcher thread, which may open the gate.
    eventfds: Arc<Vec<OwnedFd>>,
    flag: Arc<AtomicBool>,
}

impl Workers {
    /// Starts one worker per `cfg.workers` and waits until each is set up
    /// (or the first fails: then all stop).
    fn start(
        cfg: &Arc<Config>,
        listeners: &Listeners,
        s: &Shared,
        quic: Option<Vec<crate::quic::udp::Udp>>,
    ) -> Result<Workers, String> {
        let workers = cfg.workers as usize;
        let keys = crate::quic::Keys::random();
        let mut quic: Vec<Option<_>> = quic.into_iter().flatten().map(Some).collect();
        let mut eventfds = Vec::new();
        let mut handles = Vec::new();
        let (ready_tx, ready_rx) = mpsc::channel();
        for id in 0..workers {
            let (mine, proxied_range, tls_from) = listeners.for_worker(id, workers)?;
            let efd = crate::sys::new_eventfd()?;
            let ctx = WorkerContext {
                id,
                listeners: mine,
                proxied: proxied_range,
                tls_from,
                tls: s.tls.clone(),
                root: s.root.clone(),
                per_ip: s.per_ip.clone(),
                reload: s.reloads.clone(),
                reload_gen: 0,
                cfg: cfg.clone(),
                session_cfg: s.session_cfg.clone(),
                log: s.log.clone(),
                recent: s.recent.clone(),
                memory: s.memory.clone(),
                shutdown: ShutdownSignal {
                    flag: s.flag.clone(),
                    eventfd: efd.as_raw_fd(),
                    gate: s.gate.clone(),
                },
                metrics: s.registry.worker(id),
                lister: s.lister.clone(),
                checker: s.checker.clone(),
                compressor: s.compressor.clone(),
                edge: s.edge.clone(),
                quic: quic
                    .get_mut(id)
                    .and_then(Option::take)
                    .map(|udp| crate::quic::Setup { udp, keys }),
                ready: ready_tx.clone(),
            };
            eventfds.push(efd);
            let kind = cfg.backend;
            let h = std::thread::Builder::new()
                .name(format!("spindle-w{id}"))
                .spawn(move || {
                    let ready = ctx.ready.clone();
                    let r = backend::run_worker(kind, ctx);
                    if let Err(e) = &r {
                        // If setup failed, this is the first message;
                        // otherwise the receiver is gone and this is ignored.
                        let _ = ready.send(Err(e.clone()));
                    }
                    r
                })
                .map_err(|e| format!("cannot start worker thread: {e}"))?;
            handles.push(h);
        }
        drop(ready_tx);
        let started = Workers {
            handles,
            eventfds: Arc::new(eventfds),
            flag: s.flag.clone(),
        };
        for _ in 0..workers {
            match ready_rx.recv() {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    started.stop();
                    return Err(e);
                }
                Err(_) => return Err("a worker exited during startup".into()),
            }
        }
        Ok(started)
    }

    /// Tells every worker to drain and waits for them: the first error
    /// any returned.
    fn stop(self) -> Option<String> {
        stop(&self.flag, &self.eventfds);
        let mut failed = None;
        for h in self.handles {
            match h.join() {
                Ok(Ok(())) => {}
                Ok(Err(e)) => failed = Some(e),
                Err(_) => failed = Some("a worker panicked".to_string()),
            }
        }
        failed
    }
}

/// The startup lines (scripts and tests read the `serving` one to learn
/// the port), and systemd's READY=1 unless this process is a handover's
/// successor.
fn announce(cfg: &Config, listeners: &Listeners, s: &Shared, notify: bool) {
    let bound = listeners.addrs(Kind::Plain);
    let proxied = listeners.addrs(Kind::Proxy);
    let https = listeners.addrs(Kind::Tls);
    let addrs: Vec<String> = bound
        .iter()
        .map(|a| format!("http://{a}/"))
        .chain(
            proxied
                .iter()
                .map(|a| format!("http://{a}/ (PROXY protocol)")),
        )
        .chain(https.iter().map(|a| format!("https://{a}/")))
        .collect();
    let loopback_only = bound
        .iter()
        .chain(&proxied)
        .chain(&https)
        .all(|a| a.ip().is_loopback());
    let workers = cfg.workers;
    crate::info!(
        "serving {} on {} (backend {}, {} worker{}){}",
        s.root.main().path().display(),
        addrs.join(" "),
        cfg.backend.name(),
        workers,
        if workers == 1 { "" } else { "s" },
        if loopback_only {
            "; to serve other machines, add --listen 0.0.0.0:PORT or --listen [::]:PORT"
        } else {
            ""
        }
    );
    // Basic authentication sends passwords in the clear: say so when a
    // plain listener other machines reach serves a path that asks for one.
    let exposed: Vec<String> = bound
        .iter()
        .filter(|a| !a.ip().is_loopback())
        .map(ToString::to_string)
        .collect();
    if cfg.rules.has_auth() && !cfg.redirect_https && !exposed.is_empty() {
        crate::warn!(
            "rules with auth are reachable over plain HTTP on {}: passwords cross the network in the clear; serve them over --tls-listen, or add --redirect-https",
            exposed.join(" ")
        );
    }
    if cfg.http2 && !cfg.serves_http2() {
        crate::info!(
            "HTTP/2: backend {} serves HTTP/1.1 only (HTTP/2 is served by {})",
            cfg.backend.name(),
            BackendKind::names_with(Cap::Http2, "and")
        );
    }
    if cfg.backend.has(Cap::FirstMiss) && cfg.first_miss != FirstMiss::Cache {
        crate::info!(
            "page cache budget {}; files used once are read with O_DIRECT {} (--first-miss {})",
            s.memory.describe(),
            if cfg.first_miss == FirstMiss::Auto {
                "once it is full"
            } else {
                "always"
            },
            cfg.first_miss.name()
        );
    }
    let plural = |n: usize| if n == 1 { "" } else { "s" };
    if listeners.from_systemd > 0 {
        crate::info!(
            "listening on {} socket{} passed by systemd (--listen ignored)",
            listeners.from_systemd,
            plural(listeners.from_systemd)
        );
    }
    if listeners.inherited > 0 {
        crate::info!(
            "took over {} listener{} from pid {}",
            listeners.inherited,
            plural(listeners.inherited),
            std::os::unix::process::parent_id()
        );
    }
    // A successor in a handover says nothing to systemd: the service is
    // active already, and the manager takes notifications only from its
    // main pid, which is still the process it replaces until that one
    // names this one (`MAINPID=`, handover.rs).
    if notify {
        net::sd_notify(&format!(
            "READY=1\nSTATUS=serving {} on {}\nMAINPID={}",
            s.root.main().path().display(),
            addrs.join(" "),
            std::process::id()
        ));
    }
}

/// SIGHUP: reads the command line's config file again and hands the
/// workers what may change while running (`reload.rs`), and reads the TLS
/// certificates and keys again. A bad file keeps the running
/// configuration (or certificates), with an error line; connections
/// already open are not touched either way.
fn reload(reloads: &crate::conn::Published, tls: Option<&crate::tls::Shared>, log: &AccessLog) {
    net::sd_notify(&format!("RELOADING=1\nMONOTONIC_USEC={}", monotonic_usec()));
    let (_, running) = reloads.current();
    let result = crate::reload::reload(reloads, &running.cfg);
    // The logs, at the paths now configured (the same ones after a bad
    // file): a reload does what SIGUSR1 does too.
    let (_, now) = reloads.current();
    if let Err(e) = crate::errlog::configure(now.cfg.log_level, now.cfg.error_log.as_deref()) {
        crate::error!("{e}; still writing to the old error log");
    }
    if let Some(target) = &now.cfg.access_log {
        log.reopen_at(target);
    }
    match result {
        Ok(fixed) if fixed.is_empty() => {
            crate::info!("got SIGHUP; configuration reloaded")
        }
        Ok(fixed) => crate::warn!(
            "got SIGHUP; configuration reloaded, but {} take effect only at a restart",
            fixed.join(", ")
        ),
        Err(e) => crate::error!("got SIGHUP; {e}; keeping the running configuration"),
    }
    if let Some(t) = tls {
        match t.reload() {
            Ok(()) => crate::info!("TLS certificates reloaded"),
            Err(e) => crate::error!("{e}; keeping the certificates in use"),
        }
    }
    net::sd_notify("READY=1");
}

fn is_root() -> bool {
    // SAFETY: geteuid has no failure and no arguments.
    unsafe { libc::geteuid() == 0 }
}

/// The uid and gid of user `name`.
fn lookup_user(name: &str) -> Result<(u32, u32), String> {
    let cname =
        std::ffi::CString::new(name).map_err(|_| format!("--user {name:?}: not a user name"))?;
    // SAFETY: an all-zero passwd is a valid out-parameter for getpwnam_r.
    let mut pwd: libc::passwd = unsafe { std::mem::zeroed() };
    let mut buf = vec![0 as libc::c_char; 16 * 1024];
    let mut found: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: every pointer refers to a live local of the size passed.
    let rc = unsafe {
        libc::getpwnam_r(
            cname.as_ptr(),
            &mut pwd,
            buf.as_mut_ptr(),
            buf.len(),
            &mut found,
        )
    };
    if rc != 0 || found.is_null() {
        return Err(format!("--user {name}: no such user"));
    }
    Ok((pwd.pw_uid, pwd.pw_gid))
}

/// Switches to `name`'s user and groups (started as root, after binding):
/// as nginx's `user`, so that a bug serves what that user may read, no more.
fn switch_user(name: &str) -> Result<(), String> {
    let (uid, gid) = lookup_user(name)?;
    let cname =
        std::ffi::CString::new(name).map_err(|_| format!("--user {name:?}: not a user name"))?;
    // SAFETY: plain identity calls; initgroups reads the NUL-terminated name.
    unsafe {
        if libc::geteuid() == uid {
            return Ok(());
        }
        if libc::initgroups(cname.as_ptr(), gid) != 0
            || libc::setgid(gid) != 0
            || libc::setuid(uid) != 0
        {
            return Err(format!(
                "cannot switch to user {name}: {} (--user needs spindle started as root)",
                std::io::Error::last_os_error()
            ));
        }
        // A process that can get root back has not dropped it.
        if libc::setuid(0) == 0 {
            return Err(format!(
                "switched to user {name}, but root could be regained; stopping"
            ));
        }
    }
    crate::info!("running as user {name} (uid {uid}, gid {gid})");
    Ok(())
}

/// CLOCK_MONOTONIC in µs, for systemd's `RELOADING=1`.
fn monotonic_usec() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the live local.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000 + ts.tv_nsec as u64 / 1_000
}

fn stop(flag: &AtomicBool, eventfds: &[OwnedFd]) {
    flag.store(true, Ordering::Release);
    for e in eventfds {
        crate::sys::signal_eventfd(e.as_raw_fd());
    }
}

/// Raises RLIMIT_NOFILE's soft limit to its hard limit.
fn raise_nofile_limit() {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit read and write a live local struct.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 && lim.rlim_cur < lim.rlim_max {
            lim.rlim_cur = lim.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        }
    }
}

/// Blocks the stop signals in this thread and every thread it starts;
/// the main thread takes them with sigwait, so no handler ever runs
/// inside a worker.
fn block_stop_signals() -> libc::sigset_t {
    let sigset = stop_signals();
    // SAFETY: sigset is a valid, initialised signal set.
    unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &sigset, std::ptr::null_mut()) };
    sigset
}

fn stop_signals() -> libc::sigset_t {
    // SAFETY: sigemptyset initialises the set; sigaddset adds valid signals.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::sigaddset(&mut set, libc::SIGUSR1);
        libc::sigaddset(&mut set, libc::SIGHUP);
        libc::sigaddset(&mut set, libc::SIGUSR2);
        set
    }
}
