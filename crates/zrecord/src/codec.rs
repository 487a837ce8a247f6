//! Per-record compression. Every record is one independent zstd frame, so any
//! record decodes alone, straight into its output slot.
//!
//! Contexts are expensive to create and cheap to reuse, so each encoder and decoder
//! keeps a small pool of them: one per thread that is working at the same moment.
//! A dictionary is digested once and shared by every context.

use crate::recycle::Recycler;

use zstd::zstd_safe::{self, CCtx, CDict, DCtx, DDict};

use crate::error::{Error, Result};

/// zstd level of the `zstd` and `zstd_dict` codecs.
pub const ZSTD_LEVEL: i32 = 3;

/// How each record is stored. The discriminant is the on-disk code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Codec {
    /// The bytes as they are.
    Raw = 0,
    /// One independent zstd frame per record, at [`ZSTD_LEVEL`].
    Zstd = 1,
    /// The same against a dictionary stored once in the store.
    ZstdDict = 2,
}

/// Every codec, in on-disk code order.
pub const ALL_CODECS: [Codec; 3] = [Codec::Raw, Codec::Zstd, Codec::ZstdDict];

impl Codec {
    /// The codec of an on-disk code; `None` for codes this version does not know.
    pub fn from_code(code: u8) -> Option<Codec> {
        match code {
            0 => Some(Codec::Raw),
            1 => Some(Codec::Zstd),
            2 => Some(Codec::ZstdDict),
            _ => None,
        }
    }

    /// The name callers select the codec by.
    pub fn name(self) -> &'static str {
        match self {
            Codec::Raw => "raw",
            Codec::Zstd => "zstd",
            Codec::ZstdDict => "zstd_dict",
        }
    }

    /// The inverse of [`Codec::name`].
    pub fn from_name(name: &str) -> Option<Codec> {
        [Codec::Raw, Codec::Zstd, Codec::ZstdDict]
            .into_iter()
            .find(|c| c.name() == name)
    }

    /// Whether the codec compresses against a dictionary stored with the store.
    pub fn takes_dictionary(self) -> bool {
        self == Codec::ZstdDict
    }

    /// Checks that a dictionary is given exactly when the codec needs one.
    pub fn check_dict(self, dict: Option<&[u8]>) -> Result<()> {
        match (self, dict) {
            (Codec::ZstdDict, None) => Err(Error::InvalidArgument(
                "codec 'zstd_dict' needs dict_bytes; train one with loaderx.utils.train_dict"
                    .into(),
            )),
            (Codec::ZstdDict, Some([])) => {
                Err(Error::InvalidArgument("dict_bytes is empty".into()))
            }
            (Codec::Raw | Codec::Zstd, Some(_)) => Err(Error::InvalidArgument(format!(
                "dict_bytes is only used by codec 'zstd_dict', not '{}'",
                self.name()
            ))),
            _ => Ok(()),
        }
    }
}

/// zstd refused `dict`: a dictionary whose header is damaged.
fn unusable_dict(dict: &[u8]) -> Error {
    Error::InvalidArgument(format!(
        "the {}-byte dictionary is not a usable zstd dictionary",
        dict.len()
    ))
}

fn zstd_error(code: zstd_safe::ErrorCode) -> String {
    zstd_safe::get_error_name(code).to_string()
}

pub struct Encoder {
    codec: Codec,
    cdict: Option<CDict<'static>>,
    contexts: Recycler<CCtx<'static>>,
}

impl Encoder {
    pub fn new(codec: Codec, dict: Option<&[u8]>) -> Result<Encoder> {
        codec.check_dict(dict)?;
        Ok(Encoder {
            codec,
            cdict: dict
                .map(|d| CDict::try_create(d, ZSTD_LEVEL).ok_or_else(|| unusable_dict(d)))
                .transpose()?,
            contexts: Recycler::new(),
        })
    }

    pub fn codec(&self) -> Codec {
        self.codec
    }

    /// Appends the stored form of `src` to `dst`; returns the stored length.
    pub fn encode(&self, src: &[u8], dst: &mut Vec<u8>) -> Result<usize> {
        if self.codec == Codec::Raw {
            dst.extend_from_slice(src);
            return Ok(src.len());
        }
        let mut cctx = self.contexts.take().unwrap_or_else(CCtx::create);
        let start = dst.len();
        dst.resize(start + zstd_safe::compress_bound(src.len()), 0);
        let res = match &self.cdict {
            Some(cd) => cctx.compress_using_cdict(&mut dst[start..], src, cd),
            None => cctx.compress(&mut dst[start..], src, ZSTD_LEVEL),
        };
        dst.truncate(start + *res.as_ref().unwrap_or(&0));
        self.contexts.put(cctx);
        res.map_err(|c| Error::Internal(format!("zstd compression failed: {}", zstd_error(c))))
    }
}

pub struct Decoder {
    codec: Codec,
    ddict: Option<DDict<'static>>,
    contexts: Recycler<DCtx<'static>>,
}

/// A decoder context held for a run of records by one thread.
pub struct DecodeSession<'a> {
    decoder: &'a Decoder,
    dctx: Option<DCtx<'static>>,
}

impl Decoder {
    pub fn new(codec: Codec, dict: Option<&[u8]>) -> Result<Decoder> {
        codec.check_dict(dict)?;
        Ok(Decoder {
            codec,
            ddict: dict
                .map(|d| DDict::try_create(d).ok_or_else(|| unusable_dict(d)))
                .transpose()?,
            contexts: Recycler::new(),
        })
    }

