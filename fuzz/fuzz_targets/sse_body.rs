#![no_main]
//! See mcpgate::fuzzing::sse_body.
libfuzzer_sys::fuzz_target!(|data: &[u8]| mcpgate::fuzzing::sse_body(data));
