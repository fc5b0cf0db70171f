//! The state directory (`--acme-state`): what the server keeps between starts and
//! shares with replicas that mount the same directory.
//!
//! ```text
//! STATE/                                        0700
//!   CA/                                         one per CA directory URL, e.g.
//!                                               acme-v02.api.letsencrypt.org-directory
//!     account.json                              0600 the account's key and URL
//!     certificates/NAME/certificate-and-key.pem 0600 the private key, then the chain
//!     certificates/NAME/lock                    flock(2)ed while a replica orders
//!     challenges/http-01/TOKEN                  0600 a key authorization being validated
//!     challenges/tls-alpn-01/NAME               0600 likewise, for TLS-ALPN-01
//! ```
//!
//! NAME is the certificate's first name. Every file is written whole to a temporary
//! file beside it (`.NAME.tmp-PID-N`, 0600), flushed to the disk, then renamed over
//! the old one, and the directory flushed: a crash at any point leaves the old file or
//! the new one, never half of one, and the key and its certificate are one file so
//! they cannot disagree. Temporary files left by a crash are never read, and are
//! removed at the next start once they are older than [`STALE_TEMPORARY`].
//!
//! The lock is `flock(2)` on a file of its own: the kernel releases it when the process
//! that holds it dies, and Linux's NFS client turns it into a lock the server sees, so
//! replicas on other hosts sharing the directory over NFS exclude each other too.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write as _};
use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use crate::acme::settings;

/// How old a temporary file must be before a start removes it: a replica may be
/// writing one right now.
pub const STALE_TEMPORARY: Duration = Duration::from_secs(600);

/// Why the state directory cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The directory (or one below it) cannot be created or written.
    #[error("cannot write the state directory {}: {source}", dir.display())]
    Unwritable {
        /// The directory.
        dir: PathBuf,
        /// The reason.
        source: io::Error,
    },
    /// A file cannot be read.
    #[error("cannot read {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The reason.
        source: io::Error,
    },
    /// A file cannot be written (the old one, if any, is left as it was).
    #[error("cannot write {}: {source}", path.display())]
    Write {
        /// The file.
        path: PathBuf,
        /// The reason.
        source: io::Error,
    },
}

/// Which challenge an answer is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AnswerKind {
    /// HTTP-01, by token.
    Http01,
    /// TLS-ALPN-01, by name.
    TlsAlpn01,
}

impl AnswerKind {
    fn dir(self) -> &'static str {
        match self {
            AnswerKind::Http01 => "http-01",
            AnswerKind::TlsAlpn01 => "tls-alpn-01",
        }
    }

    /// Whether `key` may name an answer: an HTTP-01 token is base64url, a TLS-ALPN-01
    /// key a DNS name; nothing else ever becomes a path.
    fn valid_key(self, key: &str) -> bool {
        match self {
            AnswerKind::Http01 => {
                !key.is_empty()
                    && key.len() <= 256
                    && key
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
            }
            AnswerKind::TlsAlpn01 => settings::domain(key).is_ok_and(|name| name == key),
        }
    }
}

/// The state directory of one CA.
#[derive(Clone, Debug)]
pub struct Store {
    /// `--acme-state`.
    root: PathBuf,
    /// Its subdirectory for the CA.
    ca: PathBuf,
}

impl Store {
    /// The state kept under `root` for the CA at `directory_url`; nothing is touched.
    pub fn new(root: &Path, directory_url: &str) -> Store {
        Store {
            root: root.to_path_buf(),
            ca: root.join(ca_dir_name(directory_url)),
        }
    }

    /// `--acme-state`.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Makes the directories (0700; an existing one is narrowed to 0700), proves the
    /// CA's directory writable with a file written and removed, and removes stale
    /// temporary files.
    pub fn prepare(&self) -> Result<(), StoreError> {
        let unwritable = |dir: &Path| {
            let dir = dir.to_path_buf();
            move |source| StoreError::Unwritable { dir, source }
        };
        for dir in [
            self.root.clone(),
            self.ca.clone(),
            self.ca.join("certificates"),
            self.ca.join("challenges/http-01"),
            self.ca.join("challenges/tls-alpn-01"),
        ] {
            make_private_dir(&dir).map_err(unwritable(&dir))?;
        }
        let probe = self.ca.join(".write-probe");
        write_atomic(&probe, b"").map_err(unwritable(&self.ca))?;
        fs::remove_file(&probe).map_err(unwritable(&self.ca))?;
        remove_stale_temporaries(&self.ca);
        Ok(())
    }

