//! What every action shares: the failure type (reason + message + exit code), the agent's
//! reason-file and power contracts, environment parsing that names the variable on bad input,
//! and JSON or text log lines.
//!
//! The contracts are the agent's (agent/src/reason.rs, agent/src/runtime.rs): the agent mounts a
//! fresh directory at `/tinkerbell` (also named by `TINKERBELL_REASON_DIR`); after a non-zero
//! exit it reads `failure-reason` (one UpperCamelCase word) and `failure-message`; after a
//! success it reads `power` (`reboot`, `kexec` or `poweroff`) and acts on it only once the
//! whole workflow's success is stored.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{SystemTime, UNIX_EPOCH};

/// The directory of the agent's contracts when `TINKERBELL_REASON_DIR` is unset.
pub const REASON_DIR: &str = "/tinkerbell";

/// Why an action failed: `reason` is the UpperCamelCase word the Workflow shows.
#[derive(Debug, thiserror::Error)]
#[error("{reason}: {message}")]
pub struct ActionError {
    /// UpperCamelCase reason (`DiskNotFound`).
    pub reason: &'static str,
    /// What happened, for a person.
    pub message: String,
    /// The process exit code (never 0).
    pub exit_code: i32,
}

impl ActionError {
    /// A failure with exit code 1.
    pub fn new(reason: &'static str, message: impl Into<String>) -> Self {
        Self {
            reason,
            message: message.into(),
            exit_code: 1,
        }
    }

    /// A required variable that is unset or empty.
    pub fn missing(var: &str) -> Self {
        Self::new(
            "MissingVariable",
            format!("the environment variable {var} is required"),
        )
    }

    /// A variable whose value cannot be used.
    pub fn invalid(var: &str, value: &str, why: impl std::fmt::Display) -> Self {
        Self::new("InvalidVariable", format!("{var}={value:?}: {why}"))
    }
}

/// The environment of one action (a map, so tests and `main` inject it; no deep env reads).
#[derive(Debug, Clone, Default)]
pub struct Env(pub BTreeMap<String, String>);

impl Env {
    /// The process environment.
    pub fn from_process() -> Self {
        Self(std::env::vars().collect())
    }

    /// The value, with `None` for unset or empty (the hub treats both alike).
    pub fn get(&self, var: &str) -> Option<&str> {
        self.0
            .get(var)
            .map(|s| s.as_str())
            .filter(|s| !s.is_empty())
    }

    /// A required value.
    pub fn required(&self, var: &str) -> Result<&str, ActionError> {
        self.get(var).ok_or_else(|| ActionError::missing(var))
    }

    /// A boolean the way Go's `strconv.ParseBool` reads it; unset is `default`.
    pub fn bool(&self, var: &str, default: bool) -> Result<bool, ActionError> {
        match self.get(var) {
            None => Ok(default),
            Some(v) => match v {
                "1" | "t" | "T" | "true" | "TRUE" | "True" | "y" | "Y" | "yes" => Ok(true),
                "0" | "f" | "F" | "false" | "FALSE" | "False" | "n" | "N" | "no" => Ok(false),
                _ => Err(ActionError::invalid(var, v, "expected true or false")),
            },
        }
    }

    /// An unsigned number; unset is `default`.
    pub fn u64(&self, var: &str, default: u64) -> Result<u64, ActionError> {
        match self.get(var) {
            None => Ok(default),
            Some(v) => v
                .trim()
                .parse()
                .map_err(|e| ActionError::invalid(var, v, e)),
        }
    }

    /// The contracts directory.
    pub fn reason_dir(&self) -> PathBuf {
        PathBuf::from(self.get("TINKERBELL_REASON_DIR").unwrap_or(REASON_DIR))
    }
}

/// Log lines: JSON objects by default (the hub's default), `key=value` text with
/// `TEXT_LOGGING=true`.
#[derive(Debug, Clone, Copy)]
pub struct Log {
    /// Text instead of JSON.
    pub text: bool,
    /// The action's name, on every line.
    pub action: &'static str,
}

impl Log {
    /// One line on stdout.
    pub fn info(&self, msg: &str, fields: &[(&str, serde_json::Value)]) {
        self.line("info", msg, fields);
    }

