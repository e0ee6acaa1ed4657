//! A real browser: headless Chromium loads a page with 100 images from
//! spindle over HTTPS, and every resource it fetched (the page and each
//! image) says, in its Resource Timing entry, that it came over `h2`.

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

#[test]
fn chromium_loads_a_page_of_100_images_over_h2() {
    let Some(browser) = chromium() else {
        test_skip::skip_or_fail("no chromium (Debian chromium)");
        return;
    };
    for b in &backends_with(Cap::Http2) {
        eprintln!("backend {b}");
        load_page(browser, b);
    }
}

fn load_page(browser: &str, backend: &str) {
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
    let srv = Server::start(
        backend,
        &root.dir,
        &[
            "--workers",
            "1",
            "--tls-listen",
            "127.0.0.1:0",
            "--tls-cert",
            tls_data("p256.pem").to_str().unwrap(),
            "--tls-key",
            tls_data("p256.key").to_str().unwrap(),
        ],
    );
    let err = srv.stderr();
    let line = err.lines().find(|l| l.contains("]: serving ")).unwrap();
    let https = line
        .split_whitespace()
        .find(|w| w.starts_with("https://"))
        .unwrap()
        .trim_end_matches('/')
        .to_string();
    let profile = root.dir.with_extension("chromium-profile");
    let out = Command::new(browser)
        .args([
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--ignore-certificate-errors",
            "--virtual-time-budget=10000",
            "--dump-dom",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg(format!("{https}/page.html"))
        .output()
        .expect("chromium");
    let _ = std::fs::remove_dir_all(&profile);
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
    assert!(list.iter().all(|p| *p == "h2"), "{protocols}");
}
