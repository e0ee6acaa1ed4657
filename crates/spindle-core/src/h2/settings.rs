//! Our HTTP/2 limits and the settings we advertise, with their named
//! defaults.

use super::frame::MIN_MAX_FRAME_SIZE;

/// Default SETTINGS_MAX_CONCURRENT_STREAMS we advertise (nginx's, and
/// issue 38's): a browser opens a page's resources at once, and each open
/// stream costs a few hundred bytes here plus whatever the driver holds.
pub const DEFAULT_MAX_CONCURRENT_STREAMS: u32 = 128;

/// Default SETTINGS_INITIAL_WINDOW_SIZE we advertise: how much of a
/// request body one stream may send before we open its window again.
/// spindle reads request bodies only to drop them, so a large window
/// costs no memory, and it keeps an upload from stalling at window ÷ RTT
/// (64 KiB at 100 ms is 640 KB/s; 4 MiB is 40 MB/s). The other direction,
/// the files we send, is bounded by the client's windows, which we honour.
pub const DEFAULT_INITIAL_WINDOW: u32 = 4 << 20;

/// Default connection window we open to (with a WINDOW_UPDATE after our
/// SETTINGS): 16 MiB, H2O's, room for four streams' windows at once, the
/// bandwidth-delay product of 1.3 Gbit/s at 100 ms.
pub const DEFAULT_CONNECTION_WINDOW: u32 = 16 << 20;

/// Default SETTINGS_MAX_HEADER_LIST_SIZE (names, values and 32 bytes per
/// field, decoded): twice HTTP/1.1's head limit, as HPACK's per-field
/// overhead counts here and not there. A larger list gets 431.
pub const DEFAULT_MAX_HEADER_LIST_SIZE: u32 = 16 << 10;

/// Default SETTINGS_HEADER_TABLE_SIZE: the HPACK dynamic table the client
/// may fill per connection (RFC 7541's default).
pub const DEFAULT_HEADER_TABLE_SIZE: u32 = 4096;

/// Default most CONTINUATION frames after one HEADERS. One header block
/// within the list limit needs at most one at the default frame size; a
/// flood of them (2024's "CONTINUATION flood") is ENHANCE_YOUR_CALM.
pub const DEFAULT_MAX_CONTINUATION_FRAMES: u32 = 8;

/// Default most bytes of one encoded header block (HEADERS plus its
/// CONTINUATIONs) held until it ends: twice the header list limit (an
/// encoded field is never much larger than its decoded size).
pub const DEFAULT_MAX_HEADER_BLOCK: u32 = 2 * DEFAULT_MAX_HEADER_LIST_SIZE;

/// A WINDOW_UPDATE opening less than this counts against
/// [`FloodLimits::window_updates`]; larger ones open room for real work.
pub const SMALL_WINDOW_INCREMENT: u32 = 1024;

/// Per-second budgets for frames that cost the server work and give it
/// none; one over any of them is GOAWAY(ENHANCE_YOUR_CALM). Each is far
/// above what a browser sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FloodLimits {
    /// RST_STREAM from the client on a stream whose response has not
    /// ended (rapid reset, CVE-2023-44487), plus RST_STREAMs we send for
    /// the client's stream errors.
    pub resets: u32,
    pub settings: u32,
    pub pings: u32,
    /// DATA frames with no payload and no END_STREAM.
    pub empty_data: u32,
    /// WINDOW_UPDATE frames opening less than [`SMALL_WINDOW_INCREMENT`].
    pub window_updates: u32,
    pub priorities: u32,
}

/// Defaults for [`FloodLimits`].
pub const DEFAULT_FLOOD_LIMITS: FloodLimits = FloodLimits {
    resets: 200,
    settings: 50,
    pings: 100,
    empty_data: 100,
    window_updates: 10_000,
    priorities: 1000,
};

/// Our limits and the settings we advertise.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct H2Settings {
    pub max_concurrent_streams: u32,
    /// At least 65,535 (the window the client assumes until it reads our
    /// SETTINGS), at most 2^31 - 1.
    pub initial_window: u32,
    pub connection_window: u32,
    /// SETTINGS_MAX_FRAME_SIZE: the largest frame we accept.
    pub max_frame_size: u32,
    pub max_header_list_size: u32,
    pub header_table_size: u32,
    pub max_continuation_frames: u32,
    pub max_header_block: u32,
    pub flood: FloodLimits,
}

impl Default for H2Settings {
    fn default() -> H2Settings {
        H2Settings {
            max_concurrent_streams: DEFAULT_MAX_CONCURRENT_STREAMS,
            initial_window: DEFAULT_INITIAL_WINDOW,
            connection_window: DEFAULT_CONNECTION_WINDOW,
            max_frame_size: MIN_MAX_FRAME_SIZE,
            max_header_list_size: DEFAULT_MAX_HEADER_LIST_SIZE,
            header_table_size: DEFAULT_HEADER_TABLE_SIZE,
            max_continuation_frames: DEFAULT_MAX_CONTINUATION_FRAMES,
            max_header_block: DEFAULT_MAX_HEADER_BLOCK,
            flood: DEFAULT_FLOOD_LIMITS,
        }
    }
}
