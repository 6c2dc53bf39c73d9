//! A person's answer to an MCP server's question, read against the schema
//! the server asked with: a JSON object of its fields, or, for a question
//! with one field to fill, that field's value as text (`yes`, `3`, a
//! choice by its value or its title, several choices separated by commas).
//! `/decline` and `/cancel` decline or cancel. Fields left out take the
//! schema's defaults (SEP-1034); choices follow SEP-1330 (`enum`, titled
//! `oneOf`/`anyOf` of `const`, and arrays of them). What the schema
//! refuses is not sent: the person is asked again, with the reason.

use rmcp::model::{ElicitResult, ElicitationAction};
use serde_json::{Map, Value as Json};

/// Why an answer cannot be sent to the server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Unusable(pub(super) String);

/// `text`, the person's answer, as the server's result.
pub(super) fn read(text: &str, schema: &Json) -> Result<ElicitResult, Unusable> {
    let said = text.trim();
    let (action, content) = match serde_json::from_str::<Json>(said) {
        // A whole result, unless the schema has a field of that name.
        Ok(Json::Object(object)) => (property(schema, "action").is_none())
            .then(|| as_result(&object))
            .flatten()
            .unwrap_or((
                ElicitationAction::Accept,
                Some(Json::Object(object.clone())),
            )),
        _ => match said.to_ascii_lowercase().as_str() {
            "/decline" => (ElicitationAction::Decline, None),
            "/cancel" => (ElicitationAction::Cancel, None),
            _ => (ElicitationAction::Accept, Some(one_field(said, schema)?)),
        },
    };
    if action != ElicitationAction::Accept {
        return Ok(ElicitResult::new(action));
    }
    let mut content = (content.as_ref())
        .and_then(Json::as_object)
        .cloned()
        .unwrap_or_default();
    for (name, value) in &mut content {
        // A field given as text where the schema wants another type.
        if let (Json::String(text), Some(field)) = (&*value, property(schema, name)) {
            if field["type"] != "string" {
                *value = coerce(text, field)?;
            }
        }
    }
    fill_defaults(&mut content, schema);
    let content = Json::Object(content);
    if let Ok(validator) = jsonschema::validator_for(schema) {
        let problems: Vec<String> = (validator.iter_errors(&content).take(3))
            .map(|err| match err.instance_path.to_string() {
                at if at.is_empty() => err.to_string(),
                at => format!("{}: {err}", at.trim_start_matches('/')),
            })
            .collect();
        if !problems.is_empty() {
            return Err(Unusable(problems.join("; ")));
        }
    }
    Ok(ElicitResult::new(ElicitationAction::Accept).with_content(content))
}

/// A whole result, as an MCP client answers (`{"action", "content"}`).
fn as_result(object: &Map<String, Json>) -> Option<(ElicitationAction, Option<Json>)> {
    let only_result = object.keys().all(|key| key == "action" || key == "content");
    let action = match object.get("action")?.as_str()? {
        "accept" => ElicitationAction::Accept,
        "decline" => ElicitationAction::Decline,
        "cancel" => ElicitationAction::Cancel,
        _ => return None,
    };
    only_result.then(|| (action, object.get("content").cloned()))
}

/// Adds each property's `default` that `content` lacks (SEP-1034).
pub(super) fn fill_defaults(content: &mut Map<String, Json>, schema: &Json) {
    let Some(properties) = schema.get("properties").and_then(Json::as_object) else {
        return;
    };
    for (name, property) in properties {
        if let Some(default) = property.get("default") {
            (content.entry(name.clone())).or_insert_with(|| default.clone());
        }
    }
}

fn property<'a>(schema: &'a Json, name: &str) -> Option<&'a Json> {
    schema.get("properties")?.get(name)
}

/// The one field a text answer fills: the only property, or the only
/// required one without a default.
fn the_field(schema: &Json) -> Option<(&String, &Json)> {
    let properties = schema.get("properties").and_then(Json::as_object)?;
    if properties.len() == 1 {
        return properties.iter().next();
    }
    let required = schema.get("required").and_then(Json::as_array)?;
    let mut open = properties.iter().filter(|(name, property)| {
        property.get("default").is_none() && required.iter().any(|r| r == name.as_str())
    });
    match (open.next(), open.next()) {
        (Some(field), None) => Some(field),
        _ => None,
    }
}

