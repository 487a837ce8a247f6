//! Fuzzing that runs on stable Rust, in the ordinary test suite.
//!
//! Three targets, each given a fixed wall-clock budget (`ZRECORD_FUZZ_SECONDS`,
//! default 20 s each) and driven by a seeded SplitMix64 (`ZRECORD_FUZZ_SEED`,
//! default fixed; `random` picks one from the clock and prints it):
//!
//! - `fuzz_header_decode`: random bytes and mutations of valid version 1, 2 and 3
//!   headers (bit flips, truncations, extensions, 8-byte insertions and removals,
//!   interesting values in every field, most with the trailing checksum
//!   recomputed so that the parser gets past it) fed to [`Header::decode`]. It
//!   must return, never panic, never hold more than [`HEADER_ALLOC_CAP`], and
//!   whatever it accepts must survive `encode` then `decode` unchanged.
//! - `fuzz_dense_stores`, `fuzz_ragged_stores`: small valid stores (every dtype
//!   and codec, `zstd_dict` with a dictionary trained by [`train_dictionary`],
//!   zero-element records, 1..4 data files, some with attributes, some with
//!   records of KiBs, some with an index large enough to be checked lazily)
//!   written with [`Writer`], then damaged on disk: bit flips anywhere, index
//!   entry fields overwritten (offsets, lengths, data file, reserved bytes,
//!   checksums, shapes; huge values, offset + length past `u64::MAX`), entries
//!   swapped, files truncated, extended, removed or added, header fields
//!   rewritten with a valid header checksum, records claiming tens of MiB, and
//!   the checksums the header and `index.sum` hold recomputed so that the damage
//!   reaches the per-record paths. Each damaged store is opened (plain or with
//!   checked reads), gathered from at random positions in and out of range
//!   (`gather_dense`, `ragged_layout` + `gather_ragged`, `plan` + `gather`),
//!   and verified. Every call must return Ok or Err: never panic (caught with
//!   `catch_unwind`), never hang (a watchdog thread), never hold more than
//!   [`ALLOC_CAP`] on its thread (a counting global allocator). Intact stores
//!   must read back exactly and verify; an Ok gather from a store damaged
//!   without any checksum recomputed must return exactly the records written,
//!   unless payload bytes were damaged and reads are not checked; and damaged
//!   payload must fail `verify`.
//!
//! Every failing input is saved under `tests/fuzz-regressions/` (a store
//! directory with `FUZZ-CASE.txt` describing the damage, or `header-*.bin`), one
//! per distinct failure, and `replay_fuzz_regressions` replays every saved input
//! on every run, without a time budget.
//!
//! Failures that are already known (listed in [`KNOWN`], each with an ignored
//! `#[test]` reproducing it) are reported in the summary but do not fail the run,
//! so that CI stays usable until the fix lands; `ZRECORD_FUZZ_STRICT=1` fails on
//! them too. Remove an entry from [`KNOWN`] and un-ignore its test once fixed.
//!
//! Run longer, printing the figures:
//!
//! ```text
//! ZRECORD_FUZZ_SECONDS=600 ZRECORD_FUZZ_SEED=random \
//!     cargo test --release -p zrecord --test fuzz -- --nocapture
//! ```

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Once};
use std::time::{Duration, Instant};

use xxhash_rust::xxh3::xxh3_64;
use zrecord::{
    data_file, train_dictionary, Codec, DType, Header, IndexSums, Kind, Parallel, RaggedView,
    ReadOptions, Schema, Sequential, Source, Store, Writer, ALL_DTYPES, ATTRS_FILE, DICT_FILE,
    ENTRY_FIXED, HEADER_FILE, INDEX_FILE, INDEX_SUMS_FILE, MAGIC, MAX_ATTRS_BYTES,
    NEWEST_FORMAT_VERSION, OLDEST_FORMAT_VERSION, WIDE_FORMAT_VERSION,
};

// ---------------------------------------------------------------------------
// Configuration

/// Most bytes one library call may hold at once on the fuzzing thread. The
/// largest file of a fuzzed store is about 1 MiB (a large index, which is
/// mapped, not read) and its records are at most 4 KiB; a call that needs more
/// believes a size it read from the files.
const ALLOC_CAP: usize = 1 << 20;
/// The same for one `Header::decode`.
const HEADER_ALLOC_CAP: usize = 64 << 10;
/// Largest output buffer the harness allocates for a gather. A damaged header may
/// declare records of up to 2 GiB; allocating the output is the caller's choice,
/// so such gathers are skipped (and counted) rather than attempted.
const OUT_CAP: usize = 4 << 20;

fn env_f64(name: &str, default: f64) -> f64 {
    match std::env::var(name) {
        Ok(v) => v
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("{name}={v:?} is not a number")),
        Err(_) => default,
    }
}

/// Wall-clock budget of each timed target.
fn budget() -> Duration {
    Duration::from_secs_f64(env_f64("ZRECORD_FUZZ_SECONDS", 20.0).max(0.0))
}

/// A case that makes no progress for this long is a hang.
fn hang_limit() -> Duration {
    Duration::from_secs_f64(env_f64("ZRECORD_FUZZ_HANG_SECONDS", 10.0).max(0.1))
}

/// The run's seed, read once (so that `random` means one value for the run).
fn seed() -> u64 {
    static SEED: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *SEED.get_or_init(read_seed)
}

fn read_seed() -> u64 {
    match std::env::var("ZRECORD_FUZZ_SEED").as_deref().map(str::trim) {
        Err(_) | Ok("") => 0x5EED_0F2E_C04D,
        Ok("random") => std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64),
        Ok(v) => v
            .strip_prefix("0x")
            .map_or_else(|| v.parse(), |h| u64::from_str_radix(h, 16))
            .unwrap_or_else(|_| panic!("ZRECORD_FUZZ_SEED={v:?} is not a number")),
    }
}

fn strict() -> bool {
    std::env::var("ZRECORD_FUZZ_STRICT").is_ok_and(|v| v != "0" && !v.is_empty())
}

fn regressions_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fuzz-regressions")
}

/// Failures already reported and reproduced by an ignored test: `(part of the
/// finding's signature, the test that reproduces it)`. A finding whose signature
/// contains the first string is counted and printed but does not fail the run
/// (unless `ZRECORD_FUZZ_STRICT=1`). Delete the entry when the bug is fixed.
const KNOWN: &[(&str, &str)] = &[];

fn known(signature: &str) -> Option<&'static str> {
    KNOWN
        .iter()
        .find(|(pat, _)| signature.contains(pat))
        .map(|&(_, test)| test)
}

// ---------------------------------------------------------------------------
// A counting allocator: how much one library call holds at most on its thread.

struct Counting;

thread_local! {
    static TRACK: Cell<bool> = const { Cell::new(false) };
    static LIVE: Cell<usize> = const { Cell::new(0) };
    static PEAK: Cell<usize> = const { Cell::new(0) };
}

fn on_alloc(size: usize) {
    let _ = TRACK.try_with(|t| {
        if t.get() {
            let live = LIVE.with(|l| {
                let v = l.get().saturating_add(size);
                l.set(v);
                v
            });
            PEAK.with(|p| p.set(p.get().max(live)));
        }
    });
}

fn on_free(size: usize) {
    let _ = TRACK.try_with(|t| {
        if t.get() {
            LIVE.with(|l| l.set(l.get().saturating_sub(size)));
        }
    });
}

// SAFETY: every call is forwarded to the system allocator unchanged; the
// bookkeeping touches only const-initialised thread locals without destructors.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        on_alloc(layout.size());
        System.alloc(layout)
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        on_alloc(layout.size());
        System.alloc_zeroed(layout)
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        on_free(layout.size());
        System.dealloc(ptr, layout)
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        on_alloc(new_size);
        on_free(layout.size());
        System.realloc(ptr, layout, new_size)
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// Runs `f` with this thread's allocations counted; returns its result and the
/// most bytes it held at once.
fn tracked<R>(f: impl FnOnce() -> R) -> (R, usize) {
    LIVE.with(|l| l.set(0));
    PEAK.with(|p| p.set(0));
    TRACK.with(|t| t.set(true));
    let r = f();
    TRACK.with(|t| t.set(false));
    (r, PEAK.with(|p| p.get()))
}

// ---------------------------------------------------------------------------
// Panics: caught, with where they happened.

struct PanicInfo {
    at: String,
    msg: String,
    backtrace: String,
}

thread_local! {
    static CAPTURE: Cell<bool> = const { Cell::new(false) };
    static LAST_PANIC: RefCell<Option<PanicInfo>> = const { RefCell::new(None) };
}

/// Installs, once, a panic hook that records panics on capturing threads instead
/// of printing them (everything else goes to the default hook).
fn install_hook() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !CAPTURE.with(|c| c.get()) {
                return default(info);
            }
            // What this hook allocates (a backtrace's symbols take tens of MiB)
            // is the harness's, not the library's.
            let tracking = TRACK.with(|t| t.replace(false));
            let at = info.location().map_or_else(
                || "?".into(),
                |l| format!("{}:{}:{}", l.file(), l.line(), l.column()),
            );
            let msg = info
                .payload()
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| info.payload().downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "<non-string panic payload>".into());
            // Resolving a backtrace is slow: only the first panic at each place.
            static SEEN: Mutex<Vec<String>> = Mutex::new(Vec::new());
            let mut seen = SEEN.lock().unwrap_or_else(|e| e.into_inner());
            let backtrace = if seen.contains(&at) {
                String::new()
            } else {
                seen.push(at.clone());
                std::backtrace::Backtrace::force_capture().to_string()
            };
            drop(seen);
            LAST_PANIC.with(|p| *p.borrow_mut() = Some(PanicInfo { at, msg, backtrace }));
            TRACK.with(|t| t.set(tracking));
        }));
    });
}

