//! ISO boot: one source OSIE ISO, served per machine with that machine's kernel parameters
//! written over a fixed-size placeholder in the ISO's boot config (as Tinkerbell's Smee does for
//! `GET /iso/<mac>/hook.iso`). The ISO's size and layout never change, so a BMC reading it as
//! virtual media with `Range` requests gets consistent bytes whichever range it asks for.
//!
//! The placeholder (docs/netboot-iso.md): the marker ([`DEFAULT_MARKER`], or
//! `--iso-placeholder-marker`) occurring exactly once in the ISO, and the run of spaces right
//! after it; the region is both. osie/mkiso.sh writes it as the whole argument list of GRUB's
//! `linux` line. A machine's parameters, quoted for GRUB ([`grub_words`]), replace the region
//! and are padded with spaces to its length; its last byte always stays a space, so the
//! parameters never run into what follows. Parameters that do not fit are refused, never cut.
//!
//! The region is found once per version of the file ([`IsoSource::open`]: a file replaced by a
//! rename, or rewritten, has another inode, size or modification time and is scanned again),
//! never per request. Replace the ISO by renaming a new file over it: a request in flight keeps
//! reading the version it opened.

use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// The placeholder marker osie/mkiso.sh writes (`tink_iso_params=...`: unpatched, the kernel
/// passes it to init as one harmless environment variable).
pub const DEFAULT_MARKER: &str = "tink_iso_params=TINKERBELL_ISO_KERNEL_PARAMS_PLACEHOLDER";

/// The longest region read after the marker (the spaces of the placeholder).
pub const MAX_REGION: u64 = 64 * 1024;

const SCAN_CHUNK: usize = 1 << 20;

/// How the ISO route runs.
#[derive(Clone, Debug)]
pub struct IsoConfig {
    /// The source ISO (`--iso-source`).
    pub source: PathBuf,
    /// The placeholder marker (`--iso-placeholder-marker`).
    pub marker: String,
    /// The values of the kernel parameters, as Hegel's flags give them to the iPXE script.
    pub kernel: hegel::IpxeConfig,
}

impl IsoConfig {
    /// `source` with the default marker and `kernel`.
    pub fn new(source: PathBuf, kernel: hegel::IpxeConfig) -> Self {
        Self {
            source,
            marker: DEFAULT_MARKER.into(),
            kernel,
        }
    }
}

/// The placeholder region: `len` bytes from `offset`, the marker and the spaces after it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Placeholder {
    /// Where the marker starts.
    pub offset: u64,
    /// The marker's length plus the spaces after it.
    pub len: u64,
}

impl Placeholder {
    /// The most bytes of parameters it holds (its last byte stays a space).
    pub fn capacity(&self) -> usize {
        usize::try_from(self.len.saturating_sub(1)).unwrap_or(usize::MAX)
    }
}

/// Why the ISO cannot be served.
#[derive(Debug, thiserror::Error)]
pub enum IsoError {
    /// Opening or reading failed.
    #[error("--iso-source {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// Not a regular file.
    #[error("--iso-source {0}: not a regular file")]
    NotAFile(PathBuf),
    /// The marker is not in the file.
    #[error(
        "--iso-source {path}: the placeholder marker {marker:?} does not occur in it (build the \
         ISO with osie/mkiso.sh, or give its marker with --iso-placeholder-marker)"
    )]
    NoMarker {
        /// The file.
        path: PathBuf,
        /// The marker.
        marker: String,
    },
    /// The marker is in the file more than once: which one is the boot config's is unknown.
    #[error(
        "--iso-source {path}: the placeholder marker {marker:?} occurs more than once (at bytes \
         {offsets:?}); it must occur exactly once"
    )]
    ManyMarkers {
        /// The file.
        path: PathBuf,
        /// The marker.
        marker: String,
        /// The first offsets found.
        offsets: Vec<u64>,
    },
    /// An empty marker was configured.
    #[error("--iso-placeholder-marker must not be empty")]
    EmptyMarker,
}

