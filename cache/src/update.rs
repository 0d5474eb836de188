//! Updating stored responses (RFC 9111 §3.2) from a 304 to a revalidation
//! (§4.3.4) and from a 200 to a HEAD request (§4.3.5).

use std::time::SystemTime;

use crate::cache::Cache;
use crate::conditional::{strong_match, weak_match};
use crate::entry::{Entry, NEVER_STORED};
use crate::headers::{self, HeaderPair};
use crate::message::{ExchangeTimes, Request};
use crate::policy::Policy;
use crate::storability::NotStoredReason;

/// What a HEAD response did to the stored GET response it describes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HeadUpdate {
    /// Validators and length agree: the stored fields were updated and the
    /// entry freshened (§4.3.5 SHOULD update).
    Updated,
    /// They disagree (or the HEAD response carried no validator): the
    /// stored response is now stale and will be revalidated before use.
    MarkedStale,
    /// Nothing applicable was stored, or the response was not a 200.
    NothingStored,
    /// The updated response is no longer storable; it was removed.
    Removed(NotStoredReason),
}

impl Entry {
    /// RFC 9111 §4.3.4: the entry updated by a 304 from the origin, with the
    /// fields of §3.2 (each 304 field replaces the stored ones of its name,
    /// except fields never stored, Content-Length, and fields the 304's own
    /// Connection names). The body is shared.
    ///
    /// A 304 whose ETag does not match the stored one (strong comparison
    /// for a strong tag, weak for a weak one) identifies another response;
    /// §4.3.4 forbids using it to update this one:
    /// `Err(NotStoredReason::ValidatorMismatch)`. A 304 without an ETag
    /// updates the entry: it answers the conditional request the cache made
    /// from this entry's own validators.
    pub fn freshened<Q: HeaderPair, R: HeaderPair>(
        &self,
        policy: &Policy,
        req: &Request<'_, Q>,
        not_modified_headers: &[R],
        times: ExchangeTimes,
    ) -> Result<Entry, NotStoredReason> {
        if let Some(tag) = headers::first(not_modified_headers, "etag") {
            let same = self.etag().is_some_and(|stored| {
                if tag.starts_with(b"W/") {
                    weak_match(tag, stored)
                } else {
                    strong_match(tag, stored)
                }
            });
            if !same {
                return Err(NotStoredReason::ValidatorMismatch);
            }
        }
        let merged = merged_fields(self, not_modified_headers);
        self.rebuilt_with(policy, req, &merged, times)
    }

    /// RFC 9111 §4.3.5: whether a 200 to a HEAD request describes this
    /// stored GET response: every validator it carries (ETag, Last-Modified)
    /// equals the stored one, at least one is present, and its
    /// Content-Length, if any, equals the stored body's length.
    pub fn head_response_matches<R: HeaderPair>(&self, head_headers: &[R]) -> bool {
        let etag = headers::first(head_headers, "etag");
        let last_modified = headers::first(head_headers, "last-modified");
        if etag.is_none() && last_modified.is_none() {
            return false;
        }
        let etag_ok = etag.is_none_or(|tag| self.etag() == Some(tag));
        let lm_ok = last_modified.is_none_or(|lm| self.last_modified() == Some(lm));
        let length_ok = headers::first(head_headers, "content-length")
            .is_none_or(|len| headers::delta_seconds(len) == Some(self.body().len() as u64));
        etag_ok && lm_ok && length_ok
    }

    /// The entry updated with the fields of a matching HEAD response
    /// (§4.3.5 MUST use them as in §3.2).
    pub fn updated_by_head<Q: HeaderPair, R: HeaderPair>(
        &self,
        policy: &Policy,
        req: &Request<'_, Q>,
        head_headers: &[R],
        times: ExchangeTimes,
    ) -> Result<Entry, NotStoredReason> {
        let merged = merged_fields(self, head_headers);
        self.rebuilt_with(policy, req, &merged, times)
    }
}

impl Cache {
    /// RFC 9111 §4.3.5 for a response with `status` and `resp_headers` to a
    /// HEAD request the proxy forwarded: updates (or marks stale) the stored
    /// GET response this request would have been served from.
    pub fn update_from_head<Q: HeaderPair, R: HeaderPair>(
        &self,
        policy: &Policy,
        req: &Request<'_, Q>,
        status: u16,
        resp_headers: &[R],
        times: ExchangeTimes,
    ) -> HeadUpdate {
        if status != 200 || !req.is_head() {
            return HeadUpdate::NothingStored;
        }
        let Some(stored) = self.find(req) else {
            return HeadUpdate::NothingStored;
        };
        if !stored.head_response_matches(resp_headers) {
            stored.mark_stale();
            return HeadUpdate::MarkedStale;
        }
        match stored.updated_by_head(policy, req, resp_headers, times) {
            Ok(entry) => {
                self.replace(req, entry);
                HeadUpdate::Updated
            }
            Err(reason) => {
                self.remove_key(&req.key());
                HeadUpdate::Removed(reason)
            }
        }
    }

    /// The stored variant `req` would be served from, fresh or not.
    pub(crate) fn find<Q: HeaderPair>(
        &self,
        req: &Request<'_, Q>,
    ) -> Option<std::sync::Arc<Entry>> {
        self.find_variant(&req.key(), |e| e.vary_matches(req.headers))
    }
}

/// §3.2: the stored fields, each replaced by the new response's fields of
/// the same name, except the fields never stored (§3.1: connection and
/// proxy-specific fields), fields the new response's Connection names, and
/// Content-Length (the stored body keeps its length).
fn merged_fields<'a, R: HeaderPair>(
    entry: &'a Entry,
    new_headers: &'a [R],
) -> Vec<(&'a [u8], &'a [u8])> {
    let updating = |name: &[u8]| {
        !name.eq_ignore_ascii_case(b"content-length")
            && !NEVER_STORED
                .iter()
                .any(|n| n.as_bytes().eq_ignore_ascii_case(name))
            && !headers::list_elements(new_headers, "connection")
                .any(|n| n.eq_ignore_ascii_case(name))
    };
    let replaced = |name: &[u8]| {
        new_headers
            .iter()
            .any(|h| h.name().eq_ignore_ascii_case(name) && updating(h.name()))
    };
    let mut merged: Vec<(&[u8], &[u8])> =
        entry.fields().filter(|(name, _)| !replaced(name)).collect();
    merged.extend(
        new_headers
            .iter()
            .map(|h| (h.name(), h.value()))
            .filter(|(name, _)| updating(name)),
    );
    merged
}

/// RFC 9111 §4.2.3 and §5.1 for a response forwarded on a miss: when the
/// origin's response carried an `Age` (it came through another cache), the
/// Age to send on is the corrected initial age (which counts the time the
/// response spent in transit) plus the time it spent here; `None` when it
/// carried none (a response the origin generated for this request has no
/// age to report, §5.1).
pub fn forwarded_age<H: HeaderPair>(
    resp_headers: &[H],
    times: ExchangeTimes,
    now: SystemTime,
) -> Option<std::time::Duration> {
    headers::first(resp_headers, "age")?;
    let date = headers::first(resp_headers, "date")
        .and_then(crate::httpdate::parse_http_date)
        .unwrap_or(times.response_time);
    let initial = crate::freshness::corrected_initial_age(
        resp_headers,
        date,
        times.request_time,
        times.response_time,
    );
    let age = crate::freshness::current_age(initial, times.response_time, now);
    // §5.1: never more than 2^31.
    Some(age.min(std::time::Duration::from_secs(headers::DELTA_SECONDS_MAX)))
}
