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

/// A string that YAML may have resolved to another scalar type (`COMPRESSED: true`,
/// `version: 0.1`): Go's yaml.v2 decodes those into string fields, so we do too.
struct LenientString(String);

impl<'de> Deserialize<'de> for LenientString {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = LenientString;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a string (or a scalar used as one)")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(LenientString(v.to_string()))
            }
            fn visit_string<E: serde::de::Error>(self, v: String) -> Result<Self::Value, E> {
                Ok(LenientString(v))
            }
            fn visit_bool<E: serde::de::Error>(self, v: bool) -> Result<Self::Value, E> {
                Ok(LenientString(v.to_string()))
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Self::Value, E> {
                Ok(LenientString(v.to_string()))
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Self::Value, E> {
                Ok(LenientString(v.to_string()))
            }
            fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Self::Value, E> {
                Ok(LenientString(v.to_string()))
            }
            fn visit_unit<E: serde::de::Error>(self) -> Result<Self::Value, E> {
                Ok(LenientString(String::new()))
            }
            fn visit_none<E: serde::de::Error>(self) -> Result<Self::Value, E> {
                Ok(LenientString(String::new()))
            }
        }
        d.deserialize_any(V)
    }
}

/// See [`LenientString`].
pub(crate) fn lenient_string<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    Ok(LenientString::deserialize(d)?.0)
}

/// A list of [`LenientString`]s; `null` is empty.
pub(crate) fn lenient_string_vec<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    let v = Option::<Vec<LenientString>>::deserialize(d)?;
    Ok(v.unwrap_or_default().into_iter().map(|s| s.0).collect())
}

/// A map of [`LenientString`]s; `null` is empty.
pub(crate) fn lenient_string_map<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<std::collections::BTreeMap<String, String>, D::Error> {
    let v = Option::<std::collections::BTreeMap<LenientString, LenientString>>::deserialize(d)?;
    Ok(v.unwrap_or_default()
        .into_iter()
        .map(|(k, v)| (k.0, v.0))
        .collect())
}

impl PartialEq for LenientString {
    fn eq(&self, other: &Self) -> bool {
        self.0 == other.0
    }
}
impl Eq for LenientString {}
impl PartialOrd for LenientString {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for LenientString {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.cmp(&other.0)
    }
}
