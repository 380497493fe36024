//! Property-based fuzzing of the file formats: random and mutated IDX files (plain and gzip)
//! and safetensors checkpoints must load or fail with `Err`, never panic. Each property runs
//! `CASES` inputs; `PROPTEST_CASES` raises it for a longer run.

use std::path::PathBuf;

use crate::common::{gzip, scratch, turn};
use ferrograd::data::{encode_idx_u8, parse_idx_u8, read_idx_u8};
use ferrograd::io::{load_checkpoint, save_checkpoint};
use ferrograd::prelude::*;
use proptest::prelude::*;

const CASES: u32 = 1000;

fn config() -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(CASES);
    ProptestConfig {
        cases,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

/// Edits applied to a valid file: overwrite a byte, truncate, or append.
#[derive(Clone, Debug)]
enum Edit {
    Set(usize, u8),
    Truncate(usize),
    Append(Vec<u8>),
}

fn edits() -> impl Strategy<Value = Vec<Edit>> {
    let edit = prop_oneof![
        4 => (any::<usize>(), any::<u8>()).prop_map(|(i, b)| Edit::Set(i, b)),
        1 => any::<usize>().prop_map(Edit::Truncate),
        1 => proptest::collection::vec(any::<u8>(), 1..16).prop_map(Edit::Append),
    ];
    proptest::collection::vec(edit, 1..6)
}

fn apply(mut bytes: Vec<u8>, edits: &[Edit]) -> Vec<u8> {
    for e in edits {
        match e {
            Edit::Set(i, b) if !bytes.is_empty() => {
                let n = bytes.len();
                bytes[i % n] = *b;
            }
            Edit::Truncate(n) => bytes.truncate(n % (bytes.len() + 1)),
            Edit::Append(tail) => bytes.extend_from_slice(tail),
            Edit::Set(..) => {}
        }
    }
    bytes
}

/// A small valid IDX file: rank 1 to 3, a few bytes of data.
fn idx_file() -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec(0usize..4, 1..4).prop_flat_map(|dims| {
        let n: usize = dims.iter().product();
        proptest::collection::vec(any::<u8>(), n).prop_map(move |data| encode_idx_u8(&dims, &data))
    })
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn arbitrary_bytes_never_panic_the_idx_parser(
        bytes in proptest::collection::vec(any::<u8>(), 0..64),
        rank in 0u8..8,
        magic in any::<bool>(),
    ) {
        // Half the inputs start with a valid magic, so that the header and length checks run.
        let bytes = if magic { [vec![0, 0, 8, rank], bytes].concat() } else { bytes };
        if let Ok(idx) = parse_idx_u8(&bytes) {
            prop_assert_eq!(idx.data.len(), idx.dims.iter().product::<usize>());
        }
    }

    #[test]
    fn mutated_idx_files_load_or_fail_cleanly(file in idx_file(), edits in edits(), gz in any::<bool>()) {
        let dir = std::env::temp_dir().join(format!("ferrograd-fuzz-idx-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(format!("{:?}", std::thread::current().id()).replace(['(', ')'], ""));
        // Edits land on the compressed bytes too, to exercise the gzip reader's errors.
        let bytes = if gz { apply(gzip(&file), &edits) } else { apply(file.clone(), &edits) };
        std::fs::write(&path, &bytes).unwrap();
        if let Ok(idx) = read_idx_u8(&path) {
            // Whatever loads is self-consistent.
            prop_assert_eq!(idx.data.len(), idx.dims.iter().product::<usize>());
        }
    }
}

/// Parameters, buffers, optimizer state, steps, learning rate and stream positions.
fn everything(model: &Model) -> String {
    let net = model.net();
    let state = model.optimizer().state(&net.params()).unwrap();
    let streams: Vec<String> = net
        .rng_streams()
        .iter()
        .map(|(_, s)| s.state().to_string())
        .collect();
    let values: Vec<(String, Vec<f64>)> = net
        .state()
        .into_iter()
        .map(|(n, t)| (n, t.to_vec::<f64>()))
        .collect();
    let slots: Vec<(String, Vec<f64>)> = state
        .1
        .into_iter()
        .map(|(n, t)| (n, t.to_vec::<f64>()))
        .collect();
    format!(
        "{values:?} {slots:?} {} {} {streams:?}",
        state.0,
        model.optimizer().lr()
    )
}

fn tiny_model() -> Model {
    let _turn = turn();
    manual_seed(2);
    let net = Net::new(vec![
        Box::new(Dense::new(3, 4)),
        Box::new(Dropout::new(0.2)),
        Box::new(BatchNorm1d::new(4)),
        Box::new(Dense::new(4, 2)),
    ]);
    Model::new(net, SoftmaxCrossEntropy::new(), Adam::new(0.01))
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn mutated_checkpoints_load_or_fail_cleanly(edits in edits()) {
        thread_local! {
            static VALID: (PathBuf, Vec<u8>) = {
                let dir = scratch(&format!("fuzz_checkpoint_{:?}", std::thread::current().id())
                    .replace(['(', ')'], ""));
                let path = dir.join("ck.safetensors");
                let mut model = tiny_model();
                let x = Tensor::ones(&[4, 3], DType::F32);
                model.train_step(&x, &ferrograd::data::one_hot(&[0, 1, 0, 1], 2));
                save_checkpoint(&path, &model, 1).unwrap();
                let bytes = std::fs::read(&path).unwrap();
                (path, bytes)
            };
        }
        VALID.with(|(path, valid)| {
            std::fs::write(path, apply(valid.clone(), &edits)).unwrap();
            if let Ok(ck) = load_checkpoint(path) {
                let mut model = tiny_model();
                let before = everything(&model);
                if ck.restore(&mut model).is_err() {
                    assert_eq!(everything(&model), before, "a failed restore changed the model");
                }
            }
        });
    }
}
