//! DQN on CartPole (seed 000 lists DQN among tinynn's models): a Q-network learns from a
//! replay buffer against a target network synced by copying parameters, with an ε-greedy
//! schedule and the Huber loss. Prints the average return per 10 episodes; CartPole-v1 counts
//! as solved at an average return of 475 over 100 consecutive episodes.
//!
//! `cargo run --release --features pictures --example dqn -- --seed 0`

use std::collections::VecDeque;

use std::path::Path;
use std::time::Instant;

use clap::Parser;
use ferrograd::prelude::*;
use indicatif::{ProgressBar, ProgressStyle};
use plotters::prelude::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

mod common;

/// The classic cart-pole physics (Barto, Sutton and Anderson; Gym's CartPole-v1): Euler steps
/// of 0.02 s, failure beyond ±12° or ±2.4, episodes capped at 500 steps.
mod rl {
    use rand::Rng;

    const GRAVITY: f64 = 9.8;
    const CART_MASS: f64 = 1.0;
    const POLE_MASS: f64 = 0.1;
    const HALF_LENGTH: f64 = 0.5;
    const FORCE: f64 = 10.0;
    const TAU: f64 = 0.02;
    const THETA_LIMIT: f64 = 12.0 * 2.0 * std::f64::consts::PI / 360.0;
    const X_LIMIT: f64 = 2.4;
    /// CartPole-v1's cap on an episode's length.
    pub const MAX_STEPS: usize = 500;

    /// Position, velocity, pole angle, angular velocity; and the steps taken.
    pub struct CartPole {
        pub state: [f64; 4],
        steps: usize,
    }

    impl CartPole {
        /// A new episode: every state variable uniform in ±0.05.
        pub fn reset(rng: &mut impl Rng) -> CartPole {
            CartPole {
                state: std::array::from_fn(|_| rng.gen_range(-0.05..0.05)),
                steps: 0,
            }
        }

        /// Pushes left (0) or right (1); returns the reward (1) and whether the episode ended
        /// (failed, or reached the cap: the latter is not a failure).
        pub fn step(&mut self, action: usize) -> (f64, bool, bool) {
            let [x, x_dot, theta, theta_dot] = self.state;
            let force = if action == 1 { FORCE } else { -FORCE };
            let (cos, sin) = (theta.cos(), theta.sin());
            let total = CART_MASS + POLE_MASS;
            let temp = (force + POLE_MASS * HALF_LENGTH * theta_dot * theta_dot * sin) / total;
            let theta_acc = (GRAVITY * sin - cos * temp)
                / (HALF_LENGTH * (4.0 / 3.0 - POLE_MASS * cos * cos / total));
            let x_acc = temp - POLE_MASS * HALF_LENGTH * theta_acc * cos / total;
            self.state = [
                x + TAU * x_dot,
                x_dot + TAU * x_acc,
                theta + TAU * theta_dot,
                theta_dot + TAU * theta_acc,
            ];
            self.steps += 1;
            let failed = self.state[0].abs() > X_LIMIT || self.state[2].abs() > THETA_LIMIT;
            (1.0, failed, failed || self.steps >= MAX_STEPS)
        }
    }
}

#[derive(Parser)]
#[command(about = "DQN on CartPole")]
struct Args {
    /// Seed of the weights, the environment and the exploration.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Environment steps at most.
    #[arg(long, default_value_t = 300_000)]
    steps: usize,
    /// `dqn_returns.svg` (the return of every episode) goes here; `--save` writes the
    /// Q-network's weights.
    #[command(flatten)]
    output: common::Output,
}

/// One transition: state, action, reward, next state, whether the next state is terminal.
type Transition = ([f64; 4], usize, f64, [f64; 4], bool);

fn q_network() -> Net {
    Net::new(vec![
        Box::new(Dense::new(4, 128)),
        Box::new(Relu::new()),
        Box::new(Dense::new(128, 128)),
        Box::new(Relu::new()),
        Box::new(Dense::new(128, 2)),
    ])
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    run(Args::parse())
}

