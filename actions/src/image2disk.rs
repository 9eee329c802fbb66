//! image2disk: streams a (compressed) raw disk image over HTTP onto a disk.
//!
//! Three threads, bounded channels between them, so download, decompression and writing
//! overlap: the download thread (a current-thread tokio runtime: GET, resume with `Range`,
//! SHA-256 of the bytes as downloaded) sends chunks to the main thread, which detects the format
//! by its magic bytes, decompresses into 4 MiB page-aligned buffers and hands them to the writer
//! thread, which writes them with `O_DIRECT` (buffered for a final partial block, or when the
//! destination refuses `O_DIRECT`) and gives them back. A failed download wins over the decoder
//! error it causes (a truncated gzip is reported as the download that broke).
//!
//! Before anything is written, an image whose size is known (raw: Content-Length; zstd: the
//! first frame's content size) and larger than the disk is refused; the writer also refuses to
//! write past the end of the disk. After the last write: fsync, then `BLKRRPART` (errors only
//! logged: a partition or a loop device without partition scanning refuses it), then the
//! checksum (`IMG_CHECKSUM`) is compared, so a bad image never reports success.

use std::fs::{File, OpenOptions};
use std::io::{self, Cursor, Read, Seek, SeekFrom};
use std::os::unix::fs::{FileExt, FileTypeExt, OpenOptionsExt};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender, sync_channel};
use std::thread;
use std::time::{Duration, Instant};

use bytes::Bytes;
use sha2::{Digest, Sha256};

use crate::common::{ActionError, Env, Log};
use crate::http::{self, HttpError};
use crate::qemu;
use crate::sys;

/// The size of one write (and of each buffer of the pool).
const CHUNK: usize = 4 << 20;
/// Buffers in flight between the decoder and the writer.
const POOL: usize = 4;
/// Alignment `O_DIRECT` needs (4096 covers 512e and 4Kn disks).
const ALIGN: usize = 4096;
/// Downloaded chunks queued for the decoder.
const DOWNLOAD_QUEUE: usize = 64;
/// A connection that sends nothing for this long is broken.
const STALL: Duration = Duration::from_secs(60);

/// The action's settings.
#[derive(Debug, Clone)]
pub struct Config {
    /// `IMG_URL`.
    pub url: url::Url,
    /// `DEST_DISK`.
    pub disk: PathBuf,
    /// `COMPRESSED`: the image must be compressed (the format is detected either way).
    pub compressed: bool,
    /// `RETRY_ENABLED`.
    pub retry: bool,
    /// `RETRY_DURATION_MINUTES` (default 10).
    pub retry_for: Duration,
    /// `PROGRESS_INTERVAL_SECONDS` (default 3).
    pub progress: Duration,
    /// `IMG_CHECKSUM` (`sha256:<hex>` or bare hex), an addition to the hub's variables.
    pub sha256: Option<[u8; 32]>,
    /// First retry pause (doubles up to 30 s); `RETRY_INITIAL_MILLIS`, for tests.
    pub first_backoff: Duration,
    /// Extra request headers (oci2disk's `Authorization`).
    pub headers: Vec<(String, String)>,
    /// Trust for `https://` (`CA_CERT`).
    pub tls: http::Tls,
    /// What the expected digest is called in messages (`IMG_CHECKSUM`).
    pub checksum_name: String,
    /// qemuimg2disk: an image in a qemu format (qcow2, vmdk, ...) is staged in a temporary
    /// file and converted with `qemu-img`; without it such an image is refused.
    pub qemu: Option<qemu::Options>,
}

impl Config {
    /// Reads and checks the variables.
    pub fn from_env(env: &Env) -> Result<Self, ActionError> {
        let raw_url = env.required("IMG_URL")?;
        let url =
            url::Url::parse(raw_url).map_err(|e| ActionError::invalid("IMG_URL", raw_url, e))?;
        Self::with_url(env, url)
    }