/// Runs `f`, turning a panic into its description.
fn catch<R>(f: impl FnOnce() -> R) -> Result<R, PanicInfo> {
    install_hook();
    CAPTURE.with(|c| c.set(true));
    let r = catch_unwind(AssertUnwindSafe(f));
    CAPTURE.with(|c| c.set(false));
    r.map_err(|_| {
        LAST_PANIC
            .with(|p| p.borrow_mut().take())
            .unwrap_or(PanicInfo {
                at: "?".into(),
                msg: "panic not recorded".into(),
                backtrace: String::new(),
            })
    })
}

/// A source location without the machine-dependent part of its path: from the
/// crate directory on for a dependency (`zstd-safe-7.4.1/src/lib.rs:2132:14`),
/// from `crates/` for this workspace.
fn short_path(at: &str) -> &str {
    if let Some(i) = at.find("/registry/src/") {
        let rest = &at[i + "/registry/src/".len()..];
        return rest.split_once('/').map_or(rest, |(_, r)| r);
    }
    at.find("crates/").map_or(at, |i| &at[i..])
}

/// Keeps the frames of a backtrace that are zrecord's or this file's.
fn short_backtrace(bt: &str) -> String {
    let lines: Vec<&str> = bt.lines().collect();
    let mut out = String::new();
    for (k, l) in lines.iter().enumerate() {
        let t = l.trim_start();
        if t.starts_with("at ") && (t.contains("zrecord/src") || t.contains("tests/fuzz.rs")) {
            let _ = writeln!(out, "    {}\n      {}", lines[k - 1].trim(), t);
        }
    }
    out
}

// ---------------------------------------------------------------------------
// SplitMix64.

#[derive(Clone)]
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed)
    }
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in `0..n` (`n` > 0).
    fn below(&mut self, n: u64) -> u64 {
        ((self.next() as u128 * n as u128) >> 64) as u64
    }
    fn upto(&mut self, n: usize) -> usize {
        self.below(n as u64 + 1) as usize
    }
    fn index(&mut self, n: usize) -> usize {
        self.below(n as u64) as usize
    }
    /// True with probability `p` percent.
    fn pct(&mut self, p: u64) -> bool {
        self.below(100) < p
    }
    fn pick<T: Copy>(&mut self, xs: &[T]) -> T {
        xs[self.index(xs.len())]
    }
    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
    /// Sizes, offsets and counts that parsers tend to get wrong.
    fn interesting_u64(&mut self, near: &[u64]) -> u64 {
        match self.below(10) {
            0..=3 => self.pick(&[
                0,
                1,
                2,
                7,
                8,
                24,
                255,
                256,
                (1 << 31) - 1,
                1 << 31,
                (1 << 31) + 1,
                u32::MAX as u64,
                1 << 32,
                1 << 40,
                1 << 62,
                1 << 63,
                u64::MAX / 24,
                u64::MAX / 24 + 1,
                u64::MAX / 8 + 1,
                u64::MAX - 1,
                u64::MAX,
            ]),
            4..=6 if !near.is_empty() => {
                let v = self.pick(near);
                v.wrapping_add(self.below(5)).wrapping_sub(2)
            }
            7 => u64::MAX - self.below(4096),
            8 => self.below(1 << 12),
            _ => self.next(),
        }
    }
}

/// A test-local `Parallel` that asks for several parts but runs them in order on
/// the calling thread: it exercises the splitting code without threads.
struct Split(usize);

impl Parallel for Split {
    fn parts(&self, _bytes: usize, _decodes: bool) -> usize {
        self.0
    }
    fn run(
        &self,
        n: usize,
        task: &(dyn Fn(usize) -> zrecord::Result<()> + Sync),
    ) -> zrecord::Result<()> {
        (0..n).try_for_each(task)
    }
}

// ---------------------------------------------------------------------------
// Findings and the report of one target.

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Stage {
    Setup,
    HeaderDecode,
    HeaderReencode,
    Open,
    Plan,
    Gather,
    GatherDense,
    RaggedLayout,
    GatherRagged,
    WrongKind,
    Verify,
}

const STAGES: [Stage; 11] = [
    Stage::Setup,
    Stage::HeaderDecode,
    Stage::HeaderReencode,
    Stage::Open,
    Stage::Plan,
    Stage::Gather,
    Stage::GatherDense,
    Stage::RaggedLayout,
    Stage::GatherRagged,
    Stage::WrongKind,
    Stage::Verify,
];

impl Stage {
    fn name(self) -> &'static str {
        match self {
            Stage::Setup => "setup",
            Stage::HeaderDecode => "Header::decode",
            Stage::HeaderReencode => "Header::encode round trip",
            Stage::Open => "Store::open",
            Stage::Plan => "Store::plan",
            Stage::Gather => "Store::gather",
            Stage::GatherDense => "Store::gather_dense",
            Stage::RaggedLayout => "Store::ragged_layout",
            Stage::GatherRagged => "Store::gather_ragged",
            Stage::WrongKind => "gather of the other kind",
            Stage::Verify => "Store::verify",
        }
    }
}

enum Fail {
    Panic(PanicInfo),
    OverAlloc(usize),
    Wrong(&'static str, String),
    Hang,
}

struct Finding {
    stage: Stage,
    fail: Fail,
}

impl Finding {
    /// What identifies the bug: its kind, the call, and where a panic happened.
    fn signature(&self) -> String {
        let s = self.stage.name();
        match &self.fail {
            Fail::Panic(p) => format!("panic in {s} at {}", short_path(&p.at)),
            Fail::OverAlloc(_) => format!("over-allocation in {s}"),
            Fail::Wrong(what, _) => format!("wrong result in {s}: {what}"),
            Fail::Hang => format!("hang in {s}"),
        }
    }

    fn detail(&self) -> String {
        match &self.fail {
            Fail::Panic(p) => format!(
                "panicked at {}: {}\n{}",
                p.at,
                p.msg,
                short_backtrace(&p.backtrace)
            ),
            Fail::OverAlloc(n) => format!(
                "held {n} bytes ({:.1} MiB) at once, over the {} MiB cap",
                *n as f64 / (1 << 20) as f64,
                ALLOC_CAP >> 20
            ),
            Fail::Wrong(_, d) => d.clone(),
            Fail::Hang => format!("no progress for {:?}", hang_limit()),
        }
    }
}

struct Seen {
    count: u64,
    detail: String,
    input: String,
    saved: Option<PathBuf>,
}

#[derive(Default)]
struct Report {
    cases: u64,
    outcomes: BTreeMap<String, u64>,
    findings: BTreeMap<String, Seen>,
}

impl Report {
    /// Moves everything in `other` into this report.
    fn merge(&mut self, other: Report) {
        self.cases += other.cases;
        for (k, v) in other.outcomes {
            *self.outcomes.entry(k).or_default() += v;
        }
        for (k, v) in other.findings {
            match self.findings.get_mut(&k) {
                Some(s) => s.count += v.count,
                None => {
                    self.findings.insert(k, v);
                }
            }
        }
    }

    /// Hands what this worker found so far to the shared report, which the
    /// watchdog reads if the worker hangs. The worker never holds the shared
    /// report while it runs a case.
    fn publish(&mut self, shared: &Mutex<Report>) {
        let mine = std::mem::take(self);
        shared.lock().unwrap_or_else(|e| e.into_inner()).merge(mine);
    }

    fn count(&mut self, outcome: impl Into<String>) {
        *self.outcomes.entry(outcome.into()).or_default() += 1;
    }

    /// Records `f`; the first time a signature is seen, `save` stores the input
    /// as a regression case (when `save_new`) and returns where.
    fn found(
        &mut self,
        f: &Finding,
        input: &str,
        save_new: bool,
        save: impl FnOnce(&str) -> Option<PathBuf>,
    ) {
        let sig = f.signature();
        if let Some(s) = self.findings.get_mut(&sig) {
            s.count += 1;
            return;
        }
        let saved = if save_new { save(&sig) } else { None };
        self.findings.insert(
            sig,
            Seen {
                count: 1,
                detail: f.detail(),
                input: input.to_string(),
                saved,
            },
        );
    }

