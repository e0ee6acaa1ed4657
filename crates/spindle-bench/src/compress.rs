//! `compress`: compression on the fly against the peers, on the Python
//! documentation (Debian python3.11-doc), cached, keep-alive.
//!
//! Each server compresses as it is set up to ([`crate::servers::Compress`]):
//! spindle io-uring with its defaults (made once per file by its helper,
//! kept in a fresh `--compress-cache`), nginx `gzip on` at level 1 (its
//! default) and 6 (the level most configs set), lighttpd mod_deflate with
//! a fresh cache directory, Caddy `encode zstd gzip` and H2O
//! `compress: ON`; one worker each, pinned. For each coding (gzip, br,
//! zstd) a server is first warmed: every URL is fetched with that
//! `Accept-Encoding` until the answers carry it (spindle answers identity
//! until its helper made the result), and a server that never answers with
//! a coding does not make it ("–"). Then h2load (HTTP/1.1, keep-alive)
//! fetches the URL list in whole passes, so that every server answers the
//! same requests, in slices taken in turns by all the servers, which run
//! side by side (load.rs: this machine drifts over minutes): req/s,
//! server CPU per request, bytes on the wire per request. Last, on the warm server, the first request for a 1 MiB
//! JavaScript file no cache has seen: time to the last byte, bytes
//! received and the coding it came with.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use rand::seq::SliceRandom;
use rand::SeedableRng;
use serde_json::json;

use crate::common::{self, stats, CommonArgs, Machine, Progress};
use crate::report::{col, fmt, Column, Report};
use crate::servers::{Compress, Running, Server};

mod load;
use load::*;

/// The servers `compress` compares unless `--servers` says otherwise.
pub const COMPRESS_SERVERS: &str = "spindle-io-uring,nginx-gzip1,nginx-gzip6,lighttpd,caddy,h2o";
/// Where Debian's python3.11-doc puts the documentation.
const DOCS_DIR: &str = "/usr/share/doc/python3.11/html";
/// The package that brings it.
const DOCS_PACKAGE: &str = "python3.11-doc";
/// The documentation's copy under `--data` (symlinks followed).
const DOCS_COPY: &str = "python3.11-html";
/// The extensions of the files fetched.
const URL_EXTENSIONS: [&str; 3] = ["html", "css", "js"];
/// The codings measured, as `Accept-Encoding` names them.
const CODINGS: [&str; 3] = ["gzip", "br", "zstd"];

/// Files smaller than this need not come compressed for the warm-up to
/// end (Caddy compresses from 512 bytes, spindle and lighttpd from 256).
const WARM_MIN_BYTES: u64 = 1024;
/// The warm-up fetches the files still answered uncompressed again, this
/// long after the last pass ...
const WARM_PAUSE: Duration = Duration::from_secs(1);
/// ... until every file comes compressed, at most this many passes,
const WARM_MAX_PASSES: u32 = 600;
/// ... or this long without one more file coming compressed (a server
/// that never answers with a coding does not make it),
const WARM_STALL: Duration = Duration::from_secs(20);
/// ... or this long in all (spindle's helper makes br at level 11).
const WARM_MAX: Duration = Duration::from_secs(600);
/// How long one fetch of the warm-up (and the first request) may take.
const FETCH_TIMEOUT: Duration = Duration::from_secs(60);

/// h2load's short run that estimates a server's rate (and warms its
/// connections' paths) before the measured one.
const ESTIMATE_SECS: f64 = 2.0;
/// Most passes over the URL list in one measured run.
const MAX_PASSES: u64 = 1000;
/// A measured run is held under this many seconds (h2load is killed at
/// 300), unless one pass takes longer.
const MAX_RUN_SECS: f64 = 240.0;
/// A body that is more than this share of the files' own size did not
/// come compressed (compressed text here is 0.15-0.35 of it).
const NOT_COMPRESSED_SHARE: f64 = 0.7;

/// The size of the first-request file.
const FIRST_BYTES: usize = 1 << 20;
/// Where the first-request files go, under the documentation's root.
const FIRST_DIR: &str = "_first-request";

/// `--quick`: this many files of the documentation, ...
const QUICK_FILES: usize = 40;
/// ... this many clients, ...
const QUICK_CLIENTS: u64 = 10;
/// ... and runs this long.
const QUICK_SECONDS: f64 = 0.5;

/// Why `compress --quick` is a smoke test (its method line).
const QUICK_COMPRESS: &str = "--quick fetches 40 of the documentation's files with 10 clients, in as many whole passes as fill 0.5 s (after a 0.5 s rate estimate): a smoke test of the harness, the configs and every server's codings, not a comparison.";

#[derive(clap::Args, Debug, Clone)]
pub struct CompressArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// Seconds of load per server and coding, at least: the run is whole
    /// passes of every client over the URL list, as many as fit (one at
    /// least), so that every server answers the same requests.
    #[arg(long, default_value_t = 10.0)]
    pub seconds: f64,
    /// h2load's keep-alive connections (HTTP/1.1).
    #[arg(long, default_value_t = 50)]
    pub clients: u64,
    /// Codings to measure, comma-separated: gzip, br, zstd.
    #[arg(long, value_delimiter = ',', default_value = "gzip,br,zstd")]
    pub codings: Vec<String>,
    /// An extra flag for every spindle server (repeatable), e.g.
    /// `--spindle-flag=--compress-threads=2`.
    #[arg(long = "spindle-flag", allow_hyphen_values = true)]
    pub spindle_flags: Vec<String>,
}

/// A server as this experiment runs it: nginx is named by its gzip level
/// (`nginx-gzip1` ... `nginx-gzip9`).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Contender {
    name: String,
    server: Server,
    /// nginx's `gzip_comp_level` (1 for the others: unused).
    gzip_level: u32,
}

impl Contender {
    fn parse(name: &str) -> Result<Contender> {
        if let Some(level) = name.strip_prefix("nginx-gzip") {
            let level: u32 = level
                .parse()
                .ok()
                .filter(|l| (1..=9).contains(l))
                .ok_or_else(|| anyhow!("server {name:?}: nginx-gzipN takes a level 1 to 9"))?;
            return Ok(Contender {
                name: name.to_string(),
                server: Server::NginxSendfile,
                gzip_level: level,
            });
        }
        let server = Server::parse(name)?;
        if matches!(server, Server::NginxSendfile | Server::NginxAioThreads) {
            bail!("server {name:?}: compress runs nginx as nginx-gzipN (its gzip level, 1 to 9)");
        }
        Ok(Contender {
            name: server.name(),
            server,
            gzip_level: 1,
        })
    }

    fn is_spindle(&self) -> bool {
        matches!(self.server, Server::Spindle(_))
    }

