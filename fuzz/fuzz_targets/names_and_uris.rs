#![no_main]
//! See mcpgate::fuzzing::names_and_uris.
libfuzzer_sys::fuzz_target!(|data: &[u8]| mcpgate::fuzzing::names_and_uris(data));