    /// The settings other than `IMG_URL` (oci2disk's `IMG_URL` is an image reference).
    pub fn with_url(env: &Env, url: url::Url) -> Result<Self, ActionError> {
        let disk = PathBuf::from(env.required("DEST_DISK")?);
        let sha256 = env.get("IMG_CHECKSUM").map(parse_sha256).transpose()?;
        Ok(Self {
            url,
            disk,
            compressed: env.bool("COMPRESSED", false)?,
            retry: env.bool("RETRY_ENABLED", false)?,
            retry_for: Duration::from_secs(60 * env.u64("RETRY_DURATION_MINUTES", 10)?),
            progress: Duration::from_secs(env.u64("PROGRESS_INTERVAL_SECONDS", 3)?.max(1)),
            sha256,
            first_backoff: Duration::from_millis(env.u64("RETRY_INITIAL_MILLIS", 500)?),
            headers: Vec::new(),
            tls: http::Tls::from_env(env),
            checksum_name: "IMG_CHECKSUM".into(),
            qemu: None,
        })
    }

    /// The image's GET.
    fn request(&self) -> http::Get {
        http::Get {
            url: self.url.clone(),
            headers: self.headers.clone(),
            tls: self.tls.clone(),
        }
    }
}

pub(crate) fn parse_sha256_named(var: &str, v: &str) -> Result<[u8; 32], ActionError> {
    parse_sha256(v).map_err(|e| ActionError {
        message: e.message.replace("IMG_CHECKSUM", var),
        ..e
    })
}

fn parse_sha256(v: &str) -> Result<[u8; 32], ActionError> {
    let hex = v.strip_prefix("sha256:").unwrap_or(v).trim();
    let bad = || ActionError::invalid("IMG_CHECKSUM", v, "expected sha256:<64 hex digits>");
    if hex.len() != 64 {
        return Err(bad());
    }
    let mut out = [0u8; 32];
    for (i, b) in out.iter_mut().enumerate() {
        *b = u8::from_str_radix(hex.get(2 * i..2 * i + 2).ok_or_else(bad)?, 16)
            .map_err(|_| bad())?;
    }
    Ok(out)
}

/// One attempt's failure: retried (with back-off, while `RETRY_ENABLED` allows) or final.
enum Failure {
    Retry(ActionError),
    Fatal(ActionError),
    /// The download stopped because the decoder or writer side did (its error is reported).
    Stopped,
}

fn http_failure(e: HttpError) -> Failure {
    match &e {
        HttpError::NotFound(_) => Failure::Fatal(ActionError::new("ImageNotFound", e.to_string())),
        HttpError::BadUrl(_) => {
            Failure::Fatal(ActionError::new("InvalidVariable", format!("IMG_URL: {e}")))
        }
        HttpError::TlsConfig(_) => {
            Failure::Fatal(ActionError::new("InvalidVariable", e.to_string()))
        }
        _ if e.retryable() => Failure::Retry(ActionError::new("DownloadFailed", e.to_string())),
        _ => Failure::Fatal(ActionError::new("DownloadFailed", e.to_string())),
    }
}

/// Runs the action.
pub fn run(env: &Env, log: &Log) -> Result<(), ActionError> {
    let cfg = Config::from_env(env)?;
    write_image(&cfg, log)
}

/// Downloads, decodes and writes `cfg.url` onto `cfg.disk`, with the retries `cfg` asks for:
/// image2disk, and the write half of oci2disk and qemuimg2disk.
pub(crate) fn write_image(cfg: &Config, log: &Log) -> Result<(), ActionError> {
    sys::check_device("DEST_DISK", &cfg.disk.to_string_lossy())?;
    log.info(
        "writing image",
        &[
            ("image", cfg.url.as_str().into()),
            ("disk", cfg.disk.display().to_string().into()),
        ],
    );
    let deadline = Instant::now() + cfg.retry_for;
    let mut backoff = cfg.first_backoff;
    loop {
        match attempt(cfg, log, deadline) {
            Ok(written) => {
                log.info(
                    "successfully wrote image to disk",
                    &[
                        ("written", written.into()),
                        ("disk", cfg.disk.display().to_string().into()),
                    ],
                );
                return Ok(());
            }
            Err(Failure::Retry(e)) if cfg.retry && Instant::now() + backoff < deadline => {
                log.error(
                    "retrying the image from the start",
                    &[
                        ("error", e.to_string().into()),
                        ("backoff_ms", (backoff.as_millis() as u64).into()),
                    ],
                );
                thread::sleep(backoff);
                backoff = (backoff * 2).min(Duration::from_secs(30));
            }
            Err(Failure::Retry(e) | Failure::Fatal(e)) => return Err(e),
            Err(Failure::Stopped) => {
                return Err(ActionError::new(
                    "RuntimeError",
                    "the download stopped without a reason",
                ));
            }
        }
    }
}

