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

use std::collections::HashMap;
use std::fs;
use std::io::Write;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use loaderx_gather::{Error, Result};

/// Block size when the caller does not choose: large enough that a block is
/// worth a request, small enough that a random record does not drag much else in.
pub const DEFAULT_CACHE_BLOCK_BYTES: u64 = 1 << 20;
/// The size limit of a cache given as a bare directory.
pub const DEFAULT_CACHE_MAX_BYTES: u64 = 4 << 30;

/// A use refreshes a block's time only if it is older than this, so hot blocks
/// cost no write per read.
const TOUCH_AFTER: Duration = Duration::from_secs(10);
/// Temporary files older than this were left by a killed writer.
const STALE_TEMP: Duration = Duration::from_secs(3600);

/// An opened cache directory with its limits.
#[derive(Debug)]
pub struct Cache {
    dir: PathBuf,
    max_bytes: u64,
    block_bytes: u64,
    /// Bytes this process believes the directory holds; exact after each scan.
    held: AtomicU64,
    evicting: Mutex<()>,
    /// Blocks this process mapped lately, reused by later reads so that a warm
    /// gather does not open, map and unmap every block it touches.
    mapped: Mutex<HashMap<PathBuf, Mapped>>,
}

/// A mapped cache file and when this process last refreshed its time.
#[derive(Debug)]
struct Mapped {
    bytes: Bytes,
    touched: Instant,
}

/// Most bytes of blocks a process keeps mapped (address space, not memory: the
/// pages are the kernel's page cache), and most blocks.
const MAPPED_BYTES: u64 = 4 << 30;
const MAPPED_BLOCKS: u64 = 4096;

fn io(path: &Path) -> impl Fn(std::io::Error) -> Error + '_ {
    move |source| Error::io(path.to_path_buf(), source)
}

