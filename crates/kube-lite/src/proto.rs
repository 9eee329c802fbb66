//! Just enough Kubernetes protobuf to accept what kubectl's imperative commands send
//! (`kubectl create namespace|configmap|secret ...` encode the body as
//! `application/vnd.kubernetes.protobuf`): the `k8s\0` + `runtime.Unknown` envelope and the
//! Namespace, ConfigMap, Secret and ServiceAccount messages (metadata name, generateName,
//! namespace, labels, annotations, ownerReferences and finalizers). Answers are always JSON.

use base64::Engine;
use serde_json::{Map, Value, json};

/// A decoding failure.
#[derive(Debug, thiserror::Error)]
pub enum ProtoError {
    /// Not a protobuf body kube-lite understands.
    #[error("{0}")]
    Malformed(String),
    /// A kind kube-lite does not decode from protobuf.
    #[error(
        "kube-lite decodes protobuf only for Namespace, ConfigMap, Secret and ServiceAccount (got {0:?}); send JSON"
    )]
    Unsupported(String),
}

enum Wire<'a> {
    Varint(u64),
    Bytes(&'a [u8]),
    Fixed,
}

struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn new(buf: &'a [u8]) -> Self {
        Self { buf, pos: 0 }
    }

    fn varint(&mut self) -> Result<u64, ProtoError> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = *self
                .buf
                .get(self.pos)
                .ok_or_else(|| ProtoError::Malformed("truncated varint".into()))?;
            self.pos += 1;
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(ProtoError::Malformed("varint too long".into()))
    }

    fn next(&mut self) -> Result<Option<(u64, Wire<'a>)>, ProtoError> {
        if self.pos >= self.buf.len() {
            return Ok(None);
        }
        let key = self.varint()?;
        let field = key >> 3;
        let wire = match key & 7 {
            0 => Wire::Varint(self.varint()?),
            1 => self.skip(8)?,
            5 => self.skip(4)?,
            2 => {
                let len = usize::try_from(self.varint()?)
                    .map_err(|_| ProtoError::Malformed("length too large".into()))?;
                let end = self.pos.checked_add(len).filter(|e| *e <= self.buf.len());
                let end = end.ok_or_else(|| ProtoError::Malformed("truncated field".into()))?;
                let b = &self.buf[self.pos..end];
                self.pos = end;
                Wire::Bytes(b)
            }
            other => {
                return Err(ProtoError::Malformed(format!(
                    "unsupported wire type {other}"
                )));
            }
        };
        Ok(Some((field, wire)))
    }

    fn skip(&mut self, n: usize) -> Result<Wire<'a>, ProtoError> {
        if self.pos + n > self.buf.len() {
            return Err(ProtoError::Malformed("truncated fixed field".into()));
        }
        self.pos += n;
        Ok(Wire::Fixed)
    }
}

fn string(b: &[u8]) -> Result<String, ProtoError> {
    String::from_utf8(b.to_vec()).map_err(|_| ProtoError::Malformed("string is not UTF-8".into()))
}

/// A map entry (key = 1, value = 2); `binary` values become base64 strings as in JSON.
fn map_entry(b: &[u8], binary: bool) -> Result<(String, Value), ProtoError> {
    let mut r = Reader::new(b);
    let (mut k, mut v) = (String::new(), Value::String(String::new()));
    while let Some((f, w)) = r.next()? {
        match (f, w) {
            (1, Wire::Bytes(x)) => k = string(x)?,
            (2, Wire::Bytes(x)) if binary => {
                v = json!(base64::engine::general_purpose::STANDARD.encode(x))
            }
            (2, Wire::Bytes(x)) => v = json!(string(x)?),
            _ => {}
        }
    }
    Ok((k, v))
}

fn insert_entry(obj: &mut Map<String, Value>, field: &str, (k, v): (String, Value)) {
    if let Value::Object(m) = obj.entry(field).or_insert_with(|| json!({})) {
        m.insert(k, v);
    }
}

fn push(obj: &mut Map<String, Value>, field: &str, v: Value) {
    if let Value::Array(a) = obj.entry(field).or_insert_with(|| json!([])) {
        a.push(v);
    }
}

fn owner_reference(b: &[u8]) -> Result<Value, ProtoError> {
    let mut r = Reader::new(b);
    let mut o = Map::new();
    while let Some((f, w)) = r.next()? {
        match (f, w) {
            (1, Wire::Bytes(x)) => {
                o.insert("kind".into(), json!(string(x)?));
            }
            (3, Wire::Bytes(x)) => {
                o.insert("name".into(), json!(string(x)?));
            }
            (4, Wire::Bytes(x)) => {
                o.insert("uid".into(), json!(string(x)?));
            }
            (5, Wire::Bytes(x)) => {
                o.insert("apiVersion".into(), json!(string(x)?));
            }
            (6, Wire::Varint(x)) => {
                o.insert("controller".into(), json!(x != 0));
            }
            (7, Wire::Varint(x)) => {
                o.insert("blockOwnerDeletion".into(), json!(x != 0));
            }
            _ => {}
        }
    }
    Ok(Value::Object(o))
}