    /// Prints the figures and fails on any finding not listed in [`KNOWN`].
    fn finish(&self, target: &str, elapsed: Duration) {
        let mut s = format!(
            "\n=== {target}: {} cases in {:.1} s, seed {:#x}\n",
            self.cases,
            elapsed.as_secs_f64(),
            seed()
        );
        for (k, v) in &self.outcomes {
            let _ = writeln!(s, "  {v:>9}  {k}");
        }
        let mut unknown = 0;
        for (sig, seen) in &self.findings {
            let tag = match known(sig) {
                Some(t) if !strict() => format!("KNOWN (reproduced by {t})"),
                Some(t) => {
                    unknown += 1;
                    format!("KNOWN (reproduced by {t}), failing because ZRECORD_FUZZ_STRICT")
                }
                None => {
                    unknown += 1;
                    "NEW".into()
                }
            };
            let _ = writeln!(
                s,
                "  FINDING [{tag}] x{}: {sig}\n    {}\n    input: {}\n    saved: {}",
                seen.count,
                seen.detail.trim_end().replace('\n', "\n    "),
                seen.input.replace('\n', "\n      "),
                seen.saved
                    .as_deref()
                    .map_or("(not saved)".into(), |p| p.display().to_string()),
            );
        }
        println!("{s}");
        assert!(
            unknown == 0,
            "{target}: {unknown} new finding(s), printed above; the inputs are saved under {}",
            regressions_dir().display()
        );
    }
}

fn short_hash(s: &[u8]) -> String {
    format!("{:016x}", xxh3_64(s))
}

/// Saves `bytes` (a header input) as a regression case named after `sig`.
fn save_header_case(sig: &str, bytes: &[u8]) -> Option<PathBuf> {
    let dir = regressions_dir();
    std::fs::create_dir_all(&dir).ok()?;
    let p = dir.join(format!("header-{}.bin", &short_hash(sig.as_bytes())[..12]));
    if !p.exists() {
        std::fs::write(&p, bytes).ok()?;
    }
    Some(p)
}

/// Copies the store directory `case` (a damaged store) as a regression case.
fn save_store_case(sig: &str, case: &Path, description: &str) -> Option<PathBuf> {
    let dir = regressions_dir().join(format!("store-{}", &short_hash(sig.as_bytes())[..12]));
    if dir.exists() {
        return Some(dir);
    }
    std::fs::create_dir_all(&dir).ok()?;
    for e in std::fs::read_dir(case).ok()? {
        let e = e.ok()?;
        std::fs::copy(e.path(), dir.join(e.file_name())).ok()?;
    }
    std::fs::write(
        dir.join("FUZZ-CASE.txt"),
        format!("finding: {sig}\n\n{description}\n"),
    )
    .ok()?;
    Some(dir)
}

// ---------------------------------------------------------------------------
// The runner: the cases run on a worker thread; this thread watches for hangs.

/// What the watchdog needs to know about the case in progress.
#[derive(Default)]
struct Progress {
    /// Bumped at every stage of every case.
    ticks: AtomicU64,
    stage: AtomicUsize,
    /// The input being run: header bytes, or a store directory and its damage.
    current: Mutex<Input>,
    stop: AtomicBool,
}

#[derive(Clone, Default)]
enum Input {
    #[default]
    None,
    Header(Vec<u8>),
    Store(PathBuf, String),
}

impl Progress {
    fn at(&self, stage: Stage) {
        self.stage.store(
            STAGES.iter().position(|&s| s == stage).unwrap_or(0),
            Ordering::Relaxed,
        );
        self.ticks.fetch_add(1, Ordering::Relaxed);
    }
    fn set_input(&self, input: Input) {
        *self.current.lock().unwrap_or_else(|e| e.into_inner()) = input;
    }
}

fn run_target<W>(name: &str, work: W) -> (Report, Duration)
where
    W: FnOnce(&Progress, &Mutex<Report>) + Send + 'static,
{
    install_hook();
    let progress = Arc::new(Progress::default());
    let report = Arc::new(Mutex::new(Report::default()));
    let start = Instant::now();
    let worker = {
        let (p, r) = (progress.clone(), report.clone());
        std::thread::Builder::new()
            .name(format!("{name}-worker"))
            .spawn(move || work(&p, &r))
            .expect("spawn the fuzz worker")
    };
    let mut last = (u64::MAX, Instant::now());
    loop {
        if worker.is_finished() {
            if let Err(e) = worker.join() {
                std::panic::resume_unwind(e);
            }
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
        let t = progress.ticks.load(Ordering::Relaxed);
        if t != last.0 {
            last = (t, Instant::now());
            continue;
        }
        if last.1.elapsed() < hang_limit() {
            continue;
        }
        // A hang: the worker cannot be stopped; it is left behind.
        progress.stop.store(true, Ordering::Relaxed);
        let stage = STAGES[progress.stage.load(Ordering::Relaxed)];
        let input = progress
            .current
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let f = Finding {
            stage,
            fail: Fail::Hang,
        };
        let mut r = report.lock().unwrap_or_else(|e| e.into_inner());
        match input {
            Input::Header(b) => {
                let d = format!("{} header bytes: {}", b.len(), hex(&b));
                r.found(&f, &d, true, |sig| save_header_case(sig, &b));
            }
            Input::Store(dir, d) => {
                r.found(&f, &d, true, |sig| save_store_case(sig, &dir, &d));
            }
            Input::None => r.found(&f, "(none)", false, |_| None),
        }
        break;
    }
    let elapsed = start.elapsed();
    let r = std::mem::take(&mut *report.lock().unwrap_or_else(|e| e.into_inner()));
    (r, elapsed)
}

fn hex(b: &[u8]) -> String {
    let mut s = String::with_capacity(b.len() * 2);
    for x in b {
        let _ = write!(s, "{x:02x}");
    }
    s
}

// ---------------------------------------------------------------------------
// Target 1: Header::decode.

/// Byte offsets of the header's fixed fields: (offset, width). From 64 on, version
/// 2 holds the index sums' checksum and the attributes' size and checksum, version
/// 1 the item shape and shard sizes.
const HEADER_FIELDS: [(usize, usize); 16] = [
    (8, 4),  // version
    (12, 1), // kind
    (13, 1), // dtype
    (14, 1), // codec
    (15, 1), // data_shards
    (16, 4), // ndim
    (20, 4), // entry size
    (24, 8), // record count
    (32, 8), // index size
    (40, 8), // index xxh3
    (48, 8), // dict size
    (56, 8), // dict xxh3
    (64, 8), // v2: xxh3 of index.sum
    (72, 8), // v2: attrs size
    (80, 8), // v2: attrs xxh3
    (88, 8), // v2: first item dim or shard size; v3: data file count and 4 zero bytes
];

fn random_schema(rng: &mut Rng) -> Schema {
    let dtype = rng.pick(&ALL_DTYPES);
    let codec = rng.pick(&[Codec::Raw, Codec::Zstd, Codec::ZstdDict]);
    let shards = if rng.pct(90) {
        1 + rng.below(4) as u32
    } else {
        1 + rng.below(255) as u32
    };
    if rng.pct(50) {
        let most = if rng.pct(90) { 3 } else { 32 };
        let ndim = rng.upto(most);
        let top = if ndim > 3 { 2 } else { 6 };
        let shape: Vec<u64> = (0..ndim).map(|_| rng.below(top)).collect();
        Schema::dense(dtype, &shape, codec, shards).expect("a valid dense schema")
    } else {
        let most = if rng.pct(90) { 3 } else { 32 };
        let ndim = 1 + rng.index(most);
        Schema::ragged(dtype, ndim, codec, shards).expect("a valid ragged schema")
    }
}

/// A valid header of a random schema, built from `template` (a header a
/// [`Writer`] wrote) by changing its fields.
fn random_header(rng: &mut Rng, template: &Header) -> Header {
    let mut h = template.clone();
    h.schema = random_schema(rng);
    h.record_count = if rng.pct(80) {
        rng.below(100)
    } else {
        rng.below(1 << 40)
    };
    h.index_size = h.record_count * h.schema.entry_size() as u64;
    h.index_xxh3 = rng.next();
    (h.dict_size, h.dict_xxh3) = if h.schema.codec == Codec::ZstdDict {
        (1 + rng.below(1 << 16), rng.next())
    } else {
        (0, 0)
    };
    h.version = OLDEST_FORMAT_VERSION
        + rng.below((NEWEST_FORMAT_VERSION - OLDEST_FORMAT_VERSION + 1) as u64) as u32;
    // Version 3 exists for more data files than one byte counts.
    if h.version >= WIDE_FORMAT_VERSION && rng.pct(50) {
        h.schema.data_shards = 256 + rng.below(2048) as u32;
    }
    h.shard_sizes = (0..h.schema.data_shards)
        .map(|_| rng.below(1 << 20))
        .collect();
    if h.version >= 2 {
        h.index_sums_xxh3 = rng.next();
        (h.attrs_size, h.attrs_xxh3) = if rng.pct(50) {
            (1 + rng.below(MAX_ATTRS_BYTES), rng.next())
        } else {
            (0, 0)
        };
    } else {
        (h.index_sums_xxh3, h.attrs_size, h.attrs_xxh3) = (0, 0, 0);
    }
    h
}

/// Replaces the last 8 bytes with the xxh3 of everything before them.
fn reseal_bytes(b: &mut [u8]) {
    if b.len() >= 16 {
        let n = b.len() - 8;
        let sum = xxh3_64(&b[..n]);
        b[n..].copy_from_slice(&sum.to_le_bytes());
    }
}

fn put_uint(b: &mut [u8], at: usize, width: usize, v: u64) {
    if at + width <= b.len() {
        b[at..at + width].copy_from_slice(&v.to_le_bytes()[..width]);
    }
}

/// One header input: random bytes or a mutated valid header.
fn header_input(rng: &mut Rng, template: &Header) -> Vec<u8> {
    match rng.below(20) {
        0..=1 => {
            let n = rng.upto(200);
            rng.bytes(n)
        }
        2..=3 => {
            let n = rng.upto(200);
            let mut b = MAGIC.to_vec();
            b.extend(rng.bytes(n));
            if rng.pct(50) {
                put_uint(&mut b, 8, 4, 1);
            }
            if rng.pct(50) {
                reseal_bytes(&mut b);
            }
            b
        }
        4..=5 => {
            // Structurally inconsistent fields, encoded by the crate itself.
            let mut h = random_header(rng, template);
            match rng.below(7) {
                6 => h.version = rng.pick(&[0, 1, 2, 3, u32::MAX]),
                0 => h.schema.ndim = rng.upto(40),
                1 => {
                    h.schema.item_shape =
                        (0..rng.upto(5)).map(|_| rng.interesting_u64(&[])).collect()
                }
                2 => h.schema.data_shards = rng.next() as u32,
                3 => h.shard_sizes = (0..rng.upto(6)).map(|_| rng.next()).collect(),
                4 => {
                    h.schema.kind = if h.schema.kind == Kind::Dense {
                        Kind::Ragged
                    } else {
                        Kind::Dense
                    }
                }
                _ => h.record_count = rng.interesting_u64(&[h.record_count]),
            }
            h.encode()
        }
        _ => {
            let h = random_header(rng, template);
            let mut b = h.encode();
            let known = [
                h.record_count,
                h.index_size,
                h.dict_size,
                h.attrs_size,
                MAX_ATTRS_BYTES,
                h.version as u64,
                h.schema.ndim as u64,
                h.schema.entry_size() as u64,
                b.len() as u64,
            ];
            for _ in 0..1 + rng.below(3) {
                match rng.below(8) {
                    0 | 1 => {
                        let (at, w) = if rng.pct(70) {
                            rng.pick(&HEADER_FIELDS)
                        } else {
                            (64 + 8 * rng.index(12), 8)
                        };
                        let v = rng.interesting_u64(&known);
                        put_uint(&mut b, at, w, v);
                    }
                    2 if !b.is_empty() => {
                        let i = rng.index(b.len());
                        b[i] ^= 1 << rng.below(8);
                    }
                    3 if !b.is_empty() => {
                        let i = rng.index(b.len());
                        b[i] = rng.next() as u8;
                    }
                    4 => {
                        let n = rng.upto(b.len());
                        b.truncate(n);
                    }
                    5 => {
                        let n = 1 + rng.index(64);
                        if rng.pct(50) {
                            b.extend(std::iter::repeat_n(0u8, n));
                        } else {
                            b.extend(rng.bytes(n));
                        }
                    }
                    6 if b.len() > 16 => {
                        // Insert or remove 8 bytes at a field boundary.
                        let at = 8 * (1 + rng.index(b.len() / 8 - 1));
                        if rng.pct(50) {
                            let v = rng.interesting_u64(&known).to_le_bytes();
                            b.splice(at..at, v);
                        } else {
                            b.drain(at..(at + 8).min(b.len()));
                        }
                    }
                    _ => {}
                }
            }
            if rng.pct(75) {
                reseal_bytes(&mut b);
            }
            b
        }
    }
}

/// Decodes `b`; a panic, an allocation over the cap, or an accepted header that
/// does not survive `encode` then `decode` is a finding.
fn check_header(b: &[u8], p: &Progress, r: &mut Report) -> Option<Finding> {
    let name = Path::new("fuzz/header.bin");
    p.at(Stage::HeaderDecode);
    let (res, peak) = tracked(|| catch(|| Header::decode(b, name)));
    let h = match res {
        Err(panic) => {
            r.count("decode panicked");
            return Some(Finding {
                stage: Stage::HeaderDecode,
                fail: Fail::Panic(panic),
            });
        }
        Ok(Err(_)) => {
            r.count("decode Err");
            None
        }
        Ok(Ok(h)) => {
            r.count("decode Ok");
            Some(h)
        }
    };
    if peak > HEADER_ALLOC_CAP {
        return Some(Finding {
            stage: Stage::HeaderDecode,
            fail: Fail::OverAlloc(peak),
        });
    }
    let h = h?;
    p.at(Stage::HeaderReencode);
    match catch(|| Header::decode(&h.encode(), name)) {
        Err(panic) => Some(Finding {
            stage: Stage::HeaderReencode,
            fail: Fail::Panic(panic),
        }),
        Ok(Ok(h2)) if h2 == h => None,
        Ok(other) => Some(Finding {
            stage: Stage::HeaderReencode,
            fail: Fail::Wrong(
                "accepted header does not round-trip",
                format!("decoded {h:?}; its encoding decodes to {other:?}"),
            ),
        }),
    }
}

/// A header a [`Writer`] wrote, to build valid headers from.
fn template_header() -> Header {
    let tmp = tempfile::tempdir().expect("a temporary directory");
    let dest = tmp.path().join("t");
    let schema = Schema::dense(DType::F32, &[2], Codec::Raw, 2).expect("schema");
    let mut w = Writer::create(&dest, schema, None).expect("create");
    w.append_dense(3, &[0u8; 24], Source::Memory, &Sequential)
        .expect("append");
    w.finish().expect("finish");
    let hp = dest.join(HEADER_FILE);
    Header::decode(&std::fs::read(&hp).expect("read header"), &hp).expect("decode header")
}

#[test]
fn fuzz_header_decode() {
    let budget = budget();
    let seed = seed();
    let template = template_header();
    let (report, elapsed) = run_target("header", move |p, shared| {
        let mut rng = Rng::new(seed);
        let mut r = Report::default();
        let start = Instant::now();
        while start.elapsed() < budget && !p.stop.load(Ordering::Relaxed) {
            for _ in 0..256 {
                let b = header_input(&mut rng, &template);
                p.set_input(Input::Header(b.clone()));
                r.cases += 1;
                if let Some(f) = check_header(&b, p, &mut r) {
                    let d = format!("{} header bytes: {}", b.len(), hex(&b));
                    r.found(&f, &d, true, |sig| save_header_case(sig, &b));
                }
            }
            r.publish(shared);
        }
    });
    report.finish("fuzz_header_decode", elapsed);
}

// ---------------------------------------------------------------------------
// Targets 2 and 3: damaged stores.

/// A pristine store: its files and the records it holds.
struct Base {
    desc: String,
    schema: Schema,
    files: Files,
    records: Records,
}

type Files = BTreeMap<String, Vec<u8>>;
/// Each record's shape and logical bytes.
type Records = Vec<(Vec<u64>, Vec<u8>)>;

/// Record bytes: random, repetitive (so zstd has something to do) or zeros.
fn record_bytes(rng: &mut Rng, n: usize) -> Vec<u8> {
    match rng.below(3) {
        0 => rng.bytes(n),
        1 => {
            let k = 1 + rng.index(7);
            let pat = rng.bytes(k);
            (0..n).map(|i| pat[i % pat.len()]).collect()
        }
        _ => vec![0; n],
    }
}

/// Trains a dictionary from sample records, as a user of `zstd_dict` would.
fn trained_dictionary(rng: &mut Rng) -> Vec<u8> {
    let mut data = Vec::new();
    let mut sizes = Vec::new();
    for _ in 0..400 {
        let n = 16 + rng.index(240);
        data.extend(record_bytes(rng, n));
        sizes.push(n);
    }
    train_dictionary(&data, &sizes, 2048).expect("train a dictionary")
}

/// The reader checks an index up to this size whole at open, and a larger one
/// block by block as gathers first use it (a private constant of the reader).
const EAGER_INDEX_BYTES: usize = 1 << 20;

/// How large a base store is.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Size {
    /// Up to 10 records of a few dozen bytes.
    Tiny,
    /// A few records of 1 to 4 KiB, mostly incompressible: a damaged entry can
    /// then claim a stored length of KiBs inside its file, which lets a forged
    /// shape claim tens of MiB and still pass zstd's expansion bound.
    BigRecords,
    /// An index just over the size the reader checks whole at open, so that its
    /// blocks are checked lazily, as gathers use them.
    BigIndex,
}

fn build_base(
    rng: &mut Rng,
    kind: Kind,
    size: Size,
    dicts: &[Vec<u8>],
    root: &Path,
    id: u64,
) -> Base {
    let dtype = rng.pick(&ALL_DTYPES);
    let codec = rng.pick(&[Codec::Raw, Codec::Zstd, Codec::ZstdDict]);
    let shards = 1 + rng.below(4) as u8;
    let isz = dtype.itemsize();
    let big = |rng: &mut Rng| ((1024 + rng.below(3072)) / isz as u64).max(1);
    let (schema, records): (Schema, Records) = match kind {
        Kind::Dense => {
            let shape: Vec<u64> = match size {
                Size::Tiny => (0..rng.upto(3))
                    .map(|_| if rng.pct(10) { 0 } else { 1 + rng.below(5) })
                    .collect(),
                Size::BigRecords => vec![big(rng)],
                Size::BigIndex => vec![1; rng.upto(1)],
            };
            let s = Schema::dense(dtype, &shape, codec, shards.into()).expect("dense schema");
            let n = match size {
                Size::Tiny => rng.upto(10),
                Size::BigRecords => 1 + rng.upto(3),
                Size::BigIndex => EAGER_INDEX_BYTES / s.entry_size() + 1 + rng.upto(2000),
            };
            let rb = s.record_bytes().expect("small record") as usize;
            let recs = (0..n)
                .map(|_| {
                    let b = if size == Size::BigRecords && rng.pct(70) {
                        rng.bytes(rb)
                    } else {
                        record_bytes(rng, rb)
                    };
                    (shape.clone(), b)
                })
                .collect();
            (s, recs)
        }
        Kind::Ragged => {
            let ndim = 1 + rng.index(3);
            let s = Schema::ragged(dtype, ndim, codec, shards.into()).expect("ragged schema");
            let n = match size {
                Size::Tiny => rng.upto(10),
                Size::BigRecords => 1 + rng.upto(3),
                Size::BigIndex => EAGER_INDEX_BYTES / s.entry_size() + 1 + rng.upto(2000),
            };
            let recs = (0..n)
                .map(|_| {
                    let shape: Vec<u64> = match size {
                        Size::Tiny => (0..ndim)
                            .map(|_| if rng.pct(15) { 0 } else { 1 + rng.below(6) })
                            .collect(),
                        Size::BigRecords => (0..ndim)
                            .map(|k| if k == 0 { big(rng) } else { 1 })
                            .collect(),
                        Size::BigIndex => (0..ndim).map(|_| rng.below(2)).collect(),
                    };
                    let elems: u64 = shape.iter().product();
                    let n = elems as usize * isz;
                    let b = if size == Size::BigRecords && rng.pct(70) {
                        rng.bytes(n)
                    } else {
                        record_bytes(rng, n)
                    };
                    (shape, b)
                })
                .collect();
            (s, recs)
        }
    };
    let dict = (codec == Codec::ZstdDict).then(|| dicts[rng.index(dicts.len())].clone());
    let dest = root.join(format!("base-{id}"));
    let mut w = Writer::create(&dest, schema.clone(), dict.as_deref()).expect("create");
    let with_attrs = rng.pct(30);
    if with_attrs {
        w.set_attrs(format!("{{\"fuzz\": {id}}}").as_bytes())
            .expect("set_attrs");
    }
    // One to three appends, so that records span several write rounds.
    let mut at = 0;
    while at < records.len() {
        let end = if rng.pct(50) {
            records.len()
        } else {
            at + 1 + rng.index(records.len() - at)
        };
        let batch = &records[at..end];
        let values: Vec<u8> = batch.iter().flat_map(|(_, b)| b.iter().copied()).collect();
        match kind {
            Kind::Dense => w
                .append_dense(batch.len(), &values, Source::Memory, &Sequential)
                .expect("append_dense"),
            Kind::Ragged => {
                let mut cu = vec![0i32];
                for (_, b) in batch {
                    cu.push(cu[cu.len() - 1] + (b.len() / isz) as i32);
                }
                let shapes: Vec<u64> = batch.iter().flat_map(|(s, _)| s.clone()).collect();
                let view = RaggedView {
                    values: &values,
                    cu_seqlens: &cu,
                    shapes: &shapes,
                };
                w.append_ragged(&view, Source::Memory, &Sequential)
                    .expect("append_ragged")
            }
        }
        at = end;
    }
    w.finish().expect("finish");
    let mut files = BTreeMap::new();
    for e in std::fs::read_dir(&dest).expect("read the store") {
        let e = e.expect("entry");
        files.insert(
            e.file_name().to_string_lossy().into_owned(),
            std::fs::read(e.path()).expect("read a store file"),
        );
    }
    std::fs::remove_dir_all(&dest).expect("remove the base store");
    let shapes: Vec<&Vec<u64>> = records.iter().map(|(s, _)| s).take(12).collect();
    let desc = format!(
        "{:?} {} {}, {} data file(s), ndim {}, item_shape {:?}, {}{} record(s), shapes {:?}{}",
        schema.kind,
        schema.dtype.name(),
        schema.codec.name(),
        schema.data_shards,
        schema.ndim,
        schema.item_shape,
        if with_attrs { "attributes, " } else { "" },
        records.len(),
        shapes,
        if records.len() > 12 { " ..." } else { "" },
    );
    Base {
        desc,
        schema,
        files,
        records,
    }
}

/// The damage done to one store, and how the result may be judged.
#[derive(Default)]
struct Damage {
    log: Vec<String>,
    /// Some checksum was recomputed over damaged bytes: the store is a forgery
    /// that no reader can tell from a genuine one without hashing the payload.
    forged: bool,
}

fn header_of(files: &Files, base: &Base) -> Header {
    let name = Path::new(HEADER_FILE);
    files
        .get(HEADER_FILE)
        .and_then(|b| Header::decode(b, name).ok())
        .unwrap_or_else(|| Header::decode(&base.files[HEADER_FILE], name).expect("pristine header"))
}

/// What [`reseal`] recomputes.
#[derive(Clone, Copy, Debug)]
enum Reseal {
    /// The whole-index checksum in the header (checked at open for small
    /// indexes, and by verify).
    IndexSum,
    /// `index.sum`, the per-block checksums, and its checksum in the header
    /// (what a gather checks for a large index).
    IndexBlocks,
    /// Both.
    Index,
    /// Every size and checksum the header holds.
    Everything,
}

fn block_sums(index: &[u8]) -> Vec<u8> {
    let mut s = IndexSums::default();
    s.update(index);
    s.finish()
}

/// Recomputes checksums over the files as they now are and writes a header with
/// a valid checksum of its own: the damage then looks deliberate.
fn reseal(files: &mut Files, base: &Base, how: Reseal, d: &mut Damage) {
    let mut h = header_of(files, base);
    let index = files.get(INDEX_FILE).cloned().unwrap_or_default();
    let blocks = |files: &mut Files, h: &mut Header| {
        if h.version >= 2 {
            let sums = block_sums(&index);
            h.index_sums_xxh3 = xxh3_64(&sums);
            files.insert(INDEX_SUMS_FILE.into(), sums);
        }
    };
    match how {
        Reseal::IndexSum => h.index_xxh3 = xxh3_64(&index),
        Reseal::IndexBlocks => blocks(files, &mut h),
        Reseal::Index => {
            h.index_xxh3 = xxh3_64(&index);
            blocks(files, &mut h);
        }
        Reseal::Everything => {
            h.index_xxh3 = xxh3_64(&index);
            h.index_size = index.len() as u64;
            let es = h.schema.entry_size() as u64;
            if let Some(n) = (index.len() as u64).checked_div(es) {
                h.record_count = n;
            }
            blocks(files, &mut h);
            let size_sum = |f: Option<&Vec<u8>>| f.map_or((0, 0), |b| (b.len() as u64, xxh3_64(b)));
            (h.dict_size, h.dict_xxh3) = size_sum(files.get(DICT_FILE));
            if h.version >= 2 {
                (h.attrs_size, h.attrs_xxh3) = size_sum(files.get(ATTRS_FILE));
            }
            h.shard_sizes = (0..h.shard_sizes.len())
                .map(|s| files.get(&data_file(s)).map_or(0, |f| f.len() as u64))
                .collect();
        }
    }
    files.insert(HEADER_FILE.into(), h.encode());
    d.forged = true;
    d.log
        .push(format!("reseal {how:?}: recomputed, valid header checksum"));
}

/// Sets the checksum of index entry `i` to the xxh3 of the bytes it now points
/// at, when it points inside an existing data file.
fn fix_entry_checksum(files: &mut Files, es: usize, i: usize, d: &mut Damage) {
    let Some(e) = files
        .get(INDEX_FILE)
        .and_then(|x| x.get(i * es..i * es + ENTRY_FIXED))
    else {
        return;
    };
    let offset = u64::from_le_bytes(e[0..8].try_into().expect("8"));
    let len = u32::from_le_bytes(e[8..12].try_into().expect("4")) as u64;
    let shard = e[12] as usize;
    let Some(data) = files.get(&data_file(shard)) else {
        return;
    };
    let Some(end) = offset.checked_add(len).filter(|&e| e <= data.len() as u64) else {
        return;
    };
    let sum = xxh3_64(&data[offset as usize..end as usize]);
    let idx = files.get_mut(INDEX_FILE).expect("index");
    idx[i * es + 16..i * es + 24].copy_from_slice(&sum.to_le_bytes());
    d.forged = true;
    d.log.push(format!(
        "index entry {i}: checksum recomputed over what it points at"
    ));
}

/// A logical record size of 2 times [`ALLOC_CAP`], now and then 4 times. The
/// format allows 2 GiB; a smaller figure finds the same bugs at less cost (a
/// debug build takes about a second to zero 64 MiB, which an over-allocating
/// call would do).
fn huge_record_bytes(rng: &mut Rng) -> u64 {
    (ALLOC_CAP as u64 * 2) << u64::from(rng.pct(10))
}

fn reseal_index(rng: &mut Rng, files: &mut Files, base: &Base, d: &mut Damage) {
    let how = match rng.below(10) {
        0..=5 => Reseal::Index,
        6 | 7 => Reseal::IndexSum,
        _ => Reseal::IndexBlocks,
    };
    reseal(files, base, how, d);
}

/// One random piece of damage.
fn damage_once(rng: &mut Rng, files: &mut Files, base: &Base, d: &mut Damage) {
    let names: Vec<String> = files.keys().cloned().collect();
    let any_file = |rng: &mut Rng| names[rng.index(names.len())].clone();
    let pristine =
        Header::decode(&base.files[HEADER_FILE], Path::new(HEADER_FILE)).expect("pristine");
    let es = base.schema.entry_size();
    let n_entries = files.get(INDEX_FILE).map_or(0, |i| i.len() / es);
    let isz = base.schema.dtype.itemsize() as u64;
    let ndim = base.schema.ndim;
    match rng.below(22) {
        // Flip bits anywhere.
        0..=3 => {
            let f = any_file(rng);
            let b = files.get_mut(&f).expect("file");
            if b.is_empty() {
                return;
            }
            let i = rng.index(b.len());
            let mask = (1u8 << rng.below(8)) | if rng.pct(20) { rng.next() as u8 } else { 0 };
            b[i] ^= mask;
            d.log.push(format!("flip {f}[{i}] ^= {mask:#04x}"));
        }
        // Truncate or extend a file.
        4 | 5 => {
            let f = any_file(rng);
            let b = files.get_mut(&f).expect("file");
            if rng.pct(50) {
                let n = rng.upto(b.len());
                b.truncate(n);
                d.log.push(format!("truncate {f} to {n} bytes"));
            } else {
                let k = 1 + rng.index(64);
                let zeros = rng.pct(50);
                let extra = if zeros { vec![0; k] } else { rng.bytes(k) };
                b.extend(extra);
                let what = if zeros { "zero" } else { "random" };
                d.log.push(format!("extend {f} by {k} {what} bytes"));
            }
        }
        // Remove a file, or add one that should not be there.
        6 => {
            if rng.pct(50) {
                let f = any_file(rng);
                files.remove(&f);
                d.log.push(format!("remove {f}"));
            } else {
                let f = match rng.below(4) {
                    0 => data_file(base.schema.data_shards as usize),
                    1 => DICT_FILE.to_string(),
                    2 => ATTRS_FILE.to_string(),
                    _ => INDEX_SUMS_FILE.to_string(),
                };
                let n = rng.upto(64);
                if !files.contains_key(&f) {
                    files.insert(f.clone(), rng.bytes(n));
                    d.log.push(format!("add {f} ({n} random bytes)"));
                }
            }
        }
        // Overwrite a field of an index entry, usually with the index checksums
        // recomputed so that the damage reaches the per-record checks.
        7..=12 if n_entries > 0 => {
            let i = rng.index(n_entries);
            let idx = files.get_mut(INDEX_FILE).expect("index");
            let e = &mut idx[i * es..(i + 1) * es];
            let offset = u64::from_le_bytes(e[0..8].try_into().expect("8"));
            let len = u32::from_le_bytes(e[8..12].try_into().expect("4")) as u64;
            let shard = e[12] as usize;
            let shard_len = pristine.shard_sizes.get(shard).copied().unwrap_or(0);
            let near = [offset, len, shard_len, offset.wrapping_add(len)];
            let fields = if base.schema.kind == Kind::Ragged {
                6
            } else {
                5
            };
            let what = match rng.below(fields) {
                0 => {
                    let v = match rng.below(4) {
                        // offset + length wraps past u64::MAX.
                        0 => (u64::MAX - len.saturating_sub(1)).wrapping_add(rng.below(3)),
                        1 => shard_len.saturating_sub(len) + rng.below(3),
                        _ => rng.interesting_u64(&near),
                    };
                    e[0..8].copy_from_slice(&v.to_le_bytes());
                    format!("offset = {v}")
                }
                1 => {
                    let v = rng.interesting_u64(&near) as u32;
                    e[8..12].copy_from_slice(&v.to_le_bytes());
                    format!("stored length = {v}")
                }
                2 => {
                    let v = if rng.pct(50) {
                        (base.schema.data_shards as u8).wrapping_add(rng.below(2) as u8)
                    } else {
                        rng.next() as u8
                    };
                    e[12] = v;
                    format!("data file = {v}")
                }
                3 => {
                    let k = 13 + rng.index(3);
                    e[k] = 1 + rng.below(255) as u8;
                    format!("reserved byte {k} = {}", e[k])
                }
                4 => {
                    let v = rng.next();
                    e[16..24].copy_from_slice(&v.to_le_bytes());
                    format!("checksum = {v:#x}")
                }
                _ => {
                    let k = rng.index(ndim);
                    let at = ENTRY_FIXED + 8 * k;
                    let cur = u64::from_le_bytes(e[at..at + 8].try_into().expect("8"));
                    let v = rng.interesting_u64(&[cur, (1 << 31) / isz]);
                    e[at..at + 8].copy_from_slice(&v.to_le_bytes());
                    format!("shape[{k}] = {v}")
                }
            };
            d.log.push(format!("index entry {i}: {what}"));
            if rng.pct(50) {
                fix_entry_checksum(files, es, i, d);
            }
            if rng.pct(85) {
                reseal_index(rng, files, base, d);
            }
        }
        // Swap two index entries (a consistent forgery).
        13 if n_entries > 1 => {
            let (a, b) = (rng.index(n_entries), rng.index(n_entries));
            let idx = files.get_mut(INDEX_FILE).expect("index");
            let ea = idx[a * es..(a + 1) * es].to_vec();
            let eb = idx[b * es..(b + 1) * es].to_vec();
            idx[a * es..(a + 1) * es].copy_from_slice(&eb);
            idx[b * es..(b + 1) * es].copy_from_slice(&ea);
            d.log.push(format!("swap index entries {a} and {b}"));
            reseal(files, base, Reseal::Index, d);
        }
        // A record claiming hundreds of MiB, made as believable as possible: its
        // entry spans a whole data file (so the stored length can hold that much
        // at zstd's best ratio), its checksum matches, the index checksums too.
        // Nothing may allocate the claimed size before finding the frame wrong.
        14 if n_entries > 0 => {
            let total = huge_record_bytes(rng) / isz;
            let i = if base.schema.kind == Kind::Dense {
                0
            } else {
                rng.index(n_entries)
            };
            if base.schema.kind == Kind::Dense {
                let mut h = header_of(files, base);
                h.schema.item_shape = vec![total];
                h.schema.ndim = 1;
                files.insert(HEADER_FILE.into(), h.encode());
            }
            let shard = rng.index(base.schema.data_shards as usize);
            let shard_len = files.get(&data_file(shard)).map_or(0, |f| f.len());
            let idx = files.get_mut(INDEX_FILE).expect("index");
            let e = &mut idx[i * es..(i + 1) * es];
            e[0..8].copy_from_slice(&0u64.to_le_bytes());
            e[8..12].copy_from_slice(&(shard_len.min(u32::MAX as usize) as u32).to_le_bytes());
            e[12] = shard as u8;
            if base.schema.kind == Kind::Ragged {
                for k in 0..ndim {
                    let v: u64 = if k == 0 { total } else { 1 };
                    e[ENTRY_FIXED + 8 * k..ENTRY_FIXED + 8 * k + 8]
                        .copy_from_slice(&v.to_le_bytes());
                }
            }
            d.log.push(format!(
                "record {i} claims {} bytes ({:?} {total}), its entry spans all {shard_len} bytes of {}",
                total * isz,
                base.schema.kind,
                data_file(shard)
            ));
            fix_entry_checksum(files, es, i, d);
            reseal(files, base, Reseal::Index, d);
        }
        // Rewrite a header field, keeping the header checksum valid.
        15..=19 => {
            let mut h = header_of(files, base);
            let near = [h.record_count, h.index_size, h.dict_size, h.attrs_size];
            let what = match rng.below(15) {
                0 => {
                    h.record_count = rng.interesting_u64(&near);
                    format!("record_count = {}", h.record_count)
                }
                1 => {
                    h.index_size = rng.interesting_u64(&near);
                    format!("index_size = {}", h.index_size)
                }
                2 => {
                    h.dict_size = rng.interesting_u64(&near);
                    format!("dict_size = {}", h.dict_size)
                }
                3 if !h.shard_sizes.is_empty() => {
                    let k = rng.index(h.shard_sizes.len());
                    h.shard_sizes[k] = rng.interesting_u64(&[h.shard_sizes[k]]);
                    format!("shard_sizes[{k}] = {}", h.shard_sizes[k])
                }
                4 if h.schema.kind == Kind::Dense => {
                    // Records far larger than the store: nothing may allocate them.
                    let total = huge_record_bytes(rng) / isz;
                    h.schema.item_shape = vec![total];
                    h.schema.ndim = 1;
                    format!("item_shape = [{total}] ({} bytes a record)", total * isz)
                }
                5 if h.schema.kind == Kind::Dense => {
                    let nd = rng.upto(3);
                    h.schema.item_shape = (0..nd)
                        .map(|_| {
                            if rng.pct(50) {
                                rng.below(9)
                            } else {
                                rng.interesting_u64(&[])
                            }
                        })
                        .collect();
                    h.schema.ndim = nd;
                    format!("item_shape = {:?}", h.schema.item_shape)
                }
                6 => {
                    h.schema.dtype = rng.pick(&ALL_DTYPES);
                    format!("dtype = {}", h.schema.dtype.name())
                }
                7 => {
                    h.schema.codec = rng.pick(&[Codec::Raw, Codec::Zstd, Codec::ZstdDict]);
                    format!("codec = {}", h.schema.codec.name())
                }
                8 => {
                    h.schema.ndim = if rng.pct(80) {
                        rng.upto(4)
                    } else {
                        rng.upto(40)
                    };
                    if h.schema.kind == Kind::Dense {
                        h.schema.item_shape.resize(h.schema.ndim, 1);
                    }
                    format!("ndim = {}", h.schema.ndim)
                }
                9 => {
                    h.schema.kind = match h.schema.kind {
                        Kind::Dense => Kind::Ragged,
                        Kind::Ragged => Kind::Dense,
                    };
                    h.schema.ndim = h.schema.ndim.max(1);
                    h.schema.item_shape = match h.schema.kind {
                        Kind::Dense => vec![1; h.schema.ndim],
                        Kind::Ragged => Vec::new(),
                    };
                    format!("kind = {:?}", h.schema.kind)
                }
                10 => {
                    let s = 1 + rng.below(6) as u32;
                    h.schema.data_shards = s;
                    if rng.pct(70) {
                        h.shard_sizes.resize(s as usize, 0);
                    }
                    format!("data_shards = {s} ({} sizes)", h.shard_sizes.len())
                }
                11 => {
                    h.version = rng.pick(&[0, 1, 2, 3, u32::MAX]);
                    format!("version = {}", h.version)
                }
                12 => {
                    h.attrs_size = rng.interesting_u64(&[h.attrs_size, MAX_ATTRS_BYTES]);
                    format!("attrs_size = {}", h.attrs_size)
                }
                13 => {
                    h.index_sums_xxh3 = rng.next();
                    h.attrs_xxh3 = if rng.pct(50) {
                        rng.next()
                    } else {
                        h.attrs_xxh3
                    };
                    "index_sums_xxh3, attrs_xxh3 = random".to_string()
                }
                _ => {
                    h.index_xxh3 = rng.next();
                    h.dict_xxh3 = if rng.pct(50) { rng.next() } else { h.dict_xxh3 };
                    "index_xxh3, dict_xxh3 = random".to_string()
                }
            };
            files.insert(HEADER_FILE.into(), h.encode());
            d.forged = true;
            d.log.push(format!("header (valid checksum): {what}"));
        }
        // Damage inside the payload only, in place.
        _ => {
            let shard = rng.index(base.schema.data_shards as usize);
            let f = data_file(shard);
            let Some(b) = files.get_mut(&f) else { return };
            if b.is_empty() {
                return;
            }
            let i = rng.index(b.len());
            let n = (1 + rng.index(8)).min(b.len() - i);
            for x in &mut b[i..i + n] {
                *x = x.wrapping_add(1 + rng.below(255) as u8);
            }
            d.log.push(format!("payload {f}[{i}..{}] changed", i + n));
        }
    }
}

/// What the damaged files look like next to the pristine ones.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Change {
    /// Byte for byte the store that was written.
    None,
    /// Only bytes inside data files changed, every file keeping its size.
    PayloadOnly,
    /// Anything else.
    Other,
}

