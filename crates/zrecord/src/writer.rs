//! The append-only builder. Records go to `data_shards` data files in parallel;
//! `finish` publishes the directory atomically.
//!
//! Memory stays bounded however large one append is: the input is consumed in
//! rounds of at most one chunk per data file, each chunk at most `CHUNK_BYTES` of
//! logical data (or one record, if a record is larger). Every chunk is encoded
//! (for raw, copied) into one reusable scratch buffer per concurrent task, and
//! checksummed and written from there: the caller's memory is read once, so the
//! index describes exactly the bytes on disk even if another thread changes the
//! source meanwhile.

use std::fs::{self, File, OpenOptions};
use std::io::{BufWriter, Write};
use std::ops::Range;
use std::path::{Path, PathBuf};

use xxhash_rust::xxh3::{xxh3_64, Xxh3};

use crate::codec::{Codec, Encoder};
use crate::error::{Error, IoContext, Result};
use crate::format::{self, Entry, Header, IndexSums, Kind, Schema, MAX_RECORD_BYTES};
use crate::parallel::{run_parts, Parallel};
use crate::publish::{check_destination, publish_with_header, write_whole, BuildDir};
use crate::ragged::RaggedView;
use crate::recycle::Recycler;

/// Logical bytes one data file's task handles per round.
pub const CHUNK_BYTES: usize = 4 << 20;
/// Bytes of raw records copied before they are written: the copy stays in cache.
const RAW_STAGE_BYTES: usize = 256 << 10;
/// Records one data file's task handles per round, so that tiny records keep the
/// per-round index buffer small too.
const CHUNK_RECORDS: usize = 1 << 16;

struct DataFile {
    file: File,
    path: PathBuf,
    size: u64,
}

impl DataFile {
    /// Appends `bytes` at the end of the file and starts their writeback.
    fn append(&mut self, bytes: &[u8]) -> Result<()> {
        self.file.write_all(bytes).at(&self.path)?;
        start_writeback(&self.file, self.size, bytes.len() as u64);
        self.size += bytes.len() as u64;
        Ok(())
    }
}

/// An append-only builder of one store; [`Writer::finish`] publishes it.
pub struct Writer {
    build: BuildDir,
    tmp: PathBuf,
    schema: Schema,
    encoder: Encoder,
    dict_size: u64,
    dict_xxh3: u64,
    files: Vec<DataFile>,
    index: BufWriter<File>,
    index_path: PathBuf,
    index_hasher: Xxh3,
    index_sums: IndexSums,
    attrs_size: u64,
    attrs_xxh3: u64,
    index_size: u64,
    count: u64,
    next_file: usize,
    scratch: Recycler<Vec<u8>>,
    /// Set when an append failed half way: the files no longer describe a prefix
    /// of the input, so nothing more may be written or published.
    poisoned: Option<String>,
}

/// What the caller promises about the memory it appends from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// Ordinary memory; left alone.
    Memory,
    /// What the caller believes is a read-only shared file mapping. The writer
    /// checks the claim against the process's mappings; where it holds, consumed
    /// pages are dropped from the process (they stay in the page cache and read
    /// back the same), which keeps resident memory flat while a memory-mapped
    /// source of any size is appended. Where it does not, the memory is left
    /// alone, as for [`Source::Memory`].
    ReadOnlyFileMapping,
}

