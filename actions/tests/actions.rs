//! The actions as the agent runs them: the real binary, real loop devices and file systems
//! (`losetup`, `mkfs.ext4`, `mkfs.vfat`), a real HTTP server on loopback, a chroot made from
//! busybox-static. Needs root; without it (or without loop devices) each test says so loudly
//! and, under `CI=true`, fails instead of skipping.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

type TestResult = Result<(), Box<dyn std::error::Error>>;

// ---------- environment ----------

fn can_run() -> bool {
    let root = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .map(|l| l.split_whitespace().nth(1) == Some("0"))
        })
        .unwrap_or(false);
    let ok = root && Path::new("/dev/loop-control").exists() && which("losetup");
    if !ok {
        let msg = "SKIPPED: tink-actions tests need root, /dev/loop-control and losetup";
        if std::env::var("CI").as_deref() == Ok("true") {
            panic!("{msg} (CI=true: failing instead)");
        }
        eprintln!("{msg}");
    }
    ok
}

fn which(b: &str) -> bool {
    ["/usr/sbin", "/sbin", "/usr/bin", "/bin"]
        .iter()
        .any(|d| Path::new(d).join(b).exists())
}

fn sh(cmd: &str, args: &[&str]) -> Result<String, Box<dyn std::error::Error>> {
    let out = Command::new(cmd).args(args).output()?;
    if !out.status.success() {
        return Err(format!("{cmd} {args:?}: {}", String::from_utf8_lossy(&out.stderr)).into());
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// A loop device over a sparse file, detached on drop.
struct Loop {
    dev: String,
    _dir: tempfile::TempDir,
}

impl Loop {
    fn new(size: u64) -> Result<Self, Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let file = dir.path().join("disk.img");
        std::fs::File::create(&file)?.set_len(size)?;
        let dev = sh("losetup", &["-f", "--show", &file.to_string_lossy()])?;
        Ok(Self { dev, _dir: dir })
    }
    fn read(&self, len: usize) -> Result<Vec<u8>, Box<dyn std::error::Error>> {
        let mut buf = vec![0u8; len];
        std::fs::File::open(&self.dev)?.read_exact(&mut buf)?;
        Ok(buf)
    }
}

impl Drop for Loop {
    fn drop(&mut self) {
        let _ = Command::new("losetup").args(["-d", &self.dev]).status();
    }
}

/// A mount for checking results, unmounted on drop.
struct Mounted(tempfile::TempDir);

impl Mounted {
    fn new(dev: &str) -> Result<Self, Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        sh("mount", &[dev, &dir.path().to_string_lossy()])?;
        Ok(Self(dir))
    }
    fn path(&self) -> &Path {
        self.0.path()
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.0.path()).status();
    }
}

struct Run {
    code: i32,
    stdout: String,
    reason: Option<String>,
    message: Option<String>,
    power: Option<String>,
}

fn run(action: &str, env: &[(&str, &str)]) -> Result<Run, Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let out = Command::new(env!("CARGO_BIN_EXE_tink-actions"))
        .arg(action)
        .env_clear()
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .env("TINKERBELL_REASON_DIR", dir.path())
        .env("RETRY_INITIAL_MILLIS", "20")
        .env("TEXT_LOGGING", "true")
        .envs(env.iter().copied())
        .output()?;
    let read = |n: &str| {
        std::fs::read_to_string(dir.path().join(n))
            .ok()
            .map(|s| s.trim().to_owned())
    };
    let r = Run {
        code: out.status.code().unwrap_or(-1),
        stdout: format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
        reason: read("failure-reason"),
        message: read("failure-message"),
        power: read("power"),
    };
    Ok(r)
}

fn assert_failed(r: &Run, reason: &str, mentions: &str) {
    assert_ne!(r.code, 0, "{}", r.stdout);
    assert_eq!(r.reason.as_deref(), Some(reason), "{}", r.stdout);
    assert!(
        r.message.as_deref().is_some_and(|m| m.contains(mentions)),
        "message {:?} should mention {mentions:?}\n{}",
        r.message,
        r.stdout
    );
    assert!(!r.stdout.contains("successfully"), "{}", r.stdout);
}

fn assert_ok(r: &Run) {
    assert_eq!(r.code, 0, "{}", r.stdout);
    assert_eq!(r.reason, None, "{}", r.stdout);
}

// ---------- the HTTP server ----------

#[derive(Clone, Copy, PartialEq)]
enum Mode {
    Normal,
    /// Announces the full length, sends half, closes: every time.
    Truncate,
    /// Like Truncate on the first request only.
    BreakOnce,
    /// BreakOnce, and Range is ignored (200 with the whole file).
    BreakOnceNoRange,
}

struct Served {
    data: Vec<u8>,
    mode: Mode,
}

struct Server {
    base: String,
    files: Arc<Mutex<HashMap<String, Served>>>,
    requests: Arc<AtomicUsize>,
    range_requests: Arc<AtomicUsize>,
}

impl Server {
    fn start() -> Result<Self, Box<dyn std::error::Error>> {
        Self::start_with(None)
    }

    /// With `tls`, an `https://localhost:<port>` server.
    fn start_with(
        tls: Option<Arc<tokio_rustls::rustls::ServerConfig>>,
    ) -> Result<Self, Box<dyn std::error::Error>> {
        let std_listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        std_listener.set_nonblocking(true)?;
        let base = match tls {
            Some(_) => format!("https://localhost:{}", std_listener.local_addr()?.port()),
            None => format!("http://{}", std_listener.local_addr()?),
        };
        let acceptor = tls.map(tokio_rustls::TlsAcceptor::from);
        let files: Arc<Mutex<HashMap<String, Served>>> = Arc::default();
        let requests = Arc::new(AtomicUsize::new(0));
        let range_requests = Arc::new(AtomicUsize::new(0));
        let (f, rq, rr) = (files.clone(), requests.clone(), range_requests.clone());
        std::thread::spawn(move || {
            let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            rt.block_on(async move {
                let Ok(listener) = tokio::net::TcpListener::from_std(std_listener) else {
                    return;
                };
                while let Ok((sock, _)) = listener.accept().await {
                    let (f, rq, rr) = (f.clone(), rq.clone(), rr.clone());
                    let acceptor = acceptor.clone();
                    tokio::spawn(async move {
                        match acceptor {
                            Some(a) => {
                                if let Ok(tls) = a.accept(sock).await {
                                    let _ = serve(tls, f, rq, rr).await;
                                }
                            }
                            None => {
                                let _ = serve(sock, f, rq, rr).await;
                            }
                        }
                    });
                }
            });
        });
        Ok(Self {
            base,
            files,
            requests,
            range_requests,
        })
    }

    fn add(&self, path: &str, data: Vec<u8>, mode: Mode) -> String {
        if let Ok(mut f) = self.files.lock() {
            f.insert(path.to_owned(), Served { data, mode });
        }
        format!("{}{path}", self.base)
    }
}

async fn serve<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin>(
    mut sock: S,
    files: Arc<Mutex<HashMap<String, Served>>>,
    requests: Arc<AtomicUsize>,
    range_requests: Arc<AtomicUsize>,
) -> std::io::Result<()> {
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if sock.read(&mut b).await? == 0 {
            return Ok(());
        }
        head.push(b[0]);
    }
    let head = String::from_utf8_lossy(&head).to_string();
    let path = head.split_whitespace().nth(1).unwrap_or("/").to_owned();
    let range: Option<usize> = head
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .strip_prefix("range: bytes=")
                .map(str::to_owned)
        })
        .and_then(|r| r.trim_end_matches('-').parse().ok());
    let n = requests.fetch_add(1, Ordering::SeqCst);
    if range.is_some() {
        range_requests.fetch_add(1, Ordering::SeqCst);
    }
    let (data, mode) = match files
        .lock()
        .ok()
        .and_then(|f| f.get(&path).map(|s| (s.data.clone(), s.mode)))
    {
        Some(x) => x,
        None => {
            sock.write_all(
                b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
            )
            .await?;
            return Ok(());
        }
    };
    let first = n == 0;
    let break_now = match mode {
        Mode::Truncate => true,
        Mode::BreakOnce | Mode::BreakOnceNoRange => first,
        Mode::Normal => false,
    };
    let honour_range = mode != Mode::BreakOnceNoRange;
    let (status, body, extra) = match range {
        Some(start) if honour_range && start < data.len() => (
            "206 Partial Content",
            &data[start..],
            format!(
                "Content-Range: bytes {start}-{}/{}\r\n",
                data.len() - 1,
                data.len()
            ),
        ),
        _ => ("200 OK", &data[..], String::new()),
    };
    let ranges = if honour_range {
        "Accept-Ranges: bytes\r\n"
    } else {
        ""
    };
    let hdr = format!(
        "HTTP/1.1 {status}\r\nContent-Length: {}\r\n{ranges}{extra}Connection: close\r\n\r\n",
        body.len()
    );
    sock.write_all(hdr.as_bytes()).await?;
    if break_now {
        sock.write_all(&body[..body.len() / 2]).await?;
        sock.flush().await?;
        return Ok(()); // dropped: the connection closes mid-body
    }
    sock.write_all(body).await?;
    sock.shutdown().await
}

// ---------- images ----------