    /// How this server compresses, for the report's notes.
    fn config_note(&self, lighttpd_codings: &[String]) -> String {
        let types = "text/html, text/css, application/javascript, text/javascript, application/json, image/svg+xml, text/plain, application/xml";
        match self.server {
            Server::Spindle(_) => {
                let l = spindle::compress::Levels::default();
                format!(
                    "{}: compression on by default (gzip {}, br {}, zstd {}: its --compress-levels defaults), made once per file by its helper thread, pinned with the worker, into a fresh --compress-cache per start; identity until the helper made the result",
                    self.name, l.gzip, l.br, l.zstd
                )
            }
            Server::NginxSendfile | Server::NginxAioThreads => format!(
                "{}: `gzip on; gzip_vary on; gzip_comp_level {}; gzip_types` {types} (sendfile and open_file_cache as in the other experiments), compressing each response inline",
                self.name, self.gzip_level
            ),
            Server::Lighttpd => format!(
                "{}: mod_deflate, `deflate.allowed-encodings` {} (what this build has, from `lighttpd -V`), `deflate.mimetypes` {types}, a fresh `deflate.cache-dir` per start; its default levels (gzip 6, br 5, zstd 3), compressing inline on a file's first request into the cache",
                self.name,
                lighttpd_codings.join(", ")
            ),
            Server::Caddy => format!(
                "{}: `encode zstd gzip` and `file_server` (its default levels: gzip 5, zstd `default`, about level 3; no br), GOMAXPROCS = the workers, `admin off`, `auto_https off`, compressing each response inline",
                self.name
            ),
            Server::H2o => format!(
                "{}: `compress: ON` over plain HTTP (gzip and br at quality 1, its defaults; no zstd in 2.2), compressing each response inline",
                self.name
            ),
        }
    }
}

/// The contenders of `--servers` (whose default main.rs sets to
/// [`COMPRESS_SERVERS`] for this experiment).
fn contenders(c: &CommonArgs) -> Result<Vec<Contender>> {
    c.servers
        .iter()
        .map(|n| Contender::parse(n.trim()))
        .collect()
}

/// One file of the URL set: its path from the root and its size.
#[derive(Debug, Clone, PartialEq, Eq)]
struct DocFile {
    path: String,
    size: u64,
}

/// The documentation under `data`, copied from [`DOCS_DIR`] with
/// symlinks followed (jquery.js and underscore.js point out of the tree)
/// the first time.
fn ensure_docs(data: &Path) -> Result<PathBuf> {
    let src = Path::new(DOCS_DIR);
    if !src.join("index.html").is_file() {
        bail!("the Python documentation is not installed at {DOCS_DIR}: apt-get install {DOCS_PACKAGE}");
    }
    let dest = data.join(DOCS_COPY);
    let done = data.join(format!("{DOCS_COPY}.complete"));
    if done.is_file() && dest.is_dir() {
        return Ok(dest);
    }
    std::fs::create_dir_all(data).with_context(|| format!("creating {}", data.display()))?;
    let partial = data.join(format!("{DOCS_COPY}.partial"));
    for d in [&partial, &dest] {
        if d.exists() {
            std::fs::remove_dir_all(d).with_context(|| format!("removing {}", d.display()))?;
        }
    }
    let st = Command::new("cp")
        .arg("-rL")
        .arg(src)
        .arg(&partial)
        .status()
        .context("running cp")?;
    if !st.success() {
        bail!("cp -rL {DOCS_DIR} {} failed ({st})", partial.display());
    }
    std::fs::rename(&partial, &dest)?;
    std::fs::write(&done, format!("copied from {DOCS_DIR}\n"))?;
    Ok(dest)
}

/// Every .html, .css and .js file under `root`, by path from it, sorted.
fn doc_files(root: &Path) -> Result<Vec<DocFile>> {
    let mut out = Vec::new();
    let mut dirs = vec![root.to_path_buf()];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).with_context(|| format!("reading {}", d.display()))? {
            let e = e?;
            let p = e.path();
            let meta = std::fs::metadata(&p)?;
            if meta.is_dir() {
                if e.file_name() != FIRST_DIR {
                    dirs.push(p);
                }
                continue;
            }
            let rel = p.strip_prefix(root)?.to_string_lossy().to_string();
            if is_fetched(&rel) {
                out.push(DocFile {
                    path: rel,
                    size: meta.len(),
                });
            }
        }
    }
    out.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(out)
}

/// Whether a path is one of the URL set's (by its extension).
fn is_fetched(path: &str) -> bool {
    Path::new(path)
        .extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| URL_EXTENSIONS.contains(&e))
}

/// `n` files spread over the whole sorted list (`--quick`).
fn spread(files: &[DocFile], n: usize) -> Vec<DocFile> {
    if files.len() <= n {
        return files.to_vec();
    }
    (0..n).map(|i| files[i * files.len() / n].clone()).collect()
}

/// A path as it goes in a URL: bytes other than unreserved characters and
/// `/` percent-encoded.
fn url_path(path: &str) -> String {
    let mut s = String::with_capacity(path.len());
    for b in path.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~/".contains(&b) {
            s.push(b as char);
        } else {
            s.push_str(&format!("%{b:02X}"));
        }
    }
    s
}

/// The URL list of `files` on `port` in a fresh random order.
fn url_list(files: &[DocFile], port: u16, rng: &mut impl rand::Rng) -> String {
    let mut order: Vec<&DocFile> = files.iter().collect();
    order.shuffle(rng);
    order
        .iter()
        .map(|f| format!("http://127.0.0.1:{port}/{}\n", url_path(&f.path)))
        .collect()
}

/// The codings lighttpd's build has, from `lighttpd -V`, in the order
/// `deflate.allowed-encodings` takes them.
fn lighttpd_codings(version_text: &str) -> Vec<String> {
    let has = |lib: &str| version_text.contains(&format!("+ {lib} support"));
    [("br", "brotli"), ("gzip", "zlib"), ("zstd", "zstd")]
        .iter()
        .filter(|(_, lib)| has(lib))
        .map(|(c, _)| c.to_string())
        .collect()
}

/// A response read to the end of its connection.
#[derive(Debug, Clone, PartialEq)]
struct Response {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Response {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The coding the body came with; `identity` without one.
    fn coding(&self) -> String {
        self.header("content-encoding")
            .map(|v| v.trim().to_ascii_lowercase())
            .unwrap_or_else(|| "identity".into())
    }
}

/// Reads an HTTP/1.1 response that ends with its connection: status line,
/// headers, and the body (chunks joined, or `Content-Length` bytes).
fn parse_response(raw: &[u8]) -> Result<Response> {
    let end = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| anyhow!("no end of headers in {} bytes", raw.len()))?;
    let head = std::str::from_utf8(&raw[..end]).context("headers are not UTF-8")?;
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let status = status_line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| anyhow!("bad status line {status_line:?}"))?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect();
    let mut r = Response {
        status,
        headers,
        body: Vec::new(),
    };
    let rest = &raw[end + 4..];
    let chunked = r
        .header("transfer-encoding")
        .is_some_and(|v| v.to_ascii_lowercase().contains("chunked"));
    r.body = if chunked {
        dechunk(rest)?
    } else if let Some(n) = r.header("content-length") {
        let n: usize = n.parse().context("bad Content-Length")?;
        if rest.len() < n {
            bail!("body cut short: {} of {n} bytes", rest.len());
        }
        rest[..n].to_vec()
    } else {
        rest.to_vec()
    };
    Ok(r)
}

