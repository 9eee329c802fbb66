//! Why a request was not answered with its page, and how that is answered: the error page
//! with its status code (a redirect to the login page, a 429 with `Retry-After`, a 401 that
//! clears the session cookie); bad query input names its parameter ([`BadQuery`]).

use axum::response::{IntoResponse, Response};
use http::{HeaderValue, StatusCode, header};

use crate::access::AccessError;
use crate::pages::{ErrorPage, Layout};

/// The session cookie (named here: a refused token clears it).
pub const COOKIE: &str = "tink_console";

/// Why a request was not answered with its page.
#[derive(Debug)]
pub enum PageError {
    /// No session: log in first (GET pages redirect to the login page).
    Login(String),
    /// The token was refused.
    Unauthenticated(String),
    /// The user may not.
    Forbidden(String),
    /// No such object.
    NotFound(String),
    /// Malformed input.
    BadRequest(String),
    /// Too many live streams (of this user, or in all).
    TooMany(String),
    /// The caches have not synced, or the Kubernetes API did not answer.
    Unavailable(String),
}

impl PageError {
    /// The status code it is answered with.
    pub fn status(&self) -> StatusCode {
        match self {
            PageError::Login(_) => StatusCode::SEE_OTHER,
            PageError::Unauthenticated(_) => StatusCode::UNAUTHORIZED,
            PageError::Forbidden(_) => StatusCode::FORBIDDEN,
            PageError::NotFound(_) => StatusCode::NOT_FOUND,
            PageError::BadRequest(_) => StatusCode::BAD_REQUEST,
            PageError::TooMany(_) => StatusCode::TOO_MANY_REQUESTS,
            PageError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
        }
    }
}

impl From<AccessError> for PageError {
    fn from(e: AccessError) -> Self {
        match e {
            AccessError::Unauthenticated(_) => {
                PageError::Unauthenticated(format!("{e}. Log in again with a valid token."))
            }
            AccessError::Forbidden { .. } => PageError::Forbidden(e.to_string()),
            AccessError::Unavailable { .. } => PageError::Unavailable(e.to_string()),
        }
    }
}

impl IntoResponse for PageError {
    fn into_response(self) -> Response {
        let status = self.status();
        let message = match self {
            PageError::Login(next) => {
                let to = format!("/login?next={}", encode(&next));
                return redirect(&to);
            }
            PageError::Unauthenticated(m)
            | PageError::Forbidden(m)
            | PageError::NotFound(m)
            | PageError::BadRequest(m)
            | PageError::TooMany(m)
            | PageError::Unavailable(m) => m,
        };
        let page = ErrorPage {
            layout: Layout {
                title: status.as_u16().to_string(),
                ..Default::default()
            },
            status: status.as_u16(),
            message,
        };
        let mut response = html(status, &page);
        if status == StatusCode::TOO_MANY_REQUESTS {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("10"));
        }
        if status == StatusCode::UNAUTHORIZED {
            // The stored token is of no use any more.
            if let Ok(v) = HeaderValue::from_str(&format!(
                "{COOKIE}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0"
            )) {
                response.headers_mut().append(header::SET_COOKIE, v);
            }
        }
        response
    }
}

pub type PageResult = Result<Response, PageError>;

pub(super) fn encode(s: &str) -> String {
    form_urlencoded::byte_serialize(s.as_bytes()).collect()
}

pub(super) fn redirect(to: &str) -> Response {
    let mut r = StatusCode::SEE_OTHER.into_response();
    if let Ok(v) = HeaderValue::from_str(to) {
        r.headers_mut().insert(header::LOCATION, v);
    }
    r
}

pub(super) fn html(status: StatusCode, page: &impl askama::Template) -> Response {
    match page.render() {
        Ok(body) => (
            status,
            [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
            body,
        )
            .into_response(),
        Err(e) => {
            tracing::error!(error = %e, "cannot render a page");
            (StatusCode::INTERNAL_SERVER_ERROR, "cannot render the page").into_response()
        }
    }
}

/// Bad input in a query parameter: the page answers 400 naming the parameter.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("query parameter `{param}`: {value:?} is not one of {allowed}")]
pub struct BadQuery {
    /// The parameter.
    pub param: &'static str,
    /// What was sent.
    pub value: String,
    /// What it may be, comma separated.
    pub allowed: String,
}

impl From<BadQuery> for PageError {
    fn from(e: BadQuery) -> Self {
        PageError::BadRequest(e.to_string())
    }
}

pub(super) fn kube_error(what: &str, e: kube::Error) -> PageError {
    match e {
        kube::Error::Api(s) if s.code == 404 => {
            PageError::NotFound(format!("{what}: {}", s.message))
        }
        kube::Error::Api(s) if s.code == 403 => {
            PageError::Forbidden(format!("{what}: {}", s.message))
        }
        kube::Error::Api(s) if s.code == 401 => {
            PageError::Unauthenticated(format!("{what}: {}", s.message))
        }
        kube::Error::Api(s) if s.code == 400 || s.code == 409 || s.code == 422 => {
            PageError::BadRequest(format!("{what}: {}", s.message))
        }
        e => PageError::Unavailable(format!("{what}: {e}")),
    }
}
