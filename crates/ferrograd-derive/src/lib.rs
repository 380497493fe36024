//! `#[derive(Module)]`: a struct of layers gets ferrograd's `Module` implementation, with
//! each parameter, buffer and random stream named by its field path (`encoder.0.weight`), the
//! keys PyTorch's `state_dict` gives the same structure.
//!
//! Every field takes part unless marked `#[module(skip)]` (configuration, cached values).
//! Tuple structs name their fields `0`, `1`, ... as PyTorch's `Sequential` does.
//!
//! `#[isa_dispatch]` compiles a kernel loop once per instruction-set path of ferrograd's `Isa`
//! (AVX-512, AVX2 + FMA, baseline) and picks one at each call from `Isa::active()`, so that
//! `FERROGRAD_ISA` forces every kernel, not only the hand-written ones. For use inside
//! ferrograd (it names `crate::kernels::isa::Isa`).

#![deny(missing_docs)]
// Functions stay short enough to read at once (the threshold is in clippy.toml).
#![deny(clippy::too_many_lines)]

mod isa_dispatch;

use proc_macro::TokenStream;
use proc_macro2::TokenStream as Tokens;
use quote::quote;
use syn::ext::IdentExt;
use syn::{parse_macro_input, parse_quote, Data, DeriveInput, Fields, Index};

/// Implements `ferrograd::nn::Module` for a struct whose fields are modules: parameters,
/// buffers and random streams are the fields', prefixed by the field's name (`#[module(skip)]`
/// leaves a field out).
#[proc_macro_derive(Module, attributes(module))]
pub fn derive_module(input: TokenStream) -> TokenStream {
    let input = parse_macro_input!(input as DeriveInput);
    match expand(&input) {
        Ok(tokens) => tokens.into(),
        Err(e) => e.to_compile_error().into(),
    }
}

/// Compiles a free function for each kernel path (AVX-512 with VL, AVX2 with FMA, the
/// baseline) and dispatches on `Isa::active()` at each call. The body is written once, as
/// plain Rust that the compiler vectorises for each target.
#[proc_macro_attribute]
pub fn isa_dispatch(attr: TokenStream, input: TokenStream) -> TokenStream {
    if !attr.is_empty() {
        let msg = "#[isa_dispatch] takes no arguments";
        return syn::Error::new(proc_macro2::Span::call_site(), msg)
            .to_compile_error()
            .into();
    }
    let input = parse_macro_input!(input as syn::ItemFn);
    match isa_dispatch::expand(input) {
        Ok(tokens) => tokens.into(),
        Err(e) => e.to_compile_error().into(),
    }
}

/// The fields that are modules: (name in parameter paths, how to reach the field).
fn module_fields(input: &DeriveInput) -> syn::Result<Vec<(String, Tokens)>> {
    let Data::Struct(data) = &input.data else {
        return Err(syn::Error::new_spanned(
            &input.ident,
            "#[derive(Module)] needs a struct whose fields are modules",
        ));
    };
    let mut out = Vec::new();
    let fields: Vec<&syn::Field> = match &data.fields {
        Fields::Named(f) => f.named.iter().collect(),
        Fields::Unnamed(f) => f.unnamed.iter().collect(),
        Fields::Unit => Vec::new(),
    };
    for (i, field) in fields.into_iter().enumerate() {
        if skipped(field)? {
            continue;
        }
        match &field.ident {
            // `r#type` is named "type", as the field is in PyTorch.
            Some(ident) => out.push((ident.unraw().to_string(), quote!(self.#ident))),
            None => {
                let index = Index::from(i);
                out.push((i.to_string(), quote!(self.#index)));
            }
        }
    }
    Ok(out)
}

/// Whether a field carries `#[module(skip)]`; any other `module` attribute is an error.
fn skipped(field: &syn::Field) -> syn::Result<bool> {
    let mut skip = false;
    for attr in field.attrs.iter().filter(|a| a.path().is_ident("module")) {
        attr.parse_nested_meta(|meta| {
            if meta.path.is_ident("skip") {
                skip = true;
                Ok(())
            } else {
                Err(meta.error("expected `skip`"))
            }
        })?;
    }
    Ok(skip)
}

fn expand(input: &DeriveInput) -> syn::Result<Tokens> {
    let fields = module_fields(input)?;
    let name = &input.ident;
    let title = name.to_string();
    // Every type parameter must itself be a module (`struct Residual<L> { inner: L }`).
    let mut generics = input.generics.clone();
    for param in generics.type_params_mut() {
        param.bounds.push(parse_quote!(::ferrograd::nn::Module));
    }
    let (impl_generics, ty_generics, where_clause) = generics.split_for_impl();
    // Parameters and buffers pass through `distinct`: a tied parameter is listed once.
    let gather = |list: Tokens, once: bool| {
        let parts = fields.iter().map(|(path, access)| {
            quote! {
                out.extend(::ferrograd::nn::prefixed(#path, ::ferrograd::nn::Module::#list(&#access)));
            }
        });
        let result = if once {
            quote!(::ferrograd::nn::distinct(out))
        } else {
            quote!(out)
        };
        quote! {
            let mut out = ::std::vec::Vec::new();
            #(#parts)*
            #result
        }
    };
    let params = gather(quote!(params), true);
    let buffers = gather(quote!(buffers), true);
    let streams = gather(quote!(rng_streams), false);
    let state = gather(quote!(state_params), true);
    Ok(quote! {
        impl #impl_generics ::ferrograd::nn::Module for #name #ty_generics #where_clause {
            fn params(&self) -> ::std::vec::Vec<(::std::string::String, ::ferrograd::autograd::Param)> {
                #params
            }
            fn buffers(&self) -> ::std::vec::Vec<(::std::string::String, ::ferrograd::autograd::Param)> {
                #buffers
            }
            fn rng_streams(&self) -> ::std::vec::Vec<(::std::string::String, ::ferrograd::nn::RngStream)> {
                #streams
            }
            fn state_params(&self) -> ::std::vec::Vec<(::std::string::String, ::ferrograd::autograd::Param)> {
                #state
            }
            fn name(&self) -> ::std::string::String {
                ::std::string::String::from(#title)
            }
        }
    })
}