/// Joins the chunks of a chunked body (extensions and trailers skipped).
fn dechunk(mut data: &[u8]) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        let eol = data
            .windows(2)
            .position(|w| w == b"\r\n")
            .ok_or_else(|| anyhow!("chunked body cut short"))?;
        let line = std::str::from_utf8(&data[..eol]).context("bad chunk size line")?;
        let hex = line.split(';').next().unwrap_or_default().trim();
        let n =
            usize::from_str_radix(hex, 16).with_context(|| format!("bad chunk size {hex:?}"))?;
        data = &data[eol + 2..];
        if n == 0 {
            return Ok(out);
        }
        if data.len() < n + 2 {
            bail!("chunk cut short: {} of {n} bytes", data.len());
        }
        out.extend_from_slice(&data[..n]);
        data = &data[n + 2..];
    }
}

/// One fetch on a connection of its own (`Connection: close`).
struct Fetched {
    response: Response,
    /// Every byte the server sent.
    wire_bytes: usize,
    /// From the connect to the last byte.
    ms: f64,
}

/// GETs `/path` from the server on `port` asking for `coding`.
fn fetch(port: u16, path: &str, coding: &str) -> Result<Fetched> {
    let t0 = Instant::now();
    let mut s = TcpStream::connect(("127.0.0.1", port))?;
    s.set_read_timeout(Some(FETCH_TIMEOUT))?;
    write!(
        s,
        "GET /{} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAccept-Encoding: {coding}\r\nConnection: close\r\n\r\n",
        url_path(path)
    )?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw)
        .with_context(|| format!("reading /{path}"))?;
    let ms = t0.elapsed().as_secs_f64() * 1000.0;
    let response = parse_response(&raw).with_context(|| format!("/{path}"))?;
    Ok(Fetched {
        response,
        wire_bytes: raw.len(),
        ms,
    })
}

/// How a warm-up went.
#[derive(Debug, Clone, Copy)]
struct Warm {
    passes: u32,
    /// Files of [`WARM_MIN_BYTES`] or more that came compressed, of
    /// `expected`.
    compressed: usize,
    expected: usize,
    seconds: f64,
}

/// Fetches every file asking for `coding`, then those still answered
/// otherwise again, until all of [`WARM_MIN_BYTES`] or more come with it
/// (bounded: [`WARM_MAX_PASSES`], [`WARM_STALL`], [`WARM_MAX`]).
fn warm_up(port: u16, files: &[DocFile], coding: &str) -> Result<Warm> {
    let start = Instant::now();
    let expected = files.iter().filter(|f| f.size >= WARM_MIN_BYTES).count();
    let mut pending: Vec<&DocFile> = files.iter().collect();
    let (mut passes, mut compressed) = (0, 0);
    let mut progress_at = start;
    loop {
        passes += 1;
        let before = compressed;
        let mut still = Vec::new();
        for f in pending {
            let r = fetch(port, &f.path, coding)?.response;
            if r.status != 200 {
                bail!("warm-up: /{} answered {}", f.path, r.status);
            }
            let big = f.size >= WARM_MIN_BYTES;
            match (r.coding() == coding, big) {
                (true, true) => compressed += 1,
                (false, true) => still.push(f),
                _ => {}
            }
        }
        if compressed > before {
            progress_at = Instant::now();
        }
        pending = still;
        let done = pending.is_empty()
            || passes >= WARM_MAX_PASSES
            || progress_at.elapsed() > WARM_STALL
            || start.elapsed() > WARM_MAX;
        if done {
            break;
        }
        std::thread::sleep(WARM_PAUSE);
    }
    Ok(Warm {
        passes,
        compressed,
        expected,
        seconds: start.elapsed().as_secs_f64(),
    })
}

