//! Conversion through kube-lite: objects created with kubectl in one version and read back in
//! the other, field for field as crates/api's conversion gives them, and unchanged in their own.

mod common;

use common::Env;
use serde_json::{Value, json};

const ANNOTATION: &str = "tinkerbell.org/conversion-data";

fn v1alpha1_objects(ns: &str) -> Vec<Value> {
    vec![
        json!({"apiVersion": "tinkerbell.org/v1alpha1", "kind": "Hardware",
        "metadata": {"name": "sm01", "namespace": ns, "labels": {"rack": "r12"}},
        "spec": {
            "disks": [{"device": "/dev/nvme0n1"}],
            "userData": "#cloud-config\nhostname: sm01\n",
            "metadata": {"state": "provisioning", "instance": {"id": "3c:ec:ef:4c:4f:54", "hostname": "sm01"}},
            "interfaces": [{
                "dhcp": {"arch": "x86_64", "hostname": "sm01", "mac": "3c:ec:ef:4c:4f:54",
                    "ip": {"address": "192.168.2.148", "gateway": "192.168.2.1", "netmask": "255.255.255.0"},
                    "lease_time": 86400, "name_servers": ["1.1.1.1"], "uefi": true, "vlan_id": "10"},
                "netboot": {"allowPXE": true, "allowWorkflow": true,
                    "osie": {"baseURL": "http://192.168.2.1:8080/hook"}}
            }]
        }}),
        json!({"apiVersion": "tinkerbell.org/v1alpha1", "kind": "Template",
            "metadata": {"name": "ubuntu", "namespace": ns},
            "spec": {"data": "version: \"0.1\"\nname: ubuntu\nglobal_timeout: 1800\ntasks:\n  - name: \"os installation\"\n    worker: \"{{.device_1}}\"\n    volumes:\n      - /dev:/dev\n    actions:\n      - name: \"stream image\"\n        image: quay.io/tinkerbell/actions/image2disk:v1.0.0\n        timeout: 600\n        environment:\n          DEST_DISK: {{ index .Hardware.Disks 0 }}\n          IMG_URL: http://192.168.2.1:8080/jammy.raw.gz\n      - name: \"kexec\"\n        image: quay.io/tinkerbell/actions/kexec:v1.0.0\n        timeout: 90\n        pid: host\n"}}),
        json!({"apiVersion": "tinkerbell.org/v1alpha1", "kind": "Workflow",
            "metadata": {"name": "sm01-ubuntu", "namespace": ns},
            "spec": {"templateRef": "ubuntu", "hardwareRef": "sm01",
                "hardwareMap": {"device_1": "3c:ec:ef:4c:4f:54"}}}),
    ]
}

fn v1alpha2_objects(ns: &str) -> Vec<Value> {
    vec![
        // `disableDhcp: false` is written out: the CRD schema defaults it, so the stored object has it.
        json!({"apiVersion": "tinkerbell.org/v1alpha2", "kind": "Hardware",
        "metadata": {"name": "sm02", "namespace": ns},
        "spec": {
            "networkInterfaces": {"3c:ec:ef:4c:4f:55": {"dhcp": {"ip": "192.168.2.149",
                "netmask": "255.255.255.0", "gateway": "192.168.2.1", "hostname": "sm02",
                "nameservers": ["1.1.1.1"], "leaseTime": 3600}, "disableDhcp": false, "disableNetboot": true}},
            "storageDevices": ["/dev/sda"],
            "instance": {"userdata": "#cloud-config\n"},
            "osie": {"osieRef": {"name": "hook"}, "kernelParams": ["console=ttyS0"]},
        }}),
        json!({"apiVersion": "tinkerbell.org/v1alpha2", "kind": "Template",
            "metadata": {"name": "debian", "namespace": ns},
            "spec": {"actions": [
                {"name": "stream", "image": "quay.io/tinkerbell/actions/image2disk:v1.0.0",
                    "env": {"DEST_DISK": "{{ index .Hardware.Disks 0 }}"}, "timeout": "600s"},
                {"name": "reboot", "image": "busybox", "cmd": "/bin/sh", "args": ["-c", "reboot"],
                    "networkNamespace": "host"},
            ], "volumes": ["/dev:/dev"], "env": {"PROXY": "http://proxy:3128"}}}),
        json!({"apiVersion": "tinkerbell.org/v1alpha2", "kind": "Workflow",
            "metadata": {"name": "sm02-debian", "namespace": ns},
            "spec": {"hardwareRef": {"name": "sm02"}, "templateRef": {"name": "debian"},
                "templateData": {"device_1": "3c:ec:ef:4c:4f:55"}, "timeout": "1h"}}),
    ]
}

fn resource(kind: &str, version: &str) -> String {
    let plural = match kind {
        "Hardware" => "hardware",
        "Template" => "templates",
        _ => "workflows",
    };
    format!("{plural}.{version}.tinkerbell.org")
}

