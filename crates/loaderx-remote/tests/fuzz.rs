//! Fuzzing of the remote path that runs on stable Rust, in the ordinary test
//! suite: what an HTTP server returns for a store's header, index, index
//! checksums, dictionary and data ranges, through the checks a remote open, a
//! gather and a verify make.
//!
//! `fuzz_served_stores` writes small Dense stores (raw, zstd and zstd with a
//! dictionary; one to three data files) and serves them from a server of its
//! own on 127.0.0.1, damaged by a seeded SplitMix64 (`LOADERX_REMOTE_FUZZ_SEED`,
//! default fixed) for a fixed wall-clock budget (`LOADERX_REMOTE_FUZZ_SECONDS`,
//! default 10 s). The damage is in the bytes (bit flips, truncations,
//! extensions, 8-byte fields overwritten with interesting values, in any file;
//! sometimes a header rewritten with its checksum recomputed, so that sizes and
//! counts it claims reach the later checks) and in the responses (a body
//! shorter or longer than the range asked for, a whole file for a range, a size
//! that is not the file's, error statuses). Each case is opened, gathered from
//! at random positions in and out of range, and verified, with a cache or
//! without. Every call must return Ok or Err, never panic and never outlast its
//! deadline; an Ok gather must return exactly the records written unless the
//! header was rewritten with a valid checksum (the store then says what it
//! holds); and an undamaged store served faithfully must open, read back exactly
//! and verify.
//!
//! A failing case is saved under `tests/fuzz-regressions/` as the directory of
//! the files served with `FUZZ-CASE.txt` saying how the responses were
//! damaged; `replay_fuzz_regressions` serves every saved case on every run.
//!
//! Run longer:
//!
//! ```text
//! LOADERX_REMOTE_FUZZ_SECONDS=600 LOADERX_REMOTE_FUZZ_SEED=random \
//!     cargo test --release -p loaderx-remote --test fuzz -- --nocapture
//! ```

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use loaderx_gather::{Allocator, Pool};
use loaderx_remote::{Cache, OptionValue, RemoteStore};
use zrecord::{Codec, DType, Header, Schema, Sequential, Source, Writer, HEADER_FILE};

/// Longest any one call may take: the deadline given to every open and read
/// (below), and room for a slow machine.
const HANG: Duration = Duration::from_secs(30);
const DEADLINE_SECONDS: f64 = 4.0;

// ---------------------------------------------------------------------------
// Randomness

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next() % n
        }
    }

    fn chance(&mut self, one_in: u64) -> bool {
        self.below(one_in) == 0
    }
}

fn seed() -> u64 {
    match std::env::var("LOADERX_REMOTE_FUZZ_SEED").as_deref() {
        Ok("random") => {
            let s = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64);
            println!("LOADERX_REMOTE_FUZZ_SEED={s}");
            s
        }
        Ok(s) => s
            .parse()
            .expect("LOADERX_REMOTE_FUZZ_SEED is a number or random"),
        Err(_) => 0x005E_ED0F_7E57,
    }
}

fn budget() -> Duration {
    let secs = std::env::var("LOADERX_REMOTE_FUZZ_SECONDS")
        .ok()
        .and_then(|s| s.parse::<f64>().ok())
        .unwrap_or(10.0);
    Duration::from_secs_f64(secs)
}

// ---------------------------------------------------------------------------
// What is served

/// How the server damages its responses for one file.
#[derive(Clone, Debug, PartialEq)]
enum Fault {
    /// A body this many bytes shorter than the range asked for.
    Short(u64),
    /// A body this many bytes longer (the bytes after the range, or zeros).
    Long(u64),
    /// The whole file, status 200, for a range request.
    Whole,
    /// A size (HEAD) this much off the file's.
    Size(i64),
    /// This status for the next this many requests.
    Status(u16, u32),
}

impl Fault {
    fn describe(&self) -> String {
        format!("{self:?}")
    }

