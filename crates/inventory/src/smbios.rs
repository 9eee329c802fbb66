//! A hand-written SMBIOS (DMTF DSP0134) reader for the structures an inventory needs.
//!
//! Input is what Linux exposes: `/sys/firmware/dmi/tables/smbios_entry_point` (the 2.1 `_SM_` or
//! 3.0 `_SM3_` entry point, which carries the version) and `/sys/firmware/dmi/tables/DMI` (the
//! structure table). Both come from firmware, so every read is bounds-checked: a structure
//! whose formatted area or string set runs past the end stops the walk with a [`Problem`]
//! (what was decoded before it is kept), a field beyond a structure's formatted length is
//! absent (older SMBIOS versions have shorter structures), a string index past the set is
//! absent, and the walk visits at most [`MAX_STRUCTURES`] structures. Nothing here panics on
//! any input; `tests/smbios_fuzz.rs` feeds random and mutated tables to check it.
//!
//! Decoded: type 0 (BIOS), 1 (system, with the UUID byte order rule of SMBIOS 2.6: the first
//! three fields are little-endian from 2.6 on, big-endian before), 2 (baseboard), 3 (chassis),
//! 4 (processor sockets, populated only) and 17 (memory devices, installed only). Strings
//! vendors leave as placeholders ("To Be Filled By O.E.M.", "Not Specified", ...) are reported
//! as absent, so nothing downstream keys a machine on a placeholder serial.

use crate::model::{Baseboard, Bios, Chassis, MemoryModule, ProcessorSocket, System};
use crate::text::clean;

/// The walk stops after this many structures (a real table has a few hundred at most; a
/// malformed one could otherwise describe millions of 4-byte structures).
pub const MAX_STRUCTURES: usize = 8192;

/// Structure types this reader decodes.
const TYPE_BIOS: u8 = 0;
const TYPE_SYSTEM: u8 = 1;
const TYPE_BASEBOARD: u8 = 2;
const TYPE_CHASSIS: u8 = 3;
const TYPE_PROCESSOR: u8 = 4;
const TYPE_MEMORY_DEVICE: u8 = 17;
const TYPE_END: u8 = 127;

/// The SMBIOS version an entry point declares.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Version {
    pub major: u8,
    pub minor: u8,
}

impl std::fmt::Display for Version {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

/// A decoded entry point.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EntryPoint {
    pub version: Version,
    /// Length of the structure table (2.1: exact; 3.0: maximum).
    pub table_len: u32,
    /// `_SM3_` (64-bit) rather than `_SM_`.
    pub smbios3: bool,
}

/// Why an entry point or a table could not be (fully) read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Problem {
    #[error("entry point: no _SM_ or _SM3_ anchor")]
    NoAnchor,
    #[error("entry point: {len} bytes, shorter than its declared length {declared}")]
    EntryTruncated { len: usize, declared: usize },
    #[error("entry point: checksum does not add up to zero")]
    EntryChecksum,
    #[error("structure at offset {offset}: header runs past the end of the table")]
    HeaderTruncated { offset: usize },
    #[error("structure at offset {offset}: formatted length {length} is below the 4-byte header")]
    LengthTooSmall { offset: usize, length: u8 },
    #[error("structure at offset {offset}: formatted area of {length} bytes runs past the end")]
    FormattedTruncated { offset: usize, length: u8 },
    #[error("structure at offset {offset}: string set has no terminating double NUL")]
    StringsUnterminated { offset: usize },
    #[error("more than {MAX_STRUCTURES} structures; the rest were not read")]
    TooManyStructures,
}

fn checksum_ok(bytes: &[u8]) -> bool {
    bytes.iter().fold(0u8, |acc, b| acc.wrapping_add(*b)) == 0
}

