//! A real browser: headless Chromium loads a page with 100 images from
//! spindle over HTTPS, and every resource it fetched (the page and each
//! image) says, in its Resource Timing entry, that it came over `h2`; and
//! over HTTP/3 (`--http3`, Chromium told to use QUIC for the origin), `h3`.

mod common;

use std::process::Command;

use common::*;

/// Images on the page.
const IMAGES: usize = 100;

/// A 1x1 transparent PNG.
const PNG: &[u8] = &[
    0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x48, 0x44, 0x52,
    0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x08, 0x06, 0x00, 0x00, 0x00, 0x1f, 0x15, 0xc4,
    0x89, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x44, 0x41, 0x54, 0x78, 0x9c, 0x63, 0x00, 0x01, 0x00, 0x00,
    0x05, 0x00, 0x01, 0x0d, 0x0a, 0x2d, 0xb4, 0x00, 0x00, 0x00, 0x00, 0x49, 0x45, 0x4e, 0x44, 0xae,
    0x42, 0x60, 0x82,
];

fn chromium() -> Option<&'static str> {
    ["chromium", "chromium-browser", "google-chrome"]
        .into_iter()
        .find(|c| Command::new(c).arg("--version").output().is_ok())
}

/// Chromium, headless with a fresh profile beside `near`, loads `url`
/// (any certificate), lets its scripts run for up to 20 s of virtual
/// time, and prints the DOM.
fn dump_dom(
    browser: &str,
    url: &str,
    near: &std::path::Path,
    extra: &[String],
) -> std::process::Output {
    let profile = near.with_extension("chromium-profile");
    let out = Command::new(browser)
        .args(extra)
        .args([
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-background-networking",
            "--ignore-certificate-errors",
            "--virtual-time-budget=20000",
            "--dump-dom",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg(url)
        .output()
        .expect("chromium");
    let _ = std::fs::remove_dir_all(&profile);
    out
}

#[test]
fn chromium_loads_a_page_of_100_images_over_h2() {
    let Some(browser) = chromium() else {
        test_skip::skip_or_fail("no chromium (Debian chromium)");
        return;
    };
    for b in &backends_with(Cap::Http2) {
        eprintln!("backend {b}");
        load_page(browser, b, Over::H2);
    }
}

#[test]
fn chromium_loads_a_page_of_100_images_over_h3() {
    let Some(browser) = chromium() else {
        test_skip::skip_or_fail("no chromium (Debian chromium)");
        return;
    };
    for b in &backends_with(Cap::Http2) {
        eprintln!("backend {b}");
        load_page(browser, b, Over::H3);
    }
}

/// Which protocol the page is loaded over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Over {
    H2,
    H3,
}

/// The base64 SHA-256 of the test certificate's public key, which
/// Chromium takes as trusted for QUIC (`--ignore-certificate-errors-spki-list`).
fn test_cert_spki() -> String {
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "openssl x509 -pubkey -noout -in {} | openssl pkey -pubin -outform der \
             | openssl dgst -sha256 -binary | base64",
            tls_data("p256.pem").display()
        ))
        .output()
        .expect("openssl");
    assert!(out.status.success());
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// Chromium's flags for HTTP/3 to `localhost:port`: QUIC forced for the
/// origin (no Alt-Svc round first), the test certificate trusted, and
/// `localhost` resolved to the loopback address the server listens on.
fn quic_flags(port: u16) -> [String; 3] {
    [
        format!("--origin-to-force-quic-on=localhost:{port}"),
        format!("--ignore-certificate-errors-spki-list={}", test_cert_spki()),
        "--host-resolver-rules=MAP localhost 127.0.0.1".to_string(),
    ]
}