/// How the files differ from the pristine ones, and whether payload bytes did.
fn classify(files: &Files, base: &Base) -> (Change, bool) {
    let mut payload = false;
    let mut other = false;
    for name in files.keys().chain(base.files.keys()) {
        match (files.get(name), base.files.get(name)) {
            (Some(a), Some(b)) if a == b => {}
            (Some(a), Some(b)) if a.len() == b.len() && name.starts_with("data-") => payload = true,
            _ => other = true,
        }
    }
    let change = match (payload, other) {
        (false, false) => Change::None,
        (true, false) => Change::PayloadOnly,
        _ => Change::Other,
    };
    (change, payload)
}

/// What the checks may assume about a store's contents.
struct Expect<'a> {
    base: &'a Base,
    change: Change,
    payload_changed: bool,
    forged: bool,
}

/// Whether `out` (a gather of `idx`, Dense records end to end or a Ragged
/// batch laid out by `layout`) holds exactly the records written.
fn matches_written(
    base: &Base,
    idx: &[u64],
    out: &[u8],
    layout: Option<&zrecord::RaggedLayout>,
) -> bool {
    let isz = base.schema.dtype.itemsize();
    let Some(layout) = layout else {
        let mut at = 0;
        for &i in idx {
            let rec = &base.records[i as usize].1;
            if out.get(at..at + rec.len()) != Some(&rec[..]) {
                return false;
            }
            at += rec.len();
        }
        return at == out.len();
    };
    let mut values = Vec::new();
    let mut cu = vec![0i32];
    let mut shapes = Vec::new();
    for &i in idx {
        let (shape, bytes) = &base.records[i as usize];
        values.extend_from_slice(bytes);
        cu.push(cu[cu.len() - 1] + (bytes.len() / isz) as i32);
        shapes.extend(shape.iter().flat_map(|d| d.to_le_bytes()));
    }
    let cu: Vec<u8> = cu.iter().flat_map(|c| c.to_le_bytes()).collect();
    out.len() == layout.total
        && out.get(..layout.values_bytes) == Some(&values[..])
        && out.get(layout.cu_offset..layout.cu_offset + cu.len()) == Some(&cu[..])
        && out.get(layout.shapes_offset..layout.total) == Some(&shapes[..])
}

