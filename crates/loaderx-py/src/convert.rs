//! Python arguments as the crates take them: host memory borrowed in place,
//! record positions, and dtype and codec names.

use loaderx_remote::OptionValue;
use numpy::{PyArrayDescrMethods, PyReadonlyArray1, PyUntypedArray, PyUntypedArrayMethods};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyString};
use zrecord::{Codec, DType};

use crate::dlpack::DLTensor;
use crate::errors::{invalid_argument, wrong_type, IntoPy};

pub fn parse_dtype(name: &str) -> PyResult<DType> {
    DType::from_name(name).ok_or_else(|| invalid_argument(format!("unsupported dtype {name}")))
}

pub fn parse_codec(name: &str) -> PyResult<Codec> {
    Codec::from_name(name).ok_or_else(|| invalid_argument(format!("unknown codec {name:?}")))
}

/// The bytes of a host array: a C-contiguous NumPy array or a host DLTensor.
pub fn host_bytes<'a>(obj: &'a Bound<'_, PyAny>) -> PyResult<&'a [u8]> {
    if let Ok(t) = obj.cast::<DLTensor>() {
        let t: &DLTensor = t.get();
        let bytes = t.host_bytes()?;
        // SAFETY: the tensor object is borrowed for 'a and keeps its block alive.
        return Ok(unsafe { std::slice::from_raw_parts(bytes.as_ptr(), bytes.len()) });
    }
    let arr = obj
        .cast::<PyUntypedArray>()
        .map_err(|_| wrong_type("expected a NumPy array or a loaderx DLTensor"))?;
    if !arr.is_c_contiguous() {
        return Err(invalid_argument("the array must be C-contiguous"));
    }
    let nbytes = arr.len() * arr.dtype().itemsize();
    if nbytes == 0 {
        return Ok(&[]);
    }
    // SAFETY: a C-contiguous array of `len` items of `itemsize` bytes starts at
    // `data`; the array object is borrowed for 'a, which keeps the memory alive.
    Ok(unsafe {
        let data = (*arr.as_array_ptr()).fields.data as *const u8;
        std::slice::from_raw_parts(data, nbytes)
    })
}

/// Record positions of a store of `len` records from a 1-D uint64 or int64
/// array, copied so that the array may change while the GIL is released without
/// affecting the gather. A negative position is out of range, as one past the
/// end is.
pub fn positions(idx: &Bound<'_, PyAny>, len: u64) -> PyResult<Vec<u64>> {
    if let Ok(a) = idx.extract::<PyReadonlyArray1<'_, u64>>() {
        return Ok(a.as_slice()?.to_vec());
    }
    if let Ok(a) = idx.extract::<PyReadonlyArray1<'_, i64>>() {
        let s = a.as_slice()?;
        return s
            .iter()
            .map(|&v| {
                u64::try_from(v).map_err(|_| zrecord::Error::OutOfRange {
                    index: i128::from(v),
                    len,
                })
            })
            .collect::<zrecord::Result<Vec<u64>>>()
            .py_err();
    }
    Err(wrong_type(
        "positions must be a contiguous 1-D int64 or uint64 array",
    ))
}

/// Storage options from a dict of names to strings, integers, floats and
/// booleans, each value kept as the type it was given; `loaderx_remote` checks
/// names and values, naming the key of any it refuses.
pub fn storage_options(options: &Bound<'_, PyAny>) -> PyResult<Vec<(String, OptionValue)>> {
    let dict = options.cast::<PyDict>().map_err(|_| {
        wrong_type(format!(
            "storage_options must be a dict, got {}",
            type_name(options)
        ))
    })?;
    dict.iter()
        .map(|(k, v)| {
            let key = k
                .cast::<PyString>()
                .map_err(|_| {
                    wrong_type(format!(
                        "storage option names are str, got {}",
                        type_name(&k)
                    ))
                })?
                .to_string();
            let value = if v.is_instance_of::<PyBool>() {
                OptionValue::Bool(v.extract()?)
            } else if v.is_instance_of::<PyInt>() {
                OptionValue::Int(v.extract().map_err(|_| {
                    invalid_argument(format!("storage option {key} is out of range, got {v}"))
                })?)
            } else if v.is_instance_of::<PyFloat>() {
                OptionValue::Float(v.extract()?)
            } else if v.is_instance_of::<PyString>() {
                OptionValue::Str(v.extract().map_err(|_| {
                    invalid_argument(format!(
                        "storage option {key} holds a lone surrogate, which UTF-8 cannot encode"
                    ))
                })?)
            } else {
                return Err(wrong_type(format!(
                    "storage option {key:?} must be a str, bool, int or float, got {}",
                    type_name(&v)
                )));
            };
            Ok((key, value))
        })
        .collect()
}

fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type()
        .name()
        .map_or_else(|_| "object".to_string(), |n| n.to_string())
}
