//! What parsing a JSON document into typed structs may cost, read from its shape before
//! it is parsed: a few bytes of JSON can become kilobytes of struct (`{}` is four bytes
//! of a 3 MB pod review and a 3 KiB `Volume`; 230,000 of them are 700 MiB), so a body's
//! bytes alone do not bound what handling it takes. One pass that keeps nothing counts
//! the objects and the values, and [`Shape::parsed_bytes`] prices them as the largest
//! struct they could become.

use serde::de::{Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

/// What one JSON object may become: the largest Kubernetes struct a review holds
/// (`Volume`, 3,208 bytes in k8s-openapi 0.29), rounded up.
pub const OBJECT_BYTES: usize = 3 * 1024 + 256;
/// What any other value may become beside its bytes (a `String` or a list slot).
pub const VALUE_BYTES: usize = 32;

/// The objects and values of a JSON document.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Shape {
    pub objects: usize,
    pub values: usize,
}

impl Shape {
    /// Of `json`; `None` when it is not JSON (its parse will say why).
    pub fn of(json: &[u8]) -> Option<Shape> {
        let mut shape = Shape::default();
        let mut deserializer = serde_json::Deserializer::from_slice(json);
        deserializer
            .deserialize_any(Counting(&mut shape))
            .ok()
            .map(|()| shape)
    }

    /// At most what a typed parse of the document holds, its own bytes (strings) included.
    pub fn parsed_bytes(self, document_bytes: usize) -> usize {
        document_bytes
            .saturating_add(self.objects.saturating_mul(OBJECT_BYTES))
            .saturating_add(self.values.saturating_mul(VALUE_BYTES))
    }
}

struct Counting<'a>(&'a mut Shape);

impl<'de> Visitor<'de> for Counting<'_> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("JSON")
    }

    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        self.0.values += 1;
        Ok(())
    }

    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        self.0.values += 1;
        Ok(())
    }

    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        self.0.values += 1;
        Ok(())
    }

    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        self.0.values += 1;
        Ok(())
    }

    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        self.0.values += 1;
        Ok(())
    }

    fn visit_unit<E>(self) -> Result<(), E> {
        self.0.values += 1;
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        self.0.values += 1;
        while seq.next_element_seed(Seed(self.0))?.is_some() {}
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        self.0.objects += 1;
        while map.next_key::<IgnoredAny>()?.is_some() {
            self.0.values += 1;
            map.next_value_seed(Seed(self.0))?;
        }
        Ok(())
    }
}

struct Seed<'a>(&'a mut Shape);

impl<'de> serde::de::DeserializeSeed<'de> for Seed<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(Counting(self.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn objects_and_values_are_counted_without_keeping_them() {
        let shape = Shape::of(br#"{"a": [1, "x", {}, null, true], "b": {"c": 2.5}}"#).unwrap();
        // Objects: the document, {} and {"c"}; values: keys a, b and c, the list, its
        // four items that are not objects, and 2.5.
        assert_eq!(
            shape,
            Shape {
                objects: 3,
                values: 9
            }
        );
        assert_eq!(Shape::of(b"{"), None);
        let empties = format!("[{}]", vec!["{}"; 1000].join(","));
        let shape = Shape::of(empties.as_bytes()).unwrap();
        assert_eq!(shape.objects, 1000);
        assert!(shape.parsed_bytes(empties.len()) > 1000 * 3 * 1024);
    }

    #[test]
    fn a_document_nested_beyond_the_parser_limit_is_not_json() {
        let deep = format!("{}{}", "[".repeat(10_000), "]".repeat(10_000));
        assert_eq!(Shape::of(deep.as_bytes()), None);
    }
}
