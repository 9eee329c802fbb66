//! The machines page (`/`) and its live stream (`/live/machines`): tiles coloured by each
//! machine's latest workflow, filtered by namespace and labels. The handlers check access and
//! read the cache; [`tiles`] and [`counts`] are pure.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use axum::extract::{Query, State};
use axum::response::Response;
use http::{HeaderMap, StatusCode};
use serde::Deserialize;
use tink_api::v1alpha2::{Hardware, Workflow};

use super::error::{PageError, PageResult, encode, html};
use super::query::{namespaces_of, nonempty, object_name};
use super::session::Session;
use super::state::AppState;
use crate::cache::{Key, key_of};
use crate::live::{Filter, Namespaces};
use crate::pages::MachinesPage;
use crate::views::{Selector, Tile};

/// Query of the machines page.
#[derive(Debug, Default, Deserialize)]
pub struct MachinesQuery {
    /// Namespace filter.
    pub ns: Option<String>,
    /// Label filter.
    pub labels: Option<String>,
    /// (Live stream) the sequence number the page was rendered at.
    pub since: Option<u64>,
}

/// The filters of the machines page, parsed once.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MachineFilter {
    /// Only this namespace (`?ns=`).
    pub namespace: Option<String>,
    /// Only machines whose labels match (`?labels=`).
    pub selector: Selector,
}

impl MachinesQuery {
    /// The filters; 400 naming what is malformed.
    pub fn filter(&self) -> Result<MachineFilter, PageError> {
        let namespace = nonempty(&self.ns);
        if let Some(ns) = namespace {
            object_name("namespace", ns)?;
        }
        let selector =
            Selector::parse(self.labels.as_deref().unwrap_or("")).map_err(PageError::BadRequest)?;
        Ok(MachineFilter {
            namespace: namespace.map(str::to_string),
            selector,
        })
    }
}

/// The tiles of the machines in `hardware` that `filter` keeps and the user may see
/// (`hw_visible`), sorted by namespace and name; each names its `latest` workflow only where
/// the user may list workflows (`wf_visible`).
pub fn tiles(
    hardware: &[Arc<Hardware>],
    latest: &HashMap<Key, Arc<Workflow>>,
    hw_visible: &Namespaces,
    wf_visible: &Namespaces,
    filter: &MachineFilter,
    agent: impl Fn(&Hardware) -> &'static str,
) -> Vec<Tile> {
    let mut tiles: Vec<Tile> = hardware
        .iter()
        .filter(|h| {
            let ns = h.metadata.namespace.as_deref().unwrap_or("");
            hw_visible.contains(ns)
                && filter.namespace.as_deref().is_none_or(|f| f == ns)
                && (filter.selector.is_empty()
                    || filter
                        .selector
                        .matches(h.metadata.labels.as_ref().unwrap_or(&Default::default())))
        })
        .map(|h| {
            let key = key_of(h.as_ref());
            let w = if wf_visible.contains(&key.0) {
                latest.get(&key).map(|w| w.as_ref())
            } else {
                None
            };
            Tile::new(h, w, agent(h))
        })
        .collect();
    tiles.sort_unstable_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    tiles
}

/// How many tiles of each colour, in the legend's order.
pub fn counts(tiles: &[Tile]) -> Vec<(&'static str, usize)> {
    let mut counts: Vec<(&'static str, usize)> = [
        "provisioning",
        "succeeded",
        "failed",
        "cancelling",
        "canceled",
        "idle",
    ]
    .into_iter()
    .map(|c| (c, 0))
    .collect();
    for t in tiles {
        if let Some(c) = counts.iter_mut().find(|(c, _)| *c == t.class) {
            c.1 += 1;
        }
    }
    counts
}

struct MachinesView {
    tiles: Vec<Tile>,
    namespaces: Vec<String>,
    counts: Vec<(&'static str, usize)>,
    hw_visible: Namespaces,
    wf_visible: Namespaces,
    filter: MachineFilter,
}

impl AppState {
    async fn machines_view(
        &self,
        s: &Session,
        q: &MachinesQuery,
    ) -> Result<MachinesView, PageError> {
        self.synced()?;
        let filter = q.filter()?;
        let cache = &self.inner.cache;
        let all = cache.hardware.all();
        let known: BTreeSet<String> = namespaces_of(all.iter());
        let hw_visible = self
            .visible(
                &s.user,
                crate::access::GROUP,
                "hardware",
                filter.namespace.as_deref(),
                known.iter().cloned(),
            )
            .await?;
        let wf_visible = self
            .visible_or_none(
                &s.user,
                "workflows",
                filter.namespace.as_deref(),
                known.iter().cloned(),
            )
            .await?;
        let latest = cache.latest_workflows();
        let tiles = tiles(&all, &latest, &hw_visible, &wf_visible, &filter, |h| {
            cache.presence.of(h)
        });
        let counts = counts(&tiles);
        let namespaces = known
            .into_iter()
            .filter(|n| hw_visible.contains(n))
            .collect();
        Ok(MachinesView {
            tiles,
            namespaces,
            counts,
            hw_visible,
            wf_visible,
            filter,
        })
    }

    /// Renders the machines page for `headers`' session (the benchmark measures this).
    pub async fn machines_page(&self, headers: &HeaderMap, q: &MachinesQuery) -> PageResult {
        let s = Session::from_headers(self, headers, "/").await?;
        self.render_machines(&s, q).await
    }