fn load_page(browser: &str, backend: &str, over: Over) {
    let root = DocRoot::new(false);
    std::fs::create_dir_all(root.path("img")).unwrap();
    let mut page = String::from("<!doctype html><html><head><title>h2</title></head><body>\n");
    for i in 0..IMAGES {
        std::fs::write(root.path(&format!("img/{i}.png")), PNG).unwrap();
        page.push_str(&format!("<img src=\"/img/{i}.png\" width=1 height=1>\n"));
    }
    // Once everything has loaded, the protocol of every fetch goes into
    // the DOM, which --dump-dom prints.
    page.push_str(
        "<script>\nwindow.addEventListener('load', () => {\n\
         const e = performance.getEntriesByType('navigation')\n\
           .concat(performance.getEntriesByType('resource'));\n\
         document.body.setAttribute('data-protocols', e.map(x => x.nextHopProtocol).join(','));\n\
         });\n</script></body></html>\n",
    );
    std::fs::write(root.path("page.html"), page).unwrap();
    let extra: &[&str] = match over {
        Over::H2 => &[],
        Over::H3 => &["--http3"],
    };
    let (_srv, port) = start_with_https(backend, &root.dir, None, extra);
    let out = match over {
        Over::H2 => {
            let url = format!("https://127.0.0.1:{port}/page.html");
            dump_dom(browser, &url, &root.dir, &[])
        }
        Over::H3 => {
            let url = format!("https://localhost:{port}/page.html");
            dump_dom(browser, &url, &root.dir, &quic_flags(port))
        }
    };
    let dom = String::from_utf8_lossy(&out.stdout);
    let protocols = dom
        .split("data-protocols=\"")
        .nth(1)
        .and_then(|s| s.split('"').next())
        .unwrap_or_else(|| {
            panic!(
                "no protocols in the DOM: {dom}\n{}",
                String::from_utf8_lossy(&out.stderr)
            )
        });
    let list: Vec<&str> = protocols.split(',').collect();
    assert_eq!(list.len(), IMAGES + 1, "{protocols}");
    let want = match over {
        Over::H2 => "h2",
        Over::H3 => "h3",
    };
    assert!(list.iter().all(|p| *p == want), "{protocols}");
}

/// The Python documentation (Debian's python3.11-doc) as a real site.
const PYDOC: &str = "/usr/share/doc/python3.11/html";

