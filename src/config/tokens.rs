//! The token files of `[http]`: `admin_token_file` and `read_token_file`.

use std::path::Path;

/// The admin token in `[http] admin_token_file` (`path`): refused, with the fix, when group or
/// others may read the file, when it belongs to neither this user nor root (as `auth_file`),
/// or when it holds no token (one line, at least 16 characters, no spaces).
pub fn read_admin_token(path: &Path) -> Result<String, String> {
    read_token(path, "admin_token_file")
}

/// The token in the file `path` of `[http] key` (`admin_token_file`, `read_token_file`), by
/// the rules of [`read_admin_token`].
pub fn read_token(path: &Path, key: &str) -> Result<String, String> {
    use std::os::unix::fs::MetadataExt;
    let shown = path.display();
    let meta =
        std::fs::metadata(path).map_err(|e| format!("cannot read the {key} {shown}: {e}"))?;
    if meta.mode() & 0o077 != 0 {
        return Err(format!(
            "the {key} {shown} may be read by group or others (mode {:o}); run \
             `chmod 600 {shown}`",
            meta.mode() & 0o777
        ));
    }
    let me = nix::unistd::geteuid().as_raw();
    if meta.uid() != me && meta.uid() != 0 {
        return Err(format!(
            "the {key} {shown} belongs to uid {}, neither this user (uid {me}) nor \
             root; `chown` it to the user zkcron runs as and `chmod 600 {shown}`",
            meta.uid()
        ));
    }
    let text =
        std::fs::read_to_string(path).map_err(|e| format!("cannot read the {key} {shown}: {e}"))?;
    let token = text.trim();
    if token.len() < MIN_ADMIN_TOKEN || token.contains(char::is_whitespace) {
        return Err(format!(
            "the {key} {shown} must hold one token of at least {MIN_ADMIN_TOKEN} \
             characters without spaces; make one with `openssl rand -hex 32 > {shown}`"
        ));
    }
    Ok(token.to_string())
}

/// The shortest admin token accepted.
pub const MIN_ADMIN_TOKEN: usize = 16;
