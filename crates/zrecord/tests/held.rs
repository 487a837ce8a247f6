//! A store opened with no part of its index (`NotFetched`), read through views
//! over index blocks checked as they came in: the same records as the local
//! reader, only the blocks a read touches asked for, and a damaged, replaced,
//! short or foreign block refused with the index and the block named.

use std::fs;
use std::ops::Range;
use std::path::Path;

use zrecord::{
    data_file, Codec, DType, Error, Metadata, NotFetched, Parts, PayloadSource, ReadOptions,
    Schema, Sequential, Source, Store, Writer, INDEX_BLOCK_BYTES,
};

struct Files(Vec<Vec<u8>>);

impl PayloadSource for Files {
    fn bytes(&self, file: usize, range: Range<u64>) -> Option<&[u8]> {
        self.0
            .get(file)?
            .get(range.start as usize..range.end as usize)
    }
}

/// Records a Dense `u32` store of `n` records: record `i` holds `i * 3 + 1`.
fn write(dir: &Path, n: u32, codec: Codec) {
    let dir = &dir.join("s");
    let schema = Schema::dense(DType::U32, &[], codec, 2).unwrap();
    let mut w = Writer::create(dir, schema, None).unwrap();
    let data: Vec<u8> = (0..n).flat_map(|i| (i * 3 + 1).to_le_bytes()).collect();
    w.append_dense(n as usize, &data, Source::Memory, &Sequential)
        .unwrap();
    w.finish().unwrap();
}

fn open_lazy(dir: &Path) -> (Metadata<NotFetched>, Vec<u8>, Files) {
    let dir = &dir.join("s");
    let header = fs::read(dir.join(zrecord::HEADER_FILE)).unwrap();
    let index = fs::read(dir.join(zrecord::INDEX_FILE)).unwrap();
    let h = Store::open(dir).unwrap().header().clone();
    let parts = Parts {
        index: NotFetched {
            len: index.len() as u64,
        },
        index_sums: fs::read(dir.join(zrecord::INDEX_SUMS_FILE)).unwrap(),
        dict: None,
        attrs: None,
    };
    let files = (0..h.shard_sizes.len())
        .map(|s| fs::read(dir.join(data_file(s))).unwrap())
        .collect();
    let name = Path::new("http://127.0.0.1:1/store");
    let meta = Metadata::from_parts(name, &header, parts, ReadOptions { checked: true }).unwrap();
    (meta, index, Files(files))
}

fn gather<I: zrecord::IndexSource>(m: &Metadata<I>, idx: &[u64], files: &Files) -> Vec<u32> {
    let plan = m.plan(idx, files, &Sequential).unwrap();
    let mut out = vec![0u8; plan.output_len()];
    m.gather(&plan, &mut out, &Sequential, files).unwrap();
    out.chunks_exact(4)
        .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

fn corrupt_msg(e: Error) -> String {
    match e {
        Error::Corrupt { path, msg, .. } => format!("{}: {msg}", path.display()),
        other => panic!("not a corruption error: {other}"),
    }
}

#[test]
fn views_over_the_touched_blocks_read_what_the_local_store_reads() {
    for codec in [Codec::Raw, Codec::Zstd] {
        let dir = tempfile::tempdir().unwrap();
        // 24-byte entries: 10 000 of them span four blocks, and entries 2730
        // and 5461 cross a block boundary.
        write(dir.path(), 10_000, codec);
        let (meta, index, files) = open_lazy(dir.path());
        assert_eq!(meta.index_block_count(), 4);
        let idx = [2730u64, 9_999, 5, 5461, 5];
        let blocks = meta.index_blocks(&idx).unwrap();
        assert_eq!(blocks, vec![0, 1, 2, 3]);
        assert_eq!(meta.index_blocks(&[0, 1, 2]).unwrap(), vec![0]);
        assert_eq!(meta.index_blocks(&[2731]).unwrap(), vec![1]);
        assert_eq!(meta.index_blocks_in(&(2700..2800)).unwrap(), 0..2);
        assert_eq!(meta.index_blocks_in(&(0..0)).unwrap(), 0..0);
        assert_eq!(
            meta.index_block_range(3),
            3 * INDEX_BLOCK_BYTES as u64..240_000
        );
        let checked: Vec<_> = blocks
            .iter()
            .map(|&b| {
                let r = meta.index_block_range(b);
                meta.check_index_block(b, index[r.start as usize..r.end as usize].to_vec())
                    .unwrap()
            })
            .collect();
        let view = meta.with_blocks(checked).unwrap();
        let got = gather(&view, &idx, &files);
        assert_eq!(
            got,
            idx.iter().map(|&i| i as u32 * 3 + 1).collect::<Vec<_>>()
        );
        let mut sizes = Vec::new();
        view.record_sizes(2729..2732, |l, _| sizes.push(l)).unwrap();
        assert_eq!(sizes, vec![4, 4, 4]);
    }
}

#[test]
fn a_view_without_a_block_is_an_internal_error_and_the_bare_store_reads_nothing() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), 10_000, Codec::Raw);
    let (meta, index, files) = open_lazy(dir.path());
    let r = meta.index_block_range(0);
    let b0 = meta
        .check_index_block(0, index[r.start as usize..r.end as usize].to_vec())
        .unwrap();
    let view = meta.with_blocks([b0]).unwrap();
    assert_eq!(gather(&view, &[7], &files), vec![22]);
    // Block 1 is not held: no entry, not a wrong one.
    assert!(matches!(view.entries(&[3000]), Err(Error::Internal(_))));
    let plan = view.plan(&[3000], &files, &Sequential).unwrap();
    let mut out = vec![0u8; plan.output_len()];
    let err = view
        .gather(&plan, &mut out, &Sequential, &files)
        .unwrap_err();
    assert!(matches!(err, Error::Internal(_)), "{err}");
    // The entry across the edge of block 0 needs block 1 too.
    assert!(matches!(view.entries(&[2730]), Err(Error::Internal(_))));
    assert!(matches!(meta.entries(&[0]), Err(Error::Internal(_))));
    assert!(matches!(
        meta.entries(&[10_000]),
        Err(Error::OutOfRange { .. })
    ));
    assert!(matches!(
        meta.index_blocks(&[10_000]),
        Err(Error::OutOfRange { .. })
    ));
}

