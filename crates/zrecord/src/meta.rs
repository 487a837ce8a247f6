//! An opened store's metadata: its header, dictionary, attributes and index, and
//! the checks that tie them together. Opening checks what is cheap to check
//! whatever the store's size: the header, the dictionary, the attributes, the
//! table of index block checksums, and the whole index when it is small and its
//! source holds it. A large index is checked block by block the first time an
//! entry in the block is used; an index fetched on demand, block by block as each
//! comes in (see the `held` module); every entry used is checked against the
//! data files' sizes and the schema.
//!
//! Nothing read from a store is trusted for arithmetic: every offset, length and
//! shape goes through checked operations, so a damaged or hostile store gives an
//! error naming the file and record, never a panic or an out-of-bounds read.

use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use xxhash_rust::xxh3::xxh3_64;

use crate::codec::{Codec, Decoder, MAX_EXPANSION};
use crate::error::{Error, Result};
use crate::format::{
    self, le_u64, Entry, Header, Kind, Schema, ENTRY_FIXED, INDEX_BLOCK_BYTES, MAX_HEADER_BYTES,
    MAX_RECORD_BYTES,
};
use crate::plan::{Resolved, Sizes};
use crate::source::{prefetch, IndexSource};

/// Indexes up to this size are checked whole at open, which costs microseconds;
/// larger ones block by block as reads first use them.
const EAGER_INDEX_BYTES: usize = 1 << 20;

/// How many positions ahead of the one being resolved its index entry is asked
/// for. A random gather is bound by memory latency: each record costs a cache
/// miss on its entry and another on its payload, and asking early keeps several
/// misses in flight instead of one at a time: sixteen, about as many as a core
/// tracks (fewer left gathers of tiny records waiting on memory; more gained
/// nothing).
pub(crate) const PREFETCH_AHEAD: usize = 16;

/// How an opened store reads.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReadOptions {
    /// Check every gathered record's stored bytes against the checksum in its
    /// index entry before decoding it, so that damaged payload bytes are an error
    /// rather than data. Costs one xxh3 pass over the stored bytes.
    pub checked: bool,
}

/// The small files of a store and its index, for [`Metadata::from_parts`].
#[derive(Clone, Debug, Default)]
pub struct Parts<I> {
    /// `index.bin`, through whatever holds it.
    pub index: I,
    /// `index.sum`; empty for a version 1 store.
    pub index_sums: Vec<u8>,
    /// `dict.bin`, for `zstd_dict` stores.
    pub dict: Option<Vec<u8>>,
    /// `attrs.json`, when the header says the store has attributes.
    pub attrs: Option<Vec<u8>>,
}

/// What a store's small files say: everything but its index and its records.
#[derive(Debug)]
pub struct StoreInfo {
    path: PathBuf,
    header: Header,
    attrs: Option<Vec<u8>>,
    dict: Option<Vec<u8>>,
    options: ReadOptions,
}

impl StoreInfo {
    /// Where the store was opened: its directory, or the URL it was read from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Everything `header.bin` holds.
    pub fn header(&self) -> &Header {
        &self.header
    }

    /// The store's schema.
    pub fn schema(&self) -> &Schema {
        &self.header.schema
    }

    /// How this store reads.
    pub fn options(&self) -> ReadOptions {
        self.options
    }

    /// Records in the store.
    pub fn len(&self) -> u64 {
        self.header.record_count
    }

    /// Whether the store holds no record.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether a gather decodes records rather than copying them.
    pub fn decodes(&self) -> bool {
        self.header.schema.codec != Codec::Raw
    }

    /// The store's dictionary bytes, for `zstd_dict` stores.
    pub fn dictionary(&self) -> Option<&[u8]> {
        self.dict.as_deref()
    }

    /// The attributes stored with the store (a JSON object), if it has any.
    pub fn attrs(&self) -> Option<&[u8]> {
        self.attrs.as_deref()
    }
}

