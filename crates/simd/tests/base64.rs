//! base64: RFC 4648's vectors, every SIMD implementation against the scalar one (every
//! length 0..=1024 at every start offset 0..64, random lengths up to 1 MiB), every
//! decode error class with its position, and the `base64` crate as an outside oracle.

use base64::Engine as _;
use ioserve_simd::base64::{
    Base64, DecodeError, OutputTooSmall, STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD,
};
use proptest::prelude::*;

mod common;

use common::random_bytes;

const ENGINES: [Base64; 4] = [STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD];

fn scalar() -> &'static ioserve_simd::base64::Kernels {
    ioserve_simd::base64::implementations()[0]
}

fn encode_with(kernels: &ioserve_simd::base64::Kernels, engine: Base64, input: &[u8]) -> Vec<u8> {
    let mut output = vec![0u8; engine.encoded_len(input.len())];
    let written = engine
        .encode_to_slice_with(kernels, input, &mut output)
        .unwrap();
    assert_eq!(written, output.len());
    output
}

fn decode_with(
    kernels: &ioserve_simd::base64::Kernels,
    engine: Base64,
    input: &[u8],
) -> Result<Vec<u8>, DecodeError> {
    let mut output = vec![0u8; engine.decoded_len_estimate(input.len())];
    let written = engine.decode_to_slice_with(kernels, input, &mut output)?;
    output.truncate(written);
    Ok(output)
}

#[test]
fn rfc_4648_vectors() {
    let vectors: [(&str, &str); 7] = [
        ("", ""),
        ("f", "Zg=="),
        ("fo", "Zm8="),
        ("foo", "Zm9v"),
        ("foob", "Zm9vYg=="),
        ("fooba", "Zm9vYmE="),
        ("foobar", "Zm9vYmFy"),
    ];
    for kernels in ioserve_simd::base64::implementations() {
        let name = kernels.implementation();
        for (plain, encoded) in vectors {
            let unpadded = encoded.trim_end_matches('=');
            for (engine, text) in [(STANDARD, encoded), (STANDARD_NO_PAD, unpadded)] {
                assert_eq!(
                    encode_with(kernels, engine, plain.as_bytes()),
                    text.as_bytes(),
                    "{name}"
                );
                assert_eq!(
                    decode_with(kernels, engine, text.as_bytes()).unwrap(),
                    plain.as_bytes(),
                    "{name}"
                );
            }
        }
    }
}

#[test]
fn the_alphabets_differ_only_in_the_last_two_characters() {
    let all_values: Vec<u8> = (0..48)
        .map(|i| {
            [
                0x00, 0x10, 0x83, 0x10, 0x51, 0x87, 0x20, 0x92, 0x8b, 0x30, 0xd3, 0x8f, 0x41, 0x14,
                0x93, 0x51, 0x55, 0x97, 0x61, 0x96, 0x9b, 0x71, 0xd7, 0x9f, 0x82, 0x18, 0xa3, 0x92,
                0x59, 0xa7, 0xa2, 0x9a, 0xab, 0xb2, 0xdb, 0xaf, 0xc3, 0x1c, 0xb3, 0xd3, 0x5d, 0xb7,
                0xe3, 0x9e, 0xbb, 0xf3, 0xdf, 0xbf,
            ][i]
        })
        .collect();
    assert_eq!(
        STANDARD.encode(&all_values),
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
    );
    assert_eq!(
        URL_SAFE.encode(&all_values),
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    );
}

#[test]
fn every_implementation_matches_scalar_at_every_length_and_offset() {
    let data = random_bytes(1024 + 64, 7);
    for kernels in ioserve_simd::base64::implementations() {
        let name = kernels.implementation();
        for engine in [STANDARD, URL_SAFE_NO_PAD] {
            for offset in 0..64 {
                for len in 0..=1024 {
                    let input = &data[offset..offset + len];
                    let expected = encode_with(scalar(), engine, input);
                    let encoded = encode_with(kernels, engine, input);
                    assert_eq!(encoded, expected, "{name} encode len {len} offset {offset}");
                    let decoded = decode_with(kernels, engine, &expected);
                    assert_eq!(
                        decoded.as_deref(),
                        Ok(input),
                        "{name} decode len {len} offset {offset}"
                    );
                }
            }
        }
    }
}

