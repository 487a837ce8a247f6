//! Storage options as callers give them (names with strings, integers, numbers
//! or booleans), split once into loaderx's own [`FetchOptions`] and `object_store`'s
//! configuration, which takes strings. Every refused value names its key.

use std::fmt;
use std::time::Duration;

use loaderx_gather::{Error, Result};

/// A storage option's value as the caller gave it.
#[derive(Clone, Debug, PartialEq)]
pub enum OptionValue {
    /// `True` or `False`.
    Bool(bool),
    /// An integer.
    Int(i64),
    /// A number with a fraction.
    Float(f64),
    /// A string, as `object_store` reads its own options.
    Str(String),
}

impl fmt::Display for OptionValue {
    /// The value as the caller wrote it in Python, for messages.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OptionValue::Bool(true) => f.write_str("True"),
            OptionValue::Bool(false) => f.write_str("False"),
            OptionValue::Int(n) => write!(f, "{n}"),
            OptionValue::Float(x) => f.write_str(&python_float(*x)),
            OptionValue::Str(s) => write!(f, "{s:?}"),
        }
    }
}

/// `x` as Python's `repr` writes it: Rust's shortest form, which switches to
/// an exponent where Python does, with the exponent's sign and at least two
/// digits (`9.3e+18`, `1e-05`).
fn python_float(x: f64) -> String {
    let shortest = format!("{x:?}");
    match shortest.split_once('e') {
        Some((mantissa, exp)) => {
            let (sign, digits) = match exp.strip_prefix('-') {
                Some(d) => ('-', d),
                None => ('+', exp),
            };
            format!("{mantissa}e{sign}{digits:0>2}")
        }
        None => shortest,
    }
}

impl OptionValue {
    /// The string `object_store` parses for this value.
    pub(crate) fn config_string(&self) -> String {
        match self {
            OptionValue::Bool(b) => b.to_string(),
            OptionValue::Int(n) => n.to_string(),
            OptionValue::Float(x) => x.to_string(),
            OptionValue::Str(s) => s.clone(),
        }
    }

    /// A yes or no: a boolean, or `"true"`, `"false"`, `"1"` or `"0"`.
    pub(crate) fn flag(&self, key: &str) -> Result<bool> {
        let parsed = match self {
            OptionValue::Bool(b) => Some(*b),
            OptionValue::Str(s) => match s.trim().to_ascii_lowercase().as_str() {
                "true" | "1" => Some(true),
                "false" | "0" => Some(false),
                _ => None,
            },
            OptionValue::Int(_) | OptionValue::Float(_) => None,
        };
        parsed.ok_or_else(|| {
            Error::invalid(format!(
                "storage option {key} must be True or False, got {self}"
            ))
        })
    }

    /// A count: a non-negative integer, or its decimal string.
    fn count(&self, key: &str) -> Result<u64> {
        let parsed = match self {
            OptionValue::Int(n) => u64::try_from(*n).ok(),
            OptionValue::Str(s) => s.trim().parse::<u64>().ok(),
            OptionValue::Bool(_) | OptionValue::Float(_) => None,
        };
        parsed.ok_or_else(|| {
            Error::invalid(format!(
                "storage option {key} must be a non-negative integer, got {self}"
            ))
        })
    }

    /// A positive duration for `object_store`'s client: a number of seconds (or
    /// its decimal string), or a duration string as `object_store` writes them.
    fn client_duration(&self, key: &str) -> Result<Duration> {
        let d = match self {
            OptionValue::Str(s) if s.trim().parse::<f64>().is_err() => {
                humantime::parse_duration(s.trim()).map_err(|_| {
                    Error::invalid(format!(
                        "storage option {key} must be a number of seconds or a duration such \
                         as \"30s\" or \"1m 30s\", got {self}"
                    ))
                })?
            }
            _ => self.seconds(key)?,
        };
        self.at_most_longest(key, d)?;
        if d.is_zero() {
            return Err(Error::invalid(format!(
                "storage option {key} must be positive, got {self}"
            )));
        }
        Ok(d)
    }

    /// A positive duration: a number of seconds, or its decimal string.
    fn positive_seconds(&self, key: &str) -> Result<Duration> {
        Some(self.seconds(key)?)
            .filter(|t| !t.is_zero())
            .ok_or_else(|| {
                Error::invalid(format!("storage option {key} must be positive, got {self}"))
            })
    }

