//! Publishing one store from several stores of one schema, without decoding or
//! re-encoding a record.
//!
//! Each source's data files become data files of the result unchanged (hard
//! links where the filesystem allows, copies otherwise), numbered after the
//! previous sources' files. The index is rewritten with only the file number of
//! each entry changed: offsets, lengths, checksums and shapes stay as they are,
//! since every data file keeps its bytes. The header, `index.sum`, the dictionary
//! and the attributes are written anew, and the result is published the way a
//! [`crate::Writer`] publishes: synced, then renamed into place, or nothing.

use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};

use xxhash_rust::xxh3::Xxh3;

use crate::error::{Error, IoContext, Result};
use crate::format::{self, Header, IndexSums, Kind, Schema, MAX_ATTRS_BYTES, MAX_DATA_FILES};
use crate::local::Store;
use crate::parallel::Parallel;
use crate::publish::{check_destination, publish_with_header, write_whole, BuildDir};

/// Index bytes rewritten between two progress reports.
const INDEX_STEP_BYTES: usize = 1 << 20;
/// Bytes moved by each read and write of a data file that is copied.
const COPY_BYTES: usize = 1 << 20;

/// What [`concat()`] does beyond the rules it always applies.
#[derive(Clone, Copy, Debug, Default)]
pub struct ConcatOptions<'a> {
    /// The result's attributes (a JSON object, checked by the caller; empty:
    /// none). `None` requires every source to hold the same attributes, byte for
    /// byte (or none), and gives the result those.
    pub attrs: Option<&'a [u8]>,
    /// Before a source's data is taken, check every record of it as
    /// [`Store::verify`] does (stored bytes against their checksum, decoding).
    /// Without it, only what opening and reading check is checked: each source's
    /// header, index and every index entry, but no payload byte is read.
    pub verify_records: bool,
    /// Copy every data file instead of hard-linking it, so that the result
    /// shares no file with its sources.
    pub copy: bool,
}

/// What [`concat()`] published.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConcatReport {
    /// Where the store now is.
    pub path: PathBuf,
    /// Records in the result: the sum of the sources'.
    pub records: u64,
    /// Data files in the result: the sum of the sources'.
    pub data_files: usize,
    /// Data files hard-linked from a source.
    pub linked_files: usize,
    /// Data files copied from a source (asked for, or the link was refused: a
    /// source on another filesystem, or one that does not support links).
    pub copied_files: usize,
    /// Bytes of data files copied.
    pub copied_bytes: u64,
    /// The result's header checksum (its identity).
    pub header_checksum: u64,
}

