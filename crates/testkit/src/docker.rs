//! Docker helpers: build small local action images without any registry.
//!
//! No image can be pulled on the test machines, so action images are made locally: a root
//! filesystem holding Debian's static busybox (`/bin/busybox`, package `busybox-static`) and one
//! symlink per applet is written as a tar archive in memory and handed to the engine's import
//! endpoint (`docker import`), with the default command and a content label set as image changes.
//! Images are cached by tag: an image whose label matches the wanted content is reused.
//!
//! Tests that need Docker call [`engine_or_skip`]: it fails when no engine answers, unless
//! `TINK_SKIP_DOCKER_TESTS=1` is set explicitly, in which case it says so on stderr and the test
//! returns early. Nothing is ever skipped silently.
//!
//! ```no_run
//! # async fn example() -> Result<(), tink_testkit::docker::DockerError> {
//! use tink_testkit::docker::{engine_or_skip, TestImage};
//! let Some(docker) = engine_or_skip().await? else { return Ok(()) };
//! let image = TestImage::busybox("tink-test/sleep:1").cmd(["sleep", "1"]).ensure(&docker).await?;
//! # let _ = image; Ok(()) }
//! ```

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use bollard::Docker;
use bollard::query_parameters::CreateImageOptionsBuilder;
use futures::StreamExt;

/// The environment variable that, set to `1`, lets Docker tests skip (loudly) when no engine answers.
pub const SKIP_ENV: &str = "TINK_SKIP_DOCKER_TESTS";

/// Where Debian's `busybox-static` installs its binary.
pub const DEFAULT_BUSYBOX: &str = "/bin/busybox";

/// The image label holding the content hash used for caching.
const CONTENT_LABEL: &str = "org.tinkerbell.testkit.content";

/// Errors of the Docker helpers. `Debug` prints the message too, because a test returning
/// `Err` shows its error with `Debug`, and the hint on how to fix it must reach the reader.
#[derive(thiserror::Error)]
pub enum DockerError {
    /// No Docker engine answered and skipping was not requested.
    #[error(
        "no Docker engine answers ({source}); start one (Debian package docker.io) or set {SKIP_ENV}=1 to skip Docker tests explicitly"
    )]
    EngineUnavailable {
        /// Why the engine could not be reached.
        source: bollard::errors::Error,
    },
    /// The busybox binary could not be read.
    #[error(
        "cannot read the static busybox at {path}: {source}; install it with `apt-get install busybox-static`"
    )]
    Busybox {
        /// The path tried.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// Listing busybox applets failed.
    #[error("cannot list busybox applets with `{path} --list-full`: {message}")]
    Applets {
        /// The busybox binary.
        path: PathBuf,
        /// What went wrong.
        message: String,
    },
    /// A path does not fit a tar header.
    #[error("path {0:?} does not fit a ustar header")]
    PathTooLong(String),
    /// The image tag is not `repository:tag`-like.
    #[error("invalid image reference {0:?}: expected repository[:tag]")]
    InvalidReference(String),
    /// The engine refused a request.
    #[error("docker engine: {0}")]
    Engine(#[from] bollard::errors::Error),
}

impl std::fmt::Debug for DockerError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{self}")
    }
}

/// Connects to the local Docker engine (honouring `DOCKER_HOST`) and negotiates the API version.
pub async fn connect() -> Result<Docker, DockerError> {
    let docker = Docker::connect_with_local_defaults()
        .map_err(|source| DockerError::EngineUnavailable { source })?;
    let docker = docker
        .negotiate_version()
        .await
        .map_err(|source| DockerError::EngineUnavailable { source })?;
    docker
        .ping()
        .await
        .map_err(|source| DockerError::EngineUnavailable { source })?;
    Ok(docker)
}

/// The engine for a test that needs Docker.
///
/// - An engine answers: `Ok(Some(docker))`.
/// - None answers and `TINK_SKIP_DOCKER_TESTS=1`: prints why on stderr and returns `Ok(None)`.
/// - None answers otherwise: `Err(EngineUnavailable)`, so the test fails.
pub async fn engine_or_skip() -> Result<Option<Docker>, DockerError> {
    match connect().await {
        Ok(docker) => Ok(Some(docker)),
        Err(err) if skip_requested(std::env::var(SKIP_ENV).ok().as_deref()) => {
            eprintln!("SKIPPED (Docker test, {SKIP_ENV}=1): {err}");
            Ok(None)
        }
        Err(err) => Err(err),
    }
}

fn skip_requested(value: Option<&str>) -> bool {
    value.map(str::trim) == Some("1")
}