#[test]
fn no_kernel_writes_past_the_decoded_length() {
    // The output slice given is longer than the result: the bytes after it must keep
    // their value (a last step stored whole, or through a wider store, would not).
    let data = random_bytes(300, 11);
    for kernels in ioserve_simd::base64::implementations() {
        for engine in [STANDARD, URL_SAFE_NO_PAD] {
            for len in 0..=300 {
                let text = encode_with(scalar(), engine, &data[..len]);
                let mut output = vec![0xA5u8; len + 64];
                let written = engine
                    .decode_to_slice_with(kernels, &text, &mut output)
                    .unwrap();
                assert_eq!(written, len);
                assert_eq!(&output[..len], &data[..len]);
                assert!(
                    output[len..].iter().all(|&b| b == 0xA5),
                    "{} wrote past {len} bytes",
                    kernels.implementation()
                );
            }
        }
    }
}

#[test]
fn decoding_reads_from_every_start_offset() {
    // The encode test moves the input bytes; this moves the characters.
    let text = URL_SAFE_NO_PAD.encode(random_bytes(800, 8)).into_bytes();
    let mut shifted = vec![b'A'; text.len() + 64];
    for kernels in ioserve_simd::base64::implementations() {
        for offset in 0..64 {
            shifted[offset..offset + text.len()].copy_from_slice(&text);
            let input = &shifted[offset..offset + text.len()];
            assert_eq!(
                decode_with(kernels, URL_SAFE_NO_PAD, input),
                decode_with(scalar(), URL_SAFE_NO_PAD, &text),
                "{} offset {offset}",
                kernels.implementation()
            );
        }
    }
}

#[test]
fn every_implementation_matches_scalar_on_long_inputs() {
    let mut lengths = vec![4095, 4096, 65_535, 65_536, 1 << 20];
    lengths.extend(random_bytes(30, 9).chunks(3).map(|c| {
        (usize::from(c[0]) << 12 | usize::from(c[1]) << 4 | usize::from(c[2]) >> 4) % (1 << 20)
    }));
    for len in lengths {
        let input = random_bytes(len, len as u64);
        let expected = encode_with(scalar(), STANDARD, &input);
        assert_eq!(
            expected,
            base64::engine::general_purpose::STANDARD
                .encode(&input)
                .into_bytes()
        );
        for kernels in ioserve_simd::base64::implementations() {
            let name = kernels.implementation();
            assert_eq!(
                encode_with(kernels, STANDARD, &input),
                expected,
                "{name} len {len}"
            );
            assert_eq!(
                decode_with(kernels, STANDARD, &expected).unwrap(),
                input,
                "{name} len {len}"
            );
        }
    }
}

/// Bytes that are never base64 characters in either alphabet, across the ranges the
/// kernels treat differently (control, punctuation beside the alphabet's runs, high).
const NOT_IN_EITHER_ALPHABET: [u8; 12] = [
    0x00, b'\n', b' ', b'!', b'.', b':', b'@', b'[', b'`', b'{', 0x7F, 0x80,
];

#[test]
fn an_invalid_byte_is_reported_at_its_position_by_every_implementation() {
    let text = STANDARD.encode(random_bytes(300, 10)).into_bytes();
    for kernels in ioserve_simd::base64::implementations() {
        for position in 0..text.len() {
            for byte in NOT_IN_EITHER_ALPHABET.into_iter().chain([0xFF, 0xC0]) {
                let mut bad = text.clone();
                bad[position] = byte;
                assert_eq!(
                    decode_with(kernels, STANDARD, &bad),
                    Err(DecodeError::InvalidByte { position, byte }),
                    "{} byte {byte:#x} at {position}",
                    kernels.implementation()
                );
            }
        }
    }
}

