//! The askama templates (services/console/templates/): every value is HTML-escaped; nothing a
//! user or an object supplied is ever marked safe.

use askama::Template;

use crate::views::{Bmc, Detail, EventRow, Row, Tile};

/// What every page's frame shows.
#[derive(Debug, Clone, Default)]
pub struct Layout {
    /// The page title.
    pub title: String,
    /// The user's name (empty on the login page).
    pub user: String,
    /// The session's anti-CSRF value, posted back by every form.
    pub csrf: String,
    /// The live-update stream of the page, or empty.
    pub live: String,
    /// The navigation entry to highlight.
    pub nav: &'static str,
    /// The search box's text.
    pub q: String,
}

/// The machines page.
#[derive(Template)]
#[template(path = "machines.html")]
pub struct MachinesPage<'a> {
    /// Frame.
    pub layout: Layout,
    /// Tiles.
    pub tiles: &'a [Tile],
    /// Namespaces to filter on.
    pub namespaces: Vec<String>,
    /// The namespace filter.
    pub ns: String,
    /// The label filter.
    pub labels: String,
    /// Counts per class, for the legend.
    pub counts: Vec<(&'static str, usize)>,
}

/// One tile (also pushed live).
#[derive(Template)]
#[template(path = "tile.html")]
pub struct TileFragment<'a> {
    /// The tile.
    pub t: &'a Tile,
}

/// A machine's page: its tile, its latest workflow, its BMC and the power actions.
#[derive(Template)]
#[template(path = "machine.html")]
pub struct MachinePage<'a> {
    /// Frame.
    pub layout: Layout,
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// Its tile.
    pub t: &'a Tile,
    /// Whether the user may list Workflows there.
    pub workflows_allowed: bool,
    /// Whether the Hardware has a `bmcRef`.
    pub has_bmc: bool,
    /// Whether the user may list BMC Machines and Jobs there.
    pub bmc_allowed: bool,
    /// Its BMC.
    pub b: &'a Bmc,
    /// The power actions: form value, label, whether it takes the machine down.
    pub actions: Vec<(&'static str, &'static str, bool)>,
    /// A message after an action.
    pub notice: String,
    /// Its boot log: the last lines it sent by syslog.
    pub boot_log: crate::syslog::BootLog,
    /// Its inventory, as its agent reported it.
    pub inventory: Option<crate::views::InventoryView>,
    /// A discovered machine: whether it is approved (`None`: not discovered).
    pub approved: Option<bool>,
}

/// The BMC part of a machine's page (also pushed live).
#[derive(Template)]
#[template(path = "bmc.html")]
pub struct BmcFragment<'a> {
    /// The BMC.
    pub b: &'a Bmc,
    /// The machine's namespace.
    pub namespace: &'a str,
    /// The machine's name.
    pub name: &'a str,
}

/// The confirmation of a power action that takes a machine down.
#[derive(Template)]
#[template(path = "power_confirm.html")]
pub struct PowerConfirmPage {
    /// Frame.
    pub layout: Layout,
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// The action's form value.
    pub action: &'static str,
    /// Its label.
    pub label: &'static str,
    /// What it does to the machine.
    pub warning: String,
    /// UEFI PXE boot.
    pub efi: bool,
}

/// The workflows page.
#[derive(Template)]
#[template(path = "workflows.html")]
pub struct WorkflowsPage<'a> {
    /// Frame.
    pub layout: Layout,
    /// Rows.
    pub rows: &'a [Row],
    /// Namespaces to filter on.
    pub namespaces: Vec<String>,
    /// States to filter on.
    pub states: Vec<&'static str>,
    /// The namespace filter.
    pub ns: String,
    /// The state filter.
    pub state: String,
    /// The name filter.
    pub name: String,
    /// The sort key.
    pub sort: String,
    /// The query string without `sort`, for the header links.
    pub base: String,
    /// Rows left out beyond the page limit.
    pub more: usize,
}

/// One workflow row (also pushed live).
#[derive(Template)]
#[template(path = "row.html")]
pub struct RowFragment<'a> {
    /// The row.
    pub w: &'a Row,
}

