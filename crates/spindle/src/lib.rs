//! The spindle server: configuration, lifecycle, and the I/O backends that
//! drive [`spindle_core`] sessions.

/// Writes one line to stderr with a single `write(2)`.
///
/// `eprintln!` formats straight into unbuffered stderr, one `write` per
/// piece, so a reader (a script or test waiting for the startup line to
/// learn the port) can see half a line. Every log line of the server goes
/// through here instead.
#[macro_export]
macro_rules! say {
    ($($arg:tt)*) => {
        $crate::write_line(::std::format!($($arg)*))
    };
}

#[doc(hidden)]
pub fn write_line(mut line: String) {
    use std::io::Write;
    line.push('\n');
    // Nothing useful can be done when stderr is gone.
    let _ = std::io::stderr().lock().write_all(line.as_bytes());
}

pub mod accesslog;
pub mod backend;
pub mod config;
pub mod depth;
pub mod filecache;
pub mod fs;
pub mod lister;
pub mod memory;
pub mod metrics;
pub mod net;
pub mod perip;
pub mod recent;
pub mod reload;
pub mod server;
pub mod tls;
