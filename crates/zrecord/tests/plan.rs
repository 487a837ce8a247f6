//! A plan's checks of compressed records run in parts through the caller's
//! `Parallel`, and what they find does not depend on the order the parts ran in.

use std::fs;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};

use zrecord::{
    data_file, Codec, DType, Entry, Error, Parallel, Result, Schema, Sequential, Source, Store,
    Writer, ENTRY_FIXED, INDEX_FILE,
};

/// Four parts whatever the size, run last to first; counts the parts it ran.
#[derive(Default)]
struct Backwards {
    ran: AtomicUsize,
}

impl Parallel for Backwards {
    fn parts(&self, _bytes: usize, _decodes: bool) -> usize {
        4
    }

    fn run(&self, n: usize, task: &(dyn Fn(usize) -> Result<()> + Sync)) -> Result<()> {
        self.ran.fetch_add(n, Ordering::Relaxed);
        let mut first = None;
        for i in (0..n).rev() {
            if let Err(e) = task(i) {
                first = Some(e);
            }
        }
        first.map_or(Ok(()), Err)
    }
}

const RECORDS: u64 = 256;
const RECORD: usize = 64;

fn zstd_store(dir: &Path) -> Vec<u8> {
    let schema = Schema::dense(DType::U8, &[RECORD as u64], Codec::Zstd, 1).unwrap();
    let mut w = Writer::create(dir, schema, None).unwrap();
    let data: Vec<u8> = (0..RECORDS as usize * RECORD)
        .map(|i| (i * 7 % 251) as u8)
        .collect();
    w.append_dense(RECORDS as usize, &data, Source::Memory, &Sequential)
        .unwrap();
    w.finish().unwrap();
    data
}

#[test]
fn a_compressed_plan_checks_in_parts_and_gathers_what_a_sequential_one_does() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("s");
    let data = zstd_store(&dir);
    let store = Store::open(&dir).unwrap();
    let idx: Vec<u64> = (0..RECORDS).rev().collect();
    let par = Backwards::default();
    let plan = store.plan(&idx, &par).unwrap();
    assert_eq!(
        par.ran.load(Ordering::Relaxed),
        4,
        "the checks ran in four parts"
    );
    let mut got = vec![0u8; plan.output_len()];
    store.gather(&plan, &mut got, &Sequential).unwrap();
    let want: Vec<u8> = idx
        .iter()
        .flat_map(|&i| {
            data[i as usize * RECORD..(i as usize + 1) * RECORD]
                .iter()
                .copied()
        })
        .collect();
    assert_eq!(got, want);
}

#[test]
fn the_first_damaged_record_is_reported_whichever_part_ran_first() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("s");
    zstd_store(&dir);
    let index = fs::read(dir.join(INDEX_FILE)).unwrap();
    let path = dir.join(data_file(0));
    let mut bytes = fs::read(&path).unwrap();
    for i in [40, 200] {
        let e = Entry::decode(&index[i * ENTRY_FIXED..(i + 1) * ENTRY_FIXED]);
        bytes[e.offset as usize] ^= 0xff; // the frame's magic number
    }
    fs::write(&path, bytes).unwrap();
    let store = Store::open(&dir).unwrap();
    let idx: Vec<u64> = (0..RECORDS).collect();
    for par in [&Backwards::default() as &dyn Parallel, &Sequential] {
        match store.plan(&idx, par) {
            Err(Error::Corrupt {
                record, path: p, ..
            }) => {
                assert_eq!(record, Some(40));
                assert_eq!(p, path);
            }
            Err(e) => panic!("another error: {e}"),
            Ok(_) => panic!("a plan of damaged frames succeeded"),
        }
    }
}
