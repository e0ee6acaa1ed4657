//! Server lifecycle: bind, start one worker per core, wait for SIGINT or
//! SIGTERM (reopening the access log on SIGUSR1, reloading the TLS
//! certificates on SIGHUP), drain, exit.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};

use crate::accesslog::AccessLog;
use crate::backend::{self, ShutdownSignal, WorkerContext};
use crate::config::{BackendKind, Config, FirstMiss};
use crate::fs::{Root, Roots};
use crate::memory::MemoryWatch;
use crate::net;
use crate::recent::RecentFiles;

/// Runs the server until it is told to stop. Returns a one-line error for
/// the user on failure to start.
pub fn run(mut cfg: Config) -> Result<(), String> {
    let main_root = Root::open(&cfg.root)?;
    let mut host_roots = Vec::with_capacity(cfg.hosts.len());
    for h in &cfg.hosts {
        host_roots
            .push(Root::open(&h.root).map_err(|e| format!("host {}: {e}", h.names.join(",")))?);
    }
    let root = Arc::new(Roots::new(main_root, host_roots));
    let per_ip = (cfg.max_connections_per_ip > 0)
        .then(|| crate::perip::PerIp::new(cfg.max_connections_per_ip));

    if let Err(e) = backend::probe(cfg.backend) {
        if cfg.backend_is_default && cfg.backend == BackendKind::IoUring {
            let fallback = BackendKind::PosixAio;
            backend::probe(fallback)
                .map_err(|e2| format!("{e}; fallback {}: {e2}", fallback.name()))?;
            crate::say!(
                "spindle: warning: {e}; falling back to the {} backend",
                fallback.name()
            );
            cfg.backend = fallback;
        } else {
            return Err(e);
        }
    }

    // Descriptors: raise the soft limit to the hard one (as nginx's
    // worker_rlimit_nofile), then give the open-file caches at most half of
    // it. Connections may still run the table full; a worker that then
    // meets EMFILE sheds half its cache before it pauses accepting.
    let nofile = raise_nofile_limit();
    let per_worker = nofile / 2 / cfg.workers as u64;
    if (per_worker as usize) < cfg.open_file_cache {
        cfg.open_file_cache = per_worker as usize;
    }

    // Block the stop signals in every thread; the main thread takes them
    // with sigwait below, so no handler ever runs inside a worker.
    let sigset = stop_signals();
    // SAFETY: sigset is a valid, initialised signal set.
    unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &sigset, std::ptr::null_mut()) };

    let workers = cfg.workers as usize;
    let mut per_worker: Vec<Vec<OwnedFd>> = (0..workers).map(|_| Vec::new()).collect();
    let mut bound = Vec::new();
    // Sockets from systemd (socket activation) take the place of --listen.
    let activated = net::activated_sockets()?;
    for sock in &activated {
        let addr =
            net::local_addr(sock.as_raw_fd()).map_err(|e| format!("socket from systemd: {e}"))?;
        bound.push(addr);
        for w in per_worker.iter_mut() {
            w.push(
                sock.try_clone()
                    .map_err(|e| format!("socket from systemd: {e}"))?,
            );
        }
    }
    let listen: &[std::net::SocketAddr] = if activated.is_empty() {
        &cfg.listen
    } else {
        &[]
    };
    if !cfg.tls_listen.is_empty()
        && !matches!(cfg.backend, BackendKind::IoUring | BackendKind::PosixAio)
    {
        return Err(format!(
            "tls-listen: HTTPS is served by the io-uring and posix-aio backends (backend {} sends files with sendfile(2), which cannot encrypt)",
            cfg.backend.name()
        ));
    }
    if !cfg.sendfile && !matches!(cfg.backend, BackendKind::IoUring | BackendKind::PosixAio) {
        return Err(format!(
            "sendfile = false: backend {} is built on sendfile(2); use io-uring or posix-aio",
            cfg.backend.name()
        ));
    }
    let tls = if cfg.tls_listen.is_empty() {
        None
    } else {
        let shared = crate::tls::Shared::load(&cfg.tls_certs)?;
        let path = match net::ktls_available() {
            Ok(()) => "kernel TLS is available but not used yet".to_string(),
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {
                "no kernel TLS (this kernel has no `tls` module, CONFIG_TLS)".to_string()
            }
            Err(e) => format!("no kernel TLS ({e})"),
        };
        crate::say!(
            "spindle: HTTPS: {path}; records are encrypted in user space (rustls), bodies read into buffers"
        );
        Some(Arc::new(shared))
    };
    // Listener order, the same in every worker: plain HTTP, then PROXY
    // protocol (from `proxy_at`), then HTTPS (from `tls_from`).
    let proxy_at = activated.len() + listen.len();
    let tls_from = proxy_at + cfg.proxy_listen.len();
    let mut proxied = Vec::new();
    let mut https = Vec::new();
    for (n, addr) in listen
        .iter()
        .chain(&cfg.proxy_listen)
        .chain(&cfg.tls_listen)
        .enumerate()
    {
        let n = activated.len() + n;
        let (actual, socks) = net::bind_group(*addr, workers).map_err(|e| {
            let hint = match e.raw_os_error() {
                Some(libc::EADDRINUSE) => {
                    "; is another server running there? choose another port with --listen"
                }
                Some(libc::EACCES) => "; ports below 1024 need root or CAP_NET_BIND_SERVICE",
                Some(libc::EADDRNOTAVAIL) => "; that address is not on this machine",
                _ => "",
            };
            format!("cannot listen on {addr}: {e}{hint}")
        })?;
        if n < proxy_at {
            bound.push(actual);
        } else if n < tls_from {
            proxied.push(actual);
        } else {
            https.push(actual);
        }
        for (w, s) in socks.into_iter().enumerate() {
            per_worker[w].push(s);
        }
    }

    // The metrics listener, bound with the others (before dropping
    // privileges); served from its own thread once the workers run.
    let metrics_listener = match cfg.metrics {
        None => None,
        Some(addr) => {
            let l = std::net::TcpListener::bind(addr).map_err(|e| {
                let hint = match e.raw_os_error() {
                    Some(libc::EADDRINUSE) => "; choose another port with --metrics",
                    Some(libc::EACCES) => "; ports below 1024 need root or CAP_NET_BIND_SERVICE",
                    Some(libc::EADDRNOTAVAIL) => "; that address is not on this machine",
                    _ => "",
                };
                format!("cannot listen on {addr} for metrics: {e}{hint}")
            })?;
            let actual = l
                .local_addr()
                .map_err(|e| format!("metrics listener: {e}"))?;
            Some((l, actual))
        }
    };

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

    let cfg = Arc::new(cfg);
    let session_cfg = Arc::new(cfg.session_config());
    let reloads = crate::reload::Shared::new(crate::reload::Reloadable {
        cfg: cfg.clone(),
        session_cfg: session_cfg.clone(),
        roots: root.clone(),
    });
    let memory = Arc::new(MemoryWatch::probe());
    let recent = Arc::new(RecentFiles::for_memory(memory.budget()));
    let registry = Arc::new(crate::metrics::Registry::new(
        workers,
        cfg.backend.name(),
        log.clone(),
    ));
    let flag = Arc::new(AtomicBool::new(false));
    let lister = if cfg.autoindex {
        Some(crate::lister::Pool::start()?)
    } else {
        None
    };
    let mut eventfds = Vec::new();
    let mut handles = Vec::new();
    let (ready_tx, ready_rx) = mpsc::channel();
    for (id, listeners) in per_worker.into_iter().enumerate() {
        // SAFETY: plain eventfd(2) call.
        let efd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if efd < 0 {
            return Err(format!("eventfd: {}", std::io::Error::last_os_error()));
        }
        // SAFETY: a fresh descriptor nothing else owns.
        let efd = unsafe { OwnedFd::from_raw_fd(efd) };
        let ctx = WorkerContext {
            id,
            listeners,
            proxied: proxy_at..tls_from,
            tls_from,
            tls: tls.clone(),
            root: root.clone(),
            per_ip: per_ip.clone(),
            reload: reloads.clone(),
            reload_gen: 0,
            cfg: cfg.clone(),
            session_cfg: session_cfg.clone(),
            log: log.clone(),
            recent: recent.clone(),
            memory: memory.clone(),
            shutdown: ShutdownSignal {
                flag: flag.clone(),
                eventfd: efd.as_raw_fd(),
            },
            metrics: registry.worker(id),
            lister: lister.clone(),
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
                    // If setup failed, this is the first message; otherwise
                    // the receiver is gone and this is ignored.
                    let _ = ready.send(Err(e.clone()));
                }
                r
            })
            .map_err(|e| format!("cannot start worker thread: {e}"))?;
        handles.push(h);
    }
    drop(ready_tx);
    for _ in 0..workers {
        match ready_rx.recv() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                stop(&flag, &eventfds);
                for h in handles {
                    let _ = h.join();
                }
                return Err(e);
            }
            Err(_) => return Err("a worker exited during startup".into()),
        }
    }
    drop(ready_rx);

    if let Some((listener, addr)) = metrics_listener {
        crate::metrics::serve(listener, registry.clone())?;
        // Before the startup line, so that a script that waits for that
        // line has this one too.
        crate::say!("spindle: metrics on http://{addr}/metrics");
    }
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
    // Scripts and tests read this line to learn the port.
    crate::say!(
        "spindle: serving {} on {} (backend {}, {} worker{}){}",
        root.main().path().display(),
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

    if cfg.backend == BackendKind::IoUring && cfg.first_miss != FirstMiss::Cache {
        crate::say!(
            "spindle: page cache budget {}; files used once are read with O_DIRECT {} (--first-miss {})",
            memory.describe(),
            if cfg.first_miss == FirstMiss::Auto {
                "once it is full"
            } else {
                "always"
            },
            cfg.first_miss.name()
        );
    }

    if !activated.is_empty() {
        crate::say!(
            "spindle: listening on {} socket{} passed by systemd (--listen ignored)",
            activated.len(),
            if activated.len() == 1 { "" } else { "s" }
        );
    }
    drop(activated);
    net::sd_notify(&format!(
        "READY=1\nSTATUS=serving {} on {}\nMAINPID={}",
        root.main().path().display(),
        addrs.join(" "),
        std::process::id()
    ));

    // Wait for a stop signal; on the way, SIGUSR1 reopens the access log and
    // SIGHUP reloads the TLS certificates.
    let mut sig: libc::c_int = 0;
    loop {
        // SAFETY: sigset is valid and `sig` a live out-parameter.
        unsafe { libc::sigwait(&sigset, &mut sig) };
        match sig {
            libc::SIGUSR1 => log.reopen(),
            libc::SIGHUP => reload(&reloads, tls.as_deref()),
            _ => break,
        }
    }
    crate::say!(
        "spindle: got {}, finishing responses in flight (up to {:.0?})",
        if sig == libc::SIGINT {
            "SIGINT"
        } else {
            "SIGTERM"
        },
        cfg.drain_timeout
    );
    net::sd_notify("STOPPING=1");
    stop(&flag, &eventfds);
    let mut failed = None;
    for h in handles {
        match h.join() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => failed = Some(e),
            Err(_) => failed = Some("a worker panicked".to_string()),
        }
    }
    drop(log);
    if let Some(h) = log_thread {
        let _ = h.join();
    }
    drop(eventfds);
    match failed {
        Some(e) => Err(e),
        None => {
            crate::say!("spindle: stopped");
            Ok(())
        }
    }
}

