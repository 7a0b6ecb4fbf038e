//! The upstream bridge without Python: each law on hand-made observations (holding, and failing
//! on a small planted one), reply and result parsing, and the worker client against stand-in
//! workers written in `/bin/sh` that answer, print garbage, exit or hang.

use harness::error::WorkerErrorKind as Kind;
use harness::laws::check_property;
use harness::stack::StackConfig;
use harness::upstream::check::{self, CheckOptions, Planned, Probe, UpstreamLaw, Verdict};
use harness::upstream::observe::{
    self, BuildUnderJit, GradientStep, InitPeak, JitSteps, LeafReport, LiveArrays, Raised, Sharded,
    UpdateGradients,
};
use harness::upstream::worker::{parse_reply, Reply, Worker, WorkerCommand, STDERR_LINES};
use harness::upstream::{setup, Locations, Profile};
use harness::Error;
use serde_json::{json, Map, Value};
use std::path::PathBuf;
use std::time::{Duration, Instant};

fn kind(e: &Error) -> Option<Kind> {
    match e {
        Error::Worker { kind, .. } => Some(*kind),
        _ => None,
    }
}

// ------------------------------------------------------------------------- observations

fn live(counts: &[u64]) -> LiveArrays {
    LiveArrays {
        live_arrays: counts.to_vec(),
        live_bytes: counts.iter().map(|c| c * 4000).collect(),
        baseline_live_arrays: 0,
        live_arrays_after_release: 0,
        dtype: "float32".into(),
    }
}

#[test]
fn live_buffers_flat_holds_on_a_flat_series_and_fails_on_one_growing_buffer_per_step() {
    let flat = check::live_buffers_flat(&live(&[5; 30]));
    assert_eq!(flat.verdict, Verdict::Pass, "{}", flat.evidence);
    assert!(flat.evidence.contains("5, 5, 5"), "{}", flat.evidence);
    // optax 0.2.2's RAdam: 6, 7, ..., 35
    let leak: Vec<u64> = (6..36).collect();
    let j = check::live_buffers_flat(&live(&leak));
    assert_eq!(j.verdict, Verdict::Fail);
    assert!(j.evidence.contains("6, 15, 35"), "{}", j.evidence);
    assert!(j.evidence.contains("+29 over 29 steps"), "{}", j.evidence);
    // the smallest planted leak: one extra array at the second of two steps
    assert_eq!(
        check::live_buffers_flat(&live(&[4, 5])).verdict,
        Verdict::Fail
    );
    assert_eq!(check::live_buffers_flat(&live(&[])).verdict, Verdict::Error);
}

#[test]
fn live_buffers_flat_fails_whenever_the_last_count_differs_from_the_first() {
    let series = (1u64..20, proptest::collection::vec(0u64..50, 1..40));
    check_property(
        "upstream_live_buffers_flat",
        64,
        7,
        series,
        |(first, rest)| {
            let mut counts = vec![*first];
            counts.extend(rest);
            let j = check::live_buffers_flat(&live(&counts));
            let flat = counts.last() == counts.first();
            if (j.verdict == Verdict::Pass) == flat {
                Ok(())
            } else {
                Err(format!("{:?} on {counts:?}: {}", j.verdict, j.evidence))
            }
        },
    )
    .unwrap();
}

fn grads(nan_at: &[u64], lr_nan_from: Option<u64>) -> UpdateGradients {
    UpdateGradients {
        steps: (1..=6)
            .map(|t| GradientStep {
                t,
                rho_t: t as f64 - 0.001 * t as f64,
                grad_nan: if nan_at.contains(&t) { 8 } else { 0 },
                grad_total: 8,
                lr_grad: if lr_nan_from.is_some_and(|f| t >= f) {
                    f64::NAN
                } else {
                    -13.85 * t as f64
                },
            })
            .collect(),
        loss: "sum(params**2)".into(),
    }
}

#[test]
fn where_gradients_finite_names_the_steps_with_nan() {
    let ok = check::where_gradients_finite(&grads(&[], None));
    assert_eq!(ok.verdict, Verdict::Pass, "{}", ok.evidence);
    let j = check::where_gradients_finite(&grads(&[3, 4], Some(3)));
    assert_eq!(j.verdict, Verdict::Fail);
    assert!(j.evidence.contains("t = 3 (8/8 NaN"), "{}", j.evidence);
    assert!(j.evidence.contains("t = 4 (8/8 NaN"), "{}", j.evidence);
    assert!(j
        .evidence
        .contains("non-finite learning-rate gradient at t = 3, 4, 5, 6"));
    // planted: one NaN entry at one step, or only the learning-rate gradient
    let mut one = grads(&[], None);
    one.steps[4].grad_nan = 1;
    assert_eq!(check::where_gradients_finite(&one).verdict, Verdict::Fail);
    let mut inf = grads(&[], None);
    inf.steps[5].lr_grad = f64::INFINITY;
    assert_eq!(check::where_gradients_finite(&inf).verdict, Verdict::Fail);
}

fn leaf(path: &str, dtype: &str, weak: bool) -> LeafReport {
    LeafReport {
        path: path.into(),
        shape: vec![],
        dtype: dtype.into(),
        weak_type: weak,
        python: None,
    }
}

const MISS_1: &str = "TRACING CACHE MISS at linesearch.py:101:19 (jit_steps):\n  never seen function:\n    step id=1 defined at linesearch.py:88";
const MISS_2: &str = "TRACING CACHE MISS at linesearch.py:101:19 (jit_steps):\n  for step defined at linesearch.py:88\n  all previously seen cache keys differ. For the closest previous key:\n  different input types:\n  * at s[1].info.num_linesearch_steps, now i32[]{weak_type=False} and before i32[]{weak_type=True}https://docs.jax.dev/en/latest/type_promotion.html#weak-types";

/// The line search as optax 0.2.8 reports it: weak counter after init, strong after updates.
fn linesearch(weak_after_init: bool) -> JitSteps {
    let state = |weak: bool| {
        vec![
            leaf("s[1].learning_rate", "float32", false),
            leaf("s[1].value", "float32", false),
            leaf("s[1].info.num_linesearch_steps", "int32", weak),
            leaf("s[1].info.decrease_error", "float32", false),
        ]
    };
    let mut sigs = vec![state(weak_after_init)];
    sigs.extend((0..5).map(|_| state(false)));
    JitSteps {
        traces: if weak_after_init { 2 } else { 1 },
        cache_misses: if weak_after_init {
            vec![MISS_1.into(), MISS_2.into()]
        } else {
            vec![MISS_1.into()]
        },
        other_cache_misses: 4,
        signatures: Some(sigs),
        step_args: None,
        counter_leaf_replaced: None,
        x64: false,
    }
}

#[test]
fn one_trace_quotes_jax_on_the_changed_input() {
    let ok = check::one_trace(&linesearch(false));
    assert_eq!(ok.verdict, Verdict::Pass, "{}", ok.evidence);
    assert!(
        ok.evidence.contains("1 trace over 5 jitted calls"),
        "{}",
        ok.evidence
    );
    let j = check::one_trace(&linesearch(true));
    assert_eq!(j.verdict, Verdict::Fail);
    assert!(
        j.evidence.starts_with("2 traces over 5 jitted calls"),
        "{}",
        j.evidence
    );
    assert!(
        j.evidence.contains(
            "* at s[1].info.num_linesearch_steps, now i32[]{weak_type=False} and before i32[]{weak_type=True}"
        ),
        "{}",
        j.evidence
    );
    assert!(!j.evidence.contains("https://"), "{}", j.evidence);
    let mut never = linesearch(false);
    never.traces = 0;
    assert_eq!(check::one_trace(&never).verdict, Verdict::Error);
}

#[test]
fn a_long_cache_miss_explanation_keeps_its_beginning_and_end() {
    let mut o = linesearch(true);
    let long = format!(
        "  * at input path [0][2], now Static(val={}) and before Static(val={}), so the pytree node metadata does not match",
        "x".repeat(800),
        "y".repeat(800)
    );
    o.cache_misses[1] = format!("TRACING CACHE MISS for step\n{long}");
    let j = check::one_trace(&o);
    assert!(j.evidence.len() < 400, "{}", j.evidence);
    assert!(
        j.evidence.contains("* at input path [0][2], now Static"),
        "{}",
        j.evidence
    );
    assert!(j
        .evidence
        .contains("so the pytree node metadata does not match"));
}

