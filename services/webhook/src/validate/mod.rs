//! The admission checks, as pure functions of the request (and the index for uniqueness and
//! references). Each kind has a module; every denial names the field path and says what would
//! be accepted.
//!
//! Objects arrive in the version the client used (an API server with `matchPolicy: Equivalent`
//! may convert them first): v1alpha1 and v1alpha2 are both checked, and field paths are those
//! of the version the object is in.

pub mod bmc;
pub mod formats;
pub mod hardware;
pub mod osie;
pub mod rollout;
// WorkflowRuleSet (issue 31).
pub mod rules;
pub mod template;
pub mod workflow;

use serde_json::Value;

pub use crate::identities::is_v1alpha1;

/// Why a field was refused (the `reason` of a Kubernetes `StatusCause`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reason {
    /// The value is malformed.
    Invalid,
    /// The value is taken by another object (or another field of this one).
    Duplicate,
    /// The field must be set.
    Required,
    /// The change is not allowed.
    Forbidden,
}

impl Reason {
    /// The Kubernetes cause type.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Invalid => "FieldValueInvalid",
            Self::Duplicate => "FieldValueDuplicate",
            Self::Required => "FieldValueRequired",
            Self::Forbidden => "FieldValueForbidden",
        }
    }
}

/// One refused field.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// The field path, e.g. `spec.actions[2].image`.
    pub field: String,
    /// The reason.
    pub reason: Reason,
    /// What is wrong and what would be accepted.
    pub message: String,
}

/// The outcome of the checks: violations deny the request; warnings are returned to the
/// client (kubectl prints them) without denying.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Verdict {
    /// Refused fields.
    pub violations: Vec<Violation>,
    /// Warnings.
    pub warnings: Vec<String>,
}

impl Verdict {
    /// Records a refused field.
    pub fn deny(&mut self, field: impl Into<String>, reason: Reason, message: impl Into<String>) {
        self.violations.push(Violation {
            field: field.into(),
            reason,
            message: message.into(),
        });
    }

    /// Records a warning.
    pub fn warn(&mut self, message: impl Into<String>) {
        self.warnings.push(message.into());
    }

    /// Whether the request is allowed.
    pub fn allowed(&self) -> bool {
        self.violations.is_empty()
    }
}

/// The admission operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Operation {
    /// CREATE.
    Create,
    /// UPDATE.
    Update,
    /// DELETE or CONNECT: never checked.
    Other,
}

/// What the checks look at.
#[derive(Clone, Copy, Debug)]
pub struct Request<'a> {
    /// CREATE or UPDATE (others are allowed without checks).
    pub operation: Operation,
    /// The object's namespace.
    pub namespace: &'a str,
    /// The object's name (empty for a create with `generateName`).
    pub name: &'a str,
    /// The object as it would be stored.
    pub object: &'a Value,
    /// The stored object, on UPDATE.
    pub old: Option<&'a Value>,
}

impl Request<'_> {
    /// `namespace/name`, the key objects have in the index.
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}

/// Converts `obj` to v1alpha2 with crates/api's conversion when it is v1alpha1.
pub fn as_v1alpha2(obj: &Value) -> Result<Value, tink_api::conversion::ConversionError> {
    if is_v1alpha1(obj) {
        tink_api::conversion::convert(obj.clone(), tink_api::v1alpha2::API_VERSION)
    } else {
        Ok(obj.clone())
    }
}

/// The warnings converting a v1alpha1 object to v1alpha2 gives (a `lease_time` clamped to
/// int32, ...), each naming the field in the v1alpha1 object: the client wrote a value that
/// storage (v1alpha2) cannot hold as it is, and a ConversionReview has no way to say so.
///
/// `requested_v1alpha1` is whether the client used v1alpha1 (`request.requestKind.version`).
/// When an API server converted the object to v1alpha2 before calling (`matchPolicy:
/// Equivalent` with only v1alpha2 in the rules), the client's object is recovered by converting
/// back (the conversion annotation restores what v1alpha2 cannot hold) and converted again.
/// Nothing to say for v1alpha2 objects of a v1alpha2 request, or objects that do not convert
/// (the checks of their kind deny those).
pub fn conversion_warnings(obj: &Value, requested_v1alpha1: bool) -> Vec<String> {
    use tink_api::conversion::{convert, convert_with_warnings};
    let original = if is_v1alpha1(obj) {
        obj.clone()
    } else if requested_v1alpha1 {
        match convert(obj.clone(), tink_api::v1alpha1::API_VERSION) {
            Ok(o) => o,
            Err(_) => return Vec::new(),
        }
    } else {
        return Vec::new();
    };
    convert_with_warnings(original, tink_api::v1alpha2::API_VERSION)
        .map(|c| c.warnings)
        .unwrap_or_default()
}

/// Records a typed-parse failure (the path names the field) as a violation.
pub(crate) fn deny_parse(v: &mut Verdict, kind: &str, e: &tink_api::ParseError) {
    let field = if e.path == "." {
        String::new()
    } else {
        e.path.clone()
    };
    v.deny(
        field,
        Reason::Invalid,
        format!("{}; the object must be a valid {kind}", e.message),
    );
}
