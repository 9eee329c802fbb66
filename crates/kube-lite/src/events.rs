//! Events: core `v1` and `events.k8s.io/v1` are two views of one store, as in kube-apiserver.
//!
//! Objects are stored in the core `v1` form and converted on every read and write with the field
//! mapping of kube-apiserver's `pkg/apis/events/v1` conversion (`regarding` is `involvedObject`,
//! `note` is `message`, `reportingController` is `reportingComponent`, `deprecatedSource`,
//! `deprecatedCount`, `deprecatedFirstTimestamp` and `deprecatedLastTimestamp` are `source`,
//! `count`, `firstTimestamp` and `lastTimestamp`; the other fields keep their names). Field
//! selectors are those kube-apiserver accepts for each version, evaluated on the stored form.

use serde_json::{Map, Value, json};

use crate::registry::ResourceType;
use crate::selector::{FieldSelector, SelectorError};
use crate::store::Gr;

/// The group of the new Event API.
pub const EVENTS_GROUP: &str = "events.k8s.io";
/// The apiVersion Events are stored in.
pub const STORAGE_API_VERSION: &str = "v1";

/// Core field name and events.k8s.io field name of the renamed fields.
const RENAMED: [(&str, &str); 7] = [
    ("involvedObject", "regarding"),
    ("message", "note"),
    ("reportingComponent", "reportingController"),
    ("source", "deprecatedSource"),
    ("count", "deprecatedCount"),
    ("firstTimestamp", "deprecatedFirstTimestamp"),
    ("lastTimestamp", "deprecatedLastTimestamp"),
];

/// Whether a resource type is one of the two Event resources.
pub fn is_event(rt: &ResourceType) -> bool {
    rt.crd.is_none() && rt.plural == "events" && (rt.group.is_empty() || rt.group == EVENTS_GROUP)
}

/// The store key both Event resources share.
pub fn storage_gr() -> Gr {
    (String::new(), "events".into())
}

/// Converts an Event between `v1` and `events.k8s.io/v1` (`want` is the target apiVersion).
/// An object already in `want` is returned unchanged.
pub fn convert(obj: Value, want: &str) -> Value {
    let to_new = want != STORAGE_API_VERSION;
    // An object without apiVersion is taken to be in the other form.
    let is_new = match obj.get("apiVersion").and_then(Value::as_str) {
        None | Some("") => !to_new,
        Some(from) => from != STORAGE_API_VERSION,
    };
    let Value::Object(mut m) = obj else {
        return obj;
    };
    if is_new != to_new {
        let mut out = Map::with_capacity(m.len());
        for (k, v) in std::mem::take(&mut m) {
            let renamed = RENAMED.iter().find_map(|(core, new)| {
                if to_new && k == *core {
                    Some(*new)
                } else if !to_new && k == *new {
                    Some(*core)
                } else {
                    None
                }
            });
            out.insert(renamed.map(String::from).unwrap_or(k), v);
        }
        m = out;
    }
    m.insert("apiVersion".into(), json!(want));
    m.insert("kind".into(), json!("Event"));
    Value::Object(m)
}

/// The fields kube-apiserver's selectors see on a stored (core) Event.
fn selectable_fields(obj: &Value) -> Value {
    let s = |p: &str| obj.pointer(p).and_then(Value::as_str).unwrap_or_default();
    let mut source = s("/source/component");
    if source.is_empty() {
        source = s("/reportingComponent");
    }
    json!({
        "metadata": {"name": s("/metadata/name"), "namespace": s("/metadata/namespace")},
        "involvedObject": {
            "kind": s("/involvedObject/kind"),
            "namespace": s("/involvedObject/namespace"),
            "name": s("/involvedObject/name"),
            "uid": s("/involvedObject/uid"),
            "apiVersion": s("/involvedObject/apiVersion"),
            "resourceVersion": s("/involvedObject/resourceVersion"),
            "fieldPath": s("/involvedObject/fieldPath"),
        },
        "reason": s("/reason"),
        "reportingComponent": s("/reportingComponent"),
        "source": source,
        "type": s("/type"),
    })
}

const CORE_FIELDS: [&str; 13] = [
    "metadata.name",
    "metadata.namespace",
    "involvedObject.kind",
    "involvedObject.namespace",
    "involvedObject.name",
    "involvedObject.uid",
    "involvedObject.apiVersion",
    "involvedObject.resourceVersion",
    "involvedObject.fieldPath",
    "reason",
    "reportingComponent",
    "source",
    "type",
];

