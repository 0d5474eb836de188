//! serde adapters: durations as whole seconds, optional values with 0 for
//! "none" (Tempesta's "0 = unlimited/off").

/// Durations as whole seconds.
pub mod secs {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(d.as_secs())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        u64::deserialize(d).map(Duration::from_secs)
    }
}

/// Optional durations as whole seconds, 0 meaning `None` (Tempesta's
/// "0 = disabled"), so TOML can say "unlimited" explicitly.
pub mod opt_secs {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;

    pub fn serialize<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(d.map_or(0, |d| d.as_secs()))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
        let secs = u64::deserialize(d)?;
        Ok((secs != 0).then(|| Duration::from_secs(secs)))
    }
}

/// Optional limits as integers, 0 meaning unlimited (`None`).
pub mod limit {
    use serde::{de::Error, Deserialize, Deserializer, Serializer};

    pub fn serialize<T, S>(v: &Option<T>, s: S) -> Result<S::Ok, S::Error>
    where
        T: Copy + Into<u64>,
        S: Serializer,
    {
        s.serialize_u64(v.map_or(0, Into::into))
    }

    pub fn deserialize<'de, T, D>(d: D) -> Result<Option<T>, D::Error>
    where
        T: TryFrom<u64>,
        D: Deserializer<'de>,
    {
        let n = u64::deserialize(d)?;
        if n == 0 {
            return Ok(None);
        }
        T::try_from(n)
            .map(Some)
            .map_err(|_| D::Error::custom(format!("limit {n} is too large")))
    }
}

/// Durations as whole milliseconds (`js_challenge` delays).
pub mod millis {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        u64::deserialize(d).map(Duration::from_millis)
    }
}