    fn parse(s: &str) -> Option<Fault> {
        if s == "Whole" {
            return Some(Fault::Whole);
        }
        let (kind, rest) = s.split_once('(')?;
        let args: Vec<&str> = rest.trim_end_matches(')').split(", ").collect();
        Some(match kind {
            "Short" => Fault::Short(args.first()?.parse().ok()?),
            "Long" => Fault::Long(args.first()?.parse().ok()?),
            "Size" => Fault::Size(args.first()?.parse().ok()?),
            "Status" => Fault::Status(args.first()?.parse().ok()?, args.get(1)?.parse().ok()?),
            _ => return None,
        })
    }
}

#[derive(Default)]
struct Served {
    files: BTreeMap<String, Vec<u8>>,
    faults: BTreeMap<String, Fault>,
}

/// An HTTP/1.1 server of the store files in `served` at `/s/NAME`, one request
/// per connection.
struct Server {
    url: String,
    served: Arc<Mutex<Served>>,
}

impl Server {
    fn start() -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let url = format!("http://{}/s", listener.local_addr().expect("address"));
        let served = Arc::new(Mutex::new(Served::default()));
        let shared = served.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming().flatten() {
                let shared = shared.clone();
                std::thread::spawn(move || {
                    let _ = answer(conn, &shared);
                });
            }
        });
        Server { url, served }
    }

    fn serve(&self, files: BTreeMap<String, Vec<u8>>, faults: BTreeMap<String, Fault>) {
        *self.served.lock().unwrap() = Served { files, faults };
    }
}

fn answer(mut conn: TcpStream, served: &Mutex<Served>) -> std::io::Result<()> {
    conn.set_read_timeout(Some(Duration::from_secs(10)))?;
    let mut req = Vec::new();
    let mut buf = [0u8; 4096];
    while !req.windows(4).any(|w| w == b"\r\n\r\n") && req.len() < 1 << 16 {
        let n = conn.read(&mut buf)?;
        if n == 0 {
            return Ok(());
        }
        req.extend_from_slice(&buf[..n]);
    }
    let text = String::from_utf8_lossy(&req);
    let mut lines = text.split("\r\n");
    let mut first = lines.next().unwrap_or("").split(' ');
    let (method, path) = (first.next().unwrap_or(""), first.next().unwrap_or(""));
    let range = lines.find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.eq_ignore_ascii_case("range")
            .then(|| v.trim().to_string())
    });
    let name = path.strip_prefix("/s/").unwrap_or("");
    let (file, fault) = {
        let mut s = served.lock().unwrap();
        let fault = s.faults.get(name).cloned();
        if let Some(Fault::Status(code, n)) = fault {
            if n > 0 {
                s.faults.insert(name.into(), Fault::Status(code, n - 1));
            } else {
                s.faults.remove(name);
            }
        }
        (s.files.get(name).cloned(), fault)
    };
    let head = "ETag: \"e\"\r\nLast-Modified: Tue, 01 Dec 2026 00:00:00 GMT\r\n\
                Accept-Ranges: bytes\r\nConnection: close\r\n";
    let reply = |conn: &mut TcpStream, status: &str, extra: &str, body: &[u8], len: u64| {
        let msg = format!("HTTP/1.1 {status}\r\n{head}{extra}Content-Length: {len}\r\n\r\n");
        conn.write_all(msg.as_bytes())?;
        if method != "HEAD" {
            conn.write_all(body)?;
        }
        conn.flush()
    };
    if let Some(Fault::Status(code, n)) = fault {
        if n > 0 {
            return reply(&mut conn, &format!("{code} Fault"), "", b"", 0);
        }
    }
    let Some(file) = file else {
        return reply(&mut conn, "404 Not Found", "", b"", 0);
    };
    let size = file.len() as u64;
    if method == "HEAD" || range.is_none() || fault == Some(Fault::Whole) {
        let len = match fault {
            Some(Fault::Size(d)) => size.saturating_add_signed(d),
            _ => size,
        };
        return reply(&mut conn, "200 OK", "", &file, len);
    }
    let spec = range.unwrap_or_default();
    let parsed = spec.strip_prefix("bytes=").and_then(|r| {
        let (a, b) = r.split_once('-')?;
        Some((a.parse::<u64>().ok()?, b.parse::<u64>().ok()?))
    });
    let Some((start, last)) = parsed.filter(|&(a, b)| a <= b && a < size) else {
        return reply(
            &mut conn,
            "416 Range Not Satisfiable",
            &format!("Content-Range: bytes */{size}\r\n"),
            b"",
            0,
        );
    };
    let end = last.saturating_add(1).min(size);
    let mut body = file[start as usize..end as usize].to_vec();
    match fault {
        Some(Fault::Short(k)) => body.truncate(body.len().saturating_sub(k as usize)),
        Some(Fault::Long(k)) => body.resize(body.len() + k as usize, 0),
        _ => {}
    }
    let len = body.len() as u64;
    let cr = format!("Content-Range: bytes {start}-{}/{size}\r\n", end - 1);
    reply(&mut conn, "206 Partial Content", &cr, &body, len)
}

