//! Resolving a vhost's effective settings from what its scope sets and
//! what it inherits: the default vhost from built-in defaults, other
//! vhosts from the default vhost, locations from their vhost.

use crate::model::{CachePolicy, HeaderRules, Location, Sticky, Vhost, VhostTls};
use crate::validate::sticky::StickyDraft;
use crate::validate::vhost::Draft;

fn headers(own: &Draft, parent: &HeaderRules) -> HeaderRules {
    HeaderRules {
        request: own
            .req_hdrs
            .clone()
            .unwrap_or_else(|| parent.request.clone()),
        response: own
            .resp_hdrs
            .clone()
            .unwrap_or_else(|| parent.response.clone()),
    }
}

fn cache(own: &Draft, parent: &CachePolicy) -> CachePolicy {
    CachePolicy {
        rules: own
            .cache_rules
            .clone()
            .unwrap_or_else(|| parent.rules.clone()),
        control_ignore: own
            .control_ignore
            .clone()
            .unwrap_or_else(|| parent.control_ignore.clone()),
        use_stale: own
            .use_stale
            .clone()
            .unwrap_or_else(|| parent.use_stale.clone()),
        resp_hdr_del: own
            .resp_hdr_del
            .clone()
            .unwrap_or_else(|| parent.resp_hdr_del.clone()),
        purge: own.purge.or(parent.purge),
        purge_acl: own
            .purge_acl
            .clone()
            .unwrap_or_else(|| parent.purge_acl.clone()),
    }
}

/// A named vhost's sticky settings: its own block, else the top-level block that stood
/// when its section ended (`top`), else the built-in defaults. Not the default vhost's:
/// an explicit `vhost default` is a vhost like the others to Tempesta's sticky code.
pub fn sticky(own: &Draft, top: Option<&StickyDraft>, builtin: &Sticky) -> Sticky {
    let parent = top.map_or_else(|| builtin.clone(), |t| t.resolve(builtin));
    own.sticky
        .as_ref()
        .map_or_else(|| parent.clone(), |s| s.resolve(&parent))
}

/// The effective vhost: each setting from `own` when given there, else from
/// `parent` (the default vhost, or built-in defaults for the default vhost
/// itself).
pub fn resolve(name: &str, own: &Draft, parent: &Vhost) -> Vhost {
    let tls = VhostTls {
        certificates: if own.certificates.is_empty() {
            parent.tls.certificates.clone()
        } else {
            own.certificates.clone()
        },
        tickets: own
            .tickets
            .clone()
            .unwrap_or_else(|| parent.tls.tickets.clone()),
        acme: false,
    };
    let mut v = Vhost {
        name: name.to_string(),
        proxy_pass: own.proxy_pass.clone(),
        locations: Vec::new(),
        tls,
        headers: headers(own, &parent.headers),
        cache: cache(own, &parent.cache),
        frang: own.frang.clone(),
        hdr_via: own.hdr_via.clone().or_else(|| parent.hdr_via.clone()),
        nonidempotent: own
            .nonidempotent
            .clone()
            .unwrap_or_else(|| parent.nonidempotent.clone()),
        http_post_validate: own.http_post_validate.unwrap_or(parent.http_post_validate),
        sticky: own
            .sticky
            .as_ref()
            .map_or_else(|| parent.sticky.clone(), |s| s.resolve(&parent.sticky)),
    };
    v.locations = own
        .locations
        .iter()
        .map(|l| Location {
            op: l.op,
            pattern: l.pattern.clone(),
            proxy_pass: l.draft.proxy_pass.clone().or_else(|| v.proxy_pass.clone()),
            headers: headers(&l.draft, &v.headers),
            cache: cache(&l.draft, &v.cache),
            frang: l.draft.frang.clone(),
            nonidempotent: l
                .draft
                .nonidempotent
                .clone()
                .unwrap_or_else(|| v.nonidempotent.clone()),
            http_post_validate: l.draft.http_post_validate.unwrap_or(v.http_post_validate),
        })
        .collect();
    v
}
