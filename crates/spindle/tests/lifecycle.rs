//! Timeouts, limits, shutdown, the access log, configuration and startup
//! errors, and files that change while they are sent; against every
//! backend.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

#[test]
fn header_and_keepalive_timeouts() {
    for b in backends() {
        let root = DocRoot::new(false);
        let srv = Server::start(
            &b,
            &root.dir,
            &["--header-timeout", "1", "--keepalive-timeout", "1"],
        );
        // Slowloris: half a request head, then silence.
        let mut s = srv.connect();
        s.write_all(b"GET /f1 HTTP/1.1\r\nHost: t\r\n").unwrap();
        let t = Instant::now();
        assert!(
            closed_by_server(&mut s, Duration::from_secs(5)),
            "{b}: partial head kept open"
        );
        let waited = t.elapsed();
        assert!(
            waited >= Duration::from_millis(700),
            "{b}: closed too early ({waited:?})"
        );
        // An idle keep-alive connection after one request.
        let mut s = srv.connect();
        s.write_all(b"GET /f1 HTTP/1.1\r\nHost: t\r\n\r\n").unwrap();
        let mut r = BufReader::new(s);
        assert_eq!(read_response(&mut r, false).unwrap().status, 200);
        assert!(
            closed_by_server(&mut r, Duration::from_secs(5)),
            "{b}: idle connection kept open"
        );
        // A connection that never sends anything.
        let mut s = srv.connect();
        assert!(
            closed_by_server(&mut s, Duration::from_secs(5)),
            "{b}: silent connection kept open"
        );
    }
}

#[test]
fn max_connections_pauses_accepting() {
    for b in backends() {
        let root = DocRoot::new(false);
        let srv = Server::start(&b, &root.dir, &["--workers", "1", "--max-connections", "2"]);
        let mut held = Vec::new();
        for _ in 0..2 {
            let mut s = srv.connect();
            s.write_all(b"GET /f1 HTTP/1.1\r\nHost: t\r\n\r\n").unwrap();
            let mut r = BufReader::new(s);
            assert_eq!(read_response(&mut r, false).unwrap().status, 200);
            held.push(r);
        }
        // The third connection waits in the kernel's backlog, unanswered.
        let mut third = srv.connect();
        third
            .set_read_timeout(Some(Duration::from_millis(500)))
            .unwrap();
        third
            .write_all(b"GET /f4096 HTTP/1.1\r\nHost: t\r\n\r\n")
            .unwrap();
        let mut buf = [0u8; 16];
        let early = third.read(&mut buf);
        assert!(
            early.is_err(),
            "{b}: third connection answered past --max-connections: {early:?}"
        );
        // Freeing a slot lets it in.
        held.pop();
        third
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let r = read_response(&mut BufReader::new(third), false).unwrap();
        assert_eq!(r.body, root.read("f4096"), "{b}");
    }
}

/// Server CPU time (user + system) in clock ticks, from /proc.
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let after = &stat[stat.rfind(')').unwrap() + 2..];
    let f: Vec<&str> = after.split(' ').collect();
    f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap()
}