/// A local test image built from a busybox root filesystem.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TestImage {
    reference: String,
    busybox: PathBuf,
    cmd: Vec<String>,
    entrypoint: Vec<String>,
    env: Vec<(String, String)>,
    files: Vec<(String, Vec<u8>, u32)>,
}

impl TestImage {
    /// A busybox image tagged `reference` (e.g. `tink-test/busybox:1`), with `/bin/sh` as its
    /// default command unless [`TestImage::cmd`] says otherwise.
    pub fn busybox(reference: impl Into<String>) -> Self {
        Self {
            reference: reference.into(),
            busybox: PathBuf::from(DEFAULT_BUSYBOX),
            cmd: vec!["/bin/sh".to_owned()],
            entrypoint: Vec::new(),
            env: Vec::new(),
            files: Vec::new(),
        }
    }

    /// Uses another static busybox binary.
    pub fn busybox_path(mut self, path: impl Into<PathBuf>) -> Self {
        self.busybox = path.into();
        self
    }

    /// The image's default command (`CMD`), e.g. `["sh", "-c", "echo hi; exit 3"]`.
    pub fn cmd<I, S>(mut self, cmd: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.cmd = cmd.into_iter().map(Into::into).collect();
        self
    }

    /// The image's entrypoint (`ENTRYPOINT`); empty by default.
    pub fn entrypoint<I, S>(mut self, entrypoint: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.entrypoint = entrypoint.into_iter().map(Into::into).collect();
        self
    }

    /// An environment variable baked into the image.
    pub fn env(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.env.push((key.into(), value.into()));
        self
    }

    /// An extra regular file in the image (`path` relative to `/`, e.g. `usr/local/bin/act`).
    pub fn file(
        mut self,
        path: impl Into<String>,
        contents: impl Into<Vec<u8>>,
        mode: u32,
    ) -> Self {
        self.files.push((path.into(), contents.into(), mode));
        self
    }

    /// The image reference (`repository:tag`).
    pub fn reference(&self) -> &str {
        &self.reference
    }

    /// Builds the image unless one with the same tag and content already exists; returns the
    /// reference. Concurrent calls in one process are serialized.
    pub async fn ensure(&self, docker: &Docker) -> Result<String, DockerError> {
        static BUILD_LOCK: OnceLock<tokio::sync::Mutex<()>> = OnceLock::new();
        let _guard = BUILD_LOCK
            .get_or_init(|| tokio::sync::Mutex::new(()))
            .lock()
            .await;

        let busybox =
            tokio::fs::read(&self.busybox)
                .await
                .map_err(|source| DockerError::Busybox {
                    path: self.busybox.clone(),
                    source,
                })?;
        let hash = format!("{:016x}", self.content_hash(&busybox));
        if let Ok(existing) = docker.inspect_image(&self.reference).await {
            let labels = existing.config.and_then(|c| c.labels).unwrap_or_default();
            if labels.get(CONTENT_LABEL) == Some(&hash) {
                return Ok(self.reference.clone());
            }
        }

        let applets = list_applets(&self.busybox).await?;
        let tar = rootfs_tar(&busybox, &applets, &self.files)?;
        let (repo, tag) = split_reference(&self.reference)?;
        let options = CreateImageOptionsBuilder::default()
            .from_src("-")
            .repo(repo)
            .tag(tag)
            .changes(self.changes(&hash))
            .build();
        let mut progress =
            docker.create_image(Some(options), Some(bollard::body_full(tar.into())), None);
        while let Some(step) = progress.next().await {
            step?;
        }
        Ok(self.reference.clone())
    }

    fn changes(&self, hash: &str) -> Vec<String> {
        let mut changes = vec![format!("LABEL {CONTENT_LABEL}={hash}")];
        changes.push(
            "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".to_owned(),
        );
        for (key, value) in &self.env {
            changes.push(format!("ENV {key}={}", json_string(value)));
        }
        if !self.entrypoint.is_empty() {
            changes.push(format!("ENTRYPOINT {}", json_array(&self.entrypoint)));
        }
        changes.push(format!("CMD {}", json_array(&self.cmd)));
        changes
    }

    fn content_hash(&self, busybox: &[u8]) -> u64 {
        let mut h = Fnv64::new();
        h.write(busybox);
        for (i, part) in [&self.cmd, &self.entrypoint].into_iter().enumerate() {
            h.write(&[0xff, i as u8]);
            for s in part {
                h.write(s.as_bytes());
                h.write(&[0]);
            }
        }
        for (k, v) in &self.env {
            h.write(&[0xfe]);
            h.write(k.as_bytes());
            h.write(&[0]);
            h.write(v.as_bytes());
        }
        for (path, contents, mode) in &self.files {
            h.write(&[0xfd]);
            h.write(path.as_bytes());
            h.write(&mode.to_le_bytes());
            h.write(contents);
        }
        h.0
    }
}

