//! iPXE scripts against kube-lite: the OSIE script with Smee's parameters, the inline and URL
//! overrides, and no script for machines that may not netboot.

mod common;
#[path = "common/server.rs"]
mod server;

use common::Env;
use pretty_assertions::assert_eq;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scripts_for_osie_inline_url_and_disabled_netboot() {
    let env = Env::new().await;
    env.create_osie(
        "hook",
        "http://127.0.0.1:8080/vmlinuz-x86_64",
        "http://127.0.0.1:8080/initramfs-x86_64",
    )
    .await;
    env.create_hardware(
        "osie",
        json!({"networkInterfaces": {"02:00:00:00:00:02": {"dhcp": {"ip": "127.0.0.2", "vlanId": "7"}}},
               "osie": {"osieRef": {"name": "hook"}, "kernelParams": ["tinkerbell_tls=false", "quiet"]}}),
    )
    .await;
    env.create_hardware(
        "inline",
        json!({"networkInterfaces": {"02:00:00:00:00:03": {"dhcp": {"ip": "127.0.0.3"}}},
               "ipxe": {"inline": "#!ipxe\necho inline script\nshell\n"}}),
    )
    .await;
    env.create_hardware(
        "url",
        json!({"networkInterfaces": {"02:00:00:00:00:04": {"dhcp": {"ip": "127.0.0.4"}}},
               "ipxe": {"url": "http://boot.example:8080/custom.ipxe"}}),
    )
    .await;
    env.create_hardware(
        "off",
        json!({"networkInterfaces": {"02:00:00:00:00:05": {"dhcp": {"ip": "127.0.0.5"}, "disableNetboot": true}},
               "osie": {"osieRef": {"name": "hook"}}}),
    )
    .await;
    env.create_hardware(
        "nodhcp",
        json!({"networkInterfaces": {"02:00:00:00:00:06": {"dhcp": {"ip": "127.0.0.6"}, "disableDhcp": true}},
               "osie": {"osieRef": {"name": "hook"}}}),
    )
    .await;
    env.create_hardware(
        "lost",
        json!({"networkInterfaces": {"02:00:00:00:00:07": {"dhcp": {"ip": "127.0.0.7"}}},
               "osie": {"osieRef": {"name": "missing"}}}),
    )
    .await;
    let hegel = env
        .hegel(|c| c.ipxe.extra_kernel_params = vec!["sshd=1".into()])
        .await;

    // The OSIE script, by MAC (from a pool address no Hardware has) and by source IP.
    let by_mac = hegel
        .get("127.0.0.20", "/ipxe/script/02:00:00:00:00:02/auto.ipxe")
        .await;
    assert_eq!(by_mac.status, 200, "{}", by_mac.text());
    let by_ip = hegel.get("127.0.0.2", "/ipxe/script/auto.ipxe").await;
    assert_eq!(by_ip.text(), by_mac.text());
    assert_eq!(
        hegel.get("127.0.0.2", "/auto.ipxe").await.text(),
        by_mac.text()
    );
    let script = by_mac.text();
    assert!(script.starts_with("#!ipxe\n"), "{script}");
    let kernel = script
        .lines()
        .find(|l| l.starts_with("kernel "))
        .expect("a kernel line");
    assert_eq!(
        kernel,
        "kernel http://127.0.0.1:8080/vmlinuz-${osie-arch} worker_id=02:00:00:00:00:02 hw_addr=02:00:00:00:00:02 \
grpc_authority=127.0.0.1:42113 tinkerbell_tls=true tinkerbell_insecure_tls=false syslog_host=127.0.0.1 \
vlan_id=7 console=tty0 console=ttyS1,115200 modules=loop,squashfs,sd-mod,usb-storage intel_iommu=on iommu=pt \
initrd=initrd sshd=1 tinkerbell_tls=false quiet \
&& goto download_initrd || iseq ${idx} ${retries} && goto kernel-error || inc idx && echo retry in ${retry_delay} seconds ; sleep ${retry_delay} ; goto retry_kernel"
    );
    assert!(script.contains(
        "\ninitrd --name initrd http://127.0.0.1:8080/initramfs-${osie-arch} && goto boot || "
    ));
    assert!(script.contains("\nboot || iseq ${idx} ${retries} && goto boot-error"));
    // Any MAC spelling.
    let upper = hegel
        .get("127.0.0.20", "/ipxe/script/02-00-00-00-00-02/auto.ipxe")
        .await;
    assert_eq!(upper.text(), script);

    // Inline: as is.
    let r = hegel.get("127.0.0.3", "/ipxe/script/auto.ipxe").await;
    assert_eq!(
        (r.status, r.text()),
        (200, "#!ipxe\necho inline script\nshell\n".into())
    );
    // URL: chained.
    let r = hegel
        .get("127.0.0.20", "/ipxe/script/02:00:00:00:00:04/auto.ipxe")
        .await;
    assert_eq!(r.status, 200);
    assert!(r.text().starts_with("#!ipxe\n"), "{}", r.text());
    assert!(
        r.text()
            .contains("\nchain --autofree http://boot.example:8080/custom.ipxe || "),
        "{}",
        r.text()
    );

    // No netboot: 404 with the reason, by MAC and by IP.
    let r = hegel
        .get("127.0.0.20", "/ipxe/script/02:00:00:00:00:05/auto.ipxe")
        .await;
    assert_eq!(r.status, 404);
    assert_eq!(
        r.text(),
        "Hardware machines/off: interface 02:00:00:00:00:05 has disableNetboot: true; it gets no iPXE script\n"
    );
    let r = hegel.get("127.0.0.5", "/ipxe/script/auto.ipxe").await;
    assert_eq!(r.status, 404);
    let r = hegel.get("127.0.0.6", "/ipxe/script/auto.ipxe").await;
    assert_eq!(r.status, 404);
    assert!(r.text().contains("disableDhcp: true"), "{}", r.text());
    // A missing OSIE, an unknown MAC, a malformed MAC.
    let r = hegel.get("127.0.0.7", "/ipxe/script/auto.ipxe").await;
    assert_eq!(
        (r.status, r.text()),
        (
            404,
            "Hardware machines/lost: spec.osie.osieRef names OSIE machines/missing, which does not exist\n"
                .into()
        )
    );
    let r = hegel
        .get("127.0.0.20", "/ipxe/script/02:00:00:00:00:99/auto.ipxe")
        .await;
    assert_eq!(r.status, 404);
    assert_eq!(
        r.text(),
        "no Hardware has the MAC 02:00:00:00:00:99 (spec.networkInterfaces)\n"
    );
    let r = hegel
        .get("127.0.0.20", "/ipxe/script/not-a-mac/auto.ipxe")
        .await;
    assert_eq!(r.status, 400);
    // Another machine's address cannot read this machine's script by MAC.
    let r = hegel
        .get("127.0.0.3", "/ipxe/script/02:00:00:00:00:02/auto.ipxe")
        .await;
    assert_eq!(r.status, 403);
    assert!(
        r.text().contains("belongs to another Hardware"),
        "{}",
        r.text()
    );

    assert_eq!(hegel.metrics.requests_of("ipxe", 200), 6);
    assert!(hegel.metrics.requests_of("ipxe", 404) >= 5);
    hegel.stop().await;
    env.stop().await;
}

