//! The session: who a request is (the `Authorization: Bearer` header, else the session
//! cookie, checked with a `TokenReview`), as an extractor every page and action takes; the
//! login and logout forms that set and clear the cookie; and the check every POST makes (this
//! site's `Origin`, the session's anti-CSRF value).

use axum::body::Bytes;
use axum::extract::{FromRequestParts, MatchedPath, Path, Query, State};
use axum::response::Response;
use http::request::Parts;
use http::{HeaderMap, HeaderValue, StatusCode, header};
use serde::Deserialize;

use super::error::{COOKIE, PageError, encode, html, redirect};
use super::query::nonempty;
use super::state::AppState;
use crate::access::{AccessError, User, csrf_token};
use crate::pages::{Layout, LoginPage};

/// How long a login lasts in the browser (the token's own expiry still applies).
const COOKIE_MAX_AGE: u32 = 8 * 3600;

/// An authenticated request.
pub struct Session {
    /// Who.
    pub user: User,
    /// Their bearer token.
    pub token: String,
    /// Whether it came from the cookie (then POSTs need the anti-CSRF value).
    pub from_cookie: bool,
}

/// The bearer token of a request: the `Authorization` header, else the session cookie.
pub fn request_token(headers: &HeaderMap) -> Result<Option<(String, bool)>, PageError> {
    if let Some(v) = headers.get(header::AUTHORIZATION) {
        let v = v
            .to_str()
            .map_err(|_| PageError::BadRequest("the Authorization header is not ASCII".into()))?;
        let token = v
            .strip_prefix("Bearer ")
            .or_else(|| v.strip_prefix("bearer "))
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .ok_or_else(|| {
                PageError::Unauthenticated(
                    "the Authorization header must be `Bearer <token>`".into(),
                )
            })?;
        return Ok(Some((token.to_string(), false)));
    }
    for v in headers.get_all(header::COOKIE) {
        let Ok(v) = v.to_str() else { continue };
        for part in v.split(';') {
            if let Some(value) = part
                .trim()
                .strip_prefix(COOKIE)
                .and_then(|r| r.strip_prefix('='))
            {
                let token: String = form_urlencoded::parse(format!("t={value}").as_bytes())
                    .next()
                    .map(|(_, t)| t.into_owned())
                    .unwrap_or_default();
                if !token.is_empty() {
                    return Ok(Some((token, true)));
                }
            }
        }
    }
    Ok(None)
}

impl Session {
    /// The session of `headers`: its token, and the user the API server says it names. No
    /// token: [`PageError::Login`], coming back to `here` after logging in.
    pub async fn from_headers(
        st: &AppState,
        headers: &HeaderMap,
        here: &str,
    ) -> Result<Session, PageError> {
        let Some((token, from_cookie)) = request_token(headers)? else {
            return Err(PageError::Login(here.to_string()));
        };
        let user = st.inner.access.authenticate(&token).await?;
        Ok(Session {
            user,
            token,
            from_cookie,
        })
    }
}

impl AppState {
    /// The frame of a page shown to `s`: the user's name and the session's anti-CSRF value.
    pub(super) fn layout(
        &self,
        s: &Session,
        title: impl Into<String>,
        nav: &'static str,
        live: String,
    ) -> Layout {
        Layout {
            title: title.into(),
            user: s.user.name.clone(),
            csrf: csrf_token(&s.token),
            live,
            nav,
            q: String::new(),
        }
    }
}

/// Every page and action takes its session as `Result<Session, PageError>`, so a refusal is
/// answered (and counted) by the handler like any other error of the page.
impl FromRequestParts<AppState> for Session {
    type Rejection = PageError;

    async fn from_request_parts(parts: &mut Parts, st: &AppState) -> Result<Self, PageError> {
        let route = parts
            .extensions
            .get::<MatchedPath>()
            .map(|m| m.as_str().to_string())
            .unwrap_or_default();
        let params = Path::<Vec<(String, String)>>::from_request_parts(parts, st)
            .await
            .map(|Path(p)| p)
            .unwrap_or_default();
        let here = return_to(&route, &params, parts.uri.query());
        Session::from_headers(st, &parts.headers, &here).await
    }
}

