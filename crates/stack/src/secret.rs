//! Secrets a stack file names but does not hold: key files and environment variables.
//!
//! A real deployment keeps key material out of its stack files (`docs/APPLICATIONS.md` §7): a
//! layer parameter names a file (like `encrypt`'s `key_file`) or an environment variable
//! (`key_env`), and the layer's factory reads it here when the stack is built, so each node
//! reads its own copy and the stack file can be shared, versioned and printed.
//!
//! Rules:
//! - a key file must be a regular file (symbolic links are followed) of at most
//!   [`MAX_FILE_LEN`] bytes of UTF-8 text; on Unix, group and others must have no access to it
//!   (`mode & 0o077 == 0`), as OpenSSH requires of a private key, and the error says
//!   `chmod 600 FILE`. The mode is checked on the opened file before anything is read;
//! - an environment variable must have a valid name (not empty, no `=` or NUL), be set, and
//!   hold UTF-8 text.
//!
//! What is read comes back as a [`Secret`], which `Debug` and `Display` print as `<secret>`;
//! errors name the file or the variable and the reason, never the contents.
//!
//! # Errors
//! [`SecretError`], one variant per reason.

use std::fmt;
use std::io::Read as _;
use std::path::{Path, PathBuf};

/// Longest key file read: a key file holds a few dozen bytes, so anything longer is a wrong
/// path (a log, a device), refused before it fills memory.
pub const MAX_FILE_LEN: u64 = 4096;

/// Text that is never printed: key material from a stack file, a key file or the environment.
/// `Debug` and `Display` show `<secret>`.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wraps `text`.
    pub fn new(text: impl Into<String>) -> Self {
        Secret(text.into())
    }

    /// The text itself, for the code that turns it into a key.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<secret>")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<secret>")
    }
}

/// Why a secret could not be read. Messages name the file or variable, never the contents.
#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    /// The file cannot be opened or read.
    #[error("cannot read key file `{}`: {error}", path.display())]
    Unreadable {
        /// The file.
        path: PathBuf,
        /// Why.
        error: std::io::Error,
    },
    /// A directory, device, pipe or socket.
    #[error("key file `{}` is not a regular file", path.display())]
    NotAFile {
        /// The file.
        path: PathBuf,
    },
    /// Group or others have access (Unix).
    #[error(
        "key file `{path}` has permissions {mode:04o}, too open: group or others may access \
         it; run `chmod 600 {path}`",
        path = path.display()
    )]
    TooOpen {
        /// The file.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
    /// Longer than [`MAX_FILE_LEN`].
    #[error("key file `{}` is longer than {MAX_FILE_LEN} bytes: not a key file", path.display())]
    TooLong {
        /// The file.
        path: PathBuf,
    },
    /// Not UTF-8 text.
    #[error("key file `{}` is not text (UTF-8)", path.display())]
    NotText {
        /// The file.
        path: PathBuf,
    },
    /// Not a name the environment can hold.
    #[error("`{name}` is not an environment variable name (empty, or holds `=` or NUL)")]
    BadName {
        /// The name.
        name: String,
    },
    /// The variable is not set.
    #[error("environment variable `{name}` is not set")]
    Unset {
        /// The name.
        name: String,
    },
    /// The variable is not UTF-8 text.
    #[error("environment variable `{name}` is not text (UTF-8)")]
    EnvNotText {
        /// The name.
        name: String,
    },
}

/// Reads the key file `path` (see the module's rules).
///
/// # Errors
/// [`SecretError::Unreadable`], [`SecretError::NotAFile`], [`SecretError::TooOpen`] (Unix),
/// [`SecretError::TooLong`], [`SecretError::NotText`].
pub fn read_file(path: &Path) -> Result<Secret, SecretError> {
    let unreadable = |error| SecretError::Unreadable {
        path: path.to_path_buf(),
        error,
    };
    let not_a_file = || SecretError::NotAFile {
        path: path.to_path_buf(),
    };
    // Looked at before opening too: opening a named pipe would wait for a writer.
    if !std::fs::metadata(path).map_err(unreadable)?.is_file() {
        return Err(not_a_file());
    }
    let file = std::fs::File::open(path).map_err(unreadable)?;
    // The checks look at the opened file, so the file read is the file checked.
    let meta = file.metadata().map_err(unreadable)?;
    if !meta.is_file() {
        return Err(not_a_file());
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        let mode = meta.permissions().mode() & 0o7777;
        if mode & 0o077 != 0 {
            return Err(SecretError::TooOpen {
                path: path.to_path_buf(),
                mode,
            });
        }
    }
    let mut bytes = Vec::new();
    file.take(MAX_FILE_LEN + 1)
        .read_to_end(&mut bytes)
        .map_err(unreadable)?;
    if bytes.len() as u64 > MAX_FILE_LEN {
        return Err(SecretError::TooLong {
            path: path.to_path_buf(),
        });
    }
    String::from_utf8(bytes)
        .map(Secret)
        .map_err(|_| SecretError::NotText {
            path: path.to_path_buf(),
        })
}

/// Reads environment variable `name`.
///
/// # Errors
/// [`SecretError::BadName`], [`SecretError::Unset`], [`SecretError::EnvNotText`].
pub fn read_env(name: &str) -> Result<Secret, SecretError> {
    if name.is_empty() || name.contains(['=', '\0']) {
        return Err(SecretError::BadName {
            name: name.to_string(),
        });
    }
    match std::env::var(name) {
        Ok(text) => Ok(Secret(text)),
        Err(std::env::VarError::NotPresent) => Err(SecretError::Unset {
            name: name.to_string(),
        }),
        Err(std::env::VarError::NotUnicode(_)) => Err(SecretError::EnvNotText {
            name: name.to_string(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_never_print() {
        let s = Secret::new("hunter2");
        assert_eq!(format!("{s} {s:?}"), "<secret> <secret>");
        assert_eq!(s.expose(), "hunter2");
    }

    #[cfg(unix)]
    #[test]
    fn a_named_pipe_is_refused_without_waiting_for_a_writer() {
        let dir = std::env::temp_dir().join(format!("viastack-secret-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let fifo = dir.join("group.key");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status();
        if made.is_ok_and(|s| s.success()) {
            assert!(matches!(
                read_file(&fifo),
                Err(SecretError::NotAFile { .. })
            ));
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn bad_variable_names_are_errors_not_panics() {
        for name in ["", "A=B", "A\0B"] {
            assert!(
                matches!(read_env(name), Err(SecretError::BadName { .. })),
                "{name:?}"
            );
        }
    }
}
