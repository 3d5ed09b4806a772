//! What parsing a JSON document into typed structs may cost, read from its shape before
//! it is parsed: a few bytes of JSON can become kilobytes of struct (`{}` is four bytes
//! of a 3 MB pod review and a 3 KiB `Volume`; 230,000 of them are 700 MiB), so a body's
//! bytes alone do not bound what handling it takes. One pass that keeps nothing counts
//! the objects and the values, and [`Shape::parsed_bytes`] prices them as what they
//! could become: by the key that holds them where that is known, else as the largest
//! struct.

use std::borrow::Cow;

use serde::de::{Deserializer, MapAccess, SeqAccess, Visitor};

/// What one JSON object may become: the largest Kubernetes struct a review holds
/// (`Volume`, 3,208 bytes in k8s-openapi 0.29), rounded up.
pub const OBJECT_BYTES: usize = 3 * 1024 + 256;
/// What any other value may become beside its bytes (a `String` or a list slot).
pub const VALUE_BYTES: usize = 32;

/// What an object costs parsed, by the key that holds it (the map entry's, or the list's
/// for its items): keys whose objects are known to be small are priced as what they
/// become, any other as [`OBJECT_BYTES`]. An object under a key it does not belong under
/// is skipped by a typed parse, so pricing by key never prices an object below what it
/// becomes.
#[derive(Clone, Copy, Debug)]
pub struct Prices {
    pub by_key: &'static [(&'static str, usize)],
    /// Keys whose whole subtree is free-form JSON (a `serde_json::Value`: managed fields,
    /// maps of strings): every object under them, however deep, at this price.
    pub subtrees: &'static [(&'static str, usize)],
}

impl Prices {
    /// Every object priced as the largest struct.
    pub const ANY: Prices = Prices {
        by_key: &[],
        subtrees: &[],
    };

    fn of(self, key: &str) -> usize {
        self.by_key
            .iter()
            .find(|(k, _)| *k == key)
            .map_or(OBJECT_BYTES, |(_, price)| *price)
    }

    fn subtree(self, key: &str) -> Option<usize> {
        self.subtrees
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, price)| *price)
    }
}

/// The objects and values of a JSON document, and what its objects cost.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Shape {
    pub objects: usize,
    pub values: usize,
    pub object_bytes: usize,
}

impl Shape {
    /// Of `json`, its objects priced by `prices`; `None` when it is not JSON (its parse
    /// will say why).
    pub fn of(json: &[u8], prices: Prices) -> Option<Shape> {
        let mut shape = Shape::default();
        let mut deserializer = serde_json::Deserializer::from_slice(json);
        let counting = Counting {
            shape: &mut shape,
            prices,
            price: OBJECT_BYTES,
            subtree: None,
        };
        deserializer.deserialize_any(counting).ok().map(|()| shape)
    }

    /// At most what a typed parse of the document holds, its own bytes (strings) included.
    pub fn parsed_bytes(self, document_bytes: usize) -> usize {
        document_bytes
            .saturating_add(self.object_bytes)
            .saturating_add(self.values.saturating_mul(VALUE_BYTES))
    }
}

/// Counts a value; an object it is (or its list's items are) costs `price`, and every
/// object under it `subtree` when that is set.
struct Counting<'a> {
    shape: &'a mut Shape,
    prices: Prices,
    price: usize,
    subtree: Option<usize>,
}

impl<'de> Visitor<'de> for Counting<'_> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("JSON")
    }

    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        self.shape.values += 1;
        Ok(())
    }

    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        self.shape.values += 1;
        Ok(())
    }

    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        self.shape.values += 1;
        Ok(())
    }

    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        self.shape.values += 1;
        Ok(())
    }

    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        self.shape.values += 1;
        Ok(())
    }

    fn visit_unit<E>(self) -> Result<(), E> {
        self.shape.values += 1;
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        self.shape.values += 1;
        while seq
            .next_element_seed(Seed {
                shape: &mut *self.shape,
                prices: self.prices,
                price: self.price,
                subtree: self.subtree,
            })?
            .is_some()
        {}
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        self.shape.objects += 1;
        self.shape.object_bytes = self.shape.object_bytes.saturating_add(self.price);
        while let Some(key) = map.next_key::<Cow<'de, str>>()? {
            self.shape.values += 1;
            let subtree = self.subtree.or_else(|| self.prices.subtree(&key));
            let price = subtree.unwrap_or_else(|| self.prices.of(&key));
            map.next_value_seed(Seed {
                shape: &mut *self.shape,
                prices: self.prices,
                price,
                subtree,
            })?;
        }
        Ok(())
    }
}

struct Seed<'a> {
    shape: &'a mut Shape,
    prices: Prices,
    price: usize,
    subtree: Option<usize>,
}

impl<'de> serde::de::DeserializeSeed<'de> for Seed<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(Counting {
            shape: self.shape,
            prices: self.prices,
            price: self.price,
            subtree: self.subtree,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn objects_and_values_are_counted_without_keeping_them() {
        let shape = Shape::of(
            br#"{"a": [1, "x", {}, null, true], "b": {"c": 2.5}}"#,
            Prices::ANY,
        )
        .unwrap();
        // Objects: the document, {} and {"c"}; values: keys a, b and c, the list, its
        // four items that are not objects, and 2.5.
        assert_eq!(
            shape,
            Shape {
                objects: 3,
                values: 9,
                object_bytes: 3 * OBJECT_BYTES,
            }
        );
        assert_eq!(Shape::of(b"{", Prices::ANY), None);
        let empties = format!("[{}]", vec!["{}"; 1000].join(","));
        let shape = Shape::of(empties.as_bytes(), Prices::ANY).unwrap();
        assert_eq!(shape.objects, 1000);
        assert!(shape.parsed_bytes(empties.len()) > 1000 * 3 * 1024);
    }

    #[test]
    fn objects_are_priced_by_the_key_that_holds_them() {
        const PRICES: Prices = Prices {
            by_key: &[("imagePullSecrets", 64), ("resources", 100)],
            subtrees: &[("fieldsV1", 48)],
        };
        let pod = br#"{"metadata": {"managedFields": [{"fieldsV1": {"f:spec": {"f:a": {}}}}]},
            "spec": {"imagePullSecrets": [{"name": "a"}, {"name": "b"}],
            "resources": {"limits": {}}, "volumes": [{}]}}"#;
        let shape = Shape::of(pod, PRICES).unwrap();
        // The document, metadata, the managed fields' entry, spec, limits (an unlisted
        // key) and volumes' item at the full price; two secrets at 64, the resources
        // object at 100, and fieldsV1 with everything under it at 48.
        assert_eq!(shape.objects, 12);
        assert_eq!(shape.object_bytes, 6 * OBJECT_BYTES + 2 * 64 + 100 + 3 * 48);
    }

    #[test]
    fn a_document_nested_beyond_the_parser_limit_is_not_json() {
        let deep = format!("{}{}", "[".repeat(10_000), "]".repeat(10_000));
        assert_eq!(Shape::of(deep.as_bytes(), Prices::ANY), None);
    }
}
