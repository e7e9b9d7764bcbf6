//! Field errors: what validation returns. Each error names the field path, the offending value
//! and the reason, so the person who typed the YAML can find and fix it. No I/O here.

use std::fmt;

/// A path to a field, rendered the way users write it: `spec.requirements[2].values[0]`.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct Path(String);

impl Path {
    /// The root path (`spec`, `metadata`, ...).
    pub fn new(root: &str) -> Self {
        Path(root.to_string())
    }

    /// A child field: `spec` + `labels` = `spec.labels`.
    pub fn child(&self, name: &str) -> Self {
        if self.0.is_empty() {
            Path(name.to_string())
        } else {
            self.joined('.', name, "")
        }
    }

    /// A list element: `spec.taints` + 2 = `spec.taints[2]`.
    pub fn index(&self, i: usize) -> Self {
        // Validation builds a path for every list element it looks at, valid or not: writing
        // the digits with `itoa` costs a fraction of `format!`, which showed in the webhook's
        // profile.
        self.joined('[', itoa::Buffer::new().format(i), "]")
    }

    /// A map entry: `spec.labels` + `team` = `spec.labels[team]`.
    pub fn key(&self, key: &str) -> Self {
        self.joined('[', key, "]")
    }

    fn joined(&self, separator: char, part: &str, end: &str) -> Self {
        let mut out = String::with_capacity(self.0.len() + 1 + part.len() + end.len());
        out.push_str(&self.0);
        out.push(separator);
        out.push_str(part);
        out.push_str(end);
        Path(out)
    }

    /// The rendered path.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Path {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// What is wrong with a field.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum FieldErrorKind {
    /// The value is present but not allowed; carries the value as the user wrote it.
    Invalid(String),
    /// A required field is missing.
    Required,
    /// The field is not allowed at all (unknown, restricted or conflicting).
    Forbidden,
}

/// One problem with one field.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct FieldError {
    /// Where the problem is.
    pub path: Path,
    /// What kind of problem.
    pub kind: FieldErrorKind,
    /// Why, in words a user understands.
    pub reason: String,
}

impl FieldError {
    /// `path: invalid value <value>: <reason>`; text values are shown quoted, numbers as they are.
    pub fn invalid(path: Path, value: impl ShownValue, reason: impl Into<String>) -> Self {
        FieldError {
            path,
            kind: FieldErrorKind::Invalid(value.shown()),
            reason: reason.into(),
        }
    }

    /// `path: required value: <reason>`.
    pub fn required(path: Path, reason: impl Into<String>) -> Self {
        FieldError {
            path,
            kind: FieldErrorKind::Required,
            reason: reason.into(),
        }
    }

    /// `path: forbidden: <reason>`.
    pub fn forbidden(path: Path, reason: impl Into<String>) -> Self {
        FieldError {
            path,
            kind: FieldErrorKind::Forbidden,
            reason: reason.into(),
        }
    }
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            FieldErrorKind::Invalid(value) => {
                write!(f, "{}: invalid value {}: {}", self.path, value, self.reason)
            }
            FieldErrorKind::Required => write!(f, "{}: required value: {}", self.path, self.reason),
            FieldErrorKind::Forbidden => write!(f, "{}: forbidden: {}", self.path, self.reason),
        }
    }
}

/// How an offending value is shown: text JSON-quoted (so empty strings and spaces are visible),
/// numbers and booleans as they are, JSON fragments (`Raw`) verbatim.
pub trait ShownValue {
    /// The value as it appears in the message.
    fn shown(&self) -> String;
}

/// A value already rendered as JSON (a list of values, say), shown verbatim.
pub struct Raw(pub String);

impl ShownValue for Raw {
    fn shown(&self) -> String {
        self.0.clone()
    }
}

impl ShownValue for str {
    fn shown(&self) -> String {
        serde_json::to_string(self).expect("a string always serializes")
    }
}

impl ShownValue for String {
    fn shown(&self) -> String {
        self.as_str().shown()
    }
}

impl<T: ShownValue + ?Sized> ShownValue for &T {
    fn shown(&self) -> String {
        (**self).shown()
    }
}

macro_rules! shown_as_display {
    ($($t:ty),*) => {$(
        impl ShownValue for $t {
            fn shown(&self) -> String {
                self.to_string()
            }
        }
    )*};
}
shown_as_display!(i32, i64, u32, u64, usize, f64, bool);

/// Every problem found in one object, sorted by path.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FieldErrors(Vec<FieldError>);

impl FieldErrors {
    /// No errors yet.
    pub fn new() -> Self {
        FieldErrors(Vec::new())
    }

    /// Records one problem.
    pub fn push(&mut self, error: FieldError) {
        self.0.push(error);
    }

    /// Records several problems.
    pub fn extend(&mut self, errors: impl IntoIterator<Item = FieldError>) {
        self.0.extend(errors);
    }

    /// True when nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The problems, in the order they are reported.
    pub fn errors(&self) -> &[FieldError] {
        &self.0
    }

    /// `Ok(())` when empty, else the errors sorted by path (and deduplicated).
    pub fn into_result(mut self) -> Result<(), FieldErrors> {
        if self.0.is_empty() {
            return Ok(());
        }
        self.0.sort_by(|a, b| a.path.cmp(&b.path).then_with(|| a.reason.cmp(&b.reason)));
        self.0.dedup();
        Err(self)
    }
}

impl fmt::Display for FieldErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

impl std::error::Error for FieldErrors {}

impl From<FieldError> for FieldErrors {
    fn from(e: FieldError) -> Self {
        FieldErrors(vec![e])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_path_value_and_reason() {
        let e = FieldError::invalid(Path::new("spec").child("ttlSecondsAfterEmpty"), -1, "must be 0 or greater");
        assert_eq!(e.to_string(), "spec.ttlSecondsAfterEmpty: invalid value -1: must be 0 or greater");
        let e = FieldError::invalid(Path::new("spec").child("labels").key("a"), "", "x");
        assert_eq!(e.to_string(), "spec.labels[a]: invalid value \"\": x");
    }

    #[test]
    fn builds_paths_as_users_write_them() {
        let requirements = Path::new("spec").child("requirements");
        for (i, want) in [
            (0, "[0]"),
            (7, "[7]"),
            (10, "[10]"),
            (305, "[305]"),
            (usize::MAX, "[18446744073709551615]"),
        ] {
            assert_eq!(requirements.index(i).as_str(), format!("spec.requirements{want}"));
        }
        assert_eq!(
            requirements.index(2).child("values").index(0).as_str(),
            "spec.requirements[2].values[0]"
        );
        assert_eq!(Path::default().child("spec").as_str(), "spec");
        assert_eq!(Path::new("spec").child("labels").key("a.b/c").as_str(), "spec.labels[a.b/c]");
    }

    #[test]
    fn sorts_errors_by_path() {
        let mut errs = FieldErrors::new();
        errs.push(FieldError::required(Path::new("spec").child("b"), "r"));
        errs.push(FieldError::required(Path::new("spec").child("a"), "r"));
        let errs = errs.into_result().unwrap_err();
        assert_eq!(errs.to_string(), "spec.a: required value: r; spec.b: required value: r");
    }
}