/// Reads a `_SM_` (2.1) or `_SM3_` (3.0) entry point.
pub fn parse_entry_point(bytes: &[u8]) -> Result<EntryPoint, Problem> {
    if bytes.starts_with(b"_SM3_") {
        // 0x06 length, 0x07 major, 0x08 minor, 0x0C maximum table size (u32), 0x10 address.
        let declared = usize::from(*bytes.get(6).ok_or(Problem::EntryTruncated {
            len: bytes.len(),
            declared: 0x18,
        })?);
        let declared = declared.max(0x18);
        let entry = bytes.get(..declared).ok_or(Problem::EntryTruncated {
            len: bytes.len(),
            declared,
        })?;
        if !checksum_ok(entry) {
            return Err(Problem::EntryChecksum);
        }
        let table_len = u32_at(entry, 0x0C).unwrap_or(0);
        return Ok(EntryPoint {
            version: Version {
                major: entry[7],
                minor: entry[8],
            },
            table_len,
            smbios3: true,
        });
    }
    if bytes.starts_with(b"_SM_") {
        // 0x05 length, 0x06 major, 0x07 minor, 0x10 "_DMI_", 0x16 table length (u16).
        let declared = usize::from(*bytes.get(5).ok_or(Problem::EntryTruncated {
            len: bytes.len(),
            declared: 0x1F,
        })?);
        let declared = declared.max(0x1F);
        let entry = bytes.get(..declared).ok_or(Problem::EntryTruncated {
            len: bytes.len(),
            declared,
        })?;
        if !checksum_ok(entry) {
            return Err(Problem::EntryChecksum);
        }
        let table_len = u16_at(entry, 0x16).map(u32::from).unwrap_or(0);
        return Ok(EntryPoint {
            version: Version {
                major: entry[6],
                minor: entry[7],
            },
            table_len,
            smbios3: false,
        });
    }
    Err(Problem::NoAnchor)
}

fn u16_at(b: &[u8], off: usize) -> Option<u16> {
    let s = b.get(off..off.checked_add(2)?)?;
    Some(u16::from_le_bytes([s[0], s[1]]))
}

fn u32_at(b: &[u8], off: usize) -> Option<u32> {
    let s = b.get(off..off.checked_add(4)?)?;
    Some(u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
}

/// One structure: its formatted area (header included) and its string set.
#[derive(Debug, Clone, Copy)]
pub struct Structure<'a> {
    pub kind: u8,
    pub handle: u16,
    formatted: &'a [u8],
    strings: &'a [u8],
}

impl<'a> Structure<'a> {
    /// The byte at `off` of the formatted area, absent past its length.
    pub fn byte(&self, off: usize) -> Option<u8> {
        self.formatted.get(off).copied()
    }

    pub fn word(&self, off: usize) -> Option<u16> {
        u16_at(self.formatted, off)
    }

    pub fn dword(&self, off: usize) -> Option<u32> {
        u32_at(self.formatted, off)
    }

    /// The raw bytes `off..off+len` of the formatted area.
    pub fn bytes(&self, off: usize, len: usize) -> Option<&'a [u8]> {
        self.formatted.get(off..off.checked_add(len)?)
    }

    /// The string whose 1-based index is stored at `off`, raw. Index 0 means "none".
    pub fn raw_string(&self, off: usize) -> Option<&'a [u8]> {
        let index = usize::from(self.byte(off)?);
        if index == 0 {
            return None;
        }
        self.strings
            .split(|b| *b == 0)
            .take_while(|s| !s.is_empty())
            .nth(index - 1)
    }

    /// The string at `off`, cleaned (see [`crate::text::clean`]); placeholders are absent.
    pub fn string(&self, off: usize) -> Option<String> {
        self.raw_string(off).and_then(clean)
    }
}

/// Walks a structure table. Yields structures until the end-of-table structure, the end of
/// the data, [`MAX_STRUCTURES`], or a malformed structure (yielded once as an error; the walk
/// then stops, since the next structure's offset is unknown).
pub struct Structures<'a> {
    data: &'a [u8],
    pos: usize,
    count: usize,
    done: bool,
}

pub fn structures(data: &[u8]) -> Structures<'_> {
    Structures {
        data,
        pos: 0,
        count: 0,
        done: false,
    }
}

