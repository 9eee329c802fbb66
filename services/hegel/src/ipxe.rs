//! The iPXE boot script of a machine (askama templates in services/hegel/templates/).
//!
//! - `spec.ipxe.inline`: served as is.
//! - `spec.ipxe.url`: a script that `chain`s it (http or https only), with retries.
//! - otherwise the OSIE of `spec.osie.osieRef`: its `kernelUrl` with the parameters Tinkerbell's
//!   Smee passes to HookOS ([`kernel_params`]), then `initrdUrl`, then `boot`, each retried.
//!
//! An interface with `disableNetboot` or `disableDhcp` gets no script.

use askama::Template;
use tink_api::v1alpha2::OsieSpec;

use crate::machine::{Boot, Interface, Machine};

/// The values every script gets, from Hegel's flags.
#[derive(Clone, Debug)]
pub struct IpxeConfig {
    /// `grpc_authority=`: the tink-server address the agent dials (`host:port`).
    pub grpc_authority: String,
    /// `tinkerbell_tls=`: whether the agent uses TLS towards the server.
    pub tinkerbell_tls: bool,
    /// `tinkerbell_insecure_tls=`: whether the agent skips verifying the server certificate.
    pub tinkerbell_insecure_tls: bool,
    /// `syslog_host=`: where the OSIE sends its logs; left out when unset.
    pub syslog_host: Option<String>,
    /// `facility=`, when the Hardware carries no migrated facility code; left out when unset.
    pub facility: Option<String>,
    /// One `console=` parameter each, in order.
    pub console: Vec<String>,
    /// Parameters added after Smee's, before the Hardware's `osie.kernelParams`.
    pub extra_kernel_params: Vec<String>,
    /// Attempts after the first for each of kernel, initrd and boot.
    pub retries: u32,
    /// Seconds between attempts.
    pub retry_delay_seconds: u32,
    /// Discovery: the OSIE (`namespace`, `name`) a machine that no Hardware names boots when it
    /// asks for the script of its MAC, so it can enroll; `None` (the default): such a machine
    /// gets 404.
    pub discovery_osie: Option<(String, String)>,
}

impl IpxeConfig {
    /// Defaults for `grpc_authority`: TLS on, console `tty0` and `ttyS1,115200` (as Smee), 10
    /// retries 2 s apart.
    pub fn new(grpc_authority: impl Into<String>) -> Self {
        Self {
            grpc_authority: grpc_authority.into(),
            tinkerbell_tls: true,
            tinkerbell_insecure_tls: false,
            syslog_host: None,
            facility: None,
            console: vec!["tty0".into(), "ttyS1,115200".into()],
            extra_kernel_params: Vec::new(),
            retries: 10,
            retry_delay_seconds: 2,
            discovery_osie: None,
        }
    }
}

/// Why a machine gets no script.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ScriptError {
    /// The interface may not netboot.
    #[error("Hardware {hardware}: interface {mac} has {field}: true; it gets no iPXE script")]
    NetbootDisabled {
        /// `namespace/name`.
        hardware: String,
        /// The interface.
        mac: String,
        /// `disableNetboot` or `disableDhcp`.
        field: &'static str,
    },
    /// Neither an override nor an OSIE.
    #[error("Hardware {0}: neither spec.ipxe nor spec.osie.osieRef is set; it has no iPXE script")]
    NothingToBoot(String),
    /// The OSIE does not exist.
    #[error("Hardware {hardware}: spec.osie.osieRef names OSIE {osie}, which does not exist")]
    OsieNotFound {
        /// `namespace/name` of the Hardware.
        hardware: String,
        /// `namespace/name` of the OSIE.
        osie: String,
    },
    /// A value cannot be put in a script.
    #[error("{object}: {field} {reason}")]
    BadValue {
        /// The object, `Hardware ns/name` or `OSIE ns/name` or `hegel flag`.
        object: String,
        /// The field path.
        field: String,
        /// What is wrong.
        reason: &'static str,
    },
}

impl ScriptError {
    /// Whether the machine's configuration says "no script" (404) rather than being broken
    /// (500).
    pub fn is_not_found(&self) -> bool {
        matches!(
            self,
            Self::NetbootDisabled { .. } | Self::NothingToBoot(_) | Self::OsieNotFound { .. }
        )
    }
}