#[test]
fn one_trace_fails_on_a_step_counter_passed_as_python_int() {
    let cnf = JitSteps {
        traces: 4,
        cache_misses: vec![],
        other_cache_misses: 0,
        signatures: None,
        step_args: Some(vec!["int".into(); 4]),
        counter_leaf_replaced: None,
        x64: false,
    };
    let j = check::one_trace(&cnf);
    assert_eq!(j.verdict, Verdict::Fail);
    assert!(
        j.evidence.contains("4 traces over 4 jitted calls"),
        "{}",
        j.evidence
    );
    assert!(j.evidence.contains("int x4"), "{}", j.evidence);
}

#[test]
fn signatures_identical_names_the_leaf_as_the_reference_diff_does() {
    let ok = check::signatures_identical(&linesearch(false));
    assert_eq!(ok.verdict, Verdict::Pass, "{}", ok.evidence);
    let j = check::signatures_identical(&linesearch(true));
    assert_eq!(j.verdict, Verdict::Fail);
    assert!(
        j.evidence
            .contains("leaf `s[1].info.num_linesearch_steps`: weak int32[] -> int32[]"),
        "{}",
        j.evidence
    );
    // the same text the reference's own Signature::diff writes
    let sig = |weak| {
        let mut s = harness::stage::Signature::new();
        let l = if weak {
            harness::stage::LeafSig::weak(&[], harness::backend::DType::I32)
        } else {
            harness::stage::LeafSig::strong(&[], harness::backend::DType::I32)
        };
        s.push("s[1].info.num_linesearch_steps", l);
        s
    };
    assert!(j
        .evidence
        .contains(&sig(true).diff(&sig(false)).to_string()));
    // a dtype the reference cannot name is an error, not a verdict
    let mut x64 = linesearch(false);
    x64.signatures.as_mut().unwrap()[0][2].dtype = "int64".into();
    let e = check::signatures_identical(&x64);
    assert_eq!(e.verdict, Verdict::Error);
    assert!(e.evidence.contains("int64"), "{}", e.evidence);
    // a Python int in the state (optax 0.2.4's counter) is a weak int32 to jit without x64
    let mut py = linesearch(true);
    py.signatures.as_mut().unwrap()[0][2] = LeafReport {
        python: Some("int".into()),
        ..leaf("s[1].info.num_linesearch_steps", "int64", true)
    };
    let j = check::signatures_identical(&py);
    assert!(
        j.evidence
            .contains("leaf `s[1].info.num_linesearch_steps`: weak int32[] -> int32[]"),
        "{}",
        j.evidence
    );
    py.x64 = true;
    assert_eq!(check::signatures_identical(&py).verdict, Verdict::Error);
    let mut none = linesearch(false);
    none.signatures = None;
    assert_eq!(check::signatures_identical(&none).verdict, Verdict::Error);
    // planted: a leaf that changes shape after the third update
    let mut planted = linesearch(false);
    planted.signatures.as_mut().unwrap()[3][1].shape = vec![1];
    let j = check::signatures_identical(&planted);
    assert_eq!(j.verdict, Verdict::Fail);
    assert!(j.evidence.contains("after update 3"), "{}", j.evidence);
    assert!(j.evidence.contains("s[1].value"), "{}", j.evidence);
}

fn muon_built(raised: Option<Raised>, coeffs: bool, finite: Option<bool>) -> BuildUnderJit {
    let mut leaves = vec![leaf("s.mu['w']", "float32", false)];
    if coeffs {
        leaves.push(LeafReport {
            shape: vec![3],
            ..leaf(
                "s.inner_states['muon'].inner_state[0].ns_coeffs",
                "float32",
                false,
            )
        });
    }
    BuildUnderJit {
        raised,
        state_leaves: leaves,
        coeffs_in_state: coeffs,
        update_finite: finite,
        x64: false,
    }
}

#[test]
fn coeffs_in_state_fails_on_the_tracer_error_and_on_missing_coefficients() {
    let ok = check::coeffs_in_state(&muon_built(None, true, Some(true)));
    assert_eq!(ok.verdict, Verdict::Pass, "{}", ok.evidence);
    assert!(
        ok.evidence.contains("ns_coeffs` float32[3]"),
        "{}",
        ok.evidence
    );
    let raised = Raised {
        error_type: "UnexpectedTracerError".into(),
        message: "Encountered an unexpected tracer.\nmore".into(),
        at: "update".into(),
    };
    let j = check::coeffs_in_state(&muon_built(Some(raised), false, None));
    assert_eq!(j.verdict, Verdict::Fail);
    assert!(j
        .evidence
        .starts_with("UnexpectedTracerError raised at update"));
    assert!(j.evidence.contains("no state leaf holds the coefficients"));
    assert!(!j.evidence.contains("more"), "{}", j.evidence);
    // planted: nothing raised but the coefficients live outside the state, or a NaN update
    assert_eq!(
        check::coeffs_in_state(&muon_built(None, false, Some(true))).verdict,
        Verdict::Fail
    );
    assert_eq!(
        check::coeffs_in_state(&muon_built(None, true, Some(false))).verdict,
        Verdict::Fail
    );
}

fn sharded(step_diff: f64, scale: Option<f64>) -> Sharded {
    Sharded {
        max_abs_diff: step_diff,
        bitwise_equal: false,
        devices: 2,
        per_step_max_abs_diff: vec![step_diff / 2.0, step_diff, step_diff / 3.0],
        final_params_max_abs_diff: step_diff,
        update_sharding: "NamedSharding(...)".into(),
        method: "NamedSharding(Mesh(2 cpu, ('x',)), P('x', None)) + jax.jit".into(),
        max_abs_update: scale,
        max_abs_params: scale.map(|_| 3.0),
    }
}

#[test]
fn sharded_equals_unsharded_uses_the_golden_f32_tolerance() {
    let ok = check::sharded_equals_unsharded(&sharded(2.4e-7, Some(0.0125)));
    assert_eq!(ok.verdict, Verdict::Pass, "{}", ok.evidence);
    assert!(ok.evidence.contains("not bitwise equal"), "{}", ok.evidence);
    // 2e-4 * 0.0125 + 1e-6 = 3.5e-6
    assert_eq!(
        check::sharded_equals_unsharded(&sharded(3.4e-6, Some(0.0125))).verdict,
        Verdict::Pass
    );
    assert_eq!(
        check::sharded_equals_unsharded(&sharded(3.6e-6, Some(0.0125))).verdict,
        Verdict::Fail
    );
    // without a reported magnitude: atol alone
    let j = check::sharded_equals_unsharded(&sharded(2e-6, None));
    assert_eq!(j.verdict, Verdict::Fail);
    assert!(j.evidence.contains("no update magnitude"), "{}", j.evidence);
    let mut nan = sharded(1e-7, Some(0.01));
    nan.per_step_max_abs_diff[1] = f64::NAN;
    assert_eq!(check::sharded_equals_unsharded(&nan).verdict, Verdict::Fail);
    let mut one = sharded(1e-7, Some(0.01));
    one.devices = 1;
    assert_eq!(
        check::sharded_equals_unsharded(&one).verdict,
        Verdict::Error
    );
}

fn peak(ratio: f64) -> (InitPeak, StackConfig) {
    let cfg = StackConfig::new(16, 1024, 4096, harness::backend::DType::F16).unwrap();
    let fin = cfg.final_bytes() as f64;
    (
        InitPeak {
            peak_bytes_above_baseline: (ratio * fin) as i64,
            final_bytes: cfg.final_bytes() as u64,
            baseline_bytes: 270_000_000,
            ratio,
            rss_after_bytes: 570_000_000,
            hwm_reset: true,
            strategy: "x".into(),
            layout: "list of blocks".into(),
            build_seconds: 3.0,
        },
        cfg,
    )
}

