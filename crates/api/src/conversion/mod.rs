//! Conversion between `v1alpha1` and `v1alpha2` (the hub), as pure functions, lossless in both
//! directions the Cluster API way.
//!
//! # How losslessness works
//!
//! Each kind has a plain field mapping each way (`up`: v1alpha1 -> v1alpha2, `down`: v1alpha2 ->
//! v1alpha1). What the mapping cannot carry is kept in the annotation
//! [`crate::CONVERSION_DATA_ANNOTATION`] of the converted object:
//! converting `a` gives `b = map(a)` plus the difference between `a` and `map_back(b)`, as a
//! list of *conditional* operations (see [`patch`]): "at this path, if the value is still X,
//! put Y". Converting back applies them to `map_back(b)`:
//!
//! - unchanged objects come back exactly as they were (field for field, unknown fields, list
//!   order, even the formatting of a v1alpha1 Template's YAML);
//! - fields with a home in both versions that were edited in the other version keep the newer
//!   value (their condition no longer holds), and only the fields without a home are restored
//!   (onto elements that still exist: interfaces by MAC, actions and tasks by name).
//!
//! The annotation is consumed by the conversion back and never accumulates. It holds the ops
//! as JSON: `{"v1alpha1": [ops]}` on a v1alpha2 object, `{"v1alpha2": [ops]}` on a v1alpha1
//! one. A malformed annotation is ignored (the plain mapping is used), so a hand-edited
//! annotation cannot make an object unreadable.
//!
//! # Mapping decisions
//!
//! Hardware (v1alpha1 -> v1alpha2):
//! - `interfaces[]` -> `networkInterfaces`, keyed by the lower-case `dhcp.mac`; interfaces
//!   without a MAC, and later duplicates of a MAC, have no key and stay in the annotation;
//! - `dhcp.ip.{address,netmask,gateway}` -> `dhcp.{ip,netmask,gateway}`, `name_servers`,
//!   `time_servers`, `hostname`, `vlan_id`, `lease_time` (0 or out of range -> the 86400 default);
//! - `netboot.allowPXE: false` -> `disableNetboot: true`;
//! - the first interface's `netboot.ipxe` (`contents` -> `inline`, `url`) -> `spec.ipxe`: iPXE
//!   overrides are per machine in v1alpha2;
//! - per-interface OSIE settings (`netboot.osie.{baseURL,kernel,initrd}`) have no home: v1alpha2
//!   references an OSIE object, which a per-object conversion cannot create. They stay in the
//!   annotation (and come back on conversion to v1alpha1); the migration command creates OSIE
//!   objects from them and sets `spec.osie.osieRef`;
//! - `disks[].device` -> `storageDevices`, `userData`/`vendorData` -> `instance`,
//!   `bmcRef.name` -> `bmcRef.name`;
//! - `metadata`, `tinkVersion`, `resources`, `status`, `arch`, `uefi`, `iface_name`,
//!   `allowWorkflow` and unknown fields: annotation.
//!
//! Template: `spec.data` is parsed ([`TemplateDoc`](crate::v1alpha1::TemplateDoc)):
//! - one task: its actions -> `actions`, its `volumes` -> `volumes`, `environment` -> `env`;
//! - several tasks (multi-worker templates, unsupported since the Kubernetes backend): all
//!   actions in task order on the one Hardware; each task's volumes and environment move into its
//!   actions (the action's own values win). Task names and workers stay in the annotation. Action
//!   names repeated across tasks are kept, so the migration command reports them (v1alpha2
//!   requires unique names). Converted back unchanged, the original tasks return exactly; after
//!   an edit in v1alpha2 the actions are regenerated into the first task and the second and later
//!   tasks are restored from the annotation as they were, so such templates should be migrated
//!   (split per task) rather than edited through v1alpha2;
//! - action `command` -> `args` (Docker `Cmd`, the image's entrypoint still runs), `timeout`
//!   seconds -> `timeout: "<n>s"`; `pid`, `on-timeout`, `on-failure`, `version`, `name`, `id`,
//!   `global_timeout` (the timeout moved to `Workflow.spec.timeout`) and the exact YAML text:
//!   annotation;
//! - data that only parses after rendering (`{{ if }}`/`{{ range }}` generating YAML) gives an
//!   empty `actions` list; the text stays in the annotation.
//!
//! Going down, a v1alpha2 Template becomes one task named after the object, worker
//! `{{.device_1}}`; `cmd`, `networkNamespace` and non-`<n>s` timeouts stay in the annotation.
//!
//! Workflow: `hardwareRef`/`templateRef` names, `hardwareMap` -> `templateData` (string values,
//! so `{{.device_1}}` still renders), status `state` (`STATE_PENDING`/`STATE_PREPARING` ->
//! `Pending`, `STATE_RUNNING` -> `Running`, `STATE_SUCCESS` -> `Succeeded`,
//! `STATE_FAILED`/`STATE_TIMEOUT` -> `Failed`), `timeStarted` -> `startedAt`, the tasks' actions
//! -> `status.actions` (id = action name). `bootOpts`, conditions and the scheduling fields of
//! each version: annotation.