/// Every input length up to a few steps of the widest kernel: the SIMD kernels end with
/// one or two steps overlapping the last whole step, and each must leave the scalar
/// code to report the invalid byte, wherever in them it is.
#[test]
fn an_invalid_byte_is_reported_at_its_position_at_every_length() {
    for kernels in ioserve_simd::base64::implementations() {
        for len in 0..=160 {
            let text = STANDARD_NO_PAD.encode(random_bytes(len, 13)).into_bytes();
            for position in 0..text.len() {
                for byte in [0x00, b'=', 0xFF] {
                    let mut bad = text.clone();
                    bad[position] = byte;
                    let expected = if byte == b'=' {
                        DecodeError::InvalidPadding { position }
                    } else {
                        DecodeError::InvalidByte { position, byte }
                    };
                    assert_eq!(
                        decode_with(kernels, STANDARD_NO_PAD, &bad),
                        Err(expected),
                        "{} length {len} byte {byte:#x} at {position}",
                        kernels.implementation()
                    );
                }
            }
        }
    }
}

#[test]
fn the_other_alphabets_characters_are_invalid() {
    for kernels in ioserve_simd::base64::implementations() {
        let name = kernels.implementation();
        for (engine, foreign) in [(STANDARD, [b'-', b'_']), (URL_SAFE, [b'+', b'/'])] {
            let text = engine.encode(random_bytes(120, 11)).into_bytes();
            for byte in foreign {
                for position in [0, 17, 63, 64, 100, text.len() - 5] {
                    let mut bad = text.clone();
                    bad[position] = byte;
                    assert_eq!(
                        decode_with(kernels, engine, &bad),
                        Err(DecodeError::InvalidByte { position, byte }),
                        "{name}"
                    );
                }
            }
        }
    }
}

#[test]
fn misplaced_padding_is_reported_at_its_position() {
    for kernels in ioserve_simd::base64::implementations() {
        let name = kernels.implementation();
        for engine in ENGINES {
            let text = engine.encode(random_bytes(200, 12)).into_bytes();
            // Not in the last group, where a '=' could make another valid shape.
            for position in 0..text.len() - 4 {
                let mut bad = text.clone();
                bad[position] = b'=';
                assert_eq!(
                    decode_with(kernels, engine, &bad),
                    Err(DecodeError::InvalidPadding { position }),
                    "{name} {engine:?}"
                );
            }
        }
        // Three '=', and padding given to an unpadded engine.
        let cases: [(Base64, &[u8], usize); 5] = [
            (STANDARD, b"QQ==QQ==", 2),
            (STANDARD, b"Q===", 1),
            (STANDARD_NO_PAD, b"QQ==", 2),
            (URL_SAFE_NO_PAD, b"QUI=", 3),
            (STANDARD, b"====", 0),
        ];
        for (engine, text, position) in cases {
            assert_eq!(
                decode_with(kernels, engine, text),
                Err(DecodeError::InvalidPadding { position }),
                "{name} {text:?}"
            );
        }
    }
}

#[test]
fn lengths_no_encoding_has_are_rejected() {
    for length in [1, 2, 3, 5, 6, 7, 9, 65] {
        let text = vec![b'A'; length];
        assert_eq!(
            STANDARD.decode(&text),
            Err(DecodeError::InvalidLength { length }),
            "padded {length}"
        );
    }
    for length in [1, 5, 9, 65, 1025] {
        let text = vec![b'A'; length];
        assert_eq!(
            STANDARD_NO_PAD.decode(&text),
            Err(DecodeError::InvalidLength { length })
        );
    }
    // Unpadded input to a padded engine is the wrong length, not silently accepted.
    assert_eq!(
        STANDARD.decode("QQ"),
        Err(DecodeError::InvalidLength { length: 2 })
    );
}

