//! The tokens of a POSIX `sh` command line, as far as [`super`] needs them: words (quotes
//! removed, with what the shell would expand in them noted, and the bodies of their command
//! substitutions kept), control operators, and redirections. Here-document bodies are
//! skipped. Anything this lexer cannot read (an unterminated quote or substitution) is an
//! error: the caller then keys nothing of the command and says so.

/// A word as the shell would see it before expansion.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct Word {
    /// The text with quotes and backslashes removed (expansions left out).
    pub text: String,
    /// The source text, quotes included (`PATH="$PWD/bin:$PATH"`).
    pub raw: String,
    /// Holds a parameter, arithmetic or command expansion, or a leading `~`: its value is
    /// known only when the shell runs.
    pub dynamic: bool,
    /// Holds an unquoted `*`, `?` or `[`: a pathname pattern.
    pub glob: bool,
    /// The bodies of the command substitutions in it (`$(…)`, `` `…` ``): commands that run.
    pub subs: Vec<String>,
}

/// One token.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Tok {
    /// A word.
    Word(Word),
    /// `;`, a newline, `&`, `&&`, `||` or `|`: ends a simple command.
    Sep,
    /// `(`.
    Open,
    /// `)`.
    Close,
    /// `;;` (ends a `case` branch).
    CaseEnd,
    /// A redirection operator (`>`, `2>>`, `<&`, `&>`…): the next word is its target.
    Redirect,
}

/// The command line could not be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LexError {
    /// A quote, substitution or brace never closed.
    #[error("an unterminated {0}")]
    Unterminated(&'static str),
}

/// The tokens of `src`, and whether a here-document's body holds a command substitution
/// (its commands run, and are not read).
pub(super) fn lex(src: &str) -> Result<(Vec<Tok>, bool), LexError> {
    let mut l = Lexer { s: src.chars().collect(), i: 0, heredocs: Vec::new(), heredoc_subs: false };
    let mut out = Vec::new();
    while let Some(t) = l.next()? {
        out.push(t);
    }
    Ok((out, l.heredoc_subs))
}

struct Lexer {
    s: Vec<char>,
    i: usize,
    /// Here-documents whose body starts after the next newline: (delimiter, expands).
    heredocs: Vec<(String, bool)>,
    heredoc_subs: bool,
}

impl Lexer {
    fn peek(&self) -> Option<char> {
        self.s.get(self.i).copied()
    }

    fn peek_at(&self, n: usize) -> Option<char> {
        self.s.get(self.i + n).copied()
    }

    fn next(&mut self) -> Result<Option<Tok>, LexError> {
        loop {
            match self.peek() {
                None => return Ok(None),
                Some(' ' | '\t' | '\r') => self.i += 1,
                Some('\\') if self.peek_at(1) == Some('\n') => self.i += 2,
                Some('#') => {
                    while self.peek().is_some_and(|c| c != '\n') {
                        self.i += 1;
                    }
                }
                Some('\n') => {
                    self.i += 1;
                    self.skip_heredocs();
                    return Ok(Some(Tok::Sep));
                }
                Some(c) if ";&|()<>".contains(c) => return self.operator(c).map(Some),
                Some(c) if c.is_ascii_digit() && self.io_number() => {
                    while self.peek().is_some_and(|c| c.is_ascii_digit()) {
                        self.i += 1;
                    }
                }
                Some(_) => return self.word().map(|w| Some(Tok::Word(w))),
            }
        }
    }

    /// Whether digits here are a redirection's file descriptor (`2>`).
    fn io_number(&self) -> bool {
        let mut j = self.i;
        while self.s.get(j).is_some_and(char::is_ascii_digit) {
            j += 1;
        }
        matches!(self.s.get(j), Some('<' | '>'))
    }

