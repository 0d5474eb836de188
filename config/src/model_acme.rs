//! The `acme { ... }` block (an extension; Tempesta has none): where vhosts written with
//! `tls_certificate acme;` get their certificates (RFC 8555).

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// `acme { directory URL; contact URI...; state_dir PATH; ca_root FILE; challenges TYPE...; }`.
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
    /// `challenges TYPE...`: the challenge types the client answers, in order of preference.
    /// Without the directive the validator fills it: `http-01` when a plain listener exists,
    /// else `tls-alpn-01` (empty, as from an older serialized configuration: `http-01`).
    #[serde(default)]
    pub challenges: Vec<AcmeChallenge>,
}

/// A challenge type (RFC 8555 §8) the ACME client may answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum AcmeChallenge {
    /// `http-01` (RFC 8555 §8.3): a file on the plain listeners, port 80.
    #[serde(rename = "http-01")]
    Http01,
    /// `tls-alpn-01` (RFC 8737): a validation certificate on the TLS listeners, port 443.
    #[serde(rename = "tls-alpn-01")]
    TlsAlpn01,
}

impl AcmeChallenge {
    /// The name in the configuration and in the ACME server's challenge objects.
    pub fn as_str(self) -> &'static str {
        match self {
            AcmeChallenge::Http01 => "http-01",
            AcmeChallenge::TlsAlpn01 => "tls-alpn-01",
        }
    }
}

impl Acme {
    /// The challenge types to answer, in order of preference.
    pub fn challenge_preference(&self) -> &[AcmeChallenge] {
        if self.challenges.is_empty() {
            &[AcmeChallenge::Http01]
        } else {
            &self.challenges
        }
    }

    /// Where the certificate chain and key of vhost `name` live.
    pub fn certificate_paths(&self, name: &str) -> crate::model::CertificatePair {
        let dir = self.state_dir.join(name.to_ascii_lowercase());
        crate::model::CertificatePair {
            certificate: dir.join("fullchain.pem"),
            key: dir.join("key.pem"),
            written_at: None,
        }
    }
}
