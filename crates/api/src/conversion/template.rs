//! Template field mappings (see the module documentation of [`super`]).

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use super::Mapping;
use super::patch::{keyify_at, str_field, unkeyify_at};
use crate::Timeout;
use crate::v1alpha1 as a1;
use crate::v1alpha2 as a2;

pub(super) struct TemplateMapping;

/// The worker a generated v1alpha1 task names: the MAC the Workflow's `hardwareMap` maps
/// `device_1` to, as in every Tinkerbell example.
pub(crate) const DEFAULT_WORKER: &str = "{{.device_1}}";
/// The template format version written for generated v1alpha1 data.
pub(crate) const DOC_VERSION: &str = "0.1";

fn by_name(v: &Value) -> Option<String> {
    str_field(v, "name").map(str::to_string)
}

/// The container target directory of a volume spec `src:dst[:opts]`.
fn volume_target(volume: &str) -> &str {
    volume.split(':').nth(1).unwrap_or(volume)
}

pub(crate) fn action_up(a: &a1::TemplateAction) -> a2::Action {
    a2::Action {
        name: a.name.clone(),
        image: a.image.clone(),
        cmd: None,
        args: a.command.clone(),
        env: a.environment.clone(),
        volumes: a.volumes.clone(),
        network_namespace: None,
        pid_namespace: (!a.pid.is_empty()).then(|| a.pid.clone()),
        timeout: u64::try_from(a.timeout)
            .ok()
            .filter(|t| *t > 0)
            .map(Timeout::from_secs),
    }
}

/// Whole seconds, rounded up, for a v1alpha1 `timeout`.
pub(crate) fn timeout_secs(t: Option<&Timeout>) -> i64 {
    t.map(|t| {
        let d = t.duration();
        let secs = d.as_secs() + u64::from(d.subsec_nanos() > 0);
        i64::try_from(secs).unwrap_or(i64::MAX)
    })
    .unwrap_or(0)
}

fn action_down(a: &a2::Action) -> a1::TemplateAction {
    a1::TemplateAction {
        name: a.name.clone(),
        image: a.image.clone(),
        timeout: timeout_secs(a.timeout.as_ref()),
        command: a.args.clone(),
        volumes: a.volumes.clone(),
        environment: a.env.clone(),
        pid: a.pid_namespace.clone().unwrap_or_default(),
        ..Default::default()
    }
}

/// The v1alpha2 spec of a parsed v1alpha1 document.
pub(crate) fn spec_up(doc: &a1::TemplateDoc) -> a2::TemplateSpec {
    match doc.tasks.as_slice() {
        [] => a2::TemplateSpec::default(),
        [task] => a2::TemplateSpec {
            actions: task.actions.iter().map(action_up).collect(),
            volumes: task.volumes.clone(),
            env: task.environment.clone(),
            v1alpha1_data: None,
        },
        tasks => a2::TemplateSpec {
            actions: tasks
                .iter()
                .flat_map(|task| {
                    task.actions.iter().map(move |a| {
                        let mut action = action_up(a);
                        let mut env: BTreeMap<String, String> = task.environment.clone();
                        env.extend(action.env);
                        action.env = env;
                        let mut volumes: Vec<String> = task
                            .volumes
                            .iter()
                            .filter(|tv| {
                                !action
                                    .volumes
                                    .iter()
                                    .any(|av| volume_target(av) == volume_target(tv))
                            })
                            .cloned()
                            .collect();
                        volumes.append(&mut action.volumes);
                        action.volumes = volumes;
                        action
                    })
                })
                .collect(),
            volumes: Vec::new(),
            env: BTreeMap::new(),
            v1alpha1_data: None,
        },
    }
}

/// Whether v1alpha2's schema accepts these actions: 1 to 128, names 1 to 256 characters and
/// unique, images non-empty.
fn actions_valid(actions: &[a2::Action]) -> bool {
    let mut names = std::collections::BTreeSet::new();
    (1..=128).contains(&actions.len())
        && actions.iter().all(|a| {
            (1..=256).contains(&a.name.chars().count())
                && !a.image.is_empty()
                && names.insert(a.name.as_str())
        })
}

/// The v1alpha2 spec of a v1alpha1 Template's `spec.data`: its actions when the document
/// parses before rendering and its actions satisfy v1alpha2's schema; otherwise (actions under
/// `{{ if }}`/`{{ range }}`, repeated names across tasks, ...) the whole text in
/// `v1alpha1Data`, rendered whole per Workflow as Tinkerbell does.
pub(crate) fn spec_of_data(data: Option<&str>) -> a2::TemplateSpec {
    let Some(data) = data.filter(|d| !d.trim().is_empty()) else {
        return a2::TemplateSpec::default();
    };
    match a1::TemplateDoc::parse(data) {
        Ok(doc) => {
            let spec = spec_up(&doc);
            if actions_valid(&spec.actions) {
                spec
            } else {
                a2::TemplateSpec {
                    v1alpha1_data: Some(data.to_string()),
                    ..Default::default()
                }
            }
        }
        Err(_) => a2::TemplateSpec {
            v1alpha1_data: Some(data.to_string()),
            ..Default::default()
        },
    }
}