/// 5 MiB and a bit (two 4 MiB buffers, a tail that is not a block multiple): half noise, half
/// runs, so it compresses but not to nothing.
fn image(len: usize) -> Vec<u8> {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    (0..len)
        .map(|i| {
            if (i / 65536) % 2 == 0 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            } else {
                (i / 65536) as u8
            }
        })
        .collect()
}

const IMG_LEN: usize = (5 << 20) + 1000;

fn compress(format: &str, data: &[u8]) -> Result<Vec<u8>, Box<dyn std::error::Error>> {
    Ok(match format {
        "raw" => data.to_vec(),
        "gz" => {
            let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
            e.write_all(data)?;
            e.finish()?
        }
        "xz" => {
            let mut e = liblzma::write::XzEncoder::new(Vec::new(), 0);
            e.write_all(data)?;
            e.finish()?
        }
        "zst" => zstd::stream::encode_all(data, 1)?,
        "bz2" => {
            let mut e = bzip2::write::BzEncoder::new(Vec::new(), bzip2::Compression::fast());
            e.write_all(data)?;
            e.finish()?
        }
        other => return Err(format!("unknown format {other}").into()),
    })
}

fn sha256_hex(data: &[u8]) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(data)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

// ---------- image2disk ----------

#[test]
fn image2disk_writes_every_format_onto_a_loop_device_and_a_file() -> TestResult {
    if !can_run() {
        return Ok(());
    }
    let server = Server::start()?;
    let data = image(IMG_LEN);
    for format in ["raw", "gz", "xz", "zst", "bz2"] {
        // No extension: the format is found by its magic bytes.
        let url = server.add(
            &format!("/{format}-image"),
            compress(format, &data)?,
            Mode::Normal,
        );
        let compressed = if format == "raw" { "false" } else { "true" };

        let disk = Loop::new(16 << 20)?;
        let r = run(
            "image2disk",
            &[
                ("IMG_URL", &url),
                ("DEST_DISK", &disk.dev),
                ("COMPRESSED", compressed),
                ("PROGRESS_INTERVAL_SECONDS", "1"),
            ],
        )?;
        assert_ok(&r);
        assert!(r.stdout.contains("read and write progress"), "{}", r.stdout);
        assert!(
            r.stdout.contains(&format!(
                "format={}",
                if format == "raw" {
                    "raw"
                } else {
                    match format {
                        "gz" => "gzip",
                        "zst" => "zstd",
                        "bz2" => "bzip2",
                        f => f,
                    }
                }
            )),
            "{}",
            r.stdout
        );
        assert!(
            disk.read(IMG_LEN)? == data,
            "{format}: the loop device differs from the image"
        );
        assert!(
            disk.read(IMG_LEN + 4096)?[IMG_LEN..]
                .iter()
                .all(|b| *b == 0),
            "{format}: wrote past the image"
        );

        let dir = tempfile::tempdir()?;
        let file = dir.path().join("disk.raw");
        std::fs::File::create(&file)?;
        let r = run(
            "image2disk",
            &[
                ("IMG_URL", &url),
                ("DEST_DISK", &file.to_string_lossy()),
                ("COMPRESSED", compressed),
            ],
        )?;
        assert_ok(&r);
        assert!(
            std::fs::read(&file)? == data,
            "{format}: the file differs from the image"
        );
    }
    Ok(())
}

#[test]
fn image2disk_checks_the_checksum_before_success() -> TestResult {
    if !can_run() {
        return Ok(());
    }
    let server = Server::start()?;
    let gz = compress("gz", &image(IMG_LEN))?;
    let good = format!("sha256:{}", sha256_hex(&gz));
    let url = server.add("/img.gz", gz, Mode::Normal);
    let disk = Loop::new(8 << 20)?;
    let r = run(
        "image2disk",
        &[
            ("IMG_URL", &url),
            ("DEST_DISK", &disk.dev),
            ("COMPRESSED", "true"),
            ("IMG_CHECKSUM", &good),
        ],
    )?;
    assert_ok(&r);
    let bad = format!("sha256:{}", "0".repeat(64));
    let r = run(
        "image2disk",
        &[
            ("IMG_URL", &url),
            ("DEST_DISK", &disk.dev),
            ("COMPRESSED", "true"),
            ("IMG_CHECKSUM", &bad),
        ],
    )?;
    assert_failed(&r, "ChecksumMismatch", "IMG_CHECKSUM");
    let r = run(
        "image2disk",
        &[
            ("IMG_URL", &url),
            ("DEST_DISK", &disk.dev),
            ("IMG_CHECKSUM", "md5:abc"),
        ],
    )?;
    assert_failed(&r, "InvalidVariable", "IMG_CHECKSUM");
    Ok(())
}

#[test]
fn image2disk_fails_a_truncated_or_corrupt_download_with_a_reason() -> TestResult {
    if !can_run() {
        return Ok(());
    }
    let server = Server::start()?;
    let data = image(IMG_LEN);
    let disk = Loop::new(8 << 20)?;

    let url = server.add("/truncated.raw", data.clone(), Mode::Truncate);
    let r = run("image2disk", &[("IMG_URL", &url), ("DEST_DISK", &disk.dev)])?;
    assert_failed(&r, "DownloadFailed", "");

    // Truncated and compressed: the broken download is the reason, not the decoder's EOF.
    let url = server.add("/truncated.gz", compress("gz", &data)?, Mode::Truncate);
    let r = run(
        "image2disk",
        &[
            ("IMG_URL", &url),
            ("DEST_DISK", &disk.dev),
            ("COMPRESSED", "true"),
        ],
    )?;
    assert_failed(&r, "DownloadFailed", "");

    let mut gz = compress("gz", &data)?;
    let mid = gz.len() / 2;
    for b in &mut gz[mid..mid + 64] {
        *b ^= 0x5a;
    }
    let url = server.add("/corrupt.gz", gz, Mode::Normal);
    let r = run(
        "image2disk",
        &[
            ("IMG_URL", &url),
            ("DEST_DISK", &disk.dev),
            ("COMPRESSED", "true"),
        ],
    )?;
    assert_failed(&r, "DecompressionFailed", "Gzip");

    let url = server.add("/plain.img", data, Mode::Normal);
    let r = run(
        "image2disk",
        &[
            ("IMG_URL", &url),
            ("DEST_DISK", &disk.dev),
            ("COMPRESSED", "true"),
        ],
    )?;
    assert_failed(&r, "UnsupportedFormat", "COMPRESSED");

    let r = run(
        "image2disk",
        &[
            ("IMG_URL", &format!("{}/missing.raw", server.base)),
            ("DEST_DISK", &disk.dev),
        ],
    )?;
    assert_failed(&r, "ImageNotFound", "missing.raw");
    let r = run(
        "image2disk",
        &[("IMG_URL", &url), ("DEST_DISK", "/dev/tink-no-such-disk")],
    )?;
    assert_failed(&r, "DiskNotFound", "DEST_DISK=/dev/tink-no-such-disk");
    let r = run("image2disk", &[("DEST_DISK", &disk.dev)])?;
    assert_failed(&r, "MissingVariable", "IMG_URL");
    Ok(())
}

#[test]
fn image2disk_refuses_an_image_bigger_than_the_disk() -> TestResult {
    if !can_run() {
        return Ok(());
    }
    let server = Server::start()?;
    let big = image(9 << 20);
    let disk = Loop::new(8 << 20)?;
    // Known size (raw Content-Length, zstd frame header): refused before anything is written.
    for (name, body, compressed) in [
        ("/big.raw", big.clone(), "false"),
        ("/big.zst", zstd::bulk::compress(&big, 1)?, "true"),
    ] {
        let url = server.add(name, body, Mode::Normal);
        let r = run(
            "image2disk",
            &[
                ("IMG_URL", &url),
                ("DEST_DISK", &disk.dev),
                ("COMPRESSED", compressed),
            ],
        )?;
        assert_failed(&r, "ImageTooLarge", "nothing was written");
        assert!(
            disk.read(1 << 20)?.iter().all(|b| *b == 0),
            "{name}: the disk was written"
        );
    }
    // Unknown size (gzip): stopped at the end of the disk, never past it.
    let url = server.add("/big.gz", compress("gz", &big)?, Mode::Normal);
    let r = run(
        "image2disk",
        &[
            ("IMG_URL", &url),
            ("DEST_DISK", &disk.dev),
            ("COMPRESSED", "true"),
        ],
    )?;
    assert_failed(&r, "ImageTooLarge", "larger than the disk");
    Ok(())
}

#[test]
fn image2disk_retries_a_broken_download_and_completes() -> TestResult {
    if !can_run() {
        return Ok(());
    }
    let data = image(IMG_LEN);
    // With Range: resumed where it broke.
    let server = Server::start()?;
    let url = server.add("/img.zst", compress("zst", &data)?, Mode::BreakOnce);
    let disk = Loop::new(8 << 20)?;
    let r = run(
        "image2disk",
        &[
            ("IMG_URL", &url),
            ("DEST_DISK", &disk.dev),
            ("COMPRESSED", "true"),
            ("RETRY_ENABLED", "true"),
        ],
    )?;
    assert_ok(&r);
    assert!(r.stdout.contains("resuming"), "{}", r.stdout);
    assert_eq!(server.range_requests.load(Ordering::SeqCst), 1);
    assert!(disk.read(IMG_LEN)? == data);

    // Without Range support: started again from the beginning.
    let server = Server::start()?;
    let url = server.add("/img.gz", compress("gz", &data)?, Mode::BreakOnceNoRange);
    let disk = Loop::new(8 << 20)?;
    let r = run(
        "image2disk",
        &[
            ("IMG_URL", &url),
            ("DEST_DISK", &disk.dev),
            ("COMPRESSED", "true"),
            ("RETRY_ENABLED", "true"),
        ],
    )?;
    assert_ok(&r);
    assert!(
        r.stdout.contains("retrying the image from the start"),
        "{}",
        r.stdout
    );
    assert_eq!(server.requests.load(Ordering::SeqCst), 2);
    assert!(disk.read(IMG_LEN)? == data);

    // Without RETRY_ENABLED the same break fails, as the hub's action does.
    let server = Server::start()?;
    let url = server.add("/img.raw", data, Mode::BreakOnce);
    let r = run("image2disk", &[("IMG_URL", &url), ("DEST_DISK", &disk.dev)])?;
    assert_failed(&r, "DownloadFailed", "");
    Ok(())
}

