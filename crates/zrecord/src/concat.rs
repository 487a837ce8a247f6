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
use crate::format::{self, Header, IndexSums, Kind, Schema, MAX_ATTRS_BYTES, MAX_DATA_SHARDS};
use crate::parallel::Parallel;
use crate::publish::{check_destination, publish_with_header, write_whole, BuildDir};
use crate::reader::Store;

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
/// within the format's 255. Each source is opened and checked as a reader
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
    let stores = sources
        .iter()
        .map(|p| Store::open(p))
        .collect::<Result<Vec<_>>>()?;
    let plan = Plan::new(sources, &stores, options)?;
    let build = BuildDir::create(dest)?;
    let dir = build.path().to_path_buf();
    let (dict_size, dict_xxh3) = match &plan.dict {
        Some(d) => write_whole(&dir.join(format::DICT_FILE), d)?,
        None => (0, 0),
    };
    let (attrs_size, attrs_xxh3) = match &plan.attrs {
        Some(a) => write_whole(&dir.join(format::ATTRS_FILE), a)?,
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
        for (src_path, src, size) in store.data_files()? {
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
        let base = u8::try_from(base).map_err(|_| too_many_files(plan.data_files))?;
        let mut buf = Vec::with_capacity(INDEX_STEP_BYTES + plan.schema.entry_size());
        for i in 0..store.len() {
            let (mut e, shape) = store.entry_and_shape(i)?;
            // The plan bounded the file count by 255 and each entry's file number
            // by its source's count, so this cannot overflow; checked regardless.
            e.shard = base
                .checked_add(e.shard)
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
    index.file.get_ref().sync_all().at(&index_path)?;
    for (k, f) in placed.iter().enumerate() {
        f.sync_all().at(&dir.join(format::data_file(k)))?;
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
    )?
    .1;
    let mut schema = plan.schema.clone();
    schema.data_shards =
        u8::try_from(plan.data_files).map_err(|_| too_many_files(plan.data_files))?;
    let header = Header {
        schema,
        record_count: plan.records,
        index_size: index.size,
        index_xxh3: index.hasher.digest(),
        dict_size,
        dict_xxh3,
        shard_sizes,
        version: format::FORMAT_VERSION,
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
        let dict = first.dictionary()?;
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
                || store.dictionary()? != dict
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
        if data_files > MAX_DATA_SHARDS as usize {
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
            dict,
            attrs,
            records,
            data_files,
            index_size,
        })
    }
}

fn kind_name(k: Kind) -> &'static str {
    match k {
        Kind::Dense => "Dense",
        Kind::Ragged => "Ragged",
    }
}

