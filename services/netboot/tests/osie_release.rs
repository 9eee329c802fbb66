//! Versioned OSIE releases against the real service (in this process, on loopback, kube-lite as
//! the API server): `--osie-dir` serves a release folder over HTTP and TFTP only after each file
//! matched `SHA256SUMS` (written by coreutils' `sha256sum`), and refuses files that do not
//! match or are not listed; `--osie-url` fetches a release once from another tink-netboot
//! serving a plain folder (its request counter says what was fetched), keeps it across
//! restarts, fetches a truncated cached file again, and never serves a file whose upstream
//! bytes do not match.

#[path = "../../hegel/tests/common/mod.rs"]
mod common;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::{Env, within};
use tink_netboot::NetbootConfig;
use tink_netboot::files::Root;
use tink_netboot::http::HotConfig;
use tink_netboot::osie::{FetchConfig, OsieConfig, OsieSource};
use tokio_util::sync::CancellationToken;

const V: &str = "c55ca67-linux-6.1.0-56";

fn pattern(len: usize, seed: usize) -> Vec<u8> {
    (0..len)
        .map(|i| ((i + seed).wrapping_mul(7919) >> 3) as u8 ^ (i >> 9) as u8)
        .collect()
}

fn curl(args: &[&str]) -> std::process::Output {
    Command::new("curl")
        .args(["-sS", "--max-time", "60"])
        .args(args)
        .output()
        .expect("curl runs")
}

/// GET `url`: status and body.
fn get(url: &str) -> (u16, Vec<u8>) {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("body");
    let r = curl(&[url, "-o", out.to_str().expect("utf8"), "-w", "%{http_code}"]);
    let code = String::from_utf8_lossy(&r.stdout)
        .trim()
        .parse()
        .unwrap_or(0);
    (code, std::fs::read(out).unwrap_or_default())
}

/// A release folder `dir/V` with fake artifacts and a manifest, `SHA256SUMS` by `sha256sum`.
fn make_release(dir: &Path) -> (Vec<u8>, Vec<u8>) {
    let rel = dir.join(V);
    std::fs::create_dir_all(&rel).expect("mkdir");
    let kernel = pattern(300_000 + 7, 1);
    let initramfs = pattern(2_000_000 + 11, 2);
    std::fs::write(rel.join("vmlinuz-x86_64"), &kernel).expect("write");
    std::fs::write(rel.join("initramfs-x86_64"), &initramfs).expect("write");
    std::fs::write(rel.join("osie.json"), format!("{{\"version\":\"{V}\"}}\n")).expect("write");
    let out = Command::new("sha256sum")
        .args(["vmlinuz-x86_64", "initramfs-x86_64", "osie.json"])
        .current_dir(&rel)
        .output()
        .expect("sha256sum runs");
    assert!(out.status.success());
    std::fs::write(rel.join("SHA256SUMS"), out.stdout).expect("write");
    (kernel, initramfs)
}

struct Running {
    http: SocketAddr,
    tftp: SocketAddr,
    health: tink_runtime::Health,
    metrics: tink_netboot::Metrics,
    shutdown: CancellationToken,
    task: tokio::task::JoinHandle<Result<(), tink_netboot::Error>>,
}

impl Running {
    fn url(&self, path: &str) -> String {
        format!("http://{}/{path}", self.http)
    }

