//! The training library: layers and modules, losses, optimizers and schedules, models,
//! PyTorch's weights, the language model, the tutorials and the API contract.

#[path = "../common/mod.rs"]
mod common;

mod api_contract;
mod conveniences;
mod language_model;
mod modules;
mod torch_fixture;
mod training;
mod tutorials;