/// SIGHUP: reads the command line's config file again and hands the
/// workers what may change while running (`reload.rs`), and reads the TLS
/// certificates and keys again. A bad file keeps the running
/// configuration (or certificates), with an error line; connections
/// already open are not touched either way.
fn reload(reloads: &crate::reload::Shared, tls: Option<&crate::tls::Shared>) {
    net::sd_notify("RELOADING=1");
    let (_, running) = reloads.current();
    match reloads.reload(&running.cfg) {
        Ok(fixed) if fixed.is_empty() => {
            crate::say!("spindle: got SIGHUP; configuration reloaded")
        }
        Ok(fixed) => crate::say!(
            "spindle: got SIGHUP; configuration reloaded, but {} take effect only at a restart",
            fixed.join(", ")
        ),
        Err(e) => crate::say!("spindle: got SIGHUP; {e}; keeping the running configuration"),
    }
    if let Some(t) = tls {
        match t.reload() {
            Ok(()) => crate::say!("spindle: TLS certificates reloaded"),
            Err(e) => crate::say!("spindle: {e}; keeping the certificates in use"),
        }
    }
    net::sd_notify("READY=1");
}

/// Switches to `name`'s user and groups (started as root, after binding):
/// as nginx's `user`, so that a bug serves what that user may read, no more.
fn switch_user(name: &str) -> Result<(), String> {
    let cname =
        std::ffi::CString::new(name).map_err(|_| format!("--user {name:?}: not a user name"))?;
    // SAFETY: an all-zero passwd is a valid out-parameter for getpwnam_r.
    let mut pwd: libc::passwd = unsafe { std::mem::zeroed() };
    let mut buf = vec![0 as libc::c_char; 16 * 1024];
    let mut found: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: every pointer refers to a live local of the size passed; the
    // strings getpwnam_r writes live in `buf`, which outlives their use here.
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
    let (uid, gid) = (pwd.pw_uid, pwd.pw_gid);
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
    crate::say!("spindle: running as user {name} (uid {uid}, gid {gid})");
    Ok(())
}

fn stop(flag: &AtomicBool, eventfds: &[OwnedFd]) {
    flag.store(true, Ordering::Release);
    for e in eventfds {
        backend::signal_eventfd(e.as_raw_fd());
    }
}

/// Raises RLIMIT_NOFILE's soft limit to its hard limit; returns the new
/// soft limit.
fn raise_nofile_limit() -> u64 {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit read and write a live local struct.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) != 0 {
            return 1024;
        }
        if lim.rlim_cur < lim.rlim_max {
            let want = libc::rlimit {
                rlim_cur: lim.rlim_max,
                rlim_max: lim.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &want) == 0 {
                lim.rlim_cur = lim.rlim_max;
            }
        }
    }
    lim.rlim_cur
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
        set
    }
}