// ---------- writefile ----------

fn mkfs(kind: &str, dev: &str) -> TestResult {
    match kind {
        "ext4" => sh("mkfs.ext4", &["-q", "-F", dev])?,
        _ => sh("mkfs.vfat", &[dev])?,
    };
    Ok(())
}

/// Whether the running kernel mounts `fs` (after asking modprobe for its module).
fn kernel_has(fs: &str) -> bool {
    let listed = || {
        std::fs::read_to_string("/proc/filesystems")
            .is_ok_and(|t| t.lines().any(|l| l.split_whitespace().last() == Some(fs)))
    };
    if listed() {
        return true;
    }
    let _ = Command::new("modprobe").arg(fs).status();
    listed()
}

#[test]
fn writefile_writes_with_owner_and_mode_on_ext4_and_vfat() -> TestResult {
    if !can_run() {
        return Ok(());
    }
    for fs in ["ext4", "vfat"] {
        if !which(&format!("mkfs.{fs}")) {
            let msg = format!("mkfs.{fs} is not installed (Debian e2fsprogs / dosfstools)");
            assert!(std::env::var("CI").as_deref() != Ok("true"), "{msg}");
            eprintln!("SKIPPED {fs}: {msg}");
            continue;
        }
        if !kernel_has(fs) {
            // Not an install step that is missing: this kernel cannot mount the file system
            // (here: no vfat module), so no test on this machine can write to one.
            eprintln!("SKIPPED {fs}: the running kernel does not support it (/proc/filesystems)");
            continue;
        }
        let disk = Loop::new(if fs == "ext4" { 16 << 20 } else { 8 << 20 })?;
        mkfs(fs, &disk.dev)?;
        let r = run(
            "writefile",
            &[
                ("DEST_DISK", &disk.dev),
                ("FS_TYPE", fs),
                ("DEST_PATH", "/etc/cloud/cloud.cfg.d/10_tinkerbell.cfg"),
                ("CONTENTS", "datasource: Ec2\n"),
                ("UID", "1000"),
                ("GID", "1001"),
                ("MODE", "0600"),
                ("DIRMODE", "0700"),
            ],
        )?;
        assert_ok(&r);
        let m = Mounted::new(&disk.dev)?;
        let file = m.path().join("etc/cloud/cloud.cfg.d/10_tinkerbell.cfg");
        assert_eq!(std::fs::read_to_string(&file)?, "datasource: Ec2\n");
        if fs == "ext4" {
            let meta = std::fs::metadata(&file)?;
            assert_eq!(
                (meta.uid(), meta.gid(), meta.mode() & 0o7777),
                (1000, 1001, 0o600)
            );
            for d in ["etc", "etc/cloud", "etc/cloud/cloud.cfg.d"] {
                let meta = std::fs::metadata(m.path().join(d))?;
                assert_eq!(
                    (meta.uid(), meta.gid(), meta.mode() & 0o7777),
                    (1000, 1001, 0o700),
                    "{d}"
                );
            }
        }
        // FAT keeps no owner or mode: only the contents are checked there.
        drop(m);
        assert!(!mounted("tink-writefile")?, "writefile left a mount behind");

        let r = run(
            "writefile",
            &[
                ("DEST_DISK", &disk.dev),
                ("FS_TYPE", fs),
                ("DEST_PATH", "/x"),
                ("MODE", "rw-------"),
            ],
        )?;
        assert_failed(&r, "InvalidVariable", "MODE=");
        let r = run(
            "writefile",
            &[
                ("DEST_DISK", &disk.dev),
                ("FS_TYPE", fs),
                ("DEST_PATH", "/x"),
                ("DIRMODE", "0999"),
            ],
        )?;
        assert_failed(&r, "InvalidVariable", "DIRMODE=");
        let r = run(
            "writefile",
            &[
                ("DEST_DISK", &disk.dev),
                ("FS_TYPE", fs),
                ("DEST_PATH", "relative/x"),
            ],
        )?;
        assert_failed(&r, "InvalidVariable", "DEST_PATH=");
    }
    let r = run(
        "writefile",
        &[
            ("DEST_DISK", "/dev/tink-no-such-part"),
            ("FS_TYPE", "ext4"),
            ("DEST_PATH", "/x"),
        ],
    )?;
    assert_failed(&r, "DiskNotFound", "DEST_DISK=/dev/tink-no-such-part");
    Ok(())
}

fn mounted(needle: &str) -> Result<bool, Box<dyn std::error::Error>> {
    Ok(
        std::fs::read_to_string("/proc/mounts")?.contains(&format!("{needle} "))
            || (!needle.starts_with("/dev/")
                && std::fs::read_to_string("/proc/mounts")?.contains(needle)),
    )
}

// ---------- cexec ----------

/// An ext4 root with busybox-static as /bin/sh.
fn busybox_root() -> Result<Option<Loop>, Box<dyn std::error::Error>> {
    let busybox = ["/bin/busybox", "/usr/bin/busybox"]
        .into_iter()
        .map(PathBuf::from)
        .find(|p| p.exists());
    let Some(busybox) = busybox else {
        let msg = "busybox-static is not installed";
        assert!(std::env::var("CI").as_deref() != Ok("true"), "{msg}");
        eprintln!("SKIPPED: {msg}");
        return Ok(None);
    };
    let disk = Loop::new(16 << 20)?;
    mkfs("ext4", &disk.dev)?;
    let m = Mounted::new(&disk.dev)?;
    std::fs::create_dir_all(m.path().join("bin"))?;
    std::fs::create_dir_all(m.path().join("etc"))?;
    std::fs::copy(&busybox, m.path().join("bin/busybox"))?;
    std::os::unix::fs::symlink("busybox", m.path().join("bin/sh"))?;
    std::fs::write(m.path().join("etc/resolv.conf"), "nameserver 192.0.2.53\n")?;
    Ok(Some(disk))
}

#[test]
fn cexec_runs_in_the_chroot_and_passes_the_exit_code_through() -> TestResult {
    if !can_run() {
        return Ok(());
    }
    let Some(disk) = busybox_root()? else {
        return Ok(());
    };
    let base = [
        ("BLOCK_DEVICE", disk.dev.as_str()),
        ("FS_TYPE", "ext4"),
        ("CHROOT", "y"),
    ];
    let with = |extra: &[(&'static str, &'static str)]| {
        let mut v: Vec<(&str, &str)> = base.to_vec();
        v.extend_from_slice(extra);
        v
    };
    // A failing command: its exit code is the action's; /proc was bound.
    let r = run(
        "cexec",
        &with(&[
            ("DEFAULT_INTERPRETER", "/bin/sh -c"),
            (
                "CMD_LINE",
                "echo $MARK > /marker; test -e /proc/self/status || exit 3; exit 7",
            ),
            ("MARK", "from-env"),
        ]),
    )?;
    assert_eq!(r.code, 7, "{}", r.stdout);
    assert_eq!(r.reason.as_deref(), Some("CommandFailed"));
    assert!(
        r.message.as_deref().is_some_and(|m| m.contains("code 7")),
        "{:?}",
        r.message
    );
    assert!(
        !mounted(&disk.dev)?,
        "cexec left a mount behind after a failure"
    );

    // Several commands without an interpreter; resolv.conf from the host, then put back.
    let r = run(
        "cexec",
        &with(&[
            (
                "CMD_LINE",
                "/bin/busybox cp /etc/resolv.conf /resolv.seen; /bin/busybox touch /ok",
            ),
            ("UPDATE_RESOLV_CONF", "true"),
        ]),
    )?;
    assert_ok(&r);
    assert!(!mounted(&disk.dev)?, "cexec left a mount behind");
    let m = Mounted::new(&disk.dev)?;
    assert_eq!(
        std::fs::read_to_string(m.path().join("marker"))?,
        "from-env\n"
    );
    assert!(m.path().join("ok").exists());
    assert_eq!(
        std::fs::read(m.path().join("resolv.seen"))?,
        std::fs::read("/etc/resolv.conf")?
    );
    assert_eq!(
        std::fs::read_to_string(m.path().join("etc/resolv.conf"))?,
        "nameserver 192.0.2.53\n"
    );
    drop(m);

    let r = run(
        "cexec",
        &with(&[
            ("DEFAULT_INTERPRETER", "/bin/bash -c"),
            ("CMD_LINE", "true"),
        ]),
    )?;
    assert_failed(&r, "InvalidVariable", "DEFAULT_INTERPRETER");
    let r = run(
        "cexec",
        &[("BLOCK_DEVICE", disk.dev.as_str()), ("FS_TYPE", "ext4")],
    )?;
    assert_failed(&r, "MissingVariable", "CMD_LINE");
    assert!(!mounted(&disk.dev)?);
    Ok(())
}

