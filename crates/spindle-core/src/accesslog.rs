//! Access-log lines, with times in UTC: Combined Log Format (the format of
//! nginx's and Apache's `combined`), or one JSON object per line.

use std::fmt::Write;

/// What the access log needs of the last response.
#[derive(Debug, Clone, Default)]
pub struct LogInfo {
    pub method: String,
    pub target: Vec<u8>,
    pub minor_version: u8,
    pub status: u16,
    pub referer: Option<Vec<u8>>,
    pub user_agent: Option<Vec<u8>>,
    /// The user an `auth` rule authenticated (Combined's third field).
    pub user: Option<Vec<u8>>,
    /// The stream protocol the request came on, if not HTTP/1.x
    /// (logged as `HTTP/2.0` or `HTTP/3`).
    pub stream: Option<StreamProtocol>,
    /// The body's content coding (a sidecar or a compressed result).
    pub coding: Option<crate::Encoding>,
}

/// The protocols whose requests come on streams of one connection, each
/// served by a session of its own ([`crate::Session::for_stream`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamProtocol {
    Http2,
    Http3,
}

impl LogInfo {
    fn protocol(&self) -> String {
        match self.stream {
            Some(StreamProtocol::Http2) => "HTTP/2.0".to_string(),
            Some(StreamProtocol::Http3) => "HTTP/3".to_string(),
            None => format!("HTTP/1.{}", self.minor_version),
        }
    }
}

/// Unix seconds to calendar fields ([`crate::date::civil`]), kept here
/// for the error log, which formats its own times.
pub use crate::date::civil;

/// Formats one line, newline included. `unix_secs` is the time the
/// response finished; `bytes` the body bytes sent.
pub fn format_line(peer: &str, unix_secs: i64, info: &LogInfo, bytes: u64) -> String {
    let mut s = String::with_capacity(160);
    let (y, mo, d, h, mi, se) = civil(unix_secs);
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let _ = write!(s, "{peer} - ");
    match &info.user {
        // A space would end the field: it is escaped too.
        Some(u) => {
            for part in u.split(|&b| b == b' ').enumerate() {
                if part.0 > 0 {
                    s.push_str("\\x20");
                }
                escape(&mut s, part.1);
            }
        }
        None => s.push('-'),
    }
    let _ = write!(
        s,
        " [{d:02}/{}/{y}:{h:02}:{mi:02}:{se:02} +0000] \"",
        MONTHS[(mo - 1) as usize]
    );
    if info.method.is_empty() || info.method == "-" {
        s.push('-');
    } else {
        escape(&mut s, info.method.as_bytes());
        s.push(' ');
        escape(&mut s, &info.target);
        let _ = write!(s, " {}", info.protocol());
    }
    let _ = write!(s, "\" {} {} \"", info.status, bytes);
    escape(&mut s, info.referer.as_deref().unwrap_or(b"-"));
    s.push_str("\" \"");
    escape(&mut s, info.user_agent.as_deref().unwrap_or(b"-"));
    s.push_str("\"\n");
    s
}

/// Which format `--log-format` asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LogFormat {
    #[default]
    Combined,
    Json,
}

/// What a JSON line adds to the request and the response.
#[derive(Debug, Clone, Copy)]
pub struct Timing {
    /// From the request's parse to the response's last byte handed to the
    /// socket, in microseconds.
    pub request_us: u64,
    /// Where the body came from: `memory` (in the head: an error page or
    /// a small cached file), `cache` (the page cache, by sendfile or a
    /// read that did not wait), `read` (a read that missed the page
    /// cache), `direct` (an `O_DIRECT` read), or `sendfile` (a blocking
    /// sendfile, which cannot tell).
    pub outcome: &'static str,
    /// For an origin's object (`--origin`), how the edge's cache had it:
    /// `hit` (fresh), `revalidated` (stale, the origin said it holds),
    /// `miss` (fetched), `stale` (the origin failed; a stale copy served).
    pub cache: Option<&'static str>,
}

