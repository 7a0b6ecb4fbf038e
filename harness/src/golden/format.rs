//! Parsing golden-v1 with typed errors: every malformed field is named.

use crate::backend::{Array, DType, Float};
use crate::tolerance::Tol;
use crate::tree::Tree;
use crate::{Error, Result};
use serde_json::{Map, Value};

/// A parsed case: the common fields, and the whole document for the kind-specific replay.
#[derive(Debug, Clone)]
pub struct Case {
    /// The file the case was read from, as given.
    pub file: String,
    /// The case's `name`.
    pub name: String,
    /// The case's `kind`, which selects the replay.
    pub kind: String,
    /// The case's dtype (float32 or float64).
    pub dtype: DType,
    /// The case's `tolerance` (`rtol`, `atol`).
    pub tolerance: Tol,
    /// The whole parsed document.
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
        serde_json::from_str::<NoDuplicateKeys>(text)
            .map_err(|e| err(format!("invalid golden JSON: {e}")))?;
        let obj = doc
            .as_object()
            .ok_or_else(|| err("top level is not an object".into()))?;
        let s = |k: &str| -> Result<String> {
            match obj.get(k) {
                None => Err(err(format!("missing field `{k}`"))),
                Some(Value::String(v)) => Ok(v.clone()),
                Some(v) => Err(err(format!("`{k}` must be a string, got {}", kind_of(v)))),
            }
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

    /// `v` (at `path`) as an object.
    pub fn obj<'v>(&self, v: &'v Value, path: &str) -> Result<&'v Map<String, Value>> {
        v.as_object()
            .ok_or_else(|| self.err(format!("`{path}` must be an object, got {}", kind_of(v))))
    }

    /// Field `key` of the object `o` at `path` (`path` empty for the top level).
    pub fn field<'v>(&self, o: &'v Map<String, Value>, key: &str, path: &str) -> Result<&'v Value> {
        o.get(key)
            .ok_or_else(|| self.err(format!("missing field `{}`", join(path, key))))
    }

    /// `v` (at `path`) as a string.
    pub fn string<'v>(&self, v: &'v Value, path: &str) -> Result<&'v str> {
        v.as_str()
            .ok_or_else(|| self.err(format!("`{path}` must be a string, got {}", kind_of(v))))
    }

    /// `v` (at `path`) as a golden number: a JSON number or `"nan"`, `"inf"`, `"-inf"`.
    pub fn num(&self, v: &Value, path: &str) -> Result<f64> {
        match v {
            Value::Number(x) => x
                .as_f64()
                .ok_or_else(|| self.err(format!("`{path}` is not representable as f64"))),
            Value::String(s) => parse_number(v).ok_or_else(|| {
                self.err(format!(
                    "`{path}` must be a number or \"nan\"/\"inf\"/\"-inf\", got {s:?}"
                ))
            }),
            _ => Err(self.err(format!("`{path}` must be a number, got {}", kind_of(v)))),
        }
    }

    /// Field `key` of `o` as a number, or `None` when it is absent or `null`.
    pub fn opt_num(&self, o: &Map<String, Value>, key: &str, path: &str) -> Result<Option<f64>> {
        match o.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => self.num(v, &join(path, key)).map(Some),
        }
    }

    /// `v` (at `path`) as a non-negative integer (a step or evaluation count).
    pub fn count(&self, v: &Value, path: &str) -> Result<u64> {
        v.as_u64().ok_or_else(|| {
            self.err(format!(
                "`{path}` must be a non-negative integer, got {}",
                kind_of(v)
            ))
        })
    }

    /// A tensor `{"shape": [...], "data": [...]}` at `path`: its shape and row-major data, the
    /// data length checked against the shape.
    pub fn tensor(&self, v: &Value, path: &str) -> Result<(Vec<usize>, Vec<f64>)> {
        let o = self.obj(v, path)?;
        let shape: Vec<usize> = self
            .field(o, "shape", path)?
            .as_array()
            .ok_or_else(|| self.err(format!("`{path}.shape` must be an array")))?
            .iter()
            .map(|d| {
                d.as_u64()
                    .and_then(|d| usize::try_from(d).ok())
                    .ok_or_else(|| {
                        self.err(format!(
                            "`{path}.shape` entries must be non-negative integers, got {d}"
                        ))
                    })
            })
            .collect::<Result<_>>()?;
        let data: Vec<f64> = self
            .field(o, "data", path)?
            .as_array()
            .ok_or_else(|| self.err(format!("`{path}.data` must be an array")))?
            .iter()
            .enumerate()
            .map(|(i, x)| self.num(x, &format!("{path}.data[{i}]")))
            .collect::<Result<_>>()?;
        let numel = shape
            .iter()
            .try_fold(1usize, |acc, &d| acc.checked_mul(d))
            .ok_or_else(|| self.err(format!("`{path}.shape` {shape:?} overflows")))?;
        if numel != data.len() {
            return Err(self.err(format!(
                "`{path}` has {} data elements but shape {shape:?} needs {numel}",
                data.len()
            )));
        }
        Ok((shape, data))
    }
}

/// `path.key`, or `key` at the top level.
fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

/// The JSON type of `v`, for error messages.
pub fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
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
    let (shape, data) = case.tensor(v, what)?;
    Array::new(shape, data.into_iter().map(E::of_f64).collect())
        .map_err(|e| case.err(format!("{what}: {e}")))
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

/// Deserialises any JSON document, failing on an object that repeats a key (serde_json's
/// `Value` would silently keep the last one, and a case could say two things at once).
struct NoDuplicateKeys;

impl<'de> serde::Deserialize<'de> for NoDuplicateKeys {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        d.deserialize_any(NoDuplicateKeysVisitor)
    }
}

struct NoDuplicateKeysVisitor;

impl<'de> serde::de::Visitor<'de> for NoDuplicateKeysVisitor {
    type Value = NoDuplicateKeys;
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_map<M: serde::de::MapAccess<'de>>(
        self,
        mut map: M,
    ) -> std::result::Result<NoDuplicateKeys, M::Error> {
        let mut keys = std::collections::HashSet::new();
        while let Some(k) = map.next_key::<String>()? {
            if !keys.insert(k.clone()) {
                return Err(serde::de::Error::custom(format!("duplicate key `{k}`")));
            }
            map.next_value::<NoDuplicateKeys>()?;
        }
        Ok(NoDuplicateKeys)
    }
    fn visit_seq<S: serde::de::SeqAccess<'de>>(
        self,
        mut seq: S,
    ) -> std::result::Result<NoDuplicateKeys, S::Error> {
        while seq.next_element::<NoDuplicateKeys>()?.is_some() {}
        Ok(NoDuplicateKeys)
    }
    fn visit_bool<E>(self, _: bool) -> std::result::Result<NoDuplicateKeys, E> {
        Ok(NoDuplicateKeys)
    }
    fn visit_i64<E>(self, _: i64) -> std::result::Result<NoDuplicateKeys, E> {
        Ok(NoDuplicateKeys)
    }
    fn visit_u64<E>(self, _: u64) -> std::result::Result<NoDuplicateKeys, E> {
        Ok(NoDuplicateKeys)
    }
    fn visit_f64<E>(self, _: f64) -> std::result::Result<NoDuplicateKeys, E> {
        Ok(NoDuplicateKeys)
    }
    fn visit_str<E>(self, _: &str) -> std::result::Result<NoDuplicateKeys, E> {
        Ok(NoDuplicateKeys)
    }
    fn visit_unit<E>(self) -> std::result::Result<NoDuplicateKeys, E> {
        Ok(NoDuplicateKeys)
    }
}
