//! kexec: loads the installed kernel (and initrd) with `kexec_file_load` and asks the agent,
//! through the power contract (`kexec` in `/tinkerbell/power`), to execute it once the
//! workflow's success is stored. The hub's action reboots into the kernel itself, so the
//! success of the last action is lost; here the agent runs `kexec -e` afterwards.
//!
//! The kernel and initrd must be regular files in the mounted root; a missing one fails before
//! anything is loaded. Without `KERNEL_PATH` the default entry of `GRUBCFG_PATH` (default
//! `boot/grub/grub.cfg`) gives kernel, initrds and command line (`CMD_LINE` still wins), as the
//! hub's action does. `KEXEC_DRY_RUN=true` (for tests and dry runs, not a hub variable) checks
//! and opens everything, skips only the load, and still writes the power request.

use std::path::{Component, Path, PathBuf};

use crate::common::{ActionError, Env, Log, request_power};
use crate::{grubcfg, sys};

/// A temporary file removed on drop.
struct TempFile(PathBuf);

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Several initrds as one file (the kernel unpacks concatenated cpio archives), reopened
/// read-only: `kexec_file_load` refuses a file open for writing.
fn concat(files: &mut [std::fs::File]) -> Result<(std::fs::File, TempFile), ActionError> {
    let fail =
        |e: std::io::Error| ActionError::new("InitrdNotFound", format!("joining the initrds: {e}"));
    let dir = sys::mount_dir("kexec-initrd").map_err(fail)?;
    let tmp = TempFile(dir.join("initrd"));
    {
        let mut out = std::fs::File::create(&tmp.0).map_err(fail)?;
        for f in files.iter_mut() {
            std::io::copy(f, &mut out).map_err(fail)?;
        }
    }
    let f = std::fs::File::open(&tmp.0).map_err(fail)?;
    let _ = std::fs::remove_file(&tmp.0);
    let _ = std::fs::remove_dir(&dir);
    Ok((f, tmp))
}

