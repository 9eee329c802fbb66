//! The workflows pages: the table (`/workflows`, filtered, sorted and cut to [`MAX_ROWS`]),
//! a workflow's page with its timeline, its action output, its live streams, and the cancel and
//! run-again actions. The query is parsed once into a [`WorkflowFilter`] (state and sort are
//! enums); [`rows`], [`sort_rows`] and [`paginate`] are pure.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::response::Response;
use http::{HeaderMap, StatusCode};
use kube::api::{Api, DeleteParams, PostParams};
use serde::Deserialize;
use tink_api::v1alpha2::{Workflow, WorkflowState};

/// The most rows the workflows page shows.
pub const MAX_ROWS: usize = 2000;

use super::error::{BadQuery, PageError, encode, html, kube_error, redirect};
use super::query::{namespaces_of, nonempty, object_name, paginate};
use super::session::{Session, check_post, form};
use super::state::{AppState, TinkKind};
use crate::access::Permission;
use crate::live::{Filter, Namespaces};
use crate::pages::{LogsPage, WorkflowPage, WorkflowsPage};
use crate::views::{Detail, EventRow, Row, state_of};

/// Query of the workflows page.
#[derive(Debug, Default, Deserialize)]
pub struct WorkflowsQuery {
    /// Namespace filter.
    pub ns: Option<String>,
    /// State filter.
    pub state: Option<String>,
    /// Name filter (substring).
    pub name: Option<String>,
    /// Sort key.
    pub sort: Option<String>,
    /// (Live stream) the sequence number the page was rendered at.
    pub since: Option<u64>,
}

/// The order of the workflows table (`?sort=`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Sort {
    /// By name (then namespace).
    Name,
    /// By namespace (then name).
    Namespace,
    /// By machine (then name).
    Hardware,
    /// By state (then name).
    State,
    /// Longest first (then name).
    Duration,
    /// Newest first (then name): the default.
    #[default]
    Created,
}

impl Sort {
    /// Every key, in the order the page lists them.
    pub const ALL: [Sort; 6] = [
        Sort::Name,
        Sort::Namespace,
        Sort::Hardware,
        Sort::State,
        Sort::Duration,
        Sort::Created,
    ];

    /// The key as the query says it.
    pub fn as_str(self) -> &'static str {
        match self {
            Sort::Name => "name",
            Sort::Namespace => "namespace",
            Sort::Hardware => "hardware",
            Sort::State => "state",
            Sort::Duration => "duration",
            Sort::Created => "created",
        }
    }

    /// `?sort=`: one of [`Sort::ALL`] (exactly), [`Sort::Created`] when empty.
    pub fn parse(text: Option<&str>) -> Result<Sort, BadQuery> {
        let Some(text) = text else {
            return Ok(Sort::default());
        };
        Sort::ALL
            .into_iter()
            .find(|s| s.as_str() == text)
            .ok_or_else(|| BadQuery {
                param: "sort",
                value: text.to_string(),
                allowed: Sort::ALL.map(Sort::as_str).join(", "),
            })
    }
}

/// `?state=`: a workflow state, in any case; `None` when empty.
pub fn parse_state(text: Option<&str>) -> Result<Option<WorkflowState>, BadQuery> {
    let Some(text) = text else {
        return Ok(None);
    };
    WorkflowState::ALL
        .into_iter()
        .find(|s| s.as_str().eq_ignore_ascii_case(text))
        .map(Some)
        .ok_or_else(|| BadQuery {
            param: "state",
            value: text.to_string(),
            allowed: WorkflowState::ALL.map(|s| s.as_str()).join(", "),
        })
}

/// The workflows page's query, parsed once.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WorkflowFilter {
    /// Only this namespace.
    pub namespace: Option<String>,
    /// Only this state.
    pub state: Option<WorkflowState>,
    /// Only names containing this (lower case; empty: all).
    pub name: String,
    /// The order.
    pub sort: Sort,
}

impl WorkflowsQuery {
    /// The filter; 400 naming the parameter that is malformed.
    pub fn filter(&self) -> Result<WorkflowFilter, PageError> {
        let namespace = nonempty(&self.ns);
        if let Some(ns) = namespace {
            object_name("namespace", ns)?;
        }
        Ok(WorkflowFilter {
            namespace: namespace.map(str::to_string),
            state: parse_state(nonempty(&self.state))?,
            sort: Sort::parse(nonempty(&self.sort))?,
            name: nonempty(&self.name).unwrap_or("").to_ascii_lowercase(),
        })
    }
}

