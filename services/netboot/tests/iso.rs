//! The ISO route against the real service (in this process, on loopback) with kube-lite as the
//! API server: every range of `/iso/<mac>/hook.iso` is the same range of the source ISO with the
//! machine's kernel parameters written over the placeholder; HEAD, 416, the refusals (unknown,
//! netboot-disabled, agent secret, parameters too long), a replaced ISO, and no ISO configured.

#[path = "../../hegel/tests/common/mod.rs"]
mod common;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::{Env, Reply, get_from, within};
use serde_json::json;
use tink_netboot::NetbootConfig;
use tink_netboot::iso::{DEFAULT_MARKER, IsoConfig};
use tokio_util::sync::CancellationToken;

const PLACEHOLDER: usize = 1792;

struct Running {
    http: SocketAddr,
    metrics: tink_netboot::Metrics,
    shutdown: CancellationToken,
    task: tokio::task::JoinHandle<Result<(), tink_netboot::Error>>,
}

impl Running {
    async fn stop(self) {
        self.shutdown.cancel();
        let r = within("netboot to stop", self.task).await;
        assert!(matches!(r, Ok(Ok(()))), "{r:?}");
    }
}

fn config(dir: &Path, iso: Option<PathBuf>) -> NetbootConfig {
    let mut config = NetbootConfig::new(
        "127.0.0.1".parse().expect("ip"),
        "http://127.0.0.1:50061/ipxe/script/auto.ipxe".into(),
        dir.to_path_buf(),
    );
    config.dhcp = None;
    config.tftp = None;
    config.http = Some("127.0.0.1:0".parse().expect("addr"));
    config.iso = iso.map(|source| {
        let mut kernel = hegel::IpxeConfig::new("10.0.0.2:42113");
        kernel.tinkerbell_tls = false;
        kernel.syslog_host = Some("10.0.0.2".into());
        IsoConfig::new(source, kernel)
    });
    config
}

