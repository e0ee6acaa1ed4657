#![no_main]
// See crates/spindle-fuzz: spindle_fuzz::h3 says what is checked.
libfuzzer_sys::fuzz_target!(|data: &[u8]| spindle_fuzz::h3(data));