// ---------- kexec ----------

#[test]
fn kexec_fails_on_a_missing_kernel_and_hands_over_through_the_power_contract() -> TestResult {
    if !can_run() {
        return Ok(());
    }
    let disk = Loop::new(16 << 20)?;
    mkfs("ext4", &disk.dev)?;
    {
        let m = Mounted::new(&disk.dev)?;
        std::fs::create_dir_all(m.path().join("boot"))?;
        std::fs::write(m.path().join("boot/vmlinuz"), b"not really a kernel")?;
        std::fs::write(m.path().join("boot/initrd.img"), b"not really an initrd")?;
        std::fs::write(m.path().join("boot/extra.img"), b"second initrd")?;
    }
    // Without KERNEL_PATH and without a grub.cfg: nothing to load.
    let r = run(
        "kexec",
        &[("BLOCK_DEVICE", disk.dev.as_str()), ("FS_TYPE", "ext4")],
    )?;
    assert_failed(&r, "KernelNotFound", "no KERNEL_PATH");
    {
        let m = Mounted::new(&disk.dev)?;
        std::fs::create_dir_all(m.path().join("boot/grub"))?;
        std::fs::write(
            m.path().join("boot/grub/grub.cfg"),
            "set default=\"1\"\nmenuentry 'a' {\n linux /boot/vmlinuz-missing ro\n initrd /boot/initrd.img\n}\n\
             menuentry 'b' {\n\tlinux\t/boot/vmlinuz root=/dev/sda1 ro quiet\n\tinitrd\t/boot/initrd.img /boot/extra.img\n}\n",
        )?;
    }
    // The published templates' form: BLOCK_DEVICE and FS_TYPE only; grub.cfg's default entry.
    let r = run(
        "kexec",
        &[
            ("BLOCK_DEVICE", disk.dev.as_str()),
            ("FS_TYPE", "ext4"),
            ("KEXEC_DRY_RUN", "true"),
        ],
    )?;
    assert_ok(&r);
    assert!(r.stdout.contains("kernel=/boot/vmlinuz initrd=/boot/initrd.img /boot/extra.img cmdline=root=/dev/sda1 ro quiet"), "{}", r.stdout);
    assert_eq!(r.power.as_deref(), Some("kexec"));
    let base = [
        ("BLOCK_DEVICE", disk.dev.as_str()),
        ("FS_TYPE", "ext4"),
        ("CMD_LINE", "root=/dev/sda1 ro"),
    ];
    let mut env = base.to_vec();
    env.extend([
        ("KERNEL_PATH", "/boot/vmlinuz-missing"),
        ("INITRD_PATH", "/boot/initrd.img"),
    ]);
    let r = run("kexec", &env)?;
    assert_failed(&r, "KernelNotFound", "KERNEL_PATH=/boot/vmlinuz-missing");
    assert_eq!(
        r.power, None,
        "a failed kexec must not ask for a power action"
    );

    let mut env = base.to_vec();
    env.extend([
        ("KERNEL_PATH", "/boot/vmlinuz"),
        ("INITRD_PATH", "/boot/initrd.missing"),
    ]);
    let r = run("kexec", &env)?;
    assert_failed(&r, "InitrdNotFound", "INITRD_PATH");
    assert_eq!(r.power, None);

    // The load itself is not exercised here: kexec_file_load would load a kernel into the CI
    // host's own kernel. KEXEC_DRY_RUN skips only that call.
    let mut env = base.to_vec();
    env.extend([
        ("KERNEL_PATH", "/boot/vmlinuz"),
        ("INITRD_PATH", "/boot/initrd.img"),
        ("KEXEC_DRY_RUN", "true"),
    ]);
    let r = run("kexec", &env)?;
    assert_ok(&r);
    assert!(
        r.stdout.contains("the kernel was not loaded"),
        "{}",
        r.stdout
    );
    assert_eq!(r.power.as_deref(), Some("kexec"));
    assert!(!mounted(&disk.dev)?);
    Ok(())
}

#[test]
fn unknown_action_is_a_usage_error() -> TestResult {
    let r = run("format-c", &[])?;
    assert_eq!(r.code, 2);
    assert!(r.stdout.contains("usage"));
    Ok(())
}

// ---------- archive2disk ----------

fn tarball() -> Result<Vec<u8>, Box<dyn std::error::Error>> {
    let mut b = tar::Builder::new(Vec::new());
    let mut dir = tar::Header::new_gnu();
    dir.set_entry_type(tar::EntryType::Directory);
    dir.set_mode(0o750);
    dir.set_uid(1000);
    dir.set_gid(1001);
    dir.set_size(0);
    b.append_data(&mut dir, "etc/app", std::io::empty())?;
    let body = b"hello from the archive\n";
    let mut file = tar::Header::new_gnu();
    file.set_mode(0o640);
    file.set_uid(1000);
    file.set_gid(1001);
    file.set_size(body.len() as u64);
    b.append_data(&mut file, "etc/app/motd", &body[..])?;
    let mut link = tar::Header::new_gnu();
    link.set_entry_type(tar::EntryType::Symlink);
    link.set_size(0);
    link.set_mode(0o777);
    link.set_uid(0);
    link.set_gid(0);
    b.append_link(&mut link, "etc/app/link", "motd")?;
    Ok(b.into_inner()?)
}

#[test]
fn archive2disk_unpacks_with_owners_modes_and_links_and_checks_the_digest() -> TestResult {
    if !can_run() {
        return Ok(());
    }
    let server = Server::start()?;
    let tar = tarball()?;
    let tgz = {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        e.write_all(&tar)?;
        e.finish()?
    };
    let sum = format!("sha256:{}", sha256_hex(&tgz));
    let url = server.add("/root.tar.gz", tgz, Mode::Normal);
    let disk = Loop::new(16 << 20)?;
    mkfs("ext4", &disk.dev)?;
    let base = [
        ("DEST_DISK", disk.dev.as_str()),
        ("FS_TYPE", "ext4"),
        ("DEST_PATH", "/srv"),
        ("ARCHIVE_URL", url.as_str()),
        ("ARCHIVE_TYPE", "targz"),
    ];

    let r = run("archive2disk", &base)?;
    assert_failed(&r, "MissingVariable", "TARFILE_CHECKSUM");
    let mut env = base.to_vec();
    let bad = format!("sha256:{}", "1".repeat(64));
    env.push(("TARFILE_CHECKSUM", &bad));
    let r = run("archive2disk", &env)?;
    assert_failed(&r, "ChecksumMismatch", "TARFILE_CHECKSUM");

    let mut env = base.to_vec();
    env.push(("TARFILE_CHECKSUM", &sum));
    let r = run("archive2disk", &env)?;
    assert_ok(&r);
    assert!(!mounted(&disk.dev)?, "archive2disk left a mount behind");
    {
        let m = Mounted::new(&disk.dev)?;
        let motd = m.path().join("srv/etc/app/motd");
        assert_eq!(std::fs::read_to_string(&motd)?, "hello from the archive\n");
        let meta = std::fs::metadata(&motd)?;
        assert_eq!(
            (meta.uid(), meta.gid(), meta.mode() & 0o7777),
            (1000, 1001, 0o640)
        );
        let dir = std::fs::metadata(m.path().join("srv/etc/app"))?;
        assert_eq!((dir.uid(), dir.mode() & 0o7777), (1000, 0o750));
        assert_eq!(
            std::fs::read_link(m.path().join("srv/etc/app/link"))?,
            PathBuf::from("motd")
        );
    }

    // A plain tar without a digest, when the template says so explicitly.
    let url = server.add("/root.tar", tar, Mode::Normal);
    let r = run(
        "archive2disk",
        &[
            ("DEST_DISK", disk.dev.as_str()),
            ("FS_TYPE", "ext4"),
            ("DEST_PATH", "/opt"),
            ("ARCHIVE_URL", url.as_str()),
            ("ARCHIVE_TYPE", "tar"),
            ("INSECURE_NO_TARFILE_CHECKSUM_VERIFICATION", "true"),
        ],
    )?;
    assert_ok(&r);
    let m = Mounted::new(&disk.dev)?;
    assert!(m.path().join("opt/etc/app/motd").exists());
    Ok(())
}

// ---------- tools the newer actions need ----------

/// Whether `tool` is installed; says so loudly when not (and fails under `CI=true`).
fn need(tool: &str, package: &str) -> bool {
    if which(tool) {
        return true;
    }
    let msg =
        format!("SKIPPED: {tool} is not installed (Debian {package}: scripts/install-deps.sh)");
    assert!(std::env::var("CI").as_deref() != Ok("true"), "{msg}");
    eprintln!("{msg}");
    false
}

/// A blocking HTTP/1.1 exchange with `Connection: close`: status, head, body.
fn http_raw(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Result<(u16, String, Vec<u8>), Box<dyn std::error::Error>> {
    let mut s = std::net::TcpStream::connect(addr)?;
    s.set_read_timeout(Some(std::time::Duration::from_secs(30)))?;
    let mut req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes())?;
    s.write_all(body)?;
    let mut resp = Vec::new();
    s.read_to_end(&mut resp)?;
    let split = resp
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or("no end of the response head")?;
    let head = String::from_utf8_lossy(&resp[..split]).to_string();
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or("no status")?;
    Ok((status, head, resp[split + 4..].to_vec()))
}

