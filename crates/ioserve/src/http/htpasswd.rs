//! Apache's htpasswd files (`user:hash` per line) with the hashes that resist guessing:
//! bcrypt (`$2y$`, `$2b$`, `$2a$`: `htpasswd -B`) and SHA-crypt (`$5$` SHA-256:
//! `htpasswd -2`, `$6$` SHA-512: `htpasswd -5`). MD5-crypt (`$apr1$`, htpasswd's
//! default), SHA-1 (`{SHA}`), crypt(3) DES and plain text are refused with the line
//! that holds them, as are malformed lines; blank lines and `#` comments are skipped.

use std::path::{Path, PathBuf};

use subtle::ConstantTimeEq as _;

/// What an htpasswd line may hold, for the errors.
const ALLOWED: &str = "allowed: user:hash with a bcrypt ($2y$, made by htpasswd -B) or \
     SHA-crypt ($5$ or $6$, made by htpasswd -2 or -5) hash";

/// Why an htpasswd file is refused.
#[derive(Debug, thiserror::Error)]
pub enum HtpasswdError {
    /// The file cannot be read.
    #[error("cannot read auth file {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// A line is not a user with an allowed hash.
    #[error("auth file {} line {line}: {problem}; {ALLOWED}", path.display())]
    Line {
        /// The file.
        path: PathBuf,
        /// The line number, from 1.
        line: usize,
        /// What is wrong with it.
        problem: String,
    },
    /// The file names no user: every request would be refused.
    #[error("auth file {} has no user; {ALLOWED}", path.display())]
    Empty {
        /// The file.
        path: PathBuf,
    },
}

/// A password hash of an accepted kind.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PasswordHash {
    /// bcrypt, `$2y$` (Apache), `$2b$` or `$2a$`.
    Bcrypt(String),
    /// SHA-crypt with SHA-256, `$5$`.
    Sha256Crypt(String),
    /// SHA-crypt with SHA-512, `$6$`.
    Sha512Crypt(String),
}

impl PasswordHash {
    /// Reads a hash, or says why it is not accepted.
    fn parse(hash: &str) -> Result<PasswordHash, String> {
        if hash.starts_with("$2") {
            hash.parse::<bcrypt::HashParts>()
                .map_err(|error| format!("malformed bcrypt hash ({error})"))?;
            Ok(PasswordHash::Bcrypt(hash.to_owned()))
        } else if let Some(rest) = hash.strip_prefix("$5$") {
            sha_crypt_fields(rest, 43)?;
            Ok(PasswordHash::Sha256Crypt(hash.to_owned()))
        } else if let Some(rest) = hash.strip_prefix("$6$") {
            sha_crypt_fields(rest, 86)?;
            Ok(PasswordHash::Sha512Crypt(hash.to_owned()))
        } else if hash.starts_with("$apr1$") || hash.starts_with("$1$") {
            Err("MD5-crypt hashes are refused (too fast to guess against)".to_owned())
        } else if hash.starts_with("{SHA}") {
            Err("SHA-1 hashes are refused (unsalted, too fast to guess against)".to_owned())
        } else if hash.len() == 13 && !hash.starts_with('$') {
            Err("crypt(3) DES hashes or plain passwords are refused".to_owned())
        } else {
            Err("plain passwords and unknown hashes are refused".to_owned())
        }
    }

    /// Whether `password` matches: slow by design (bcrypt's cost, SHA-crypt's rounds),
    /// so callers run it off the event loop.
    pub fn verify(&self, password: &[u8]) -> bool {
        match self {
            PasswordHash::Bcrypt(hash) => bcrypt::verify(password, hash).unwrap_or(false),
            PasswordHash::Sha256Crypt(hash) => std::str::from_utf8(password)
                .is_ok_and(|password| sha_crypt::sha256_check(password, hash).is_ok()),
            PasswordHash::Sha512Crypt(hash) => std::str::from_utf8(password)
                .is_ok_and(|password| sha_crypt::sha512_check(password, hash).is_ok()),
        }
    }
}

/// Checks SHA-crypt's `[rounds=N$]salt$hash` after the `$5$`/`$6$` prefix: a salt of
/// at most 16 characters and a hash of `hash_len` characters of crypt's alphabet.
fn sha_crypt_fields(rest: &str, hash_len: usize) -> Result<(), String> {
    let rest = match rest.strip_prefix("rounds=") {
        Some(rounds) => {
            let (number, rest) = rounds.split_once('$').unwrap_or((rounds, ""));
            number
                .parse::<u32>()
                .map_err(|_| format!("malformed SHA-crypt rounds {number:?}"))?;
            rest
        }
        None => rest,
    };
    let crypt_alphabet = |text: &str| {
        text.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'/')
    };
    match rest.split_once('$') {
        Some((salt, hash))
            if salt.len() <= 16
                && !salt.contains('$')
                && hash.len() == hash_len
                && crypt_alphabet(hash) =>
        {
            Ok(())
        }
        _ => Err(format!(
            "malformed SHA-crypt hash (expected [rounds=N$]salt$hash, the hash {hash_len} \
             characters)"
        )),
    }
}

/// The users of an htpasswd file and their password hashes.
#[derive(Clone, Debug)]
pub struct Htpasswd {
    users: Vec<(String, PasswordHash)>,
}

impl Htpasswd {
    /// Reads and checks the file at `path`.
    pub fn load(path: &Path) -> Result<Htpasswd, HtpasswdError> {
        let text = std::fs::read_to_string(path).map_err(|source| HtpasswdError::Read {
            path: path.to_owned(),
            source,
        })?;
        Htpasswd::parse(path, &text)
    }

