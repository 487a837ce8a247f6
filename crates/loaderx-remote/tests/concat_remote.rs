//! Publishing stores from part stores in object storage (`file://` here): the
//! records in order, the data files placed by the storage, refusals before any
//! header is written.

use std::path::Path;

use loaderx_remote::{concat_remote, remove_prefix, upload, RemoteConcat};
use zrecord::{Codec, DType, Schema, Sequential, Source, Store, Writer};

fn part(dir: &Path, name: &str, first: u8, n: usize, codec: Codec) -> std::path::PathBuf {
    let path = dir.join(name);
    let schema = Schema::dense(DType::U8, &[3], codec, 1).unwrap();
    let mut w = Writer::create(&path, schema, None).unwrap();
    let data: Vec<u8> = (0..3 * n).map(|i| first.wrapping_add(i as u8)).collect();
    w.append_dense(n, &data, Source::Memory, &Sequential)
        .unwrap();
    w.finish().unwrap();
    path
}

#[test]
fn parts_in_object_storage_publish_one_store_and_refusals_write_no_header() {
    let local = tempfile::tempdir().unwrap();
    let bucket = tempfile::tempdir().unwrap();
    let root = format!("file://{}", bucket.path().display());
    let parts = format!("{root}/.parts-job");
    for (k, (first, n)) in [(0u8, 4usize), (100, 2), (200, 5)].into_iter().enumerate() {
        let p = part(local.path(), &format!("p{k}"), first, n, Codec::Zstd);
        upload(&p, &format!("{parts}/p{k}/col"), &[], false).unwrap();
    }
    let job = RemoteConcat {
        parts: (0..3).map(|k| format!("{parts}/p{k}/col")).collect(),
        dest: format!("{root}/col"),
        attrs: br#"{"column":"col"}"#.to_vec(),
    };
    assert_eq!(
        concat_remote(&root, std::slice::from_ref(&job), &[]).unwrap(),
        vec![11]
    );
    let store = Store::open(&bucket.path().join("col")).unwrap();
    assert_eq!((store.len(), store.schema().data_shards), (11, 3));
    assert_eq!(store.attrs(), Some(&br#"{"column":"col"}"#[..]));
    let mut out = vec![0u8; 33];
    store
        .gather_dense(&(0..11).collect::<Vec<_>>(), &mut out, &Sequential)
        .unwrap();
    let want: Vec<u8> = (0..12u8)
        .chain(100..106)
        .chain((200..215u32).map(|v| v as u8))
        .collect();
    assert_eq!(out, want);
    store.verify(&Sequential).unwrap();

    // A result already there, or parts of two schemas: refused, and the new
    // destination gets no header.
    assert!(concat_remote(&root, std::slice::from_ref(&job), &[]).is_err());
    let raw = part(local.path(), "raw", 0, 1, Codec::Raw);
    upload(&raw, &format!("{parts}/raw/col"), &[], false).unwrap();
    let mixed = RemoteConcat {
        parts: vec![format!("{parts}/p0/col"), format!("{parts}/raw/col")],
        dest: format!("{root}/mixed"),
        attrs: Vec::new(),
    };
    let e = concat_remote(&root, &[mixed], &[]).unwrap_err().to_string();
    assert!(e.contains("share one schema"), "{e}");
    assert!(!bucket.path().join("mixed/header.bin").exists());
    let outside = RemoteConcat {
        dest: "file:///elsewhere/col".into(),
        ..job
    };
    assert!(concat_remote(&root, &[outside], &[]).is_err());

    // Four parts of four files each: header, index, index sums, one data file.
    assert_eq!(remove_prefix(&parts, &[]).unwrap(), 4 * 4);
    assert!(!bucket.path().join(".parts-job").exists());
    assert!(Store::open(&bucket.path().join("col")).is_ok());
}
