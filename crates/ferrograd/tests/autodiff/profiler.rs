//! The profiler: every op and derivative rule of a step, and the ranges a caller names, with
//! nested times that add up; a table and a Chrome trace.

use ferrograd::profiler::{profile, record_function, SortBy};

use crate::common::{panic_message, randn};

#[test]
fn a_profile_times_every_op_and_rule_of_a_step() {
    let w = randn(&[16, 8], 1).requires_grad();
    let x = randn(&[4, 16], 2);
    let (grads, report) = profile(|| {
        let _step = record_function("one step");
        let hidden = {
            let _forward = record_function("forward");
            x.matmul(&w).relu()
        };
        hidden.square().sum().backward()
    });
    assert!(grads.get(&w).is_some());
    // Other tests of the binary run beside this one: only this thread's events count.
    let events = report.events();
    let step = events
        .iter()
        .find(|e| e.name == "one step")
        .expect("the range is recorded");
    let mine: Vec<_> = events.iter().filter(|e| e.thread == step.thread).collect();
    let names: Vec<&str> = mine.iter().map(|e| e.name.as_str()).collect();
    for op in [
        "forward",
        "matmul",
        "relu",
        "square",
        "sum",
        "matmul backward",
        "relu backward",
    ] {
        assert!(names.contains(&op), "{op} not in {names:?}");
    }
    // Nested scopes: the step holds everything, and self time is what its children left.
    assert_eq!(step.depth, 0);
    for e in &mine {
        assert!(e.self_ns <= e.total_ns, "{e:?}");
        assert!(
            e.start_ns >= step.start_ns && e.start_ns + e.total_ns <= step.start_ns + step.total_ns
        );
    }
    let children: u64 = mine
        .iter()
        .filter(|e| e.depth == 1)
        .map(|e| e.total_ns)
        .sum();
    assert_eq!(step.self_ns, step.total_ns - children);
    let forward = mine.iter().find(|e| e.name == "forward").unwrap();
    let matmul = mine.iter().find(|e| e.name == "matmul").unwrap();
    assert_eq!(matmul.depth, forward.depth + 1);
    // [4, 16] @ [16, 8]: 2·4·8·16 operations and a 4×8 f64 result; the range around it sums
    // what happened inside.
    assert_eq!(matmul.flops, 2 * 4 * 8 * 16);
    assert_eq!((matmul.bytes, matmul.self_bytes), (4 * 8 * 8, 4 * 8 * 8));
    assert!(forward.flops >= matmul.flops && forward.bytes >= matmul.bytes + 4 * 8 * 8);
    assert!(step.threads <= ferrograd::num_threads());

    let table = report.table_sorted(SortBy::Calls, 100);
    assert!(table.starts_with("Name"), "{table}");
    assert!(table.contains("matmul backward"), "{table}");
    let trace = report.chrome_trace();
    assert!(trace.starts_with("{\"traceEvents\":[{") && trace.contains("\"name\":\"one step\""));
    assert!(trace.contains("\"ph\":\"X\"") && trace.contains("\"flops\":1024"));
    let path = crate::common::scratch("profiler").join("trace.json");
    report.export_chrome_trace(&path).unwrap();
    assert_eq!(std::fs::read_to_string(&path).unwrap(), trace);
    assert!(report
        .export_chrome_trace("/nonexistent/dir/trace.json")
        .is_err());

    // Off, nothing is recorded; profiles do not nest.
    assert!(record_function("unseen").is_none());
    let msg = panic_message(|| {
        profile(|| profile(|| ()));
    });
    assert!(msg.contains("already being recorded"), "{msg}");
    let (_, after) = profile(|| x.exp());
    assert!(after.events().iter().all(|e| e.name != "one step"));
}
