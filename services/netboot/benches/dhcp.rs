//! DISCOVER -> OFFER with 10,000 Hardware in the index.
//!
//! ```text
//! cargo bench -p tink-netboot --bench dhcp [-- PACKETS [IN_FLIGHT]]
//! ```
//!
//! 1. The packet path in process: decode, MAC lookup, build and encode the OFFER, one packet
//!    at a time on one thread; each packet timed.
//! 2. The same over UDP on loopback: the service's own DHCP loop ([`server::serve_dhcp`]) on
//!    127.0.0.1, a client keeping IN_FLIGHT DISCOVERs outstanding (relayed, `giaddr`
//!    127.0.0.3, so the OFFER comes back by unicast to 127.0.0.3:67, where the client
//!    listens; needs root for port 67, skipped otherwise). Latency is send to OFFER received.
//!
//! Prints packets/s and p50/p99/max latency for each.

use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dhcproto::v4::{Architecture, DhcpOption, MessageType};
use serde_json::json;
use tink_api::v1alpha2::Hardware;
use tink_netboot::dhcp::{self, BootFiles, DhcpConfig, DhcpMode, Responder};
use tink_netboot::index::Index;
use tink_netboot::machine::Machine;
use tink_netboot::server;
use tokio_util::sync::CancellationToken;

const HARDWARE: u32 = 10_000;

fn mac(i: u32) -> [u8; 6] {
    let b = i.to_be_bytes();
    [0x02, 0x10, b[0], b[1], b[2], b[3]]
}

fn index() -> Arc<Index> {
    let machines: Vec<Machine> = (0..HARDWARE)
        .map(|i| {
            let m = dhcp::mac_string(&mac(i));
            let hw: Hardware = serde_json::from_value(json!({
                "apiVersion": "tinkerbell.org/v1alpha2", "kind": "Hardware",
                "metadata": {"name": format!("m{i}"), "namespace": "bench"},
                "spec": {"networkInterfaces": {m: {"dhcp": {
                    "ip": Ipv4Addr::from(0x0a00_0000 + i + 10).to_string(),
                    "netmask": "255.0.0.0", "gateway": "10.0.0.1",
                    "hostname": format!("m{i}"), "nameservers": ["10.0.0.53"],
                    "leaseTime": 3600}}}},
            }))
            .expect("hardware");
            Machine::from_hardware(&hw)
        })
        .collect();
    let (osies, _writer) = kube::runtime::reflector::store();
    let index = Index::new(osies);
    index.replace(machines);
    index.mark_synced();
    Arc::new(index)
}

fn responder() -> Responder {
    Responder::new(DhcpConfig {
        mode: DhcpMode::Reservation,
        server_ip: Ipv4Addr::new(10, 0, 0, 1),
        ipxe_script_url: "http://10.0.0.1:50061/ipxe/script/auto.ipxe".into(),
        http_base_url: None,
        boot_files: BootFiles::default(),
        default_lease_seconds: 86_400,
        discovery: false,
    })
}

fn discover(i: u32, xid: u32, giaddr: Option<Ipv4Addr>) -> Vec<u8> {
    let opts = vec![
        DhcpOption::ClassIdentifier(b"PXEClient:Arch:00007:UNDI:003016".to_vec()),
        DhcpOption::ClientSystemArchitecture(Architecture::X86_64),
        DhcpOption::ParameterRequestList(vec![
            dhcproto::v4::OptionCode::SubnetMask,
            dhcproto::v4::OptionCode::Router,
            dhcproto::v4::OptionCode::DomainNameServer,
            dhcproto::v4::OptionCode::BootfileName,
        ]),
    ];
    let mut bytes = dhcp::client_request(MessageType::Discover, mac(i % HARDWARE), xid, opts);
    if let Some(g) = giaddr {
        bytes[24..28].copy_from_slice(&g.octets());
    }
    bytes
}