/// Where the login page sends a user back to, for a request to `route` (the router's
/// pattern) with path `params` and `query`: the page itself; for a live stream or an action,
/// the page it belongs to; for a search, with its text.
pub fn return_to(route: &str, params: &[(String, String)], query: Option<&str>) -> String {
    let param = |key: &str| {
        params
            .iter()
            .find(|(k, _)| k == key)
            .map_or("", |(_, v)| v.as_str())
    };
    match route {
        "/workflows" | "/live/workflows" => "/workflows".to_string(),
        "/workflows/{ns}/{name}"
        | "/workflows/{ns}/{name}/cancel"
        | "/workflows/{ns}/{name}/rerun"
        | "/live/workflows/{ns}/{name}" => format!("/workflows/{}/{}", param("ns"), param("name")),
        "/workflows/{ns}/{name}/logs" => {
            format!("/workflows/{}/{}/logs", param("ns"), param("name"))
        }
        "/machines/{ns}/{name}" | "/machines/{ns}/{name}/power" | "/live/machines/{ns}/{name}" => {
            format!("/machines/{}/{}", param("ns"), param("name"))
        }
        "/templates" => "/templates".to_string(),
        "/templates/{ns}/{name}" => format!("/templates/{}/{}", param("ns"), param("name")),
        "/search" => {
            let q = form_urlencoded::parse(query.unwrap_or("").as_bytes())
                .find(|(k, _)| k == "q")
                .map(|(_, v)| v.into_owned());
            let text = nonempty(&q).unwrap_or("").to_ascii_lowercase();
            format!("/search?q={}", encode(&text))
        }
        _ => "/".to_string(),
    }
}

/// The fields of a posted form.
pub(super) fn form(body: &Bytes) -> Vec<(String, String)> {
    form_urlencoded::parse(body).into_owned().collect()
}

pub(super) fn field<'a>(fields: &'a [(String, String)], key: &str) -> Option<&'a str> {
    fields
        .iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
}

fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// A browser's POST must come from a console page: the `Origin` (when sent) is this host, and
/// a cookie session posts its anti-CSRF value.
pub(super) fn check_post(
    headers: &HeaderMap,
    s: Option<&Session>,
    fields: &[(String, String)],
) -> Result<(), PageError> {
    if let (Some(origin), Some(host)) = (headers.get(header::ORIGIN), headers.get(header::HOST)) {
        let (origin, host) = (origin.to_str().unwrap_or(""), host.to_str().unwrap_or(""));
        if origin != format!("http://{host}") && origin != format!("https://{host}") {
            return Err(PageError::Forbidden(format!(
                "cross-site request refused: Origin {origin:?} is not this console ({host})"
            )));
        }
    }
    if let Some(s) = s.filter(|s| s.from_cookie) {
        let sent = field(fields, "csrf").unwrap_or("");
        if !same(sent.as_bytes(), csrf_token(&s.token).as_bytes()) {
            return Err(PageError::Forbidden(
                "the form's anti-CSRF value is missing or wrong: reload the page and try again"
                    .into(),
            ));
        }
    }
    Ok(())
}

/// Query of the login page.
#[derive(Debug, Default, Deserialize)]
pub struct LoginQuery {
    /// Where to go afterwards.
    pub next: Option<String>,
}

/// Only a path of this console (no `//host`, no scheme): no open redirect.
fn safe_next(next: Option<&str>) -> String {
    match next {
        Some(n)
            if n.starts_with('/')
                && !n.starts_with("//")
                && !n.contains('\\')
                && !n.contains("://") =>
        {
            n.to_string()
        }
        _ => "/".to_string(),
    }
}

pub(super) async fn login_page(
    State(st): State<AppState>,
    Query(q): Query<LoginQuery>,
) -> Response {
    let page = LoginPage {
        layout: Layout {
            title: "Log in".into(),
            ..Default::default()
        },
        next: safe_next(q.next.as_deref()),
        error: String::new(),
    };
    st.done("login", Ok(html(StatusCode::OK, &page)))
}

pub(super) async fn login(State(st): State<AppState>, headers: HeaderMap, body: Bytes) -> Response {
    let fields = form(&body);
    let next = safe_next(field(&fields, "next"));
    let r = async {
        check_post(&headers, None, &fields)?;
        let token = field(&fields, "token").map(str::trim).unwrap_or("");
        let failed = |error: String, status: StatusCode| {
            let page = LoginPage {
                layout: Layout {
                    title: "Log in".into(),
                    ..Default::default()
                },
                next: next.clone(),
                error,
            };
            html(status, &page)
        };
        if token.is_empty() || token.len() > 16 * 1024 || token.chars().any(|c| c.is_control()) {
            return Ok(failed(
                "Paste a Kubernetes bearer token.".into(),
                StatusCode::BAD_REQUEST,
            ));
        }
        match st.inner.access.authenticate(token).await {
            Ok(user) => {
                tracing::info!(user = %user.name, "logged in");
                let mut r = redirect(&next);
                let cookie = format!(
                    "{COOKIE}={}; Path=/; HttpOnly; SameSite=Strict; Max-Age={COOKIE_MAX_AGE}{}",
                    encode(token),
                    if st.inner.secure_cookies {
                        "; Secure"
                    } else {
                        ""
                    }
                );
                let v = HeaderValue::from_str(&cookie).map_err(|_| {
                    PageError::BadRequest("the token cannot be stored in a cookie".into())
                })?;
                r.headers_mut().insert(header::SET_COOKIE, v);
                Ok(r)
            }
            Err(AccessError::Unauthenticated(why)) => Ok(failed(
                format!("The Kubernetes API refused this token: {why}"),
                StatusCode::UNAUTHORIZED,
            )),
            Err(e) => Err(e.into()),
        }
    }
    .await;
    st.done("login", r)
}

