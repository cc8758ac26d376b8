//! Datamodel values: null, booleans, numbers, strings, lists and maps.
//!
//! Cloning is cheap: strings, lists and maps are reference-counted and copied on write
//! (`Arc::make_mut`), so binding `_event.data` or copying a variable never deep-copies.
//! Maps keep keys in order (`BTreeMap`), so their rendering is deterministic.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

/// A datamodel value.
#[derive(Clone, Debug, Default, PartialEq)]
pub enum Value {
    /// No value (`null`); also the value of a declared variable without `expr`.
    #[default]
    Null,
    /// `true` / `false`.
    Bool(bool),
    /// A number (IEEE double, as in ECMAScript).
    Number(f64),
    /// A string.
    String(Arc<str>),
    /// A list, indexed from 0.
    List(Arc<Vec<Value>>),
    /// A map from string keys.
    Map(Arc<BTreeMap<String, Value>>),
}

impl Value {
    /// A string value.
    pub fn str(s: &str) -> Value {
        Value::String(Arc::from(s))
    }

    /// A list value.
    pub fn list(items: Vec<Value>) -> Value {
        Value::List(Arc::new(items))
    }

    /// A map value.
    pub fn map(entries: BTreeMap<String, Value>) -> Value {
        Value::Map(Arc::new(entries))
    }

    /// The type name used in messages and by `typeof(x)`.
    pub fn type_name(&self) -> &'static str {
        match self {
            Value::Null => "null",
            Value::Bool(_) => "bool",
            Value::Number(_) => "number",
            Value::String(_) => "string",
            Value::List(_) => "list",
            Value::Map(_) => "map",
        }
    }

    /// Truthiness as in ECMAScript: null, false, 0, NaN and "" are false.
    pub fn truthy(&self) -> bool {
        match self {
            Value::Null => false,
            Value::Bool(b) => *b,
            Value::Number(n) => *n != 0.0 && !n.is_nan(),
            Value::String(s) => !s.is_empty(),
            Value::List(_) | Value::Map(_) => true,
        }
    }

    /// The string, if this is one.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(s) => Some(s),
            _ => None,
        }
    }

    /// The number, if this is one.
    pub fn as_f64(&self) -> Option<f64> {
        match self {
            Value::Number(n) => Some(*n),
            _ => None,
        }
    }

    /// Member `key` of a map.
    pub fn get(&self, key: &str) -> Option<&Value> {
        match self {
            Value::Map(m) => m.get(key),
            _ => None,
        }
    }

    /// Loose equality: numbers compare numerically, a number equals a string that parses to
    /// it (as in ECMAScript `==`, so `Var1 == '1'` holds for a numeric 1), lists and maps
    /// compare structurally.
    pub fn loose_eq(&self, other: &Value) -> bool {
        match (self, other) {
            (Value::Number(a), Value::String(b)) | (Value::String(b), Value::Number(a)) => {
                b.trim().parse::<f64>().is_ok_and(|b| b == *a)
            }
            (Value::Bool(a), Value::Number(b)) | (Value::Number(b), Value::Bool(a)) => {
                f64::from(u8::from(*a)) == *b
            }
            _ => self == other,
        }
    }

    /// Converts JSON to a value.
    pub fn from_json(j: &serde_json::Value) -> Value {
        match j {
            serde_json::Value::Null => Value::Null,
            serde_json::Value::Bool(b) => Value::Bool(*b),
            serde_json::Value::Number(n) => Value::Number(n.as_f64().unwrap_or(f64::NAN)),
            serde_json::Value::String(s) => Value::str(s),
            serde_json::Value::Array(a) => Value::list(a.iter().map(Value::from_json).collect()),
            serde_json::Value::Object(o) => Value::map(
                o.iter()
                    .map(|(k, v)| (k.clone(), Value::from_json(v)))
                    .collect(),
            ),
        }
    }

    /// Converts a value to JSON (NaN and infinities become null).
    pub fn to_json(&self) -> serde_json::Value {
        match self {
            Value::Null => serde_json::Value::Null,
            Value::Bool(b) => serde_json::Value::Bool(*b),
            Value::Number(n) => serde_json::Number::from_f64(*n)
                .map(|n| {
                    if n.as_f64()
                        .is_some_and(|f| f.fract() == 0.0 && f.abs() < 9.0e15)
                    {
                        #[allow(clippy::cast_possible_truncation)]
                        serde_json::Value::from(n.as_f64().unwrap_or(0.0) as i64)
                    } else {
                        serde_json::Value::Number(n)
                    }
                })
                .unwrap_or(serde_json::Value::Null),
            Value::String(s) => serde_json::Value::String(s.to_string()),
            Value::List(l) => serde_json::Value::Array(l.iter().map(Value::to_json).collect()),
            Value::Map(m) => {
                serde_json::Value::Object(m.iter().map(|(k, v)| (k.clone(), v.to_json())).collect())
            }
        }
    }
}

/// Formats a number as ECMAScript does for integers (`1`, not `1.0`).
pub(crate) fn fmt_number(n: f64, f: &mut fmt::Formatter<'_>) -> fmt::Result {
    if n.fract() == 0.0 && n.abs() < 1e21 {
        write!(f, "{n:.0}")
    } else {
        write!(f, "{n}")
    }
}

impl fmt::Display for Value {
    /// Strings display bare; other values as JSON-like text.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Null => f.write_str("null"),
            Value::Bool(b) => write!(f, "{b}"),
            Value::Number(n) => fmt_number(*n, f),
            Value::String(s) => f.write_str(s),
            Value::List(_) | Value::Map(_) => write!(f, "{}", self.to_json()),
        }
    }
}

impl From<&str> for Value {
    fn from(s: &str) -> Value {
        Value::str(s)
    }
}

impl From<f64> for Value {
    fn from(n: f64) -> Value {
        Value::Number(n)
    }
}

impl From<bool> for Value {
    fn from(b: bool) -> Value {
        Value::Bool(b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truthiness_and_equality() {
        assert!(!Value::Null.truthy());
        assert!(Value::Number(2.0).truthy());
        assert!(!Value::str("").truthy());
        assert!(Value::Number(1.0).loose_eq(&Value::str("1")));
        assert!(!Value::Number(1.0).loose_eq(&Value::str("x")));
        assert_eq!(Value::Number(3.0).to_string(), "3");
        assert_eq!(Value::Number(0.5).to_string(), "0.5");
    }
}
