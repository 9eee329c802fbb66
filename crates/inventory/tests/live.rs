//! The collector on this machine (root `/`), checked against what the kernel says through
//! other means: the processor count from /proc/cpuinfo and std, the MACs from /sys/class/net.

use std::collections::BTreeSet;
use std::path::Path;

#[test]
fn this_machine() {
    let inv = tink_inventory::collect(Path::new("/"));
    inv.validate().expect("this machine's inventory validates");

    // Threads: every `processor : N` line, and at least what std may run on.
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").expect("/proc/cpuinfo");
    let processors = cpuinfo
        .lines()
        .filter(|l| l.starts_with("processor") && l.contains(':'))
        .count() as u32;
    assert!(processors > 0);
    assert_eq!(inv.cpu.threads, processors);
    let parallelism = std::thread::available_parallelism()
        .expect("parallelism")
        .get() as u32;
    assert!(
        parallelism <= inv.cpu.threads,
        "std sees {parallelism}, inventory {}",
        inv.cpu.threads
    );
    assert!(inv.cpu.cores >= 1 && inv.cpu.cores <= inv.cpu.threads);

    // Memory: MemTotal.
    let meminfo = std::fs::read_to_string("/proc/meminfo").expect("/proc/meminfo");
    let kb: u64 = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .expect("MemTotal");
    assert_eq!(inv.memory.usable_bytes, Some(kb * 1024));

    // NICs: every /sys/class/net interface with a device link, by MAC.
    let mut want = BTreeSet::new();
    for entry in std::fs::read_dir("/sys/class/net").expect("/sys/class/net") {
        let dir = entry.expect("entry").path();
        if std::fs::symlink_metadata(dir.join("device")).is_err() {
            continue;
        }
        let mac = std::fs::read_to_string(dir.join("address")).expect("address");
        want.insert(mac.trim().to_ascii_lowercase());
    }
    let got: BTreeSet<String> = inv.nics.iter().map(|n| n.mac.clone()).collect();
    assert_eq!(got, want);
    assert!(!got.is_empty(), "this machine has a NIC");

    // Block devices: every /sys/block entry that is not loop, ram, zram, dm-, md, nbd.
    let mut want_disks = BTreeSet::new();
    for entry in std::fs::read_dir("/sys/block").expect("/sys/block") {
        let name = entry
            .expect("entry")
            .file_name()
            .into_string()
            .expect("utf-8");
        if !["loop", "ram", "zram", "dm-", "md", "nbd"]
            .iter()
            .any(|p| name.starts_with(p))
        {
            want_disks.insert(name);
        }
    }
    let got_disks: BTreeSet<String> = inv.disks.iter().map(|d| d.name.clone()).collect();
    assert_eq!(got_disks, want_disks);

    // PCI: one entry per /sys/bus/pci/devices link.
    let pci = std::fs::read_dir("/sys/bus/pci/devices")
        .map(|d| d.count())
        .unwrap_or(0);
    assert_eq!(inv.pci_devices.len(), pci);
}
