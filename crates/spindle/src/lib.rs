//! The spindle server: configuration, lifecycle, and the I/O backends that
//! drive [`spindle_core`] sessions.

pub mod accesslog;
pub mod backend;
pub mod config;
pub mod filecache;
pub mod fs;
pub mod memory;
pub mod net;
pub mod recent;
pub mod server;
