//! DQN on CartPole (seed 000 lists DQN among tinynn's models): a Q-network learns from a
//! replay buffer against a target network synced by copying parameters, with an ε-greedy
//! schedule and the Huber loss. Prints the average return per 10 episodes; CartPole-v1 counts
//! as solved at an average return of 475 over 100 consecutive episodes.
//!
//! `cargo run --release --example dqn -- --seed 0`

use std::collections::VecDeque;

use clap::Parser;
use ferrograd::prelude::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

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
    /// Save the Q-network's weights to this safetensors file.
    #[arg(long)]
    save: Option<std::path::PathBuf>,
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
    let args = Args::parse();
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
    let start = std::time::Instant::now();
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
            if returns.len().is_multiple_of(10) {
                let last10 = &returns[returns.len() - 10..];
                println!(
                    "episodes {:4}  steps {step:6}  average return of the last 10: {:.1}",
                    returns.len(),
                    last10.iter().sum::<f64>() / 10.0
                );
            }
            if returns.len() >= 100 {
                let avg = returns[returns.len() - 100..].iter().sum::<f64>() / 100.0;
                if avg >= 475.0 {
                    println!(
                        "solved after {} episodes and {step} steps ({:.1} s): average return \
                         {avg:.1} over the last 100 episodes",
                        returns.len(),
                        start.elapsed().as_secs_f64()
                    );
                    if let Some(path) = &args.save {
                        online.save_safetensors(path)?;
                    }
                    return Ok(());
                }
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
    }
    println!("not solved within {} steps", args.steps);
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