fn run(args: Args) -> Result<(), Box<dyn std::error::Error>> {
    manual_seed(args.seed);
    let online = q_network();
    let target = q_network();
    target.copy_from(&online)?;
    let mut opt = Adam::new(5e-4).clip_grad_norm(10.0);
    let mut rng = StdRng::seed_from_u64(args.seed);
    let mut replay: VecDeque<Transition> = VecDeque::with_capacity(50_000);
    let (gamma, batch) = (0.99, 64);
    let mut returns: Vec<f64> = Vec::new();
    let mut env = rl::CartPole::reset(&mut rng);
    let mut episode_return = 0.0;
    let (start, bar) = (Instant::now(), steps_bar(args.steps)?);
    let mut solved_at = None;
    for step in 0..args.steps {
        // ε from 1 down to 0.01 over the first 20,000 steps.
        let eps = (1.0 - step as f64 / 20_000.0).max(0.01);
        let s = env.state;
        let action = if rng.gen::<f64>() < eps {
            rng.gen_range(0..2)
        } else {
            let q = no_grad(|| online.forward(&Tensor::from_vec(s.to_vec(), &[1, 4])));
            q.argmax(1).to_vec::<i64>()[0] as usize
        };
        let (reward, failed, done) = env.step(action);
        replay.push_back((s, action, reward, env.state, failed));
        if replay.len() > 50_000 {
            replay.pop_front();
        }
        episode_return += reward;
        if done {
            returns.push(episode_return);
            report(&bar, &returns, step);
            if average_of_last(&returns, 100).is_some_and(|avg| avg >= 475.0) {
                solved_at = Some(step);
                break;
            }
            env = rl::CartPole::reset(&mut rng);
            episode_return = 0.0;
        }
        if replay.len() >= 1_000 {
            learn(&online, &target, &mut opt, &replay, batch, gamma, &mut rng);
        }
        if step.is_multiple_of(1000) {
            target.copy_from(&online)?;
        }
        bar.inc(1);
    }
    bar.finish_and_clear();
    match solved_at {
        Some(step) => println!(
            "solved after {} episodes and {step} steps ({:.1} s): average return {:.1} over the \
             last 100 episodes",
            returns.len(),
            start.elapsed().as_secs_f64(),
            average_of_last(&returns, 100).unwrap_or_default()
        ),
        None => println!("not solved within {} steps", args.steps),
    }
    finish(&args.output, &online, &returns)
}

/// A bar over the environment steps (drawn only on a terminal).
fn steps_bar(steps: usize) -> Result<ProgressBar, Box<dyn std::error::Error>> {
    let bar = ProgressBar::new(steps as u64);
    bar.set_style(
        ProgressStyle::with_template("{bar:30} {pos}/{len} steps {per_sec}")?.progress_chars("=> "),
    );
    Ok(bar)
}

/// The mean of the last `n` returns, once there are `n`.
fn average_of_last(returns: &[f64], n: usize) -> Option<f64> {
    (returns.len() >= n).then(|| returns[returns.len() - n..].iter().sum::<f64>() / n as f64)
}

/// Every 10 episodes, their average return, printed above the bar.
fn report(bar: &ProgressBar, returns: &[f64], step: usize) {
    if returns.len().is_multiple_of(10) {
        let avg = average_of_last(returns, 10).unwrap_or_default();
        bar.suspend(|| {
            println!(
                "episodes {:4}  steps {step:6}  average return of the last 10: {avg:.1}",
                returns.len()
            )
        });
    }
}

/// Writes the curve of returns, and the weights if asked.
fn finish(
    out: &common::Output,
    online: &Net,
    returns: &[f64],
) -> Result<(), Box<dyn std::error::Error>> {
    std::fs::create_dir_all(&out.out_dir)?;
    let path = out.out_dir.join("dqn_returns.svg");
    plot_returns(&path, returns)?;
    println!("wrote {}", path.display());
    if let Some(path) = &out.save {
        online.save_safetensors(path)?;
    }
    Ok(())
}

