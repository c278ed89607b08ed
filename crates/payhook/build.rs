//! Stamps the binary with the commit it was built from, for `payhook --version` and the `payhook_build_info`
//! metric: `git rev-parse --short=12 HEAD` in a git checkout, else the `PAYHOOK_COMMIT` environment variable (a
//! build from a source archive or a container context without `.git`), else `unknown`.

use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-env-changed=PAYHOOK_COMMIT");
    let dir = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap_or_default());
    let commit = git(&dir, &["rev-parse", "--short=12", "HEAD"])
        .filter(|c| c.len() == 12 && c.bytes().all(|b| b.is_ascii_hexdigit()))
        .inspect(|_| watch_head(&dir))
        .or_else(|| std::env::var("PAYHOOK_COMMIT").ok().map(|c| c.trim().to_owned()).filter(|c| !c.is_empty()))
        .unwrap_or_else(|| "unknown".to_owned());
    println!("cargo:rustc-env=PAYHOOK_COMMIT={commit}");
}

/// Asks cargo to run this script again when HEAD moves: a commit, a checkout, a rebase. In a worktree the files
/// live under the common git directory, so their paths are asked of git rather than assumed to be `.git/…`.
fn watch_head(dir: &Path) {
    let path_of = |name: &str| git(dir, &["rev-parse", "--git-path", name]).map(|f| dir.join(f));
    // A path that does not exist would make cargo run the script at every build, so only existing ones are named.
    let mut watched: Vec<PathBuf> = ["HEAD", "packed-refs"].into_iter().filter_map(path_of).collect();
    if let Some(file) = git(dir, &["symbolic-ref", "-q", "HEAD"]).and_then(|r| path_of(&r)) {
        // A branch kept only in packed-refs gets a file of its own at its next commit: its directory changes then.
        let dir_of_ref = file.parent().map(Path::to_path_buf);
        watched.extend(if file.exists() { Some(file) } else { dir_of_ref });
    }
    for path in watched.into_iter().filter(|p| p.exists()) {
        println!("cargo:rerun-if-changed={}", path.display());
    }
}

/// The trimmed output of a successful `git ARGS` run in `dir`, or `None` (no git, not a checkout).
fn git(dir: &Path, args: &[&str]) -> Option<String> {
    let out = Command::new("git").arg("-C").arg(dir).args(args).output().ok()?;
    if !out.status.success() {
        return None;
    }
    let text = String::from_utf8(out.stdout).ok()?.trim().to_owned();
    (!text.is_empty()).then_some(text)
}
