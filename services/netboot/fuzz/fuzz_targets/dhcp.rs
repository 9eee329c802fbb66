//! Any bytes, in either mode, on either port, with a known, unknown or conflicting MAC: the
//! responder returns a reply or a reason, never a panic.
#![no_main]

use std::sync::{Arc, OnceLock};

use libfuzzer_sys::fuzz_target;
use tink_netboot::dhcp::{BootFiles, DhcpConfig, DhcpMode, Responder};
use tink_netboot::index::Lookup;
use tink_netboot::machine::Machine;

fn machine() -> &'static Arc<Machine> {
    static M: OnceLock<Arc<Machine>> = OnceLock::new();
    M.get_or_init(|| {
        let hw: tink_api::v1alpha2::Hardware = serde_json::from_value(serde_json::json!({
            "apiVersion": "tinkerbell.org/v1alpha2", "kind": "Hardware",
            "metadata": {"name": "m", "namespace": "ns"},
            "spec": {"networkInterfaces": {"02:00:00:00:00:01": {"dhcp": {
                "ip": "10.0.0.2", "netmask": "255.255.255.0", "gateway": "10.0.0.1",
                "hostname": "m", "nameservers": ["10.0.0.53"]}}}},
        }))
        .expect("hardware");
        Arc::new(Machine::from_hardware(&hw))
    })
}

fuzz_target!(|data: &[u8]| {
    let Some((&selector, packet)) = data.split_first() else {
        return;
    };
    let mode = if selector & 1 == 0 {
        DhcpMode::Reservation
    } else {
        DhcpMode::Proxy
    };
    let port = if selector & 2 == 0 { 67 } else { 4011 };
    let r = Responder::new(DhcpConfig {
        mode,
        server_ip: "10.0.0.1".parse().expect("ip"),
        ipxe_script_url: "http://10.0.0.1:50061/ipxe/script/auto.ipxe".into(),
        http_base_url: Some("http://10.0.0.1:8080".into()),
        boot_files: BootFiles::default(),
        default_lease_seconds: 3600,
        discovery: false,
    });
    let from = "0.0.0.0:68".parse().expect("addr");
    let _ = r.handle(packet, from, port, |_| match selector >> 2 & 3 {
        0 => Lookup::Found(machine().clone(), 0),
        1 => Lookup::Unknown,
        _ => Lookup::Conflict(vec!["a/b".into(), "c/d".into()]),
    });
});
