//! Element types a store may hold: exactly those DLPack represents without loss.

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
}

/// DLPack `DLDataTypeCode` values.
pub mod dl_code {
    /// Signed integers.
    pub const INT: u8 = 0;
    /// Unsigned integers.
    pub const UINT: u8 = 1;
    /// IEEE floating point.
    pub const FLOAT: u8 = 2;
    /// Complex floating point.
    pub const COMPLEX: u8 = 5;
    /// Booleans.
    pub const BOOL: u8 = 6;
}

/// Every element type, in on-disk code order.
pub const ALL_DTYPES: [DType; 14] = [
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
];

impl DType {
    /// The type of an on-disk code; `None` for codes this version does not know.
    pub fn from_code(code: u8) -> Option<DType> {
        ALL_DTYPES.iter().copied().find(|d| *d as u8 == code)
    }

    /// NumPy's name for the type (`np.dtype(name)` round-trips).
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
        }
    }

    /// The inverse of [`DType::name`].
    pub fn from_name(name: &str) -> Option<DType> {
        ALL_DTYPES.iter().copied().find(|d| d.name() == name)
    }

    /// Bytes per element.
    pub fn itemsize(self) -> usize {
        match self {
            DType::Bool | DType::I8 | DType::U8 => 1,
            DType::I16 | DType::U16 | DType::F16 => 2,
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
}
