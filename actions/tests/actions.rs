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
        let std_listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        std_listener.set_nonblocking(true)?;
        let base = format!("http://{}", std_listener.local_addr()?);
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
                    tokio::spawn(async move {
                        let _ = serve(sock, f, rq, rr).await;
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

async fn serve(
    mut sock: tokio::net::TcpStream,
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
        r.stdout.contains("retrying image2disk from the start"),
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
