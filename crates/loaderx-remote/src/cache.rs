//! A local directory of fixed-size blocks of remote data files, shared by any
//! number of processes.
//!
//! A block's file is `DIR/<header checksum>/<block size>/<file name>/<block>`.
//! The header checksum covers every other file's checksum, and the index holds
//! every record's checksum, so a key names exactly one content: a store replaced
//! at the same URL has another header checksum and never meets the old blocks.
//! Every block is checked for its exact length when read, and every record's
//! stored bytes against the checksum in its entry before it is decoded, so a
//! damaged block is an error (then refetched), never data.
//!
//! Blocks are written to a temporary name and renamed into place, so a reader
//! sees a whole block or none; a block removed by another process's eviction is
//! just a miss. Eviction removes the least recently used blocks (by modification
//! time, refreshed on use) once the directory holds more than its limit.
//!
//! The directory is the cache's own: a marker file names it a cache when it is
//! made, a directory holding anything else is refused, and eviction removes only
//! regular files at the names the cache writes. Every other process may change
//! the files meanwhile, so a cache file is never mapped (a file truncated under a
//! mapping kills the reader with SIGBUS): its bytes are read into this process's
//! memory, and a file opens without blocking and is read only if it is a regular
//! file, so a FIFO, a directory or a link at a block's name is a miss.

use std::fs;
use std::io::Write;
use std::ops::Range;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use loaderx_gather::{Error, Result};
use rustc_hash::FxHashMap;

use crate::huge;
use claim::Checked;
use memory::{Kept, Memory, Pool};
use reading::Reading;

/// Block size when the caller does not choose: large enough that a block is
/// worth a request, small enough that a random record does not drag much else in.
pub const DEFAULT_CACHE_BLOCK_BYTES: u64 = 1 << 20;
/// The size limit of a cache given as a bare directory.
pub const DEFAULT_CACHE_MAX_BYTES: u64 = 4 << 30;

/// The file that makes a directory a cache, written when the cache creates it
/// (or first opens it empty).
const MARKER: &str = ".loaderx-cache";
const MARKER_TEXT: &[u8] =
    b"A loaderx block cache. loaderx removes only its own block files here.\n";

/// A use refreshes a block's time only if it is older than this, so hot blocks
/// cost no write per read.
const TOUCH_AFTER: Duration = Duration::from_secs(10);
/// Temporary files older than this were left by a killed writer.
const STALE_TEMP: Duration = Duration::from_secs(3600);

/// A block read from disk is read whole and kept in memory, for later gathers to
/// find without a system call, while the process's caches keep less than their
/// budget ([`memory`]). Past that, parts of records averaging at least
/// `READ_ALONE_BYTES` are read alone, and smaller ones still bring their block
/// in, in place of another: a system call costs little against the copy of a
/// large record, and for small records it would cost more than the record.
const READ_ALONE_BYTES: u64 = 32 << 10;
/// Blocks larger than this are never read whole for a few records.
const KEEP_MAX_BLOCK: u64 = 4 << 20;
/// Two parts of one block this close are read by one system call.
const MERGE_GAP: u64 = 4 << 10;

/// A block by store (header checksum), data file and number.
type Key = (u64, String, u64);

/// An opened cache directory with its limits.
#[derive(Debug)]
pub struct Cache {
    dir: PathBuf,
    max_bytes: u64,
    block_bytes: u64,
    /// Bytes this process believes the directory holds; exact after each scan.
    held: AtomicU64,
    evicting: Mutex<()>,
    /// Blocks this cache read lately, kept whole in memory so that a warm
    /// gather makes no system call.
    memory: Arc<Memory>,
    /// Blocks a thread of this process is reading from their files now.
    reading: Reading,
}

/// The blocks a cache keeps in memory for one store, looked up under one lock
/// ([`Cache::kept_blocks`]).
pub(crate) struct KeptBlocks<'a> {
    kept: MutexGuard<'a, FxHashMap<Key, Kept>>,
    /// The key looked up, its file name reused while the file stays the same.
    key: Key,
    now: Instant,
}

