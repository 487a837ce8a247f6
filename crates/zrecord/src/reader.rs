//! An opened store. Opening checks what is cheap to check whatever the store's
//! size: the header, every file's kind and size, the dictionary, the attributes,
//! the table of index block checksums, and the whole index when it is small. A
//! large index is checked block by block the first time a gather uses an entry in
//! the block; every entry a gather uses is checked against the files and the
//! schema. `verify` checks everything.
//!
//! Nothing read from disk is trusted for arithmetic: every offset, length and
//! shape goes through checked operations, so a damaged or hostile store gives an
//! error naming the file and record, never a panic or an out-of-bounds read.

use std::fs::File;
use std::io::Read;
use std::ops::Range;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use memmap2::Mmap;
use xxhash_rust::xxh3::xxh3_64;

use crate::codec::{declared_size, Codec, DecodeSession, Decoder, MAX_EXPANSION};
use crate::error::{Error, IoContext, Result};
use crate::format::{
    self, le_u64, Entry, Header, Kind, Schema, ENTRY_FIXED, INDEX_BLOCK_BYTES, MAX_HEADER_BYTES,
    MAX_RECORD_BYTES,
};
use crate::parallel::{run_parts, Parallel};
use crate::ragged::RaggedLayout;

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

/// Indexes up to this size are checked whole at open, which costs microseconds;
/// larger ones block by block as gathers first use them.
const EAGER_INDEX_BYTES: usize = 1 << 20;

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

/// One payload file (`data-NNN.bin`). A store opened from bytes
/// ([`Store::from_parts`]) has neither the file nor its map: its caller fetches
/// payload bytes and hands them in as a [`Payload`].
struct DataFile {
    path: PathBuf,
    size: u64,
    file: Option<File>,
    map: Option<Mmap>,
}

impl DataFile {
    #[inline]
    fn bytes(&self) -> &[u8] {
        self.map.as_deref().unwrap_or(&[])
    }
}

/// Stored record bytes that a caller fetched (from object storage, say) for one
/// gather or verify of a store opened with [`Store::from_parts`].
pub trait Payload: Sync {
    /// The stored bytes of the checked entry `e`: `e.stored_len` bytes at
    /// `e.offset` of data file `e.shard`, or `None` when they were not fetched.
    /// Returning bytes of another length is refused as an internal error.
    fn stored(&self, e: &Entry) -> Option<&[u8]>;
}

/// Where a read finds the stored bytes of its records.
#[derive(Clone, Copy)]
enum Src<'p> {
    /// The store's own mapped (or `pread`) data files.
    Local,
    /// Bytes a caller fetched, already checked against their checksums when the
    /// store reads checked.
    Fetched(&'p dyn Payload),
}

/// The small files of a store, as bytes, for [`Store::from_parts`]: a reader
/// that does not see the store as a directory fetches them itself.
#[derive(Clone, Debug, Default)]
pub struct Parts {
    /// `index.bin`.
    pub index: Vec<u8>,
    /// `index.sum`; empty for a version 1 store.
    pub index_sums: Vec<u8>,
    /// `dict.bin`, for `zstd_dict` stores.
    pub dict: Option<Vec<u8>>,
    /// `attrs.json`, when the header says the store has attributes.
    pub attrs: Option<Vec<u8>>,
}

/// How an opened store reads.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReadOptions {
    /// Check every gathered record's stored bytes against the checksum in its
    /// index entry before decoding it, so that damaged payload bytes are an error
    /// rather than data. Costs one xxh3 pass over the stored bytes.
    pub checked: bool,
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
    fn all_checked() -> IndexBlocks {
        IndexBlocks {
            all: true,
            sums: Vec::new(),
            checked: Vec::new(),
        }
    }

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

/// An opened, read-only store.
pub struct Store {
    path: PathBuf,
    header: Header,
    index: IndexBytes,
    index_path: PathBuf,
    entry_size: usize,
    files: Vec<DataFile>,
    decoder: Decoder,
    read_directly: bool,
    blocks: IndexBlocks,
    attrs: Option<Vec<u8>>,
    options: ReadOptions,
    /// Logical bytes of every record of a Dense store; `None` for Ragged.
    dense_bytes: Option<u64>,
    /// The dictionary of a store opened from bytes (a local one rereads its file).
    dict: Option<Vec<u8>>,
    /// Whether the data files are local (mapped); false for [`Store::from_parts`].
    local: bool,
}

/// `index.bin`: mapped from a local file, or bytes a caller fetched.
enum IndexBytes {
    Mapped(Option<Mmap>),
    Owned(Vec<u8>),
}

impl IndexBytes {
    #[inline]
    fn bytes(&self) -> &[u8] {
        match self {
            IndexBytes::Mapped(m) => m.as_deref().unwrap_or(&[]),
            IndexBytes::Owned(v) => v,
        }
    }
}

