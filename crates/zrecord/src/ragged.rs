//! The packed form of a batch of variable-shape records: values laid end to end,
//! `cu_seqlens` (n + 1 int32 element offsets starting at 0) and `shapes`
//! (n x ndim uint64). It is both what a Ragged append takes and what a gather
//! returns.

use crate::error::{Error, Result};

/// Borrowed packed batch, as handed to `Writer::append_ragged`.
pub struct RaggedView<'a> {
    pub values: &'a [u8],
    pub cu_seqlens: &'a [i32],
    pub shapes: &'a [u64],
}

/// Elements of a record of `shape`, or `None` on overflow.
pub fn element_count(shape: &[u64]) -> Option<u64> {
    shape.iter().try_fold(1u64, |acc, &d| acc.checked_mul(d))
}

impl RaggedView<'_> {
    pub fn len(&self) -> usize {
        self.cu_seqlens.len().saturating_sub(1)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Checks the three arrays against each other; errors name the record.
    pub fn check(&self, itemsize: usize, ndim: usize) -> Result<()> {
        let cu = self.cu_seqlens;
        let Some(&first) = cu.first() else {
            return Err(Error::Invalid(
                "cu_seqlens must hold n + 1 offsets; it is empty".into(),
            ));
        };
        if first != 0 {
            return Err(Error::Invalid(format!(
                "cu_seqlens must start at 0, got {first}"
            )));
        }
        let n = self.len();
        if Some(self.shapes.len()) != n.checked_mul(ndim) {
            return Err(Error::Invalid(format!(
                "shapes must be ({n}, {ndim}) for {n} records of ndim {ndim}, got {} values",
                self.shapes.len()
            )));
        }
        for i in 0..n {
            let (a, b) = (cu[i], cu[i + 1]);
            if b < a {
                return Err(Error::Invalid(format!(
                    "cu_seqlens decreases at record {i}: {a} then {b}"
                )));
            }
            let shape = &self.shapes[i * ndim..(i + 1) * ndim];
            let count = element_count(shape);
            if count != Some((b - a) as u64) {
                return Err(Error::Invalid(format!(
                    "record {i} has shape {shape:?} but cu_seqlens gives it {} elements",
                    b - a
                )));
            }
        }
        let last = cu[n] as usize;
        if last.checked_mul(itemsize) != Some(self.values.len()) {
            return Err(Error::Invalid(format!(
                "values holds {} elements but cu_seqlens ends at {last}",
                self.values.len() / itemsize.max(1)
            )));
        }
        Ok(())
    }
}

/// Byte layout of a gathered batch inside its one allocation: values first, then
/// cu_seqlens, then shapes, each starting on a 64-byte boundary.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RaggedLayout {
    pub records: usize,
    pub ndim: usize,
    pub elements: usize,
    pub values_bytes: usize,
    pub cu_offset: usize,
    pub shapes_offset: usize,
    pub total: usize,
}

pub const ALIGN: usize = 64;

pub fn align_up(n: usize) -> usize {
    n.div_ceil(ALIGN) * ALIGN
}

impl RaggedLayout {
    pub fn new(records: usize, ndim: usize, elements: usize, itemsize: usize) -> Result<Self> {
        if elements > i32::MAX as usize {
            return Err(Error::Invalid(format!(
                "the batch holds {elements} elements, more than int32 cu_seqlens can address \
                 ({}); gather fewer records at once",
                i32::MAX
            )));
        }
        let values_bytes = elements * itemsize;
        let cu_offset = align_up(values_bytes);
        let shapes_offset = align_up(cu_offset + 4 * (records + 1));
        let total = shapes_offset + 8 * records * ndim;
        Ok(RaggedLayout {
            records,
            ndim,
            elements,
            values_bytes,
            cu_offset,
            shapes_offset,
            total,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn check_names_the_bad_record() {
        let values = [0u8; 4 * 5];
        let ok = RaggedView {
            values: &values,
            cu_seqlens: &[0, 2, 2, 5],
            shapes: &[2, 0, 3],
        };
        ok.check(4, 1).unwrap();
        let bad = RaggedView {
            values: &values,
            cu_seqlens: &[0, 2, 2, 5],
            shapes: &[2, 1, 3],
        };
        let e = bad.check(4, 1).unwrap_err().to_string();
        assert!(e.contains("record 1"), "{e}");
        let dec = RaggedView {
            values: &values,
            cu_seqlens: &[0, 3, 2, 5],
            shapes: &[3, 0, 3],
        };
        assert!(dec
            .check(4, 1)
            .unwrap_err()
            .to_string()
            .contains("decreases at record 1"));
    }

    #[test]
    fn layout_is_aligned_and_bounded() {
        let l = RaggedLayout::new(3, 2, 10, 4).unwrap();
        assert_eq!(
            (l.values_bytes, l.cu_offset, l.shapes_offset, l.total),
            (40, 64, 128, 176)
        );
        assert!(RaggedLayout::new(1, 1, 1 << 31, 1).is_err());
    }
}