impl Cache {
    /// Opens (creating if needed) the cache directory `dir`, which may hold at
    /// most `max_bytes` of blocks of `block_bytes` each.
    pub fn open(dir: &Path, max_bytes: u64, block_bytes: u64) -> Result<Cache> {
        if block_bytes == 0 || block_bytes > 1 << 30 {
            return Err(Error::invalid(format!(
                "cache block_bytes must be in 1..=1073741824, got {block_bytes}"
            )));
        }
        fs::create_dir_all(dir).map_err(io(dir))?;
        if !fs::metadata(dir).map_err(io(dir))?.is_dir() {
            return Err(Error::invalid(format!(
                "{}: the cache path is not a directory",
                dir.display()
            )));
        }
        let cache = Cache {
            dir: dir.to_path_buf(),
            max_bytes,
            block_bytes,
            held: AtomicU64::new(0),
            evicting: Mutex::new(()),
            mapped: Mutex::new(HashMap::new()),
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
    /// whole: exactly `len` bytes. Only the pages of the ranges are touched, so
    /// a small record costs no more than its own bytes however large the block.
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
        let whole = self.map_file(&self.block_path(store, file, block), len, true)?;
        Some(
            ranges
                .iter()
                .map(|r| whole.slice(r.start as usize..r.end as usize))
                .collect(),
        )
    }

    /// A small file of the store (its index, say), if the cache holds `len` bytes.
    pub(crate) fn get_small(&self, store: u64, file: &str, len: u64) -> Option<Bytes> {
        self.map_file(&self.store_dir(store).join(file).join("whole"), len, false)
    }

    /// The whole file at `path`, if it is `len` bytes: mapped, not read, so that
    /// records are decoded straight from the page cache into the output, as a
    /// local store's small records are. A mapping this process made lately is
    /// reused; with `keep`, this one is kept for reuse.
    fn map_file(&self, path: &Path, len: u64, keep: bool) -> Option<Bytes> {
        let now = Instant::now();
        {
            let mut mapped = self.mapped.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(m) = mapped.get_mut(path) {
                if m.bytes.len() as u64 == len {
                    if now.duration_since(m.touched) > TOUCH_AFTER {
                        // Keeps the block recent for every process's eviction;
                        // a block another process evicted meanwhile is gone for
                        // good, and this mapping is dropped.
                        m.touched = now;
                        let touched = fs::File::open(path)
                            .and_then(|f| f.set_modified(SystemTime::now()))
                            .is_ok();
                        if !touched {
                            mapped.remove(path);
                            return None;
                        }
                    }
                    return Some(m.bytes.clone());
                }
                mapped.remove(path);
            }
        }
        let f = fs::File::open(path).ok()?;
        let meta = f.metadata().ok()?;
        if meta.len() != len {
            let _ = fs::remove_file(path);
            return None;
        }
        if len == 0 {
            return Some(Bytes::new());
        }
        // SAFETY: a cache file is written whole under a temporary name and
        // renamed into place, and never written again; eviction unlinks it,
        // which leaves a mapping intact. Another program truncating it while
        // mapped is a fault this reader cannot catch, as for a local store.
        let map = unsafe { memmap2::Mmap::map(&f) }.ok()?;
        if map.len() as u64 != len {
            return None;
        }
        let whole = Bytes::from_owner(map);
        if meta
            .modified()
            .ok()
            .and_then(|m| SystemTime::now().duration_since(m).ok())
            .is_some_and(|age| age > TOUCH_AFTER)
        {
            let _ = f.set_modified(SystemTime::now());
        }
        if !keep {
            return Some(whole);
        }
        let most = (MAPPED_BYTES / len.max(1)).clamp(1, MAPPED_BLOCKS) as usize;
        let mut mapped = self.mapped.lock().unwrap_or_else(|e| e.into_inner());
        if mapped.len() >= most {
            // Any one: the map's order is as good as random, and random
            // replacement does not thrash on a cyclic pattern as LRU would.
            if let Some(k) = mapped.keys().next().cloned() {
                mapped.remove(&k);
            }
        }
        mapped.insert(
            path.to_path_buf(),
            Mapped {
                bytes: whole.clone(),
                touched: now,
            },
        );
        Some(whole)
    }

    /// Forgets this process's mappings: their files may be unlinked, and an
    /// unlinked file's disk space is only freed once no one maps it.
    fn unmap_all(&self) {
        self.mapped
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
    }

    /// Stores a block. Failures (a full disk, a removed directory) only cost the
    /// next read a fetch, so they are not errors.
    pub(crate) fn put(&self, store: u64, file: &str, block: u64, bytes: &[u8]) {
        self.put_file(&self.block_path(store, file, block), bytes);
    }

    /// Stores a small file of the store.
    pub(crate) fn put_small(&self, store: u64, file: &str, bytes: &[u8]) {
        self.put_file(&self.store_dir(store).join(file).join("whole"), bytes);
    }

    /// Forgets a block found damaged.
    pub(crate) fn remove(&self, store: u64, file: &str, block: u64) {
        let path = self.block_path(store, file, block);
        self.mapped
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&path);
        let _ = fs::remove_file(path);
    }

    /// Forgets a small file found damaged.
    pub(crate) fn remove_small(&self, store: u64, file: &str) {
        let _ = fs::remove_file(self.store_dir(store).join(file).join("whole"));
    }

    fn put_file(&self, path: &Path, bytes: &[u8]) {
        if bytes.len() as u64 > self.max_bytes {
            return;
        }
        let Some(parent) = path.parent() else { return };
        if fs::create_dir_all(parent).is_err() {
            return;
        }
        let tmp = parent.join(format!(
            ".tmp-{}-{}",
            std::process::id(),
            TEMP_SEQ.fetch_add(1, Ordering::Relaxed)
        ));
        let written = fs::File::create(&tmp)
            .and_then(|mut f| f.write_all(bytes))
            .and_then(|()| fs::rename(&tmp, path));
        if written.is_err() {
            let _ = fs::remove_file(&tmp);
            return;
        }
        let held = self.held.fetch_add(bytes.len() as u64, Ordering::Relaxed) + bytes.len() as u64;
        if held > self.max_bytes {
            self.evict();
        }
    }

