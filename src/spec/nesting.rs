//! How much a view's query may nest. DataFusion plans, optimises, clones and
//! drops a query's expressions and set operations recursively, so a chain
//! of thousands of `OR`s or `UNION`s overflows the thread's stack, which
//! aborts the process (a crash, not an error). A query with more operators
//! than [`MAX_OPERATORS`] (or set operations than [`MAX_SET_OPERATIONS`]) is
//! refused before anything parses it, with an error that says how to write
//! it instead.
//!
//! The count is on the tokens, so it takes time linear in the text and no
//! stack: a query nests no deeper than it has operators.

use datafusion::sql::sqlparser::dialect::GenericDialect;
use datafusion::sql::sqlparser::keywords::Keyword;
use datafusion::sql::sqlparser::tokenizer::{Token, Tokenizer};

/// Most binary operators and set operations a view's query may have. A
/// chain this long plans on a 2 MiB thread (a Rust test's, or a Tokio
/// worker's) in a debug build.
pub const MAX_OPERATORS: usize = 1_000;

/// Most set operations (`UNION`, `INTERSECT`, `EXCEPT`) among them: each
/// costs the planner more stack than an operator of an expression does.
pub const MAX_SET_OPERATIONS: usize = 256;

/// What is wrong with `sql` if it has more than [`MAX_OPERATORS`]
/// operators (`None` also for SQL that does not tokenize: the parser then
/// says what is wrong with it).
pub(crate) fn too_many_operators(sql: &str) -> Option<String> {
    let tokens = Tokenizer::new(&GenericDialect {}, sql).tokenize().ok()?;
    let (mut sets, mut others) = (0usize, 0usize);
    for t in &tokens {
        match t {
            Token::Word(w) if w.quote_style.is_none() => match w.keyword {
                Keyword::UNION | Keyword::INTERSECT | Keyword::EXCEPT => sets += 1,
                Keyword::AND | Keyword::OR | Keyword::LIKE | Keyword::ILIKE => others += 1,
                _ => {}
            },
            Token::Plus
            | Token::Minus
            | Token::Mul
            | Token::Div
            | Token::Mod
            | Token::StringConcat
            | Token::Eq
            | Token::DoubleEq
            | Token::Neq
            | Token::Lt
            | Token::Gt
            | Token::LtEq
            | Token::GtEq
            | Token::Ampersand
            | Token::Pipe
            | Token::Caret => others += 1,
            _ => {}
        }
    }
    if sets > MAX_SET_OPERATIONS {
        return Some(format!(
            "the query has {sets} set operations (UNION, INTERSECT, EXCEPT); at most \
             {MAX_SET_OPERATIONS} are taken, as a longer chain nests too deep to plan: split \
             the view"
        ));
    }
    (sets + others > MAX_OPERATORS).then(|| {
        format!(
            "the query has {} operators ({sets} of them UNION, INTERSECT or EXCEPT); at most \
             {MAX_OPERATORS} are taken, as a longer chain nests too deep to plan: write a long \
             OR of equalities as `x IN (…)`, or split the view",
            sets + others
        )
    })
}
