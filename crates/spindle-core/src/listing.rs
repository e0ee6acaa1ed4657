//! Directory listings (`--autoindex`): which entries are shown, in what
//! order, and their HTML or JSON rendering. No I/O: the driver reads the
//! directory (off its event loop) and calls [`render`]; the session then
//! answers with the result ([`crate::Session::listed`]).
//!
//! - Entries: regular files and directories (symlinks as what they point
//!   to beneath the root; anything else, or a link that leads outside, is
//!   left out by the driver). Names that start with `.` are hidden unless
//!   dotfiles are on, except `.well-known` in the root, as the path policy
//!   serves it ([`visible`]).
//! - Order: directories first, then files, each by the bytes of the name.
//! - HTML: names are HTML-escaped in the text (invalid UTF-8 and control
//!   characters shown as U+FFFD) and percent-encoded by their exact bytes
//!   in the link; size in bytes, modification time in UTC; a `../` link
//!   except in the root.
//! - JSON (`Accept` prefers `application/json`, see [`negotiate`]): an
//!   array of `{"name", "type", "size", "mtime", "href"}`, `type` being
//!   `"file"` or `"directory"`, `mtime` Unix seconds, `name` the name as
//!   UTF-8 (invalid bytes replaced by U+FFFD) and `href` its exact bytes
//!   percent-encoded, relative to the listing (with a `/` after a
//!   directory).
//! - Bounds: at most [`MAX_ENTRIES`] entries are read and at most
//!   [`MAX_BYTES`] rendered; past either, the listing shows what fit and
//!   says so (a last HTML line, and `Listing-Truncated: true` on both).

use percent_encoding::{AsciiSet, NON_ALPHANUMERIC};

use crate::encoding::Encoding;
use crate::file::FileKind;

/// Entries a listing holds at most: the driver stops reading there.
pub const MAX_ENTRIES: usize = 200_000;
/// Bytes a rendered listing holds at most (entries past it are left out).
pub const MAX_BYTES: usize = 64 << 20;

/// The representation of a listing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Format {
    Html,
    Json,
}

impl Format {
    /// The listing's `Content-Type` in this format.
    pub fn content_type(self) -> &'static str {
        match self {
            Format::Html => "text/html; charset=utf-8",
            Format::Json => "application/json",
        }
    }
}

/// One entry, as the driver found it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The name's exact bytes (no `/`, no NUL, never `.` or `..`).
    pub name: Vec<u8>,
    /// `Regular` or `Directory`; a driver leaves other kinds out.
    pub kind: FileKind,
    pub size: u64,
    pub mtime_sec: i64,
}

/// A rendered listing, ready to answer with (and to cache).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listing {
    pub format: Format,
    pub body: Vec<u8>,
    /// A strong entity tag: a hash of the body, so any change in what is
    /// shown (an entry added, removed, grown, touched) changes it.
    pub etag: String,
    /// Entries were left out ([`MAX_ENTRIES`], [`MAX_BYTES`]).
    pub truncated: bool,
    /// The body is compressed in this coding ([`Listing::encoded`]).
    pub coding: Option<Encoding>,
}

impl Listing {
    /// This listing with `body`, its body compressed in `coding`: the tag
    /// gains `-` and the coding's token, so that it names this
    /// representation only (as a compressed file's does).
    pub fn encoded(mut self, coding: Encoding, body: Vec<u8>) -> Listing {
        debug_assert!(self.coding.is_none(), "compressed twice");
        let open = self.etag.strip_suffix('"').unwrap_or(&self.etag);
        self.etag = format!("{open}-{}\"", coding.token());
        self.body = body;
        self.coding = Some(coding);
        self
    }
}

/// Whether an entry named `name` in directory `dir` (relative to the
/// root, empty for the root) is shown: the path policy's rule for
/// dotfiles (`path.rs`), so a listing links only to what is served.
pub fn visible(dir: &[u8], name: &[u8], allow_dotfiles: bool) -> bool {
    if name.is_empty() || name == b"." || name == b".." || name.contains(&b'/') {
        return false;
    }
    allow_dotfiles || name[0] != b'.' || (dir.is_empty() && name == b".well-known")
}