/// Which index blocks have been checked against their checksums.
struct IndexBlocks {
    /// Whether the whole index was checked at open, so no block needs a look.
    all: bool,
    /// `index.sum`: one xxh3-64 per block.
    sums: Vec<u8>,
    checked: Vec<AtomicU64>,
}

impl IndexBlocks {
    #[inline]
    fn is_checked(&self, block: usize) -> bool {
        self.checked
            .get(block / 64)
            .is_some_and(|w| w.load(Ordering::Relaxed) & (1 << (block % 64)) != 0)
    }

    fn mark(&self, block: usize) {
        if let Some(w) = self.checked.get(block / 64) {
            w.fetch_or(1 << (block % 64), Ordering::Relaxed);
        }
    }
}

/// An opened store's metadata over the index source `I`: what every read of it
/// checks positions and entries against, whichever source holds its records.
/// The part that is not the index is shared, so that a view of the same store
/// over other index bytes ([`Metadata::with_blocks`]) costs no copy.
pub struct Metadata<I> {
    core: Arc<Core>,
    index: I,
    /// Whether every byte `index` hands out was checked against `index.sum`
    /// as it came in, so that no block needs a look on use.
    held_checked: bool,
}

/// Everything of an opened store's metadata but its index.
pub(crate) struct Core {
    pub(crate) info: StoreInfo,
    blocks: IndexBlocks,
    pub(crate) decoder: Decoder,
    pub(crate) entry_size: usize,
    /// Logical bytes of every record of a Dense store; `None` for Ragged.
    pub(crate) dense_bytes: Option<u64>,
    /// Whether records are stored raw, their stored bytes their logical bytes.
    pub(crate) raw: bool,
    pub(crate) index_path: PathBuf,
    data_paths: Vec<PathBuf>,
}

/// Checks the bytes of a small file against the size and checksum the header
/// gives for it, however they were read.
fn check_small(bytes: &[u8], expected: u64, sum: u64, path: &Path, what: &str) -> Result<()> {
    if bytes.len() as u64 != expected {
        return Err(Error::corrupt(
            path,
            format!(
                "{what} is {} bytes but the header says {expected}",
                bytes.len()
            ),
        ));
    }
    if xxh3_64(bytes) != sum {
        return Err(Error::corrupt(path, format!("{what} checksum mismatch")));
    }
    Ok(())
}

/// Refuses a big-endian host, whose integers are not the format's.
pub(crate) fn check_endian() -> Result<()> {
    if cfg!(target_endian = "big") {
        return Err(Error::InvalidArgument(
            "zrecord stores are little-endian; this host is big-endian".into(),
        ));
    }
    Ok(())
}

impl<I: IndexSource> Metadata<I> {
    /// Opens a store whose files the caller read itself (from object storage,
    /// say): `header` is the bytes of `header.bin`, `parts` the index and the
    /// other small files. `name` names the store in errors (a URL is fine); its
    /// files are `name/index.bin`, `name/data-NNN.bin` and so on. Everything a
    /// local open checks is checked here by the same code, except that the data
    /// files' sizes are the caller's to check (the header gives them:
    /// [`Header::shard_sizes`]).
    pub fn from_parts(
        name: &Path,
        header: &[u8],
        parts: Parts<I>,
        options: ReadOptions,
    ) -> Result<Metadata<I>> {
        check_endian()?;
        let header_path = name.join(format::HEADER_FILE);
        if header.len() as u64 > MAX_HEADER_BYTES {
            return Err(Error::corrupt(
                &header_path,
                format!(
                    "the header is {} bytes; a header is at most {MAX_HEADER_BYTES}",
                    header.len()
                ),
            ));
        }
        let header = Header::decode(header, &header_path)?;
        Metadata::new(name, header, parts, options)
    }