/// Runs the action.
pub fn run(env: &Env, log: &Log) -> Result<(), ActionError> {
    let device = env.required("BLOCK_DEVICE")?;
    let fs_type = env.get("FS_TYPE");
    let dry_run = env.bool("KEXEC_DRY_RUN", false)?;
    let grub_cfg = inside(
        "GRUBCFG_PATH",
        env.get("GRUBCFG_PATH").unwrap_or("boot/grub/grub.cfg"),
    )?;
    let given_kernel = env
        .get("KERNEL_PATH")
        .map(|p| inside("KERNEL_PATH", p).map(|r| (p, r)))
        .transpose()?;
    let given_initrd = env
        .get("INITRD_PATH")
        .map(|p| inside("INITRD_PATH", p).map(|r| (p, r)))
        .transpose()?;
    sys::check_device("BLOCK_DEVICE", device)?;

    let mut mounts = sys::Mounts::default();
    let root = sys::mount_device("kexec", Path::new(device), fs_type, &mut mounts)
        .map_err(|e| ActionError::new("MountFailed", format!("BLOCK_DEVICE={device}: {e}")))?;
    let open = |rel: &Path, var: &str, value: &str, reason: &'static str| {
        let p = root.join(rel);
        match std::fs::metadata(&p) {
            Ok(m) if m.is_file() => std::fs::File::open(&p)
                .map_err(|e| ActionError::new(reason, format!("{var}={value} on {device}: {e}"))),
            Ok(_) => Err(ActionError::new(
                reason,
                format!("{var}={value} on {device} is not a file"),
            )),
            Err(e) => Err(ActionError::new(
                reason,
                format!("{var}={value} on {device}: {e}"),
            )),
        }
    };
    // KERNEL_PATH (and INITRD_PATH, CMD_LINE), or grub.cfg's default entry like the hub.
    let (kernel_path, initrd_paths, cmd_line) = match given_kernel {
        Some((path, _)) => (
            path.to_owned(),
            given_initrd
                .iter()
                .map(|(p, _)| (*p).to_owned())
                .collect::<Vec<_>>(),
            env.get("CMD_LINE").unwrap_or("").to_owned(),
        ),
        None => {
            let cfg_path = root.join(&grub_cfg);
            let text = std::fs::read_to_string(&cfg_path).map_err(|e| {
                ActionError::new(
                    "KernelNotFound",
                    format!(
                        "no KERNEL_PATH, and /{} on {device}: {e}",
                        grub_cfg.display()
                    ),
                )
            })?;
            let entry = grubcfg::default_entry(&text).ok_or_else(|| {
                ActionError::new(
                    "KernelNotFound",
                    format!("no KERNEL_PATH, and /{} on {device} has no entry with a kernel and an initrd", grub_cfg.display()),
                )
            })?;
            let args = env.get("CMD_LINE").map_or(entry.args, str::to_owned);
            (entry.kernel, entry.initrds, args)
        }
    };
    let kernel_rel = inside("KERNEL_PATH", &kernel_path)?;
    let kernel = open(&kernel_rel, "KERNEL_PATH", &kernel_path, "KernelNotFound")?;
    let mut initrd_files = Vec::new();
    for p in &initrd_paths {
        initrd_files.push(open(
            &inside("INITRD_PATH", p)?,
            "INITRD_PATH",
            p,
            "InitrdNotFound",
        )?);
    }
    let (initrd, _tmp) = match initrd_files.len() {
        0 => (None, None),
        1 => (initrd_files.pop(), None),
        _ => {
            let (f, tmp) = concat(&mut initrd_files)?;
            (Some(f), Some(tmp))
        }
    };
    let initrd_path = (!initrd_paths.is_empty()).then(|| initrd_paths.join(" "));
    let initrd_path = initrd_path.as_deref();
    let cmd_line = cmd_line.as_str();
    let kernel_path = kernel_path.as_str();
    log.info(
        "loading kernel",
        &[
            ("kernel", kernel_path.into()),
            ("initrd", initrd_path.into()),
            ("cmdline", cmd_line.into()),
            ("dry_run", dry_run.into()),
        ],
    );
    if dry_run {
        log.info("KEXEC_DRY_RUN: the kernel was not loaded", &[]);
    } else {
        sys::kexec_file_load(&kernel, initrd.as_ref(), cmd_line).map_err(|e| {
            let hint = match e.raw_os_error() {
                Some(libc::ENOSYS) => " (the running kernel has no kexec_file_load)",
                Some(libc::EPERM) => " (the action needs CAP_SYS_BOOT: a privileged container)",
                Some(libc::EKEYREJECTED) => " (the kernel's signature was rejected)",
                _ => "",
            };
            ActionError::new(
                "KexecLoadFailed",
                format!("kexec_file_load {kernel_path}: {e}{hint}"),
            )
        })?;
        log.info("kernel loaded", &[]);
    }
    drop(kernel);
    drop(initrd);
    drop(initrd_files);
    let errors = mounts.release();
    if !errors.is_empty() {
        return Err(ActionError::new("UnmountFailed", errors.join("; ")));
    }
    let file = request_power(env, "kexec")?;
    log.info(
        "asked the agent to kexec once the workflow succeeded",
        &[("file", file.display().to_string().into())],
    );
    Ok(())
}

/// A path inside the mounted root (absolute or relative, no `..`).
fn inside(var: &str, v: &str) -> Result<PathBuf, ActionError> {
    let mut rel = PathBuf::new();
    for c in Path::new(v).components() {
        match c {
            Component::RootDir | Component::CurDir => {}
            Component::Normal(n) => rel.push(n),
            _ => return Err(ActionError::invalid(var, v, "must not contain '..'")),
        }
    }
    if rel.as_os_str().is_empty() {
        return Err(ActionError::invalid(var, v, "must name a file"));
    }
    Ok(rel)
}