fn report(what: &str, n: usize, elapsed: Duration, mut lat: Vec<Duration>) {
    lat.sort_unstable();
    let pct = |p: f64| lat[((lat.len() as f64 * p) as usize).min(lat.len() - 1)];
    println!(
        "{what}: {n} DISCOVERs in {:.2} s = {:.0} packets/s; latency p50 {:.1} us, p99 {:.1} us, max {:.1} us",
        elapsed.as_secs_f64(),
        n as f64 / elapsed.as_secs_f64(),
        pct(0.50).as_secs_f64() * 1e6,
        pct(0.99).as_secs_f64() * 1e6,
        lat.last().copied().unwrap_or_default().as_secs_f64() * 1e6,
    );
}

fn in_process(index: &Index, n: usize) {
    let r = responder();
    let from: SocketAddr = "0.0.0.0:68".parse().expect("addr");
    let packets: Vec<Vec<u8>> = (0..n as u32).map(|i| discover(i * 7919, i, None)).collect();
    let mut lat = Vec::with_capacity(n);
    let start = Instant::now();
    for p in &packets {
        let t = Instant::now();
        let reply = r.handle(p, from, 67, |m| index.by_mac(m)).expect("offer");
        std::hint::black_box(&reply);
        lat.push(t.elapsed());
    }
    report(
        "in process (decode, lookup, encode)",
        n,
        start.elapsed(),
        lat,
    );
}

async fn over_udp(index: Arc<Index>, n: usize, in_flight: usize) {
    let client_addr: SocketAddr = "127.0.0.3:67".parse().expect("addr");
    let client = match server::udp_socket(client_addr, None, false) {
        Ok(s) => s,
        Err(e) => {
            println!("over UDP: skipped, cannot bind {client_addr} (needs root): {e:?}");
            return;
        }
    };
    let srv = server::udp_socket("127.0.0.1:0".parse().expect("addr"), None, true)
        .map_err(|e| format!("{e:?}"))
        .expect("server socket");
    let srv_addr = srv.local_addr().expect("addr");
    let stop = CancellationToken::new();
    let task = tokio::spawn(server::serve_dhcp(
        srv,
        Arc::new(responder()),
        index,
        tink_netboot::Metrics::default(),
        stop.clone(),
    ));
    let giaddr = Some(Ipv4Addr::new(127, 0, 0, 3));
    let mut sent: HashMap<u32, Instant> = HashMap::with_capacity(in_flight * 2);
    let mut lat = Vec::with_capacity(n);
    let mut buf = vec![0u8; 2048];
    let mut next = 0u32;
    let start = Instant::now();
    while lat.len() < n {
        while sent.len() < in_flight && (next as usize) < n {
            let p = discover(next * 7919, next, giaddr);
            client.send_to(&p, srv_addr).await.expect("send");
            sent.insert(next, Instant::now());
            next += 1;
        }
        match tokio::time::timeout(Duration::from_secs(2), client.recv_from(&mut buf)).await {
            Ok(Ok((len, _))) => {
                let xid = buf
                    .get(4..8)
                    .filter(|_| len >= 8)
                    .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]));
                if let Some(t) = xid.and_then(|x| sent.remove(&x)) {
                    lat.push(t.elapsed());
                }
            }
            Ok(Err(e)) => panic!("recv: {e}"),
            Err(_) => {
                println!(
                    "over UDP: {} replies missing after 2 s; stopping",
                    sent.len()
                );
                break;
            }
        }
    }
    let elapsed = start.elapsed();
    stop.cancel();
    let _ = task.await;
    let done = lat.len();
    report(
        &format!("over UDP loopback ({in_flight} in flight)"),
        done,
        elapsed,
        lat,
    );
}

fn main() {
    let mut args = std::env::args().skip(1).filter(|a| !a.starts_with("--"));
    let n: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(200_000);
    let in_flight: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(16);
    let t = Instant::now();
    let index = index();
    println!(
        "{} Hardware indexed in {:.2} s",
        index.len(),
        t.elapsed().as_secs_f64()
    );
    in_process(&index, n);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(over_udp(index, n.min(100_000), in_flight));
}
