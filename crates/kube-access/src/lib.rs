//! Who a bearer token belongs to and what that user may do: the Kubernetes API decides.
//!
//! A `TokenReview` names the user of a token, then a `SubjectAccessReview` asks whether that
//! user may perform a verb on a resource (`get workflows/x`, `get workflows/x/log`, `list
//! hardware`, ...), so what our services show follows the cluster's RBAC. Positive answers are
//! remembered for a few seconds in bounded maps (a user under the SHA-256 of its token, never the
//! token). A refused token is remembered too, for [`REFUSED_TTL`], so repeating one bad token
//! costs one TokenReview, not one per request; a refused permission is not (a new binding takes
//! effect at once). The review carries the user's `extra` attributes (scopes, the credential's
//! id), which webhook authorizers may decide on. Used by the web console (every page and action)
//! and by tink-server (reading a workflow's action output).

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::api::{Api, PostParams};

/// The API group of the project's resources.
pub const GROUP: &str = "tinkerbell.org";
/// The most answers each cache keeps.
pub const CACHE_MAX: usize = 4096;
/// How long a token the TokenReview refused is refused again without asking.
pub const REFUSED_TTL: Duration = Duration::from_secs(10);

/// An authenticated user.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct User {
    /// The user name.
    pub name: String,
    /// The user's uid.
    pub uid: String,
    /// The user's groups.
    pub groups: Vec<String>,
    /// The user's extra attributes, as the TokenReview gave them.
    pub extra: BTreeMap<String, Vec<String>>,
}

/// What a page or action needs: `verb` on `group/resource[/subresource]`, in `namespace` (all
/// namespaces when empty), of object `name` (any when empty).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Permission {
    /// `get`, `list`, `watch`, `create`, `delete`.
    pub verb: &'static str,
    /// The API group (`tinkerbell.org`, or empty for core).
    pub group: &'static str,
    /// `hardware`, `workflows`, `templates`, `events`.
    pub resource: &'static str,
    /// A subresource (`log`), or empty.
    pub subresource: &'static str,
    /// The namespace; empty for every namespace.
    pub namespace: String,
    /// The object; empty for any.
    pub name: String,
}

impl Permission {
    /// `verb` on a tinkerbell.org `resource`.
    pub fn tink(verb: &'static str, resource: &'static str, namespace: &str, name: &str) -> Self {
        Permission {
            verb,
            group: GROUP,
            resource,
            subresource: "",
            namespace: namespace.to_string(),
            name: name.to_string(),
        }
    }

    /// The same permission on `subresource` of the resource.
    pub fn on_subresource(mut self, subresource: &'static str) -> Self {
        self.subresource = subresource;
        self
    }

    /// `verb` on core Events in `namespace`.
    pub fn events(verb: &'static str, namespace: &str) -> Self {
        Permission {
            verb,
            group: "",
            resource: "events",
            subresource: "",
            namespace: namespace.to_string(),
            name: String::new(),
        }
    }
}

impl std::fmt::Display for Permission {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let group = if self.group.is_empty() {
            "core".to_string()
        } else {
            self.group.to_string()
        };
        write!(f, "`{}` on `{}", self.verb, self.resource)?;
        if !self.subresource.is_empty() {
            write!(f, "/{}", self.subresource)?;
        }
        write!(f, "` (API group {group})")?;
        if !self.name.is_empty() {
            write!(f, " named {}", self.name)?;
        }
        if self.namespace.is_empty() {
            write!(f, " in every namespace")
        } else {
            write!(f, " in namespace {}", self.namespace)
        }
    }
}

/// Why access was not granted.
#[derive(Debug, thiserror::Error)]
pub enum AccessError {
    /// The token is unknown, expired or was refused.
    #[error("the token was refused by the Kubernetes API: {0}")]
    Unauthenticated(String),
    /// The user lacks the permission.
    #[error("user {user:?} may not do this: it needs {permission}{reason}")]
    Forbidden {
        /// The user.
        user: String,
        /// What was needed.
        permission: Permission,
        /// The authorizer's reason, with a leading `: `, or empty.
        reason: String,
    },
    /// The review could not be made.
    #[error("cannot check access ({what}): {message}")]
    Unavailable {
        /// `TokenReview` or `SubjectAccessReview`.
        what: &'static str,
        /// The client's error.
        message: String,
    },
}