    /// A duration: a non-negative number of seconds, or its decimal string.
    fn seconds(&self, key: &str) -> Result<Duration> {
        let secs = match self {
            OptionValue::Int(n) => Some(*n as f64),
            OptionValue::Float(x) => Some(*x),
            OptionValue::Str(s) => s.trim().parse::<f64>().ok(),
            OptionValue::Bool(_) => None,
        };
        let d = secs
            .and_then(|s| Duration::try_from_secs_f64(s).ok())
            .ok_or_else(|| {
                Error::invalid(format!(
                    "storage option {key} must be a non-negative number of seconds, got {self}"
                ))
            })?;
        self.at_most_longest(key, d)?;
        Ok(d)
    }

    /// Refuses a duration longer than [`LONGEST`], naming `key`.
    fn at_most_longest(&self, key: &str, d: Duration) -> Result<()> {
        if d > LONGEST {
            return Err(Error::invalid(format!(
                "storage option {key} must be at most {} seconds (about 31 years), got {self}",
                LONGEST.as_secs()
            )));
        }
        Ok(())
    }
}

/// The longest duration an option takes. Timers add durations to the present
/// instant, and the HTTP client panics where that overflows (from about 9.2e18
/// seconds on); no wait of a training job needs more than this.
pub const LONGEST: Duration = Duration::from_secs(1_000_000_000);

/// `object_store`'s HTTP client options that are durations. It reads them as
/// strings such as `"30s"` or `"1m 30s"`; loaderx also takes a number of
/// seconds, as it takes its own durations, and refuses zero, which would fail
/// every request at once.
const CLIENT_DURATIONS: [&str; 6] = [
    "connect_timeout",
    "http2_keep_alive_interval",
    "http2_keep_alive_timeout",
    "pool_idle_timeout",
    "read_timeout",
    "timeout",
];

/// The storage options loaderx reads itself rather than passing to
/// `object_store`: `from_env` and the [`FetchOptions`].
pub const LOADERX_OPTIONS: [&str; 11] = [
    "from_env",
    "max_concurrency",
    "coalesce_gap",
    "max_request_bytes",
    "retries",
    "retry_backoff",
    "request_timeout",
    "index_memory_bytes",
    "first_byte_timeout",
    "deadline",
    "read_ahead_bytes",
];

/// How a remote store fetches. Each field is a storage option of the same name.
#[derive(Clone, Debug, PartialEq)]
pub struct FetchOptions {
    /// Most requests in flight at once for one opened store, shared by all its
    /// gathers, including those the Loader starts ahead of time.
    pub max_concurrency: usize,
    /// Two ranges of one file this close (in bytes) are fetched by one request,
    /// the bytes between them included.
    pub coalesce_gap: u64,
    /// A request stops growing past this many bytes (a longer record is still
    /// one request), so that a long run of records is fetched in parallel parts.
    /// The default is one cache block: longer requests spread the same bytes
    /// over fewer connections, and a cold cache behind high latency filled
    /// more slowly with them (docs/benchmarks.md, "Remote stores").
    pub max_request_bytes: u64,
    /// How many times a failed request is retried before the read fails.
    pub retries: u32,
    /// The wait before the first retry; each further retry waits twice as long,
    /// up to [`MAX_BACKOFF`].
    pub retry_backoff: Duration,
    /// Longest one attempt may take, body included, before it counts as failed.
    pub request_timeout: Duration,
    /// Most bytes of index blocks the store keeps in memory between reads
    /// (see [`crate::DEFAULT_INDEX_MEMORY_BYTES`]); zero keeps none.
    pub index_memory_bytes: u64,
    /// Longest one attempt may wait for the response to begin (its status and
    /// headers), before it counts as failed: a server that accepts a
    /// connection and never answers costs this much per attempt, not
    /// `request_timeout`.
    pub first_byte_timeout: Duration,
    /// Longest an open, a gather or a step of a verify may take in all, every
    /// request, retry and wait between retries included. When it passes, the
    /// operation fails with the last attempt's failure.
    pub deadline: Duration,
    /// Most bytes of blocks a Loader's read-ahead keeps fetched ahead of the
    /// gathers that will use them (see [`DEFAULT_READ_AHEAD_BYTES`]); zero
    /// reads nothing ahead.
    pub read_ahead_bytes: u64,
}

/// Bytes of blocks read ahead unless the caller says otherwise: a few hundred
/// blocks of the default size, enough to keep dozens of steps of a windowed
/// pass in flight through 50 ms of round trip, and a small part of the
/// default cache. It is further held to a quarter of the store's cache, so
/// that blocks read ahead are not evicted before they are used.
pub const DEFAULT_READ_AHEAD_BYTES: u64 = 256 << 20;

