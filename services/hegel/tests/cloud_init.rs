//! Debian's cloud-init crawls Hegel with its own EC2 code, from a network namespace whose
//! address a Hardware owns: the version probe DataSourceEc2 makes (newest first, falling back
//! to 2009-04-04), then user-data, then the meta-data tree (`cloudinit.sources.helpers.ec2`).
//!
//! Needs root (`ip netns`), iproute2 and the `cloud-init` package (`/usr/bin/python3` with
//! `cloudinit`); without them the test says why and passes without crawling.

mod common;
#[path = "common/server.rs"]
mod server;

use std::process::Command;

use common::{Env, NS};
use kube::api::PostParams;
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

const CRAWLER: &str = r#"
import json, sys
from cloudinit import url_helper
from cloudinit.sources.DataSourceEc2 import DataSourceEc2
from cloudinit.sources.helpers import ec2

base = sys.argv[1]
probed = []
version = None
for v in DataSourceEc2.extended_metadata_versions + [DataSourceEc2.min_metadata_version]:
    try:
        resp = url_helper.readurl(url="%s/%s/meta-data/instance-id" % (base, v), retries=0)
        probed.append([v, resp.code])
        if resp.code == 200:
            version = v
            break
    except url_helper.UrlError as e:
        probed.append([v, e.code])
user = ec2.get_instance_userdata(version, base, retries=0)
meta = ec2.get_instance_metadata(version, base, retries=0)
print(json.dumps({"probed": probed, "version": version,
                  "user": user.decode("utf-8") if isinstance(user, bytes) else user,
                  "meta": meta}))
"#;

/// The same crawl as cloud-init does it on a platform it takes for AWS: an IMDSv2 token first
/// (`DataSourceEc2._maybe_fetch_api_token`, a PUT), then every read with the token header
/// (`_get_headers`); then a forged token is refused with 401.
const CRAWLER_V2: &str = r#"
import json, sys
from cloudinit import helpers, url_helper
from cloudinit.sources.DataSourceEc2 import DataSourceEc2, CloudNames
from cloudinit.sources.helpers import ec2

base = sys.argv[1]
ds = DataSourceEc2(sys_cfg={}, distro=None, paths=helpers.Paths({}))
ds._cloud_name = CloudNames.AWS
ds.ds_cfg = {"timeout": 2, "max_wait": 4}
got_base = ds._maybe_fetch_api_token([base])
token = ds._api_token
token = token.decode("utf-8") if isinstance(token, bytes) else token
headers = ds._get_headers()
meta = ec2.get_instance_metadata("2009-04-04", base, headers_cb=ds._get_headers, retries=0)
forged = None
try:
    url_helper.readurl(url="%s/2009-04-04/meta-data/instance-id" % base, retries=0,
                       headers={"X-aws-ec2-metadata-token": "hegel1.99999999999.10-9-9-9"})
except url_helper.UrlError as e:
    forged = e.code
print(json.dumps({"base": got_base, "token": token, "headers": list(headers.keys()),
                  "meta": meta, "forged": forged}))
"#;

struct Netns {
    name: String,
}

impl Drop for Netns {
    fn drop(&mut self) {
        // Deleting the namespace deletes the veth pair too.
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .status();
    }
}

