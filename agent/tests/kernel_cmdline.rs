//! The agent booted by Hegel's iPXE script: started with no flags but the kernel command line
//! the script produces, it finds the server (its presence names the replica).
#![forbid(unsafe_code)]

mod common;

use std::process::Stdio;
use std::sync::Arc;

use common::*;
use serde_json::json;
use tink_testkit::docker::engine_or_skip;
use tink_testkit::nats::NatsServer;

/// The kernel parameters of the `kernel` line of Hegel's script for a Hardware with MAC `mac`
/// whose server is `authority` (plain HTTP/2, as the test replica).
fn hegel_kernel_cmdline(mac: &str, authority: &str) -> Result<String, BoxError> {
    let hw: tink_api::v1alpha2::Hardware = serde_json::from_value(json!({
        "apiVersion": "tinkerbell.org/v1alpha2", "kind": "Hardware",
        "metadata": {"name": "m1", "namespace": "machines"},
        "spec": {"networkInterfaces": {mac: {"dhcp": {"ip": "10.0.0.10"}}},
                 "osie": {"osieRef": {"name": "hook"}, "kernelParams": ["quiet"]}},
    }))?;
    let machine = hegel::machine::Machine::from_hardware(&hw);
    let mut config = hegel::IpxeConfig::new(authority);
    config.tinkerbell_tls = false;
    config.syslog_host = Some("127.0.0.1".into());
    let osie = tink_api::v1alpha2::OsieSpec {
        kernel_url: Some("http://127.0.0.1:8080/vmlinuz".into()),
        initrd_url: Some("http://127.0.0.1:8080/initramfs".into()),
    };
    let script = hegel::ipxe::script(&machine, 0, |_| Some(Arc::new(osie)), &config)?;
    let kernel = script
        .lines()
        .find(|l| l.starts_with("kernel "))
        .ok_or("the script has no kernel line")?;
    // `kernel <url> <params...> && goto ...`: iPXE passes the words between the URL and the
    // first operator to the kernel, joined by spaces.
    let params: Vec<&str> = kernel
        .split_whitespace()
        .skip(2)
        .take_while(|w| *w != "&&" && *w != "||")
        .collect();
    Ok(format!("BOOT_IMAGE=vmlinuz {}\n", params.join(" ")))
}

#[tokio::test]
async fn agent_finds_the_server_from_hegels_kernel_command_line() -> TestResult {
    let Some(_docker) = engine_or_skip().await? else {
        return Ok(());
    };
    let nats = NatsServer::start().await?;
    let server = Replica::start(&nats.url(), "server-a").await?;
    let js = jetstream(&nats.url()).await?;
    let work = tempfile::tempdir()?;
    let mac = "02:00:00:00:0c:01";
    let cmdline = hegel_kernel_cmdline(mac, &server.addr.to_string())?;
    assert!(
        cmdline.contains(&format!(
            "worker_id={mac} hw_addr={mac} grpc_authority={}",
            server.addr
        )),
        "{cmdline}"
    );
    let path = work.path().join("cmdline");
    std::fs::write(&path, &cmdline)?;

    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_tink-agent"))
        .arg("--kernel-cmdline")
        .arg(&path)
        .arg("--work-dir")
        .arg(work.path())
        .args(["--privileged", "false", "--admin-addr", "127.0.0.1:0"])
        .env("RUST_LOG", "info")
        .env_remove("TINK_AGENT_ID")
        .env_remove("TINK_AGENT_SERVERS")
        .env_remove("TINK_AGENT_TLS_CA")
        .env_remove("TINK_AGENT_INSECURE")
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()?;
    // The agent id is worker_id, the server grpc_authority, plain HTTP/2 (tinkerbell_tls=false).
    wait_presence(&js, mac, "server-a").await?;

    let pid = child.id().ok_or("the agent already exited")?;
    let status = tokio::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .await?;
    assert!(status.success());
    let exit = within("the agent to exit", child.wait()).await??;
    assert!(exit.success(), "{exit}");
    server.stop().await?;
    Ok(())
}

#[tokio::test]
async fn no_server_anywhere_is_a_clear_error() -> TestResult {
    let work = tempfile::tempdir()?;
    let path = work.path().join("cmdline");
    std::fs::write(&path, "BOOT_IMAGE=vmlinuz quiet\n")?;
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_tink-agent"))
        .arg("--kernel-cmdline")
        .arg(&path)
        .args([
            "--agent-id",
            "02:00:00:00:0c:02",
            "--admin-addr",
            "127.0.0.1:0",
        ])
        .arg("--work-dir")
        .arg(work.path())
        .env_remove("TINK_AGENT_SERVERS")
        .output()
        .await?;
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("no --server (TINK_AGENT_SERVERS) given and no grpc_authority= on the kernel command line"),
        "{err}"
    );
    std::fs::write(&path, "grpc_authority=nohost tinkerbell_tls=true\n")?;
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_tink-agent"))
        .arg("--kernel-cmdline")
        .arg(&path)
        .args([
            "--agent-id",
            "02:00:00:00:0c:02",
            "--admin-addr",
            "127.0.0.1:0",
        ])
        .arg("--work-dir")
        .arg(work.path())
        .env_remove("TINK_AGENT_SERVERS")
        .output()
        .await?;
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("kernel command line grpc_authority=\"nohost\""),
        "{err}"
    );
    Ok(())
}
