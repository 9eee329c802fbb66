//! What the agent runs: actions as the runtime sees them, and the pure rules that shape a
//! container from an action (volume parsing, environment merge, namespaces).

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

/// One action of a workflow, in the form the container runtime consumes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ActionSpec {
    /// Identifier of the action within its workflow.
    pub id: String,
    /// Human-readable name, used in logs.
    pub name: String,
    /// The OCI image to run.
    pub image: String,
    /// The entrypoint override; `None` keeps the image's entrypoint.
    pub cmd: Option<String>,
    /// Arguments (the container's command).
    pub args: Vec<String>,
    /// The environment, already merged (see [`merge_env`]).
    pub env: BTreeMap<String, String>,
    /// Volumes to mount.
    pub volumes: Vec<Volume>,
    /// The PID namespace (`host` shares the machine's); `None` gives the container its own.
    pub pid_mode: Option<String>,
    /// The network namespace; `None` means the machine's (`host`), as provisioning actions
    /// download images and talk to the provisioner.
    pub network_mode: Option<String>,
    /// How long the action may run; `None` uses the agent's default.
    pub timeout: Option<Duration>,
}

/// Where a volume's data comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VolumeSource {
    /// An absolute path on the machine (a bind mount).
    HostPath(String),
    /// A named Docker volume, created on demand.
    Named(String),
}

/// A parsed `src:dst[:mode]` volume specification.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Volume {
    /// The source.
    pub source: VolumeSource,
    /// The absolute path inside the container.
    pub target: String,
    /// Mounted read-only.
    pub read_only: bool,
}

/// Why a volume specification was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VolumeError {
    /// Not of the form `src:dst[:mode]`.
    #[error("volume {0:?}: expected src:dst[:ro|rw]")]
    Malformed(String),
    /// The target is not an absolute path.
    #[error("volume {0:?}: the container path must be absolute")]
    RelativeTarget(String),
    /// The mode is neither `ro` nor `rw`.
    #[error("volume {spec:?}: unknown mode {mode:?} (expected ro or rw)")]
    Mode {
        /// The whole specification.
        spec: String,
        /// The offending mode.
        mode: String,
    },
    /// A named volume's name has characters Docker refuses.
    #[error("volume {0:?}: a named volume must match [a-zA-Z0-9][a-zA-Z0-9_.-]*")]
    BadName(String),
}

impl FromStr for Volume {
    type Err = VolumeError;

    fn from_str(spec: &str) -> Result<Self, Self::Err> {
        let parts: Vec<&str> = spec.split(':').collect();
        let (src, dst, mode) = match parts.as_slice() {
            [src, dst] => (*src, *dst, None),
            [src, dst, mode] => (*src, *dst, Some(*mode)),
            _ => return Err(VolumeError::Malformed(spec.to_owned())),
        };
        if src.is_empty() || dst.is_empty() {
            return Err(VolumeError::Malformed(spec.to_owned()));
        }
        if !dst.starts_with('/') {
            return Err(VolumeError::RelativeTarget(spec.to_owned()));
        }
        let read_only = match mode {
            None | Some("rw") => false,
            Some("ro") => true,
            Some(other) => {
                return Err(VolumeError::Mode {
                    spec: spec.to_owned(),
                    mode: other.to_owned(),
                });
            }
        };
        let source = if src.starts_with('/') {
            VolumeSource::HostPath(src.to_owned())
        } else if valid_volume_name(src) {
            VolumeSource::Named(src.to_owned())
        } else {
            return Err(VolumeError::BadName(spec.to_owned()));
        };
        Ok(Self {
            source,
            target: dst.to_owned(),
            read_only,
        })
    }
}

impl fmt::Display for Volume {
    /// The Docker `Binds` form.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let src = match &self.source {
            VolumeSource::HostPath(p) | VolumeSource::Named(p) => p,
        };
        write!(
            f,
            "{src}:{}:{}",
            self.target,
            if self.read_only { "ro" } else { "rw" }
        )
    }
}

fn valid_volume_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphanumeric())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
}

/// Why an environment variable was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("environment variable name {0:?} is empty or contains '=' or NUL")]
pub struct EnvError(pub String);

/// Merges the workflow-wide (template) environment with an action's own: the action wins.
/// Names must be non-empty and free of `=` and NUL.
pub fn merge_env(
    template: &BTreeMap<String, String>,
    action: &BTreeMap<String, String>,
) -> Result<BTreeMap<String, String>, EnvError> {
    let mut merged = template.clone();
    merged.extend(action.iter().map(|(k, v)| (k.clone(), v.clone())));
    if let Some(bad) = merged
        .keys()
        .find(|k| k.is_empty() || k.contains('=') || k.contains('\0'))
    {
        return Err(EnvError(bad.clone()));
    }
    Ok(merged)
}

