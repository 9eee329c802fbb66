//! deploy/nats/nats.yaml's NATS configuration, as the StatefulSet runs it (its environment
//! resolved as Kubernetes would, test passwords, test certificates from a throw-away CA), with
//! the real nats-server: the configuration is valid (`nats-server -t`); clients must use TLS
//! (a client trusting the CA connects, a plaintext one is refused even with the right password,
//! one that does not trust the CA is refused); routes need TLS and the route password (two
//! servers with it form a cluster, a third with another password is refused).

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use rcgen::{
    BasicConstraints, CertificateParams, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, SanType,
};
use serde::Deserialize;
use serde_json::Value;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::process::{Child, Command};

fn repo() -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The rendered deploy/: the NATS configuration and the StatefulSet's container environment.
fn deployed() -> (String, Vec<Value>) {
    let out = std::process::Command::new("kubectl")
        .args(["kustomize", "deploy/"])
        .current_dir(repo())
        .output()
        .expect("kubectl runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).expect("utf8");
    let docs: Vec<Value> = serde_yaml::Deserializer::from_str(&text)
        .map(|d| Value::deserialize(d).expect("YAML"))
        .collect();
    let conf = docs
        .iter()
        .find(|d| d["kind"] == "ConfigMap" && d["metadata"]["name"] == "tink-nats-config")
        .and_then(|d| d["data"]["nats.conf"].as_str())
        .expect("tink-nats-config nats.conf")
        .to_string();
    let env = docs
        .iter()
        .find(|d| d["kind"] == "StatefulSet" && d["metadata"]["name"] == "tink-nats")
        .and_then(|d| d["spec"]["template"]["spec"]["containers"][0]["env"].as_array())
        .expect("tink-nats env")
        .clone();
    (conf, env)
}

fn route_password(secret_key: &str, wrong_route_password: bool) -> String {
    if secret_key == "tink-route" && wrong_route_password {
        "another-route-password".into()
    } else {
        format!("test-{secret_key}")
    }
}

/// The container's environment for pod `pod`, resolved as the kubelet does (`$(VAR)` of an
/// earlier variable, the pod name, Secret keys as test passwords), with the routes' pod names
/// replaced by the local servers' addresses.
fn environment(
    env: &[Value],
    pod: &str,
    cluster_ports: &[u16],
    wrong_route_password: bool,
) -> BTreeMap<String, String> {
    let mut out: BTreeMap<String, String> = BTreeMap::new();
    for e in env {
        let name = e["name"].as_str().expect("name").to_string();
        let value = if let Some(v) = e["value"].as_str() {
            let mut v = v.to_string();
            for (k, val) in &out {
                v = v.replace(&format!("$({k})"), val);
            }
            assert!(!v.contains("$("), "{name}: unresolved reference in {v}");
            v
        } else if e["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name" {
            pod.to_string()
        } else if let Some(key) = e["valueFrom"]["secretKeyRef"]["key"].as_str() {
            route_password(key, wrong_route_password)
        } else {
            panic!("{name}: unexpected source {e}");
        };
        out.insert(name, value);
    }
    let routes = out.get_mut("TINK_NATS_ROUTES").expect("TINK_NATS_ROUTES");
    for (i, port) in cluster_ports.iter().enumerate() {
        let host = format!("tink-nats-{i}.tink-nats-headless.tink-system.svc:6222");
        assert!(routes.contains(&host), "{routes} has no route to {host}");
        *routes = routes.replace(&host, &format!("localhost:{port}"));
    }
    out
}

/// The configuration with the pod's paths and ports moved into `dir` and onto free ports.
fn localised(conf: &str, dir: &Path, certs: &Path, ports: (u16, u16, u16)) -> String {
    let mut conf = conf.to_string();
    let (client, monitor, cluster) = ports;
    for (from, to) in [
        ("/etc/nats-tls/", format!("{}/", certs.display())),
        ("/data/jetstream", format!("{}/jetstream", dir.display())),
        ("/var/run/nats/", format!("{}/", dir.display())),
        ("port: 4222\n", format!("port: {client}\n")),
        ("http_port: 8222\n", format!("http_port: {monitor}\n")),
        ("port: 6222\n", format!("port: {cluster}\n")),
    ] {
        assert!(conf.contains(from), "nats.conf has no {from:?}");
        conf = conf.replace(from, &to);
    }
    conf
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port()
}

/// A throw-away CA (written as ca.crt) and a certificate for localhost it signs (tls.crt,
/// tls.key), usable by servers and, for routes, as a client certificate.
fn write_certificates(dir: &Path) -> String {
    let mut ca = CertificateParams::default();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_key = KeyPair::generate().expect("key");
    let ca_cert = ca.self_signed(&ca_key).expect("CA");
    let mut leaf = CertificateParams::new(vec!["localhost".to_string()]).expect("params");
    leaf.subject_alt_names
        .push(SanType::IpAddress([127, 0, 0, 1].into()));
    leaf.extended_key_usages = vec![
        ExtendedKeyUsagePurpose::ServerAuth,
        ExtendedKeyUsagePurpose::ClientAuth,
    ];
    let key = KeyPair::generate().expect("key");
    let cert = leaf
        .signed_by(&key, &Issuer::from_params(&ca, &ca_key))
        .expect("sign");
    std::fs::write(dir.join("ca.crt"), ca_cert.pem()).expect("write");
    std::fs::write(dir.join("tls.crt"), cert.pem()).expect("write");
    std::fs::write(dir.join("tls.key"), key.serialize_pem()).expect("write");
    dir.join("ca.crt").display().to_string()
}

struct Nats {
    _child: Child,
    client: u16,
    monitor: u16,
    _dir: tempfile::TempDir,
}

/// Checks pod `i`'s configuration with `nats-server -t`, then starts it.
async fn start(
    i: usize,
    conf: &str,
    env: &[Value],
    certs: &Path,
    cluster_ports: &[u16],
    wrong_route_password: bool,
) -> Nats {
    let dir = tempfile::tempdir().expect("tempdir");
    let (client, monitor) = (free_port(), free_port());
    let text = localised(conf, dir.path(), certs, (client, monitor, cluster_ports[i]));
    let file = dir.path().join("nats.conf");
    std::fs::write(&file, text).expect("write");
    let vars = environment(
        env,
        &format!("tink-nats-{i}"),
        cluster_ports,
        wrong_route_password,
    );
    let check = Command::new("nats-server")
        .arg("-t")
        .arg("-c")
        .arg(&file)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .envs(&vars)
        .output()
        .await
        .expect("nats-server runs (Debian nats-server)");
    assert!(
        check.status.success(),
        "nats-server -t refuses the configuration: {}{}",
        String::from_utf8_lossy(&check.stdout),
        String::from_utf8_lossy(&check.stderr)
    );
    let child = Command::new("nats-server")
        .arg("-c")
        .arg(&file)
        .arg("-l")
        .arg(dir.path().join("log"))
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .envs(&vars)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("nats-server starts");
    let nats = Nats {
        _child: child,
        client,
        monitor,
        _dir: dir,
    };
    for _ in 0..100 {
        if tokio::net::TcpStream::connect(("127.0.0.1", client))
            .await
            .is_ok()
        {
            return nats;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("nats-server {i} does not listen");
}

/// The number of routes server `nats` has (its monitoring endpoint).
async fn routes(nats: &Nats) -> u64 {
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", nats.monitor))
        .await
        .expect("monitor");
    s.write_all(b"GET /routez HTTP/1.0\r\nHost: localhost\r\n\r\n")
        .await
        .expect("write");
    let mut body = String::new();
    s.read_to_string(&mut body).await.expect("read");
    let json = &body[body.find("\r\n\r\n").expect("headers") + 4..];
    serde_json::from_str::<Value>(json).expect("routez")["num_routes"]
        .as_u64()
        .expect("num_routes")
}

fn controller(ca: Option<String>) -> tink_bus::NatsAuth {
    tink_bus::NatsAuth {
        user: Some("tink-controller".into()),
        password: Some("test-tink-controller".into()),
        tls_ca: ca.map(Into::into),
        ..Default::default()
    }
}

#[tokio::test]
async fn deployed_nats_requires_tls_of_clients_and_tls_and_a_password_of_routes() {
    let (conf, env) = deployed();
    let certs = tempfile::tempdir().expect("tempdir");
    let ca = write_certificates(certs.path());
    let cluster: Vec<u16> = (0..3).map(|_| free_port()).collect();
    let a = start(0, &conf, &env, certs.path(), &cluster, false).await;
    let b = start(1, &conf, &env, certs.path(), &cluster, false).await;

    // A client that trusts the CA connects (tls://, as the ConfigMap's NATS_URL) and works;
    // a nats:// URL is upgraded too once the CA is set.
    for url in [
        format!("tls://localhost:{}", a.client),
        format!("nats://localhost:{}", a.client),
    ] {
        let works = async {
            let client = tink_bus::connect(
                &url,
                &controller(Some(ca.clone())),
                async_nats::ConnectOptions::new,
            )
            .await
            .expect("connect");
            client.flush().await.expect("flush");
        };
        tokio::time::timeout(Duration::from_secs(10), works)
            .await
            .unwrap_or_else(|_| panic!("a client trusting NATS's CA cannot use {url}"));
    }
    let url = format!("tls://localhost:{}", a.client);

    // A client that does not trust the CA fails the handshake (async-nats directly: tink_bus
    // would keep retrying in the background).
    let untrusted = async_nats::ConnectOptions::new()
        .user_and_password("tink-controller".into(), "test-tink-controller".into())
        .connect(&url);
    let untrusted = tokio::time::timeout(Duration::from_secs(10), untrusted).await;
    assert!(
        matches!(untrusted, Ok(Err(_))),
        "a client that does not trust the CA connected"
    );

    // Plaintext, with the right password: the server announces that TLS is required and
    // answers no PING.
    let mut raw = tokio::net::TcpStream::connect(("127.0.0.1", a.client))
        .await
        .expect("connect");
    let mut info = vec![0u8; 4096];
    let n = raw.read(&mut info).await.expect("INFO");
    let info = String::from_utf8_lossy(&info[..n]).to_string();
    assert!(info.contains("\"tls_required\":true"), "{info}");
    raw.write_all(
        b"CONNECT {\"user\":\"tink-controller\",\"pass\":\"test-tink-controller\",\"verbose\":false}\r\nPING\r\n",
    )
    .await
    .expect("write");
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), raw.read_to_end(&mut answer)).await;
    let answer = String::from_utf8_lossy(&answer);
    assert!(
        !answer.contains("PONG"),
        "a plaintext client was served: {answer}"
    );

    // Routes: the two servers with the route password form a cluster...
    let mut routed = false;
    for _ in 0..100 {
        if routes(&a).await >= 1 && routes(&b).await >= 1 {
            routed = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        routed,
        "the servers with the route password did not form a cluster"
    );
    // ...and a third with another password is refused by both (and refuses them).
    let c = start(2, &conf, &env, certs.path(), &cluster, true).await;
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_eq!(
        routes(&c).await,
        0,
        "a route with the wrong password was accepted"
    );
    assert_eq!(routes(&a).await, 1);
    assert_eq!(routes(&b).await, 1);
}