impl<'a> Iterator for Structures<'a> {
    type Item = Result<Structure<'a>, Problem>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let offset = self.pos;
        // A table that ends exactly here, or in zero padding, ends the walk quietly.
        // (A 3.0 table's length is a maximum: firmware may pad it with zeros after the last
        // structure when it has no end-of-table structure.)
        if self
            .data
            .get(offset..)
            .is_none_or(|rest| rest.iter().all(|b| *b == 0))
        {
            self.done = true;
            return None;
        }
        if self.count >= MAX_STRUCTURES {
            self.done = true;
            return Some(Err(Problem::TooManyStructures));
        }
        let Some(header) = self.data.get(offset..offset.saturating_add(4)) else {
            self.done = true;
            return Some(Err(Problem::HeaderTruncated { offset }));
        };
        let (kind, length) = (header[0], header[1]);
        let handle = u16::from_le_bytes([header[2], header[3]]);
        if length < 4 {
            self.done = true;
            return Some(Err(Problem::LengthTooSmall { offset, length }));
        }
        let strings_start = offset + usize::from(length);
        let Some(formatted) = self.data.get(offset..strings_start) else {
            self.done = true;
            return Some(Err(Problem::FormattedTruncated { offset, length }));
        };
        // The string set ends at the first double NUL at or after the formatted area.
        let rest = self.data.get(strings_start..).unwrap_or(&[]);
        let Some(end) = rest.windows(2).position(|w| w == [0, 0]) else {
            self.done = true;
            return Some(Err(Problem::StringsUnterminated { offset }));
        };
        let strings = &rest[..end];
        self.pos = strings_start + end + 2;
        self.count += 1;
        if kind == TYPE_END {
            self.done = true;
        }
        Some(Ok(Structure {
            kind,
            handle,
            formatted,
            strings,
        }))
    }
}

/// What a table decodes to.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Decoded {
    pub bios: Option<Bios>,
    pub system: Option<System>,
    pub baseboard: Option<Baseboard>,
    pub chassis: Option<Chassis>,
    pub processors: Vec<ProcessorSocket>,
    pub memory_modules: Vec<MemoryModule>,
    /// Structures read (all types).
    pub structures: usize,
    /// The first problem met, if the walk stopped early.
    pub problem: Option<Problem>,
}

/// Decodes a structure table. `version` decides the UUID byte order; when unknown (no
/// readable entry point) the 2.6+ order is used, as every firmware of the last 15 years has it.
/// Only the first BIOS, system, baseboard and chassis structure counts.
pub fn decode(table: &[u8], version: Option<Version>) -> Decoded {
    let mut out = Decoded::default();
    let uuid_le = version.is_none_or(|v| v >= Version { major: 2, minor: 6 });
    for item in structures(table) {
        let s = match item {
            Ok(s) => s,
            Err(problem) => {
                out.problem = Some(problem);
                break;
            }
        };
        out.structures += 1;
        match s.kind {
            TYPE_BIOS if out.bios.is_none() => out.bios = Some(bios(&s)),
            TYPE_SYSTEM if out.system.is_none() => out.system = Some(system(&s, uuid_le)),
            TYPE_BASEBOARD if out.baseboard.is_none() => out.baseboard = Some(baseboard(&s)),
            TYPE_CHASSIS if out.chassis.is_none() => out.chassis = Some(chassis(&s)),
            TYPE_PROCESSOR => {
                if let Some(p) = processor(&s) {
                    out.processors.push(p);
                }
            }
            TYPE_MEMORY_DEVICE => {
                if let Some(m) = memory_device(&s) {
                    out.memory_modules.push(m);
                }
            }
            _ => {}
        }
    }
    out
}

fn bios(s: &Structure<'_>) -> Bios {
    Bios {
        vendor: s.string(0x04),
        version: s.string(0x05),
        release_date: s.string(0x08),
    }
}

