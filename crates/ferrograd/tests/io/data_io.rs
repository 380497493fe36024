//! Data files and checkpoints: IDX round trips, every malformed-file case as an error naming
//! the file, batch iteration, checkpoint round trips, mismatch reports, atomic writes and an
//! exact resume.

use std::collections::HashMap;
use std::path::Path;

use crate::common::{gzip, scratch, turn};
use ferrograd::data::{encode_idx_u8, read_idx_u8, BatchIterator, Dataset, Mnist, TensorDataset};
use ferrograd::io::{load_checkpoint, load_tensors, save_checkpoint, save_tensors};
use ferrograd::prelude::*;

/// Writes a small MNIST-format split (`n` images) into `dir`, gzipped or not.
fn write_split(dir: &Path, prefix: &str, n: usize, gz: bool) {
    let pixels: Vec<u8> = (0..n * 784).map(|i| (i % 251) as u8).collect();
    let labels: Vec<u8> = (0..n).map(|i| (i % 10) as u8).collect();
    let write = |name: String, bytes: Vec<u8>| {
        let (name, bytes) = if gz {
            (format!("{name}.gz"), gzip(&bytes))
        } else {
            (name, bytes)
        };
        std::fs::write(dir.join(name), bytes).unwrap();
    };
    write(
        format!("{prefix}-images-idx3-ubyte"),
        encode_idx_u8(&[n, 28, 28], &pixels),
    );
    write(
        format!("{prefix}-labels-idx1-ubyte"),
        encode_idx_u8(&[n], &labels),
    );
}

#[test]
fn idx_round_trip_plain_and_gzip() {
    let dir = scratch("idx_round_trip");
    for gz in [false, true] {
        let sub = dir.join(if gz { "gz" } else { "plain" });
        std::fs::create_dir_all(&sub).unwrap();
        write_split(&sub, "train", 12, gz);
        write_split(&sub, "t10k", 5, gz);
        let train = Mnist::load(&sub, true).unwrap();
        let test = Mnist::load(&sub, false).unwrap();
        assert_eq!(train.images.shape(), &[12, 784]);
        assert_eq!(test.labels, vec![0, 1, 2, 3, 4]);
        assert_eq!(train.images.to_vec::<f32>()[1], 1.0 / 255.0);
        assert_eq!(train.targets.shape(), &[12, 10]);
        assert_eq!(train.targets.to_vec::<f32>()[10 + 1], 1.0);
        assert_eq!(train.images_nchw().shape(), &[12, 1, 28, 28]);
    }
}

/// Every malformed case gives an error that names the file and says what is wrong.
#[test]
fn malformed_idx_files_are_errors() {
    let dir = scratch("idx_malformed");
    let good = encode_idx_u8(&[2, 3], &[1, 2, 3, 4, 5, 6]);
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("empty", vec![], "too short for the 4-byte IDX magic"),
        ("bad_magic", vec![1, 2, 8, 1, 0, 0, 0, 0], "bad magic"),
        (
            "bad_type",
            vec![0, 0, 0x0d, 1, 0, 0, 0, 1, 0, 0, 0, 0],
            "is not unsigned byte",
        ),
        ("short_header", good[..9].to_vec(), "header truncated"),
        (
            "truncated",
            good[..good.len() - 2].to_vec(),
            "data truncated",
        ),
        (
            "trailing",
            [good.clone(), vec![9]].concat(),
            "trailing bytes",
        ),
        (
            "bad_gzip",
            vec![0x1f, 0x8b, 8, 0, 1, 2, 3],
            "corrupt gzip stream",
        ),
    ];
    for (name, bytes, want) in cases {
        let path = dir.join(name);
        std::fs::write(&path, bytes).unwrap();
        let err = read_idx_u8(&path).unwrap_err().to_string();
        assert!(
            err.starts_with(&path.display().to_string()),
            "{name}: {err}"
        );
        assert!(err.contains(want), "{name}: {err}");
    }
    let missing = read_idx_u8(&dir.join("nope")).unwrap_err().to_string();
    assert!(missing.contains("nope"), "{missing}");
}

