//! Element types a store may hold: exactly those DLPack represents without loss.

/// Element type of a store. The discriminant is the on-disk code.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum DType {
    Bool = 1,
    I8 = 2,
    I16 = 3,
    I32 = 4,
    I64 = 5,
    U8 = 6,
    U16 = 7,
    U32 = 8,
    U64 = 9,
    F16 = 10,
    F32 = 11,
    F64 = 12,
    C64 = 13,
    C128 = 14,
}

/// DLPack `DLDataTypeCode` values.
pub mod dl_code {
    pub const INT: u8 = 0;
    pub const UINT: u8 = 1;
    pub const FLOAT: u8 = 2;
    pub const COMPLEX: u8 = 5;
    pub const BOOL: u8 = 6;
}

const ALL: [DType; 14] = [
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
    pub fn from_code(code: u8) -> Option<DType> {
        ALL.iter().copied().find(|d| *d as u8 == code)
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

    pub fn from_name(name: &str) -> Option<DType> {
        ALL.iter().copied().find(|d| d.name() == name)
    }

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

    pub fn from_dlpack(code: u8, bits: u8) -> Option<DType> {
        ALL.iter().copied().find(|d| d.dlpack() == (code, bits))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_names_and_dlpack_round_trip() {
        for d in ALL {
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