fn system(s: &Structure<'_>, uuid_le: bool) -> System {
    System {
        manufacturer: s.string(0x04),
        product: s.string(0x05),
        version: s.string(0x06),
        serial: s.string(0x07),
        uuid: s.bytes(0x08, 16).and_then(|b| uuid(b, uuid_le)),
        sku: s.string(0x19),
        family: s.string(0x1A),
    }
}

/// Formats an SMBIOS UUID. All-0xFF means "not present", all-zero "present but not set":
/// both absent. From SMBIOS 2.6 the first three fields are stored little-endian.
pub fn uuid(b: &[u8], little_endian: bool) -> Option<String> {
    let b: &[u8; 16] = b.try_into().ok()?;
    if b.iter().all(|x| *x == 0xFF) || b.iter().all(|x| *x == 0) {
        return None;
    }
    let (t1, t2, t3) = if little_endian {
        (
            u32::from_le_bytes([b[0], b[1], b[2], b[3]]),
            u16::from_le_bytes([b[4], b[5]]),
            u16::from_le_bytes([b[6], b[7]]),
        )
    } else {
        (
            u32::from_be_bytes([b[0], b[1], b[2], b[3]]),
            u16::from_be_bytes([b[4], b[5]]),
            u16::from_be_bytes([b[6], b[7]]),
        )
    };
    Some(format!(
        "{t1:08x}-{t2:04x}-{t3:04x}-{:02x}{:02x}-{:02x}{:02x}{:02x}{:02x}{:02x}{:02x}",
        b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]
    ))
}

fn baseboard(s: &Structure<'_>) -> Baseboard {
    Baseboard {
        manufacturer: s.string(0x04),
        product: s.string(0x05),
        version: s.string(0x06),
        serial: s.string(0x07),
        asset_tag: s.string(0x08),
    }
}

fn chassis(s: &Structure<'_>) -> Chassis {
    Chassis {
        manufacturer: s.string(0x04),
        kind: s
            .byte(0x05)
            .and_then(|t| chassis_type(t & 0x7F))
            .map(str::to_owned),
        version: s.string(0x06),
        serial: s.string(0x07),
        asset_tag: s.string(0x08),
    }
}

/// SMBIOS 3.7 table 17 (bits 6:0 of the type byte).
pub(crate) fn chassis_type(t: u8) -> Option<&'static str> {
    Some(match t {
        0x01 => "Other",
        0x03 => "Desktop",
        0x04 => "Low Profile Desktop",
        0x05 => "Pizza Box",
        0x06 => "Mini Tower",
        0x07 => "Tower",
        0x08 => "Portable",
        0x09 => "Laptop",
        0x0A => "Notebook",
        0x0B => "Hand Held",
        0x0C => "Docking Station",
        0x0D => "All in One",
        0x0E => "Sub Notebook",
        0x0F => "Space-saving",
        0x10 => "Lunch Box",
        0x11 => "Main Server Chassis",
        0x12 => "Expansion Chassis",
        0x13 => "SubChassis",
        0x14 => "Bus Expansion Chassis",
        0x15 => "Peripheral Chassis",
        0x16 => "RAID Chassis",
        0x17 => "Rack Mount Chassis",
        0x18 => "Sealed-case PC",
        0x19 => "Multi-system chassis",
        0x1A => "Compact PCI",
        0x1B => "Advanced TCA",
        0x1C => "Blade",
        0x1D => "Blade Enclosure",
        0x1E => "Tablet",
        0x1F => "Convertible",
        0x20 => "Detachable",
        0x21 => "IoT Gateway",
        0x22 => "Embedded PC",
        0x23 => "Mini PC",
        0x24 => "Stick PC",
        _ => return None,
    })
}