/// Why a machine's parameters cannot go in the placeholder.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PatchError {
    /// A parameter GRUB would change on its way to the kernel.
    #[error(
        "kernel parameter {index} ({param:?}) contains a quote or a backslash, which GRUB passes \
         to the kernel escaped (the ISO would not give what the iPXE script gives)"
    )]
    Unquotable {
        /// Its position in the parameter list.
        index: usize,
        /// The parameter.
        param: String,
    },
    /// The parameters are longer than the placeholder.
    #[error(
        "the kernel parameters take {len} bytes and the ISO's placeholder holds {capacity} \
         (refused, not cut: shorten spec.osie.kernelParams or build the ISO with a larger \
         --placeholder-bytes)"
    )]
    TooLong {
        /// Their length, quoted for GRUB.
        len: usize,
        /// The placeholder's capacity.
        capacity: usize,
    },
}

/// Where `marker` starts in `r`, and the region (the marker and the spaces right after it).
/// Reads the whole file once, 1 MiB at a time.
pub fn find_placeholder<R: Read + Seek>(
    r: &mut R,
    path: &Path,
    marker: &[u8],
) -> Result<Placeholder, IsoError> {
    let io = |source| IsoError::Io {
        path: path.to_path_buf(),
        source,
    };
    let Some(&first) = marker.first() else {
        return Err(IsoError::EmptyMarker);
    };
    r.seek(SeekFrom::Start(0)).map_err(io)?;
    let keep = marker.len() - 1;
    let mut buf = vec![0u8; keep + SCAN_CHUNK];
    // `have` bytes in buf, the first of which is at file offset `base`.
    let (mut have, mut base) = (0usize, 0u64);
    let mut found: Vec<u64> = Vec::new();
    loop {
        let n = r.read(&mut buf[have..]).map_err(io)?;
        if n == 0 {
            break;
        }
        have += n;
        let hay = &buf[..have];
        let mut i = 0;
        while i + marker.len() <= have {
            match hay[i..=have - marker.len()]
                .iter()
                .position(|&b| b == first)
            {
                None => break,
                Some(p) => {
                    let at = i + p;
                    if &hay[at..at + marker.len()] == marker {
                        found.push(base + at as u64);
                    }
                    i = at + 1;
                }
            }
        }
        if found.len() > 1 {
            break;
        }
        // Keep the tail a marker could start in.
        let tail = have.min(keep);
        buf.copy_within(have - tail..have, 0);
        base += (have - tail) as u64;
        have = tail;
    }
    let offset = match found.as_slice() {
        [] => {
            return Err(IsoError::NoMarker {
                path: path.to_path_buf(),
                marker: String::from_utf8_lossy(marker).into_owned(),
            });
        }
        [one] => *one,
        many => {
            return Err(IsoError::ManyMarkers {
                path: path.to_path_buf(),
                marker: String::from_utf8_lossy(marker).into_owned(),
                offsets: many.to_vec(),
            });
        }
    };
    let after = offset + marker.len() as u64;
    r.seek(SeekFrom::Start(after)).map_err(io)?;
    let mut spaces = Vec::new();
    r.take(MAX_REGION).read_to_end(&mut spaces).map_err(io)?;
    let pad = spaces.iter().take_while(|&&b| b == b' ').count();
    Ok(Placeholder {
        offset,
        len: marker.len() as u64 + pad as u64,
    })
}

