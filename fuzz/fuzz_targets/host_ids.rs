#![no_main]
//! See mcpgate::fuzzing::host_ids.
libfuzzer_sys::fuzz_target!(|data: &[u8]| mcpgate::fuzzing::host_ids(data));
