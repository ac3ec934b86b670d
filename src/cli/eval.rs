use clap::Args;

#[derive(Debug, Args)]
pub struct EvalArgs {}

pub fn run(_args: EvalArgs) -> anyhow::Result<u8> {
    anyhow::bail!("not implemented yet")
}
