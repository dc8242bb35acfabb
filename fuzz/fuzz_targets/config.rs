#![no_main]
//! See mcpgate::fuzzing::config.
libfuzzer_sys::fuzz_target!(|data: &[u8]| mcpgate::fuzzing::config(data));
