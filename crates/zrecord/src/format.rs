//! The bytes on disk. `docs/FORMAT.md` describes the same layout for people; keep
//! the two in step.
//!
//! A store is a directory holding `header.bin`, `index.bin`, `data-NNN.bin` for each
//! data file and, for `zstd_dict`, `dict.bin`. Every integer is little-endian.

use std::path::Path;

use xxhash_rust::xxh3::xxh3_64;

use crate::codec::Codec;
use crate::dtype::DType;
use crate::error::{Error, Result};

/// The first bytes of every `header.bin`.
pub const MAGIC: [u8; 8] = *b"ZRECORD\0";
/// The format version of every store of at most [`MAX_DATA_SHARDS`] data files
/// (every store a [`crate::Writer`] makes): such a store stays readable by every
/// reader since version 2. Version 1 stores (no index block sums, no attributes)
/// are still read.
pub const FORMAT_VERSION: u32 = 2;
/// The format version of a store of more than [`MAX_DATA_SHARDS`] data files (a
/// concatenation of many parts): its header counts data files in a `u32`, and an
/// index entry's data file number takes the three bytes that were zero before.
pub const WIDE_FORMAT_VERSION: u32 = 3;
/// The newest format version this crate reads.
pub const NEWEST_FORMAT_VERSION: u32 = WIDE_FORMAT_VERSION;
/// The oldest format version this crate reads.
pub const OLDEST_FORMAT_VERSION: u32 = 1;
/// Largest `header.bin` a reader accepts. A real header is at most about 128 KiB
/// ([`MAX_DATA_FILES`] data file sizes and 32 dimensions); the cap keeps a damaged
/// or hostile file from being read whole.
pub const MAX_HEADER_BYTES: u64 = 256 << 10;
/// The header's file name inside a store directory.
pub const HEADER_FILE: &str = "header.bin";
/// The index's file name.
pub const INDEX_FILE: &str = "index.bin";
/// The dictionary's file name (`zstd_dict` stores only).
pub const DICT_FILE: &str = "dict.bin";
/// The file of index block checksums (format version 2 on).
pub const INDEX_SUMS_FILE: &str = "index.sum";
/// The file of the store's attributes, a JSON object (when it has any).
pub const ATTRS_FILE: &str = "attrs.json";
/// Bytes of `index.bin` covered by each checksum in `index.sum`. A reader checks
/// a block the first time it uses an entry in it, so opening a store costs the
/// same whatever its record count.
pub const INDEX_BLOCK_BYTES: usize = 64 << 10;
/// Largest attributes file a store may carry.
pub const MAX_ATTRS_BYTES: u64 = 1 << 20;
/// Data files of a store when the creator does not choose.
pub const DEFAULT_DATA_SHARDS: u8 = 4;
/// Most data files a writer spreads records over, and most data files of a store
/// in format version 2 (the count is one byte there).
pub const MAX_DATA_SHARDS: u8 = u8::MAX;
/// Most data files a store may have (format version 3). An open store holds a
/// descriptor and a mapping per data file, so the bound keeps a store within
/// what one process can open.
pub const MAX_DATA_FILES: u32 = 1 << 14;
/// Largest stored or logical size of one record.
pub const MAX_RECORD_BYTES: u64 = 1 << 31;
/// Largest number of dimensions of a record.
pub const MAX_NDIM: usize = 32;
/// Fixed part of an index entry: offset u64, stored length u32, data file u32
/// (versions 1 and 2: one byte and three zero bytes, which read the same), xxh3-64
/// of the stored bytes. Ragged entries append the shape.
pub const ENTRY_FIXED: usize = 24;

/// The format version a store of `data_files` data files is written in: the
/// oldest that can hold them.
pub fn version_for(data_files: u32) -> u32 {
    if data_files <= MAX_DATA_SHARDS as u32 {
        FORMAT_VERSION
    } else {
        WIDE_FORMAT_VERSION
    }
}

/// The file name of data file number `i`.
pub fn data_file(i: usize) -> String {
    format!("data-{i:03}.bin")
}

/// The two record geometries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Kind {
    /// Every record has the schema's item shape.
    Dense = 0,
    /// Every record has its own shape of the schema's `ndim`, kept in the index.
    Ragged = 1,
}