/// The command that decodes a coding from standard input.
fn decoder(coding: &str) -> Option<(&'static str, &'static [&'static str])> {
    match coding {
        "gzip" => Some(("gzip", &["-dc"])),
        "br" => Some(("brotli", &["-dc"])),
        "zstd" => Some(("zstd", &["-dcq"])),
        _ => None,
    }
}

/// Decodes `body` with the coding's command-line tool; None when the tool
/// is not installed.
fn decode(coding: &str, body: &[u8]) -> Option<Result<Vec<u8>>> {
    let (prog, args) = decoder(coding)?;
    crate::servers::which(prog)?;
    let run = || -> Result<Vec<u8>> {
        let mut child = Command::new(prog)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()?;
        let mut stdin = child.stdin.take().expect("piped");
        let input = body.to_vec();
        let writer = std::thread::spawn(move || stdin.write_all(&input));
        let out = child.wait_with_output()?;
        let _ = writer.join();
        if !out.status.success() {
            bail!(
                "{prog} {}: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(out.stdout)
    };
    Some(run())
}

/// Fetches `file` asking for `coding` and checks that it comes with that
/// coding and decodes to the file; false when no tool decodes it here.
fn verify(port: u16, root: &Path, file: &DocFile, coding: &str) -> Result<bool> {
    let r = fetch(port, &file.path, coding)?.response;
    if r.coding() != coding {
        bail!(
            "/{} came with Content-Encoding {} when asked for {coding}",
            file.path,
            r.coding()
        );
    }
    let Some(decoded) = decode(coding, &r.body) else {
        return Ok(false);
    };
    let decoded = decoded.with_context(|| format!("decoding /{} ({coding})", file.path))?;
    let want = std::fs::read(root.join(&file.path))?;
    if decoded != want {
        bail!(
            "/{} ({coding}) decodes to {} bytes that are not the file's {}",
            file.path,
            decoded.len(),
            want.len()
        );
    }
    Ok(true)
}

/// The first-request file's content: the documentation's own JavaScript
/// (`_static/*.js`, then searchindex.js) cut at [`FIRST_BYTES`].
fn first_js(root: &Path) -> Result<Vec<u8>> {
    let mut parts: Vec<PathBuf> = std::fs::read_dir(root.join("_static"))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "js"))
        .collect();
    parts.sort();
    parts.push(root.join("searchindex.js"));
    let mut out = Vec::with_capacity(FIRST_BYTES);
    for p in parts {
        if out.len() >= FIRST_BYTES {
            break;
        }
        out.extend(std::fs::read(&p).with_context(|| format!("reading {}", p.display()))?);
        out.push(b'\n');
    }
    if out.len() < FIRST_BYTES {
        bail!(
            "the documentation's JavaScript makes only {} bytes",
            out.len()
        );
    }
    out.truncate(FIRST_BYTES);
    Ok(out)
}

/// One first request: a file by a name never served before, asked for
/// with gzip once.
#[derive(Debug, Clone)]
struct First {
    ms: f64,
    wire_bytes: usize,
    coding: String,
}

/// Writes the first-request file under a fresh name, fetches it once with
/// `Accept-Encoding: gzip`, and removes it.
fn first_request(port: u16, root: &Path, content: &[u8], tag: &str) -> Result<First> {
    let dir = root.join(FIRST_DIR);
    std::fs::create_dir_all(&dir)?;
    let name = format!("{FIRST_DIR}/first-{tag}-{}.js", std::process::id());
    let path = root.join(&name);
    std::fs::write(&path, content)?;
    let got = fetch(port, &name, "gzip");
    let _ = std::fs::remove_file(&path);
    let got = got?;
    if got.response.status != 200 {
        bail!("first request: /{name} answered {}", got.response.status);
    }
    Ok(First {
        ms: got.ms,
        wire_bytes: got.wire_bytes,
        coding: got.response.coding(),
    })
}

/// The report's group of a coding.
/// What the round-by-round table sets against each peer's same round.
const ROUND_KEYS: [(&str, &str); 2] = [("req_per_sec", "req/s"), ("cpu_s_per_10k", "CPU / req")];

fn group(coding: &str) -> String {
    format!("Accept-Encoding: {coding}, keep-alive")
}

pub const COLUMNS: [Column; 9] = [
    col("req_per_sec", "req/s", 0),
    col("cpu_s_per_10k", "server CPU s / 10k req", 3),
    col("wire_bytes_per_req", "bytes on the wire / req", 0),
    col("body_bytes_per_req", "body B / req", 0),
    col("header_bytes_per_req", "header B / req", 0),
    col("body_share", "body / identity", 3),
    col("load_passes", "passes", 0),
    col("warm_passes", "warm-up passes", 0),
    col("non_200", "non-2xx", 0),
];

/// What a run measures beyond the report's series: the first requests,
/// and which codings each server was found not to make.
#[derive(Default)]
struct Extras {
    firsts: BTreeMap<String, Vec<First>>,
    unsupported: BTreeSet<(String, String)>,
    warm_notes: Vec<String>,
}

pub fn run(a: CompressArgs) -> Result<()> {
    let c = &a.common;
    for coding in &a.codings {
        if !CODINGS.contains(&coding.as_str()) {
            bail!("unknown coding {coding:?}: expected gzip, br or zstd");
        }
    }
    let root = ensure_docs(&c.data)?;
    let all = doc_files(&root)?;
    let files = if c.quick {
        spread(&all, QUICK_FILES)
    } else {
        all
    };
    if files.is_empty() {
        bail!("no .html, .css or .js files under {}", root.display());
    }
    let first_content = first_js(&root)?;
    let plan = LoadPlan {
        clients: if c.quick {
            a.clients.min(QUICK_CLIENTS)
        } else {
            a.clients
        }
        .max(1),
        seconds: if c.quick { QUICK_SECONDS } else { a.seconds },
        estimate_secs: if c.quick {
            QUICK_SECONDS
        } else {
            ESTIMATE_SECS
        },
        workers: c.workers,
    };
    let (contenders, skipped) = runnable(contenders(c)?)?;
    let lighttpd_codings = crate::servers::which("lighttpd")
        .and_then(|p| Command::new(p).arg("-V").output().ok())
        .map(|o| lighttpd_codings(&String::from_utf8_lossy(&o.stdout)))
        .unwrap_or_default();
    let mut report = new_report(c, &a, &contenders, &files, plan, &lighttpd_codings);
    report.notes.extend(skipped);
    let work = common::workdir(&c.out, "compress")?;
    let verify_file = files
        .iter()
        .filter(|f| f.size >= WARM_MIN_BYTES && f.size <= FIRST_BYTES as u64)
        .max_by_key(|f| f.size)
        .cloned();
    let total = c.rounds() as u64 * contenders.len() as u64 * (a.codings.len() as u64 + 1);
    let progress = Progress::new(total, "compress");
    let mut extras = Extras::default();
    let session = Session {
        a: &a,
        root: &root,
        files: &files,
        plan,
        work: &work,
        lighttpd_codings: &lighttpd_codings,
        verify_file: verify_file.as_ref(),
        first_content: &first_content,
        progress: &progress,
    };
    for round in 0..c.rounds() as usize {
        session.round(round, &contenders, &mut report, &mut extras)?;
    }
    progress.finish();
    finish_report(&mut report, &contenders, &a.codings, &extras);
    let files = report.write(&c.out, "compress", &COLUMNS, "requests per second")?;
    for f in files {
        eprintln!("wrote {}", f.display());
    }
    Ok(())
}

/// The contenders that can run (with their versions), and notes on those
/// skipped.
type Runnable = (Vec<(Contender, String)>, Vec<String>);

/// The contenders that can run here (with their versions), and notes
/// for those that cannot.
fn runnable(all: Vec<Contender>) -> Result<Runnable> {
    let mut ok = Vec::new();
    let mut notes = Vec::new();
    for k in all {
        match k.server.version() {
            Ok(v) => ok.push((k, v)),
            Err(why) => notes.push(format!("{} skipped: {why}", k.name)),
        }
    }
    if ok.is_empty() {
        bail!(
            "none of the requested servers can run here: {}",
            notes.join("; ")
        );
    }
    Ok((ok, notes))
}

/// The report before any sample: machine, versions, parameters, notes.
fn new_report(
    c: &CommonArgs,
    a: &CompressArgs,
    contenders: &[(Contender, String)],
    files: &[DocFile],
    plan: LoadPlan,
    lighttpd_codings: &[String],
) -> Report {
    let mut machine = Machine::probe(&c.data);
    for (k, v) in contenders {
        machine.versions.insert(k.name.clone(), v.clone());
    }
    let bytes: u64 = files.iter().map(|f| f.size).sum();
    let mut report = Report::new(
        "compress",
        "compress: compression on the fly, Python documentation, cached, keep-alive",
        machine,
        json!({"seconds": plan.seconds, "clients": plan.clients, "workers": c.workers,
               "rounds": c.rounds(), "codings": a.codings, "urls": files.len(),
               "url_bytes": bytes, "docs": DOCS_DIR}),
    );
    report.baseline = c.baseline.clone().unwrap_or_else(|| {
        contenders
            .iter()
            .find(|(k, _)| k.is_spindle())
            .unwrap_or(&contenders[0])
            .0
            .name
            .clone()
    });
    report.primary = "req_per_sec".into();
    report.vs_best_peer = true;
    if c.quick {
        report.smoke_test(QUICK_COMPRESS);
    }
    let (server_cpu, load_cpu) = common::pinning(c.workers);
    report.notes.push(format!(
        "{} files of {DOCS_DIR} ({DOCS_PACKAGE}, copied with symlinks followed): every .html, .css and .js, {:.1} MB, {:.0} bytes each on average (the `identity` of the body / identity column)",
        files.len(),
        bytes as f64 / 1e6,
        bytes as f64 / files.len().max(1) as f64
    ));
    report.notes.push(format!(
        "one worker each, server pinned to CPU {}, h2load to CPU {}; server CPU = utime+stime of every process and thread in the server's process group (/proc/PID/stat), spindle's compression helper included",
        server_cpu.unwrap_or_else(|| "any".into()),
        load_cpu.unwrap_or_else(|| "any".into())
    ));
    report.notes.push(format!(
        "load: h2load --h1 -c {} (keep-alive, one thread) with `-H 'Accept-Encoding: CODING'`; first a {:.1} s run estimates the rate, then `-n` makes every client fetch the URL list (in a fresh random order) in whole passes, as many as fill {} s (one at least), so that every server answers the same requests. All servers of a round run side by side, and each one's load of a coding is cut into at most {SLICES} equal slices of whole passes, taken in turns (slice 1 of every server, then slice 2, the order rotated each turn), so that the machine's drift over minutes falls on all alike; its numbers are its slices' sums; bytes on the wire = h2load's traffic total (all it read: status lines, headers, chunk framing, bodies) / requests; header B = h2load's count of header names and values; body B = bodies as decoded from chunks, still compressed",
        plan.clients, plan.estimate_secs, plan.seconds
    ));
    report.notes.push(format!(
        "warm-up (cached): before each coding, every URL fetched with that Accept-Encoding (a connection each), then those of {WARM_MIN_BYTES} bytes or more still answered otherwise again every {} s, until all come with it, for at most {WARM_MAX_PASSES} passes or {} s, or {} s without one more; `warm-up passes` says how many it took. A server that answers no file with a coding does not make it: \"–\". After it, one page is fetched again and decoded with the coding's own tool (gzip, brotli, zstd) against the file",
        WARM_PAUSE.as_secs(),
        WARM_MAX.as_secs(),
        WARM_STALL.as_secs()
    ));
    report.notes.push("nginx is measured at gzip_comp_level 1, its default, and 6, the level most configs set (nginx-gzipN)".into());
    for (k, _) in contenders {
        report.notes.push(k.config_note(lighttpd_codings));
    }
    if !a.spindle_flags.is_empty() {
        report.notes.push(format!(
            "spindle servers ran with {}",
            a.spindle_flags.join(" ")
        ));
    }
    report
}

/// What every server's session needs.
struct Session<'a> {
    a: &'a CompressArgs,
    root: &'a Path,
    files: &'a [DocFile],
    plan: LoadPlan,
    work: &'a Path,
    lighttpd_codings: &'a [String],
    verify_file: Option<&'a DocFile>,
    first_content: &'a [u8],
    progress: &'a Progress,
}

