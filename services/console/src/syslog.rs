//! A machine's boot log on its page: the last lines it sent to tink-netboot's syslog receiver,
//! read from NATS JetStream (stream `TINK_SYSLOG`, [`tink_bus::read_syslog`]) over the
//! console's NATS connection (the presence watch's, `--nats-url`; deploy/'s `tink-console`
//! user may read that stream). Shown to whoever may `get` the Hardware (the page's own check):
//! the receiver hides secret kernel parameters before it stores a line.

use std::sync::RwLock;
use std::time::Duration;

use async_nats::jetstream;

/// Lines a machine's page shows (the last ones stored).
pub const PAGE_LINES: usize = 50;

/// How long reading them may take before the page goes without.
pub const READ_TIMEOUT: Duration = Duration::from_secs(2);

/// The console's JetStream handle, once the presence watch has connected.
#[derive(Debug, Default)]
pub struct SyslogSource {
    js: RwLock<Option<jetstream::Context>>,
    configured: std::sync::atomic::AtomicBool,
}

/// One line as the page shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShownLine {
    /// Received, `YYYY-MM-DD HH:MM:SS` UTC.
    pub time: String,
    /// `info`, `err`, ...
    pub severity: &'static str,
    /// Whether the severity is `warning` or worse.
    pub alarming: bool,
    /// The program, `-` when none.
    pub app: String,
    /// The text.
    pub message: String,
}

/// What the page's boot log part shows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BootLog {
    /// No NATS configured (`--nats-url`): the page says where to look instead.
    NotConfigured,
    /// Could not be read now (the reason).
    Unavailable(String),
    /// The last lines, oldest first (empty: none stored).
    Lines(Vec<ShownLine>),
}

impl SyslogSource {
    /// Marks the source as configured (NATS given), before it has connected.
    pub fn configure(&self) {
        self.configured
            .store(true, std::sync::atomic::Ordering::Release);
    }

    /// The presence watch's connection.
    pub fn connected(&self, js: jetstream::Context) {
        *self.js.write().unwrap_or_else(|e| e.into_inner()) = Some(js);
    }

    /// The last [`PAGE_LINES`] lines of Hardware `namespace/name`.
    pub async fn last_lines(&self, namespace: &str, name: &str) -> BootLog {
        if !self.configured.load(std::sync::atomic::Ordering::Acquire) {
            return BootLog::NotConfigured;
        }
        let js = self.js.read().unwrap_or_else(|e| e.into_inner()).clone();
        let Some(js) = js else {
            return BootLog::Unavailable("not connected to NATS yet".into());
        };
        let mut lines = Vec::new();
        let read = tink_bus::SyslogRead {
            last: Some(PAGE_LINES),
            follow: false,
        };
        let reading = tink_bus::read_syslog(&js, namespace, name, read, |line| {
            lines.push(shown(&line));
            std::future::ready(true)
        });
        match tokio::time::timeout(READ_TIMEOUT, reading).await {
            Ok(Ok(_)) | Ok(Err(tink_bus::SyslogReadError::NoStream)) => BootLog::Lines(lines),
            Ok(Err(e)) => BootLog::Unavailable(e.to_string()),
            Err(_) => BootLog::Unavailable(format!(
                "reading took longer than {}s",
                READ_TIMEOUT.as_secs()
            )),
        }
    }
}

fn shown(line: &tink_bus::SyslogLine) -> ShownLine {
    ShownLine {
        time: line.received.strftime("%Y-%m-%d %H:%M:%S").to_string(),
        severity: line.severity_name(),
        alarming: line.severity <= 4,
        app: line.app.clone().unwrap_or_else(|| "-".into()),
        message: line.message.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn without_nats_the_page_says_so() {
        let s = SyslogSource::default();
        assert_eq!(s.last_lines("ns", "m").await, BootLog::NotConfigured);
        s.configure();
        assert!(matches!(
            s.last_lines("ns", "m").await,
            BootLog::Unavailable(_)
        ));
    }

    #[test]
    fn lines_are_shown_with_their_severity() {
        let line = tink_bus::SyslogLine {
            received: "2026-11-27T13:00:00Z".parse().unwrap(),
            timestamp: None,
            source: "10.0.0.1".into(),
            facility: 0,
            severity: 3,
            hostname: None,
            app: None,
            procid: None,
            message: "no driver for 8086:1521".into(),
        };
        let s = shown(&line);
        assert_eq!(s.time, "2026-11-27 13:00:00");
        assert_eq!((s.severity, s.alarming, s.app.as_str()), ("err", true, "-"));
    }
}
