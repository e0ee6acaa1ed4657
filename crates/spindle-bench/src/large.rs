use anyhow::Result;
#[derive(clap::Args, Debug, Clone)]
pub struct LargeArgs {}
pub fn run(_a: LargeArgs) -> Result<()> {
    anyhow::bail!("not yet")
}
