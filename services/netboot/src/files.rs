//! The one folder TFTP and HTTP serve, and the only way into it: [`Root::open`] refuses `..`,
//! absolute paths, and anything (symlinks included) that resolves outside the folder.

use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use crate::osie::Releases;

/// Why a path is not served.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    /// `..`, an absolute path, a NUL, a symlink out of the root, or not a regular file.
    #[error("refused path")]
    Refused,
    /// Nothing there.
    #[error("not found")]
    NotFound,
    /// Reading failed.
    #[error("{0}")]
    Io(std::io::Error),
    /// An OSIE release file that is not listed in its `SHA256SUMS` or does not match it (the
    /// message names the file, the expected and the actual digest).
    #[error("{0}")]
    Unverified(String),
}

/// The served folder (canonical).
#[derive(Clone, Debug)]
pub struct Root {
    dir: PathBuf,
    /// Versioned OSIE releases, served under `osie/` ([`crate::osie`]).
    osie: Option<Arc<Releases>>,
}

impl Root {
    /// The folder `dir`, which must exist.
    pub fn new(dir: &Path) -> std::io::Result<Self> {
        let dir = std::fs::canonicalize(dir).map_err(|e| {
            std::io::Error::new(
                e.kind(),
                format!(
                    "--files-dir {}: {e} (the folder TFTP and HTTP serve; Debian's `ipxe` \
                 package fills /usr/lib/ipxe)",
                    dir.display()
                ),
            )
        })?;
        if !dir.is_dir() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::NotADirectory,
                format!("--files-dir {} is not a directory", dir.display()),
            ));
        }
        Ok(Self { dir, osie: None })
    }

    /// This root with `releases` served under `osie/<version>/<file>` (checked against their
    /// `SHA256SUMS`), in place of anything under `osie/` in the folder itself.
    pub fn with_osie(mut self, releases: Arc<Releases>) -> Self {
        self.osie = Some(releases);
        self
    }

    /// The folder.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The real path of `name` (relative, `/`-separated) inside the root.
    pub async fn resolve(&self, name: &str) -> Result<PathBuf, FileError> {
        if name.is_empty() || name.contains('\0') || name.contains('\\') {
            return Err(FileError::Refused);
        }
        let rel = Path::new(name);
        let mut joined = self.dir.clone();
        for c in rel.components() {
            match c {
                Component::Normal(part) => joined.push(part),
                Component::CurDir => {}
                Component::ParentDir | Component::RootDir | Component::Prefix(_) => {
                    return Err(FileError::Refused);
                }
            }
        }
        // On the runtime's blocking pool: a slow disk never stalls the DHCP or TFTP loops.
        let real = match tokio::fs::canonicalize(&joined).await {
            Ok(p) => p,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(FileError::NotFound);
            }
            Err(e) => return Err(FileError::Io(e)),
        };
        if !real.starts_with(&self.dir) {
            return Err(FileError::Refused);
        }
        Ok(real)
    }

    /// Opens `name` for reading: the file and its length.
    pub async fn open(&self, name: &str) -> Result<(tokio::fs::File, u64), FileError> {
        let o = self.open_meta(name).await?;
        Ok((o.file, o.meta.len()))
    }

    /// Opens `name` for reading: the file, its real path and its metadata (what
    /// [`crate::hot::HotFiles`] checks a cached copy against).
    pub async fn open_meta(&self, name: &str) -> Result<Opened, FileError> {
        if let Some(releases) = &self.osie
            && let Some(rest) = name.strip_prefix(crate::osie::PREFIX)
        {
            return Box::pin(releases.open_meta(rest)).await;
        }
        let path = self.resolve(name).await?;
        let file = tokio::fs::File::open(&path)
            .await
            .map_err(|e| match e.kind() {
                std::io::ErrorKind::NotFound => FileError::NotFound,
                std::io::ErrorKind::PermissionDenied => FileError::Refused,
                _ => FileError::Io(e),
            })?;
        let meta = file.metadata().await.map_err(FileError::Io)?;
        if !meta.is_file() {
            return Err(FileError::Refused);
        }
        Ok(Opened { file, path, meta })
    }
}

/// A file opened by [`Root::open_meta`].
#[derive(Debug)]
pub struct Opened {
    /// The open file.
    pub file: tokio::fs::File,
    /// Its real path inside the root.
    pub path: PathBuf,
    /// Its metadata, read from the open file.
    pub meta: std::fs::Metadata,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn traversal_is_refused() {
        let outer = tempfile::tempdir().unwrap();
        let root_dir = outer.path().join("root");
        std::fs::create_dir_all(root_dir.join("sub")).unwrap();
        std::fs::write(root_dir.join("sub/a.bin"), b"a").unwrap();
        std::fs::write(outer.path().join("secret"), b"s").unwrap();
        std::os::unix::fs::symlink(outer.path().join("secret"), root_dir.join("link")).unwrap();
        std::os::unix::fs::symlink("sub/a.bin", root_dir.join("inside")).unwrap();
        let root = Root::new(&root_dir).unwrap();
        assert!(root.resolve("sub/a.bin").await.is_ok());
        assert!(root.resolve("./sub/a.bin").await.is_ok());
        assert!(
            root.resolve("inside").await.is_ok(),
            "a link inside the root"
        );
        for bad in [
            "../secret",
            "sub/../../secret",
            "/etc/passwd",
            "link",
            "",
            "a\0b",
            "..\\secret",
        ] {
            assert!(
                matches!(root.resolve(bad).await, Err(FileError::Refused)),
                "{bad:?}"
            );
        }
        assert!(matches!(
            root.resolve("nope").await,
            Err(FileError::NotFound)
        ));
    }
}
