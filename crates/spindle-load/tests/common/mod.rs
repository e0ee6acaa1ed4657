//! Test helpers: a small HTTP server (std TcpListener + threads) that can
//! behave well or lie, and a bounded way to run the spindle-load binary.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How the test server answers.
#[derive(Clone, Debug)]
pub enum Behavior {
    /// Correct responses with Content-Length; honours keep-alive.
    Good(Vec<u8>),
    /// Correct chunked responses (chunks of 700 bytes).
    Chunked(Vec<u8>),
    /// Correct, but asks to close every `n`th response on a connection.
    CloseEvery(Vec<u8>, u64),
    /// Correct keep-alive responses, but drops the connection without
    /// notice after every `n`th response on it.
    DropAfter(Vec<u8>, u64),
    /// The first response is right; later ones have the same length but
    /// different bytes.
    WrongBytesAfterFirst(Vec<u8>),
    /// The first response is right; later ones are 10 bytes shorter (with a
    /// matching Content-Length).
    ShorterAfterFirst(Vec<u8>),
    /// Announces the full Content-Length, sends 10 bytes less, closes.
    ShortBody(Vec<u8>),
    /// Reads the request and never answers.
    Silent,
    /// One thread for everything: answers each request at once and holds
    /// keep-alive connections open without reading them again. For tests
    /// with thousands of idle connections.
    HoldIdle(Vec<u8>),
}

pub struct TestServer {
    pub addr: SocketAddr,
    pub requests: Arc<AtomicU64>,
    pub connections: Arc<AtomicU64>,
    /// Request lines seen (first 1000).
    pub request_lines: Arc<Mutex<Vec<String>>>,
    /// Peer addresses seen (first 1000).
    pub peers: Arc<Mutex<Vec<IpAddr>>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

const RECORD_LIMIT: usize = 1000;
/// A test server connection gives up after this long without a request.
const SERVER_READ_TIMEOUT: Duration = Duration::from_secs(20);

fn read_request(s: &mut TcpStream, pending: &mut Vec<u8>) -> Option<String> {
    let mut buf = [0u8; 4096];
    loop {
        if let Some(i) = pending.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&pending[..i + 4]).into_owned();
            pending.drain(..i + 4);
            return Some(head);
        }
        if pending.len() > 64 * 1024 {
            return None;
        }
        match s.read(&mut buf) {
            Ok(0) | Err(_) => return None,
            Ok(n) => pending.extend_from_slice(&buf[..n]),
        }
    }
}

fn response(status: &str, body: &[u8], close: bool, length: usize) -> Vec<u8> {
    let mut r = format!(
        "HTTP/1.1 {status}\r\nServer: test\r\nContent-Length: {length}\r\n{}\r\n",
        if close { "Connection: close\r\n" } else { "" }
    )
    .into_bytes();
    r.extend_from_slice(body);
    r
}

impl TestServer {
    pub fn start(behavior: Behavior) -> TestServer {
        Self::start_on("127.0.0.1:0", behavior)
    }

