//! Claims among processes on the blocks being fetched, so that the processes of
//! a node sharing one cache directory fetch each block once between them.
//!
//! Before a process fetches a block the cache lacks, it creates a claim file
//! beside the block's name, `.claim-<block>`, with `O_EXCL`: one process wins
//! and fetches; the others see the claim, wait for the block to appear (or the
//! claim to go, or half of what is left of their deadline to pass), and read it
//! from the cache (or fetch it themselves). The winner writes the block, then
//! removes its claim, so a waiter that sees the claim gone and the block
//! missing knows the fetch failed or was not kept, and fetches the block itself.
//!
//! A claim never blocks the others for long: it holds its writer's process id
//! and host name, and is stale, and taken over, as soon as that process is gone
//! (same host) or once it is older than [`CLAIM_STALE`] (whatever the host), so
//! a killed process costs the others one wait of at most that long. A claim
//! that cannot be made (a read-only or full directory, a link in the layout)
//! leaves the block to be fetched as if there were no other process. At worst
//! a block is fetched twice; never is a block read that was not whole, since
//! blocks are still written under a temporary name and renamed into place and
//! checked for their length and every record for its checksum.

use std::fs;
use std::io::{Read, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use super::{open_regular, Cache};

/// A claim older than this is taken over whoever holds it: longer than one
/// fetch of a run of blocks takes but for a server that is failing anyway.
pub(crate) const CLAIM_STALE: Duration = Duration::from_secs(30);
/// The first and the longest pause between two looks at a block another
/// process is fetching.
const POLL_FIRST: Duration = Duration::from_millis(1);
const POLL_MOST: Duration = Duration::from_millis(16);

const PREFIX: &str = ".claim-";

/// Whether `name` is a claim file's name: `.claim-<block number>`.
pub(super) fn is_claim(name: &str) -> bool {
    name.strip_prefix(PREFIX).is_some_and(super::is_number)
}

/// This process's claim on fetching one block; dropping it removes the claim
/// file, if it is still this claim's (another process may have taken it over).
#[derive(Debug)]
pub(crate) struct BlockClaim {
    path: PathBuf,
    inode: (u64, u64),
}

impl Drop for BlockClaim {
    fn drop(&mut self) {
        remove_if_same(&self.path, self.inode, &holder());
    }
}

/// Who wrote the claim at `path` and its file's identity; None if it is not a
/// regular file that can be read.
fn look(path: &Path) -> Option<(String, (u64, u64), fs::Metadata)> {
    let (f, meta) = open_regular(path).ok()?;
    let mut text = String::new();
    Read::take(&f, 512).read_to_string(&mut text).ok()?;
    Some((text, (meta.dev(), meta.ino()), meta))
}

/// Removes the claim at `path` if it is still the file `inode` holding `text`:
/// a claim made there since (whose file may have been given the freed inode
/// number) has another holder in it.
fn remove_if_same(path: &Path, inode: (u64, u64), text: &str) {
    if look(path).is_some_and(|(t, i, _)| i == inode && t == text) {
        let _ = fs::remove_file(path);
    }
}

/// What claiming a block found.
#[derive(Debug)]
pub(crate) enum Claimed {
    /// This process fetches it; the claim goes when dropped.
    Mine(BlockClaim),
    /// Another live process claimed it first.
    Theirs,
    /// No claim could be made: fetch it as if alone.
    Unclaimed,
}

fn host_name() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: `buf` is valid for writes of its length, which is passed.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return String::new();
    }
    let n = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

/// This machine's name, asked for once.
fn this_host() -> &'static str {
    static HOST: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    HOST.get_or_init(host_name)
}

/// `<pid>@<host>`: who holds a claim.
fn holder() -> String {
    format!("{}@{}", std::process::id(), this_host())
}

/// Whether the holder written in a claim is known to be gone: a process of
/// this host that no longer exists. Another host's process cannot be asked.
fn holder_gone(text: &str) -> bool {
    let Some((pid, host)) = text.trim().split_once('@') else {
        return true; // not a claim this code wrote whole: a writer died mid-write
    };
    let Ok(pid) = pid.parse::<libc::pid_t>() else {
        return true;
    };
    if pid <= 0 || host != this_host() {
        return false;
    }
    // SAFETY: signal 0 only asks whether the process exists.
    let rc = unsafe { libc::kill(pid, 0) };
    rc != 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH)
}

/// Whether a claim holding `text`, with `meta`, is stale: older than
/// `CLAIM_STALE`, or held by a process known to be gone, or left empty by a
/// writer that died between making it and writing its holder.
fn stale(text: &str, meta: &fs::Metadata) -> bool {
    let age = meta
        .modified()
        .ok()
        .and_then(|m| SystemTime::now().duration_since(m).ok())
        .unwrap_or(Duration::ZERO);
    if age > CLAIM_STALE {
        return true;
    }
    if text.is_empty() {
        return age > Duration::from_secs(1);
    }
    holder_gone(text)
}

/// The directories one run of claims or writes (the blocks of one fetch) made
/// and found to be the cache's own: checked once for the run, not once a
/// block, since most of a run's blocks lie in one directory.
#[derive(Default)]
pub(super) struct Checked(Vec<PathBuf>);

/// Claims on fetching some blocks: those this process fetches (with the claims
/// it holds on them), those other processes are fetching, and those the cache
/// turned out to hold once claimed.
pub(crate) struct Claims<K> {
    pub mine: Vec<K>,
    pub theirs: Vec<K>,
    /// In the cache already: a gather or a process that fetched the block
    /// between the caller's look at the cache and its claim, and released it.
    pub kept: Vec<K>,
    pub held: Vec<BlockClaim>,
}