/// The schema fixed at create time.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Schema {
    /// Dense or Ragged.
    pub kind: Kind,
    /// The element type of every record.
    pub dtype: DType,
    /// Dense: the item shape. Ragged: empty (only `ndim` matters).
    pub item_shape: Vec<u64>,
    /// Dimensions of every record.
    pub ndim: usize,
    /// How records are stored.
    pub codec: Codec,
    /// Data files the records are spread over.
    pub data_shards: u32,
}

impl Schema {
    /// A Dense schema, checked.
    pub fn dense(dtype: DType, item_shape: &[u64], codec: Codec, data_shards: u32) -> Result<Self> {
        let s = Schema {
            kind: Kind::Dense,
            dtype,
            item_shape: item_shape.to_vec(),
            ndim: item_shape.len(),
            codec,
            data_shards,
        };
        s.validate()?;
        Ok(s)
    }

    /// A Ragged schema, checked.
    pub fn ragged(dtype: DType, ndim: usize, codec: Codec, data_shards: u32) -> Result<Self> {
        let s = Schema {
            kind: Kind::Ragged,
            dtype,
            item_shape: Vec::new(),
            ndim,
            codec,
            data_shards,
        };
        s.validate()?;
        Ok(s)
    }

    fn validate(&self) -> Result<()> {
        if self.data_shards == 0 || self.data_shards > MAX_DATA_FILES {
            return Err(Error::InvalidArgument(format!(
                "a store has 1 to {MAX_DATA_FILES} data files, got {}",
                self.data_shards
            )));
        }
        if self.ndim > MAX_NDIM {
            return Err(Error::InvalidArgument(format!(
                "at most {MAX_NDIM} dimensions are supported, got {}",
                self.ndim
            )));
        }
        match self.kind {
            Kind::Ragged if self.ndim == 0 => Err(Error::InvalidArgument(
                "Ragged needs ndim >= 1; scalar records have a fixed shape: use Dense with item_shape=()"
                    .into(),
            )),
            Kind::Dense if self.record_bytes().is_none() => Err(Error::InvalidArgument(format!(
                "item_shape {:?} of {} makes a record larger than the 2 GiB limit",
                self.item_shape,
                self.dtype.name()
            ))),
            _ => Ok(()),
        }
    }

    /// Logical bytes of one Dense record; `None` past the record limit.
    pub fn record_bytes(&self) -> Option<u64> {
        let mut n = self.dtype.itemsize() as u64;
        for &d in &self.item_shape {
            n = n.checked_mul(d)?;
        }
        (n <= MAX_RECORD_BYTES).then_some(n)
    }

    /// Bytes of one index entry: the fixed part, plus the shape for Ragged.
    pub fn entry_size(&self) -> usize {
        match self.kind {
            Kind::Dense => ENTRY_FIXED,
            Kind::Ragged => ENTRY_FIXED + 8 * self.ndim,
        }
    }
}

/// Everything `header.bin` holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Header {
    /// The schema fixed at create time.
    pub schema: Schema,
    /// Records in the store.
    pub record_count: u64,
    /// Bytes of `index.bin`.
    pub index_size: u64,
    /// xxh3-64 of `index.bin`.
    pub index_xxh3: u64,
    /// Bytes of `dict.bin`; 0 without a dictionary.
    pub dict_size: u64,
    /// xxh3-64 of `dict.bin`; 0 without a dictionary.
    pub dict_xxh3: u64,
    /// Bytes of each data file, in file order.
    pub shard_sizes: Vec<u64>,
    /// The version the header was written with.
    pub version: u32,
    /// xxh3-64 of `index.sum`; 0 in version 1, which has no such file.
    pub index_sums_xxh3: u64,
    /// Bytes of `attrs.json`; 0 without attributes.
    pub attrs_size: u64,
    /// xxh3-64 of `attrs.json`; 0 without attributes.
    pub attrs_xxh3: u64,
    /// xxh3-64 of the header's own bytes: the store's identity, since it covers
    /// every other file's checksum.
    pub checksum: u64,
}

