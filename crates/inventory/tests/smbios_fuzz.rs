//! The SMBIOS reader against random, mutated and truncated tables: it never panics, never
//! walks more than MAX_STRUCTURES, reads every well-formed table completely, and whatever it
//! decodes is a valid inventory (bounded strings without control characters).
//!
//! `PROPTEST_CASES=N` runs longer (the default is proptest's 256 per property); the
//! cargo-fuzz target in `fuzz/` does the same coverage-guided.

use std::path::PathBuf;

use proptest::prelude::*;
use tink_inventory::smbios::{self, MAX_STRUCTURES, Version};
use tink_inventory::{Cpu, Inventory, Memory};

fn table(fixture: &str) -> Vec<u8> {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(fixture)
        .join("sys/firmware/dmi/tables/DMI");
    std::fs::read(p).expect("fixture table")
}

fn real_tables() -> Vec<Vec<u8>> {
    vec![table("machine-a"), table("q35-smbios3")]
}

/// Decodes and checks the invariants every input must keep.
fn check(data: &[u8], version: Option<Version>) -> smbios::Decoded {
    let d = smbios::decode(data, version);
    assert!(d.structures <= MAX_STRUCTURES);
    // What was decoded passes validation as an inventory.
    let inv = Inventory {
        collected_at: jiff::Timestamp::UNIX_EPOCH,
        cpu: Cpu::default(),
        memory: Memory {
            modules: d.memory_modules.clone(),
            ..Memory::default()
        },
        smbios: None,
        bios: d.bios.clone(),
        system: d.system.clone(),
        baseboard: d.baseboard.clone(),
        chassis: d.chassis.clone(),
        processors: d.processors.clone(),
        disks: Vec::new(),
        nics: Vec::new(),
        pci_devices: Vec::new(),
        warnings: Vec::new(),
    };
    // Lists are cut by the collector, not the decoder; cut them here the same way.
    let mut inv = inv;
    inv.memory
        .modules
        .truncate(tink_inventory::validate::MAX_MEMORY_MODULES);
    inv.processors
        .truncate(tink_inventory::validate::MAX_PROCESSORS);
    if let Err(e) = inv.validate() {
        panic!("decoded values do not validate: {e}");
    }
    d
}

fn version() -> impl Strategy<Value = Option<Version>> {
    prop::option::of((0u8..=4, any::<u8>()).prop_map(|(major, minor)| Version { major, minor }))
}

#[derive(Debug, Clone)]
enum Mutation {
    Set(usize, u8),
    Flip(usize, u8),
    Truncate(usize),
    Insert(usize, Vec<u8>),
    Remove(usize, usize),
    Duplicate(usize, usize),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<usize>(), any::<u8>()).prop_map(|(i, b)| Mutation::Set(i, b)),
        (any::<usize>(), 0u8..8).prop_map(|(i, bit)| Mutation::Flip(i, bit)),
        any::<usize>().prop_map(Mutation::Truncate),
        (any::<usize>(), prop::collection::vec(any::<u8>(), 1..16))
            .prop_map(|(i, v)| Mutation::Insert(i, v)),
        (any::<usize>(), 1usize..32).prop_map(|(i, n)| Mutation::Remove(i, n)),
        (any::<usize>(), 1usize..64).prop_map(|(i, n)| Mutation::Duplicate(i, n)),
    ]
}

fn apply(data: &mut Vec<u8>, m: &Mutation) {
    let len = data.len();
    if len == 0 {
        if let Mutation::Insert(_, v) = m {
            data.extend_from_slice(v);
        }
        return;
    }
    match m {
        Mutation::Set(i, b) => data[i % len] = *b,
        Mutation::Flip(i, bit) => data[i % len] ^= 1 << bit,
        Mutation::Truncate(i) => data.truncate(i % len),
        Mutation::Insert(i, v) => {
            let at = i % (len + 1);
            data.splice(at..at, v.iter().copied());
        }
        Mutation::Remove(i, n) => {
            let at = i % len;
            let end = (at + n).min(len);
            data.drain(at..end);
        }
        Mutation::Duplicate(i, n) => {
            let at = i % len;
            let end = (at + n).min(len);
            let chunk: Vec<u8> = data[at..end].to_vec();
            data.splice(at..at, chunk);
        }
    }
}

