//! Every page and action of the console against kube-lite data: 10,000 Hardware, workflows
//! with statuses, a template, Events; alice allowed in namespace `a` by a Role, bob allowed
//! nothing. The console reads everything from its watches; access is decided per request by
//! TokenReview and SubjectAccessReview.

mod common;

use std::time::Duration;

use common::*;
use futures::StreamExt as _;
use k8s_openapi::api::core::v1::Event;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::json;
use tink_api::v1alpha2::{Hardware, Template, Workflow};

const MACHINES: usize = 10_000;

async fn create_machines(admin: &kube::Client) {
    let api: Api<Hardware> = Api::namespaced(admin.clone(), "a");
    futures::stream::iter(0..MACHINES)
        .map(|i| {
            let api = api.clone();
            async move {
                let rack = if i % 2 == 0 { "r1" } else { "r2" };
                let hw = hardware(
                    "a",
                    &format!("m{i:05}"),
                    &format!("02:00:00:00:{:02x}:{:02x}", i / 256, i % 256),
                    &format!("10.1.{}.{}", i / 250, i % 250 + 1),
                    json!({"rack": rack}),
                );
                api.create(&PostParams::default(), &hw)
                    .await
                    .expect("hardware");
            }
        })
        .buffer_unordered(32)
        .collect::<Vec<_>>()
        .await;
    let other: Api<Hardware> = Api::namespaced(admin.clone(), "b");
    other
        .create(
            &PostParams::default(),
            &hardware(
                "b",
                "secret-machine",
                "02:00:00:ff:00:01",
                "10.9.0.1",
                json!({}),
            ),
        )
        .await
        .expect("hardware in b");
}

async fn create_workflow(admin: &kube::Client, name: &str, hw: &str, status: serde_json::Value) {
    let api: Api<Workflow> = Api::namespaced(admin.clone(), "a");
    let wf: Workflow = tink_api::from_value(json!({
        "apiVersion": "tinkerbell.org/v1alpha2", "kind": "Workflow",
        "metadata": {"name": name, "namespace": "a", "labels": {"team": "blue"}},
        "spec": {"hardwareRef": {"name": hw}, "templateRef": {"name": "ubuntu"}},
    }))
    .expect("workflow");
    api.create(&PostParams::default(), &wf)
        .await
        .expect("workflow");
    api.patch_status(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"status": status})),
    )
    .await
    .expect("status");
}

fn action(name: &str, state: &str, start: &str, end: Option<&str>) -> serde_json::Value {
    let mut a = json!({"rendered": {"name": name, "image": "busybox"}, "id": name, "state": state, "startedAt": start});
    if let Some(e) = end {
        a["lastTransitioned"] = json!(e);
    }
    a
}

