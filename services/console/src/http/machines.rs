//! The machines page (`/`) and its live stream (`/live/machines`): tiles coloured by each
//! machine's latest workflow, with their BMC's power state, filtered by namespace and labels;
//! a machine's page (`/machines/{ns}/{name}`) with its BMC's power state and last Job, its live
//! stream, and the power actions (`POST /machines/{ns}/{name}/power`: a `bmc.tinkerbell.org`
//! Job created with the user's own token). The handlers check access and read the cache;
//! [`tiles`], [`counts`] and [`PowerChoice`] are pure.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::response::Response;
use http::{HeaderMap, StatusCode};
use kube::api::{Api, PostParams};
use serde::Deserialize;
use tink_api::bmc::plan::Plan;
use tink_api::bmc::{BootDevice, Job as BmcJob, PowerAction};
use tink_api::v1alpha2::{Hardware, Workflow};

use super::error::{PageError, PageResult, encode, html, kube_error, redirect};
use super::query::{namespaces_of, nonempty, object_name};
use super::session::{Session, check_post, field, form};
use super::state::{AppState, TinkKind};
use super::workflows::LiveQuery;
use crate::access::Permission;
use crate::cache::{BmcApi, Key, key_of};
use crate::live::{Filter, Namespaces, bmc_permission};
use crate::pages::{MachinePage, MachinesPage, PowerConfirmPage};
use crate::views::{Bmc, Selector, Tile};

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
/// the user may list workflows (`wf_visible`), and shows its `bmc` only where the user may list
/// BMC Machines and Jobs (`bmc_visible`).
#[allow(clippy::too_many_arguments)] // each a part of what a tile shows, or of who may see it
pub fn tiles(
    hardware: &[Arc<Hardware>],
    latest: &HashMap<Key, Arc<Workflow>>,
    hw_visible: &Namespaces,
    wf_visible: &Namespaces,
    bmc_visible: &Namespaces,
    filter: &MachineFilter,
    agent: impl Fn(&Hardware) -> &'static str,
    bmc: impl Fn(&Hardware) -> Bmc,
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
            let tile = Tile::new(h, w, agent(h));
            if h.spec.bmc_ref.is_some() && bmc_visible.contains(&key.0) {
                tile.with_bmc(&bmc(h))
            } else {
                tile
            }
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
    bmc_visible: Namespaces,
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
        let bmc_visible = self
            .bmc_visible(&s.user, filter.namespace.as_deref(), &known)
            .await?;
        let latest = cache.latest_workflows();
        let now = jiff::Timestamp::now();
        let tiles = tiles(
            &all,
            &latest,
            &hw_visible,
            &wf_visible,
            &bmc_visible,
            &filter,
            |h| cache.presence.of(h),
            |h| cache.bmc(h, now),
        );
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
            bmc_visible,
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
                bmc: v.bmc_visible,
                namespace: v.filter.namespace,
                selector: v.filter.selector,
            },
            q.since,
        )
    }
    .await;
    st.done("live", r)
}

/// A power action of the machine page's form (`action=`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PowerChoice {
    /// Power on.
    On,
    /// Graceful (ACPI) power off.
    Soft,
    /// Hard power off.
    Off,
    /// Power off, then on.
    Cycle,
    /// Hard reset.
    Reset,
    /// A one-time PXE boot, then a power cycle (boot into the OSIE now).
    PxeCycle,
}

impl PowerChoice {
    /// Every action, in the form's order.
    pub const ALL: [PowerChoice; 6] = [
        PowerChoice::On,
        PowerChoice::Soft,
        PowerChoice::Off,
        PowerChoice::Cycle,
        PowerChoice::Reset,
        PowerChoice::PxeCycle,
    ];