#[derive(Template)]
#[template(path = "auto.ipxe", escape = "none")]
struct OsieScript<'a> {
    mac: &'a str,
    hardware: &'a str,
    /// Whether a URL names its file by architecture ([`per_arch`]): the script then sets
    /// `osie-arch` from the firmware's own architecture first.
    per_arch: bool,
    kernel_url: &'a str,
    initrd_url: &'a str,
    params: &'a [String],
    retries: u32,
    retry_delay: u32,
}

#[derive(Template)]
#[template(path = "chain.ipxe", escape = "none")]
struct ChainScript<'a> {
    url: &'a str,
    retries: u32,
    retry_delay: u32,
}

/// A kernel parameter must be one iPXE word: no whitespace (iPXE would read `||`, `&&` or `;`
/// in it as its own operators) and no control characters (a newline would start a command).
fn check_param(object: &str, field: String, p: &str) -> Result<(), ScriptError> {
    let reason = if p.is_empty() {
        Some("is empty")
    } else if p.chars().any(char::is_control) {
        Some("contains a control character (a newline would inject iPXE commands)")
    } else if p.chars().any(char::is_whitespace) {
        Some("contains whitespace; give each kernel parameter as its own element")
    } else {
        None
    };
    match reason {
        Some(reason) => Err(ScriptError::BadValue {
            object: object.to_owned(),
            field,
            reason,
        }),
        None => Ok(()),
    }
}

/// Tinkerbell's naming of OSIE files by architecture: `vmlinuz-x86_64`, `initramfs-aarch64`.
const ARCH_SUFFIXES: [&str; 2] = ["-x86_64", "-aarch64"];

/// An OSIE URL whose last path segment ends in an architecture suffix ([`ARCH_SUFFIXES`]), with
/// that suffix replaced by iPXE's `${osie-arch}`: one OSIE object then serves x86-64 and arm64
/// machines, each loading the files of the architecture its firmware reports (iPXE's
/// `${buildarch}`, which the script maps to Tinkerbell's names). `None` for any other URL, which
/// is loaded as written.
///
/// The firmware's architecture rather than a Hardware field: v1alpha2's Hardware has no
/// architecture (v1alpha1's `dhcp.arch` is kept only in the conversion annotation), and the
/// program that loads the kernel is the one thing that cannot be wrong about what it runs on.
fn per_arch(url: &str) -> Option<String> {
    let path_end = url.find(['?', '#']).unwrap_or(url.len());
    let (path, rest) = url.split_at(path_end);
    ARCH_SUFFIXES.iter().find_map(|suffix| {
        let base = path.strip_suffix(suffix)?;
        // the suffix ends the last path segment, after a file name (not `http://host/-x86_64`)
        (!base.ends_with('/')).then(|| format!("{base}-${{osie-arch}}{rest}"))
    })
}

fn check_url(object: &str, field: &str, url: &str) -> Result<(), ScriptError> {
    let bad = |reason| ScriptError::BadValue {
        object: object.to_owned(),
        field: field.to_owned(),
        reason,
    };
    if !(url.starts_with("http://") || url.starts_with("https://")) {
        return Err(bad("is not an http:// or https:// URL"));
    }
    if url.chars().any(|c| c.is_control() || c.is_whitespace()) {
        return Err(bad("contains whitespace or a control character"));
    }
    Ok(())
}

/// The kernel parameters of the OSIE script for interface `i` of `machine`, in order:
/// Smee's (`worker_id`, `hw_addr`, `grpc_authority`, `tinkerbell_tls`,
/// `tinkerbell_insecure_tls`, `syslog_host`, `facility`, `vlan_id`, `console=`, `modules=`,
/// `intel_iommu=on iommu=pt`, `initrd=`), then `config.extra_kernel_params`, then the
/// Hardware's `spec.osie.kernelParams`, so that the machine's own values win (Linux and the
/// agent take the last occurrence of a name).
pub fn kernel_params(
    machine: &Machine,
    i: &Interface,
    machine_params: &[String],
    config: &IpxeConfig,
) -> Result<Vec<String>, ScriptError> {
    kernel_params_with_secret(machine, i, machine_params, config, None)
}

