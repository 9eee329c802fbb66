//! Small serde helpers shared by the API types.

use serde::{Deserialize, Deserializer};

/// Deserializes an optional string, treating `""` like an absent field (Go `omitempty`
/// semantics: the Go types cannot tell the two apart, so neither do ours).
pub(crate) fn empty_as_none<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    let v = Option::<String>::deserialize(d)?;
    Ok(v.filter(|s| !s.is_empty()))
}

/// `skip_serializing_if` helper for `bool` fields with `omitempty` semantics.
pub(crate) fn is_false(b: &bool) -> bool {
    !*b
}

/// `skip_serializing_if` helper for integer fields with `omitempty` semantics.
pub(crate) fn is_zero_u32(v: &u32) -> bool {
    *v == 0
}

/// Deserializes `null` as the type's default (Go marshals nil slices and maps without
/// `omitempty` as `null`).
pub(crate) fn null_as_default<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de> + Default,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}
