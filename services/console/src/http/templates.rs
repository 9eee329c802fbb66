//! The templates pages: the list (`/templates`) and a template's page with its rendered
//! preview against a machine (`/templates/{ns}/{name}?hardware=&data=`), rendered with the
//! controller's own code (`tink_render`). [`items`] is pure.

use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::response::Response;
use http::StatusCode;
use serde::Deserialize;
use tink_api::v1alpha2::{Template, Workflow};

use super::error::{PageError, html};
use super::query::{namespaces_of, nonempty, object_name};
use super::session::Session;
use super::state::{AppState, TinkKind};
use crate::access::Permission;
use crate::live::Namespaces;
use crate::pages::{ActionItem, TemplateItem, TemplatePage, TemplatesPage};

/// The list entries of the templates of `all` the user may see (`visible`), sorted by
/// namespace and name.
pub fn items(all: &[Arc<Template>], visible: &Namespaces) -> Vec<TemplateItem> {
    let mut items: Vec<TemplateItem> = all
        .iter()
        .filter(|t| visible.contains(t.metadata.namespace.as_deref().unwrap_or("")))
        .map(|t| TemplateItem {
            namespace: t.metadata.namespace.clone().unwrap_or_default(),
            name: t.metadata.name.clone().unwrap_or_default(),
            actions: t
                .spec
                .actions
                .iter()
                .map(|a| a.name.as_str())
                .collect::<Vec<_>>()
                .join(", "),
        })
        .collect();
    items.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    items
}

pub(super) async fn list(
    State(st): State<AppState>,
    session: Result<Session, PageError>,
) -> Response {
    let r = async {
        let s = session?;
        st.synced()?;
        let all = st.inner.cache.templates.state();
        let visible = st
            .visible(
                &s.user,
                crate::access::GROUP,
                "templates",
                None,
                namespaces_of(all.iter()),
            )
            .await?;
        let page = TemplatesPage {
            layout: st.layout(&s, "Templates", "templates", String::new()),
            items: items(&all, &visible),
        };
        Ok(html(StatusCode::OK, &page))
    }
    .await;
    st.done("templates", r)
}

fn action_item(a: &tink_api::v1alpha2::Action) -> ActionItem {
    let mut lines = Vec::new();
    if let Some(cmd) = &a.cmd {
        lines.push(format!("cmd: {cmd}"));
    }
    if !a.args.is_empty() {
        lines.push(format!("args: {}", a.args.join(" ")));
    }
    for (k, v) in &a.env {
        lines.push(format!("{k}={v}"));
    }
    ActionItem {
        name: a.name.clone(),
        image: a.image.clone(),
        details: lines.join("\n"),
    }
}

/// Query of a template's page.
#[derive(Debug, Default, Deserialize)]
pub struct TemplateQuery {
    /// The machine to preview against.
    pub hardware: Option<String>,
    /// The `templateData` (a JSON object); default: that of the newest Workflow of the template.
    pub data: Option<String>,
}