    /// Checks `parts` against `header` and the header's own rules that tie it to
    /// its files, for every way of opening a store.
    pub(crate) fn new(
        name: &Path,
        header: Header,
        parts: Parts<I>,
        options: ReadOptions,
    ) -> Result<Metadata<I>> {
        let index_path = name.join(format::INDEX_FILE);
        if parts.index.len() != header.index_size {
            return Err(Error::corrupt(
                &index_path,
                format!(
                    "the index is {} bytes but the header says {} (truncated or extended)",
                    parts.index.len(),
                    header.index_size
                ),
            ));
        }
        // The header's index size is a product the header checked, and the
        // source holds that many bytes, so it fits in memory's address space.
        let index_len = header.index_size as usize;
        if header.version >= 2 {
            check_small(
                &parts.index_sums,
                format::index_sums_size(header.index_size),
                header.index_sums_xxh3,
                &name.join(format::INDEX_SUMS_FILE),
                "the index checksum file",
            )?;
        }
        for (file, size, sum, what, have) in [
            (
                format::DICT_FILE,
                header.dict_size,
                header.dict_xxh3,
                "the dictionary",
                &parts.dict,
            ),
            (
                format::ATTRS_FILE,
                header.attrs_size,
                header.attrs_xxh3,
                "the attributes file",
                &parts.attrs,
            ),
        ] {
            match (size, have) {
                (0, None) => {}
                (_, Some(bytes)) => check_small(bytes, size, sum, &name.join(file), what)?,
                (_, None) => {
                    return Err(Error::corrupt(
                        name.join(file),
                        format!("{what} is missing"),
                    ))
                }
            }
        }
        let sums = parts.index_sums;
        // An index its source holds whole is checked whole here when it is small
        // or has no block checksums; one fetched on demand (the source holds
        // none of it yet) is checked block by block as it comes in. An empty
        // index has no blocks to fetch: it is whole wherever it lies.
        let whole = if index_len == 0 {
            Some(&[][..])
        } else if sums.is_empty() || index_len <= EAGER_INDEX_BYTES {
            parts.index.bytes(0..index_len)
        } else {
            None
        };
        let blocks = match whole {
            Some(whole) => {
                if xxh3_64(whole) != header.index_xxh3 {
                    return Err(Error::corrupt(
                        &index_path,
                        "index checksum mismatch (the index is damaged)",
                    ));
                }
                IndexBlocks {
                    all: true,
                    sums,
                    checked: Vec::new(),
                }
            }
            None if sums.is_empty() => {
                return Err(Error::Internal(
                    "an index without block checksums must be read whole".into(),
                ))
            }
            None => IndexBlocks {
                all: false,
                sums,
                checked: (0..index_len.div_ceil(INDEX_BLOCK_BYTES).div_ceil(64))
                    .map(|_| AtomicU64::new(0))
                    .collect(),
            },
        };
        let decoder = Decoder::new(header.schema.codec, parts.dict.as_deref())
            .map_err(|e| Error::corrupt(name, e.to_string()))?;
        let dense_bytes = match header.schema.kind {
            Kind::Dense => header.schema.record_bytes(),
            Kind::Ragged => None,
        };
        if let (Some(rb), Codec::Raw) = (dense_bytes, header.schema.codec) {
            let largest = header.shard_sizes.iter().copied().max().unwrap_or(0);
            if header.record_count > 0 && rb > largest {
                return Err(Error::corrupt(
                    name,
                    format!("raw records of {rb} bytes cannot fit in any data file"),
                ));
            }
        }
        Ok(Metadata {
            core: Arc::new(Core {
                entry_size: header.schema.entry_size(),
                raw: header.schema.codec == Codec::Raw,
                dense_bytes,
                data_paths: (0..header.shard_sizes.len())
                    .map(|f| name.join(format::data_file(f)))
                    .collect(),
                index_path,
                blocks,
                decoder,
                info: StoreInfo {
                    path: name.to_path_buf(),
                    header,
                    attrs: parts.attrs,
                    dict: parts.dict,
                    options,
                },
            }),
            index: parts.index,
            held_checked: false,
        })
    }

    /// The metadata of the same store over another index source, sharing
    /// everything else; the new source holds only bytes checked against
    /// `index.sum` already.
    pub(crate) fn rebind<J: IndexSource>(&self, index: J) -> Metadata<J> {
        Metadata {
            core: self.core.clone(),
            index,
            held_checked: true,
        }
    }