    /// The stored account, if any (instant-acme's credentials as JSON).
    pub fn account(&self) -> Result<Option<Vec<u8>>, StoreError> {
        read_if_there(&self.ca.join("account.json"))
    }

    /// Stores the account.
    pub fn save_account(&self, json: &[u8]) -> Result<(), StoreError> {
        let path = self.ca.join("account.json");
        write_atomic(&path, json).map_err(|source| StoreError::Write { path, source })
    }

    fn certificate_dir(&self, name: &str) -> PathBuf {
        self.ca.join("certificates").join(name)
    }

    /// The path of the certificate named `name` (its key, then its chain, PEM).
    pub fn certificate_path(&self, name: &str) -> PathBuf {
        self.certificate_dir(name).join("certificate-and-key.pem")
    }

    /// The stored certificate named `name`, if any.
    pub fn certificate(&self, name: &str) -> Result<Option<Vec<u8>>, StoreError> {
        read_if_there(&self.certificate_path(name))
    }

    /// Stores the certificate named `name` (the key, then the chain, PEM).
    pub fn save_certificate(&self, name: &str, pem: &[u8]) -> Result<(), StoreError> {
        let dir = self.certificate_dir(name);
        make_private_dir(&dir).map_err(|source| StoreError::Unwritable {
            dir: dir.clone(),
            source,
        })?;
        let path = self.certificate_path(name);
        write_atomic(&path, pem).map_err(|source| StoreError::Write { path, source })
    }

    /// Takes the lock of the certificate named `name` if no other process holds it.
    pub fn try_lock(&self, name: &str) -> Result<Option<CertificateLock>, StoreError> {
        let dir = self.certificate_dir(name);
        let unwritable = |source| StoreError::Unwritable {
            dir: dir.clone(),
            source,
        };
        make_private_dir(&dir).map_err(unwritable)?;
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .mode(0o600)
            .open(dir.join("lock"))
            .map_err(unwritable)?;
        match rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => Ok(Some(CertificateLock { _file: file })),
            Err(rustix::io::Errno::WOULDBLOCK) => Ok(None),
            Err(errno) => Err(unwritable(errno.into())),
        }
    }

    fn answer_path(&self, kind: AnswerKind, key: &str) -> Option<PathBuf> {
        kind.valid_key(key)
            .then(|| self.ca.join("challenges").join(kind.dir()).join(key))
    }

    /// Publishes a challenge answer for the replicas (and this process's other
    /// listeners) to find.
    pub fn put_answer(
        &self,
        kind: AnswerKind,
        key: &str,
        key_authorization: &str,
    ) -> Result<(), StoreError> {
        let Some(path) = self.answer_path(kind, key) else {
            return Err(StoreError::Write {
                path: self.ca.join("challenges").join(kind.dir()),
                source: io::Error::new(io::ErrorKind::InvalidInput, "not a valid challenge key"),
            });
        };
        write_atomic(&path, key_authorization.as_bytes())
            .map_err(|source| StoreError::Write { path, source })
    }

    /// A published answer, if there is one (`None` for a key that could not name one).
    pub fn answer(&self, kind: AnswerKind, key: &str) -> Option<String> {
        let path = self.answer_path(kind, key)?;
        let text = fs::read_to_string(path).ok()?;
        Some(text.trim().to_string())
    }

    /// Removes a published answer (gone already is fine).
    pub fn remove_answer(&self, kind: AnswerKind, key: &str) {
        if let Some(path) = self.answer_path(kind, key) {
            let _ = fs::remove_file(path);
        }
    }
}

/// A held certificate lock; released when dropped (or when the process ends).
#[derive(Debug)]
pub struct CertificateLock {
    _file: File,
}