/// A server started for a round, with its cache directory.
struct Up<'a> {
    k: &'a Contender,
    running: Running,
    cache: PathBuf,
}

impl Session<'_> {
    /// One round: every server started fresh (with a fresh cache), then
    /// for each coding every server warmed and the loads taken in turns
    /// (load.rs), then each server's first request.
    fn round(
        &self,
        round: usize,
        contenders: &[(Contender, String)],
        report: &mut Report,
        extras: &mut Extras,
    ) -> Result<()> {
        let mut up = Vec::new();
        for (k, _) in common::rotated(contenders, round) {
            if let Some(u) = self.start(round, k, report)? {
                up.push(u);
            }
        }
        for coding in common::rotated(&self.a.codings, round) {
            self.coding(round, coding, &up, report, extras);
        }
        for mut u in up {
            self.first(round, &u, extras);
            u.running.stop()?;
            let _ = std::fs::remove_dir_all(&u.cache);
        }
        Ok(())
    }

    /// A fresh start with a fresh cache; `None` (its samples errors) when
    /// the server does not start.
    fn start<'k>(
        &self,
        round: usize,
        k: &'k Contender,
        report: &mut Report,
    ) -> Result<Option<Up<'k>>> {
        let c = &self.a.common;
        let cache = self.work.join(format!("cache-{}-{round}", k.name));
        if cache.exists() {
            std::fs::remove_dir_all(&cache)?;
        }
        std::fs::create_dir_all(&cache)?;
        let mut setup = common::setup(self.root, c.workers);
        if k.is_spindle() {
            setup.spindle_flags = self.a.spindle_flags.clone();
        }
        setup.compress = Some(Compress {
            nginx_gzip_level: k.gzip_level,
            lighttpd_codings: self.lighttpd_codings.to_vec(),
            cache_dir: cache.clone(),
        });
        match Running::start(&k.server, &setup) {
            Ok(running) => Ok(Some(Up { k, running, cache })),
            Err(e) => {
                for coding in &self.a.codings {
                    report.add(&group(coding), &k.name, Err(anyhow!("{e:#}")));
                    self.progress.done(format!(
                        "round {} {}: failed to start: {e:#}",
                        round + 1,
                        k.name
                    ));
                }
                self.progress.done(format!(
                    "round {} first request {}: failed to start",
                    round + 1,
                    k.name
                ));
                Ok(None)
            }
        }
    }

    /// The first request on a warm server.
    fn first(&self, round: usize, u: &Up, extras: &mut Extras) {
        let k = u.k;
        self.progress
            .start(format!("round {} first request {}", round + 1, k.name));
        let tag = format!("{}-r{round}", k.name.replace(['@', '/'], "_"));
        let line = match first_request(u.running.port, self.root, self.first_content, &tag) {
            Ok(f) => {
                let line = format!(
                    "round {} first request {:<24} {:>8.1} ms {:>8} bytes {}",
                    round + 1,
                    k.name,
                    f.ms,
                    f.wire_bytes,
                    f.coding
                );
                extras.firsts.entry(k.name.clone()).or_default().push(f);
                line
            }
            Err(e) => format!("round {} first request {}: {e:#}", round + 1, k.name),
        };
        self.progress.done(line);
    }

    /// One coding: every server warmed (which decides whether it makes
    /// the coding) and a decoded sample checked, then the loads of those
    /// that do, in turns.
    fn coding(
        &self,
        round: usize,
        coding: &str,
        up: &[Up],
        report: &mut Report,
        extras: &mut Extras,
    ) {
        let g = group(coding);
        let mut ready = Vec::new();
        for u in up {
            match self.warm(round, u, coding, report, extras) {
                Some(Ok(w)) => ready.push((u, w)),
                Some(Err(e)) => {
                    self.progress
                        .done(format!("round {} {g} {}: {e:#}", round + 1, u.k.name));
                    report.add(&g, &u.k.name, Err(e));
                }
                None => {}
            }
        }
        let loads = Loads {
            files: self.files,
            coding,
            plan: self.plan,
            work: self.work,
        };
        self.progress
            .start(format!("round {} {g} loads in turns", round + 1));
        let mut shares: Vec<Share> = ready
            .iter()
            .map(|(u, _)| Share::new(&u.running, loads.passes(&u.running)))
            .collect();
        in_turns(&loads, &mut shares);
        let identity =
            self.files.iter().map(|f| f.size as f64).sum::<f64>() / self.files.len().max(1) as f64;
        for ((u, w), share) in ready.iter().zip(shares) {
            let sample = share
                .tally
                .and_then(|t| t.sample(identity, self.plan.clients))
                .map(|mut m| {
                    m.insert("round".into(), round as f64);
                    m.insert("warm_passes".into(), w.warm.passes as f64);
                    m.insert("warm_s".into(), w.warm.seconds);
                    m.insert("verified".into(), if w.verified { 1.0 } else { 0.0 });
                    m
                });
            let line = match &sample {
                Ok(m) => format!(
                    "round {} {g:<34} {:<24} {:>9.0} req/s {:>7.3} CPU s/10k {:>8.0} B/req ({} warm-up passes; slices {:.0}-{:.0} req/s)",
                    round + 1,
                    u.k.name,
                    m.get("req_per_sec").unwrap_or(&0.0),
                    m.get("cpu_s_per_10k").unwrap_or(&0.0),
                    m.get("wire_bytes_per_req").unwrap_or(&0.0),
                    w.warm.passes,
                    m.get("slice_rps_min").unwrap_or(&0.0),
                    m.get("slice_rps_max").unwrap_or(&0.0),
                ),
                Err(e) => format!("round {} {g} {}: {e:#}", round + 1, u.k.name),
            };
            report.add(&g, &u.k.name, sample);
            self.progress.done(line);
        }
    }

    /// A server's warm-up for `coding` and its decoded sample. `None`
    /// when it does not make the coding (noted in the report).
    fn warm(
        &self,
        round: usize,
        u: &Up,
        coding: &str,
        report: &mut Report,
        extras: &mut Extras,
    ) -> Option<Result<Warmed>> {
        let (k, g) = (u.k, group(coding));
        let key = (k.name.clone(), coding.to_string());
        if extras.unsupported.contains(&key) {
            self.progress
                .done(format!("round {} {g} {}: not supported", round + 1, k.name));
            return None;
        }
        self.progress
            .start(format!("round {} {g} {} warm-up", round + 1, k.name));
        let w = match warm_up(u.running.port, self.files, coding) {
            Ok(w) => w,
            Err(e) => return Some(Err(e)),
        };
        if w.compressed == 0 {
            let why = format!(
                "answered no file with Content-Encoding {coding} when asked for it ({} passes, {:.0} s)",
                w.passes, w.seconds
            );
            report.add_unsupported(&g, &k.name, &why);
            extras.unsupported.insert(key);
            self.progress
                .done(format!("round {} {g} {}: not supported", round + 1, k.name));
            return None;
        }
        if w.compressed < w.expected {
            extras.warm_notes.push(format!(
                "round {} {} {coding}: after {} warm-up passes ({:.0} s) {} of {} files of {WARM_MIN_BYTES} bytes or more still came uncompressed",
                round + 1,
                k.name,
                w.passes,
                w.seconds,
                w.expected - w.compressed,
                w.expected
            ));
        }
        let verified = match self.verify_file {
            Some(f) => verify(u.running.port, self.root, f, coding),
            None => Ok(false),
        };
        Some(verified.map(|verified| Warmed { warm: w, verified }))
    }
}

