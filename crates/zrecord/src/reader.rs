//! An opened store: validated once at open, then gathered from without further
//! checks on the hot path.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use memmap2::Mmap;
use xxhash_rust::xxh3::xxh3_64;

use crate::codec::Decoder;
use crate::error::{Error, IoContext, Result};
use crate::format::{self, le_u64, Entry, Header, Kind, Schema, ENTRY_FIXED, MAX_RECORD_BYTES};
use crate::parallel::{run_parts, Parallel};
use crate::ragged::{element_count, RaggedLayout};

/// Raw records at least this large are read with `pread` instead of copied from
/// the memory map. The system call costs little against the copy at this size, and
/// it keeps large payloads out of the process's mapped (resident) memory: a
/// mapped read would count every record ever touched in the reader's RSS.
const PREAD_MIN_BYTES: usize = 32 << 10;

/// How many records ahead of the copy a gather asks the CPU to fetch. A random
/// gather is bound by memory latency, not bandwidth: each record costs a cache
/// miss on its index entry and another on its payload. Asking for both a few
/// records early keeps several misses in flight instead of one at a time.
const PREFETCH_AHEAD: usize = 8;
/// Bytes of each record's head that are prefetched; the hardware prefetcher
/// streams the rest of a longer record once its first lines arrive.
const PREFETCH_HEAD_BYTES: usize = 256;

/// A hint to move the cache line holding `p` towards the core. It never faults,
/// so any address is allowed.
#[inline(always)]
fn prefetch(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: SSE is part of the x86_64 baseline; a prefetch has no side effects.
    unsafe {
        std::arch::x86_64::_mm_prefetch(p.cast::<i8>(), std::arch::x86_64::_MM_HINT_T0)
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

struct Shard {
    path: PathBuf,
    file: File,
    map: Option<Mmap>,
}

impl Shard {
    #[inline]
    fn bytes(&self) -> &[u8] {
        self.map.as_deref().unwrap_or(&[])
    }
}

/// An opened, read-only store.
pub struct Store {
    path: PathBuf,
    header: Header,
    index: Option<Mmap>,
    entry_size: usize,
    shards: Vec<Shard>,
    decoder: Decoder,
    read_directly: bool,
}

fn map_file(path: &Path, expected: u64, what: &str) -> Result<(File, Option<Mmap>)> {
    let file = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(Error::corrupt(path, format!("{what} is missing")))
        }
        Err(e) => return Err(Error::io(path, e)),
    };
    let size = file.metadata().at(path)?.len();
    if size != expected {
        return Err(Error::corrupt(
            path,
            format!(
                "{what} is {size} bytes but the header says {expected} (truncated or extended)"
            ),
        ));
    }
    if size == 0 {
        return Ok((file, None));
    }
    // SAFETY: published stores are immutable; nothing in this library writes to a
    // published file, and the contract forbids others to.
    let map = unsafe { Mmap::map(&file) }.at(path)?;
    Ok((file, Some(map)))
}

