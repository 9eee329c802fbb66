//! Identities: which Workflow object an input is about, and the dispatch id that names one
//! dispatch attempt of it on the wire.

use std::fmt;
use std::str::FromStr;

/// The longest dispatch id accepted, in bytes. It travels as the protocol's `workflow_id` and
/// in the events subject, so it obeys the bus limit (`tink_bus::token::MAX_WORKFLOW_ID_LEN`).
pub const MAX_DISPATCH_ID_LEN: usize = 384;

/// The Workflow object a step is about: namespace, name and the object's `metadata.uid`.
///
/// The uid tells a Workflow apart from a deleted one of the same name, so events of the old
/// object never touch the new one.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct WorkflowRef {
    /// `metadata.namespace`.
    pub namespace: String,
    /// `metadata.name`.
    pub name: String,
    /// `metadata.uid`.
    pub uid: String,
}

impl WorkflowRef {
    /// A reference from its parts.
    pub fn new(
        namespace: impl Into<String>,
        name: impl Into<String>,
        uid: impl Into<String>,
    ) -> Self {
        Self {
            namespace: namespace.into(),
            name: name.into(),
            uid: uid.into(),
        }
    }

    /// The namespace/name key (without the uid).
    pub fn key(&self) -> WorkflowKey {
        WorkflowKey::new(&self.namespace, &self.name)
    }
}

/// A Workflow's namespace and name: what the controller looks an object up by.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct WorkflowKey {
    /// `metadata.namespace`.
    pub namespace: String,
    /// `metadata.name`.
    pub name: String,
}

impl WorkflowKey {
    /// A key from its parts.
    pub fn new(namespace: impl Into<String>, name: impl Into<String>) -> Self {
        Self {
            namespace: namespace.into(),
            name: name.into(),
        }
    }
}

impl fmt::Display for WorkflowKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// Why a dispatch id could not be built or parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DispatchIdError {
    /// A part (namespace, name or uid) is empty.
    #[error("the {part} of a dispatch id is empty")]
    EmptyPart {
        /// Which part.
        part: &'static str,
    },
    /// A part contains `/`, the separator.
    #[error("the {part} of a dispatch id contains '/': {value:?}")]
    Separator {
        /// Which part.
        part: &'static str,
        /// Its value.
        value: String,
    },
    /// The attempt is zero (attempts count from 1).
    #[error("the attempt of a dispatch id must be at least 1")]
    ZeroAttempt,
    /// The id would be longer than [`MAX_DISPATCH_ID_LEN`].
    #[error(
        "the dispatch id is {len} bytes long, more than the {max} allowed; shorten the Workflow's namespace or name"
    )]
    TooLong {
        /// Its length in bytes.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// The text does not have the four parts `namespace/name/uid/attempt`.
    #[error("{0:?} is not a dispatch id (namespace/name/uid/attempt)")]
    Malformed(String),
}

/// Names one dispatch attempt of one Workflow object: `{namespace}/{name}/{uid}/{attempt}`.
///
/// It is the `workflow_id` of the `StartWorkflow` command, and the agent echoes it in every
/// event, so the controller finds the object (namespace and name) from an event, and an event
/// of another attempt, or of a deleted Workflow re-created under the same name (another uid),
/// does not match `status.dispatchId` and is ignored as stale.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DispatchId {
    workflow: WorkflowRef,
    attempt: u32,
}

impl DispatchId {
    /// The id of dispatch `attempt` (1 for the first) of `workflow`.
    pub fn new(workflow: WorkflowRef, attempt: u32) -> Result<Self, DispatchIdError> {
        for (part, value) in [
            ("namespace", &workflow.namespace),
            ("name", &workflow.name),
            ("uid", &workflow.uid),
        ] {
            if value.is_empty() {
                return Err(DispatchIdError::EmptyPart { part });
            }
            if value.contains('/') {
                return Err(DispatchIdError::Separator {
                    part,
                    value: value.clone(),
                });
            }
        }
        if attempt == 0 {
            return Err(DispatchIdError::ZeroAttempt);
        }
        let id = Self { workflow, attempt };
        let len = id.encoded_len();
        if len > MAX_DISPATCH_ID_LEN {
            return Err(DispatchIdError::TooLong {
                len,
                max: MAX_DISPATCH_ID_LEN,
            });
        }
        Ok(id)
    }

