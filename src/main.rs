//! The `repairbench` binary: parses flags, calls the library, and turns errors into exit codes.

mod cli;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = cli::Cli::parse();
    cli::init_logging(cli.verbose);
    match cli.run() {
        Ok(code) => ExitCode::from(code),
        Err(err) => {
            eprintln!("error: {err}");
            for cause in err.chain().skip(1) {
                eprintln!("  caused by: {cause}");
            }
            ExitCode::from(cli::EXIT_ERROR)
        }
    }
}
