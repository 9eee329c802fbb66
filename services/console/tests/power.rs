//! The BMC on the machine pages, against kube-lite with the bmc.tinkerbell.org CRDs: a
//! machine's power state and last Job on its page and tile, live; the power form creates a
//! `job.bmc.tinkerbell.org` with the user's own token (RBAC decides), with the anti-CSRF check
//! and a confirmation for the actions that take a machine down. Without the CRDs the console
//! still serves and says so.

mod common;

use std::time::Duration;

use common::*;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::Api;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use serde_json::json;
use tink_api::bmc::{Job, Machine};
use tink_api::v1alpha2::Hardware;

async fn bind(admin: &kube::Client, user: &str, rules: serde_json::Value) {
    let role: Role = serde_json::from_value(json!({
        "metadata": {"name": format!("{user}-bmc"), "namespace": "a"},
        "rules": rules,
    }))
    .expect("role");
    Api::<Role>::namespaced(admin.clone(), "a")
        .create(&PostParams::default(), &role)
        .await
        .expect("Role");
    let binding: RoleBinding = serde_json::from_value(json!({
        "metadata": {"name": format!("{user}-bmc"), "namespace": "a"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": format!("{user}-bmc")},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
    }))
    .expect("binding");
    Api::<RoleBinding>::namespaced(admin.clone(), "a")
        .create(&PostParams::default(), &binding)
        .await
        .expect("RoleBinding");
}

async fn machine_with_bmc(admin: &kube::Client, name: &str, mac: &str, bmc: Option<&str>) {
    let mut hw = hardware("a", name, mac, "10.1.0.9", json!({}));
    if let Some(b) = bmc {
        hw.spec.bmc_ref = Some(tink_api::v1alpha2::LocalObjectReference::new(b));
    }
    Api::<Hardware>::namespaced(admin.clone(), "a")
        .create(&PostParams::default(), &hw)
        .await
        .expect("hardware");
}

async fn jobs(admin: &kube::Client) -> Vec<Job> {
    Api::<Job>::namespaced(admin.clone(), "a")
        .list(&ListParams::default())
        .await
        .expect("jobs")
        .items
}

async fn post(addr: std::net::SocketAddr, headers: &[(&str, &str)], body: &str) -> Answer {
    request(addr, "POST", "/machines/a/m1/power", headers, body).await
}

/// Waits until `path` (as alice) shows `what`.
async fn page_shows(addr: std::net::SocketAddr, path: &str, what: &str) -> String {
    let last = std::sync::Mutex::new(String::new());
    let found = tokio::time::timeout(DEADLINE, async {
        loop {
            let page = get(addr, path, "alice-token").await;
            if page.status == 200 && page.body.contains(what) {
                return page.body;
            }
            *last.lock().expect("lock") = format!("{} {}", page.status, page.body);
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    found.unwrap_or_else(|_| {
        panic!(
            "{path} never showed {what:?}; it last showed: {}",
            last.lock().expect("lock")
        )
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn power_state_last_job_and_power_actions_through_the_users_rbac() {
    let stack = stack_bmc().await;
    let (admin, addr) = (stack.admin.clone(), stack.console);
    // alice operates BMCs in a; dave may look at them but create no Job.
    bind(
        &admin,
        "alice",
        json!([{"apiGroups": ["bmc.tinkerbell.org"], "resources": ["machines", "jobs"],
                "verbs": ["get", "list", "watch", "create"]}]),
    )
    .await;
    bind(
        &admin,
        "dave",
        json!([{"apiGroups": ["tinkerbell.org"], "resources": ["hardware"], "verbs": ["get", "list", "watch"]},
               {"apiGroups": ["bmc.tinkerbell.org"], "resources": ["machines", "jobs"], "verbs": ["get", "list", "watch"]}]),
    )
    .await;

    let machines: Api<Machine> = Api::namespaced(admin.clone(), "a");
    let m: Machine = serde_json::from_value(json!({
        "apiVersion": "bmc.tinkerbell.org/v1alpha1", "kind": "Machine",
        "metadata": {"name": "bmc-1", "namespace": "a"},
        "spec": {"connection": {"host": "127.0.0.1", "insecureTLS": true}},
    }))
    .expect("machine");
    machines
        .create(&PostParams::default(), &m)
        .await
        .expect("Machine");
    machines
        .patch_status(
            "bmc-1",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"powerState": "on", "conditions": [
                {"type": "Contactable", "status": "True", "lastUpdateTime": "2026-01-01T00:00:00Z"}]}})),
        )
        .await
        .expect("Machine status");
    // Its last Job failed, with the provider's error.
    let job_api: Api<Job> = Api::namespaced(admin.clone(), "a");
    let mut old =
        tink_api::bmc::plan::Plan::power(tink_api::bmc::PowerAction::Cycle).job("a", "bmc-1");
    old.metadata.generate_name = None;
    old.metadata.name = Some("bmc-1-earlier".into());
    job_api
        .create(&PostParams::default(), &old)
        .await
        .expect("Job");
    job_api
        .patch_status(
            "bmc-1-earlier",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"startTime": "2026-01-01T00:00:01Z", "conditions": [
                {"type": "Running", "status": "False"},
                {"type": "Failed", "status": "True", "message": "task 0 (bmc-1-earlier-task-0) failed: power cycle: <connection refused>"}]}})),
        )
        .await
        .expect("Job status");
    machine_with_bmc(&admin, "m1", "02:00:00:00:00:01", Some("bmc-1")).await;
    machine_with_bmc(&admin, "m2", "02:00:00:00:00:02", None).await;
    machine_with_bmc(&admin, "m3", "02:00:00:00:00:03", Some("ghost")).await;

    // The machine page: power state, contactable since when, the last Job with its tasks,
    // state and the provider's error (escaped).
    let page = page_shows(addr, "/machines/a/m1", "data-job=\"bmc-1-earlier\"").await;
    assert!(page.contains("data-power=\"on\""), "{page}");
    assert!(page.contains("data-contactable=\"yes\""), "{page}");
    assert!(page.contains("since 2026-01-01T00:00:00Z"), "{page}");
    assert!(page.contains("data-job-state=\"failed\""), "{page}");
    assert!(page.contains("power cycle"), "{page}");
    assert!(
        page.contains("&#60;connection refused&#62;")
            || page.contains("&lt;connection refused&gt;"),
        "{page}"
    );
    assert!(!page.contains("<connection refused>"), "escaped");
    assert!(page.contains("id=\"power-off\""), "the form: {page}");
    assert!(
        page.contains("data-live=\"/live/machines/a/m1?since="),
        "{page}"
    );
    // The machines list: m1's tile says its power state; m2 (no bmcRef) nothing; m3 that its
    // BMC Machine is missing.
    let list = page_shows(addr, "/", "m/a/m3").await;
    let tile = |id: &str| {
        let start = list.find(&format!("id=\"m/a/{id}\"")).expect("tile");
        list[start..start + list[start..].find("</a>").expect("end")].to_string()
    };
    assert!(tile("m1").contains("power on"), "{}", tile("m1"));
    assert!(!tile("m2").contains("class=\"power"), "{}", tile("m2"));
    assert!(tile("m3").contains("BMC missing"), "{}", tile("m3"));
    assert!(
        tile("m1").contains("href=\"/machines/a/m1\""),
        "{}",
        tile("m1")
    );
    // m3's page says its Machine does not exist and offers no form; m2's shows nothing of a
    // BMC at all.
    let m3 = get(addr, "/machines/a/m3", "alice-token").await;
    assert!(
        m3.body.contains("data-bmc=\"missing\"") && m3.body.contains("a/ghost"),
        "{}",
        m3.body
    );
    assert!(!m3.body.contains("/power\""), "{}", m3.body);
    let m2 = get(addr, "/machines/a/m2", "alice-token").await;
    assert_eq!(m2.status, 200);
    assert!(
        !m2.body.contains("id=\"bmc\"") && !m2.body.contains("/power\""),
        "{}",
        m2.body
    );
    // A discovered machine's page: waiting for approval, and the inventory its agent reported
    // (escaped like everything else); a machine without one says so.
    assert!(m2.body.contains("id=\"inventory-none\""), "{}", m2.body);
    assert!(!m2.body.contains("id=\"discovery\""), "{}", m2.body);
    let mut m4 = hardware("a", "m4", "02:00:00:00:00:04", "10.1.0.14", json!({}));
    m4.spec.discovery = Some(tink_api::v1alpha2::Discovery {
        approved: false,
        ..Default::default()
    });
    let hardware_api = Api::<Hardware>::namespaced(admin.clone(), "a");
    hardware_api
        .create(&PostParams::default(), &m4)
        .await
        .expect("m4");
    hardware_api
        .patch_status(
            "m4",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"inventoryReportedAt": "2026-11-27T12:00:00Z",
                "inventorySource": "Enrollment",
                "attributes": {"inBand": {"collectionMethod": "agent",
                "product": {"vendor": "QEMU", "name": "Standard PC", "serialNumber": "SN-<4>"},
                "cpu": {"totalCores": 2, "totalThreads": 4},
                "memory": {"totalBytes": 2147483648u64},
                "blockDevices": [{"name": "vda", "sizeBytes": 1073741824u64}],
                "networkInterfaces": [{"ports": [{"mac": "02:00:00:00:00:04", "speedMbps": 1000}]}]}}}})),
        )
        .await
        .expect("m4 status");
    let m4 = page_shows(addr, "/machines/a/m4", "id=\"inventory\"").await;
    assert!(m4.contains("data-approved=\"no\""), "{m4}");
    assert!(m4.contains("tinkctl hardware approve m4 -n a"), "{m4}");
    assert!(
        m4.contains("SN-&#60;4&#62;") || m4.contains("SN-&lt;4&gt;"),
        "the serial, escaped: {m4}"
    );
    assert!(m4.contains("2 cores, 4 threads"), "{m4}");
    assert!(m4.contains("an enrollment, without credentials"), "{m4}");
    assert!(m4.contains("2.0 GiB"), "{m4}");
    assert!(m4.contains("<code>vda</code> 1.0 GiB"), "{m4}");
    assert!(
        m4.contains("<code>02:00:00:00:00:04</code> 1000 Mb/s"),
        "{m4}"
    );

    // bob may not see the machine.
    assert_eq!(get(addr, "/machines/a/m1", "bob-token").await.status, 403);

    let alice = cookie("alice-token");
    let csrf = tink_console::access::csrf_token("alice-token");
    let before = jobs(&admin).await.len();
    // No anti-CSRF value, a wrong one, another origin: refused, no Job.
    for (headers, body) in [
        (vec![("cookie", alice.as_str())], "action=on".to_string()),
        (
            vec![("cookie", alice.as_str())],
            format!(
                "action=on&csrf={}",
                tink_console::access::csrf_token("bob-token")
            ),
        ),
        (
            vec![
                ("cookie", alice.as_str()),
                ("origin", "http://evil.example"),
            ],
            format!("action=on&csrf={csrf}"),
        ),
    ] {
        let r = post(addr, &headers, &body).await;
        assert_eq!(r.status, 403, "{}", r.body);
    }
    // Bad input names the field.
    let r = post(
        addr,
        &[("cookie", &alice)],
        &format!("action=explode&csrf={csrf}"),
    )
    .await;
    assert_eq!(r.status, 400);
    assert!(r.body.contains("`action`"), "{}", r.body);
    // dave may not create Jobs: a clear 403 naming the permission, and no Job.
    let r = post(addr, &[("authorization", "Bearer dave-token")], "action=on").await;
    assert_eq!(r.status, 403, "{}", r.body);
    assert!(
        r.body.contains("create") && r.body.contains("jobs"),
        "{}",
        r.body
    );
    // Without a bmcRef there is nothing to power.
    let r = request(
        addr,
        "POST",
        "/machines/a/m2/power",
        &[("cookie", &alice)],
        &format!("action=on&csrf={csrf}"),
    )
    .await;
    assert_eq!(r.status, 400, "{}", r.body);
    assert_eq!(jobs(&admin).await.len(), before, "no Job was created");

    // alice powers m1 on: a Job for bmc-1 with one power task, created with her token.
    let r = post(
        addr,
        &[("cookie", &alice)],
        &format!("action=on&csrf={csrf}"),
    )
    .await;
    assert_eq!(r.status, 303, "{}", r.body);
    let location = r.headers["location"]
        .to_str()
        .expect("location")
        .to_string();
    let name = location
        .strip_prefix("/machines/a/m1?notice=power&job=")
        .expect("back to the machine page")
        .to_string();
    assert!(name.starts_with("bmc-1-power-on-"), "{name}");
    let created = job_api.get(&name).await.expect("the Job");
    assert_eq!(
        (
            created.spec.machine_ref.namespace.as_str(),
            created.spec.machine_ref.name.as_str()
        ),
        ("a", "bmc-1")
    );
    assert_eq!(
        serde_json::to_value(&created.spec.tasks).expect("json"),
        json!([{"powerAction": "on"}])
    );
    // It is the machine's last Job now, pending until a BMC controller starts it.
    let page = page_shows(addr, &location, &format!("data-job=\"{name}\"")).await;
    assert!(page.contains("data-job-state=\"pending\""), "{page}");
    assert!(page.contains(&format!("Job {name} created")), "{page}");

    // Power off asks first: a confirmation page, no Job; then with the confirmation, the Job.
    let count = jobs(&admin).await.len();
    let r = post(
        addr,
        &[("cookie", &alice)],
        &format!("action=off&csrf={csrf}"),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(
        r.body.contains("name=\"confirm\" value=\"yes\""),
        "{}",
        r.body
    );
    assert!(
        r.body
            .contains("without shutting the operating system down"),
        "{}",
        r.body
    );
    assert_eq!(
        jobs(&admin).await.len(),
        count,
        "nothing before the confirmation"
    );
    let r = post(
        addr,
        &[("cookie", &alice)],
        &format!("action=pxe-cycle&efi=1&confirm=yes&csrf={csrf}"),
    )
    .await;
    assert_eq!(r.status, 303, "{}", r.body);
    let pxe = jobs(&admin)
        .await
        .into_iter()
        .find(|j| {
            j.metadata
                .name
                .as_deref()
                .is_some_and(|n| n.starts_with("bmc-1-boot-pxe-cycle-"))
        })
        .expect("the PXE Job");
    assert_eq!(
        serde_json::to_value(&pxe.spec.tasks).expect("json"),
        json!([{"oneTimeBootDeviceAction": {"device": ["pxe"], "efiBoot": true}}, {"powerAction": "cycle"}])
    );
    let pxe_name = pxe.metadata.name.clone().expect("name");

    // Live: the page's stream carries the Job's progress and the new power state.
    let live = tokio::spawn(async move {
        let stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
        let io = hyper_util::rt::TokioIo::new(stream);
        let (mut sender, conn) = hyper::client::conn::http1::handshake(io)
            .await
            .expect("handshake");
        tokio::spawn(conn);
        let req = http::Request::get("/live/machines/a/m1")
            .header("host", addr.to_string())
            .header("cookie", cookie("alice-token"))
            .body(http_body_util::Empty::<bytes::Bytes>::new())
            .expect("request");
        let res = sender.send_request(req).await.expect("send");
        assert_eq!(res.status(), 200);
        let mut body = res.into_body();
        let mut seen = String::new();
        use http_body_util::BodyExt as _;
        while let Some(frame) = body.frame().await {
            if let Ok(data) = frame.expect("frame").into_data() {
                seen.push_str(&String::from_utf8_lossy(&data));
                if seen.contains("data-job-state=\\\"completed\\\"")
                    && seen.contains("data-power=\\\"off\\\"")
                {
                    return seen;
                }
            }
        }
        panic!("the stream ended: {seen}");
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    job_api
        .patch_status(
            &pxe_name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"conditions": [
                {"type": "Running", "status": "False"}, {"type": "Completed", "status": "True"}],
                "completionTime": "2026-01-01T00:05:00Z"}})),
        )
        .await
        .expect("Job status");
    machines
        .patch_status(
            "bmc-1",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"powerState": "off"}})),
        )
        .await
        .expect("Machine status");
    let seen = within("the live update", live).await.expect("stream task");
    assert!(seen.contains("\"id\":\"bmc\""), "{seen}");
    // bob may not get the machine: no stream.
    assert_eq!(
        get(addr, "/live/machines/a/m1", "bob-token").await.status,
        403
    );
    stack.stop().await.expect("the console stops cleanly");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_bmc_crds_the_console_serves_and_says_so() {
    // The usual stack: no bmc.tinkerbell.org CRDs. The console became ready all the same.
    let stack = stack().await;
    let (admin, addr) = (stack.admin.clone(), stack.console);
    machine_with_bmc(&admin, "m1", "02:00:00:00:00:01", Some("bmc-1")).await;
    let page = page_shows(addr, "/machines/a/m1", "BMC API not installed").await;
    assert!(!page.contains("/power\""), "no form: {page}");
    let list = get(addr, "/", "alice-token").await;
    assert_eq!(list.status, 200);
    assert!(
        list.body.contains("id=\"m/a/m1\"") && !list.body.contains("class=\"power"),
        "{}",
        list.body
    );
    let r = request(
        addr,
        "POST",
        "/machines/a/m1/power",
        &[("authorization", "Bearer alice-token")],
        "action=on",
    )
    .await;
    assert_eq!(r.status, 503, "{}", r.body);
    assert!(r.body.contains("BMC API not installed"), "{}", r.body);
    stack.stop().await.expect("the console stops cleanly");
}

