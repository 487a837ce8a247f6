//! An opened store's metadata: its header, dictionary, attributes and index, and
//! the checks that tie them together. Opening checks what is cheap to check
//! whatever the store's size: the header, the dictionary, the attributes, the
//! table of index block checksums, and the whole index when it is small. A large
//! index is checked block by block the first time an entry in the block is used;
//! every entry used is checked against the data files' sizes and the schema.
//!
//! Nothing read from a store is trusted for arithmetic: every offset, length and
//! shape goes through checked operations, so a damaged or hostile store gives an
//! error naming the file and record, never a panic or an out-of-bounds read.

use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use xxhash_rust::xxh3::xxh3_64;

use crate::codec::{Codec, Decoder, MAX_EXPANSION};
use crate::error::{Error, Result};
use crate::format::{
    self, le_u64, Entry, Header, Kind, Schema, ENTRY_FIXED, INDEX_BLOCK_BYTES, MAX_HEADER_BYTES,
    MAX_RECORD_BYTES,
};
use crate::source::{prefetch, IndexSource};

/// Indexes up to this size are checked whole at open, which costs microseconds;
/// larger ones block by block as reads first use them.
const EAGER_INDEX_BYTES: usize = 1 << 20;

/// How many positions ahead of the one being resolved its index entry is asked
/// for. A random gather is bound by memory latency: each record costs a cache
/// miss on its entry and another on its payload, and asking early keeps several
/// misses in flight instead of one at a time.
pub(crate) const PREFETCH_AHEAD: usize = 8;

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
pub struct Metadata<I> {
    info: StoreInfo,
    index: I,
    blocks: IndexBlocks,
    pub(crate) decoder: Decoder,
    pub(crate) entry_size: usize,
    /// Logical bytes of every record of a Dense store; `None` for Ragged.
    pub(crate) dense_bytes: Option<u64>,
    /// Whether records are stored raw, their stored bytes their logical bytes.
    pub(crate) raw: bool,
    index_path: PathBuf,
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
        let blocks = if sums.is_empty() || index_len <= EAGER_INDEX_BYTES {
            let whole = parts.index.bytes(0..index_len).ok_or_else(|| {
                Error::Internal("the index source does not hold the whole index".into())
            })?;
            if xxh3_64(whole) != header.index_xxh3 {
                return Err(Error::corrupt(
                    &index_path,
                    "index checksum mismatch (the index is damaged)",
                ));
            }
            IndexBlocks {
                all: true,
                sums: Vec::new(),
                checked: Vec::new(),
            }
        } else {
            IndexBlocks {
                all: false,
                sums,
                checked: (0..index_len.div_ceil(INDEX_BLOCK_BYTES).div_ceil(64))
                    .map(|_| AtomicU64::new(0))
                    .collect(),
            }
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
            entry_size: header.schema.entry_size(),
            raw: header.schema.codec == Codec::Raw,
            dense_bytes,
            data_paths: (0..header.shard_sizes.len())
                .map(|f| name.join(format::data_file(f)))
                .collect(),
            index_path,
            index: parts.index,
            blocks,
            decoder,
            info: StoreInfo {
                path: name.to_path_buf(),
                header,
                attrs: parts.attrs,
                dict: parts.dict,
                options,
            },
        })
    }

    /// What the store's small files say.
    pub fn info(&self) -> &StoreInfo {
        &self.info
    }

    /// Records in the store.
    #[inline]
    pub fn len(&self) -> u64 {
        self.info.header.record_count
    }

    /// Whether the store holds no record.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The schema of the store.
    #[inline]
    pub(crate) fn schema(&self) -> &Schema {
        &self.info.header.schema
    }

    /// The path errors name for data file `file`, or for the index when the
    /// file does not exist.
    pub(crate) fn data_path(&self, file: usize) -> &Path {
        self.data_paths.get(file).unwrap_or(&self.index_path)
    }

    /// Checks the whole index against its checksum in the header.
    pub fn check_index(&self) -> Result<()> {
        let len = self.info.header.index_size as usize;
        let whole = self.index.bytes(0..len).ok_or_else(|| {
            Error::Internal("the index source does not hold the whole index".into())
        })?;
        if xxh3_64(whole) != self.info.header.index_xxh3 {
            return Err(Error::corrupt(
                &self.index_path,
                "index checksum mismatch (the index is damaged)",
            ));
        }
        Ok(())
    }

    /// The raw bytes of entry `i`, after checking the index blocks they lie in.
    #[inline]
    pub(crate) fn entry_bytes(&self, i: u64) -> Result<&[u8]> {
        let es = self.entry_size;
        let at = usize::try_from(i).ok().and_then(|i| i.checked_mul(es));
        let Some((at, raw)) =
            at.and_then(|at| Some((at, self.index.bytes(at..at.checked_add(es)?)?)))
        else {
            return Err(Error::OutOfRange {
                index: i as i128,
                len: self.len(),
            });
        };
        if !self.blocks.all {
            let (first, last) = (at / INDEX_BLOCK_BYTES, (at + es - 1) / INDEX_BLOCK_BYTES);
            if !self.blocks.is_checked(first) {
                self.check_block(first)?;
            }
            if last != first && !self.blocks.is_checked(last) {
                self.check_block(last)?;
            }
        }
        Ok(raw)
    }

    #[cold]
    fn check_block(&self, block: usize) -> Result<()> {
        let start = block * INDEX_BLOCK_BYTES;
        let len = self.info.header.index_size as usize;
        let bytes = self
            .index
            .bytes(start..len.min(start + INDEX_BLOCK_BYTES))
            .ok_or_else(|| Error::Internal(format!("index block {block} is not held")))?;
        let want = self
            .blocks
            .sums
            .get(block * 8..block * 8 + 8)
            .map(|w| le_u64(w, 0));
        if want != Some(xxh3_64(bytes)) {
            return Err(Error::corrupt(
                &self.index_path,
                format!("index block {block} checksum mismatch (the index is damaged)"),
            ));
        }
        self.blocks.mark(block);
        Ok(())
    }

    /// Asks the CPU for the index entry of position `q`, to be resolved soon.
    #[inline]
    pub(crate) fn prefetch_entry(&self, q: u64) {
        if let Some(at) = usize::try_from(q)
            .ok()
            .and_then(|q| q.checked_mul(self.entry_size))
        {
            if let Some(b) = self.index.bytes(at..at.saturating_add(1)) {
                prefetch(b.as_ptr());
            }
        }
    }

    /// Logical bytes of record `i` whose entry bytes are `raw`.
    #[inline]
    fn logical_bytes(&self, i: u64, raw: &[u8]) -> Result<u64> {
        if let Some(n) = self.dense_bytes {
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
                    &self.index_path,
                    i,
                    "its shape is out of range (over the 2 GiB record limit)",
                )
            })
    }

    /// The entry of record `i` and its logical size, checked: it lies inside an
    /// existing data file and its stored length can hold its shape.
    #[inline]
    pub(crate) fn checked_entry(&self, i: u64) -> Result<(Entry, u64)> {
        let raw = self.entry_bytes(i)?;
        let e = Entry::decode(raw);
        let logical = self.logical_bytes(i, raw)?;
        let stored = e.stored_len as u64;
        let in_file = self
            .info
            .header
            .shard_sizes
            .get(e.file as usize)
            .is_some_and(|&size| e.offset.checked_add(stored).is_some_and(|end| end <= size));
        let fits = if self.raw {
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
        let msg = match self.info.header.shard_sizes.get(e.file as usize) {
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
        Error::corrupt_record(&self.index_path, i, msg)
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