#[test]
fn mnist_checks_what_it_loads() {
    let dir = scratch("mnist_checks");
    write_split(&dir, "train", 4, false);
    // Wrong label count.
    std::fs::write(
        dir.join("train-labels-idx1-ubyte"),
        encode_idx_u8(&[3], &[1, 2, 3]),
    )
    .unwrap();
    let err = Mnist::load(&dir, true).err().unwrap().to_string();
    assert!(err.contains("3 labels for 4 images"), "{err}");
    // Label out of range.
    std::fs::write(
        dir.join("train-labels-idx1-ubyte"),
        encode_idx_u8(&[4], &[1, 2, 3, 12]),
    )
    .unwrap();
    assert!(Mnist::load(&dir, true)
        .err()
        .unwrap()
        .to_string()
        .contains("label 12"));
    // Wrong image size.
    std::fs::write(
        dir.join("train-images-idx3-ubyte"),
        encode_idx_u8(&[1, 2, 2], &[0; 4]),
    )
    .unwrap();
    assert!(Mnist::load(&dir, true)
        .err()
        .unwrap()
        .to_string()
        .contains("expected [N, 28, 28]"));
    // Missing files name the fetch script.
    let err = Mnist::load(&dir, false).err().unwrap().to_string();
    assert!(err.contains("scripts/fetch-data.sh"), "{err}");
}

#[test]
fn batches_cover_every_sample_once_and_are_reproducible() {
    let data = TensorDataset::new(
        Tensor::arange(0.0, 10.0, 1.0, DType::F32).reshape(&[10, 1]),
        Tensor::arange(0.0, 10.0, 1.0, DType::F32),
    );
    let order = |epoch: u64, seed: u64| -> Vec<usize> {
        BatchIterator::epoch(&data, 3, true, seed, epoch, false)
            .flat_map(|b| b.indices)
            .collect()
    };
    let mut seen = order(0, 1);
    assert_eq!(order(0, 1), seen);
    assert_ne!(order(1, 1), seen, "epochs shuffle differently");
    assert_ne!(order(0, 2), seen, "seeds shuffle differently");
    seen.sort();
    assert_eq!(seen, (0..10).collect::<Vec<_>>());
    let batches: Vec<_> = BatchIterator::epoch(&data, 3, true, 1, 0, false).collect();
    assert_eq!(
        batches.iter().map(|b| b.indices.len()).collect::<Vec<_>>(),
        vec![3, 3, 3, 1]
    );
    // Inputs follow the indices.
    let b = &batches[0];
    assert_eq!(
        b.inputs.to_vec::<f32>(),
        b.indices.iter().map(|&i| i as f32).collect::<Vec<_>>()
    );
    let dropped = BatchIterator::epoch(&data, 3, false, 0, 0, true);
    assert_eq!(dropped.batches(), 3);
    assert_eq!(dropped.count(), 3);
    assert_eq!(data.len(), 10);
}

#[test]
fn tensors_round_trip_through_safetensors() {
    let dir = scratch("safetensors_round_trip");
    let path = dir.join("t.safetensors");
    let a = Tensor::from_vec(vec![1.5f32, -2.0, 3.25], &[3]);
    let b = Tensor::from_vec(vec![0.1f64, 0.2, 0.3, 0.4], &[2, 2]);
    let meta = HashMap::from([("note".to_string(), "hello".to_string())]);
    save_tensors(
        &path,
        &[("a".into(), a.clone()), ("b".into(), b.transpose(0, 1))],
        meta,
    )
    .unwrap();
    let (t, m) = load_tensors(&path).unwrap();
    assert_eq!(t["a"].to_vec::<f32>(), a.to_vec::<f32>());
    assert_eq!(t["b"].dtype(), DType::F64);
    assert_eq!(t["b"].to_vec::<f64>(), vec![0.1, 0.3, 0.2, 0.4]);
    assert_eq!(m["note"], "hello");
    std::fs::write(&path, b"not a checkpoint").unwrap();
    let err = load_tensors(&path).unwrap_err().to_string();
    assert!(
        err.contains("not a valid safetensors file") && err.contains("t.safetensors"),
        "{err}"
    );
}