pub mod patch;

mod hardware;
mod template;
mod workflow;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::{CONVERSION_DATA_ANNOTATION, ParseError, v1alpha1, v1alpha2};
use patch::Op;

/// Why an object could not be converted.
#[derive(Debug, thiserror::Error)]
pub enum ConversionError {
    /// The object has no string `apiVersion` or `kind`.
    #[error("object has no {0}")]
    MissingTypeField(&'static str),
    /// The object's or the desired apiVersion is not one this API serves.
    #[error(
        "unsupported apiVersion {0:?}: expected tinkerbell.org/v1alpha1 or tinkerbell.org/v1alpha2"
    )]
    UnsupportedApiVersion(String),
    /// The kind does not exist in the desired version (OSIE is v1alpha2 only).
    #[error("kind {kind} cannot be converted from {from} to {to}")]
    UnsupportedKind {
        /// The kind.
        kind: String,
        /// Source apiVersion.
        from: String,
        /// Desired apiVersion.
        to: String,
    },
    /// The object does not deserialize as its kind; the error names the field path.
    #[error("invalid {kind} {api_version}: {source}")]
    Invalid {
        /// The kind.
        kind: String,
        /// Its apiVersion.
        api_version: String,
        /// The parse error, with the field path.
        source: ParseError,
    },
}

/// The annotation content.
#[derive(Serialize, Deserialize, Default, Debug)]
struct ConversionData {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    v1alpha1: Option<Vec<Op>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    v1alpha2: Option<Vec<Op>>,
}

/// The plain field mappings of one kind, plus how to key its lists for patching.
trait Mapping {
    type V1: Resource + Serialize + DeserializeOwned + Clone;
    type V2: Resource + Serialize + DeserializeOwned + Clone;
    fn up(v1: &Self::V1) -> Self::V2;
    fn down(v2: &Self::V2) -> Self::V1;
    fn view_v1(_: &mut Value) {}
    fn unview_v1(_: &mut Value) {}
    fn view_v2(_: &mut Value) {}
    fn unview_v2(_: &mut Value) {}
}

/// Removes the conversion-data annotation (and an emptied annotations map) and parses it.
fn take_conversion_data(meta: &mut ObjectMeta) -> Option<ConversionData> {
    let annotations = meta.annotations.as_mut()?;
    let raw = annotations.remove(CONVERSION_DATA_ANNOTATION);
    if annotations.is_empty() {
        meta.annotations = None;
    }
    serde_json::from_str(&raw?).ok()
}

