//! Tiny generated media for the demo: solid-colour PNG images and a short WAV tone.
//!
//! Generated rather than embedded so the bytes are ours and any size or colour works.
//! PNG (RFC 2083) with an uncompressed ("stored") zlib stream; WAV is 16-bit mono PCM.

/// An RGB colour.
pub type Rgb = [u8; 3];

/// Named colours understood by [`parse_color`].
pub const COLORS: [(&str, Rgb); 8] = [
    ("red", [0xe5, 0x39, 0x35]),
    ("orange", [0xfb, 0x8c, 0x00]),
    ("yellow", [0xfd, 0xd8, 0x35]),
    ("green", [0x43, 0xa0, 0x47]),
    ("blue", [0x1e, 0x88, 0xe5]),
    ("purple", [0x8e, 0x24, 0xaa]),
    ("black", [0, 0, 0]),
    ("white", [0xff, 0xff, 0xff]),
];

/// Reads a colour name from [`COLORS`] or `#rrggbb`.
pub fn parse_color(s: &str) -> Option<Rgb> {
    let s = s.trim();
    if let Some(hex) = s.strip_prefix('#') {
        if hex.len() != 6 || !hex.is_ascii() {
            return None;
        }
        let byte = |i: usize| u8::from_str_radix(&hex[i..i + 2], 16).ok();
        return Some([byte(0)?, byte(2)?, byte(4)?]);
    }
    COLORS
        .iter()
        .find(|(name, _)| name.eq_ignore_ascii_case(s))
        .map(|(_, rgb)| *rgb)
}

/// Largest width or height [`png`] draws; larger values are clamped.
pub const MAX_SIDE: u32 = 1024;

/// A `width`×`height` PNG (each side clamped to 1..=[`MAX_SIDE`]) whose pixel at
/// (x, y) is `pixel(x, y)`.
pub fn png(width: u32, height: u32, pixel: impl Fn(u32, u32) -> Rgb) -> Vec<u8> {
    let (width, height) = (width.clamp(1, MAX_SIDE), height.clamp(1, MAX_SIDE));
    let mut raw = Vec::with_capacity(((width * 3 + 1) * height) as usize);
    for y in 0..height {
        raw.push(0); // filter type: None
        for x in 0..width {
            raw.extend_from_slice(&pixel(x, y));
        }
    }
    let mut ihdr = Vec::with_capacity(13);
    ihdr.extend_from_slice(&width.to_be_bytes());
    ihdr.extend_from_slice(&height.to_be_bytes());
    ihdr.extend_from_slice(&[8, 2, 0, 0, 0]); // 8-bit RGB, deflate, no filter, no interlace
    let mut out = b"\x89PNG\r\n\x1a\n".to_vec();
    chunk(&mut out, b"IHDR", &ihdr);
    chunk(&mut out, b"IDAT", &zlib_stored(&raw));
    chunk(&mut out, b"IEND", &[]);
    out
}

/// A solid-colour PNG.
pub fn solid_png(width: u32, height: u32, rgb: Rgb) -> Vec<u8> {
    png(width, height, |_, _| rgb)
}

fn chunk(out: &mut Vec<u8>, kind: &[u8; 4], data: &[u8]) {
    out.extend_from_slice(&(data.len() as u32).to_be_bytes());
    let start = out.len();
    out.extend_from_slice(kind);
    out.extend_from_slice(data);
    let crc = crc32(&out[start..]);
    out.extend_from_slice(&crc.to_be_bytes());
}

/// A zlib stream (RFC 1950) of stored deflate blocks (RFC 1951 §3.2.4).
fn zlib_stored(data: &[u8]) -> Vec<u8> {
    let mut out = vec![0x78, 0x01];
    let mut blocks = data.chunks(0xffff).peekable();
    if blocks.peek().is_none() {
        out.extend_from_slice(&[1, 0, 0, 0xff, 0xff]);
    }
    while let Some(block) = blocks.next() {
        out.push(u8::from(blocks.peek().is_none()));
        let len = block.len() as u16;
        out.extend_from_slice(&len.to_le_bytes());
        out.extend_from_slice(&(!len).to_le_bytes());
        out.extend_from_slice(block);
    }
    out.extend_from_slice(&adler32(data).to_be_bytes());
    out
}

