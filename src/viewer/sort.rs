//! The order of the rows: `--sort` and the `s` key (creation, price, usage, name or a label's
//! value, in either direction), and the name comparison that counts digits as numbers.

use std::cmp::Ordering;
use std::collections::HashMap;

use k8s_openapi::api::core::v1::Node;

use super::NodeRow;

/// What the rows are ordered by.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SortBy {
    /// Creation time (as eks-node-viewer).
    Creation,
    /// Price per hour.
    Price,
    /// The largest share of any shown resource.
    Usage,
    /// Name, digits compared as numbers.
    Name,
    /// A label's value, digits compared as numbers (eks-node-viewer's `--node-sort LABEL`).
    Label(String),
}

impl SortBy {
    /// The order after this one (the `s` key); a label order goes back to creation.
    pub fn next(&self) -> SortBy {
        match self {
            SortBy::Creation => SortBy::Price,
            SortBy::Price => SortBy::Usage,
            SortBy::Usage => SortBy::Name,
            SortBy::Name | SortBy::Label(_) => SortBy::Creation,
        }
    }

    fn as_str(&self) -> &str {
        match self {
            SortBy::Creation => "creation",
            SortBy::Price => "price",
            SortBy::Usage => "usage",
            SortBy::Name => "name",
            SortBy::Label(key) => key,
        }
    }

    /// Dearest and most requested first; the others ascending.
    fn descends_by_default(&self) -> bool {
        matches!(self, SortBy::Price | SortBy::Usage)
    }
}

/// A row order and its direction (`--sort price=asc`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sort {
    /// What the rows are ordered by.
    pub by: SortBy,
    /// Largest first.
    pub descending: bool,
}

impl Sort {
    /// `by` in its usual direction.
    pub fn by(by: SortBy) -> Sort {
        let descending = by.descends_by_default();
        Sort { by, descending }
    }

    /// `creation`, `price`, `usage`, `name` or a label key, optionally followed by `=asc` or
    /// `=dsc` (`=desc` too).
    pub fn parse(value: &str) -> Result<Sort, String> {
        let (key, direction) = match value.rsplit_once('=') {
            Some((key, direction)) => (key, Some(direction)),
            None => (value, None),
        };
        let by = match key {
            "creation" => SortBy::Creation,
            "price" => SortBy::Price,
            "usage" => SortBy::Usage,
            "name" => SortBy::Name,
            label => SortBy::Label(
                parse_label_key(label)
                    .map_err(|e| format!("give creation, price, usage, name or a label key, optionally with =asc or =dsc: {e}"))?,
            ),
        };
        let descending = match direction {
            None => by.descends_by_default(),
            Some("asc") => false,
            Some("dsc" | "desc") => true,
            Some(other) => return Err(format!("the direction is asc or dsc, not {other:?}")),
        };
        Ok(Sort { by, descending })
    }

    /// The next order of the `s` key, in its usual direction.
    pub fn next(&self) -> Sort {
        Sort::by(self.by.next())
    }

    /// As the header shows it: the key, with its direction when not the usual one.
    pub fn text(&self) -> String {
        if self.descending == self.by.descends_by_default() {
            self.by.as_str().to_string()
        } else {
            format!("{}={}", self.by.as_str(), if self.descending { "dsc" } else { "asc" })
        }
    }
}

/// A label key as Kubernetes takes it (`[prefix/]name`).
pub fn parse_label_key(key: &str) -> Result<String, String> {
    if key.is_empty() {
        return Err("a label key cannot be empty".to_string());
    }
    crate::apis::names::check_qualified_name(key).map_err(|e| format!("label key {key:?}: {e}"))?;
    Ok(key.to_string())
}

/// Orders `rows` by `sort`, names breaking ties; `nodes` are where label values are read (rows
/// without the label go last in either direction).
pub fn sort_rows(rows: &mut [NodeRow], sort: &Sort, nodes: &[&Node]) {
    let label_of: HashMap<&str, &str> = match &sort.by {
        SortBy::Label(key) => nodes
            .iter()
            .filter_map(|n| Some((n.metadata.name.as_deref()?, n.metadata.labels.as_ref()?.get(key)?.as_str())))
            .collect(),
        _ => HashMap::new(),
    };
    let direct = |o: Ordering| if sort.descending { o.reverse() } else { o };
    rows.sort_by(|a, b| {
        let primary = match &sort.by {
            SortBy::Creation => direct(a.created.cmp(&b.created)),
            SortBy::Price => {
                // Unpriced rows last in either direction.
                let p = |r: &NodeRow| r.price.map(|p| p.usd_per_hour);
                match (p(a), p(b)) {
                    (Some(x), Some(y)) => direct(x.total_cmp(&y)),
                    (x, y) => x.is_none().cmp(&y.is_none()),
                }
            }
            SortBy::Usage => direct(a.max_fraction().total_cmp(&b.max_fraction())),
            SortBy::Name => direct(natural_cmp(&a.name, &b.name)),
            SortBy::Label(_) => match (label_of.get(a.name.as_str()), label_of.get(b.name.as_str())) {
                (Some(x), Some(y)) => direct(natural_cmp(x, y)),
                (x, y) => x.is_none().cmp(&y.is_none()),
            },
        };
        primary.then_with(|| natural_cmp(&a.name, &b.name))
    });
}

/// Compares strings with runs of digits compared as numbers (`node-9` before `node-10`).
pub fn natural_cmp(a: &str, b: &str) -> Ordering {
    let (mut a, mut b) = (a, b);
    loop {
        let digits = |s: &str| s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
        match (a.chars().next(), b.chars().next()) {
            (None, None) => return Ordering::Equal,
            (None, Some(_)) => return Ordering::Less,
            (Some(_), None) => return Ordering::Greater,
            (Some(x), Some(y)) if x.is_ascii_digit() && y.is_ascii_digit() => {
                let (da, db) = (digits(a), digits(b));
                let (na, nb) = (a[..da].trim_start_matches('0'), b[..db].trim_start_matches('0'));
                let order = na.len().cmp(&nb.len()).then_with(|| na.cmp(nb)).then_with(|| da.cmp(&db));
                if order != Ordering::Equal {
                    return order;
                }
                (a, b) = (&a[da..], &b[db..]);
            }
            (Some(x), Some(y)) => {
                if x != y {
                    return x.cmp(&y);
                }
                (a, b) = (&a[x.len_utf8()..], &b[y.len_utf8()..]);
            }
        }
    }
}
