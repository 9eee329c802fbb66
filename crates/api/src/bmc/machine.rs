//! `Machine`: how to reach one BMC, and its last observed power state.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::SecretReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{ConditionStatus, rules};
use crate::serde_util::is_false;

/// The port of `spec.connection.port` when none is given (IPMI's, as Rufio's default).
pub const DEFAULT_PORT: i32 = 623;

fn default_port() -> i32 {
    DEFAULT_PORT
}

fn secret_ref_is_empty(r: &SecretReference) -> bool {
    r.name.is_none() && r.namespace.is_none()
}

/// The desired state of a Machine: its BMC's connection.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "bmc.tinkerbell.org",
    version = "v1alpha1",
    kind = "Machine",
    plural = "machines",
    singular = "machine",
    namespaced,
    category = "tinkerbell",
    status = "MachineStatus",
    derive = "PartialEq",
    doc = "Machine is a baseboard management controller: how to reach it and its last observed power state.",
    printcolumn(
        name = "Host",
        type_ = "string",
        json_path = ".spec.connection.host",
        description = "BMC host"
    ),
    printcolumn(
        name = "Power",
        type_ = "string",
        json_path = ".status.powerState",
        description = "Last observed power state"
    ),
    printcolumn(
        name = "Contactable",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Contactable\")].status",
        description = "Whether the BMC answered the last call"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct MachineSpec {
    /// How to reach the Machine's BMC.
    pub connection: Connection,
}

/// How to reach a BMC.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Connection {
    /// The BMC's IP address or host name. For Redfish a host without a scheme means
    /// `https://`; a scheme (`http://` or `https://`) and a port may be given (as bmclib reads
    /// it). Every call to the BMC is a request from the controller to this host: see
    /// docs/bmc.md for what that lets a Machine's editor reach.
    #[schemars(length(min = 1))]
    pub host: String,
    /// Rufio's port field (623 when not given). The providers use their own ports:
    /// `providerOptions.redfish.port` and `providerOptions.ipmitool.port`, else the
    /// protocol's default (443, 623).
    #[serde(default = "default_port")]
    #[schemars(extend("default" = 623))]
    pub port: i32,
    /// A Secret with `username` and `password` keys: the BMC's credentials. Not needed by the
    /// RPC provider. It must be in the Machine's own namespace and of type
    /// `kubernetes.io/basic-auth`.
    #[serde(default, skip_serializing_if = "secret_ref_is_empty")]
    pub auth_secret_ref: SecretReference,
    /// Accept any TLS certificate from the BMC (most BMCs ship self-signed ones). False
    /// (the default) verifies it.
    #[serde(rename = "insecureTLS", default)]
    pub insecure_tls: bool,
    /// Provider-specific options.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider_options: Option<ProviderOptions>,
}

impl Default for Connection {
    fn default() -> Self {
        Self {
            host: String::new(),
            port: DEFAULT_PORT,
            auth_secret_ref: SecretReference::default(),
            insecure_tls: false,
            provider_options: None,
        }
    }
}

/// Provider-specific options.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProviderOptions {
    /// The providers to try first, in order (case-insensitive): `ipmitool`; `gofish`,
    /// `redfish`, `dell`, `supermicro` and `openbmc` (all Redfish here); `rpc`; `asrockrack` and
    /// `IntelAMT` are accepted and skipped (no such provider here).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(inner(regex(pattern = rules::PROVIDER_NAME_PATTERN)))]
    pub preferred_order: Vec<String>,
    /// Intel AMT options (accepted, not used: no AMT provider here).
    #[serde(rename = "intelAMT", default, skip_serializing_if = "Option::is_none")]
    pub intel_amt: Option<IntelAmtOptions>,
    /// ipmitool provider options.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ipmitool: Option<IpmitoolOptions>,
    /// Redfish provider options.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub redfish: Option<RedfishOptions>,
    /// RPC (webhook) provider options. When given, the RPC provider is used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rpc: Option<RpcOptions>,
}

/// Redfish provider options.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RedfishOptions {
    /// The port of Redfish calls (443 when not given or 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 65535))]
    pub port: Option<i32>,
    /// Basic authentication on every call; false (the default) opens a session and uses its
    /// token.
    #[serde(default, skip_serializing_if = "is_false")]
    pub use_basic_auth: bool,
    /// The system to manage on a BMC that manages several (the first system when not given).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub system_name: String,
}

/// ipmitool provider options.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct IpmitoolOptions {
    /// The UDP port of IPMI calls (623 when not given or 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 65535))]
    pub port: Option<i32>,
    /// The cipher suite (`-C`); 3, then 17, when not given (as bmclib).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub cipher_suite: String,
}

/// The scheme of Intel AMT calls.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum HostScheme {
    /// Plain HTTP (AMT's default).
    #[default]
    Http,
    /// HTTPS.
    Https,
}

/// Intel AMT options (kept for Rufio compatibility; no AMT provider here).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct IntelAmtOptions {
    /// The port of AMT calls.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 65535))]
    pub port: Option<i32>,
    /// `http` or `https`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_scheme: Option<HostScheme>,
}

/// RPC provider options: an HTTP POST per operation to a consumer that controls the machine
/// (bmclib's `rpc` provider format).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RpcOptions {
    /// The URL of the consumer every request goes to.
    #[serde(rename = "consumerURL")]
    #[schemars(length(min = 1))]
    pub consumer_url: String,
    /// Do not log the consumer's responses.
    #[serde(default, skip_serializing_if = "is_false")]
    pub log_notifications_disabled: bool,
    /// How requests are built.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request: Option<RequestOpts>,
    /// How the signature headers are written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature: Option<SignatureOpts>,
    /// The HMAC secrets and format.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hmac: Option<HmacOpts>,
    /// Experimental options.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub experimental: Option<ExperimentalOpts>,
}

