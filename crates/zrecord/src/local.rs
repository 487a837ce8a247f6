//! A store in a local directory: its files opened, checked and mapped, and
//! [`Store`], its metadata bound to its mapped data files. Every read goes
//! through the same [`Metadata`] code a store read from elsewhere does; only
//! where the bytes are is local.

use std::fs::File;
use std::io::Read;
use std::ops::Range;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use crate::error::{Error, IoContext, Result};
use crate::format::{self, Entry, Header, Kind, Schema, MAX_HEADER_BYTES};
use crate::meta::{check_endian, Metadata, Parts, ReadOptions, StoreInfo};
use crate::parallel::{Parallel, Sequential};
use crate::plan::Plan;
use crate::ragged::RaggedLayout;
use crate::source::{IndexSource, PayloadSource};
use memmap2::Mmap;

/// Raw records at least this large are read with `pread` instead of copied from
/// the memory map. The system call costs little against the copy at this size, and
/// it keeps large payloads out of the process's mapped (resident) memory: a
/// mapped read would count every record ever touched in the reader's RSS.
const PREAD_MIN_BYTES: usize = 32 << 10;

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

/// Reads a small file that must hold exactly `expected` bytes; its checksum is
/// checked with the other parts ([`Metadata::from_parts`]).
fn read_sized(path: &Path, expected: u64, what: &str) -> Result<Vec<u8>> {
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
    Ok(bytes)
}

/// The small file the header says a store has (`size` bytes), if it has one.
fn read_optional(dir: &Path, name: &str, size: u64, what: &str) -> Result<Option<Vec<u8>>> {
    match size {
        0 => Ok(None),
        n => read_sized(&dir.join(name), n, what).map(Some),
    }
}

