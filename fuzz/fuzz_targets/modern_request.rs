#![no_main]
//! See mcpgate::fuzzing::modern_request.
libfuzzer_sys::fuzz_target!(|data: &[u8]| mcpgate::fuzzing::modern_request(data));