    pub fn session(&self) -> DecodeSession<'_> {
        let dctx = match self.codec {
            Codec::Raw => None,
            _ => Some(self.contexts.take().unwrap_or_else(DCtx::create)),
        };
        DecodeSession {
            decoder: self,
            dctx,
        }
    }
}

/// Most bytes one byte of a zstd frame can decode to. A frame's blocks hold at
/// most 128 KiB each, and the cheapest block (a run of one byte value) costs 4
/// bytes, so no valid frame expands further. A frame that claims to is damaged,
/// and is refused before any memory is set aside for it.
pub const MAX_EXPANSION: u64 = (128 << 10) / 4;

/// The content size a stored record's frame declares, or why it has none.
pub fn declared_size(src: &[u8]) -> std::result::Result<u64, String> {
    match zstd_safe::get_frame_content_size(src) {
        Ok(Some(n)) => Ok(n),
        Ok(None) => Err("zstd frame does not declare its content size".into()),
        Err(_) => Err("not a zstd frame".into()),
    }
}

impl DecodeSession<'_> {
    /// Decodes one stored record into `dst`, which must be exactly its logical
    /// size. Any other outcome is an error message for the caller to attach to
    /// the file and record.
    #[inline]
    pub fn decode(&mut self, src: &[u8], dst: &mut [u8]) -> std::result::Result<(), String> {
        let Some(dctx) = self.dctx.as_mut() else {
            if src.len() != dst.len() {
                return Err(format!(
                    "stored length {} differs from the record's {} bytes",
                    src.len(),
                    dst.len()
                ));
            }
            dst.copy_from_slice(src);
            return Ok(());
        };
        let res = match &self.decoder.ddict {
            Some(dd) => dctx.decompress_using_ddict(dst, src, dd),
            None => dctx.decompress(dst, src),
        };
        match res {
            Ok(n) if n == dst.len() => Ok(()),
            Ok(n) => Err(format!(
                "record decodes to {n} bytes, expected {}",
                dst.len()
            )),
            Err(c) => Err(format!("zstd frame does not decode: {}", zstd_error(c))),
        }
    }
}

impl Drop for DecodeSession<'_> {
    fn drop(&mut self) {
        if let Some(d) = self.dctx.take() {
            self.decoder.contexts.put(d);
        }
    }
}

/// The bytes `codec` (level [`ZSTD_LEVEL`], with `dict` for `zstd_dict`) stores
/// for the records laid end to end in `data`, `sizes` giving each record's length:
/// how well a codec would do on a sample of a store's records.
pub fn encoded_size(
    codec: Codec,
    dict: Option<&[u8]>,
    data: &[u8],
    sizes: &[usize],
) -> Result<u64> {
    if sizes.iter().try_fold(0usize, |a, &n| a.checked_add(n)) != Some(data.len()) {
        return Err(Error::InvalidArgument(
            "record sizes do not add up to the data length".into(),
        ));
    }
    let encoder = Encoder::new(codec, dict)?;
    let (mut total, mut at, mut scratch) = (0u64, 0usize, Vec::new());
    for &n in sizes {
        scratch.clear();
        total = total.saturating_add(encoder.encode(&data[at..at + n], &mut scratch)? as u64);
        at += n;
    }
    Ok(total)
}

/// Trains a zstd dictionary from samples laid end to end in `data`.
pub fn train_dictionary(data: &[u8], sizes: &[usize], max_size: usize) -> Result<Vec<u8>> {
    zstd::dict::from_continuous(data, sizes, max_size)
        .map_err(|e| Error::InvalidArgument(format!("dictionary training failed: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(codec: Codec, dict: Option<&[u8]>, src: &[u8]) {
        let enc = Encoder::new(codec, dict).unwrap();
        let dec = Decoder::new(codec, dict).unwrap();
        let mut stored = vec![9u8; 3];
        let n = enc.encode(src, &mut stored).unwrap();
        assert_eq!(stored.len(), 3 + n);
        assert_eq!(&stored[..3], &[9, 9, 9]);
        let mut out = vec![0u8; src.len()];
        dec.session().decode(&stored[3..], &mut out).unwrap();
        assert_eq!(out, src);
        let mut wrong = vec![0u8; src.len() + 1];
        assert!(dec.session().decode(&stored[3..], &mut wrong).is_err());
    }

    #[test]
    fn codecs_round_trip() {
        let src: Vec<u8> = (0..10_000u32)
            .flat_map(|i| (i % 97).to_le_bytes())
            .collect();
        round_trip(Codec::Raw, None, &src);
        round_trip(Codec::Zstd, None, &src);
        round_trip(Codec::Zstd, None, &[]);
        let samples: Vec<u8> = (0..2000u32).flat_map(|i| (i % 13).to_le_bytes()).collect();
        let sizes = vec![64; samples.len() / 64];
        let dict = train_dictionary(&samples, &sizes, 4096).unwrap();
        round_trip(Codec::ZstdDict, Some(&dict), &src);
    }

    #[test]
    fn dictionary_rules() {
        assert!(Encoder::new(Codec::ZstdDict, None).is_err());
        assert!(Encoder::new(Codec::Zstd, Some(b"x")).is_err());
        assert_eq!(Codec::from_name("zstd_dict"), Some(Codec::ZstdDict));
        assert_eq!(Codec::from_name("lz4"), None);
    }

    #[test]
    fn garbage_frame_is_an_error() {
        let dec = Decoder::new(Codec::Zstd, None).unwrap();
        let mut out = vec![0u8; 8];
        assert!(dec.session().decode(b"not zstd at all", &mut out).is_err());
    }
}
