//! The `repairbench` binary: parses flags, calls the library, and turns errors into exit codes.

mod cli;

use std::process::ExitCode;

use clap::Parser;
use repairbench::kernel::interrupt;

fn main() -> ExitCode {
    let cli = cli::Cli::parse();
    cli::init_logging(cli.verbose);
    // Only `main` ends the process: after a signal's cleanup, with the interrupted status.
    let exit = || std::process::exit(i32::from(cli::EXIT_INTERRUPTED));
    if let Err(err) = interrupt::install(exit) {
        eprintln!("error: installing signal handlers: {err}");
        return ExitCode::from(cli::EXIT_ERROR);
    }
    let outcome = cli.run();
    // After a signal, whatever the command came to (often an error, its containers being
    // removed under it), the handler ends the process with the interrupted status.
    interrupt::wait_if_stopping();
    match outcome {
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