    fn operator(&mut self, c: char) -> Result<Tok, LexError> {
        let two = self.peek_at(1);
        self.i += 1;
        Ok(match (c, two) {
            (';', Some(';')) => {
                self.i += 1;
                Tok::CaseEnd
            }
            ('&', Some('&')) | ('|', Some('|' | '&')) => {
                self.i += 1;
                Tok::Sep
            }
            ('&', Some('>')) => {
                self.i += 1;
                if self.peek() == Some('>') {
                    self.i += 1;
                }
                Tok::Redirect
            }
            (';' | '&' | '|', _) => Tok::Sep,
            ('(', _) => Tok::Open,
            (')', _) => Tok::Close,
            ('<', Some('<')) => {
                self.i += 1;
                if self.peek() == Some('<') {
                    // A here-string: the next word is its text.
                    self.i += 1;
                    return Ok(Tok::Redirect);
                }
                if self.peek() == Some('-') {
                    self.i += 1;
                }
                self.heredoc()?;
                return self.next().map(|t| t.unwrap_or(Tok::Sep));
            }
            (_, _) => {
                // `>`, `>>`, `<`, `<&`, `>&`, `<>`, `>|`.
                if matches!(self.peek(), Some('>' | '&' | '|')) && !(c == '<' && two == Some('|')) {
                    self.i += 1;
                }
                Tok::Redirect
            }
        })
    }

    /// Reads a here-document's delimiter; its body is skipped after the next newline.
    fn heredoc(&mut self) -> Result<(), LexError> {
        while matches!(self.peek(), Some(' ' | '\t')) {
            self.i += 1;
        }
        let w = self.word()?;
        let quoted = w.raw.contains(['\'', '"', '\\']);
        self.heredocs.push((w.text, !quoted));
        Ok(())
    }

    fn skip_heredocs(&mut self) {
        for (delim, expands) in std::mem::take(&mut self.heredocs) {
            loop {
                let start = self.i;
                while self.peek().is_some_and(|c| c != '\n') {
                    self.i += 1;
                }
                let line: String = self.s[start..self.i].iter().collect();
                if self.peek().is_some() {
                    self.i += 1;
                }
                if line.trim_start_matches('\t') == delim {
                    break;
                }
                if expands && (line.contains("$(") || line.contains('`')) {
                    self.heredoc_subs = true;
                }
                if self.peek().is_none() {
                    break;
                }
            }
        }
    }

    fn word(&mut self) -> Result<Word, LexError> {
        let start = self.i;
        let mut w = Word::default();
        while let Some(c) = self.peek() {
            match c {
                ' ' | '\t' | '\r' | '\n' | ';' | '&' | '|' | '(' | ')' | '<' | '>' => break,
                '\\' => {
                    self.i += 1;
                    match self.peek() {
                        Some('\n') => self.i += 1,
                        Some(e) => {
                            w.text.push(e);
                            self.i += 1;
                        }
                        None => {}
                    }
                }
                '\'' => {
                    self.i += 1;
                    loop {
                        match self.peek() {
                            None => return Err(LexError::Unterminated("single quote")),
                            Some('\'') => break,
                            Some(q) => w.text.push(q),
                        }
                        self.i += 1;
                    }
                    self.i += 1;
                }
                '"' => self.double_quoted(&mut w)?,
                '$' => self.dollar(&mut w)?,
                '`' => self.backquoted(&mut w)?,
                '*' | '?' | '[' => {
                    w.glob = true;
                    w.text.push(c);
                    self.i += 1;
                }
                '~' if self.i == start => {
                    w.dynamic = true;
                    w.text.push(c);
                    self.i += 1;
                }
                _ => {
                    w.text.push(c);
                    self.i += 1;
                }
            }
        }
        w.raw = self.s[start..self.i].iter().collect();
        Ok(w)
    }

