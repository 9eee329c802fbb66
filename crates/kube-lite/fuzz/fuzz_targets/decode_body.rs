//! Fuzzes request-body decoding: the first byte picks the content type, the rest is the body.
//! `RUSTC_BOOTSTRAP=1 cargo fuzz run decode_body` from crates/kube-lite.
#![no_main]

use libfuzzer_sys::fuzz_target;

const CONTENT_TYPES: &[&str] = &[
    "application/json",
    "application/yaml",
    "application/vnd.kubernetes.protobuf",
    "",
    "text/plain",
];

fuzz_target!(|data: &[u8]| {
    let Some((first, body)) = data.split_first() else {
        return;
    };
    let ct = CONTENT_TYPES[*first as usize % CONTENT_TYPES.len()];
    if let Err(e) = kube_lite::decode_body(ct, body) {
        assert!(
            e.code == 400 || e.code == 415,
            "unexpected status {}",
            e.code
        );
    }
});
