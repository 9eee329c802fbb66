//! The kernel command line of an OSIE booted by Tinkerbell's iPXE script (Smee's or Hegel's):
//! `worker_id`, `hw_addr`, `grpc_authority`, `tinkerbell_tls`, `tinkerbell_insecure_tls`,
//! `syslog_host`, ... The agent reads them from `/proc/cmdline` for the values its flags and
//! environment do not give (agent/README.md has the mapping), so an unchanged HookOS-style OSIE
//! finds the server.

use std::path::Path;

use crate::config::ServerAddress;

/// A parsed kernel command line.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KernelCmdline {
    params: Vec<(String, Option<String>)>,
}

/// A kernel command-line value the agent cannot use.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("kernel command line {name}={value:?}: {reason}")]
pub struct CmdlineError {
    /// The parameter name.
    pub name: String,
    /// Its value.
    pub value: String,
    /// What is wrong.
    pub reason: String,
}

/// What the kernel command line says about the agent's settings.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CmdlineSettings {
    /// `worker_id`, else `hw_addr`.
    pub agent_id: Option<String>,
    /// `grpc_authority` (comma-separated addresses allowed).
    pub servers: Vec<ServerAddress>,
    /// `tinkerbell_tls`.
    pub tls: Option<bool>,
    /// `tinkerbell_insecure_tls`.
    pub insecure_tls: Option<bool>,
    /// `syslog_host` (not used by the agent; reported).
    pub syslog_host: Option<String>,
    /// `tink_agent_secret`: the machine's boot secret (single-use: exchanged for a session at the
    /// first connect), when its Hardware names one (never logged).
    pub agent_secret: Option<String>,
}

impl KernelCmdline {
    /// Parses a command line as Linux does: whitespace separates parameters, double quotes
    /// group (`name="a b"`) and are removed.
    pub fn parse(text: &str) -> Self {
        let mut params = Vec::new();
        let mut current = String::new();
        let mut quoted = false;
        let mut any = false;
        for c in text.chars() {
            match c {
                '"' => {
                    quoted = !quoted;
                    any = true;
                }
                c if c.is_whitespace() && !quoted => {
                    if any {
                        params.push(split(std::mem::take(&mut current)));
                        any = false;
                    }
                }
                c => {
                    current.push(c);
                    any = true;
                }
            }
        }
        if any {
            params.push(split(current));
        }
        Self { params }
    }

    /// Reads and parses `path` (`/proc/cmdline`); a missing file is an empty command line.
    pub fn read(path: &Path) -> std::io::Result<Self> {
        match std::fs::read_to_string(path) {
            Ok(text) => Ok(Self::parse(&text)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Self::default()),
            Err(e) => Err(e),
        }
    }

    /// The value of the last `name=value` (the kernel and the OSIE take the last one too).
    /// A bare `name` has no value.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.params
            .iter()
            .rev()
            .find(|(n, _)| n == name)
            .and_then(|(_, v)| v.as_deref())
    }

    fn non_empty(&self, name: &str) -> Option<&str> {
        self.get(name).map(str::trim).filter(|v| !v.is_empty())
    }

    fn boolean(&self, name: &str) -> Result<Option<bool>, CmdlineError> {
        let Some(v) = self.non_empty(name) else {
            return Ok(None);
        };
        match v.to_ascii_lowercase().as_str() {
            "true" | "1" | "yes" | "on" => Ok(Some(true)),
            "false" | "0" | "no" | "off" => Ok(Some(false)),
            _ => Err(CmdlineError {
                name: name.to_owned(),
                value: v.to_owned(),
                reason: "expected true or false".into(),
            }),
        }
    }

    /// The agent's settings from Smee's parameter names.
    pub fn settings(&self) -> Result<CmdlineSettings, CmdlineError> {
        let servers = match self.non_empty("grpc_authority") {
            None => Vec::new(),
            Some(list) => list
                .split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(|s| {
                    s.parse::<ServerAddress>().map_err(|e| CmdlineError {
                        name: "grpc_authority".into(),
                        value: list.to_owned(),
                        reason: e.to_string(),
                    })
                })
                .collect::<Result<_, _>>()?,
        };
        Ok(CmdlineSettings {
            agent_id: self
                .non_empty("worker_id")
                .or_else(|| self.non_empty("hw_addr"))
                .map(str::to_owned),
            servers,
            tls: self.boolean("tinkerbell_tls")?,
            insecure_tls: self.boolean("tinkerbell_insecure_tls")?,
            syslog_host: self.non_empty("syslog_host").map(str::to_owned),
            agent_secret: self.non_empty("tink_agent_secret").map(str::to_owned),
        })
    }
}

fn split(param: String) -> (String, Option<String>) {
    match param.split_once('=') {
        Some((n, v)) => (n.to_owned(), Some(v.to_owned())),
        None => (param, None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_smee_parameters() {
        let c = KernelCmdline::parse(
            "BOOT_IMAGE=/vmlinuz worker_id=aa:bb:cc:00:00:01 hw_addr=aa:bb:cc:00:00:01 \
             grpc_authority=10.0.0.2:42113 tinkerbell_tls=false tinkerbell_insecure_tls=false \
             syslog_host=10.0.0.2 console=tty0 console=ttyS1,115200 quiet note=\"a b\" \
             tinkerbell_tls=true tink_agent_secret=s3cr3t\n",
        );
        assert_eq!(c.get("console"), Some("ttyS1,115200"));
        assert_eq!(c.get("note"), Some("a b"));
        assert_eq!(c.get("quiet"), None);
        let s = c.settings().unwrap();
        assert_eq!(s.agent_id.as_deref(), Some("aa:bb:cc:00:00:01"));
        assert_eq!(s.servers, vec!["10.0.0.2:42113".parse().unwrap()]);
        // The last occurrence wins (the machine's kernelParams come last).
        assert_eq!(s.tls, Some(true));
        assert_eq!(s.insecure_tls, Some(false));
        assert_eq!(s.agent_secret.as_deref(), Some("s3cr3t"));
        assert_eq!(s.syslog_host.as_deref(), Some("10.0.0.2"));
    }

    #[test]
    fn hw_addr_when_no_worker_id_and_clear_errors() {
        let s = KernelCmdline::parse("hw_addr=aa:bb:cc:00:00:02 grpc_authority=a:1,b:2")
            .settings()
            .unwrap();
        assert_eq!(s.agent_id.as_deref(), Some("aa:bb:cc:00:00:02"));
        assert_eq!(s.servers.len(), 2);
        assert_eq!(
            KernelCmdline::parse("").settings().unwrap(),
            CmdlineSettings::default()
        );
        let e = KernelCmdline::parse("tinkerbell_tls=maybe")
            .settings()
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "kernel command line tinkerbell_tls=\"maybe\": expected true or false"
        );
        let e = KernelCmdline::parse("grpc_authority=nohost")
            .settings()
            .unwrap_err();
        assert!(
            e.to_string()
                .starts_with("kernel command line grpc_authority=\"nohost\": server address"),
            "{e}"
        );
    }

    #[test]
    fn missing_file_is_empty() {
        let c = KernelCmdline::read(Path::new("/nonexistent/cmdline")).unwrap();
        assert_eq!(c, KernelCmdline::default());
    }
}
