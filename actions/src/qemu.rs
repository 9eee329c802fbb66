//! Disk images in a format only qemu-img reads (qcow2, vmdk, vdi, vhdx, vpc, qed, parallels):
//! recognised by their first bytes, staged in a temporary file, checked with `qemu-img info`
//! and written with `qemu-img convert` (qemuimg2disk).
//!
//! These formats cannot be written while they stream: their tables (qcow2's L1/L2 tables,
//! vmdk's grain directory) may come after the data they place, and clusters may be compressed
//! one by one. Raw and gzip/xz/zstd/bzip2 images do stream (image2disk's pipeline).
//!
//! An image that refers to other files (a qcow2 backing file or external data file, a vmdk
//! descriptor naming extents) is refused: qemu-img would read those files from this machine
//! onto the disk.

use std::fs::OpenOptions;
use std::io::{self, Read, Write};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::common::{ActionError, Env, Log};

/// How many decoded bytes are looked at to recognise a format.
pub const HEAD: usize = 512;

/// qemuimg2disk's settings for the conversion.
#[derive(Debug, Clone)]
pub struct Options {
    /// Where the image is staged (`TMPDIR`, default `/tmp`).
    pub tmp_dir: PathBuf,
    /// `qemu-img convert -O` (`FORMAT`, default `raw`; the hub's default is `host_device`,
    /// the same bytes on a block device).
    pub out_format: String,
    /// `EXTRA_ARGS`, split on white space and appended, as the hub's action does.
    pub extra_args: Vec<String>,
    /// The `qemu-img` program (`QEMU_IMG`, default `qemu-img` on `PATH`).
    pub program: String,
    /// Conversion progress lines (`PROGRESS_INTERVAL_SECONDS`, default 3).
    pub progress: Duration,
}

impl Options {
    /// Reads `TMPDIR`, `FORMAT`, `EXTRA_ARGS` and `QEMU_IMG`.
    pub fn from_env(env: &Env) -> Result<Self, ActionError> {
        let out_format = env.get("FORMAT").unwrap_or("raw").to_owned();
        if !out_format
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        {
            return Err(ActionError::invalid(
                "FORMAT",
                &out_format,
                "expected a qemu-img format name such as raw or host_device",
            ));
        }
        let tmp_dir = PathBuf::from(env.get("TMPDIR").unwrap_or("/tmp"));
        if !tmp_dir.is_dir() {
            return Err(ActionError::invalid(
                "TMPDIR",
                &tmp_dir.display().to_string(),
                "not a directory",
            ));
        }
        Ok(Self {
            tmp_dir,
            out_format,
            extra_args: env
                .get("EXTRA_ARGS")
                .map(|a| a.split_whitespace().map(str::to_owned).collect())
                .unwrap_or_default(),
            program: env.get("QEMU_IMG").unwrap_or("qemu-img").to_owned(),
            progress: Duration::from_secs(env.u64("PROGRESS_INTERVAL_SECONDS", 3)?),
        })
    }
}

/// The qemu-img name of the format the (decoded) image starts with, if it is one qemu-img
/// must convert.
pub fn detect(head: &[u8]) -> Option<&'static str> {
    let at = |off: usize, magic: &[u8]| head.get(off..off + magic.len()) == Some(magic);
    if at(0, b"QFI\xfb") {
        // Version 1 is qemu's old "qcow".
        return Some(if at(4, &[0, 0, 0, 1]) {
            "qcow"
        } else {
            "qcow2"
        });
    }
    if at(0, b"QED\0") {
        return Some("qed");
    }
    if at(0, b"KDMV") || at(0, b"COWD") || at(0, b"# Disk DescriptorFile") {
        return Some("vmdk");
    }
    if at(0x40, &[0x7f, 0x10, 0xda, 0xbe]) {
        return Some("vdi");
    }
    if at(0, b"vhdxfile") {
        return Some("vhdx");
    }
    if at(0, b"conectix") {
        return Some("vpc");
    }
    if at(0, b"WithoutFreeSpace") || at(0, b"WithouFreSpacExt") {
        return Some("parallels");
    }
    None
}

/// The staged image, removed on drop.
#[derive(Debug)]
pub struct Staged {
    path: PathBuf,
    format: &'static str,
}