/// Type 4; `None` for an empty socket (status bit 6 clear).
fn processor(s: &Structure<'_>) -> Option<ProcessorSocket> {
    if let Some(status) = s.byte(0x18)
        && status & 0x40 == 0
    {
        return None;
    }
    // 0x23 core count / 0x25 thread count (2.5); 0xFF means "see the 3.0 word at 0x2A / 0x2E".
    let count = |byte_off: usize, word_off: usize| -> Option<u32> {
        match s.byte(byte_off)? {
            0 => None,
            0xFF => s
                .word(word_off)
                .filter(|w| *w != 0 && *w != 0xFFFF)
                .map(u32::from),
            n => Some(u32::from(n)),
        }
    };
    let speed = |off: usize| s.word(off).filter(|w| *w != 0).map(u32::from);
    Some(ProcessorSocket {
        socket: s.string(0x04),
        manufacturer: s.string(0x07),
        version: s.string(0x10),
        max_speed_mhz: speed(0x14),
        current_speed_mhz: speed(0x16),
        serial: s.string(0x20),
        cores: count(0x23, 0x2A),
        threads: count(0x25, 0x2E),
    })
}

/// Type 17; `None` for an empty slot (size 0).
fn memory_device(s: &Structure<'_>) -> Option<MemoryModule> {
    let size_bytes = match s.word(0x0C) {
        Some(0) => return None,
        None | Some(0xFFFF) => None,
        // 0x7FFF: the size (MiB, bits 30:0) is in the extended size dword at 0x1C (2.7).
        Some(0x7FFF) => s
            .dword(0x1C)
            .map(|mb| u64::from(mb & 0x7FFF_FFFF) * 1024 * 1024),
        // Bit 15: granularity, 0 = MiB, 1 = KiB.
        Some(w) if w & 0x8000 != 0 => Some(u64::from(w & 0x7FFF) * 1024),
        Some(w) => Some(u64::from(w) * 1024 * 1024),
    };
    // Speeds in MT/s; 0 unknown; 0xFFFF means "see the 3.3 extended dword".
    let speed = |off: usize, ext: usize| -> Option<u32> {
        match s.word(off)? {
            0 => None,
            0xFFFF => s.dword(ext).map(|d| d & 0x7FFF_FFFF).filter(|d| *d != 0),
            w => Some(u32::from(w)),
        }
    };
    Some(MemoryModule {
        locator: s.string(0x10),
        bank_locator: s.string(0x11),
        size_bytes,
        memory_type: s.byte(0x12).and_then(memory_type).map(str::to_owned),
        form_factor: s.byte(0x0E).and_then(form_factor).map(str::to_owned),
        speed_mts: speed(0x15, 0x54),
        configured_speed_mts: speed(0x20, 0x58),
        manufacturer: s.string(0x17),
        serial: s.string(0x18),
        part_number: s.string(0x1A),
    })
}

/// SMBIOS 3.7 table 76.
fn memory_type(t: u8) -> Option<&'static str> {
    Some(match t {
        0x01 => "Other",
        0x03 => "DRAM",
        0x04 => "EDRAM",
        0x05 => "VRAM",
        0x06 => "SRAM",
        0x07 => "RAM",
        0x08 => "ROM",
        0x09 => "Flash",
        0x0A => "EEPROM",
        0x0B => "FEPROM",
        0x0C => "EPROM",
        0x0D => "CDRAM",
        0x0E => "3DRAM",
        0x0F => "SDRAM",
        0x10 => "SGRAM",
        0x11 => "RDRAM",
        0x12 => "DDR",
        0x13 => "DDR2",
        0x14 => "DDR2 FB-DIMM",
        0x18 => "DDR3",
        0x19 => "FBD2",
        0x1A => "DDR4",
        0x1B => "LPDDR",
        0x1C => "LPDDR2",
        0x1D => "LPDDR3",
        0x1E => "LPDDR4",
        0x1F => "Logical non-volatile device",
        0x20 => "HBM",
        0x21 => "HBM2",
        0x22 => "DDR5",
        0x23 => "LPDDR5",
        0x24 => "HBM3",
        _ => return None,
    })
}

