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
//! - `status.attributes` (Tinkerbell's observed attributes, `inBand` from the agent's
//!   inventory) -> `status.attributes`, both ways; v1alpha2's `status.inventoryReportedAt` has
//!   no v1alpha1 home (annotation), nor has `spec.discovery` (a discovered machine's approval);
//! - `metadata`, `tinkVersion`, `resources`, `status.state`, `arch`, `uefi`, `iface_name`,
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
//! -> `status.actions` (id = action name). Conditions and the scheduling fields of each version:
//! annotation.
//!
//! Workflow `bootOptions` (same JSON names in both versions): `toggleAllowNetboot`, `isoURL`,
//! `bootMode` (`iso`, the older spelling, -> `isoboot`; no `bootMode` with the older
//! `oneTimeNetboot: true` -> `netboot`, as Tinkerbell treated it; both spellings come back from
//! the annotation), `custombootConfig` actions (a one-time `bootDevice` -> the same operation as
//! `oneTimeBootDeviceAction`); status `bootOptions` (`allowNetboot`, `jobs`) field for field.
//! A persistent `bootDevice`, an unknown `bootMode` and newer BMC actions have no v1alpha2
//! form: they stay in the annotation, conversion warns naming the field, an unknown `bootMode`
//! becomes none and such an action an empty one, which admission refuses.

pub mod patch;

mod hardware;
mod template;
mod workflow;

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

/// Annotation values longer than this are stored gzip-compressed and base64-encoded, behind
/// [`COMPRESSED_PREFIX`], so large Templates stay well within the API server's 256 KiB limit
/// on all annotations together (with room for `kubectl apply`'s last-applied copy).
pub const COMPRESS_ABOVE: usize = 8 * 1024;
/// The prefix of a compressed annotation value.
pub const COMPRESSED_PREFIX: &str = "gzip+base64:";
/// Decompressed annotations larger than this are ignored (a bound against gzip bombs).
const MAX_DECOMPRESSED: u64 = 4 * 1024 * 1024;

/// The plain field mappings of one kind, plus how to key its lists for patching. Both
/// directions report what they had to change (a clamped value, ...) as warnings.
trait Mapping {
    type V1: Resource + Serialize + DeserializeOwned + Clone;
    type V2: Resource + Serialize + DeserializeOwned + Clone;
    fn up(v1: &Self::V1, warnings: &mut Vec<String>) -> Self::V2;
    fn down(v2: &Self::V2, warnings: &mut Vec<String>) -> Self::V1;
    fn view_v1(_: &mut Value) {}
    fn unview_v1(_: &mut Value) {}
    fn view_v2(_: &mut Value) {}
    fn unview_v2(_: &mut Value) {}
}

/// A converted object and the warnings conversion produced (for the API client: a clamped
/// `lease_time`, ...). The webhook passes them on as admission warnings.
#[derive(Debug, Clone, PartialEq)]
pub struct Converted {
    /// The object in the desired version.
    pub object: Value,
    /// Human-readable warnings, each naming the field.
    pub warnings: Vec<String>,
}

fn encode_annotation(data: &ConversionData) -> Option<String> {
    use std::io::Write as _;
    // Serializing ops (strings and JSON values) cannot fail.
    let text = serde_json::to_string(data).ok()?;
    if text.len() <= COMPRESS_ABOVE {
        return Some(text);
    }
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    gz.write_all(text.as_bytes()).ok()?;
    let bytes = gz.finish().ok()?;
    use base64::Engine as _;
    let packed = format!(
        "{COMPRESSED_PREFIX}{}",
        base64::engine::general_purpose::STANDARD.encode(bytes)
    );
    Some(if packed.len() < text.len() {
        packed
    } else {
        text
    })
}

fn decode_annotation(raw: &str) -> Option<ConversionData> {
    use std::io::Read as _;
    let Some(packed) = raw.strip_prefix(COMPRESSED_PREFIX) else {
        return serde_json::from_str(raw).ok();
    };
    use base64::Engine as _;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(packed.trim())
        .ok()?;
    let mut text = String::new();
    flate2::read::GzDecoder::new(bytes.as_slice())
        .take(MAX_DECOMPRESSED)
        .read_to_string(&mut text)
        .ok()?;
    serde_json::from_str(&text).ok()
}

/// Removes the conversion-data annotation (and an emptied annotations map) from a raw object
/// and parses it. A malformed annotation is dropped (the plain mapping is used).
fn take_conversion_data(obj: &mut Value) -> Option<ConversionData> {
    let meta = obj.get_mut("metadata")?.as_object_mut()?;
    let annotations = meta.get_mut("annotations")?.as_object_mut()?;
    let raw = annotations.remove(CONVERSION_DATA_ANNOTATION);
    if annotations.is_empty() {
        meta.remove("annotations");
    }
    decode_annotation(raw?.as_str()?)
}

