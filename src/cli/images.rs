use clap::Subcommand;

#[derive(Debug, Subcommand)]
pub enum ImagesCommand {}

pub fn run(cmd: ImagesCommand) -> anyhow::Result<u8> {
    match cmd {}
}