    /// Reads `text`, the content of the file at `path` (named in errors).
    pub fn parse(path: &Path, text: &str) -> Result<Htpasswd, HtpasswdError> {
        let mut users: Vec<(String, PasswordHash)> = Vec::new();
        for (index, line) in text.lines().enumerate() {
            let refuse = |problem: String| HtpasswdError::Line {
                path: path.to_owned(),
                line: index + 1,
                problem,
            };
            let line = line.trim_end_matches('\r');
            if line.trim().is_empty() || line.starts_with('#') {
                continue;
            }
            let Some((user, hash)) = line.split_once(':') else {
                return Err(refuse("no ':' between the user and the hash".to_owned()));
            };
            if user.is_empty() {
                return Err(refuse("empty user name".to_owned()));
            }
            if users.iter().any(|(known, _)| known == user) {
                return Err(refuse(format!("user {user:?} appears twice")));
            }
            let hash = PasswordHash::parse(hash.trim_end())
                .map_err(|problem| refuse(format!("user {user:?}: {problem}")))?;
            users.push((user.to_owned(), hash));
        }
        if users.is_empty() {
            return Err(HtpasswdError::Empty {
                path: path.to_owned(),
            });
        }
        Ok(Htpasswd { users })
    }

    /// The hash of `user`. Every name is compared in constant time, so the time taken
    /// does not tell how much of a name was right.
    pub fn hash_of(&self, user: &[u8]) -> Option<&PasswordHash> {
        let mut found = None;
        for (name, hash) in &self.users {
            if bool::from(name.as_bytes().ct_eq(user)) {
                found = Some(hash);
            }
        }
        found
    }

    /// A hash of the file, to spend the work of a verification on a user it lacks.
    pub fn any_hash(&self) -> &PasswordHash {
        // `parse` refuses a file without users.
        &self.users[0].1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `htpasswd -nbB alice secret`, `htpasswd -nb2 bob secret`,
    /// `htpasswd -nb5 -r 1000 carol secret`.
    const FILE: &str = "\
# made by htpasswd
alice:$2y$05$W6zeqDpoW/Zw8O8ifqJ3oOTEpmMSBQVBQNFnRkmqqpqArpwakErVC

bob:$5$9pxgMwmqtdoMG5Mk$xGelxyV7N7ElA3PGpcNUjHXn8TveOC37tj4hA4Z0eg7
carol:$6$rounds=1000$uF0zkj2p3gKk6QBF$kG3nZxIcQSOW.KfstaN27AX8NgfJgomF5ncg7MwSAcxpC1S9lpddoXu1GXQPiZeJtJe96vPZnPBjsrcUjPb1X.
";

    fn error(text: &str) -> String {
        Htpasswd::parse(Path::new("/etc/ioserve/htpasswd"), text)
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn bcrypt_and_sha_crypt_entries_are_read() {
        let file = Htpasswd::parse(Path::new("htpasswd"), FILE).unwrap();
        let alice = file.hash_of(b"alice").unwrap();
        assert!(matches!(alice, PasswordHash::Bcrypt(_)));
        assert!(file.hash_of(b"alic").is_none() && file.hash_of(b"").is_none());
        assert!(matches!(
            file.hash_of(b"bob"),
            Some(PasswordHash::Sha256Crypt(_))
        ));
        assert!(matches!(
            file.hash_of(b"carol"),
            Some(PasswordHash::Sha512Crypt(_))
        ));
    }

    #[test]
    fn weak_and_malformed_lines_are_refused_with_their_line() {
        let md5 = error("alice:$2y$05$W6zeqDpoW/Zw8O8ifqJ3oOTEpmMSBQVBQNFnRkmqqpqArpwakErVC\nbob:$apr1$.T6Iag/0$jqTJAOZg4ymdfDKWyB4H8/\n");
        assert!(
            md5.starts_with("auth file /etc/ioserve/htpasswd line 2: user \"bob\": MD5-crypt")
                && md5.contains("allowed: user:hash with a bcrypt"),
            "{md5}"
        );
        for (text, problem) in [
            ("u:{SHA}5en6G6MezRroT3XKqkdPOmY/BfQ=", "SHA-1"),
            ("u:n2I6exydkJAEE", "DES"),
            ("u:secret", "plain"),
            ("no colon here", "no ':'"),
            (
                ":$2y$05$W6zeqDpoW/Zw8O8ifqJ3oOTEpmMSBQVBQNFnRkmqqpqArpwakErVC",
                "empty user",
            ),
            ("u:$2y$05$short", "malformed bcrypt"),
            ("u:$5$salt$tooshort", "malformed SHA-crypt"),
            ("u:$6$rounds=many$salt$x", "rounds"),
        ] {
            let error = error(text);
            assert!(
                error.contains("line 1:") && error.contains(problem),
                "{text}: {error}"
            );
        }
        assert!(error("a:$5$9pxgMwmqtdoMG5Mk$xGelxyV7N7ElA3PGpcNUjHXn8TveOC37tj4hA4Z0eg7\na:$5$9pxgMwmqtdoMG5Mk$xGelxyV7N7ElA3PGpcNUjHXn8TveOC37tj4hA4Z0eg7\n").contains("line 2: user \"a\" appears twice"));
        assert!(error("# nobody\n\n").contains("has no user"));
    }

    #[test]
    fn only_the_right_password_verifies() {
        let file = Htpasswd::parse(Path::new("htpasswd"), FILE).unwrap();
        for user in [&b"alice"[..], b"bob", b"carol"] {
            let hash = file.hash_of(user).unwrap();
            assert!(hash.verify(b"secret"), "{hash:?}");
            assert!(!hash.verify(b"Secret"), "{hash:?}");
            assert!(!hash.verify(b""), "{hash:?}");
            assert!(!hash.verify(b"secret\xff"), "{hash:?}");
        }
    }
}
