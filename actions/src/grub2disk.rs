//! grub2disk: installs grub onto a disk from the installed root: mounts `GRUB_DISK` (the root
//! partition), binds `/dev`, `/proc` and `/sys` into it, and runs the root's own
//! `grub-install GRUB_INSTALL_PATH` and `grub-mkconfig -o /boot/grub/grub.cfg` in a chroot
//! (`grub2-install`/`grub2-mkconfig` and `/boot/grub2` on roots that name them so).
//!
//! The hub's action binds its own image's `/usr`, `/etc`, `/bin`, ... over the root and so
//! runs the Alpine grub of its image; this image is `FROM scratch`, so the installed system's
//! grub is used, the one matching its kernel, modules and `/etc/default/grub`. A root without
//! `grub-install` fails before anything is run (`GrubNotFound`).
//!
//! Additions to the hub's variables: `GRUB_INSTALL_ARGS` (extra `grub-install` arguments,
//! such as `--target=i386-pc`, split on white space, before the disk) and `GRUB_MKCONFIG`
//! (`false` skips `grub-mkconfig`).

use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::Path;
use std::process::{Command, Stdio};

use crate::common::{ActionError, Env, Log};
use crate::sys;

/// The grub tools found in a root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grub {
    /// `grub-install`'s path inside the root.
    pub install: &'static str,
    /// `grub-mkconfig`'s path inside the root.
    pub mkconfig: &'static str,
    /// The configuration file grub reads (`/boot/grub/grub.cfg` or `/boot/grub2/grub.cfg`).
    pub config: &'static str,
}

/// Where distributions put grub: Debian and Ubuntu (`grub-*`), Fedora, RHEL and SUSE
/// (`grub2-*`); `/sbin` for roots without the merged `/usr`.
const LAYOUTS: [Grub; 4] = [
    Grub {
        install: "/usr/sbin/grub-install",
        mkconfig: "/usr/sbin/grub-mkconfig",
        config: "/boot/grub/grub.cfg",
    },
    Grub {
        install: "/usr/sbin/grub2-install",
        mkconfig: "/usr/sbin/grub2-mkconfig",
        config: "/boot/grub2/grub.cfg",
    },
    Grub {
        install: "/sbin/grub-install",
        mkconfig: "/sbin/grub-mkconfig",
        config: "/boot/grub/grub.cfg",
    },
    Grub {
        install: "/sbin/grub2-install",
        mkconfig: "/sbin/grub2-mkconfig",
        config: "/boot/grub2/grub.cfg",
    },
];

/// The grub of the root mounted at `root`.
pub fn find(root: &Path) -> Option<Grub> {
    LAYOUTS
        .iter()
        .find(|g| root.join(g.install.trim_start_matches('/')).is_file())
        .cloned()
}

/// The commands run in the chroot, in order.
pub fn commands(grub: &Grub, disk: &str, extra: &[String], mkconfig: bool) -> Vec<Vec<String>> {
    let mut install = vec![grub.install.to_owned()];
    install.extend(extra.iter().cloned());
    install.push(disk.to_owned());
    let mut out = vec![install];
    if mkconfig {
        out.push(vec![
            grub.mkconfig.to_owned(),
            "-o".to_owned(),
            grub.config.to_owned(),
        ]);
    }
    out
}

