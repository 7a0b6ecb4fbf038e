//! Parsing golden-v1 with typed errors: every malformed field is named.

use crate::backend::{Array, DType, Float};
use crate::tolerance::Tol;
use crate::tree::Tree;
use crate::{Error, Result};
use serde_json::Value;

/// A parsed case: the common fields, and the whole document for the kind-specific replay.
#[derive(Debug, Clone)]
pub struct Case {
    pub file: String,
    pub name: String,
    pub kind: String,
    pub dtype: DType,
    pub tolerance: Tol,
    pub doc: Value,
}

impl Case {
    /// Parse the text of `file`.
    pub fn parse(file: &str, text: &str) -> Result<Case> {
        let err = |msg: String| Error::Golden {
            file: file.to_string(),
            msg,
        };
        let doc: Value =
            serde_json::from_str(text).map_err(|e| err(format!("invalid JSON: {e}")))?;
        let obj = doc
            .as_object()
            .ok_or_else(|| err("top level is not an object".into()))?;
        let s = |k: &str| -> Result<String> {
            obj.get(k)
                .and_then(Value::as_str)
                .map(str::to_string)
                .ok_or_else(|| err(format!("missing string field `{k}`")))
        };
        let format = s("format")?;
        if format != "golden-v1" {
            return Err(err(format!("format `{format}` is not golden-v1")));
        }
        let dtype_s = s("dtype")?;
        let dtype = match DType::parse(&dtype_s) {
            Some(d @ (DType::F32 | DType::F64)) => d,
            _ => return Err(err(format!("dtype `{dtype_s}` is not float32 or float64"))),
        };
        let tol = obj
            .get("tolerance")
            .ok_or_else(|| err("missing field `tolerance`".into()))?;
        let num = |k: &str| -> Result<f64> {
            tol.get(k)
                .and_then(Value::as_f64)
                .filter(|x| x.is_finite() && *x >= 0.0)
                .ok_or_else(|| err(format!("tolerance.{k} must be a non-negative number")))
        };
        let tolerance = Tol {
            rtol: num("rtol")?,
            atol: num("atol")?,
        };
        Ok(Case {
            file: file.to_string(),
            name: s("name")?,
            kind: s("kind")?,
            dtype,
            tolerance,
            doc,
        })
    }

    /// A format error naming this case's file.
    pub fn err(&self, msg: impl Into<String>) -> Error {
        Error::Golden {
            file: self.file.clone(),
            msg: msg.into(),
        }
    }

    /// The value at a `/`-separated path (JSON pointer without the leading slash).
    pub fn at(&self, path: &str) -> Result<&Value> {
        self.doc
            .pointer(&format!("/{path}"))
            .ok_or_else(|| self.err(format!("missing field `{}`", path.replace('/', "."))))
    }
}

/// A golden number: a JSON number or one of `"nan"`, `"inf"`, `"-inf"`.
pub fn parse_number(v: &Value) -> Option<f64> {
    match v {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => match s.as_str() {
            "nan" => Some(f64::NAN),
            "inf" => Some(f64::INFINITY),
            "-inf" => Some(f64::NEG_INFINITY),
            _ => None,
        },
        _ => None,
    }
}

/// A tensor `{"shape": [...], "data": [...]}` in element type `E` (values rounded to `E`).
pub fn parse_tensor<E: Float>(case: &Case, v: &Value, what: &str) -> Result<Array<E>> {
    let shape = v
        .get("shape")
        .and_then(Value::as_array)
        .ok_or_else(|| case.err(format!("{what}: missing `shape` list")))?
        .iter()
        .map(|d| d.as_u64().and_then(|d| usize::try_from(d).ok()))
        .collect::<Option<Vec<usize>>>()
        .ok_or_else(|| {
            case.err(format!(
                "{what}: shape entries must be non-negative integers"
            ))
        })?;
    let data = v
        .get("data")
        .and_then(Value::as_array)
        .ok_or_else(|| case.err(format!("{what}: missing `data` list")))?
        .iter()
        .map(|x| parse_number(x).map(E::of_f64))
        .collect::<Option<Vec<E>>>()
        .ok_or_else(|| {
            case.err(format!(
                "{what}: data entries must be numbers or \"nan\"/\"inf\"/\"-inf\""
            ))
        })?;
    Array::new(shape, data).map_err(|e| case.err(format!("{what}: {e}")))
}

/// A tree: a JSON object from leaf name to tensor.
pub fn parse_tree<E: Float>(case: &Case, v: &Value, what: &str) -> Result<Tree<E>> {
    let obj = v
        .as_object()
        .ok_or_else(|| case.err(format!("{what}: a tree must be an object of tensors")))?;
    let leaves = obj
        .iter()
        .map(|(k, t)| Ok((k.clone(), parse_tensor(case, t, &format!("{what}.{k}"))?)))
        .collect::<Result<Vec<_>>>()?;
    Tree::from_leaves(leaves).map_err(|e| case.err(format!("{what}: {e}")))
}
