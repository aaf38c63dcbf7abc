//! The lexer and `use`-path parser of the layering test (`tests/runtime/layers.rs`): turns a
//! source file into the crate paths it names, with their lines. Kept apart so each file stays readable.

// Lexing

#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Tok {
    Ident(String),
    /// `::`
    Path,
    Punct(char),
}

/// Tokens of `src` with their line numbers; comments and the contents of literals are dropped.
pub(crate) fn lex(src: &str) -> Vec<(Tok, usize)> {
    let c: Vec<char> = src.chars().collect();
    let mut out = Vec::new();
    let (mut i, mut line) = (0, 1);
    // Skips a (possibly raw) string literal starting at the quote or the first `#` at `j`.
    let skip_string = |mut j: usize, raw: bool, line: &mut usize| -> usize {
        let mut hashes = 0;
        while raw && c.get(j) == Some(&'#') {
            hashes += 1;
            j += 1;
        }
        j += 1; // the opening quote
        while j < c.len() {
            match c[j] {
                '\n' => *line += 1,
                '\\' if !raw => j += 1,
                '"' if (0..hashes).all(|h| c.get(j + 1 + h) == Some(&'#')) => {
                    return j + 1 + hashes
                }
                _ => {}
            }
            j += 1;
        }
        j
    };
    while i < c.len() {
        let ch = c[i];
        let next = c.get(i + 1).copied();
        if ch == '\n' {
            line += 1;
            i += 1;
        } else if ch.is_whitespace() {
            i += 1;
        } else if ch == '/' && next == Some('/') {
            while i < c.len() && c[i] != '\n' {
                i += 1;
            }
        } else if ch == '/' && next == Some('*') {
            let mut depth = 0;
            while i < c.len() {
                if c[i] == '/' && c.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if c[i] == '*' && c.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    if c[i] == '\n' {
                        line += 1;
                    }
                    i += 1;
                }
            }
        } else if ch == '"' {
            i = skip_string(i, false, &mut line);
        } else if ch == '\'' {
            // A char literal ('a', '\n', '\u{..}') or a lifetime ('a, 'static).
            if next == Some('\\') {
                i += 2;
                while i < c.len() && c[i] != '\'' {
                    i += 1;
                }
                i += 1;
            } else if c.get(i + 2) == Some(&'\'') {
                i += 3;
            } else {
                out.push((Tok::Punct('\''), line));
                i += 1;
            }
        } else if ch.is_alphanumeric() || ch == '_' {
            let start = i;
            while i < c.len() && (c[i].is_alphanumeric() || c[i] == '_') {
                i += 1;
            }
            let word: String = c[start..i].iter().collect();
            let quote_or_hash = matches!(c.get(i), Some('"') | Some('#'));
            if (word == "r" || word == "br") && quote_or_hash {
                i = skip_string(i, true, &mut line);
            } else if word == "b" && c.get(i) == Some(&'"') {
                i = skip_string(i, false, &mut line);
            } else if word == "b" && c.get(i) == Some(&'\'') {
                i += 1;
                while i < c.len() && c[i] != '\'' {
                    i += if c[i] == '\\' { 2 } else { 1 };
                }
                i += 1;
            } else {
                out.push((Tok::Ident(word), line));
            }
        } else if ch == ':' && next == Some(':') {
            out.push((Tok::Path, line));
            i += 2;
        } else {
            out.push((Tok::Punct(ch), line));
            i += 1;
        }
    }
    out
}

/// Drops every item marked `#[cfg(test)]` (up to its `;` or its closing brace).
pub(crate) fn drop_cfg_test(toks: Vec<(Tok, usize)>) -> Vec<(Tok, usize)> {
    let id = |s: &str| Tok::Ident(s.to_string());
    let marker = [
        Tok::Punct('#'),
        Tok::Punct('['),
        id("cfg"),
        Tok::Punct('('),
        id("test"),
        Tok::Punct(')'),
        Tok::Punct(']'),
    ];
    let mut out = Vec::new();
    let mut i = 0;
    while i < toks.len() {
        let is_marker = toks.len() - i >= marker.len()
            && toks[i..i + marker.len()]
                .iter()
                .zip(&marker)
                .all(|((t, _), m)| t == m);
        if !is_marker {
            out.push(toks[i].clone());
            i += 1;
            continue;
        }
        i += marker.len();
        let mut depth = 0i32;
        while i < toks.len() {
            match toks[i].0 {
                Tok::Punct('(' | '[' | '{') => depth += 1,
                Tok::Punct(')' | ']') => depth -= 1,
                Tok::Punct('}') => {
                    depth -= 1;
                    if depth == 0 {
                        i += 1;
                        break;
                    }
                }
                Tok::Punct(';') if depth == 0 => {
                    i += 1;
                    break;
                }
                _ => {}
            }
            i += 1;
        }
    }
    out
}

