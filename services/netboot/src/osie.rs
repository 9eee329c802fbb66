//! Versioned OSIE releases: `/osie/<version>/<file>` over HTTP and TFTP, each file checked
//! against its release's `SHA256SUMS` before it is first served (osie/README.md, "Versioned
//! releases").
//!
//! A release is a folder `<version>/` holding the artifacts (`vmlinuz-x86_64`,
//! `initramfs-x86_64`, later `vmlinuz-aarch64`, ...), the manifest `osie.json` and
//! `SHA256SUMS` in `sha256sum`'s format, which lists every file served from the folder.
//! `tinkctl osie release` writes one.
//!
//! - [`Releases`] serves a folder of releases (`--osie-dir`, or the cache of `--osie-url`). A
//!   file is served only if `SHA256SUMS` lists it and its SHA-256 matches; the check is made once
//!   per version of the file on disk (device, inode, length, modification time), on the open
//!   file that is then served, so a file replaced later is checked again. `SHA256SUMS` itself is
//!   served as is (another netboot can use this one as its `--osie-url`).
//! - [`fetch`] keeps one release of a URL in a cache folder: `SHA256SUMS` and each listed file
//!   fetched once, through a temporary file renamed into place only once its SHA-256 matches.
//!   A restart with a complete cache checks the cached files and fetches nothing; a missing,
//!   partial or corrupt cached file is fetched again; a mismatch from the URL is logged,
//!   counted, and retried with a growing pause, and the bad bytes never reach the served name.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sha2::{Digest as _, Sha256};

use crate::files::{FileError, Opened, Root};
use crate::hot::Stamp;
use crate::metrics::Metrics;

/// The checksum list of a release, in `sha256sum`'s format.
pub const SUMS: &str = "SHA256SUMS";
/// The URL and TFTP path prefix the releases are served under.
pub const PREFIX: &str = "osie/";
/// The largest `SHA256SUMS` read (a release lists a handful of files).
pub const MAX_SUMS_BYTES: usize = 64 * 1024;
/// The largest release file fetched from `--osie-url` (an OSIE initramfs is a few hundred MiB):
/// an upstream that sends without end is cut here, before it fills the cache's disk.
pub const MAX_FILE_BYTES: u64 = 4 << 30;

/// A line of `SHA256SUMS` that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{file} line {line}: {why}")]
pub struct SumsError {
    /// Where the list came from.
    pub file: String,
    /// 1-based line number.
    pub line: usize,
    /// What is wrong.
    pub why: String,
}

/// A parsed `SHA256SUMS`: file name to lower-case hex SHA-256, in name order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Sums {
    entries: BTreeMap<String, String>,
}

impl Sums {
    /// Parses `sha256sum` output: `<64 hex digits> <' ' or '*'><name>` per line. Names are one
    /// path component (no `/`, no `..`, not hidden); a name listed twice, a bad digest, and an
    /// empty list are refused, naming the line. `what` names the list in errors.
    pub fn parse(text: &str, what: &str) -> Result<Self, SumsError> {
        let err = |line: usize, why: String| SumsError {
            file: what.to_string(),
            line,
            why,
        };
        let mut entries = BTreeMap::new();
        for (i, raw) in text.lines().enumerate() {
            let n = i + 1;
            let line = raw.strip_suffix('\r').unwrap_or(raw);
            if line.trim().is_empty() {
                continue;
            }
            let (digest, rest) = line.split_at_checked(64).ok_or_else(|| {
                err(
                    n,
                    "expected `<64 hex digits>  <file name>` (sha256sum's format)".into(),
                )
            })?;
            if !digest.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(err(
                    n,
                    format!("{digest:?} is not a SHA-256 digest (64 hex digits)"),
                ));
            }
            let name = rest
                .strip_prefix("  ")
                .or_else(|| rest.strip_prefix(" *"))
                .ok_or_else(|| {
                    err(
                        n,
                        "expected two spaces (or ` *`) between the digest and the file name".into(),
                    )
                })?;
            check_name(name).map_err(|why| err(n, why))?;
            if entries
                .insert(name.to_string(), digest.to_ascii_lowercase())
                .is_some()
            {
                return Err(err(n, format!("{name:?} is listed twice")));
            }
        }
        if entries.is_empty() {
            return Err(err(0, "lists no file".into()));
        }
        Ok(Self { entries })
    }

    /// The expected digest of `name`.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.entries.get(name).map(String::as_str)
    }

    /// Every `(name, digest)`, in name order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.entries.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    /// How many files are listed.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no file is listed (never, for a parsed list).
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// A file name in a release: one path component, not hidden, printable.
pub fn check_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("empty file name".into());
    }
    if name.contains('/') || name.contains('\\') {
        return Err(format!(
            "{name:?}: file names are one path component (no `/`)"
        ));
    }
    if name == "." || name == ".." || name.starts_with('.') {
        return Err(format!(
            "{name:?}: `.`, `..` and hidden names are not served"
        ));
    }
    if name.chars().any(char::is_control) || name.len() > 255 {
        return Err(format!(
            "{name:?}: control characters or longer than 255 bytes"
        ));
    }
    Ok(())
}