/// Runs every read entry point of the store at `dir`: open (plain or checked),
/// gathers through each API at random positions, verify. `expect` is `None`
/// when replaying a saved case (then only panics, hangs and over-allocation
/// count).
fn check_store(
    dir: &Path,
    expect: Option<&Expect<'_>>,
    rng: &mut Rng,
    p: &Progress,
    r: &mut Report,
) -> Vec<Finding> {
    let mut found = Vec::new();
    macro_rules! call {
        ($stage:expr, $body:expr) => {{
            p.at($stage);
            let (res, peak) = tracked(|| catch(|| $body));
            if peak > ALLOC_CAP {
                found.push(Finding {
                    stage: $stage,
                    fail: Fail::OverAlloc(peak),
                });
            }
            match res {
                Ok(v) => v,
                Err(panic) => {
                    r.count(format!("panic in {}", $stage.name()));
                    found.push(Finding {
                        stage: $stage,
                        fail: Fail::Panic(panic),
                    });
                    return found;
                }
            }
        }};
    }
    let wrong = |stage: Stage, what: &'static str, detail: String| Finding {
        stage,
        fail: Fail::Wrong(what, detail),
    };
    let checked = rng.pct(30);
    let intact = expect.is_some_and(|e| e.change == Change::None);
    // An Ok gather must return exactly the records written when the store is
    // intact, or damaged only where open's checks (header, index, dictionary
    // checksums, file sizes) or the lazy index block checks must catch it.
    // Damaged payload bytes are caught only by `verify` and by checked reads
    // (`ReadOptions::checked`), and by zstd when they break a frame: a plain
    // gather does not hash what it reads, so it may return them. Forged stores
    // (checksums recomputed over damaged bytes) are consistent by construction:
    // anything but a panic, a hang or an over-allocation is acceptable there.
    let must_match = expect.is_some_and(|e| !e.forged && (!e.payload_changed || checked));

    let opened = if checked {
        call!(
            Stage::Open,
            Store::open_with(dir, ReadOptions { checked: true })
        )
    } else {
        call!(Stage::Open, Store::open(dir))
    };
    let store = match opened {
        Ok(s) => s,
        Err(e) => {
            r.count("open Err");
            if intact {
                found.push(wrong(
                    Stage::Open,
                    "an intact store does not open",
                    e.to_string(),
                ));
            }
            return found;
        }
    };
    r.count(if checked {
        "open Ok (checked reads)"
    } else {
        "open Ok"
    });
    let len = store.len();
    let schema = store.schema().clone();
    if must_match {
        let base = expect.map(|e| e.base).expect("expectation");
        if len != base.records.len() as u64 || schema != base.schema {
            found.push(wrong(
                Stage::Open,
                "opened with another schema or record count",
                format!(
                    "{schema:?}, {len} records; written {:?}, {} records",
                    base.schema,
                    base.records.len()
                ),
            ));
            return found;
        }
    }

    let pars: [&dyn Parallel; 3] = [&Sequential, &Split(2), &Split(5)];
    for _ in 0..3 {
        let k = rng.upto(8);
        let idx: Vec<u64> = (0..k)
            .map(|_| match rng.below(20) {
                _ if len == 0 => rng.below(3),
                0 => len + rng.below(3),
                1 => u64::MAX - rng.below(2),
                _ => rng.below(len),
            })
            .collect();
        let in_range = idx.iter().all(|&i| i < len);
        let par = pars[rng.index(pars.len())];
        let base = expect.map(|e| e.base);
        let judge = |stage: Stage,
                     res: &zrecord::Result<()>,
                     out: &[u8],
                     layout: Option<&zrecord::RaggedLayout>,
                     r: &mut Report,
                     found: &mut Vec<Finding>| {
            r.count(format!(
                "{} {}",
                stage.name(),
                if res.is_ok() { "Ok" } else { "Err" }
            ));
            if res.is_ok() && !in_range {
                found.push(wrong(
                    stage,
                    "Ok with a position out of range",
                    format!("{idx:?} of {len}"),
                ));
            }
            if intact && in_range && res.is_err() {
                found.push(wrong(stage, "Err on an intact store", format!("{res:?}")));
            }
            let produced_data = !matches!(stage, Stage::Plan | Stage::RaggedLayout);
            if let (Ok(()), true, Some(base)) = (res, must_match && in_range && produced_data, base)
            {
                if !matches_written(base, &idx, out, layout) {
                    found.push(wrong(
                        stage,
                        "returned records that differ from the ones written",
                        format!("positions {idx:?}"),
                    ));
                }
            }
        };
        if rng.pct(50) {
            // The two-step API: plan, then gather into a buffer of the planned size.
            let plan = match call!(Stage::Plan, store.plan(&idx, &Sequential)) {
                Ok(plan) => plan,
                Err(e) => {
                    let res = Err(e);
                    judge(Stage::Plan, &res, &[], None, r, &mut found);
                    continue;
                }
            };
            judge(Stage::Plan, &Ok(()), &[], None, r, &mut found);
            let n = plan.output_len();
            if n > OUT_CAP {
                r.count("gather skipped: output over the harness cap");
                continue;
            }
            let mut out = vec![0u8; n];
            if n > 0 && rng.pct(10) {
                let short = call!(Stage::Gather, store.gather(&plan, &mut out[1..], par));
                if short.is_ok() {
                    found.push(wrong(
                        Stage::Gather,
                        "accepted a wrong-sized output",
                        format!("{idx:?}"),
                    ));
                }
            }
            let res = call!(Stage::Gather, store.gather(&plan, &mut out, par));
            let layout = plan.layout().cloned();
            judge(Stage::Gather, &res, &out, layout.as_ref(), r, &mut found);
            continue;
        }
        match schema.kind {
            Kind::Dense => {
                let rb = schema.record_bytes().unwrap_or(0) as usize;
                let Some(need) = idx.len().checked_mul(rb).filter(|&n| n <= OUT_CAP) else {
                    r.count("gather skipped: output over the harness cap");
                    // A wrong-sized buffer must be refused, whatever the size.
                    let res = call!(
                        Stage::GatherDense,
                        store.gather_dense(&idx, &mut [0u8; 8], par)
                    );
                    if res.is_ok() {
                        found.push(wrong(
                            Stage::GatherDense,
                            "accepted a wrong-sized output",
                            format!("{idx:?}"),
                        ));
                    }
                    continue;
                };
                let mut out = vec![0u8; need];
                let res = call!(Stage::GatherDense, store.gather_dense(&idx, &mut out, par));
                judge(Stage::GatherDense, &res, &out, None, r, &mut found);
            }
            Kind::Ragged => {
                let layout = match call!(Stage::RaggedLayout, store.ragged_layout(&idx)) {
                    Ok(l) => l,
                    Err(e) => {
                        judge(Stage::RaggedLayout, &Err(e), &[], None, r, &mut found);
                        continue;
                    }
                };
                judge(Stage::RaggedLayout, &Ok(()), &[], None, r, &mut found);
                if !in_range || layout.total > OUT_CAP {
                    r.count("gather skipped: output over the harness cap");
                    continue;
                }
                let mut out = vec![0u8; layout.total];
                let res = call!(
                    Stage::GatherRagged,
                    store.gather_ragged(&idx, &layout, &mut out, par)
                );
                judge(
                    Stage::GatherRagged,
                    &res,
                    &out,
                    Some(&layout),
                    r,
                    &mut found,
                );
            }
        }
    }

    // The other kind's gather must be refused.
    if rng.pct(20) {
        let res = call!(
            Stage::WrongKind,
            match schema.kind {
                Kind::Dense => store.ragged_layout(&[0]).map(|_| ()),
                Kind::Ragged => store.gather_dense(&[], &mut [], &Sequential),
            }
        );
        if res.is_ok() {
            found.push(wrong(
                Stage::WrongKind,
                "a gather of the other kind succeeded",
                String::new(),
            ));
        }
    }

    let par = pars[rng.index(pars.len())];
    let res = call!(Stage::Verify, store.verify(par));
    r.count(if res.is_ok() {
        "verify Ok"
    } else {
        "verify Err"
    });
    if let Some(e) = expect {
        if e.change == Change::None && res.is_err() {
            found.push(wrong(
                Stage::Verify,
                "rejects an intact store",
                format!("{res:?}"),
            ));
        }
        if !e.forged && e.payload_changed {
            r.count(if res.is_ok() {
                "payload damaged, not forged: verify Ok"
            } else {
                "payload damaged, not forged: verify Err"
            });
            if res.is_ok() {
                found.push(wrong(
                    Stage::Verify,
                    "missed damaged payload bytes",
                    String::new(),
                ));
            }
        }
    }
    found
}

