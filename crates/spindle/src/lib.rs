//! The spindle server: configuration, lifecycle, and the I/O backends that
//! drive [`spindle_core`] sessions.

/// Writes one line to stderr with a single `write(2)`, without level or
/// timestamp: the one error line of a server that could not start.
///
/// `eprintln!` formats straight into unbuffered stderr, one `write` per
/// piece, so a reader (a script or test) can see half a line. The error
/// log ([`errlog`], through [`error!`], [`warn!`] and [`info!`]) writes
/// each line whole too.
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

/// An error-log line at level `error` ([`errlog`]).
#[macro_export]
macro_rules! error {
    ($($arg:tt)*) => {
        $crate::errlog::write($crate::errlog::Level::Error, ::std::format_args!($($arg)*))
    };
}

/// An error-log line at level `warn` ([`errlog`]).
#[macro_export]
macro_rules! warn {
    ($($arg:tt)*) => {
        $crate::errlog::write($crate::errlog::Level::Warn, ::std::format_args!($($arg)*))
    };
}

/// An error-log line at level `info` ([`errlog`]).
#[macro_export]
macro_rules! info {
    ($($arg:tt)*) => {
        $crate::errlog::write($crate::errlog::Level::Info, ::std::format_args!($($arg)*))
    };
}

pub mod accesslog;
pub mod acme;
pub mod backend;
pub mod compress;
pub mod config;
pub mod conn;
pub mod depth;
pub mod edge;
pub mod errlog;
pub mod filecache;
pub mod fs;
pub mod handover;
pub mod io;
pub mod jobs;
pub mod listen;
pub mod lister;
pub mod memory;
pub mod metrics;
pub mod net;
pub mod passwords;
pub mod perip;
pub mod quic;
pub mod recent;
pub mod reload;
pub mod server;
pub mod sys;
pub mod tls;
pub mod tlsrec;
pub mod worker;