/// `params` as words of a GRUB `linux` line: a word with nothing but letters, digits and
/// `-_.,:=/+@%` as it is, any other in single quotes (GRUB would otherwise expand `$`, or end
/// the command at `;`), each reaching the kernel unchanged. Quotes and backslashes are refused:
/// GRUB escapes them with a backslash in the command line it gives the kernel. The parameters
/// come from [`hegel::ipxe::kernel_params`], which refuses empty ones, whitespace and control
/// characters.
pub fn grub_words(params: &[String]) -> Result<String, PatchError> {
    let mut line = String::new();
    for (index, p) in params.iter().enumerate() {
        if p.contains(['\'', '"', '\\']) {
            return Err(PatchError::Unquotable {
                index,
                param: p.clone(),
            });
        }
        if !line.is_empty() {
            line.push(' ');
        }
        let plain = p
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.,:=/+@%".contains(&b));
        if plain {
            line.push_str(p);
        } else {
            line.push('\'');
            line.push_str(p);
            line.push('\'');
        }
    }
    Ok(line)
}

/// The bytes that replace the region: `params` quoted for GRUB, then spaces to its length.
pub fn patch(params: &[String], placeholder: Placeholder) -> Result<Vec<u8>, PatchError> {
    let line = grub_words(params)?;
    let capacity = placeholder.capacity();
    if line.len() > capacity {
        return Err(PatchError::TooLong {
            len: line.len(),
            capacity,
        });
    }
    let mut bytes = line.into_bytes();
    bytes.resize(usize::try_from(placeholder.len).unwrap_or(capacity), b' ');
    Ok(bytes)
}

/// Writes over `buf`, the file's bytes from offset `at`, the part of `patch` (the region's new
/// bytes, from offset `region`) that falls inside it.
pub fn overlay(buf: &mut [u8], at: u64, region: u64, patch: &[u8]) {
    let buf_end = at.saturating_add(buf.len() as u64);
    let region_end = region.saturating_add(patch.len() as u64);
    let start = at.max(region);
    let end = buf_end.min(region_end);
    if start >= end {
        return;
    }
    // All four differences are below the slices' lengths, so they fit in usize.
    let (b0, b1) = ((start - at) as usize, (end - at) as usize);
    let (p0, p1) = ((start - region) as usize, (end - region) as usize);
    buf[b0..b1].copy_from_slice(&patch[p0..p1]);
}

/// What identifies one version of the file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Version {
    dev: u64,
    ino: u64,
    len: u64,
    mtime: (i64, i64),
}

impl Version {
    fn of(meta: &std::fs::Metadata) -> Self {
        use std::os::unix::fs::MetadataExt as _;
        Self {
            dev: meta.dev(),
            ino: meta.ino(),
            len: meta.len(),
            mtime: (meta.mtime(), meta.mtime_nsec()),
        }
    }
}

#[derive(Debug)]
struct Scanned {
    version: Version,
    placeholder: Placeholder,
}

/// The source ISO and where its placeholder is, per version of the file.
#[derive(Debug)]
pub struct IsoSource {
    path: PathBuf,
    marker: Vec<u8>,
    scanned: Mutex<Option<Arc<Scanned>>>,
    // One scan at a time: requests arriving while the file is scanned wait for its result.
    scanning: tokio::sync::Mutex<()>,
}

/// An opened version of the ISO.
#[derive(Debug)]
pub struct Opened {
    /// The file, read from its start.
    pub file: std::fs::File,
    /// Its length.
    pub len: u64,
    /// Its placeholder.
    pub placeholder: Placeholder,
}

impl IsoSource {
    /// Opens and scans `config.source` (blocking: at start-up, so a missing file or marker
    /// stops the service with the reason).
    pub fn load(config: &IsoConfig) -> Result<Self, IsoError> {
        if config.marker.is_empty() {
            return Err(IsoError::EmptyMarker);
        }
        let source = Self {
            path: config.source.clone(),
            marker: config.marker.as_bytes().to_vec(),
            scanned: Mutex::new(None),
            scanning: tokio::sync::Mutex::new(()),
        };
        let opened = source.open_blocking(None)?;
        tracing::info!(
            path = %source.path.display(),
            len = opened.len,
            placeholder_offset = opened.placeholder.offset,
            placeholder_len = opened.placeholder.len,
            "ISO loaded"
        );
        Ok(source)
    }

