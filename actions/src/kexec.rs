//! kexec: loads the installed kernel (and initrd) with `kexec_file_load` and asks the agent,
//! through the power contract (`kexec` in `/tinkerbell/power`), to execute it once the
//! workflow's success is stored. The hub's action reboots into the kernel itself, so the
//! success of the last action is lost; here the agent runs `kexec -e` afterwards.
//!
//! The kernel and initrd must be regular files in the mounted root; a missing one fails before
//! anything is loaded. `KEXEC_DRY_RUN=true` (for tests and dry runs, not a hub variable) checks
//! and opens everything, skips only the load, and still writes the power request.

use std::path::{Component, Path, PathBuf};

use crate::common::{ActionError, Env, Log, request_power};
use crate::sys;

/// Runs the action.
pub fn run(env: &Env, log: &Log) -> Result<(), ActionError> {
    let device = env.required("BLOCK_DEVICE")?;
    let fs_type = env.get("FS_TYPE");
    let kernel_path = env.required("KERNEL_PATH")?;
    let initrd_path = env.get("INITRD_PATH");
    let cmd_line = env.get("CMD_LINE").unwrap_or("");
    let dry_run = env.bool("KEXEC_DRY_RUN", false)?;
    let kernel_rel = inside("KERNEL_PATH", kernel_path)?;
    let initrd_rel = initrd_path.map(|p| inside("INITRD_PATH", p)).transpose()?;
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
    let kernel = open(&kernel_rel, "KERNEL_PATH", kernel_path, "KernelNotFound")?;
    let initrd = match (&initrd_rel, initrd_path) {
        (Some(rel), Some(v)) => Some(open(rel, "INITRD_PATH", v, "InitrdNotFound")?),
        _ => None,
    };
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
