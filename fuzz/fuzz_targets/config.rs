//! The config file parser and its layering: any text a user may put in config.toml.
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;
use sandguard::testing::config::Settings;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match Settings::parse_config_text(Path::new("config.toml"), text) {
        Ok(settings) => drop(format!("{settings:?}")),
        Err(e) => drop(e.to_string()),
    }
});