#[test]
fn damaged_replaced_short_and_foreign_blocks_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), 10_000, Codec::Zstd);
    let (meta, index, _) = open_lazy(dir.path());
    let block = |b: usize| {
        let r = meta.index_block_range(b);
        index[r.start as usize..r.end as usize].to_vec()
    };
    let mut flipped = block(2);
    flipped[100] ^= 1;
    let msg = corrupt_msg(meta.check_index_block(2, flipped).unwrap_err());
    assert_eq!(
        msg,
        "http://127.0.0.1:1/store/index.bin: index block 2 checksum mismatch (the index is damaged)"
    );
    // Another block's bytes, well-formed entries in the wrong place.
    let msg = corrupt_msg(meta.check_index_block(2, block(1)).unwrap_err());
    assert!(msg.contains("index block 2 checksum mismatch"), "{msg}");
    let msg = corrupt_msg(meta.check_index_block(3, block(2)).unwrap_err());
    assert_eq!(
        msg,
        format!(
            "http://127.0.0.1:1/store/index.bin: index block 3 is {INDEX_BLOCK_BYTES} bytes where the index holds {} (the index is damaged)",
            240_000 - 3 * INDEX_BLOCK_BYTES
        )
    );
    assert!(meta.check_index_block(4, Vec::new()).is_err());
    // A block checked for another store of the same shape is refused by a view.
    let other = tempfile::tempdir().unwrap();
    write(other.path(), 10_000, Codec::Raw);
    let (theirs, their_index, _) = open_lazy(other.path());
    let r = theirs.index_block_range(0);
    let foreign = theirs
        .check_index_block(0, their_index[r.start as usize..r.end as usize].to_vec())
        .unwrap();
    assert!(matches!(
        meta.with_blocks([foreign]),
        Err(Error::Internal(_))
    ));
}

#[test]
fn a_small_index_not_held_is_not_read_at_open() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), 100, Codec::Raw);
    let (meta, index, files) = open_lazy(dir.path());
    assert_eq!(meta.index_block_count(), 1);
    let b = meta.check_index_block(0, index.clone()).unwrap();
    let view = meta.with_blocks([b]).unwrap();
    assert_eq!(gather(&view, &[99, 0], &files), vec![298, 1]);
}

fn checked(meta: &Metadata<NotFetched>, index: &[u8], b: usize) -> zrecord::CheckedBlock<Vec<u8>> {
    let r = meta.index_block_range(b);
    meta.check_index_block(b, index[r.start as usize..r.end as usize].to_vec())
        .unwrap()
}

/// The entries a reader of the whole index finds for `idx`.
fn whole_entries(dir: &Path, idx: &[u64]) -> Vec<zrecord::Entry> {
    let dir = &dir.join("s");
    let header = fs::read(dir.join(zrecord::HEADER_FILE)).unwrap();
    let parts = Parts {
        index: fs::read(dir.join(zrecord::INDEX_FILE)).unwrap(),
        index_sums: fs::read(dir.join(zrecord::INDEX_SUMS_FILE)).unwrap(),
        dict: None,
        attrs: None,
    };
    let name = Path::new("http://127.0.0.1:1/store");
    let meta = Metadata::from_parts(name, &header, parts, ReadOptions { checked: true }).unwrap();
    meta.entries(idx).unwrap()
}

fn values_of(idx: &[u64]) -> Vec<u32> {
    idx.iter().map(|&i| i as u32 * 3 + 1).collect()
}