/// Requests in flight per store unless the caller says otherwise. A first
/// batch of 256 small records of a store far larger than the cache needs an
/// index block and a data range per record: 256 at once fetch each kind in one
/// round trip (at 64 a first batch through 50 ms took four rounds of each,
/// docs/benchmarks.md). Requests per pass do not grow with it: they are fixed
/// by the bytes a pass reads.
pub const DEFAULT_MAX_CONCURRENCY: usize = 256;

/// Most requests in flight per store a caller may ask for.
pub const MAX_CONCURRENCY: usize = 1024;

/// Most retries of one request a caller may ask for.
pub const MAX_RETRIES: u32 = 100;

/// The longest wait between two attempts.
pub const MAX_BACKOFF: Duration = Duration::from_secs(10);

impl Default for FetchOptions {
    fn default() -> Self {
        FetchOptions {
            max_concurrency: DEFAULT_MAX_CONCURRENCY,
            coalesce_gap: 64 << 10,
            max_request_bytes: 1 << 20,
            retries: 5,
            retry_backoff: Duration::from_millis(100),
            request_timeout: Duration::from_secs(30),
            index_memory_bytes: crate::index::DEFAULT_INDEX_MEMORY_BYTES,
            first_byte_timeout: DEFAULT_FIRST_BYTE_TIMEOUT,
            deadline: DEFAULT_DEADLINE,
            read_ahead_bytes: DEFAULT_READ_AHEAD_BYTES,
        }
    }
}

/// How long an open or a gather may take unless the caller says otherwise:
/// long enough for a store's index of hundreds of MiB behind a slow link and a
/// few retries, short enough that a dead endpoint is reported within a minute.
pub const DEFAULT_DEADLINE: Duration = Duration::from_secs(60);

/// How long an attempt waits for a response to begin unless the caller says
/// otherwise. Object stores answer within a second when they answer at all;
/// this leaves room for a loaded one, and for five retries within the deadline.
pub const DEFAULT_FIRST_BYTE_TIMEOUT: Duration = Duration::from_secs(10);

impl FetchOptions {
    /// Sets the option `key` (one of [`LOADERX_OPTIONS`] but `from_env`, in
    /// any case; messages name it as given).
    fn set(&mut self, key: &str, value: &OptionValue) -> Result<()> {
        match key.to_ascii_lowercase().as_str() {
            "max_concurrency" => {
                self.max_concurrency = usize::try_from(value.count(key)?)
                    .ok()
                    .filter(|n| (1..=MAX_CONCURRENCY).contains(n))
                    .ok_or_else(|| {
                        Error::invalid(format!(
                            "storage option {key} must be in 1..={MAX_CONCURRENCY}, got {value}"
                        ))
                    })?
            }
            "coalesce_gap" => self.coalesce_gap = value.count(key)?,
            "max_request_bytes" => {
                self.max_request_bytes =
                    Some(value.count(key)?).filter(|&n| n > 0).ok_or_else(|| {
                        Error::invalid(format!(
                            "storage option {key} must be positive, got {value}"
                        ))
                    })?
            }
            "retries" => {
                self.retries = u32::try_from(value.count(key)?)
                    .ok()
                    .filter(|&n| n <= MAX_RETRIES)
                    .ok_or_else(|| {
                        Error::invalid(format!(
                            "storage option {key} must be in 0..={MAX_RETRIES}, got {value}"
                        ))
                    })?
            }
            "retry_backoff" => self.retry_backoff = value.seconds(key)?.min(MAX_BACKOFF),
            "request_timeout" => self.request_timeout = value.positive_seconds(key)?,
            "index_memory_bytes" => self.index_memory_bytes = value.count(key)?,
            "first_byte_timeout" => self.first_byte_timeout = value.positive_seconds(key)?,
            "deadline" => self.deadline = value.positive_seconds(key)?,
            "read_ahead_bytes" => self.read_ahead_bytes = value.count(key)?,
            _ => return Err(Error::internal(format!("{key} is not a fetch option"))),
        }
        Ok(())
    }
}

/// Storage options split once: loaderx's own, typed, and `object_store`'s, as
/// the strings it parses (names lowercased, unchecked: the URL's kind of store
/// checks them).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SplitOptions {
    /// How records are fetched.
    pub fetch: FetchOptions,
    /// Whether `object_store` may read its configuration from the environment.
    pub from_env: bool,
    /// `object_store`'s options, in the order given.
    pub config: Vec<(String, String)>,
}

