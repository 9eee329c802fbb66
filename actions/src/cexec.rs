//! cexec: mounts the installed root and runs a command in it (chroot with /dev, /proc and /sys
//! bound), or in the action's own file system when `CHROOT` is empty (the hub's semantics).
//!
//! The command's exit code is the action's (the hub exits 30 on any failure; passing the code
//! through loses nothing). Everything mounted is unmounted in reverse order on every path, and
//! a resolv.conf replaced for `UPDATE_RESOLV_CONF` is put back.

use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common::{ActionError, Env, Log};
use crate::sys;

/// Runs the action; `Ok` carries the command's exit code (0 on success).
pub fn run(env: &Env, log: &Log) -> Result<(), ActionError> {
    let device = env.required("BLOCK_DEVICE")?;
    let fs_type = env.required("FS_TYPE")?;
    let cmd_line = env.required("CMD_LINE")?;
    let chroot = env.get("CHROOT").is_some();
    let resolv = env.bool("UPDATE_RESOLV_CONF", false)?;
    let commands: Vec<Vec<String>> = match env.get("DEFAULT_INTERPRETER") {
        Some(i) => {
            let mut argv: Vec<String> = i.split_whitespace().map(str::to_owned).collect();
            if argv.is_empty() {
                return Err(ActionError::invalid("DEFAULT_INTERPRETER", i, "empty"));
            }
            argv.push(cmd_line.to_owned());
            vec![argv]
        }
        None => cmd_line
            .split(';')
            .map(|c| c.split_whitespace().map(str::to_owned).collect::<Vec<_>>())
            .filter(|c| !c.is_empty())
            .collect(),
    };
    if commands.is_empty() {
        return Err(ActionError::invalid("CMD_LINE", cmd_line, "no command"));
    }
    sys::check_device("BLOCK_DEVICE", device)?;

    let mut mounts = sys::Mounts::default();
    let root = sys::mount_device("cexec", Path::new(device), Some(fs_type), &mut mounts)
        .map_err(|e| ActionError::new("MountFailed", format!("BLOCK_DEVICE={device}: {e}")))?;
    log.info(
        "mounted",
        &[
            ("device", device.into()),
            ("root", root.display().to_string().into()),
        ],
    );

    // Binds (and the resolv.conf put back) go before the root is unmounted.
    let mut binds = sys::Mounts::default();
    let mut restore: Option<ResolvRestore> = None;
    let result = (|| {
        if chroot {
            sys::bind_system_dirs(&root, &mut binds)
                .map_err(|e| ActionError::new("MountFailed", e))?;
            if resolv {
                bind_resolv_conf(&root, &mut binds, &mut restore)?;
            }
        }
        let target_root = chroot.then(|| root.clone());
        let interpreter = &commands[0][0];
        let check = target_root.as_ref().map_or_else(
            || PathBuf::from(interpreter),
            |r| r.join(interpreter.trim_start_matches('/')),
        );
        if env.get("DEFAULT_INTERPRETER").is_some()
            && interpreter.starts_with('/')
            && !check.exists()
        {
            return Err(ActionError::new(
                "InvalidVariable",
                format!("DEFAULT_INTERPRETER: {interpreter} does not exist in the root"),
            ));
        }
        for argv in &commands {
            log.info(
                "running",
                &[
                    ("command", argv.join(" ").into()),
                    ("chroot", chroot.into()),
                ],
            );
            let mut cmd = Command::new(&argv[0]);
            cmd.args(&argv[1..]);
            if let Some(r) = target_root.clone() {
                // SAFETY of pre_exec: chroot and chdir are async-signal-safe system calls.
                unsafe {
                    cmd.pre_exec(move || {
                        std::os::unix::fs::chroot(&r)?;
                        std::env::set_current_dir("/")
                    });
                }
            }
            let status = cmd.status().map_err(|e| {
                ActionError::new("CommandFailed", format!("starting {:?}: {e}", argv[0]))
            })?;
            let code = status
                .code()
                .unwrap_or_else(|| 128 + status.signal().unwrap_or(0));
            if code != 0 {
                return Err(ActionError {
                    reason: "CommandFailed",
                    message: format!("{:?} exited with code {code}", argv.join(" ")),
                    exit_code: code,
                });
            }
        }
        Ok(())
    })();
    let mut errors = binds.release();
    if let Some(r) = restore.take() {
        r.restore(log);
    }
    errors.extend(mounts.release());
    result?;
    if !errors.is_empty() {
        return Err(ActionError::new("UnmountFailed", errors.join("; ")));
    }
    log.info("command succeeded", &[]);
    Ok(())
}

/// What to undo after the host's resolv.conf was bound over the root's.
struct ResolvRestore {
    path: PathBuf,
    backup: Option<PathBuf>,
}

impl ResolvRestore {
    fn restore(self, log: &Log) {
        let _ = std::fs::remove_file(&self.path);
        if let Some(b) = self.backup
            && let Err(e) = std::fs::rename(&b, &self.path)
        {
            log.error(
                "cannot restore resolv.conf",
                &[("error", e.to_string().into())],
            );
        }
    }
}

/// Moves the root's resolv.conf aside and binds the host's over it; `slot` holds the undo as
/// soon as there is something to undo, so a failure half-way is put back too.
fn bind_resolv_conf(
    root: &Path,
    mounts: &mut sys::Mounts,
    slot: &mut Option<ResolvRestore>,
) -> Result<(), ActionError> {
    let fail = |e: std::io::Error| ActionError::new("MountFailed", format!("resolv.conf: {e}"));
    let etc = root.join("etc");
    std::fs::create_dir_all(&etc).map_err(fail)?;
    let path = etc.join("resolv.conf");
    // Often a symbolic link into /run (systemd-resolved): moved aside as it is.
    let backup = if std::fs::symlink_metadata(&path).is_ok() {
        let b = etc.join("resolv.conf.tink-backup");
        std::fs::rename(&path, &b).map_err(fail)?;
        Some(b)
    } else {
        None
    };
    *slot = Some(ResolvRestore {
        path: path.clone(),
        backup,
    });
    std::fs::write(&path, b"").map_err(fail)?;
    sys::mount(Path::new("/etc/resolv.conf"), &path, None, libc::MS_BIND).map_err(fail)?;
    mounts.push(path);
    Ok(())
}
