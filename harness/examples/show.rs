use arbitrary::Arbitrary;
fn main() {
    let data = std::fs::read(std::env::args().nth(1).unwrap()).unwrap();
    let i =
        harness::laws::fuzz::RadamInput::arbitrary_take_rest(arbitrary::Unstructured::new(&data))
            .unwrap();
    println!("{:?}", i.to_case());
    println!("{:?}", harness::laws::fuzz::radam(&data));
}
