//! The `tink-netboot` binary answering a real DHCP client: busybox `udhcpc` in a network
//! namespace, on one end of a veth pair whose other end the service is bound to with
//! `--interface`. The Hardware's MAC gets exactly its reservation; an unknown MAC gets nothing.
//!
//! Needs root (network namespaces, port 67). Where `ip netns add` is not permitted the test
//! says so and passes, except under CI (`CI=true`), where it fails.

#[path = "../../hegel/tests/common/mod.rs"]
mod common;

use std::net::SocketAddr;
use std::process::{Command, Output};
use std::time::Duration;

use common::{Env, eventually, get_from, within};
use serde_json::json;

fn ip(args: &[&str]) -> Output {
    Command::new("ip").args(args).output().expect("ip runs")
}

fn ok(args: &[&str]) {
    let out = ip(args);
    assert!(
        out.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A namespace with the client end of a veth pair; removed on drop.
struct Netns {
    ns: String,
    host: String,
    client: String,
}

impl Netns {
    /// `None` when namespaces cannot be made here.
    fn new(tag: &str, host_cidr: &str) -> Option<Self> {
        let id = std::process::id() % 100_000;
        let n = Netns {
            ns: format!("nbt-{tag}-{id}"),
            host: format!("nbh{tag}{id}"),
            client: format!("nbc{tag}{id}"),
        };
        let out = ip(&["netns", "add", &n.ns]);
        if !out.status.success() {
            let why = String::from_utf8_lossy(&out.stderr).into_owned();
            if std::env::var("CI").as_deref() == Ok("true") {
                panic!("`ip netns add` failed under CI: {why}");
            }
            eprintln!("SKIPPED: `ip netns add` is not permitted here ({why}); run as root");
            return None;
        }
        ok(&[
            "link", "add", &n.host, "type", "veth", "peer", "name", &n.client,
        ]);
        ok(&["link", "set", &n.client, "netns", &n.ns]);
        ok(&["addr", "add", host_cidr, "dev", &n.host]);
        ok(&["link", "set", &n.host, "up"]);
        ok(&["-n", &n.ns, "link", "set", "lo", "up"]);
        Some(n)
    }

    fn set_mac(&self, mac: &str) {
        ok(&["-n", &self.ns, "link", "set", &self.client, "down"]);
        ok(&["-n", &self.ns, "link", "set", &self.client, "address", mac]);
        ok(&["-n", &self.ns, "link", "set", &self.client, "up"]);
    }

    /// Runs udhcpc once (3 tries, 1 s apart) with `extra` arguments; its output and status.
    fn udhcpc(&self, script: &str, extra: &[&str]) -> Output {
        Command::new("ip")
            .args([
                "netns",
                "exec",
                &self.ns,
                "busybox",
                "udhcpc",
                "-i",
                &self.client,
            ])
            .args([
                "-n", "-q", "-f", "-t", "3", "-T", "1", "-A", "1", "-s", script,
            ])
            .args(extra)
            .output()
            .expect("busybox udhcpc runs")
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        // Deleting the namespace deletes the client end, and with it the pair.
        let _ = ip(&["netns", "del", &self.ns]);
        let _ = ip(&["link", "del", &self.host]);
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn udhcpc_gets_the_reservation_and_unknown_macs_get_nothing() {
    // A /24 unlikely to be routed on the host, varied by pid so parallel runs do not clash.
    let net = format!("10.213.{}", std::process::id() % 200 + 20);
    let Some(ns) = Netns::new("d", &format!("{net}.1/24")) else {
        return;
    };
    let env = Env::new().await;
    env.create_hardware(
        "machine-one",
        json!({"networkInterfaces": {"02:00:5e:10:00:01": {"dhcp": {
            "ip": format!("{net}.50"), "netmask": "255.255.255.0", "gateway": format!("{net}.1"),
            "hostname": "machine-one", "nameservers": [format!("{net}.53"), format!("{net}.54")],
            "timeservers": [format!("{net}.123")], "leaseTime": 600}}}}),
    )
    .await;
    let script = env.dir.path().join("udhcpc.sh");
    std::fs::write(
        &script,
        "#!/bin/sh\n[ \"$1\" = bound ] && echo \"bound ip=$ip subnet=$subnet router=$router \
         dns=$dns hostname=$hostname lease=$lease serverid=$serverid ntpsrv=$ntpsrv \
         boot_file=$boot_file siaddr=$siaddr\"\nexit 0\n",
    )
    .expect("script");
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .expect("chmod");
    let script = script.to_str().expect("utf8").to_owned();

    let admin: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().expect("addr");
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_tink-netboot"))
        .args([
            "--interface",
            &ns.host,
            "--dhcp-listen",
            "0.0.0.0:67",
            "--server-ip",
            &format!("{net}.1"),
            "--ipxe-script-url",
            &format!("http://{net}.1:50061/ipxe/script/auto.ipxe"),
            "--tftp",
            "false",
            "--http",
            "false",
            "--admin-addr",
            &admin.to_string(),
        ])
        .env("KUBECONFIG", env.kubeconfig())
        .env("TINK_REPLICA_ID", "netboot-test")
        .env("RUST_LOG", "tink_netboot=debug,info")
        .kill_on_drop(true)
        .spawn()
        .expect("start tink-netboot");
    eventually("/readyz", Duration::from_secs(20), || async {
        match tokio::net::TcpStream::connect(admin).await {
            Ok(_) => {
                (get_from(admin, "127.0.0.1", "/readyz", &[]).await.status == 200).then_some(())
            }
            Err(_) => None,
        }
    })
    .await;

    // The Hardware's MAC: exactly its reservation.
    ns.set_mac("02:00:5e:10:00:01");
    let out = {
        let (ns, script) = (&ns, script.clone());
        tokio::task::block_in_place(|| ns.udhcpc(&script, &[]))
    };
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "udhcpc failed: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let bound = stdout
        .lines()
        .find(|l| l.starts_with("bound "))
        .unwrap_or_else(|| panic!("no lease: {stdout}"));
    for want in [
        format!("ip={net}.50 "),
        "subnet=255.255.255.0 ".into(),
        format!("router={net}.1 "),
        format!("dns={net}.53 {net}.54 "),
        "hostname=machine-one ".into(),
        "lease=600 ".into(),
        format!("serverid={net}.1 "),
        format!("ntpsrv={net}.123 "),
        // Not a PXE client: no boot information.
        "boot_file= ".into(),
    ] {
        assert!(bound.contains(&want), "{want:?} not in {bound:?}");
    }

    // The same machine as PXE firmware (vendor class and architecture 7): the EFI binary.
    let out = {
        let (ns, script) = (&ns, script.clone());
        tokio::task::block_in_place(|| {
            ns.udhcpc(
                &script,
                &["-V", "PXEClient:Arch:00007:UNDI:003016", "-x", "0x5d:0007"],
            )
        })
    };
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "udhcpc as PXE failed: {stdout}");
    assert!(
        stdout.contains("boot_file=ipxe.efi ") && stdout.contains(&format!("siaddr={net}.1")),
        "{stdout}"
    );

    // An unknown MAC: nothing at all (udhcpc -n gives up and fails).
    ns.set_mac("02:00:5e:10:00:99");
    let out = {
        let (ns, script) = (&ns, script.clone());
        tokio::task::block_in_place(|| ns.udhcpc(&script, &[]))
    };
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        !out.status.success(),
        "an unknown MAC got a lease: {stdout}"
    );
    assert!(!stdout.contains("bound "), "{stdout}");

    let metrics = get_from(admin, "127.0.0.1", "/metrics", &[]).await.text();
    for want in [
        "netboot_dhcp_replies_total{type=\"offer\"} 2",
        "netboot_dhcp_replies_total{type=\"ack\"} 2",
        "netboot_dhcp_packets_ignored_total{reason=\"unknown_mac\"} 3",
        "netboot_hegel_indexed_hardware 1",
    ] {
        assert!(metrics.contains(want), "{want} not in\n{metrics}");
    }

    let pid = child.id().expect("pid").to_string();
    let killed = Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .expect("kill");
    assert!(killed.success());
    let status = within("tink-netboot to exit", child.wait())
        .await
        .expect("wait");
    assert!(status.success(), "exit status {status}");
    drop(ns);
    env.stop().await;
}