/// The directory name of a CA: its URL's host, port and path, with every character
/// other than letters, digits, `.` and `_` made `-` (Caddy's layout does the same).
pub fn ca_dir_name(directory_url: &str) -> String {
    let without_scheme = directory_url
        .split_once("://")
        .map_or(directory_url, |(_, rest)| rest);
    let name: String = without_scheme
        .chars()
        .map(|c| match c {
            'a'..='z' | 'A'..='Z' | '0'..='9' | '.' | '_' => c,
            _ => '-',
        })
        .collect();
    let name = name.trim_matches('-');
    match name.is_empty() {
        true => "ca".to_string(),
        false => name.to_string(),
    }
}

/// Creates `dir` and its parents as needed, 0700, and narrows an existing `dir` to
/// 0700.
fn make_private_dir(dir: &Path) -> io::Result<()> {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    let metadata = fs::metadata(dir)?;
    if metadata.permissions().mode() & 0o077 != 0 {
        fs::set_permissions(dir, fs::Permissions::from_mode(0o700))?;
    }
    Ok(())
}

/// The contents of `path`, or `None` when there is no such file.
fn read_if_there(path: &Path) -> Result<Option<Vec<u8>>, StoreError> {
    match fs::read(path) {
        Ok(bytes) => Ok(Some(bytes)),
        Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(StoreError::Read {
            path: path.to_path_buf(),
            source,
        }),
    }
}

/// Makes each temporary file's name unique within the process.
static TEMPORARIES: AtomicU64 = AtomicU64::new(0);

/// Replaces `path` with `bytes` (mode 0600) so that a reader, or a crash, sees the old
/// file or the new one, never a part: a temporary file beside it, flushed, renamed
/// over it, and the directory flushed. A failure removes the temporary file.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let temporary = dir.join(format!(
        ".{name}.tmp-{}-{}",
        std::process::id(),
        TEMPORARIES.fetch_add(1, Ordering::Relaxed)
    ));
    let written = (|| {
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&temporary)?;
        file.write_all(bytes)?;
        file.sync_all()?;
        fs::rename(&temporary, path)?;
        File::open(dir)?.sync_all()
    })();
    if written.is_err() {
        let _ = fs::remove_file(&temporary);
    }
    written
}