    /// Removes the least recently used blocks until the directory holds at most
    /// nine tenths of its limit (so that eviction does not run on every write),
    /// and temporary files a killed writer left. Every process may run it at any
    /// time: a file another one removed first is skipped.
    fn evict(&self) {
        let Ok(_one) = self.evicting.try_lock() else {
            return;
        };
        let mut files = Vec::new();
        let mut total = 0u64;
        let now = SystemTime::now();
        let mut stack = vec![self.dir.clone()];
        while let Some(d) = stack.pop() {
            let Ok(rd) = fs::read_dir(&d) else { continue };
            for ent in rd.flatten() {
                let Ok(meta) = ent.metadata() else { continue };
                let path = ent.path();
                if meta.is_dir() {
                    stack.push(path);
                    continue;
                }
                let mtime = meta.modified().unwrap_or(SystemTime::UNIX_EPOCH);
                let is_temp = ent.file_name().to_string_lossy().starts_with(".tmp-");
                if is_temp {
                    if now.duration_since(mtime).is_ok_and(|age| age > STALE_TEMP) {
                        let _ = fs::remove_file(&path);
                    }
                    continue;
                }
                total += meta.len();
                files.push((mtime, meta.len(), path));
            }
        }
        if total > self.max_bytes {
            self.unmap_all();
            files.sort_unstable_by_key(|(t, _, _)| *t);
            let target = self.max_bytes / 10 * 9;
            for (_, len, path) in files {
                if total <= target {
                    break;
                }
                if fs::remove_file(&path).is_ok() {
                    total -= len;
                }
            }
        }
        self.held.store(total, Ordering::Relaxed);
    }
}

/// Numbers temporary names, so that two writers of one process never share one.
static TEMP_SEQ: AtomicU64 = AtomicU64::new(0);

#[cfg(test)]
#[allow(clippy::single_range_in_vec_init)] // one range is a case to test
mod tests {
    use super::*;

    #[test]
    fn blocks_round_trip_and_a_wrong_length_is_a_miss() {
        let d = tempfile::tempdir().unwrap();
        let c = Cache::open(d.path(), 1 << 20, 16).unwrap();
        c.put(7, "data-000.bin", 3, b"0123456789abcdef");
        assert_eq!(
            c.read(7, "data-000.bin", 3, 16, &[0..16, 5..9, 2..2]),
            Some(vec![
                Bytes::from_static(b"0123456789abcdef"),
                Bytes::from_static(b"5678"),
                Bytes::new()
            ])
        );
        assert!(
            c.read(7, "data-000.bin", 3, 16, &[0..1, 9..17]).is_none(),
            "past the block"
        );
        assert!(
            c.read(8, "data-000.bin", 3, 16, &[0..16]).is_none(),
            "another store"
        );
        assert!(
            c.read(7, "data-000.bin", 3, 15, &[0..15]).is_none(),
            "another length"
        );
        assert!(
            c.read(7, "data-000.bin", 3, 16, &[0..16]).is_none(),
            "the bad block is gone"
        );
    }

    #[test]
    fn eviction_keeps_the_directory_under_its_limit_oldest_first() {
        let d = tempfile::tempdir().unwrap();
        let c = Cache::open(d.path(), 100, 10).unwrap();
        for b in 0..10u64 {
            c.put(1, "data-000.bin", b, &[b as u8; 10]);
            let old = SystemTime::now() - Duration::from_secs(1000 - b);
            let f = fs::File::options()
                .write(true)
                .open(c.block_path(1, "data-000.bin", b))
                .unwrap();
            f.set_modified(old).unwrap();
        }
        c.put(1, "data-000.bin", 10, &[10; 10]);
        let left: Vec<u64> = (0..11)
            .filter(|&b| c.read(1, "data-000.bin", b, 10, &[0..10]).is_some())
            .collect();
        assert_eq!(left, (2..11).collect::<Vec<_>>());
    }
}