/// The rows of the workflows of `all` that `filter` keeps and the user may see (`visible`), at
/// `now`, unsorted.
pub fn rows(
    all: &[Arc<Workflow>],
    visible: &Namespaces,
    filter: &WorkflowFilter,
    now: jiff::Timestamp,
) -> Vec<Row> {
    all.iter()
        .filter(|w| {
            let ns = w.metadata.namespace.as_deref().unwrap_or("");
            visible.contains(ns)
                && filter.namespace.as_deref().is_none_or(|f| f == ns)
                && filter.state.is_none_or(|st| state_of(w) == st)
                && (filter.name.is_empty()
                    || w.metadata
                        .name
                        .as_deref()
                        .unwrap_or("")
                        .contains(&filter.name))
        })
        .map(|w| Row::new(w, now))
        .collect()
}

/// Sorts `rows` by `sort`; ties by name (then namespace where the name sorts first).
pub fn sort_rows(rows: &mut [Row], sort: Sort) {
    match sort {
        Sort::Name => rows.sort_by(|a, b| (&a.name, &a.namespace).cmp(&(&b.name, &b.namespace))),
        Sort::Namespace => {
            rows.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)))
        }
        Sort::Hardware => rows.sort_by(|a, b| (&a.hardware, &a.name).cmp(&(&b.hardware, &b.name))),
        Sort::State => rows.sort_by(|a, b| (&a.state, &a.name).cmp(&(&b.state, &b.name))),
        Sort::Duration => rows.sort_by(|a, b| b.seconds.cmp(&a.seconds).then(a.name.cmp(&b.name))),
        Sort::Created => rows.sort_by(|a, b| b.created.cmp(&a.created).then(a.name.cmp(&b.name))),
    }
}

pub(super) async fn list(
    State(st): State<AppState>,
    Query(q): Query<WorkflowsQuery>,
    session: Result<Session, PageError>,
) -> Response {
    let r = async {
        let s = session?;
        st.synced()?;
        let f = q.filter()?;
        let filter = f.namespace.as_deref();
        let seq = st.inner.live.seq();
        let all = st.inner.cache.workflows.state();
        let known = namespaces_of(all.iter());
        let visible = st
            .visible(
                &s.user,
                crate::access::GROUP,
                "workflows",
                filter,
                known.iter().cloned(),
            )
            .await?;
        let mut rows = rows(&all, &visible, &f, jiff::Timestamp::now());
        sort_rows(&mut rows, f.sort);
        let more = paginate(&mut rows, MAX_ROWS);
        let state = f.state.map(|s| s.as_str()).unwrap_or("");
        let base = format!(
            "ns={}&state={}&name={}",
            encode(filter.unwrap_or("")),
            encode(state),
            encode(&f.name)
        );
        let page = WorkflowsPage {
            layout: st.layout(
                &s,
                "Workflows",
                "workflows",
                format!(
                    "/live/workflows?ns={}&since={seq}",
                    encode(filter.unwrap_or(""))
                ),
            ),
            rows: &rows,
            namespaces: known.into_iter().filter(|n| visible.contains(n)).collect(),
            states: WorkflowState::ALL.map(|s| s.as_str()).to_vec(),
            ns: filter.unwrap_or("").to_string(),
            state: state.to_string(),
            name: f.name.clone(),
            sort: f.sort.as_str().to_string(),
            base,
            more,
        };
        Ok(html(StatusCode::OK, &page))
    }
    .await;
    st.done("workflows", r)
}

pub(super) async fn live_list(
    State(st): State<AppState>,
    Query(q): Query<WorkflowsQuery>,
    session: Result<Session, PageError>,
) -> Response {
    let r = async {
        let s = session?;
        st.synced()?;
        let filter = nonempty(&q.ns);
        let known = namespaces_of(st.inner.cache.workflows.state().iter());
        let visible = st
            .visible(&s.user, crate::access::GROUP, "workflows", filter, known)
            .await?;
        st.sse(
            &s,
            Filter::Workflows {
                namespaces: visible,
                namespace: filter.map(str::to_string),
            },
            q.since,
        )
    }
    .await;
    st.done("live", r)
}

/// Query of a workflow's page.
#[derive(Debug, Default, Deserialize)]
pub struct WorkflowQuery {
    /// A notice key after an action (`cancel`, `rerun`).
    pub notice: Option<String>,
}

