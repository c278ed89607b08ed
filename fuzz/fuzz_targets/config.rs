//! The configuration loader on arbitrary files and `PAYHOOK_*` environment overrides: a configuration or an error
//! that says what is wrong, never a panic.

#![no_main]

use libfuzzer_sys::fuzz_target;
use payhook::config::Config;

fuzz_target!(|input: (String, Vec<(String, String)>)| {
    let (text, env) = input;
    let env = env.into_iter().map(|(k, v)| (format!("PAYHOOK_{k}"), v));
    if let Err(e) = Config::from_toml_and_env(&text, "fuzz.toml", None, env) {
        assert!(!format!("{e:#}").is_empty());
    }
});
