//! Errors: the library's own [`Error`] and the Kubernetes `Status` objects the API answers with.

use axum::response::{IntoResponse, Response};
use http::StatusCode;
use serde_json::{Value, json};

/// Errors from starting, running or stopping a kube-lite server.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The listen address could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address asked for.
        addr: std::net::SocketAddr,
        /// The cause.
        source: std::io::Error,
    },
    /// The data directory could not be created or opened.
    #[error("cannot open the data directory {path}: {message}")]
    DataDir {
        /// The directory.
        path: std::path::PathBuf,
        /// What went wrong.
        message: String,
    },
    /// The embedded store failed.
    #[error("embedded store: {0}")]
    Store(String),
    /// A stored object could not be decoded on load.
    #[error("stored object {key} is not valid JSON: {source}")]
    Corrupt {
        /// The storage key.
        key: String,
        /// The cause.
        source: serde_json::Error,
    },
    /// The kubeconfig could not be written.
    #[error("cannot write kubeconfig {path}: {source}")]
    Kubeconfig {
        /// The file.
        path: std::path::PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// Building a `kube::Client` failed.
    #[error("cannot build a kube client: {0}")]
    Client(String),
    /// A `--service ns/name=URL` value is malformed.
    #[error("invalid service mapping {0:?}: expected namespace/name=URL")]
    ServiceMapping(String),
    /// The `--token-file` cannot be read or is malformed.
    #[error(transparent)]
    TokenFile(#[from] crate::auth::TokenFileError),
}

/// One cause of an `Invalid` (422) error, as in `Status.details.causes`.
#[derive(Debug, Clone, PartialEq)]
pub struct Cause {
    /// `FieldValueInvalid`, `FieldValueRequired`, ...
    pub reason: &'static str,
    /// The message after the field path, e.g. `Required value`.
    pub message: String,
    /// The field path, e.g. `spec.replicas`.
    pub field: String,
}

impl Cause {
    /// A cause.
    pub fn new(reason: &'static str, field: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            reason,
            message: message.into(),
            field: field.into(),
        }
    }

    /// `field: message`, the way the API server joins them in the top-level message.
    pub fn render(&self) -> String {
        if self.field.is_empty() {
            self.message.clone()
        } else {
            format!("{}: {}", self.field, self.message)
        }
    }
}

/// An error answered to an API client as a Kubernetes `Status` object.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    /// HTTP status code.
    pub code: u16,
    /// The `reason` field: `NotFound`, `Conflict`, `Invalid`, ...
    pub reason: &'static str,
    /// Human readable message.
    pub message: String,
    /// `details`, if any.
    pub details: Option<Value>,
}

/// Short alias used by handlers.
pub type ApiResult<T> = Result<T, ApiError>;

/// `group/resource` as the API server prints it in messages: `configmaps`, `hardware.tinkerbell.org`.
pub fn qualified(group: &str, resource: &str) -> String {
    if group.is_empty() {
        resource.to_string()
    } else {
        format!("{resource}.{group}")
    }
}

fn details(group: &str, resource: &str, name: &str) -> Value {
    let mut d = json!({ "name": name, "kind": resource });
    if !group.is_empty() {
        d["group"] = json!(group);
    }
    d
}

impl ApiError {
    /// A bare error.
    pub fn new(code: u16, reason: &'static str, message: impl Into<String>) -> Self {
        Self {
            code,
            reason,
            message: message.into(),
            details: None,
        }
    }