fn object_meta(b: &[u8]) -> Result<Value, ProtoError> {
    let mut r = Reader::new(b);
    let mut m = Map::new();
    while let Some((f, w)) = r.next()? {
        match (f, w) {
            (1, Wire::Bytes(x)) if !x.is_empty() => {
                m.insert("name".into(), json!(string(x)?));
            }
            (2, Wire::Bytes(x)) if !x.is_empty() => {
                m.insert("generateName".into(), json!(string(x)?));
            }
            (3, Wire::Bytes(x)) if !x.is_empty() => {
                m.insert("namespace".into(), json!(string(x)?));
            }
            (6, Wire::Bytes(x)) if !x.is_empty() => {
                m.insert("resourceVersion".into(), json!(string(x)?));
            }
            (11, Wire::Bytes(x)) => insert_entry(&mut m, "labels", map_entry(x, false)?),
            (12, Wire::Bytes(x)) => insert_entry(&mut m, "annotations", map_entry(x, false)?),
            (13, Wire::Bytes(x)) => push(&mut m, "ownerReferences", owner_reference(x)?),
            (14, Wire::Bytes(x)) => push(&mut m, "finalizers", json!(string(x)?)),
            _ => {}
        }
    }
    Ok(Value::Object(m))
}

fn kind_body(kind: &str, raw: &[u8]) -> Result<Map<String, Value>, ProtoError> {
    let mut r = Reader::new(raw);
    let mut o = Map::new();
    while let Some((f, w)) = r.next()? {
        let Wire::Bytes(x) = w else {
            if let (Wire::Varint(v), "ConfigMap", 4) | (Wire::Varint(v), "Secret", 5) = (w, kind, f)
            {
                o.insert("immutable".into(), json!(v != 0));
            }
            continue;
        };
        match (kind, f) {
            (_, 1) => {
                o.insert("metadata".into(), object_meta(x)?);
            }
            ("Namespace", 2) => {
                let mut spec = Map::new();
                let mut sr = Reader::new(x);
                while let Some((sf, sw)) = sr.next()? {
                    if let (1, Wire::Bytes(fin)) = (sf, sw) {
                        push(&mut spec, "finalizers", json!(string(fin)?));
                    }
                }
                o.insert("spec".into(), Value::Object(spec));
            }
            ("ConfigMap", 2) => insert_entry(&mut o, "data", map_entry(x, false)?),
            ("ConfigMap", 3) => insert_entry(&mut o, "binaryData", map_entry(x, true)?),
            ("Secret", 2) => insert_entry(&mut o, "data", map_entry(x, true)?),
            ("Secret", 3) => {
                o.insert("type".into(), json!(string(x)?));
            }
            ("Secret", 4) => insert_entry(&mut o, "stringData", map_entry(x, false)?),
            _ => {}
        }
    }
    Ok(o)
}

/// Decodes a `application/vnd.kubernetes.protobuf` body into the JSON form of the object.
pub fn decode(body: &[u8]) -> Result<Value, ProtoError> {
    let rest = body
        .strip_prefix(b"k8s\0")
        .ok_or_else(|| ProtoError::Malformed("missing the k8s protobuf magic number".into()))?;
    let mut r = Reader::new(rest);
    let (mut api_version, mut kind, mut raw) = (String::new(), String::new(), None);
    while let Some((f, w)) = r.next()? {
        match (f, w) {
            (1, Wire::Bytes(tm)) => {
                let mut t = Reader::new(tm);
                while let Some((tf, tw)) = t.next()? {
                    match (tf, tw) {
                        (1, Wire::Bytes(x)) => api_version = string(x)?,
                        (2, Wire::Bytes(x)) => kind = string(x)?,
                        _ => {}
                    }
                }
            }
            (2, Wire::Bytes(x)) => raw = Some(x),
            _ => {}
        }
    }
    if !matches!(
        kind.as_str(),
        "Namespace" | "ConfigMap" | "Secret" | "ServiceAccount"
    ) || api_version != "v1"
    {
        return Err(ProtoError::Unsupported(format!("{api_version}/{kind}")));
    }
    let mut o = kind_body(&kind, raw.unwrap_or_default())?;
    o.insert("apiVersion".into(), json!(api_version));
    o.insert("kind".into(), json!(kind));
    Ok(Value::Object(o))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field(n: u64, bytes: &[u8]) -> Vec<u8> {
        let mut out = vec![((n << 3) | 2) as u8, bytes.len() as u8];
        out.extend_from_slice(bytes);
        out
    }

    fn entry(k: &str, v: &[u8]) -> Vec<u8> {
        let mut e = field(1, k.as_bytes());
        e.extend(field(2, v));
        e
    }

    fn envelope(kind: &str, raw: Vec<u8>) -> Vec<u8> {
        let mut tm = field(1, b"v1");
        tm.extend(field(2, kind.as_bytes()));
        let mut body = b"k8s\0".to_vec();
        body.extend(field(1, &tm));
        body.extend(field(2, &raw));
        body
    }

    #[test]
    fn decodes_a_secret() {
        let mut meta = field(1, b"creds");
        meta.extend(field(11, &entry("app", b"x")));
        let mut raw = field(1, &meta);
        raw.extend(field(2, &entry("password", b"hunter2")));
        raw.extend(field(3, b"Opaque"));
        let v = decode(&envelope("Secret", raw)).unwrap();
        assert_eq!(
            v,
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "creds", "labels": {"app": "x"}},
                "data": {"password": "aHVudGVyMg=="}, "type": "Opaque"})
        );
    }

    #[test]
    fn decodes_a_namespace_and_refuses_other_kinds() {
        let raw = field(1, &field(1, b"team-a"));
        assert_eq!(
            decode(&envelope("Namespace", raw)).unwrap()["metadata"]["name"],
            json!("team-a")
        );
        assert!(matches!(
            decode(&envelope("Pod", vec![])),
            Err(ProtoError::Unsupported(_))
        ));
        assert!(matches!(decode(b"nope"), Err(ProtoError::Malformed(_))));
        assert!(matches!(
            decode(b"k8s\0\x0a\x05ab"),
            Err(ProtoError::Malformed(_))
        ));
    }
}
