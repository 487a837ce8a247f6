//! A checked read hashes a record's stored bytes unless their source says
//! those very bytes matched before ([`PayloadSource::checked_before`]), and
//! tells the source of each record whose bytes matched.

use std::fs;
use std::ops::Range;
use std::path::Path;
use std::sync::Mutex;

use zrecord::{
    data_file, Codec, DType, Error, Metadata, Parts, PayloadSource, ReadOptions, Schema,
    Sequential, Source, Store, Writer,
};

/// A store's data files in memory, with the records it says passed before
/// and those the reads said passed.
struct Remembering {
    files: Vec<Vec<u8>>,
    before: Vec<u64>,
    passed: Mutex<Vec<(u64, usize)>>,
}

impl PayloadSource for Remembering {
    fn bytes(&self, file: usize, range: Range<u64>) -> Option<&[u8]> {
        self.files
            .get(file)?
            .get(range.start as usize..range.end as usize)
    }

    fn checked_before(&self, pos: u64, _len: usize) -> bool {
        self.before.contains(&pos)
    }

    fn passed_check(&self, pos: u64, len: usize) {
        self.passed.lock().unwrap().push((pos, len));
    }
}

/// A Dense `u32` (2,) store of 10 records, record `i` holding `[i, 100 + i]`,
/// opened from its files with `checked`, and its data files with record 7's
/// first byte flipped.
fn open(dir: &Path, codec: Codec, checked: bool) -> (Metadata<Vec<u8>>, Remembering) {
    let dir = &dir.join("s");
    let schema = Schema::dense(DType::U32, &[2], codec, 1).unwrap();
    let mut w = Writer::create(dir, schema, None).unwrap();
    let data: Vec<u8> = (0..10u32)
        .flat_map(|i| [i, 100 + i])
        .flat_map(u32::to_le_bytes)
        .collect();
    w.append_dense(10, &data, Source::Memory, &Sequential)
        .unwrap();
    w.finish().unwrap();
    let shards = Store::open(dir).unwrap().header().shard_sizes.len();
    let parts = Parts {
        index: fs::read(dir.join(zrecord::INDEX_FILE)).unwrap(),
        index_sums: fs::read(dir.join(zrecord::INDEX_SUMS_FILE)).unwrap(),
        dict: None,
        attrs: None,
    };
    let header = fs::read(dir.join(zrecord::HEADER_FILE)).unwrap();
    let meta = Metadata::from_parts(dir, &header, parts, ReadOptions { checked }).unwrap();
    let e = meta.entries(&[7]).unwrap()[0];
    let mut files: Vec<Vec<u8>> = (0..shards)
        .map(|s| fs::read(dir.join(data_file(s))).unwrap())
        .collect();
    files[e.file as usize][e.offset as usize] ^= 0xff;
    let src = Remembering {
        files,
        before: Vec::new(),
        passed: Mutex::new(Vec::new()),
    };
    (meta, src)
}

fn gather(m: &Metadata<Vec<u8>>, idx: &[u64], src: &Remembering) -> zrecord::Result<Vec<u32>> {
    let plan = m.plan(idx, src, &Sequential)?;
    let mut out = vec![0u8; plan.output_len()];
    m.gather(&plan, &mut out, &Sequential, src)?;
    Ok(out
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
        .collect())
}

#[test]
fn records_the_source_vouches_for_are_not_hashed_again() {
    for codec in [Codec::Raw, Codec::Zstd] {
        let dir = tempfile::tempdir().unwrap();
        let (meta, mut src) = open(dir.path(), codec, true);
        assert_eq!(gather(&meta, &[3, 5], &src).unwrap(), [3, 103, 5, 105]);
        let stored = meta.entries(&[3, 5]).unwrap();
        assert_eq!(
            *src.passed.lock().unwrap(),
            [
                (3, stored[0].stored_len as usize),
                (5, stored[1].stored_len as usize)
            ],
            "{codec:?}"
        );
        // Record 7's bytes are damaged: hashed, they fail, and are not passed.
        src.passed.lock().unwrap().clear();
        match gather(&meta, &[7], &src) {
            Err(Error::Corrupt { msg, .. }) => assert!(msg.contains("checksum mismatch"), "{msg}"),
            other => panic!("{codec:?}: {other:?}"),
        }
        assert!(src.passed.lock().unwrap().is_empty());
        // Vouched for, they are taken as they are: raw, the flipped byte
        // comes back (zstd fails to decode it, or decodes another value).
        src.before = vec![7];
        let got = gather(&meta, &[7], &src);
        if codec == Codec::Raw {
            assert_eq!(got.unwrap(), [7 ^ 0xff, 107]);
        } else {
            assert_ne!(got.ok(), Some(vec![7, 107]));
        }
        assert!(src.passed.lock().unwrap().is_empty());
    }
}

#[test]
fn an_unchecked_read_neither_hashes_nor_passes() {
    let dir = tempfile::tempdir().unwrap();
    let (meta, src) = open(dir.path(), Codec::Raw, false);
    assert_eq!(
        gather(&meta, &[7, 1], &src).unwrap(),
        [7 ^ 0xff, 107, 1, 101]
    );
    assert!(src.passed.lock().unwrap().is_empty());
}