    /// The file served.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn cached(&self) -> Option<Arc<Scanned>> {
        self.scanned.lock().map(|g| g.clone()).unwrap_or_default()
    }

    /// Opens the file; scans it unless `known` is this version's.
    fn open_blocking(&self, known: Option<Arc<Scanned>>) -> Result<Opened, IsoError> {
        let io = |source| IsoError::Io {
            path: self.path.clone(),
            source,
        };
        let mut file = std::fs::File::open(&self.path).map_err(io)?;
        let meta = file.metadata().map_err(io)?;
        if !meta.is_file() {
            return Err(IsoError::NotAFile(self.path.clone()));
        }
        let version = Version::of(&meta);
        let scanned = match known {
            Some(s) if s.version == version => s,
            _ => {
                let placeholder = find_placeholder(&mut file, &self.path, &self.marker)?;
                file.seek(SeekFrom::Start(0)).map_err(io)?;
                let s = Arc::new(Scanned {
                    version,
                    placeholder,
                });
                if let Ok(mut g) = self.scanned.lock() {
                    *g = Some(s.clone());
                }
                s
            }
        };
        Ok(Opened {
            file,
            len: version.len,
            placeholder: scanned.placeholder,
        })
    }

    /// Opens the current version of the file (on the blocking pool), with its placeholder: the
    /// one found before when the file is unchanged, else found now.
    pub async fn open(self: &Arc<Self>) -> Result<Opened, IsoError> {
        let this = self.clone();
        let known = self.cached();
        let first = tokio::task::spawn_blocking(move || {
            // Fast path: the file is unchanged. A changed file is scanned below, once.
            let mut file = std::fs::File::open(&this.path).ok()?;
            let meta = file.metadata().ok()?;
            let s = known.filter(|s| meta.is_file() && s.version == Version::of(&meta))?;
            file.seek(SeekFrom::Start(0)).ok()?;
            Some(Opened {
                file,
                len: s.version.len,
                placeholder: s.placeholder,
            })
        })
        .await
        .ok()
        .flatten();
        if let Some(o) = first {
            return Ok(o);
        }
        let _one = self.scanning.lock().await;
        let this = self.clone();
        let known = self.cached();
        let path = self.path.clone();
        let opened = tokio::task::spawn_blocking(move || this.open_blocking(known))
            .await
            .map_err(|e| IsoError::Io {
                path,
                source: std::io::Error::other(e.to_string()),
            })??;
        tracing::info!(
            path = %self.path.display(),
            len = opened.len,
            placeholder_offset = opened.placeholder.offset,
            placeholder_len = opened.placeholder.len,
            "ISO (re)loaded"
        );
        Ok(opened)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::io::Cursor;

    const M: &[u8] = b"MARKER=x";

    fn iso(len: usize, at: usize, pad: usize) -> Vec<u8> {
        let mut d: Vec<u8> = (0..len).map(|i| (i % 251) as u8 | 1).collect();
        d[at..at + M.len()].copy_from_slice(M);
        for b in &mut d[at + M.len()..at + M.len() + pad] {
            *b = b' ';
        }
        d[at + M.len() + pad] = b'\n';
        d
    }

    fn find(d: &[u8]) -> Result<Placeholder, IsoError> {
        find_placeholder(&mut Cursor::new(d), Path::new("t.iso"), M)
    }

    #[test]
    fn the_marker_is_found_anywhere_even_across_chunks() {
        for at in [0, 7, SCAN_CHUNK - 3, SCAN_CHUNK, 2 * SCAN_CHUNK - 1] {
            let d = iso(3 * SCAN_CHUNK, at, 100);
            assert_eq!(
                find(&d).unwrap(),
                Placeholder {
                    offset: at as u64,
                    len: (M.len() + 100) as u64
                },
                "{at}"
            );
        }
    }

    #[test]
    fn no_marker_or_two_markers_are_refused() {
        let d: Vec<u8> = vec![1; 5000];
        assert!(matches!(find(&d), Err(IsoError::NoMarker { .. })));
        let mut d = iso(3 * SCAN_CHUNK, 10, 4);
        d[SCAN_CHUNK + 5..SCAN_CHUNK + 5 + M.len()].copy_from_slice(M);
        let e = find(&d).unwrap_err();
        assert!(
            e.to_string()
                .contains("occurs more than once (at bytes [10, "),
            "{e}"
        );
        assert!(matches!(
            find_placeholder(&mut Cursor::new(&d), Path::new("t"), b""),
            Err(IsoError::EmptyMarker)
        ));
    }

    #[test]
    fn grub_quoting_and_refusals() {
        let p = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            grub_words(&p(&[
                "worker_id=aa:bb",
                "console=ttyS1,115200",
                "a=$x;b",
                "ü=1"
            ]))
            .unwrap(),
            "worker_id=aa:bb console=ttyS1,115200 'a=$x;b' 'ü=1'"
        );
        assert_eq!(
            grub_words(&p(&["ok", "x=\"y\""])).unwrap_err(),
            PatchError::Unquotable {
                index: 1,
                param: "x=\"y\"".into()
            }
        );
        assert!(grub_words(&p(&["a\\b"])).is_err());
        assert!(grub_words(&p(&["it's"])).is_err());
    }

    #[test]
    fn patches_are_padded_and_never_cut() {
        let ph = Placeholder { offset: 0, len: 8 };
        assert_eq!(ph.capacity(), 7);
        assert_eq!(patch(&["a=1".into()], ph).unwrap(), b"a=1     ");
        assert_eq!(patch(&["abcdefg".into()], ph).unwrap(), b"abcdefg ");
        assert_eq!(
            patch(&["abcd".into(), "e=f".into()], ph).unwrap_err(),
            PatchError::TooLong {
                len: 8,
                capacity: 7
            }
        );
    }

    proptest! {
        /// Any range of the served file, read in any chunk size, is the same range of the
        /// whole file patched at once: ranges starting and ending before, inside, across and
        /// after the placeholder.
        #[test]
        fn overlaid_ranges_equal_the_patched_file(
            len in 1usize..600,
            region_at in 0usize..600,
            region_len in 1usize..80,
            a in 0usize..700,
            b in 0usize..700,
            chunk in 1usize..90,
        ) {
            let region_at = region_at % len;
            let region_len = region_len.min(len - region_at);
            let file: Vec<u8> = (0..len).map(|i| (i * 7 % 256) as u8).collect();
            let new: Vec<u8> = (0..region_len).map(|i| b'a' + (i % 26) as u8).collect();
            let mut whole = file.clone();
            whole[region_at..region_at + region_len].copy_from_slice(&new);
            let (start, end) = (a.min(b) % len, a.max(b) % len);
            let (start, end) = (start.min(end), start.max(end) + 1);
            let mut served = Vec::new();
            let mut at = start;
            while at < end {
                let n = chunk.min(end - at);
                let mut buf = file[at..at + n].to_vec();
                overlay(&mut buf, at as u64, region_at as u64, &new);
                served.extend_from_slice(&buf);
                at += n;
            }
            prop_assert_eq!(&served[..], &whole[start..end]);
        }

        /// The marker is found wherever it is, whatever surrounds it.
        #[test]
        fn the_marker_is_found_at_any_offset(len in 64usize..4000, at in 0usize..4000, pad in 0usize..40) {
            let at = at % (len - M.len() - pad - 1).max(1);
            let d = iso(len.max(at + M.len() + pad + 1), at, pad);
            prop_assert_eq!(find(&d).unwrap(), Placeholder { offset: at as u64, len: (M.len() + pad) as u64 });
        }
    }
}
