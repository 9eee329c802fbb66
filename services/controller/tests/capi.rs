//! The Cluster API infrastructure provider against kube-lite (with minimal Cluster API core
//! CRDs from tests/fixtures), NATS, tink-server and agents simulated over gRPC: the Workflows
//! the provider creates are run by the real Workflow controller, driven by the simulated
//! agents' events (no Workflow status is written by the tests).

#[path = "common/bmc.rs"]
mod bmc;
mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::Duration;

use common::{Agent, NS, Stack, within};
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{
    ApiResource, DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams,
};
use kube::{Api, ResourceExt as _};
use serde_json::{Value, json};
use tink_api::capi::v1beta1::{TinkerbellCluster, TinkerbellMachine, conditions as c};
use tink_api::capi::{HARDWARE_CLAIM_LABEL, MACHINE_FINALIZER};
use tink_api::v1alpha2::Hardware;
use tink_controller::capi::CapiMode;

const CLUSTER: &str = "c1";

fn core(kind: &str) -> ApiResource {
    ApiResource::from_gvk(&GroupVersionKind::gvk("cluster.x-k8s.io", "v1beta2", kind))
}

struct Capi {
    stack: Stack,
}

impl Capi {
    async fn start() -> Capi {
        let capi = Capi::without_cluster_api().await;
        capi.install_cluster_api().await;
        capi
    }

    /// The stack with the provider's CRDs (deploy/crds) but not Cluster API's.
    async fn without_cluster_api() -> Capi {
        Capi {
            stack: Stack::start().await,
        }
    }

    /// Cluster API's Cluster and Machine CRDs (tests/fixtures).
    async fn install_cluster_api(&self) {
        let path =
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/capi-core-crds.yaml");
        let text = std::fs::read_to_string(path).expect("fixture");
        let crds: Api<CustomResourceDefinition> = Api::all(self.stack.client.clone());
        for doc in text.split("\n---\n") {
            let crd: CustomResourceDefinition = serde_yaml::from_str(doc).expect("CRD");
            crds.create(&PostParams::default(), &crd)
                .await
                .expect("create CRD");
        }
    }

    fn config(&self, replica: &str) -> tink_controller::ControllerConfig {
        let mut c = self.stack.config(replica);
        c.capi.mode = CapiMode::On;
        c.capi.wait_period = Duration::from_millis(300);
        c
    }

    async fn leader(&self) -> common::Controller {
        let c = self.stack.controller(self.config("controller-0")).await;
        c.wait_leading().await;
        c
    }

    fn dynamic(&self, kind: &str) -> Api<DynamicObject> {
        Api::namespaced_with(self.stack.client.clone(), NS, &core(kind))
    }

    fn machines(&self) -> Api<TinkerbellMachine> {
        Api::namespaced(self.stack.client.clone(), NS)
    }

    fn hardware(&self) -> Api<Hardware> {
        Api::namespaced(self.stack.client.clone(), NS)
    }

    async fn create_dynamic(&self, kind: &str, body: Value) -> DynamicObject {
        let obj: DynamicObject = serde_json::from_value(body).expect("object");
        self.dynamic(kind)
            .create(&PostParams::default(), &obj)
            .await
            .expect("create")
    }

