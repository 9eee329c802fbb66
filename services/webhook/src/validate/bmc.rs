//! bmc.tinkerbell.org Machine, Job and Task: what the CRD schema cannot say about where the
//! BMC controller will connect and whose Secrets it will read.
//!
//! - `spec.connection.host` must read as the Redfish provider reads it
//!   ([`tink_bmc::RedfishHost::parse`]: a host, an optional `http://`/`https://` scheme and
//!   port, no credentials).
//! - A Machine (or Task) may only name Secrets of its own namespace: `authSecretRef` and every
//!   RPC HMAC secret, whose `namespace` is empty (the object's) or the object's own. The
//!   controller refuses anything else too (crates/bmc/src/credentials.rs); refusing it here
//!   tells the editor at once instead of through a `Contactable` condition.
//! - The RPC `consumerURL` is an absolute http(s) URL without credentials.
//! - A Job's `machineRef` names a Machine of the Job's own namespace: a Job may not power
//!   another namespace's machines.
//!
//! On UPDATE a field is checked only when the update changes it, so an object stored before
//! the webhook existed does not block unrelated edits (labels, annotations); the controller
//! still refuses to act on it.

use tink_api::bmc::{Connection, Job, Machine, Task};
use tink_bmc::RedfishHost;

use super::{Operation, Reason, Request, Verdict, deny_parse, formats};

const RPC_EXAMPLE: &str = "https://bmc-proxy.example/rpc";
const HOST_EXPECTED: &str = "an IP address or host name, optionally with http:// or https:// and a port, such as 10.0.0.5, [fd00::5]:443 or https://bmc-1.example:8443 (credentials go in the authSecretRef Secret)";

/// Whether the field at `pointer` is new: always on CREATE, on UPDATE when its value differs
/// from the stored object's.
fn changed(req: &Request<'_>, pointer: &str) -> bool {
    match (req.operation, req.old) {
        (Operation::Update, Some(old)) => old.pointer(pointer) != req.object.pointer(pointer),
        _ => true,
    }
}

fn typed<T: serde::de::DeserializeOwned>(
    req: &Request<'_>,
    kind: &str,
    v: &mut Verdict,
) -> Option<T> {
    match tink_api::from_value::<T>(req.object.clone()) {
        Ok(t) => Some(t),
        Err(e) => {
            deny_parse(v, kind, &e);
            None
        }
    }
}

/// Checks a Machine create or update.
pub fn validate_machine(req: &Request<'_>, v: &mut Verdict) {
    if let Some(m) = typed::<Machine>(req, "Machine", v) {
        connection(req, "Machine", &m.spec.connection, v);
    }
}

/// Checks a Task create or update (its connection as a Machine's).
pub fn validate_task(req: &Request<'_>, v: &mut Verdict) {
    if let Some(t) = typed::<Task>(req, "Task", v)
        && let Some(c) = &t.spec.connection
    {
        connection(req, "Task", c, v);
    }
}

/// Checks a Job create or update.
pub fn validate_job(req: &Request<'_>, v: &mut Verdict) {
    let Some(job) = typed::<Job>(req, "Job", v) else {
        return;
    };
    let r = &job.spec.machine_ref;
    if changed(req, "/spec/machineRef/name") && r.name.trim().is_empty() {
        v.deny(
            "spec.machineRef.name",
            Reason::Required,
            "the name of the Machine the Job's tasks run against is required",
        );
    }
    if changed(req, "/spec/machineRef/namespace")
        && !r.namespace.is_empty()
        && r.namespace != req.namespace
    {
        v.deny(
            "spec.machineRef.namespace",
            Reason::Forbidden,
            format!(
                "Machine {}/{} is not in the Job's namespace {}: a Job may only run against Machines of its own namespace; set {:?} or leave it empty",
                r.namespace, r.name, req.namespace, req.namespace
            ),
        );
    }
}

