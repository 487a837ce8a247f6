//! Index-only record sizes, verification in steps, and codec size estimates.

use std::fs;

use zrecord::{
    encoded_size, Codec, DType, Error, RaggedView, Schema, Sequential, Source, Store, Writer,
};

fn ragged_store(dir: &std::path::Path, codec: Codec) -> std::path::PathBuf {
    let dest = dir.join("r");
    let schema = Schema::ragged(DType::I32, 1, codec, 2).unwrap();
    let mut w = Writer::create(&dest, schema, None).unwrap();
    let lengths = [3usize, 0, 5, 1];
    let values: Vec<u8> = (0..9i32).flat_map(|v| v.to_le_bytes()).collect();
    let view = RaggedView {
        values: &values,
        cu_seqlens: &[0, 3, 3, 8, 9],
        shapes: &lengths.map(|n| n as u64),
    };
    w.append_ragged(&view, Source::Memory, &Sequential).unwrap();
    w.finish().unwrap();
    dest
}

#[test]
fn record_sizes_come_from_the_index() {
    let tmp = tempfile::tempdir().unwrap();
    let store = Store::open(&ragged_store(tmp.path(), Codec::Raw)).unwrap();
    let mut seen = Vec::new();
    store.record_sizes(0..4, |l, s| seen.push((l, s))).unwrap();
    assert_eq!(seen, [(12, 12), (0, 0), (20, 20), (4, 4)]);
    seen.clear();
    store.record_sizes(2..3, |l, s| seen.push((l, s))).unwrap();
    assert_eq!(seen, [(20, 20)]);
    // A start past the end, as a caller's (start, stop) pair may give.
    let (start, stop) = (3, 2);
    for bad in [start..stop, 0..5] {
        let err = store.record_sizes(bad.clone(), |_, _| {}).unwrap_err();
        assert!(matches!(err, Error::InvalidArgument(_)), "{bad:?}: {err}");
    }
}

#[test]
fn verify_records_checks_only_its_range() {
    let tmp = tempfile::tempdir().unwrap();
    let path = ragged_store(tmp.path(), Codec::Raw);
    // Rotation puts record 0 first in data-000.bin; damage its first byte.
    let data = path.join("data-000.bin");
    let mut raw = fs::read(&data).unwrap();
    raw[0] ^= 1;
    fs::write(&data, raw).unwrap();
    let store = Store::open(&path).unwrap();
    store.verify_files().unwrap();
    store.verify_records(1..4, &Sequential).unwrap();
    let err = store.verify_records(0..1, &Sequential).unwrap_err();
    assert!(
        matches!(
            err,
            Error::Corrupt {
                record: Some(0),
                ..
            }
        ),
        "{err}"
    );
    assert!(store.verify(&Sequential).is_err());
}

#[test]
fn encoded_size_is_what_the_codec_stores() {
    let data = vec![7u8; 4096];
    assert_eq!(
        encoded_size(Codec::Raw, None, &data, &[1000, 3096]).unwrap(),
        4096
    );
    let z = encoded_size(Codec::Zstd, None, &data, &[1000, 3096]).unwrap();
    assert!(z > 0 && z < 100, "{z}");
    let tmp = tempfile::tempdir().unwrap();
    let store = Store::open(&ragged_store(tmp.path(), Codec::Zstd)).unwrap();
    let mut stored = 0;
    store.record_sizes(0..4, |_, s| stored += s).unwrap();
    let values: Vec<u8> = (0..9i32).flat_map(|v| v.to_le_bytes()).collect();
    assert_eq!(
        encoded_size(Codec::Zstd, None, &values, &[12, 0, 20, 4]).unwrap(),
        stored
    );
    let err = encoded_size(Codec::Raw, None, &data, &[1]).unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(_)));
}

#[test]
fn record_lengths_are_the_first_axis_of_each_indexed_shape() {
    let tmp = tempfile::tempdir().unwrap();
    let store = Store::open(&ragged_store(tmp.path(), Codec::Zstd)).unwrap();
    let mut seen = Vec::new();
    store.record_lengths(0..4, |l| seen.push(l)).unwrap();
    assert_eq!(seen, [3, 0, 5, 1]);
    seen.clear();
    store.record_lengths(1..3, |l| seen.push(l)).unwrap();
    assert_eq!(seen, [0, 5]);
    let err = store.record_lengths(2..5, |_| {}).unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(_)), "{err}");

    // Two-dimensional records: the length is the first dimension only.
    let dest = tmp.path().join("two");
    let schema = Schema::ragged(DType::U8, 2, Codec::Raw, 1).unwrap();
    let mut w = Writer::create(&dest, schema, None).unwrap();
    let values = vec![1u8; 2 * 3 + 4 * 3];
    let view = RaggedView {
        values: &values,
        cu_seqlens: &[0, 6, 18],
        shapes: &[2, 3, 4, 3],
    };
    w.append_ragged(&view, Source::Memory, &Sequential).unwrap();
    w.finish().unwrap();
    let store = Store::open(&dest).unwrap();
    seen.clear();
    store.record_lengths(0..2, |l| seen.push(l)).unwrap();
    assert_eq!(seen, [2, 4]);

    let dense = tmp.path().join("dense");
    let schema = Schema::dense(DType::U8, &[2], Codec::Raw, 1).unwrap();
    let mut w = Writer::create(&dense, schema, None).unwrap();
    w.append_dense(2, &[0u8; 4], Source::Memory, &Sequential)
        .unwrap();
    w.finish().unwrap();
    let err = Store::open(&dense)
        .unwrap()
        .record_lengths(0..2, |_| {})
        .unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(_)), "{err}");
}