pub(super) async fn page(
    State(st): State<AppState>,
    Path((ns, name)): Path<(String, String)>,
    Query(q): Query<WorkflowQuery>,
    session: Result<Session, PageError>,
) -> Response {
    let r = async {
        let s = st
            .object_request(session, TinkKind::Workflow, (&ns, &name), "get", |_| {
                st.synced()
            })
            .await?;
        let access = &st.inner.access;
        let seq = st.inner.live.seq();
        let (w, deleted) = st
            .inner
            .cache
            .workflow(&ns, &name)
            .ok_or_else(|| PageError::NotFound(format!("workflow {ns}/{name} does not exist")))?;
        let events_allowed = access.may(&s.user, &Permission::events("list", &ns)).await?;
        let events = if events_allowed {
            st.inner.cache.workflow_events(&ns, &name).iter().map(|e| EventRow::new(e)).collect()
        } else {
            Vec::new()
        };
        let detail = Detail::new(&w, deleted, jiff::Timestamp::now());
        let notice = match q.notice.as_deref() {
            Some("cancel") => "Cancellation requested: the workflow was deleted; the controller stops its agent and it ends Canceled.",
            Some("rerun") => "Created from the workflow it was run again from.",
            _ => "",
        };
        let page = WorkflowPage {
            layout: st.layout(&s, format!("Workflow {name}"), "workflows", format!("/live/workflows/{ns}/{name}?since={seq}")),
            d: &detail,
            hardware: w.spec.hardware_ref.name.clone(),
            template: w.spec.template_ref.name.clone(),
            events_allowed,
            events,
            logs: st.inner.logs.is_some(),
            notice: notice.to_string(),
        };
        Ok(html(StatusCode::OK, &page))
    }
    .await;
    st.done("workflow", r)
}

/// Query of a live stream.
#[derive(Debug, Default, Deserialize)]
pub struct LiveQuery {
    /// The sequence number the page was rendered at.
    pub since: Option<u64>,
}

pub(super) async fn live_page(
    State(st): State<AppState>,
    Path((ns, name)): Path<(String, String)>,
    Query(q): Query<LiveQuery>,
    session: Result<Session, PageError>,
) -> Response {
    let r = async {
        let s = st
            .object_request(session, TinkKind::Workflow, (&ns, &name), "get", |_| Ok(()))
            .await?;
        let access = &st.inner.access;
        let events = access
            .may(&s.user, &Permission::events("list", &ns))
            .await?;
        st.sse(
            &s,
            Filter::Workflow {
                namespace: ns,
                name,
                events,
            },
            q.since,
        )
    }
    .await;
    st.done("live", r)
}

/// Query of the logs page.
#[derive(Debug, Default, Deserialize)]
pub struct LogsQuery {
    /// Only this action's output (its name).
    pub action: Option<String>,
}

pub(super) async fn logs(
    State(st): State<AppState>,
    Path((ns, name)): Path<(String, String)>,
    Query(q): Query<LogsQuery>,
    session: Result<Session, PageError>,
) -> Response {
    let r = async {
        let s = st
            .object_request(session, TinkKind::Workflow, (&ns, &name), "get", |_| Ok(()))
            .await?;
        let logs = st.inner.logs.as_ref().ok_or_else(|| {
            PageError::NotFound(
                "no tink-server is configured (--server-url): use tinkctl workflow logs".into(),
            )
        })?;
        let action = nonempty(&q.action).unwrap_or("").to_string();
        if action.len() > 253 {
            return Err(PageError::BadRequest(
                "the action name is longer than 253 characters".into(),
            ));
        }
        // The server decides, with the user's own token.
        let read = logs
            .read(&s.token, &ns, &name, &action)
            .await
            .map_err(|e| match e {
                crate::logs::LogsError::Unauthenticated(m) => PageError::Unauthenticated(m),
                crate::logs::LogsError::Forbidden(m) => PageError::Forbidden(m),
                crate::logs::LogsError::NotFound(m) => PageError::NotFound(m),
                crate::logs::LogsError::Unavailable(m) => PageError::Unavailable(m),
            })?;
        let actions = st
            .inner
            .cache
            .workflow(&ns, &name)
            .map(|(w, _)| {
                w.status
                    .as_ref()
                    .map(|s| s.actions.iter().map(|a| a.rendered.name.clone()).collect())
                    .unwrap_or_default()
            })
            .unwrap_or_default();
        let (lines, truncated, dispatched) = match read {
            Some((lines, truncated)) => (lines, truncated, true),
            None => (Vec::new(), false, false),
        };
        let page = LogsPage {
            layout: st.layout(&s, format!("Output of {name}"), "workflows", String::new()),
            namespace: ns.clone(),
            name: name.clone(),
            actions,
            action,
            lines,
            truncated,
            dispatched,
        };
        Ok(html(StatusCode::OK, &page))
    }
    .await;
    st.done("logs", r)
}

