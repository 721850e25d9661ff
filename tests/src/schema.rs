//! A small JSON Schema validator for the subset `schemas/events.json` and
//! `schemas/prova.toml.json` use (no well-kept validator crate builds offline here): `type`
//! (one or a list), `const`, `enum`, `properties`, `required`, `additionalProperties` (a
//! boolean or a schema), `items`, `minItems`, `maxItems`, `minimum`, `maximum`, `minLength`,
//! `pattern` (the `regex` crate's syntax, which agrees with ECMA 262 on the simple patterns
//! used), `oneOf` (exactly one), `anyOf`, and `$ref` to `#/$defs/NAME`. Annotations
//! (`description`, `title`, `format`, `default`, `$comment`, `$schema`, `$id`, `$defs`) are
//! ignored; any other keyword is an error, so a schema cannot lean on one this validator
//! would silently skip.
//!
//! [`check_event`] validates one `prova run --json` line against the repository's schema;
//! the harness calls it on every line a suite reads as events ([`crate::run::Output::events`]).
//! [`check_config`] validates a `prova.toml`, as JSON, against the config schema.

use std::sync::OnceLock;

use serde_json::Value;

/// The event schema, as committed.
pub const EVENTS_SCHEMA: &str = include_str!("../../schemas/events.json");

fn events_schema() -> &'static Value {
    static SCHEMA: OnceLock<Value> = OnceLock::new();
    SCHEMA.get_or_init(|| match serde_json::from_str(EVENTS_SCHEMA) {
        Ok(v) => v,
        Err(e) => panic!("schemas/events.json is not JSON: {e}"),
    })
}

/// The config schema, parsed.
pub fn config_schema() -> &'static Value {
    static SCHEMA: OnceLock<Value> = OnceLock::new();
    SCHEMA.get_or_init(|| match serde_json::from_str(prova_coordinator::config::JSON_SCHEMA) {
        Ok(v) => v,
        Err(e) => panic!("schemas/prova.toml.json is not JSON: {e}"),
    })
}

/// Why `value` (a `prova.toml` turned into JSON) does not match `schemas/prova.toml.json`.
pub fn check_config(value: &Value) -> Result<(), String> {
    let root = config_schema();
    validate(root, root, value, "$")
}

/// Why `value` does not match the event schema (`Err` names the first failure found and
/// where), for one `--json` line.
pub fn check_event(value: &Value) -> Result<(), String> {
    let root = events_schema();
    validate(root, root, value, "$")
}

