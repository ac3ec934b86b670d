use clap::Subcommand;

#[derive(Debug, Subcommand)]
pub enum SandboxCommand {}

pub fn run(cmd: SandboxCommand) -> anyhow::Result<u8> {
    match cmd {}
}