// ---------------------------------------------------------------------------
// Stores and damage

struct Written {
    files: BTreeMap<String, Vec<u8>>,
    records: Vec<Vec<u8>>,
}

fn write_store(rng: &mut Rng, dir: &Path) -> Written {
    let codec = [Codec::Raw, Codec::Zstd, Codec::ZstdDict][rng.below(3) as usize];
    let shards = 1 + rng.below(3) as u8;
    let width = 1 + rng.below(300);
    let n = 1 + rng.below(200) as usize;
    let schema = Schema::dense(DType::U8, &[width], codec, shards.into()).expect("schema");
    let dict: Vec<u8> = (0..2048u32).map(|i| (i % 251) as u8).collect();
    let dest = dir.join(format!("w{}", rng.next()));
    let mut w = Writer::create(
        &dest,
        schema,
        (codec == Codec::ZstdDict).then_some(dict.as_slice()),
    )
    .expect("create");
    let records: Vec<Vec<u8>> = (0..n)
        .map(|_| {
            let base = rng.below(4) as u8;
            (0..width)
                .map(|i| base.wrapping_add((i % 7) as u8))
                .collect()
        })
        .collect();
    let flat: Vec<u8> = records.concat();
    w.append_dense(n, &flat, Source::Memory, &Sequential)
        .expect("append");
    w.finish().expect("finish");
    let mut files = BTreeMap::new();
    for entry in std::fs::read_dir(&dest).expect("read_dir") {
        let entry = entry.expect("entry");
        let name = entry.file_name().to_string_lossy().into_owned();
        files.insert(name, std::fs::read(entry.path()).expect("read"));
    }
    std::fs::remove_dir_all(&dest).expect("remove");
    Written { files, records }
}

const INTERESTING: [u64; 8] = [
    0,
    1,
    u64::MAX,
    u64::MAX - 7,
    1 << 31,
    1 << 32,
    1 << 40,
    i64::MAX as u64,
];

/// Damages one file's bytes.
fn damage_bytes(rng: &mut Rng, bytes: &mut Vec<u8>) {
    match rng.below(5) {
        0 if !bytes.is_empty() => {
            for _ in 0..1 + rng.below(4) {
                let at = rng.below(bytes.len() as u64) as usize;
                bytes[at] ^= 1 << rng.below(8);
            }
        }
        1 => bytes.truncate(rng.below(bytes.len() as u64 + 1) as usize),
        2 => bytes.extend((0..1 + rng.below(64)).map(|_| rng.next() as u8)),
        3 if bytes.len() >= 8 => {
            let at = rng.below(bytes.len() as u64 - 7) as usize;
            let v = INTERESTING[rng.below(INTERESTING.len() as u64) as usize];
            bytes[at..at + 8].copy_from_slice(&v.to_le_bytes());
        }
        _ => bytes.clear(),
    }
}

