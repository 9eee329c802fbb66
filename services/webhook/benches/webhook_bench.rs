//! Webhook benchmark: admission latency over HTTPS (one keep-alive connection, as an API
//! server keeps one) with 10,000 Hardware in the index, and one ConversionReview of 1,000
//! objects. `cargo bench -p tink-webhook --bench webhook-bench [-- --requests N]`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper_util::rt::TokioIo;
use rustls_pki_types::ServerName;
use rustls_pki_types::pem::PemObject as _;
use serde_json::{Value, json};
use tink_webhook::{AppState, Index, Metrics, ServeLimits, router, serve};
use tokio_rustls::rustls;

const HARDWARE: usize = 10_000;

fn mac(i: usize) -> String {
    let b = (i as u32).to_be_bytes();
    format!("02:00:{:02x}:{:02x}:{:02x}:{:02x}", b[0], b[1], b[2], b[3])
}

fn ip(i: usize) -> String {
    let b = (i as u32).to_be_bytes();
    format!("10.{}.{}.{}", b[1], b[2], b[3])
}

fn hardware_v2(i: usize) -> Value {
    json!({"apiVersion": "tinkerbell.org/v1alpha2", "kind": "Hardware",
        "metadata": {"name": format!("m{i}"), "namespace": format!("rack-{}", i % 20), "uid": format!("uid-{i}")},
        "spec": {"networkInterfaces": {mac(i): {"dhcp": {"ip": ip(i), "netmask": "255.255.0.0",
            "gateway": "10.0.0.1", "hostname": format!("m{i}"), "leaseTime": 86400}}},
            "storageDevices": ["/dev/nvme0n1"], "instance": {"userdata": "#cloud-config\n"}}})
}

fn hardware_v1(i: usize) -> Value {
    json!({"apiVersion": "tinkerbell.org/v1alpha1", "kind": "Hardware",
        "metadata": {"name": format!("m{i}"), "namespace": "rack", "uid": format!("uid-{i}")},
        "spec": {"disks": [{"device": "/dev/nvme0n1"}], "userData": "#cloud-config\n",
            "metadata": {"state": "provisioning", "instance": {"id": mac(i), "hostname": format!("m{i}")}},
            "interfaces": [{"dhcp": {"mac": mac(i), "arch": "x86_64", "uefi": true, "hostname": format!("m{i}"),
                "ip": {"address": ip(i), "netmask": "255.255.0.0", "gateway": "10.0.0.1"},
                "lease_time": 86400, "name_servers": ["1.1.1.1"]},
                "netboot": {"allowPXE": true, "allowWorkflow": true}}]}})
}

fn review(kind: &str, op: &str, object: Value, old: Option<Value>, uid: usize) -> Vec<u8> {
    let plural = match kind {
        "Hardware" => "hardware",
        "Template" => "templates",
        _ => "workflows",
    };
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": format!("u{uid}"),
        "kind": {"group": "tinkerbell.org", "version": "v1alpha2", "kind": kind},
        "resource": {"group": "tinkerbell.org", "version": "v1alpha2", "resource": plural},
        "namespace": "bench", "name": object["metadata"]["name"], "operation": op,
        "object": object, "oldObject": old.unwrap_or(Value::Null)}})
    .to_string()
    .into_bytes()
}

fn template() -> Value {
    json!({"apiVersion": "tinkerbell.org/v1alpha2", "kind": "Template", "metadata": {"name": "ubuntu"},
        "spec": {"actions": [
            {"name": "stream", "image": "quay.io/tinkerbell/actions/image2disk:v1.0.0", "timeout": "600s",
                "env": {"DEST_DISK": "{{ index .Hardware.Disks 0 }}", "IMG_URL": "http://10.0.0.1:8080/jammy.raw.gz", "COMPRESSED": "true"}},
            {"name": "cloud-init", "image": "quay.io/tinkerbell/actions/writefile:v1.0.0",
                "env": {"DEST_DISK": "{{ formatPartition (index .Hardware.Disks 0) 1 }}", "FS_TYPE": "ext4",
                    "DEST_PATH": "/etc/cloud/cloud.cfg.d/10_tinkerbell.cfg", "CONTENTS": "datasource:\n  Ec2:\n    metadata_urls: [\"http://10.0.0.1:50061\"]\n"}},
            {"name": "kexec", "image": "quay.io/tinkerbell/actions/kexec:v1.0.0", "networkNamespace": "host",
                "env": {"BLOCK_DEVICE": "{{ formatPartition (index .Hardware.Disks 0) 1 }}", "FS_TYPE": "ext4"}},
        ], "volumes": ["/dev:/dev", "/var/run/docker.sock:/var/run/docker.sock:ro"]}})
}

