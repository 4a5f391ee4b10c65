// SPDX-License-Identifier: Apache-2.0
//! Tokens of Filebench's workload model language.
//!
//! The language is line oriented: a statement ends at a newline, except inside
//! the braces of `define process` / `thread` blocks, where flowops follow one
//! another line by line. `#` starts a comment (outside quotes), a backslash at
//! the end of a line continues the statement on the next line, and so does a
//! trailing comma (`define fileset name=a,⏎ path=…`), as in Filebench.

use crate::error::ParseError;

/// Marks an escaped `\$` inside a quoted string, so that interpolation leaves
/// it alone and prints a literal `$`.
pub const ESCAPED_DOLLAR: char = '\u{1}';

/// One token with the line it starts on.
#[derive(Debug, Clone, PartialEq)]
pub struct Token {
    pub kind: Tok,
    pub line: usize,
}

/// Token kinds.
#[derive(Debug, Clone, PartialEq)]
pub enum Tok {
    /// A bare word: keyword, name, number, `$var`, path.
    Word(String),
    /// A double-quoted string (escapes resolved).
    Str(String),
    Eq,
    Comma,
    LBrace,
    RBrace,
    LParen,
    RParen,
    Semi,
    Newline,
}

impl Tok {
    /// How the token reads in an error message.
    pub fn describe(&self) -> String {
        match self {
            Tok::Word(w) => format!("'{w}'"),
            Tok::Str(s) => format!("string \"{s}\""),
            Tok::Eq => "'='".into(),
            Tok::Comma => "','".into(),
            Tok::LBrace => "'{'".into(),
            Tok::RBrace => "'}'".into(),
            Tok::LParen => "'('".into(),
            Tok::RParen => "')'".into(),
            Tok::Semi => "';'".into(),
            Tok::Newline => "end of line".into(),
        }
    }
}

fn is_word_char(c: char) -> bool {
    !c.is_whitespace() && !matches!(c, '=' | ',' | '{' | '}' | '(' | ')' | ';' | '"' | '#')
}

/// Splits `src` into tokens. `file` only names the source in errors.
pub fn tokenize(file: &str, src: &str) -> Result<Vec<Token>, ParseError> {
    let chars: Vec<char> = src.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    let mut line = 1;
    while i < chars.len() {
        let c = chars[i];
        match c {
            '\n' => {
                // After a trailing comma the statement goes on.
                if out.last().map(|t: &Token| &t.kind) != Some(&Tok::Comma) {
                    out.push(Token {
                        kind: Tok::Newline,
                        line,
                    });
                }
                line += 1;
                i += 1;
            }
            '\\' if chars.get(i + 1) == Some(&'\n') => {
                line += 1;
                i += 2;
            }
            '\\' if chars.get(i + 1) == Some(&'\r') && chars.get(i + 2) == Some(&'\n') => {
                line += 1;
                i += 3;
            }
            '#' => {
                while i < chars.len() && chars[i] != '\n' {
                    i += 1;
                }
            }
            c if c.is_whitespace() => i += 1,
            '"' => {
                let start = line;
                let mut s = String::new();
                i += 1;
                loop {
                    match chars.get(i) {
                        None => {
                            return Err(ParseError::new(file, start, "unterminated string"));
                        }
                        Some('"') => {
                            i += 1;
                            break;
                        }
                        Some('\\') => {
                            match chars.get(i + 1) {
                                Some('$') => s.push(ESCAPED_DOLLAR),
                                Some('n') => s.push('\n'),
                                Some('t') => s.push('\t'),
                                Some('\n') => line += 1,
                                Some(&other) => s.push(other),
                                None => {
                                    return Err(ParseError::new(
                                        file,
                                        start,
                                        "unterminated string",
                                    ));
                                }
                            }
                            i += 2;
                        }
                        Some(&ch) => {
                            if ch == '\n' {
                                line += 1;
                            }
                            s.push(ch);
                            i += 1;
                        }
                    }
                }
                out.push(Token {
                    kind: Tok::Str(s),
                    line: start,
                });
            }
            '=' | ',' | '{' | '}' | '(' | ')' | ';' => {
                let kind = match c {
                    '=' => Tok::Eq,
                    ',' => Tok::Comma,
                    '{' => Tok::LBrace,
                    '}' => Tok::RBrace,
                    '(' => Tok::LParen,
                    ')' => Tok::RParen,
                    _ => Tok::Semi,
                };
                out.push(Token { kind, line });
                i += 1;
            }
            _ => {
                let mut w = String::new();
                while i < chars.len() && is_word_char(chars[i]) {
                    if chars[i] == '\\' && matches!(chars.get(i + 1), Some('\n') | Some('\r')) {
                        break;
                    }
                    w.push(chars[i]);
                    i += 1;
                }
                out.push(Token {
                    kind: Tok::Word(w),
                    line,
                });
            }
        }
    }
    out.push(Token {
        kind: Tok::Newline,
        line,
    });
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds(src: &str) -> Vec<Tok> {
        tokenize("t.f", src)
            .unwrap()
            .into_iter()
            .map(|t| t.kind)
            .collect()
    }

    #[test]
    fn words_punctuation_comments() {
        assert_eq!(
            kinds("set $a=1k # comment\n"),
            vec![
                Tok::Word("set".into()),
                Tok::Word("$a".into()),
                Tok::Eq,
                Tok::Word("1k".into()),
                Tok::Newline,
                Tok::Newline
            ]
        );
    }

    #[test]
    fn continuation_joins_lines_and_counts_them() {
        let toks = tokenize("t.f", "a \\\n b\nc").unwrap();
        assert_eq!(toks[1].kind, Tok::Word("b".into()));
        assert_eq!(toks[1].line, 2);
        assert_eq!(toks[3].line, 3);
    }

    #[test]
    fn a_trailing_comma_continues_the_statement() {
        let t = tokenize("f", "a x=1,\n  # note\n  y=2\nb").unwrap();
        let k: Vec<Tok> = t.iter().map(|t| t.kind.clone()).collect();
        assert_eq!(
            k,
            vec![
                Tok::Word("a".into()),
                Tok::Word("x".into()),
                Tok::Eq,
                Tok::Word("1".into()),
                Tok::Comma,
                Tok::Word("y".into()),
                Tok::Eq,
                Tok::Word("2".into()),
                Tok::Newline,
                Tok::Word("b".into()),
                Tok::Newline,
            ]
        );
        assert_eq!(t[5].line, 3, "y is on line 3");
    }

    #[test]
    fn strings_keep_escaped_dollar() {
        assert_eq!(
            kinds("echo \"a \\$b\""),
            vec![
                Tok::Word("echo".into()),
                Tok::Str(format!("a {ESCAPED_DOLLAR}b")),
                Tok::Newline
            ]
        );
        let err = tokenize("t.f", "\n\necho \"abc").unwrap_err();
        assert_eq!(err.to_string(), "t.f:3: unterminated string");
    }
}
