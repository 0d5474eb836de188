//! May this response be stored (RFC 9111 §3)? One pass over the headers
//! that also computes what the entry needs later (freshness, age, flags),
//! so storing never parses Cache-Control twice.

use std::fmt;
use std::time::{Duration, SystemTime};

use crate::freshness::{corrected_initial_age, freshness_lifetime};
use crate::headers::{self, CacheControl, HeaderPair};
use crate::httpdate::parse_http_date;
use crate::message::{ExchangeTimes, Request, Response};
use crate::policy::Policy;
use crate::targeted::targeted_directives;

/// Why a response was not stored. Bounded: it indexes the metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NotStoredReason {
    /// `cache 0`.
    Disabled,
    /// Method not in `cache_methods`, or HEAD (its response has no body;
    /// HEAD is served from the GET entry instead).
    MethodNotCacheable,
    /// 1xx, 304, or a status that is not cacheable by default and came
    /// without explicit freshness or `public`.
    StatusNotCacheable,
    /// 206: ranges are not stored; full responses serve range requests.
    PartialContent,
    RequestNoStore,
    ResponseNoStore,
    Private,
    /// The request carried Authorization and the response did not allow
    /// sharing with public, s-maxage or must-revalidate (§3.5).
    Authorization,
    /// `Vary: *` can never be matched.
    VaryStar,
    /// Set-Cookie would hand one client's cookie to everyone; only stored
    /// when `cache_resp_hdr_del` strips it.
    SetCookie,
    /// Body larger than the maximum object size.
    TooLarge,
    /// Never fresh (no lifetime, or no-cache), cannot be revalidated and
    /// `cache_use_stale` is off: storing would only waste memory.
    NoFreshness,
    /// A 304 carried an ETag other than the stored one: RFC 9111 §4.3.4
    /// forbids updating the stored response with it.
    ValidatorMismatch,
    /// A POST response without explicit freshness, or whose
    /// Content-Location is not its target (RFC 9110 §9.3.3).
    PostNotReusable,
}

impl NotStoredReason {
    pub const ALL: [NotStoredReason; 14] = [
        NotStoredReason::Disabled,
        NotStoredReason::MethodNotCacheable,
        NotStoredReason::StatusNotCacheable,
        NotStoredReason::PartialContent,
        NotStoredReason::RequestNoStore,
        NotStoredReason::ResponseNoStore,
        NotStoredReason::Private,
        NotStoredReason::Authorization,
        NotStoredReason::VaryStar,
        NotStoredReason::SetCookie,
        NotStoredReason::TooLarge,
        NotStoredReason::NoFreshness,
        NotStoredReason::ValidatorMismatch,
        NotStoredReason::PostNotReusable,
    ];

    /// Stable snake_case label, for metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            NotStoredReason::Disabled => "disabled",
            NotStoredReason::MethodNotCacheable => "method",
            NotStoredReason::StatusNotCacheable => "status",
            NotStoredReason::PartialContent => "partial_content",
            NotStoredReason::RequestNoStore => "request_no_store",
            NotStoredReason::ResponseNoStore => "response_no_store",
            NotStoredReason::Private => "private",
            NotStoredReason::Authorization => "authorization",
            NotStoredReason::VaryStar => "vary_star",
            NotStoredReason::SetCookie => "set_cookie",
            NotStoredReason::TooLarge => "too_large",
            NotStoredReason::NoFreshness => "no_freshness",
            NotStoredReason::ValidatorMismatch => "validator_mismatch",
            NotStoredReason::PostNotReusable => "post_not_reusable",
        }
    }

    /// Whether the reason lies in the response itself (so the next
    /// response for the key is likely unstorable too) rather than in the
    /// request that fetched it. Drives hit-for-pass.
    pub fn is_about_response(self) -> bool {
        matches!(
            self,
            NotStoredReason::StatusNotCacheable
                | NotStoredReason::ResponseNoStore
                | NotStoredReason::Private
                | NotStoredReason::VaryStar
                | NotStoredReason::SetCookie
                | NotStoredReason::TooLarge
                | NotStoredReason::NoFreshness
        )
    }

    pub(crate) fn index(self) -> usize {
        self as usize
    }
}

