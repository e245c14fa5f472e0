//! The `fxtrace` command line: a thin clap layer over the library. Only `main` decides the
//! exit status; subcommands return `Result`.

mod commands;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let args = commands::Cli::parse();
    match commands::run(args) {
        Ok(code) => code,
        Err(e) => {
            use std::io::Write as _;
            // A closed standard error loses the message, not the exit status.
            let _ = writeln!(std::io::stderr(), "{e}");
            ExitCode::FAILURE
        }
    }
}
