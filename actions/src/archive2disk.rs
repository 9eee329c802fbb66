//! archive2disk: streams a tar (or gzip-compressed tar) archive over HTTP and unpacks it into a
//! directory of a mounted partition, keeping modes, owners, symbolic and hard links.
//!
//! As the hub: `TARFILE_CHECKSUM` is required unless `INSECURE_NO_TARFILE_CHECKSUM_VERIFICATION`
//! is true; the digest covers the archive as downloaded and is compared when it has been read
//! (the files are already unpacked then: the action fails, the Workflow shows why). Only
//! `sha256:` digests are supported. The format is found by its magic bytes; `ARCHIVE_TYPE`
//! (`tar`, `targz`) is checked against it. Entries that would land outside `DEST_PATH` are
//! refused by the tar reader.

use std::io::Read;
use std::path::Path;

use crate::common::{ActionError, Env, Log};
use crate::image2disk::{self, Config, Format};
use crate::sys;

/// Runs the action.
pub fn run(env: &Env, log: &Log) -> Result<(), ActionError> {
    let device = env.required("DEST_DISK")?;
    let raw_url = env.required("ARCHIVE_URL")?;
    let url =
        url::Url::parse(raw_url).map_err(|e| ActionError::invalid("ARCHIVE_URL", raw_url, e))?;
    let dest = env.get("DEST_PATH").unwrap_or("/");
    let archive_type = env.get("ARCHIVE_TYPE").map(str::to_ascii_lowercase);
    if let Some(t) = archive_type.as_deref()
        && !matches!(t, "tar" | "targz" | "tar.gz" | "tgz")
    {
        return Err(ActionError::invalid(
            "ARCHIVE_TYPE",
            t,
            "expected tar or targz",
        ));
    }
    let insecure = env.bool("INSECURE_NO_TARFILE_CHECKSUM_VERIFICATION", false)?;
    let sha256 = match (env.get("TARFILE_CHECKSUM"), insecure) {
        (Some(c), _) => Some(image2disk::parse_sha256_named("TARFILE_CHECKSUM", c)?),
        (None, true) => None,
        (None, false) => return Err(ActionError::missing("TARFILE_CHECKSUM")),
    };
    sys::check_device("DEST_DISK", device)?;

    let mut mounts = sys::Mounts::default();
    let root = sys::mount_device(
        "archive2disk",
        Path::new(device),
        env.get("FS_TYPE"),
        &mut mounts,
    )
    .map_err(|e| ActionError::new("MountFailed", format!("DEST_DISK={device}: {e}")))?;
    let target = root.join(dest.trim_start_matches('/'));
    if dest.split('/').any(|c| c == "..") {
        return Err(ActionError::invalid(
            "DEST_PATH",
            dest,
            "must not contain '..'",
        ));
    }
    std::fs::create_dir_all(&target)
        .map_err(|e| ActionError::new("WriteFailed", format!("creating DEST_PATH={dest}: {e}")))?;
    let cfg = Config {
        url,
        disk: target.clone(),
        compressed: false,
        retry: false,
        retry_for: std::time::Duration::ZERO,
        progress: std::time::Duration::from_secs(3),
        sha256,
        first_backoff: std::time::Duration::ZERO,
        headers: Vec::new(),
        tls: crate::http::Tls::from_env(env),
        checksum_name: "TARFILE_CHECKSUM".into(),
        qemu: None,
    };
    log.info(
        "unpacking",
        &[
            ("archive", raw_url.into()),
            ("device", device.into()),
            ("path", dest.into()),
        ],
    );
    let (entries, digest) = image2disk::fetch(&cfg, log, |r| {
        let mut head = Vec::with_capacity(8);
        r.take(8)
            .read_to_end(&mut head)
            .map_err(|e| ActionError::new("DownloadFailed", e.to_string()))?;
        let format = image2disk::detect(&head);
        let gz = format == Format::Gzip;
        match (archive_type.as_deref(), gz) {
            (Some("tar"), true) => log.info(
                "ARCHIVE_TYPE is tar but the archive is gzip-compressed: decompressing it",
                &[],
            ),
            (Some("targz" | "tar.gz" | "tgz"), false) => {
                return Err(ActionError::new(
                    "UnsupportedFormat",
                    "ARCHIVE_TYPE=targz but the archive is not gzip-compressed",
                ));
            }
            _ => {}
        }
        if !matches!(format, Format::Raw | Format::Gzip) {
            return Err(ActionError::new(
                "UnsupportedFormat",
                format!("a {format:?} archive: expected tar or tar.gz"),
            ));
        }
        let stream = std::io::Cursor::new(head).chain(r);
        let inner: Box<dyn Read> = if gz {
            Box::new(flate2::read::MultiGzDecoder::new(stream))
        } else {
            Box::new(stream)
        };
        let mut archive = tar::Archive::new(inner);
        archive.set_preserve_permissions(true);
        archive.set_preserve_ownerships(true);
        archive.set_overwrite(true);
        let mut n = 0u64;
        let entries = archive
            .entries()
            .map_err(|e| ActionError::new("ExtractFailed", format!("reading the archive: {e}")))?;
        for entry in entries {
            let mut entry = entry.map_err(|e| {
                ActionError::new("ExtractFailed", format!("reading the archive: {e}"))
            })?;
            let path = entry.path().map(|p| p.into_owned()).unwrap_or_default();
            let name = path.display().to_string();
            // A re-run over an earlier unpack: links are replaced (the tar reader refuses an
            // existing one). Only plain relative paths; others are refused by unpack_in below.
            let kind = entry.header().entry_type();
            if (kind.is_symlink() || kind.is_hard_link())
                && path
                    .components()
                    .all(|c| matches!(c, std::path::Component::Normal(_)))
            {
                let full = target.join(&path);
                if std::fs::symlink_metadata(&full).is_ok_and(|m| !m.is_dir()) {
                    let _ = std::fs::remove_file(&full);
                }
            }
            entry.unpack_in(&target).map_err(|e| {
                let cause = std::error::Error::source(&e)
                    .map(|c| format!(" ({c})"))
                    .unwrap_or_default();
                ActionError::new("ExtractFailed", format!("unpacking {name}: {e}{cause}"))
            })?;
            n += 1;
        }
        // The rest of the stream (tar's zero blocks) goes through the digest too.
        let mut rest = archive.into_inner();
        std::io::copy(&mut rest, &mut std::io::sink())
            .map_err(|e| ActionError::new("ExtractFailed", format!("reading the archive: {e}")))?;
        Ok(n)
    })?;
    if let Some(want) = sha256
        && digest != Some(want)
    {
        return Err(ActionError::new(
            "ChecksumMismatch",
            format!(
                "sha256 of the archive is {}, TARFILE_CHECKSUM wants {} (the files were unpacked)",
                digest
                    .as_ref()
                    .map_or_else(String::new, |d| image2disk::hex_string(d)),
                image2disk::hex_string(&want)
            ),
        ));
    }
    let errors = mounts.release();
    if !errors.is_empty() {
        return Err(ActionError::new("UnmountFailed", errors.join("; ")));
    }
    log.info(
        "successfully unpacked the archive",
        &[("entries", entries.into()), ("path", dest.into())],
    );
    Ok(())
}