fn too_many_files(n: usize) -> Error {
    Error::InvalidArgument(format!(
        "the sources hold {n} data files in all, but a store holds at most {MAX_DATA_SHARDS}: \
         write the parts with fewer data_shards (with data_shards=1, up to {MAX_DATA_SHARDS} \
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
        match std::fs::hard_link(src_path, to) {
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
mod tests {
    use super::*;
    use crate::codec::{train_dictionary, Codec, ALL_CODECS};
    use crate::dtype::DType;
    use crate::parallel::Sequential;
    use crate::ragged::RaggedView;
    use crate::writer::{Source, Writer};

    /// A record as read back: its shape (Ragged) and logical bytes.
    type Rec = (Vec<u64>, Vec<u8>);

    fn no_progress() -> impl FnMut(u64, u64) -> Result<()> {
        |_, _| Ok(())
    }

    fn dict() -> Vec<u8> {
        let data: Vec<u8> = (0..64 * 256u32).map(|i| (i * 7 % 251) as u8).collect();
        train_dictionary(&data, &[256; 64], 1024).unwrap()
    }

    fn dict_for(codec: Codec) -> Option<Vec<u8>> {
        (codec == Codec::ZstdDict).then(dict)
    }

    /// Writes a Ragged u16 store of ndim 1 with records of the given lengths;
    /// the values start at `seed`.
    fn ragged(path: &Path, codec: Codec, shards: u8, lens: &[u64], seed: u16) -> Vec<Rec> {
        let d = dict_for(codec);
        let schema = Schema::ragged(DType::U16, 1, codec, shards).unwrap();
        let mut w = Writer::create(path, schema, d.as_deref()).unwrap();
        let mut values = Vec::new();
        let mut cu = vec![0i32];
        let mut recs = Vec::new();
        let mut v = seed;
        for &n in lens {
            let mut bytes = Vec::new();
            for _ in 0..n {
                bytes.extend_from_slice(&v.to_le_bytes());
                v = v.wrapping_mul(31).wrapping_add(7);
            }
            values.extend_from_slice(&bytes);
            cu.push(cu.last().unwrap() + n as i32);
            recs.push((vec![n], bytes));
        }
        let view = RaggedView {
            values: &values,
            cu_seqlens: &cu,
            shapes: lens,
        };
        w.append_ragged(&view, Source::Memory, &Sequential).unwrap();
        w.finish().unwrap();
        recs
    }

    /// Writes a Dense store of `item` u8 items holding `n` records from `seed`.
    fn dense(path: &Path, codec: Codec, shards: u8, item: &[u64], n: usize, seed: u8) -> Vec<Rec> {
        let d = dict_for(codec);
        let schema = Schema::dense(DType::U8, item, codec, shards).unwrap();
        let rb = schema.record_bytes().unwrap() as usize;
        let mut w = Writer::create(path, schema, d.as_deref()).unwrap();
        let data: Vec<u8> = (0..n * rb)
            .map(|i| (i as u8).wrapping_mul(13) ^ seed)
            .collect();
        w.append_dense(n, &data, Source::Memory, &Sequential)
            .unwrap();
        w.finish().unwrap();
        (0..n)
            .map(|k| (Vec::new(), data[k * rb..(k + 1) * rb].to_vec()))
            .collect()
    }

    fn read_all(path: &Path) -> Vec<Rec> {
        let s = Store::open(path).unwrap();
        s.verify(&Sequential).unwrap();
        (0..s.len())
            .map(|i| {
                let idx = [i];
                let plan = s.plan(&idx).unwrap();
                let mut out = vec![0u8; plan.output_len()];
                s.gather(&plan, &mut out, &Sequential).unwrap();
                match plan.layout() {
                    None => (Vec::new(), out),
                    Some(l) => {
                        let shape = out[l.shapes_offset..l.shapes_offset + 8 * l.ndim]
                            .chunks(8)
                            .map(|c| format::le_u64(c, 0))
                            .collect();
                        (shape, out[..l.values_bytes].to_vec())
                    }
                }
            })
            .collect()
    }

    fn entries(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    fn run(sources: &[PathBuf], dest: &Path, options: &ConcatOptions<'_>) -> Result<ConcatReport> {
        concat(sources, dest, options, &Sequential, &mut no_progress())
    }

    #[test]
    fn every_codec_and_kind_concatenates_to_the_records_in_order() {
        let root = tempfile::tempdir().unwrap();
        for codec in ALL_CODECS {
            // Sources of 1, 3 and 2 data files; one holds no record at all, and
            // a record may have no element.
            let p = |k: usize| root.path().join(format!("{}-r{k}", codec.name()));
            let mut want = ragged(&p(0), codec, 1, &[3, 0, 5], 1);
            want.extend(ragged(&p(1), codec, 3, &[], 2));
            want.extend(ragged(&p(2), codec, 2, &[0, 9, 1, 4000], 3));
            let dest = root.path().join(format!("{}-ragged", codec.name()));
            let r = run(&[p(0), p(1), p(2)], &dest, &ConcatOptions::default()).unwrap();
            assert_eq!((r.records, r.data_files, r.linked_files), (7, 6, 6));
            assert_eq!((r.copied_files, r.copied_bytes), (0, 0));
            assert_eq!(read_all(&dest), want, "{codec:?}");
            let s = Store::open(&dest).unwrap();
            assert_eq!(s.header().checksum, r.header_checksum);
            assert_eq!(s.schema().data_shards, 6);
            for k in 0..3 {
                assert_ne!(
                    Store::open(&p(k)).unwrap().header().checksum,
                    r.header_checksum
                );
            }

            let q = |k: usize| root.path().join(format!("{}-d{k}", codec.name()));
            let mut want = dense(&q(0), codec, 4, &[3, 2], 10, 1);
            want.extend(dense(&q(1), codec, 1, &[3, 2], 1, 2));
            let dest = root.path().join(format!("{}-dense", codec.name()));
            let r = run(&[q(0), q(1)], &dest, &ConcatOptions::default()).unwrap();
            assert_eq!((r.records, r.data_files), (11, 5));
            assert_eq!(read_all(&dest), want, "{codec:?}");
        }
    }

    #[test]
    fn zero_size_dense_records_and_one_source() {
        let root = tempfile::tempdir().unwrap();
        let a = root.path().join("a");
        let b = root.path().join("b");
        let mut want = dense(&a, Codec::Raw, 2, &[4, 0], 5, 0);
        want.extend(dense(&b, Codec::Raw, 2, &[4, 0], 3, 0));
        let dest = root.path().join("ab");
        assert_eq!(
            run(&[a.clone(), b], &dest, &ConcatOptions::default())
                .unwrap()
                .records,
            8
        );
        assert_eq!(read_all(&dest), want);
        assert!(want.iter().all(|r| r.1.is_empty()));

        // One source republished: the same records, files and index, so the
        // same header and identity.
        let one = root.path().join("one");
        let r = run(std::slice::from_ref(&a), &one, &ConcatOptions::default()).unwrap();
        assert_eq!(read_all(&one), read_all(&a));
        assert_eq!(
            r.header_checksum,
            Store::open(&a).unwrap().header().checksum
        );
    }

    #[test]
    fn copies_when_asked_and_shares_no_file() {
        let root = tempfile::tempdir().unwrap();
        let a = root.path().join("a");
        let want = dense(&a, Codec::Zstd, 3, &[100], 50, 9);
        let dest = root.path().join("copy");
        let options = ConcatOptions {
            copy: true,
            verify_records: true,
            ..Default::default()
        };
        let r = run(&[a.clone(), a.clone()], &dest, &options).unwrap();
        assert_eq!((r.linked_files, r.copied_files), (0, 6));
        let sizes: u64 = Store::open(&a).unwrap().header().shard_sizes.iter().sum();
        assert_eq!(r.copied_bytes, 2 * sizes);
        let twice: Vec<Rec> = want.iter().chain(&want).cloned().collect();
        assert_eq!(read_all(&dest), twice);
        for k in 0..6 {
            let m = std::fs::metadata(dest.join(format::data_file(k))).unwrap();
            let src = std::fs::metadata(a.join(format::data_file(k % 3))).unwrap();
            assert_eq!(m.nlink(), 1);
            assert_ne!(m.ino(), src.ino());
        }
    }

    #[test]
    fn linked_files_are_the_sources_files() {
        let root = tempfile::tempdir().unwrap();
        let a = root.path().join("a");
        dense(&a, Codec::Raw, 2, &[8], 20, 1);
        let dest = root.path().join("d");
        run(std::slice::from_ref(&a), &dest, &ConcatOptions::default()).unwrap();
        for k in 0..2 {
            let m = std::fs::metadata(dest.join(format::data_file(k))).unwrap();
            let src = std::fs::metadata(a.join(format::data_file(k))).unwrap();
            assert_eq!((m.ino(), m.nlink()), (src.ino(), 2));
        }
    }

    fn refused(sources: &[PathBuf], dest: &Path, options: &ConcatOptions<'_>) -> String {
        let parent = dest.parent().unwrap();
        let before = entries(parent);
        let e = run(sources, dest, options).unwrap_err();
        assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
        assert_eq!(entries(parent), before, "{e}");
        e.to_string()
    }

    #[test]
    fn a_schema_mismatch_names_the_source_and_the_field() {
        let root = tempfile::tempdir().unwrap();
        let p = |n: &str| root.path().join(n);
        dense(&p("base"), Codec::Raw, 1, &[2, 3], 2, 0);
        dense(&p("shape"), Codec::Raw, 1, &[3, 2], 2, 0);
        dense(&p("ndim"), Codec::Raw, 1, &[6], 2, 0);
        dense(&p("codec"), Codec::Zstd, 1, &[2, 3], 2, 0);
        ragged(&p("kind"), Codec::Raw, 1, &[1], 0);
        let schema = Schema::dense(DType::I8, &[2, 3], Codec::Raw, 1).unwrap();
        Writer::create(&p("dtype"), schema, None)
            .unwrap()
            .finish()
            .unwrap();
        let dest = p("out");
        let cases = [
            ("kind", "kind Ragged, but"),
            ("dtype", "dtype int8, but"),
            ("shape", "item_shape [3, 2], but"),
            ("ndim", "item_shape [6], but"),
            ("codec", "codec zstd, but"),
        ];
        let base = format!("{}", p("base").display());
        for (name, says) in cases {
            let msg = refused(&[p("base"), p(name)], &dest, &ConcatOptions::default());
            let who = format!("{}: ", p(name).display());
            assert!(msg.starts_with(&who) && msg.contains(says), "{msg}");
            assert!(msg.contains(&format!("but {base} has")), "{msg}");
        }

        // Two dictionaries: same codec, different bytes.
        ragged(&p("dict-a"), Codec::ZstdDict, 1, &[5], 0);
        let other: Vec<u8> = dict().iter().map(|b| b ^ 1).collect();
        let schema = Schema::ragged(DType::U16, 1, Codec::ZstdDict, 1).unwrap();
        let w = Writer::create(&p("dict-b"), schema, Some(&other)).unwrap();
        w.finish().unwrap();
        let msg = refused(
            &[p("dict-a"), p("dict-b")],
            &dest,
            &ConcatOptions::default(),
        );
        assert!(msg.contains("dictionary differs"), "{msg}");
        ragged(&p("r2"), Codec::Raw, 1, &[1], 0);
        let schema = Schema::ragged(DType::U16, 2, Codec::Raw, 1).unwrap();
        Writer::create(&p("r-ndim"), schema, None)
            .unwrap()
            .finish()
            .unwrap();
        let msg = refused(&[p("r2"), p("r-ndim")], &dest, &ConcatOptions::default());
        assert!(msg.contains("ndim 2, but"), "{msg}");
    }

    #[test]
    fn attributes_must_agree_unless_given() {
        let root = tempfile::tempdir().unwrap();
        let p = |n: &str| root.path().join(n);
        let part = |name: &str, attrs: Option<&[u8]>| {
            let schema = Schema::dense(DType::U8, &[1], Codec::Raw, 1).unwrap();
            let mut w = Writer::create(&p(name), schema, None).unwrap();
            if let Some(a) = attrs {
                w.set_attrs(a).unwrap();
            }
            w.append_dense(1, &[7], Source::Memory, &Sequential)
                .unwrap();
            w.finish().unwrap();
        };
        part("a", Some(br#"{"v":1}"#));
        part("b", Some(br#"{"v":1}"#));
        part("c", Some(br#"{"v":2}"#));
        part("none", None);
        let d = |n: &str| root.path().join(n);
        run(&[p("a"), p("b")], &d("ab"), &ConcatOptions::default()).unwrap();
        assert_eq!(
            Store::open(&d("ab")).unwrap().attrs(),
            Some(&br#"{"v":1}"#[..])
        );
        for other in ["c", "none"] {
            let msg = refused(&[p("a"), p(other)], &d("x"), &ConcatOptions::default());
            assert!(msg.contains("attributes differ"), "{msg}");
        }
        let given = ConcatOptions {
            attrs: Some(br#"{"v":3}"#),
            ..Default::default()
        };
        run(&[p("a"), p("c"), p("none")], &d("given"), &given).unwrap();
        assert_eq!(
            Store::open(&d("given")).unwrap().attrs(),
            Some(&br#"{"v":3}"#[..])
        );
        run(
            &[p("none"), p("none")],
            &d("empty"),
            &ConcatOptions::default(),
        )
        .unwrap();
        assert_eq!(Store::open(&d("empty")).unwrap().attrs(), None);
        let cleared = ConcatOptions {
            attrs: Some(b""),
            ..Default::default()
        };
        run(&[p("a"), p("c")], &d("cleared"), &cleared).unwrap();
        assert_eq!(Store::open(&d("cleared")).unwrap().attrs(), None);
        assert!(!d("cleared").join(format::ATTRS_FILE).exists());
        let big = vec![b' '; MAX_ATTRS_BYTES as usize + 1];
        let too_big = ConcatOptions {
            attrs: Some(&big),
            ..Default::default()
        };
        refused(&[p("a")], &d("big"), &too_big);
    }

    #[test]
    fn limits_and_arguments_are_refused_before_anything_is_made() {
        let root = tempfile::tempdir().unwrap();
        let p = |n: &str| root.path().join(n);
        dense(&p("wide"), Codec::Raw, 200, &[1], 3, 0);
        dense(&p("one"), Codec::Raw, 55, &[1], 3, 0);
        let msg = refused(
            &[p("wide"), p("wide")],
            &p("out"),
            &ConcatOptions::default(),
        );
        assert!(
            msg.contains("400 data files") && msg.contains("at most 255"),
            "{msg}"
        );
        // Exactly 255 files is the limit, not over it.
        let r = run(
            &[p("wide"), p("one")],
            &p("full"),
            &ConcatOptions::default(),
        )
        .unwrap();
        assert_eq!(r.data_files, 255);
        assert_eq!(Store::open(&p("full")).unwrap().len(), 6);
        let msg = refused(&[], &p("out"), &ConcatOptions::default());
        assert!(msg.contains("at least one source"), "{msg}");
        assert!(matches!(
            run(&[p("one")], &p("full"), &ConcatOptions::default()),
            Err(Error::Exists(_))
        ));
        assert!(matches!(
            run(
                &[p("one"), p("missing")],
                &p("out"),
                &ConcatOptions::default()
            ),
            Err(Error::NotFound(_))
        ));
    }

    #[test]
    fn a_failure_part_way_publishes_nothing() {
        let root = tempfile::tempdir().unwrap();
        let p = |n: &str| root.path().join(n);
        dense(&p("a"), Codec::Zstd, 2, &[16], 40, 1);
        dense(&p("b"), Codec::Zstd, 2, &[16], 40, 2);
        let before = entries(root.path());
        // A progress callback that fails after the first source.
        let mut calls = 0;
        let mut stop = |done: u64, _total: u64| {
            calls += 1;
            if done >= 40 {
                Err(Error::InvalidArgument("stopped".into()))
            } else {
                Ok(())
            }
        };
        let e = concat(
            &[p("a"), p("b")],
            &p("out"),
            &ConcatOptions::default(),
            &Sequential,
            &mut stop,
        )
        .unwrap_err();
        assert_eq!(e.to_string(), "stopped");
        assert_eq!(calls, 2);
        assert_eq!(entries(root.path()), before);

        // A source's data file removed after the sources were opened.
        let mut removed = false;
        let mut remove = |_: u64, _: u64| {
            if !removed {
                std::fs::remove_file(p("b").join(format::data_file(1))).unwrap();
                removed = true;
            }
            Ok(())
        };
        let e = concat(
            &[p("a"), p("b")],
            &p("out"),
            &ConcatOptions::default(),
            &Sequential,
            &mut remove,
        )
        .unwrap_err();
        assert!(
            matches!(&e, Error::Io { path, .. } if path.ends_with("b/data-001.bin")),
            "{e}"
        );
        assert_eq!(entries(root.path()), before);
    }

    /// Runs a concatenation of `a` then `b` in which `change` alters `b` after
    /// every source was opened (at the first progress report), and returns its
    /// error, having checked that the parent directory is as before.
    fn changed_part_way(copy: bool, change: impl Fn(&Path)) -> Error {
        let root = tempfile::tempdir().unwrap();
        let p = |n: &str| root.path().join(n);
        dense(&p("a"), Codec::Raw, 1, &[16], 10, 1);
        dense(&p("b"), Codec::Raw, 1, &[16], 10, 2);
        let before = entries(root.path());
        let mut changed = false;
        let mut hook = |_: u64, _: u64| {
            if !changed {
                change(&p("b").join(format::data_file(0)));
                changed = true;
            }
            Ok(())
        };
        let options = ConcatOptions {
            copy,
            ..Default::default()
        };
        let e = concat(
            &[p("a"), p("b")],
            &p("out"),
            &options,
            &Sequential,
            &mut hook,
        )
        .unwrap_err();
        assert_eq!(entries(root.path()), before, "{e}");
        e
    }

    #[test]
    fn a_data_file_replaced_or_truncated_part_way_is_refused() {
        // Replaced by another file of the same bytes: the link would take a file
        // that was never checked.
        let e = changed_part_way(false, |f| {
            let bytes = std::fs::read(f).unwrap();
            std::fs::remove_file(f).unwrap();
            std::fs::write(f, bytes).unwrap();
        });
        assert!(
            matches!(&e, Error::Corrupt { msg, .. } if msg.contains("was replaced")),
            "{e}"
        );
        // Truncated in place: linked, the size no longer matches the header.
        let truncate = |f: &Path| {
            let file = OpenOptions::new().write(true).open(f).unwrap();
            file.set_len(16 * 4).unwrap();
        };
        let e = changed_part_way(false, truncate);
        assert!(
            matches!(&e, Error::Corrupt { msg, .. } if msg.contains("is 64 bytes")),
            "{e}"
        );
        // Copied: the copy ends early.
        let e = changed_part_way(true, truncate);
        assert!(
            matches!(&e, Error::Corrupt { msg, .. } if msg.contains("ended after 64")),
            "{e}"
        );
    }

    #[test]
    fn damaged_payload_is_caught_only_when_records_are_verified() {
        let root = tempfile::tempdir().unwrap();
        let p = |n: &str| root.path().join(n);
        dense(&p("a"), Codec::Raw, 1, &[16], 4, 1);
        let f = p("a").join(format::data_file(0));
        let mut bytes = std::fs::read(&f).unwrap();
        bytes[20] ^= 1;
        std::fs::write(&f, &bytes).unwrap();
        let verified = ConcatOptions {
            verify_records: true,
            ..Default::default()
        };
        let e = run(&[p("a")], &p("v"), &verified).unwrap_err();
        assert!(
            matches!(
                &e,
                Error::Corrupt {
                    record: Some(1),
                    ..
                }
            ),
            "{e}"
        );
        assert!(!p("v").exists());
        run(&[p("a")], &p("unverified"), &ConcatOptions::default()).unwrap();
        let e = Store::open(&p("unverified"))
            .unwrap()
            .verify(&Sequential)
            .unwrap_err();
        assert!(
            matches!(
                &e,
                Error::Corrupt {
                    record: Some(1),
                    ..
                }
            ),
            "{e}"
        );
    }

    #[test]
    fn progress_counts_records_up_to_the_total_over_a_large_index() {
        let root = tempfile::tempdir().unwrap();
        let p = |n: &str| root.path().join(n);
        // 60,000 entries of 24 bytes: an index over 1 MiB, which opening checks
        // block by block and the rewrite reports more than once.
        let mut want = dense(&p("a"), Codec::Raw, 2, &[1], 60_000, 1);
        want.extend(dense(&p("b"), Codec::Raw, 1, &[1], 5, 2));
        let mut seen = Vec::new();
        let mut note = |done: u64, total: u64| {
            seen.push((done, total));
            Ok(())
        };
        concat(
            &[p("a"), p("b")],
            &p("out"),
            &ConcatOptions::default(),
            &Sequential,
            &mut note,
        )
        .unwrap();
        assert!(seen.len() >= 4, "{seen:?}");
        assert_eq!(seen.first(), Some(&(0, 60_005)));
        assert_eq!(seen.last(), Some(&(60_005, 60_005)));
        assert!(seen
            .windows(2)
            .all(|w| w[0].0 <= w[1].0 && w[1].1 == 60_005));
        assert_eq!(read_all(&p("out")), want);
    }

    #[test]
    fn a_damaged_index_is_refused() {
        let root = tempfile::tempdir().unwrap();
        let p = |n: &str| root.path().join(n);
        dense(&p("a"), Codec::Raw, 1, &[16], 4, 1);
        let f = p("a").join(format::INDEX_FILE);
        let mut bytes = std::fs::read(&f).unwrap();
        bytes[30] ^= 1;
        std::fs::write(&f, &bytes).unwrap();
        let e = run(&[p("a")], &p("out"), &ConcatOptions::default()).unwrap_err();
        assert!(matches!(&e, Error::Corrupt { .. }), "{e}");
        assert!(!p("out").exists());
    }
}
