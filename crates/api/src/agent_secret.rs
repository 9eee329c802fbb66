//! A machine's pre-shared agent secret: the Hardware annotation that names it, the Secret type
//! it must have, how its value is read, and the copy the controller keeps in the system
//! namespace for Hegel.
//!
//! The annotation may name only a Secret of type [`AGENT_SECRET_TYPE`] (RBAC cannot filter by
//! type, so the controller checks it): whoever may edit a Hardware must not be able to send an
//! ordinary Secret of its namespace into a boot script. The controller (which publishes the
//! value's hash for the servers) reads the named Secret in the Hardware's namespace and copies
//! a valid one into the system namespace ([`copy_name`], [`copy_for`]); Hegel reads only those
//! copies, so it needs no access to Secrets outside the system namespace.
//!
//! The value a machine boots with is not the operator's value but one derived from it per
//! generation ([`derive_value`]): the agent exchanges it for a session once, and the controller
//! then moves the machine to the next generation, so the value on the kernel command line (which
//! every action can read) is worth nothing after the first connect. The copy keeps the
//! generation ([`GENERATION_ANNOTATION`]) and which agent exchanged the previous one
//! ([`EXCHANGED_BY_ANNOTATION`]); Hegel serves the copy's value as it is.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::ObjectMeta;

/// The Hardware annotation naming the Secret (in the Hardware's namespace).
pub const AGENT_SECRET_ANNOTATION: &str = "tinkerbell.org/agent-secret";
/// The only Secret type the annotation may name (and the type of the copies).
pub const AGENT_SECRET_TYPE: &str = "tinkerbell.org/agent-secret";
/// The key of the Secret's data holding the value.
pub const AGENT_SECRET_KEY: &str = "secret";
/// The longest value accepted (it travels on the kernel command line).
pub const MAX_AGENT_SECRET_LEN: usize = 256;
/// The namespace the copies live in unless configured otherwise (the controller's and
/// Hegel's `--system-namespace`).
pub const DEFAULT_SYSTEM_NAMESPACE: &str = "tink-system";
/// The label (value `"true"`) every copy carries; Hegel and the controller select copies by it.
pub const COPY_LABEL: &str = "tinkerbell.org/agent-secret-copy";
/// The label holding the namespace of the Hardware a copy is for.
pub const HARDWARE_NAMESPACE_LABEL: &str = "tinkerbell.org/hardware-namespace";
/// The label holding the name of the Hardware a copy is for (left out when the name is longer
/// than a label value may be; [`HARDWARE_ANNOTATION`] always has it).
pub const HARDWARE_NAME_LABEL: &str = "tinkerbell.org/hardware-name";
/// The annotation holding `namespace/name` of the Hardware a copy is for.
pub const HARDWARE_ANNOTATION: &str = "tinkerbell.org/hardware";
/// The annotation holding `namespace/name` of the Secret a copy was made from.
pub const SOURCE_ANNOTATION: &str = "tinkerbell.org/agent-secret-source";
/// The annotation holding the generation (a decimal number) whose derived value a copy holds.
pub const GENERATION_ANNOTATION: &str = "tinkerbell.org/agent-secret-generation";
/// The annotation holding the bus token of the agent that exchanged the previous generation's
/// value for a session (empty when none did): only that agent may use it again, after an
/// operator reset.
pub const EXCHANGED_BY_ANNOTATION: &str = "tinkerbell.org/agent-secret-exchanged-by";

/// The boot secret of generation `generation` derived from the operator's value `source`:
/// `hex(HMAC-SHA256(key = source, msg = "tink-agent-secret/<generation>"))`, 64 printable
/// characters. Knowing one generation's value tells nothing of another's.
pub fn derive_value(source: &str, generation: u64) -> String {
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, source.as_bytes());
    let tag = ring::hmac::sign(&key, format!("tink-agent-secret/{generation}").as_bytes());
    tag.as_ref().iter().map(|b| format!("{b:02x}")).collect()
}

/// The generation of a copy, if it records one.
pub fn copy_generation(copy: &Secret) -> Option<u64> {
    copy.metadata
        .annotations
        .as_ref()?
        .get(GENERATION_ANNOTATION)?
        .parse()
        .ok()
}

/// The agent token that exchanged the previous generation's value, as a copy records it.
pub fn copy_exchanged_by(copy: &Secret) -> Option<&str> {
    copy.metadata
        .annotations
        .as_ref()?
        .get(EXCHANGED_BY_ANNOTATION)
        .map(String::as_str)
        .filter(|t| !t.is_empty())
}

