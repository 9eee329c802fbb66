//! The search page (`/search?q=`): names, MACs and IPs of Hardware, names of Workflows and
//! Templates, in the namespaces the user may list each in. [`hits`] is pure.

use std::sync::Arc;

use axum::extract::{Query, State};
use axum::response::Response;
use http::StatusCode;
use serde::Deserialize;
use tink_api::v1alpha2::{Hardware, Template, Workflow};

/// The most search hits.
pub const MAX_HITS: usize = 200;

use super::error::{PageError, html};
use super::query::{namespaces_of, nonempty, paginate};
use super::session::Session;
use super::state::AppState;
use crate::live::Namespaces;
use crate::pages::{Hit, SearchPage};

/// Query of the search page.
#[derive(Debug, Default, Deserialize)]
pub struct SearchQuery {
    /// The text.
    pub q: Option<String>,
}

/// Where the user may list each kind.
#[derive(Debug, Clone)]
pub struct Visible {
    /// Hardware.
    pub hardware: Namespaces,
    /// Workflows.
    pub workflows: Namespaces,
    /// Templates.
    pub templates: Namespaces,
}

fn hw_match(h: &Hardware, q: &str) -> Option<String> {
    let name = h.metadata.name.as_deref().unwrap_or("");
    if name.contains(q) {
        return Some("name".into());
    }
    let q_mac = q.replace('-', ":");
    for (mac, nic) in &h.spec.network_interfaces {
        if mac.contains(&q_mac) {
            return Some(format!("MAC {mac}"));
        }
        if let Some(ip) = nic.dhcp.as_ref().and_then(|d| d.ip.as_deref())
            && ip.contains(q)
        {
            return Some(format!("IP {ip}"));
        }
    }
    None
}

/// The hits among `objects` (of `kind`, each with its page at `/{path}/{ns}/{name}`) in the
/// `visible` namespaces whose name contains `text`.
fn name_hits<'a, K: kube::Resource + 'a>(
    kind: &'static str,
    path: &'static str,
    objects: &'a [Arc<K>],
    visible: &'a Namespaces,
    text: &'a str,
) -> impl Iterator<Item = Hit> + 'a {
    objects.iter().filter_map(move |o| {
        let ns = o.meta().namespace.clone().unwrap_or_default();
        let name = o.meta().name.clone().unwrap_or_default();
        (visible.contains(&ns) && name.contains(text)).then(|| Hit {
            kind,
            href: format!("/{path}/{ns}/{name}"),
            namespace: ns,
            name,
            matched: "name".into(),
        })
    })
}

/// What matches `text` (lower case) among the objects the user may see, sorted by kind,
/// namespace and name.
pub fn hits(
    text: &str,
    hardware: &[Arc<Hardware>],
    workflows: &[Arc<Workflow>],
    templates: &[Arc<Template>],
    visible: &Visible,
) -> Vec<Hit> {
    let mut hits = Vec::new();
    for h in hardware {
        let ns = h.metadata.namespace.clone().unwrap_or_default();
        if !visible.hardware.contains(&ns) {
            continue;
        }
        if let Some(matched) = hw_match(h, text) {
            let name = h.metadata.name.clone().unwrap_or_default();
            hits.push(Hit {
                kind: "Hardware",
                href: format!("/machines/{ns}/{name}"),
                namespace: ns,
                name,
                matched,
            });
        }
    }
    hits.extend(name_hits(
        "Workflow",
        "workflows",
        workflows,
        &visible.workflows,
        text,
    ));
    hits.extend(name_hits(
        "Template",
        "templates",
        templates,
        &visible.templates,
        text,
    ));
    hits.sort_by(|a, b| (a.kind, &a.namespace, &a.name).cmp(&(b.kind, &b.namespace, &b.name)));
    hits
}