    /// A Cluster (paused or not) and its TinkerbellCluster, owned by it.
    async fn cluster(&self, paused: bool, extra_spec: Value) {
        let cl = self
            .create_dynamic(
                "Cluster",
                json!({
                    "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
                    "metadata": {"name": CLUSTER, "namespace": NS},
                    "spec": {"paused": paused, "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "TinkerbellCluster", "name": CLUSTER}},
                }),
            )
            .await;
        let mut spec = json!({"controlPlaneEndpoint": {"host": "10.0.0.100"}});
        if let (Some(s), Value::Object(extra)) = (spec.as_object_mut(), extra_spec) {
            s.extend(extra);
        }
        let tc: TinkerbellCluster = serde_json::from_value(json!({
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": "TinkerbellCluster",
            "metadata": {"name": CLUSTER, "namespace": NS, "ownerReferences": [owner("Cluster", &cl)]},
            "spec": spec,
        }))
        .expect("TinkerbellCluster");
        Api::<TinkerbellCluster>::namespaced(self.stack.client.clone(), NS)
            .create(&PostParams::default(), &tc)
            .await
            .expect("create TinkerbellCluster");
    }

    /// The setting of most tests: Hardware `hw-0` (the first MAC), an unpaused cluster, and
    /// its infrastructure reported provisioned.
    async fn one_hardware_and_a_ready_cluster(&self) {
        self.create_hardware("hw-0", 0, json!({})).await;
        self.cluster(false, json!({})).await;
        self.cluster_infrastructure_provisioned().await;
    }

    /// What Cluster API's Cluster controller does once the TinkerbellCluster is provisioned.
    async fn cluster_infrastructure_provisioned(&self) {
        let patch = json!({"status": {"initialization": {"infrastructureProvisioned": true}}});
        self.dynamic("Cluster")
            .patch_status(CLUSTER, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .expect("cluster status");
    }

    async fn create_hardware(&self, name: &str, n: u8, labels: Value) {
        let hw: Hardware = tink_api::from_value(json!({
            "apiVersion": "tinkerbell.org/v1alpha2", "kind": "Hardware",
            "metadata": {"name": name, "namespace": NS, "labels": labels},
            "spec": {
                "networkInterfaces": {mac(n): {"dhcp": {"ip": ip(n), "netmask": "255.255.255.0", "hostname": name}}},
                "storageDevices": ["/dev/sda"],
            },
        }))
        .expect("hardware");
        self.hardware()
            .create(&PostParams::default(), &hw)
            .await
            .expect("create hardware");
    }

    /// A Machine of the cluster, its TinkerbellMachine (owned by it) and, when `bootstrap`, its
    /// bootstrap Secret (`value` = `userdata-<name>`) named in `spec.bootstrap.dataSecretName`.
    async fn machine(
        &self,
        name: &str,
        failure_domain: Option<&str>,
        tm_spec: Value,
        bootstrap: bool,
    ) {
        let mut spec = json!({
            "clusterName": CLUSTER,
            "bootstrap": {},
            "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "TinkerbellMachine", "name": name},
        });
        if let Some(fd) = failure_domain {
            spec["failureDomain"] = json!(fd);
        }
        let m = self
            .create_dynamic(
                "Machine",
                json!({
                    "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
                    "metadata": {"name": name, "namespace": NS, "labels": {"cluster.x-k8s.io/cluster-name": CLUSTER}},
                    "spec": spec,
                }),
            )
            .await;
        let tm: TinkerbellMachine = serde_json::from_value(json!({
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": "TinkerbellMachine",
            "metadata": {"name": name, "namespace": NS, "labels": {"cluster.x-k8s.io/cluster-name": CLUSTER},
                "ownerReferences": [owner("Machine", &m)]},
            "spec": tm_spec,
        }))
        .expect("TinkerbellMachine");
        self.machines()
            .create(&PostParams::default(), &tm)
            .await
            .expect("create TinkerbellMachine");
        if bootstrap {
            self.bootstrap(name).await;
        }
    }

    /// What a bootstrap provider and the Machine controller do: the Secret, then its name in
    /// the Machine.
    async fn bootstrap(&self, name: &str) {
        let secret: Secret = serde_json::from_value(json!({
            "metadata": {"name": format!("{name}-bootstrap"), "namespace": NS,
                "labels": {"cluster.x-k8s.io/cluster-name": CLUSTER}},
            "stringData": {"value": format!("#cloud-config\nhostname: {name}\n")},
        }))
        .expect("secret");
        Api::<Secret>::namespaced(self.stack.client.clone(), NS)
            .create(&PostParams::default(), &secret)
            .await
            .expect("create secret");
        let patch = json!({"spec": {"bootstrap": {"dataSecretName": format!("{name}-bootstrap")}}});
        self.dynamic("Machine")
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .expect("machine");
    }

    async fn wait_machine(
        &self,
        name: &str,
        what: &str,
        done: impl Fn(&TinkerbellMachine) -> bool,
    ) -> TinkerbellMachine {
        let api = self.machines();
        within(&format!("TinkerbellMachine {name}: {what}"), async {
            loop {
                if let Ok(Some(m)) = api.get_opt(name).await
                    && done(&m)
                {
                    return m;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
        .await
    }

    async fn wait_condition(
        &self,
        name: &str,
        type_: &str,
        status: &str,
        reason: &str,
    ) -> TinkerbellMachine {
        self.wait_machine(name, &format!("{type_}={status} {reason}"), |m| {
            cond(m, type_).is_some_and(|c| c.status == status && c.reason == reason)
        })
        .await
    }

    async fn wait_machine_gone(&self, name: &str) {
        let api = self.machines();
        within(&format!("TinkerbellMachine {name} to be gone"), async {
            while api.get_opt(name).await.ok().flatten().is_some() {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
        .await
    }

    async fn hw(&self, name: &str) -> Hardware {
        self.hardware().get(name).await.expect("hardware")
    }

    /// Hardware name -> the uid that claims it.
    async fn claims(&self) -> BTreeMap<String, String> {
        self.hardware()
            .list(&Default::default())
            .await
            .expect("list")
            .items
            .into_iter()
            .filter_map(|h| Some((h.name_any(), h.labels().get(HARDWARE_CLAIM_LABEL)?.clone())))
            .collect()
    }
}

fn mac(n: u8) -> String {
    format!("02:00:00:00:00:{n:02x}")
}

fn ip(n: u8) -> String {
    format!("10.0.0.{}", 10 + n)
}

fn owner(kind: &str, obj: &DynamicObject) -> Value {
    json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": kind, "name": obj.name_any(),
        "uid": obj.uid().expect("uid"), "controller": true})
}

fn cond<'a>(
    m: &'a TinkerbellMachine,
    type_: &str,
) -> Option<&'a k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition> {
    m.status
        .as_ref()
        .and_then(|s| tink_controller::capi::condition(&s.conditions, type_))
}

fn claimed_hardware(m: &TinkerbellMachine) -> Option<String> {
    m.status
        .as_ref()?
        .hardware_ref
        .as_ref()
        .map(|r| r.name.clone())
}

fn provisioned(m: &TinkerbellMachine) -> bool {
    m.status
        .as_ref()
        .and_then(|s| s.initialization.as_ref())
        .and_then(|i| i.provisioned)
        == Some(true)
}

fn userdata(h: &Hardware) -> Option<String> {
    h.spec.instance.as_ref().and_then(|i| i.userdata.clone())
}

/// Hegel in process, believing X-Forwarded-For from loopback.
struct Hegel {
    addr: std::net::SocketAddr,
    shutdown: tokio_util::sync::CancellationToken,
}

impl Hegel {
    async fn start(client: &kube::Client) -> Hegel {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let mut config = hegel::HegelConfig::new(addr, hegel::IpxeConfig::new("127.0.0.1:42113"));
        config.trusted_proxies = vec!["127.0.0.1/32".parse().expect("cidr")];
        config.namespace = Some(NS.into());
        let health = tink_runtime::Health::new();
        let shutdown = tokio_util::sync::CancellationToken::new();
        tokio::spawn(hegel::run_on(
            listener,
            config,
            client.clone(),
            health.clone(),
            hegel::Metrics::default(),
            shutdown.clone(),
        ));
        within("hegel to become ready", async {
            while !health.is_ready() {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await;
        Hegel { addr, shutdown }
    }

    /// `GET /2009-04-04/user-data` as the machine with `ip`: (status code, body).
    async fn user_data(&self, ip: &str) -> (u16, String) {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let mut tcp = tokio::net::TcpStream::connect(self.addr)
            .await
            .expect("connect");
        let req = format!(
            "GET /2009-04-04/user-data HTTP/1.1\r\nHost: hegel\r\nX-Forwarded-For: {ip}\r\nConnection: close\r\n\r\n"
        );
        tcp.write_all(req.as_bytes()).await.expect("write");
        let mut raw = Vec::new();
        tcp.read_to_end(&mut raw).await.expect("read");
        let text = String::from_utf8_lossy(&raw).to_string();
        let (head, body) = text.split_once("\r\n\r\n").expect("an HTTP response");
        let code = head
            .split_whitespace()
            .nth(1)
            .and_then(|c| c.parse().ok())
            .expect("a status code");
        (code, body.to_string())
    }
}

const IMAGE: &str = "http://10.0.0.1:8080/ubuntu.raw.gz";

/// The Workflow name in a dispatch's workflow id (`<namespace>/<name>/<uid>/<attempt>`).
fn wf_name(id: &str) -> String {
    id.split('/').nth(1).unwrap_or_default().to_string()
}

/// The agent receives its machine's next Workflow and runs every action to success; the
/// Workflow's name.
async fn run_workflow(agent: &mut Agent) -> String {
    let (wf, actions) = agent.next_start().await;
    agent.received(&wf).await;
    agent.run_all(&wf, &actions).await;
    wf_name(&wf)
}

#[tokio::test]
async fn three_machines_get_three_of_five_hardware_by_affinity_and_failure_domain_and_provision() {
    let capi = Capi::start().await;
    let _ctl = capi.leader().await;
    capi.create_hardware(
        "hw-0",
        0,
        json!({"role": "cp", "topology.kubernetes.io/zone": "z1"}),
    )
    .await;
    capi.create_hardware(
        "hw-1",
        1,
        json!({"role": "cp", "disk": "ssd", "topology.kubernetes.io/zone": "z1"}),
    )
    .await;
    capi.create_hardware(
        "hw-2",
        2,
        json!({"role": "gpu", "topology.kubernetes.io/zone": "z1"}),
    )
    .await;
    capi.create_hardware(
        "hw-3",
        3,
        json!({"role": "cp", "topology.kubernetes.io/zone": "z2"}),
    )
    .await;
    capi.create_hardware(
        "hw-4",
        4,
        json!({"role": "cp", "topology.kubernetes.io/zone": "z2"}),
    )
    .await;
    capi.cluster(false, json!({})).await;

    // The TinkerbellCluster: provisioned, with the failure domains of the Hardware labels.
    let tcs: Api<TinkerbellCluster> = Api::namespaced(capi.stack.client.clone(), NS);
    let tc = within("the TinkerbellCluster to be provisioned", async {
        loop {
            let tc = tcs.get(CLUSTER).await.expect("get");
            if tc
                .status
                .as_ref()
                .is_some_and(|s| s.ready && s.failure_domains.len() == 2)
            {
                return tc;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    let status = tc.status.expect("status");
    assert_eq!(
        status.initialization.and_then(|i| i.provisioned),
        Some(true)
    );
    let domains: Vec<&str> = status
        .failure_domains
        .iter()
        .map(|d| d.name.as_str())
        .collect();
    assert_eq!(domains, ["z1", "z2"]);

    let image = json!({"imageURL": IMAGE});
    let cp_ssd = json!({"imageURL": IMAGE, "hardwareAffinity": {
        "required": [{"labelSelector": {"matchLabels": {"role": "cp"}}}],
        "preferred": [{"weight": 50, "hardwareAffinityTerm": {"labelSelector": {"matchLabels": {"disk": "ssd"}}}}],
    }});
    let gpu = json!({"imageURL": IMAGE, "hardwareAffinity": {
        "required": [{"labelSelector": {"matchExpressions": [{"key": "role", "operator": "In", "values": ["gpu"]}]}}],
    }});
    capi.machine("m-0", Some("z2"), image, false).await;
    capi.machine("m-1", None, cp_ssd, false).await;
    capi.machine("m-2", None, gpu, false).await;

    // In the contract's order: the cluster's infrastructure first, then the bootstrap data.
    capi.wait_condition("m-0", c::HARDWARE_CLAIMED, "False", c::WAITING_FOR_CLUSTER)
        .await;
    let m0 = capi.machines().get("m-0").await.expect("m-0");
    assert!(
        m0.finalizers().contains(&MACHINE_FINALIZER.to_string()),
        "{:?}",
        m0.finalizers()
    );
    capi.cluster_infrastructure_provisioned().await;
    capi.wait_condition(
        "m-0",
        c::HARDWARE_CLAIMED,
        "False",
        c::WAITING_FOR_BOOTSTRAP,
    )
    .await;
    assert!(
        capi.claims().await.is_empty(),
        "nothing is claimed before the bootstrap data exists"
    );

    let mut agents = Vec::new();
    for n in [1u8, 2, 3] {
        agents.push(capi.stack.agent(&mac(n)).await);
    }
    for m in ["m-0", "m-1", "m-2"] {
        capi.bootstrap(m).await;
    }
    let want = [("m-0", "hw-3"), ("m-1", "hw-1"), ("m-2", "hw-2")];
    for (m, hw) in want {
        let tm = capi
            .wait_condition(m, c::HARDWARE_CLAIMED, "True", c::CLAIMED)
            .await;
        assert_eq!(claimed_hardware(&tm).as_deref(), Some(hw), "{m}");
        let domain = if hw == "hw-3" { "z2" } else { "z1" };
        assert_eq!(
            tm.status.as_ref().and_then(|s| s.failure_domain.as_deref()),
            Some(domain),
            "{m}"
        );
        let h = capi.hw(hw).await;
        assert_eq!(
            h.labels().get(HARDWARE_CLAIM_LABEL),
            tm.uid().as_ref(),
            "{hw} is {m}'s"
        );
    }
    let claims = capi.claims().await;
    assert_eq!(claims.len(), 3, "{claims:?}");
    assert_eq!(
        claims.values().collect::<BTreeSet<_>>().len(),
        3,
        "three distinct machines"
    );

    // The bootstrap data reaches each machine's own Hardware (Hegel serves spec.instance.userdata).
    for (m, hw) in want {
        let h = within("the user data", async {
            loop {
                let h = capi.hw(hw).await;
                if userdata(&h).is_some() {
                    return h;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
        .await;
        assert_eq!(
            userdata(&h),
            Some(format!("#cloud-config\nhostname: {m}\n")),
            "{hw}"
        );
    }

    // Hegel serves each machine its own bootstrap data, by the machine's IP (here as a
    // trusted proxy's X-Forwarded-For), and nothing to a machine nobody claimed.
    let hegel = Hegel::start(&capi.stack.client).await;
    for (m, hw) in want {
        let n: u8 = hw.trim_start_matches("hw-").parse().expect("n");
        let (code, body) = hegel.user_data(&ip(n)).await;
        assert_eq!(
            (code, body.as_str()),
            (200, format!("#cloud-config\nhostname: {m}\n").as_str()),
            "{hw}"
        );
    }
    let (code, _) = hegel.user_data(&ip(0)).await;
    assert_eq!(code, 404, "hw-0 is unclaimed and has no user data");
    hegel.shutdown.cancel();

    // The real Workflow controller dispatches each machine's Workflow; the agents run them.
    for agent in agents.iter_mut() {
        let wf = run_workflow(agent).await;
        assert!(["m-0", "m-1", "m-2"].contains(&wf.as_str()), "{wf}");
    }
    for (m, hw) in want {
        let tm = capi.wait_machine(m, "provisioned", provisioned).await;
        assert_eq!(tm.spec.provider_id, Some(format!("tinkerbell://{NS}/{hw}")));
        let st = tm.status.expect("status");
        assert!(st.ready, "v1beta1 ready");
        let n: u8 = hw.trim_start_matches("hw-").parse().expect("n");
        assert!(
            st.addresses
                .iter()
                .any(|a| a.type_ == "InternalIP" && a.address == ip(n)),
            "{:?}",
            st.addresses
        );
        assert!(cond_ok(&st.conditions, c::READY));
    }

    // providerID is immutable once set.
    let patch = json!({"spec": {"providerID": "tinkerbell://tink/other"}});
    let err = capi
        .machines()
        .patch("m-0", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect_err("providerID change refused");
    assert!(err.to_string().contains("providerID is immutable"), "{err}");
    capi.stack.stop().await;
}

fn cond_ok(conds: &[k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition], t: &str) -> bool {
    tink_controller::capi::condition(conds, t).is_some_and(|c| c.status == "True")
}

#[tokio::test]
async fn a_failing_workflow_shows_on_the_machine() {
    let capi = Capi::start().await;
    let _ctl = capi.leader().await;
    capi.one_hardware_and_a_ready_cluster().await;
    let mut agent = capi.stack.agent(&mac(0)).await;
    capi.machine("m-0", None, json!({"imageURL": IMAGE}), true)
        .await;
    let (wf, actions) = agent.next_start().await;
    agent.received(&wf).await;
    agent.started(&wf, &actions[0]).await;
    agent
        .failed(
            &wf,
            &actions[0],
            "ImageNotFound",
            "404 from the image server",
        )
        .await;
    let tm = capi
        .wait_condition("m-0", c::PROVISIONED, "False", c::WORKFLOW_FAILED)
        .await;
    let msg = cond(&tm, c::PROVISIONED)
        .map(|c| c.message.clone())
        .unwrap_or_default();
    assert!(
        msg.contains("ImageNotFound") && msg.contains("404 from the image server"),
        "{msg}"
    );
    assert!(!provisioned(&tm) && tm.spec.provider_id.is_none());
    assert!(
        cond(&tm, c::READY).is_some_and(|c| c.status == "False" && c.reason == c::WORKFLOW_FAILED)
    );
    capi.stack.stop().await;
}

#[tokio::test]
async fn deleting_a_machine_wipes_and_releases_its_hardware_for_the_next_claim() {
    let capi = Capi::start().await;
    let _ctl = capi.leader().await;
    capi.one_hardware_and_a_ready_cluster().await;
    let mut agent = capi.stack.agent(&mac(0)).await;
    let spec = json!({"imageURL": IMAGE, "deprovisionTemplate": {"inline": {"actions": [
        {"name": "wipe", "image": "busybox", "args": ["wipefs", "-a", "{{ index .Hardware.Disks 0 }}"]},
    ]}}});
    capi.machine("m-a", None, spec.clone(), true).await;
    assert_eq!(run_workflow(&mut agent).await, "m-a");
    let tm = capi.wait_machine("m-a", "provisioned", provisioned).await;
    let uid = tm.uid().expect("uid");

    // Cluster API deletes the Machine; the garbage collector deletes its TinkerbellMachine.
    capi.dynamic("Machine")
        .delete("m-a", &DeleteParams::background())
        .await
        .expect("delete");
    let (wipe, actions) = agent.next_start().await;
    assert_eq!(wf_name(&wipe), "m-a-deprovision");
    assert_eq!(actions.len(), 1);
    // Still claimed while the wipe runs.
    assert_eq!(
        capi.hw("hw-0").await.labels().get(HARDWARE_CLAIM_LABEL),
        Some(&uid)
    );
    agent.received(&wipe).await;
    agent.run_all(&wipe, &actions).await;
    capi.wait_machine_gone("m-a").await;
    let h = capi.hw("hw-0").await;
    assert_eq!(h.labels().get(HARDWARE_CLAIM_LABEL), None, "released");
    assert_eq!(userdata(&h), None, "user data cleared");
    let wfs = capi
        .stack
        .workflows()
        .list(&Default::default())
        .await
        .expect("list");
    assert!(wfs.items.is_empty(), "{:?}", common::names(&wfs.items));

    // The next machine gets it.
    capi.machine("m-b", None, json!({"imageURL": IMAGE}), true)
        .await;
    let tm = capi
        .wait_condition("m-b", c::HARDWARE_CLAIMED, "True", c::CLAIMED)
        .await;
    assert_eq!(claimed_hardware(&tm).as_deref(), Some("hw-0"));
    assert_eq!(run_workflow(&mut agent).await, "m-b");
    capi.wait_machine("m-b", "provisioned", provisioned).await;
    capi.stack.stop().await;
}

#[tokio::test]
async fn deleting_a_machine_whose_hardware_was_deleted_first_completes() {
    let capi = Capi::start().await;
    let _ctl = capi.leader().await;
    capi.one_hardware_and_a_ready_cluster().await;
    let spec = json!({"imageURL": IMAGE, "deprovisionTemplate": {"inline": {"actions": [
        {"name": "wipe", "image": "busybox"},
    ]}}});
    // No agent: the Workflow stays Pending.
    capi.machine("m-0", None, spec, true).await;
    capi.wait_condition("m-0", c::PROVISIONED, "False", c::WORKFLOW_RUNNING)
        .await;
    capi.hardware()
        .delete("hw-0", &DeleteParams::default())
        .await
        .expect("delete hw");
    capi.dynamic("Machine")
        .delete("m-0", &DeleteParams::background())
        .await
        .expect("delete");
    capi.wait_machine_gone("m-0").await;
    let wfs = capi
        .stack
        .workflows()
        .list(&Default::default())
        .await
        .expect("list");
    assert!(wfs.items.is_empty(), "{:?}", common::names(&wfs.items));
    capi.stack.stop().await;
}

#[tokio::test]
async fn a_claim_with_a_stale_resource_version_is_refused() {
    let capi = Capi::start().await;
    capi.create_hardware("hw-0", 0, json!({})).await;
    let api = capi.hardware();
    let seen = api.get("hw-0").await.expect("get");
    // Two reconcilers read the same free Hardware; the first claim wins...
    let first =
        tink_controller::capi::machine::claim_hardware(&api, &seen, "uid-a", "tink/a", CLUSTER)
            .await
            .expect("claim");
    assert!(first.is_some());
    // ...and the second, made from the same (now stale) read, is refused without writing.
    let second =
        tink_controller::capi::machine::claim_hardware(&api, &seen, "uid-b", "tink/b", CLUSTER)
            .await
            .expect("claim");
    assert!(second.is_none());
    assert_eq!(
        capi.hw("hw-0")
            .await
            .labels()
            .get(HARDWARE_CLAIM_LABEL)
            .map(String::as_str),
        Some("uid-a")
    );
    capi.stack.stop().await;
}

#[tokio::test]
async fn twenty_reconcilers_racing_for_the_last_free_hardware_never_both_win() {
    let capi = Capi::start().await;
    capi.create_hardware("hw-0", 0, json!({})).await;
    let api = capi.hardware();
    // Twenty reconcilers (of twenty machines) each read the Hardware and, when it is free,
    // claim it, all at once: some read it free, some after another's claim.
    let claims = (0..20).map(|i| {
        let api = api.clone();
        tokio::spawn(async move {
            let uid = format!("uid-{i}");
            let seen = api.get("hw-0").await.expect("get");
            if !tink_api::capi::selection::is_free(seen.labels()) {
                return None;
            }
            let got = tink_controller::capi::machine::claim_hardware(
                &api,
                &seen,
                &uid,
                &format!("tink/m-{i}"),
                CLUSTER,
            )
            .await
            .expect("claim");
            got.map(|_| uid)
        })
    });
    let mut winners = Vec::new();
    for c in futures::future::join_all(claims).await {
        if let Some(uid) = c.expect("task") {
            winners.push(uid);
        }
    }
    assert_eq!(winners.len(), 1, "winners: {winners:?}");
    assert_eq!(
        capi.hw("hw-0")
            .await
            .labels()
            .get(HARDWARE_CLAIM_LABEL)
            .map(String::as_str),
        Some(winners[0].as_str())
    );
    capi.stack.stop().await;
}

#[tokio::test]
async fn two_replicas_racing_for_the_last_free_hardware_never_both_claim_it() {
    let capi = Capi::start().await;
    // Two replicas that both lead (separate Leases: a split brain, the worst case), so two
    // reconcilers see the same free Hardware in their caches at the same time.
    let a = capi.stack.controller(capi.config("controller-a")).await;
    let mut cb = capi.config("controller-b");
    cb.lease.name = "tink-controller-b".into();
    cb.events_consumer = "tink-controller-b".into();
    let b = capi.stack.controller(cb).await;
    a.wait_leading().await;
    b.wait_leading().await;
    capi.create_hardware("hw-0", 0, json!({})).await;
    capi.create_hardware("hw-1", 1, json!({})).await;
    capi.create_hardware("hw-2", 2, json!({})).await;
    capi.cluster(false, json!({})).await;
    capi.cluster_infrastructure_provisioned().await;
    // Watch the claims the whole time: no machine may ever hold two Hardware, not even for a
    // moment (a double claim would heal by a release, and an end-state check would miss it).
    let watcher = {
        let hardware = capi.hardware();
        let stop = tokio_util::sync::CancellationToken::new();
        let task = tokio::spawn({
            let stop = stop.clone();
            async move {
                let mut seen = Vec::new();
                while !stop.is_cancelled() {
                    if let Ok(list) = hardware.list(&Default::default()).await {
                        let mut per_uid: BTreeMap<String, Vec<String>> = BTreeMap::new();
                        for h in list.items {
                            if let Some(uid) = h.labels().get(HARDWARE_CLAIM_LABEL) {
                                per_uid.entry(uid.clone()).or_default().push(h.name_any());
                            }
                        }
                        seen.extend(per_uid.into_values().filter(|hws| hws.len() > 1));
                    }
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                seen
            }
        });
        (stop, task)
    };
    let names = ["m-0", "m-1", "m-2", "m-3", "m-4", "m-5", "m-6", "m-7"];
    let creates = names
        .iter()
        .map(|m| capi.machine(m, None, json!({"imageURL": IMAGE}), true));
    futures::future::join_all(creates).await;

    // Three claims, then nothing changes: the five others report NoHardwareAvailable.
    for m in names {
        capi.wait_machine(m, "claimed or no hardware", |tm| {
            cond(tm, c::HARDWARE_CLAIMED)
                .is_some_and(|c| c.reason == c::CLAIMED || c.reason == c::NO_HARDWARE)
        })
        .await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    watcher.0.cancel();
    let doubles = watcher.1.await.expect("watcher");
    assert!(
        doubles.is_empty(),
        "a machine held two Hardware at once: {doubles:?}"
    );
    // The final state, after it settled.
    let mut winners = BTreeMap::new();
    for m in names {
        let tm = capi.machines().get(m).await.expect("get");
        if let Some(hw) = claimed_hardware(&tm) {
            winners.insert(m.to_string(), (hw, tm.uid().expect("uid")));
        }
    }
    let claims = capi.claims().await;
    assert_eq!(claims.len(), 3, "{claims:?}");
    let holders: BTreeSet<&String> = claims.values().collect();
    assert_eq!(
        holders.len(),
        3,
        "three machines, one Hardware each: {claims:?}"
    );
    assert_eq!(
        winners.len(),
        3,
        "exactly three machines hold Hardware: {winners:?}"
    );
    let hws: BTreeSet<&String> = winners.values().map(|(h, _)| h).collect();
    assert_eq!(
        hws.len(),
        3,
        "no Hardware held by two machines: {winners:?}"
    );
    for (m, (hw, uid)) in &winners {
        assert_eq!(claims.get(hw), Some(uid), "{m} holds {hw}");
    }
    for m in names.iter().filter(|m| !winners.contains_key(**m)) {
        let tm = capi.machines().get(m).await.expect("get");
        assert_eq!(claimed_hardware(&tm), None, "{m}");
        assert!(
            cond(&tm, c::HARDWARE_CLAIMED).is_some_and(|c| c.reason == c::NO_HARDWARE),
            "{m}"
        );
    }
    a.stop().await;
    b.stop().await;
    capi.stack.stop().await;
}

#[tokio::test]
async fn paused_clusters_are_left_alone() {
    let capi = Capi::start().await;
    let _ctl = capi.leader().await;
    capi.create_hardware("hw-0", 0, json!({})).await;
    capi.cluster(true, json!({})).await;
    capi.cluster_infrastructure_provisioned().await;
    capi.machine("m-0", None, json!({"imageURL": IMAGE}), true)
        .await;
    let tm = capi
        .wait_condition("m-0", c::PAUSED, "True", c::PAUSED_REASON)
        .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(tm.finalizers().is_empty(), "no finalizer while paused");
    assert!(
        capi.claims().await.is_empty(),
        "nothing claimed while paused"
    );
    assert!(
        capi.stack
            .workflows()
            .list(&Default::default())
            .await
            .expect("list")
            .items
            .is_empty()
    );

    // Unpaused: it proceeds.
    let patch = json!({"spec": {"paused": false}});
    capi.dynamic("Cluster")
        .patch(CLUSTER, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("unpause");
    capi.wait_condition("m-0", c::HARDWARE_CLAIMED, "True", c::CLAIMED)
        .await;
    capi.wait_condition("m-0", c::PAUSED, "False", c::NOT_PAUSED)
        .await;

    // The annotation on the machine pauses it too.
    let patch = json!({"metadata": {"annotations": {"cluster.x-k8s.io/paused": ""}}});
    capi.machines()
        .patch("m-0", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("annotate");
    capi.wait_condition("m-0", c::PAUSED, "True", c::PAUSED_REASON)
        .await;
    capi.stack.stop().await;
}

#[tokio::test]
async fn the_template_comes_from_the_machine_override_then_the_cluster_override() {
    let capi = Capi::start().await;
    let _ctl = capi.leader().await;
    for n in 0..3 {
        capi.create_hardware(&format!("hw-{n}"), n, json!({})).await;
    }
    capi.cluster(
        false,
        json!({"templateOverride": {"inline": {"actions": [{"name": "cluster-wide", "image": "busybox"}]}}}),
    )
    .await;
    capi.cluster_infrastructure_provisioned().await;
    capi.stack
        .create_template(
            "custom",
            json!([{"name": "from-ref", "image": "busybox"}, {"name": "second", "image": "busybox"}]),
        )
        .await;
    let templates: Api<tink_api::v1alpha2::Template> =
        Api::namespaced(capi.stack.client.clone(), NS);
    let action_names = |t: tink_api::v1alpha2::Template| -> Vec<String> {
        t.spec.actions.into_iter().map(|a| a.name).collect()
    };

    // No override of its own and no imageURL: the cluster's.
    capi.machine("m-0", None, json!({}), true).await;
    capi.wait_condition("m-0", c::PROVISIONED, "False", c::WORKFLOW_RUNNING)
        .await;
    assert_eq!(
        action_names(templates.get("m-0").await.expect("m-0")),
        ["cluster-wide"]
    );

    // Its own, by reference: copied.
    capi.machine(
        "m-1",
        None,
        json!({"templateOverride": {"templateRef": {"name": "custom"}}}),
        true,
    )
    .await;
    capi.wait_condition("m-1", c::PROVISIONED, "False", c::WORKFLOW_RUNNING)
        .await;
    assert_eq!(
        action_names(templates.get("m-1").await.expect("m-1")),
        ["from-ref", "second"]
    );
    let wf = capi
        .stack
        .workflows()
        .get("m-1")
        .await
        .expect("workflow m-1");
    assert_eq!(wf.spec.template_ref.name, "m-1");
    assert_eq!(
        wf.owner_references().first().map(|o| o.kind.as_str()),
        Some("TinkerbellMachine")
    );

    // A reference to a Template that does not exist: a condition, no Workflow.
    capi.machine(
        "m-2",
        None,
        json!({"templateOverride": {"templateRef": {"name": "missing"}}}),
        true,
    )
    .await;
    let tm = capi
        .wait_condition("m-2", c::PROVISIONED, "False", c::TEMPLATE_INVALID)
        .await;
    let msg = cond(&tm, c::PROVISIONED)
        .map(|c| c.message.clone())
        .unwrap_or_default();
    assert!(msg.contains("missing"), "{msg}");
    assert!(
        capi.stack
            .workflows()
            .get_opt("m-2")
            .await
            .expect("get")
            .is_none()
    );
    capi.stack.stop().await;
}

#[tokio::test]
async fn a_tinkerbell_cluster_waits_for_its_control_plane_endpoint() {
    let capi = Capi::start().await;
    let _ctl = capi.leader().await;
    capi.cluster(false, json!({"controlPlaneEndpoint": null}))
        .await;
    let tcs: Api<TinkerbellCluster> = Api::namespaced(capi.stack.client.clone(), NS);
    let ready_reason = |tc: &TinkerbellCluster| {
        tc.status
            .as_ref()
            .and_then(|s| tink_controller::capi::condition(&s.conditions, c::READY))
            .map(|c| (c.status.clone(), c.reason.clone()))
    };
    within("the TinkerbellCluster to wait for its endpoint", async {
        loop {
            let tc = tcs.get(CLUSTER).await.expect("get");
            if ready_reason(&tc) == Some(("False".into(), c::NO_ENDPOINT.into())) {
                let s = tc.status.expect("status");
                assert!(!s.ready && s.initialization.is_none(), "{s:?}");
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    let patch = json!({"spec": {"controlPlaneEndpoint": {"host": "10.0.0.100"}}});
    tcs.patch(CLUSTER, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("patch");
    within("the TinkerbellCluster to be provisioned", async {
        loop {
            let tc = tcs.get(CLUSTER).await.expect("get");
            if tc.status.as_ref().is_some_and(|s| s.ready) {
                assert_eq!(
                    tc.spec.control_plane_endpoint.map(|e| e.port),
                    Some(6443),
                    "the default port"
                );
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    capi.stack.stop().await;
}

/// The auditing proxy and RBAC evaluator of tinkctl's end-to-end test (shared, not copied).
#[allow(dead_code)]
#[path = "../../../cli/tinkctl/tests/common/mod.rs"]
mod rbac;

/// The controller's RBAC documents in deploy/rbac (its own and the provider's).
fn deploy_rbac() -> Vec<Value> {
    use serde::Deserialize as _;
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../deploy/rbac");
    let mut docs = Vec::new();
    for file in ["controller.yaml", "capi.yaml"] {
        let text = std::fs::read_to_string(dir.join(file)).expect("deploy/rbac");
        for d in serde_yaml::Deserializer::from_str(&text) {
            docs.push(Value::deserialize(d).expect("yaml"));
        }
    }
    docs
}

#[tokio::test]
async fn every_call_the_provider_makes_is_allowed_by_deploy_rbac() {
    let capi = Capi::start().await;
    // The controller reaches kube-lite through the auditing proxy as user tink-controller.
    let dir = tempfile::tempdir().expect("tempdir");
    let kubeconfig = dir.path().join("kubeconfig");
    capi.stack
        .kube
        .write_kubeconfig(&kubeconfig)
        .expect("kubeconfig");
    let audit = rbac::Audit::default();
    let url = rbac::start_proxy(kubeconfig, audit.clone()).await;
    let mut config = kube::Config::new(url.parse().expect("proxy url"));
    config.auth_info.token = Some("tink-controller".to_string().into());
    let client = kube::Client::try_from(config).expect("client");
    let ctl = capi
        .stack
        .controller_with_client(capi.config("controller-0"), client)
        .await;
    ctl.wait_leading().await;

    // The whole life of a machine: claim, user data, Workflow, provisioned, wipe, release.
    capi.create_hardware("hw-0", 0, json!({"topology.kubernetes.io/zone": "z1"}))
        .await;
    capi.cluster(false, json!({})).await;
    capi.cluster_infrastructure_provisioned().await;
    let mut agent = capi.stack.agent(&mac(0)).await;
    let spec = json!({"imageURL": IMAGE, "deprovisionTemplate": {"inline": {"actions": [
        {"name": "wipe", "image": "busybox"},
    ]}}});
    capi.machine("m-0", Some("z1"), spec, true).await;
    assert_eq!(run_workflow(&mut agent).await, "m-0");
    capi.wait_machine("m-0", "provisioned", provisioned).await;
    capi.dynamic("Machine")
        .delete("m-0", &DeleteParams::background())
        .await
        .expect("delete");
    assert_eq!(run_workflow(&mut agent).await, "m-0-deprovision");
    capi.wait_machine_gone("m-0").await;

    let calls = audit.calls();
    let controller: Vec<_> = calls
        .iter()
        .filter(|c| c.user == "tink-controller")
        .collect();
    // Not vacuous: the provider's own calls went through the proxy.
    for (verb, resource, sub) in [
        ("watch", "tinkerbellmachines", ""),
        ("patch", "tinkerbellmachines", ""),
        ("patch", "tinkerbellmachines", "status"),
        ("patch", "tinkerbellclusters", "status"),
        ("get", "machines", ""),
        ("get", "clusters", ""),
        ("get", "secrets", ""),
        ("list", "hardware", ""),
        ("patch", "hardware", ""),
        ("create", "templates", ""),
        ("delete", "templates", ""),
        ("create", "workflows", ""),
        ("delete", "workflows", ""),
    ] {
        assert!(
            controller
                .iter()
                .any(|c| c.verb == verb && c.resource == resource && c.subresource == sub),
            "the provider was expected to {verb} {resource}/{sub}; recorded: {controller:#?}"
        );
    }
    let docs = deploy_rbac();
    let denied: Vec<_> = controller
        .iter()
        .filter(|c| !rbac::allowed(&docs, &c.user, "tink-system", c))
        .collect();
    assert!(
        denied.is_empty(),
        "calls deploy/rbac does not allow: {denied:#?}"
    );
    ctl.stop().await;
    capi.stack.stop().await;
}

#[tokio::test]
async fn a_failed_wipe_keeps_the_hardware_claimed_and_is_retried() {
    let capi = Capi::start().await;
    let _ctl = capi.leader().await;
    capi.one_hardware_and_a_ready_cluster().await;
    let mut agent = capi.stack.agent(&mac(0)).await;
    let spec = json!({"imageURL": IMAGE, "deprovisionTemplate": {"inline": {"actions": [
        {"name": "wipe", "image": "busybox"},
    ]}}});
    capi.machine("m-0", None, spec, true).await;
    assert_eq!(run_workflow(&mut agent).await, "m-0");
    let tm = capi.wait_machine("m-0", "provisioned", provisioned).await;
    let uid = tm.uid().expect("uid");
    capi.dynamic("Machine")
        .delete("m-0", &DeleteParams::background())
        .await
        .expect("delete");

    // The wipe fails: shown on the machine, the Hardware stays claimed with its user data.
    let (wipe, actions) = agent.next_start().await;
    assert_eq!(wf_name(&wipe), "m-0-deprovision");
    agent.received(&wipe).await;
    agent.started(&wipe, &actions[0]).await;
    agent
        .failed(&wipe, &actions[0], "DiskBusy", "wipefs: device busy")
        .await;
    let tm = capi
        .wait_condition("m-0", c::READY, "False", c::WORKFLOW_FAILED)
        .await;
    let msg = cond(&tm, c::READY)
        .map(|c| c.message.clone())
        .unwrap_or_default();
    assert!(
        msg.contains("deprovision") && msg.contains("DiskBusy"),
        "{msg}"
    );
    let h = capi.hw("hw-0").await;
    assert_eq!(
        h.labels().get(HARDWARE_CLAIM_LABEL),
        Some(&uid),
        "not released unwiped"
    );
    assert!(userdata(&h).is_some());

    // It is run again; once it succeeds the Hardware is released and the machine is gone.
    assert_eq!(run_workflow(&mut agent).await, "m-0-deprovision");
    capi.wait_machine_gone("m-0").await;
    let h = capi.hw("hw-0").await;
    assert_eq!(h.labels().get(HARDWARE_CLAIM_LABEL), None);
    assert_eq!(userdata(&h), None);
    capi.stack.stop().await;
}

#[tokio::test]
async fn deleting_a_machine_mid_workflow_cancels_it_before_the_hardware_is_released() {
    let capi = Capi::start().await;
    let _ctl = capi.leader().await;
    capi.one_hardware_and_a_ready_cluster().await;
    let mut agent = capi.stack.agent(&mac(0)).await;
    capi.machine("m-0", None, json!({"imageURL": IMAGE}), true)
        .await;
    let (wf, actions) = agent.next_start().await;
    agent.received(&wf).await;
    agent.started(&wf, &actions[0]).await;
    capi.wait_condition("m-0", c::PROVISIONED, "False", c::WORKFLOW_RUNNING)
        .await;

    capi.dynamic("Machine")
        .delete("m-0", &DeleteParams::background())
        .await
        .expect("delete");
    // The agent is told to stop; until it confirms, the Hardware stays claimed.
    match agent.next_command().await {
        common::Command::Stop { workflow_id, .. } => assert_eq!(workflow_id, wf),
        other => panic!("expected StopWorkflow, got {other:?}"),
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        capi.hw("hw-0")
            .await
            .labels()
            .contains_key(HARDWARE_CLAIM_LABEL),
        "still claimed while the Workflow runs"
    );
    assert!(capi.machines().get_opt("m-0").await.expect("get").is_some());
    agent.canceled(&wf, Some(&actions[0])).await;
    capi.wait_machine_gone("m-0").await;
    assert_eq!(
        capi.hw("hw-0").await.labels().get(HARDWARE_CLAIM_LABEL),
        None
    );
    capi.stack.stop().await;
}

#[tokio::test]
async fn auto_mode_runs_the_provider_only_when_cluster_api_is_served() {
    let capi = Capi::without_cluster_api().await;
    let mut config = capi.config("controller-0");
    config.capi.mode = CapiMode::Auto;
    let tm: TinkerbellMachine = serde_json::from_value(json!({
        "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": "TinkerbellMachine",
        "metadata": {"name": "orphan", "namespace": NS}, "spec": {},
    }))
    .expect("TinkerbellMachine");
    capi.machines()
        .create(&PostParams::default(), &tm)
        .await
        .expect("create");

    // No Cluster API: the provider stays off, the machine is not looked at.
    let ctl = capi.stack.controller(config.clone()).await;
    ctl.wait_leading().await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let m = capi.machines().get("orphan").await.expect("get");
    assert!(m.status.is_none(), "{:?}", m.status);
    ctl.stop().await;

    // Cluster API installed, the next leader runs it.
    capi.install_cluster_api().await;
    let ctl = capi.stack.controller(config).await;
    ctl.wait_leading().await;
    capi.wait_condition(
        "orphan",
        c::HARDWARE_CLAIMED,
        "False",
        c::WAITING_FOR_MACHINE,
    )
    .await;
    ctl.stop().await;
    capi.stack.stop().await;
}

/// A Hardware with a BMC: the provisioning Workflow boots it through the BMC (bootOptions
/// netboot, so the emulator's machine is On with a Pxe override before the agent gets the
/// Workflow, and netboot is off after success), and deleting the machine powers it off (the
/// `<machine>-poweroff` Job) before the Hardware is released. Real BMC controller and
/// sushy-tools.
#[tokio::test]
async fn a_machine_with_a_bmc_is_powered_on_through_its_workflow_and_off_on_delete() {
    use bmc::{BmcController, bmc_machine, bmc_secret, redfish};
    use tink_api::bmc::{Job, PowerState};
    use tink_bmc::Bmc as _;
    use tink_testkit::bmc::{BMC_PASSWORD, Sushy};

    let sushy = Sushy::start().await.expect("sushy-emulator");
    let capi = Capi::start().await;
    bmc_secret(&capi.stack, "bmc-creds", BMC_PASSWORD).await;
    bmc_machine(&capi.stack, "bmc-0", &sushy.host(), "bmc-creds").await;
    capi.create_hardware("hw-0", 0, json!({})).await;
    let patch = json!({"spec": {"bmcRef": {"name": "bmc-0"}}});
    capi.hardware()
        .patch("hw-0", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("bmcRef");
    capi.cluster(false, json!({})).await;
    capi.cluster_infrastructure_provisioned().await;
    let bmc = BmcController::start(&capi.stack, sushy.cert_pem());
    let _ctl = capi.leader().await;
    let emulator = redfish(&sushy);
    let mut agent = capi.stack.agent(&mac(0)).await;

    capi.machine("m-0", None, json!({"imageURL": IMAGE}), true)
        .await;
    let (wf, actions) = agent.next_start().await;
    // The Workflow asked for a netboot through the BMC, and it ran before the dispatch.
    let w = capi.stack.workflows().get("m-0").await.expect("workflow");
    let boot = w.spec.boot_options.clone().expect("bootOptions");
    assert!(boot.toggle_allow_netboot);
    assert_eq!(boot.boot_mode, Some(tink_api::v1alpha2::BootMode::Netboot));
    assert_eq!(emulator.power_state().await.expect("power"), PowerState::On);
    assert_eq!(emulator.boot_override().await.expect("override").0, "Pxe");
    agent.received(&wf).await;
    agent.run_all(&wf, &actions).await;
    capi.wait_machine("m-0", "provisioned", provisioned).await;

    capi.dynamic("Machine")
        .delete("m-0", &DeleteParams::background())
        .await
        .expect("delete");
    capi.wait_machine_gone("m-0").await;
    // Powered off before the Hardware was released: the Job completed (the machine's finalizer
    // waited for it) and the emulator says Off.
    assert_eq!(
        emulator.power_state().await.expect("power"),
        PowerState::Off
    );
    let h = capi.hw("hw-0").await;
    assert_eq!(h.labels().get(HARDWARE_CLAIM_LABEL), None, "released");
    let jobs: Api<Job> = Api::namespaced(capi.stack.client.clone(), NS);
    if let Some(j) = jobs.get_opt("m-0-poweroff").await.expect("read job") {
        assert!(
            j.status.as_ref().is_some_and(|s| s.has_condition(
                tink_api::bmc::JobConditionType::Completed,
                tink_api::bmc::ConditionStatus::True
            )),
            "{:?}",
            j.status
        );
    }
    bmc.stop().await;
    capi.stack.stop().await;
}
