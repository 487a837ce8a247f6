//! Element types a store may hold: exactly those DLPack represents without loss.
//!
//! Codes are appended, never renumbered: a code on disk names one type forever.

/// Element type of a store. The discriminant is the on-disk code.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum DType {
    /// `bool`, one byte.
    Bool = 1,
    /// `int8`.
    I8 = 2,
    /// `int16`.
    I16 = 3,
    /// `int32`.
    I32 = 4,
    /// `int64`.
    I64 = 5,
    /// `uint8`.
    U8 = 6,
    /// `uint16`.
    U16 = 7,
    /// `uint32`.
    U32 = 8,
    /// `uint64`.
    U64 = 9,
    /// IEEE `float16`.
    F16 = 10,
    /// `float32`.
    F32 = 11,
    /// `float64`.
    F64 = 12,
    /// `complex64` (two `float32`).
    C64 = 13,
    /// `complex128` (two `float64`).
    C128 = 14,
    /// `bfloat16`: 1 sign, 8 exponent and 7 mantissa bits.
    BF16 = 15,
    /// `float8_e3m4`.
    F8E3M4 = 16,
    /// `float8_e4m3` (IEEE-style: infinities and NaNs).
    F8E4M3 = 17,
    /// `float8_e4m3b11fnuz` (exponent bias 11, finite, NaN as negative zero).
    F8E4M3B11FNUZ = 18,
    /// `float8_e4m3fn` (finite, NaN only).
    F8E4M3FN = 19,
    /// `float8_e4m3fnuz` (finite, NaN as negative zero).
    F8E4M3FNUZ = 20,
    /// `float8_e5m2` (IEEE-style: infinities and NaNs).
    F8E5M2 = 21,
    /// `float8_e5m2fnuz` (finite, NaN as negative zero).
    F8E5M2FNUZ = 22,
    /// `float8_e8m0fnu` (exponent only, unsigned, NaN only): a scale factor.
    F8E8M0FNU = 23,
}

/// DLPack `DLDataTypeCode` values (those up to `BOOL` are DLPack 1.0's; the
/// float8 codes came with DLPack 1.1).
pub mod dl_code {
    /// Signed integers.
    pub const INT: u8 = 0;
    /// Unsigned integers.
    pub const UINT: u8 = 1;
    /// IEEE floating point.
    pub const FLOAT: u8 = 2;
    /// `bfloat16`.
    pub const BFLOAT: u8 = 4;
    /// Complex floating point.
    pub const COMPLEX: u8 = 5;
    /// Booleans.
    pub const BOOL: u8 = 6;
    /// `float8_e3m4`.
    pub const FLOAT8_E3M4: u8 = 7;
    /// `float8_e4m3`.
    pub const FLOAT8_E4M3: u8 = 8;
    /// `float8_e4m3b11fnuz`.
    pub const FLOAT8_E4M3B11FNUZ: u8 = 9;
    /// `float8_e4m3fn`.
    pub const FLOAT8_E4M3FN: u8 = 10;
    /// `float8_e4m3fnuz`.
    pub const FLOAT8_E4M3FNUZ: u8 = 11;
    /// `float8_e5m2`.
    pub const FLOAT8_E5M2: u8 = 12;
    /// `float8_e5m2fnuz`.
    pub const FLOAT8_E5M2FNUZ: u8 = 13;
    /// `float8_e8m0fnu`.
    pub const FLOAT8_E8M0FNU: u8 = 14;
}

/// Every element type, in on-disk code order.
pub const ALL_DTYPES: [DType; 23] = [
    DType::Bool,
    DType::I8,
    DType::I16,
    DType::I32,
    DType::I64,
    DType::U8,
    DType::U16,
    DType::U32,
    DType::U64,
    DType::F16,
    DType::F32,
    DType::F64,
    DType::C64,
    DType::C128,
    DType::BF16,
    DType::F8E3M4,
    DType::F8E4M3,
    DType::F8E4M3B11FNUZ,
    DType::F8E4M3FN,
    DType::F8E4M3FNUZ,
    DType::F8E5M2,
    DType::F8E5M2FNUZ,
    DType::F8E8M0FNU,
];

impl DType {
    /// The type of an on-disk code; `None` for codes this version does not know.
    pub fn from_code(code: u8) -> Option<DType> {
        ALL_DTYPES.iter().copied().find(|d| *d as u8 == code)
    }