/// Runs the action.
pub fn run(env: &Env, log: &Log) -> Result<(), ActionError> {
    let disk = env.required("GRUB_INSTALL_PATH")?;
    let part = env.required("GRUB_DISK")?;
    let fs_type = env.get("FS_TYPE");
    let extra: Vec<String> = env
        .get("GRUB_INSTALL_ARGS")
        .map(|a| a.split_whitespace().map(str::to_owned).collect())
        .unwrap_or_default();
    let mkconfig = env.bool("GRUB_MKCONFIG", true)?;
    sys::check_device("GRUB_INSTALL_PATH", disk)?;
    sys::check_device("GRUB_DISK", part)?;

    let mut mounts = sys::Mounts::default();
    let root = sys::mount_device("grub2disk", Path::new(part), fs_type, &mut mounts)
        .map_err(|e| ActionError::new("MountFailed", format!("GRUB_DISK={part}: {e}")))?;
    log.info(
        "mounted",
        &[
            ("device", part.into()),
            ("root", root.display().to_string().into()),
        ],
    );
    let mut binds = sys::Mounts::default();
    let result = (|| {
        let grub = find(&root).ok_or_else(|| {
            ActionError::new(
                "GrubNotFound",
                format!(
                    "the root on GRUB_DISK={part} has no grub-install (looked for {}): install grub (grub-pc or grub-efi) in the image",
                    LAYOUTS.map(|g| g.install).join(", ")
                ),
            )
        })?;
        sys::bind_system_dirs(&root, &mut binds).map_err(|e| ActionError::new("MountFailed", e))?;
        for argv in commands(&grub, disk, &extra, mkconfig) {
            run_in_chroot(&root, &argv, log)?;
        }
        Ok(())
    })();
    let mut errors = binds.release();
    errors.extend(mounts.release());
    result?;
    if !errors.is_empty() {
        return Err(ActionError::new("UnmountFailed", errors.join("; ")));
    }
    log.info(
        "grub successfully written",
        &[("disk", disk.into()), ("root", part.into())],
    );
    Ok(())
}

fn run_in_chroot(root: &Path, argv: &[String], log: &Log) -> Result<(), ActionError> {
    log.info("running", &[("command", argv.join(" ").into())]);
    let mut cmd = Command::new(&argv[0]);
    cmd.args(&argv[1..])
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .stdin(Stdio::null());
    let r = root.to_path_buf();
    // SAFETY of pre_exec: chroot and chdir are async-signal-safe system calls.
    unsafe {
        cmd.pre_exec(move || {
            std::os::unix::fs::chroot(&r)?;
            std::env::set_current_dir("/")
        });
    }
    let out = cmd.output().map_err(|e| {
        ActionError::new(
            "GrubInstallFailed",
            format!("starting {} in the root: {e}", argv[0]),
        )
    })?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        log.info(line, &[("command", argv[0].clone().into())]);
    }
    if !out.status.success() {
        let code = out
            .status
            .code()
            .unwrap_or_else(|| 128 + out.status.signal().unwrap_or(0));
        let text = text.trim();
        let tail = text
            .char_indices()
            .rev()
            .nth(600)
            .map_or(text, |(i, _)| &text[i..]);
        return Err(ActionError::new(
            "GrubInstallFailed",
            format!("{:?} exited with code {code}: {tail}", argv.join(" ")),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_roots_grub_and_builds_the_commands() -> std::io::Result<()> {
        let root = tempfile::tempdir()?;
        assert_eq!(find(root.path()), None);
        std::fs::create_dir_all(root.path().join("usr/sbin"))?;
        std::fs::write(root.path().join("usr/sbin/grub2-install"), b"")?;
        assert_eq!(find(root.path()), Some(LAYOUTS[1].clone()));
        std::fs::write(root.path().join("usr/sbin/grub-install"), b"")?;
        let grub = find(root.path());
        assert_eq!(grub, Some(LAYOUTS[0].clone()));
        let cmds = commands(
            &LAYOUTS[0],
            "/dev/sda",
            &["--target=i386-pc".to_owned()],
            true,
        );
        assert_eq!(
            cmds,
            vec![
                vec!["/usr/sbin/grub-install", "--target=i386-pc", "/dev/sda"],
                vec!["/usr/sbin/grub-mkconfig", "-o", "/boot/grub/grub.cfg"],
            ]
        );
        let cmds = commands(&LAYOUTS[1], "/dev/vda", &[], false);
        assert_eq!(cmds, vec![vec!["/usr/sbin/grub2-install", "/dev/vda"]]);
        Ok(())
    }
}