/// Asks the kernel to start writing `len` bytes of `file` from `offset` to disk
/// without waiting for them. Writeback then overlaps the rest of the append, and
/// the fsyncs of `finish` wait for I/O already in flight instead of starting all
/// of it at the end. A hint: failure is ignored, `finish` still syncs everything.
fn start_writeback(file: &File, offset: u64, len: u64) {
    #[cfg(target_os = "linux")]
    // SAFETY: sync_file_range reads no memory of ours; a bad range is an error code.
    unsafe {
        libc::sync_file_range(
            std::os::fd::AsRawFd::as_raw_fd(file),
            offset as libc::off64_t,
            len as libc::off64_t,
            libc::SYNC_FILE_RANGE_WRITE,
        );
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (file, offset, len);
}

/// Whether every byte of `bytes` lies in a shared, file-backed mapping without
/// write permission, as `/proc/self/maps` lists them.
///
/// MADV_DONTNEED is only harmless there: the pages belong to the page cache and
/// read back the same. On anonymous memory it zeroes the caller's data, and on a
/// private file mapping it discards pages written since the mapping was made
/// (even one made read-only later), so the caller's word that memory is a
/// read-only file mapping is checked, never trusted. MADV_COLD and
/// MADV_PAGEOUT, which never discard data, were the alternative: COLD does not
/// lower resident memory until the system runs short of it, and PAGEOUT evicts
/// the pages from the page cache too, so a later read of the source goes to disk.
fn is_read_only_shared_file_mapping(bytes: &[u8]) -> bool {
    if !cfg!(target_os = "linux") || bytes.is_empty() {
        return false;
    }
    let Ok(maps) = fs::read_to_string("/proc/self/maps") else {
        return false;
    };
    let start = bytes.as_ptr() as usize;
    let Some(end) = start.checked_add(bytes.len()) else {
        return false;
    };
    let mut covered = start;
    for line in maps.lines() {
        // start-end perms offset dev inode [path]
        let mut f = line.split_ascii_whitespace();
        let (Some(span), Some(perms), Some(_), Some(_), Some(inode)) =
            (f.next(), f.next(), f.next(), f.next(), f.next())
        else {
            return false;
        };
        let Some((a, b)) = span.split_once('-') else {
            return false;
        };
        let (Ok(a), Ok(b)) = (usize::from_str_radix(a, 16), usize::from_str_radix(b, 16)) else {
            return false;
        };
        if b <= covered {
            continue;
        }
        let p = perms.as_bytes();
        if a > covered || p.len() < 4 || p[1] != b'-' || p[3] != b's' || inode == "0" {
            return false;
        }
        covered = b;
        if covered >= end {
            return true;
        }
    }
    false
}

/// Drops the whole pages inside `bytes` from this process's page tables. Only
/// for memory [`is_read_only_shared_file_mapping`] accepted.
fn release_pages(bytes: &[u8]) {
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(1) as usize;
    let start = bytes.as_ptr() as usize;
    let first = start.div_ceil(page) * page;
    let last = (start + bytes.len()) / page * page;
    if last > first {
        // SAFETY: the range lies inside memory the caller lent us, which
        // /proc/self/maps showed to be a read-only shared file mapping, where
        // MADV_DONTNEED only drops page-table entries; a later access reads the
        // same file bytes back.
        unsafe {
            libc::madvise(
                first as *mut libc::c_void,
                last - first,
                libc::MADV_DONTNEED,
            );
        }
    }
}

impl Writer {
    /// Starts a new store at `dest`, which must not exist. Parent directories are
    /// created as needed.
    pub fn create(dest: &Path, schema: Schema, dict: Option<&[u8]>) -> Result<Writer> {
        // Every refusal comes before anything is created.
        if schema.data_shards > format::MAX_DATA_SHARDS as u32 {
            return Err(Error::InvalidArgument(format!(
                "data_shards must be in 1..{}, got {}",
                format::MAX_DATA_SHARDS,
                schema.data_shards
            )));
        }
        check_destination(dest)?;
        let encoder = Encoder::new(schema.codec, dict)?;
        Writer::in_dir(BuildDir::create(dest)?, schema, encoder, dict)
    }

    /// Stores `attrs` (a JSON object, checked by the caller) with the store.
    pub fn set_attrs(&mut self, attrs: &[u8]) -> Result<()> {
        self.check_usable()?;
        if attrs.len() as u64 > format::MAX_ATTRS_BYTES {
            return Err(Error::InvalidArgument(format!(
                "attributes take {} bytes; at most {} are allowed",
                attrs.len(),
                format::MAX_ATTRS_BYTES
            )));
        }
        if self.attrs_size > 0 {
            return Err(Error::InvalidArgument("attributes are already set".into()));
        }
        (self.attrs_size, self.attrs_xxh3) = write_whole(
            &self.tmp.join(format::ATTRS_FILE),
            attrs,
            self.build.durable(),
        )?;
        Ok(())
    }

    fn in_dir(
        build: BuildDir,
        schema: Schema,
        encoder: Encoder,
        dict: Option<&[u8]>,
    ) -> Result<Writer> {
        let tmp = build.path().to_path_buf();
        let open = |p: PathBuf| -> Result<(File, PathBuf)> {
            let f = OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&p)
                .at(&p)?;
            Ok((f, p))
        };
        let files = (0..schema.data_shards as usize)
            .map(|s| {
                open(tmp.join(format::data_file(s))).map(|(file, path)| DataFile {
                    file,
                    path,
                    size: 0,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let (index, index_path) = open(tmp.join(format::INDEX_FILE))?;
        let (dict_size, dict_xxh3) = match dict {
            Some(d) => write_whole(&tmp.join(format::DICT_FILE), d, build.durable())?,
            None => (0, 0),
        };
        Ok(Writer {
            build,
            tmp,
            schema,
            encoder,
            dict_size,
            dict_xxh3,
            files,
            index: BufWriter::with_capacity(1 << 16, index),
            index_path,
            index_hasher: Xxh3::new(),
            index_sums: IndexSums::default(),
            attrs_size: 0,
            attrs_xxh3: 0,
            index_size: 0,
            count: 0,
            next_file: 0,
            scratch: Recycler::new(),
            poisoned: None,
        })
    }

    /// The schema of the store being built.
    pub fn schema(&self) -> &Schema {
        &self.schema
    }

    /// Records appended so far.
    pub fn len(&self) -> u64 {
        self.count
    }

    /// Whether nothing has been appended yet.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    fn check_usable(&self) -> Result<()> {
        match &self.poisoned {
            Some(why) => Err(Error::InvalidArgument(format!(
                "this writer can no longer be used: an earlier append failed ({why})"
            ))),
            None => Ok(()),
        }
    }

    /// Appends `n` Dense records laid end to end in `data`.
    pub fn append_dense(
        &mut self,
        n: usize,
        data: &[u8],
        source: Source,
        par: &dyn Parallel,
    ) -> Result<()> {
        self.check_usable()?;
        if self.schema.kind != Kind::Dense {
            return Err(Error::InvalidArgument(
                "append_dense on a Ragged writer".into(),
            ));
        }
        let rb = self.schema.record_bytes().unwrap_or(0) as usize;
        if n.checked_mul(rb) != Some(data.len()) {
            return Err(Error::InvalidArgument(format!(
                "{} bytes are not {n} records of {rb} bytes",
                data.len()
            )));
        }
        self.append_records(n, data, |i| i * rb..(i + 1) * rb, None, source, par)
    }

    /// Appends a packed ragged batch.
    pub fn append_ragged(
        &mut self,
        batch: &RaggedView<'_>,
        source: Source,
        par: &dyn Parallel,
    ) -> Result<()> {
        self.check_usable()?;
        if self.schema.kind != Kind::Ragged {
            return Err(Error::InvalidArgument(
                "append_ragged on a Dense writer".into(),
            ));
        }
        // The caller's arrays may change under us (another thread, the GIL
        // released): the offsets and shapes are read once, and only this copy is
        // checked and used, so every record's span is one that passed the check.
        let (cu, shapes) = (batch.cu_seqlens.to_vec(), batch.shapes.to_vec());
        let owned = RaggedView {
            values: batch.values,
            cu_seqlens: &cu,
            shapes: &shapes,
        };
        owned.check(self.schema.dtype.itemsize(), self.schema.ndim)?;
        let isz = self.schema.dtype.itemsize();
        self.append_records(
            owned.len(),
            batch.values,
            |i| cu[i] as usize * isz..cu[i + 1] as usize * isz,
            Some(&shapes),
            source,
            par,
        )
    }

    fn append_records<F>(
        &mut self,
        n: usize,
        data: &[u8],
        range: F,
        shapes: Option<&[u64]>,
        source: Source,
        par: &dyn Parallel,
    ) -> Result<()>
    where
        F: Fn(usize) -> Range<usize> + Sync,
    {
        for i in 0..n {
            let len = range(i).len() as u64;
            if len > MAX_RECORD_BYTES {
                return Err(Error::InvalidArgument(format!(
                    "record {i} holds {len} bytes, over the 2 GiB limit of one record"
                )));
            }
        }
        let source = match source {
            Source::ReadOnlyFileMapping if !is_read_only_shared_file_mapping(data) => {
                Source::Memory
            }
            s => s,
        };
        let r = self.write_rounds(n, data, &range, shapes, source, par);
        if let Err(e) = &r {
            self.poisoned = Some(e.to_string());
        }
        r
    }

    fn write_rounds<F>(
        &mut self,
        n: usize,
        data: &[u8],
        range: &F,
        shapes: Option<&[u64]>,
        source: Source,
        par: &dyn Parallel,
    ) -> Result<()>
    where
        F: Fn(usize) -> Range<usize> + Sync,
    {
        let s = self.files.len();
        let total = data.len();
        let target = total.div_ceil(s).clamp(1, CHUNK_BYTES);
        let ndim = self.schema.ndim;
        let mut i = 0;
        let mut entries: Vec<Vec<Entry>> = Vec::new();
        while i < n {
            // Split the next round into at most one chunk per data file.
            let mut chunks: Vec<Range<usize>> = Vec::with_capacity(s);
            while chunks.len() < s && i < n {
                let start = i;
                let mut bytes = 0;
                while i < n && (i == start || (bytes < target && i - start < CHUNK_RECORDS)) {
                    bytes += range(i).len();
                    i += 1;
                }
                chunks.push(start..i);
            }
            entries.resize_with(chunks.len(), Vec::new);
            let first = self.next_file;
            let mut tasks = Vec::with_capacity(chunks.len());
            let mut outs = entries.iter_mut();
            let mut by_chunk: Vec<Option<&mut DataFile>> =
                (0..chunks.len()).map(|_| None).collect();
            for (fid, file) in self.files.iter_mut().enumerate() {
                let k = (fid + s - first) % s;
                if k < chunks.len() {
                    by_chunk[k] = Some(file);
                }
            }
            for ((k, file), chunk) in by_chunk.into_iter().enumerate().zip(&chunks) {
                let (Some(file), Some(out)) = (file, outs.next()) else {
                    continue;
                };
                tasks.push(((first + k) % s, file, chunk.clone(), out));
            }
            let encoder = &self.encoder;
            let scratch = &self.scratch;
            run_parts(par, tasks, |(fid, file, chunk, out)| {
                write_chunk(encoder, scratch, fid as u32, file, data, range, chunk, out)
            })?;
            for (chunk, out) in chunks.iter().zip(&entries) {
                let mut buf = Vec::with_capacity(out.len() * self.schema.entry_size());
                for (rec, e) in chunk.clone().zip(out) {
                    e.encode_into(&mut buf);
                    if let Some(sh) = shapes {
                        for d in &sh[rec * ndim..(rec + 1) * ndim] {
                            buf.extend_from_slice(&d.to_le_bytes());
                        }
                    }
                }
                self.index.write_all(&buf).at(&self.index_path)?;
                self.index_hasher.update(&buf);
                self.index_sums.update(&buf);
                self.index_size += buf.len() as u64;
            }
            self.count += (i - chunks[0].start) as u64;
            self.next_file = (first + chunks.len()) % s;
            if source == Source::ReadOnlyFileMapping {
                let consumed = range(chunks[0].start).start..range(i - 1).end;
                release_pages(&data[consumed]);
            }
        }
        Ok(())
    }

    /// Publishes the store: syncs every file, writes the header, and renames the
    /// temporary directory into place.
    pub fn finish(mut self) -> Result<()> {
        self.check_usable()?;
        self.index.flush().at(&self.index_path)?;
        let durable = self.build.durable();
        if durable {
            start_writeback(self.index.get_ref(), 0, 0);
            for f in &self.files {
                start_writeback(&f.file, 0, 0);
            }
            self.index.get_ref().sync_all().at(&self.index_path)?;
            for f in &self.files {
                f.file.sync_all().at(&f.path)?;
            }
        }
        let header = Header {
            schema: self.schema.clone(),
            record_count: self.count,
            index_size: self.index_size,
            index_xxh3: self.index_hasher.digest(),
            dict_size: self.dict_size,
            dict_xxh3: self.dict_xxh3,
            shard_sizes: self.files.iter().map(|f| f.size).collect(),
            version: format::version_for(self.schema.data_shards),
            index_sums_xxh3: write_whole(
                &self.tmp.join(format::INDEX_SUMS_FILE),
                &std::mem::take(&mut self.index_sums).finish(),
                durable,
            )?
            .1,
            attrs_size: self.attrs_size,
            attrs_xxh3: self.attrs_xxh3,
            checksum: 0,
        };
        publish_with_header(self.build, &header).map(|_| ())
    }

    /// Discards everything written; nothing appears at the destination.
    pub fn abort(self) {
        drop(self)
    }
}

#[allow(clippy::too_many_arguments)]
fn write_chunk<F>(
    encoder: &Encoder,
    scratch: &Recycler<Vec<u8>>,
    fid: u32,
    file: &mut DataFile,
    data: &[u8],
    range: &F,
    chunk: Range<usize>,
    out: &mut Vec<Entry>,
) -> Result<()>
where
    F: Fn(usize) -> Range<usize>,
{
    out.clear();
    let base = file.size;
    let mut buf = scratch.take().unwrap_or_default();
    buf.clear();
    let result = (|| {
        if encoder.codec() == Codec::Raw {
            // Each record is copied once and hashed from the copy while it is
            // still in cache; the write reads the copy too, so checksum and disk
            // agree whatever happens to `data` meanwhile. The copy is written out
            // in stages small enough to stay in the core's cache, so the copy
            // costs cache bandwidth rather than a second pass through memory.
            for rec in chunk {
                let bytes = &data[range(rec)];
                if !buf.is_empty() && buf.len() + bytes.len() > RAW_STAGE_BYTES {
                    file.append(&buf)?;
                    buf.clear();
                }
                let at = buf.len();
                buf.extend_from_slice(bytes);
                out.push(Entry {
                    offset: file.size + at as u64,
                    stored_len: bytes.len() as u32,
                    file: fid,
                    checksum: xxh3_64(&buf[at..]),
                });
            }
            return file.append(&buf);
        }
        for rec in chunk {
            let at = buf.len();
            let n = encoder.encode(&data[range(rec)], &mut buf)?;
            if n as u64 > u32::MAX as u64 {
                return Err(Error::InvalidArgument(format!(
                    "record {rec} does not fit the index when compressed"
                )));
            }
            out.push(Entry {
                offset: base + at as u64,
                stored_len: n as u32,
                file: fid,
                checksum: xxh3_64(&buf[at..]),
            });
        }
        file.append(&buf)
    })();
    if buf.capacity() <= 2 * CHUNK_BYTES + (64 << 10) {
        scratch.put(buf);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::Codec;
    use crate::dtype::DType;
    use crate::parallel::Sequential;
    use crate::publish::tests::names;

    #[test]
    fn a_refused_destination_creates_nothing() {
        let root = tempfile::tempdir().unwrap();
        fs::write(root.path().join("file"), b"").unwrap();
        let schema = Schema::dense(DType::U8, &[1], Codec::Raw, 1).unwrap();
        for bad in ["new/.", "new/..", "", "/", "file/s", "file/a/s", "file"] {
            let dest = if bad.starts_with('/') || bad.is_empty() {
                PathBuf::from(bad)
            } else {
                root.path().join(bad)
            };
            assert!(
                Writer::create(&dest, schema.clone(), None).is_err(),
                "{bad}"
            );
            assert_eq!(names(root.path()), vec!["file".to_string()], "{bad}");
        }
        let mut w = Writer::create(&root.path().join("new/s/"), schema, None).unwrap();
        w.append_dense(2, &[7, 8], Source::Memory, &Sequential)
            .unwrap();
        w.finish().unwrap();
        assert_eq!(names(&root.path().join("new")), vec!["s".to_string()]);
    }
}