/// HTML for browsers, JSON when the client's `Accept` prefers
/// `application/json` to `text/html`: each gets the quality of its most
/// specific media range (`application/json`, then `application/*`, then
/// `*/*`; likewise `text/html`), and JSON wins only if strictly higher.
/// So `Accept: application/json` gives JSON; no `Accept`, `*/*`, a
/// browser's list or a tie gives HTML.
pub fn negotiate(accept: Option<&[u8]>) -> Format {
    let Some(accept) = accept else {
        return Format::Html;
    };
    // (specificity, q in thousandths) of the best match so far.
    let mut json = (0u8, 0u32);
    let mut html = (0u8, 0u32);
    for range in accept.split(|&b| b == b',') {
        let mut params = range.split(|&b| b == b';');
        let media = trim(params.next().unwrap_or(b""));
        let mut q = 1000;
        for p in params {
            let p = trim(p);
            if p.len() >= 2 && p[..2].eq_ignore_ascii_case(b"q=") {
                q = parse_q(&p[2..]).unwrap_or(0);
            }
        }
        let lower = media.to_ascii_lowercase();
        let spec = |full: &[u8], top: &[u8]| -> u8 {
            if lower == full {
                3
            } else if lower == top {
                2
            } else if lower == b"*/*" {
                1
            } else {
                0
            }
        };
        for (best, s) in [
            (&mut json, spec(b"application/json", b"application/*")),
            (&mut html, spec(b"text/html", b"text/*")),
        ] {
            if s > best.0 {
                *best = (s, q);
            }
        }
    }
    if json.1 > html.1 {
        Format::Json
    } else {
        Format::Html
    }
}