/// Each episode's return, the mean of the last 100, and CartPole-v1's bar at 475.
fn plot_returns(path: &Path, returns: &[f64]) -> Result<(), Box<dyn std::error::Error>> {
    let root = SVGBackend::new(path, (720, 400)).into_drawing_area();
    root.fill(&WHITE)?;
    let episodes = returns.len().max(2);
    let mut chart = ChartBuilder::on(&root)
        .caption("DQN on CartPole: return per episode", ("sans-serif", 20))
        .margin(10)
        .x_label_area_size(30)
        .y_label_area_size(50)
        .build_cartesian_2d(1..episodes, 0.0..520.0)?;
    chart.configure_mesh().x_desc("episode").draw()?;
    let each = returns.iter().enumerate().map(|(i, &r)| (i + 1, r));
    chart
        .draw_series(LineSeries::new(each, BLUE.mix(0.3)))?
        .label("return")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLUE));
    let mean =
        (100..=returns.len()).map(|n| (n, average_of_last(&returns[..n], 100).unwrap_or_default()));
    chart
        .draw_series(LineSeries::new(mean, RED.stroke_width(2)))?
        .label("mean of the last 100")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], RED));
    chart
        .draw_series(LineSeries::new(
            [(1, 475.0), (episodes, 475.0)],
            BLACK.mix(0.6),
        ))?
        .label("solved (475)")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLACK));
    chart
        .configure_series_labels()
        .border_style(BLACK)
        .background_style(WHITE)
        .draw()?;
    root.present()?;
    Ok(())
}

/// One gradient step on a random minibatch: Huber loss between Q(s, a) and
/// r + γ·max Q_target(s′) (no bootstrap past a failure).
fn learn(
    online: &Net,
    target: &Net,
    opt: &mut Adam,
    replay: &VecDeque<Transition>,
    batch: usize,
    gamma: f64,
    rng: &mut StdRng,
) {
    let picks: Vec<&Transition> = (0..batch)
        .map(|_| &replay[rng.gen_range(0..replay.len())])
        .collect();
    let states: Vec<f32> = picks.iter().flat_map(|t| t.0.map(|v| v as f32)).collect();
    let next: Vec<f32> = picks.iter().flat_map(|t| t.3.map(|v| v as f32)).collect();
    let actions: Vec<usize> = picks.iter().map(|t| t.1).collect();
    let next_q = no_grad(|| target.forward(&Tensor::from_vec(next, &[batch, 4])));
    let best_next = next_q.max_axes(&[1], false).to_vec::<f32>();
    let targets: Vec<f32> = picks
        .iter()
        .zip(&best_next)
        .map(|(t, &q)| t.2 as f32 + if t.4 { 0.0 } else { gamma as f32 * q })
        .collect();
    let q = Layer::forward(online, &Tensor::from_vec(states, &[batch, 4]), Mode::Train);
    let chosen = (&q * &one_hot(&actions, 2)).sum_axes(&[1], false);
    let loss = Huber::new(1.0).loss(&chosen, &Tensor::from_vec(targets, &[batch]));
    opt.step(&online.params(), &loss.backward());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn learns_for_a_few_steps_and_writes_its_curve() {
        let dir = common::scratch("dqn-example");
        let weights = dir.join("q.safetensors");
        let argv = ["dqn", "--steps", "1500", "--out-dir", dir.to_str().unwrap()];
        let save = ["--save", weights.to_str().unwrap()];
        run(Args::try_parse_from(argv.iter().chain(&save)).unwrap()).unwrap();
        let svg = std::fs::read_to_string(dir.join("dqn_returns.svg")).unwrap();
        assert!(svg.starts_with("<svg") && svg.contains("return per episode"));
        let reloaded = q_network();
        reloaded.load_safetensors(&weights).unwrap();
    }
}