/// Rewrites the header with one claim changed and its checksum recomputed.
fn reseal_header(rng: &mut Rng, files: &mut BTreeMap<String, Vec<u8>>) -> bool {
    let Some(bytes) = files.get(HEADER_FILE) else {
        return false;
    };
    let Ok(mut h) = Header::decode(bytes, Path::new(HEADER_FILE)) else {
        return false;
    };
    let v = INTERESTING[rng.below(INTERESTING.len() as u64) as usize];
    let small = rng.below(1 << 12);
    match rng.below(7) {
        0 => h.record_count = if rng.chance(2) { v } else { small },
        // A record count and an index size that agree, however large: the
        // index is then fetched, or refused, by what the server holds.
        6 => {
            let count = if rng.chance(2) { v >> 5 } else { small };
            h.record_count = count;
            h.index_size = count.saturating_mul(h.schema.entry_size() as u64);
        }
        1 => h.index_size = if rng.chance(2) { v } else { small },
        2 => {
            let i = rng.below(h.shard_sizes.len() as u64) as usize;
            h.shard_sizes[i] = if rng.chance(2) { v } else { small };
        }
        3 => h.dict_size = if rng.chance(2) { v } else { small },
        4 => h.attrs_size = if rng.chance(2) { v } else { small },
        _ => h.schema.item_shape = vec![if rng.chance(2) { v } else { small }],
    }
    files.insert(HEADER_FILE.into(), h.encode());
    true
}

struct Case {
    files: BTreeMap<String, Vec<u8>>,
    faults: BTreeMap<String, Fault>,
    /// Whether the header was rewritten with a valid checksum.
    resealed: bool,
    /// Whether anything differs from the store as written.
    damaged: bool,
}

fn make_case(rng: &mut Rng, written: &Written) -> Case {
    let mut files = written.files.clone();
    let mut faults = BTreeMap::new();
    let mut resealed = false;
    let names: Vec<String> = files.keys().cloned().collect();
    let data: Vec<String> = names
        .iter()
        .filter(|n| n.starts_with("data-"))
        .cloned()
        .collect();
    // Half the damage is to data files, whose bytes only a gather or a verify
    // reads; the rest to any file, most of which an open checks whole.
    let pick = |rng: &mut Rng| {
        let from = if rng.chance(2) { &data } else { &names };
        from[rng.below(from.len() as u64) as usize].clone()
    };
    let rounds = rng.below(4);
    for _ in 0..rounds {
        match rng.below(10) {
            0..=3 => {
                let name = pick(rng);
                if let Some(b) = files.get_mut(&name) {
                    damage_bytes(rng, b);
                }
            }
            4 => resealed |= reseal_header(rng, &mut files),
            5 => {
                files.remove(&pick(rng));
            }
            _ => {
                let fault = match rng.below(5) {
                    0 => Fault::Short(1 + rng.below(16)),
                    1 => Fault::Long(1 + rng.below(16)),
                    2 => Fault::Whole,
                    3 => Fault::Size(rng.below(17) as i64 - 8),
                    _ => Fault::Status([500, 503, 404, 403, 416][rng.below(5) as usize], 1),
                };
                faults.insert(pick(rng), fault);
            }
        }
    }
    let damaged = files != written.files || !faults.is_empty();
    Case {
        files,
        faults,
        resealed,
        damaged,
    }
}

// ---------------------------------------------------------------------------
// Running one case

fn options() -> Vec<(String, OptionValue)> {
    vec![
        ("allow_http".into(), OptionValue::Bool(true)),
        ("retries".into(), OptionValue::Int(2)),
        ("retry_backoff".into(), OptionValue::Float(0.001)),
        ("deadline".into(), OptionValue::Float(DEADLINE_SECONDS)),
        ("first_byte_timeout".into(), OptionValue::Float(2.0)),
        ("max_request_bytes".into(), OptionValue::Int(1 << 12)),
    ]
}

