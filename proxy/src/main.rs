//! `proxy`: command line entry point.
#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches, Parser};
use proxy::service;

// `aws-lc` is a default feature and Cargo features only add: asked for beside it, the system
// or a vendored OpenSSL would silently be AWS-LC.
#[cfg(all(feature = "aws-lc", feature = "system-openssl"))]
compile_error!(
    "the `system-openssl` feature needs the default `aws-lc` left out: \
     cargo build --release -p proxy --no-default-features --features system-openssl"
);
#[cfg(all(feature = "aws-lc", feature = "vendored-openssl"))]
compile_error!(
    "the `vendored-openssl` feature needs the default `aws-lc` left out: \
     cargo build --release -p proxy --no-default-features --features vendored-openssl"
);

/// With the `mimalloc` feature: mimalloc for the whole process, OpenSSL included (`main`
/// routes OpenSSL to it first): a TLS handshake is hundreds of small allocations, and
/// mimalloc makes them cheaper than glibc's malloc (docs/PERFORMANCE.md, "Handshake cost").
/// Off by default: idle connections then keep far more memory.
#[cfg(feature = "mimalloc")]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The configuration used without `-c`: the example of a source checkout when run from
/// one, else the packaged configuration.
const CHECKOUT_CONFIG: &str = "etc/tempesta.conf";
const PACKAGED_CONFIG: &str = "/etc/ktls-proxy/ktls-proxy.conf";

/// The manual page's and `--help`'s description.
const LONG_ABOUT: &str = "A TLS-terminating reverse proxy and web cache that reads Tempesta FW's \
configuration language. It terminates HTTPS (HTTP/1.1 and HTTP/2) with OpenSSL, hands the \
records to the kernel's TLS where the kernel has it, forwards requests to groups of HTTP/1.1 \
servers, caches their responses (RFC 9111), and enforces Tempesta's http_chain rules and frang \
limits. Like nginx, one command checks a configuration (-t) and signals the running instance \
(-s reload|stop|quit|reopen); the Debian package runs it as the systemd service ktls-proxy.";

/// The manual page's examples: command line, what it does.
const EXAMPLES: &[(&str, &str)] = &[
    ("ktls-proxy -t -c /etc/ktls-proxy/ktls-proxy.conf", "Check a configuration, certificates included, and exit; errors name FILE:LINE:COL."),
    ("ktls-proxy -c /etc/ktls-proxy/ktls-proxy.conf", "Run in the foreground with that configuration (systemd's way)."),
    ("ktls-proxy -s reload", "Re-read the packaged configuration in the running instance; a broken file is logged and the old one kept."),
    ("ktls-proxy -s reopen", "Reopen the access logs after logrotate moved them."),
    ("ktls-proxy --upgrade -c FILE & ktls-proxy -c FILE -s quit", "Hot binary upgrade: start the new binary beside the old one, then stop the old one gracefully."),
];

/// A TLS-terminating reverse proxy and web cache with Tempesta FW's configuration language.
#[derive(Parser, Debug)]
#[command(name = "proxy", version, about, long_about = LONG_ABOUT)]
struct Cli {
    /// Configuration file (Tempesta syntax, or TOML when the name ends in .toml). Default:
    /// etc/tempesta.conf when it exists in the current directory, else
    /// /etc/ktls-proxy/ktls-proxy.conf.
    #[arg(short = 'c', long = "config", value_name = "FILE")]
    config: Option<PathBuf>,
    /// Check the configuration (syntax, references, certificates and keys) and exit, as
    /// `nginx -t` does; binds nothing.
    #[arg(short = 't', long = "test")]
    test: bool,
    /// Send a signal to the running proxy named by the configuration's pid file, as
    /// `nginx -s`: reload (SIGHUP), stop (SIGTERM), quit (SIGQUIT), reopen (SIGUSR1).
    #[arg(short = 's', long = "signal", value_name = "SIGNAL")]
    signal: Option<service::Command>,
    /// Start even though an instance of the same configuration is running (its pid file is
    /// locked): the hot binary upgrade. Start the new binary with --upgrade, then stop the
    /// old one with `-s quit`; the new one takes the pid file once the old one has gone.
    /// Without it such a start is refused before anything is bound.
    #[arg(long = "upgrade")]
    upgrade: bool,
    /// Print this program's manual page (roff) and exit; the package build uses it.
    #[arg(long = "man-page", hide = true)]
    man_page: bool,
}

