//! Code generation for `#[traced]`: the function keeps its signature and attributes; its body
//! is wrapped. Every generated identifier starts with `__fxtrace` / `__FXTRACE`, and every path
//! goes through `<crate>::__private` (the runtime support, `fxtrace::instrument`).

use std::collections::HashSet;

use proc_macro2::{TokenStream, TokenTree};
use quote::{quote, quote_spanned, ToTokens};
use syn::spanned::Spanned;
use syn::{
    AttrStyle, Attribute, Error, FnArg, ImplItemFn, ItemFn, Pat, PathArguments, ReturnType,
    Signature, TraitItemFn, Type,
};

use crate::args::{ArgKind, ArgSpec, TracedArgs};

/// Most arguments one FXT event carries.
const MAX_ARGS: usize = 15;

/// The function the attribute is on, in the parts the expansion needs.
pub(crate) struct TracedFn {
    outer_attrs: Vec<Attribute>,
    inner_attrs: Vec<Attribute>,
    vis: TokenStream,
    sig: Signature,
    block: syn::Block,
}

/// Parse the annotated item: a function with a body (free function, inherent or trait
/// method, trait default method). Anything else is a spanned error.
pub(crate) fn parse_item(item: TokenStream) -> syn::Result<TracedFn> {
    if let Ok(f) = syn::parse2::<ItemFn>(item.clone()) {
        return Ok(TracedFn::new(
            f.attrs,
            f.vis.into_token_stream(),
            f.sig,
            *f.block,
        ));
    }
    // A method with a `default` or other impl-only syntax.
    if let Ok(f) = syn::parse2::<ImplItemFn>(item.clone()) {
        return Ok(TracedFn::new(
            f.attrs,
            f.vis.into_token_stream(),
            f.sig,
            f.block,
        ));
    }
    if let Ok(f) = syn::parse2::<TraitItemFn>(item.clone()) {
        return Err(match f.semi_token {
            Some(semi) => Error::new(
                semi.span(),
                "#[traced] needs a function body: put it on the implementations, or on a \
                 default method",
            ),
            None => Error::new_spanned(&f.sig, "#[traced] could not read this function"),
        });
    }
    Err(Error::new_spanned(
        item,
        "#[traced] applies to functions and methods",
    ))
}

impl TracedFn {
    fn new(attrs: Vec<Attribute>, vis: TokenStream, sig: Signature, block: syn::Block) -> Self {
        let (inner_attrs, outer_attrs) = attrs
            .into_iter()
            .partition(|a| matches!(a.style, AttrStyle::Inner(_)));
        TracedFn {
            outer_attrs,
            inner_attrs,
            vis,
            sig,
            block,
        }
    }

