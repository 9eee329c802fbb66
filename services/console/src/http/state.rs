//! What the handlers share ([`AppState`]) and the checks every page makes with it: the caches
//! have synced, the namespaces the user may list a kind in, the page frame, the user's own
//! Kubernetes client, and the request metric.

use std::collections::{BTreeSet, HashSet};
use std::sync::Arc;

use axum::response::{IntoResponse, Response};
use futures::StreamExt as _;
use tokio_util::sync::CancellationToken;

use super::error::{PageError, PageResult};
use super::query::object_path;
use super::session::Session;
use crate::access::{Access, Permission, User};
use crate::cache::Cache;
use crate::live::{Live, Namespaces, Slots, StreamLimits};
use crate::metrics::Metrics;

/// The most namespaces checked one by one for a user without cluster-wide access.
const MAX_NAMESPACE_CHECKS: usize = 256;

/// The Tinkerbell kinds a page shows one object of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum TinkKind {
    /// A Workflow.
    Workflow,
    /// A Template.
    Template,
    /// A Hardware (a machine).
    Hardware,
}

impl TinkKind {
    /// The kind as a path check names it.
    fn as_str(self) -> &'static str {
        match self {
            TinkKind::Workflow => "workflow",
            TinkKind::Template => "template",
            TinkKind::Hardware => "hardware",
        }
    }

    /// The kind's API resource (what the user is authorized for).
    fn resource(self) -> &'static str {
        match self {
            TinkKind::Workflow => "workflows",
            TinkKind::Template => "templates",
            TinkKind::Hardware => "hardware",
        }
    }
}

/// What the handlers share.
#[derive(Clone)]
pub struct AppState {
    pub(super) inner: Arc<Inner>,
}

/// The shared parts (the page modules read them directly).
pub(super) struct Inner {
    pub(super) cache: Arc<Cache>,
    pub(super) live: Arc<Live>,
    pub(super) access: Access,
    pub(super) metrics: Metrics,
    pub(super) kube: kube::Config,
    pub(super) secure_cookies: bool,
    pub(super) sse: Slots,
    pub(super) limits: StreamLimits,
    pub(super) logs: Option<crate::logs::Logs>,
    pub(super) shutdown: CancellationToken,
}

/// How the HTTP side behaves.
#[derive(Clone, Debug)]
pub struct HttpSettings {
    /// Whether the session cookie is `Secure` (HTTPS only).
    pub secure_cookies: bool,
    /// At most this many live streams at once.
    pub sse_max_clients: usize,
    /// At most this many live streams of one user at once.
    pub sse_max_clients_per_user: usize,
    /// The live streams' limits.
    pub limits: StreamLimits,
    /// Where action output is read, if anywhere.
    pub logs: Option<crate::logs::Logs>,
}

impl AppState {
    /// The state of the routes.
    pub fn new(
        cache: Arc<Cache>,
        live: Arc<Live>,
        access: Access,
        metrics: Metrics,
        kube: kube::Config,
        settings: HttpSettings,
        shutdown: CancellationToken,
    ) -> AppState {
        AppState {
            inner: Arc::new(Inner {
                cache,
                live,
                access,
                metrics,
                kube,
                secure_cookies: settings.secure_cookies,
                sse: Slots::new(settings.sse_max_clients, settings.sse_max_clients_per_user),
                limits: settings.limits,
                logs: settings.logs,
                shutdown,
            }),
        }
    }
}

impl AppState {
    pub(super) fn synced(&self) -> Result<(), PageError> {
        if self.inner.cache.synced() {
            Ok(())
        } else {
            Err(PageError::Unavailable(
                "the console is still loading Hardware, Workflows, Templates and Events from the Kubernetes API; try again in a moment".into(),
            ))
        }
    }

    /// What every request for one Tinkerbell object (`kind` at `ns/name`) checks first, in
    /// this order: the session, the path's namespace and name (400 naming the bad one),
    /// `before` (the caches' sync, a form's anti-CSRF check), and whether the user may `verb`
    /// the object (403 when not). Returns the session.
    pub(super) async fn object_request(
        &self,
        session: Result<Session, PageError>,
        kind: TinkKind,
        (ns, name): (&str, &str),
        verb: &'static str,
        before: impl FnOnce(&Session) -> Result<(), PageError>,
    ) -> Result<Session, PageError> {
        let s = session?;
        object_path(kind.as_str(), ns, name)?;
        before(&s)?;
        let permission = Permission::tink(verb, kind.resource(), ns, name);
        self.inner.access.authorize(&s.user, &permission).await?;
        Ok(s)
    }