async fn start(env: &Env, config: NetbootConfig) -> Running {
    let bound = tink_netboot::bind(&config).await.expect("bind");
    let http = bound.http_addr().expect("http");
    let metrics = tink_netboot::Metrics::default();
    let health = tink_runtime::Health::new();
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(bound.run(
        config,
        env.client.clone(),
        health.clone(),
        metrics.clone(),
        tink_netboot::IndexMetrics::default(),
        shutdown.clone(),
    ));
    within("netboot to become ready", async {
        while !health.is_ready() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    Running {
        http,
        metrics,
        shutdown,
        task,
    }
}

/// An "ISO": bytes that are not all alike, with the marker and its spaces at `at` (across a
/// 64 KiB chunk boundary of the server's reads when `at` is just below one).
fn fake_iso(len: usize, at: usize) -> Vec<u8> {
    let mut d: Vec<u8> = (0..len)
        .map(|i| ((i.wrapping_mul(7919) >> 3) as u8 ^ (i >> 9) as u8) | 0x80)
        .collect();
    d[at..at + DEFAULT_MARKER.len()].copy_from_slice(DEFAULT_MARKER.as_bytes());
    for b in &mut d[at + DEFAULT_MARKER.len()..at + PLACEHOLDER] {
        *b = b' ';
    }
    d[at + PLACEHOLDER] = b'\n';
    d
}

fn patched(iso: &[u8], at: usize, params: &str) -> Vec<u8> {
    let mut d = iso.to_vec();
    let mut region = params.as_bytes().to_vec();
    region.resize(PLACEHOLDER, b' ');
    d[at..at + PLACEHOLDER].copy_from_slice(&region);
    d
}

async fn get(http: SocketAddr, path: &str, range: Option<&str>) -> Reply {
    let headers: Vec<(&str, &str)> = range.map(|r| ("Range", r)).into_iter().collect();
    get_from(http, "127.0.0.1", path, &headers).await
}

/// The machine's parameters, as Hegel's iPXE script gives them with the same flags
/// (services/hegel/src/ipxe.rs's test spells out the same order), quoted for GRUB.
const M1_PARAMS: &str = "worker_id=52:54:00:aa:00:01 hw_addr=52:54:00:aa:00:01 \
    grpc_authority=10.0.0.2:42113 tinkerbell_tls=false tinkerbell_insecure_tls=false \
    syslog_host=10.0.0.2 vlan_id=12 console=tty0 console=ttyS1,115200 \
    modules=loop,squashfs,sd-mod,usb-storage intel_iommu=on iommu=pt initrd=initrd \
    'tink_test=a;b$c' sshd=1";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_range_of_the_iso_carries_the_machines_kernel_parameters() {
    let env = Env::new().await;
    let dir = tempfile::tempdir().expect("tempdir");
    // The region starts 100 bytes before a 64 KiB boundary: it spans two of the server's reads.
    let at = 3 * 65_536 - 100;
    let len = 5 * 65_536 + 321;
    let iso = fake_iso(len, at);
    let source = dir.path().join("osie.iso");
    std::fs::write(&source, &iso).expect("write");

    env.create_hardware(
        "m1",
        json!({"networkInterfaces": {"52:54:00:aa:00:01": {"dhcp": {"ip": "10.0.0.21", "vlanId": "12"}}},
               "osie": {"kernelParams": ["tink_test=a;b$c", "sshd=1"]}}),
    )
    .await;
    env.create_hardware(
        "off",
        json!({"networkInterfaces": {"52:54:00:aa:00:02": {"disableNetboot": true}}}),
    )
    .await;
    env.create_hardware(
        "long",
        json!({"networkInterfaces": {"52:54:00:aa:00:03": {}},
               "osie": {"kernelParams": [format!("x={}", "y".repeat(PLACEHOLDER))]}}),
    )
    .await;
    env.create_hardware(
        "quote",
        json!({"networkInterfaces": {"52:54:00:aa:00:04": {}},
               "osie": {"kernelParams": ["x=\"y\""]}}),
    )
    .await;
    let secret: tink_api::v1alpha2::Hardware = serde_json::from_value(json!({
        "apiVersion": "tinkerbell.org/v1alpha2", "kind": "Hardware",
        "metadata": {"name": "secret", "namespace": common::NS,
                     "annotations": {"tinkerbell.org/agent-secret": "secret-agent"}},
        "spec": {"networkInterfaces": {"52:54:00:aa:00:05": {}}},
    }))
    .expect("hardware");
    env.hardware_api()
        .create(&Default::default(), &secret)
        .await
        .expect("create");

    let svc = start(&env, config(dir.path(), Some(source.clone()))).await;
    let want = patched(&iso, at, M1_PARAMS);
    let url = "/iso/52-54-00-AA-00-01/hook.iso";

    // The whole ISO: the source with the placeholder patched, nothing else changed.
    let r = get(svc.http, url, None).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("content-length"), Some(len.to_string().as_str()));
    assert_eq!(r.header("accept-ranges"), Some("bytes"));
    assert!(
        r.body == want,
        "the served ISO differs from the patched source"
    );
    // Any spelling of the MAC, any name ending in .iso.
    let r = get(svc.http, "/iso/52:54:00:aa:00:01/osie.iso", None).await;
    assert!(r.status == 200 && r.body == want);

    // Ranges starting and ending before, inside, across and after the placeholder, and across
    // the server's 64 KiB reads.
    let (a, z) = (at, at + PLACEHOLDER);
    let mut ranges = vec![
        (0, 10),
        (0, a),
        (a - 1, a),
        (a, a),
        (a, a + 5),
        (a + 3, a + 40),
        (a + 50, z - 1),
        (z - 1, z),
        (z, z + 10),
        (a - 500, z + 500),
        (a + 100, 3 * 65_536 + 10),
        (65_530, 65_540),
        (len - 10, len - 1),
    ];
    // And a spread of others, the same every run.
    let mut x: usize = 12_345;
    for _ in 0..40 {
        x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1) % (len * 7);
        let s = x % len;
        let e = (s + (x / 3) % 200_000).min(len - 1);
        ranges.push((s, e));
        // Some near the placeholder.
        let s = a - 2_000 + x % 4_000;
        ranges.push((s, s + x % 3_000));
    }
    for (s, e) in ranges {
        let r = get(svc.http, url, Some(&format!("bytes={s}-{e}"))).await;
        assert_eq!(r.status, 206, "bytes={s}-{e}: {}", r.text());
        assert_eq!(
            r.header("content-range"),
            Some(format!("bytes {s}-{e}/{len}").as_str())
        );
        assert!(r.body == want[s..=e], "bytes={s}-{e} differ");
    }
    // Open-ended and suffix ranges; past the end: 416.
    let r = get(svc.http, url, Some(&format!("bytes={}-", a + 7))).await;
    assert!(r.status == 206 && r.body == want[a + 7..]);
    let r = get(svc.http, url, Some("bytes=-300000")).await;
    assert!(r.status == 206 && r.body == want[len - 300_000..]);
    let r = get(svc.http, url, Some(&format!("bytes={len}-"))).await;
    assert_eq!(r.status, 416);
    assert_eq!(
        r.header("content-range"),
        Some(format!("bytes */{len}").as_str())
    );

    // HEAD: the length and ranges, no body (curl, as a BMC's HTTP client would ask).
    let head = Command::new("curl")
        .args(["-sS", "-I", "--max-time", "30"])
        .arg(format!("http://{}{url}", svc.http))
        .output()
        .expect("curl");
    let head = String::from_utf8_lossy(&head.stdout).to_ascii_lowercase();
    assert!(head.starts_with("http/1.1 200"), "{head}");
    assert!(head.contains(&format!("content-length: {len}")), "{head}");
    assert!(head.contains("accept-ranges: bytes"), "{head}");

    // Refusals, each saying why.
    let r = get(svc.http, "/iso/52-54-00-aa-00-99/hook.iso", None).await;
    assert_eq!(
        (r.status, r.text()),
        (
            404,
            "no Hardware has the MAC 52:54:00:aa:00:99 (spec.networkInterfaces)\n".into()
        )
    );
    let r = get(svc.http, "/iso/not-a-mac/hook.iso", None).await;
    assert_eq!(r.status, 400, "{}", r.text());
    let r = get(svc.http, "/iso/52-54-00-aa-00-01/hook.img", None).await;
    assert_eq!(r.status, 404, "{}", r.text());
    let r = get(svc.http, "/iso/52-54-00-aa-00-02/hook.iso", None).await;
    assert_eq!(
        (r.status, r.text()),
        (
            404,
            "Hardware machines/off: interface 52:54:00:aa:00:02 has disableNetboot: true; it gets no ISO\n".into()
        )
    );
    let r = get(svc.http, "/iso/52-54-00-aa-00-03/hook.iso", None).await;
    assert_eq!(r.status, 500);
    assert!(
        r.text()
            .starts_with("Hardware machines/long: the kernel parameters take ")
            && r.text()
                .contains("the ISO's placeholder holds 1791 (refused, not cut"),
        "{}",
        r.text()
    );
    let r = get(svc.http, "/iso/52-54-00-aa-00-04/hook.iso", None).await;
    assert_eq!(r.status, 500);
    assert!(r.text().contains("contains a quote"), "{}", r.text());
    let r = get(svc.http, "/iso/52-54-00-aa-00-05/hook.iso", None).await;
    assert_eq!(r.status, 403);
    assert!(
        r.text()
            .starts_with("Hardware machines/secret has an agent secret"),
        "{}",
        r.text()
    );

    // Netboot turned off after the machine booted (the Workflow's after-success step): no ISO.
    env.patch_hardware(
        "m1",
        json!({"spec": {"networkInterfaces": {"52:54:00:aa:00:01": {"disableNetboot": true}}}}),
    )
    .await;
    common::eventually(
        "the change to reach the index",
        Duration::from_secs(10),
        || async { (get(svc.http, url, Some("bytes=0-0")).await.status == 404).then_some(()) },
    )
    .await;
    env.patch_hardware(
        "m1",
        json!({"spec": {"networkInterfaces": {"52:54:00:aa:00:01": {"disableNetboot": false}}}}),
    )
    .await;
    common::eventually(
        "the change to reach the index",
        Duration::from_secs(10),
        || async { (get(svc.http, url, Some("bytes=0-0")).await.status == 206).then_some(()) },
    )
    .await;

    // A new ISO renamed over the old one, its placeholder elsewhere: found again and served.
    let at2 = 1_000;
    let iso2 = fake_iso(2 * 65_536, at2);
    let tmp = dir.path().join("osie.iso.new");
    std::fs::write(&tmp, &iso2).expect("write");
    std::fs::rename(&tmp, &source).expect("rename");
    let r = get(svc.http, url, None).await;
    assert_eq!(r.status, 200);
    assert!(
        r.body == patched(&iso2, at2, M1_PARAMS),
        "the replaced ISO is not served patched"
    );
    // One without a marker: a clear error, not the unpatched file.
    std::fs::write(&tmp, vec![0x80u8; 70_000]).expect("write");
    std::fs::rename(&tmp, &source).expect("rename");
    let r = get(svc.http, url, None).await;
    assert_eq!(r.status, 500);
    assert!(r.text().contains("does not occur in it"), "{}", r.text());

    // The ISO route's own metrics.
    assert!(svc.metrics.iso_of("GET", 206) >= 90);
    assert_eq!(svc.metrics.iso_of("GET", 416), 1);
    assert_eq!(svc.metrics.iso_of("HEAD", 200), 1);
    assert_eq!(svc.metrics.iso_of("GET", 403), 1);
    assert!(svc.metrics.iso_bytes.get() >= 2 * len as u64);
    svc.stop().await;
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_an_iso_the_route_says_so_and_a_bad_iso_stops_the_start() {
    let env = Env::new().await;
    let dir = tempfile::tempdir().expect("tempdir");
    env.create_hardware(
        "m1",
        json!({"networkInterfaces": {"52:54:00:aa:00:01": {}}}),
    )
    .await;
    let svc = start(&env, config(dir.path(), None)).await;
    let r = get(svc.http, "/iso/52-54-00-aa-00-01/hook.iso", None).await;
    assert_eq!(
        (r.status, r.text()),
        (
            404,
            "no ISO configured: tink-netboot runs without --iso-source\n".into()
        )
    );
    svc.stop().await;

    let plain = dir.path().join("plain.iso");
    std::fs::write(&plain, vec![0x80u8; 10_000]).expect("write");
    let e = tink_netboot::bind(&config(dir.path(), Some(plain)))
        .await
        .err()
        .expect("an ISO without the marker is refused at start");
    assert!(e.to_string().contains("does not occur in it"), "{e}");
    let e = tink_netboot::bind(&config(dir.path(), Some(dir.path().join("missing.iso"))))
        .await
        .err()
        .expect("a missing ISO is refused at start");
    assert!(e.to_string().contains("missing.iso"), "{e}");
    env.stop().await;
}

/// Why the boot test cannot run here, if it cannot: a missing tool or QEMU's curl block driver.
fn boot_test_missing() -> Option<String> {
    for tool in [
        "qemu-system-x86_64",
        "grub-mkrescue",
        "xorriso",
        "mformat",
        "cpio",
        "gzip",
    ] {
        let found = Command::new("sh")
            .args(["-c", &format!("command -v {tool}")])
            .output()
            .is_ok_and(|o| o.status.success());
        if !found {
            return Some(format!("{tool} is missing (scripts/install-deps.sh)"));
        }
    }
    let curl_driver = [
        "/usr/lib/x86_64-linux-gnu/qemu/block-curl.so",
        "/usr/lib/qemu/block-curl.so",
    ]
    .iter()
    .any(|p| Path::new(p).exists());
    if !curl_driver {
        return Some("QEMU's curl block driver is missing (Debian qemu-block-extra)".into());
    }
    if !Path::new("/bin/busybox").exists() {
        return Some("/bin/busybox is missing (Debian busybox-static)".into());
    }
    None
}

fn skip_or_fail(why: &str) {
    if std::env::var("CI").as_deref() == Ok("true") {
        panic!("the ISO boot test cannot run under CI: {why}");
    }
    eprintln!("SKIPPED: the ISO boot test cannot run here: {why}");
}

/// The OSIE kernel: `TINK_OSIE_KERNEL`, else target/osie/vmlinuz, fetched by
/// `osie/build.sh --kernel-only` (Debian's linux-image-amd64, unpacked) when missing.
fn osie_kernel(repo: &Path) -> Result<PathBuf, String> {
    if let Ok(k) = std::env::var("TINK_OSIE_KERNEL") {
        return Ok(PathBuf::from(k));
    }
    let kernel = repo.join("target/osie/vmlinuz");
    if kernel.exists() {
        return Ok(kernel);
    }
    let out = Command::new("bash")
        .arg(repo.join("osie/build.sh"))
        .arg("--kernel-only")
        .current_dir(repo)
        .output()
        .map_err(|e| format!("bash osie/build.sh: {e}"))?;
    if !out.status.success() || !kernel.exists() {
        return Err(format!(
            "osie/build.sh --kernel-only failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(kernel)
}

/// `kvm` when QEMU runs a Linux kernel under it here (as scripts/netboot-demo.sh probes: some
/// hosts open /dev/kvm but never run a guest kernel), else `tcg`; `TINK_NETBOOT_ACCEL` decides
/// when set.
async fn accel(kernel: &Path) -> &'static str {
    match std::env::var("TINK_NETBOOT_ACCEL").as_deref() {
        Ok("kvm") => return "kvm",
        Ok("tcg") => return "tcg",
        _ => {}
    }
    let writable = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/kvm")
        .is_ok();
    if !writable {
        return "tcg";
    }
    let probe = tokio::process::Command::new("qemu-system-x86_64")
        .args([
            "-accel",
            "kvm",
            "-cpu",
            "host",
            "-m",
            "256",
            "-nographic",
            "-no-reboot",
            "-kernel",
        ])
        .arg(kernel)
        .args(["-append", "console=ttyS0 panic=-1"])
        .kill_on_drop(true)
        .output();
    match tokio::time::timeout(Duration::from_secs(20), probe).await {
        Ok(Ok(out)) if String::from_utf8_lossy(&out.stdout).contains("Kernel panic") => "kvm",
        _ => "tcg",
    }
}

/// A QEMU machine boots the served ISO over HTTP (QEMU's curl block driver reads it with Range
/// requests, as a BMC reads virtual media), GRUB starts the kernel from it, and the kernel's
/// command line is the machine's parameters: the kernel prints it, and the initramfs's init
/// prints /proc/cmdline (what the agent reads).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vm_boots_the_served_iso_with_its_kernel_command_line() {
    if let Some(why) = boot_test_missing() {
        return skip_or_fail(&why);
    }
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let kernel = match osie_kernel(&repo) {
        Ok(k) => k,
        Err(why) => return skip_or_fail(&why),
    };
    let dir = tempfile::tempdir().expect("tempdir");
    // A tiny initramfs (the boot, not the OSIE, is under test): init prints the command line
    // and powers the machine off.
    let ir = dir.path().join("ir");
    std::fs::create_dir_all(ir.join("bin")).expect("mkdir");
    std::fs::copy("/bin/busybox", ir.join("bin/busybox")).expect("copy busybox");
    std::fs::write(
        ir.join("init"),
        "#!/bin/busybox sh\n/bin/busybox mkdir -p /proc\n/bin/busybox mount -t proc proc /proc\n\
         /bin/busybox echo \"iso-test cmdline: $(/bin/busybox cat /proc/cmdline)\"\n\
         /bin/busybox poweroff -f\n",
    )
    .expect("init");
    let pack = Command::new("sh")
        .arg("-c")
        .arg("chmod +x init && find . | cpio -o -H newc --quiet | gzip -1 > ../initramfs")
        .current_dir(&ir)
        .output()
        .expect("cpio");
    assert!(
        pack.status.success(),
        "{}",
        String::from_utf8_lossy(&pack.stderr)
    );
    // The ISO, made as osie/build.sh --iso makes the OSIE's.
    let iso = dir.path().join("osie.iso");
    let mk = Command::new("bash")
        .arg(repo.join("osie/mkiso.sh"))
        .arg("--kernel")
        .arg(&kernel)
        .arg("--initramfs")
        .arg(dir.path().join("initramfs"))
        .arg("--out")
        .arg(&iso)
        .output()
        .expect("mkiso");
    assert!(
        mk.status.success(),
        "osie/mkiso.sh: {}",
        String::from_utf8_lossy(&mk.stderr)
    );

    let env = Env::new().await;
    env.create_hardware(
        "vm",
        json!({"networkInterfaces": {"52:54:00:12:34:56": {"dhcp": {"ip": "10.0.0.31"}}},
               "osie": {"kernelParams": ["tink_iso_test=a;b$c"]}}),
    )
    .await;
    let mut cfg = config(dir.path(), Some(iso));
    if let Some(c) = cfg.iso.as_mut() {
        c.kernel.console = vec!["ttyS0,115200".into()];
    }
    let svc = start(&env, cfg).await;
    let accel = accel(&kernel).await;
    let url = format!("http://{}/iso/52-54-00-12-34-56/hook.iso", svc.http);
    let mut qemu = tokio::process::Command::new("qemu-system-x86_64");
    qemu.args([
        "-accel",
        accel,
        "-m",
        "256",
        "-display",
        "none",
        "-nodefaults",
        "-no-reboot",
    ])
    .args(["-serial", "stdio", "-boot", "d", "-drive"])
    .arg(format!("file={url},media=cdrom,readonly=on,format=raw"))
    .stdout(std::process::Stdio::piped())
    .stderr(std::process::Stdio::piped())
    .kill_on_drop(true);
    if accel == "kvm" {
        qemu.args(["-cpu", "host"]);
    }
    let mut child = qemu.spawn().expect("qemu-system-x86_64 starts");
    let mut stdout = child.stdout.take().expect("stdout");
    let mut log = Vec::new();
    // A bound on a hung boot, not a speed requirement (software emulation on 2 cores).
    let read = tokio::time::timeout(Duration::from_secs(300), async {
        use tokio::io::AsyncReadExt as _;
        let mut buf = [0u8; 4096];
        loop {
            match stdout.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => log.extend_from_slice(&buf[..n]),
            }
            if String::from_utf8_lossy(&log).contains("iso-test cmdline:") && log.ends_with(b"\n") {
                break;
            }
        }
    })
    .await;
    let _ = child.start_kill();
    let stderr = match child.wait_with_output().await {
        Ok(o) => String::from_utf8_lossy(&o.stderr).into_owned(),
        Err(e) => e.to_string(),
    };
    let log = String::from_utf8_lossy(&log).replace('\r', "");
    assert!(
        read.is_ok(),
        "the VM did not print its command line ({accel}):\n{log}\n{stderr}"
    );
    let want = "worker_id=52:54:00:12:34:56 hw_addr=52:54:00:12:34:56 \
        grpc_authority=10.0.0.2:42113 tinkerbell_tls=false tinkerbell_insecure_tls=false \
        syslog_host=10.0.0.2 console=ttyS0,115200 modules=loop,squashfs,sd-mod,usb-storage \
        intel_iommu=on iommu=pt initrd=initrd tink_iso_test=a;b$c";
    let kernel_line = log
        .lines()
        .find(|l| l.contains("Command line: "))
        .unwrap_or_else(|| {
            panic!("no `Command line:` in the serial log ({accel}):\n{log}\n{stderr}")
        });
    assert!(
        kernel_line.ends_with(&format!("Command line: BOOT_IMAGE=/vmlinuz {want}")),
        "{kernel_line}"
    );
    let init_line = log
        .lines()
        .find(|l| l.starts_with("iso-test cmdline: "))
        .expect("init's line");
    assert_eq!(
        init_line,
        format!("iso-test cmdline: BOOT_IMAGE=/vmlinuz {want}")
    );
    // QEMU read the ISO in ranges.
    assert!(svc.metrics.iso_of("GET", 206) > 0, "{log}");
    svc.stop().await;
    env.stop().await;
}
