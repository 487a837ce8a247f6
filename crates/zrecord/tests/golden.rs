//! Golden bytes: the exact files the writer produces for fixed input. Any change
//! to the bytes on disk, intended or not, fails here; an intended one is a format
//! change and must come with a new format version and a `docs/FORMAT.md` update.
//!
//! The expected files live in `tests/golden/<case>/`. To write them anew after a
//! deliberate format change, run `ZRECORD_BLESS=1 cargo test -p zrecord --test golden`
//! and review the diff.

use std::fs;
use std::path::{Path, PathBuf};

use zrecord::{
    Codec, DType, Header, RaggedView, Schema, Sequential, Source, Store, Writer, FORMAT_VERSION,
    WIDE_FORMAT_VERSION,
};

fn golden_dir(case: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(case)
}

/// Fixed, varied input: every byte value appears, and runs compress.
fn dense_input() -> Vec<u8> {
    (0..5 * 12)
        .map(|i: u32| ((i * 37) % 251) as u8 ^ if i % 12 < 4 { 0 } else { 0x55 })
        .collect()
}

fn write_dense(dest: &Path, codec: Codec, dict: Option<&[u8]>) {
    let schema = Schema::dense(DType::U8, &[3, 4], codec, 2).unwrap();
    let mut w = Writer::create(dest, schema, dict).unwrap();
    let data = dense_input();
    w.append_dense(5, &data, Source::Memory, &Sequential)
        .unwrap();
    w.finish().unwrap();
}

fn write_ragged(dest: &Path) {
    let schema = Schema::ragged(DType::I16, 2, Codec::Raw, 3).unwrap();
    let mut w = Writer::create(dest, schema, None).unwrap();
    let values: Vec<u8> = (0i16..14)
        .flat_map(|v| (v * 1000 - 7000).to_le_bytes())
        .collect();
    let view = RaggedView {
        values: &values,
        cu_seqlens: &[0, 6, 6, 8, 14],
        shapes: &[2, 3, 0, 5, 1, 2, 3, 2],
    };
    w.append_ragged(&view, Source::Memory, &Sequential).unwrap();
    w.set_attrs(br#"{"source":"golden"}"#).unwrap();
    w.finish().unwrap();
}

fn files(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out: Vec<_> = fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            (
                e.file_name().to_string_lossy().into_owned(),
                fs::read(e.path()).unwrap(),
            )
        })
        .collect();
    out.sort();
    out
}

fn check(case: &str, write: impl FnOnce(&Path)) {
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");
    write(&store);
    let got = files(&store);
    let dir = golden_dir(case);
    if std::env::var_os("ZRECORD_BLESS").is_some() {
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        for (name, bytes) in &got {
            fs::write(dir.join(name), bytes).unwrap();
        }
    }
    let want = files(&dir);
    let names = |v: &[(String, Vec<u8>)]| v.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>();
    assert_eq!(
        names(&got),
        names(&want),
        "{case}: the store's files changed"
    );
    for ((name, g), (_, w)) in got.iter().zip(&want) {
        let first = g.iter().zip(w).position(|(a, b)| a != b);
        assert!(
            g == w,
            "{case}/{name}: bytes differ from the golden file (lengths {} and {}, first \
             difference at {first:?})",
            g.len(),
            w.len()
        );
    }
}

#[test]
fn dense_raw_bytes_are_pinned() {
    check("dense-raw", |p| write_dense(p, Codec::Raw, None));
}

#[test]
fn dense_zstd_bytes_are_pinned() {
    check("dense-zstd", |p| write_dense(p, Codec::Zstd, None));
}

#[test]
fn dense_zstd_dict_bytes_are_pinned() {
    let dict: Vec<u8> = (0..256u32).map(|i| (i * 7 % 256) as u8).collect();
    check("dense-zstd-dict", |p| {
        write_dense(p, Codec::ZstdDict, Some(&dict))
    });
}

#[test]
fn ragged_raw_bytes_with_attributes_are_pinned() {
    check("ragged-raw-attrs", write_ragged);
}