fn mlp() -> Model {
    let _turn = turn();
    manual_seed(11);
    let net = Net::new(vec![
        Box::new(Dense::new(6, 5)),
        Box::new(ReLU::new()),
        Box::new(Dense::new(5, 3)),
    ]);
    Model::new(net, SoftmaxCrossEntropy::new(), Adam::new(0.01))
}

fn toy_data() -> TensorDataset {
    let x = Tensor::randn(
        &[40, 6],
        DType::F32,
        &mut <rand::rngs::StdRng as rand::SeedableRng>::seed_from_u64(1),
    );
    let labels: Vec<u8> = (0..40).map(|i| (i % 3) as u8).collect();
    TensorDataset::new(x, ferrograd::data::one_hot(&labels, 3))
}

fn train_epoch(model: &mut Model, data: &TensorDataset, epoch: u64) {
    for b in BatchIterator::epoch(data, 8, true, 5, epoch, false) {
        model.train_step(&b.inputs, &b.targets);
    }
}

fn params_of(model: &Model) -> Vec<Vec<f32>> {
    model
        .net()
        .params()
        .iter()
        .map(|(_, p)| p.tensor().to_vec::<f32>())
        .collect()
}

#[test]
fn resuming_from_a_checkpoint_is_exact() {
    let dir = scratch("exact_resume");
    let data = toy_data();
    let mut straight = mlp();
    train_epoch(&mut straight, &data, 0);
    train_epoch(&mut straight, &data, 1);

    let mut first = mlp();
    train_epoch(&mut first, &data, 0);
    let path = dir.join("ck.safetensors");
    save_checkpoint(&path, &first, 1).unwrap();
    let mut resumed = mlp(); // fresh weights, overwritten by the checkpoint
    let ck = load_checkpoint(&path).unwrap();
    assert_eq!(ck.epoch, 1);
    ck.restore(&mut resumed).unwrap();
    assert_eq!(resumed.optimizer().steps(), 5);
    train_epoch(&mut resumed, &data, 1);
    assert_eq!(
        params_of(&resumed),
        params_of(&straight),
        "bit-identical parameters"
    );
}

#[test]
fn checkpoint_mismatches_are_listed() {
    let dir = scratch("checkpoint_mismatch");
    let path = dir.join("ck.safetensors");
    save_checkpoint(&path, &mlp(), 0).unwrap();
    let _turn = turn();
    manual_seed(1);
    let other = Net::new(vec![
        Box::new(Dense::new(6, 4)),
        Box::new(ReLU::new()),
        Box::new(Dense::new(4, 3)),
    ]);
    let mut model = Model::new(other, SoftmaxCrossEntropy::new(), Adam::new(0.01));
    let before = params_of(&model);
    let err = load_checkpoint(&path)
        .unwrap()
        .restore(&mut model)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("0.weight: expected [4, 6] f32, found [5, 6] f32"),
        "{err}"
    );
    assert!(
        err.contains("2.weight: expected [3, 4] f32, found [3, 5] f32"),
        "{err}"
    );
    assert_eq!(params_of(&model), before, "nothing changed");
    // Not a checkpoint at all.
    save_tensors(
        &path,
        &[("x".into(), Tensor::zeros(&[1], DType::F32))],
        HashMap::new(),
    )
    .unwrap();
    let err = load_checkpoint(&path).err().unwrap().to_string();
    assert!(err.contains("not a ferrograd checkpoint"), "{err}");
}