/// [`kernel_params`] with the machine's boot secret (`tink_agent_secret=`, right after Smee's
/// TLS parameters; the value of the current generation the controller wrote into the copy)
/// when its Hardware names one.
pub fn kernel_params_with_secret(
    machine: &Machine,
    i: &Interface,
    machine_params: &[String],
    config: &IpxeConfig,
    agent_secret: Option<&str>,
) -> Result<Vec<String>, ScriptError> {
    let mut p = vec![
        format!("worker_id={}", i.mac),
        format!("hw_addr={}", i.mac),
        format!("grpc_authority={}", config.grpc_authority),
        format!("tinkerbell_tls={}", config.tinkerbell_tls),
        format!("tinkerbell_insecure_tls={}", config.tinkerbell_insecure_tls),
    ];
    if let Some(secret) = agent_secret {
        if secret.is_empty() || !secret.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(ScriptError::BadValue {
                object: format!("Hardware {}", machine.key),
                field: "the tinkerbell.org/agent-secret Secret's `secret`".into(),
                reason: "must be printable ASCII without spaces (it is a kernel parameter)",
            });
        }
        p.push(format!("tink_agent_secret={secret}"));
    }
    if let Some(s) = &config.syslog_host {
        p.push(format!("syslog_host={s}"));
    }
    if let Some(f) = machine.facility.as_ref().or(config.facility.as_ref()) {
        p.push(format!("facility={f}"));
    }
    if let Some(v) = &i.vlan_id {
        p.push(format!("vlan_id={v}"));
    }
    p.extend(config.console.iter().map(|c| format!("console={c}")));
    p.push("modules=loop,squashfs,sd-mod,usb-storage".into());
    p.push("intel_iommu=on".into());
    p.push("iommu=pt".into());
    p.push("initrd=initrd".into());
    let hegel = "hegel flags";
    for (n, x) in p.iter().enumerate() {
        check_param(hegel, format!("generated parameter {n}"), x)?;
    }
    for (n, x) in config.extra_kernel_params.iter().enumerate() {
        check_param(hegel, format!("--extra-kernel-params[{n}]"), x)?;
    }
    p.extend(config.extra_kernel_params.iter().cloned());
    let object = format!("Hardware {}", machine.key);
    for (n, x) in machine_params.iter().enumerate() {
        check_param(&object, format!("spec.osie.kernelParams[{n}]"), x)?;
    }
    p.extend(machine_params.iter().cloned());
    Ok(p)
}

/// The script for interface `iface` of `machine`. `osie` resolves an OSIE name in the
/// machine's namespace.
pub fn script(
    machine: &Machine,
    iface: usize,
    osie: impl FnOnce(&str) -> Option<std::sync::Arc<OsieSpec>>,
    config: &IpxeConfig,
) -> Result<String, ScriptError> {
    script_with_secret(machine, iface, osie, config, None)
}