/// A bounded map whose entries are valid for `ttl`.
#[derive(Debug)]
struct Cache<K, V> {
    ttl: Duration,
    max: usize,
    entries: Mutex<HashMap<K, (V, Instant)>>,
}

impl<K: std::hash::Hash + Eq, V: Clone> Cache<K, V> {
    fn new(ttl: Duration, max: usize) -> Self {
        Cache {
            ttl,
            max,
            entries: Mutex::new(HashMap::new()),
        }
    }

    fn get(&self, key: &K) -> Option<V> {
        let entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        entries
            .get(key)
            .filter(|(_, at)| at.elapsed() < self.ttl)
            .map(|(v, _)| v.clone())
    }

    fn put(&self, key: K, value: V) {
        if self.ttl.is_zero() || self.max == 0 {
            return;
        }
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        if entries.len() >= self.max {
            entries.retain(|_, (_, at)| at.elapsed() < self.ttl);
            if entries.len() >= self.max {
                entries.clear();
            }
        }
        entries.insert(key, (value, Instant::now()));
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.entries.lock().unwrap_or_else(|e| e.into_inner()).len()
    }
}

/// The SHA-256 of a token: the key under which its user is remembered (never the token).
pub fn token_digest(token: &str) -> [u8; 32] {
    let mut out = [0u8; 32];
    out.copy_from_slice(ring::digest::digest(&ring::digest::SHA256, token.as_bytes()).as_ref());
    out
}

/// Authentication and authorization through the Kubernetes API, with bounded caches.
pub struct Access {
    client: kube::Client,
    users: Cache<[u8; 32], User>,
    refused: Cache<[u8; 32], String>,
    allowed: Cache<(User, Permission), ()>,
}

impl Access {
    /// Asks `client`'s API server, remembering positive answers for `ttl` (at most
    /// [`CACHE_MAX`] of each kind).
    pub fn new(client: kube::Client, ttl: Duration) -> Self {
        Access {
            client,
            users: Cache::new(ttl, CACHE_MAX),
            refused: Cache::new(REFUSED_TTL, CACHE_MAX),
            allowed: Cache::new(ttl, CACHE_MAX),
        }
    }

    /// The user `token` belongs to (TokenReview).
    pub async fn authenticate(&self, token: &str) -> Result<User, AccessError> {
        let digest = token_digest(token);
        if let Some(user) = self.users.get(&digest) {
            return Ok(user);
        }
        if let Some(why) = self.refused.get(&digest) {
            return Err(AccessError::Unauthenticated(why));
        }
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: Some(token.to_string()),
                audiences: None,
            },
            ..Default::default()
        };
        let answer = Api::<TokenReview>::all(self.client.clone())
            .create(&PostParams::default(), &review)
            .await
            .map_err(|e| AccessError::Unavailable {
                what: "TokenReview",
                message: e.to_string(),
            })?;
        let status = answer.status.unwrap_or_default();
        let info = status.user.unwrap_or_default();
        let name = info.username.unwrap_or_default();
        if status.authenticated != Some(true) || name.is_empty() {
            let why = status.error.unwrap_or_else(|| "not authenticated".into());
            self.refused.put(digest, why.clone());
            return Err(AccessError::Unauthenticated(why));
        }
        let user = User {
            name,
            uid: info.uid.unwrap_or_default(),
            groups: info.groups.unwrap_or_default(),
            extra: info.extra.unwrap_or_default(),
        };
        self.users.put(digest, user.clone());
        Ok(user)
    }

    /// Whether `user` has `permission` (SubjectAccessReview); `Forbidden` naming it when not.
    pub async fn authorize(&self, user: &User, permission: &Permission) -> Result<(), AccessError> {
        let key = (user.clone(), permission.clone());
        if self.allowed.get(&key).is_some() {
            return Ok(());
        }
        let review = review(user, permission);
        let answer = Api::<SubjectAccessReview>::all(self.client.clone())
            .create(&PostParams::default(), &review)
            .await
            .map_err(|e| AccessError::Unavailable {
                what: "SubjectAccessReview",
                message: e.to_string(),
            })?;
        let status = answer.status.unwrap_or_default();
        if !status.allowed || status.denied == Some(true) {
            return Err(AccessError::Forbidden {
                user: user.name.clone(),
                permission: permission.clone(),
                reason: status
                    .reason
                    .filter(|r| !r.is_empty())
                    .map(|r| format!(": {r}"))
                    .unwrap_or_default(),
            });
        }
        self.allowed.put(key, ());
        Ok(())
    }

    /// Like [`Access::authorize`], as a yes or no (errors of the review still propagate).
    pub async fn may(&self, user: &User, permission: &Permission) -> Result<bool, AccessError> {
        match self.authorize(user, permission).await {
            Ok(()) => Ok(true),
            Err(AccessError::Forbidden { .. }) => Ok(false),
            Err(e) => Err(e),
        }
    }
}

