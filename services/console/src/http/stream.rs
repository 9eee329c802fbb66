//! Opening a page's live stream: within the caps (per user and in all), and checked again
//! every `--sse-recheck-seconds` (the stream itself is [`crate::live::stream`]).

use std::sync::Arc;

use axum::body::Body;
use axum::response::IntoResponse;
use http::header;

use super::error::{PageError, PageResult};
use super::session::Session;
use super::state::AppState;
use crate::access::Permission;
use crate::live::{Filter, Recheck, Refused};

impl AppState {
    /// Opens a live stream of `filter` for `s` (whose access to it was just checked): within
    /// the caps, and checked again every `limits.recheck`.
    pub(super) fn sse(&self, s: &Session, filter: Filter, since: Option<u64>) -> PageResult {
        let slot = self.inner.sse.acquire(&s.user.name).map_err(|r| {
            let (cap, message) = match r {
                Refused::User(n) => (
                    "user",
                    format!(
                        "user {:?} already has {n} live-update streams open, the most one user may (--sse-max-clients-per-user): close other console tabs, or try again later",
                        s.user.name
                    ),
                ),
                Refused::Total(n) => (
                    "total",
                    format!(
                        "the console already has {n} live-update streams open, the most it serves (--sse-max-clients): try again later"
                    ),
                ),
            };
            self.inner
                .metrics
                .sse_refused
                .get_or_create(&crate::RefusedLabels { cap })
                .inc();
            PageError::TooMany(message)
        })?;
        let recheck = self.recheck(s, filter.needs());
        let body = crate::live::stream(
            &self.inner.live,
            filter,
            since,
            self.inner.limits,
            slot,
            Some(recheck),
            self.inner.shutdown.clone(),
        );
        Ok((
            [
                (header::CONTENT_TYPE, "text/event-stream"),
                (header::CACHE_CONTROL, "no-cache"),
                (http::HeaderName::from_static("x-accel-buffering"), "no"),
            ],
            Body::from_stream(body),
        )
            .into_response())
    }

    /// The periodic check of a stream: the token still names the same user (TokenReview) and
    /// the user still has every permission in `needs` (SubjectAccessReview; positive answers
    /// cached for `--review-cache-seconds`). A review that cannot be made counts as a refusal:
    /// the stream ends and the page reloads, which answers with the reason.
    fn recheck(&self, s: &Session, needs: Vec<Permission>) -> Recheck {
        let st = self.clone();
        let token = s.token.clone();
        let user = s.user.clone();
        let needs = Arc::new(needs);
        Box::new(move || {
            let (st, token, user, needs) = (st.clone(), token.clone(), user.clone(), needs.clone());
            Box::pin(async move {
                let access = &st.inner.access;
                match access.authenticate(&token).await {
                    Ok(u) if u == user => {}
                    Ok(_) => return false,
                    Err(e) => {
                        tracing::debug!(user = %user.name, error = %e, "live stream recheck: token");
                        return false;
                    }
                }
                // One by one: a background check, cached answers mostly, and it stops at the
                // first refusal.
                for p in needs.iter() {
                    match access.may(&user, p).await {
                        Ok(true) => {}
                        Ok(false) => return false,
                        Err(e) => {
                            tracing::debug!(user = %user.name, error = %e, "live stream recheck");
                            return false;
                        }
                    }
                }
                true
            })
        })
    }
}
