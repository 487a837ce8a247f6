//! The packed form of a batch of variable-shape records: values laid end to end,
//! `cu_seqlens` (n + 1 int32 element offsets starting at 0) and `shapes`
//! (n x ndim uint64). It is both what a Ragged append takes and what a gather
//! returns.

use crate::error::{Error, Result};

/// Borrowed packed batch, as handed to `Writer::append_ragged`.
pub struct RaggedView<'a> {
    /// Every record's elements, laid end to end.
    pub values: &'a [u8],
    /// `n + 1` element offsets: record `i` is elements `cu_seqlens[i]..cu_seqlens[i + 1]`.
    pub cu_seqlens: &'a [i32],
    /// `n x ndim` dimensions, row by row.
    pub shapes: &'a [u64],
}

/// Elements of a record of `shape`, or `None` on overflow.
pub fn element_count(shape: &[u64]) -> Option<u64> {
    shape.iter().try_fold(1u64, |acc, &d| acc.checked_mul(d))
}

impl RaggedView<'_> {
    /// Records in the batch.
    pub fn len(&self) -> usize {
        self.cu_seqlens.len().saturating_sub(1)
    }

    /// Whether the batch holds no record.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Checks the three arrays against each other; errors name the record.
    pub fn check(&self, itemsize: usize, ndim: usize) -> Result<()> {
        let cu = self.cu_seqlens;
        let Some(&first) = cu.first() else {
            return Err(Error::InvalidArgument(
                "cu_seqlens must hold n + 1 offsets; it is empty".into(),
            ));
        };
        if first != 0 {
            return Err(Error::InvalidArgument(format!(
                "cu_seqlens must start at 0, got {first}"
            )));
        }
        let n = self.len();
        if Some(self.shapes.len()) != n.checked_mul(ndim) {
            return Err(Error::InvalidArgument(format!(
                "shapes must be ({n}, {ndim}) for {n} records of ndim {ndim}, got {} values",
                self.shapes.len()
            )));
        }
        for i in 0..n {
            let (a, b) = (cu[i], cu[i + 1]);
            if b < a {
                return Err(Error::InvalidArgument(format!(
                    "cu_seqlens decreases at record {i}: {a} then {b}"
                )));
            }
            let shape = &self.shapes[i * ndim..(i + 1) * ndim];
            let count = element_count(shape);
            if count != Some((b - a) as u64) {
                return Err(Error::InvalidArgument(format!(
                    "record {i} has shape {shape:?} but cu_seqlens gives it {} elements",
                    b - a
                )));
            }
        }
        let last = cu[n] as usize;
        if last.checked_mul(itemsize) != Some(self.values.len()) {
            return Err(Error::InvalidArgument(format!(
                "values holds {} elements but cu_seqlens ends at {last}",
                self.values.len() / itemsize.max(1)
            )));
        }
        Ok(())
    }
}

/// Where each record of a packed batch starts in its values (in bytes) and its
/// shape, from the batch's `cu_seqlens` and `n x ndim` `shapes`.
pub fn record_spans<'a>(
    cu_seqlens: &[i32],
    shapes: &'a [u64],
    ndim: usize,
    itemsize: usize,
) -> Result<Vec<(usize, &'a [u64])>> {
    if ndim == 0 {
        return Err(Error::InvalidArgument(
            "shapes must be (n, ndim) with ndim >= 1".into(),
        ));
    }
    shapes
        .chunks_exact(ndim)
        .zip(cu_seqlens.windows(2))
        .map(|(shape, w)| {
            usize::try_from(w[0])
                .ok()
                .and_then(|start| start.checked_mul(itemsize))
                .map(|at| (at, shape))
                .ok_or_else(|| {
                    Error::InvalidArgument(format!("cu_seqlens offset {} is out of range", w[0]))
                })
        })
        .collect()
}

/// Byte layout of a gathered batch inside its one allocation: values first, then
/// cu_seqlens, then shapes, each starting on a 64-byte boundary.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RaggedLayout {
    /// Records in the batch.
    pub records: usize,
    /// Dimensions of each record.
    pub ndim: usize,
    /// Elements of all records together.
    pub elements: usize,
    /// Bytes of the values.
    pub values_bytes: usize,
    /// Where `cu_seqlens` starts (aligned).
    pub cu_offset: usize,
    /// Where the shapes start (aligned).
    pub shapes_offset: usize,
    /// Bytes of the whole region.
    pub total: usize,
}

/// Most elements one Ragged batch holds: its `cu_seqlens` are int32.
pub const MAX_RAGGED_ELEMENTS: usize = i32::MAX as usize;

/// Alignment of every gathered output and of each part of a Ragged batch in it.
pub const ALIGN: usize = 64;

/// `n` rounded up to a multiple of [`ALIGN`].
pub fn align_up(n: usize) -> usize {
    n.div_ceil(ALIGN) * ALIGN
}

impl RaggedLayout {
    /// The layout of `records` records of `ndim` dimensions holding `elements` elements of `itemsize` bytes; an error when int32 `cu_seqlens` cannot address them.
    pub fn new(records: usize, ndim: usize, elements: usize, itemsize: usize) -> Result<Self> {
        if elements > MAX_RAGGED_ELEMENTS {
            return Err(Error::InvalidArgument(format!(
                "the batch holds {elements} elements, more than int32 cu_seqlens can address \
                 ({MAX_RAGGED_ELEMENTS}); gather fewer records at once"
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