fn connection(req: &Request<'_>, kind: &str, c: &Connection, v: &mut Verdict) {
    let options = c.provider_options.as_ref();
    let redfish_port = options
        .and_then(|o| o.redfish.as_ref())
        .and_then(|r| r.port);
    if changed(req, "/spec/connection/host")
        || changed(req, "/spec/connection/providerOptions/redfish/port")
    {
        host(c, redfish_port, v);
    }
    if changed(req, "/spec/connection/authSecretRef") {
        let r = &c.auth_secret_ref;
        let name = r.name.as_deref().unwrap_or_default();
        let namespace = r.namespace.as_deref().unwrap_or_default();
        if name.is_empty() && !namespace.is_empty() {
            v.deny(
                "spec.connection.authSecretRef.name",
                Reason::Required,
                "the name of the kubernetes.io/basic-auth Secret with the BMC's username and password is required when authSecretRef is given",
            );
        }
        own_namespace(
            req,
            kind,
            "spec.connection.authSecretRef.namespace",
            namespace,
            name,
            v,
        );
    }
    let Some(rpc) = options.and_then(|o| o.rpc.as_ref()) else {
        return;
    };
    let base = "spec.connection.providerOptions.rpc";
    if changed(req, "/spec/connection/providerOptions/rpc/consumerURL") {
        let field = format!("{base}.consumerURL");
        let url = rpc.consumer_url.trim();
        if url.is_empty() {
            v.deny(
                field,
                Reason::Required,
                format!("the URL every RPC request is POSTed to is required: an absolute http:// or https:// URL, such as {RPC_EXAMPLE}"),
            );
        } else if let Err(m) = endpoint(
            url,
            None,
            &format!(
                "an absolute http:// or https:// URL without credentials, such as {RPC_EXAMPLE}"
            ),
        ) {
            // First: its message does not repeat the URL, which may hold a password.
            v.deny(field, Reason::Invalid, m);
        } else if let Err(m) = formats::http_url(url, RPC_EXAMPLE) {
            v.deny(field, Reason::Invalid, m);
        }
    }
    if changed(req, "/spec/connection/providerOptions/rpc/hmac/secrets") {
        let secrets = rpc.hmac.as_ref().map(|h| &h.secrets);
        for (algorithm, refs) in secrets.into_iter().flatten() {
            let at = format!("{base}.hmac.secrets[{algorithm}]");
            if !matches!(
                algorithm.to_ascii_lowercase().as_str(),
                "sha256" | "sha512" | "256" | "512"
            ) {
                v.deny(
                    &at,
                    Reason::Invalid,
                    format!("HMAC algorithm {algorithm:?} is not supported: use sha256 or sha512"),
                );
            }
            for (i, r) in refs.iter().enumerate() {
                let name = r.name.as_deref().unwrap_or_default();
                if name.is_empty() {
                    v.deny(
                        format!("{at}[{i}].name"),
                        Reason::Required,
                        "the name of a Secret whose `secret` key is the HMAC key is required",
                    );
                }
                own_namespace(
                    req,
                    kind,
                    &format!("{at}[{i}].namespace"),
                    r.namespace.as_deref().unwrap_or_default(),
                    name,
                    v,
                );
            }
        }
    }
}

fn host(c: &Connection, redfish_port: Option<i32>, v: &mut Verdict) {
    const FIELD: &str = "spec.connection.host";
    if c.host.trim().is_empty() {
        v.deny(
            FIELD,
            Reason::Required,
            format!("the BMC's address is required: {HOST_EXPECTED}"),
        );
    } else if let Err(m) = endpoint(&c.host, redfish_port, HOST_EXPECTED) {
        v.deny(FIELD, Reason::Invalid, m);
    }
}

/// The provider's reading of a host or URL, its error worded for the editor. The message
/// does not repeat `text`: a host with credentials in it would put them in the API server's
/// answer (and whatever logs it).
fn endpoint(text: &str, port: Option<i32>, expected: &str) -> Result<RedfishHost, String> {
    RedfishHost::parse(text, port).map_err(|e| {
        let message = match e {
            tink_bmc::ErrorKind::Config(m) => m,
            other => other.to_string(),
        };
        let prefix = format!("host {text:?}: ");
        let why = message.strip_prefix(&prefix).unwrap_or("not a BMC address");
        format!("{why}; expected {expected}")
    })
}

