//! The SMBIOS reader on arbitrary input: the first byte picks the version the entry point
//! would declare (or none), the rest is the structure table; the same bytes are also tried as
//! an entry point. It must not panic, must stop within MAX_STRUCTURES, and what it decodes must
//! validate as an inventory.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tink_inventory::smbios::{self, MAX_STRUCTURES, Version};
use tink_inventory::validate::{MAX_MEMORY_MODULES, MAX_PROCESSORS};
use tink_inventory::{Cpu, Inventory, Memory};

fuzz_target!(|data: &[u8]| {
    let _ = smbios::parse_entry_point(data);
    let Some((first, table)) = data.split_first() else {
        return;
    };
    let version = (*first != 0xFF).then_some(Version {
        major: first >> 4,
        minor: first & 0x0F,
    });
    let d = smbios::decode(table, version);
    assert!(d.structures <= MAX_STRUCTURES);
    let mut modules = d.memory_modules;
    modules.truncate(MAX_MEMORY_MODULES);
    let mut processors = d.processors;
    processors.truncate(MAX_PROCESSORS);
    let inv = Inventory {
        collected_at: jiff::Timestamp::UNIX_EPOCH,
        cpu: Cpu::default(),
        memory: Memory {
            modules,
            ..Memory::default()
        },
        smbios: None,
        bios: d.bios,
        system: d.system,
        baseboard: d.baseboard,
        chassis: d.chassis,
        processors,
        disks: Vec::new(),
        nics: Vec::new(),
        pci_devices: Vec::new(),
        warnings: Vec::new(),
    };
    if let Err(e) = inv.validate() {
        panic!("decoded values do not validate: {e}");
    }
});
