//! `WorkflowRuleSet`: Workflows created from inventory matches.
//!
//! A rule set names conditions on a machine's inventory and the Workflow to create when a
//! machine meets them. The controller (services/controller `rules`) evaluates it against every
//! Hardware of its namespace that is approved (`HardwareSpec::approved`) and carries an
//! inventory reported by its own authenticated agent (`HardwareStatus::authenticated_inventory`,
//! `status.inventorySource: Agent`); an enrollment inventory, taken without credentials, never
//! fires a rule. It creates at most one Workflow per machine per `metadata.generation` of the
//! rule set. The pattern language is compiled and evaluated by the `tink-rules` crate, which
//! also documents its semantics; the webhook refuses a rule set whose patterns do not compile,
//! naming the field path (`spec.rules[2].match.blockDevices.count.min: ...`).
//!
//! # Upstream names, and where this departs
//!
//! Tinkerbell (tinkerbell/tinkerbell, `api/v1alpha1/tinkerbell/workflowruleset.go`) has a
//! `WorkflowRuleSet` (short name `wrs`) with `spec.rules` (a list of Quamina pattern strings,
//! any one matching is enough) and `spec.workflow` (`namespace`, `disabled`, `addAttributes`,
//! `template.ref`, `template.agentValue`, `template.kvs`); its newer `Policy` kind moves the
//! same thing to `spec.rules.workflowAutoCreation[]` with structured patterns. Kept: the kind,
//! short name and category, `spec.rules` as an OR-list of rules with the fields of one rule
//! ANDed (as both upstream kinds do), `spec.workflow` as the Workflow to create, and Quamina's
//! vocabulary where it fits (exact value, `prefix`, `exists`, numeric ranges, an array matching
//! when any element does). Departures, and why:
//! - A rule is a structured object (`match`: attribute path -> pattern), not a Quamina string:
//!   the CRD schema, `kubectl explain` and admission can check it and name the failing field,
//!   which a JSON-in-a-string cannot; upstream's `Policy` made the same move.
//! - `count` (how many list elements, optionally filtered by `where`) is added: "at least two
//!   disks" is a common provisioning rule and Quamina cannot express it.
//! - `spec.workflow` uses v1alpha2's Workflow names (`templateRef`, `templateData`, `timeout`)
//!   instead of `template.ref`/`template.kvs`, and has no `namespace` (the Workflow is created
//!   in the rule set's namespace, which is also the Hardware's: `hardwareRef` is a local
//!   reference), no `agentValue` (v1alpha2 binds the agent through `hardwareRef`), no
//!   `addAttributes` (the inventory is already on the Hardware the Workflow names) and no
//!   `disabled` (v1alpha2 Workflows have no disabled state).
//! - Upstream evaluates rules once, when an unknown agent first connects. Here the controller
//!   evaluates them whenever the rule set or a Hardware changes, and the rule set's generation
//!   is the unit of "once": editing the rules (a new generation) may fire again on every
//!   matching machine, which is how an operator asks for a re-run.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Serialize};

use super::LocalObjectReference;
use crate::duration::Timeout;

/// The conditions under which a Workflow is created for a machine, and that Workflow.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "tinkerbell.org",
    version = "v1alpha2",
    kind = "WorkflowRuleSet",
    plural = "workflowrulesets",
    singular = "workflowruleset",
    namespaced,
    shortname = "wrs",
    category = "tinkerbell",
    status = "WorkflowRuleSetStatus",
    derive = "PartialEq",
    derive = "Default",
    doc = "WorkflowRuleSet creates a Workflow from a Template for each approved machine whose authenticated inventory matches one of its rules, at most once per machine per generation of the rule set.",
    printcolumn(
        name = "Template",
        type_ = "string",
        json_path = ".spec.workflow.templateRef.name",
        description = "Template of the Workflows it creates"
    ),
    printcolumn(
        name = "Matched",
        type_ = "integer",
        json_path = ".status.matched",
        description = "Machines matching in the observed generation"
    ),
    printcolumn(
        name = "Created",
        type_ = "integer",
        json_path = ".status.created",
        description = "Machines that got their Workflow in the observed generation"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct WorkflowRuleSetSpec {
    /// Rules are alternatives: a machine matches the rule set when it matches any one of them
    /// (the first matching rule is named in the Events). At least one.
    #[schemars(length(min = 1, max = 64))]
    pub rules: Vec<WorkflowRule>,

    /// Workflow is the Workflow created for a matching machine, with `hardwareRef` set to it.
    pub workflow: WorkflowRuleSetWorkflow,
}

/// One rule: every entry of `match` must hold.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorkflowRule {
    /// Name of the rule, used in Events; defaults to `rules[<index>]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63))]
    pub name: Option<String>,

    /// Match maps an attribute path of the machine's in-band inventory (Tinkerbell's
    /// `Hardware.status.attributes.inBand` shape, dotted camelCase: `chassis.vendor`,
    /// `cpu.totalThreads`, `memory.totalBytes`, `blockDevices`, `blockDevices.driveType`) to
    /// the pattern its value must satisfy. A path through a list reaches every element (the
    /// pattern holds when any element satisfies it). All entries must hold. At least one.
    #[serde(rename = "match")]
    #[schemars(schema_with = "match_schema")]
    pub match_: BTreeMap<String, FieldPattern>,
}