fn header_of(head: &str, name: &str) -> Option<String> {
    head.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.trim()
            .eq_ignore_ascii_case(name)
            .then(|| v.trim().to_owned())
    })
}

fn port_of(addr: &str) -> &str {
    addr.rsplit(':').next().unwrap_or(addr)
}

fn free_port() -> Result<u16, Box<dyn std::error::Error>> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

// ---------- oci2disk ----------

/// Debian's docker-registry on 127.0.0.1 with its storage in a temporary directory.
struct Registry {
    child: std::process::Child,
    addr: String,
    dir: tempfile::TempDir,
}

impl Registry {
    fn start() -> Result<Self, Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let storage = dir.path().join("storage");
        Self::serve(dir, &storage, None)
    }

    /// A second registry over the same storage, speaking TLS with `tls`'s certificate.
    fn with_tls(&self, tls: &TestTls) -> Result<Self, Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        std::fs::write(dir.path().join("cert.pem"), &tls.cert_pem)?;
        std::fs::write(dir.path().join("key.pem"), &tls.key_pem)?;
        let tls_conf = format!(
            "  tls:\n    certificate: {}\n    key: {}\n",
            dir.path().join("cert.pem").display(),
            dir.path().join("key.pem").display()
        );
        let storage = self.dir.path().join("storage");
        Self::serve(dir, &storage, Some(tls_conf))
    }

    fn serve(
        dir: tempfile::TempDir,
        storage: &Path,
        tls: Option<String>,
    ) -> Result<Self, Box<dyn std::error::Error>> {
        let port = free_port()?;
        let addr = format!("127.0.0.1:{port}");
        let config = dir.path().join("config.yml");
        std::fs::write(
            &config,
            format!(
                "version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n    rootdirectory: {}\nhttp:\n  addr: {addr}\n{}",
                storage.display(),
                tls.as_deref().unwrap_or("")
            ),
        )?;
        let plain = tls.is_none();
        let log = std::fs::File::create(dir.path().join("registry.log"))?;
        let child = Command::new("docker-registry")
            .arg("serve")
            .arg(&config)
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()?;
        let reg = Self { child, addr, dir };
        for _ in 0..100 {
            // A TLS registry answers plain HTTP with a 400: it is listening.
            if http_raw(&reg.addr, "GET", "/v2/", &[], b"").is_ok_and(|r| !plain || r.0 == 200) {
                return Ok(reg);
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        Err(format!(
            "docker-registry did not answer on {}: {}",
            reg.addr,
            std::fs::read_to_string(reg.dir.path().join("registry.log")).unwrap_or_default()
        )
        .into())
    }

    /// Uploads a blob (POST, then PUT with the digest); returns its digest.
    fn blob(&self, repo: &str, data: &[u8]) -> Result<String, Box<dyn std::error::Error>> {
        let digest = format!("sha256:{}", sha256_hex(data));
        let (status, head, _) = http_raw(
            &self.addr,
            "POST",
            &format!("/v2/{repo}/blobs/uploads/"),
            &[],
            b"",
        )?;
        assert_eq!(status, 202, "{head}");
        let location = header_of(&head, "Location").ok_or("no Location")?;
        let location = location
            .strip_prefix(&format!("http://{}", self.addr))
            .unwrap_or(&location)
            .to_owned();
        let sep = if location.contains('?') { '&' } else { '?' };
        let (status, head, _) = http_raw(
            &self.addr,
            "PUT",
            &format!("{location}{sep}digest={digest}"),
            &[("Content-Type", "application/octet-stream")],
            data,
        )?;
        assert_eq!(status, 201, "{head}");
        Ok(digest)
    }

    /// Pushes `data` as an ORAS-style artifact (one titled layer); returns the manifest digest.
    fn push(
        &self,
        repo: &str,
        tag: &str,
        title: &str,
        data: &[u8],
    ) -> Result<String, Box<dyn std::error::Error>> {
        let config = b"{}";
        let config_digest = self.blob(repo, config)?;
        let layer_digest = self.blob(repo, data)?;
        let manifest = serde_json::json!({
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {
                "mediaType": "application/vnd.oci.image.config.v1+json",
                "digest": config_digest,
                "size": config.len(),
            },
            "layers": [{
                "mediaType": "application/vnd.oci.image.layer.v1.tar",
                "digest": layer_digest,
                "size": data.len(),
                "annotations": {"org.opencontainers.image.title": title},
            }],
        });
        let body = serde_json::to_vec(&manifest)?;
        let (status, head, resp) = http_raw(
            &self.addr,
            "PUT",
            &format!("/v2/{repo}/manifests/{tag}"),
            &[("Content-Type", "application/vnd.oci.image.manifest.v1+json")],
            &body,
        )?;
        assert_eq!(status, 201, "{head}\n{}", String::from_utf8_lossy(&resp));
        Ok(format!("sha256:{}", sha256_hex(&body)))
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[derive(Clone, Copy, PartialEq)]
enum ProxyMode {
    /// Forwards what the bearer token allows.
    Pass,
    /// Blob answers are cut in half.
    TruncateBlobs,
    /// One byte of each blob is changed.
    CorruptBlobs,
}

const TOKEN: &str = "tok-3f9a";

/// A registry front that wants a bearer token (as Docker Hub, ghcr.io and Harbor do): a 401
/// challenge naming its `/token` realm, which hands out the token for `user:secret` only.
/// Returns `host:port` and the count of token requests.
fn auth_proxy(
    upstream: String,
    mode: ProxyMode,
) -> Result<(String, Arc<AtomicUsize>), Box<dyn std::error::Error>> {
    use base64::Engine;
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?.to_string();
    let tokens = Arc::new(AtomicUsize::new(0));
    let (me, count) = (addr.clone(), tokens.clone());
    let basic = format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode("user:secret")
    );
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut sock) = conn else { continue };
            let (upstream, me, count, basic) =
                (upstream.clone(), me.clone(), count.clone(), basic.clone());
            std::thread::spawn(move || -> std::io::Result<()> {
                let mut head = Vec::new();
                let mut b = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") {
                    if sock.read(&mut b)? == 0 {
                        return Ok(());
                    }
                    head.push(b[0]);
                }
                let head = String::from_utf8_lossy(&head).to_string();
                let path = head.split_whitespace().nth(1).unwrap_or("/").to_owned();
                let auth = header_of(&head, "Authorization").unwrap_or_default();
                if path.starts_with("/token") {
                    count.fetch_add(1, Ordering::SeqCst);
                    let ok =
                        auth == basic && path.contains("scope=repository%3Adisks%2Fdebian%3Apull");
                    let body = format!("{{\"token\":\"{TOKEN}\"}}");
                    let resp = if ok {
                        format!(
                            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                            body.len()
                        )
                    } else {
                        "HTTP/1.1 401 Unauthorized\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".to_owned()
                    };
                    return sock.write_all(resp.as_bytes());
                }
                if auth != format!("Bearer {TOKEN}") {
                    let resp = format!(
                        "HTTP/1.1 401 Unauthorized\r\nWWW-Authenticate: Bearer realm=\"http://{me}/token\",service=\"test-registry\",scope=\"repository:disks/debian:pull\"\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                    );
                    return sock.write_all(resp.as_bytes());
                }
                let accept = header_of(&head, "Accept").unwrap_or_else(|| "*/*".into());
                let mut up = std::net::TcpStream::connect(&upstream)?;
                up.write_all(
                    format!(
                        "GET {path} HTTP/1.1\r\nHost: {upstream}\r\nAccept: {accept}\r\nConnection: close\r\n\r\n"
                    )
                    .as_bytes(),
                )?;
                let mut resp = Vec::new();
                up.read_to_end(&mut resp)?;
                let split = resp
                    .windows(4)
                    .position(|w| w == b"\r\n\r\n")
                    .map_or(resp.len(), |p| p + 4);
                let blob = path.contains("/blobs/") && resp.len() > split + 1024;
                match mode {
                    ProxyMode::TruncateBlobs if blob => {
                        let half = split + (resp.len() - split) / 2;
                        sock.write_all(&resp[..half])?;
                    }
                    ProxyMode::CorruptBlobs if blob => {
                        let mid = split + (resp.len() - split) / 2;
                        resp[mid] ^= 0xff;
                        sock.write_all(&resp)?;
                    }
                    _ => sock.write_all(&resp)?,
                }
                Ok(())
            });
        }
    });
    Ok((addr, tokens))
}