    /// One error line on stdout.
    pub fn error(&self, msg: &str, fields: &[(&str, serde_json::Value)]) {
        self.line("error", msg, fields);
    }

    fn line(&self, level: &str, msg: &str, fields: &[(&str, serde_json::Value)]) {
        let ts = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs_f64())
            .unwrap_or_default();
        if self.text {
            let mut s = format!("{level} {}: {msg}", self.action);
            for (k, v) in fields {
                match v {
                    serde_json::Value::String(t) => s.push_str(&format!(" {k}={t}")),
                    other => s.push_str(&format!(" {k}={other}")),
                }
            }
            println!("{s}");
        } else {
            let mut m = serde_json::Map::new();
            m.insert("time".into(), ts.into());
            m.insert("level".into(), level.into());
            m.insert("action".into(), self.action.into());
            m.insert("msg".into(), msg.into());
            for (k, v) in fields {
                m.insert((*k).into(), v.clone());
            }
            println!("{}", serde_json::Value::Object(m));
        }
    }
}

/// Writes the failure contract files (best effort: a missing directory means no agent).
pub fn write_failure(env: &Env, log: &Log, err: &ActionError) {
    let dir = env.reason_dir();
    if !dir.is_dir() {
        log.info(
            "no contracts directory: the failure reason is only logged",
            &[("dir", dir.display().to_string().into())],
        );
        return;
    }
    for (name, body) in [
        ("failure-reason", err.reason),
        ("failure-message", &err.message),
    ] {
        if let Err(e) = std::fs::write(dir.join(name), format!("{body}\n")) {
            log.error(
                "cannot write the failure contract",
                &[("file", name.into()), ("error", e.to_string().into())],
            );
        }
    }
}

/// Asks the agent for a power action (`kexec`, `reboot`, `poweroff`) after the workflow's
/// success is stored.
pub fn request_power(env: &Env, what: &str) -> Result<PathBuf, ActionError> {
    let path = env.reason_dir().join("power");
    std::fs::write(&path, format!("{what}\n")).map_err(|e| {
        ActionError::new(
            "PowerRequestFailed",
            format!("cannot write {}: {e}", path.display()),
        )
    })?;
    Ok(path)
}

/// Parses an octal mode (`0644`, `644`, `0o644`), naming the variable on error.
pub fn parse_mode(var: &str, value: &str) -> Result<u32, ActionError> {
    let v = value.trim();
    let digits = v.strip_prefix("0o").unwrap_or(v);
    let mode = u32::from_str_radix(digits, 8)
        .map_err(|_| ActionError::invalid(var, value, "expected an octal mode such as 0644"))?;
    if mode > 0o7777 {
        return Err(ActionError::invalid(var, value, "mode is above 07777"));
    }
    Ok(mode)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes() {
        assert_eq!(parse_mode("MODE", "0644").ok(), Some(0o644));
        assert_eq!(parse_mode("MODE", "600").ok(), Some(0o600));
        assert_eq!(parse_mode("MODE", "0o4755").ok(), Some(0o4755));
        let e = parse_mode("MODE", "rw-r--r--").err().map(|e| e.to_string());
        assert!(e.as_deref().is_some_and(|e| e.contains("MODE")), "{e:?}");
        assert!(parse_mode("DIRMODE", "0899").is_err());
        assert!(parse_mode("DIRMODE", "17777").is_err());
    }

    #[test]
    fn bools_and_numbers() {
        let env = Env([
            ("A", "true"),
            ("B", "0"),
            ("C", "maybe"),
            ("N", "x"),
            ("E", ""),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect());
        assert!(env.bool("A", false).is_ok_and(|b| b));
        assert!(env.bool("B", true).is_ok_and(|b| !b));
        assert!(env.bool("E", true).is_ok_and(|b| b));
        assert!(env.bool("C", true).is_err_and(|e| e.message.contains("C=")));
        assert!(
            env.u64("N", 3)
                .is_err_and(|e| e.reason == "InvalidVariable")
        );
        assert_eq!(env.u64("MISSING", 3).ok(), Some(3));
        assert!(
            env.required("E")
                .is_err_and(|e| e.reason == "MissingVariable")
        );
    }
}