fn sh(args: &[&str]) -> Result<(), String> {
    let out = Command::new(args[0])
        .args(&args[1..])
        .output()
        .map_err(|e| format!("{}: {e}", args.join(" ")))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// A namespace `hegel-ci-<pid>` linked to the host by a veth pair: host `10.213.N.1`,
/// namespace `10.213.N.2`.
fn netns() -> Result<(Netns, String, String), String> {
    let pid = std::process::id();
    let n = pid % 250 + 1;
    let ns = Netns {
        name: format!("hegel-ci-{pid}"),
    };
    let (host_if, ns_if) = (format!("hgh{pid}"), format!("hgn{pid}"));
    let (host_ip, ns_ip) = (format!("10.213.{n}.1"), format!("10.213.{n}.2"));
    sh(&["ip", "netns", "add", &ns.name])?;
    sh(&[
        "ip", "link", "add", &host_if, "type", "veth", "peer", "name", &ns_if,
    ])?;
    sh(&["ip", "link", "set", &ns_if, "netns", &ns.name])?;
    sh(&[
        "ip",
        "addr",
        "add",
        &format!("{host_ip}/24"),
        "dev",
        &host_if,
    ])?;
    sh(&["ip", "link", "set", &host_if, "up"])?;
    let exec = |cmd: &[&str]| {
        let mut full = vec!["ip", "netns", "exec", ns.name.as_str()];
        full.extend_from_slice(cmd);
        sh(&full)
    };
    exec(&["ip", "addr", "add", &format!("{ns_ip}/24"), "dev", &ns_if])?;
    exec(&["ip", "link", "set", &ns_if, "up"])?;
    exec(&["ip", "link", "set", "lo", "up"])?;
    Ok((ns, host_ip, ns_ip))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cloud_inits_ec2_crawler_reads_its_machine() {
    let has_cloud_init = Command::new("/usr/bin/python3")
        .args(["-c", "import cloudinit.sources.helpers.ec2"])
        .status()
        .is_ok_and(|s| s.success());
    // On a developer's machine without root or cloud-init the test says so and passes; in CI
    // (CI set, scripts/install-deps.sh run as root) it must run.
    let must_run = std::env::var_os("CI").is_some();
    if !has_cloud_init {
        assert!(
            !must_run,
            "Debian's cloud-init is not installed (scripts/install-deps.sh installs it)"
        );
        eprintln!("SKIPPED: Debian's cloud-init is not installed (apt-get install cloud-init)");
        return;
    }
    let (ns, host_ip, ns_ip) = match netns() {
        Ok(n) => n,
        Err(e) => {
            assert!(!must_run, "cannot create a network namespace: {e}");
            eprintln!("SKIPPED: cannot create a network namespace (needs root): {e}");
            return;
        }
    };

    let env = Env::new().await;
    // A machine migrated from v1alpha1 (its instance id and SSH keys live in the conversion
    // annotation), created through v1alpha2 as the conversion webhook stores it.
    let user_data = "#cloud-config\nruncmd:\n  - [sh, -c, 'echo crawled > /tmp/x']\n";
    let old: tink_api::v1alpha1::Hardware = serde_json::from_value(json!({
        "apiVersion": "tinkerbell.org/v1alpha1", "kind": "Hardware",
        "metadata": {"name": "crawled", "namespace": NS},
        "spec": {
            "interfaces": [{"dhcp": {"mac": "02:00:00:00:0a:02", "hostname": "crawled-host",
                                     "ip": {"address": ns_ip, "netmask": "255.255.255.0"}}}],
            "userData": user_data,
            "metadata": {"instance": {"id": "i-0123456789", "ssh_keys": ["ssh-ed25519 AAAAC3Nza crawl@test"]}}
        }
    }))
    .expect("v1alpha1 Hardware");
    let new = tink_api::conversion::hardware_to_v1alpha2(&old);
    env.hardware_api()
        .create(&PostParams::default(), &new)
        .await
        .expect("create Hardware");
    let hegel = env.hegel_at(&format!("{host_ip}:0"), |_| {}).await;

    let base = format!("http://{}", hegel.addr);
    let out = tokio::process::Command::new("ip")
        .args([
            "netns",
            "exec",
            &ns.name,
            "/usr/bin/python3",
            "-c",
            CRAWLER,
            &base,
        ])
        .output()
        .await
        .expect("run the crawler");
    assert!(
        out.status.success(),
        "crawler failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let got: Value = serde_json::from_slice(&out.stdout).expect("crawler JSON");
    assert_eq!(
        got["probed"],
        json!([
            ["2021-03-23", 404],
            ["2018-09-24", 404],
            ["2016-09-02", 404],
            ["2009-04-04", 200]
        ])
    );
    assert_eq!(got["user"], json!(user_data));
    assert_eq!(
        got["meta"],
        json!({
            "hostname": "crawled-host",
            "instance-id": "i-0123456789",
            "local-hostname": "crawled-host",
            "local-ipv4": ns_ip,
            "mac": "02:00:00:00:0a:02",
            "public-keys": {"key-0": "ssh-ed25519 AAAAC3Nza crawl@test"},
        })
    );

    // IMDSv2, as cloud-init crawls where it believes it is on AWS.
    let out = tokio::process::Command::new("ip")
        .args([
            "netns",
            "exec",
            &ns.name,
            "/usr/bin/python3",
            "-c",
            CRAWLER_V2,
            &base,
        ])
        .output()
        .await
        .expect("run the IMDSv2 crawler");
    assert!(
        out.status.success(),
        "IMDSv2 crawler failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let got: Value = serde_json::from_slice(&out.stdout).expect("crawler JSON");
    assert_eq!(got["base"], json!(base), "the token request succeeded");
    assert!(
        got["token"]
            .as_str()
            .is_some_and(|t| t.starts_with("hegel1.")),
        "{got}"
    );
    assert_eq!(got["headers"], json!(["X-aws-ec2-metadata-token"]));
    assert_eq!(got["meta"]["instance-id"], json!("i-0123456789"));
    assert_eq!(
        got["forged"],
        json!(401),
        "a token for another address is refused"
    );
    hegel.stop().await;
    env.stop().await;
    drop(ns);
}