/// The v1alpha1 document of a v1alpha2 spec: one task named after the object.
pub(crate) fn doc_down(name: &str, spec: &a2::TemplateSpec) -> a1::TemplateDoc {
    a1::TemplateDoc {
        version: DOC_VERSION.to_string(),
        name: name.to_string(),
        tasks: vec![a1::TemplateTask {
            name: name.to_string(),
            worker: DEFAULT_WORKER.to_string(),
            volumes: spec.volumes.clone(),
            environment: spec.env.clone(),
            actions: spec.actions.iter().map(action_down).collect(),
            extra: Default::default(),
        }],
        ..Default::default()
    }
}

fn doc_view(doc: &a1::TemplateDoc) -> Value {
    let mut v = serde_json::to_value(doc).unwrap_or(Value::Null);
    if let Some(Value::Array(tasks)) = v.get_mut("tasks") {
        for task in tasks.iter_mut() {
            keyify_at(task, &["actions"], by_name);
        }
    }
    // Tasks by position: a generated document's single task is named after the object, so
    // names do not identify tasks across versions.
    keyify_at(&mut v, &["tasks"], |_| None);
    v
}

fn doc_unview(mut v: Value) -> Value {
    unkeyify_at(&mut v, &["tasks"]);
    if let Some(Value::Array(tasks)) = v.get_mut("tasks") {
        for task in tasks.iter_mut() {
            unkeyify_at(task, &["actions"]);
        }
    }
    v
}

impl Mapping for TemplateMapping {
    type V1 = a1::Template;
    type V2 = a2::Template;

    fn up(v1: &a1::Template, _: &mut Vec<String>) -> a2::Template {
        let spec = spec_of_data(v1.spec.data.as_deref());
        a2::Template {
            metadata: v1.metadata.clone(),
            spec,
        }
    }

    fn down(v2: &a2::Template, _: &mut Vec<String>) -> a1::Template {
        let data = match &v2.spec.v1alpha1_data {
            Some(text) => Some(text.clone()),
            None => (v2.spec != a2::TemplateSpec::default()).then(|| {
                let name = v2.metadata.name.as_deref().unwrap_or_default();
                doc_down(name, &v2.spec).to_yaml()
            }),
        };
        a1::Template {
            metadata: v2.metadata.clone(),
            spec: a1::TemplateSpec {
                data,
                extra: Default::default(),
            },
            status: None,
        }
    }

    /// `spec.data` becomes `{"text": <data>, "doc": <parsed document, tasks and actions keyed
    /// by name>}`, so a patch can restore the exact text, or, when the actions changed in
    /// v1alpha2, restore only the document fields v1alpha2 has no home for.
    fn view_v1(v: &mut Value) {
        let Some(spec) = v.get_mut("spec") else {
            return;
        };
        let Some(Value::String(text)) = spec.get("data") else {
            return;
        };
        let mut data = Map::new();
        if let Ok(doc) = a1::TemplateDoc::parse(text) {
            data.insert("doc".into(), doc_view(&doc));
        }
        data.insert("text".into(), Value::String(text.clone()));
        spec["data"] = Value::Object(data);
    }

    fn unview_v1(v: &mut Value) {
        let Some(spec) = v.get_mut("spec").and_then(Value::as_object_mut) else {
            return;
        };
        let Some(Value::Object(mut data)) = spec.remove("data") else {
            return;
        };
        let text = match data.remove("text") {
            Some(Value::String(t)) => Some(t),
            _ => None,
        };
        let out = match data.remove("doc") {
            Some(doc) => {
                let doc = doc_unview(doc);
                let parsed_text = text
                    .as_deref()
                    .and_then(|t| a1::TemplateDoc::parse(t).ok())
                    .and_then(|d| serde_json::to_value(d).ok());
                if parsed_text.as_ref() == Some(&doc) {
                    text
                } else {
                    serde_json::from_value::<a1::TemplateDoc>(doc)
                        .ok()
                        .map(|d| d.to_yaml())
                        .or(text)
                }
            }
            None => text,
        };
        if let Some(out) = out {
            spec.insert("data".into(), Value::String(out));
        }
    }

    fn view_v2(v: &mut Value) {
        keyify_at(v, &["spec", "actions"], by_name);
    }

    fn unview_v2(v: &mut Value) {
        unkeyify_at(v, &["spec", "actions"]);
    }
}
