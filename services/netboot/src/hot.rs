//! The files HTTP serves most, kept in memory: every machine that boots fetches the same OSIE
//! kernel and initramfs (tens of MB), and a copy in memory is sent as slices of one buffer
//! straight to the socket, with no read from the file and no copy per chunk (issue 34;
//! BENCHMARKS.md, "Boot files served fast", compares it with nginx's `sendfile`).
//!
//! Bounded: at most [`HotConfig::max_bytes`] in all (least recently used files leave first), a
//! file larger than [`HotConfig::max_file_bytes`] or empty is never kept, and at most
//! [`MAX_LOADING`] files are read in at once. A response holds its copy while it is sent, so a
//! copy that was replaced or evicted lives on until its last response ends.
//!
//! Never stale: every request opens the file as before (the root's rules), and the copy is used
//! only when the open file is the same one: device, inode, length and modification time equal
//! to those read when it was loaded, and checked again after the load. A file replaced (a new
//! file renamed over it, as build tools do) or rewritten is read from disk and loaded anew. A
//! file rewritten in place without its modification time changing is the one case not seen.
//!
//! The first GET of a file reads it whole into memory and is then served from it; GETs that
//! arrive while it is being read are streamed from disk. HEAD never loads.

use std::collections::{HashMap, HashSet};
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use bytes::Bytes;
use tokio::io::AsyncReadExt as _;

/// Files read into memory at once, at most.
pub const MAX_LOADING: usize = 4;

/// How much the cache holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HotConfig {
    /// Bytes of all the files kept; 0 turns the cache off.
    pub max_bytes: u64,
    /// The largest file kept.
    pub max_file_bytes: u64,
}

impl HotConfig {
    /// `mib` MiB in all, files of up to half of it.
    pub fn mib(mib: u64) -> Self {
        let max_bytes = mib.saturating_mul(1 << 20);
        Self {
            max_bytes,
            max_file_bytes: max_bytes / 2,
        }
    }
}

impl Default for HotConfig {
    /// 256 MiB, files of up to 128 MiB (the OSIE's kernel and initramfs, several times over).
    fn default() -> Self {
        Self::mib(256)
    }
}

/// What identifies one version of a file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Stamp {
    dev: u64,
    ino: u64,
    len: u64,
    modified: Option<SystemTime>,
}

impl Stamp {
    pub(crate) fn of(meta: &std::fs::Metadata) -> Self {
        Self {
            dev: meta.dev(),
            ino: meta.ino(),
            len: meta.len(),
            modified: meta.modified().ok(),
        }
    }
}

struct Entry {
    stamp: Stamp,
    bytes: Bytes,
    used: u64,
}

#[derive(Default)]
struct Inner {
    entries: HashMap<PathBuf, Entry>,
    total: u64,
    loading: HashSet<PathBuf>,
    clock: u64,
}

/// The cache (shared by the HTTP handlers).
pub struct HotFiles {
    config: HotConfig,
    inner: Mutex<Inner>,
}

/// What [`HotFiles::lookup`] found.
pub enum Lookup {
    /// The file's bytes, current.
    Hit(Bytes),
    /// Not kept: the caller reads it in with [`Loader::load`].
    Load(Loader),
    /// Not kept, and not to be loaded now (too large, being loaded, off): read it from disk.
    Miss,
}

