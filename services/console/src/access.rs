//! Who the caller is and what they may see: the Kubernetes API decides.
//!
//! Every request carries the user's own bearer token (the `tink_console` cookie the login form
//! sets, or an `Authorization: Bearer` header). A `TokenReview` names the user, then a
//! `SubjectAccessReview` asks whether that user may perform the verb the page needs (`list
//! hardware`, `get workflows/x`, `delete workflows/x`, ...), so the console shows nothing the
//! user could not `kubectl get`. Positive answers are remembered for a few seconds in bounded
//! maps; refusals are never remembered. Writes are then sent with the user's own token, so the
//! API server's RBAC (and admission) decide a second time.

pub use tink_kube_access::{Access, AccessError, GROUP, Permission, User};

/// The anti-CSRF value of a session: derived from the token, which only the user's browser
/// holds (the cookie is HttpOnly), so another site cannot know it; the same on every replica.
pub fn csrf_token(token: &str) -> String {
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
    ctx.update(b"tink-console csrf\0");
    ctx.update(token.as_bytes());
    ctx.finish()
        .as_ref()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csrf_tokens_differ_per_session_and_hide_the_token() {
        let a = csrf_token("alice-token");
        assert_eq!(a, csrf_token("alice-token"));
        assert_ne!(a, csrf_token("bob-token"));
        assert_eq!(a.len(), 64);
        assert!(!a.contains("alice"));
    }
}
