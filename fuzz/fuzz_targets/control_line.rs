//! The control-line parser: any bytes an owner writes to its sidecar. A line that parses must
//! print back to a line that parses to the same command.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sandguard::testing::protocol::parse_line;

fuzz_target!(|data: &[u8]| {
    match parse_line(data) {
        Ok(command) => {
            let line = command.to_line();
            let again = parse_line(line.as_bytes()).expect("a printed command parses");
            assert_eq!(again, command);
        }
        Err(e) => drop(e.to_string()),
    }
});
