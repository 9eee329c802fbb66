//! writefile: mounts a partition and writes one file with owner and mode.
//!
//! Like the hub's action: missing directories are created with `DIRMODE` and the file's owner;
//! existing ones are left alone. Unlike it, `UID`/`GID` default to 0, `MODE` to 0644 and
//! `DIRMODE` to 0755 when unset, the mode is set exactly (no umask), `..` in `DEST_PATH` is
//! refused, and a symbolic link on the way is refused (it could point out of the mount).

use std::os::unix::fs::{PermissionsExt, chown};
use std::path::{Component, Path, PathBuf};

use serde_json::json;

use crate::common::{ActionError, Env, Log, parse_mode};
use crate::sys;

/// Runs the action.
pub fn run(env: &Env, log: &Log) -> Result<(), ActionError> {
    let device = env.required("DEST_DISK")?;
    let dest = env.required("DEST_PATH")?;
    let contents = env.get("CONTENTS").unwrap_or("");
    let mode = parse_mode("MODE", env.get("MODE").unwrap_or("0644"))?;
    let dir_mode = parse_mode("DIRMODE", env.get("DIRMODE").unwrap_or("0755"))?;
    let uid = id("UID", env.get("UID"))?;
    let gid = id("GID", env.get("GID"))?;
    let rel = relative("DEST_PATH", dest)?;
    sys::check_device("DEST_DISK", device)?;

    let mut mounts = sys::Mounts::default();
    let root = sys::mount_device(
        "writefile",
        Path::new(device),
        env.get("FS_TYPE"),
        &mut mounts,
    )
    .map_err(|e| ActionError::new("MountFailed", format!("DEST_DISK={device}: {e}")))?;
    log.info(
        "mounted",
        &[
            ("device", device.into()),
            ("fs_type", env.get("FS_TYPE").into()),
        ],
    );

    let mut dir = root.clone();
    let parts: Vec<_> = rel.components().collect();
    for c in &parts[..parts.len() - 1] {
        dir.push(c);
        match std::fs::symlink_metadata(&dir) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => {
                return Err(ActionError::new(
                    "InvalidVariable",
                    format!(
                        "DEST_PATH={dest}: {} exists and is not a directory",
                        strip(&root, &dir)
                    ),
                ));
            }
            Err(_) => {
                std::fs::create_dir(&dir)
                    .and_then(|()| {
                        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(dir_mode))
                    })
                    .and_then(|()| chown(&dir, Some(uid), Some(gid)))
                    .map_err(|e| {
                        ActionError::new(
                            "WriteFailed",
                            format!("creating {}: {e}", strip(&root, &dir)),
                        )
                    })?;
                log.info("created directory", &[("path", strip(&root, &dir).into())]);
            }
        }
    }
    let file = root.join(&rel);
    if std::fs::symlink_metadata(&file).is_ok_and(|m| m.file_type().is_symlink()) {
        return Err(ActionError::new(
            "InvalidVariable",
            format!("DEST_PATH={dest} is a symbolic link on {device}: refused"),
        ));
    }
    std::fs::write(&file, contents)
        .and_then(|()| chown(&file, Some(uid), Some(gid)))
        .and_then(|()| std::fs::set_permissions(&file, std::fs::Permissions::from_mode(mode)))
        .map_err(|e| ActionError::new("WriteFailed", format!("writing {dest} on {device}: {e}")))?;
    // FAT has no owners or modes: chown/chmod "succeed" without effect, which is what mount
    // options decide there.
    let errors = mounts.release();
    if !errors.is_empty() {
        return Err(ActionError::new("UnmountFailed", errors.join("; ")));
    }
    log.info(
        "successfully wrote file",
        &[
            ("path", dest.into()),
            ("device", device.into()),
            ("bytes", contents.len().into()),
            ("mode", json!(format!("{mode:04o}"))),
        ],
    );
    Ok(())
}

fn id(var: &str, v: Option<&str>) -> Result<u32, ActionError> {
    match v {
        None => Ok(0),
        Some(s) => s
            .trim()
            .parse()
            .map_err(|e| ActionError::invalid(var, s, e)),
    }
}

/// `DEST_PATH` as a path below the mount: absolute, with a file name, no `..`.
fn relative(var: &str, v: &str) -> Result<PathBuf, ActionError> {
    let p = Path::new(v);
    if !p.is_absolute() {
        return Err(ActionError::invalid(var, v, "must be an absolute path"));
    }
    let mut rel = PathBuf::new();
    for c in p.components() {
        match c {
            Component::RootDir | Component::CurDir => {}
            Component::Normal(n) => rel.push(n),
            _ => return Err(ActionError::invalid(var, v, "must not contain '..'")),
        }
    }
    if rel.as_os_str().is_empty() || v.ends_with('/') {
        return Err(ActionError::invalid(var, v, "must name a file"));
    }
    Ok(rel)
}

fn strip(root: &Path, p: &Path) -> String {
    format!("/{}", p.strip_prefix(root).unwrap_or(p).display())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dest_paths() {
        assert_eq!(
            relative("DEST_PATH", "/etc/a/b").ok(),
            Some(PathBuf::from("etc/a/b"))
        );
        for bad in ["etc/x", "/", "/etc/", "/etc/../x", ""] {
            assert!(
                relative("DEST_PATH", bad).is_err_and(|e| e.message.contains("DEST_PATH")),
                "{bad}"
            );
        }
        assert!(id("UID", Some("x")).is_err_and(|e| e.message.starts_with("UID=")));
        assert_eq!(id("GID", None).ok(), Some(0));
    }
}