/// Bytes of `index.sum` for an index of `index_size` bytes.
pub fn index_sums_size(index_size: u64) -> u64 {
    index_size.div_ceil(INDEX_BLOCK_BYTES as u64) * 8
}

/// The checksums of each [`INDEX_BLOCK_BYTES`] block of an index, computed as
/// the index is written.
pub struct IndexSums {
    block: xxhash_rust::xxh3::Xxh3,
    filled: usize,
    sums: Vec<u8>,
}

impl Default for IndexSums {
    fn default() -> Self {
        IndexSums {
            block: xxhash_rust::xxh3::Xxh3::new(),
            filled: 0,
            sums: Vec::new(),
        }
    }
}

impl IndexSums {
    /// Adds the next bytes of the index.
    pub fn update(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            let take = bytes.len().min(INDEX_BLOCK_BYTES - self.filled);
            self.block.update(&bytes[..take]);
            self.filled += take;
            bytes = &bytes[take..];
            if self.filled == INDEX_BLOCK_BYTES {
                self.close_block();
            }
        }
    }

    fn close_block(&mut self) {
        self.sums
            .extend_from_slice(&self.block.digest().to_le_bytes());
        self.block.reset();
        self.filled = 0;
    }

    /// The bytes of `index.sum`.
    pub fn finish(mut self) -> Vec<u8> {
        if self.filled > 0 {
            self.close_block();
        }
        self.sums
    }
}

struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let s = self.buf.get(self.pos..self.pos.checked_add(n)?)?;
        self.pos += n;
        Some(s)
    }
    fn u8(&mut self) -> Option<u8> {
        self.take(1).map(|b| b[0])
    }
    fn u32(&mut self) -> Option<u32> {
        self.take(4)
            .map(|b| u32::from_le_bytes(b.try_into().unwrap_or([0; 4])))
    }
    fn u64(&mut self) -> Option<u64> {
        self.take(8)
            .map(|b| u64::from_le_bytes(b.try_into().unwrap_or([0; 8])))
    }
}

impl Header {
    /// The bytes of `header.bin`, checksum included.
    pub fn encode(&self) -> Vec<u8> {
        let s = &self.schema;
        let mut b = Vec::with_capacity(128 + 8 * (s.item_shape.len() + self.shard_sizes.len()));
        b.extend_from_slice(&MAGIC);
        b.extend_from_slice(&self.version.to_le_bytes());
        b.push(s.kind as u8);
        b.push(s.dtype as u8);
        b.push(s.codec as u8);
        // Version 3 counts data files after the version 2 fields; a count that one
        // byte cannot hold in an older version becomes 0, which decoding refuses.
        b.push(if self.version >= 3 {
            0
        } else {
            u8::try_from(s.data_shards).unwrap_or(0)
        });
        b.extend_from_slice(&(s.ndim as u32).to_le_bytes());
        b.extend_from_slice(&(s.entry_size() as u32).to_le_bytes());
        b.extend_from_slice(&self.record_count.to_le_bytes());
        b.extend_from_slice(&self.index_size.to_le_bytes());
        b.extend_from_slice(&self.index_xxh3.to_le_bytes());
        b.extend_from_slice(&self.dict_size.to_le_bytes());
        b.extend_from_slice(&self.dict_xxh3.to_le_bytes());
        if self.version >= 2 {
            b.extend_from_slice(&self.index_sums_xxh3.to_le_bytes());
            b.extend_from_slice(&self.attrs_size.to_le_bytes());
            b.extend_from_slice(&self.attrs_xxh3.to_le_bytes());
        }
        if self.version >= 3 {
            b.extend_from_slice(&s.data_shards.to_le_bytes());
            b.extend_from_slice(&[0; 4]);
        }
        for d in &s.item_shape {
            b.extend_from_slice(&d.to_le_bytes());
        }
        for z in &self.shard_sizes {
            b.extend_from_slice(&z.to_le_bytes());
        }
        let sum = xxh3_64(&b);
        b.extend_from_slice(&sum.to_le_bytes());
        b
    }

