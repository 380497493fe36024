//! `#[isa_dispatch]`: one kernel loop compiled for each instruction-set path of ferrograd's
//! `Isa`, the path chosen at every call by `Isa::active()` (so `FERROGRAD_ISA` reaches it).
//! The expansion calls the target-feature clones in `unsafe` blocks, each with its `SAFETY:`
//! line; `tests/layers.rs` keeps every use of the attribute inside ferrograd's `kernels/`.

use proc_macro2::Ident;
use proc_macro2::TokenStream as Tokens;
use quote::{format_ident, quote};
use syn::{FnArg, GenericParam, ItemFn, Pat, PatIdent, PatType, Signature};

/// Refuses what a kernel loop never is and the expansion could not keep: methods, unsafe,
/// async or const functions, and `impl Trait` results (each clone would return its own type).
fn check(sig: &Signature) -> syn::Result<()> {
    if let Some(FnArg::Receiver(r)) = sig.inputs.first() {
        return Err(syn::Error::new_spanned(
            r,
            "#[isa_dispatch] takes free functions, not methods",
        ));
    }
    let returns_impl = matches!(&sig.output, syn::ReturnType::Type(_, t) if matches!(**t, syn::Type::ImplTrait(_)));
    if sig.asyncness.is_some() || sig.constness.is_some() || sig.unsafety.is_some() || returns_impl
    {
        return Err(syn::Error::new_spanned(
            &sig.ident,
            "#[isa_dispatch] takes safe, non-async, non-const functions that return a named type",
        ));
    }
    Ok(())
}

/// `sig` with each argument under a plain name (the body keeps its patterns), and those names.
fn plain_arguments(sig: &Signature) -> (Signature, Vec<Ident>) {
    let mut plain = sig.clone();
    let mut args = Vec::new();
    for (i, input) in plain.inputs.iter_mut().enumerate() {
        if let FnArg::Typed(PatType { pat, .. }) = input {
            let name = format_ident!("__arg{}", i);
            **pat = Pat::Ident(PatIdent {
                attrs: Vec::new(),
                by_ref: None,
                mutability: None,
                ident: name.clone(),
                subpat: None,
            });
            args.push(name);
        }
    }
    (plain, args)
}

/// The turbofish that passes on the type and const parameters (lifetimes are inferred).
fn turbofish(sig: &Signature) -> Tokens {
    let params: Vec<_> = sig
        .generics
        .params
        .iter()
        .filter_map(|p| match p {
            GenericParam::Type(t) => Some(t.ident.clone()),
            GenericParam::Const(c) => Some(c.ident.clone()),
            GenericParam::Lifetime(_) => None,
        })
        .collect();
    if params.is_empty() {
        quote!()
    } else {
        quote!(::<#(#params),*>)
    }
}

/// The expansion: the function's body becomes an inline helper, wrapped by one function per
/// target-feature set; the function itself matches on the active path.
pub fn expand(item: ItemFn) -> syn::Result<Tokens> {
    let ItemFn {
        attrs,
        vis,
        sig,
        block,
    } = item;
    check(&sig)?;
    let (plain, args) = plain_arguments(&sig);
    let turbofish = turbofish(&sig);
    let variant = |name: &str| {
        let mut s = plain.clone();
        s.ident = format_ident!("__{}", name);
        s.unsafety = Some(Default::default());
        s
    };
    let (avx512, avx2) = (variant("avx512"), variant("avx2"));
    let mut body_sig = sig.clone();
    body_sig.ident = format_ident!("__body");
    let call = |name: &str| {
        let f = format_ident!("__{}", name);
        quote!(#f #turbofish (#(#args),*))
    };
    let (call_body, call_avx512, call_avx2) = (call("body"), call("avx512"), call("avx2"));
    let isa = quote!(crate::kernels::isa::Isa);
    Ok(quote! {
        #(#attrs)*
        #vis #plain {
            #[inline(always)]
            #body_sig #block

            #[cfg(target_arch = "x86_64")]
            #[target_feature(enable = "avx512f,avx512vl,avx2,fma")]
            #avx512 {
                #call_body
            }

            #[cfg(target_arch = "x86_64")]
            #[target_feature(enable = "avx2,fma")]
            #avx2 {
                #call_body
            }

            #[cfg(target_arch = "x86_64")]
            match #isa::active() {
                // SAFETY: the active path never exceeds what the CPU was found to support.
                #isa::Avx512 => unsafe { #call_avx512 },
                // SAFETY: as above.
                #isa::Avx2 => unsafe { #call_avx2 },
                #isa::Portable => #call_body,
            }
            #[cfg(not(target_arch = "x86_64"))]
            #call_body
        }
    })
}