impl SplitOptions {
    /// Splits `options` by name: loaderx's ([`LOADERX_OPTIONS`]) are parsed into
    /// their types here, every other one is kept as `object_store` reads it.
    pub fn split(options: &[(String, OptionValue)]) -> Result<SplitOptions> {
        let mut out = SplitOptions::default();
        for (key, value) in options {
            let k = key.to_ascii_lowercase();
            if k == "from_env" {
                out.from_env = value.flag(key)?;
            } else if LOADERX_OPTIONS.contains(&k.as_str()) {
                out.fetch.set(key, value)?;
            } else if CLIENT_DURATIONS.contains(&k.as_str()) {
                let d = value.client_duration(key)?;
                out.config
                    .push((k, humantime::format_duration(d).to_string()));
            } else {
                out.config.push((k, value.config_string()));
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_are_shown_as_python_writes_them() {
        for (x, shown) in [
            (9.3e18, "9.3e+18"),
            (1e16, "1e+16"),
            (1e-5, "1e-05"),
            (2.5e-120, "2.5e-120"),
            (0.0001, "0.0001"),
            (0.0, "0.0"),
            (-1.5, "-1.5"),
            (1e15, "1000000000000000.0"),
            (f64::INFINITY, "inf"),
        ] {
            assert_eq!(OptionValue::Float(x).to_string(), shown);
        }
    }

    #[test]
    fn durations_longer_than_a_billion_seconds_are_refused() {
        for key in ["deadline", "read_timeout"] {
            let over = OptionValue::Float(1e9 + 1.0);
            let err = match key {
                "deadline" => over.seconds(key),
                _ => over.client_duration(key),
            }
            .unwrap_err();
            assert_eq!(
                err.to_string(),
                format!(
                    "storage option {key} must be at most 1000000000 seconds (about 31 years), \
                     got 1000000001.0"
                )
            );
            assert_eq!(
                OptionValue::Int(1_000_000_000).seconds(key).unwrap(),
                LONGEST
            );
        }
    }

    fn split(pairs: &[(&str, OptionValue)]) -> Result<SplitOptions> {
        let owned: Vec<(String, OptionValue)> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect();
        SplitOptions::split(&owned)
    }

    fn refusal(pairs: &[(&str, OptionValue)]) -> String {
        match split(pairs) {
            Err(e) => e.to_string(),
            Ok(s) => panic!("accepted {pairs:?} as {s:?}"),
        }
    }

    use OptionValue::{Bool, Float, Int, Str};

    #[test]
    fn numbers_booleans_and_strings_are_taken_as_such() {
        let s = split(&[
            ("max_concurrency", Int(8)),
            ("coalesce_gap", Str(" 4096 ".into())),
            ("max_request_bytes", Int(1 << 22)),
            ("Retries", Int(0)),
            ("retry_backoff", Float(0.25)),
            ("request_timeout", Int(3)),
            ("index_memory_bytes", Str("0".into())),
            ("read_ahead_bytes", Int(1 << 24)),
            ("from_env", Bool(true)),
            ("allow_http", Bool(true)),
            ("http2_max_frame_size", Int(65536)),
            ("connect_timeout", Str("5 seconds".into())),
            ("pool_idle_timeout", Float(1.5)),
        ])
        .unwrap();
        assert_eq!(
            s.fetch,
            FetchOptions {
                max_concurrency: 8,
                coalesce_gap: 4096,
                max_request_bytes: 1 << 22,
                retries: 0,
                retry_backoff: Duration::from_millis(250),
                request_timeout: Duration::from_secs(3),
                index_memory_bytes: 0,
                first_byte_timeout: DEFAULT_FIRST_BYTE_TIMEOUT,
                deadline: DEFAULT_DEADLINE,
                read_ahead_bytes: 1 << 24,
            }
        );
        assert!(s.from_env);
        assert_eq!(
            s.config,
            [
                ("allow_http".to_string(), "true".to_string()),
                ("http2_max_frame_size".into(), "65536".into()),
                ("connect_timeout".into(), "5s".into()),
                ("pool_idle_timeout".into(), "1s 500ms".into()),
            ]
        );
        let s = split(&[
            ("retry_backoff", Str("60".into())),
            ("from_env", Str("0".into())),
        ])
        .unwrap();
        assert_eq!(s.fetch.retry_backoff, MAX_BACKOFF);
        assert!(!s.from_env);
        assert_eq!(split(&[]).unwrap(), SplitOptions::default());
    }

    #[test]
    fn every_open_and_read_has_a_deadline_of_at_most_a_minute_by_default() {
        let fetch = split(&[]).unwrap().fetch;
        assert_eq!(fetch.deadline, Duration::from_secs(60));
        assert_eq!(fetch.first_byte_timeout, Duration::from_secs(10));
        assert_eq!(fetch.request_timeout, Duration::from_secs(30));
        // The wait for a response to begin is shorter than an attempt, and
        // several attempts fit in the deadline.
        assert!(fetch.first_byte_timeout < fetch.request_timeout);
        assert!(fetch.first_byte_timeout * 5 < fetch.deadline);
        let s = split(&[
            ("Deadline", Float(1.5)),
            ("first_byte_timeout", Str("0.25".into())),
        ])
        .unwrap();
        assert_eq!(s.fetch.deadline, Duration::from_millis(1500));
        assert_eq!(s.fetch.first_byte_timeout, Duration::from_millis(250));
        assert!(s.config.is_empty());
    }

    #[test]
    fn client_durations_take_seconds_or_duration_strings() {
        let s = split(&[
            ("timeout", Int(30)),
            ("Read_Timeout", Str("2.5".into())),
            ("http2_keep_alive_interval", Str("1m 30s".into())),
        ])
        .unwrap();
        assert_eq!(
            s.config,
            [
                ("timeout".to_string(), "30s".to_string()),
                ("read_timeout".into(), "2s 500ms".into()),
                ("http2_keep_alive_interval".into(), "1m 30s".into()),
            ]
        );
    }

    #[test]
    fn every_bad_value_is_refused_naming_its_key() {
        for (key, value, want) in [
            (
                "retries",
                Str("x".into()),
                r#"retries must be a non-negative integer, got "x""#,
            ),
            ("retries", Int(101), "retries must be in 0..=100, got 101"),
            (
                "index_memory_bytes",
                Int(-1),
                "index_memory_bytes must be a non-negative integer, got -1",
            ),
            (
                "retries",
                Bool(true),
                "retries must be a non-negative integer, got True",
            ),
            (
                "coalesce_gap",
                Int(-1),
                "coalesce_gap must be a non-negative integer, got -1",
            ),
            (
                "coalesce_gap",
                Float(2.5),
                "coalesce_gap must be a non-negative integer, got 2.5",
            ),
            (
                "max_concurrency",
                Int(0),
                "max_concurrency must be in 1..=1024, got 0",
            ),
            (
                "max_concurrency",
                Str("2000".into()),
                r#"max_concurrency must be in 1..=1024, got "2000""#,
            ),
            (
                "max_request_bytes",
                Int(0),
                "max_request_bytes must be positive, got 0",
            ),
            (
                "request_timeout",
                Float(0.0),
                "request_timeout must be positive, got 0.0",
            ),
            (
                "request_timeout",
                Float(-1.0),
                "request_timeout must be a non-negative number of seconds, got -1.0",
            ),
            ("deadline", Int(0), "deadline must be positive, got 0"),
            (
                "deadline",
                Str("soon".into()),
                r#"deadline must be a non-negative number of seconds, got "soon""#,
            ),
            (
                "first_byte_timeout",
                Float(0.0),
                "first_byte_timeout must be positive, got 0.0",
            ),
            (
                "retry_backoff",
                Float(f64::NAN),
                "retry_backoff must be a non-negative number of seconds, got NaN",
            ),
            (
                "retry_backoff",
                Bool(false),
                "retry_backoff must be a non-negative number of seconds, got False",
            ),
            (
                "from_env",
                Str("maybe".into()),
                r#"from_env must be True or False, got "maybe""#,
            ),
            ("from_env", Int(1), "from_env must be True or False, got 1"),
            ("timeout", Int(0), "timeout must be positive, got 0"),
            (
                "timeout",
                Str("0s".into()),
                r#"timeout must be positive, got "0s""#,
            ),
            (
                "connect_timeout",
                Str("soon".into()),
                r#"connect_timeout must be a number of seconds or a duration such as "30s" or "1m 30s", got "soon""#,
            ),
            (
                "read_timeout",
                Int(-5),
                "read_timeout must be a non-negative number of seconds, got -5",
            ),
        ] {
            assert_eq!(refusal(&[(key, value)]), format!("storage option {want}"));
        }
    }
}