/// What the download thread sends.
enum Msg {
    /// The first response: the resource's size if known.
    Start(Option<u64>),
    Data(Bytes),
}

struct Downloaded {
    bytes: u64,
    /// With `IMG_CHECKSUM` only.
    sha256: Option<[u8; 32]>,
}

async fn download(
    cfg: &Config,
    log: &Log,
    deadline: Instant,
    tx: &SyncSender<Msg>,
    counter: &AtomicU64,
) -> Result<Downloaded, Failure> {
    // Hashed only when asked: SHA-256 costs more than a fast link's bytes.
    let mut hasher = cfg.sha256.map(|_| Sha256::new());
    let mut offset = 0u64;
    let mut backoff = cfg.first_backoff;
    let req = cfg.request();
    let mut dl = http::get(&req, 0, STALL).await.map_err(http_failure)?;
    if tx.send(Msg::Start(dl.total)).is_err() {
        return Err(Failure::Stopped);
    }
    loop {
        match dl.chunk().await {
            Ok(Some(data)) => {
                if let Some(h) = hasher.as_mut() {
                    h.update(&data);
                }
                offset += data.len() as u64;
                counter.store(offset, Ordering::Relaxed);
                if tx.send(Msg::Data(data)).is_err() {
                    // The decoder or writer failed: its error is the one reported.
                    return Err(Failure::Stopped);
                }
            }
            Ok(None) => {
                return Ok(Downloaded {
                    bytes: offset,
                    sha256: hasher.map(|h| h.finalize().into()),
                });
            }
            Err(e) => {
                let can_resume = cfg.retry && dl.ranges && Instant::now() + backoff < deadline;
                if !can_resume {
                    return Err(http_failure(e));
                }
                log.error(
                    "download broke, resuming",
                    &[("error", e.to_string().into()), ("offset", offset.into())],
                );
                loop {
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(30));
                    match http::get(&req, offset, STALL).await {
                        Ok(d) => {
                            dl = d;
                            break;
                        }
                        Err(e)
                            if e.retryable()
                                && !matches!(e, HttpError::NoResume)
                                && Instant::now() + backoff < deadline =>
                        {
                            log.error("resume failed", &[("error", e.to_string().into())]);
                        }
                        Err(e) => return Err(http_failure(e)),
                    }
                }
            }
        }
    }
}

/// Reads the download thread's chunks as a byte stream.
struct ChannelReader {
    rx: Receiver<Msg>,
    cur: Bytes,
}

impl Read for ChannelReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        while self.cur.is_empty() {
            match self.rx.recv() {
                Ok(Msg::Data(b)) => self.cur = b,
                Ok(Msg::Start(_)) => {}
                Err(_) => return Ok(0),
            }
        }
        let n = buf.len().min(self.cur.len());
        buf[..n].copy_from_slice(&self.cur[..n]);
        bytes::Buf::advance(&mut self.cur, n);
        Ok(n)
    }
}

/// The image formats recognised by their first bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Anything else: written as it is.
    Raw,
    /// `1f 8b`.
    Gzip,
    /// `fd 37 7a 58 5a 00`.
    Xz,
    /// `28 b5 2f fd`.
    Zstd,
    /// `BZh`.
    Bzip2,
    /// `QFI\xfb`: needs qemuimg2disk.
    Qcow2,
}

/// Detects the format from the first bytes.
pub fn detect(head: &[u8]) -> Format {
    if head.starts_with(&[0x1f, 0x8b]) {
        Format::Gzip
    } else if head.starts_with(&[0xfd, b'7', b'z', b'X', b'Z', 0]) {
        Format::Xz
    } else if head.starts_with(&[0x28, 0xb5, 0x2f, 0xfd]) {
        Format::Zstd
    } else if head.len() >= 4 && head.starts_with(b"BZh") && (b'1'..=b'9').contains(&head[3]) {
        Format::Bzip2
    } else if head.starts_with(b"QFI\xfb") {
        Format::Qcow2
    } else {
        Format::Raw
    }
}

