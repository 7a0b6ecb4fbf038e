//! Print the line-search law input a raw fuzz input stands for, and the law outcome:
//! `cargo run --release --example ls_decode -- FILE...`.
use arbitrary::{Arbitrary, Unstructured};

fn main() {
    for path in std::env::args().skip(1) {
        let data = std::fs::read(&path).expect("readable file");
        match harness::laws::fuzz::LineSearchInput::arbitrary_take_rest(Unstructured::new(&data)) {
            Ok(input) => {
                let case = input.to_case();
                println!("{path}: {case:?}");
                println!("  -> {:?}", harness::laws::linesearch::check_case(&case));
            }
            Err(e) => println!("{path}: not decodable ({e})"),
        }
    }
}
