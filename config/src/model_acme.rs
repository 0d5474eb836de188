//! The `acme { ... }` block (an extension; Tempesta has none): where vhosts written with
//! `tls_certificate acme;` get their certificates (RFC 8555).

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// `acme { directory URL; contact URI...; state_dir PATH; ca_root FILE; }`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Acme {
    /// `directory URL`: the ACME server's directory (an `https://` URL).
    pub directory: String,
    /// `contact mailto:...`: the account's contact addresses (none: an anonymous account).
    #[serde(default)]
    pub contact: Vec<String>,
    /// `state_dir PATH`: the account key and each vhost's certificate and key (0700).
    pub state_dir: PathBuf,
    /// `ca_root FILE`: the CA certificates that verify the ACME server; without it, the
    /// system's.
    #[serde(default)]
    pub ca_root: Option<PathBuf>,
}

impl Acme {
    /// Where the certificate chain and key of vhost `name` live.
    pub fn certificate_paths(&self, name: &str) -> crate::model::CertificatePair {
        let dir = self.state_dir.join(name.to_ascii_lowercase());
        crate::model::CertificatePair {
            certificate: dir.join("fullchain.pem"),
            key: dir.join("key.pem"),
        }
    }
}
