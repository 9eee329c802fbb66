//! Who may read a workflow's logs: Kubernetes decides.
//!
//! The caller's bearer token (`authorization: Bearer <token>` metadata) is checked with a
//! `TokenReview`, then a `SubjectAccessReview` asks whether that user may `get` the
//! `workflows/log` subresource (group `tinkerbell.org`) of the Workflow, in its namespace, so
//! access follows the cluster's RBAC (bind the ClusterRole `tink-workflow-log-reader`, see
//! deploy/rbac/server.yaml). Positive answers are remembered for a few seconds in bounded maps so
//! followers and retries do not load the API server; a refused token for
//! [`tink_kube_access::REFUSED_TTL`], refused permissions never.

use std::time::Duration;

use tink_kube_access::{Access, AccessError, Permission, User};
use tonic::Status;
use tonic::metadata::MetadataMap;

/// The API group of the permission.
pub const LOG_GROUP: &str = tink_kube_access::GROUP;
/// The resource of the permission.
pub const LOG_RESOURCE: &str = "workflows";
/// The subresource of the permission.
pub const LOG_SUBRESOURCE: &str = "log";
/// The verb of the permission.
pub const LOG_VERB: &str = "get";

/// Authentication and authorization of log readers through the Kubernetes API.
pub(crate) struct LogAccess {
    client: kube::Client,
    access: Access,
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
            access: Access::new(client.clone(), ttl),
            client,
        }
    }

    /// The client (the server's own identity), for reading the Workflow.
    pub(crate) fn client(&self) -> &kube::Client {
        &self.client
    }

    /// The user of `token` (TokenReview); UNAUTHENTICATED when the API server does not know it.
    pub(crate) async fn authenticate(&self, token: &str) -> Result<User, Status> {
        self.access.authenticate(token).await.map_err(|e| match e {
            AccessError::Unauthenticated(why) => Status::unauthenticated(format!(
                "the bearer token was refused by the Kubernetes API: {why}"
            )),
            e => Status::unavailable(e.to_string()),
        })
    }

    /// Whether `user` may `get` `workflows/log` of workflow `namespace/name`
    /// (SubjectAccessReview); PERMISSION_DENIED naming the permission when not.
    pub(crate) async fn authorize(
        &self,
        user: &User,
        namespace: &str,
        name: &str,
    ) -> Result<(), Status> {
        let permission = Permission::tink(LOG_VERB, LOG_RESOURCE, namespace, name)
            .on_subresource(LOG_SUBRESOURCE);
        self.access
            .authorize(user, &permission)
            .await
            .map_err(|e| match e {
                AccessError::Forbidden { user, reason, .. } => Status::permission_denied(format!(
                    "user {user:?} may not read the logs of workflow {namespace}/{name}: it needs `{LOG_VERB}` on `{LOG_RESOURCE}/{LOG_SUBRESOURCE}` (API group {LOG_GROUP}) in namespace {namespace}, for example a RoleBinding to the ClusterRole tink-workflow-log-reader{reason}"
                )),
                e => Status::unavailable(e.to_string()),
            })
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
}
