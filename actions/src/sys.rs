//! The few Linux calls the actions need that std does not wrap: mount, umount, the block
//! device ioctls and `kexec_file_load`. Each `unsafe` block passes only pointers to live,
//! NUL-terminated `CString`s or to local integers, and checks the return value.

use std::ffi::CString;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

fn cpath(p: &Path) -> io::Result<CString> {
    CString::new(p.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains a NUL byte"))
}

fn cstr(s: &str) -> io::Result<CString> {
    CString::new(s).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL byte"))
}

/// `mount(2)`.
pub fn mount(source: &Path, target: &Path, fstype: Option<&str>, flags: u64) -> io::Result<()> {
    let src = cpath(source)?;
    let tgt = cpath(target)?;
    let fst = fstype.map(cstr).transpose()?;
    // SAFETY: every pointer is a live CString or null (allowed for fstype and data).
    let rc = unsafe {
        libc::mount(
            src.as_ptr(),
            tgt.as_ptr(),
            fst.as_ref().map_or(std::ptr::null(), |f| f.as_ptr()),
            flags as libc::c_ulong,
            std::ptr::null(),
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// `umount2(2)`.
pub fn umount(target: &Path, flags: i32) -> io::Result<()> {
    let tgt = cpath(target)?;
    // SAFETY: a live CString.
    let rc = unsafe { libc::umount2(tgt.as_ptr(), flags) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Asks the kernel to re-read a disk's partition table (`BLKRRPART`, what `blockdev
/// --rereadpt` and `partprobe` do).
pub fn reread_partitions(file: &std::fs::File) -> io::Result<()> {
    const BLKRRPART: libc::c_ulong = 0x125f;
    // SAFETY: BLKRRPART takes no argument.
    let rc = unsafe { libc::ioctl(file.as_raw_fd(), BLKRRPART as _, 0) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Loads a kernel (and initrd) for a later `kexec -e` (`kexec_file_load(2)`).
pub fn kexec_file_load(
    kernel: &std::fs::File,
    initrd: Option<&std::fs::File>,
    cmdline: &str,
) -> io::Result<()> {
    const KEXEC_FILE_NO_INITRAMFS: libc::c_ulong = 0x4;
    let cmd = cstr(cmdline)?;
    let (initrd_fd, flags) = match initrd {
        Some(f) => (f.as_raw_fd(), 0),
        None => (-1, KEXEC_FILE_NO_INITRAMFS),
    };
    // SAFETY: file descriptors of open files, a live CString and its length with the NUL.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_kexec_file_load,
            kernel.as_raw_fd(),
            initrd_fd,
            cmd.as_bytes_with_nul().len() as libc::c_ulong,
            cmd.as_ptr(),
            flags,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Bytes available to this process in the file system holding `path` (`statvfs(2)`).
pub fn free_space(path: &Path) -> io::Result<u64> {
    let p = cpath(path)?;
    // SAFETY: a live CString and a zeroed statvfs the call fills.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    let rc = unsafe { libc::statvfs(p.as_ptr(), &mut st) };
    if rc == 0 {
        Ok(st.f_bavail as u64 * st.f_frsize as u64)
    } else {
        Err(io::Error::last_os_error())
    }
}

/// A directory made for a mount and removed again.
pub fn mount_dir(action: &str) -> io::Result<PathBuf> {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or_default();
    let dir = std::env::temp_dir().join(format!("tink-{action}-{}-{nanos}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

/// Mount points unmounted (in reverse order) and the mount directory removed on drop, so every
/// return path, including errors, leaves nothing mounted.
#[derive(Debug, Default)]
pub struct Mounts {
    /// Targets, and whether to detach them lazily (recursive binds, whose submounts a plain
    /// umount refuses).
    stack: Vec<(PathBuf, bool)>,
    dirs: Vec<PathBuf>,
    /// Unmount failures, for the log.
    pub errors: Vec<String>,
}

impl Mounts {
    /// Records a mount made by the caller.
    pub fn push(&mut self, target: PathBuf) {
        self.stack.push((target, false));
    }

    /// Records a recursive bind mount, detached with its submounts (`umount -l`).
    pub fn push_recursive(&mut self, target: PathBuf) {
        self.stack.push((target, true));
    }

    /// Records a directory to remove after the unmounts.
    pub fn remove_dir_after(&mut self, dir: PathBuf) {
        self.dirs.push(dir);
    }

    /// Unmounts everything now; returns the failures.
    pub fn release(&mut self) -> Vec<String> {
        while let Some((t, recursive)) = self.stack.pop() {
            if recursive {
                if let Err(e) = umount(&t, libc::MNT_DETACH) {
                    self.errors.push(format!("umount -l {}: {e}", t.display()));
                }
                continue;
            }
            if let Err(e) = umount(&t, 0) {
                // Busy (a process left behind): detach lazily rather than leave it mounted.
                let lazy = umount(&t, libc::MNT_DETACH);
                self.errors.push(format!(
                    "umount {}: {e} (lazy detach: {lazy:?})",
                    t.display()
                ));
            }
        }
        for d in self.dirs.drain(..) {
            let _ = std::fs::remove_dir(&d);
        }
        std::mem::take(&mut self.errors)
    }
}

impl Drop for Mounts {
    fn drop(&mut self) {
        let errors = self.release();
        for e in errors {
            eprintln!("{e}");
        }
    }
}

/// Mounts a device (trying `fstype`, or common types when it is empty) on a fresh directory.
pub fn mount_device(
    action: &str,
    device: &Path,
    fstype: Option<&str>,
    mounts: &mut Mounts,
) -> Result<PathBuf, String> {
    let dir = mount_dir(action).map_err(|e| format!("cannot create a mount directory: {e}"))?;
    mounts.remove_dir_after(dir.clone());
    let types: Vec<&str> = match fstype {
        Some(t) => vec![t],
        None => vec!["ext4", "xfs", "vfat", "btrfs", "ext3", "ext2"],
    };
    let mut last = String::new();
    for t in types {
        match mount(device, &dir, Some(t), 0) {
            Ok(()) => {
                mounts.push(dir.clone());
                return Ok(dir);
            }
            Err(e) => last = format!("mount -t {t} {}: {e}", device.display()),
        }
    }
    Err(last)
}

/// Checks that a device path exists and is a block device (or, for tests and images, a regular
/// file), naming the variable.
pub fn check_device(
    var: &str,
    path: &str,
) -> Result<std::fs::Metadata, crate::common::ActionError> {
    use std::os::unix::fs::FileTypeExt;
    let meta = std::fs::metadata(path).map_err(|e| {
        crate::common::ActionError::new("DiskNotFound", format!("{var}={path}: {e}"))
    })?;
    let ft = meta.file_type();
    if !(ft.is_block_device() || ft.is_file()) {
        return Err(crate::common::ActionError::new(
            "DiskNotFound",
            format!("{var}={path} is neither a block device nor a regular file"),
        ));
    }
    Ok(meta)
}

/// Binds the host's `/dev`, `/proc` and `/sys` (recursively) into `root`, for commands run in a
/// chroot of it; each is recorded in `mounts` as soon as it is made.
pub fn bind_system_dirs(root: &Path, mounts: &mut Mounts) -> Result<(), String> {
    for d in ["dev", "proc", "sys"] {
        let target = root.join(d);
        std::fs::create_dir_all(&target).map_err(|e| format!("creating /{d} in the root: {e}"))?;
        mount(
            Path::new(&format!("/{d}")),
            &target,
            None,
            libc::MS_BIND | libc::MS_REC,
        )
        .map_err(|e| format!("binding /{d}: {e}"))?;
        mounts.push_recursive(target);
    }
    Ok(())
}