#[test]
fn running_out_of_descriptors_does_not_spin() {
    for b in backends() {
        let root = DocRoot::new(false);
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_spindle"));
        let log =
            std::env::temp_dir().join(format!("spindle-emfile-{}-{b}.err", std::process::id()));
        cmd.args(["--backend", &b, "--workers", "1", "--listen", "127.0.0.1:0"])
            .arg(&root.dir)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap());
        // SAFETY: setrlimit in the child before exec; async-signal-safe.
        unsafe {
            cmd.pre_exec(|| {
                let lim = libc::rlimit {
                    rlim_cur: 40,
                    rlim_max: 40,
                };
                libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
                Ok(())
            });
        }
        let mut child = cmd.spawn().unwrap();
        let addr = loop {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            if let Some(addr) = startup_addr(&text) {
                break addr;
            }
            assert!(!text.contains("error"), "{text}");
            std::thread::sleep(Duration::from_millis(20));
        };
        let conns: Vec<TcpStream> = (0..80)
            .filter_map(|_| TcpStream::connect(&addr).ok())
            .collect();
        std::thread::sleep(Duration::from_millis(300));
        let before = cpu_ticks(child.id());
        std::thread::sleep(Duration::from_secs(2));
        let used = cpu_ticks(child.id()) - before;
        // 2 s of wall time; a spinning accept loop would burn ~200 ticks.
        assert!(
            used < 40,
            "{b}: server used {used} ticks of CPU in 2 s while out of descriptors"
        );
        drop(conns);
        std::thread::sleep(Duration::from_millis(1500));
        let mut s = TcpStream::connect(&addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.write_all(b"GET /f1 HTTP/1.1\r\nHost: t\r\n\r\n").unwrap();
        let r = read_response(&mut BufReader::new(s), false).unwrap();
        assert_eq!(
            r.status, 200,
            "{b}: not serving after descriptors were freed"
        );
        let _ = child.kill();
        let _ = child.wait();
        let _ = std::fs::remove_file(&log);
    }
}

#[test]
fn sigterm_drains_responses_in_flight() {
    for b in backends() {
        let root = DocRoot::new(true);
        let mut srv = Server::start(&b, &root.dir, &[]);
        let addr = srv.addr;
        // A large download in progress, read slowly.
        let mut dl = srv.connect();
        dl.write_all(b"GET /big HTTP/1.1\r\nHost: t\r\n\r\n")
            .unwrap();
        let mut dl = BufReader::new(dl);
        let mut line = String::new();
        dl.read_line(&mut line).unwrap();
        assert!(line.starts_with("HTTP/1.1 200"), "{b}: {line}");
        // An idle keep-alive connection.
        let mut idle = srv.connect();
        idle.write_all(b"GET /f1 HTTP/1.1\r\nHost: t\r\n\r\n")
            .unwrap();
        let mut idle = BufReader::new(idle);
        read_response(&mut idle, false).unwrap();

        // SAFETY: kill(2) on our own child.
        unsafe { libc::kill(srv.child.id() as i32, libc::SIGTERM) };
        // The idle connection is closed promptly...
        assert!(
            closed_by_server(&mut idle, Duration::from_secs(5)),
            "{b}: idle connection not closed on SIGTERM"
        );
        // ...no new connections are served...
        std::thread::sleep(Duration::from_millis(300));
        let refused = match TcpStream::connect(addr) {
            Err(_) => true,
            Ok(mut s) => {
                s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
                let _ = s.write_all(b"GET /f1 HTTP/1.1\r\nHost: t\r\n\r\n");
                let mut buf = [0u8; 1];
                !matches!(s.read(&mut buf), Ok(1))
            }
        };
        assert!(refused, "{b}: served a new connection after SIGTERM");
        // ...and the download completes, byte for byte.
        let mut rest = Vec::new();
        loop {
            let mut l = String::new();
            dl.read_line(&mut l).unwrap();
            if l == "\r\n" {
                break;
            }
        }
        dl.read_to_end(&mut rest).unwrap();
        assert!(
            rest == root.read("big"),
            "{b}: download cut short by shutdown ({} bytes)",
            rest.len()
        );
        let st = srv.terminate();
        assert!(st.success(), "{b}: exit status {st:?}");
    }
}

#[test]
fn drain_timeout_bounds_shutdown() {
    for b in backends() {
        let root = DocRoot::new(true);
        let mut srv = Server::start(&b, &root.dir, &["--drain-timeout", "1"]);
        let mut stuck = srv.connect();
        stuck
            .write_all(b"GET /big HTTP/1.1\r\nHost: t\r\n\r\n")
            .unwrap();
        std::thread::sleep(Duration::from_millis(200));
        let t = Instant::now();
        let st = srv.terminate();
        assert!(st.success(), "{b}: {st:?}");
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "{b}: drain took {:?}",
            t.elapsed()
        );
        drop(stuck);
    }
}

