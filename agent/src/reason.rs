//! Failure reasons, and the contract through which an action explains its own failure.
//!
//! # The reason-file contract
//!
//! For every action the agent creates a fresh, empty directory on the machine and mounts it
//! read-write at [`REASON_DIR`] (`/tinkerbell`) inside the action's container. The path is also
//! given to the action in the environment variable `TINKERBELL_REASON_DIR`. An action that fails
//! (exits with a non-zero code) may write:
//!
//! - `/tinkerbell/failure-reason`: an UpperCamelCase word or phrase (`DiskNotFound`): ASCII,
//!   starts with a capital, letters and digits only, at most 64 characters. Only the first line
//!   counts; surrounding white space is ignored. Anything else is ignored and the agent's own
//!   reason (`NonZeroExitCode`) is used, with a note in the message.
//! - `/tinkerbell/failure-message`: free text (UTF-8; invalid bytes are replaced) elaborating on
//!   the reason, trimmed and truncated to [`MAX_MESSAGE_BYTES`]. Without it the message is the
//!   agent's own: the exit code and the last lines of output.
//!
//! Both files are optional, read only after a non-zero exit (an action that exits 0 succeeded,
//! whatever it wrote), must be regular files (symbolic links are refused, so an action cannot make
//! the agent read files of the machine), and are read up to 64 KiB. The directory is removed with
//! the container. The file names match the convention of Tinkerbell's Go worker forks
//! (`/tinkerbell/failure-reason`, `/tinkerbell/failure-message`), so existing actions keep working.

use std::fmt;
use std::path::Path;

use crate::spec::is_upper_camel_case;

/// Where the reason directory is mounted inside every action container.
pub const REASON_DIR: &str = "/tinkerbell";
/// The environment variable naming [`REASON_DIR`] inside the container.
pub const REASON_DIR_ENV: &str = "TINKERBELL_REASON_DIR";
/// The file holding the action's failure reason.
pub const REASON_FILE: &str = "failure-reason";
/// The file holding the action's failure message.
pub const MESSAGE_FILE: &str = "failure-message";
/// The longest failure message sent, in bytes.
pub const MAX_MESSAGE_BYTES: usize = 4096;
const MAX_READ_BYTES: u64 = 64 * 1024;

/// Why an action failed. Rendered as UpperCamelCase.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FailureReason {
    /// The container exited with a non-zero code.
    NonZeroExitCode,
    /// The action ran longer than its timeout and was stopped.
    Timeout,
    /// The image was neither present nor pullable.
    ImagePullFailed,
    /// The engine refused to create the container (bad volume, bad image config, ...).
    ContainerCreateFailed,
    /// The engine refused to start the container.
    ContainerStartFailed,
    /// The action itself is malformed (bad volume or environment specification).
    InvalidAction,
    /// The workflow was canceled while the action ran.
    Canceled,
    /// The Docker engine failed while the action ran (lost connection, ...).
    RuntimeError,
    /// A reason written by the action (validated UpperCamelCase).
    Action(String),
}

impl FailureReason {
    /// The UpperCamelCase word.
    pub fn as_str(&self) -> &str {
        match self {
            Self::NonZeroExitCode => "NonZeroExitCode",
            Self::Timeout => "Timeout",
            Self::ImagePullFailed => "ImagePullFailed",
            Self::ContainerCreateFailed => "ContainerCreateFailed",
            Self::ContainerStartFailed => "ContainerStartFailed",
            Self::InvalidAction => "InvalidAction",
            Self::Canceled => "Canceled",
            Self::RuntimeError => "RuntimeError",
            Self::Action(s) => s,
        }
    }
}

impl fmt::Display for FailureReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A reason and message ready for an `ActionFailed` event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// The reason.
    pub reason: FailureReason,
    /// The message.
    pub message: String,
}