#[test]
fn peak_within_bound_uses_the_reference_bound_for_vmap_and_the_f32_model_for_layerwise() {
    let (o, cfg) = peak(5.14);
    let vmap = check::peak_bound("init-vmap-f32-then-cast", &cfg).unwrap();
    // the reference's vmap-then-cast bound: (4 + 2) / 2 = 3x the final bytes
    assert!((vmap.bytes as f64 / cfg.final_bytes() as f64 - 3.0).abs() < 1e-3);
    let j = check::peak_within_bound(&o, &cfg, &vmap);
    assert_eq!(j.verdict, Verdict::Fail, "{}", j.evidence);
    assert!(j.evidence.contains("5.14x"), "{}", j.evidence);
    assert!(j.evidence.contains("N*P*(4+s) + meta"), "{}", j.evidence);
    let layer = check::peak_bound("init-layerwise", &cfg).unwrap();
    assert!((layer.bytes as f64 / cfg.final_bytes() as f64 - 2.0).abs() < 1e-3);
    let (o, _) = peak(1.33);
    let j = check::peak_within_bound(&o, &cfg, &layer);
    assert_eq!(j.verdict, Verdict::Pass, "{}", j.evidence);
    assert_eq!(j.peak_ratio.map(|r| (r * 100.0).round()), Some(133.0));
    // planted: a layer-by-layer build that held the model in f32 after all
    let (o, _) = peak(2.01);
    assert_eq!(
        check::peak_within_bound(&o, &cfg, &layer).verdict,
        Verdict::Fail
    );
    // the worker built another size than asked
    let (mut o, _) = peak(1.3);
    o.final_bytes += 2;
    assert_eq!(
        check::peak_within_bound(&o, &cfg, &layer).verdict,
        Verdict::Error
    );
    assert!(check::peak_bound("radam", &cfg).is_none());
}

#[test]
fn judge_turns_a_result_missing_a_field_into_error_rows() {
    let laws = [UpstreamLaw::OneTrace, UpstreamLaw::SignaturesIdentical];
    let js = check::judge(
        "current",
        "linesearch",
        Probe::JitSteps,
        &json!({}),
        &laws,
        &json!({"cache_misses": []}),
    );
    assert_eq!(js.len(), 2);
    for j in &js {
        assert_eq!(j.verdict, Verdict::Error);
        assert!(
            j.evidence.contains("missing field `traces`"),
            "{}",
            j.evidence
        );
    }
    let js = check::judge(
        "current",
        "radam",
        Probe::EagerLiveArrays,
        &json!({}),
        &[UpstreamLaw::OneTrace],
        &json!({"live_arrays": [5], "live_bytes": [1], "baseline_live_arrays": 0,
                "live_arrays_after_release": 0, "dtype": "float32"}),
    );
    assert_eq!(js[0].verdict, Verdict::Error);
}

#[test]
fn non_finite_floats_arrive_as_strings() {
    let r = json!({"steps": [{"t": 3, "rho_t": 2.99, "grad_nan": 8, "grad_total": 8,
                              "lr_grad": "nan"},
                             {"t": 4, "rho_t": "inf", "grad_nan": 0, "grad_total": 8,
                              "lr_grad": "-inf"}],
                   "loss": "sum(params**2)", "rho_inf": 1999.0});
    let o: UpdateGradients = observe::parse("current", &r).unwrap();
    assert!(o.steps[0].lr_grad.is_nan());
    assert_eq!(o.steps[1].rho_t, f64::INFINITY);
    assert_eq!(o.steps[1].lr_grad, f64::NEG_INFINITY);
    let bad = json!({"steps": [{"t": 1, "rho_t": 1.0, "grad_nan": 0, "grad_total": 8,
                                "lr_grad": "NaN?"}], "loss": "x"});
    let e = observe::parse::<UpdateGradients>("current", &bad).unwrap_err();
    assert_eq!(kind(&e), Some(Kind::BadResult));
    assert!(e.to_string().contains("NaN?"), "{e}");
}

// ------------------------------------------------------------------------------ replies