/// A warm-up, and whether a page fetched after it decoded to the file.
struct Warmed {
    warm: Warm,
    verified: bool,
}

/// The report's last parts: warm-up notes, the first requests' table,
/// the bars.
fn finish_report(
    report: &mut Report,
    contenders: &[(Contender, String)],
    codings: &[String],
    extras: &Extras,
) {
    report.machine.finish();
    report.notes.extend(extras.warm_notes.iter().cloned());
    report
        .notes
        .extend(warm_summary(report, contenders, codings));
    let unverified: Vec<String> = report
        .series
        .iter()
        .filter(|s| !s.samples.is_empty() && s.medians.get("verified") != Some(&1.0))
        .map(|s| format!("{} ({})", s.server, s.group))
        .collect();
    if !unverified.is_empty() {
        report.notes.push(format!(
            "not decoded (no tool for the coding here): {}",
            unverified.join(", ")
        ));
    }
    let firsts: serde_json::Map<String, serde_json::Value> = extras
        .firsts
        .iter()
        .map(|(k, v)| {
            let rows: Vec<_> = v
                .iter()
                .map(|f| json!({"ms": f.ms, "wire_bytes": f.wire_bytes, "content_encoding": f.coding}))
                .collect();
            (k.clone(), json!(rows))
        })
        .collect();
    report
        .extra
        .insert("first_request".into(), serde_json::Value::Object(firsts));
    let order: Vec<String> = contenders.iter().map(|(k, _)| k.name.clone()).collect();
    report.extra_md.push(first_table(&order, &extras.firsts));
    if !report.smoke_test {
        report.extra_md.push(bars(report, codings));
        let groups: Vec<(String, String)> = codings.iter().map(|c| (c.clone(), group(c))).collect();
        report
            .extra_md
            .push(report.round_by_round("coding", &groups, &ROUND_KEYS));
    }
}

/// A note per spindle server: how many warm-up passes (and seconds) each
/// coding took, medians over the rounds.
fn warm_summary(
    report: &Report,
    contenders: &[(Contender, String)],
    codings: &[String],
) -> Vec<String> {
    let mut notes = Vec::new();
    for (k, _) in contenders.iter().filter(|(k, _)| k.is_spindle()) {
        let per: Vec<String> = codings
            .iter()
            .filter_map(|coding| {
                let s = report
                    .series
                    .iter()
                    .find(|s| s.group == group(coding) && s.server == k.name)?;
                let (passes, _, _) = stats(&s.samples, "warm_passes")?;
                let (secs, _, _) = stats(&s.samples, "warm_s")?;
                Some(format!("{coding} {passes:.0} passes ({secs:.0} s)"))
            })
            .collect();
        if !per.is_empty() {
            notes.push(format!(
                "{} warm-up until every file came compressed (medians): {}",
                k.name,
                per.join(", ")
            ));
        }
    }
    notes
}