/// 64-bit FNV-1a: stable across Rust versions, unlike `DefaultHasher`.
struct Fnv64(u64);

impl Fnv64 {
    fn new() -> Self {
        Self(0xcbf2_9ce4_8422_2325)
    }

    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 ^= u64::from(*b);
            self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
}

fn json_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn json_array(items: &[String]) -> String {
    let parts: Vec<String> = items.iter().map(|s| json_string(s)).collect();
    format!("[{}]", parts.join(","))
}

fn split_reference(reference: &str) -> Result<(&str, &str), DockerError> {
    let invalid = || DockerError::InvalidReference(reference.to_owned());
    if reference.is_empty() || reference.contains('@') {
        return Err(invalid());
    }
    // A colon after the last slash separates the tag; one before it belongs to a registry port.
    let last_slash = reference.rfind('/').map_or(0, |i| i + 1);
    match reference[last_slash..].rfind(':') {
        Some(i) => {
            let (repo, tag) = (
                &reference[..last_slash + i],
                &reference[last_slash + i + 1..],
            );
            if repo.is_empty() || tag.is_empty() {
                Err(invalid())
            } else {
                Ok((repo, tag))
            }
        }
        None => Ok((reference, "latest")),
    }
}

async fn list_applets(busybox: &Path) -> Result<Vec<String>, DockerError> {
    let output = tokio::process::Command::new(busybox)
        .arg("--list-full")
        .output()
        .await
        .map_err(|e| DockerError::Applets {
            path: busybox.to_owned(),
            message: e.to_string(),
        })?;
    if !output.status.success() {
        return Err(DockerError::Applets {
            path: busybox.to_owned(),
            message: format!("exited with {}", output.status),
        });
    }
    let text = String::from_utf8_lossy(&output.stdout);
    Ok(text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && *l != "bin/busybox")
        .map(str::to_owned)
        .collect())
}