pub(super) async fn cancel(
    State(st): State<AppState>,
    headers: HeaderMap,
    Path((ns, name)): Path<(String, String)>,
    session: Result<Session, PageError>,
    body: Bytes,
) -> Response {
    let r = async {
        let s = st
            .object_request(session, TinkKind::Workflow, (&ns, &name), "delete", |s| {
                check_post(&headers, Some(s), &form(&body))
            })
            .await?;
        // Cancellation is deletion: the controller moves a Scheduled or Running workflow to
        // Cancelling, stops its agent, then Canceled. Sent with the user's own token.
        let api: Api<Workflow> = Api::namespaced(st.user_client(&s.token)?, &ns);
        api.delete(&name, &DeleteParams::default())
            .await
            .map_err(|e| kube_error(&format!("cannot delete workflow {ns}/{name}"), e))?;
        tracing::info!(user = %s.user.name, workflow = %format!("{ns}/{name}"), "workflow canceled from the console");
        Ok(redirect(&format!("/workflows/{ns}/{name}?notice=cancel")))
    }
    .await;
    st.done("cancel", r)
}

fn suffix() -> String {
    let mut bytes = [0u8; 5];
    let _ = ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut bytes);
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    bytes
        .iter()
        .map(|b| ALPHABET[*b as usize % ALPHABET.len()] as char)
        .collect()
}

/// The Workflow that runs `w`'s template on `w`'s machine again.
pub fn rerun_of(w: &Workflow) -> Workflow {
    let base = w.metadata.name.clone().unwrap_or_default();
    let base: String = base.chars().take(200).collect();
    let mut annotations = std::collections::BTreeMap::new();
    annotations.insert("tinkerbell.org/rerun-of".to_string(), base.clone());
    Workflow {
        metadata: kube::api::ObjectMeta {
            name: Some(format!("{}-{}", base.trim_end_matches('-'), suffix())),
            namespace: w.metadata.namespace.clone(),
            labels: w.metadata.labels.clone(),
            annotations: Some(annotations),
            ..Default::default()
        },
        spec: w.spec.clone(),
        status: None,
    }
}