#[test]
fn oci2disk_writes_an_artifact_from_a_registry_and_fails_with_reasons() -> TestResult {
    if !can_run() || !need("docker-registry", "docker-registry") {
        return Ok(());
    }
    let reg = Registry::start()?;
    let data = image(IMG_LEN);
    let gz = compress("gz", &data)?;
    let manifest = reg.push("disks/debian", "raw.gz", "debian.raw.gz", &gz)?;
    let big = image(9 << 20);
    reg.push("disks/big", "raw", "big.raw", &big)?;
    reg.push("disks/plain", "raw", "plain.raw", &data)?;

    // As a published template writes it: host:port/repo:tag, no scheme. The registry is plain
    // HTTP: the TLS attempt is answered in plain text and the action falls back.
    let disk = Loop::new(8 << 20)?;
    let img = format!("{}/disks/debian:raw.gz", reg.addr);
    let r = run(
        "oci2disk",
        &[
            ("IMG_URL", &img),
            ("DEST_DISK", &disk.dev),
            ("COMPRESSED", "true"),
        ],
    )?;
    assert_ok(&r);
    assert!(r.stdout.contains("plain http"), "{}", r.stdout);
    assert!(
        disk.read(IMG_LEN)? == data,
        "the disk differs from the image"
    );

    // By manifest digest, with the scheme given.
    let disk = Loop::new(8 << 20)?;
    let img = format!("http://{}/disks/debian@{manifest}", reg.addr);
    let r = run("oci2disk", &[("IMG_URL", &img), ("DEST_DISK", &disk.dev)])?;
    assert_ok(&r);
    assert!(disk.read(IMG_LEN)? == data);

    // Missing tag, missing repository.
    for missing in ["disks/debian:nope", "disks/none:raw"] {
        let img = format!("http://{}/{missing}", reg.addr);
        let r = run("oci2disk", &[("IMG_URL", &img), ("DEST_DISK", &disk.dev)])?;
        assert_failed(&r, "ImageNotFound", missing.split(':').next().unwrap_or(""));
    }
    // https:// forbids the fallback.
    let img = format!("https://{}/disks/debian:raw.gz", reg.addr);
    let r = run("oci2disk", &[("IMG_URL", &img), ("DEST_DISK", &disk.dev)])?;
    assert_failed(&r, "RegistryUnreachable", "speaks plain HTTP");
    // Nothing listens there.
    let img = format!("127.0.0.1:{}/disks/debian:raw.gz", free_port()?);
    let r = run("oci2disk", &[("IMG_URL", &img), ("DEST_DISK", &disk.dev)])?;
    assert_failed(&r, "RegistryUnreachable", "127.0.0.1");
    // Wrong disk, bad reference.
    let img = format!("{}/disks/debian:raw.gz", reg.addr);
    let r = run(
        "oci2disk",
        &[("IMG_URL", &img), ("DEST_DISK", "/dev/tink-no-such-disk")],
    )?;
    assert_failed(&r, "DiskNotFound", "DEST_DISK=/dev/tink-no-such-disk");
    let r = run(
        "oci2disk",
        &[("IMG_URL", "ftp://x/y:z"), ("DEST_DISK", &disk.dev)],
    )?;
    assert_failed(&r, "InvalidVariable", "IMG_URL");
    // Bigger than the disk: refused before writing (the blob's Content-Length).
    let small = Loop::new(8 << 20)?;
    let img = format!("http://{}/disks/big:raw", reg.addr);
    let r = run("oci2disk", &[("IMG_URL", &img), ("DEST_DISK", &small.dev)])?;
    assert_failed(&r, "ImageTooLarge", "nothing was written");
    assert!(small.read(1 << 20)?.iter().all(|b| *b == 0));

    // Behind a bearer-token front: the token is fetched with the credentials.
    let (front, tokens) = auth_proxy(reg.addr.clone(), ProxyMode::Pass)?;
    let disk = Loop::new(8 << 20)?;
    let img = format!("http://{front}/disks/debian:raw.gz");
    let r = run(
        "oci2disk",
        &[
            ("IMG_URL", &img),
            ("DEST_DISK", &disk.dev),
            ("REGISTRY_USERNAME", "user"),
            ("REGISTRY_PASSWORD", "secret"),
        ],
    )?;
    assert_ok(&r);
    assert!(tokens.load(Ordering::SeqCst) >= 1);
    assert!(disk.read(IMG_LEN)? == data);
    let r = run("oci2disk", &[("IMG_URL", &img), ("DEST_DISK", &disk.dev)])?;
    assert_failed(&r, "RegistryAuthFailed", "REGISTRY_USERNAME");
    let r = run(
        "oci2disk",
        &[
            ("IMG_URL", &img),
            ("DEST_DISK", &disk.dev),
            ("REGISTRY_USERNAME", "user"),
        ],
    )?;
    assert_failed(&r, "MissingVariable", "REGISTRY_PASSWORD");

    // A registry that speaks TLS: https without a fallback, trusted through CA_CERT, or any
    // certificate with SKIP_VERIFY; refused otherwise.
    let tls = TestTls::new()?;
    let treg = reg.with_tls(&tls)?;
    let ca = treg.dir.path().join("ca.pem");
    std::fs::write(&ca, &tls.ca_pem)?;
    let ca = ca.to_string_lossy().into_owned();
    let img = format!("localhost:{}/disks/debian:raw.gz", port_of(&treg.addr));
    let disk = Loop::new(8 << 20)?;
    let r = run(
        "oci2disk",
        &[
            ("IMG_URL", &img),
            ("DEST_DISK", &disk.dev),
            ("CA_CERT", &ca),
        ],
    )?;
    assert_ok(&r);
    assert!(!r.stdout.contains("plain http"), "{}", r.stdout);
    assert!(disk.read(IMG_LEN)? == data);
    let disk = Loop::new(8 << 20)?;
    let r = run(
        "oci2disk",
        &[
            ("IMG_URL", &img),
            ("DEST_DISK", &disk.dev),
            ("SKIP_VERIFY", "true"),
        ],
    )?;
    assert_ok(&r);
    assert!(disk.read(IMG_LEN)? == data);
    let r = run("oci2disk", &[("IMG_URL", &img), ("DEST_DISK", &disk.dev)])?;
    assert_failed(&r, "RegistryUnreachable", "certificate");
    let r = run(
        "oci2disk",
        &[
            ("IMG_URL", &format!("http://{img}")),
            ("DEST_DISK", &disk.dev),
        ],
    )?;
    assert_failed(
        &r,
        "RegistryUnreachable",
        "not an OCI distribution registry",
    );
    drop(treg);

    // A blob download cut in half; a blob changed on the way (the layer digest catches it).
    let creds = [
        ("REGISTRY_USERNAME", "user"),
        ("REGISTRY_PASSWORD", "secret"),
    ];
    let (front, _) = auth_proxy(reg.addr.clone(), ProxyMode::TruncateBlobs)?;
    let img = format!("http://{front}/disks/debian:raw.gz");
    let mut env = vec![("IMG_URL", img.as_str()), ("DEST_DISK", disk.dev.as_str())];
    env.extend(creds);
    let r = run("oci2disk", &env)?;
    assert_failed(&r, "DownloadFailed", "");
    let (front, _) = auth_proxy(reg.addr.clone(), ProxyMode::CorruptBlobs)?;
    let img = format!("http://{front}/disks/plain:raw");
    let mut env = vec![("IMG_URL", img.as_str()), ("DEST_DISK", disk.dev.as_str())];
    env.extend(creds);
    let r = run("oci2disk", &env)?;
    assert_failed(&r, "ChecksumMismatch", "layer digest");
    Ok(())
}

// ---------- qemuimg2disk ----------