/// The records of one gather, resolved and checked, with the output they need.
/// Made by [`Store::plan`]; the output is allocated from
/// [`Plan::output_len`] only after every record was found sound.
pub struct Plan<'a> {
    ids: &'a [u64],
    /// Resolved entries; empty for raw Dense, whose parts resolve and check
    /// their own entries while they copy, on every thread.
    entries: Vec<Entry>,
    /// The one logical size of every record of a raw Dense plan.
    uniform: Option<usize>,
    /// Logical bytes of each record.
    sizes: Vec<usize>,
    layout: Option<RaggedLayout>,
    output_len: usize,
}

impl Plan<'_> {
    /// Logical bytes of planned record `k`.
    #[inline]
    fn size(&self, k: usize) -> usize {
        self.uniform.unwrap_or_else(|| self.sizes[k])
    }

    /// Bytes of output the gather fills.
    pub fn output_len(&self) -> usize {
        self.output_len
    }

    /// Where a Ragged gather puts values, `cu_seqlens` and shapes; `None` for Dense.
    pub fn layout(&self) -> Option<&RaggedLayout> {
        self.layout.as_ref()
    }
}

/// Opens `path` for reading, refusing anything but a regular file. Opening does
/// not block on a FIFO or device, and the check is made on the opened file, so it
/// cannot be raced by a rename.
fn open_regular(path: &Path, what: &str) -> Result<(File, u64)> {
    let file = match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(Error::corrupt(path, format!("{what} is missing")))
        }
        Err(e) => return Err(Error::io(path, e)),
    };
    let meta = file.metadata().at(path)?;
    if !meta.is_file() {
        return Err(Error::corrupt(
            path,
            format!("{what} is not a regular file (a store holds only regular files)"),
        ));
    }
    Ok((file, meta.len()))
}

/// Opens and maps a file that must hold exactly `expected` bytes.
fn map_file(path: &Path, expected: u64, what: &str) -> Result<(File, Option<Mmap>)> {
    let (file, size) = open_regular(path, what)?;
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
    // published file, and the format forbids others to (a file truncated under an
    // open reader is documented as a fault this reader cannot catch).
    let map = unsafe { Mmap::map(&file) }.at(path)?;
    Ok((file, Some(map)))
}

