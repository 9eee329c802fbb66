//! The Cluster API infrastructure provider's kinds (group `infrastructure.cluster.x-k8s.io`):
//! [`v1beta1::TinkerbellCluster`], [`v1beta1::TinkerbellMachine`] and
//! [`v1beta1::TinkerbellMachineTemplate`], plus the pure logic the provider's reconcilers share
//! (hardware selection, label selectors, provider IDs) so it is testable without a cluster.
//!
//! The status follows the Cluster API v1beta2 contract (`status.initialization.provisioned`,
//! conditions in the `metav1.Condition` shape, `failureDomains` as a list) and keeps
//! `status.ready` for consumers of the v1beta1 contract. The CRDs carry the contract label
//! [`CONTRACT_LABEL`] so Cluster API knows which version of ours to read.

pub mod selection;
pub mod v1beta1;

/// The API group of the provider's kinds.
pub const GROUP: &str = "infrastructure.cluster.x-k8s.io";

/// The label on each CRD that tells Cluster API the contract version (the key) this provider
/// implements and the provider's API versions (the value, `_`-separated) that satisfy it.
pub const CONTRACT_LABEL: (&str, &str) = ("cluster.x-k8s.io/v1beta2", "v1beta1");

/// The label on each CRD for Cluster API releases still reading the v1beta1 contract.
pub const CONTRACT_LABEL_V1BETA1: (&str, &str) = ("cluster.x-k8s.io/v1beta1", "v1beta1");

/// The label on a Hardware claimed by a TinkerbellMachine: the machine's `metadata.uid`. A
/// Hardware without it is free. A uid (36 characters) always fits a label value and cannot be
/// confused with a re-created machine of the same name.
pub const HARDWARE_CLAIM_LABEL: &str = "infrastructure.cluster.x-k8s.io/tinkerbell-machine-uid";

/// The annotation on a claimed Hardware naming its machine, `<namespace>/<name>` (for people;
/// the claim itself is [`HARDWARE_CLAIM_LABEL`]).
pub const HARDWARE_CLAIM_ANNOTATION: &str = "infrastructure.cluster.x-k8s.io/tinkerbell-machine";

/// The label on a claimed Hardware naming the Cluster API cluster of its machine.
pub const HARDWARE_CLUSTER_LABEL: &str = "cluster.x-k8s.io/cluster-name";

/// The annotation that pauses reconciliation of one object (Cluster API's).
pub const PAUSED_ANNOTATION: &str = "cluster.x-k8s.io/paused";

/// The finalizer of the provider on TinkerbellMachines.
pub const MACHINE_FINALIZER: &str = "tinkerbellmachine.infrastructure.cluster.x-k8s.io";

/// The Hardware label whose values are the failure domains, unless a TinkerbellCluster names
/// another in `spec.failureDomainLabel`.
pub const DEFAULT_FAILURE_DOMAIN_LABEL: &str = "topology.kubernetes.io/zone";

/// The file a bootstrap provider's data creates once the node bootstrapped (Cluster API's
/// bootstrap contract); templates that wait for bootstrap can poll for it.
pub const BOOTSTRAP_SENTINEL: &str = "/run/cluster-api/bootstrap-success.complete";

/// `tinkerbell://<namespace>/<hardware>`: the provider ID of a machine on that Hardware.
pub fn provider_id(namespace: &str, hardware: &str) -> String {
    format!("tinkerbell://{namespace}/{hardware}")
}

/// The namespace and Hardware name of a provider ID this provider wrote, `None` for any other.
pub fn parse_provider_id(id: &str) -> Option<(&str, &str)> {
    let rest = id.strip_prefix("tinkerbell://")?;
    let (ns, name) = rest.split_once('/')?;
    (!ns.is_empty() && !name.is_empty() && !name.contains('/')).then_some((ns, name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn provider_ids_round_trip_and_foreign_ones_are_refused() {
        assert_eq!(provider_id("ns", "hw-1"), "tinkerbell://ns/hw-1");
        assert_eq!(
            parse_provider_id("tinkerbell://ns/hw-1"),
            Some(("ns", "hw-1"))
        );
        for bad in [
            "aws://x/y",
            "tinkerbell://ns",
            "tinkerbell:///hw",
            "tinkerbell://ns/",
            "tinkerbell://a/b/c",
        ] {
            assert_eq!(parse_provider_id(bad), None, "{bad}");
        }
    }
}