impl fmt::Display for NotStoredReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Storability {
    Storable,
    NotStored(NotStoredReason),
}

/// Status codes heuristically cacheable (RFC 9110 §15.1), minus 206 which
/// this cache does not store.
pub fn cacheable_by_default(status: u16) -> bool {
    matches!(
        status,
        200 | 203 | 204 | 300 | 301 | 308 | 404 | 405 | 410 | 414 | 501
    )
}

/// Status codes whose caching rules this cache implements (RFC 9110 §15:
/// the final codes it defines), for `must-understand` (RFC 9111 §5.2.2.3).
/// 206 is not among them: partial responses are never stored.
fn understood_status(status: u16) -> bool {
    matches!(
        status,
        200..=205 | 300..=305 | 307 | 308 | 400..=417 | 421 | 422 | 426 | 500..=505
    )
}

/// What a storable response tells the cache about itself.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ResponseMeta {
    pub date: SystemTime,
    pub date_present: bool,
    pub lifetime: Duration,
    pub corrected_initial_age: Duration,
    /// no-cache: stored, but revalidated before every use.
    pub no_cache: bool,
    /// must-revalidate, proxy-revalidate or s-maxage: never served stale.
    pub must_revalidate: bool,
    /// RFC 5861 §4 stale-if-error window.
    pub stale_if_error: Duration,
    /// RFC 5861 §3 stale-while-revalidate window.
    pub stale_while_revalidate: Duration,
}

/// Decides storability; on success also returns the response's metadata.
pub(crate) fn analyze<Q: HeaderPair, R: HeaderPair>(
    policy: &Policy,
    req: &Request<'_, Q>,
    resp: &Response<'_, R>,
    times: ExchangeTimes,
) -> Result<ResponseMeta, NotStoredReason> {
    request_and_status_allow(policy, req, resp)?;
    // RFC 9213 §2.2: a valid targeted field replaces Cache-Control and
    // Expires for this cache.
    let targeted = targeted_directives(resp.headers, &policy.targeted_fields);
    let expires_from: &[R] = if targeted.is_some() {
        &[]
    } else {
        resp.headers
    };
    let mut cc = targeted.unwrap_or_else(|| CacheControl::parse(resp.headers));
    policy.ignore.apply(&mut cc);
    directives_allow(policy, req, resp, &cc)?;
    let parsed_date = headers::first(resp.headers, "date").and_then(parse_http_date);
    let date = parsed_date.unwrap_or(times.response_time);
    let (mut lifetime, explicit) = freshness_lifetime(&cc, expires_from, date, policy.default_ttl);
    if !explicit && !cc.public && !cacheable_by_default(resp.status) {
        return Err(NotStoredReason::StatusNotCacheable);
    }
    if !explicit && policy.default_ttl.is_zero() {
        lifetime = heuristic_lifetime(policy, resp, date).unwrap_or(lifetime);
    }
    let has_validators =
        headers::has(resp.headers, "etag") || headers::has(resp.headers, "last-modified");
    let never_fresh = lifetime.is_zero() || cc.no_cache;
    if never_fresh && !has_validators && policy.use_stale.is_empty() {
        return Err(NotStoredReason::NoFreshness);
    }
    Ok(ResponseMeta {
        date,
        date_present: parsed_date.is_some(),
        lifetime,
        corrected_initial_age: corrected_initial_age(
            resp.headers,
            date,
            times.request_time,
            times.response_time,
        ),
        no_cache: cc.no_cache,
        must_revalidate: cc.must_revalidate || cc.proxy_revalidate || cc.s_maxage.is_some(),
        stale_if_error: Duration::from_secs(cc.stale_if_error.unwrap_or(0)),
        stale_while_revalidate: Duration::from_secs(cc.stale_while_revalidate.unwrap_or(0)),
    })
}

