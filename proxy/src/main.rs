//! `proxy`: command line entry point.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;

/// A TLS-terminating reverse proxy and web cache with Tempesta FW's configuration language.
#[derive(Parser, Debug)]
#[command(name = "proxy", version, about)]
struct Cli {
    /// Configuration file (Tempesta syntax, or TOML when the name ends in .toml).
    #[arg(
        short = 'c',
        long = "config",
        value_name = "FILE",
        default_value = "etc/tempesta.conf"
    )]
    config: PathBuf,
    /// Check the configuration (syntax, references, certificates and keys) and exit, as
    /// `nginx -t` does; binds nothing.
    #[arg(short = 't', long = "test")]
    test: bool,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match proxy::load(&cli.config) {
        Ok(rt) => rt,
        Err(report) => {
            eprintln!("{report}");
            if cli.test {
                eprintln!(
                    "proxy: configuration file {} test failed",
                    cli.config.display()
                );
            }
            return ExitCode::from(1);
        }
    };
    if cli.test {
        println!(
            "proxy: configuration file {} syntax is ok",
            cli.config.display()
        );
        println!(
            "proxy: configuration file {} is valid",
            cli.config.display()
        );
        return ExitCode::SUCCESS;
    }
    let processes = runtime.config.worker_processes;
    let result = if processes > 1 && !proxy::process::is_child() {
        drop(runtime);
        proxy::process::supervise(&cli.config, processes)
    } else {
        proxy::server::serve(&cli.config, runtime).map_err(|e| e.to_string())
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            proxy::error!("{e}");
            ExitCode::from(1)
        }
    }
}
