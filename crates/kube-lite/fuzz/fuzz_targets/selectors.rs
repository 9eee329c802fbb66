//! Fuzzes label and field selector parsing and matching.
//! `RUSTC_BOOTSTRAP=1 cargo fuzz run selectors` from crates/kube-lite.
#![no_main]

use kube_lite::selector::{FieldSelector, LabelSelector};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    let labels = serde_json::json!({"app": "web", "tier": "front"});
    if let Ok(sel) = LabelSelector::parse(s) {
        let _ = sel.matches(Some(&labels));
    }
    if let Ok(sel) = FieldSelector::parse(s) {
        let _ = sel.matches(&serde_json::json!({"metadata": {"name": "a", "labels": labels}}));
    }
});