fn put_conversion_data(obj: &mut Value, data: &ConversionData) {
    if data.v1alpha1.is_none() && data.v1alpha2.is_none() {
        return;
    }
    let Some(text) = encode_annotation(data) else {
        return;
    };
    let Some(root) = obj.as_object_mut() else {
        return;
    };
    let meta = root
        .entry("metadata")
        .or_insert_with(|| Value::Object(Default::default()));
    if let Some(meta) = meta.as_object_mut() {
        let annotations = meta
            .entry("annotations")
            .or_insert_with(|| Value::Object(Default::default()));
        if let Some(a) = annotations.as_object_mut() {
            a.insert(CONVERSION_DATA_ANNOTATION.to_string(), Value::String(text));
        }
    }
}

fn to_view<T: Serialize>(obj: &T, view: fn(&mut Value)) -> Value {
    let mut v = serde_json::to_value(obj).unwrap_or(Value::Null);
    view(&mut v);
    v
}

fn non_empty(ops: Vec<Op>) -> Option<Vec<Op>> {
    (!ops.is_empty()).then_some(ops)
}

/// Kubernetes objects may be stored without `spec` (Tinkerbell's Go types omit an empty one
/// nowhere, but hand-written manifests do); the typed form needs one.
fn with_spec(mut obj: Value) -> Value {
    if let Some(map) = obj.as_object_mut() {
        let missing = map.get("spec").is_none_or(Value::is_null);
        if missing {
            map.insert("spec".into(), Value::Object(Default::default()));
        }
    }
    obj
}

/// One direction of a [`Mapping`].
struct Direction<S, D> {
    map: fn(&S, &mut Vec<String>) -> D,
    back: fn(&D, &mut Vec<String>) -> S,
    view_src: fn(&mut Value),
    view_dst: fn(&mut Value),
    unview_dst: fn(&mut Value),
    /// Reads the ops restoring the destination version from the source's annotation.
    restoring: fn(ConversionData) -> Option<Vec<Op>>,
    /// Wraps the ops restoring the source version for the destination's annotation.
    keeping: fn(Vec<Op>) -> ConversionData,
}

/// Converts a raw object: the plain mapping, then the source's annotation (what the
/// destination version held that the source could not), then the difference between the raw
/// input and what the plain mapping back would give into the destination's annotation. The
/// difference is taken on the raw input, so explicit `false` and `""` values, an absent `spec`
/// and unknown fields all come back exactly.
fn run<S, D>(
    mut raw: Value,
    d: &Direction<S, D>,
    kind: &str,
    api_version: &str,
) -> Result<Converted, ConversionError>
where
    S: Serialize + DeserializeOwned,
    D: Serialize + DeserializeOwned,
{
    let data = take_conversion_data(&mut raw);
    let src: S = typed(with_spec(raw.clone()), kind, api_version)?;
    let mut warnings = Vec::new();
    let core = (d.map)(&src, &mut warnings);
    let mut out = to_view(&core, d.view_dst);
    if let Some(ops) = data.and_then(d.restoring) {
        patch::apply(&ops, &mut out);
    }
    (d.unview_dst)(&mut out);
    // A tampered annotation may give something that is not a valid object: use the mapping.
    let dst: D = match serde_json::from_value(with_spec(out.clone())) {
        Ok(t) => t,
        Err(_) => {
            out = untyped(&core);
            core
        }
    };
    let hat = to_view(&(d.back)(&dst, &mut Vec::new()), d.view_src);
    (d.view_src)(&mut raw);
    let ops = patch::diff(&hat, &raw);
    if let Some(ops) = non_empty(ops) {
        put_conversion_data(&mut out, &(d.keeping)(ops));
    }
    Ok(Converted {
        object: out,
        warnings,
    })
}

fn up_direction<M: Mapping>() -> Direction<M::V1, M::V2> {
    Direction {
        map: M::up,
        back: M::down,
        view_src: M::view_v1,
        view_dst: M::view_v2,
        unview_dst: M::unview_v2,
        restoring: |d| d.v1alpha2,
        keeping: |ops| ConversionData {
            v1alpha1: Some(ops),
            v1alpha2: None,
        },
    }
}

fn down_direction<M: Mapping>() -> Direction<M::V2, M::V1> {
    Direction {
        map: M::down,
        back: M::up,
        view_src: M::view_v2,
        view_dst: M::view_v1,
        unview_dst: M::unview_v1,
        restoring: |d| d.v1alpha1,
        keeping: |ops| ConversionData {
            v1alpha1: None,
            v1alpha2: Some(ops),
        },
    }
}