impl HotFiles {
    /// An empty cache.
    pub fn new(config: HotConfig) -> Arc<Self> {
        Arc::new(Self {
            config,
            inner: Mutex::new(Inner::default()),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The kept copy of the file at `path` if it is the version `meta` describes.
    pub fn lookup(self: &Arc<Self>, path: &Path, meta: &std::fs::Metadata) -> Lookup {
        let stamp = Stamp::of(meta);
        let mut inner = self.lock();
        inner.clock += 1;
        let now = inner.clock;
        if let Some(e) = inner.entries.get_mut(path) {
            if e.stamp == stamp {
                e.used = now;
                return Lookup::Hit(e.bytes.clone());
            }
            if let Some(old) = inner.entries.remove(path) {
                inner.total -= old.stamp.len;
                tracing::debug!(path = %path.display(), "HTTP cache: the file changed; dropped");
            }
        }
        if stamp.len == 0
            || stamp.len > self.config.max_file_bytes
            || stamp.len > self.config.max_bytes
            || inner.loading.len() >= MAX_LOADING
            || !inner.loading.insert(path.to_path_buf())
        {
            return Lookup::Miss;
        }
        Lookup::Load(Loader {
            hot: self.clone(),
            path: path.to_path_buf(),
            stamp,
        })
    }

    /// Bytes kept now.
    pub fn bytes(&self) -> u64 {
        self.lock().total
    }

    fn insert(&self, path: PathBuf, stamp: Stamp, bytes: Bytes) {
        let mut inner = self.lock();
        // Least recently used out until it fits.
        while inner.total + stamp.len > self.config.max_bytes {
            let Some(oldest) = inner
                .entries
                .iter()
                .min_by_key(|(_, e)| e.used)
                .map(|(p, _)| p.clone())
            else {
                return;
            };
            if let Some(e) = inner.entries.remove(&oldest) {
                inner.total -= e.stamp.len;
                tracing::debug!(path = %oldest.display(), "HTTP cache: evicted");
            }
        }
        inner.clock += 1;
        let used = inner.clock;
        inner.total += stamp.len;
        if let Some(old) = inner.entries.insert(path, Entry { stamp, bytes, used }) {
            inner.total -= old.stamp.len;
        }
    }
}

/// The right to read one file into the cache; another request for it meanwhile is a
/// [`Lookup::Miss`]. Dropped without loading, it gives the right back.
pub struct Loader {
    hot: Arc<HotFiles>,
    path: PathBuf,
    stamp: Stamp,
}

impl Loader {
    /// Reads `file` (open at its start) whole and keeps it, if it is still the version looked
    /// up once read. `None`: read error or a changed file (the caller reads from disk; the
    /// file's position is then anywhere).
    pub async fn load(self, file: &mut tokio::fs::File) -> Option<Bytes> {
        let len = usize::try_from(self.stamp.len).ok()?;
        let mut buf = Vec::with_capacity(len);
        let read = (&mut *file)
            .take(self.stamp.len + 1)
            .read_to_end(&mut buf)
            .await;
        let after = file.metadata().await.map(|m| Stamp::of(&m));
        match (read, after) {
            (Ok(n), Ok(after)) if n == len && after == self.stamp => {
                let bytes = Bytes::from(buf);
                tracing::debug!(path = %self.path.display(), len, "HTTP cache: loaded");
                self.hot
                    .insert(self.path.clone(), self.stamp, bytes.clone());
                Some(bytes)
            }
            (Err(error), _) | (_, Err(error)) => {
                tracing::warn!(path = %self.path.display(), %error, "HTTP cache: read error");
                None
            }
            _ => {
                tracing::debug!(path = %self.path.display(), "HTTP cache: the file changed while read");
                None
            }
        }
    }
}

impl Drop for Loader {
    fn drop(&mut self) {
        self.hot.lock().loading.remove(&self.path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn open(path: &Path) -> (tokio::fs::File, std::fs::Metadata) {
        let f = tokio::fs::File::open(path).await.unwrap();
        let m = f.metadata().await.unwrap();
        (f, m)
    }

    #[tokio::test]
    async fn loads_once_serves_current_versions_and_stays_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b, big) = (
            dir.path().join("a"),
            dir.path().join("b"),
            dir.path().join("big"),
        );
        std::fs::write(&a, vec![1u8; 400]).unwrap();
        std::fs::write(&b, vec![2u8; 400]).unwrap();
        std::fs::write(&big, vec![3u8; 600]).unwrap();
        let hot = HotFiles::new(HotConfig {
            max_bytes: 1000,
            max_file_bytes: 500,
        });

        let (mut f, m) = open(&a).await;
        let Lookup::Load(loader) = hot.lookup(&a, &m) else {
            panic!("first lookup loads")
        };
        // Being loaded: others read from disk.
        assert!(matches!(hot.lookup(&a, &m), Lookup::Miss));
        assert_eq!(loader.load(&mut f).await.unwrap(), vec![1u8; 400]);
        assert!(matches!(hot.lookup(&a, &m), Lookup::Hit(x) if x == vec![1u8; 400]));
        // Too large for one file.
        let (_, m) = open(&big).await;
        assert!(matches!(hot.lookup(&big, &m), Lookup::Miss));

        // A new file renamed over it: not the kept copy.
        let tmp = dir.path().join("tmp");
        std::fs::write(&tmp, vec![9u8; 300]).unwrap();
        std::fs::rename(&tmp, &a).unwrap();
        let (mut f, m) = open(&a).await;
        let Lookup::Load(loader) = hot.lookup(&a, &m) else {
            panic!("a changed file loads again")
        };
        assert_eq!(hot.bytes(), 0, "the old copy was dropped");
        assert_eq!(loader.load(&mut f).await.unwrap(), vec![9u8; 300]);

        // b fits beside a (700 of 1000); a third file evicts the least recently used.
        let (mut f, mb) = open(&b).await;
        let Lookup::Load(loader) = hot.lookup(&b, &mb) else {
            panic!()
        };
        loader.load(&mut f).await.unwrap();
        assert_eq!(hot.bytes(), 700);
        let c = dir.path().join("c");
        std::fs::write(&c, vec![4u8; 450]).unwrap();
        assert!(matches!(hot.lookup(&b, &mb), Lookup::Hit(_)), "b used last");
        let (mut f, mc) = open(&c).await;
        let Lookup::Load(loader) = hot.lookup(&c, &mc) else {
            panic!()
        };
        loader.load(&mut f).await.unwrap();
        assert_eq!(hot.bytes(), 850, "a (300) left, b and c stay");
        assert!(hot.bytes() <= 1000);
        assert!(matches!(hot.lookup(&b, &mb), Lookup::Hit(_)));

        // A loader dropped unused gives the slot back.
        let (_, m) = open(&a).await;
        let Lookup::Load(loader) = hot.lookup(&a, &m) else {
            panic!()
        };
        drop(loader);
        assert!(matches!(hot.lookup(&a, &m), Lookup::Load(_)));
    }

    #[tokio::test]
    async fn off_when_zero() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a");
        std::fs::write(&a, b"x").unwrap();
        let hot = HotFiles::new(HotConfig::mib(0));
        let (_, m) = open(&a).await;
        assert!(matches!(hot.lookup(&a, &m), Lookup::Miss));
    }
}
