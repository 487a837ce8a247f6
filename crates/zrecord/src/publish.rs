//! Publishing a directory atomically: a store (or a tree of stores) is built
//! in a hidden, locked sibling of its destination and renamed into place once
//! every file in it is durable, or removed. The writer and concatenation publish
//! through here, and so does the converter for its trees of stores.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use xxhash_rust::xxh3::xxh3_64;

use crate::error::{Error, IoContext, Result};
use crate::format::{self, Header};

/// The lock a build directory's owner holds for as long as it may still publish
/// or discard the directory. A lock that can be taken means the owner is gone.
const LOCK_FILE: &str = ".build.lock";

/// The directory of a tree build that other processes (an engine's tasks) write
/// part stores into, for the build's owner to concatenate: inside it, stores are
/// created and opened as anywhere else. It goes with its build directory, so a
/// failed or killed job leaves nothing that [`clean_stale`] does not remove.
pub const PARTS_DIR: &str = ".parts";

/// Whether component `k` of `parts` is a build directory's name, not followed
/// by [`PARTS_DIR`] (which makes what lies below it ordinary stores).
fn is_closed_build(parts: &[std::path::Component<'_>], k: usize) -> bool {
    is_build_dir_name(parts[k].as_os_str())
        && parts
            .get(k + 1)
            .is_none_or(|next| next.as_os_str() != PARTS_DIR)
}

/// Whether `dest` lies inside a build directory's [`PARTS_DIR`]: a part store,
/// which an engine's task writes for the build's owner to concatenate.
fn is_part(dest: &Path) -> bool {
    let parts: Vec<_> = dest.components().collect();
    (0..parts.len()).any(|k| {
        is_build_dir_name(parts[k].as_os_str())
            && parts
                .get(k + 1)
                .is_some_and(|next| next.as_os_str() == PARTS_DIR)
    })
}

/// The most bytes of one path component on the filesystems stores live on.
const NAME_MAX: usize = 255;

/// The real paths of the tree builds ([`BuildDir::create_tree`]) this process
/// holds, inside which [`check_destination`] lets a store be created.
static LIVE_BUILDS: std::sync::Mutex<Vec<PathBuf>> = std::sync::Mutex::new(Vec::new());

fn live_builds() -> std::sync::MutexGuard<'static, Vec<PathBuf>> {
    // The list stays consistent whatever panicked while it was held.
    LIVE_BUILDS.lock().unwrap_or_else(|e| e.into_inner())
}

/// Times [`BuildDir::create`] picks a fresh name when the one it picked is taken
/// or is removed by a concurrent [`clean_stale`] before its lock is held.
const CREATE_ATTEMPTS: u32 = 16;

/// `dest` without trailing separators, after checking that it can name a new
/// store: its last component is a name (not `.`, `..`, empty or the root), it
/// does not exist, and no existing ancestor is anything but a directory. Nothing
/// on disk changes, so a refused path leaves no trace.
pub(crate) fn check_destination(dest: &Path) -> Result<PathBuf> {
    let raw = dest.as_os_str().as_encoded_bytes();
    let trimmed = raw.strip_suffix(b"/").map_or(raw, |mut r| {
        while let Some(s) = r.strip_suffix(b"/") {
            r = s;
        }
        r
    });
    let last = trimmed.rsplit(|&b| b == b'/').next().unwrap_or(trimmed);
    let why = if raw.is_empty() {
        Some("; this one is empty")
    } else if trimmed.is_empty() {
        Some("; this one is the root directory")
    } else if last == b"." || last == b".." {
        Some(", not '.' or '..'")
    } else {
        None
    };
    if let Some(why) = why {
        return Err(Error::InvalidArgument(format!(
            "{dest:?}: a store path must end in a directory name{why}"
        )));
    }
    if last.len() > NAME_MAX {
        return Err(Error::InvalidArgument(format!(
            "{dest:?}: a store's name takes at most {NAME_MAX} bytes, this one takes {}",
            last.len()
        )));
    }
    let dest_path = PathBuf::from(std::ffi::OsStr::from_bytes(trimmed));
    if dest_path.symlink_metadata().is_ok() {
        return Err(Error::Exists(dest_path));
    }
    // The nearest existing ancestor must be a directory; a missing one is made
    // when the build directory is.
    for above in dest_path.ancestors().skip(1) {
        if above.as_os_str().is_empty() {
            break;
        }
        match fs::metadata(above) {
            Ok(m) if m.is_dir() => break,
            Ok(_) => {
                return Err(Error::InvalidArgument(format!(
                    "{dest:?}: cannot create a store under {above:?}: not a directory"
                )))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) if e.raw_os_error() == Some(libc::ENOTDIR) => continue,
            // Anything else (a permission refused) is for creating the
            // directories to report, with the path it happened on.
            Err(_) => break,
        }
    }
    check_not_inside_store(dest, &dest_path)?;
    Ok(dest_path)
}

