//! The IPMI provider (ipmitool lanplus) against a real OpenIPMI `ipmi_sim`.

use std::time::{Duration, Instant};

use tink_api::bmc::{BootDevice, PowerState};
use tink_bmc::ipmi::{IpmiConfig, Ipmitool};
use tink_bmc::{Bmc, Credentials, ErrorKind, Limits, Policy, PowerChange};
use tink_testkit::bmc::{BMC_PASSWORD, BMC_USER, IpmiSim};

fn client(host: &str, port: u16, password: &str) -> Ipmitool {
    Ipmitool::new(
        IpmiConfig {
            host: host.into(),
            port: Some(i32::from(port)),
            credentials: Credentials::new(BMC_USER, password),
            cipher_suite: String::new(),
            ipmitool: None,
        },
        Policy {
            timeout: Duration::from_secs(4),
            attempts: 2,
            backoff: Duration::from_millis(100),
            max_backoff: Duration::from_millis(200),
            ..Policy::default()
        },
        Limits::default(),
    )
    .expect("client")
}

async fn wait_for(bmc: &dyn Bmc, want: PowerState) {
    let start = Instant::now();
    loop {
        let got = bmc.power_state().await.expect("power state");
        if got == want {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(15),
            "still {got}, wanted {want}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test]
async fn power_round_trips() {
    let sim = IpmiSim::start().await.expect("ipmi_sim");
    let bmc = client(sim.host(), sim.port(), BMC_PASSWORD);
    assert_eq!(bmc.power_state().await.expect("status"), PowerState::Off);
    bmc.set_power(PowerChange::On).await.expect("on");
    wait_for(&bmc, PowerState::On).await;
    assert_eq!(sim.chassis("power").as_deref(), Some("1"));
    // on again: read first, nothing sent
    let before = sim.requests().len();
    bmc.set_power(PowerChange::On).await.expect("on again");
    assert_eq!(sim.requests().len(), before, "{:?}", sim.requests());
    // a cycle: the simulator powers off, then on a second later
    bmc.set_power(PowerChange::Cycle).await.expect("cycle");
    wait_for(&bmc, PowerState::On).await;
    let after_cycle = sim.requests()[before..].to_vec();
    assert_eq!(after_cycle, ["power=0", "power=1"], "{after_cycle:?}");
    bmc.set_power(PowerChange::Reset).await.expect("reset");
    assert!(
        sim.requests().iter().any(|r| r == "reset=1"),
        "{:?}",
        sim.requests()
    );
    bmc.set_power(PowerChange::Soft).await.expect("soft");
    wait_for(&bmc, PowerState::Off).await;
    bmc.set_power(PowerChange::On).await.expect("on");
    wait_for(&bmc, PowerState::On).await;
    bmc.set_power(PowerChange::Off).await.expect("off");
    wait_for(&bmc, PowerState::Off).await;
}

#[tokio::test]
async fn pxe_once_is_set_and_read_back() {
    let sim = IpmiSim::start().await.expect("ipmi_sim");
    let bmc = client(sim.host(), sim.port(), BMC_PASSWORD);
    bmc.set_boot_once(BootDevice::Pxe, true).await.expect("pxe");
    assert_eq!(sim.chassis("boot").as_deref(), Some("pxe"));
    bmc.set_boot_once(BootDevice::Cdrom, false)
        .await
        .expect("cdrom");
    assert_eq!(sim.chassis("boot").as_deref(), Some("cdrom"));
    let e = bmc
        .insert_media("http://x/a.iso")
        .await
        .expect_err("no virtual media");
    assert!(matches!(e.kind, ErrorKind::Unsupported(_)), "{e}");
}

#[tokio::test]
async fn wrong_credentials_and_an_unreachable_bmc_are_clear_errors() {
    let sim = IpmiSim::start().await.expect("ipmi_sim");
    let wrong = "not-the-password";
    let e = client(sim.host(), sim.port(), wrong)
        .power_state()
        .await
        .expect_err("wrong password");
    assert!(matches!(e.kind, ErrorKind::Unauthorized(_)), "{e}");
    let text = format!("{e} {e:?}");
    assert!(!text.contains(wrong), "the password leaked: {text}");
    // a UDP port nobody answers on
    let silent = std::net::UdpSocket::bind("127.0.0.1:0").expect("udp");
    let port = silent.local_addr().expect("addr").port();
    let start = Instant::now();
    let e = client("127.0.0.1", port, BMC_PASSWORD)
        .power_state()
        .await
        .expect_err("no answer");
    assert!(
        matches!(e.kind, ErrorKind::Connect(_) | ErrorKind::Timeout(_)),
        "{e}"
    );
    assert!(e.to_string().contains("127.0.0.1"), "{e}");
    // two attempts of at most 4 s each, plus back-off: never hung
    assert!(
        start.elapsed() < Duration::from_secs(12),
        "{:?}",
        start.elapsed()
    );
}
