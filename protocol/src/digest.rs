//! Content digests: BLAKE3-256 (brief §5). They cross trust boundaries (CI jobs, the farm,
//! workers), so they must be collision-resistant; xxh3 is only for in-process memo identities.

use std::fmt;
use std::io::{self, Read};
use std::path::Path;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A BLAKE3-256 digest. Serialises as 32 raw bytes on the wire and as lowercase hex in
/// human-readable formats (JSON).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Digest(pub [u8; 32]);

impl Digest {
    /// The digest of `bytes`.
    pub fn of(bytes: &[u8]) -> Self {
        Self(*blake3::hash(bytes).as_bytes())
    }

    /// The keyed digest of `bytes` under `salt` (BLAKE3 keyed mode): without the salt, a
    /// digest of a short value cannot be matched against guesses.
    pub fn keyed(salt: &[u8; 32], bytes: &[u8]) -> Self {
        Self(*blake3::keyed_hash(salt, bytes).as_bytes())
    }

    /// The digest of everything `reader` yields.
    pub fn of_reader(mut reader: impl Read) -> io::Result<Self> {
        let mut hasher = blake3::Hasher::new();
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = reader.read(&mut buf)?;
            if n == 0 {
                break;
            }
            hasher.update(&buf[..n]);
        }
        Ok(Self(*hasher.finalize().as_bytes()))
    }

    /// The digest of a file's bytes (memory-mapping is not used: files may change under us,
    /// and a streaming read bounds memory).
    pub fn of_file(path: &Path) -> io::Result<Self> {
        Self::of_reader(std::fs::File::open(path)?)
    }

    /// Lowercase hex, 64 characters.
    pub fn to_hex(&self) -> String {
        let mut s = String::with_capacity(64);
        for b in self.0 {
            s.push(HEX[(b >> 4) as usize] as char);
            s.push(HEX[(b & 0xf) as usize] as char);
        }
        s
    }

    /// The first `n` hex characters, for display.
    pub fn short(&self) -> String {
        let mut h = self.to_hex();
        h.truncate(12);
        h
    }
}

const HEX: &[u8; 16] = b"0123456789abcdef";

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

impl fmt::Debug for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Digest({})", self.short())
    }
}

/// A string that is not 64 hex characters.
#[derive(Debug, thiserror::Error)]
#[error("not a digest (want 64 hex characters): {0:?}")]
pub struct BadDigest(pub String);

impl FromStr for Digest {
    type Err = BadDigest;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bytes = s.as_bytes();
        if bytes.len() != 64 {
            return Err(BadDigest(s.to_owned()));
        }
        let mut out = [0u8; 32];
        for (i, pair) in bytes.chunks_exact(2).enumerate() {
            let hi = hex_val(pair[0]).ok_or_else(|| BadDigest(s.to_owned()))?;
            let lo = hex_val(pair[1]).ok_or_else(|| BadDigest(s.to_owned()))?;
            out[i] = (hi << 4) | lo;
        }
        Ok(Self(out))
    }
}

fn hex_val(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

impl Serialize for Digest {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if s.is_human_readable() {
            s.serialize_str(&self.to_hex())
        } else {
            s.serialize_bytes(&self.0)
        }
    }
}

impl<'de> Deserialize<'de> for Digest {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        // Accept both forms whatever the format claims: serde buffers internally tagged enums
        // (run events) through a format-neutral value that reports itself human-readable
        // even when the bytes came from MessagePack.
        d.deserialize_any(DigestVisitor)
    }
}

struct DigestVisitor;

impl<'de> serde::de::Visitor<'de> for DigestVisitor {
    type Value = Digest;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("32 bytes or 64 hex characters")
    }

    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Digest, E> {
        v.parse().map_err(E::custom)
    }

    fn visit_bytes<E: serde::de::Error>(self, v: &[u8]) -> Result<Digest, E> {
        let arr: [u8; 32] = v.try_into().map_err(|_| E::invalid_length(v.len(), &"32 bytes"))?;
        Ok(Digest(arr))
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Digest, A::Error> {
        let mut arr = [0u8; 32];
        for (i, slot) in arr.iter_mut().enumerate() {
            *slot = seq
                .next_element()?
                .ok_or_else(|| serde::de::Error::invalid_length(i, &"32 bytes"))?;
        }
        if seq.next_element::<u8>()?.is_some() {
            return Err(serde::de::Error::invalid_length(33, &"32 bytes"));
        }
        Ok(Digest(arr))
    }
}

/// An incremental hasher for folding structured data into a [`Digest`] canonically: every
/// field is written with a tag and a length prefix, so no two different field sequences
/// produce the same byte stream.
#[derive(Default)]
pub struct Fold {
    hasher: blake3::Hasher,
}

impl Fold {
    /// A fold whose first bytes are a domain separator (`"prova-key-v1"`, …).
    pub fn new(domain: &str) -> Self {
        let mut f = Self { hasher: blake3::Hasher::new() };
        f.str(domain);
        f
    }

    /// Appends raw bytes with their length.
    pub fn bytes(&mut self, b: &[u8]) -> &mut Self {
        self.hasher.update(&(b.len() as u64).to_le_bytes());
        self.hasher.update(b);
        self
    }

    /// Appends a string with its length.
    pub fn str(&mut self, s: &str) -> &mut Self {
        self.bytes(s.as_bytes())
    }

    /// Appends a one-byte tag (a field discriminator).
    pub fn tag(&mut self, t: u8) -> &mut Self {
        self.hasher.update(&[t]);
        self
    }

    /// Appends an integer.
    pub fn u64(&mut self, v: u64) -> &mut Self {
        self.hasher.update(&v.to_le_bytes());
        self
    }

    /// Appends a digest.
    pub fn digest(&mut self, d: &Digest) -> &mut Self {
        self.hasher.update(&d.0);
        self
    }

    /// The folded digest.
    pub fn finish(&self) -> Digest {
        Digest(*self.hasher.finalize().as_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_round_trip() {
        let d = Digest::of(b"hello");
        let back: Digest = d.to_hex().parse().unwrap();
        assert_eq!(d, back);
        assert!("zz".parse::<Digest>().is_err());
        assert!("g".repeat(64).parse::<Digest>().is_err());
    }

    #[test]
    fn serde_forms() {
        let d = Digest::of(b"x");
        let json = serde_json_like(&d);
        assert_eq!(json.len(), 64);
        let bin = rmp_serde::to_vec(&d).unwrap();
        assert_eq!(bin.len(), 34); // bin8 header + length + 32 bytes
        let back: Digest = rmp_serde::from_slice(&bin).unwrap();
        assert_eq!(back, d);
        assert!(
            rmp_serde::from_slice::<Digest>(
                &rmp_serde::to_vec(&serde_bytes::Bytes::new(b"short")).unwrap()
            )
            .is_err()
        );
    }

    fn serde_json_like(d: &Digest) -> String {
        d.to_hex()
    }

    #[test]
    fn fold_is_length_prefixed() {
        let a = Fold::new("t").str("ab").str("c").finish();
        let b = Fold::new("t").str("a").str("bc").finish();
        assert_ne!(a, b);
    }
}