/// Refuses a destination inside a published store, which must never change
/// (and whose readers would never see the new store), or inside a build
/// directory, which only its owner fills and which `clean` may remove, unless
/// it is a tree build of this process (as `convert` builds its stores inside
/// its own).
/// The check is on the real path of the nearest existing ancestor, so neither
/// a link nor `..` hides a store.
fn check_not_inside_store(dest: &Path, dest_path: &Path) -> Result<()> {
    let Some(real) = dest_path.ancestors().skip(1).find_map(|a| {
        let a = if a.as_os_str().is_empty() {
            Path::new(".")
        } else {
            a
        };
        fs::canonicalize(a).ok()
    }) else {
        return Ok(());
    };
    let live = live_builds();
    let mut dir = PathBuf::new();
    let whole: Vec<_> = real.components().collect();
    for (k, part) in whole.iter().enumerate() {
        dir.push(part);
        let why = if is_closed_build(&whole, k) && !live.contains(&dir) {
            "an unpublished build directory (a writer's temporary directory)"
        } else if dir.join(format::HEADER_FILE).symlink_metadata().is_ok() {
            "a published store, which never changes"
        } else {
            continue;
        };
        return Err(Error::InvalidArgument(format!(
            "{dest:?}: cannot create a store inside {}, {why}; choose a path outside it",
            dir.display()
        )));
    }
    Ok(())
}

/// A hidden sibling of `dest` to build it in: `.NAME.tmp-PID-XXXXXXXX`, which
/// [`is_build_dir_name`] recognises.
pub fn temp_sibling(dest: &Path) -> Result<PathBuf> {
    let name = dest.file_name().ok_or_else(|| {
        Error::InvalidArgument(format!("{}: not a valid store path", dest.display()))
    })?;
    static SEQUENCE: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    // Two builds of one destination in one process within a clock tick still
    // get different names.
    let salt = SEQUENCE
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        .wrapping_mul(0x9e37_79b9);
    let suffix = format!(".tmp-{}-{:08x}", std::process::id(), nanos ^ salt);
    // The store's name is cut short where the whole would exceed a name's limit;
    // the build keeps its destination, so only the pattern has to match.
    let name = name.as_encoded_bytes();
    let keep = name
        .len()
        .min(NAME_MAX.saturating_sub(1 + suffix.len()).max(1));
    let mut tmp_name = Vec::with_capacity(1 + keep + suffix.len());
    tmp_name.push(b'.');
    tmp_name.extend_from_slice(&name[..keep]);
    tmp_name.extend_from_slice(suffix.as_bytes());
    Ok(dest.with_file_name(std::ffi::OsStr::from_bytes(&tmp_name)))
}