    /// [`AppState::visible`] for a page that shows the objects it may and hides the rest: a 403
    /// is no namespace, not an error.
    pub(super) async fn visible_or_none(
        &self,
        user: &User,
        resource: &'static str,
        filter: Option<&str>,
        known: impl IntoIterator<Item = String>,
    ) -> Result<Namespaces, PageError> {
        let group = crate::access::GROUP;
        match self.visible(user, group, resource, filter, known).await {
            Err(PageError::Forbidden(_)) => Ok(Namespaces::Some(HashSet::new())),
            r => r,
        }
    }

    /// The namespaces where `user` may see machines' BMCs: list both BMC Machines and Jobs
    /// (none while the BMC API is unavailable: tiles show nothing of it then).
    pub(super) async fn bmc_visible(
        &self,
        user: &User,
        filter: Option<&str>,
        known: &BTreeSet<String>,
    ) -> Result<Namespaces, PageError> {
        if self.inner.cache.bmc_api() != crate::cache::BmcApi::Ready {
            return Ok(Namespaces::Some(HashSet::new()));
        }
        let group = tink_api::bmc::GROUP;
        let mut out = Vec::new();
        for resource in ["machines", "jobs"] {
            out.push(
                match self
                    .visible(user, group, resource, filter, known.iter().cloned())
                    .await
                {
                    Err(PageError::Forbidden(_)) => Namespaces::Some(HashSet::new()),
                    r => r?,
                },
            );
        }
        Ok(match (&out[0], &out[1]) {
            (Namespaces::All, other) | (other, Namespaces::All) => other.clone(),
            (Namespaces::Some(a), Namespaces::Some(b)) => {
                Namespaces::Some(a.intersection(b).cloned().collect())
            }
        })
    }

    /// Whether `user` may see the BMCs of namespace `ns`'s machines (list BMC Machines and
    /// Jobs there).
    pub(super) async fn bmc_allowed(&self, user: &User, ns: &str) -> Result<bool, PageError> {
        for p in crate::live::bmc_needs(ns) {
            if !self.inner.access.may(user, &p).await? {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// The namespaces in which `user` may list `resource` (of `group`): all, or those of
    /// `known` the user may list in; just `filter` when given (403 when not allowed there).
    pub(super) async fn visible(
        &self,
        user: &User,
        group: &'static str,
        resource: &'static str,
        filter: Option<&str>,
        known: impl IntoIterator<Item = String>,
    ) -> Result<Namespaces, PageError> {
        let access = &self.inner.access;
        let perm = |ns: &str| Permission {
            verb: "list",
            group,
            resource,
            subresource: "",
            namespace: ns.to_string(),
            name: String::new(),
        };
        if let Some(ns) = filter {
            access.authorize(user, &perm(ns)).await?;
            return Ok(Namespaces::Some([ns.to_string()].into()));
        }
        if access.may(user, &perm("")).await? {
            return Ok(Namespaces::All);
        }
        let known: BTreeSet<String> = known.into_iter().collect();
        let checks = futures::stream::iter(known.into_iter().take(MAX_NAMESPACE_CHECKS))
            .map(|ns| async move {
                let ok = access.may(user, &perm(&ns)).await;
                (ns, ok)
            })
            .buffer_unordered(8)
            .collect::<Vec<_>>()
            .await;
        let mut set = HashSet::new();
        for (ns, ok) in checks {
            if ok? {
                set.insert(ns);
            }
        }
        if set.is_empty() {
            return Err(PageError::Forbidden(format!(
                "user {:?} may not list {resource} in any namespace: it needs {}",
                user.name,
                perm("")
            )));
        }
        Ok(Namespaces::Some(set))
    }

    pub(super) fn user_client(&self, token: &str) -> Result<kube::Client, PageError> {
        let mut config = self.inner.kube.clone();
        config.auth_info = kube::config::AuthInfo {
            token: Some(token.to_string().into()),
            ..Default::default()
        };
        kube::Client::try_from(config)
            .map_err(|e| PageError::Unavailable(format!("cannot build a Kubernetes client: {e}")))
    }

    pub(super) fn done(&self, page: &'static str, r: PageResult) -> Response {
        let response = r.unwrap_or_else(IntoResponse::into_response);
        self.inner.metrics.request(page, response.status().as_u16());
        response
    }
}