/// The method, the request's `no-store` and the status: whether such an exchange may be
/// stored at all (RFC 9111 §3), before the response's directives are read.
fn request_and_status_allow<Q: HeaderPair, R: HeaderPair>(
    policy: &Policy,
    req: &Request<'_, Q>,
    resp: &Response<'_, R>,
) -> Result<(), NotStoredReason> {
    if !policy.enabled {
        return Err(NotStoredReason::Disabled);
    }
    if req.is_head()
        || !policy.method_cacheable(req.method)
        || crate::invalidation::is_unsafe_method(req.method)
    {
        return Err(NotStoredReason::MethodNotCacheable);
    }
    if CacheControl::parse(req.headers).no_store {
        return Err(NotStoredReason::RequestNoStore);
    }
    if resp.status == 206 {
        return Err(NotStoredReason::PartialContent);
    }
    if resp.status < 200 || resp.status == 304 || resp.status > 599 {
        return Err(NotStoredReason::StatusNotCacheable);
    }
    Ok(())
}

/// The response's directives and fields (`cc`, targeted or Cache-Control) against storing.
fn directives_allow<Q: HeaderPair, R: HeaderPair>(
    policy: &Policy,
    req: &Request<'_, Q>,
    resp: &Response<'_, R>,
    cc: &CacheControl,
) -> Result<(), NotStoredReason> {
    // §5.2.2.3 must-understand: stored only when the cache implements the
    // status code's caching rules (§3 MUST NOT otherwise), and then no-store
    // is ignored (SHOULD).
    if cc.must_understand && !understood_status(resp.status) {
        return Err(NotStoredReason::StatusNotCacheable);
    }
    if cc.no_store && !cc.must_understand {
        return Err(NotStoredReason::ResponseNoStore);
    }
    if cc.private {
        return Err(NotStoredReason::Private);
    }
    if headers::has(req.headers, "authorization")
        && !(cc.public || cc.s_maxage.is_some() || cc.must_revalidate)
    {
        return Err(NotStoredReason::Authorization);
    }
    if headers::list_elements(resp.headers, "vary").any(|v| v == b"*") {
        return Err(NotStoredReason::VaryStar);
    }
    if headers::has(resp.headers, "set-cookie") && !policy.deletes_header(b"set-cookie") {
        return Err(NotStoredReason::SetCookie);
    }
    if resp.body_len > policy.max_object_size {
        return Err(NotStoredReason::TooLarge);
    }
    Ok(())
}

/// The lifetime of a response without explicit freshness when `cache_ttl` is unset:
/// the heuristic from Last-Modified, or `unset_ttl` without one; `None` keeps the one
/// computed (no heuristic configured).
fn heuristic_lifetime<R: HeaderPair>(
    policy: &Policy,
    resp: &Response<'_, R>,
    date: SystemTime,
) -> Option<Duration> {
    // §4.2.2: only without explicit freshness, for heuristically cacheable
    // statuses or `public` (checked above); `cache_ttl` keeps precedence.
    // Without Last-Modified there is nothing to base a heuristic on: `unset_ttl` (Tempesta's
    // `cache_ttl` default, where the proxy runs).
    let last_modified = headers::first(resp.headers, "last-modified").and_then(parse_http_date);
    match (policy.heuristic, last_modified) {
        (Some(h), Some(lm)) => Some(h.lifetime(date, lm)),
        (_, None) => Some(policy.unset_ttl),
        (None, Some(_)) => None,
    }
}

/// Public form of the storability decision (RFC 9111 §3 plus policy).
pub fn check_storable<Q: HeaderPair, R: HeaderPair>(
    policy: &Policy,
    req: &Request<'_, Q>,
    resp: &Response<'_, R>,
    times: ExchangeTimes,
) -> Storability {
    match analyze(policy, req, resp, times) {
        Ok(_) => Storability::Storable,
        Err(reason) => Storability::NotStored(reason),
    }
}

/// Whether the response carries explicit freshness for this cache
/// (s-maxage, max-age or Expires; RFC 9111 §4.2.1), reading a valid
/// targeted field instead of Cache-Control and Expires (RFC 9213).
pub(crate) fn has_explicit_freshness<R: HeaderPair>(policy: &Policy, resp_headers: &[R]) -> bool {
    match targeted_directives(resp_headers, &policy.targeted_fields) {
        Some(cc) => cc.s_maxage.is_some() || cc.max_age.is_some(),
        None => {
            let cc = CacheControl::parse(resp_headers);
            cc.s_maxage.is_some() || cc.max_age.is_some() || headers::has(resp_headers, "expires")
        }
    }
}