/// [`script`] with the machine's pre-shared agent secret in the OSIE's kernel parameters.
pub fn script_with_secret(
    machine: &Machine,
    iface: usize,
    osie: impl FnOnce(&str) -> Option<std::sync::Arc<OsieSpec>>,
    config: &IpxeConfig,
    agent_secret: Option<&str>,
) -> Result<String, ScriptError> {
    let Some(i) = machine.interfaces.get(iface) else {
        return Err(ScriptError::NothingToBoot(machine.key.clone()));
    };
    if i.disable_dhcp || i.disable_netboot {
        return Err(ScriptError::NetbootDisabled {
            hardware: machine.key.clone(),
            mac: i.mac.clone(),
            field: if i.disable_dhcp {
                "disableDhcp"
            } else {
                "disableNetboot"
            },
        });
    }
    let object = format!("Hardware {}", machine.key);
    let render_error = |e: askama::Error| ScriptError::BadValue {
        object: object.clone(),
        field: "iPXE template".into(),
        reason: if matches!(e, askama::Error::Fmt) {
            "could not be rendered"
        } else {
            "could not be rendered (template error)"
        },
    };
    match &machine.boot {
        Boot::Inline(s) => Ok(s.clone()),
        Boot::Chain(url) => {
            check_url(&object, "spec.ipxe.url", url)?;
            ChainScript {
                url,
                retries: config.retries,
                retry_delay: config.retry_delay_seconds,
            }
            .render()
            .map_err(render_error)
        }
        Boot::Nothing => Err(ScriptError::NothingToBoot(machine.key.clone())),
        Boot::Osie {
            name,
            kernel_params: own,
        } => {
            let osie_key = format!("{}/{name}", machine.namespace);
            let spec = osie(name).ok_or_else(|| ScriptError::OsieNotFound {
                hardware: machine.key.clone(),
                osie: osie_key.clone(),
            })?;
            let osie_object = format!("OSIE {osie_key}");
            let missing = |field: &str| ScriptError::BadValue {
                object: osie_object.clone(),
                field: field.to_owned(),
                reason: "is not set",
            };
            let kernel = spec
                .kernel_url
                .as_deref()
                .ok_or_else(|| missing("spec.kernelUrl"))?;
            let initrd = spec
                .initrd_url
                .as_deref()
                .ok_or_else(|| missing("spec.initrdUrl"))?;
            check_url(&osie_object, "spec.kernelUrl", kernel)?;
            check_url(&osie_object, "spec.initrdUrl", initrd)?;
            let params = kernel_params_with_secret(machine, i, own, config, agent_secret)?;
            let kernel_arch = per_arch(kernel);
            let initrd_arch = per_arch(initrd);
            OsieScript {
                mac: &i.mac,
                hardware: &machine.key,
                per_arch: kernel_arch.is_some() || initrd_arch.is_some(),
                kernel_url: kernel_arch.as_deref().unwrap_or(kernel),
                initrd_url: initrd_arch.as_deref().unwrap_or(initrd),
                params: &params,
                retries: config.retries,
                retry_delay: config.retry_delay_seconds,
            }
            .render()
            .map_err(render_error)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::sync::Arc;
    use tink_api::v1alpha2::Hardware;

    fn machine(spec: serde_json::Value) -> Machine {
        let hw: Hardware = serde_json::from_value(json!({
            "apiVersion": "tinkerbell.org/v1alpha2", "kind": "Hardware",
            "metadata": {"name": "m1", "namespace": "ns"},
            "spec": spec,
        }))
        .expect("hardware");
        Machine::from_hardware(&hw)
    }

    fn hook() -> Option<Arc<OsieSpec>> {
        Some(Arc::new(OsieSpec {
            kernel_url: Some("http://10.0.0.9:8080/vmlinuz-x86_64".into()),
            initrd_url: Some("http://10.0.0.9:8080/initramfs-x86_64".into()),
        }))
    }

    #[test]
    fn osie_script_has_smee_params_then_extra_then_the_machines() {
        let m = machine(json!({
            "networkInterfaces": {"aa:bb:cc:00:00:01": {"dhcp": {"ip": "10.0.0.1", "vlanId": "12"}}},
            "osie": {"osieRef": {"name": "hook"}, "kernelParams": ["console=ttyS0,9600", "tinkerbell_tls=false"]}
        }));
        let mut c = IpxeConfig::new("10.0.0.2:42113");
        c.syslog_host = Some("10.0.0.2".into());
        c.extra_kernel_params = vec!["sshd=1".into()];
        let s = script(&m, 0, |n| if n == "hook" { hook() } else { None }, &c).unwrap();
        assert!(s.starts_with("#!ipxe\n"), "{s}");
        let kernel = s.lines().find(|l| l.starts_with("kernel ")).unwrap();
        assert!(kernel.starts_with(
            "kernel http://10.0.0.9:8080/vmlinuz-${osie-arch} worker_id=aa:bb:cc:00:00:01 hw_addr=aa:bb:cc:00:00:01 grpc_authority=10.0.0.2:42113 tinkerbell_tls=true tinkerbell_insecure_tls=false syslog_host=10.0.0.2 vlan_id=12 console=tty0 console=ttyS1,115200 modules=loop,squashfs,sd-mod,usb-storage intel_iommu=on iommu=pt initrd=initrd sshd=1 console=ttyS0,9600 tinkerbell_tls=false && goto download_initrd || "
        ), "{kernel}");
        assert!(s.contains(
            "initrd --name initrd http://10.0.0.9:8080/initramfs-${osie-arch} && goto boot"
        ));
        assert!(s.contains("set retries:int32 10"));
    }

    #[test]
    fn files_named_by_architecture_are_loaded_by_the_firmwares_architecture() {
        for (url, want) in [
            (
                "http://h/vmlinuz-x86_64",
                Some("http://h/vmlinuz-${osie-arch}"),
            ),
            (
                "http://h/o/v1/initramfs-aarch64",
                Some("http://h/o/v1/initramfs-${osie-arch}"),
            ),
            (
                "http://h/vmlinuz-x86_64?v=2",
                Some("http://h/vmlinuz-${osie-arch}?v=2"),
            ),
            ("http://h/vmlinuz", None),
            ("http://h/vmlinuz-x86_64/other", None),
            ("http://h/-x86_64", None),
            ("http://h/vmlinuz-arm64", None),
        ] {
            assert_eq!(per_arch(url).as_deref(), want, "{url}");
        }
        let m = machine(json!({
            "networkInterfaces": {"aa:bb:cc:00:00:01": {"dhcp": {"ip": "10.0.0.1"}}},
            "osie": {"osieRef": {"name": "hook"}}
        }));
        let c = IpxeConfig::new("10.0.0.2:42113");
        let s = script(&m, 0, |_| hook(), &c).unwrap();
        let set = s
            .lines()
            .position(|l| {
                l == "iseq ${buildarch} arm64 && set osie-arch aarch64 || set osie-arch x86_64"
            })
            .expect("the script sets osie-arch from the firmware's architecture");
        let kernel = s.lines().position(|l| l.starts_with("kernel ")).unwrap();
        assert!(set < kernel, "{s}");
        // An OSIE whose files carry no architecture is loaded as written, without the test.
        let plain = || {
            Some(Arc::new(OsieSpec {
                kernel_url: Some("http://10.0.0.9:8080/vmlinuz".into()),
                initrd_url: Some("http://10.0.0.9:8080/initramfs".into()),
            }))
        };
        let s = script(&m, 0, |_| plain(), &c).unwrap();
        assert!(
            !s.contains("buildarch") && s.contains("kernel http://10.0.0.9:8080/vmlinuz "),
            "{s}"
        );
    }

    #[test]
    fn overrides_and_refusals() {
        let c = IpxeConfig::new("s:1");
        let inline = machine(json!({"networkInterfaces": {"aa:bb:cc:00:00:01": {}},
            "ipxe": {"inline": "#!ipxe\necho hi\n"}}));
        assert_eq!(
            script(&inline, 0, |_| None, &c).unwrap(),
            "#!ipxe\necho hi\n"
        );
        let chain = machine(json!({"networkInterfaces": {"aa:bb:cc:00:00:01": {}},
            "ipxe": {"url": "https://boot.example/x.ipxe"}}));
        let s = script(&chain, 0, |_| None, &c).unwrap();
        assert!(
            s.contains("chain --autofree https://boot.example/x.ipxe ||"),
            "{s}"
        );
        let ftp = machine(json!({"networkInterfaces": {"aa:bb:cc:00:00:01": {}},
            "ipxe": {"url": "ftp://boot.example/x.ipxe"}}));
        assert_eq!(
            script(&ftp, 0, |_| None, &c).unwrap_err().to_string(),
            "Hardware ns/m1: spec.ipxe.url is not an http:// or https:// URL"
        );
        let off = machine(
            json!({"networkInterfaces": {"aa:bb:cc:00:00:01": {"disableNetboot": true}},
            "ipxe": {"inline": "#!ipxe"}}),
        );
        let e = script(&off, 0, |_| None, &c).unwrap_err();
        assert!(e.is_not_found());
        assert_eq!(
            e.to_string(),
            "Hardware ns/m1: interface aa:bb:cc:00:00:01 has disableNetboot: true; it gets no iPXE script"
        );
        let no_dhcp = machine(
            json!({"networkInterfaces": {"aa:bb:cc:00:00:01": {"disableDhcp": true}},
            "ipxe": {"inline": "#!ipxe"}}),
        );
        assert!(
            script(&no_dhcp, 0, |_| None, &c)
                .unwrap_err()
                .to_string()
                .contains("disableDhcp")
        );
        let missing = machine(json!({"networkInterfaces": {"aa:bb:cc:00:00:01": {}},
            "osie": {"osieRef": {"name": "gone"}}}));
        assert_eq!(
            script(&missing, 0, |_| None, &c).unwrap_err().to_string(),
            "Hardware ns/m1: spec.osie.osieRef names OSIE ns/gone, which does not exist"
        );
        let bad = machine(json!({"networkInterfaces": {"aa:bb:cc:00:00:01": {}},
            "osie": {"osieRef": {"name": "hook"}, "kernelParams": ["ok=1", "x=1\nshell"]}}));
        let e = script(&bad, 0, |_| hook(), &c).unwrap_err();
        assert!(!e.is_not_found());
        assert!(
            e.to_string().starts_with(
                "Hardware ns/m1: spec.osie.kernelParams[1] contains a control character"
            ),
            "{e}"
        );
        let nothing = machine(json!({"networkInterfaces": {"aa:bb:cc:00:00:01": {}}}));
        assert!(
            script(&nothing, 0, |_| None, &c)
                .unwrap_err()
                .is_not_found()
        );
    }
}