/// The first zstd frame's declared content size (a lower bound of the image size).
pub fn zstd_content_size(head: &[u8]) -> Option<u64> {
    let fhd = *head.get(4)?;
    let single = (fhd >> 5) & 1 == 1;
    let fcs_len = match fhd >> 6 {
        0 if single => 1,
        0 => return None,
        1 => 2,
        2 => 4,
        _ => 8,
    };
    let did_len = [0usize, 1, 2, 4][(fhd & 3) as usize];
    let start = 5 + usize::from(!single) + did_len;
    let field = head.get(start..start + fcs_len)?;
    let mut v = 0u64;
    for (i, b) in field.iter().enumerate() {
        v |= u64::from(*b) << (8 * i);
    }
    Some(if fcs_len == 2 { v + 256 } else { v })
}

/// A page-aligned buffer without unsafe code: a slice of a larger vector.
struct Aligned {
    v: Vec<u8>,
    off: usize,
}

impl Aligned {
    fn new() -> Self {
        let v = vec![0u8; CHUNK + ALIGN];
        let off = v.as_ptr().align_offset(ALIGN);
        Self { v, off }
    }
    fn buf(&mut self) -> &mut [u8] {
        &mut self.v[self.off..self.off + CHUNK]
    }
    fn data(&self, len: usize) -> &[u8] {
        &self.v[self.off..self.off + len]
    }
}

fn human(b: u64) -> String {
    format!("{:.1} MiB", b as f64 / (1 << 20) as f64)
}

fn attempt(cfg: &Config, log: &Log, deadline: Instant) -> Result<u64, Failure> {
    let fatal = |reason: &'static str, msg: String| Failure::Fatal(ActionError::new(reason, msg));
    let meta = std::fs::metadata(&cfg.disk).map_err(|e| {
        fatal(
            "DiskNotFound",
            format!("DEST_DISK={}: {e}", cfg.disk.display()),
        )
    })?;
    let is_block = meta.file_type().is_block_device();
    let open = |direct: bool| {
        let mut o = OpenOptions::new();
        o.write(true);
        if direct {
            o.custom_flags(libc::O_DIRECT);
        }
        o.open(&cfg.disk)
    };
    let buffered = open(false).map_err(|e| {
        fatal(
            "DiskNotFound",
            format!("opening DEST_DISK={}: {e}", cfg.disk.display()),
        )
    })?;
    let direct = if is_block { open(true).ok() } else { None };
    let disk_size = if is_block {
        let mut f = File::open(&cfg.disk).map_err(|e| {
            fatal(
                "DiskNotFound",
                format!("DEST_DISK={}: {e}", cfg.disk.display()),
            )
        })?;
        Some(f.seek(SeekFrom::End(0)).map_err(|e| {
            fatal(
                "DiskNotFound",
                format!("size of {}: {e}", cfg.disk.display()),
            )
        })?)
    } else {
        None
    };

    let downloaded = Arc::new(AtomicU64::new(0));
    let written = Arc::new(AtomicU64::new(0));
    let (tx, rx) = sync_channel::<Msg>(DOWNLOAD_QUEUE);
    let dl_thread = {
        let cfg = cfg.clone();
        let log = *log;
        let counter = downloaded.clone();
        thread::spawn(move || -> Result<Downloaded, Failure> {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| Failure::Fatal(ActionError::new("RuntimeError", e.to_string())))?;
            rt.block_on(download(&cfg, &log, deadline, &tx, &counter))
        })
    };
    let join_download = |h: thread::JoinHandle<Result<Downloaded, Failure>>| {
        h.join().unwrap_or_else(|_| {
            Err(Failure::Fatal(ActionError::new(
                "RuntimeError",
                "the download thread panicked",
            )))
        })
    };

    // The first message says whether the server answered; no answer -> the download's error.
    let total = match rx.recv() {
        Ok(Msg::Start(t)) => t,
        _ => {
            drop(rx);
            return Err(match join_download(dl_thread) {
                Err(Failure::Stopped) => fatal(
                    "RuntimeError",
                    "the writer stopped before the download started".into(),
                ),
                Err(f) => f,
                Ok(_) => fatal(
                    "DownloadFailed",
                    "the download ended before it started".into(),
                ),
            });
        }
    };

    // Progress lines at the interval until told to stop.
    let (stop_tx, stop_rx) = sync_channel::<()>(1);
    let progress = {
        let (d, w, log, every) = (downloaded.clone(), written.clone(), *log, cfg.progress);
        thread::spawn(move || {
            loop {
                let done = !matches!(stop_rx.recv_timeout(every), Err(RecvTimeoutError::Timeout));
                let total = total.map_or_else(|| "unknown".to_owned(), human);
                log.info(
                    "read and write progress",
                    &[
                        ("downloaded", human(d.load(Ordering::Relaxed)).into()),
                        ("size", total.into()),
                        ("written", human(w.load(Ordering::Relaxed)).into()),
                    ],
                );
                if done {
                    return;
                }
            }
        })
    };

    let result = decode_and_write(
        cfg,
        log,
        rx,
        total,
        disk_size,
        &buffered,
        direct.as_ref(),
        &written,
    );
    let dl = join_download(dl_thread);
    let _ = stop_tx.send(());
    let _ = progress.join();
    let outcome = match (result, dl) {
        (Err(e), Err(Failure::Stopped)) => return Err(Failure::Fatal(e)),
        (Ok(_), Err(Failure::Stopped)) => {
            return Err(fatal(
                "DecompressionFailed",
                "the compressed stream ended before the download did (trailing data)".into(),
            ));
        }
        // A broken download explains whatever the decoder saw after it.
        (_, Err(f)) => return Err(f),
        (Err(e), Ok(_)) => return Err(Failure::Fatal(e)),
        (Ok(n), Ok(d)) => {
            if let Some(want) = cfg.sha256
                && Some(want) != d.sha256
            {
                return Err(fatal(
                    "ChecksumMismatch",
                    format!(
                        "sha256 of the {} downloaded bytes is {}, {} wants {}",
                        d.bytes,
                        d.sha256.as_ref().map_or_else(String::new, |h| hex(h)),
                        cfg.checksum_name,
                        hex(&want)
                    ),
                ));
            }
            n
        }
    };
    let written_bytes = match outcome {
        Outcome::Written(n) => n,
        Outcome::Staged(staged) => match &cfg.qemu {
            Some(opts) => {
                qemu::convert(opts, log, &staged, &cfg.disk, disk_size).map_err(Failure::Fatal)?
            }
            None => return Err(fatal("RuntimeError", "a staged image without qemu".into())),
        },
    };

    buffered
        .sync_all()
        .map_err(|e| fatal("WriteFailed", format!("fsync {}: {e}", cfg.disk.display())))?;
    if let Some(d) = &direct {
        d.sync_all()
            .map_err(|e| fatal("WriteFailed", format!("fsync {}: {e}", cfg.disk.display())))?;
    }
    if is_block {
        match sys::reread_partitions(&buffered) {
            Ok(()) => log.info("re-read the partition table", &[]),
            Err(e) => log.info(
                "the disk did not re-read its partition table (normal for a partition or a loop device without partition scanning)",
                &[("error", e.to_string().into())],
            ),
        }
    }
    Ok(written_bytes)
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// What the decoder made of the image.
enum Outcome {
    /// Written onto the disk: this many bytes.
    Written(u64),
    /// A qemu format, staged in a temporary file for `qemu-img convert` (qemuimg2disk).
    Staged(qemu::Staged),
}

