//! The rollouts pages: the list of WorkflowSets (`/rollouts?ns=`) and a rollout's progress
//! (`/rollouts/{ns}/{name}`): its state, counts, conditions and the Workflows it created.
//!
//! Access is decided per request as on every page (SubjectAccessReviews: list in the
//! namespaces shown, get on the set), and WorkflowSets are then read with the user's own token,
//! so the console needs no watch of them (a cluster without the WorkflowSet CRD shows a page
//! saying so, never an unready console). The
//! set's Workflows come from the console's Workflow cache, shown only when the user may list
//! Workflows in the namespace. [`item`] and [`workflow_rows`] are pure.

use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::response::Response;
use http::StatusCode;
use kube::Api;
use kube::api::ListParams;
use serde::Deserialize;
use tink_api::v1alpha2::{WORKFLOW_SET_LABEL, Workflow, WorkflowSet, WorkflowState};

use super::error::{PageError, html, kube_error};
use super::query::{namespaces_of, nonempty, object_name, object_path};
use super::session::Session;
use super::state::AppState;
use crate::access::Permission;
use crate::live::Namespaces;
use crate::pages::{
    RolloutConditionItem, RolloutItem, RolloutPage, RolloutWorkflowItem, RolloutsPage,
};

/// Query of the rollouts list.
#[derive(Debug, Default, Deserialize)]
pub struct RolloutsQuery {
    /// Only this namespace (needed by users who may not list WorkflowSets everywhere).
    pub ns: Option<String>,
}

/// The list entry (and the detail page's header) of a set.
pub fn item(s: &WorkflowSet) -> RolloutItem {
    let st = s.status.clone().unwrap_or_default();
    let current = s.status.is_some() && st.observed_generation >= s.metadata.generation;
    let finished = st.succeeded + st.failed;
    let percent = if st.total > 0 {
        (i64::from(finished) * 100 / i64::from(st.total)).clamp(0, 100)
    } else {
        0
    };
    RolloutItem {
        namespace: s.metadata.namespace.clone().unwrap_or_default(),
        name: s.metadata.name.clone().unwrap_or_default(),
        template: s.spec.template_ref.name.clone(),
        state: if current {
            st.state.as_str().to_string()
        } else {
            "Waiting".into()
        },
        class: if current {
            st.state.as_str().to_ascii_lowercase()
        } else {
            "pending".into()
        },
        total: st.total,
        pending: st.pending,
        running: st.running,
        succeeded: st.succeeded,
        failed: st.failed,
        unapproved: st.unapproved,
        max_concurrent: s.spec.max_concurrent,
        max_failures: s.spec.failure_budget(),
        paused: s.spec.paused,
        percent,
    }
}

/// The set's Workflows (labelled with its name, in its namespace, owned by its uid when it has
/// one): unfinished first, then failed, then the rest, each by name.
pub fn workflow_rows(all: &[Arc<Workflow>], set: &WorkflowSet) -> Vec<RolloutWorkflowItem> {
    let ns = set.metadata.namespace.as_deref();
    let name = set.metadata.name.as_deref().unwrap_or_default();
    let uid = set.metadata.uid.as_deref();
    let mut rows: Vec<(u8, RolloutWorkflowItem)> = all
        .iter()
        .filter(|w| w.metadata.namespace.as_deref() == ns)
        .filter(|w| {
            w.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(WORKFLOW_SET_LABEL))
                .map(String::as_str)
                == Some(name)
        })
        .filter(|w| {
            uid.is_none_or(|uid| {
                w.metadata
                    .owner_references
                    .iter()
                    .flatten()
                    .any(|o| o.uid == uid)
            })
        })
        .map(|w| {
            let state = w.status.as_ref().map(|s| s.state).unwrap_or_default();
            let rank = match state {
                s if !s.is_terminal() => 0,
                WorkflowState::Failed => 1,
                _ => 2,
            };
            (
                rank,
                RolloutWorkflowItem {
                    name: w.metadata.name.clone().unwrap_or_default(),
                    hardware: w.spec.hardware_ref.name.clone(),
                    state: state.as_str().to_string(),
                    class: state.as_str().to_ascii_lowercase(),
                },
            )
        })
        .collect();
    rows.sort_by(|a, b| (a.0, &a.1.name).cmp(&(b.0, &b.1.name)));
    rows.into_iter().map(|(_, r)| r).collect()
}

/// A list that is 404 means the kind is not served: the CRD is not installed.
fn list_error(e: kube::Error) -> PageError {
    match &e {
        kube::Error::Api(s) if s.code == 404 => PageError::NotFound(
            "the WorkflowSet API is not installed (apply deploy/crds/workflowsets.tinkerbell.org.yaml)"
                .into(),
        ),
        _ => kube_error("cannot list WorkflowSets", e),
    }
}