#[test]
fn a_held_index_joins_crossing_entries_as_blocks_come_and_drops_them_as_blocks_go() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), 10_000, Codec::Raw);
    let (meta, index, files) = open_lazy(dir.path());
    let mut held = zrecord::HeldIndex::new(&meta);
    // Entry 2730 crosses from block 0 into block 1, entry 5461 from 1 into 2.
    let idx = [2730u64, 5461, 0, 9_999];
    assert!(held.insert(checked(&meta, &index, 1)));
    assert!(!held.insert(checked(&meta, &index, 1)), "held twice");
    {
        let view = meta.over_held(&held).unwrap();
        assert_eq!(
            view.held_entries(&[2731]).unwrap().unwrap().entries,
            whole_entries(dir.path(), &[2731])
        );
        // The crossing entries need the block on their other side.
        assert_eq!(view.held_entries(&[2730]).unwrap(), None);
        assert_eq!(view.held_entries(&[5461]).unwrap(), None);
    }
    for b in [3, 0, 2] {
        assert!(held.insert(checked(&meta, &index, b)));
    }
    assert_eq!(held.len(), 4);
    {
        let view = meta.over_held(&held).unwrap();
        let entries = view.held_entries(&idx).unwrap().unwrap().entries;
        assert_eq!(entries, whole_entries(dir.path(), &idx));
        let plan = meta.plan_entries(&idx, &entries).unwrap().unwrap();
        let mut out = vec![0u8; plan.output_len()];
        meta.gather(&plan, &mut out, &Sequential, &files).unwrap();
        let got: Vec<u32> = out
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
            .collect();
        assert_eq!(got, values_of(&idx));
        assert!(matches!(
            view.held_entries(&[10_000]),
            Err(Error::OutOfRange {
                index: 10_000,
                len: 10_000
            })
        ));
    }
    // Block 1 leaves, and both entries joined across its edges with it.
    assert!(held.remove(1).is_some());
    assert!(held.remove(1).is_none());
    // The others are each found by their own number still.
    for b in [0, 2, 3] {
        assert_eq!(held.get(b).map(|k| k.block()), Some(b));
    }
    let mut numbers: Vec<usize> = held.numbers().collect();
    numbers.sort_unstable();
    assert_eq!(numbers, [0, 2, 3]);
    assert!(held.get(1).is_none() && held.get(4).is_none() && held.get(usize::MAX).is_none());
    let view = meta.over_held(&held).unwrap();
    assert_eq!(view.held_entries(&[2730]).unwrap(), None);
    assert_eq!(view.held_entries(&[5461]).unwrap(), None);
    assert_eq!(
        view.held_entries(&[0, 9_999]).unwrap().unwrap().entries,
        whole_entries(dir.path(), &[0, 9_999])
    );
}

#[test]
fn a_held_index_refuses_another_stores_blocks() {
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    write(a.path(), 10_000, Codec::Raw);
    write(b.path(), 20_000, Codec::Raw);
    let (meta_a, index_a, _) = open_lazy(a.path());
    let (meta_b, _, _) = open_lazy(b.path());
    let mut held = zrecord::HeldIndex::new(&meta_b);
    assert!(!held.insert(checked(&meta_a, &index_a, 0)));
    assert!(held.is_empty());
    assert!(meta_a.over_held(&held).is_none());
}

#[test]
fn plans_from_entries_only_for_raw_records_of_one_size_and_checked_again() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), 10_000, Codec::Raw);
    // The index is not there: a plan from entries reads none of it.
    let (meta, _, _) = open_lazy(dir.path());
    assert_eq!(meta.fixed_raw_bytes(), Some(4));
    let idx = [3u64, 7];
    let entries = whole_entries(dir.path(), &idx);
    assert_eq!(
        meta.plan_entries(&idx, &entries)
            .unwrap()
            .unwrap()
            .output_len(),
        8
    );
    let err = meta.plan_entries(&idx, &entries[..1]).err().unwrap();
    assert!(matches!(err, Error::InvalidArgument(_)), "{err}");
    // An entry pointing past its data file, or of another size, is refused.
    let mut bad = entries.clone();
    bad[1].offset = u64::MAX - 2;
    assert!(matches!(
        meta.plan_entries(&idx, &bad),
        Err(Error::Corrupt { .. })
    ));
    let mut bad = entries.clone();
    bad[0].stored_len = 8;
    assert!(matches!(
        meta.plan_entries(&idx, &bad),
        Err(Error::Corrupt { .. })
    ));
    let zdir = tempfile::tempdir().unwrap();
    write(zdir.path(), 100, Codec::Zstd);
    let (z, _, _) = open_lazy(zdir.path());
    assert_eq!(z.fixed_raw_bytes(), None);
    let ze = whole_entries(zdir.path(), &[1]);
    assert!(z.plan_entries(&[1], &ze).unwrap().is_none());
}