/// `{field: text}` for the question's one field to fill.
fn one_field(text: &str, schema: &Json) -> Result<Json, Unusable> {
    let Some((name, field)) = the_field(schema) else {
        return Err(Unusable(format!(
            "{text:?} is not an answer to a question of several fields: answer with a JSON object of {}",
            fields(schema)
        )));
    };
    let mut content = Map::new();
    content.insert(name.clone(), coerce(text, field)?);
    Ok(Json::Object(content))
}

/// `text` as the value `field` takes.
fn coerce(text: &str, field: &Json) -> Result<Json, Unusable> {
    let word = text.trim().to_lowercase();
    let refused = |what: &str| Err(Unusable(format!("{text:?} is not {what}")));
    match field["type"].as_str() {
        Some("boolean") => match word.as_str() {
            "yes" | "y" | "true" | "ok" => Ok(Json::Bool(true)),
            "no" | "n" | "false" => Ok(Json::Bool(false)),
            _ => refused("yes or no"),
        },
        Some("integer") => word
            .parse::<i64>()
            .map(Json::from)
            .or_else(|_| refused("a whole number")),
        Some("number") => match word
            .parse::<f64>()
            .ok()
            .and_then(serde_json::Number::from_f64)
        {
            Some(number) => Ok(Json::Number(number)),
            None => refused("a number"),
        },
        Some("array") => {
            let choices = choices(&field["items"]);
            (text
                .split(',')
                .map(str::trim)
                .filter(|item| !item.is_empty()))
            .map(|item| chosen(item, &choices))
            .collect::<Result<Vec<_>, _>>()
            .map(Json::Array)
        }
        _ => match choices(field) {
            choices if choices.is_empty() => Ok(Json::String(text.trim().to_owned())),
            choices => chosen(text, &choices),
        },
    }
}

/// A field's choices (SEP-1330): `(value, title)` of `enum` (with the
/// legacy `enumNames`), or of a `oneOf`/`anyOf` of `const`.
fn choices(field: &Json) -> Vec<(Json, String)> {
    if let Some(values) = field.get("enum").and_then(Json::as_array) {
        let names = field.get("enumNames").and_then(Json::as_array);
        return (values.iter().enumerate())
            .map(|(at, value)| {
                let title = (names.and_then(|names| names.get(at)?.as_str()))
                    .map_or_else(|| shown(value), str::to_owned);
                (value.clone(), title)
            })
            .collect();
    }
    let options = (field.get("oneOf").or_else(|| field.get("anyOf"))).and_then(Json::as_array);
    (options.into_iter().flatten())
        .filter_map(|option| {
            let value = option.get("const")?.clone();
            let title = (option.get("title").and_then(Json::as_str))
                .map_or_else(|| shown(&value), str::to_owned);
            Some((value, title))
        })
        .collect()
}

fn shown(value: &Json) -> String {
    value
        .as_str()
        .map_or_else(|| value.to_string(), str::to_owned)
}

/// The choice `text` names, by its value or its title.
fn chosen(text: &str, choices: &[(Json, String)]) -> Result<Json, Unusable> {
    if choices.is_empty() {
        return Ok(Json::String(text.to_owned()));
    }
    let text = text.trim();
    (choices.iter())
        .find(|(value, title)| {
            shown(value).eq_ignore_ascii_case(text) || title.eq_ignore_ascii_case(text)
        })
        .map(|(value, _)| value.clone())
        .ok_or_else(|| {
            let names: Vec<&str> = choices.iter().map(|(_, title)| title.as_str()).collect();
            Unusable(format!("{text:?} is not one of {}", names.join(", ")))
        })
}

