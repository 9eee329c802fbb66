//! Shared test helpers: fixture loading.
#![allow(dead_code)]

use std::path::PathBuf;

pub fn fixture_path(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(rel)
}

pub fn fixture_text(rel: &str) -> String {
    let p = fixture_path(rel);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("read {}: {e}", p.display()))
}

/// A fixture parsed into `T` (panics with the field path when it does not parse).
pub fn fixture<T: serde::de::DeserializeOwned>(rel: &str) -> T {
    tink_api::from_yaml(&fixture_text(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// Asserts each (JSON pointer, expected value) of a table against `value`.
pub fn assert_table(what: &str, value: &serde_json::Value, table: &[(&str, serde_json::Value)]) {
    let mut failures = Vec::new();
    for (pointer, expected) in table {
        let got = value
            .pointer(pointer)
            .cloned()
            .unwrap_or(serde_json::Value::Null);
        if &got != expected {
            failures.push(format!("{what} {pointer}: expected {expected}, got {got}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