fn main() -> ExitCode {
    // Before anything touches OpenSSL: it accepts the switch only before its first allocation.
    #[cfg(feature = "mimalloc")]
    if !ktls::use_mimalloc() {
        eprintln!("proxy: OpenSSL had already allocated; it keeps the C library's malloc");
    }
    let Some(cli) = parse_command_line() else {
        return ExitCode::FAILURE;
    };
    if cli.man_page {
        return print_man_page();
    }
    let config_path = cli.config.clone().unwrap_or_else(default_config);
    if let Some(command) = cli.signal {
        return send_signal(&config_path, command);
    }
    let runtime = match proxy::load(&config_path) {
        Ok(rt) => rt,
        Err(report) => {
            eprintln!("{report}");
            if cli.test {
                eprintln!(
                    "proxy: configuration file {} test failed",
                    config_path.display()
                );
            }
            return ExitCode::from(1);
        }
    };
    if cli.test {
        println!(
            "proxy: configuration file {} syntax is ok",
            config_path.display()
        );
        println!(
            "proxy: configuration file {} is valid",
            config_path.display()
        );
        return ExitCode::SUCCESS;
    }
    let processes = runtime.config.worker_processes;
    let child = proxy::process::is_child();
    if child {
        if let Err(e) = proxy::process::stop_with_supervisor() {
            proxy::error!("{e}");
            return ExitCode::from(1);
        }
    }
    // Claimed before anything is bound: a second instance of this configuration must not
    // take a share of its ports. A child's supervisor holds the claim.
    let pid_file = if child {
        None
    } else {
        match proxy::pid_file::claim(&runtime.config.pid, &config_path, cli.upgrade) {
            Ok(guard) => Some(guard),
            Err(e) => {
                proxy::error!("{e}");
                return ExitCode::from(1);
            }
        }
    };
    let result = match pid_file.as_ref() {
        Some(guard) if processes > 1 => {
            drop(runtime);
            proxy::process::supervise(&config_path, processes, guard)
        }
        guard => proxy::server::serve(&config_path, runtime, guard).map_err(|e| e.to_string()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            proxy::error!("{e}");
            ExitCode::from(1)
        }
    }
}

/// The command line, with `--version` saying what an operator reporting a problem needs:
/// the source revision, the TLS library in use (OpenSSL or AWS-LC) and whether this kernel
/// can do kTLS.
/// `None` after clap printed a usage error.
fn parse_command_line() -> Option<Cli> {
    let long_version = format!(
        "{} (git {})\nTLS library: {}\nkernel TLS: {}",
        env!("CARGO_PKG_VERSION"),
        env!("KTLS_PROXY_GIT_REVISION"),
        ktls::settings::library(),
        ktls::kernel::kernel_support().describe()
    );
    // The string lives as long as the process: clap wants it for 'static.
    let long_version: &'static str = Box::leak(long_version.into_boxed_str());
    let command = Cli::command().long_version(long_version);
    let matches = command.get_matches();
    match Cli::from_arg_matches(&matches) {
        Ok(cli) => Some(cli),
        Err(e) => {
            let _ = e.print();
            None
        }
    }
}

fn default_config() -> PathBuf {
    if std::path::Path::new(CHECKOUT_CONFIG).exists() {
        PathBuf::from(CHECKOUT_CONFIG)
    } else {
        PathBuf::from(PACKAGED_CONFIG)
    }
}

/// The manual page, under the name the package installs the binary as: clap_mangen's
/// sections with EXAMPLES after the options.
fn print_man_page() -> ExitCode {
    let mut out = Vec::new();
    let man = clap_mangen::Man::new(Cli::command().name("ktls-proxy").bin_name("ktls-proxy"));
    let rendered = (|| {
        man.render_title(&mut out)?;
        man.render_name_section(&mut out)?;
        man.render_synopsis_section(&mut out)?;
        man.render_description_section(&mut out)?;
        man.render_options_section(&mut out)?;
        out.extend_from_slice(b".SH EXAMPLES\n");
        for (line, what) in EXAMPLES {
            let line = line.replace('-', "\\-");
            out.extend_from_slice(
                format!(".TP\n.B {line}\n{}\n", what.replace('-', "\\-")).as_bytes(),
            );
        }
        man.render_version_section(&mut out)
    })();
    if let Err(e) = rendered {
        eprintln!("proxy: cannot render the manual page: {e}");
        return ExitCode::FAILURE;
    }
    use std::io::Write;
    match std::io::stdout().lock().write_all(&out) {
        Ok(()) => ExitCode::SUCCESS,
        Err(_) => ExitCode::FAILURE,
    }
}

/// `proxy -s`: only the pid file setting is needed, so the configuration is parsed but its
/// certificates are not loaded (a broken certificate must not stop a `-s stop`).
fn send_signal(config_path: &std::path::Path, command: service::Command) -> ExitCode {
    let loaded = match config::load_path(config_path) {
        Ok(l) => l,
        Err(report) => {
            eprintln!("{report}");
            return ExitCode::from(1);
        }
    };
    match service::send(&loaded.config.pid, config_path, command) {
        Ok(_) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("proxy: {e}");
            ExitCode::from(1)
        }
    }
}