pub(super) async fn page(
    State(st): State<AppState>,
    Path((ns, name)): Path<(String, String)>,
    Query(q): Query<TemplateQuery>,
    session: Result<Session, PageError>,
) -> Response {
    let r = async {
        let s = st
            .object_request(session, TinkKind::Template, (&ns, &name), "get", |_| {
                st.synced()
            })
            .await?;
        let access = &st.inner.access;
        let t =
            st.inner.cache.template(&ns, &name).ok_or_else(|| {
                PageError::NotFound(format!("template {ns}/{name} does not exist"))
            })?;
        let may_list = access
            .may(&s.user, &Permission::tink("list", "hardware", &ns, ""))
            .await?;
        let mut machines: Vec<String> = if may_list {
            st.inner
                .cache
                .hardware
                .all()
                .iter()
                .filter(|h| h.metadata.namespace.as_deref() == Some(ns.as_str()))
                .filter_map(|h| h.metadata.name.clone())
                .collect()
        } else {
            Vec::new()
        };
        machines.sort();
        machines.truncate(500);
        let hardware = nonempty(&q.hardware).unwrap_or("").to_string();
        let (mut rendered, mut error) = (Vec::new(), String::new());
        let data: std::collections::BTreeMap<String, serde_json::Value> = match nonempty(&q.data) {
            Some(text) => serde_json::from_str(text).map_err(|e| {
                PageError::BadRequest(format!("templateData must be a JSON object: {e}"))
            })?,
            None => st
                .inner
                .cache
                .workflows
                .state()
                .iter()
                .filter(|w| {
                    w.metadata.namespace.as_deref() == Some(ns.as_str())
                        && w.spec.template_ref.name == name
                })
                .max_by_key(|w| w.metadata.creation_timestamp.as_ref().map(|t| t.0))
                .map(|w| w.spec.template_data.clone())
                .unwrap_or_default(),
        };
        let data_text = serde_json::to_string(&data).unwrap_or_default();
        if !hardware.is_empty() {
            object_name("hardware", &hardware)?;
            access
                .authorize(
                    &s.user,
                    &Permission::tink("get", "hardware", &ns, &hardware),
                )
                .await?;
            match st.inner.cache.machine(&ns, &hardware) {
                None => error = format!("machine {ns}/{hardware} does not exist"),
                Some(hw) => {
                    let mut preview = preview_workflow(&ns, &name, &hardware);
                    preview.spec.template_data = data;
                    let data = tink_render::template_data(&preview, &hw);
                    match tink_render::render_actions(&t.spec, &data) {
                        Ok(actions) => rendered = actions.iter().map(action_item).collect(),
                        Err(e) => {
                            error = format!("the template does not render for {hardware}: {e}")
                        }
                    }
                }
            }
        } else if machines.is_empty() {
            error =
                "no machine to preview against in this namespace (or you may not list them)".into();
        }
        let page = TemplatePage {
            layout: st.layout(&s, format!("Template {name}"), "templates", String::new()),
            namespace: ns.clone(),
            name: name.clone(),
            source: t.spec.actions.iter().map(action_item).collect(),
            machines,
            hardware,
            data: data_text,
            rendered,
            error,
        };
        Ok(html(StatusCode::OK, &page))
    }
    .await;
    st.done("template", r)
}

fn preview_workflow(ns: &str, template: &str, hardware: &str) -> Workflow {
    let mut w = Workflow::new(
        "preview",
        tink_api::v1alpha2::WorkflowSpec {
            hardware_ref: tink_api::v1alpha2::LocalObjectReference::new(hardware),
            template_ref: tink_api::v1alpha2::LocalObjectReference::new(template),
            template_data: Default::default(),
            timeout: None,
            boot_options: None,
        },
    );
    w.metadata.namespace = Some(ns.to_string());
    w
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn template(ns: &str, name: &str, actions: &[&str]) -> Arc<Template> {
        let actions: Vec<_> = actions
            .iter()
            .map(|a| json!({"name": a, "image": "img"}))
            .collect();
        Arc::new(
            tink_api::from_value(json!({
                "apiVersion": "tinkerbell.org/v1alpha2", "kind": "Template",
                "metadata": {"name": name, "namespace": ns},
                "spec": {"actions": actions},
            }))
            .unwrap(),
        )
    }

    #[test]
    fn template_items_are_the_visible_ones_sorted() {
        let all = vec![
            template("b", "t1", &["wipe"]),
            template("a", "t2", &["wipe", "image"]),
            template("a", "t1", &[]),
            template("c", "t0", &["x"]),
        ];
        let visible = Namespaces::Some(["a".to_string(), "b".to_string()].into());
        let got: Vec<_> = items(&all, &visible)
            .into_iter()
            .map(|i| format!("{}/{}: {}", i.namespace, i.name, i.actions))
            .collect();
        assert_eq!(got, ["a/t1: ", "a/t2: wipe, image", "b/t1: wipe"]);
        assert_eq!(items(&all, &Namespaces::All).len(), 4);
    }
}
