//! `spindle-bench`: the seed experiments (`mkfiles`, `cold`, `large`, `hot`, `idle`),
//! `rules`, `compress` (compression on the fly against the peers), the `soak`,
//! `h3` (the 700 MB file over HTTP/3 against Caddy), `scaleout` (HAProxy over
//! three replicas), and a thin dispatcher over the other benchmark crates
//! (`pipetest`, `naio`, `slowdisk`).
//!
//! The binary also carries the server and the load generator as hidden subcommands
//! (`__spindle` runs `spindle`, `__load` runs `spindle-load`), so the harness needs no
//! other binary of the workspace and measures the build it was built with.

mod cold;
mod common;
mod compress;
mod data;
mod edge;
mod h2idle;
mod h2load;
mod h2mixed;
mod h3;
mod hot;
mod idle;
mod large;
mod large_h2;
mod report;
mod rules;
mod scaleout;
mod servers;
mod soak;
mod sys;
mod tls;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "spindle-bench", version, about = "spindle's benchmark suite")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Token passing through pipes under each I/O model (LaHaise, OLS 2002).
    Pipetest(pipetest::Args),
    /// Asynchronous against synchronous network send and receive.
    Naio(naio::Args),
    /// A FUSE mirror of a directory whose reads are delayed by a seek-bound disk model.
    Slowdisk(slowdisk::Args),
    /// Create (or verify) the seeds' data sets: small, large, huge, tiny.
    Mkfiles(data::MkfilesArgs),
    /// The lighttpd 1.5 experiment: 100 KiB files, cold, in a memory cgroup (seed 004).
    Cold(cold::ColdArgs),
    /// The large-file posts: 10 MB files with a chunk-size sweep, and the 700 MB siege table (seeds 000, 001).
    Large(large::LargeArgs),
    /// Everything cached: req/s and server CPU per 10k requests, 100 KiB and 1 KiB.
    Hot(hot::HotArgs),
    /// What access rules cost on hot files, and a flood of wrong passwords beside another client.
    Rules(rules::RulesArgs),
    /// HTTP/3: the 700 MB file, cached, over one connection: spindle and Caddy over
    /// HTTP/3 (gtlsclient) and spindle's HTTP/2 (h2load), MB/s, server and client CPU
    /// per GB, and the server's system calls per MB (perf stat).
    #[command(mut_arg("servers", |a| a.default_value(h3::H3_SERVERS)))]
    H3(h3::H3Args),
    /// Compression on the fly against the peers (nginx gzip, lighttpd mod_deflate, Caddy encode,
    /// H2O compress), Python docs, cached, keep-alive: req/s, CPU and bytes on the wire per
    /// request in gzip, br and zstd, and a 1 MiB file's first request (nginx-gzipN: nginx at gzip
    /// level N).
    #[command(mut_arg("servers", |a| a.default_value(compress::COMPRESS_SERVERS)))]
    Compress(compress::CompressArgs),
    /// Throughput and server RSS as idle keep-alive connections grow.
    Idle(idle::IdleArgs),
    /// Mixed traffic for a long time: RSS, descriptors and CQ overflows must stay flat.
    Soak(soak::SoakArgs),
    /// Past one machine: HAProxy over three replicas, roundrobin against uri hashing, and failover.
    Scaleout(scaleout::ScaleoutArgs),
    /// A caching edge over a library ten times its memory, against nginx proxy_cache + slice.
    Edge(edge::EdgeArgs),
}

fn main() {
    let argv: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if argv.len() >= 2 && argv[1] == "__spindle" {
        std::process::exit(servers::spindle_main(&argv[2..]));
    }
    if argv.len() >= 2 && argv[1] == "__load" {
        std::process::exit(servers::load_main(&argv[2..]));
    }
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Pipetest(a) => pipetest::run(a),
        Command::Naio(a) => naio::run(a),
        Command::Slowdisk(a) => slowdisk::run(a),
        Command::Mkfiles(a) => data::run(a),
        Command::Cold(a) => cold::run(a),
        Command::Large(a) => large::run(a),
        Command::Hot(a) => hot::run(a),
        Command::Rules(a) => rules::run(a),
        Command::Compress(a) => compress::run(a),
        Command::H3(a) => h3::run(a),
        Command::Idle(a) => idle::run(a),
        Command::Soak(a) => soak::run(a),
        Command::Scaleout(a) => scaleout::run(a),
        Command::Edge(a) => edge::run(a),
    };
    if let Err(e) = result {
        eprintln!("spindle-bench: error: {e:#}");
        std::process::exit(1);
    }
}