/// SMBIOS 3.7 table 75.
fn form_factor(t: u8) -> Option<&'static str> {
    Some(match t {
        0x01 => "Other",
        0x03 => "SIMM",
        0x04 => "SIP",
        0x05 => "Chip",
        0x06 => "DIP",
        0x07 => "ZIP",
        0x08 => "Proprietary Card",
        0x09 => "DIMM",
        0x0A => "TSOP",
        0x0B => "Row of chips",
        0x0C => "RIMM",
        0x0D => "SODIMM",
        0x0E => "SRIMM",
        0x0F => "FB-DIMM",
        0x10 => "Die",
        0x11 => "CAMM",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Builds one structure: header, formatted body, strings.
    fn st(kind: u8, handle: u16, body: &[u8], strings: &[&str]) -> Vec<u8> {
        let mut v = vec![kind, (4 + body.len()) as u8];
        v.extend_from_slice(&handle.to_le_bytes());
        v.extend_from_slice(body);
        if strings.is_empty() {
            v.extend_from_slice(&[0, 0]);
        } else {
            for s in strings {
                v.extend_from_slice(s.as_bytes());
                v.push(0);
            }
            v.push(0);
        }
        v
    }

    fn end() -> Vec<u8> {
        st(127, 0xFEFF, &[], &[])
    }

    #[test]
    fn uuid_byte_order_follows_the_version() {
        let raw = [
            0x44, 0x45, 0x4c, 0x4c, 0x42, 0x00, 0x10, 0x35, 0x80, 0x52, 0xb7, 0xc0, 0x4f, 0x4e,
            0x35, 0x32,
        ];
        assert_eq!(
            uuid(&raw, true).as_deref(),
            Some("4c4c4544-0042-3510-8052-b7c04f4e3532")
        );
        assert_eq!(
            uuid(&raw, false).as_deref(),
            Some("44454c4c-4200-1035-8052-b7c04f4e3532")
        );
        assert_eq!(uuid(&[0xFF; 16], true), None);
        assert_eq!(uuid(&[0; 16], true), None);
        assert_eq!(uuid(&[1; 15], true), None);
    }

    #[test]
    fn version_2_5_table_reads_the_uuid_big_endian() {
        let mut body = vec![1, 2, 3, 4];
        body.extend_from_slice(&[
            0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x99, 0xaa, 0xbb, 0xcc, 0xdd,
            0xee, 0xff,
        ]);
        let mut t = st(1, 1, &body, &["M", "P", "V", "S"]);
        t.extend(end());
        let old = decode(&t, Some(Version { major: 2, minor: 5 }));
        let new = decode(&t, Some(Version { major: 2, minor: 6 }));
        assert_eq!(
            old.system.and_then(|s| s.uuid).as_deref(),
            Some("00112233-4455-6677-8899-aabbccddeeff")
        );
        assert_eq!(
            new.system.and_then(|s| s.uuid).as_deref(),
            Some("33221100-5544-7766-8899-aabbccddeeff")
        );
    }

    #[test]
    fn short_structures_leave_later_fields_absent() {
        // A 2.0-era type 1: only the four strings, no UUID, no SKU.
        let mut t = st(1, 1, &[1, 2, 0, 3], &["Maker", "Box", "SER1"]);
        t.extend(end());
        let d = decode(&t, None);
        let sys = d.system.expect("system");
        assert_eq!(sys.manufacturer.as_deref(), Some("Maker"));
        assert_eq!(sys.product.as_deref(), Some("Box"));
        assert_eq!(sys.version, None);
        assert_eq!(sys.serial.as_deref(), Some("SER1"));
        assert_eq!(sys.uuid, None);
        assert_eq!(sys.sku, None);
        assert_eq!(d.problem, None);
    }

    #[test]
    fn string_index_past_the_set_and_placeholders_are_absent() {
        let mut t = st(
            2,
            2,
            &[1, 9, 2, 3, 0],
            &["Board Co", "To Be Filled By O.E.M.", "  Default string "],
        );
        t.extend(end());
        let b = decode(&t, None).baseboard.expect("baseboard");
        assert_eq!(b.manufacturer.as_deref(), Some("Board Co"));
        assert_eq!(b.product, None, "index 9 of 3 strings");
        assert_eq!(b.version, None, "placeholder");
        assert_eq!(b.serial, None, "placeholder with spaces");
        assert_eq!(b.asset_tag, None, "index 0");
    }

    #[test]
    fn memory_sizes_in_every_encoding() {
        let dev = |size: u16, ext: u32| {
            let mut body = vec![0u8; 0x54 - 4];
            body[0x0C - 4..0x0E - 4].copy_from_slice(&size.to_le_bytes());
            body[0x0E - 4] = 0x09; // DIMM
            body[0x10 - 4] = 1; // locator
            body[0x12 - 4] = 0x22; // DDR5
            body[0x15 - 4..0x17 - 4].copy_from_slice(&0xFFFFu16.to_le_bytes());
            body[0x1C - 4..0x20 - 4].copy_from_slice(&ext.to_le_bytes());
            body[0x20 - 4..0x22 - 4].copy_from_slice(&4800u16.to_le_bytes());
            body.extend_from_slice(&6400u32.to_le_bytes()); // 0x54 extended speed
            st(17, 0x1100, &body, &["DIMM A1"])
        };
        let mut t = Vec::new();
        t.extend(dev(0x4000, 0)); // 16 GiB in MiB
        t.extend(dev(0x8000 | 512, 0)); // 512 KiB
        t.extend(dev(0x7FFF, 131072)); // 128 GiB in the extended field
        t.extend(dev(0, 0)); // empty slot: skipped
        t.extend(dev(0xFFFF, 0)); // unknown size
        t.extend(end());
        let d = decode(&t, None);
        let sizes: Vec<_> = d.memory_modules.iter().map(|m| m.size_bytes).collect();
        assert_eq!(
            sizes,
            vec![Some(16 << 30), Some(512 << 10), Some(128u64 << 30), None]
        );
        let m = &d.memory_modules[0];
        assert_eq!(m.memory_type.as_deref(), Some("DDR5"));
        assert_eq!(m.form_factor.as_deref(), Some("DIMM"));
        assert_eq!(m.speed_mts, Some(6400), "0xFFFF: the 3.3 extended speed");
        assert_eq!(m.configured_speed_mts, Some(4800));
        assert_eq!(m.locator.as_deref(), Some("DIMM A1"));
    }

    #[test]
    fn malformed_tables_stop_with_a_problem_and_keep_what_came_before() {
        let mut good = st(0, 0, &[1, 2, 0, 0, 3], &["Vendor", "1.0", "01/01/2020"]);
        let keep = good.len();
        // Header cut short.
        good.extend_from_slice(&[1, 30]);
        let d = decode(&good, None);
        assert_eq!(d.bios.and_then(|b| b.vendor).as_deref(), Some("Vendor"));
        assert_eq!(d.problem, Some(Problem::HeaderTruncated { offset: keep }));

        // Zero padding after the last structure (no end-of-table structure) ends quietly.
        let mut padded = st(0, 0, &[1, 2, 0, 0, 3], &["Vendor", "1.0", "01/01/2020"]);
        padded.extend_from_slice(&[0; 64]);
        let d = decode(&padded, None);
        assert_eq!((d.structures, d.problem), (1, None));

        let cases: Vec<(Vec<u8>, Problem)> = vec![
            (
                vec![1, 2, 0, 0, 0, 0],
                Problem::LengthTooSmall {
                    offset: 0,
                    length: 2,
                },
            ),
            (
                vec![1, 200, 0, 0, 0, 0],
                Problem::FormattedTruncated {
                    offset: 0,
                    length: 200,
                },
            ),
            (
                vec![1, 4, 0, 0, b'a', 0],
                Problem::StringsUnterminated { offset: 0 },
            ),
            (
                vec![1, 4, 0, 0, 0],
                Problem::StringsUnterminated { offset: 0 },
            ),
        ];
        for (table, want) in cases {
            assert_eq!(decode(&table, None).problem, Some(want), "{table:?}");
        }
    }

    #[test]
    fn processors_populated_only_with_3_0_core_counts() {
        let cpu = |status: u8, cores: u8, cores2: u16| {
            let mut body = vec![0u8; 0x30 - 4];
            body[0x04 - 4] = 1; // socket designation
            body[0x07 - 4] = 2; // manufacturer
            body[0x10 - 4] = 3; // version
            body[0x14 - 4..0x16 - 4].copy_from_slice(&3800u16.to_le_bytes());
            body[0x16 - 4..0x18 - 4].copy_from_slice(&2100u16.to_le_bytes());
            body[0x18 - 4] = status;
            body[0x23 - 4] = cores;
            body[0x25 - 4] = 0xFF;
            body[0x2A - 4..0x2C - 4].copy_from_slice(&cores2.to_le_bytes());
            body[0x2E - 4..0x30 - 4].copy_from_slice(&(cores2 * 2).to_le_bytes());
            st(4, 0x400, &body, &["CPU1", "AMD", "EPYC 9654"])
        };
        let mut t = Vec::new();
        t.extend(cpu(0x41, 0xFF, 96)); // populated, enabled; 96 cores in the 3.0 word
        t.extend(cpu(0x00, 8, 0)); // empty socket
        t.extend(cpu(0x41, 16, 0)); // 16 cores in the byte, threads from the word (0)
        t.extend(end());
        let d = decode(&t, None);
        assert_eq!(d.processors.len(), 2);
        let p = &d.processors[0];
        assert_eq!(p.socket.as_deref(), Some("CPU1"));
        assert_eq!(p.manufacturer.as_deref(), Some("AMD"));
        assert_eq!(p.version.as_deref(), Some("EPYC 9654"));
        assert_eq!((p.cores, p.threads), (Some(96), Some(192)));
        assert_eq!(
            (p.max_speed_mhz, p.current_speed_mhz),
            (Some(3800), Some(2100))
        );
        assert_eq!(
            (d.processors[1].cores, d.processors[1].threads),
            (Some(16), None)
        );
    }

    #[test]
    fn the_walk_is_bounded() {
        let one = st(200, 0, &[], &[]);
        let table: Vec<u8> = one
            .iter()
            .copied()
            .cycle()
            .take(one.len() * (MAX_STRUCTURES + 10))
            .collect();
        let d = decode(&table, None);
        assert_eq!(d.structures, MAX_STRUCTURES);
        assert_eq!(d.problem, Some(Problem::TooManyStructures));
    }

    #[test]
    fn entry_points() {
        let mut e3 = vec![0u8; 0x18];
        e3[..5].copy_from_slice(b"_SM3_");
        e3[6] = 0x18;
        e3[7] = 3;
        e3[8] = 4;
        e3[0x0C..0x10].copy_from_slice(&4096u32.to_le_bytes());
        let sum = e3.iter().fold(0u8, |a, b| a.wrapping_add(*b));
        e3[5] = 0u8.wrapping_sub(sum);
        let ep = parse_entry_point(&e3).expect("valid");
        assert_eq!(ep.version, Version { major: 3, minor: 4 });
        assert_eq!(ep.table_len, 4096);
        assert!(ep.smbios3);
        e3[9] ^= 1;
        assert_eq!(parse_entry_point(&e3), Err(Problem::EntryChecksum));
        assert_eq!(
            parse_entry_point(&e3[..10]),
            Err(Problem::EntryTruncated {
                len: 10,
                declared: 0x18
            })
        );
        assert_eq!(
            parse_entry_point(b"_SM_"),
            Err(Problem::EntryTruncated {
                len: 4,
                declared: 0x1F
            })
        );
        assert_eq!(parse_entry_point(b"garbage"), Err(Problem::NoAnchor));
        assert_eq!(parse_entry_point(b""), Err(Problem::NoAnchor));
    }
}
