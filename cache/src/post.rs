//! Reusing a response to POST for later GET and HEAD requests (RFC 9110
//! §9.3.3): only with explicit freshness and a Content-Location that names
//! the POST's own target, and only where `cache_methods` lists POST.

use std::sync::Arc;

use crate::cache::Cache;
use crate::entry::Entry;
use crate::headers::{self, HeaderPair};
use crate::invalidation::same_origin_target;
use crate::key::normalise_authority;
use crate::message::{ExchangeTimes, Request, Response};
use crate::policy::Policy;
use crate::storability::{has_explicit_freshness, NotStoredReason};

impl Cache {
    /// Stores a response to `req` (a POST) as the GET entry of its target
    /// when RFC 9110 §9.3.3 allows it. Call it *after*
    /// [`Cache::invalidate_after_unsafe`] for the same response (§4.4 removes
    /// what was stored for the target; this then stores the new state).
    /// Not part of single flight: no GET waits on a POST.
    pub fn store_post_response<Q: HeaderPair, R: HeaderPair>(
        &self,
        policy: &Policy,
        req: &Request<'_, Q>,
        resp: &Response<'_, R>,
        body: Arc<[u8]>,
        times: ExchangeTimes,
    ) -> Result<Arc<Entry>, NotStoredReason> {
        let outcome = post_entry(policy, req, resp, body, times);
        let as_get = Request {
            method: "GET",
            ..*req
        };
        match outcome {
            Ok(entry) => {
                let entry = Arc::new(entry);
                self.replace_arc(&as_get, Arc::clone(&entry));
                Ok(entry)
            }
            Err(reason) => {
                self.count_not_stored(reason);
                Err(reason)
            }
        }
    }
}

/// The entry a POST response makes for GET, or why it makes none.
fn post_entry<Q: HeaderPair, R: HeaderPair>(
    policy: &Policy,
    req: &Request<'_, Q>,
    resp: &Response<'_, R>,
    body: Arc<[u8]>,
    times: ExchangeTimes,
) -> Result<Entry, NotStoredReason> {
    if !req.method.eq_ignore_ascii_case("POST") || !policy.method_cacheable("POST") {
        return Err(NotStoredReason::MethodNotCacheable);
    }
    if !has_explicit_freshness(policy, resp.headers) || !names_target(req, resp.headers) {
        return Err(NotStoredReason::PostNotReusable);
    }
    let as_get = Request {
        method: "GET",
        ..*req
    };
    Entry::build(policy, &as_get, resp, body, times)
}

/// Whether the response's Content-Location, resolved against the request,
/// is the request's own target on the same origin.
fn names_target<Q: HeaderPair, R: HeaderPair>(req: &Request<'_, Q>, resp_headers: &[R]) -> bool {
    let Some(location) = headers::first(resp_headers, "content-location") else {
        return false;
    };
    same_origin_target(req, location).is_some_and(|(authority, target)| {
        normalise_authority(req.scheme, authority)
            .eq_ignore_ascii_case(normalise_authority(req.scheme, req.authority))
            && target == req.uri
    })
}