/// `copy` recording generation `generation` and the agent that exchanged the previous one.
pub fn with_generation(mut copy: Secret, generation: u64, exchanged_by: Option<&str>) -> Secret {
    let annotations = copy.metadata.annotations.get_or_insert_default();
    annotations.insert(GENERATION_ANNOTATION.to_string(), generation.to_string());
    annotations.insert(
        EXCHANGED_BY_ANNOTATION.to_string(),
        exchanged_by.unwrap_or_default().to_string(),
    );
    copy
}

/// Why `secret` may not be used as an agent secret because of its type, if so. A Secret
/// without a type is `Opaque` (the API server's default).
pub fn check_type(secret: &Secret) -> Result<(), String> {
    match secret.type_.as_deref().filter(|t| !t.is_empty()) {
        Some(AGENT_SECRET_TYPE) => Ok(()),
        other => Err(format!(
            "has type {}; it must have type {AGENT_SECRET_TYPE}",
            other.unwrap_or("Opaque")
        )),
    }
}

/// [`check_type`], then [`agent_secret_value`]: the value of a Secret that may be used as an
/// agent secret, or why not.
pub fn typed_agent_secret_value(secret: &Secret) -> Result<String, String> {
    check_type(secret)?;
    agent_secret_value(secret)
}

/// The name of the copy of Hardware `namespace/name`'s agent secret in the system namespace:
/// `agent-secret-` and 40 hex digits of the SHA-256 of `namespace/name` (a valid DNS label
/// whatever the names, and the same in every replica).
pub fn copy_name(namespace: &str, name: &str) -> String {
    let digest = ring::digest::digest(
        &ring::digest::SHA256,
        format!("{namespace}/{name}").as_bytes(),
    );
    let hex: String = digest.as_ref()[..20]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("agent-secret-{hex}")
}

/// The copy of Hardware `hw_namespace/hw_name`'s agent secret `value`, read from the Secret
/// `source` (in the Hardware's namespace), as the controller writes it into `system_namespace`.
pub fn copy_for(
    system_namespace: &str,
    hw_namespace: &str,
    hw_name: &str,
    source: &str,
    value: &str,
) -> Secret {
    let mut labels = BTreeMap::from([
        (COPY_LABEL.to_string(), "true".to_string()),
        (
            "app.kubernetes.io/managed-by".to_string(),
            "tink-controller".to_string(),
        ),
        (
            HARDWARE_NAMESPACE_LABEL.to_string(),
            hw_namespace.to_string(),
        ),
    ]);
    // A Hardware name is a DNS subdomain: a valid label value when it is short enough.
    if hw_name.len() <= 63 {
        labels.insert(HARDWARE_NAME_LABEL.to_string(), hw_name.to_string());
    }
    Secret {
        metadata: ObjectMeta {
            name: Some(copy_name(hw_namespace, hw_name)),
            namespace: Some(system_namespace.to_string()),
            labels: Some(labels),
            annotations: Some(BTreeMap::from([
                (
                    HARDWARE_ANNOTATION.to_string(),
                    format!("{hw_namespace}/{hw_name}"),
                ),
                (
                    SOURCE_ANNOTATION.to_string(),
                    format!("{hw_namespace}/{source}"),
                ),
            ])),
            ..Default::default()
        },
        type_: Some(AGENT_SECRET_TYPE.to_string()),
        data: Some(BTreeMap::from([(
            AGENT_SECRET_KEY.to_string(),
            ByteString(value.as_bytes().to_vec()),
        )])),
        ..Default::default()
    }
}

/// Whether `have` already is the copy `want` (type, data, and the labels and annotations
/// [`copy_for`] sets; other labels and annotations are left alone).
pub fn copy_is_current(have: &Secret, want: &Secret) -> bool {
    let subset = |w: &Option<BTreeMap<String, String>>, h: &Option<BTreeMap<String, String>>| {
        w.iter()
            .flatten()
            .all(|(k, v)| h.as_ref().and_then(|h| h.get(k)) == Some(v))
    };
    have.type_ == want.type_
        && have.data == want.data
        && subset(&want.metadata.labels, &have.metadata.labels)
        && subset(&want.metadata.annotations, &have.metadata.annotations)
}