    /// NumPy's name for the type (`np.dtype(name)` round-trips). `bfloat16` and
    /// the float8 types are those of the `ml_dtypes` package, under the same
    /// names as its attributes; NumPy knows them once that package is imported.
    pub fn name(self) -> &'static str {
        match self {
            DType::Bool => "bool",
            DType::I8 => "int8",
            DType::I16 => "int16",
            DType::I32 => "int32",
            DType::I64 => "int64",
            DType::U8 => "uint8",
            DType::U16 => "uint16",
            DType::U32 => "uint32",
            DType::U64 => "uint64",
            DType::F16 => "float16",
            DType::F32 => "float32",
            DType::F64 => "float64",
            DType::C64 => "complex64",
            DType::C128 => "complex128",
            DType::BF16 => "bfloat16",
            DType::F8E3M4 => "float8_e3m4",
            DType::F8E4M3 => "float8_e4m3",
            DType::F8E4M3B11FNUZ => "float8_e4m3b11fnuz",
            DType::F8E4M3FN => "float8_e4m3fn",
            DType::F8E4M3FNUZ => "float8_e4m3fnuz",
            DType::F8E5M2 => "float8_e5m2",
            DType::F8E5M2FNUZ => "float8_e5m2fnuz",
            DType::F8E8M0FNU => "float8_e8m0fnu",
        }
    }

    /// The inverse of [`DType::name`].
    pub fn from_name(name: &str) -> Option<DType> {
        ALL_DTYPES.iter().copied().find(|d| d.name() == name)
    }

    /// Bytes per element.
    pub fn itemsize(self) -> usize {
        match self {
            DType::Bool
            | DType::I8
            | DType::U8
            | DType::F8E3M4
            | DType::F8E4M3
            | DType::F8E4M3B11FNUZ
            | DType::F8E4M3FN
            | DType::F8E4M3FNUZ
            | DType::F8E5M2
            | DType::F8E5M2FNUZ
            | DType::F8E8M0FNU => 1,
            DType::I16 | DType::U16 | DType::F16 | DType::BF16 => 2,
            DType::I32 | DType::U32 | DType::F32 => 4,
            DType::I64 | DType::U64 | DType::F64 | DType::C64 => 8,
            DType::C128 => 16,
        }
    }

    /// DLPack `(code, bits)`; lanes are always 1.
    pub fn dlpack(self) -> (u8, u8) {
        let code = match self {
            DType::Bool => dl_code::BOOL,
            DType::I8 | DType::I16 | DType::I32 | DType::I64 => dl_code::INT,
            DType::U8 | DType::U16 | DType::U32 | DType::U64 => dl_code::UINT,
            DType::F16 | DType::F32 | DType::F64 => dl_code::FLOAT,
            DType::C64 | DType::C128 => dl_code::COMPLEX,
            DType::BF16 => dl_code::BFLOAT,
            DType::F8E3M4 => dl_code::FLOAT8_E3M4,
            DType::F8E4M3 => dl_code::FLOAT8_E4M3,
            DType::F8E4M3B11FNUZ => dl_code::FLOAT8_E4M3B11FNUZ,
            DType::F8E4M3FN => dl_code::FLOAT8_E4M3FN,
            DType::F8E4M3FNUZ => dl_code::FLOAT8_E4M3FNUZ,
            DType::F8E5M2 => dl_code::FLOAT8_E5M2,
            DType::F8E5M2FNUZ => dl_code::FLOAT8_E5M2FNUZ,
            DType::F8E8M0FNU => dl_code::FLOAT8_E8M0FNU,
        };
        (code, (self.itemsize() * 8) as u8)
    }

    /// The type DLPack describes with this type code and bit width, if a store can hold it.
    pub fn from_dlpack(code: u8, bits: u8) -> Option<DType> {
        ALL_DTYPES
            .iter()
            .copied()
            .find(|d| d.dlpack() == (code, bits))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_names_and_dlpack_round_trip() {
        for d in ALL_DTYPES {
            assert_eq!(DType::from_code(d as u8), Some(d));
            assert_eq!(DType::from_name(d.name()), Some(d));
            let (c, b) = d.dlpack();
            assert_eq!(DType::from_dlpack(c, b), Some(d));
        }
        assert_eq!(DType::from_code(0), None);
        assert_eq!(DType::from_name("float128"), None);
        assert_eq!(DType::C128.dlpack(), (dl_code::COMPLEX, 128));
    }

    #[test]
    fn codes_are_never_renumbered() {
        let codes: Vec<(u8, &str, (u8, u8))> = ALL_DTYPES
            .iter()
            .map(|d| (*d as u8, d.name(), d.dlpack()))
            .collect();
        assert_eq!(
            codes,
            [
                (1, "bool", (6, 8)),
                (2, "int8", (0, 8)),
                (3, "int16", (0, 16)),
                (4, "int32", (0, 32)),
                (5, "int64", (0, 64)),
                (6, "uint8", (1, 8)),
                (7, "uint16", (1, 16)),
                (8, "uint32", (1, 32)),
                (9, "uint64", (1, 64)),
                (10, "float16", (2, 16)),
                (11, "float32", (2, 32)),
                (12, "float64", (2, 64)),
                (13, "complex64", (5, 64)),
                (14, "complex128", (5, 128)),
                (15, "bfloat16", (4, 16)),
                (16, "float8_e3m4", (7, 8)),
                (17, "float8_e4m3", (8, 8)),
                (18, "float8_e4m3b11fnuz", (9, 8)),
                (19, "float8_e4m3fn", (10, 8)),
                (20, "float8_e4m3fnuz", (11, 8)),
                (21, "float8_e5m2", (12, 8)),
                (22, "float8_e5m2fnuz", (13, 8)),
                (23, "float8_e8m0fnu", (14, 8)),
            ]
        );
        assert_eq!(DType::from_code(24), None);
    }
}