/// A workflow's page.
#[derive(Template)]
#[template(path = "workflow.html")]
pub struct WorkflowPage<'a> {
    /// Frame.
    pub layout: Layout,
    /// The live part.
    pub d: &'a Detail,
    /// The machine.
    pub hardware: String,
    /// The template.
    pub template: String,
    /// Whether the user may list Events there.
    pub events_allowed: bool,
    /// Events.
    pub events: Vec<EventRow>,
    /// Whether action logs can be read (a tink-server is configured).
    pub logs: bool,
    /// A message after an action (cancel requested, ...).
    pub notice: String,
}

/// The live part of a workflow page (also pushed live).
#[derive(Template)]
#[template(path = "workflow_live.html")]
pub struct DetailFragment<'a> {
    /// The detail.
    pub d: &'a Detail,
}

/// One Event row (also pushed live).
#[derive(Template)]
#[template(path = "event.html")]
pub struct EventFragment<'a> {
    /// The row.
    pub e: &'a EventRow,
}

/// One template in the list.
#[derive(Debug, Clone)]
pub struct TemplateItem {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// Its actions' names.
    pub actions: String,
}

/// The templates page.
#[derive(Template)]
#[template(path = "templates.html")]
pub struct TemplatesPage {
    /// Frame.
    pub layout: Layout,
    /// Templates.
    pub items: Vec<TemplateItem>,
}

/// One action of a template (source or rendered).
#[derive(Debug, Clone)]
pub struct ActionItem {
    /// Name.
    pub name: String,
    /// Image.
    pub image: String,
    /// Command, args and environment, one per line.
    pub details: String,
}

/// A template's page, with its preview.
#[derive(Template)]
#[template(path = "template.html")]
pub struct TemplatePage {
    /// Frame.
    pub layout: Layout,
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// The source actions.
    pub source: Vec<ActionItem>,
    /// Machines of the namespace to preview against (at most 500).
    pub machines: Vec<String>,
    /// The chosen machine.
    pub hardware: String,
    /// The templateData used (JSON).
    pub data: String,
    /// The rendered actions.
    pub rendered: Vec<ActionItem>,
    /// The rendering error, or why there is no preview.
    pub error: String,
}

/// A search hit.
#[derive(Debug, Clone)]
pub struct Hit {
    /// `Hardware`, `Workflow`, `Template`.
    pub kind: &'static str,
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// Where it matched (`name`, a MAC, an IP).
    pub matched: String,
    /// The link.
    pub href: String,
}

/// The search page.
#[derive(Template)]
#[template(path = "search.html")]
pub struct SearchPage {
    /// Frame.
    pub layout: Layout,
    /// Hits.
    pub hits: Vec<Hit>,
    /// Whether hits were left out.
    pub truncated: bool,
}

/// The login page.
#[derive(Template)]
#[template(path = "login.html")]
pub struct LoginPage {
    /// Frame.
    pub layout: Layout,
    /// Where to go after logging in.
    pub next: String,
    /// Why the last attempt failed.
    pub error: String,
}

/// A workflow's action output.
#[derive(Template)]
#[template(path = "logs.html")]
pub struct LogsPage {
    /// Frame.
    pub layout: Layout,
    /// Namespace.
    pub namespace: String,
    /// Workflow.
    pub name: String,
    /// The workflow's actions (for the filter).
    pub actions: Vec<String>,
    /// The chosen action, or empty.
    pub action: String,
    /// The lines.
    pub lines: Vec<crate::logs::Line>,
    /// Whether lines were left out.
    pub truncated: bool,
    /// Whether the workflow was dispatched (else there is no output yet).
    pub dispatched: bool,
}

/// An error page.
#[derive(Template)]
#[template(path = "error.html")]
pub struct ErrorPage {
    /// Frame.
    pub layout: Layout,
    /// The status code.
    pub status: u16,
    /// The message.
    pub message: String,
}