/// Typed conversion through the raw one; `None` only if the result does not deserialize,
/// which the mappings rule out (then the plain mapping is returned by the callers).
fn typed_run<S: Serialize + DeserializeOwned, D: Serialize + DeserializeOwned>(
    obj: &S,
    d: &Direction<S, D>,
) -> D {
    let raw = untyped(obj);
    run(raw, d, "", "")
        .ok()
        .and_then(|c| serde_json::from_value(c.object).ok())
        .unwrap_or_else(|| (d.map)(obj, &mut Vec::new()))
}

/// The v1alpha2 actions (with their Template-level `volumes` and `env`) of a v1alpha1 template
/// document, as conversion maps them: one task's actions as they are; several tasks' actions
/// in order, each task's volumes and environment moved into its actions. The controller uses
/// it for `v1alpha1Data` Templates once the document is rendered.
pub fn v1alpha1_document_spec(doc: &v1alpha1::TemplateDoc) -> v1alpha2::TemplateSpec {
    template::spec_up(doc)
}

/// The fields a converted object keeps in its conversion-data annotation (what its version has
/// no home for), as dotted paths (`spec.interfaces.k=00:00:5e:00:53:01.dhcp.arch`); empty
/// when it has none. For reports such as `tinkctl migrate`'s.
pub fn conversion_data_paths(obj: &Value) -> Vec<String> {
    let mut obj = obj.clone();
    let Some(data) = take_conversion_data(&mut obj) else {
        return Vec::new();
    };
    data.v1alpha1
        .into_iter()
        .chain(data.v1alpha2)
        .flatten()
        .map(|op| op.path.join("."))
        .collect()
}

/// Converts a v1alpha1 Hardware to v1alpha2.
pub fn hardware_to_v1alpha2(obj: &v1alpha1::Hardware) -> v1alpha2::Hardware {
    typed_run(obj, &up_direction::<hardware::HardwareMapping>())
}

/// Converts a v1alpha2 Hardware to v1alpha1.
pub fn hardware_to_v1alpha1(obj: &v1alpha2::Hardware) -> v1alpha1::Hardware {
    typed_run(obj, &down_direction::<hardware::HardwareMapping>())
}

/// Converts a v1alpha1 Template to v1alpha2.
pub fn template_to_v1alpha2(obj: &v1alpha1::Template) -> v1alpha2::Template {
    typed_run(obj, &up_direction::<template::TemplateMapping>())
}

/// Converts a v1alpha2 Template to v1alpha1.
pub fn template_to_v1alpha1(obj: &v1alpha2::Template) -> v1alpha1::Template {
    typed_run(obj, &down_direction::<template::TemplateMapping>())
}

/// Converts a v1alpha1 Workflow to v1alpha2.
pub fn workflow_to_v1alpha2(obj: &v1alpha1::Workflow) -> v1alpha2::Workflow {
    typed_run(obj, &up_direction::<workflow::WorkflowMapping>())
}

/// Converts a v1alpha2 Workflow to v1alpha1.
pub fn workflow_to_v1alpha1(obj: &v1alpha2::Workflow) -> v1alpha1::Workflow {
    typed_run(obj, &down_direction::<workflow::WorkflowMapping>())
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
    convert_with_warnings(obj, desired_api_version).map(|c| c.object)
}

/// [`convert`], also returning the warnings conversion produced (each naming the field), for
/// the API client: admission responses carry them as Kubernetes warnings.
pub fn convert_with_warnings(
    obj: Value,
    desired_api_version: &str,
) -> Result<Converted, ConversionError> {
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
        return Ok(Converted {
            object: obj,
            warnings: Vec::new(),
        });
    }
    let to_v2 = desired_api_version == v1alpha2::API_VERSION;
    let av = api_version.as_str();
    let mut converted = match (kind.as_str(), to_v2) {
        ("Hardware", true) => run(obj, &up_direction::<hardware::HardwareMapping>(), &kind, av),
        ("Hardware", false) => run(
            obj,
            &down_direction::<hardware::HardwareMapping>(),
            &kind,
            av,
        ),
        ("Template", true) => run(obj, &up_direction::<template::TemplateMapping>(), &kind, av),
        ("Template", false) => run(
            obj,
            &down_direction::<template::TemplateMapping>(),
            &kind,
            av,
        ),
        ("Workflow", true) => run(obj, &up_direction::<workflow::WorkflowMapping>(), &kind, av),
        ("Workflow", false) => run(
            obj,
            &down_direction::<workflow::WorkflowMapping>(),
            &kind,
            av,
        ),
        _ => {
            return Err(ConversionError::UnsupportedKind {
                kind,
                from: api_version,
                to: desired_api_version.to_string(),
            });
        }
    }?;
    if let Some(map) = converted.object.as_object_mut() {
        map.insert(
            "apiVersion".into(),
            Value::String(desired_api_version.to_string()),
        );
        map.insert("kind".into(), Value::String(kind));
    }
    Ok(converted)
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