async fn get(env: &Env, kind: &str, version: &str, name: &str) -> Value {
    let out = env
        .kubectl_ok(&["get", &resource(kind, version), name, "-o", "json"])
        .await;
    serde_json::from_str(&out).expect("kubectl JSON")
}

fn annotation(obj: &Value) -> Option<Value> {
    obj.pointer("/metadata/annotations")
        .and_then(|a| a.get(ANNOTATION))
        .and_then(Value::as_str)
        .map(|s| serde_json::from_str(s).expect("annotation JSON"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn objects_read_back_in_the_other_version_field_for_field() {
    let env = Env::new("conv", true).await;
    for (objects, from, to) in [
        (v1alpha1_objects(&env.ns), "v1alpha1", "v1alpha2"),
        (v1alpha2_objects(&env.ns), "v1alpha2", "v1alpha1"),
    ] {
        for obj in objects {
            let kind = obj["kind"].as_str().unwrap().to_string();
            let name = obj["metadata"]["name"].as_str().unwrap().to_string();
            let file = env.write(&format!("{name}.json"), &obj);
            let out = env.kubectl_ok(&["create", "-f", &file]).await;
            assert!(out.contains("created"), "{out}");

            let expected =
                tink_api::conversion::convert(obj.clone(), &format!("tinkerbell.org/{to}"))
                    .expect("crates/api converts the object");
            let other = get(&env, &kind, to, &name).await;
            assert_eq!(other["apiVersion"], format!("tinkerbell.org/{to}"));
            assert_eq!(
                other["spec"], expected["spec"],
                "{kind} {name} read as {to}"
            );
            assert_eq!(
                annotation(&other),
                annotation(&expected),
                "{kind} {name}: the conversion annotation read as {to}"
            );
            assert_eq!(
                other["metadata"]["labels"], obj["metadata"]["labels"],
                "{kind} {name}"
            );

            let same = get(&env, &kind, from, &name).await;
            assert_eq!(
                same["spec"], obj["spec"],
                "{kind} {name} read back as {from}"
            );
            assert_eq!(
                annotation(&same),
                None,
                "{kind} {name}: no annotation in its own version"
            );
        }
    }

    // A list in the other version: every object converted, in order.
    let out = env
        .kubectl_ok(&["get", &resource("Hardware", "v1alpha1"), "-o", "json"])
        .await;
    let list: Value = serde_json::from_str(&out).unwrap();
    let names: Vec<&str> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["sm01", "sm02"]);
    assert!(
        list["items"]
            .as_array()
            .unwrap()
            .iter()
            .all(|i| i["apiVersion"] == "tinkerbell.org/v1alpha1")
    );
    assert!(
        env.webhook
            .metrics
            .conversions
            .get_or_create(&tink_webhook::Label {
                value: "success".into()
            })
            .get()
            >= 6
    );
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_review_with_a_bad_object_fails_with_a_message_and_keeps_the_uid() {
    let env = Env::new("convbad", false).await;
    let good = v1alpha1_objects(&env.ns).remove(0);
    let mut bad = good.clone();
    bad["spec"]["interfaces"] = json!("not a list");
    let review = |objects: Vec<Value>, to: &str| {
        json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
            "request": {"uid": "c-uid", "desiredAPIVersion": to, "objects": objects}})
    };
    let (status, out) = env
        .post(
            "/convert",
            review(vec![good.clone(), good.clone()], "tinkerbell.org/v1alpha2")
                .to_string()
                .into_bytes(),
        )
        .await;
    assert_eq!(status, 200);
    assert_eq!(out["response"]["uid"], "c-uid");
    assert_eq!(out["response"]["result"]["status"], "Success");
    assert_eq!(
        out["response"]["convertedObjects"]
            .as_array()
            .unwrap()
            .len(),
        2
    );

    let (status, out) = env
        .post(
            "/convert",
            review(vec![good.clone(), bad], "tinkerbell.org/v1alpha2")
                .to_string()
                .into_bytes(),
        )
        .await;
    assert_eq!(status, 200);
    assert_eq!(out["response"]["uid"], "c-uid");
    assert_eq!(out["response"]["result"]["status"], "Failure");
    let message = out["response"]["result"]["message"].as_str().unwrap();
    assert!(
        message.contains("objects[1]") && message.contains("spec.interfaces"),
        "{message}"
    );

    let (_, out) = env
        .post(
            "/convert",
            review(vec![good], "tinkerbell.org/v9")
                .to_string()
                .into_bytes(),
        )
        .await;
    assert_eq!(out["response"]["result"]["status"], "Failure");
    assert!(
        out["response"]["result"]["message"]
            .as_str()
            .unwrap()
            .contains("v9")
    );
    env.stop().await;
}
