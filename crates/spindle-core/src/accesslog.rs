//! Combined Log Format lines (the format of nginx's and Apache's
//! `combined`), with times in UTC.

use std::fmt::Write;

use crate::session::LogInfo;

/// Formats one line, newline included. `unix_secs` is the time the
/// response finished; `bytes` the body bytes sent.
pub fn format_line(peer: &str, unix_secs: i64, info: &LogInfo, bytes: u64) -> String {
    let mut s = String::with_capacity(160);
    let (y, mo, d, h, mi, se) = civil(unix_secs);
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let _ = write!(
        s,
        "{peer} - - [{d:02}/{}/{y}:{h:02}:{mi:02}:{se:02} +0000] \"",
        MONTHS[(mo - 1) as usize]
    );
    if info.method.is_empty() || info.method == "-" {
        s.push('-');
    } else {
        escape(&mut s, info.method.as_bytes());
        s.push(' ');
        escape(&mut s, &info.target);
        let _ = write!(s, " HTTP/1.{}", info.minor_version);
    }
    let _ = write!(s, "\" {} {} \"", info.status, bytes);
    escape(&mut s, info.referer.as_deref().unwrap_or(b"-"));
    s.push_str("\" \"");
    escape(&mut s, info.user_agent.as_deref().unwrap_or(b"-"));
    s.push_str("\"\n");
    s
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

/// Unix seconds to (year, month, day, hour, minute, second), UTC.
fn civil(t: i64) -> (i64, i64, i64, i64, i64, i64) {
    let days = t.div_euclid(86_400);
    let rem = t.rem_euclid(86_400);
    // Howard Hinnant's days-to-civil algorithm.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d, rem / 3600, rem % 3600 / 60, rem % 60)
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
        };
        assert_eq!(
            format_line("127.0.0.1", 971_211_336, &info, 2326),
            "127.0.0.1 - - [10/Oct/2000:20:55:36 +0000] \"GET /a b\\x22 HTTP/1.1\" 200 2326 \"-\" \"curl/8\"\n"
        );
        assert_eq!(civil(951_782_400), (2000, 2, 29, 0, 0, 0));
    }
}