    /// Parses `{namespace}/{name}/{uid}/{attempt}`.
    pub fn parse(text: &str) -> Result<Self, DispatchIdError> {
        if text.len() > MAX_DISPATCH_ID_LEN {
            return Err(DispatchIdError::TooLong {
                len: text.len(),
                max: MAX_DISPATCH_ID_LEN,
            });
        }
        let malformed = || DispatchIdError::Malformed(text.to_string());
        let mut parts = text.split('/');
        let (Some(namespace), Some(name), Some(uid), Some(attempt), None) = (
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
        ) else {
            return Err(malformed());
        };
        // Only canonical decimal: no sign, no leading zero, so one attempt has one spelling.
        if attempt.is_empty()
            || !attempt.bytes().all(|b| b.is_ascii_digit())
            || attempt.starts_with('0')
        {
            return Err(malformed());
        }
        let attempt: u32 = attempt.parse().map_err(|_| malformed())?;
        Self::new(WorkflowRef::new(namespace, name, uid), attempt)
    }

    /// The Workflow object this dispatch belongs to.
    pub fn workflow(&self) -> &WorkflowRef {
        &self.workflow
    }

    /// The namespace/name key of the Workflow.
    pub fn key(&self) -> WorkflowKey {
        self.workflow.key()
    }

    /// The attempt number (1 for the first dispatch).
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    fn encoded_len(&self) -> usize {
        self.workflow.namespace.len()
            + self.workflow.name.len()
            + self.workflow.uid.len()
            + self.attempt.to_string().len()
            + 3
    }
}

impl fmt::Display for DispatchId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}/{}/{}/{}",
            self.workflow.namespace, self.workflow.name, self.workflow.uid, self.attempt
        )
    }
}

impl FromStr for DispatchId {
    type Err = DispatchIdError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

/// The id of the action at `index` (0-based) in a Workflow's `status.actions`: `{index}-{name}`.
/// Unique within the Workflow even if two actions share a name, stable for its lifetime, and
/// readable in logs.
pub fn action_id(index: usize, name: &str) -> String {
    format!("{index}-{name}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wf() -> WorkflowRef {
        WorkflowRef::new("default", "wf-1", "4b2d8f0e-0c1a-4c39-9a53-6a1d2b1c0f00")
    }

    #[test]
    fn round_trips() {
        let id = DispatchId::new(wf(), 3).unwrap();
        let text = id.to_string();
        assert_eq!(text, "default/wf-1/4b2d8f0e-0c1a-4c39-9a53-6a1d2b1c0f00/3");
        assert_eq!(DispatchId::parse(&text).unwrap(), id);
        assert_eq!(id.key(), WorkflowKey::new("default", "wf-1"));
        assert_eq!(id.attempt(), 3);
    }

    #[test]
    fn refuses_bad_parts() {
        let mut w = wf();
        w.name = String::new();
        assert_eq!(
            DispatchId::new(w, 1),
            Err(DispatchIdError::EmptyPart { part: "name" })
        );
        let mut w = wf();
        w.uid = "a/b".into();
        assert!(matches!(
            DispatchId::new(w, 1),
            Err(DispatchIdError::Separator { part: "uid", .. })
        ));
        assert_eq!(DispatchId::new(wf(), 0), Err(DispatchIdError::ZeroAttempt));
    }

    #[test]
    fn refuses_malformed_text() {
        for text in [
            "",
            "a/b/c",
            "a/b/c/d/1",
            "a/b/c/x",
            "a/b/c/-1",
            "a/b/c/+1",
            "a/b/c/01",
            "a/b/c/0",
            "a/b/c/99999999999",
            "/b/c/1",
            "a//c/1",
        ] {
            assert!(DispatchId::parse(text).is_err(), "{text:?} parsed");
        }
    }

    #[test]
    fn enforces_the_length_limit() {
        let uid = "4b2d8f0e-0c1a-4c39-9a53-6a1d2b1c0f00"; // 36 bytes
        // 63 + 1 + name + 1 + 36 + 1 + 1 = 384 when name = 281 (longer than Kubernetes allows,
        // so every real Workflow fits).
        let fits = WorkflowRef::new("n".repeat(63), "w".repeat(281), uid);
        let id = DispatchId::new(fits, 1).unwrap();
        assert_eq!(id.to_string().len(), MAX_DISPATCH_ID_LEN);
        assert_eq!(DispatchId::parse(&id.to_string()).unwrap(), id);
        let too_long = WorkflowRef::new("n".repeat(63), "w".repeat(282), uid);
        assert_eq!(
            DispatchId::new(too_long, 1),
            Err(DispatchIdError::TooLong { len: 385, max: 384 })
        );
        // The attempt's digits count too.
        let edge = WorkflowRef::new("n".repeat(63), "w".repeat(280), uid);
        assert!(DispatchId::new(edge.clone(), 99).is_ok());
        assert!(DispatchId::new(edge, 100).is_err());
    }

    #[test]
    fn action_ids_are_unique_per_index() {
        assert_eq!(action_id(0, "stream"), "0-stream");
        assert_ne!(action_id(0, "x"), action_id(1, "x"));
    }
}