#[test]
fn chromium_loads_the_python_docs_compressed_over_h2() {
    let Some(browser) = chromium() else {
        test_skip::skip_or_fail("no chromium (Debian chromium)");
        return;
    };
    if !std::path::Path::new(PYDOC).join("index.html").exists() {
        test_skip::skip_or_fail("no Python documentation (Debian python3.11-doc)");
        return;
    }
    // The front page and its _static/, symlinks followed (jquery.js and
    // underscore.js point out of the tree), and a script that reports
    // each resource once the page has loaded: its protocol, its sizes on
    // the wire and decoded, and the SHA-256 of what the browser decoded.
    let root = tempfile::tempdir().unwrap();
    let st = Command::new("cp")
        .arg("-rL")
        .arg(format!("{PYDOC}/_static"))
        .arg(root.path())
        .status()
        .unwrap();
    assert!(st.success());
    let page = std::fs::read_to_string(format!("{PYDOC}/index.html")).unwrap();
    let probe = "<pre id=\"report\"></pre><script>\n\
        window.addEventListener('load', async () => {\n\
          const hex = b => [...new Uint8Array(b)].map(x => x.toString(16).padStart(2, '0')).join('');\n\
          const out = [];\n\
          for (const e of performance.getEntriesByType('resource')) {\n\
            const body = await (await fetch(e.name, {cache: 'force-cache'})).arrayBuffer();\n\
            out.push([new URL(e.name).pathname, e.nextHopProtocol, e.encodedBodySize, e.decodedBodySize, hex(await crypto.subtle.digest('SHA-256', body))].join(' '));\n\
          }\n\
          document.getElementById('report').textContent = out.join('\\n');\n\
        });\n</script>";
    std::fs::write(
        root.path().join("index.html"),
        page.replace("</body>", &format!("{probe}</body>")),
    )
    .unwrap();
    let cache = tempfile::tempdir().unwrap();
    let (srv, port) = start_with_https(
        "io-uring",
        root.path(),
        None,
        &["--compress-cache", cache.path().to_str().unwrap()],
    );
    // Every resource made in Brotli first (Chromium prefers it; the first
    // request for a file goes as it is while it is made).
    let statics: Vec<String> = std::fs::read_dir(root.path().join("_static"))
        .unwrap()
        .map(|e| format!("/_static/{}", e.unwrap().file_name().to_string_lossy()))
        .collect();
    for p in &statics {
        let url = srv.url(p);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        loop {
            let out = Command::new("curl")
                .args([
                    "-sS",
                    "-o",
                    "/dev/null",
                    "-D",
                    "-",
                    "-H",
                    "Accept-Encoding: br",
                    &url,
                ])
                .output()
                .unwrap();
            let head = String::from_utf8_lossy(&out.stdout).to_ascii_lowercase();
            // Small or not compressible: no coding, and none coming.
            if head.contains("content-encoding: br") || !head.contains("vary: accept-encoding") {
                break;
            }
            assert!(std::time::Instant::now() < deadline, "{p} never compressed");
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }
    let out = dump_dom(
        browser,
        &format!("https://127.0.0.1:{port}/index.html"),
        root.path(),
        &[],
    );
    let dom = String::from_utf8_lossy(&out.stdout);
    let report = dom
        .split("<pre id=\"report\">")
        .nth(1)
        .and_then(|s| s.split("</pre>").next())
        .unwrap_or("");
    let lines: Vec<&str> = report.lines().filter(|l| !l.is_empty()).collect();
    assert!(
        lines.len() >= 10,
        "resources reported: {report}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut compressed = 0;
    for l in &lines {
        let f: Vec<&str> = l.split(' ').collect();
        let (path, proto, enc, dec, sha) = (f[0], f[1], f[2], f[3], f[4]);
        let file = std::fs::read(root.path().join(path.trim_start_matches('/'))).unwrap();
        assert_eq!(proto, "h2", "{l}");
        assert_eq!(
            dec.parse::<usize>().unwrap(),
            file.len(),
            "decoded size of {path}"
        );
        let want = Command::new("sha256sum")
            .arg(root.path().join(path.trim_start_matches('/')))
            .output()
            .unwrap();
        let want = String::from_utf8_lossy(&want.stdout);
        assert_eq!(
            sha,
            want.split_whitespace().next().unwrap(),
            "{path}: the bytes decoded"
        );
        let (enc, dec): (usize, usize) = (enc.parse().unwrap(), dec.parse().unwrap());
        let text = [".css", ".js", ".svg", ".html"]
            .iter()
            .any(|x| path.ends_with(x));
        if text && dec >= 256 {
            assert!(enc < dec, "{path}: {enc} bytes on the wire for {dec}");
            compressed += 1;
        }
    }
    assert!(compressed >= 10, "{lines:#?}");
}

/// A page that plays a video, then seeks near its end: its body's
/// `data-video` attribute says what happened.
const VIDEO_PAGE: &str = r#"<!doctype html><html><body>
<video id="v" src="/v.mp4" muted playsinline preload="auto"></video>
<script>
const v = document.getElementById('v');
const say = (k) => document.body.setAttribute('data-video', k);
v.addEventListener('playing', () => { say('playing'); v.currentTime = 17; }, {once: true});
v.addEventListener('seeked', () => say('seeked ' + v.currentTime.toFixed(0)));
v.addEventListener('error', () => say('error ' + (v.error && v.error.code)));
v.play().catch(e => say('play failed ' + e));
</script></body></html>
"#;

#[test]
fn chromium_plays_and_seeks_a_video_over_h3() {
    let Some(browser) = chromium() else {
        test_skip::skip_or_fail("no chromium (Debian chromium)");
        return;
    };
    if Command::new("ffmpeg").arg("-version").output().is_err() {
        test_skip::skip_or_fail("no ffmpeg (Debian ffmpeg)");
        return;
    }
    let root = DocRoot::new(false);
    // 20 s of H.264 at 6 Mbit/s (about 15 MB), its index first: the
    // browser's first range cannot cover the seek to 17 s.
    let st = Command::new("ffmpeg")
        .args(["-hide_banner", "-loglevel", "error", "-y", "-f", "lavfi"])
        .args(["-i", "testsrc2=duration=20:size=640x360:rate=25"])
        .args(["-c:v", "libx264", "-pix_fmt", "yuv420p", "-b:v", "6M"])
        .args([
            "-maxrate",
            "6M",
            "-bufsize",
            "1M",
            "-movflags",
            "+faststart",
        ])
        .arg(root.path("v.mp4"))
        .status()
        .unwrap();
    assert!(st.success(), "ffmpeg");
    std::fs::write(root.path("video.html"), VIDEO_PAGE).unwrap();
    let log = root.path("../video-h3.log");
    let (srv, port) = start_with_https(
        "io-uring",
        &root.dir,
        None,
        &["--http3", "--access-log", log.to_str().unwrap()],
    );
    let url = format!("https://localhost:{port}/video.html");
    let out = dump_dom(browser, &url, &root.dir, &quic_flags(port));
    drop(srv);
    let dom = String::from_utf8_lossy(&out.stdout);
    let lines = std::fs::read_to_string(&log).unwrap_or_default();
    let _ = std::fs::remove_file(&log);
    assert!(
        dom.contains("data-video=\"playing\"") || dom.contains("data-video=\"seeked 17\""),
        "the video did not play: {dom}"
    );
    // The page and the video came over HTTP/3; the seek fetched a range
    // of its own.
    assert!(lines.contains("\"GET /video.html HTTP/3\" 200 "), "{lines}");
    let ranges = lines
        .lines()
        .filter(|l| l.contains("\"GET /v.mp4 HTTP/3\" 206 "))
        .count();
    assert!(
        ranges >= 2,
        "one range for the play, one for the seek: {lines}"
    );
}