    fn double_quoted(&mut self, w: &mut Word) -> Result<(), LexError> {
        self.i += 1;
        loop {
            match self.peek() {
                None => return Err(LexError::Unterminated("double quote")),
                Some('"') => {
                    self.i += 1;
                    return Ok(());
                }
                Some('\\') => {
                    match self.peek_at(1) {
                        Some(e @ ('$' | '`' | '"' | '\\')) => w.text.push(e),
                        Some('\n') => {}
                        Some(e) => {
                            w.text.push('\\');
                            w.text.push(e);
                        }
                        None => return Err(LexError::Unterminated("double quote")),
                    }
                    self.i += 2;
                }
                Some('$') => self.dollar(w)?,
                Some('`') => self.backquoted(w)?,
                Some(c) => {
                    w.text.push(c);
                    self.i += 1;
                }
            }
        }
    }

    /// `$name`, `${…}`, `$((…))` or `$(…)` (its body kept): the word becomes dynamic.
    fn dollar(&mut self, w: &mut Word) -> Result<(), LexError> {
        self.i += 1;
        match self.peek() {
            Some('(') if self.peek_at(1) == Some('(') => {
                self.i += 2;
                self.balanced(2, "arithmetic expansion")?;
                w.dynamic = true;
            }
            Some('(') => {
                self.i += 1;
                let body = self.balanced(1, "command substitution")?;
                w.subs.push(body);
                w.dynamic = true;
            }
            Some('{') => {
                self.i += 1;
                let mut depth = 1;
                loop {
                    match self.peek() {
                        None => return Err(LexError::Unterminated("parameter expansion")),
                        Some('{') => depth += 1,
                        Some('}') => {
                            depth -= 1;
                            if depth == 0 {
                                self.i += 1;
                                break;
                            }
                        }
                        Some(_) => {}
                    }
                    self.i += 1;
                }
                w.dynamic = true;
            }
            Some(c) if c.is_ascii_alphabetic() || c == '_' => {
                while self.peek().is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') {
                    self.i += 1;
                }
                w.dynamic = true;
            }
            Some(c) if c.is_ascii_digit() || "@*#?$!-".contains(c) => {
                self.i += 1;
                w.dynamic = true;
            }
            _ => w.text.push('$'),
        }
        Ok(())
    }

    /// The text up to the `)` closing `depth` open parentheses (quotes respected); the
    /// closing parentheses are consumed, not returned.
    fn balanced(&mut self, mut depth: usize, what: &'static str) -> Result<String, LexError> {
        let start = self.i;
        loop {
            match self.peek() {
                None => return Err(LexError::Unterminated(what)),
                Some('\\') => self.i += 1,
                Some('\'') => {
                    self.i += 1;
                    while self.peek().is_some_and(|c| c != '\'') {
                        self.i += 1;
                    }
                }
                Some('"') => {
                    self.i += 1;
                    while let Some(c) = self.peek() {
                        if c == '\\' {
                            self.i += 1;
                        } else if c == '"' {
                            break;
                        }
                        self.i += 1;
                    }
                }
                Some('(') => depth += 1,
                Some(')') => {
                    depth -= 1;
                    if depth == 0 {
                        let body: String = self.s[start..self.i].iter().collect();
                        self.i += 1;
                        // `$((…))`: the body ends before the first of the two.
                        return Ok(body.strip_suffix(')').map(str::to_owned).unwrap_or(body));
                    }
                }
                Some(_) => {}
            }
            self.i += 1;
        }
    }

    fn backquoted(&mut self, w: &mut Word) -> Result<(), LexError> {
        self.i += 1;
        let mut body = String::new();
        loop {
            match self.peek() {
                None => return Err(LexError::Unterminated("backquote")),
                Some('`') => {
                    self.i += 1;
                    break;
                }
                Some('\\') if matches!(self.peek_at(1), Some('`' | '\\' | '$')) => {
                    body.extend(self.peek_at(1));
                    self.i += 2;
                }
                Some(c) => {
                    body.push(c);
                    self.i += 1;
                }
            }
        }
        w.subs.push(body);
        w.dynamic = true;
        Ok(())
    }
}