#[test]
fn qemuimg2disk_converts_qcow2_streams_raw_and_fails_with_reasons() -> TestResult {
    if !can_run() || !need("qemu-img", "qemu-utils") {
        return Ok(());
    }
    let work = tempfile::tempdir()?;
    let tmp = tempfile::tempdir()?;
    let w = |n: &str| work.path().join(n).to_string_lossy().into_owned();
    let data = image(IMG_LEN);
    std::fs::write(w("disk.raw"), &data)?;
    // Compressed clusters, as cloud images ship.
    sh(
        "qemu-img",
        &[
            "convert",
            "-f",
            "raw",
            "-O",
            "qcow2",
            "-c",
            &w("disk.raw"),
            &w("disk.qcow2"),
        ],
    )?;
    let qcow2 = std::fs::read(w("disk.qcow2"))?;
    assert!(qcow2.starts_with(b"QFI\xfb"));
    sh(
        "qemu-img",
        &[
            "convert",
            "-f",
            "raw",
            "-O",
            "vmdk",
            &w("disk.raw"),
            &w("disk.vmdk"),
        ],
    )?;

    let server = Server::start()?;
    let tmp_dir = tmp.path().to_string_lossy().into_owned();
    let cases = [
        ("/cloud.img", qcow2.clone(), true),
        ("/cloud.qcow2.gz", compress("gz", &qcow2)?, true),
        ("/disk.vmdk", std::fs::read(w("disk.vmdk"))?, true),
        ("/disk.raw.zst", compress("zst", &data)?, false),
    ];
    for (path, body, converted) in cases {
        let url = server.add(path, body, Mode::Normal);
        let disk = Loop::new(16 << 20)?;
        let r = run(
            "qemuimg2disk",
            &[
                ("IMG_URL", &url),
                ("DEST_DISK", &disk.dev),
                ("TMPDIR", &tmp_dir),
                ("PROGRESS_INTERVAL_SECONDS", "0"),
            ],
        )?;
        assert_ok(&r);
        assert_eq!(
            r.stdout.contains("converting"),
            converted,
            "{path}: {}",
            r.stdout
        );
        assert_eq!(
            r.stdout.contains("convert progress percent=100"),
            converted,
            "{path}: {}",
            r.stdout
        );
        assert!(
            disk.read(IMG_LEN)? == data,
            "{path}: the disk differs from the image"
        );
        assert!(
            disk.read(IMG_LEN + 8192)?[IMG_LEN..]
                .iter()
                .all(|b| *b == 0),
            "{path}: wrote past the image"
        );
        assert_eq!(
            std::fs::read_dir(tmp.path())?.count(),
            0,
            "{path}: the staged file was left behind"
        );
    }
    // Onto a regular file too (qemu-img creates it at the virtual size).
    let url = format!("{}/cloud.img", server.base);
    let file = work.path().join("out.raw");
    std::fs::File::create(&file)?;
    let r = run(
        "qemuimg2disk",
        &[
            ("IMG_URL", &url),
            ("DEST_DISK", &file.to_string_lossy()),
            ("TMPDIR", &tmp_dir),
        ],
    )?;
    assert_ok(&r);
    assert!(std::fs::read(&file)?[..IMG_LEN] == data[..]);

    // image2disk recognises qcow2, also inside gzip, and points at qemuimg2disk.
    let disk = Loop::new(16 << 20)?;
    for path in ["/cloud.img", "/cloud.qcow2.gz"] {
        let url = format!("{}{path}", server.base);
        let r = run("image2disk", &[("IMG_URL", &url), ("DEST_DISK", &disk.dev)])?;
        assert_failed(&r, "UnsupportedFormat", "qemuimg2disk");
        assert!(
            disk.read(1 << 20)?.iter().all(|b| *b == 0),
            "{path}: written"
        );
    }

    // Virtual size larger than the disk: refused before writing.
    sh(
        "qemu-img",
        &["create", "-q", "-f", "qcow2", &w("big.qcow2"), "16M"],
    )?;
    let url = server.add("/big.qcow2", std::fs::read(w("big.qcow2"))?, Mode::Normal);
    let small = Loop::new(8 << 20)?;
    let r = run(
        "qemuimg2disk",
        &[
            ("IMG_URL", &url),
            ("DEST_DISK", &small.dev),
            ("TMPDIR", &tmp_dir),
        ],
    )?;
    assert_failed(&r, "ImageTooLarge", "virtual size");
    // A backing file would be read from this machine: refused.
    sh(
        "qemu-img",
        &[
            "create",
            "-q",
            "-f",
            "qcow2",
            "-b",
            &w("disk.raw"),
            "-F",
            "raw",
            &w("backed.qcow2"),
        ],
    )?;
    let url = server.add(
        "/backed.qcow2",
        std::fs::read(w("backed.qcow2"))?,
        Mode::Normal,
    );
    let r = run(
        "qemuimg2disk",
        &[
            ("IMG_URL", &url),
            ("DEST_DISK", &disk.dev),
            ("TMPDIR", &tmp_dir),
        ],
    )?;
    assert_failed(&r, "UnsupportedFormat", "disk.raw");
    assert!(disk.read(1 << 20)?.iter().all(|b| *b == 0));
    // A TMPDIR too small for the staged image: found before the download when its size is
    // known, else when the file system fills.
    let small_tmp = tempfile::tempdir()?;
    sh(
        "mount",
        &[
            "-t",
            "tmpfs",
            "-o",
            "size=1m",
            "tmpfs",
            &small_tmp.path().to_string_lossy(),
        ],
    )?;
    struct Unmount<'a>(&'a Path);
    impl Drop for Unmount<'_> {
        fn drop(&mut self) {
            let _ = Command::new("umount").arg(self.0).status();
        }
    }
    let _unmount = Unmount(small_tmp.path());
    let small_tmp_dir = small_tmp.path().to_string_lossy().into_owned();
    for (path, says) in [
        ("/cloud.img", "bytes free"),
        ("/cloud.qcow2.gz", "temporary file"),
    ] {
        let url = format!("{}{path}", server.base);
        let r = run(
            "qemuimg2disk",
            &[
                ("IMG_URL", &url),
                ("DEST_DISK", &disk.dev),
                ("TMPDIR", &small_tmp_dir),
            ],
        )?;
        assert_failed(&r, "WriteFailed", says);
        assert_eq!(std::fs::read_dir(small_tmp.path())?.count(), 0, "{path}");
    }
    // A download cut short; a wrong disk; no qemu-img.
    let url = server.add("/cut.qcow2", qcow2.clone(), Mode::Truncate);
    let r = run(
        "qemuimg2disk",
        &[
            ("IMG_URL", &url),
            ("DEST_DISK", &disk.dev),
            ("TMPDIR", &tmp_dir),
        ],
    )?;
    assert_failed(&r, "DownloadFailed", "");
    let url = format!("{}/cloud.img", server.base);
    let r = run(
        "qemuimg2disk",
        &[("IMG_URL", &url), ("DEST_DISK", "/dev/tink-no-such-disk")],
    )?;
    assert_failed(&r, "DiskNotFound", "DEST_DISK=/dev/tink-no-such-disk");
    let r = run(
        "qemuimg2disk",
        &[
            ("IMG_URL", &url),
            ("DEST_DISK", &disk.dev),
            ("TMPDIR", &tmp_dir),
            ("QEMU_IMG", "/nonexistent/qemu-img"),
        ],
    )?;
    assert_failed(&r, "ConvertFailed", "qemu-utils");
    assert_eq!(std::fs::read_dir(tmp.path())?.count(), 0);
    Ok(())
}

// ---------- https ----------

/// A test CA and a server certificate for `localhost` signed by it, in PEM.
struct TestTls {
    ca_pem: String,
    cert_pem: String,
    key_pem: String,
}