/// Removes temporary files older than [`STALE_TEMPORARY`] anywhere under `dir`.
fn remove_stale_temporaries(dir: &Path) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        let path = entry.path();
        if kind.is_dir() {
            remove_stale_temporaries(&path);
        } else if entry.file_name().to_string_lossy().contains(".tmp-") {
            let age = entry
                .metadata()
                .and_then(|m| m.modified())
                .ok()
                .and_then(|modified| SystemTime::now().duration_since(modified).ok());
            if age.is_some_and(|age| age >= STALE_TEMPORARY) {
                let _ = fs::remove_file(&path);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode(path: &Path) -> u32 {
        fs::metadata(path).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn the_layout_is_private_and_files_are_replaced_whole() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("state");
        let store = Store::new(&root, "https://127.0.0.1:14000/dir");
        store.prepare().unwrap();
        assert_eq!(mode(&root), 0o700);
        assert_eq!(mode(&root.join("127.0.0.1-14000-dir")), 0o700);
        assert_eq!(store.account().unwrap(), None);
        store.save_account(b"{\"id\":1}").unwrap();
        store.save_account(b"{\"id\":2}").unwrap();
        assert_eq!(store.account().unwrap().unwrap(), b"{\"id\":2}");
        store.save_certificate("example.test", b"PEM").unwrap();
        let path = store.certificate_path("example.test");
        assert_eq!(mode(&path), 0o600);
        assert_eq!(mode(path.parent().unwrap()), 0o700);
        assert_eq!(store.certificate("example.test").unwrap().unwrap(), b"PEM");
        // Nothing temporary is left behind.
        let leftovers = walk(&root)
            .into_iter()
            .filter(|p| p.file_name().unwrap().to_string_lossy().contains(".tmp-"))
            .count();
        assert_eq!(leftovers, 0);
    }

    fn walk(dir: &Path) -> Vec<PathBuf> {
        let mut found = Vec::new();
        for entry in fs::read_dir(dir).unwrap().flatten() {
            found.push(entry.path());
            if entry.file_type().unwrap().is_dir() {
                found.extend(walk(&entry.path()));
            }
        }
        found
    }

    #[test]
    fn an_existing_open_directory_is_narrowed() {
        let dir = tempfile::tempdir().unwrap();
        fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755)).unwrap();
        Store::new(dir.path(), "https://ca.test/dir")
            .prepare()
            .unwrap();
        assert_eq!(mode(dir.path()), 0o700);
    }

    #[test]
    fn a_directory_that_cannot_be_made_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("a-file");
        fs::write(&file, b"").unwrap();
        let store = Store::new(&file.join("acme"), "https://ca.test/dir");
        let error = store.prepare().unwrap_err().to_string();
        assert!(
            error.starts_with("cannot write the state directory") && error.contains("a-file/acme"),
            "{error}"
        );
        // A failed write leaves the old file and no temporary one.
        let target = dir.path().join("kept");
        fs::write(&target, b"old").unwrap();
        assert!(write_atomic(&dir.path().join("a-file/x"), b"new").is_err());
        assert_eq!(fs::read(&target).unwrap(), b"old");
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 2);
    }

    #[test]
    fn stale_temporaries_go_and_fresh_ones_stay() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::new(dir.path(), "https://ca.test/dir");
        store.prepare().unwrap();
        let ca = dir.path().join("ca.test-dir");
        let stale = ca.join(".account.json.tmp-1-0");
        let fresh = ca.join(".account.json.tmp-2-0");
        fs::write(&stale, b"half").unwrap();
        fs::write(&fresh, b"half").unwrap();
        let old = SystemTime::now() - STALE_TEMPORARY - Duration::from_secs(1);
        File::options()
            .write(true)
            .open(&stale)
            .unwrap()
            .set_modified(old)
            .unwrap();
        store.prepare().unwrap();
        assert!(!stale.exists() && fresh.exists());
        // A half-written temporary file is never taken for the account.
        assert_eq!(store.account().unwrap(), None);
    }

    #[test]
    fn one_holder_of_a_lock_at_a_time() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::new(dir.path(), "https://ca.test/dir");
        store.prepare().unwrap();
        let held = store.try_lock("example.test").unwrap();
        assert!(held.is_some());
        // flock locks belong to the open file: a second open, as another process
        // makes, is refused while the first is held.
        assert!(store.try_lock("example.test").unwrap().is_none());
        drop(held);
        assert!(store.try_lock("example.test").unwrap().is_some());
    }

    #[test]
    fn answers_are_published_by_valid_keys_only() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::new(dir.path(), "https://ca.test/dir");
        store.prepare().unwrap();
        store
            .put_answer(AnswerKind::Http01, "tok_EN-1", "tok_EN-1.thumb")
            .unwrap();
        assert_eq!(
            store.answer(AnswerKind::Http01, "tok_EN-1").as_deref(),
            Some("tok_EN-1.thumb")
        );
        for bad in ["../account.json", "a/b", "", "a.b"] {
            assert_eq!(store.answer(AnswerKind::Http01, bad), None, "{bad}");
            assert!(store.put_answer(AnswerKind::Http01, bad, "x").is_err());
        }
        store
            .put_answer(AnswerKind::TlsAlpn01, "example.test", "k")
            .unwrap();
        assert_eq!(store.answer(AnswerKind::TlsAlpn01, "../x"), None);
        assert_eq!(store.answer(AnswerKind::TlsAlpn01, "EXAMPLE.test"), None);
        store.remove_answer(AnswerKind::TlsAlpn01, "example.test");
        assert_eq!(store.answer(AnswerKind::TlsAlpn01, "example.test"), None);
    }

    #[test]
    fn ca_directories_are_named_after_the_url() {
        assert_eq!(
            ca_dir_name("https://acme-v02.api.letsencrypt.org/directory"),
            "acme-v02.api.letsencrypt.org-directory"
        );
        assert_eq!(
            ca_dir_name("https://127.0.0.1:14000/dir"),
            "127.0.0.1-14000-dir"
        );
        assert_eq!(ca_dir_name("https://"), "ca");
    }
}