/// Runs `f`, turning a panic or an overlong call into a failure message.
fn guarded<T>(what: &str, f: impl FnOnce() -> T) -> Result<T, String> {
    let t0 = Instant::now();
    let out = catch_unwind(AssertUnwindSafe(f)).map_err(|p| {
        let msg = p
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| p.downcast_ref::<String>().cloned())
            .unwrap_or_default();
        format!("{what} panicked: {msg}")
    })?;
    if t0.elapsed() > HANG {
        return Err(format!("{what} took {:?}", t0.elapsed()));
    }
    Ok(out)
}

/// Serves `case` and reads it every way: whether it opened, or the first
/// broken promise.
fn run_case(
    server: &Server,
    rng: &mut Rng,
    case: &Case,
    records: Option<&[Vec<u8>]>,
    cache: Option<Arc<Cache>>,
) -> Result<bool, String> {
    server.serve(case.files.clone(), case.faults.clone());
    let opened = guarded("open", || {
        RemoteStore::open(&server.url, &options(), cache.clone())
    })?;
    let store = match opened {
        Ok(s) => s,
        Err(e) if case.damaged => {
            let _ = e.to_string();
            return Ok(false);
        }
        Err(e) => return Err(format!("the undamaged store did not open: {e}")),
    };
    let n = store.meta().len();
    let alloc = Allocator::host(Pool::host(1 << 20));
    for _ in 0..3 {
        let idx: Vec<u64> = (0..1 + rng.below(20))
            .map(|_| {
                if rng.chance(10) {
                    n + rng.below(3)
                } else {
                    rng.below(n.max(1))
                }
            })
            .collect();
        let got = guarded("a gather", || store.begin(&idx)?.finish(&alloc))?;
        match got {
            Ok((mut block, _)) => {
                let Some(records) = records.filter(|_| !case.resealed) else {
                    continue;
                };
                let want: Vec<u8> = idx
                    .iter()
                    .map(|&i| records.get(i as usize).cloned())
                    .collect::<Option<Vec<_>>>()
                    .ok_or(format!("a gather of {idx:?} from {n} records succeeded"))?
                    .concat();
                let out = block.as_mut_slice().map_err(|e| e.to_string())?;
                if out != want.as_slice() {
                    return Err(format!("a gather of {idx:?} returned other bytes"));
                }
            }
            Err(e) if case.damaged || idx.iter().any(|&i| i >= n) => {
                let _ = e.to_string();
            }
            Err(e) => return Err(format!("a gather of {idx:?} failed: {e}")),
        }
    }
    let verified = guarded("verify", || {
        store.verify_files()?;
        store.verify_records(0..n)
    })?;
    match verified {
        Err(e) if !case.damaged => Err(format!("the undamaged store failed verify: {e}")),
        _ => Ok(true),
    }
}

fn describe(case: &Case) -> String {
    let mut s = String::new();
    for (name, fault) in &case.faults {
        s.push_str(&format!("{name} {}\n", fault.describe()));
    }
    if case.resealed {
        s.push_str("resealed\n");
    }
    s
}

fn regressions() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fuzz-regressions")
}

fn save(case: &Case, why: &str) -> PathBuf {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for b in why.bytes() {
        h = (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3);
    }
    let dir = regressions().join(format!("case-{:012x}", h & 0xFFFF_FFFF_FFFF));
    std::fs::create_dir_all(&dir).expect("regression dir");
    for (name, bytes) in &case.files {
        std::fs::write(dir.join(name), bytes).expect("write");
    }
    std::fs::write(
        dir.join("FUZZ-CASE.txt"),
        format!("{}failure: {why}\n", describe(case)),
    )
    .expect("write");
    dir
}

