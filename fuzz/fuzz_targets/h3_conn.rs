#![no_main]
// See crates/spindle-fuzz: spindle_fuzz::h3_conn says what is checked.
libfuzzer_sys::fuzz_target!(|data: &[u8]| spindle_fuzz::h3_conn(data));