fn put_conversion_data(meta: &mut ObjectMeta, data: &ConversionData) {
    if data.v1alpha1.is_none() && data.v1alpha2.is_none() {
        return;
    }
    // Serializing ops (strings and JSON values) cannot fail.
    if let Ok(text) = serde_json::to_string(data) {
        meta.annotations
            .get_or_insert_with(Default::default)
            .insert(CONVERSION_DATA_ANNOTATION.to_string(), text);
    }
}

fn to_view<T: Serialize>(obj: &T, view: fn(&mut Value)) -> Value {
    let mut v = serde_json::to_value(obj).unwrap_or(Value::Null);
    view(&mut v);
    v
}

/// Applies `ops` to `base` in its keyed view; `None` when the result does not deserialize
/// (a tampered annotation), so the caller keeps `base`.
fn restore<T: Serialize + DeserializeOwned>(
    base: &T,
    ops: &[Op],
    view: fn(&mut Value),
    unview: fn(&mut Value),
) -> Option<T> {
    let mut v = to_view(base, view);
    patch::apply(ops, &mut v);
    unview(&mut v);
    serde_json::from_value(v).ok()
}

fn non_empty(ops: Vec<Op>) -> Option<Vec<Op>> {
    (!ops.is_empty()).then_some(ops)
}

fn up<M: Mapping>(input: &M::V1) -> M::V2 {
    let mut v1 = input.clone();
    let data = take_conversion_data(v1.meta_mut());
    let core = M::up(&v1);
    let v2 = match data.and_then(|d| d.v1alpha2) {
        Some(ops) => restore(&core, &ops, M::view_v2, M::unview_v2).unwrap_or(core),
        None => core,
    };
    let hat = M::down(&v2);
    let ops = patch::diff(&to_view(&hat, M::view_v1), &to_view(&v1, M::view_v1));
    let mut out = v2;
    put_conversion_data(
        out.meta_mut(),
        &ConversionData {
            v1alpha1: non_empty(ops),
            v1alpha2: None,
        },
    );
    out
}

fn down<M: Mapping>(input: &M::V2) -> M::V1 {
    let mut v2 = input.clone();
    let data = take_conversion_data(v2.meta_mut());
    let core = M::down(&v2);
    let v1 = match data.and_then(|d| d.v1alpha1) {
        Some(ops) => restore(&core, &ops, M::view_v1, M::unview_v1).unwrap_or(core),
        None => core,
    };
    let hat = M::up(&v1);
    let ops = patch::diff(&to_view(&hat, M::view_v2), &to_view(&v2, M::view_v2));
    let mut out = v1;
    put_conversion_data(
        out.meta_mut(),
        &ConversionData {
            v1alpha1: None,
            v1alpha2: non_empty(ops),
        },
    );
    out
}

/// Converts a v1alpha1 Hardware to v1alpha2.
pub fn hardware_to_v1alpha2(obj: &v1alpha1::Hardware) -> v1alpha2::Hardware {
    up::<hardware::HardwareMapping>(obj)
}

/// Converts a v1alpha2 Hardware to v1alpha1.
pub fn hardware_to_v1alpha1(obj: &v1alpha2::Hardware) -> v1alpha1::Hardware {
    down::<hardware::HardwareMapping>(obj)
}

/// Converts a v1alpha1 Template to v1alpha2.
pub fn template_to_v1alpha2(obj: &v1alpha1::Template) -> v1alpha2::Template {
    up::<template::TemplateMapping>(obj)
}

/// Converts a v1alpha2 Template to v1alpha1.
pub fn template_to_v1alpha1(obj: &v1alpha2::Template) -> v1alpha1::Template {
    down::<template::TemplateMapping>(obj)
}

/// Converts a v1alpha1 Workflow to v1alpha2.
pub fn workflow_to_v1alpha2(obj: &v1alpha1::Workflow) -> v1alpha2::Workflow {
    up::<workflow::WorkflowMapping>(obj)
}

