//! RFC 6570 level-1 URI templates (`{var}` only), as resource templates use them.

/// An RFC 6570 level-1 URI template: literal text and `{name}` variables.
///
/// A variable matches one or more characters up to the next literal (and never `/`
/// unless the variable is last), which is what simple resource templates need.
#[derive(Debug, Clone, PartialEq)]
pub struct UriTemplate {
    parts: Vec<Part>,
}

#[derive(Debug, Clone, PartialEq)]
enum Part {
    Literal(String),
    Var(String),
}

impl UriTemplate {
    /// Parses a template; an unclosed `{` is kept as literal text.
    pub fn parse(template: &str) -> Self {
        let mut parts = Vec::new();
        let mut rest = template;
        while let Some(open) = rest.find('{') {
            let Some(close) = rest[open..].find('}') else {
                break;
            };
            if open > 0 {
                parts.push(Part::Literal(rest[..open].to_owned()));
            }
            parts.push(Part::Var(rest[open + 1..open + close].to_owned()));
            rest = &rest[open + close + 1..];
        }
        if !rest.is_empty() {
            parts.push(Part::Literal(rest.to_owned()));
        }
        UriTemplate { parts }
    }

    /// The variables of `uri` if it matches, in template order.
    pub fn matches(&self, uri: &str) -> Option<Vec<(String, String)>> {
        let mut vars = Vec::new();
        let mut rest = uri;
        let mut parts = self.parts.iter().peekable();
        while let Some(part) = parts.next() {
            match part {
                Part::Literal(lit) => rest = rest.strip_prefix(lit.as_str())?,
                Part::Var(name) => {
                    let end = match parts.peek() {
                        Some(Part::Literal(next)) => rest.find(next.as_str())?,
                        Some(Part::Var(_)) => return None,
                        None => rest.len(),
                    };
                    let value = &rest[..end];
                    let last = parts.peek().is_none();
                    if value.is_empty() || (!last && value.contains('/')) {
                        return None;
                    }
                    vars.push((name.clone(), value.to_owned()));
                    rest = &rest[end..];
                }
            }
        }
        rest.is_empty().then_some(vars)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uri_templates_match_and_extract() {
        let t = UriTemplate::parse("test://template/{id}/data");
        assert_eq!(
            t.matches("test://template/123/data"),
            Some(vec![("id".to_owned(), "123".to_owned())])
        );
        assert_eq!(t.matches("test://template//data"), None);
        assert_eq!(t.matches("test://template/1/2/data"), None);
        assert_eq!(t.matches("test://template/123/data/x"), None);
        let tail = UriTemplate::parse("demo://greeting/{name}");
        assert_eq!(
            tail.matches("demo://greeting/Ada"),
            Some(vec![("name".to_owned(), "Ada".to_owned())])
        );
        assert_eq!(tail.matches("demo://greeting/"), None);
        assert_eq!(UriTemplate::parse("x://{a}{b}").matches("x://ab"), None);
    }
}