pub(super) async fn logout(
    State(st): State<AppState>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let r = async {
        let fields = form(&body);
        let token = request_token(&headers)?;
        let session = token.map(|(token, from_cookie)| Session {
            user: User {
                name: String::new(),
                uid: String::new(),
                groups: Vec::new(),
                extra: Default::default(),
            },
            token,
            from_cookie,
        });
        check_post(&headers, session.as_ref(), &fields)?;
        let mut r = redirect("/login");
        r.headers_mut().insert(
            header::SET_COOKIE,
            HeaderValue::from_static("tink_console=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0"),
        );
        Ok(r)
    }
    .await;
    st.done("logout", r)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_come_from_the_header_or_the_cookie() {
        let mut h = HeaderMap::new();
        assert!(request_token(&h).unwrap().is_none());
        h.insert(
            header::COOKIE,
            HeaderValue::from_static("a=b; tink_console=abc%2Bd; c=d"),
        );
        assert_eq!(
            request_token(&h).unwrap(),
            Some(("abc+d".to_string(), true))
        );
        h.insert(
            header::AUTHORIZATION,
            HeaderValue::from_static("Bearer xyz"),
        );
        assert_eq!(request_token(&h).unwrap(), Some(("xyz".to_string(), false)));
        h.insert(header::AUTHORIZATION, HeaderValue::from_static("Basic xyz"));
        assert!(matches!(
            request_token(&h),
            Err(PageError::Unauthenticated(_))
        ));
    }

    #[test]
    fn the_login_redirect_stays_on_this_site() {
        assert_eq!(safe_next(Some("/workflows/a/b")), "/workflows/a/b");
        assert_eq!(safe_next(Some("//evil.example/")), "/");
        assert_eq!(safe_next(Some("https://evil.example/")), "/");
        assert_eq!(safe_next(Some("/\\evil")), "/");
        assert_eq!(safe_next(None), "/");
    }

    #[test]
    fn posts_need_the_session_csrf_value_and_this_origin() {
        let s = Session {
            user: User {
                name: "a".into(),
                uid: String::new(),
                groups: vec![],
                extra: Default::default(),
            },
            token: "tok".into(),
            from_cookie: true,
        };
        let mut h = HeaderMap::new();
        h.insert(header::HOST, HeaderValue::from_static("console:8080"));
        let good = vec![("csrf".to_string(), csrf_token("tok"))];
        assert!(check_post(&h, Some(&s), &good).is_ok());
        assert!(check_post(&h, Some(&s), &[]).is_err());
        assert!(check_post(&h, Some(&s), &[("csrf".into(), csrf_token("other"))]).is_err());
        h.insert(
            header::ORIGIN,
            HeaderValue::from_static("http://evil.example"),
        );
        assert!(check_post(&h, Some(&s), &good).is_err());
        h.insert(
            header::ORIGIN,
            HeaderValue::from_static("http://console:8080"),
        );
        assert!(check_post(&h, Some(&s), &good).is_ok());
        // A header session is not sent by browsers on their own: no CSRF value needed.
        let header_session = Session {
            from_cookie: false,
            ..s
        };
        assert!(check_post(&h, Some(&header_session), &[]).is_ok());
    }

    #[test]
    fn a_login_returns_to_the_page_it_interrupted() {
        let p = |ns: &str, name: &str| {
            vec![
                ("ns".to_string(), ns.to_string()),
                ("name".to_string(), name.to_string()),
            ]
        };
        assert_eq!(return_to("/", &[], Some("ns=a")), "/");
        assert_eq!(return_to("/live/machines", &[], None), "/");
        assert_eq!(
            return_to("/workflows", &[], Some("sort=name")),
            "/workflows"
        );
        assert_eq!(return_to("/live/workflows", &[], None), "/workflows");
        for route in [
            "/workflows/{ns}/{name}",
            "/workflows/{ns}/{name}/cancel",
            "/workflows/{ns}/{name}/rerun",
            "/live/workflows/{ns}/{name}",
        ] {
            assert_eq!(
                return_to(route, &p("a", "w"), None),
                "/workflows/a/w",
                "{route}"
            );
        }
        assert_eq!(
            return_to(
                "/workflows/{ns}/{name}/logs",
                &p("a", "w"),
                Some("action=x")
            ),
            "/workflows/a/w/logs"
        );
        assert_eq!(return_to("/templates", &[], None), "/templates");
        assert_eq!(
            return_to("/templates/{ns}/{name}", &p("a", "t"), None),
            "/templates/a/t"
        );
        assert_eq!(
            return_to("/search", &[], Some("q=%20Node+A%20")),
            "/search?q=node+a"
        );
        assert_eq!(return_to("/search", &[], None), "/search?q=");
        assert_eq!(return_to("/nowhere", &[], None), "/");
    }
}