impl KeptBlocks<'_> {
    /// Block `block` of `file` if it is kept whole (`len` bytes) and its file's
    /// time needs no refresh yet, with the moment it will; otherwise `None`,
    /// and [`Cache::read`] (which refreshes it, or finds the file gone) is the
    /// way to it.
    pub(crate) fn block(&mut self, file: &str, block: u64, len: u64) -> Option<(Bytes, Instant)> {
        if self.key.1 != file {
            self.key.1.clear();
            self.key.1.push_str(file);
        }
        self.key.2 = block;
        let k = self.kept.get(&self.key)?;
        let due = k.touched + TOUCH_AFTER;
        (self.now <= due && k.bytes.len() as u64 == len).then(|| (k.bytes.clone(), due))
    }
}

fn io(path: &Path) -> impl Fn(std::io::Error) -> Error + '_ {
    move |source| Error::io(path.to_path_buf(), source)
}

/// Opens `path` for reading if it is a regular file, without blocking (a FIFO
/// opens at once and is refused) and without following a link at the last
/// name. The check is made on the opened file, so a rename cannot race it.
fn open_regular(path: &Path) -> std::io::Result<(fs::File, fs::Metadata)> {
    let f = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOFOLLOW)
        .open(path)?;
    let meta = f.metadata()?;
    if !meta.is_file() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "not a regular file",
        ));
    }
    Ok((f, meta))
}

/// Buffers that parts read alone are read into, reused: a fresh buffer per
/// record would cost more in zeroing and faulting in its pages than the read.
/// Sizes are powers of two, one list per size, each holding at most
/// `POOL_BYTES` (so that buffers of one size never crowd out another's).
static POOL: Mutex<Vec<Vec<Vec<u8>>>> = Mutex::new(Vec::new());
const POOL_BYTES: usize = 64 << 20;

/// A pooled buffer holding `len` bytes, returned to the pool when the last
/// slice of it goes.
struct Pooled {
    buf: Vec<u8>,
    len: usize,
}