/// A rollout (WorkflowSet) in the list, and the detail page's header.
#[derive(Debug, Clone)]
pub struct RolloutItem {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// Its Template.
    pub template: String,
    /// Progressing, Paused, Halted, Completed, or Waiting (no status for this spec yet).
    pub state: String,
    /// The badge's class.
    pub class: String,
    /// Machines in the rollout.
    pub total: i32,
    /// Machines without a Workflow yet.
    pub pending: i32,
    /// Unfinished Workflows.
    pub running: i32,
    /// Succeeded Workflows.
    pub succeeded: i32,
    /// Failed Workflows.
    pub failed: i32,
    /// Selected machines not approved.
    pub unapproved: i32,
    /// `spec.maxConcurrent`.
    pub max_concurrent: i32,
    /// The failure budget in force.
    pub max_failures: i32,
    /// `spec.paused`.
    pub paused: bool,
    /// Finished machines, in percent of the total.
    pub percent: i64,
}

/// A condition of a rollout.
#[derive(Debug, Clone)]
pub struct RolloutConditionItem {
    /// Type.
    pub type_: String,
    /// True or False.
    pub status: String,
    /// Reason.
    pub reason: String,
    /// Message.
    pub message: String,
}

/// A Workflow of a rollout.
#[derive(Debug, Clone)]
pub struct RolloutWorkflowItem {
    /// The Workflow's name.
    pub name: String,
    /// Its machine.
    pub hardware: String,
    /// Its state.
    pub state: String,
    /// The badge's class.
    pub class: String,
}

/// The rollouts page.
#[derive(Template)]
#[template(path = "rollouts.html")]
pub struct RolloutsPage {
    /// Frame.
    pub layout: Layout,
    /// The namespace filter (empty: all).
    pub ns: String,
    /// The sets.
    pub items: Vec<RolloutItem>,
}

/// A rollout's page.
#[derive(Template)]
#[template(path = "rollout.html")]
pub struct RolloutPage {
    /// Frame.
    pub layout: Layout,
    /// The set.
    pub set: RolloutItem,
    /// Its conditions.
    pub conditions: Vec<RolloutConditionItem>,
    /// Its Workflows.
    pub workflows: Vec<RolloutWorkflowItem>,
    /// Why no Workflows are shown, if they are not.
    pub workflows_note: String,
}

#[cfg(test)]
mod tests {
    use askama::Template as _;
    use serde_json::json;

    use super::*;

    #[test]
    fn a_long_failure_text_is_drawn_in_lines_with_the_whole_text_on_hover() {
        let w: tink_api::v1alpha2::Workflow = tink_api::from_value(json!({
            "apiVersion": "tinkerbell.org/v1alpha2", "kind": "Workflow",
            "metadata": {"name": "wf", "namespace": "a"},
            "spec": {"hardwareRef": {"name": "m1"}, "templateRef": {"name": "t"}},
            "status": {"state": "Failed", "startedAt": "2026-01-01T00:00:00Z", "actions": [{
                "rendered": {"name": "image", "image": "img"}, "id": "image", "state": "Failed",
                "startedAt": "2026-01-01T00:00:00Z", "lastTransitioned": "2026-01-01T00:00:30Z",
                "failureReason": "NonZeroExitCode",
                "failureMessage": "exit code 1: the image could not be written to <disk> (no space left on device)",
            }]},
        }))
        .unwrap();
        let d = Detail::new(&w, false, "2026-01-01T01:00:00Z".parse().unwrap());
        let html = DetailFragment { d: &d }.render().unwrap();
        let title = html.split("<title>").nth(1).unwrap_or("");
        let title = &title[..title.find("</title>").unwrap_or(0)];
        assert!(
            title.starts_with("image: Failed 30s · NonZeroExitCode: exit code 1: the image could")
                && title.ends_with("(no space left on device)")
                && !title.contains("<disk>"),
            "the whole text, escaped: {title}"
        );
        assert!(html.matches("<tspan ").count() >= 2, "{html}");
        assert!(html.contains("dy=\"14\""), "{html}");
    }
}
