//! The packet logic on the index the watch feeds (kube-lite as the API server): crafted
//! DISCOVERs for each kind of client, and answers that follow Hardware changes.

#[path = "../../hegel/tests/common/mod.rs"]
mod common;

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use common::{Env, eventually, within};
use dhcproto::v4::{Architecture, DhcpOption, Message, MessageType, OptionCode};
use serde_json::json;
use tink_netboot::dhcp::{self, BootFiles, DhcpConfig, DhcpMode, Ignored, Reply, Responder};
use tink_netboot::index::Index;
use tokio_util::sync::CancellationToken;

const SERVER: Ipv4Addr = Ipv4Addr::new(10, 99, 0, 1);
const SCRIPT: &str = "http://10.99.0.1:50061/ipxe/script/auto.ipxe";
const MAC: [u8; 6] = [0x02, 0, 0, 0, 0x10, 0x01];

fn responder(mode: DhcpMode) -> Responder {
    Responder::new(DhcpConfig {
        mode,
        server_ip: SERVER,
        ipxe_script_url: SCRIPT.into(),
        http_base_url: None,
        boot_files: BootFiles::default(),
        default_lease_seconds: 3600,
        discovery: false,
    })
}

fn discover(opts: Vec<DhcpOption>) -> Vec<u8> {
    dhcp::client_request(MessageType::Discover, MAC, 42, opts)
}

fn pxe(arch: u16) -> Vec<DhcpOption> {
    vec![
        DhcpOption::ClassIdentifier(format!("PXEClient:Arch:{arch:05}:UNDI:002001").into()),
        DhcpOption::ClientSystemArchitecture(Architecture::from(arch)),
    ]
}

fn ask(r: &Responder, index: &Index, bytes: &[u8]) -> Result<(Reply, Message), Ignored> {
    let from: SocketAddr = "0.0.0.0:68".parse().expect("addr");
    let reply = r.handle(bytes, from, 67, |m| index.by_mac(m))?;
    let msg = dhcp::decode(&reply.bytes).expect("reply decodes");
    Ok((reply, msg))
}

fn boot_file(msg: &Message) -> Option<String> {
    match msg.opts().get(OptionCode::BootfileName) {
        Some(DhcpOption::BootfileName(b)) => Some(String::from_utf8_lossy(b).into_owned()),
        _ => None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_come_from_the_watched_hardware() {
    let env = Env::new().await;
    env.create_hardware(
        "m1",
        json!({"networkInterfaces": {"02:00:00:00:10:01": {"dhcp": {
            "ip": "10.99.0.21", "netmask": "255.255.255.0", "gateway": "10.99.0.254"}}}}),
    )
    .await;
    let (osies, writer) = kube::runtime::reflector::store();
    let index = Arc::new(Index::new(osies));
    let health = tink_runtime::Health::new();
    let stop = CancellationToken::new();
    let feed = tokio::spawn(tink_netboot::index::feed(
        env.client.clone(),
        None,
        index.clone(),
        writer,
        tink_netboot::IndexMetrics::default(),
        health.clone(),
        stop.clone(),
    ));
    within("the index to sync", async {
        while !health.is_ready() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    let r = responder(DhcpMode::Reservation);

    // iPXE: the script URL, with the lease.
    let (_, msg) = ask(
        &r,
        &index,
        &discover([pxe(7), vec![DhcpOption::UserClass(b"iPXE".to_vec())]].concat()),
    )
    .expect("offer");
    assert_eq!(msg.yiaddr(), Ipv4Addr::new(10, 99, 0, 21));
    assert_eq!(boot_file(&msg).as_deref(), Some(SCRIPT));
    // BIOS and EFI firmware: the binary of their architecture, from this server.
    for (arch, want) in [(0, "undionly.kpxe"), (7, "ipxe.efi"), (9, "ipxe.efi")] {
        let (_, msg) = ask(&r, &index, &discover(pxe(arch))).expect("offer");
        assert_eq!(boot_file(&msg).as_deref(), Some(want), "arch {arch}");
        assert_eq!(msg.siaddr(), SERVER);
    }
    // Proxy mode: boot information and no address.
    let (reply, msg) = ask(&responder(DhcpMode::Proxy), &index, &discover(pxe(0))).expect("offer");
    assert_eq!(reply.yiaddr, Ipv4Addr::UNSPECIFIED);
    assert_eq!(msg.yiaddr(), Ipv4Addr::UNSPECIFIED);
    assert_eq!(boot_file(&msg).as_deref(), Some("undionly.kpxe"));

    // disableNetboot: the lease without boot information, as soon as the watch sees it.
    env.patch_hardware(
        "m1",
        json!({"spec": {"networkInterfaces": {"02:00:00:00:10:01": {"disableNetboot": true}}}}),
    )
    .await;
    let msg = eventually("disableNetboot to apply", Duration::from_secs(10), || {
        let got = ask(&r, &index, &discover(pxe(7))).ok();
        async move {
            got.filter(|(reply, _)| reply.boot_file.is_none())
                .map(|(_, m)| m)
        }
    })
    .await;
    assert_eq!(msg.yiaddr(), Ipv4Addr::new(10, 99, 0, 21));
    assert_eq!(boot_file(&msg), None);

    // A second Hardware claiming the MAC: nobody gets an answer.
    env.create_hardware(
        "m2",
        json!({"networkInterfaces": {"02:00:00:00:10:01": {"dhcp": {"ip": "10.99.0.22"}}}}),
    )
    .await;
    eventually("the conflict to apply", Duration::from_secs(10), || {
        let got = ask(&r, &index, &discover(vec![])).err();
        async move { (got == Some(Ignored::ConflictingMac)).then_some(()) }
    })
    .await;
    // disableDhcp on one and removal of the other: the MAC is unknown or refused.
    env.hardware_api()
        .delete("m2", &Default::default())
        .await
        .expect("delete");
    env.patch_hardware(
        "m1",
        json!({"spec": {"networkInterfaces": {"02:00:00:00:10:01": {"disableDhcp": true}}}}),
    )
    .await;
    eventually("disableDhcp to apply", Duration::from_secs(10), || {
        let got = ask(&r, &index, &discover(vec![])).err();
        async move { (got == Some(Ignored::DhcpDisabled)).then_some(()) }
    })
    .await;

    stop.cancel();
    within("the feed to stop", feed)
        .await
        .expect("no panic")
        .expect("clean stop");
    env.stop().await;
}
