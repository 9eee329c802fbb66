//! `tinkctl osie release` on small fake build outputs (osie/build.sh is root-only and slow):
//! the release folder holds the arch-suffixed files, an `osie.json` that describes them and a
//! `SHA256SUMS` coreutils' `sha256sum -c` accepts; the same build released again changes
//! nothing, another build under the same version is refused, a build for another arch cannot
//! pass for aarch64, and the default version comes from `git describe` and the kernel.

use std::path::Path;
use std::process::{Command, Output};

fn tinkctl(args: &[&str], cwd: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tinkctl"))
        .args(args)
        .current_dir(cwd)
        .output()
        .expect("tinkctl runs")
}

fn build_output(dir: &Path, kernel: &[u8], initramfs: &[u8], kver: &str) {
    std::fs::create_dir_all(dir).expect("mkdir");
    std::fs::write(dir.join("vmlinuz"), kernel).expect("write");
    std::fs::write(dir.join("initramfs"), initramfs).expect("write");
    std::fs::write(dir.join("kernel-version"), format!("{kver}\n")).expect("write");
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).to_string()
}

#[test]
fn a_release_folder_with_checksums_and_manifest() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let from = tmp.path().join("osie");
    build_output(&from, b"kernel bytes", b"initramfs bytes", "6.1.0-56-amd64");
    let out = tmp.path().join("releases");
    let args = [
        "osie",
        "release",
        "--from",
        from.to_str().expect("utf8"),
        "--out",
        out.to_str().expect("utf8"),
        "--version",
        "v1",
    ];
    let o = tinkctl(&args, tmp.path());
    assert!(o.status.success(), "{}", stderr(&o));
    let rel = out.join("v1");
    assert_eq!(
        String::from_utf8_lossy(&o.stdout).trim(),
        rel.to_str().expect("utf8")
    );
    assert_eq!(
        std::fs::read(rel.join("vmlinuz-x86_64")).expect("read"),
        b"kernel bytes"
    );
    assert_eq!(
        std::fs::read(rel.join("initramfs-x86_64")).expect("read"),
        b"initramfs bytes"
    );
    let mut names: Vec<String> = std::fs::read_dir(&rel)
        .expect("read_dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().to_string())
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "SHA256SUMS",
            "initramfs-x86_64",
            "osie.json",
            "vmlinuz-x86_64"
        ],
        "no temporary files left"
    );

    // coreutils accepts the list, and it covers every file but itself.
    let check = Command::new("sha256sum")
        .args(["--strict", "-c", "SHA256SUMS"])
        .current_dir(&rel)
        .output()
        .expect("sha256sum runs");
    assert!(
        check.status.success(),
        "{}",
        String::from_utf8_lossy(&check.stdout)
    );
    let sums = std::fs::read_to_string(rel.join("SHA256SUMS")).expect("read");
    let listed: Vec<&str> = sums.lines().map(|l| &l[66..]).collect();
    assert_eq!(listed, ["initramfs-x86_64", "osie.json", "vmlinuz-x86_64"]);

    let manifest: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(rel.join("osie.json")).expect("read"))
            .expect("osie.json is JSON");
    assert_eq!(manifest["version"], "v1");
    assert_eq!(manifest["kernel_version"]["x86_64"], "6.1.0-56-amd64");
    assert!(
        manifest["created"]
            .as_str()
            .is_some_and(|s| s.ends_with('Z'))
    );
    let files = manifest["files"].as_array().expect("files");
    assert_eq!(files.len(), 2);
    assert_eq!(files[1]["name"], "vmlinuz-x86_64");
    assert_eq!(files[1]["arch"], "x86_64");
    assert_eq!(files[1]["size"], 12);
    assert_eq!(
        files[1]["sha256"],
        sums.lines()
            .find(|l| l.ends_with("  vmlinuz-x86_64"))
            .map(|l| &l[..64])
            .expect("listed")
    );
    assert!(files[1]["built"].as_str().is_some_and(|s| s.ends_with('Z')));

    // The same build again: nothing changes.
    let before = std::fs::read(rel.join("SHA256SUMS")).expect("read");
    let o = tinkctl(&args, tmp.path());
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(std::fs::read(rel.join("SHA256SUMS")).expect("read"), before);

    // Another build under the same version: refused, the release untouched.
    build_output(
        &from,
        b"another kernel",
        b"initramfs bytes",
        "6.1.0-56-amd64",
    );
    let o = tinkctl(&args, tmp.path());
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("refusing to overwrite release v1"),
        "{}",
        stderr(&o)
    );
    assert!(stderr(&o).contains("vmlinuz-x86_64"), "{}", stderr(&o));
    assert_eq!(
        std::fs::read(rel.join("vmlinuz-x86_64")).expect("read"),
        b"kernel bytes"
    );
    assert_eq!(std::fs::read(rel.join("SHA256SUMS")).expect("read"), before);

    // An amd64 build cannot be released as aarch64.
    let mut arm = args.to_vec();
    arm.extend(["--arch", "aarch64"]);
    let o = tinkctl(&arm, tmp.path());
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("not for --arch aarch64"),
        "{}",
        stderr(&o)
    );
    assert!(!rel.join("vmlinuz-aarch64").exists());

    // An arm64 build (fake bytes: only the folder logic is tested) joins the same release.
    let arm_from = tmp.path().join("osie-arm64");
    build_output(&arm_from, b"arm kernel", b"arm initramfs", "6.1.0-56-arm64");
    let o = tinkctl(
        &[
            "osie",
            "release",
            "--from",
            arm_from.to_str().expect("utf8"),
            "--out",
            out.to_str().expect("utf8"),
            "--version",
            "v1",
            "--arch",
            "aarch64",
        ],
        tmp.path(),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let check = Command::new("sha256sum")
        .args(["--strict", "-c", "SHA256SUMS"])
        .current_dir(&rel)
        .output()
        .expect("sha256sum runs");
    assert!(
        check.status.success(),
        "{}",
        String::from_utf8_lossy(&check.stdout)
    );
    let sums = std::fs::read_to_string(rel.join("SHA256SUMS")).expect("read");
    assert_eq!(sums.lines().count(), 5, "{sums}");

    // A bad version is refused before anything is written.
    let o = tinkctl(
        &[
            "osie",
            "release",
            "--from",
            from.to_str().expect("utf8"),
            "--out",
            out.to_str().expect("utf8"),
            "--version",
            "../x",
        ],
        tmp.path(),
    );
    assert!(!o.status.success());
    assert!(stderr(&o).contains("--version \"../x\""), "{}", stderr(&o));
}

