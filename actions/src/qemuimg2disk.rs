//! qemuimg2disk: a disk image in any format qemu-img reads (qcow2, vmdk, vdi, vhdx, vpc, ...),
//! or raw and gzip/xz/zstd/bzip2 like image2disk, onto a disk.
//!
//! The hub's action hands `IMG_URL` to `qemu-img convert` (its libcurl reads the URL). Here the
//! download is image2disk's (http/https, `CA_CERT`, retries and resume, `IMG_CHECKSUM`,
//! progress lines); the decoded image's first bytes decide: a qemu format is staged in a
//! temporary file in `TMPDIR` and written by `qemu-img convert -O raw` (`FORMAT`,
//! `EXTRA_ARGS` as the hub's), after `qemu-img info` showed its virtual size fits the disk;
//! anything else streams onto the disk as image2disk writes it. Then fsync and `BLKRRPART`.

use crate::common::{ActionError, Env, Log};
use crate::image2disk::{self, Config};
use crate::qemu;

/// Runs the action.
pub fn run(env: &Env, log: &Log) -> Result<(), ActionError> {
    let mut cfg = Config::from_env(env)?;
    cfg.qemu = Some(qemu::Options::from_env(env)?);
    image2disk::write_image(&cfg, log)
}
