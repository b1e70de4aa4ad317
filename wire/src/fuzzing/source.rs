//! Turning a fuzzer's bytes into structure: each call takes what it needs from the front and
//! answers a default (zero, empty) once the bytes run out, so every input is a valid recipe.

/// The fuzzer's bytes, consumed front to back.
#[derive(Clone, Debug)]
pub struct Source<'a> {
    data: &'a [u8],
}

impl<'a> Source<'a> {
    pub fn new(data: &'a [u8]) -> Self {
        Self { data }
    }

    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    pub fn u8(&mut self) -> u8 {
        match self.data.split_first() {
            Some((first, rest)) => {
                self.data = rest;
                *first
            }
            None => 0,
        }
    }

    pub fn u16(&mut self) -> u16 {
        u16::from_le_bytes([self.u8(), self.u8()])
    }

    pub fn u32(&mut self) -> u32 {
        u32::from_le_bytes([self.u8(), self.u8(), self.u8(), self.u8()])
    }

    pub fn u64(&mut self) -> u64 {
        u64::from(self.u32()) | (u64::from(self.u32()) << 32)
    }

    pub fn i64(&mut self) -> i64 {
        self.u64() as i64
    }

    /// Up to `len` bytes (fewer when the input runs out).
    pub fn bytes(&mut self, len: usize) -> &'a [u8] {
        let (taken, rest) = self.data.split_at(len.min(self.data.len()));
        self.data = rest;
        taken
    }

    /// A length-prefixed byte string of at most `max` bytes.
    pub fn chunk(&mut self, max: usize) -> &'a [u8] {
        let len = usize::from(self.u16()) % (max + 1);
        self.bytes(len)
    }

    /// Everything left.
    pub fn rest(&mut self) -> &'a [u8] {
        std::mem::take(&mut self.data)
    }

    /// An index below `n` (0 when `n` is 0).
    pub fn below(&mut self, n: usize) -> usize {
        if n == 0 { 0 } else { self.u32() as usize % n }
    }
}