struct Client {
    sender: hyper::client::conn::http1::SendRequest<Full<Bytes>>,
}

impl Client {
    async fn connect(addr: std::net::SocketAddr, ca_pem: &str) -> Client {
        let mut roots = rustls::RootCertStore::empty();
        for c in rustls_pki_types::CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
            roots.add(c.expect("ca")).expect("ca");
        }
        let config = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
        let tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
        tcp.set_nodelay(true).expect("nodelay");
        let tls = tokio_rustls::TlsConnector::from(Arc::new(config))
            .connect(
                ServerName::try_from("tink-webhook.tink-system.svc").expect("name"),
                tcp,
            )
            .await
            .expect("tls");
        let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
            .await
            .expect("http");
        tokio::spawn(conn);
        Client { sender }
    }

    async fn post(&mut self, path: &str, body: Vec<u8>) -> Value {
        self.sender.ready().await.expect("ready");
        let req = http::Request::post(path)
            .header("host", "tink-webhook.tink-system.svc")
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(body)))
            .expect("request");
        let resp = self.sender.send_request(req).await.expect("send");
        assert_eq!(resp.status(), 200);
        let bytes = resp.into_body().collect().await.expect("body").to_bytes();
        serde_json::from_slice(&bytes).expect("json")
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn report(name: &str, mut samples: Vec<Duration>) {
    samples.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    println!(
        "{name:<44} n={:<6} p50={:.3} ms  p99={:.3} ms  max={:.3} ms",
        samples.len(),
        ms(percentile(&samples, 0.50)),
        ms(percentile(&samples, 0.99)),
        ms(*samples.last().expect("samples")),
    );
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let mut requests = 5_000usize;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        if a == "--requests" {
            requests = args.next().and_then(|n| n.parse().ok()).unwrap_or(requests);
        }
    }

    let index = Arc::new(Index::new(Duration::from_secs(30)));
    for i in 0..HARDWARE {
        let h = hardware_v2(i);
        index.upsert_hardware(&format!("rack-{}/m{i}", i % 20), &h);
    }
    index.add_template("bench/ubuntu");
    index.mark_synced();
    println!("index: {} Hardware", index.len().0);

    let certs = tink_webhook::dev_certificates(&["tink-webhook.tink-system.svc".into()], &[])
        .expect("certs");
    let key = tink_webhook::tls::certified_key(certs.cert_pem.as_bytes(), certs.key_pem.as_bytes())
        .expect("key");
    let tls = Arc::new(
        tink_webhook::tls::CertStore::new(key)
            .server_config()
            .expect("tls"),
    );
    let limits = ServeLimits::default();
    let metrics = Metrics::default();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let shutdown = tokio_util::sync::CancellationToken::new();
    let app = router(AppState::new(index.clone(), metrics, &limits), &limits);
    let server = tokio::spawn(serve(listener, tls, app, limits, shutdown.clone()));
    let mut client = Client::connect(addr, &certs.ca_pem).await;

    // Warm up.
    for i in 0..200 {
        client
            .post(
                "/validate",
                review(
                    "Hardware",
                    "CREATE",
                    hardware_v2(HARDWARE + 1_000_000 + i),
                    None,
                    i,
                ),
            )
            .await;
    }

    let mut allowed = Vec::with_capacity(requests);
    let mut denied = Vec::with_capacity(requests);
    let mut update = Vec::with_capacity(requests);
    let mut tpl = Vec::with_capacity(requests);
    let mut wf = Vec::with_capacity(requests);
    let template = template();
    for i in 0..requests {
        // A new machine (a fresh MAC and IP): allowed.
        let body = review("Hardware", "CREATE", hardware_v2(HARDWARE + i), None, i);
        let t = Instant::now();
        let out = client.post("/validate", body).await;
        allowed.push(t.elapsed());
        assert_eq!(out["response"]["allowed"], true, "{out}");

        // A copy of an indexed machine under another name: denied (MAC and IP taken).
        let mut dup = hardware_v2(i % HARDWARE);
        dup["metadata"]["name"] = json!(format!("copy-{i}"));
        let body = review("Hardware", "CREATE", dup, None, i);
        let t = Instant::now();
        let out = client.post("/validate", body).await;
        denied.push(t.elapsed());
        assert_eq!(out["response"]["allowed"], false, "{out}");

        // An update of an indexed machine that adds an interface.
        let old = hardware_v2(i % HARDWARE);
        let mut new = old.clone();
        new["spec"]["networkInterfaces"][mac(3_000_000 + i)] =
            json!({"dhcp": {"ip": ip(3_000_000 + i)}});
        let body = review("Hardware", "UPDATE", new, Some(old), i);
        let t = Instant::now();
        let out = client.post("/validate", body).await;
        update.push(t.elapsed());
        assert_eq!(out["response"]["allowed"], true, "{out}");

        let body = review("Template", "CREATE", template.clone(), None, i);
        let t = Instant::now();
        let out = client.post("/validate", body).await;
        tpl.push(t.elapsed());
        assert_eq!(out["response"]["allowed"], true, "{out}");

        let w = json!({"apiVersion": "tinkerbell.org/v1alpha2", "kind": "Workflow",
            "metadata": {"name": format!("w{i}"), "namespace": "bench"},
            "spec": {"hardwareRef": {"name": "m1"}, "templateRef": {"name": "ubuntu"},
                "templateData": {"device_1": mac(1)}}});
        let body = review("Workflow", "CREATE", w, None, i);
        let t = Instant::now();
        let out = client.post("/validate", body).await;
        wf.push(t.elapsed());
        assert_eq!(out["response"]["allowed"], true, "{out}");
    }
    println!("admission over HTTPS (keep-alive), {HARDWARE} Hardware indexed:");
    report("  Hardware CREATE, new MAC/IP (allowed)", allowed);
    report("  Hardware CREATE, taken MAC/IP (denied)", denied);
    report("  Hardware UPDATE adding an interface", update);
    report("  Template CREATE (3 actions, templated env)", tpl);
    report("  Workflow CREATE (references looked up)", wf);

    // One ConversionReview of 1,000 objects, each way.
    let v1: Vec<Value> = (0..1000).map(hardware_v1).collect();
    let conv = |objects: Vec<Value>, to: &str| {
        json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
            "request": {"uid": "c", "desiredAPIVersion": to, "objects": objects}})
        .to_string()
        .into_bytes()
    };
    let up = conv(v1, "tinkerbell.org/v1alpha2");
    println!("ConversionReview request body: {} KiB", up.len() / 1024);
    let mut up_times = Vec::new();
    let mut converted = Vec::new();
    for _ in 0..10 {
        let t = Instant::now();
        let out = client.post("/convert", up.clone()).await;
        up_times.push(t.elapsed());
        assert_eq!(out["response"]["result"]["status"], "Success");
        converted = out["response"]["convertedObjects"]
            .as_array()
            .expect("objects")
            .clone();
    }
    assert_eq!(converted.len(), 1000);
    let down = conv(converted, "tinkerbell.org/v1alpha1");
    let mut down_times = Vec::new();
    for _ in 0..10 {
        let t = Instant::now();
        let out = client.post("/convert", down.clone()).await;
        down_times.push(t.elapsed());
        assert_eq!(out["response"]["result"]["status"], "Success");
    }
    println!("one ConversionReview of 1,000 Hardware over HTTPS (10 runs):");
    report("  v1alpha1 -> v1alpha2", up_times);
    report("  v1alpha2 -> v1alpha1 (annotation restored)", down_times);

    shutdown.cancel();
    let _ = server.await;
}