/// Whether `name` is one [`temp_sibling`] makes: a dot, a non-empty name,
/// `.tmp-`, decimal digits, `-` and exactly eight lowercase hex digits.
pub fn is_build_dir_name(name: &std::ffi::OsStr) -> bool {
    let b = name.as_encoded_bytes();
    let Some(rest) = b.strip_prefix(b".") else {
        return false;
    };
    let Some(at) = rest.windows(5).rposition(|w| w == b".tmp-") else {
        return false;
    };
    let (store, suffix) = (&rest[..at], &rest[at + 5..]);
    let Some(dash) = suffix.iter().position(|&c| c == b'-') else {
        return false;
    };
    let (pid, hex) = (&suffix[..dash], &suffix[dash + 1..]);
    !store.is_empty()
        && !pid.is_empty()
        && pid.iter().all(u8::is_ascii_digit)
        && hex.len() == 8
        && hex.iter().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f'))
}

/// Refuses `path` when it, or a directory it lies in, is a build directory: one
/// that was never published. A complete build (header written, rename not yet
/// made) would otherwise open and verify like the store it was meant to become.
pub(crate) fn check_not_build_dir(path: &Path) -> Result<()> {
    // The real path, so that neither a link nor `..` hides a build directory; a
    // path that cannot be resolved is for the open itself to report.
    let Ok(real) = fs::canonicalize(path) else {
        return Ok(());
    };
    let mut dir = PathBuf::new();
    let whole: Vec<_> = real.components().collect();
    for (k, part) in whole.iter().enumerate() {
        dir.push(part);
        if is_closed_build(&whole, k) {
            let what = if dir == real {
                "an unpublished build directory".to_string()
            } else {
                format!("inside {}, an unpublished build directory", dir.display())
            };
            return Err(Error::corrupt(
                path,
                format!(
                    "{what}: a writer's temporary directory, never published. Once no \
                     writer holds it, cleaning its parent directory removes it"
                ),
            ));
        }
    }
    Ok(())
}

/// Takes the exclusive lock on the open lock file `f` without waiting; false when
/// another open file holds it.
fn try_lock(f: &File) -> std::io::Result<bool> {
    use std::os::fd::AsRawFd;
    // SAFETY: flock only reads the descriptor number, which `f` keeps open.
    if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
        return Ok(true);
    }
    let e = std::io::Error::last_os_error();
    match e.raw_os_error() {
        Some(libc::EWOULDBLOCK) => Ok(false),
        _ => Err(e),
    }
}