/// The `KEY=value` list Docker expects.
pub fn env_list(env: &BTreeMap<String, String>) -> Vec<String> {
    env.iter().map(|(k, v)| format!("{k}={v}")).collect()
}

/// Merges template-wide volumes with an action's: an action volume replaces a template volume
/// with the same container path; order is template first, then action.
pub fn merge_volumes(template: &[Volume], action: &[Volume]) -> Vec<Volume> {
    let mut merged: Vec<Volume> = template
        .iter()
        .filter(|t| !action.iter().any(|a| a.target == t.target))
        .cloned()
        .collect();
    merged.extend(action.iter().cloned());
    merged
}

/// An UpperCamelCase word or phrase (`NonZeroExitCode`): an ASCII capital followed by ASCII
/// letters and digits, at most 64 characters.
pub fn is_upper_camel_case(s: &str) -> bool {
    let mut chars = s.chars();
    s.len() <= 64
        && chars.next().is_some_and(|c| c.is_ascii_uppercase())
        && chars.all(|c| c.is_ascii_alphanumeric())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn volumes_parse() {
        type Case<'a> = (&'a str, Option<(VolumeSource, &'a str, bool)>);
        let cases: &[Case] = &[
            (
                "/dev:/dev",
                Some((VolumeSource::HostPath("/dev".into()), "/dev", false)),
            ),
            (
                "/etc/x:/y:ro",
                Some((VolumeSource::HostPath("/etc/x".into()), "/y", true)),
            ),
            (
                "/a:/b:rw",
                Some((VolumeSource::HostPath("/a".into()), "/b", false)),
            ),
            (
                "data:/var/data",
                Some((VolumeSource::Named("data".into()), "/var/data", false)),
            ),
            (
                "my_vol.1-x:/m:ro",
                Some((VolumeSource::Named("my_vol.1-x".into()), "/m", true)),
            ),
            ("/a", None),
            ("/a:", None),
            (":/b", None),
            ("/a:b", None),
            ("/a:/b:rx", None),
            ("/a:/b:ro:extra", None),
            ("-bad:/b", None),
            ("bad name:/b", None),
            ("", None),
        ];
        for (spec, want) in cases {
            let got = spec.parse::<Volume>();
            match want {
                Some((source, target, ro)) => {
                    let v = got.unwrap_or_else(|e| panic!("{spec}: {e}"));
                    assert_eq!(&v.source, source, "{spec}");
                    assert_eq!(v.target, *target, "{spec}");
                    assert_eq!(v.read_only, *ro, "{spec}");
                }
                None => assert!(got.is_err(), "{spec} should be refused"),
            }
        }
    }

    #[test]
    fn volumes_render_as_binds() {
        let v: Volume = "data:/d:ro".parse().expect("valid");
        assert_eq!(v.to_string(), "data:/d:ro");
        let v: Volume = "/h:/c".parse().expect("valid");
        assert_eq!(v.to_string(), "/h:/c:rw");
    }

    #[test]
    fn action_env_overrides_template_env() {
        let merged = merge_env(
            &map(&[("A", "template"), ("B", "template")]),
            &map(&[("B", "action"), ("C", "action")]),
        )
        .expect("valid");
        assert_eq!(
            merged,
            map(&[("A", "template"), ("B", "action"), ("C", "action")])
        );
        assert_eq!(
            env_list(&merged),
            vec!["A=template", "B=action", "C=action"]
        );
    }

    #[test]
    fn env_names_are_checked() {
        assert!(merge_env(&map(&[("A=B", "x")]), &BTreeMap::new()).is_err());
        assert!(merge_env(&BTreeMap::new(), &map(&[("", "x")])).is_err());
        assert_eq!(
            merge_env(&BTreeMap::new(), &map(&[("V", "a=b")])).expect("valid")["V"],
            "a=b"
        );
    }

    #[test]
    fn action_volumes_replace_template_volumes_on_the_same_target() {
        let t: Vec<Volume> = ["/a:/x", "/b:/y"]
            .iter()
            .map(|s| s.parse().expect("valid"))
            .collect();
        let a: Vec<Volume> = ["/c:/y:ro"]
            .iter()
            .map(|s| s.parse().expect("valid"))
            .collect();
        let merged: Vec<String> = merge_volumes(&t, &a)
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(merged, vec!["/a:/x:rw", "/c:/y:ro"]);
    }

    #[test]
    fn upper_camel_case() {
        for ok in ["NonZeroExitCode", "Timeout", "A", "DiskNotFound2"] {
            assert!(is_upper_camel_case(ok), "{ok}");
        }
        for bad in [
            "",
            "timeout",
            "Non Zero",
            "Bad-Reason",
            "X".repeat(65).as_str(),
        ] {
            assert!(!is_upper_camel_case(bad), "{bad}");
        }
    }
}