/// Where damaged stores are written, one directory per case: a memory-backed
/// file system when there is one (`/dev/shm`), because creating and removing a
/// few files per case on a journaling disk costs more than the case itself.
/// `ZRECORD_FUZZ_TMPDIR` chooses another place.
fn scratch_dir() -> tempfile::TempDir {
    let place = std::env::var_os("ZRECORD_FUZZ_TMPDIR")
        .map(PathBuf::from)
        .or_else(|| Some(PathBuf::from("/dev/shm")).filter(|p| p.is_dir()));
    place
        .and_then(|p| {
            tempfile::Builder::new()
                .prefix("zrecord-fuzz-")
                .tempdir_in(p)
                .ok()
        })
        .unwrap_or_else(|| tempfile::tempdir().expect("a temporary directory"))
}

fn write_files(dir: &Path, files: &Files) {
    std::fs::create_dir_all(dir).expect("create the case directory");
    for (name, bytes) in files {
        std::fs::write(dir.join(name), bytes).expect("write a case file");
    }
}

fn fuzz_stores(kind: Kind, target: &str) {
    let budget = budget();
    let seed = seed() ^ (kind as u64 + 1).wrapping_mul(0xA076_1D64_78BD_642F);
    let (report, elapsed) = run_target(target, move |p, shared| {
        p.at(Stage::Setup);
        let mut r = Report::default();
        let mut rng = Rng::new(seed);
        let tmp = scratch_dir();
        let dicts: Vec<Vec<u8>> = (0..2).map(|_| trained_dictionary(&mut rng)).collect();
        let mut next_id = 0u64;
        // Slot 0 holds a store with a large index, slots 1..4 stores with larger
        // records, the rest tiny stores. A large index costs tens of ms a case
        // (verify reads every record), so it gets 1% of the cases.
        let class = |slot: usize| match slot {
            0 => Size::BigIndex,
            1..=3 => Size::BigRecords,
            _ => Size::Tiny,
        };
        let mut bases: Vec<Base> = (0..16)
            .map(|slot| {
                p.at(Stage::Setup);
                next_id += 1;
                build_base(&mut rng, kind, class(slot), &dicts, tmp.path(), next_id)
            })
            .collect();
        let start = Instant::now();
        let mut case = 0u64;
        while start.elapsed() < budget && !p.stop.load(Ordering::Relaxed) {
            case += 1;
            if case % 256 == 0 {
                p.at(Stage::Setup);
                next_id += 1;
                let k = rng.index(bases.len());
                bases[k] = build_base(&mut rng, kind, class(k), &dicts, tmp.path(), next_id);
            }
            let slot = match rng.below(100) {
                0 => 0,
                1..=15 => 1 + rng.index(3),
                _ => 4 + rng.index(bases.len() - 4),
            };
            let base = &bases[slot];
            let mut files = base.files.clone();
            let mut d = Damage::default();
            // 1 case in 32 is left intact: it must read back exactly.
            if rng.below(32) != 0 {
                for _ in 0..1 + rng.below(3) {
                    damage_once(&mut rng, &mut files, base, &mut d);
                }
                if rng.pct(20) {
                    let how = if rng.pct(70) {
                        Reseal::Everything
                    } else {
                        Reseal::Index
                    };
                    reseal(&mut files, base, how, &mut d);
                }
            }
            let (change, payload_changed) = classify(&files, base);
            let expect = Expect {
                base,
                change,
                payload_changed,
                forged: d.forged,
            };
            let dir = tmp.path().join(format!("case-{case}"));
            write_files(&dir, &files);
            let description = format!(
                "seed {seed:#x} case {case}\nstore: {}\ndamage:\n  {}\n",
                base.desc,
                if d.log.is_empty() {
                    "(none)".into()
                } else {
                    d.log.join("\n  ")
                }
            );
            p.set_input(Input::Store(dir.clone(), description.clone()));
            r.cases += 1;
            r.count(match (change, d.forged) {
                (Change::None, _) => "case: intact",
                (_, true) => "case: forged (checksums recomputed)",
                (Change::PayloadOnly, false) => "case: payload damaged only",
                (Change::Other, false) => "case: damaged, no checksum recomputed",
            });
            let mut case_rng = Rng::new(rng.next());
            for f in check_store(&dir, Some(&expect), &mut case_rng, p, &mut r) {
                r.found(&f, &description, true, |sig| {
                    save_store_case(sig, &dir, &description)
                });
            }
            let _ = std::fs::remove_dir_all(&dir);
            if case % 64 == 0 {
                r.publish(shared);
            }
        }
        r.publish(shared);
    });
    report.finish(target, elapsed);
}