    async fn ready(&self) {
        within("netboot to become ready", async {
            while !self.health.is_ready() {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await;
    }

    async fn stop(self) {
        self.shutdown.cancel();
        within("netboot to stop", self.task)
            .await
            .expect("no panic")
            .expect("clean stop");
    }
}

async fn start(env: &Env, files: &Path, osie: OsieSource) -> Running {
    let mut config = NetbootConfig::new(
        "127.0.0.1".parse().expect("ip"),
        "http://127.0.0.1:50061/ipxe/script/auto.ipxe".into(),
        files.to_path_buf(),
    );
    config.dhcp = None;
    if let Some((addr, tc)) = config.tftp.as_mut() {
        *addr = "127.0.0.1:0".parse().expect("addr");
        tc.timeout = Duration::from_secs(1);
        tc.retries = 2;
    }
    config.http = Some("127.0.0.1:0".parse().expect("addr"));
    config.osie = Some(OsieConfig {
        source: osie,
        retry_min: Duration::from_millis(200),
        retry_max: Duration::from_secs(1),
    });
    let bound = tink_netboot::bind(&config).await.expect("bind");
    let http = bound.http_addr().expect("http");
    let tftp = bound.tftp_addr().expect("tftp");
    let metrics = tink_netboot::Metrics::default();
    let health = tink_runtime::Health::new();
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(bound.run(
        config,
        env.client.clone(),
        health.clone(),
        metrics.clone(),
        tink_netboot::IndexMetrics::default(),
        shutdown.clone(),
    ));
    Running {
        http,
        tftp,
        health,
        metrics,
        shutdown,
        task,
    }
}

/// The release server: tink-netboot's HTTP file server over a plain folder, whose metrics
/// count the GETs it answered.
async fn upstream(dir: &Path) -> (String, tink_netboot::Metrics, CancellationToken) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let metrics = tink_netboot::Metrics::default();
    let stop = CancellationToken::new();
    tokio::spawn(tink_netboot::http::serve_with(
        listener,
        Root::new(dir).expect("root"),
        metrics.clone(),
        None,
        HotConfig::mib(0),
        stop.clone(),
    ));
    (format!("http://{addr}"), metrics, stop)
}

fn upstream_gets(m: &tink_netboot::Metrics) -> u64 {
    m.http_of("GET", 200)
}

fn files_dir(outer: &Path) -> PathBuf {
    let files = outer.join("files");
    std::fs::create_dir_all(&files).expect("mkdir");
    files
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_folder_is_served_only_as_its_sums_say() {
    let env = Env::new().await;
    let outer = tempfile::tempdir().expect("tempdir");
    let releases = outer.path().join("releases");
    let (kernel, initramfs) = make_release(&releases);
    let rel = releases.join(V);
    std::fs::write(rel.join("extra.bin"), b"not listed").expect("write");
    // A release whose SHA256SUMS names a path: nothing of it is served.
    std::fs::create_dir_all(releases.join("bad")).expect("mkdir");
    std::fs::write(
        releases.join("bad/SHA256SUMS"),
        format!("{}  ../files/secret\n", "0".repeat(64)),
    )
    .expect("write");
    std::fs::write(releases.join("bad/x"), b"x").expect("write");

    let n = start(
        &env,
        &files_dir(outer.path()),
        OsieSource::Dir {
            dir: releases.clone(),
            required: Some(V.into()),
        },
    )
    .await;
    n.ready().await;

    let (code, body) = get(&n.url(&format!("osie/{V}/vmlinuz-x86_64")));
    assert_eq!(code, 200);
    assert!(body == kernel, "kernel differs");
    let (code, body) = get(&n.url(&format!("osie/{V}/initramfs-x86_64")));
    assert_eq!(code, 200);
    assert!(body == initramfs, "initramfs differs");
    // A range, as iPXE resumes with: the same file path, the same check.
    let out = outer.path().join("range.out");
    let r = curl(&[
        "-r",
        "1000-1999",
        &n.url(&format!("osie/{V}/initramfs-x86_64")),
        "-o",
        out.to_str().expect("utf8"),
        "-w",
        "%{http_code}",
    ]);
    assert_eq!(String::from_utf8_lossy(&r.stdout), "206");
    assert!(std::fs::read(&out).expect("read") == initramfs[1000..2000]);
    let (code, body) = get(&n.url(&format!("osie/{V}/SHA256SUMS")));
    assert_eq!(code, 200);
    assert_eq!(body, std::fs::read(rel.join("SHA256SUMS")).expect("read"));
    // TFTP serves the same bytes through the same check.
    let out = outer.path().join("tftp.out");
    let r = curl(&[
        &format!("tftp://{}/osie/{V}/vmlinuz-x86_64", n.tftp),
        "-o",
        out.to_str().expect("utf8"),
    ]);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    assert!(std::fs::read(&out).expect("read") == kernel);

    // Not listed: refused, saying why.
    let (code, body) = get(&n.url(&format!("osie/{V}/extra.bin")));
    assert_eq!(code, 403);
    let text = String::from_utf8_lossy(&body);
    assert!(text.contains("not listed in osie/"), "{text}");
    assert!(n.metrics.osie_verify_failures_of("not_listed") >= 1);
    // A SHA256SUMS with a path in it: refused with its line.
    let (code, body) = get(&n.url("osie/bad/x"));
    assert_eq!(code, 403);
    let text = String::from_utf8_lossy(&body);
    assert!(text.contains("bad/SHA256SUMS line 1"), "{text}");
    assert!(text.contains("one path component"), "{text}");
    // Outside the release names: refused or absent, never the folder's other files.
    let (code, _) = get(&n.url(&format!("osie/{V}")));
    assert_eq!(code, 404);

    // The kernel rewritten with other bytes of the same length: refused by HTTP and TFTP, the
    // message naming the file, the expected and the actual digest.
    let mut bad = kernel.clone();
    bad[1000] ^= 0xff;
    std::fs::write(rel.join("vmlinuz-x86_64"), &bad).expect("write");
    let expected = sha256(&kernel);
    let got = sha256(&bad);
    let (code, body) = get(&n.url(&format!("osie/{V}/vmlinuz-x86_64")));
    assert_eq!(code, 403);
    let text = String::from_utf8_lossy(&body);
    assert!(
        text.contains(&format!("osie/{V}/vmlinuz-x86_64"))
            && text.contains(&format!("expected {expected}"))
            && text.contains(&format!("got {got}")),
        "{text}"
    );
    assert!(n.metrics.osie_verify_failures_of("mismatch") >= 1);
    let r = curl(&[
        &format!("tftp://{}/osie/{V}/vmlinuz-x86_64", n.tftp),
        "-o",
        out.to_str().expect("utf8"),
    ]);
    assert!(!r.status.success(), "TFTP refuses it too");
    // Put back: served again.
    std::fs::write(rel.join("vmlinuz-x86_64"), &kernel).expect("write");
    let (code, body) = get(&n.url(&format!("osie/{V}/vmlinuz-x86_64")));
    assert_eq!(code, 200);
    assert!(body == kernel);
    n.stop().await;
}

fn sha256(bytes: &[u8]) -> String {
    let dir = tempfile::tempdir().expect("tempdir");
    let p = dir.path().join("f");
    std::fs::write(&p, bytes).expect("write");
    let out = Command::new("sha256sum")
        .arg(&p)
        .output()
        .expect("sha256sum");
    String::from_utf8_lossy(&out.stdout)[..64].to_string()
}

fn url_source(url: &str, cache: &Path) -> OsieSource {
    OsieSource::Url(FetchConfig {
        url: url.to_string(),
        version: V.into(),
        cache: cache.to_path_buf(),
        ca_cert: None,
        timeout: Duration::from_secs(10),
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_url_is_fetched_once_verified_and_cached() {
    let env = Env::new().await;
    let outer = tempfile::tempdir().expect("tempdir");
    let up_dir = outer.path().join("upstream");
    let (kernel, initramfs) = make_release(&up_dir);
    std::fs::write(up_dir.join(V).join("extra.bin"), b"not listed").expect("write");
    let (url, up, up_stop) = upstream(&up_dir).await;
    let cache = outer.path().join("cache");
    let files = files_dir(outer.path());

    // First start: SHA256SUMS and its three files, one GET each.
    let n = start(&env, &files, url_source(&url, &cache)).await;
    n.ready().await;
    assert_eq!(upstream_gets(&up), 4);
    assert_eq!(n.metrics.osie_fetches_of("ok"), 4);
    let (code, body) = get(&n.url(&format!("osie/{V}/initramfs-x86_64")));
    assert_eq!(code, 200);
    assert!(body == initramfs);
    // A file upstream has but the release does not list is neither fetched nor served.
    let (code, body) = get(&n.url(&format!("osie/{V}/extra.bin")));
    assert_eq!(code, 403);
    assert!(String::from_utf8_lossy(&body).contains("not listed"));
    assert!(!cache.join(V).join("extra.bin").exists());
    n.stop().await;

    // Restart with the complete cache: nothing fetched.
    let n = start(&env, &files, url_source(&url, &cache)).await;
    n.ready().await;
    assert_eq!(upstream_gets(&up), 4, "a restart fetches nothing");
    let (code, body) = get(&n.url(&format!("osie/{V}/vmlinuz-x86_64")));
    assert_eq!(code, 200);
    assert!(body == kernel);
    // A file dropped into the cache that the release does not list: refused.
    std::fs::write(cache.join(V).join("extra.bin"), b"planted").expect("write");
    let (code, body) = get(&n.url(&format!("osie/{V}/extra.bin")));
    assert_eq!(code, 403, "{}", String::from_utf8_lossy(&body));
    n.stop().await;

    // A partial cached file (an interrupted copy): fetched again, that file only.
    let cached = cache.join(V).join("initramfs-x86_64");
    std::fs::write(&cached, &initramfs[..initramfs.len() / 2]).expect("write");
    let n = start(&env, &files, url_source(&url, &cache)).await;
    n.ready().await;
    assert_eq!(
        upstream_gets(&up),
        5,
        "only the partial file is fetched again"
    );
    assert!(std::fs::read(&cached).expect("read") == initramfs);
    let (code, body) = get(&n.url(&format!("osie/{V}/initramfs-x86_64")));
    assert_eq!(code, 200);
    assert!(body == initramfs);
    n.stop().await;
    up_stop.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupt_upstream_file_is_never_served_and_retried() {
    let env = Env::new().await;
    let outer = tempfile::tempdir().expect("tempdir");
    let up_dir = outer.path().join("upstream");
    let (kernel, _) = make_release(&up_dir);
    let up_kernel = up_dir.join(V).join("vmlinuz-x86_64");
    let mut bad = kernel.clone();
    bad[5] ^= 1;
    std::fs::write(&up_kernel, &bad).expect("write");
    let (url, _up, up_stop) = upstream(&up_dir).await;
    let cache = outer.path().join("cache");

    let n = start(&env, &files_dir(outer.path()), url_source(&url, &cache)).await;
    within("the mismatch to be seen", async {
        while n.metrics.osie_fetches_of("mismatch") == 0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(n.metrics.osie_verify_failures_of("upstream_mismatch") >= 1);
    assert!(!n.health.is_ready(), "not ready without the whole release");
    // The bad bytes never reach the served name, and no temporary file is left to serve.
    assert!(!cache.join(V).join("vmlinuz-x86_64").exists());
    let (code, _) = get(&n.url(&format!("osie/{V}/vmlinuz-x86_64")));
    assert_eq!(code, 404);
    let (code, _) = get(&n.url(&format!("osie/{V}/.vmlinuz-x86_64.part")));
    assert_eq!(code, 403);

    // Upstream fixed: the retry fetches it and the service turns ready.
    std::fs::write(&up_kernel, &kernel).expect("write");
    n.ready().await;
    let (code, body) = get(&n.url(&format!("osie/{V}/vmlinuz-x86_64")));
    assert_eq!(code, 200);
    assert!(body == kernel);
    n.stop().await;
    up_stop.cancel();
}