#[allow(clippy::too_many_arguments)]
fn decode_and_write(
    cfg: &Config,
    log: &Log,
    rx: Receiver<Msg>,
    total: Option<u64>,
    disk_size: Option<u64>,
    buffered: &File,
    direct: Option<&File>,
    written: &AtomicU64,
) -> Result<Outcome, ActionError> {
    let mut src = ChannelReader {
        rx,
        cur: Bytes::new(),
    };
    let mut head = Vec::with_capacity(32);
    (&mut src)
        .take(32)
        .read_to_end(&mut head)
        .map_err(|e| ActionError::new("DownloadFailed", e.to_string()))?;
    let format = detect(&head);
    if cfg.compressed && format == Format::Raw {
        return Err(ActionError::new(
            "UnsupportedFormat",
            "COMPRESSED=true but the image is none of gzip, xz, zstd, bzip2 (detected by its first bytes)",
        ));
    }
    let stream = Cursor::new(head.clone()).chain(src);
    let mut reader: Box<dyn Read> = match format {
        Format::Raw | Format::Qcow2 => Box::new(stream),
        Format::Gzip => Box::new(flate2::read::MultiGzDecoder::new(stream)),
        Format::Xz => Box::new(liblzma::read::XzDecoder::new_multi_decoder(stream)),
        Format::Zstd => Box::new(
            zstd::stream::read::Decoder::new(stream)
                .map_err(|e| ActionError::new("DecompressionFailed", format!("zstd: {e}")))?,
        ),
        Format::Bzip2 => Box::new(bzip2::read::MultiBzDecoder::new(stream)),
    };
    let read_error = move |e: io::Error| {
        let why = if matches!(format, Format::Raw | Format::Qcow2) {
            "DownloadFailed"
        } else {
            "DecompressionFailed"
        };
        ActionError::new(why, format!("{format:?} stream: {e}"))
    };
    // The decoded image's first bytes: a qemu format (qcow2, also inside a compressed file)
    // is converted by qemuimg2disk, never written as it is.
    let mut inner = Vec::with_capacity(qemu::HEAD);
    (&mut reader)
        .take(qemu::HEAD as u64)
        .read_to_end(&mut inner)
        .map_err(read_error)?;
    if let Some(qformat) = qemu::detect(&inner) {
        let outer = if format == Format::Raw || format == Format::Qcow2 {
            String::new()
        } else {
            format!(" (inside {})", format!("{format:?}").to_lowercase())
        };
        log.info(
            "image format",
            &[
                ("format", format!("{format:?}").to_lowercase().into()),
                ("image", qformat.into()),
            ],
        );
        let Some(opts) = &cfg.qemu else {
            return Err(ActionError::new(
                "UnsupportedFormat",
                format!(
                    "the image is {qformat}{outer}: use qemuimg2disk (or convert it to raw with qemu-img convert)"
                ),
            ));
        };
        // The download's size is the staged file's when nothing was decompressed.
        let size = matches!(format, Format::Raw | Format::Qcow2)
            .then_some(total)
            .flatten();
        let staged = qemu::stage(opts, log, qformat, &inner, &mut reader, written, size).map_err(
            |e| match e {
                qemu::StageError::Read(e) => read_error(e),
                qemu::StageError::Action(a) => a,
            },
        )?;
        return Ok(Outcome::Staged(staged));
    }
    let known = match format {
        Format::Raw => total,
        Format::Zstd => zstd_content_size(&head),
        _ => None,
    };
    log.info(
        "image format",
        &[
            ("format", format!("{format:?}").to_lowercase().into()),
            ("size", known.into()),
        ],
    );
    if let (Some(size), Some(disk)) = (known, disk_size)
        && size > disk
    {
        return Err(ActionError::new(
            "ImageTooLarge",
            format!(
                "the image is {size} bytes, the disk {} only {disk}: nothing was written",
                cfg.disk.display()
            ),
        ));
    }
    if !cfg.compressed && format != Format::Raw {
        log.info(
            "the image is compressed although COMPRESSED is false: decompressing it",
            &[],
        );
    }
    let mut reader = Cursor::new(inner).chain(reader);

    let (full_tx, full_rx) = sync_channel::<(Aligned, usize)>(POOL);
    let (free_tx, free_rx) = sync_channel::<Aligned>(POOL);
    for _ in 0..POOL {
        let _ = free_tx.send(Aligned::new());
    }
    let disk_name = cfg.disk.display().to_string();
    thread::scope(|s| {
        let writer = s.spawn(move || -> Result<u64, ActionError> {
            let mut offset = 0u64;
            for (buf, len) in full_rx {
                if let Some(disk) = disk_size
                    && offset + len as u64 > disk
                {
                    return Err(ActionError::new(
                        "ImageTooLarge",
                        format!("the image is larger than the disk {disk_name} ({disk} bytes); {offset} bytes were written"),
                    ));
                }
                let data = buf.data(len);
                let res = match direct {
                    Some(d) if len % ALIGN == 0 => d.write_all_at(data, offset),
                    _ => buffered.write_all_at(data, offset),
                };
                res.map_err(|e| {
                    ActionError::new("WriteFailed", format!("writing {disk_name} at byte {offset}: {e}"))
                })?;
                offset += len as u64;
                written.store(offset, Ordering::Relaxed);
                if free_tx.send(buf).is_err() {
                    break;
                }
            }
            Ok(offset)
        });
        // Fill buffers until the stream ends; a send error means the writer failed.
        let decoded: Result<(), ActionError> = (|| {
            while let Ok(mut buf) = free_rx.recv() {
                let mut len = 0;
                let b = buf.buf();
                while len < CHUNK {
                    let n = reader.read(&mut b[len..]).map_err(read_error)?;
                    if n == 0 {
                        break;
                    }
                    len += n;
                }
                let end = len < CHUNK;
                if len > 0 && full_tx.send((buf, len)).is_err() {
                    return Ok(());
                }
                if end {
                    return Ok(());
                }
            }
            Ok(())
        })();
        drop(full_tx);
        drop(reader);
        let w = writer.join().unwrap_or_else(|_| {
            Err(ActionError::new(
                "RuntimeError",
                "the writer thread panicked",
            ))
        });
        // The writer's error (disk full, too large) explains a decoder that stopped early.
        match (w, decoded) {
            (Err(e), _) => Err(e),
            (Ok(_), Err(e)) => Err(e),
            (Ok(n), Ok(())) => Ok(Outcome::Written(n)),
        }
    })
}

