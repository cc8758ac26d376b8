//! The bus hex vectors in `testdata/vectors/bus/` (shared with every client's tests):
//! `frames.json` — each valid frame decodes to exactly its listed fields and re-encodes to the
//! same bytes; `invalid.json` — each invalid frame is refused with the listed error;
//! `terms.json` — each term stream decodes to its text and re-encodes to the same bytes.
//! `cargo test -p viastack-bus --test vectors -- --ignored regenerate` rewrites them from the
//! lists below.
#![allow(clippy::unwrap_used)]

use std::path::PathBuf;

use serde_json::{json, Value};
use viastack_bus::saf;
use viastack_bus::term::Arena;
use viastack_bus::wire::{self, FailCode, Frame, WireError, DEFAULT_MAX_FRAME, VERSION};

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../testdata/vectors/bus")
}

fn read(name: &str) -> Value {
    let text = std::fs::read_to_string(dir().join(name)).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn unhex(s: &str) -> Vec<u8> {
    viastack_bus::term::decode_hex(s).unwrap()
}

fn valid_frames(a: &mut Arena) -> Vec<(&'static str, Frame)> {
    let mut t = |s: &str| a.parse(s).unwrap();
    vec![
        (
            "HELLO of an active tool",
            Frame::Hello {
                version: VERSION,
                name: "producer".into(),
                location: "127.0.0.1:4100".into(),
                token: "s3cret".into(),
            },
        ),
        (
            "HELLO of a passive tool",
            Frame::Hello {
                version: VERSION,
                name: "consumer".into(),
                location: String::new(),
                token: String::new(),
            },
        ),
        (
            "REG",
            Frame::Reg {
                version: VERSION,
                tool: 7,
                lease_ms: 10_000,
                threshold: 65_536,
            },
        ),
        (
            "EVAL without references",
            Frame::Eval {
                request: 1,
                delivery: 0,
                term: t(r#"compute(21,"x")"#),
            },
        ),
        (
            "EVAL with a reference",
            Frame::Eval {
                request: 2,
                delivery: 5,
                term: t(r#"consume(@ref(7,1,52428800,"127.0.0.1:4100",data(<blob>)))"#),
            },
        ),
        (
            "VALUE with shared subterms",
            Frame::Value {
                request: 1,
                term: t("pair(f([1,2]),f([1,2]))"),
            },
        ),
        (
            "DO",
            Frame::Do {
                delivery: 0,
                term: t(r#"show("hello")"#),
            },
        ),
        (
            "EVENT",
            Frame::Event {
                event: 3,
                term: t("clicked(1.5){src(button)}"),
            },
        ),
        (
            "ACK_EVENT",
            Frame::AckEvent {
                event: 3,
                delivery: 0,
                term: t("clicked(1.5)"),
            },
        ),
        ("TERMINATE", Frame::Terminate { term: t("done") }),
        (
            "NOTE",
            Frame::Note {
                term: t(r#"status("up")"#),
            },
        ),
        (
            "GET",
            Frame::Get {
                delivery: 5,
                var: 1,
                offset: 0,
                window: 1_048_576,
            },
        ),
        (
            "PUT chunk",
            Frame::Put {
                var: 1,
                offset: 4096,
                total: 8192,
                data: vec![0xde, 0xad, 0xbe, 0xef],
            },
        ),
        (
            "CREDIT",
            Frame::Credit {
                var: 1,
                bytes: 262_144,
            },
        ),
        ("ACK", Frame::Ack { delivery: 5 }),
        ("FIN", Frame::Fin { var: 1 }),
        (
            "END",
            Frame::End {
                reason: "bye".into(),
            },
        ),
        (
            "FAIL owner lost",
            Frame::Fail {
                delivery: 5,
                code: FailCode::OwnerLost,
                detail: "lease expired".into(),
            },
        ),
        ("PING", Frame::Ping { nonce: 42 }),
        (
            "unknown kind kept",
            Frame::Unknown {
                kind: 0x7e,
                body: vec![1, 2, 3],
            },
        ),
    ]
}

fn invalid_frames() -> Vec<(&'static str, Vec<u8>, WireError)> {
    vec![
        ("LEN zero", vec![0, 0, 0, 0], WireError::Empty),
        (
            "LEN above the limit",
            vec![0x01, 0, 0, 1, 0x27],
            WireError::TooLarge {
                len: 16_777_217,
                max: DEFAULT_MAX_FRAME,
            },
        ),
        (
            "ACK cut short",
            vec![0, 0, 0, 5, 0x23, 0, 0, 0, 1],
            WireError::Truncated {
                kind: "ACK",
                field: "delivery",
            },
        ),
        (
            "PING with a byte too many",
            vec![0, 0, 0, 10, 0x27, 0, 0, 0, 0, 0, 0, 0, 1, 9],
            WireError::Trailing {
                kind: "PING",
                extra: 1,
            },
        ),
        (
            "END reason not UTF-8",
            vec![0, 0, 0, 4, 0x25, 0, 1, 0xff],
            WireError::Utf8 {
                kind: "END",
                field: "reason",
            },
        ),
        (
            "NOTE with a bad term magic",
            vec![0, 0, 0, 9, 0x16, 0, 0, 0, 4, 0x56, 0x42, 0x02, 0x01],
            WireError::Term {
                kind: "NOTE",
                err: saf::SafError::Magic,
            },
        ),
        (
            "NOTE term with a forward back reference",
            vec![0, 0, 0, 10, 0x16, 0, 0, 0, 5, 0x56, 0x42, 0x01, 0x0a, 0x03],
            WireError::Term {
                kind: "NOTE",
                err: saf::SafError::BackRef { index: 3, at: 0 },
            },
        ),
    ]
}

fn terms() -> Vec<(&'static str, &'static str)> {
    vec![
        ("integer", "-42"),
        ("real", "2.5"),
        ("string with escapes", r#""a\"b\n""#),
        ("application", r#"f(1,"x",[])"#),
        ("list sharing a subterm", "[g(1),g(1),g(1)]"),
        ("placeholder", "<int>"),
        ("blob", r##"#"00ff10""##),
        ("annotation", "t(1){pos(3,4)}"),
        ("variables", "pair(X,Y?)"),
        (
            "reference",
            r#"@ref(7,1,1000000,"unix:/tmp/t.sock",data(<blob>))"#,
        ),
    ]
}

#[test]
#[ignore]
fn regenerate() {
    let mut a = Arena::new();
    let valid: Vec<Value> = valid_frames(&mut a)
        .into_iter()
        .map(|(name, f)| json!({"name": name, "hex": wire::hex(&f.to_bytes()), "fields": f.fields()}))
        .collect();
    let invalid: Vec<Value> = invalid_frames()
        .into_iter()
        .map(|(name, bytes, err)| json!({"name": name, "hex": wire::hex(&bytes), "error": format!("{err:?}"), "message": err.to_string()}))
        .collect();
    let terms: Vec<Value> = terms()
        .into_iter()
        .map(|(name, text)| {
            let t = a.parse(text).unwrap();
            json!({"name": name, "text": t.to_string(), "hex": wire::hex(&saf::encode(&t))})
        })
        .collect();
    let about = "bus wire v1 (docs/WIRE.md, Bus frames): u32 LEN (bytes after it), u8 KIND, body; integers big endian, str = u16 length + UTF-8, term = u32 length + term stream";
    std::fs::create_dir_all(dir()).unwrap();
    let write = |name: &str, v: Value| {
        std::fs::write(
            dir().join(name),
            serde_json::to_string_pretty(&v).unwrap() + "\n",
        )
        .unwrap();
    };
    write(
        "frames.json",
        json!({"about": "every frame kind, valid", "format": about, "max_frame": DEFAULT_MAX_FRAME, "vectors": valid}),
    );
    write(
        "invalid.json",
        json!({"about": "frames every decoder must refuse, with the error", "format": about, "max_frame": DEFAULT_MAX_FRAME, "vectors": invalid}),
    );
    write(
        "terms.json",
        json!({"about": "term streams (docs/WIRE.md, Bus terms): magic 56 42 01, pre-order nodes, back references to shared nodes", "vectors": terms}),
    );
}

#[test]
fn valid_frames_decode_to_their_fields() {
    let v = read("frames.json");
    let vectors = v["vectors"].as_array().unwrap();
    assert!(vectors.len() >= 18);
    let mut a = Arena::new();
    for vec in vectors {
        let bytes = unhex(vec["hex"].as_str().unwrap());
        let f = Frame::parse(&mut a, &bytes, DEFAULT_MAX_FRAME)
            .unwrap_or_else(|e| panic!("{}: {e}", vec["name"]));
        assert_eq!(f.fields(), vec["fields"], "{}", vec["name"]);
        assert_eq!(f.to_bytes(), bytes, "{}: re-encoding differs", vec["name"]);
    }
    // The file is what the lists above produce (no drift between code and vectors).
    let mut b = Arena::new();
    let names: Vec<_> = valid_frames(&mut b).into_iter().map(|(n, _)| n).collect();
    let file_names: Vec<_> = vectors
        .iter()
        .map(|v| v["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, file_names);
}

#[test]
fn invalid_frames_are_refused_with_their_error() {
    let v = read("invalid.json");
    let mut a = Arena::new();
    for vec in v["vectors"].as_array().unwrap() {
        let bytes = unhex(vec["hex"].as_str().unwrap());
        let err = Frame::parse(&mut a, &bytes, DEFAULT_MAX_FRAME).unwrap_err();
        assert_eq!(
            format!("{err:?}"),
            vec["error"].as_str().unwrap(),
            "{}",
            vec["name"]
        );
    }
}

#[test]
fn term_streams_decode_to_their_text() {
    let v = read("terms.json");
    let mut a = Arena::new();
    for vec in v["vectors"].as_array().unwrap() {
        let bytes = unhex(vec["hex"].as_str().unwrap());
        let t = saf::decode(&mut a, &bytes).unwrap();
        assert_eq!(t.to_string(), vec["text"].as_str().unwrap());
        assert_eq!(saf::encode(&t), bytes);
    }
}
