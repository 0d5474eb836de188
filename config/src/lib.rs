//! The Tempesta FW configuration language: lexer, parser and validation
//! into the typed [`Config`] model.
//!
//! ```no_run
//! let loaded = config::load_path(std::path::Path::new("etc/tempesta.conf"))
//!     .unwrap_or_else(|diags| panic!("{diags}"));
//! for w in &loaded.warnings {
//!     eprintln!("{w}");
//! }
//! println!("{} listeners", loaded.config.listeners.len());
//! ```

#![forbid(unsafe_code)]

mod braces;
pub mod diag;
pub mod directives;
mod files;
mod lexer;
pub mod model;
mod model_acme;
mod model_chain;
mod model_cluster;
mod model_fingerprint;
mod model_frang;
mod model_global;
mod model_h3;
mod model_resolver;
mod model_serde;
mod model_servers;
mod model_sticky;
mod model_types;
pub mod ticket_keys;
mod toml_load;
mod tree;
mod validate;

use std::path::{Path, PathBuf};
use std::sync::Arc;

pub use diag::{Diagnostic, Diagnostics, Severity};
pub use model::*;

/// A configuration that loaded, with the warnings found on the way
/// (unsupported directives, old spellings...).
#[derive(Debug, Clone, PartialEq)]
pub struct Loaded {
    pub config: Config,
    pub warnings: Vec<Diagnostic>,
}

/// Reads and checks a configuration file. Files ending in `.toml` are read
/// as TOML; anything else as Tempesta's language. Relative paths inside are
/// resolved against the file's directory.
pub fn load_path(path: &Path) -> Result<Loaded, Diagnostics> {
    load(path, FileChecks::Skip)
}

/// [`load_path`], and the certificate and key files the configuration names
/// are read too: each one missing, unreadable or of the wrong kind is an
/// error at its directive (what the proxy loads with, `-t` included).
pub fn load_path_and_files(path: &Path) -> Result<Loaded, Diagnostics> {
    load(path, FileChecks::Read)
}

fn load(path: &Path, files: FileChecks) -> Result<Loaded, Diagnostics> {
    let name = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| Diagnostics {
        errors: vec![Diagnostic::file_error(
            &name,
            0,
            0,
            format!("cannot read the configuration: {e}"),
        )
        .with_hint("check the path given with -c and the file's permissions")],
        warnings: Vec::new(),
    })?;
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    // Absolute, so that paths in the model do not depend on the cwd later.
    let dir = std::fs::canonicalize(&dir).unwrap_or(dir);
    parse(&name, &text, &dir, files)
}

/// Whether loading reads the files the configuration names.
#[derive(Clone, Copy, PartialEq, Eq)]
enum FileChecks {
    Read,
    Skip,
}

/// Checks configuration text. `file_name` appears in diagnostics and
/// selects TOML when it ends in `.toml`; `base_dir` resolves relative paths.
/// The files the text names (certificates, keys) are not read: `load_path`
/// checks those.
pub fn parse_str(file_name: &str, text: &str, base_dir: &Path) -> Result<Loaded, Diagnostics> {
    parse(file_name, text, base_dir, FileChecks::Skip)
}

fn parse(
    file_name: &str,
    text: &str,
    base_dir: &Path,
    files: FileChecks,
) -> Result<Loaded, Diagnostics> {
    if file_name.ends_with(".toml") {
        return match toml_load::load(file_name, text, base_dir) {
            Ok(config) => Ok(Loaded {
                config,
                warnings: Vec::new(),
            }),
            Err(errors) => Err(Diagnostics {
                errors,
                warnings: Vec::new(),
            }),
        };
    }
    let file: Arc<str> = file_name.into();
    let mut sink = diag::Sink::default();
    let nodes = tree::parse(&file, text, &mut sink);
    let config = validate::validate(&nodes, base_dir, &mut sink);
    if files == FileChecks::Read {
        files::check_tls_files(&nodes, base_dir, &mut sink);
    }
    let (errors, warnings) = sink.split();
    if errors.is_empty() {
        Ok(Loaded { config, warnings })
    } else {
        Err(Diagnostics { errors, warnings })
    }
}
