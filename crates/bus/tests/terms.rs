//! Property tests of the term model: the text syntax and the binary format both round-trip any
//! term, the binary format keeps the sharing (as many nodes decoded as encoded, and a stream no
//! larger than the DAG), and decoding never panics on mutated streams.
#![allow(clippy::unwrap_used)]

use proptest::prelude::*;
use viastack_bus::saf;
use viastack_bus::term::{Arena, Kind};

/// A term description built by proptest, turned into a term by an arena.
#[derive(Debug, Clone)]
enum T {
    Int(i64),
    Real(f64),
    Str(String),
    Blob(Vec<u8>),
    Appl(String, Vec<T>),
    List(Vec<T>),
    Ph(String),
    Annot(Box<T>, Vec<T>),
    Var(String, bool),
}

fn leaf() -> impl Strategy<Value = T> {
    prop_oneof![
        any::<i64>().prop_map(T::Int),
        (-1e12f64..1e12).prop_map(T::Real),
        "[ -~\n\t\u{e9}]{0,8}".prop_map(T::Str),
        proptest::collection::vec(any::<u8>(), 0..8).prop_map(T::Blob),
        "[a-z]([a-z0-9-]{0,3}[a-z0-9])?".prop_map(|f| T::Appl(f, vec![])),
        "[A-Z][a-z]{0,3}".prop_flat_map(|n| any::<bool>().prop_map(move |r| T::Var(n.clone(), r))),
        prop_oneof![Just("int"), Just("str"), Just("blob")].prop_map(|s| T::Ph(s.to_string())),
    ]
}

fn term() -> impl Strategy<Value = T> {
    leaf().prop_recursive(5, 64, 4, |inner| {
        prop_oneof![
            (
                "[a-z][a-z0-9]{0,3}",
                proptest::collection::vec(inner.clone(), 0..4)
            )
                .prop_map(|(f, a)| T::Appl(f, a)),
            proptest::collection::vec(inner.clone(), 0..4).prop_map(T::List),
            // Repeat a subterm to exercise sharing.
            inner
                .clone()
                .prop_map(|t| T::List(vec![t.clone(), t.clone(), t])),
            (inner.clone(), proptest::collection::vec(inner, 1..3))
                .prop_map(|(t, a)| T::Annot(Box::new(t), a)),
        ]
    })
}

fn build(a: &mut Arena, t: &T) -> viastack_bus::Term {
    match t {
        T::Int(i) => a.int(*i),
        T::Real(r) => a.real(*r),
        T::Str(s) => a.str(s),
        T::Blob(b) => a.blob(b.clone()),
        T::Appl(f, xs) => {
            let xs = xs.iter().map(|x| build(a, x)).collect();
            a.appl(f, xs)
        }
        T::List(xs) => {
            let xs = xs.iter().map(|x| build(a, x)).collect();
            a.list(xs)
        }
        T::Ph(s) => a.placeholder(s),
        T::Annot(t, xs) => {
            // An annotated term's annotations are not themselves annotated twice in text.
            let inner = build(a, t);
            let inner = if matches!(inner.kind(), Kind::Annot { .. }) {
                a.list(vec![inner])
            } else {
                inner
            };
            let xs = xs.iter().map(|x| build(a, x)).collect();
            a.annot(inner, xs)
        }
        T::Var(n, r) => a.var(n, *r),
    }
}

proptest! {
    #[test]
    fn text_round_trip(t in term()) {
        let mut a = Arena::new();
        let x = build(&mut a, &t);
        let text = x.to_string();
        let y = a.parse(&text).map_err(|e| TestCaseError::fail(format!("{text}: {e}")))?;
        prop_assert!(y.ptr_eq(&x), "{} reparsed as {}", text, y);
    }

    #[test]
    fn binary_round_trip_keeps_sharing(t in term()) {
        let mut a = Arena::new();
        let x = build(&mut a, &t);
        let bytes = saf::encode(&x);
        let mut b = Arena::new();
        let y = saf::decode(&mut b, &bytes).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(y.to_string(), x.to_string());
        prop_assert_eq!(y.dag_size(), x.dag_size());
        // Back in the first arena it is the very same node.
        prop_assert!(a.import(&y).ptr_eq(&x));
        // Re-encoding gives the same bytes.
        prop_assert_eq!(saf::encode(&y), bytes);
    }

    #[test]
    fn mutated_streams_never_panic(t in term(), at in any::<usize>(), byte in any::<u8>()) {
        let mut a = Arena::new();
        let x = build(&mut a, &t);
        let mut bytes = saf::encode(&x);
        let i = at % bytes.len();
        bytes[i] = byte;
        let _ = saf::decode(&mut a, &bytes);
        let _ = saf::decode(&mut a, &bytes[..i]);
    }
}

/// A value repeated a thousand times costs one encoding plus a thousand back references.
#[test]
fn shared_stream_is_dag_sized() {
    let mut a = Arena::new();
    let big = a.blob(vec![7u8; 10_000]);
    let item = a.appl("chunk", vec![big]);
    let list = a.list(vec![item; 1000]);
    let bytes = saf::encode(&list);
    assert!(
        bytes.len() < 10_000 + 1000 * 3 + 64,
        "{} bytes",
        bytes.len()
    );
}

/// A large blob decoded from shared bytes (a mapped memfd) lies in those bytes — no copy —
/// and the term is the one `decode` gives; a small one is copied; the segmented encoding is
/// the stream.
#[test]
fn decode_shared_slices_large_blobs_in_place() {
    use viastack_bus::saf;
    use viastack_bus::term::Bytes;
    let mut a = Arena::new();
    let big = a.blob(vec![3u8; 100_000]);
    let small = a.blob(vec![4u8; 10]);
    let t = a.appl("data", vec![small, big]);
    let stream = saf::encode(&t);
    let shared = Bytes::from(stream.clone());
    let mut b = Arena::new();
    let d = saf::decode_shared(&mut b, &shared).unwrap();
    let plain = saf::decode(&mut b, &stream).unwrap();
    assert!(d.ptr_eq(&plain));
    let (_, args) = d.as_appl().unwrap();
    let range = shared.as_ptr_range();
    let blob = args[1].as_blob().unwrap();
    assert_eq!(blob.len(), 100_000);
    assert!(range.contains(&blob.as_ptr()), "the large blob was copied");
    assert!(!range.contains(&args[0].as_blob().unwrap().as_ptr()));
    let mut joined = Vec::new();
    for seg in saf::encode_segments(&t) {
        match seg {
            saf::Segment::Own(v) => joined.extend_from_slice(&v),
            saf::Segment::Blob(b) => joined.extend_from_slice(&b),
        }
    }
    assert_eq!(joined, stream);
}