/// `match`: an object whose keys are attribute paths and whose values are [`FieldPattern`]s.
fn match_schema(generator: &mut SchemaGenerator) -> Schema {
    let pattern = generator.subschema_for::<FieldPattern>();
    json_schema!({
        "type": "object",
        "minProperties": 1,
        "maxProperties": 32,
        "additionalProperties": pattern,
    })
}

/// `where`: an object whose keys are paths inside a list element and whose values are
/// [`ValuePattern`]s.
fn where_schema(generator: &mut SchemaGenerator) -> Schema {
    let pattern = generator.subschema_for::<ValuePattern>();
    json_schema!({
        "type": "object",
        "maxProperties": 16,
        "additionalProperties": pattern,
    })
}

/// The pattern of one attribute path: value conditions (all must hold on the same value), or a
/// `count` of list elements (optionally only those satisfying `where`), never both.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FieldPattern {
    /// The value equals this, exactly (numbers and booleans are compared in their JSON
    /// spelling: `"8"`, `"true"`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub equals: Option<String>,
    /// The value equals one of these, exactly.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 256))]
    pub one_of: Vec<String>,
    /// The value is a string starting with this (case-sensitive).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix: Option<String>,
    /// The value is a number at least this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min: Option<i64>,
    /// The value is a number at most this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max: Option<i64>,
    /// `true`: the path has a value; `false`: it has none (absent, or an empty list).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exists: Option<bool>,
    /// How many values the path reaches (list elements), counting only those satisfying
    /// `where` when it is given. Not combined with the value conditions above.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count: Option<CountRange>,
    /// With `count` (alone it means `count: {min: 1}`): which elements are counted; paths are
    /// relative to the element (`driveType`, `sizeBytes`), every entry must hold.
    #[serde(default, rename = "where", skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(schema_with = "where_schema")]
    pub where_: BTreeMap<String, ValuePattern>,
}

/// The conditions on one value inside a `where`: all must hold on the same value.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ValuePattern {
    /// The value equals this, exactly.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub equals: Option<String>,
    /// The value equals one of these, exactly.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 256))]
    pub one_of: Vec<String>,
    /// The value is a string starting with this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix: Option<String>,
    /// The value is a number at least this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min: Option<i64>,
    /// The value is a number at most this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max: Option<i64>,
    /// `true`: the path has a value; `false`: it has none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exists: Option<bool>,
}

/// An inclusive range of counts; an absent bound is open.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CountRange {
    /// At least this many.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min: Option<u32>,
    /// At most this many.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max: Option<u32>,
}

/// The Workflow a rule set creates for a matching machine, in the rule set's namespace.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorkflowRuleSetWorkflow {
    /// TemplateRef is the Template of the Workflow, in the rule set's namespace.
    pub template_ref: LocalObjectReference,

    /// TemplateData is copied to the Workflow's `templateData` (any JSON values).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(schema_with = "template_data_schema")]
    pub template_data: BTreeMap<String, serde_json::Value>,

    /// Timeout is copied to the Workflow's `timeout` (Go duration syntax).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<Timeout>,
}

fn template_data_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "object",
        "description": "TemplateData is copied to the Workflow's templateData.",
        "x-kubernetes-preserve-unknown-fields": true,
    })
}

/// What the controller observed for the rule set's current generation.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorkflowRuleSetStatus {
    /// The generation the counts and conditions describe.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Machines of the namespace evaluated (every Hardware).
    #[serde(default)]
    pub evaluated: u32,
    /// Machines that match: approved, with an authenticated inventory that meets a rule.
    #[serde(default)]
    pub matched: u32,
    /// Machines whose Workflow was created for the observed generation (matching or not any
    /// more: the record stays on the Hardware).
    #[serde(default)]
    pub created: u32,
    /// Machines skipped because they are not approved.
    #[serde(default)]
    pub not_approved: u32,
    /// Machines skipped because they have no inventory from their authenticated agent (none,
    /// or only the enrollment's).
    #[serde(default)]
    pub no_authenticated_inventory: u32,
    /// `Valid` (the rules compile; `False` with the field path when they do not, for a rule set
    /// stored past the webhook) and `Ready` (the last evaluation pass completed).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

/// The condition types of [`WorkflowRuleSetStatus::conditions`].
pub mod rule_set_conditions {
    /// The rules compile.
    pub const VALID: &str = "Valid";
    /// The last evaluation pass over the namespace's Hardware completed.
    pub const READY: &str = "Ready";
}
