//! Frames: a 4-byte big-endian length, then that many bytes of body (one MessagePack map).
//!
//! The decoder tells "need more bytes" (`Ok(None)`) from "this frame is too large"
//! (`Ok(Some(Frame::TooLarge))`). A frame that is too large is skipped without ever being
//! buffered, so the connection stays in sync and the peer gets an error reply for it.

use bytes::{Buf, BufMut, Bytes, BytesMut};

/// 64 MiB: the default limit on one frame's body.
pub const DEFAULT_MAX_FRAME_BYTES: usize = 64 * 1024 * 1024;

const HEADER: usize = 4;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    /// A whole frame body.
    Body(Bytes),
    /// A frame whose declared length exceeds the limit; its body was (or is being) skipped.
    TooLarge { len: usize },
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum FrameError {
    #[error("frame of {len} bytes exceeds the limit of {max} bytes")]
    TooLarge { len: usize, max: usize },
}

/// Incremental frame decoder over a growing buffer.
#[derive(Debug, Clone)]
pub struct FrameDecoder {
    max: usize,
    /// Bytes of an oversize body still to discard.
    skipping: usize,
}

impl FrameDecoder {
    pub fn new(max_frame_bytes: usize) -> Self {
        FrameDecoder {
            max: max_frame_bytes,
            skipping: 0,
        }
    }

    pub fn max_frame_bytes(&self) -> usize {
        self.max
    }

    /// Takes the next frame out of `buf`, if a whole one (or a whole header of an oversize one)
    /// is there. Oversize frames are reported once, as soon as their header is read, and their
    /// body is discarded as it arrives.
    pub fn decode(&mut self, buf: &mut BytesMut) -> Option<Frame> {
        if self.skipping > 0 {
            let n = self.skipping.min(buf.len());
            buf.advance(n);
            self.skipping -= n;
            if self.skipping > 0 {
                return None;
            }
        }
        if buf.len() < HEADER {
            return None;
        }
        let len = u32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]) as usize;
        if len > self.max {
            buf.advance(HEADER);
            // Drain what is already here so the caller's buffer does not hold it.
            let n = len.min(buf.len());
            buf.advance(n);
            self.skipping = len - n;
            return Some(Frame::TooLarge { len });
        }
        if buf.len() < HEADER + len {
            buf.reserve(HEADER + len - buf.len());
            return None;
        }
        buf.advance(HEADER);
        Some(Frame::Body(buf.split_to(len).freeze()))
    }

    /// True while the decoder is in the middle of a frame (header or body not complete).
    pub fn is_mid_frame(&self, buf: &BytesMut) -> bool {
        self.skipping > 0 || !buf.is_empty()
    }
}

/// Writes one frame (header + body) to `dst`.
pub fn encode_frame(body: &[u8], max: usize, dst: &mut BytesMut) -> Result<(), FrameError> {
    if body.len() > max || body.len() > u32::MAX as usize {
        return Err(FrameError::TooLarge { len: body.len(), max });
    }
    dst.reserve(HEADER + body.len());
    dst.put_u32(body.len() as u32);
    dst.put_slice(body);
    Ok(())
}

/// Writes one frame whose body `write` puts straight after the header in `dst`, so the body
/// needs no buffer of its own (a buffer `dst` keeps between frames stops growing). A body over
/// `max` is taken back out: `dst` is left as it was, and the error gives the body's length.
pub fn encode_frame_with(dst: &mut BytesMut, max: usize, write: impl FnOnce(&mut BytesMut)) -> Result<(), FrameError> {
    let start = dst.len();
    dst.put_u32(0);
    write(dst);
    let len = dst.len() - start - HEADER;
    if len > max || len > u32::MAX as usize {
        dst.truncate(start);
        return Err(FrameError::TooLarge { len, max });
    }
    dst[start..start + HEADER].copy_from_slice(&(len as u32).to_be_bytes());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn framed(bodies: &[Vec<u8>]) -> Vec<u8> {
        let mut out = BytesMut::new();
        for b in bodies {
            encode_frame(b, usize::MAX, &mut out).unwrap();
        }
        out.to_vec()
    }

    #[test]
    fn a_body_written_in_place_frames_as_encode_frame_does_and_an_oversized_one_is_taken_back() {
        let mut out = BytesMut::new();
        encode_frame(b"first", usize::MAX, &mut out).unwrap();
        encode_frame_with(&mut out, 16, |b| b.put_slice(b"second")).unwrap();
        assert_eq!(out.to_vec(), framed(&[b"first".to_vec(), b"second".to_vec()]));
        let before = out.to_vec();
        let err = encode_frame_with(&mut out, 4, |b| b.put_slice(b"too long")).unwrap_err();
        assert!(matches!(err, FrameError::TooLarge { len: 8, max: 4 }), "{err:?}");
        assert_eq!(out.to_vec(), before);
    }

    #[test]
    fn needs_more_bytes_until_whole() {
        let wire = framed(&[b"hello".to_vec()]);
        let mut dec = FrameDecoder::new(1024);
        let mut buf = BytesMut::new();
        for (i, byte) in wire.iter().enumerate() {
            buf.put_u8(*byte);
            let got = dec.decode(&mut buf);
            if i + 1 < wire.len() {
                assert_eq!(got, None, "frame complete too early at byte {i}");
            } else {
                assert_eq!(got, Some(Frame::Body(Bytes::from_static(b"hello"))));
            }
        }
    }

    #[test]
    fn oversize_frame_is_reported_once_and_skipped() {
        let wire = framed(&[vec![7u8; 100], b"next".to_vec()]);
        let mut dec = FrameDecoder::new(10);
        let mut buf = BytesMut::from(&wire[..50]);
        assert_eq!(dec.decode(&mut buf), Some(Frame::TooLarge { len: 100 }));
        assert_eq!(dec.decode(&mut buf), None);
        assert!(buf.is_empty(), "oversize body must not be buffered");
        buf.extend_from_slice(&wire[50..]);
        assert_eq!(dec.decode(&mut buf), Some(Frame::Body(Bytes::from_static(b"next"))));
    }

    #[test]
    fn encode_refuses_oversize() {
        let mut out = BytesMut::new();
        assert_eq!(
            encode_frame(&[0; 11], 10, &mut out),
            Err(FrameError::TooLarge { len: 11, max: 10 })
        );
        assert!(out.is_empty());
    }

    proptest! {
        /// Any sequence of frames, split into chunks at arbitrary points, decodes to the same
        /// sequence of bodies.
        #[test]
        fn split_anywhere_decodes_the_same(
            bodies in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..64), 1..6),
            cuts in proptest::collection::vec(1usize..17, 0..40),
        ) {
            let wire = framed(&bodies);
            let mut dec = FrameDecoder::new(1024);
            let mut buf = BytesMut::new();
            let mut got = Vec::new();
            let mut pos = 0;
            let mut cuts = cuts.into_iter();
            while pos < wire.len() {
                let step = cuts.next().unwrap_or(wire.len()).min(wire.len() - pos);
                buf.extend_from_slice(&wire[pos..pos + step]);
                pos += step;
                while let Some(frame) = dec.decode(&mut buf) {
                    match frame {
                        Frame::Body(b) => got.push(b.to_vec()),
                        Frame::TooLarge { .. } => prop_assert!(false, "no frame is too large here"),
                    }
                }
            }
            prop_assert_eq!(got, bodies);
        }
    }
}