/// The first requests' table: time to the last byte, bytes received and
/// the coding each server answered with.
fn first_table(order: &[String], firsts: &BTreeMap<String, Vec<First>>) -> String {
    let mut o = format!(
        "## First request: a 1 MiB JavaScript file no cache has seen, `Accept-Encoding: gzip`\n\n\
         On the warm server after its loads, a file by a fresh name ({} bytes of the documentation's own JavaScript), fetched once on a connection of its own: time from the connect to the last byte, and every byte received. spindle answers identity while its helper compresses in the background; nginx, Caddy and H2O compress inline; lighttpd compresses inline into its cache.\n\n\
         | server | time to last byte ms median (min–max) | bytes received | Content-Encoding |\n|---|---:|---:|---|\n",
        FIRST_BYTES
    );
    for name in order {
        let Some(v) = firsts.get(name) else {
            o.push_str(&format!("| {name} | failed | – | – |\n"));
            continue;
        };
        let ms: Vec<BTreeMap<String, f64>> = v
            .iter()
            .map(|f| {
                BTreeMap::from([
                    ("ms".to_string(), f.ms),
                    ("b".to_string(), f.wire_bytes as f64),
                ])
            })
            .collect();
        let (med, lo, hi) = stats(&ms, "ms").unwrap_or_default();
        let (bytes, _, _) = stats(&ms, "b").unwrap_or_default();
        let mut codings: BTreeMap<&str, usize> = BTreeMap::new();
        for f in v {
            *codings.entry(f.coding.as_str()).or_default() += 1;
        }
        let codings: Vec<String> = codings
            .iter()
            .map(|(c, n)| {
                if v.len() > 1 {
                    format!("{c} ×{n}")
                } else {
                    c.to_string()
                }
            })
            .collect();
        o.push_str(&format!(
            "| {name} | {med:.1} ({lo:.1}–{hi:.1}) | {} | {} |\n",
            fmt(bytes, 0),
            codings.join(", ")
        ));
    }
    o
}

