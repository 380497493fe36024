//! The training library: layers and modules, losses, optimizers and schedules, models,
//! PyTorch's weights, the language model, the tutorials and the API contract.

#[path = "../common/mod.rs"]
mod common;

mod training;
mod modules;
mod language_model;
mod tutorials;
mod conveniences;
mod api_contract;
mod torch_fixture;