#[test]
fn optimizer_state_that_does_not_fit_changes_nothing() {
    let dir = scratch("checkpoint_optim_mismatch");
    let path = dir.join("ck.safetensors");
    let mut trained = mlp();
    train_epoch(&mut trained, &toy_data(), 0);
    save_checkpoint(&path, &trained, 1).unwrap();
    let (mut tensors, meta) = load_tensors(&path).unwrap();
    tensors.insert(
        "optim.0.weight.exp_avg".into(),
        Tensor::zeros(&[2], DType::F32),
    );
    let named: Vec<(String, Tensor)> = tensors.into_iter().collect();
    save_tensors(&path, &named, meta).unwrap();
    let mut model = mlp();
    let before = params_of(&model);
    let err = load_checkpoint(&path)
        .unwrap()
        .restore(&mut model)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("optim.0.weight.exp_avg: expected [5, 6] f32, found [2] f32"),
        "{err}"
    );
    assert_eq!(params_of(&model), before);
    assert_eq!(model.optimizer().steps(), 0);
}

#[test]
fn an_interrupted_write_leaves_the_old_checkpoint() {
    let dir = scratch("atomic_write");
    let path = dir.join("ck.safetensors");
    let model = mlp();
    save_checkpoint(&path, &model, 3).unwrap();
    let before = std::fs::read(&path).unwrap();
    // Block the temporary files (named after the process and a per-process count of writes,
    // which this test binary keeps far below 256): the write fails before anything touches
    // the target.
    let blocks: Vec<_> = (0..256)
        .map(|n| dir.join(format!(".ck.safetensors.tmp-{}-{n}", std::process::id())))
        .collect();
    for b in &blocks {
        std::fs::create_dir_all(b).unwrap();
    }
    assert!(save_checkpoint(&path, &model, 4).is_err());
    assert_eq!(std::fs::read(&path).unwrap(), before);
    assert_eq!(load_checkpoint(&path).unwrap().epoch, 3);
    for b in &blocks {
        std::fs::remove_dir_all(b).unwrap();
    }
    save_checkpoint(&path, &model, 4).unwrap();
    assert_eq!(load_checkpoint(&path).unwrap().epoch, 4);
    // No temporary files are left behind.
    let names: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names.len(), 1, "{names:?}");
}

#[test]
fn shards_cover_every_sample_once_per_epoch_with_one_shuffle() {
    let n = 103;
    let data = TensorDataset::new(
        Tensor::from_vec((0..n).map(|i| i as f32).collect(), &[n, 1]),
        Tensor::zeros(&[n, 1], DType::F32),
    );
    for ranks in [1, 2, 3] {
        for epoch in 0..2 {
            let shards: Vec<Vec<Vec<usize>>> = (0..ranks)
                .map(|rank| {
                    let batches = Batches::new(&data, 16).shuffle(9).shard(rank, ranks);
                    batches.epoch(epoch).map(|b| b.indices).collect()
                })
                .collect();
            // Every rank takes the same number of steps, 16 samples each but the last.
            let steps = shards[0].len();
            assert!(shards.iter().all(|s| s.len() == steps));
            assert!(shards
                .iter()
                .all(|s| s[..steps - 1].iter().all(|b| b.len() == 16)));
            // Step by step, the ranks' slices put together are the single process's batch.
            let whole: Vec<Vec<usize>> = Batches::new(&data, 16 * ranks)
                .shuffle(9)
                .epoch(epoch)
                .map(|b| b.indices)
                .collect();
            for (step, batch) in whole.iter().enumerate() {
                let joined: Vec<usize> = shards.iter().flat_map(|s| s[step].clone()).collect();
                assert_eq!(&joined, batch, "{ranks} ranks, epoch {epoch}, step {step}");
            }
            let mut seen: Vec<usize> = shards.iter().flatten().flatten().copied().collect();
            seen.sort_unstable();
            assert_eq!(seen, (0..n).collect::<Vec<_>>());
        }
    }
    let m = crate::common::panic_message(|| {
        let _ = Batches::new(&data, 4).shard(2, 2);
    });
    assert!(m.contains("rank 2"), "{m}");
}