/// A release version: letters, digits and `.`, `_`, `+`, `-`, at most 128, not starting with
/// `.` (`v0.4.0-3-gabc1234-linux-6.1.0-56`).
pub fn check_version(version: &str) -> Result<(), String> {
    let ok = !version.is_empty()
        && version.len() <= 128
        && !version.starts_with('.')
        && version
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'+' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{version:?} is not a release version (letters, digits, `.`, `_`, `+`, `-`; at \
             most 128; not starting with `.`)"
        ))
    }
}

/// Lower-case hex.
pub fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    bytes.iter().fold(String::with_capacity(64), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

/// The SHA-256 of `file`'s whole content (read by position: the file's own position is not
/// moved), on the blocking pool.
pub async fn sha256_of(file: &tokio::fs::File) -> std::io::Result<String> {
    let std_file = file.try_clone().await?.into_std().await;
    tokio::task::spawn_blocking(move || {
        use std::os::unix::fs::FileExt as _;
        let mut hasher = Sha256::new();
        let mut buf = vec![0u8; 1 << 20];
        let mut at = 0u64;
        loop {
            let n = std_file.read_at(&mut buf, at)?;
            if n == 0 {
                break;
            }
            hasher.update(&buf[..n]);
            at += n as u64;
        }
        Ok(hex(&hasher.finalize()))
    })
    .await
    .map_err(std::io::Error::other)?
}

/// The SHA-256 of the file at `path`.
pub async fn sha256_path(path: &Path) -> std::io::Result<String> {
    let f = tokio::fs::File::open(path).await?;
    sha256_of(&f).await
}

/// A folder of releases, served under [`PREFIX`], every file checked before it is served.
pub struct Releases {
    root: Root,
    metrics: Metrics,
    /// The versions of files found intact, by real path.
    verified: Mutex<HashMap<PathBuf, Stamp>>,
    /// Parsed `SHA256SUMS` by version, with the version of the file they were read from.
    sums: Mutex<HashMap<String, (Stamp, Arc<Sums>)>>,
    /// One file hashed at a time: concurrent first requests wait for one check.
    hashing: tokio::sync::Mutex<()>,
}

impl std::fmt::Debug for Releases {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Releases")
            .field("dir", &self.root.dir())
            .finish_non_exhaustive()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Releases {
    /// The releases in `dir` (which must exist). Reads the file system: call it from the
    /// blocking pool, or use [`Releases::open`].
    pub fn new(dir: &Path, metrics: Metrics) -> std::io::Result<Self> {
        let bad = |e: std::io::Error| {
            std::io::Error::new(
                e.kind(),
                format!(
                    "OSIE releases folder {} (--osie-dir, or --osie-cache): {e}",
                    dir.display()
                ),
            )
        };
        let meta = std::fs::metadata(dir).map_err(bad)?;
        if !meta.is_dir() {
            return Err(bad(std::io::Error::new(
                std::io::ErrorKind::NotADirectory,
                "not a directory",
            )));
        }
        let root = Root::new(dir).map_err(bad)?;
        Ok(Self {
            root,
            metrics,
            verified: Mutex::new(HashMap::new()),
            sums: Mutex::new(HashMap::new()),
            hashing: tokio::sync::Mutex::new(()),
        })
    }

    /// [`Releases::new`] on the blocking pool.
    pub async fn open(dir: &Path, metrics: Metrics) -> std::io::Result<Self> {
        let dir = dir.to_path_buf();
        tokio::task::spawn_blocking(move || Self::new(&dir, metrics))
            .await
            .map_err(std::io::Error::other)?
    }

    /// The folder.
    pub fn dir(&self) -> &Path {
        self.root.dir()
    }

    /// The parsed `SHA256SUMS` of `version`.
    pub async fn sums(&self, version: &str) -> Result<Arc<Sums>, FileError> {
        check_version(version).map_err(FileError::Unverified)?;
        let name = format!("{version}/{SUMS}");
        let mut opened = self.root.open_meta(&name).await?;
        let stamp = Stamp::of(&opened.meta);
        if let Some((s, sums)) = lock(&self.sums).get(version)
            && *s == stamp
        {
            return Ok(sums.clone());
        }
        if opened.meta.len() > MAX_SUMS_BYTES as u64 {
            return Err(FileError::Unverified(format!(
                "{name}: larger than {MAX_SUMS_BYTES} bytes"
            )));
        }
        let mut text = String::new();
        use tokio::io::AsyncReadExt as _;
        opened
            .file
            .read_to_string(&mut text)
            .await
            .map_err(|e| FileError::Unverified(format!("{name}: {e}")))?;
        let sums = Arc::new(Sums::parse(&text, &name).map_err(|e| {
            self.metrics.osie_verify_failure("bad_sums");
            tracing::error!(error = %e, "OSIE release: SHA256SUMS cannot be read; the release is not served");
            FileError::Unverified(e.to_string())
        })?);
        lock(&self.sums).insert(version.to_string(), (stamp, sums.clone()));
        Ok(sums)
    }

    /// Opens `rest` (`<version>/<file>`, the path after [`PREFIX`]) if its release lists it and
    /// its content matches.
    pub async fn open_meta(&self, rest: &str) -> Result<Opened, FileError> {
        let Some((version, file)) = rest.split_once('/') else {
            return Err(FileError::NotFound);
        };
        check_version(version).map_err(|_| FileError::Refused)?;
        check_name(file).map_err(|_| FileError::Refused)?;
        let sums = self.sums(version).await?;
        if file == SUMS {
            return self.root.open_meta(rest).await;
        }
        let Some(expected) = sums.get(file) else {
            self.metrics.osie_verify_failure("not_listed");
            tracing::warn!(
                version,
                file,
                "OSIE release: file not listed in SHA256SUMS; refused"
            );
            return Err(FileError::Unverified(format!(
                "{PREFIX}{rest}: not listed in {PREFIX}{version}/{SUMS}; not served"
            )));
        };
        let opened = self.root.open_meta(rest).await?;
        let stamp = Stamp::of(&opened.meta);
        if self.is_verified(&opened.path, stamp) {
            return Ok(opened);
        }
        let _one = self.hashing.lock().await;
        if self.is_verified(&opened.path, stamp) {
            return Ok(opened);
        }
        let got = sha256_of(&opened.file).await.map_err(FileError::Io)?;
        if got != expected {
            self.metrics.osie_verify_failure("mismatch");
            tracing::error!(
                file = %format!("{PREFIX}{rest}"),
                expected,
                got,
                "OSIE release: checksum mismatch; the file is not served"
            );
            return Err(FileError::Unverified(format!(
                "{PREFIX}{rest}: SHA-256 mismatch: expected {expected}, got {got}; not served"
            )));
        }
        // Still the version hashed (not rewritten meanwhile)?
        let after = opened.file.metadata().await.map_err(FileError::Io)?;
        if Stamp::of(&after) != stamp {
            return Err(FileError::Unverified(format!(
                "{PREFIX}{rest}: changed while it was checked; try again"
            )));
        }
        tracing::info!(file = %format!("{PREFIX}{rest}"), sha256 = %got, "OSIE release: file verified");
        self.mark_verified(&opened.path, stamp);
        Ok(opened)
    }

    fn is_verified(&self, path: &Path, stamp: Stamp) -> bool {
        lock(&self.verified).get(path) == Some(&stamp)
    }

    fn mark_verified(&self, path: &Path, stamp: Stamp) {
        lock(&self.verified).insert(path.to_path_buf(), stamp);
    }

    /// Checks every file `version` lists (opening each as a request would): the names that
    /// are missing or do not match, with why. Empty: the release is complete and intact.
    pub async fn check_release(&self, version: &str) -> Result<Vec<String>, FileError> {
        let sums = self.sums(version).await?;
        let mut bad = Vec::new();
        for (name, _) in sums.iter() {
            match self.open_meta(&format!("{version}/{name}")).await {
                Ok(_) => {}
                Err(FileError::NotFound) => bad.push(format!("{PREFIX}{version}/{name}: missing")),
                Err(e) => bad.push(e.to_string()),
            }
        }
        Ok(bad)
    }

    /// The release folders (those with a `SHA256SUMS`).
    pub async fn versions(&self) -> std::io::Result<Vec<String>> {
        let mut out = Vec::new();
        let mut rd = tokio::fs::read_dir(self.root.dir()).await?;
        while let Some(e) = rd.next_entry().await? {
            let Some(name) = e.file_name().to_str().map(str::to_string) else {
                continue;
            };
            if check_version(&name).is_ok()
                && tokio::fs::try_exists(e.path().join(SUMS))
                    .await
                    .unwrap_or(false)
            {
                out.push(name);
            }
        }
        out.sort();
        Ok(out)
    }
}

/// Where the releases come from.
#[derive(Clone, Debug)]
pub enum OsieSource {
    /// A folder of releases (`--osie-dir`); `required` (`--osie-version`) must be there and
    /// intact for readiness.
    Dir {
        /// The folder.
        dir: PathBuf,
        /// The release readiness waits for.
        required: Option<String>,
    },
    /// One release of a URL, kept in a cache folder (`--osie-url`).
    Url(FetchConfig),
}

/// The OSIE release settings.
#[derive(Clone, Debug)]
pub struct OsieConfig {
    /// Where the releases come from.
    pub source: OsieSource,
    /// The first pause after a failed check or fetch; it doubles up to `retry_max`.
    pub retry_min: Duration,
    /// The longest pause between tries.
    pub retry_max: Duration,
}

impl OsieConfig {
    /// The folder served under [`PREFIX`] (created for the URL cache).
    pub fn dir(&self) -> &Path {
        match &self.source {
            OsieSource::Dir { dir, .. } => dir,
            OsieSource::Url(f) => &f.cache,
        }
    }
}

/// One release of a URL, kept in a cache folder.
#[derive(Clone, Debug)]
pub struct FetchConfig {
    /// The base URL (`URL/<version>/SHA256SUMS` and `URL/<version>/<file>` are fetched).
    pub url: String,
    /// The release.
    pub version: String,
    /// The cache folder (`<cache>/<version>/...`).
    pub cache: PathBuf,
    /// Extra trusted CA certificates (PEM) for `https://` URLs, beside the system's roots.
    pub ca_cert: Option<PathBuf>,
    /// How long one request may take to answer, and the longest pause between body chunks.
    pub timeout: Duration,
}

/// Keeps the configured release ready until `shutdown`: checks it (and fetches what is missing
/// in URL mode), retrying with a growing pause, and sets `ready` once it is intact. Releases in
/// a folder that are not the required one are checked once at start (problems are logged and
/// counted; they are refused when requested).
pub async fn keep(
    config: OsieConfig,
    releases: Arc<Releases>,
    metrics: Metrics,
    ready: Arc<AtomicBool>,
    shutdown: tokio_util::sync::CancellationToken,
) {
    let mut pause = config.retry_min;
    loop {
        let result = match &config.source {
            OsieSource::Dir { required, .. } => check_dir(&releases, required.as_deref()).await,
            OsieSource::Url(f) => fetch(f, &releases, &metrics).await,
        };
        match result {
            Ok(()) => {
                ready.store(true, Ordering::SeqCst);
                shutdown.cancelled().await;
                return;
            }
            Err(error) => {
                tracing::error!(%error, retry_in = ?pause, "OSIE release not ready");
            }
        }
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = tokio::time::sleep(pause) => {}
        }
        pause = (pause * 2).min(config.retry_max.max(config.retry_min));
    }
}

async fn check_dir(releases: &Releases, required: Option<&str>) -> Result<(), String> {
    let versions = releases
        .versions()
        .await
        .map_err(|e| format!("OSIE releases folder {}: {e}", releases.dir().display()))?;
    for v in &versions {
        match releases.check_release(v).await {
            Ok(bad) if bad.is_empty() => {
                tracing::info!(version = %v, "OSIE release verified")
            }
            Ok(bad) => {
                tracing::error!(version = %v, problems = %bad.join("; "), "OSIE release has files that are not served")
            }
            Err(e) => tracing::error!(version = %v, error = %e, "OSIE release is not served"),
        }
    }
    let Some(v) = required else { return Ok(()) };
    match releases.check_release(v).await {
        Ok(bad) if bad.is_empty() => Ok(()),
        Ok(bad) => Err(format!("release {v}: {}", bad.join("; "))),
        Err(FileError::NotFound) => Err(format!(
            "release {v}: no {}/{v}/{SUMS}",
            releases.dir().display()
        )),
        Err(e) => Err(format!("release {v}: {e}")),
    }
}

/// Brings `config.version` of `config.url` into the cache: what is cached and intact is kept,
/// the rest fetched. Errors name the file and what went wrong; every file is tried before
/// returning.
pub async fn fetch(
    config: &FetchConfig,
    releases: &Releases,
    metrics: &Metrics,
) -> Result<(), String> {
    let v = &config.version;
    let dir = releases.dir().join(v);
    tokio::fs::create_dir_all(&dir)
        .await
        .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let base = config.url.trim_end_matches('/');
    // The system's roots and the CA file are read from disk: on the blocking pool.
    let (ca, timeout) = (config.ca_cert.clone(), config.timeout);
    let client =
        tokio::task::spawn_blocking(move || crate::fetch::Client::new(ca.as_deref(), timeout))
            .await
            .map_err(|e| e.to_string())?
            .map_err(|e| e.to_string())?;
    // The cached list, if it reads; otherwise fetched (never replaced once cached: a version
    // is immutable).
    let sums = match releases.sums(v).await {
        Ok(s) => s,
        Err(e) => {
            if !matches!(e, FileError::NotFound) {
                tracing::warn!(error = %e, "OSIE cache: SHA256SUMS unreadable; fetching it again");
            }
            let url = format!("{base}/{v}/{SUMS}");
            let bytes = client
                .get_bytes(&url, MAX_SUMS_BYTES)
                .await
                .inspect_err(|_| metrics.osie_fetch("error"))
                .map_err(|e| e.to_string())?;
            metrics.osie_fetch("ok");
            let text = String::from_utf8(bytes)
                .map_err(|_| format!("{url}: not text"))
                .inspect_err(|_| metrics.osie_verify_failure("bad_sums"))?;
            Sums::parse(&text, &url)
                .inspect_err(|_| metrics.osie_verify_failure("bad_sums"))
                .map_err(|e| e.to_string())?;
            write_atomic(&dir, SUMS, text.as_bytes()).await?;
            releases.sums(v).await.map_err(|e| e.to_string())?
        }
    };
    let mut problems = Vec::new();
    for (name, expected) in sums.iter() {
        let rel = format!("{v}/{name}");
        match releases.open_meta(&rel).await {
            Ok(_) => continue,
            Err(FileError::NotFound) => {}
            Err(e) => {
                tracing::warn!(error = %e, "OSIE cache: cached file is partial or corrupt; fetching it again");
            }
        }
        let url = format!("{base}/{v}/{name}");
        match fetch_file(&client, &url, &dir, name, expected, metrics).await {
            Ok(()) => {
                // Checked as a request would be, which records it as verified.
                if let Err(e) = releases.open_meta(&rel).await {
                    problems.push(e.to_string());
                }
            }
            Err(e) => {
                tracing::error!(error = %e, "OSIE fetch failed");
                problems.push(e);
            }
        }
    }
    if problems.is_empty() {
        tracing::info!(version = %v, url = %base, files = sums.len(), "OSIE release cached and verified");
        Ok(())
    } else {
        Err(problems.join("; "))
    }
}

/// Fetches `url` into `dir/.name.part`, checks its SHA-256 and renames it to `dir/name`.
async fn fetch_file(
    client: &crate::fetch::Client,
    url: &str,
    dir: &Path,
    name: &str,
    expected: &str,
    metrics: &Metrics,
) -> Result<(), String> {
    let part = dir.join(format!(".{name}.part"));
    let result = async {
        let n = client
            .download(url, &part, MAX_FILE_BYTES)
            .await
            .inspect_err(|_| metrics.osie_fetch("error"))
            .map_err(|e| e.to_string())?;
        metrics.osie_fetched_bytes.inc_by(n);
        let got = sha256_path(&part)
            .await
            .map_err(|e| format!("{}: {e}", part.display()))?;
        if got != expected {
            metrics.osie_fetch("mismatch");
            metrics.osie_verify_failure("upstream_mismatch");
            return Err(format!(
                "{url}: SHA-256 mismatch: expected {expected}, got {got}; discarded"
            ));
        }
        tokio::fs::rename(&part, dir.join(name))
            .await
            .map_err(|e| format!("cannot rename {} into place: {e}", part.display()))?;
        metrics.osie_fetch("ok");
        tracing::info!(url, sha256 = %got, bytes = n, "OSIE file fetched and verified");
        Ok(())
    }
    .await;
    if result.is_err() {
        let _ = tokio::fs::remove_file(&part).await;
    }
    result
}

/// Writes `dir/name` through a temporary file and a rename.
async fn write_atomic(dir: &Path, name: &str, bytes: &[u8]) -> Result<(), String> {
    let part = dir.join(format!(".{name}.part"));
    let write = async {
        use tokio::io::AsyncWriteExt as _;
        let mut f = tokio::fs::File::create(&part).await?;
        f.write_all(bytes).await?;
        f.sync_all().await?;
        tokio::fs::rename(&part, dir.join(name)).await
    };
    write
        .await
        .map_err(|e| format!("cannot write {}: {e}", dir.join(name).display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    const D: &str = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

    #[test]
    fn parses_sha256sum_output() {
        let text = format!(
            "{D}  vmlinuz-x86_64\n{}  initramfs-x86_64\n{D} *osie.json\n",
            D.to_uppercase()
        );
        let s = Sums::parse(&text, "SHA256SUMS").unwrap();
        assert_eq!(s.len(), 3);
        assert_eq!(s.get("initramfs-x86_64"), Some(D), "lower-cased");
        assert_eq!(s.get("osie.json"), Some(D), "binary mode marker");
        assert_eq!(s.get("nope"), None);
        assert_eq!(
            s.iter().map(|(n, _)| n).collect::<Vec<_>>(),
            ["initramfs-x86_64", "osie.json", "vmlinuz-x86_64"]
        );
        // CRLF and blank lines are tolerated.
        assert!(Sums::parse(&format!("\r\n{D}  a\r\n\n"), "x").is_ok());
    }

    #[test]
    fn bad_lines_are_refused_with_their_number() {
        let cases = [
            (format!("{D}  ok\nnot a line\n"), 2, "sha256sum's format"),
            (format!("{}  a\n", &D[..63]), 1, "not a SHA-256 digest"),
            ("abc\n".to_string(), 1, "sha256sum's format"),
            (format!("{}g  a\n", &D[..63]), 1, "not a SHA-256 digest"),
            (format!("{D} a\n"), 1, "two spaces"),
            (format!("{D}  \n"), 1, "empty file name"),
            (format!("{D}  ok\n{D}  sub/file\n"), 2, "one path component"),
            (format!("{D}  ../etc/passwd\n"), 1, "one path component"),
            (format!("{D}  ..\n"), 1, "hidden"),
            (format!("{D}  .hidden\n"), 1, "hidden"),
            (format!("{D}  a\\b\n"), 1, "one path component"),
            (format!("{D}  a\tb\n"), 1, "control"),
            (format!("{D}  a\n{D}  b\n{D}  a\n"), 3, "listed twice"),
        ];
        for (text, line, why) in cases {
            let e = Sums::parse(&text, "R/SHA256SUMS").unwrap_err();
            assert_eq!(e.line, line, "{text:?}: {e}");
            assert!(e.to_string().contains(why), "{text:?}: {e}");
            assert!(
                e.to_string()
                    .starts_with(&format!("R/SHA256SUMS line {line}:")),
                "{e}"
            );
        }
        let e = Sums::parse("\n", "x").unwrap_err();
        assert!(e.to_string().contains("lists no file"), "{e}");
    }

    #[test]
    fn versions() {
        for ok in ["v0.4.0-3-gabc1234-linux-6.1.0-56", "1", "a_b+c.d"] {
            assert!(check_version(ok).is_ok(), "{ok}");
        }
        for bad in ["", ".", "..", ".x", "a/b", "a b", "é", &"x".repeat(129)] {
            assert!(check_version(bad).is_err(), "{bad:?}");
        }
    }

    #[tokio::test]
    async fn hashes_files() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        std::fs::write(&p, b"").unwrap();
        assert_eq!(sha256_path(&p).await.unwrap(), D);
        std::fs::write(&p, b"abc").unwrap();
        assert_eq!(
            sha256_path(&p).await.unwrap(),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
