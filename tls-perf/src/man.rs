//! `--man-page`: prints the program's manual page (roff, from its clap definition) and
//! exits. Hidden from `--help`; the Debian package build uses it to make `man` pages.

use std::io::Write;
use std::process::ExitCode;

/// When the only argument is `--man-page`: prints the page of `command()` and returns the
/// exit code; otherwise `None` and the program goes on.
pub fn print_if_asked(command: impl FnOnce() -> clap::Command) -> Option<ExitCode> {
    let mut args = std::env::args_os().skip(1);
    if args.next().as_deref() != Some("--man-page".as_ref()) || args.next().is_some() {
        return None;
    }
    let mut page = Vec::new();
    let written = clap_mangen::Man::new(command())
        .render(&mut page)
        .and_then(|()| std::io::stdout().lock().write_all(&page));
    Some(match written {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("cannot write the manual page: {e}");
            ExitCode::FAILURE
        }
    })
}