/// Downloads `cfg.url` (no retries) and hands the byte stream to `consume`: for actions that
/// unpack rather than write a disk (archive2disk). A failed download wins over the consumer's
/// error; the digest is returned when `cfg.sha256` asked for one.
pub(crate) fn fetch<R>(
    cfg: &Config,
    log: &Log,
    consume: impl FnOnce(&mut dyn Read) -> Result<R, ActionError>,
) -> Result<(R, Option<[u8; 32]>), ActionError> {
    let (tx, rx) = sync_channel::<Msg>(DOWNLOAD_QUEUE);
    let handle = {
        let (cfg, log) = (cfg.clone(), *log);
        thread::spawn(move || -> Result<Downloaded, Failure> {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| Failure::Fatal(ActionError::new("RuntimeError", e.to_string())))?;
            rt.block_on(download(
                &cfg,
                &log,
                Instant::now(),
                &tx,
                &AtomicU64::new(0),
            ))
        })
    };
    let mut reader = ChannelReader {
        rx,
        cur: Bytes::new(),
    };
    let result = consume(&mut reader);
    drop(reader);
    let dl = handle.join().unwrap_or_else(|_| {
        Err(Failure::Fatal(ActionError::new(
            "RuntimeError",
            "the download thread panicked",
        )))
    });
    match (result, dl) {
        (Err(e), Err(Failure::Stopped)) => Err(e),
        (Ok(_), Err(Failure::Stopped)) => Err(ActionError::new(
            "DownloadFailed",
            "the archive ended before the download did (trailing data)",
        )),
        (_, Err(Failure::Retry(e) | Failure::Fatal(e))) => Err(e),
        (Err(e), Ok(_)) => Err(e),
        (Ok(r), Ok(d)) => Ok((r, d.sha256)),
    }
}