/// Whether the open file `f` is still the file at `path` (not one unlinked
/// meanwhile and replaced, or removed with its directory).
fn still_at(f: &File, path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (f.metadata(), fs::symlink_metadata(path)) {
        (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
        _ => false,
    }
}

/// A hidden directory beside its destination in which a store (or a tree of
/// stores) is built, and from which [`BuildDir::publish`] renames it into place.
/// Its owner holds an exclusive lock on a file inside it for the whole build, so
/// [`clean_stale`] can tell a dead owner's directory from a live one. Dropped
/// unpublished, the directory and everything in it are removed.
pub struct BuildDir {
    dest: PathBuf,
    path: PathBuf,
    /// `path` resolved, as `LIVE_BUILDS` holds it while a tree build is live.
    real: Option<PathBuf>,
    /// Held open (and so locked) until the directory is published or removed.
    _lock: File,
    published: bool,
    /// Whether its files and its publish are synced to disk: not for a part
    /// store inside a build directory's [`PARTS_DIR`], which is never published
    /// as such; whoever concatenates it syncs every file of the result.
    durable: bool,
}

impl BuildDir {
    /// Creates the build directory of `dest`, and `dest`'s missing parents, after
    /// checking `dest` the way [`crate::Writer::create`] does.
    pub fn create(dest: &Path) -> Result<BuildDir> {
        BuildDir::create_as(dest, false)
    }

    /// Creates a build directory for a tree of stores (as `convert` publishes):
    /// until it is published or dropped, this process may create stores inside
    /// it, which creating a store refuses for any other build directory.
    pub fn create_tree(dest: &Path) -> Result<BuildDir> {
        BuildDir::create_as(dest, true)
    }

    fn create_as(dest: &Path, tree: bool) -> Result<BuildDir> {
        let dest = check_destination(dest)?;
        if let Some(parent) = dest.parent().filter(|p| !p.as_os_str().is_empty()) {
            fs::create_dir_all(parent).at(parent)?;
        }
        let mut last = None;
        for _ in 0..CREATE_ATTEMPTS {
            let path = temp_sibling(&dest)?;
            match fs::create_dir(&path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                    last = Some(Error::io(&path, e));
                    continue;
                }
                Err(e) => return Err(Error::io(&path, e)),
            }
            let lp = path.join(LOCK_FILE);
            let lock = match OpenOptions::new()
                .read(true)
                .write(true)
                .create_new(true)
                .open(&lp)
            {
                Ok(f) => f,
                // A clean_stale that found the directory empty removed it.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    last = Some(Error::io(&lp, e));
                    continue;
                }
                Err(e) => {
                    let _ = fs::remove_dir_all(&path);
                    return Err(Error::io(&lp, e));
                }
            };
            // On a filesystem without flock the build goes unlocked: clean_stale
            // cannot lock it there either, so it leaves it alone.
            let held = try_lock(&lock).unwrap_or(true);
            // Not held, or held on a file no longer there: a clean_stale took the
            // lock first and removes (or removed) this directory. Start afresh.
            if !held || !still_at(&lock, &lp) {
                last = Some(Error::io(
                    &lp,
                    std::io::Error::other("removed while it was being created"),
                ));
                continue;
            }
            // Registered so that stores may be built inside it by this process.
            let real = tree.then(|| fs::canonicalize(&path).ok()).flatten();
            if let Some(r) = &real {
                live_builds().push(r.clone());
            }
            return Ok(BuildDir {
                durable: !is_part(&dest),
                dest,
                path,
                real,
                _lock: lock,
                published: false,
            });
        }
        Err(last.unwrap_or_else(|| Error::Internal("no build directory attempt was made".into())))
    }

    /// The build directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether the store's files are to be synced before it is published (see
    /// the field).
    pub(crate) fn durable(&self) -> bool {
        self.durable
    }

    /// Where [`BuildDir::publish`] puts it.
    pub fn dest(&self) -> &Path {
        &self.dest
    }

    /// Publishes the build: fsyncs the directory, renames it to the destination
    /// without replacing anything there, and fsyncs the destination's parent.
    ///
    /// Either nothing is published (any error but the last, and the build is
    /// removed) or the store is in place. When only the final fsync fails, the
    /// store is in place and readable but its directory entry may not survive a
    /// crash: that is [`Error::PublishedNotDurable`], never a plain I/O error, so
    /// that nobody retries a publish that happened.
    pub fn publish(mut self) -> Result<()> {
        if self.durable {
            fsync_dir(&self.path)?;
        }
        rename_no_replace(&self.path, &self.dest)?;
        self.published = true;
        // The lock file did its work; a published store holds only its own
        // files. Should the unlink fail, an empty stray file is harmless: readers
        // open files by name and never list the directory.
        let _ = fs::remove_file(self.dest.join(LOCK_FILE));
        if !self.durable {
            return Ok(());
        }
        let parent = match self.dest.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        File::open(&parent)
            .and_then(|d| d.sync_all())
            .map_err(|source| Error::PublishedNotDurable {
                path: self.dest.clone(),
                parent,
                source,
            })
    }
}

impl Drop for BuildDir {
    fn drop(&mut self) {
        if let Some(real) = &self.real {
            let mut live = live_builds();
            if let Some(i) = live.iter().position(|p| p == real) {
                live.swap_remove(i);
            }
        }
        // The lock closes after this body, with the fields: the directory is
        // gone before a clean_stale could take the lock and find it.
        if !self.published {
            let _ = fs::remove_dir_all(&self.path);
        }
    }
}

