//! How every process takes in a certificate the ordering process (`leader`) stored: a
//! runtime remembers the identity (`ticket_files::Stamp`: device, inode, size, modification
//! time) of each ACME vhost's certificate file as it was when the runtime was built; each
//! turn of the ACME thread compares them with the files, and a difference builds the
//! runtime again (`swap`), as a reload does.

use crate::ticket_files::Stamp;

/// Each ACME vhost's name and its certificate file's identity.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stored(Vec<(String, Option<Stamp>)>);

impl Stored {
    /// The files of `config`'s ACME vhosts as they are now (taken before they are read, so
    /// that a write in between is seen again).
    pub fn of(config: &config::Config) -> Stored {
        let Some(acme) = &config.acme else {
            return Stored::default();
        };
        Stored(
            super::acme_vhosts(config)
                .into_iter()
                .map(|name| {
                    let stamp = Stamp::of(&acme.certificate_paths(&name).certificate);
                    (name, stamp)
                })
                .collect(),
        )
    }

    /// The vhosts whose certificate file `now` differs from this.
    pub fn changed<'a>(&self, now: &'a Stored) -> Vec<&'a str> {
        now.0
            .iter()
            .filter(|entry| !self.0.contains(entry))
            .map(|(name, _)| name.as_str())
            .collect()
    }
}