impl Drop for Staged {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Why staging stopped.
pub enum StageError {
    /// Reading the (decoded) download failed: the caller names the cause.
    Read(io::Error),
    /// Anything else.
    Action(ActionError),
}

/// Writes `head` and the rest of `reader` into a new temporary file.
pub fn stage(
    opts: &Options,
    log: &Log,
    format: &'static str,
    head: &[u8],
    reader: &mut dyn Read,
    written: &AtomicU64,
    size: Option<u64>,
) -> Result<Staged, StageError> {
    if head.starts_with(b"# Disk DescriptorFile") {
        return Err(StageError::Action(ActionError::new(
            "UnsupportedFormat",
            "the image is a VMDK descriptor, which names its data in other files: use a monolithic VMDK (or qcow2)",
        )));
    }
    // When the download's size is the file's (not compressed), a TMPDIR too small fails now
    // rather than after most of the download.
    if let (Some(size), Ok(free)) = (size, crate::sys::free_space(&opts.tmp_dir))
        && size > free
    {
        return Err(StageError::Action(ActionError::new(
            "WriteFailed",
            format!(
                "the {format} image is {size} bytes and TMPDIR={} has {free} bytes free: it is staged there before qemu-img converts it",
                opts.tmp_dir.display()
            ),
        )));
    }
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or_default();
    let path = opts.tmp_dir.join(format!(
        "tink-qemuimg2disk-{}-{nanos}.{format}",
        std::process::id()
    ));
    let staged_err = |e: io::Error, path: &Path| {
        StageError::Action(ActionError::new(
            "WriteFailed",
            format!(
                "the temporary file {} (TMPDIR holds the whole {format} image before qemu-img converts it): {e}",
                path.display()
            ),
        ))
    };
    let file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)
        .map_err(|e| staged_err(e, &path))?;
    let staged = Staged { path, format };
    log.info(
        "a qemu format: staging it for qemu-img convert",
        &[
            ("format", format.into()),
            ("file", staged.path.display().to_string().into()),
        ],
    );
    let mut out = io::BufWriter::with_capacity(4 << 20, file);
    out.write_all(head)
        .map_err(|e| staged_err(e, &staged.path))?;
    let mut total = head.len() as u64;
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = reader.read(&mut buf).map_err(StageError::Read)?;
        if n == 0 {
            break;
        }
        out.write_all(&buf[..n])
            .map_err(|e| staged_err(e, &staged.path))?;
        total += n as u64;
        written.store(total, Ordering::Relaxed);
    }
    let file = out
        .into_inner()
        .map_err(|e| staged_err(e.into_error(), &staged.path))?;
    file.sync_all().map_err(|e| staged_err(e, &staged.path))?;
    Ok(staged)
}

/// Parses qemu-img's `-p` progress, `    (12.34/100%)`.
fn percent(text: &str) -> Option<f64> {
    let inner = text.trim().strip_prefix('(')?.strip_suffix(')')?;
    inner.split('/').next()?.trim().parse().ok()
}

/// Runs qemu-img; with `progress`, its `-p` output becomes a log line per interval.
fn run_qemu_img(
    opts: &Options,
    args: &[&str],
    progress: Option<&Log>,
) -> Result<Vec<u8>, ActionError> {
    let mut child = Command::new(&opts.program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| {
            let hint = if e.kind() == io::ErrorKind::NotFound {
                " (qemuimg2disk needs qemu-img for this format: install qemu-utils in the action's image, or set QEMU_IMG)"
            } else {
                ""
            };
            ActionError::new(
                "ConvertFailed",
                format!("running {}: {e}{hint}", opts.program),
            )
        })?;
    let stderr = child.stderr.take().map(|mut e| {
        std::thread::spawn(move || {
            let mut v = Vec::new();
            let _ = e.read_to_end(&mut v);
            v
        })
    });
    let mut stdout = Vec::new();
    if let Some(mut out) = child.stdout.take() {
        let mut buf = [0u8; 4096];
        let mut line = Vec::new();
        let mut last = Instant::now();
        loop {
            let n = match out.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            match progress {
                None => stdout.extend_from_slice(&buf[..n]),
                Some(log) => {
                    for b in &buf[..n] {
                        if *b != b'\r' && *b != b'\n' {
                            line.push(*b);
                            continue;
                        }
                        if let Some(p) = percent(&String::from_utf8_lossy(&line))
                            && last.elapsed() >= opts.progress
                        {
                            log.info("convert progress", &[("percent", p.into())]);
                            last = Instant::now();
                        }
                        line.clear();
                    }
                }
            }
        }
    }
    let status = child
        .wait()
        .map_err(|e| ActionError::new("ConvertFailed", format!("{}: {e}", opts.program)))?;
    let err = stderr
        .and_then(|h| h.join().ok())
        .map(|v| String::from_utf8_lossy(&v).trim().to_owned())
        .unwrap_or_default();
    if !status.success() {
        let tail = err
            .char_indices()
            .rev()
            .nth(600)
            .map_or(err.as_str(), |(i, _)| &err[i..]);
        return Err(ActionError::new(
            "ConvertFailed",
            format!(
                "{} {} failed ({status}): {tail}",
                opts.program,
                args.join(" ")
            ),
        ));
    }
    Ok(stdout)
}

/// Files an image refers to, from `qemu-img info --output=json`: backing files, external data
/// files, extents other than the image itself.
fn referenced_files(info: &serde_json::Value, image: &str) -> Vec<String> {
    let mut out = Vec::new();
    for key in ["backing-filename", "full-backing-filename"] {
        if let Some(s) = info.get(key).and_then(|v| v.as_str()) {
            out.push(s.to_owned());
        }
    }
    fn walk(v: &serde_json::Value, image: &str, out: &mut Vec<String>) {
        match v {
            serde_json::Value::Object(m) => {
                for (k, v) in m {
                    if let (true, Some(s)) = (k == "filename" || k == "data-file", v.as_str())
                        && s != image
                    {
                        out.push(s.to_owned());
                    }
                    walk(v, image, out);
                }
            }
            serde_json::Value::Array(a) => a.iter().for_each(|v| walk(v, image, out)),
            _ => {}
        }
    }
    if let Some(fs) = info.get("format-specific") {
        walk(fs, image, &mut out);
    }
    out
}