pub(super) async fn list(
    State(st): State<AppState>,
    Query(q): Query<RolloutsQuery>,
    session: Result<Session, PageError>,
) -> Response {
    let r = async {
        let s = session?;
        let filter = nonempty(&q.ns).map(str::to_string);
        if let Some(ns) = &filter {
            object_name("namespace", ns)?;
        }
        // Where the user may list WorkflowSets (a SubjectAccessReview per namespace the
        // console knows of, at most the usual number), as every list page decides.
        let cache = &st.inner.cache;
        let mut known = namespaces_of(cache.workflows.state().iter());
        known.extend(namespaces_of(cache.templates.state().iter()));
        let visible = st
            .visible(
                &s.user,
                crate::access::GROUP,
                "workflowsets",
                filter.as_deref(),
                known,
            )
            .await?;
        let client = st.user_client(&s.token)?;
        let mut sets = Vec::new();
        match &visible {
            Namespaces::All => {
                let api: Api<WorkflowSet> = Api::all(client);
                sets = api
                    .list(&ListParams::default())
                    .await
                    .map_err(list_error)?
                    .items;
            }
            Namespaces::Some(namespaces) => {
                let mut namespaces: Vec<&String> = namespaces.iter().collect();
                namespaces.sort();
                for ns in namespaces {
                    let api: Api<WorkflowSet> = Api::namespaced(client.clone(), ns);
                    sets.extend(
                        api.list(&ListParams::default())
                            .await
                            .map_err(list_error)?
                            .items,
                    );
                }
            }
        }
        let mut items: Vec<RolloutItem> = sets.iter().map(item).collect();
        items.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
        let page = RolloutsPage {
            layout: st.layout(&s, "Rollouts", "rollouts", String::new()),
            ns: filter.unwrap_or_default(),
            items,
        };
        Ok(html(StatusCode::OK, &page))
    }
    .await;
    st.done("rollouts", r)
}

pub(super) async fn page(
    State(st): State<AppState>,
    Path((ns, name)): Path<(String, String)>,
    session: Result<Session, PageError>,
) -> Response {
    let r = async {
        let s = session?;
        object_path("workflowset", &ns, &name)?;
        st.inner
            .access
            .authorize(
                &s.user,
                &Permission::tink("get", "workflowsets", &ns, &name),
            )
            .await?;
        let api: Api<WorkflowSet> = Api::namespaced(st.user_client(&s.token)?, &ns);
        let set = api
            .get(&name)
            .await
            .map_err(|e| kube_error(&format!("cannot read WorkflowSet {ns}/{name}"), e))?;
        let may_list = st
            .inner
            .access
            .may(&s.user, &Permission::tink("list", "workflows", &ns, ""))
            .await?;
        let (workflows, workflows_note) = if !may_list {
            (
                Vec::new(),
                "You may not list Workflows in this namespace.".to_string(),
            )
        } else if st.synced().is_err() {
            (
                Vec::new(),
                "The console is still loading Workflows.".to_string(),
            )
        } else {
            (
                workflow_rows(&st.inner.cache.workflows.state(), &set),
                String::new(),
            )
        };
        let conditions = set
            .status
            .iter()
            .flat_map(|s| s.conditions.iter())
            .map(|c| RolloutConditionItem {
                type_: format!("{:?}", c.type_),
                status: format!("{:?}", c.status),
                reason: c.reason.clone().unwrap_or_default(),
                message: c.message.clone().unwrap_or_default(),
            })
            .collect();
        let page = RolloutPage {
            layout: st.layout(&s, format!("Rollout {name}"), "rollouts", String::new()),
            set: item(&set),
            conditions,
            workflows,
            workflows_note,
        };
        Ok(html(StatusCode::OK, &page))
    }
    .await;
    st.done("rollout", r)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn set(status: serde_json::Value) -> WorkflowSet {
        tink_api::from_value(json!({
            "apiVersion": "tinkerbell.org/v1alpha2", "kind": "WorkflowSet",
            "metadata": {"name": "rack1", "namespace": "a", "uid": "u1", "generation": 2},
            "spec": {"hardwareSelector": {"matchLabels": {"rack": "r1"}},
                "templateRef": {"name": "install"}, "maxConcurrent": 5},
            "status": status,
        }))
        .unwrap()
    }

    fn wf(name: &str, set: &str, uid: &str, state: &str) -> Arc<Workflow> {
        Arc::new(
            tink_api::from_value(json!({
                "apiVersion": "tinkerbell.org/v1alpha2", "kind": "Workflow",
                "metadata": {"name": name, "namespace": "a", "labels": {WORKFLOW_SET_LABEL: set},
                    "ownerReferences": [{"apiVersion": "tinkerbell.org/v1alpha2", "kind": "WorkflowSet",
                        "name": set, "uid": uid}]},
                "spec": {"hardwareRef": {"name": format!("hw-{name}")}, "templateRef": {"name": "install"}},
                "status": {"state": state},
            }))
            .unwrap(),
        )
    }

    #[test]
    fn items_show_current_counts_and_progress() {
        let s = set(
            json!({"state": "Progressing", "total": 30, "pending": 10, "running": 5,
            "succeeded": 12, "failed": 3, "observedGeneration": 2}),
        );
        let i = item(&s);
        assert_eq!(
            (i.state.as_str(), i.class.as_str()),
            ("Progressing", "progressing")
        );
        assert_eq!(
            (i.total, i.running, i.succeeded, i.failed, i.percent),
            (30, 5, 12, 3, 50)
        );
        assert_eq!(i.max_failures, 1);
        // A status of an older spec is not shown as the rollout's state.
        let s = set(json!({"state": "Completed", "total": 3, "observedGeneration": 1}));
        assert_eq!(item(&s).state, "Waiting");
    }

    #[test]
    fn the_sets_workflows_unfinished_first() {
        let all = vec![
            wf("rack1-c", "rack1", "u1", "Succeeded"),
            wf("rack1-b", "rack1", "u1", "Failed"),
            wf("rack1-a", "rack1", "u1", "Succeeded"),
            wf("rack1-d", "rack1", "u1", "Running"),
            wf("rack2-a", "rack2", "u2", "Running"),
            wf("rack1-old", "rack1", "u0", "Running"),
        ];
        let got: Vec<_> = workflow_rows(&all, &set(json!({})))
            .into_iter()
            .map(|r| format!("{} {}", r.name, r.state))
            .collect();
        assert_eq!(
            got,
            [
                "rack1-d Running",
                "rack1-b Failed",
                "rack1-a Succeeded",
                "rack1-c Succeeded"
            ]
        );
    }
}