/// Applies the contract: what the action wrote (if anything) over the agent's own failure.
pub fn apply_action_files(
    default: Failure,
    reason_file: Option<&[u8]>,
    message_file: Option<&[u8]>,
) -> Failure {
    let mut notes = Vec::new();
    let reason = match reason_file {
        None => default.reason.clone(),
        Some(bytes) => {
            let text = String::from_utf8_lossy(bytes);
            let first = text.lines().next().unwrap_or("").trim();
            if is_upper_camel_case(first) {
                FailureReason::Action(first.to_owned())
            } else {
                notes.push(format!(
                    "(the action's {REASON_FILE} {:?} is not UpperCamelCase and was ignored)",
                    truncate(first, 80)
                ));
                default.reason.clone()
            }
        }
    };
    let message = match message_file
        .map(|b| String::from_utf8_lossy(b).trim().to_owned())
        .filter(|m| !m.is_empty())
    {
        Some(m) => m,
        None => default.message,
    };
    let message = if notes.is_empty() {
        message
    } else {
        format!("{message} {}", notes.join(" "))
    };
    Failure {
        reason,
        message: truncate(&message, MAX_MESSAGE_BYTES),
    }
}

/// Reads the reason and message files from the action's reason directory (regular files only).
pub async fn read_action_files(dir: &Path) -> (Option<Vec<u8>>, Option<Vec<u8>>) {
    (
        read_regular(&dir.join(REASON_FILE)).await,
        read_regular(&dir.join(MESSAGE_FILE)).await,
    )
}

async fn read_regular(path: &Path) -> Option<Vec<u8>> {
    use tokio::io::AsyncReadExt;
    let meta = tokio::fs::symlink_metadata(path).await.ok()?;
    if !meta.file_type().is_file() {
        return None;
    }
    let file = tokio::fs::File::open(path).await.ok()?;
    let mut buf = Vec::new();
    file.take(MAX_READ_BYTES).read_to_end(&mut buf).await.ok()?;
    Some(buf)
}

/// Truncates to at most `max` bytes on a character boundary, marking the cut with `...`.
pub fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_owned();
    }
    let mut end = max.saturating_sub(3);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &s[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn default() -> Failure {
        Failure {
            reason: FailureReason::NonZeroExitCode,
            message: "exit code 3".into(),
        }
    }

    #[test]
    fn nothing_written_keeps_the_agents_failure() {
        assert_eq!(apply_action_files(default(), None, None), default());
        assert_eq!(
            apply_action_files(default(), None, Some(b"  \n")),
            default()
        );
    }

    #[test]
    fn action_reason_and_message_win() {
        let f = apply_action_files(
            default(),
            Some(b"DiskNotFound\nignored"),
            Some(b" no /dev/sda \n"),
        );
        assert_eq!(f.reason, FailureReason::Action("DiskNotFound".into()));
        assert_eq!(f.reason.to_string(), "DiskNotFound");
        assert_eq!(f.message, "no /dev/sda");
    }

    #[test]
    fn reason_without_message_keeps_the_default_message() {
        let f = apply_action_files(default(), Some(b"  Oops  "), None);
        assert_eq!(f.reason.as_str(), "Oops");
        assert_eq!(f.message, "exit code 3");
    }

    #[test]
    fn invalid_reason_is_ignored_with_a_note() {
        let f = apply_action_files(default(), Some(b"not camel"), Some(b"msg"));
        assert_eq!(f.reason, FailureReason::NonZeroExitCode);
        assert!(f.message.starts_with("msg "), "{}", f.message);
        assert!(f.message.contains("not camel"), "{}", f.message);
    }

    #[test]
    fn long_messages_are_truncated_on_char_boundaries() {
        let long = "é".repeat(MAX_MESSAGE_BYTES);
        let f = apply_action_files(default(), None, Some(long.as_bytes()));
        assert!(f.message.len() <= MAX_MESSAGE_BYTES);
        assert!(f.message.ends_with("..."));
        assert_eq!(truncate("short", 10), "short");
    }

    #[tokio::test]
    async fn files_are_read_but_symlinks_are_not() -> std::io::Result<()> {
        let dir = tempfile::tempdir()?;
        tokio::fs::write(dir.path().join(REASON_FILE), b"Broken").await?;
        let secret = dir.path().join("secret");
        tokio::fs::write(&secret, b"host secret").await?;
        tokio::fs::symlink(&secret, dir.path().join(MESSAGE_FILE)).await?;
        let (reason, message) = read_action_files(dir.path()).await;
        assert_eq!(reason.as_deref(), Some(&b"Broken"[..]));
        assert_eq!(message, None);
        let empty = tempfile::tempdir()?;
        assert_eq!(read_action_files(empty.path()).await, (None, None));
        Ok(())
    }
}
