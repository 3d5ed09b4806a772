//! Reading the lists and maps of a registry's JSON without keeping more than asked:
//! a list cut at a bound (the rest skipped unread), a map tested entry by entry and
//! dropped. A hostile document then costs its bytes on the wire, not a parsed copy of
//! every item.

use std::{borrow::Cow, marker::PhantomData};

use serde::{
    Deserialize,
    de::{IgnoredAny, MapAccess, SeqAccess, Visitor},
};

/// Reads at most `max` items of a list that may be null; beyond them the list is skipped
/// without being kept (`Some(None)`), so a hostile document costs its bytes, not ~200 B
/// per item (4 MiB of `{}` is ~1.4 million of them).
pub(crate) fn bounded_list<'de, D, T>(
    deserializer: D,
    max: usize,
) -> Result<Option<Option<Vec<T>>>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    struct Bounded<T>(usize, PhantomData<T>);
    impl<'de, T: Deserialize<'de>> Visitor<'de> for Bounded<T> {
        type Value = Option<Vec<T>>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a list")
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
            let mut items = Vec::new();
            while let Some(item) = seq.next_element::<T>()? {
                if items.len() == self.0 {
                    while seq.next_element::<IgnoredAny>()?.is_some() {}
                    return Ok(None);
                }
                items.push(item);
            }
            Ok(Some(items))
        }
    }
    struct Nullable<T>(usize, PhantomData<T>);
    impl<'de, T: Deserialize<'de>> Visitor<'de> for Nullable<T> {
        type Value = Option<Option<Vec<T>>>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a list or null")
        }
        fn visit_none<E: serde::de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_unit<E: serde::de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_some<D: serde::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
            d.deserialize_seq(Bounded(self.0, PhantomData)).map(Some)
        }
    }
    deserializer.deserialize_option(Nullable(max, PhantomData))
}

/// Whether some entry of a string map (or null) passes `test`, read without keeping the
/// map: each key and value is dropped once tested, so a map of a million entries costs
/// its bytes on the wire, not a `BTreeMap` of them.
pub(crate) fn any_entry<'de, D>(
    deserializer: D,
    test: fn(&str, &str) -> bool,
) -> Result<bool, D::Error>
where
    D: serde::Deserializer<'de>,
{
    let found = first_entry(deserializer, |key, value| test(key, value).then_some(()))?;
    Ok(found.is_some())
}

/// What `pick` makes of the first entry of a string map (or null) it takes, read as
/// [`any_entry`] reads it.
pub(crate) fn first_entry<'de, D, T>(
    deserializer: D,
    pick: impl Fn(&str, &str) -> Option<T>,
) -> Result<Option<T>, D::Error>
where
    D: serde::Deserializer<'de>,
{
    struct Entries<F>(F);
    impl<'de, T, F: Fn(&str, &str) -> Option<T>> Visitor<'de> for Entries<F> {
        type Value = Option<T>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a map of strings or null")
        }
        fn visit_unit<E: serde::de::Error>(self) -> Result<Option<T>, E> {
            Ok(None)
        }
        fn visit_none<E: serde::de::Error>(self) -> Result<Option<T>, E> {
            Ok(None)
        }
        fn visit_some<D: serde::Deserializer<'de>>(self, d: D) -> Result<Option<T>, D::Error> {
            d.deserialize_map(self)
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Option<T>, A::Error> {
            let mut found = None;
            while let Some((key, value)) = map.next_entry::<Cow<'de, str>, Cow<'de, str>>()? {
                if found.is_none() {
                    found = (self.0)(&key, &value);
                }
            }
            Ok(found)
        }
    }
    deserializer.deserialize_option(Entries(pick))
}