#[test]
fn fuzz_dense_stores() {
    fuzz_stores(Kind::Dense, "fuzz_dense_stores");
}

#[test]
fn fuzz_ragged_stores() {
    fuzz_stores(Kind::Ragged, "fuzz_ragged_stores");
}

// ---------------------------------------------------------------------------
// Replaying saved regressions.

#[test]
fn replay_fuzz_regressions() {
    let dir = regressions_dir();
    let (report, elapsed) = run_target("replay", move |p, shared| {
        let mut r = Report::default();
        let Ok(entries) = std::fs::read_dir(&dir) else {
            return;
        };
        let mut paths: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
        paths.sort();
        for path in paths {
            let name = path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            if path.is_dir() {
                r.cases += 1;
                p.set_input(Input::Store(path.clone(), name.clone()));
                let mut rng = Rng::new(xxh3_64(name.as_bytes()));
                // Several passes: the gathers pick random positions.
                for _ in 0..3 {
                    for f in check_store(&path, None, &mut rng, p, &mut r) {
                        r.found(&f, &name, false, |_| None);
                    }
                }
            } else if name.ends_with(".bin") {
                r.cases += 1;
                let b = std::fs::read(&path).expect("read a saved header");
                p.set_input(Input::Header(b.clone()));
                if let Some(f) = check_header(&b, p, &mut r) {
                    r.found(&f, &name, false, |_| None);
                }
            }
            r.publish(shared);
        }
    });
    report.finish("replay_fuzz_regressions", elapsed);
}

