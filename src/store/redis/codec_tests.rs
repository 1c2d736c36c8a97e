//! The vendored redis crate's reply decoder (vendor/redis.patch): replies of the usual kinds
//! that are whole in the buffer are parsed directly, everything else by the crate's combine
//! parser. These tests hold the two to the same answers: the decoder, fed a stream of replies
//! in arbitrary pieces, yields exactly what the combine parser (`redis::parse_redis_value`)
//! reads from each reply alone, and refuses what it refuses.

use bytes::BytesMut;
use proptest::prelude::*;
use redis::{parse_redis_value, ValueCodec};
use tokio_util::codec::Decoder;

/// One reply's encoding: the kinds the direct parser reads (simple strings, integers, bulk
/// strings, nils, arrays), nested, with what it leaves to combine (errors, RESP3 types) mixed in.
fn reply() -> impl Strategy<Value = Vec<u8>> {
    let leaf = prop_oneof![
        Just(b"+OK\r\n".to_vec()),
        // A lone CR or LF is part of a status line; only CRLF ends it.
        "[ -~\r\n]{0,12}"
            .prop_filter("no CRLF, no CR at the end", |s| {
                !s.contains("\r\n") && !s.ends_with('\r')
            })
            .prop_map(|s| format!("+{s}\r\n").into_bytes()),
        // Integers as Redis never sends them but the parsers accept: signed, padded.
        (any::<i64>(), "[ +]?", " ?").prop_map(|(n, pad, tail)| {
            let n = if pad == "+" {
                n.checked_abs().unwrap_or(0)
            } else {
                n
            };
            format!(":{pad}{n}{tail}\r\n").into_bytes()
        }),
        Just(b"$-7\r\n".to_vec()),
        Just(b"*-9\r\n".to_vec()),
        Just(b"$ 2\r\nab\r\n".to_vec()),
        proptest::collection::vec(
            prop_oneof![
                Just(b'\r'),
                Just(b'\n'),
                Just(b'$'),
                Just(b'*'),
                any::<u8>()
            ],
            0..40
        )
        .prop_map(|b| {
            let mut out = format!("${}\r\n", b.len()).into_bytes();
            out.extend_from_slice(&b);
            out.extend_from_slice(b"\r\n");
            out
        }),
        Just(b"$-1\r\n".to_vec()),
        Just(b"*-1\r\n".to_vec()),
        Just(b"*0\r\n".to_vec()),
        Just(b"-ERR wrong number of arguments\r\n".to_vec()),
        Just(b"-NOSCRIPT No matching script\r\n".to_vec()),
        Just(b",1.5\r\n".to_vec()),
        Just(b"#t\r\n".to_vec()),
        Just(b"_\r\n".to_vec()),
        Just(b"%1\r\n+key\r\n:7\r\n".to_vec()),
        Just(b">3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$4\r\nbody\r\n".to_vec()),
    ];
    leaf.prop_recursive(4, 64, 8, |inner| {
        proptest::collection::vec(inner, 0..8).prop_map(|items| {
            let mut out = format!("*{}\r\n", items.len()).into_bytes();
            for item in items {
                out.extend_from_slice(&item);
            }
            out
        })
    })
}

/// Feeds `stream` to a decoder in pieces of the given sizes (cycled), decoding after each piece
/// until it asks for more, as a connection's reader does.
fn decode_in_pieces(stream: &[u8], pieces: &[usize]) -> Vec<redis::RedisResult<redis::Value>> {
    let mut codec = ValueCodec::default();
    let mut buf = BytesMut::new();
    let mut out = Vec::new();
    let mut at = 0;
    for size in pieces.iter().cycle() {
        let end = (at + size).min(stream.len());
        buf.extend_from_slice(&stream[at..end]);
        at = end;
        loop {
            match codec.decode(&mut buf) {
                Ok(Some(value)) => out.push(Ok(value)),
                Ok(None) => break,
                Err(e) => {
                    out.push(Err(e));
                    return out;
                }
            }
        }
        if at == stream.len() {
            break;
        }
    }
    assert!(buf.is_empty(), "{} bytes left undecoded", buf.len());
    out
}

proptest! {
    #[test]
    fn a_stream_of_replies_decodes_as_the_combine_parser_reads_each(
        replies in proptest::collection::vec(reply(), 1..6),
        pieces in proptest::collection::vec(1usize..64, 1..8),
        whole in any::<bool>(),
    ) {
        let stream = replies.concat();
        let pieces = if whole { vec![stream.len()] } else { pieces };
        let got = decode_in_pieces(&stream, &pieces);
        prop_assert_eq!(got.len(), replies.len());
        for (reply, got) in replies.iter().zip(got) {
            let want = parse_redis_value(reply).expect("a valid reply");
            prop_assert_eq!(got.expect("decoded"), want);
        }
    }
}

