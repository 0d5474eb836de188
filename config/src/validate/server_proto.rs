//! `server_proto http1|h2`, an extension (Tempesta speaks HTTP/1.1 to its servers): the HTTP
//! version spoken to a group's servers. In a `srv_group` or at top level, where it configures
//! the implicit `default` group and is the default of the explicit groups (as every group
//! setting is: `servers.rs`).

use crate::diag::Pos;
use crate::model::ServerProto;
use crate::tree::Directive;
use crate::validate::values::Checker;

const USAGE: &str = "server_proto http1|h2";

/// Handles `server_proto`; false if `d` is not it.
pub fn apply(c: &mut Checker<'_>, d: &Directive, slot: &mut Option<(ServerProto, Pos)>) -> bool {
    if d.name != "server_proto" {
        return false;
    }
    let Some(v) = c.single(d, USAGE) else {
        return true;
    };
    let proto = match v.text.to_ascii_lowercase().as_str() {
        "http1" => ServerProto::Http1,
        "h2" => ServerProto::H2,
        _ => {
            c.error(
                &v.pos,
                format!(
                    "`{}` is not an HTTP version the proxy speaks to servers",
                    v.text
                ),
                "expected `server_proto http1;` (the default) or `server_proto h2;` \
                 (HTTP/2: h2 by ALPN with `server_tls on`, else h2c with prior knowledge)",
            );
            return true;
        }
    };
    *slot = Some((proto, d.pos.clone()));
    true
}

/// The group's own setting, else the top level's, else HTTP/1.1.
pub fn resolve(own: &Option<(ServerProto, Pos)>, top: &Option<(ServerProto, Pos)>) -> ServerProto {
    own.as_ref()
        .or(top.as_ref())
        .map(|(p, _)| *p)
        .unwrap_or_default()
}
