use harness::cnf::{flow, CnfConfig, CnfParams};
use harness::ode::grad::GradMode;
use std::time::Instant;
fn main() {
    let cfg = CnfConfig {
        width: 64,
        depth: 3,
        blocks: 1,
        ..CnfConfig::default()
    };
    let p = CnfParams::<f64>::init(cfg, 1).unwrap();
    let x: Vec<f64> = (0..1000)
        .map(|i| ((i * 7919 % 1000) as f64 / 500.0) - 1.0)
        .collect();
    for _ in 0..3 {
        let t = Instant::now();
        let g = flow::loss_and_grad(&p, &x, None, GradMode::FullTape).unwrap();
        println!("grad {:?} loss {}", t.elapsed(), g.loss);
    }
}