    async fn render_machines(&self, s: &Session, q: &MachinesQuery) -> PageResult {
        let seq = self.inner.live.seq();
        let v = self.machines_view(s, q).await?;
        let live = format!(
            "/live/machines?ns={}&labels={}&since={seq}",
            encode(nonempty(&q.ns).unwrap_or("")),
            encode(q.labels.as_deref().unwrap_or(""))
        );
        let page = MachinesPage {
            layout: self.layout(s, "Machines", "machines", live),
            tiles: &v.tiles,
            namespaces: v.namespaces,
            ns: nonempty(&q.ns).unwrap_or("").to_string(),
            labels: q.labels.clone().unwrap_or_default(),
            counts: v.counts,
        };
        Ok(html(StatusCode::OK, &page))
    }
}

pub(super) async fn page(
    State(st): State<AppState>,
    Query(q): Query<MachinesQuery>,
    session: Result<Session, PageError>,
) -> Response {
    let r = async { st.render_machines(&session?, &q).await }.await;
    st.done("machines", r)
}

pub(super) async fn live(
    State(st): State<AppState>,
    Query(q): Query<MachinesQuery>,
    session: Result<Session, PageError>,
) -> Response {
    let r = async {
        let s = session?;
        let v = st.machines_view(&s, &q).await?;
        st.sse(
            &s,
            Filter::Machines {
                namespaces: v.hw_visible,
                workflows: v.wf_visible,
                namespace: v.filter.namespace,
                selector: v.filter.selector,
            },
            q.since,
        )
    }
    .await;
    st.done("live", r)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn hw(ns: &str, name: &str, labels: serde_json::Value) -> Arc<Hardware> {
        Arc::new(
            tink_api::from_value(json!({
                "apiVersion": "tinkerbell.org/v1alpha2", "kind": "Hardware",
                "metadata": {"name": name, "namespace": ns, "labels": labels},
                "spec": {"networkInterfaces": {"02:00:00:00:00:01": {}}},
            }))
            .unwrap(),
        )
    }

    fn wf(ns: &str, name: &str, machine: &str, state: &str) -> Arc<Workflow> {
        Arc::new(
            tink_api::from_value(json!({
                "apiVersion": "tinkerbell.org/v1alpha2", "kind": "Workflow",
                "metadata": {"name": name, "namespace": ns},
                "spec": {"hardwareRef": {"name": machine}, "templateRef": {"name": "t"}},
                "status": {"state": state},
            }))
            .unwrap(),
        )
    }

    fn some(ns: &[&str]) -> Namespaces {
        Namespaces::Some(ns.iter().map(|s| s.to_string()).collect())
    }

    #[test]
    fn tiles_are_the_visible_matching_machines_sorted_by_namespace_and_name() {
        let all = vec![
            hw("b", "m2", json!({"rack": "r1"})),
            hw("a", "m9", json!({"rack": "r2"})),
            hw("a", "m1", json!({"rack": "r1"})),
            hw("c", "m0", json!({"rack": "r1"})),
        ];
        let latest: HashMap<Key, Arc<Workflow>> = [
            (("a".into(), "m1".into()), wf("a", "w1", "m1", "Failed")),
            (("b".into(), "m2".into()), wf("b", "w2", "m2", "Running")),
        ]
        .into();
        let names = |t: &[Tile]| {
            t.iter()
                .map(|t| format!("{}/{}", t.namespace, t.name))
                .collect::<Vec<_>>()
        };
        let all_of = MachineFilter::default();
        let t = tiles(
            &all,
            &latest,
            &some(&["a", "b"]),
            &Namespaces::All,
            &all_of,
            |_| "unknown",
        );
        assert_eq!(names(&t), ["a/m1", "a/m9", "b/m2"], "c is not visible");
        assert_eq!(t[0].class, "failed");
        assert_eq!(t[0].workflow.as_deref(), Some("w1"));
        assert_eq!(t[1].class, "idle");
        // Where the user may not list workflows, the tile does not name them.
        let t = tiles(
            &all,
            &latest,
            &Namespaces::All,
            &some(&["a"]),
            &all_of,
            |_| "connected",
        );
        assert_eq!(names(&t), ["a/m1", "a/m9", "b/m2", "c/m0"]);
        assert_eq!(t[2].workflow, None);
        assert_eq!(t[2].class, "idle");
        assert_eq!(t[2].agent, "connected");
        // Namespace and label filters.
        let filter = MachinesQuery {
            ns: Some(" a ".into()),
            labels: Some("rack=r1".into()),
            since: None,
        }
        .filter()
        .unwrap();
        assert_eq!(filter.namespace.as_deref(), Some("a"));
        let t = tiles(
            &all,
            &latest,
            &Namespaces::All,
            &Namespaces::All,
            &filter,
            |_| "unknown",
        );
        assert_eq!(names(&t), ["a/m1"]);
        assert_eq!(
            counts(&tiles(
                &all,
                &latest,
                &Namespaces::All,
                &Namespaces::All,
                &all_of,
                |_| "unknown"
            )),
            [
                ("provisioning", 1),
                ("succeeded", 0),
                ("failed", 1),
                ("cancelling", 0),
                ("canceled", 0),
                ("idle", 2),
            ]
        );
    }

    #[test]
    fn machine_filters_are_checked_once() {
        let q = |ns: &str, labels: &str| MachinesQuery {
            ns: Some(ns.into()),
            labels: Some(labels.into()),
            since: None,
        };
        assert_eq!(q("", "").filter().unwrap(), MachineFilter::default());
        assert!(
            matches!(q("A/b", "").filter(), Err(PageError::BadRequest(m)) if m.contains("namespace"))
        );
        assert!(
            matches!(q("a", "<x>").filter(), Err(PageError::BadRequest(m)) if m.contains("label selector"))
        );
    }
}