/// Converts a v1alpha2 Workflow to v1alpha1.
pub fn workflow_to_v1alpha1(obj: &v1alpha2::Workflow) -> v1alpha1::Workflow {
    down::<workflow::WorkflowMapping>(obj)
}

fn typed<T: DeserializeOwned>(
    obj: Value,
    kind: &str,
    api_version: &str,
) -> Result<T, ConversionError> {
    crate::from_value(obj).map_err(|source| ConversionError::Invalid {
        kind: kind.to_string(),
        api_version: api_version.to_string(),
        source,
    })
}

fn untyped<T: Serialize>(obj: &T) -> Value {
    // Our types serialize to JSON without error (string keys, no non-finite floats).
    serde_json::to_value(obj).unwrap_or(Value::Null)
}

/// Converts a raw object (as found in a `ConversionReview`) to `desired_api_version`. An object
/// already in that version is returned unchanged.
pub fn convert(obj: Value, desired_api_version: &str) -> Result<Value, ConversionError> {
    let api_version = obj
        .get("apiVersion")
        .and_then(Value::as_str)
        .ok_or(ConversionError::MissingTypeField("apiVersion"))?
        .to_string();
    let kind = obj
        .get("kind")
        .and_then(Value::as_str)
        .ok_or(ConversionError::MissingTypeField("kind"))?
        .to_string();
    for v in [api_version.as_str(), desired_api_version] {
        if v != v1alpha1::API_VERSION && v != v1alpha2::API_VERSION {
            return Err(ConversionError::UnsupportedApiVersion(v.to_string()));
        }
    }
    if api_version == desired_api_version {
        return Ok(obj);
    }
    let to_v2 = desired_api_version == v1alpha2::API_VERSION;
    let av = api_version.as_str();
    Ok(match (kind.as_str(), to_v2) {
        ("Hardware", true) => untyped(&hardware_to_v1alpha2(&typed(obj, &kind, av)?)),
        ("Hardware", false) => untyped(&hardware_to_v1alpha1(&typed(obj, &kind, av)?)),
        ("Template", true) => untyped(&template_to_v1alpha2(&typed(obj, &kind, av)?)),
        ("Template", false) => untyped(&template_to_v1alpha1(&typed(obj, &kind, av)?)),
        ("Workflow", true) => untyped(&workflow_to_v1alpha2(&typed(obj, &kind, av)?)),
        ("Workflow", false) => untyped(&workflow_to_v1alpha1(&typed(obj, &kind, av)?)),
        _ => {
            return Err(ConversionError::UnsupportedKind {
                kind,
                from: api_version,
                to: desired_api_version.to_string(),
            });
        }
    })
}

/// Answers a `ConversionReview` from the API server: converts every object to the desired
/// version, in order. The first object that cannot be converted fails the whole review with a
/// message naming the object index and the field path.
pub fn review(
    review: kube::core::conversion::ConversionReview,
) -> kube::core::conversion::ConversionReview {
    use kube::core::Status;
    use kube::core::conversion::{ConversionRequest, ConversionResponse};

    let mut request = match ConversionRequest::from_review(review) {
        Ok(r) => r,
        Err(_) => {
            return ConversionResponse::invalid(Status::failure(
                "ConversionReview has no request",
                "InvalidRequest",
            ))
            .into_review();
        }
    };
    let objects = std::mem::take(&mut request.objects);
    let desired = request.desired_api_version.clone();
    let mut converted = Vec::with_capacity(objects.len());
    for (i, obj) in objects.into_iter().enumerate() {
        match convert(obj, &desired) {
            Ok(v) => converted.push(v),
            Err(e) => {
                return ConversionResponse::for_request(request)
                    .failure(Status::failure(
                        &format!("objects[{i}]: {e}"),
                        "ConversionFailed",
                    ))
                    .into_review();
            }
        }
    }
    ConversionResponse::for_request(request)
        .success(converted)
        .into_review()
}