/// Removes the build directories directly inside `parent` whose owner is gone
/// (a writer or converter killed before it published or discarded them), and
/// returns their paths. A directory whose lock is held (its owner is alive,
/// in this or any process) is left alone, and so is one this function cannot
/// prove abandoned: one with files but no lock file. An empty one is removed:
/// its owner died before making its lock, or, still creating it, will notice
/// and pick a new name.
pub fn clean_stale(parent: &Path) -> Result<Vec<PathBuf>> {
    let mut removed = Vec::new();
    for entry in fs::read_dir(parent).at(parent)? {
        let entry = entry.at(parent)?;
        if !is_build_dir_name(&entry.file_name()) {
            continue;
        }
        let path = entry.path();
        // Never through a link: only a real directory here is a build.
        match fs::symlink_metadata(&path) {
            Ok(m) if m.is_dir() => {}
            _ => continue,
        }
        let lp = path.join(LOCK_FILE);
        let lock = OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&lp);
        let lock = match lock {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                // Removing a directory only succeeds while it is empty.
                if fs::remove_dir(&path).is_ok() {
                    removed.push(path);
                }
                continue;
            }
            Err(_) => continue,
        };
        if !matches!(try_lock(&lock), Ok(true)) || !still_at(&lock, &lp) {
            continue;
        }
        fs::remove_dir_all(&path).at(&path)?;
        drop(lock);
        removed.push(path);
    }
    removed.sort();
    Ok(removed)
}

/// Writes a new file holding `bytes`, durably, and returns its size and xxh3-64.
pub(crate) fn write_whole(path: &Path, bytes: &[u8], sync: bool) -> Result<(u64, u64)> {
    let mut f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .at(path)?;
    f.write_all(bytes)
        .and_then(|_| if sync { f.sync_all() } else { Ok(()) })
        .at(path)?;
    Ok((bytes.len() as u64, xxh3_64(bytes)))
}

/// Writes `header` into `build` as its `header.bin`, durably, and publishes the
/// build; returns the header's checksum. Every other file of the store must
/// already be written and synced: the header is what makes a directory a store,
/// so it is the last file written, by the writer and by concatenation alike.
pub(crate) fn publish_with_header(build: BuildDir, header: &Header) -> Result<u64> {
    let bytes = header.encode();
    let hp = build.path().join(format::HEADER_FILE);
    let mut hf = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&hp)
        .at(&hp)?;
    let sync = build.durable();
    hf.write_all(&bytes)
        .and_then(|_| if sync { hf.sync_all() } else { Ok(()) })
        .at(&hp)?;
    build.publish()?;
    Ok(format::le_u64(&bytes, bytes.len() - 8))
}

fn fsync_dir(path: &Path) -> Result<()> {
    File::open(path).and_then(|d| d.sync_all()).at(path)
}

