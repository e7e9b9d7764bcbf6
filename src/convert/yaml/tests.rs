use super::*;

fn parse(text: &str) -> serde_json::Value {
    serde_yaml_ng::from_str(text).expect("valid YAML")
}

#[test]
fn writes_nested_blocks_with_comments_in_place() {
    let mut item = MapBuilder::new();
    item.noted("key", Node::str("kubernetes.io/os"), vec!["added by defaulting".into()]);
    item.field("operator", Node::str("In"));
    item.field("values", Node::string_seq(&["linux".to_string()]));
    let mut spec = MapBuilder::new();
    spec.field("requirements", Node::Seq(vec![Item::plain(item.build())]));
    spec.noted("expireAfter", Node::str("Never"), vec!["no expiry".into()]);
    spec.field("empty", Node::Map(Vec::new()));
    spec.field("star", Node::str("*"));
    spec.field("number", Node::Int(2));
    spec.field("flag", Node::str("true"));
    let doc = Document {
        header: vec!["converted".into()],
        root: spec.build(),
    };
    let text = render_document(&doc);
    assert_eq!(
        text,
        "# converted\nrequirements:\n  # added by defaulting\n  - key: kubernetes.io/os\n    operator: In\n    values:\n      - linux\n# no expiry\nexpireAfter: Never\nempty: {}\nstar: '*'\nnumber: 2\nflag: 'true'\n"
    );
    assert_eq!(
        parse(&text),
        serde_json::json!({
            "requirements": [{"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]}],
            "expireAfter": "Never", "empty": {}, "star": "*", "number": 2, "flag": "true"
        })
    );
}

#[test]
fn quotes_what_a_yaml_1_1_reader_would_not_read_as_a_string() {
    for s in [
        "yes",
        "No",
        "ON",
        "off",
        "y",
        "N",
        "1_000",
        "2001-12-14",
        "10.100.0.10",
        "1:30",
        "0x1F",
        "+1",
        ".5",
    ] {
        assert!(scalar(s).starts_with('\''), "{s} -> {}", scalar(s));
    }
    for s in ["336h", "1m30s", "20Gi", "nodeType", "service-2023", "t3.large", "5%", "it's"] {
        assert!(!scalar(s).starts_with('\''), "{s} -> {}", scalar(s));
    }
    assert_eq!(scalar("it's yes"), "it's yes");
}

#[test]
fn keeps_multi_line_and_odd_strings_byte_for_byte() {
    for s in [
        "#!/bin/bash\necho hello\n",
        "[settings.kubernetes]\nmax-pods = 10",
        "  indented first\nline\n\n\n",
        "MIME-Version: 1.0\r\nContent-Type: text/plain\r\n",
        "tab\there\n",
        "trailing space \nx",
        "",
        "a: b",
        "- dash",
        "null",
        "0x1F",
        "yes",
        "2001-12-14",
    ] {
        let mut m = MapBuilder::new();
        m.field("userData", Node::str(s));
        let text = render_document(&Document {
            header: Vec::new(),
            root: m.build(),
        });
        assert_eq!(parse(&text)["userData"], serde_json::json!(s), "{text}");
    }
}
