//! Reducing any JSON value without building it: the serde machinery that
//! `frame.rs`'s schema is written in.
//!
//! A [`Reduce`] type says what one JSON value of any type comes to; every
//! case it does not state is "nothing useful here", and containers are
//! drained without allocating. [`Fields`] is a JSON object with a few known
//! keys, read by [`Obj`]; the [`fields!`] macro writes an object's key enum
//! and its [`Fields`] impl from one line per key. The leaf reducers
//! ([`Count`], [`Number`], [`NonEmpty`], [`NonNull`]) are the schema's field
//! types. A value of an unexpected type reduces to its default, so one odd
//! field never fails the payload around it.

use std::fmt;
use std::marker::PhantomData;

use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

/// How one JSON value of any type reduces to `Self`. Every method defaults
/// to "nothing useful here", and containers are drained without building
/// anything, so an implementation only states the cases it cares about.
pub(super) trait Reduce<'de>: Default {
    fn u64(_: u64) -> Self {
        Self::default()
    }
    fn i64(_: i64) -> Self {
        Self::default()
    }
    fn f64(_: f64) -> Self {
        Self::default()
    }
    fn str(_: &str) -> Self {
        Self::default()
    }
    fn bool(_: bool) -> Self {
        Self::default()
    }
    fn null() -> Self {
        Self::default()
    }
    /// An array or object, after it has been skipped.
    fn container(_non_empty: bool) -> Self {
        Self::default()
    }
    fn seq<A: SeqAccess<'de>>(mut seq: A) -> Result<Self, A::Error> {
        let non_empty = seq.next_element::<IgnoredAny>()?.is_some();
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(Self::container(non_empty))
    }
    fn map<A: MapAccess<'de>>(mut map: A) -> Result<Self, A::Error> {
        let non_empty = map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some();
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(Self::container(non_empty))
    }
}

/// The one visitor (and seed) behind every [`Reduce`] type. It always goes
/// through `deserialize_any`, so the JSON decides which method runs.
pub(super) struct Reducer<T>(PhantomData<T>);

impl<T> Reducer<T> {
    pub(super) fn new() -> Self {
        Self(PhantomData)
    }
}

impl<'de, T: Reduce<'de>> DeserializeSeed<'de> for Reducer<T> {
    type Value = T;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<T, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de, T: Reduce<'de>> Visitor<'de> for Reducer<T> {
    type Value = T;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<T, E> {
        Ok(T::bool(v))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<T, E> {
        Ok(T::i64(v))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<T, E> {
        Ok(T::u64(v))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<T, E> {
        Ok(T::f64(v))
    }
    // serde's default `visit_borrowed_str` forwards here, so both the
    // zero-copy and the unescaped-into-scratch cases arrive as `&str`.
    fn visit_str<E: de::Error>(self, v: &str) -> Result<T, E> {
        Ok(T::str(v))
    }
    fn visit_unit<E: de::Error>(self) -> Result<T, E> {
        Ok(T::null())
    }
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<T, A::Error> {
        T::seq(seq)
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<T, A::Error> {
        T::map(map)
    }
}

/// A JSON object with a few known keys.
pub(super) trait Fields<'de>: Default {
    type Key: Copy;
    /// Which known key `name` is; `None` skips the value unread.
    fn key(name: &str) -> Option<Self::Key>;
    /// Reads the value of a known key (a repeated key: the last one wins).
    fn value<A: MapAccess<'de>>(&mut self, key: Self::Key, map: &mut A) -> Result<(), A::Error>;
}

/// `Some` when the value was an object; any other JSON type is `None`.
pub(super) struct Obj<T>(pub(super) Option<T>);

impl<T> Default for Obj<T> {
    fn default() -> Self {
        Self(None)
    }
}

impl<'de, T: Fields<'de>> Reduce<'de> for Obj<T> {
    fn map<A: MapAccess<'de>>(mut map: A) -> Result<Self, A::Error> {
        let mut fields = T::default();
        while let Some(key) = map.next_key_seed(KeySeed::<T>(PhantomData))? {
            match key {
                Some(key) => fields.value(key, &mut map)?,
                None => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(Self(Some(fields)))
    }
}

/// Reads an object key straight into `T::Key` without allocating.
struct KeySeed<T>(PhantomData<T>);

impl<'de, T: Fields<'de>> DeserializeSeed<'de> for KeySeed<T> {
    type Value = Option<T::Key>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de, T: Fields<'de>> Visitor<'de> for KeySeed<T> {
    type Value = Option<T::Key>;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an object key")
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        Ok(T::key(v))
    }
}

pub(super) fn read<'de, T: Reduce<'de>, A: MapAccess<'de>>(map: &mut A) -> Result<T, A::Error> {
    map.next_value_seed(Reducer::<T>::new())
}

// ---- Leaf values ------------------------------------------------------------

/// A token count: a non-negative integer, or a float with a zero fraction
/// (some engines serialise counts through a float); anything else is
/// "not reported" rather than a rounded guess.
#[derive(Default)]
pub(super) struct Count(pub(super) Option<u64>);

impl Reduce<'_> for Count {
    fn u64(v: u64) -> Self {
        Self(Some(v))
    }
    fn f64(v: f64) -> Self {
        // 2^64 as f64; `as` would saturate above it.
        const LIMIT: f64 = 18_446_744_073_709_551_616.0;
        let whole = v.fract() == 0.0 && (0.0..LIMIT).contains(&v);
        Self(whole.then_some(v as u64))
    }
}

