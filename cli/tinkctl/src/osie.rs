//! `tinkctl osie release [--from target/osie] [--out target/osie-releases] [--version V]
//! [--arch x86_64]`: turns osie/build.sh's output into a versioned release folder `OUT/V/`
//! (osie/README.md, "Versioned releases"):
//!
//! - the artifacts under Tinkerbell's arch-suffixed names, `vmlinuz-<arch>` and
//!   `initramfs-<arch>` (`x86_64`; `aarch64` once an arm64 OSIE is built);
//! - `osie.json`, the manifest: version, git description, when the release was made, the kernel
//!   version per arch, and per file its name, arch, kernel version, build time, size, SHA-256;
//! - `SHA256SUMS` in `sha256sum`'s format over every file of the folder (the manifest too), so
//!   `sha256sum -c SHA256SUMS` checks a copy and tink-netboot (`--osie-dir`, `--osie-url`)
//!   serves exactly what it lists.
//!
//! The version defaults to `git describe --always --dirty` and the kernel's version without its
//! flavour (`c55ca67-linux-6.1.0-56`). A release is never changed: a file already in `OUT/V/`
//! with other content stops the command; the same build released again changes nothing, and the
//! other arch of the same version is added beside the first.

use std::collections::BTreeMap;
use std::io::{Read as _, Write as _};
use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail};
use clap::{Args, Subcommand, ValueEnum};
use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};

/// `tinkctl osie ...`.
#[derive(Subcommand, Debug)]
pub enum OsieCommand {
    /// Make a versioned release folder (arch-suffixed files, osie.json, SHA256SUMS) from
    /// osie/build.sh's output.
    Release(ReleaseArgs),
}

/// The architectures an OSIE is built for, named as Tinkerbell names its files.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Arch {
    /// x86-64 (Debian's `amd64` kernel flavour).
    #[value(name = "x86_64")]
    X86_64,
    /// arm64 (Debian's `arm64` kernel flavour).
    #[value(name = "aarch64")]
    Aarch64,
}

impl Arch {
    fn name(self) -> &'static str {
        match self {
            Self::X86_64 => "x86_64",
            Self::Aarch64 => "aarch64",
        }
    }

    /// The suffix of Debian's kernel version for this arch (`6.1.0-56-amd64`).
    fn kernel_flavour(self) -> &'static str {
        match self {
            Self::X86_64 => "-amd64",
            Self::Aarch64 => "-arm64",
        }
    }
}

/// Arguments of `tinkctl osie release`.
#[derive(Args, Debug, Clone)]
pub struct ReleaseArgs {
    /// osie/build.sh's output folder (its `vmlinuz`, `initramfs` and `kernel-version`).
    #[arg(long, default_value = "target/osie")]
    pub from: PathBuf,
    /// Where release folders go (`OUT/VERSION/`).
    #[arg(long, default_value = "target/osie-releases")]
    pub out: PathBuf,
    /// The release version (letters, digits, `.`, `_`, `+`, `-`); default: `git describe
    /// --always --dirty` and the kernel version, e.g. `c55ca67-linux-6.1.0-56`.
    #[arg(long)]
    pub version: Option<String>,
    /// The architecture the build in --from is for.
    #[arg(long, value_enum, default_value = "x86_64")]
    pub arch: Arch,
}

/// `osie.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    /// The release version (its folder's name).
    pub version: String,
    /// `git describe --always --dirty` where the release was made (when known).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub git: Option<String>,
    /// When the release folder was first made (RFC 3339, UTC).
    pub created: String,
    /// The kernel version per arch.
    pub kernel_version: BTreeMap<String, String>,
    /// The artifacts, by name.
    pub files: Vec<FileEntry>,
}

/// One artifact in `osie.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileEntry {
    /// The file name in the release folder (`vmlinuz-x86_64`).
    pub name: String,
    /// `x86_64` or `aarch64`.
    pub arch: String,
    /// The kernel it belongs to.
    pub kernel_version: String,
    /// When the file was built (its modification time in --from, RFC 3339, UTC).
    pub built: String,
    /// Bytes.
    pub size: u64,
    /// Lower-case hex SHA-256.
    pub sha256: String,
}