    /// Everything but the index.
    #[inline]
    pub(crate) fn core(&self) -> &Core {
        &self.core
    }

    /// What the store's small files say.
    pub fn info(&self) -> &StoreInfo {
        &self.core.info
    }

    /// Records in the store.
    #[inline]
    pub fn len(&self) -> u64 {
        self.core.info.header.record_count
    }

    /// Whether the store holds no record.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The schema of the store.
    #[inline]
    pub(crate) fn schema(&self) -> &Schema {
        &self.core.info.header.schema
    }

    /// The path errors name for data file `file`, or for the index when the
    /// file does not exist.
    pub(crate) fn data_path(&self, file: usize) -> &Path {
        self.core
            .data_paths
            .get(file)
            .unwrap_or(&self.core.index_path)
    }

    /// Checks the whole index against its checksum in the header.
    pub fn check_index(&self) -> Result<()> {
        let len = self.core.info.header.index_size as usize;
        let whole = self.index.bytes(0..len).ok_or_else(|| {
            Error::Internal("the index source does not hold the whole index".into())
        })?;
        self.check_index_digest(xxh3_64(whole))
    }

    /// Checks `digest`, the xxh3-64 of the whole index however it was read (a
    /// caller streaming it computes it in steps), against the header's.
    pub fn check_index_digest(&self, digest: u64) -> Result<()> {
        if digest != self.core.info.header.index_xxh3 {
            return Err(Error::corrupt(
                &self.core.index_path,
                "index checksum mismatch (the index is damaged)",
            ));
        }
        Ok(())
    }

    /// The raw bytes of entry `i`, after checking the index blocks they lie in.
    #[inline]
    pub(crate) fn entry_bytes(&self, i: u64) -> Result<&[u8]> {
        self.held_entry_bytes(i)
            .unwrap_or_else(|| Err(self.entry_missing(i)))
    }

    /// [`Metadata::entry_bytes`], or `None` if the index source does not hold
    /// them.
    #[inline]
    fn held_entry_bytes(&self, i: u64) -> Option<Result<&[u8]>> {
        let es = self.core.entry_size;
        let at = usize::try_from(i).ok()?.checked_mul(es)?;
        let raw = self.index.bytes(at..at.checked_add(es)?)?;
        if !self.held_checked && !self.core.blocks.all {
            let (first, last) = (at / INDEX_BLOCK_BYTES, (at + es - 1) / INDEX_BLOCK_BYTES);
            if !self.core.blocks.is_checked(first) {
                if let Err(e) = self.check_block(first) {
                    return Some(Err(e));
                }
            }
            if last != first && !self.core.blocks.is_checked(last) {
                if let Err(e) = self.check_block(last) {
                    return Some(Err(e));
                }
            }
        }
        Some(Ok(raw))
    }

    /// Why entry `i` could not be had: a position past the end, or (a bug) an
    /// index source that does not hold the entry of a position inside.
    #[cold]
    fn entry_missing(&self, i: u64) -> Error {
        if i < self.len() {
            Error::Internal(format!("the index entry of record {i} is not held"))
        } else {
            Error::OutOfRange {
                index: i as i128,
                len: self.len(),
            }
        }
    }

    #[cold]
    fn check_block(&self, block: usize) -> Result<()> {
        let bytes = self
            .index
            .bytes(self.index_block_bytes(block))
            .ok_or_else(|| Error::Internal(format!("index block {block} is not held")))?;
        self.check_block_sum(block, bytes)?;
        self.core.blocks.mark(block);
        Ok(())
    }

    /// Byte range of block `block` of the index: [`INDEX_BLOCK_BYTES`] but for
    /// the last block, empty past the end.
    pub(crate) fn index_block_bytes(&self, block: usize) -> Range<usize> {
        let len = self.core.info.header.index_size as usize;
        let start = block.saturating_mul(INDEX_BLOCK_BYTES).min(len);
        start..len.min(start.saturating_add(INDEX_BLOCK_BYTES))
    }

