//! `--man-page`: prints the program's manual page (roff, from its clap definition) and
//! exits. Hidden from `--help`; the Debian package build uses it to make `man` pages.
//!
//! The page is clap_mangen's sections (name, synopsis, description, options, version) with an
//! EXAMPLES section of its own in place of clap's "EXTRA" (the `after_help` text).

use std::io::Write;
use std::process::ExitCode;

/// When the only argument is `--man-page`: prints the page of `command()` with `examples`
/// (command line, what it does) and returns the exit code; otherwise `None` and the program
/// goes on.
pub fn print_if_asked(
    command: impl FnOnce() -> clap::Command,
    examples: &[(&str, &str)],
) -> Option<ExitCode> {
    let mut args = std::env::args_os().skip(1);
    if args.next().as_deref() != Some("--man-page".as_ref()) || args.next().is_some() {
        return None;
    }
    let mut page = Vec::new();
    let written = render(command(), examples, &mut page)
        .and_then(|()| std::io::stdout().lock().write_all(&page));
    Some(match written {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("cannot write the manual page: {e}");
            ExitCode::FAILURE
        }
    })
}

/// The page of `command` with an EXAMPLES section.
pub fn render(
    command: clap::Command,
    examples: &[(&str, &str)],
    out: &mut Vec<u8>,
) -> std::io::Result<()> {
    // clap_mangen's version section needs a version (it panics without one).
    let has_version = command.get_version().is_some();
    let man = clap_mangen::Man::new(command);
    man.render_title(out)?;
    man.render_name_section(out)?;
    man.render_synopsis_section(out)?;
    man.render_description_section(out)?;
    man.render_options_section(out)?;
    if !examples.is_empty() {
        out.extend_from_slice(b".SH EXAMPLES\n");
        for (line, what) in examples {
            writeln!(out, ".TP\n.B {}\n{}", roff(line), roff(what))?;
        }
    }
    if has_version {
        man.render_version_section(out)?;
    }
    Ok(())
}

/// Text as roff prints it literally: `-` as `\-`, `\` as `\e`, no leading `.` or `'`.
fn roff(text: &str) -> String {
    let escaped = text.replace('\\', "\\e").replace('-', "\\-");
    if escaped.starts_with('.') || escaped.starts_with('\'') {
        format!("\\&{escaped}")
    } else {
        escaped
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn examples_follow_the_options() {
        let cmd = clap::Command::new("x")
            .about("Does x")
            .arg(clap::Arg::new("n").short('n'));
        let mut page = Vec::new();
        render(cmd, &[("x -n 1", "once")], &mut page).unwrap();
        let page = String::from_utf8(page).unwrap();
        let options = page.find(".SH OPTIONS").unwrap();
        let examples = page.find(".SH EXAMPLES\n.TP\n.B x \\-n 1\nonce\n").unwrap();
        assert!(options < examples, "{page}");
    }
}