/// Checks the staged image (virtual size against the disk, no referenced files) and converts
/// it onto the disk; returns the virtual size.
pub fn convert(
    opts: &Options,
    log: &Log,
    staged: &Staged,
    disk: &Path,
    disk_size: Option<u64>,
) -> Result<u64, ActionError> {
    let image = staged.path.to_string_lossy().into_owned();
    let info = run_qemu_img(
        opts,
        &["info", "--output=json", "-f", staged.format, &image],
        None,
    )?;
    let info: serde_json::Value = serde_json::from_slice(&info)
        .map_err(|e| ActionError::new("ConvertFailed", format!("qemu-img info: not JSON: {e}")))?;
    let virtual_size = info
        .get("virtual-size")
        .and_then(|v| v.as_u64())
        .ok_or_else(|| {
            ActionError::new("ConvertFailed", "qemu-img info: no virtual-size".to_owned())
        })?;
    let refs = referenced_files(&info, &image);
    if !refs.is_empty() {
        return Err(ActionError::new(
            "UnsupportedFormat",
            format!(
                "the {} image refers to other files ({}): only self-contained images are written",
                staged.format,
                refs.join(", ")
            ),
        ));
    }
    if let Some(size) = disk_size
        && virtual_size > size
    {
        return Err(ActionError::new(
            "ImageTooLarge",
            format!(
                "the {} image's virtual size is {virtual_size} bytes, the disk {} only {size}: nothing was written",
                staged.format,
                disk.display()
            ),
        ));
    }
    let is_block = std::fs::metadata(disk).is_ok_and(|m| m.file_type().is_block_device());
    let target = disk.to_string_lossy().into_owned();
    let mut args: Vec<&str> = vec!["convert", "-p", "-f", staged.format, "-O", &opts.out_format];
    // A block device exists already (qemu-img would try to create it); a regular file is
    // created at the image's size.
    if is_block {
        args.push("-n");
    }
    args.push(&image);
    args.push(&target);
    args.extend(opts.extra_args.iter().map(String::as_str));
    log.info(
        "converting",
        &[
            (
                "command",
                format!("{} {}", opts.program, args.join(" ")).into(),
            ),
            ("virtual_size", virtual_size.into()),
        ],
    );
    let started = Instant::now();
    run_qemu_img(opts, &args, Some(log))?;
    log.info(
        "converted",
        &[("seconds", started.elapsed().as_secs_f64().into())],
    );
    Ok(virtual_size)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_by_magic() {
        assert_eq!(detect(b"QFI\xfb\0\0\0\x03rest"), Some("qcow2"));
        assert_eq!(detect(b"QFI\xfb\0\0\0\x02"), Some("qcow2"));
        assert_eq!(detect(b"QFI\xfb\0\0\0\x01"), Some("qcow"));
        assert_eq!(detect(b"KDMV\x01\0\0\0"), Some("vmdk"));
        assert_eq!(detect(b"vhdxfile"), Some("vhdx"));
        assert_eq!(detect(b"conectix\0\0"), Some("vpc"));
        assert_eq!(detect(b"QED\0"), Some("qed"));
        let mut vdi = vec![0u8; 0x48];
        vdi[0x40..0x44].copy_from_slice(&[0x7f, 0x10, 0xda, 0xbe]);
        assert_eq!(detect(&vdi), Some("vdi"));
        assert_eq!(detect(&[0xeb, 0x63, 0x90, 0x10]), None);
        assert_eq!(detect(b"QFI"), None);
        assert_eq!(detect(&[]), None);
    }

    #[test]
    fn progress_lines() {
        assert_eq!(percent("    (12.50/100%)"), Some(12.5));
        assert_eq!(percent("(100.00/100%)"), Some(100.0));
        assert_eq!(percent("qemu-img: warning"), None);
    }

    #[test]
    fn referenced_files_are_found() {
        let image = "/tmp/x.qcow2";
        let clean: serde_json::Value = serde_json::json!({
            "virtual-size": 1, "filename": image, "format": "qcow2",
            "format-specific": {"type": "qcow2", "data": {"compat": "1.1"}}
        });
        assert!(referenced_files(&clean, image).is_empty());
        let backed = serde_json::json!({"backing-filename": "/etc/shadow"});
        assert_eq!(referenced_files(&backed, image), vec!["/etc/shadow"]);
        let data_file = serde_json::json!({"format-specific": {"data": {"data-file": "/dev/sda"}}});
        assert_eq!(referenced_files(&data_file, image), vec!["/dev/sda"]);
        let extents = serde_json::json!({"format-specific": {"data": {"extents": [
            {"filename": image}, {"filename": "/root/other.vmdk"}
        ]}}});
        assert_eq!(referenced_files(&extents, image), vec!["/root/other.vmdk"]);
    }
}
