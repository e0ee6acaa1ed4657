//! The slowdisk daemon on its own: the same flags as `spindle-bench slowdisk`.

use clap::Parser;

#[derive(Parser)]
#[command(
    name = "slowdisk",
    about = "A FUSE mirror of a directory whose reads are delayed by a seek-bound disk model"
)]
struct Cli {
    #[command(flatten)]
    args: slowdisk::Args,
}

fn main() {
    let cli = Cli::parse();
    if let Err(e) = slowdisk::run(cli.args) {
        eprintln!("slowdisk: error: {e:#}");
        std::process::exit(1);
    }
}