pub(super) async fn page(
    State(st): State<AppState>,
    Query(q): Query<SearchQuery>,
    session: Result<Session, PageError>,
) -> Response {
    let r = async {
        let text = nonempty(&q.q).unwrap_or("").to_ascii_lowercase();
        let s = session?;
        st.synced()?;
        if text.len() > 253 {
            return Err(PageError::BadRequest(
                "the search text is longer than 253 characters".into(),
            ));
        }
        let cache = &st.inner.cache;
        let mut hits = Vec::new();
        let mut truncated = false;
        if !text.is_empty() {
            let hardware = cache.hardware.all();
            let workflows = cache.workflows.state();
            let templates = cache.templates.state();
            let visible = Visible {
                hardware: st
                    .visible_or_none(&s.user, "hardware", None, namespaces_of(hardware.iter()))
                    .await?,
                workflows: st
                    .visible_or_none(&s.user, "workflows", None, namespaces_of(workflows.iter()))
                    .await?,
                templates: st
                    .visible_or_none(&s.user, "templates", None, namespaces_of(templates.iter()))
                    .await?,
            };
            hits = self::hits(&text, &hardware, &workflows, &templates, &visible);
            truncated = paginate(&mut hits, MAX_HITS) > 0;
        }
        let mut layout = st.layout(&s, "Search", "", String::new());
        layout.q = text;
        Ok(html(
            StatusCode::OK,
            &SearchPage {
                layout,
                hits,
                truncated,
            },
        ))
    }
    .await;
    st.done("search", r)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::collections::HashSet;

    fn object<K: serde::de::DeserializeOwned>(
        kind: &str,
        ns: &str,
        name: &str,
        spec: serde_json::Value,
    ) -> Arc<K> {
        Arc::new(
            tink_api::from_value(json!({
                "apiVersion": "tinkerbell.org/v1alpha2", "kind": kind,
                "metadata": {"name": name, "namespace": ns},
                "spec": spec,
            }))
            .unwrap(),
        )
    }

    #[test]
    fn search_matches_names_macs_and_ips_where_visible() {
        let nic = json!({"networkInterfaces": {"02:00:00:00:00:07": {"dhcp": {"ip": "10.1.0.7"}}}});
        let hardware: Vec<Arc<Hardware>> = vec![
            object("Hardware", "a", "node-7", nic.clone()),
            object("Hardware", "b", "node-8", nic),
        ];
        let wf_spec = json!({"hardwareRef": {"name": "node-7"}, "templateRef": {"name": "t"}});
        let workflows: Vec<Arc<Workflow>> = vec![
            object("Workflow", "a", "node-7-install", wf_spec.clone()),
            object("Workflow", "b", "node-7-secret", wf_spec),
        ];
        let templates: Vec<Arc<Template>> = vec![object(
            "Template",
            "a",
            "node-image",
            json!({"actions": [{"name": "x", "image": "i"}]}),
        )];
        let visible = Visible {
            hardware: Namespaces::All,
            workflows: Namespaces::Some(["a".to_string()].into()),
            templates: Namespaces::Some(HashSet::new()),
        };
        let found = |text: &str| {
            hits(text, &hardware, &workflows, &templates, &visible)
                .into_iter()
                .map(|h| format!("{} {}/{} {}", h.kind, h.namespace, h.name, h.matched))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            found("node-7"),
            ["Hardware a/node-7 name", "Workflow a/node-7-install name"],
            "b's workflows and every template are not visible"
        );
        assert_eq!(
            found("02-00-00-00-00-07"),
            [
                "Hardware a/node-7 MAC 02:00:00:00:00:07",
                "Hardware b/node-8 MAC 02:00:00:00:00:07"
            ]
        );
        assert_eq!(found("10.1.0.7")[0], "Hardware a/node-7 IP 10.1.0.7");
        assert!(found("nothing").is_empty());
        let h = &hits("node-8", &hardware, &workflows, &templates, &visible)[0];
        assert_eq!(h.href, "/machines/b/node-8");
    }
}