#[test]
fn a_reply_split_at_every_byte_decodes_the_same() {
    // An array (a bulk string holding CRLFs, an array of four, a status), an error, a bulk.
    let stream =
        b"*3\r\n$14\r\n1712-0\r\nab\r\ncd\r\n*4\r\n$4\r\ntype\r\n$0\r\n\r\n:-42\r\n$-1\r\n+OK\r\n\
                   -ERR no\r\n$5\r\n12 34\r\n";
    let whole = decode_in_pieces(stream, &[stream.len()]);
    assert_eq!(whole.len(), 3);
    assert!(whole.iter().all(Result::is_ok), "{whole:?}");
    for split in 1..stream.len() {
        let got = decode_in_pieces(stream, &[split, stream.len()]);
        assert_eq!(
            format!("{got:?}"),
            format!("{whole:?}"),
            "split at byte {split}"
        );
    }
}

#[test]
fn a_malformed_reply_is_refused_as_the_combine_parser_refuses_it() {
    let nested = format!("{}:1\r\n", "*1\r\n".repeat(101));
    for bad in [
        &b"$3\r\nabcd\r\n"[..],
        b":12x\r\n",
        b"*2\r\n:1\r\n:y\r\n",
        b"+\xff\xfe\r\n",
        b"?what\r\n",
        b"$2\r\nabXY",
        nested.as_bytes(),
    ] {
        assert!(parse_redis_value(bad).is_err(), "{bad:?}");
        let mut buf = BytesMut::from(bad);
        assert!(
            ValueCodec::default().decode(&mut buf).is_err(),
            "{:?} was accepted",
            String::from_utf8_lossy(bad)
        );
    }
}

#[test]
fn an_array_claiming_a_huge_length_waits_for_its_items_without_reserving_them() {
    let mut codec = ValueCodec::default();
    let mut buf = BytesMut::from(&b"*4000000000000\r\n:1\r\n:2\r\n"[..]);
    assert!(matches!(codec.decode(&mut buf), Ok(None)));
}

#[test]
fn a_reply_as_deep_as_redis_allows_decodes_and_a_deeper_one_is_refused() {
    let deepest = format!("{}:1\r\n", "*1\r\n".repeat(99));
    let mut buf = BytesMut::from(deepest.as_bytes());
    assert_eq!(
        ValueCodec::default().decode(&mut buf).unwrap(),
        Some(parse_redis_value(deepest.as_bytes()).unwrap())
    );
    let deeper = format!("{}:1\r\n", "*1\r\n".repeat(100));
    assert!(parse_redis_value(deeper.as_bytes()).is_err());
    let mut buf = BytesMut::from(deeper.as_bytes());
    assert!(ValueCodec::default().decode(&mut buf).is_err());
}

#[test]
fn a_reply_cut_short_by_the_end_of_the_stream_ends_it_as_before() {
    // Whole tokens, then the end: the combine decoder had taken them all and saw a clean end
    // (the connection then reports itself closed).
    for cut in [&b"*2\r\n:1\r\n"[..], b"*3\r\n", b"$4\r\n"] {
        let mut codec = ValueCodec::default();
        let mut buf = BytesMut::from(cut);
        assert!(matches!(codec.decode(&mut buf), Ok(None)));
        assert!(
            matches!(codec.decode_eof(&mut buf), Ok(None)),
            "{:?}",
            String::from_utf8_lossy(cut)
        );
    }
    // Cut inside a token: a parse error, as before.
    let mut codec = ValueCodec::default();
    let mut buf = BytesMut::from(&b"$5\r\nab"[..]);
    assert!(matches!(codec.decode(&mut buf), Ok(None)));
    assert!(codec.decode_eof(&mut buf).is_err());
}

#[test]
fn a_long_reply_leaves_no_long_buffer_behind() {
    // Arrays of 100-byte entries (~100 KB and ~1 MB), arriving in 64 KB reads, then a short
    // reply: the buffer that held each is given back, whatever room the reply left in it.
    for entries in [930, 9_500, 10_000] {
        let item = format!("$100\r\n{}\r\n", "x".repeat(100));
        let mut stream = format!("*{entries}\r\n{}", item.repeat(entries)).into_bytes();
        stream.extend_from_slice(b":7\r\n");
        let mut codec = ValueCodec::default();
        let mut buf = BytesMut::with_capacity(8 * 1024);
        let mut values = Vec::new();
        for piece in stream.chunks(64 * 1024) {
            buf.reserve(piece.len());
            buf.extend_from_slice(piece);
            while let Some(value) = codec.decode(&mut buf).unwrap() {
                values.push(value);
            }
        }
        assert!(
            matches!(&values[..], [redis::Value::Array(items), redis::Value::Int(7)] if items.len() == entries)
        );
        assert!(
            buf.capacity() <= 8 * 1024,
            "after {entries} entries the buffer kept {} bytes",
            buf.capacity()
        );
    }
}