/// Runs an `osie` subcommand.
pub fn run(cmd: OsieCommand) -> anyhow::Result<()> {
    let OsieCommand::Release(args) = cmd;
    let dir = release(&args)?;
    println!("{}", dir.display());
    Ok(())
}

fn sha256_file(path: &Path) -> anyhow::Result<(String, u64)> {
    let mut f = std::fs::File::open(path).with_context(|| format!("reading {}", path.display()))?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut n = 0u64;
    loop {
        let k = f
            .read(&mut buf)
            .with_context(|| format!("reading {}", path.display()))?;
        if k == 0 {
            break;
        }
        h.update(&buf[..k]);
        n += k as u64;
    }
    let hex = h.finalize().iter().map(|b| format!("{b:02x}")).collect();
    Ok((hex, n))
}

/// A release version: letters, digits and `.`, `_`, `+`, `-`, at most 128, not starting with
/// `.` (the rule tink-netboot serves by).
fn check_version(v: &str) -> anyhow::Result<()> {
    let ok = !v.is_empty()
        && v.len() <= 128
        && !v.starts_with('.')
        && v.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'+' | b'-'));
    if !ok {
        bail!(
            "--version {v:?}: letters, digits, `.`, `_`, `+` and `-` only, at most 128, not \
             starting with `.`"
        );
    }
    Ok(())
}

