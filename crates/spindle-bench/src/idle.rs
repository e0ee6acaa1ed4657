use anyhow::Result;
#[derive(clap::Args, Debug, Clone)]
pub struct IdleArgs {}
pub fn run(_a: IdleArgs) -> Result<()> {
    anyhow::bail!("not yet")
}