#[test]
fn reply_parsing_types_every_malformed_line() {
    let k = |line: &str| kind(&parse_reply("p", line, 7).unwrap_err());
    assert_eq!(k("this is not json"), Some(Kind::Garbage));
    assert_eq!(k("[1, 2]"), Some(Kind::Garbage));
    assert_eq!(
        k(r#"{"id": 7, "ok": true, "result": {}}"#),
        Some(Kind::Garbage)
    );
    assert_eq!(
        k(r#"{"protocol": 2, "id": 7, "ok": true, "result": {}}"#),
        Some(Kind::ProtocolMismatch)
    );
    assert_eq!(
        k(r#"{"protocol": 1, "id": 8, "ok": true, "result": {}}"#),
        Some(Kind::Garbage)
    );
    assert_eq!(
        k(r#"{"protocol": 1, "id": 7, "ok": true}"#),
        Some(Kind::Garbage)
    );
    assert_eq!(
        k(r#"{"protocol": 1, "id": 7, "ok": false, "error": {"message": "x"}}"#),
        Some(Kind::Garbage)
    );
    // the quoted line is truncated
    let long = "x".repeat(5000);
    let e = parse_reply("p", &long, 1).unwrap_err().to_string();
    assert!(e.len() < 400, "{e}");
    assert!(e.contains("5000 chars"), "{e}");
}

#[test]
fn failure_replies_are_data() {
    let r = parse_reply(
        "p",
        r#"{"protocol": 1, "id": 7, "ok": false, "error": {"type": "TypeError", "message": "bad kwarg", "traceback": "Traceback..."}, "seconds": 0.5}"#,
        7,
    )
    .unwrap();
    match r {
        Reply::Failure { failure, seconds } => {
            assert_eq!(failure.error_type, "TypeError");
            assert_eq!(failure.to_string(), "TypeError: bad kwarg");
            assert_eq!(seconds, 0.5);
        }
        other => panic!("{other:?}"),
    }
    // BadRequest with the id unreadable: null id
    let r = parse_reply(
        "p",
        r#"{"protocol": 1, "id": null, "ok": false, "error": {"type": "BadRequest", "message": "not JSON"}}"#,
        3,
    )
    .unwrap();
    assert!(matches!(r, Reply::Failure { .. }));
    let r = parse_reply(
        "p",
        r#"{"protocol": 1, "id": 3, "ok": true, "result": {"a": 1}, "seconds": 1.5}"#,
        3,
    )
    .unwrap();
    assert_eq!(r.into_result().unwrap(), json!({"a": 1}));
}

// ----------------------------------------------------------------------- stand-in workers

/// A stand-in worker in sh: answers hello and shutdown, and every other request with the JSON
/// in `$RESULT` (or a failure of type `$FAIL`).
const FAKE: &str = r#"
while IFS= read -r l; do
  id=$(printf '%s\n' "$l" | sed -n 's/.*"id":\([0-9][0-9]*\).*/\1/p')
  case "$l" in
    *'"op":"hello"'*)
      printf '{"protocol":1,"id":%s,"ok":true,"result":{"profile":"fake","python":"3.11.7","packages":{"jax":"0.4.30","optax":null},"devices":2,"protocol":%s},"seconds":0.01}\n' "$id" "${HELLO_PROTOCOL:-1}";;
    *'"op":"shutdown"'*)
      printf '{"protocol":1,"id":%s,"ok":true,"result":{},"seconds":0}\n' "$id"; exit 0;;
    *'"eager":true'*)
      printf '{"protocol":1,"id":%s,"ok":true,"result":%s,"seconds":0.1}\n' "$id" "${EAGER_RESULT:-$RESULT}";;
    *)
      if [ -n "$FAIL" ]; then
        printf '{"protocol":1,"id":%s,"ok":false,"error":{"type":"%s","message":"m","traceback":""},"seconds":0}\n' "$id" "$FAIL"
      else
        printf '{"protocol":1,"id":%s,"ok":true,"result":%s,"seconds":0.1}\n' "$id" "$RESULT"
      fi;;
  esac
done
"#;

fn fake(env: &[(&str, &str)]) -> WorkerCommand {
    let mut c = WorkerCommand::shell("fake", FAKE);
    c.env = env
        .iter()
        .map(|(k, v)| ((*k).into(), (*v).into()))
        .collect();
    c
}

const SECOND: Duration = Duration::from_secs(1);

#[test]
fn a_stand_in_worker_answers_hello_observe_and_shutdown() {
    let mut w = Worker::spawn(&fake(&[("RESULT", r#"{"traces":1}"#)])).unwrap();
    let hello = w.hello(10 * SECOND).unwrap();
    assert_eq!(hello.packages.get("jax"), Some(&Some("0.4.30".into())));
    assert_eq!(hello.packages.get("optax"), Some(&None));
    let r = w
        .observe("linesearch", "jit-steps", &json!({}), false, 10 * SECOND)
        .unwrap();
    assert_eq!(r.into_result().unwrap(), json!({"traces": 1}));
    let status = w.shutdown(10 * SECOND).unwrap();
    assert!(status.success());
}

#[test]
fn a_library_exception_leaves_the_worker_running() {
    let mut w = Worker::spawn(&fake(&[("FAIL", "TypeError")])).unwrap();
    for _ in 0..2 {
        match w.request("observe", Map::new(), 10 * SECOND).unwrap() {
            Reply::Failure { failure, .. } => assert_eq!(failure.error_type, "TypeError"),
            other => panic!("{other:?}"),
        }
    }
    assert!(!w.is_broken());
}

#[test]
fn hello_of_another_protocol_is_a_mismatch() {
    let mut w = Worker::spawn(&fake(&[("HELLO_PROTOCOL", "2")])).unwrap();
    let e = w.hello(10 * SECOND).unwrap_err();
    assert_eq!(kind(&e), Some(Kind::ProtocolMismatch), "{e}");
}

#[test]
fn garbage_on_stdout_is_a_typed_error_quoting_the_line() {
    let mut w = Worker::spawn(&WorkerCommand::shell(
        "fake",
        "read -r l; echo 'Traceback (most recent call last): not a reply'; sleep 20",
    ))
    .unwrap();
    let t = Instant::now();
    let e = w.request("hello", Map::new(), 10 * SECOND).unwrap_err();
    assert_eq!(kind(&e), Some(Kind::Garbage), "{e}");
    assert!(e.to_string().contains("not a reply"), "{e}");
    assert!(t.elapsed() < 5 * SECOND);
    // the worker was killed: the next request fails at once
    let e = w.request("hello", Map::new(), 10 * SECOND).unwrap_err();
    assert_eq!(kind(&e), Some(Kind::Died), "{e}");
    assert!(e.to_string().contains("no longer running"), "{e}");
}

#[test]
fn a_reply_line_longer_than_the_limit_is_garbage_found_without_reading_it_all() {
    // 1 MiB past the limit with no newline, then the worker hangs: the error comes from the
    // length, not from the time limit, and the line is never held whole
    let bytes = harness::upstream::worker::MAX_REPLY_BYTES + (1 << 20);
    let mut w = Worker::spawn(&WorkerCommand::shell(
        "fake",
        &format!("read -r l; head -c {bytes} /dev/zero | tr '\\0' a; sleep 30"),
    ))
    .unwrap();
    let t = Instant::now();
    let e = w.request("hello", Map::new(), 25 * SECOND).unwrap_err();
    assert_eq!(kind(&e), Some(Kind::Garbage), "{e}");
    assert!(e.to_string().contains("a line of more than"), "{e}");
    assert!(t.elapsed() < 20 * SECOND, "{:?}", t.elapsed());
    let e = w.request("hello", Map::new(), SECOND).unwrap_err();
    assert_eq!(kind(&e), Some(Kind::Died), "{e}");
}

#[test]
fn a_long_stderr_line_is_cut_and_the_lines_after_it_kept() {
    let mut w = Worker::spawn(&WorkerCommand::shell(
        "fake",
        "read -r l; head -c 10000000 /dev/zero | tr '\\0' e >&2; echo >&2; \
         echo 'ValueError: after the long line' >&2; exit 1",
    ))
    .unwrap();
    let e = w.request("hello", Map::new(), 10 * SECOND).unwrap_err();
    assert_eq!(kind(&e), Some(Kind::Died), "{e}");
    let tail = w.stderr_tail();
    assert_eq!(
        tail.len(),
        2,
        "{:?}",
        tail.iter().map(|l| l.len()).collect::<Vec<_>>()
    );
    assert!(
        tail[0].starts_with("eeee") && tail[0].ends_with("bytes)"),
        "{}",
        &tail[0][..60]
    );
    assert!(tail[0].chars().count() < 600, "{}", tail[0].len());
    assert_eq!(tail[1], "ValueError: after the long line");
}

#[test]
fn a_worker_over_the_memory_budget_is_killed_with_a_typed_error() {
    // The shell holds 64 MiB in a variable and never replies; the budget is 16 MiB.
    let mut w = Worker::spawn(&WorkerCommand::shell(
        "fake",
        "read -r l; x=$(head -c 67108864 /dev/zero | tr '\\0' a); sleep 30",
    ))
    .unwrap();
    w.set_memory_limit(Some(16 << 20));
    let t = Instant::now();
    let e = w.request("hello", Map::new(), 25 * SECOND).unwrap_err();
    assert_eq!(kind(&e), Some(Kind::OverMemory), "{e}");
    let msg = e.to_string();
    assert!(msg.contains("16777216 bytes (given)"), "{msg}");
    assert!(t.elapsed() < 20 * SECOND, "{:?}", t.elapsed());
    // the same worker without the watchdog would have timed out instead
    let e = w.request("hello", Map::new(), SECOND).unwrap_err();
    assert_eq!(kind(&e), Some(Kind::Died), "{e}");
}

#[test]
fn the_resident_bytes_of_this_process_group_are_read() {
    // This test binary's own group holds at least its own resident pages.
    let pgid = own_process_group();
    let held = harness::upstream::worker::group_resident_bytes(pgid).unwrap();
    assert!(held > 1 << 20, "{held}");
}

/// This process's group id, read from /proc (no libc call in the test).
fn own_process_group() -> u32 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
    let after = &stat[stat.rfind(')').unwrap() + 1..];
    after.split_whitespace().nth(2).unwrap().parse().unwrap()
}

#[test]
fn a_worker_that_exits_is_reported_with_its_status_and_stderr() {
    let mut w = Worker::spawn(&WorkerCommand::shell(
        "fake",
        "read -r l; echo 'RuntimeError: the library exploded' >&2; exit 3",
    ))
    .unwrap();
    let e = w.request("hello", Map::new(), 10 * SECOND).unwrap_err();
    assert_eq!(kind(&e), Some(Kind::Died), "{e}");
    let msg = e.to_string();
    assert!(msg.contains("exited with status 3"), "{msg}");
    assert!(msg.contains("RuntimeError: the library exploded"), "{msg}");
}

#[test]
fn the_stderr_tail_is_bounded() {
    let mut w = Worker::spawn(&WorkerCommand::shell(
        "fake",
        "read -r l; i=1; while [ $i -le 200 ]; do echo \"line $i\" >&2; i=$((i+1)); done; exit 1",
    ))
    .unwrap();
    let e = w.request("hello", Map::new(), 10 * SECOND).unwrap_err();
    assert_eq!(kind(&e), Some(Kind::Died));
    let tail = w.stderr_tail();
    assert_eq!(tail.len(), STDERR_LINES);
    assert_eq!(tail.last().map(String::as_str), Some("line 200"));
    assert!(e.to_string().contains("line 200"));
    assert!(!e.to_string().contains("line 150\n"));
}

#[test]
fn a_hung_worker_times_out_and_is_killed_with_its_children() {
    let dir = scratch("hung");
    let pidfile = dir.join("sleep.pid");
    let script = format!(
        "read -r l; sleep 30 & echo $! > '{}'; wait",
        pidfile.display()
    );
    let mut w = Worker::spawn(&WorkerCommand::shell("fake", &script)).unwrap();
    let t = Instant::now();
    let e = w
        .request("hello", Map::new(), Duration::from_millis(700))
        .unwrap_err();
    let waited = t.elapsed();
    assert_eq!(kind(&e), Some(Kind::TimedOut), "{e}");
    assert!(e.to_string().contains("within 0.7 s"), "{e}");
    assert!(waited < 5 * SECOND, "{waited:?}");
    // the process group went with it: the grandchild `sleep` is gone
    let pid = std::fs::read_to_string(&pidfile).unwrap();
    let proc_dir = PathBuf::from(format!("/proc/{}", pid.trim()));
    let deadline = Instant::now() + 5 * SECOND;
    while proc_dir.exists() && Instant::now() < deadline {
        // a zombie until its parent (init) reaps it: wait for the entry or a dead state
        if std::fs::read_to_string(proc_dir.join("stat")).is_ok_and(|s| s.contains(") Z")) {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let alive = proc_dir.exists()
        && !std::fs::read_to_string(proc_dir.join("stat")).is_ok_and(|s| s.contains(") Z"));
    assert!(!alive, "the worker's child survived the kill");
    assert!(w.is_broken());
}

#[test]
fn a_missing_interpreter_is_named() {
    let cmd = WorkerCommand {
        profile: "optax-0.2.2".into(),
        program: PathBuf::from("/nonexistent/venv/bin/python"),
        args: vec![],
        env: vec![],
    };
    let e = Worker::spawn(&cmd).unwrap_err();
    assert_eq!(kind(&e), Some(Kind::InterpreterMissing));
    let msg = e.to_string();
    assert!(msg.contains("/nonexistent/venv/bin/python"), "{msg}");
    assert!(
        msg.contains("harness upstream setup --profile optax-0.2.2"),
        "{msg}"
    );
}

// --------------------------------------------------------------------------- the runner

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!(
        "harness-upstream-test-{}-{name}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn builtin(name: &str) -> Profile {
    Profile {
        name: name.into(),
        requirements: PathBuf::from(format!("{name}.txt")),
        builtin: true,
    }
}

#[test]
fn the_plan_carries_the_expected_verdicts() {
    let old = check::plan(&builtin("optax-0.2.2"));
    let rows: Vec<(String, &str, Option<Verdict>)> = old
        .iter()
        .flat_map(|p| p.laws.iter().map(|l| (p.subject.clone(), l.0.name(), l.1)))
        .collect();
    assert_eq!(
        rows,
        vec![
            (
                "optax-0.2.2/radam".into(),
                "live-buffers-flat",
                Some(Verdict::Fail)
            ),
            (
                "optax-0.2.2/radam".into(),
                "where-gradients-finite",
                Some(Verdict::Pass)
            ),
            (
                "optax-0.2.2/adam".into(),
                "live-buffers-flat",
                Some(Verdict::Pass)
            ),
        ]
    );
    let cur = check::plan(&builtin("current"));
    let ls: &Planned = cur
        .iter()
        .find(|p| p.subject == "current/linesearch")
        .unwrap();
    assert_eq!(ls.laws.len(), 2, "one observation, two laws");
    assert!(cur
        .iter()
        .any(|p| p.subject == "pre-fix/muon" && p.worker_subject == "muon-prefix"));
    assert_eq!(cur.iter().map(|p| p.laws.len()).sum::<usize>(), 15);
    // a user's file: every subject under its name; libraries expected to pass
    let mine = check::plan(&Profile {
        name: "my-reqs".into(),
        requirements: "my-reqs.txt".into(),
        builtin: false,
    });
    let verdict = |s: &str, law: &str| {
        mine.iter()
            .filter(|p| p.subject == s)
            .flat_map(|p| p.laws.iter())
            .find(|l| l.0.name() == law)
            .and_then(|l| l.1)
    };
    assert_eq!(
        verdict("my-reqs/radam", "where-gradients-finite"),
        Some(Verdict::Pass)
    );
    assert_eq!(
        verdict("my-reqs/linesearch", "one-trace"),
        Some(Verdict::Pass)
    );
    assert_eq!(
        verdict("my-reqs/muon-prefix", "coeffs-in-state"),
        Some(Verdict::Fail)
    );
    assert_eq!(
        verdict("my-reqs/cnf-int-step", "one-trace"),
        Some(Verdict::Fail)
    );
    assert_eq!(
        verdict("my-reqs/adam", "live-buffers-flat"),
        Some(Verdict::Pass)
    );
}

#[test]
fn a_run_goes_on_through_wrong_results_and_reports_each_row() {
    // every observe answers optax 0.2.2's leaking live-array series
    let series: Vec<String> = (6..36).map(|c| c.to_string()).collect();
    let result = format!(
        r#"{{"live_arrays":[{}],"live_bytes":[1],"baseline_live_arrays":0,"live_arrays_after_release":30,"dtype":"float32"}}"#,
        series.join(",")
    );
    let profile = builtin("optax-0.2.2");
    let planned = check::plan(&profile);
    let mut seen = Vec::new();
    let (report, rows) = check::run_plan(
        &profile,
        &fake(&[("RESULT", &result)]),
        &planned,
        &CheckOptions::default(),
        false,
        &mut |w| seen.push(w.to_string()),
    );
    assert_eq!(seen.len(), 3);
    assert_eq!(report.hello.as_ref().map(|h| h.devices), Some(2));
    assert_eq!(rows.len(), 3);
    // radam leaks: fail, as expected
    assert_eq!(rows[0].verdict, Verdict::Fail);
    assert!(rows[0].as_expected);
    // the gradient observation got a live-array result: error, and the run went on
    assert_eq!(rows[1].verdict, Verdict::Error);
    assert!(
        rows[1].evidence.contains("missing field"),
        "{}",
        rows[1].evidence
    );
    // adam "leaks" too here: differs from the expected pass
    assert_eq!(rows[2].verdict, Verdict::Fail);
    assert!(!rows[2].as_expected);
    assert!(report.errors.is_empty(), "{:?}", report.errors);
}

#[test]
fn a_dying_worker_makes_its_rows_errors_and_is_replaced() {
    // hello works, every observe kills the worker: each observation gets a fresh one
    let script = r#"
while IFS= read -r l; do
  id=$(printf '%s\n' "$l" | sed -n 's/.*"id":\([0-9][0-9]*\).*/\1/p')
  case "$l" in
    *'"op":"hello"'*)
      echo x >> "$COUNT"
      printf '{"protocol":1,"id":%s,"ok":true,"result":{"profile":"f","python":"3","packages":{},"devices":2,"protocol":1}}\n' "$id";;
    *) echo 'Segmentation fault' >&2; exit 139;;
  esac
done
"#;
    let dir = scratch("dying");
    let count = dir.join("count");
    let mut cmd = WorkerCommand::shell("optax-0.2.3", script);
    cmd.env = vec![("COUNT".into(), count.clone().into_os_string())];
    let profile = builtin("optax-0.2.3");
    let (report, rows) = check::run_plan(
        &profile,
        &cmd,
        &check::plan(&profile),
        &CheckOptions::default(),
        false,
        &mut |_| {},
    );
    assert_eq!(rows.len(), 2);
    for r in &rows {
        assert_eq!(r.verdict, Verdict::Error);
        assert!(!r.as_expected);
        assert!(
            r.evidence.contains("exited with status 139"),
            "{}",
            r.evidence
        );
        assert!(r.evidence.contains("Segmentation fault"), "{}", r.evidence);
    }
    assert_eq!(report.errors.len(), 2);
    let starts = std::fs::read_to_string(&count).unwrap().lines().count();
    assert_eq!(starts, 2, "one fresh worker per observation");
}

#[test]
fn a_profile_without_interpreter_errors_every_row_once() {
    let loc = Locations {
        upstream_dir: PathBuf::from("/nonexistent/upstream"),
        venvs: PathBuf::from("/nonexistent/venvs"),
    };
    let profile = builtin("current");
    let report = check::run(
        std::slice::from_ref(&profile),
        &loc,
        &CheckOptions::default(),
        &mut |_| {},
    );
    assert_eq!(report.results.len(), 15);
    assert!(report
        .results
        .iter()
        .all(|r| r.verdict == Verdict::Error && r.evidence.contains("interpreter")));
    assert_eq!(report.profiles[0].errors.len(), 1);
    assert!(!report.all_as_expected());
    let doc = serde_json::to_value(&report).unwrap();
    let row = &doc["results"][0];
    for k in [
        "subject", "incident", "law", "verdict", "evidence", "seconds",
    ] {
        assert!(row.get(k).is_some(), "JSON row lacks {k}: {row}");
    }
    assert_eq!(row["verdict"], Value::from("error"));
    assert!(doc["profiles"].is_array());
}

// --------------------------------------------------------------------- profiles, setup

#[test]
fn profiles_resolve_by_name_or_file() {
    let dir = scratch("profiles");
    std::fs::create_dir_all(dir.join("profiles")).unwrap();
    std::fs::write(dir.join("profiles").join("current.txt"), "jax==0.10.2\n").unwrap();
    let loc = Locations {
        upstream_dir: dir.clone(),
        venvs: dir.join("venvs"),
    };
    let p = Profile::resolve("current", &loc).unwrap();
    assert!(p.builtin);
    assert_eq!(loc.interpreter(&p), dir.join("venvs/current/bin/python"));
    assert!(Profile::resolve("optax-9", &loc)
        .unwrap_err()
        .contains("not a profile"));
    // optax-0.2.2's file is missing from this upstream dir
    assert!(Profile::resolve("optax-0.2.2", &loc)
        .unwrap_err()
        .contains("not found"));
    let mine = dir.join("my-reqs.txt");
    std::fs::write(&mine, "optax==0.2.9\n").unwrap();
    let p = Profile::resolve(mine.to_str().unwrap(), &loc).unwrap();
    assert_eq!(p.name, "my-reqs");
    assert!(!p.builtin);
    assert!(Profile::resolve("missing.txt", &loc)
        .unwrap_err()
        .contains("no such requirement file"));
    let twice = Profile::resolve_all(&["current".into(), "current".into()], &loc);
    assert!(twice.unwrap_err().contains("twice"));
}

#[test]
fn a_requirement_file_cannot_name_a_venv_outside_the_venvs_dir_or_another_profiles_venv() {
    let dir = scratch("profile-names");
    std::fs::create_dir_all(dir.join("profiles")).unwrap();
    std::fs::write(
        dir.join("profiles").join("current.txt"),
        "jax==0.10.2
",
    )
    .unwrap();
    let loc = Locations {
        upstream_dir: dir.clone(),
        venvs: dir.join("venvs"),
    };
    // `...txt` has the stem `..`: its venv would be the directory above --venvs, which setup
    // deletes when it holds a pyvenv.cfg
    for file in ["...txt", ".hidden.txt", "sp ace.txt"] {
        let path = dir.join(file);
        std::fs::write(
            &path,
            "optax==0.2.8
",
        )
        .unwrap();
        let e = Profile::resolve(path.to_str().unwrap(), &loc).unwrap_err();
        assert!(
            e.contains("cannot name a profile after this file"),
            "{file}: {e}"
        );
    }
    // a user's `current.txt` elsewhere would reinstall the built-in `current` venv from it
    std::fs::create_dir_all(dir.join("elsewhere")).unwrap();
    let theirs = dir.join("elsewhere").join("current.txt");
    std::fs::write(
        &theirs,
        "optax==0.2.2
",
    )
    .unwrap();
    let e = Profile::resolve(theirs.to_str().unwrap(), &loc).unwrap_err();
    assert!(
        e.contains("named after the built-in profile `current`"),
        "{e}"
    );
    // the built-in file itself, given by path, is the built-in profile
    let builtin = dir.join("profiles").join("current.txt");
    assert!(
        Profile::resolve(builtin.to_str().unwrap(), &loc)
            .unwrap()
            .builtin
    );
}

#[test]
fn setup_names_a_missing_interpreter_and_skips_an_up_to_date_venv() {
    let dir = scratch("setup");
    let req = dir.join("mine.txt");
    std::fs::write(&req, "optax==0.2.8\n").unwrap();
    let loc = Locations {
        upstream_dir: dir.clone(),
        venvs: dir.join("venvs"),
    };
    let profile = Profile {
        name: "mine".into(),
        requirements: req.clone(),
        builtin: false,
    };
    let missing = PathBuf::from("/nonexistent/python3.11");
    let e = setup::setup(&profile, &loc, &missing, false).unwrap_err();
    let msg = e.to_string();
    assert!(matches!(e, Error::Setup { .. }), "{msg}");
    assert!(
        msg.contains("/nonexistent/python3.11") && msg.contains("not found"),
        "{msg}"
    );
    assert!(setup::python_version(&missing).is_err());
    // a venv with an interpreter and the stamp of this very file is left alone
    let venv = loc.venv(&profile);
    std::fs::create_dir_all(venv.join("bin")).unwrap();
    std::fs::write(venv.join("bin/python"), "").unwrap();
    assert!(!setup::is_current(&venv, &req));
    std::fs::write(venv.join(setup::STAMP), "optax==0.2.8\n").unwrap();
    assert!(setup::is_current(&venv, &req));
    let o = setup::setup(&profile, &loc, &missing, false).unwrap();
    assert!(o.skipped);
    // another file: outdated
    std::fs::write(&req, "optax==0.2.9\n").unwrap();
    assert!(!setup::is_current(&venv, &req));
}

#[test]
fn setup_errors_quote_pips_first_error_line() {
    let out = "Collecting jax==0.4.30\nERROR: Could not find a version that satisfies the requirement jaxlib==0.4.99 (from versions: 0.4.30)\nERROR: No matching distribution found for jaxlib==0.4.99\n";
    assert_eq!(
        setup::telling_line(out),
        "ERROR: Could not find a version that satisfies the requirement jaxlib==0.4.99 (from versions: 0.4.30)"
    );
    assert_eq!(
        setup::telling_line("Error: No module named venv\n\n"),
        "Error: No module named venv"
    );
}

// ------------------------------------------------------------------------------- diff

mod diff {
    use super::*;
    use harness::laws::strategies::OptCase;
    use harness::optim::{AdamHyper, RadamHyper};
    use harness::upstream::diff::{self, DiffKind, DiffOptions, Outcome};

    fn case(dtype: harness::backend::DType, nesterov: bool) -> OptCase {
        OptCase {
            hyper: RadamHyper {
                moments: AdamHyper {
                    nesterov,
                    ..AdamHyper::default()
                },
                threshold: 4.0,
            },
            learning_rate: 0.1,
            dtype,
            params: vec![0.1, -2.0],
            grads: vec![vec![1.0, 0.3]; 3],
        }
    }

    #[test]
    fn drawn_cases_become_golden_inputs() {
        use harness::backend::DType;
        let g = diff::golden_input(DiffKind::Radam, &case(DType::F16, false), "x");
        assert_eq!(g["dtype"], "float32", "golden-v1 has no float16");
        assert_eq!(g["params"]["w"]["data"][0], json!(0.1f32 as f64));
        assert_eq!(g["optimizer"]["hyper"]["threshold"], json!(4.0));
        assert!(g["optimizer"]["hyper"].get("nesterov").is_none());
        assert_eq!(g["steps"].as_array().map(Vec::len), Some(3));
        assert_eq!(g["tolerance"]["rtol"], json!(2e-4));
        let g = diff::golden_input(DiffKind::Adam, &case(DType::F64, true), "y");
        assert!(g["optimizer"]["hyper"].get("threshold").is_none());
        assert_eq!(g["optimizer"]["hyper"]["nesterov"], json!(true));
        assert_eq!(g["params"]["w"]["data"][0], json!(0.1));
    }

    /// A committed golden case, compact, as the worker's `golden` result; `perturb` shifts its
    /// first update by 1e-3.
    fn worker_result(perturb: bool) -> String {
        let text = std::fs::read_to_string(
            PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("../fixtures/golden/radam-b2-0.5-f64.json"),
        )
        .unwrap();
        let mut case: Value = serde_json::from_str(&text).unwrap();
        if perturb {
            let x = &mut case["steps"][0]["updates"]["w"]["data"][0];
            *x = json!(x.as_f64().unwrap() + 1e-3);
        }
        json!({"x64": true, "case": case}).to_string()
    }

    #[test]
    fn a_case_the_reference_reproduces_matches_and_a_perturbed_one_does_not() {
        let input = json!({"format": "golden-v1"});
        let mut w = Worker::spawn(&fake(&[("RESULT", &worker_result(false))])).unwrap();
        assert_eq!(
            diff::compare(&mut w, &input, 10 * SECOND).unwrap(),
            Outcome::Match
        );
        let mut w = Worker::spawn(&fake(&[("RESULT", &worker_result(true))])).unwrap();
        match diff::compare(&mut w, &input, 10 * SECOND).unwrap() {
            Outcome::Mismatch { detail, golden } => {
                assert!(detail.contains("steps[0]"), "{detail}");
                assert_eq!(golden["name"], "radam-b2-0.5-f64");
            }
            other => panic!("{other:?}"),
        }
        let mut w = Worker::spawn(&fake(&[("FAIL", "TypeError")])).unwrap();
        assert!(matches!(
            diff::compare(&mut w, &input, 10 * SECOND).unwrap(),
            Outcome::LibraryError(e) if e.starts_with("TypeError")
        ));
    }

    #[test]
    fn a_mismatch_is_shrunk_and_written_as_a_golden_file() {
        let dir = scratch("diff");
        let mut w = Worker::spawn(&fake(&[("RESULT", &worker_result(true))])).unwrap();
        let opts = DiffOptions {
            cases: 2,
            kinds: vec![DiffKind::Radam],
            seed: 1,
            out_dir: dir.clone(),
            timeout: 10 * SECOND,
            max_shrink: 5,
        };
        let report = diff::run(&mut w, &opts, &mut |_| {}).unwrap();
        assert_eq!(report.cases, 2);
        assert_eq!(report.mismatches.len(), 2);
        let m = &report.mismatches[0];
        assert!(m.shrink_steps >= 1 && m.shrink_steps <= 5, "{m:?}");
        let file = m.golden_file.as_ref().unwrap();
        let case = harness::golden::load(std::path::Path::new(file)).unwrap();
        assert_eq!(case.kind, "optimizer");
        assert!(!harness::golden::replay(&case).unwrap().passed);
        assert!(!report.passed());
        let mut ok = Worker::spawn(&fake(&[("RESULT", &worker_result(false))])).unwrap();
        let report = diff::run(&mut ok, &opts, &mut |_| {}).unwrap();
        assert!(report.mismatches.is_empty());
        assert!(report.passed());
    }

    #[test]
    fn a_case_the_worker_names_with_a_path_is_not_written_outside_the_out_dir() {
        let dir = scratch("diff-traversal");
        let out = dir.join("a").join("out");
        let mut result: Value = serde_json::from_str(&worker_result(true)).unwrap();
        result["case"]["name"] = json!("../../escaped");
        let mut w = Worker::spawn(&fake(&[("RESULT", &result.to_string())])).unwrap();
        let opts = DiffOptions {
            cases: 1,
            kinds: vec![DiffKind::Radam],
            seed: 1,
            out_dir: out.clone(),
            timeout: 10 * SECOND,
            max_shrink: 1,
        };
        let mut lines = Vec::new();
        let report = diff::run(&mut w, &opts, &mut |l| lines.push(l.to_string())).unwrap();
        assert_eq!(report.mismatches.len(), 1);
        assert_eq!(report.mismatches[0].golden_file, None);
        assert!(!dir.join("escaped.json").exists());
        assert!(
            lines
                .iter()
                .any(|l| l.contains("\"../../escaped\", not a plain file name")),
            "{lines:?}"
        );
    }

    #[test]
    fn a_run_in_which_the_library_rejected_every_case_fails_having_compared_nothing() {
        let opts = DiffOptions {
            cases: 2,
            kinds: vec![DiffKind::Radam],
            seed: 1,
            out_dir: scratch("diff-rejected"),
            timeout: 10 * SECOND,
            max_shrink: 5,
        };
        let mut w = Worker::spawn(&fake(&[("FAIL", "TypeError")])).unwrap();
        let report = diff::run(&mut w, &opts, &mut |_| {}).unwrap();
        assert!(report.mismatches.is_empty());
        assert_eq!(report.library_error_count, 2);
        assert_eq!(report.uncompared_kinds(), ["radam"]);
        assert!(!report.passed());
    }

    #[test]
    fn a_case_the_library_solved_and_the_reference_refuses_is_a_mismatch() {
        let input = json!({"format": "golden-v1"});
        let refused = |edit: &dyn Fn(&mut Value)| {
            let mut result: Value = serde_json::from_str(&worker_result(false)).unwrap();
            edit(&mut result["case"]);
            let mut w = Worker::spawn(&fake(&[("RESULT", &result.to_string())])).unwrap();
            match diff::compare(&mut w, &input, 10 * SECOND).unwrap() {
                Outcome::Mismatch { detail, .. } => detail,
                other => panic!("{other:?}"),
            }
        };
        // a hyperparameter optax took and the reference rejects
        let d = refused(&|c| c["optimizer"]["hyper"]["b1"] = json!(1.5));
        assert!(d.contains("b1"), "{d}");
        // an output the reference's reader cannot take (a shape its data does not fill)
        let d = refused(&|c| c["steps"][0]["updates"]["w"]["shape"] = json!([7]));
        assert!(d.contains("refused") && d.contains("steps[0]"), "{d}");
    }

    /// A committed adaptive ODE case as the worker's result; `edit` changes it first.
    fn ode_result(edit: &dyn Fn(&mut Value)) -> String {
        let text = std::fs::read_to_string(
            PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("../fixtures/golden/ode-lv-tsit5-pid.json"),
        )
        .unwrap();
        let mut case: Value = serde_json::from_str(&text).unwrap();
        edit(&mut case);
        json!({"x64": true, "case": case}).to_string()
    }

    #[test]
    fn an_ode_mismatch_is_explained_only_when_the_library_cannot_reproduce_itself() {
        let case = |r: &str| serde_json::from_str::<Value>(r).unwrap()["case"].clone();
        let jit = ode_result(&|_| {});
        let explain = |eager: &str| {
            let mut w = Worker::spawn(&fake(&[("RESULT", &jit), ("EAGER_RESULT", eager)])).unwrap();
            diff::explain_ode(&mut w, &case(&jit), 10 * SECOND).unwrap()
        };
        // the op-by-op run lands on the same numbers: the mismatch stands
        assert_eq!(explain(&jit), None);
        // one time off by 1e-6 relative, beyond the case's 1e-8: rounding-sensitive
        let moved = ode_result(&|c| {
            let t = &mut c["expected"]["ts"]["data"][2];
            *t = json!(t.as_f64().unwrap() * (1.0 + 1e-6));
        });
        let why = explain(&moved).expect("explained");
        assert!(why.contains("1 of") && why.contains("1.0e-6"), "{why}");
        // a different number of steps
        let shorter = ode_result(&|c| {
            c["expected"]["ts"]["data"].as_array_mut().unwrap().pop();
        });
        assert!(explain(&shorter).unwrap().contains("take different steps"));
    }

    /// `n` inputs of `kind` drawn with a fixed seed.
    fn drawn(kind: DiffKind, n: usize) -> Vec<Value> {
        use proptest::strategy::{Strategy, ValueTree};
        let mut runner = proptest::test_runner::TestRunner::deterministic();
        let strategy = kind.inputs();
        (0..n)
            .map(|i| {
                let v = strategy.new_tree(&mut runner).unwrap().current();
                diff::named(v, &format!("drawn-{i}"))
            })
            .collect()
    }

    #[test]
    fn every_kind_draws_inputs_the_golden_reader_accepts() {
        for kind in DiffKind::ALL {
            for mut input in drawn(kind, 40) {
                if input.get("tolerance").is_none() {
                    // ode inputs leave the tolerance to the worker (the generators' defaults)
                    input["tolerance"] = json!({"rtol": 1e-8, "atol": 1e-10});
                }
                let case = harness::golden::Case::parse("drawn", &input.to_string())
                    .unwrap_or_else(|e| panic!("{}: {e}\n{input}", kind.name()));
                assert_eq!(case.name, input["name"].as_str().unwrap());
                if kind == DiffKind::Linesearch {
                    harness::golden::linesearch_hyper(&case)
                        .unwrap_or_else(|e| panic!("{e}\n{input}"));
                }
            }
        }
    }

    #[test]
    fn ode_inputs_cover_every_tableau_and_never_give_euler_a_pid_controller() {
        let inputs = drawn(DiffKind::Ode, 300);
        for solver in diff::ODE_SOLVERS {
            assert!(
                inputs.iter().any(|i| i["solver"] == solver),
                "{solver} never drawn"
            );
        }
        for c in ["constant", "pid"] {
            assert!(inputs.iter().any(|i| i["controller"]["type"] == c), "{c}");
        }
        assert!(
            inputs.iter().any(|i| i["t1"].as_f64() < i["t0"].as_f64()),
            "backward"
        );
        for i in &inputs {
            if i["solver"] == "euler" {
                assert_eq!(i["controller"]["type"], "constant", "{i}");
            }
            let dt0 = i["controller"]["dt0"].as_f64().unwrap_or(0.0);
            let span = i["t1"].as_f64().unwrap() - i["t0"].as_f64().unwrap();
            assert!(dt0 * span >= 0.0, "dt0 points the other way: {i}");
        }
    }

    #[test]
    fn cnf_inputs_cover_every_tableau_both_dtypes_and_uneven_last_steps() {
        let inputs = drawn(DiffKind::Cnf, 200);
        for solver in harness::ode::Solver::ALL {
            assert!(
                inputs.iter().any(|i| i["model"]["solver"] == solver.name()),
                "{} never drawn",
                solver.name()
            );
        }
        for dtype in ["float32", "float64"] {
            assert!(inputs.iter().any(|i| i["dtype"] == dtype), "{dtype}");
        }
        let uneven = |i: &Value| {
            let m = &i["model"];
            let n = (m["t1"].as_f64().unwrap() - m["t0"].as_f64().unwrap())
                / m["dt0"].as_f64().unwrap();
            (n - n.round()).abs() > 1e-6
        };
        assert!(inputs.iter().any(uneven), "the last step always fits");
        assert!(inputs.iter().any(|i| i["model"]["blocks"] == 2));
    }

    /// A drawn CNF case completed with the reference's own log-densities (`solver` in place of
    /// the case's own tableau) and replayed through the golden reader.
    fn cnf_replay_with(case: &diff::CnfCase, solver: harness::ode::Solver) -> bool {
        let mut input = diff::cnf_input(case);
        let mut model = case.model.clone();
        model.cfg.solver = solver;
        let lp = harness::cnf::flow::log_likelihood(&model.params(), &model.x, None).unwrap();
        input["tolerance"] = json!({"rtol": 1e-8, "atol": 1e-10});
        input["expected"] = json!({"log_prob": {"shape": [lp.len()], "data": lp}});
        let case = harness::golden::Case::parse("cnf", &input.to_string()).unwrap();
        harness::golden::replay(&case).unwrap().passed
    }

    #[test]
    fn cnf_inputs_carry_the_model_the_reference_evaluates_and_a_wrong_tableau_is_caught() {
        use harness::ode::Solver;
        use proptest::strategy::{Strategy, ValueTree};
        let mut runner = proptest::test_runner::TestRunner::deterministic();
        let strategy = diff::cnf_case();
        let mut checked = 0;
        while checked < 12 {
            let case = strategy.new_tree(&mut runner).unwrap().current();
            if case.f32 {
                continue;
            }
            // the weights and points as written reproduce the model's own log-densities
            assert!(cnf_replay_with(&case, case.solver), "{case:?}");
            // and the replay tells a planted first-order tableau apart
            let other = if case.solver == Solver::Euler {
                Solver::Heun
            } else {
                Solver::Euler
            };
            assert!(
                !cnf_replay_with(&case, other),
                "{case:?}: {other:?} not caught"
            );
            checked += 1;
        }
    }

    #[test]
    fn muon_inputs_write_the_coefficients_out() {
        let inputs = drawn(DiffKind::Muon, 200);
        let dion = json!(harness::optim::muon::coeffs::DION.to_vec());
        assert!(inputs
            .iter()
            .any(|i| i["optimizer"]["hyper"]["ns_coeffs"] == dion));
        for i in &inputs {
            let coeffs = &i["optimizer"]["hyper"]["ns_coeffs"];
            assert!(
                coeffs.is_null() || coeffs.is_array(),
                "a preset name would depend on the release's table: {i}"
            );
        }
    }
}

// ---------------------------------------------------------------------------- bench --against

mod against {
    use super::*;
    use harness::bench::Figure;
    use harness::upstream::against;

    fn figures() -> Vec<Figure> {
        vec![
            Figure::new("adam_fused_16m_gbps", 30.0, "GB/s"),
            Figure::new("linesearch_rosenbrock_65536_ms", 10.0, "ms"),
            Figure::new("linesearch_rosenbrock_65536_evals", 16.0, "evaluations"),
            Figure::new("ode_lv_tsit5_1e-8_us", 40.0, "us"),
            Figure::new("ode_lv_tsit5_1e-8_steps", 188.0, "steps"),
            Figure::new("copy_bandwidth_gbps", 20.0, "GB/s"),
        ]
    }

    #[test]
    fn upstream_seconds_become_the_figures_unit_and_the_ratio_says_who_is_faster() {
        // every request answered with 20 ms steady state, 0.5 s first call, 16 evaluations
        let result = r#"{"seconds":0.02,"first_call_seconds":0.5,"counts":{"evaluations":16},"note":"same work"}"#;
        let mut w = Worker::spawn(&fake(&[("RESULT", result)])).unwrap();
        let mut f = figures();
        let mut asked = vec![];
        against::attach(&mut w, &mut f, 3, 10 * SECOND, &mut |n| {
            asked.push(n.to_string())
        })
        .unwrap();
        assert_eq!(
            asked,
            [
                "adam_fused_16m_gbps",
                "linesearch_rosenbrock_65536_ms",
                "ode_lv_tsit5_1e-8_us"
            ]
        );
        // a rate: 28 B x 2^24 params in 20 ms = 23.49 GB/s; ours 30 is faster
        let gbps = 28.0 * (1u64 << 24) as f64 / 0.02 / 1e9;
        assert_eq!(f[0].upstream, Some(gbps));
        assert_eq!(f[0].ratio_to_upstream, Some(30.0 / gbps));
        assert_eq!(f[0].upstream_compile_s, Some(0.48));
        // a time: 20 ms upstream, 10 ms ours: ours twice as fast
        assert_eq!(f[1].upstream, Some(20.0));
        assert_eq!(f[1].ratio_to_upstream, Some(2.0));
        assert!(f[1]
            .upstream_note
            .as_deref()
            .unwrap()
            .ends_with("evaluations: 16 both"));
        // microseconds; the worker gave no step count: nothing claimed about it
        assert_eq!(f[3].upstream, Some(20_000.0));
        assert_eq!(f[3].ratio_to_upstream, Some(20_000.0 / 40.0));
        assert_eq!(f[3].upstream_note.as_deref(), Some("same work"));
        // figures without an upstream equivalent are left alone
        assert!(f[5].upstream.is_none() && f[5].upstream_note.is_none());
    }

    #[test]
    fn a_count_that_differs_is_named_and_a_library_failure_is_a_note() {
        let result = r#"{"seconds":0.02,"counts":{"evaluations":9},"note":"same work"}"#;
        let mut w = Worker::spawn(&fake(&[("RESULT", result)])).unwrap();
        let mut f = figures();
        against::attach(&mut w, &mut f, 3, 10 * SECOND, &mut |_| {}).unwrap();
        let note = f[1].upstream_note.as_deref().unwrap();
        assert!(
            note.contains("evaluations DIFFER: upstream 9, ours 16"),
            "{note}"
        );
        let mut w = Worker::spawn(&fake(&[("FAIL", "ImportError")])).unwrap();
        let mut f = figures();
        against::attach(&mut w, &mut f, 3, 10 * SECOND, &mut |_| {}).unwrap();
        assert!(f[0].upstream.is_none());
        assert!(f[0]
            .upstream_note
            .as_deref()
            .unwrap()
            .starts_with("upstream failed: ImportError"));
    }

    #[test]
    fn a_result_without_positive_seconds_is_a_typed_worker_error() {
        let mut w = Worker::spawn(&fake(&[("RESULT", r#"{"seconds":0}"#)])).unwrap();
        let e = against::attach(&mut w, &mut figures(), 3, 10 * SECOND, &mut |_| {}).unwrap_err();
        assert!(e.to_string().contains("no positive `seconds`"), "{e}");
    }
}