fn git_describe() -> anyhow::Result<String> {
    let out = std::process::Command::new("git")
        .args(["describe", "--always", "--dirty"])
        .output()
        .context("running `git describe` for the default version (give --version)")?;
    if !out.status.success() {
        bail!(
            "`git describe --always --dirty` failed (not in a git checkout?); give --version: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn rfc3339(t: std::time::SystemTime) -> String {
    jiff::Timestamp::try_from(t)
        .map(|t| t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string())
        .unwrap_or_default()
}

/// Writes `dir/name` through a temporary file and a rename.
fn write_atomic(dir: &Path, name: &str, bytes: &[u8]) -> anyhow::Result<()> {
    let part = dir.join(format!(".{name}.part"));
    let mut f =
        std::fs::File::create(&part).with_context(|| format!("writing {}", part.display()))?;
    f.write_all(bytes)
        .and_then(|()| f.sync_all())
        .with_context(|| format!("writing {}", part.display()))?;
    std::fs::rename(&part, dir.join(name))
        .with_context(|| format!("renaming {} into place", part.display()))
}

/// Makes (or completes with another arch) the release folder; returns it.
pub fn release(args: &ReleaseArgs) -> anyhow::Result<PathBuf> {
    let arch = args.arch;
    let kv_path = args.from.join("kernel-version");
    let kernel_version = std::fs::read_to_string(&kv_path)
        .with_context(|| {
            format!(
                "reading {} (osie/build.sh writes it beside vmlinuz and initramfs)",
                kv_path.display()
            )
        })?
        .trim()
        .to_string();
    let Some(kernel_base) = kernel_version.strip_suffix(arch.kernel_flavour()) else {
        bail!(
            "{}: kernel {kernel_version:?} is not a{} kernel (expected a version ending in {:?}): \
             this build is not for --arch {}",
            kv_path.display(),
            arch.kernel_flavour(),
            arch.kernel_flavour(),
            arch.name()
        );
    };
    let git = git_describe().ok();
    let version = match &args.version {
        Some(v) => v.clone(),
        None => match &git {
            Some(g) => format!("{g}-linux-{kernel_base}"),
            None => git_describe()?,
        },
    };
    check_version(&version)?;

    // The artifacts of this arch, hashed before anything is written.
    let mut new = Vec::new();
    for (input, stem) in [("vmlinuz", "vmlinuz"), ("initramfs", "initramfs")] {
        let src = args.from.join(input);
        let meta = std::fs::metadata(&src)
            .with_context(|| format!("{} (run osie/build.sh first)", src.display()))?;
        let (sha256, size) = sha256_file(&src)?;
        new.push((
            src,
            FileEntry {
                name: format!("{stem}-{}", arch.name()),
                arch: arch.name().to_string(),
                kernel_version: kernel_version.clone(),
                built: meta.modified().map(rfc3339).unwrap_or_default(),
                size,
                sha256,
            },
        ));
    }

    let dir = args.out.join(&version);
    let manifest_path = dir.join("osie.json");
    let mut manifest = if dir.exists() {
        let text = std::fs::read_to_string(&manifest_path).with_context(|| {
            format!(
                "{} exists but has no readable osie.json: not a release folder; choose another \
                 --version or remove it",
                dir.display()
            )
        })?;
        let m: Manifest = serde_json::from_str(&text)
            .with_context(|| format!("{}: not a release manifest", manifest_path.display()))?;
        if m.version != version {
            bail!(
                "{}: version {:?}, not {version:?}",
                manifest_path.display(),
                m.version
            );
        }
        m
    } else {
        Manifest {
            version: version.clone(),
            git: git.clone(),
            created: rfc3339(std::time::SystemTime::now()),
            kernel_version: BTreeMap::new(),
            files: Vec::new(),
        }
    };
    // Never overwrite: a file already released under this name must be the same bytes.
    for (_, e) in &new {
        let existing = dir.join(&e.name);
        if existing.exists() {
            let (sha, _) = sha256_file(&existing)?;
            if sha != e.sha256 {
                bail!(
                    "refusing to overwrite release {version}: {} has SHA-256 {sha}, the build in \
                     {} has {} (a release never changes: choose another --version)",
                    existing.display(),
                    args.from.display(),
                    e.sha256
                );
            }
        }
        if let Some(old) = manifest.files.iter().find(|f| f.name == e.name)
            && old.sha256 != e.sha256
        {
            bail!(
                "refusing to overwrite release {version}: osie.json lists {} with SHA-256 {}, the \
                 build in {} has {}",
                e.name,
                old.sha256,
                args.from.display(),
                e.sha256
            );
        }
    }
    if let Some(old) = manifest.kernel_version.get(arch.name())
        && *old != kernel_version
    {
        bail!(
            "refusing to overwrite release {version}: its {} kernel is {old}, the build in {} has \
             {kernel_version}",
            arch.name(),
            args.from.display()
        );
    }

    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    for (src, e) in &new {
        if dir.join(&e.name).exists() {
            continue;
        }
        let part = dir.join(format!(".{}.part", e.name));
        std::fs::copy(src, &part)
            .with_context(|| format!("copying {} to {}", src.display(), part.display()))?;
        std::fs::File::open(&part)
            .and_then(|f| f.sync_all())
            .with_context(|| format!("writing {}", part.display()))?;
        std::fs::rename(&part, dir.join(&e.name))
            .with_context(|| format!("renaming {} into place", part.display()))?;
    }
    for (_, e) in new {
        if !manifest.files.iter().any(|f| f.name == e.name) {
            manifest.files.push(e);
        }
    }
    manifest.files.sort_by(|a, b| a.name.cmp(&b.name));
    manifest
        .kernel_version
        .insert(arch.name().to_string(), kernel_version);
    let mut json = serde_json::to_string_pretty(&manifest).context("encoding osie.json")?;
    json.push('\n');
    write_atomic(&dir, "osie.json", json.as_bytes())?;

    // SHA256SUMS over every artifact and the manifest, sorted by name.
    let mut sums: BTreeMap<String, String> = manifest
        .files
        .iter()
        .map(|f| (f.name.clone(), f.sha256.clone()))
        .collect();
    let (json_sha, _) = sha256_file(&manifest_path)?;
    sums.insert("osie.json".to_string(), json_sha);
    let text: String = sums
        .iter()
        .map(|(name, sha)| format!("{sha}  {name}\n"))
        .collect();
    write_atomic(&dir, "SHA256SUMS", text.as_bytes())?;
    Ok(dir)
}