impl TestTls {
    fn new() -> Result<Self, Box<dyn std::error::Error>> {
        use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
        let ca_key = KeyPair::generate()?;
        let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "tink-actions test CA");
        let ca = ca_params.self_signed(&ca_key)?;
        let key = KeyPair::generate()?;
        let params = CertificateParams::new(vec!["localhost".to_owned()])?;
        let cert = params.signed_by(&key, &Issuer::from_params(&ca_params, &ca_key))?;
        Ok(Self {
            ca_pem: ca.pem(),
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        })
    }

    fn server_config(
        &self,
    ) -> Result<Arc<tokio_rustls::rustls::ServerConfig>, Box<dyn std::error::Error>> {
        use rustls_pki_types::pem::PemObject;
        let certs = vec![rustls_pki_types::CertificateDer::from_pem_slice(
            self.cert_pem.as_bytes(),
        )?];
        let key = rustls_pki_types::PrivateKeyDer::from_pem_slice(self.key_pem.as_bytes())?;
        let config = tokio_rustls::rustls::ServerConfig::builder_with_provider(Arc::new(
            tokio_rustls::rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(certs, key)?;
        Ok(Arc::new(config))
    }
}

#[test]
fn https_urls_are_verified_against_the_system_roots_and_ca_cert() -> TestResult {
    if !can_run() {
        return Ok(());
    }
    let tls = TestTls::new()?;
    let dir = tempfile::tempdir()?;
    let ca = dir.path().join("ca.pem");
    std::fs::write(&ca, &tls.ca_pem)?;
    let ca = ca.to_string_lossy().into_owned();
    let server = Server::start_with(Some(tls.server_config()?))?;
    assert!(server.base.starts_with("https://localhost:"));
    let data = image(IMG_LEN);
    let url = server.add("/img.zst", compress("zst", &data)?, Mode::Normal);

    let disk = Loop::new(8 << 20)?;
    let r = run(
        "image2disk",
        &[
            ("IMG_URL", &url),
            ("DEST_DISK", &disk.dev),
            ("CA_CERT", &ca),
        ],
    )?;
    assert_ok(&r);
    assert!(disk.read(IMG_LEN)? == data);
    // The system's roots, with the standard override naming the test CA's bundle.
    let disk = Loop::new(8 << 20)?;
    let r = run(
        "image2disk",
        &[
            ("IMG_URL", &url),
            ("DEST_DISK", &disk.dev),
            ("SSL_CERT_FILE", &ca),
        ],
    )?;
    assert_ok(&r);
    assert!(disk.read(IMG_LEN)? == data);
    // Not trusted: the host's roots do not know the test CA.
    let r = run("image2disk", &[("IMG_URL", &url), ("DEST_DISK", &disk.dev)])?;
    assert_failed(&r, "DownloadFailed", "certificate");
    let r = run(
        "image2disk",
        &[
            ("IMG_URL", &url),
            ("DEST_DISK", &disk.dev),
            ("CA_CERT", "/nonexistent/ca.pem"),
        ],
    )?;
    assert_failed(&r, "InvalidVariable", "CA_CERT=/nonexistent/ca.pem");
    // The name must match: the certificate names localhost, not 127.0.0.1 (the same server).
    let other = url.replace("localhost", "127.0.0.1");
    let r = run(
        "image2disk",
        &[
            ("IMG_URL", &other),
            ("DEST_DISK", &disk.dev),
            ("CA_CERT", &ca),
        ],
    )?;
    assert_failed(&r, "DownloadFailed", "certificate");

    // archive2disk over https.
    let tar = tarball()?;
    let sum = format!("sha256:{}", sha256_hex(&tar));
    let url = server.add("/root.tar", tar, Mode::Normal);
    let part = Loop::new(16 << 20)?;
    mkfs("ext4", &part.dev)?;
    let r = run(
        "archive2disk",
        &[
            ("DEST_DISK", part.dev.as_str()),
            ("FS_TYPE", "ext4"),
            ("ARCHIVE_URL", url.as_str()),
            ("TARFILE_CHECKSUM", sum.as_str()),
            ("CA_CERT", ca.as_str()),
        ],
    )?;
    assert_ok(&r);
    assert!(
        Mounted::new(&part.dev)?
            .path()
            .join("etc/app/motd")
            .exists()
    );

    // qemuimg2disk over https (a qcow2, converted).
    if need("qemu-img", "qemu-utils") {
        let work = tempfile::tempdir()?;
        let raw = work.path().join("d.raw");
        let q = work.path().join("d.qcow2");
        std::fs::write(&raw, &data)?;
        sh(
            "qemu-img",
            &[
                "convert",
                "-f",
                "raw",
                "-O",
                "qcow2",
                &raw.to_string_lossy(),
                &q.to_string_lossy(),
            ],
        )?;
        let url = server.add("/d.qcow2", std::fs::read(&q)?, Mode::Normal);
        let disk = Loop::new(8 << 20)?;
        let r = run(
            "qemuimg2disk",
            &[
                ("IMG_URL", &url),
                ("DEST_DISK", &disk.dev),
                ("CA_CERT", &ca),
            ],
        )?;
        assert_ok(&r);
        assert!(disk.read(IMG_LEN)? == data);
    }
    Ok(())
}

// ---------- grub2disk ----------

#[test]
fn grub2disk_runs_the_roots_grub_install_in_a_chroot_and_fails_clearly() -> TestResult {
    if !can_run() {
        return Ok(());
    }
    let Some(root) = busybox_root()? else {
        return Ok(());
    };
    let disk = Loop::new(8 << 20)?;
    let base = [
        ("GRUB_INSTALL_PATH", disk.dev.as_str()),
        ("GRUB_DISK", root.dev.as_str()),
        ("FS_TYPE", "ext4"),
    ];
    let with = |extra: &[(&'static str, &'static str)]| {
        let mut v: Vec<(&str, &str)> = base.to_vec();
        v.extend_from_slice(extra);
        v
    };

    // Wrong devices, a missing variable.
    let r = run(
        "grub2disk",
        &[
            ("GRUB_INSTALL_PATH", disk.dev.as_str()),
            ("GRUB_DISK", "/dev/tink-no-such-part"),
        ],
    )?;
    assert_failed(&r, "DiskNotFound", "GRUB_DISK=/dev/tink-no-such-part");
    let r = run(
        "grub2disk",
        &[
            ("GRUB_INSTALL_PATH", "/dev/tink-no-such-disk"),
            ("GRUB_DISK", root.dev.as_str()),
        ],
    )?;
    assert_failed(
        &r,
        "DiskNotFound",
        "GRUB_INSTALL_PATH=/dev/tink-no-such-disk",
    );
    let r = run("grub2disk", &[("GRUB_DISK", root.dev.as_str())])?;
    assert_failed(&r, "MissingVariable", "GRUB_INSTALL_PATH");

    // A root without grub.
    let r = run("grub2disk", &base)?;
    assert_failed(&r, "GrubNotFound", "grub-install");
    assert!(!mounted(&root.dev)?, "grub2disk left a mount behind");

    // The root's own tools run in the chroot: they record their arguments and what they see.
    {
        let m = Mounted::new(&root.dev)?;
        let sbin = m.path().join("usr/sbin");
        std::fs::create_dir_all(&sbin)?;
        std::fs::write(
            sbin.join("grub-install"),
            "#!/bin/sh\necho \"$@\" > /install.args\nfor a in \"$@\"; do last=$a; done\n\
             [ -b \"$last\" ] && echo block-device > /install.seen\n\
             [ -e /proc/self/status ] && echo proc >> /install.seen\n\
             [ -d /sys/block ] && echo sys >> /install.seen\n\
             [ -e /marker.fail ] && { echo 'grub-install: error: will not proceed with blocklists.' >&2; exit 5; }\n\
             exit 0\n",
        )?;
        std::fs::write(
            sbin.join("grub-mkconfig"),
            "#!/bin/sh\necho \"$@\" > /mkconfig.args\n",
        )?;
        for f in ["grub-install", "grub-mkconfig"] {
            std::fs::set_permissions(
                sbin.join(f),
                std::os::unix::fs::PermissionsExt::from_mode(0o755),
            )?;
        }
    }
    let r = run(
        "grub2disk",
        &with(&[("GRUB_INSTALL_ARGS", "--target=i386-pc")]),
    )?;
    assert_ok(&r);
    assert!(!mounted(&root.dev)?, "grub2disk left a mount behind");
    {
        let m = Mounted::new(&root.dev)?;
        assert_eq!(
            std::fs::read_to_string(m.path().join("install.args"))?,
            format!("--target=i386-pc {}\n", disk.dev)
        );
        assert_eq!(
            std::fs::read_to_string(m.path().join("install.seen"))?,
            "block-device\nproc\nsys\n"
        );
        assert_eq!(
            std::fs::read_to_string(m.path().join("mkconfig.args"))?,
            "-o /boot/grub/grub.cfg\n"
        );
        std::fs::remove_file(m.path().join("mkconfig.args"))?;
        std::fs::write(m.path().join("marker.fail"), "")?;
    }
    // grub-install fails: its exit code and message are the reason; mkconfig does not run.
    let r = run("grub2disk", &base)?;
    assert_failed(&r, "GrubInstallFailed", "blocklists");
    assert!(r.message.as_deref().is_some_and(|m| m.contains("code 5")));
    assert!(!mounted(&root.dev)?, "grub2disk left a mount behind");
    let m = Mounted::new(&root.dev)?;
    assert!(!m.path().join("mkconfig.args").exists());
    Ok(())
}

/// A real grub-install through grub2disk: the host's grub-install (Debian grub2-common) and
/// its i386-pc modules (grub-pc-bin) copied with their libraries into an ext4 root on a loop
/// device, run by the action in its chroot onto that same device (a whole-disk file system:
/// grub refuses a loop partition as a GRUB drive, so `--force` installs with blocklists).
/// Checks the boot sector is grub's and points at the core.img grub-install wrote.
#[test]
fn grub2disk_installs_a_real_grub_from_the_root() -> TestResult {
    if !can_run() {
        return Ok(());
    }
    let modules = Path::new("/usr/lib/grub/i386-pc");
    if !which("grub-install") || !modules.is_dir() || !which("ldd") {
        eprintln!(
            "SKIPPED: the real grub2disk run needs the host's grub-install (Debian grub2-common) and /usr/lib/grub/i386-pc (grub-pc-bin)"
        );
        return Ok(());
    }
    let disk = Loop::new(64 << 20)?;
    mkfs("ext4", &disk.dev)?;
    {
        let m = Mounted::new(&disk.dev)?;
        let root = m.path();
        let grub_install = ["/usr/sbin/grub-install", "/sbin/grub-install"]
            .into_iter()
            .find(|p| Path::new(p).is_file())
            .ok_or("no grub-install")?;
        let copy = |from: &Path, to_rel: &str| -> TestResult {
            let to = root.join(to_rel.trim_start_matches('/'));
            if let Some(parent) = to.parent() {
                std::fs::create_dir_all(parent)?;
            }
            std::fs::copy(from, &to)?;
            Ok(())
        };
        copy(Path::new(grub_install), "/usr/sbin/grub-install")?;
        for lib in sh("ldd", &[grub_install])?
            .split_whitespace()
            .filter(|w| w.starts_with('/'))
        {
            copy(&std::fs::canonicalize(lib)?, lib)?;
        }
        for entry in std::fs::read_dir(modules)? {
            let entry = entry?;
            if entry.file_type()?.is_file() {
                copy(
                    &entry.path(),
                    &format!(
                        "/usr/lib/grub/i386-pc/{}",
                        entry.file_name().to_string_lossy()
                    ),
                )?;
            }
        }
        std::fs::create_dir_all(root.join("boot/grub"))?;
        std::fs::write(
            root.join("boot/grub/device.map"),
            format!("(hd0) {}\n", disk.dev),
        )?;
    }
    let r = run(
        "grub2disk",
        &[
            ("GRUB_INSTALL_PATH", disk.dev.as_str()),
            ("GRUB_DISK", disk.dev.as_str()),
            ("FS_TYPE", "ext4"),
            ("GRUB_INSTALL_ARGS", "--target=i386-pc --force"),
            ("GRUB_MKCONFIG", "false"),
        ],
    )?;
    assert_ok(&r);
    assert!(r.stdout.contains("Installation finished"), "{}", r.stdout);
    assert!(!mounted(&disk.dev)?, "grub2disk left a mount behind");
    let mbr = disk.read(512)?;
    assert_eq!(&mbr[510..], &[0x55, 0xaa], "no boot signature");
    assert!(
        mbr.windows(4).any(|w| w == b"GRUB"),
        "the boot sector is not grub's boot.img"
    );
    // boot.img's kernel_sector (offset 0x5c) is where core.img's first sector is on the disk.
    let mut lba = [0u8; 8];
    lba.copy_from_slice(&mbr[0x5c..0x64]);
    let lba = u64::from_le_bytes(lba);
    let m = Mounted::new(&disk.dev)?;
    let core = std::fs::read(m.path().join("boot/grub/i386-pc/core.img"))?;
    assert!(m.path().join("boot/grub/i386-pc/normal.mod").exists());
    drop(m);
    let sector = disk.read(((lba + 1) * 512) as usize)?;
    assert_eq!(
        &sector[(lba * 512) as usize..],
        &core[..512],
        "the boot sector does not point at core.img (sector {lba})"
    );
    Ok(())
}