impl AsRef<[u8]> for Pooled {
    fn as_ref(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

impl Drop for Pooled {
    fn drop(&mut self) {
        let buf = std::mem::take(&mut self.buf);
        let class = buf.len().trailing_zeros() as usize;
        let mut pool = POOL.lock().unwrap_or_else(|e| e.into_inner());
        if pool.len() <= class {
            pool.resize_with(class + 1, Vec::new);
        }
        if (pool[class].len() + 1).saturating_mul(buf.len()) <= POOL_BYTES {
            pool[class].push(buf);
        }
    }
}

/// `len` bytes of `f` from `at` in a pooled buffer; None if the file is
/// shorter now or the memory is not there.
fn read_pooled(f: &fs::File, at: u64, len: u64) -> Option<Bytes> {
    let n = usize::try_from(len).ok()?;
    let size = n.checked_next_power_of_two()?;
    let class = size.trailing_zeros() as usize;
    let found = POOL
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get_mut(class)
        .and_then(Vec::pop);
    let mut buf = match found {
        Some(b) => b,
        None => {
            let mut b = Vec::new();
            b.try_reserve_exact(size).ok()?;
            b.resize(size, 0);
            b
        }
    };
    f.read_exact_at(&mut buf[..n], at).ok()?;
    Some(Bytes::from_owner(Pooled { buf, len: n }))
}

/// `len` bytes of `f` from `at`; None if the file is shorter now or the memory
/// is not there.
fn read_at(f: &fs::File, at: u64, len: u64) -> Option<Vec<u8>> {
    let n = usize::try_from(len).ok()?;
    let mut buf = Vec::new();
    buf.try_reserve_exact(n).ok()?;
    buf.resize(n, 0);
    f.read_exact_at(&mut buf, at).ok()?;
    Some(buf)
}

fn is_hex16(name: &str) -> bool {
    name.len() == 16 && name.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

fn is_number(name: &str) -> bool {
    !name.is_empty() && name.len() <= 20 && name.bytes().all(|b| b.is_ascii_digit())
}

/// The names of a store's files the cache keeps: its data files and small files.
fn is_store_file(name: &str) -> bool {
    let data = name
        .strip_prefix("data-")
        .and_then(|n| n.strip_suffix(".bin"))
        .is_some_and(is_number);
    data || [
        zrecord::INDEX_FILE,
        zrecord::INDEX_SUMS_FILE,
        zrecord::DICT_FILE,
        zrecord::ATTRS_FILE,
    ]
    .contains(&name)
}

/// A temporary name `put_file` makes: `.tmp-<pid>-<sequence>`.
fn is_temp(name: &str) -> bool {
    name.strip_prefix(".tmp-")
        .and_then(|rest| rest.split_once('-'))
        .is_some_and(|(pid, seq)| is_number(pid) && is_number(seq))
}

/// The directories directly in `dir` (not links to them) whose names `keep` accepts.
fn subdirs(dir: &Path, keep: fn(&str) -> bool) -> Vec<PathBuf> {
    let Ok(rd) = fs::read_dir(dir) else {
        return Vec::new();
    };
    rd.flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .filter(|e| e.file_name().to_str().is_some_and(keep))
        .map(|e| e.path())
        .collect()
}

/// Makes sure `dir` (an existing directory) is a cache: it holds the marker, or
/// it is empty or holds only store directories (a cache made before the marker)
/// and is marked now. Anything else is refused before anything is touched.
fn claim(dir: &Path) -> Result<()> {
    let marker = dir.join(MARKER);
    if fs::symlink_metadata(&marker).is_ok_and(|m| m.is_file()) {
        return Ok(());
    }
    for ent in fs::read_dir(dir).map_err(io(dir))? {
        let ent = ent.map_err(io(dir))?;
        let name = ent.file_name();
        let kind = ent.file_type().ok();
        if name == MARKER && kind.is_some_and(|t| t.is_file()) {
            // Another process marked it meanwhile.
            return Ok(());
        }
        let store = kind.is_some_and(|t| t.is_dir()) && name.to_str().is_some_and(is_hex16);
        if !store {
            return Err(Error::invalid(format!(
                "{}: not a loaderx cache: it holds {:?} and no {MARKER} file. A cache \
                 removes files to stay under its limit, so it needs a directory of its \
                 own: give a new or empty one",
                dir.display(),
                name.to_string_lossy()
            )));
        }
    }
    fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOFOLLOW)
        .open(&marker)
        .and_then(|mut f| f.write_all(MARKER_TEXT))
        .map_err(io(&marker))
}

impl Cache {
    /// Opens (creating if needed) the cache directory `dir`, which may hold at
    /// most `max_bytes` of blocks of `block_bytes` each. A directory that exists
    /// must be a cache already, or empty, or hold only store directories.
    pub fn open(dir: &Path, max_bytes: u64, block_bytes: u64) -> Result<Cache> {
        if block_bytes == 0 || block_bytes > 1 << 30 {
            return Err(Error::invalid(format!(
                "cache block_bytes must be in 1..=1073741824, got {block_bytes}"
            )));
        }
        // stat, not open: a FIFO at the path is refused without blocking. A link
        // to a directory is the caller's choice of directory.
        match fs::metadata(dir) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => {
                return Err(Error::invalid(format!(
                    "{}: the cache path exists and is not a directory",
                    dir.display()
                )))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                fs::create_dir_all(dir).map_err(io(dir))?
            }
            Err(e) => return Err(io(dir)(e)),
        }
        claim(dir)?;
        let cache = Cache {
            dir: dir.to_path_buf(),
            max_bytes,
            block_bytes,
            held: AtomicU64::new(0),
            evicting: Mutex::new(()),
            memory: Pool::process().member(),
            reading: Reading::default(),
        };
        cache.evict();
        Ok(cache)
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Most bytes the directory may hold.
    pub fn max_bytes(&self) -> u64 {
        self.max_bytes
    }

    /// Bytes of every block.
    pub fn block_bytes(&self) -> u64 {
        self.block_bytes
    }

    fn store_dir(&self, store: u64) -> PathBuf {
        self.dir
            .join(format!("{store:016x}"))
            .join(self.block_bytes.to_string())
    }

    fn block_path(&self, store: u64, file: &str, block: u64) -> PathBuf {
        self.store_dir(store).join(file).join(block.to_string())
    }

    /// Bytes `ranges` (each within the block) of block `block` of `file` of the
    /// store whose header checksum is `store`, if the cache holds the block
    /// whole: exactly `len` bytes. The block is read whole into memory, where
    /// later gathers find it, unless the memory for that is taken and the
    /// parts are large: they are then read alone, so that a large record costs
    /// its own bytes however large the block.
    pub(crate) fn read(
        &self,
        store: u64,
        file: &str,
        block: u64,
        len: u64,
        ranges: &[Range<u64>],
    ) -> Option<Vec<Bytes>> {
        if ranges.iter().any(|r| r.start > r.end || r.end > len) {
            return None;
        }
        let key = (store, file.to_string(), block);
        if let Some(whole) = self.kept_block(&key, len) {
            return Some(slices(&whole, 0, ranges));
        }
        let (_reading, waited) = self.reading.mark(&key);
        if waited {
            if let Some(whole) = self.kept_block(&key, len) {
                return Some(slices(&whole, 0, ranges));
            }
        }
        let path = self.block_path(store, file, block);
        let f = self.open_block(&path, len)?;
        // A part at either end of the block may be a piece of a large record
        // that crosses into the next block, so only the parts inside say how
        // large the records are.
        let (inside, bytes) = ranges
            .iter()
            .filter(|r| r.start > 0 && r.end < len)
            .fold((0u64, 0u64), |(n, b), r| (n + 1, b + (r.end - r.start)));
        let small = inside > 0 && bytes < READ_ALONE_BYTES.saturating_mul(inside);
        if len <= KEEP_MAX_BLOCK && (small || self.memory.has_room(len)) {
            let whole = huge::read_block(&f, len)?;
            self.memory.keep(key, whole.clone(), small);
            return Some(slices(&whole, 0, ranges));
        }
        let mut out = Vec::with_capacity(ranges.len());
        let mut i = 0;
        while i < ranges.len() {
            let (start, mut end) = (ranges[i].start, ranges[i].end);
            let mut j = i + 1;
            while j < ranges.len()
                && ranges[j].start >= start
                && ranges[j].start <= end.saturating_add(MERGE_GAP)
            {
                end = end.max(ranges[j].end);
                j += 1;
            }
            let run = read_pooled(&f, start, end - start)?;
            out.extend(slices(&run, start, &ranges[i..j]));
            i = j;
        }
        Some(out)
    }

    /// Whether the cache holds block `block` of `file` whole (`len` bytes),
    /// without reading it: what read-ahead skips.
    pub(crate) fn holds(&self, store: u64, file: &str, block: u64, len: u64) -> bool {
        let key = (store, file.to_string(), block);
        let kept = self.memory.lock();
        if kept.get(&key).is_some_and(|k| k.bytes.len() as u64 == len) {
            return true;
        }
        drop(kept);
        fs::symlink_metadata(self.block_path(store, file, block))
            .is_ok_and(|m| m.is_file() && m.len() == len)
    }

    /// The block `key` if this cache keeps it in memory. Every `TOUCH_AFTER`
    /// its file's time is refreshed, so that every process's eviction sees it
    /// in use; a file gone meanwhile (another process evicted it) drops the
    /// copy too, and the block is fetched and written again.
    fn kept_block(&self, key: &Key, len: u64) -> Option<Bytes> {
        let now = Instant::now();
        self.memory.read(now);
        let bytes = {
            let mut kept = self.memory.lock();
            let k = kept.get_mut(key)?;
            if now.duration_since(k.touched) <= TOUCH_AFTER && k.bytes.len() as u64 == len {
                return Some(k.bytes.clone());
            }
            k.touched = now;
            k.bytes.clone()
        };
        let path = self.block_path(key.0, &key.1, key.2);
        match open_regular(&path) {
            Ok((f, meta)) if meta.len() == len && bytes.len() as u64 == len => {
                let _ = f.set_modified(SystemTime::now());
                Some(bytes)
            }
            _ => {
                self.memory.forget(key);
                None
            }
        }
    }

    /// The blocks of store `store` this process keeps in memory, under one
    /// lock held until the result is dropped: what a warm gather reads all its
    /// blocks through, with no system call and no allocation per block.
    pub(crate) fn kept_blocks(&self, store: u64) -> KeptBlocks<'_> {
        let now = Instant::now();
        self.memory.read(now);
        KeptBlocks {
            kept: self.memory.lock(),
            key: (store, String::new(), 0),
            now,
        }
    }

    /// Notes that a gather read blocks this cache keeps in memory at `now`
    /// through a copy of them it was handed before, which touches nothing
    /// here: a cache idle for a while gives its memory up to the process's
    /// other caches first.
    pub(crate) fn read_kept(&self, now: Instant) {
        self.memory.read(now);
    }

    /// How many blocks this cache's memory has let go of, ever
    /// ([`Memory::released`]).
    pub(crate) fn released(&self) -> u64 {
        self.memory.released()
    }

    /// The cache file at `path`, opened, if it is a regular file of `len`
    /// bytes. One of another length is removed (its name is the cache's, and a
    /// wrong length is damage), and the time of one not used lately refreshed.
    fn open_block(&self, path: &Path, len: u64) -> Option<fs::File> {
        let (f, meta) = open_regular(path).ok()?;
        if meta.len() != len {
            let _ = fs::remove_file(path);
            return None;
        }
        if meta
            .modified()
            .ok()
            .and_then(|m| SystemTime::now().duration_since(m).ok())
            .is_some_and(|age| age > TOUCH_AFTER)
        {
            let _ = f.set_modified(SystemTime::now());
        }
        Some(f)
    }

    /// The file of block `block` of `file` (`len` bytes), opened, with its
    /// path, if the cache holds it: for records read from it straight into
    /// their output. Its time is refreshed as a read's is.
    pub(crate) fn open_held(
        &self,
        store: u64,
        file: &str,
        block: u64,
        len: u64,
    ) -> Option<(fs::File, PathBuf)> {
        let path = self.block_path(store, file, block);
        Some((self.open_block(&path, len)?, path))
    }

    /// Block `block` of `file` whole (`len` bytes) from its file, not kept in
    /// this cache's memory: for blocks another memory keeps (the index's), which
    /// would only take the room of data blocks here.
    pub(crate) fn read_whole(&self, store: u64, file: &str, block: u64, len: u64) -> Option<Bytes> {
        let f = self.open_block(&self.block_path(store, file, block), len)?;
        huge::read_block(&f, len)
    }

    /// A small file of the store (its index, say), if the cache holds `len` bytes.
    pub(crate) fn get_small(&self, store: u64, file: &str, len: u64) -> Option<Vec<u8>> {
        let f = self.open_block(&self.store_dir(store).join(file).join("whole"), len)?;
        read_at(&f, 0, len)
    }

    /// Stores a block, as [`Cache::put_blocks`] stores several.
    #[cfg(test)]
    pub(crate) fn put(&self, store: u64, file: &str, block: u64, bytes: &[u8]) {
        self.put_blocks(store, [(file, block, bytes)]);
    }

    /// Stores the blocks of `blocks` (file, block number, bytes). Failures (a
    /// full disk, a removed directory) only cost the next read a fetch, so
    /// they are not errors.
    pub(crate) fn put_blocks(
        &self,
        store: u64,
        blocks: impl IntoIterator<Item = (impl AsRef<str>, u64, impl AsRef<[u8]>)>,
    ) {
        let mut checked = Checked::default();
        for (file, block, bytes) in blocks {
            let path = self.block_path(store, file.as_ref(), block);
            self.put_file(&path, bytes.as_ref(), &mut checked);
        }
    }

    /// Stores a small file of the store.
    pub(crate) fn put_small(&self, store: u64, file: &str, bytes: &[u8]) {
        let path = self.store_dir(store).join(file).join("whole");
        self.put_file(&path, bytes, &mut Checked::default());
    }

    /// Forgets a block found damaged.
    pub(crate) fn remove(&self, store: u64, file: &str, block: u64) {
        self.memory.forget(&(store, file.to_string(), block));
        let _ = fs::remove_file(self.block_path(store, file, block));
    }

    /// Forgets a small file found damaged.
    pub(crate) fn remove_small(&self, store: u64, file: &str) {
        let _ = fs::remove_file(self.store_dir(store).join(file).join("whole"));
    }

    fn put_file(&self, path: &Path, bytes: &[u8], checked: &mut Checked) {
        if bytes.len() as u64 > self.max_bytes {
            return;
        }
        // The three directories under the cache's must be its own, not links
        // that would take the write elsewhere.
        let Some(parent) = path.parent() else { return };
        if !self.ready_dir(parent, checked) {
            return;
        }
        let tmp = parent.join(format!(
            ".tmp-{}-{}",
            std::process::id(),
            TEMP_SEQ.fetch_add(1, Ordering::Relaxed)
        ));
        // create_new: nothing already at the name (a FIFO, a link) is opened.
        let written = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp)
            .and_then(|mut f| f.write_all(bytes))
            .and_then(|()| fs::rename(&tmp, path));
        if written.is_err() {
            let _ = fs::remove_file(&tmp);
            return;
        }
        let held = self
            .held
            .fetch_add(bytes.len() as u64, Ordering::Relaxed)
            .saturating_add(bytes.len() as u64);
        if held > self.max_bytes {
            self.evict();
        }
    }