#[test]
fn the_default_version_is_git_describe_and_the_kernel() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let repo = tmp.path();
    let git = |args: &[&str]| {
        let o = Command::new("git")
            .args(["-c", "user.name=t", "-c", "user.email=t@example.org"])
            .args(args)
            .current_dir(repo)
            .output()
            .expect("git runs");
        assert!(o.status.success(), "git {args:?}: {}", stderr(&o));
        String::from_utf8_lossy(&o.stdout).trim().to_string()
    };
    git(&["init", "-q"]);
    std::fs::write(repo.join("README"), "x").expect("write");
    git(&["add", "README"]);
    git(&["commit", "-q", "-m", "first"]);
    let head = git(&["rev-parse", "--short", "HEAD"]);
    build_output(&repo.join("target/osie"), b"k", b"i", "6.1.0-56-amd64");
    // target/ is untracked: the tree is clean only if git ignores it.
    std::fs::write(repo.join(".gitignore"), "target/\n").expect("write");
    git(&["add", ".gitignore"]);
    git(&["commit", "-q", "-m", "ignore"]);
    let head2 = git(&["rev-parse", "--short", "HEAD"]);
    assert_ne!(head, head2);
    let o = tinkctl(&["osie", "release"], repo);
    assert!(o.status.success(), "{}", stderr(&o));
    let v = format!("{head2}-linux-6.1.0-56");
    assert!(
        repo.join("target/osie-releases")
            .join(&v)
            .join("SHA256SUMS")
            .exists(),
        "{v}"
    );
    // A modified tracked file marks the version dirty.
    std::fs::write(repo.join("README"), "changed").expect("write");
    let o = tinkctl(&["osie", "release"], repo);
    assert!(o.status.success(), "{}", stderr(&o));
    let dirty = format!("{head2}-dirty-linux-6.1.0-56");
    assert!(
        repo.join("target/osie-releases").join(&dirty).exists(),
        "{dirty}"
    );
}