/// The header fields of a golden store, spelled out: the table in
/// `docs/FORMAT.md` must describe these same bytes.
#[test]
fn the_golden_header_reads_as_documented() {
    let raw = fs::read(golden_dir("ragged-raw-attrs").join("header.bin")).unwrap();
    assert_eq!(&raw[0..8], b"ZRECORD\0");
    let u32_at = |at: usize| u32::from_le_bytes(raw[at..at + 4].try_into().unwrap());
    let u64_at = |at: usize| u64::from_le_bytes(raw[at..at + 8].try_into().unwrap());
    assert_eq!(u32_at(8), FORMAT_VERSION);
    assert_eq!(&raw[12..16], &[1, DType::I16 as u8, 0, 3]); // Ragged, int16, raw, 3 files
    assert_eq!(u32_at(16), 2); // ndim
    assert_eq!(u32_at(20), 24 + 16); // entry size
    assert_eq!(u64_at(24), 4); // records
    assert_eq!(u64_at(32), 4 * 40); // index bytes
    assert_eq!(u64_at(48), 0); // no dictionary
    assert_eq!(u64_at(72), br#"{"source":"golden"}"#.len() as u64);
    // Ragged has no item shape: the three data file sizes follow, then the sum.
    assert_eq!(raw.len(), 88 + 3 * 8 + 8);
    let header = Header::decode(&raw, Path::new("header.bin")).unwrap();
    assert_eq!(header.shard_sizes.iter().sum::<u64>(), 14 * 2);
    assert_eq!(
        header.checksum,
        xxhash_rust::xxh3::xxh3_64(&raw[..raw.len() - 8])
    );
}

#[test]
fn golden_stores_read_back_their_input() {
    let tmp = tempfile::tempdir().unwrap();
    let dense = tmp.path().join("dense");
    for (k, (name, bytes)) in files(&golden_dir("dense-zstd")).into_iter().enumerate() {
        if k == 0 {
            fs::create_dir(&dense).unwrap();
        }
        fs::write(dense.join(name), bytes).unwrap();
    }
    let store = Store::open(&dense).unwrap();
    let mut out = vec![0u8; 5 * 12];
    store
        .gather_dense(&[0, 1, 2, 3, 4], &mut out, &Sequential)
        .unwrap();
    assert_eq!(out, dense_input());
    store.verify(&Sequential).unwrap();
}

/// A store in format version 1 (no index block checksums, no attributes), as the
/// first writer produced it: it keeps opening, reading and verifying.
#[test]
fn version_1_stores_still_open() {
    let store = Store::open(&golden_dir("v1-dense-zstd")).unwrap();
    assert_eq!(store.header().version, 1);
    assert_eq!(store.attrs(), None);
    let mut out = vec![0u8; 5 * 12];
    store
        .gather_dense(&[0, 1, 2, 3, 4], &mut out, &Sequential)
        .unwrap();
    assert_eq!(out, dense_input());
    store.verify(&Sequential).unwrap();
}

/// Concatenation rewrites nothing but each index entry's data file number: two
/// copies of a golden store give its index twice, the second copy's file numbers
/// moved by the first's file count, and its data files twice, byte for byte.
#[test]
fn concat_moves_only_file_numbers() {
    let tmp = tempfile::tempdir().unwrap();
    let src = golden_dir("dense-zstd");
    let dest = tmp.path().join("twice");
    let report = zrecord::concat(
        &[src.clone(), src.clone()],
        &dest,
        &zrecord::ConcatOptions::default(),
        &Sequential,
        &mut |_, _| Ok(()),
    )
    .unwrap();
    assert_eq!((report.records, report.data_files), (10, 4));
    let index = fs::read(src.join("index.bin")).unwrap();
    let mut moved = index.clone();
    for entry in moved.chunks_mut(24) {
        entry[12] += 2;
    }
    let got = fs::read(dest.join("index.bin")).unwrap();
    assert_eq!(got, [index, moved].concat());
    for k in 0..4 {
        let file = zrecord::data_file(k);
        let theirs = zrecord::data_file(k % 2);
        assert_eq!(
            fs::read(dest.join(file)).unwrap(),
            fs::read(src.join(theirs)).unwrap()
        );
    }
    let store = Store::open(&dest).unwrap();
    let source = Store::open(&src).unwrap();
    let sizes = &source.header().shard_sizes;
    assert_eq!(
        store.header().shard_sizes,
        [&sizes[..], &sizes[..]].concat()
    );
    assert_eq!(store.header().version, FORMAT_VERSION);
    let mut out = vec![0u8; 10 * 12];
    store
        .gather_dense(&(0..10).collect::<Vec<_>>(), &mut out, &Sequential)
        .unwrap();
    assert_eq!(out, [dense_input(), dense_input()].concat());
    store.verify(&Sequential).unwrap();
}

/// A version 1 store concatenates with a current one; the result is current.
#[test]
fn concat_takes_version_1_stores() {
    let tmp = tempfile::tempdir().unwrap();
    let dest = tmp.path().join("mixed");
    let sources = [golden_dir("v1-dense-zstd"), golden_dir("dense-zstd")];
    zrecord::concat(
        &sources,
        &dest,
        &zrecord::ConcatOptions::default(),
        &Sequential,
        &mut |_, _| Ok(()),
    )
    .unwrap();
    let store = Store::open(&dest).unwrap();
    assert_eq!((store.header().version, store.len()), (FORMAT_VERSION, 10));
    let mut out = vec![0u8; 10 * 12];
    store
        .gather_dense(&(0..10).collect::<Vec<_>>(), &mut out, &Sequential)
        .unwrap();
    assert_eq!(out, [dense_input(), dense_input()].concat());
    store.verify(&Sequential).unwrap();
}

/// More than 255 data files: the result of concatenating 129 copies of a golden
/// store (258 data files) is in format version 3. Its small files are pinned;
/// its data files are the golden store's, byte for byte.
#[test]
fn version_3_bytes_are_pinned() {
    let tmp = tempfile::tempdir().unwrap();
    let src = golden_dir("dense-zstd");
    let dest = tmp.path().join("wide");
    let report = zrecord::concat(
        &vec![src.clone(); 129],
        &dest,
        &zrecord::ConcatOptions::default(),
        &Sequential,
        &mut |_, _| Ok(()),
    )
    .unwrap();
    assert_eq!((report.records, report.data_files), (5 * 129, 258));
    let small: Vec<_> = files(&dest)
        .into_iter()
        .filter(|(name, _)| !name.starts_with("data-"))
        .collect();
    let dir = golden_dir("v3-concat-dense-zstd");
    if std::env::var_os("ZRECORD_BLESS").is_some() {
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        for (name, bytes) in &small {
            fs::write(dir.join(name), bytes).unwrap();
        }
    }
    assert_eq!(
        small,
        files(&dir),
        "the version 3 store's small files changed"
    );
    for k in 0..258 {
        assert_eq!(
            fs::read(dest.join(zrecord::data_file(k))).unwrap(),
            fs::read(src.join(zrecord::data_file(k % 2))).unwrap()
        );
    }
    // The header as documented: the one-byte count is 0, the u32 count follows
    // the version 2 fields, then 4 zero bytes, the item shape and the file sizes.
    let raw = &small.iter().find(|(n, _)| n == "header.bin").unwrap().1;
    let u32_at = |at: usize| u32::from_le_bytes(raw[at..at + 4].try_into().unwrap());
    let u64_at = |at: usize| u64::from_le_bytes(raw[at..at + 8].try_into().unwrap());
    assert_eq!(u32_at(8), WIDE_FORMAT_VERSION);
    assert_eq!(&raw[12..16], &[0, DType::U8 as u8, 1, 0]); // Dense, uint8, zstd, 0
    assert_eq!(u64_at(24), 5 * 129);
    assert_eq!((u32_at(88), u32_at(92)), (258, 0));
    assert_eq!((u64_at(96), u64_at(104)), (3, 4)); // item shape
    assert_eq!(raw.len(), 112 + 258 * 8 + 8);
    // An entry's data file number is a u32 at byte 12: the last record's is 257.
    let index = &small.iter().find(|(n, _)| n == "index.bin").unwrap().1;
    let last = &index[index.len() - 24..];
    assert_eq!(u32::from_le_bytes(last[12..16].try_into().unwrap()), 257);

    let store = Store::open(&dest).unwrap();
    assert_eq!(store.header().version, WIDE_FORMAT_VERSION);
    let n = 5 * 129;
    let mut out = vec![0u8; n * 12];
    store
        .gather_dense(&(0..n as u64).collect::<Vec<_>>(), &mut out, &Sequential)
        .unwrap();
    assert_eq!(out, dense_input().repeat(129));
    store.verify(&Sequential).unwrap();
}
