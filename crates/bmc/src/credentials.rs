//! Credentials from Kubernetes Secrets, with the checks that stop a Machine's editor from
//! sending someone else's credentials to a host of their choosing: the Secret must be in the
//! Machine's own namespace, and the BMC credentials must be a `kubernetes.io/basic-auth`
//! Secret (a type people create for exactly this, unlike an `Opaque` Secret that may hold
//! anything).

use k8s_openapi::api::core::v1::{Secret as KubeSecret, SecretReference};

use crate::{Credentials, Secret};

/// The Secret type BMC credentials must have.
pub const BASIC_AUTH_TYPE: &str = "kubernetes.io/basic-auth";

/// A Secret reference or Secret that cannot be used. No variant holds a secret value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CredentialError {
    /// The reference names no Secret.
    #[error("the Secret reference has no name")]
    NoName,
    /// The reference points into another namespace.
    #[error(
        "Secret {namespace}/{name} is not in the Machine's namespace {machine_namespace}: a Machine may only use its own namespace's Secrets"
    )]
    OtherNamespace {
        /// The Secret's namespace.
        namespace: String,
        /// The Secret's name.
        name: String,
        /// The Machine's namespace.
        machine_namespace: String,
    },
    /// The Secret has the wrong type.
    #[error("Secret {name} has type {found:?}; BMC credentials must be of type {BASIC_AUTH_TYPE}")]
    WrongType {
        /// The Secret's name.
        name: String,
        /// Its type.
        found: String,
    },
    /// A key is missing or empty.
    #[error("Secret {name} has no {key:?} key")]
    MissingKey {
        /// The Secret's name.
        name: String,
        /// The key.
        key: &'static str,
    },
    /// A value is not UTF-8.
    #[error("Secret {name}: {key:?} is not UTF-8")]
    NotUtf8 {
        /// The Secret's name.
        name: String,
        /// The key.
        key: &'static str,
    },
}

/// The `(namespace, name)` a Machine in `machine_namespace` may read for `r`: the reference's
/// namespace defaults to the Machine's and must equal it.
pub fn secret_key(
    machine_namespace: &str,
    r: &SecretReference,
) -> Result<(String, String), CredentialError> {
    let name = r
        .name
        .clone()
        .filter(|n| !n.is_empty())
        .ok_or(CredentialError::NoName)?;
    let namespace = r
        .namespace
        .clone()
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| machine_namespace.to_string());
    if namespace != machine_namespace {
        return Err(CredentialError::OtherNamespace {
            namespace,
            name,
            machine_namespace: machine_namespace.to_string(),
        });
    }
    Ok((namespace, name))
}

fn value(secret: &KubeSecret, name: &str, key: &'static str) -> Result<String, CredentialError> {
    let bytes = secret
        .data
        .as_ref()
        .and_then(|d| d.get(key))
        .map(|b| b.0.clone())
        .or_else(|| {
            secret
                .string_data
                .as_ref()
                .and_then(|d| d.get(key))
                .map(|s| s.clone().into_bytes())
        })
        .filter(|b| !b.is_empty())
        .ok_or(CredentialError::MissingKey {
            name: name.to_string(),
            key,
        })?;
    String::from_utf8(bytes).map_err(|_| CredentialError::NotUtf8 {
        name: name.to_string(),
        key,
    })
}

/// The BMC credentials of a `kubernetes.io/basic-auth` Secret (`username`, `password`).
pub fn basic_auth(secret: &KubeSecret) -> Result<Credentials, CredentialError> {
    let name = secret.metadata.name.clone().unwrap_or_default();
    let found = secret.type_.clone().unwrap_or_else(|| "Opaque".into());
    if found != BASIC_AUTH_TYPE {
        return Err(CredentialError::WrongType { name, found });
    }
    Ok(Credentials {
        username: value(secret, &name, "username")?,
        password: Secret::new(value(secret, &name, "password")?),
    })
}

/// An RPC HMAC key: the `secret` key of a Secret (any type, as Rufio's samples are `Opaque`).
pub fn hmac_key(secret: &KubeSecret) -> Result<Secret, CredentialError> {
    let name = secret.metadata.name.clone().unwrap_or_default();
    Ok(Secret::new(value(secret, &name, "secret")?))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use k8s_openapi::ByteString;

    use super::*;

    fn secret(type_: Option<&str>, data: &[(&str, &str)]) -> KubeSecret {
        let mut s = KubeSecret::default();
        s.metadata.name = Some("bmc-creds".into());
        s.type_ = type_.map(str::to_string);
        s.data = Some(
            data.iter()
                .map(|(k, v)| (k.to_string(), ByteString(v.as_bytes().to_vec())))
                .collect::<BTreeMap<_, _>>(),
        );
        s
    }

    #[test]
    fn only_the_machines_own_namespace() {
        let r = |name: Option<&str>, ns: Option<&str>| SecretReference {
            name: name.map(str::to_string),
            namespace: ns.map(str::to_string),
        };
        assert_eq!(
            secret_key("team-a", &r(Some("c"), None)),
            Ok(("team-a".into(), "c".into()))
        );
        assert_eq!(
            secret_key("team-a", &r(Some("c"), Some("team-a"))),
            Ok(("team-a".into(), "c".into()))
        );
        let e = secret_key("team-a", &r(Some("c"), Some("kube-system"))).expect_err("other ns");
        assert!(
            e.to_string()
                .contains("not in the Machine's namespace team-a"),
            "{e}"
        );
        assert_eq!(
            secret_key("n", &r(None, None)),
            Err(CredentialError::NoName)
        );
    }

    #[test]
    fn only_basic_auth_secrets_and_no_value_in_errors() {
        let c = basic_auth(&secret(
            Some(BASIC_AUTH_TYPE),
            &[("username", "admin"), ("password", "pw-123")],
        ))
        .expect("ok");
        assert_eq!(
            (c.username.as_str(), c.password.expose()),
            ("admin", "pw-123")
        );
        let e = basic_auth(&secret(
            None,
            &[("username", "admin"), ("password", "pw-123")],
        ))
        .expect_err("Opaque");
        assert!(matches!(e, CredentialError::WrongType { .. }), "{e}");
        assert!(!e.to_string().contains("pw-123"));
        let e = basic_auth(&secret(Some(BASIC_AUTH_TYPE), &[("username", "admin")]))
            .expect_err("no password");
        assert_eq!(
            e,
            CredentialError::MissingKey {
                name: "bmc-creds".into(),
                key: "password"
            }
        );
        assert_eq!(
            hmac_key(&secret(None, &[("secret", "superSecret1")]))
                .expect("hmac")
                .expose(),
            "superSecret1"
        );
    }
}
