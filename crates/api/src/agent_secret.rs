//! A machine's pre-shared agent secret: the Hardware annotation that names it and how its value
//! is read from the Secret. The controller (which publishes the value's hash for the servers)
//! and Hegel (which puts the value in the machine's boot parameters) read it the same way.

use k8s_openapi::api::core::v1::Secret;

/// The Hardware annotation naming the Secret (in the Hardware's namespace).
pub const AGENT_SECRET_ANNOTATION: &str = "tinkerbell.org/agent-secret";
/// The key of the Secret's data holding the value.
pub const AGENT_SECRET_KEY: &str = "secret";
/// The longest value accepted (it travels on the kernel command line).
pub const MAX_AGENT_SECRET_LEN: usize = 256;

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
}