/// Publishes at `dest` one store holding the records of `sources`, in order.
///
/// The sources must share one schema: kind, dtype, item shape (Dense) or ndim
/// (Ragged), codec and, for `zstd_dict`, the dictionary; their `data_shards`
/// may differ, and the result has their sum of data files, which must stay
/// within [`MAX_DATA_FILES`]. A result of more than 255 data files is written in
/// format version 3, any other in version 2. Each source is opened and checked as a reader
/// checks it; every index entry is checked as a gather checks it before it is
/// rewritten. `progress(done, total)` is called with records rewritten so far
/// after each step; an error it returns stops the concatenation.
///
/// Nothing appears at `dest` unless everything succeeded; an existing `dest` is
/// [`Error::Exists`] before any source is opened.
pub fn concat(
    sources: &[PathBuf],
    dest: &Path,
    options: &ConcatOptions<'_>,
    par: &dyn Parallel,
    progress: &mut dyn FnMut(u64, u64) -> Result<()>,
) -> Result<ConcatReport> {
    if sources.is_empty() {
        return Err(Error::InvalidArgument(
            "concat needs at least one source store".into(),
        ));
    }
    if let Some(a) = options.attrs {
        if a.len() as u64 > MAX_ATTRS_BYTES {
            return Err(Error::InvalidArgument(format!(
                "attributes take {} bytes; at most {MAX_ATTRS_BYTES} are allowed",
                a.len()
            )));
        }
    }
    check_destination(dest)?;
    check_file_count(sources)?;
    let stores = sources
        .iter()
        .map(|p| Store::open(p))
        .collect::<Result<Vec<_>>>()?;
    let plan = Plan::new(sources, &stores, options)?;
    let build = BuildDir::create(dest)?;
    let dir = build.path().to_path_buf();
    let (dict_size, dict_xxh3) = match &plan.dict {
        Some(d) => write_whole(&dir.join(format::DICT_FILE), d, build.durable())?,
        None => (0, 0),
    };
    let (attrs_size, attrs_xxh3) = match &plan.attrs {
        Some(a) => write_whole(&dir.join(format::ATTRS_FILE), a, build.durable())?,
        None => (0, 0),
    };
    let index_path = dir.join(format::INDEX_FILE);
    let mut index = IndexOut {
        file: BufWriter::with_capacity(
            1 << 16,
            OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&index_path)
                .at(&index_path)?,
        ),
        path: &index_path,
        hasher: Xxh3::new(),
        sums: IndexSums::default(),
        size: 0,
    };
    let mut report = ConcatReport {
        path: build.dest().to_path_buf(),
        records: plan.records,
        data_files: plan.data_files,
        linked_files: 0,
        copied_files: 0,
        copied_bytes: 0,
        header_checksum: 0,
    };
    let mut placed: Vec<File> = Vec::with_capacity(plan.data_files);
    let mut shard_sizes = Vec::with_capacity(plan.data_files);
    let mut done: u64 = 0;
    progress(0, plan.records)?;
    for store in &stores {
        if options.verify_records {
            store.verify(par)?;
        }
        let base = placed.len();
        for (src_path, src, size) in store.data_files() {
            let to = dir.join(format::data_file(placed.len()));
            let (file, how) = place(src_path, src, size, &to, options.copy)?;
            match how {
                Placed::Linked => report.linked_files += 1,
                Placed::Copied => {
                    report.copied_files += 1;
                    report.copied_bytes += size;
                }
            }
            placed.push(file);
            shard_sizes.push(size);
        }
        let base = u32::try_from(base).map_err(|_| too_many_files(plan.data_files))?;
        let mut buf = Vec::with_capacity(INDEX_STEP_BYTES + plan.schema.entry_size());
        for i in 0..store.len() {
            let (mut e, shape) = store.entry_and_shape(i)?;
            // The plan bounded the file count and each entry's file number
            // by its source's count, so this cannot overflow; checked regardless.
            e.file = base
                .checked_add(e.file)
                .ok_or_else(|| too_many_files(plan.data_files))?;
            e.encode_into(&mut buf);
            buf.extend_from_slice(shape);
            done += 1;
            if buf.len() >= INDEX_STEP_BYTES {
                index.write(&buf)?;
                buf.clear();
                progress(done, plan.records)?;
            }
        }
        index.write(&buf)?;
        progress(done, plan.records)?;
    }
    index.file.flush().at(&index_path)?;
    if build.durable() {
        index.file.get_ref().sync_all().at(&index_path)?;
        for (k, f) in placed.iter().enumerate() {
            f.sync_all().at(&dir.join(format::data_file(k)))?;
        }
    }
    if index.size != plan.index_size {
        return Err(Error::Internal(format!(
            "the rewritten index holds {} bytes, {} were planned",
            index.size, plan.index_size
        )));
    }
    let index_sums_xxh3 = write_whole(
        &dir.join(format::INDEX_SUMS_FILE),
        &std::mem::take(&mut index.sums).finish(),
        build.durable(),
    )?
    .1;
    let mut schema = plan.schema.clone();
    schema.data_shards =
        u32::try_from(plan.data_files).map_err(|_| too_many_files(plan.data_files))?;
    let version = format::version_for(schema.data_shards);
    let header = Header {
        schema,
        record_count: plan.records,
        index_size: index.size,
        index_xxh3: index.hasher.digest(),
        dict_size,
        dict_xxh3,
        shard_sizes,
        version,
        index_sums_xxh3,
        attrs_size,
        attrs_xxh3,
        checksum: 0,
    };
    report.header_checksum = publish_with_header(build, &header)?;
    Ok(report)
}

/// Everything decided before anything is written.
struct Plan {
    schema: Schema,
    dict: Option<Vec<u8>>,
    attrs: Option<Vec<u8>>,
    records: u64,
    data_files: usize,
    index_size: u64,
}