/// A machine whose Hardware names an agent secret: its script carries `tink_agent_secret=` from
/// the controller's copy in the system namespace (played here by the test), only to the
/// machine's own address and never cached. Hegel never reads the Secret in the Hardware's
/// namespace: not a valid typed one before it is copied, not an ordinary one (`db-credentials`)
/// ever. A rotated copy is served at once, a removed one serves no script.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_secret_reaches_only_its_machine() {
    use k8s_openapi::api::core::v1::Secret;
    use kube::api::{Api, DeleteParams, PostParams};
    use tink_api::agent_secret::{AGENT_SECRET_TYPE, copy_for};

    let env = Env::new().await;
    env.create_osie(
        "hook",
        "http://127.0.0.1:8080/vmlinuz-x86_64",
        "http://127.0.0.1:8080/initramfs-x86_64",
    )
    .await;
    let secrets: Api<Secret> = Api::namespaced(env.client.clone(), common::NS);
    let copies: Api<Secret> = Api::namespaced(env.client.clone(), common::SYSTEM_NS);
    for (name, type_, value) in [
        ("m12-agent", AGENT_SECRET_TYPE, "only-for-m12\n"),
        ("db-credentials", "Opaque", "hunter2"),
    ] {
        let secret: Secret = serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": common::NS},
            "type": type_,
            "stringData": {"secret": value},
        }))
        .expect("secret");
        secrets
            .create(&PostParams::default(), &secret)
            .await
            .expect("create secret");
    }
    for (name, ip, source) in [
        ("strict", "127.0.0.12", "m12-agent"),
        ("nosecret", "127.0.0.13", "does-not-exist"),
        ("db", "127.0.0.14", "db-credentials"),
    ] {
        let mac = format!("02:00:00:00:00:{}", &ip[ip.len() - 2..]);
        env.create_hardware(
            name,
            json!({"networkInterfaces": {mac: {"dhcp": {"ip": ip}}},
                   "osie": {"osieRef": {"name": "hook"}}}),
        )
        .await;
        env.patch_hardware(
            name,
            json!({"metadata": {"annotations": {"tinkerbell.org/agent-secret": source}}}),
        )
        .await;
    }
    let hegel = env.hegel(|_| {}).await;
    let script = |ip: &'static str| {
        let hegel = &hegel;
        async move { hegel.get(ip, "/ipxe/script/auto.ipxe").await }
    };
    let indexed = |ip: &'static str| {
        common::eventually(
            "the annotated Hardware to be indexed",
            std::time::Duration::from_secs(10),
            move || async move {
                let r = script(ip).await;
                (r.status != 404).then_some(r)
            },
        )
    };

    // The Secret in the machine's namespace is valid, but not copied yet: Hegel does not read
    // it, so no script (the machine would boot an agent the servers refuse).
    let uncopied = indexed("127.0.0.12").await;
    assert_eq!(uncopied.status, 503, "{}", uncopied.text());
    assert!(
        uncopied
            .text()
            .contains("Secret machines/m12-agent has no copy in tink-system"),
        "{}",
        uncopied.text()
    );
    assert!(!uncopied.text().contains("only-for-m12"));
    // An ordinary Secret named by a Hardware editor: never in a script.
    let db = indexed("127.0.0.14").await;
    assert_eq!(db.status, 503, "{}", db.text());
    assert!(!db.text().contains("hunter2"), "{}", db.text());
    assert!(
        db.text().contains("of type tinkerbell.org/agent-secret"),
        "{}",
        db.text()
    );

    // The controller's copy appears: the machine itself, by its address, gets it as a kernel
    // parameter, never cached.
    copies
        .create(
            &PostParams::default(),
            &copy_for(
                common::SYSTEM_NS,
                common::NS,
                "strict",
                "m12-agent",
                "only-for-m12",
            ),
        )
        .await
        .expect("create copy");
    let own = common::eventually(
        "the copy to be served",
        std::time::Duration::from_secs(10),
        || async {
            let r = script("127.0.0.12").await;
            (r.status == 200).then_some(r)
        },
    )
    .await;
    let kernel = own
        .text()
        .lines()
        .find(|l| l.starts_with("kernel "))
        .expect("kernel line")
        .to_string();
    assert!(
        kernel.contains(" tink_agent_secret=only-for-m12 "),
        "{kernel}"
    );
    assert_eq!(own.header("cache-control"), Some("no-store"));
    // By MAC from the machine's own address: the same.
    let by_mac = hegel
        .get("127.0.0.12", "/ipxe/script/02:00:00:00:00:12/auto.ipxe")
        .await;
    assert_eq!(by_mac.status, 200);
    assert!(by_mac.text().contains("tink_agent_secret=only-for-m12"));
    // By MAC from any other address: refused, the secret never shown.
    let stranger = hegel
        .get("127.0.0.30", "/ipxe/script/02:00:00:00:00:12/auto.ipxe")
        .await;
    assert_eq!(stranger.status, 403, "{}", stranger.text());
    assert!(!stranger.text().contains("only-for-m12"));
    // A missing Secret: no script.
    let missing = script("127.0.0.13").await;
    assert_eq!(missing.status, 503, "{}", missing.text());
    assert!(
        missing
            .text()
            .contains("Secret machines/does-not-exist has no copy"),
        "{}",
        missing.text()
    );
    // A copy of another machine's secret under this machine's name is not used.
    let mut misplaced = copy_for(common::SYSTEM_NS, common::NS, "strict", "x", "stolen");
    misplaced.metadata.name = Some(tink_api::agent_secret::copy_name(common::NS, "nosecret"));
    copies
        .create(&PostParams::default(), &misplaced)
        .await
        .expect("create misplaced copy");

    // Rotated: the new value, from the watch (no request reads the API server).
    copies
        .replace(
            &tink_api::agent_secret::copy_name(common::NS, "strict"),
            &PostParams::default(),
            &{
                let mut c = copies
                    .get(&tink_api::agent_secret::copy_name(common::NS, "strict"))
                    .await
                    .expect("get copy");
                c.data = copy_for(
                    common::SYSTEM_NS,
                    common::NS,
                    "strict",
                    "m12-agent",
                    "rotated",
                )
                .data;
                c
            },
        )
        .await
        .expect("rotate");
    common::eventually(
        "the rotated value",
        std::time::Duration::from_secs(10),
        || async {
            script("127.0.0.12")
                .await
                .text()
                .contains(" tink_agent_secret=rotated ")
                .then_some(())
        },
    )
    .await;
    let other = script("127.0.0.13").await;
    assert_eq!(other.status, 503, "{}", other.text());
    assert!(
        other.text().contains("another Hardware") && !other.text().contains("stolen"),
        "{}",
        other.text()
    );

    // Removed (the source became invalid, or the Hardware lost its annotation): no script.
    copies
        .delete(
            &tink_api::agent_secret::copy_name(common::NS, "strict"),
            &DeleteParams::default(),
        )
        .await
        .expect("delete copy");
    let gone = common::eventually(
        "the removed copy to stop being served",
        std::time::Duration::from_secs(10),
        || async {
            let r = script("127.0.0.12").await;
            (r.status == 503).then_some(r)
        },
    )
    .await;
    assert!(!gone.text().contains("rotated"), "{}", gone.text());
    hegel.stop().await;
    env.stop().await;
}
