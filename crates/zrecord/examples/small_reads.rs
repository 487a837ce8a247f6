//! How much a record costs to read without mapping the store: the measurement
//! behind the reader's choice to copy small raw records from a memory map.
//!
//!     cargo run --release -p zrecord --example small_reads -- STORE [BATCHES]
//!
//! STORE is any published raw store whose pages are in the page cache. On one
//! thread, for the same random batches of 256 positions, it times three ways of
//! copying the stored bytes into one reused buffer: from the memory map (what a
//! gather does for records under 32 KiB), one `pread` per record, and one io_uring
//! submission of 256 reads per batch (the cheapest way to ask the kernel for many
//! small reads at once). The map is the only one of the three that leaves the
//! store's pages in the process's resident set. Before timing, it checks that all
//! three read the same bytes.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::Instant;

use io_uring::{opcode, types, IoUring};
use memmap2::Mmap;
use zrecord::{data_file, Entry, Header, ENTRY_FIXED, HEADER_FILE, INDEX_FILE};

const BATCH: usize = 256;
const ROUNDS: usize = 5;

type Fail = Box<dyn std::error::Error>;

struct Store {
    entries: Vec<Entry>,
    files: Vec<File>,
    maps: Vec<Mmap>,
}

fn open(dir: &Path) -> Result<Store, Fail> {
    let hp = dir.join(HEADER_FILE);
    let header = Header::decode(&std::fs::read(&hp)?, &hp)?;
    if header.schema.codec != zrecord::Codec::Raw {
        return Err("the store must use the raw codec".into());
    }
    let index = std::fs::read(dir.join(INDEX_FILE))?;
    let entries = index
        .chunks_exact(header.schema.entry_size())
        .map(|raw| Entry::decode(&raw[..ENTRY_FIXED]))
        .collect::<Vec<_>>();
    if entries.is_empty() {
        return Err("the store has no records".into());
    }
    let files = (0..header.shard_sizes.len())
        .map(|s| File::open(dir.join(data_file(s))))
        .collect::<Result<Vec<_>, _>>()?;
    // SAFETY: a published store is immutable.
    let maps = files
        .iter()
        .map(|f| unsafe { Mmap::map(f) })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Store {
        entries,
        files,
        maps,
    })
}

#[derive(Clone, Copy, PartialEq)]
enum Method {
    Map,
    Pread,
    Uring,
}

impl Method {
    const ALL: [Method; 3] = [Method::Map, Method::Pread, Method::Uring];
    fn name(self) -> &'static str {
        match self {
            Method::Map => "memory map",
            Method::Pread => "pread per record",
            Method::Uring => "io_uring, one submit per batch",
        }
    }
}

/// Copies the stored bytes of `batch` end to end into `out`; returns the length.
fn read_batch(
    s: &Store,
    ring: &mut IoUring,
    how: Method,
    batch: &[usize],
    out: &mut [u8],
) -> Result<usize, Fail> {
    let mut at = 0;
    for &i in batch {
        let e = s.entries[i];
        let (off, len) = (e.offset as usize, e.stored_len as usize);
        let dst = &mut out[at..at + len];
        match how {
            Method::Map => dst.copy_from_slice(&s.maps[e.file as usize][off..off + len]),
            Method::Pread => s.files[e.file as usize].read_exact_at(dst, e.offset)?,
            Method::Uring => {
                let fd = types::Fd(s.files[e.file as usize].as_raw_fd());
                let sqe = opcode::Read::new(fd, dst.as_mut_ptr(), len as u32)
                    .offset(e.offset)
                    .build()
                    .user_data(len as u64);
                // SAFETY: `out` outlives the wait below, which reaps every read.
                unsafe { ring.submission().push(&sqe) }?;
            }
        }
        at += len;
    }
    if how == Method::Uring {
        ring.submit_and_wait(batch.len())?;
        for cqe in ring.completion() {
            if cqe.result() < 0 || cqe.result() as u64 != cqe.user_data() {
                return Err(format!("short or failed read: {}", cqe.result()).into());
            }
        }
    }
    Ok(at)
}

fn main() -> Result<(), Fail> {
    let mut args = std::env::args().skip(1);
    let dir = PathBuf::from(args.next().ok_or("usage: small_reads STORE [BATCHES]")?);
    let batches: usize = args.next().map_or(Ok(4000), |a| a.parse())?;
    let store = open(&dir)?;
    let n = store.entries.len() as u64;
    let longest = store
        .entries
        .iter()
        .map(|e| e.stored_len as usize)
        .max()
        .unwrap_or(0);
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    let plan: Vec<Vec<usize>> = (0..batches)
        .map(|_| {
            (0..BATCH)
                .map(|_| {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    (state % n) as usize
                })
                .collect()
        })
        .collect();
    let mut ring = IoUring::new(BATCH as u32)?;
    let mut out = vec![0u8; BATCH * longest];
    let mut reference = vec![0u8; BATCH * longest];
    for batch in plan.iter().take(50) {
        let len = read_batch(&store, &mut ring, Method::Map, batch, &mut reference)?;
        for how in [Method::Pread, Method::Uring] {
            out.fill(0);
            read_batch(&store, &mut ring, how, batch, &mut out)?;
            if out[..len] != reference[..len] {
                return Err(format!("{} read different bytes", how.name()).into());
            }
        }
    }
    println!(
        "{}: {n} records, mean {:.0} stored bytes; {batches} random batches of {BATCH}, one thread",
        dir.display(),
        store
            .entries
            .iter()
            .map(|e| e.stored_len as f64)
            .sum::<f64>()
            / n as f64
    );
    let mut times: Vec<Vec<f64>> = vec![Vec::new(); Method::ALL.len()];
    for _ in 0..ROUNDS {
        for (k, how) in Method::ALL.into_iter().enumerate() {
            let t = Instant::now();
            for batch in &plan {
                read_batch(&store, &mut ring, how, batch, &mut out)?;
            }
            times[k].push(t.elapsed().as_secs_f64() * 1e6 / batches as f64);
        }
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let map_us = median(&mut times[0].clone());
    for (how, t) in Method::ALL.into_iter().zip(times.iter_mut()) {
        let us = median(t);
        println!(
            "  {:<31} {us:7.1} us/batch (median of {ROUNDS}), {:5.1}x the map",
            how.name(),
            us / map_us
        );
    }
    Ok(())
}