    /// Parses and checks `header.bin`; `path` only names the file in errors.
    pub fn decode(buf: &[u8], path: &Path) -> Result<Header> {
        let bad = |msg: &str| Error::corrupt(path, msg.to_string());
        if buf.len() < MAGIC.len() || buf[..MAGIC.len()] != MAGIC {
            return Err(bad("not a zrecord header (bad magic)"));
        }
        if buf.len() < 8 + 8 {
            return Err(bad("header is truncated"));
        }
        let (body, tail) = buf.split_at(buf.len() - 8);
        let mut c = Cursor { buf: body, pos: 8 };
        let short = || bad("header is truncated");
        let version = c.u32().ok_or_else(short)?;
        if !(OLDEST_FORMAT_VERSION..=NEWEST_FORMAT_VERSION).contains(&version) {
            return Err(bad(&format!(
                "format version {version} is not supported (this reader reads versions \
                 {OLDEST_FORMAT_VERSION} to {NEWEST_FORMAT_VERSION})"
            )));
        }
        let stored_sum = u64::from_le_bytes(tail.try_into().map_err(|_| short())?);
        if xxh3_64(body) != stored_sum {
            return Err(bad("header checksum mismatch (the header is damaged)"));
        }
        let kind = match c.u8().ok_or_else(short)? {
            0 => Kind::Dense,
            1 => Kind::Ragged,
            k => return Err(bad(&format!("unknown store kind {k}"))),
        };
        let dtype_code = c.u8().ok_or_else(short)?;
        let dtype = DType::from_code(dtype_code)
            .ok_or_else(|| bad(&format!("unknown dtype code {dtype_code}")))?;
        let codec_code = c.u8().ok_or_else(short)?;
        let codec = Codec::from_code(codec_code)
            .ok_or_else(|| bad(&format!("unknown codec code {codec_code}")))?;
        let short_count = c.u8().ok_or_else(short)?;
        let ndim = c.u32().ok_or_else(short)? as usize;
        let entry_size = c.u32().ok_or_else(short)? as usize;
        let record_count = c.u64().ok_or_else(short)?;
        let index_size = c.u64().ok_or_else(short)?;
        let index_xxh3 = c.u64().ok_or_else(short)?;
        let dict_size = c.u64().ok_or_else(short)?;
        let dict_xxh3 = c.u64().ok_or_else(short)?;
        let (index_sums_xxh3, attrs_size, attrs_xxh3) = if version >= 2 {
            (
                c.u64().ok_or_else(short)?,
                c.u64().ok_or_else(short)?,
                c.u64().ok_or_else(short)?,
            )
        } else {
            (0, 0, 0)
        };
        let data_shards = if version >= 3 {
            if short_count != 0 {
                return Err(bad("the one-byte data file count must be 0 in version 3"));
            }
            let n = c.u32().ok_or_else(short)?;
            if c.u32().ok_or_else(short)? != 0 {
                return Err(bad("the bytes after the data file count must be zero"));
            }
            n
        } else {
            short_count as u32
        };
        if data_shards > MAX_DATA_FILES {
            return Err(bad(&format!(
                "{data_shards} data files exceed the {MAX_DATA_FILES}-file limit"
            )));
        }
        if attrs_size > MAX_ATTRS_BYTES {
            return Err(bad(&format!(
                "attributes of {attrs_size} bytes exceed the {MAX_ATTRS_BYTES}-byte limit"
            )));
        }
        if ndim > MAX_NDIM {
            return Err(bad(&format!("ndim {ndim} is out of range")));
        }
        let shape_len = if kind == Kind::Dense { ndim } else { 0 };
        let item_shape = (0..shape_len)
            .map(|_| c.u64().ok_or_else(short))
            .collect::<Result<Vec<_>>>()?;
        let shard_sizes = (0..data_shards)
            .map(|_| c.u64().ok_or_else(short))
            .collect::<Result<Vec<_>>>()?;
        if c.pos != body.len() {
            return Err(bad("header has trailing bytes"));
        }
        let schema = Schema {
            kind,
            dtype,
            item_shape,
            ndim,
            codec,
            data_shards,
        };
        schema.validate().map_err(|e| bad(&e.to_string()))?;
        if entry_size != schema.entry_size() {
            return Err(bad("index entry size disagrees with the schema"));
        }
        if Some(index_size) != record_count.checked_mul(entry_size as u64) {
            return Err(bad("index size disagrees with the record count"));
        }
        if (codec == Codec::ZstdDict) != (dict_size > 0) {
            return Err(bad("dictionary presence disagrees with the codec"));
        }
        Ok(Header {
            schema,
            record_count,
            index_size,
            index_xxh3,
            dict_size,
            dict_xxh3,
            shard_sizes,
            version,
            index_sums_xxh3,
            attrs_size,
            attrs_xxh3,
            checksum: stored_sum,
        })
    }
}

