//! The HTTP version spoken to the servers (`server_proto`, an extension): the default, what
//! is inherited from the top level, and each mistake refused at its `file:line:col`.

use std::path::Path;

use config::{parse_str, Diagnostics, ServerGroup, ServerProto};

fn groups(text: &str) -> Vec<ServerGroup> {
    match parse_str("t.conf", text, Path::new("/etc/t")) {
        Ok(l) => l.config.server_groups,
        Err(d) => panic!("refused:\n{text}\n{d}"),
    }
}

fn fail(text: &str) -> Diagnostics {
    match parse_str("t.conf", text, Path::new("/etc/t")) {
        Ok(l) => panic!("accepted:\n{text}\n{:#?}", l.config.server_groups),
        Err(d) => d,
    }
}

/// The error at `line:col` says `needle`.
fn assert_error(d: &Diagnostics, (line, col): (u32, u32), needle: &str) {
    assert!(
        d.errors
            .iter()
            .any(|e| e.line == line && e.col == col && e.message.contains(needle)),
        "no error {line}:{col} containing {needle:?} in\n{d}"
    );
}

#[test]
fn http1_unless_asked() {
    let g = groups("srv_group a { server 127.0.0.1:8080; }\n");
    assert_eq!(g[0].proto, ServerProto::Http1);
    let g = groups("srv_group a { server 127.0.0.1:8080; server_proto h2; }\n");
    assert_eq!(g[0].proto, ServerProto::H2);
    let g = groups("srv_group a { server 127.0.0.1:8443; server_tls on; server_proto h2; }\n");
    assert_eq!(g[0].proto, ServerProto::H2);
    assert!(g[0].tls.is_some());
}

/// The top level's setting configures the implicit group and is every group's default; a
/// group may go back to HTTP/1.1 for itself.
#[test]
fn top_level_setting_is_the_groups_default() {
    let g = groups(
        "server 127.0.0.1:8080;\nserver_proto h2;\n\
         srv_group b { server 127.0.0.2:8080; }\n\
         srv_group c { server 127.0.0.3:80; server_proto http1; }\n",
    );
    let proto: Vec<_> = g.iter().map(|g| (g.name.as_str(), g.proto)).collect();
    assert!(proto.contains(&("default", ServerProto::H2)), "{proto:?}");
    assert!(proto.contains(&("b", ServerProto::H2)), "{proto:?}");
    assert!(proto.contains(&("c", ServerProto::Http1)), "{proto:?}");
}

#[test]
fn an_unknown_version_is_refused_at_its_argument() {
    let d = fail("srv_group a {\n server 127.0.0.1;\n server_proto h3;\n}\n");
    assert_error(&d, (3, 15), "`h3` is not an HTTP version");
    let d = fail("srv_group a {\n server 127.0.0.1;\n server_proto;\n}\n");
    assert_error(&d, (3, 2), "server_proto");
}

#[test]
fn twice_in_a_group_is_refused() {
    let d = fail("srv_group a {\n server 127.0.0.1;\n server_proto h2;\n server_proto h2;\n}\n");
    assert_error(&d, (4, 2), "");
}