impl Plan {
    fn new(sources: &[PathBuf], stores: &[Store], options: &ConcatOptions<'_>) -> Result<Plan> {
        let first = &stores[0];
        let name0 = sources[0].display();
        let schema = first.schema().clone();
        let dict = first.dictionary();
        let mut records: u64 = 0;
        let mut data_files: usize = 0;
        for (path, store) in sources.iter().zip(stores) {
            let s = store.schema();
            let name = path.display();
            let differs = |what: &str, theirs: String, ours: String| {
                Error::InvalidArgument(format!(
                    "{name}: {what} {theirs}, but {name0} has {ours}; concatenated stores \
                     must share one schema"
                ))
            };
            if s.kind != schema.kind {
                return Err(differs(
                    "kind",
                    kind_name(s.kind).into(),
                    kind_name(schema.kind).into(),
                ));
            }
            if s.dtype != schema.dtype {
                return Err(differs(
                    "dtype",
                    s.dtype.name().into(),
                    schema.dtype.name().into(),
                ));
            }
            if schema.kind == Kind::Dense && s.item_shape != schema.item_shape {
                return Err(differs(
                    "item_shape",
                    format!("{:?}", s.item_shape),
                    format!("{:?}", schema.item_shape),
                ));
            }
            if s.ndim != schema.ndim {
                return Err(differs("ndim", s.ndim.to_string(), schema.ndim.to_string()));
            }
            if s.codec != schema.codec {
                return Err(differs(
                    "codec",
                    s.codec.name().into(),
                    schema.codec.name().into(),
                ));
            }
            if store.header().dict_xxh3 != first.header().dict_xxh3
                || store.header().dict_size != first.header().dict_size
                || store.dictionary() != dict
            {
                return Err(Error::InvalidArgument(format!(
                    "{name}: its zstd dictionary differs from {name0}'s; records compressed \
                     against different dictionaries cannot share a store"
                )));
            }
            if options.attrs.is_none() && store.attrs() != first.attrs() {
                return Err(Error::InvalidArgument(format!(
                    "{name}: its attributes differ from {name0}'s; pass the result's \
                     attributes explicitly to concatenate stores whose attributes differ"
                )));
            }
            records = records.checked_add(store.len()).ok_or_else(|| {
                Error::InvalidArgument(format!(
                    "{name}: the sources hold more than {} records in all",
                    u64::MAX
                ))
            })?;
            data_files = data_files
                .checked_add(s.data_shards as usize)
                .ok_or_else(|| too_many_files(usize::MAX))?;
        }
        if data_files > MAX_DATA_FILES as usize {
            return Err(too_many_files(data_files));
        }
        // A position must fit a signed 64-bit integer (the type positions take in
        // Python), and the index must be addressable to be mapped.
        let index_size = records
            .checked_mul(schema.entry_size() as u64)
            .filter(|&n| records <= i64::MAX as u64 && usize::try_from(n).is_ok())
            .ok_or_else(|| {
                Error::InvalidArgument(format!(
                    "the sources hold {records} records in all, more than one store can index"
                ))
            })?;
        let attrs = match options.attrs {
            Some(a) => (!a.is_empty()).then(|| a.to_vec()),
            None => first.attrs().map(<[u8]>::to_vec),
        };
        Ok(Plan {
            schema,
            dict: dict.map(<[u8]>::to_vec),
            attrs,
            records,
            data_files,
            index_size,
        })
    }
}

/// Refuses sources holding more data files than a store can, from their headers
/// alone, before any is opened (an open store holds a descriptor per data file).
/// A header that does not read is left for opening to report.
fn check_file_count(sources: &[PathBuf]) -> Result<()> {
    let mut files: usize = 0;
    for p in sources {
        if let Ok(h) = crate::local::read_header(&p.join(format::HEADER_FILE)) {
            files = files.saturating_add(h.schema.data_shards as usize);
        }
    }
    if files > MAX_DATA_FILES as usize {
        return Err(too_many_files(files));
    }
    Ok(())
}

fn kind_name(k: Kind) -> &'static str {
    match k {
        Kind::Dense => "Dense",
        Kind::Ragged => "Ragged",
    }
}