/// One record's index entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry {
    /// Where the stored bytes start in their data file.
    pub offset: u64,
    /// Stored (possibly compressed) bytes.
    pub stored_len: u32,
    /// The data file holding the record.
    pub file: u32,
    /// xxh3-64 of the stored bytes.
    pub checksum: u64,
}

impl Entry {
    /// Appends the fixed part of the entry's bytes to `out`.
    pub fn encode_into(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.offset.to_le_bytes());
        out.extend_from_slice(&self.stored_len.to_le_bytes());
        out.extend_from_slice(&self.file.to_le_bytes());
        out.extend_from_slice(&self.checksum.to_le_bytes());
    }

    /// `raw` must hold at least `ENTRY_FIXED` bytes.
    #[inline]
    pub fn decode(raw: &[u8]) -> Entry {
        Entry {
            offset: le_u64(raw, 0),
            stored_len: u32::from_le_bytes([raw[8], raw[9], raw[10], raw[11]]),
            file: u32::from_le_bytes([raw[12], raw[13], raw[14], raw[15]]),
            checksum: le_u64(raw, 16),
        }
    }
}

#[inline]
pub fn le_u64(raw: &[u8], at: usize) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&raw[at..at + 8]);
    u64::from_le_bytes(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header() -> Header {
        Header {
            schema: Schema::dense(DType::F32, &[3, 4], Codec::Zstd, 4).unwrap(),
            record_count: 10,
            index_size: 240,
            index_xxh3: 7,
            dict_size: 0,
            dict_xxh3: 0,
            shard_sizes: vec![1, 2, 3, 4],
            version: FORMAT_VERSION,
            index_sums_xxh3: 9,
            attrs_size: 0,
            attrs_xxh3: 0,
            checksum: 0,
        }
    }

    #[test]
    fn header_round_trips() {
        let h = header();
        let b = h.encode();
        let back = Header::decode(&b, Path::new("h")).unwrap();
        assert_eq!(back.checksum, xxh3_64(&b[..b.len() - 8]));
        assert_eq!(
            Header {
                checksum: 0,
                ..back
            },
            h
        );
    }

    #[test]
    fn every_flipped_byte_is_caught() {
        let b = header().encode();
        for i in 0..b.len() {
            let mut c = b.clone();
            c[i] ^= 0x40;
            assert!(
                matches!(
                    Header::decode(&c, Path::new("h")),
                    Err(Error::Corrupt { .. })
                ),
                "byte {i}"
            );
        }
        for n in 0..b.len() {
            assert!(
                Header::decode(&b[..n], Path::new("h")).is_err(),
                "length {n}"
            );
        }
    }

    #[test]
    fn entry_round_trips() {
        let e = Entry {
            offset: 1 << 40,
            stored_len: 77,
            file: 70_000,
            checksum: u64::MAX - 3,
        };
        let mut v = Vec::new();
        e.encode_into(&mut v);
        assert_eq!(v.len(), ENTRY_FIXED);
        assert_eq!(Entry::decode(&v), e);
    }

    #[test]
    fn schema_rules() {
        assert!(Schema::ragged(DType::I32, 0, Codec::Raw, 4).is_err());
        assert!(Schema::dense(DType::U8, &[1 << 31, 2], Codec::Raw, 1).is_err());
        assert!(Schema::dense(DType::U8, &[], Codec::Raw, 0).is_err());
        assert_eq!(
            Schema::dense(DType::F64, &[], Codec::Raw, 1)
                .unwrap()
                .record_bytes(),
            Some(8)
        );
    }
}
