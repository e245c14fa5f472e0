//! Parsing `#[traced(...)]` options into [`TracedArgs`], with a spanned error for each
//! mistake: unknown option, duplicate option, bad literal, unknown argument kind.

use proc_macro2::Ident;
use syn::ext::IdentExt;
use syn::parse::{Parse, ParseStream};
use syn::punctuated::Punctuated;
use syn::{Error, Expr, ExprLit, Lit, LitStr, Path, Token};

/// Longest category or name accepted (FXT strings are at most 32000 bytes).
const MAX_STRING_LEN: usize = 32000;

/// The options of one `#[traced(...)]`.
#[derive(Default)]
pub(crate) struct TracedArgs {
    /// `category = "..."`.
    pub(crate) category: Option<LitStr>,
    /// `name = "..."`.
    pub(crate) name: Option<LitStr>,
    /// `args(...)`: the `args` keyword (for spans) and the listed parameters.
    pub(crate) args: Option<(Ident, Vec<ArgSpec>)>,
    /// `crate = path`: where the runtime support lives (default `::fxtrace`).
    pub(crate) krate: Option<Path>,
}

/// How a listed parameter is recorded.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum ArgKind {
    /// As a typed FXT argument (integer, float, bool, string, pointer), through the
    /// `TraceArg` trait: any other type is a compile error naming the parameter.
    Value,
    /// With its `Debug` format (`args(x: debug)`).
    Debug,
}

/// One parameter named in `args(...)`.
pub(crate) struct ArgSpec {
    /// The parameter (`self` included, as an identifier with the token's span).
    pub(crate) ident: Ident,
    /// How it is recorded.
    pub(crate) kind: ArgKind,
}

impl Parse for ArgSpec {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        // `Ident::parse_any` also accepts `self`.
        let ident = input.call(Ident::parse_any)?;
        let kind = if input.peek(Token![:]) {
            input.parse::<Token![:]>()?;
            let kind = input.call(Ident::parse_any)?;
            if kind == "debug" {
                ArgKind::Debug
            } else {
                return Err(Error::new(
                    kind.span(),
                    format!(
                        "unknown argument kind `{kind}`: write `args({ident})` for integers, \
                         floats, bools, strings and pointers, or `args({ident}: debug)` to \
                         record the `Debug` format"
                    ),
                ));
            }
        } else {
            ArgKind::Value
        };
        Ok(ArgSpec { ident, kind })
    }
}

fn duplicate(key: &Ident) -> Error {
    Error::new(key.span(), format!("duplicate `{key}` option"))
}

/// `= "text"`: a non-empty string literal of at most [`MAX_STRING_LEN`] bytes.
fn string_value(input: ParseStream<'_>, key: &Ident) -> syn::Result<LitStr> {
    input.parse::<Token![=]>()?;
    let expr: Expr = input.parse()?;
    let lit = match expr {
        Expr::Lit(ExprLit {
            lit: Lit::Str(lit), ..
        }) => lit,
        other => {
            return Err(Error::new_spanned(
                other,
                format!(
                    "`{key}` expects a string literal, as in `{key} = \"{}\"`",
                    if key == "name" { "query" } else { "db" }
                ),
            ))
        }
    };
    let value = lit.value();
    if value.is_empty() {
        return Err(Error::new(lit.span(), format!("`{key}` must not be empty")));
    }
    if value.len() > MAX_STRING_LEN {
        return Err(Error::new(
            lit.span(),
            format!("`{key}` is longer than {MAX_STRING_LEN} bytes"),
        ));
    }
    Ok(lit)
}

impl Parse for TracedArgs {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        let mut out = TracedArgs::default();
        while !input.is_empty() {
            let key = if input.peek(Token![crate]) {
                let token = input.parse::<Token![crate]>()?;
                Ident::new("crate", token.span)
            } else {
                input.call(Ident::parse_any)?
            };
            match key.to_string().as_str() {
                "category" => {
                    if out.category.is_some() {
                        return Err(duplicate(&key));
                    }
                    out.category = Some(string_value(input, &key)?);
                }
                "name" => {
                    if out.name.is_some() {
                        return Err(duplicate(&key));
                    }
                    out.name = Some(string_value(input, &key)?);
                }
                "args" => {
                    if out.args.is_some() {
                        return Err(duplicate(&key));
                    }
                    let content;
                    syn::parenthesized!(content in input);
                    let list = Punctuated::<ArgSpec, Token![,]>::parse_terminated(&content)?;
                    if list.is_empty() {
                        return Err(Error::new(
                            key.span(),
                            "`args()` names no parameter: list parameters, as in `args(id, len)`, \
                             or remove it",
                        ));
                    }
                    out.args = Some((key, list.into_iter().collect()));
                }
                "crate" => {
                    if out.krate.is_some() {
                        return Err(duplicate(&key));
                    }
                    input.parse::<Token![=]>()?;
                    out.krate = Some(input.call(Path::parse_mod_style)?);
                }
                other => {
                    return Err(Error::new(
                        key.span(),
                        format!(
                            "unknown option `{other}`: expected `category = \"..\"`, \
                             `name = \"..\"`, `args(..)` or `crate = path`"
                        ),
                    ))
                }
            }
            if input.is_empty() {
                break;
            }
            input.parse::<Token![,]>()?;
        }
        Ok(out)
    }
}