/// The value of the copy `copy` for Hardware `hw_namespace/hw_name` whose annotation names
/// `source`, or why it cannot be used (a copy of another Hardware's or of a Secret the
/// annotation no longer names is refused, as is one of the wrong type).
pub fn copy_value(
    copy: &Secret,
    hw_namespace: &str,
    hw_name: &str,
    source: &str,
) -> Result<String, String> {
    let annotation = |k: &str| {
        copy.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(k))
            .map(String::as_str)
    };
    if annotation(HARDWARE_ANNOTATION) != Some(&format!("{hw_namespace}/{hw_name}")) {
        return Err("its copy belongs to another Hardware".into());
    }
    if annotation(SOURCE_ANNOTATION) != Some(&format!("{hw_namespace}/{source}")) {
        return Err(format!(
            "the copy of Secret {hw_namespace}/{source} is not made yet"
        ));
    }
    typed_agent_secret_value(copy)
}

/// The value in `secret` (trimmed), or why it cannot be used. A usable value is printable
/// ASCII without spaces (a kernel parameter and gRPC metadata) and at most
/// [`MAX_AGENT_SECRET_LEN`] bytes.
pub fn agent_secret_value(secret: &Secret) -> Result<String, String> {
    let bytes = secret
        .data
        .as_ref()
        .and_then(|d| d.get(AGENT_SECRET_KEY))
        .ok_or_else(|| format!("has no `{AGENT_SECRET_KEY}` key"))?;
    let text = std::str::from_utf8(&bytes.0)
        .map_err(|_| format!("data.{AGENT_SECRET_KEY} is not UTF-8"))?
        .trim();
    if text.is_empty() {
        return Err(format!("data.{AGENT_SECRET_KEY} is empty"));
    }
    if text.len() > MAX_AGENT_SECRET_LEN {
        return Err(format!(
            "data.{AGENT_SECRET_KEY} is longer than {MAX_AGENT_SECRET_LEN} bytes"
        ));
    }
    if !text.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(format!(
            "data.{AGENT_SECRET_KEY} must be printable ASCII without spaces (it is a kernel parameter)"
        ));
    }
    Ok(text.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::ByteString;

    fn secret(value: &[u8]) -> Secret {
        Secret {
            data: Some([(AGENT_SECRET_KEY.to_string(), ByteString(value.to_vec()))].into()),
            ..Default::default()
        }
    }

    #[test]
    fn values_are_trimmed_and_checked() {
        assert_eq!(
            agent_secret_value(&secret(b"abc-123\n")).as_deref(),
            Ok("abc-123")
        );
        assert!(
            agent_secret_value(&secret(b""))
                .unwrap_err()
                .contains("empty")
        );
        assert!(
            agent_secret_value(&secret(b"a b"))
                .unwrap_err()
                .contains("without spaces")
        );
        assert!(
            agent_secret_value(&secret(&[b'x'; 300]))
                .unwrap_err()
                .contains("longer")
        );
        assert!(
            agent_secret_value(&secret(&[0xff]))
                .unwrap_err()
                .contains("UTF-8")
        );
        assert!(
            agent_secret_value(&Secret::default())
                .unwrap_err()
                .contains("no `secret` key")
        );
    }

    fn typed(type_: Option<&str>, value: &[u8]) -> Secret {
        Secret {
            type_: type_.map(str::to_string),
            ..secret(value)
        }
    }

    #[test]
    fn only_the_dedicated_type_is_accepted() {
        assert_eq!(
            typed_agent_secret_value(&typed(Some(AGENT_SECRET_TYPE), b"v-1")).as_deref(),
            Ok("v-1")
        );
        assert_eq!(
            typed_agent_secret_value(&typed(Some("Opaque"), b"v-1")),
            Err("has type Opaque; it must have type tinkerbell.org/agent-secret".into())
        );
        assert!(
            typed_agent_secret_value(&typed(None, b"v-1"))
                .unwrap_err()
                .contains("has type Opaque")
        );
        assert!(
            typed_agent_secret_value(&typed(Some("kubernetes.io/basic-auth"), b"v-1"))
                .unwrap_err()
                .contains("has type kubernetes.io/basic-auth")
        );
        // The type is checked before the value is looked at.
        assert!(
            typed_agent_secret_value(&typed(Some("Opaque"), b""))
                .unwrap_err()
                .contains("must have type")
        );
    }

    #[test]
    fn derived_values_are_hmac_sha256_per_generation() {
        // RFC 4231 test case 2: key "Jefe", data "what do ya want for nothing?".
        let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, b"Jefe");
        let tag = ring::hmac::sign(&key, b"what do ya want for nothing?");
        let hex: String = tag.as_ref().iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(
            hex,
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
        let v1 = derive_value("operator-value", 1);
        assert_eq!(v1.len(), 64);
        assert_eq!(v1, derive_value("operator-value", 1));
        assert_ne!(v1, derive_value("operator-value", 2));
        assert_ne!(v1, derive_value("other-value", 1));
        assert!(!v1.contains("operator-value"));
        // A usable agent secret (printable, short enough for the kernel command line).
        let copy = copy_for("tink-system", "ns", "m1", "m1-agent", &v1);
        assert_eq!(typed_agent_secret_value(&copy).as_deref(), Ok(v1.as_str()));
    }

    #[test]
    fn copies_record_their_generation() {
        let c = copy_for("tink-system", "ns", "m1", "m1-agent", "v-1");
        assert_eq!(copy_generation(&c), None);
        let c = with_generation(c, 7, Some("aa_3abb"));
        assert_eq!(copy_generation(&c), Some(7));
        assert_eq!(copy_exchanged_by(&c), Some("aa_3abb"));
        let c = with_generation(c, 8, None);
        assert_eq!(copy_generation(&c), Some(8));
        assert_eq!(copy_exchanged_by(&c), None);
        // Another generation is another copy.
        let want = with_generation(
            copy_for("tink-system", "ns", "m1", "m1-agent", "v-1"),
            9,
            None,
        );
        assert!(!copy_is_current(&c, &want));
    }

    #[test]
    fn copy_names_are_dns_labels_and_distinct() {
        let a = copy_name("ns", "machine-1");
        assert_eq!(a, copy_name("ns", "machine-1"));
        assert_eq!(a.len(), "agent-secret-".len() + 40);
        assert!(
            a.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        );
        assert_ne!(a, copy_name("ns", "machine-2"));
        assert_ne!(a, copy_name("ns2", "machine-1"));
        // No way to make two keys collide by moving the separator.
        assert_ne!(copy_name("a-b", "c"), copy_name("a", "b-c"));
        let long = "m".repeat(253);
        assert!(copy_name("ns", &long).len() <= 63);
    }

    #[test]
    fn copies_name_their_hardware_and_source() {
        let c = copy_for("tink-system", "ns", "m1", "m1-agent", "v-1");
        assert_eq!(c.metadata.namespace.as_deref(), Some("tink-system"));
        assert_eq!(c.metadata.name, Some(copy_name("ns", "m1")));
        let labels = c.metadata.labels.clone().unwrap_or_default();
        assert_eq!(labels[COPY_LABEL], "true");
        assert_eq!(labels[HARDWARE_NAMESPACE_LABEL], "ns");
        assert_eq!(labels[HARDWARE_NAME_LABEL], "m1");
        assert_eq!(copy_value(&c, "ns", "m1", "m1-agent").as_deref(), Ok("v-1"));
        assert!(
            copy_value(&c, "ns", "m2", "m1-agent")
                .unwrap_err()
                .contains("another Hardware")
        );
        assert!(
            copy_value(&c, "ns", "m1", "other")
                .unwrap_err()
                .contains("not made yet")
        );
        let mut opaque = c.clone();
        opaque.type_ = Some("Opaque".into());
        assert!(
            copy_value(&opaque, "ns", "m1", "m1-agent")
                .unwrap_err()
                .contains("must have type")
        );
        let long = copy_for("tink-system", "ns", &"m".repeat(64), "s", "v");
        assert!(
            !long
                .metadata
                .labels
                .unwrap_or_default()
                .contains_key(HARDWARE_NAME_LABEL)
        );
    }

    #[test]
    fn a_copy_is_current_only_with_the_same_value_type_and_keys() {
        let want = copy_for("tink-system", "ns", "m1", "m1-agent", "v-1");
        let mut have = want.clone();
        have.metadata
            .labels
            .get_or_insert_default()
            .insert("extra".into(), "kept".into());
        assert!(copy_is_current(&have, &want));
        assert!(!copy_is_current(
            &copy_for("tink-system", "ns", "m1", "m1-agent", "v-2"),
            &want
        ));
        assert!(!copy_is_current(
            &copy_for("tink-system", "ns", "m1", "other", "v-1"),
            &want
        ));
        let mut opaque = want.clone();
        opaque.type_ = Some("Opaque".into());
        assert!(!copy_is_current(&opaque, &want));
    }
}
