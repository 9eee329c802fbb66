//! Who may read a workflow's logs: Kubernetes decides.
//!
//! The caller's bearer token (`authorization: Bearer <token>` metadata) is checked with a
//! `TokenReview`, then a `SubjectAccessReview` asks whether that user may `get` the
//! `workflows/log` subresource (group `tinkerbell.org`) of the Workflow, in its namespace, so
//! access follows the cluster's RBAC (bind the ClusterRole `tink-workflow-log-reader`, see
//! deploy/rbac/server.yaml). Positive answers are remembered for a few seconds in bounded maps so
//! followers and retries do not load the API server; refusals are never remembered.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::api::{Api, PostParams};
use tonic::Status;
use tonic::metadata::MetadataMap;

/// The API group of the permission.
pub const LOG_GROUP: &str = "tinkerbell.org";
/// The resource of the permission.
pub const LOG_RESOURCE: &str = "workflows";
/// The subresource of the permission.
pub const LOG_SUBRESOURCE: &str = "log";
/// The verb of the permission.
pub const LOG_VERB: &str = "get";
/// The most answers each cache keeps.
const CACHE_MAX: usize = 4096;

/// An authenticated caller.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Caller {
    /// The user name.
    pub user: String,
    /// The user's uid.
    pub uid: String,
    /// The user's groups.
    pub groups: Vec<String>,
}

/// A bounded map whose entries are valid for `ttl`.
#[derive(Debug)]
struct Cache<K, V> {
    ttl: Duration,
    entries: Mutex<HashMap<K, (V, Instant)>>,
}

impl<K: std::hash::Hash + Eq, V: Clone> Cache<K, V> {
    fn new(ttl: Duration) -> Self {
        Cache {
            ttl,
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
        if self.ttl.is_zero() {
            return;
        }
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        if entries.len() >= CACHE_MAX {
            entries.retain(|_, (_, at)| at.elapsed() < self.ttl);
            if entries.len() >= CACHE_MAX {
                entries.clear();
            }
        }
        entries.insert(key, (value, Instant::now()));
    }
}

/// Authentication and authorization of log readers through the Kubernetes API.
pub(crate) struct LogAccess {
    client: kube::Client,
    /// SHA-256 of a token -> its user.
    users: Cache<[u8; 32], Caller>,
    /// (caller, namespace, name) allowed to read the logs.
    allowed: Cache<(Caller, String, String), ()>,
}

/// The bearer token of a request's `authorization` metadata.
pub(crate) fn bearer_token(metadata: &MetadataMap) -> Result<&str, Status> {
    let value = metadata
        .get("authorization")
        .ok_or_else(|| {
            Status::unauthenticated(
                "reading logs needs a Kubernetes bearer token in the `authorization: Bearer <token>` metadata",
            )
        })?
        .to_str()
        .map_err(|_| Status::unauthenticated("`authorization` metadata: not ASCII"))?;
    let token = value
        .strip_prefix("Bearer ")
        .or_else(|| value.strip_prefix("bearer "))
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .ok_or_else(|| {
            Status::unauthenticated("`authorization` metadata: expected `Bearer <token>`")
        })?;
    Ok(token)
}

impl LogAccess {
    /// Checks with `client`'s API server, remembering positive answers for `ttl`.
    pub(crate) fn new(client: kube::Client, ttl: Duration) -> Self {
        LogAccess {
            client,
            users: Cache::new(ttl),
            allowed: Cache::new(ttl),
        }
    }

    /// The client (the server's own identity), for reading the Workflow.
    pub(crate) fn client(&self) -> &kube::Client {
        &self.client
    }