/// The schema's fields as a person reads them: `name (type)`, with defaults.
fn fields(schema: &Json) -> String {
    let properties = schema.get("properties").and_then(Json::as_object);
    (properties.into_iter().flatten())
        .map(|(name, field)| {
            let kind = field["type"].as_str().unwrap_or("value");
            match field.get("default") {
                Some(default) => format!("{name} ({kind}, default {default})"),
                None => format!("{name} ({kind})"),
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// How to answer a question with `schema`, as a sentence for the person.
pub fn hint(schema: &Json) -> String {
    let how = match the_field(schema) {
        Some((_, field)) => match (field["type"].as_str(), field) {
            (Some("boolean"), _) => "yes or no".to_owned(),
            (Some("integer" | "number"), _) => "a number".to_owned(),
            (Some("array"), field) => {
                format!("any of {}, separated by commas", titles(&field["items"]))
            }
            (_, field) if !choices(field).is_empty() => format!("one of {}", titles(field)),
            _ => "in words".to_owned(),
        },
        None => format!("with a JSON object of {}", fields(schema)),
    };
    format!("Answer {how}, or /decline.")
}

fn titles(field: &Json) -> String {
    let choices = choices(field);
    let names: Vec<&str> = choices.iter().map(|(_, title)| title.as_str()).collect();
    names.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn content(text: &str, schema: &Json) -> Result<Json, Unusable> {
        read(text, schema).map(|result| result.content.unwrap_or(Json::Null))
    }

    #[test]
    fn one_field_to_fill_takes_a_word_and_the_rest_take_their_defaults() {
        let schema = json!({
            "type": "object",
            "properties": {
                "confirm": {"type": "boolean"},
                "note": {"type": "string", "default": "none"}
            },
            "required": ["confirm"]
        });
        assert_eq!(
            content("Yes", &schema),
            Ok(json!({"confirm": true, "note": "none"}))
        );
        assert_eq!(
            content(r#"{"confirm": "no", "note": "later"}"#, &schema),
            Ok(json!({"confirm": false, "note": "later"}))
        );
        assert_eq!(
            content("maybe", &schema),
            Err(Unusable("\"maybe\" is not yes or no".to_owned()))
        );
        assert_eq!(hint(&schema), "Answer yes or no, or /decline.");
        let declined = read(" /decline ", &schema).map(|r| r.action);
        assert_eq!(declined, Ok(ElicitationAction::Decline));
        let client = read(r#"{"action": "cancel"}"#, &schema).map(|r| r.action);
        assert_eq!(client, Ok(ElicitationAction::Cancel));
        // A schema with a field named `action` takes it as that field.
        let with_action = json!({"type": "object", "properties": {
            "action": {"type": "string", "enum": ["decline", "approve"]}}});
        assert_eq!(
            content(r#"{"action": "decline"}"#, &with_action),
            Ok(json!({"action": "decline"}))
        );
    }

    #[test]
    fn choices_are_taken_by_value_or_title_and_others_are_refused() {
        let schema = json!({
            "type": "object",
            "properties": {
                "size": {"type": "string", "oneOf": [
                    {"const": "s", "title": "Small"}, {"const": "l", "title": "Large"}
                ]},
                "extras": {"type": "array", "items": {"type": "string", "enum": ["milk", "sugar"]}}
            },
            "required": ["size"]
        });
        assert_eq!(content("large", &schema), Ok(json!({"size": "l"})));
        assert!(content("huge", &schema).is_err_and(|e| e.0.contains("Small, Large")));
        assert_eq!(
            content(r#"{"size": "s", "extras": "milk, sugar"}"#, &schema),
            Ok(json!({"size": "s", "extras": ["milk", "sugar"]}))
        );
        // Several fields without one to fill: a JSON object is asked for.
        let two = json!({"type": "object", "properties": {
            "a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"]});
        assert!(content("3", &two).is_err_and(|e| e.0.contains("a (integer), b (integer)")));
        // What the schema refuses is not sent.
        assert!(content(r#"{"a": 1}"#, &two).is_err_and(|e| e.0.contains("\"b\" is a required")));
        assert_eq!(
            content(r#"{"a": 1, "b": "2"}"#, &two),
            Ok(json!({"a": 1, "b": 2}))
        );
    }
}