/// Lower-case hex.
pub(crate) fn hex_string(b: &[u8]) -> String {
    hex(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn magic_bytes() {
        assert_eq!(detect(&[0x1f, 0x8b, 8, 0]), Format::Gzip);
        assert_eq!(detect(&[0xfd, b'7', b'z', b'X', b'Z', 0, 0]), Format::Xz);
        assert_eq!(detect(&[0x28, 0xb5, 0x2f, 0xfd, 0x24]), Format::Zstd);
        assert_eq!(detect(b"BZh91AY&SY"), Format::Bzip2);
        assert_eq!(detect(b"BZhx"), Format::Raw);
        assert_eq!(detect(b"QFI\xfb\0\0\0\x03"), Format::Qcow2);
        assert_eq!(detect(&[0xeb, 0x63, 0x90]), Format::Raw);
        assert_eq!(detect(&[]), Format::Raw);
    }

    #[test]
    fn zstd_frame_content_size() -> std::io::Result<()> {
        for size in [0usize, 100, 300, 70_000, 5 << 20] {
            let data = vec![7u8; size];
            let z = zstd::bulk::compress(&data, 1)?;
            assert_eq!(zstd_content_size(&z), Some(size as u64), "size {size}");
        }
        Ok(())
    }

    #[test]
    fn checksum_variable() {
        let hex64 = "ab".repeat(32);
        assert_eq!(
            parse_sha256(&format!("sha256:{hex64}")).ok(),
            Some([0xab; 32])
        );
        assert_eq!(parse_sha256(&hex64).ok(), Some([0xab; 32]));
        assert!(parse_sha256("sha256:abc").is_err_and(|e| e.message.contains("IMG_CHECKSUM")));
        assert!(parse_sha256(&"zz".repeat(32)).is_err());
    }
}