impl Cache {
    fn claim_path(&self, store: u64, file: &str, block: u64) -> PathBuf {
        self.store_dir(store)
            .join(file)
            .join(format!("{PREFIX}{block}"))
    }

    /// [`Cache::claim_in`] of one block.
    #[cfg(test)]
    pub(crate) fn claim_fetch(&self, store: u64, file: &str, block: u64) -> Claimed {
        self.claim_in(store, file, block, &mut Checked::default())
    }

    /// Claims fetching block `block` of `file` of store `store` among the
    /// processes sharing this cache, the claim's directory made and checked
    /// unless `checked` has it. A stale claim is removed and the block
    /// claimed again, once.
    fn claim_in(&self, store: u64, file: &str, block: u64, checked: &mut Checked) -> Claimed {
        let path = self.claim_path(store, file, block);
        let Some(parent) = path.parent() else {
            return Claimed::Unclaimed;
        };
        if !self.ready_dir(parent, checked) {
            return Claimed::Unclaimed;
        }
        for _ in 0..2 {
            let made = fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .custom_flags(libc::O_NOFOLLOW)
                .open(&path);
            match made {
                Ok(mut f) => {
                    let Ok(meta) = f.metadata() else {
                        let _ = fs::remove_file(&path);
                        return Claimed::Unclaimed;
                    };
                    let _ = f.write_all(holder().as_bytes());
                    return Claimed::Mine(BlockClaim {
                        path,
                        inode: (meta.dev(), meta.ino()),
                    });
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => match look(&path) {
                    Some((text, inode, meta)) => {
                        if !stale(&text, &meta) {
                            return Claimed::Theirs;
                        }
                        // Only the stale claim looked at, not one made since.
                        remove_if_same(&path, inode, &text);
                    }
                    // Removed meanwhile: try again. Something that is not a
                    // file at a claim's name is not ours to remove.
                    None if !path.exists() => {}
                    None => return Claimed::Unclaimed,
                },
                Err(_) => return Claimed::Unclaimed,
            }
        }
        Claimed::Unclaimed
    }

    /// Claims each of `blocks` (a key, its file's name, its number and its
    /// length) as [`Cache::claim_in`] does. A block the cache holds once it
    /// is claimed is not fetched: whoever fetched it since the caller looked
    /// has written it, then released its claim, so a look after the claim
    /// cannot miss it.
    pub(crate) fn claim_fetches<K>(
        &self,
        store: u64,
        blocks: Vec<(K, String, u64, u64)>,
    ) -> Claims<K> {
        let mut claims = Claims {
            mine: Vec::new(),
            theirs: Vec::new(),
            kept: Vec::new(),
            held: Vec::new(),
        };
        let mut checked = Checked::default();
        for (key, file, block, len) in blocks {
            let claim = match self.claim_in(store, &file, block, &mut checked) {
                Claimed::Theirs => {
                    claims.theirs.push(key);
                    continue;
                }
                Claimed::Mine(c) => Some(c),
                Claimed::Unclaimed => None,
            };
            if self.holds(store, &file, block, len) {
                // Dropping the claim removes it: nothing is fetched.
                drop(claim);
                claims.kept.push(key);
                continue;
            }
            claims.mine.push(key);
            claims.held.extend(claim);
        }
        claims
    }

    /// Whether another process's live claim on the block is still there.
    fn claim_held(&self, store: u64, file: &str, block: u64) -> bool {
        look(&self.claim_path(store, file, block))
            .is_some_and(|(text, _, meta)| !stale(&text, &meta))
    }

    /// Whether the block's file is there at its full length `len`.
    fn has_block(&self, store: u64, file: &str, block: u64, len: u64) -> bool {
        fs::symlink_metadata(self.block_path(store, file, block))
            .is_ok_and(|m| m.is_file() && m.len() == len)
    }

    /// Waits until each block of `blocks` (file, block number, length) that
    /// other processes claimed is in the cache, or its claim is gone or stale,
    /// or `CLAIM_STALE` or `until` has passed: then the caller reads what the
    /// cache holds and fetches the rest.
    pub(crate) async fn wait_for_claimed(
        &self,
        store: u64,
        blocks: &[(String, u64, u64)],
        until: Instant,
    ) {
        let until = until.min(Instant::now() + CLAIM_STALE);
        let mut waiting: Vec<&(String, u64, u64)> = blocks.iter().collect();
        let mut pause = POLL_FIRST;
        while !waiting.is_empty() && Instant::now() < until {
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(POLL_MOST);
            waiting.retain(|(file, b, len)| {
                !self.has_block(store, file, *b, *len) && self.claim_held(store, file, *b)
            });
        }
    }

    /// Makes `dir` and checks that it and those above it up to the cache's
    /// are directories (not links that would take a write elsewhere), unless
    /// `checked` has it from earlier in the same run of writes.
    pub(super) fn ready_dir(&self, dir: &Path, checked: &mut Checked) -> bool {
        if checked.0.iter().any(|d| d == dir) {
            return true;
        }
        if fs::create_dir_all(dir).is_err() || !self.own_dirs(dir) {
            return false;
        }
        checked.0.push(dir.to_path_buf());
        true
    }

    /// Whether the directories from `dir` up to the cache's are directories
    /// (not links that would take a write elsewhere).
    pub(super) fn own_dirs(&self, dir: &Path) -> bool {
        dir.ancestors()
            .take_while(|a| *a != self.dir)
            .all(|a| fs::symlink_metadata(a).is_ok_and(|m| m.is_dir()))
    }
}

#[cfg(test)]
mod tests;
