#![no_main]
//! See mcpgate::fuzzing::jsonrpc_body.
libfuzzer_sys::fuzz_target!(|data: &[u8]| mcpgate::fuzzing::jsonrpc_body(data));