// ---------------------------------------------------------------------------
// Reproductions of the failures found, each minimal and deterministic: they
// failed before their fix and now guard it.

/// Writes a one-record store in a new temporary directory.
fn one_record_store(
    schema: Schema,
    dict: Option<&[u8]>,
    record: &[u8],
) -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().expect("a temporary directory");
    let dest = tmp.path().join("s");
    let mut w = Writer::create(&dest, schema, dict).expect("create");
    w.append_dense(1, record, Source::Memory, &Sequential)
        .expect("append");
    w.finish().expect("finish");
    (tmp, dest)
}

/// Rewrites the store's header through `change`, with a valid header checksum.
fn rewrite_header(dest: &Path, change: impl FnOnce(&mut Header)) {
    let hp = dest.join(HEADER_FILE);
    let mut h = Header::decode(&std::fs::read(&hp).expect("read header"), &hp).expect("decode");
    change(&mut h);
    std::fs::write(&hp, h.encode()).expect("write header");
}

/// A dictionary whose checksum matches but whose entropy tables are damaged
/// makes `ZSTD_createDDict` return NULL, and zstd-safe's `DDict::create`
/// panics on NULL ("zstd returned null pointer when creating dict",
/// zstd-safe-7.4.1/src/lib.rs:2132) inside `Decoder::new`, called by
/// `Store::open`. Found by `fuzz_ragged_stores` (flip of `dict.bin[8]`, then the
/// dictionary checksum recomputed). `DDict::try_create` returns `None` instead.
#[test]
fn a_damaged_dictionary_is_an_error_at_open() {
    let dict = trained_dictionary(&mut Rng::new(1));
    let schema = Schema::dense(DType::U8, &[64], Codec::ZstdDict, 1).expect("schema");
    let (_tmp, dest) = one_record_store(schema, Some(&dict), &[7u8; 64]);
    let dp = dest.join(DICT_FILE);
    let mut d = std::fs::read(&dp).expect("read dict");
    d[8] ^= 0x02;
    std::fs::write(&dp, &d).expect("write dict");
    rewrite_header(&dest, |h| h.dict_xxh3 = xxh3_64(&d));
    match catch(|| Store::open(&dest).map(|_| ())) {
        Ok(r) => assert!(r.is_err(), "a damaged dictionary opened"),
        Err(p) => panic!("Store::open panicked at {}: {}", p.at, p.msg),
    }
}

/// The same damaged dictionary handed to `Writer::create` panics in zstd-safe's
/// `CDict::create` (zstd-safe-7.4.1/src/lib.rs:2035) inside `Encoder::new`,
/// instead of returning an error (Python: `dict_bytes` that are not a valid
/// zstd dictionary). Found while reproducing the reader's case.
#[test]
fn a_damaged_dictionary_is_refused_by_the_writer() {
    let mut dict = trained_dictionary(&mut Rng::new(1));
    dict[8] ^= 0x02;
    let tmp = tempfile::tempdir().expect("a temporary directory");
    let schema = Schema::dense(DType::U8, &[64], Codec::ZstdDict, 1).expect("schema");
    match catch(|| Writer::create(&tmp.path().join("s"), schema, Some(&dict)).map(|_| ())) {
        Ok(r) => assert!(r.is_err(), "a damaged dictionary was accepted"),
        Err(p) => panic!("Writer::create panicked at {}: {}", p.at, p.msg),
    }
}

/// `verify` sizes its decoding scratch from the record's logical size (the
/// schema's item shape, or a Ragged entry's shape) before it looks at the size
/// the zstd frame declares; the only bound is `stored_len * MAX_EXPANSION`
/// (32768). A header rewritten to claim 128 MiB records (valid header checksum)
/// over a 4 KiB frame makes it allocate and zero 128 MiB, then fail to decode.
/// A stored record of 64 KiB lets a claim of the full 2 GiB through. `plan`
/// (every gather) checks the frame's declared size first and allocates nothing.
/// Found by `fuzz_dense_stores` and `fuzz_ragged_stores`.
#[test]
fn verify_allocates_nothing_for_sizes_frames_do_not_hold() {
    let record = Rng::new(2).bytes(4096);
    let schema = Schema::dense(DType::U8, &[4096], Codec::Zstd, 1).expect("schema");
    let (_tmp, dest) = one_record_store(schema, None, &record);
    rewrite_header(&dest, |h| h.schema.item_shape = vec![128 << 20]);
    let store = Store::open(&dest).expect("the forged header opens");
    let (res, peak) = tracked(|| store.verify(&Sequential));
    assert!(res.is_err(), "verify accepted the forged store");
    assert!(
        peak <= ALLOC_CAP,
        "verify held {peak} bytes at once for a store of {} bytes",
        4096
    );
}