    /// The cache's own files: regular files at the names it writes, under
    /// directories (never links) at the names it makes. Returns the blocks and
    /// small files, and the temporary files and claims (`claim`).
    fn own_files(&self) -> (Vec<OwnFile>, Vec<OwnFile>) {
        let (mut files, mut temps) = (Vec::new(), Vec::new());
        for store in subdirs(&self.dir, is_hex16) {
            for size in subdirs(&store, is_number) {
                for file in subdirs(&size, is_store_file) {
                    let Ok(rd) = fs::read_dir(&file) else {
                        continue;
                    };
                    for ent in rd.flatten() {
                        let Ok(meta) = ent.metadata() else { continue };
                        if !meta.is_file() {
                            continue;
                        }
                        let name = ent.file_name();
                        let Some(name) = name.to_str() else { continue };
                        let own = OwnFile {
                            mtime: meta.modified().unwrap_or(SystemTime::UNIX_EPOCH),
                            len: meta.len(),
                            path: ent.path(),
                        };
                        if is_temp(name) || claim::is_claim(name) {
                            temps.push(own);
                        } else if is_number(name) || name == "whole" {
                            files.push(own);
                        }
                    }
                }
            }
        }
        (files, temps)
    }

    /// Removes the least recently used blocks until the directory holds at most
    /// nine tenths of its limit (so that eviction does not run on every write),
    /// and temporary files and claims a killed writer left. Every process may run it at any
    /// time: a file another one removed first is skipped.
    fn evict(&self) {
        let Ok(_one) = self.evicting.try_lock() else {
            return;
        };
        let now = SystemTime::now();
        let (mut files, temps) = self.own_files();
        for t in temps {
            if now
                .duration_since(t.mtime)
                .is_ok_and(|age| age > STALE_TEMP)
            {
                let _ = fs::remove_file(&t.path);
            }
        }
        let mut total = files.iter().fold(0u64, |n, f| n.saturating_add(f.len));
        if total > self.max_bytes {
            files.sort_unstable_by_key(|f| f.mtime);
            let target = self.max_bytes / 10 * 9;
            for f in files {
                if total <= target {
                    break;
                }
                if fs::remove_file(&f.path).is_ok() {
                    total = total.saturating_sub(f.len);
                }
            }
        }
        self.held.store(total, Ordering::Relaxed);
    }
}

/// A file of the cache's own, as eviction found it.
struct OwnFile {
    mtime: SystemTime,
    len: u64,
    path: PathBuf,
}

/// `ranges` (offsets in the file) of `bytes`, which hold the file from `at`.
fn slices(bytes: &Bytes, at: u64, ranges: &[Range<u64>]) -> Vec<Bytes> {
    ranges
        .iter()
        .map(|r| bytes.slice((r.start - at) as usize..(r.end - at) as usize))
        .collect()
}

/// Numbers temporary names, so that two writers of one process never share one.
static TEMP_SEQ: AtomicU64 = AtomicU64::new(0);

mod claim;
mod memory;
mod reading;

#[cfg(test)]
#[allow(clippy::single_range_in_vec_init)] // one range is a case to test
mod tests;
