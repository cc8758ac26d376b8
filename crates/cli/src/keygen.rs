//! `viastack keygen [--out FILE]`: a group key for the `encrypt` layer, 32 bytes from the
//! operating system's random source (`ring::rand::SystemRandom`, i.e. `getrandom`), written
//! as the 64 hex digits `encrypt::parse_key` reads.
//!
//! Without `--out` the key goes to standard output and nothing else does. With `--out` it goes
//! to a new file created with mode 0600 (owner only, as `key_file` requires on Unix); an
//! existing file is never overwritten, so a key in use cannot be lost by a repeated command.
//! Deploying the file is described in `docs/APPLICATIONS.md` §7.

use std::io::Write as _;
use std::path::Path;

use anyhow::{anyhow, bail, Context as _};
use ring::rand::SecureRandom as _;
use viastack_protocols::encrypt;

/// Runs the command.
///
/// # Errors
/// The random source failing, or the file existing or not being writable.
pub fn run(out: Option<&Path>) -> anyhow::Result<()> {
    let mut key = [0u8; 32];
    ring::rand::SystemRandom::new()
        .fill(&mut key)
        .map_err(|_| anyhow!("the operating system's random source failed"))?;
    let hex = encrypt::format_key(&key);
    match out {
        None => outln!("{hex}")?,
        Some(path) => {
            write_new(path, &hex)?;
            eprintln!(
                "wrote a new group key to {} (mode 0600); copy it to every node over a secure \
                 channel and name it in the stack file with key_file",
                path.display()
            );
        }
    }
    Ok(())
}

/// Creates `path` (mode 0600 on Unix) holding `hex` and a newline; refuses an existing file.
fn write_new(path: &Path, hex: &str) -> anyhow::Result<()> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt as _;
        options.mode(0o600);
    }
    let mut file = match options.open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => bail!(
            "{} exists: refusing to overwrite it (a key in use would be lost); remove it first \
             or choose another file",
            path.display()
        ),
        Err(e) => return Err(e).with_context(|| format!("{}: cannot create", path.display())),
    };
    writeln!(file, "{hex}")
        .and_then(|()| file.sync_all())
        .with_context(|| format!("{}: cannot write", path.display()))
}
