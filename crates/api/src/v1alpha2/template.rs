//! `Template`: the actions to run on a machine, rendered per Workflow.

use std::collections::BTreeMap;

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::rules;
use crate::duration::Timeout;
use crate::serde_util::empty_as_none;

/// A set of actions to run on a target machine. Every field except `actions[].name` may hold Go
/// `text/template` expressions; they are rendered with the Hardware and the Workflow's
/// `templateData` before execution.
///
/// Printer columns cannot count list items, so `kubectl get tpl` shows the first action's name
/// and image (use `-o yaml` for the full list).
#[derive(
    CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema,
)]
#[kube(
    group = "tinkerbell.org",
    version = "v1alpha2",
    kind = "Template",
    plural = "templates",
    singular = "template",
    namespaced,
    shortname = "tpl",
    category = "tinkerbell",
    derive = "PartialEq",
    derive = "Default",
    doc = "Template defines a set of actions to be run on a target machine. It is rendered with Hardware and user defined data before execution.",
    printcolumn(
        name = "First Action",
        type_ = "string",
        json_path = ".spec.actions[0].name",
        description = "Name of the first action"
    ),
    printcolumn(
        name = "Image",
        type_ = "string",
        json_path = ".spec.actions[0].image",
        description = "Image of the first action",
        priority = "1"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = template_spec_schema)]
pub struct TemplateSpec {
    /// Actions to be run on a target machine, sequentially in the order given. At least one is
    /// required; names must be unique within a Template.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(
        length(min = 1, max = 128),
        extend("x-kubernetes-validations" = [{"rule": rules::UNIQUE_ACTION_NAMES, "message": rules::UNIQUE_ACTION_NAMES_MSG}])
    )]
    pub actions: Vec<Action>,

    /// Volumes to be mounted on all actions. If an action specifies the same volume it takes
    /// precedence.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub volumes: Vec<String>,

    /// Env defines environment variables available in all actions. If an action specifies the
    /// same variable it takes precedence.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,

    /// Addition, for Templates converted from v1alpha1: a whole Tinkerbell v1alpha1 template
    /// document (`version`, `tasks[].actions[]`) whose structure depends on the data (actions
    /// inside `{{ if }}` or `{{ range }}` blocks), or that does not parse before rendering. It is
    /// rendered whole with the Workflow's data, as Tinkerbell renders it, and the actions of the
    /// result run. Set instead of `actions`, never with it.
    #[serde(
        default,
        rename = "v1alpha1Data",
        skip_serializing_if = "Option::is_none",
        deserialize_with = "empty_as_none"
    )]
    pub v1alpha1_data: Option<String>,
}

fn template_spec_schema(schema: &mut schemars::Schema) {
    let rules = serde_json::json!([
        {"rule": rules::ACTIONS_OR_DATA, "message": rules::ACTIONS_OR_DATA_MSG}
    ]);
    schema.insert("x-kubernetes-validations".into(), rules);
}

/// An individual action to be run on a target machine, as one container.
///
/// Addition to seeds/000: `timeout` (see the field).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Action {
    /// Name is a name for the action, unique within its Template. Not templated.
    #[schemars(length(min = 1, max = 256))]
    pub name: String,

    /// Image is an OCI image.
    #[schemars(length(min = 1))]
    pub image: String,

    /// Cmd defines the command to use when launching the image (the container entrypoint).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "empty_as_none"
    )]
    pub cmd: Option<String>,

    /// Args are a set of arguments to be passed to the container on launch.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,

    /// Env defines environment variables used when launching the container.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,

    /// Volumes defines the volumes to mount into the container, as
    /// `{SRC-VOLUME-NAME | SRC-HOST-DIR}:TGT-CONTAINER-DIR[:OPTIONS]`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub volumes: Vec<String>,

    /// NetworkNamespace defines the network namespace to run the container in; `host` gives
    /// access to the host network namespace.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "empty_as_none"
    )]
    pub network_namespace: Option<String>,

    /// Addition: the PID namespace to run the container in; `host` shares the host's process
    /// namespace (Tinkerbell's `pid: host`, which kexec and waitdaemon actions need). Carried to
    /// the agent as the protocol's `ns.pid`.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "empty_as_none"
    )]
    pub pid_namespace: Option<String>,

    /// Addition (seeds/004 "individual Workflow Actions execute within the configured
    /// timeout"): how long the action may run once started, in Go duration syntax (`10m`,
    /// `1h30m`, `600s`). Absent or `0` means no per-action limit (the Workflow's `timeout` still
    /// applies). The controller fails the Workflow with reason `ActionTimeout` when it trips.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<Timeout>,
}
