//! `POST /convert`: ConversionReview v1 in and out, through crates/api's conversion
//! (`tink_api::conversion::review`): every object in order, uid kept; an object that cannot be
//! converted fails the review with a message naming its index and field.
//!
//! Parsing, conversion and encoding run on the blocking pool (a review of a list can hold
//! thousands of objects), at most `max_concurrent_conversions` at once; a panic in the
//! conversion becomes a `Failure` result, never a dead connection. A body that is not a ConversionReview gets HTTP 400 with a `Status`, or a
//! `Failure` result when its `request.uid` can be read.

use std::sync::Arc;
use std::time::Instant;

use axum::http::StatusCode;
use kube::core::conversion::ConversionReview;
use serde_json::{Value, json};
use tokio::sync::Semaphore;

use crate::metrics::Metrics;

const API_VERSION: &str = "apiextensions.k8s.io/v1";

fn failure(uid: &str, message: &str) -> Value {
    json!({"apiVersion": API_VERSION, "kind": "ConversionReview", "response": {
        "uid": uid, "convertedObjects": [],
        "result": {"status": "Failure", "message": message, "reason": "BadRequest", "code": 400},
    }})
}

fn malformed(raw: &Value, message: String) -> (StatusCode, Value) {
    let message = format!("malformed ConversionReview: {message}");
    tracing::warn!(%message, "refusing a malformed ConversionReview");
    match raw.pointer("/request/uid").and_then(Value::as_str) {
        Some(uid) => (StatusCode::OK, failure(uid, &message)),
        None => (
            StatusCode::BAD_REQUEST,
            json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "code": 400, "reason": "BadRequest", "message": message}),
        ),
    }
}

/// Answers one `POST /convert` body: waits for one of `limit`'s slots, then parses, converts
/// and encodes on the blocking pool (a review of a list can be megabytes of JSON).
pub async fn handle(
    body: bytes::Bytes,
    limit: Arc<Semaphore>,
    metrics: Metrics,
) -> (StatusCode, Value) {
    let started = Instant::now();
    let (result, objects, reply) = match limit.acquire_owned().await {
        Ok(permit) => {
            let span = tracing::Span::current();
            let done = tokio::task::spawn_blocking(move || {
                let _permit = permit;
                span.in_scope(|| answer(&body))
            })
            .await;
            match done {
                Ok(done) => done,
                Err(e) => {
                    tracing::error!(error = %e, "conversion panicked");
                    (
                        "failure",
                        0,
                        (
                            StatusCode::INTERNAL_SERVER_ERROR,
                            status(
                                500,
                                "InternalError",
                                &format!("conversion failed unexpectedly: {e}"),
                            ),
                        ),
                    )
                }
            }
        }
        Err(_) => (
            "failure",
            0,
            (
                StatusCode::SERVICE_UNAVAILABLE,
                status(503, "ServiceUnavailable", "the webhook is shutting down"),
            ),
        ),
    };
    metrics.conversion(result, objects, started.elapsed().as_secs_f64());
    reply
}

fn status(code: u16, reason: &str, message: &str) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "code": code, "reason": reason, "message": message})
}

/// Parses, converts and encodes one review (blocking).
fn answer(body: &[u8]) -> (&'static str, usize, (StatusCode, Value)) {
    let raw: Value = match serde_json::from_slice(body) {
        Ok(v) => v,
        Err(e) => {
            return (
                "malformed",
                0,
                malformed(&Value::Null, format!("the body is not JSON: {e}")),
            );
        }
    };
    if raw.get("apiVersion").and_then(Value::as_str) != Some(API_VERSION)
        || raw.get("kind").and_then(Value::as_str) != Some("ConversionReview")
    {
        return (
            "malformed",
            0,
            malformed(
                &raw,
                format!("expected apiVersion {API_VERSION} and kind ConversionReview"),
            ),
        );
    }
    let Some(request) = raw.get("request") else {
        return ("malformed", 0, malformed(&raw, "no request".into()));
    };
    let uid = match request.get("uid").and_then(Value::as_str) {
        Some(u) => u.to_string(),
        None => {
            return (
                "malformed",
                0,
                malformed(&raw, "request.uid is required".into()),
            );
        }
    };
    if !request
        .get("desiredAPIVersion")
        .is_some_and(Value::is_string)
    {
        return (
            "malformed",
            0,
            malformed(&raw, "request.desiredAPIVersion is required".into()),
        );
    }
    let Some(objects) = request.get("objects").and_then(Value::as_array) else {
        return (
            "malformed",
            0,
            malformed(&raw, "request.objects must be a list".into()),
        );
    };
    let count = objects.len();
    let review: ConversionReview = match serde_json::from_value(raw.clone()) {
        Ok(r) => r,
        Err(e) => return ("malformed", count, malformed(&raw, e.to_string())),
    };
    drop(raw);
    // A panic in the conversion becomes a `Failure` for this review, never a dead connection.
    let converted = std::panic::catch_unwind(move || {
        let out = tink_api::conversion::review(review);
        serde_json::to_value(out)
    });
    match converted {
        Ok(Ok(out)) => {
            let ok = out
                .pointer("/response/result/status")
                .and_then(Value::as_str)
                == Some("Success");
            if !ok {
                let message = out
                    .pointer("/response/result/message")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                tracing::warn!(%uid, %message, "conversion failed");
            }
            (
                if ok { "success" } else { "failure" },
                count,
                (StatusCode::OK, out),
            )
        }
        Ok(Err(e)) => (
            "failure",
            count,
            (
                StatusCode::OK,
                failure(&uid, &format!("cannot encode the converted objects: {e}")),
            ),
        ),
        Err(panic) => {
            let e = panic
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic".into());
            tracing::error!(%uid, error = %e, "conversion panicked");
            (
                "failure",
                count,
                (
                    StatusCode::OK,
                    failure(&uid, &format!("conversion failed unexpectedly: {e}")),
                ),
            )
        }
    }
}