/// The SubjectAccessReview asking whether `user` has `permission`: the user as the TokenReview
/// named it (name, uid, groups and extra attributes).
fn review(user: &User, permission: &Permission) -> SubjectAccessReview {
    SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: Some(user.name.clone()),
            uid: Some(user.uid.clone()).filter(|u| !u.is_empty()),
            groups: Some(user.groups.clone()),
            extra: Some(user.extra.clone()).filter(|e| !e.is_empty()),
            resource_attributes: Some(ResourceAttributes {
                group: Some(permission.group.to_string()),
                resource: Some(permission.resource.to_string()),
                subresource: Some(permission.subresource.to_string()).filter(|s| !s.is_empty()),
                verb: Some(permission.verb.to_string()),
                namespace: Some(permission.namespace.clone()).filter(|n| !n.is_empty()),
                name: Some(permission.name.clone()).filter(|n| !n.is_empty()),
                ..Default::default()
            }),
            ..Default::default()
        },
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reviews_carry_the_users_extra_attributes() {
        let user = User {
            name: "alice".into(),
            uid: "u-1".into(),
            groups: vec!["ops".into()],
            extra: [(
                "authentication.kubernetes.io/credential-id".to_string(),
                vec!["JTI=abc".to_string()],
            )]
            .into(),
        };
        let r = review(&user, &Permission::tink("get", "workflows", "ns", "wf"));
        let extra = r.spec.extra.expect("extra");
        assert_eq!(
            extra["authentication.kubernetes.io/credential-id"],
            ["JTI=abc"]
        );
        assert_eq!(r.spec.user.as_deref(), Some("alice"));
        assert_eq!(r.spec.groups.as_deref(), Some(&["ops".to_string()][..]));
    }

    #[test]
    fn caches_expire_and_stay_bounded() {
        let c: Cache<u32, u32> = Cache::new(Duration::from_millis(50), 100);
        c.put(1, 10);
        assert_eq!(c.get(&1), Some(10));
        std::thread::sleep(Duration::from_millis(60));
        assert_eq!(c.get(&1), None);
        for i in 0..250 {
            c.put(i, i);
        }
        assert!(c.len() <= 100, "{}", c.len());
        let off: Cache<u32, u32> = Cache::new(Duration::ZERO, 100);
        off.put(1, 1);
        assert_eq!(off.get(&1), None);
    }

    #[test]
    fn permissions_read_as_rbac_rules() {
        let p = Permission::tink("delete", "workflows", "a", "wf");
        assert_eq!(
            p.to_string(),
            "`delete` on `workflows` (API group tinkerbell.org) named wf in namespace a"
        );
        assert_eq!(
            Permission::tink("get", "workflows", "a", "wf")
                .on_subresource("log")
                .to_string(),
            "`get` on `workflows/log` (API group tinkerbell.org) named wf in namespace a"
        );
        assert_eq!(
            Permission::events("list", "").to_string(),
            "`list` on `events` (API group core) in every namespace"
        );
    }

    #[test]
    fn token_digests_hide_the_token() {
        let d = token_digest("alice-token");
        assert_eq!(d, token_digest("alice-token"));
        assert_ne!(d, token_digest("bob-token"));
    }
}
