//! Warnings reach the user: kubectl v1.32 against kube-lite calling the webhook over HTTPS (the
//! deploy/ ValidatingWebhookConfiguration), printed on kubectl's stderr as `Warning: <text>`.

mod common;

use common::{Env, v1alpha1_objects, v1alpha2_objects};
use serde_json::{Value, json};

const CLAMPED: &str = "Warning: spec.interfaces[0].dhcp.lease_time: 9999999999 is above the v1alpha2 maximum 2147483647 (int32 seconds); clamped to it\n";

fn warning_lines(stderr: &str) -> Vec<&str> {
    stderr
        .lines()
        .filter(|l| l.starts_with("Warning: "))
        .collect()
}

async fn get(env: &Env, resource: &str, name: &str) -> Value {
    let out = env.kubectl_ok(&["get", resource, name, "-o", "json"]).await;
    serde_json::from_str(&out)
        .unwrap_or_else(|e| panic!("kubectl get printed no JSON ({e}): {out}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_prints_conversion_and_reference_warnings() {
    let env = Env::new("warn", true).await;

    // A v1alpha1 Hardware whose lease_time v1alpha2 (int32) cannot hold: stored, and said so.
    let mut hw = v1alpha1_objects(&env.ns).remove(0);
    hw["spec"]["interfaces"][0]["dhcp"]["lease_time"] = json!(9_999_999_999i64);
    let file = env.write("hw.json", &hw);
    let (ok, out, err) = env.kubectl(&["apply", "-f", &file]).await;
    assert!(ok, "kubectl apply failed: {err}");
    assert!(
        out.contains("hardware.tinkerbell.org/sm01 created"),
        "{out}"
    );
    assert!(err.contains(CLAMPED), "{err}");
    assert_eq!(warning_lines(&err).len(), 1, "{err}");
    // Clamped in v1alpha2; the client's value kept for v1alpha1 readers.
    let v2 = get(&env, "hardware.v1alpha2.tinkerbell.org", "sm01").await;
    assert_eq!(
        v2["spec"]["networkInterfaces"]["3c:ec:ef:4c:4f:54"]["dhcp"]["leaseTime"],
        json!(i32::MAX)
    );
    let v1 = get(&env, "hardware.v1alpha1.tinkerbell.org", "sm01").await;
    assert_eq!(
        v1["spec"]["interfaces"][0]["dhcp"]["lease_time"],
        json!(9_999_999_999i64)
    );

    // An update that does not introduce the value: nothing to say again.
    hw["metadata"]["labels"]["rack"] = json!("r13");
    let file = env.write("hw.json", &hw);
    let (ok, out, err) = env.kubectl(&["apply", "-f", &file]).await;
    assert!(ok, "kubectl apply failed: {err}");
    assert!(
        out.contains("hardware.tinkerbell.org/sm01 configured"),
        "{out}"
    );
    assert!(warning_lines(&err).is_empty(), "{err}");

    // A value v1alpha2 holds: no warning.
    let mut fine = v1alpha1_objects(&env.ns).remove(0);
    fine["metadata"]["name"] = json!("sm03");
    fine["spec"]["interfaces"][0]["dhcp"]["mac"] = json!("3c:ec:ef:4c:4f:56");
    fine["spec"]["interfaces"][0]["dhcp"]["ip"]["address"] = json!("192.168.2.150");
    let file = env.write("fine.json", &fine);
    let (ok, _, err) = env.kubectl(&["apply", "-f", &file]).await;
    assert!(ok, "kubectl apply failed: {err}");
    assert!(warning_lines(&err).is_empty(), "{err}");

    // A v1alpha2 Workflow whose Hardware and Template do not exist yet: created, with a
    // warning for each reference.
    let wf = v1alpha2_objects(&env.ns).remove(2);
    let file = env.write("wf.json", &wf);
    let (ok, out, err) = env.kubectl(&["apply", "-f", &file]).await;
    assert!(ok, "kubectl apply failed: {err}");
    assert!(
        out.contains("workflow.tinkerbell.org/sm02-debian created"),
        "{out}"
    );
    assert_eq!(
        warning_lines(&err),
        vec![
            "Warning: spec.hardwareRef: Hardware warn/sm02 does not exist (yet); the Workflow waits in Pending until it does",
            "Warning: spec.templateRef: Template warn/debian does not exist (yet); the Workflow waits in Pending until it does",
        ],
        "{err}"
    );
    env.stop().await;
}
