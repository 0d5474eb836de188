//! cargo-fuzz target: any input must either load or produce diagnostics,
//! never panic. Run from fuzz/: `RUSTC_BOOTSTRAP=1 cargo fuzz run config_parse`.
#![no_main]
#![forbid(unsafe_code)]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    // The first byte picks the syntax so both loaders are exercised.
    let name = if data.first().is_some_and(|b| b % 4 == 0) {
        "fuzz.toml"
    } else {
        "fuzz.conf"
    };
    if let Err(diags) = config::parse_str(name, &text, std::path::Path::new("/tmp")) {
        assert!(!diags.errors.is_empty());
        let _ = diags.to_string();
    }
});