fn trim(mut v: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = v {
        v = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = v {
        v = rest;
    }
    v
}

/// A qvalue (`0`, `0.5`, `1.000`) in thousandths.
fn parse_q(v: &[u8]) -> Option<u32> {
    let (int, frac) = match v.iter().position(|&b| b == b'.') {
        Some(i) => (&v[..i], &v[i + 1..]),
        None => (v, &b""[..]),
    };
    if int.len() != 1 || frac.len() > 3 || !frac.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let mut q = match int[0] {
        b'0' => 0,
        b'1' => 1000,
        _ => return None,
    };
    let mut scale = 100;
    for &d in frac {
        q += u32::from(d - b'0') * scale;
        scale /= 10;
    }
    (q <= 1000).then_some(q)
}

/// Bytes left as they are in a link: letters, digits and `-._~`.
const HREF: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// The listing of directory `dir` (relative to the root, empty for the
/// root; its exact bytes) from the entries the driver read. Hidden
/// entries are dropped here too; `truncated`: the driver stopped reading
/// at [`MAX_ENTRIES`].
pub fn render(
    dir: &[u8],
    mut entries: Vec<Entry>,
    truncated: bool,
    format: Format,
    allow_dotfiles: bool,
) -> Listing {
    entries.retain(|e| {
        visible(dir, &e.name, allow_dotfiles)
            && matches!(e.kind, FileKind::Regular | FileKind::Directory)
    });
    entries.sort_unstable_by(|a, b| {
        let rank = |e: &Entry| u8::from(e.kind != FileKind::Directory);
        rank(a).cmp(&rank(b)).then_with(|| a.name.cmp(&b.name))
    });
    let mut body = Vec::with_capacity(256 + entries.len() * 96);
    let mut cut = truncated;
    match format {
        Format::Html => {
            let mut title = String::from("/");
            if !dir.is_empty() {
                title.push_str(&text(dir));
                title.push('/');
            }
            let title = html_escape(&title);
            body.extend_from_slice(
                format!(
                    "<!DOCTYPE html>\n<html>\n<head>\n<meta charset=\"utf-8\">\n<title>Index of {title}</title>\n</head>\n<body>\n<h1>Index of {title}</h1>\n<table>\n<tr><th>Name</th><th>Size</th><th>Modified (UTC)</th></tr>\n"
                )
                .as_bytes(),
            );
            if !dir.is_empty() {
                body.extend_from_slice(
                    b"<tr><td><a href=\"../\">../</a></td><td></td><td></td></tr>\n",
                );
            }
            for e in &entries {
                let mut row = String::with_capacity(128);
                let dir_mark = if e.kind == FileKind::Directory {
                    "/"
                } else {
                    ""
                };
                row.push_str("<tr><td><a href=\"");
                row.push_str(&href(&e.name));
                row.push_str(dir_mark);
                row.push_str("\">");
                row.push_str(&html_escape(&text(&e.name)));
                row.push_str(dir_mark);
                row.push_str("</a></td><td>");
                if e.kind == FileKind::Directory {
                    row.push('-');
                } else {
                    row.push_str(&e.size.to_string());
                }
                row.push_str("</td><td>");
                row.push_str(&utc(e.mtime_sec));
                row.push_str("</td></tr>\n");
                if body.len() + row.len() > MAX_BYTES - 256 {
                    cut = true;
                    break;
                }
                body.extend_from_slice(row.as_bytes());
            }
            body.extend_from_slice(b"</table>\n");
            if cut {
                body.extend_from_slice(b"<p>Listing truncated: not every entry is shown.</p>\n");
            }
            body.extend_from_slice(b"</body>\n</html>\n");
        }
        Format::Json => {
            body.push(b'[');
            let mut first = true;
            for e in &entries {
                let mut obj = String::with_capacity(128);
                if !first {
                    obj.push(',');
                }
                obj.push_str("\n{\"name\":");
                json_string(&mut obj, &String::from_utf8_lossy(&e.name));
                obj.push_str(",\"type\":\"");
                obj.push_str(if e.kind == FileKind::Directory {
                    "directory"
                } else {
                    "file"
                });
                obj.push_str("\",\"size\":");
                obj.push_str(&e.size.to_string());
                obj.push_str(",\"mtime\":");
                obj.push_str(&e.mtime_sec.to_string());
                obj.push_str(",\"href\":\"");
                obj.push_str(&href(&e.name));
                if e.kind == FileKind::Directory {
                    obj.push('/');
                }
                obj.push_str("\"}");
                if body.len() + obj.len() > MAX_BYTES - 4 {
                    cut = true;
                    break;
                }
                first = false;
                body.extend_from_slice(obj.as_bytes());
            }
            body.extend_from_slice(b"\n]\n");
        }
    }
    let etag = format!("\"l{:x}-{:016x}\"", body.len(), fnv1a(&body));
    Listing {
        format,
        body,
        etag,
        truncated: cut,
        coding: None,
    }
}

/// A name for display: UTF-8, invalid bytes and control characters as
/// U+FFFD.
fn text(name: &[u8]) -> String {
    String::from_utf8_lossy(name)
        .chars()
        .map(|c| if c.is_control() { '\u{FFFD}' } else { c })
        .collect()
}

fn href(name: &[u8]) -> String {
    percent_encoding::percent_encode(name, HREF).to_string()
}

fn html_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

fn json_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 || c == '\u{2028}' || c == '\u{2029}' => {
                out.push_str(&format!("\\u{:04x}", c as u32));
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// `YYYY-MM-DD HH:MM` in UTC.
fn utc(secs: i64) -> String {
    let (y, m, d, h, mi, _) = crate::date::civil(secs);
    format!("{y:04}-{m:02}-{d:02} {h:02}:{mi:02}")
}

fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(name: &[u8], dir: bool, size: u64) -> Entry {
        Entry {
            name: name.to_vec(),
            kind: if dir {
                FileKind::Directory
            } else {
                FileKind::Regular
            },
            size,
            mtime_sec: 1_700_000_000,
        }
    }

    #[test]
    fn accept_negotiation() {
        use Format::*;
        for (a, want) in [
            (None, Html),
            (Some(&b"application/json"[..]), Json),
            (Some(b"*/*"), Html),
            (
                Some(b"text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"),
                Html,
            ),
            (Some(b"application/json, text/html;q=0.5"), Json),
            (Some(b"text/html;q=0.5, application/json;q=0.4"), Html),
            (Some(b"application/*"), Json),
            (Some(b"application/json;q=0"), Html),
            (Some(b"APPLICATION/JSON ; q=1.0"), Json),
            (Some(b"application/json;q=2"), Html),
        ] {
            assert_eq!(negotiate(a), want, "{:?}", a.map(String::from_utf8_lossy));
        }
    }

    #[test]
    fn html_escapes_links_sorts_and_hides() {
        let l = render(
            b"d",
            vec![
                e(b"b<\"&%.txt", false, 5),
                e(b"sub", true, 4096),
                e(b"a\nb", false, 1),
                e(b"\xff\xfe", false, 2),
                e(b".hidden", false, 3),
                e(b".well-known", true, 0),
            ],
            false,
            Format::Html,
            false,
        );
        let s = String::from_utf8(l.body.clone()).unwrap();
        assert!(s.contains("<title>Index of /d/</title>"));
        assert!(s.contains("<a href=\"../\">../</a>"));
        assert!(s.contains("<a href=\"b%3C%22%26%25.txt\">b&lt;&quot;&amp;%.txt</a>"));
        assert!(s.contains("<a href=\"a%0Ab\">a\u{FFFD}b</a>"));
        assert!(s.contains("<a href=\"%FF%FE\">\u{FFFD}\u{FFFD}</a>"));
        assert!(s.contains("<td>2023-11-14 22:13</td>"));
        assert!(!s.contains("hidden") && !s.contains("well-known"));
        let sub = s.find("href=\"sub/\"").unwrap();
        assert!(sub < s.find("a%0Ab").unwrap(), "directories first");
        assert!(s.find("a%0Ab").unwrap() < s.find("b%3C").unwrap());
        assert!(!l.truncated);
        // The root: no ../, and .well-known is listed as it is served.
        let root = render(
            b"",
            vec![e(b".well-known", true, 0), e(b".git", true, 0)],
            false,
            Format::Html,
            false,
        );
        let s = String::from_utf8(root.body).unwrap();
        assert!(!s.contains("../") && s.contains("href=\".well-known/\"") && !s.contains(".git"));
        assert_ne!(root.etag, l.etag);
    }

    #[test]
    fn json_and_etag() {
        let entries = vec![e(b"x\"y", false, 7), e(b"\xff", true, 0)];
        let l = render(b"", entries.clone(), false, Format::Json, true);
        let s = String::from_utf8(l.body.clone()).unwrap();
        assert_eq!(
            s,
            "[\n{\"name\":\"\u{FFFD}\",\"type\":\"directory\",\"size\":0,\"mtime\":1700000000,\"href\":\"%FF/\"},\n{\"name\":\"x\\\"y\",\"type\":\"file\",\"size\":7,\"mtime\":1700000000,\"href\":\"x%22y\"}\n]\n"
        );
        assert_eq!(render(b"", entries.clone(), false, Format::Json, true), l);
        let mut more = entries;
        more[0].size = 8;
        assert_ne!(render(b"", more, false, Format::Json, true).etag, l.etag);
        let empty = render(b"", Vec::new(), true, Format::Json, true);
        assert_eq!(empty.body, b"[\n]\n");
        assert!(empty.truncated);
    }

    #[test]
    fn dates() {
        assert_eq!(utc(0), "1970-01-01 00:00");
        assert_eq!(utc(951_782_400), "2000-02-29 00:00");
        assert_eq!(utc(-1), "1969-12-31 23:59");
    }
}