fn count(haystack: &str, needle: &str) -> usize {
    haystack.matches(needle).count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_page_and_action_with_10000_machines() {
    let stack = stack().await;
    let admin = stack.admin.clone();
    create_machines(&admin).await;
    let template: Template = tink_api::from_value(json!({
        "apiVersion": "tinkerbell.org/v1alpha2", "kind": "Template",
        "metadata": {"name": "ubuntu", "namespace": "a"},
        "spec": {"actions": [
            {"name": "wipe", "image": "busybox", "args": ["wipe", "{{ .Hardware.Disks | first }}"]},
            {"name": "image", "image": "busybox", "env": {"MAC": "{{ (index .Hardware.Interfaces 0).DHCP.MAC }}"}},
        ]},
    }))
    .expect("template");
    Api::<Template>::namespaced(admin.clone(), "a")
        .create(&PostParams::default(), &template)
        .await
        .expect("template");
    create_workflow(
        &admin,
        "wf-failed",
        "m00001",
        json!({"state": "Failed", "startedAt": "2026-01-01T00:00:00Z", "lastTransitioned": "2026-01-01T00:01:00Z",
               "actions": [
                   action("wipe", "Succeeded", "2026-01-01T00:00:00Z", Some("2026-01-01T00:00:20Z")),
                   {"rendered": {"name": "image", "image": "busybox"}, "id": "image", "state": "Failed",
                    "startedAt": "2026-01-01T00:00:20Z", "lastTransitioned": "2026-01-01T00:01:00Z",
                    "failureReason": "DiskFull", "failureMessage": "no <space> left"},
                   {"rendered": {"name": "reboot", "image": "busybox"}, "id": "reboot", "state": "Pending"},
               ],
               "conditions": [{"type": "Succeeded", "status": "False", "severity": "Error", "reason": "DiskFull", "message": "action image failed"}]}),
    )
    .await;
    create_workflow(
        &admin,
        "wf-running",
        "m00002",
        json!({"state": "Running", "startedAt": "2026-01-01T00:00:00Z",
               "actions": [action("wipe", "Running", "2026-01-01T00:00:00Z", None),
                           {"rendered": {"name": "image", "image": "busybox"}, "id": "image", "state": "Pending"}]}),
    )
    .await;
    let event: Event = serde_json::from_value(json!({
        "metadata": {"name": "wf-failed.1", "namespace": "a"},
        "involvedObject": {"kind": "Workflow", "namespace": "a", "name": "wf-failed", "apiVersion": "tinkerbell.org/v1alpha2"},
        "reason": "ActionFailed", "message": "action image failed: <DiskFull>", "type": "Warning",
        "lastTimestamp": "2026-01-01T00:01:00Z", "count": 1,
    }))
    .expect("event");
    Api::<Event>::namespaced(admin.clone(), "a")
        .create(&PostParams::default(), &event)
        .await
        .expect("event");
    let addr = stack.console;

    // Everything the console was given shows once its watches caught up.
    within("the caches to hold every machine and workflow", async {
        loop {
            let page = get(addr, "/", "alice-token").await;
            if count(&page.body, "class=\"tile ") == MACHINES
                && page.body.contains("tile failed")
                && page.body.contains("tile provisioning")
            {
                break;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await;

    // No token: to the login page, coming back here afterwards.
    let r = request(addr, "GET", "/workflows/a/wf-failed", &[], "").await;
    assert_eq!(r.status, 303);
    assert_eq!(
        r.headers["location"],
        "/login?next=%2Fworkflows%2Fa%2Fwf-failed"
    );
    assert_eq!(request(addr, "GET", "/login", &[], "").await.status, 200);
    // A token the API server does not know.
    let r = get(addr, "/", "nobody-token").await;
    assert_eq!(r.status, 401, "{}", r.body);

    // Machines: every tile of namespace a (alice cannot see b), coloured by the latest workflow.
    let page = get(addr, "/", "alice-token").await;
    assert_eq!(page.status, 200);
    assert_eq!(count(&page.body, "class=\"tile "), MACHINES);
    assert!(
        !page.body.contains("secret-machine"),
        "alice sees nothing of namespace b"
    );
    assert_eq!(count(&page.body, "class=\"tile idle\""), MACHINES - 2);
    assert!(
        page.body
            .contains("id=\"m/a/m00001\" data-state=\"Failed\""),
        "the failed machine"
    );
    assert!(
        page.body
            .contains("<span class=\"mac\">02:00:00:00:00:01</span>")
    );
    assert!(page.body.contains("<span class=\"ip\">10.1.0.2</span>"));
    assert!(page.body.contains("data-live=\"/live/machines?ns="));
    let csp = page.headers["content-security-policy"]
        .to_str()
        .unwrap()
        .to_string();
    assert!(csp.contains("script-src 'self'"), "{csp}");
    // Label and namespace filters.
    let page = get(addr, "/?labels=rack%3Dr1", "alice-token").await;
    assert_eq!(count(&page.body, "class=\"tile "), MACHINES / 2);
    assert_eq!(
        get(addr, "/?labels=%3Cx%3E", "alice-token").await.status,
        400
    );
    assert_eq!(get(addr, "/?ns=b", "alice-token").await.status, 403);
    // The admin (the kubeconfig's token) sees both namespaces.
    let page = get(addr, "/", "kube-lite").await;
    assert_eq!(count(&page.body, "class=\"tile "), MACHINES + 1);
    // bob may list nothing.
    let r = get(addr, "/", "bob-token").await;
    assert_eq!(r.status, 403, "{}", r.body);
    assert!(r.body.contains("may not list hardware"), "{}", r.body);

    // Workflows: filters, sorting, bad input.
    let page = get(addr, "/workflows", "alice-token").await;
    assert_eq!(page.status, 200);
    assert!(page.body.contains("id=\"w/a/wf-failed\""));
    assert!(page.body.contains("id=\"w/a/wf-running\""));
    assert!(
        page.body.contains("<td>1m00s</td>"),
        "the failed workflow's duration"
    );
    let page = get(addr, "/workflows?state=Running", "alice-token").await;
    assert!(page.body.contains("wf-running") && !page.body.contains("id=\"w/a/wf-failed\""));
    let page = get(addr, "/workflows?sort=name", "alice-token").await;
    let (f, r) = (
        page.body.find("id=\"w/a/wf-failed\"").unwrap(),
        page.body.find("id=\"w/a/wf-running\"").unwrap(),
    );
    assert!(f < r, "sorted by name");
    let page = get(addr, "/workflows?sort=duration", "alice-token").await;
    let (f, r) = (
        page.body.find("id=\"w/a/wf-failed\"").unwrap(),
        page.body.find("id=\"w/a/wf-running\"").unwrap(),
    );
    assert!(r < f, "the running one has run longest");
    assert_eq!(
        get(addr, "/workflows?state=Sleeping", "alice-token")
            .await
            .status,
        400
    );
    assert_eq!(
        get(addr, "/workflows?sort=colour", "alice-token")
            .await
            .status,
        400
    );
    assert_eq!(get(addr, "/workflows", "bob-token").await.status, 403);

    // A workflow's page: one timeline bar per action, the failure reason on the failed bar
    // (escaped), conditions, Events.
    let page = get(addr, "/workflows/a/wf-failed", "alice-token").await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert_eq!(count(&page.body, "<g class=\"bar "), 3);
    assert!(
        page.body
            .contains("<g class=\"bar failed\" data-action=\"image\"")
    );
    assert!(
        page.body.contains("DiskFull: no &#60;space&#62; left")
            || page.body.contains("DiskFull: no &lt;space&gt; left"),
        "{}",
        page.body
    );
    assert!(!page.body.contains("<space>"), "escaped");
    assert!(page.body.contains("action image failed"), "the condition");
    assert!(page.body.contains("ActionFailed"), "the Event");
    assert!(
        page.body
            .contains("data-live=\"/live/workflows/a/wf-failed?since=")
    );
    assert_eq!(
        get(addr, "/workflows/a/wf-failed", "bob-token")
            .await
            .status,
        403
    );
    assert_eq!(
        get(addr, "/workflows/a/nope", "alice-token").await.status,
        404
    );
    // No tink-server configured: no action output, and the page says where to find it.
    assert!(page.body.contains("tinkctl workflow logs wf-failed -n a"));
    assert_eq!(
        get(addr, "/workflows/a/wf-failed/logs", "alice-token")
            .await
            .status,
        404
    );
    assert_eq!(
        get(addr, "/workflows/a/wf-failed/logs", "bob-token")
            .await
            .status,
        403
    );
    assert_eq!(
        get(addr, "/workflows/a/Bad%20Name", "alice-token")
            .await
            .status,
        400
    );

    // Templates and the rendered preview against a machine.
    let page = get(addr, "/templates", "alice-token").await;
    assert!(page.body.contains("/templates/a/ubuntu"));
    let page = get(addr, "/templates/a/ubuntu?hardware=m00007", "alice-token").await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(page.body.contains("id=\"preview\""), "{}", page.body);
    assert!(page.body.contains("MAC=02:00:00:00:00:07"), "{}", page.body);
    let page = get(addr, "/templates/a/ubuntu?hardware=missing", "alice-token").await;
    assert!(page.body.contains("machine a/missing does not exist"));
    assert_eq!(
        get(addr, "/templates/a/ubuntu", "bob-token").await.status,
        403
    );

    // Search by MAC, IP and name; nothing from namespace b for alice.
    let page = get(addr, "/search?q=02-00-00-00-00-09", "alice-token").await;
    assert!(page.body.contains(">m00009<"), "by MAC with dashes");
    let page = get(addr, "/search?q=10.1.0.4", "alice-token").await;
    assert!(page.body.contains(">m00003<") && page.body.contains("IP 10.1.0.4"));
    let page = get(addr, "/search?q=wf-", "alice-token").await;
    assert!(page.body.contains(">wf-failed<") && page.body.contains(">wf-running<"));
    let page = get(addr, "/search?q=secret", "alice-token").await;
    assert!(!page.body.contains("secret-machine"));
    let page = get(addr, "/search?q=secret", "kube-lite").await;
    assert!(page.body.contains("secret-machine"));

    // Live: a status change reaches an open workflow stream as a re-rendered fragment.
    let live = tokio::spawn(async move {
        let stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
        let io = hyper_util::rt::TokioIo::new(stream);
        let (mut sender, conn) = hyper::client::conn::http1::handshake(io)
            .await
            .expect("handshake");
        tokio::spawn(conn);
        let req = http::Request::get("/live/workflows/a/wf-running")
            .header("host", addr.to_string())
            .header("cookie", cookie("alice-token"))
            .body(http_body_util::Empty::<bytes::Bytes>::new())
            .expect("request");
        let res = sender.send_request(req).await.expect("send");
        assert_eq!(res.status(), 200);
        assert_eq!(res.headers()["content-type"], "text/event-stream");
        let mut body = res.into_body();
        let mut seen = String::new();
        use http_body_util::BodyExt as _;
        while let Some(frame) = body.frame().await {
            if let Ok(data) = frame.expect("frame").into_data() {
                seen.push_str(&String::from_utf8_lossy(&data));
                if seen.contains("event: update") && seen.contains("Succeeded") {
                    return seen;
                }
            }
        }
        panic!("the stream ended: {seen}");
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    Api::<Workflow>::namespaced(admin.clone(), "a")
        .patch_status(
            "wf-running",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"state": "Succeeded", "lastTransitioned": "2026-01-01T00:02:00Z", "actions": [
                action("wipe", "Succeeded", "2026-01-01T00:00:00Z", Some("2026-01-01T00:01:00Z")),
                action("image", "Succeeded", "2026-01-01T00:01:00Z", Some("2026-01-01T00:02:00Z")),
            ]}})),
        )
        .await
        .expect("status");
    let seen = within("the live update", live).await.expect("stream task");
    assert!(seen.contains("\"id\":\"live\""), "{seen}");
    assert_eq!(
        get(addr, "/live/workflows/a/wf-running", "bob-token")
            .await
            .status,
        403
    );

    // Actions. A cookie session must post its anti-CSRF value, and only from this origin.
    let alice = cookie("alice-token");
    let csrf = tink_console::access::csrf_token("alice-token");
    let r = request(
        addr,
        "POST",
        "/workflows/a/wf-failed/rerun",
        &[("cookie", &alice)],
        "",
    )
    .await;
    assert_eq!(r.status, 403, "no CSRF value");
    let body = format!("csrf={csrf}");
    let r = request(
        addr,
        "POST",
        "/workflows/a/wf-failed/rerun",
        &[("cookie", &alice), ("origin", "http://evil.example")],
        &body,
    )
    .await;
    assert_eq!(r.status, 403, "another origin");
    let r = request(
        addr,
        "POST",
        "/workflows/a/wf-failed/rerun",
        &[("cookie", &alice)],
        &body,
    )
    .await;
    assert_eq!(r.status, 303, "{}", r.body);
    let location = r.headers["location"].to_str().unwrap().to_string();
    let new_name = location
        .strip_prefix("/workflows/a/")
        .and_then(|l| l.strip_suffix("?notice=rerun"))
        .expect("redirected to the new workflow")
        .to_string();
    assert!(new_name.starts_with("wf-failed-"), "{new_name}");
    let copy = Api::<Workflow>::namespaced(admin.clone(), "a")
        .get(&new_name)
        .await
        .expect("created");
    assert_eq!(copy.spec.hardware_ref.name, "m00001");
    assert_eq!(copy.spec.template_ref.name, "ubuntu");
    assert!(copy.status.is_none(), "a fresh run");
    // bob may not run or cancel anything (header sessions need no CSRF value).
    let r = request(
        addr,
        "POST",
        "/workflows/a/wf-failed/cancel",
        &[("authorization", "Bearer bob-token")],
        "",
    )
    .await;
    assert_eq!(r.status, 403);
    // Cancel is deletion; without a controller the workflow goes at once, and its page keeps
    // showing the last state seen.
    let r = request(
        addr,
        "POST",
        "/workflows/a/wf-failed/cancel",
        &[("cookie", &alice)],
        &body,
    )
    .await;
    assert_eq!(r.status, 303, "{}", r.body);
    assert_eq!(
        r.headers["location"],
        "/workflows/a/wf-failed?notice=cancel"
    );
    within("the workflow to be deleted", async {
        loop {
            match Api::<Workflow>::namespaced(admin.clone(), "a")
                .get_opt("wf-failed")
                .await
                .expect("get")
            {
                None => break,
                Some(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
    })
    .await;
    within("the page to show the deleted workflow", async {
        loop {
            let page = get(addr, "/workflows/a/wf-failed?notice=cancel", "alice-token").await;
            if page.body.contains("deleted: the last state seen") {
                assert!(page.body.contains("Cancellation requested"));
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;

    // Login and logout through the form.
    let r = request(
        addr,
        "POST",
        "/login",
        &[],
        "token=alice-token&next=%2Fworkflows",
    )
    .await;
    assert_eq!(r.status, 303);
    assert_eq!(r.headers["location"], "/workflows");
    let set = r.headers["set-cookie"].to_str().unwrap();
    assert!(
        set.starts_with("tink_console=alice-token;")
            && set.contains("HttpOnly")
            && set.contains("SameSite=Strict"),
        "{set}"
    );
    let r = request(
        addr,
        "POST",
        "/login",
        &[],
        "token=wrong&next=%2F%2Fevil.example",
    )
    .await;
    assert_eq!(r.status, 401);
    assert!(r.body.contains("refused this token"));
    let r = request(
        addr,
        "POST",
        "/login",
        &[],
        "token=alice-token&next=%2F%2Fevil.example",
    )
    .await;
    assert_eq!(r.headers["location"], "/", "no open redirect");
    let r = request(addr, "POST", "/logout", &[("cookie", &alice)], &body).await;
    assert_eq!(r.status, 303);
    assert!(
        r.headers["set-cookie"]
            .to_str()
            .unwrap()
            .contains("Max-Age=0")
    );

    // The script and stylesheet are the console's own files.
    let js = request(addr, "GET", "/static/console.js", &[], "").await;
    assert!(js.body.contains("EventSource"));
    assert!(stack.metrics.requests_of("machines", 200) >= 4);
    stack.stop().await.expect("the console stops cleanly");
}