/// Validates `value` against `schema`; `root` resolves `$ref`s.
pub fn validate(root: &Value, schema: &Value, value: &Value, at: &str) -> Result<(), String> {
    let Some(obj) = schema.as_object() else {
        return match schema {
            Value::Bool(true) => Ok(()),
            Value::Bool(false) => Err(format!("{at}: nothing is allowed here")),
            _ => Err(format!("{at}: the schema is not an object: {schema}")),
        };
    };
    for (kw, arg) in obj {
        match kw.as_str() {
            "description" | "title" | "format" | "default" | "$schema" | "$id" | "$defs"
            | "$comment" => {}
            "$ref" => {
                let target = resolve(root, arg)?;
                validate(root, target, value, at)?;
            }
            "type" => {
                let allowed: Vec<&str> = match arg {
                    Value::String(s) => vec![s.as_str()],
                    Value::Array(a) => a.iter().filter_map(Value::as_str).collect(),
                    _ => return Err(format!("{at}: bad `type` {arg}")),
                };
                if !allowed.iter().any(|t| is_type(value, t)) {
                    return Err(format!("{at}: {value} is not of type {arg}"));
                }
            }
            "const" => {
                if value != arg {
                    return Err(format!("{at}: {value} is not {arg}"));
                }
            }
            "enum" => {
                let options = arg.as_array().ok_or(format!("{at}: bad `enum`"))?;
                if !options.contains(value) {
                    return Err(format!("{at}: {value} is not one of {arg}"));
                }
            }
            "required" => {
                if let Some(o) = value.as_object() {
                    for name in arg.as_array().into_iter().flatten().filter_map(Value::as_str) {
                        if !o.contains_key(name) {
                            return Err(format!("{at}: `{name}` is missing"));
                        }
                    }
                }
            }
            "properties" => {
                if let (Some(o), Some(props)) = (value.as_object(), arg.as_object()) {
                    for (name, sub) in props {
                        if let Some(v) = o.get(name) {
                            validate(root, sub, v, &format!("{at}.{name}"))?;
                        }
                    }
                }
            }
            "additionalProperties" => {
                if let Some(o) = value.as_object() {
                    let known = obj.get("properties").and_then(Value::as_object);
                    for (name, v) in o {
                        if known.is_some_and(|k| k.contains_key(name)) {
                            continue;
                        }
                        validate(root, arg, v, &format!("{at}.{name}"))
                            .map_err(|e| format!("{e} (`{name}` is not in the schema)"))?;
                    }
                }
            }
            "items" => {
                if let Some(a) = value.as_array() {
                    for (i, v) in a.iter().enumerate() {
                        validate(root, arg, v, &format!("{at}[{i}]"))?;
                    }
                }
            }
            "minItems" | "maxItems" => {
                if let (Some(a), Some(n)) = (value.as_array(), arg.as_u64()) {
                    let ok =
                        if kw == "minItems" { a.len() as u64 >= n } else { a.len() as u64 <= n };
                    if !ok {
                        return Err(format!("{at}: {} items breaks {kw} {n}", a.len()));
                    }
                }
            }
            "minimum" => {
                if let (Some(v), Some(min)) = (value.as_f64(), arg.as_f64())
                    && v < min
                {
                    return Err(format!("{at}: {v} is below {min}"));
                }
            }
            "maximum" => {
                if let (Some(v), Some(max)) = (value.as_f64(), arg.as_f64())
                    && v > max
                {
                    return Err(format!("{at}: {v} is above {max}"));
                }
            }
            "minLength" => {
                if let (Some(s), Some(n)) = (value.as_str(), arg.as_u64())
                    && (s.chars().count() as u64) < n
                {
                    return Err(format!("{at}: {value} is shorter than {n}"));
                }
            }
            "pattern" => {
                let source = arg.as_str().ok_or(format!("{at}: bad `pattern`"))?;
                let re = regex::Regex::new(source)
                    .map_err(|e| format!("{at}: bad `pattern` {source}: {e}"))?;
                if let Some(s) = value.as_str()
                    && !re.is_match(s)
                {
                    return Err(format!("{at}: {value} does not match {source}"));
                }
            }
            "oneOf" | "anyOf" => {
                let options = arg.as_array().ok_or(format!("{at}: bad `{kw}`"))?;
                let mut errors = Vec::new();
                let mut matched = 0;
                for o in options {
                    match validate(root, o, value, at) {
                        Ok(()) => matched += 1,
                        Err(e) => errors.push(e),
                    }
                }
                if matched == 0 {
                    // The closest failure: the one that got deepest.
                    let best = errors.iter().max_by_key(|e| e.len()).cloned().unwrap_or_default();
                    return Err(format!("{at}: matches none of `{kw}`; closest: {best}"));
                }
                if kw == "oneOf" && matched > 1 {
                    return Err(format!("{at}: matches {matched} of `oneOf`"));
                }
            }
            other => return Err(format!("{at}: the validator does not know `{other}`")),
        }
    }
    Ok(())
}

fn resolve<'a>(root: &'a Value, reference: &Value) -> Result<&'a Value, String> {
    let r = reference.as_str().unwrap_or_default();
    let name = r.strip_prefix("#/$defs/").ok_or(format!("unsupported $ref {r}"))?;
    root.get("$defs").and_then(|d| d.get(name)).ok_or(format!("$ref {r} is not defined"))
}