#[test]
fn set_bits_below_the_last_byte_are_rejected() {
    // "QQ" is 0x41; "QR".."QZ", "Qa".. carry bits below it.
    assert_eq!(STANDARD.decode("QQ=="), Ok(vec![0x41]));
    assert_eq!(
        STANDARD.decode("QR=="),
        Err(DecodeError::NonCanonicalTrailingBits { position: 1 })
    );
    assert_eq!(STANDARD.decode("QUI="), Ok(vec![0x41, 0x42]));
    assert_eq!(
        STANDARD.decode("QUJ="),
        Err(DecodeError::NonCanonicalTrailingBits { position: 2 })
    );
    assert_eq!(
        URL_SAFE_NO_PAD.decode("AAAAQR"),
        Err(DecodeError::NonCanonicalTrailingBits { position: 5 })
    );
    // Every last character of a 2- and 3-character tail: exactly the canonical ones
    // pass, after every number of whole groups to 80 characters (the tail alone, in a
    // kernel's short path, after a SIMD block).
    for kernels in ioserve_simd::base64::implementations() {
        let alphabet = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        for groups in 0..=20 {
            for (value_of_c, &c) in alphabet.iter().enumerate() {
                let mut two = vec![b'A'; 4 * groups];
                two.extend([b'Q', c]);
                let mut three = vec![b'A'; 4 * groups];
                three.extend([b'Q', b'Q', c]);
                assert_eq!(
                    decode_with(kernels, STANDARD_NO_PAD, &two).is_ok(),
                    value_of_c & 0x0F == 0,
                    "{c} after {groups} groups"
                );
                assert_eq!(
                    decode_with(kernels, STANDARD_NO_PAD, &three).is_ok(),
                    value_of_c & 0x03 == 0,
                    "{c} after {groups} groups"
                );
            }
        }
    }
}

#[test]
fn short_outputs_are_errors_not_truncation() {
    let mut small = [0u8; 7];
    assert_eq!(
        STANDARD.encode_to_slice(b"hello", &mut small),
        Err(OutputTooSmall {
            needed: 8,
            available: 7
        })
    );
    let mut small = [0u8; 4];
    assert_eq!(
        STANDARD.decode_to_slice(b"aGVsbG8=", &mut small),
        Err(DecodeError::OutputTooSmall {
            needed: 5,
            available: 4
        })
    );
    // An exact-size buffer is enough (the SIMD kernels never store past it).
    for kernels in ioserve_simd::base64::implementations() {
        let input = random_bytes(1000, 13);
        let text = encode_with(kernels, URL_SAFE_NO_PAD, &input);
        let mut exact = vec![0u8; input.len()];
        assert_eq!(
            URL_SAFE_NO_PAD.decode_to_slice_with(kernels, &text, &mut exact),
            Ok(1000)
        );
        assert_eq!(exact, input);
    }
}

#[test]
fn errors_say_what_is_allowed() {
    let message = STANDARD.decode("QQ?=").unwrap_err().to_string();
    assert!(
        message.contains("position 2") && message.contains("alphabet"),
        "{message}"
    );
    let message = STANDARD.decode("QQ=").unwrap_err().to_string();
    assert!(
        message.contains("length 3") && message.contains("multiple of 4"),
        "{message}"
    );
}

#[test]
fn lengths_are_exact_and_estimates_bound() {
    for len in 0..200 {
        let input = random_bytes(len, len as u64);
        for engine in ENGINES {
            let text = engine.encode(&input);
            assert_eq!(text.len(), engine.encoded_len(len));
            assert!(engine.decoded_len_estimate(text.len()) >= len);
            assert!(engine.decoded_len_estimate(text.len()) <= len + 2);
        }
    }
}

proptest! {
    #[test]
    fn round_trips_and_agrees_with_the_base64_crate(input in proptest::collection::vec(any::<u8>(), 0..2000)) {
        use base64::engine::general_purpose as peer;
        let peers = [&peer::STANDARD, &peer::STANDARD_NO_PAD, &peer::URL_SAFE, &peer::URL_SAFE_NO_PAD];
        for (engine, peer) in ENGINES.into_iter().zip(peers) {
            let text = engine.encode(&input);
            prop_assert_eq!(&text, &peer.encode(&input));
            prop_assert_eq!(engine.decode(&text).unwrap(), input.clone());
        }
    }

    #[test]
    fn decoding_arbitrary_bytes_never_disagrees_with_scalar(input in proptest::collection::vec(any::<u8>(), 0..300)) {
        for kernels in ioserve_simd::base64::implementations() {
            for engine in ENGINES {
                prop_assert_eq!(decode_with(kernels, engine, &input), decode_with(scalar(), engine, &input));
            }
        }
    }
}
