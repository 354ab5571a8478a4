//! `iris`: parses the command line and hands over to the library. Errors are printed as one
//! line (`iris: what failed: why`), never as a backtrace.

use std::process::ExitCode;

use clap::Parser;
use clap::error::ErrorKind;
use gateway::cli::Cli;

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(err)
            if matches!(
                err.kind(),
                ErrorKind::DisplayHelp | ErrorKind::DisplayVersion
            ) =>
        {
            let _ = err.print();
            return ExitCode::SUCCESS;
        }
        Err(err) if err.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            let _ = err.print();
            return ExitCode::from(2);
        }
        Err(err) => {
            let rendered = err.render().to_string();
            let first = rendered.lines().next().unwrap_or("invalid arguments");
            let first = first.strip_prefix("error: ").unwrap_or(first);
            eprintln!("iris: {first} (see `iris --help`)");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("iris: cannot start the async runtime: {err}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(gateway::cli::run(cli)) {
        Ok(code) => code,
        Err(err) => {
            // Pattern rules still catch URL passwords and key shapes in error text.
            let text = format!("{err:#}");
            eprintln!(
                "iris: {}",
                agent_core::redact::Redactor::default().redact(&text)
            );
            ExitCode::FAILURE
        }
    }
}
