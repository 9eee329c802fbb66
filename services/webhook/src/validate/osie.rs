//! OSIE: the kernel and initrd are fetched by iPXE over HTTP, so both must be http(s) URLs.

use serde_json::Value;

use super::{Reason, Request, Verdict, formats};

/// Checks an OSIE create or update.
pub fn validate(req: &Request<'_>, v: &mut Verdict) {
    for (field, what, example) in [
        (
            "kernelUrl",
            "kernel",
            "http://192.0.2.1:8080/vmlinuz-x86_64",
        ),
        (
            "initrdUrl",
            "initrd",
            "http://192.0.2.1:8080/initramfs-x86_64",
        ),
    ] {
        let path = format!("spec.{field}");
        let value = req.object.pointer(&format!("/spec/{field}"));
        match value {
            None | Some(Value::Null) => v.deny(
                path,
                Reason::Required,
                format!(
                    "the OSIE {what} URL is required: an http:// or https:// URL, such as {example}"
                ),
            ),
            Some(Value::String(s)) if s.is_empty() => {
                v.deny(path, Reason::Required, format!("{what} URL is empty; expected an http:// or https:// URL, such as {example}"));
            }
            Some(Value::String(s)) => {
                if let Err(m) = formats::http_url(s, example) {
                    v.deny(path, Reason::Invalid, m);
                }
            }
            Some(_) => v.deny(
                path,
                Reason::Invalid,
                format!("must be a string: an http:// or https:// URL, such as {example}"),
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::validate::Operation;
    use serde_json::json;

    fn check(spec: Value) -> Verdict {
        let obj = json!({"apiVersion": "tinkerbell.org/v1alpha2", "kind": "OSIE", "spec": spec});
        let mut v = Verdict::default();
        let req = Request {
            operation: Operation::Create,
            namespace: "ns",
            name: "o",
            object: &obj,
            old: None,
        };
        validate(&req, &mut v);
        v
    }

    #[test]
    fn kernel_and_initrd_urls() {
        assert!(
            check(json!({"kernelUrl": "http://10.0.0.1/vmlinuz", "initrdUrl": "https://x/initrd"}))
                .allowed()
        );
        let v = check(json!({"kernelUrl": "tftp://10.0.0.1/vmlinuz"}));
        let got: Vec<_> = v
            .violations
            .iter()
            .map(|x| (x.field.as_str(), x.reason))
            .collect();
        assert_eq!(
            got,
            [
                ("spec.kernelUrl", Reason::Invalid),
                ("spec.initrdUrl", Reason::Required)
            ]
        );
        assert!(v.violations[0].message.contains("scheme \"tftp\""));
        assert!(v.violations[1].message.contains("such as http://"));
        let v = check(json!({"kernelUrl": 3, "initrdUrl": ""}));
        assert_eq!(v.violations.len(), 2);
    }
}