    /// Checks `bytes`, read as index block `block`, against its checksum in
    /// `index.sum`: the one rule for a block, however it was read.
    pub(crate) fn check_block_sum(&self, block: usize, bytes: &[u8]) -> Result<()> {
        let want = self
            .core
            .blocks
            .sums
            .get(block.saturating_mul(8)..block.saturating_mul(8).saturating_add(8))
            .map(|w| le_u64(w, 0));
        let range = self.index_block_bytes(block);
        if bytes.len() != range.len() {
            return Err(Error::corrupt(
                &self.core.index_path,
                format!(
                    "index block {block} is {} bytes where the index holds {} (the index is damaged)",
                    bytes.len(),
                    range.len()
                ),
            ));
        }
        if want != Some(xxh3_64(bytes)) {
            return Err(Error::corrupt(
                &self.core.index_path,
                format!("index block {block} checksum mismatch (the index is damaged)"),
            ));
        }
        Ok(())
    }

    /// Asks the CPU for the index entry of position `q`, to be resolved soon.
    #[inline]
    pub(crate) fn prefetch_entry(&self, q: u64) {
        if let Some(at) = usize::try_from(q)
            .ok()
            .and_then(|q| q.checked_mul(self.core.entry_size))
        {
            if let Some(b) = self.index.bytes(at..at.saturating_add(1)) {
                prefetch(b.as_ptr());
            }
        }
    }

    /// Logical bytes of record `i` whose entry bytes are `raw`.
    #[inline]
    fn logical_bytes(&self, i: u64, raw: &[u8]) -> Result<u64> {
        if let Some(n) = self.core.dense_bytes {
            return Ok(n);
        }
        raw[ENTRY_FIXED..]
            .chunks_exact(8)
            .try_fold(self.schema().dtype.itemsize() as u64, |n, w| {
                n.checked_mul(le_u64(w, 0))
            })
            .filter(|&n| n <= MAX_RECORD_BYTES)
            .ok_or_else(|| {
                Error::corrupt_record(
                    &self.core.index_path,
                    i,
                    "its shape is out of range (over the 2 GiB record limit)",
                )
            })
    }

    /// The entry of record `i` and its logical size, checked: it lies inside an
    /// existing data file and its stored length can hold its shape.
    #[inline]
    pub(crate) fn checked_entry(&self, i: u64) -> Result<(Entry, u64)> {
        self.check_entry(i, self.entry_bytes(i)?)
    }

    /// The entry of record `i` whose index bytes are `raw`, and its logical
    /// size, checked as [`Metadata::checked_entry`] checks them.
    #[inline]
    fn check_entry(&self, i: u64, raw: &[u8]) -> Result<(Entry, u64)> {
        let e = Entry::decode(raw);
        let logical = self.logical_bytes(i, raw)?;
        self.check_decoded(i, e, logical)
    }

    /// `e`, the entry of record `i` with `logical` bytes, if it lies inside
    /// an existing data file and its stored length can hold them.
    #[inline]
    pub(crate) fn check_decoded(&self, i: u64, e: Entry, logical: u64) -> Result<(Entry, u64)> {
        let stored = e.stored_len as u64;
        let in_file = self
            .core
            .info
            .header
            .shard_sizes
            .get(e.file as usize)
            .is_some_and(|&size| e.offset.checked_add(stored).is_some_and(|end| end <= size));
        let fits = if self.core.raw {
            stored == logical
        } else {
            stored.saturating_mul(MAX_EXPANSION) >= logical
        };
        if in_file && fits {
            Ok((e, logical))
        } else {
            Err(self.entry_error(i, &e, logical))
        }
    }

    #[cold]
    fn entry_error(&self, i: u64, e: &Entry, logical: u64) -> Error {
        let msg = match self.core.info.header.shard_sizes.get(e.file as usize) {
            None => format!("data file {} does not exist", e.file),
            Some(&size)
                if e.offset
                    .checked_add(e.stored_len as u64)
                    .is_none_or(|end| end > size) =>
            {
                format!(
                    "points past the end of {}",
                    self.data_path(e.file as usize).display()
                )
            }
            Some(_) => format!(
                "stores {} bytes, which cannot hold its {logical} logical bytes",
                e.stored_len
            ),
        };
        Error::corrupt_record(&self.core.index_path, i, msg)
    }