/// Reads a small file that must hold exactly `expected` bytes hashing to `sum`.
fn read_checked(path: &Path, expected: u64, sum: u64, what: &str) -> Result<Vec<u8>> {
    let (mut file, size) = open_regular(path, what)?;
    if size != expected {
        return Err(Error::corrupt(
            path,
            format!("{what} is {size} bytes but the header says {expected}"),
        ));
    }
    let mut bytes = Vec::new();
    bytes
        .try_reserve_exact(expected as usize)
        .map_err(|_| Error::OutOfMemory {
            bytes: expected as usize,
        })?;
    (&mut file)
        .take(expected)
        .read_to_end(&mut bytes)
        .at(path)?;
    check_small(&bytes, expected, sum, path, what)?;
    Ok(bytes)
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

fn read_header(path: &Path) -> Result<Header> {
    let (file, size) = match open_regular(path, "the header") {
        Err(Error::Corrupt { msg, .. }) if msg.ends_with("is missing") => {
            return Err(Error::corrupt(
                path,
                "missing: this directory is not a published zrecord store",
            ))
        }
        other => other?,
    };
    if size > MAX_HEADER_BYTES {
        return Err(Error::corrupt(
            path,
            format!("the header is {size} bytes; a header is at most {MAX_HEADER_BYTES}"),
        ));
    }
    let mut raw = Vec::new();
    file.take(MAX_HEADER_BYTES).read_to_end(&mut raw).at(path)?;
    Header::decode(&raw, path)
}

impl Store {
    /// Opens the store at `path` with default [`ReadOptions`].
    pub fn open(path: &Path) -> Result<Store> {
        Store::open_with(path, ReadOptions::default())
    }

    /// Opens the store at `path` and checks its header, files, dictionary,
    /// attributes and index block checksums against each other. The time it takes
    /// does not grow with the record count (except for version 1 stores, whose
    /// whole index is hashed).
    pub fn open_with(path: &Path, options: ReadOptions) -> Result<Store> {
        crate::publish::check_not_build_dir(path)?;
        if cfg!(target_endian = "big") {
            return Err(big_endian());
        }
        match std::fs::metadata(path) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => {
                return Err(Error::corrupt(
                    path,
                    "is not a directory; a store is a directory",
                ))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(Error::NotFound(path.to_path_buf()))
            }
            Err(e) => return Err(Error::io(path, e)),
        }
        let header = read_header(&path.join(format::HEADER_FILE))?;
        let index_path = path.join(format::INDEX_FILE);
        let (_, index) = map_file(&index_path, header.index_size, "the index")?;
        let index_sums = if header.version >= 2 {
            read_checked(
                &path.join(format::INDEX_SUMS_FILE),
                format::index_sums_size(header.index_size),
                header.index_sums_xxh3,
                "the index block checksums",
            )?
        } else {
            Vec::new()
        };
        let files = header
            .shard_sizes
            .iter()
            .enumerate()
            .map(|(s, &size)| {
                let p = path.join(format::data_file(s));
                map_file(&p, size, "the data file").map(|(file, map)| DataFile {
                    path: p,
                    size,
                    file: Some(file),
                    map,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let dict = match header.dict_size {
            0 => None,
            n => Some(read_checked(
                &path.join(format::DICT_FILE),
                n,
                header.dict_xxh3,
                "the dictionary",
            )?),
        };
        let attrs = match header.attrs_size {
            0 => None,
            n => Some(read_checked(
                &path.join(format::ATTRS_FILE),
                n,
                header.attrs_xxh3,
                "the attributes",
            )?),
        };
        let parts = Parts {
            index: Vec::new(),
            index_sums,
            dict,
            attrs,
        };
        Store::assemble(
            path,
            header,
            IndexBytes::Mapped(index),
            parts,
            files,
            options,
        )
    }

    /// Opens a store whose files the caller read itself (from object storage,
    /// say): `header` is the bytes of `header.bin`, `parts` the other small files.
    /// `name` names the store in errors (a URL is fine); its data files are
    /// `name/data-NNN.bin`. Everything [`Store::open_with`] checks is checked here
    /// by the same code, except that the data files' sizes are the caller's to
    /// check (the header gives them: [`Header::shard_sizes`]).
    ///
    /// Such a store holds no payload: gather it with [`Store::entries`],
    /// [`Store::plan_fetched`] and [`Store::gather_fetched`], verify it with
    /// [`Store::check_index`] and [`Store::verify_fetched`].
    pub fn from_parts(
        name: &Path,
        header: &[u8],
        parts: Parts,
        options: ReadOptions,
    ) -> Result<Store> {
        if cfg!(target_endian = "big") {
            return Err(big_endian());
        }
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
        let index_path = name.join(format::INDEX_FILE);
        if parts.index.len() as u64 != header.index_size {
            return Err(Error::corrupt(
                &index_path,
                format!(
                    "the index is {} bytes but the header says {} (truncated or extended)",
                    parts.index.len(),
                    header.index_size
                ),
            ));
        }
        if header.version >= 2 {
            check_small(
                &parts.index_sums,
                format::index_sums_size(header.index_size),
                header.index_sums_xxh3,
                &name.join(format::INDEX_SUMS_FILE),
                "the index block checksums",
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
                "the attributes",
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
        let files = header
            .shard_sizes
            .iter()
            .enumerate()
            .map(|(s, &size)| DataFile {
                path: name.join(format::data_file(s)),
                size,
                file: None,
                map: None,
            })
            .collect();
        let mut parts = parts;
        let index = IndexBytes::Owned(std::mem::take(&mut parts.index));
        Store::assemble(name, header, index, parts, files, options)
    }

    /// What both ways of opening share: the index checks, the decoder and the
    /// rules that tie the header to the files. `parts.index` is unused.
    fn assemble(
        path: &Path,
        header: Header,
        index: IndexBytes,
        parts: Parts,
        files: Vec<DataFile>,
        options: ReadOptions,
    ) -> Result<Store> {
        let index_path = path.join(format::INDEX_FILE);
        let index_bytes = index.bytes();
        let block_count = index_bytes.len().div_ceil(INDEX_BLOCK_BYTES);
        let sums = parts.index_sums;
        let blocks = if sums.is_empty() || index_bytes.len() <= EAGER_INDEX_BYTES {
            if xxh3_64(index_bytes) != header.index_xxh3 {
                return Err(Error::corrupt(
                    &index_path,
                    "index checksum mismatch (the index is damaged)",
                ));
            }
            IndexBlocks::all_checked()
        } else {
            IndexBlocks {
                all: false,
                sums,
                checked: (0..block_count.div_ceil(64))
                    .map(|_| AtomicU64::new(0))
                    .collect(),
            }
        };
        let decoder = Decoder::new(header.schema.codec, parts.dict.as_deref())
            .map_err(|e| Error::corrupt(path, e.to_string()))?;
        let dense_bytes = match header.schema.kind {
            Kind::Dense => header.schema.record_bytes(),
            Kind::Ragged => None,
        };
        if let (Some(rb), Codec::Raw) = (dense_bytes, header.schema.codec) {
            let largest = header.shard_sizes.iter().copied().max().unwrap_or(0);
            if header.record_count > 0 && rb > largest {
                return Err(Error::corrupt(
                    path,
                    format!("raw records of {rb} bytes cannot fit in any data file"),
                ));
            }
        }
        let local = files.iter().all(|f| f.file.is_some());
        Ok(Store {
            dense_bytes,
            path: path.to_path_buf(),
            index_path,
            entry_size: header.schema.entry_size(),
            read_directly: header.schema.codec == Codec::Raw,
            header,
            index,
            files,
            decoder,
            blocks,
            attrs: parts.attrs,
            options,
            dict: if local { None } else { parts.dict },
            local,
        })
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
    pub fn dictionary(&self) -> Result<Option<Vec<u8>>> {
        if !self.local {
            return Ok(self.dict.clone());
        }
        match self.header.dict_size {
            0 => Ok(None),
            n => read_checked(
                &self.path.join(format::DICT_FILE),
                n,
                self.header.dict_xxh3,
                "the dictionary",
            )
            .map(Some),
        }
    }

    /// The attributes stored with the store (a JSON object), if it has any.
    pub fn attrs(&self) -> Option<&[u8]> {
        self.attrs.as_deref()
    }

    /// The raw bytes of entry `i`, after checking the index blocks they lie in.
    #[inline]
    fn entry_bytes(&self, i: u64) -> Result<&[u8]> {
        let index = self.index.bytes();
        let es = self.entry_size;
        let at = usize::try_from(i).ok().and_then(|i| i.checked_mul(es));
        let Some((at, raw)) = at.and_then(|at| Some((at, index.get(at..at.checked_add(es)?)?)))
        else {
            return Err(Error::OutOfRange {
                index: i as i128,
                len: self.len(),
            });
        };
        if !self.blocks.all {
            let (first, last) = (at / INDEX_BLOCK_BYTES, (at + es - 1) / INDEX_BLOCK_BYTES);
            if !self.blocks.is_checked(first) {
                self.check_block(index, first)?;
            }
            if last != first && !self.blocks.is_checked(last) {
                self.check_block(index, last)?;
            }
        }
        Ok(raw)
    }

    fn check_block(&self, index: &[u8], block: usize) -> Result<()> {
        let start = block * INDEX_BLOCK_BYTES;
        let bytes = &index[start..index.len().min(start + INDEX_BLOCK_BYTES)];
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

    /// Logical bytes of record `i` whose entry bytes are `raw`.
    #[inline]
    fn logical_bytes(&self, i: u64, raw: &[u8]) -> Result<u64> {
        if let Some(n) = self.dense_bytes {
            return Ok(n);
        }
        raw[ENTRY_FIXED..]
            .chunks_exact(8)
            .try_fold(self.header.schema.dtype.itemsize() as u64, |n, w| {
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
    fn checked_entry(&self, i: u64) -> Result<(Entry, u64)> {
        let raw = self.entry_bytes(i)?;
        let e = Entry::decode(raw);
        let logical = self.logical_bytes(i, raw)?;
        let stored = e.stored_len as u64;
        let in_file = self.files.get(e.shard as usize).is_some_and(|f| {
            e.offset
                .checked_add(stored)
                .is_some_and(|end| end <= f.size)
        });
        let fits = if self.read_directly {
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

    /// The checked entry of record `i` (as a gather would check it) and the
    /// bytes its index entry holds after the fixed part: the shape, for Ragged.
    pub(crate) fn entry_and_shape(&self, i: u64) -> Result<(Entry, &[u8])> {
        let (e, _) = self.checked_entry(i)?;
        let raw = self.entry_bytes(i)?;
        Ok((e, &raw[ENTRY_FIXED..]))
    }

    /// Each data file's path, open file and size, in file order; refused for a
    /// store opened from bytes, which has no files.
    pub(crate) fn data_files(&self) -> Result<Vec<(&Path, &File, u64)>> {
        self.check_local()?;
        Ok(self
            .files
            .iter()
            .filter_map(|f| Some((f.path.as_path(), f.file.as_ref()?, f.size)))
            .collect())
    }

    #[cold]
    fn entry_error(&self, i: u64, e: &Entry, logical: u64) -> Error {
        let msg = match self.files.get(e.shard as usize) {
            None => format!("data file {} does not exist", e.shard),
            Some(f)
                if e.offset
                    .checked_add(e.stored_len as u64)
                    .is_none_or(|end| end > f.size) =>
            {
                format!("points past the end of {}", f.path.display())
            }
            Some(_) => format!(
                "stores {} bytes, which cannot hold its {logical} logical bytes",
                e.stored_len
            ),
        };
        Error::corrupt_record(&self.index_path, i, msg)
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

    /// Refuses a local read of a store opened from bytes, which holds no payload.
    fn check_local(&self) -> Result<()> {
        if self.local {
            Ok(())
        } else {
            Err(Error::InvalidArgument(format!(
                "{}: opened from bytes; its records are read through a fetching reader",
                self.path.display()
            )))
        }
    }

    /// Resolves and checks the records at `idx` and computes the output they need.
    /// Compressed records must declare exactly their logical size in their frame
    /// header, so a damaged frame is refused before any output is allocated.
    pub fn plan<'a>(&self, idx: &'a [u64]) -> Result<Plan<'a>> {
        self.check_local()?;
        self.check_positions(idx)?;
        if let (Some(rb), false) = (self.dense_bytes, self.decodes()) {
            // Open checked that a record of this size fits in a data file, so the
            // output is backed by data; the entries are checked as they are read.
            let output_len = (idx.len() as u64)
                .checked_mul(rb)
                .and_then(|n| usize::try_from(n).ok())
                .ok_or_else(|| too_large(idx.len()))?;
            return Ok(Plan {
                ids: idx,
                entries: Vec::new(),
                uniform: Some(rb as usize),
                sizes: Vec::new(),
                layout: None,
                output_len,
            });
        }
        let (entries, sizes) = self.resolve_sized(idx)?;
        self.plan_entries(idx, entries, sizes, Src::Local)
    }

    /// The checked index entries of the records at `idx`: where each record's
    /// stored bytes are (data file, offset, length) and their checksum. A reader
    /// of a store opened with [`Store::from_parts`] fetches these bytes, then
    /// calls [`Store::plan_fetched`].
    pub fn entries(&self, idx: &[u64]) -> Result<Vec<Entry>> {
        self.check_positions(idx)?;
        self.resolve(idx)
    }

    /// [`Store::resolve`] with each record's logical size.
    fn resolve_sized(&self, ids: &[u64]) -> Result<(Vec<Entry>, Vec<u64>)> {
        let mut entries = Vec::with_capacity(ids.len());
        let mut sizes = Vec::with_capacity(ids.len());
        for (k, &p) in ids.iter().enumerate() {
            self.prefetch_entry(ids, k);
            let (e, logical) = self.checked_entry(p)?;
            entries.push(e);
            sizes.push(logical);
        }
        Ok((entries, sizes))
    }

    /// Asks for the index entry a few positions after `ids[k]`.
    #[inline]
    fn prefetch_entry(&self, ids: &[u64], k: usize) {
        if let Some(&q) = ids.get(k + PREFETCH_AHEAD) {
            let at = q as usize * self.entry_size;
            if let Some(b) = self.index.bytes().get(at..) {
                prefetch(b.as_ptr());
            }
        }
    }

    /// [`Store::plan`] for stored bytes the caller fetched: `payload` holds the
    /// stored bytes of the [`Store::entries`] of `idx`. Checks what a local plan
    /// checks, and, when the store reads checked, every record's bytes against
    /// its checksum, all before the output is allocated.
    pub fn plan_fetched<'a>(&self, idx: &'a [u64], payload: &dyn Payload) -> Result<Plan<'a>> {
        self.check_positions(idx)?;
        let (entries, sizes) = self.resolve_sized(idx)?;
        self.plan_entries(idx, entries, sizes, Src::Fetched(payload))
    }

    fn plan_entries<'a>(
        &self,
        idx: &'a [u64],
        entries: Vec<Entry>,
        logicals: Vec<u64>,
        src: Src<'_>,
    ) -> Result<Plan<'a>> {
        let mut sizes = Vec::with_capacity(idx.len());
        let mut total: u64 = 0;
        for ((&p, e), &logical) in idx.iter().zip(&entries).zip(&logicals) {
            if let Src::Fetched(_) = src {
                if self.options.checked && xxh3_64(self.stored_in(src, e)?) != e.checksum {
                    return Err(self.checksum_error(e, p));
                }
            }
            self.check_declared_size(src, e, p, logical)?;
            total = total
                .checked_add(logical)
                .ok_or_else(|| too_large(idx.len()))?;
            sizes.push(logical as usize);
        }
        let total = usize::try_from(total).map_err(|_| too_large(idx.len()))?;
        let schema = &self.header.schema;
        let (layout, output_len) = match schema.kind {
            Kind::Dense => (None, total),
            Kind::Ragged => {
                let isz = schema.dtype.itemsize();
                let layout = RaggedLayout::new(idx.len(), schema.ndim, total / isz, isz)?;
                let len = layout.total;
                (Some(layout), len)
            }
        };
        Ok(Plan {
            ids: idx,
            entries,
            uniform: None,
            sizes,
            layout,
            output_len,
        })
    }

    /// Fills `out` (exactly [`Plan::output_len`] bytes) with the planned records:
    /// Dense records end to end; Ragged values, `cu_seqlens` and shapes as the
    /// plan's layout says.
    pub fn gather(&self, plan: &Plan<'_>, out: &mut [u8], par: &dyn Parallel) -> Result<()> {
        self.check_local()?;
        self.gather_in(plan, out, par, Src::Local)
    }

    /// [`Store::gather`] from the fetched bytes a plan of
    /// [`Store::plan_fetched`] was made with.
    pub fn gather_fetched(
        &self,
        plan: &Plan<'_>,
        out: &mut [u8],
        par: &dyn Parallel,
        payload: &dyn Payload,
    ) -> Result<()> {
        if plan.entries.len() != plan.ids.len() {
            return Err(Error::Internal(
                "a fetched gather needs a plan from plan_fetched".into(),
            ));
        }
        self.gather_in(plan, out, par, Src::Fetched(payload))
    }

    fn gather_in(
        &self,
        plan: &Plan<'_>,
        out: &mut [u8],
        par: &dyn Parallel,
        src: Src<'_>,
    ) -> Result<()> {
        if out.len() != plan.output_len {
            return Err(Error::InvalidArgument(format!(
                "output holds {} bytes, the gather needs {}",
                out.len(),
                plan.output_len
            )));
        }
        match &plan.layout {
            None => self.fill_parts(plan, out, par, src),
            Some(layout) => {
                let (values, meta) = out.split_at_mut(layout.cu_offset);
                let (cu, shapes) = meta.split_at_mut(layout.shapes_offset - layout.cu_offset);
                let isz = self.header.schema.dtype.itemsize();
                let shape_bytes = 8 * layout.ndim;
                let mut acc: usize = 0;
                cu[..4].copy_from_slice(&0i32.to_le_bytes());
                for (k, &p) in plan.ids.iter().enumerate() {
                    // The layout checked that every prefix sum fits in an i32.
                    acc += plan.sizes[k] / isz;
                    cu[4 * (k + 1)..4 * (k + 2)].copy_from_slice(&(acc as i32).to_le_bytes());
                    let raw = self.entry_bytes(p)?;
                    shapes[k * shape_bytes..(k + 1) * shape_bytes]
                        .copy_from_slice(&raw[ENTRY_FIXED..ENTRY_FIXED + shape_bytes]);
                }
                let values = &mut values[..layout.values_bytes];
                self.fill_parts(plan, values, par, src)
            }
        }
    }

    /// Decodes the planned records into `out` (their logical bytes end to end),
    /// split into parts of roughly equal bytes run through `par`.
    fn fill_parts(
        &self,
        plan: &Plan<'_>,
        out: &mut [u8],
        par: &dyn Parallel,
        src: Src<'_>,
    ) -> Result<()> {
        if out.is_empty() {
            return Ok(());
        }
        let parts = par.parts(out.len(), self.decodes()).max(1);
        let target = out.len().div_ceil(parts).max(1);
        let mut tasks = Vec::with_capacity(parts);
        let mut rest = out;
        let n = plan.ids.len();
        let mut start = 0;
        while start < n {
            let (mut end, mut bytes) = (start, 0);
            while end < n && (end == start || bytes < target) {
                bytes += plan.size(end);
                end += 1;
            }
            let (dst, tail) = std::mem::take(&mut rest).split_at_mut(bytes);
            rest = tail;
            tasks.push((start..end, dst));
            start = end;
        }
        run_parts(par, tasks, |(range, dst)| {
            let resolved;
            let entries = if plan.entries.is_empty() {
                resolved = self.resolve(&plan.ids[range.clone()])?;
                &resolved[..]
            } else {
                &plan.entries[range.clone()]
            };
            let mut rest = dst;
            let mut session = self.decoder.session();
            for (j, k) in range.enumerate() {
                if let (Some(e), Src::Local) = (entries.get(j + PREFETCH_AHEAD), src) {
                    if !self.is_direct(e.stored_len as usize) {
                        let head = self.stored(e);
                        for line in (0..head.len().min(PREFETCH_HEAD_BYTES)).step_by(64) {
                            prefetch(head[line..].as_ptr());
                        }
                    }
                }
                let (slot, tail) = std::mem::take(&mut rest).split_at_mut(plan.size(k));
                rest = tail;
                self.decode_entry(&mut session, src, plan.ids[k], &entries[j], slot)?;
            }
            Ok(())
        })
    }

    /// The checked entries of `ids`, with the index entries a few positions ahead
    /// prefetched.
    fn resolve(&self, ids: &[u64]) -> Result<Vec<Entry>> {
        let mut entries = Vec::with_capacity(ids.len());
        for (k, &p) in ids.iter().enumerate() {
            self.prefetch_entry(ids, k);
            entries.push(self.checked_entry(p)?.0);
        }
        Ok(entries)
    }

    #[inline]
    fn is_direct(&self, dst_len: usize) -> bool {
        self.read_directly && dst_len >= PREAD_MIN_BYTES
    }

    /// The stored bytes of a checked entry in the local data files.
    #[inline]
    fn stored(&self, e: &Entry) -> &[u8] {
        let start = e.offset as usize;
        self.files
            .get(e.shard as usize)
            .and_then(|f| f.bytes().get(start..start + e.stored_len as usize))
            .unwrap_or(&[])
    }

    /// The stored bytes of a checked entry wherever this read finds them.
    #[inline]
    fn stored_in<'s>(&'s self, src: Src<'s>, e: &Entry) -> Result<&'s [u8]> {
        match src {
            Src::Local => Ok(self.stored(e)),
            Src::Fetched(p) => match p.stored(e) {
                Some(b) if b.len() == e.stored_len as usize => Ok(b),
                Some(b) => Err(Error::Internal(format!(
                    "{} bytes handed in for a record of {} stored bytes",
                    b.len(),
                    e.stored_len
                ))),
                None => Err(Error::Internal(format!(
                    "the stored bytes at offset {} of data file {} were not fetched",
                    e.offset, e.shard
                ))),
            },
        }
    }

    /// A compressed record's frame must declare exactly its logical size, so
    /// that nothing is allocated for a size the frame does not hold.
    #[inline]
    fn check_declared_size(&self, src: Src<'_>, e: &Entry, pos: u64, logical: u64) -> Result<()> {
        if !self.decodes() {
            return Ok(());
        }
        let declared = declared_size(self.stored_in(src, e)?)
            .map_err(|msg| self.payload_error(e, pos, msg))?;
        if declared != logical {
            return Err(self.payload_error(
                e,
                pos,
                format!("its frame declares {declared} bytes, its shape needs {logical}"),
            ));
        }
        Ok(())
    }

    fn payload_error(&self, e: &Entry, pos: u64, msg: impl Into<String>) -> Error {
        let path = self
            .files
            .get(e.shard as usize)
            .map_or(&self.index_path, |f| &f.path);
        Error::corrupt_record(path, pos, msg)
    }

    fn checksum_error(&self, e: &Entry, pos: u64) -> Error {
        self.payload_error(e, pos, "checksum mismatch (the payload is damaged)")
    }

    /// Decodes the checked entry `e` of record `pos` into `dst`, its logical size.
    /// Fetched bytes were checked against their checksum when they were planned.
    fn decode_entry(
        &self,
        session: &mut DecodeSession<'_>,
        src: Src<'_>,
        pos: u64,
        e: &Entry,
        dst: &mut [u8],
    ) -> Result<()> {
        if let (Src::Local, Some(file), true) = (
            src,
            self.files.get(e.shard as usize),
            self.is_direct(dst.len()),
        ) {
            if let Some(f) = &file.file {
                f.read_exact_at(dst, e.offset).at(&file.path)?;
                if self.options.checked && xxh3_64(dst) != e.checksum {
                    return Err(self.checksum_error(e, pos));
                }
                return Ok(());
            }
        }
        let stored = self.stored_in(src, e)?;
        if let Src::Local = src {
            if self.options.checked && xxh3_64(stored) != e.checksum {
                return Err(self.checksum_error(e, pos));
            }
        }
        session
            .decode(stored, dst)
            .map_err(|msg| self.payload_error(e, pos, msg))
    }

    /// Fills `out` with the Dense records at `idx`, in order: [`Store::plan`] and
    /// [`Store::gather`] in one call, for callers that bring their own buffer.
    pub fn gather_dense(&self, idx: &[u64], out: &mut [u8], par: &dyn Parallel) -> Result<()> {
        if self.header.schema.kind != Kind::Dense {
            return Err(Error::InvalidArgument(
                "gather_dense on a Ragged store".into(),
            ));
        }
        let plan = self.plan(idx)?;
        self.gather(&plan, out, par)
    }

    /// Checks positions and computes where a Ragged gather of `idx` puts its bytes.
    pub fn ragged_layout(&self, idx: &[u64]) -> Result<RaggedLayout> {
        if self.header.schema.kind != Kind::Ragged {
            return Err(Error::InvalidArgument(
                "a Ragged gather on a Dense store".into(),
            ));
        }
        let plan = self.plan(idx)?;
        plan.layout
            .ok_or_else(|| Error::Internal("a Ragged plan without a layout".into()))
    }

    /// Fills `out` (exactly `layout.total` bytes) with the Ragged records at `idx`.
    pub fn gather_ragged(
        &self,
        idx: &[u64],
        layout: &RaggedLayout,
        out: &mut [u8],
        par: &dyn Parallel,
    ) -> Result<()> {
        let plan = self.plan(idx)?;
        if plan.layout.as_ref() != Some(layout) {
            return Err(Error::InvalidArgument(
                "the layout does not belong to these positions".into(),
            ));
        }
        self.gather(&plan, out, par)
    }

    /// Checks the whole index against its checksum in the header.
    pub fn check_index(&self) -> Result<()> {
        if xxh3_64(self.index.bytes()) != self.header.index_xxh3 {
            return Err(Error::corrupt(
                &self.index_path,
                "index checksum mismatch (the index is damaged)",
            ));
        }
        Ok(())
    }

    /// Checks the whole store: the index against its checksum, every entry, every
    /// record's stored bytes against their checksum, and that every record
    /// decodes to its logical size. The first damaged record is reported with its
    /// file. Decoding scratch is sized from what a frame can really hold, so a
    /// store whose schema claims huge records cannot make this allocate them.
    pub fn verify(&self, par: &dyn Parallel) -> Result<()> {
        self.verify_files()?;
        self.verify_records(0..self.len(), par)
    }

    /// The part of [`Store::verify`] that is not per record: the whole index
    /// against its checksum, and every data file still at its published size.
    pub fn verify_files(&self) -> Result<()> {
        self.check_local()?;
        self.check_index()?;
        for f in &self.files {
            if let Some(file) = &f.file {
                let now = file.metadata().at(&f.path)?.len();
                if now != f.size {
                    return Err(Error::corrupt(
                        &f.path,
                        "changed size while open (stores must not be modified)",
                    ));
                }
            }
        }
        Ok(())
    }

    /// The per-record part of [`Store::verify`] for the records in `range`, so
    /// that a caller can verify a large store in steps and report progress.
    pub fn verify_records(&self, range: Range<u64>, par: &dyn Parallel) -> Result<()> {
        self.check_local()?;
        self.check_range(&range)?;
        let n = range.end - range.start;
        let parts = par.parts(usize::MAX, true).max(1) as u64;
        let per = n.div_ceil(parts).max(1);
        let ranges: Vec<_> = (0..parts)
            .map(|k| range.start + (k * per).min(n)..range.start + ((k + 1) * per).min(n))
            .filter(|r| !r.is_empty())
            .collect();
        run_parts(par, ranges, |range| self.verify_in(range, Src::Local))
    }

    /// Calls `each(logical, stored)` with the logical and stored byte counts of
    /// every record in `range`, in position order, from the index alone (no data
    /// is read). Each entry is checked as a gather checks it, so a damaged index
    /// is an error naming the record rather than a wrong size.
    pub fn record_sizes(&self, range: Range<u64>, mut each: impl FnMut(u64, u64)) -> Result<()> {
        self.check_range(&range)?;
        for i in range {
            let (e, logical) = self.checked_entry(i)?;
            each(logical, u64::from(e.stored_len));
        }
        Ok(())
    }

    fn check_range(&self, range: &Range<u64>) -> Result<()> {
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
    /// What [`Store::verify`] checks of each record, for the records in `range`
    /// whose stored bytes the caller fetched into `payload` (the entries of
    /// [`Store::entries`] say which). Run it over every range of records, with
    /// [`Store::check_index`], to verify a whole store opened from bytes.
    pub fn verify_fetched(&self, range: Range<u64>, payload: &dyn Payload) -> Result<()> {
        self.verify_in(range, Src::Fetched(payload))
    }

    fn verify_in(&self, range: Range<u64>, src: Src<'_>) -> Result<()> {
        let mut session = self.decoder.session();
        let mut scratch: Vec<u8> = Vec::new();
        for i in range {
            let (e, logical) = self.checked_entry(i)?;
            if xxh3_64(self.stored_in(src, &e)?) != e.checksum {
                return Err(self.checksum_error(&e, i));
            }
            self.check_declared_size(src, &e, i, logical)?;
            let logical = logical as usize;
            if scratch.len() < logical {
                scratch
                    .try_reserve(logical - scratch.len())
                    .map_err(|_| Error::OutOfMemory { bytes: logical })?;
                scratch.resize(logical, 0);
            }
            self.decode_entry(&mut session, src, i, &e, &mut scratch[..logical])?;
        }
        Ok(())
    }
}

fn big_endian() -> Error {
    Error::InvalidArgument("zrecord stores are little-endian; this host is big-endian".into())
}

fn too_large(records: usize) -> Error {
    Error::InvalidArgument(format!(
        "{records} records hold more bytes than this machine can address; gather fewer at once"
    ))
}