    /// The user of `token` (TokenReview); UNAUTHENTICATED when the API server does not know it.
    pub(crate) async fn authenticate(&self, token: &str) -> Result<Caller, Status> {
        let digest: [u8; 32] = ring::digest::digest(&ring::digest::SHA256, token.as_bytes())
            .as_ref()
            .try_into()
            .map_err(|_| Status::internal("SHA-256 digest of unexpected length"))?;
        if let Some(caller) = self.users.get(&digest) {
            return Ok(caller);
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
            .map_err(|e| {
                Status::unavailable(format!("cannot check the token (TokenReview): {e}"))
            })?;
        let status = answer.status.unwrap_or_default();
        let user = status.user.unwrap_or_default();
        let name = user.username.unwrap_or_default();
        if status.authenticated != Some(true) || name.is_empty() {
            let why = status.error.unwrap_or_else(|| "not authenticated".into());
            return Err(Status::unauthenticated(format!(
                "the bearer token was refused by the Kubernetes API: {why}"
            )));
        }
        let caller = Caller {
            user: name,
            uid: user.uid.unwrap_or_default(),
            groups: user.groups.unwrap_or_default(),
        };
        self.users.put(digest, caller.clone());
        Ok(caller)
    }

    /// Whether `caller` may `get` `workflows/log` of workflow `namespace/name`
    /// (SubjectAccessReview); PERMISSION_DENIED naming the permission when not.
    pub(crate) async fn authorize(
        &self,
        caller: &Caller,
        namespace: &str,
        name: &str,
    ) -> Result<(), Status> {
        let key = (caller.clone(), namespace.to_string(), name.to_string());
        if self.allowed.get(&key).is_some() {
            return Ok(());
        }
        let review = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: Some(caller.user.clone()),
                uid: Some(caller.uid.clone()).filter(|u| !u.is_empty()),
                groups: Some(caller.groups.clone()),
                resource_attributes: Some(ResourceAttributes {
                    group: Some(LOG_GROUP.into()),
                    resource: Some(LOG_RESOURCE.into()),
                    subresource: Some(LOG_SUBRESOURCE.into()),
                    verb: Some(LOG_VERB.into()),
                    namespace: Some(namespace.into()),
                    name: Some(name.into()),
                    ..Default::default()
                }),
                ..Default::default()
            },
            ..Default::default()
        };
        let answer = Api::<SubjectAccessReview>::all(self.client.clone())
            .create(&PostParams::default(), &review)
            .await
            .map_err(|e| {
                Status::unavailable(format!("cannot check access (SubjectAccessReview): {e}"))
            })?;
        let status = answer.status.unwrap_or_default();
        if !status.allowed || status.denied == Some(true) {
            let reason = status
                .reason
                .filter(|r| !r.is_empty())
                .map(|r| format!(": {r}"))
                .unwrap_or_default();
            return Err(Status::permission_denied(format!(
                "user {:?} may not read the logs of workflow {namespace}/{name}: it needs `{LOG_VERB}` on `{LOG_RESOURCE}/{LOG_SUBRESOURCE}` (API group {LOG_GROUP}) in namespace {namespace}, for example a RoleBinding to the ClusterRole tink-workflow-log-reader{reason}",
                caller.user
            )));
        }
        self.allowed.put(key, ());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_tokens_come_from_the_authorization_metadata() {
        let mut m = MetadataMap::new();
        assert_eq!(
            bearer_token(&m).unwrap_err().code(),
            tonic::Code::Unauthenticated
        );
        m.insert("authorization", "Basic abc".parse().unwrap());
        assert_eq!(
            bearer_token(&m).unwrap_err().code(),
            tonic::Code::Unauthenticated
        );
        m.insert("authorization", "Bearer ".parse().unwrap());
        assert!(bearer_token(&m).is_err());
        m.insert("authorization", "Bearer t0k".parse().unwrap());
        assert_eq!(bearer_token(&m).unwrap(), "t0k");
    }

    #[test]
    fn caches_expire_and_stay_bounded() {
        let c: Cache<u32, u32> = Cache::new(Duration::from_millis(50));
        c.put(1, 10);
        assert_eq!(c.get(&1), Some(10));
        std::thread::sleep(Duration::from_millis(60));
        assert_eq!(c.get(&1), None);
        for i in 0..(CACHE_MAX as u32 + 10) {
            c.put(i, i);
        }
        let len = c.entries.lock().unwrap().len();
        assert!(len <= CACHE_MAX, "{len}");
        let off: Cache<u32, u32> = Cache::new(Duration::ZERO);
        off.put(1, 1);
        assert_eq!(off.get(&1), None);
    }
}
