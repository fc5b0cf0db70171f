//! The master secret's file (`--nts-key-file`): 64 hexadecimal digits (32 bytes) on
//! one line. Replicas behind one address that read the same file make and open the
//! same cookies, and a restart keeps the cookies clients hold. A missing file is
//! created with a random secret, readable by its owner only.

use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};

/// Why the secret file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum SecretFileError {
    /// It cannot be read or created.
    #[error("NTS key file {path}: {cause}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The system's error.
        #[source]
        cause: std::io::Error,
    },
    /// It does not hold a secret.
    #[error(
        "NTS key file {path}: expected 64 hexadecimal digits (a 32-byte secret) on one \
         line, as `head -c 32 /dev/urandom | xxd -p -c 32` writes; delete it to have \
         a new one made"
    )]
    Format {
        /// The file.
        path: PathBuf,
    },
    /// The operating system gave no random numbers.
    #[error("NTS key file {path}: no random numbers for a new secret: {cause}")]
    Random {
        /// The file.
        path: PathBuf,
        /// The error.
        cause: getrandom::Error,
    },
}

/// Reads the secret in `path` (a reload: a missing file is an error, never a new
/// secret).
pub fn read(path: &Path) -> Result<[u8; 32], SecretFileError> {
    let text = std::fs::read_to_string(path).map_err(|cause| SecretFileError::Io {
        path: path.to_owned(),
        cause,
    })?;
    parse(&text).ok_or_else(|| SecretFileError::Format {
        path: path.to_owned(),
    })
}

/// Reads the secret in `path`, or creates the file with a new random secret (mode
/// 0600) when there is none. Returns the secret and whether this call created it.
pub fn read_or_create(path: &Path) -> Result<([u8; 32], bool), SecretFileError> {
    let io = |cause| SecretFileError::Io {
        path: path.to_owned(),
        cause,
    };
    match read(path) {
        Ok(secret) => Ok((secret, false)),
        Err(SecretFileError::Io { cause, .. }) if cause.kind() == std::io::ErrorKind::NotFound => {
            // The secret, and a name of its own for the staging file.
            let mut random = [0; 40];
            getrandom::fill(&mut random).map_err(|cause| SecretFileError::Random {
                path: path.to_owned(),
                cause,
            })?;
            let secret: [u8; 32] = random[..32].try_into().expect("32 bytes");
            let tag = u64::from_ne_bytes(random[32..].try_into().expect("8 bytes"));
            // Written whole under another name, then linked into place: a replica
            // starting at the same moment never reads half a secret, and the one
            // whose link loses reads the winner's.
            let staging = path.with_extension(format!("new-{tag:016x}"));
            let written = write_private(&staging, &secret);
            let linked = written.and_then(|()| std::fs::hard_link(&staging, path));
            let _ = std::fs::remove_file(&staging);
            match linked {
                Ok(()) => Ok((secret, true)),
                Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => {
                    read_or_create(path)
                }
                Err(error) => Err(io(error)),
            }
        }
        Err(error) => Err(error),
    }
}

/// Writes `secret` as hex to a new file at `path`, readable by its owner only.
fn write_private(path: &Path, secret: &[u8; 32]) -> std::io::Result<()> {
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)?;
    let hex: String = secret.iter().map(|b| format!("{b:02x}")).collect();
    writeln!(file, "{hex}")?;
    file.sync_all()
}

/// The secret in a file's text.
fn parse(text: &str) -> Option<[u8; 32]> {
    let digits = text.trim();
    if digits.len() != 64 || !digits.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let mut secret = [0; 32];
    for (byte, pair) in secret.iter_mut().zip(digits.as_bytes().chunks_exact(2)) {
        *byte = u8::from_str_radix(std::str::from_utf8(pair).ok()?, 16).ok()?;
    }
    Some(secret)
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt as _;

    use super::*;

    #[test]
    fn a_missing_file_is_created_private_and_read_back_the_same() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("nts.key");
        assert!(
            matches!(read(&path), Err(SecretFileError::Io { .. })),
            "a reload never creates"
        );
        let (made, created) = read_or_create(&path).unwrap();
        assert!(created);
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        assert_eq!(read_or_create(&path).unwrap(), (made, false));
        std::fs::write(&path, "not a secret\n").unwrap();
        let error = read_or_create(&path).unwrap_err().to_string();
        assert!(
            error.contains("nts.key") && error.contains("64 hexadecimal"),
            "{error}"
        );
    }

    #[test]
    fn replicas_making_the_file_at_once_agree_on_one_secret() {
        let dir = tempfile::tempdir().unwrap();
        let dir = dir.path();
        for round in 0..20 {
            let path = dir.join(format!("nts-{round}.key"));
            let made: Vec<([u8; 32], bool)> = std::thread::scope(|scope| {
                let racers: Vec<_> = (0..4)
                    .map(|_| scope.spawn(|| read_or_create(&path).unwrap()))
                    .collect();
                racers.into_iter().map(|r| r.join().unwrap()).collect()
            });
            assert_eq!(made.iter().filter(|(_, created)| *created).count(), 1);
            assert!(made.iter().all(|(secret, _)| *secret == made[0].0));
        }
        let left: Vec<_> = std::fs::read_dir(dir).unwrap().collect();
        assert_eq!(left.len(), 20, "no staging file is left behind");
    }

    #[test]
    fn the_secret_is_64_hex_digits() {
        let text = "00ff".repeat(16) + "\n";
        let secret = parse(&text).unwrap();
        assert_eq!((secret[0], secret[1]), (0, 0xff));
        assert!(parse(&"0".repeat(63)).is_none());
        assert!(parse(&"g".repeat(64)).is_none());
        assert!(parse(&"+f".repeat(32)).is_none(), "only hex digits");
    }
}