fn crc32(data: &[u8]) -> u32 {
    let mut crc = 0xffff_ffffu32;
    for &b in data {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0xedb8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

fn adler32(data: &[u8]) -> u32 {
    let (mut a, mut b) = (1u32, 0u32);
    for &byte in data {
        a = (a + u32::from(byte)) % 65521;
        b = (b + a) % 65521;
    }
    (b << 16) | a
}

/// A mono 16-bit PCM WAV of a sine tone (`frequency` Hz for `millis` ms, at most 10 s,
/// sampled at 8 kHz).
pub fn wav_tone(frequency: f64, millis: u32) -> Vec<u8> {
    const RATE: u32 = 8000;
    let samples = RATE * millis.min(10_000) / 1000;
    let data_len = samples * 2;
    let mut out = Vec::with_capacity(44 + data_len as usize);
    out.extend_from_slice(b"RIFF");
    out.extend_from_slice(&(36 + data_len).to_le_bytes());
    out.extend_from_slice(b"WAVEfmt ");
    out.extend_from_slice(&16u32.to_le_bytes()); // fmt chunk size
    out.extend_from_slice(&1u16.to_le_bytes()); // PCM
    out.extend_from_slice(&1u16.to_le_bytes()); // mono
    out.extend_from_slice(&RATE.to_le_bytes());
    out.extend_from_slice(&(RATE * 2).to_le_bytes()); // byte rate
    out.extend_from_slice(&2u16.to_le_bytes()); // block align
    out.extend_from_slice(&16u16.to_le_bytes()); // bits per sample
    out.extend_from_slice(b"data");
    out.extend_from_slice(&data_len.to_le_bytes());
    for i in 0..samples {
        let t = f64::from(i) / f64::from(RATE);
        let v = (t * frequency * std::f64::consts::TAU).sin() * 0.3 * f64::from(i16::MAX);
        out.extend_from_slice(&(v as i16).to_le_bytes());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checksums_match_known_values() {
        assert_eq!(crc32(b"IEND"), 0xae42_6082);
        assert_eq!(crc32(b"123456789"), 0xcbf4_3926);
        assert_eq!(adler32(b"Wikipedia"), 0x11e6_0398);
    }

    #[test]
    fn png_has_valid_structure() {
        let img = solid_png(2, 3, [1, 2, 3]);
        assert_eq!(&img[..8], b"\x89PNG\r\n\x1a\n");
        assert_eq!(&img[12..16], b"IHDR");
        assert_eq!(&img[16..20], &2u32.to_be_bytes());
        assert_eq!(&img[20..24], &3u32.to_be_bytes());
        assert_eq!(&img[img.len() - 12..], b"\0\0\0\0IEND\xaeB`\x82");
        // IDAT payload: zlib header, one final stored block of 3 rows × (1 + 2×3) bytes.
        let idat = &img[33 + 8..];
        assert_eq!(&idat[..3], &[0x78, 0x01, 0x01]);
        assert_eq!(u16::from_le_bytes([idat[3], idat[4]]), 21);
    }

    #[test]
    fn wav_header_is_consistent() {
        let w = wav_tone(440.0, 50);
        assert_eq!(&w[..4], b"RIFF");
        assert_eq!(&w[8..16], b"WAVEfmt ");
        let data_len = u32::from_le_bytes([w[40], w[41], w[42], w[43]]);
        assert_eq!(data_len, 800);
        assert_eq!(w.len(), 44 + 800);
    }

    #[test]
    fn parses_colors() {
        assert_eq!(parse_color("Red"), Some(COLORS[0].1));
        assert_eq!(parse_color("#0a0B0c"), Some([10, 11, 12]));
        assert_eq!(parse_color("#0a0B0"), None);
        assert_eq!(parse_color("#ééé"), None);
        assert_eq!(parse_color("mauve"), None);
    }
}
