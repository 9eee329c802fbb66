//! Credentials that never print.

use std::fmt;

/// A secret string: `Debug` and `Display` print `***`; [`Secret::expose`] is the only way to
/// the value, so every use of it is visible in review.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wraps a value.
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    /// The value.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl From<String> for Secret {
    fn from(s: String) -> Self {
        Self(s)
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

/// A BMC user name and password (a `kubernetes.io/basic-auth` Secret's two keys).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Credentials {
    /// The user name (not secret: it appears in errors and logs, as bmclib logs it).
    pub username: String,
    /// The password.
    pub password: Secret,
}

impl Credentials {
    /// User name and password.
    pub fn new(username: impl Into<String>, password: impl Into<String>) -> Self {
        Self {
            username: username.into(),
            password: Secret::new(password.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_password_never_prints() {
        let c = Credentials::new("admin", "hunter2");
        assert!(!format!("{c:?}").contains("hunter2"), "{c:?}");
        assert!(format!("{c:?}").contains("***"));
        assert_eq!(c.password.to_string(), "***");
        assert_eq!(c.password.expose(), "hunter2");
    }
}