/// Renames `from` to `to`, failing if `to` exists (even as an empty directory,
/// which a plain rename would silently replace).
fn rename_no_replace(from: &Path, to: &Path) -> Result<()> {
    #[cfg(target_os = "linux")]
    {
        use std::ffi::CString;
        use std::os::unix::ffi::OsStrExt;
        let c = |p: &Path| {
            CString::new(p.as_os_str().as_bytes()).map_err(|_| {
                Error::InvalidArgument(format!("{}: path contains a NUL byte", p.display()))
            })
        };
        let (a, b) = (c(from)?, c(to)?);
        // SAFETY: both are valid NUL-terminated paths; AT_FDCWD resolves them
        // relative to the working directory like `fs::rename` does.
        let rc = unsafe {
            libc::renameat2(
                libc::AT_FDCWD,
                a.as_ptr(),
                libc::AT_FDCWD,
                b.as_ptr(),
                libc::RENAME_NOREPLACE,
            )
        };
        if rc == 0 {
            return Ok(());
        }
        let err = std::io::Error::last_os_error();
        match err.raw_os_error() {
            Some(libc::EEXIST) => return Err(Error::Exists(to.to_path_buf())),
            // Filesystems without RENAME_NOREPLACE fall back to check-then-rename.
            Some(libc::EINVAL) | Some(libc::ENOSYS) => {}
            _ => return Err(Error::io(to, err)),
        }
    }
    if to.symlink_metadata().is_ok() {
        return Err(Error::Exists(to.to_path_buf()));
    }
    fs::rename(from, to).at(to)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// The sorted names in `dir`, for tests of what a step left behind.
    pub(crate) fn names(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn build_dir_names_are_exactly_the_ones_temp_sibling_makes() {
        for dest in ["s", "a/b/s", "/x/y.tmp-1-00000000", "weird .tmp- name"] {
            let tmp = temp_sibling(Path::new(dest)).unwrap();
            assert!(is_build_dir_name(tmp.file_name().unwrap()), "{tmp:?}");
        }
        for name in [
            "s",
            ".s",
            ".s.tmp",
            "..tmp-1-0000abcd",
            "s.tmp-1-0000abcd",
            ".s.tmp--0000abcd",
            ".s.tmp-1-0000abc",
            ".s.tmp-1-0000abcde",
            ".s.tmp-1-0000ABCD",
            ".s.tmp-x-0000abcd",
        ] {
            assert!(!is_build_dir_name(std::ffi::OsStr::new(name)), "{name}");
        }
        assert!(is_build_dir_name(std::ffi::OsStr::new(".s.tmp-1-0000abcd")));
    }

    #[test]
    fn only_stores_inside_a_builds_parts_directory_skip_syncing() {
        let build = ".out.tmp-7-0000abcd";
        for (dest, part) in [
            (format!("/r/{build}/.parts/.p0.tmp/col"), true),
            (format!("r/{build}/.parts/p000001-t3/col"), true),
            (format!("/r/{build}/col"), false),
            ("/r/.parts/p0/col".to_string(), false),
            (format!("/r/{build}/x/.parts/col"), false),
            ("/r/out/col".to_string(), false),
        ] {
            assert_eq!(is_part(Path::new(&dest)), part, "{dest}");
        }
    }

    fn refused_message(dest: &Path) -> String {
        match BuildDir::create(dest) {
            Err(Error::InvalidArgument(m)) => m,
            Err(e) => panic!("{dest:?}: {e}"),
            Ok(b) => panic!("{:?} was created", b.path()),
        }
    }

    #[test]
    fn a_destination_inside_a_store_or_a_foreign_build_is_refused() {
        let root = tempfile::tempdir().unwrap();
        let store = root.path().join("store");
        fs::create_dir(&store).unwrap();
        fs::write(store.join(format::HEADER_FILE), b"h").unwrap();
        fs::create_dir(store.join("sub")).unwrap();
        std::os::unix::fs::symlink(&store, root.path().join("link")).unwrap();
        let foreign = root.path().join(".other.tmp-1-00000001");
        fs::create_dir(&foreign).unwrap();
        let real = fs::canonicalize(root.path()).unwrap();
        let inside_store = format!(
            "cannot create a store inside {}, a published store, which never changes; \
             choose a path outside it",
            real.join("store").display()
        );
        for dest in [
            store.join("s"),
            store.join("sub/s"),
            store.join("missing/deeper/s"),
            root.path().join("link/s"),
            root.path().join("store/sub/../s"),
        ] {
            let m = refused_message(&dest);
            assert!(m.ends_with(&inside_store), "{dest:?}: {m}");
        }
        let m = refused_message(&foreign.join("s"));
        assert!(
            m.ends_with(&format!(
                "cannot create a store inside {}, an unpublished build directory (a writer's \
                 temporary directory); choose a path outside it",
                real.join(".other.tmp-1-00000001").display()
            )),
            "{m}"
        );
        // Nothing was made by any refusal.
        assert_eq!(names(&store), vec!["header.bin", "sub"]);
        assert!(names(&store.join("sub")).is_empty() && names(&foreign).is_empty());
        // A store's build of this process takes no store; a tree build takes
        // stores (convert's columns), until it is gone.
        let single = BuildDir::create(&root.path().join("single")).unwrap();
        assert!(refused_message(&single.path().join("s")).contains("an unpublished build"));
        drop(single);
        let tree = BuildDir::create_tree(&root.path().join("tree")).unwrap();
        let inner = BuildDir::create(&tree.path().join("split/column")).unwrap();
        inner.publish().unwrap();
        let kept = tree.path().to_path_buf();
        tree.publish().unwrap();
        assert!(root.path().join("tree/split/column").is_dir());
        fs::create_dir(&kept).unwrap(); // the same name, no longer this process's build
        assert!(refused_message(&kept.join("s")).contains("an unpublished build directory"));
    }

    /// Stores inside a build directory's parts directory are created and opened
    /// by any process, as anywhere else; the parts directory is no store's, and
    /// everything else in a foreign build stays refused.
    #[test]
    fn a_build_directorys_parts_hold_ordinary_stores() {
        use crate::{Codec, DType, Schema, Sequential, Source, Store, Writer};
        let root = tempfile::tempdir().unwrap();
        let foreign = root.path().join(".job.tmp-1-00000001");
        let attempt = foreign.join(PARTS_DIR).join("p0-a1");
        fs::create_dir_all(&attempt).unwrap();
        let part = attempt.join("col");
        let schema = Schema::dense(DType::U8, &[2], Codec::Raw, 1).unwrap();
        let mut w = Writer::create(&part, schema, None).unwrap();
        w.append_dense(1, &[4, 5], Source::Memory, &Sequential)
            .unwrap();
        w.finish().unwrap();
        assert_eq!(Store::open(&part).unwrap().len(), 1);
        assert!(refused_message(&foreign.join("s")).contains("an unpublished build directory"));
        let beside = foreign.join("other").join("p0");
        fs::create_dir_all(&beside).unwrap();
        assert!(refused_message(&beside.join("s")).contains("an unpublished build directory"));
        assert!(check_not_build_dir(&beside).is_err());
    }

    #[test]
    fn a_store_name_may_take_255_bytes_and_no_more() {
        let root = tempfile::tempdir().unwrap();
        let longest = "é".repeat(127) + "e";
        let b = BuildDir::create(&root.path().join(&longest)).unwrap();
        let build_name = b.path().file_name().unwrap().as_encoded_bytes().len();
        assert!(build_name <= NAME_MAX, "{build_name}");
        assert!(is_build_dir_name(b.path().file_name().unwrap()));
        b.publish().unwrap();
        assert_eq!(names(root.path()), vec![longest.clone()]);
        let m = refused_message(&root.path().join(longest + "e"));
        assert!(
            m.ends_with("a store's name takes at most 255 bytes, this one takes 256"),
            "{m}"
        );
    }

    #[test]
    fn clean_stale_spares_a_live_build_and_removes_a_dead_one() {
        let root = tempfile::tempdir().unwrap();
        let live = BuildDir::create(&root.path().join("live")).unwrap();
        fs::write(live.path().join("data-000.bin"), b"x").unwrap();
        // A build whose owner died: its lock file is there, its lock is not held.
        let dead = root.path().join(".dead.tmp-1-00000001");
        fs::create_dir(&dead).unwrap();
        fs::write(dead.join(LOCK_FILE), b"").unwrap();
        fs::write(dead.join("header.bin"), b"x").unwrap();
        assert_eq!(clean_stale(root.path()).unwrap(), vec![dead.clone()]);
        assert!(live.path().is_dir());
        let kept = live
            .path()
            .file_name()
            .unwrap()
            .to_string_lossy()
            .into_owned();
        assert_eq!(names(root.path()), vec![kept]);
        live.publish().unwrap();
        assert_eq!(names(root.path()), vec!["live".to_string()]);
        assert!(names(&root.path().join("live"))
            .iter()
            .all(|n| n != LOCK_FILE));
        assert_eq!(clean_stale(root.path()).unwrap(), Vec::<PathBuf>::new());
    }
}