/// How RPC requests are built.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RequestOpts {
    /// The request's content type (`application/json`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub http_content_type: String,
    /// The request's method (`POST`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub http_method: String,
    /// Headers added to every request.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub static_headers: BTreeMap<String, Vec<String>>,
    /// The timestamp's Go time format (RFC 3339).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub timestamp_format: String,
    /// The timestamp header (`X-Rufio-Timestamp`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub timestamp_header: String,
}

/// How RPC signature headers are written.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SignatureOpts {
    /// The signature header (`X-Rufio-Signature`), to which `-256` or `-512` is appended.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub header_name: String,
    /// Do not append the algorithm to the header name.
    #[serde(default, skip_serializing_if = "is_false")]
    pub append_algo_to_header_disabled: bool,
    /// Headers whose values are appended to the body before signing (the timestamp header).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub included_payload_headers: Vec<String>,
}

/// The HMAC secrets and signature format.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HmacOpts {
    /// Do not prefix each signature with its algorithm (`sha256=`).
    #[serde(default, skip_serializing_if = "is_false")]
    pub prefix_sig_disabled: bool,
    /// Secrets per algorithm (`sha256`, `sha512`), each a Secret with a `secret` key; every
    /// secret signs, so a consumer can rotate keys.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub secrets: BTreeMap<String, Vec<SecretReference>>,
}

/// Experimental RPC options.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ExperimentalOpts {
    /// A JSON document the request payload is embedded into.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub custom_request_payload: String,
    /// Where in `customRequestPayload` the payload goes, e.g. `object.data.body`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub dot_path: String,
}

/// A Machine's power state.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum PowerState {
    /// Powered on.
    On,
    /// Powered off.
    Off,
    /// Not known (the BMC did not answer, or answered something else).
    #[default]
    Unknown,
}

impl PowerState {
    /// The JSON string.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::On => "on",
            Self::Off => "off",
            Self::Unknown => "unknown",
        }
    }
}

impl std::fmt::Display for PowerState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The type of a Machine condition.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum MachineConditionType {
    /// The BMC answered the last call (`False` with the error as message when it did not).
    Contactable,
}

/// An observation about a Machine.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineCondition {
    /// The condition's type.
    #[serde(rename = "type")]
    pub type_: MachineConditionType,
    /// `True` or `False`.
    pub status: ConditionStatus,
    /// When the status last changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_update_time: Option<Time>,
    /// Details of the last transition, e.g. the provider's error.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
}

/// The observed state of a Machine.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineStatus {
    /// The last observed power state.
    #[serde(
        rename = "powerState",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub power: Option<PowerState>,
    /// Observations: `Contactable`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<MachineCondition>,
}

impl MachineStatus {
    /// The condition of type `t`.
    pub fn condition(&self, t: MachineConditionType) -> Option<&MachineCondition> {
        self.conditions.iter().find(|c| c.type_ == t)
    }

    /// Sets condition `t` (as Rufio: the time changes only when the status does). Returns
    /// whether anything changed.
    pub fn set_condition(
        &mut self,
        t: MachineConditionType,
        status: ConditionStatus,
        message: &str,
        now: Time,
    ) -> bool {
        match self.conditions.iter_mut().find(|c| c.type_ == t) {
            Some(c) if c.status == status && c.message == message => false,
            Some(c) => {
                if c.status != status {
                    c.last_update_time = Some(now);
                }
                c.status = status;
                c.message = message.to_string();
                true
            }
            None => {
                self.conditions.push(MachineCondition {
                    type_: t,
                    status,
                    last_update_time: Some(now),
                    message: message.to_string(),
                });
                true
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: i64) -> Time {
        Time(k8s_openapi::jiff::Timestamp::from_second(secs).expect("time"))
    }

    #[test]
    fn condition_time_moves_only_when_the_status_does() {
        let mut s = MachineStatus::default();
        assert!(s.set_condition(
            MachineConditionType::Contactable,
            ConditionStatus::True,
            "",
            at(1)
        ));
        assert!(!s.set_condition(
            MachineConditionType::Contactable,
            ConditionStatus::True,
            "",
            at(2)
        ));
        assert!(s.set_condition(
            MachineConditionType::Contactable,
            ConditionStatus::True,
            "slow",
            at(3)
        ));
        let c = s.condition(MachineConditionType::Contactable).expect("set");
        assert_eq!(c.last_update_time, Some(at(1)));
        assert!(s.set_condition(
            MachineConditionType::Contactable,
            ConditionStatus::False,
            "timed out",
            at(4)
        ));
        let c = s.condition(MachineConditionType::Contactable).expect("set");
        assert_eq!(
            (c.status, c.message.as_str(), c.last_update_time.clone()),
            (ConditionStatus::False, "timed out", Some(at(4)))
        );
        assert_eq!(s.conditions.len(), 1);
    }

    #[test]
    fn defaults_are_rufios() {
        let c: Connection = serde_json::from_str(r#"{"host": "10.0.0.1"}"#).expect("parse");
        assert_eq!(c.port, 623);
        assert!(!c.insecure_tls);
        assert_eq!(
            serde_json::to_value(&c).expect("json"),
            serde_json::json!({"host": "10.0.0.1", "port": 623, "insecureTLS": false})
        );
    }
}