/// The root filesystem: standard directories, `/bin/busybox`, one symlink per applet
/// (`usr/bin/env` -> `/bin/busybox`), and the extra files.
fn rootfs_tar(
    busybox: &[u8],
    applets: &[String],
    files: &[(String, Vec<u8>, u32)],
) -> Result<Vec<u8>, DockerError> {
    let mut tar = TarWriter::default();
    let mut dirs: Vec<String> = [
        "bin",
        "sbin",
        "usr",
        "usr/bin",
        "usr/sbin",
        "usr/local",
        "usr/local/bin",
        "etc",
        "dev",
        "proc",
        "sys",
        "root",
        "var",
        "run",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect();
    for path in applets
        .iter()
        .map(String::as_str)
        .chain(files.iter().map(|f| f.0.as_str()))
    {
        let mut parent = Path::new(path).parent();
        while let Some(p) = parent {
            let s = p.to_string_lossy().into_owned();
            if s.is_empty() {
                break;
            }
            if !dirs.contains(&s) {
                dirs.push(s);
            }
            parent = p.parent();
        }
    }
    dirs.sort_by_key(|d| d.matches('/').count());
    for dir in &dirs {
        tar.dir(dir, 0o755)?;
    }
    tar.dir("tmp", 0o1777)?;
    tar.file("etc/passwd", b"root:x:0:0:root:/root:/bin/sh\n", 0o644)?;
    tar.file("etc/group", b"root:x:0:\n", 0o644)?;
    tar.file("bin/busybox", busybox, 0o755)?;
    for applet in applets {
        tar.symlink(applet, "/bin/busybox")?;
    }
    for (path, contents, mode) in files {
        tar.file(path, contents, *mode)?;
    }
    Ok(tar.finish())
}

/// A minimal ustar writer: directories, regular files and symlinks.
#[derive(Default)]
struct TarWriter {
    out: Vec<u8>,
}

impl TarWriter {
    fn dir(&mut self, path: &str, mode: u32) -> Result<(), DockerError> {
        self.header(&format!("{path}/"), mode, 0, b'5', "")
    }

    fn file(&mut self, path: &str, contents: &[u8], mode: u32) -> Result<(), DockerError> {
        self.header(path, mode, contents.len() as u64, b'0', "")?;
        self.out.extend_from_slice(contents);
        let pad = (512 - contents.len() % 512) % 512;
        self.out.resize(self.out.len() + pad, 0);
        Ok(())
    }

    fn symlink(&mut self, path: &str, target: &str) -> Result<(), DockerError> {
        self.header(path, 0o777, 0, b'2', target)
    }

    fn header(
        &mut self,
        path: &str,
        mode: u32,
        size: u64,
        kind: u8,
        link: &str,
    ) -> Result<(), DockerError> {
        if path.len() > 100 || link.len() > 100 {
            return Err(DockerError::PathTooLong(path.to_owned()));
        }
        let mut h = [0u8; 512];
        h[..path.len()].copy_from_slice(path.as_bytes());
        put_octal(&mut h[100..108], u64::from(mode));
        put_octal(&mut h[108..116], 0);
        put_octal(&mut h[116..124], 0);
        put_octal(&mut h[124..136], size);
        put_octal(&mut h[136..148], 0);
        h[148..156].fill(b' ');
        h[156] = kind;
        h[157..157 + link.len()].copy_from_slice(link.as_bytes());
        h[257..263].copy_from_slice(b"ustar\0");
        h[263..265].copy_from_slice(b"00");
        let sum: u64 = h.iter().map(|b| u64::from(*b)).sum();
        let field = format!("{sum:06o}\0 ");
        h[148..156].copy_from_slice(field.as_bytes());
        self.out.extend_from_slice(&h);
        Ok(())
    }

    fn finish(mut self) -> Vec<u8> {
        self.out.resize(self.out.len() + 1024, 0);
        self.out
    }
}

fn put_octal(field: &mut [u8], value: u64) {
    let width = field.len() - 1;
    let text = format!("{value:0width$o}");
    let bytes = text.as_bytes();
    let start = bytes.len().saturating_sub(width);
    field[..width].copy_from_slice(&bytes[start..]);
    field[width] = 0;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn skip_only_when_explicitly_one() {
        assert!(skip_requested(Some("1")));
        assert!(!skip_requested(Some("0")));
        assert!(!skip_requested(Some("yes")));
        assert!(!skip_requested(None));
    }

    #[test]
    fn references_split_into_repo_and_tag() {
        assert_eq!(split_reference("a/b:1").ok(), Some(("a/b", "1")));
        assert_eq!(split_reference("a/b").ok(), Some(("a/b", "latest")));
        assert_eq!(
            split_reference("localhost:5000/a").ok(),
            Some(("localhost:5000/a", "latest"))
        );
        assert_eq!(
            split_reference("localhost:5000/a:x").ok(),
            Some(("localhost:5000/a", "x"))
        );
        assert!(split_reference("a:").is_err());
        assert!(split_reference("").is_err());
    }

    #[test]
    fn json_arrays_escape() {
        assert_eq!(
            json_array(&["sh".into(), "-c".into(), "echo \"a\\b\"\n".into()]),
            r#"["sh","-c","echo \"a\\b\"\n"]"#
        );
    }

    #[test]
    fn tar_headers_are_well_formed() {
        let tar = rootfs_tar(
            b"binary",
            &["bin/sh".into()],
            &[("x/y".into(), vec![1; 600], 0o700)],
        )
        .expect("tar");
        assert_eq!(tar.len() % 512, 0);
        // Every header's checksum must verify.
        let mut offset = 0;
        let mut names = Vec::new();
        while offset + 512 <= tar.len() && tar[offset] != 0 {
            let h = &tar[offset..offset + 512];
            let stored = std::str::from_utf8(&h[148..154]).expect("utf8");
            let stored = u64::from_str_radix(stored, 8).expect("octal");
            let mut copy = h.to_vec();
            copy[148..156].fill(b' ');
            assert_eq!(stored, copy.iter().map(|b| u64::from(*b)).sum::<u64>());
            let name_end = h[..100].iter().position(|b| *b == 0).unwrap_or(100);
            names.push(String::from_utf8_lossy(&h[..name_end]).into_owned());
            let size = u64::from_str_radix(std::str::from_utf8(&h[124..135]).expect("utf8"), 8)
                .expect("size") as usize;
            offset += 512 + size.div_ceil(512) * 512;
        }
        assert!(names.contains(&"bin/busybox".to_owned()));
        assert!(names.contains(&"bin/sh".to_owned()));
        assert!(names.contains(&"x/".to_owned()));
        assert!(names.contains(&"x/y".to_owned()));
        assert!(names.iter().position(|n| n == "x/") < names.iter().position(|n| n == "x/y"));
    }

    #[test]
    fn content_hash_changes_with_command() {
        let a = TestImage::busybox("t:1").cmd(["true"]);
        let b = TestImage::busybox("t:1").cmd(["false"]);
        assert_ne!(a.content_hash(b"x"), b.content_hash(b"x"));
        assert_eq!(a.content_hash(b"x"), a.clone().content_hash(b"x"));
    }
}