    /// The form value.
    pub fn as_str(self) -> &'static str {
        match self {
            PowerChoice::On => "on",
            PowerChoice::Soft => "soft",
            PowerChoice::Off => "off",
            PowerChoice::Cycle => "cycle",
            PowerChoice::Reset => "reset",
            PowerChoice::PxeCycle => "pxe-cycle",
        }
    }

    /// The button's label.
    pub fn label(self) -> &'static str {
        match self {
            PowerChoice::On => "Power on",
            PowerChoice::Soft => "Shut down (soft)",
            PowerChoice::Off => "Power off",
            PowerChoice::Cycle => "Power cycle",
            PowerChoice::Reset => "Reset",
            PowerChoice::PxeCycle => "PXE boot once + cycle",
        }
    }

    /// What it does to a running machine, when it takes it down (then the form asks first).
    pub fn warning(self) -> Option<&'static str> {
        match self {
            PowerChoice::On => None,
            PowerChoice::Soft => Some(
                "The operating system is asked to shut down (ACPI); whatever runs on the machine stops.",
            ),
            PowerChoice::Off => Some(
                "Power is cut at once, without shutting the operating system down: unsaved data is lost.",
            ),
            PowerChoice::Cycle => Some(
                "Power is cut, then restored: the machine restarts without shutting its operating system down.",
            ),
            PowerChoice::Reset => {
                Some("The machine is reset at once, without shutting its operating system down.")
            }
            PowerChoice::PxeCycle => Some(
                "The next boot is set to the network (PXE), then power is cut and restored: the machine restarts into whatever netboot offers it.",
            ),
        }
    }

    /// `action=`: one of [`PowerChoice::ALL`], exactly.
    pub fn parse(text: Option<&str>) -> Result<PowerChoice, PageError> {
        let text = text.unwrap_or("");
        PowerChoice::ALL
            .into_iter()
            .find(|c| c.as_str() == text)
            .ok_or_else(|| {
                PageError::BadRequest(format!(
                    "form field `action`: {text:?} is not one of {}",
                    PowerChoice::ALL.map(PowerChoice::as_str).join(", ")
                ))
            })
    }

    /// The Job's tasks and name (`tinkctl bmc` makes the same Jobs); `efi`: a UEFI PXE boot.
    pub fn plan(self, efi: bool) -> Plan {
        match self {
            PowerChoice::On => Plan::power(PowerAction::On),
            PowerChoice::Soft => Plan::power(PowerAction::Soft),
            PowerChoice::Off => Plan::power(PowerAction::Off),
            PowerChoice::Cycle => Plan::power(PowerAction::Cycle),
            PowerChoice::Reset => Plan::power(PowerAction::Reset),
            PowerChoice::PxeCycle => Plan::boot(BootDevice::Pxe, efi, true),
        }
    }
}

/// Query of a machine's page.
#[derive(Debug, Default, Deserialize)]
pub struct MachineQuery {
    /// A notice key after an action (`power`).
    pub notice: Option<String>,
    /// The Job the action created.
    pub job: Option<String>,
}

pub(super) async fn machine(
    State(st): State<AppState>,
    Path((ns, name)): Path<(String, String)>,
    Query(q): Query<MachineQuery>,
    session: Result<Session, PageError>,
) -> Response {
    let r = async {
        let s = st
            .object_request(session, TinkKind::Hardware, (&ns, &name), "get", |_| {
                st.synced()
            })
            .await?;
        let cache = &st.inner.cache;
        let seq = st.inner.live.seq();
        let hw = cache
            .machine(&ns, &name)
            .ok_or_else(|| PageError::NotFound(format!("machine {ns}/{name} does not exist")))?;
        let access = &st.inner.access;
        let workflows_allowed = access
            .may(&s.user, &Permission::tink("list", "workflows", &ns, ""))
            .await?;
        let bmc = cache.bmc(&hw, jiff::Timestamp::now());
        // Where the API is unavailable the page says so to anyone: it names no object.
        let bmc_allowed =
            matches!(bmc, Bmc::Unavailable(_)) || st.bmc_allowed(&s.user, &ns).await?;
        let latest = if workflows_allowed {
            cache.latest_workflow(&ns, &name)
        } else {
            None
        };
        let mut tile = Tile::new(&hw, latest.as_deref(), cache.presence.of(&hw));
        if bmc_allowed {
            tile = tile.with_bmc(&bmc);
        }
        let notice = match (q.notice.as_deref(), nonempty(&q.job)) {
            (Some("power"), Some(job)) if object_name("job", job).is_ok() => {
                format!("Job {job} created: the BMC controller runs it; its progress shows below.")
            }
            _ => String::new(),
        };
        let boot_log = cache.syslog.last_lines(&ns, &name).await;
        let page = MachinePage {
            layout: st.layout(
                &s,
                format!("Machine {name}"),
                "machines",
                format!("/live/machines/{ns}/{name}?since={seq}"),
            ),
            namespace: ns.clone(),
            name: name.clone(),
            t: &tile,
            workflows_allowed,
            has_bmc: bmc != Bmc::None,
            bmc_allowed,
            b: &bmc,
            actions: PowerChoice::ALL
                .iter()
                .map(|c| (c.as_str(), c.label(), c.warning().is_some()))
                .collect(),
            notice,
            boot_log,
            inventory: crate::views::InventoryView::of(&hw),
            approved: hw.spec.discovery.as_ref().map(|d| d.approved),
        };
        Ok(html(StatusCode::OK, &page))
    }
    .await;
    st.done("machine", r)
}