/// The core field an events.k8s.io field selector label stands for.
fn new_to_core(label: &str) -> Option<String> {
    match label {
        "metadata.name" | "metadata.namespace" | "reason" | "type" => Some(label.to_string()),
        "reportingController" => Some("reportingComponent".into()),
        _ => {
            let field = label.strip_prefix("regarding.")?;
            let core = format!("involvedObject.{field}");
            CORE_FIELDS.contains(&core.as_str()).then_some(core)
        }
    }
}

/// Checks a field selector against the labels the Event resource of `group` supports (an
/// unknown label is an error, as in kube-apiserver) and makes it match on the stored form.
pub fn field_selector(group: &str, fs: FieldSelector) -> Result<FieldSelector, SelectorError> {
    let fs = fs.map_fields(|label| {
        let mapped = if group.is_empty() {
            CORE_FIELDS.contains(&label).then(|| label.to_string())
        } else {
            new_to_core(label)
        };
        mapped.ok_or_else(|| SelectorError(format!("field label not supported: {label}")))
    })?;
    Ok(fs.with_view(selectable_fields))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn core_event() -> Value {
        json!({
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": "e", "namespace": "ns", "resourceVersion": "7"},
            "involvedObject": {"kind": "Workflow", "name": "w", "uid": "u"},
            "message": "hello", "reason": "Started", "type": "Normal",
            "source": {"component": "c", "host": "h"},
            "count": 3, "firstTimestamp": "2024-01-01T00:00:00Z", "lastTimestamp": "2024-01-01T00:01:00Z",
            "reportingComponent": "ctl", "reportingInstance": "i", "action": "Run",
            "eventTime": "2024-01-01T00:00:00.000000Z",
            "series": {"count": 2, "lastObservedTime": "2024-01-01T00:01:00.000000Z"},
            "related": {"kind": "Hardware", "name": "h"},
        })
    }

    #[test]
    fn conversion_maps_fields_and_round_trips() {
        let new = convert(core_event(), "events.k8s.io/v1");
        assert_eq!(new["apiVersion"], "events.k8s.io/v1");
        assert_eq!(new["regarding"]["name"], "w");
        assert_eq!(new["note"], "hello");
        assert_eq!(new["reportingController"], "ctl");
        assert_eq!(new["reportingInstance"], "i");
        assert_eq!(new["deprecatedSource"]["host"], "h");
        assert_eq!(new["deprecatedCount"], 3);
        assert_eq!(new["deprecatedFirstTimestamp"], "2024-01-01T00:00:00Z");
        assert_eq!(new["deprecatedLastTimestamp"], "2024-01-01T00:01:00Z");
        assert_eq!(new["series"]["count"], 2);
        assert_eq!(new["related"]["kind"], "Hardware");
        assert_eq!(new["metadata"]["resourceVersion"], "7");
        assert!(new.get("involvedObject").is_none() && new.get("message").is_none());
        assert_eq!(convert(new.clone(), "events.k8s.io/v1"), new);
        assert_eq!(convert(new, "v1"), core_event());
    }

    #[test]
    fn selectors_per_version() {
        let obj = core_event();
        let core =
            |s: &str| field_selector("", FieldSelector::parse(s).unwrap()).map(|f| f.matches(&obj));
        let new = |s: &str| {
            field_selector(EVENTS_GROUP, FieldSelector::parse(s).unwrap()).map(|f| f.matches(&obj))
        };
        assert_eq!(core("involvedObject.name=w,involvedObject.uid=u"), Ok(true));
        assert_eq!(core("involvedObject.kind=Workflow,type=Normal"), Ok(true));
        assert_eq!(core("involvedObject.namespace=ns"), Ok(false));
        assert_eq!(
            core("source=c,reportingComponent=ctl,reason=Started"),
            Ok(true)
        );
        assert_eq!(core("metadata.name!=e"), Ok(false));
        assert_eq!(new("regarding.name=w,reportingController=ctl"), Ok(true));
        assert_eq!(new("regarding.kind=Hardware"), Ok(false));
        assert!(core("regarding.name=w").is_err());
        assert!(core("message=hello").is_err());
        assert!(new("involvedObject.name=w").is_err());
        assert!(new("regarding.bogus=w").is_err());
        assert!(new("source=c").is_err());
        // `source` falls back to reportingComponent when source.component is empty.
        let mut o = obj.clone();
        o["source"] = json!({});
        let f = field_selector("", FieldSelector::parse("source=ctl").unwrap()).unwrap();
        assert!(f.matches(&o));
    }
}