    /// 400 BadRequest.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message)
    }

    /// 404 for an object.
    pub fn not_found(group: &str, resource: &str, name: &str) -> Self {
        Self {
            code: 404,
            reason: "NotFound",
            message: format!("{} \"{name}\" not found", qualified(group, resource)),
            details: Some(details(group, resource, name)),
        }
    }

    /// 404 for a path that names no resource.
    pub fn no_route() -> Self {
        Self::new(
            404,
            "NotFound",
            "the server could not find the requested resource",
        )
    }

    /// 409 AlreadyExists.
    pub fn already_exists(group: &str, resource: &str, name: &str) -> Self {
        Self {
            code: 409,
            reason: "AlreadyExists",
            message: format!("{} \"{name}\" already exists", qualified(group, resource)),
            details: Some(details(group, resource, name)),
        }
    }

    /// 409 Conflict on a stale resourceVersion or a failed precondition.
    pub fn conflict(group: &str, resource: &str, name: &str, why: &str) -> Self {
        Self {
            code: 409,
            reason: "Conflict",
            message: format!(
                "Operation cannot be fulfilled on {} \"{name}\": {why}",
                qualified(group, resource)
            ),
            details: Some(details(group, resource, name)),
        }
    }

    /// 409 Conflict for a stale resourceVersion.
    pub fn stale(group: &str, resource: &str, name: &str) -> Self {
        Self::conflict(
            group,
            resource,
            name,
            "the object has been modified; please apply your changes to the latest version and try again",
        )
    }

    /// 422 Invalid with field causes.
    pub fn invalid(group: &str, kind: &str, name: &str, causes: Vec<Cause>) -> Self {
        let rendered: Vec<String> = causes.iter().map(Cause::render).collect();
        let list = if rendered.len() == 1 {
            rendered.join("")
        } else {
            format!("[{}]", rendered.join(", "))
        };
        let message = format!("{} \"{name}\" is invalid: {list}", qualified(group, kind));
        let mut d = json!({
            "name": name,
            "kind": kind,
            "causes": causes.iter().map(|c| json!({"reason": c.reason, "message": c.message, "field": c.field})).collect::<Vec<_>>(),
        });
        if !group.is_empty() {
            d["group"] = json!(group);
        }
        Self {
            code: 422,
            reason: "Invalid",
            message,
            details: Some(d),
        }
    }

    /// 403 Forbidden.
    pub fn forbidden(group: &str, resource: &str, name: &str, why: &str) -> Self {
        Self {
            code: 403,
            reason: "Forbidden",
            message: format!(
                "{} \"{name}\" is forbidden: {why}",
                qualified(group, resource)
            ),
            details: Some(details(group, resource, name)),
        }
    }

    /// 405 MethodNotAllowed.
    pub fn method_not_allowed(message: impl Into<String>) -> Self {
        Self::new(405, "MethodNotAllowed", message)
    }

    /// 415 UnsupportedMediaType.
    pub fn unsupported_media_type(content_type: &str) -> Self {
        Self::new(
            415,
            "UnsupportedMediaType",
            format!(
                "the body of the request was in an unknown format - accepted media types include: application/json, application/yaml, application/merge-patch+json, application/json-patch+json, application/strategic-merge-patch+json, application/apply-patch+yaml (got {content_type:?})"
            ),
        )
    }

    /// 406 NotAcceptable.
    pub fn not_acceptable() -> Self {
        Self::new(
            406,
            "NotAcceptable",
            "only the following media types are accepted: application/json, application/yaml",
        )
    }

    /// 410 Gone (resourceVersion too old).
    pub fn gone(message: impl Into<String>) -> Self {
        Self::new(410, "Expired", message)
    }

    /// 500 InternalError.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(
            500,
            "InternalError",
            format!("Internal error occurred: {}", message.into()),
        )
    }

    /// 413 RequestEntityTooLarge.
    pub fn too_large() -> Self {
        Self::new(413, "RequestEntityTooLarge", "the request is too large")
    }

    /// The `Status` object.
    pub fn to_status(&self) -> Value {
        let mut s = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        if let Some(d) = &self.details {
            s["details"] = d.clone();
        }
        s
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({}): {}", self.code, self.reason, self.message)
    }
}

impl std::error::Error for ApiError {}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let code = StatusCode::from_u16(self.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let body = serde_json::to_vec(&self.to_status()).unwrap_or_default();
        (
            code,
            [(http::header::CONTENT_TYPE, "application/json")],
            body,
        )
            .into_response()
    }
}
