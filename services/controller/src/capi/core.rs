//! Cluster API's own kinds, read as dynamic objects: only the fields the provider needs, in
//! both the v1beta1 and the v1beta2 shapes where they differ.

use kube::ResourceExt as _;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
use kube::runtime::reflector::ObjectRef;
use serde_json::Value;
use tink_api::capi::PAUSED_ANNOTATION;

/// Cluster API's core group.
pub const GROUP: &str = "cluster.x-k8s.io";

/// The resource of a Cluster API core kind in `version`.
pub fn resource(version: &str, kind: &str) -> ApiResource {
    ApiResource::from_gvk(&GroupVersionKind::gvk(GROUP, version, kind))
}

fn field<'a>(obj: &'a DynamicObject, pointer: &str) -> Option<&'a Value> {
    obj.data.pointer(pointer)
}

fn string(obj: &DynamicObject, pointer: &str) -> Option<String> {
    field(obj, pointer)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
}

/// The object `obj.spec.infrastructureRef` names when it is of `kind` (a TinkerbellMachine
/// for a Machine, a TinkerbellCluster for a Cluster), in `obj`'s namespace.
pub fn infrastructure_ref<K>(obj: &DynamicObject, kind: &str) -> Option<ObjectRef<K>>
where
    K: kube::Resource<DynamicType = ()>,
{
    if string(obj, "/spec/infrastructureRef/kind").as_deref() != Some(kind) {
        return None;
    }
    let name = string(obj, "/spec/infrastructureRef/name")?;
    Some(ObjectRef::new(&name).within(&obj.namespace()?))
}

/// `Machine.spec.bootstrap.dataSecretName`.
pub fn data_secret_name(machine: &DynamicObject) -> Option<String> {
    string(machine, "/spec/bootstrap/dataSecretName")
}

/// `Machine.spec.failureDomain`.
pub fn failure_domain(machine: &DynamicObject) -> Option<String> {
    string(machine, "/spec/failureDomain")
}

/// `Machine.spec.clusterName`.
pub fn cluster_name(machine: &DynamicObject) -> Option<String> {
    string(machine, "/spec/clusterName")
}

/// Whether the Cluster's infrastructure is provisioned: `status.initialization
/// .infrastructureProvisioned` (v1beta2) or `status.infrastructureReady` (v1beta1).
pub fn infrastructure_provisioned(cluster: &DynamicObject) -> bool {
    let v2 = field(cluster, "/status/initialization/infrastructureProvisioned");
    let v1 = field(cluster, "/status/infrastructureReady");
    [v2, v1]
        .into_iter()
        .flatten()
        .any(|v| v.as_bool() == Some(true))
}

/// Whether reconciliation is paused: `Cluster.spec.paused`, or the paused annotation on the
/// Cluster or on `obj`.
pub fn paused<K: kube::Resource>(cluster: &DynamicObject, obj: &K) -> bool {
    field(cluster, "/spec/paused").and_then(Value::as_bool) == Some(true)
        || cluster.annotations().contains_key(PAUSED_ANNOTATION)
        || obj
            .meta()
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key(PAUSED_ANNOTATION))
}

/// The name of the owner of `kind` in Cluster API's core group, if `obj` has one.
pub fn owner<K: kube::Resource>(obj: &K, kind: &str) -> Option<String> {
    obj.meta()
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.kind == kind && o.api_version.split('/').next() == Some(GROUP))
        .map(|o| o.name.clone())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn obj(v: Value) -> DynamicObject {
        serde_json::from_value(v).expect("object")
    }

    #[test]
    fn reads_both_contract_shapes() {
        let v2 = obj(json!({"metadata": {"name": "c", "namespace": "n"},
            "status": {"initialization": {"infrastructureProvisioned": true}}}));
        let v1 = obj(json!({"metadata": {"name": "c", "namespace": "n"},
            "status": {"infrastructureReady": true}}));
        let none = obj(json!({"metadata": {"name": "c", "namespace": "n"}, "status": {}}));
        assert!(infrastructure_provisioned(&v2));
        assert!(infrastructure_provisioned(&v1));
        assert!(!infrastructure_provisioned(&none));
    }

    #[test]
    fn paused_by_spec_or_annotation() {
        let plain = obj(json!({"metadata": {"name": "c", "namespace": "n"}, "spec": {}}));
        let spec =
            obj(json!({"metadata": {"name": "c", "namespace": "n"}, "spec": {"paused": true}}));
        let ann = obj(
            json!({"metadata": {"name": "c", "namespace": "n", "annotations": {PAUSED_ANNOTATION: ""}}}),
        );
        assert!(!paused(&plain, &plain));
        assert!(paused(&spec, &plain));
        assert!(paused(&plain, &ann));
        assert!(paused(&ann, &plain));
    }

    #[test]
    fn infrastructure_refs_of_another_kind_are_ignored() {
        let m = obj(json!({"metadata": {"name": "m", "namespace": "n"},
            "spec": {"infrastructureRef": {"kind": "TinkerbellMachine", "name": "tm"}}}));
        let r: Option<ObjectRef<tink_api::capi::v1beta1::TinkerbellMachine>> =
            infrastructure_ref(&m, "TinkerbellMachine");
        assert_eq!(r.map(|r| r.name), Some("tm".to_string()));
        let r: Option<ObjectRef<tink_api::capi::v1beta1::TinkerbellMachine>> =
            infrastructure_ref(&m, "DockerMachine");
        assert!(r.is_none());
    }
}
