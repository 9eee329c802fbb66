//! The default boot entry of a `grub.cfg`, for kexec without `KERNEL_PATH` (what the hub's kexec
//! does, and what published templates that give only `BLOCK_DEVICE` and `FS_TYPE` rely on).
//!
//! Line by line, like the hub: `set default=N` picks the entry; each `menuentry` (including
//! those inside a `submenu`, counted in order) with a `linux`/`linux16`/`linuxefi` line and at
//! least one `initrd`/`initrd16`/`initrdefi` path is an entry. A non-numeric default (a saved
//! entry's name) means the first entry.

/// One boot entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The kernel path, as grub sees it.
    pub kernel: String,
    /// The initrd paths (concatenated for the kernel).
    pub initrds: Vec<String>,
    /// The kernel command line (`\$` unescaped).
    pub args: String,
}

/// The entry grub boots by default, if any entry is complete.
pub fn default_entry(cfg: &str) -> Option<Entry> {
    let mut entries = Vec::new();
    let mut current: Option<Entry> = None;
    let mut default = 0usize;
    let push = |e: Option<Entry>, entries: &mut Vec<Entry>| {
        if let Some(e) = e
            && !e.kernel.is_empty()
            && !e.initrds.is_empty()
        {
            entries.push(e);
        }
    };
    for line in cfg.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["set", kv, ..] if kv.starts_with("default=") => {
                let v = kv
                    .trim_start_matches("default=")
                    .trim_matches(|c| c == '"' || c == '\'');
                default = v.parse().unwrap_or(0);
            }
            ["menuentry", ..] => {
                push(current.take(), &mut entries);
                current = Some(Entry {
                    kernel: String::new(),
                    initrds: Vec::new(),
                    args: String::new(),
                });
            }
            ["linux" | "linux16" | "linuxefi", kernel, args @ ..] => {
                if let Some(e) = current.as_mut() {
                    e.kernel = (*kernel).to_owned();
                    e.args = args.join(" ").replace("\\$", "$");
                }
            }
            ["initrd" | "initrd16" | "initrdefi", paths @ ..] if !paths.is_empty() => {
                if let Some(e) = current.as_mut() {
                    e.initrds = paths.iter().map(|p| (*p).to_owned()).collect();
                }
            }
            _ => {}
        }
    }
    push(current, &mut entries);
    let n = entries.len();
    entries
        .into_iter()
        .nth(if default < n { default } else { 0 })
}

#[cfg(test)]
mod tests {
    use super::*;

    const DEBIAN: &str = r#"
set default="1"
menuentry 'Debian GNU/Linux' --class debian $menuentry_id_option 'gnulinux-simple-x' {
	load_video
	insmod ext2
	echo	'Loading Linux 6.1.0-18-amd64 ...'
	linux	/boot/vmlinuz-6.1.0-18-amd64 root=UUID=abcd ro  console=ttyS0 quiet
	echo	'Loading initial ramdisk ...'
	initrd	/boot/initrd.img-6.1.0-18-amd64
}
submenu 'Advanced options for Debian GNU/Linux' $menuentry_id_option 'gnulinux-advanced-x' {
	menuentry 'Debian GNU/Linux, with Linux 6.1.0-18-amd64 (recovery mode)' {
		linux	/boot/vmlinuz-6.1.0-18-amd64 root=UUID=abcd ro single \$x
		initrd	/boot/initrd.img-6.1.0-18-amd64 /boot/extra.img
	}
}
"#;

    #[test]
    fn picks_the_default_entry() {
        let e = default_entry(DEBIAN);
        assert_eq!(
            e,
            Some(Entry {
                kernel: "/boot/vmlinuz-6.1.0-18-amd64".into(),
                initrds: vec![
                    "/boot/initrd.img-6.1.0-18-amd64".into(),
                    "/boot/extra.img".into()
                ],
                args: "root=UUID=abcd ro single $x".into(),
            })
        );
        let first =
            default_entry(&DEBIAN.replace("set default=\"1\"", "set default=\"${saved_entry}\""));
        assert_eq!(
            first.map(|e| e.args),
            Some("root=UUID=abcd ro console=ttyS0 quiet".into())
        );
        let out_of_range = default_entry(&DEBIAN.replace("\"1\"", "7"));
        assert_eq!(out_of_range.map(|e| e.initrds.len()), Some(1));
    }

    #[test]
    fn incomplete_entries_are_skipped() {
        assert_eq!(default_entry(""), None);
        assert_eq!(
            default_entry("menuentry 'x' {\n linux /vmlinuz ro\n}\n"),
            None
        );
    }
}