impl Store {
    /// Opens the store at `path` and checks its header, index and files against each other.
    pub fn open(path: &Path) -> Result<Store> {
        if cfg!(target_endian = "big") {
            return Err(Error::InvalidArgument(
                "zrecord stores are little-endian; this host is big-endian".into(),
            ));
        }
        if !path.exists() {
            return Err(Error::NotFound(path.to_path_buf()));
        }
        let hp = path.join(format::HEADER_FILE);
        let raw = match std::fs::read(&hp) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(Error::corrupt(
                    &hp,
                    "missing: this directory is not a published zrecord store",
                ))
            }
            Err(e) => return Err(Error::io(&hp, e)),
        };
        let header = Header::decode(&raw, &hp)?;
        let ip = path.join(format::INDEX_FILE);
        let (_, index) = map_file(&ip, header.index_size, "the index")?;
        let sum = xxh3_64(index.as_deref().unwrap_or(&[]));
        if sum != header.index_xxh3 {
            return Err(Error::corrupt(
                &ip,
                "index checksum mismatch (the index is damaged)",
            ));
        }
        let shards = header
            .shard_sizes
            .iter()
            .enumerate()
            .map(|(s, &size)| {
                let p = path.join(format::data_file(s));
                map_file(&p, size, "the data shard").map(|(file, map)| Shard { path: p, file, map })
            })
            .collect::<Result<Vec<_>>>()?;
        let dict = if header.dict_size > 0 {
            let dp = path.join(format::DICT_FILE);
            let (_, d) = map_file(&dp, header.dict_size, "the dictionary")?;
            let d = d.as_deref().unwrap_or(&[]).to_vec();
            if xxh3_64(&d) != header.dict_xxh3 {
                return Err(Error::corrupt(&dp, "dictionary checksum mismatch"));
            }
            Some(d)
        } else {
            None
        };
        let decoder = Decoder::new(header.schema.codec, dict.as_deref())
            .map_err(|e| Error::corrupt(path, e.to_string()))?;
        let header_codec_is_raw = header.schema.codec == crate::codec::Codec::Raw;
        let store = Store {
            path: path.to_path_buf(),
            entry_size: header.schema.entry_size(),
            header,
            index,
            shards,
            read_directly: header_codec_is_raw,
            decoder,
        };
        store.check_entries(&ip)?;
        Ok(store)
    }

    /// Every entry must point inside its shard and agree with the schema, so that
    /// no gather can read out of bounds whatever the files hold.
    fn check_entries(&self, ip: &Path) -> Result<()> {
        let schema = &self.header.schema;
        let raw = schema.codec == crate::codec::Codec::Raw;
        let isz = schema.dtype.itemsize() as u64;
        for i in 0..self.len() {
            let e = self.entry(i);
            let bad = |msg: String| Err(Error::corrupt_record(ip, i, msg));
            let Some(shard) = self.shards.get(e.shard as usize) else {
                return bad(format!("shard {} does not exist", e.shard));
            };
            if e.offset + e.stored_len as u64 > shard.bytes().len() as u64 {
                return bad(format!("points past the end of {}", shard.path.display()));
            }
            let logical = match schema.kind {
                Kind::Dense => schema.record_bytes().unwrap_or(0),
                Kind::Ragged => {
                    match element_count(&self.shape(i)).and_then(|c| c.checked_mul(isz)) {
                        Some(b) if b <= MAX_RECORD_BYTES => b,
                        _ => return bad("shape is out of range".into()),
                    }
                }
            };
            if raw && e.stored_len as u64 != logical {
                return bad(format!(
                    "stores {} bytes, its shape needs {logical}",
                    e.stored_len
                ));
            }
        }
        Ok(())
    }

    /// Where the store was opened.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The store's schema.
    pub fn schema(&self) -> &Schema {
        &self.header.schema
    }

    /// Everything `header.bin` holds.
    pub fn header(&self) -> &Header {
        &self.header
    }

    /// Records in the store.
    pub fn len(&self) -> u64 {
        self.header.record_count
    }

    /// Whether the store holds no record.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The store's dictionary bytes, for `zstd_dict` stores.
    pub fn dictionary(&self) -> Result<Option<Vec<u8>>> {
        if self.header.dict_size == 0 {
            return Ok(None);
        }
        let dp = self.path.join(format::DICT_FILE);
        std::fs::read(&dp).at(&dp).map(Some)
    }

    #[inline]
    fn entry_bytes(&self, i: u64) -> &[u8] {
        let at = i as usize * self.entry_size;
        &self.index.as_deref().unwrap_or(&[])[at..at + self.entry_size]
    }

    /// The index entry of record `i`, which must be below [`Store::len`].
    #[inline]
    pub fn entry(&self, i: u64) -> Entry {
        Entry::decode(self.entry_bytes(i))
    }

    /// Shape of Ragged record `i`, as raw little-endian u64 words.
    #[inline]
    fn shape_of(&self, i: u64) -> &[u8] {
        &self.entry_bytes(i)[ENTRY_FIXED..]
    }

    /// The shape of Ragged record `i`, which must be below [`Store::len`].
    pub fn shape(&self, i: u64) -> Vec<u64> {
        self.shape_of(i)
            .chunks_exact(8)
            .map(|c| le_u64(c, 0))
            .collect()
    }

    #[inline]
    fn stored(&self, e: &Entry) -> &[u8] {
        let start = e.offset as usize;
        &self.shards[e.shard as usize].bytes()[start..start + e.stored_len as usize]
    }

    fn check_positions(&self, idx: &[u64]) -> Result<()> {
        let len = self.len();
        match idx.iter().find(|&&p| p >= len) {
            Some(&p) => Err(Error::OutOfRange {
                index: p as i128,
                len,
            }),
            None => Ok(()),
        }
    }

    /// Prefetches the index entry of the position `PREFETCH_AHEAD` after `ids[k]`,
    /// for loops that visit the entries of `ids` in order.
    #[inline]
    fn prefetch_entry_ahead(&self, ids: &[u64], k: usize) {
        if let Some(&q) = ids.get(k + PREFETCH_AHEAD) {
            prefetch(self.entry_bytes(q).as_ptr());
        }
    }

    /// Index entries of `ids`, read with the entries a few positions ahead
    /// prefetched.
    fn resolve(&self, ids: &[u64]) -> Vec<Entry> {
        let mut entries = Vec::with_capacity(ids.len());
        for (k, &p) in ids.iter().enumerate() {
            self.prefetch_entry_ahead(ids, k);
            entries.push(self.entry(p));
        }
        entries
    }

    #[inline]
    fn is_direct(&self, dst_len: usize) -> bool {
        self.read_directly && dst_len >= PREAD_MIN_BYTES
    }

    /// Decodes the records `ids` (with their `entries`) into `slots`, one slot per
    /// record, prefetching the stored bytes of the records a few slots ahead.
    fn fill<'a>(
        &self,
        ids: &[u64],
        entries: &[Entry],
        slots: impl Iterator<Item = &'a mut [u8]>,
    ) -> Result<()> {
        let mut session = self.decoder.session();
        for (k, slot) in slots.enumerate() {
            if let Some(e) = entries.get(k + PREFETCH_AHEAD) {
                if !self.is_direct(e.stored_len as usize) {
                    let head = self.stored(e);
                    for line in (0..head.len().min(PREFETCH_HEAD_BYTES)).step_by(64) {
                        prefetch(head[line..].as_ptr());
                    }
                }
            }
            self.decode_entry(&mut session, ids[k], &entries[k], slot)?;
        }
        Ok(())
    }

    fn decode_entry(
        &self,
        session: &mut crate::codec::DecodeSession<'_>,
        pos: u64,
        e: &Entry,
        dst: &mut [u8],
    ) -> Result<()> {
        if self.is_direct(dst.len()) {
            let shard = &self.shards[e.shard as usize];
            if e.stored_len as usize != dst.len() {
                return Err(Error::corrupt_record(&shard.path, pos, "bad stored length"));
            }
            return shard.file.read_exact_at(dst, e.offset).at(&shard.path);
        }
        session
            .decode(self.stored(e), dst)
            .map_err(|msg| Error::corrupt_record(&self.shards[e.shard as usize].path, pos, msg))
    }

    /// Whether a gather decodes records rather than copying them.
    pub fn decodes(&self) -> bool {
        self.header.schema.codec != crate::codec::Codec::Raw
    }

    /// Fills `out` with the Dense records at `idx`, in order.
    pub fn gather_dense(&self, idx: &[u64], out: &mut [u8], par: &dyn Parallel) -> Result<()> {
        let schema = &self.header.schema;
        if schema.kind != Kind::Dense {
            return Err(Error::InvalidArgument(
                "gather_dense on a Ragged store".into(),
            ));
        }
        let rb = schema.record_bytes().unwrap_or(0) as usize;
        if out.len() != idx.len() * rb {
            return Err(Error::InvalidArgument(format!(
                "output holds {} bytes, {} records need {}",
                out.len(),
                idx.len(),
                idx.len() * rb
            )));
        }
        self.check_positions(idx)?;
        if rb == 0 || idx.is_empty() {
            return Ok(());
        }
        let parts = par.parts(out.len(), self.decodes()).max(1);
        let per = idx.len().div_ceil(parts);
        let tasks: Vec<_> = idx.chunks(per).zip(out.chunks_mut(per * rb)).collect();
        run_parts(par, tasks, |(ids, dst)| {
            self.fill(ids, &self.resolve(ids), dst.chunks_exact_mut(rb))
        })
    }

    /// Checks positions and computes where a Ragged gather of `idx` puts its bytes.
    pub fn ragged_layout(&self, idx: &[u64]) -> Result<RaggedLayout> {
        let schema = &self.header.schema;
        if schema.kind != Kind::Ragged {
            return Err(Error::InvalidArgument(
                "a Ragged gather on a Dense store".into(),
            ));
        }
        self.check_positions(idx)?;
        let isz = schema.dtype.itemsize() as u64;
        let mut elements: u64 = 0;
        for (k, &p) in idx.iter().enumerate() {
            self.prefetch_entry_ahead(idx, k);
            // check_entries bounded each record, so this sum cannot overflow u64.
            let bytes = self.logical_ragged_bytes(p);
            elements += bytes / isz;
        }
        RaggedLayout::new(idx.len(), schema.ndim, elements as usize, isz as usize)
    }

    #[inline]
    fn logical_ragged_bytes(&self, pos: u64) -> u64 {
        let mut n = self.header.schema.dtype.itemsize() as u64;
        for w in self.shape_of(pos).chunks_exact(8) {
            n = n.saturating_mul(le_u64(w, 0));
        }
        n
    }

    /// Fills `out` (exactly `layout.total` bytes) with the Ragged records at `idx`.
    pub fn gather_ragged(
        &self,
        idx: &[u64],
        layout: &RaggedLayout,
        out: &mut [u8],
        par: &dyn Parallel,
    ) -> Result<()> {
        if out.len() != layout.total || layout.records != idx.len() {
            return Err(Error::InvalidArgument(
                "output does not match the ragged layout".into(),
            ));
        }
        let isz = self.header.schema.dtype.itemsize();
        let (values, meta) = out.split_at_mut(layout.cu_offset);
        let (cu, shapes) = meta.split_at_mut(layout.shapes_offset - layout.cu_offset);
        let mut acc: u64 = 0;
        cu[..4].copy_from_slice(&0i32.to_le_bytes());
        let shape_bytes = 8 * layout.ndim;
        let entries = self.resolve(idx);
        let mut sizes = Vec::with_capacity(idx.len());
        for (k, &p) in idx.iter().enumerate() {
            let bytes = self.logical_ragged_bytes(p);
            sizes.push(bytes as usize);
            acc += bytes / isz as u64;
            cu[4 * (k + 1)..4 * (k + 2)].copy_from_slice(&(acc as i32).to_le_bytes());
            shapes[k * shape_bytes..(k + 1) * shape_bytes].copy_from_slice(self.shape_of(p));
        }
        let values = &mut values[..layout.values_bytes];
        // Split the records into parts of roughly equal bytes.
        let parts = par.parts(layout.values_bytes, self.decodes()).max(1);
        let target = layout.values_bytes.div_ceil(parts).max(1);
        let mut tasks = Vec::with_capacity(parts);
        let mut rest = values;
        let mut start = 0;
        while start < idx.len() {
            let (mut end, mut bytes) = (start, 0);
            while end < idx.len() && (end == start || bytes < target) {
                bytes += sizes[end];
                end += 1;
            }
            let (dst, tail) = rest.split_at_mut(bytes);
            rest = tail;
            tasks.push((start..end, dst));
            start = end;
        }
        run_parts(par, tasks, |(range, dst)| {
            let mut rest = dst;
            let slots = sizes[range.clone()].iter().map(move |&n| {
                let (slot, tail) = std::mem::take(&mut rest).split_at_mut(n);
                rest = tail;
                slot
            });
            self.fill(&idx[range.clone()], &entries[range], slots)
        })
    }

    /// Reads every record, checks its stored bytes against the index checksum and
    /// decodes it; the first damaged record is reported with its file.
    pub fn verify(&self, par: &dyn Parallel) -> Result<()> {
        let n = self.len();
        let parts = par.parts(usize::MAX, true).max(1) as u64;
        let per = n.div_ceil(parts).max(1);
        let ranges: Vec<_> = (0..parts)
            .map(|k| k * per..((k + 1) * per).min(n))
            .collect();
        run_parts(par, ranges, |range| {
            let mut session = self.decoder.session();
            let mut scratch = Vec::new();
            for i in range {
                let e = self.entry(i);
                let stored = self.stored(&e);
                if xxh3_64(stored) != e.checksum {
                    return Err(Error::corrupt_record(
                        &self.shards[e.shard as usize].path,
                        i,
                        "checksum mismatch (the payload is damaged)",
                    ));
                }
                let logical = match self.header.schema.kind {
                    Kind::Dense => self.header.schema.record_bytes().unwrap_or(0),
                    Kind::Ragged => self.logical_ragged_bytes(i),
                };
                scratch.resize(logical as usize, 0);
                self.decode_entry(&mut session, i, &e, &mut scratch)?;
            }
            Ok(())
        })
    }
}
