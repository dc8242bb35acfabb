#![no_main]
//! See mcpgate::fuzzing::bearer.
libfuzzer_sys::fuzz_target!(|data: &[u8]| mcpgate::fuzzing::bearer(data));