#[test]
fn fuzz_served_stores() {
    let mut rng = Rng(seed());
    let server = Server::start();
    let tmp = tempfile::tempdir().expect("tempdir");
    let (budget, t0) = (budget(), Instant::now());
    let (mut cases, mut opened_damaged, mut failures) = (0u64, 0u64, Vec::new());
    let mut written = write_store(&mut rng, tmp.path());
    while t0.elapsed() < budget || cases < 8 {
        if cases % 8 == 0 {
            written = write_store(&mut rng, tmp.path());
        }
        let case = if cases % 8 == 1 {
            // One in eight is served faithfully: it must read back exactly.
            Case {
                files: written.files.clone(),
                faults: BTreeMap::new(),
                resealed: false,
                damaged: false,
            }
        } else {
            make_case(&mut rng, &written)
        };
        let cache = rng.chance(3).then(|| {
            let dir = tmp.path().join(format!("cache-{cases}"));
            Arc::new(Cache::open(&dir, 1 << 20, 1 << (6 + rng.below(6))).expect("cache"))
        });
        match run_case(&server, &mut rng, &case, Some(&written.records), cache) {
            Ok(opened) => opened_damaged += u64::from(case.damaged && opened),
            Err(why) => {
                let dir = save(&case, &why);
                failures.push(format!("{why} (saved as {})", dir.display()));
            }
        }
        cases += 1;
    }
    println!(
        "fuzz_served_stores: {cases} cases in {:.1} s, {opened_damaged} damaged ones opened",
        t0.elapsed().as_secs_f64()
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn replay_fuzz_regressions() {
    let Ok(dirs) = std::fs::read_dir(regressions()) else {
        return;
    };
    let server = Server::start();
    let mut rng = Rng(1);
    let mut failures = Vec::new();
    let mut replayed = 0;
    for dir in dirs.flatten() {
        let mut files = BTreeMap::new();
        let mut faults = BTreeMap::new();
        let mut resealed = false;
        for f in std::fs::read_dir(dir.path()).expect("case dir").flatten() {
            let name = f.file_name().to_string_lossy().into_owned();
            let bytes = std::fs::read(f.path()).expect("read");
            if name != "FUZZ-CASE.txt" {
                files.insert(name, bytes);
                continue;
            }
            for line in String::from_utf8_lossy(&bytes).lines() {
                resealed |= line == "resealed";
                if let Some((file, fault)) = line.split_once(' ') {
                    if let Some(fault) = Fault::parse(fault) {
                        faults.insert(file.to_string(), fault);
                    }
                }
            }
        }
        let case = Case {
            files,
            faults,
            resealed,
            damaged: true,
        };
        if let Err(why) = run_case(&server, &mut rng, &case, None, None) {
            failures.push(format!("{}: {why}", dir.path().display()));
        }
        replayed += 1;
    }
    println!("replay_fuzz_regressions: {replayed} cases");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// A header whose record count and index size agree but claim far more than
/// the server's index holds: the open is refused by the index's real size,
/// at once, before anything of that size is asked for or set aside.
#[test]
fn a_header_claiming_a_huge_index_is_refused_at_once() {
    let mut rng = Rng(3);
    let tmp = tempfile::tempdir().expect("tempdir");
    let written = write_store(&mut rng, tmp.path());
    let server = Server::start();
    for count in [1u64 << 20, 1 << 35, u64::MAX / 64] {
        let mut files = written.files.clone();
        let mut h = Header::decode(&files[HEADER_FILE], Path::new(HEADER_FILE)).expect("header");
        h.record_count = count;
        h.index_size = count * h.schema.entry_size() as u64;
        files.insert(HEADER_FILE.into(), h.encode());
        server.serve(files, BTreeMap::new());
        let t0 = Instant::now();
        let err = RemoteStore::open(&server.url, &options(), None)
            .err()
            .expect("opened a store whose index is short");
        assert!(t0.elapsed() < Duration::from_secs(2), "{:?}", t0.elapsed());
        // The index and its block checksums are asked for at once: either
        // one's size may be the first refused.
        let msg = err.to_string();
        let named = ["index.bin", "index.sum"].iter().any(|f| {
            msg.starts_with(&format!("{}/{f}: the file is ", server.url))
                && msg.contains(" bytes but the header says ")
        });
        assert!(named, "{msg}");
    }
}