fn is_type(v: &Value, t: &str) -> bool {
    match t {
        "null" => v.is_null(),
        "boolean" => v.is_boolean(),
        "object" => v.is_object(),
        "array" => v.is_array(),
        "string" => v.is_string(),
        "number" => v.is_number(),
        "integer" => v.is_i64() || v.is_u64(),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn check(schema: Value, value: Value) -> Result<(), String> {
        validate(&schema, &schema, &value, "$")
    }

    #[test]
    fn each_keyword_accepts_and_refuses() {
        let s = json!({
            "type": "object",
            "required": ["a"],
            "additionalProperties": false,
            "properties": {
                "a": { "type": ["integer", "null"], "minimum": 0 },
                "b": { "enum": ["x", "y"] },
                "c": { "type": "array", "items": { "const": 1 }, "minItems": 1, "maxItems": 2 },
                "d": { "$ref": "#/$defs/d" }
            },
            "$defs": { "d": { "oneOf": [{ "type": "string" }, { "type": "integer" }] } }
        });
        assert_eq!(check(s.clone(), json!({"a": 1, "b": "x", "c": [1], "d": "s"})), Ok(()));
        assert_eq!(check(s.clone(), json!({"a": null})), Ok(()));
        for bad in [
            json!({}),
            json!({"a": -1}),
            json!({"a": 1.5}),
            json!({"a": "1"}),
            json!({"a": 1, "b": "z"}),
            json!({"a": 1, "c": []}),
            json!({"a": 1, "c": [1, 1, 1]}),
            json!({"a": 1, "c": [2]}),
            json!({"a": 1, "d": true}),
            json!({"a": 1, "e": 0}),
            json!([1]),
        ] {
            assert!(check(s.clone(), bad.clone()).is_err(), "{bad} passed");
        }
    }

    #[test]
    fn one_of_means_exactly_one_and_unknown_keywords_are_refused() {
        let s = json!({ "oneOf": [{ "type": "integer" }, { "minimum": 0 }] });
        assert!(check(s.clone(), json!(-1)).is_ok());
        assert!(check(s.clone(), json!(1)).is_err(), "both match");
        let s = json!({ "anyOf": [{ "type": "integer" }, { "minimum": 0 }] });
        assert!(check(s, json!(1)).is_ok());
        assert!(check(json!({ "propertyNames": {} }), json!({})).is_err());
        assert!(check(json!({ "$ref": "#/$defs/nope" }), json!(1)).is_err());
    }

    #[test]
    fn bounds_lengths_and_patterns() {
        let s = json!({
            "type": "object",
            "properties": {
                "n": { "type": "integer", "minimum": 0, "maximum": 100, "default": 0 },
                "s": { "type": "string", "minLength": 1, "pattern": "^[a-z_]+$" }
            }
        });
        assert_eq!(check(s.clone(), json!({"n": 100, "s": "ab_c"})), Ok(()));
        for bad in [json!({"n": 101}), json!({"s": ""}), json!({"s": "A"}), json!({"s": "a-b"})] {
            assert!(check(s.clone(), bad.clone()).is_err(), "{bad} passed");
        }
        assert!(check(json!({ "pattern": "(" }), json!("a")).is_err(), "a bad pattern is an error");
        // A pattern matches anywhere unless anchored, as in JSON Schema.
        assert_eq!(check(json!({ "pattern": "\\S" }), json!("  x ")), Ok(()));
        assert!(check(json!({ "pattern": "\\S" }), json!("   ")).is_err());
    }

    #[test]
    fn the_committed_config_schema_uses_only_known_keywords() {
        assert_eq!(check_config(&json!({"workspace": {}})), Ok(()));
        assert_eq!(check_config(&json!({"project": {"name": "web"}})), Ok(()));
        assert!(check_config(&json!({"workspace": {}, "bogus": 1})).is_err());
    }

    #[test]
    fn the_committed_schema_parses_and_refuses_the_old_shapes() {
        let line = |exit: Value| {
            json!({
                "v": 1, "run_id": "r1-0", "ts": "2026-01-01T00:00:00.000Z",
                "event": "task_finished", "task": "a#b", "status": "succeeded",
                "cache": {"cache": "saved"}, "exit": exit, "attempts": 1,
                "stats": {"wall_ms": 1, "cpu_user_ms": 0, "cpu_sys_ms": 0, "max_rss_kb": 0},
                "key": null, "worker": "local", "note": null, "verdicts": []
            })
        };
        assert_eq!(check_event(&line(json!({"code": 0}))), Ok(()));
        assert_eq!(check_event(&line(json!({"signal": "SIGKILL"}))), Ok(()));
        assert_eq!(check_event(&line(json!({"timed_out": true}))), Ok(()));
        assert!(check_event(&line(json!({"Code": 0}))).is_err());
        assert!(check_event(&line(json!("TimedOut"))).is_err());
        let mut unversioned = line(json!(null));
        unversioned.as_object_mut().map(|o| o.remove("v"));
        assert!(check_event(&unversioned).is_err());
        assert!(check_event(&json!({"event": "output", "task": "a#b", "text": "x"})).is_err());
    }
}