    /// The checked entry of record `i` (as a gather would check it) and the
    /// bytes its index entry holds after the fixed part: the shape, for Ragged.
    pub(crate) fn entry_and_shape(&self, i: u64) -> Result<(Entry, &[u8])> {
        let (e, _) = self.checked_entry(i)?;
        let raw = self.entry_bytes(i)?;
        Ok((e, &raw[ENTRY_FIXED..]))
    }

    /// The checked index entries of the records at `idx`: where each record's
    /// stored bytes are (data file, offset, length) and their checksum. A reader
    /// whose records are fetched asks for these bytes before it plans.
    pub fn entries(&self, idx: &[u64]) -> Result<Vec<Entry>> {
        self.check_positions(idx)?;
        self.resolve(idx)
    }

    /// The records at `idx` resolved ([`Resolved`]: checked entries, logical
    /// sizes and shapes) if the index source holds every entry; `None` if it
    /// lacks any (a caller holding part of the index fetches the rest and asks
    /// again).
    pub fn held_entries(&self, idx: &[u64]) -> Result<Option<Resolved>> {
        self.check_positions(idx)?;
        let shape_bytes = self.shape_bytes();
        let mut entries = Vec::with_capacity(idx.len());
        let mut logicals = Vec::with_capacity(idx.len());
        let mut shapes = Vec::with_capacity(idx.len() * shape_bytes);
        // Each entry found first (lookups in the held blocks, which touch no
        // entry), then decoded with the line of the entry PREFETCH_AHEAD on
        // asked of the CPU, as `resolve` asks.
        let mut raws: Vec<&[u8]> = Vec::with_capacity(idx.len());
        for &p in idx {
            let Some(raw) = self.held_entry_bytes(p) else {
                return Ok(None);
            };
            raws.push(raw?);
        }
        for raw in raws.iter().take(PREFETCH_AHEAD) {
            prefetch(raw.as_ptr());
        }
        for (k, (&p, raw)) in idx.iter().zip(&raws).enumerate() {
            if let Some(ahead) = raws.get(k + PREFETCH_AHEAD) {
                prefetch(ahead.as_ptr());
            }
            let (e, logical) = self.check_entry(p, raw)?;
            entries.push(e);
            logicals.push(logical);
            if shape_bytes > 0 {
                shapes.extend_from_slice(&raw[ENTRY_FIXED..ENTRY_FIXED + shape_bytes]);
            }
        }
        Ok(Some(Resolved {
            entries,
            sizes: Sizes::new(logicals, shapes),
        }))
    }

    /// The checked entries of `ids`, with the index entries a few positions
    /// ahead prefetched.
    pub(crate) fn resolve(&self, ids: &[u64]) -> Result<Vec<Entry>> {
        let mut entries = Vec::with_capacity(ids.len());
        for (k, &p) in ids.iter().enumerate() {
            if let Some(&q) = ids.get(k + PREFETCH_AHEAD) {
                self.prefetch_entry(q);
            }
            entries.push(self.checked_entry(p)?.0);
        }
        Ok(entries)
    }

    pub(crate) fn check_positions(&self, idx: &[u64]) -> Result<()> {
        let len = self.len();
        match idx.iter().find(|&&p| p >= len) {
            Some(&p) => Err(Error::OutOfRange {
                index: p as i128,
                len,
            }),
            None => Ok(()),
        }
    }

    pub(crate) fn check_range(&self, range: &Range<u64>) -> Result<()> {
        if range.start > range.end || range.end > self.len() {
            return Err(Error::InvalidArgument(format!(
                "records {}..{} are not a range inside 0..{}",
                range.start,
                range.end,
                self.len()
            )));
        }
        Ok(())
    }
}