pub(crate) fn read_header(path: &Path) -> Result<Header> {
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

/// A local store's `index.bin`, mapped (an empty index has no map).
pub struct LocalIndex(Option<Mmap>);

impl IndexSource for LocalIndex {
    fn len(&self) -> u64 {
        self.0.as_deref().map_or(0, |m| m.len() as u64)
    }

    #[inline]
    fn bytes(&self, range: Range<usize>) -> Option<&[u8]> {
        self.0.as_deref().unwrap_or(&[]).get(range)
    }
}

/// One data file (`data-NNN.bin`), open and mapped.
struct DataFile {
    path: PathBuf,
    size: u64,
    file: File,
    map: Option<Mmap>,
}

/// A local store's data files, as the reader's [`PayloadSource`].
struct LocalFiles(Vec<DataFile>);

impl LocalFiles {
    fn open(dir: &Path, sizes: &[u64]) -> Result<LocalFiles> {
        sizes
            .iter()
            .enumerate()
            .map(|(f, &size)| {
                let path = dir.join(format::data_file(f));
                map_file(&path, size, "the data file").map(|(file, map)| DataFile {
                    path,
                    size,
                    file,
                    map,
                })
            })
            .collect::<Result<Vec<_>>>()
            .map(LocalFiles)
    }
}

impl PayloadSource for LocalFiles {
    #[inline]
    fn bytes(&self, file: usize, range: Range<u64>) -> Option<&[u8]> {
        let (start, end) = (
            usize::try_from(range.start).ok()?,
            usize::try_from(range.end).ok()?,
        );
        self.0
            .get(file)?
            .map
            .as_deref()
            .unwrap_or(&[])
            .get(start..end)
    }

    #[inline]
    fn reads_into(&self, len: usize) -> bool {
        len >= PREAD_MIN_BYTES
    }

    fn read_into(&self, file: usize, offset: u64, dst: &mut [u8]) -> Result<()> {
        let f = self
            .0
            .get(file)
            .ok_or_else(|| Error::Internal(format!("data file {file} does not exist")))?;
        f.file.read_exact_at(dst, offset).at(&f.path)
    }
}

/// An opened, read-only local store.
pub struct Store {
    meta: Metadata<LocalIndex>,
    files: LocalFiles,
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
        check_endian()?;
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
        let (_, index) = map_file(
            &path.join(format::INDEX_FILE),
            header.index_size,
            "the index",
        )?;
        let index_sums = if header.version >= 2 {
            read_sized(
                &path.join(format::INDEX_SUMS_FILE),
                format::index_sums_size(header.index_size),
                "the index checksum file",
            )?
        } else {
            Vec::new()
        };
        let files = LocalFiles::open(path, &header.shard_sizes)?;
        let parts = Parts {
            index: LocalIndex(index),
            index_sums,
            dict: read_optional(path, format::DICT_FILE, header.dict_size, "the dictionary")?,
            attrs: read_optional(
                path,
                format::ATTRS_FILE,
                header.attrs_size,
                "the attributes file",
            )?,
        };
        let meta = Metadata::new(path, header, parts, options)?;
        Ok(Store { meta, files })
    }

    /// What the store's small files say.
    pub fn info(&self) -> &StoreInfo {
        self.meta.info()
    }

    /// Where the store was opened.
    pub fn path(&self) -> &Path {
        self.info().path()
    }

    /// The store's schema.
    pub fn schema(&self) -> &Schema {
        self.info().schema()
    }

    /// Everything `header.bin` holds.
    pub fn header(&self) -> &Header {
        self.info().header()
    }

    /// How this store reads.
    pub fn options(&self) -> ReadOptions {
        self.info().options()
    }

    /// Records in the store.
    pub fn len(&self) -> u64 {
        self.meta.len()
    }

    /// Whether the store holds no record.
    pub fn is_empty(&self) -> bool {
        self.meta.is_empty()
    }

    /// Whether a gather decodes records rather than copying them.
    pub fn decodes(&self) -> bool {
        self.info().decodes()
    }

    /// The store's dictionary bytes, for `zstd_dict` stores.
    pub fn dictionary(&self) -> Option<&[u8]> {
        self.info().dictionary()
    }

    /// The attributes stored with the store (a JSON object), if it has any.
    pub fn attrs(&self) -> Option<&[u8]> {
        self.info().attrs()
    }

    /// [`Metadata::plan`] of the records at `idx` from the store's data files.
    pub fn plan<'a>(&self, idx: &'a [u64], par: &dyn Parallel) -> Result<Plan<'a>> {
        self.meta.plan(idx, &self.files, par)
    }

    /// [`Metadata::gather`] of a plan from the store's data files.
    pub fn gather(&self, plan: &Plan<'_>, out: &mut [u8], par: &dyn Parallel) -> Result<()> {
        self.meta.gather(plan, out, par, &self.files)
    }

    /// Fills `out` with the Dense records at `idx`, in order: [`Store::plan`] and
    /// [`Store::gather`] in one call, for callers that bring their own buffer.
    pub fn gather_dense(&self, idx: &[u64], out: &mut [u8], par: &dyn Parallel) -> Result<()> {
        if self.schema().kind != Kind::Dense {
            return Err(Error::InvalidArgument(
                "gather_dense on a Ragged store".into(),
            ));
        }
        let plan = self.plan(idx, par)?;
        self.gather(&plan, out, par)
    }

    /// Checks positions and computes where a Ragged gather of `idx` puts its bytes.
    pub fn ragged_layout(&self, idx: &[u64]) -> Result<RaggedLayout> {
        if self.schema().kind != Kind::Ragged {
            return Err(Error::InvalidArgument(
                "a Ragged gather on a Dense store".into(),
            ));
        }
        let plan = self.plan(idx, &Sequential)?;
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
        let plan = self.plan(idx, par)?;
        if plan.layout.as_ref() != Some(layout) {
            return Err(Error::InvalidArgument(
                "the layout does not belong to these positions".into(),
            ));
        }
        self.gather(&plan, out, par)
    }

    /// Checks the whole index against its checksum in the header.
    pub fn check_index(&self) -> Result<()> {
        self.meta.check_index()
    }

    /// Checks the whole store: the index against its checksum, every entry, every
    /// record's stored bytes against their checksum, and that every record
    /// decodes to its logical size. The first damaged record is reported with its
    /// file.
    pub fn verify(&self, par: &dyn Parallel) -> Result<()> {
        self.verify_files()?;
        self.verify_records(0..self.len(), par)
    }

    /// The part of [`Store::verify`] that is not per record: the whole index
    /// against its checksum, and every data file still at its published size.
    pub fn verify_files(&self) -> Result<()> {
        self.meta.check_index()?;
        for f in &self.files.0 {
            let now = f.file.metadata().at(&f.path)?.len();
            if now != f.size {
                return Err(Error::corrupt(
                    &f.path,
                    "changed size while open (stores must not be modified)",
                ));
            }
        }
        Ok(())
    }

    /// The per-record part of [`Store::verify`] for the records in `range`
    /// ([`Metadata::verify_records`] from the store's data files).
    pub fn verify_records(&self, range: Range<u64>, par: &dyn Parallel) -> Result<()> {
        self.meta.verify_records(range, par, &self.files)
    }

    /// [`Metadata::record_sizes`] of the records in `range`.
    pub fn record_sizes(&self, range: Range<u64>, each: impl FnMut(u64, u64)) -> Result<()> {
        self.meta.record_sizes(range, each)
    }

    /// [`Metadata::record_lengths`] of the records in `range`.
    pub fn record_lengths(&self, range: Range<u64>, each: impl FnMut(u64)) -> Result<()> {
        self.meta.record_lengths(range, each)
    }

    /// The checked entry of record `i` and the shape bytes of its index entry.
    pub(crate) fn entry_and_shape(&self, i: u64) -> Result<(Entry, &[u8])> {
        self.meta.entry_and_shape(i)
    }

    /// Each data file's path, open file and size, in file order.
    pub(crate) fn data_files(&self) -> impl Iterator<Item = (&Path, &File, u64)> {
        self.files
            .0
            .iter()
            .map(|f| (f.path.as_path(), &f.file, f.size))
    }
}