// ---------------------------------------------------------------------------------------------
// Paths

/// One path found in a file: the module it was written in (for `self`/`super`), its segments as
/// written, the name it binds (for `use` leaves) and its line.
#[derive(Clone, Debug)]
pub(crate) struct Found {
    pub(crate) module: Vec<String>,
    pub(crate) path: Vec<String>,
    pub(crate) binds: Option<String>,
    pub(crate) line: usize,
    pub(crate) in_use: bool,
    pub(crate) public_use: bool,
}

/// Parses one use tree at `toks[*i]`, pushing a leaf per imported name.
pub(crate) fn use_tree(
    toks: &[(Tok, usize)],
    i: &mut usize,
    prefix: Vec<String>,
    leaf: &mut dyn FnMut(Vec<String>, Option<String>, usize),
) {
    let mut path = prefix;
    let line = toks.get(*i).map_or(0, |t| t.1);
    loop {
        match toks.get(*i).map(|t| &t.0) {
            Some(Tok::Path) => *i += 1,
            Some(Tok::Ident(s)) if s == "as" => {
                *i += 1;
                let alias = match toks.get(*i).map(|t| &t.0) {
                    Some(Tok::Ident(a)) => a.clone(),
                    _ => String::new(),
                };
                *i += 1;
                leaf(path, Some(alias), line);
                return;
            }
            Some(Tok::Ident(s)) => {
                path.push(s.clone());
                *i += 1;
            }
            Some(Tok::Punct('*')) => {
                *i += 1;
                leaf(path, Some("*".into()), line);
                return;
            }
            Some(Tok::Punct('{')) => {
                *i += 1;
                loop {
                    match toks.get(*i).map(|t| &t.0) {
                        None => return,
                        Some(Tok::Punct('}')) => {
                            *i += 1;
                            return;
                        }
                        Some(Tok::Punct(',')) => *i += 1,
                        _ => use_tree(toks, i, path.clone(), leaf),
                    }
                }
            }
            _ => {
                let last = path.last().cloned();
                if last.as_deref() == Some("self") {
                    path.pop();
                    let name = path.last().cloned();
                    leaf(path, name, line);
                } else if !path.is_empty() {
                    leaf(path, last, line);
                }
                return;
            }
        }
    }
}

/// Every path of one file whose module path is `module`.
pub(crate) fn paths_of(src: &str, module: &[String]) -> Vec<Found> {
    let toks = drop_cfg_test(lex(src));
    let mut found = Vec::new();
    let mut inline: Vec<(String, i32)> = Vec::new();
    let mut depth = 0i32;
    let mut i = 0;
    let here = |inline: &Vec<(String, i32)>| -> Vec<String> {
        module
            .iter()
            .cloned()
            .chain(inline.iter().map(|(m, _)| m.clone()))
            .collect()
    };
    while i < toks.len() {
        let prev = if i > 0 { Some(&toks[i - 1].0) } else { None };
        match &toks[i].0 {
            Tok::Punct('{') => {
                depth += 1;
                i += 1;
            }
            Tok::Punct('}') => {
                if inline.last().is_some_and(|(_, d)| *d == depth) {
                    inline.pop();
                }
                depth -= 1;
                i += 1;
            }
            Tok::Ident(kw) if kw == "mod" => {
                if let (Some((Tok::Ident(name), _)), Some((Tok::Punct('{'), _))) =
                    (toks.get(i + 1), toks.get(i + 2))
                {
                    depth += 1;
                    inline.push((name.clone(), depth));
                    i += 3;
                } else {
                    i += 1;
                }
            }
            Tok::Ident(kw) if kw == "use" => {
                let public = matches!(prev, Some(Tok::Ident(p)) if p == "pub")
                    || matches!(prev, Some(Tok::Punct(')')));
                i += 1;
                let m = here(&inline);
                use_tree(&toks, &mut i, Vec::new(), &mut |path, binds, line| {
                    found.push(Found {
                        module: m.clone(),
                        path,
                        binds,
                        line,
                        in_use: true,
                        public_use: public,
                    })
                });
            }
            Tok::Ident(first)
                if prev != Some(&Tok::Path) && matches!(toks.get(i + 1), Some((Tok::Path, _))) =>
            {
                let line = toks[i].1;
                let mut path = vec![first.clone()];
                i += 1;
                while let (Some((Tok::Path, _)), Some((Tok::Ident(s), _))) =
                    (toks.get(i), toks.get(i + 1))
                {
                    path.push(s.clone());
                    i += 2;
                }
                found.push(Found {
                    module: here(&inline),
                    path,
                    binds: None,
                    line,
                    in_use: false,
                    public_use: false,
                });
            }
            _ => i += 1,
        }
    }
    found
}

// ---------------------------------------------------------------------------------------------
// The file graph