/// The issue's bars, per coding: spindle's req/s against the best peer's
/// at no more CPU per request, and its bytes on the wire against the
/// smallest peer's.
fn bars(report: &Report, codings: &[String]) -> String {
    let spindle = report.baseline.clone();
    let mut o = format!(
        "## Bars\n\nPer coding, {spindle} against the peer with the most req/s (req/s ≥ its, at ≤ its CPU per request) and the peer with the fewest bytes on the wire per request (≤ its); ratios of medians.\n\n\
         | coding | best peer by req/s | req/s ratio | CPU / req ratio | fewest bytes: peer | bytes ratio | met |\n|---|---|---:|---:|---|---:|---|\n"
    );
    for coding in codings {
        let g = group(coding);
        let med = |server: &str, key: &str| report.median(&g, server, key);
        let peers: Vec<&str> = report
            .series
            .iter()
            .filter(|s| s.group == g && !s.server.starts_with("spindle") && !s.samples.is_empty())
            .map(|s| s.server.as_str())
            .collect();
        let by = |key: &str, most: bool| {
            peers
                .iter()
                .filter_map(|p| med(p, key).map(|v| (*p, v)))
                .max_by(|a, b| {
                    if most {
                        a.1.total_cmp(&b.1)
                    } else {
                        b.1.total_cmp(&a.1)
                    }
                })
        };
        let (Some((fast, rps)), Some((small, bytes)), Some(s_rps)) = (
            by("req_per_sec", true),
            by("wire_bytes_per_req", false),
            med(&spindle, "req_per_sec"),
        ) else {
            o.push_str(&format!(
                "| {coding} | – | – | – | – | – | not judged (no peer or no {spindle} numbers) |\n"
            ));
            continue;
        };
        let r = s_rps / rps;
        let cpu = med(&spindle, "cpu_s_per_10k").unwrap_or(f64::NAN)
            / med(fast, "cpu_s_per_10k").unwrap_or(f64::NAN);
        let b = med(&spindle, "wire_bytes_per_req").unwrap_or(f64::NAN) / bytes;
        let met = r >= 1.0 && cpu <= 1.0 && b <= 1.0;
        o.push_str(&format!(
            "| {coding} | {fast} | {r:.2}× | {cpu:.2}× | {small} | {b:.2}× | {} |\n",
            if met { "yes" } else { "no" }
        ));
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(path: &str, size: u64) -> DocFile {
        DocFile {
            path: path.into(),
            size,
        }
    }

    #[test]
    fn contenders_are_named_by_nginx_level() {
        let k = Contender::parse("nginx-gzip6").unwrap();
        assert_eq!(k.server, Server::NginxSendfile);
        assert_eq!((k.name.as_str(), k.gzip_level), ("nginx-gzip6", 6));
        assert!(Contender::parse("nginx-gzip0").is_err());
        assert!(Contender::parse("nginx-gzip10").is_err());
        assert!(Contender::parse("nginx-sendfile").is_err());
        assert_eq!(Contender::parse("caddy").unwrap().server, Server::Caddy);
        let s = Contender::parse("spindle-io-uring").unwrap();
        assert!(s.is_spindle());
        for name in COMPRESS_SERVERS.split(',') {
            assert_eq!(Contender::parse(name).unwrap().name, name);
        }
    }

    #[test]
    fn the_url_set_is_html_css_and_js() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        for p in [
            "index.html",
            "_static/a.css",
            "_static/b.js",
            "_static/c.png",
            "x/y.txt",
            "objects.inv",
        ] {
            let f = root.join(p);
            std::fs::create_dir_all(f.parent().unwrap()).unwrap();
            std::fs::write(&f, p).unwrap();
        }
        std::fs::create_dir_all(root.join(FIRST_DIR)).unwrap();
        std::fs::write(root.join(FIRST_DIR).join("first.js"), "x").unwrap();
        let got: Vec<String> = doc_files(root)
            .unwrap()
            .into_iter()
            .map(|f| f.path)
            .collect();
        assert_eq!(got, ["_static/a.css", "_static/b.js", "index.html"]);
    }

    #[test]
    fn url_lists_hold_every_file_once_in_a_fresh_order() {
        use rand::SeedableRng;
        let files: Vec<DocFile> = (0..50)
            .map(|i| file(&format!("f{i:02} x.html"), 10))
            .collect();
        let mut rng = rand::rngs::SmallRng::seed_from_u64(7);
        let a = url_list(&files, 8080, &mut rng);
        let b = url_list(&files, 8080, &mut rng);
        assert_ne!(a, b, "a fresh order each time");
        let mut lines: Vec<&str> = a.lines().collect();
        assert_eq!(lines.len(), 50);
        lines.sort();
        assert_eq!(lines[0], "http://127.0.0.1:8080/f00%20x.html");
        lines.dedup();
        assert_eq!(lines.len(), 50);
    }

    #[test]
    fn quick_spreads_over_the_list() {
        let files: Vec<DocFile> = (0..100).map(|i| file(&format!("{i:03}.html"), 1)).collect();
        let s = spread(&files, 4);
        let names: Vec<&str> = s.iter().map(|f| f.path.as_str()).collect();
        assert_eq!(names, ["000.html", "025.html", "050.html", "075.html"]);
        assert_eq!(spread(&files[..3], 4).len(), 3);
    }

    #[test]
    fn lighttpd_codings_follow_its_build() {
        let v = "Features:\n\n\t+ IPv6 support\n\t+ zlib support\n\t+ zstd support\n\t- bzip2 support\n\t+ brotli support\n";
        assert_eq!(lighttpd_codings(v), ["br", "gzip", "zstd"]);
        let v = "\t+ zlib support\n\t- zstd support\n\t- brotli support\n";
        assert_eq!(lighttpd_codings(v), ["gzip"]);
    }

    #[test]
    fn responses_are_read_with_and_without_chunks() {
        let raw = b"HTTP/1.1 200 OK\r\nContent-Type: text/css\r\nTransfer-Encoding: chunked\r\nContent-Encoding: gzip\r\n\r\n4;x=y\r\nabcd\r\n2\r\nef\r\n0\r\nTrailer: 1\r\n\r\n";
        let r = parse_response(raw).unwrap();
        assert_eq!(r.status, 200);
        assert_eq!(r.body, b"abcdef");
        assert_eq!(r.coding(), "gzip");
        let raw = b"HTTP/1.1 404 Not Found\r\ncontent-length: 3\r\n\r\nabcXYZ";
        let r = parse_response(raw).unwrap();
        assert_eq!((r.status, r.body.as_slice()), (404, &b"abc"[..]));
        assert_eq!(r.coding(), "identity");
        assert!(parse_response(b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nabc").is_err());
        assert!(
            parse_response(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab")
                .is_err()
        );
        assert!(parse_response(b"HTTP/1.1 200 OK\r\n").is_err());
    }

    #[test]
    fn the_first_request_file_is_the_docs_javascript_cut_at_1_mib() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("_static")).unwrap();
        std::fs::write(root.join("_static/a.js"), "var a = 1;").unwrap();
        std::fs::write(root.join("_static/b.css"), "body {}").unwrap();
        std::fs::write(root.join("searchindex.js"), "x".repeat(FIRST_BYTES)).unwrap();
        let js = first_js(root).unwrap();
        assert_eq!(js.len(), FIRST_BYTES);
        assert!(js.starts_with(b"var a = 1;\nxxx"));
        std::fs::write(root.join("searchindex.js"), "short").unwrap();
        assert!(first_js(root).is_err());
    }

    #[test]
    fn url_paths_are_percent_encoded() {
        assert_eq!(url_path("library/os.html"), "library/os.html");
        assert_eq!(url_path("a b/c+d%.js"), "a%20b/c%2Bd%25.js");
    }

    fn sample(rps: f64, cpu: f64, bytes: f64) -> anyhow::Result<BTreeMap<String, f64>> {
        Ok(BTreeMap::from([
            ("req_per_sec".to_string(), rps),
            ("cpu_s_per_10k".to_string(), cpu),
            ("wire_bytes_per_req".to_string(), bytes),
        ]))
    }

    /// The bars take the fastest peer for req/s and CPU, the smallest
    /// for bytes; a coding no peer makes is not judged.
    #[test]
    fn bars_compare_with_the_fastest_and_the_smallest_peer() {
        let mut r = Report::new("compress", "t", Machine::probe(Path::new("/")), json!({}));
        r.baseline = "spindle-io-uring".into();
        let g = group("gzip");
        r.add(&g, "spindle-io-uring", sample(2000.0, 1.0, 900.0));
        r.add(&g, "nginx-gzip1", sample(1000.0, 2.0, 1200.0));
        r.add(&g, "caddy", sample(500.0, 4.0, 1000.0));
        let b = group("br");
        r.add(&b, "spindle-io-uring", sample(2000.0, 1.0, 800.0));
        r.add_unsupported(&b, "nginx-gzip1", "no br");
        let md = bars(&r, &["gzip".into(), "br".into()]);
        assert!(
            md.contains("| gzip | nginx-gzip1 | 2.00× | 0.50× | caddy | 0.90× | yes |"),
            "{md}"
        );
        assert!(md.contains("| br | – |"), "{md}");
        let table = r.markdown(&COLUMNS, true);
        assert!(
            table.contains("| nginx-gzip1 | – (not supported) |"),
            "{table}"
        );
        assert!(
            table.contains("- nginx-gzip1: not supported: no br"),
            "{table}"
        );
    }

    /// Each round is set against the same round of the peer: a drift
    /// that moves both servers leaves the ratios still.
    #[test]
    fn rounds_are_paired_with_the_same_round() {
        let mut r = Report::new("compress", "t", Machine::probe(Path::new("/")), json!({}));
        r.baseline = "spindle-io-uring".into();
        let g = group("gzip");
        for (round, speed) in [(0, 1.0), (1, 0.6), (2, 1.2)] {
            let mut a = sample(1100.0 * speed, 1.0 / speed, 900.0).unwrap();
            let mut b = sample(1000.0 * speed, 1.2 / speed, 900.0).unwrap();
            a.insert("round".into(), round as f64);
            b.insert("round".into(), round as f64);
            r.add(&g, "spindle-io-uring", Ok(a));
            r.add(&g, "lighttpd", Ok(b));
        }
        let md = r.round_by_round("coding", &[("gzip".into(), g.clone())], &ROUND_KEYS);
        assert!(
            md.contains("| gzip | lighttpd | 3 | 1.10× (1.10–1.10) | 0.83× (0.83–0.83) |"),
            "{md}"
        );
    }

    #[test]
    fn the_first_request_table_gives_medians_and_codings() {
        let f = |ms: f64, coding: &str| First {
            ms,
            wire_bytes: 1000,
            coding: coding.into(),
        };
        let firsts = BTreeMap::from([(
            "spindle-io-uring".to_string(),
            vec![f(1.0, "identity"), f(3.0, "identity"), f(2.0, "gzip")],
        )]);
        let md = first_table(&["spindle-io-uring".into(), "h2o".into()], &firsts);
        assert!(
            md.contains("| spindle-io-uring | 2.0 (1.0–3.0) | 1000 | gzip ×1, identity ×2 |"),
            "{md}"
        );
        assert!(md.contains("| h2o | failed | – | – |"), "{md}");
    }
}