/// deploy/rbac/console.yaml lets the console's ServiceAccount list and watch what its watches
/// read, BMC Machines and Jobs included, and write nothing of the BMC API with its own identity
/// (power actions go with the user's token). Asked with SubjectAccessReviews, which kube-lite
/// evaluates against the RBAC objects it stores (it does not enforce them on requests).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_consoles_own_rbac_reads_machines_and_jobs_and_writes_no_job() {
    use k8s_openapi::api::authorization::v1::SubjectAccessReview;
    let rbac = std::fs::read_to_string(repo().join("deploy/rbac/console.yaml")).expect("rbac");
    let stack = stack_as_console(&rbac).await;
    let admin = stack.admin.clone();
    let may = |verb: &'static str, group: &'static str, resource: &'static str| {
        let admin = admin.clone();
        async move {
            let review: SubjectAccessReview = serde_json::from_value(json!({
                "spec": {"user": "system:serviceaccount:tink-system:tink-console",
                         "groups": ["system:serviceaccounts", "system:serviceaccounts:tink-system", "system:authenticated"],
                         "resourceAttributes": {"verb": verb, "group": group, "resource": resource, "namespace": "a"}},
            }))
            .expect("review");
            Api::<SubjectAccessReview>::all(admin)
                .create(&PostParams::default(), &review)
                .await
                .expect("SubjectAccessReview")
                .status
                .is_some_and(|s| s.allowed)
        }
    };
    for (group, resource) in [
        ("tinkerbell.org", "hardware"),
        ("tinkerbell.org", "workflows"),
        ("tinkerbell.org", "templates"),
        ("", "events"),
        ("bmc.tinkerbell.org", "machines"),
        ("bmc.tinkerbell.org", "jobs"),
    ] {
        for verb in ["list", "watch"] {
            assert!(
                may(verb, group, resource).await,
                "{verb} {group}/{resource}"
            );
        }
    }
    for verb in ["create", "delete", "update", "patch"] {
        assert!(
            !may(verb, "bmc.tinkerbell.org", "jobs").await,
            "{verb} jobs"
        );
        assert!(
            !may(verb, "bmc.tinkerbell.org", "machines").await,
            "{verb} machines"
        );
    }
    // And the console running with that token serves the BMC part of a machine's page.
    bind(
        &admin,
        "alice",
        json!([{"apiGroups": ["bmc.tinkerbell.org"], "resources": ["machines", "jobs"], "verbs": ["list"]}]),
    )
    .await;
    let m: Machine = serde_json::from_value(json!({
        "apiVersion": "bmc.tinkerbell.org/v1alpha1", "kind": "Machine",
        "metadata": {"name": "bmc-1", "namespace": "a"},
        "spec": {"connection": {"host": "127.0.0.1"}},
    }))
    .expect("machine");
    Api::<Machine>::namespaced(admin.clone(), "a")
        .create(&PostParams::default(), &m)
        .await
        .expect("Machine");
    machine_with_bmc(&admin, "m1", "02:00:00:00:00:01", Some("bmc-1")).await;
    let page = page_shows(stack.console, "/machines/a/m1", "data-bmc=\"known\"").await;
    assert!(
        page.contains("data-power=\"unknown\"") && page.contains("not polled yet"),
        "{page}"
    );
    stack.stop().await.expect("the console stops cleanly");
}