/// Waits until the file at `path` holds `n` lines (the log thread flushes
/// within half a second); returns its text.
fn wait_lines(path: &std::path::Path, n: usize) -> String {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let t = std::fs::read_to_string(path).unwrap_or_default();
        if t.lines().count() >= n || Instant::now() > deadline {
            return t;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// logrotate's way: rename the log, send SIGUSR1, and the server writes to a
/// new file at the old path; every line is whole and in one of the two.
#[test]
fn sigusr1_reopens_the_access_log() {
    let b = "io-uring";
    let root = DocRoot::new(false);
    let log = root
        .path("../")
        .join(format!("rotate-{}.log", std::process::id()));
    let old = log.with_extension("log.1");
    let srv = Server::start(b, &root.dir, &["--access-log", log.to_str().unwrap()]);
    for _ in 0..3 {
        assert_eq!(get(&srv, "/f1").status, 200);
    }
    assert_eq!(wait_lines(&log, 3).lines().count(), 3);
    std::fs::rename(&log, &old).unwrap();
    // SAFETY: kill(2) on our child's pid.
    unsafe { libc::kill(srv.child.id() as i32, libc::SIGUSR1) };
    let deadline = Instant::now() + Duration::from_secs(5);
    while !srv.stderr().contains("access log") || !srv.stderr().contains("reopened") {
        assert!(Instant::now() < deadline, "no reopen: {}", srv.stderr());
        std::thread::sleep(Duration::from_millis(20));
    }
    for _ in 0..2 {
        assert_eq!(get(&srv, "/f1").status, 200, "served after SIGUSR1");
    }
    let new = wait_lines(&log, 2);
    assert_eq!(new.lines().count(), 2, "{new}");
    let rotated = std::fs::read_to_string(&old).unwrap();
    assert_eq!(rotated.lines().count(), 3, "{rotated}");
    for t in [&new, &rotated] {
        assert!(t.ends_with('\n'));
        assert!(
            t.lines().all(|l| l.contains("\"GET /f1 HTTP/1.1\" 200 ")),
            "{t}"
        );
    }
    drop(srv);
    let _ = std::fs::remove_file(&log);
    let _ = std::fs::remove_file(&old);
}

#[test]
fn access_log_in_combined_format() {
    for b in backends() {
        let root = DocRoot::new(false);
        let log = root
            .path("../")
            .join(format!("access-{}-{b}.log", std::process::id()));
        let srv = Server::start(&b, &root.dir, &["--access-log", log.to_str().unwrap()]);
        let mut s = srv.connect();
        s.write_all(b"GET /f4096?q=1 HTTP/1.1\r\nHost: t\r\nUser-Agent: test-agent\r\nReferer: http://ref/\r\n\r\nGET /missing HTTP/1.1\r\nHost: t\r\n\r\n")
            .unwrap();
        let mut r = BufReader::new(s);
        read_response(&mut r, false).unwrap();
        read_response(&mut r, false).unwrap();
        let text = wait_lines(&log, 2);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2, "{b}: {text}");
        assert!(lines[0].starts_with("127.0.0.1 - - ["), "{}", lines[0]);
        assert!(
            lines[0]
                .ends_with("\"GET /f4096?q=1 HTTP/1.1\" 200 4096 \"http://ref/\" \"test-agent\""),
            "{}",
            lines[0]
        );
        assert!(
            lines[1].contains("\"GET /missing HTTP/1.1\" 404 "),
            "{}",
            lines[1]
        );
        drop(srv);
        let _ = std::fs::remove_file(&log);
    }
}

#[test]
fn config_file_with_flag_overrides() {
    for b in backends() {
        let root = DocRoot::new(false);
        let dir = root
            .path("../")
            .join(format!("cfg-{}-{b}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let log = dir.join("access.log");
        let cfg = dir.join("spindle.toml");
        std::fs::write(
            &cfg,
            format!(
                "listen = [\"127.0.0.1:1\"]\nworkers = 1\nbackend = \"{b}\"\nchunk-size = \"64k\"\nmax-inflight = 4\ndepth = \"fixed\"\naccess-log = \"{}\"\nkeepalive-timeout = 30\n",
                log.display()
            ),
        )
        .unwrap();
        // --listen on the command line overrides the file's port 1.
        let srv = Server::start(&b, &root.dir, &["--config", cfg.to_str().unwrap()]);
        assert!(srv.stderr().contains("1 worker)"), "{}", srv.stderr());
        let r = get(&srv, "/f1048583");
        assert!(
            r.body == root.read("f1048583"),
            "{b}: body with 64k chunks differs"
        );
        std::thread::sleep(Duration::from_millis(800));
        assert!(std::fs::read_to_string(&log)
            .unwrap_or_default()
            .contains("/f1048583"));
        drop(srv);
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// Runs spindle with `args` and expects a quick failure with one clear line.
fn expect_startup_error(args: &[&str], code: i32, needle: &str) {
    let out = Command::new(env!("CARGO_BIN_EXE_spindle"))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(code), "{args:?}: {err}");
    assert!(
        err.contains(needle),
        "{args:?}: expected {needle:?} in {err}"
    );
    assert!(!err.contains("panicked"), "{args:?} panicked: {err}");
    if code == 1 {
        assert_eq!(
            err.trim_end().lines().count(),
            1,
            "{args:?}: more than one line: {err}"
        );
        assert!(err.starts_with("spindle: error: "), "{err}");
    }
}

#[test]
fn bad_configuration_fails_clearly() {
    let root = DocRoot::new(false);
    let r = root.dir.to_str().unwrap();
    expect_startup_error(&["/nonexistent/dir"], 1, "No such file or directory");
    expect_startup_error(&[&format!("{r}/f1")], 1, "not a directory");
    expect_startup_error(
        &["--config", "/nonexistent.toml", r],
        1,
        "cannot read config file",
    );
    let bad = root.path("bad.toml");
    std::fs::write(&bad, "worker = 3\n").unwrap();
    expect_startup_error(&["--config", bad.to_str().unwrap(), r], 1, "unknown field");
    std::fs::write(&bad, "workers = \"many\"\n").unwrap();
    expect_startup_error(&["--config", bad.to_str().unwrap(), r], 1, "config file");
    std::fs::write(&bad, "backend = \"carrier-pigeon\"\n").unwrap();
    expect_startup_error(
        &["--config", bad.to_str().unwrap(), r],
        1,
        "unknown variant",
    );
    expect_startup_error(&["--chunk-size", "1000", r], 1, "multiple of 4096");
    expect_startup_error(&["--workers", "0", r], 1, "workers");
    expect_startup_error(&["--max-inflight", "0", r], 1, "max-inflight");
    expect_startup_error(&["--keepalive-timeout", "0", r], 1, "keepalive-timeout");
    expect_startup_error(
        &["--listen", "127.0.0.1:0", "--listen", "203.0.113.7:80", r],
        1,
        "not on this machine",
    );
    // Clap's own usage errors exit with 2.
    expect_startup_error(&["--no-such-flag", r], 2, "--no-such-flag");
    expect_startup_error(&["--listen", "nonsense", r], 2, "invalid");
    expect_startup_error(&["--backend", "nope", r], 2, "invalid value");
    expect_startup_error(&["--depth", "sideways", r], 2, "invalid value");
    // A port in use.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().to_string();
    expect_startup_error(&["--listen", &port, r], 1, "Address already in use");
}

#[test]
fn a_file_truncated_while_sent_is_cut_short_not_padded() {
    for b in backends() {
        let root = DocRoot::new(true);
        let srv = Server::start(&b, &root.dir, &["--chunk-size", "64k"]);
        let original = root.read("big");
        let mut s = srv.connect();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        // A small receive buffer keeps the server from racing ahead.
        s.write_all(b"GET /big HTTP/1.1\r\nHost: t\r\n\r\n")
            .unwrap();
        let mut r = BufReader::with_capacity(4096, s);
        let mut line = String::new();
        loop {
            line.clear();
            r.read_line(&mut line).unwrap();
            if line == "\r\n" {
                break;
            }
        }
        let mut first = vec![0u8; 1 << 20];
        r.read_exact(&mut first).unwrap();
        // Shrink the file to 2 MiB under the server's feet.
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(root.path("big"))
            .unwrap();
        f.set_len(2 << 20).unwrap();
        drop(f);
        let mut rest = Vec::new();
        let _ = r.read_to_end(&mut rest);
        let got = first.len() + rest.len();
        assert!(
            (got as u64) < BIG_SIZE,
            "{b}: got the full Content-Length ({got}) from a truncated file"
        );
        let mut all = first;
        all.extend_from_slice(&rest);
        // Every byte that was sent is a byte the file held at that offset.
        assert!(
            all[..] == original[..all.len()],
            "{b}: wrong bytes sent from a changing file"
        );
        // The server is still up and well.
        assert_eq!(get(&srv, "/f4096").body, root.read("f4096"), "{b}");
    }
}

/// A burst of resets (a load balancer restarting, a client killed): 900 open
/// connections (under the usual 1,024-descriptor soft limit of the test process)
/// all reset at once (SO_LINGER 0). The worker must close them all and
/// then be idle: no accept storm, no loop over dead sockets, and the next request is
/// served.
#[test]
fn a_burst_of_resets_leaves_the_worker_idle() {
    const CONNS: usize = 900;
    for b in backends() {
        let root = DocRoot::new(false);
        let mut server = Server::start(&b, &root.dir, &["--workers", "1"]);
        let pid = server.child.id();
        let fds = || {
            std::fs::read_dir(format!("/proc/{pid}/fd"))
                .unwrap()
                .count()
        };
        let idle_fds = fds();
        let conns: Vec<TcpStream> = (0..CONNS)
            .map(|_| TcpStream::connect(server.addr).unwrap())
            .collect();
        let t0 = Instant::now();
        while fds() < idle_fds + CONNS {
            assert!(
                t0.elapsed() < Duration::from_secs(10),
                "{b}: the server took in {} of {CONNS} connections",
                fds() - idle_fds
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        let linger = libc::linger {
            l_onoff: 1,
            l_linger: 0,
        };
        for s in conns {
            // SAFETY: a live socket and a pointer to a live `linger` of the size given.
            let rc = unsafe {
                libc::setsockopt(
                    std::os::fd::AsRawFd::as_raw_fd(&s),
                    libc::SOL_SOCKET,
                    libc::SO_LINGER,
                    (&linger as *const libc::linger).cast(),
                    std::mem::size_of::<libc::linger>() as libc::socklen_t,
                )
            };
            assert_eq!(rc, 0);
            drop(s); // close with linger 0: a RST
        }
        let t0 = Instant::now();
        while fds() > idle_fds {
            assert!(
                t0.elapsed() < Duration::from_secs(10),
                "{b}: {} of {CONNS} reset connections still open after 10 s",
                fds() - idle_fds
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        let before = cpu_ticks(pid);
        std::thread::sleep(Duration::from_secs(1));
        let used = cpu_ticks(pid) - before;
        // 1 s of wall time; a worker spinning on dead sockets burns ~100 ticks.
        assert!(
            used < 20,
            "{b}: the server used {used} ticks of CPU in the second after the resets"
        );
        let r = get(&server, "/f1");
        assert_eq!(r.status, 200, "{b}: not serving after the resets");
        server.terminate();
    }
}
