//! Admission through kube-lite over HTTPS, driven by kubectl and the kube client.

mod common;

use std::time::Duration;

use common::{Env, within};
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

fn hardware(ns: &str, name: &str, mac: &str, ip: &str) -> Value {
    json!({"apiVersion": "tinkerbell.org/v1alpha2", "kind": "Hardware",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"networkInterfaces": {mac: {"dhcp": {"ip": ip, "netmask": "255.255.255.0"}}}}})
}

fn api_error(e: kube::Error) -> kube::core::Status {
    match e {
        kube::Error::Api(s) => *s,
        other => panic!("expected an API error, got {other}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duplicate_mac_and_ip_are_refused_across_namespaces() {
    let env = Env::new("hw-b", true).await;
    let nss: kube::Api<k8s_openapi::api::core::v1::Namespace> = kube::Api::all(env.client.clone());
    nss.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": "hw-a"}})).unwrap(),
    )
    .await
    .unwrap();

    // The first Hardware, in another namespace.
    let first = env.write(
        "a.json",
        &hardware("hw-a", "m1", "aa:bb:cc:00:00:01", "10.1.0.5"),
    );
    let out = env.kubectl_ok(&["apply", "-n", "hw-a", "-f", &first]).await;
    assert!(out.contains("hardware.tinkerbell.org/m1 created"), "{out}");

    // Same MAC, another namespace, with kubectl.
    let dup = env.write(
        "b.json",
        &hardware(&env.ns, "m2", "aa:bb:cc:00:00:01", "10.1.0.6"),
    );
    let (ok, _, err) = env.kubectl(&["apply", "-f", &dup]).await;
    assert!(!ok);
    assert!(
        err.contains("admission webhook \"validate.tinkerbell.org\" denied the request"),
        "{err}"
    );
    assert!(
        err.contains("spec.networkInterfaces[aa:bb:cc:00:00:01]: MAC aa:bb:cc:00:00:01 is already used by Hardware hw-a/m1: a MAC must be unique across all Hardware in all namespaces"),
        "{err}"
    );

    // Same IP, with the kube client.
    let api = env.api("Hardware", "v1alpha2");
    let same_ip = hardware(&env.ns, "m3", "aa:bb:cc:00:00:03", "10.1.0.5");
    let e = api_error(
        api.create(
            &PostParams::default(),
            &serde_json::from_value(same_ip).unwrap(),
        )
        .await
        .expect_err("duplicate IP"),
    );
    assert_eq!(e.code, 422, "{e:?}");
    assert!(
        e.message.contains("spec.networkInterfaces[aa:bb:cc:00:00:03].dhcp.ip: IP 10.1.0.5 is already assigned to Hardware hw-a/m1"),
        "{}",
        e.message
    );

    // v1alpha1: the same MAC, named by its v1alpha1 field.
    let v1 = json!({"apiVersion": "tinkerbell.org/v1alpha1", "kind": "Hardware",
        "metadata": {"name": "legacy", "namespace": env.ns},
        "spec": {"interfaces": [{"dhcp": {"mac": "aa:bb:cc:00:00:01", "ip": {"address": "10.1.0.9"}}}]}});
    let file = env.write("v1.json", &v1);
    let (ok, _, err) = env.kubectl(&["create", "-f", &file]).await;
    assert!(!ok);
    assert!(
        err.contains(
            "spec.interfaces[0].dhcp.mac: MAC aa:bb:cc:00:00:01 is already used by Hardware hw-a/m1"
        ),
        "{err}"
    );
    assert_eq!(env.webhook.metrics.admissions_of("Hardware", "denied"), 3);

    // Once the first is deleted (and its watch event reached the index), the MAC is free.
    let a_api = kube::Api::<kube::api::DynamicObject>::namespaced_with(
        env.client.clone(),
        "hw-a",
        &kube::api::ApiResource::from_gvk_with_plural(
            &kube::api::GroupVersionKind::gvk("tinkerbell.org", "v1alpha2", "Hardware"),
            "hardware",
        ),
    );
    a_api.delete("m1", &DeleteParams::default()).await.unwrap();
    within("the MAC to be free", async {
        loop {
            let (ok, _, _) = env.kubectl(&["apply", "-f", &dup]).await;
            if ok {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn updates_check_only_the_interfaces_they_change() {
    // Two Hardware sharing a MAC, stored before the webhook was configured.
    let env = Env::new("upd", false).await;
    let api = env.api("Hardware", "v1alpha2");
    for name in ["old-1", "old-2"] {
        api.create(
            &PostParams::default(),
            &serde_json::from_value(hardware(&env.ns, name, "aa:bb:cc:00:01:01", "10.2.0.1"))
                .unwrap(),
        )
        .await
        .unwrap();
    }
    api.create(
        &PostParams::default(),
        &serde_json::from_value(hardware(&env.ns, "other", "aa:bb:cc:00:01:02", "10.2.0.2"))
            .unwrap(),
    )
    .await
    .unwrap();
    env.install_admission(&env.certs.ca_pem).await;

    // An unrelated change passes despite the stored duplicate.
    let pp = PatchParams::default();
    let labels = json!({"metadata": {"labels": {"rack": "r7"}}});
    within("the watch to index the objects", async {
        loop {
            if api
                .patch("old-1", &pp, &Patch::Merge(&labels))
                .await
                .is_ok()
            {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    let add_free =
        json!({"spec": {"networkInterfaces": {"aa:bb:cc:00:01:09": {"dhcp": {"ip": "10.2.0.9"}}}}});
    api.patch("old-1", &pp, &Patch::Merge(&add_free))
        .await
        .unwrap();

    // Adding a taken MAC is refused, and only that MAC is named.
    let add_taken = json!({"spec": {"networkInterfaces": {"aa:bb:cc:00:01:02": {}}}});
    let e = api_error(
        api.patch("old-2", &pp, &Patch::Merge(&add_taken))
            .await
            .unwrap_err(),
    );
    assert!(e.message.contains("spec.networkInterfaces[aa:bb:cc:00:01:02]: MAC aa:bb:cc:00:01:02 is already used by Hardware upd/other"), "{}", e.message);
    assert!(!e.message.contains("aa:bb:cc:00:01:01"), "{}", e.message);
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn template_syntax_errors_name_the_line_and_column() {
    let env = Env::new("tpl", true).await;
    let bad = json!({"apiVersion": "tinkerbell.org/v1alpha2", "kind": "Template",
        "metadata": {"name": "bad"},
        "spec": {"actions": [{"name": "stream", "image": "quay.io/tinkerbell/actions/image2disk:v1.0.0",
            "args": ["--disk", "first line\n  {{ index .Hardware.Disks 0 "]}]}});
    let file = env.write("bad.json", &bad);
    let (ok, _, err) = env.kubectl(&["apply", "-f", &file]).await;
    assert!(!ok);
    assert!(
        err.contains("spec.actions[0].args[1]: Go template syntax error at line 2, column "),
        "{err}"
    );

    let v1 = json!({"apiVersion": "tinkerbell.org/v1alpha1", "kind": "Template",
        "metadata": {"name": "legacy"},
        "spec": {"data": "version: \"0.1\"\nname: legacy\nglobal_timeout: 600\ntasks:\n  - name: os\n    worker: \"{{.device_1}}\"\n    actions:\n      - name: stream\n        image: quay.io/tinkerbell/actions/image2disk:v1.0.0\n        timeout: 600\n        environment:\n          DEST_DISK: {{ index .Hardware.Disks 0 | formatPartition }\n"}});
    let file = env.write("v1.json", &v1);
    let (ok, _, err) = env.kubectl(&["create", "-f", &file]).await;
    assert!(!ok);
    assert!(
        err.contains("spec.data: Go template syntax error at line 12, column "),
        "{err}"
    );

    let formats = json!({"apiVersion": "tinkerbell.org/v1alpha2", "kind": "Template",
        "metadata": {"name": "formats"},
        "spec": {"actions": [{"name": "a", "image": "Quay.io/Tinkerbell/X", "volumes": ["/dev"],
            "env": {"2BAD": "x"}}]}});
    let file = env.write("formats.json", &formats);
    let (ok, _, err) = env.kubectl(&["apply", "-f", &file]).await;
    assert!(!ok);
    for expected in [
        "spec.actions[0].image: image \"Quay.io/Tinkerbell/X\" is not a valid image reference: repository names must be lower-case",
        "spec.actions[0].volumes[0]: volume \"/dev\"",
        "spec.actions[0].env[2BAD]: environment variable name \"2BAD\" is not valid",
    ] {
        assert!(err.contains(expected), "{expected}\n{err}");
    }

    let good = json!({"apiVersion": "tinkerbell.org/v1alpha2", "kind": "Template",
        "metadata": {"name": "good"},
        "spec": {"actions": [{"name": "stream", "image": "quay.io/tinkerbell/actions/image2disk:v1.0.0",
            "env": {"DEST_DISK": "{{ index .Hardware.Disks 0 }}"}, "volumes": ["/dev:/dev"]}]}});
    let file = env.write("good.json", &good);
    env.kubectl_ok(&["apply", "-f", &file]).await;
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workflow_spec_is_frozen_once_it_left_pending_and_osie_urls_are_checked() {
    let env = Env::new("wf", true).await;
    let wf = json!({"apiVersion": "tinkerbell.org/v1alpha2", "kind": "Workflow",
        "metadata": {"name": "w1", "namespace": env.ns},
        "spec": {"hardwareRef": {"name": "nowhere"}, "templateRef": {"name": "nothing"}, "timeout": "1h"}});
    let api = env.api("Workflow", "v1alpha2");
    api.create(
        &PostParams::default(),
        &serde_json::from_value(wf.clone()).unwrap(),
    )
    .await
    .expect("unresolved references are no denial");
    let pp = PatchParams::default();
    let timeout = |t: &str| json!({"spec": {"timeout": t}});
    api.patch("w1", &pp, &Patch::Merge(&timeout("2h")))
        .await
        .expect("a Pending workflow's spec may change");
    api.patch_status(
        "w1",
        &pp,
        &Patch::Merge(&json!({"status": {"state": "Running"}})),
    )
    .await
    .unwrap();
    let e = api_error(
        api.patch("w1", &pp, &Patch::Merge(&timeout("3h")))
            .await
            .unwrap_err(),
    );
    assert_eq!(e.code, 422);
    assert!(
        e.message.contains("spec.timeout: the spec of a Workflow cannot change once it left Pending (this one is Running)"),
        "{}",
        e.message
    );
    api.patch(
        "w1",
        &pp,
        &Patch::Merge(&json!({"metadata": {"labels": {"x": "y"}}})),
    )
    .await
    .expect("metadata may change");

    // The warnings for the unresolved references, straight from the webhook.
    let review = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "w-uid", "kind": {"group": "tinkerbell.org", "version": "v1alpha2", "kind": "Workflow"},
        "resource": {"group": "tinkerbell.org", "version": "v1alpha2", "resource": "workflows"},
        "namespace": env.ns, "name": "w2", "operation": "CREATE", "object": wf}});
    let (status, out) = env.post("/validate", review.to_string().into_bytes()).await;
    assert_eq!(status, 200);
    assert_eq!(out["response"]["allowed"], true);
    let warnings = out["response"]["warnings"].as_array().expect("warnings");
    assert_eq!(warnings.len(), 2, "{out}");
    assert!(
        warnings[0]
            .as_str()
            .unwrap()
            .contains("Hardware wf/nowhere does not exist")
    );

    let osie = json!({"apiVersion": "tinkerbell.org/v1alpha2", "kind": "OSIE",
        "metadata": {"name": "hook"}, "spec": {"kernelUrl": "tftp://10.0.0.1/vmlinuz", "initrdUrl": "http://10.0.0.1/initramfs"}});
    let file = env.write("osie.json", &osie);
    let (ok, _, err) = env.kubectl(&["apply", "-f", &file]).await;
    assert!(!ok);
    assert!(
        err.contains(
            "spec.kernelUrl: \"tftp://10.0.0.1/vmlinuz\" has scheme \"tftp\", not http or https"
        ),
        "{err}"
    );
    assert!(env.webhook.metrics.admissions_of("OSIE", "denied") == 1);
    assert!(env.webhook.metrics.admissions_of("Workflow", "allowed") >= 3);
    env.stop().await;
}
