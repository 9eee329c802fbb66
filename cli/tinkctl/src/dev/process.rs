//! Starting, probing and stopping the stack's processes.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use rustix::process::{Pid, Signal};
use serde::{Deserialize, Serialize};

/// One running component, as recorded in the state file.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Component {
    /// e.g. `controller-0`.
    pub name: String,
    /// Its process id.
    pub pid: i32,
    /// The executable, to make sure `dev down` signals this process and not a reused pid.
    pub exe: PathBuf,
    /// The readiness URL (`http://host:port/path`).
    pub ready_url: String,
    /// Its log file.
    pub log: PathBuf,
}

/// A free loopback port (the kernel's choice; the socket is closed before the port is used).
pub fn free_port() -> anyhow::Result<u16> {
    let l = TcpListener::bind("127.0.0.1:0").context("finding a free loopback port")?;
    Ok(l.local_addr()?.port())
}

/// Starts `exe args` in its own process group (a Ctrl-C in the shell that ran `dev up` does not
/// reach it), output to `log`, with `env` added.
pub fn spawn(
    exe: &Path,
    args: &[String],
    env: &[(&str, String)],
    log: &Path,
) -> anyhow::Result<Child> {
    let out = std::fs::File::create(log).with_context(|| format!("creating {}", log.display()))?;
    let err = out.try_clone()?;
    let mut cmd = Command::new(exe);
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .process_group(0);
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.spawn()
        .with_context(|| format!("starting {}", exe.display()))
}

/// GET `url` (plain HTTP on loopback); the status code.
pub fn http_status(url: &str, timeout: Duration) -> anyhow::Result<u16> {
    let rest = url
        .strip_prefix("http://")
        .with_context(|| format!("{url}: only http:// is probed"))?;
    let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
    let addr: SocketAddr = authority
        .parse()
        .with_context(|| format!("{url}: expected an IP:port"))?;
    let mut s = TcpStream::connect_timeout(&addr, timeout)?;
    s.set_read_timeout(Some(timeout))?;
    s.set_write_timeout(Some(timeout))?;
    // One write: `write!` on the socket would send the request in pieces, and a server that
    // answers after its first read and closes would make the later pieces fail (EPIPE).
    let request = format!("GET /{path} HTTP/1.0\r\nHost: {authority}\r\nConnection: close\r\n\r\n");
    s.write_all(request.as_bytes())?;
    let mut head = [0u8; 12];
    s.read_exact(&mut head)?;
    let text = std::str::from_utf8(&head).unwrap_or_default();
    text.get(9..12)
        .and_then(|c| c.parse().ok())
        .with_context(|| format!("{url}: not an HTTP response"))
}

/// Whether `url` answers 200.
pub fn is_ready(url: &str) -> bool {
    matches!(http_status(url, Duration::from_millis(800)), Ok(200))
}

/// How a wait for readiness ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Started {
    /// It answered 200.
    Ready,
    /// It exited with this status code first.
    Exited(Option<i32>),
}

/// Waits until `url` answers 200 or the child exits; an error after `timeout`.
pub fn wait_ready(
    child: &mut Child,
    name: &str,
    url: &str,
    timeout: Duration,
) -> anyhow::Result<Started> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(Started::Exited(status.code()));
        }
        if is_ready(url) {
            return Ok(Started::Ready);
        }
        if Instant::now() > deadline {
            bail!(
                "{name} did not become ready at {url} within {}s",
                timeout.as_secs()
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Whether the process `pid` runs `exe` (so a recycled pid is never signalled).
pub fn is_ours(pid: i32, exe: &Path) -> bool {
    let Ok(actual) = std::fs::read_link(format!("/proc/{pid}/exe")) else {
        return false;
    };
    // A rebuilt binary shows as "<path> (deleted)".
    let actual = actual.to_string_lossy();
    let want = exe.to_string_lossy();
    actual == want || actual.strip_suffix(" (deleted)") == Some(&*want)
}

/// Whether `pid` is alive (and not a zombie).
pub fn is_alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit_once(')')
            .map(|(_, rest)| !rest.trim_start().starts_with('Z'))
            .unwrap_or(false),
        Err(_) => false,
    }
}

/// Sends `signal` to `pid`.
pub fn signal(pid: i32, signal: Signal) -> anyhow::Result<()> {
    let p = Pid::from_raw(pid).with_context(|| format!("invalid pid {pid}"))?;
    rustix::process::kill_process(p, signal).with_context(|| format!("signalling pid {pid}"))
}

/// Stops a component: SIGTERM, then SIGKILL after `grace`. Returns whether it had to be killed.
pub fn stop(c: &Component, grace: Duration) -> anyhow::Result<bool> {
    if !is_alive(c.pid) || !is_ours(c.pid, &c.exe) {
        return Ok(false);
    }
    signal(c.pid, Signal::TERM)?;
    let deadline = Instant::now() + grace;
    while Instant::now() < deadline {
        if !is_alive(c.pid) {
            return Ok(false);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    if is_alive(c.pid) && is_ours(c.pid, &c.exe) {
        signal(c.pid, Signal::KILL)?;
        return Ok(true);
    }
    Ok(false)
}

/// The last `n` lines of a log file (for error messages).
pub fn tail(path: &Path, n: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_started_process_is_recognised_and_stopped() {
        let dir = tempfile::tempdir().expect("tempdir");
        let exe = PathBuf::from("/bin/sleep");
        let exe = std::fs::canonicalize(&exe).expect("sleep");
        let mut child = spawn(&exe, &["30".into()], &[], &dir.path().join("log")).expect("spawn");
        let c = Component {
            name: "sleep".into(),
            pid: child.id() as i32,
            exe: exe.clone(),
            ready_url: String::new(),
            log: dir.path().join("log"),
        };
        assert!(is_alive(c.pid));
        assert!(is_ours(c.pid, &c.exe));
        assert!(!is_ours(c.pid, Path::new("/bin/true")));
        let reaper = std::thread::spawn(move || child.wait());
        assert!(
            !stop(&c, Duration::from_secs(5)).expect("stop"),
            "SIGTERM was enough"
        );
        reaper.join().expect("join").expect("wait");
        assert!(!is_alive(c.pid));
    }

    #[test]
    fn probes_an_http_endpoint() {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = l.local_addr().expect("addr");
        let t = std::thread::spawn(move || {
            let (mut s, _) = l.accept().expect("accept");
            // The whole request head, then the answer.
            let mut head = Vec::new();
            let mut buf = [0u8; 256];
            while !head.ends_with(b"\r\n\r\n") {
                match s.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => head.extend_from_slice(&buf[..n]),
                }
            }
            s.write_all(b"HTTP/1.1 503 Service Unavailable\r\n\r\n")
                .expect("write");
        });
        let code =
            http_status(&format!("http://{addr}/readyz"), Duration::from_secs(2)).expect("probe");
        assert_eq!(code, 503);
        t.join().expect("join");
        assert!(
            !is_ready(&format!("http://{addr}/readyz")),
            "nothing listens any more"
        );
    }
}