fn too_many_files(n: usize) -> Error {
    Error::InvalidArgument(format!(
        "the sources hold {n} data files in all, but a store holds at most {MAX_DATA_FILES}: \
         write the parts with fewer data_shards (with data_shards=1, up to {MAX_DATA_FILES} \
         parts concatenate)"
    ))
}

/// The index being written, with its checksums.
struct IndexOut<'a> {
    file: BufWriter<File>,
    path: &'a Path,
    hasher: Xxh3,
    sums: IndexSums,
    size: u64,
}

impl IndexOut<'_> {
    fn write(&mut self, bytes: &[u8]) -> Result<()> {
        self.file.write_all(bytes).at(self.path)?;
        self.hasher.update(bytes);
        self.sums.update(bytes);
        self.size = self
            .size
            .checked_add(bytes.len() as u64)
            .ok_or_else(|| Error::Internal("index size overflow".into()))?;
        Ok(())
    }
}

/// How a data file reached the result.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Placed {
    Linked,
    Copied,
}

/// Puts source data file `src` (open at `src_path`, `size` bytes as its header
/// says) at `to`: a hard link unless `copy` or the filesystem refuses one.
/// Returns the placed file, open, for syncing.
fn place(src_path: &Path, src: &File, size: u64, to: &Path, copy: bool) -> Result<(File, Placed)> {
    if !copy {
        match link_target(src_path, to) {
            Ok(()) => {
                let placed = File::open(to).at(to)?;
                // The link is made by name; the file checked at open is the one
                // held open. They must be the same file, still of its size.
                let (a, b) = (src.metadata().at(src_path)?, placed.metadata().at(to)?);
                if a.dev() != b.dev() || a.ino() != b.ino() {
                    return Err(Error::corrupt(
                        src_path,
                        "was replaced while the stores were being concatenated \
                         (stores must not be modified)",
                    ));
                }
                if b.len() != size {
                    return Err(Error::corrupt(
                        src_path,
                        format!(
                            "is {} bytes but its header says {size} (changed while the stores \
                             were being concatenated)",
                            b.len()
                        ),
                    ));
                }
                return Ok((placed, Placed::Linked));
            }
            Err(e) if link_unsupported(&e) => {}
            Err(e) => return Err(Error::io(src_path, e)),
        }
    }
    let mut out = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(to)
        .at(to)?;
    let mut buf = vec![0u8; COPY_BYTES.min(usize::try_from(size).unwrap_or(COPY_BYTES))];
    let mut at: u64 = 0;
    while at < size {
        let want = usize::try_from(size - at).map_or(buf.len(), |r| r.min(buf.len()));
        let n = src.read_at(&mut buf[..want], at).at(src_path)?;
        if n == 0 {
            return Err(Error::corrupt(
                src_path,
                format!(
                    "ended after {at} bytes but its header says {size} (truncated while the \
                     stores were being concatenated)"
                ),
            ));
        }
        out.write_all(&buf[..n]).at(to)?;
        at += n as u64;
    }
    Ok((out, Placed::Copied))
}

/// Hard-links the file `src` names at `to`. A data file that is a symbolic link
/// is followed: the result links the file itself, not the link, so that it holds
/// the bytes whatever becomes of the link or of its target's name later (a
/// linked link would resolve anew, a relative one against the result's directory).
fn link_target(src: &Path, to: &Path) -> std::io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let c = |p: &Path| {
        std::ffi::CString::new(p.as_os_str().as_bytes())
            .map_err(|_| std::io::Error::from_raw_os_error(libc::EINVAL))
    };
    let (a, b) = (c(src)?, c(to)?);
    // SAFETY: both are valid NUL-terminated paths; AT_FDCWD resolves them
    // relative to the working directory like `fs::hard_link` does.
    let rc = unsafe {
        libc::linkat(
            libc::AT_FDCWD,
            a.as_ptr(),
            libc::AT_FDCWD,
            b.as_ptr(),
            libc::AT_SYMLINK_FOLLOW,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Whether a failed hard link means "this filesystem or situation takes no
/// link" (so a copy is the way), not that something is wrong.
fn link_unsupported(e: &std::io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EXDEV)
            | Some(libc::EPERM)
            | Some(libc::EMLINK)
            | Some(libc::EOPNOTSUPP)
            | Some(libc::ENOSYS)
    )
}

#[cfg(test)]
mod tests;