    pub fn start_on(bind: &str, behavior: Behavior) -> TestServer {
        let listener = TcpListener::bind(bind).expect("bind test server");
        let addr = listener.local_addr().unwrap();
        let requests = Arc::new(AtomicU64::new(0));
        let connections = Arc::new(AtomicU64::new(0));
        let request_lines = Arc::new(Mutex::new(Vec::new()));
        let peers = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (rq, cn, rl, pe, st) = (
            requests.clone(),
            connections.clone(),
            request_lines.clone(),
            peers.clone(),
            stop.clone(),
        );
        let thread = std::thread::spawn(move || {
            let mut held: Vec<TcpStream> = Vec::new();
            let mut workers: Vec<JoinHandle<()>> = Vec::new();
            for s in listener.incoming() {
                if st.load(SeqCst) {
                    break;
                }
                let Ok(mut s) = s else { continue };
                cn.fetch_add(1, SeqCst);
                if let Ok(p) = s.peer_addr() {
                    let mut v = pe.lock().unwrap();
                    if v.len() < RECORD_LIMIT {
                        v.push(p.ip());
                    }
                }
                let _ = s.set_read_timeout(Some(SERVER_READ_TIMEOUT));
                if let Behavior::HoldIdle(body) = &behavior {
                    let mut pending = Vec::new();
                    if let Some(req) = read_request(&mut s, &mut pending) {
                        rq.fetch_add(1, SeqCst);
                        let close = req.to_ascii_lowercase().contains("connection: close");
                        let _ = s.write_all(&response("200 OK", body, close, body.len()));
                        if !close {
                            held.push(s);
                        }
                    }
                    continue;
                }
                let (rq, rl, st, behavior) = (rq.clone(), rl.clone(), st.clone(), behavior.clone());
                workers.retain(|w| !w.is_finished());
                workers.push(std::thread::spawn(move || {
                    serve(s, behavior, &rq, &rl, &st);
                }));
            }
            drop(held);
            for w in workers {
                let _ = w.join();
            }
        });
        TestServer {
            addr,
            requests,
            connections,
            request_lines,
            peers,
            stop,
            thread: Some(thread),
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.stop.store(true, SeqCst);
        // Wake the accept loop.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_secs(1));
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn serve(
    mut s: TcpStream,
    behavior: Behavior,
    requests: &AtomicU64,
    lines: &Mutex<Vec<String>>,
    stop: &AtomicBool,
) {
    let mut pending = Vec::new();
    let mut on_conn = 0u64;
    while let Some(req) = read_request(&mut s, &mut pending) {
        let n = requests.fetch_add(1, SeqCst);
        on_conn += 1;
        {
            let mut v = lines.lock().unwrap();
            if v.len() < RECORD_LIMIT {
                v.push(req.lines().next().unwrap_or("").to_string());
            }
        }
        let close = req.to_ascii_lowercase().contains("connection: close");
        let out = match &behavior {
            Behavior::Good(body) | Behavior::HoldIdle(body) => {
                response("200 OK", body, close, body.len())
            }
            Behavior::CloseEvery(body, k) => {
                let c = close || on_conn.is_multiple_of(*k);
                let r = response("200 OK", body, c, body.len());
                let _ = s.write_all(&r);
                if c {
                    return;
                }
                continue;
            }
            Behavior::DropAfter(body, k) => {
                let r = response("200 OK", body, close, body.len());
                if s.write_all(&r).is_err() || close || on_conn.is_multiple_of(*k) {
                    return;
                }
                continue;
            }
            Behavior::Chunked(body) => {
                let mut r = format!(
                    "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n{}\r\n",
                    if close { "Connection: close\r\n" } else { "" }
                )
                .into_bytes();
                for chunk in body.chunks(700) {
                    r.extend_from_slice(format!("{:x}\r\n", chunk.len()).as_bytes());
                    r.extend_from_slice(chunk);
                    r.extend_from_slice(b"\r\n");
                }
                r.extend_from_slice(b"0\r\n\r\n");
                r
            }
            Behavior::WrongBytesAfterFirst(body) => {
                let mut b = body.clone();
                if n > 0 {
                    for x in b.iter_mut().take(16) {
                        *x ^= 0x5a;
                    }
                }
                response("200 OK", &b, close, b.len())
            }
            Behavior::ShorterAfterFirst(body) => {
                let b = if n > 0 {
                    &body[..body.len() - 10]
                } else {
                    &body[..]
                };
                response("200 OK", b, close, b.len())
            }
            Behavior::ShortBody(body) => {
                let r = response("200 OK", &body[..body.len() - 10], true, body.len());
                let _ = s.write_all(&r);
                return;
            }
            Behavior::Silent => {
                while !stop.load(SeqCst) {
                    std::thread::sleep(Duration::from_millis(20));
                }
                return;
            }
        };
        if s.write_all(&out).is_err() || close {
            return;
        }
    }
}

/// The spindle-load binary built for these tests.
pub fn bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_spindle-load"))
}

/// Run a command, killing it if it runs longer than `limit`.
pub fn run_bounded(mut cmd: Command, limit: Duration) -> Output {
    cmd.stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .stdin(Stdio::null());
    let mut child = cmd.spawn().expect("spawn");
    let start = Instant::now();
    // Drain the pipes on threads so a chatty child cannot block.
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let to = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = out.read_to_end(&mut v);
        v
    });
    let te = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = err.read_to_end(&mut v);
        v
    });
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let st = child.wait().unwrap();
            panic!("command ran longer than {limit:?} and was killed ({st})");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    Output {
        status,
        stdout: to.join().unwrap(),
        stderr: te.join().unwrap(),
    }
}

/// Run spindle-load with `args` (the URL file is passed by the caller).
pub fn load(args: &[&str], limit: Duration) -> Output {
    let mut cmd = Command::new(bin());
    cmd.args(args);
    run_bounded(cmd, limit)
}

pub fn write_file(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A body whose bytes are not all alike.
pub fn body(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 7 % 251) as u8).collect()
}

pub fn json(path: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(path).expect("json file written"))
        .expect("valid JSON")
}
