//! The reference model of the redaction pass: the whole object as a `serde_json::Value`,
//! changed in place, the rules written as plainly as the module docs of `redact` say
//! them. The property tests and the fuzz targets hold [`super::full_data`] to it, and
//! [`marked`] places a marker wherever a secret may sit, for the property that none survives.
//! Entry points: [`full_by_value`], [`marked`], [`normalized`].

use serde_json::{Map, Value, json};

use super::RedactConfig;

const CONTAINER_LISTS: [&str; 3] = ["containers", "initContainers", "ephemeralContainers"];
const LAST_APPLIED: &str = super::LAST_APPLIED;

/// `full` data of `obj` as the model makes it (apiVersion `v1` and kind `Pod` added where
/// missing); `Err` where `obj` is not a JSON object.
pub fn full_by_value(obj: &[u8], redact: &RedactConfig, secret: bool) -> Result<Value, String> {
    let mut v = model(obj, redact, secret, false)?;
    if let Value::Object(o) = &mut v {
        o.entry("apiVersion").or_insert_with(|| json!("v1"));
        o.entry("kind").or_insert_with(|| json!("Pod"));
    }
    Ok(v)
}

fn model(obj: &[u8], redact: &RedactConfig, secret: bool, nested: bool) -> Result<Value, String> {
    let mut v: Value = serde_json::from_slice(obj).map_err(|e| e.to_string())?;
    let Value::Object(o) = &mut v else {
        return Err("not an object".to_string());
    };
    let m = Model {
        redact,
        secret,
        nested,
    };
    for (k, member) in o.iter_mut() {
        match (k.as_str(), &mut *member) {
            ("metadata", Value::Object(meta)) => m.metadata(meta, true),
            ("data" | "stringData", _) if secret => redact_all(member),
            (k, _) => m.generic(k, member),
        }
    }
    Ok(v)
}

fn redacted() -> Value {
    json!("<redacted>")
}

/// The rules of one pass: the config, the kind, and whether this is a last-applied copy.
struct Model<'r> {
    redact: &'r RedactConfig,
    secret: bool,
    nested: bool,
}

impl Model<'_> {
    /// A `metadata` object: the object's own (`own`, whose managedFields go) or any other.
    fn metadata(&self, meta: &mut Map<String, Value>, own: bool) {
        if own {
            meta.remove("managedFields");
        }
        let redact = self.redact;
        for (k, v) in meta.iter_mut() {
            match (k.as_str(), &mut *v) {
                ("annotations", Value::Object(a)) => {
                    for (ak, av) in a.iter_mut() {
                        if redact.annotations.contains(ak) {
                            *av = redacted();
                        } else if ak == LAST_APPLIED {
                            *av = match av {
                                Value::String(s) if !self.nested => {
                                    model(s.as_bytes(), redact, self.secret, true)
                                        .map(|c| Value::String(c.to_string()))
                                        .unwrap_or_else(|_| redacted())
                                }
                                _ => redacted(),
                            };
                        } else {
                            self.generic(ak, av);
                        }
                    }
                }
                ("labels", Value::Object(l)) if !redact.labels.is_empty() => {
                    for (lk, lv) in l.iter_mut() {
                        if redact.labels.contains(lk) {
                            *lv = redacted();
                        } else {
                            self.generic(lk, lv);
                        }
                    }
                }
                (k, _) => self.generic(k, v),
            }
        }
    }

    /// A member named `k` anywhere: a template's metadata, a container list, or searched.
    fn generic(&self, k: &str, v: &mut Value) {
        match v {
            Value::Object(meta) if k == "metadata" => self.metadata(meta, false),
            _ if self.redact.env_values && CONTAINER_LISTS.contains(&k) => self.containers(v),
            _ => self.any(v),
        }
    }

    fn any(&self, v: &mut Value) {
        match v {
            Value::Object(m) => m.iter_mut().for_each(|(k, v)| self.generic(k, v)),
            Value::Array(a) => a.iter_mut().for_each(|v| self.any(v)),
            _ => {}
        }
    }

    fn containers(&self, v: &mut Value) {
        let Value::Array(list) = v else {
            return self.any(v);
        };
        for c in list {
            let Value::Object(c) = c else {
                self.any(c);
                continue;
            };
            for (k, v) in c.iter_mut() {
                if k == "env" {
                    self.env(v)
                } else {
                    self.generic(k, v)
                }
            }
        }
    }

    fn env(&self, v: &mut Value) {
        let Value::Array(vars) = v else {
            return self.any(v);
        };
        for var in vars {
            let Value::Object(var) = var else {
                self.any(var);
                continue;
            };
            for (k, v) in var.iter_mut() {
                if k == "value" {
                    *v = redacted()
                } else {
                    self.generic(k, v)
                }
            }
        }
    }
}

fn redact_all(v: &mut Value) {
    match v {
        Value::Object(m) => m.values_mut().for_each(|v| *v = redacted()),
        Value::Array(a) => a.iter_mut().for_each(|v| *v = redacted()),
        other => *other = redacted(),
    }
}

/// The last-applied copy as the object it holds, so that key order inside it does not count.
pub fn normalized(mut v: Value) -> Value {
    if let Some(copy) =
        v.pointer_mut("/metadata/annotations/kubectl.kubernetes.io~1last-applied-configuration")
        && let Some(parsed) = copy
            .as_str()
            .and_then(|s| serde_json::from_str::<Value>(s).ok())
    {
        *copy = parsed;
    }
    v
}

/// `obj` with `marker` in every place a secret may sit: each env value of each container of
/// each container list at any depth, each value of `data` and `stringData` (when `secret`),
/// and, when `obj` has metadata, a last-applied annotation holding a copy of the marked
/// object.
pub fn marked(mut obj: Value, marker: &str, secret: bool) -> Value {
    /// Any value: container lists anywhere in it.
    fn place(v: &mut Value, marker: &str) {
        match v {
            Value::Object(m) => m.iter_mut().for_each(|(k, v)| member(k, v, marker)),
            Value::Array(a) => a.iter_mut().for_each(|e| place(e, marker)),
            _ => {}
        }
    }
    fn member(k: &str, v: &mut Value, marker: &str) {
        if CONTAINER_LISTS.contains(&k) {
            list(v, marker)
        } else {
            place(v, marker)
        }
    }
    /// A container list: each container object's env values.
    fn list(v: &mut Value, marker: &str) {
        let Value::Array(cs) = v else {
            return place(v, marker);
        };
        for c in cs {
            let Value::Object(c) = c else {
                place(c, marker);
                continue;
            };
            for (k, v) in c.iter_mut() {
                match v {
                    Value::Array(vars) if k == "env" => {
                        for var in vars.iter_mut().filter_map(Value::as_object_mut) {
                            var.insert("value".into(), json!(marker));
                        }
                    }
                    v => member(k, v, marker),
                }
            }
        }
    }
    place(&mut obj, marker);
    let Value::Object(o) = &mut obj else {
        return obj;
    };
    if secret {
        for key in ["data", "stringData"] {
            if let Some(Value::Object(d)) = o.get_mut(key) {
                d.values_mut().for_each(|v| *v = json!(marker));
            }
        }
    }
    let copy = Value::Object(o.clone()).to_string();
    if let Some(Value::Object(meta)) = o.get_mut("metadata") {
        let annotations = meta.entry("annotations").or_insert_with(|| json!({}));
        if let Value::Object(a) = annotations {
            a.insert(LAST_APPLIED.into(), json!(copy));
        }
    }
    obj
}