pub(super) async fn live_machine(
    State(st): State<AppState>,
    Path((ns, name)): Path<(String, String)>,
    Query(q): Query<LiveQuery>,
    session: Result<Session, PageError>,
) -> Response {
    let r = async {
        let s = st
            .object_request(session, TinkKind::Hardware, (&ns, &name), "get", |_| Ok(()))
            .await?;
        let workflows = st
            .inner
            .access
            .may(&s.user, &Permission::tink("list", "workflows", &ns, ""))
            .await?;
        let bmc = st.bmc_allowed(&s.user, &ns).await?;
        st.sse(
            &s,
            Filter::Machine {
                namespace: ns,
                name,
                workflows,
                bmc,
            },
            q.since,
        )
    }
    .await;
    st.done("live", r)
}

/// `POST /machines/{ns}/{name}/power`: a BMC Job for the machine's `bmcRef` Machine, created
/// with the user's own token (the user needs `create` on `jobs.bmc.tinkerbell.org` there), after
/// a confirmation for the actions that take the machine down.
pub(super) async fn power(
    State(st): State<AppState>,
    headers: HeaderMap,
    Path((ns, name)): Path<(String, String)>,
    session: Result<Session, PageError>,
    body: Bytes,
) -> Response {
    let r = async {
        let fields = form(&body);
        let s = st
            .object_request(session, TinkKind::Hardware, (&ns, &name), "get", |s| {
                check_post(&headers, Some(s), &fields)?;
                st.synced()
            })
            .await?;
        let choice = PowerChoice::parse(field(&fields, "action"))?;
        let efi = field(&fields, "efi") == Some("1");
        let cache = &st.inner.cache;
        let hw = cache
            .machine(&ns, &name)
            .ok_or_else(|| PageError::NotFound(format!("machine {ns}/{name} does not exist")))?;
        let machine = hw
            .spec
            .bmc_ref
            .as_ref()
            .map(|r| r.name.clone())
            .filter(|n| !n.is_empty())
            .ok_or_else(|| {
                PageError::BadRequest(format!(
                    "machine {ns}/{name} has no spec.bmcRef: there is no BMC to act on"
                ))
            })?;
        if let BmcApi::Unavailable(why) = cache.bmc_api() {
            return Err(PageError::Unavailable(why));
        }
        if cache.bmc_machine(&ns, &machine).is_none() {
            return Err(PageError::NotFound(format!(
                "the BMC Machine {ns}/{machine} that machine {ns}/{name} names (spec.bmcRef) does not exist"
            )));
        }
        // A clear refusal naming the permission before anything else; the API server decides
        // again when the Job is created with the user's token.
        st.inner
            .access
            .authorize(&s.user, &bmc_permission("create", "jobs", &ns))
            .await?;
        if let Some(warning) = choice.warning()
            && field(&fields, "confirm") != Some("yes")
        {
            let page = PowerConfirmPage {
                layout: st.layout(&s, choice.label(), "machines", String::new()),
                namespace: ns.clone(),
                name: name.clone(),
                action: choice.as_str(),
                label: choice.label(),
                warning: warning.to_string(),
                efi,
            };
            return Ok(html(StatusCode::OK, &page));
        }
        let job = choice.plan(efi).job(&ns, &machine);
        let api: Api<BmcJob> = Api::namespaced(st.user_client(&s.token)?, &ns);
        let created = api.create(&PostParams::default(), &job).await.map_err(|e| {
            kube_error(
                &format!("cannot create a BMC Job for Machine {ns}/{machine}"),
                e,
            )
        })?;
        let job_name = created.metadata.name.unwrap_or_default();
        tracing::info!(
            user = %s.user.name,
            machine = %format!("{ns}/{name}"),
            bmc = %machine,
            job = %job_name,
            action = choice.as_str(),
            "power action from the console"
        );
        Ok(redirect(&format!(
            "/machines/{ns}/{name}?notice=power&job={}",
            encode(&job_name)
        )))
    }
    .await;
    st.done("power", r)
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
            &Namespaces::All,
            &all_of,
            |_| "unknown",
            |_| Bmc::None,
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
            &Namespaces::All,
            &all_of,
            |_| "connected",
            |_| Bmc::None,
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
            &Namespaces::All,
            &filter,
            |_| "unknown",
            |_| Bmc::None,
        );
        assert_eq!(names(&t), ["a/m1"]);
        assert_eq!(
            counts(&tiles(
                &all,
                &latest,
                &Namespaces::All,
                &Namespaces::All,
                &Namespaces::All,
                &all_of,
                |_| "unknown",
                |_| Bmc::None,
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
