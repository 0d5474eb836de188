//! Properties of the Range parser and resolver (RFC 9110 §14.1-14.2) over
//! arbitrary input: no panic, every part inside the body, bounded output.

use cache::range::{parse_range, resolve, resolve_field, RangeSpec, MAX_RANGE_SPECS};
use cache::RangeResolution;
use proptest::prelude::*;

fn spec() -> impl Strategy<Value = RangeSpec> {
    prop_oneof![
        (0u64..2000, proptest::option::of(0u64..2000)).prop_map(|(first, len)| {
            RangeSpec::FromTo {
                first,
                last: len.map(|l| first + l),
            }
        }),
        (0u64..3000).prop_map(RangeSpec::Suffix),
    ]
}

fn render(specs: &[RangeSpec]) -> String {
    let parts: Vec<String> = specs
        .iter()
        .map(|s| match s {
            RangeSpec::FromTo {
                first,
                last: Some(l),
            } => format!("{first}-{l}"),
            RangeSpec::FromTo { first, last: None } => format!("{first}-"),
            RangeSpec::Suffix(n) => format!("-{n}"),
        })
        .collect();
    format!("bytes={}", parts.join(", "))
}

proptest! {
    /// Arbitrary bytes never panic, and whatever resolves stays in bounds.
    #[test]
    fn arbitrary_input_is_safe(value in proptest::collection::vec(any::<u8>(), 0..200), len in 0usize..5000) {
        check_bounds(&resolve_field(&value, len), len);
    }

    /// Range-looking input (digits, dashes, commas, spaces) exercises the grammar.
    #[test]
    fn range_shaped_input_is_safe(value in "(bytes|BYTES|x)=[0-9, -]{0,60}", len in 0usize..5000) {
        check_bounds(&resolve_field(value.as_bytes(), len), len);
    }

    /// Well-formed specifiers round-trip through the parser.
    #[test]
    fn valid_specifiers_round_trip(specs in proptest::collection::vec(spec(), 1..MAX_RANGE_SPECS)) {
        let text = render(&specs);
        prop_assert_eq!(parse_range(text.as_bytes()), Ok(specs));
    }

    /// Satisfiable parts are exactly the §14.1.2 ones, in request order.
    #[test]
    fn resolution_matches_the_definition(specs in proptest::collection::vec(spec(), 1..8), len in 1usize..3000) {
        let wanted: Vec<(usize, usize)> = specs.iter().filter_map(|s| match *s {
            RangeSpec::FromTo { first, last } if (first as usize) < len =>
                Some((first as usize, last.map_or(len - 1, |l| (l as usize).min(len - 1)))),
            RangeSpec::Suffix(n) if n > 0 => Some((len - (n as usize).min(len), len - 1)),
            _ => None,
        }).collect();
        let got = resolve(&specs, len);
        let total: usize = wanted.iter().map(|(f, l)| l - f + 1).sum();
        match got {
            RangeResolution::NotSatisfiable => prop_assert!(wanted.is_empty()),
            RangeResolution::Ignore => prop_assert!(wanted.len() > 1 && total > len),
            RangeResolution::Satisfiable(parts) => {
                let parts: Vec<(usize, usize)> = parts.iter().map(|p| (p.first, p.last)).collect();
                prop_assert_eq!(parts, wanted);
            }
        }
    }
}

fn check_bounds(resolution: &RangeResolution, len: usize) {
    if let RangeResolution::Satisfiable(parts) = resolution {
        assert!(!parts.is_empty() && parts.len() <= MAX_RANGE_SPECS);
        let mut total = 0usize;
        for p in parts {
            assert!(p.first <= p.last && p.last < len, "{p:?} in {len}");
            total += p.byte_count();
        }
        assert!(parts.len() == 1 || total <= len);
    }
}