fn own_namespace(
    req: &Request<'_>,
    kind: &str,
    field: &str,
    namespace: &str,
    name: &str,
    v: &mut Verdict,
) {
    if namespace.is_empty() || namespace == req.namespace {
        return;
    }
    v.deny(
        field,
        Reason::Forbidden,
        format!(
            "Secret {namespace}/{name} is not in the {kind}'s namespace {own}: a {kind} may only use Secrets of its own namespace (the BMC controller would send them to the {kind}'s host); set {own:?} or leave it empty",
            own = req.namespace
        ),
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn check(
        f: fn(&Request<'_>, &mut Verdict),
        op: Operation,
        obj: &Value,
        old: Option<&Value>,
    ) -> Verdict {
        let mut v = Verdict::default();
        let req = Request {
            operation: op,
            namespace: "team-a",
            name: "x",
            object: obj,
            old,
        };
        f(&req, &mut v);
        v
    }

    fn fields(v: &Verdict) -> Vec<(&str, Reason)> {
        v.violations
            .iter()
            .map(|x| (x.field.as_str(), x.reason))
            .collect()
    }

    fn machine(connection: Value) -> Value {
        json!({"apiVersion": "bmc.tinkerbell.org/v1alpha1", "kind": "Machine",
            "metadata": {"name": "m", "namespace": "team-a"},
            "spec": {"connection": connection}})
    }

    #[test]
    fn hosts_read_as_the_redfish_provider_reads_them() {
        for ok in [
            "10.0.0.5",
            "bmc-1.example",
            "bmc-1.example:8443",
            "https://10.0.0.5",
            "http://10.0.0.5:8000",
            "[fd00::5]:443",
            "fd00::5",
        ] {
            let v = check(
                validate_machine,
                Operation::Create,
                &machine(json!({"host": ok})),
                None,
            );
            assert!(v.allowed(), "{ok}: {v:?}");
        }
        for (bad, says) in [
            (
                "https://admin:pw@10.0.0.5",
                "credentials belong in the auth Secret",
            ),
            ("ftp://10.0.0.5", "only http:// and https://"),
            ("10.0.0.5:99999", "bad port"),
            ("[fd00::5", "unclosed ["),
            ("  ", "the BMC's address is required"),
        ] {
            let v = check(
                validate_machine,
                Operation::Create,
                &machine(json!({"host": bad})),
                None,
            );
            assert_eq!(v.violations.len(), 1, "{bad}: {v:?}");
            assert_eq!(v.violations[0].field, "spec.connection.host");
            assert!(v.violations[0].message.contains(says), "{bad}: {v:?}");
            // The host is not repeated: a password in it would be in the answer.
            assert!(!v.violations[0].message.contains("pw"), "{v:?}");
        }
    }

    #[test]
    fn secrets_only_from_the_own_namespace() {
        let own = |ns: Option<&str>| {
            let mut r = json!({"name": "bmc-auth"});
            if let Some(ns) = ns {
                r["namespace"] = json!(ns);
            }
            machine(json!({"host": "10.0.0.5", "authSecretRef": r}))
        };
        for ok in [None, Some(""), Some("team-a")] {
            let v = check(validate_machine, Operation::Create, &own(ok), None);
            assert!(v.allowed(), "{ok:?}: {v:?}");
        }
        let v = check(
            validate_machine,
            Operation::Create,
            &own(Some("kube-system")),
            None,
        );
        assert_eq!(
            fields(&v),
            [("spec.connection.authSecretRef.namespace", Reason::Forbidden)]
        );
        assert!(
            v.violations[0].message.contains(
                "Secret kube-system/bmc-auth is not in the Machine's namespace team-a: a Machine may only use Secrets of its own namespace"
            ),
            "{v:?}"
        );
        let v = check(
            validate_machine,
            Operation::Create,
            &machine(json!({"host": "h", "authSecretRef": {"namespace": "team-a"}})),
            None,
        );
        assert_eq!(
            fields(&v),
            [("spec.connection.authSecretRef.name", Reason::Required)]
        );
    }

    #[test]
    fn rpc_url_and_hmac_secrets() {
        let rpc = |url: &str, secrets: Value| {
            machine(json!({"host": "10.0.0.5", "providerOptions": {"rpc": {
                "consumerURL": url, "hmac": {"secrets": secrets}}}}))
        };
        let good = rpc(
            "https://example.com/rpc",
            json!({"sha256": [{"name": "s1"}, {"name": "s2", "namespace": "team-a"}],
                   "SHA512": [{"name": "s1"}]}),
        );
        assert!(check(validate_machine, Operation::Create, &good, None).allowed());
        let bad = rpc(
            "ftp://example.com/rpc",
            json!({"sha256": [{"name": "s1", "namespace": "default"}, {"namespace": "team-a"}],
                   "md5": [{"name": "s3"}]}),
        );
        let v = check(validate_machine, Operation::Create, &bad, None);
        assert_eq!(
            fields(&v),
            [
                (
                    "spec.connection.providerOptions.rpc.consumerURL",
                    Reason::Invalid
                ),
                (
                    "spec.connection.providerOptions.rpc.hmac.secrets[md5]",
                    Reason::Invalid
                ),
                (
                    "spec.connection.providerOptions.rpc.hmac.secrets[sha256][0].namespace",
                    Reason::Forbidden
                ),
                (
                    "spec.connection.providerOptions.rpc.hmac.secrets[sha256][1].name",
                    Reason::Required
                ),
            ]
        );
        assert!(
            v.violations[0].message.starts_with("only http:// and https:// are allowed; expected an absolute http:// or https:// URL"),
            "{v:?}"
        );
        let v = check(
            validate_machine,
            Operation::Create,
            &rpc("https://u:p@example.com/rpc", json!({})),
            None,
        );
        assert_eq!(
            fields(&v),
            [(
                "spec.connection.providerOptions.rpc.consumerURL",
                Reason::Invalid
            )]
        );
        assert!(v.violations[0].message.contains("credentials"), "{v:?}");
        assert!(!v.violations[0].message.contains("u:p@"), "{v:?}");
    }

    #[test]
    fn updates_check_only_what_they_change() {
        let stored = machine(json!({"host": "10.0.0.5",
            "authSecretRef": {"name": "a", "namespace": "elsewhere"}}));
        let mut labelled = stored.clone();
        labelled["metadata"]["labels"] = json!({"rack": "r1"});
        assert!(
            check(
                validate_machine,
                Operation::Update,
                &labelled,
                Some(&stored)
            )
            .allowed()
        );
        let mut moved = labelled.clone();
        moved["spec"]["connection"]["authSecretRef"]["namespace"] = json!("other");
        let v = check(validate_machine, Operation::Update, &moved, Some(&stored));
        assert_eq!(
            fields(&v),
            [("spec.connection.authSecretRef.namespace", Reason::Forbidden)]
        );
        let mut new_host = labelled.clone();
        new_host["spec"]["connection"]["host"] = json!("https://u:p@10.0.0.6");
        let v = check(
            validate_machine,
            Operation::Update,
            &new_host,
            Some(&stored),
        );
        assert_eq!(fields(&v), [("spec.connection.host", Reason::Invalid)]);
    }

    fn job(machine_ref: Value) -> Value {
        json!({"apiVersion": "bmc.tinkerbell.org/v1alpha1", "kind": "Job",
            "metadata": {"name": "j", "namespace": "team-a"},
            "spec": {"machineRef": machine_ref, "tasks": [{"powerAction": "on"}]}})
    }

    #[test]
    fn jobs_run_against_machines_of_their_namespace() {
        let ok = job(json!({"name": "m", "namespace": "team-a"}));
        assert!(check(validate_job, Operation::Create, &ok, None).allowed());
        let v = check(
            validate_job,
            Operation::Create,
            &job(json!({"name": "m", "namespace": "team-b"})),
            None,
        );
        assert_eq!(
            fields(&v),
            [("spec.machineRef.namespace", Reason::Forbidden)]
        );
        assert!(
            v.violations[0]
                .message
                .contains("Machine team-b/m is not in the Job's namespace team-a"),
            "{v:?}"
        );
        let v = check(
            validate_job,
            Operation::Create,
            &job(json!({"name": "", "namespace": ""})),
            None,
        );
        assert_eq!(fields(&v), [("spec.machineRef.name", Reason::Required)]);
        // A malformed object is refused with its field, not ignored.
        let v = check(
            validate_job,
            Operation::Create,
            &job(json!({"name": 5, "namespace": "team-a"})),
            None,
        );
        assert_eq!(v.violations.len(), 1, "{v:?}");
        assert!(
            v.violations[0].field.starts_with("spec.machineRef"),
            "{v:?}"
        );
    }

    #[test]
    fn tasks_connection_is_checked_as_a_machines() {
        let task = |connection: Value| {
            json!({"apiVersion": "bmc.tinkerbell.org/v1alpha1", "kind": "Task",
                "metadata": {"name": "t", "namespace": "team-a"},
                "spec": {"task": {"powerAction": "off"}, "connection": connection}})
        };
        let ok = task(json!({"host": "10.0.0.5", "authSecretRef": {"name": "a"}}));
        assert!(check(validate_task, Operation::Create, &ok, None).allowed());
        let bad = task(json!({"host": "http://u:p@10.0.0.5",
            "authSecretRef": {"name": "a", "namespace": "kube-system"}}));
        let v = check(validate_task, Operation::Create, &bad, None);
        assert_eq!(
            fields(&v),
            [
                ("spec.connection.host", Reason::Invalid),
                ("spec.connection.authSecretRef.namespace", Reason::Forbidden)
            ]
        );
        assert!(
            v.violations[1].message.contains("the Task's namespace"),
            "{v:?}"
        );
    }
}