/// A well-formed structure of a decoded type with random contents.
fn structure() -> impl Strategy<Value = Vec<u8>> {
    (
        prop::sample::select(vec![0u8, 1, 2, 3, 4, 17, 9, 38, 200]),
        4u8..=255,
        any::<u16>(),
        prop::collection::vec(
            prop::collection::vec(1u8..=255, 1..300), // strings: no NUL inside, may be long
            0..6,
        ),
        any::<u64>(),
    )
        .prop_map(|(kind, length, handle, strings, seed)| {
            let mut v = vec![kind, length];
            v.extend_from_slice(&handle.to_le_bytes());
            // Formatted bytes from the seed; string indexes land in 0..8 to hit present and
            // absent strings.
            let mut x = seed | 1;
            for _ in 4..length {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                v.push(if x % 3 == 0 {
                    (x % 8) as u8
                } else {
                    (x >> 8) as u8
                });
            }
            if strings.is_empty() {
                v.extend_from_slice(&[0, 0]);
            } else {
                for s in &strings {
                    v.extend_from_slice(s);
                    v.push(0);
                }
                v.push(0);
            }
            v
        })
}

proptest! {
    #[test]
    fn random_bytes_never_panic(data in prop::collection::vec(any::<u8>(), 0..4096), v in version()) {
        check(&data, v);
        let _ = smbios::parse_entry_point(&data);
    }

    #[test]
    fn random_entry_points_never_panic(
        anchor in prop::sample::select(vec![&b"_SM_"[..], &b"_SM3_"[..]]),
        rest in prop::collection::vec(any::<u8>(), 0..64),
    ) {
        let mut ep = anchor.to_vec();
        ep.extend_from_slice(&rest);
        if let Ok(e) = smbios::parse_entry_point(&ep) {
            // A valid entry point's bytes sum to zero over its declared length.
            let declared = if e.smbios3 { usize::from(ep[6]).max(0x18) } else { usize::from(ep[5]).max(0x1F) };
            prop_assert!(ep.len() >= declared);
        }
    }

    #[test]
    fn mutated_real_tables_never_panic(
        which in 0usize..2,
        mutations in prop::collection::vec(mutation(), 1..12),
        v in version(),
    ) {
        let mut data = real_tables().swap_remove(which);
        for m in &mutations {
            apply(&mut data, m);
        }
        check(&data, v);
    }

    #[test]
    fn well_formed_tables_are_read_to_the_end(
        parts in prop::collection::vec(structure(), 0..40),
        end in any::<bool>(),
    ) {
        let mut data: Vec<u8> = parts.concat();
        if end {
            data.extend_from_slice(&[127, 4, 0xff, 0xfe, 0, 0]);
        }
        let d = check(&data, None);
        prop_assert_eq!(d.problem, None);
        prop_assert_eq!(d.structures, parts.len() + usize::from(end));
    }
}

/// Every prefix of the real tables: no panic, and what a prefix decodes agrees with the whole
/// table (a cut table loses structures, never changes one it kept).
#[test]
fn every_truncation_of_the_real_tables() {
    for full in real_tables() {
        let whole = check(&full, None);
        assert_eq!(whole.problem, None);
        for len in 0..full.len() {
            let part = check(&full[..len], None);
            assert!(part.structures <= whole.structures);
            for (got, want) in [
                (part.bios.is_some(), part.bios == whole.bios),
                (part.system.is_some(), part.system == whole.system),
                (part.baseboard.is_some(), part.baseboard == whole.baseboard),
                (part.chassis.is_some(), part.chassis == whole.chassis),
            ] {
                assert!(
                    !got || want,
                    "prefix of {len} bytes changed a structure it kept"
                );
            }
            assert!(whole.memory_modules.starts_with(&part.memory_modules));
            assert!(whole.processors.starts_with(&part.processors));
        }
    }
}
