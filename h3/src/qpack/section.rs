//! Decoding one encoded field section (RFC 9204 §4.5): the prefix (Required Insert Count
//! and Base), then field lines naming static entries, dynamic entries relative to the Base
//! or after it (post-base), or literals.

use h2::Field;

use super::prefix::{read_int, read_string, Bad};
use super::static_table;
use super::table::DynamicTable;
use crate::counters::Flood;

/// Why a section was refused: it is not valid QPACK (QPACK_DECOMPRESSION_FAILED).
pub type Invalid = &'static str;

fn invalid(b: Bad) -> Invalid {
    match b {
        Bad::Incomplete => "field section truncated",
        Bad::Invalid(why) => why,
    }
}

/// A section's prefix, decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Prefix {
    pub required_insert_count: u64,
    pub base: u64,
    /// Where the field lines start.
    pub lines_at: usize,
}

/// §4.5.1.1: the encoded Required Insert Count is taken modulo twice the most entries the
/// table can hold, and unwrapped against the inserts received so far.
pub fn read_prefix(block: &[u8], table: &DynamicTable) -> Result<Prefix, Invalid> {
    let mut at = 0;
    let encoded = read_int(block, &mut at, 8).map_err(invalid)?;
    let max_entries = table.max_capacity() / 32;
    let full_range = 2 * max_entries;
    let ric = if encoded == 0 {
        0
    } else {
        if encoded > full_range {
            return Err("encoded Required Insert Count out of range");
        }
        let max_value = table.insert_count() + max_entries;
        let max_wrapped = max_value / full_range * full_range;
        let mut ric = max_wrapped + encoded - 1;
        if ric > max_value {
            if ric <= full_range {
                return Err("Required Insert Count beyond the table");
            }
            ric -= full_range;
        }
        if ric == 0 {
            return Err("Required Insert Count decodes to 0");
        }
        ric
    };
    let sign = *block.get(at).ok_or("field section truncated")? & 0x80 != 0;
    let delta = read_int(block, &mut at, 7).map_err(invalid)?;
    // §4.5.1.2: Base = RIC + Delta, or RIC - Delta - 1 with the sign bit.
    let base = if sign {
        ric.checked_sub(delta + 1).ok_or("negative Base")?
    } else {
        ric.checked_add(delta).ok_or("Base too large")?
    };
    Ok(Prefix {
        required_insert_count: ric,
        base,
        lines_at: at,
    })
}

/// What a section decoded to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decoded {
    Fields(Vec<Field>),
    /// Valid so far, but over a limit (`Flood::FieldSectionSize` or
    /// `Flood::HeaderFields`): the request is answered 431. Decoding stopped there; a
    /// section changes nothing in the table, so nothing is lost by stopping.
    TooLarge(Flood),
}

/// The caps a section is decoded under.
#[derive(Clone, Copy, Debug)]
pub struct SectionLimits {
    pub max_size: u64,
    pub max_fields: usize,
}

/// Where field lines find dynamic entries: the table, below Required Insert Count.
struct Refs<'t> {
    table: &'t DynamicTable,
    ric: u64,
    base: u64,
}

impl Refs<'_> {
    fn absolute(&self, absolute: Option<u64>) -> Result<(&[u8], &[u8]), Invalid> {
        let abs = absolute.ok_or("dynamic reference before the table")?;
        if abs >= self.ric {
            return Err("dynamic reference at or past Required Insert Count");
        }
        self.table
            .get(abs)
            .ok_or("dynamic reference to an evicted entry")
    }

    /// §3.2.5: relative to the Base, counting down.
    fn relative(&self, index: u64) -> Result<(&[u8], &[u8]), Invalid> {
        self.absolute(self.base.checked_sub(index).and_then(|b| b.checked_sub(1)))
    }

    /// §3.2.6: post-base, counting up from the Base.
    fn post_base(&self, index: u64) -> Result<(&[u8], &[u8]), Invalid> {
        self.absolute(self.base.checked_add(index))
    }

    fn name_ref(&self, is_static: bool, index: u64) -> Result<Vec<u8>, Invalid> {
        if is_static {
            let (name, _) = static_table::get(index).ok_or("static index out of range")?;
            return Ok(name.to_vec());
        }
        Ok(self.relative(index)?.0.to_vec())
    }
}

/// Decodes the field lines of `block` after its prefix.
pub fn decode_lines(
    block: &[u8],
    prefix: Prefix,
    table: &DynamicTable,
    limits: SectionLimits,
) -> Result<Decoded, Invalid> {
    let refs = Refs {
        table,
        ric: prefix.required_insert_count,
        base: prefix.base,
    };
    let mut at = prefix.lines_at;
    let mut fields = Vec::new();
    let mut size = 0u64;
    while at < block.len() {
        let (name, value) = line(block, &mut at, &refs)?;
        size += name.len() as u64 + value.len() as u64 + 32;
        if size > limits.max_size {
            return Ok(Decoded::TooLarge(Flood::FieldSectionSize));
        }
        if fields.len() == limits.max_fields {
            return Ok(Decoded::TooLarge(Flood::HeaderFields));
        }
        fields.push(Field { name, value });
    }
    Ok(Decoded::Fields(fields))
}

fn int(block: &[u8], at: &mut usize, prefix: u8) -> Result<u64, Invalid> {
    read_int(block, at, prefix).map_err(invalid)
}

fn string(block: &[u8], at: &mut usize, prefix: u8) -> Result<Vec<u8>, Invalid> {
    let mut s = Vec::new();
    read_string(block, at, prefix, &mut s).map_err(invalid)?;
    Ok(s)
}

/// One field line (§4.5.2 to §4.5.6). The N bit ("never index") is not kept: a proxy
/// passes the field on, and our encoder never indexes anything.
fn line(block: &[u8], at: &mut usize, refs: &Refs) -> Result<(Vec<u8>, Vec<u8>), Invalid> {
    let b = block[*at];
    if b & 0x80 != 0 {
        // 1Txxxxxx: Indexed Field Line.
        let index = int(block, at, 6)?;
        let (n, v) = if b & 0x40 != 0 {
            static_table::get(index).ok_or("static index out of range")?
        } else {
            refs.relative(index)?
        };
        Ok((n.to_vec(), v.to_vec()))
    } else if b & 0x40 != 0 {
        // 01NTxxxx: Literal Field Line with Name Reference.
        let name = refs.name_ref(b & 0x10 != 0, int(block, at, 4)?)?;
        Ok((name, string(block, at, 7)?))
    } else if b & 0x20 != 0 {
        // 001NHxxx: Literal Field Line with Literal Name.
        let name = string(block, at, 3)?;
        Ok((name, string(block, at, 7)?))
    } else if b & 0x10 != 0 {
        // 0001xxxx: Indexed Field Line with Post-Base Index.
        let (n, v) = refs.post_base(int(block, at, 4)?)?;
        Ok((n.to_vec(), v.to_vec()))
    } else {
        // 0000Nxxx: Literal Field Line with Post-Base Name Reference.
        let name = refs.post_base(int(block, at, 3)?)?.0.to_vec();
        Ok((name, string(block, at, 7)?))
    }
}
