//! The HTTP table of the model: `http_chain` blocks and their rules.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::model::{Method, UrlTemplate};
use crate::model_serde::secs;

/// The HTTP table: request routing rules.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HttpTables {
    /// Named chains, in definition order (a chain may only jump to chains
    /// defined before it, so this order is also a valid evaluation order).
    pub chains: Vec<HttpChain>,
    /// The main (unnamed) chain, where evaluation starts. When the file has
    /// none, Tempesta creates one with the single rule `-> default;` if a
    /// `default` vhost exists; validation does the same.
    pub main: HttpChain,
}

impl HttpTables {
    pub fn chain(&self, name: &str) -> Option<&HttpChain> {
        self.chains.iter().find(|c| c.name.as_deref() == Some(name))
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HttpChain {
    /// `None` for the main chain.
    pub name: Option<String>,
    pub rules: Vec<Rule>,
}

/// `[COND] -> ACTION;` A rule without condition matches everything and is
/// the last rule of its chain.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rule {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub condition: Option<Condition>,
    pub action: Action,
}

/// `FIELD [NAME] (==|!=|~) ARG`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Condition {
    pub field: Field,
    /// True for `!=`.
    #[serde(default)]
    pub negate: bool,
    pub pattern: Pattern,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Field {
    /// Path and query.
    Uri,
    /// Host from the request URI, else the Host header.
    Host,
    /// `hdr "Name"`; the name as written (match it case-insensitively).
    Header(String),
    /// `cookie "NAME"`: the value of that cookie.
    Cookie(String),
    Method,
    /// Netfilter mark of the request's packets.
    Mark,
    /// `scheme == http|https` (extension: Tempesta has no such field): whether the client's
    /// connection is TLS, for `scheme == "http" -> 301 = https://$host$request_uri;`.
    Scheme,
}

/// The right-hand side of a condition. Wildcards: `"*"` any, `"abc*"`
/// prefix, `"*abc"` suffix (the `*` removed from the stored string).
/// String comparisons are case-insensitive for `host`, header names and
/// methods, case-sensitive for `uri` (as in Tempesta).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Pattern {
    Any,
    Exact(String),
    Prefix(String),
    Suffix(String),
    /// `~ "REGEX"`, already checked to compile with the `regex` crate.
    Regex(String),
    /// `method == get`.
    Method(Method),
    /// `mark == N`.
    Mark(u32),
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    /// `-> VHOST`: serve with this vhost (name checked to exist).
    Vhost(String),
    /// `-> CHAIN`: continue in this chain (defined earlier).
    Chain(String),
    /// `-> block`.
    Block,
    /// `-> mark = N`: set the mark and continue with the next rule.
    Mark(u32),
    /// `-> 301|302|303|307|308 = URL`.
    Redirect { status: u16, url: UrlTemplate },
    /// `-> cache_ttl = N`: override the cache lifetime, continue.
    #[serde(with = "secs")]
    CacheTtl(Duration),
    /// `-> cache_disable [= 0|1]`: turn caching off (true) or back on, continue.
    CacheDisable(bool),
}