/// An engine duration or rate, copied as sent.
#[derive(Default)]
pub(super) struct Number(pub(super) Option<f64>);

impl Reduce<'_> for Number {
    fn u64(v: u64) -> Self {
        Self(Some(v as f64))
    }
    fn i64(v: i64) -> Self {
        Self(Some(v as f64))
    }
    fn f64(v: f64) -> Self {
        Self(Some(v))
    }
}

/// Whether a delta field carries output: a non-empty string, array or
/// object (content-part arrays and tool-call lists included).
#[derive(Default)]
pub(super) struct NonEmpty(pub(super) bool);

impl Reduce<'_> for NonEmpty {
    fn str(v: &str) -> Self {
        Self(!v.is_empty())
    }
    fn container(non_empty: bool) -> Self {
        Self(non_empty)
    }
}

/// Present and not `null`.
#[derive(Default)]
pub(super) struct NonNull(pub(super) bool);

impl Reduce<'_> for NonNull {
    fn u64(_: u64) -> Self {
        Self(true)
    }
    fn i64(_: i64) -> Self {
        Self(true)
    }
    fn f64(_: f64) -> Self {
        Self(true)
    }
    fn str(_: &str) -> Self {
        Self(true)
    }
    fn bool(_: bool) -> Self {
        Self(true)
    }
    fn container(_: bool) -> Self {
        Self(true)
    }
}

/// Implements [`Fields`] for a struct whose known keys are each read into
/// one field of it, and writes its key enum (one variant per field, named
/// like it):
///
/// ```text
/// fields!(Top, TopKey { "choices" => choices, "type" => kind });
/// fields!(Timings, TimingsKey { "prompt_n" => prompt_n as Count });
/// ```
///
/// `as R` reads the value as the leaf reducer `R` and stores what it holds
/// (for a field that is a plain `Option`, as in a result type). A repeated
/// key: the last one wins.
macro_rules! fields {
    ($object:ty, $key:ident { $($name:literal => $field:ident $(as $via:ident)?),+ $(,)? }) => {
        // As visible as `Fields` is (the macro is used one level below it).
        #[allow(non_camel_case_types)]
        #[derive(Clone, Copy)]
        pub(super) enum $key {
            $($field),+
        }

        impl<'de> $crate::observe::reduce::Fields<'de> for $object {
            type Key = $key;
            fn key(name: &str) -> Option<$key> {
                match name {
                    $($name => Some($key::$field),)+
                    _ => None,
                }
            }
            fn value<A: ::serde::de::MapAccess<'de>>(
                &mut self,
                key: $key,
                map: &mut A,
            ) -> Result<(), A::Error> {
                match key {
                    $($key::$field => self.$field = fields!(@read map $(, $via)?),)+
                }
                Ok(())
            }
        }
    };
    (@read $map:ident) => {
        $crate::observe::reduce::read($map)?
    };
    (@read $map:ident, $via:ident) => {
        $crate::observe::reduce::read::<$via, A>($map)?.0
    };
}

pub(super) use fields;