/// One JSON object per line (keys: `time`, `client`, `user`, `method`, `target`,
/// `protocol`, `status`, `bytes`, `referer`, `user_agent`, `request_us`,
/// `outcome`, `encoding`, `cache`); a value that is not valid UTF-8 has each byte past ASCII
/// as `\u00HH`. Newline included.
pub fn format_json(peer: &str, unix_secs: i64, info: &LogInfo, bytes: u64, t: &Timing) -> String {
    let mut s = String::with_capacity(256);
    let (y, mo, d, h, mi, se) = civil(unix_secs);
    let _ = write!(
        s,
        "{{\"time\":\"{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{se:02}Z\",\"client\":"
    );
    json_str(&mut s, peer.as_bytes());
    s.push_str(",\"user\":");
    match &info.user {
        Some(u) => json_str(&mut s, u),
        None => s.push_str("null"),
    }
    s.push_str(",\"method\":");
    json_str(&mut s, info.method.as_bytes());
    s.push_str(",\"target\":");
    json_str(&mut s, &info.target);
    let _ = write!(
        s,
        ",\"protocol\":\"{}\",\"status\":{},\"bytes\":{bytes},\"referer\":",
        info.protocol(),
        info.status
    );
    match &info.referer {
        Some(r) => json_str(&mut s, r),
        None => s.push_str("null"),
    }
    s.push_str(",\"user_agent\":");
    match &info.user_agent {
        Some(u) => json_str(&mut s, u),
        None => s.push_str("null"),
    }
    let _ = write!(
        s,
        ",\"request_us\":{},\"outcome\":\"{}\",\"encoding\":",
        t.request_us, t.outcome
    );
    match info.coding {
        Some(e) => {
            let _ = write!(s, "\"{}\"", e.token());
        }
        None => s.push_str("null"),
    }
    match t.cache {
        Some(c) => {
            let _ = writeln!(s, ",\"cache\":\"{c}\"}}");
        }
        None => s.push_str(",\"cache\":null}\n"),
    }
    s
}

/// A JSON string of `v`: UTF-8 kept when valid, other bytes as `\u00HH`.
fn json_str(out: &mut String, v: &[u8]) {
    fn put(out: &mut String, c: char) {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 || c == '\u{7f}' => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    match std::str::from_utf8(v) {
        Ok(t) => t.chars().for_each(|c| put(out, c)),
        Err(_) => {
            for &b in v {
                if b < 0x80 {
                    put(out, b as char);
                } else {
                    let _ = write!(out, "\\u{b:04x}");
                }
            }
        }
    }
    out.push('"');
}

/// Writes bytes with `"`, `\` and non-printables escaped as `\xHH`.
fn escape(out: &mut String, v: &[u8]) {
    for &b in v {
        if b == b'"' || b == b'\\' || !(0x20..0x7f).contains(&b) {
            let _ = write!(out, "\\x{b:02X}");
        } else {
            out.push(b as char);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn combined_format() {
        let info = LogInfo {
            method: "GET".into(),
            target: b"/a b\"".to_vec(),
            minor_version: 1,
            status: 200,
            referer: None,
            user_agent: Some(b"curl/8".to_vec()),
            user: None,
            stream: None,
            coding: None,
        };
        assert_eq!(
            format_line("127.0.0.1", 971_211_336, &info, 2326),
            "127.0.0.1 - - [10/Oct/2000:20:55:36 +0000] \"GET /a b\\x22 HTTP/1.1\" 200 2326 \"-\" \"curl/8\"\n"
        );
        let h3 = LogInfo {
            stream: Some(StreamProtocol::Http3),
            ..info.clone()
        };
        assert!(format_line("::1", 0, &h3, 1).contains("\"GET /a b\\x22 HTTP/3\" 200 1"));
        let h2 = LogInfo {
            stream: Some(StreamProtocol::Http2),
            ..info
        };
        assert!(format_line("::1", 0, &h2, 1).contains("\"GET /a b\\x22 HTTP/2.0\" 200 1"));
        let user = LogInfo {
            user: Some(b"al ice\"".to_vec()),
            ..h2
        };
        assert!(format_line("::1", 0, &user, 1).starts_with("::1 - al\\x20ice\\x22 [01/Jan/1970"));
        assert_eq!(civil(951_782_400), (2000, 2, 29, 0, 0, 0));
    }

    #[test]
    fn json_format() {
        let info = LogInfo {
            method: "GET".into(),
            target: b"/a \"b\"\\\n\xff".to_vec(),
            minor_version: 1,
            status: 206,
            referer: None,
            user_agent: Some("curl/8 \u{e9}".as_bytes().to_vec()),
            user: Some(b"alice".to_vec()),
            stream: None,
            coding: Some(crate::Encoding::Br),
        };
        let mut t = Timing {
            request_us: 1234,
            outcome: "read",
            cache: None,
        };
        assert_eq!(
            format_json("::1", 971_211_336, &info, 10, &t),
            "{\"time\":\"2000-10-10T20:55:36Z\",\"client\":\"::1\",\"user\":\"alice\",\"method\":\"GET\",\"target\":\"/a \\\"b\\\"\\\\\\u000a\\u00ff\",\"protocol\":\"HTTP/1.1\",\"status\":206,\"bytes\":10,\"referer\":null,\"user_agent\":\"curl/8 \u{e9}\",\"request_us\":1234,\"outcome\":\"read\",\"encoding\":\"br\",\"cache\":null}\n"
        );
        t.cache = Some("hit");
        assert!(format_json("::1", 0, &info, 10, &t)
            .ends_with(",\"encoding\":\"br\",\"cache\":\"hit\"}\n"));
    }
}
