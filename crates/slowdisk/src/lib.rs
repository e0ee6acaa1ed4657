//! `spindle-bench slowdisk`: not built yet.

/// Command-line arguments of `spindle-bench slowdisk`.
#[derive(Debug, clap::Args)]
pub struct Args {}

/// Runs `spindle-bench slowdisk`.
pub fn run(_args: Args) -> anyhow::Result<()> {
    anyhow::bail!("slowdisk is not implemented yet")
}
