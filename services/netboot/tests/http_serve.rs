//! The HTTP file server on loopback (`http::serve_with`, no API server needed), fetched with
//! curl: files kept in memory and files streamed from disk answer GET, HEAD, a `Range` (206)
//! and an unsatisfiable one (416) alike and byte for byte; a file replaced on disk is served
//! new at once; concurrent downloads of a file being loaded all arrive intact.

use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;

use tink_netboot::files::Root;
use tink_netboot::http::{self, HotConfig};
use tokio_util::sync::CancellationToken;

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

async fn start(
    dir: &Path,
    hot: HotConfig,
) -> (SocketAddr, CancellationToken, tink_netboot::Metrics) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let stop = CancellationToken::new();
    let metrics = tink_netboot::Metrics::default();
    tokio::spawn(http::serve_with(
        listener,
        Root::new(dir).expect("root"),
        metrics.clone(),
        None,
        hot,
        stop.clone(),
    ));
    (addr, stop, metrics)
}

/// GET (twice: the load and the kept copy), HEAD, ranges and 416 of `name`, which holds `want`.
async fn check_file(addr: SocketAddr, name: &str, want: &[u8], out: &Path) {
    let url = format!("http://{addr}/{name}");
    let out_s = out.to_str().expect("utf8");
    for round in 0..2 {
        let r = curl(&["-f", &url, "-o", out_s]);
        assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
        assert!(
            std::fs::read(out).expect("read") == want,
            "{name}: GET {round} differs"
        );
    }
    let r = curl(&["-f", "-I", &url]);
    let head = String::from_utf8_lossy(&r.stdout).to_lowercase();
    assert!(head.starts_with("http/1.1 200"), "{head}");
    assert!(
        head.contains(&format!("content-length: {}", want.len())),
        "{head}"
    );
    assert!(head.contains("accept-ranges: bytes"), "{head}");
    let len = want.len();
    for (spec, a, b) in [
        ("100-199".to_string(), 100, 199),
        (format!("{}-", len - 10), len - 10, len - 1),
        ("-5".to_string(), len - 5, len - 1),
        (format!("1000-{}", len * 2), 1000, len - 1),
    ] {
        let r = curl(&[
            "-r",
            &spec,
            &url,
            "-o",
            out_s,
            "-D",
            "-",
            "-w",
            "%{http_code}",
        ]);
        let text = String::from_utf8_lossy(&r.stdout).to_lowercase();
        assert!(text.ends_with("206"), "{name} {spec}: {text}");
        assert!(
            text.contains(&format!("content-range: bytes {a}-{b}/{len}")),
            "{name} {spec}: {text}"
        );
        assert!(
            std::fs::read(out).expect("read") == want[a..=b],
            "{name} {spec}: body"
        );
    }
    let r = curl(&[
        "-r",
        &format!("{len}-"),
        &url,
        "-o",
        "/dev/null",
        "-D",
        "-",
        "-w",
        "%{http_code}",
    ]);
    let text = String::from_utf8_lossy(&r.stdout).to_lowercase();
    assert!(text.ends_with("416"), "{text}");
    assert!(
        text.contains(&format!("content-range: bytes */{len}")),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kept_and_streamed_files_answer_alike() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("root");
    std::fs::create_dir(&root).expect("mkdir");
    // 1 MiB is kept (files up to 2 MiB), 3 MiB is streamed in several chunks.
    let small = pattern(1 << 20, 1);
    let large = pattern(3 * (1 << 20) + 17, 2);
    std::fs::write(root.join("small.bin"), &small).expect("write");
    std::fs::write(root.join("large.bin"), &large).expect("write");
    let (addr, stop, metrics) = start(
        &root,
        HotConfig {
            max_bytes: 4 << 20,
            max_file_bytes: 2 << 20,
        },
    )
    .await;
    let out = dir.path().join("out");
    check_file(addr, "small.bin", &small, &out).await;
    // Read in by the first GET, then kept: the second GET and the 4 ranges are hits.
    assert_eq!(metrics.http_bodies_from("loaded"), 1);
    assert_eq!(metrics.http_bodies_from("hit"), 5);
    assert_eq!(metrics.http_bodies_from("disk"), 0);
    check_file(addr, "large.bin", &large, &out).await;
    assert_eq!(metrics.http_bodies_from("disk"), 6, "too large to keep");

    // Replaced (a new file renamed over it) and rewritten in place with another length: the
    // next GET has the new bytes.
    let newer = pattern((1 << 20) - 3, 3);
    std::fs::write(root.join("tmp"), &newer).expect("write");
    std::fs::rename(root.join("tmp"), root.join("small.bin")).expect("rename");
    check_file(addr, "small.bin", &newer, &out).await;
    let rewritten = pattern(500_000, 4);
    std::fs::write(root.join("small.bin"), &rewritten).expect("write");
    check_file(addr, "small.bin", &rewritten, &out).await;
    stop.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_first_downloads_arrive_intact() {
    let dir = tempfile::tempdir().expect("tempdir");
    let want = pattern(5 << 20, 5);
    std::fs::write(dir.path().join("initramfs"), &want).expect("write");
    let (addr, stop, metrics) = start(dir.path(), HotConfig::default()).await;
    let url = format!("http://{addr}/initramfs");
    let mut tasks = Vec::new();
    for i in 0..12 {
        let (url, out) = (url.clone(), dir.path().join(format!("out{i}")));
        tasks.push(tokio::task::spawn_blocking(move || {
            let r = curl(&["-f", &url, "-o", out.to_str().expect("utf8")]);
            assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
            std::fs::read(out).expect("read")
        }));
    }
    for t in tasks {
        assert!(t.await.expect("no panic") == want, "a download differs");
    }
    assert_eq!(metrics.http_bodies_from("loaded"), 1, "read in once");
    assert_eq!(
        metrics.http_bodies_from("hit") + metrics.http_bodies_from("disk"),
        11
    );
    stop.cancel();
}