    /// The item unchanged (emitted next to an error, so that the error is the only one).
    pub(crate) fn untouched(&self) -> TokenStream {
        let TracedFn {
            outer_attrs,
            inner_attrs,
            vis,
            sig,
            block,
        } = self;
        let stmts = &block.stmts;
        quote! { #(#outer_attrs)* #vis #sig { #(#inner_attrs)* #(#stmts)* } }
    }
}

/// Identifiers bound by the function's parameters (`self` included).
fn parameter_names(sig: &Signature) -> HashSet<String> {
    fn walk(pat: &Pat, out: &mut HashSet<String>) {
        match pat {
            Pat::Ident(p) => {
                out.insert(p.ident.to_string());
                if let Some((_, sub)) = &p.subpat {
                    walk(sub, out);
                }
            }
            Pat::Tuple(t) => t.elems.iter().for_each(|p| walk(p, out)),
            Pat::TupleStruct(t) => t.elems.iter().for_each(|p| walk(p, out)),
            Pat::Struct(s) => s.fields.iter().for_each(|f| walk(&f.pat, out)),
            Pat::Reference(r) => walk(&r.pat, out),
            Pat::Slice(s) => s.elems.iter().for_each(|p| walk(p, out)),
            Pat::Type(t) => walk(&t.pat, out),
            Pat::Paren(p) => walk(&p.pat, out),
            _ => {}
        }
    }
    let mut out = HashSet::new();
    for input in &sig.inputs {
        match input {
            FnArg::Receiver(_) => {
                out.insert("self".to_owned());
            }
            FnArg::Typed(t) => walk(&t.pat, &mut out),
        }
    }
    out
}

/// Every listed argument names a parameter, once; at most [`MAX_ARGS`].
fn check_args(sig: &Signature, specs: &[ArgSpec]) -> syn::Result<()> {
    let params = parameter_names(sig);
    let mut seen = HashSet::new();
    for (i, spec) in specs.iter().enumerate() {
        let name = spec.ident.to_string();
        if !params.contains(&name) {
            return Err(Error::new(
                spec.ident.span(),
                format!("`{name}` is not a parameter of `{}`", sig.ident),
            ));
        }
        if !seen.insert(name.clone()) {
            return Err(Error::new(
                spec.ident.span(),
                format!("`{name}` is listed twice in `args(..)`"),
            ));
        }
        if i == MAX_ARGS {
            return Err(Error::new(
                spec.ident.span(),
                format!("at most {MAX_ARGS} arguments fit in one trace event"),
            ));
        }
    }
    Ok(())
}

/// Whether a return type mentions `impl Trait` (which a turbofish cannot name).
fn mentions_impl(ty: &Type) -> bool {
    scan_type(ty, &|t| matches!(t, TokenTree::Ident(i) if i == "impl"))
}

/// Whether a return type mentions `impl Trait` or a macro (`!`), which may expand to one.
fn mentions_impl_or_macro(ty: &Type) -> bool {
    scan_type(ty, &|t| match t {
        TokenTree::Ident(i) => i == "impl",
        TokenTree::Punct(p) => p.as_char() == '!',
        _ => false,
    })
}

/// Whether any token of `ty` (in groups too) is one `hit` answers true for.
fn scan_type(ty: &Type, hit: &dyn Fn(&TokenTree) -> bool) -> bool {
    fn scan(tokens: TokenStream, hit: &dyn Fn(&TokenTree) -> bool) -> bool {
        tokens.into_iter().any(|t| match &t {
            TokenTree::Group(g) => scan(g.stream(), hit),
            _ => hit(&t),
        })
    }
    scan(ty.to_token_stream(), hit)
}

/// The return annotation of the closure a synchronous body runs in, or `None` where the body
/// stays in place:
/// - a parameter that may be large to move into the closure (judged by its spelling: see
///   [`cheap_to_move`]): the copy, and a closure then too large to inline, would cost the
///   untraced call more than the closure saves;
/// - a return type that mentions `impl Trait`, or a macro that may expand to one (no closure
///   can be annotated with it, and without the annotation the body would lose the expected
///   type that its closures' parameters and its coercions are inferred from);
/// - a function marked `#[track_caller]` (a closure would hide the caller's location).
fn closure_return(f: &TracedFn) -> Option<TokenStream> {
    let track_caller = f
        .outer_attrs
        .iter()
        .any(|a| a.path().is_ident("track_caller"));
    let cheap_parameters = f.sig.inputs.iter().all(|input| match input {
        FnArg::Receiver(r) => {
            r.reference.is_some() || (r.colon_token.is_some() && cheap_to_move(&r.ty))
        }
        FnArg::Typed(t) => cheap_to_move(&t.ty),
    });
    match &f.sig.output {
        _ if track_caller || !cheap_parameters => None,
        ReturnType::Default => Some(TokenStream::new()),
        ReturnType::Type(_, ty) if mentions_impl_or_macro(ty) => None,
        ReturnType::Type(_, ty) => Some(quote!(-> #ty)),
    }
}

/// Whether a value of type `ty` is a few words at most, whatever its parameters: references,
/// pointers, primitive scalars, and the owning pointers `Box`, `Rc`, `Arc`, `String` and `Vec`.
fn cheap_to_move(ty: &Type) -> bool {
    const SCALARS: [&str; 17] = [
        "u8", "u16", "u32", "u64", "u128", "usize", "i8", "i16", "i32", "i64", "i128", "isize",
        "f32", "f64", "bool", "char", "String",
    ];
    match ty {
        Type::Reference(_) | Type::Ptr(_) | Type::BareFn(_) => true,
        Type::Paren(t) => cheap_to_move(&t.elem),
        Type::Group(t) => cheap_to_move(&t.elem),
        Type::Path(t) if t.qself.is_none() => t.path.segments.last().is_some_and(|last| {
            let name = last.ident.to_string();
            match last.arguments {
                PathArguments::None => SCALARS.contains(&name.as_str()),
                PathArguments::AngleBracketed(_) => {
                    matches!(name.as_str(), "Box" | "Rc" | "Arc" | "Vec")
                }
                PathArguments::Parenthesized(_) => false,
            }
        }),
        _ => false,
    }
}

/// The whole expansion; with `instrument` false, only the checks (the function is returned
/// untouched).
pub(crate) fn expand(args: TracedArgs, f: &TracedFn, instrument: bool) -> syn::Result<TokenStream> {
    let sig = &f.sig;
    if let Some(constness) = &sig.constness {
        return Err(Error::new(
            constness.span(),
            "#[traced] cannot instrument a `const fn` (tracing reads the clock at run time)",
        ));
    }
    let specs: &[ArgSpec] = args.args.as_ref().map_or(&[], |(_, s)| s.as_slice());
    check_args(sig, specs)?;
    if !instrument {
        return Ok(f.untouched());
    }

    let krate = match &args.krate {
        Some(path) => path.to_token_stream(),
        None => quote!(::fxtrace),
    };
    let support = quote!(#krate::__private);
    let category = match &args.category {
        Some(lit) => lit.to_token_stream(),
        None => quote!(::core::module_path!()),
    };
    // The name: given, or the function's path as the compiler prints it (`type_name` of a
    // type local to the function, a constant: a method's name includes its `impl` type).
    let name = match &args.name {
        Some(lit) => lit.to_token_stream(),
        None => quote!(#support::fn_path(::core::any::type_name::<__FxtraceSite>())),
    };
    // The argument names, in the guard's order (their static's address keys their indices
    // in the thread's memo).
    let arg_names = (!specs.is_empty()).then(|| {
        let labels = specs.iter().map(|s| s.ident.to_string());
        let n = specs.len();
        quote! {
            #[inline(always)]
            fn arg_names() -> &'static [&'static str] {
                static __FXTRACE_ARG_NAMES: [&str; #n] = [#(#labels),*];
                &__FXTRACE_ARG_NAMES
            }
        }
    });
    // The call site as a zero-sized type: the guard carries no pointer to it, so the
    // disabled path only stores "inert".
    // The category written once. `category()` reads one immutable static, a load the
    // compiler folds into the string's address (the call site's static, which holds an atomic,
    // would be read at run time), so the begin and the end of a call key the memo by the same
    // address wherever each is compiled.
    let site = quote! {
        struct __FxtraceSite;
        const __FXTRACE_CATEGORY_TEXT: &str = #category;
        static __FXTRACE_CATEGORY: &str = __FXTRACE_CATEGORY_TEXT;
        impl #support::Site for __FxtraceSite {
            #[inline(always)]
            fn call_site() -> &'static #support::CallSite {
                static __FXTRACE_SITE: #support::CallSite =
                    #support::CallSite::new(__FXTRACE_CATEGORY_TEXT);
                &__FXTRACE_SITE
            }
            #[inline(always)]
            fn name() -> &'static str {
                #name
            }
            #[inline(always)]
            fn category() -> &'static str {
                __FXTRACE_CATEGORY
            }
            #arg_names
        }
    };
    let arg_inputs: Vec<TokenStream> = specs.iter().map(|s| arg_input(&support, s)).collect();
    let n = specs.len();
    let n_lit = proc_macro2::Literal::usize_unsuffixed(n);

    let TracedFn {
        outer_attrs,
        inner_attrs,
        vis,
        block,
        ..
    } = f;

    let stmts = &block.stmts;
    let body = if sig.asyncness.is_some() {
        let ret = match &sig.output {
            ReturnType::Default => quote!(()),
            ReturnType::Type(_, ty) if mentions_impl(ty) => quote!(_),
            ReturnType::Type(_, ty) => ty.to_token_stream(),
        };
        let span = if n == 0 {
            quote!(#support::AsyncSpan::begin::<__FxtraceSite>(&[]))
        } else {
            quote!(
                if #support::maybe_on() {
                    #support::AsyncSpan::begin::<__FxtraceSite>(&[#(#arg_inputs),*])
                } else {
                    #support::AsyncSpan::OFF
                }
            )
        };
        quote! {
            #site
            let __fxtrace_span = #span;
            #support::instrument::<_, #ret>(__fxtrace_span, async move #block).await
        }
    } else if let Some(ret) = closure_return(f) {
        // The body as a closure called once, told whether a trace may be running: run in
        // place when none is (the guard is then known inert: the untraced call keeps the
        // plain function's code, without the traced path's guard or frame), and from an
        // out-of-line function otherwise. `move` (and the `FnOnce` bound): a body that returns
        // a reborrow of a parameter (`&mut self` -> `&mut T`) still compiles. The guard is
        // the closure's first local, so parameters still drop after the span's end; its
        // begin is inlined into that out-of-line function (`INLINE`; the end is a call). The
        // body's braces are the expansion's (its own would draw `unused_braces` on the
        // user's code).
        let guard = guard(&support, &n_lit, &arg_inputs, quote!(__fxtrace_on), true);
        quote! {
            #site
            #support::Span::<__FxtraceSite, #n_lit>::call(move |__fxtrace_on: bool| #ret {
                let __fxtrace_guard = #guard;
                { #(#stmts)* }
            })
        }
    } else {
        let guard = guard(
            &support,
            &n_lit,
            &arg_inputs,
            quote!(#support::maybe_on()),
            false,
        );
        quote! {
            #site
            let __fxtrace_guard = #guard;
            { #(#stmts)* }
        }
    };
    Ok(quote! {
        #(#outer_attrs)*
        #vis #sig {
            #(#inner_attrs)*
            #body
        }
    })
}

/// A synchronous call's guard: entered when `on` (a `bool` expression: whether a trace may
/// be running), inert otherwise; `inline`: its begin and end are inlined (the guard of a body
/// run out of line by `Span::call`).
fn guard(
    support: &TokenStream,
    n: &proc_macro2::Literal,
    arg_inputs: &[TokenStream],
    on: TokenStream,
    inline: bool,
) -> TokenStream {
    let span = quote!(#support::Span::<__FxtraceSite, #n, #inline>);
    let entered = if arg_inputs.is_empty() {
        quote!(#span::enter())
    } else {
        quote!(#span::enter_args([#(#arg_inputs),*]))
    };
    quote!(
        if #on {
            #entered
        } else {
            #span::OFF
        }
    )
}

/// One `ArgIn` expression, spanned on the parameter named in `args(..)` so that a type
/// error ("cannot be recorded as a trace argument", "doesn't implement `Debug`") points at it.
fn arg_input(support: &TokenStream, spec: &ArgSpec) -> TokenStream {
    let ident = &spec.ident;
    let label = ident.to_string();
    let value = quote_spanned!(ident.span()=> #ident);
    match spec.kind {
        ArgKind::Value => quote_spanned! {ident.span()=>
            #support::ArgIn::value(#label, #support::TraceArg::trace_arg(&#value))
        },
        ArgKind::Debug => quote_spanned! {ident.span()=>
            #support::ArgIn::debug(#label, &#value)
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use quote::quote;

    fn expand_str(attr: TokenStream, item: TokenStream, instrument: bool) -> syn::Result<String> {
        let f = parse_item(item)?;
        let args: TracedArgs = syn::parse2(attr)?;
        expand(args, &f, instrument).map(|t| t.to_string())
    }

    fn error(attr: TokenStream, item: TokenStream) -> String {
        match expand_str(attr, item, true) {
            Ok(out) => panic!("expected an error, got {out}"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn each_duplicate_option_is_an_error() {
        let item = quote!(
            fn f(x: u32) {}
        );
        for (attr, key) in [
            (quote!(category = "a", category = "b"), "category"),
            (quote!(name = "a", name = "b"), "name"),
            (quote!(args(x), args(x)), "args"),
            (quote!(crate = fxtrace, crate = fxtrace), "crate"),
        ] {
            assert_eq!(
                error(attr, item.clone()),
                format!("duplicate `{key}` option")
            );
        }
        // Different options together are fine, in any order (the `tracing-attributes` trap).
        let ok = expand_str(
            quote!(args(x), name = "n", crate = fxtrace, category = "c"),
            item,
            true,
        );
        assert!(ok.is_ok());
    }

    #[test]
    fn argument_checks() {
        let item = quote!(
            fn f((a, b): (u32, u32), S { c, .. }: S, mut d: u32, &e: &u32) {}
        );
        assert!(expand_str(quote!(args(a, b, c, d, e)), item.clone(), true).is_ok());
        assert_eq!(
            error(quote!(args(z)), item.clone()),
            "`z` is not a parameter of `f`"
        );
        assert_eq!(
            error(quote!(args(a, a)), item),
            "`a` is listed twice in `args(..)`"
        );
        let method = quote!(
            fn m(&self) {}
        );
        assert!(expand_str(quote!(args(self: debug)), method.clone(), true).is_ok());
        assert!(error(quote!(args(self: fmt)), method).starts_with("unknown argument kind `fmt`"));
    }

    #[test]
    fn sync_expansion_runs_the_body_as_a_closure_with_a_zero_sized_site() {
        let out = expand_str(
            quote!(),
            quote!(
                fn f() -> u32 {
                    1
                }
            ),
            true,
        )
        .unwrap();
        assert!(out.contains("struct __FxtraceSite"), "{out}");
        assert!(
            out.contains(
                ":: fxtrace :: __private :: Span :: < __FxtraceSite , 0 > :: call (move | __fxtrace_on : bool | -> u32"
            ),
            "{out}"
        );
        assert!(
            out.contains(":: core :: module_path ! ()"),
            "default category"
        );
        assert!(
            out.contains("type_name :: < __FxtraceSite >"),
            "default name"
        );
    }

    #[test]
    fn sync_expansion_keeps_the_guard_in_place_where_a_closure_does_not_fit() {
        // In the function itself: the begin and the end out of line (`INLINE` false).
        let guard = ":: fxtrace :: __private :: Span :: < __FxtraceSite , 0 , false > :: enter ()";
        for item in [
            quote!(
                fn opaque() -> impl Fn(&str) -> usize {
                    |s| s.len()
                }
            ),
            quote!(
                fn nested() -> Result<Box<dyn Iterator<Item = impl Debug>>, E> {
                    Ok(Box::new(std::iter::once(1)))
                }
            ),
            quote!(
                fn made() -> opaque!() {
                    0..3
                }
            ),
            quote!(
                fn never() -> ! {
                    loop {}
                }
            ),
            quote!(
                #[track_caller]
                fn located() {}
            ),
            quote!(
                fn large(pad: [u64; 64]) {}
            ),
            quote!(
                fn by_value(self) {}
            ),
            quote!(
                fn pair((a, b): (u32, u32)) {}
            ),
            quote!(
                fn generic<T>(t: T) {}
            ),
        ] {
            let out = expand_str(quote!(), item, true).unwrap();
            assert!(
                out.contains(&format!(
                    "if :: fxtrace :: __private :: maybe_on () {{ {guard}"
                )),
                "{out}"
            );
            assert!(!out.contains(":: call ("), "{out}");
        }
        // Parameters cheap to move take the closure.
        let cheap = quote!(
            fn f(
                &mut self,
                s: &str,
                v: Vec<u8>,
                b: Box<dyn Fn()>,
                n: u64,
                p: *const u8,
                o: String,
            ) {
            }
        );
        let out = expand_str(quote!(), cheap, true).unwrap();
        assert!(
            out.contains(":: call (move | __fxtrace_on : bool |"),
            "{out}"
        );
        let with_args = quote!(
            fn f(a: u32) {}
        );
        let out = expand_str(quote!(args(a)), with_args, true).unwrap();
        assert!(
            out.contains(
                "call (move | __fxtrace_on : bool | { let __fxtrace_guard = if __fxtrace_on { \
                 :: fxtrace :: __private :: Span :: < __FxtraceSite , 1 , true > :: enter_args"
            ),
            "arguments, in a closure, the begin inlined there: {out}"
        );
    }

    #[test]
    fn async_expansion_pins_the_return_type() {
        let out = expand_str(
            quote!(crate = my::fx, name = "n"),
            quote!(
                async fn f() -> Result<u32, E> {
                    Ok(1)
                }
            ),
            true,
        )
        .unwrap();
        assert!(
            out.contains("my :: fx :: __private :: instrument :: < _ , Result < u32 , E > >"),
            "{out}"
        );
        assert!(out.contains("AsyncSpan :: begin :: < __FxtraceSite >"));
        assert!(!out.contains("type_name"), "an explicit name");
        let out = expand_str(
            quote!(),
            quote!(
                async fn g() -> impl Debug {
                    1
                }
            ),
            true,
        )
        .unwrap();
        assert!(out.contains("instrument :: < _ , _ >"), "{out}");
    }

    #[test]
    fn compiled_out_returns_the_function_untouched_after_the_checks() {
        let item = quote!(
            #[inline]
            pub fn f(x: u32) -> u32 {
                #![allow(unused)]
                x
            }
        );
        // The input's own tokens, not the macro's rendering of them (`untouched()`): a
        // function it dropped or reordered something of would match that too.
        let out = expand_str(quote!(args(x), category = "c"), item.clone(), false).unwrap();
        assert_eq!(out, item.to_string());
        assert!(!out.contains("fxtrace"));
        // The checks still run.
        let bad = expand_str(quote!(args(y)), item, false);
        assert!(bad.is_err());
    }

    #[test]
    fn items_that_are_not_functions_with_bodies() {
        assert!(parse_item(quote!(
            struct S;
        ))
        .is_err());
        let e = parse_item(quote!(
            fn f(&self);
        ))
        .err()
        .unwrap();
        assert!(e.to_string().starts_with("#[traced] needs a function body"));
        assert_eq!(
            error(
                quote!(),
                quote!(
                    const fn f() {}
                )
            ),
            "#[traced] cannot instrument a `const fn` (tracing reads the clock at run time)"
        );
    }
}