pub(super) async fn rerun(
    State(st): State<AppState>,
    headers: HeaderMap,
    Path((ns, name)): Path<(String, String)>,
    session: Result<Session, PageError>,
    body: Bytes,
) -> Response {
    let r = async {
        let s = st
            .object_request(session, TinkKind::Workflow, (&ns, &name), "get", |s| {
                check_post(&headers, Some(s), &form(&body))
            })
            .await?;
        let access = &st.inner.access;
        access
            .authorize(&s.user, &Permission::tink("create", "workflows", &ns, ""))
            .await?;
        let (w, _) = st
            .inner
            .cache
            .workflow(&ns, &name)
            .ok_or_else(|| PageError::NotFound(format!("workflow {ns}/{name} does not exist")))?;
        let new = rerun_of(&w);
        let api: Api<Workflow> = Api::namespaced(st.user_client(&s.token)?, &ns);
        let created = api
            .create(&PostParams::default(), &new)
            .await
            .map_err(|e| kube_error(&format!("cannot create a workflow in {ns}"), e))?;
        let new_name = created.metadata.name.unwrap_or_default();
        tracing::info!(user = %s.user.name, from = %format!("{ns}/{name}"), workflow = %new_name, "workflow run again from the console");
        Ok(redirect(&format!("/workflows/{ns}/{new_name}?notice=rerun")))
    }
    .await;
    st.done("rerun", r)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn wf(ns: &str, name: &str, machine: &str, state: &str, created: &str) -> Arc<Workflow> {
        Arc::new(
            tink_api::from_value(json!({
                "apiVersion": "tinkerbell.org/v1alpha2", "kind": "Workflow",
                "metadata": {"name": name, "namespace": ns, "creationTimestamp": created},
                "spec": {"hardwareRef": {"name": machine}, "templateRef": {"name": "t"}},
                "status": {"state": state},
            }))
            .unwrap(),
        )
    }

    fn query(ns: &str, state: &str, name: &str, sort: &str) -> WorkflowsQuery {
        WorkflowsQuery {
            ns: Some(ns.into()),
            state: Some(state.into()),
            name: Some(name.into()),
            sort: Some(sort.into()),
            since: None,
        }
    }

    #[test]
    fn the_query_is_parsed_once_and_bad_input_names_its_parameter() {
        assert_eq!(
            query(" a ", "running", " WF ", "name").filter().unwrap(),
            WorkflowFilter {
                namespace: Some("a".into()),
                state: Some(WorkflowState::Running),
                name: "wf".into(),
                sort: Sort::Name,
            }
        );
        assert_eq!(
            WorkflowsQuery::default().filter().unwrap(),
            WorkflowFilter::default()
        );
        assert_eq!(WorkflowFilter::default().sort, Sort::Created);
        for s in Sort::ALL {
            assert_eq!(Sort::parse(Some(s.as_str())), Ok(s));
        }
        let e = Sort::parse(Some("colour")).unwrap_err();
        assert_eq!(
            e.to_string(),
            "query parameter `sort`: \"colour\" is not one of name, namespace, hardware, state, duration, created"
        );
        assert!(Sort::parse(Some("Name")).is_err(), "sort keys are exact");
        let e = parse_state(Some("Sleeping")).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("query parameter `state`: \"Sleeping\" is not one of Pending"),
            "{e}"
        );
        match query("", "Sleeping", "", "").filter() {
            Err(PageError::BadRequest(m)) => assert!(m.contains("`state`"), "{m}"),
            other => panic!("{other:?}"),
        }
        match query("", "", "", "colour").filter() {
            Err(PageError::BadRequest(m)) => assert!(m.contains("`sort`"), "{m}"),
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            query("A_B", "", "", "").filter(),
            Err(PageError::BadRequest(_))
        ));
    }

    #[test]
    fn rows_are_filtered_by_visibility_namespace_state_and_name() {
        let all = vec![
            wf("a", "wf-run", "m1", "Running", "2026-01-01T00:00:02Z"),
            wf("a", "wf-fail", "m2", "Failed", "2026-01-01T00:00:01Z"),
            wf("b", "other", "m1", "Running", "2026-01-01T00:00:03Z"),
            wf("c", "wf-hidden", "m1", "Running", "2026-01-01T00:00:04Z"),
        ];
        let visible = Namespaces::Some(["a".to_string(), "b".to_string()].into());
        let now = jiff::Timestamp::now();
        let names = |f: &WorkflowFilter| {
            let mut r = rows(&all, &visible, f, now);
            sort_rows(&mut r, f.sort);
            r.into_iter().map(|r| r.name).collect::<Vec<_>>()
        };
        assert_eq!(
            names(&WorkflowFilter::default()),
            ["other", "wf-run", "wf-fail"]
        );
        let f =
            |ns: &str, state: &str, name: &str| query(ns, state, name, "name").filter().unwrap();
        assert_eq!(names(&f("a", "", "")), ["wf-fail", "wf-run"]);
        assert_eq!(names(&f("", "Running", "")), ["other", "wf-run"]);
        assert_eq!(names(&f("", "", "WF-")), ["wf-fail", "wf-run"]);
        assert!(names(&f("c", "", "")).is_empty(), "not visible");
    }

    #[test]
    fn rows_sort_by_each_key_with_ties_by_name() {
        let now: jiff::Timestamp = "2026-01-01T01:00:00Z".parse().unwrap();
        let row = |ns: &str, name: &str, hw: &str, state: &str, secs: i64, created: &str| {
            let mut r = Row::new(&wf(ns, name, hw, state, created), now);
            r.seconds = secs;
            r
        };
        let mut r = vec![
            row("b", "y", "m1", "Running", 5, "2026-01-01T00:00:01Z"),
            row("a", "z", "m2", "Failed", 50, "2026-01-01T00:00:03Z"),
            row("a", "x", "m1", "Running", 5, "2026-01-01T00:00:02Z"),
            row("c", "x", "m0", "Succeeded", -1, "2026-01-01T00:00:02Z"),
        ];
        let order = |r: &[Row]| {
            r.iter()
                .map(|r| format!("{}/{}", r.namespace, r.name))
                .collect::<Vec<_>>()
        };
        sort_rows(&mut r, Sort::Name);
        assert_eq!(order(&r), ["a/x", "c/x", "b/y", "a/z"]);
        sort_rows(&mut r, Sort::Namespace);
        assert_eq!(order(&r), ["a/x", "a/z", "b/y", "c/x"]);
        sort_rows(&mut r, Sort::Hardware);
        assert_eq!(order(&r), ["c/x", "a/x", "b/y", "a/z"]);
        sort_rows(&mut r, Sort::State);
        assert_eq!(order(&r), ["a/z", "a/x", "b/y", "c/x"]);
        sort_rows(&mut r, Sort::Duration);
        assert_eq!(order(&r), ["a/z", "a/x", "b/y", "c/x"]);
        sort_rows(&mut r, Sort::Created);
        assert_eq!(order(&r)[0], "a/z", "newest first");
        assert_eq!(order(&r)[3], "b/y", "oldest last");
    }
}
